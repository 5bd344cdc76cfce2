/*
 * layout.c — where a batch engine's slots lie in its memory (engine.h):
 * the header and slot controls, then per slot each field's items, the
 * items' indices, statuses, controls and messages, every part 64-byte
 * aligned; the size of that memory, its initialization, and the accessors
 * of a slot's parts. Touches only the memory it is given.
 */
#include <stdio.h>
#include <string.h>

#include "batch/engine_impl.h"

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

typedef struct layout {
    size_t field_off[NST_FIELDS_MAX];
    size_t off_indices, off_status, off_items, off_msgs, slot_bytes, data_off, total;
} layout;

static int plan_layout(uint32_t nslots, uint32_t items, const nst_field_decl *f, uint32_t nf,
                       layout *l)
{
    size_t off = 0, n;
    if (nslots == 0 || nslots > NST_ENGINE_MAX_SLOTS || items == 0 || nf > NST_FIELDS_MAX)
        return -1;
    for (uint32_t i = 0; i < nf; i++) {
        l->field_off[i] = off;
        if (nst_mul_overflow(f[i].item_bytes, items, &n) || n > (SIZE_MAX >> 8)) return -1;
        off += align64(n);
    }
    l->off_indices = off;
    off += align64((size_t)items * sizeof(uint64_t));
    l->off_status = off;
    off += align64((size_t)items * sizeof(int32_t));
    l->off_items = off;
    off += align64((size_t)items * sizeof(item_ctl));
    l->off_msgs = off;
    off += align64((size_t)items * NST_ENGINE_MSG);
    l->slot_bytes = off;
    l->data_off =
        (sizeof(nst_engine) + (size_t)nslots * sizeof(nst_engine_slot) + 4095) & ~(size_t)4095;
    if (nst_mul_overflow(l->slot_bytes, nslots, &n) || n > SIZE_MAX / 2 - l->data_off) return -1;
    l->total = l->data_off + n;
    return 0;
}

size_t nst_engine_size(uint32_t nslots, uint32_t slot_items, const nst_field_decl *fields,
                       uint32_t nfields)
{
    layout l;
    return plan_layout(nslots, slot_items, fields, nfields, &l) < 0 ? 0 : l.total;
}

uint8_t *nst_engine_field(nst_engine *q, uint32_t s, uint32_t f)
{
    return nst_engine_slot_data(q, s) + q->field_off[f];
}
uint64_t *nst_engine_indices(nst_engine *q, uint32_t s)
{
    return (uint64_t *)(nst_engine_slot_data(q, s) + q->off_indices);
}
int32_t *nst_engine_status(nst_engine *q, uint32_t s)
{
    return (int32_t *)(nst_engine_slot_data(q, s) + q->off_status);
}
char *nst_engine_msg(nst_engine *q, uint32_t s, uint32_t j)
{
    return (char *)nst_engine_slot_data(q, s) + q->off_msgs + (size_t)j * NST_ENGINE_MSG;
}

nst_engine *nst_engine_init(void *mem, uint32_t nslots, uint32_t slot_items,
                            const nst_field_decl *fields, uint32_t nfields, uint32_t flags)
{
    layout l;
    if (plan_layout(nslots, slot_items, fields, nfields, &l) < 0) return NULL;
    nst_engine *q = mem;
    memset(q, 0, l.data_off);
    q->total_bytes = l.total;
    q->data_off = l.data_off;
    q->slot_bytes = l.slot_bytes;
    q->nslots = nslots;
    q->slot_items = slot_items;
    q->nfields = nfields;
    q->flags = flags;
    for (uint32_t i = 0; i < nfields; i++) {
        q->field_off[i] = l.field_off[i];
        q->field_bytes[i] = fields[i].item_bytes;
    }
    q->off_indices = l.off_indices;
    q->off_status = l.off_status;
    q->off_items = l.off_items;
    q->off_msgs = l.off_msgs;
    q->prod_slot = NST_ENGINE_NONE;
    for (uint32_t s = 0; s < nslots; s++) q->slots[s].seq = UINT64_MAX;
    return q;
}
