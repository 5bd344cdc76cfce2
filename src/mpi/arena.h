/*
 * arena.h — libnostall_mpi's local cache: one MAP_NORESERVE mmap budget,
 * bump allocation by CAS, fill once, never evict, a per-item table of
 * (offset, length, checksum, state). A trimmed sibling of src/cache/minio.c
 * (kept separate so libnostall_mpi shares no internal symbol with
 * libnostall's static library).
 *
 * Thread safety: get/put/stats from any number of threads at once; get is
 * one acquire load. Bytes returned by get stay valid until nmpi_arena_free.
 */
#ifndef NMPI_ARENA_H
#define NMPI_ARENA_H

#include <stddef.h>
#include <stdint.h>

typedef struct nmpi_arena nmpi_arena;

/* budget may be 0 (holds nothing). Returns 0 or -1 (errno set). */
int nmpi_arena_create(nmpi_arena **out, uint64_t budget, uint64_t nitems);
void nmpi_arena_free(nmpi_arena *a);
/* 1 with *data, *len, *csum if item `index` is held; 0 otherwise. */
int nmpi_arena_get(const nmpi_arena *a, uint64_t index, const uint8_t **data, size_t *len,
                   uint64_t *csum);
/* 1 if this call stored it; 0 if already held/being filled/no room. */
int nmpi_arena_put(nmpi_arena *a, uint64_t index, const void *data, size_t len, uint64_t csum);
void nmpi_arena_usage(const nmpi_arena *a, uint64_t *items, uint64_t *bytes);

#endif
