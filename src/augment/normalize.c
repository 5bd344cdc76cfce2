/*
 * normalize.c — the last step of an augmentation: turning a row of
 * resampled RGB pixels into bytes of the batch slot, and the float
 * normalization table.
 *
 * uint8 NHWC rows are copied as interleaved RGB triplets into the
 * destination; float32 NCHW rows are de-interleaved into three planes
 * (plane c starts at dst + c * size * size floats) with
 * v -> fmaf(v, scale[c], bias[c]) = (v / 255 - mean[c]) / std[c]: through the
 * 3 x 256 table nst_norm_lut() fills with exactly those values, or, with
 * AVX2 + FMA, 16 pixels at a time (pshufb de-interleave, widen, convert,
 * one fused multiply-add: the same single rounding, so the same bytes). A
 * float output is therefore exactly the table applied to the uint8 output.
 * The AVX2 path writes with non-temporal stores (see out_row_fma()).
 *
 * Pure functions: called by the worker threads on their own rows, no state.
 */
#include <math.h>
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

/* AVX2 + FMA (target attribute; the caller checked the CPU), x86-64 GCC/Clang. */
#if NST_NORM_SSE2 && defined(__x86_64__) && defined(__GNUC__)
#define NST_NORM_FMA 1
#include <immintrin.h>
#else
#define NST_NORM_FMA 0
#endif

void nst_norm_lut(float lut[NST_NORM_LUT_SIZE], const double mean[3], const double stdv[3])
{
    for (int c = 0; c < 3; c++) {
        const float scale = (float)(1.0 / (255.0 * stdv[c])), bias = (float)(-mean[c] / stdv[c]);
        for (int v = 0; v < 256; v++) lut[c * 256 + v] = fmaf((float)v, scale, bias);
        lut[768 + c] = scale;
        lut[771 + c] = bias;
    }
}

#if NST_NORM_FMA
/* 16 pixels (48 bytes) of interleaved RGB per step into three planes: each
 * 16-byte third of the input is spread by pshufb into the bytes of one
 * channel it holds, the three ORed; then 8 at a time widened to int32,
 * converted and put through fmadd with the channel's scale and bias.
 * The slot is far larger than the caches and is read next by the consumer
 * thread, so 32-byte aligned rows (square outputs of a size divisible by 8)
 * go out with non-temporal stores, then an sfence so they are ordered
 * before the slot is published. Returns how many pixels it wrote (a
 * multiple of 16). */
__attribute__((target("avx2,fma"))) static size_t
out_row_fma(const uint8_t *restrict r, size_t n, const float *restrict l, float *restrict p0,
            float *restrict p1, float *restrict p2)
{
    /* mask[c][k]: for channel c, where input third k's bytes go (-1: none) */
    static const int8_t mask[3][3][16] = {
        {{0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1},
         {-1, -1, -1, -1, -1, -1, 2, 5, 8, 11, 14, -1, -1, -1, -1, -1},
         {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 1, 4, 7, 10, 13}},
        {{1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1},
         {-1, -1, -1, -1, -1, 0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1},
         {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 2, 5, 8, 11, 14}},
        {{2, 5, 8, 11, 14, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1},
         {-1, -1, -1, -1, -1, 1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1},
         {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 3, 6, 9, 12, 15}}};
    float *const planes[3] = {p0, p1, p2};
    const int aligned = (((uintptr_t)p0 | (uintptr_t)p1 | (uintptr_t)p2) & 31) == 0;
    __m128i sel[3][3];
    __m256 scale[3], bias[3];
    for (int c = 0; c < 3; c++) {
        for (int k = 0; k < 3; k++)
            sel[c][k] = _mm_loadu_si128((const __m128i *)(const void *)mask[c][k]);
        scale[c] = _mm256_set1_ps(l[768 + c]);
        bias[c] = _mm256_set1_ps(l[771 + c]);
    }
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m128i in0 = _mm_loadu_si128((const __m128i *)(const void *)(r + 3 * i));
        const __m128i in1 = _mm_loadu_si128((const __m128i *)(const void *)(r + 3 * i + 16));
        const __m128i in2 = _mm_loadu_si128((const __m128i *)(const void *)(r + 3 * i + 32));
        for (int c = 0; c < 3; c++) {
            const __m128i v = _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(in0, sel[c][0]),
                                                        _mm_shuffle_epi8(in1, sel[c][1])),
                                           _mm_shuffle_epi8(in2, sel[c][2]));
            const __m256 lo =
                _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)), scale[c], bias[c]);
            const __m256 hi = _mm256_fmadd_ps(
                _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(v, 8))), scale[c], bias[c]);
            if (aligned) {
                _mm256_stream_ps(planes[c] + i, lo);
                _mm256_stream_ps(planes[c] + i + 8, hi);
            } else {
                _mm256_storeu_ps(planes[c] + i, lo);
                _mm256_storeu_ps(planes[c] + i + 8, hi);
            }
        }
    }
    if (aligned) _mm_sfence();
    return i;
}
#endif

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

void nst_out_row(const nst_output *out, uint32_t y, const uint8_t *row, int simd)
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
#if NST_NORM_FMA
        if (simd) i = out_row_fma(r, n, l, p0, p1, p2);
#else
        (void)simd;
#endif
#if NST_NORM_SSE2
        /* 4 pixels at a time: 12 bytes read as two 8-byte words, 12 table
         * loads, one 16-byte store per plane (instead of 12 scalar ones). */
#define NST_B(q, sh) ((size_t)(((q) >> (sh)) & 0xff))
        for (; i + 4 <= n; i += 4) {
            uint64_t q0, q1;
            memcpy(&q0, r + 3 * i, 8);     /* bytes 0..7  */
            memcpy(&q1, r + 3 * i + 4, 8); /* bytes 4..11 */
            _mm_storeu_ps(p0 + i, _mm_setr_ps(l[NST_B(q0, 0)], l[NST_B(q0, 24)],
                                              l[NST_B(q1, 16)], l[NST_B(q1, 40)]));
            _mm_storeu_ps(p1 + i, _mm_setr_ps(l[256 + NST_B(q0, 8)], l[256 + NST_B(q0, 32)],
                                              l[256 + NST_B(q1, 24)], l[256 + NST_B(q1, 48)]));
            _mm_storeu_ps(p2 + i, _mm_setr_ps(l[512 + NST_B(q0, 16)], l[512 + NST_B(q0, 40)],
                                              l[512 + NST_B(q1, 32)], l[512 + NST_B(q1, 56)]));
        }
#undef NST_B
#endif
        for (; i < n; i++) {
            p0[i] = l[r[3 * i]];
            p1[i] = l[256 + r[3 * i + 1]];
            p2[i] = l[512 + r[3 * i + 2]];
        }
    }
}
