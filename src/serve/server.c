/*
 * server.c — `nostall serve`: a prep server (include/nostall.h,
 * nostall_server_*; protocol: proto.h; design: serve.h, docs/serve.md).
 *
 * A loader made with this file's backend (nst_loader_create_backend): its
 * workers take item tickets from the server's queue of requested items
 * instead of a ring, and write each item into the requesting connection's
 * buffer. One thread per connection: the handshake (HMAC both ways, the
 * identity compared, credits granted), then it reads REQ frames (at most
 * `credits` items outstanding: more is a protocol error) and streams back
 * each finished item (ITEM, with its status and, if bad, why). Per
 * connection memory is credits x item bytes, allocated at the handshake;
 * connections are at most NST_SERVE_CONNS.
 *
 * LOCKS  srv->mu guards the connection list; q.mu the queue of requested
 *   items; conn->mu a connection's slots and references. Order: srv->mu ->
 *   conn->mu; q.mu is taken alone. A worker that finishes an item of a
 *   closed connection drops its reference; the last one frees nothing (the
 *   server frees every connection at the end, after the workers).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"
#include "serve/proto.h"
#include "serve/serve.h"

#define NST_SERVE_CONNS 64
#define NST_SERVE_HANDSHAKE_MS 10000
#define NST_SERVE_WRITE_MS 60000
#define NST_SERVE_MEMORY (1ull << 30) /* a connection's item buffers, at most */

enum { CS_FREE = 0, CS_QUEUED, CS_DONE };

typedef struct cslot {
    uint64_t id, epoch, index, index_sink;
    int32_t status;
    uint32_t state;
    char msg[NST_PROTO_MSG_MAX + 1];
    uint8_t *data;
} cslot;

typedef struct conn {
    struct nostall_server *srv;
    int fd, efd;
    pthread_t th;
    int started, finished;
    pthread_mutex_t mu;
    uint32_t credits, outstanding, refs;
    atomic_int closing;
    cslot *slots;
    uint8_t *arena;
    char peer[96];
} conn;

typedef struct qent {
    conn *c;
    uint32_t slot;
} qent;

typedef struct squeue {
    nst_batches base;
    struct nostall_server *srv;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    qent *e;
    uint32_t cap, head, count;
    int stopped;
    const nst_recipe *r;
    uint64_t field_off[NST_FIELDS_MAX];
} squeue;

struct nostall_server {
    nostall_loader *ld;
    const nostall_config *cfg; /* during create only */
    squeue *q;
    int lfd, stop_pipe[2];
    uint16_t port;
    uint8_t secret[NST_PROTO_SECRET_MAX];
    size_t secret_len;
    nst_ident ident;
    uint32_t credits;                /* granted per connection, at most */
    uint64_t item_bytes, slot_bytes; /* on the wire; in a connection's buffer */
    atomic_int stop;
    atomic_uint_fast64_t served, refused;
    pthread_mutex_t mu;
    conn *conns[NST_SERVE_CONNS];
};

/* ---- the backend the server's loader's workers take from ---- */

static squeue *Q(nst_batches *b) { return (squeue *)b; }

static int q_take(nst_batches *b, nst_ticket *t, uint32_t timeout_ms)
{
    squeue *q = Q(b);
    uint64_t deadline = nst_now_ns() + (uint64_t)timeout_ms * 1000000;
    pthread_mutex_lock(&q->mu);
    while (!q->count && !q->stopped && timeout_ms) {
        if (nst_now_ns() >= deadline) break;
        struct timespec ts = {(time_t)(deadline / 1000000000), (long)(deadline % 1000000000)};
        pthread_cond_timedwait(&q->cv, &q->mu, &ts);
    }
    int rc = q->stopped ? NOSTALL_E_STOPPED : q->count ? 0 : NOSTALL_TIMEOUT;
    if (rc == 0) {
        qent e = q->e[q->head];
        q->head = (q->head + 1) % q->cap;
        q->count--;
        pthread_mutex_unlock(&q->mu);
        cslot *s = &e.c->slots[e.slot];
        memset(t, 0, sizeof *t);
        t->epoch = s->epoch;
        t->index = s->index;
        t->indexed = 1;
        for (uint32_t f = 0; f < q->r->nfields; f++) t->dst[f] = s->data + q->field_off[f];
        t->index_dst = &s->index_sink;
        t->layer[0] = (uint64_t)(uintptr_t)e.c;
        t->layer[1] = e.slot;
        return 0;
    }
    pthread_mutex_unlock(&q->mu);
    return rc;
}

static int q_stale(nst_batches *b, const nst_ticket *t)
{
    (void)b;
    conn *c = (conn *)(uintptr_t)t->layer[0];
    return atomic_load(&c->closing);
}

static void q_done(nst_batches *b, nst_ticket *t, int status, const char *msg)
{
    (void)b;
    conn *c = (conn *)(uintptr_t)t->layer[0];
    cslot *s = &c->slots[t->layer[1]];
    uint64_t one = 1;
    pthread_mutex_lock(&c->mu);
    s->status = status < 0 ? status : 0;
    snprintf(s->msg, sizeof s->msg, "%s", status < 0 && msg ? msg : "");
    s->state = CS_DONE;
    if (write(c->efd, &one, sizeof one) < 0) { /* a full counter still wakes it */
    }
    c->refs--; /* last: once 0 (and finished), reap may free c */
    pthread_mutex_unlock(&c->mu);
}

static void q_stop(nst_batches *b)
{
    squeue *q = Q(b);
    pthread_mutex_lock(&q->mu);
    q->stopped = 1;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

static void q_free(nst_batches *b)
{
    squeue *q = Q(b);
    if (!q) return;
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    free(q->e);
    q->srv->q = NULL;
    free(q);
}

static int q_next(nst_batches *b, nostall_batch *out, uint64_t d, const char *fn)
{
    (void)b, (void)out, (void)d;
    return nst_error(NOSTALL_E_STATE, "%s: a prep server's loader has no consumer", fn);
}
static int q_release(nst_batches *b, const nostall_batch *x)
{
    (void)b, (void)x;
    return NOSTALL_E_STATE;
}
static int q_reset(nst_batches *b, const nst_engine_cursor *c, void (*quiet)(void *), void *ctx,
                   const char *fn)
{
    (void)b, (void)c, (void)quiet, (void)ctx;
    return nst_error(NOSTALL_E_STATE, "%s: a prep server has no state", fn);
}
static void q_cursor(nst_batches *b, nst_engine_cursor *c)
{
    (void)b;
    memset(c, 0, sizeof *c);
}

static const nst_batches_ops squeue_ops = {.take = q_take,
                                           .stale = q_stale,
                                           .done = q_done,
                                           .next = q_next,
                                           .release = q_release,
                                           .reset = q_reset,
                                           .cursor = q_cursor,
                                           .stop = q_stop,
                                           .free = q_free};

static int make_queue(void *ctx, const nst_recipe *r, nst_batches **out, const char *fn)
{
    struct nostall_server *srv = ctx;
    squeue *q = calloc(1, sizeof *q);
    if (!q) return nst_error(NOSTALL_E_NOMEM, "%s: out of memory", fn);
    q->base.ops = &squeue_ops;
    q->srv = srv;
    q->r = r;
    q->cap = NST_SERVE_CONNS * NST_PROTO_CREDITS_MAX;
    if (!(q->e = calloc(q->cap, sizeof *q->e))) {
        free(q);
        return nst_error(NOSTALL_E_NOMEM, "%s: out of memory", fn);
    }
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    uint64_t off = 0, wire = 0; /* each field 64-byte aligned, as in a ring slot */
    for (uint32_t f = 0; f < r->nfields; f++) {
        q->field_off[f] = off;
        off += (r->fields[f].item_bytes + 63) & ~(uint64_t)63;
        wire += r->fields[f].item_bytes;
    }
    srv->item_bytes = wire;
    srv->slot_bytes = off ? off : 64;
    srv->q = q;
    *out = &q->base;
    return nst_proto_identity(srv->cfg, r, &srv->ident) == 0
               ? 0
               : nst_error(NOSTALL_E_NOMEM, "%s: cannot describe the items", fn);
}

/* ---- one connection ---- */

static int send_refuse(conn *c, const char *why)
{
    uint8_t buf[8 + NST_PROTO_REFUSE_MAX];
    char e[128];
    size_t n = nst_proto_put_refuse(buf, sizeof buf, why);
    atomic_fetch_add(&c->srv->refused, 1);
    return nst_net_write(c->fd, buf, n, nst_now_ns() + 1000000000ull, &c->srv->stop, e, sizeof e);
}

/* HELLO, AUTH, WELCOME or REFUSE: 0 authenticated and the same items. */
static int handshake(conn *c)
{
    struct nostall_server *srv = c->srv;
    uint8_t buf[8 + NST_PROTO_AUTH_MAX];
    char why[NST_PROTO_REFUSE_MAX], diff[NST_PROTO_REFUSE_MAX - 64];
    nst_hello h = {.version = NST_PROTO_VERSION};
    uint64_t deadline = nst_now_ns() + (uint64_t)NST_SERVE_HANDSHAKE_MS * 1000000;
    if (nst_proto_nonce(h.nonce) < 0) return send_refuse(c, "server: no random nonce"), -1;
    size_t n = nst_proto_put_hello(buf, sizeof buf, &h);
    nst_frame f;
    nst_auth a;
    if (nst_net_write(c->fd, buf, n, deadline, &srv->stop, why, sizeof why) < 0 ||
        nst_net_read_frame(c->fd, buf, sizeof buf, NST_PROTO_AUTH_MAX, &f, deadline, &srv->stop,
                           why, sizeof why) < 0)
        return -1;
    if (nst_proto_get_auth(&f, &a, why, sizeof why) < 0) return send_refuse(c, why), -1;
    uint8_t mac[32];
    nst_proto_mac(srv->secret, srv->secret_len, 0, h.nonce, a.nonce, mac);
    int rc = -1;
    if (a.version != NST_PROTO_VERSION)
        snprintf(why, sizeof why, "protocol version %u, the server speaks %u", a.version,
                 NST_PROTO_VERSION);
    else if (!nst_proto_mac_equal(mac, a.mac))
        snprintf(why, sizeof why, "authentication failed: the secret differs");
    else if (nst_ident_compare(&srv->ident, &a.ident, diff, sizeof diff))
        snprintf(why, sizeof why, "not the same items: %s", diff);
    else if (a.credits < 1)
        snprintf(why, sizeof why, "no credits asked for");
    else
        rc = 0;
    nst_ident_free(&a.ident);
    if (rc < 0) return send_refuse(c, why), -1;
    c->credits = a.credits < srv->credits ? a.credits : srv->credits;
    c->slots = calloc(c->credits, sizeof *c->slots);
    c->arena = aligned_alloc(64, c->credits * srv->slot_bytes);
    if (!c->slots || !c->arena) return send_refuse(c, "server: out of memory"), -1;
    for (uint32_t i = 0; i < c->credits; i++) c->slots[i].data = c->arena + i * srv->slot_bytes;
    nst_welcome w = {.credits = c->credits, .item_bytes = srv->item_bytes};
    nst_proto_mac(srv->secret, srv->secret_len, 1, a.nonce, h.nonce, w.mac);
    n = nst_proto_put_welcome(buf, sizeof buf, &w);
    return nst_net_write(c->fd, buf, n, deadline, &srv->stop, why, sizeof why);
}

/* Queue a REQ's items: 0, or -1 (protocol error: refused). */
static int queue_items(conn *c, const nst_frame *f)
{
    struct nostall_server *srv = c->srv;
    nst_req_item it[NST_PROTO_REQ_MAX];
    uint32_t n = 0;
    char why[160];
    if (nst_proto_get_req(f, it, NST_PROTO_REQ_MAX, &n, why, sizeof why) < 0)
        return send_refuse(c, why), -1;
    const nst_recipe *r = srv->q->r;
    pthread_mutex_lock(&c->mu);
    int bad = c->outstanding + n > c->credits;
    for (uint32_t i = 0; i < n && !bad; i++) bad = it[i].index >= r->items;
    if (bad) {
        pthread_mutex_unlock(&c->mu);
        return send_refuse(c, "a request over the credits granted or past the dataset's end"), -1;
    }
    uint32_t free_slot = 0;
    squeue *q = srv->q;
    for (uint32_t i = 0; i < n; i++) {
        while (c->slots[free_slot].state != CS_FREE) free_slot++;
        cslot *s = &c->slots[free_slot];
        *s = (cslot){.id = it[i].id,
                     .epoch = it[i].epoch,
                     .index = it[i].index,
                     .state = CS_QUEUED,
                     .data = s->data};
        c->outstanding++;
        c->refs++;
        pthread_mutex_lock(&q->mu);
        q->e[(q->head + q->count) % q->cap] = (qent){c, free_slot};
        q->count++;
        pthread_cond_signal(&q->cv);
        pthread_mutex_unlock(&q->mu);
    }
    pthread_mutex_unlock(&c->mu);
    return 0;
}

/* Send every finished item: 0, or -1 (the client is gone). */
static int send_done(conn *c)
{
    struct nostall_server *srv = c->srv;
    uint8_t hdr[8 + NST_PROTO_ITEM_HDR + NST_PROTO_MSG_MAX];
    char why[128];
    for (uint32_t i = 0; i < c->credits; i++) {
        pthread_mutex_lock(&c->mu);
        int done = c->slots[i].state == CS_DONE;
        pthread_mutex_unlock(&c->mu);
        if (!done) continue;
        cslot *s = &c->slots[i]; /* ours alone until freed below */
        size_t n =
            nst_proto_put_item_hdr(hdr, sizeof hdr, s->id, s->status, s->msg, srv->item_bytes);
        uint64_t deadline = nst_now_ns() + (uint64_t)NST_SERVE_WRITE_MS * 1000000;
        if (nst_net_write(c->fd, hdr, n, deadline, &srv->stop, why, sizeof why) < 0) return -1;
        const nst_recipe *r = srv->q->r;
        for (uint32_t f = 0; s->status == 0 && f < r->nfields; f++)
            if (nst_net_write(c->fd, s->data + srv->q->field_off[f], r->fields[f].item_bytes,
                              deadline, &srv->stop, why, sizeof why) < 0)
                return -1;
        atomic_fetch_add(&srv->served, 1);
        pthread_mutex_lock(&c->mu);
        s->state = CS_FREE;
        c->outstanding--;
        pthread_mutex_unlock(&c->mu);
    }
    return 0;
}

static void *conn_main(void *arg)
{
    conn *c = arg;
    struct nostall_server *srv = c->srv;
    if (handshake(c) == 0) {
        uint32_t maxp = 4 + c->credits * 24;
        uint8_t *buf = malloc(5 + (size_t)maxp);
        char why[160];
        while (buf && !atomic_load(&srv->stop)) {
            struct pollfd p[2] = {{.fd = c->fd, .events = POLLIN}, {.fd = c->efd, .events = POLLIN}};
            if (poll(p, 2, 100) < 0 && errno != EINTR) break;
            if (p[1].revents & POLLIN) {
                uint64_t v;
                if (read(c->efd, &v, sizeof v) < 0) { /* drained or spurious */
                }
                if (send_done(c) < 0) break;
            }
            if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
                nst_frame f;
                uint64_t deadline = nst_now_ns() + (uint64_t)NST_SERVE_WRITE_MS * 1000000;
                if (nst_net_read_frame(c->fd, buf, 5 + (size_t)maxp, maxp, &f, deadline, &srv->stop,
                                       why, sizeof why) < 0) {
                    if (strstr(why, "limit") || strstr(why, "type")) send_refuse(c, why);
                    break;
                }
                if (queue_items(c, &f) < 0) break;
            }
        }
        free(buf);
    }
    atomic_store(&c->closing, 1);
    shutdown(c->fd, SHUT_RDWR);
    pthread_mutex_lock(&c->mu);
    c->finished = 1;
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static void conn_free(conn *c)
{
    if (!c) return;
    if (c->started) pthread_join(c->th, NULL);
    close(c->fd);
    if (c->efd >= 0) close(c->efd);
    pthread_mutex_destroy(&c->mu);
    free(c->slots);
    free(c->arena);
    free(c);
}

/* Free finished connections no worker refers to any more (srv->mu held). */
static void reap(struct nostall_server *srv, int all)
{
    for (int i = 0; i < NST_SERVE_CONNS; i++) {
        conn *c = srv->conns[i];
        if (!c) continue;
        pthread_mutex_lock(&c->mu);
        int gone = c->finished && c->refs == 0;
        pthread_mutex_unlock(&c->mu);
        if (gone || all) {
            conn_free(c);
            srv->conns[i] = NULL;
        }
    }
}

static void accept_one(struct nostall_server *srv)
{
    int fd = accept4(srv->lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) return;
    pthread_mutex_lock(&srv->mu);
    reap(srv, 0);
    int k = 0;
    while (k < NST_SERVE_CONNS && srv->conns[k]) k++;
    conn *c = k < NST_SERVE_CONNS ? calloc(1, sizeof *c) : NULL;
    if (!c) {
        pthread_mutex_unlock(&srv->mu);
        conn tmp = {.srv = srv, .fd = fd};
        send_refuse(&tmp, "server busy: too many connections");
        close(fd);
        return;
    }
    c->srv = srv;
    c->fd = fd;
    c->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    c->refs = 0;
    pthread_mutex_init(&c->mu, NULL);
    srv->conns[k] = c;
    if (c->efd >= 0 && pthread_create(&c->th, NULL, conn_main, c) == 0)
        c->started = 1;
    else
        c->finished = 1;
    pthread_mutex_unlock(&srv->mu);
}

/* ---- the public face ---- */

int nostall_server_create(nostall_server **out, const char *source, const nostall_config *cfg,
                          const char *listen_at, const char *secret_file)
{
    static const char fn[] = "nostall_server_create";
    char host[256], why[NST_ERROR_MAX - 128];
    uint16_t port = 0;
    nst_error_clear();
    if (!out || !source || !cfg || !secret_file)
        return nst_error(NOSTALL_E_INVALID, "%s: out, source, cfg and secret_file are needed", fn);
    *out = NULL;
    if (!listen_at || !*listen_at) listen_at = "127.0.0.1:0";
    if (nst_net_split(listen_at, host, sizeof host, &port) < 0)
        return nst_error(NOSTALL_E_INVALID, "%s: listen address '%s' is not HOST:PORT", fn,
                         listen_at);
    const nst_optval *v = cfg->v;
    if (nst_config_path(cfg, NOSTALL_OPT_PREP_SERVERS)[0] || v[NOSTALL_OPT_COORDINATE].s[0] ||
        v[NOSTALL_OPT_ECHO_FACTOR].d > 1 || v[NOSTALL_OPT_ECHO].u == NOSTALL_ECHO_ADAPTIVE ||
        v[NOSTALL_OPT_SHARD_MODE].u != NOSTALL_SHARD_MODE_INDEXED)
        return nst_error(NOSTALL_E_OPTION,
                         "%s: a prep server prepares single items: prep_servers, coordinate, "
                         "echoing and shard_mode=stream are the trainer's, not the server's",
                         fn);
    struct nostall_server *srv = calloc(1, sizeof *srv);
    if (!srv) return nst_error(NOSTALL_E_NOMEM, "%s: out of memory", fn);
    srv->lfd = srv->stop_pipe[0] = srv->stop_pipe[1] = -1;
    pthread_mutex_init(&srv->mu, NULL);
    int rc;
    if (nst_proto_read_secret(secret_file, srv->secret, &srv->secret_len, why, sizeof why) < 0) {
        rc = nst_error(NOSTALL_E_INVALID, "%s: %s", fn, why);
        goto fail;
    }
    srv->cfg = cfg;
    if ((rc = nst_loader_create_backend(&srv->ld, source, cfg, make_queue, srv)) < 0) goto fail;
    srv->cfg = NULL;
    srv->credits = NST_PROTO_CREDITS_MAX;
    while (srv->credits > 1 && srv->credits * srv->slot_bytes > NST_SERVE_MEMORY) srv->credits /= 2;
    if (pipe2(srv->stop_pipe, O_CLOEXEC | O_NONBLOCK) != 0 ||
        (srv->lfd = nst_net_listen(host, port, &srv->port, why, sizeof why)) < 0) {
        rc = nst_error(NOSTALL_E_IO, "%s: cannot listen on %s: %s", fn, listen_at, why);
        goto fail;
    }
    *out = srv;
    return 0;
fail : {
    char keep[NST_ERROR_MAX];
    snprintf(keep, sizeof keep, "%s", nostall_last_error());
    nostall_server_free(srv);
    return nst_error_set(rc, keep);
}
}

int nostall_server_port(const nostall_server *srv) { return srv ? srv->port : -1; }

uint64_t nostall_server_served(const nostall_server *srv)
{
    return srv ? atomic_load(&((nostall_server *)srv)->served) : 0;
}

int nostall_server_run(nostall_server *srv)
{
    if (!srv) return nst_error(NOSTALL_E_INVALID, "nostall_server_run: server is NULL");
    while (!atomic_load(&srv->stop)) {
        struct pollfd p[2] = {{.fd = srv->lfd, .events = POLLIN},
                              {.fd = srv->stop_pipe[0], .events = POLLIN}};
        if (poll(p, 2, 1000) < 0 && errno != EINTR) break;
        if (p[1].revents) atomic_store(&srv->stop, 1);
        if (!atomic_load(&srv->stop) && (p[0].revents & POLLIN)) accept_one(srv);
    }
    return 0;
}

int nostall_server_stop(nostall_server *srv)
{
    if (!srv) return NOSTALL_E_INVALID;
    atomic_store(&srv->stop, 1); /* async-signal-safe: an atomic store and a write */
    if (srv->stop_pipe[1] >= 0 && write(srv->stop_pipe[1], "x", 1) < 0) {
    }
    return 0;
}

void nostall_server_free(nostall_server *srv)
{
    if (!srv) return;
    atomic_store(&srv->stop, 1);
    if (srv->ld) nostall_loader_join(srv->ld); /* workers gone: no ticket refers to a conn */
    pthread_mutex_lock(&srv->mu);
    for (int i = 0; i < NST_SERVE_CONNS; i++)
        if (srv->conns[i]) atomic_store(&srv->conns[i]->closing, 1);
    reap(srv, 1);
    pthread_mutex_unlock(&srv->mu);
    nostall_loader_free(srv->ld);
    nst_ident_free(&srv->ident);
    if (srv->lfd >= 0) close(srv->lfd);
    for (int i = 0; i < 2; i++)
        if (srv->stop_pipe[i] >= 0) close(srv->stop_pipe[i]);
    memset(srv->secret, 0, sizeof srv->secret);
    pthread_mutex_destroy(&srv->mu);
    free(srv);
}
