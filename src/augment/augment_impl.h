/*
 * augment_impl.h — private to src/augment: the fixed-point convention shared
 * by the resampler (resize.c) and the output writers (normalize.c).
 *
 * Filter coefficients are non-negative int16 values that sum to exactly
 * NST_AUG_ONE = 1 << NST_AUG_BITS per output pixel. The first pass
 * accumulates coefficient * uint8 sample in int32 and keeps an int16
 * intermediate with NST_AUG_IBITS fractional bits (0 .. 255 << IBITS, which
 * fits int16); the second pass accumulates coefficient * intermediate in
 * int32 (at most 255 << (BITS + IBITS) < 2^31) and rounds to a uint8 pixel.
 * Coefficients fit int16 (ONE = 2^14), so SIMD code can use 16 x 16 -> 32
 * bit multiply-adds. The finished uint8 RGB row goes to the output writer
 * (placed in the item's row with its letterbox border first, if any).
 */
#ifndef NST_AUGMENT_AUGMENT_IMPL_H
#define NST_AUGMENT_AUGMENT_IMPL_H

#include <stdint.h>

#include "augment/augment.h"
#include "common/pixel_math.h"

/* NST_AUG_BITS, _ONE, _IBITS, _SHIFT1/2, _ROUND1/2, _MAX_SIDE: common/pixel_math.h. */

/* SIMD paths the output writers may use (the augmenter decides once from
 * the CPU): AVX2 + FMA, and F16C on top of them. The bytes are the same. */
#define NST_SIMD_FMA 1u
#define NST_SIMD_F16C 2u


/* Write item row y (0 <= y < o->height) of a resolved output from `row`:
 * o->width interleaved RGB uint8 pixels (the border included). */
void nst_out_row(const nst_output *o, uint32_t y, const uint8_t *row, unsigned simd);

#endif
