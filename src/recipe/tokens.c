/*
 * tokens.c — the task=tokens recipe: windows of a flat token file, for
 * language modelling (nanoGPT's train.bin, or a .npy).
 *
 * SOURCE  One local file: raw little-endian tokens (token_dtype uint16, the
 *   default, or uint32), or a .npy (recognised by its magic bytes, whatever
 *   its name) whose header gives the element type: '<u2', '<u4', '<i4' or
 *   '<i8', 1-D, C or Fortran order (the same for 1-D). A raw file whose size
 *   is not a whole number of tokens, a .npy whose data is not exactly its
 *   shape, a file of fewer than context_length + 1 tokens, other .npy
 *   element types and http(s) URLs are refused at create (E_DATASET or
 *   E_UNSUPPORTED, naming the file, its size and what was expected).
 *
 * ITEMS  N tokens, L = context_length. An item is a window of L + 1 tokens,
 *   and an epoch has (N - 1) / L of them (one pass over the corpus: as many
 *   windows as fit end to end with stride L). Window starts:
 *     windows=random  item i of epoch e starts at
 *                     below(N - L) of the stream hash4(seed, e, i,
 *                     NST_RNG_WINDOW) (rng.h), uniform over
 *                     [0, N - L - 1]; the echo copy is not an input, so an
 *                     echoed window is the same window;
 *     windows=chunks  item i starts at i * L: chunks of L + 1 tokens with
 *                     stride L (each overlaps the next by one token, as
 *                     nanoGPT's x and y do, so every token but the first is
 *                     a target exactly once per epoch), delivered in the
 *                     sampler's permuted order.
 *   Fields: targets=1 "tokens" int64 [L] (the window's first L) and
 *   "targets" int64 [L] (its last L: the window shifted by one); targets=0
 *   "tokens" int64 [L + 1]. No label.
 *
 * READS AND CACHE KEYS  Without a cache (cache_bytes 0 and no peer cache),
 *   an item reads exactly its window's (L + 1) x size bytes. The caches
 *   keep bytes by key, and a key must always mean the same bytes, so with a
 *   cache: chunks mode keys each chunk (item i = key i: the window itself);
 *   random mode, whose windows overlap anywhere, reads and keys *units*:
 *   unit u holds the windows starting in [u C, (u + 1) C) and is tokens
 *   [u C, min(u C + C + L, N)), with C = 64 (L + 1) (smaller if a unit would
 *   exceed max_file_bytes). The first read of a unit costs C + L tokens for
 *   one window; once the corpus is cached (N + (units - 1) L tokens: about
 *   1 + 1/64 times its bytes) no window reads storage again. A MinIO cache
 *   smaller than that is refused at create in random mode: it would keep
 *   the units that came first, and every window of another unit would read
 *   its whole unit (about 65 windows' worth), far more than no cache
 *   (docs/tokens.md has the figures). make accepts what was fetched as the
 *   range asked for, the window alone, or the whole file.
 *
 * STAGES  make: pick the window out of the fetched bytes and widen it to
 *   int64. decode: the window's raw tokens (the echo store's intermediate at
 *   echo_point=decode); transform: widen them. There is no augmentation, so
 *   every echo point repeats the same window.
 *
 * Workers call the stages concurrently, each with its own (empty) worker
 * struct; the recipe is read-only after create.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/rng.h"
#include "dataset/npy.h"
#include "recipe/recipe.h"
#include "source/http.h"
#include "source/reader.h"

/* The purpose of the window-start stream (apart from rng.h's purposes). */
/* Random mode with a cache: windows per cache unit (of starts). */
#define NST_TOKENS_UNIT_WINDOWS 64

static const char *const tok_names[] = {"uint16", "uint32", "int32", "int64"};
static const uint32_t tok_sizes[] = {2, 4, 4, 8};

/* ---- the recipe ---------------------------------------------------------- */

typedef struct tokens {
    nst_recipe base;
    uint64_t seed;
    uint64_t ntok;        /* N: tokens in the file                       */
    uint64_t data_offset; /* bytes before token 0 (a .npy header)        */
    uint64_t file_bytes;  /* the file's size at create                   */
    uint64_t L;           /* context_length                              */
    uint64_t unit;        /* C: window starts per cache unit (random)    */
    uint32_t tsize;       /* bytes per token                             */
    int kind;             /* NST_TOK_*                                   */
    int chunks, targets;
    int unit_reads; /* random mode with a cache: read whole units  */
} tokens;

struct nst_recipe_worker {
    const tokens *r;
};

/* The first token of item `index`'s window in `epoch`. */
static uint64_t window_start(const tokens *r, uint64_t epoch, uint64_t index)
{
    if (r->chunks) return index * r->L;
    nst_rng rng;
    nst_rng_seed(&rng, nst_hash4(r->seed, epoch, index, NST_RNG_WINDOW));
    return nst_rng_below(&rng, r->ntok - r->L);
}

/* What is read for a window starting at token s: tokens [*first, *first +
 * *n), cached under *key. */
static void read_range(const tokens *r, uint64_t s, uint64_t index, uint64_t *first, uint64_t *n,
                       uint64_t *key)
{
    if (r->chunks) {
        *first = s, *n = r->L + 1, *key = index;
        return;
    }
    uint64_t u = s / r->unit;
    *key = u;
    if (!r->unit_reads) {
        *first = s, *n = r->L + 1;
        return;
    }
    *first = u * r->unit;
    uint64_t end = *first + r->unit + r->L;
    *n = (end < r->ntok ? end : r->ntok) - *first;
}

static void locate(const nst_recipe *base, uint64_t epoch, uint64_t index, nst_item_loc *out)
{
    const tokens *r = (const tokens *)base;
    uint64_t first, n, key;
    read_range(r, window_start(r, epoch, index), index, &first, &n, &key);
    *out = (nst_item_loc){.path = nst_index_path(base->index, 0),
                          .offset = r->data_offset + first * r->tsize,
                          .length = n * r->tsize,
                          .key = key};
}

/* The window's raw tokens in the fetched bytes: the range locate asked
 * for, the window alone (a fetch that read only the part it needed), or
 * the whole file (a fetch stage that reads whole files). */
static int window_bytes(const tokens *r, const nst_item_ctx *c, const uint8_t *data, size_t len,
                        const uint8_t **out)
{
    uint64_t s = window_start(r, c->epoch, c->index), first, n, key;
    read_range(r, s, c->index, &first, &n, &key);
    if (data && len == n * r->tsize) {
        *out = data + (s - first) * r->tsize;
        return 0;
    }
    if (data && len == (r->L + 1) * r->tsize) { /* the window alone */
        *out = data;
        return 0;
    }
    if (data && len == r->file_bytes) {
        *out = data + r->data_offset + s * r->tsize;
        return 0;
    }
    return nst_error(NOSTALL_E_TRUNCATED,
                     "tokens: %s: %zu bytes fetched for the window at token %llu, expected "
                     "%llu (did the file change since the loader was created?)",
                     NST_MSG_PATH(c->path), len, (unsigned long long)s,
                     (unsigned long long)(n * r->tsize));
}

/* n little-endian tokens at src (any alignment) as int64. */
static void widen(int kind, const uint8_t *src, uint64_t n, uint8_t *dst8)
{
    int64_t *dst = (int64_t *)(void *)dst8;
    switch (kind) {
    case NST_TOK_U16:
        for (uint64_t i = 0; i < n; i++)
            dst[i] = (int64_t)((uint32_t)src[2 * i] | (uint32_t)src[2 * i + 1] << 8);
        break;
    case NST_TOK_U32:
        for (uint64_t i = 0; i < n; i++) {
            const uint8_t *p = src + 4 * i;
            dst[i] = (int64_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                               (uint32_t)p[3] << 24);
        }
        break;
    case NST_TOK_I32:
        for (uint64_t i = 0; i < n; i++) {
            const uint8_t *p = src + 4 * i;
            dst[i] = (int64_t)(int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 |
                                        (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        }
        break;
    default:
        for (uint64_t i = 0; i < n; i++) {
            uint64_t v = 0;
            for (int b = 7; b >= 0; b--) v = v << 8 | src[8 * i + (uint64_t)b];
            dst[i] = (int64_t)v;
        }
    }
}

/* The item's fields from its window's raw tokens. */
static void write_fields(const tokens *r, const nst_item_ctx *c, const uint8_t *win,
                         nst_recipe_times *t)
{
    uint64_t t0 = nst_now_ns();
    if (r->targets) {
        widen(r->kind, win, r->L, c->dst[0]);
        widen(r->kind, win + r->tsize, r->L, c->dst[1]);
    } else {
        widen(r->kind, win, r->L + 1, c->dst[0]);
    }
    t->augment_ns += nst_now_ns() - t0;
    t->augment_items++;
    t->augment_bytes += r->base.item_bytes;
}

static int make(nst_recipe_worker *w, const nst_item_ctx *c, const uint8_t *data, size_t len,
                nst_recipe_times *t)
{
    const uint8_t *win;
    int rc = window_bytes(w->r, c, data, len, &win);
    if (rc < 0) return rc;
    write_fields(w->r, c, win, t);
    return 0;
}

/* The intermediate: the window's L + 1 raw tokens. */
static int decode(nst_recipe_worker *w, const nst_item_ctx *c, const uint8_t *data, size_t len,
                  nst_decoded *out, nst_recipe_times *t)
{
    const tokens *r = w->r;
    const uint8_t *win;
    uint64_t t0 = nst_now_ns();
    size_t n = (size_t)(r->L + 1) * r->tsize;
    int rc = window_bytes(r, c, data, len, &win);
    if (rc == 0) rc = nst_buf_reserve(&out->buf, n);
    if (rc < 0) return rc;
    memcpy(out->buf.data, win, n);
    out->len = n;
    t->decode_ns += nst_now_ns() - t0;
    t->decode_items++;
    return 0;
}

static int transform(nst_recipe_worker *w, const nst_item_ctx *c, const nst_decoded *in,
                     nst_recipe_times *t)
{
    if (in->len != (size_t)(w->r->L + 1) * w->r->tsize)
        return nst_error(NOSTALL_E_INVALID, "tokens: %s: intermediate of %zu bytes",
                         NST_MSG_PATH(c->path), in->len);
    write_fields(w->r, c, in->buf.data, t);
    return 0;
}

static int worker_create(const nst_recipe *base, nst_recipe_worker **out)
{
    nst_recipe_worker *w = calloc(1, sizeof *w);
    *out = NULL;
    if (!w) return nst_error(NOSTALL_E_NOMEM, "recipe: out of memory");
    w->r = (const tokens *)base;
    *out = w;
    return 0;
}

static void worker_free(nst_recipe_worker *w) { free(w); }

static void recipe_free(nst_recipe *r) { free(r); }

static const nst_recipe_ops tokens_ops = {
    .name = "tokens",
    .locate = locate,
    .worker_create = worker_create,
    .worker_free = worker_free,
    .make = make,
    .decode = decode,
    .transform = transform,
    .free = recipe_free,
};

/* Read bytes [0, n) of fd into buf (n small: a header). */
static int read_head(int fd, const char *path, uint8_t *buf, size_t n)
{
    size_t have = 0;
    while (have < n) {
        ssize_t k = pread(fd, buf + have, n - have, (off_t)have);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0)
            return nst_error(NOSTALL_E_IO, "task=tokens: %s: read error: %s", NST_MSG_PATH(path),
                             strerror(errno));
        if (k == 0)
            return nst_error(NOSTALL_E_TRUNCATED, "task=tokens: %s: the file shrank while read",
                             NST_MSG_PATH(path));
        have += (size_t)k;
    }
    return 0;
}

/* The file's layout: r->kind, tsize, data_offset, ntok, file_bytes. */
static int read_layout(tokens *r, const char *path, uint64_t token_dtype)
{
    int fd = -1, rc;
    size_t size = 0;
    uint8_t *head = NULL;
    if ((rc = nst_open_item(path, UINT64_MAX, &fd, &size)) < 0) return rc;
    r->file_bytes = size;
    uint8_t small[12];
    size_t n = size < sizeof small ? size : sizeof small;
    nst_npy npy;
    uint64_t need = 0;
    char why[256];
    if ((rc = read_head(fd, path, small, n)) < 0) goto out;
    int p = nst_npy_parse(small, n, &npy, &need, why, sizeof why);
    if (p == 1 && need > n && need <= size) {
        if (!(head = malloc(need))) {
            rc = nst_error(NOSTALL_E_NOMEM, "task=tokens: out of memory");
            goto out;
        }
        if ((rc = read_head(fd, path, head, need)) < 0) goto out;
        p = nst_npy_parse(head, need, &npy, &need, why, sizeof why);
    }
    int is_npy = n >= 6 && memcmp(small, "\x93NUMPY", 6) == 0;
    if (is_npy && p != 0) {
        if (p == 1)
            snprintf(why, sizeof why, ".npy header of %llu bytes, the file has %zu",
                     (unsigned long long)need, size);
        rc = nst_error(NOSTALL_E_DATASET, "task=tokens: %s: %s", NST_MSG_PATH(path), why);
        goto out;
    }
    if (is_npy) {
        static const uint64_t want[] = {NOSTALL_TOKEN_UINT16, NOSTALL_TOKEN_UINT32};
        if (token_dtype != NOSTALL_TOKEN_AUTO &&
            (npy.kind > NST_TOK_U32 || want[npy.kind] != token_dtype)) {
            rc = nst_error(NOSTALL_E_DATASET,
                           "task=tokens: %s: the .npy holds %s tokens, token_dtype=%s (use "
                           "token_dtype=auto)",
                           NST_MSG_PATH(path), tok_names[npy.kind],
                           token_dtype == NOSTALL_TOKEN_UINT16 ? "uint16" : "uint32");
            goto out;
        }
        r->kind = npy.kind;
        r->tsize = tok_sizes[r->kind];
        r->data_offset = npy.data_offset;
        uint64_t data = size - npy.data_offset;
        if (npy.count > data / r->tsize || data != npy.count * r->tsize) {
            rc = nst_error(NOSTALL_E_DATASET,
                           "task=tokens: %s: %zu bytes; its .npy header says %llu %s tokens "
                           "after %llu header bytes, which is %llu bytes (%s)",
                           NST_MSG_PATH(path), size, (unsigned long long)npy.count,
                           tok_names[r->kind], (unsigned long long)npy.data_offset,
                           npy.count <= (UINT64_MAX - npy.data_offset) / r->tsize
                               ? (unsigned long long)(npy.data_offset + npy.count * r->tsize)
                               : (unsigned long long)UINT64_MAX,
                           npy.count > data / r->tsize ? "truncated" : "bytes after the data");
            goto out;
        }
        r->ntok = npy.count;
    } else {
        r->kind = token_dtype == NOSTALL_TOKEN_UINT32 ? NST_TOK_U32 : NST_TOK_U16;
        r->tsize = tok_sizes[r->kind];
        r->data_offset = 0;
        if (size % r->tsize) {
            rc = nst_error(NOSTALL_E_DATASET,
                           "task=tokens: %s: %zu bytes is not a whole number of %s tokens "
                           "(%u bytes each): %zu byte%s past token %zu (token_dtype=%s%s)",
                           NST_MSG_PATH(path), size, tok_names[r->kind], r->tsize, size % r->tsize,
                           size % r->tsize == 1 ? "" : "s", size / r->tsize, tok_names[r->kind],
                           token_dtype == NOSTALL_TOKEN_AUTO ? ", the default for a file that "
                                                               "is not a .npy"
                                                             : "");
            goto out;
        }
        r->ntok = size / r->tsize;
    }
    rc = 0;
out:
    free(head);
    close(fd);
    return rc;
}

/* Declare "tokens" (and "targets"). */
static int declare_fields(tokens *r)
{
    static const char *const names[] = {"tokens", "targets"};
    r->base.nfields = r->targets ? 2 : 1;
    r->base.item_bytes = 0;
    for (uint32_t f = 0; f < r->base.nfields; f++) {
        nst_field_decl *d = &r->base.fields[f];
        snprintf(d->name, sizeof d->name, "%s", names[f]);
        d->dtype = NOSTALL_DTYPE_INT64;
        d->ndim = 1;
        d->shape[0] = r->targets ? r->L : r->L + 1;
        d->shape_field = -1;
        int rc = nst_field_finish(d);
        if (rc < 0) return rc;
        r->base.item_bytes += d->item_bytes;
    }
    r->base.image_field = 0;
    r->base.label_field = UINT32_MAX;
    return 0;
}

/* Items, keys, the cache unit and the fingerprint. */
static int plan_items(tokens *r, const nostall_config *cfg, const char *path)
{
    const nst_optval *v = cfg->v;
    uint64_t max_bytes = v[NOSTALL_OPT_MAX_FILE_BYTES].u, max_tok = max_bytes / r->tsize;
    if (r->ntok < r->L + 1)
        return nst_error(NOSTALL_E_DATASET,
                         "task=tokens: %s: %llu %s tokens (%llu bytes), fewer than one window "
                         "of context_length + 1 = %llu tokens",
                         NST_MSG_PATH(path), (unsigned long long)r->ntok, tok_names[r->kind],
                         (unsigned long long)r->file_bytes, (unsigned long long)(r->L + 1));
    if (r->L + 1 > max_tok)
        return nst_error(NOSTALL_E_OPTION,
                         "task=tokens: %s: a window of context_length + 1 = %llu %s tokens is "
                         "%llu bytes, over max_file_bytes (%llu)",
                         NST_MSG_PATH(path), (unsigned long long)(r->L + 1), tok_names[r->kind],
                         (unsigned long long)((r->L + 1) * r->tsize), (unsigned long long)max_bytes);
    r->base.items = (r->ntok - 1) / r->L;
    /* the unit: C starts, C + L tokens within max_file_bytes, C <= N - L */
    uint64_t starts = r->ntok - r->L, c = NST_TOKENS_UNIT_WINDOWS * (r->L + 1);
    if (c > max_tok - r->L) c = max_tok - r->L;
    if (c > starts) c = starts;
    if (c < 1) c = 1;
    r->unit = c;
    r->unit_reads =
        !r->chunks &&
        ((v[NOSTALL_OPT_CACHE].u == NOSTALL_CACHE_MINIO && v[NOSTALL_OPT_CACHE_BYTES].u) ||
         cfg->has_peer);
    r->base.keys = r->chunks ? r->base.items : (starts + c - 1) / c;
    /* Random windows and a MinIO cache too small for every unit: a window
     * of a unit left out reads that unit (64 windows' worth) each time, far
     * more than no cache would. Refused (chunks are cached per window). */
    uint64_t budget =
        v[NOSTALL_OPT_CACHE].u == NOSTALL_CACHE_MINIO ? v[NOSTALL_OPT_CACHE_BYTES].u : 0;
    uint64_t need = (r->ntok + (r->base.keys - 1) * r->L) * r->tsize;
    if (!r->chunks && budget && budget < need)
        return nst_error(NOSTALL_E_OPTION,
                         "task=tokens: %s: windows=random with cache_bytes %llu: the cache keeps the "
                         "corpus in %llu units of up to %llu bytes (%llu bytes in all, overlaps "
                         "included), and a cache holding only some of them reads a whole unit "
                         "from storage for every window outside them: more than no cache. Give "
                         "cache_bytes >= %llu, or 0, or windows=chunks (cached per window)",
                         NST_MSG_PATH(path), (unsigned long long)budget,
                         (unsigned long long)r->base.keys,
                         (unsigned long long)((c + r->L) * r->tsize), (unsigned long long)need,
                         (unsigned long long)need);
    uint64_t h = nst_index_fingerprint(r->base.index);
    uint64_t what[4] = {r->file_bytes, r->data_offset, r->ntok, (uint64_t)r->kind};
    nostall_checksum_update(&h, what, sizeof what);
    r->base.fingerprint = h ? h : 1;
    return 0;
}

int nst_tokens_create(nst_recipe **out, const nostall_config *cfg, const char *source)
{
    const nst_optval *v = cfg->v;
    int rc;
    *out = NULL;
    if (nst_http_handles(source))
        return nst_error(NOSTALL_E_UNSUPPORTED,
                         "task=tokens: %s: token files over http(s) or s3 are not built into this "
                         "nostall yet (download the file and name the local copy)",
                         NST_MSG_PATH(source));
    tokens *r = calloc(1, sizeof *r);
    if (!r) return nst_error(NOSTALL_E_NOMEM, "recipe: out of memory");
    r->base.ops = &tokens_ops;
    r->base.size_hint = "context_length";
    r->seed = v[NOSTALL_OPT_SEED].u;
    r->L = v[NOSTALL_OPT_CONTEXT_LENGTH].u;
    r->chunks = v[NOSTALL_OPT_WINDOWS].u == NOSTALL_WINDOWS_CHUNKS;
    r->targets = (int)v[NOSTALL_OPT_TARGETS].u;
    const char *paths[1] = {source};
    if ((rc = nst_index_from_paths(&r->base.index, paths, NULL, 1)) < 0) goto fail;
    if ((rc = read_layout(r, source, v[NOSTALL_OPT_TOKEN_DTYPE].u)) < 0) goto fail;
    if ((rc = plan_items(r, cfg, source)) < 0) goto fail;
    if ((rc = declare_fields(r)) < 0) goto fail;
    *out = &r->base;
    return 0;
fail:
    nst_recipe_free(&r->base);
    return rc;
}
