/*
 * ring.c — the local batch backend (see ring.h for the locks and hooks).
 *
 * Workers take item tickets in delivery order (the engine opens batches in
 * free slots as they go); the take hook may decline a ticket until another
 * finishes. The consumer is lent the engine's batches in order, or what
 * the lend hook lends instead, or, when nothing is ready, the spare hook's
 * batch. set_state (reset) discards what is prepared: a generation number
 * tells workers their tickets are stale, and the reset waits until none is
 * in flight before the engine restarts (where the reset hook says).
 * May touch: the engine (batch/engine.c), the recipe's batch description,
 * the loader's sink; never a hook's state.
 */
#include <pthread.h>
#include <stddef.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "batch/ring.h"
#include "common/clock.h"

typedef struct ring {
    nst_batches base;
    nst_ring_params p;
    pthread_mutex_t mu;
    pthread_cond_t work, ready, idle;
    void *mem;
    size_t mem_bytes;
    nst_engine *q;
    nostall_field *fields; /* nslots x nfields: what lent batches point at */
    /* mu: */
    int stopped, resetting;
    uint64_t gen;      /* bumped by reset                               */
    uint64_t inflight; /* tickets taken and not done                    */
    int failed;        /* sticky failure for the consumer               */
    char failmsg[NST_ERROR_MAX];
    nst_ring_lender L; /* what the hooks may use (ring.h)                */
} ring;

static ring *R(nst_batches *b) { return (ring *)b; }

/* The engine's `seen` hook: a batch the consumer reached, lent or passed:
 * its accounting (and the hook's) and its bad items go to the loader (mu
 * held). */
static void seen(void *ctx, nst_engine *q, uint32_t slot)
{
    ring *r = ctx;
    const nst_engine_slot *sc = &q->slots[slot];
    uint64_t io[NST_ENGINE_IO];
    memcpy(io, sc->io, sizeof io);
    if (r->p.hooks.seen) r->p.hooks.seen(r->p.hooks.ctx, sc, io);
    if (r->p.sink.count) r->p.sink.count(r->p.sink.ctx, io);
    nst_batches_report_skips(q, slot, &r->p.sink);
}

/* ------------------------------------------------------------------------
 * Workers.
 * ------------------------------------------------------------------------ */

/* The next ticket, if the engine has one and the take hook wants it (mu
 * held): 0 with *t, else non-zero (wait). */
static int take_one(ring *r, nst_ticket *t)
{
    const nst_ring_hooks *h = &r->p.hooks;
    t->indexed = t->nofetch = 0;
    int rc = nst_engine_take(r->q, &r->p.plan, 0, &t->bt, !h->take);
    if (rc != 0) return rc;
    if (h->take) {
        if (!h->take(h->ctx, t)) return NST_ENGINE_WAIT;
        nst_engine_take(r->q, &r->p.plan, 0, &t->bt, 1);
    }
    nst_ticket_place(t, r->q, r->p.recipe->nfields);
    if (h->taken) {
        h->taken(h->ctx, t);
    } else {
        t->io[NST_IO_fresh] = 1;
        t->io[NST_IO_uses_1] = 1;
    }
    t->gen = r->gen;
    r->inflight++;
    return 0;
}

static int r_take(nst_batches *b, nst_ticket *t, uint32_t timeout_ms)
{
    ring *r = R(b);
    uint64_t deadline = nst_now_ns() + (uint64_t)timeout_ms * 1000000;
    int rc;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        if (r->stopped) {
            rc = NOSTALL_E_STOPPED;
            break;
        }
        if (!r->resetting && (rc = take_one(r, t)) == 0) break;
        if (timeout_ms == 0) {
            rc = NOSTALL_TIMEOUT;
            break;
        }
        uint64_t now = nst_now_ns();
        if (now >= deadline) {
            rc = NOSTALL_TIMEOUT;
            break;
        }
        struct timespec ts = {(time_t)(deadline / 1000000000), (long)(deadline % 1000000000)};
        pthread_cond_timedwait(&r->work, &r->mu, &ts);
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

static int r_stale(nst_batches *b, const nst_ticket *t)
{
    ring *r = R(b);
    pthread_mutex_lock(&r->mu);
    int stale = t->gen != r->gen;
    pthread_mutex_unlock(&r->mu);
    return stale;
}

static void r_done(nst_batches *b, nst_ticket *t, int status, const char *msg)
{
    ring *r = R(b);
    pthread_mutex_lock(&r->mu);
    r->inflight--;
    if (t->gen != r->gen) { /* reset discarded its batch */
        pthread_cond_broadcast(&r->idle);
        pthread_mutex_unlock(&r->mu);
        return;
    }
    if (r->p.hooks.done) r->p.hooks.done(r->p.hooks.ctx, t);
    if (status < 0) /* not delivered: neither fresh nor echoed nor used */
        for (int k = NST_IO_fresh; k <= NST_IO_distance; k++) t->io[k] = 0;
    if (nst_engine_done(r->q, &r->p.plan, &t->bt, 0, status, msg, t->io))
        pthread_cond_broadcast(&r->ready);
    pthread_cond_broadcast(&r->work); /* a declined take may succeed now */
    pthread_mutex_unlock(&r->mu);
}

/* ------------------------------------------------------------------------
 * Consumer.
 * ------------------------------------------------------------------------ */

static void describe(ring *r, nostall_batch *out, uint32_t slot, uint32_t count, uint64_t epoch,
                     uint64_t position, uint64_t seq)
{
    uint8_t *data[NST_FIELDS_MAX];
    for (uint32_t f = 0; f < r->p.recipe->nfields; f++) data[f] = nst_engine_field(r->q, slot, f);
    nst_recipe_describe(out, r->p.recipe, r->fields + (size_t)slot * r->p.recipe->nfields, data,
                        nst_engine_indices(r->q, slot), count, epoch, position, seq);
}

static int r_next(nst_batches *b, nostall_batch *out, uint64_t deadline, const char *fn)
{
    ring *r = R(b);
    int rc;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        if (r->failed) {
            rc = nst_error_set(r->failed, r->failmsg);
            break;
        }
        if (r->stopped) {
            rc = nst_error(NOSTALL_E_STOPPED, "%s: loader stopped", fn);
            break;
        }
        const nst_ring_hooks *h = &r->p.hooks;
        if (!h->keeps_slots && nst_engine_lent_count(r->q, 0) == r->p.nslots) {
            rc = nst_error(NOSTALL_E_STATE, "%s: all %u batches of the ring are lent; release one",
                           fn, r->p.nslots);
            break;
        }
        nst_engine_lent l;
        if (h->lend) {
            rc = h->lend(h->ctx, &r->L, out);
        } else {
            rc = nst_engine_lend(r->q, &r->p.plan, 0, &l, seen, r);
            if (rc == 0) describe(r, out, l.slot, l.count, l.epoch, l.position, l.seq);
        }
        if (rc > 0 && rc != NST_ENGINE_WAIT) break; /* EPOCH_END, DONE */
        if (rc == 0) break;
        if (rc < 0) {
            if (rc == NOSTALL_E_DATASET &&
                !(r->p.flags & NST_ENGINE_FAIL)) { /* no good item; budget */
                r->failed = rc;
                snprintf(r->failmsg, sizeof r->failmsg, "%s: %s", fn, nostall_last_error());
                rc = nst_error_set(r->failed, r->failmsg);
            } else if (rc != NOSTALL_E_STATE) { /* a bad item under the fail policy */
                const nst_engine_slot *sc = NULL;
                for (uint32_t s = 0; s < r->q->nslots; s++)
                    if (r->q->slots[s].seq == r->q->members[0].next_seq &&
                        r->q->slots[s].state == NST_ENGINE_READY)
                        sc = &r->q->slots[s];
                r->failed = rc;
                snprintf(r->failmsg, sizeof r->failmsg, "%s: %s", fn,
                         sc ? sc->errmsg : nostall_strerror(rc));
                rc = nst_error_set(r->failed, r->failmsg);
            } else {
                char keep[NST_ERROR_MAX];
                snprintf(keep, sizeof keep, "%s: %s", fn, nostall_last_error());
                rc = nst_error_set(rc, keep);
            }
            break;
        }
        if (h->spare &&
            h->spare(h->ctx, &r->L, out, r->q->members[0].epoch, r->q->members[0].position)) {
            rc = 0;
            break;
        }
        uint64_t now = nst_now_ns();
        if (deadline) {
            if (now >= deadline) {
                rc = NOSTALL_TIMEOUT;
                break;
            }
            struct timespec ts = {(time_t)(deadline / 1000000000), (long)(deadline % 1000000000)};
            pthread_cond_timedwait(&r->ready, &r->mu, &ts);
        } else {
            pthread_cond_wait(&r->ready, &r->mu);
        }
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

static int r_release(nst_batches *b, const nostall_batch *batch)
{
    ring *r = R(b);
    const nst_ring_hooks *h = &r->p.hooks;
    int rc, taken = 0;
    pthread_mutex_lock(&r->mu);
    if (h->release)
        rc = h->release(h->ctx, &r->L, batch, &taken);
    else
        rc = nst_engine_release(r->q, 0, batch->sequence);
    if (taken) {
        rc = rc < 0 ? rc : 0;
    } else if (rc < 0) {
        char keep[NST_ERROR_MAX];
        snprintf(keep, sizeof keep, "nostall_loader_release: %s", nostall_last_error());
        rc = nst_error_set(rc, keep);
    } else if (rc > 0) {
        pthread_cond_broadcast(&r->work);
        pthread_cond_broadcast(&r->ready); /* a top-up may wait for a slot */
        rc = 0;
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

static int r_reset(nst_batches *b, const nst_engine_cursor *cur, void (*quiet)(void *ctx),
                   void *ctx, const char *fn)
{
    ring *r = R(b);
    const nst_ring_hooks *h = &r->p.hooks;
    nst_engine_cursor at = *cur;
    int rc = 0;
    pthread_mutex_lock(&r->mu);
    if (r->stopped) {
        rc = nst_error(NOSTALL_E_STOPPED, "%s: loader stopped", fn);
        goto out;
    }
    r->resetting = 1;
    r->gen++;
    if (h->resetting) h->resetting(h->ctx);
    while (r->inflight && !r->stopped) pthread_cond_wait(&r->idle, &r->mu);
    if (r->stopped) {
        r->resetting = 0;
        rc = nst_error(NOSTALL_E_STOPPED, "%s: loader stopped", fn);
        goto out;
    }
    if (quiet) quiet(ctx);
    if (h->reset) h->reset(h->ctx, &r->L, cur, &at);
    nst_engine_reset(r->q, &at);
    r->failed = 0;
    r->resetting = 0;
    pthread_cond_broadcast(&r->work);
out:
    pthread_mutex_unlock(&r->mu);
    return rc;
}

static void r_cursor(nst_batches *b, nst_engine_cursor *c)
{
    ring *r = R(b);
    pthread_mutex_lock(&r->mu);
    nst_engine_cursor_get(r->q, 0, c);
    if (r->p.hooks.cursor) r->p.hooks.cursor(r->p.hooks.ctx, c);
    pthread_mutex_unlock(&r->mu);
}

static void r_stop(nst_batches *b)
{
    ring *r = R(b);
    pthread_mutex_lock(&r->mu);
    r->stopped = 1;
    pthread_cond_broadcast(&r->work);
    pthread_cond_broadcast(&r->ready);
    pthread_cond_broadcast(&r->idle);
    pthread_mutex_unlock(&r->mu);
    if (r->p.hooks.stop) r->p.hooks.stop(r->p.hooks.ctx);
}

static void r_free(nst_batches *b)
{
    ring *r = R(b);
    if (!r) return;
    if (r->p.hooks.free) r->p.hooks.free(r->p.hooks.ctx);
    free(r->fields);
    if (r->mem) munmap(r->mem, r->mem_bytes);
    pthread_cond_destroy(&r->work);
    pthread_cond_destroy(&r->ready);
    pthread_cond_destroy(&r->idle);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

static void r_limit(nst_batches *b, uint32_t slots)
{
    ring *r = R(b);
    pthread_mutex_lock(&r->mu);
    r->q->slot_limit = slots;
    pthread_cond_broadcast(&r->work); /* a take declined for room may succeed now */
    pthread_mutex_unlock(&r->mu);
}

static const nst_batches_ops ring_ops = {
    .take = r_take,
    .stale = r_stale,
    .done = r_done,
    .next = r_next,
    .release = r_release,
    .reset = r_reset,
    .cursor = r_cursor,
    .stop = r_stop,
    .free = r_free,
    .memory = nst_ring_memory,
    .limit = r_limit,
};

/* The lender's steps (ring.h), for the hooks. */
static ring *LR(nst_ring_lender *L) { return (ring *)((char *)L - offsetof(ring, L)); }

static int l_lend(nst_ring_lender *L, nst_engine_lent *l)
{
    ring *r = LR(L);
    return nst_engine_lend(r->q, &r->p.plan, 0, l, seen, r);
}

static void l_describe(nst_ring_lender *L, nostall_batch *out, uint32_t slot, uint32_t count,
                       uint64_t epoch, uint64_t position, uint64_t seq)
{
    describe(LR(L), out, slot, count, epoch, position, seq);
}

static void l_count(nst_ring_lender *L, const uint64_t *io)
{
    ring *r = LR(L);
    if (r->p.sink.count) r->p.sink.count(r->p.sink.ctx, io);
}

void nst_ring_wake(void *ctx)
{
    ring *r = ctx;
    pthread_mutex_lock(&r->mu);
    pthread_cond_broadcast(&r->ready);
    pthread_mutex_unlock(&r->mu);
}

int nst_ring_create(nst_batches **out, const nst_ring_params *p)
{
    const nst_recipe *rec = p->recipe;
    ring *r = calloc(1, sizeof *r);
    int rc = 0;
    *out = NULL;
    if (!r) {
        if (p->hooks.free) p->hooks.free(p->hooks.ctx);
        return nst_error(NOSTALL_E_NOMEM, "ring: out of memory");
    }
    r->base.ops = &ring_ops;
    r->p = *p;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->work, NULL);
    {
        /* `ready` and `work` have timed waits against CLOCK_MONOTONIC */
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_destroy(&r->work);
        pthread_cond_init(&r->work, &ca);
        pthread_cond_init(&r->ready, &ca);
        pthread_condattr_destroy(&ca);
    }
    pthread_cond_init(&r->idle, NULL);
    r->mem_bytes = nst_engine_size(p->nslots, p->slot_items, rec->fields, rec->nfields);
    if (!r->mem_bytes) {
        rc = nst_error(NOSTALL_E_INVALID, "ring: %u batches of %u items of %zu bytes overflow",
                       p->nslots, p->slot_items, rec->item_bytes);
        goto fail;
    }
    /* Anonymous pages: zero, page-aligned, and faulted in only when touched. */
    r->mem = mmap(NULL, r->mem_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (r->mem == MAP_FAILED) {
        r->mem = NULL;
        rc = nst_error(NOSTALL_E_NOMEM, "ring: cannot allocate %zu bytes for %u batches",
                       r->mem_bytes, p->nslots);
        goto fail;
    }
    /* Touch it now: the first epoch pays no page faults and the memory is
     * really there (fail early, not mid-training) -- all of it, or the
     * engine and the first touch_slots slots (autotune's start; the rest
     * only if it ever uses them). */
    r->q = nst_engine_init(r->mem, p->nslots, p->slot_items, rec->fields, rec->nfields, p->flags);
    uint32_t touch = p->touch_slots && p->touch_slots < p->nslots ? p->touch_slots : p->nslots;
    memset((uint8_t *)r->mem + r->q->data_off, 0, (size_t)touch * r->q->slot_bytes);
    nst_engine_member_join(r->q, 0, 0, 0);
    r->L = (nst_ring_lender){.q = r->q,
                             .plan = &r->p.plan,
                             .lend = l_lend,
                             .describe = l_describe,
                             .count = l_count};
    r->fields = calloc((size_t)p->nslots * rec->nfields, sizeof *r->fields);
    if (!r->fields) {
        rc = nst_error(NOSTALL_E_NOMEM, "ring: out of memory");
        goto fail;
    }
    *out = &r->base;
    return 0;
fail:
    r_free(&r->base);
    return rc;
}


void nst_ring_memory(nst_batches *b, void **mem, size_t *bytes, uint32_t *nslots,
                     uint32_t *slot_items)
{
    ring *r = R(b);
    *mem = r->mem;
    *bytes = r->mem_bytes;
    *nslots = r->p.nslots;
    *slot_items = r->p.slot_items;
}
