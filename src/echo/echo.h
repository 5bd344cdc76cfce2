/*
 * echo.h — data echoing's one front: the loader creates an nst_echo for
 * the mode it chose, hands its hooks to the local ring (batch/ring.h) and
 * lets each worker make every item through nst_echo_item. Behind it: fixed
 * item echoing's schedule and store (schedule.c, store.c), batch echoing's
 * shuffle buffer (batch_echo.c), adaptive echoing's pool (adaptive.c).
 *
 * The ring knows only its hook table; the record a ticket carries for
 * echoing (nst_ticket.layer) is read and written only here.
 *
 * LOCKS  The hooks run under the ring's mutex (ring.h), which therefore
 *   guards the schedule, the shuffle buffer and every field of nst_echo;
 *   the item store's and the adaptive pool's own mutexes come after it.
 *   nst_echo_item runs in a worker with no lock held (the store's wait and
 *   the pool's put take their own).
 */
#ifndef NST_ECHO_ECHO_H
#define NST_ECHO_ECHO_H

#include <stdint.h>

#include "batch/ring.h"
#include "common/config.h"
#include "recipe/recipe.h"
#include "source/fetch.h"
#include "order/sampler.h"

enum { NST_ECHO_OFF = 0, NST_ECHO_ITEMS, NST_ECHO_BATCHES, NST_ECHO_ADAPTIVE };

typedef struct nst_echo nst_echo;

typedef struct nst_echo_params {
    int mode;  /* NST_ECHO_*                                        */
    int point; /* NOSTALL_ECHO_POINT_* (items)                      */
    const nst_recipe *recipe;
    const nst_sampler *sampler; /* items: the fresh order             */
    double factor;              /* items, batches                     */
    uint64_t seed;
    uint32_t buffer;     /* items: the schedule's pool; batches: batches in
                            the shuffle buffer; adaptive: items in the pool */
    uint32_t store;      /* items: store entries                     */
    uint32_t echo_max;   /* adaptive                                  */
    uint32_t batch_size; /* batches, adaptive                         */
    uint32_t nslots;     /* batches: the ring's slots                 */
} nst_echo_params;

/* The mode the options ask for (NST_ECHO_*; *point: NOSTALL_ECHO_POINT_*
 * with a fixed factor, else 0). */
int nst_echo_mode(const nostall_config *c, int *point);
/* Options that cannot go with echoing: E_OPTION naming them, or 0. */
int nst_echo_validate(const nostall_config *c, const char *fn);

/* What echoing adds to the ring's plan for an epoch of `per` fresh items:
 * the most deliveries an epoch has, ring slots of its own (batch echoing's
 * shuffle buffer), memory of its own (the adaptive pool), and how to name
 * them in a message ("" when none). */
typedef struct nst_echo_plan {
    uint64_t most;
    uint32_t slots;
    uint64_t bytes;
    const char *slots_what, *bytes_what;
} nst_echo_plan;
nst_echo_plan nst_echo_plan_for(const nostall_config *c, uint64_t per, size_t item_bytes);
/* Uses of the batch at `position` of `epoch` (batch echoing; else 1). */
uint32_t nst_echo_batch_uses(const nostall_config *c, uint64_t epoch, uint64_t position);

/* The local ring (rp: its plan, hooks set here) with echoing as the
 * options ask layered on it: *e is NULL when off, else owned by the ring
 * (freed with it). `sampler`: the fresh order, kept. */
int nst_echo_ring_create(nst_batches **ring, nst_echo **e, nst_ring_params *rp,
                         const nostall_config *c, const nst_sampler *sampler, const char *fn);

/* Everything but the adaptive pool, which nst_echo_attach starts. */
int nst_echo_create(nst_echo **out, const nst_echo_params *p);
/* The ring's hooks for this echo (ctx: e). */
nst_ring_hooks nst_echo_hooks(nst_echo *e);
/* Adaptive echoing: start the pool, whose assembler wakes the ring. */
int nst_echo_attach(nst_echo *e, nst_batches *ring);
/* After the ring is stopped and the workers joined (the ring's free hook).
 * NULL: no-op. */
void nst_echo_free(nst_echo *e);

/* Adaptive echoing: the most uses of any item from now on (autotune; see
 * nst_adaptive_set_max). Other modes, or NULL: no-op. Any thread. */
void nst_echo_set_max(nst_echo *e, uint32_t echo_max);

/* Item echoing: deliveries in `epoch` (the sum of its items' uses;
 * memoized for the last four epochs, under the echo's own mutex). */
uint64_t nst_echo_epoch_len(nst_echo *e, uint64_t epoch);
/* The sampler's shard changed (an elastic resume's band): forget the
 * memoized lengths. NULL: no-op. */
void nst_echo_forget_lengths(nst_echo *e);

/* gpu_output=device: field `field` of every item (the image) lies in
 * device memory (c->dst[field] is a device address). Fixed item echoing
 * at echo_point=augment then keeps each finished image in a device store
 * of its own (the store's entries x the field's bytes, allocated here
 * through `alloc`, owned by ctx) and copies it device to device: `copy`
 * queues a copy, `copied` waits for the copies queued (any thread). The
 * other points need nothing (fetch: the encoded bytes; batch: whole
 * slots; decode: the recipe's transform re-augments the host-kept image
 * on the GPU route); adaptive echoing keeps host data and is refused at
 * create (loader.c). Call once, before the workers start. */
typedef struct nst_echo_device {
    uint32_t field;
    int (*alloc)(void *ctx, size_t bytes, uint8_t **mem);
    int (*copy)(void *ctx, uint8_t *dst, const uint8_t *src, size_t n);
    int (*copied)(void *ctx);
    void *ctx;
} nst_echo_device;
int nst_echo_set_device(nst_echo *e, const nst_echo_device *dev);

/* A worker makes the ticket's item into c->dst (c->copy is set here): from
 * the fetched bytes r, or from or into its echo store entry; then, with
 * adaptive echoing, keeps a copy in the pool. stale: the ticket's batch
 * was discarded, nothing is made. e NULL: echoing is off. 0 or E_* with
 * msg. */
int nst_echo_item(nst_echo *e, nst_recipe_worker *rw, const nst_recipe *recipe, const nst_ticket *t,
                  nst_item_ctx *c, const nst_fetch_req *r, int stale, nst_recipe_times *tm,
                  char *msg, size_t msgn);

#endif
