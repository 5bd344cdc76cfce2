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
} nst_tune_budget;

typedef struct nst_tune_setting {
    uint32_t workers, ahead, depth; /* depth 0: not tuned */
} nst_tune_setting;

/* One window: deltas of the loader's counters. */
typedef struct nst_tune_meas {
    double batches, items;
    double wall_ns;           /* the window's length                          */
    double stall_ns, step_ns; /* consumer: inside next / between batches      */
    double fetch_ns, wait_ns; /* workers: fetching (storage wait included) /
                                 waiting for storage                          */
    double decode_ns, augment_ns;
    double reads, bytes; /* storage reads and their bytes                      */
} nst_tune_meas;

typedef struct nst_tune_state {
    nst_tune_setting cur;
    uint32_t settle;      /* windows still to skip after a change          */
    uint32_t down_votes;  /* windows in a row that proposed less           */
    int raised_for_fetch; /* the last change added reads or workers for
                              storage: the next window checks it helped     */
    double rate_before;   /* items/s in the window before that change       */
    double fetch_ceiling; /* items/s storage gave at most (0: none known)   */
} nst_tune_state;

typedef struct nst_tune_out {
    nst_tune_setting set;
    int reason;          /* NOSTALL_TUNE_*                                 */
    double cpu_returned; /* CPUs left unused by parked workers             */
    double pred_stall;   /* the model's stall at `set`, fraction of step   */
    double meas_stall;   /* the window's stall, fraction of step           */
    char why[192];       /* what it chose and why, in words                */
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
