/*
 * arena.c — see arena.h. Any thread may call get/put; the state word of an
 * item goes EMPTY -> FILLING (claimed by CAS) -> READY (release store after
 * the bytes and metadata are written) or NOFIT; readers acquire-load it.
 */
#include "mpi/arena.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

enum { EMPTY = 0, FILLING = 1, READY = 2, NOFIT = 3 };

typedef struct slot {
    _Atomic uint32_t state;
    uint64_t off, len, csum;
} slot;

struct nmpi_arena {
    uint8_t *base;
    uint64_t budget, nitems;
    _Atomic uint64_t used, items;
    slot *slots;
};

int nmpi_arena_create(nmpi_arena **out, uint64_t budget, uint64_t nitems)
{
    nmpi_arena *a = calloc(1, sizeof *a);
    if (!a) return -1;
    a->budget = budget;
    a->nitems = nitems;
    a->slots = calloc(nitems ? nitems : 1, sizeof *a->slots);
    if (!a->slots) {
        free(a);
        return -1;
    }
    if (budget) {
        void *p = mmap(NULL, budget, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            free(a->slots);
            free(a);
            errno = e;
            return -1;
        }
        a->base = p;
    }
    *out = a;
    return 0;
}

void nmpi_arena_free(nmpi_arena *a)
{
    if (!a) return;
    if (a->base) munmap(a->base, a->budget);
    free(a->slots);
    free(a);
}

int nmpi_arena_get(const nmpi_arena *a, uint64_t index, const uint8_t **data, size_t *len,
                   uint64_t *csum)
{
    if (!a || index >= a->nitems) return 0;
    slot *s = &a->slots[index];
    if (atomic_load_explicit(&s->state, memory_order_acquire) != READY) return 0;
    *data = a->base + s->off;
    *len = (size_t)s->len;
    if (csum) *csum = s->csum;
    return 1;
}

int nmpi_arena_put(nmpi_arena *a, uint64_t index, const void *data, size_t len, uint64_t csum)
{
    if (!a || index >= a->nitems || !a->base || len == 0) return 0;
    slot *s = &a->slots[index];
    uint32_t expect = EMPTY;
    if (!atomic_compare_exchange_strong(&s->state, &expect, FILLING)) return 0;
    uint64_t used = atomic_load_explicit(&a->used, memory_order_relaxed);
    do {
        if (len > a->budget - used) {
            atomic_store_explicit(&s->state, NOFIT, memory_order_release);
            return 0;
        }
    } while (!atomic_compare_exchange_weak(&a->used, &used, used + len));
    memcpy(a->base + used, data, len);
    s->off = used;
    s->len = len;
    s->csum = csum;
    atomic_fetch_add_explicit(&a->items, 1, memory_order_relaxed);
    atomic_store_explicit(&s->state, READY, memory_order_release);
    return 1;
}

void nmpi_arena_usage(const nmpi_arena *a, uint64_t *items, uint64_t *bytes)
{
    *items = a ? atomic_load_explicit(&a->items, memory_order_relaxed) : 0;
    *bytes = a ? atomic_load_explicit(&a->used, memory_order_relaxed) : 0;
}
