/*
 * fuzz_jpeg_transcode.c — the lossless restart-marker rewrite
 * (src/decode/jpeg_transcode.c) through both its placements: the MinIO
 * cache's (nst_decode_transcode(): a marker every MCU, on a reused decoder)
 * and the public entry (nostall_transcode_jpeg(): options drawn from the
 * input -- a marker every 1-4 MCUs or 1-2 MCU rows, metadata kept or
 * not). Coefficients are read by our Huffman decoder (or libjpeg-turbo's
 * for progressive files).
 *
 * Oracles: the cache's rewrite never fails (1 or 0, nothing else); the same
 * input gives the same bytes twice (once after another input); a rewrite
 * decodes (full), with the pixels of the original wherever the original
 * decodes; a region of the rewrite (the restart-marker fast path) covers
 * the window and has the pixels of the original's region where the two
 * overlap (the fast path may return another window, of whole restart
 * intervals); a rewrite is not rewritten again (it has the restart markers
 * asked for); the public entry gives the cache's bytes for the cache's
 * options, returns 0 or a damage / not-a-JPEG / memory status (never
 * anything else), stays within its bound, and its rewrites (other
 * intervals) decode to the original's pixels too.
 */
#include "fuzz_decode.h"

static nst_decoder *d, *orig, *rew;
static nst_buf out, out2;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The public entry with options drawn from the input's hash. */
static void public_entry(const uint8_t *data, size_t size, const nst_buf *cached, size_t cached_n,
                         int cache_rc)
{
    static nst_buf pub;
    const size_t cap = nostall_transcode_bound(size);
    if (cap == SIZE_MAX || nst_buf_reserve(&pub, cap) < 0) return;
    size_t n = 0;
    nostall_transcode_result res;
    /* the cache's options: the cache's bytes */
    const nostall_transcode_options cache_opts = {.restart_mcus = 1,
                                                  .max_pixels = FUZZ_MAX_PIXELS,
                                                  .flags = NOSTALL_TRANSCODE_DROP_METADATA};
    int rc = nostall_transcode_jpeg(pub.data, cap, &n, data, size, &cache_opts, sizeof cache_opts,
                                    &res, sizeof res);
    FUZZ_CHECK(rc == 0 || rc == NOSTALL_E_TRUNCATED || rc == NOSTALL_E_CORRUPT ||
                   rc == NOSTALL_E_NOT_IMAGE || rc == NOSTALL_E_NOMEM,
               "public transcode returned %d (%s)", rc, res.message);
    FUZZ_CHECK((cache_rc == 1) == (rc == 0 && n > 0), "the cache rewrote: %d, the public entry: %d",
               cache_rc, rc);
    if (cache_rc == 1)
        FUZZ_CHECK(n == cached_n && memcmp(pub.data, cached->data, n) == 0,
                   "the public entry's bytes differ from the cache's");
    /* other options: decodes to the original's pixels */
    const uint64_t h = fuzz_hash(data, size);
    nostall_transcode_options o = {.max_pixels = FUZZ_MAX_PIXELS};
    if (h & 1)
        o.restart_rows = 1 + (uint32_t)(h >> 1 & 1);
    else
        o.restart_mcus = 1 + (uint32_t)(h >> 1 & 3);
    if (h & 8) o.flags = NOSTALL_TRANSCODE_DROP_METADATA;
    rc = nostall_transcode_jpeg(pub.data, cap, &n, data, size, &o, sizeof o, &res, sizeof res);
    FUZZ_CHECK(rc == 0 || rc == NOSTALL_E_TRUNCATED || rc == NOSTALL_E_CORRUPT ||
                   rc == NOSTALL_E_NOT_IMAGE || rc == NOSTALL_E_NOMEM,
               "public transcode returned %d (%s)", rc, res.message);
    if (rc != 0 || n == 0) return;
    FUZZ_CHECK(n <= cap && res.restart_interval > 0, "a rewrite of %zu bytes", n);
    nst_image a, b;
    const int rb = nst_decode(rew, pub.data, n, FUZZ_PATH, NULL, 0, 0, &b);
    FUZZ_CHECK(rb == 0, "the public rewrite does not decode: %d", rb);
    fuzz_check_image(&b, "public rewrite");
    const int ra = nst_decode(orig, data, size, FUZZ_PATH, NULL, 0, 0, &a);
    if (ra == 0) FUZZ_CHECK(fuzz_same_image(&a, &b), "the public rewrite's pixels differ");
}

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
    public_entry(data, size, &out, n, rc);
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
