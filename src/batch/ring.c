/*
 * ring.c — slot memory of the batch ring (see ring.h for the life cycle).
 *
 * Layout of the arena, per slot, each part 64-byte aligned:
 *   images[batch_size * item_bytes] labels[batch_size] indices[batch_size]
 *   item_status[batch_size]
 * Called at loader create/free (allocation), and with the pipeline mutex
 * held for everything else (compaction of a finished slot by a worker;
 * lookups by the consumer). Lookups scan the slots: there are at most 65.
 */
#include <stdlib.h>
#include <string.h>

#include "batch/ring.h"
#include "common/buf.h"

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

int nst_ring_create(nst_ring *r, uint32_t nslots, uint32_t batch_size, size_t item_bytes)
{
    size_t img, per_slot, total;
    memset(r, 0, sizeof *r);
    if (nslots == 0 || batch_size == 0 || item_bytes == 0)
        return nst_error(NOSTALL_E_INVALID, "ring: empty ring");
    if (nst_mul_overflow(item_bytes, batch_size, &img) || img > SIZE_MAX / 2)
        goto overflow;
    per_slot = align64(img) + align64(batch_size * sizeof(int64_t)) +
               align64(batch_size * sizeof(uint64_t)) + align64(batch_size * sizeof(int32_t));
    if (nst_mul_overflow(per_slot, nslots, &total)) goto overflow;
    r->slots = calloc(nslots, sizeof *r->slots);
    if (!r->slots) return nst_error(NOSTALL_E_NOMEM, "ring: out of memory");
    if (posix_memalign(&r->arena, 4096, total) != 0) {
        free(r->slots);
        r->slots = NULL;
        return nst_error(NOSTALL_E_NOMEM, "ring: cannot allocate %zu bytes for %u batches", total,
                         nslots);
    }
    r->nslots = nslots;
    r->batch_size = batch_size;
    r->item_bytes = item_bytes;
    r->arena_bytes = total;
    uint8_t *p = r->arena;
    for (uint32_t i = 0; i < nslots; i++) {
        nst_slot *s = &r->slots[i];
        s->images = p;
        p += align64(img);
        s->labels = (int64_t *)p;
        p += align64(batch_size * sizeof(int64_t));
        s->indices = (uint64_t *)p;
        p += align64(batch_size * sizeof(uint64_t));
        s->item_status = (int32_t *)p;
        p += align64(batch_size * sizeof(int32_t));
    }
    /* Touch the arena now so the first epoch does not pay page faults and
     * the memory is really there (fail early, not mid-training). */
    memset(r->arena, 0, total);
    return 0;
overflow:
    return nst_error(NOSTALL_E_INVALID, "ring: %u batches of %u items of %zu bytes overflow",
                     nslots, batch_size, item_bytes);
}

void nst_ring_reset(nst_ring *r)
{
    for (uint32_t i = 0; i < r->nslots; i++) {
        nst_slot *s = &r->slots[i];
        if (s->lends_out) { /* the consumer still holds it: no more lends */
            s->state = NST_SLOT_LENT;
            s->lends_left = 0;
            continue;
        }
        s->state = NST_SLOT_FREE;
        s->count = s->assigned = s->done = s->failed = s->delivered = 0;
        s->taken = s->skip_after = s->next_taken = 0;
        s->error = 0;
    }
}

nst_slot *nst_ring_pending(nst_ring *r, uint64_t seq)
{
    for (uint32_t i = 0; i < r->nslots; i++) {
        nst_slot *s = &r->slots[i];
        if (s->seq == seq && (s->state == NST_SLOT_FILLING || s->state == NST_SLOT_READY))
            return s;
    }
    return NULL;
}

nst_slot *nst_ring_lent(nst_ring *r, uint64_t seq)
{
    for (uint32_t i = 0; i < r->nslots; i++) {
        nst_slot *s = &r->slots[i];
        if (s->seq == seq && s->lends_out && s->state != NST_SLOT_FREE) return s;
    }
    return NULL;
}

nst_slot *nst_ring_free_slot(nst_ring *r)
{
    for (uint32_t i = 0; i < r->nslots; i++)
        if (r->slots[i].state == NST_SLOT_FREE) return &r->slots[i];
    return NULL;
}

uint32_t nst_ring_lent_count(const nst_ring *r)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < r->nslots; i++) n += r->slots[i].lends_out > 0;
    return n;
}

void nst_ring_destroy(nst_ring *r)
{
    free(r->arena);
    free(r->slots);
    memset(r, 0, sizeof *r);
}

uint32_t nst_ring_compact(nst_ring *r, nst_slot *s)
{
    uint32_t out = 0;
    for (uint32_t i = 0; i < s->count; i++) {
        if (s->item_status[i] < 0) continue;
        if (out != i) {
            memmove(s->images + (size_t)out * r->item_bytes, s->images + (size_t)i * r->item_bytes,
                    r->item_bytes);
            s->labels[out] = s->labels[i];
            s->indices[out] = s->indices[i];
            s->item_status[out] = s->item_status[i];
        }
        out++;
    }
    s->delivered = out;
    return out;
}
