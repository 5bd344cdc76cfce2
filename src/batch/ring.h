/*
 * ring.h — the batch ring: a fixed set of preallocated batch slots that
 * cycle free -> filling -> ready -> lent -> free. The next batch is opened in
 * any free slot, and lent batches may be released in any order, so a batch
 * the consumer keeps for long only takes its own slot out of the cycle.
 *
 * All slot memory (images, labels, indices, per-item status) is one arena
 * allocated at create and never resized, so the steady state allocates
 * nothing.
 *
 * The ring itself does no locking: the pipeline's mutex guards every slot's
 * bookkeeping fields. A slot's pixel memory is written by the worker that
 * holds an item ticket for it (each item its own disjoint range) and read by
 * the consumer only after the slot is ready.
 */
#ifndef NST_BATCH_RING_H
#define NST_BATCH_RING_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

enum { NST_SLOT_FREE = 0, NST_SLOT_FILLING, NST_SLOT_READY, NST_SLOT_LENT };

/* item_status value while the item is not finished. */
#define NST_ITEM_PENDING 1

/* Per-batch accounting: where its items came from, and echoing. */
#define NST_SLOT_IO_FIELDS(X)                                                  \
    X(storage_bytes) X(storage_reads) X(cache_hits) X(cache_misses)            \
    X(peer_hits) X(peer_bytes) X(http_transfers) X(http_retries)               \
    X(fresh) X(echoed) X(uses_1) X(uses_2) X(uses_3) X(uses_4) X(uses_5_8)      \
    X(uses_9_up) X(dups) X(distance)
enum {
#define NST_SLOT_IO_ID_(f) NST_IO_##f,
    NST_SLOT_IO_FIELDS(NST_SLOT_IO_ID_)
#undef NST_SLOT_IO_ID_
    NST_IO_COUNT_
};
typedef union nst_slot_io {
    struct {
#define NST_SLOT_IO_FIELD_(f) uint64_t f;
        NST_SLOT_IO_FIELDS(NST_SLOT_IO_FIELD_)
#undef NST_SLOT_IO_FIELD_
    };
    uint64_t v[NST_IO_COUNT_];
} nst_slot_io;

typedef struct nst_slot {
    uint8_t *images;    /* batch_size * item_bytes                       */
    int64_t *labels;    /* batch_size                                    */
    uint64_t *indices;  /* batch_size dataset item indices               */
    int32_t *item_status; /* batch_size: NST_ITEM_PENDING, 0, or E_*      */
    /* Guarded by the pipeline mutex: */
    int state;          /* NST_SLOT_*                                    */
    uint64_t seq;       /* batch sequence number held                    */
    uint64_t epoch, position;
    uint32_t count;     /* items assigned to this batch                  */
    uint32_t assigned;  /* items handed out to workers so far            */
    uint32_t done;      /* items finished                                */
    uint32_t failed;    /* items that failed                             */
    uint32_t delivered; /* items left after compaction                   */
    uint32_t taken;     /* drop_last fill: of those, items at the end
                           already delivered in the batch before it       */
    uint32_t skip_after; /* drop_last fill: batches after this one whose
                            items all went into it                        */
    uint32_t next_taken; /* ... and `taken` of the batch after those      */
    uint32_t lends_left; /* batch echoing: lends still to make (0: not
                            lent yet)                                     */
    uint32_t lends_out;  /* lends not yet released                        */
    /* accounting of this batch's items, reported when it is delivered
     * (exact per epoch despite preparing ahead) */
    nst_slot_io io;
    int error;          /* fail policy: first failing item's status      */
    uint32_t error_item;
    char errmsg[NST_ERROR_MAX - 64];
} nst_slot;

typedef struct nst_ring {
    nst_slot *slots;
    uint32_t nslots;
    uint32_t batch_size;
    size_t item_bytes;
    void *arena;
    size_t arena_bytes;
} nst_ring;

/* E_NOMEM / E_INVALID on overflow of nslots * batch_size * item_bytes. */
int nst_ring_create(nst_ring *r, uint32_t nslots, uint32_t batch_size, size_t item_bytes);
void nst_ring_destroy(nst_ring *r);
/* Free every slot that is not lent (set_state); lent slots stay lent. */
void nst_ring_reset(nst_ring *r);

/* The slot holding batch `seq` while it is filling or ready, else NULL. */
nst_slot *nst_ring_pending(nst_ring *r, uint64_t seq);
/* The slot of lent batch `seq` (lends_out > 0), else NULL. */
nst_slot *nst_ring_lent(nst_ring *r, uint64_t seq);
/* A free slot, or NULL. The lowest index, so that a loop which releases
 * every batch before asking for the next keeps using the same few slots. */
nst_slot *nst_ring_free_slot(nst_ring *r);
/* Slots lent now. */
uint32_t nst_ring_lent_count(const nst_ring *r);

/* Remove failed items (item_status < 0) from a finished slot, keeping order;
 * sets and returns s->delivered. */
uint32_t nst_ring_compact(nst_ring *r, nst_slot *s);

#endif
