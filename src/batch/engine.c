/*
 * engine.c — the batch engine (see engine.h for the lifecycle, placement,
 * locking and the top-up).
 *
 * Every function runs with the caller's lock held and returns at once; the
 * journal (journal, journal_arg) is written before each multi-step update
 * and cleared after it, so nst_engine_repair() can finish or undo an update
 * whose process died in the middle (only a coordinated group needs it).
 * Slot lookups scan the slot controls: there are at most NST_ENGINE_MAX_SLOTS
 * and usually a handful.
 */
#include <stdio.h>
#include <string.h>

#include "batch/engine_impl.h"

enum {
    J_NONE = NST_ENGINE_J_NONE,
    J_OPEN = NST_ENGINE_J_OPEN,
    J_FINAL = NST_ENGINE_J_FINAL,
    J_DROP = NST_ENGINE_J_DROP
};
enum { TOP_FULL = 1, TOP_DROPPED = 2 };


/* ------------------------------------------------------------------------
 * Slots.
 * ------------------------------------------------------------------------ */

static nst_engine_slot *find_seq(nst_engine *q, uint64_t seq, uint32_t *idx)
{
    for (uint32_t s = 0; s < q->nslots; s++) {
        nst_engine_slot *sc = &q->slots[s];
        if (sc->seq == seq && sc->state != NST_ENGINE_FREE) {
            if (idx) *idx = s;
            return sc;
        }
    }
    return NULL;
}

static void slot_free(nst_engine *q, nst_engine_slot *sc)
{
    if (sc->seq != UINT64_MAX && sc->seq + 1 > q->free_hi) q->free_hi = sc->seq + 1;
    sc->state = NST_ENGINE_FREE;
    sc->users = sc->lent = 0;
}

/* A READY slot nobody needs any more is free. */
static int maybe_free(nst_engine *q, nst_engine_slot *sc)
{
    if (sc->state != NST_ENGINE_READY || sc->users) return 0;
    slot_free(q, sc);
    return 1;
}

static uint64_t members_from(const nst_engine *q, uint64_t seq)
{
    uint64_t m = 0;
    for (uint32_t i = 0; i < NST_ENGINE_MEMBERS; i++)
        if (q->members[i].active && q->members[i].first_seq <= seq) m |= (uint64_t)1 << i;
    return m;
}

static void init_slot(nst_engine *q, uint32_t s, uint64_t seq, uint64_t epoch, uint64_t pos,
                      uint32_t count)
{
    nst_engine_slot *sc = &q->slots[s];
    item_ctl *it = nst_engine_items(q, s);
    int32_t *st = nst_engine_status(q, s);
    sc->seq = seq;
    sc->epoch = epoch;
    sc->position = pos;
    sc->count = count;
    sc->hint = sc->done = sc->failed = sc->delivered = 0;
    sc->users = members_from(q, seq);
    sc->lent = 0;
    sc->topped = sc->top_count = sc->skip_after = sc->next_taken = 0;
    sc->error = 0;
    sc->error_item = 0;
    sc->reserve = sc->counted = 0;
    sc->errmsg[0] = '\0';
    memset(sc->io, 0, sizeof sc->io);
    for (uint32_t j = 0; j < count; j++) {
        it[j].state = I_FREE;
        it[j].owner = 0xff;
        st[j] = NST_ITEM_PENDING;
    }
}

/* RESERVE, every batch of the producer's epoch finished: 1 if it needs
 * another reserve batch, 0 if not, E_DATASET if no item of the shard is
 * good (the planned ones, and reserve ones past one whole wrap). */
static int reserve_need(const nst_engine *q)
{
    if (q->res_closed) return 0; /* the member needs no more (single-member ring) */
    uint64_t want = q->res_lost;
    /* KEEP: an empty batch takes one item; it may eat the batches it walks
     * over (empty ones) and the one giving it (if that held one), each of
     * them owed one item or more */
    if (q->flags & NST_ENGINE_KEEP) want = q->res_empty ? 2 * q->res_empty + 1 : 0;
    if (q->res_good >= want) return 0;
    if (q->res_pgood == 0 && q->res_good == 0 && q->res_tried >= q->slot_items)
        return NOSTALL_E_DATASET;
    return 1;
}

/* RESERVE: will the producer open no more reserve batches of `epoch`? 1:
 * settled; 0: not yet; E_DATASET: the shard has no good item. The members
 * ask, so they need no wake-up from the producer. */
static int reserve_settled(const nst_engine *q, const nst_engine_plan *p, uint64_t epoch)
{
    if (q->prod_epoch > epoch) return 1;
    if (q->prod_epoch < epoch) return 0;
    if (q->res_error) return q->res_error;
    if (q->prod_slot != NST_ENGINE_NONE || p->batch_len(p->ctx, epoch, q->prod_pos) > 0 ||
        nst_engine_any_filling(q))
        return 0;
    int need = reserve_need(q);
    return need < 0 ? need : !need;
}

static int all_bad(const nst_engine *q, uint64_t epoch)
{
    return nst_error(NOSTALL_E_DATASET,
                     "epoch %llu: not one item of this rank's share is good (%llu planned and "
                     "%llu reserve items tried, all bad): an empty epoch is an error",
                     (unsigned long long)epoch, (unsigned long long)q->res_planned,
                     (unsigned long long)q->res_tried);
}

/* An epoch in which a member reached only bad items. */
static int empty_epoch(uint64_t epoch, uint64_t lost)
{
    return nst_error(NOSTALL_E_DATASET,
                     "epoch %llu: all %llu items of this rank's share were bad: an empty "
                     "epoch is an error",
                     (unsigned long long)epoch, (unsigned long long)lost);
}

/* Open the batch at the producer cursor in a free slot (journaled). 1 if a
 * batch is open, 0 if not (none left, halted, no free slot, or RESERVE:
 * waiting for the epoch's batches to finish). */
static int open_batch(nst_engine *q, const nst_engine_plan *p)
{
    if (q->prod_slot != NST_ENGINE_NONE) return 1;
    if (q->halted) return 0;
    uint32_t len, reserve = 0;
    for (;;) {
        if (p->epochs && q->prod_epoch >= p->epochs) return 0;
        if ((len = p->batch_len(p->ctx, q->prod_epoch, q->prod_pos)) > 0) break;
        if (q->flags & NST_ENGINE_RESERVE) { /* past the plan: what did the epoch lose? */
            if (nst_engine_any_filling(q)) return 0;
            int need = reserve_need(q);
            if (need < 0) {
                q->res_error = need;
                q->halted = 1;
                return 0;
            }
            if (need) {
                len = q->slot_items;
                reserve = 1;
                break;
            }
        }
        q->prod_epoch++;
        q->prod_pos = 0;
        q->res_lost = q->res_pgood = q->res_planned = q->res_tried = q->res_good = 0;
        q->res_empty = 0;
        q->res_closed = 0;
    }
    if (q->max_lead && q->prod_seq >= nst_engine_freed_below(q) + q->max_lead) return 0;
    uint32_t s = 0;
    if (q->slot_limit && q->slot_limit < q->nslots) { /* as a ring of slot_limit slots */
        /* batches ahead of the consumer: slots it holds (lent) do not count,
         * or a limit lowered under the batches it keeps would starve it */
        uint32_t used = 0;
        for (uint32_t i = 0; i < q->nslots; i++)
            used += q->slots[i].state != NST_ENGINE_FREE && !q->slots[i].lent;
        if (used >= q->slot_limit) return 0;
    }
    while (s < q->nslots && q->slots[s].state != NST_ENGINE_FREE) s++;
    if (s == q->nslots) return 0;
    q->journal_arg = s;
    q->journal = J_OPEN;
    q->slots[s].state = NST_ENGINE_OPENING;
    init_slot(q, s, q->prod_seq, q->prod_epoch, q->prod_pos, len);
    q->slots[s].reserve = reserve;
    if (reserve)
        q->res_tried += len;
    else
        q->res_planned += len;
    q->slots[s].state = NST_ENGINE_FILLING;
    q->prod_slot = s;
    q->journal = J_NONE;
    return 1;
}

/* The open batch got its last ticket: the cursor moves on. */
static void close_open(nst_engine *q)
{
    nst_engine_slot *sc = &q->slots[q->prod_slot];
    q->prod_slot = NST_ENGINE_NONE;
    q->prod_pos = sc->position + sc->count;
    q->prod_seq = sc->seq + 1;
}

/* The oldest free item of a filling batch (requeued ones first). */
static int find_item(nst_engine *q, uint32_t *s_out, uint32_t *j_out)
{
    uint64_t best = UINT64_MAX;
    for (uint32_t s = 0; s < q->nslots; s++) {
        nst_engine_slot *sc = &q->slots[s];
        if (sc->state != NST_ENGINE_FILLING || sc->seq >= best) continue;
        item_ctl *it = nst_engine_items(q, s);
        while (sc->hint < sc->count && it[sc->hint].state != I_FREE) sc->hint++;
        if (sc->hint < sc->count) {
            best = sc->seq;
            *s_out = s;
            *j_out = sc->hint;
        }
    }
    return best != UINT64_MAX;
}

int nst_engine_any_filling(const nst_engine *q)
{
    for (uint32_t s = 0; s < q->nslots; s++)
        if (q->slots[s].state == NST_ENGINE_FILLING || q->slots[s].state == NST_ENGINE_OPENING)
            return 1;
    return 0;
}

int nst_engine_take(nst_engine *q, const nst_engine_plan *p, uint32_t member, nst_engine_ticket *t,
                    int commit)
{
    uint32_t s, j;
    if (!find_item(q, &s, &j)) {
        if (!open_batch(q, p)) { /* open_batch moved the cursor past ended epochs */
            int over = q->halted || (p->epochs && q->prod_epoch >= p->epochs);
            return over && !nst_engine_any_filling(q) ? NOSTALL_DONE : NST_ENGINE_WAIT;
        }
        if (!find_item(q, &s, &j)) return NST_ENGINE_WAIT;
    }
    nst_engine_slot *sc = &q->slots[s];
    item_ctl *it = &nst_engine_items(q, s)[j];
    t->seq = sc->seq;
    t->epoch = sc->epoch;
    t->position = sc->position + j;
    t->slot = s;
    t->j = j;
    t->tag = it->tag + 1;
    t->reserve = sc->reserve;
    if (!commit) return 0;
    it->owner = (uint8_t)member;
    it->tag++;
    it->state = I_TAKEN;
    if (j == sc->hint) sc->hint = j + 1;
    if (s == q->prod_slot && sc->hint >= sc->count) close_open(q); /* all out: move on */
    return 0;
}

/* Field f's bytes of items, from src to dst: the plan's move (the device
 * ring's mirror) or a memmove on the host. *took: the plan moved some. */
static int move_items(const nst_engine_plan *p, uint32_t f, uint8_t *dst, const uint8_t *src,
                      size_t bytes, int *took)
{
    int rc = p && p->move ? p->move(p->ctx, f, dst, src, bytes) : 0;
    if (rc > 0) *took = 1;
    if (rc == 0) memmove(dst, src, bytes);
    return rc < 0 ? rc : 0;
}

/* The plan's moves of a batch are done (took: it made some); on failure
 * the batch in slot s fails with the status and the message. */
static int moves_done(nst_engine *q, const nst_engine_plan *p, uint32_t s, int took, int rc)
{
    if (rc == 0 && took && p->moved) rc = p->moved(p->ctx);
    if (rc < 0) {
        nst_engine_slot *sc = &q->slots[s];
        sc->error = rc;
        snprintf(sc->errmsg, sizeof sc->errmsg, "batch at position %llu of epoch %llu: %s",
                 (unsigned long long)sc->position, (unsigned long long)sc->epoch,
                 nostall_last_error());
    }
    return rc;
}

/* Compact away bad items (skip policy) and publish the slot (journaled).
 * Item status and messages stay by original index. */
static void finalize(nst_engine *q, const nst_engine_plan *p, uint32_t s)
{
    nst_engine_slot *sc = &q->slots[s];
    q->journal_arg = s;
    q->journal = J_FINAL;
    sc->state = NST_ENGINE_FINALIZING;
    if (sc->failed && !(q->flags & NST_ENGINE_FAIL)) {
        const int32_t *st = nst_engine_status(q, s);
        uint64_t *idx = nst_engine_indices(q, s);
        uint32_t out = 0;
        int took = 0, rc = 0;
        for (uint32_t j = 0; j < sc->count; j++) {
            if (st[j] < 0) continue;
            if (out != j) {
                for (uint32_t f = 0; f < q->nfields && rc == 0; f++) {
                    uint8_t *d = nst_engine_field(q, s, f);
                    size_t ib = q->field_bytes[f];
                    rc = move_items(p, f, d + (size_t)out * ib, d + (size_t)j * ib, ib, &took);
                }
                idx[out] = idx[j];
            }
            out++;
        }
        moves_done(q, p, s, took, rc);
        sc->delivered = out;
    } else {
        sc->delivered = sc->count;
    }
    sc->state = NST_ENGINE_READY;
    if ((q->flags & NST_ENGINE_RESERVE) && !sc->counted && sc->epoch == q->prod_epoch) {
        if (sc->reserve) {
            q->res_good += sc->delivered;
        } else {
            q->res_lost += sc->count - sc->delivered;
            q->res_pgood += sc->delivered;
            q->res_empty += sc->delivered == 0;
        }
        sc->counted = 1;
    }
    q->journal = J_NONE;
    maybe_free(q, sc); /* every member that needed it is gone */
}

int nst_engine_done(nst_engine *q, const nst_engine_plan *p, const nst_engine_ticket *t,
                    uint32_t member, int status, const char *msg, const uint64_t *io)
{
    if (t->slot >= q->nslots || t->j >= q->slot_items) return 0;
    nst_engine_slot *sc = &q->slots[t->slot];
    item_ctl *it = &nst_engine_items(q, t->slot)[t->j];
    if (sc->state != NST_ENGINE_FILLING || sc->seq != t->seq || it->state != I_TAKEN ||
        it->owner != member || it->tag != t->tag)
        return 0; /* reassigned meanwhile: someone else's result counts */
    nst_engine_status(q, t->slot)[t->j] = status < 0 ? status : 0;
    if (io)
        for (int k = 0; k < NST_IO_COUNT_; k++) sc->io[k] += io[k];
    if (status < 0) {
        char *m = nst_engine_msg(q, t->slot, t->j); /* the item's index, then why */
        memcpy(m, &nst_engine_indices(q, t->slot)[t->j], sizeof(uint64_t));
        snprintf(m + sizeof(uint64_t), NST_ENGINE_MSG - sizeof(uint64_t), "%s",
                 msg && *msg ? msg : nostall_strerror(status));
        sc->failed++;
        if (q->flags & NST_ENGINE_FAIL) {
            q->halted = 1;
            if (!sc->error || t->j < sc->error_item) {
                sc->error = status;
                sc->error_item = t->j;
                snprintf(sc->errmsg, sizeof sc->errmsg, "item %llu (epoch %llu, position %llu): %s",
                         (unsigned long long)nst_engine_indices(q, t->slot)[t->j],
                         (unsigned long long)sc->epoch, (unsigned long long)(sc->position + t->j),
                         msg && *msg ? msg : nostall_strerror(status));
            }
        }
    }
    it->state = I_DONE;
    if (++sc->done < sc->count) return 0;
    finalize(q, p, t->slot);
    return 1;
}

/* ------------------------------------------------------------------------
 * Members.
 * ------------------------------------------------------------------------ */

static int last_of_epoch(const nst_engine_plan *p, const nst_engine_slot *sc)
{
    return p->batch_len(p->ctx, sc->epoch, sc->position + sc->count) == 0;
}

/* This member is done with a slot without having it lent (passed). */
static void pass(nst_engine *q, uint32_t s, uint32_t member, nst_engine_seen_fn seen, void *ctx)
{
    nst_engine_slot *sc = &q->slots[s];
    if (seen) seen(ctx, q, s);
    sc->users &= ~((uint64_t)1 << member);
    maybe_free(q, sc);
}

/* The bad items a member meets in a planned batch (reserve ones repeat
 * items or come from the remainder: not counted). */
static uint64_t loss(const nst_engine_slot *sc)
{
    return sc->reserve ? 0 : sc->count - sc->delivered;
}

/* The first bad item's message in slot a, else in slot b (NULL: none). The
 * budget fails before these batches reach the consumer, so their skips are
 * not yet the loader's: the error names one itself. */
static const char *first_bad(nst_engine *q, uint32_t a, uint32_t b)
{
    const uint32_t slots[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        const nst_engine_slot *sc = &q->slots[slots[k]];
        if (sc->state != NST_ENGINE_READY || !sc->failed) continue;
        const int32_t *st = nst_engine_status(q, slots[k]);
        for (uint32_t j = 0; j < sc->count; j++)
            if (st[j] < 0) return nst_engine_msg(q, slots[k], j) + sizeof(uint64_t);
    }
    return NULL;
}

/* The plan's budget of bad items: E_DATASET once `lost` passes it, naming
 * a bad item of slot a or b. */
static int over_budget(nst_engine *q, const nst_engine_plan *p, uint64_t epoch, uint64_t lost,
                       uint32_t a, uint32_t b)
{
    if (!p->max_bad) return 0;
    uint64_t items = 0, most = p->max_bad(p->ctx, epoch, &items);
    if (lost <= most) return 0;
    const char *why = first_bad(q, a, b);
    return nst_error(NOSTALL_E_DATASET,
                     "epoch %llu: %llu bad items in this rank's share of %llu items pass "
                     "max_bad_fraction's budget of %llu (each rank counts its own share)%s%.300s",
                     (unsigned long long)epoch, (unsigned long long)lost, (unsigned long long)items,
                     (unsigned long long)most, why ? "; one of them: " : "", why ? why : "");
}

/* A short batch: top the batch in slot s up from the batches after it
 * (engine.h), once for every member. 0: recorded in the slot; NST_ENGINE_WAIT;
 * E_STATE (local ring: no slot left for a donor); E_DATASET (RESERVE: no
 * good item; the budget). */
static int top_up(nst_engine *q, const nst_engine_plan *p, uint32_t member, uint32_t s,
                  uint32_t taken)
{
    nst_engine_slot *sc = &q->slots[s];
    const int res = (q->flags & NST_ENGINE_RESERVE) != 0;
    /* KEEP (drop_last=0): an empty batch gets one item, else it is filled */
    uint32_t own = sc->delivered - taken, k = 0, di = s,
             left = (q->flags & NST_ENGINE_KEEP) ? (own ? 0 : 1) : sc->count - own;
    const uint32_t target = own + left;
    uint64_t lost = q->members[member].lost + loss(sc);
    nst_engine_slot *d = sc;
    while (left > 0) {
        int past = d->reserve || last_of_epoch(p, d); /* next donors: the reserve */
        if (past && !res) break;
        nst_engine_slot *n = find_seq(q, sc->seq + k + 1, &di);
        if (past && (!n || !n->reserve || n->epoch != sc->epoch)) {
            int st = reserve_settled(q, p, sc->epoch);
            if (st < 0) return all_bad(q, sc->epoch);
            if (st) break; /* no more reserve batches */
            if (n) return NST_ENGINE_WAIT;
        }
        if (!n) { /* not opened yet: is there room for it, or will there be? */
            const uint64_t me = (uint64_t)1 << member;
            uint32_t lent = 0;
            for (uint32_t i = 0; i < q->nslots; i++) {
                const nst_engine_slot *o = &q->slots[i];
                if (o->state == NST_ENGINE_FREE) return NST_ENGINE_WAIT;
                if (o->seq >= sc->seq && o->seq <= sc->seq + k) continue;    /* s, donors */
                if (o->lent != me || o->users != me) return NST_ENGINE_WAIT; /* others free it */
                lent++;
            }
            if (!lent)
                return nst_error(NOSTALL_E_STATE,
                                 "top-up: the batch at position %llu of epoch %llu lost %u "
                                 "skipped item(s), and the %u batches after it that the ring "
                                 "holds have too few good items to fill it: too many bad items "
                                 "(set max_bad_fraction, or raise batches_ahead)",
                                 (unsigned long long)sc->position, (unsigned long long)sc->epoch,
                                 sc->count - sc->delivered, k);
            return nst_error(NOSTALL_E_STATE,
                             "top-up: the batch at position %llu of epoch %llu lost %u "
                             "skipped item(s) and is filled from the next batch, but every "
                             "other ring slot is lent: release a batch first",
                             (unsigned long long)sc->position, (unsigned long long)sc->epoch,
                             sc->count - sc->delivered);
        }
        d = n;
        k++;
        if (d->state != NST_ENGINE_READY) return NST_ENGINE_WAIT;
        lost += loss(d);
        int rc = over_budget(q, p, sc->epoch, lost, di, s);
        if (rc < 0) return rc;
        left -= d->delivered < left ? d->delivered : left;
    }
    uint32_t need = target - own - left; /* what the donors give */
    if (left > 0 && (!(q->flags & NST_ENGINE_KEEP) || own + need == 0)) {
        /* the epoch's partial last batch: dropped */
        sc->skip_after = k;
        sc->topped = TOP_DROPPED;
        return 0;
    }
    sc->next_taken = 0;
    sc->skip_after = 0;
    int took = 0, rc = 0;
    for (uint32_t i = 1; i <= k; i++) {
        d = find_seq(q, sc->seq + i, &di);
        uint32_t t = d->delivered < need ? d->delivered : need, from = d->delivered - t;
        for (uint32_t f = 0; f < q->nfields && rc == 0 && t; f++) {
            size_t ib = q->field_bytes[f];
            rc = move_items(p, f, nst_engine_field(q, s, f) + (size_t)own * ib,
                            nst_engine_field(q, di, f) + (size_t)from * ib, (size_t)t * ib, &took);
        }
        memcpy(nst_engine_indices(q, s) + own, nst_engine_indices(q, di) + from,
               t * sizeof(uint64_t));
        own += t;
        need -= t;
        if (t == d->delivered) {
            sc->skip_after = i;
            sc->next_taken = 0;
        } else {
            sc->next_taken = t;
        }
    }
    if ((rc = moves_done(q, p, s, took, rc)) < 0) return rc; /* not committed: sc->error */
    sc->top_count = own;
    sc->topped = TOP_FULL; /* the commit point */
    return 0;
}

/* Where the items a member took from the end of its next batch lie (the
 * batch is READY: the top-up read it): from the first of them to the
 * last, by original index, so bad items before or after them stay the
 * batch's. */
static void taken_span(nst_engine *q, nst_engine_member *m)
{
    uint32_t s;
    m->taken_first = m->taken_end = 0;
    const nst_engine_slot *d = m->taken ? find_seq(q, m->next_seq, &s) : NULL;
    if (!d || d->state != NST_ENGINE_READY || m->taken > d->delivered) return;
    const int32_t *st = nst_engine_status(q, s);
    uint32_t skip = d->delivered - m->taken, good = 0; /* good items left to the batch */
    for (uint32_t j = 0; j < d->count; j++) {
        if (st[j] < 0) continue;
        if (good == skip) m->taken_first = j;
        if (++good == d->delivered) m->taken_end = j + 1;
    }
}

int nst_engine_lend(nst_engine *q, const nst_engine_plan *p, uint32_t member, nst_engine_lent *l,
                    nst_engine_seen_fn seen, void *ctx)
{
    nst_engine_member *m = &q->members[member];
    const int res = (q->flags & NST_ENGINE_RESERVE) != 0;
    for (;;) {
        if (p->epochs && m->epoch >= p->epochs) return NOSTALL_DONE;
        int past = p->batch_len(p->ctx, m->epoch, m->position) == 0;
        if (past && !(res && m->owed)) {
            if (res) { /* the reserve batches left over are passed */
                if (q->prod_epoch == m->epoch) q->res_closed = 1; /* owes nothing */
                int st = reserve_settled(q, p, m->epoch);
                if (st < 0) return all_bad(q, m->epoch);
                if (!st) return NST_ENGINE_WAIT;
                uint32_t rs;
                nst_engine_slot *r;
                while ((r = find_seq(q, m->next_seq, &rs)) && r->reserve && r->epoch == m->epoch) {
                    if (r->state != NST_ENGINE_READY) return NST_ENGINE_WAIT;
                    pass(q, rs, member, seen, ctx);
                    m->next_seq++;
                }
            }
            /* a whole epoch whose every reached item was bad (no reserve:
             * one process, drop_last=0) is an error, whatever the budget */
            if (!m->lent_now && m->lost) return empty_epoch(m->epoch, m->lost);
            m->epoch++;
            m->position = 0;
            m->taken = m->taken_first = m->taken_end = 0;
            m->owed = 0;
            m->lost = 0;
            m->lent_now = 0;
            return NOSTALL_EPOCH_END;
        }
        uint32_t s;
        nst_engine_slot *sc = find_seq(q, m->next_seq, &s);
        if (past && (!sc || !sc->reserve)) { /* owed batches come from the reserve */
            int st = reserve_settled(q, p, m->epoch);
            if (st < 0) return all_bad(q, m->epoch);
            if (st > 0 && (!sc || sc->epoch != m->epoch))
                return nst_error(NOSTALL_E_STATE,
                                 "epoch %llu: %u batch(es) owed but the reserve is spent",
                                 (unsigned long long)m->epoch, m->owed);
            return NST_ENGINE_WAIT;
        }
        if (!sc || sc->state != NST_ENGINE_READY) return NST_ENGINE_WAIT;
        if (sc->error) return sc->error;
        uint32_t count = sc->delivered - m->taken;
        /* KEEP (drop_last=0): a short batch is lent short, an empty one filled */
        if ((q->flags & NST_ENGINE_FILL) && count < sc->count && !sc->topped &&
            (!(q->flags & NST_ENGINE_KEEP) || count == 0)) {
            int rc = top_up(q, p, member, s, m->taken);
            if (rc != 0) return rc;
        }
        uint32_t skip = 0, next_taken = 0;
        if (sc->topped) {
            skip = sc->skip_after;
            next_taken = sc->next_taken;
            count = sc->top_count;
        }
        uint64_t seq = sc->seq, lost = m->lost + loss(sc), end = sc->position + sc->count;
        uint32_t eaten = 0;
        for (uint32_t i = 1; i <= skip; i++) { /* donors left empty */
            uint32_t di;
            const nst_engine_slot *d = find_seq(q, seq + i, &di);
            if (!d) continue;
            lost += loss(d);
            eaten += !d->reserve;
            end = d->position + d->count;
        }
        int rc = over_budget(q, p, sc->epoch, lost, s, s);
        if (rc < 0) return rc;
        m->lost = lost;
        m->next_seq = seq + 1 + skip;
        m->position = end;
        m->taken = next_taken;
        taken_span(q, m);
        if (res) m->owed += eaten;
        for (uint32_t i = 1; i <= skip; i++) {
            uint32_t di;
            if (find_seq(q, seq + i, &di)) pass(q, di, member, seen, ctx);
        }
        if (sc->topped == TOP_DROPPED || count == 0) { /* nothing to lend */
            pass(q, s, member, seen, ctx);
            continue;
        }
        if (res && sc->reserve && m->owed) m->owed--;
        if (seen) seen(ctx, q, s);
        sc->lent |= (uint64_t)1 << member;
        m->consumed++;
        if (m->lent_now < UINT32_MAX) m->lent_now++;
        l->slot = s;
        l->count = count;
        l->seq = seq;
        l->epoch = sc->epoch;
        l->position = sc->position;
        return 0;
    }
}

int nst_engine_release(nst_engine *q, uint32_t member, uint64_t seq)
{
    const uint64_t bit = (uint64_t)1 << member;
    for (uint32_t s = 0; s < q->nslots; s++) {
        nst_engine_slot *sc = &q->slots[s];
        if (sc->seq != seq || sc->state != NST_ENGINE_READY || !(sc->lent & bit)) continue;
        sc->lent &= ~bit;
        sc->users &= ~bit;
        return maybe_free(q, sc);
    }
    return nst_error(NOSTALL_E_INVALID,
                     "batch %llu is not lent (released already, or not "
                     "from this loader)",
                     (unsigned long long)seq);
}

void nst_engine_member_join(nst_engine *q, uint32_t member, uint64_t first_seq, uint64_t epoch)
{
    nst_engine_member *m = &q->members[member];
    memset(m, 0, sizeof *m);
    m->active = 1;
    m->first_seq = m->next_seq = first_seq;
    m->epoch = epoch;
    m->lent_now = first_seq > 0; /* joined mid-run: its first epoch is not judged */
    /* batches already open from first_seq on are this member's too */
    for (uint32_t s = 0; s < q->nslots; s++)
        if (q->slots[s].state != NST_ENGINE_FREE && q->slots[s].seq >= first_seq)
            q->slots[s].users |= (uint64_t)1 << member;
}

static void drop(nst_engine *q, uint32_t member)
{
    const uint64_t bit = (uint64_t)1 << member;
    for (uint32_t s = 0; s < q->nslots; s++) {
        nst_engine_slot *sc = &q->slots[s];
        if (sc->state == NST_ENGINE_FILLING) {
            item_ctl *it = nst_engine_items(q, s);
            for (uint32_t j = 0; j < sc->count; j++)
                if (it[j].state == I_TAKEN && it[j].owner == member) {
                    it[j].state = I_FREE;
                    if (j < sc->hint) sc->hint = j;
                    q->requeued++;
                }
        }
        sc->users &= ~bit;
        sc->lent &= ~bit;
        maybe_free(q, sc);
    }
    q->members[member].active = 0;
}

void nst_engine_member_drop(nst_engine *q, uint32_t member)
{
    q->journal_arg = member;
    q->journal = J_DROP;
    drop(q, member);
    q->journal = J_NONE;
}

uint64_t nst_engine_freed_below(const nst_engine *q)
{
    uint64_t lo = q->prod_slot != NST_ENGINE_NONE ? q->slots[q->prod_slot].seq : q->prod_seq;
    for (uint32_t s = 0; s < q->nslots; s++)
        if (q->slots[s].state != NST_ENGINE_FREE && q->slots[s].seq < lo) lo = q->slots[s].seq;
    return lo;
}

uint64_t nst_engine_join_seq(const nst_engine *q, const nst_engine_plan *p, uint64_t *epoch)
{
    /* Walk the plan from the start to the first epoch boundary at or after
     * everything freed so far (free_hi), so no batch of the joiner's first
     * epoch is gone. Epochs are walked batch by batch: a plan of fixed
     * epochs (the group's) makes this a short loop. */
    uint64_t seq = 0, e = 0;
    for (;;) {
        if (p->epochs && e >= p->epochs) break;
        uint64_t n = 0, pos = 0;
        uint32_t len;
        while ((len = p->batch_len(p->ctx, e, pos)) > 0) {
            n++;
            pos += len;
        }
        if (seq >= q->free_hi) break;
        seq += n;
        e++;
        if (n == 0) break;
    }
    *epoch = e;
    return seq;
}

void nst_engine_cursor_get(const nst_engine *q, uint32_t member, nst_engine_cursor *c)
{
    const nst_engine_member *m = &q->members[member];
    c->epoch = m->epoch;
    c->position = m->position;
    c->lost = m->lost;
    c->taken = m->taken;
    c->owed = m->owed;
    c->taken_first = m->taken_first;
    c->taken_end = m->taken_end;
}

void nst_engine_reset(nst_engine *q, const nst_engine_cursor *c)
{
    const uint64_t epoch = c->epoch, position = c->position;
    const uint32_t taken = c->taken, owed = c->owed;
    for (uint32_t s = 0; s < q->nslots; s++) {
        nst_engine_slot *sc = &q->slots[s];
        if (sc->state == NST_ENGINE_FREE) continue;
        if (sc->lent) { /* stays valid until released: nobody else needs it */
            sc->state = NST_ENGINE_READY;
            sc->users = sc->lent;
            continue;
        }
        slot_free(q, sc);
    }
    if (q->prod_slot != NST_ENGINE_NONE) q->prod_seq = q->slots[q->prod_slot].seq + 1;
    q->prod_slot = NST_ENGINE_NONE;
    q->prod_epoch = epoch;
    q->prod_pos = position;
    q->halted = 0;
    /* RESERVE: what the epoch lost before `position` (engine.h) */
    q->res_lost = taken + (uint64_t)owed * q->slot_items;
    q->res_pgood = q->res_planned = q->res_tried = q->res_good = 0;
    q->res_empty = owed;
    q->res_error = 0;
    q->res_closed = 0;
    for (uint32_t i = 0; i < NST_ENGINE_MEMBERS; i++) {
        nst_engine_member *m = &q->members[i];
        if (!m->active) continue;
        m->first_seq = m->next_seq = q->prod_seq;
        m->epoch = epoch;
        m->position = position;
        m->taken = taken;
        m->owed = owed;
        m->lost = c->lost; /* the budget counts on */
        m->taken_first = c->taken_first;
        m->taken_end = c->taken_end;
        m->lent_now = position > 0; /* a resumed epoch is not judged empty */
    }
}

void nst_engine_repair(nst_engine *q)
{
    uint32_t arg = q->journal_arg;
    switch (q->journal) {
    case J_OPEN:
        if (arg < q->nslots && q->slots[arg].state == NST_ENGINE_OPENING) {
            q->slots[arg].state = NST_ENGINE_FREE; /* never published: open again */
            q->prod_slot = NST_ENGINE_NONE;
        }
        break;
    case J_FINAL:
        if (arg < q->nslots && q->slots[arg].state == NST_ENGINE_FINALIZING) {
            /* compaction may have moved bytes: prepare the batch again */
            nst_engine_slot *sc = &q->slots[arg];
            item_ctl *it = nst_engine_items(q, arg);
            int32_t *st = nst_engine_status(q, arg);
            for (uint32_t j = 0; j < sc->count; j++) {
                it[j].state = I_FREE;
                st[j] = NST_ITEM_PENDING;
            }
            memset(sc->io, 0, sizeof sc->io);
            sc->error = 0;
            sc->errmsg[0] = '\0';
            sc->hint = 0;
            sc->state = NST_ENGINE_FILLING;
        }
        break;
    case J_DROP:
        if (arg < NST_ENGINE_MEMBERS) drop(q, arg);
        break;
    default: break;
    }
    q->journal = J_NONE;
    /* Counters are derived from item states. */
    for (uint32_t s = 0; s < q->nslots; s++) {
        nst_engine_slot *sc = &q->slots[s];
        if (sc->state != NST_ENGINE_FILLING) continue;
        item_ctl *it = nst_engine_items(q, s);
        const int32_t *st = nst_engine_status(q, s);
        uint32_t done = 0, failed = 0, hint = sc->count;
        for (uint32_t j = 0; j < sc->count; j++) {
            if (it[j].state == I_DONE) {
                done++;
                failed += st[j] < 0;
            } else if (it[j].state == I_FREE && j < hint) {
                hint = j;
            }
        }
        sc->done = done;
        sc->failed = failed;
        sc->hint = hint;
        if (done == sc->count) finalize(q, NULL, s); /* a group's plan moves nothing */
    }
}

uint32_t nst_engine_lent_count(const nst_engine *q, uint32_t member)
{
    uint32_t n = 0;
    for (uint32_t s = 0; s < q->nslots; s++) n += (q->slots[s].lent >> member) & 1;
    return n;
}
