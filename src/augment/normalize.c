/*
 * normalize.c — the last step of an augmentation: turning a row of
 * resampled RGB pixels into bytes of the batch slot in the output's layout
 * and dtype (augment.h, THE OUTPUT CONTRACT), and the normalization tables.
 *
 * Every float value written is an entry of the nst_norm tables: float32
 * v -> fmaf(v, scale[c], bias[c]) = (v / 255 - mean[c]) / std[c], float16
 * and bfloat16 that value rounded to nearest even (nst_f32_to_f16/_bf16,
 * the scalar reference). The writers, by (dtype, layout):
 *   uint8 NHWC     the row copied as is;
 *   uint8 NCHW     de-interleaved into three planes (pshufb with AVX2);
 *   float32 NCHW   de-interleaved through the table (4 pixels per step with
 *                  SSE2), or with AVX2 + FMA 16 pixels at a time (pshufb
 *                  de-interleave, widen, convert, one fused multiply-add: the
 *                  same single rounding, so the same bytes), non-temporal
 *                  stores for 32-byte aligned rows (see out_row_fma());
 *   float32 NHWC   through the table, or with AVX2 + FMA 8 elements at a
 *                  time against scale/bias vectors repeating every 3 lanes;
 *   float16, bfloat16 (either layout)  through the 16-bit tables, or with
 *                  AVX2 + FMA the float32 values above converted in
 *                  registers: float16 with F16C's vcvtps2ph (round to
 *                  nearest even; used only when CPUID says F16C), bfloat16
 *                  with integer rounding (add 0x7fff + the kept lsb, keep the
 *                  upper half) -- both the scalar conversion's bits, since
 *                  the table values are finite (never NaN).
 * The SIMD paths are chosen by the augmenter once (resize.c) and passed in
 * as NST_SIMD_* bits; NOSTALL_NO_AVX2=1 turns them all off.
 *
 * Pure functions: called by the worker threads on their own rows, no state.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "augment/augment_impl.h"
#include "common/buf.h"
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
#define NST_TARGET_FMA __attribute__((target("avx2,fma")))
#define NST_TARGET_F16C __attribute__((target("avx2,fma,f16c")))
#else
#define NST_NORM_FMA 0
#endif

#if defined(__GNUC__)
#define NST_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define NST_ALWAYS_INLINE inline
#endif

/* ------------------------------------------------------------ tables */

/* The conversions and the normalization are common/pixel_math.h's, which
 * the GPU kernels use too. */
uint16_t nst_f32_to_f16(float f) { return nst_pm_f32_to_f16(f); }

uint16_t nst_f32_to_bf16(float f) { return nst_pm_f32_to_bf16(f); }

void nst_norm_init(nst_norm *n, const double mean[3], const double stdv[3])
{
    for (int c = 0; c < 3; c++) {
        const float scale = nst_pm_norm_scale(stdv[c]), bias = nst_pm_norm_bias(mean[c], stdv[c]);
        for (int v = 0; v < 256; v++) {
            const float f = nst_pm_normalize((uint8_t)v, scale, bias);
            n->f32[c * 256 + v] = f;
            n->f16[c * 256 + v] = nst_f32_to_f16(f);
            n->bf16[c * 256 + v] = nst_f32_to_bf16(f);
        }
        n->scale[c] = scale;
        n->bias[c] = bias;
    }
}

/* ------------------------------------------------------------ checks */

static size_t dtype_bytes(int dtype)
{
    switch (dtype) {
    case NST_OUT_U8: return 1;
    case NST_OUT_F32: return 4;
    case NST_OUT_F16:
    case NST_OUT_BF16: return 2;
    }
    return 0;
}

int nst_out_resolve(const nst_output *in, nst_output *o)
{
    if (!in) return nst_error(NOSTALL_E_INVALID, "augment: no output");
    *o = *in;
    if (o->width == 0 && o->height == 0) o->width = o->height = o->size;
    if (o->width == 0 || o->height == 0)
        return nst_error(NOSTALL_E_INVALID, "augment: output size is 0 (%ux%u)", o->width,
                         o->height);
    if (o->width > NST_AUG_MAX_SIDE || o->height > NST_AUG_MAX_SIDE)
        return nst_error(NOSTALL_E_INVALID, "augment: output %ux%u too large", o->width, o->height);
    if (!o->dst) return nst_error(NOSTALL_E_INVALID, "augment: output has no destination");
    if (!dtype_bytes(o->dtype))
        return nst_error(NOSTALL_E_INVALID, "augment: unknown output dtype %d", o->dtype);
    if (o->dtype != NST_OUT_U8 && !o->norm)
        return nst_error(NOSTALL_E_INVALID, "augment: float output without a normalization table");
    if (o->layout == NST_OUT_AUTO) o->layout = o->dtype == NST_OUT_U8 ? NST_OUT_NHWC : NST_OUT_NCHW;
    if (o->layout != NST_OUT_NCHW && o->layout != NST_OUT_NHWC)
        return nst_error(NOSTALL_E_INVALID, "augment: unknown output layout %d", o->layout);
    if (o->inner_width == 0 && o->inner_height == 0) {
        if (o->pad_left || o->pad_top)
            return nst_error(NOSTALL_E_INVALID, "augment: padding (%u, %u) without an inner size",
                             o->pad_left, o->pad_top);
        o->inner_width = o->width;
        o->inner_height = o->height;
    }
    if (o->inner_width == 0 || o->inner_height == 0 || o->pad_left > o->width ||
        o->inner_width > o->width - o->pad_left || o->pad_top > o->height ||
        o->inner_height > o->height - o->pad_top)
        return nst_error(NOSTALL_E_INVALID,
                         "augment: inner %ux%u at (%u, %u) does not fit the %ux%u output",
                         o->inner_width, o->inner_height, o->pad_left, o->pad_top, o->width,
                         o->height);
    return 0;
}

size_t nst_output_bytes(const nst_output *out)
{
    size_t n;
    if (!out) return 0;
    uint32_t w = out->width, h = out->height;
    if (w == 0 && h == 0) w = h = out->size;
    if (nst_mul_overflow((size_t)w * 3, h, &n) || nst_mul_overflow(n, dtype_bytes(out->dtype), &n))
        return 0;
    return n;
}

/* ------------------------------------------------------------ SIMD rows */

#if NST_NORM_FMA
/* mask[c][k]: for channel c, where input third k's bytes go (-1: none):
 * 16 interleaved RGB pixels (48 bytes, three 16-byte thirds) spread by
 * pshufb into the bytes of each channel, the three ORed. */
static const int8_t deint_mask[3][3][16] =
    {{{0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1},
      {-1, -1, -1, -1, -1, -1, 2, 5, 8, 11, 14, -1, -1, -1, -1, -1},
      {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 1, 4, 7, 10, 13}},
     {{1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1},
      {-1, -1, -1, -1, -1, 0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1},
      {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 2, 5, 8, 11, 14}},
     {{2, 5, 8, 11, 14, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1},
      {-1, -1, -1, -1, -1, 1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1},
      {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 3, 6, 9, 12, 15}}};

/* float32 NCHW, 16 pixels (48 bytes) of interleaved RGB per step into
 * three planes: de-interleave, then 8 at a time widened to int32,
 * converted and put through fmadd with the channel's scale and bias.
 * The slot is far larger than the caches and is read next by the consumer
 * thread, so 32-byte aligned rows (e.g. square outputs of a size divisible
 * by 8) go out with non-temporal stores, then an sfence so they are ordered
 * before the slot is published. Returns how many pixels it wrote (a
 * multiple of 16). */
NST_TARGET_FMA static size_t out_row_fma(const uint8_t *restrict r, size_t n,
                                         const nst_norm *restrict l, float *restrict p0,
                                         float *restrict p1, float *restrict p2)
{
    float *const planes[3] = {p0, p1, p2};
    const int aligned = (((uintptr_t)p0 | (uintptr_t)p1 | (uintptr_t)p2) & 31) == 0;
    __m128i sel[3][3];
    __m256 scale[3], bias[3];
    for (int c = 0; c < 3; c++) {
        for (int k = 0; k < 3; k++)
            sel[c][k] = _mm_loadu_si128((const __m128i *)(const void *)deint_mask[c][k]);
        scale[c] = _mm256_set1_ps(l->scale[c]);
        bias[c] = _mm256_set1_ps(l->bias[c]);
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
            const __m256 hi =
                _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(v, 8))),
                                scale[c], bias[c]);
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

/* uint8 NCHW: the de-interleave alone. Returns pixels written. */
NST_TARGET_FMA static size_t out_planes_u8_avx2(const uint8_t *restrict r, size_t n,
                                                uint8_t *const p[3])
{
    __m128i sel[3][3];
    for (int c = 0; c < 3; c++)
        for (int k = 0; k < 3; k++)
            sel[c][k] = _mm_loadu_si128((const __m128i *)(const void *)deint_mask[c][k]);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m128i in0 = _mm_loadu_si128((const __m128i *)(const void *)(r + 3 * i));
        const __m128i in1 = _mm_loadu_si128((const __m128i *)(const void *)(r + 3 * i + 16));
        const __m128i in2 = _mm_loadu_si128((const __m128i *)(const void *)(r + 3 * i + 32));
        for (int c = 0; c < 3; c++)
            _mm_storeu_si128((__m128i *)(void *)(p[c] + i),
                             _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(in0, sel[c][0]),
                                                       _mm_shuffle_epi8(in1, sel[c][1])),
                                          _mm_shuffle_epi8(in2, sel[c][2])));
    }
    return i;
}

/* 8 float32 values as 8 bfloat16 (round to nearest even; finite inputs). */
static NST_ALWAYS_INLINE NST_TARGET_FMA __m128i bf16x8(__m256 v)
{
    __m256i b = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
    b = _mm256_srli_epi32(_mm256_add_epi32(b, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    return _mm_packus_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
}

/* Store 8 values of `v` at dst (element offset i) in the dtype. */
static NST_ALWAYS_INLINE NST_TARGET_F16C void store8(void *dst, size_t i, __m256 v, int dtype)
{
    if (dtype == NST_OUT_F32)
        _mm256_storeu_ps((float *)dst + i, v);
    else if (dtype == NST_OUT_F16)
        _mm_storeu_si128((__m128i *)(void *)((uint16_t *)dst + i),
                         _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    else
        _mm_storeu_si128((__m128i *)(void *)((uint16_t *)dst + i), bf16x8(v));
}

/* 16-bit NCHW: as out_row_fma, each 8 values converted before the store. */
static NST_ALWAYS_INLINE NST_TARGET_F16C size_t out_planes16_k(const uint8_t *restrict r, size_t n,
                                                               const nst_norm *l, void *const p[3],
                                                               int dtype)
{
    __m128i sel[3][3];
    __m256 scale[3], bias[3];
    for (int c = 0; c < 3; c++) {
        for (int k = 0; k < 3; k++)
            sel[c][k] = _mm_loadu_si128((const __m128i *)(const void *)deint_mask[c][k]);
        scale[c] = _mm256_set1_ps(l->scale[c]);
        bias[c] = _mm256_set1_ps(l->bias[c]);
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
            store8(p[c], i,
                   _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)), scale[c], bias[c]),
                   dtype);
            store8(p[c], i + 8,
                   _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(v, 8))),
                                   scale[c], bias[c]),
                   dtype);
        }
    }
    return i;
}

/* NHWC float dtypes: m interleaved elements, 24 (8 pixels) per step, the
 * scale and bias of element j being those of channel j % 3. Returns
 * elements written (a multiple of 24). */
static NST_ALWAYS_INLINE NST_TARGET_F16C size_t out_inter_k(const uint8_t *restrict r, size_t m,
                                                            const nst_norm *l, void *dst, int dtype)
{
    float sc[24], bi[24];
    for (int j = 0; j < 24; j++) {
        sc[j] = l->scale[j % 3];
        bi[j] = l->bias[j % 3];
    }
    __m256 scale[3], bias[3];
    for (int k = 0; k < 3; k++) {
        scale[k] = _mm256_loadu_ps(sc + 8 * k);
        bias[k] = _mm256_loadu_ps(bi + 8 * k);
    }
    size_t i = 0;
    for (; i + 24 <= m; i += 24)
        for (int k = 0; k < 3; k++) {
            const __m128i v = _mm_loadl_epi64((const __m128i *)(const void *)(r + i + 8 * k));
            store8(dst, i + 8 * (size_t)k,
                   _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)), scale[k], bias[k]),
                   dtype);
        }
    return i;
}

/* The dtype as a compile-time constant in each copy of the kernels. The
 * float16 ones are called only when the CPU has F16C. */
NST_TARGET_F16C static size_t out_planes_f16(const uint8_t *r, size_t n, const nst_norm *l,
                                             void *const p[3])
{
    return out_planes16_k(r, n, l, p, NST_OUT_F16);
}
NST_TARGET_F16C static size_t out_planes_bf16(const uint8_t *r, size_t n, const nst_norm *l,
                                              void *const p[3])
{
    return out_planes16_k(r, n, l, p, NST_OUT_BF16);
}
NST_TARGET_F16C static size_t out_inter_f32(const uint8_t *r, size_t m, const nst_norm *l, void *dst)
{
    return out_inter_k(r, m, l, dst, NST_OUT_F32);
}
NST_TARGET_F16C static size_t out_inter_f16(const uint8_t *r, size_t m, const nst_norm *l, void *dst)
{
    return out_inter_k(r, m, l, dst, NST_OUT_F16);
}
NST_TARGET_F16C static size_t out_inter_bf16(const uint8_t *r, size_t m, const nst_norm *l,
                                             void *dst)
{
    return out_inter_k(r, m, l, dst, NST_OUT_BF16);
}
#endif

/* ------------------------------------------------------------ rows */

/* float32 NCHW: the classic float path, unchanged. */
static void row_f32_nchw(const nst_output *o, uint32_t y, const uint8_t *row, unsigned simd)
{
    const size_t n = o->width, plane = (size_t)o->width * o->height;
    float *restrict p0 = (float *)o->dst + (size_t)y * n;
    float *restrict p1 = p0 + plane;
    float *restrict p2 = p1 + plane;
    const float *restrict l = o->norm->f32;
    const uint8_t *restrict r = row;
    size_t i = 0;
#if NST_NORM_FMA
    if (simd & NST_SIMD_FMA) i = out_row_fma(r, n, o->norm, p0, p1, p2);
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
        _mm_storeu_ps(p0 + i, _mm_setr_ps(l[NST_B(q0, 0)], l[NST_B(q0, 24)], l[NST_B(q1, 16)],
                                          l[NST_B(q1, 40)]));
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

static void row_u8_nchw(const nst_output *o, uint32_t y, const uint8_t *row, unsigned simd)
{
    const size_t n = o->width, plane = (size_t)o->width * o->height;
    uint8_t *const p[3] = {(uint8_t *)o->dst + (size_t)y * n,
                           (uint8_t *)o->dst + (size_t)y * n + plane,
                           (uint8_t *)o->dst + (size_t)y * n + 2 * plane};
    size_t i = 0;
#if NST_NORM_FMA
    if (simd & NST_SIMD_FMA) i = out_planes_u8_avx2(row, n, p);
#else
    (void)simd;
#endif
    for (; i < n; i++) {
        p[0][i] = row[3 * i];
        p[1][i] = row[3 * i + 1];
        p[2][i] = row[3 * i + 2];
    }
}

static void row_f32_nhwc(const nst_output *o, uint32_t y, const uint8_t *row, unsigned simd)
{
    const size_t m = (size_t)o->width * 3;
    float *restrict d = (float *)o->dst + (size_t)y * m;
    const float *restrict l = o->norm->f32;
    size_t i = 0;
#if NST_NORM_FMA
    if (simd & NST_SIMD_FMA) i = out_inter_f32(row, m, o->norm, d);
#else
    (void)simd;
#endif
    for (; i < m; i += 3) { /* i stays a multiple of 3 */
        d[i] = l[row[i]];
        d[i + 1] = l[256 + row[i + 1]];
        d[i + 2] = l[512 + row[i + 2]];
    }
}

/* float16 / bfloat16, either layout. */
static void row_16(const nst_output *o, uint32_t y, const uint8_t *row, unsigned simd)
{
    const int f16 = o->dtype == NST_OUT_F16;
    const uint16_t *restrict l = f16 ? o->norm->f16 : o->norm->bf16;
    const size_t n = o->width;
    size_t i = 0;
    if (o->layout == NST_OUT_NHWC) {
        const size_t m = n * 3;
        uint16_t *restrict d = (uint16_t *)o->dst + (size_t)y * m;
#if NST_NORM_FMA
        if (f16 ? (simd & NST_SIMD_F16C) : (simd & NST_SIMD_FMA))
            i = f16 ? out_inter_f16(row, m, o->norm, d) : out_inter_bf16(row, m, o->norm, d);
#else
        (void)simd;
#endif
        for (; i < m; i += 3) {
            d[i] = l[row[i]];
            d[i + 1] = l[256 + row[i + 1]];
            d[i + 2] = l[512 + row[i + 2]];
        }
        return;
    }
    const size_t plane = n * o->height;
    uint16_t *const p[3] = {(uint16_t *)o->dst + (size_t)y * n,
                            (uint16_t *)o->dst + (size_t)y * n + plane,
                            (uint16_t *)o->dst + (size_t)y * n + 2 * plane};
#if NST_NORM_FMA
    void *const pv[3] = {p[0], p[1], p[2]};
    if (f16 ? (simd & NST_SIMD_F16C) : (simd & NST_SIMD_FMA))
        i = f16 ? out_planes_f16(row, n, o->norm, pv) : out_planes_bf16(row, n, o->norm, pv);
#endif
    for (; i < n; i++) {
        p[0][i] = l[row[3 * i]];
        p[1][i] = l[256 + row[3 * i + 1]];
        p[2][i] = l[512 + row[3 * i + 2]];
    }
}

void nst_out_row(const nst_output *o, uint32_t y, const uint8_t *row, unsigned simd)
{
    if (o->dtype == NST_OUT_U8) {
        if (o->layout == NST_OUT_NHWC)
            memcpy((uint8_t *)o->dst + (size_t)y * o->width * 3, row, (size_t)o->width * 3);
        else
            row_u8_nchw(o, y, row, simd);
    } else if (o->dtype == NST_OUT_F32) {
        if (o->layout == NST_OUT_NCHW)
            row_f32_nchw(o, y, row, simd);
        else
            row_f32_nhwc(o, y, row, simd);
    } else {
        row_16(o, y, row, simd);
    }
}
