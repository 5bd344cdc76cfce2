/*
 * ring.h — the local batch backend: the batch engine (engine.h) in process
 * memory, one consumer, a mutex and condition variables, and a hook table
 * through which a layer over its batches (data echoing, echo/echo.c) joins
 * in without the ring knowing what it does.
 *
 * All slot memory is one arena allocated and touched at create: the steady
 * state allocates nothing. Slots are opened in any free slot and released
 * in any order, so a batch the consumer keeps only takes its own slot out.
 *
 * LOCKS  `mu` guards the engine and every field of the ring; every hook
 *   but `stop` runs with it held (as the engine's `seen` hook does), so a
 *   hook's own state needs no lock of its own against the ring. A hook may
 *   take its own locks after mu (never the reverse) and must not call the
 *   ring's operations. Conditions: `work` (workers: a slot was freed, a
 *   ticket finished, a reset finished, stop), `ready` (consumer: a batch
 *   became ready, nst_ring_wake, stop), `idle` (reset: in-flight items
 *   drained). stop() sets `stopped` and broadcasts all, so every wait has a
 *   shutdown exit.
 */
#ifndef NST_BATCH_RING_H
#define NST_BATCH_RING_H

#include <stdint.h>

#include "batch/batches.h"

/* What a lend/release/reset hook may use of the ring (mu held): its engine
 * and plan, and three of its own steps. */
typedef struct nst_ring_lender {
    nst_engine *q;
    const nst_engine_plan *plan;
    /* The engine's next batch in order (0 with *l, NST_ENGINE_WAIT,
     * EPOCH_END, DONE, E_*), its accounting and bad items reported. */
    int (*lend)(struct nst_ring_lender *L, nst_engine_lent *l);
    /* `out` describes slot's batch. */
    void (*describe)(struct nst_ring_lender *L, nostall_batch *out, uint32_t slot, uint32_t count,
                     uint64_t epoch, uint64_t position, uint64_t seq);
    /* Accounting (NST_IO_COUNT_ values) to the loader's sink. */
    void (*count)(struct nst_ring_lender *L, const uint64_t *io);
} nst_ring_lender;

/* The hooks: every member optional (NULL: the ring's own behaviour, noted
 * at each). With no hooks a take is one engine call and a lend one more. */
typedef struct nst_ring_hooks {
    void *ctx;
    /* The take-veto: the engine offers t->bt (nothing taken yet). Return 1
     * to take it, 0 to decline (nothing may have changed: the worker waits
     * for a ticket to finish). NULL: take. */
    int (*take)(void *ctx, nst_ticket *t);
    /* Taken and placed: set t->io, what the ticket adds to its batch's
     * accounting (dropped again if the item fails). NULL: one fresh use. */
    void (*taken)(void *ctx, nst_ticket *t);
    /* A ticket of the current generation finished, before the engine is
     * told (a stale one is not reported). */
    void (*done)(void *ctx, nst_ticket *t);
    /* The engine's `seen`: add to the accounting `io` of slot s's batch,
     * which the consumer reached. */
    void (*seen)(void *ctx, const nst_engine_slot *s, uint64_t *io);
    /* The lend hook: the consumer's next batch instead of the engine's
     * (0 with *out, NST_ENGINE_WAIT, EPOCH_END, DONE, E_*); a hook that
     * keeps slots itself (keeps_slots) is not refused when all are lent. */
    int (*lend)(void *ctx, nst_ring_lender *L, nostall_batch *out);
    int keeps_slots;
    /* Nothing is ready: 1 with *out lends a batch of the hook's own (the
     * consumer is at `epoch`, `position`), 0 waits. */
    int (*spare)(void *ctx, nst_ring_lender *L, nostall_batch *out, uint64_t epoch,
                 uint64_t position);
    /* The consumer releases b: 1 if the hook took it (done), else what the
     * engine's release says (1 a slot was freed, 0, E_*). NULL: engine. */
    int (*release)(void *ctx, nst_ring_lender *L, const nostall_batch *b, int *taken);
    /* A reset begins (before in-flight tickets drain: wake what they may
     * wait for). */
    void (*resetting)(void *ctx);
    /* With nothing in flight, before the engine restarts at *at: `cur` is
     * the consumer's cursor asked for; the hook may move *at. */
    void (*reset)(void *ctx, nst_ring_lender *L, const nst_engine_cursor *cur,
                  nst_engine_cursor *at);
    /* The consumer's cursor, after the engine's. */
    void (*cursor)(void *ctx, nst_engine_cursor *c);
    /* Stop: wake everything the hook's waits sleep on (mu NOT held). */
    void (*stop)(void *ctx);
    /* The ring is being freed, its workers joined (mu NOT held; the hook
     * may still call nst_ring_wake until it returns): free ctx. The ring
     * owns ctx from nst_ring_create on, even if that fails. */
    void (*free)(void *ctx);
} nst_ring_hooks;

typedef struct nst_ring_params {
    uint32_t nslots, slot_items, batch_size;
    uint32_t touch_slots; /* slots touched at create (0: all); the rest are
                             zero pages faulted in when first used          */
    uint32_t flags;       /* NST_ENGINE_FAIL, _FILL, _RESERVE, _KEEP         */
    const nst_recipe *recipe;
    nst_engine_plan plan; /* the delivery plan (item echoing included)  */
    nst_batches_sink sink;
    nst_ring_hooks hooks;
} nst_ring_params;

int nst_ring_create(nst_batches **out, const nst_ring_params *p);

/* Wake the consumer (any thread, no lock of the caller's held): a hook's
 * spare batch may be ready. ctx: the ring (an nst_batches *). */
void nst_ring_wake(void *ctx);

/* The ring's memory (for info: e.g. to page-lock it). */
void nst_ring_memory(nst_batches *b, void **mem, size_t *bytes, uint32_t *nslots,
                     uint32_t *slot_items);

#endif
