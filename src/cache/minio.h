/*
 * minio.h — the MinIO cache of encoded item bytes (CoorDL, "Analyzing and
 * Mitigating Data Stalls in DNN Training", VLDB 2021).
 *
 * Items are copied in as they are first read and are NEVER evicted: with a
 * fresh random order every epoch, no replacement policy can beat keeping a
 * fixed set, so the hit rate is exactly the cached fraction of the dataset.
 * The whole byte budget is reserved once as one anonymous MAP_NORESERVE
 * arena, so pages become resident only as they are filled (RSS tracks what
 * is cached, never above the budget). The budget is respected to the byte:
 * an item that does not fit in the room left is refused (marked NOFIT for
 * good) while smaller later items may still fit. Offsets are not aligned
 * (no padding bytes): callers decode straight from the cached bytes.
 *
 * An admission cap (nst_cache_set_cap, autotune's cache size; the budget
 * until set) bounds what puts may take: a put over the cap but within the
 * budget is refused without marking the item (a later put may take it once
 * the cap is raised); lowering the cap below what is held evicts nothing
 * (items stay until free, their pointers valid): it only stops admitting.
 * A hit and a miss deliver the same bytes, so the cap never changes them.
 *
 * Thread safety: every function except create/free may be called from any
 * number of threads at once; get is lock-free (one acquire load). Pointers
 * returned by get stay valid, and the bytes unchanged, until
 * nst_cache_free().
 */
#ifndef NST_CACHE_MINIO_H
#define NST_CACHE_MINIO_H

#include <stddef.h>
#include <stdint.h>

typedef struct nst_cache nst_cache;

/* Create a cache of at most `budget_bytes` bytes of item data for items
 * 0..nitems-1. E_INVALID if budget_bytes or nitems is 0; E_NOMEM if the
 * arena cannot be reserved (the message names the budget) or the per-item
 * metadata cannot be allocated. Not thread-safe. */
int nst_cache_create(nst_cache **out, uint64_t budget_bytes, uint64_t nitems);

/* Release the arena and metadata; every pointer from get becomes invalid.
 * NULL is a no-op. Not thread-safe: no other call may be in flight. */
void nst_cache_free(nst_cache *c);

/* 1 with *data and *len set if item `index` is cached; 0 otherwise. */
int nst_cache_get(const nst_cache *c, uint64_t index, const uint8_t **data, size_t *len);

/* Copy `len` bytes in as item `index` if it is not cached yet and fits: 1 if
 * this call cached it, 0 if not (already cached / being filled / no room). */
int nst_cache_put(nst_cache *c, uint64_t index, const uint8_t *data, size_t len);

/* 1 if a put of `len` bytes for item `index` would be taken right now (not
 * cached or being filled, room left); a hint only: a put may still refuse.
 * Lets a caller skip work (cache_transcode) for items the cache will not
 * keep. */
int nst_cache_wants(const nst_cache *c, uint64_t index, size_t len);

/* Admit no more than `cap` bytes in all (at most the budget: a larger cap
 * is the budget). Items already held stay. Any thread. */
void nst_cache_set_cap(nst_cache *c, uint64_t cap);

/* A snapshot (relaxed loads; fields may be mutually slightly stale while
 * puts are in flight): budget, bytes cached (reserved), items cached, puts
 * refused for lack of room in the budget (for good), the admission cap,
 * and puts refused by the cap alone (the item may be taken later). */
typedef struct nst_cache_stats {
    uint64_t budget, bytes, items, nofit, cap, capped;
} nst_cache_stats;
void nst_cache_stats_get(const nst_cache *c, nst_cache_stats *out);

#endif
