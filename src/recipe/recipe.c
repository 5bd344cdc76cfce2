/*
 * recipe.c — choosing a recipe from the configuration (a user op, else the
 * task's: classify, detect, tokens, bytes, audio), and what every recipe
 * shares (see recipe.h): locating an item and its path, element and field
 * sizes, describing a slot as a nostall_batch, building an index with the
 * loader's options (its fingerprint: dataset/fingerprint.c), and the label
 * field (declared from the index's kind of labels, written per item).
 */
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "recipe/recipe.h"
#include "dataset/shards.h"

int nst_classify_create(nst_recipe **out, const nostall_config *cfg, const char *source);
int nst_detect_create(nst_recipe **out, const nostall_config *cfg, const char *source);
int nst_tokens_create(nst_recipe **out, const nostall_config *cfg, const char *source);
int nst_bytes_create(nst_recipe **out, const nostall_config *cfg, const char *source);
int nst_audio_clip_create(nst_recipe **out, const nostall_config *cfg, const char *source);
int nst_op_recipe_create(nst_recipe **out, const nostall_config *cfg, const char *source);

int nst_recipe_create(nst_recipe **out, const nostall_config *cfg, const char *source)
{
    const nst_optval *v = cfg->v;
    *out = NULL;
    /* A user op (op.c: nostall_op.h) replaces the task's own transform. */
    if (cfg->op || nst_config_path(cfg, NOSTALL_OPT_OP_LIBRARY)[0] ||
        nst_config_path(cfg, NOSTALL_OPT_OP_ARGS)[0])
        return nst_op_recipe_create(out, cfg, source);
    switch (v[NOSTALL_OPT_TASK].u) {
    case NOSTALL_TASK_CLASSIFY: return nst_classify_create(out, cfg, source);
    case NOSTALL_TASK_DETECT: return nst_detect_create(out, cfg, source);
    case NOSTALL_TASK_TOKENS: return nst_tokens_create(out, cfg, source);
    case NOSTALL_TASK_BYTES: return nst_bytes_create(out, cfg, source);
    case NOSTALL_TASK_AUDIO: return nst_audio_clip_create(out, cfg, source);
    }
    return nst_error(NOSTALL_E_OPTION, "task: unknown value %llu",
                     (unsigned long long)v[NOSTALL_OPT_TASK].u);
}

void nst_recipe_free(nst_recipe *r)
{
    if (!r) return;
    nst_index *ix = r->index;
    r->ops->free(r);
    nst_index_free(ix);
}

void nst_recipe_locate(const nst_recipe *r, uint64_t epoch, uint64_t index, nst_item_loc *out)
{
    if (r->ops->locate) {
        r->ops->locate(r, epoch, index, out);
        return;
    }
    *out = (nst_item_loc){.path = nst_index_path(r->index, index), .key = index};
    nst_index_range(r->index, index, &out->offset, &out->length); /* a shard's member */
}

const char *nst_recipe_path(const nst_recipe *r, uint64_t index)
{
    const char *p = nst_index_path(r->index, index);
    if (!p) p = nst_index_path(r->index, 0);
    return p ? p : "";
}

void nst_recipe_items_from_index(nst_recipe *r)
{
    r->items = r->keys = nst_index_count(r->index);
    r->fingerprint = nst_index_fingerprint(r->index);
}

size_t nst_dtype_size(nostall_dtype dtype)
{
    switch (dtype) {
    case NOSTALL_DTYPE_UINT8: return 1;
    case NOSTALL_DTYPE_UINT16:
    case NOSTALL_DTYPE_FLOAT16:
    case NOSTALL_DTYPE_BFLOAT16: return 2;
    case NOSTALL_DTYPE_FLOAT32:
    case NOSTALL_DTYPE_INT32:
    case NOSTALL_DTYPE_UINT32: return 4;
    case NOSTALL_DTYPE_INT64: return 8;
    }
    return 0;
}

int nst_field_finish(nst_field_decl *d)
{
    size_t n = nst_dtype_size(d->dtype);
    if (!n || d->ndim > NOSTALL_FIELD_DIMS)
        return nst_error(NOSTALL_E_INVALID, "recipe: field '%s': bad dtype or rank", d->name);
    for (uint32_t i = 0; i < d->ndim; i++)
        if (nst_mul_overflow(n, (size_t)d->shape[i], &n) || n > ((size_t)1 << 40))
            return nst_error(NOSTALL_E_INVALID, "recipe: field '%s' is too large", d->name);
    d->item_bytes = n;
    return 0;
}

void nst_recipe_describe(nostall_batch *out, const nst_recipe *r, nostall_field *fields,
                         uint8_t *const *data, uint64_t *indices, uint32_t count, uint64_t epoch,
                         uint64_t position, uint64_t seq)
{
    for (uint32_t f = 0; f < r->nfields; f++) {
        const nst_field_decl *d = &r->fields[f];
        fields[f].name = d->name;
        fields[f].dtype = d->dtype;
        fields[f].ndim = d->ndim;
        memcpy(fields[f].shape, d->shape, sizeof fields[f].shape);
        fields[f].item_bytes = d->item_bytes;
        fields[f].data = data[f];
        fields[f].shape_field = d->shape_field;
    }
    const nst_field_decl *img = &r->fields[r->image_field];
    memset(out, 0, sizeof *out);
    out->images = fields[r->image_field].data;
    /* labels: the int64 scalar label, when the recipe has one */
    out->labels = r->label_field < r->nfields && r->fields[r->label_field].ndim == 0 &&
                          r->fields[r->label_field].dtype == NOSTALL_DTYPE_INT64
                      ? fields[r->label_field].data
                      : NULL;
    out->indices = indices;
    out->count = count;
    out->dtype = img->dtype;
    int layout = r->image_layout                        ? r->image_layout - 1
                 : img->ndim == 3 && img->shape[0] == 3 ? NOSTALL_LAYOUT_NCHW
                                                        : NOSTALL_LAYOUT_NHWC;
    out->layout = (nostall_layout)layout;
    if (img->ndim == 3 && layout == NOSTALL_LAYOUT_NCHW) { /* C, H, W */
        out->channels = (uint32_t)img->shape[0], out->height = (uint32_t)img->shape[1];
        out->width = (uint32_t)img->shape[2];
    } else if (img->ndim == 3) { /* H, W, C */
        out->height = (uint32_t)img->shape[0], out->width = (uint32_t)img->shape[1];
        out->channels = (uint32_t)img->shape[2];
    }
    out->item_bytes = img->item_bytes;
    out->epoch = epoch;
    out->position = position;
    out->sequence = seq;
    out->nfields = r->nfields;
    out->fields = fields;
}

int nst_index_build_cfg(nst_index **out, const char *source, unsigned flags,
                        const nostall_config *cfg)
{
    nst_shard_opts o;
    nst_shard_opts_default(&o);
    if (cfg) {
        o.timeout_ms = (uint32_t)cfg->v[NOSTALL_OPT_HTTP_TIMEOUT_MS].u;
        o.retries = (uint32_t)cfg->v[NOSTALL_OPT_HTTP_RETRIES].u;
        o.verify_tls = (int)cfg->v[NOSTALL_OPT_HTTP_VERIFY_TLS].u;
    }
    return nst_index_build_opts(out, source, flags, &o);
}

/* Multi-hot labels: at most this many classes (a float per class per item). */
#define NST_MULTI_MAX_CLASSES (1u << 20)

int nst_label_declare(nst_recipe *r, const char *source)
{
    int kind = nst_index_label_kind(r->index);
    r->label_field = UINT32_MAX;
    if (kind == NST_LABEL_NONE) return 0;
    if (r->nfields >= NST_FIELDS_MAX)
        return nst_error(NOSTALL_E_INVALID, "recipe: too many fields for a label");
    nst_field_decl *label = &r->fields[r->nfields];
    memset(label, 0, sizeof *label);
    snprintf(label->name, sizeof label->name, "label");
    label->shape_field = -1;
    label->dtype = kind == NST_LABEL_INT ? NOSTALL_DTYPE_INT64 : NOSTALL_DTYPE_FLOAT32;
    if (kind == NST_LABEL_MULTI) {
        uint64_t k = nst_index_classes(r->index);
        if (k > NST_MULTI_MAX_CLASSES)
            return nst_error(NOSTALL_E_DATASET,
                             "%s: multi-label list names label %llu: a multi-hot label has "
                             "at most %u classes",
                             source, (unsigned long long)(k - 1), NST_MULTI_MAX_CLASSES);
        label->ndim = 1;
        label->shape[0] = k ? k : 1;
    }
    int rc = nst_field_finish(label);
    if (rc < 0) return rc;
    r->label_field = r->nfields++;
    return 0;
}

void nst_label_write(const nst_recipe *r, const nst_item_ctx *c)
{
    if (r->label_field == UINT32_MAX) return;
    const nst_index *ix = r->index;
    uint8_t *dst = c->dst[r->label_field];
    switch (nst_index_label_kind(ix)) {
    case NST_LABEL_INT: {
        int64_t l = nst_index_label(ix, c->index);
        memcpy(dst, &l, sizeof l);
        break;
    }
    case NST_LABEL_FLOAT: {
        float f = (float)nst_index_label_float(ix, c->index);
        memcpy(dst, &f, sizeof f);
        break;
    }
    case NST_LABEL_MULTI: {
        const uint32_t *m;
        uint32_t k = nst_index_labels(ix, c->index, &m);
        const float one = 1.0f;
        memset(dst, 0, r->fields[r->label_field].item_bytes);
        for (uint32_t i = 0; i < k; i++) memcpy(dst + (size_t)m[i] * sizeof one, &one, sizeof one);
        break;
    }
    default: break;
    }
}
