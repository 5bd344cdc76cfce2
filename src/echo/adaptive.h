/*
 * adaptive.h — adaptive data echoing: repeats only when the training loop
 * would otherwise wait, so the achieved factor follows R (upstream time /
 * step time) without being told it.
 *
 * Workers copy each fresh item into a pool of `pool` items (entries reused
 * round-robin once nobody reads them). An assembler thread keeps
 * NST_ADAPTIVE_SLOTS echo batches ready: each of batch_size random pool
 * items used fewer than echo_max times, copied into an echo slot. When no
 * fresh batch is ready, the ring lends a ready echo batch at once, so the
 * copying never sits on the consumer's critical path. Fresh data always
 * wins. Not deterministic (it depends on timing), by design.
 *
 * LOCKS  The pool's own mutex guards entry and slot states; item bytes are
 *   copied without it while an entry is being written (one worker) or read
 *   (the assembler: readers > 0). reserve, lend and release are called by
 *   echo.c's ring hooks with the ring's mutex held (order: ring mutex, then
 *   pool mutex). The assembler calls
 *   the ring's `wake` with no lock of its own held.
 *
 * SCHEDULING  The assembler (thread name NST_ADAPTIVE_THREAD) runs under
 *   SCHED_BATCH (Linux; best effort) while it works ahead. Releasing an
 *   echo batch wakes it from the consumer's thread; as a normal thread it
 *   preempted the consumer there (the scheduler favours a thread that
 *   slept), and the consumer waited out its copy of a whole batch inside
 *   nostall_loader_release: ~0.4 ms of every echo batch at crop 224 float
 *   (1.3% of R at R = 4 on a quiet machine, 2.5-3% at load 10; docs/echoing.md).
 *   SCHED_BATCH keeps its fair share of CPU but never preempts on wakeup:
 *   it copies while the consumer trains. When the consumer is short of
 *   echo batches (a lend found none ready: the copy is what it waits for),
 *   the preemption is what it wants, and the assembler runs under the
 *   normal policy until NST_ADAPTIVE_URGENT batches were assembled without
 *   another such miss (nst_adaptive_urgency).
 */
#ifndef NST_ECHO_ADAPTIVE_H
#define NST_ECHO_ADAPTIVE_H

#include <stdint.h>

#include "nostall.h"
#include "recipe/recipe.h"

#define NST_ADAPTIVE_SLOTS 2
#define NST_ADAPTIVE_SEQ (UINT64_C(1) << 63) /* sequence numbers of echo batches */
#define NST_ADAPTIVE_THREAD "nostall-echo"   /* the assembler thread's name      */
#define NST_ADAPTIVE_URGENT 16               /* batches under the normal policy after a miss */

enum { NST_ADAPTIVE_MISSED, NST_ADAPTIVE_ASSEMBLED };

typedef struct nst_adaptive nst_adaptive;

typedef struct nst_adaptive_params {
    uint32_t pool, batch_size, echo_max;
    uint64_t seed;
    const nst_recipe *recipe;
    void (*wake)(void *ctx); /* an echo batch became ready */
    void *wake_ctx;
} nst_adaptive_params;

/* The assembler's urgency after an event: MISSED (a lend found no echo
 * batch ready) sets NST_ADAPTIVE_URGENT, ASSEMBLED counts it down to 0.
 * The assembler runs under SCHED_BATCH only at 0 (SCHEDULING). */
uint32_t nst_adaptive_urgency(uint32_t urgency, int event);

/* Allocates the pool and the echo slots and starts the assembler thread. */
int nst_adaptive_create(nst_adaptive **out, const nst_adaptive_params *p);
/* Stops and joins the assembler, frees. NULL: no-op. */
void nst_adaptive_free(nst_adaptive *a);
void nst_adaptive_stop(nst_adaptive *a);

/* Workers: a pool entry for the fresh item about to be prepared (or
 * UINT32_MAX: none free), then its outcome: ok 1 copies the item's fields
 * (src[f] per field) and dataset index into the entry. */
uint32_t nst_adaptive_reserve(nst_adaptive *a);
void nst_adaptive_put(nst_adaptive *a, uint32_t entry, uint8_t *const *src, uint64_t index, int ok);

/* The most uses of any item from now on (autotune's echo factor; at least
 * 1, where 1 lends no echo batch; echo batches already assembled stay).
 * Any thread. */
void nst_adaptive_set_max(nst_adaptive *a, uint32_t echo_max);

/* Consumer: lend a ready echo batch (1, *out filled with `epoch` and
 * `position` as the consumer's) or 0 (none ready: the assembler is told). */
int nst_adaptive_lend(nst_adaptive *a, nostall_batch *out, uint64_t epoch, uint64_t position);
/* 1 if `b` was an echo batch (now released), 0 if not one, E_INVALID if an
 * echo batch not lent. */
int nst_adaptive_release(nst_adaptive *a, const nostall_batch *b);

#endif
