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
 *   torchvision does: int(resize * long / short)) then CenterCrop((h, w))
 *   (top = round((H' - h) / 2), left = round((W' - w) / 2)); returned as
 *   the equivalent fractional window of the source, so one resampling does
 *   both. Letterbox (nst_letterbox): the placement of a whole image scaled
 *   to fit an item with its aspect kept, centred.
 *
 * Resampling (resize.c): separable, antialiased when downscaling (a triangle
 * filter whose support widens with the scale factor, like PIL's BILINEAR and
 * torchvision's antialias=True), computed in fixed point, results rounded to
 * uint8 like PIL. Mirroring for the flip is folded into the horizontal pass.
 *
 * THE OUTPUT CONTRACT (nst_output; writers in normalize.c)
 *   An item is width x height pixels of 3 channels (RGB) at `dst`, in
 *   `layout` and `dtype`, chosen independently:
 *     layout  NCHW: three planes, element (c, y, x) at (c * height + y) *
 *                   width + x;  NHWC: interleaved, (y * width + x) * 3 + c;
 *             NST_OUT_AUTO: NHWC for uint8, NCHW for the float dtypes.
 *     dtype   uint8: the resampled pixel v as is;
 *             float32: norm->f32[c][v] = fmaf(v, scale[c], bias[c]), i.e.
 *               (v / 255 - mean[c]) / std[c] (see nst_norm_init);
 *             float16, bfloat16: that same float32 value converted with
 *               round-to-nearest-even (IEEE binary16, with subnormals and
 *               overflow to infinity; bfloat16: the upper 16 bits rounded).
 *               The scalar tables and the SIMD paths (F16C, chosen only when
 *               the CPU has it) give the same bits.
 *   So every float output is exactly a function of the uint8 output: the
 *   dtype never changes which pixel values are computed.
 *   Placement (letterbox): the resampled window (or copied image) fills the
 *   inner_width x inner_height rectangle at (pad_left, pad_top) of the item;
 *   every other pixel of the item is the border, written as pixel value 0
 *   (all channels) before normalization -- 0 for uint8, norm->f32[c][0] =
 *   (0 - mean[c]) / std[c] for float32 (the same converted for float16 and
 *   bfloat16), i.e. what a normalized zero-padded image holds. inner_width
 *   = inner_height = 0 means the whole item (no border, pads must be 0).
 *   A point (sx, sy) of the source image inside window `win` lands at
 *   (pad_left + (sx - win.x) * inner_width / win.w, pad_top + (sy - win.y)
 *   * inner_height / win.h) in output pixels (mirrored within the inner
 *   rectangle when flipped: x' = 2 * pad_left + inner_width - x).
 *   dst must hold nst_output_bytes(out) bytes; nothing outside them is
 *   written. Any alignment is accepted (float32 NCHW rows that happen to be
 *   32-byte aligned go out with non-temporal stores).
 *   Shorthands: width = height = 0 means size x size; the classic square
 *   outputs of the first API are still written {NST_OUT_UINT8_NHWC, size,
 *   dst, NULL} and {NST_OUT_FLOAT_NCHW, size, dst, norm} (those two names
 *   are designators, `.dtype = ...`, so the members after them follow
 *   positionally and the rest are zero: layout auto, no border).
 *
 * An nst_augmenter is per-worker scratch (filter coefficients, intermediate
 * rows), grow-only: no allocation in the steady state. Everything else here
 * is a pure function; any thread.
 */
#ifndef NST_AUGMENT_AUGMENT_H
#define NST_AUGMENT_AUGMENT_H

#include <stddef.h>
#include <stdint.h>

#include "common/rng.h"
#include "common/image.h"
#include "common/pixel_math.h"

/* --- geometry (crop.c) --- */
void nst_crop_random_resized(uint32_t width, uint32_t height, double scale_min, double scale_max,
                             double ratio_min, double ratio_max, nst_rng *rng, nst_window *out);
/* Resize(resize) of the shorter side, then CenterCrop((crop_h, crop_w)). */
void nst_crop_center_hw(uint32_t width, uint32_t height, uint32_t resize, uint32_t crop_w,
                        uint32_t crop_h, nst_window *out);
/* The square form: nst_crop_center_hw(width, height, resize, crop, crop). */
void nst_crop_center(uint32_t width, uint32_t height, uint32_t resize, uint32_t crop,
                     nst_window *out);

/* --- normalization tables (normalize.c) --- */
typedef struct nst_norm {
    /* f32[c * 256 + v] = fmaf(v, scale[c], bias[c]), i.e. (v / 255 -
     * mean[c]) / std[c] with scale[c] = (float)(1 / (255 std[c])) and
     * bias[c] = (float)(-mean[c] / std[c]) in one rounding, which is also
     * what a SIMD fused multiply-add gives. */
    float f32[3 * 256];
    float scale[3], bias[3];
    uint16_t f16[3 * 256];  /* f32 rounded to nearest even: IEEE binary16 */
    uint16_t bf16[3 * 256]; /* ... and to bfloat16                        */
} nst_norm;

void nst_norm_init(nst_norm *n, const double mean[3], const double stdv[3]);
/* float32 -> binary16 / bfloat16 bits, round to nearest even (NaN stays a
 * quiet NaN): the scalar reference of every SIMD conversion. */
uint16_t nst_f32_to_f16(float f);
uint16_t nst_f32_to_bf16(float f);

/* --- output description (see THE OUTPUT CONTRACT above) --- */
/* NST_OUT_U8, _F32, _F16, _BF16 and NST_OUT_AUTO, _NCHW, _NHWC: common/pixel_math.h. */
/* The classic outputs' initializers (see Shorthands above): designators. */
#define NST_OUT_UINT8_NHWC .dtype = NST_OUT_U8
#define NST_OUT_FLOAT_NCHW .dtype = NST_OUT_F32

typedef struct nst_output {
    int dtype;                          /* NST_OUT_U8, _F32, _F16, _BF16        */
    uint32_t size;                      /* shorthand: width = height = size     */
    void *dst;                          /* the item's place in the batch slot   */
    const nst_norm *norm;               /* float dtypes: from nst_norm_init()   */
    int layout;                         /* NST_OUT_AUTO, _NCHW, _NHWC           */
    uint32_t width, height;             /* the item, in pixels (0, 0: size)     */
    uint32_t pad_left, pad_top;         /* letterbox: where the window goes     */
    uint32_t inner_width, inner_height; /* ... its size; 0, 0: the whole item   */
} nst_output;

/* Bytes of the item `out` describes (0 if it overflows or the dtype is
 * unknown). */
size_t nst_output_bytes(const nst_output *out);

/* Check `in` and copy it to `o` with its shorthands resolved: width and
 * height set, layout NCHW or NHWC, the inner rectangle set. 0, or
 * E_INVALID with a message. */
int nst_out_resolve(const nst_output *in, nst_output *o);

/* Letterbox: place a src_w x src_h image in out's width x height (or size
 * x size) with its aspect kept and centred: the fitting side fills the
 * item, the other is round(side * scale) (half up, at least 1), pads are
 * floor(free / 2) on the left/top (the extra pixel of an odd remainder
 * goes right/bottom). Sets out's inner_width/inner_height/pad_left/pad_top.
 * Sides below 2^31. */
void nst_letterbox(uint32_t src_w, uint32_t src_h, nst_output *out);

/* --- the fused operation (resize.c) --- */
typedef struct nst_augmenter nst_augmenter;

int nst_augmenter_create(nst_augmenter **out);
void nst_augmenter_free(nst_augmenter *a);

/* Resample window `win` (in source-image pixel coordinates, i.e. of a
 * src_width x src_height image; mapped through img's x0/y0/scale onto
 * img->data) to the inner rectangle of `out`, mirror it when `flip`, fill
 * the border, and write the item to out->dst. Pixels of the window outside
 * img->data are clamped to its edge. E_NOMEM or E_INVALID (empty window,
 * bad output). */
int nst_augment(nst_augmenter *a, const nst_image *img, const nst_window *win, int flip,
                const nst_output *out);

/* No resampling: img->data as it is (mirrored when `flip`) into the inner
 * rectangle of `out`, which must be img->width x img->height; the border
 * as above. E_INVALID otherwise. */
int nst_augment_copy(nst_augmenter *a, const nst_image *img, int flip, const nst_output *out);

#endif
