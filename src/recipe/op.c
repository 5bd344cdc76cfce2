/*
 * op.c — the user-op recipe: the user's own per-item code (nostall_op.h)
 * run by the worker threads in place of a task's built-in transform.
 *
 * Items: those of the task's index (classify: image files; bytes: every
 * file), with their labels. Fields: the op's declared fields, then
 * "label" by the index's kind (recipe.c's nst_label_declare/write).
 *
 * Stages:
 *   make       bytes -> [decode the whole image] -> op.run -> fields
 *   decode     bytes -> the intermediate: the bytes as they are (bytes
 *              input) or the whole image packed as RGB rows (image input)
 *   transform  intermediate -> op.run -> fields
 * make(b) is transform(decode(b)) byte for byte: the op sees the same
 * input and the same random stream either way. Each use of an item runs
 * the op with the stream hash(seed, epoch, item, NST_RNG_AUGMENT_COPY(copy)).
 *
 * Where the op comes from: nostall_config_set_op() (in process), or the
 * shared library named by op_library (dlopen, its NOSTALL_OP_SYMBOL).
 * The op's create runs here, at loader create, with a sample item (the
 * first of the first NST_OP_SAMPLE_TRIES items that reads and decodes).
 *
 * THREADS  The recipe (and the op's state) is read-only after create; each
 * worker owns its nst_recipe_worker (decoder, the op's worker state).
 * create, create_worker, free_worker and destroy run on the thread that
 * creates or frees the loader.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/rng.h"
#include "decode/decode.h"
#include "nostall_op.h"
#include "recipe/recipe.h"

/* Items tried for create's sample. */
#define NST_OP_SAMPLE_TRIES 16
/* The sample's random stream: a purpose no item's stream uses. */
#define NST_OP_PROBE_PURPOSE 0x70726f6265ULL

_Static_assert(NOSTALL_OP_NAME_MAX == NST_FIELD_NAME_MAX, "op field names fit recipe fields");
_Static_assert(NOSTALL_OP_FIELDS_MAX < NST_FIELDS_MAX, "room for the label after the op's fields");

typedef struct op_recipe {
    nst_recipe base;
    nostall_op op;     /* a copy of the descriptor (the first op.size bytes) */
    void *ctx, *state; /* set_op's ctx; create's state                      */
    void *dl;          /* op_library's handle, or NULL                      */
    int created;       /* create succeeded: destroy at free                 */
    uint32_t nop;      /* the op's fields (the label follows)               */
    uint64_t seed, max_pixels;
    char name[64];
} op_recipe;

struct nst_recipe_worker {
    const op_recipe *r;
    nst_decoder *dec; /* image input only                                  */
    void *opw;        /* the op's worker state                             */
    int has_opw;
};

/* Image intermediate's meta (echo_point=decode). */
typedef struct op_meta {
    uint32_t width, height;
} op_meta;

/* ---- running the op -------------------------------------------------- */

/* A ragged field's actual shape must fit its room; the status of the
 * first that does not. */
static int check_ragged(const op_recipe *r, const nst_item_ctx *c)
{
    for (uint32_t f = 0; f < r->nop; f++) {
        const nst_field_decl *d = &r->base.fields[f];
        if (d->shape_field < 0) continue;
        const uint8_t *sp = c->dst[d->shape_field];
        uint64_t elems = 1, room = d->item_bytes / nst_dtype_size(d->dtype);
        for (uint32_t k = 0; k < d->ndim; k++) {
            int64_t v;
            memcpy(&v, sp + k * sizeof v, sizeof v);
            if (v < 0 || (uint64_t)v > room || (v && elems > room / (uint64_t)v))
                return nst_error(NOSTALL_E_CORRUPT,
                                 "op '%s': %s: field '%s': shape[%u] = %lld does not fit its "
                                 "room of %llu elements",
                                 r->name, c->path, d->name, k, (long long)v,
                                 (unsigned long long)room);
            elems *= (uint64_t)v;
        }
    }
    return 0;
}

/* Run the op on one use of an item whose input is `it`'s. */
static int run_op(nst_recipe_worker *w, const nst_item_ctx *c, nostall_op_item *it,
                  nst_recipe_times *t)
{
    const op_recipe *r = w->r;
    void *dst[NOSTALL_OP_FIELDS_MAX];
    for (uint32_t f = 0; f < r->nop; f++) {
        dst[f] = c->dst[f];
        memset(dst[f], 0, r->base.fields[f].item_bytes);
    }
    it->size = sizeof *it;
    it->index = c->index;
    it->epoch = c->epoch;
    it->copy = c->copy;
    it->nfields = r->nop;
    it->path = c->path;
    it->seed = it->random_state =
        nst_hash4(r->seed, c->epoch, c->index, NST_RNG_AUGMENT_COPY(c->copy));
    it->dst = dst;
    it->message[0] = '\0';
    uint64_t t0 = nst_now_ns();
    int rc = r->op.run(r->state, w->opw, it);
    t->augment_ns += nst_now_ns() - t0;
    if (rc != 0) {
        it->message[sizeof it->message - 1] = '\0';
        if (rc > 0 || strcmp(nostall_status_name(rc), "UNKNOWN") == 0) rc = NOSTALL_E_CORRUPT;
        return nst_error(rc, "op '%s': %s: %s", r->name, c->path,
                         it->message[0] ? it->message : "failed (the op gave no reason)");
    }
    if ((rc = check_ragged(r, c)) < 0) return rc;
    nst_label_write(&r->base, c);
    t->augment_items++;
    t->augment_bytes += r->base.item_bytes;
    return 0;
}

/* The whole image (image input), counted as decode time. */
static int decode_image(nst_recipe_worker *w, const nst_item_ctx *c, const uint8_t *data,
                        size_t len, nst_image *img, nst_recipe_times *t)
{
    nst_image_info info;
    uint64_t t1 = nst_now_ns();
    int rc = nst_decode_probe(w->dec, data, len, c->path, &info);
    if (rc == 0) rc = nst_decode(w->dec, data, len, c->path, NULL, 0, 0, img);
    t->decode_ns += nst_now_ns() - t1;
    if (rc < 0) return rc;
    t->decode_items++;
    t->decode_pixels += (uint64_t)img->width * img->height;
    return 0;
}

static int make(nst_recipe_worker *w, const nst_item_ctx *c, const uint8_t *data, size_t len,
                nst_recipe_times *t)
{
    nostall_op_item it;
    memset(&it, 0, offsetof(nostall_op_item, message));
    if (w->r->op.input == NOSTALL_OP_INPUT_IMAGE) {
        nst_image img;
        int rc = decode_image(w, c, data, len, &img, t);
        if (rc < 0) return rc;
        it.data = img.data;
        it.width = img.width, it.height = img.height, it.stride = img.stride;
        it.len = img.stride * (img.height - 1) + (size_t)img.width * 3;
    } else {
        it.data = data, it.len = len;
    }
    return run_op(w, c, &it, t);
}

/* The intermediate: the bytes (bytes input), or the whole image as packed
 * RGB rows with op_meta. */
static int decode(nst_recipe_worker *w, const nst_item_ctx *c, const uint8_t *data, size_t len,
                  nst_decoded *out, nst_recipe_times *t)
{
    if (w->r->op.input != NOSTALL_OP_INPUT_IMAGE) {
        int rc = nst_buf_reserve(&out->buf, len ? len : 1);
        if (rc < 0) return rc;
        if (len) memcpy(out->buf.data, data, len);
        out->len = len;
        return 0;
    }
    nst_image img;
    int rc = decode_image(w, c, data, len, &img, t);
    size_t row = 0, bytes = 0;
    if (rc == 0 &&
        (nst_mul_overflow(img.width, 3, &row) || nst_mul_overflow(row, img.height, &bytes)))
        rc = nst_error(NOSTALL_E_TOO_MANY_PIXELS, "decode: %s: image too large to echo", c->path);
    if (rc == 0) rc = nst_buf_reserve(&out->buf, bytes ? bytes : 1);
    if (rc < 0) return rc;
    for (uint32_t y = 0; y < img.height; y++)
        memcpy(out->buf.data + (size_t)y * row, img.data + (size_t)y * img.stride, row);
    op_meta m = {img.width, img.height};
    memcpy(out->meta, &m, sizeof m);
    out->len = bytes;
    return 0;
}

static int transform(nst_recipe_worker *w, const nst_item_ctx *c, const nst_decoded *in,
                     nst_recipe_times *t)
{
    nostall_op_item it;
    memset(&it, 0, offsetof(nostall_op_item, message));
    it.data = in->buf.data;
    it.len = in->len;
    if (w->r->op.input == NOSTALL_OP_INPUT_IMAGE) {
        op_meta m;
        memcpy(&m, in->meta, sizeof m);
        it.width = m.width, it.height = m.height, it.stride = (size_t)m.width * 3;
    }
    return run_op(w, c, &it, t);
}

static int worker_create(const nst_recipe *base, nst_recipe_worker **out)
{
    const op_recipe *r = (const op_recipe *)base;
    nst_recipe_worker *w = calloc(1, sizeof *w);
    int rc = 0;
    *out = NULL;
    if (!w) return nst_error(NOSTALL_E_NOMEM, "recipe: out of memory");
    w->r = r;
    if (r->op.input == NOSTALL_OP_INPUT_IMAGE &&
        (rc = nst_decoder_create(&w->dec, r->max_pixels)) < 0)
        goto fail;
    if (r->op.create_worker) {
        rc = r->op.create_worker(r->state, &w->opw);
        if (rc != 0) {
            rc = nst_error(rc < 0 ? rc : NOSTALL_E_INVALID, "op '%s': create_worker failed (%d)",
                           r->name, rc);
            goto fail;
        }
        w->has_opw = 1;
    }
    *out = w;
    return 0;
fail:
    nst_decoder_free(w->dec);
    free(w);
    return rc;
}

static void worker_free(nst_recipe_worker *w)
{
    if (!w) return;
    if (w->has_opw && w->r->op.free_worker) w->r->op.free_worker(w->r->state, w->opw);
    nst_decoder_free(w->dec);
    free(w);
}

/* With image input the worker's decoder may rewrite JPEGs for the cache
 * (cache_transcode: same pixels); with bytes input the op sees the bytes,
 * which must stay as fetched. */
static void *decoder(nst_recipe_worker *w) { return w->dec; }

static void recipe_free(nst_recipe *base)
{
    op_recipe *r = (op_recipe *)base;
    if (r->created && r->op.destroy) r->op.destroy(r->state);
    if (r->dl) dlclose(r->dl);
    free(r);
}

static const nst_recipe_ops op_ops = {
    .name = "op",
    .worker_create = worker_create,
    .worker_free = worker_free,
    .make = make,
    .decode = decode,
    .transform = transform,
    .decoder = decoder,
    .free = recipe_free,
};

/* ---- finding the op --------------------------------------------------- */

/* A descriptor's version, size and required functions. */
static int check_op(const nostall_op *op, const char *where)
{
    if (op->version != NOSTALL_OP_VERSION)
        return nst_error(NOSTALL_E_UNSUPPORTED,
                         "%s: op interface version %u, this nostall runs version %d", where,
                         op->version, NOSTALL_OP_VERSION);
    if (op->size < offsetof(nostall_op, run) + sizeof op->run)
        return nst_error(NOSTALL_E_INVALID, "%s: nostall_op.size %u is smaller than version %d's",
                         where, op->size, NOSTALL_OP_VERSION);
    if (!op->create || !op->run)
        return nst_error(NOSTALL_E_INVALID, "%s: the op has no %s function", where,
                         op->create ? "run" : "create");
    if (op->input != NOSTALL_OP_INPUT_BYTES && op->input != NOSTALL_OP_INPUT_IMAGE)
        return nst_error(NOSTALL_E_INVALID,
                         "%s: unknown input %u (NOSTALL_OP_INPUT_BYTES or "
                         "NOSTALL_OP_INPUT_IMAGE)",
                         where, op->input);
    return 0;
}

int nostall_config_set_op(nostall_config *cfg, const nostall_op *op, void *ctx)
{
    static const char fn[] = "nostall_config_set_op";
    nst_error_clear();
    if (!cfg) return nst_error(NOSTALL_E_INVALID, "%s: cfg is NULL", fn);
    if (op) {
        int rc = check_op(op, fn);
        if (rc < 0) return rc;
    }
    cfg->op = op;
    cfg->op_ctx = op ? ctx : NULL;
    return 0;
}

/* The op of op_library: dlopen it and copy its NOSTALL_OP_SYMBOL. */
static int load_library(op_recipe *r, const char *lib)
{
    char where[NOSTALL_PATH_MAX + 32];
    snprintf(where, sizeof where, "op_library '%s'", lib);
    /* A path with a '/' is a file; a bare name is a file in the current
     * folder if there is one, else searched as dlopen does (an installed
     * library: LD_LIBRARY_PATH, the cache, /lib, /usr/lib). */
    struct stat st;
    char local[NOSTALL_PATH_MAX + 3];
    const int file = stat(lib, &st) == 0;
    if (strchr(lib, '/') && !file) return nst_error(NOSTALL_E_NOT_FOUND, "%s: no such file", where);
    snprintf(local, sizeof local, "%s%s", file && !strchr(lib, '/') ? "./" : "", lib);
    dlerror();
    r->dl = dlopen(local, RTLD_NOW | RTLD_LOCAL);
    if (!r->dl) {
        const char *e = dlerror();
        return nst_error(file ? NOSTALL_E_INVALID : NOSTALL_E_NOT_FOUND, "%s: cannot load it: %s",
                         where, e ? e : "dlopen failed");
    }
    const nostall_op *op = (const nostall_op *)dlsym(r->dl, NOSTALL_OP_SYMBOL);
    if (!op)
        return nst_error(NOSTALL_E_INVALID,
                         "%s: no symbol %s (an op library exports "
                         "'NOSTALL_OP_EXPORT const nostall_op " NOSTALL_OP_SYMBOL "', nostall_op.h)",
                         where, NOSTALL_OP_SYMBOL);
    int rc = check_op(op, where);
    if (rc < 0) return rc;
    memcpy(&r->op, op, op->size < sizeof r->op ? op->size : sizeof r->op);
    return 0;
}

/* ---- create ------------------------------------------------------------ */

/* The bytes of a local regular file, at most `max` (never blocks on a
 * FIFO). 0 with *out (malloc'd) and *len, or -1. */
static int read_file(const char *path, uint64_t max, uint8_t **out, size_t *len)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0) return -1;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
        (uint64_t)st.st_size > max || !(*out = malloc((size_t)st.st_size))) {
        close(fd);
        return -1;
    }
    size_t got = 0, n = (size_t)st.st_size;
    while (got < n) {
        ssize_t k = pread(fd, *out + got, n - got, (off_t)got);
        if (k <= 0) break;
        got += (size_t)k;
    }
    close(fd);
    if (got != n) {
        free(*out);
        return -1;
    }
    *len = n;
    return 0;
}

/* create's sample: the first of the first items that reads (and decodes,
 * image input) into `it`, with *file (free it) and *dec holding its data;
 * it->data NULL if none. */
static void make_sample(op_recipe *r, const nostall_config *cfg, nostall_op_item *it,
                        uint8_t **file, nst_decoder **dec)
{
    uint64_t n = nst_index_count(r->base.index);
    memset(it, 0, sizeof *it);
    *file = NULL;
    *dec = NULL;
    if (r->op.input == NOSTALL_OP_INPUT_IMAGE && nst_decoder_create(dec, r->max_pixels) < 0) {
        nst_error_clear();
        return;
    }
    for (uint64_t i = 0; i < n && i < NST_OP_SAMPLE_TRIES; i++) {
        const char *path = nst_index_path(r->base.index, i);
        size_t len = 0;
        if (strstr(path, "://") ||
            read_file(path, cfg->v[NOSTALL_OPT_MAX_FILE_BYTES].u, file, &len) < 0)
            continue;
        it->data = *file, it->len = len;
        if (*dec) {
            nst_image_info info;
            nst_image img;
            if (nst_decode_probe(*dec, *file, len, path, &info) < 0 ||
                nst_decode(*dec, *file, len, path, NULL, 0, 0, &img) < 0) {
                nst_error_clear();
                free(*file);
                *file = NULL;
                it->data = NULL;
                continue;
            }
            it->data = img.data, it->len = img.stride * (img.height - 1) + (size_t)img.width * 3;
            it->width = img.width, it->height = img.height, it->stride = img.stride;
        }
        it->size = sizeof *it;
        it->index = i;
        it->path = path;
        it->seed = it->random_state = nst_hash4(r->seed, 0, i, NST_OP_PROBE_PURPOSE);
        return;
    }
}

/* One declared field, checked and copied into the recipe's field i. */
static int take_field(op_recipe *r, const nostall_op_setup *s, uint32_t i)
{
    const nostall_op_field *f = &s->fields[i];
    nst_field_decl *d = &r->base.fields[i];
    size_t nlen = strnlen(f->name, sizeof f->name);
    if (nlen == 0 || nlen == sizeof f->name)
        return nst_error(NOSTALL_E_INVALID, "op '%s': field %u: a name of 1 to %d characters",
                         r->name, i, NOSTALL_OP_NAME_MAX - 1);
    for (size_t k = 0; k < nlen; k++) {
        char ch = f->name[k];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_'))
            return nst_error(NOSTALL_E_INVALID,
                             "op '%s': field %u: name '%.*s' may hold only letters, digits, '_'",
                             r->name, i, (int)nlen, f->name);
    }
    for (uint32_t j = 0; j < i; j++)
        if (strcmp(r->base.fields[j].name, f->name) == 0)
            return nst_error(NOSTALL_E_INVALID, "op '%s': field '%s' declared twice", r->name,
                             f->name);
    if (!nst_dtype_size(f->dtype) || f->ndim > NOSTALL_FIELD_DIMS)
        return nst_error(NOSTALL_E_INVALID, "op '%s': field '%s': dtype %d or ndim %u unknown",
                         r->name, f->name, (int)f->dtype, f->ndim);
    memset(d, 0, sizeof *d);
    memcpy(d->name, f->name, nlen);
    d->dtype = f->dtype;
    d->ndim = f->ndim;
    for (uint32_t k = 0; k < f->ndim; k++) {
        if (f->shape[k] == 0)
            return nst_error(NOSTALL_E_INVALID, "op '%s': field '%s': shape[%u] is 0", r->name,
                             f->name, k);
        d->shape[k] = f->shape[k];
    }
    d->shape_field = f->shape_field;
    if (f->shape_field >= 0) {
        const nostall_op_field *sf =
            (uint32_t)f->shape_field < s->nfields ? &s->fields[f->shape_field] : NULL;
        if (!sf || (uint32_t)f->shape_field == i || sf->dtype != NOSTALL_DTYPE_INT64 ||
            sf->ndim != 1 || sf->shape[0] != f->ndim || sf->shape_field >= 0)
            return nst_error(NOSTALL_E_INVALID,
                             "op '%s': field '%s': shape_field %d is not another field of the "
                             "op, INT64 of shape [%u] (the ragged field's ndim)",
                             r->name, f->name, f->shape_field, f->ndim);
    } else {
        d->shape_field = -1;
    }
    return nst_field_finish(d);
}

/* The op's declarations into the recipe's fields, then the label. */
static int take_fields(op_recipe *r, const nostall_op_setup *s, const char *source)
{
    if (s->nfields == 0 || s->nfields > NOSTALL_OP_FIELDS_MAX)
        return nst_error(NOSTALL_E_INVALID, "op '%s': declared %u fields (1 to %d)", r->name,
                         s->nfields, NOSTALL_OP_FIELDS_MAX);
    if (s->image_field >= s->nfields)
        return nst_error(NOSTALL_E_INVALID, "op '%s': image_field %u, but %u fields declared",
                         r->name, s->image_field, s->nfields);
    int rc;
    for (uint32_t i = 0; i < s->nfields; i++)
        if ((rc = take_field(r, s, i)) < 0) return rc;
    r->nop = r->base.nfields = s->nfields;
    if ((rc = nst_label_declare(&r->base, source)) < 0) return rc;
    for (uint32_t i = 0; i < r->nop && r->base.label_field != UINT32_MAX; i++)
        if (strcmp(r->base.fields[i].name, "label") == 0)
            return nst_error(NOSTALL_E_INVALID,
                             "op '%s': declares a field 'label', but nostall adds the items' "
                             "labels as 'label' (name it otherwise)",
                             r->name);
    r->base.item_bytes = 0;
    for (uint32_t f = 0; f < r->base.nfields; f++)
        r->base.item_bytes += r->base.fields[f].item_bytes;
    r->base.image_field = s->image_field;
    return 0;
}

/* The op's create, with its inputs and a sample item. */
static int create_op(op_recipe *r, const nostall_config *cfg, const char *args, nostall_op_setup *s)
{
    const nst_optval *v = cfg->v;
    nostall_op_item sample;
    uint8_t *file;
    nst_decoder *dec;
    memset(s, 0, sizeof *s);
    s->size = sizeof *s;
    s->args = args;
    s->task = (uint32_t)v[NOSTALL_OPT_TASK].u;
    s->train = v[NOSTALL_OPT_MODE].u == NOSTALL_MODE_TRAIN;
    s->seed = r->seed;
    s->crop = (uint32_t)v[NOSTALL_OPT_CROP].u;
    s->out_height = (uint32_t)v[NOSTALL_OPT_OUT_HEIGHT].u;
    s->out_width = (uint32_t)v[NOSTALL_OPT_OUT_WIDTH].u;
    make_sample(r, cfg, &sample, &file, &dec);
    s->sample = sample.data ? &sample : NULL;
    void *state = NULL;
    int rc = r->op.create(r->ctx, s, &state);
    free(file);
    nst_decoder_free(dec);
    if (rc != 0) {
        s->message[sizeof s->message - 1] = '\0';
        if (rc > 0 || strcmp(nostall_status_name(rc), "UNKNOWN") == 0) rc = NOSTALL_E_INVALID;
        return nst_error(rc, "op '%s': create failed: %s", r->name,
                         s->message[0] ? s->message : "(the op gave no reason)");
    }
    r->state = state;
    r->created = 1;
    return 0;
}

/* What defines the items: the index, the op and its declarations. */
static void fingerprint(op_recipe *r, const char *args)
{
    uint64_t h = nst_index_fingerprint(r->base.index);
    nostall_checksum_update(&h, r->name, strlen(r->name) + 1);
    nostall_checksum_update(&h, &r->op.version, sizeof r->op.version);
    nostall_checksum_update(&h, &r->op.input, sizeof r->op.input);
    nostall_checksum_update(&h, args, strlen(args) + 1);
    for (uint32_t f = 0; f < r->base.nfields; f++) {
        const nst_field_decl *d = &r->base.fields[f];
        nostall_checksum_update(&h, d->name, strlen(d->name) + 1);
        uint64_t desc[3 + NOSTALL_FIELD_DIMS] = {(uint64_t)d->dtype, d->ndim,
                                                 (uint64_t)(int64_t)d->shape_field};
        memcpy(desc + 3, d->shape, sizeof d->shape);
        nostall_checksum_update(&h, desc, sizeof desc);
    }
    r->base.fingerprint = h ? h : 1;
}

int nst_op_recipe_create(nst_recipe **out, const nostall_config *cfg, const char *source)
{
    const nst_optval *v = cfg->v;
    const char *lib = nst_config_path(cfg, NOSTALL_OPT_OP_LIBRARY);
    const char *args = nst_config_path(cfg, NOSTALL_OPT_OP_ARGS);
    uint64_t task = v[NOSTALL_OPT_TASK].u;
    int rc;
    *out = NULL;
    if (cfg->op && lib[0])
        return nst_error(NOSTALL_E_OPTION,
                         "op_library '%s' and an op set by "
                         "nostall_config_set_op: one op per loader",
                         lib);
    if (!cfg->op && !lib[0])
        return nst_error(NOSTALL_E_OPTION, "op_args '%s' without an op (op_library)", args);
    if (task != NOSTALL_TASK_CLASSIFY && task != NOSTALL_TASK_BYTES)
        return nst_error(NOSTALL_E_UNSUPPORTED,
                         "an op runs with task=classify or task=bytes, "
                         "not task=%s",
                         task == NOSTALL_TASK_DETECT ? "detect" : "tokens");
    op_recipe *r = calloc(1, sizeof *r);
    if (!r) return nst_error(NOSTALL_E_NOMEM, "recipe: out of memory");
    r->base.ops = &op_ops;
    r->base.size_hint = "the op's fields (its output size)";
    r->base.label_field = UINT32_MAX;
    r->seed = v[NOSTALL_OPT_SEED].u;
    r->max_pixels = v[NOSTALL_OPT_MAX_PIXELS].u;
    if (cfg->op) {
        memcpy(&r->op, cfg->op, cfg->op->size < sizeof r->op ? cfg->op->size : sizeof r->op);
        r->ctx = cfg->op_ctx;
    } else if ((rc = load_library(r, lib)) < 0) {
        goto fail;
    }
    snprintf(r->name, sizeof r->name, "%s", r->op.name && r->op.name[0] ? r->op.name : "op");
    rc = task == NOSTALL_TASK_BYTES
             ? nst_index_build_cfg(&r->base.index, source, NST_INDEX_ANY_NAME, cfg)
             : nst_index_build_cfg(&r->base.index, source, 0, cfg);
    if (rc < 0) goto fail;
    nst_recipe_items_from_index(&r->base);
    nostall_op_setup s;
    if ((rc = create_op(r, cfg, args, &s)) < 0 || (rc = take_fields(r, &s, source)) < 0) goto fail;
    fingerprint(r, args);
    *out = &r->base;
    return 0;
fail:
    nst_recipe_free(&r->base);
    return rc;
}
