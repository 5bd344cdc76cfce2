/*
 * mixture.c — the recipe of a weighted mix: several sources read as one
 * dataset (option `mix`, docs/mixing.md).
 *
 * DESIGN
 *   Every source gets its own recipe, made by nst_recipe_create with the
 *   loader's options (same task, same output fields) and the source's own
 *   seed (nst_mix_seed: its order and its draws). Their items are
 *   concatenated: source s's item i is the mix's item first[s] + i, and its
 *   cache keys are shifted the same way past the keys of the sources before
 *   it. Each stage finds the item's source, hands the source's recipe the
 *   item's own id (its label, path and draws are the source's), then adds
 *   the mix's own field, `source` (int64: s), and with mix_labels=offset
 *   shifts an int64 label by the classes of the sources before s (their
 *   sum, with the last source's classes, below 2^31: checked at create).
 *
 *   The fields of every source must be declared exactly as the first
 *   source's (names, dtypes, shapes, ragged rooms): the ring is planned
 *   once. A task whose rooms follow the data (bytes, image_mode=full with
 *   its largest image, multi-hot labels over a source's classes) mixes
 *   only sources that agree, and the error says which field differs.
 *
 *   The mix's index (for nostall_loader_item) lists every item's path and
 *   int64 label (shifted as delivered), so it costs a second copy of the
 *   paths; classes are its largest label + 1. The sources' bad shards
 *   (index.h) are the mix's: nst_mixture_bad_shards/_bad_shard walk them.
 *
 * THREADS  Immutable after create. Each worker owns one worker struct per
 *   source (their scratch, decoders); the stages run concurrently.
 */
#include "recipe/mixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

typedef struct mix_recipe {
    nst_recipe base;
    nst_mix mix;
    uint32_t n;
    nst_recipe *src[NST_MIX_MAX];
    int64_t label_off[NST_MIX_MAX];
    uint64_t key_first[NST_MIX_MAX + 1];
    uint32_t source_field;
    char *spec; /* the parsed specification: the sources' names */
    const char *names[NST_MIX_MAX];
} mix_recipe;

struct nst_recipe_worker {
    const mix_recipe *r;
    nst_recipe_worker *src[NST_MIX_MAX];
};

/* The source's context for item c->index of the mix. */
static uint32_t to_source(const mix_recipe *r, const nst_item_ctx *c, nst_item_ctx *sc)
{
    uint64_t local;
    uint32_t s = nst_mix_source_of(&r->mix, c->index, &local);
    *sc = *c;
    sc->index = local;
    sc->path = nst_recipe_path(r->src[s], local);
    return s;
}

/* What the mix adds to an item its source made. */
static void finish(const mix_recipe *r, uint32_t s, const nst_item_ctx *c)
{
    int64_t v = (int64_t)s;
    memcpy(c->dst[r->source_field], &v, sizeof v);
    if (r->label_off[s]) {
        uint8_t *dst = c->dst[r->base.label_field];
        memcpy(&v, dst, sizeof v);
        v += r->label_off[s];
        memcpy(dst, &v, sizeof v);
    }
}

static void locate(const nst_recipe *base, uint64_t epoch, uint64_t index, nst_item_loc *out)
{
    const mix_recipe *r = (const mix_recipe *)base;
    uint64_t local;
    uint32_t s = nst_mix_source_of(&r->mix, index, &local);
    nst_recipe_locate(r->src[s], epoch, local, out);
    out->key += r->key_first[s];
}

static int make(nst_recipe_worker *w, const nst_item_ctx *c, const uint8_t *data, size_t len,
                nst_recipe_times *t)
{
    nst_item_ctx sc;
    uint32_t s = to_source(w->r, c, &sc);
    int rc = w->r->src[s]->ops->make(w->src[s], &sc, data, len, t);
    if (rc == 0) finish(w->r, s, c);
    return rc;
}

static int decode(nst_recipe_worker *w, const nst_item_ctx *c, const uint8_t *data, size_t len,
                  nst_decoded *out, nst_recipe_times *t)
{
    nst_item_ctx sc;
    uint32_t s = to_source(w->r, c, &sc);
    return w->r->src[s]->ops->decode(w->src[s], &sc, data, len, out, t);
}

static int transform(nst_recipe_worker *w, const nst_item_ctx *c, const nst_decoded *in,
                     nst_recipe_times *t)
{
    nst_item_ctx sc;
    uint32_t s = to_source(w->r, c, &sc);
    int rc = w->r->src[s]->ops->transform(w->src[s], &sc, in, t);
    if (rc == 0) finish(w->r, s, c);
    return rc;
}

static void *decoder(nst_recipe_worker *w)
{
    /* every source has the same task: the first's decoder rewrites any */
    const nst_recipe_ops *ops = w->r->src[0]->ops;
    return ops->decoder ? ops->decoder(w->src[0]) : NULL;
}

static void worker_free(nst_recipe_worker *w)
{
    if (!w) return;
    for (uint32_t s = 0; s < w->r->n; s++)
        if (w->src[s]) w->r->src[s]->ops->worker_free(w->src[s]);
    free(w);
}

static int worker_create(const nst_recipe *base, nst_recipe_worker **out)
{
    const mix_recipe *r = (const mix_recipe *)base;
    nst_recipe_worker *w = calloc(1, sizeof *w);
    *out = NULL;
    if (!w) return nst_error(NOSTALL_E_NOMEM, "mix: out of memory");
    w->r = r;
    for (uint32_t s = 0; s < r->n; s++) {
        int rc = r->src[s]->ops->worker_create(r->src[s], &w->src[s]);
        if (rc < 0) {
            worker_free(w);
            return rc;
        }
    }
    *out = w;
    return 0;
}

static void recipe_free(nst_recipe *base)
{
    mix_recipe *r = (mix_recipe *)base;
    for (uint32_t s = 0; s < r->n; s++) nst_recipe_free(r->src[s]);
    free(r->spec);
    free(r);
}

static const nst_recipe_ops mix_ops = {
    .name = "mix",
    .locate = locate,
    .worker_create = worker_create,
    .worker_free = worker_free,
    .make = make,
    .decode = decode,
    .transform = transform,
    .decoder = decoder,
    .free = recipe_free,
};

static int same_field(const nst_field_decl *a, const nst_field_decl *b)
{
    return !strcmp(a->name, b->name) && a->dtype == b->dtype && a->ndim == b->ndim &&
           !memcmp(a->shape, b->shape, sizeof a->shape) && a->item_bytes == b->item_bytes &&
           a->shape_field == b->shape_field;
}

/* Source s's fields must be the first source's. */
static int check_fields(const mix_recipe *r, uint32_t s)
{
    const nst_recipe *a = r->src[0], *b = r->src[s];
    if (a->nfields != b->nfields || a->label_field != b->label_field)
        return nst_error(NOSTALL_E_DATASET,
                         "mix: %s gives %u fields%s, %s gives %u%s: mixed sources must have "
                         "the same fields (both labeled, or neither)",
                         r->names[s], b->nfields,
                         b->label_field < b->nfields ? " with a label" : "", r->names[0],
                         a->nfields, a->label_field < a->nfields ? " with a label" : "");
    for (uint32_t f = 0; f < a->nfields; f++)
        if (!same_field(&a->fields[f], &b->fields[f]))
            return nst_error(NOSTALL_E_DATASET,
                             "mix: field '%s' of %s (%zu bytes per item) is not as %s's "
                             "(%zu bytes): mixed sources must give the same fields (dtype, shape, "
                             "room; e.g. a multi-hot label over the same classes, bytes rooms of "
                             "the same size)",
                             b->fields[f].name, r->names[s], b->fields[f].item_bytes, r->names[0],
                             a->fields[f].item_bytes);
    return 0;
}

/* The mix's own field "source" and the shape of the whole item. */
static int declare(mix_recipe *r)
{
    const nst_recipe *a = r->src[0];
    nst_recipe *b = &r->base;
    if (a->nfields >= NST_FIELDS_MAX)
        return nst_error(NOSTALL_E_INVALID, "mix: too many fields for the source field");
    b->nfields = a->nfields;
    memcpy(b->fields, a->fields, sizeof b->fields);
    nst_field_decl *d = &b->fields[b->nfields];
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "source");
    d->dtype = NOSTALL_DTYPE_INT64;
    d->shape_field = -1;
    int rc = nst_field_finish(d);
    if (rc < 0) return rc;
    r->source_field = b->nfields++;
    b->item_bytes = 0;
    for (uint32_t f = 0; f < b->nfields; f++) b->item_bytes += b->fields[f].item_bytes;
    b->image_field = a->image_field;
    b->label_field = a->label_field;
    b->image_layout = a->image_layout;
    b->size_hint = a->size_hint;
    return 0;
}

/* Labels shifted per source (mix_labels=offset: int64 labels only). */
static int label_offsets(mix_recipe *r, int offset)
{
    const nst_recipe *a = r->src[0];
    int has = a->label_field < a->nfields;
    int is_int = has && a->fields[a->label_field].dtype == NOSTALL_DTYPE_INT64 &&
                 a->fields[a->label_field].ndim == 0;
    if (!offset || !has) return 0;
    if (!is_int)
        return nst_error(NOSTALL_E_OPTION,
                         "mix: mix_labels=offset shifts integer labels, but %s's labels are "
                         "float or multi-label",
                         r->names[0]);
    /* each source's classes < 2^31 (index.h); their sum must be too, so no
     * shifted label leaves the range a job uses (nor wraps int64) */
    uint64_t off = 0;
    for (uint32_t s = 0; s < r->n; s++) {
        const uint64_t k = nst_index_classes(r->src[s]->index);
        if (k > NST_INDEX_LABEL_LIMIT || off + k > NST_INDEX_LABEL_LIMIT)
            return nst_error(NOSTALL_E_OPTION,
                             "mix: mix_labels=offset: %s's %llu classes after %llu of the "
                             "sources before it make labels of 2^31 or more (labels must be "
                             "below 2^31)",
                             r->names[s], (unsigned long long)k, (unsigned long long)off);
        r->label_off[s] = (int64_t)off;
        off += k;
    }
    return 0;
}

uint64_t nst_mixture_bad_shards(const nst_recipe *base)
{
    const mix_recipe *r = (const mix_recipe *)base;
    uint64_t n = 0;
    for (uint32_t s = 0; s < r->n; s++) n += nst_index_bad_shards(r->src[s]->index);
    return n;
}

int nst_mixture_bad_shard(const nst_recipe *base, uint64_t i, const char **path, const char **why)
{
    const mix_recipe *r = (const mix_recipe *)base;
    for (uint32_t s = 0; s < r->n; s++) {
        const nst_index *ix = r->src[s]->index;
        if (nst_index_bad_shard(ix, i, path, why) == 0) return 0;
        /* the named ones of this source: at most NST_INDEX_IGNORED_KEEP */
        uint64_t named = nst_index_bad_shards(ix);
        if (named > NST_INDEX_IGNORED_KEEP) named = NST_INDEX_IGNORED_KEEP;
        i -= named;
    }
    return -1;
}

/* The mix's index: every item's path and delivered int64 label. */
static int build_index(mix_recipe *r)
{
    uint64_t n = r->base.items;
    const char **paths = malloc((size_t)n * sizeof *paths);
    int64_t *labels = malloc((size_t)n * sizeof *labels);
    int rc, with_labels = 1;
    if (!paths || !labels) {
        free(paths);
        free(labels);
        return nst_error(NOSTALL_E_NOMEM, "mix: out of memory for the index of %llu items",
                         (unsigned long long)n);
    }
    for (uint32_t s = 0; s < r->n; s++) {
        const nst_recipe *src = r->src[s];
        int kind = nst_index_label_kind(src->index);
        uint64_t count = nst_index_count(src->index);
        if (kind != NST_LABEL_INT) with_labels = 0;
        for (uint64_t i = 0; i < src->items; i++) {
            uint64_t k = r->mix.first[s] + i;
            paths[k] = nst_recipe_path(src, i);
            labels[k] = kind == NST_LABEL_INT && i < count
                            ? nst_index_label(src->index, i) + r->label_off[s]
                            : 0;
        }
    }
    rc = nst_index_from_paths(&r->base.index, paths, with_labels ? labels : NULL, n);
    free(paths);
    free(labels);
    return rc;
}

/* The sources' recipes, each with its own seed. */
static int make_sources(mix_recipe *r, const nostall_config *cfg, const double *weights)
{
    nostall_config *c = malloc(sizeof *c);
    if (!c) return nst_error(NOSTALL_E_NOMEM, "mix: out of memory");
    uint64_t seed = cfg->v[NOSTALL_OPT_SEED].u, items[NST_MIX_MAX];
    int rc = 0;
    for (uint32_t s = 0; s < r->n && rc == 0; s++) {
        *c = *cfg;
        c->v[NOSTALL_OPT_SEED].u = nst_mix_seed(seed, s);
        if ((rc = nst_recipe_create(&r->src[s], c, r->names[s])) < 0) break;
        items[s] = r->src[s]->items;
        r->key_first[s + 1] = r->key_first[s] + r->src[s]->keys;
        if (s > 0) rc = check_fields(r, s);
    }
    free(c);
    if (rc < 0) return rc;
    return nst_mix_init(&r->mix, r->n, items, weights, r->names,
                        cfg->v[NOSTALL_OPT_MIX_EPOCH_ITEMS].u, seed,
                        (int)cfg->v[NOSTALL_OPT_SHUFFLE].u);
}

int nst_mixture_create(nst_recipe **out, const nst_mix **mix, const nostall_config *cfg)
{
    const char *spec = nst_config_path(cfg, NOSTALL_OPT_MIX);
    double weights[NST_MIX_MAX];
    int rc;
    *out = NULL;
    *mix = NULL;
    mix_recipe *r = calloc(1, sizeof *r);
    if (!r) return nst_error(NOSTALL_E_NOMEM, "mix: out of memory");
    r->base.ops = &mix_ops;
    size_t bufn = strlen(spec) + 1;
    if (!(r->spec = malloc(bufn))) {
        rc = nst_error(NOSTALL_E_NOMEM, "mix: out of memory");
        goto fail;
    }
    if ((rc = nst_mix_parse(spec, r->spec, bufn, r->names, weights, &r->n)) < 0) goto fail;
    if ((rc = make_sources(r, cfg, weights)) < 0) goto fail;
    if ((rc = declare(r)) < 0) goto fail;
    if ((rc = label_offsets(r, cfg->v[NOSTALL_OPT_MIX_LABELS].u == NOSTALL_MIX_LABELS_OFFSET)) < 0)
        goto fail;
    uint64_t h = 0x6d6978ULL;
    for (uint32_t s = 0; s < r->n; s++) {
        const nst_recipe *src = r->src[s];
        r->base.items += src->items;
        r->base.items_truncated += src->items_truncated;
        r->base.parts_dropped += src->parts_dropped;
        r->base.parts_clipped += src->parts_clipped;
        r->base.parts_unmatched += src->parts_unmatched;
        r->base.items_missing += src->items_missing;
        uint64_t part[3] = {src->fingerprint, r->mix.draws[s], (uint64_t)r->label_off[s]};
        nostall_checksum_update(&h, part, sizeof part);
    }
    nostall_checksum_update(&h, &r->mix.len, sizeof r->mix.len);
    r->base.keys = r->key_first[r->n];
    r->base.fingerprint = h ? h : 1;
    if ((rc = build_index(r)) < 0) goto fail;
    *out = &r->base;
    *mix = &r->mix;
    return 0;
fail:
    nst_recipe_free(&r->base);
    return rc;
}
