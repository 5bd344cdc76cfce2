/*
 * augment_impl.h — private to src/augment: the fixed-point convention shared
 * by the resampler (resize.c) and the output writers (normalize.c).
 *
 * Filter coefficients are non-negative integers that sum to exactly
 * 1 << NST_AUG_BITS. An accumulator starts at NST_AUG_HALF (for rounding) and
 * adds coefficient * uint8 sample; the resulting pixel is acc >> NST_AUG_BITS
 * (within [0, 255] by construction; the output writer clamps anyway). Rows of accumulators are padded to a multiple of
 * NST_AUG_LANES elements so the inner loops have a fixed trip count and
 * vectorize at -O2.
 */
#ifndef NST_AUGMENT_AUGMENT_IMPL_H
#define NST_AUGMENT_AUGMENT_IMPL_H

#include <stdint.h>

#include "augment/augment.h"

#define NST_AUG_BITS 22
#define NST_AUG_ONE (1 << NST_AUG_BITS)
#define NST_AUG_HALF (1 << (NST_AUG_BITS - 1))
#define NST_AUG_LANES 16

/* 0 if `out` describes a writable output, else E_INVALID with a message. */
int nst_out_check(const nst_output *out);

/* Write output row y (0 <= y < out->size) from `acc`: out->size * 3
 * interleaved RGB fixed-point accumulators. */
void nst_out_row(const nst_output *out, uint32_t y, const int32_t *acc);

#endif
