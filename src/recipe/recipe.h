/*
 * recipe.h — item recipes: what one dataset item becomes in a batch.
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
 * The first recipe is image classification (classify.c). How detection,
 * token windows and audio fit is in docs/design.md.
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

#define NST_FIELDS_MAX 8
#define NST_FIELD_NAME_MAX 24

/* One field of an item: its bytes are item_bytes per item, contiguous per
 * batch (the batch dimension first). */
typedef struct nst_field_decl {
    char name[NST_FIELD_NAME_MAX];
    nostall_dtype dtype;
    uint32_t ndim;                       /* of one item (0: a scalar) */
    uint64_t shape[NOSTALL_FIELD_DIMS];  /* of one item               */
    size_t item_bytes;
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
    int64_t label;
    uint8_t *const *dst;   /* per declared field: this item's bytes      */
} nst_item_ctx;

/* Time spent, for the loader's counters (added by the stages). */
typedef struct nst_recipe_times {
    uint64_t decode_ns, decode_items, decode_pixels;
    uint64_t augment_ns, augment_items, augment_bytes;
} nst_recipe_times;

typedef struct nst_recipe nst_recipe;
typedef struct nst_recipe_worker nst_recipe_worker;

typedef struct nst_recipe_ops {
    const char *name;
    int (*worker_create)(const nst_recipe *r, nst_recipe_worker **out);
    void (*worker_free)(nst_recipe_worker *w);
    int (*make)(nst_recipe_worker *w, const nst_item_ctx *c, const uint8_t *data, size_t len,
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
    uint32_t nfields;
    nst_field_decl fields[NST_FIELDS_MAX];
    size_t item_bytes;     /* the sum over the fields                     */
    uint32_t image_field;  /* the field nostall_batch.images points at    */
    uint32_t label_field;  /* ... .labels (UINT32_MAX: none)              */
};

/* The recipe that `cfg` describes (today: classification). */
int nst_recipe_create(nst_recipe **out, const nostall_config *cfg);
void nst_recipe_free(nst_recipe *r);

/* Bytes of one element of `dtype` (0 if unknown). */
size_t nst_dtype_size(nostall_dtype dtype);

/* Fill decl's item_bytes from dtype and shape; E_INVALID on overflow. */
int nst_field_finish(nst_field_decl *decl);

#endif
