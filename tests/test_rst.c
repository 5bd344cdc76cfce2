/*
 * test_rst.c — the restart-marker fast path of JPEG region decode
 * (src/decode/jpeg_rst.c) against the normal region path on the same file.
 *
 *   exactness  JPEGs with a restart marker every 1, 2 or 3 MCU rows, or
 *              every k MCUs with k dividing the MCUs per row (k = 1, 2,
 *              ...: column mode) (4:2:0, 4:2:2, 4:4:0, 4:4:4, grayscale,
 *              CMYK; odd sizes), many random rois and output sizes (so
 *              every DCT scale): the fast path's pixels equal the normal
 *              path's over the rows both decoded, in full-image
 *              coordinates, bit for bit; and the fast path was taken (hit
 *              counter) whenever the region starts below the first restart
 *              interval row (or, in column mode, leaves out a group of k
 *              MCUs left or right of it).
 *   declined   no restart markers, an interval that is neither whole MCU
 *              rows nor divides a row, a progressive file with restarts:
 *              normal path only.
 *   truncated  a region whose intervals are whole decodes; one reaching
 *              the cut is E_TRUNCATED, as on the normal path (row and
 *              column mode).
 *   transcoded nst_decode_transcode() (jpeg_transcode.c) on files without
 *              restart markers (4:2:0, 4:2:2, 4:4:0, 4:4:4, grayscale;
 *              baseline and progressive; odd sizes): libjpeg's own
 *              baseline rewrite with a restart marker after every MCU,
 *              byte for byte, whose fast-path region decodes and full
 *              decode equal the original's normal-path ones; declined only
 *              when that rewrite is over len + len / 8 + 4 KiB. A smooth
 *              image with optimized tables whose standard-table rewrite is
 *              over that limit: rewritten with optimized tables (libjpeg's
 *              bytes), same pixels. Declined,
 *              leaving the error message alone and the decoder working:
 *              CMYK, RGB, 12-bit, arithmetic, a restart every MCU already
 *              (the rewrite itself), truncated, not JPEG, over max_pixels,
 *              a flat image the markers would triple (a file with a restart
 *              every MCU row is rewritten, same pixels). DC values a restart-marked
 *              baseline file cannot hold (+1024 declined, -1024 kept);
 *              progressive files with coefficients never sent or refined
 *              (libjpeg smooths them; a complete custom script is
 *              rewritten, same pixels); and 300 damaged files: no crash,
 *              the same answer twice, and a rewrite only when the damaged
 *              file's region decode succeeds with the rewrite's pixels.
 *   public     nostall_transcode_jpeg(), the same rewriter: the cache's
 *              bytes (metadata-free files); APPn/COM segments kept (or
 *              dropped with the flag), one JFIF; restart_mcus lowered to a
 *              divisor of the MCUs per row, restart_rows in whole rows (DRI
 *              and result agree), the original's pixels and the fast path
 *              every time, the interval asked for kept the second time;
 *              kept files (CMYK, RGB, 12-bit, over max_pixels, a buffer too
 *              small, markers that would triple a file, an incomplete
 *              progressive file) are status 0 with no bytes and the reason;
 *              damage is E_TRUNCATED/E_CORRUPT, bad options E_INVALID; a
 *              caller's shorter option and result structs.
 *   fuzz       1000 mutated restart-marked files (byte flips, marker
 *              damage, truncation): no crash (run under ASan by `make
 *              asan`), the same result twice, and when the normal path
 *              succeeds the fast path does too, with the same pixels.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#include "check.h"
#include "test_jpeg.h"
#include "common/rng.h"
#include "decode/decode.h"
#include "decode/decode_impl.h"

static uint64_t noise_s = 0x9E3779B97F4A7C15ull;
static uint32_t noise(void) { return test_xorshift(&noise_s); }

enum { SUB_420, SUB_422, SUB_440, SUB_444, SUB_GRAY, SUB_CMYK };
static const char *sub_name[] = {"4:2:0", "4:2:2", "4:4:0", "4:4:4", "gray", "cmyk"};

/* restart: > 0 restart_in_rows; < 0 restart_interval = -restart MCUs;
 * 0 none. */
static uint8_t *encode(int w, int h, int sub, int restart, int progressive, size_t *len)
{
    int comps = sub == SUB_GRAY ? 1 : sub == SUB_CMYK ? 4 : 3;
    uint8_t *px = malloc((size_t)w * h * comps);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < comps; c++)
                px[((size_t)y * w + x) * comps + c] =
                    (uint8_t)((x * (3 + c) + y * (5 - c) + (int)(noise() % 40) +
                               ((x / 7 + y / 5) % 2) * 60) &
                              255);
    test_jpeg_opts o = {w,
                        h,
                        comps,
                        comps == 1   ? JCS_GRAYSCALE
                        : comps == 4 ? JCS_CMYK
                                     : JCS_RGB,
                        sub == SUB_CMYK ? JCS_YCCK : JCS_UNKNOWN,
                        90,
                        progressive,
                        restart > 0 ? restart : 0,
                        0};
    test_jpeg_layout l = {.luma_h = (sub == SUB_420 || sub == SUB_422 || sub == SUB_CMYK) ? 2 : 1,
                          .luma_v = (sub == SUB_420 || sub == SUB_440 || sub == SUB_CMYK) ? 2 : 1,
                          .restart_mcus = restart < 0 ? -restart : 0};
    uint8_t *out = test_jpeg_encode_ex(px, &o, &l, len);
    free(px);
    return out;
}

/* A random roi (random-resized-crop-like, sometimes thin or at an edge)
 * and output size. */
static void random_roi(nst_rng *r, int w, int h, nst_window *roi, uint32_t *ow, uint32_t *oh)
{
    double fw = 0.05 + 0.95 * nst_rng_double(r), fh = 0.05 + 0.95 * nst_rng_double(r);
    roi->w = fw * w;
    roi->h = fh * h;
    roi->x = nst_rng_double(r) * (w - roi->w);
    roi->y = nst_rng_double(r) * (h - roi->h);
    if (nst_rng_u64(r) % 8 == 0) roi->y = h - roi->h; /* bottom edge */
    static const uint32_t sizes[] = {8, 16, 32, 64, 224};
    *ow = sizes[nst_rng_u64(r) % 5];
    *oh = nst_rng_u64(r) % 4 == 0 ? sizes[nst_rng_u64(r) % 5] : *ow;
}

/* Pixels of a and b that lie in both, in scaled full-image coordinates:
 * returns the number that differ (and checks the layout agrees). */
static long compare(const nst_image *a, const nst_image *b, long *overlap)
{
    *overlap = 0;
    if (a->scale_den != b->scale_den || a->full_width != b->full_width ||
        a->full_height != b->full_height || a->src_height != b->src_height || a->x0 != b->x0 ||
        a->width != b->width)
        return -1;
    uint32_t y0 = a->y0 > b->y0 ? a->y0 : b->y0;
    uint32_t ya = a->y0 + a->height, yb = b->y0 + b->height, y1 = ya < yb ? ya : yb;
    long diff = 0;
    for (uint32_t y = y0; y < y1; y++) {
        const uint8_t *pa = a->data + (size_t)(y - a->y0) * a->stride;
        const uint8_t *pb = b->data + (size_t)(y - b->y0) * b->stride;
        for (uint32_t x = 0; x < a->width * 3; x++) diff += pa[x] != pb[x];
        *overlap += a->width;
    }
    return diff;
}

/* MCU size of a test file (the interleaved scan's; gray: one block). */
static void mcu_size(int sub, uint32_t *mw, uint32_t *mh)
{
    *mw = sub == SUB_420 || sub == SUB_422 || sub == SUB_CMYK ? 16 : 8;
    *mh = sub == SUB_420 || sub == SUB_440 || sub == SUB_CMYK ? 16 : 8;
}

static void exactness(nst_decoder *fast, nst_decoder *slow)
{
    static const struct {
        int w, h, sub, restart;
    } cases[] = {
        {333, 517, SUB_420, 1},
        {333, 517, SUB_420, 2},
        {470, 425, SUB_420, 1},
        {97, 61, SUB_420, 1},
        {333, 517, SUB_444, 1},
        {333, 517, SUB_422, 2},
        {200, 301, SUB_440, 1},
        {333, 517, SUB_GRAY, 1},
        {97, 61, SUB_GRAY, 2},
        {250, 190, SUB_CMYK, 1},
        {333, 517, SUB_420, -63}, /* 21 MCUs/row x 3 rows */
        {64, 2000, SUB_420, 1},
        /* column mode: a restart every k MCUs, k dividing the MCUs per row */
        {333, 517, SUB_420, -1},
        {333, 517, SUB_420, -3}, /* 21 MCUs/row */
        {470, 425, SUB_420, -1},
        {470, 425, SUB_420, -2}, /* 30 */
        {97, 61, SUB_420, -1},   /* 7 */
        {333, 517, SUB_444, -1},
        {333, 517, SUB_444, -2}, /* 42 */
        {333, 517, SUB_422, -1},
        {333, 517, SUB_422, -7}, /* 21 */
        {200, 301, SUB_440, -1}, /* 25 */
        {333, 517, SUB_GRAY, -1},
        {97, 61, SUB_GRAY, -1}, /* 42, 13 */
        {250, 190, SUB_CMYK, -1},
        {250, 190, SUB_CMYK, -2}, /* 16 */
        {64, 2000, SUB_420, -1},
        {64, 2000, SUB_420, -2}, /* 4 */
    };
    nst_rng rng;
    nst_rng_seed(&rng, 42);
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        size_t len;
        uint8_t *jpg = encode(cases[ci].w, cases[ci].h, cases[ci].sub, cases[ci].restart, 0, &len);
        uint64_t hits0 = nst_jpeg_rst_hits(fast);
        long diffs = 0, overlap = 0, below = 0;
        uint32_t mcu_w, mcu_h;
        mcu_size(cases[ci].sub, &mcu_w, &mcu_h);
        const uint32_t mpr = ((uint32_t)cases[ci].w + mcu_w - 1) / mcu_w;
        /* Interval geometry: rows of `irows` MCU rows, of groups `gw`
         * pixels wide (0: whole rows). */
        uint32_t irows = 1, gw = 0;
        if (cases[ci].restart > 0)
            irows = (uint32_t)cases[ci].restart;
        else if ((uint32_t)-cases[ci].restart % mpr == 0)
            irows = (uint32_t)-cases[ci].restart / mpr;
        else
            gw = (uint32_t)-cases[ci].restart * mcu_w;
        if (gw) CHECK_EQ(mpr % ((uint32_t)-cases[ci].restart), 0);
        const int iters = 120;
        for (int it = 0; it < iters; it++) {
            nst_window roi;
            uint32_t ow, oh;
            random_roi(&rng, cases[ci].w, cases[ci].h, &roi, &ow, &oh);
            nst_image a, b;
            uint64_t h0 = nst_jpeg_rst_hits(fast);
            CHECK_OK(nst_decode(fast, jpg, len, "fast", &roi, ow, oh, &a));
            CHECK_OK(nst_decode(slow, jpg, len, "slow", &roi, ow, oh, &b));
            long ov = 0, d = compare(&a, &b, &ov);
            CHECK(d >= 0);
            /* The fast path covers at least the normal path's rows. */
            CHECK(a.y0 == b.y0 && a.height == b.height);
            if (d > 0)
                fprintf(stderr, "  %s %dx%d rst %d: roi %.1f,%.1f %.1fx%.1f -> %ux%u: %ld differ\n",
                        sub_name[cases[ci].sub], cases[ci].w, cases[ci].h, cases[ci].restart, roi.x,
                        roi.y, roi.w, roi.h, ow, oh, d);
            diffs += d > 0 ? d : 0;
            overlap += ov;
            /* A region starting well below the first interval row (plus
             * the margin), or in column mode well right of the first group
             * or left of the last, must have taken the fast path. */
            const uint64_t den = b.scale_den, xs = (uint64_t)b.x0 * den,
                           xe = (uint64_t)(b.x0 + b.width) * den;
            if ((uint64_t)b.y0 * den >= (uint64_t)irows * mcu_h + 64 ||
                (gw && (xs >= gw + 64u || xe + 64u <= (uint64_t)(mpr * mcu_w / gw - 1) * gw))) {
                below++;
                CHECK_EQ(nst_jpeg_rst_hits(fast), h0 + 1);
            }
        }
        printf("%-6s %4dx%-4d restart %3d: %3ld of %d rois beside interval 0, fast path %3llu "
               "times, %ld of %ld pixels differ\n",
               sub_name[cases[ci].sub], cases[ci].w, cases[ci].h, cases[ci].restart, below, iters,
               (unsigned long long)(nst_jpeg_rst_hits(fast) - hits0), diffs, overlap);
        CHECK_EQ(diffs, 0);
        if (cases[ci].h > 200) CHECK(nst_jpeg_rst_hits(fast) - hits0 > 0);
        if (gw) CHECK(below > 0);
        free(jpg);
    }
}

static void declined(nst_decoder *fast, nst_decoder *slow)
{
    static const struct {
        int sub, restart, progressive;
        const char *what;
    } cases[] = {
        {SUB_420, 0, 0, "no restart markers"},
        {SUB_420, -22, 0, "interval 22 MCUs (21 per row)"},
        {SUB_420, -10, 0, "interval 10 MCUs (21 per row)"},
        {SUB_444, -4, 0, "interval 4 MCUs (42 per row)"},
        {SUB_420, -2, 0, "interval 2 MCUs (21 per row)"},
        {SUB_444, 1, 1, "progressive with restarts"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len;
        uint8_t *jpg = encode(333, 517, cases[i].sub, cases[i].restart, cases[i].progressive, &len);
        uint64_t h0 = nst_jpeg_rst_hits(fast);
        nst_window roi = {40, 300, 200, 180};
        nst_image a, b;
        CHECK_OK(nst_decode(fast, jpg, len, "fast", &roi, 64, 64, &a));
        CHECK_OK(nst_decode(slow, jpg, len, "slow", &roi, 64, 64, &b));
        long ov, d = compare(&a, &b, &ov);
        CHECK_EQ(d, 0);
        CHECK(a.y0 == b.y0 && a.height == b.height);
        if (nst_jpeg_rst_hits(fast) != h0)
            fprintf(stderr, "  fast path taken: %s\n", cases[i].what);
        CHECK_EQ(nst_jpeg_rst_hits(fast), h0);
        free(jpg);
    }
    /* The same roi with restart markers does take it. */
    size_t len;
    uint8_t *jpg = encode(333, 517, SUB_420, 1, 0, &len);
    uint64_t h0 = nst_jpeg_rst_hits(fast);
    nst_window roi = {40, 300, 200, 180};
    nst_image a;
    CHECK_OK(nst_decode(fast, jpg, len, "fast", &roi, 64, 64, &a));
    CHECK_EQ(nst_jpeg_rst_hits(fast), h0 + 1);
    /* ... but not a roi in the first interval, nor a full decode. */
    nst_window top = {40, 0, 200, 10};
    CHECK_OK(nst_decode(fast, jpg, len, "fast", &top, 200, 10, &a));
    CHECK_OK(nst_decode(fast, jpg, len, "fast", NULL, 0, 0, &a));
    CHECK_EQ(nst_jpeg_rst_hits(fast), h0 + 1);
    free(jpg);
    /* A restart every MCU: a roi in the first MCU row but not at its left
     * edge takes it; one spanning every column of the first row does not. */
    jpg = encode(333, 517, SUB_420, -1, 0, &len);
    h0 = nst_jpeg_rst_hits(fast);
    nst_window right = {200, 0, 100, 10};
    nst_image b;
    CHECK_OK(nst_decode(fast, jpg, len, "fast", &right, 100, 10, &a));
    CHECK_EQ(nst_jpeg_rst_hits(fast), h0 + 1);
    CHECK(a.x0 > 0 && a.x0 * a.scale_den <= 200 - 4);
    nst_jpeg_rst_enable(fast, 0);
    CHECK_OK(nst_decode(fast, jpg, len, "fast", &right, 100, 10, &b));
    nst_jpeg_rst_enable(fast, 1);
    long ov, d = compare(&a, &b, &ov);
    CHECK_EQ(d, 0);
    CHECK(ov > 0);
    nst_window wide = {0, 0, 333, 10};
    CHECK_OK(nst_decode(fast, jpg, len, "fast", &wide, 333, 10, &a));
    CHECK_OK(nst_decode(fast, jpg, len, "fast", NULL, 0, 0, &a));
    CHECK_EQ(nst_jpeg_rst_hits(fast), h0 + 1);
    free(jpg);
}

static void truncated(nst_decoder *fast, nst_decoder *slow)
{
    for (int restart = 1; restart >= -1; restart -= 2) { /* rows, then every MCU */
        size_t len;
        uint8_t *jpg = encode(333, 517, SUB_420, restart, 0, &len);
        size_t cut = len * 6 / 10;
        uint64_t h0 = nst_jpeg_rst_hits(fast);
        nst_image a, b;
        nst_window mid = {20, 150, 200, 100}; /* rows well inside the first 60% */
        CHECK_OK(nst_decode(fast, jpg, cut, "fast", &mid, 100, 50, &a));
        CHECK_OK(nst_decode(slow, jpg, cut, "slow", &mid, 100, 50, &b));
        CHECK_EQ(nst_jpeg_rst_hits(fast), h0 + 1);
        long ov, d = compare(&a, &b, &ov);
        CHECK_EQ(d, 0);
        nst_window low = {20, 400, 200, 100};
        CHECK_RC(nst_decode(fast, jpg, cut, "fast", &low, 100, 50, &a), NOSTALL_E_TRUNCATED);
        CHECK_RC(nst_decode(slow, jpg, cut, "slow", &low, 100, 50, &b), NOSTALL_E_TRUNCATED);
        free(jpg);
    }
}

static uint64_t hash_image(const nst_image *im)
{
    uint64_t h = 1469598103934665603ull ^ im->y0 ^ ((uint64_t)im->height << 32);
    for (uint32_t y = 0; y < im->height; y++) {
        const uint8_t *p = im->data + (size_t)y * im->stride;
        for (uint32_t x = 0; x < im->width * 3; x++) h = (h ^ p[x]) * 1099511628211ull;
    }
    return h;
}

/* ---- transcoded: nst_decode_transcode() ------------------------------ */

/* A flat image (every sample 128), `comps` components stored as `cs`. */
static uint8_t *flat(int w, int h, int comps, J_COLOR_SPACE cs, int quality, size_t *len)
{
    uint8_t *px = malloc((size_t)w * h * comps);
    memset(px, 128, (size_t)w * h * comps);
    test_jpeg_opts o = {w, h, comps, comps == 1 ? JCS_GRAYSCALE : JCS_RGB, cs, quality, 0, 0, 0};
    uint8_t *out = test_jpeg_encode(px, &o, len);
    free(px);
    return out;
}

/* Offset of the header segment with marker FF `code`, 0 if there is none
 * before the entropy-coded data (the walk ends at the first SOS). */
static size_t find_marker(const uint8_t *p, size_t n, uint8_t code)
{
    if (n < 2 || p[0] != 0xFF || p[1] != 0xD8) return 0;
    for (size_t i = 2; i + 4 <= n && p[i] == 0xFF;) {
        if (p[i + 1] == code) return i;
        if (p[i + 1] == 0xDA) break;
        i += 2 + ((size_t)p[i + 2] << 8 | p[i + 3]);
    }
    return 0;
}

/* Offset of the entropy-coded data (just past the first SOS segment). */
static size_t scan_start(const uint8_t *p, size_t n)
{
    size_t sos = find_marker(p, n, 0xDA);
    return sos ? sos + 2 + ((size_t)p[sos + 2] << 8 | p[sos + 3]) : 0;
}

/* The layout of a rewrite of a w x h file: SOI, baseline (SOF0, no SOF1 or
 * SOF2), DRI of 1 MCU, one RST marker between each two MCUs, EOI. */
static void check_rewrite(const uint8_t *p, size_t n, int w, int h, int sub)
{
    CHECK(n >= 4 && p[0] == 0xFF && p[1] == 0xD8);
    CHECK(find_marker(p, n, 0xC0) != 0);
    CHECK(find_marker(p, n, 0xC1) == 0 && find_marker(p, n, 0xC2) == 0);
    size_t dri = find_marker(p, n, 0xDD);
    CHECK(dri != 0);
    if (dri) CHECK(p[dri + 2] == 0 && p[dri + 3] == 4 && p[dri + 4] == 0 && p[dri + 5] == 1);
    size_t scan = scan_start(p, n);
    CHECK(scan != 0);
    long rst = 0;
    for (size_t i = scan; scan && i + 1 < n; i++)
        rst += p[i] == 0xFF && p[i + 1] >= 0xD0 && p[i + 1] <= 0xD7;
    uint32_t mw, mh;
    mcu_size(sub, &mw, &mh);
    CHECK_EQ(rst, (long)((w + mw - 1) / mw) * ((h + mh - 1) / mh) - 1);
    CHECK(p[n - 2] == 0xFF && p[n - 1] == 0xD9);
}

/* jpg's coefficients, changed by `edit` (may be NULL), written by libjpeg
 * itself: baseline, optimized Huffman tables if `optimize` (else the
 * standard ones), a restart every `restart` MCUs (0: none). Malloc'd,
 * *out_len set. */
static uint8_t *libjpeg_rewrite(const uint8_t *jpg, size_t len, unsigned restart, int optimize,
                                void (*edit)(j_decompress_ptr, jvirt_barray_ptr *), size_t *out_len)
{
    struct jpeg_decompress_struct d;
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr derr, cerr;
    d.err = jpeg_std_error(&derr);
    c.err = jpeg_std_error(&cerr);
    jpeg_create_decompress(&d);
    jpeg_create_compress(&c);
    jpeg_mem_src(&d, jpg, (unsigned long)len);
    jpeg_read_header(&d, TRUE);
    jvirt_barray_ptr *coefs = jpeg_read_coefficients(&d);
    if (edit) edit(&d, coefs);
    unsigned char *mem = NULL;
    unsigned long mlen = 0;
    jpeg_mem_dest(&c, &mem, &mlen);
    jpeg_copy_critical_parameters(&d, &c);
    c.optimize_coding = optimize ? TRUE : FALSE;
    c.restart_interval = restart;
    jpeg_write_coefficients(&c, coefs);
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    jpeg_destroy_decompress(&d);
    uint8_t *out = malloc(mlen);
    memcpy(out, mem, mlen);
    free(mem);
    *out_len = mlen;
    return out;
}

/* The reference for nst_decode_transcode(jpg), without its size limit: a
 * restart after every MCU, standard tables unless jpg is progressive or
 * the result is over len + len / 8 + 4 KiB, then optimized ones. */
static uint8_t *reference_rewrite(const uint8_t *jpg, size_t len, int progressive, size_t *rlen)
{
    uint8_t *ref = libjpeg_rewrite(jpg, len, 1, progressive, NULL, rlen);
    if (!progressive && *rlen > len + len / 8 + 4096) {
        free(ref);
        ref = libjpeg_rewrite(jpg, len, 1, 1, NULL, rlen);
    }
    return ref;
}

/* Rows of the whole image that differ between the rewrite (decoded by
 * `fast`) and the original (by `slow`); all of them if the sizes differ. */
static long full_rows_differ(nst_decoder *fast, const uint8_t *rw, size_t rw_len, nst_decoder *slow,
                             const uint8_t *jpg, size_t len)
{
    nst_image a, b;
    CHECK_OK(nst_decode(fast, rw, rw_len, "rewrite", NULL, 0, 0, &a));
    CHECK_OK(nst_decode(slow, jpg, len, "original", NULL, 0, 0, &b));
    CHECK(a.width == b.width && a.height == b.height);
    if (a.width != b.width || a.height != b.height) return (long)b.height;
    long rows = 0;
    for (uint32_t y = 0; y < a.height; y++)
        rows += memcmp(a.data + y * a.stride, b.data + y * b.stride, (size_t)a.width * 3) != 0;
    return rows;
}

/* Rewrites of files without restart markers: libjpeg's own rewrite, byte
 * for byte, with the structure above, and region (fast path) and full
 * decodes equal to the original's. Declined only when that rewrite is
 * over len + len / 8 + 4 KiB, as progressive files (smaller than their
 * baseline form) can be. */
static void transcoded_exact(nst_decoder *fast, nst_decoder *slow)
{
    static const struct {
        int w, h;
    } sizes[] = {{333, 517}, {97, 61}, {470, 425}};
    nst_rng rng;
    nst_rng_seed(&rng, 2024);
    nst_buf out = {0};
    int declined_n = 0;
    for (int sub = SUB_420; sub <= SUB_GRAY; sub++)
        for (int progressive = 0; progressive <= 1; progressive++)
            for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
                const int w = sizes[si].w, h = sizes[si].h;
                size_t len, tlen = 0, rlen;
                uint8_t *jpg = encode(w, h, sub, 0, progressive, &len);
                uint8_t *ref = reference_rewrite(jpg, len, progressive, &rlen);
                int rc = nst_decode_transcode(fast, jpg, len, &out, &tlen);
                if (rc == 0 && rlen > len + len / 8 + 4096) {
                    printf("transcoded %-5s %s %3dx%-3d: %6zu -> %6zu bytes: declined, too large\n",
                           sub_name[sub], progressive ? "progressive" : "baseline   ", w, h, len,
                           rlen);
                    declined_n++;
                    CHECK(progressive);
                    free(ref);
                    free(jpg);
                    continue;
                }
                CHECK_EQ(rc, 1);
                CHECK(rc == 1 && tlen == rlen && memcmp(out.data, ref, rlen) == 0);
                free(ref);
                if (rc != 1) {
                    free(jpg);
                    continue;
                }
                check_rewrite(out.data, tlen, w, h, sub);
                const uint64_t hits0 = nst_jpeg_rst_hits(fast);
                const int iters = 60;
                long diffs = 0;
                for (int it = 0; it < iters; it++) {
                    nst_window roi;
                    uint32_t ow, oh;
                    random_roi(&rng, w, h, &roi, &ow, &oh);
                    nst_image a, b;
                    CHECK_OK(nst_decode(fast, out.data, tlen, "rewrite", &roi, ow, oh, &a));
                    CHECK_OK(nst_decode(slow, jpg, len, "original", &roi, ow, oh, &b));
                    long ov, d = compare(&a, &b, &ov);
                    CHECK(d >= 0);
                    CHECK(a.y0 == b.y0 && a.height == b.height);
                    diffs += d > 0 ? d : 0;
                }
                const uint64_t hits = nst_jpeg_rst_hits(fast) - hits0;
                /* The whole image: the same pixels, byte for byte. */
                const long rows_differ = full_rows_differ(fast, out.data, tlen, slow, jpg, len);
                printf("transcoded %-5s %s %3dx%-3d: %6zu -> %6zu bytes, fast path %2llu of "
                       "%d rois, %ld pixels differ, %ld full rows differ\n",
                       sub_name[sub], progressive ? "progressive" : "baseline   ", w, h, len, tlen,
                       (unsigned long long)hits, iters, diffs, rows_differ);
                CHECK_EQ(diffs, 0);
                CHECK_EQ(rows_differ, 0);
                if (h > 200) CHECK(hits * 4 > (uint64_t)iters);
                free(jpg);
            }
    CHECK(declined_n < 15 / 2); /* most progressive files are rewritten too */
    nst_buf_free(&out);
}

/* nst_decode_transcode(d, buf, len) declines, and the thread's error
 * message stays the one a failing decode set just before. */
static void check_declined(nst_decoder *d, const uint8_t *buf, size_t len, const char *what)
{
    nst_image im;
    CHECK_RC(nst_decode(d, (const uint8_t *)"not an image", 12, "sentinel", NULL, 0, 0, &im),
             NOSTALL_E_NOT_IMAGE);
    char before[1024];
    snprintf(before, sizeof before, "%s", nostall_last_error());
    nst_buf out = {0};
    size_t tlen = 0;
    int rc = nst_decode_transcode(d, buf, len, &out, &tlen);
    if (rc != 0) fprintf(stderr, "  transcoded, should be declined: %s\n", what);
    CHECK_EQ(rc, 0);
    if (strcmp(nostall_last_error(), before) != 0)
        fprintf(stderr, "  %s: error message now \"%s\"\n", what, nostall_last_error());
    CHECK(strcmp(nostall_last_error(), before) == 0);
    nst_buf_free(&out);
}

/* After a decline d still works: `jpg` rewrites to `ref` (its rewrite
 * before any decline), and a region of the rewrite decodes on the fast
 * path to the normal path's pixels of jpg. */
static void check_still_works(nst_decoder *d, nst_decoder *slow, const uint8_t *jpg, size_t len,
                              const uint8_t *ref, size_t ref_len, const nst_window *roi)
{
    nst_buf out = {0};
    size_t tlen = 0;
    CHECK_EQ(nst_decode_transcode(d, jpg, len, &out, &tlen), 1);
    CHECK(tlen == ref_len && memcmp(out.data, ref, ref_len) == 0);
    nst_image a, b;
    const uint64_t h0 = nst_jpeg_rst_hits(d);
    CHECK_OK(nst_decode(d, ref, ref_len, "rewrite", roi, 16, 16, &a));
    CHECK_EQ(nst_jpeg_rst_hits(d), h0 + 1);
    CHECK_OK(nst_decode(slow, jpg, len, "original", roi, 16, 16, &b));
    long ov, diff = compare(&a, &b, &ov);
    CHECK_EQ(diff, 0);
    CHECK(ov > 0);
    nst_buf_free(&out);
}

/* What is declined, each followed by a check that the decoder still
 * rewrites and decodes. */
static void transcoded_declined(nst_decoder *fast, nst_decoder *slow)
{
    size_t glen, gtlen = 0;
    uint8_t *good = encode(97, 61, SUB_420, 0, 0, &glen);
    nst_buf ref = {0};
    CHECK_EQ(nst_decode_transcode(fast, good, glen, &ref, &gtlen), 1);
    const nst_window groi = {40, 30, 30, 20}; /* below the first MCU row */

    /* Headers: not 8-bit Huffman grayscale or YCbCr, or already restart
     * marked every MCU (the rewrite itself). */
    size_t len;
    uint8_t *jpg = encode(97, 61, SUB_CMYK, 0, 0, &len);
    check_declined(fast, jpg, len, "CMYK");
    free(jpg);
    jpg = flat(97, 61, 3, JCS_RGB, 90, &len);
    check_declined(fast, jpg, len, "RGB");
    free(jpg);
    check_declined(fast, ref.data, gtlen, "a rewrite");
    const size_t sof = find_marker(good, glen, 0xC0); /* FF C0, length, precision */
    CHECK(sof != 0);
    jpg = malloc(glen);
    memcpy(jpg, good, glen);
    jpg[sof + 4] = 12;
    check_declined(fast, jpg, glen, "12-bit precision");
    jpg[sof + 4] = 8;
    jpg[sof + 1] = 0xC9;
    check_declined(fast, jpg, glen, "arithmetic coding (SOF9)");
    free(jpg);
    check_still_works(fast, slow, good, glen, ref.data, gtlen, &groi);

    /* Damage: truncation in the entropy data (baseline, progressive) or
     * in the header. */
    jpg = encode(333, 517, SUB_420, 0, 0, &len);
    check_declined(fast, jpg, len / 2, "baseline cut at half");
    free(jpg);
    jpg = encode(333, 517, SUB_420, 0, 1, &len);
    check_declined(fast, jpg, len / 2, "progressive cut at half");
    free(jpg);
    check_declined(fast, good, 100, "cut in the header");
    check_still_works(fast, slow, good, glen, ref.data, gtlen, &groi);

    /* Not a JPEG. */
    static const uint8_t png[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n',
                                  0,    0,   0,   13,  'I',  'H',  'D',  'R'};
    static const char text[] = "label,path\n0,cat.jpg\n";
    check_declined(fast, png, sizeof png, "PNG magic");
    check_declined(fast, (const uint8_t *)text, sizeof text - 1, "text");
    check_declined(fast, good, 0, "empty");
    check_declined(fast, good, 3, "FF D8 FF");
    check_still_works(fast, slow, good, glen, ref.data, gtlen, &groi);

    /* Over max_pixels: 97 x 61 = 5917 > 1000; 10 x 100 = 1000 is not. */
    nst_decoder *small = NULL;
    CHECK_OK(nst_decoder_create(&small, 1000));
    if (small) {
        size_t slen, stlen = 0;
        uint8_t *tiny = encode(10, 100, SUB_420, 0, 0, &slen);
        nst_buf sref = {0};
        CHECK_EQ(nst_decode_transcode(fast, tiny, slen, &sref, &stlen), 1);
        check_declined(small, good, glen, "5917 pixels, max_pixels 1000");
        const nst_window troi = {0, 85, 10, 15}; /* the last MCU rows */
        check_still_works(small, slow, tiny, slen, sref.data, stlen, &troi);
        nst_buf_free(&sref);
        free(tiny);
        nst_decoder_free(small);
    }

    /* Growth: a flat gray 4096 x 64 image is 4096 MCUs of 6 bits each; its
     * rewrite takes at least a byte and an RST marker (2 bytes) per MCU,
     * beyond len + len / 8 + 4 KiB. A 256 x 64 one grows within it. */
    jpg = flat(4096, 64, 1, JCS_GRAYSCALE, 50, &len);
    printf("transcoded: flat gray 4096x64 is %zu bytes; its rewrite >= %d\n", len, 3 * 4096 - 2);
    CHECK(3 * 4096 - 2 > len + len / 8 + 4096);
    check_declined(fast, jpg, len, "flat 4096x64: markers dominate");
    free(jpg);
    check_still_works(fast, slow, good, glen, ref.data, gtlen, &groi);
    jpg = flat(256, 64, 1, JCS_GRAYSCALE, 50, &len);
    nst_buf out = {0};
    size_t tlen = 0;
    CHECK_EQ(nst_decode_transcode(fast, jpg, len, &out, &tlen), 1);
    CHECK(tlen > len && tlen <= len + len / 8 + 4096);
    printf("transcoded: flat gray 256x64: %zu -> %zu bytes\n", len, tlen);
    nst_buf_free(&out);
    free(jpg);

    nst_buf_free(&ref);
    free(good);
}

/* DC coefficients of the first block row out of the 8-bit range (up to
 * 3000, differences within 11 bits), as damaged data can decode to: a
 * baseline file keeps them as differences, but a restart before each MCU
 * would need 12-bit DC values, which baseline Huffman tables do not have. */
static void dc_out_of_range(j_decompress_ptr d, jvirt_barray_ptr *coefs)
{
    static const JCOEF dc[8] = {0, 1500, 3000, 3000, 1500, 0, 0, 0};
    JBLOCKARRAY row = d->mem->access_virt_barray((j_common_ptr)d, coefs[0], 0, 1, TRUE);
    for (int x = 0; x < 8; x++) row[0][x][0] = dc[x];
}

/* A file whose coefficients a restart-marked baseline file cannot hold
 * decodes, and is declined. */
static void transcoded_wide_dc(nst_decoder *fast, nst_decoder *slow)
{
    size_t flen, dlen, tlen = 0;
    uint8_t *flat_gray = flat(64, 8, 1, JCS_GRAYSCALE, 90, &flen);
    uint8_t *wide_dc = libjpeg_rewrite(flat_gray, flen, 0, 0, dc_out_of_range, &dlen);
    nst_image a, b;
    CHECK_OK(nst_decode(slow, wide_dc, dlen, "wide DC", NULL, 0, 0, &b));
    nst_buf wide_out = {0};
    int rc = nst_decode_transcode(fast, wide_dc, dlen, &wide_out, &tlen);
    if (rc == 1 && nst_decode(fast, wide_out.data, tlen, "wide DC rewrite", NULL, 0, 0, &a) == 0) {
        long ov;
        fprintf(stderr, "  DC out of range: rewritten, %ld samples differ\n", compare(&a, &b, &ov));
    }
    CHECK_EQ(rc, 0);
    nst_buf_free(&wide_out);
    free(wide_dc);
    free(flat_gray);
}

/* A w x h progressive file (gray or YCbCr 4:2:0) with the scan script
 * `scans`. */
static uint8_t *encode_scans(int w, int h, int gray, const jpeg_scan_info *scans, int nscans,
                             size_t *len)
{
    const int comps = gray ? 1 : 3;
    uint8_t *px = malloc((size_t)w * h * comps);
    for (size_t i = 0; i < (size_t)w * h * comps; i++) px[i] = (uint8_t)(i * 7 + (noise() % 50));
    const test_jpeg_opts o = {.w = w,
                              .h = h,
                              .comps = comps,
                              .in_cs = gray ? JCS_GRAYSCALE : JCS_RGB,
                              .quality = 90};
    const test_jpeg_layout l = {.scans = scans, .nscans = nscans};
    uint8_t *out = test_jpeg_encode_ex(px, &o, &l, len);
    free(px);
    return out;
}

/* Progressive files whose scans leave coefficients unsent or unrefined
 * decode with libjpeg's block smoothing, which a baseline rewrite would
 * lose: declined. A complete custom script is rewritten, same pixels. */
static void transcoded_incomplete_scans(nst_decoder *fast, nst_decoder *slow)
{
    static const jpeg_scan_info complete[] = {{3, {0, 1, 2, 0}, 0, 0, 0, 1},
                                              {3, {0, 1, 2, 0}, 0, 0, 1, 0},
                                              {1, {0, 0, 0, 0}, 1, 63, 0, 0},
                                              {1, {1, 0, 0, 0}, 1, 63, 0, 0},
                                              {1, {2, 0, 0, 0}, 1, 63, 0, 0}};
    static const jpeg_scan_info no_chroma_ac[] = {{3, {0, 1, 2, 0}, 0, 0, 0, 0},
                                                  {1, {0, 0, 0, 0}, 1, 63, 0, 0}};
    static const jpeg_scan_info ac_unrefined[] = {{3, {0, 1, 2, 0}, 0, 0, 0, 0},
                                                  {1, {0, 0, 0, 0}, 1, 63, 0, 1},
                                                  {1, {1, 0, 0, 0}, 1, 63, 0, 0},
                                                  {1, {2, 0, 0, 0}, 1, 63, 0, 0}};
    static const jpeg_scan_info gray_dc_only[] = {{1, {0, 0, 0, 0}, 0, 0, 0, 0}};
    const struct {
        const jpeg_scan_info *scans;
        int n, gray, want;
        const char *what;
    } cases[] = {
        {complete, 5, 0, 1, "complete, DC refined"},
        {no_chroma_ac, 2, 0, 0, "no chroma AC scans"},
        {ac_unrefined, 4, 0, 0, "luma AC at Al=1, never refined"},
        {gray_dc_only, 1, 1, 0, "grayscale, DC only"},
    };
    nst_buf out = {0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len, tlen = 0;
        uint8_t *jpg = encode_scans(200, 150, cases[i].gray, cases[i].scans, cases[i].n, &len);
        nst_image a, b;
        CHECK_OK(nst_decode(slow, jpg, len, "progressive", NULL, 0, 0, &b)); /* libjpeg takes it */
        const int rc = nst_decode_transcode(fast, jpg, len, &out, &tlen);
        printf("transcoded: progressive, %s: %s\n", cases[i].what, rc ? "rewritten" : "declined");
        CHECK_EQ(rc, cases[i].want);
        if (rc == 1) {
            CHECK_OK(nst_decode(fast, out.data, tlen, "rewrite", NULL, 0, 0, &a));
            long ov, d = compare(&a, &b, &ov);
            CHECK_EQ(d, 0);
            CHECK(ov > 0);
        }
        free(jpg);
    }
    nst_buf_free(&out);
}

/* A DC of +1024 (one past what 8-bit data gives): in a restart-marked
 * rewrite, next to a DC of -1024 in the same MCU it would need a difference
 * of 2048, which baseline tables cannot code; declined. -1024 is fine. */
static void dc_1024(j_decompress_ptr d, jvirt_barray_ptr *coefs)
{
    JBLOCKARRAY row = d->mem->access_virt_barray((j_common_ptr)d, coefs[0], 0, 1, TRUE);
    row[0][3][0] = 1024;
}

static void dc_minus_1024(j_decompress_ptr d, jvirt_barray_ptr *coefs)
{
    JBLOCKARRAY row = d->mem->access_virt_barray((j_common_ptr)d, coefs[0], 0, 1, TRUE);
    row[0][3][0] = -1024;
}

static void transcoded_dc_bounds(nst_decoder *fast)
{
    size_t flen, len, tlen = 0;
    uint8_t *flat_gray = flat(64, 8, 1, JCS_GRAYSCALE, 100, &flen);
    nst_buf out = {0};
    uint8_t *jpg = libjpeg_rewrite(flat_gray, flen, 0, 0, dc_1024, &len);
    CHECK_EQ(nst_decode_transcode(fast, jpg, len, &out, &tlen), 0);
    free(jpg);
    jpg = libjpeg_rewrite(flat_gray, flen, 0, 0, dc_minus_1024, &len);
    CHECK_EQ(nst_decode_transcode(fast, jpg, len, &out, &tlen), 1);
    free(jpg);
    nst_buf_free(&out);
    free(flat_gray);
}

/* 300 damaged baseline files: never a crash, the same answer twice, and a
 * rewrite only of a file whose region decode (normal path) succeeds with
 * the pixels of the rewrite's (fast path). */
static void transcoded_damaged(nst_decoder *fast, nst_decoder *slow)
{
    size_t len;
    uint8_t *base = encode(160, 240, SUB_420, 0, 0, &len);
    const size_t scan = scan_start(base, len);
    CHECK(scan > 0 && scan + 16 < len);
    uint8_t *buf = malloc(len);
    nst_buf out = {0}, again = {0};
    nst_rng rng;
    nst_rng_seed(&rng, 99);
    long rewritten = 0, declined_n = 0;
    for (int it = 0; it < 300; it++) {
        size_t n = len;
        memcpy(buf, base, len);
        const int kind = (int)(nst_rng_u64(&rng) % 3), count = 1 + (int)(nst_rng_u64(&rng) % 4);
        for (int k = 0; kind < 2 && k < count; k++) {
            if (kind == 0) { /* flip a bit anywhere */
                size_t pos = (size_t)(nst_rng_u64(&rng) % len);
                buf[pos] ^= (uint8_t)(1u << (nst_rng_u64(&rng) % 8));
            } else { /* a random byte in the entropy-coded data */
                buf[scan + (size_t)(nst_rng_u64(&rng) % (len - 2 - scan))] =
                    (uint8_t)nst_rng_u64(&rng);
            }
        }
        if (kind == 2) n = 2 + (size_t)(nst_rng_u64(&rng) % (len - 2)); /* truncate */
        size_t tlen = 0, tlen2 = 0;
        int rc = nst_decode_transcode(fast, buf, n, &out, &tlen);
        int rc2 = nst_decode_transcode(fast, buf, n, &again, &tlen2);
        CHECK_EQ(rc, rc2);
        CHECK(rc == 0 || rc == 1);
        if (rc != 1) {
            declined_n++;
            continue;
        }
        rewritten++;
        CHECK(rc2 == 1 && tlen == tlen2 && memcmp(out.data, again.data, tlen) == 0);
        nst_window roi;
        uint32_t ow, oh;
        random_roi(&rng, 160, 240, &roi, &ow, &oh);
        nst_image a, b;
        int rb = nst_decode(slow, buf, n, "mutant", &roi, ow, oh, &b);
        if (rb != 0)
            fprintf(stderr, "  damaged %d (kind %d): rewritten, but decoding fails: %s\n", it, kind,
                    nostall_last_error());
        CHECK_OK(rb);
        int ra = nst_decode(fast, out.data, tlen, "rewrite", &roi, ow, oh, &a);
        CHECK_OK(ra);
        if (ra == 0 && rb == 0) {
            long ov, d = compare(&a, &b, &ov);
            if (d != 0) fprintf(stderr, "  damaged %d (kind %d): %ld pixels differ\n", it, kind, d);
            CHECK_EQ(d, 0);
            CHECK(a.y0 == b.y0 && a.height == b.height);
        }
    }
    printf("transcoded: 300 damaged files: %ld rewritten, %ld declined\n", rewritten, declined_n);
    CHECK(rewritten > 0 && declined_n > 0);
    nst_buf_free(&out);
    nst_buf_free(&again);
    free(buf);
    free(base);
}

/* A smooth gradient with a little noise, 640 x 480 4:2:0 at quality 90,
 * encoded with optimized tables (as cameras and most tools write photos):
 * its standard-table rewrite is over len + len / 8 + 4 KiB, the
 * optimized-table one is not. Rewritten with optimized tables, libjpeg's
 * bytes, the same pixels; twice the same; and the standard-table
 * compressor, abandoned mid-file, still rewrites other files. */
static void transcoded_optimized(nst_decoder *fast, nst_decoder *slow)
{
    const int w = 640, h = 480;
    uint8_t *px = malloc((size_t)w * h * 3);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < 3; c++)
                px[((size_t)y * w + x) * 3 + c] =
                    (uint8_t)((x * (1 + c) / 8 + y * (2 - c / 2) / 8 + (int)(noise() % 3)) & 255);
    test_jpeg_opts o = {w, h, 3, JCS_RGB, JCS_UNKNOWN, 90, 0, 0, 0};
    test_jpeg_layout l = {.luma_h = 2, .luma_v = 2, .optimize = 1};
    size_t len, slen, olen;
    uint8_t *jpg = test_jpeg_encode_ex(px, &o, &l, &len);
    free(px);
    uint8_t *std = libjpeg_rewrite(jpg, len, 1, 0, NULL, &slen);
    uint8_t *opt = libjpeg_rewrite(jpg, len, 1, 1, NULL, &olen);
    const size_t limit = len + len / 8 + 4096;
    printf("transcoded: smooth 640x480, optimized tables: %zu bytes; rewrite with standard "
           "tables %zu, optimized %zu, limit %zu\n",
           len, slen, olen, limit);
    CHECK(slen > limit); /* else this tests nothing */
    CHECK(olen <= limit);
    nst_buf out = {0}, again = {0};
    size_t tlen = 0, tlen2 = 0;
    CHECK_EQ(nst_decode_transcode(fast, jpg, len, &out, &tlen), 1);
    CHECK(tlen == olen && memcmp(out.data, opt, olen) == 0);
    check_rewrite(out.data, tlen, w, h, SUB_420);
    CHECK_EQ(full_rows_differ(fast, out.data, tlen, slow, jpg, len), 0);
    const nst_window roi = {300, 200, 120, 90};
    check_still_works(fast, slow, jpg, len, opt, olen, &roi);
    CHECK_EQ(nst_decode_transcode(fast, jpg, len, &again, &tlen2), 1);
    CHECK(tlen2 == tlen && memcmp(again.data, out.data, tlen) == 0);

    size_t glen, grlen;
    uint8_t *good = encode(333, 517, SUB_420, 0, 0, &glen);
    uint8_t *gref = libjpeg_rewrite(good, glen, 1, 0, NULL, &grlen);
    CHECK(grlen <= glen + glen / 8 + 4096);
    check_still_works(fast, slow, good, glen, gref, grlen, &roi);
    free(gref);
    free(good);
    nst_buf_free(&again);
    nst_buf_free(&out);
    free(opt);
    free(std);
    free(jpg);
}

/* A file with a restart marker every MCU row (as some cameras write):
 * rewritten with one every MCU, the same pixels. */
static void transcoded_row_restarts(nst_decoder *fast, nst_decoder *slow)
{
    size_t len, tlen = 0;
    uint8_t *jpg = encode(97, 61, SUB_420, 1, 0, &len);
    nst_buf out = {0};
    CHECK_EQ(nst_decode_transcode(fast, jpg, len, &out, &tlen), 1);
    check_rewrite(out.data, tlen, 97, 61, SUB_420);
    CHECK_EQ(full_rows_differ(fast, out.data, tlen, slow, jpg, len), 0);
    nst_buf_free(&out);
    free(jpg);
}

/* ---- the public entry: nostall_transcode_jpeg() ---------------------------- */

/* The restart interval (DRI) of a JPEG's header, 0 if none. */
static unsigned dri_of(const uint8_t *p, size_t n)
{
    const size_t dri = find_marker(p, n, 0xDD);
    return dri ? (unsigned)p[dri + 4] << 8 | p[dri + 5] : 0;
}

/* The public rewrite with `o` (NULL: defaults) into a fresh buffer of
 * nostall_transcode_bound(len) bytes (or `cap` when not 0). */
static int public_rewrite(const uint8_t *jpg, size_t len, const nostall_transcode_options *o,
                          size_t cap, uint8_t **out, size_t *out_len, nostall_transcode_result *res)
{
    if (!cap) cap = nostall_transcode_bound(len);
    *out = malloc(cap);
    return nostall_transcode_jpeg(*out, cap, out_len, jpg, len, o, sizeof *o, res, sizeof *res);
}

/* The cache's placement and the public entry are one rewriter: the same
 * bytes (the public one keeps APPn/COM segments, which these files do not
 * have beyond JFIF, written by libjpeg either way). */
static void public_same_as_cache(nst_decoder *fast)
{
    static const int subs[] = {SUB_420, SUB_444, SUB_GRAY};
    nst_buf cache = {0};
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++)
        for (int progressive = 0; progressive <= 1; progressive++) {
            size_t len, clen = 0, plen = 0;
            uint8_t *jpg = encode(333, 517, subs[i], 0, progressive, &len), *pub;
            nostall_transcode_result res;
            CHECK_EQ(nst_decode_transcode(fast, jpg, len, &cache, &clen), 1);
            CHECK_OK(public_rewrite(jpg, len, NULL, 0, &pub, &plen, &res));
            CHECK(plen == clen && memcmp(pub, cache.data, clen) == 0);
            CHECK(res.kept == NOSTALL_TRANSCODE_REWRITTEN && res.status == 0 &&
                  res.restart_interval == 1 && res.width == 333 && res.height == 517 &&
                  res.message[0] == '\0');
            CHECK_EQ(res.optimized, (uint32_t)progressive);
            free(pub);
            free(jpg);
        }
    nst_buf_free(&cache);
}

/* APPn and COM segments: copied by default, left out with
 * NOSTALL_TRANSCODE_DROP_METADATA; the pixels are the same either way. */
static void public_metadata(nst_decoder *fast, nst_decoder *slow)
{
    size_t len;
    uint8_t *plain = encode(200, 150, SUB_420, 0, 0, &len);
    static const uint8_t app1[] = {0xFF, 0xE1, 0,   16, 'E', 'x', 'i', 'f', 0,
                                   0,    'M',  'M', 0,  42,  0,   0,   0,   8};
    static const uint8_t com[] = {0xFF, 0xFE, 0, 9, 'n', 'o', 's', 't', 'a', 'l', 'l'};
    const size_t app0 = find_marker(plain, len, 0xE0),
                 at = app0 + 2 + (plain[app0 + 2] << 8 | plain[app0 + 3]);
    CHECK(app0 != 0);
    const size_t n = len + sizeof app1 + sizeof com;
    uint8_t *jpg = malloc(n);
    memcpy(jpg, plain, at);
    memcpy(jpg + at, app1, sizeof app1);
    memcpy(jpg + at + sizeof app1, com, sizeof com);
    memcpy(jpg + at + sizeof app1 + sizeof com, plain + at, len - at);
    uint8_t *kept_md, *dropped;
    size_t klen = 0, dlen = 0;
    nostall_transcode_result res;
    CHECK_OK(public_rewrite(jpg, n, NULL, 0, &kept_md, &klen, &res));
    const nostall_transcode_options drop = {.flags = NOSTALL_TRANSCODE_DROP_METADATA};
    CHECK_OK(public_rewrite(jpg, n, &drop, 0, &dropped, &dlen, &res));
    CHECK(klen > 0 && dlen > 0);
    CHECK(memmem(kept_md, klen, app1, sizeof app1) != NULL);
    CHECK(memmem(kept_md, klen, com, sizeof com) != NULL);
    CHECK(memmem(dropped, dlen, app1 + 4, 4) == NULL && memmem(dropped, dlen, com + 4, 7) == NULL);
    CHECK_EQ(klen, dlen + sizeof app1 + sizeof com);
    /* one JFIF segment, not two */
    CHECK(memmem(kept_md + 20, klen - 20, "JFIF", 5) == NULL);
    CHECK_EQ(full_rows_differ(fast, kept_md, klen, slow, jpg, n), 0);
    CHECK_EQ(full_rows_differ(fast, dropped, dlen, slow, jpg, n), 0);
    free(kept_md);
    free(dropped);
    free(jpg);
    free(plain);
}

/* restart_mcus lowered to a divisor of the MCUs per row; restart_rows in
 * whole rows; every interval gives the original's pixels, and regions of
 * the rewrite take the fast path. */
static void public_intervals(nst_decoder *fast, nst_decoder *slow)
{
    static const struct {
        int sub, w;
        uint32_t mcus, rows, want; /* 333 / 16 -> 21 MCUs per row; 97 / 8 -> 13 */
    } cases[] = {{SUB_420, 333, 2, 0, 1},  {SUB_420, 333, 3, 0, 3},   {SUB_420, 333, 6, 0, 3},
                 {SUB_420, 333, 8, 0, 7},  {SUB_420, 333, 64, 0, 21}, {SUB_420, 333, 0, 1, 21},
                 {SUB_420, 333, 0, 2, 42}, {SUB_GRAY, 97, 5, 0, 1},   {SUB_GRAY, 97, 0, 3, 39}};
    nst_rng rng;
    nst_rng_seed(&rng, 5);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int w = cases[i].w, h = 300;
        size_t len, tlen = 0;
        uint8_t *jpg = encode(w, h, cases[i].sub, 0, 0, &len), *out;
        const nostall_transcode_options o = {.restart_mcus = cases[i].mcus,
                                             .restart_rows = cases[i].rows};
        nostall_transcode_result res;
        CHECK_OK(public_rewrite(jpg, len, &o, 0, &out, &tlen, &res));
        CHECK_EQ(res.restart_interval, cases[i].want);
        CHECK_EQ(dri_of(out, tlen), cases[i].want);
        CHECK_EQ(full_rows_differ(fast, out, tlen, slow, jpg, len), 0);
        const uint64_t h0 = nst_jpeg_rst_hits(fast);
        long diffs = 0;
        for (int it = 0; it < 20; it++) {
            nst_window roi;
            uint32_t ow, oh;
            random_roi(&rng, w, h, &roi, &ow, &oh);
            nst_image a, b;
            CHECK_OK(nst_decode(fast, out, tlen, "rewrite", &roi, ow, oh, &a));
            CHECK_OK(nst_decode(slow, jpg, len, "original", &roi, ow, oh, &b));
            long ov, d = compare(&a, &b, &ov);
            diffs += d != 0;
        }
        CHECK_EQ(diffs, 0);
        CHECK(nst_jpeg_rst_hits(fast) > h0);
        /* asked again for the interval it has: kept */
        uint8_t *again;
        size_t alen = 1;
        CHECK_OK(public_rewrite(out, tlen, &o, 0, &again, &alen, &res));
        CHECK(alen == 0 && res.kept == NOSTALL_TRANSCODE_HAS_RESTARTS);
        free(again);
        free(out);
        free(jpg);
    }
}

/* Kept as it is: status 0, *dst_len 0, the reason and a message. */
static void check_kept(const uint8_t *jpg, size_t len, const nostall_transcode_options *o,
                       size_t cap, int why, const char *what)
{
    uint8_t *out;
    size_t tlen = 1;
    nostall_transcode_result res;
    const int rc = public_rewrite(jpg, len, o, cap, &out, &tlen, &res);
    if (rc != 0 || tlen != 0 || res.kept != why)
        fprintf(stderr, "  %s: rc %d, %zu bytes, kept %d (%s), want kept %d\n", what, rc, tlen,
                res.kept, res.message, why);
    CHECK(rc == 0 && tlen == 0 && res.kept == why && res.status == 0);
    CHECK(res.message[0] != '\0' && res.restart_interval == 0);
    free(out);
}

static void public_kept(void)
{
    size_t len, glen;
    uint8_t *good = encode(97, 61, SUB_420, 0, 0, &glen);
    uint8_t *jpg = encode(97, 61, SUB_CMYK, 0, 0, &len);
    check_kept(jpg, len, NULL, 0, NOSTALL_TRANSCODE_UNSUPPORTED, "CMYK");
    free(jpg);
    jpg = flat(97, 61, 3, JCS_RGB, 90, &len);
    check_kept(jpg, len, NULL, 0, NOSTALL_TRANSCODE_UNSUPPORTED, "RGB");
    free(jpg);
    const nostall_transcode_options small = {.max_pixels = 1000};
    check_kept(good, glen, &small, 0, NOSTALL_TRANSCODE_TOO_MANY_PIXELS, "max_pixels 1000");
    check_kept(good, glen, NULL, 100, NOSTALL_TRANSCODE_TOO_LARGE, "a 100-byte buffer");
    check_kept(good, glen, NULL, 0 + 1, NOSTALL_TRANSCODE_TOO_LARGE, "a 1-byte buffer");
    jpg = flat(4096, 64, 1, JCS_GRAYSCALE, 50, &len);
    check_kept(jpg, len, NULL, 0, NOSTALL_TRANSCODE_TOO_LARGE, "flat 4096x64");
    free(jpg);
    static const jpeg_scan_info dc_only[] = {{1, {0, 0, 0, 0}, 0, 0, 0, 0}};
    jpg = encode_scans(64, 48, 1, dc_only, 1, &len);
    uint8_t *out;
    size_t tlen;
    nostall_transcode_result res;
    CHECK_OK(public_rewrite(jpg, len, NULL, 0, &out, &tlen, &res));
    CHECK(tlen == 0 && res.kept == NOSTALL_TRANSCODE_INCOMPLETE_SCANS);
    CHECK(strcmp(res.message, "progressive scans leave coefficients incomplete, which decoders "
                              "smooth; a baseline copy would not be") == 0);
    free(out);
    free(jpg);
    const size_t sof = find_marker(good, glen, 0xC0);
    jpg = malloc(glen);
    memcpy(jpg, good, glen);
    jpg[sof + 4] = 12;
    check_kept(jpg, glen, NULL, 0, NOSTALL_TRANSCODE_UNSUPPORTED, "12-bit");
    free(jpg);
    CHECK(strcmp(nostall_transcode_kept_text(NOSTALL_TRANSCODE_TOO_LARGE),
                 nostall_transcode_kept_text(99)) != 0);
    CHECK(strcmp(nostall_transcode_kept_text(99), "unknown") == 0);
    free(good);
}

/* Damage and bad arguments are errors, with a message. */
static void public_errors(void)
{
    size_t len;
    uint8_t *jpg = encode(333, 517, SUB_420, 0, 0, &len),
            *out = malloc(nostall_transcode_bound(len));
    size_t tlen = 1;
    nostall_transcode_result res;
    const size_t cap = nostall_transcode_bound(len);
    int rc = nostall_transcode_jpeg(out, cap, &tlen, jpg, len / 2, NULL, 0, &res, sizeof res);
    CHECK(rc == NOSTALL_E_TRUNCATED || rc == NOSTALL_E_CORRUPT);
    CHECK(res.status == rc && tlen == 0 && res.message[0]);
    CHECK(strstr(nostall_last_error(), "nostall_transcode_jpeg: ") == nostall_last_error());
    CHECK_RC(nostall_transcode_jpeg(out, cap, &tlen, "GIF89a....", 10, NULL, 0, NULL, 0),
             NOSTALL_E_NOT_IMAGE);
    const nostall_transcode_options both = {.restart_mcus = 1, .restart_rows = 1};
    const nostall_transcode_options big = {.restart_mcus = 70000};
    const nostall_transcode_options flags = {.flags = 2};
    CHECK_RC(nostall_transcode_jpeg(out, cap, &tlen, jpg, len, &both, sizeof both, NULL, 0),
             NOSTALL_E_INVALID);
    CHECK(strstr(nostall_last_error(), "exclude") != NULL);
    CHECK_RC(nostall_transcode_jpeg(out, cap, &tlen, jpg, len, &big, sizeof big, NULL, 0),
             NOSTALL_E_INVALID);
    CHECK_RC(nostall_transcode_jpeg(out, cap, &tlen, jpg, len, &flags, sizeof flags, NULL, 0),
             NOSTALL_E_INVALID);
    CHECK_RC(nostall_transcode_jpeg(out, cap, NULL, jpg, len, NULL, 0, NULL, 0), NOSTALL_E_INVALID);
    CHECK_RC(nostall_transcode_jpeg(NULL, cap, &tlen, jpg, len, NULL, 0, NULL, 0),
             NOSTALL_E_INVALID);
    /* sizes: an older caller's shorter option and result structs */
    const nostall_transcode_options three = {.restart_mcus = 3, .max_pixels = 1};
    memset(&res, 0x5A, sizeof res);
    CHECK_OK(nostall_transcode_jpeg(out, cap, &tlen, jpg, len, &three, sizeof three.restart_mcus,
                                    &res, offsetof(nostall_transcode_result, message)));
    CHECK(tlen > 0 && res.restart_interval == 3 && res.kept == 0);
    CHECK((unsigned char)res.message[0] == 0x5A);
    CHECK_EQ(nostall_transcode_bound(0), (size_t)4096);
    CHECK_EQ(nostall_transcode_bound(800), (size_t)800 + 100 + 4096);
    CHECK_EQ(nostall_transcode_bound(SIZE_MAX - 10), SIZE_MAX);
    free(out);
    free(jpg);
}

static void public_entry(nst_decoder *fast, nst_decoder *slow)
{
    public_same_as_cache(fast);
    public_metadata(fast, slow);
    public_intervals(fast, slow);
    public_kept();
    public_errors();
}

static void transcoded(nst_decoder *fast, nst_decoder *slow)
{
    transcoded_exact(fast, slow);
    transcoded_optimized(fast, slow);
    transcoded_declined(fast, slow);
    transcoded_wide_dc(fast, slow);
    transcoded_dc_bounds(fast);
    transcoded_incomplete_scans(fast, slow);
    transcoded_damaged(fast, slow);
    transcoded_row_restarts(fast, slow);
    public_entry(fast, slow);
}

static void fuzz(nst_decoder *fast, nst_decoder *slow)
{
    enum { NB = 5 };
    size_t len[NB];
    uint8_t *base[NB] = {encode(160, 240, SUB_420, 1, 0, &len[0]),
                         encode(97, 130, SUB_GRAY, 2, 0, &len[1]),
                         encode(120, 200, SUB_444, 1, 0, &len[2]),
                         encode(160, 240, SUB_420, -1, 0, &len[3]),
                         encode(120, 200, SUB_444, -3, 0, &len[4])};
    nst_rng rng;
    nst_rng_seed(&rng, 7);
    long both_ok = 0, fast_only = 0, both_fail = 0, taken = 0;
    size_t maxlen = 0;
    for (int i = 0; i < NB; i++) maxlen = len[i] > maxlen ? len[i] : maxlen;
    uint8_t *buf = malloc(maxlen);
    for (int it = 0; it < 1000; it++) {
        int which = it % NB;
        size_t n = len[which];
        memcpy(buf, base[which], n);
        int kind = (int)(nst_rng_u64(&rng) % 4);
        int flips = 1 + (int)(nst_rng_u64(&rng) % 4);
        for (int f = 0; f < flips; f++) {
            size_t pos = (size_t)(nst_rng_u64(&rng) % n);
            if (kind == 0) {
                buf[pos] ^= (uint8_t)(1u << (nst_rng_u64(&rng) % 8));
            } else if (kind == 1) { /* damage a marker: the byte after an 0xFF */
                uint8_t *ff = memchr(buf + pos, 0xFF, n - pos);
                if (ff && ff + 1 < buf + n) ff[1] = (uint8_t)nst_rng_u64(&rng);
            } else if (kind == 2) {
                buf[pos] = (uint8_t)nst_rng_u64(&rng);
            }
        }
        if (kind == 3 || nst_rng_u64(&rng) % 8 == 0) n = 2 + (size_t)(nst_rng_u64(&rng) % (n - 2));
        nst_window roi;
        uint32_t ow, oh;
        random_roi(&rng, 120, 180, &roi, &ow, &oh);
        nst_image a, b;
        uint64_t h0 = nst_jpeg_rst_hits(fast);
        int ra = nst_decode(fast, buf, n, "fuzz", &roi, ow, oh, &a);
        uint64_t ha = ra == 0 ? hash_image(&a) : 0;
        taken += nst_jpeg_rst_hits(fast) != h0;
        int ra2 = nst_decode(fast, buf, n, "fuzz", &roi, ow, oh, &a);
        CHECK_EQ(ra, ra2);
        if (ra == 0 && ra2 == 0) CHECK(hash_image(&a) == ha);
        int rb = nst_decode(slow, buf, n, "fuzz", &roi, ow, oh, &b);
        if (rb == 0) {
            if (ra != 0)
                fprintf(stderr, "  fuzz %d: normal path ok, fast path %s: %s\n", it,
                        nostall_status_name(ra), nostall_last_error());
            CHECK_EQ(ra, 0);
            long ov, d = ra == 0 ? compare(&a, &b, &ov) : 0;
            if (d != 0) fprintf(stderr, "  fuzz %d: %ld pixels differ\n", it, d);
            CHECK_EQ(d, 0);
            both_ok++;
        } else if (ra == 0) {
            fast_only++; /* damage above the region: the fast path never reads it */
        } else {
            both_fail++;
        }
    }
    printf("fuzz: 1000 mutated files: both ok %ld, fast path only %ld, both fail %ld; "
           "fast path taken %ld times\n",
           both_ok, fast_only, both_fail, taken);
    CHECK(taken > 100);
    free(buf);
    for (int i = 0; i < NB; i++) free(base[i]);
}

int main(void)
{
    nst_decoder *fast = NULL, *slow = NULL;
    CHECK_OK(nst_decoder_create(&fast, 1u << 26));
    CHECK_OK(nst_decoder_create(&slow, 1u << 26));
    if (!fast || !slow) TEST_EXIT();
    nst_jpeg_rst_enable(slow, 0);
    exactness(fast, slow);
    declined(fast, slow);
    truncated(fast, slow);
    transcoded(fast, slow);
    fuzz(fast, slow);
    CHECK_EQ(nst_jpeg_rst_hits(slow), 0);
    nst_decoder_free(fast);
    nst_decoder_free(slow);
    TEST_EXIT();
}
