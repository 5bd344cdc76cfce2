/*
 * fuzz_jpeg.c — JPEG decoding through every path: probe, full decode, and
 * region decode at DCT scales 1/1, 1/2, 1/4 and 1/8 (rows skipped above the
 * region, MCU columns beside it, AC terms left out at 1/8); our Huffman
 * decoder in its BMI2 build and its plain build; the restart-marker fast
 * path (jpeg_rst.c) and the normal path; libjpeg-turbo's own decoder where
 * ours declines (progressive, arithmetic, multi-scan files).
 *
 * Oracles, besides "no crash, leak or undefined behaviour":
 *   - every status is a bad item's, naming the item (fuzz_decode.h);
 *   - probe and decode agree: a decode that succeeds had a probe that did,
 *     with the same dimensions;
 *   - the two builds of our Huffman decoder give the same status and the
 *     same pixels, full and region;
 *   - a region decode covers the window asked for;
 *   - where the normal path decodes a region, the restart-marker fast path
 *     does too, with the same pixels where the two overlap (it reads a
 *     subset of the same data and may return another window, of whole
 *     restart intervals; it may succeed where the normal path fails, on
 *     damage outside the region's restart intervals).
 */
#include "fuzz_decode.h"

static nst_decoder *d_bmi2, *d_plain, *d_norst;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!d_bmi2) {
        d_bmi2 = fuzz_decoder();
        d_plain = fuzz_decoder();
        nst_jpeg_huff_plain(d_plain, 1);
        d_norst = fuzz_decoder();
        nst_jpeg_rst_enable(d_norst, 0);
    }
    nst_image_info info;
    const int prc = nst_decode_probe(d_bmi2, data, size, FUZZ_PATH, &info);
    fuzz_check_status(prc, "probe");

    nst_image a, b;
    const int ra = nst_decode(d_bmi2, data, size, FUZZ_PATH, NULL, 0, 0, &a);
    fuzz_check_status(ra, "full decode");
    const int rb = nst_decode(d_plain, data, size, FUZZ_PATH, NULL, 0, 0, &b);
    FUZZ_CHECK(ra == rb, "full decode: BMI2 build %d, plain build %d", ra, rb);
    if (ra == 0) {
        FUZZ_CHECK(prc == 0 && info.width == a.src_width && info.height == a.src_height,
                   "decoded %ux%u, probe %d %ux%u", a.src_width, a.src_height, prc, info.width,
                   info.height);
        FUZZ_CHECK(a.x0 == 0 && a.y0 == 0 && a.scale_den == 1 && a.width == info.width &&
                       a.height == info.height,
                   "full decode is not the whole image");
        fuzz_check_image(&a, "full decode");
        FUZZ_CHECK(fuzz_same_image(&a, &b), "full decode: BMI2 and plain builds differ");
    }
    if (prc < 0) return 0;

    uint64_t h = fuzz_hash(data, size);
    for (unsigned den = 1; den <= 8; den *= 2) {
        h = h * 0x9E3779B97F4A7C15ull + den;
        nst_window roi;
        uint32_t out;
        fuzz_region(h, info.width, info.height, den, &roi, &out);
        nst_image r, p, n;
        const int rr = nst_decode(d_bmi2, data, size, FUZZ_PATH, &roi, out, out, &r);
        fuzz_check_status(rr, "region decode");
        const int rp = nst_decode(d_plain, data, size, FUZZ_PATH, &roi, out, out, &p);
        FUZZ_CHECK(rr == rp, "region 1/%u: BMI2 build %d, plain build %d", den, rr, rp);
        const int rn = nst_decode(d_norst, data, size, FUZZ_PATH, &roi, out, out, &n);
        fuzz_check_status(rn, "region decode without restart path");
        if (rr == 0) {
            fuzz_check_image(&r, "region decode");
            fuzz_check_covers(&r, &roi, "region decode");
            FUZZ_CHECK(r.src_width == info.width && r.src_height == info.height,
                       "region decode: source size");
            FUZZ_CHECK(fuzz_same_image(&r, &p), "region 1/%u: BMI2 and plain builds differ", den);
        }
        if (rn == 0) {
            fuzz_check_image(&n, "region decode without restart path");
            fuzz_check_covers(&n, &roi, "region decode without restart path");
            FUZZ_CHECK(rr == 0, "region 1/%u: the normal path decodes, the restart path %d", den,
                       rr);
            FUZZ_CHECK(fuzz_same_overlap(&r, &n, &roi, out),
                       "region 1/%u: restart path and normal path differ", den);
        }
    }
    return 0;
}
