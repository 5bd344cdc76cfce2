/*
 * fuzz_jpeg_diff.c — differential target: nostall's Huffman decoder
 * (src/decode/jpeg_huff.c) against libjpeg-turbo's on every input.
 *
 * Two decoders, ours and libjpeg-turbo's (nst_jpeg_huff_enable(d, 0)),
 * read the quantized DCT coefficients of the input
 * (nst_jpeg_coefficients(): jpeg_read_coefficients, every block of every
 * component) twice each: strictly, under the warning policy of a decode
 * (jpeg.c: a warning about damaged data stops the read and fails the item),
 * and leniently, where such warnings are only recorded and libjpeg goes on
 * as it does by default (zeros for what it could not decode), so the
 * coefficients exist even for damaged data. Then:
 *
 *   1. ours succeeds  =>  libjpeg-turbo's lenient read has exactly our
 *      coefficients. (Its strict read may still fail: its bit reader reads
 *      ahead, and a file cut right after the last coefficient, or a marker
 *      there, makes it warn about data no block needed. Equal
 *      coefficients prove the warning was about nothing we decoded.)
 *   2. libjpeg-turbo succeeds strictly  =>  ours succeeds too, unless ours
 *      found damage libjpeg-turbo passes over silently: an invalid Huffman
 *      code (JWRN_HUFF_BAD_CODE; libjpeg-turbo's fast path decodes those as
 *      0 without a warning), or 0xFF fill bytes before a stuffed zero
 *      (NST_JWRN_FILL_IN_DATA; libjpeg-turbo mixes two readings of the MCU,
 *      found by this target: crashes/jpeg_diff/ff-ff-00-*). Every other
 *      refusal of ours must have a refusal of libjpeg-turbo's behind it:
 *      our decoder detects every inconsistency libjpeg-turbo detects.
 * The first warnings of the two need not be the same ones (which damage
 * shows first depends on read-ahead); only the outcomes above are compared.
 *
 * The pixel paths, which use our decoder's other modes (blocks skipped
 * above and beside a region, AC terms left out at 1/8): a full decode and
 * a region decode at each DCT scale (restart-marker fast path off) by both
 * decoders give the same pixels whenever both succeed, and ours succeeds
 * where libjpeg-turbo's does (2 again).
 *
 * Files our decoder does not take (progressive, arithmetic, multi-scan,
 * 12-bit) are read by libjpeg-turbo on both sides: trivially equal.
 */
#include "fuzz_decode.h"

#include <jpeglib.h> /* after stdio.h (fuzz_decode.h): it uses FILE, size_t */
#include <jerror.h>

#include "decode/jpeg_impl.h" /* NST_JWRN_* */

static nst_decoder *own, *lj;
static nst_buf own_c, lj_c;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Rule 2 for one pair of statuses: a refusal of ours where libjpeg-turbo
 * succeeded is an invalid Huffman code. */
static void check_refusal(int ours, int theirs, int code, const char *msg, const char *what)
{
    if (theirs == 0 && ours < 0)
        FUZZ_CHECK(code == JWRN_HUFF_BAD_CODE || code == NST_JWRN_FILL_IN_DATA,
                   "%s: libjpeg-turbo succeeds, ours refuses (%d, code %d: %s)", what, ours, code,
                   msg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!own) {
        own = fuzz_decoder();
        lj = fuzz_decoder();
        nst_jpeg_huff_enable(own, 1);
        nst_jpeg_huff_enable(lj, 0);
        nst_jpeg_rst_enable(own, 0);
        nst_jpeg_rst_enable(lj, 0);
    }
    if (size < 3 || data[0] != 0xFF || data[1] != 0xD8 || data[2] != 0xFF) return 0;
    char own_msg[JMSG_LENGTH_MAX], lj_msg[JMSG_LENGTH_MAX];
    size_t own_n = 0, lj_n = 0;
    int own_code = 0, lj_code = 0;

    /* strict */
    const int so = nst_jpeg_coefficients(own, data, size, 0, &own_c, &own_n, &own_code, own_msg,
                                         sizeof own_msg);
    const int sl =
        nst_jpeg_coefficients(lj, data, size, 0, &lj_c, &lj_n, &lj_code, lj_msg, sizeof lj_msg);
    check_refusal(so, sl, own_code, own_msg, "coefficients");

    /* lenient: rule 1 */
    if (so == 0) {
        const int ll =
            nst_jpeg_coefficients(lj, data, size, 1, &lj_c, &lj_n, &lj_code, lj_msg, sizeof lj_msg);
        FUZZ_CHECK(ll == 0 || ll == NOSTALL_E_CORRUPT || ll == NOSTALL_E_TRUNCATED,
                   "libjpeg-turbo's lenient read: %d (%s)", ll, lj_msg);
        FUZZ_CHECK(lj_n == own_n, "coefficients: ours %zu, libjpeg-turbo's %zu", own_n, lj_n);
        const JCOEF *a = (const JCOEF *)(const void *)own_c.data;
        const JCOEF *b = (const JCOEF *)(const void *)lj_c.data;
        for (size_t i = 0; i < own_n; i++)
            FUZZ_CHECK(a[i] == b[i],
                       "coefficient %zu (block %zu): ours %d, libjpeg-turbo's %d (its read: %d, %s)",
                       i, i / 64, a[i], b[i], ll, lj_msg);
    }

    /* pixels: full and one region per scale */
    nst_image_info info;
    if (nst_decode_probe(own, data, size, FUZZ_PATH, &info) < 0) return 0;
    uint64_t h = fuzz_hash(data, size);
    for (unsigned den = 0; den <= 8; den = den ? den * 2 : 1) {
        nst_window roi;
        uint32_t out = 0;
        if (den) {
            h = h * 0x9E3779B97F4A7C15ull + den;
            fuzz_region(h, info.width, info.height, den, &roi, &out);
        }
        nst_image a, b;
        const int ra = nst_decode(own, data, size, FUZZ_PATH, den ? &roi : NULL, out, out, &a);
        char msg[512];
        snprintf(msg, sizeof msg, "%s", nostall_last_error());
        const int rb = nst_decode(lj, data, size, FUZZ_PATH, den ? &roi : NULL, out, out, &b);
        fuzz_check_status(ra, "decode (ours)");
        fuzz_check_status(rb, "decode (libjpeg-turbo's)");
        if (rb == 0 && ra < 0)
            FUZZ_CHECK(strstr(msg, "bad Huffman code") != NULL ||
                           strstr(msg, "fill bytes before a stuffed zero") != NULL,
                       "decode 1/%u: libjpeg-turbo succeeds, ours refuses: %s", den, msg);
        if (ra == 0 && rb == 0) {
            FUZZ_CHECK(fuzz_same_image(&a, &b), "decode 1/%u: pixels differ", den);
            if (den) fuzz_check_covers(&a, &roi, "region decode");
        }
    }
    return 0;
}
