/*
 * partitioned.c — libnostall_mpi: the partitioned cache (nostall_mpi.h).
 *
 * Threads:
 *   - the caller of attach/detach (collectives at attach, before the
 *     progress thread exists; detach only signals the progress thread);
 *   - loader worker threads in hook_get/hook_put: they read the plan
 *     (immutable after attach) and the arena (lock-free), and hand requests
 *     and pushes to the progress thread through queues under `mu`;
 *   - the progress thread: after attach, the only thread of this library
 *     that calls MPI. It posts every operation non-blocking and tests them,
 *     so it never blocks in MPI on a slow or dead peer.
 *
 * Guards: `mu` guards the two queues, the request states/refcounts and the
 *   detach flags. A request (preq) is shared by its worker and the progress
 *   thread (refs = 2); the worker gives up its reference on completion or
 *   at its deadline (then `abandoned` is set and the progress thread drops
 *   the late reply); the last reference frees it. Counters are relaxed
 *   atomics; peer `down` flags are atomics (a hint, not a guard): set when
 *   a request to the peer times out, cleared only when a reply from it
 *   arrives (a late reply to an abandoned request proves it serves again).
 *
 * Wire (all MPI_BYTE on the duplicated communicator):
 *   TAG_REQ   requester -> owner: wire_req {index, id, reply tag}
 *   reply     owner -> requester on the reply tag: wire_hdr + item bytes (HIT)
 *             or wire_hdr alone (MISS)
 *   TAG_PUSH  non-owner -> owner: wire_hdr + item bytes it read from storage
 */
#include "nostall_mpi.h"
#include "nostall_dataset.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/testhooks.h"
#include "mpi/arena.h"

enum { TAG_REQ = 1, TAG_PUSH = 2, TAG_REPLY_BASE = 16 };
enum { NSERVE = 16 };
/* Pushes queued or in flight from this rank, at most this many bytes (a
 * slow owner must not make a pusher buffer without bound): beyond, the
 * push is skipped (the owner reads the item itself when it needs it). */
#define MAX_PUSH_BYTES (64ull << 20)
/* Fault injection for tests (environment, read at attach; only in a
 * test-hooks build, common/testhooks.h):
 * NOSTALL_MPI_FAULT=corrupt|silent on the rank NOSTALL_MPI_FAULT_RANK:
 * corrupt flips one byte of every item it serves (after the checksum was
 * recorded); silent never answers a request (a hung peer). */
enum { FAULT_NONE = 0, FAULT_CORRUPT = 1, FAULT_SILENT = 2 };
#define MAGIC_HIT 0x4e4d504948495421ull /* replies and pushes carry one */
#define MAGIC_MISS 0x4e4d50494d495353ull
#define MAGIC_PUSH 0x4e4d504950555348ull

typedef struct wire_req {
    uint64_t index, id;
    int64_t tag;
} wire_req;

typedef struct wire_hdr {
    uint64_t magic, index, id, len, csum;
} wire_hdr;

/* One remote request of a worker. */
typedef struct preq {
    struct preq *next;
    uint64_t index, id, expect;
    int owner, refs, done, abandoned, err;
    wire_req msg;
    uint8_t *rbuf;
    size_t rcap;
    int rcount;
    MPI_Request rr, sr;
    int rr_live, sr_live;
    uint64_t t0;
    pthread_cond_t cv;
} preq;

/* A message this rank sends (push, reply) or receives (push). */
typedef struct omsg {
    struct omsg *next;
    int peer, push;
    uint8_t *buf;
    size_t len;
    MPI_Request r;
} omsg;

typedef struct serve_slot {
    wire_req msg;
    MPI_Request r;
    int live;
} serve_slot;

/* clang-format off: one field per line (clang-format 14 wraps an X-list
   differently on each pass) */
#define COUNTERS(X)                                                                                \
    X(local_hits)                                                                                  \
    X(remote_hits)                                                                                 \
    X(remote_misses)                                                                               \
    X(storage_reads)                                                                               \
    X(storage_bytes)                                                                               \
    X(net_bytes_in)                                                                                \
    X(net_bytes_out)                                                                               \
    X(requests_served)                                                                             \
    X(served_hits)                                                                                 \
    X(pushes_sent)                                                                                 \
    X(pushes_received)                                                                             \
    X(timeouts)                                                                                    \
    X(skipped_down)                                                                                \
    X(verify_failures)                                                                             \
    X(remote_ns)                                                                                   \
    X(parked)
/* clang-format on */

struct nostall_mpi {
    MPI_Comm comm;
    int rank, world, tag_span;
    nostall_mpi_options opt;
    uint64_t n;
    uint64_t *size;             /* planned size of each item (0: unknown) */
    int32_t *owner;             /* owner rank of each item, -1: nobody    */
    _Atomic uint64_t *incoming; /* owned item i: when a reader of it was
                                   last seen (a miss answered), 0: never */
    uint64_t park_ns;           /* how long a push is waited for         */
    uint64_t owned_items, owned_bytes, unowned_items;
    nmpi_arena *arena;
    _Atomic int *down, *warned;

    pthread_mutex_t mu;
    pthread_cond_t wake;      /* progress thread: new work                 */
    pthread_cond_t detach_cv; /* detach: barrier done                      */
    preq *qhead, *qtail;      /* new requests                              */
    omsg *phead, *ptail;      /* new pushes                                */
    _Atomic uint64_t push_bytes;
    uint64_t next_id;
    int stop, detaching, barrier_done;
    pthread_t thr;
    int thr_started;
    int verify_warned;
    int fault; /* testing: NOSTALL_MPI_FAULT on NOSTALL_MPI_FAULT_RANK */

#define CNT_FIELD_(name) _Atomic uint64_t name;
    COUNTERS(CNT_FIELD_)
#undef CNT_FIELD_
};

#define CADD(m, f, v) atomic_fetch_add_explicit(&(m)->f, (uint64_t)(v), memory_order_relaxed)

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static struct timespec abs_deadline(uint64_t from_now_ns)
{
    uint64_t t = now_ns() + from_now_ns;
    struct timespec ts = {(time_t)(t / 1000000000ull), (long)(t % 1000000000ull)};
    return ts;
}

static int fail(int status, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return nostall_error_set(status, msg);
}

static uint64_t checksum(const void *data, size_t len)
{
    uint64_t st = 0;
    nostall_checksum_update(&st, data, len);
    return st;
}

static void mark_down(nostall_mpi *m, int peer, uint64_t index, const char *why)
{
    atomic_store(&m->down[peer], 1);
    if (!atomic_exchange(&m->warned[peer], 1) && !m->opt.quiet)
        fprintf(stderr,
                "nostall_mpi: rank %d: %s from rank %d for item %llu within %u ms; "
                "reading items owned by rank %d from storage until it answers again\n",
                m->rank, why, peer, (unsigned long long)index, m->opt.timeout_ms, peer);
}

static void peer_alive(nostall_mpi *m, int peer)
{
    if (peer >= 0 && peer < m->world && atomic_load_explicit(&m->down[peer], memory_order_relaxed))
        atomic_store(&m->down[peer], 0);
}

/* This rank owns `index` and someone (a peer told "miss", or our own loader)
 * is reading it from storage now: its bytes will arrive by push or put. */
static void mark_incoming(nostall_mpi *m, uint64_t index, int local)
{
    uint64_t t = (now_ns() & ~1ull) | (uint64_t)(local != 0); /* bit 0: our own loader */
    atomic_store_explicit(&m->incoming[index], t, memory_order_relaxed);
}

/* Caller holds mu. */
static void preq_unref(preq *r)
{
    if (--r->refs == 0) {
        pthread_cond_destroy(&r->cv);
        free(r->rbuf);
        free(r);
    }
}

/* ------------------------------------------------------------------------
 * Hooks (loader worker threads).
 * ------------------------------------------------------------------------ */
/* One request for item `index` to its owner `o`, answered by `deadline`
 * (monotonic ns): 1 hit (bytes in buf), 0 miss, -1 timeout or rejected. */
static int remote_get(nostall_mpi *m, uint64_t index, int o, nostall_fetch_buf *buf, size_t *len,
                      uint64_t deadline)
{
    preq *r = calloc(1, sizeof *r);
    if (!r) return 0;
    r->rcap = sizeof(wire_hdr) + m->size[index];
    r->rbuf = malloc(r->rcap);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int crc = pthread_cond_init(&r->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (!r->rbuf || crc) {
        free(r->rbuf);
        free(r);
        return 0;
    }
    r->index = index;
    r->owner = o;
    r->expect = m->size[index];
    r->refs = 2;
    r->t0 = now_ns();
    struct timespec dl = {(time_t)(deadline / 1000000000ull), (long)(deadline % 1000000000ull)};

    pthread_mutex_lock(&m->mu);
    r->id = ++m->next_id;
    r->msg.index = index;
    r->msg.id = r->id;
    r->msg.tag = TAG_REPLY_BASE + (int64_t)(r->id % (uint64_t)m->tag_span);
    if (m->qtail)
        m->qtail->next = r;
    else
        m->qhead = r;
    m->qtail = r;
    pthread_cond_signal(&m->wake);
    while (!r->done) {
        if (pthread_cond_timedwait(&r->cv, &m->mu, &dl) == ETIMEDOUT && !r->done) break;
    }
    if (!r->done) {
        r->abandoned = 1;
        preq_unref(r);
        pthread_mutex_unlock(&m->mu);
        CADD(m, timeouts, 1);
        mark_down(m, o, index, "no reply");
        return -1;
    }
    pthread_mutex_unlock(&m->mu);

    int ok = 0;
    wire_hdr h;
    if (!r->err && r->rcount >= (int)sizeof h) {
        memcpy(&h, r->rbuf, sizeof h);
        const uint8_t *data = r->rbuf + sizeof h;
        if (h.index != index || h.id != r->id) {
            ok = -1;
        } else if (h.magic == MAGIC_MISS && r->rcount == (int)sizeof h) {
            CADD(m, remote_misses, 1);
        } else if (h.magic == MAGIC_HIT && h.len == r->expect &&
                   (uint64_t)r->rcount == sizeof h + h.len && checksum(data, h.len) == h.csum) {
            void *dst = nostall_fetch_buf_reserve(buf, h.len);
            if (dst) {
                memcpy(dst, data, h.len);
                *len = h.len;
                ok = 1;
                CADD(m, remote_hits, 1);
                CADD(m, net_bytes_in, h.len);
                CADD(m, remote_ns, now_ns() - r->t0);
            }
        } else {
            ok = -1;
        }
    } else {
        ok = -1;
    }
    if (ok < 0) {
        CADD(m, verify_failures, 1);
        if (!m->opt.quiet && !__atomic_exchange_n(&m->verify_warned, 1, __ATOMIC_RELAXED))
            fprintf(stderr,
                    "nostall_mpi: rank %d: reply from rank %d for item %llu rejected "
                    "(%s); reading it from storage\n",
                    m->rank, o, (unsigned long long)index,
                    r->err ? "MPI error" : "size, checksum or identity mismatch");
    }
    pthread_mutex_lock(&m->mu);
    preq_unref(r);
    pthread_mutex_unlock(&m->mu);
    return ok;
}

static int hook_get(void *ctx, uint64_t index, nostall_fetch_buf *buf, size_t *len)
{
    nostall_mpi *m = ctx;
    if (index >= m->n) return 0;
    int o = m->owner[index];
    if (o < 0) return 0;
    if (o == m->rank) {
        const uint8_t *d;
        size_t l;
        if (!nmpi_arena_get(m->arena, index, &d, &l, NULL)) {
            /* A peer was told "miss" a moment ago, so it is reading the item
             * and will push it here: wait for that rather than read too. */
            uint64_t t = atomic_load_explicit(&m->incoming[index], memory_order_relaxed);
            int got = 0;
            if (t && !(t & 1)) {
                while (now_ns() - t < m->park_ns &&
                       !(got = nmpi_arena_get(m->arena, index, &d, &l, NULL))) {
                    struct timespec ts = {0, 200000};
                    nanosleep(&ts, NULL);
                }
            }
            if (!got) {
                mark_incoming(m, index, 1); /* our loader reads it now, then put */
                return 0;
            }
            CADD(m, parked, 1);
        }
        void *dst = nostall_fetch_buf_reserve(buf, l);
        if (!dst) return 0;
        memcpy(dst, d, l);
        *len = l;
        CADD(m, local_hits, 1);
        return 1;
    }
    if (atomic_load_explicit(&m->down[o], memory_order_relaxed)) {
        CADD(m, skipped_down, 1);
        return 0;
    }
    uint64_t deadline = now_ns() + (uint64_t)m->opt.timeout_ms * 1000000ull;
    return remote_get(m, index, o, buf, len, deadline) > 0;
}

static void hook_put(void *ctx, uint64_t index, const void *data, size_t len)
{
    nostall_mpi *m = ctx;
    CADD(m, storage_reads, 1);
    CADD(m, storage_bytes, len);
    if (index >= m->n || len == 0) return;
    int o = m->owner[index];
    if (o < 0 || len != m->size[index]) return; /* not planned, or changed on storage */
    uint64_t cs = checksum(data, len);
    if (o == m->rank) {
        nmpi_arena_put(m->arena, index, data, len, cs);
        return;
    }
    if (m->opt.no_push || atomic_load_explicit(&m->down[o], memory_order_relaxed)) return;
    omsg *p = malloc(sizeof *p);
    uint8_t *b = malloc(sizeof(wire_hdr) + len);
    if (!p || !b) {
        free(p);
        free(b);
        return;
    }
    wire_hdr h = {MAGIC_PUSH, index, 0, len, cs};
    memcpy(b, &h, sizeof h);
    memcpy(b + sizeof h, data, len);
    p->next = NULL;
    p->peer = o;
    p->push = 1;
    p->buf = b;
    p->len = sizeof h + len;
    pthread_mutex_lock(&m->mu);
    if (atomic_load(&m->push_bytes) + p->len > MAX_PUSH_BYTES || m->stop) {
        pthread_mutex_unlock(&m->mu);
        free(b);
        free(p);
        return;
    }
    atomic_fetch_add(&m->push_bytes, p->len);
    if (m->ptail)
        m->ptail->next = p;
    else
        m->phead = p;
    m->ptail = p;
    pthread_cond_signal(&m->wake);
    pthread_mutex_unlock(&m->mu);
}

/* ------------------------------------------------------------------------
 * Progress thread.
 * ------------------------------------------------------------------------ */
/* A peer's request for an item being read right now (see serve_request). */
typedef struct parked {
    struct parked *next;
    int src;
    wire_req q;
    uint64_t deadline;
} parked;

typedef struct plists {
    parked *parked; /* requests waiting for a push            */
    preq *active;   /* requests with operations posted        */
    omsg *sends;    /* replies and pushes being sent          */
    omsg *precv;    /* pushes being received                  */
    serve_slot serve[NSERVE];
    MPI_Request barrier;
    int barrier_live, barrier_entered;
} plists;

static void post_serve(nostall_mpi *m, serve_slot *s)
{
    s->live = MPI_Irecv(&s->msg, sizeof s->msg, MPI_BYTE, MPI_ANY_SOURCE, TAG_REQ, m->comm,
                        &s->r) == MPI_SUCCESS;
}

static void omsg_free(nostall_mpi *m, omsg *o)
{
    if (o->push) atomic_fetch_sub(&m->push_bytes, o->len);
    free(o->buf);
    free(o);
}

static void send_msg(nostall_mpi *m, plists *L, omsg *o, int tag)
{
    if (MPI_Isend(o->buf, (int)o->len, MPI_BYTE, o->peer, tag, m->comm, &o->r) != MPI_SUCCESS) {
        omsg_free(m, o);
        return;
    }
    o->next = L->sends;
    L->sends = o;
}

static void serve_request(nostall_mpi *m, plists *L, int src, const wire_req *q, int park)
{
    if (m->fault == FAULT_SILENT) return;
    if (park) CADD(m, requests_served, 1);
    if (q->tag < TAG_REPLY_BASE || q->tag >= TAG_REPLY_BASE + (int64_t)m->tag_span) return;
    const uint8_t *d = NULL;
    size_t l = 0;
    uint64_t cs = 0;
    int hit = q->index < m->n && nmpi_arena_get(m->arena, q->index, &d, &l, &cs);
    omsg *o = calloc(1, sizeof *o);
    uint8_t *b = malloc(sizeof(wire_hdr) + (hit ? l : 0));
    if (!o || !b) {
        free(o);
        free(b);
        return;
    }
    if (!hit && q->index < m->n && m->owner[q->index] == m->rank && park) {
        /* Someone is reading it from storage right now (it missed here a
         * moment ago): wait for its push instead of sending this requester
         * to storage too. Happens where epochs meet: a rank's loader
         * prefetches epoch e+1 while another still reads epoch e's last
         * items. */
        uint64_t t = atomic_load_explicit(&m->incoming[q->index], memory_order_relaxed),
                 now = now_ns();
        if (t && now - t < m->park_ns) {
            parked *pk = malloc(sizeof *pk);
            if (pk) {
                pk->src = src;
                pk->q = *q;
                pk->deadline = t + m->park_ns;
                pk->next = L->parked;
                L->parked = pk;
                CADD(m, parked, 1);
                return;
            }
        }
        if (!m->opt.no_push) mark_incoming(m, q->index, 0); /* it will read it and push */
    }
    wire_hdr h = {hit ? MAGIC_HIT : MAGIC_MISS, q->index, q->id, hit ? l : 0, cs};
    memcpy(b, &h, sizeof h);
    if (hit) {
        memcpy(b + sizeof h, d, l);
        if (m->fault == FAULT_CORRUPT) b[sizeof h + l / 2] ^= 0x5a;
        CADD(m, served_hits, 1);
        CADD(m, net_bytes_out, l);
    }
    o->peer = src;
    o->buf = b;
    o->len = sizeof h + (hit ? l : 0);
    send_msg(m, L, o, (int)q->tag);
}

static void receive_push(nostall_mpi *m, omsg *o)
{
    wire_hdr h;
    if (o->len < sizeof h) return;
    memcpy(&h, o->buf, sizeof h);
    if (h.magic != MAGIC_PUSH || h.index >= m->n || m->owner[h.index] != m->rank ||
        h.len != m->size[h.index] || o->len != sizeof h + h.len ||
        checksum(o->buf + sizeof h, h.len) != h.csum) {
        CADD(m, verify_failures, 1);
        return;
    }
    CADD(m, pushes_received, 1);
    CADD(m, net_bytes_in, h.len);
    nmpi_arena_put(m->arena, h.index, o->buf + sizeof h, h.len, h.csum);
}

/* One pass over everything in flight; returns how much completed. */
static int progress_pass(nostall_mpi *m, plists *L)
{
    int done = 0, flag;
    MPI_Status st;
    for (int k = 0; k < NSERVE; k++) {
        serve_slot *s = &L->serve[k];
        if (!s->live) {
            post_serve(m, s);
            continue;
        }
        if (MPI_Test(&s->r, &flag, &st) != MPI_SUCCESS) {
            s->live = 0;
            continue;
        }
        if (flag) {
            s->live = 0;
            wire_req q = s->msg;
            int cnt = 0;
            MPI_Get_count(&st, MPI_BYTE, &cnt);
            if (cnt == (int)sizeof q) serve_request(m, L, st.MPI_SOURCE, &q, 1);
            post_serve(m, s);
            done++;
        }
    }
    for (;;) { /* pushes arriving */
        MPI_Message msg;
        if (MPI_Improbe(MPI_ANY_SOURCE, TAG_PUSH, m->comm, &flag, &msg, &st) != MPI_SUCCESS || !flag)
            break;
        int cnt = 0;
        MPI_Get_count(&st, MPI_BYTE, &cnt);
        omsg *o = calloc(1, sizeof *o);
        uint8_t *b = malloc(cnt > 0 ? (size_t)cnt : 1);
        if (!o || !b) { /* receive and drop */
            free(o);
            free(b);
            uint8_t *tmp = malloc(cnt > 0 ? (size_t)cnt : 1);
            MPI_Request r;
            if (tmp && MPI_Imrecv(tmp, cnt, MPI_BYTE, &msg, &r) == MPI_SUCCESS)
                MPI_Wait(&r, MPI_STATUS_IGNORE);
            free(tmp);
            continue;
        }
        o->peer = st.MPI_SOURCE;
        o->buf = b;
        o->len = (size_t)cnt;
        if (MPI_Imrecv(b, cnt, MPI_BYTE, &msg, &o->r) != MPI_SUCCESS) {
            free(b);
            free(o);
            continue;
        }
        o->next = L->precv;
        L->precv = o;
        done++;
    }
    for (omsg **pp = &L->precv; *pp;) {
        omsg *o = *pp;
        if (MPI_Test(&o->r, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || flag) {
            if (flag) receive_push(m, o);
            *pp = o->next;
            free(o->buf);
            free(o);
            done++;
        } else {
            pp = &o->next;
        }
    }
    if (L->parked) {
        uint64_t now = now_ns();
        for (parked **pp = &L->parked; *pp;) {
            parked *pk = *pp;
            const uint8_t *d;
            size_t l;
            if (nmpi_arena_get(m->arena, pk->q.index, &d, &l, NULL) || now >= pk->deadline) {
                *pp = pk->next;
                serve_request(m, L, pk->src, &pk->q, 0);
                free(pk);
                done++;
            } else {
                pp = &pk->next;
            }
        }
    }
    for (omsg **pp = &L->sends; *pp;) {
        omsg *o = *pp;
        if (MPI_Test(&o->r, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || flag) {
            *pp = o->next;
            omsg_free(m, o);
            done++;
        } else {
            pp = &o->next;
        }
    }
    for (preq **pp = &L->active; *pp;) {
        preq *r = *pp;
        if (r->rr_live) {
            int rc = MPI_Test(&r->rr, &flag, &st);
            if (rc != MPI_SUCCESS || flag) {
                r->rr_live = 0;
                int cnt = 0;
                if (rc == MPI_SUCCESS) {
                    MPI_Get_count(&st, MPI_BYTE, &cnt);
                    peer_alive(m, r->owner);
                }
                pthread_mutex_lock(&m->mu);
                r->rcount = cnt;
                r->err = rc != MPI_SUCCESS;
                r->done = 1;
                if (!r->abandoned) pthread_cond_signal(&r->cv);
                pthread_mutex_unlock(&m->mu);
                done++;
            }
        }
        if (r->sr_live) {
            int rc = MPI_Test(&r->sr, &flag, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS || flag) r->sr_live = 0;
        }
        if (!r->rr_live && !r->sr_live) {
            *pp = r->next;
            pthread_mutex_lock(&m->mu);
            preq_unref(r);
            pthread_mutex_unlock(&m->mu);
        } else {
            pp = &r->next;
        }
    }
    return done;
}

static void start_request(nostall_mpi *m, plists *L, preq *r)
{
    int rc = MPI_Irecv(r->rbuf, (int)r->rcap, MPI_BYTE, r->owner, (int)r->msg.tag, m->comm, &r->rr);
    if (rc == MPI_SUCCESS) {
        r->rr_live = 1;
        rc = MPI_Isend(&r->msg, sizeof r->msg, MPI_BYTE, r->owner, TAG_REQ, m->comm, &r->sr);
        if (rc == MPI_SUCCESS)
            r->sr_live = 1;
        else {
            MPI_Cancel(&r->rr);
            MPI_Wait(&r->rr, MPI_STATUS_IGNORE); /* a cancelled receive completes locally */
            r->rr_live = 0;
        }
    }
    if (rc != MPI_SUCCESS) {
        pthread_mutex_lock(&m->mu);
        r->err = 1;
        r->done = 1;
        if (!r->abandoned) pthread_cond_signal(&r->cv);
        preq_unref(r);
        pthread_mutex_unlock(&m->mu);
        return;
    }
    r->next = L->active;
    L->active = r;
}

/* Cancel what can be cancelled and give up on the rest (bounded). */
static void drain(nostall_mpi *m, plists *L)
{
    int flag;
    for (int k = 0; k < NSERVE; k++)
        if (L->serve[k].live) {
            MPI_Cancel(&L->serve[k].r);
            MPI_Wait(&L->serve[k].r, MPI_STATUS_IGNORE);
            L->serve[k].live = 0;
        }
    for (preq *r = L->active; r; r = r->next)
        if (r->rr_live) MPI_Cancel(&r->rr);
    uint64_t until = now_ns() + 200000000ull; /* sends to a dead peer never end */
    while ((L->active || L->sends || L->precv) && now_ns() < until) {
        progress_pass(m, L);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    while (L->parked) {
        parked *pk = L->parked;
        L->parked = pk->next;
        free(pk);
    }
    /* Whatever is left references memory MPI may still write: leak it. */
    (void)flag;
}

static void *progress_main(void *arg)
{
    nostall_mpi *m = arg;
    plists L;
    memset(&L, 0, sizeof L);
    for (int k = 0; k < NSERVE; k++) post_serve(m, &L.serve[k]);
    uint64_t idle_ns = 20000, detach_t0 = 0;
    for (;;) {
        pthread_mutex_lock(&m->mu);
        preq *q = m->qhead;
        omsg *p = m->phead;
        m->qhead = m->qtail = NULL;
        m->phead = m->ptail = NULL;
        int stop = m->stop, detaching = m->detaching;
        pthread_mutex_unlock(&m->mu);
        if (stop) break;
        int work = 0;
        while (q) {
            preq *nx = q->next;
            q->next = NULL;
            start_request(m, &L, q);
            q = nx;
            work++;
        }
        while (p) {
            omsg *nx = p->next;
            CADD(m, pushes_sent, 1);
            CADD(m, net_bytes_out, p->len - sizeof(wire_hdr));
            send_msg(m, &L, p, TAG_PUSH);
            p = nx;
            work++;
        }
        work += progress_pass(m, &L);
        /* Detach: first let this rank's sends complete (a completed send
         * was matched by its receiver, who keeps serving until the barrier
         * completes), then enter the barrier; a send to a dead peer never
         * completes, so give up waiting for sends at half the timeout. */
        if (detaching && !detach_t0) detach_t0 = now_ns();
        if (detaching && !L.barrier_live && !m->barrier_done && !L.barrier_entered &&
            (!L.sends || now_ns() - detach_t0 > (uint64_t)m->opt.detach_timeout_ms * 500000ull)) {
            L.barrier_entered = 1;
            if (MPI_Ibarrier(m->comm, &L.barrier) == MPI_SUCCESS)
                L.barrier_live = 1;
            else {
                pthread_mutex_lock(&m->mu);
                m->barrier_done = -1;
                pthread_cond_broadcast(&m->detach_cv);
                pthread_mutex_unlock(&m->mu);
            }
        }
        if (L.barrier_live) {
            int flag = 0;
            if (MPI_Test(&L.barrier, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || flag) {
                L.barrier_live = 0;
                pthread_mutex_lock(&m->mu);
                m->barrier_done = flag ? 1 : -1;
                pthread_cond_broadcast(&m->detach_cv);
                pthread_mutex_unlock(&m->mu);
            }
        }
        if (work) {
            idle_ns = 20000;
            continue;
        }
        /* Nothing completed: sleep a little (2 cores are shared with the
         * loader's workers), longer the longer nothing happens; a worker's
         * request wakes us at once. */
        pthread_mutex_lock(&m->mu);
        if (!m->qhead && !m->phead && !m->stop) {
            struct timespec dl = abs_deadline(idle_ns);
            pthread_cond_timedwait(&m->wake, &m->mu, &dl);
        }
        pthread_mutex_unlock(&m->mu);
        /* Up to 200 us idle; 50 us while replies are awaited or sends
         * are in flight (a remote hit's latency is mostly this polling). */
        uint64_t cap = (L.active || L.sends || L.precv) ? 50000 : 200000;
        if (idle_ns < cap) idle_ns += idle_ns / 2;
        if (idle_ns > cap) idle_ns = cap;
    }
    drain(m, &L);
    return NULL;
}

/* ------------------------------------------------------------------------
 * Attach / detach.
 * ------------------------------------------------------------------------ */
typedef struct learn_result {
    int64_t status;
    uint64_t n;
    char msg[400];
} learn_result;

/* Rank 0: index `source` as the loader does (a dataset: no thread, no
 * ring) and stat every item. */
static void learn_sizes(const char *source, learn_result *res, uint64_t **sizes)
{
    nostall_config *c = NULL;
    nostall_dataset *ds = NULL;
    int rc = nostall_config_create(&c);
    const char *kv[][2] = {{"cache", "none"},
                           {"mode", "eval"},
                           {"crop", "8"},
                           {"resize", "8"},
                           {"shuffle", "0"}};
    for (size_t i = 0; rc == 0 && i < sizeof kv / sizeof kv[0]; i++)
        rc = nostall_config_set(c, kv[i][0], kv[i][1]);
    if (rc == 0) rc = nostall_dataset_open(&ds, source, c);
    nostall_config_free(c);
    if (rc < 0) {
        res->status = rc;
        snprintf(res->msg, sizeof res->msg, "%s", nostall_last_error());
        return;
    }
    const uint64_t n = nostall_dataset_count(ds);
    res->n = n;
    *sizes = calloc(n ? n : 1, sizeof **sizes);
    if (!*sizes) {
        res->status = NOSTALL_E_NOMEM;
        snprintf(res->msg, sizeof res->msg, "no memory for %llu item sizes", (unsigned long long)n);
    } else {
        for (uint64_t i = 0; i < n; i++) {
            const char *path;
            struct stat sb;
            if (nostall_dataset_item(ds, i, &path, NULL, NULL, NULL) == 0 && stat(path, &sb) == 0 &&
                S_ISREG(sb.st_mode))
                (*sizes)[i] = (uint64_t)sb.st_size;
        }
    }
    nostall_dataset_free(ds);
}

static int bcast_u64(uint64_t *v, uint64_t n, MPI_Comm comm)
{
    const uint64_t chunk = 1u << 24;
    for (uint64_t off = 0; off < n; off += chunk) {
        uint64_t k = n - off < chunk ? n - off : chunk;
        int rc = MPI_Bcast(v + off, (int)k, MPI_UINT64_T, 0, comm);
        if (rc != MPI_SUCCESS) return rc;
    }
    return MPI_SUCCESS;
}

static void free_mpi(nostall_mpi *m)
{
    if (!m) return;
    nmpi_arena_free(m->arena);
    free(m->size);
    free(m->owner);
    free((void *)m->incoming);
    free((void *)m->down);
    free((void *)m->warned);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->wake);
    pthread_cond_destroy(&m->detach_cv);
    free(m);
}

/* The plan: item i to rank i % W if it has room (caps: every rank's
 * cache_bytes, used up here), else the next with room, else nobody. Same
 * inputs on every rank -> same plan. */
static void plan_owners(nostall_mpi *m, uint64_t *caps)
{
    uint64_t open = 0;
    for (int r = 0; r < m->world; r++) open += caps[r] > 0;
    for (uint64_t i = 0; i < m->n; i++) {
        uint64_t s = m->size[i];
        m->owner[i] = -1;
        if (s == 0 || open == 0) {
            m->unowned_items++;
            continue;
        }
        int p = (int)(i % (uint64_t)m->world);
        for (int k = 0; k < m->world; k++) {
            int r = (p + k) % m->world;
            if (caps[r] >= s) {
                caps[r] -= s;
                if (caps[r] == 0) open--;
                m->owner[i] = r;
                break;
            }
        }
        if (m->owner[i] < 0) {
            m->unowned_items++;
            continue;
        }
        if (m->owner[i] == m->rank) {
            m->owned_items++;
            m->owned_bytes += s;
        }
    }
}

int nostall_mpi_attach(nostall_mpi **out, nostall_config *cfg, MPI_Comm comm, const char *source,
                       uint64_t cache_bytes)
{
    return nostall_mpi_attach_opts(out, cfg, comm, source, cache_bytes, NULL, 0);
}

int nostall_mpi_attach_opts(nostall_mpi **out, nostall_config *cfg, MPI_Comm comm,
                            const char *source, uint64_t cache_bytes,
                            const nostall_mpi_options *opts_in, size_t opts_size)
{
    nostall_mpi_options opts_buf = {0};
    if (opts_in)
        memcpy(&opts_buf, opts_in, opts_size < sizeof opts_buf ? opts_size : sizeof opts_buf);
    const nostall_mpi_options *opts = opts_in ? &opts_buf : NULL;
    static const char fn[] = "nostall_mpi_attach";
    int flag = 0, provided = 0, rc;
    if (!out) return fail(NOSTALL_E_INVALID, "%s: out is NULL", fn);
    *out = NULL;
    if (!cfg || !source) return fail(NOSTALL_E_INVALID, "%s: cfg or source is NULL", fn);
    MPI_Initialized(&flag);
    if (!flag)
        return fail(NOSTALL_E_STATE,
                    "%s: MPI is not initialized (call MPI_Init_thread first; "
                    "the library never initializes MPI)",
                    fn);
    MPI_Finalized(&flag);
    if (flag) return fail(NOSTALL_E_STATE, "%s: MPI is already finalized", fn);
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_MULTIPLE)
        return fail(NOSTALL_E_INVALID,
                    "%s: MPI thread level %d provided; MPI_THREAD_MULTIPLE (%d) is required "
                    "(initialize with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...))",
                    fn, provided, MPI_THREAD_MULTIPLE);

    nostall_mpi *m = calloc(1, sizeof *m);
    if (!m) return fail(NOSTALL_E_NOMEM, "%s: out of memory", fn);
    pthread_mutex_init(&m->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&m->wake, &ca);
    pthread_cond_init(&m->detach_cv, &ca);
    pthread_condattr_destroy(&ca);
    if (opts) m->opt = *opts;
    if (!m->opt.timeout_ms) m->opt.timeout_ms = 2000;
    if (!m->opt.detach_timeout_ms) m->opt.detach_timeout_ms = 30000;

    if ((rc = MPI_Comm_dup(comm, &m->comm)) != MPI_SUCCESS) {
        free_mpi(m);
        return fail(NOSTALL_E_INVALID, "%s: MPI_Comm_dup failed (%d)", fn, rc);
    }
    MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(m->comm, &m->rank);
    MPI_Comm_size(m->comm, &m->world);
    const char *fe = nst_test_env("NOSTALL_MPI_FAULT"), *fr = nst_test_env("NOSTALL_MPI_FAULT_RANK");
    if (fe && fr && atoi(fr) == m->rank) {
        m->fault = !strcmp(fe, "corrupt")  ? FAULT_CORRUPT
                   : !strcmp(fe, "silent") ? FAULT_SILENT
                                           : 0;
        if (m->fault && !m->opt.quiet)
            fprintf(stderr, "nostall_mpi: rank %d: fault injection '%s' (testing)\n", m->rank, fe);
    }
    void *ub = NULL;
    MPI_Comm_get_attr(m->comm, MPI_TAG_UB, &ub, &flag);
    int tag_ub = flag && ub ? *(int *)ub : 32767;
    m->tag_span = tag_ub - TAG_REPLY_BASE;

    /* Rank 0 learns the item sizes; everyone learns them or its error. */
    learn_result res;
    memset(&res, 0, sizeof res);
    if (m->rank == 0) learn_sizes(source, &res, &m->size);
    rc = MPI_Bcast(&res, sizeof res, MPI_BYTE, 0, m->comm);
    if (rc != MPI_SUCCESS || res.status < 0) {
        int st = rc != MPI_SUCCESS ? NOSTALL_E_IO : (int)res.status, r = m->rank;
        MPI_Comm_free(&m->comm);
        free_mpi(m);
        if (rc != MPI_SUCCESS)
            return fail(st, "%s: rank %d: MPI_Bcast of the dataset index failed (%d)", fn, r, rc);
        return fail(st, "%s: rank %d: rank 0 could not index '%s': %s", fn, r, source, res.msg);
    }
    m->n = res.n;

    /* Local allocations, then agree: every rank goes on, or all fail. */
    size_t nn = m->n ? m->n : 1;
    if (m->rank != 0) m->size = calloc(nn, sizeof *m->size);
    m->owner = malloc(nn * sizeof *m->owner);
    m->incoming = calloc(nn, sizeof *m->incoming);
    m->down = calloc((size_t)m->world, sizeof *m->down);
    m->warned = calloc((size_t)m->world, sizeof *m->warned);
    uint64_t *caps = calloc((size_t)m->world, sizeof *caps);
    m->park_ns = (uint64_t)m->opt.timeout_ms * 1000000ull / 2;
    int lerr = !m->size || !m->owner || !m->incoming || !m->down || !m->warned || !caps, gerr = 0;
    rc = MPI_Allreduce(&lerr, &gerr, 1, MPI_INT, MPI_MAX, m->comm);
    if (rc == MPI_SUCCESS && !gerr) rc = bcast_u64(m->size, m->n, m->comm);
    if (rc == MPI_SUCCESS && !gerr)
        rc = MPI_Allgather(&cache_bytes, 1, MPI_UINT64_T, caps, 1, MPI_UINT64_T, m->comm);
    if (rc != MPI_SUCCESS || gerr) {
        int r = m->rank;
        unsigned long long items = (unsigned long long)m->n;
        free(caps);
        MPI_Comm_free(&m->comm);
        free_mpi(m);
        if (rc != MPI_SUCCESS)
            return fail(NOSTALL_E_IO, "%s: rank %d: exchanging the plan failed (MPI error %d)", fn,
                        r, rc);
        return fail(NOSTALL_E_NOMEM, "%s: rank %d: %s no memory for the plan of %llu items", fn, r,
                    lerr ? "this rank has" : "another rank has", items);
    }

    plan_owners(m, caps);
    free(caps);
    lerr = nmpi_arena_create(&m->arena, m->owned_bytes, m->n) < 0;
    gerr = 0;
    rc = MPI_Allreduce(&lerr, &gerr, 1, MPI_INT, MPI_MAX, m->comm);
    if (rc != MPI_SUCCESS || gerr) {
        int r = m->rank;
        uint64_t b = m->owned_bytes;
        MPI_Comm_free(&m->comm);
        free_mpi(m);
        if (lerr)
            return fail(NOSTALL_E_NOMEM, "%s: rank %d: cannot reserve a cache arena of %llu bytes",
                        fn, r, (unsigned long long)b);
        return fail(NOSTALL_E_NOMEM, "%s: rank %d: another rank could not reserve its cache arena",
                    fn, r);
    }
    if (pthread_create(&m->thr, NULL, progress_main, m) != 0) {
        int r = m->rank;
        MPI_Comm_free(&m->comm);
        free_mpi(m);
        return fail(NOSTALL_E_THREAD, "%s: rank %d: cannot start the progress thread", fn, r);
    }
    m->thr_started = 1;
    nostall_peer_cache pc = {m, hook_get, hook_put};
    if ((rc = nostall_config_set_peer_cache(cfg, &pc)) < 0) {
        nostall_mpi_detach(m);
        return rc;
    }
    *out = m;
    return 0;
}

int nostall_mpi_peer_cache(nostall_mpi *m, nostall_peer_cache *out)
{
    if (!m || !out) return fail(NOSTALL_E_INVALID, "nostall_mpi_peer_cache: NULL argument");
    out->ctx = m;
    out->get = hook_get;
    out->put = hook_put;
    return 0;
}

int nostall_mpi_stats_get(const nostall_mpi *mc, nostall_mpi_stats *res, size_t size)
{
    if (!mc || !res) return fail(NOSTALL_E_INVALID, "nostall_mpi_stats_get: NULL argument");
    nostall_mpi *m = (nostall_mpi *)mc;
    nostall_mpi_stats st, *out = &st;
    memset(out, 0, sizeof *out);
    out->rank = (uint64_t)m->rank;
    out->world = (uint64_t)m->world;
    out->items = m->n;
    out->owned_items = m->owned_items;
    out->owned_bytes = m->owned_bytes;
    out->unowned_items = m->unowned_items;
#define CNT_GET_(name) out->name = atomic_load_explicit(&m->name, memory_order_relaxed);
    COUNTERS(CNT_GET_)
#undef CNT_GET_
    for (int r = 0; r < m->world; r++) out->peers_down += atomic_load(&m->down[r]) != 0;
    nmpi_arena_usage(m->arena, &out->cache_items, &out->cache_bytes);
    memcpy(res, out, size < sizeof *out ? size : sizeof *out);
    return 0;
}

int nostall_mpi_detach(nostall_mpi *m)
{
    if (!m) return 0;
    int ret = 0;
    if (m->thr_started) {
        pthread_mutex_lock(&m->mu);
        m->detaching = 1;
        pthread_cond_signal(&m->wake);
        struct timespec dl = abs_deadline((uint64_t)m->opt.detach_timeout_ms * 1000000ull);
        while (!m->barrier_done)
            if (pthread_cond_timedwait(&m->detach_cv, &m->mu, &dl) == ETIMEDOUT) break;
        int bd = m->barrier_done;
        m->stop = 1;
        pthread_cond_signal(&m->wake);
        pthread_mutex_unlock(&m->mu);
        pthread_join(m->thr, NULL);
        if (bd != 1) {
            if (!m->opt.quiet)
                fprintf(stderr,
                        "nostall_mpi: rank %d: detach: not every rank reached detach within "
                        "%u ms (a peer is gone?); leaving the communicator to MPI\n",
                        m->rank, m->opt.detach_timeout_ms);
            ret = fail(NOSTALL_TIMEOUT,
                       "nostall_mpi_detach: rank %d: not every rank reached detach within %u ms",
                       m->rank, m->opt.detach_timeout_ms);
        }
        /* Free the duplicate only when every rank got here: otherwise MPI
         * may still hold requests on it (and on our memory: leak that too). */
        if (bd == 1) MPI_Comm_free(&m->comm);
    }
    pthread_mutex_lock(&m->mu);
    for (omsg *p = m->phead; p;) {
        omsg *nx = p->next;
        free(p->buf);
        free(p);
        p = nx;
    }
    pthread_mutex_unlock(&m->mu);
    free_mpi(m);
    return ret;
}
