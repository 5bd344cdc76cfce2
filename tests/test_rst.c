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
 *   fuzz       1000 mutated restart-marked files (byte flips, marker
 *              damage, truncation): no crash (run under ASan by `make
 *              asan`), the same result twice, and when the normal path
 *              succeeds the fast path does too, with the same pixels.
 */
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
                               ((x / 7 + y / 5) % 2) * 60) & 255);
    test_jpeg_opts o = {w, h, comps,
                        comps == 1 ? JCS_GRAYSCALE : comps == 4 ? JCS_CMYK : JCS_RGB,
                        sub == SUB_CMYK ? JCS_YCCK : JCS_UNKNOWN, 90, progressive,
                        restart > 0 ? restart : 0, 0};
    test_jpeg_layout l = {
        (sub == SUB_420 || sub == SUB_422 || sub == SUB_CMYK) ? 2 : 1,
        (sub == SUB_420 || sub == SUB_440 || sub == SUB_CMYK) ? 2 : 1, 0, 0,
        restart < 0 ? -restart : 0};
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
        a->full_height != b->full_height || a->src_height != b->src_height ||
        a->x0 != b->x0 || a->width != b->width)
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
        {333, 517, SUB_420, 1}, {333, 517, SUB_420, 2}, {470, 425, SUB_420, 1},
        {97, 61, SUB_420, 1},   {333, 517, SUB_444, 1}, {333, 517, SUB_422, 2},
        {200, 301, SUB_440, 1}, {333, 517, SUB_GRAY, 1}, {97, 61, SUB_GRAY, 2},
        {250, 190, SUB_CMYK, 1}, {333, 517, SUB_420, -63}, /* 21 MCUs/row x 3 rows */
        {64, 2000, SUB_420, 1},
        /* column mode: a restart every k MCUs, k dividing the MCUs per row */
        {333, 517, SUB_420, -1}, {333, 517, SUB_420, -3}, /* 21 MCUs/row */
        {470, 425, SUB_420, -1}, {470, 425, SUB_420, -2}, /* 30 */
        {97, 61, SUB_420, -1},                             /* 7 */
        {333, 517, SUB_444, -1}, {333, 517, SUB_444, -2}, /* 42 */
        {333, 517, SUB_422, -1}, {333, 517, SUB_422, -7}, /* 21 */
        {200, 301, SUB_440, -1},                           /* 25 */
        {333, 517, SUB_GRAY, -1}, {97, 61, SUB_GRAY, -1}, /* 42, 13 */
        {250, 190, SUB_CMYK, -1}, {250, 190, SUB_CMYK, -2}, /* 16 */
        {64, 2000, SUB_420, -1}, {64, 2000, SUB_420, -2}, /* 4 */
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
        if (cases[ci].restart > 0) irows = (uint32_t)cases[ci].restart;
        else if ((uint32_t)-cases[ci].restart % mpr == 0) irows = (uint32_t)-cases[ci].restart / mpr;
        else gw = (uint32_t)-cases[ci].restart * mcu_w;
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
                        sub_name[cases[ci].sub], cases[ci].w, cases[ci].h, cases[ci].restart,
                        roi.x, roi.y, roi.w, roi.h, ow, oh, d);
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
        if (nst_jpeg_rst_hits(fast) != h0) fprintf(stderr, "  fast path taken: %s\n", cases[i].what);
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
    fuzz(fast, slow);
    CHECK_EQ(nst_jpeg_rst_hits(slow), 0);
    nst_decoder_free(fast);
    nst_decoder_free(slow);
    TEST_EXIT();
}
