/*
 * tune.h — autotune's decision (the loader's `autotune` option), as the
 * loader asks for it; implemented beside the analyzer's model
 * (analyze/tune.c), so the loader's room names no header of analyze/
 * (which includes the loader's dataset.h). From one
 * window of live measurements (the counters the loader already keeps, as
 * deltas), the budgets and the setting in force, the setting to use next
 * and why. A pure function of its arguments and of the state it is handed
 * (which only it writes); no clock, no lock, no allocation, so it is unit
 * tested on fixed inputs (tests/test_tune.c) and the loader calls it on
 * the consumer thread after a delivered batch (src/loader_tune.c).
 *
 * The choice uses the analyzer's model (model.c, nst_an_predict) on the
 * window's measurements: CPU per item (the workers' busy time, less what
 * they waited for storage), each read's wait and the step time give the
 * predicted stall of any (active workers, reads in flight), and the
 * cheapest one -- fewest workers, then fewest reads in flight -- whose
 * stall stays under the target (with 15% headroom on the step) is chosen.
 * Storage whose rate did not grow when reads were added is remembered as
 * a ceiling (a device bound for the model). batches_ahead rises by one
 * when the measured stall exceeds twice the target while the model says
 * the means keep up (bursts), up to what memory allows; it never falls
 * (the ring's memory is reserved at create). Hysteresis: after a change
 * one window is skipped (it mixes two settings); fewer workers or reads
 * need two windows in a row that agree and a measured stall under the
 * target; more are taken at once.
 *
 * The MinIO cache's admission cap (budget.cache_max > 0): the smallest cap
 * that lets the fewest workers keep the stall under the target once the
 * cache is filled (hit rate = cap / the shard's bytes: a fill-once cache
 * under a fresh random order), chosen among eighths of the shard (its
 * bytes estimated from the mean read, with a tenth more); the workers and reads in flight are chosen for
 * the hit rate the window measured (the cache may still be filling). The
 * cap never goes below what the cache holds (lowering it only stops
 * admitting); it falls after two windows that agree, when the stall is
 * under the target or the model says the cache makes no difference.
 *
 * The echo factor (budget.echo_max > 0, echo=adaptive only: a fixed
 * echo_factor is part of the bytes delivered and is never tuned): the
 * workers are chosen for fresh data alone; the cap on uses per item is
 * the smallest whole number (1: no echoing) whose predicted stall at the
 * chosen setting is under the target, at most echo_max. It rises at once
 * and falls after two windows that agree.
 */
#ifndef NST_TUNE_H
#define NST_TUNE_H

#include <stddef.h>
#include <stdint.h>

#include "nostall.h" /* NOSTALL_TUNE_* */

/* What the setting may be. */
typedef struct nst_tune_budget {
    double cpus;          /* the CPU budget (cpu_budget, or cgroup/affinity) */
    uint32_t max_workers; /* workers started                                */
    uint32_t max_ahead;   /* batches_ahead the ring's memory allows (>= 1)  */
    uint32_t max_depth;   /* reads in flight per worker at most; 0: io_depth
                             is fixed (not tuned)                           */
    double target;        /* stall allowed, as a fraction of the step       */
    double cache_max;     /* bytes the MinIO cache may hold (its budget);
                             0: no cache, not tuned                         */
    double shard_items;   /* fresh items per epoch (the cache's hit rate is
                             its bytes over theirs)                         */
    uint32_t echo_max;    /* adaptive echoing's most uses per item; 0: not
                             tuned (no echoing, or a fixed factor)          */
} nst_tune_budget;

typedef struct nst_tune_setting {
    uint32_t workers, ahead, depth; /* depth 0: not tuned */
    uint32_t echo;                  /* uses per item at most; 0: not tuned */
    uint64_t cache;                 /* the cache's admission cap, bytes; 0
                                       with no cache                         */
} nst_tune_setting;

/* One window: deltas of the loader's counters. */
typedef struct nst_tune_meas {
    double batches, items;
    double wall_ns;           /* the window's length                          */
    double stall_ns, step_ns; /* consumer: inside next / between batches      */
    double fetch_ns, wait_ns; /* workers: fetching (storage wait included) /
                                 waiting for storage                          */
    double decode_ns, augment_ns;
    double reads, bytes;  /* storage reads and their bytes                      */
    double fetched, hits; /* items the workers fetched / of them, cache hits */
    double echoed;        /* delivered items that were repeats (echoing)     */
    double cache_held;    /* bytes the cache holds now (not a delta)         */
} nst_tune_meas;

typedef struct nst_tune_state {
    nst_tune_setting cur;
    uint32_t settle;                  /* windows still to skip after a change          */
    uint32_t down_votes;              /* windows in a row that proposed less           */
    int raised_for_fetch;             /* the last change added reads or workers for
                              storage: the next window checks it helped     */
    double rate_before;               /* items/s in the window before that change       */
    double fetch_ceiling;             /* storage reads/s at most (0: none known)        */
    double read_wait_ns;              /* storage wait per read, the last window with
                             reads (a cache that serves all has none)      */
    double read_bytes;                /* bytes per read, likewise                       */
    uint32_t cache_votes, echo_votes; /* windows in a row that proposed less */
} nst_tune_state;

#define NST_TUNE_WHY 320 /* what it chose and why, in words: its room */

typedef struct nst_tune_out {
    nst_tune_setting set;
    int reason;          /* NOSTALL_TUNE_*                                 */
    double cpu_returned; /* CPUs left unused by parked workers             */
    double pred_stall;   /* the model's stall at `set`, fraction of step   */
    double meas_stall;   /* the window's stall, fraction of step           */
    double hit_now;      /* the window's cache hit rate                    */
    double hit_filled;   /* the model's hit rate at set.cache, once filled */
    char why[NST_TUNE_WHY];
} nst_tune_out;

void nst_tune_init(nst_tune_state *st, const nst_tune_setting *start);

/* The setting for the next window. Returns 1 when it differs from st->cur
 * (st->cur is then the new one), 0 when not. */
int nst_tune_decide(nst_tune_state *st, const nst_tune_budget *b, const nst_tune_meas *m,
                    nst_tune_out *out);

/* The most workers the budget lets be active: ceil(cpus) (at least 1),
 * at most max_workers. */
uint32_t nst_tune_max_active(const nst_tune_budget *b);

#endif
