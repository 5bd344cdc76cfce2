/*
 * permutation.h — the keyed permutation of an epoch (permutation.c): pure,
 * O(1) per lookup, nothing stored. Room: order/. The lowest header of the
 * room: the sampler and the mix both use it, and neither is needed for it.
 */
#ifndef NST_ORDER_PERMUTATION_H
#define NST_ORDER_PERMUTATION_H

#include <stdint.h>

/* The keyed permutation itself: image of i (< n) under the permutation of
 * (seed, epoch). A bijection on [0, n). */
uint64_t nst_permute(uint64_t n, uint64_t seed, uint64_t epoch, uint64_t i);

#endif
