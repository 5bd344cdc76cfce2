/*
 * sampler.h — which dataset item is the pos-th item of this rank's epoch.
 *
 * Pure functions, no allocation, O(1) per lookup: the per-epoch permutation is
 * a keyed bijection on [0, n) (a Feistel network over the next power of two,
 * with cycle-walking), keyed by (seed, epoch). So any (epoch, position) can be
 * looked up directly: resuming mid-epoch and preparing batches of several
 * epochs at once need no stored permutation.
 *
 * Sharding (as torch's DistributedSampler, strided): the epoch's permuted
 * sequence p[0..n) is cut to a length T; rank r gets p[r], p[r+W], p[r+2W]...
 *   drop_last = 1: T = floor(n / W) * W; every shard has T / W items; shards
 *                  are disjoint; the n - T items left out change every epoch.
 *   drop_last = 0: T = ceil(n / W) * W; the sequence wraps around (position
 *                  j >= n reads p[j mod n]), so every item appears and the
 *                  W * ceil(n/W) - n padded positions repeat items.
 * shuffle = 0: p is the identity (dataset order).
 */
#ifndef NST_SOURCE_SAMPLER_H
#define NST_SOURCE_SAMPLER_H

#include <stdint.h>

typedef struct nst_sampler {
    uint64_t n;           /* dataset items                          */
    uint64_t seed;
    uint32_t rank, world; /* 0 <= rank < world                      */
    int shuffle, drop_last;
    uint64_t per_rank;    /* items of one rank per epoch            */
} nst_sampler;

/* E_INVALID (with a message) when n == 0, world == 0, rank >= world, or
 * drop_last leaves no item for a rank (n < world). */
int nst_sampler_init(nst_sampler *s, uint64_t n, uint64_t seed, uint32_t rank,
                     uint32_t world, int shuffle, int drop_last);

/* Dataset index of the pos-th item (pos < per_rank) of this rank in `epoch`. */
uint64_t nst_sampler_item(const nst_sampler *s, uint64_t epoch, uint64_t pos);

/* The keyed permutation itself: image of i (< n) under the permutation of
 * (seed, epoch). A bijection on [0, n). */
uint64_t nst_permute(uint64_t n, uint64_t seed, uint64_t epoch, uint64_t i);

#endif
