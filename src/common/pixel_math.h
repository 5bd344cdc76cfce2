/*
 * pixel_math.h — the per-pixel arithmetic of the augment stage, written once
 * for both the host (C11, src/augment/) and the device (CUDA, the .cu files of src/gpu/):
 * the resampling filter's fixed-point taps of one output pixel, the two
 * passes' rounding, the flip, normalization, the layout's element offset and
 * the float16 / bfloat16 conversions. NST_HD marks every function
 * `__host__ __device__` under nvcc and nothing in C. Pure functions, no
 * state, no allocation: any thread, any device thread. Room: common/ (the
 * augment stage and the GPU backend, src/gpu/, both include it).
 *
 * The CPU path uses these functions itself (resize.c's build_axis, the
 * normalization tables of normalize.c), so the GPU kernels compute the same
 * bits by construction; tests/test_pixel_math.c checks a whole resample
 * done with them per pixel, as the kernels do, against nst_augment(). The
 * filter's weights are computed in double precision: CUDA must compile it
 * with --fmad=false (CMakeLists.txt), so no multiply-add is contracted into
 * a fused one with a different rounding.
 *
 * Fixed point (the convention augment_impl.h documents): coefficients are
 * non-negative int16 summing to exactly NST_AUG_ONE per output pixel; the
 * first pass keeps NST_AUG_IBITS fractional bits in int16, the second rounds
 * to uint8.
 */
#ifndef NST_COMMON_PIXEL_MATH_H
#define NST_COMMON_PIXEL_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define NST_HD static inline __host__ __device__
#else
#define NST_HD static inline
#endif

#define NST_AUG_BITS 14
#define NST_AUG_ONE (1 << NST_AUG_BITS)
#define NST_AUG_IBITS 7
/* First pass: int32 accumulator -> int16 intermediate. */
#define NST_AUG_SHIFT1 (NST_AUG_BITS - NST_AUG_IBITS)
#define NST_AUG_ROUND1 (1 << (NST_AUG_SHIFT1 - 1))
/* Second pass: int32 accumulator -> uint8 pixel. */
#define NST_AUG_SHIFT2 (NST_AUG_BITS + NST_AUG_IBITS)
#define NST_AUG_ROUND2 (1 << (NST_AUG_SHIFT2 - 1))

/* The largest output side (and window extent, in pixels) the resampler
 * takes: keeps every tap index and filter size well inside int32. */
#define NST_AUG_MAX_SIDE (1u << 26)

/* Output dtypes and layouts (augment.h's THE OUTPUT CONTRACT). */
enum { NST_OUT_U8 = 0, NST_OUT_F32 = 1, NST_OUT_F16 = 2, NST_OUT_BF16 = 3 };
enum { NST_OUT_AUTO = 0, NST_OUT_NCHW = 1, NST_OUT_NHWC = 2 };

NST_HD int64_t nst_pm_clamp(int64_t v, int64_t lo, int64_t hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* The filter of one axis: resampling [in0, in0 + len) of n pixels to size
 * outputs. Triangle support max(1, scale) (antialiased when downscaling);
 * at most nst_pm_axis_cap() taps per output. */
typedef struct nst_pm_axis {
    double in0, scale, support, inv, kd;
    uint32_t n, size;
    int flip;
} nst_pm_axis;

NST_HD nst_pm_axis nst_pm_axis_init(double in0, double len, uint32_t n, uint32_t size, int flip)
{
    nst_pm_axis a;
    a.in0 = in0;
    a.scale = len / (double)size;
    a.support = a.scale > 1.0 ? a.scale : 1.0; /* triangle: 1 * scale */
    a.inv = 1.0 / a.support;
    a.kd = ceil(a.support) * 2.0 + 1.0; /* candidate taps, before clamping */
    a.n = n;
    a.size = size;
    a.flip = flip;
    return a;
}

/* The most taps one output can have (the clamped candidates). */
NST_HD uint32_t nst_pm_axis_cap(const nst_pm_axis *a)
{
    return a->kd < (double)a->n ? (uint32_t)a->kd : a->n;
}

/* Output i's source index along the axis: mirrored when flipped. */
NST_HD uint32_t nst_pm_src_index(uint32_t i, uint32_t size, int flip)
{
    return flip ? size - 1 - i : i;
}

/* The weight of input pixel x for an output centred at `center`. */
NST_HD double nst_pm_weight(const nst_pm_axis *a, int64_t x, double center)
{
    return 1.0 - fabs(((double)x + 0.5 - center) * a->inv);
}

/* Output i's taps: writes *count (1 .. nst_pm_axis_cap) int16 coefficients
 * to coef[] for input pixels first .. first + *count - 1 and returns first.
 * Taps outside [0, n) are folded onto the edge pixel; the weights are
 * normalized in double and rounded as a running sum, so they are
 * non-negative and sum to exactly NST_AUG_ONE. Taps are those x in [lo, hi)
 * whose centre x + 0.5 can lie within the support, rounded as PIL does. */
NST_HD int32_t nst_pm_taps(const nst_pm_axis *a, uint32_t i, int16_t *coef, int32_t *count)
{
    const int64_t last = (int64_t)a->n - 1;
    const double center = a->in0 + ((double)nst_pm_src_index(i, a->size, a->flip) + 0.5) * a->scale;
    int64_t lo = (int64_t)floor(center - a->support + 0.5);
    int64_t hi = (int64_t)floor(center + a->support + 0.5);
    if (hi <= lo) hi = lo + 1;
    /* at most kd (rounding could add a zero-weight candidate at a boundary) */
    if (hi - lo > (int64_t)a->kd) hi = lo + (int64_t)a->kd;
    /* The total, and the first and last taps of positive weight. */
    double total = 0.0;
    int64_t xfirst = hi, xlast = lo - 1;
    for (int64_t x = lo; x < hi; x++) {
        const double f = nst_pm_weight(a, x, center);
        if (!(f > 0.0)) continue;
        total += f;
        if (xfirst == hi) xfirst = x;
        xlast = x;
    }
    if (!(total > 0.0)) { /* cannot happen (support >= 1); be safe */
        coef[0] = (int16_t)NST_AUG_ONE;
        *count = 1;
        return (int32_t)nst_pm_clamp(lo, 0, last);
    }
    const int64_t first = nst_pm_clamp(xfirst, 0, last), end = nst_pm_clamp(xlast, 0, last);
    const int64_t cnt = end - first + 1;
    /* Pixel p's weight: the taps clamped onto it, summed in order. */
    double cum = 0.0;
    int32_t prev = 0;
    for (int64_t p = first; p <= end; p++) {
        const int64_t xa = p == 0 ? lo : p, xb = p == last ? hi - 1 : p;
        double w = 0.0;
        for (int64_t x = xa > lo ? xa : lo; x <= xb && x < hi; x++) {
            const double f = nst_pm_weight(a, x, center);
            if (f > 0.0) w += f;
        }
        cum += w / total;
        int32_t next = p == end ? NST_AUG_ONE : (int32_t)floor(cum * NST_AUG_ONE + 0.5);
        if (next > NST_AUG_ONE) next = NST_AUG_ONE;
        if (next < prev) next = prev;
        coef[p - first] = (int16_t)(next - prev);
        prev = next;
    }
    *count = (int32_t)cnt;
    return (int32_t)first;
}

/* The passes' rounding: a first-pass accumulator (coefficients x uint8) to
 * the int16 intermediate, a second-pass one (x intermediate) to uint8. */
NST_HD int16_t nst_pm_round1(int32_t acc) { return (int16_t)(acc >> NST_AUG_SHIFT1); }
NST_HD uint8_t nst_pm_round2(int32_t acc) { return (uint8_t)(acc >> NST_AUG_SHIFT2); }

/* One element of a pass: k taps of stride `step` elements from src. */
NST_HD int16_t nst_pm_pass1(const uint8_t *src, size_t step, const int16_t *c, uint32_t k)
{
    int32_t acc = NST_AUG_ROUND1;
    for (uint32_t t = 0; t < k; t++) acc += c[t] * src[t * step];
    return nst_pm_round1(acc);
}
NST_HD uint8_t nst_pm_pass2(const int16_t *src, size_t step, const int16_t *c, uint32_t k)
{
    int32_t acc = NST_AUG_ROUND2;
    for (uint32_t t = 0; t < k; t++) acc += c[t] * src[t * step];
    return nst_pm_round2(acc);
}

/* Which pass goes first (resize.c's rough cost model, in vector operations):
 * vertical first over the nx input columns the horizontal taps touch, or
 * horizontal first over the ny input rows the vertical taps touch. The
 * order changes the intermediate's rounding, so both paths must agree. */
NST_HD double nst_pm_hcost(double outputs, uint32_t k)
{
    return outputs * (8.0 + 6.0 * ((k + 1) / 2));
}
NST_HD double nst_pm_vcost(double elems, uint32_t k)
{
    return elems / 16.0 * (12.0 + 16.0 * ((k + 1) / 2));
}
NST_HD int nst_pm_vert_first(uint32_t ow, uint32_t oh, uint32_t kx, uint32_t ky, double nx,
                             double ny)
{
    const double vfirst =
        nst_pm_vcost((double)oh * 3.0 * nx, ky) + nst_pm_hcost((double)oh * ow, kx);
    const double hfirst =
        nst_pm_hcost(ny * ow, kx) + nst_pm_vcost((double)oh * 3.0 * (double)ow, ky);
    return vfirst < hfirst;
}

/* Normalization: (v / 255 - mean) / std as one fused multiply-add with
 * scale = (float)(1 / (255 std)) and bias = (float)(-mean / std). */
NST_HD float nst_pm_norm_scale(double stdv) { return (float)(1.0 / (255.0 * stdv)); }
NST_HD float nst_pm_norm_bias(double mean, double stdv) { return (float)(-mean / stdv); }
NST_HD float nst_pm_normalize(uint8_t v, float scale, float bias)
{
    return fmaf((float)v, scale, bias);
}

/* float32 -> IEEE binary16 bits, round to nearest even, subnormals and
 * overflow to infinity; NaN stays a quiet NaN with its payload's top bits
 * (as F16C). */
NST_HD uint16_t nst_pm_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    x &= 0x7fffffffu;
    if (x > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
    if (x >= 0x477ff000u) /* >= 65520 (half-way past 65504) and inf: inf */
        return (uint16_t)(sign | 0x7c00u);
    if (x >= 0x38800000u) {             /* >= 2^-14: a normal half */
        x += 0xfffu + ((x >> 13) & 1u); /* round the 13 dropped bits, ties even */
        return (uint16_t)(sign | ((x - 0x38000000u) >> 13)); /* rebias 127 -> 15 */
    }
    if (x <= 0x33000000u) /* <= 2^-25: rounds to (signed) zero */
        return sign;
    /* Subnormal: m * 2^-24 with m = value * 2^24, rounded to even. */
    const uint32_t e = x >> 23, mant = (x & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e; /* 14 .. 24 */
    uint32_t m = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (m & 1u))) m++;
    return (uint16_t)(sign | m);
}

/* float32 -> bfloat16 bits: the upper half rounded to nearest even. */
NST_HD uint16_t nst_pm_f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* Element (c, y, x) of a width x height RGB item: its index in elements. */
NST_HD size_t nst_pm_offset(int layout, uint32_t width, uint32_t height, uint32_t x, uint32_t y,
                            uint32_t c)
{
    if (layout == NST_OUT_NCHW) return ((size_t)c * height + y) * width + x;
    return ((size_t)y * width + x) * 3 + c;
}

/* Store pixel value v of channel c at element e of an item of `dtype`. */
NST_HD void nst_pm_store(void *dst, int dtype, size_t e, uint8_t v, float scale, float bias)
{
    switch (dtype) {
    case NST_OUT_U8: ((uint8_t *)dst)[e] = v; break;
    case NST_OUT_F32: ((float *)dst)[e] = nst_pm_normalize(v, scale, bias); break;
    case NST_OUT_F16:
        ((uint16_t *)dst)[e] = nst_pm_f32_to_f16(nst_pm_normalize(v, scale, bias));
        break;
    case NST_OUT_BF16:
        ((uint16_t *)dst)[e] = nst_pm_f32_to_bf16(nst_pm_normalize(v, scale, bias));
        break;
    default: break;
    }
}

#endif
