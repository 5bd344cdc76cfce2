/*
 * engine_impl.h — what the batch engine's two files share (engine.c: the
 * slots' lifecycle; layout.c: where their parts lie): an item's control
 * word and the start of a slot's data. Not for other rooms (engine.h is).
 */
#ifndef NOSTALL_BATCH_ENGINE_IMPL_H
#define NOSTALL_BATCH_ENGINE_IMPL_H

#include "batch/engine.h"

/* An item's control word: free, taken by a worker, or done; which member
 * took it and its ticket's tag. */
enum { I_FREE = 0, I_TAKEN, I_DONE };
typedef struct item_ctl {
    uint8_t state, owner;
    uint16_t pad_;
    uint32_t tag;
} item_ctl;

static inline uint8_t *nst_engine_slot_data(nst_engine *q, uint32_t s)
{
    return (uint8_t *)q + q->data_off + (size_t)s * q->slot_bytes;
}
static inline item_ctl *nst_engine_items(nst_engine *q, uint32_t s)
{
    return (item_ctl *)(nst_engine_slot_data(q, s) + q->off_items);
}

#endif
