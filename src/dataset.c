/*
 * dataset.c — nostall_dataset (nostall_dataset.h): a source indexed once
 * with a config -- the item recipe, or a mix's (recipe/recipe.h,
 * recipe/mixture.h) -- its items' paths, labels and byte ranges, and the
 * distinct files they live in. Every loader is made on one
 * (nostall_loader_create opens a private one; loader.c), so the loader and
 * this handle index a source with the same code; nst_dataset_same_items
 * says which options a loader made from it may set apart (how it
 * delivers and fetches, not what the items are).
 *
 * The distinct files are found at the first query (a set of strings keeps
 * each file once, in the order of its first item), under the dataset's
 * mutex; everything else is immutable after open.
 *
 * Touches: the source's index files while opening; nothing global.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "dataset.h"
#include "recipe/mixture.h"

int nst_dataset_open(nostall_dataset **out, const char *source, const nostall_config *cfg,
                     const char *fn)
{
    const nst_optval *v = cfg->v;
    const int mixed = nst_config_path(cfg, NOSTALL_OPT_MIX)[0] != 0;
    *out = NULL;
    if (!mixed && (v[NOSTALL_OPT_MIX_EPOCH_ITEMS].u || v[NOSTALL_OPT_MIX_LABELS].u))
        return nst_error(NOSTALL_E_OPTION,
                         "%s: mix_epoch_items and mix_labels apply to a mix, but the mix option "
                         "is empty",
                         fn);
    nostall_dataset *ds = calloc(1, sizeof *ds);
    if (!ds || !(ds->source = strdup(source))) {
        free(ds);
        return nst_error(NOSTALL_E_NOMEM, "%s: %s: out of memory", fn, source);
    }
    atomic_init(&ds->refs, 1);
    ds->cfg = *cfg;
    pthread_mutex_init(&ds->files_mu, NULL);
    const int rc = mixed ? nst_mixture_create(&ds->recipe, &ds->mix, &ds->cfg)
                         : nst_recipe_create(&ds->recipe, &ds->cfg, source);
    if (rc < 0) {
        char keep[NST_ERROR_MAX]; /* freeing must not overwrite the message */
        snprintf(keep, sizeof keep, "%s", nostall_last_error());
        nostall_dataset_free(ds);
        nst_error_set(rc, keep);
        return rc;
    }
    *out = ds;
    return 0;
}

int nostall_dataset_open(nostall_dataset **out, const char *source, const nostall_config *cfg)
{
    static const char fn[] = "nostall_dataset_open";
    nostall_config *defaults = NULL;
    nst_error_clear();
    if (!out || !source) return nst_error(NOSTALL_E_INVALID, "%s: NULL argument", fn);
    *out = NULL;
    if (!cfg) {
        int rc = nostall_config_create(&defaults);
        if (rc < 0) return rc;
        cfg = defaults;
    }
    const int rc = nst_dataset_open(out, source, cfg, fn);
    nostall_config_free(defaults);
    return rc;
}

nostall_dataset *nostall_dataset_ref(nostall_dataset *ds)
{
    if (ds) atomic_fetch_add_explicit(&ds->refs, 1, memory_order_relaxed);
    return ds;
}

void nostall_dataset_free(nostall_dataset *ds)
{
    if (!ds || atomic_fetch_sub_explicit(&ds->refs, 1, memory_order_acq_rel) != 1) return;
    nst_recipe_free(ds->recipe);
    free(ds->files);
    pthread_mutex_destroy(&ds->files_mu);
    free(ds->source);
    free(ds);
}

const char *nostall_dataset_source(const nostall_dataset *ds) { return ds ? ds->source : NULL; }

uint64_t nostall_dataset_count(const nostall_dataset *ds) { return ds ? ds->recipe->items : 0; }

int nostall_dataset_label_kind(const nostall_dataset *ds)
{
    return ds ? nst_index_label_kind(ds->recipe->index) : NOSTALL_LABELS_NONE;
}

int nostall_dataset_item(const nostall_dataset *ds, uint64_t i, const char **path, int64_t *label,
                         uint64_t *offset, uint64_t *length)
{
    nst_error_clear();
    if (!ds) return nst_error(NOSTALL_E_INVALID, "nostall_dataset_item: dataset is NULL");
    const nst_recipe *r = ds->recipe;
    if (i >= r->items)
        return nst_error(NOSTALL_E_INVALID, "nostall_dataset_item: %s: item %llu >= %llu items",
                         ds->source, (unsigned long long)i, (unsigned long long)r->items);
    nst_item_loc loc;
    nst_recipe_locate(r, 0, i, &loc);
    if (path) *path = loc.path ? loc.path : nst_recipe_path(r, i);
    if (offset) *offset = loc.offset;
    if (length) *length = loc.length;
    if (label)
        *label = nst_index_label_kind(r->index) == NST_LABEL_INT && i < nst_index_count(r->index)
                     ? nst_index_label(r->index, i)
                     : 0;
    return 0;
}

/* ---- the distinct files: a set of strings (open addressing, FNV-1a) ------- */

typedef struct strset {
    const char **slot;
    size_t cap, n; /* cap: a power of two, at most half full */
} strset;

static uint64_t str_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* 1 if `s` was added, 0 if it was there, -1 out of memory. */
static int strset_add(strset *t, const char *s)
{
    if (2 * (t->n + 1) > t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 1024;
        const char **slot = calloc(cap, sizeof *slot);
        if (!slot) return -1;
        for (size_t i = 0; i < t->cap; i++)
            if (t->slot[i]) {
                size_t j = (size_t)str_hash(t->slot[i]) & (cap - 1);
                while (slot[j]) j = (j + 1) & (cap - 1);
                slot[j] = t->slot[i];
            }
        free(t->slot);
        t->slot = slot;
        t->cap = cap;
    }
    size_t j = (size_t)str_hash(s) & (t->cap - 1);
    for (; t->slot[j]; j = (j + 1) & (t->cap - 1))
        if (!strcmp(t->slot[j], s)) return 0;
    t->slot[j] = s;
    t->n++;
    return 1;
}

static int find_files(nostall_dataset *ds)
{
    const nst_recipe *r = ds->recipe;
    strset seen = {NULL, 0, 0};
    size_t cap = 0;
    for (uint64_t i = 0; i < r->items; i++) {
        nst_item_loc loc;
        nst_recipe_locate(r, 0, i, &loc);
        const char *p = loc.path ? loc.path : nst_recipe_path(r, i);
        const int added = strset_add(&seen, p); /* the index's string: lives as long */
        if (added < 0) goto oom;
        if (!added) continue;
        if (ds->nfiles == cap) {
            cap = cap ? 2 * cap : 256;
            const char **f = realloc(ds->files, cap * sizeof *f);
            if (!f) goto oom;
            ds->files = f;
        }
        ds->files[ds->nfiles++] = p;
    }
    free(seen.slot);
    return 0;
oom:
    free(seen.slot);
    free(ds->files);
    ds->files = NULL;
    ds->nfiles = 0;
    return nst_error(NOSTALL_E_NOMEM, "nostall_dataset_files: %s: out of memory", ds->source);
}

/* The list, made once; E_NOMEM (and no files) if it cannot be. */
static int files_ready(const nostall_dataset *cds)
{
    nostall_dataset *ds = (nostall_dataset *)cds; /* the lazily made list only */
    pthread_mutex_lock(&ds->files_mu);
    if (!ds->files_done) {
        ds->files_rc = find_files(ds);
        ds->files_done = 1;
    }
    const int rc = ds->files_rc;
    pthread_mutex_unlock(&ds->files_mu);
    return rc;
}

uint64_t nostall_dataset_files(const nostall_dataset *ds)
{
    if (!ds || files_ready(ds) < 0) return 0;
    return ds->nfiles;
}

const char *nostall_dataset_file(const nostall_dataset *ds, uint64_t i)
{
    if (!ds || files_ready(ds) < 0 || i >= ds->nfiles) return NULL;
    return ds->files[i];
}

/* Options a loader may set apart from its dataset's: how it delivers and
 * fetches, not what the items are or become (nostall_dataset.h). */
static int loader_only(int id)
{
    static const int ids[] = {NOSTALL_OPT_BATCH_SIZE,
                              NOSTALL_OPT_THREADS,
                              NOSTALL_OPT_BATCHES_AHEAD,
                              NOSTALL_OPT_EPOCHS,
                              NOSTALL_OPT_DROP_LAST,
                              NOSTALL_OPT_RANK,
                              NOSTALL_OPT_WORLD_SIZE,
                              NOSTALL_OPT_ON_BAD_ITEM,
                              NOSTALL_OPT_MAX_BAD_FRACTION,
                              NOSTALL_OPT_STORAGE_MBPS,
                              NOSTALL_OPT_STORAGE_LATENCY_MS,
                              NOSTALL_OPT_IO_DEPTH,
                              NOSTALL_OPT_READER,
                              NOSTALL_OPT_HTTP_TIMEOUT_MS,
                              NOSTALL_OPT_HTTP_RETRIES,
                              NOSTALL_OPT_HTTP_VERIFY_TLS,
                              NOSTALL_OPT_ECHO,
                              NOSTALL_OPT_ECHO_POINT,
                              NOSTALL_OPT_ECHO_FACTOR,
                              NOSTALL_OPT_ECHO_BUFFER,
                              NOSTALL_OPT_ECHO_MAX,
                              NOSTALL_OPT_COORDINATE,
                              NOSTALL_OPT_COORDINATE_LEAD,
                              NOSTALL_OPT_CACHE_TRANSCODE,
                              NOSTALL_OPT_SHUFFLE_BUFFER,
                              NOSTALL_OPT_SHARD_MODE,
                              NOSTALL_OPT_AUTOTUNE,
                              NOSTALL_OPT_CPU_BUDGET,
                              NOSTALL_OPT_MEMORY_BUDGET,
                              NOSTALL_OPT_GPU_OUTPUT};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        if (ids[i] == id) return 1;
    return 0;
}

/* E_OPTION naming the first option `cfg` sets apart from the dataset's that
 * only the dataset may set. */
int nst_dataset_same_items(const nostall_dataset *ds, const nostall_config *cfg, const char *fn)
{
    for (int id = 0; id < NOSTALL_OPT_COUNT_; id++) {
        nostall_option_info oi;
        char a[NOSTALL_PATH_MAX + 64], b[NOSTALL_PATH_MAX + 64];
        if (loader_only(id) || nostall_option_info_get(id, &oi) < 0) continue;
        if (nostall_config_get(&ds->cfg, oi.name, a, sizeof a) < 0 ||
            nostall_config_get(cfg, oi.name, b, sizeof b) < 0 || strcmp(a, b))
            return nst_error(NOSTALL_E_OPTION,
                             "%s: %s: %s is '%s' in the loader's config but '%s' in the "
                             "dataset's: it defines the items, so only the dataset sets it",
                             fn, ds->source, oi.name, b, a);
    }
    if (cfg->op != ds->cfg.op || cfg->op_ctx != ds->cfg.op_ctx)
        return nst_error(NOSTALL_E_OPTION,
                         "%s: %s: the loader's config has another user op than the dataset's", fn,
                         ds->source);
    return 0;
}
