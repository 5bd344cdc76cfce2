/*
 * sampler.h — which dataset item is the pos-th item of this rank's epoch.
 * Room: order/ (which item comes when).
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
 *
 * A mix (order/mix.h; `mix` set after nst_sampler_init, n being the mixed
 * epoch's slots): p[j] is a slot, and the item is the one the mix's slot
 * draws; everything above (sharding, padding, resumed epochs) is unchanged.
 *
 * A resumed epoch (nst_sampler_resume: a state saved by a job of another
 * world size): epoch e begins at global position `offset` of its sequence,
 * the first `offset` items having been consumed by the old job's ranks. The
 * rest, p[offset..n), is sharded as above (R = n - offset items; cut to a
 * multiple of W, or wrapped within the rest), so no item of the epoch is
 * repeated or lost whatever the old and new world sizes. With a band
 * (nst_sampler_resume_band: the old ranks were not in step, bad items
 * having moved some further), the rest is the band's positions (sorted,
 * those below `offset` not yet consumed) followed by p[offset..n).
 */
#ifndef NST_ORDER_SAMPLER_H
#define NST_ORDER_SAMPLER_H

#include <stdint.h>

#include "order/permutation.h" /* nst_permute, the epoch's permutation */

typedef struct nst_sampler {
    uint64_t n; /* dataset items                          */
    uint64_t seed;
    uint32_t rank, world; /* 0 <= rank < world                      */
    int shuffle, drop_last;
    uint64_t per_rank; /* items of one rank per epoch            */
    /* a resumed epoch (see above); res_on = 0: none */
    int res_on;
    uint64_t res_epoch, res_offset, res_len;
    const uint64_t *res_band; /* not owned; res_band_n positions < res_offset */
    uint64_t res_band_n;
    /* weighted mixing: slots of a mixed epoch to items (NULL: none; not
     * owned, set after init) */
    const struct nst_mix *mix;
} nst_sampler;

/* E_INVALID (with a message) when n == 0, world == 0, rank >= world, or
 * drop_last leaves no item for a rank (n < world). */
int nst_sampler_init(nst_sampler *s, uint64_t n, uint64_t seed, uint32_t rank, uint32_t world,
                     int shuffle, int drop_last);

/* Dataset index of the pos-th item (pos < nst_sampler_len) of this rank in
 * `epoch`. */
uint64_t nst_sampler_item(const nst_sampler *s, uint64_t epoch, uint64_t pos);
/* The same, and the epoch whose draws the item gets (*item_epoch): `epoch`,
 * or with a mix the item's source's own epoch (so a source drawn more than
 * once per mixed epoch gets fresh augmentation each time). */
uint64_t nst_sampler_item_epoch(const nst_sampler *s, uint64_t epoch, uint64_t pos,
                                uint64_t *item_epoch);

/* Items of this rank in `epoch`: per_rank, or less in a resumed epoch. */
uint64_t nst_sampler_len(const nst_sampler *s, uint64_t epoch);

/* Epoch `epoch` begins at global position `offset` (<= the epoch's sequence
 * length; offset 0 clears). Replaces an earlier resumed epoch. */
void nst_sampler_resume(nst_sampler *s, uint64_t epoch, uint64_t offset);

/* The same with a band: the rest is band[0..band_n) (sorted, each <
 * offset <= n; not copied: it must outlive the resumed epoch), then
 * positions offset..n-1. */
void nst_sampler_resume_band(nst_sampler *s, uint64_t epoch, const uint64_t *band, uint64_t band_n,
                             uint64_t offset);

/* Position in [0, n) of the epoch's global sequence (before the
 * permutation) of the pos-th item of this rank, or UINT64_MAX for a
 * padding position (drop_last=0: a repeat of an item of the sequence). */
uint64_t nst_sampler_global(const nst_sampler *s, uint64_t epoch, uint64_t pos);

/* Global sequence length of an epoch for `world` ranks (T above). */
uint64_t nst_sampler_total(const nst_sampler *s, uint32_t world);

#endif
