/*
 * stream.c — streaming reads of tar shards (the design is in stream.h).
 * Room: dataset/ (what the items are).
 *
 * The order is computed in O(n) per epoch into arrays sized at create: the
 * reader keeps its epoch's order and its inverse (item -> delivery
 * position); consumers share NST_STREAM_EPOCHS cached orders.
 *
 * The store is `capacity` slots, each a grow-only buffer, found by
 * (epoch, local position) in an open-addressing table (linear probing,
 * deletion by backward shift). A slot is FREE, FILL (the reader copies an
 * item into it, outside the lock), READY or FAILED (published: a consumer
 * may take it), and `held` from a consumer's get to its release.
 *
 * The reader (one thread) reads the shards of its epoch in stream order,
 * skipping every shard that holds no item this rank delivers from the
 * restart point on, feeds the bytes to tar.c's scanner and matches each
 * MEMBER event to the shard's next items by data offset: an item the
 * scanner passes without a member at its offset, whose member there has
 * another size or another name (the shard changed since it was indexed:
 * re-shuffled samples of one size would otherwise be delivered under
 * other samples' labels), or whose member a
 * DAMAGE event ends, or that the shard's end or a failed transfer cuts
 * off, is published as FAILED with its reason. URLs are one GET per
 * shard; a transfer cut short continues with a Range request where it
 * stopped (`retries` attempts in a row without new bytes).
 *
 * LOCKS  `mu` guards every field marked (mu) and the slots' states; the
 *   reader copies bytes into a FILL slot without it. `gen` (atomic, bumped
 *   by start under mu) tells the reader to abandon what it reads; `stop`
 *   (atomic) ends everything. `more` wakes consumers, `room` the reader.
 */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/rng.h"
#include "source/s3.h"
#include "dataset/shards.h"
#include "dataset/stream.h"
#include "dataset/tar.h"

#define NST_STREAM_EPOCHS 3
#define NST_STREAM_CHUNK (1u << 20)
#define NST_STREAM_MSG 320

enum { SL_FREE = 0, SL_FILL = 1, SL_READY = 2, SL_FAILED = 3 };

typedef struct slot {
    uint64_t epoch, local;
    int state, held, orphan, status;
    size_t len;
    nst_buf buf;
    char msg[NST_STREAM_MSG];
} slot;

/* One item of the shard being read. */
typedef struct sitem {
    uint64_t item, offset, length;
    uint32_t nloc;    /* slots wanted (0: not delivered by this rank) */
    uint32_t slot[2]; /* acquired slots (while FILL)                 */
    uint64_t local[2];
    int acquired;
} sitem;

struct nst_stream {
    const nst_index *ix;
    nst_stream_opts o;
    uint64_t n, nshards;
    pthread_t thread;
    int started;
    atomic_int stop;
    atomic_uint_fast64_t gen;

    pthread_mutex_t mu;
    pthread_cond_t more, room;
    /* (mu): */
    slot *slots;
    uint32_t *freelist, nfree;
    uint32_t *table; /* slot + 1, 0 = empty */
    uint64_t tmask;
    uint64_t start_epoch, start_pos;
    nst_sampler sm;        /* this rank's positions (a resumed epoch)      */
    uint64_t reader_epoch; /* the epoch the reader reads (or has reached)  */
    uint64_t started_gen;  /* the generation the reader runs               */
    uint32_t *ord[NST_STREAM_EPOCHS];
    uint64_t ord_epoch[NST_STREAM_EPOCHS];
    int ord_valid[NST_STREAM_EPOCHS];
    uint32_t ord_next;
    nst_stream_stats st;

    /* the reader's own (no lock) */
    uint32_t *r_ord, *r_inv, *perm;
    sitem *items; /* the items of the shard being read              */
    uint64_t nitems, cur;
    uint8_t *chunk;
    nst_tar_scan scan;
    void *curl;
    uint64_t r_epoch, r_gen;
    nst_sampler r_sm;
    uint64_t r_start_epoch, r_start_pos;
};

/* ---- the order ---------------------------------------------------------- */

static uint64_t below(uint64_t h, uint64_t n) { return (uint64_t)(((__uint128_t)h * n) >> 64); }

static void shard_perm(const nst_index *ix, uint64_t seed, uint64_t epoch, int shuffle,
                       uint32_t *perm)
{
    uint64_t K = nst_index_shards(ix);
    for (uint64_t k = 0; k < K; k++)
        perm[k] = (uint32_t)(shuffle ? nst_permute(K, seed, epoch, k) : k);
}

/* The order, with perm (K entries) and buf (buffer entries) as scratch. */
static void order_into(const nst_index *ix, uint64_t seed, uint64_t epoch, uint32_t buffer,
                       int shuffle, uint32_t *out, uint32_t *perm, uint32_t *buf)
{
    uint64_t K = nst_index_shards(ix), d = 0, t = 0, have = 0;
    shard_perm(ix, seed, epoch, shuffle, perm);
    for (uint64_t k = 0; k < K; k++) {
        uint64_t s = perm[k], a = nst_index_shard_first(ix, s), b = nst_index_shard_first(ix, s + 1);
        for (uint64_t i = a; i < b; i++) {
            if (!shuffle) {
                out[d++] = (uint32_t)i;
            } else if (have < buffer) {
                buf[have++] = (uint32_t)i;
            } else {
                uint64_t j = below(nst_hash4(seed, epoch, NST_RNG_STREAM, t++), have);
                out[d++] = buf[j];
                buf[j] = (uint32_t)i;
            }
        }
    }
    while (have) {
        uint64_t j = below(nst_hash4(seed, epoch, NST_RNG_STREAM, t++), have);
        out[d++] = buf[j];
        buf[j] = buf[--have];
    }
}

int nst_stream_order(const nst_index *ix, uint64_t seed, uint64_t epoch, uint32_t buffer,
                     int shuffle, uint32_t *out)
{
    uint64_t n = nst_index_count(ix), K = nst_index_shards(ix);
    if (!K || n >= UINT32_MAX || buffer == 0)
        return nst_error(NOSTALL_E_INVALID, "stream: not an index of shards under 2^32 items");
    uint32_t *perm = malloc(K * sizeof *perm), *buf = malloc((size_t)buffer * sizeof *buf);
    if (!perm || !buf) {
        free(perm);
        free(buf);
        return nst_error(NOSTALL_E_NOMEM, "stream: out of memory");
    }
    order_into(ix, seed, epoch, buffer, shuffle, out, perm, buf);
    free(perm);
    free(buf);
    return 0;
}

uint64_t nst_stream_global(const nst_sampler *s, uint64_t epoch, uint64_t pos)
{
    uint64_t j = (uint64_t)s->rank + pos * (uint64_t)s->world;
    if (s->res_on && epoch == s->res_epoch) {
        uint64_t rest = s->n - s->res_offset;
        j = s->res_offset + j % (rest ? rest : 1);
    }
    return j % s->n;
}

uint32_t nst_stream_local(const nst_sampler *s, uint64_t epoch, uint64_t g, uint64_t local[2])
{
    uint32_t k = 0;
    const uint64_t W = s->world, r = s->rank;
    if (s->res_on && epoch == s->res_epoch) {
        if (g < s->res_offset) return 0;
        uint64_t rest = s->n - s->res_offset, lim = s->res_len * W;
        for (uint64_t j = g - s->res_offset; j < lim && k < 2; j += rest)
            if (j >= r && (j - r) % W == 0) local[k++] = (j - r) / W;
        return k;
    }
    uint64_t lim = s->per_rank * W;
    for (uint64_t j = g; j < lim && k < 2; j += s->n)
        if (j >= r && (j - r) % W == 0) local[k++] = (j - r) / W;
    return k;
}

/* ---- the store's table (mu held) ----------------------------------------- */

static uint64_t tkey(uint64_t e, uint64_t p) { return nst_hash4(e, p, 0x73746f7265ULL, 0); }

static int64_t t_find(nst_stream *s, uint64_t e, uint64_t p)
{
    for (uint64_t h = tkey(e, p) & s->tmask;; h = (h + 1) & s->tmask) {
        uint32_t v = s->table[h];
        if (!v) return -1;
        const slot *x = &s->slots[v - 1];
        if (x->epoch == e && x->local == p) return (int64_t)h;
    }
}

static void t_insert(nst_stream *s, uint32_t k)
{
    uint64_t h = tkey(s->slots[k].epoch, s->slots[k].local) & s->tmask;
    while (s->table[h]) h = (h + 1) & s->tmask;
    s->table[h] = k + 1;
}

static void t_delete(nst_stream *s, uint64_t h)
{
    s->table[h] = 0;
    for (uint64_t j = (h + 1) & s->tmask; s->table[j]; j = (j + 1) & s->tmask) {
        const slot *x = &s->slots[s->table[j] - 1];
        uint64_t home = tkey(x->epoch, x->local) & s->tmask;
        /* move j back to h when its home is not in (h, j] cyclically */
        if (((j - home) & s->tmask) >= ((j - h) & s->tmask)) {
            s->table[h] = s->table[j];
            s->table[j] = 0;
            h = j;
        }
    }
}

static void slot_free(nst_stream *s, uint32_t k)
{
    slot *x = &s->slots[k];
    int64_t h = t_find(s, x->epoch, x->local);
    if (h >= 0 && s->table[h] == k + 1) t_delete(s, (uint64_t)h);
    x->state = SL_FREE;
    x->held = x->orphan = 0;
    s->freelist[s->nfree++] = k;
    pthread_cond_signal(&s->room);
}

/* ---- the consumers --------------------------------------------------------- */

static int before_start(const nst_stream *s, uint64_t e, uint64_t p)
{
    return e < s->start_epoch || (e == s->start_epoch && p < s->start_pos);
}

uint64_t nst_stream_item(nst_stream *s, uint64_t epoch, uint64_t global)
{
    pthread_mutex_lock(&s->mu);
    int k = -1;
    for (int i = 0; i < NST_STREAM_EPOCHS; i++)
        if (s->ord_valid[i] && s->ord_epoch[i] == epoch) k = i;
    if (k < 0) {
        k = (int)(s->ord_next++ % NST_STREAM_EPOCHS);
        /* (scratch: the shard order and the buffer after the order) */
        order_into(s->ix, s->o.seed, epoch, s->o.buffer, s->o.shuffle, s->ord[k], s->ord[k] + s->n,
                   s->ord[k] + s->n + s->nshards);
        s->ord_epoch[k] = epoch;
        s->ord_valid[k] = 1;
    }
    uint64_t item = s->ord[k][global < s->n ? global : global % s->n];
    pthread_mutex_unlock(&s->mu);
    return item;
}

int nst_stream_get(nst_stream *s, uint64_t epoch, uint64_t local, const uint8_t **data, size_t *len,
                   char *msg, size_t msgn)
{
    int rc;
    uint64_t t0 = 0;
    *data = NULL;
    *len = 0;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (atomic_load(&s->stop)) {
            snprintf(msg, msgn, "stream: stopped");
            rc = NOSTALL_E_STOPPED;
            break;
        }
        int64_t h = t_find(s, epoch, local);
        if (h >= 0) {
            slot *x = &s->slots[s->table[h] - 1];
            if (x->state == SL_READY || x->state == SL_FAILED) {
                x->held = 1;
                rc = x->status;
                if (rc == 0) {
                    *data = x->buf.data;
                    *len = x->len;
                } else {
                    snprintf(msg, msgn, "%s", x->msg);
                }
                break;
            }
        } else if (before_start(s, epoch, local) || epoch < s->reader_epoch ||
                   (s->o.epochs && epoch >= s->o.epochs)) {
            snprintf(msg, msgn,
                     "stream: epoch %llu position %llu is not ahead of the reader (epoch %llu, "
                     "started at position %llu of epoch %llu)",
                     (unsigned long long)epoch, (unsigned long long)local,
                     (unsigned long long)s->reader_epoch, (unsigned long long)s->start_pos,
                     (unsigned long long)s->start_epoch);
            rc = NOSTALL_E_INVALID;
            break;
        }
        if (!t0) t0 = nst_now_ns();
        pthread_cond_wait(&s->more, &s->mu);
    }
    if (t0) s->st.consumer_wait_ns += nst_now_ns() - t0;
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void nst_stream_release(nst_stream *s, uint64_t epoch, uint64_t local)
{
    pthread_mutex_lock(&s->mu);
    int64_t h = t_find(s, epoch, local);
    if (h >= 0) {
        uint32_t k = s->table[h] - 1;
        if (s->slots[k].state == SL_READY || s->slots[k].state == SL_FAILED) slot_free(s, k);
    }
    pthread_mutex_unlock(&s->mu);
}

void nst_stream_stats_get(nst_stream *s, nst_stream_stats *out)
{
    pthread_mutex_lock(&s->mu);
    *out = s->st;
    pthread_mutex_unlock(&s->mu);
}

void nst_stream_stop(nst_stream *s)
{
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    atomic_store(&s->stop, 1);
    pthread_cond_broadcast(&s->more);
    pthread_cond_broadcast(&s->room);
    pthread_mutex_unlock(&s->mu);
}

void nst_stream_start(nst_stream *s, uint64_t epoch, uint64_t position, const nst_sampler *sm)
{
    pthread_mutex_lock(&s->mu);
    atomic_fetch_add(&s->gen, 1);
    s->start_epoch = s->reader_epoch = epoch;
    s->start_pos = position;
    if (sm) s->sm = *sm;
    for (uint32_t k = 0; k < s->o.capacity; k++) {
        slot *x = &s->slots[k];
        if (x->state == SL_FILL) {
            x->orphan = 1; /* the reader frees it */
        } else if (x->state != SL_FREE && !x->held) {
            slot_free(s, k);
        }
    }
    pthread_cond_broadcast(&s->room);
    pthread_cond_broadcast(&s->more);
    pthread_mutex_unlock(&s->mu);
}

/* ---- the reader -------------------------------------------------------------- */

static int abandoned(nst_stream *s)
{
    return atomic_load(&s->stop) || atomic_load(&s->gen) != s->r_gen;
}

/* Publish item it's slots: its bytes (status 0) or its failure. */
static void publish(nst_stream *s, sitem *it, int status, const char *why)
{
    char name[256];
    if (!it->acquired) return;
    if (status < 0) nst_index_name(s->ix, it->item, name, sizeof name);
    pthread_mutex_lock(&s->mu);
    for (uint32_t j = 0; j < it->nloc; j++) {
        slot *x = &s->slots[it->slot[j]];
        if (x->orphan) {
            slot_free(s, it->slot[j]);
            continue;
        }
        x->state = status < 0 ? SL_FAILED : SL_READY;
        x->status = status;
        x->len = status < 0 ? 0 : it->length;
        if (status < 0) snprintf(x->msg, sizeof x->msg, "stream: %s: %s", name, why);
    }
    if (status < 0)
        s->st.items_failed++;
    else
        s->st.items_stored++;
    pthread_cond_broadcast(&s->more);
    pthread_mutex_unlock(&s->mu);
    it->acquired = 0;
}

/* Slots for the item (waits for room). 0, or -1 when abandoned. */
static int acquire(nst_stream *s, sitem *it)
{
    if (it->acquired || !it->nloc) return 0;
    uint64_t t0 = 0;
    pthread_mutex_lock(&s->mu);
    while (s->nfree < it->nloc && !abandoned(s)) {
        if (!t0) t0 = nst_now_ns();
        pthread_cond_wait(&s->room, &s->mu);
    }
    if (t0) s->st.reader_wait_ns += nst_now_ns() - t0;
    if (abandoned(s)) {
        pthread_mutex_unlock(&s->mu);
        return -1;
    }
    for (uint32_t j = 0; j < it->nloc; j++) {
        uint32_t k = s->freelist[--s->nfree];
        slot *x = &s->slots[k];
        x->epoch = s->r_epoch;
        x->local = it->local[j];
        x->state = SL_FILL;
        x->held = x->orphan = 0;
        t_insert(s, k);
        it->slot[j] = k;
    }
    pthread_mutex_unlock(&s->mu);
    it->acquired = 1;
    return 0;
}

/* Items before the member at `offset` were not found: fail them. */
static int fail_until(nst_stream *s, uint64_t offset, const char *why)
{
    while (s->cur < s->nitems && s->items[s->cur].offset < offset) {
        sitem *it = &s->items[s->cur++];
        if (!it->nloc) continue;
        if (acquire(s, it) < 0) return -1;
        publish(s, it,
                it->length > s->o.max_item_bytes ? NOSTALL_E_FILE_TOO_LARGE : NOSTALL_E_TRUNCATED,
                why);
    }
    return 0;
}

/* The item whose member data is being collected (NULL: none). */
typedef struct collect {
    sitem *it;
    uint64_t got;
} collect;

static int on_event(nst_stream *s, collect *c, const nst_tar_ev *ev)
{
    char why[160];
    switch (ev->kind) {
    case NST_TAR_EV_MEMBER:
        c->it = NULL;
        if (fail_until(s, ev->offset, "no member at its offset in the shard as read") < 0)
            return -1;
        if (s->cur < s->nitems && s->items[s->cur].offset == ev->offset) {
            sitem *it = &s->items[s->cur++];
            if (!it->nloc) break;
            if (acquire(s, it) < 0) return -1;
            const char *want = nst_index_member(s->ix, it->item);
            if (ev->size != it->length) {
                snprintf(why, sizeof why, "the member has %llu bytes, the index says %llu",
                         (unsigned long long)ev->size, (unsigned long long)it->length);
                publish(s, it, NOSTALL_E_IO, why);
            } else if (want && strcmp(ev->name, want) != 0) { /* the shard changed */
                snprintf(why, sizeof why, "the member here is '%.56s', the index says '%.56s'",
                         ev->name, want);
                publish(s, it, NOSTALL_E_IO, why);
            } else if (it->length > s->o.max_item_bytes) {
                publish(s, it, NOSTALL_E_FILE_TOO_LARGE, "over max_file_bytes");
            } else {
                for (uint32_t j = 0; j < it->nloc; j++)
                    if (nst_buf_reserve(&s->slots[it->slot[j]].buf, it->length) < 0) {
                        publish(s, it, NOSTALL_E_NOMEM, "out of memory");
                        return 0;
                    }
                c->it = it;
                c->got = 0;
                if (it->length == 0) publish(s, it, 0, NULL), c->it = NULL;
            }
        }
        break;
    case NST_TAR_EV_DATA:
        if (c->it && c->it->acquired && ev->offset == c->it->offset + c->got) {
            for (uint32_t j = 0; j < c->it->nloc; j++)
                memcpy(s->slots[c->it->slot[j]].buf.data + c->got, ev->data, ev->len);
            c->got += ev->len;
            if (c->got == c->it->length) {
                publish(s, c->it, 0, NULL);
                c->it = NULL;
            }
        }
        break;
    case NST_TAR_EV_DAMAGE:
        snprintf(why, sizeof why, "%s at bytes %llu-%llu of the shard",
                 nst_tar_damage_name(ev->code), (unsigned long long)ev->offset,
                 (unsigned long long)(ev->offset + ev->size - (ev->size > 0)));
        if (c->it) {
            publish(s, c->it, NOSTALL_E_TRUNCATED, why);
            c->it = NULL;
        }
        if (fail_until(s, ev->offset + ev->size, why) < 0) return -1;
        break;
    default: break;
    }
    return 0;
}

/* Feed bytes to the scanner. 0, or -1 when abandoned. */
static int feed(nst_stream *s, collect *c, const uint8_t *p, size_t n)
{
    while (n) {
        size_t used;
        nst_tar_ev ev;
        int got = nst_tar_feed(&s->scan, p, n, &used, &ev);
        p += used;
        n -= used;
        if (got && on_event(s, c, &ev) < 0) return -1;
    }
    return 0;
}

/* The shard's end: at `end` bytes, with `why` when the read failed. */
static int finish(nst_stream *s, collect *c, uint64_t end, const char *why)
{
    nst_tar_ev ev;
    if (nst_tar_finish(&s->scan, end, &ev) && on_event(s, c, &ev) < 0) return -1;
    if (c->it) {
        publish(s, c->it, NOSTALL_E_TRUNCATED, why ? why : "the shard ends inside the member");
        c->it = NULL;
    }
    char msg[200];
    snprintf(msg, sizeof msg, "%s (the shard as read ends at byte %llu)",
             why ? why : "not in the shard", (unsigned long long)end);
    return fail_until(s, UINT64_MAX, msg);
}

static int read_local(nst_stream *s, const char *path, collect *c)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        char why[160];
        snprintf(why, sizeof why, "cannot open the shard: %s", strerror(errno));
        return finish(s, c, 0, why);
    }
    uint64_t off = 0;
    int rc = 0;
    for (;;) {
        if (abandoned(s)) {
            rc = -1;
            break;
        }
        ssize_t r = pread(fd, s->chunk, NST_STREAM_CHUNK, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            char why[160];
            if (r < 0) snprintf(why, sizeof why, "read error: %s", strerror(errno));
            rc = finish(s, c, off, r < 0 ? why : NULL);
            break;
        }
        pthread_mutex_lock(&s->mu);
        s->st.bytes_read += (uint64_t)r;
        pthread_mutex_unlock(&s->mu);
        off += (uint64_t)r;
        if ((rc = feed(s, c, s->chunk, (size_t)r)) < 0) break;
    }
    close(fd);
    return rc;
}

/* ---- URLs ------------------------------------------------------------------ */

typedef struct xfer {
    nst_stream *s;
    collect *c;
    uint64_t at;   /* where this attempt starts in the shard             */
    int checked;   /* the answer's status seen                           */
    uint64_t skip; /* bytes of a 200 answer to a Range request to drop   */
    uint64_t got;  /* new bytes fed in this attempt                      */
    int gave_up;   /* abandoned inside the callback                      */
    long code;
} xfer;

static size_t x_body(char *p, size_t sz, size_t nm, void *ud)
{
    xfer *x = ud;
    size_t n = sz * nm, k = n;
    curl_easy_getinfo((CURL *)x->s->curl, CURLINFO_RESPONSE_CODE, &x->code);
    if (x->code != 200 && x->code != 206) return n; /* an error page: dropped */
    if (!x->checked) { /* a server that ignores Range sends the shard from 0 */
        x->checked = 1;
        if (x->code == 200) x->skip = x->at;
    }
    if (x->skip) {
        size_t d = x->skip < n ? (size_t)x->skip : n;
        x->skip -= d;
        p += d;
        k -= d;
    }
    if (k && feed(x->s, x->c, (const uint8_t *)p, k) < 0) {
        x->gave_up = 1;
        return 0;
    }
    x->got += k;
    return n;
}

static int x_progress(void *ud, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    (void)a, (void)b, (void)c, (void)d;
    xfer *x = ud;
    if (abandoned(x->s)) x->gave_up = 1;
    return x->gave_up;
}

static void backoff(nst_stream *s, uint32_t attempt)
{
    uint32_t ms = 100u << (attempt < 4 ? attempt : 4);
    if (ms > 2000) ms = 2000;
    uint64_t dl = nst_now_ns() + (uint64_t)ms * 1000000;
    pthread_mutex_lock(&s->mu);
    while (!abandoned(s) && nst_now_ns() < dl) {
        /* the condition clock is CLOCK_REALTIME by default: use a short
         * relative wait instead of an absolute monotonic deadline */
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        now.tv_nsec += 20000000;
        if (now.tv_nsec >= 1000000000) now.tv_sec++, now.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&s->room, &s->mu, &now);
    }
    pthread_mutex_unlock(&s->mu);
}

static int read_url(nst_stream *s, const char *url, collect *c)
{
    char err[CURL_ERROR_SIZE], why[CURL_ERROR_SIZE + 64], range[32];
    if (!s->curl && nst_shard_curl_new(&s->curl, s->o.timeout_ms, s->o.verify_tls, 1) < 0) {
        snprintf(why, sizeof why, "%s", nostall_last_error());
        return finish(s, c, 0, why);
    }
    CURL *h = s->curl;
    uint32_t fails = 0;
    for (;;) {
        uint64_t at = s->scan.pos;
        xfer x = {.s = s, .c = c, .at = at};
        snprintf(range, sizeof range, "%llu-", (unsigned long long)at);
        if (nst_s3_curl_url(h, url) < 0) { /* s3://: the signed request */
            snprintf(why, sizeof why, "%s", nostall_last_error());
            return finish(s, c, s->scan.pos, why);
        }
        curl_easy_setopt(h, CURLOPT_RANGE, at ? range : NULL);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, x_body);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, (void *)&x);
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, x_progress);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, (void *)&x);
        curl_easy_setopt(h, CURLOPT_ERRORBUFFER, err);
        err[0] = '\0';
        CURLcode cc = curl_easy_perform(h);
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &x.code);
        pthread_mutex_lock(&s->mu);
        s->st.requests++;
        s->st.bytes_read += x.got;
        pthread_mutex_unlock(&s->mu);
        if (x.gave_up || abandoned(s)) return -1;
        if (cc == CURLE_OK && (x.code == 200 || x.code == 206))
            return finish(s, c, s->scan.pos, NULL);
        int transient = cc != CURLE_OK || x.code >= 500 || x.code == 429;
        if (cc == CURLE_OK && x.code == 416) transient = 0;
        if (x.got) fails = 0; /* progress: a cut transfer continues */
        if (!transient || fails++ >= s->o.retries) {
            if (cc == CURLE_OK)
                snprintf(why, sizeof why, "HTTP %ld", x.code);
            else
                snprintf(why, sizeof why, "%s", err[0] ? err : curl_easy_strerror(cc));
            return finish(s, c, s->scan.pos, why);
        }
        backoff(s, fails);
        if (abandoned(s)) return -1;
    }
}

/* ---- the epoch loop -------------------------------------------------------- */

/* Read shard s (its items prepared). 0 done, -1 abandoned. */
static int read_shard(nst_stream *s, uint64_t shard)
{
    const char *path = nst_index_shard(s->ix, shard);
    collect c = {0};
    nst_tar_scan_init(&s->scan);
    s->cur = 0;
    pthread_mutex_lock(&s->mu);
    s->st.shards++;
    pthread_mutex_unlock(&s->mu);
    int rc = nst_shard_is_url(path) ? read_url(s, path, &c) : read_local(s, path, &c);
    if (rc < 0) { /* abandoned: the slots taken are orphans or freed */
        pthread_mutex_lock(&s->mu);
        for (uint64_t i = 0; i < s->nitems; i++) {
            sitem *it = &s->items[i];
            if (!it->acquired) continue;
            for (uint32_t j = 0; j < it->nloc; j++) slot_free(s, it->slot[j]);
            it->acquired = 0;
        }
        pthread_mutex_unlock(&s->mu);
    }
    return rc;
}

/* The items of shard `shard` this rank delivers from the restart point
 * on: into s->items. Returns how many. */
static uint64_t prepare(nst_stream *s, uint64_t shard)
{
    uint64_t a = nst_index_shard_first(s->ix, shard), b = nst_index_shard_first(s->ix, shard + 1);
    uint64_t want = 0;
    s->nitems = b - a;
    for (uint64_t i = a; i < b; i++) {
        sitem *it = &s->items[i - a];
        memset(it, 0, sizeof *it);
        it->item = i;
        nst_index_range(s->ix, i, &it->offset, &it->length);
        uint64_t loc[2];
        uint32_t k = nst_stream_local(&s->r_sm, s->r_epoch, s->r_inv[i], loc);
        for (uint32_t j = 0; j < k; j++)
            if (s->r_epoch != s->r_start_epoch || loc[j] >= s->r_start_pos)
                it->local[it->nloc++] = loc[j];
        want += it->nloc > 0;
    }
    return want;
}

static void *reader_main(void *arg)
{
    nst_stream *s = arg;
    uint32_t *buf = malloc((size_t)s->o.buffer * sizeof *buf);
    pthread_mutex_lock(&s->mu);
    while (!atomic_load(&s->stop)) {
        uint64_t g = atomic_load(&s->gen);
        if (s->started_gen != g) { /* a (re)start */
            s->started_gen = g;
            s->r_epoch = s->start_epoch;
        }
        if ((s->o.epochs && s->r_epoch >= s->o.epochs) || !buf) {
            pthread_cond_wait(&s->room, &s->mu);
            continue;
        }
        s->r_gen = g;
        s->r_sm = s->sm;
        s->r_start_epoch = s->start_epoch;
        s->r_start_pos = s->start_pos;
        s->reader_epoch = s->r_epoch;
        pthread_cond_broadcast(&s->more);
        pthread_mutex_unlock(&s->mu);

        order_into(s->ix, s->o.seed, s->r_epoch, s->o.buffer, s->o.shuffle, s->r_ord, s->perm, buf);
        for (uint64_t d = 0; d < s->n; d++) s->r_inv[s->r_ord[d]] = (uint32_t)d;
        shard_perm(s->ix, s->o.seed, s->r_epoch, s->o.shuffle, s->perm);
        int rc = 0;
        for (uint64_t k = 0; k < s->nshards && rc == 0; k++) {
            if (abandoned(s))
                rc = -1;
            else if (prepare(s, s->perm[k]))
                rc = read_shard(s, s->perm[k]);
        }

        pthread_mutex_lock(&s->mu);
        if (rc == 0 && atomic_load(&s->gen) == s->r_gen) {
            s->r_epoch++;
            s->reader_epoch = s->r_epoch;
            pthread_cond_broadcast(&s->more);
        }
    }
    pthread_mutex_unlock(&s->mu);
    free(buf);
    return NULL;
}

/* ---- create / free ------------------------------------------------------------ */

int nst_stream_create(nst_stream **out, const nst_index *ix, const nst_stream_opts *o)
{
    *out = NULL;
    uint64_t n = nst_index_count(ix), K = nst_index_shards(ix), most = 0;
    if (!K || n >= UINT32_MAX)
        return nst_error(NOSTALL_E_INVALID,
                         "stream: shard_mode=stream needs tar shards (under 2^32 items)");
    if (o->buffer == 0 || o->capacity < 2)
        return nst_error(NOSTALL_E_INVALID, "stream: shuffle_buffer and capacity must be >= 1");
    for (uint64_t k = 0; k < K; k++) {
        uint64_t c = nst_index_shard_first(ix, k + 1) - nst_index_shard_first(ix, k);
        if (c > most) most = c;
    }
    nst_stream *s = calloc(1, sizeof *s);
    if (!s) return nst_error(NOSTALL_E_NOMEM, "stream: out of memory");
    s->ix = ix;
    s->o = *o;
    s->n = n;
    s->nshards = K;
    s->sm = o->sampler;
    atomic_init(&s->stop, 0);
    atomic_init(&s->gen, 1);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->more, NULL);
    pthread_cond_init(&s->room, NULL);
    uint64_t tsize = 4;
    while (tsize < 2 * (uint64_t)o->capacity) tsize *= 2;
    s->tmask = tsize - 1;
    s->slots = calloc(o->capacity, sizeof *s->slots);
    s->freelist = malloc((size_t)o->capacity * sizeof *s->freelist);
    s->table = calloc(tsize, sizeof *s->table);
    s->r_ord = malloc(n * sizeof *s->r_ord);
    s->r_inv = malloc(n * sizeof *s->r_inv);
    s->perm = malloc(K * sizeof *s->perm);
    s->items = malloc((most ? most : 1) * sizeof *s->items);
    s->chunk = malloc(NST_STREAM_CHUNK);
    int ok = s->slots && s->freelist && s->table && s->r_ord && s->r_inv && s->perm && s->items &&
             s->chunk;
    for (int i = 0; i < NST_STREAM_EPOCHS && ok; i++) /* order, its perm and buffer scratch */
        ok = (s->ord[i] = malloc((n + K + o->buffer) * sizeof(uint32_t))) != NULL;
    if (!ok) {
        nst_stream_free(s);
        return nst_error(NOSTALL_E_NOMEM, "stream: out of memory for %llu items",
                         (unsigned long long)n);
    }
    for (uint32_t k = 0; k < o->capacity; k++) s->freelist[k] = o->capacity - 1 - k;
    s->nfree = o->capacity;
    if (pthread_create(&s->thread, NULL, reader_main, s) != 0) {
        nst_stream_free(s);
        return nst_error(NOSTALL_E_THREAD, "stream: cannot start the reader thread");
    }
    s->started = 1;
    *out = s;
    return 0;
}

void nst_stream_free(nst_stream *s)
{
    if (!s) return;
    nst_stream_stop(s);
    if (s->started) pthread_join(s->thread, NULL);
    if (s->curl) curl_easy_cleanup((CURL *)s->curl);
    for (uint32_t k = 0; s->slots && k < s->o.capacity; k++) nst_buf_free(&s->slots[k].buf);
    for (int i = 0; i < NST_STREAM_EPOCHS; i++) free(s->ord[i]);
    free(s->slots);
    free(s->freelist);
    free(s->table);
    free(s->r_ord);
    free(s->r_inv);
    free(s->perm);
    free(s->items);
    free(s->chunk);
    pthread_cond_destroy(&s->more);
    pthread_cond_destroy(&s->room);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
