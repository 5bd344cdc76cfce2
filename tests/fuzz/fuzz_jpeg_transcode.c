/*
 * fuzz_jpeg_transcode.c — the lossless rewrite for the MinIO cache
 * (nst_decode_transcode(), src/decode/jpeg_transcode.c): coefficients read
 * by our Huffman decoder (or libjpeg-turbo's for progressive files), written
 * back with a restart marker after every MCU.
 *
 * Oracles: the rewrite never fails (1 or 0, nothing else); the same input
 * gives the same bytes twice (once after another input); a rewrite decodes
 * (full), with the pixels of the original wherever the original decodes;
 * a region of the rewrite (the restart-marker fast path) covers the window
 * and has the pixels of the original's region where the two overlap (the
 * fast path may return another window, of whole restart intervals); and a rewrite is not
 * rewritten again (it has restart markers).
 */
#include "fuzz_decode.h"

static nst_decoder *d, *orig, *rew;
static nst_buf out, out2;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!d) {
        d = fuzz_decoder();
        orig = fuzz_decoder();
        rew = fuzz_decoder();
    }
    size_t n = 0, n2 = 0;
    const int rc = nst_decode_transcode(d, data, size, &out, &n);
    FUZZ_CHECK(rc == 0 || rc == 1, "transcode returned %d", rc);
    if (rc == 0) return 0;
    FUZZ_CHECK(n > 0 && n <= size + size / 8 + 4096, "rewrite of %zu bytes is %zu", size, n);

    /* determinism, after something else */
    static const uint8_t junk[4] = {0xFF, 0xD8, 0xFF, 0xD9};
    (void)nst_decode_transcode(d, junk, sizeof junk, &out2, &n2);
    FUZZ_CHECK(nst_decode_transcode(d, data, size, &out2, &n2) == 1 && n2 == n &&
                   memcmp(out.data, out2.data, n) == 0,
               "a second rewrite differs");
    FUZZ_CHECK(nst_decode_transcode(d, out.data, n, &out2, &n2) == 0,
               "a rewrite was rewritten again");

    nst_image a, b;
    const int rb = nst_decode(rew, out.data, n, FUZZ_PATH, NULL, 0, 0, &b);
    FUZZ_CHECK(rb == 0, "the rewrite does not decode: %d", rb);
    fuzz_check_image(&b, "rewrite");
    const int ra = nst_decode(orig, data, size, FUZZ_PATH, NULL, 0, 0, &a);
    fuzz_check_status(ra, "original");
    if (ra == 0) FUZZ_CHECK(fuzz_same_image(&a, &b), "the rewrite's pixels differ");

    uint64_t h = fuzz_hash(data, size);
    for (unsigned den = 1; den <= 8; den *= 2) {
        h = h * 0x9E3779B97F4A7C15ull + den;
        nst_window roi;
        uint32_t o;
        fuzz_region(h, b.src_width, b.src_height, den, &roi, &o);
        const int r2 = nst_decode(rew, out.data, n, FUZZ_PATH, &roi, o, o, &b);
        FUZZ_CHECK(r2 == 0, "a region of the rewrite does not decode: %d", r2);
        fuzz_check_image(&b, "region of the rewrite");
        fuzz_check_covers(&b, &roi, "region of the rewrite");
        const int r1 = nst_decode(orig, data, size, FUZZ_PATH, &roi, o, o, &a);
        fuzz_check_status(r1, "region of the original");
        if (r1 == 0)
            FUZZ_CHECK(fuzz_same_overlap(&a, &b, &roi, o),
                       "region 1/%u: the rewrite's pixels differ", den);
    }
    return 0;
}
