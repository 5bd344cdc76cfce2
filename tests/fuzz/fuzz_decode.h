/*
 * fuzz_decode.h — helpers shared by the decoder fuzz targets (fuzz_jpeg*.c,
 * fuzz_png.c): decoders with a small pixel limit, the statuses a decoder may
 * return for untrusted bytes, image comparison, and a failure that stops
 * the run (abort: libFuzzer saves the input as a crash; the replay test
 * fails).
 *
 * The targets assert behaviour, not only the absence of crashes: every
 * status is one a bad item may have and its message names the item; a
 * success gives an image inside the bounds the decoder reports, every byte
 * of which is read (so ASan sees an out-of-bounds image); and where two
 * paths must agree (our Huffman decoder's two builds, the restart-marker
 * fast path and the normal one, ours and libjpeg-turbo's), they do.
 *
 * Each target keeps its decoders across inputs (static, created on the
 * first input), as a worker keeps its one decoder: an earlier input must
 * not change the answer for a later one (test_decode.c checks that
 * directly; here it shows as an input whose replay alone differs).
 */
#ifndef NOSTALL_FUZZ_DECODE_H
#define NOSTALL_FUZZ_DECODE_H

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nostall.h"
#include "decode/decode.h"
#include "decode/decode_impl.h"

/* 4 Mpixel: large enough for every layout, small enough that a header
 * claiming the most does not make an input slow (libjpeg's working memory
 * is capped from it too). */
#define FUZZ_MAX_PIXELS (1u << 22)
#define FUZZ_PATH "fuzz-item"

static void fuzz_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));
static void fuzz_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s:%d: fuzz check failed: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n  last error: %s\n", nostall_last_error());
    fflush(stderr);
    abort();
}

#define FUZZ_CHECK(cond, ...)                                                                      \
    do {                                                                                           \
        if (!(cond)) fuzz_fail(__FILE__, __LINE__, __VA_ARGS__);                                   \
    } while (0)

static inline nst_decoder *fuzz_decoder(void)
{
    nst_decoder *d = NULL;
    if (nst_decoder_create(&d, FUZZ_MAX_PIXELS) < 0 || !d) {
        fprintf(stderr, "fuzz: cannot create a decoder: %s\n", nostall_last_error());
        abort();
    }
    return d;
}

/* A status a decode of untrusted bytes may return, with a message naming
 * the item. */
static inline void fuzz_check_status(int rc, const char *what)
{
    if (rc == 0) return;
    FUZZ_CHECK(rc == NOSTALL_E_CORRUPT || rc == NOSTALL_E_TRUNCATED || rc == NOSTALL_E_NOT_IMAGE ||
                   rc == NOSTALL_E_TOO_MANY_PIXELS || rc == NOSTALL_E_UNSUPPORTED ||
                   rc == NOSTALL_E_EMPTY,
               "%s: status %d (%s)", what, rc, nostall_status_name(rc));
    FUZZ_CHECK(strstr(nostall_last_error(), FUZZ_PATH) != NULL,
               "%s: message does not name the item: %s", what, nostall_last_error());
}

/* A decoded image is where it says it is, and every byte can be read. */
static inline void fuzz_check_image(const nst_image *im, const char *what)
{
    FUZZ_CHECK(im->data && im->width > 0 && im->height > 0, "%s: empty image", what);
    FUZZ_CHECK(im->stride >= (size_t)im->width * 3, "%s: stride", what);
    FUZZ_CHECK(im->scale_num == 1 && (im->scale_den == 1 || im->scale_den == 2 ||
                                      im->scale_den == 4 || im->scale_den == 8),
               "%s: scale %u/%u", what, im->scale_num, im->scale_den);
    FUZZ_CHECK((uint64_t)im->x0 + im->width <= im->full_width &&
                   (uint64_t)im->y0 + im->height <= im->full_height,
               "%s: %ux%u at (%u,%u) outside %ux%u", what, im->width, im->height, im->x0, im->y0,
               im->full_width, im->full_height);
    FUZZ_CHECK((uint64_t)im->src_width * im->src_height <= FUZZ_MAX_PIXELS,
               "%s: over the pixel limit", what);
    unsigned sum = 0;
    for (uint32_t y = 0; y < im->height; y++)
        for (size_t i = 0; i < (size_t)im->width * 3; i++) sum += im->data[y * im->stride + i];
    volatile unsigned sink = sum;
    (void)sink;
}

/* Same geometry and the same bytes. */
static inline int fuzz_same_image(const nst_image *a, const nst_image *b)
{
    if (a->width != b->width || a->height != b->height || a->x0 != b->x0 || a->y0 != b->y0 ||
        a->scale_den != b->scale_den || a->full_width != b->full_width ||
        a->full_height != b->full_height || a->src_width != b->src_width ||
        a->src_height != b->src_height)
        return 0;
    for (uint32_t y = 0; y < a->height; y++)
        if (memcmp(a->data + y * a->stride, b->data + y * b->stride, (size_t)a->width * 3) != 0)
            return 0;
    return 1;
}

/* The pixels [*lo, *hi) of an axis of n scaled pixels that region decode
 * promises for the source interval [a, a + len) resampled to `out`
 * samples at scale 1/den: jpeg.c's axis_range() (the window mapped,
 * rounded outwards, widened by the resampling filter's support plus 2,
 * clamped, at least 16 pixels). Pixels of a region beyond these may
 * differ between paths (an edge the restart-marker fast path cut is an
 * image edge to fancy upsampling). */
static inline void fuzz_axis(double a, double len, unsigned den, uint32_t out, uint32_t n,
                             uint32_t *lo, uint32_t *hi)
{
    const double s = 1.0 / den;
    double support = out ? len * s / out : 1.0;
    if (support < 1.0) support = 1.0;
    const double margin = ceil(support) + 2.0;
    double l = floor(a * s) - margin, h = ceil((a + len) * s) + margin;
    if (l < 0.0) l = 0.0;
    if (l > (double)n - 1.0) l = (double)n - 1.0;
    if (h > (double)n) h = (double)n;
    if (h < l + 1.0) h = l + 1.0;
    if (h - l < 16.0) {
        h = l + 16.0 < (double)n ? l + 16.0 : (double)n;
        l = h - 16.0 > 0.0 ? h - 16.0 : 0.0;
    }
    *lo = (uint32_t)l;
    *hi = (uint32_t)h;
}

/* Two regions of the same image at the same scale, decoded for window roi
 * and output size out (the restart-marker fast path may return another
 * window than the normal path: rows and columns of whole restart
 * intervals), agree on every pixel region decode promises (fuzz_axis)
 * that both hold. */
static inline int fuzz_same_overlap(const nst_image *a, const nst_image *b, const nst_window *roi,
                                    uint32_t out)
{
    if (a->scale_den != b->scale_den || a->full_width != b->full_width ||
        a->full_height != b->full_height || a->src_width != b->src_width ||
        a->src_height != b->src_height)
        return 0;
    uint32_t px0, px1, py0, py1;
    fuzz_axis(roi->x, roi->w, a->scale_den, out, a->full_width, &px0, &px1);
    fuzz_axis(roi->y, roi->h, a->scale_den, out, a->full_height, &py0, &py1);
    uint32_t x0 = a->x0 > b->x0 ? a->x0 : b->x0, y0 = a->y0 > b->y0 ? a->y0 : b->y0;
    const uint32_t ax1 = a->x0 + a->width, bx1 = b->x0 + b->width;
    const uint32_t ay1 = a->y0 + a->height, by1 = b->y0 + b->height;
    uint32_t x1 = ax1 < bx1 ? ax1 : bx1, y1 = ay1 < by1 ? ay1 : by1;
    if (x0 < px0) x0 = px0;
    if (y0 < py0) y0 = py0;
    if (x1 > px1) x1 = px1;
    if (y1 > py1) y1 = py1;
    if (x0 >= x1 || y0 >= y1) return 0;
    for (uint32_t y = y0; y < y1; y++)
        if (memcmp(a->data + (size_t)(y - a->y0) * a->stride + (size_t)(x0 - a->x0) * 3,
                   b->data + (size_t)(y - b->y0) * b->stride + (size_t)(x0 - b->x0) * 3,
                   (size_t)(x1 - x0) * 3) != 0)
            return 0;
    return 1;
}

/* A region decode covers the window asked for (mapped to its scale and
 * clamped to the image): what the resampler reads. */
static inline void fuzz_check_covers(const nst_image *im, const nst_window *roi, const char *what)
{
    const double s = 1.0 / im->scale_den;
    double x0 = roi->x * s, y0 = roi->y * s, x1 = (roi->x + roi->w) * s, y1 = (roi->y + roi->h) * s;
    if (x0 < 0) x0 = 0;
    if (y0 < 0) y0 = 0;
    if (x1 > im->full_width) x1 = im->full_width;
    if (y1 > im->full_height) y1 = im->full_height;
    if (x0 >= x1 || y0 >= y1) return; /* the window is off the image */
    FUZZ_CHECK(im->x0 <= x0 && im->y0 <= y0 && im->x0 + im->width >= x1 && im->y0 + im->height >= y1,
               "%s: region %ux%u at (%u,%u) of %ux%u misses the window [%.1f,%.1f)x[%.1f,%.1f)",
               what, im->width, im->height, im->x0, im->y0, im->full_width, im->full_height, x0, x1,
               y0, y1);
}

/* FNV-1a of the input: picks the regions an input is decoded with, so the
 * same input always takes the same paths. */
static inline uint64_t fuzz_hash(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* A region of a w x h image (from the bits of h) and a square output size
 * for which jpeg.c's choose_den() picks DCT scale 1/den, where the region
 * is at least den pixels on its shorter side. */
static inline void fuzz_region(uint64_t h, uint32_t w, uint32_t ht, unsigned den, nst_window *roi,
                               uint32_t *out)
{
    const double fw = 0.05 + 0.95 * (double)(h & 0xFFFF) / 65535.0;
    const double fh = 0.05 + 0.95 * (double)(h >> 16 & 0xFFFF) / 65535.0;
    roi->w = fw * w;
    roi->h = fh * ht;
    roi->x = (double)(h >> 32 & 0xFFFF) / 65535.0 * (w - roi->w);
    roi->y = (double)(h >> 48 & 0xFFFF) / 65535.0 * (ht - roi->h);
    const double m = roi->w < roi->h ? roi->w : roi->h;
    double o = m / den;
    *out = o < 1.0 ? 1u : (uint32_t)o;
}

#endif
