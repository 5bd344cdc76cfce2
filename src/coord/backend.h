/*
 * backend.h — a coordinated group as the loader's batch backend
 * (batch/batches.h): joins the group named by the `coordinate` option with
 * a fingerprint of every option that changes the delivered bytes or the
 * batch plan, and maps the backend operations onto the group's protocol.
 */
#ifndef NST_COORD_BACKEND_H
#define NST_COORD_BACKEND_H

#include "batch/batches.h"
#include "common/config.h"

typedef struct nst_coord_params {
    const nostall_config *cfg;
    const char *source; /* for the fingerprint: its real path      */
    uint64_t dataset_items;
    uint64_t items_per_epoch; /* this rank's shard                      */
    uint32_t flags;           /* NST_ENGINE_FAIL, NST_ENGINE_FILL               */
    const nst_recipe *recipe;
    nst_batches_sink sink;
} nst_coord_params;

int nst_coord_backend_create(nst_batches **out, const nst_coord_params *p, const char *fn);

#endif
