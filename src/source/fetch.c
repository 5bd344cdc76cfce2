/*
 * fetch.c — a worker's fetch stage with reads in flight (see fetch.h).
 * Room: source/ (reading bytes).
 *
 * The pending fetches are a FIFO of `depth` requests, completed oldest
 * first. Local files: opened and checked (nst_open_item, or nst_open_range
 * for a byte range) at submit, then either read at once (pread) or
 * submitted to the worker's io_uring, whose completions are reaped while
 * waiting for the oldest (short reads are resubmitted for the rest, at
 * offset + what was read). URLs: handed to the worker's libcurl multi
 * handle (source/http.c), ranges as Range requests. A request's `index` is
 * its key for the caches and env->reading, whatever it reads; a range
 * drops only its own pages from the page cache. Emulated storage: each
 * local read is scheduled on the emulated device at submit
 * (nst_throttle_schedule: the bytes read, the range's length for a range),
 * each transfer when it completes (its size known only then), and its
 * completion is held back until that time, so delays of requests in flight
 * overlap as they would on a real device with a queue.
 */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "source/fetch.h"
#include "source/http.h"
#include "source/reader.h"
#include "source/s3.h"

/* REQ_WAIT: a cache miss while another fetch reads the same item: wait for
 * it to land in the cache (or be given up) rather than read it twice. */
enum { REQ_DONE = 0, REQ_URING, REQ_HTTP, REQ_WAIT };

struct nst_fetcher {
    const nst_fetch_env *env;
    uint32_t depth, cap, head, count; /* FIFO modulus now / allocated (grow) */
    nst_fetch_req *reqs;
    int use_uring;
    struct io_uring ring;
    uint32_t uring_inflight;      /* reads submitted and not yet reaped */
    nst_http *http;               /* created on the first URL */
    nst_fetch_rewrite_fn rewrite; /* NULL: none */
    void *rewrite_ctx;
    nst_buf spare;       /* the rewrite's output; swapped with a request's buf */
    uint64_t rewrite_ns; /* time in the hook so far (kept out of wait_ns) */
};

static int drop_cache(const nst_fetcher *f) { return f->env->cache || f->env->peer; }

/* The item is no longer being read by this request. */
static void unclaim(nst_fetcher *f, nst_fetch_req *r)
{
    if (r->claimed) atomic_store_explicit(&f->env->reading[r->index], 0, memory_order_release);
    r->claimed = 0;
}

/* Record the current thread-local error as the request's result. */
static void req_fail(nst_fetcher *f, nst_fetch_req *r, int status)
{
    unclaim(f, r);
    const char *m = nostall_last_error();
    r->status = status;
    snprintf(r->msg, sizeof r->msg, "%s", m && *m ? m : nostall_strerror(status));
    r->state = REQ_DONE;
}

int nst_fetcher_create(nst_fetcher **out, const nst_fetch_env *env, uint32_t depth, uint32_t cap)
{
    nst_fetcher *f = calloc(1, sizeof *f);
    *out = NULL;
    if (!f) return nst_error(NOSTALL_E_NOMEM, "fetch: out of memory");
    f->env = env;
    f->depth = depth ? depth : 1;
    f->cap = cap > f->depth ? cap : f->depth;
    f->reqs = calloc(f->cap, sizeof *f->reqs);
    if (!f->reqs) {
        free(f);
        return nst_error(NOSTALL_E_NOMEM, "fetch: out of memory");
    }
    for (uint32_t i = 0; i < f->cap; i++) f->reqs[i].fd = -1;
    if (env->reader == NOSTALL_READER_IO_URING ||
        (env->reader == NOSTALL_READER_AUTO && f->cap > 1)) {
        int rc = io_uring_queue_init(f->cap, &f->ring, 0);
        if (rc == 0) {
            f->use_uring = 1;
        } else if (env->reader == NOSTALL_READER_IO_URING) {
            free(f->reqs);
            free(f);
            return nst_error(NOSTALL_E_IO,
                             "reader=io_uring: io_uring is not available here (%s); use "
                             "reader=pread or reader=auto",
                             strerror(-rc));
        }
    }
    *out = f;
    return 0;
}

void nst_fetcher_set_rewrite(nst_fetcher *f, nst_fetch_rewrite_fn fn, void *ctx)
{
    f->rewrite = fn;
    f->rewrite_ctx = ctx;
}

const char *nst_fetcher_reader(const nst_fetcher *f) { return f->use_uring ? "io_uring" : "pread"; }
uint32_t nst_fetch_pending(const nst_fetcher *f) { return f->count; }
uint32_t nst_fetch_room(const nst_fetcher *f) { return f->depth - f->count; }

int nst_fetcher_grow(nst_fetcher *f, uint32_t depth)
{
    /* Positions head .. head+count-1 mean the same slots under the larger
     * modulus only if they do not wrap around the current one. */
    if (depth <= f->depth || depth > f->cap || f->head + f->count > f->depth) return 0;
    f->depth = depth;
    return 1;
}

/* A storage read finished with `have` bytes in r->buf: check it, drop its
 * pages when nostall caches, offer it to the caches. */
static void finish_read(nst_fetcher *f, nst_fetch_req *r)
{
    int rc = r->length ? nst_range_got(r->path, r->offset, (size_t)r->length, r->have)
                       : nst_read_check(r->path, r->have, f->env->max_file_bytes);
    if (r->fd >= 0) {
        /* (0, 0): the whole file; a range: only its pages. */
        if (rc == 0 && drop_cache(f))
            posix_fadvise(r->fd, (off_t)r->offset, (off_t)r->length, POSIX_FADV_DONTNEED);
        close(r->fd);
        r->fd = -1;
    }
    if (rc < 0) {
        req_fail(f, r, rc);
        return;
    }
    r->data = r->buf.data;
    r->len = r->have;
    r->io.storage_read = 1;
    r->io.storage_bytes = r->have;
    if (f->rewrite && nst_cache_wants(f->env->cache, r->index, r->len)) {
        const uint64_t t0 = nst_now_ns();
        size_t n = 0;
        /* A rewrite a little larger than the original may no longer fit
         * where the original does: then the original is cached. */
        if (f->rewrite(f->rewrite_ctx, r->data, r->len, &f->spare, &n) && n > 0 &&
            nst_cache_wants(f->env->cache, r->index, n)) {
            nst_buf t = r->buf; /* the original's buffer becomes the spare */
            r->buf = f->spare;
            f->spare = t;
            r->data = r->buf.data;
            r->len = n;
            r->io.rewritten = 1;
        }
        r->io.rewrite_ns = nst_now_ns() - t0;
        f->rewrite_ns += r->io.rewrite_ns;
    }
    /* Counted as rewritten only if the cache took it (another worker may
     * have cached the item meanwhile, or taken the room). */
    if (f->env->cache && !nst_cache_put(f->env->cache, r->index, r->data, r->len))
        r->io.rewritten = 0;
    if (f->env->peer && f->env->peer->put)
        f->env->peer->put(f->env->peer->ctx, r->index, r->data, r->len);
    unclaim(f, r);
    r->state = REQ_DONE;
}

/* Read the whole (open, checked) file or range now with pread, from its
 * start: the plain reader, and io_uring's fallbacks. */
static void read_now(nst_fetcher *f, nst_fetch_req *r)
{
    size_t len;
    int rc = r->length
                 ? nst_read_fd_range(r->fd, r->path, r->offset, r->size, &r->buf, &len)
                 : nst_read_fd(r->fd, r->path, r->size, f->env->max_file_bytes, &r->buf, &len);
    if (rc < 0) {
        close(r->fd);
        r->fd = -1;
        req_fail(f, r, rc);
        return;
    }
    r->have = len;
    finish_read(f, r);
}

static void uring_submit_read(nst_fetcher *f, nst_fetch_req *r)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&f->ring);
    if (!sqe) { /* cannot happen: the ring has depth entries; read now */
        read_now(f, r);
        return;
    }
    /* One read asks for at most 1 GiB (its length is 32 bits; Linux reads
     * under 2 GiB at a time anyway): the rest is a short read's resubmit. */
    size_t n = r->size - r->have;
    if (n > ((size_t)1 << 30)) n = (size_t)1 << 30;
    io_uring_prep_read(sqe, r->fd, r->buf.data + r->have, (unsigned)n,
                       r->offset + (uint64_t)r->have);
    io_uring_sqe_set_data(sqe, r);
    io_uring_submit(&f->ring);
    f->uring_inflight++;
    r->state = REQ_URING;
}

/* Handle one completion; wait up to 20 ms for it when `wait`. */
static void uring_reap(nst_fetcher *f, int wait)
{
    struct io_uring_cqe *cqe = NULL;
    int rc;
    if (wait) {
        struct __kernel_timespec ts = {0, 20000000};
        rc = io_uring_wait_cqe_timeout(&f->ring, &cqe, &ts);
    } else {
        rc = io_uring_peek_cqe(&f->ring, &cqe);
    }
    if (rc < 0 || !cqe) return;
    nst_fetch_req *r = io_uring_cqe_get_data(cqe);
    int res = cqe->res;
    io_uring_cqe_seen(&f->ring, cqe);
    f->uring_inflight--;
    if ((res == -EINTR || res == -EAGAIN) && ++r->again <= 16) {
        uring_submit_read(f, r);
        return;
    }
    if (res == -EAGAIN) { /* the kernel keeps refusing: read it ourselves */
        read_now(f, r);
        return;
    }
    if (res < 0) {
        int st = nst_error(NOSTALL_E_IO, "read: %s: read at offset %llu: %s", NST_MSG_PATH(r->path),
                           (unsigned long long)(r->offset + r->have), strerror(-res));
        close(r->fd);
        r->fd = -1;
        req_fail(f, r, st);
        return;
    }
    r->have += (size_t)res;
    if (res > 0 && r->have < r->size) {
        uring_submit_read(f, r); /* short read: the rest */
        return;
    }
    finish_read(f, r); /* all of it, or EOF early (the file shrank) */
}

static void submit_local(nst_fetcher *f, nst_fetch_req *r)
{
    const nst_fetch_env *env = f->env;
    int rc = r->length ? nst_open_range(r->path, r->offset, r->length, env->max_file_bytes, &r->fd,
                                        &r->size)
                       : nst_open_item(r->path, env->max_file_bytes, &r->fd, &r->size);
    if (rc < 0) {
        req_fail(f, r, rc);
        return;
    }
    if (r->size == 0) {
        close(r->fd);
        r->fd = -1;
        req_fail(f, r, nst_error(NOSTALL_E_EMPTY, "read: %s: empty file", NST_MSG_PATH(r->path)));
        return;
    }
    r->deadline = nst_throttle_schedule(env->throttle, r->size);
    if (f->use_uring) {
        if ((rc = nst_buf_reserve(&r->buf, r->size)) < 0) {
            close(r->fd);
            r->fd = -1;
            req_fail(f, r, rc);
            return;
        }
        uring_submit_read(f, r);
        return;
    }
    read_now(f, r);
}

static void submit_http(nst_fetcher *f, nst_fetch_req *r)
{
    const nst_fetch_env *env = f->env;
    int rc;
    if (!f->http) {
        nst_http_opts o = {
            .max_inflight = f->cap,
            .timeout_ms = env->http_timeout_ms,
            .retries = env->http_retries,
            .backoff_ms = 0,
            .verify_tls = env->http_verify_tls,
            .max_bytes = env->max_file_bytes,
            .stop = env->stop,
        };
        if ((rc = nst_http_create(&f->http, &o)) < 0) {
            req_fail(f, r, rc);
            return;
        }
    }
    if ((rc = nst_http_submit_range(f->http, r->path, r->offset, r->length, &r->buf,
                                    (uint64_t)(uintptr_t)r)) < 0) {
        req_fail(f, r, rc);
        return;
    }
    r->state = REQ_HTTP;
}

static void http_reap(nst_fetcher *f, uint32_t timeout_ms)
{
    nst_http_done d;
    if (nst_http_wait(f->http, timeout_ms, &d) != 1) return;
    nst_fetch_req *r = (nst_fetch_req *)(uintptr_t)d.tag;
    r->io.http_transfers = (uint8_t)(d.attempts > 255 ? 255 : d.attempts);
    r->io.http_retries =
        (uint8_t)(d.attempts > 1 ? (d.attempts - 1 > 255 ? 255 : d.attempts - 1) : 0);
    if (d.status < 0) {
        unclaim(f, r);
        r->status = d.status;
        snprintf(r->msg, sizeof r->msg, "%s", d.msg);
        r->state = REQ_DONE;
        return;
    }
    r->have = d.len;
    /* Emulated storage slows every source: a transfer's bytes are scheduled
     * on the emulated device once their size is known. */
    r->deadline = nst_throttle_schedule(f->env->throttle, d.len);
    finish_read(f, r);
}

/* Serve a request that first missed from the cache, if the item is there
 * now (another read landed it). 1 if served. */
static int serve_late_hit(nst_fetcher *f, nst_fetch_req *r)
{
    const uint8_t *data;
    size_t len;
    if (!nst_cache_get(f->env->cache, r->index, &data, &len)) return 0;
    r->data = data;
    r->len = len;
    r->io.cache_miss = 0;
    r->io.cache_hit = 1;
    r->state = REQ_DONE;
    return 1;
}

/* Read from storage, unless another fetch is reading the same item into
 * the cache right now. */
static void start_read(nst_fetcher *f, nst_fetch_req *r)
{
    if (f->env->reading) {
        uint8_t idle = 0;
        if (!atomic_compare_exchange_strong(&f->env->reading[r->index], &idle, 1)) {
            r->state = REQ_WAIT;
            return;
        }
        r->claimed = 1;
        /* The item may have landed in the cache between the caller's
         * lookup and this claim (another read put it there and let go of
         * it): serve it rather than read it a second time. */
        if (serve_late_hit(f, r)) {
            unclaim(f, r);
            return;
        }
    }
    if (nst_http_handles(r->path))
        submit_http(f, r);
    else
        submit_local(f, r);
}

/* A waiting request: served from the cache once the other read landed, or
 * read here if it was given up (failed, or did not fit in the cache). */
static void wait_step(nst_fetcher *f, nst_fetch_req *r)
{
    if (serve_late_hit(f, r)) return;
    if (!atomic_load_explicit(&f->env->reading[r->index], memory_order_acquire)) {
        start_read(f, r);
        return;
    }
    /* Keep this worker's own reads moving (they may be what others wait
     * for), then look again shortly. */
    if (f->uring_inflight) uring_reap(f, 0);
    if (f->http && nst_http_inflight(f->http)) http_reap(f, 0);
    struct timespec ts = {0, 500000};
    nanosleep(&ts, NULL);
}

static nst_fetch_req *push(nst_fetcher *f, uint64_t index, const char *path)
{
    nst_fetch_req *r = &f->reqs[(f->head + f->count) % f->depth];
    f->count++;
    r->index = index;
    r->path = path;
    r->offset = r->length = 0;
    r->data = NULL;
    r->len = r->size = r->have = 0;
    r->status = 0;
    r->msg[0] = '\0';
    memset(&r->io, 0, sizeof r->io);
    r->wait_ns = 0;
    r->again = 0;
    r->claimed = 0;
    r->deadline = 0;
    r->state = REQ_DONE;
    return r;
}

void nst_fetch_submit_none(nst_fetcher *f, uint64_t index) { push(f, index, ""); }

void nst_fetch_submit(nst_fetcher *f, uint64_t index, const char *path)
{
    nst_fetch_submit_range(f, index, path, 0, 0);
}

void nst_fetch_submit_range(nst_fetcher *f, uint64_t index, const char *path, uint64_t offset,
                            uint64_t length)
{
    const nst_fetch_env *env = f->env;
    nst_fetch_req *r = push(f, index, path);
    r->offset = offset;
    r->length = length;
    /* A bad range or key fails before any cache or storage sees it (a key
     * past the caches' items would index env->reading out of bounds). */
    const char *src = nst_s3_is_url(path) ? "s3" : nst_http_is_url(path) ? "http" : "read";
    int rc = nst_range_check(src, path, offset, length, env->max_file_bytes);
    if (rc == 0 && env->keys && index >= env->keys)
        rc = nst_error(NOSTALL_E_INVALID, "%s: %s: key %llu is not below the %llu keys", src,
                       NST_MSG_PATH(path), (unsigned long long)index, (unsigned long long)env->keys);
    if (rc < 0) {
        req_fail(f, r, rc);
        return;
    }
    if (env->cache) {
        const uint8_t *data;
        size_t len;
        if (nst_cache_get(env->cache, index, &data, &len)) {
            r->data = data;
            r->len = len;
            r->io.cache_hit = 1;
            return;
        }
        r->io.cache_miss = 1;
    }
    if (env->peer && env->peer->get) {
        size_t len = 0;
        if (env->peer->get(env->peer->ctx, index, (nostall_fetch_buf *)&r->buf, &len) == 1 &&
            len > 0 && len <= r->buf.cap) {
            r->data = r->buf.data;
            r->len = len;
            r->io.peer_hit = 1;
            r->io.peer_bytes = len;
            return;
        }
    }
    start_read(f, r);
}

nst_fetch_req *nst_fetch_next(nst_fetcher *f)
{
    if (!f->count) return NULL;
    nst_fetch_req *r = &f->reqs[f->head];
    const uint64_t t0 = nst_now_ns(), rw0 = f->rewrite_ns;
    while (r->state != REQ_DONE) {
        if (f->env->stop && atomic_load(f->env->stop)) return NULL;
        if (r->state == REQ_URING)
            uring_reap(f, 1);
        else if (r->state == REQ_HTTP)
            http_reap(f, 20);
        else
            wait_step(f, r);
    }
    /* Reap whatever else completed meanwhile (keeps the queue moving). */
    while (f->uring_inflight && io_uring_cq_ready(&f->ring)) uring_reap(f, 0);
    if (r->deadline) {
        nst_throttle_wait_until(r->deadline, f->env->stop);
        r->deadline = 0;
        if (f->env->stop && atomic_load(f->env->stop)) return NULL;
    }
    /* Waiting only: rewrites done meanwhile (of any request) are work. */
    const uint64_t waited = nst_now_ns() - t0, worked = f->rewrite_ns - rw0;
    r->wait_ns = waited > worked ? waited - worked : 0;
    return r;
}

nst_fetch_req *nst_fetch_ready(nst_fetcher *f, uint32_t k)
{
    if (k >= f->count) return NULL;
    nst_fetch_req *r = &f->reqs[(f->head + k) % f->depth];
    while (f->uring_inflight && io_uring_cq_ready(&f->ring)) uring_reap(f, 0);
    if (r->state == REQ_HTTP) http_reap(f, 0);
    if (r->state != REQ_DONE) return NULL;
    if (r->deadline) {
        if (nst_now_ns() < r->deadline) return NULL;
        r->deadline = 0;
    }
    r->wait_ns = 0;
    return r;
}

void nst_fetch_release(nst_fetcher *f)
{
    if (!f->count) return;
    f->head = (f->head + 1) % f->depth;
    f->count--;
}

void nst_fetcher_free(nst_fetcher *f)
{
    if (!f) return;
    if (f->use_uring) {
        /* Reads in flight write into our buffers: wait for them (local file
         * reads complete; a hung network filesystem would hang here, as it
         * would in pread). */
        while (f->uring_inflight) {
            struct io_uring_cqe *cqe;
            if (io_uring_wait_cqe(&f->ring, &cqe) < 0) break;
            io_uring_cqe_seen(&f->ring, cqe);
            f->uring_inflight--;
        }
        io_uring_queue_exit(&f->ring);
    }
    nst_http_free(f->http);
    for (uint32_t i = 0; i < f->cap; i++) {
        if (f->reqs[i].fd >= 0) close(f->reqs[i].fd);
        nst_buf_free(&f->reqs[i].buf);
    }
    nst_buf_free(&f->spare);
    free(f->reqs);
    free(f);
}
