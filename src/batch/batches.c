/*
 * batches.c — what both batch backends share (batches.h): placing a
 * ticket's item in its slot (nst_ticket_place: each field's destination,
 * the index's place, the ticket's epoch and position) and reporting a
 * delivered batch's bad items to the loader's sink
 * (nst_batches_report_skips). A lent slot is described as a nostall_batch
 * by the recipe (recipe.c's nst_recipe_describe). Called with the backend's
 * lock held where the slot could change (report), or by the ticket's holder
 * on its own item (place).
 */
#include <string.h>

#include "batch/batches.h"

void nst_ticket_place(nst_ticket *t, nst_engine *q, uint32_t nfields)
{
    for (uint32_t f = 0; f < nfields; f++)
        t->dst[f] = nst_engine_field(q, t->bt.slot, f) + (size_t)t->bt.j * q->field_bytes[f];
    t->index_dst = nst_engine_indices(q, t->bt.slot) + t->bt.j;
    t->epoch = t->bt.epoch;
    t->position = t->bt.position;
    memset(t->io, 0, sizeof t->io);
}

void nst_batches_report_skips(nst_engine *q, uint32_t slot, const nst_batches_sink *sink)
{
    const nst_engine_slot *sc = &q->slots[slot];
    if (!sc->failed || !sink->skip) return;
    const int32_t *st = nst_engine_status(q, slot);
    for (uint32_t j = 0; j < sc->count; j++) {
        if (st[j] >= 0) continue;
        const char *m = nst_engine_msg(q, slot, j);
        uint64_t index;
        memcpy(&index, m, sizeof index);
        sink->skip(sink->ctx, index, st[j], m + sizeof index);
    }
}
