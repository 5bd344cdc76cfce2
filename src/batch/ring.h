/*
 * ring.h — the local batch backend: the batch engine (engine.h) in process
 * memory, one consumer, a mutex and condition variables, and data echoing
 * layered on it (echo/: fixed item echoing's schedule and store, batch
 * echoing's shuffle buffer, adaptive echoing's pool).
 *
 * All slot memory is one arena allocated and touched at create: the steady
 * state allocates nothing. Slots are opened in any free slot and released
 * in any order, so a batch the consumer keeps only takes its own slot out.
 *
 * LOCKS  `mu` guards the engine, the echo schedule and every field below
 *   it. Conditions: `work` (workers: a slot was freed, a reset finished,
 *   stop), `ready` (consumer: a batch became ready, an echo batch was
 *   assembled, stop), `idle` (reset: in-flight items drained). Lock order:
 *   mu, then the echo store's or the adaptive pool's own mutex; never the
 *   reverse. stop() sets `stopped` and broadcasts all, so every wait has a
 *   shutdown exit.
 */
#ifndef NST_BATCH_RING_H
#define NST_BATCH_RING_H

#include <stdint.h>

#include "batch/batches.h"
#include "echo/schedule.h"

enum { NST_ECHO_OFF = 0, NST_ECHO_ITEMS, NST_ECHO_BATCHES, NST_ECHO_ADAPTIVE };

typedef struct nst_ring_params {
    uint32_t nslots, slot_items, batch_size;
    uint32_t flags; /* NST_ENGINE_FAIL, _FILL, _RESERVE, _KEEP         */
    const nst_recipe *recipe;
    nst_engine_plan plan; /* the delivery plan (item echoing included)  */
    nst_batches_sink sink;
    int echo;              /* NST_ECHO_*                                */
    nst_echo_sched *sched; /* NST_ECHO_ITEMS: the order of deliveries    */
    uint32_t echo_store;   /* NST_ECHO_ITEMS: store entries              */
    double echo_factor;    /* NST_ECHO_BATCHES                           */
    uint32_t echo_buffer;  /* NST_ECHO_BATCHES: batches in the buffer;
                                   NST_ECHO_ADAPTIVE: items in the pool       */
    uint32_t echo_max;     /* NST_ECHO_ADAPTIVE                          */
    uint64_t seed;
} nst_ring_params;

int nst_ring_create(nst_batches **out, const nst_ring_params *p);

/* What data echoing shares with the worker loop (NULL when off). */
struct nst_echo_store *nst_ring_estore(nst_batches *b);
struct nst_adaptive *nst_ring_adaptive(nst_batches *b);

/* The ring's memory (for info: e.g. to page-lock it). */
void nst_ring_memory(nst_batches *b, void **mem, size_t *bytes, uint32_t *nslots,
                     uint32_t *slot_items);

#endif
