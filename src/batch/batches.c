/*
 * batches.c — what both batch backends share (batches.h): describing a
 * lent slot as a nostall_batch, placing a ticket's item in its slot, and
 * reporting a delivered batch's bad items. Called with the backend's lock
 * held where the slot could change (report), or on a slot the caller owns
 * (describe, place).
 */
#include <string.h>

#include "batch/batches.h"

void nst_batch_describe(nostall_batch *out, nst_bq *q, uint32_t slot, const nst_recipe *r,
                        nostall_field *fields, uint32_t count, uint64_t epoch,
                        uint64_t position, uint64_t seq)
{
    for (uint32_t f = 0; f < r->nfields; f++) {
        const nst_field_decl *d = &r->fields[f];
        fields[f].name = d->name;
        fields[f].dtype = d->dtype;
        fields[f].ndim = d->ndim;
        memcpy(fields[f].shape, d->shape, sizeof fields[f].shape);
        fields[f].item_bytes = d->item_bytes;
        fields[f].data = nst_bq_field(q, slot, f);
    }
    const nst_field_decl *img = &r->fields[r->image_field];
    memset(out, 0, sizeof *out);
    out->images = fields[r->image_field].data;
    out->labels = r->label_field < r->nfields ? fields[r->label_field].data : NULL;
    out->indices = nst_bq_indices(q, slot);
    out->count = count;
    out->dtype = img->dtype;
    if (img->ndim == 3 && img->shape[0] == 3) { /* C, H, W */
        out->layout = NOSTALL_LAYOUT_NCHW;
        out->channels = 3, out->height = (uint32_t)img->shape[1], out->width = (uint32_t)img->shape[2];
    } else if (img->ndim == 3) { /* H, W, C */
        out->layout = NOSTALL_LAYOUT_NHWC;
        out->height = (uint32_t)img->shape[0], out->width = (uint32_t)img->shape[1];
        out->channels = (uint32_t)img->shape[2];
    }
    out->item_bytes = img->item_bytes;
    out->epoch = epoch;
    out->position = position;
    out->sequence = seq;
    out->nfields = r->nfields;
    out->fields = fields;
}

void nst_ticket_place(nst_ticket *t, nst_bq *q, uint32_t nfields)
{
    for (uint32_t f = 0; f < nfields; f++)
        t->dst[f] = nst_bq_field(q, t->bt.slot, f) + (size_t)t->bt.j * q->field_bytes[f];
    t->index_dst = nst_bq_indices(q, t->bt.slot) + t->bt.j;
    t->epoch = t->bt.epoch;
    t->position = t->bt.position;
    memset(t->io, 0, sizeof t->io);
}

void nst_batches_report_skips(nst_bq *q, uint32_t slot, const nst_batches_sink *sink)
{
    const nst_bq_slot *sc = &q->slots[slot];
    if (!sc->failed || !sink->skip) return;
    const int32_t *st = nst_bq_status(q, slot);
    for (uint32_t j = 0; j < sc->count; j++) {
        if (st[j] >= 0) continue;
        const char *m = nst_bq_msg(q, slot, j);
        uint64_t index;
        memcpy(&index, m, sizeof index);
        sink->skip(sink->ctx, index, st[j], m + sizeof index);
    }
}
