/*
 * schedule.h — the delivery order of fixed data echoing ("Faster Neural
 * Network Training with Data Echoing", Choi et al., 2019).
 *
 * An epoch is still every item of the shard once *fresh*. Each item is used
 * uses(item) = floor(e) times, plus once more with probability e - floor(e)
 * drawn from (seed, epoch, item); so the mean number of uses is e. Fresh
 * items enter a shuffle pool of `cap` entries in the epoch's order; each
 * delivery draws a random entry (from (seed, epoch, draw number)), uses it
 * once, and removes it when its uses are spent, refilling from the fresh
 * stream. The sequence is therefore a pure function of (seed, epoch): the
 * same for any thread count, and replayable to resume mid-epoch.
 *
 * Each item in the pool is given a store id (0 .. store_cap-1) the first
 * time it is drawn after a start or a replay; that delivery produces the
 * item's data at the echo point and later ones reuse it. The caller frees
 * the id when the item's last use of the run is finished. The caller sizes
 * store_cap so ids never run out (pool cap + deliveries in flight).
 *
 * Not thread-safe: the pipeline calls it under its mutex.
 */
#ifndef NST_ECHO_SCHEDULE_H
#define NST_ECHO_SCHEDULE_H

#include <stdint.h>

#include "order/sampler.h"

#define NST_ECHO_NO_STORE UINT32_MAX

typedef struct nst_echo_use {
    uint64_t pos;      /* fresh position of the item in the epoch          */
    uint64_t index;    /* dataset item index                               */
    uint32_t copy;     /* 0 for the first use in the epoch, then 1, 2, ... */
    uint32_t uses;     /* total uses of this item in this epoch            */
    uint32_t store;    /* store id holding the item's echoed data           */
    uint8_t produce;   /* this delivery produces the data into `store`     */
    uint8_t last;      /* no later use of this item in this epoch           */
    uint8_t dup;       /* the same item was already delivered in this batch */
    uint64_t distance; /* copy > 0: deliveries since the previous use       */
} nst_echo_use;

typedef struct nst_echo_entry {
    uint64_t pos, index, last_dpos, last_batch;
    uint32_t uses, next_copy, store;
} nst_echo_entry;

typedef struct nst_echo_sched {
    double factor;
    uint64_t seed;
    uint32_t cap, n; /* pool capacity and occupancy               */
    nst_echo_entry *pool;
    uint32_t store_cap, nfree;
    uint32_t *free_ids; /* stack of free store ids                   */
    const nst_sampler *sampler;
    uint64_t epoch, fresh_next, dpos;
} nst_echo_sched;

int nst_echo_sched_init(nst_echo_sched *s, const nst_sampler *sampler, double factor, uint64_t seed,
                        uint32_t cap, uint32_t store_cap);
void nst_echo_sched_destroy(nst_echo_sched *s);

/* Uses of `item` in `epoch` (>= 1). */
uint32_t nst_echo_sched_uses(const nst_echo_sched *s, uint64_t epoch, uint64_t item);
/* Deliveries in `epoch`: the sum of uses over the shard (O(shard) unless
 * the factor is an integer). */
uint64_t nst_echo_sched_epoch_len(const nst_echo_sched *s, uint64_t epoch);

/* Begin `epoch` at delivery `dpos` (replaying the draws before it without
 * producing anything). Store ids still held by the previous pool are not
 * reclaimed here: the caller frees ids as deliveries finish. */
void nst_echo_sched_start(nst_echo_sched *s, uint64_t epoch, uint64_t dpos);
/* The next delivery, for batch `batch_seq`. 1: *out filled; 0: the epoch is
 * exhausted; -1: no store id is free (the caller waits for one). */
int nst_echo_sched_next(nst_echo_sched *s, uint64_t batch_seq, nst_echo_use *out);
/* Return a store id. */
void nst_echo_sched_free_id(nst_echo_sched *s, uint32_t id);
/* Forget every store id in use (after every delivery in flight drained). */
void nst_echo_sched_reset_ids(nst_echo_sched *s);

#endif
