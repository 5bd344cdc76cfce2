/*
 * worker.c — the one worker loop, for every batch backend.
 *
 * A worker keeps up to `depth` item tickets, taken in delivery order from
 * the backend (batches.h) and only from open batches (so the ring bounds
 * them and a worker holding tickets never waits for ring space), with
 * their fetches in flight (source/fetch.c); it completes the oldest, makes
 * the item through data echoing's one entry (echo/echo.h: with the recipe,
 * recipe/, or from or into an echo store entry) straight into its place in
 * the slot, hands it back to the backend, and tops the FIFO up again.
 * With a GPU route and echoing off (recipe make_many; docs/gpu.md,
 * "Batches across items"), it completes the oldest and, without waiting,
 * every following ticket whose fetch is already complete (up to its depth,
 * at most MANY_MAX), makes them in one make_many call (one batched decode
 * of their JPEGs; each item's bytes and status as make gives them alone)
 * and hands them back in order; arrays made at create.
 *
 * io_depth=0 (auto): a worker starts with NST_IO_DEPTH_AUTO_START tickets
 * and, after each window of NST_IO_DEPTH_AUTO_WINDOW completed items in
 * which its FIFO was full for at least half the items and it waited for
 * storage more than 1/20 of the time, doubles them, up to its cap. It never
 * shrinks: the cost of a deeper FIFO is buffers (one item each, only for
 * the depth reached), and slow storage rarely speeds up.
 *
 * autotune (loader_tune.c): a worker whose id is not below the loader's
 * `active` takes no more tickets, finishes those it holds, then parks
 * (nst_tune_park: a condition with a shutdown exit); with io_depth=0 it
 * keeps at most the tuner's depth_lim tickets (and its FIFO grows to it)
 * instead of growing on its own. Neither changes an item's bytes.
 *
 * Each worker touches its own fetcher, FIFO, recipe scratch and counters;
 * shared state only through the backend and echo/, each with its own
 * locks. gpu_output=device: an item's image field is given to the recipe
 * at its device ring address (gpu/dring.c, read-only here).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch/ring.h"
#include "common/clock.h"
#include "common/error.h"
#include "decode/decode.h"
#include "echo/echo.h"
#include "gpu/gpu.h"
#include "loader_impl.h"
#include "dataset/stream.h"
#include "serve/serve.h"

static void add_times(worker *w, const nst_recipe_times *t)
{
    STAT_ADD(w->st.decode_ns, t->decode_ns);
    STAT_ADD(w->st.decode_items, t->decode_items);
    STAT_ADD(w->st.decode_pixels, t->decode_pixels);
    STAT_ADD(w->st.augment_ns, t->augment_ns);
    STAT_ADD(w->st.augment_items, t->augment_items);
    STAT_ADD(w->st.augment_bytes, t->augment_bytes);
    if (t->gpu_hw_items) STAT_ADD(w->st.gpu_hw_items, t->gpu_hw_items);
    if (t->gpu_default_items) STAT_ADD(w->st.gpu_default_items, t->gpu_default_items);
    if (t->gpu_cpu_items) STAT_ADD(w->st.gpu_cpu_items, t->gpu_cpu_items);
}

/* Batch accounting: where one item's bytes came from. */
static void io_add_fetch(uint64_t *v, const nst_fetch_io *f)
{
    v[NST_IO_storage_bytes] += f->storage_bytes;
    v[NST_IO_storage_reads] += f->storage_read;
    v[NST_IO_cache_hits] += f->cache_hit;
    v[NST_IO_cache_misses] += f->cache_miss;
    v[NST_IO_peer_hits] += f->peer_hit;
    v[NST_IO_peer_bytes] += f->peer_bytes;
    v[NST_IO_http_transfers] += f->http_transfers;
    v[NST_IO_http_retries] += f->http_retries;
}

/* Called with the oldest item completed, before it is released. */
static void depth_adapt(worker *w, uint64_t wait_ns, uint64_t busy_ns, int full)
{
    if (w->want >= w->cap) return;
    w->win_wait_ns += wait_ns;
    w->win_busy_ns += busy_ns;
    w->win_full += full;
    if (++w->win_items < NST_IO_DEPTH_AUTO_WINDOW) return;
    if (2 * w->win_full >= w->win_items && 20 * w->win_wait_ns > w->win_wait_ns + w->win_busy_ns)
        w->want = 2 * w->want < w->cap ? 2 * w->want : w->cap;
    w->win_wait_ns = w->win_busy_ns = 0;
    w->win_items = w->win_full = 0;
}

/* After a release: grow the ticket FIFO and the fetcher's together (they
 * hold the same items in the same positions) once their pending entries
 * do not wrap around the current size, so every position keeps its slot. */
static void depth_apply(worker *w)
{
    if (w->ld->tune_depth) { /* autotune decides: grow to its limit */
        uint32_t t = atomic_load_explicit(&w->ld->depth_lim, memory_order_relaxed);
        if (t > w->want) w->want = t < w->cap ? t : w->cap;
    }
    if (w->want <= w->depth || w->tk_head + w->tk_count > w->depth) return;
    if (!nst_fetcher_grow(w->fetch, w->want)) return; /* cannot differ; stay in step */
    w->depth = w->want;
    atomic_store_explicit(&w->st.depth, w->depth, memory_order_relaxed);
}

/* Fill the FIFO with tickets. 1 if the backend will never have more. */
static int take_tickets(worker *w)
{
    struct nostall_loader *ld = w->ld;
    uint32_t lim = w->depth; /* autotune: its limit, none while parked */
    if (ld->autotune) {
        uint32_t t = atomic_load_explicit(&ld->depth_lim, memory_order_relaxed);
        if (t && t < lim) lim = t;
        if (w->id >= atomic_load_explicit(&ld->active, memory_order_relaxed)) lim = 0;
    }
    while (w->tk_count < lim) {
        nst_ticket *t = &w->tk[(w->tk_head + w->tk_count) % w->depth];
        if (nst_prep_orphan_take(ld->prep, t)) { /* a failed prep server's first */
            w->tk_count++;
            continue;
        }
        uint64_t t0 = nst_now_ns();
        int rc = ld->bq->ops->take(ld->bq, t, w->tk_count ? 0 : 100);
        if (rc == 0) {
            w->tk_count++;
            continue;
        }
        if (!w->tk_count) STAT_ADD(w->st.idle_ns, nst_now_ns() - t0);
        return rc != NOSTALL_TIMEOUT; /* DONE, stopped */
    }
    return 0;
}

uint64_t nst_worker_map(void *ctx, const nst_ticket *t, uint64_t *item_epoch)
{
    struct nostall_loader *ld = ctx;
    *item_epoch = t->epoch;
    if (t->indexed) return t->index;
    return nst_sampler_item_epoch(&ld->sampler, t->epoch, nst_loader_item_pos(ld, t), item_epoch);
}

/* Start the fetches of tickets [first, count) of the FIFO. */
static void submit(worker *w, uint32_t first)
{
    struct nostall_loader *ld = w->ld;
    for (uint32_t k = first; k < w->tk_count; k++) {
        nst_ticket *t = &w->tk[(w->tk_head + k) % w->depth];
        uint64_t ie = t->epoch; /* the item's draws' epoch (a mix: its source's own) */
        if (!t->indexed)
            t->index =
                nst_sampler_item_epoch(&ld->sampler, t->epoch, nst_loader_item_pos(ld, t), &ie);
        *t->index_dst = t->index;
        if (t->nofetch)
            nst_fetch_submit_none(w->fetch, t->index);
        else {
            nst_item_loc loc;
            nst_recipe_locate(ld->recipe, ie, t->index, &loc);
            nst_fetch_submit_range(w->fetch, loc.key, loc.path, loc.offset, loc.length);
        }
    }
}

/* The item's context for the recipe: its draws' epoch, index, path and
 * places (gpu_output=device: the image field at its device ring address,
 * in dev_dst). */
static void item_ctx(worker *w, const nst_ticket *t, nst_item_ctx *c, uint8_t **dev_dst)
{
    struct nostall_loader *ld = w->ld;
    uint64_t ie = t->epoch;
    if (!t->indexed)
        nst_sampler_item_epoch(&ld->sampler, t->epoch, nst_loader_item_pos(ld, t), &ie);
    *c = (nst_item_ctx){.epoch = ie,
                        .index = t->index,
                        .path = nst_recipe_path(ld->recipe, t->index),
                        .dst = t->dst};
    if (ld->dring) { /* gpu_output=device: the image goes to the device ring */
        const uint32_t f = ld->recipe->image_field;
        memcpy(dev_dst, t->dst, NST_FIELDS_MAX * sizeof *dev_dst);
        dev_dst[f] = nst_gpu_dring_dev(ld->dring, t->dst[f]);
        c->dst = dev_dst;
        c->dst_device = 1;
    }
}

/* Make the oldest ticket's item from its completed fetch, through data
 * echoing's one entry (echo/echo.h; it makes a plain item when echoing is
 * off). A stale ticket's item is not made. */
static int make_item(worker *w, nst_ticket *t, const nst_fetch_req *r, int stale, char *msg,
                     size_t msgn)
{
    struct nostall_loader *ld = w->ld;
    nst_recipe_times tm = {0};
    nst_item_ctx c;
    uint8_t *dev_dst[NST_FIELDS_MAX];
    item_ctx(w, t, &c, dev_dst);
    if (!stale && !t->nofetch && r->status >= 0) {
        STAT_ADD(w->st.fetch_items, 1);
        STAT_ADD(w->st.fetch_bytes, r->len);
    }
    int rc = nst_echo_item(ld->echo, w->rw, ld->recipe, t, &c, r, stale, &tm, msg, msgn);
    add_times(w, &tm);
    return rc;
}

/* shard_mode=stream: the items come from the shards' reader (source/
 * stream.h), not from the fetcher: each ticket's item is the stream's
 * order at its global position, and its fetch is an empty entry that
 * keeps the fetcher's FIFO in step. (Echoing is refused with streaming.) */
static void stream_submit(worker *w, uint32_t first)
{
    struct nostall_loader *ld = w->ld;
    for (uint32_t k = first; k < w->tk_count; k++) {
        nst_ticket *t = &w->tk[(w->tk_head + k) % w->depth];
        uint64_t g = nst_stream_global(&ld->sampler, t->epoch, t->position);
        t->index = nst_stream_item(ld->stream, t->epoch, g);
        *t->index_dst = t->index;
        nst_fetch_submit_none(w->fetch, t->index);
    }
}

/* The oldest ticket's item from the stream's bytes (a stale ticket only
 * gives its slot back). */
static int stream_make(worker *w, nst_ticket *t, nst_fetch_req *r, int stale, char *msg, size_t msgn)
{
    struct nostall_loader *ld = w->ld;
    int rc = 0;
    if (!stale) {
        const uint8_t *data;
        size_t len;
        uint64_t t0 = nst_now_ns();
        r->status =
            nst_stream_get(ld->stream, t->epoch, t->position, &data, &len, r->msg, sizeof r->msg);
        r->wait_ns = nst_now_ns() - t0;
        STAT_ADD(w->st.storage_wait_ns, r->wait_ns);
        if (r->status == 0) {
            STAT_ADD(w->st.storage_reads, 1);
            STAT_ADD(w->st.storage_bytes, len);
        }
        r->data = data;
        r->len = len;
        rc = make_item(w, t, r, 0, msg, msgn);
        r->data = NULL;
    }
    nst_stream_release(ld->stream, t->epoch, t->position);
    return rc;
}

/* A completed fetch's counters. */
static void fetch_stats(worker *w, const nst_fetch_req *r)
{
    STAT_ADD(w->st.storage_wait_ns, r->wait_ns);
    STAT_ADD(w->st.transcoded, r->io.rewritten);
    STAT_ADD(w->st.transcode_ns, r->io.rewrite_ns);
    if (r->io.storage_read) {
        STAT_ADD(w->st.storage_reads, 1);
        STAT_ADD(w->st.storage_bytes, r->io.storage_bytes);
    }
    STAT_ADD(w->st.cache_hits, r->io.cache_hit);
    STAT_ADD(w->st.cache_misses, r->io.cache_miss);
}

/* make_many's arrays, for up to `cap` items (made at create). */
#define MANY_MSG (NST_ERROR_MAX - 128)
#define MANY_MAX 64
struct worker_many {
    uint32_t cap;
    nst_fetch_req **req;
    int *pos, *stale, *rc;
    nst_item_ctx *ctx;
    uint8_t *(*dev)[NST_FIELDS_MAX];
    const uint8_t **data;
    size_t *len;
    char (*msg)[MANY_MSG];
};

static int many_create(worker *w)
{
    struct nostall_loader *ld = w->ld;
    const nst_recipe_ops *ops = ld->recipe->ops;
    if (ld->echo || ld->stream || w->cap < 2 || !ops->make_many ||
        ops->make_many(w->rw, NULL, NULL, NULL, 0, NULL, NULL, 0, NULL) < 0)
        return 0; /* one item at a time */
    const uint32_t n = w->cap < MANY_MAX ? w->cap : MANY_MAX;
    worker_many *b = calloc(1, sizeof *b);
    if (b) {
        b->cap = n;
        b->req = calloc(n, sizeof *b->req);
        b->pos = calloc(n, sizeof *b->pos);
        b->stale = calloc(n, sizeof *b->stale);
        b->rc = calloc(n, sizeof *b->rc);
        b->ctx = calloc(n, sizeof *b->ctx);
        b->dev = calloc(n, sizeof *b->dev);
        b->data = calloc(n, sizeof *b->data);
        b->len = calloc(n, sizeof *b->len);
        b->msg = calloc(n, sizeof *b->msg);
    }
    w->many = b;
    if (b && b->req && b->pos && b->stale && b->rc && b->ctx && b->dev && b->data && b->len &&
        b->msg)
        return 0;
    return nst_error(NOSTALL_E_NOMEM, "worker: out of memory");
}

void nst_worker_many_free(worker_many *b)
{
    if (!b) return;
    free(b->req);
    free(b->pos);
    free(b->stale);
    free(b->rc);
    free(b->ctx);
    free(b->dev);
    free(b->data);
    free(b->len);
    free(b->msg);
    free(b);
}

/* The oldest ticket's fetch r0 is complete: with it every following one
 * whose fetch is complete now (in order, without waiting; up to the
 * arrays' cap) is made in one make_many call (the GPU route's batched
 * decode); stale tickets, failed fetches and a lone item go through
 * make_item as before. Each is then handed back in order. */
static void complete_many(worker *w, nst_fetch_req *r0, uint64_t tb, int full)
{
    struct nostall_loader *ld = w->ld;
    nst_batches *bq = ld->bq;
    worker_many *b = w->many;
    uint32_t n = 1, m = 0;
    b->req[0] = r0;
    while (n < w->tk_count && n < b->cap && (b->req[n] = nst_fetch_ready(w->fetch, n))) n++;
    for (uint32_t k = 0; k < n; k++) {
        nst_ticket *t = &w->tk[(w->tk_head + k) % w->depth];
        const nst_fetch_req *r = b->req[k];
        fetch_stats(w, r);
        b->stale[k] = bq->ops->stale(bq, t);
        b->pos[k] = -1;
        if (n == 1 || b->stale[k] || t->nofetch || r->status < 0) continue;
        item_ctx(w, t, &b->ctx[m], b->dev[m]);
        STAT_ADD(w->st.fetch_items, 1);
        STAT_ADD(w->st.fetch_bytes, r->len);
        b->data[m] = r->data;
        b->len[m] = r->len;
        b->pos[k] = (int)m++;
    }
    if (m) {
        nst_recipe_times tm = {0};
        ld->recipe->ops->make_many(w->rw, b->ctx, b->data, b->len, m, b->rc, b->msg[0], MANY_MSG,
                                   &tm);
        add_times(w, &tm);
    }
    for (uint32_t k = 0; k < n; k++) {
        nst_ticket *t = &w->tk[w->tk_head];
        const nst_fetch_req *r = b->req[k];
        char one[MANY_MSG];
        const char *msg = one;
        int rc;
        one[0] = '\0';
        if (b->pos[k] < 0) {
            rc = make_item(w, t, r, b->stale[k], one, sizeof one);
        } else {
            rc = b->rc[b->pos[k]];
            msg = rc < 0 ? b->msg[b->pos[k]] : "";
        }
        io_add_fetch(t->io, &r->io);
        if (!ld->tune_depth) depth_adapt(w, r->wait_ns, (nst_now_ns() - tb) / n, full);
        nst_fetch_release(w->fetch);
        bq->ops->done(bq, t, rc, msg);
        w->tk_head = (w->tk_head + 1) % w->depth;
        w->tk_count--;
    }
}

void *nst_worker_main(void *arg)
{
    worker *w = arg;
    struct nostall_loader *ld = w->ld;
    nst_batches *bq = ld->bq;
    char msg[NST_ERROR_MAX - 128];
    int end = 0;

    while (!atomic_load(&ld->stop_flag)) {
        if (ld->autotune && w->tk_count == 0 && !end) nst_tune_park(w); /* not active: wait */
        uint32_t first = w->tk_count;
        if (!end) end = take_tickets(w);
        if (w->tk_count == 0) {
            if (end) break;
            continue;
        }
        uint64_t t0 = nst_now_ns();
        if (ld->stream)
            stream_submit(w, first);
        else
            submit(w, first);
        const int full = w->tk_count >= w->depth;
        nst_fetch_req *r = nst_fetch_next(w->fetch);
        const uint64_t tb = nst_now_ns();
        STAT_ADD(w->st.fetch_ns, tb - t0);
        if (!r) break;                /* stopped while waiting */
        if (w->many && !ld->stream) { /* the ready items at once (make_many) */
            complete_many(w, r, tb, full);
            depth_apply(w);
            continue;
        }
        nst_ticket *t = &w->tk[w->tk_head];
        fetch_stats(w, r);
        int rc = 0;
        msg[0] = '\0';
        if (ld->stream)
            rc = stream_make(w, t, r, bq->ops->stale(bq, t), msg, sizeof msg);
        else
            rc = make_item(w, t, r, bq->ops->stale(bq, t), msg, sizeof msg);
        io_add_fetch(t->io, &r->io);
        if (!ld->tune_depth) depth_adapt(w, r->wait_ns, nst_now_ns() - tb, full);
        nst_fetch_release(w->fetch);
        bq->ops->done(bq, t, rc, msg);
        w->tk_head = (w->tk_head + 1) % w->depth;
        w->tk_count--;
        depth_apply(w);
    }
    /* Tickets still held are discarded (a reset) or go back to the group
     * when this member leaves. */
    return NULL;
}

/* The fetch stage's rewrite hook with cache_transcode: JPEGs go into the
 * MinIO cache with restart markers, using the worker's own decoder, which
 * is idle while its worker fetches. */
static int rewrite_jpeg(void *ctx, const uint8_t *in, size_t len, nst_buf *out, size_t *out_len)
{
    return nst_decode_transcode((nst_decoder *)ctx, in, len, out, out_len);
}

int nst_workers_create(struct nostall_loader *ld, const char *fn)
{
    const nst_optval *v = ld->cfg.v;
    int rc;
    ld->workers = calloc(ld->nthreads ? ld->nthreads : 1, sizeof *ld->workers);
    if (!ld->workers) return nst_error(NOSTALL_E_NOMEM, "%s: out of memory", fn);
    for (uint32_t i = 0; i < ld->nthreads; i++) {
        worker *w = &ld->workers[i];
        w->ld = ld;
        w->id = i;
        if ((rc = ld->recipe->ops->worker_create(ld->recipe, &w->rw)) < 0) return rc;
        w->depth = w->cap = (uint32_t)v[NOSTALL_OPT_IO_DEPTH].u;
        if (w->cap == 0) { /* auto */
            w->depth = NST_IO_DEPTH_AUTO_START;
            w->cap = NOSTALL_IO_DEPTH_AUTO_MAX;
        }
        w->want = w->depth;
        atomic_store_explicit(&w->st.depth, w->depth, memory_order_relaxed);
        if ((rc = nst_fetcher_create(&w->fetch, &ld->fenv, w->depth, w->cap)) < 0) return rc;
        void *dec = ld->recipe->ops->decoder ? ld->recipe->ops->decoder(w->rw) : NULL;
        if (ld->cache && v[NOSTALL_OPT_CACHE_TRANSCODE].u && dec)
            nst_fetcher_set_rewrite(w->fetch, rewrite_jpeg, dec);
        w->tk = calloc(w->cap, sizeof *w->tk);
        if (!w->tk) return nst_error(NOSTALL_E_NOMEM, "%s: out of memory", fn);
        if ((rc = many_create(w)) < 0) return rc;
    }
    for (uint32_t i = 0; i < ld->nthreads; i++) {
        if (pthread_create(&ld->workers[i].thread, NULL, nst_worker_main, &ld->workers[i]) != 0)
            return nst_error(NOSTALL_E_THREAD, "%s: cannot start worker thread %u of %u", fn, i,
                             ld->nthreads);
        ld->workers[i].started = 1;
    }
    return 0;
}
