/*
 * client.c — the loader's side of prep servers (serve.h, proto.h): one
 * thread per server in prep_servers, which takes item tickets as a worker
 * does (a failed server's first, from the orphan pool; then the loader's
 * backend), keeps at most the granted credits of them in flight on its
 * connection, and receives each item's bytes straight into the ticket's
 * place in the ring slot before handing the ticket back (done).
 *
 * EXACTLY ONCE  A ticket is in one place at a time: a link's outstanding
 *   table, the orphan pool, or a worker's FIFO. A link that fails -- the
 *   connection refused, reset or closed, a protocol error, or no byte for
 *   prep_timeout_ms while items are outstanding -- closes its socket first
 *   and then moves every outstanding ticket to the orphan pool, so no late
 *   answer can land after another taker has the ticket. It then reconnects
 *   with backoff (100 ms doubling to 5 s).
 *
 * COUNTERS  (nst_prep_stats, for the stats and the analyzer) items and
 *   their bytes received, request to reply, time with items outstanding,
 *   these threads' CPU: added before a ticket is handed back, a few atomic
 *   adds per item and the thread's CPU clock every 8th (and at the last
 *   item outstanding).
 *
 * LOCKS  pc->mu guards the orphan pool and is the backoff's wait; a link's
 *   table is its thread's alone. Every wait ends within 100 ms of the
 *   loader's stop flag.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"
#include "serve/proto.h"
#include "serve/serve.h"

#define BACKOFF_MIN_NS 100000000ull
#define BACKOFF_MAX_NS 5000000000ull
#define SLOT_BITS 9 /* ids: (serial << SLOT_BITS) | table slot */

typedef struct rslot {
    nst_ticket t;
    uint64_t id, sent_ns; /* sent_ns: when its REQ went out */
    int used;
} rslot;

typedef struct link {
    nst_prep *pc;
    char host[256], addr[300];
    uint16_t port;
    pthread_t th;
    int started, fd;
    uint32_t credits, nout;
    uint64_t serial;
    uint64_t busy_mark, cpu_mark; /* counters: since the last item (ns, thread CPU ns) */
    uint32_t cpu_items;           /* items since cpu_mark was read                      */
    rslot *out;
    nst_req_item *req;
} link_t;

struct nst_prep {
    nst_prep_params p;
    uint8_t secret[NST_PROTO_SECRET_MAX];
    size_t secret_len;
    nst_ident ident;
    uint32_t inflight;
    uint64_t timeout_ns, item_bytes;
    link_t *links;
    uint32_t nlinks;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    nst_ticket *orphans;
    uint32_t ocap, ohead, ocount;
    atomic_uint_fast64_t remote_items, requeued;
    /* the analyzer's counters (nst_prep_stats): item bytes received, request
     * to reply summed over items, time servers had items outstanding summed
     * over servers, these threads' CPU, servers connected now */
    atomic_uint_fast64_t remote_bytes, wait_ns, busy_ns, cpu_ns, up;
};

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int nst_prep_orphan_take(nst_prep *pc, nst_ticket *t)
{
    if (!pc) return 0;
    pthread_mutex_lock(&pc->mu);
    int got = pc->ocount > 0;
    if (got) {
        *t = pc->orphans[pc->ohead];
        pc->ohead = (pc->ohead + 1) % pc->ocap;
        pc->ocount--;
    }
    pthread_mutex_unlock(&pc->mu);
    return got;
}

/* A failed link's outstanding tickets go to the pool (its socket closed). */
static void give_back(link_t *l)
{
    nst_prep *pc = l->pc;
    pthread_mutex_lock(&pc->mu);
    for (uint32_t i = 0; i < l->credits; i++) {
        if (!l->out[i].used) continue;
        pc->orphans[(pc->ohead + pc->ocount) % pc->ocap] = l->out[i].t;
        pc->ocount++; /* room: every link holds at most its credits */
        l->out[i].used = 0;
        atomic_fetch_add(&pc->requeued, 1);
    }
    l->nout = 0;
    pthread_cond_broadcast(&pc->cv);
    pthread_mutex_unlock(&pc->mu);
}

/* Connect and authenticate: 0; -1 not now (why); -2 refused by the server
 * or not a server to use (why). */
static int handshake(link_t *l, uint64_t timeout_ns, char *why, size_t whyn)
{
    nst_prep *pc = l->pc;
    const atomic_int *stop = pc->p.stop;
    uint64_t deadline = nst_now_ns() + timeout_ns;
    enum { MAXP = 2 + NST_PROTO_REFUSE_MAX };
    int fd = nst_net_connect(l->host, l->port, deadline, stop, why, whyn);
    if (fd < 0) return -1;
    uint8_t *buf = malloc(8 + NST_PROTO_AUTH_MAX);
    nst_frame f;
    nst_hello h;
    nst_welcome w;
    nst_auth a = {.version = NST_PROTO_VERSION, .credits = (uint16_t)pc->inflight};
    int rc = -1;
    if (!buf) goto out;
    if (nst_net_read_frame(fd, buf, 8 + NST_PROTO_AUTH_MAX, MAXP, &f, deadline, stop, why, whyn))
        goto out;
    if (f.type == NST_MSG_REFUSE) {
        rc = -2;
        nst_proto_get_refuse(&f, why, whyn, why, whyn);
        goto out;
    }
    if (nst_proto_get_hello(&f, &h, why, whyn) < 0) {
        rc = -2;
        goto out;
    }
    if (nst_proto_nonce(a.nonce) < 0) goto out;
    nst_proto_mac(pc->secret, pc->secret_len, 0, h.nonce, a.nonce, a.mac);
    a.ident = pc->ident; /* borrowed: encoded only */
    size_t n = nst_proto_put_auth(buf, 8 + NST_PROTO_AUTH_MAX, &a);
    if (!n || nst_net_write(fd, buf, n, deadline, stop, why, whyn) < 0 ||
        nst_net_read_frame(fd, buf, 8 + NST_PROTO_AUTH_MAX, MAXP, &f, deadline, stop, why, whyn))
        goto out;
    if (f.type == NST_MSG_REFUSE) {
        rc = -2;
        nst_proto_get_refuse(&f, why, whyn, why, whyn);
        goto out;
    }
    uint8_t mac[32];
    rc = -2;
    if (nst_proto_get_welcome(&f, &w, why, whyn) < 0) goto out;
    nst_proto_mac(pc->secret, pc->secret_len, 1, a.nonce, h.nonce, mac);
    if (!nst_proto_mac_equal(mac, w.mac)) {
        snprintf(why, whyn, "the server did not prove the secret");
        goto out;
    }
    if (w.item_bytes != pc->item_bytes || w.credits > pc->inflight) {
        snprintf(why, whyn, "the server's item size or credits differ from ours");
        goto out;
    }
    l->credits = w.credits;
    rc = 0;
out:
    free(buf);
    if (rc == 0)
        l->fd = fd;
    else
        close(fd);
    return rc;
}

/* Take tickets and send one REQ for them: 0, or -1 (link failed). */
static int request(link_t *l, char *why, size_t whyn)
{
    nst_prep *pc = l->pc;
    nst_batches *bq = pc->p.bq;
    uint32_t n = 0;
    while (l->nout < l->credits && n < NST_PROTO_REQ_MAX) {
        nst_ticket t;
        uint32_t wait_ms = (l->nout == 0 && n == 0) ? 100 : 0;
        if (!nst_prep_orphan_take(pc, &t) && bq->ops->take(bq, &t, wait_ms) != 0) break;
        if (bq->ops->stale(bq, &t)) { /* its batch was discarded: nothing to make */
            bq->ops->done(bq, &t, 0, "");
            continue;
        }
        uint64_t ie = t.epoch, index = pc->p.map(pc->p.ctx, &t, &ie);
        t.index = index;
        *t.index_dst = index;
        uint32_t s = 0;
        while (l->out[s].used) s++;
        l->out[s] = (rslot){.t = t, .id = (++l->serial << SLOT_BITS) | s, .used = 1};
        l->req[n++] = (nst_req_item){.id = l->out[s].id, .epoch = ie, .index = index};
        l->nout++;
    }
    if (!n) return 0;
    uint8_t buf[5 + 4 + 24 * NST_PROTO_REQ_MAX];
    size_t len = nst_proto_put_req(buf, sizeof buf, l->req, n);
    uint64_t now = nst_now_ns();
    for (uint32_t i = 0; i < n; i++) l->out[l->req[i].id & ((1u << SLOT_BITS) - 1)].sent_ns = now;
    return nst_net_write(l->fd, buf, len, nst_now_ns() + pc->timeout_ns, pc->p.stop, why, whyn);
}

/* Receive one ITEM into its ticket's place and hand the ticket back: 0; 1
 * nothing arrived within 100 ms; or -1 (link failed). */
static int receive(link_t *l, char *why, size_t whyn)
{
    nst_prep *pc = l->pc;
    const nst_recipe *r = pc->p.recipe;
    uint64_t deadline = nst_now_ns() + pc->timeout_ns;
    uint8_t hdr[5 + NST_PROTO_ITEM_HDR];
    char msg[NST_PROTO_MSG_MAX + 1];
    nst_item_hdr h;
    ssize_t got = recv(l->fd, hdr, 5, MSG_DONTWAIT); /* poll only when nothing is queued */
    if (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        snprintf(why, whyn, "receive: %s", strerror(errno));
        return -1;
    }
    if (got == 0) {
        snprintf(why, whyn, "connection closed by the peer");
        return -1;
    }
    if (got < 0) {
        struct pollfd p = {.fd = l->fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0) return 1;
        got = 0;
    }
    if (nst_net_read(l->fd, hdr + got, 5 - (size_t)got, deadline, pc->p.stop, why, whyn) < 0)
        return -1;
    uint32_t len =
        (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 | (uint32_t)hdr[2] << 16 | (uint32_t)hdr[3] << 24;
    if (hdr[4] == NST_MSG_REFUSE && len >= 3 && len <= 3 + NST_PROTO_REFUSE_MAX) {
        uint8_t text[8 + NST_PROTO_REFUSE_MAX];
        if (nst_net_read(l->fd, text + 5, len - 1, deadline, pc->p.stop, why, whyn) == 0) {
            nst_frame f = {.type = NST_MSG_REFUSE, .payload = text + 5, .len = len - 1};
            char t[200];
            if (nst_proto_get_refuse(&f, t, sizeof t, why, whyn) == 0)
                snprintf(why, whyn, "refused: %s", t);
        }
        return -1;
    }
    if (hdr[4] != NST_MSG_ITEM || len < 1 + NST_PROTO_ITEM_HDR) {
        snprintf(why, whyn, "protocol error: expected an ITEM");
        return -1;
    }
    if (nst_net_read(l->fd, hdr + 5, NST_PROTO_ITEM_HDR, deadline, pc->p.stop, why, whyn) < 0 ||
        nst_proto_get_item_hdr(hdr + 5, len - 1, pc->item_bytes, &h, why, whyn) < 0)
        return -1;
    uint32_t s = (uint32_t)(h.id & ((1u << SLOT_BITS) - 1));
    if (s >= l->credits || !l->out[s].used || l->out[s].id != h.id) {
        snprintf(why, whyn, "protocol error: an ITEM never asked for");
        return -1;
    }
    if (nst_net_read(l->fd, msg, h.msglen, deadline, pc->p.stop, why, whyn) < 0) return -1;
    msg[h.msglen] = '\0';
    nst_ticket *t = &l->out[s].t;
    for (uint32_t f = 0; h.status == 0 && f < r->nfields; f++)
        if (nst_net_read(l->fd, t->dst[f], r->fields[f].item_bytes, deadline, pc->p.stop, why,
                         whyn) < 0)
            return -1;
    /* counters before done: the batch may be seen at once */
    uint64_t now = nst_now_ns();
    if (h.status == 0) atomic_fetch_add(&pc->remote_bytes, pc->item_bytes);
    atomic_fetch_add(&pc->wait_ns, now - l->out[s].sent_ns);
    atomic_fetch_add(&pc->busy_ns, now - l->busy_mark);
    l->busy_mark = now;
    /* the thread's CPU clock (a system call) every 8th item, and at the
     * last one outstanding: counted up to date whenever the link idles */
    if (++l->cpu_items >= 8 || l->nout == 1) {
        uint64_t cpu = thread_cpu_ns();
        atomic_fetch_add(&pc->cpu_ns, cpu - l->cpu_mark);
        l->cpu_mark = cpu;
        l->cpu_items = 0;
    }
    atomic_fetch_add(&pc->remote_items, 1);
    pc->p.bq->ops->done(pc->p.bq, t, h.status, msg);
    l->out[s].used = 0;
    l->nout--;
    return 0;
}

/* Serve tickets over a connected link until it fails or the loader stops. */
static void run_link(link_t *l, char *why, size_t whyn)
{
    nst_prep *pc = l->pc;
    uint64_t last = nst_now_ns();
    while (!atomic_load(pc->p.stop)) {
        uint32_t before = l->nout;
        if (request(l, why, whyn) < 0) return;
        if (before == 0 && l->nout) l->busy_mark = last = nst_now_ns();
        if (l->nout == 0) continue;
        int k = receive(l, why, whyn);
        if (k < 0) return;
        if (k == 0)
            last = nst_now_ns();
        else if (nst_now_ns() - last > pc->timeout_ns) {
            snprintf(why, whyn, "no answer within prep_timeout_ms");
            return;
        }
    }
}

static void *link_main(void *arg)
{
    link_t *l = arg;
    nst_prep *pc = l->pc;
    uint64_t backoff = BACKOFF_MIN_NS;
    char why[NST_PROTO_REFUSE_MAX + 64];
    l->cpu_mark = thread_cpu_ns();
    while (!atomic_load(pc->p.stop)) {
        if (l->fd < 0 && handshake(l, pc->timeout_ns, why, sizeof why) < 0) {
            uint64_t until = nst_now_ns() + backoff;
            backoff = backoff * 2 < BACKOFF_MAX_NS ? backoff * 2 : BACKOFF_MAX_NS;
            pthread_mutex_lock(&pc->mu);
            while (!atomic_load(pc->p.stop) && nst_now_ns() < until) {
                uint64_t d = nst_now_ns() + 100000000ull;
                struct timespec ts = {(time_t)(d / 1000000000), (long)(d % 1000000000)};
                pthread_cond_timedwait(&pc->cv, &pc->mu, &ts);
            }
            pthread_mutex_unlock(&pc->mu);
            continue;
        }
        backoff = BACKOFF_MIN_NS;
        atomic_fetch_add(&pc->up, 1);
        run_link(l, why, sizeof why);
        atomic_fetch_sub(&pc->up, 1);
        close(l->fd); /* first: no late answer can land after give_back */
        l->fd = -1;
        give_back(l);
    }
    return NULL;
}

/* The comma-separated list into links. */
static int parse_servers(nst_prep *pc, const char *list, const char *fn)
{
    uint32_t n = 1;
    for (const char *c = list; *c; c++) n += *c == ',';
    if (!(pc->links = calloc(n, sizeof *pc->links)))
        return nst_error(NOSTALL_E_NOMEM, "%s: out of memory", fn);
    const char *s = list;
    while (*s) {
        const char *e = strchr(s, ',');
        size_t k = e ? (size_t)(e - s) : strlen(s);
        link_t *l = &pc->links[pc->nlinks];
        if (k && k < sizeof l->addr) {
            memcpy(l->addr, s, k);
            l->addr[k] = '\0';
            if (nst_net_split(l->addr, l->host, sizeof l->host, &l->port) < 0 || l->port == 0)
                return nst_error(NOSTALL_E_OPTION,
                                 "%s: prep_servers: '%s' is not HOST:PORT (port 1-65535)", fn,
                                 l->addr);
            l->pc = pc;
            l->fd = -1;
            pc->nlinks++;
        } else if (k)
            return nst_error(NOSTALL_E_OPTION, "%s: prep_servers: an entry is too long", fn);
        s += k + (e ? 1 : 0);
    }
    if (!pc->nlinks) return nst_error(NOSTALL_E_OPTION, "%s: prep_servers names no server", fn);
    return 0;
}

static int start(nst_prep *pc, const char *fn)
{
    char why[NST_PROTO_REFUSE_MAX + 64];
    for (uint32_t i = 0; i < pc->nlinks; i++) {
        link_t *l = &pc->links[i];
        l->out = calloc(pc->inflight, sizeof *l->out);
        l->req = calloc(NST_PROTO_REQ_MAX, sizeof *l->req);
        if (!l->out || !l->req) return nst_error(NOSTALL_E_NOMEM, "%s: out of memory", fn);
        l->credits = pc->inflight;
        int rc = handshake(l, pc->timeout_ns, why, sizeof why);
        if (rc == -2)
            return nst_error(strstr(why, "authentication") ? NOSTALL_E_PERMISSION : NOSTALL_E_OPTION,
                             "%s: prep server %s refused this loader: %s", fn, l->addr, why);
    }
    for (uint32_t i = 0; i < pc->nlinks; i++) {
        if (pthread_create(&pc->links[i].th, NULL, link_main, &pc->links[i]) != 0)
            return nst_error(NOSTALL_E_THREAD, "%s: cannot start the thread of prep server %s", fn,
                             pc->links[i].addr);
        pc->links[i].started = 1;
    }
    return 0;
}

int nst_prep_create(nst_prep **out, const nst_prep_params *p, const char *fn)
{
    const nst_optval *v = p->cfg->v;
    char why[NST_ERROR_MAX - 256];
    *out = NULL;
    if (!nst_config_path(p->cfg, NOSTALL_OPT_PREP_SECRET_FILE)[0])
        return nst_error(NOSTALL_E_OPTION,
                         "%s: prep_servers needs prep_secret_file (the servers' shared secret)", fn);
    nst_prep *pc = calloc(1, sizeof *pc);
    if (!pc) return nst_error(NOSTALL_E_NOMEM, "%s: out of memory", fn);
    pc->p = *p;
    pthread_mutex_init(&pc->mu, NULL);
    pthread_cond_init(&pc->cv, NULL);
    pc->inflight = (uint32_t)v[NOSTALL_OPT_PREP_INFLIGHT].u;
    pc->timeout_ns = v[NOSTALL_OPT_PREP_TIMEOUT_MS].u * 1000000ull;
    for (uint32_t f = 0; f < p->recipe->nfields; f++)
        pc->item_bytes += p->recipe->fields[f].item_bytes;
    int rc;
    if (nst_proto_read_secret(nst_config_path(p->cfg, NOSTALL_OPT_PREP_SECRET_FILE), pc->secret,
                              &pc->secret_len, why, sizeof why) < 0)
        rc = nst_error(NOSTALL_E_OPTION, "%s: prep_secret_file: %s", fn, why);
    else if (nst_proto_identity(p->cfg, p->recipe, &pc->ident) < 0)
        rc = nst_error(NOSTALL_E_NOMEM, "%s: cannot describe the items", fn);
    else if ((rc = parse_servers(pc, nst_config_path(p->cfg, NOSTALL_OPT_PREP_SERVERS), fn)) == 0) {
        pc->ocap = pc->nlinks * pc->inflight;
        rc = (pc->orphans = calloc(pc->ocap, sizeof *pc->orphans))
                 ? start(pc, fn)
                 : nst_error(NOSTALL_E_NOMEM, "%s: out of memory", fn);
    }
    if (rc < 0) {
        char keep[NST_ERROR_MAX];
        snprintf(keep, sizeof keep, "%s", nostall_last_error());
        nst_prep_stop(pc);
        nst_prep_free(pc);
        return nst_error_set(rc, keep);
    }
    *out = pc;
    return 0;
}

void nst_prep_stop(nst_prep *pc)
{
    if (!pc) return;
    pthread_mutex_lock(&pc->mu);
    pthread_cond_broadcast(&pc->cv);
    pthread_mutex_unlock(&pc->mu);
    for (uint32_t i = 0; i < pc->nlinks; i++)
        if (pc->links[i].started) {
            pthread_join(pc->links[i].th, NULL);
            pc->links[i].started = 0;
        }
}

void nst_prep_free(nst_prep *pc)
{
    if (!pc) return;
    for (uint32_t i = 0; i < pc->nlinks; i++) {
        if (pc->links[i].fd >= 0) close(pc->links[i].fd);
        free(pc->links[i].out);
        free(pc->links[i].req);
    }
    free(pc->links);
    free(pc->orphans);
    nst_ident_free(&pc->ident);
    memset(pc->secret, 0, sizeof pc->secret);
    pthread_mutex_destroy(&pc->mu);
    pthread_cond_destroy(&pc->cv);
    free(pc);
}

void nst_prep_counts(const nst_prep *pc, uint64_t *remote_items, uint64_t *requeued)
{
    *remote_items = pc ? atomic_load(&((nst_prep *)pc)->remote_items) : 0;
    *requeued = pc ? atomic_load(&((nst_prep *)pc)->requeued) : 0;
}

void nst_prep_stats(const nst_prep *cpc, nostall_stats *s)
{
    nst_prep *pc = (nst_prep *)cpc;
    if (!pc) return;
    s->prep_remote_items = atomic_load(&pc->remote_items);
    s->prep_requeued = atomic_load(&pc->requeued);
    s->prep_remote_bytes = atomic_load(&pc->remote_bytes);
    s->prep_remote_wait_ns = atomic_load(&pc->wait_ns);
    s->prep_remote_busy_ns = atomic_load(&pc->busy_ns);
    s->prep_recv_cpu_ns = atomic_load(&pc->cpu_ns);
    s->prep_servers_up = atomic_load(&pc->up);
}
