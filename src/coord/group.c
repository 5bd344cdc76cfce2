/*
 * group.c — the protocol of coordinated prep over the batch engine placed
 * in a group's segment (group.h; the segment, lock and member table are in
 * segment.c, lock.c, members.c; group_impl.h says who holds what).
 *
 * Workers of every member take item tickets from the one engine, in
 * delivery order, and write items straight into the shared slots; each
 * member's consumer is lent every batch from its first_seq on, in order,
 * and releases it in any order; a slot is free once no live member needs
 * it, so the fastest member is at most `max_lead` batches ahead of the
 * slowest. Joining starts at the first epoch of which nothing was freed.
 *
 * THREADS  take/done from any thread of the member; next/release from its
 *   consumer; the handle's local fields (failed) belong to the consumer.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <linux/futex.h>
#include <limits.h>
#include <unistd.h>

#include "common/clock.h"
#include "coord/group_impl.h"

static int forked(const nst_group *g, const char *fn)
{
    if (getpid() != g->pid)
        return nst_error(NOSTALL_E_FORK, "%s: group %s used in a child process after fork()", fn,
                         g->name);
    return 0;
}

/* ------------------------------------------------------------------------
 * Workers.
 * ------------------------------------------------------------------------ */

int nst_group_take(nst_group *g, nst_group_ticket *t, uint32_t timeout_ms)
{
    static const char fn[] = "nst_group_take";
    int rc;
    if (!g || !t) return nst_error(NOSTALL_E_INVALID, "%s: NULL argument", fn);
    if ((rc = forked(g, fn)) < 0) return rc;
    header *h = g->h;
    uint64_t t0 = nst_now_ns(), deadline = t0 + (uint64_t)timeout_ms * 1000000 + 1;
    if ((rc = grp_lock(g, 0)) < 0) return rc;
    grp_heartbeat(g);
    nst_engine_ticket bt;
    for (;;) {
        if (atomic_load(&g->stop)) {
            rc = nst_error(NOSTALL_E_STOPPED, "%s: group %s stopped", fn, g->name);
            break;
        }
        rc = nst_engine_take(g->q, &g->plan, g->me, &bt, 1);
        if (rc != NST_ENGINE_WAIT) break; /* 0 or DONE */
        grp_sweep(g, 0);
        if (nst_now_ns() >= deadline) {
            rc = NOSTALL_TIMEOUT;
            break;
        }
        if ((rc = grp_wait(g, &h->ev_work, &h->nwait_work, deadline)) < 0) return rc;
    }
    if (rc == 0) {
        nst_engine *q = g->q;
        t->seq = bt.seq;
        t->epoch = bt.epoch;
        t->position = bt.position;
        t->j = bt.j;
        t->slot = bt.slot;
        t->tag = bt.tag;
        memset(t->dst, 0, sizeof t->dst);
        for (uint32_t f = 0; f < q->nfields; f++)
            t->dst[f] = nst_engine_field(q, bt.slot, f) + (size_t)bt.j * q->field_bytes[f];
        t->image = t->dst[0];
        t->label = q->nfields > 1 ? (int64_t *)t->dst[1] : NULL;
        t->index = nst_engine_indices(q, bt.slot) + bt.j;
        memset(t->io, 0, sizeof t->io);
    }
    h->members[g->me].take_wait_ns += nst_now_ns() - t0;
    grp_unlock(g);
    return rc;
}

void nst_group_done(nst_group *g, const nst_group_ticket *t, int status, const char *msg)
{
    if (!g || !t || getpid() != g->pid) return;
    header *h = g->h;
    if (grp_lock(g, 2000) < 0) return; /* the ticket is returned at leave */
    grp_heartbeat(g);
    nst_engine_ticket bt = {.seq = t->seq,
                            .epoch = t->epoch,
                            .position = t->position,
                            .slot = t->slot,
                            .j = t->j,
                            .tag = t->tag};
    uint64_t io[NST_ENGINE_IO];
    for (int k = 0; k < NST_ENGINE_IO; k++) io[k] = k < NST_GROUP_IO_MAX ? t->io[k] : 0;
    uint32_t done_before = g->q->slots[t->slot].done;
    int ready = nst_engine_done(g->q, &g->plan, &bt, g->me, status, msg, io);
    member *m = &h->members[g->me];
    if (ready || g->q->slots[t->slot].done != done_before) m->items_produced++;
    if (ready) {
        m->batches_produced++;
        grp_wake(&h->ev_ready, h->nwait_ready);
    }
    grp_unlock(g);
}

/* ------------------------------------------------------------------------
 * Consumer.
 * ------------------------------------------------------------------------ */

int nst_group_next(nst_group *g, nst_group_batch *b, uint32_t timeout_ms)
{
    static const char fn[] = "nst_group_next";
    int rc;
    if (!g || !b) return nst_error(NOSTALL_E_INVALID, "%s: NULL argument", fn);
    if ((rc = forked(g, fn)) < 0) return rc;
    if (g->failed) return nst_error_set(g->failed, g->failmsg);
    header *h = g->h;
    nst_engine *q = g->q;
    uint64_t t0 = nst_now_ns(), deadline = t0 + (uint64_t)timeout_ms * 1000000 + 1;
    if ((rc = grp_lock(g, 0)) < 0) return rc;
    grp_heartbeat(g);
    for (;;) {
        if (atomic_load(&g->stop)) {
            rc = nst_error(NOSTALL_E_STOPPED, "%s: group %s stopped", fn, g->name);
            break;
        }
        if (nst_engine_lent_count(q, g->me) >= h->max_lead) {
            rc = nst_error(NOSTALL_E_STATE,
                           "%s: group %s: all %u batches of max_lead are lent; release one", fn,
                           g->name, h->max_lead);
            break;
        }
        nst_engine_lent l;
        rc = nst_engine_lend(q, &g->plan, g->me, &l, g->seen, g->seen_ctx);
        if (rc == 0) {
            const nst_engine_slot *sc = &q->slots[l.slot];
            memset(b, 0, sizeof *b);
            b->seq = l.seq;
            b->epoch = l.epoch;
            b->position = l.position;
            b->slot = l.slot;
            b->count = l.count;
            b->len = sc->count;
            for (uint32_t f = 0; f < q->nfields; f++) b->data[f] = nst_engine_field(q, l.slot, f);
            b->images = b->data[0];
            b->labels = q->nfields > 1 ? (int64_t *)(void *)b->data[1] : NULL;
            b->indices = nst_engine_indices(q, l.slot);
            b->item_status = nst_engine_status(q, l.slot);
            b->item_msgs = nst_engine_msg(q, l.slot, 0) + sizeof(uint64_t);
            b->io = sc->io;
            h->members[g->me].batches_consumed++;
            break;
        }
        if (rc == NOSTALL_EPOCH_END || rc == NOSTALL_DONE) break;
        if (rc < 0) { /* a bad item under the fail policy: sticky */
            const nst_engine_slot *sc = NULL;
            for (uint32_t s = 0; s < q->nslots; s++)
                if (q->slots[s].seq == q->members[g->me].next_seq &&
                    q->slots[s].state == NST_ENGINE_READY)
                    sc = &q->slots[s];
            g->failed = rc;
            snprintf(g->failmsg, sizeof g->failmsg, "%s: group %s: %s", fn, g->name,
                     sc ? sc->errmsg : nostall_strerror(rc));
            rc = nst_error_set(g->failed, g->failmsg);
            break;
        }
        grp_sweep(g, 0);
        if (nst_now_ns() >= deadline) {
            rc = NOSTALL_TIMEOUT;
            break;
        }
        if ((rc = grp_wait(g, &h->ev_ready, &h->nwait_ready, deadline)) < 0) return rc;
    }
    h->members[g->me].wait_ns += nst_now_ns() - t0;
    grp_unlock(g);
    return rc;
}

int nst_group_release(nst_group *g, uint64_t seq)
{
    static const char fn[] = "nst_group_release";
    int rc;
    if (!g) return nst_error(NOSTALL_E_INVALID, "%s: NULL argument", fn);
    if ((rc = forked(g, fn)) < 0) return rc;
    header *h = g->h;
    if ((rc = grp_lock(g, 2000)) < 0) return rc;
    grp_heartbeat(g);
    rc = nst_engine_release(g->q, g->me, seq);
    if (rc < 0) {
        char keep[NST_ERROR_MAX];
        snprintf(keep, sizeof keep, "%s: group %s: %s", fn, g->name, nostall_last_error());
        rc = nst_error_set(rc, keep);
    } else {
        if (rc > 0) grp_wake(&h->ev_work, h->nwait_work);
        rc = 0;
    }
    grp_unlock(g);
    return rc;
}

/* ------------------------------------------------------------------------
 * Stop, stats.
 * ------------------------------------------------------------------------ */

void nst_group_set_seen(nst_group *g, nst_engine_seen_fn fn, void *ctx)
{
    g->seen = fn;
    g->seen_ctx = ctx;
}

void nst_group_stop(nst_group *g)
{
    if (!g) return;
    atomic_store(&g->stop, 1);
    if (getpid() != g->pid) return;
    /* Wake this member's sleepers (and, harmlessly, everyone else's). */
    atomic_fetch_add(&g->h->ev_work, 1);
    atomic_fetch_add(&g->h->ev_ready, 1);
    syscall(SYS_futex, (uint32_t *)&g->h->ev_work, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
    syscall(SYS_futex, (uint32_t *)&g->h->ev_ready, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

int nst_group_stats_get(nst_group *g, nst_group_stats *s)
{
    int rc;
    if (!g || !s) return nst_error(NOSTALL_E_INVALID, "nst_group_stats_get: NULL argument");
    if ((rc = forked(g, "nst_group_stats_get")) < 0) return rc;
    header *h = g->h;
    if ((rc = grp_lock(g, 2000)) < 0) return rc;
    memset(s, 0, sizeof *s);
    const member *m = &h->members[g->me];
    const nst_engine_member *bm = &g->q->members[g->me];
    s->members = grp_live_members(h);
    s->member_id = g->me;
    s->generation = h->generation;
    s->first_seq = bm->first_seq;
    s->first_epoch = h->batches_per_epoch ? bm->first_seq / h->batches_per_epoch : 0;
    s->items_produced = m->items_produced;
    s->batches_produced = m->batches_produced;
    s->batches_consumed = m->batches_consumed;
    s->wait_ns = m->wait_ns;
    s->take_wait_ns = m->take_wait_ns;
    gstats t = h->departed;
    for (uint32_t i = 0; i < NST_GROUP_MAX_MEMBERS; i++) {
        const member *x = &h->members[i];
        if (x->state != M_ACTIVE) continue;
        t.items_produced += x->items_produced;
        t.batches_produced += x->batches_produced;
        t.batches_consumed += x->batches_consumed;
        t.wait_ns += x->wait_ns;
    }
    s->group_items_produced = t.items_produced;
    s->group_batches_produced = t.batches_produced;
    s->group_batches_consumed = t.batches_consumed;
    s->group_wait_ns = t.wait_ns;
    s->members_joined = h->members_joined;
    s->members_dropped = h->members_dropped;
    s->items_requeued = g->q->requeued;
    s->mutex_repairs = h->mutex_repairs;
    s->produced_seq = g->q->prod_seq;
    s->freed_seq = nst_engine_freed_below(g->q);
    grp_unlock(g);
    return 0;
}

/* ------------------------------------------------------------------------
 * Join / leave.
 * ------------------------------------------------------------------------ */

/* Joining a live segment (mutex held): 0 joined; 1 the segment is dead or
 * defunct (try again, *gen = its generation + 1); <0 error. */
static int join_live(nst_group *g, const nst_group_params *p, const grp_plan *pl, uint64_t *gen,
                     const char *fn)
{
    header *h = g->h;
    if (atomic_load(&h->seg_state) != SEG_LIVE) return 1; /* the last member just left */
    grp_sweep(g, 1);
    if (grp_live_members(h) == 0) { /* leftover of a crashed group */
        *gen = h->generation + 1;
        grp_retire(g);
        return 1;
    }
    int rc = grp_compare(g, p, pl);
    if (rc < 0) return rc;
    uint32_t i = 0;
    while (i < NST_GROUP_MAX_MEMBERS && h->members[i].state != M_FREE) i++;
    if (i == NST_GROUP_MAX_MEMBERS)
        return nst_error(NOSTALL_E_STATE, "%s: group %s is full (%d members)", fn, g->name,
                         NST_GROUP_MAX_MEMBERS);
    /* Consume from the first batch of the first epoch of which nothing was
     * freed yet. */
    uint64_t epoch, first = nst_engine_join_seq(g->q, &g->plan, &epoch);
    grp_fill_member(g, i, first, epoch);
    grp_wake_all(h);
    return 0;
}

int nst_group_join(nst_group **out, const nst_group_params *p)
{
    static const char fn[] = "nst_group_join";
    int rc;
    nst_error_clear();
    if (!out || !p || !p->name || (p->nfp && !p->fp))
        return nst_error(NOSTALL_E_INVALID, "%s: NULL argument", fn);
    *out = NULL;
    if (!grp_valid_name(p->name))
        return nst_error(NOSTALL_E_OPTION,
                         "%s: coordinate: group name '%s' must be 1-%d characters of "
                         "[A-Za-z0-9_.-], not starting with '.'",
                         fn, p->name, NST_GROUP_NAME_MAX);
    grp_plan *pl = malloc(sizeof *pl);
    nst_group *g = calloc(1, sizeof *g);
    if (!pl || !g) {
        free(pl);
        free(g);
        return nst_error(NOSTALL_E_NOMEM, "%s: out of memory", fn);
    }
    if ((rc = grp_make_plan(p, pl, fn)) < 0) goto fail;
    g->pid = getpid();
    snprintf(g->name, sizeof g->name, "%s", p->name);
    snprintf(g->shm, sizeof g->shm, "/nostall-%u-%s", (unsigned)getuid(), p->name);
    grp_clean_tmp();

    uint64_t gen = 1, deadline = nst_now_ns() + 10ull * 1000000000;
    for (int attempt = 0;; attempt++) {
        if (nst_now_ns() > deadline) {
            rc = nst_error(NOSTALL_E_STATE, "%s: group %s: cannot attach to /dev/shm%s", fn,
                           g->name, g->shm);
            goto fail;
        }
        if (attempt) usleep(1000);
        int retry, fd;
        if ((rc = grp_attach(g, &retry, fn)) < 0) goto fail;
        if (retry) { /* no segment: create one */
            rc = grp_create(g, p, pl, gen, &fd);
            if (rc < 0) goto fail;
            if (rc == 0) continue; /* another member created it first */
            close(fd);
            break;
        }
        g->me = UINT32_MAX;
        if ((rc = grp_lock(g, 5000)) < 0) {
            grp_unmap(g);
            goto fail;
        }
        rc = join_live(g, p, pl, &gen, fn);
        grp_unlock(g);
        if (rc == 0) break;
        grp_unmap(g);
        if (rc < 0) goto fail;
    }
    *out = g;
    free(pl);
    return 0;
fail:
    free(pl);
    free(g);
    return rc;
}

void nst_group_leave(nst_group *g)
{
    if (!g) return;
    if (getpid() == g->pid && g->h) {
        if (grp_lock(g, 5000) == 0) {
            grp_drop_member(g, g->me, 0);
            grp_sweep(g, 1);
            if (grp_live_members(g->h) == 0) grp_retire(g);
            grp_unlock(g);
        }
    }
    grp_unmap(g);
    free(g);
}
