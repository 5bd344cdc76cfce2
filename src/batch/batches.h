/*
 * batches.h — what the loader asks of a batch backend, and what both
 * backends share. The local ring (batch/ring.c) keeps the engine in process
 * memory, with a mutex and condition variables, and hooks through which
 * data echoing (echo/) layers on it; a coordinated group (coord/group.c) keeps it in a shared-memory
 * segment, with a robust process-shared mutex, futex waits and membership.
 * The loader (loader.c, worker.c) calls only these operations: it never
 * knows which backend it has.
 *
 * THREADS  take/done/stale: worker threads. next: the consumer thread.
 *   release: any thread. reset: the consumer thread, with nothing lent
 *   needed. stop: any thread, any time. free: once, after the workers are
 *   joined.
 */
#ifndef NST_BATCH_BATCHES_H
#define NST_BATCH_BATCHES_H

#include <stdint.h>

#include "batch/engine.h"
#include "nostall.h"
#include "recipe/recipe.h"

/* An item ticket as a worker holds it. */
typedef struct nst_ticket {
    nst_engine_ticket bt;
    uint64_t epoch, position; /* of the item in its epoch's order            */
    uint64_t index;           /* dataset item: set at take if `indexed`, else
                                 mapped by the worker from (epoch, position)  */
    uint8_t *dst[NST_FIELDS_MAX];
    uint64_t *index_dst;
    uint64_t io[NST_ENGINE_IO]; /* accounting added to the batch at done       */
    uint64_t gen;               /* backend's reset generation at take          */
    uint8_t indexed;            /* `index` was set at take                     */
    uint8_t nofetch;            /* the item is made without fetching its bytes */
    /* A record that only a ring hook's layer reads and writes (data
     * echoing's, echo/echo.c): opaque here. */
    uint64_t layer[4];
} nst_ticket;

/* What a backend tells the loader about delivered batches. */
typedef struct nst_batches_sink {
    void *ctx;
    /* a bad item of a delivered (or passed) batch */
    void (*skip)(void *ctx, uint64_t index, int status, const char *msg);
    /* the accounting of a delivered (or passed) batch, NST_IO_COUNT_ values */
    void (*count)(void *ctx, const uint64_t *io);
} nst_batches_sink;

typedef struct nst_batches nst_batches;

typedef struct nst_batches_ops {
    /* The next item to prepare: 0 with *t; NOSTALL_TIMEOUT (none within
     * timeout_ms; 0: do not wait); NOSTALL_DONE (nothing will ever come:
     * a group that produced every batch); E_STOPPED. */
    int (*take)(nst_batches *b, nst_ticket *t, uint32_t timeout_ms);
    /* Its batch was discarded meanwhile (set_state): do not prepare it. */
    int (*stale)(nst_batches *b, const nst_ticket *t);
    void (*done)(nst_batches *b, nst_ticket *t, int status, const char *msg);
    /* The consumer's next batch: 0 with *out; NOSTALL_EPOCH_END;
     * NOSTALL_DONE; NOSTALL_TIMEOUT (deadline_ns reached; 0: none); E_*. */
    int (*next)(nst_batches *b, nostall_batch *out, uint64_t deadline_ns, const char *fn);
    int (*release)(nst_batches *b, const nostall_batch *batch);
    /* Restart at the cursor c (engine.h: the top-up's items of the next
     * batch delivered, batches owed, bad items so far): drain what is in
     * flight, call quiet(ctx) with no worker between take and done (the
     * loader changes its sampler there), then restart. E_STATE where
     * positions are not the caller's (a group member). */
    int (*reset)(nst_batches *b, const nst_engine_cursor *c, void (*quiet)(void *ctx), void *ctx,
                 const char *fn);
    /* The consumer's cursor: its next batch. */
    void (*cursor)(nst_batches *b, nst_engine_cursor *c);
    void (*stop)(nst_batches *b);
    void (*free)(nst_batches *b);
    /* Optional (NULL: none). The memory holding the batches, for info;
     * coordinated-prep counters, for stats. */
    void (*memory)(nst_batches *b, void **mem, size_t *bytes, uint32_t *nslots,
                   uint32_t *slot_items);
    void (*coord_stats)(nst_batches *b, nostall_stats *s);
    /* Optional (NULL: not supported). Use at most `slots` of the slots at
     * once (0: all): autotune's batches_ahead in a ring sized for its most
     * (wakes the workers when it grows). */
    void (*limit)(nst_batches *b, uint32_t slots);
} nst_batches_ops;

struct nst_batches {
    const nst_batches_ops *ops;
};


/* Point a ticket's destinations at its item's place in slot data. */
void nst_ticket_place(nst_ticket *t, nst_engine *q, uint32_t nfields);

/* Report the bad items of slot `slot` (its first `count` planned items, by
 * original index) to the sink. */
void nst_batches_report_skips(nst_engine *q, uint32_t slot, const nst_batches_sink *sink);

#endif
