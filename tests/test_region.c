/*
 * test_region.c — region / DCT-scaled JPEG decode (nst_decode with a roi and
 * an output size) against a full decode.
 *
 *   quality   for JPEGs of several sizes and subsamplings (4:2:0, 4:2:2,
 *             4:4:4, grayscale, CMYK, 4:1:0 as 4x2 and 2x4, 4:1:1, 4:4:0,
 *             progressive) and many rois (random
 *             resized crops, centre crops, edges, tiny upscaled rois, the
 *             whole image, a roi reaching past the image): region decode +
 *             nst_augment vs full decode + a double-precision antialiased
 *             triangle-filter resize of the same window. PSNR >= 30 dB for
 *             every case; the minimum and mean are printed.
 *   exactness the region decoded at scale 1/den (den 1, 2, 4, 8) vs the
 *             whole image decoded at the same scale: same pixels except
 *             possibly at the region's inner edges (fancy upsampling treats
 *             them as the image edge); the differences are printed.
 *   damage    a truncated baseline file: a roi in the top part decodes (the
 *             data below the roi is never read, so the damage goes unseen),
 *             a roi in the bottom part is E_TRUNCATED; a truncated
 *             progressive file is E_TRUNCATED for any roi (all scans are
 *             read up front).
 *
 * Test images are encoded in memory with libjpeg. Single-threaded.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#include "augment/augment.h"
#include "check.h"
#include "test_jpeg.h"
#include "common/rng.h"
#include "decode/decode.h"

/* ---- test images ---------------------------------------------------------- */

static uint64_t noise_s = 0x243F6A8885A308D3ull;
static uint32_t noise(void) { return test_xorshift(&noise_s); }

static uint8_t clamp8(double v) { return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v + 0.5); }

/* Photo-like content: gradients, a few oriented waves of different periods
 * (some fine), a sharp-edged disc and per-pixel grain. comps 1, 3 or 4. */
static uint8_t *make_image(int w, int h, int comps)
{
    uint8_t *p = malloc((size_t)w * h * comps);
    const double cx = w * 0.6, cy = h * 0.4, r = (w < h ? w : h) * 0.25;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            double g = 60.0 * x / w + 50.0 * y / h;
            double t = 30 * sin(x / 9.0 + y / 23.0) + 20 * sin((x - 2 * y) / 3.1) +
                       12 * sin((3 * x + y) / 1.7);
            int in = (x - cx) * (x - cx) + (y - cy) * (y - cy) < r * r;
            double grain = (double)(noise() % 17) - 8.0;
            uint8_t *q = p + ((size_t)y * w + x) * comps;
            for (int c = 0; c < comps; c++) {
                double v =
                    70 + g + t * (c == 1 ? -0.7 : 1.0) + (in ? 60 - 40 * c : 0) + grain + 15 * c;
                q[c] = clamp8(v);
            }
        }
    return p;
}

/* SUB_410 (4x2 luma) and SUB_410V (2x4): chroma upsampled 4x in one
 * direction and 2x in the other, which libjpeg-turbo's crop gets wrong at
 * reduced scales (see jpeg.c, crop_safe); SUB_411 (4x1), SUB_440 (1x2). */
enum {
    SUB_420,
    SUB_422,
    SUB_444,
    SUB_GRAY,
    SUB_CMYK,
    SUB_410,
    SUB_410V,
    SUB_411,
    SUB_440,
    SUB_COUNT
};
static const char *sub_name[] =
    {"4:2:0", "4:2:2", "4:4:4", "gray", "cmyk", "4:1:0 (4x2)", "4x2 vertical (2x4)",
     "4:1:1", "4:4:0"};

static uint8_t *encode(int w, int h, int sub, int progressive, int quality, size_t *len)
{
    int comps = sub == SUB_GRAY ? 1 : sub == SUB_CMYK ? 4 : 3;
    uint8_t *px = make_image(w, h, comps);
    test_jpeg_opts o = {w,
                        h,
                        comps,
                        comps == 1   ? JCS_GRAYSCALE
                        : comps == 4 ? JCS_CMYK
                                     : JCS_RGB,
                        sub == SUB_CMYK ? JCS_YCCK : JCS_UNKNOWN,
                        quality,
                        progressive,
                        0,
                        0};
    test_jpeg_layout l = {0};
    if (sub == SUB_420 || sub == SUB_422 || sub == SUB_CMYK) {
        l.luma_h = 2;
        l.luma_v = sub == SUB_422 ? 1 : 2;
        if (sub == SUB_CMYK) l.k_h = l.k_v = 2;
    } else if (sub == SUB_444) {
        l.luma_h = l.luma_v = 1;
    } else {
        l.luma_h = sub == SUB_410 || sub == SUB_411 ? 4 : sub == SUB_410V ? 2 : 1;
        l.luma_v = sub == SUB_410 ? 2 : sub == SUB_410V ? 4 : sub == SUB_440 ? 2 : 1;
    }
    uint8_t *out = test_jpeg_encode_ex(px, &o, &l, len);
    free(px);
    return out;
}

/* ---- reference resampler ----------------------------------------------------- */

/* Weights of `size` outputs resampling [in0, in0 + len) of an axis of n
 * pixels with a triangle filter of support max(1, scale) (antialiased),
 * taps clamped to the edge: w[i * n + x]. Dense and slow on purpose. */
typedef struct {
    double *w; /* w[i * n + x], zero outside [lo[i], hi[i]) */
    int *lo, *hi;
} ref_axis;

static ref_axis ref_weights(double in0, double len, int n, int size)
{
    ref_axis ax = {calloc((size_t)size * n, sizeof(double)), calloc((size_t)size, sizeof(int)),
                   calloc((size_t)size, sizeof(int))};
    const double scale = len / size, support = scale > 1 ? scale : 1;
    for (int i = 0; i < size; i++) {
        const double center = in0 + (i + 0.5) * scale;
        double *w = ax.w + (size_t)i * n, total = 0;
        ax.lo[i] = n;
        ax.hi[i] = 0;
        for (long x = (long)floor(center - support) - 1; x <= (long)ceil(center + support) + 1;
             x++) {
            double f = 1 - fabs((x + 0.5 - center) / support);
            if (f <= 0) continue;
            int xc = x < 0 ? 0 : x >= n ? n - 1 : (int)x;
            w[xc] += f;
            total += f;
            if (xc < ax.lo[i]) ax.lo[i] = xc;
            if (xc + 1 > ax.hi[i]) ax.hi[i] = xc + 1;
        }
        for (int x = ax.lo[i]; x < ax.hi[i]; x++) w[x] /= total;
    }
    return ax;
}

static void ref_free(ref_axis *ax)
{
    free(ax->w);
    free(ax->lo);
    free(ax->hi);
}

/* Resample window `win` of the full image to size x size, in doubles. */
static double *ref_resize(const nst_image *im, const nst_window *win, int size)
{
    const int n = (int)im->width, m = (int)im->height;
    ref_axis ax = ref_weights(win->x, win->w, n, size);
    ref_axis ay = ref_weights(win->y, win->h, m, size);
    double *tmp = calloc((size_t)m * size * 3, sizeof *tmp);
    double *out = calloc((size_t)size * size * 3, sizeof *out);
    for (int y = 0; y < m; y++)
        for (int i = 0; i < size; i++)
            for (int x = ax.lo[i]; x < ax.hi[i]; x++) {
                double f = ax.w[(size_t)i * n + x];
                const uint8_t *p = im->data + (size_t)y * im->stride + (size_t)x * 3;
                for (int c = 0; c < 3; c++) tmp[((size_t)y * size + i) * 3 + c] += f * p[c];
            }
    for (int j = 0; j < size; j++)
        for (int y = ay.lo[j]; y < ay.hi[j]; y++) {
            double f = ay.w[(size_t)j * m + y];
            for (int i = 0; i < size * 3; i++)
                out[(size_t)j * size * 3 + i] += f * tmp[(size_t)y * size * 3 + i];
        }
    ref_free(&ax);
    ref_free(&ay);
    free(tmp);
    return out;
}

static double psnr(const uint8_t *a, const double *ref, size_t n)
{
    double se = 0;
    for (size_t i = 0; i < n; i++) {
        double e = a[i] - ref[i];
        se += e * e;
    }
    double mse = se / (double)n;
    return mse < 1e-10 ? 99.0 : 10 * log10(255.0 * 255.0 / mse);
}

/* ---- quality ----------------------------------------------------------------- */

typedef struct {
    double min, sum, min_full, sum_full;
    int n;
    int den_count[9];
} stats;

static void one_roi(nst_decoder *d, nst_augmenter *a, const uint8_t *j, size_t len, const char *name,
                    const nst_image *full, const nst_window *win, int size, stats *st)
{
    nst_image im;
    uint8_t *got = malloc((size_t)size * size * 3);
    uint8_t *got_full = malloc((size_t)size * size * 3);
    nst_output out = {.dtype = NST_OUT_U8, .size = (uint32_t)size, .dst = got};
    nst_output out_full = {.dtype = NST_OUT_U8, .size = (uint32_t)size, .dst = got_full};
    /* full decode + nst_augment: separates resampler error from decode error */
    CHECK_OK(nst_augment(a, full, win, 0, &out_full));
    double *ref = ref_resize(full, win, size);
    int rc = nst_decode(d, j, len, name, win, (uint32_t)size, (uint32_t)size, &im);
    CHECK_OK(rc);
    if (rc == 0) {
        /* geometry of the result */
        CHECK(im.scale_num == 1 && im.scale_den >= 1 && im.scale_den <= 8);
        CHECK_EQ(im.src_width, full->width);
        CHECK_EQ(im.src_height, full->height);
        CHECK_EQ(im.full_width, (full->width + im.scale_den - 1) / im.scale_den);
        CHECK_EQ(im.full_height, (full->height + im.scale_den - 1) / im.scale_den);
        CHECK(im.x0 + im.width <= im.full_width && im.y0 + im.height <= im.full_height);
        /* the chosen scale keeps the roi at least as large as the output */
        CHECK(im.scale_den == 1 || (win->w / im.scale_den >= size && win->h / im.scale_den >= size));
        st->den_count[im.scale_den]++;
        CHECK_OK(nst_augment(a, &im, win, 0, &out));
        double p = psnr(got, ref, (size_t)size * size * 3);
        double pf = psnr(got_full, ref, (size_t)size * size * 3);
        if (p < 33)
            fprintf(stderr, "%s: roi (%.1f %.1f %.1f %.1f) -> %d: PSNR %.2f dB (scale 1/%u)\n",
                    name, win->x, win->y, win->w, win->h, size, p, im.scale_den);
        CHECK(p >= 30);
        if (p < st->min) st->min = p;
        if (pf < st->min_full) st->min_full = pf;
        st->sum += p;
        st->sum_full += pf;
        st->n++;
    }
    free(ref);
    free(got);
    free(got_full);
}

static void test_quality(void)
{
    static const int sizes[][2] = {{470, 425}, {1024, 683}, {333, 517}, {97, 61}};
    nst_decoder *d = NULL, *dfull = NULL;
    nst_augmenter *a = NULL;
    CHECK_OK(nst_decoder_create(&d, 100000000ull));
    CHECK_OK(nst_decoder_create(&dfull, 100000000ull));
    CHECK_OK(nst_augmenter_create(&a));
    if (!d || !dfull || !a) return;
    stats all = {1e9, 0, 1e9, 0, 0, {0}};
    nst_rng rng;
    nst_rng_seed(&rng, 12345);
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (int sub = SUB_420; sub < SUB_COUNT; sub++)
            for (int prog = 0; prog < 2; prog++) {
                if (prog && sub != SUB_420 && sub != SUB_GRAY) continue;
                const int w = sizes[si][0], h = sizes[si][1];
                size_t len;
                uint8_t *j = encode(w, h, sub, prog, 92, &len);
                char name[96];
                snprintf(name, sizeof name, "%dx%d-%s%s.jpg", w, h, sub_name[sub],
                         prog ? "-prog" : "");
                nst_image full;
                CHECK_OK(nst_decode(dfull, j, len, name, NULL, 0, 0, &full));
                stats st = {1e9, 0, 1e9, 0, 0, {0}};
                const int out_sizes[2] = {64, 224};
                for (int oi = 0; oi < 2; oi++) {
                    const int size = out_sizes[oi];
                    nst_window win;
                    /* random resized crops (ImageNet parameters) */
                    for (int k = 0; k < 12; k++) {
                        nst_crop_random_resized((uint32_t)w, (uint32_t)h, 0.08, 1.0, 3.0 / 4,
                                                4.0 / 3, &rng, &win);
                        one_roi(d, a, j, len, name, &full, &win, size, &st);
                    }
                    /* eval centre crops: usual, and crop larger than resize
                     * (the window reaches past the image) */
                    nst_crop_center((uint32_t)w, (uint32_t)h, (uint32_t)(size * 8 / 7),
                                    (uint32_t)size, &win);
                    one_roi(d, a, j, len, name, &full, &win, size, &st);
                    nst_crop_center((uint32_t)w, (uint32_t)h, (uint32_t)(size * 3 / 4),
                                    (uint32_t)size, &win);
                    one_roi(d, a, j, len, name, &full, &win, size, &st);
                    /* whole image; the four corners; tiny (upscaled) rois */
                    const nst_window fixed[] = {
                        {0, 0, w, h},
                        {0, 0, w * 0.3, h * 0.4},
                        {w * 0.7, 0, w * 0.3, h * 0.3},
                        {0, h * 0.55, w * 0.45, h * 0.45},
                        {w * 0.5, h * 0.5, w * 0.5, h * 0.5},
                        {w * 0.4, h * 0.3, 5, 7},
                        {w - 3.0, h - 2.0, 3, 2},
                        {0.5, 0.25, 1.5, 1.5},
                        {w + 20.0, -30.0, 10, 10}, /* wholly off the image */
                        {w - 0.5, h * 0.5, 40, 3}, /* mostly off the right edge */
                        {w * 0.2 + 0.37, h * 0.1 + 0.81, w * 0.33, h * 0.51},
                    };
                    for (size_t f = 0; f < sizeof fixed / sizeof fixed[0]; f++)
                        one_roi(d, a, j, len, name, &full, &fixed[f], size, &st);
                }
                printf("%-26s PSNR region min %6.2f mean %6.2f | full+augment min %6.2f mean "
                       "%6.2f | scales 1:%d 1/2:%d 1/4:%d 1/8:%d\n",
                       name, st.min, st.sum / st.n, st.min_full, st.sum_full / st.n,
                       st.den_count[1], st.den_count[2], st.den_count[4], st.den_count[8]);
                if (st.min < all.min) all.min = st.min;
                if (st.min_full < all.min_full) all.min_full = st.min_full;
                all.sum += st.sum;
                all.sum_full += st.sum_full;
                all.n += st.n;
                for (int k = 0; k < 9; k++) all.den_count[k] += st.den_count[k];
                free(j);
            }
    printf("ALL %d cases: PSNR region min %.2f mean %.2f | full+augment min %.2f mean %.2f | "
           "scales 1:%d 1/2:%d 1/4:%d 1/8:%d\n",
           all.n, all.min, all.sum / all.n, all.min_full, all.sum_full / all.n, all.den_count[1],
           all.den_count[2], all.den_count[4], all.den_count[8]);
    nst_augmenter_free(a);
    nst_decoder_free(d);
    nst_decoder_free(dfull);
}

/* ---- exactness ------------------------------------------------------------------ */

/* Region at scale 1/den vs the whole image at 1/den (a decode without roi
 * whose output size allows exactly that scale). */
static void test_exact(void)
{
    static const int sizes[][2] = {{470, 425}, {333, 517}, {61, 97}};
    nst_decoder *d = NULL, *dfull = NULL;
    CHECK_OK(nst_decoder_create(&d, 100000000ull));
    CHECK_OK(nst_decoder_create(&dfull, 100000000ull));
    if (!d || !dfull) return;
    nst_rng rng;
    nst_rng_seed(&rng, 777);
    double worst_mean = 0, sum_abs = 0;
    size_t npx = 0, ndiff = 0, ndiff_inner = 0;
    int maxdiff = 0;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (int sub = SUB_420; sub < SUB_COUNT; sub++)
            for (int prog = 0; prog < 2; prog++) {
                const int w = sizes[si][0], h = sizes[si][1];
                size_t len;
                uint8_t *j = encode(w, h, sub, prog, 90, &len);
                for (unsigned den = 1; den <= 8; den *= 2) {
                    nst_image full, im;
                    uint32_t ow = (uint32_t)(w / (int)den), oh = (uint32_t)(h / (int)den);
                    if (ow == 0 || oh == 0) continue;
                    if (den == 1) ow = oh = 0;
                    CHECK_OK(nst_decode(dfull, j, len, "full.jpg", NULL, ow, oh, &full));
                    if (full.scale_den != den) {
                        /* 4:1:1 decodes at 1/2 at most (jpeg.c, coarse_chroma) */
                        CHECK(sub == SUB_411 && den > 2 && full.scale_den == 2);
                        continue;
                    }
                    for (int k = 0; k < 10; k++) {
                        nst_window win;
                        nst_crop_random_resized((uint32_t)w, (uint32_t)h, 0.02, 0.6, 0.5, 2.0, &rng,
                                                &win);
                        /* an output size that selects scale 1/den */
                        uint32_t out = 0;
                        if (den > 1) {
                            double mn = win.w < win.h ? win.w : win.h;
                            out = (uint32_t)floor(mn / den);
                            if (out == 0 || (uint32_t)floor(mn / (2 * den)) >= out) continue;
                        }
                        int rc = nst_decode(d, j, len, "region.jpg", &win, out, out, &im);
                        CHECK_OK(rc);
                        if (rc < 0) continue;
                        CHECK_EQ(im.scale_den, den);
                        CHECK_EQ(im.full_width, full.width);
                        CHECK_EQ(im.full_height, full.height);
                        double s = 0;
                        for (uint32_t y = 0; y < im.height; y++)
                            for (uint32_t x = 0; x < im.width; x++) {
                                /* inner: not within 2 px of a region edge
                                 * that is not the image edge */
                                int inner = (im.x0 == 0 || x >= 2) && (im.y0 == 0 || y >= 2) &&
                                            (im.x0 + im.width == full.width || x + 2 < im.width) &&
                                            (im.y0 + im.height == full.height || y + 2 < im.height);
                                for (int c = 0; c < 3; c++) {
                                    int v = im.data[y * im.stride + x * 3 + c];
                                    int r =
                                        full.data[(im.y0 + y) * full.stride + (im.x0 + x) * 3 + c];
                                    int e = abs(v - r);
                                    s += e;
                                    if (e > maxdiff) maxdiff = e;
                                    if (e) {
                                        ndiff++;
                                        if (inner) ndiff_inner++;
                                    }
                                }
                            }
                        double mean = s / ((double)im.width * im.height * 3);
                        sum_abs += s;
                        npx += (size_t)im.width * im.height * 3;
                        if (mean > worst_mean) worst_mean = mean;
                        CHECK(mean <= 2.0);
                    }
                }
                free(j);
            }
    printf("region vs full decode at the same scale: %zu samples, %zu differ (%zu away from "
           "the region's inner edges), max diff %d, mean abs diff %.5f, worst region mean "
           "%.4f\n",
           npx, ndiff, ndiff_inner, maxdiff, sum_abs / (double)npx, worst_mean);
    CHECK_EQ(ndiff_inner, 0);
    nst_decoder_free(d);
    nst_decoder_free(dfull);
}

/* ---- damage ---------------------------------------------------------------------- */

static void test_truncated(void)
{
    nst_decoder *d = NULL;
    CHECK_OK(nst_decoder_create(&d, 100000000ull));
    if (!d) return;
    const int w = 480, h = 640;
    nst_image im;
    for (int prog = 0; prog < 2; prog++) {
        size_t len;
        uint8_t *j = encode(w, h, SUB_420, prog, 90, &len);
        size_t cut = len * 6 / 10;
        nst_window top = {40, 10, 200, 150}, bottom = {40, h - 160, 200, 150};
        /* intact: both fine */
        CHECK_OK(nst_decode(d, j, len, "intact.jpg", &top, 64, 64, &im));
        CHECK_OK(nst_decode(d, j, len, "intact.jpg", &bottom, 64, 64, &im));
        /* bottom roi: the rows needed are missing */
        CHECK_RC(nst_decode(d, j, cut, "cut.jpg", &bottom, 64, 64, &im), NOSTALL_E_TRUNCATED);
        CHECK_RC(nst_decode(d, j, cut, "cut.jpg", &bottom, 0, 0, &im), NOSTALL_E_TRUNCATED);
        CHECK_RC(nst_decode(d, j, cut, "cut.jpg", NULL, 0, 0, &im), NOSTALL_E_TRUNCATED);
        int rc = nst_decode(d, j, cut, "cut.jpg", &top, 64, 64, &im);
        if (prog) {
            /* all scans are read before the first row: always found */
            CHECK_RC(rc, NOSTALL_E_TRUNCATED);
        } else {
            /* documented: the damage below the roi is not seen */
            CHECK_OK(rc);
            CHECK(im.y0 + im.height < (uint32_t)h / im.scale_den / 2);
        }
        printf("truncated %s at 60%%: top roi %s, bottom roi E_TRUNCATED\n",
               prog ? "progressive" : "baseline", rc == 0 ? "decodes" : "E_TRUNCATED");
        free(j);
    }
    nst_decoder_free(d);
}

int main(void)
{
    test_quality();
    test_exact();
    test_truncated();
    TEST_EXIT();
}
