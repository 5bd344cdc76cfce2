/*
 * recipe.h — item recipes: what one dataset item becomes in a batch.
 *
 * A recipe owns its items' source -- the index of files and labels it
 * builds from the loader's source (a folder, a list, COCO annotations, a
 * token file) -- and says where each item's bytes are (locate: a file, or a
 * byte range of one, and the key the caches keep them under).
 *
 * A recipe declares at create the fields each item produces -- name, dtype
 * and shape (or a maximum) -- so the ring is planned and preallocated from
 * the declaration ("declare in setup, fill in run", as DALI operators and
 * FFCV fields do). Per item, it plans its random draws from (seed, epoch,
 * item, purpose), decodes, transforms, and writes every field of the item
 * into its place in the slot. The engine (batch/, echo/, the worker loop)
 * moves items as opaque groups of field bytes and never looks inside.
 *
 * Stages, so that data echoing can repeat data at each point:
 *   make        fetched bytes -> the item's fields (the fused fast path:
 *               e.g. a region decode that reads only what the crop needs)
 *   decode      fetched bytes -> an intermediate (e.g. the whole decoded
 *               image), kept by the echo store at echo_point=decode
 *   transform   intermediate -> the item's fields, with the random draws of
 *               use `copy` of the item (each echoed copy differs)
 * make(bytes) must equal transform(decode(bytes)) byte for byte.
 *
 * The recipes: image classification (classify.c), detection (detect.c),
 * token windows (tokens.c), raw bytes (bytes.c), audio clips
 * (audio_clip.c), a user's op (op.c), and a weighted mix of any one of
 * them over several sources (mixture.c); docs/design.md says how each fits.
 *
 * THREADS  A recipe is immutable after create and shared by the workers;
 *   each worker owns an nst_recipe_worker (decoder, augmenter, scratch:
 *   grow-only, no allocation in the steady state).
 */
#ifndef NST_RECIPE_RECIPE_H
#define NST_RECIPE_RECIPE_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/config.h"
#include "nostall.h"
#include "dataset/index.h"

#define NST_FIELDS_MAX 8
#define NST_FIELD_NAME_MAX 24

/* One field of an item: its bytes are item_bytes per item, contiguous per
 * batch (the batch dimension first). */
typedef struct nst_field_decl {
    char name[NST_FIELD_NAME_MAX];
    nostall_dtype dtype;
    uint32_t ndim;                      /* of one item (0: a scalar) */
    uint64_t shape[NOSTALL_FIELD_DIMS]; /* of one item (ragged: the room) */
    size_t item_bytes;
    int32_t shape_field; /* ragged: the INT64 field holding each item's
                            actual shape (its values, the elements packed
                            from the start of the item's place); -1: none */
} nst_field_decl;

/* An intermediate (echo_point=decode): bytes in `buf`, described by
 * recipe-defined `meta`. Owned by whoever holds it (an echo store entry). */
typedef struct nst_decoded {
    nst_buf buf;
    size_t len;
    _Alignas(8) uint8_t meta[128];
} nst_decoded;

/* What a stage knows of the item it works on. */
typedef struct nst_item_ctx {
    uint64_t epoch, index; /* the random draws are a function of these, the
                              seed, the use number and the purpose      */
    uint32_t copy;         /* which use of the item in its epoch (echo)  */
    const char *path;      /* for messages                               */
    uint8_t *const *dst;   /* per declared field: this item's bytes      */
    int dst_device;        /* the image field's dst is device memory (the
                              device ring, gpu_output=device): only a GPU
                              route may write it                         */
} nst_item_ctx;

/* Time spent, for the loader's counters (added by the stages). */
typedef struct nst_recipe_times {
    uint64_t decode_ns, decode_items, decode_pixels;
    uint64_t augment_ns, augment_items, augment_bytes;
    /* decode_device=gpu: the items the GPU route decoded, by decoder
     * (nvJPEG's hardware engines, its default backend, nostall's CPU) */
    uint64_t gpu_hw_items, gpu_default_items, gpu_cpu_items;
} nst_recipe_times;

typedef struct nst_recipe nst_recipe;
typedef struct nst_recipe_worker nst_recipe_worker;

/* Where an item's bytes are: bytes [offset, offset + length) of `path`
 * (length 0: the whole file), kept by the caches under `key`. */
typedef struct nst_item_loc {
    const char *path;
    uint64_t offset, length, key;
} nst_item_loc;

typedef struct nst_recipe_ops {
    const char *name;
    /* Where the bytes of `index` are in `epoch`; NULL: the index's file,
     * whole, under key = index. */
    void (*locate)(const nst_recipe *r, uint64_t epoch, uint64_t index, nst_item_loc *out);
    int (*worker_create)(const nst_recipe *r, nst_recipe_worker **out);
    void (*worker_free)(nst_recipe_worker *w);
    int (*make)(nst_recipe_worker *w, const nst_item_ctx *c, const uint8_t *data, size_t len,
                nst_recipe_times *t);
    /* Optional: n items at once (a worker's items whose fetches are
     * complete, echoing off; the worker's GPU route decodes their JPEGs in
     * one batch): item i from data[i], len[i] into c[i].dst, its status in
     * rc[i] and, when < 0, its message at msg + i * msgn -- each item's
     * bytes, status and message those make gives it. n = 0: 0 if this
     * worker makes items this way, else E_UNSUPPORTED (make them one by
     * one); otherwise returns 0. */
    int (*make_many)(nst_recipe_worker *w, const nst_item_ctx *c, const uint8_t *const *data,
                     const size_t *len, size_t n, int *rc, char *msg, size_t msgn,
                     nst_recipe_times *t);
    int (*decode)(nst_recipe_worker *w, const nst_item_ctx *c, const uint8_t *data, size_t len,
                  nst_decoded *out, nst_recipe_times *t);
    int (*transform)(nst_recipe_worker *w, const nst_item_ctx *c, const nst_decoded *in,
                     nst_recipe_times *t);
    /* The decoder a worker may lend to the fetch stage (cache_transcode's
     * rewrite), or NULL. */
    void *(*decoder)(nst_recipe_worker *w);
    void (*free)(nst_recipe *r);
} nst_recipe_ops;

struct nst_recipe {
    const nst_recipe_ops *ops;
    nst_index *index;     /* the items' files and labels (owned)         */
    uint64_t items;       /* dataset items (what the sampler permutes)   */
    uint64_t keys;        /* cache keys: locate's keys are below this    */
    uint64_t fingerprint; /* of what defines the items: their paths and
                              labels, annotations, a token file's size   */
    /* Found at create and repaired (nostall_dataset_info's counts). */
    uint64_t items_truncated, parts_dropped, parts_clipped, parts_unmatched, items_missing;
    uint32_t nfields;
    nst_field_decl fields[NST_FIELDS_MAX];
    size_t item_bytes;     /* the sum over the fields                     */
    uint32_t image_field;  /* the field nostall_batch.images points at    */
    const char *size_hint; /* the options that set an item's size, for the
                              ring's out-of-memory message (NULL: none)  */
    int image_layout;      /* 1 + NOSTALL_LAYOUT_* of the image field (the
                              batch header's layout); 0: from its shape,
                              [3, H, W] is NCHW                           */
    uint32_t label_field;  /* ... .labels (UINT32_MAX: none)              */
};

/* The recipe that `cfg` describes (its task), with its items read from
 * `source`. */
int nst_recipe_create(nst_recipe **out, const nostall_config *cfg, const char *source);
void nst_recipe_free(nst_recipe *r);

/* Where item `index` is in `epoch` (ops->locate, or its whole file). */
void nst_recipe_locate(const nst_recipe *r, uint64_t epoch, uint64_t index, nst_item_loc *out);
/* The path messages name for item `index`. */
const char *nst_recipe_path(const nst_recipe *r, uint64_t index);
/* Set items, keys and fingerprint of a recipe whose items are its index's
 * files (one item per file, key = index). */
void nst_recipe_items_from_index(nst_recipe *r);

/* A lent batch as the public struct: its fields (names and shapes from r,
 * data[f] each field's first item; `fields` is the caller's array of
 * r->nfields, valid while lent), the dataset indices, and the
 * classification members (images, labels: the int64 scalar label). */
void nst_recipe_describe(nostall_batch *out, const nst_recipe *r, nostall_field *fields,
                         uint8_t *const *data, uint64_t *indices, uint32_t count, uint64_t epoch,
                         uint64_t position, uint64_t seq);

/* nst_index_build_flags with the HTTP options of cfg (http_timeout_ms,
 * http_retries, http_verify_tls) for indexing shards over HTTP(S)/S3. */
int nst_index_build_cfg(nst_index **out, const char *source, unsigned flags,
                        const nostall_config *cfg);

/* Labels from the recipe's index, for recipes with one per item: declare
 * the "label" field as the next field (r->nfields) by the index's kind --
 * int64 scalar, float32 scalar, float32 [classes] multi-hot, or none
 * (label_field = UINT32_MAX) -- and write an item's. */
int nst_label_declare(nst_recipe *r, const char *source);
void nst_label_write(const nst_recipe *r, const nst_item_ctx *c);

/* Bytes of one element of `dtype` (0 if unknown). */
size_t nst_dtype_size(nostall_dtype dtype);

/* Fill decl's item_bytes from dtype and shape; E_INVALID on overflow. */
int nst_field_finish(nst_field_decl *decl);

#endif
