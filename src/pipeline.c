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
 *   Bounded: a batch is only opened in a free slot. Lent batches are
 *   released in any order (a batch the consumer keeps only takes its own
 *   slot out of use). Memory is planned at create: the ring arena (sized no
 *   larger than an epoch can fill, and checked against the memory the
 *   process may use), and per worker a decoder, an augmenter and a file
 *   buffer, each grow-only (they stop growing after the largest item seen).
 *
 *   Bad items: the item's status is recorded in the slot. Under `skip` the
 *   finished batch is compacted (bad items removed, order kept) and the skip
 *   is counted and listed; under `fail` no new batch is opened after the
 *   failing one, and the consumer receives the earlier batches and then the
 *   error of the first failing item of that batch (deterministic too). With
 *   drop_last, a batch short of skipped items is filled by the consumer from
 *   the last items of the batches after it in its epoch (fill_from_next), so
 *   every batch is full and the result is still a pure function of the
 *   seed.
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
#include <math.h>
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
#include "common/memlimit.h"
#include "common/rng.h"
#include "coord/group.h"
#include "decode/decode.h"
#include "echo/schedule.h"
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
    counter transcoded, transcode_ns; /* cache_transcode rewrites (fetch stage) */
    counter depth;                    /* io_depth in effect (auto: grows)      */
} worker_stats;

/* An item ticket taken by a worker: item j of the batch in slot s. */
typedef struct ticket {
    nst_slot *s;
    uint32_t j;
    uint64_t epoch, index, gen;
    /* fixed item echoing: which use of the item, where its data lives */
    uint32_t copy, store;
    uint8_t echo, produce;
    /* what this ticket added to its batch's echo counters, taken back if
     * the item turns out bad (counters say what happened to good items) */
    uint8_t last, dup;
    uint32_t uses;
    uint64_t distance;
    uint32_t apool; /* adaptive: pool entry reserved for a copy, or UINT32_MAX */
    nst_group_ticket gt; /* coordinated prep: the group's ticket          */
} ticket;

/* Echoed data of one item (fixed item echoing), in the echo store. State
 * and counts are guarded by mu; the data is written by the producing worker
 * before it sets READY and only read afterwards, until the entry is freed
 * (no ticket pending and the item's last use issued). */
enum { ES_EMPTY = 0, ES_PRODUCING, ES_READY, ES_FAILED };
typedef struct echo_slot {
    int state, status;
    uint32_t pending; /* tickets issued for this entry, not yet finished */
    int closed;       /* the item's last use of the epoch was issued     */
    nst_buf buf;      /* fetch: encoded bytes; decode: RGB pixels;
                         augment: the finished item                      */
    size_t len;
    nst_image img;    /* decode point: the decoded image (data in buf)   */
    char msg[NST_ERROR_MAX - 128];
} echo_slot;

enum { ECHO_OFF = 0, ECHO_ITEMS, ECHO_BATCHES, ECHO_ADAPTIVE };

/* Adaptive echoing's pool of finished items (copies of fresh items made by
 * the workers), from which the consumer assembles a batch of repeats when
 * no fresh batch is ready. Guarded by mu except the pixel copies, which
 * happen while an entry is WRITING (one worker) or has readers (consumer). */
enum { AP_FREE = 0, AP_WRITING, AP_READY };
typedef struct apool_entry {
    int state;
    uint32_t readers, uses;
    int64_t label;
    uint64_t index;
} apool_entry;

/* Sequence numbers of adaptive echo batches (not ring batches). */
#define ECHO_SEQ_FLAG (UINT64_C(1) << 63)
#define ECHO_SLOTS 2
enum { EP_FETCH = 0, EP_DECODE = 1, EP_AUGMENT = 2, EP_BATCH = 3 };

typedef struct worker {
    _Alignas(64) worker_stats st;
    struct nostall_loader *ld;
    pthread_t thread;
    int started;
    nst_fetcher *fetch;  /* the fetches in flight, oldest first         */
    ticket *tk;          /* their tickets, same FIFO order (cap entries) */
    uint32_t tk_head, tk_count;
    /* Tickets kept now (the FIFO's modulus, as in the fetcher) / room for
     * (io_depth=0: auto grows depth up to cap) / the depth decided, applied
     * once the FIFO does not wrap (depth_apply). */
    uint32_t depth, cap, want;
    /* io_depth=0: the current window of completed items (depth_adapt) */
    uint64_t win_wait_ns, win_busy_ns;
    uint32_t win_items, win_full;
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
    float lut[NST_NORM_LUT_SIZE];
    pid_t pid;
    nst_cache *cache;      /* NULL: no cache; thread-safe, lock-free reads */
    nst_throttle throttle; /* emulated storage (off unless configured)    */
    nst_fetch_env fenv;    /* what every worker's fetcher shares          */

    nst_group *group;      /* coordinated prep: the shared ring (or NULL) */

    /* Data echoing. */
    int echo, echo_point;  /* ECHO_*, EP_*                                */
    nst_echo_sched esched; /* fixed item echoing's order (mu)             */
    echo_slot *estore;     /* its data store, esched.store_cap entries    */
    pthread_cond_t echo_cv;/* an echo entry became ready (or stop/reset)  */
    uint64_t elen_epoch[4], elen_val[4]; /* memo of epoch lengths (mu)    */
    uint32_t elen_next;
    /* adaptive echoing (mu) */
    apool_entry *apool;
    uint8_t *apool_pixels;       /* napool * item_bytes                   */
    uint32_t napool, apool_next, echo_max;
    uint32_t *apick;             /* scratch for the consumer's draws      */
    uint8_t *eslot_images;       /* ECHO_SLOTS batches                    */
    int64_t *eslot_labels;
    uint64_t *eslot_indices;
    int eslot_lent[ECHO_SLOTS];
    uint64_t adraws;
    uint64_t cons_last_ns;       /* consumer: when next last returned     */
    counter consumer_busy_ns;

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
    nst_slot *prod_slot; /* the open batch's slot (prod_open)             */
    uint32_t open_taken; /* set_state: `taken` of the first batch opened  */
    /* consumer side (seq numbers only grow, also across set_state) */
    uint64_t cons_seq;   /* next seq to lend                              */
    uint64_t cons_epoch, cons_pos;
    uint32_t cons_taken; /* drop_last fill: `taken` of the batch at cons_pos */
    uint32_t lent;       /* batches lent now (ring and adaptive echo)     */
    int fill;            /* drop_last with skip: fill short batches       */
    uint64_t fingerprint;/* of the item list and byte options (0: not yet) */
    int failed;          /* sticky failure status for the consumer        */
    char failmsg[NST_ERROR_MAX];
    /* skip table: distinct bad items, sorted by index */
    skip_entry *skips;
    uint64_t nskips, skips_cap, skipped_total;
    char *skip_reason; /* copy handed out by nostall_loader_skipped      */

    atomic_int stop_flag;
    counter gen_pub;     /* gen, readable without mu                      */
    counter batches_delivered, items_delivered, wait_ns;
    counter dlv[NST_IO_COUNT_]; /* nst_slot_io of delivered batches         */
    counter cons_epoch_pub, cons_pos_pub, cons_taken_pub;

    worker *workers;
};

/* ------------------------------------------------------------------------
 * Epoch arithmetic, shared by producer and consumer so both walk the same
 * batch stream.
 * ------------------------------------------------------------------------ */

/* Deliveries in `epoch`: the shard, or with fixed item echoing the sum of
 * the items' uses (memoized: O(shard) for a fractional factor). mu held. */
static uint64_t epoch_len(struct nostall_loader *ld, uint64_t epoch)
{
    if (ld->echo != ECHO_ITEMS) return nst_sampler_len(&ld->sampler, epoch);
    for (int i = 0; i < 4; i++)
        if (ld->elen_val[i] && ld->elen_epoch[i] == epoch) return ld->elen_val[i];
    uint64_t n = nst_echo_epoch_len(&ld->esched, epoch);
    ld->elen_epoch[ld->elen_next] = epoch;
    ld->elen_val[ld->elen_next] = n;
    ld->elen_next = (ld->elen_next + 1) % 4;
    return n;
}

static uint32_t batch_uses(const struct nostall_loader *ld, uint64_t epoch, uint64_t position);

/* Items in the batch starting at `pos` of `epoch`; 0 when the epoch is over. */
static uint32_t batch_len(struct nostall_loader *ld, uint64_t epoch, uint64_t pos)
{
    uint64_t per = epoch_len(ld, epoch);
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
/* The crop window and flip of use `copy` of an item of width x height. */
static void plan_item(const struct nostall_loader *ld, uint64_t epoch, uint64_t index,
                      uint32_t copy, uint32_t width, uint32_t height, nst_window *win, int *flip)
{
    const nst_optval *v = ld->cfg.v;
    *flip = 0;
    if (ld->mode != NOSTALL_MODE_TRAIN) {
        nst_crop_center(width, height, ld->resize, ld->crop, win);
        return;
    }
    nst_rng rng;
    nst_rng_seed(&rng, nst_hash4(v[NOSTALL_OPT_SEED].u, epoch, index, NST_RNG_AUGMENT_COPY(copy)));
    nst_crop_random_resized(width, height, v[NOSTALL_OPT_SCALE_MIN].d, v[NOSTALL_OPT_SCALE_MAX].d,
                            v[NOSTALL_OPT_RATIO_MIN].d, v[NOSTALL_OPT_RATIO_MAX].d, &rng, win);
    *flip = nst_rng_double(&rng) < v[NOSTALL_OPT_FLIP_PROB].d;
}

/* Resample `win` of a decoded image into the item's place in the slot. */
static int augment_item(worker *w, const nst_image *img, const nst_window *win, int flip,
                        uint8_t *dst)
{
    struct nostall_loader *ld = w->ld;
    nst_output out = {
        .kind = ld->output == NOSTALL_OUTPUT_FLOAT ? NST_OUT_FLOAT_NCHW : NST_OUT_UINT8_NHWC,
        .size = ld->crop,
        .dst = dst,
        .lut = ld->lut,
    };
    uint64_t t0 = nst_now_ns();
    int rc = nst_augment(w->aug, img, win, flip, &out);
    STAT_ADD(w->st.augment_ns, nst_now_ns() - t0);
    if (rc < 0) return rc;
    STAT_ADD(w->st.augment_items, 1);
    STAT_ADD(w->st.augment_bytes, ld->item_bytes);
    return 0;
}

/* Decode (only the region it needs) and augment use `copy` of a fetched
 * item into its place in the slot. */
static int process_item(worker *w, uint64_t epoch, uint64_t index, uint32_t copy,
                        const char *path, const uint8_t *data, size_t len, uint8_t *dst)
{
    struct nostall_loader *ld = w->ld;
    nst_image_info info;
    nst_window win;
    nst_image img;
    int flip, rc;
    uint64_t t1 = nst_now_ns();

    rc = nst_decode_probe(w->dec, data, len, path, &info);
    if (rc == 0) {
        plan_item(ld, epoch, index, copy, info.width, info.height, &win, &flip);
        rc = nst_decode(w->dec, data, len, path, &win, ld->crop, ld->crop, &img);
    }
    STAT_ADD(w->st.decode_ns, nst_now_ns() - t1);
    if (rc < 0) return rc;
    STAT_ADD(w->st.decode_items, 1);
    STAT_ADD(w->st.decode_pixels, (uint64_t)img.width * img.height);
    return augment_item(w, &img, &win, flip, dst);
}

/* Echo point `decode`: decode the whole image into the echo entry, so each
 * use can crop it differently. */
static int decode_full(worker *w, const char *path, const uint8_t *data, size_t len,
                       echo_slot *es)
{
    nst_image_info info;
    nst_image img;
    uint64_t t1 = nst_now_ns();
    int rc = nst_decode_probe(w->dec, data, len, path, &info);
    if (rc == 0) rc = nst_decode(w->dec, data, len, path, NULL, 0, 0, &img);
    size_t row = 0, bytes = 0;
    if (rc == 0 && (nst_mul_overflow(img.width, 3, &row) || nst_mul_overflow(row, img.height, &bytes)))
        rc = nst_error(NOSTALL_E_TOO_MANY_PIXELS, "decode: %s: image too large to echo", path);
    if (rc == 0) rc = nst_buf_reserve(&es->buf, bytes ? bytes : 1);
    if (rc == 0) {
        for (uint32_t y = 0; y < img.height; y++)
            memcpy(es->buf.data + (size_t)y * row, img.data + (size_t)y * img.stride, row);
        es->img = img;
        es->img.data = es->buf.data;
        es->img.stride = row;
        es->len = bytes;
        STAT_ADD(w->st.decode_items, 1);
        STAT_ADD(w->st.decode_pixels, (uint64_t)img.width * img.height);
    }
    STAT_ADD(w->st.decode_ns, nst_now_ns() - t1);
    return rc;
}

/* Publish an echo entry's outcome to the tickets waiting for it. */
static void echo_publish(struct nostall_loader *ld, echo_slot *es, int rc, const char *msg)
{
    pthread_mutex_lock(&ld->mu);
    es->state = rc < 0 ? ES_FAILED : ES_READY;
    es->status = rc;
    if (rc < 0) snprintf(es->msg, sizeof es->msg, "%s", msg);
    pthread_cond_broadcast(&ld->echo_cv);
    pthread_mutex_unlock(&ld->mu);
}

static void last_error_into(char *msg, size_t n, int rc)
{
    const char *detail = nostall_last_error();
    snprintf(msg, n, "%s", detail && *detail ? detail : nostall_strerror(rc));
}

/* One ticket of fixed item echoing. The producing use makes the entry's
 * data (point fetch: the bytes; decode: the decoded image; augment: the
 * finished item) and then its own item; the other uses wait for the entry
 * (always produced by an earlier ticket, so the wait ends) and make their
 * item from it. */
static int echo_item(worker *w, const ticket *t, const nst_fetch_req *r, uint8_t *dst,
                     char *msg, size_t msgn)
{
    struct nostall_loader *ld = w->ld;
    echo_slot *es = &ld->estore[t->store];
    const char *path = nst_index_path(ld->index, t->index);
    int rc;

    if (t->produce) {
        if (r->status < 0) {
            snprintf(msg, msgn, "%s", r->msg);
            echo_publish(ld, es, r->status, msg);
            return r->status;
        }
        STAT_ADD(w->st.fetch_items, 1);
        STAT_ADD(w->st.fetch_bytes, r->len);
        switch (ld->echo_point) {
        case EP_FETCH:
            rc = nst_buf_reserve(&es->buf, r->len);
            if (rc == 0) {
                memcpy(es->buf.data, r->data, r->len);
                es->len = r->len;
            } else {
                last_error_into(msg, msgn, rc);
            }
            echo_publish(ld, es, rc, msg);
            if (rc < 0) return rc;
            rc = process_item(w, t->epoch, t->index, t->copy, path, r->data, r->len, dst);
            break;
        case EP_DECODE:
            rc = decode_full(w, path, r->data, r->len, es);
            if (rc < 0) last_error_into(msg, msgn, rc);
            echo_publish(ld, es, rc, msg);
            if (rc < 0) return rc;
            {
                nst_window win;
                int flip;
                plan_item(ld, t->epoch, t->index, t->copy, es->img.src_width, es->img.src_height,
                          &win, &flip);
                rc = augment_item(w, &es->img, &win, flip, dst);
            }
            break;
        default: /* EP_AUGMENT */
            rc = process_item(w, t->epoch, t->index, 0, path, r->data, r->len, dst);
            if (rc == 0) rc = nst_buf_reserve(&es->buf, ld->item_bytes);
            if (rc == 0) memcpy(es->buf.data, dst, ld->item_bytes);
            if (rc < 0) last_error_into(msg, msgn, rc);
            echo_publish(ld, es, rc, msg);
            return rc;
        }
        if (rc < 0) last_error_into(msg, msgn, rc);
        return rc;
    }

    pthread_mutex_lock(&ld->mu);
    while (es->state == ES_PRODUCING && !ld->stopped && t->gen == ld->gen)
        pthread_cond_wait(&ld->echo_cv, &ld->mu);
    int state = es->state, status = es->status;
    pthread_mutex_unlock(&ld->mu);
    if (state == ES_FAILED) {
        snprintf(msg, msgn, "%s", es->msg);
        return status;
    }
    if (state != ES_READY) { /* stopped or reset: the ticket is discarded */
        snprintf(msg, msgn, "loader stopped");
        return NOSTALL_E_STOPPED;
    }
    switch (ld->echo_point) {
    case EP_FETCH:
        rc = process_item(w, t->epoch, t->index, t->copy, path, es->buf.data, es->len, dst);
        break;
    case EP_DECODE: {
        nst_window win;
        int flip;
        plan_item(ld, t->epoch, t->index, t->copy, es->img.src_width, es->img.src_height, &win,
                  &flip);
        rc = augment_item(w, &es->img, &win, flip, dst);
        break;
    }
    default:
        memcpy(dst, es->buf.data, ld->item_bytes);
        rc = 0;
    }
    if (rc < 0) last_error_into(msg, msgn, rc);
    return rc;
}

/* ------------------------------------------------------------------------
 * Workers.
 * ------------------------------------------------------------------------ */

/* Free an echo entry once nothing uses it any more (mu held). */
static void echo_entry_maybe_free(struct nostall_loader *ld, uint32_t id)
{
    echo_slot *es = &ld->estore[id];
    if (es->pending || !es->closed) return;
    es->state = ES_EMPTY;
    es->closed = 0;
    nst_echo_store_free(&ld->esched, id);
}

/* Start the echo order of `epoch` at delivery `dpos` (mu held). Items of the
 * previous epoch whose remaining uses will never be issued (drop_last cut
 * them) are closed, so their entries are freed when their tickets finish. */
static void echo_epoch_start(struct nostall_loader *ld, uint64_t epoch, uint64_t dpos)
{
    nst_echo_sched *es = &ld->esched;
    for (uint32_t i = 0; i < es->n; i++) {
        uint32_t id = es->pool[i].store;
        if (id == NST_ECHO_NO_STORE) continue;
        ld->estore[id].closed = 1;
        echo_entry_maybe_free(ld, id);
    }
    nst_echo_sched_start(es, epoch, dpos);
}

/* The fetch stage's rewrite hook with cache_transcode: JPEGs go into the
 * MinIO cache with restart markers (decode/jpeg_transcode.c), using the
 * worker's own decoder, which is idle while its worker fetches. */
static int rewrite_jpeg(void *ctx, const uint8_t *in, size_t len, nst_buf *out,
                        size_t *out_len)
{
    return nst_decode_transcode((nst_decoder *)ctx, in, len, out, out_len);
}

/* Batch accounting (nst_slot_io counters): `n` items used `uses` times each
 * in their epoch (the echo histogram). */
static void io_add_uses(uint64_t *v, uint32_t uses, uint64_t n)
{
    v[uses <= 4 ? NST_IO_uses_1 + uses - 1 : uses <= 8 ? NST_IO_uses_5_8 : NST_IO_uses_9_up] += n;
}

/* ... and where one item's bytes came from. */
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

/* Open the next batch at the producer cursor if its slot is free (mu held).
 * Returns 1 if a batch is open, 0 if the worker must wait. */
static int open_batch(struct nostall_loader *ld)
{
    if (ld->prod_open) return 1;
    if (ld->prod_halted) return 0;
    for (;;) {
        if (ld->epochs_limit && ld->prod_epoch >= ld->epochs_limit) return 0;
        if (batch_len(ld, ld->prod_epoch, ld->prod_pos) > 0) break;
        ld->prod_epoch++;
        ld->prod_pos = 0;
        if (ld->echo == ECHO_ITEMS) echo_epoch_start(ld, ld->prod_epoch, 0);
    }
    nst_slot *s = nst_ring_free_slot(&ld->ring);
    if (!s) return 0; /* ring full */
    ld->prod_slot = s;
    s->state = NST_SLOT_FILLING;
    s->seq = ld->prod_seq;
    s->epoch = ld->prod_epoch;
    s->position = ld->prod_pos;
    s->count = batch_len(ld, ld->prod_epoch, ld->prod_pos);
    s->assigned = s->done = s->failed = s->delivered = 0;
    memset(&s->io, 0, sizeof s->io);
    s->lends_left = s->lends_out = 0;
    s->taken = ld->open_taken;
    ld->open_taken = 0;
    s->skip_after = s->next_taken = 0;
    s->error = 0;
    s->errmsg[0] = '\0';
    ld->prod_open = 1;
    return 1;
}

/* Take the next item ticket of the open batch into the worker's FIFO
 * (mu held, a batch is open). 0 if none can be taken now (echo store full:
 * wait for a ticket to finish). */
static int take_ticket(struct nostall_loader *ld, worker *w)
{
    nst_slot *s = ld->prod_slot;
    ticket *t = &w->tk[(w->tk_head + w->tk_count) % w->depth];
    t->echo = t->produce = t->last = t->dup = 0;
    t->copy = 0;
    t->uses = 1;
    t->distance = 0;
    t->store = NST_ECHO_NO_STORE;
    if (ld->echo == ECHO_ITEMS) {
        nst_echo_use u;
        if (nst_echo_sched_next(&ld->esched, ld->prod_seq, &u) != 1) return 0;
        t->echo = 1;
        t->copy = u.copy;
        t->store = u.store;
        t->produce = u.produce;
        t->index = u.index;
        echo_slot *es = &ld->estore[u.store];
        es->pending++;
        if (u.produce) {
            es->state = ES_PRODUCING;
            es->closed = 0;
        }
        if (u.last) {
            es->closed = 1;
            io_add_uses(s->io.v, u.uses, 1);
        }
        if (u.copy) {
            s->io.echoed++;
            s->io.distance += u.distance;
        } else {
            s->io.fresh++;
        }
        s->io.dups += u.dup;
        t->last = u.last;
        t->dup = u.dup;
        t->uses = u.uses;
        t->distance = u.distance;
    } else {
        s->io.fresh++;
        if (ld->echo != ECHO_BATCHES) io_add_uses(s->io.v, 1, 1); /* else counted at lend */
    }
    t->apool = UINT32_MAX;
    if (ld->echo == ECHO_ADAPTIVE) {
        apool_entry *a = &ld->apool[ld->apool_next];
        if (a->readers == 0 && a->state != AP_WRITING) {
            a->state = AP_WRITING;
            t->apool = ld->apool_next;
        }
        ld->apool_next = (ld->apool_next + 1) % ld->napool;
    }
    t->s = s;
    t->j = s->assigned++;
    t->epoch = s->epoch;
    if (!t->echo) t->index = s->position + t->j; /* the position, mapped later */
    t->gen = ld->gen;
    if (s->assigned == s->count) {
        ld->prod_open = 0;
        ld->prod_pos += s->count;
        ld->prod_seq++;
    }
    ld->inflight++;
    w->tk_count++;
    return 1;
}

/* A bad item is not delivered: take back what its ticket added to the echo
 * counters (fresh or echoed, the uses histogram, duplicates, distance), so
 * fresh_items and the achieved factor speak of good items only (mu held). */
static void io_untake(struct nostall_loader *ld, nst_slot *s, const ticket *t)
{
    uint64_t undo[NST_IO_COUNT_] = {0};
    if (t->echo && t->copy) {
        undo[NST_IO_echoed] = 1;
        undo[NST_IO_distance] = t->distance;
    } else {
        undo[NST_IO_fresh] = 1;
    }
    if (t->echo ? t->last : ld->echo != ECHO_BATCHES) io_add_uses(undo, t->uses, 1);
    undo[NST_IO_dups] = t->dup;
    for (int i = 0; i < NST_IO_COUNT_; i++) s->io.v[i] -= undo[i];
}

/* Record a finished item in its slot (mu held). */
static void finish_item(struct nostall_loader *ld, const ticket *t, int rc, const char *msg,
                        const nst_fetch_io *io)
{
    nst_slot *s = t->s;
    uint32_t j = t->j;
    if (t->echo) {
        ld->estore[t->store].pending--;
        echo_entry_maybe_free(ld, t->store);
    }
    if (t->apool != UINT32_MAX) {
        apool_entry *a = &ld->apool[t->apool];
        a->state = rc < 0 ? AP_FREE : AP_READY;
        a->uses = 1;
        a->label = t->s->labels[t->j];
        a->index = t->index;
    }
    s->item_status[j] = rc < 0 ? rc : 0;
    io_add_fetch(s->io.v, io);
    if (rc < 0) {
        io_untake(ld, s, t);
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

/* io_depth=0 (auto): a worker starts with IO_DEPTH_AUTO_START tickets and,
 * after each window of IO_DEPTH_AUTO_WINDOW completed items in which its
 * FIFO was full for at least half the items and it waited for storage more
 * than 1/20 of the time, doubles them, up to its cap. Never shrinks: the
 * cost of a deeper FIFO is buffers (one item each, only for the depth
 * reached), and slow storage rarely speeds up. */
enum { IO_DEPTH_AUTO_START = 4, IO_DEPTH_AUTO_WINDOW = 16 };

/* Called with the oldest item completed, before it is released. */
static void depth_adapt(worker *w, uint64_t wait_ns, uint64_t busy_ns, int full)
{
    if (w->want >= w->cap) return;
    w->win_wait_ns += wait_ns;
    w->win_busy_ns += busy_ns;
    w->win_full += full;
    if (++w->win_items < IO_DEPTH_AUTO_WINDOW) return;
    if (2 * w->win_full >= w->win_items &&
        20 * w->win_wait_ns > w->win_wait_ns + w->win_busy_ns)
        w->want = 2 * w->want < w->cap ? 2 * w->want : w->cap;
    w->win_wait_ns = w->win_busy_ns = 0;
    w->win_items = w->win_full = 0;
}

/* After a release: grow the ticket FIFO and the fetcher's together (they
 * hold the same items in the same positions) once their pending entries
 * do not wrap around the current size, so every position keeps its slot. */
static void depth_apply(worker *w)
{
    if (w->want <= w->depth || w->tk_head + w->tk_count > w->depth) return;
    if (!nst_fetcher_grow(w->fetch, w->want)) return; /* cannot differ; stay in step */
    w->depth = w->want;
    atomic_store_explicit(&w->st.depth, w->depth, memory_order_relaxed);
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
        while (w->tk_count < w->depth && !ld->resetting && open_batch(ld) && take_ticket(ld, w)) {
        }
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
            if (!t->echo) t->index = nst_sampler_item(&ld->sampler, t->epoch, t->index);
            uint64_t index = t->index;
            t->s->indices[t->j] = index;
            t->s->labels[t->j] = nst_index_label(ld->index, index);
            if (t->echo && !t->produce) nst_fetch_submit_none(w->fetch, index);
            else nst_fetch_submit(w->fetch, index, nst_index_path(ld->index, index));
        }
        /* Complete the oldest. */
        const int full = w->tk_count >= w->depth;
        nst_fetch_req *r = nst_fetch_next(w->fetch);
        const uint64_t tb = nst_now_ns();
        STAT_ADD(w->st.fetch_ns, tb - t0);
        if (!r) { /* stopped while waiting */
            pthread_mutex_lock(&ld->mu);
            break;
        }
        ticket t = w->tk[w->tk_head];
        nst_fetch_io io = r->io;
        int rc = 0;
        STAT_ADD(w->st.storage_wait_ns, r->wait_ns);
        STAT_ADD(w->st.transcoded, r->io.rewritten);
        STAT_ADD(w->st.transcode_ns, r->io.rewrite_ns);
        if (io.storage_read) {
            STAT_ADD(w->st.storage_reads, 1);
            STAT_ADD(w->st.storage_bytes, io.storage_bytes);
        }
        STAT_ADD(w->st.cache_hits, io.cache_hit);
        STAT_ADD(w->st.cache_misses, io.cache_miss);
        uint8_t *dst = t.s->images + (size_t)t.j * ld->item_bytes;
        if (t.gen != STAT_GET(ld->gen_pub)) {
            rc = 0; /* set_state discarded this batch: do not decode */
        } else if (t.echo) {
            rc = echo_item(w, &t, r, dst, msg, sizeof msg);
        } else if (r->status < 0) {
            rc = r->status;
            snprintf(msg, sizeof msg, "%s", r->msg);
        } else {
            STAT_ADD(w->st.fetch_items, 1);
            STAT_ADD(w->st.fetch_bytes, r->len);
            rc = process_item(w, t.epoch, t.index, 0, r->path, r->data, r->len, dst);
            if (rc < 0) last_error_into(msg, sizeof msg, rc);
        }
        if (t.apool != UINT32_MAX && rc == 0)
            memcpy(ld->apool_pixels + (size_t)t.apool * ld->item_bytes, dst, ld->item_bytes);
        depth_adapt(w, r->wait_ns, nst_now_ns() - tb, full);
        nst_fetch_release(w->fetch);
        w->tk_head = (w->tk_head + 1) % w->depth;
        w->tk_count--;
        depth_apply(w);

        pthread_mutex_lock(&ld->mu);
        ld->inflight--;
        if (t.gen != ld->gen) { /* set_state discarded this batch */
            if (t.apool != UINT32_MAX) ld->apool[t.apool].state = AP_FREE;
            pthread_cond_broadcast(&ld->idle);
            continue;
        }
        finish_item(ld, &t, rc, msg, &io);
    }
    pthread_mutex_unlock(&ld->mu);
    return NULL;
}

/* Coordinated prep: the same loop over the group's tickets (src/coord):
 * any thread of any member of the group takes the next item of the shared
 * ring, in delivery order; the item is written straight into the shared
 * slot. Fetches stay in flight as above. */
_Static_assert(NST_IO_COUNT_ <= NST_GROUP_IO_MAX, "batch accounting must fit the group's io[]");

static void *coord_worker_main(void *arg)
{
    worker *w = arg;
    struct nostall_loader *ld = w->ld;
    char msg[NST_ERROR_MAX - 128];
    int end = 0;

    while (!atomic_load(&ld->stop_flag)) {
        uint32_t first = w->tk_count;
        while (!end && w->tk_count < w->depth) {
            ticket *t = &w->tk[(w->tk_head + w->tk_count) % w->depth];
            uint64_t t0 = nst_now_ns();
            int rc = nst_group_take(ld->group, &t->gt, w->tk_count ? 0 : 100);
            if (rc == 0) {
                w->tk_count++;
                continue;
            }
            if (!w->tk_count) STAT_ADD(w->st.idle_ns, nst_now_ns() - t0);
            if (rc != NOSTALL_TIMEOUT) end = 1; /* DONE, stopped, or the group broke */
            break;
        }
        if (w->tk_count == 0) {
            if (end) break;
            continue;
        }
        uint64_t t0 = nst_now_ns();
        for (uint32_t k = first; k < w->tk_count; k++) {
            ticket *t = &w->tk[(w->tk_head + k) % w->depth];
            t->index = nst_sampler_item(&ld->sampler, t->gt.epoch, t->gt.position);
            *t->gt.index = t->index;
            *t->gt.label = nst_index_label(ld->index, t->index);
            nst_fetch_submit(w->fetch, t->index, nst_index_path(ld->index, t->index));
        }
        const int full = w->tk_count >= w->depth;
        nst_fetch_req *r = nst_fetch_next(w->fetch);
        const uint64_t tb = nst_now_ns();
        STAT_ADD(w->st.fetch_ns, tb - t0);
        if (!r) break; /* stopped */
        ticket *t = &w->tk[w->tk_head];
        int rc;
        STAT_ADD(w->st.storage_wait_ns, r->wait_ns);
        STAT_ADD(w->st.transcoded, r->io.rewritten);
        STAT_ADD(w->st.transcode_ns, r->io.rewrite_ns);
        if (r->io.storage_read) {
            STAT_ADD(w->st.storage_reads, 1);
            STAT_ADD(w->st.storage_bytes, r->io.storage_bytes);
        }
        STAT_ADD(w->st.cache_hits, r->io.cache_hit);
        STAT_ADD(w->st.cache_misses, r->io.cache_miss);
        if (r->status < 0) {
            rc = r->status;
            snprintf(msg, sizeof msg, "%s", r->msg);
        } else {
            STAT_ADD(w->st.fetch_items, 1);
            STAT_ADD(w->st.fetch_bytes, r->len);
            rc = process_item(w, t->gt.epoch, t->index, 0, r->path, r->data, r->len, t->gt.image);
            if (rc < 0) last_error_into(msg, sizeof msg, rc);
        }
        io_add_fetch(t->gt.io, &r->io); /* the group sums these per batch */
        if (rc == 0) { /* a bad item is not delivered: not fresh, not used */
            t->gt.io[NST_IO_fresh]++;
            io_add_uses(t->gt.io, 1, 1);
        }
        nst_group_done(ld->group, &t->gt, rc, rc < 0 ? msg : "");
        depth_adapt(w, r->wait_ns, nst_now_ns() - tb, full);
        nst_fetch_release(w->fetch);
        w->tk_head = (w->tk_head + 1) % w->depth;
        w->tk_count--;
        depth_apply(w);
    }
    /* Tickets still held go back to the group when this member leaves. */
    return NULL;
}

/* Join the group named by `coordinate`: the fingerprint is every option
 * that changes the delivered bytes or the batch plan, as text, plus the
 * dataset (real path and size). */
static int coord_join(struct nostall_loader *ld, const char *fn)
{
    static const char *const names[] = {
        "seed", "shuffle", "drop_last", "rank", "world_size", "batch_size", "epochs",
        "coordinate_lead", "mode", "crop", "resize", "scale_min", "scale_max", "ratio_min",
        "ratio_max", "flip_prob", "output", "mean", "std", "on_bad_item", "max_pixels",
        "max_file_bytes"};
    enum { NFP = sizeof names / sizeof *names + 2 };
    char vals[NFP][128], real[4096], count[32];
    nst_group_opt fp[NFP];
    uint32_t n = 0;
    if (!realpath(ld->source, real)) snprintf(real, sizeof real, "%s", ld->source);
    snprintf(count, sizeof count, "%llu", (unsigned long long)nst_index_count(ld->index));
    fp[n++] = (nst_group_opt){"source", real};
    fp[n++] = (nst_group_opt){"dataset_items", count};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++, n++) {
        nostall_config_get(&ld->cfg, names[i], vals[n], sizeof vals[n]);
        fp[n] = (nst_group_opt){names[i], vals[n]};
    }
    const nst_optval *v = ld->cfg.v;
    uint32_t lead = (uint32_t)v[NOSTALL_OPT_COORDINATE_LEAD].u;
    nst_group_params p = {
        .name = v[NOSTALL_OPT_COORDINATE].s,
        .fp = fp,
        .nfp = n,
        .items_per_epoch = ld->sampler.per_rank,
        .batch_size = ld->batch_size,
        .drop_last = ld->drop_last,
        .epochs = ld->epochs_limit,
        .nslots = lead,
        .item_bytes = ld->item_bytes,
        .max_lead = lead,
        .fail_on_bad = ld->on_bad == NOSTALL_BAD_FAIL,
    };
    int rc = nst_group_join(&ld->group, &p);
    if (rc < 0) {
        char keep[NST_ERROR_MAX];
        snprintf(keep, sizeof keep, "%s: coordinate='%s': %s", fn, p.name, nostall_last_error());
        return nst_error_set(rc, keep);
    }
    return 0;
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
    if (v[NOSTALL_OPT_CACHE_TRANSCODE].u &&
        (v[NOSTALL_OPT_CACHE].u != 0 || !v[NOSTALL_OPT_CACHE_BYTES].u))
        return nst_error(NOSTALL_E_OPTION,
                         "%s: cache_transcode=1 rewrites what the MinIO cache keeps, but there "
                         "is no cache: set cache=minio and cache_bytes > 0", fn);
    if (v[NOSTALL_OPT_COORDINATE].s[0] &&
        (v[NOSTALL_OPT_ECHO].u == 1 || v[NOSTALL_OPT_ECHO_FACTOR].d > 1.0))
        return nst_error(NOSTALL_E_OPTION,
                         "%s: coordinate='%s' cannot be combined with data echoing (echo_factor "
                         "%g, echo %s)",
                         fn, v[NOSTALL_OPT_COORDINATE].s, v[NOSTALL_OPT_ECHO_FACTOR].d,
                         v[NOSTALL_OPT_ECHO].u == 1 ? "adaptive" : "fixed");
    if (v[NOSTALL_OPT_MODE].u == NOSTALL_MODE_EVAL && v[NOSTALL_OPT_RESIZE].u &&
        v[NOSTALL_OPT_RESIZE].u < v[NOSTALL_OPT_CROP].u)
        return nst_error(NOSTALL_E_OPTION, "%s: resize (%llu) must be >= crop (%llu) or 0", fn,
                         (unsigned long long)v[NOSTALL_OPT_RESIZE].u,
                         (unsigned long long)v[NOSTALL_OPT_CROP].u);
    return 0;
}

/* "1.5 GB" */
static const char *human_bytes(uint64_t n, char *buf, size_t len)
{
    if (n >= 1000000000ULL) snprintf(buf, len, "%.1f GB", (double)n / 1e9);
    else if (n >= 1000000ULL) snprintf(buf, len, "%.1f MB", (double)n / 1e6);
    else snprintf(buf, len, "%llu bytes", (unsigned long long)n);
    return buf;
}

/*
 * The batch ring, planned no larger than an epoch can fill: a slot holds at
 * most the items one batch can have (batch_size, or an epoch's deliveries if
 * fewer) and there are at most batches_ahead + 1 slots, or one more than an
 * epoch has batches. What the ring, the adaptive echo pool and the MinIO
 * cache would take is checked against the memory this process may use (the
 * cgroup's limit, not only RAM) before anything is allocated: a plan that
 * cannot fit is refused with the figures, not found out by the OOM killer.
 */
static int plan_ring(struct nostall_loader *ld, const char *fn)
{
    const nst_optval *v = ld->cfg.v;
    uint64_t per = ld->sampler.per_rank, most = per;
    if (ld->echo == ECHO_ITEMS) most = per * (uint64_t)ceil(v[NOSTALL_OPT_ECHO_FACTOR].d);
    uint32_t items = most < ld->batch_size ? (uint32_t)most : ld->batch_size;
    uint64_t batches = (most + ld->batch_size - 1) / ld->batch_size;
    uint64_t nslots = v[NOSTALL_OPT_BATCHES_AHEAD].u + 1;
    if (nslots > batches + 1) nslots = batches + 1;
    if (nslots < 2) nslots = 2;

    size_t per_slot = 0;
    uint64_t ring = 0, echo = 0, cache = v[NOSTALL_OPT_CACHE].u == 0 ? v[NOSTALL_OPT_CACHE_BYTES].u : 0;
    if (nst_mul_overflow(ld->item_bytes + 32, items, &per_slot) || per_slot > (SIZE_MAX >> 8))
        ring = UINT64_MAX;
    else
        ring = (uint64_t)per_slot * nslots;
    if (ld->echo == ECHO_ADAPTIVE) /* pool + echo slots */
        echo = (uint64_t)ld->item_bytes * (v[NOSTALL_OPT_ECHO_BUFFER].u + ECHO_SLOTS * ld->batch_size);
    nst_memlimit m;
    char a[32], b[32], c[32];
    if (nst_memlimit_get(&m) == 0) {
        if (ring > m.available || echo > m.available - (ring < m.available ? ring : 0))
            return nst_error(NOSTALL_E_NOMEM,
                             "%s: the batch ring needs %s (%llu slots x %u items x %zu bytes)%s%s, "
                             "but only %s of memory is available (%s limit %s); lower "
                             "batch_size, crop or batches_ahead",
                             fn, human_bytes(ring, a, sizeof a), (unsigned long long)nslots, items,
                             ld->item_bytes, echo ? " plus the adaptive echo pool's " : "",
                             echo ? human_bytes(echo, b, sizeof b) : "",
                             human_bytes(m.available, c, sizeof c), m.source,
                             human_bytes(m.limit, b, sizeof b));
        if (cache && cache + ring + echo > m.limit)
            return nst_error(NOSTALL_E_NOMEM,
                             "%s: cache_bytes %s plus the batch ring's %s exceed the memory this "
                             "process may use, %s (%s); lower cache_bytes (e.g. '25%%')",
                             fn, human_bytes(cache, a, sizeof a),
                             human_bytes(ring + echo, b, sizeof b),
                             human_bytes(m.limit, c, sizeof c), m.source);
    }
    return nst_ring_create(&ld->ring, (uint32_t)nslots, items, ld->item_bytes);
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
    pthread_cond_init(&ld->echo_cv, NULL);

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
    if (v[NOSTALL_OPT_ECHO].u == 1) {
        ld->echo = ECHO_ADAPTIVE;
    } else if (v[NOSTALL_OPT_ECHO_FACTOR].d > 1.0) {
        ld->echo_point = (int)v[NOSTALL_OPT_ECHO_POINT].u;
        ld->echo = ld->echo_point == EP_BATCH ? ECHO_BATCHES : ECHO_ITEMS;
    }
    ld->fill = ld->drop_last && ld->on_bad == NOSTALL_BAD_SKIP && !v[NOSTALL_OPT_COORDINATE].s[0];
    if (v[NOSTALL_OPT_COORDINATE].s[0]) /* batches live in the group's shared ring */
        rc = coord_join(ld, fn);
    else
        rc = plan_ring(ld, fn);
    if (rc < 0) goto fail;
    if (v[NOSTALL_OPT_CACHE].u == 0 && v[NOSTALL_OPT_CACHE_BYTES].u) {
        rc = nst_cache_create(&ld->cache, v[NOSTALL_OPT_CACHE_BYTES].u, nst_index_count(ld->index));
        if (rc < 0) goto fail;
    }
    if (ld->echo == ECHO_BATCHES) { /* the plan reported by info: epoch 0's lends */
        uint64_t nb = 0, ni = 0;
        for (uint64_t pos = 0; batch_len(ld, 0, pos) > 0; pos += ld->batch_size) {
            uint32_t u = batch_uses(ld, 0, pos);
            nb += u;
            ni += (uint64_t)u * batch_len(ld, 0, pos);
        }
        ld->batches_per_epoch = nb;
        ld->items_per_epoch = ni;
    }
    if (ld->echo == ECHO_ADAPTIVE) {
        size_t ib = ld->item_bytes, bs = ld->batch_size, np = v[NOSTALL_OPT_ECHO_BUFFER].u, bytes;
        if (np < bs) {
            rc = nst_error(NOSTALL_E_OPTION,
                           "%s: echo=adaptive needs echo_buffer (%zu) >= batch_size (%zu): echo "
                           "batches are drawn from that pool",
                           fn, np, bs);
            goto fail;
        }
        if (nst_mul_overflow(np, ib, &bytes) || bytes > ((size_t)1 << 40)) {
            rc = nst_error(NOSTALL_E_OPTION, "%s: echo_buffer %zu x %zu-byte items is too large",
                           fn, np, ib);
            goto fail;
        }
        ld->napool = (uint32_t)np;
        ld->echo_max = (uint32_t)v[NOSTALL_OPT_ECHO_MAX].u;
        ld->apool = calloc(np, sizeof *ld->apool);
        ld->apick = calloc(np, sizeof *ld->apick);
        ld->apool_pixels = malloc(bytes);
        ld->eslot_images = malloc(ECHO_SLOTS * bs * ib);
        ld->eslot_labels = calloc(ECHO_SLOTS * bs, sizeof *ld->eslot_labels);
        ld->eslot_indices = calloc(ECHO_SLOTS * bs, sizeof *ld->eslot_indices);
        if (!ld->apool || !ld->apick || !ld->apool_pixels || !ld->eslot_images ||
            !ld->eslot_labels || !ld->eslot_indices) {
            rc = nst_error(NOSTALL_E_NOMEM, "%s: out of memory for the adaptive echo pool (%zu bytes)",
                           fn, bytes);
            goto fail;
        }
    }
    if (ld->echo == ECHO_ITEMS) {
        /* Entries live from an item's first draw to its last use's finish:
         * at most the pool plus every ticket of the ring's open batches. */
        uint64_t cap64 = v[NOSTALL_OPT_ECHO_BUFFER].u + (uint64_t)ld->ring.nslots * ld->batch_size;
        if (cap64 > UINT32_MAX - 1) {
            rc = nst_error(NOSTALL_E_OPTION, "%s: echo_buffer too large", fn);
            goto fail;
        }
        rc = nst_echo_sched_init(&ld->esched, &ld->sampler, v[NOSTALL_OPT_ECHO_FACTOR].d,
                                 v[NOSTALL_OPT_SEED].u, (uint32_t)v[NOSTALL_OPT_ECHO_BUFFER].u,
                                 (uint32_t)cap64);
        if (rc < 0) goto fail;
        ld->estore = calloc((size_t)cap64, sizeof *ld->estore);
        if (!ld->estore) {
            rc = nst_error(NOSTALL_E_NOMEM, "%s: out of memory for the echo store", fn);
            goto fail;
        }
        /* The first epoch's length decides the plan reported by info. */
        uint64_t len0 = epoch_len(ld, 0);
        ld->batches_per_epoch = ld->drop_last ? len0 / ld->batch_size
                                              : (len0 + ld->batch_size - 1) / ld->batch_size;
        ld->items_per_epoch = ld->drop_last ? ld->batches_per_epoch * ld->batch_size : len0;
    }

    ld->fenv.cache = ld->cache;
    if (ld->cache) {
        ld->fenv.reading = calloc(nst_index_count(ld->index), sizeof *ld->fenv.reading);
        if (!ld->fenv.reading) {
            rc = nst_error(NOSTALL_E_NOMEM, "%s: out of memory", fn);
            goto fail;
        }
    }
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
        w->depth = w->cap = (uint32_t)v[NOSTALL_OPT_IO_DEPTH].u;
        if (w->cap == 0) { /* auto */
            w->depth = IO_DEPTH_AUTO_START;
            w->cap = NOSTALL_IO_DEPTH_AUTO_MAX;
        }
        w->want = w->depth;
        atomic_store_explicit(&w->st.depth, w->depth, memory_order_relaxed);
        if ((rc = nst_fetcher_create(&w->fetch, &ld->fenv, w->depth, w->cap)) < 0) goto fail;
        if (ld->cache && v[NOSTALL_OPT_CACHE_TRANSCODE].u)
            nst_fetcher_set_rewrite(w->fetch, rewrite_jpeg, w->dec);
        w->tk = calloc(w->cap, sizeof *w->tk);
        if (!w->tk) {
            rc = nst_error(NOSTALL_E_NOMEM, "%s: out of memory", fn);
            goto fail;
        }
    }
    for (uint32_t i = 0; i < ld->nthreads; i++) {
        if (pthread_create(&ld->workers[i].thread, NULL,
                           ld->group ? coord_worker_main : worker_main, &ld->workers[i]) != 0) {
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
    pthread_cond_broadcast(&ld->echo_cv);
    pthread_mutex_unlock(&ld->mu);
    if (ld->group) nst_group_stop(ld->group);
    return 0;
}

int nostall_loader_join(nostall_loader *ld)
{
    if (!ld) return nst_error(NOSTALL_E_INVALID, "nostall_loader_join: loader is NULL");
    if (getpid() != ld->pid) return nst_error(NOSTALL_E_FORK, "nostall_loader_join: after fork()");
    nostall_loader_stop(ld);
    for (uint32_t i = 0; ld->workers && i < ld->nthreads; i++)
        if (ld->workers[i].started) {
            pthread_join(ld->workers[i].thread, NULL);
            ld->workers[i].started = 0;
        }
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
    nst_group_leave(ld->group); /* after the workers: none still calls it */
    for (uint64_t i = 0; i < ld->nskips; i++) free(ld->skips[i].msg);
    free(ld->skips);
    free(ld->skip_reason);
    if (ld->estore) {
        for (uint32_t i = 0; i < ld->esched.store_cap; i++) nst_buf_free(&ld->estore[i].buf);
        free(ld->estore);
    }
    nst_echo_sched_destroy(&ld->esched);
    free(ld->apool);
    free(ld->apick);
    free(ld->apool_pixels);
    free(ld->eslot_images);
    free(ld->eslot_labels);
    free(ld->eslot_indices);
    nst_ring_destroy(&ld->ring);
    nst_cache_free(ld->cache);
    free((void *)ld->fenv.reading);
    nst_index_free(ld->index);
    nst_throttle_destroy(&ld->throttle);
    free(ld->source);
    pthread_cond_destroy(&ld->work);
    pthread_cond_destroy(&ld->ready);
    pthread_cond_destroy(&ld->idle);
    pthread_cond_destroy(&ld->echo_cv);
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
    atomic_store_explicit(&ld->cons_taken_pub, ld->cons_taken, memory_order_relaxed);
}

static int next_batch(struct nostall_loader *ld, nostall_batch *out, uint64_t timeout_ns,
                      const char *fn);

static void fill_batch(const struct nostall_loader *ld, nostall_batch *out, void *images,
                       int64_t *labels, uint64_t *indices, uint32_t count, uint64_t epoch,
                       uint64_t position, uint64_t seq)
{
    out->images = images;
    out->labels = labels;
    out->indices = indices;
    out->count = count;
    out->channels = 3;
    out->height = out->width = ld->crop;
    out->dtype = ld->output == NOSTALL_OUTPUT_FLOAT ? NOSTALL_DTYPE_FLOAT32 : NOSTALL_DTYPE_UINT8;
    out->layout = ld->output == NOSTALL_OUTPUT_FLOAT ? NOSTALL_LAYOUT_NCHW : NOSTALL_LAYOUT_NHWC;
    out->item_bytes = ld->item_bytes;
    out->epoch = epoch;
    out->position = position;
    out->sequence = seq;
}

/* Batch echoing: lends of the batch at `position` of `epoch`. */
static uint32_t batch_uses(const struct nostall_loader *ld, uint64_t epoch, uint64_t position)
{
    double e = ld->cfg.v[NOSTALL_OPT_ECHO_FACTOR].d, whole = floor(e);
    uint32_t n = (uint32_t)whole;
    uint64_t h = nst_hash4(ld->cfg.v[NOSTALL_OPT_SEED].u, epoch, position, NST_RNG_ECHO_BATCH);
    if (e > whole && (double)(h >> 11) * 0x1.0p-53 < e - whole) n++;
    return n ? n : 1;
}

/* Adaptive echoing (mu held, no fresh batch ready): assemble a batch of
 * repeats from the pool into a free echo slot. Entries are drawn at random
 * among those used fewer than echo_max times; the pixel copies are made
 * without the lock while the entries are marked as being read. 0 if there
 * is no free echo slot or too few entries (the caller then waits). */
static int adaptive_batch(struct nostall_loader *ld, nostall_batch *out)
{
    int slot = -1;
    for (int i = 0; i < ECHO_SLOTS; i++)
        if (!ld->eslot_lent[i]) slot = i;
    if (slot < 0 || ld->lent == ld->ring.nslots) return 0;
    uint32_t n = 0, want = ld->batch_size;
    for (uint32_t i = 0; i < ld->napool; i++) {
        apool_entry *a = &ld->apool[i];
        if (a->state == AP_READY && a->uses < ld->echo_max) ld->apick[n++] = i;
    }
    if (n < want) return 0;
    nst_rng rng;
    nst_rng_seed(&rng, nst_hash4(ld->cfg.v[NOSTALL_OPT_SEED].u, ld->cons_epoch, ld->adraws++,
                                 NST_RNG_ECHO_DRAW));
    for (uint32_t k = 0; k < want; k++) { /* partial Fisher-Yates */
        uint32_t r = k + (uint32_t)nst_rng_below(&rng, n - k), tmp = ld->apick[k];
        ld->apick[k] = ld->apick[r];
        ld->apick[r] = tmp;
        apool_entry *a = &ld->apool[ld->apick[k]];
        a->readers++;
        a->uses++;
    }
    ld->eslot_lent[slot] = 1;
    ld->lent++;
    size_t ib = ld->item_bytes;
    uint8_t *img = ld->eslot_images + (size_t)slot * want * ib;
    int64_t *labels = ld->eslot_labels + (size_t)slot * want;
    uint64_t *indices = ld->eslot_indices + (size_t)slot * want;
    pthread_mutex_unlock(&ld->mu);
    for (uint32_t k = 0; k < want; k++)
        memcpy(img + (size_t)k * ib, ld->apool_pixels + (size_t)ld->apick[k] * ib, ib);
    pthread_mutex_lock(&ld->mu);
    for (uint32_t k = 0; k < want; k++) {
        apool_entry *a = &ld->apool[ld->apick[k]];
        labels[k] = a->label;
        indices[k] = a->index;
        a->readers--;
    }
    fill_batch(ld, out, img, labels, indices, want, ld->cons_epoch, ld->cons_pos,
               ECHO_SEQ_FLAG | (uint64_t)slot);
    STAT_ADD(ld->batches_delivered, 1);
    STAT_ADD(ld->items_delivered, want);
    STAT_ADD(ld->dlv[NST_IO_echoed], want);
    return 1;
}

/* A slot leaves the cycle without being lent (every item skipped, or all
 * its items went into the batch before it): its work counts as delivered,
 * and it is free (mu held). */
static void slot_pass(struct nostall_loader *ld, nst_slot *s)
{
    for (int i = 0; i < NST_IO_COUNT_; i++) STAT_ADD(ld->dlv[i], s->io.v[i]);
    s->state = NST_SLOT_FREE;
    pthread_cond_broadcast(&ld->work);
}

/* The batch in s is the last of its epoch (mu held). */
static int last_of_epoch(struct nostall_loader *ld, const nst_slot *s)
{
    return batch_len(ld, s->epoch, s->position + s->count) == 0;
}

enum { TOPUP_WAIT = 1, TOPUP_DROPPED = 2 };

/*
 * drop_last with skipped items (mu held): s is the next batch to lend and is
 * short. Move the last items of the batches after it in its epoch into it,
 * in order, until it is full: which items are bad is a property of the
 * files, so the result is still a pure function of the seed, and only as
 * many items are copied as were lost so far in the epoch. Every donor
 * needed must be ready first, so a wait changes nothing. Donors left empty
 * are passed; s records how many (skip_after) and what the batch after
 * them has given (next_taken). If the epoch ends first, s and the donors
 * hold the epoch's partial last batch: dropped, as drop_last says.
 * 0: s is full; TOPUP_WAIT; TOPUP_DROPPED; E_STATE when a donor cannot be
 * made because every other slot is lent.
 */
static int top_up(struct nostall_loader *ld, nst_slot *s, const char *fn)
{
    uint32_t own = s->delivered - s->taken, need = s->count - own, k = 0, left = need;
    nst_slot *d = s;
    while (left > 0 && !last_of_epoch(ld, d)) {
        d = nst_ring_pending(&ld->ring, s->seq + ++k);
        if (!d) {
            if (nst_ring_free_slot(&ld->ring)) return TOPUP_WAIT;
            return nst_error(NOSTALL_E_STATE,
                             "%s: drop_last: the batch at position %llu of epoch %llu lost %u "
                             "skipped item(s) and is filled from the next batch, but every other "
                             "ring slot is lent: release a batch first",
                             fn, (unsigned long long)s->position, (unsigned long long)s->epoch,
                             s->count - s->delivered);
        }
        if (d->state != NST_SLOT_READY) return TOPUP_WAIT;
        uint32_t avail = d->delivered - d->taken;
        left -= avail < left ? avail : left;
    }
    if (left > 0) { /* the epoch's partial last batch */
        slot_pass(ld, s);
        for (uint32_t i = 1; i <= k; i++) slot_pass(ld, nst_ring_pending(&ld->ring, s->seq + i));
        ld->cons_seq = s->seq + k + 1;
        ld->cons_pos = d->position + d->count;
        ld->cons_taken = 0;
        publish_cons(ld);
        return TOPUP_DROPPED;
    }
    const size_t ib = ld->item_bytes;
    for (uint32_t i = 1; i <= k; i++) {
        d = nst_ring_pending(&ld->ring, s->seq + i);
        uint32_t avail = d->delivered - d->taken, t = avail < need ? avail : need;
        uint32_t from = avail - t;
        memcpy(s->images + own * ib, d->images + from * ib, t * ib);
        memcpy(s->labels + own, d->labels + from, t * sizeof *s->labels);
        memcpy(s->indices + own, d->indices + from, t * sizeof *s->indices);
        d->taken += t;
        own += t;
        need -= t;
        if (d->taken == d->delivered) {
            slot_pass(ld, d);
            s->skip_after = i;
            s->next_taken = 0;
        } else {
            s->next_taken = d->taken;
        }
    }
    s->delivered = own;
    s->taken = 0;
    return 0;
}

int nostall_loader_next(nostall_loader *ld, nostall_batch *out)
{
    return next_batch(ld, out, 0, "nostall_loader_next");
}

int nostall_loader_next_timed(nostall_loader *ld, nostall_batch *out, uint32_t timeout_ms)
{
    return next_batch(ld, out, (uint64_t)timeout_ms * 1000000 + 1, "nostall_loader_next_timed");
}

/* Coordinated prep: the member's next batch of the group's ring. Waits in
 * slices so stop() and the deadline are honoured. */
static int coord_next(struct nostall_loader *ld, nostall_batch *out, uint64_t deadline,
                      const char *fn)
{
    nst_group_batch gb;
    uint64_t t0 = nst_now_ns();
    int rc;
    for (;;) {
        if (atomic_load(&ld->stop_flag)) {
            rc = nst_error(NOSTALL_E_STOPPED, "%s: loader stopped", fn);
            break;
        }
        uint64_t now = nst_now_ns();
        uint32_t slice = 100;
        if (deadline) {
            if (now >= deadline) {
                rc = NOSTALL_TIMEOUT;
                break;
            }
            if (deadline - now < 100000000) slice = (uint32_t)((deadline - now) / 1000000) + 1;
        }
        rc = nst_group_next(ld->group, &gb, slice);
        if (rc != NOSTALL_TIMEOUT) break;
    }
    STAT_ADD(ld->wait_ns, nst_now_ns() - t0);
    pthread_mutex_lock(&ld->mu);
    if (rc == NOSTALL_EPOCH_END) {
        ld->cons_epoch++;
        ld->cons_pos = 0;
        publish_cons(ld);
    } else if (rc == 0) {
        for (uint32_t j = 0; j < gb.len; j++)
            if (gb.item_status[j] < 0)
                skip_record(ld, nst_sampler_item(&ld->sampler, gb.epoch, gb.position + j),
                            gb.item_status[j], gb.item_msgs + (size_t)j * NST_GROUP_ITEM_MSG);
        for (int i = 0; i < NST_IO_COUNT_; i++) STAT_ADD(ld->dlv[i], gb.io[i]);
        ld->cons_epoch = gb.epoch;
        ld->cons_pos = gb.position + gb.len;
        publish_cons(ld);
        ld->lent++;
        fill_batch(ld, out, gb.images, gb.labels, gb.indices, gb.count, gb.epoch, gb.position,
                   gb.seq);
        STAT_ADD(ld->batches_delivered, 1);
        STAT_ADD(ld->items_delivered, gb.count);
    } else if (rc < 0 && rc != NOSTALL_E_STOPPED) {
        char keep[NST_ERROR_MAX];
        snprintf(keep, sizeof keep, "%s: %s", fn, nostall_last_error());
        nst_error_set(rc, keep);
    }
    ld->cons_last_ns = rc == 0 ? nst_now_ns() : 0;
    pthread_mutex_unlock(&ld->mu);
    return rc;
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
    if (ld->group) return coord_next(ld, out, deadline, fn);
    uint64_t t_in = nst_now_ns();
    pthread_mutex_lock(&ld->mu);
    if (ld->cons_last_ns) STAT_ADD(ld->consumer_busy_ns, t_in - ld->cons_last_ns);
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
        if (batch_len(ld, ld->cons_epoch, ld->cons_pos) == 0) {
            ld->cons_epoch++;
            ld->cons_pos = 0;
            publish_cons(ld);
            rc = NOSTALL_EPOCH_END;
            break;
        }
        if (nst_ring_lent_count(&ld->ring) == ld->ring.nslots) {
            rc = nst_error(NOSTALL_E_STATE, "%s: all %u batches of the ring are lent; release one",
                           fn, ld->ring.nslots);
            break;
        }
        nst_slot *s = nst_ring_pending(&ld->ring, ld->cons_seq);
        if (s && s->state == NST_SLOT_READY) {
            if (s->error) {
                ld->failed = s->error;
                snprintf(ld->failmsg, sizeof ld->failmsg, "%s: %s", fn, s->errmsg);
                pthread_cond_broadcast(&ld->ready);
                continue;
            }
            if (s->lends_left == 0 && ld->fill && s->delivered - s->taken < s->count) {
                int f = top_up(ld, s, fn);
                if (f == TOPUP_DROPPED) continue;
                if (f < 0) {
                    rc = f;
                    break;
                }
                if (f == TOPUP_WAIT) goto wait;
            }
            if (s->lends_left == 0) { /* first lend of this batch */
                s->lends_left = 1;
                if (ld->echo == ECHO_BATCHES) {
                    uint32_t u = batch_uses(ld, s->epoch, s->position);
                    s->lends_left = u;
                    io_add_uses(s->io.v, u, s->delivered);
                }
                if (s->delivered == 0) s->lends_left = 1; /* nothing to repeat */
                for (int i = 0; i < NST_IO_COUNT_; i++) STAT_ADD(ld->dlv[i], s->io.v[i]);
            } else { /* batch echoing: a repeat, right after the previous lend */
                STAT_ADD(ld->dlv[NST_IO_echoed], s->delivered);
                /* each of its items was last used one batch ago */
                STAT_ADD(ld->dlv[NST_IO_distance], (uint64_t)s->delivered * s->delivered);
            }
            if (--s->lends_left == 0) {
                ld->cons_seq = s->seq + 1 + s->skip_after;
                ld->cons_pos = s->position + (uint64_t)s->count * (1 + s->skip_after);
                ld->cons_taken = s->next_taken;
                publish_cons(ld);
                s->state = NST_SLOT_LENT; /* stays READY while repeats remain */
            }
            if (s->delivered == 0) { /* every item was bad and skipped */
                s->state = NST_SLOT_FREE;
                pthread_cond_broadcast(&ld->work);
                continue;
            }
            s->lends_out++;
            ld->lent++;
            fill_batch(ld, out, s->images, s->labels, s->indices, s->delivered, s->epoch,
                       s->position, s->seq);
            STAT_ADD(ld->batches_delivered, 1);
            STAT_ADD(ld->items_delivered, s->delivered);
            rc = 0;
            break;
        }
        if (ld->echo == ECHO_ADAPTIVE && adaptive_batch(ld, out)) {
            rc = 0;
            break;
        }
    wait:;
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
    ld->cons_last_ns = rc == 0 ? nst_now_ns() : 0; /* the step runs between batches */
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
    if (ld->group) {
        rc = nst_group_release(ld->group, b->sequence);
        if (rc == 0) {
            pthread_mutex_lock(&ld->mu);
            ld->lent--;
            pthread_mutex_unlock(&ld->mu);
        }
        return rc;
    }
    pthread_mutex_lock(&ld->mu);
    if (b->sequence & ECHO_SEQ_FLAG) { /* an adaptive echo batch */
        uint64_t i = b->sequence & ~ECHO_SEQ_FLAG;
        if (ld->echo != ECHO_ADAPTIVE || i >= ECHO_SLOTS || !ld->eslot_lent[i] ||
            b->images != ld->eslot_images + i * ld->batch_size * ld->item_bytes) {
            rc = nst_error(NOSTALL_E_INVALID, "%s: not a lent echo batch", fn);
        } else {
            ld->eslot_lent[i] = 0;
            ld->lent--;
        }
        pthread_mutex_unlock(&ld->mu);
        return rc;
    }
    nst_slot *s = nst_ring_lent(&ld->ring, b->sequence);
    if (!s || b->images != s->images) {
        rc = nst_error(NOSTALL_E_INVALID,
                       "%s: batch %llu is not lent (released already, or not from this loader)",
                       fn, (unsigned long long)b->sequence);
    } else {
        ld->lent--;
        if (--s->lends_out == 0 && s->state == NST_SLOT_LENT) {
            s->state = NST_SLOT_FREE;
            pthread_cond_broadcast(&ld->work);
            pthread_cond_broadcast(&ld->ready); /* a top-up may wait for a slot */
        }
    }
    pthread_mutex_unlock(&ld->mu);
    return rc;
}

/* ------------------------------------------------------------------------
 * State.
 * ------------------------------------------------------------------------ */

/* Options that change the bytes delivered for a given (seed, epoch,
 * position), besides the seed itself (checked on its own). world_size and
 * rank are not here: a state is remapped to another world size. */
static const char *const state_options[] = {
    "shuffle", "drop_last", "mode", "crop", "resize", "scale_min", "scale_max", "ratio_min",
    "ratio_max", "flip_prob", "output", "mean", "std", "on_bad_item", "max_pixels",
    "max_file_bytes", "echo", "echo_point", "echo_factor", "echo_buffer"};

/* The fingerprint of the item list (each path and label) and of the options
 * above, computed once, on first use (mu held). Never 0. */
static uint64_t fingerprint(struct nostall_loader *ld)
{
    if (ld->fingerprint) return ld->fingerprint;
    uint64_t h = 0x6e6f7374616c6cULL, n = nst_index_count(ld->index);
    char val[256];
    nostall_checksum_update(&h, &n, sizeof n);
    for (uint64_t i = 0; i < n; i++) {
        const char *path = nst_index_path(ld->index, i);
        int64_t label = nst_index_label(ld->index, i);
        nostall_checksum_update(&h, path, strlen(path) + 1);
        nostall_checksum_update(&h, &label, sizeof label);
    }
    for (size_t i = 0; i < sizeof state_options / sizeof *state_options; i++) {
        nostall_config_get(&ld->cfg, state_options[i], val, sizeof val);
        nostall_checksum_update(&h, state_options[i], strlen(state_options[i]) + 1);
        nostall_checksum_update(&h, val, strlen(val) + 1);
    }
    if (ld->echo == ECHO_BATCHES) /* each batch's repeats are drawn by position */
        nostall_checksum_update(&h, &ld->batch_size, sizeof ld->batch_size);
    ld->fingerprint = h ? h : 1;
    return ld->fingerprint;
}

int nostall_loader_get_state(const nostall_loader *cld, nostall_state *out)
{
    nostall_loader *ld = (nostall_loader *)cld;
    nst_error_clear();
    if (!ld || !out) return nst_error(NOSTALL_E_INVALID, "nostall_loader_get_state: NULL argument");
    int rc = forked(ld, "nostall_loader_get_state");
    if (rc < 0) return rc;
    memset(out, 0, sizeof *out);
    out->epoch = STAT_GET(ld->cons_epoch_pub);
    out->position = STAT_GET(ld->cons_pos_pub);
    out->taken = STAT_GET(ld->cons_taken_pub);
    out->version = NOSTALL_STATE_VERSION;
    out->seed = ld->cfg.v[NOSTALL_OPT_SEED].u;
    out->items = nst_index_count(ld->index);
    out->rank = ld->sampler.rank;
    out->world_size = ld->sampler.world;
    pthread_mutex_lock(&ld->mu);
    out->fingerprint = fingerprint(ld);
    if (ld->sampler.res_on && ld->sampler.res_epoch == out->epoch)
        out->epoch_offset = ld->sampler.res_offset;
    pthread_mutex_unlock(&ld->mu);
    return 0;
}

/* What a state with version != 0 belongs to must be this loader's (mu
 * held). */
static int state_check(struct nostall_loader *ld, const nostall_state *st, const char *fn)
{
    uint64_t seed = ld->cfg.v[NOSTALL_OPT_SEED].u, n = nst_index_count(ld->index);
    if (st->version > NOSTALL_STATE_VERSION)
        return nst_error(NOSTALL_E_STATE, "%s: state version %u is newer than this library's (%u)",
                         fn, st->version, NOSTALL_STATE_VERSION);
    if (st->seed != seed)
        return nst_error(NOSTALL_E_STATE,
                         "%s: the state was saved with seed %llu, this loader has seed %llu", fn,
                         (unsigned long long)st->seed, (unsigned long long)seed);
    if (st->items != n)
        return nst_error(NOSTALL_E_STATE,
                         "%s: the state was saved for a dataset of %llu items, %s has %llu", fn,
                         (unsigned long long)st->items, ld->source, (unsigned long long)n);
    if (st->fingerprint != fingerprint(ld))
        return nst_error(NOSTALL_E_STATE,
                         "%s: the state was saved for another dataset or other options: the item "
                         "list of %s (paths, labels) or an option that changes the bytes (%s, "
                         "...) differs",
                         fn, ld->source, "mode, crop, output, mean, std, echo");
    if (st->world_size == 0 || st->rank >= st->world_size)
        return nst_error(NOSTALL_E_STATE, "%s: the state says rank %u of world size %u", fn,
                         st->rank, st->world_size);
    return 0;
}

int nostall_loader_set_state(nostall_loader *ld, const nostall_state *st)
{
    static const char fn[] = "nostall_loader_set_state";
    int rc = 0;
    nst_error_clear();
    if (!ld || !st) return nst_error(NOSTALL_E_INVALID, "%s: NULL argument", fn);
    if ((rc = forked(ld, fn)) < 0) return rc;
    if (ld->group)
        return nst_error(NOSTALL_E_STATE,
                         "%s: a member of coordinated group '%s' follows the group's position; "
                         "set_state is not available",
                         fn, ld->cfg.v[NOSTALL_OPT_COORDINATE].s);
    pthread_mutex_lock(&ld->mu);
    if (st->version && (rc = state_check(ld, st, fn)) < 0) goto out;
    if (ld->epochs_limit && st->epoch >= ld->epochs_limit) {
        rc = nst_error(NOSTALL_E_INVALID, "%s: epoch %llu is past epochs=%llu (epochs 0..%llu)",
                       fn, (unsigned long long)st->epoch, (unsigned long long)ld->epochs_limit,
                       (unsigned long long)ld->epochs_limit - 1);
        goto out;
    }
    /* Another world size (or an already remapped epoch): skip what every old
     * rank consumed, shard the rest. */
    uint64_t offset = 0, position = st->position, taken = st->taken;
    if (st->version && (st->world_size != ld->sampler.world || st->epoch_offset)) {
        uint64_t total = nst_sampler_total(&ld->sampler, st->world_size);
        if (st->position > (UINT64_MAX - st->epoch_offset) / st->world_size ||
            st->epoch_offset + st->position * st->world_size > total) {
            rc = nst_error(NOSTALL_E_INVALID,
                           "%s: position %llu (+%llu) of world size %u is past the epoch's %llu "
                           "items",
                           fn, (unsigned long long)st->position,
                           (unsigned long long)st->epoch_offset, st->world_size,
                           (unsigned long long)total);
            goto out;
        }
        offset = st->epoch_offset + st->position * st->world_size;
        position = taken = 0;
    }
    if (!offset) { /* the epoch's length as it will be (no earlier remap) */
        nst_sampler plain = ld->sampler;
        plain.res_on = 0;
        uint64_t len = plain.per_rank;
        if (ld->echo == ECHO_ITEMS) {
            nst_echo_sched tmp = ld->esched;
            tmp.sampler = &plain;
            len = nst_echo_epoch_len(&tmp, st->epoch);
        }
        if (position > len) {
            rc = nst_error(NOSTALL_E_INVALID, "%s: position %llu is past the epoch's %llu items",
                           fn, (unsigned long long)position, (unsigned long long)len);
            goto out;
        }
    }
    if (taken && (!ld->fill || taken >= ld->batch_size)) {
        rc = nst_error(NOSTALL_E_INVALID, "%s: taken=%llu needs drop_last and on_bad_item=skip "
                       "and must be < batch_size", fn, (unsigned long long)taken);
        goto out;
    }
    if (ld->stopped) {
        rc = nst_error(NOSTALL_E_STOPPED, "%s: loader stopped", fn);
        goto out;
    }
    ld->resetting = 1;
    ld->gen++;
    atomic_store_explicit(&ld->gen_pub, ld->gen, memory_order_relaxed);
    pthread_cond_broadcast(&ld->echo_cv); /* echoed uses waiting on a discarded producer */
    while (ld->inflight && !ld->stopped) pthread_cond_wait(&ld->idle, &ld->mu);
    if (ld->stopped) {
        ld->resetting = 0;
        rc = nst_error(NOSTALL_E_STOPPED, "%s: loader stopped", fn);
        goto out;
    }
    /* Nothing is in flight now: the workers read the sampler again only after
     * taking a ticket under mu. */
    nst_sampler_resume(&ld->sampler, st->epoch, offset);
    memset(ld->elen_val, 0, sizeof ld->elen_val);
    nst_ring_reset(&ld->ring); /* lent batches stay lent */
    if (ld->echo == ECHO_ITEMS) {
        for (uint32_t i = 0; i < ld->esched.store_cap; i++) {
            ld->estore[i].state = ES_EMPTY;
            ld->estore[i].pending = 0;
            ld->estore[i].closed = 0;
        }
        nst_echo_store_reset(&ld->esched);
        echo_epoch_start(ld, st->epoch, position);
    }
    ld->prod_epoch = ld->cons_epoch = st->epoch;
    ld->prod_pos = ld->cons_pos = position;
    ld->open_taken = ld->cons_taken = (uint32_t)taken;
    ld->cons_seq = ld->prod_seq; /* sequence numbers only grow */
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
    out->ring_slots = ld->group ? (uint32_t)ld->cfg.v[NOSTALL_OPT_COORDINATE_LEAD].u : ld->ring.nslots;
    out->batch_bytes = ld->item_bytes * ld->batch_size;
    out->ring_memory = ld->group ? NULL : ld->ring.arena;
    out->ring_bytes = ld->group ? 0 : ld->ring.arena_bytes;
    out->slot_items = ld->group ? ld->batch_size : ld->ring.batch_size;
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
    s.consumer_busy_ns = STAT_GET(ld->consumer_busy_ns);
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
        s.upstream_busy_ns += STAT_GET(w->fetch_ns) + STAT_GET(w->decode_ns) + STAT_GET(w->augment_ns);
        s.storage_wait_ns += STAT_GET(w->storage_wait_ns);
        s.cache_transcoded += STAT_GET(w->transcoded);
        s.cache_transcode_ns += STAT_GET(w->transcode_ns);
        if (STAT_GET(w->depth) > s.io_depth_max) s.io_depth_max = STAT_GET(w->depth);
    }
    /* Storage and cache counts are those of the delivered batches' items,
     * so a snapshot at an epoch end covers exactly that epoch's items (work
     * already done for batches not yet delivered is counted when they are). */
    s.storage_reads = STAT_GET(ld->dlv[NST_IO_storage_reads]);
    s.storage_bytes_read = STAT_GET(ld->dlv[NST_IO_storage_bytes]);
    s.cache_hits = STAT_GET(ld->dlv[NST_IO_cache_hits]);
    s.cache_misses = STAT_GET(ld->dlv[NST_IO_cache_misses]);
    s.peer_hits = STAT_GET(ld->dlv[NST_IO_peer_hits]);
    s.peer_bytes = STAT_GET(ld->dlv[NST_IO_peer_bytes]);
    s.http_transfers = STAT_GET(ld->dlv[NST_IO_http_transfers]);
    s.http_retries = STAT_GET(ld->dlv[NST_IO_http_retries]);
    s.fresh_items = STAT_GET(ld->dlv[NST_IO_fresh]);
    s.echoed_items = STAT_GET(ld->dlv[NST_IO_echoed]);
    s.echo_uses_1 = STAT_GET(ld->dlv[NST_IO_uses_1]);
    s.echo_uses_2 = STAT_GET(ld->dlv[NST_IO_uses_2]);
    s.echo_uses_3 = STAT_GET(ld->dlv[NST_IO_uses_3]);
    s.echo_uses_4 = STAT_GET(ld->dlv[NST_IO_uses_4]);
    s.echo_uses_5_8 = STAT_GET(ld->dlv[NST_IO_uses_5_8]);
    s.echo_uses_9_up = STAT_GET(ld->dlv[NST_IO_uses_9_up]);
    s.echo_batch_duplicates = STAT_GET(ld->dlv[NST_IO_dups]);
    s.echo_repeat_distance = STAT_GET(ld->dlv[NST_IO_distance]);    if (ld->cache) {
        nst_cache_stats cs;
        nst_cache_stats_get(ld->cache, &cs);
        s.cache_bytes = cs.bytes;
        s.cache_items = cs.items;
    }
    if (ld->group) {
        nst_group_stats gs;
        if (nst_group_stats_get(ld->group, &gs) == 0) {
            s.coord_members = gs.members;
            s.coord_items_produced = gs.items_produced;
            s.coord_batches_produced = gs.batches_produced;
            s.coord_group_items_produced = gs.group_items_produced;
            s.coord_members_dropped = gs.members_dropped;
            s.coord_items_requeued = gs.items_requeued;
        }
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
