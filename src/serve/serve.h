/*
 * serve.h — prep servers (`nostall serve`, docs/serve.md): what the loader
 * and src/serve/ share.
 *
 * SERVER (server.c)  A loader whose batch backend is the server's queue of
 *   requested items instead of a ring: its workers, cache and recipe
 *   prepare each item a client asks for, (item epoch, dataset index), into
 *   that connection's buffer, and the connection's thread streams it back.
 *   The loader makes it through nst_loader_create_backend (loader.c).
 *
 * CLIENT (client.c)  In a loader with prep_servers: one thread per server
 *   takes item tickets from the loader's backend as a worker does, maps
 *   each to (item epoch, index) with the loader's map, asks its server, and
 *   receives the item's bytes straight into the ticket's place in the ring
 *   slot, then hands the ticket back (done). A ticket is in exactly one
 *   place at a time -- a server's outstanding table, the orphan pool, or a
 *   worker -- so nothing is lost or made twice: when a server fails (reset,
 *   closed, silent past prep_timeout_ms), its outstanding tickets go to the
 *   orphan pool, which the other servers' threads and the local workers
 *   take from before the backend; the server is tried again with backoff.
 */
#ifndef NST_SERVE_SERVE_H
#define NST_SERVE_SERVE_H

#include <stdatomic.h>

#include "batch/batches.h"
#include "nostall.h"
#include "recipe/recipe.h"

/* loader.c: a loader whose backend `mk` makes (after the recipe, before the
 * workers start). */
typedef int (*nst_loader_backend_fn)(void *ctx, const nst_recipe *r, nst_batches **out,
                                     const char *fn);
int nst_loader_create_backend(nostall_loader **out, const char *source, const nostall_config *cfg,
                              nst_loader_backend_fn mk, void *ctx);

typedef struct nst_prep nst_prep;

typedef struct nst_prep_params {
    const nostall_config *cfg;
    const nst_recipe *recipe;
    nst_batches *bq;
    /* a ticket's item: its dataset index and its own epoch */
    uint64_t (*map)(void *ctx, const nst_ticket *t, uint64_t *item_epoch);
    void *ctx;
    const atomic_int *stop; /* the loader's stop flag */
} nst_prep_params;

/* Connect to every server of prep_servers (a refusal fails create, naming
 * the server and what it said; one not answering yet is tried later) and
 * start their threads. */
int nst_prep_create(nst_prep **out, const nst_prep_params *p, const char *fn);
/* Wake every wait (the stop flag is already set); join; free. */
void nst_prep_stop(nst_prep *pc);
void nst_prep_free(nst_prep *pc);
/* A ticket a failed server gave back: 1 with *t, 0 none. Any thread. */
int nst_prep_orphan_take(nst_prep *pc, nst_ticket *t);
/* Items received from servers, and tickets given back by failed ones. */
void nst_prep_counts(const nst_prep *pc, uint64_t *remote_items, uint64_t *requeued);
/* Every prep_* field of the loader's stats (nothing without a client). */
void nst_prep_stats(const nst_prep *pc, nostall_stats *s);

#endif
