/*
 * resize.c — the fused augmentation: resample a window of a decoded RGB8
 * image to an inner_width x inner_height rectangle of the output item,
 * mirror it, and hand each finished row to the output writer (normalize.c);
 * or copy an image as it is (nst_augment_copy).
 *
 * Design: a separable resampler in the manner of PIL's BILINEAR with a box.
 * For each axis, output pixel i has its centre at in0 + (i + 0.5) * scale in
 * the input (scale = window length / size); the triangle filter's support is
 * max(1, scale) input pixels, so downscaling is antialiased. Taps that fall
 * outside the image data are clamped to its edge (their weights are folded
 * onto the edge pixel). Weights are normalized in double precision, then
 * converted to NST_AUG_BITS-bit (int16) fixed point: non-negative, summing
 * to exactly one, so both passes are integer, no accumulator overflows and
 * a constant image stays exactly constant (augment_impl.h). Every output of
 * an axis gets the same number of taps k (zero-padded), so the inner loops
 * have a fixed, usually compile-time, trip count.
 *
 * Pass order is chosen per call by a rough cost model: vertical first (each
 * output row: the vertical taps over the columns the horizontal taps touch,
 * into one int16 row, then the horizontal pass) when that shrinks the work,
 * e.g. when downscaling vertically; otherwise horizontal first over the
 * input rows the vertical taps touch, kept in a ring of k rows. The first
 * pass keeps NST_AUG_IBITS fractional bits in its int16 intermediate, the
 * second rounds to uint8 (so float output is exactly the table applied to
 * the uint8 output); the flip is folded into the horizontal taps by giving
 * output column i those of column size-1-i. Finished rows go to the output
 * writer (normalize.c); with a letterbox border they are first copied into
 * a full item row whose border pixels stay 0, and the border rows above
 * and below are that row before any pixel is placed in it.
 *
 * SIMD: with SSE2 (baseline on x86-64) both passes use pmaddwd on pairs of
 * taps: the horizontal pass interleaves two input pixels as
 * {R0,R1,G0,G1,B0,B1,x,x}, the vertical pass two rows. -DNST_RESIZE_SCALAR
 * (or a target without SSE2) selects portable C with bit-identical results.
 * With GCC/Clang on x86-64, AVX2 versions of the four kernels are chosen at
 * run time (once, in nst_augmenter_create; NOSTALL_NO_AVX2=1 in the
 * environment forces SSE2): the horizontal pass computes two output pixels
 * per 256-bit register, one per 128-bit lane (coefficients laid out per pair
 * of outputs), the vertical pass 32 elements per iteration. Same integer
 * arithmetic, so the same bytes as the SSE2 and portable paths.
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
#include "common/testhooks.h"

/* SSE2 is part of x86-64; -DNST_RESIZE_SCALAR builds the portable path. */
#if defined(__SSE2__) && !defined(NST_RESIZE_SCALAR)
#define NST_RESIZE_SSE2 1
#include <emmintrin.h>
#else
#define NST_RESIZE_SSE2 0
#endif

/* AVX2 kernels (target attribute, chosen at run time), x86-64 GCC/Clang. */
#if NST_RESIZE_SSE2 && defined(__x86_64__) && defined(__GNUC__)
#define NST_RESIZE_AVX2 1
#include <immintrin.h>
#define NST_TARGET_AVX2 __attribute__((target("avx2")))
#else
#define NST_RESIZE_AVX2 0
#endif

/* Windows are rejected when they map beyond this many pixels (keeps every
 * tap index and filter size comfortably inside int32). */
#define NST_AUG_MAX_COORD 67108864.0 /* 2^26 */

typedef struct nst_axis {
    nst_buf start;  /* int32 per output: first input index, relative to lo */
    nst_buf coefs;  /* int16 [size][k]: fixed-point weights               */
    nst_buf bounds; /* int32 pairs per output while building: first, count */
    uint32_t k;     /* taps of every output                                */
    int32_t lo, hi; /* input indices [lo, hi) are touched                  */
    int mono;       /* starts are non-decreasing in the output index       */
} nst_axis;

struct nst_augmenter {
    nst_axis ax, ay;
    nst_buf work;    /* double weights while building an axis              */
    nst_buf hco;     /* SIMD layout of the horizontal coefficients         */
    nst_buf tmp;     /* int16 intermediate row(s)                          */
    nst_buf rows;    /* pointers to the k (+1) rows of a vertical output   */
    nst_buf vco;     /* SIMD layout of one output row's vertical weights   */
    nst_buf orow;    /* one finished uint8 RGB output row                  */
    nst_buf lastrow; /* padded copy of an input row (horizontal first)     */
    nst_buf prow;    /* a full item row with a letterbox border            */
    int avx2;        /* use the AVX2 kernels                               */
    unsigned simd;   /* NST_SIMD_* for the output writers (normalize.c)    */
};

/* F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports has
 * no name for it. The caller has checked AVX2 (so the OS saves YMM state). */
#if NST_RESIZE_AVX2
#include <cpuid.h>
static int cpu_f16c(void)
{
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return 0;
    return (ecx >> 29) & 1u;
}
#endif

int nst_augmenter_create(nst_augmenter **out)
{
    nst_augmenter *a = calloc(1, sizeof *a);
    if (!a) return nst_error(NOSTALL_E_NOMEM, "augment: cannot allocate augmenter");
#if NST_RESIZE_AVX2
    const char *no = nst_test_env("NOSTALL_NO_AVX2");
    a->avx2 = __builtin_cpu_supports("avx2") && !(no && *no && strcmp(no, "0") != 0);
    if (a->avx2 && __builtin_cpu_supports("fma")) {
        a->simd = NST_SIMD_FMA;
        if (cpu_f16c()) a->simd |= NST_SIMD_F16C;
    }
#endif
    *out = a;
    return 0;
}

static void axis_free(nst_axis *ax)
{
    nst_buf_free(&ax->start);
    nst_buf_free(&ax->coefs);
    nst_buf_free(&ax->bounds);
}

void nst_augmenter_free(nst_augmenter *a)
{
    if (!a) return;
    axis_free(&a->ax);
    axis_free(&a->ay);
    nst_buf_free(&a->work);
    nst_buf_free(&a->hco);
    nst_buf_free(&a->tmp);
    nst_buf_free(&a->rows);
    nst_buf_free(&a->vco);
    nst_buf_free(&a->orow);
    nst_buf_free(&a->lastrow);
    nst_buf_free(&a->prow);
    free(a);
}

/* Taps of `size` outputs resampling [in0, in0 + len) of an axis of n pixels:
 * each output's from nst_pm_taps() (common/pixel_math.h, the GPU kernels'
 * filter too), then placed for the fixed-count passes. */
static int build_axis(nst_axis *ax, nst_buf *work, double in0, double len, uint32_t n,
                      uint32_t size, int flip, int rel)
{
    const nst_pm_axis pa = nst_pm_axis_init(in0, len, n, size, flip);
    /* Candidate taps span at most kd = 2 * ceil(support) + 1 pixels; clamped
     * into the image they also number at most n. */
    const uint32_t kc = nst_pm_axis_cap(&pa);
    size_t nb, nk, nc;
    if (nst_mul_overflow(size, 2 * sizeof(int32_t), &nb) || nst_mul_overflow(size, kc, &nk) ||
        nst_mul_overflow(nk, sizeof(int16_t), &nc))
        return nst_error(NOSTALL_E_NOMEM, "augment: filter too large");
    int rc;
    if ((rc = nst_buf_reserve(&ax->bounds, nb)) < 0) return rc;
    if ((rc = nst_buf_reserve(&ax->coefs, nc)) < 0) return rc;
    if ((rc = nst_buf_reserve(&ax->start, (size_t)size * sizeof(int32_t))) < 0) return rc;
    if ((rc = nst_buf_reserve(work, nc)) < 0) return rc;

    int32_t *bounds = (int32_t *)(void *)ax->bounds.data;
    int16_t *coefs = (int16_t *)(void *)ax->coefs.data;
    int32_t *starts = (int32_t *)(void *)ax->start.data;

    /* Phase 1: each output's fixed-point weights (kc apart in `work`) and
     * bounds = first, count. */
    int64_t k = 1;
    for (uint32_t i = 0; i < size; i++) {
        int32_t cnt;
        bounds[2 * i] = nst_pm_taps(&pa, i, (int16_t *)(void *)work->data + (size_t)i * kc, &cnt);
        bounds[2 * i + 1] = cnt;
        if (cnt > k) k = cnt;
    }

    /* Phase 2: every output gets exactly k taps starting inside [0, n - k]
     * (k <= kc <= n), the unused ones zero, so the passes run a fixed-count
     * inner loop. */
    ax->k = (uint32_t)k;
    int32_t lo = INT32_MAX, hi = 0;
    int mono = 1;
    for (uint32_t i = 0; i < size; i++) {
        const int16_t *w = (const int16_t *)(const void *)work->data + (size_t)i * kc;
        const int64_t first = bounds[2 * i], cnt = bounds[2 * i + 1];
        const int64_t start = first < (int64_t)n - k ? first : (int64_t)n - k;
        int16_t *c = coefs + (size_t)i * (size_t)k;
        memset(c, 0, sizeof(int16_t) * (size_t)k);
        memcpy(c + (first - start), w, sizeof(int16_t) * (size_t)cnt);
        starts[i] = (int32_t)start;
        if (i > 0 && starts[i] < starts[i - 1]) mono = 0;
        if (starts[i] < lo) lo = starts[i];
        if (starts[i] + (int32_t)k > hi) hi = starts[i] + (int32_t)k;
    }
    ax->lo = lo;
    ax->hi = hi;
    ax->mono = mono;
    if (rel)
        for (uint32_t i = 0; i < size; i++) starts[i] -= lo;
    return 0;
}

#if defined(__GNUC__)
#define NST_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define NST_ALWAYS_INLINE inline
#endif

#if defined(__clang__)
#define NST_UNROLL _Pragma("unroll 8")
#elif defined(__GNUC__)
#define NST_UNROLL _Pragma("GCC unroll 8")
#else
#define NST_UNROLL
#endif

#if NST_RESIZE_SSE2
static inline uint32_t load_u32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}
#endif

/* ---------------------------------------------------------------------
 * Horizontal pass: one row of input pixels -> `size` output pixels.
 * xs[i] is output i's first input pixel, k its tap count.
 * --------------------------------------------------------------------- */

#if NST_RESIZE_SSE2
/* SIMD coefficient layout: per output, k2 = ceil(k / 2) vectors
 * {c0, c1, c0, c1, c0, c1, 0, 0} of taps (2j, 2j+1) (the last c1 is 0 when
 * k is odd). A pair of input pixels is interleaved to
 * {R0, R1, G0, G1, B0, B1, x, x} so one pmaddwd gives the R, G, B partial
 * sums. Reads reach 4 elements past the last tap (weight 0; see callers;
 * the AVX2 kernels, 5). With lanes = 2 (AVX2) the vectors of outputs 2q and
 * 2q+1 alternate: per pair of outputs, k2 256-bit vectors holding output
 * 2q's in the low lane, 2q+1's in the high one (zero past the last output),
 * so dst needs room for an even number of outputs. */
static void expand_hcoefs(int16_t *restrict dst, const int16_t *restrict c, uint32_t k,
                          uint32_t size, uint32_t lanes)
{
    const uint32_t k2 = (k + 1) / 2;
    if (size % lanes) /* the unused lane of the last pair */
        memset(dst + (size_t)(size / lanes) * k2 * lanes * 8, 0, sizeof(int16_t) * 8 * k2 * lanes);
    for (uint32_t i = 0; i < size; i++, c += k)
        for (uint32_t j = 0; j < k2; j++) {
            int16_t *d = dst + (((size_t)(i / lanes) * k2 + j) * lanes + i % lanes) * 8;
            const int16_t c0 = c[2 * j], c1 = 2 * j + 1 < k ? c[2 * j + 1] : 0;
            d[0] = d[2] = d[4] = c0;
            d[1] = d[3] = d[5] = c1;
            d[6] = d[7] = 0;
        }
}

/* uint8 input -> int16 intermediate (first pass). dst gets 4 elements per
 * pixel written (3 * size + 1 in all). */
static NST_ALWAYS_INLINE void hpass_u8_k(const uint8_t *restrict src, const int32_t *restrict xs,
                                         const int16_t *restrict hc, uint32_t k2, uint32_t size,
                                         int16_t *restrict dst)
{
    const __m128i z = _mm_setzero_si128();
    const __m128i rnd = _mm_set1_epi32(NST_AUG_ROUND1);
    for (uint32_t i = 0; i < size; i++) {
        const uint8_t *p = src + (size_t)xs[i] * 3;
        const __m128i *c = (const __m128i *)(const void *)(hc + (size_t)i * k2 * 8);
        __m128i acc = rnd;
        NST_UNROLL
        for (uint32_t j = 0; j < k2; j++) {
            __m128i a = _mm_cvtsi32_si128((int)load_u32(p + 6 * j));
            __m128i b = _mm_cvtsi32_si128((int)load_u32(p + 6 * j + 3));
            __m128i x = _mm_unpacklo_epi8(_mm_unpacklo_epi8(a, b), z);
            acc = _mm_add_epi32(acc, _mm_madd_epi16(x, _mm_loadu_si128(c + j)));
        }
        acc = _mm_srai_epi32(acc, NST_AUG_SHIFT1);
        _mm_storel_epi64((__m128i *)(void *)(dst + 3 * (size_t)i), _mm_packs_epi32(acc, acc));
    }
}

/* int16 intermediate -> uint8 output (second pass). dst gets 4 bytes per
 * pixel written (3 * size + 1 in all). */
static NST_ALWAYS_INLINE void hpass_i16_k(const int16_t *restrict src, const int32_t *restrict xs,
                                          const int16_t *restrict hc, uint32_t k2, uint32_t size,
                                          uint8_t *restrict dst)
{
    const __m128i rnd = _mm_set1_epi32(NST_AUG_ROUND2);
    for (uint32_t i = 0; i < size; i++) {
        const int16_t *p = src + (size_t)xs[i] * 3;
        const __m128i *c = (const __m128i *)(const void *)(hc + (size_t)i * k2 * 8);
        __m128i acc = rnd;
        NST_UNROLL
        for (uint32_t j = 0; j < k2; j++) {
            __m128i a = _mm_loadl_epi64((const __m128i *)(const void *)(p + 6 * j));
            __m128i b = _mm_loadl_epi64((const __m128i *)(const void *)(p + 6 * j + 3));
            acc = _mm_add_epi32(acc,
                                _mm_madd_epi16(_mm_unpacklo_epi16(a, b), _mm_loadu_si128(c + j)));
        }
        acc = _mm_srai_epi32(acc, NST_AUG_SHIFT2);
        acc = _mm_packs_epi32(acc, acc);
        uint32_t v = (uint32_t)_mm_cvtsi128_si32(_mm_packus_epi16(acc, acc));
        memcpy(dst + 3 * (size_t)i, &v, sizeof v);
    }
}

#if NST_RESIZE_AVX2
/* The AVX2 forms: outputs i and i+1 in the low and high 128-bit lanes. One
 * 8-byte load per pixel pair (the SSE2 form does two 4-byte ones), spread
 * by pshufb to {R0, R1, G0, G1, B0, B1, 0, 0}; reads reach 5 elements past
 * the last tap. An odd last output is done in 128 bits. */
static NST_ALWAYS_INLINE NST_TARGET_AVX2 void hpass_u8_k_avx2(const uint8_t *restrict src,
                                                              const int32_t *restrict xs,
                                                              const int16_t *restrict hc,
                                                              uint32_t k2, uint32_t size,
                                                              int16_t *restrict dst)
{
    const __m256i sh = _mm256_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1, 0,
                                        -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1);
    const __m256i rnd = _mm256_set1_epi32(NST_AUG_ROUND1);
    uint32_t i = 0;
    for (; i + 2 <= size; i += 2) {
        const uint8_t *p = src + (size_t)xs[i] * 3, *q = src + (size_t)xs[i + 1] * 3;
        const __m256i *c = (const __m256i *)(const void *)(hc + (size_t)i * k2 * 8);
        __m256i acc = rnd;
        NST_UNROLL
        for (uint32_t j = 0; j < k2; j++) {
            const __m128i a = _mm_loadl_epi64((const __m128i *)(const void *)(p + 6 * j));
            const __m128i b = _mm_loadl_epi64((const __m128i *)(const void *)(q + 6 * j));
            const __m256i x = _mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1);
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_shuffle_epi8(x, sh),
                                                          _mm256_loadu_si256(c + j)));
        }
        acc = _mm256_srai_epi32(acc, NST_AUG_SHIFT1);
        acc = _mm256_packs_epi32(acc, acc);
        _mm_storel_epi64((__m128i *)(void *)(dst + 3 * (size_t)i), _mm256_castsi256_si128(acc));
        _mm_storel_epi64((__m128i *)(void *)(dst + 3 * (size_t)i + 3),
                         _mm256_extracti128_si256(acc, 1));
    }
    if (i < size) {
        const uint8_t *p = src + (size_t)xs[i] * 3;
        const __m256i *c = (const __m256i *)(const void *)(hc + (size_t)i * k2 * 8);
        __m128i acc = _mm256_castsi256_si128(rnd);
        for (uint32_t j = 0; j < k2; j++) {
            const __m128i a = _mm_loadl_epi64((const __m128i *)(const void *)(p + 6 * j));
            acc = _mm_add_epi32(acc, _mm_madd_epi16(_mm_shuffle_epi8(a, _mm256_castsi256_si128(sh)),
                                                    _mm_loadu_si128(
                                                        (const __m128i *)(const void *)(c + j))));
        }
        acc = _mm_srai_epi32(acc, NST_AUG_SHIFT1);
        _mm_storel_epi64((__m128i *)(void *)(dst + 3 * (size_t)i), _mm_packs_epi32(acc, acc));
    }
}

static NST_ALWAYS_INLINE NST_TARGET_AVX2 void hpass_i16_k_avx2(const int16_t *restrict src,
                                                               const int32_t *restrict xs,
                                                               const int16_t *restrict hc,
                                                               uint32_t k2, uint32_t size,
                                                               uint8_t *restrict dst)
{
    const __m256i sh = _mm256_setr_epi8(0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11, -1, -1, -1, -1, 0, 1,
                                        6, 7, 2, 3, 8, 9, 4, 5, 10, 11, -1, -1, -1, -1);
    const __m256i rnd = _mm256_set1_epi32(NST_AUG_ROUND2);
    uint32_t i = 0;
    for (; i + 2 <= size; i += 2) {
        const int16_t *p = src + (size_t)xs[i] * 3, *q = src + (size_t)xs[i + 1] * 3;
        const __m256i *c = (const __m256i *)(const void *)(hc + (size_t)i * k2 * 8);
        __m256i acc = rnd;
        NST_UNROLL
        for (uint32_t j = 0; j < k2; j++) {
            const __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(p + 6 * j));
            const __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(q + 6 * j));
            const __m256i x = _mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1);
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_shuffle_epi8(x, sh),
                                                          _mm256_loadu_si256(c + j)));
        }
        acc = _mm256_srai_epi32(acc, NST_AUG_SHIFT2);
        acc = _mm256_packs_epi32(acc, acc);
        acc = _mm256_packus_epi16(acc, acc);
        uint32_t v0 = (uint32_t)_mm256_cvtsi256_si32(acc);
        uint32_t v1 = (uint32_t)_mm256_extract_epi32(acc, 4);
        memcpy(dst + 3 * (size_t)i, &v0, sizeof v0);
        memcpy(dst + 3 * (size_t)i + 3, &v1, sizeof v1);
    }
    if (i < size) {
        const int16_t *p = src + (size_t)xs[i] * 3;
        const __m256i *c = (const __m256i *)(const void *)(hc + (size_t)i * k2 * 8);
        __m128i acc = _mm256_castsi256_si128(rnd);
        for (uint32_t j = 0; j < k2; j++) {
            const __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(p + 6 * j));
            acc = _mm_add_epi32(acc, _mm_madd_epi16(_mm_shuffle_epi8(a, _mm256_castsi256_si128(sh)),
                                                    _mm_loadu_si128(
                                                        (const __m128i *)(const void *)(c + j))));
        }
        acc = _mm_srai_epi32(acc, NST_AUG_SHIFT2);
        acc = _mm_packs_epi32(acc, acc);
        uint32_t v = (uint32_t)_mm_cvtsi128_si32(_mm_packus_epi16(acc, acc));
        memcpy(dst + 3 * (size_t)i, &v, sizeof v);
    }
}
#endif

#define NST_HDISPATCH(FN, ...)                                                                     \
    switch (k2) { /* the usual tap counts, unrolled */                                             \
    case 1: FN(__VA_ARGS__, 1, size, dst); return;                                                 \
    case 2: FN(__VA_ARGS__, 2, size, dst); return;                                                 \
    case 3: FN(__VA_ARGS__, 3, size, dst); return;                                                 \
    case 4: FN(__VA_ARGS__, 4, size, dst); return;                                                 \
    case 5: FN(__VA_ARGS__, 5, size, dst); return;                                                 \
    default: FN(__VA_ARGS__, k2, size, dst); return;                                               \
    }

#if NST_RESIZE_AVX2
static NST_TARGET_AVX2 void hpass_u8_avx2(const uint8_t *src, const int32_t *xs, const int16_t *hc,
                                          uint32_t k2, uint32_t size, int16_t *dst)
{
    NST_HDISPATCH(hpass_u8_k_avx2, src, xs, hc)
}

static NST_TARGET_AVX2 void hpass_i16_avx2(const int16_t *src, const int32_t *xs, const int16_t *hc,
                                           uint32_t k2, uint32_t size, uint8_t *dst)
{
    NST_HDISPATCH(hpass_i16_k_avx2, src, xs, hc)
}
#endif

/* hc is in the layout of expand_hcoefs with lanes = avx2 ? 2 : 1. */
static void hpass_u8(const uint8_t *src, const int32_t *xs, const int16_t *hc, uint32_t k,
                     uint32_t size, int16_t *dst, int avx2)
{
    const uint32_t k2 = (k + 1) / 2;
#if NST_RESIZE_AVX2
    if (avx2) {
        hpass_u8_avx2(src, xs, hc, k2, size, dst);
        return;
    }
#else
    (void)avx2;
#endif
    NST_HDISPATCH(hpass_u8_k, src, xs, hc)
}

static void hpass_i16(const int16_t *src, const int32_t *xs, const int16_t *hc, uint32_t k,
                      uint32_t size, uint8_t *dst, int avx2)
{
    const uint32_t k2 = (k + 1) / 2;
#if NST_RESIZE_AVX2
    if (avx2) {
        hpass_i16_avx2(src, xs, hc, k2, size, dst);
        return;
    }
#else
    (void)avx2;
#endif
    NST_HDISPATCH(hpass_i16_k, src, xs, hc)
}
#undef NST_HDISPATCH

#else /* portable scalar: the same integer arithmetic, no over-reads */

static void hpass_u8(const uint8_t *src, const int32_t *xs, const int16_t *hc, uint32_t k,
                     uint32_t size, int16_t *dst, int avx2)
{
    (void)avx2;
    for (uint32_t i = 0; i < size; i++) {
        const uint8_t *p = src + (size_t)xs[i] * 3;
        const int16_t *c = hc + (size_t)i * k;
        int32_t r = NST_AUG_ROUND1, g = NST_AUG_ROUND1, b = NST_AUG_ROUND1;
        for (uint32_t t = 0; t < k; t++) {
            r += c[t] * p[3 * t];
            g += c[t] * p[3 * t + 1];
            b += c[t] * p[3 * t + 2];
        }
        dst[3 * i] = (int16_t)(r >> NST_AUG_SHIFT1);
        dst[3 * i + 1] = (int16_t)(g >> NST_AUG_SHIFT1);
        dst[3 * i + 2] = (int16_t)(b >> NST_AUG_SHIFT1);
    }
}

static void hpass_i16(const int16_t *src, const int32_t *xs, const int16_t *hc, uint32_t k,
                      uint32_t size, uint8_t *dst, int avx2)
{
    (void)avx2;
    for (uint32_t i = 0; i < size; i++) {
        const int16_t *p = src + (size_t)xs[i] * 3;
        const int16_t *c = hc + (size_t)i * k;
        int32_t r = NST_AUG_ROUND2, g = NST_AUG_ROUND2, b = NST_AUG_ROUND2;
        for (uint32_t t = 0; t < k; t++) {
            r += c[t] * p[3 * t];
            g += c[t] * p[3 * t + 1];
            b += c[t] * p[3 * t + 2];
        }
        dst[3 * i] = (uint8_t)(r >> NST_AUG_SHIFT2);
        dst[3 * i + 1] = (uint8_t)(g >> NST_AUG_SHIFT2);
        dst[3 * i + 2] = (uint8_t)(b >> NST_AUG_SHIFT2);
    }
}
#endif

/* ---------------------------------------------------------------------
 * Vertical pass: k rows (row t at rows[t], coefficient c[t]) -> one row of
 * n elements. The SIMD code takes the rows in pairs, interleaving them so
 * one pmaddwd applies both coefficients; when k is odd, rows[k] must be a
 * readable row (its weight is 0: the callers repeat rows[k - 1]).
 * --------------------------------------------------------------------- */

#if NST_RESIZE_SSE2
/* uint8 rows -> int16 intermediate (first pass), n >= 16; reads exactly n
 * bytes of each row (the last block overlaps the one before). */
static NST_ALWAYS_INLINE void vpass_u8_k(const uint8_t *const *restrict rows,
                                         const __m128i *restrict cf, uint32_t k2, size_t n,
                                         int16_t *restrict dst)
{
    const __m128i z = _mm_setzero_si128();
    const __m128i rnd = _mm_set1_epi32(NST_AUG_ROUND1);
    for (size_t x = 0;; x += 16) {
        if (x + 16 > n) x = n - 16;
        __m128i a0 = rnd, a1 = rnd, a2 = rnd, a3 = rnd;
        NST_UNROLL
        for (uint32_t j = 0; j < k2; j++) {
            const __m128i u = _mm_loadu_si128((const __m128i *)(const void *)(rows[2 * j] + x));
            const __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(rows[2 * j + 1] + x));
            const __m128i lo = _mm_unpacklo_epi8(u, v), hi = _mm_unpackhi_epi8(u, v);
            a0 = _mm_add_epi32(a0, _mm_madd_epi16(_mm_unpacklo_epi8(lo, z), cf[j]));
            a1 = _mm_add_epi32(a1, _mm_madd_epi16(_mm_unpackhi_epi8(lo, z), cf[j]));
            a2 = _mm_add_epi32(a2, _mm_madd_epi16(_mm_unpacklo_epi8(hi, z), cf[j]));
            a3 = _mm_add_epi32(a3, _mm_madd_epi16(_mm_unpackhi_epi8(hi, z), cf[j]));
        }
        a0 = _mm_srai_epi32(a0, NST_AUG_SHIFT1);
        a1 = _mm_srai_epi32(a1, NST_AUG_SHIFT1);
        a2 = _mm_srai_epi32(a2, NST_AUG_SHIFT1);
        a3 = _mm_srai_epi32(a3, NST_AUG_SHIFT1);
        _mm_storeu_si128((__m128i *)(void *)(dst + x), _mm_packs_epi32(a0, a1));
        _mm_storeu_si128((__m128i *)(void *)(dst + x + 8), _mm_packs_epi32(a2, a3));
        if (x + 16 >= n) break;
    }
}

/* int16 intermediate rows -> uint8 (second pass); n is a multiple of 16. */
static NST_ALWAYS_INLINE void vpass_i16_k(const int16_t *const *restrict rows,
                                          const __m128i *restrict cf, uint32_t k2, size_t n,
                                          uint8_t *restrict dst)
{
    const __m128i rnd = _mm_set1_epi32(NST_AUG_ROUND2);
    for (size_t x = 0; x < n; x += 16) {
        __m128i a0 = rnd, a1 = rnd, a2 = rnd, a3 = rnd;
        NST_UNROLL
        for (uint32_t j = 0; j < k2; j++) {
            const __m128i *ru = (const __m128i *)(const void *)(rows[2 * j] + x);
            const __m128i *rv = (const __m128i *)(const void *)(rows[2 * j + 1] + x);
            const __m128i u0 = _mm_loadu_si128(ru), u1 = _mm_loadu_si128(ru + 1);
            const __m128i v0 = _mm_loadu_si128(rv), v1 = _mm_loadu_si128(rv + 1);
            a0 = _mm_add_epi32(a0, _mm_madd_epi16(_mm_unpacklo_epi16(u0, v0), cf[j]));
            a1 = _mm_add_epi32(a1, _mm_madd_epi16(_mm_unpackhi_epi16(u0, v0), cf[j]));
            a2 = _mm_add_epi32(a2, _mm_madd_epi16(_mm_unpacklo_epi16(u1, v1), cf[j]));
            a3 = _mm_add_epi32(a3, _mm_madd_epi16(_mm_unpackhi_epi16(u1, v1), cf[j]));
        }
        a0 = _mm_srai_epi32(a0, NST_AUG_SHIFT2);
        a1 = _mm_srai_epi32(a1, NST_AUG_SHIFT2);
        a2 = _mm_srai_epi32(a2, NST_AUG_SHIFT2);
        a3 = _mm_srai_epi32(a3, NST_AUG_SHIFT2);
        _mm_storeu_si128((__m128i *)(void *)(dst + x),
                         _mm_packus_epi16(_mm_packs_epi32(a0, a1), _mm_packs_epi32(a2, a3)));
    }
}

#if NST_RESIZE_AVX2
/* The AVX2 forms, 32 elements per iteration, n >= 32; the coefficients are
 * those of vcoefs, broadcast to both lanes. uint8 rows: zero-extended to
 * int16 first, so the in-lane unpacks and packs keep the element order. */
static NST_ALWAYS_INLINE NST_TARGET_AVX2 void vpass_u8_k_avx2(const uint8_t *const *restrict rows,
                                                              const __m128i *restrict cf,
                                                              uint32_t k2, size_t n,
                                                              int16_t *restrict dst)
{
    const __m256i rnd = _mm256_set1_epi32(NST_AUG_ROUND1);
    for (size_t x = 0;; x += 32) {
        if (x + 32 > n) x = n - 32;
        __m256i a0 = rnd, a1 = rnd, a2 = rnd, a3 = rnd;
        NST_UNROLL
        for (uint32_t j = 0; j < k2; j++) {
            const __m256i c = _mm256_broadcastsi128_si256(cf[j]);
            const __m128i *ru = (const __m128i *)(const void *)(rows[2 * j] + x);
            const __m128i *rv = (const __m128i *)(const void *)(rows[2 * j + 1] + x);
            const __m256i u0 = _mm256_cvtepu8_epi16(_mm_loadu_si128(ru));
            const __m256i u1 = _mm256_cvtepu8_epi16(_mm_loadu_si128(ru + 1));
            const __m256i v0 = _mm256_cvtepu8_epi16(_mm_loadu_si128(rv));
            const __m256i v1 = _mm256_cvtepu8_epi16(_mm_loadu_si128(rv + 1));
            a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(_mm256_unpacklo_epi16(u0, v0), c));
            a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(_mm256_unpackhi_epi16(u0, v0), c));
            a2 = _mm256_add_epi32(a2, _mm256_madd_epi16(_mm256_unpacklo_epi16(u1, v1), c));
            a3 = _mm256_add_epi32(a3, _mm256_madd_epi16(_mm256_unpackhi_epi16(u1, v1), c));
        }
        a0 = _mm256_srai_epi32(a0, NST_AUG_SHIFT1);
        a1 = _mm256_srai_epi32(a1, NST_AUG_SHIFT1);
        a2 = _mm256_srai_epi32(a2, NST_AUG_SHIFT1);
        a3 = _mm256_srai_epi32(a3, NST_AUG_SHIFT1);
        _mm256_storeu_si256((__m256i *)(void *)(dst + x), _mm256_packs_epi32(a0, a1));
        _mm256_storeu_si256((__m256i *)(void *)(dst + x + 16), _mm256_packs_epi32(a2, a3));
        if (x + 32 >= n) break;
    }
}

/* int16 rows -> uint8, n >= 32 a multiple of 16 (the last block overlaps
 * the one before). */
static NST_ALWAYS_INLINE NST_TARGET_AVX2 void vpass_i16_k_avx2(const int16_t *const *restrict rows,
                                                               const __m128i *restrict cf,
                                                               uint32_t k2, size_t n,
                                                               uint8_t *restrict dst)
{
    const __m256i rnd = _mm256_set1_epi32(NST_AUG_ROUND2);
    for (size_t x = 0;; x += 32) {
        if (x + 32 > n) x = n - 32;
        __m256i a0 = rnd, a1 = rnd, a2 = rnd, a3 = rnd;
        NST_UNROLL
        for (uint32_t j = 0; j < k2; j++) {
            const __m256i c = _mm256_broadcastsi128_si256(cf[j]);
            const __m256i *ru = (const __m256i *)(const void *)(rows[2 * j] + x);
            const __m256i *rv = (const __m256i *)(const void *)(rows[2 * j + 1] + x);
            const __m256i u0 = _mm256_loadu_si256(ru), u1 = _mm256_loadu_si256(ru + 1);
            const __m256i v0 = _mm256_loadu_si256(rv), v1 = _mm256_loadu_si256(rv + 1);
            a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(_mm256_unpacklo_epi16(u0, v0), c));
            a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(_mm256_unpackhi_epi16(u0, v0), c));
            a2 = _mm256_add_epi32(a2, _mm256_madd_epi16(_mm256_unpacklo_epi16(u1, v1), c));
            a3 = _mm256_add_epi32(a3, _mm256_madd_epi16(_mm256_unpackhi_epi16(u1, v1), c));
        }
        a0 = _mm256_srai_epi32(a0, NST_AUG_SHIFT2);
        a1 = _mm256_srai_epi32(a1, NST_AUG_SHIFT2);
        a2 = _mm256_srai_epi32(a2, NST_AUG_SHIFT2);
        a3 = _mm256_srai_epi32(a3, NST_AUG_SHIFT2);
        /* Lanes hold elements {0-7, 16-23 | 8-15, 24-31}: reorder qwords. */
        const __m256i r =
            _mm256_packus_epi16(_mm256_packs_epi32(a0, a1), _mm256_packs_epi32(a2, a3));
        _mm256_storeu_si256((__m256i *)(void *)(dst + x),
                            _mm256_permute4x64_epi64(r, _MM_SHUFFLE(3, 1, 2, 0)));
        if (x + 32 >= n) break;
    }
}
#endif

#define NST_VDISPATCH(FN)                                                                          \
    switch (k2) { /* the usual tap counts, unrolled */                                             \
    case 1: FN(rows, cf, 1, n, dst); break;                                                        \
    case 2: FN(rows, cf, 2, n, dst); break;                                                        \
    case 3: FN(rows, cf, 3, n, dst); break;                                                        \
    case 4: FN(rows, cf, 4, n, dst); break;                                                        \
    default: FN(rows, cf, k2, n, dst); break;                                                      \
    }

/* Pair coefficients {c[2j], c[2j+1]} broadcast, c[k] = 0. */
static void vcoefs(__m128i *cf, const int16_t *c, uint32_t k)
{
    for (uint32_t j = 0; 2 * j < k; j++) {
        const uint32_t c0 = (uint16_t)c[2 * j];
        const uint32_t c1 = 2 * j + 1 < k ? (uint16_t)c[2 * j + 1] : 0;
        cf[j] = _mm_set1_epi32((int)(c0 | c1 << 16));
    }
}

#if NST_RESIZE_AVX2
static NST_TARGET_AVX2 void vpass_u8_avx2(const uint8_t *const *rows, const __m128i *cf,
                                          uint32_t k2, size_t n, int16_t *dst)
{
    NST_VDISPATCH(vpass_u8_k_avx2)
}

static NST_TARGET_AVX2 void vpass_i16_avx2(const int16_t *const *rows, const __m128i *cf,
                                           uint32_t k2, size_t n, uint8_t *dst)
{
    NST_VDISPATCH(vpass_i16_k_avx2)
}
#endif
#endif

static void vpass_u8(const uint8_t *const *rows, const int16_t *c, void *cfs, uint32_t k, size_t n,
                     int16_t *restrict dst, int avx2)
{
#if NST_RESIZE_SSE2
    if (n >= 16) { /* (malloc'ed cfs: 16-byte aligned) */
        __m128i *cf = cfs;
        const uint32_t k2 = (k + 1) / 2;
        vcoefs(cf, c, k);
#if NST_RESIZE_AVX2
        if (avx2 && n >= 32) {
            vpass_u8_avx2(rows, cf, k2, n, dst);
            return;
        }
#endif
        NST_VDISPATCH(vpass_u8_k)
        return;
    }
#else
    (void)cfs;
#endif
    (void)avx2;
    for (size_t x = 0; x < n; x++) {
        int32_t s = NST_AUG_ROUND1;
        for (uint32_t t = 0; t < k; t++) s += c[t] * rows[t][x];
        dst[x] = (int16_t)(s >> NST_AUG_SHIFT1);
    }
}

static void vpass_i16(const int16_t *const *rows, const int16_t *c, void *cfs, uint32_t k, size_t n,
                      uint8_t *restrict dst, int avx2)
{
#if NST_RESIZE_SSE2
    __m128i *cf = cfs;
    const uint32_t k2 = (k + 1) / 2;
    vcoefs(cf, c, k);
#if NST_RESIZE_AVX2
    if (avx2 && n >= 32) {
        vpass_i16_avx2(rows, cf, k2, n, dst);
        return;
    }
#else
    (void)avx2;
#endif
    NST_VDISPATCH(vpass_i16_k)
#else
    (void)cfs;
    (void)avx2;
    for (size_t x = 0; x < n; x++) {
        int32_t s = NST_AUG_ROUND2;
        for (uint32_t t = 0; t < k; t++) s += c[t] * rows[t][x];
        dst[x] = (uint8_t)(s >> NST_AUG_SHIFT2);
    }
#endif
}
#undef NST_VDISPATCH


/* Letterbox border: writes the item's border rows (those outside
 * [pad_top, pad_top + inner_height)) as pixel value 0 and, when the inner
 * rectangle is narrower than the item, leaves in a->prow a full item row of
 * zeros for emit() to place the resampled rows in. */
static int border_begin(nst_augmenter *a, const nst_output *o)
{
    if (o->inner_width == o->width && o->inner_height == o->height) return 0;
    const size_t n = (size_t)o->width * 3;
    int rc = nst_buf_reserve(&a->prow, n);
    if (rc < 0) return rc;
    memset(a->prow.data, 0, n);
    for (uint32_t y = 0; y < o->pad_top; y++) nst_out_row(o, y, a->prow.data, a->simd);
    for (uint32_t y = o->pad_top + o->inner_height; y < o->height; y++)
        nst_out_row(o, y, a->prow.data, a->simd);
    return 0;
}

/* Row y of the inner rectangle (inner_width pixels at `row`) to the item. */
static inline void emit(const nst_augmenter *a, const nst_output *o, uint32_t y, const uint8_t *row)
{
    if (o->inner_width == o->width) {
        nst_out_row(o, o->pad_top + y, row, a->simd);
        return;
    }
    memcpy(a->prow.data + (size_t)o->pad_left * 3, row, (size_t)o->inner_width * 3);
    nst_out_row(o, o->pad_top + y, a->prow.data, a->simd);
}

static int check_image(const nst_image *img)
{
    if (!img->data || img->width == 0 || img->height == 0 ||
        img->width > (uint32_t)NST_AUG_MAX_COORD || img->height > (uint32_t)NST_AUG_MAX_COORD ||
        img->stride / 3 < img->width || img->scale_num == 0 || img->scale_den == 0)
        return nst_error(NOSTALL_E_INVALID, "augment: bad image (%ux%u, stride %zu, scale %u/%u)",
                         img->width, img->height, img->stride, img->scale_num, img->scale_den);
    return 0;
}

int nst_augment_copy(nst_augmenter *a, const nst_image *img, int flip, const nst_output *out)
{
    nst_output ob, *o = &ob;
    int rc = nst_out_resolve(out, o);
    if (rc < 0) return rc;
    if (!a || !img) return nst_error(NOSTALL_E_INVALID, "augment: missing argument");
    if ((rc = check_image(img)) < 0) return rc;
    if (img->width != o->inner_width || img->height != o->inner_height)
        return nst_error(NOSTALL_E_INVALID, "augment: copying a %ux%u image into a %ux%u place",
                         img->width, img->height, o->inner_width, o->inner_height);
    const size_t row = (size_t)img->width * 3;
    if (flip && (rc = nst_buf_reserve(&a->orow, row)) < 0) return rc;
    if ((rc = border_begin(a, o)) < 0) return rc;
    for (uint32_t y = 0; y < img->height; y++) {
        const uint8_t *src = img->data + (size_t)y * img->stride;
        if (flip) {
            uint8_t *d = a->orow.data;
            for (size_t x = 0, r = row - 3; x < row; x += 3, r -= 3) {
                d[x] = src[r];
                d[x + 1] = src[r + 1];
                d[x + 2] = src[r + 2];
            }
            src = d;
        }
        emit(a, o, y, src);
    }
    return 0;
}

int nst_augment(nst_augmenter *a, const nst_image *img, const nst_window *win, int flip,
                const nst_output *out)
{
    nst_output ob, *o = &ob;
    int rc = nst_out_resolve(out, o);
    if (rc < 0) return rc;
    if (!a || !img || !win) return nst_error(NOSTALL_E_INVALID, "augment: missing argument");
    if ((rc = check_image(img)) < 0) return rc;
    if (!isfinite(win->x) || !isfinite(win->y) || !isfinite(win->w) || !isfinite(win->h) ||
        !(win->w > 0.0) || !(win->h > 0.0))
        return nst_error(NOSTALL_E_INVALID, "augment: invalid window (x %g, y %g, w %g, h %g)",
                         win->x, win->y, win->w, win->h);

    /* Window in the coordinates of img->data. */
    const double s = (double)img->scale_num / (double)img->scale_den;
    const double wx = win->x * s - (double)img->x0;
    const double wy = win->y * s - (double)img->y0;
    const double ww = win->w * s, wh = win->h * s;
    const double m = NST_AUG_MAX_COORD;
    if (!(fabs(wx) <= m && fabs(wy) <= m && ww <= m && wh <= m && ww > 0.0 && wh > 0.0))
        return nst_error(NOSTALL_E_INVALID, "augment: window (x %g, y %g, w %g, h %g) out of range",
                         win->x, win->y, win->w, win->h);

    /* The resampled rectangle: ow x oh (the whole item without a border). */
    const uint32_t ow = o->inner_width, oh = o->inner_height;

    if ((rc = build_axis(&a->ax, &a->work, wx, ww, img->width, ow, flip, 1)) < 0) return rc;
    if ((rc = build_axis(&a->ay, &a->work, wy, wh, img->height, oh, 0, 0)) < 0) return rc;
    const int32_t *xs = (const int32_t *)(const void *)a->ax.start.data;
    const int16_t *xc = (const int16_t *)(const void *)a->ax.coefs.data;
    const int32_t *ys = (const int32_t *)(const void *)a->ay.start.data;
    const int16_t *yc = (const int16_t *)(const void *)a->ay.coefs.data;
    const uint32_t kx = a->ax.k, ky = a->ay.k;
    const size_t nx = (size_t)(a->ax.hi - a->ax.lo), ny = (size_t)(a->ay.hi - a->ay.lo);

    /* Pass order: vertical first (one intermediate row per output row, over
     * the nx columns the horizontal taps touch) or horizontal first (over
     * the ny input rows the vertical taps touch, kept in a ring of ky rows
     * when the rows are consumed in order). Whichever costs less. */
    const int vert_first = nst_pm_vert_first(ow, oh, kx, ky, (double)nx, (double)ny);

    /* Scratch: the uint8 output row (+ slack for 4-byte stores), the rows
     * of pointers, the int16 intermediate (+ slack for the reads of the
     * horizontal pass, up to 5 elements past the last tap), a padded copy of
     * the last input row. */
    const size_t orow = (size_t)ow * 3;
    const size_t irow = vert_first ? nx * 3 + 8 : (orow + 16) / 16 * 16;
    const size_t nring = vert_first ? 1 : (a->ay.mono ? ky : ny);
    size_t hbytes = 0, ibytes;
#if NST_RESIZE_SSE2
    /* (an even number of outputs: the AVX2 layout works in pairs) */
    if (nst_mul_overflow(((size_t)ow + 1) / 2 * 2 * ((kx + 1) / 2), 16, &hbytes))
        return nst_error(NOSTALL_E_NOMEM, "augment: filter too large");
#endif
    if (nst_mul_overflow(irow, nring * sizeof(int16_t), &ibytes))
        return nst_error(NOSTALL_E_NOMEM, "augment: intermediate too large");
    if ((rc = nst_buf_reserve(&a->orow, orow + 16)) < 0) return rc;
    if ((rc = nst_buf_reserve(&a->rows, ((size_t)ky + 1) * sizeof(void *))) < 0) return rc;
    if ((rc = nst_buf_reserve(&a->vco, ((size_t)ky + 1) / 2 * 16)) < 0) return rc;
    if ((rc = nst_buf_reserve(&a->tmp, ibytes)) < 0) return rc;
    if ((rc = nst_buf_reserve(&a->lastrow, (size_t)img->width * 3 + 16)) < 0) return rc;
    if ((rc = nst_buf_reserve(&a->hco, hbytes)) < 0) return rc;
    if ((rc = border_begin(a, o)) < 0) return rc;
    uint8_t *orowp = a->orow.data;
    int16_t *tmp = (int16_t *)(void *)a->tmp.data;
    const int16_t *hc = xc;
#if NST_RESIZE_SSE2
    expand_hcoefs((int16_t *)(void *)a->hco.data, xc, kx, ow, a->avx2 ? 2 : 1);
    hc = (const int16_t *)(const void *)a->hco.data;
#endif
    /* Slack read by the horizontal pass with weight 0: defined values. */
    memset(tmp, 0, ibytes);

    if (vert_first) {
        const uint8_t **rows = (const uint8_t **)(void *)a->rows.data;
        const uint8_t *base = img->data + (size_t)a->ax.lo * 3;
        for (uint32_t y = 0; y < oh; y++) {
            for (uint32_t t = 0; t < ky; t++) rows[t] = base + ((size_t)ys[y] + t) * img->stride;
            rows[ky] = rows[ky - 1];
            vpass_u8(rows, yc + (size_t)y * ky, a->vco.data, ky, nx * 3, tmp, a->avx2);
            hpass_i16(tmp, xs, hc, kx, ow, orowp, a->avx2);
            emit(a, o, y, orowp);
        }
        return 0;
    }

    /* Horizontal first. The SIMD horizontal pass reads up to 5 bytes past
     * a row's last tap: inside the next row, except for the image's last
     * row (and every row when the stride is below 8), which is read from a
     * padded copy. */
    const int16_t **rows = (const int16_t **)(void *)a->rows.data;
    uint8_t *last = a->lastrow.data;
    memset(last + (size_t)img->width * 3, 0, 16);
    int64_t done = a->ay.lo; /* input rows below this are in the ring */
    for (uint32_t y = 0; y < oh; y++) {
        const int64_t need = (int64_t)ys[y] + ky;
        for (; done < need; done++) {
            const uint8_t *src = img->data + (size_t)done * img->stride;
            if (done + 1 >= (int64_t)img->height || img->stride < 8) {
                memcpy(last, src, (size_t)img->width * 3);
                src = last;
            }
            hpass_u8(src + (size_t)a->ax.lo * 3, xs, hc, kx, ow,
                     tmp + (size_t)((done - a->ay.lo) % (int64_t)nring) * irow, a->avx2);
        }
        for (uint32_t t = 0; t < ky; t++)
            rows[t] = tmp + (size_t)(((int64_t)ys[y] + t - a->ay.lo) % (int64_t)nring) * irow;
        rows[ky] = rows[ky - 1];
        vpass_i16(rows, yc + (size_t)y * ky, a->vco.data, ky, irow, orowp, a->avx2);
        emit(a, o, y, orowp);
    }
    return 0;
}
