/*
 * pipeline.c — the loader: wires index, sampler, reader, decoder, augmenter
 * and batch ring together and owns every thread. The only file that knows
 * all the stages.
 *
 * DESIGN
 *   Work is handed out one item at a time, in delivery order. The producer
 *   cursor (epoch, position) walks the stream of batches that the consumer
 *   will receive; each batch gets a sequence number `seq` and lives in ring
 *   slot seq % nslots. A worker takes the next item ticket (batch seq, item j)
 *   under the mutex, then — without the lock — fetches, decodes and augments
 *   that item straight into its place in the slot. The item's dataset index
 *   and every random choice are pure functions of (seed, epoch, position), so
 *   the bytes of every batch are the same whatever the number of threads and
 *   whichever thread did which item.
 *
 *   Bounded: a batch is only opened once its slot was released by the
 *   consumer (seq < released + nslots). Memory is planned at create: the ring
 *   arena, and per worker a decoder, an augmenter and a file buffer, each
 *   grow-only (they stop growing after the largest item seen).
 *
 *   Bad items: the item's status is recorded in the slot. Under `skip` the
 *   finished batch is compacted (bad items removed, order kept) and the skip
 *   is counted and listed; under `fail` no new batch is opened after the
 *   failing one, and the consumer receives the earlier batches and then the
 *   error of the first failing item of that batch (deterministic too).
 *
 * THREADS AND LOCKS
 *   `mu` guards the cursor, the ring's slot bookkeeping, the consumer
 *   counters that workers read, the skip table and the flags. Three
 *   conditions: `work` (workers: a batch may be opened, a reset finished, or
 *   stop), `ready` (consumer: a slot became ready, or stop/failure), `idle`
 *   (set_state: in-flight items drained). stop() sets `stopped` and broadcasts
 *   all three, so every wait has a shutdown exit. Statistics are per-worker
 *   relaxed atomics written only by their owner and summed at snapshot.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "augment/augment.h"
#include "batch/ring.h"
#include "cache/minio.h"
#include "common/buf.h"
#include "common/clock.h"
#include "common/config.h"
#include "common/error.h"
#include "common/rng.h"
#include "decode/decode.h"
#include "source/index.h"
#include "source/fetch.h"
#include "source/sampler.h"
#include "source/throttle.h"

typedef _Atomic uint64_t counter;

/* Single-writer add: only the owning thread writes, any thread may read. */
#define STAT_ADD(c, d)                                                          \
    atomic_store_explicit(&(c), atomic_load_explicit(&(c), memory_order_relaxed) + (d), \
                          memory_order_relaxed)
#define STAT_GET(c) atomic_load_explicit(&(c), memory_order_relaxed)

typedef struct worker_stats {
    counter fetch_items, fetch_bytes, fetch_ns;
    counter decode_items, decode_pixels, decode_ns;
    counter augment_items, augment_bytes, augment_ns;
    counter idle_ns;
    counter storage_reads, storage_bytes, storage_wait_ns;
    counter cache_hits, cache_misses;
} worker_stats;

/* An item ticket taken by a worker: item j of the batch in slot s. */
typedef struct ticket {
    nst_slot *s;
    uint32_t j;
    uint64_t epoch, index, gen;
} ticket;

typedef struct worker {
    _Alignas(64) worker_stats st;
    struct nostall_loader *ld;
    pthread_t thread;
    int started;
    nst_fetcher *fetch;  /* the fetches in flight, oldest first         */
    ticket *tk;          /* their tickets, same FIFO order (depth)      */
    uint32_t tk_head, tk_count, depth;
    nst_decoder *dec;
    nst_augmenter *aug;
} worker;

typedef struct skip_entry {
    uint64_t index;
    int status;
    char *msg;
} skip_entry;

struct nostall_loader {
    nostall_config cfg;
    char *source;
    nst_index *index;
    nst_sampler sampler;
    nst_ring ring;
    float lut[3 * 256];
    pid_t pid;
    nst_cache *cache;      /* NULL: no cache; thread-safe, lock-free reads */
    nst_throttle throttle; /* emulated storage (off unless configured)    */
    nst_fetch_env fenv;    /* what every worker's fetcher shares          */

    /* Plan (immutable after create). */
    uint32_t batch_size, crop, resize, nthreads;
    size_t item_bytes;
    int mode, output, on_bad, drop_last;
    uint64_t epochs_limit; /* 0 = unlimited */
    uint64_t batches_per_epoch, items_per_epoch;

    pthread_mutex_t mu;
    pthread_cond_t work, ready, idle;

    /* Guarded by mu. */
    int stopped;         /* also read without mu via stop_flag */
    int resetting;
    uint64_t gen;        /* bumped by set_state (also in gen_pub)         */
    uint64_t inflight;   /* items being processed outside the lock        */
    /* producer cursor */
    uint64_t prod_epoch, prod_pos, prod_seq;
    int prod_open;       /* slot prod_seq % n is open and has items left  */
    int prod_halted;     /* fail policy: open no more batches             */
    /* consumer side */
    uint64_t released;   /* batches released since the last reset: every
                            seq < released is free                       */
    uint64_t cons_seq;   /* next seq to lend                              */
    uint64_t cons_epoch, cons_pos;
    uint32_t lent;
    int failed;          /* sticky failure status for the consumer        */
    char failmsg[NST_ERROR_MAX];
    /* skip table: distinct bad items, sorted by index */
    skip_entry *skips;
    uint64_t nskips, skips_cap, skipped_total;
    char *skip_reason; /* copy handed out by nostall_loader_skipped      */

    atomic_int stop_flag;
    counter gen_pub;     /* gen, readable without mu                      */
    counter batches_delivered, items_delivered, wait_ns;
    /* fetch accounting of delivered batches (see nst_slot.io_*) */
    counter dlv_storage_bytes, dlv_storage_reads, dlv_cache_hits, dlv_cache_misses;
    counter dlv_peer_hits, dlv_peer_bytes, dlv_http_transfers, dlv_http_retries;
    counter cons_epoch_pub, cons_pos_pub;

    worker *workers;
};

/* ------------------------------------------------------------------------
 * Epoch arithmetic, shared by producer and consumer so both walk the same
 * batch stream.
 * ------------------------------------------------------------------------ */

/* Items in the batch starting at `pos`; 0 when the epoch is over. */
static uint32_t batch_len(const struct nostall_loader *ld, uint64_t pos)
{
    uint64_t per = ld->sampler.per_rank;
    if (pos >= per) return 0;
    uint64_t rem = per - pos;
    if (rem >= ld->batch_size) return ld->batch_size;
    return ld->drop_last ? 0 : (uint32_t)rem;
}

static int forked(const struct nostall_loader *ld, const char *fn)
{
    if (getpid() != ld->pid)
        return nst_error(NOSTALL_E_FORK, "%s: loader used in a child process after fork()", fn);
    return 0;
}

/* ------------------------------------------------------------------------
 * Bad items.
 * ------------------------------------------------------------------------ */

/* Record a distinct bad item (mu held). Errors here are only allocation
 * failures of the report itself; the skip is still counted. */
static void skip_record(struct nostall_loader *ld, uint64_t index, int status, const char *msg)
{
    uint64_t lo = 0, hi = ld->nskips;
    ld->skipped_total++;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (ld->skips[mid].index < index) lo = mid + 1;
        else hi = mid;
    }
    if (lo < ld->nskips && ld->skips[lo].index == index) return;
    if (ld->nskips == ld->skips_cap) {
        uint64_t cap = ld->skips_cap ? ld->skips_cap * 2 : 64;
        skip_entry *p = realloc(ld->skips, cap * sizeof *p);
        if (!p) return;
        ld->skips = p;
        ld->skips_cap = cap;
    }
    memmove(&ld->skips[lo + 1], &ld->skips[lo], (ld->nskips - lo) * sizeof *ld->skips);
    ld->skips[lo].index = index;
    ld->skips[lo].status = status;
    ld->skips[lo].msg = strdup(msg);
    ld->nskips++;
}

/* ------------------------------------------------------------------------
 * One item: fetch -> decode -> augment into its place in the slot.
 * Runs without the lock; touches only the worker's own scratch, the item's
 * range of the slot, and the worker's counters.
 * ------------------------------------------------------------------------ */
/* Decode and augment one fetched item into its place in the slot. */
static int process_item(worker *w, uint64_t epoch, uint64_t index, const char *path,
                        const uint8_t *data, size_t len, uint8_t *dst)
{
    struct nostall_loader *ld = w->ld;
    nst_image_info info;
    nst_window win;
    nst_image img;
    int flip = 0, rc = 0;
    uint64_t t1 = nst_now_ns();

    rc = nst_decode_probe(w->dec, data, len, path, &info);
    if (rc < 0) {
        STAT_ADD(w->st.decode_ns, nst_now_ns() - t1);
        return rc;
    }
    nst_rng rng;
    nst_rng_seed(&rng, nst_hash4(ld->cfg.v[NOSTALL_OPT_SEED].u, epoch, index, NST_RNG_AUGMENT));
    if (ld->mode == NOSTALL_MODE_TRAIN) {
        const nst_optval *v = ld->cfg.v;
        nst_crop_random_resized(info.width, info.height, v[NOSTALL_OPT_SCALE_MIN].d,
                                v[NOSTALL_OPT_SCALE_MAX].d, v[NOSTALL_OPT_RATIO_MIN].d,
                                v[NOSTALL_OPT_RATIO_MAX].d, &rng, &win);
        flip = nst_rng_double(&rng) < v[NOSTALL_OPT_FLIP_PROB].d;
    } else {
        nst_crop_center(info.width, info.height, ld->resize, ld->crop, &win);
    }
    rc = nst_decode(w->dec, data, len, path, &win, ld->crop, ld->crop, &img);
    uint64_t t2 = nst_now_ns();
    STAT_ADD(w->st.decode_ns, t2 - t1);
    if (rc < 0) return rc;
    STAT_ADD(w->st.decode_items, 1);
    STAT_ADD(w->st.decode_pixels, (uint64_t)img.width * img.height);

    nst_output out = {
        .kind = ld->output == NOSTALL_OUTPUT_FLOAT ? NST_OUT_FLOAT_NCHW : NST_OUT_UINT8_NHWC,
        .size = ld->crop,
        .dst = dst,
        .lut = ld->lut,
    };
    rc = nst_augment(w->aug, &img, &win, flip, &out);
    uint64_t t3 = nst_now_ns();
    STAT_ADD(w->st.augment_ns, t3 - t2);
    if (rc < 0) return rc;
    STAT_ADD(w->st.augment_items, 1);
    STAT_ADD(w->st.augment_bytes, ld->item_bytes);
    return 0;
}

/* ------------------------------------------------------------------------
 * Workers.
 * ------------------------------------------------------------------------ */

/* Open the next batch at the producer cursor if its slot is free (mu held).
 * Returns 1 if a batch is open, 0 if the worker must wait. */
static int open_batch(struct nostall_loader *ld)
{
    if (ld->prod_open) return 1;
    if (ld->prod_halted) return 0;
    for (;;) {
        if (ld->epochs_limit && ld->prod_epoch >= ld->epochs_limit) return 0;
        if (batch_len(ld, ld->prod_pos) > 0) break;
        ld->prod_epoch++;
        ld->prod_pos = 0;
    }
    if (ld->prod_seq >= ld->released + ld->ring.nslots) return 0; /* ring full */
    nst_slot *s = &ld->ring.slots[ld->prod_seq % ld->ring.nslots];
    s->state = NST_SLOT_FILLING;
    s->seq = ld->prod_seq;
    s->epoch = ld->prod_epoch;
    s->position = ld->prod_pos;
    s->count = batch_len(ld, ld->prod_pos);
    s->assigned = s->done = s->failed = s->delivered = 0;
    s->io_storage_bytes = s->io_storage_reads = s->io_cache_hits = s->io_cache_misses = 0;
    s->io_peer_hits = s->io_peer_bytes = s->io_http_transfers = s->io_http_retries = 0;
    s->error = 0;
    s->errmsg[0] = '\0';
    ld->prod_open = 1;
    return 1;
}

/* Take the next item ticket of the open batch into the worker's FIFO
 * (mu held, a batch is open). */
static void take_ticket(struct nostall_loader *ld, worker *w)
{
    nst_slot *s = &ld->ring.slots[ld->prod_seq % ld->ring.nslots];
    ticket *t = &w->tk[(w->tk_head + w->tk_count) % w->depth];
    t->s = s;
    t->j = s->assigned++;
    t->epoch = s->epoch;
    t->index = s->position + t->j; /* the position, until mapped below */
    t->gen = ld->gen;
    if (s->assigned == s->count) {
        ld->prod_open = 0;
        ld->prod_pos += s->count;
        ld->prod_seq++;
    }
    ld->inflight++;
    w->tk_count++;
}

/* Record a finished item in its slot (mu held). */
static void finish_item(struct nostall_loader *ld, const ticket *t, int rc, const char *msg,
                        const nst_fetch_io *io)
{
    nst_slot *s = t->s;
    uint32_t j = t->j;
    s->item_status[j] = rc < 0 ? rc : 0;
    s->io_storage_bytes += io->storage_bytes;
    s->io_storage_reads += io->storage_read;
    s->io_cache_hits += io->cache_hit;
    s->io_cache_misses += io->cache_miss;
    s->io_peer_hits += io->peer_hit;
    s->io_peer_bytes += io->peer_bytes;
    s->io_http_transfers += io->http_transfers;
    s->io_http_retries += io->http_retries;
    if (rc < 0) {
        s->failed++;
        if (ld->on_bad == NOSTALL_BAD_SKIP) {
            skip_record(ld, t->index, rc, msg);
        } else {
            ld->prod_halted = 1;
            if (!s->error || j < s->error_item) {
                s->error = rc;
                s->error_item = j;
                snprintf(s->errmsg, sizeof s->errmsg, "item %llu: %s",
                         (unsigned long long)t->index, msg);
            }
        }
    }
    if (++s->done == s->count) {
        if (s->failed && ld->on_bad == NOSTALL_BAD_SKIP) nst_ring_compact(&ld->ring, s);
        else s->delivered = s->count;
        s->state = NST_SLOT_READY;
        pthread_cond_broadcast(&ld->ready);
    }
}

/*
 * A worker keeps up to `depth` tickets, taken in delivery order and only
 * from open batches (so the ring bounds them and a worker holding tickets
 * never waits for ring space), with their fetches in flight; it completes
 * the oldest, decodes and augments it, and tops the FIFO up again.
 */
static void *worker_main(void *arg)
{
    worker *w = arg;
    struct nostall_loader *ld = w->ld;
    char msg[NST_ERROR_MAX - 128];

    pthread_mutex_lock(&ld->mu);
    for (;;) {
        if (ld->stopped) break;
        uint32_t first = w->tk_count;
        while (w->tk_count < w->depth && !ld->resetting && open_batch(ld)) take_ticket(ld, w);
        uint32_t taken = w->tk_count - first;
        if (w->tk_count == 0) {
            uint64_t t0 = nst_now_ns();
            pthread_cond_wait(&ld->work, &ld->mu);
            STAT_ADD(w->st.idle_ns, nst_now_ns() - t0);
            continue;
        }
        pthread_mutex_unlock(&ld->mu);

        /* Start the fetches of the new tickets. */
        uint64_t t0 = nst_now_ns();
        for (uint32_t k = first; k < first + taken; k++) {
            ticket *t = &w->tk[(w->tk_head + k) % w->depth];
            uint64_t index = nst_sampler_item(&ld->sampler, t->epoch, t->index);
            t->index = index;
            t->s->indices[t->j] = index;
            t->s->labels[t->j] = nst_index_label(ld->index, index);
            nst_fetch_submit(w->fetch, index, nst_index_path(ld->index, index));
        }
        /* Complete the oldest. */
        nst_fetch_req *r = nst_fetch_next(w->fetch);
        STAT_ADD(w->st.fetch_ns, nst_now_ns() - t0);
        if (!r) { /* stopped while waiting */
            pthread_mutex_lock(&ld->mu);
            break;
        }
        ticket t = w->tk[w->tk_head];
        nst_fetch_io io = r->io;
        int rc = 0;
        STAT_ADD(w->st.storage_wait_ns, r->wait_ns);
        if (io.storage_read) {
            STAT_ADD(w->st.storage_reads, 1);
            STAT_ADD(w->st.storage_bytes, io.storage_bytes);
        }
        STAT_ADD(w->st.cache_hits, io.cache_hit);
        STAT_ADD(w->st.cache_misses, io.cache_miss);
        if (t.gen != STAT_GET(ld->gen_pub)) {
            rc = 0; /* set_state discarded this batch: do not decode */
        } else if (r->status < 0) {
            rc = r->status;
            snprintf(msg, sizeof msg, "%s", r->msg);
        } else {
            STAT_ADD(w->st.fetch_items, 1);
            STAT_ADD(w->st.fetch_bytes, r->len);
            rc = process_item(w, t.epoch, t.index, r->path, r->data, r->len,
                              t.s->images + (size_t)t.j * ld->item_bytes);
            if (rc < 0) {
                const char *detail = nostall_last_error();
                snprintf(msg, sizeof msg, "%s", detail && *detail ? detail : nostall_strerror(rc));
            }
        }
        nst_fetch_release(w->fetch);
        w->tk_head = (w->tk_head + 1) % w->depth;
        w->tk_count--;

        pthread_mutex_lock(&ld->mu);
        ld->inflight--;
        if (t.gen != ld->gen) { /* set_state discarded this batch */
            pthread_cond_broadcast(&ld->idle);
            continue;
        }
        finish_item(ld, &t, rc, msg, &io);
    }
    pthread_mutex_unlock(&ld->mu);
    return NULL;
}

/* ------------------------------------------------------------------------
 * Create / free.
 * ------------------------------------------------------------------------ */

static int validate(const nostall_config *c, const char *fn)
{
    const nst_optval *v = c->v;
    if (v[NOSTALL_OPT_SCALE_MIN].d > v[NOSTALL_OPT_SCALE_MAX].d)
        return nst_error(NOSTALL_E_OPTION, "%s: scale_min (%g) must be <= scale_max (%g)", fn,
                         v[NOSTALL_OPT_SCALE_MIN].d, v[NOSTALL_OPT_SCALE_MAX].d);
    if (v[NOSTALL_OPT_RATIO_MIN].d > v[NOSTALL_OPT_RATIO_MAX].d)
        return nst_error(NOSTALL_E_OPTION, "%s: ratio_min (%g) must be <= ratio_max (%g)", fn,
                         v[NOSTALL_OPT_RATIO_MIN].d, v[NOSTALL_OPT_RATIO_MAX].d);
    if (v[NOSTALL_OPT_RANK].u >= v[NOSTALL_OPT_WORLD_SIZE].u)
        return nst_error(NOSTALL_E_OPTION, "%s: rank (%llu) must be < world_size (%llu)", fn,
                         (unsigned long long)v[NOSTALL_OPT_RANK].u,
                         (unsigned long long)v[NOSTALL_OPT_WORLD_SIZE].u);
    if (v[NOSTALL_OPT_CACHE].u == 1 /* none */ && v[NOSTALL_OPT_CACHE_BYTES].u)
        return nst_error(NOSTALL_E_OPTION,
                         "%s: cache_bytes (%llu) is set but cache=none; use cache=minio", fn,
                         (unsigned long long)v[NOSTALL_OPT_CACHE_BYTES].u);
    if (v[NOSTALL_OPT_MODE].u == NOSTALL_MODE_EVAL && v[NOSTALL_OPT_RESIZE].u &&
        v[NOSTALL_OPT_RESIZE].u < v[NOSTALL_OPT_CROP].u)
        return nst_error(NOSTALL_E_OPTION, "%s: resize (%llu) must be >= crop (%llu) or 0", fn,
                         (unsigned long long)v[NOSTALL_OPT_RESIZE].u,
                         (unsigned long long)v[NOSTALL_OPT_CROP].u);
    return 0;
}

int nostall_loader_create(nostall_loader **out, const char *source, const nostall_config *cfg)
{
    static const char fn[] = "nostall_loader_create";
    struct nostall_loader *ld = NULL;
    nostall_config *defaults = NULL;
    int rc;

    nst_error_clear();
    if (!out || !source)
        return nst_error(NOSTALL_E_INVALID, "%s: out and source must not be NULL", fn);
    *out = NULL;
    if (!cfg) {
        if ((rc = nostall_config_create(&defaults)) < 0) return rc;
        cfg = defaults;
    }
    if ((rc = validate(cfg, fn)) < 0) goto fail_early;
    ld = calloc(1, sizeof *ld);
    if (!ld) {
        rc = nst_error(NOSTALL_E_NOMEM, "%s: out of memory", fn);
        goto fail_early;
    }
    ld->cfg = *cfg;
    nostall_config_free(defaults);
    defaults = NULL;
    ld->pid = getpid();
    pthread_mutex_init(&ld->mu, NULL);
    pthread_cond_init(&ld->work, NULL);
    nst_throttle_init(&ld->throttle, ld->cfg.v[NOSTALL_OPT_STORAGE_MBPS].d,
                      ld->cfg.v[NOSTALL_OPT_STORAGE_LATENCY_MS].d);
    {
        /* `ready` has timed waits against CLOCK_MONOTONIC (nst_now_ns). */
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&ld->ready, &ca);
        pthread_condattr_destroy(&ca);
    }
    pthread_cond_init(&ld->idle, NULL);

    const nst_optval *v = ld->cfg.v;
    ld->batch_size = (uint32_t)v[NOSTALL_OPT_BATCH_SIZE].u;
    ld->crop = (uint32_t)v[NOSTALL_OPT_CROP].u;
    ld->resize = v[NOSTALL_OPT_RESIZE].u ? (uint32_t)v[NOSTALL_OPT_RESIZE].u
                                         : (uint32_t)((uint64_t)ld->crop * 8 / 7);
    if (ld->resize < ld->crop) ld->resize = ld->crop;
    ld->mode = (int)v[NOSTALL_OPT_MODE].u;
    ld->output = (int)v[NOSTALL_OPT_OUTPUT].u;
    ld->on_bad = (int)v[NOSTALL_OPT_ON_BAD_ITEM].u;
    ld->drop_last = (int)v[NOSTALL_OPT_DROP_LAST].u;
    ld->epochs_limit = v[NOSTALL_OPT_EPOCHS].u;
    ld->nthreads = (uint32_t)v[NOSTALL_OPT_THREADS].u;
    if (ld->nthreads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        ld->nthreads = n > 0 ? (uint32_t)n : 1;
    }
    ld->item_bytes = (size_t)ld->crop * ld->crop * 3 *
                     (ld->output == NOSTALL_OUTPUT_FLOAT ? sizeof(float) : 1);
    nst_norm_lut(ld->lut, v[NOSTALL_OPT_MEAN].d3, v[NOSTALL_OPT_STD].d3);

    ld->source = strdup(source);
    if (!ld->source) {
        rc = nst_error(NOSTALL_E_NOMEM, "%s: out of memory", fn);
        goto fail;
    }
    if ((rc = nst_index_build(&ld->index, source)) < 0) goto fail;
    rc = nst_sampler_init(&ld->sampler, nst_index_count(ld->index), v[NOSTALL_OPT_SEED].u,
                          (uint32_t)v[NOSTALL_OPT_RANK].u, (uint32_t)v[NOSTALL_OPT_WORLD_SIZE].u,
                          (int)v[NOSTALL_OPT_SHUFFLE].u, ld->drop_last);
    if (rc < 0) goto fail;
    {
        uint64_t per = ld->sampler.per_rank;
        if (ld->drop_last) {
            ld->batches_per_epoch = per / ld->batch_size;
            ld->items_per_epoch = ld->batches_per_epoch * ld->batch_size;
            if (ld->batches_per_epoch == 0) {
                rc = nst_error(NOSTALL_E_OPTION,
                               "%s: %s: drop_last with batch_size %u leaves no batch (this rank "
                               "has %llu items per epoch)",
                               fn, source, ld->batch_size, (unsigned long long)per);
                goto fail;
            }
        } else {
            ld->batches_per_epoch = (per + ld->batch_size - 1) / ld->batch_size;
            ld->items_per_epoch = per;
        }
    }
    if (v[NOSTALL_OPT_CACHE].u == 0 && v[NOSTALL_OPT_CACHE_BYTES].u) {
        rc = nst_cache_create(&ld->cache, v[NOSTALL_OPT_CACHE_BYTES].u, nst_index_count(ld->index));
        if (rc < 0) goto fail;
    }
    rc = nst_ring_create(&ld->ring, (uint32_t)v[NOSTALL_OPT_BATCHES_AHEAD].u + 1, ld->batch_size,
                         ld->item_bytes);
    if (rc < 0) goto fail;

    ld->fenv.cache = ld->cache;
    ld->fenv.peer = ld->cfg.has_peer ? &ld->cfg.peer : NULL;
    ld->fenv.throttle = &ld->throttle;
    ld->fenv.stop = &ld->stop_flag;
    ld->fenv.max_file_bytes = v[NOSTALL_OPT_MAX_FILE_BYTES].u;
    ld->fenv.reader = (int)v[NOSTALL_OPT_READER].u;
    ld->fenv.http_timeout_ms = (uint32_t)v[NOSTALL_OPT_HTTP_TIMEOUT_MS].u;
    ld->fenv.http_retries = (uint32_t)v[NOSTALL_OPT_HTTP_RETRIES].u;
    ld->fenv.http_verify_tls = (int)v[NOSTALL_OPT_HTTP_VERIFY_TLS].u;

    ld->workers = calloc(ld->nthreads, sizeof *ld->workers);
    if (!ld->workers) {
        rc = nst_error(NOSTALL_E_NOMEM, "%s: out of memory", fn);
        goto fail;
    }
    for (uint32_t i = 0; i < ld->nthreads; i++) {
        worker *w = &ld->workers[i];
        w->ld = ld;
        if ((rc = nst_decoder_create(&w->dec, v[NOSTALL_OPT_MAX_PIXELS].u)) < 0) goto fail;
        if ((rc = nst_augmenter_create(&w->aug)) < 0) goto fail;
        w->depth = (uint32_t)v[NOSTALL_OPT_IO_DEPTH].u;
        if ((rc = nst_fetcher_create(&w->fetch, &ld->fenv, w->depth)) < 0) goto fail;
        w->tk = calloc(w->depth, sizeof *w->tk);
        if (!w->tk) {
            rc = nst_error(NOSTALL_E_NOMEM, "%s: out of memory", fn);
            goto fail;
        }
    }
    for (uint32_t i = 0; i < ld->nthreads; i++) {
        if (pthread_create(&ld->workers[i].thread, NULL, worker_main, &ld->workers[i]) != 0) {
            rc = nst_error(NOSTALL_E_THREAD, "%s: cannot start worker thread %u of %u", fn, i,
                           ld->nthreads);
            goto fail;
        }
        ld->workers[i].started = 1;
    }
    *out = ld;
    return 0;

fail:
    {
        /* Keep the message: freeing must not overwrite it. */
        char keep[NST_ERROR_MAX];
        snprintf(keep, sizeof keep, "%s", nostall_last_error());
        nostall_loader_free(ld);
        nst_error_set(rc, keep);
    }
    return rc;
fail_early:
    nostall_config_free(defaults);
    return rc;
}

int nostall_loader_stop(nostall_loader *ld)
{
    if (!ld) return nst_error(NOSTALL_E_INVALID, "nostall_loader_stop: loader is NULL");
    pthread_mutex_lock(&ld->mu);
    ld->stopped = 1;
    atomic_store(&ld->stop_flag, 1);
    pthread_cond_broadcast(&ld->work);
    pthread_cond_broadcast(&ld->ready);
    pthread_cond_broadcast(&ld->idle);
    pthread_mutex_unlock(&ld->mu);
    return 0;
}

void nostall_loader_free(nostall_loader *ld)
{
    if (!ld) return;
    /* In a forked child the workers do not exist and the mutex may have been
     * held at fork time: touch nothing (the child's copy is leaked). */
    if (getpid() != ld->pid) return;
    if (ld->workers) {
        nostall_loader_stop(ld);
        for (uint32_t i = 0; i < ld->nthreads; i++)
            if (ld->workers[i].started) pthread_join(ld->workers[i].thread, NULL);
        for (uint32_t i = 0; i < ld->nthreads; i++) {
            nst_decoder_free(ld->workers[i].dec);
            nst_augmenter_free(ld->workers[i].aug);
            nst_fetcher_free(ld->workers[i].fetch);
            free(ld->workers[i].tk);
        }
        free(ld->workers);
    }
    for (uint64_t i = 0; i < ld->nskips; i++) free(ld->skips[i].msg);
    free(ld->skips);
    free(ld->skip_reason);
    nst_ring_destroy(&ld->ring);
    nst_cache_free(ld->cache);
    nst_index_free(ld->index);
    nst_throttle_destroy(&ld->throttle);
    free(ld->source);
    pthread_cond_destroy(&ld->work);
    pthread_cond_destroy(&ld->ready);
    pthread_cond_destroy(&ld->idle);
    pthread_mutex_destroy(&ld->mu);
    free(ld);
}

/* ------------------------------------------------------------------------
 * Consumer.
 * ------------------------------------------------------------------------ */

static void publish_cons(struct nostall_loader *ld)
{
    atomic_store_explicit(&ld->cons_epoch_pub, ld->cons_epoch, memory_order_relaxed);
    atomic_store_explicit(&ld->cons_pos_pub, ld->cons_pos, memory_order_relaxed);
}

static int next_batch(struct nostall_loader *ld, nostall_batch *out, uint64_t timeout_ns,
                      const char *fn);

/* Free passed-over empty batches at the head of the lent queue (mu held). */
static void release_empties(struct nostall_loader *ld)
{
    while (ld->released < ld->cons_seq) {
        nst_slot *s = &ld->ring.slots[ld->released % ld->ring.nslots];
        if (s->state != NST_SLOT_LENT || s->delivered != 0) break;
        s->state = NST_SLOT_FREE;
        ld->released++;
    }
    pthread_cond_broadcast(&ld->work);
}

/* Free the oldest lent slot, then any batches after it that were passed
 * over because every item was skipped (mu held). */
static void release_oldest(struct nostall_loader *ld)
{
    nst_slot *s = &ld->ring.slots[ld->released % ld->ring.nslots];
    s->state = NST_SLOT_FREE;
    ld->released++;
    release_empties(ld);
}

int nostall_loader_next(nostall_loader *ld, nostall_batch *out)
{
    return next_batch(ld, out, 0, "nostall_loader_next");
}

int nostall_loader_next_timed(nostall_loader *ld, nostall_batch *out, uint32_t timeout_ms)
{
    return next_batch(ld, out, (uint64_t)timeout_ms * 1000000 + 1, "nostall_loader_next_timed");
}

/* timeout_ns == 0: wait forever. */
static int next_batch(struct nostall_loader *ld, nostall_batch *out, uint64_t timeout_ns,
                      const char *fn)
{
    int rc = 0;
    uint64_t waited = 0, deadline = timeout_ns ? nst_now_ns() + timeout_ns - 1 : 0;

    nst_error_clear();
    if (!ld || !out) return nst_error(NOSTALL_E_INVALID, "%s: NULL argument", fn);
    if ((rc = forked(ld, fn)) < 0) return rc;
    pthread_mutex_lock(&ld->mu);
    for (;;) {
        if (ld->failed) {
            rc = nst_error_set(ld->failed, ld->failmsg);
            break;
        }
        if (ld->stopped) {
            rc = nst_error(NOSTALL_E_STOPPED, "%s: loader stopped", fn);
            break;
        }
        if (ld->epochs_limit && ld->cons_epoch >= ld->epochs_limit) {
            rc = NOSTALL_DONE;
            break;
        }
        if (batch_len(ld, ld->cons_pos) == 0) {
            ld->cons_epoch++;
            ld->cons_pos = 0;
            publish_cons(ld);
            rc = NOSTALL_EPOCH_END;
            break;
        }
        if (ld->lent == ld->ring.nslots) {
            rc = nst_error(NOSTALL_E_STATE, "%s: all %u batches of the ring are lent; release one",
                           fn, ld->ring.nslots);
            break;
        }
        nst_slot *s = &ld->ring.slots[ld->cons_seq % ld->ring.nslots];
        if (s->state == NST_SLOT_READY && s->seq == ld->cons_seq) {
            if (s->error) {
                ld->failed = s->error;
                snprintf(ld->failmsg, sizeof ld->failmsg, "%s: %s", fn, s->errmsg);
                pthread_cond_broadcast(&ld->ready);
                continue;
            }
            ld->cons_seq++;
            ld->cons_pos = s->position + s->count;
            publish_cons(ld);
            STAT_ADD(ld->dlv_storage_bytes, s->io_storage_bytes);
            STAT_ADD(ld->dlv_storage_reads, s->io_storage_reads);
            STAT_ADD(ld->dlv_cache_hits, s->io_cache_hits);
            STAT_ADD(ld->dlv_cache_misses, s->io_cache_misses);
            STAT_ADD(ld->dlv_peer_hits, s->io_peer_hits);
            STAT_ADD(ld->dlv_peer_bytes, s->io_peer_bytes);
            STAT_ADD(ld->dlv_http_transfers, s->io_http_transfers);
            STAT_ADD(ld->dlv_http_retries, s->io_http_retries);
            if (s->delivered == 0) { /* every item was bad and skipped */
                s->state = NST_SLOT_LENT; /* not counted in `lent` */
                release_empties(ld);
                continue;
            }
            s->state = NST_SLOT_LENT;
            ld->lent++;
            out->images = s->images;
            out->labels = s->labels;
            out->indices = s->indices;
            out->count = s->delivered;
            out->channels = 3;
            out->height = out->width = ld->crop;
            out->dtype = ld->output == NOSTALL_OUTPUT_FLOAT ? NOSTALL_DTYPE_FLOAT32
                                                             : NOSTALL_DTYPE_UINT8;
            out->layout = ld->output == NOSTALL_OUTPUT_FLOAT ? NOSTALL_LAYOUT_NCHW
                                                              : NOSTALL_LAYOUT_NHWC;
            out->item_bytes = ld->item_bytes;
            out->epoch = s->epoch;
            out->position = s->position;
            out->sequence = s->seq;
            STAT_ADD(ld->batches_delivered, 1);
            STAT_ADD(ld->items_delivered, s->delivered);
            rc = 0;
            break;
        }
        uint64_t t0 = nst_now_ns();
        if (deadline) {
            if (t0 >= deadline) {
                rc = NOSTALL_TIMEOUT;
                break;
            }
            uint64_t d = deadline;
            struct timespec ts = {(time_t)(d / 1000000000), (long)(d % 1000000000)};
            pthread_cond_timedwait(&ld->ready, &ld->mu, &ts);
        } else {
            pthread_cond_wait(&ld->ready, &ld->mu);
        }
        waited += nst_now_ns() - t0;
    }
    pthread_mutex_unlock(&ld->mu);
    if (waited) STAT_ADD(ld->wait_ns, waited);
    return rc;
}

int nostall_loader_release(nostall_loader *ld, const nostall_batch *b)
{
    static const char fn[] = "nostall_loader_release";
    int rc = 0;
    nst_error_clear();
    if (!ld || !b) return nst_error(NOSTALL_E_INVALID, "%s: NULL argument", fn);
    if ((rc = forked(ld, fn)) < 0) return rc;
    pthread_mutex_lock(&ld->mu);
    nst_slot *s = &ld->ring.slots[ld->released % ld->ring.nslots];
    if (ld->lent == 0 || s->state != NST_SLOT_LENT || b->sequence != ld->released ||
        b->images != s->images) {
        rc = nst_error(NOSTALL_E_INVALID,
                       "%s: not the oldest lent batch (batches are released in order)", fn);
    } else {
        ld->lent--;
        release_oldest(ld);
    }
    pthread_mutex_unlock(&ld->mu);
    return rc;
}

/* ------------------------------------------------------------------------
 * State.
 * ------------------------------------------------------------------------ */

int nostall_loader_get_state(const nostall_loader *ld, nostall_state *out)
{
    nst_error_clear();
    if (!ld || !out) return nst_error(NOSTALL_E_INVALID, "nostall_loader_get_state: NULL argument");
    int rc = forked(ld, "nostall_loader_get_state");
    if (rc < 0) return rc;
    out->epoch = atomic_load_explicit(&((nostall_loader *)ld)->cons_epoch_pub, memory_order_relaxed);
    out->position = atomic_load_explicit(&((nostall_loader *)ld)->cons_pos_pub, memory_order_relaxed);
    return 0;
}

int nostall_loader_set_state(nostall_loader *ld, const nostall_state *st)
{
    static const char fn[] = "nostall_loader_set_state";
    int rc = 0;
    nst_error_clear();
    if (!ld || !st) return nst_error(NOSTALL_E_INVALID, "%s: NULL argument", fn);
    if ((rc = forked(ld, fn)) < 0) return rc;
    if (st->position > ld->sampler.per_rank)
        return nst_error(NOSTALL_E_INVALID, "%s: position %llu is past the epoch's %llu items", fn,
                         (unsigned long long)st->position,
                         (unsigned long long)ld->sampler.per_rank);
    pthread_mutex_lock(&ld->mu);
    if (ld->lent) {
        rc = nst_error(NOSTALL_E_STATE, "%s: %u batch(es) still lent; release them first", fn,
                       ld->lent);
        goto out;
    }
    if (ld->stopped) {
        rc = nst_error(NOSTALL_E_STOPPED, "%s: loader stopped", fn);
        goto out;
    }
    ld->resetting = 1;
    ld->gen++;
    atomic_store_explicit(&ld->gen_pub, ld->gen, memory_order_relaxed);
    while (ld->inflight && !ld->stopped) pthread_cond_wait(&ld->idle, &ld->mu);
    if (ld->stopped) {
        ld->resetting = 0;
        rc = nst_error(NOSTALL_E_STOPPED, "%s: loader stopped", fn);
        goto out;
    }
    nst_ring_reset(&ld->ring);
    ld->prod_epoch = ld->cons_epoch = st->epoch;
    ld->prod_pos = ld->cons_pos = st->position;
    ld->prod_seq = ld->cons_seq = ld->released = 0;
    ld->prod_open = ld->prod_halted = 0;
    ld->failed = 0;
    publish_cons(ld);
    ld->resetting = 0;
    pthread_cond_broadcast(&ld->work);
out:
    pthread_mutex_unlock(&ld->mu);
    return rc;
}

/* ------------------------------------------------------------------------
 * Introspection.
 * ------------------------------------------------------------------------ */

int nostall_loader_info(const nostall_loader *ld, nostall_dataset_info *out)
{
    nst_error_clear();
    if (!ld || !out) return nst_error(NOSTALL_E_INVALID, "nostall_loader_info: NULL argument");
    memset(out, 0, sizeof *out);
    out->items = nst_index_count(ld->index);
    out->classes = nst_index_classes(ld->index);
    out->files_ignored = nst_index_ignored(ld->index);
    out->items_per_epoch = ld->items_per_epoch;
    out->batches_per_epoch = ld->batches_per_epoch;
    out->threads = ld->nthreads;
    out->ring_slots = ld->ring.nslots;
    out->batch_bytes = ld->item_bytes * ld->batch_size;
    return 0;
}

int nostall_loader_item(const nostall_loader *ld, uint64_t index, const char **path, int64_t *label)
{
    nst_error_clear();
    if (!ld) return nst_error(NOSTALL_E_INVALID, "nostall_loader_item: loader is NULL");
    if (index >= nst_index_count(ld->index))
        return nst_error(NOSTALL_E_INVALID, "nostall_loader_item: index %llu >= %llu items",
                         (unsigned long long)index,
                         (unsigned long long)nst_index_count(ld->index));
    if (path) *path = nst_index_path(ld->index, index);
    if (label) *label = nst_index_label(ld->index, index);
    return 0;
}

const char *nostall_loader_class_name(const nostall_loader *ld, uint64_t label)
{
    if (!ld) return NULL;
    return nst_index_class_name(ld->index, label);
}

int nostall_loader_stats(const nostall_loader *cld, nostall_stats *out, size_t size)
{
    nostall_loader *ld = (nostall_loader *)cld;
    nostall_stats s;
    nst_error_clear();
    if (!ld || !out) return nst_error(NOSTALL_E_INVALID, "nostall_loader_stats: NULL argument");
    memset(&s, 0, sizeof s);
    s.epoch = STAT_GET(ld->cons_epoch_pub);
    s.position = STAT_GET(ld->cons_pos_pub);
    s.batches_delivered = STAT_GET(ld->batches_delivered);
    s.items_delivered = STAT_GET(ld->items_delivered);
    s.consumer_wait_ns = STAT_GET(ld->wait_ns);
    for (uint32_t i = 0; i < ld->nthreads; i++) {
        worker_stats *w = &ld->workers[i].st;
        s.fetch_items += STAT_GET(w->fetch_items);
        s.fetch_bytes += STAT_GET(w->fetch_bytes);
        s.fetch_busy_ns += STAT_GET(w->fetch_ns);
        s.decode_items += STAT_GET(w->decode_items);
        s.decode_pixels += STAT_GET(w->decode_pixels);
        s.decode_busy_ns += STAT_GET(w->decode_ns);
        s.augment_items += STAT_GET(w->augment_items);
        s.augment_bytes += STAT_GET(w->augment_bytes);
        s.augment_busy_ns += STAT_GET(w->augment_ns);
        s.worker_idle_ns += STAT_GET(w->idle_ns);
        s.storage_wait_ns += STAT_GET(w->storage_wait_ns);
    }
    /* Storage and cache counts are those of the delivered batches' items,
     * so a snapshot at an epoch end covers exactly that epoch's items (work
     * already done for batches not yet delivered is counted when they are). */
    s.storage_reads = STAT_GET(ld->dlv_storage_reads);
    s.storage_bytes_read = STAT_GET(ld->dlv_storage_bytes);
    s.cache_hits = STAT_GET(ld->dlv_cache_hits);
    s.cache_misses = STAT_GET(ld->dlv_cache_misses);
    s.peer_hits = STAT_GET(ld->dlv_peer_hits);
    s.peer_bytes = STAT_GET(ld->dlv_peer_bytes);
    s.http_transfers = STAT_GET(ld->dlv_http_transfers);
    s.http_retries = STAT_GET(ld->dlv_http_retries);
    if (ld->cache) {
        nst_cache_stats cs;
        nst_cache_stats_get(ld->cache, &cs);
        s.cache_bytes = cs.bytes;
        s.cache_items = cs.items;
    }
    pthread_mutex_lock(&ld->mu);
    s.skipped = ld->skipped_total;
    s.skipped_unique = ld->nskips;
    pthread_mutex_unlock(&ld->mu);
    s.threads = ld->nthreads;
    memcpy(out, &s, size < sizeof s ? size : sizeof s);
    return 0;
}

static const char *const stat_names[] = {
#define NST_STAT_NAME_(name, help) #name,
    NOSTALL_STATS_TABLE(NST_STAT_NAME_)
#undef NST_STAT_NAME_
};
static const char *const stat_helps[] = {
#define NST_STAT_HELP_(name, help) help,
    NOSTALL_STATS_TABLE(NST_STAT_HELP_)
#undef NST_STAT_HELP_
};

int nostall_stats_count(void) { return (int)(sizeof stat_names / sizeof *stat_names); }

const char *nostall_stats_name(int i)
{
    return i >= 0 && i < nostall_stats_count() ? stat_names[i] : NULL;
}

const char *nostall_stats_help(int i)
{
    return i >= 0 && i < nostall_stats_count() ? stat_helps[i] : NULL;
}

uint64_t nostall_loader_skipped_count(const nostall_loader *cld)
{
    nostall_loader *ld = (nostall_loader *)cld;
    if (!ld) return 0;
    pthread_mutex_lock(&ld->mu);
    uint64_t n = ld->nskips;
    pthread_mutex_unlock(&ld->mu);
    return n;
}

int nostall_loader_skipped(const nostall_loader *cld, uint64_t i, nostall_skip_info *out)
{
    nostall_loader *ld = (nostall_loader *)cld;
    int rc = 0;
    nst_error_clear();
    if (!ld || !out) return nst_error(NOSTALL_E_INVALID, "nostall_loader_skipped: NULL argument");
    pthread_mutex_lock(&ld->mu);
    if (i >= ld->nskips) {
        rc = nst_error(NOSTALL_E_INVALID, "nostall_loader_skipped: %llu >= %llu skipped items",
                       (unsigned long long)i, (unsigned long long)ld->nskips);
    } else {
        const skip_entry *e = &ld->skips[i];
        free(ld->skip_reason);
        ld->skip_reason = strdup(e->msg ? e->msg : nostall_strerror(e->status));
        out->index = e->index;
        out->path = nst_index_path(ld->index, e->index);
        out->status = e->status;
        out->reason = ld->skip_reason ? ld->skip_reason : nostall_strerror(e->status);
    }
    pthread_mutex_unlock(&ld->mu);
    return rc;
}
