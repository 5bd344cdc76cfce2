/*
 * ring.c — the local batch backend (see ring.h for the locks).
 *
 * Workers take item tickets in delivery order (the engine opens batches in
 * free slots as they go); with fixed item echoing each ticket is also a
 * draw of the echo schedule, which says which item and which use of it.
 * The consumer is lent the engine's batches in order; with batch echoing
 * they pass through the shuffle buffer first (echo/batch_echo.c), and with
 * adaptive echoing an assembled echo batch is lent when no fresh one is
 * ready. set_state (reset) discards what is prepared: a generation number
 * tells workers their tickets are stale, and the reset waits until none is
 * in flight before the engine restarts.
 */
#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "batch/ring.h"
#include "common/clock.h"
#include "echo/adaptive.h"
#include "echo/batch_echo.h"
#include "echo/store.h"

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
    /* echoing */
    nst_echo_store *estore; /* NST_ECHO_ITEMS                                */
    nst_batch_echo eb;      /* NST_ECHO_BATCHES                              */
    uint32_t *blends;       /* ... user lends outstanding per slot           */
    uint8_t *bpool;         /* ... the slot is in the shuffle buffer          */
    uint64_t restore_upto;  /* ... after a reset: fresh batches below this
                              that are not in the buffer are dropped        */
    int bpending_end;       /* ... the engine said EPOCH_END / DONE           */
    nst_adaptive *adaptive; /* NST_ECHO_ADAPTIVE                             */
} ring;

static ring *R(nst_batches *b) { return (ring *)b; }

/* ------------------------------------------------------------------------
 * Accounting helpers.
 * ------------------------------------------------------------------------ */

static void add_uses(uint64_t *io, uint32_t uses, uint64_t n)
{
    io[uses <= 4 ? NST_IO_uses_1 + uses - 1 : uses <= 8 ? NST_IO_uses_5_8 : NST_IO_uses_9_up] += n;
}

/* The engine's `seen` hook: a batch the consumer reached, lent or passed:
 * its accounting and its bad items go to the loader (mu held). */
static void seen(void *ctx, nst_engine *q, uint32_t slot)
{
    ring *r = ctx;
    const nst_engine_slot *sc = &q->slots[slot];
    uint64_t io[NST_ENGINE_IO];
    memcpy(io, sc->io, sizeof io);
    if (r->p.echo == NST_ECHO_BATCHES)
        add_uses(io, nst_batch_echo_uses(&r->eb, sc->epoch, sc->position), sc->delivered);
    if (r->p.sink.count) r->p.sink.count(r->p.sink.ctx, io);
    nst_batches_report_skips(q, slot, &r->p.sink);
}

/* ------------------------------------------------------------------------
 * Workers.
 * ------------------------------------------------------------------------ */

/* The echo schedule's next draw for the ticket (mu held): 1, or 0 when no
 * store entry is free (nothing changed: wait for a ticket to finish). */
static int echo_draw(ring *r, nst_ticket *t)
{
    nst_echo_sched *es = r->p.sched;
    if (t->bt.epoch != es->epoch) { /* the first ticket of a new epoch */
        nst_echo_store_close_all(r->estore);
        nst_echo_sched_start(es, t->bt.epoch, 0);
    }
    nst_echo_use u;
    if (nst_echo_sched_next(es, t->bt.seq, &u) != 1) return 0;
    t->echo = 1;
    t->index = u.index;
    t->copy = u.copy;
    t->store = u.store;
    t->produce = u.produce;
    t->last = u.last;
    t->dup = u.dup;
    t->uses = u.uses;
    t->distance = u.distance;
    nst_echo_store_use(r->estore, u.store, u.produce, u.last);
    return 1;
}

/* What a ticket adds to its batch's echo counters (dropped again by done
 * if the item turns out bad: counters speak of good items). */
static void ticket_io(ring *r, nst_ticket *t)
{
    memset(t->io, 0, sizeof t->io);
    if (t->echo) {
        if (t->last) add_uses(t->io, t->uses, 1);
        if (t->copy) {
            t->io[NST_IO_echoed] = 1;
            t->io[NST_IO_distance] = t->distance;
        } else {
            t->io[NST_IO_fresh] = 1;
        }
        t->io[NST_IO_dups] = t->dup;
        return;
    }
    t->io[NST_IO_fresh] = 1;
    if (r->p.echo != NST_ECHO_BATCHES) add_uses(t->io, 1, 1); /* else at lend */
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
        if (!r->resetting) {
            rc = nst_engine_take(r->q, &r->p.plan, 0, &t->bt, 0);
            if (rc == 0) {
                t->echo = 0;
                t->apool = UINT32_MAX;
                if (r->p.echo != NST_ECHO_ITEMS || t->bt.reserve || echo_draw(r, t)) {
                    nst_engine_take(r->q, &r->p.plan, 0, &t->bt, 1);
                    nst_ticket_place(t, r->q, r->p.recipe->nfields);
                    ticket_io(r, t);
                    if (r->adaptive) t->apool = nst_adaptive_reserve(r->adaptive);
                    t->gen = r->gen;
                    r->inflight++;
                    break;
                }
            }
        }
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
    if (t->echo) nst_echo_store_finish(r->estore, t->store);
    if (status < 0) /* not delivered: neither fresh nor echoed nor used */
        for (int k = NST_IO_fresh; k <= NST_IO_distance; k++) t->io[k] = 0;
    if (nst_engine_done(r->q, &t->bt, 0, status, msg, t->io)) pthread_cond_broadcast(&r->ready);
    pthread_cond_broadcast(&r->work); /* an echo store entry may be free */
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

/* Batch echoing: the next delivery from the shuffle buffer, refilled with
 * fresh batches first (mu held). 0 with *out; NST_ENGINE_WAIT; EPOCH_END/DONE;
 * E_*. */
static int unrestored(const nst_batch_echo *eb)
{
    for (uint32_t i = 0; i < eb->n; i++)
        if (eb->pool[i].slot == UINT32_MAX) return 1;
    return 0;
}

static int batch_echo_next(ring *r, nostall_batch *out)
{
    nst_batch_echo *eb = &r->eb;
    while (nst_batch_echo_want(eb) || unrestored(eb)) {
        nst_engine_lent l;
        int rc =
            r->bpending_end ? r->bpending_end : nst_engine_lend(r->q, &r->p.plan, 0, &l, seen, r);
        if (rc == NST_ENGINE_WAIT || rc < 0) return rc;
        if (rc == NOSTALL_EPOCH_END || rc == NOSTALL_DONE) {
            r->bpending_end = rc;
            eb->fresh_done = 1;
            break;
        }
        uint64_t fresh = l.position / r->p.batch_size;
        if (fresh < eb->fresh_in) { /* restoring after a reset: not in the buffer */
            int keep = 0;
            for (uint32_t i = 0; i < eb->n; i++)
                if (eb->pool[i].fresh == fresh) {
                    eb->pool[i].slot = l.slot;
                    eb->pool[i].seq = l.seq;
                    r->bpool[l.slot] = 1;
                    keep = 1;
                }
            if (!keep) nst_engine_release(r->q, 0, l.seq);
            continue;
        }
        nst_batch_echo_add(eb, l.position, l.count, l.slot, l.seq);
        r->bpool[l.slot] = 1;
    }
    nst_batch_echo_entry e;
    if (!nst_batch_echo_draw(eb, &e)) {
        int end = r->bpending_end ? r->bpending_end : NOSTALL_EPOCH_END;
        r->bpending_end = 0;
        nst_batch_echo_start(eb, end == NOSTALL_EPOCH_END ? eb->epoch + 1 : eb->epoch);
        return end;
    }
    if (e.left == 0) r->bpool[e.slot] = 0;
    r->blends[e.slot]++;
    describe(r, out, e.slot, e.count, eb->epoch, e.position, e.seq);
    if (e.left + 1 < e.uses) { /* a repeat */
        uint64_t io[NST_ENGINE_IO] = {0};
        io[NST_IO_echoed] = e.count;
        io[NST_IO_distance] = (uint64_t)e.count * e.gap;
        if (r->p.sink.count) r->p.sink.count(r->p.sink.ctx, io);
    }
    return 0;
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
        if (r->p.echo != NST_ECHO_BATCHES && nst_engine_lent_count(r->q, 0) == r->p.nslots) {
            rc = nst_error(NOSTALL_E_STATE, "%s: all %u batches of the ring are lent; release one",
                           fn, r->p.nslots);
            break;
        }
        nst_engine_lent l;
        if (r->p.echo == NST_ECHO_BATCHES) {
            rc = batch_echo_next(r, out);
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
        if (r->adaptive) {
            uint64_t e, pos;
            e = r->q->members[0].epoch;
            pos = r->q->members[0].position;
            if (nst_adaptive_lend(r->adaptive, out, e, pos)) {
                uint64_t io[NST_ENGINE_IO] = {0};
                io[NST_IO_echoed] = out->count;
                if (r->p.sink.count) r->p.sink.count(r->p.sink.ctx, io);
                rc = 0;
                break;
            }
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
    int rc = nst_adaptive_release(r->adaptive, batch);
    if (rc) return rc < 0 ? rc : 0;
    pthread_mutex_lock(&r->mu);
    if (r->p.echo == NST_ECHO_BATCHES) {
        uint32_t s = NST_ENGINE_NONE;
        for (uint32_t i = 0; i < r->q->nslots; i++)
            if (r->q->slots[i].seq == batch->sequence && r->blends[i] &&
                r->q->slots[i].state == NST_ENGINE_READY)
                s = i;
        if (s == NST_ENGINE_NONE) {
            rc = nst_error(NOSTALL_E_INVALID, "nostall_loader_release: batch %llu is not lent",
                           (unsigned long long)batch->sequence);
        } else if (--r->blends[s] == 0 && !r->bpool[s]) {
            rc = nst_engine_release(r->q, 0, batch->sequence);
        }
    } else {
        rc = nst_engine_release(r->q, 0, batch->sequence);
    }
    if (rc < 0) {
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

/* Batch echoing: the fresh plan's batch at `position` of the reset epoch. */
typedef struct replay_ctx {
    ring *r;
    uint64_t epoch;
} replay_ctx;

static uint32_t replay_plan(void *ctx, uint64_t position)
{
    replay_ctx *c = ctx;
    return c->r->p.plan.batch_len(c->r->p.plan.ctx, c->epoch, position);
}

static int r_reset(nst_batches *b, const nst_engine_cursor *cur, void (*quiet)(void *ctx),
                   void *ctx, const char *fn)
{
    ring *r = R(b);
    const uint64_t epoch = cur->epoch, position = cur->position;
    nst_engine_cursor at = *cur;
    int rc = 0;
    pthread_mutex_lock(&r->mu);
    if (r->stopped) {
        rc = nst_error(NOSTALL_E_STOPPED, "%s: loader stopped", fn);
        goto out;
    }
    r->resetting = 1;
    r->gen++;
    if (r->estore) nst_echo_store_reset(r->estore); /* later uses waiting on a producer */
    while (r->inflight && !r->stopped) pthread_cond_wait(&r->idle, &r->mu);
    if (r->stopped) {
        r->resetting = 0;
        rc = nst_error(NOSTALL_E_STOPPED, "%s: loader stopped", fn);
        goto out;
    }
    if (quiet) quiet(ctx);
    uint64_t start = position;
    if (r->p.echo == NST_ECHO_BATCHES) {
        /* Replay the shuffle buffer to `position` delivered items; the
         * engine restarts at the oldest batch still in the buffer. */
        for (uint32_t s = 0; s < r->q->nslots; s++)
            if (!r->blends[s]) r->bpool[s] = 0;
        replay_ctx c = {r, epoch};
        nst_batch_echo_replay(&r->eb, epoch, position, replay_plan, &c);
        start = r->eb.n ? UINT64_MAX : 0;
        uint64_t next_fresh = 0;
        for (uint64_t pos = 0, k = 0; k < r->eb.fresh_in; k++)
            pos += replay_plan(&c, pos), next_fresh = pos;
        for (uint32_t i = 0; i < r->eb.n; i++)
            if (r->eb.pool[i].position < start) start = r->eb.pool[i].position;
        if (!r->eb.n) start = next_fresh;
        r->bpending_end = 0;
        at.taken = at.owed = at.taken_first = at.taken_end = 0;
    }
    at.position = start;
    nst_engine_reset(r->q, &at);
    if (r->p.echo == NST_ECHO_ITEMS) {
        nst_echo_store_reset(r->estore);
        nst_echo_sched_reset_ids(r->p.sched);
        nst_echo_sched_start(r->p.sched, epoch, position);
    }
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
    if (r->p.echo == NST_ECHO_BATCHES) {
        memset(c, 0, sizeof *c);
        c->epoch = r->eb.epoch;
        c->position = r->eb.delivered;
    }
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
    if (r->estore) nst_echo_store_stop(r->estore);
    nst_adaptive_stop(r->adaptive);
}

static void r_free(nst_batches *b)
{
    ring *r = R(b);
    if (!r) return;
    nst_adaptive_free(r->adaptive);
    nst_echo_store_free(r->estore);
    nst_batch_echo_destroy(&r->eb);
    free(r->blends);
    free(r->bpool);
    free(r->fields);
    free(r->mem);
    pthread_cond_destroy(&r->work);
    pthread_cond_destroy(&r->ready);
    pthread_cond_destroy(&r->idle);
    pthread_mutex_destroy(&r->mu);
    free(r);
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
};

/* The adaptive assembler finished an echo batch: tell the consumer. */
static void wake_consumer(void *ctx)
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
    if (!r) return nst_error(NOSTALL_E_NOMEM, "ring: out of memory");
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
    if (posix_memalign(&r->mem, 4096, r->mem_bytes) != 0) {
        r->mem = NULL;
        rc = nst_error(NOSTALL_E_NOMEM, "ring: cannot allocate %zu bytes for %u batches",
                       r->mem_bytes, p->nslots);
        goto fail;
    }
    /* Touch it all now: the first epoch pays no page faults and the memory
     * is really there (fail early, not mid-training). */
    memset(r->mem, 0, r->mem_bytes);
    r->q = nst_engine_init(r->mem, p->nslots, p->slot_items, rec->fields, rec->nfields, p->flags);
    nst_engine_member_join(r->q, 0, 0, 0);
    r->fields = calloc((size_t)p->nslots * rec->nfields, sizeof *r->fields);
    r->blends = calloc(p->nslots, sizeof *r->blends);
    r->bpool = calloc(p->nslots, 1);
    if (!r->fields || !r->blends || !r->bpool) {
        rc = nst_error(NOSTALL_E_NOMEM, "ring: out of memory");
        goto fail;
    }
    if (p->echo == NST_ECHO_ITEMS &&
        (rc = nst_echo_store_create(&r->estore, p->echo_store, p->sched)) < 0)
        goto fail;
    if (p->echo == NST_ECHO_BATCHES &&
        (rc = nst_batch_echo_init(&r->eb, p->echo_factor, p->seed, p->echo_buffer)) < 0)
        goto fail;
    if (p->echo == NST_ECHO_ADAPTIVE) {
        nst_adaptive_params ap = {.pool = p->echo_buffer,
                                  .batch_size = p->batch_size,
                                  .echo_max = p->echo_max,
                                  .seed = p->seed,
                                  .recipe = rec,
                                  .wake = wake_consumer,
                                  .wake_ctx = r};
        if ((rc = nst_adaptive_create(&r->adaptive, &ap)) < 0) goto fail;
    }
    *out = &r->base;
    return 0;
fail:
    r_free(&r->base);
    return rc;
}

struct nst_echo_store *nst_ring_estore(nst_batches *b) { return R(b)->estore; }
struct nst_adaptive *nst_ring_adaptive(nst_batches *b) { return R(b)->adaptive; }

void nst_ring_memory(nst_batches *b, void **mem, size_t *bytes, uint32_t *nslots,
                     uint32_t *slot_items)
{
    ring *r = R(b);
    *mem = r->mem;
    *bytes = r->mem_bytes;
    *nslots = r->p.nslots;
    *slot_items = r->p.slot_items;
}
