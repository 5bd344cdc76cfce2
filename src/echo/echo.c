/*
 * echo.c — data echoing's one front (see echo.h): the ring's hooks for the
 * three modes and the worker's item maker. Fixed item echoing: the take
 * hook draws the schedule (declining while no store entry is free), the
 * ticket's record says which item and which use, and nst_echo_item makes
 * it from or into the store entry. Batch echoing: the lend hook passes the
 * engine's batches through the shuffle buffer, holding their slots until
 * their uses are spent. Adaptive echoing: the taken hook reserves a pool
 * entry, nst_echo_item fills it, and the spare hook lends an assembled
 * echo batch when no fresh one is ready. gpu_output=device: the image
 * field lies in device memory; echo_point=augment keeps it in a device
 * store and copies it through the loader's device functions
 * (nst_echo_set_device); fetch, decode and batch need nothing of the
 * device here.
 * May touch: the echo/ parts, the engine through the ring's lender, the
 * recipe's stages; nothing of the ring's but what ring.h hands the hooks.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>

#include "common/error.h"
#include "echo/adaptive.h"
#include "echo/batch_echo.h"
#include "echo/echo.h"
#include "echo/schedule.h"
#include "echo/store.h"

struct nst_echo {
    nst_echo_params p;
    nst_echo_sched sched;   /* NST_ECHO_ITEMS                                */
    nst_echo_store *store;  /* ...                                           */
    nst_batch_echo eb;      /* NST_ECHO_BATCHES                              */
    uint32_t nslots;        /* ... the ring's slots                          */
    uint32_t *blends;       /* ... user lends outstanding per slot           */
    uint8_t *bpool;         /* ... the slot is in the shuffle buffer          */
    int bpending_end;       /* ... the engine said EPOCH_END / DONE           */
    nst_adaptive *adaptive; /* NST_ECHO_ADAPTIVE                             */
    pthread_mutex_t len_mu; /* the epoch lengths' memo (O(shard) to compute)  */
    uint64_t len_epoch[4], len_val[4];
    uint32_t len_next;
    nst_echo_device dev; /* gpu_output=device: dev.copy set            */
    uint8_t *dev_store;  /* ... echo_point=augment: each entry's image */
    size_t dev_bytes;    /* ... an image's bytes                       */
};

/* The record a ticket carries (nst_ticket.layer). */
typedef struct rec {
    uint8_t echo, produce, last, dup; /* echo: a draw of the item schedule */
    uint32_t copy, store, uses;
    uint64_t distance;
    uint32_t apool; /* adaptive: pool entry, or UINT32_MAX */
} rec;
_Static_assert(sizeof(rec) <= sizeof(((nst_ticket *)0)->layer), "the ticket's record is too small");

static rec *REC(nst_ticket *t) { return (rec *)(void *)t->layer; }
static const rec *CREC(const nst_ticket *t) { return (const rec *)(const void *)t->layer; }

static void add_uses(uint64_t *io, uint32_t uses, uint64_t n)
{
    io[uses <= 4 ? NST_IO_uses_1 + uses - 1 : uses <= 8 ? NST_IO_uses_5_8 : NST_IO_uses_9_up] += n;
}

/* ------------------------------------------------------------------------
 * Hooks at take and done (the ring's mutex held).
 * ------------------------------------------------------------------------ */

/* Items: the schedule's next draw for the ticket: 1, or 0 when no store
 * entry is free (nothing changed: wait for a ticket to finish). */
static int h_take(void *ctx, nst_ticket *t)
{
    nst_echo *e = ctx;
    rec *x = REC(t);
    x->echo = 0;
    x->apool = UINT32_MAX;
    if (t->bt.reserve) return 1;
    nst_echo_sched *es = &e->sched;
    if (t->bt.epoch != es->epoch) { /* the first ticket of a new epoch */
        nst_echo_store_close_all(e->store);
        nst_echo_sched_start(es, t->bt.epoch, 0);
    }
    nst_echo_use u;
    if (nst_echo_sched_next(es, t->bt.seq, &u) != 1) return 0;
    x->echo = 1;
    t->index = u.index;
    t->indexed = 1;
    t->nofetch = !u.produce;
    x->copy = u.copy;
    x->store = u.store;
    x->produce = u.produce;
    x->last = u.last;
    x->dup = u.dup;
    x->uses = u.uses;
    x->distance = u.distance;
    nst_echo_store_use(e->store, u.store, u.produce, u.last);
    return 1;
}

/* What a ticket adds to its batch's echo counters (dropped again by done
 * if the item turns out bad: counters speak of good items). */
static void h_taken(void *ctx, nst_ticket *t)
{
    nst_echo *e = ctx;
    rec *x = REC(t);
    if (e->p.mode != NST_ECHO_ITEMS) x->echo = 0;
    x->apool = e->adaptive ? nst_adaptive_reserve(e->adaptive) : UINT32_MAX;
    if (x->echo) {
        if (x->last) add_uses(t->io, x->uses, 1);
        if (x->copy) {
            t->io[NST_IO_echoed] = 1;
            t->io[NST_IO_distance] = x->distance;
        } else {
            t->io[NST_IO_fresh] = 1;
        }
        t->io[NST_IO_dups] = x->dup;
        return;
    }
    t->io[NST_IO_fresh] = 1;
    if (e->p.mode != NST_ECHO_BATCHES) add_uses(t->io, 1, 1); /* else at lend */
}

static void h_done(void *ctx, nst_ticket *t)
{
    nst_echo *e = ctx;
    if (CREC(t)->echo) nst_echo_store_finish(e->store, CREC(t)->store);
}

/* Batches: a batch the consumer reached counts its uses. */
static void h_seen(void *ctx, const nst_engine_slot *s, uint64_t *io)
{
    nst_echo *e = ctx;
    add_uses(io, nst_batch_echo_uses(&e->eb, s->epoch, s->position), s->delivered);
}

/* ------------------------------------------------------------------------
 * Batch echoing's lends (the ring's mutex held).
 * ------------------------------------------------------------------------ */

static int unrestored(const nst_batch_echo *eb)
{
    for (uint32_t i = 0; i < eb->n; i++)
        if (eb->pool[i].slot == UINT32_MAX) return 1;
    return 0;
}

/* The per-slot tables, sized to the ring (allocated once, at create). */
static int slots_init(nst_echo *e)
{
    e->nslots = e->p.nslots;
    e->blends = calloc(e->nslots, sizeof *e->blends);
    e->bpool = calloc(e->nslots, 1);
    return e->blends && e->bpool ? 0 : nst_error(NOSTALL_E_NOMEM, "batch echo: out of memory");
}

/* The next delivery from the shuffle buffer, refilled with fresh batches
 * first. 0 with *out; NST_ENGINE_WAIT; EPOCH_END/DONE; E_*. */
static int h_lend(void *ctx, nst_ring_lender *L, nostall_batch *out)
{
    nst_echo *e = ctx;
    nst_batch_echo *eb = &e->eb;
    while (nst_batch_echo_want(eb) || unrestored(eb)) {
        nst_engine_lent l;
        int rc = e->bpending_end ? e->bpending_end : L->lend(L, &l);
        if (rc == NST_ENGINE_WAIT || rc < 0) return rc;
        if (rc == NOSTALL_EPOCH_END || rc == NOSTALL_DONE) {
            e->bpending_end = rc;
            eb->fresh_done = 1;
            break;
        }
        uint64_t fresh = l.position / e->p.batch_size;
        if (fresh < eb->fresh_in) { /* restoring after a reset: not in the buffer */
            int keep = 0;
            for (uint32_t i = 0; i < eb->n; i++)
                if (eb->pool[i].fresh == fresh) {
                    eb->pool[i].slot = l.slot;
                    eb->pool[i].seq = l.seq;
                    e->bpool[l.slot] = 1;
                    keep = 1;
                }
            if (!keep) nst_engine_release(L->q, 0, l.seq);
            continue;
        }
        nst_batch_echo_add(eb, l.position, l.count, l.slot, l.seq);
        e->bpool[l.slot] = 1;
    }
    nst_batch_echo_entry x;
    if (!nst_batch_echo_draw(eb, &x)) {
        int end = e->bpending_end ? e->bpending_end : NOSTALL_EPOCH_END;
        e->bpending_end = 0;
        nst_batch_echo_start(eb, end == NOSTALL_EPOCH_END ? eb->epoch + 1 : eb->epoch);
        return end;
    }
    if (x.left == 0) e->bpool[x.slot] = 0;
    e->blends[x.slot]++;
    L->describe(L, out, x.slot, x.count, eb->epoch, x.position, x.seq);
    if (x.left + 1 < x.uses) { /* a repeat */
        uint64_t io[NST_ENGINE_IO] = {0};
        io[NST_IO_echoed] = x.count;
        io[NST_IO_distance] = (uint64_t)x.count * x.gap;
        L->count(L, io);
    }
    return 0;
}

/* Batches: a slot goes back to the engine when no lend of it is out and it
 * left the buffer. Adaptive: an echo batch goes back to the pool. */
static int h_release(void *ctx, nst_ring_lender *L, const nostall_batch *b, int *taken)
{
    nst_echo *e = ctx;
    int rc = nst_adaptive_release(e->adaptive, b);
    if (rc) {
        *taken = 1;
        return rc;
    }
    if (e->p.mode != NST_ECHO_BATCHES) return nst_engine_release(L->q, 0, b->sequence);
    uint32_t s = NST_ENGINE_NONE;
    for (uint32_t i = 0; i < L->q->nslots; i++)
        if (L->q->slots[i].seq == b->sequence && e->blends[i] &&
            L->q->slots[i].state == NST_ENGINE_READY)
            s = i;
    if (s == NST_ENGINE_NONE)
        return nst_error(NOSTALL_E_INVALID, "batch %llu is not lent",
                         (unsigned long long)b->sequence);
    if (--e->blends[s] == 0 && !e->bpool[s]) return nst_engine_release(L->q, 0, b->sequence);
    return 0;
}

/* Adaptive: an assembled echo batch when no fresh one is ready. */
static int h_spare(void *ctx, nst_ring_lender *L, nostall_batch *out, uint64_t epoch,
                   uint64_t position)
{
    nst_echo *e = ctx;
    if (!nst_adaptive_lend(e->adaptive, out, epoch, position)) return 0;
    uint64_t io[NST_ENGINE_IO] = {0};
    io[NST_IO_echoed] = out->count;
    L->count(L, io);
    return 1;
}

/* ------------------------------------------------------------------------
 * Reset, cursor, stop.
 * ------------------------------------------------------------------------ */

static void h_resetting(void *ctx)
{
    nst_echo *e = ctx;
    if (e->store) nst_echo_store_reset(e->store); /* later uses waiting on a producer */
}

/* Batches: the fresh plan's batch at `position` of the reset epoch. */
typedef struct replay_ctx {
    nst_ring_lender *L;
    uint64_t epoch;
} replay_ctx;

static uint32_t replay_plan(void *ctx, uint64_t position)
{
    replay_ctx *c = ctx;
    return c->L->plan->batch_len(c->L->plan->ctx, c->epoch, position);
}

static void h_reset(void *ctx, nst_ring_lender *L, const nst_engine_cursor *cur,
                    nst_engine_cursor *at)
{
    nst_echo *e = ctx;
    const uint64_t epoch = cur->epoch, position = cur->position;
    if (e->p.mode == NST_ECHO_ITEMS) {
        nst_echo_store_reset(e->store);
        nst_echo_sched_reset_ids(&e->sched);
        nst_echo_sched_start(&e->sched, epoch, position);
        return;
    }
    if (e->p.mode != NST_ECHO_BATCHES) return;
    /* Replay the shuffle buffer to `position` delivered items; the engine
     * restarts at the oldest batch still in the buffer. */
    for (uint32_t s = 0; s < L->q->nslots; s++)
        if (!e->blends[s]) e->bpool[s] = 0;
    replay_ctx c = {L, epoch};
    nst_batch_echo_replay(&e->eb, epoch, position, replay_plan, &c);
    uint64_t start = e->eb.n ? UINT64_MAX : 0, next_fresh = 0;
    for (uint64_t pos = 0, k = 0; k < e->eb.fresh_in; k++)
        pos += replay_plan(&c, pos), next_fresh = pos;
    for (uint32_t i = 0; i < e->eb.n; i++)
        if (e->eb.pool[i].position < start) start = e->eb.pool[i].position;
    if (!e->eb.n) start = next_fresh;
    e->bpending_end = 0;
    at->taken = at->owed = at->taken_first = at->taken_end = 0;
    at->position = start;
}

static void h_cursor(void *ctx, nst_engine_cursor *c)
{
    nst_echo *e = ctx;
    memset(c, 0, sizeof *c);
    c->epoch = e->eb.epoch;
    c->position = e->eb.delivered;
}

static void h_stop(void *ctx)
{
    nst_echo *e = ctx;
    if (e->store) nst_echo_store_stop(e->store);
    nst_adaptive_stop(e->adaptive);
}

static void h_free(void *ctx) { nst_echo_free(ctx); }

nst_ring_hooks nst_echo_hooks(nst_echo *e)
{
    nst_ring_hooks h = {.ctx = e,
                        .taken = h_taken,
                        .release = h_release,
                        .stop = h_stop,
                        .free = h_free};
    switch (e->p.mode) {
    case NST_ECHO_ITEMS:
        h.take = h_take;
        h.done = h_done;
        h.resetting = h_resetting;
        h.reset = h_reset;
        break;
    case NST_ECHO_BATCHES:
        h.seen = h_seen;
        h.lend = h_lend;
        h.keeps_slots = 1;
        h.reset = h_reset;
        h.cursor = h_cursor;
        break;
    default: h.spare = h_spare;
    }
    return h;
}

/* ------------------------------------------------------------------------
 * The options, the plan, create / free.
 * ------------------------------------------------------------------------ */

int nst_echo_mode(const nostall_config *c, int *point)
{
    const nst_optval *v = c->v;
    *point = 0;
    if (v[NOSTALL_OPT_ECHO].u == NOSTALL_ECHO_ADAPTIVE) return NST_ECHO_ADAPTIVE;
    if (!(v[NOSTALL_OPT_ECHO_FACTOR].d > 1.0)) return NST_ECHO_OFF;
    *point = (int)v[NOSTALL_OPT_ECHO_POINT].u;
    return *point == NOSTALL_ECHO_POINT_BATCH ? NST_ECHO_BATCHES : NST_ECHO_ITEMS;
}

int nst_echo_validate(const nostall_config *c, const char *fn)
{
    const nst_optval *v = c->v;
    if (v[NOSTALL_OPT_COORDINATE].s[0] &&
        (v[NOSTALL_OPT_ECHO].u == NOSTALL_ECHO_ADAPTIVE || v[NOSTALL_OPT_ECHO_FACTOR].d > 1.0))
        return nst_error(NOSTALL_E_OPTION,
                         "%s: coordinate='%s' cannot be combined with data echoing (echo_factor "
                         "%g, echo %s)",
                         fn, v[NOSTALL_OPT_COORDINATE].s, v[NOSTALL_OPT_ECHO_FACTOR].d,
                         v[NOSTALL_OPT_ECHO].u == NOSTALL_ECHO_ADAPTIVE ? "adaptive" : "fixed");
    if (v[NOSTALL_OPT_ECHO].u == NOSTALL_ECHO_ADAPTIVE &&
        v[NOSTALL_OPT_ECHO_BUFFER].u < v[NOSTALL_OPT_BATCH_SIZE].u)
        return nst_error(NOSTALL_E_OPTION,
                         "%s: echo=adaptive needs echo_buffer (%llu) >= batch_size (%llu): echo "
                         "batches are drawn from that pool",
                         fn, (unsigned long long)v[NOSTALL_OPT_ECHO_BUFFER].u,
                         (unsigned long long)v[NOSTALL_OPT_BATCH_SIZE].u);
    return 0;
}

/* Batch echoing's shuffle buffer: echo_buffer items, >= 2 batches, at most
 * an epoch's `batches`. */
static uint32_t buffer_batches(const nostall_config *c, uint32_t batch_size, uint64_t batches)
{
    uint64_t n = (c->v[NOSTALL_OPT_ECHO_BUFFER].u + batch_size - 1) / batch_size;
    if (n < 2) n = 2;
    if (n > batches) n = batches > 0 ? batches : 1;
    return (uint32_t)n;
}

nst_echo_plan nst_echo_plan_for(const nostall_config *c, uint64_t per, size_t item_bytes)
{
    const nst_optval *v = c->v;
    const uint32_t batch_size = (uint32_t)v[NOSTALL_OPT_BATCH_SIZE].u;
    int point, mode = nst_echo_mode(c, &point);
    nst_echo_plan out = {.most = per, .slots_what = "", .bytes_what = ""};
    if (mode == NST_ECHO_ITEMS) out.most = per * (uint64_t)ceil(v[NOSTALL_OPT_ECHO_FACTOR].d);
    if (mode == NST_ECHO_BATCHES) {
        out.slots = buffer_batches(c, batch_size, (per + batch_size - 1) / batch_size);
        out.slots_what = " + echo buffer";
    }
    if (mode == NST_ECHO_ADAPTIVE) {
        out.bytes = (uint64_t)item_bytes *
                    (v[NOSTALL_OPT_ECHO_BUFFER].u + NST_ADAPTIVE_SLOTS * (uint64_t)batch_size);
        out.bytes_what = " plus the adaptive echo pool's ";
    }
    return out;
}

uint32_t nst_echo_batch_uses(const nostall_config *c, uint64_t epoch, uint64_t position)
{
    int point;
    if (nst_echo_mode(c, &point) != NST_ECHO_BATCHES) return 1;
    nst_batch_echo eb = {.factor = c->v[NOSTALL_OPT_ECHO_FACTOR].d,
                         .seed = c->v[NOSTALL_OPT_SEED].u};
    return nst_batch_echo_uses(&eb, epoch, position);
}

/* Item echoing's store entries live from an item's first draw to its last
 * use's finish: at most the pool plus every ticket of the ring's open
 * batches. */
int nst_echo_ring_create(nst_batches **ring, nst_echo **e, nst_ring_params *rp,
                         const nostall_config *c, const nst_sampler *sampler, const char *fn)
{
    const nst_optval *v = c->v;
    int point, mode = nst_echo_mode(c, &point), rc;
    *ring = NULL;
    *e = NULL;
    if (mode == NST_ECHO_OFF) return nst_ring_create(ring, rp);
    uint64_t cap = v[NOSTALL_OPT_ECHO_BUFFER].u + (uint64_t)rp->nslots * rp->slot_items;
    if (mode == NST_ECHO_ITEMS && cap > UINT32_MAX - 1)
        return nst_error(NOSTALL_E_OPTION, "%s: echo_buffer too large", fn);
    nst_echo_plan xp = nst_echo_plan_for(c, sampler->per_rank, 0); /* the shuffle buffer */
    nst_echo_params ep = {.mode = mode,
                          .point = point,
                          .recipe = rp->recipe,
                          .sampler = sampler,
                          .factor = v[NOSTALL_OPT_ECHO_FACTOR].d,
                          .seed = v[NOSTALL_OPT_SEED].u,
                          .buffer = mode == NST_ECHO_BATCHES
                                        ? xp.slots
                                        : (uint32_t)v[NOSTALL_OPT_ECHO_BUFFER].u,
                          .store = (uint32_t)cap,
                          .echo_max = (uint32_t)v[NOSTALL_OPT_ECHO_MAX].u,
                          .batch_size = rp->batch_size,
                          .nslots = rp->nslots};
    if ((rc = nst_echo_create(e, &ep)) < 0) return rc;
    rp->hooks = nst_echo_hooks(*e);
    if ((rc = nst_ring_create(ring, rp)) < 0) { /* it freed *e (ring.h) */
        *e = NULL;
        return rc;
    }
    return nst_echo_attach(*e, *ring); /* on failure the ring frees *e with itself */
}

int nst_echo_create(nst_echo **out, const nst_echo_params *p)
{
    nst_echo *e = calloc(1, sizeof *e);
    int rc = 0;
    *out = NULL;
    if (!e) return nst_error(NOSTALL_E_NOMEM, "echo: out of memory");
    pthread_mutex_init(&e->len_mu, NULL);
    e->p = *p;
    if (p->mode == NST_ECHO_ITEMS &&
        ((rc = nst_echo_sched_init(&e->sched, p->sampler, p->factor, p->seed, p->buffer, p->store)) <
             0 ||
         (rc = nst_echo_store_create(&e->store, p->store, &e->sched)) < 0))
        goto fail;
    if (p->mode == NST_ECHO_BATCHES &&
        ((rc = slots_init(e)) < 0 ||
         (rc = nst_batch_echo_init(&e->eb, p->factor, p->seed, p->buffer)) < 0))
        goto fail;
    *out = e;
    return 0;
fail:
    nst_echo_free(e);
    return rc;
}

int nst_echo_attach(nst_echo *e, nst_batches *ring)
{
    if (e->p.mode != NST_ECHO_ADAPTIVE) return 0;
    nst_adaptive_params ap = {.pool = e->p.buffer,
                              .batch_size = e->p.batch_size,
                              .echo_max = e->p.echo_max,
                              .seed = e->p.seed,
                              .recipe = e->p.recipe,
                              .wake = nst_ring_wake,
                              .wake_ctx = ring};
    return nst_adaptive_create(&e->adaptive, &ap);
}

int nst_echo_set_device(nst_echo *e, const nst_echo_device *dev)
{
    if (!e) return 0;
    e->dev = *dev;
    if (e->p.mode != NST_ECHO_ITEMS || e->p.point != NOSTALL_ECHO_POINT_AUGMENT) return 0;
    e->dev_bytes = e->p.recipe->fields[dev->field].item_bytes;
    size_t bytes;
    if (nst_mul_overflow(e->dev_bytes, (size_t)e->p.store, &bytes))
        return nst_error(NOSTALL_E_OPTION,
                         "echo_point=augment: %u store entries of %zu bytes overflow the device "
                         "store",
                         e->p.store, e->dev_bytes);
    return dev->alloc(dev->ctx, bytes ? bytes : 1, &e->dev_store);
}

void nst_echo_free(nst_echo *e)
{
    if (!e) return;
    nst_adaptive_free(e->adaptive);
    nst_echo_store_free(e->store);
    nst_batch_echo_destroy(&e->eb);
    nst_echo_sched_destroy(&e->sched);
    free(e->blends);
    free(e->bpool);
    pthread_mutex_destroy(&e->len_mu);
    free(e);
}

void nst_echo_set_max(nst_echo *e, uint32_t echo_max)
{
    if (e && e->adaptive) nst_adaptive_set_max(e->adaptive, echo_max);
}

uint64_t nst_echo_epoch_len(nst_echo *e, uint64_t epoch)
{
    pthread_mutex_lock(&e->len_mu);
    uint64_t n = 0;
    for (int i = 0; i < 4 && !n; i++)
        if (e->len_val[i] && e->len_epoch[i] == epoch) n = e->len_val[i];
    if (!n) { /* O(shard) for a fractional factor: memoized */
        n = nst_echo_sched_epoch_len(&e->sched, epoch);
        e->len_epoch[e->len_next] = epoch;
        e->len_val[e->len_next] = n;
        e->len_next = (e->len_next + 1) % 4;
    }
    pthread_mutex_unlock(&e->len_mu);
    return n;
}

void nst_echo_forget_lengths(nst_echo *e)
{
    if (!e) return;
    pthread_mutex_lock(&e->len_mu);
    memset(e->len_val, 0, sizeof e->len_val);
    pthread_mutex_unlock(&e->len_mu);
}

/* ------------------------------------------------------------------------
 * The worker's item.
 * ------------------------------------------------------------------------ */

static void last_error_into(char *msg, size_t n, int rc)
{
    const char *detail = nostall_last_error();
    snprintf(msg, n, "%s", detail && *detail ? detail : nostall_strerror(rc));
}

/* The item's fields, copied out of (or into) echo store entry `id`; with
 * gpu_output=device the image field device to device, to or from the
 * entry's place in the device store (0, or the copy's E_*). */
static int copy_fields(nst_echo *e, uint32_t id, uint8_t *const *dst, uint8_t *flat, int to_flat)
{
    const nst_recipe *r = e->p.recipe;
    size_t off = 0;
    for (uint32_t f = 0; f < r->nfields; f++) {
        size_t n = r->fields[f].item_bytes;
        if (e->dev_store && f == e->dev.field) {
            uint8_t *d = e->dev_store + (size_t)id * e->dev_bytes;
            int rc = to_flat ? e->dev.copy(e->dev.ctx, d, dst[f], n)
                             : e->dev.copy(e->dev.ctx, dst[f], d, n);
            if (rc == 0) rc = e->dev.copied(e->dev.ctx);
            if (rc < 0) return rc;
        } else if (to_flat) {
            memcpy(flat + off, dst[f], n);
        } else {
            memcpy(dst[f], flat + off, n);
        }
        off += n;
    }
    return 0;
}

/* The producing use of an item: makes the entry's data (point fetch: the
 * bytes; decode: the decoded intermediate; augment: the finished item) and
 * then its own item. */
static int produce(nst_echo *e, nst_recipe_worker *rw, const rec *x, const nst_item_ctx *c,
                   const nst_fetch_req *r, nst_recipe_times *tm, char *msg, size_t msgn)
{
    const nst_recipe *recipe = e->p.recipe;
    const nst_recipe_ops *ops = recipe->ops;
    nst_decoded *d = nst_echo_store_data(e->store, x->store);
    int rc;
    if (r->status < 0) {
        snprintf(msg, msgn, "%s", r->msg);
        nst_echo_store_publish(e->store, x->store, r->status, msg);
        return r->status;
    }
    switch (e->p.point) {
    case NOSTALL_ECHO_POINT_FETCH:
        rc = nst_buf_reserve(&d->buf, r->len);
        if (rc == 0) {
            memcpy(d->buf.data, r->data, r->len);
            d->len = r->len;
        } else {
            last_error_into(msg, msgn, rc);
        }
        nst_echo_store_publish(e->store, x->store, rc, msg);
        if (rc == 0) rc = ops->make(rw, c, r->data, r->len, tm);
        break;
    case NOSTALL_ECHO_POINT_DECODE:
        rc = ops->decode(rw, c, r->data, r->len, d, tm);
        if (rc < 0) last_error_into(msg, msgn, rc);
        nst_echo_store_publish(e->store, x->store, rc, msg);
        if (rc == 0) rc = ops->transform(rw, c, d, tm);
        break;
    default: { /* NOSTALL_ECHO_POINT_AUGMENT: the first use's item, as it is */
        nst_item_ctx c0 = *c;
        c0.copy = 0;
        rc = ops->make(rw, &c0, r->data, r->len, tm);
        if (rc == 0) rc = nst_buf_reserve(&d->buf, recipe->item_bytes);
        if (rc == 0) rc = copy_fields(e, x->store, c->dst, d->buf.data, 1);
        if (rc < 0) last_error_into(msg, msgn, rc);
        nst_echo_store_publish(e->store, x->store, rc, msg);
        return rc;
    }
    }
    if (rc < 0) last_error_into(msg, msgn, rc);
    return rc;
}

/* A later use: waits for the entry (always produced by an earlier ticket,
 * so the wait ends) and makes its item from it. */
static int reuse(nst_echo *e, nst_recipe_worker *rw, const rec *x, const nst_item_ctx *c,
                 nst_recipe_times *tm, char *msg, size_t msgn)
{
    const nst_recipe_ops *ops = e->p.recipe->ops;
    nst_decoded *d = nst_echo_store_data(e->store, x->store);
    int rc;
    if ((rc = nst_echo_store_wait(e->store, x->store, msg, msgn)) < 0) return rc;
    switch (e->p.point) {
    case NOSTALL_ECHO_POINT_FETCH: rc = ops->make(rw, c, d->buf.data, d->len, tm); break;
    case NOSTALL_ECHO_POINT_DECODE: rc = ops->transform(rw, c, d, tm); break;
    default: rc = copy_fields(e, x->store, c->dst, d->buf.data, 0);
    }
    if (rc < 0) last_error_into(msg, msgn, rc);
    return rc;
}

int nst_echo_item(nst_echo *e, nst_recipe_worker *rw, const nst_recipe *recipe, const nst_ticket *t,
                  nst_item_ctx *c, const nst_fetch_req *r, int stale, nst_recipe_times *tm,
                  char *msg, size_t msgn)
{
    const rec *x = e ? CREC(t) : NULL;
    int rc = 0;
    c->copy = x && x->echo ? x->copy : 0;
    if (stale) {
    } else if (x && x->echo) {
        rc = x->produce ? produce(e, rw, x, c, r, tm, msg, msgn) : reuse(e, rw, x, c, tm, msg, msgn);
    } else if (r->status < 0) {
        rc = r->status;
        snprintf(msg, msgn, "%s", r->msg);
    } else {
        rc = recipe->ops->make(rw, c, r->data, r->len, tm);
        if (rc < 0) last_error_into(msg, msgn, rc);
    }
    if (x && x->apool != UINT32_MAX)
        nst_adaptive_put(e->adaptive, x->apool, t->dst, t->index, rc == 0);
    return rc;
}
