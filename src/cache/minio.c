/*
 * minio.c — the MinIO cache (see minio.h).
 *
 * Layout: one arena of `budget` bytes reserved with mmap(MAP_NORESERVE) and
 * filled front to back, never compacted or freed before nst_cache_free();
 * per item, a slot {offset, length} and an atomic state byte:
 *
 *   EMPTY --CAS by one put--> FILLING --> READY  (bytes copied, slot set)
 *                                     \-> NOFIT  (no room in the budget; final)
 *                                     \-> EMPTY  (over the admission cap only)
 *
 * Guards: the EMPTY->FILLING CAS makes the winning put the only writer of
 * that item's slot and arena range; the CAS loop on `used` hands out
 * disjoint arena ranges and keeps used <= budget at every instant (no
 * padding: offsets are unaligned, so `used` is exactly the sum of cached
 * lengths plus lengths still being copied), and used + len <= cap for each
 * put that takes room, with the cap it read (a cap lowered meanwhile only
 * stops later puts). The release store of READY
 * publishes the slot and the copied bytes to any get that acquire-loads
 * READY; get takes no lock and never writes. Stats counters are relaxed.
 * Called by worker threads (get/put) and by whoever reads stats;
 * create/free by the owner only.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cache/minio.h"
#include "common/error.h"

enum { ST_EMPTY = 0, ST_FILLING = 1, ST_READY = 2, ST_NOFIT = 3 };

typedef struct nst_cache_slot {
    uint64_t off; /* written by the filling put before READY is released */
    uint64_t len;
} nst_cache_slot;

struct nst_cache {
    uint8_t *arena; /* budget bytes, MAP_NORESERVE        */
    uint64_t budget;
    uint64_t nitems;
    nst_cache_slot *slot;         /* nitems                             */
    _Atomic unsigned char *state; /* nitems, ST_*                       */
    _Atomic uint64_t used;        /* bytes reserved in the arena        */
    _Atomic uint64_t items;       /* items READY                        */
    _Atomic uint64_t nofit;       /* puts refused for lack of room      */
    _Atomic uint64_t cap;         /* admission cap, <= budget           */
    _Atomic uint64_t capped;      /* puts refused by the cap alone      */
};

int nst_cache_create(nst_cache **out, uint64_t budget_bytes, uint64_t nitems)
{
    if (!out) return nst_error(NOSTALL_E_INVALID, "cache: out is NULL");
    *out = NULL;
    if (budget_bytes == 0) return nst_error(NOSTALL_E_INVALID, "cache: budget must be > 0 bytes");
    if (nitems == 0) return nst_error(NOSTALL_E_INVALID, "cache: item count must be > 0");
    if (budget_bytes > SIZE_MAX)
        return nst_error(NOSTALL_E_NOMEM,
                         "cache: budget of %" PRIu64 " bytes exceeds the address space",
                         budget_bytes);
    if (nitems > SIZE_MAX / sizeof(nst_cache_slot))
        return nst_error(NOSTALL_E_NOMEM, "cache: metadata for %" PRIu64 " items is too large",
                         nitems);

    nst_cache *c = calloc(1, sizeof *c);
    if (!c) return nst_error(NOSTALL_E_NOMEM, "cache: out of memory");
    c->budget = budget_bytes;
    c->nitems = nitems;
    c->slot = calloc((size_t)nitems, sizeof *c->slot);
    c->state = calloc((size_t)nitems, sizeof *c->state);
    if (!c->slot || !c->state) {
        free(c->slot);
        free((void *)c->state);
        free(c);
        return nst_error(NOSTALL_E_NOMEM, "cache: cannot allocate metadata for %" PRIu64 " items",
                         nitems);
    }
    void *p = mmap(NULL, (size_t)budget_bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        int err = errno;
        free(c->slot);
        free((void *)c->state);
        free(c);
        return nst_error(NOSTALL_E_NOMEM, "cache: cannot reserve a budget of %" PRIu64 " bytes: %s",
                         budget_bytes, strerror(err));
    }
    c->arena = p;
    for (uint64_t i = 0; i < nitems; i++) atomic_init(&c->state[i], ST_EMPTY);
    atomic_init(&c->used, 0);
    atomic_init(&c->items, 0);
    atomic_init(&c->nofit, 0);
    atomic_init(&c->cap, budget_bytes);
    atomic_init(&c->capped, 0);
    *out = c;
    return NOSTALL_OK;
}

void nst_cache_free(nst_cache *c)
{
    if (!c) return;
    munmap(c->arena, (size_t)c->budget);
    free(c->slot);
    free((void *)c->state);
    free(c);
}

int nst_cache_get(const nst_cache *c, uint64_t index, const uint8_t **data, size_t *len)
{
    if (!c || index >= c->nitems) return 0;
    if (atomic_load_explicit(&c->state[index], memory_order_acquire) != ST_READY) return 0;
    const nst_cache_slot *s = &c->slot[index];
    *data = c->arena + s->off;
    *len = (size_t)s->len;
    return 1;
}

int nst_cache_put(nst_cache *c, uint64_t index, const uint8_t *data, size_t len)
{
    if (!c || index >= c->nitems || len == 0 || !data) return 0;
    /* Cheap pre-check so repeat puts of cached items skip the CAS. */
    if (atomic_load_explicit(&c->state[index], memory_order_relaxed) != ST_EMPTY) return 0;
    unsigned char expect = ST_EMPTY;
    if (!atomic_compare_exchange_strong_explicit(&c->state[index], &expect, ST_FILLING,
                                                 memory_order_relaxed, memory_order_relaxed))
        return 0;

    /* Reserve [off, off+len) without ever letting used exceed the budget
     * (or the admission cap). */
    uint64_t off = atomic_load_explicit(&c->used, memory_order_relaxed);
    const uint64_t cap = atomic_load_explicit(&c->cap, memory_order_relaxed);
    for (;;) {
        if ((uint64_t)len > c->budget || off > c->budget - (uint64_t)len) {
            atomic_store_explicit(&c->state[index], ST_NOFIT, memory_order_release);
            atomic_fetch_add_explicit(&c->nofit, 1, memory_order_relaxed);
            return 0;
        }
        if ((uint64_t)len > cap || off > cap - (uint64_t)len) { /* the cap alone: not for good */
            atomic_store_explicit(&c->state[index], ST_EMPTY, memory_order_release);
            atomic_fetch_add_explicit(&c->capped, 1, memory_order_relaxed);
            return 0;
        }
        if (atomic_compare_exchange_weak_explicit(&c->used, &off, off + (uint64_t)len,
                                                  memory_order_relaxed, memory_order_relaxed))
            break;
    }

    memcpy(c->arena + off, data, len);
    c->slot[index].off = off;
    c->slot[index].len = (uint64_t)len;
    atomic_store_explicit(&c->state[index], ST_READY, memory_order_release);
    atomic_fetch_add_explicit(&c->items, 1, memory_order_relaxed);
    return 1;
}

int nst_cache_wants(const nst_cache *c, uint64_t index, size_t len)
{
    if (!c || index >= c->nitems || len == 0) return 0;
    if (atomic_load_explicit(&c->state[index], memory_order_relaxed) != ST_EMPTY) return 0;
    const uint64_t used = atomic_load_explicit(&c->used, memory_order_relaxed);
    const uint64_t cap = atomic_load_explicit(&c->cap, memory_order_relaxed);
    return (uint64_t)len <= cap && used <= cap - (uint64_t)len;
}

void nst_cache_set_cap(nst_cache *c, uint64_t cap)
{
    if (!c) return;
    atomic_store_explicit(&c->cap, cap < c->budget ? cap : c->budget, memory_order_relaxed);
}

void nst_cache_stats_get(const nst_cache *c, nst_cache_stats *out)
{
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!c) return;
    out->budget = c->budget;
    out->bytes = atomic_load_explicit(&c->used, memory_order_relaxed);
    out->items = atomic_load_explicit(&c->items, memory_order_relaxed);
    out->nofit = atomic_load_explicit(&c->nofit, memory_order_relaxed);
    out->cap = atomic_load_explicit(&c->cap, memory_order_relaxed);
    out->capped = atomic_load_explicit(&c->capped, memory_order_relaxed);
}
