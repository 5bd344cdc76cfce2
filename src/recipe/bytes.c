/*
 * bytes.c — the task=bytes recipe: each item's bytes as fetched, and its
 * label; the escape hatch for any format the user decodes in Python or C,
 * still with the cache, echoing, coordinated prep and the analyzer.
 *
 * SOURCE  A folder whose every file is an item (DatasetFolder of any files:
 *   dataset/index.h with NST_INDEX_ANY_NAME; class sub-folders give the
 *   labels, hidden files and files at the root are left out and counted),
 *   or a list of paths or URLs with optional labels (int, float, several:
 *   as for classification).
 *
 * FIELDS  "data" uint8 [room], ragged: item i's bytes packed from the start
 *   of its place, the rest of the place zeroed (so a batch's bytes, and the
 *   checksum, depend only on the items); "length" int64 [1]: the item's
 *   byte count (data's shape_field); "label" by the list's kind (none for a
 *   list of paths alone). The room is the size of the largest regular file
 *   found by stat() at create that is within max_file_bytes; with any
 *   http(s) item, max_file_bytes itself (their size is not known before
 *   they are fetched). A file larger than the room when fetched (it grew,
 *   or a URL over max_file_bytes) is a bad item naming its size and the
 *   room; a file over max_file_bytes is a bad item at fetch, as for every
 *   task. The ring holds slots x batch_size rooms: a few large files among
 *   small ones make every place large (the loader refuses a ring that does
 *   not fit memory, with the figures).
 *
 * STAGES  make: copy; decode: the bytes as fetched (the echo store's
 *   intermediate); transform: copy. No random draw: every echo point
 *   repeats the same bytes.
 *
 * Workers call the stages concurrently, each with its own (empty) worker
 * struct; the recipe is read-only after create.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/clock.h"
#include "common/error.h"
#include "recipe/recipe.h"
#include "source/http.h"
#include "source/reader.h"

typedef struct bytes_recipe {
    nst_recipe base;
    uint64_t room;
} bytes_recipe;

struct nst_recipe_worker {
    const bytes_recipe *r;
};

/* The item's fields from its bytes. */
static int write_item(const bytes_recipe *r, const nst_item_ctx *c, const uint8_t *data, size_t len,
                      nst_recipe_times *t)
{
    if (len > r->room)
        return nst_error(NOSTALL_E_FILE_TOO_LARGE,
                         "bytes: %s: %zu bytes, over the item's room of %llu bytes (the largest "
                         "file found when the loader was created: did the file grow?)",
                         NST_MSG_PATH(c->path), len, (unsigned long long)r->room);
    uint64_t t0 = nst_now_ns();
    if (len) memcpy(c->dst[0], data, len);
    memset(c->dst[0] + len, 0, (size_t)r->room - len);
    int64_t n = (int64_t)len;
    memcpy(c->dst[1], &n, sizeof n);
    nst_label_write(&r->base, c);
    t->augment_ns += nst_now_ns() - t0;
    t->augment_items++;
    t->augment_bytes += len;
    return 0;
}

static int make(nst_recipe_worker *w, const nst_item_ctx *c, const uint8_t *data, size_t len,
                nst_recipe_times *t)
{
    return write_item(w->r, c, data, len, t);
}

static int decode(nst_recipe_worker *w, const nst_item_ctx *c, const uint8_t *data, size_t len,
                  nst_decoded *out, nst_recipe_times *t)
{
    uint64_t t0 = nst_now_ns();
    if (len > w->r->room) return write_item(w->r, c, data, len, t); /* the same error */
    int rc = nst_buf_reserve(&out->buf, len ? len : 1);
    if (rc < 0) return rc;
    if (len) memcpy(out->buf.data, data, len);
    out->len = len;
    t->decode_ns += nst_now_ns() - t0;
    t->decode_items++;
    return 0;
}

static int transform(nst_recipe_worker *w, const nst_item_ctx *c, const nst_decoded *in,
                     nst_recipe_times *t)
{
    return write_item(w->r, c, in->buf.data, in->len, t);
}

static int worker_create(const nst_recipe *base, nst_recipe_worker **out)
{
    nst_recipe_worker *w = calloc(1, sizeof *w);
    *out = NULL;
    if (!w) return nst_error(NOSTALL_E_NOMEM, "recipe: out of memory");
    w->r = (const bytes_recipe *)base;
    *out = w;
    return 0;
}

static void worker_free(nst_recipe_worker *w) { free(w); }

static void recipe_free(nst_recipe *r) { free(r); }

static const nst_recipe_ops bytes_ops = {
    .name = "bytes",
    .worker_create = worker_create,
    .worker_free = worker_free,
    .make = make,
    .decode = decode,
    .transform = transform,
    .free = recipe_free,
};

/* The room: the largest item within max_file_bytes — a shard member's
 * length from the index, a regular file's size (stat, symlinks followed;
 * what cannot be stat'ed fails at fetch with its reason) — or
 * max_file_bytes with any whole-file URL. At least 1. */
static uint64_t find_room(const nst_index *ix, uint64_t max_bytes)
{
    uint64_t room = 1, n = nst_index_count(ix);
    for (uint64_t i = 0; i < n; i++) {
        const char *p = nst_index_path(ix, i);
        struct stat st;
        uint64_t off, len;
        if (nst_index_range(ix, i, &off, &len) == 1) {
            if (len <= max_bytes && len > room) room = len;
            continue;
        }
        if (nst_http_handles(p)) return max_bytes;
        if (stat(p, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size <= max_bytes &&
            (uint64_t)st.st_size > room)
            room = (uint64_t)st.st_size;
    }
    return room;
}

int nst_bytes_create(nst_recipe **out, const nostall_config *cfg, const char *source)
{
    const nst_optval *v = cfg->v;
    int rc;
    *out = NULL;
    bytes_recipe *r = calloc(1, sizeof *r);
    if (!r) return nst_error(NOSTALL_E_NOMEM, "recipe: out of memory");
    r->base.ops = &bytes_ops;
    r->base.size_hint = "max_file_bytes (each item's room is the largest file's size)";
    if ((rc = nst_index_build_cfg(&r->base.index, source, NST_INDEX_ANY_NAME, cfg)) < 0) goto fail;
    nst_recipe_items_from_index(&r->base);
    r->room = find_room(r->base.index, v[NOSTALL_OPT_MAX_FILE_BYTES].u);
    nst_field_decl *data = &r->base.fields[0], *len = &r->base.fields[1];
    snprintf(data->name, sizeof data->name, "data");
    data->dtype = NOSTALL_DTYPE_UINT8;
    data->ndim = 1;
    data->shape[0] = r->room;
    data->shape_field = 1;
    snprintf(len->name, sizeof len->name, "length");
    len->dtype = NOSTALL_DTYPE_INT64;
    len->ndim = 1;
    len->shape[0] = 1;
    len->shape_field = -1;
    r->base.nfields = 2;
    if ((rc = nst_field_finish(data)) < 0 || (rc = nst_field_finish(len)) < 0 ||
        (rc = nst_label_declare(&r->base, source)) < 0)
        goto fail;
    r->base.item_bytes = 0;
    for (uint32_t f = 0; f < r->base.nfields; f++)
        r->base.item_bytes += r->base.fields[f].item_bytes;
    r->base.image_field = 0;
    *out = &r->base;
    return 0;
fail:
    nst_recipe_free(&r->base);
    return rc;
}
