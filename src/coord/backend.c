/*
 * backend.c — a coordinated group as the loader's batch backend (see
 * backend.h). Worker tickets and lent batches are the group's, described
 * in the loader's terms; delivered batches' accounting and bad items reach
 * the loader through the group's `seen` hook, under the group's lock, in
 * the consumer thread. set_state is refused: members follow the group.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "coord/backend.h"
#include "coord/group.h"

typedef struct coord {
    nst_batches base;
    nst_group *g;
    const nst_recipe *recipe;
    nst_batches_sink sink;
    uint32_t nslots, batch_size;
    nostall_field *fields;    /* nslots x nfields: what lent batches show */
    uint64_t epoch, position; /* the consumer's cursor                   */
    char name[NST_GROUP_NAME_MAX + 1];
} coord;

static coord *C(nst_batches *b) { return (coord *)b; }

static int c_take(nst_batches *b, nst_ticket *t, uint32_t timeout_ms)
{
    nst_group_ticket gt;
    int rc = nst_group_take(C(b)->g, &gt, timeout_ms);
    if (rc != 0) return rc;
    memset(t, 0, sizeof *t);
    t->bt = (nst_engine_ticket){.seq = gt.seq,
                                .epoch = gt.epoch,
                                .position = gt.position,
                                .slot = gt.slot,
                                .j = gt.j,
                                .tag = gt.tag};
    t->epoch = gt.epoch;
    t->position = gt.position;
    memcpy(t->dst, gt.dst, sizeof t->dst);
    t->index_dst = gt.index;
    t->indexed = t->nofetch = 0;
    t->io[NST_IO_fresh] = 1;
    t->io[NST_IO_uses_1] = 1;
    return 0;
}

static int c_stale(nst_batches *b, const nst_ticket *t)
{
    (void)b, (void)t;
    return 0;
}

static void c_done(nst_batches *b, nst_ticket *t, int status, const char *msg)
{
    nst_group_ticket gt = {.seq = t->bt.seq,
                           .epoch = t->bt.epoch,
                           .position = t->bt.position,
                           .j = t->bt.j,
                           .slot = t->bt.slot,
                           .tag = t->bt.tag};
    if (status < 0) /* not delivered: neither fresh nor used */
        for (int k = NST_IO_fresh; k <= NST_IO_distance; k++) t->io[k] = 0;
    memcpy(gt.io, t->io, sizeof gt.io < sizeof t->io ? sizeof gt.io : sizeof t->io);
    nst_group_done(C(b)->g, &gt, status, msg);
}

/* The group's hook: a batch the consumer reached (group lock held). */
static void seen(void *ctx, nst_engine *q, uint32_t slot)
{
    coord *c = ctx;
    if (c->sink.count) c->sink.count(c->sink.ctx, q->slots[slot].io);
    nst_batches_report_skips(q, slot, &c->sink);
}

static int c_next(nst_batches *b, nostall_batch *out, uint64_t deadline, const char *fn)
{
    coord *c = C(b);
    nst_group_batch gb;
    int rc;
    for (;;) { /* in slices, so the deadline is honoured */
        uint64_t now = nst_now_ns();
        uint32_t slice = 100;
        if (deadline) {
            if (now >= deadline) return NOSTALL_TIMEOUT;
            if (deadline - now < 100000000) slice = (uint32_t)((deadline - now) / 1000000) + 1;
        }
        rc = nst_group_next(c->g, &gb, slice);
        if (rc != NOSTALL_TIMEOUT) break;
    }
    if (rc == NOSTALL_EPOCH_END) {
        c->epoch++;
        c->position = 0;
    } else if (rc == 0) {
        nst_recipe_describe(out, c->recipe, c->fields + (size_t)gb.slot * c->recipe->nfields,
                            gb.data, gb.indices, gb.count, gb.epoch, gb.position, gb.seq);
        c->epoch = gb.epoch;
        c->position = gb.position + gb.len;
    } else if (rc < 0 && rc != NOSTALL_E_STOPPED) {
        char keep[NST_ERROR_MAX];
        snprintf(keep, sizeof keep, "%s: %s", fn, nostall_last_error());
        nst_error_set(rc, keep);
    } else if (rc == NOSTALL_E_STOPPED) {
        rc = nst_error(NOSTALL_E_STOPPED, "%s: loader stopped", fn);
    }
    return rc;
}

static int c_release(nst_batches *b, const nostall_batch *batch)
{
    return nst_group_release(C(b)->g, batch->sequence);
}

static int c_reset(nst_batches *b, const nst_engine_cursor *c, void (*quiet)(void *ctx), void *ctx,
                   const char *fn)
{
    (void)c, (void)quiet, (void)ctx;
    return nst_error(NOSTALL_E_STATE,
                     "%s: a member of coordinated group '%s' follows the group's position; "
                     "set_state is not available",
                     fn, C(b)->name);
}

static void c_cursor(nst_batches *b, nst_engine_cursor *c)
{
    memset(c, 0, sizeof *c);
    c->epoch = C(b)->epoch;
    c->position = C(b)->position;
}

static void c_stop(nst_batches *b) { nst_group_stop(C(b)->g); }

static void c_free(nst_batches *b)
{
    coord *c = C(b);
    if (!c) return;
    nst_group_leave(c->g); /* after the workers: none still calls it */
    free(c->fields);
    free(c);
}

static void c_memory(nst_batches *b, void **mem, size_t *bytes, uint32_t *nslots,
                     uint32_t *slot_items)
{
    *mem = NULL;
    *bytes = 0;
    *nslots = C(b)->nslots;
    *slot_items = C(b)->batch_size;
}

static void c_coord_stats(nst_batches *b, nostall_stats *s)
{
    nst_group_stats gs;
    if (nst_group_stats_get(C(b)->g, &gs) != 0) return;
    s->coord_members = gs.members;
    s->coord_items_produced = gs.items_produced;
    s->coord_batches_produced = gs.batches_produced;
    s->coord_group_items_produced = gs.group_items_produced;
    s->coord_members_dropped = gs.members_dropped;
    s->coord_items_requeued = gs.items_requeued;
}

static const nst_batches_ops coord_ops = {
    .take = c_take,
    .stale = c_stale,
    .done = c_done,
    .next = c_next,
    .release = c_release,
    .reset = c_reset,
    .cursor = c_cursor,
    .stop = c_stop,
    .free = c_free,
    .memory = c_memory,
    .coord_stats = c_coord_stats,
};

/* The options whose values must be the group's: everything that changes
 * the delivered bytes or the batch plan, as text, plus the dataset. */
static const char *const fp_options[] =
    {"seed",      "shuffle",         "drop_last",  "rank",           "world_size", "batch_size",
     "epochs",    "coordinate_lead", "mode",       "crop",           "resize",     "scale_min",
     "scale_max", "ratio_min",       "ratio_max",  "flip_prob",      "output",     "mean",
     "std",       "on_bad_item",     "max_pixels", "max_file_bytes", "task",       "image_mode",
     "layout",    "out_height",      "out_width"};

/* Every option of the item recipes (task and later: paths included, which
 * may be long) as one hash, beside the readable ones above. */
static uint64_t recipe_options_hash(const nostall_config *cfg)
{
    char val[NOSTALL_PATH_MAX];
    uint64_t h = 0;
    for (int id = NOSTALL_OPT_TASK; id < NOSTALL_OPT_COUNT_; id++) {
        nostall_option_info info;
        nostall_option_info_get(id, &info);
        if (nostall_config_get(cfg, info.name, val, sizeof val) < 0) val[0] = '\0';
        nostall_checksum_update(&h, info.name, strlen(info.name) + 1);
        nostall_checksum_update(&h, val, strlen(val) + 1);
    }
    return h;
}

int nst_coord_backend_create(nst_batches **out, const nst_coord_params *p, const char *fn)
{
    enum { NFP = sizeof fp_options / sizeof *fp_options + 4 };
    char real[PATH_MAX], count[32], items_fp[32], recipe_fp[32];
    nst_group_opt fp[NFP];
    uint32_t n = 0;
    const nst_optval *v = p->cfg->v;
    coord *c = calloc(1, sizeof *c);
    *out = NULL;
    if (!c) return nst_error(NOSTALL_E_NOMEM, "%s: out of memory", fn);
    c->base.ops = &coord_ops;
    c->recipe = p->recipe;
    c->sink = p->sink;
    c->nslots = (uint32_t)v[NOSTALL_OPT_COORDINATE_LEAD].u;
    c->batch_size = (uint32_t)v[NOSTALL_OPT_BATCH_SIZE].u;
    snprintf(c->name, sizeof c->name, "%s", v[NOSTALL_OPT_COORDINATE].s);
    if (!realpath(p->source, real)) snprintf(real, sizeof real, "%s", p->source);
    snprintf(count, sizeof count, "%llu", (unsigned long long)p->dataset_items);
    fp[n++] = (nst_group_opt){"source", real};
    fp[n++] = (nst_group_opt){"dataset_items", count};
    snprintf(items_fp, sizeof items_fp, "%016llx", (unsigned long long)p->recipe->fingerprint);
    fp[n++] = (nst_group_opt){"items (paths, labels, annotations)", items_fp};
    snprintf(recipe_fp, sizeof recipe_fp, "%016llx",
             (unsigned long long)recipe_options_hash(p->cfg));
    fp[n++] = (nst_group_opt){"recipe options (task and after)", recipe_fp};
    char local[NFP][128];
    for (size_t i = 0; i < sizeof fp_options / sizeof *fp_options; i++, n++) {
        nostall_config_get(p->cfg, fp_options[i], local[n], sizeof local[n]);
        fp[n] = (nst_group_opt){fp_options[i], local[n]};
    }
    nst_group_params gp = {
        .name = c->name,
        .fp = fp,
        .nfp = n,
        .items_per_epoch = p->items_per_epoch,
        .batch_size = c->batch_size,
        .drop_last = (int)v[NOSTALL_OPT_DROP_LAST].u,
        .epochs = v[NOSTALL_OPT_EPOCHS].u,
        .nslots = c->nslots,
        .fields = p->recipe->fields,
        .nfields = p->recipe->nfields,
        .max_lead = c->nslots,
        .fail_on_bad = (p->flags & NST_ENGINE_FAIL) != 0,
        .fill = (p->flags & NST_ENGINE_FILL) != 0,
    };
    c->fields = calloc((size_t)c->nslots * p->recipe->nfields, sizeof *c->fields);
    int rc = c->fields ? nst_group_join(&c->g, &gp)
                       : nst_error(NOSTALL_E_NOMEM, "%s: out of memory", fn);
    if (rc < 0) {
        char keep[NST_ERROR_MAX];
        snprintf(keep, sizeof keep, "%s: coordinate='%s': %s", fn, c->name, nostall_last_error());
        free(c->fields);
        free(c);
        return nst_error_set(rc, keep);
    }
    nst_group_set_seen(c->g, seen, c);
    nst_group_stats gs;
    if (nst_group_stats_get(c->g, &gs) == 0) c->epoch = gs.first_epoch;
    *out = &c->base;
    return 0;
}
