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
 * bit multiply-adds. The finished uint8 RGB row goes to the output writer.
 */
#ifndef NST_AUGMENT_AUGMENT_IMPL_H
#define NST_AUGMENT_AUGMENT_IMPL_H

#include <stdint.h>

#include "augment/augment.h"

#define NST_AUG_BITS 14
#define NST_AUG_ONE (1 << NST_AUG_BITS)
#define NST_AUG_IBITS 7
/* First pass: int32 accumulator -> int16 intermediate. */
#define NST_AUG_SHIFT1 (NST_AUG_BITS - NST_AUG_IBITS)
#define NST_AUG_ROUND1 (1 << (NST_AUG_SHIFT1 - 1))
/* Second pass: int32 accumulator -> uint8 pixel. */
#define NST_AUG_SHIFT2 (NST_AUG_BITS + NST_AUG_IBITS)
#define NST_AUG_ROUND2 (1 << (NST_AUG_SHIFT2 - 1))

/* 0 if `out` describes a writable output, else E_INVALID with a message. */
int nst_out_check(const nst_output *out);

/* Write output row y (0 <= y < out->size) from `row`: out->size
 * interleaved RGB uint8 pixels. `simd`: 1 if the CPU has AVX2 and FMA and
 * they may be used (the augmenter decides once); the bytes are the same. */
void nst_out_row(const nst_output *out, uint32_t y, const uint8_t *row, int simd);

#endif
