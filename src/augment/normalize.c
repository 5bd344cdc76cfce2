/*
 * normalize.c — the last step of an augmentation: turning a row of
 * resampled RGB pixels into bytes of the batch slot, and the float
 * normalization table.
 *
 * uint8 NHWC rows are copied as interleaved RGB triplets into the
 * destination; float32 NCHW rows are de-interleaved into three planes
 * (plane c starts at dst + c * size * size floats) through the 3 x 256 table
 * lut[c * 256 + v] = (v / 255 - mean[c]) / std[c], so a float output is
 * exactly the table applied to the uint8 output. Float rows go out with
 * non-temporal stores when aligned (see nst_out_row()).
 *
 * Pure functions: called by the worker threads on their own rows, no state.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "augment/augment_impl.h"
#include "common/error.h"

#if defined(__SSE2__) && !defined(NST_RESIZE_SCALAR)
#define NST_NORM_SSE2 1
#include <emmintrin.h>
#else
#define NST_NORM_SSE2 0
#endif

void nst_norm_lut(float lut[3 * 256], const double mean[3], const double stdv[3])
{
    for (int c = 0; c < 3; c++)
        for (int v = 0; v < 256; v++)
            lut[c * 256 + v] = (float)(((double)v / 255.0 - mean[c]) / stdv[c]);
}

int nst_out_check(const nst_output *out)
{
    if (!out) return nst_error(NOSTALL_E_INVALID, "augment: no output");
    if (out->size == 0)
        return nst_error(NOSTALL_E_INVALID, "augment: output size is 0");
    if (!out->dst)
        return nst_error(NOSTALL_E_INVALID, "augment: output has no destination");
    if (out->kind == NST_OUT_FLOAT_NCHW) {
        if (!out->lut)
            return nst_error(NOSTALL_E_INVALID,
                             "augment: float output without a lookup table");
    } else if (out->kind != NST_OUT_UINT8_NHWC) {
        return nst_error(NOSTALL_E_INVALID, "augment: unknown output kind %d",
                         out->kind);
    }
    return 0;
}

void nst_out_row(const nst_output *out, uint32_t y, const uint8_t *row)
{
    size_t n = out->size;
    if (out->kind == NST_OUT_UINT8_NHWC) {
        memcpy((uint8_t *)out->dst + (size_t)y * n * 3, row, n * 3);
    } else {
        float *restrict p0 = (float *)out->dst + (size_t)y * n;
        float *restrict p1 = p0 + n * n;
        float *restrict p2 = p1 + n * n;
        const float *restrict l = out->lut;
        const uint8_t *restrict r = row;
        size_t i = 0;
#if NST_NORM_SSE2
        /* 4 pixels at a time: 12 bytes read as two 8-byte words, 12 table
         * loads, one 16-byte store per plane (instead of 12 scalar ones). */
#define NST_B(q, sh) ((size_t)(((q) >> (sh)) & 0xff))
#define NST_NORM_LOOP(STORE)                                                   \
        for (; i + 4 <= n; i += 4) {                                           \
            uint64_t q0, q1;                                                   \
            memcpy(&q0, r + 3 * i, 8);     /* bytes 0..7  */                   \
            memcpy(&q1, r + 3 * i + 4, 8); /* bytes 4..11 */                   \
            STORE(p0 + i, _mm_setr_ps(l[NST_B(q0, 0)], l[NST_B(q0, 24)],       \
                                      l[NST_B(q1, 16)], l[NST_B(q1, 40)]));    \
            STORE(p1 + i, _mm_setr_ps(l[256 + NST_B(q0, 8)], l[256 + NST_B(q0, 32)], \
                                      l[256 + NST_B(q1, 24)], l[256 + NST_B(q1, 48)])); \
            STORE(p2 + i, _mm_setr_ps(l[512 + NST_B(q0, 16)], l[512 + NST_B(q0, 40)], \
                                      l[512 + NST_B(q1, 32)], l[512 + NST_B(q1, 56)])); \
        }
        /* The slot is far larger than the caches and is read next by the
         * consumer thread, not by this one: non-temporal stores skip reading
         * every destination line into the cache first and leave the cache
         * to the decoder (measured: 2 workers, float, about 3% more
         * images/s). They need 16-byte aligned rows, which the ring gives
         * square outputs of a size divisible by 4; the sfence orders them
         * before the slot is published (x86 orders ordinary stores, not
         * these). */
        if ((((uintptr_t)p0 | (uintptr_t)p1 | (uintptr_t)p2) & 15) == 0) {
            NST_NORM_LOOP(_mm_stream_ps)
            _mm_sfence();
        } else {
            NST_NORM_LOOP(_mm_storeu_ps)
        }
#undef NST_NORM_LOOP
#undef NST_B
#endif
        for (; i < n; i++) {
            p0[i] = l[r[3 * i]];
            p1[i] = l[256 + r[3 * i + 1]];
            p2[i] = l[512 + r[3 * i + 2]];
        }
    }
}
