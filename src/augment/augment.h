/*
 * augment.h — crop geometry, resampling, flip, normalization and layout:
 * everything between decoded pixels and bytes in a batch slot.
 *
 * Geometry (crop.c) follows torchvision exactly:
 *   RandomResizedCrop(size, scale, ratio): up to 10 tries of
 *     target_area = area * U(scale_min, scale_max)
 *     aspect      = exp(U(log ratio_min, log ratio_max))
 *     w = round(sqrt(target_area * aspect)), h = round(sqrt(target_area / aspect))
 *     accepted if 0 < w <= W and 0 < h <= H; then top = randint(0, H - h),
 *     left = randint(0, W - w) (inclusive);
 *   otherwise the central-crop fallback clamped to [ratio_min, ratio_max].
 *   Random draws come from the caller's nst_rng in that order.
 *   Eval: Resize(resize) of the shorter side (longer side truncated as
 *   torchvision does: int(resize * long / short)) then CenterCrop(crop)
 *   (top = round((H' - crop) / 2)); returned as the equivalent fractional
 *   window of the source, so one resampling does both.
 *
 * Resampling (resize.c): separable, antialiased when downscaling (a triangle
 * filter whose support widens with the scale factor, like PIL's BILINEAR and
 * torchvision's antialias=True), computed in fixed point, results rounded to
 * uint8 like PIL. Mirroring for the flip is folded into the horizontal pass.
 *
 * Output (normalize.c): uint8 NHWC written as is; float32 NCHW written as
 * (v / 255 - mean[c]) / std[c] (see nst_norm_lut(): a lookup table, or the
 * same fused multiply-add in AVX2).
 *
 * An nst_augmenter is per-worker scratch (filter coefficients, intermediate
 * rows), grow-only: no allocation in the steady state.
 */
#ifndef NST_AUGMENT_AUGMENT_H
#define NST_AUGMENT_AUGMENT_H

#include <stddef.h>
#include <stdint.h>

#include "common/rng.h"
#include "decode/decode.h"

/* --- geometry (crop.c) --- */
void nst_crop_random_resized(uint32_t width, uint32_t height, double scale_min,
                             double scale_max, double ratio_min, double ratio_max,
                             nst_rng *rng, nst_window *out);
void nst_crop_center(uint32_t width, uint32_t height, uint32_t resize,
                     uint32_t crop, nst_window *out);

/* --- output description (normalize.c) --- */
enum { NST_OUT_UINT8_NHWC = 0, NST_OUT_FLOAT_NCHW = 1 };

typedef struct nst_output {
    int kind;           /* NST_OUT_*                                     */
    uint32_t size;      /* output is size x size x 3                      */
    void *dst;          /* the item's place in the batch slot             */
    const float *lut;   /* float: NST_NORM_LUT_SIZE floats from nst_norm_lut() */
} nst_output;

/* lut[c * 256 + v] = fmaf(v, scale[c], bias[c]), i.e. (v / 255 - mean[c]) /
 * std[c] with scale[c] = (float)(1 / (255 std[c])) and bias[c] =
 * (float)(-mean[c] / std[c]) in one rounding, which is also what a SIMD
 * fused multiply-add gives; scale and bias follow the table:
 * lut[768 + c] = scale[c], lut[771 + c] = bias[c]. */
#define NST_NORM_LUT_SIZE (3 * 256 + 6)
void nst_norm_lut(float lut[NST_NORM_LUT_SIZE], const double mean[3], const double stdv[3]);

/* --- the fused operation (resize.c) --- */
typedef struct nst_augmenter nst_augmenter;

int nst_augmenter_create(nst_augmenter **out);
void nst_augmenter_free(nst_augmenter *a);

/* Resample window `win` (in source-image pixel coordinates, i.e. of a
 * src_width x src_height image; mapped through img's x0/y0/scale onto
 * img->data) to out->size x out->size, mirror it when `flip`, and write it
 * to out->dst in out's layout. Pixels of the window outside img->data are
 * clamped to its edge. E_NOMEM or E_INVALID (empty window). */
int nst_augment(nst_augmenter *a, const nst_image *img, const nst_window *win,
                int flip, const nst_output *out);

#endif
