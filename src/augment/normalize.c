/*
 * normalize.c — the last step of an augmentation: turning a row of
 * fixed-point accumulators into bytes of the batch slot, and the float
 * normalization table.
 *
 * uint8 NHWC rows are written as interleaved RGB triplets straight into the
 * destination; float32 NCHW rows are de-interleaved into three planes
 * (plane c starts at dst + c * size * size floats) through the 3 x 256 table
 * lut[c * 256 + v] = (v / 255 - mean[c]) / std[c], so a float output is
 * exactly the table applied to the uint8 output.
 *
 * Pure functions: called by the worker threads on their own rows, no state.
 */
#include <stddef.h>
#include <stdint.h>

#include "augment/augment_impl.h"
#include "common/error.h"

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

/* acc >> BITS clamped to [0, 255]; branch-free (compiles to min/max). */
static inline uint32_t px(int32_t a)
{
    int32_t v = a >> NST_AUG_BITS;
    v = v < 0 ? 0 : v;
    v = v > 255 ? 255 : v;
    return (uint32_t)v;
}

void nst_out_row(const nst_output *out, uint32_t y, const int32_t *acc)
{
    size_t n = out->size;
    if (out->kind == NST_OUT_UINT8_NHWC) {
        uint8_t *restrict d = (uint8_t *)out->dst + (size_t)y * n * 3;
        const int32_t *restrict a = acc;
        for (size_t i = 0; i < n * 3; i++) d[i] = (uint8_t)px(a[i]);
    } else {
        float *restrict p0 = (float *)out->dst + (size_t)y * n;
        float *restrict p1 = p0 + n * n;
        float *restrict p2 = p1 + n * n;
        const float *restrict l = out->lut;
        for (size_t i = 0; i < n; i++) {
            p0[i] = l[px(acc[3 * i])];
            p1[i] = l[256 + px(acc[3 * i + 1])];
            p2[i] = l[512 + px(acc[3 * i + 2])];
        }
    }
}
