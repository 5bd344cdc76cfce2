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

#define FUZZ_CHECK(cond, ...)                                                  \
    do {                                                                       \
        if (!(cond)) fuzz_fail(__FILE__, __LINE__, __VA_ARGS__);               \
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
    FUZZ_CHECK(rc == NOSTALL_E_CORRUPT || rc == NOSTALL_E_TRUNCATED ||
                   rc == NOSTALL_E_NOT_IMAGE || rc == NOSTALL_E_TOO_MANY_PIXELS ||
                   rc == NOSTALL_E_UNSUPPORTED || rc == NOSTALL_E_EMPTY,
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
               "%s: %ux%u at (%u,%u) outside %ux%u", what, im->width, im->height, im->x0,
               im->y0, im->full_width, im->full_height);
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
static inline void fuzz_region(uint64_t h, uint32_t w, uint32_t ht, unsigned den,
                               nst_window *roi, uint32_t *out)
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
