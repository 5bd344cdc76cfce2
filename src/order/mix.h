/*
 * mix.h — weighted mixing of several sources: which source, and which of
 * its items, fills position q of a mixed epoch.
 * Room: order/ (which item comes when).
 *
 * DESIGN
 *   The sources' items are concatenated: source s owns the item ids
 *   [first[s], first[s+1]). A mixed epoch has `len` slots (the sum of the
 *   sources' items unless set), cut by the weights into exact counts: source
 *   s owns draws[s] slots, [slot[s], slot[s+1]), draws[s] being w_s * len
 *   rounded by largest remainder (so |draws[s] / len - w_s| < 1 / len). The
 *   sampler permutes [0, len) as it would a dataset (nst_sampler with mix),
 *   so position p of epoch e lands on slot q = perm(seed, e, p): the
 *   source is a pure function of (seed, e, p), drawn without replacement
 *   from the epoch's exact counts.
 *
 *   Each source walks its own epochs: the slot q of source s in mixed epoch
 *   e is that source's draw k = e * draws[s] + (q - slot[s]) counted over
 *   the whole run, and draw k is item k % n_s of the source's own epoch
 *   k / n_s (its own permutation, keyed by (seed_s, k / n_s)). Over a mixed
 *   epoch the draws [e * draws[s], (e + 1) * draws[s]) are each used once,
 *   so a source is exhausted at its own rate (draws[s] / n_s of its epochs
 *   per mixed epoch), never repeats an item within one of its own epochs
 *   and never skips one, and nothing is counted or stored per item: the
 *   counters are products, O(1) at any (epoch, position), and resuming
 *   needs only (epoch, position).
 *
 * THREADS  An nst_mix is immutable after nst_mix_init; any thread may call
 *   the lookups. Pure functions, no allocation.
 */
#ifndef NST_ORDER_MIX_H
#define NST_ORDER_MIX_H

#include <stddef.h>
#include <stdint.h>

/* Sources of one mix at most. */
#define NST_MIX_MAX 64

typedef struct nst_mix {
    uint32_t n;                      /* sources                                */
    int shuffle;                     /* 0: each source in its own order        */
    uint64_t len;                    /* slots of a mixed epoch                 */
    uint64_t items[NST_MIX_MAX];     /* n_s: items of source s                 */
    uint64_t first[NST_MIX_MAX + 1]; /* source s: item ids [first[s], first[s+1]) */
    uint64_t draws[NST_MIX_MAX];     /* slots of source s per mixed epoch       */
    uint64_t slot[NST_MIX_MAX + 1];  /* source s: slots [slot[s], slot[s+1])    */
    uint64_t seeds[NST_MIX_MAX];     /* source s's own seed (nst_mix_seed)      */
    double weight[NST_MIX_MAX];      /* normalized: they sum to 1              */
} nst_mix;

/* A mix specification ("a:0.7,b:0.3", or one SOURCE:WEIGHT per line when
 * the text has a newline, so paths may hold commas): its n entries. The
 * weight is the number after an entry's last ':' (finite, > 0; weights
 * need not sum to 1). paths[i] point into `buf` (the spec's copy, `bufn`
 * bytes). E_OPTION naming the entry when one is malformed, when there is
 * none, or more than NST_MIX_MAX. */
int nst_mix_parse(const char *spec, char *buf, size_t bufn, const char **paths, double *weights,
                  uint32_t *n);

/* Counts of a mix of n sources with items[s] items and weights[s] (> 0)
 * over mixed epochs of `len` slots (0: the sum of the items). E_OPTION
 * when a source would get no slot (len too small for its weight, naming
 * it as names[s]) or len exceeds 2^48. */
int nst_mix_init(nst_mix *m, uint32_t n, const uint64_t *items, const double *weights,
                 const char *const *names, uint64_t len, uint64_t seed, int shuffle);

/* Source s's own seed: its order, and its recipe's draws. */
uint64_t nst_mix_seed(uint64_t seed, uint32_t s);

/* Slot q (< len) of mixed epoch `epoch`: its source, and the global item
 * id of the item it draws; *src_epoch (if not NULL) is the source's own
 * epoch that item belongs to. */
uint64_t nst_mix_item(const nst_mix *m, uint64_t epoch, uint64_t q, uint32_t *source,
                      uint64_t *src_epoch);

/* The source of global item id `item` (< first[n]) and its id there. */
uint32_t nst_mix_source_of(const nst_mix *m, uint64_t item, uint64_t *local);

/* Source s's draws before mixed epoch `epoch` (its counter: its own epoch
 * is the result / items[s]). Saturates at UINT64_MAX. */
uint64_t nst_mix_draws_before(const nst_mix *m, uint32_t s, uint64_t epoch);

#endif
