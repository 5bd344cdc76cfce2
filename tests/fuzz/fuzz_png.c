/*
 * fuzz_png.c — PNG decoding (src/decode/png.c over libpng): probe and
 * full decode (PNG ignores region hints; one region decode checks that).
 *
 * Every input is decoded twice: as nostall decodes (a CRC error fails the
 * item), and with CRC errors ignored (nst_png_crc_check), so that mutated
 * inputs reach libpng's inflate, filters and our transforms instead of
 * stopping at the first CRC (as libpng's own fuzz target does).
 *
 * Oracles: every status is a bad item's naming the item; probe and decode
 * agree (a decode that succeeds had a probe that did, with the same
 * dimensions); a second decode of the same bytes, after a decode of other
 * bytes by the same decoder, gives the same answer; the image is whole
 * and every byte of it can be read. Memory: libFuzzer's -rss_limit_mb and
 * -malloc_limit_mb (make fuzz sets 512 MB) catch an input that makes libpng
 * allocate what a chunk declares.
 */
#include "fuzz_decode.h"

static nst_decoder *strict, *strict2, *nocrc, *nocrc2;
static nst_buf copy;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void one(nst_decoder *d, nst_decoder *other, const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!strict) {
        strict = fuzz_decoder();
        strict2 = fuzz_decoder();
        nocrc = fuzz_decoder();
        nocrc2 = fuzz_decoder();
        nst_png_crc_check(nocrc, 0);
        nst_png_crc_check(nocrc2, 0);
    }
    one(strict, strict2, data, size);
    one(nocrc, nocrc2, data, size);
    return 0;
}

static void one(nst_decoder *d, nst_decoder *other, const uint8_t *data, size_t size)
{
    nst_image_info info;
    const int prc = nst_decode_probe(d, data, size, FUZZ_PATH, &info);
    fuzz_check_status(prc, "probe");
    nst_image im;
    const int rc = nst_decode(d, data, size, FUZZ_PATH, NULL, 0, 0, &im);
    fuzz_check_status(rc, "decode");
    if (rc < 0) return;
    FUZZ_CHECK(prc == 0 && info.width == im.width && info.height == im.height,
               "decoded %ux%u, probe %d %ux%u", im.width, im.height, prc, info.width, info.height);
    FUZZ_CHECK(im.x0 == 0 && im.y0 == 0 && im.scale_den == 1 && im.full_width == im.width &&
                   im.full_height == im.height && im.stride == (size_t)im.width * 3,
               "not a whole image");
    fuzz_check_image(&im, "decode");
    const size_t bytes = im.stride * im.height;
    if (nst_buf_reserve(&copy, bytes) < 0) abort();
    memcpy(copy.data, im.data, bytes);

    /* (other formats go to other targets: a JPEG takes region hints) */
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
    if (size < 8 || memcmp(data, sig, 8) != 0) return;

    /* the other decoder, after a tiny valid PNG, and with a region hint */
    static const uint8_t one[] = {0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00,
                                  0x00, 0x0d, 0x49, 0x48, 0x44, 0x52, 0x00, 0x00, 0x00, 0x01,
                                  0x00, 0x00, 0x00, 0x01, 0x08, 0x00, 0x00, 0x00, 0x00, 0x3a,
                                  0x7e, 0x9b, 0x55, 0x00, 0x00, 0x00, 0x0a, 0x49, 0x44, 0x41,
                                  0x54, 0x78, 0x9c, 0x63, 0x68, 0x00, 0x00, 0x00, 0x82, 0x00,
                                  0x81, 0x77, 0xcd, 0x72, 0xb6, 0x00, 0x00, 0x00, 0x00, 0x49,
                                  0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82};
    nst_image o;
    FUZZ_CHECK(nst_decode(other, one, sizeof one, FUZZ_PATH, NULL, 0, 0, &o) == 0,
               "the 1x1 PNG does not decode");
    const nst_window roi = {0, 0, 1, 1};
    const int rc2 = nst_decode(other, data, size, FUZZ_PATH, &roi, 1, 1, &o);
    FUZZ_CHECK(rc2 == 0 && o.width == im.width && o.height == im.height &&
                   memcmp(o.data, copy.data, bytes) == 0,
               "a second decode differs (%d)", rc2);
}
