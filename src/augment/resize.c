/*
 * resize.c — the fused augmentation: resample a window of a decoded RGB8
 * image to size x size, mirror it, and hand each finished row to the output
 * writer (normalize.c).
 *
 * Design: a separable resampler in the manner of PIL's BILINEAR with a box.
 * For each axis, output pixel i has its centre at in0 + (i + 0.5) * scale in
 * the input (scale = window length / size); the triangle filter's support is
 * max(1, scale) input pixels, so downscaling is antialiased. Taps that fall
 * outside the image data are clamped to its edge (their weights are folded
 * onto the edge pixel). Weights are normalized in double precision, then
 * converted to NST_AUG_BITS-bit fixed point: non-negative, summing to
 * exactly one, so both passes are integer, no accumulator can leave
 * [0, 255] and a constant image stays exactly constant. Every output of an
 * axis gets the same number of taps k (zero-padded), so the horizontal inner
 * loop has a fixed, usually compile-time, trip count.
 *
 * The horizontal pass runs first, over only the input rows the vertical
 * taps touch, into a rounded uint8 intermediate (like PIL); the flip is
 * folded into its taps by giving output column i those of column size-1-i.
 * The vertical pass accumulates one output row at a time in int32 (fixed
 * 16-element blocks, so it vectorizes at -O2) and the row goes straight to
 * the destination in its layout (normalize.c).
 *
 * Coordinates: the window is in source-image pixels; img->data is the image
 * decoded at scale_num/scale_den with its pixel (0,0) at (x0,y0) of that
 * scaled image, so a source coordinate s maps to s * num/den - x0 there.
 *
 * Threads: an nst_augmenter belongs to one worker; its grow-only buffers
 * (taps, intermediate rows, accumulators) make the steady state allocation
 * free. No global state.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "augment/augment_impl.h"
#include "common/buf.h"
#include "common/error.h"

/* Windows are rejected when they map beyond this many pixels (keeps every
 * tap index and filter size comfortably inside int32). */
#define NST_AUG_MAX_COORD 67108864.0 /* 2^26 */

typedef struct nst_axis {
    nst_buf bounds; /* int32 pairs per output: first input index, tap count */
    nst_buf coefs;  /* int32 [size][k]: fixed-point weights               */
    uint32_t k;     /* stride of coefs: the most taps any output has      */
} nst_axis;

struct nst_augmenter {
    nst_axis ax, ay;
    nst_buf work; /* double weights of one output pixel                  */
    nst_buf tmp;  /* uint8 intermediate: horizontally resampled rows     */
    nst_buf acc;  /* int32 accumulator row of the vertical pass          */
};

int nst_augmenter_create(nst_augmenter **out)
{
    nst_augmenter *a = calloc(1, sizeof *a);
    if (!a) return nst_error(NOSTALL_E_NOMEM, "augment: cannot allocate augmenter");
    *out = a;
    return 0;
}

void nst_augmenter_free(nst_augmenter *a)
{
    if (!a) return;
    nst_buf_free(&a->ax.bounds);
    nst_buf_free(&a->ax.coefs);
    nst_buf_free(&a->ay.bounds);
    nst_buf_free(&a->ay.coefs);
    nst_buf_free(&a->work);
    nst_buf_free(&a->tmp);
    nst_buf_free(&a->acc);
    free(a);
}

static inline int64_t clamp64(int64_t v, int64_t lo, int64_t hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* Taps of `size` outputs resampling [in0, in0 + len) of an axis of n pixels. */
static int build_axis(nst_axis *ax, nst_buf *work, double in0, double len,
                      uint32_t n, uint32_t size, int flip)
{
    const double scale = len / (double)size;
    const double support = scale > 1.0 ? scale : 1.0; /* triangle: 1 * scale */
    const double inv = 1.0 / support;
    /* Candidate taps span at most kd = 2 * ceil(support) + 1 pixels; clamped
     * into the image they also number at most n. */
    const double kd = ceil(support) * 2.0 + 1.0;
    const uint32_t kc = kd < (double)n ? (uint32_t)kd : n;
    size_t nb, nk, nc, nw;
    if (nst_mul_overflow(size, 2 * sizeof(int32_t), &nb) ||
        nst_mul_overflow(size, kc, &nk) ||
        nst_mul_overflow(nk, sizeof(int32_t), &nc) ||
        nst_mul_overflow(nk, sizeof(double), &nw))
        return nst_error(NOSTALL_E_NOMEM, "augment: filter too large");
    int rc;
    if ((rc = nst_buf_reserve(&ax->bounds, nb)) < 0) return rc;
    if ((rc = nst_buf_reserve(&ax->coefs, nc)) < 0) return rc;
    if ((rc = nst_buf_reserve(work, nw)) < 0) return rc;

    int32_t *bounds = (int32_t *)(void *)ax->bounds.data;
    int32_t *coefs = (int32_t *)(void *)ax->coefs.data;
    const int64_t last = (int64_t)n - 1;

    /* Phase 1: normalized double weights of each output, folded onto the
     * clamped indices and trimmed of zero-weight ends; bounds = first, count. */
    int64_t k = 1;
    for (uint32_t i = 0; i < size; i++) {
        double *w = (double *)(void *)work->data + (size_t)i * kc;
        /* Mirrored: output i takes the taps of output size-1-i. */
        const uint32_t src_i = flip ? size - 1 - i : i;
        const double center = in0 + ((double)src_i + 0.5) * scale;
        /* Taps x in [lo, hi): those whose centre x + 0.5 can be within the
         * support, rounded as PIL does. */
        int64_t lo = (int64_t)floor(center - support + 0.5);
        int64_t hi = (int64_t)floor(center + support + 0.5);
        if (hi <= lo) hi = lo + 1;
        /* At most kd (floating-point rounding could add an extra candidate
         * of zero weight at an exact boundary). */
        if (hi - lo > (int64_t)kd) hi = lo + (int64_t)kd;
        const int64_t base = clamp64(lo, 0, last);
        const int64_t span = clamp64(hi - 1, 0, last) - base + 1;
        for (int64_t j = 0; j < span; j++) w[j] = 0.0;
        double total = 0.0;
        int64_t wlo = span, whi = -1; /* range of positive weights */
        for (int64_t x = lo; x < hi; x++) {
            double f = 1.0 - fabs(((double)x + 0.5 - center) * inv);
            if (!(f > 0.0)) continue;
            int64_t j = clamp64(x, 0, last) - base;
            w[j] += f;
            total += f;
            if (j < wlo) wlo = j;
            if (j > whi) whi = j;
        }
        if (!(total > 0.0)) { /* cannot happen (support >= 1); be safe */
            w[0] = total = 1.0;
            wlo = whi = 0;
        }
        for (int64_t j = wlo; j <= whi; j++) w[j - wlo] = w[j] / total;
        bounds[2 * i] = (int32_t)(base + wlo);
        bounds[2 * i + 1] = (int32_t)(whi - wlo + 1);
        if (whi - wlo + 1 > k) k = whi - wlo + 1;
    }

    /* Phase 2: every output gets exactly k taps starting inside [0, n - k]
     * (k <= kc <= n), the unused ones zero, so the passes run a fixed-count
     * inner loop; weights become fixed point summing to exactly one. */
    ax->k = (uint32_t)k;
    for (uint32_t i = 0; i < size; i++) {
        const double *w = (const double *)(const void *)work->data + (size_t)i * kc;
        const int64_t first = bounds[2 * i], cnt = bounds[2 * i + 1];
        const int64_t start = first < (int64_t)n - k ? first : (int64_t)n - k;
        int32_t *c = coefs + (size_t)i * (size_t)k;
        memset(c, 0, sizeof(int32_t) * (size_t)k);
        c += first - start;
        /* Round the running sum, not each weight: the coefficients are
         * non-negative and add up to exactly NST_AUG_ONE, so every
         * accumulator stays within [0, 255] * NST_AUG_ONE + NST_AUG_HALF. */
        double cum = 0.0;
        int32_t prev = 0;
        for (int64_t j = 0; j < cnt; j++) {
            cum += w[j];
            int32_t next = j == cnt - 1 ? NST_AUG_ONE
                                        : (int32_t)floor(cum * NST_AUG_ONE + 0.5);
            if (next > NST_AUG_ONE) next = NST_AUG_ONE;
            if (next < prev) next = prev;
            c[j] = next - prev;
            prev = next;
        }
        bounds[2 * i] = (int32_t)start;
        bounds[2 * i + 1] = (int32_t)k;
    }
    return 0;
}

/* Accumulator -> pixel. No clamping needed: taps are non-negative and sum
 * to exactly one (build_axis), so the value is already within [0, 255]. */
static inline uint8_t px8(int32_t a) { return (uint8_t)(a >> NST_AUG_BITS); }

#if defined(__GNUC__)
#define NST_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define NST_ALWAYS_INLINE inline
#endif
#if defined(__clang__)
#define NST_UNROLL _Pragma("unroll 16")
#elif defined(__GNUC__)
#define NST_UNROLL _Pragma("GCC unroll 16")
#else
#define NST_UNROLL
#endif

/* One input row -> one intermediate row of `size` RGB pixels; every output
 * has exactly k taps (a constant in the specialized copies below). */
static NST_ALWAYS_INLINE void hpass_row_k(const uint8_t *restrict src,
                                          const int32_t *restrict xb,
                                          const int32_t *restrict xc, uint32_t k,
                                          uint32_t size, uint8_t *restrict dst)
{
    for (uint32_t i = 0; i < size; i++) {
        const uint8_t *p = src + (size_t)xb[2 * i] * 3;
        const int32_t *c = xc + (size_t)i * k;
        int32_t r = NST_AUG_HALF, g = NST_AUG_HALF, b = NST_AUG_HALF;
        NST_UNROLL
        for (uint32_t t = 0; t < k; t++) {
            const int32_t ct = c[t];
            r += p[3 * t] * ct;
            g += p[3 * t + 1] * ct;
            b += p[3 * t + 2] * ct;
        }
        dst[3 * i] = px8(r);
        dst[3 * i + 1] = px8(g);
        dst[3 * i + 2] = px8(b);
    }
}

static void hpass_row(const uint8_t *src, const int32_t *xb, const int32_t *xc,
                      uint32_t k, uint32_t size, uint8_t *dst)
{
    switch (k) { /* the usual tap counts, unrolled */
#define NST_HCASE(K)                                                           \
    case K: hpass_row_k(src, xb, xc, K, size, dst); return;
        NST_HCASE(1) NST_HCASE(2) NST_HCASE(3) NST_HCASE(4) NST_HCASE(5)
        NST_HCASE(6) NST_HCASE(7) NST_HCASE(8) NST_HCASE(9)
#undef NST_HCASE
    default: hpass_row_k(src, xb, xc, k, size, dst); return;
    }
}

/* acc[0 .. nblk*LANES) = rounding + c * row[...], the first tap. */
static void vpass_first(int32_t *restrict acc, const uint8_t *restrict row,
                        int32_t c, size_t nblk)
{
    for (size_t bk = 0; bk < nblk; bk++) {
        int32_t *restrict a = acc + bk * NST_AUG_LANES;
        const uint8_t *restrict r = row + bk * NST_AUG_LANES;
        for (int l = 0; l < NST_AUG_LANES; l++) a[l] = NST_AUG_HALF + c * (int32_t)r[l];
    }
}

/* acc[0 .. nblk*LANES) += c * row[...] in fixed-size blocks (vectorizes). */
static void vpass_tap(int32_t *restrict acc, const uint8_t *restrict row,
                      int32_t c, size_t nblk)
{
    for (size_t bk = 0; bk < nblk; bk++) {
        int32_t *restrict a = acc + bk * NST_AUG_LANES;
        const uint8_t *restrict r = row + bk * NST_AUG_LANES;
        for (int l = 0; l < NST_AUG_LANES; l++) a[l] += c * (int32_t)r[l];
    }
}

int nst_augment(nst_augmenter *a, const nst_image *img, const nst_window *win,
                int flip, const nst_output *out)
{
    int rc = nst_out_check(out);
    if (rc < 0) return rc;
    if (!a || !img || !win)
        return nst_error(NOSTALL_E_INVALID, "augment: missing argument");
    if (!img->data || img->width == 0 || img->height == 0 ||
        img->width > (uint32_t)NST_AUG_MAX_COORD ||
        img->height > (uint32_t)NST_AUG_MAX_COORD ||
        img->stride / 3 < img->width || img->scale_num == 0 || img->scale_den == 0)
        return nst_error(NOSTALL_E_INVALID,
                         "augment: bad image (%ux%u, stride %zu, scale %u/%u)",
                         img->width, img->height, img->stride, img->scale_num,
                         img->scale_den);
    if (!isfinite(win->x) || !isfinite(win->y) || !isfinite(win->w) ||
        !isfinite(win->h) || !(win->w > 0.0) || !(win->h > 0.0))
        return nst_error(NOSTALL_E_INVALID,
                         "augment: invalid window (x %g, y %g, w %g, h %g)",
                         win->x, win->y, win->w, win->h);

    /* Window in the coordinates of img->data. */
    const double s = (double)img->scale_num / (double)img->scale_den;
    const double wx = win->x * s - (double)img->x0;
    const double wy = win->y * s - (double)img->y0;
    const double ww = win->w * s, wh = win->h * s;
    const double m = NST_AUG_MAX_COORD;
    if (!(fabs(wx) <= m && fabs(wy) <= m && ww <= m && wh <= m && ww > 0.0 &&
          wh > 0.0))
        return nst_error(NOSTALL_E_INVALID,
                         "augment: window (x %g, y %g, w %g, h %g) out of range",
                         win->x, win->y, win->w, win->h);

    const uint32_t size = out->size;
    size_t row, rowp, nblk;
    if (nst_mul_overflow(size, 3, &row) || row > SIZE_MAX - NST_AUG_LANES)
        return nst_error(NOSTALL_E_INVALID, "augment: output size %u too large", size);
    nblk = (row + NST_AUG_LANES - 1) / NST_AUG_LANES;
    rowp = nblk * NST_AUG_LANES;

    if ((rc = build_axis(&a->ax, &a->work, wx, ww, img->width, size, flip)) < 0) return rc;
    if ((rc = build_axis(&a->ay, &a->work, wy, wh, img->height, size, 0)) < 0) return rc;
    const int32_t *xb = (const int32_t *)(const void *)a->ax.bounds.data;
    const int32_t *xc = (const int32_t *)(const void *)a->ax.coefs.data;
    const int32_t *yb = (const int32_t *)(const void *)a->ay.bounds.data;
    const int32_t *yc = (const int32_t *)(const void *)a->ay.coefs.data;

    /* Input rows the vertical taps touch. */
    int32_t ylo = INT32_MAX, yhi = 0;
    for (uint32_t y = 0; y < size; y++) {
        if (yb[2 * y] < ylo) ylo = yb[2 * y];
        if (yb[2 * y] + yb[2 * y + 1] > yhi) yhi = yb[2 * y] + yb[2 * y + 1];
    }
    size_t nrows = (size_t)(yhi - ylo), tbytes, abytes;
    if (nst_mul_overflow(nrows, rowp, &tbytes) ||
        nst_mul_overflow(rowp, sizeof(int32_t), &abytes))
        return nst_error(NOSTALL_E_NOMEM, "augment: intermediate too large");
    if ((rc = nst_buf_reserve(&a->tmp, tbytes)) < 0) return rc;
    if ((rc = nst_buf_reserve(&a->acc, abytes)) < 0) return rc;
    uint8_t *tmp = a->tmp.data;
    int32_t *acc = (int32_t *)(void *)a->acc.data;

    for (size_t r = 0; r < nrows; r++) {
        uint8_t *d = tmp + r * rowp;
        hpass_row(img->data + ((size_t)ylo + r) * img->stride, xb, xc, a->ax.k,
                  size, d);
        memset(d + row, 0, rowp - row); /* padding lanes: defined, unused */
    }

    for (uint32_t y = 0; y < size; y++) {
        const int32_t *c = yc + (size_t)y * a->ay.k;
        const int32_t n = yb[2 * y + 1];
        const uint8_t *r0 = tmp + (size_t)(yb[2 * y] - ylo) * rowp;
        vpass_first(acc, r0, c[0], nblk);
        for (int32_t t = 1; t < n; t++)
            vpass_tap(acc, r0 + (size_t)t * rowp, c[t], nblk);
        nst_out_row(out, y, acc);
    }
    return 0;
}
