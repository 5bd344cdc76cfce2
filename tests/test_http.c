/*
 * test_http.c — the HTTP source (src/source/http.c) against nginx on
 * loopback (tests/lib_nginx.sh) and a tiny faulty server for what nginx
 * cannot do (tests/http_faulty_server.py):
 *   bytes identical to the served files with 1 and 16 transfers in flight
 *   (and connections reused), redirects, 404/410/403/418, 500 retried then
 *   E_IO with the attempts counted on both sides, 503/429 that succeed after
 *   retries, a body cut short (retried, then E_IO "cut short"), a dropped
 *   connection, chunked bodies (buffer growth), empty bodies, max_bytes (by
 *   Content-Length and while receiving), a slow server against the timeout,
 *   a server killed or hung mid-run (every transfer fails in bounded time),
 *   https with a self-signed certificate (verify_tls 1 and 0), the stop
 *   flag and wakeup, E_STATE / E_INVALID, free with transfers in flight.
 * Skips (77) when nginx is not installed. Nothing depends on the machine's
 * speed: a bound on how long something takes is far above what a loaded
 * machine under a sanitizer needs and far below the timeout it rules out;
 * an order of events is forced by backoffs far longer than a request.
 *
 *   test_http bench [RATE]        the 16-vs-1 throughput measurement (not a
 *   test_http bench-nginx [RATE]  unit test): 32 files of 100 KB, paced per
 *                                 connection by the python server (default
 *                                 200k) or by nginx's limit_rate (default
 *                                 64k); prints both times and the ratio.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "check.h"
#include "common/clock.h"
#include "nginx_helper.h"
#include "source/http.h"

#define NFILES 48

static char g_root[4096], g_tmp[4096];
static int g_port, g_fport; /* nginx, faulty server */
static int g_tls_port;      /* nginx's https listener (self-signed), 0: none */
static size_t g_size[NFILES];
static uint8_t *g_data[NFILES];

static uint64_t xs_state = 0x9E3779B97F4A7C15ULL;
static uint64_t xs(void)
{
    xs_state ^= xs_state << 13;
    xs_state ^= xs_state >> 7;
    xs_state ^= xs_state << 17;
    return xs_state;
}

static void write_bytes(const char *path, const uint8_t *d, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(d, 1, n, f) != n) || fclose(f) != 0) {
        fprintf(stderr, "write %s: %s\n", path, strerror(errno));
        exit(1);
    }
}

static void write_text(const char *path, const char *text)
{
    write_bytes(path, (const uint8_t *)text, strlen(text));
}

/* JPEG-like files: SOI + APP0 marker, random entropy-ish bytes, EOI. */
static void make_files(void)
{
    char p[4300];
    for (int i = 0; i < NFILES; i++) {
        size_t n = 1000 + (size_t)(xs() % 150000);
        if (i == 0) n = 1; /* smallest possible body */
        if (i == 1) n = 65536;
        uint8_t *d = malloc(n);
        if (!d) exit(1);
        for (size_t k = 0; k < n; k++) d[k] = (uint8_t)xs();
        if (n >= 4) {
            d[0] = 0xFF, d[1] = 0xD8, d[2] = 0xFF, d[3] = 0xE0;
            d[n - 2] = 0xFF, d[n - 1] = 0xD9;
        }
        g_size[i] = n;
        g_data[i] = d;
        snprintf(p, sizeof p, "%s/img_%03d.jpg", g_root, i);
        write_bytes(p, d, n);
    }
    /* 2 MB for max_bytes and the slow server. */
    size_t n = 2u << 20;
    uint8_t *d = malloc(n);
    if (!d) exit(1);
    for (size_t k = 0; k < n; k++) d[k] = (uint8_t)(k * 31);
    snprintf(p, sizeof p, "%s/big.bin", g_root);
    write_bytes(p, d, n);
    free(d);
    snprintf(p, sizeof p, "%s/empty.jpg", g_root);
    write_bytes(p, NULL, 0);
}

static nst_http *make(uint32_t inflight, uint32_t timeout_ms, uint32_t retries, uint32_t backoff_ms,
                      uint64_t max_bytes, const atomic_int *stop)
{
    nst_http_opts o = {.max_inflight = inflight,
                       .timeout_ms = timeout_ms,
                       .retries = retries,
                       .backoff_ms = backoff_ms,
                       .verify_tls = 1,
                       .max_bytes = max_bytes,
                       .stop = stop};
    nst_http *h = NULL;
    CHECK_OK(nst_http_create(&h, &o));
    return h;
}

/* Fetch one URL to completion; returns the done record. */
static nst_http_done fetch1(nst_http *h, const char *url, nst_buf *buf)
{
    nst_http_done d;
    memset(&d, 0, sizeof d);
    d.status = 999;
    int rc = nst_http_submit(h, url, buf, 42);
    CHECK_OK(rc);
    if (rc < 0) return d;
    int w = 0;
    for (int i = 0; i < 200 && w == 0; i++) w = nst_http_wait(h, 100, &d);
    CHECK_EQ(w, 1);
    CHECK_EQ(d.tag, 42);
    CHECK_EQ(nst_http_inflight(h), 0);
    return d;
}

static void url_of(char *u, size_t n, int port, const char *path)
{
    snprintf(u, n, "http://127.0.0.1:%d%s", port, path);
}

static int has(const char *msg, const char *what)
{
    if (strstr(msg, what)) return 1;
    fprintf(stderr, "message '%s' lacks '%s'\n", msg, what);
    return 0;
}

/* Lines of nginx's access log whose uri is `uri` (or all when NULL), and the
 * number of distinct connections among them. */
static int log_count(const char *dir, const char *uri, int *conns)
{
    char p[4300], line[1024];
    long seen[4096];
    int n = 0, nc = 0;
    snprintf(p, sizeof p, "%s/access.log", dir);
    FILE *f = fopen(p, "r");
    if (!f) return -1;
    while (fgets(line, sizeof line, f)) {
        long conn, reqs;
        int status;
        char u[512];
        if (sscanf(line, "%ld %ld %d %511s", &conn, &reqs, &status, u) != 4) continue;
        if (uri && strcmp(u, uri) != 0) continue;
        n++;
        int known = 0;
        for (int i = 0; i < nc; i++) known |= seen[i] == conn;
        if (!known && nc < 4096) seen[nc++] = conn;
    }
    fclose(f);
    if (conns) *conns = nc;
    return n;
}

/* nginx logs a request after answering it: wait for the last line (up to
 * 10 s: a loaded machine may take a while to schedule nginx). */
static int log_count_wait(const char *dir, const char *uri, int want)
{
    int n = -1;
    for (int i = 0; i < 1000; i++) {
        n = log_count(dir, uri, NULL);
        if (n >= want) break;
        usleep(10000);
    }
    return n;
}

static void truncate_log(const char *dir)
{
    char p[4300];
    snprintf(p, sizeof p, "%s/access.log", dir);
    if (truncate(p, 0) != 0) fprintf(stderr, "truncate %s: %s\n", p, strerror(errno));
}

/* All files, `inflight` at a time, each slot with its own reused buffer. */
static void test_success(const char *ngdir, uint32_t inflight)
{
    nst_http *h = make(inflight, 10000, 0, 0, 0, NULL);
    if (!h) return;
    truncate_log(ngdir);
    nst_buf bufs[16] = {{0}};
    int busy[16] = {0}, got[NFILES] = {0};
    int next = 0, finished = 0;
    char url[256];
    while (finished < NFILES) {
        while (next < NFILES && nst_http_inflight(h) < inflight) {
            int b = 0;
            while (busy[b]) b++;
            char path[64];
            snprintf(path, sizeof path, "/img_%03d.jpg", next);
            url_of(url, sizeof url, g_port, path);
            int rc = nst_http_submit(h, url, &bufs[b], ((uint64_t)b << 32) | (uint64_t)next);
            CHECK_OK(rc);
            if (rc < 0) goto out;
            busy[b] = 1;
            next++;
        }
        nst_http_done d;
        int w = nst_http_wait(h, 5000, &d);
        CHECK_EQ(w, 1);
        if (w != 1) goto out;
        int b = (int)(d.tag >> 32), i = (int)(d.tag & 0xffffffffu);
        CHECK(b < 16 && i < NFILES && busy[b] && !got[i]);
        if (d.status != 0) fprintf(stderr, "item %d: %s\n", i, d.msg);
        CHECK_EQ(d.status, 0);
        CHECK_EQ(d.attempts, 1);
        CHECK_EQ(d.len, g_size[i]);
        if (d.status == 0 && d.len == g_size[i]) CHECK(memcmp(bufs[b].data, g_data[i], d.len) == 0);
        busy[b] = 0;
        got[i] = 1;
        finished++;
    }
    CHECK_EQ(nst_http_inflight(h), 0);
    {
        /* Nothing in flight: wait returns 0 at once, not after its 60 s. */
        nst_http_done d;
        uint64_t t0 = nst_now_ns();
        CHECK_EQ(nst_http_wait(h, 60000, &d), 0);
        CHECK(nst_now_ns() - t0 < 10000000000ULL);
    }
    int conns = 0;
    CHECK_EQ(log_count_wait(ngdir, NULL, NFILES), NFILES);
    log_count(ngdir, NULL, &conns);
    /* keep-alive: connections reused across items */
    CHECK(conns >= 1 && conns <= (int)inflight);
    printf("success: %d files, %u in flight, %d connection(s)\n", NFILES, inflight, conns);
out:
    nst_http_free(h);
    for (int b = 0; b < 16; b++) nst_buf_free(&bufs[b]);
}

static void test_statuses(const char *ngdir)
{
    nst_http *h = make(2, 5000, 3, 10, 0, NULL);
    if (!h) return;
    nst_buf buf = {0};
    char url[256];
    nst_http_done d;

    url_of(url, sizeof url, g_port, "/missing.jpg");
    d = fetch1(h, url, &buf);
    CHECK_RC(d.status, NOSTALL_E_NOT_FOUND);
    CHECK_EQ(d.attempts, 1);
    CHECK(has(d.msg, url) && has(d.msg, "404"));
    CHECK(has(nostall_last_error(), url));

    url_of(url, sizeof url, g_port, "/e410");
    d = fetch1(h, url, &buf);
    CHECK_RC(d.status, NOSTALL_E_NOT_FOUND);
    url_of(url, sizeof url, g_port, "/e403");
    d = fetch1(h, url, &buf);
    CHECK_RC(d.status, NOSTALL_E_PERMISSION);
    CHECK(has(d.msg, "403"));
    url_of(url, sizeof url, g_port, "/e401");
    d = fetch1(h, url, &buf);
    CHECK_RC(d.status, NOSTALL_E_PERMISSION);
    url_of(url, sizeof url, g_port, "/e418");
    d = fetch1(h, url, &buf);
    CHECK_RC(d.status, NOSTALL_E_IO);
    CHECK_EQ(d.attempts, 1); /* other 4xx: not retried */
    CHECK(has(d.msg, "418"));

    /* 500: retried 3 times, then E_IO; the server saw 4 requests. */
    truncate_log(ngdir);
    url_of(url, sizeof url, g_port, "/e500");
    d = fetch1(h, url, &buf);
    CHECK_RC(d.status, NOSTALL_E_IO);
    CHECK_EQ(d.attempts, 4);
    CHECK(has(d.msg, url) && has(d.msg, "HTTP 500") && has(d.msg, "4 attempts"));
    CHECK_EQ(log_count_wait(ngdir, "/e500", 4), 4);

    /* Redirect followed. */
    url_of(url, sizeof url, g_port, "/redir");
    d = fetch1(h, url, &buf);
    CHECK_EQ(d.status, 0);
    CHECK_EQ(d.len, g_size[5]);
    if (d.status == 0 && d.len == g_size[5]) CHECK(memcmp(buf.data, g_data[5], d.len) == 0);
    /* A redirect to another scheme is refused. */
    url_of(url, sizeof url, g_port, "/redir_ftp");
    d = fetch1(h, url, &buf);
    CHECK_RC(d.status, NOSTALL_E_IO);
    CHECK_EQ(d.attempts, 1);

    /* Empty body. */
    url_of(url, sizeof url, g_port, "/empty.jpg");
    d = fetch1(h, url, &buf);
    CHECK_RC(d.status, NOSTALL_E_EMPTY);
    CHECK(has(d.msg, "empty"));

    nst_http_free(h);
    nst_buf_free(&buf);
}

static int body_ok(const nst_buf *b, size_t len, const char *name, size_t want)
{
    if (len != want) return 0;
    size_t k = strlen(name);
    for (size_t i = 0; i < len; i++)
        if (b->data[i] != (uint8_t)((i * 7 + k) & 255)) return 0;
    return 1;
}

static int faulty_count(nst_http *h, const char *path)
{
    char url[512], p[400];
    nst_buf b = {0};
    snprintf(p, sizeof p, "/count%s", path);
    url_of(url, sizeof url, g_fport, p);
    nst_http_done d = fetch1(h, url, &b);
    int n = -1;
    if (d.status == 0 && d.len < 20) {
        char t[32];
        memcpy(t, b.data, d.len);
        t[d.len] = '\0';
        n = atoi(t);
    }
    nst_buf_free(&b);
    return n;
}

static void test_faults(void)
{
    nst_http *h = make(4, 5000, 3, 10, 0, NULL);
    if (!h) return;
    nst_buf buf = {0};
    char url[256];
    nst_http_done d;

    /* 503 twice, then 200: success on the 3rd attempt. */
    url_of(url, sizeof url, g_fport, "/flaky/503/2/a");
    d = fetch1(h, url, &buf);
    CHECK_EQ(d.status, 0);
    CHECK_EQ(d.attempts, 3);
    CHECK(body_ok(&buf, d.len, "a", 10000));
    CHECK_EQ(faulty_count(h, "/flaky/503/2/a"), 3);
    /* 429 once. */
    url_of(url, sizeof url, g_fport, "/flaky/429/1/bb");
    d = fetch1(h, url, &buf);
    CHECK_EQ(d.status, 0);
    CHECK_EQ(d.attempts, 2);
    CHECK(body_ok(&buf, d.len, "bb", 10000));
    /* More failures than retries: E_IO naming the last status. */
    url_of(url, sizeof url, g_fport, "/flaky/503/10/c");
    d = fetch1(h, url, &buf);
    CHECK_RC(d.status, NOSTALL_E_IO);
    CHECK_EQ(d.attempts, 4);
    CHECK(has(d.msg, "HTTP 503"));
    CHECK_EQ(faulty_count(h, "/flaky/503/10/c"), 4);

    /* Body cut short: Content-Length 100000, 50000 sent, connection closed. */
    url_of(url, sizeof url, g_fport, "/cut/100000/d");
    d = fetch1(h, url, &buf);
    CHECK_RC(d.status, NOSTALL_E_IO);
    CHECK_EQ(d.attempts, 4);
    CHECK(has(d.msg, url) && has(d.msg, "cut short") && has(d.msg, "got 50000 of 100000 bytes"));
    CHECK_EQ(faulty_count(h, "/cut/100000/d"), 4);

    /* Connection closed without a response. */
    url_of(url, sizeof url, g_fport, "/drop/e");
    d = fetch1(h, url, &buf);
    CHECK_RC(d.status, NOSTALL_E_IO);
    CHECK_EQ(d.attempts, 4);

    /* Other statuses from a non-nginx server. */
    url_of(url, sizeof url, g_fport, "/status/410/f");
    d = fetch1(h, url, &buf);
    CHECK_RC(d.status, NOSTALL_E_NOT_FOUND);
    CHECK_EQ(d.attempts, 1);
    url_of(url, sizeof url, g_fport, "/status/502/f");
    d = fetch1(h, url, &buf);
    CHECK_RC(d.status, NOSTALL_E_IO);
    CHECK_EQ(d.attempts, 4);
    url_of(url, sizeof url, g_fport, "/empty/g");
    d = fetch1(h, url, &buf);
    CHECK_RC(d.status, NOSTALL_E_EMPTY);

    /* Chunked (no length): the buffer grows, contents kept. */
    nst_buf small = {0};
    url_of(url, sizeof url, g_fport, "/chunked/300001/hh");
    d = fetch1(h, url, &small);
    CHECK_EQ(d.status, 0);
    CHECK(body_ok(&small, d.len, "hh", 300001));
    nst_buf_free(&small);

    /* Several flaky transfers at once: retries interleave, nothing blocks.
     * A 1 s backoff (not 10 ms) so that, even on a loaded machine or under a
     * sanitizer, no retry can finish before the healthy transfer does. */
    nst_http_free(h);
    h = make(4, 5000, 3, 1000, 0, NULL);
    if (!h) {
        nst_buf_free(&buf);
        return;
    }
    const char *paths[4] = {"/flaky/503/1/m1", "/flaky/429/2/m22", "/ok/5000/m333",
                            "/flaky/500/3/m4444"};
    nst_buf bufs[4] = {{0}};
    for (int i = 0; i < 4; i++) {
        url_of(url, sizeof url, g_fport, paths[i]);
        CHECK_OK(nst_http_submit(h, url, &bufs[i], (uint64_t)i));
    }
    CHECK_RC(nst_http_submit(h, url, &buf, 9), NOSTALL_E_STATE);
    int seen = 0;
    for (int k = 0; k < 4; k++) {
        int w = nst_http_wait(h, 5000, &d);
        CHECK_EQ(w, 1);
        if (w != 1) break;
        CHECK(d.tag < 4);
        int i = (int)d.tag;
        static const uint32_t want_attempts[4] = {2, 3, 1, 4};
        static const char *names[4] = {"m1", "m22", "m333", "m4444"};
        CHECK_EQ(d.status, 0);
        CHECK_EQ(d.attempts, want_attempts[i]);
        CHECK(body_ok(&bufs[i], d.len, names[i], i == 2 ? 5000 : 10000));
        if (k == 0) CHECK_EQ(i, 2); /* the healthy one is not held back */
        seen |= 1 << i;
    }
    CHECK_EQ(seen, 15);
    for (int i = 0; i < 4; i++) nst_buf_free(&bufs[i]);

    nst_http_free(h);
    nst_buf_free(&buf);
}

static void test_limits(void)
{
    nst_buf buf = {0};
    char url[256];
    nst_http_done d;
    nst_http *h = make(1, 5000, 3, 10, 100000, NULL);
    if (!h) return;
    /* By Content-Length: fails at the headers, not retried. */
    url_of(url, sizeof url, g_port, "/big.bin");
    d = fetch1(h, url, &buf);
    CHECK_RC(d.status, NOSTALL_E_FILE_TOO_LARGE);
    CHECK_EQ(d.attempts, 1);
    CHECK(has(d.msg, url) && has(d.msg, "100000"));
    CHECK(buf.cap < 1000000); /* never sized for the whole body */
    /* While receiving (no Content-Length). */
    url_of(url, sizeof url, g_fport, "/chunked/300000/x");
    d = fetch1(h, url, &buf);
    CHECK_RC(d.status, NOSTALL_E_FILE_TOO_LARGE);
    CHECK_EQ(d.attempts, 1);
    /* Exactly at the limit is fine. */
    url_of(url, sizeof url, g_fport, "/chunked/100000/x");
    d = fetch1(h, url, &buf);
    CHECK_EQ(d.status, 0);
    CHECK(body_ok(&buf, d.len, "x", 100000));
    url_of(url, sizeof url, g_fport, "/ok/100000/y");
    d = fetch1(h, url, &buf);
    CHECK_EQ(d.status, 0);
    CHECK(body_ok(&buf, d.len, "y", 100000));
    url_of(url, sizeof url, g_fport, "/ok/100001/y");
    d = fetch1(h, url, &buf);
    CHECK_RC(d.status, NOSTALL_E_FILE_TOO_LARGE);
    nst_http_free(h);

    /* Slow server (100 KB/s for 2 MB: 20 s) against a 300 ms timeout, 1
     * retry: two attempts of 300 ms, never less; far less than one whole
     * body (10 s: room for a loaded machine). */
    h = make(1, 300, 1, 10, 0, NULL);
    if (!h) return;
    url_of(url, sizeof url, g_port, "/slow/big.bin");
    uint64_t t0 = nst_now_ns();
    d = fetch1(h, url, &buf);
    double s = (double)(nst_now_ns() - t0) / 1e9;
    CHECK_RC(d.status, NOSTALL_E_IO);
    CHECK_EQ(d.attempts, 2);
    CHECK(has(d.msg, url) && has(d.msg, "timed out after 300 ms"));
    CHECK(s > 0.55 && s < 10.0);
    printf("timeout: %s (%.2f s)\n", d.msg, s);
    nst_http_free(h);

    /* API misuse. */
    h = make(1, 1000, 0, 0, 0, NULL);
    if (!h) return;
    CHECK_RC(nst_http_submit(h, "ftp://127.0.0.1/x", &buf, 1), NOSTALL_E_INVALID);
    CHECK_RC(nst_http_submit(h, "/local/file.jpg", &buf, 1), NOSTALL_E_INVALID);
    CHECK_EQ(nst_http_inflight(h), 0);
    /* Connection refused (nothing listens on port 1): retried 0 times. */
    d = fetch1(h, "http://127.0.0.1:1/x.jpg", &buf);
    CHECK_RC(d.status, NOSTALL_E_IO);
    CHECK(has(d.msg, "127.0.0.1:1/x.jpg"));
    /* Free with a transfer in flight. */
    url_of(url, sizeof url, g_port, "/slow/big.bin");
    CHECK_OK(nst_http_submit(h, url, &buf, 1));
    CHECK_EQ(nst_http_inflight(h), 1);
    CHECK_RC(nst_http_submit(h, url, &buf, 2), NOSTALL_E_STATE);
    CHECK_EQ(nst_http_wait(h, 50, &d), 0);
    nst_http_free(h);
    nst_http_free(NULL);

    nst_http_opts bad = {.max_inflight = 0};
    CHECK_RC(nst_http_create(&h, &bad), NOSTALL_E_INVALID);

    CHECK_EQ(nst_http_is_url("http://x/a.jpg"), 1);
    CHECK_EQ(nst_http_is_url("HTTPS://x/a.jpg"), 1);
    CHECK_EQ(nst_http_is_url("HtTp://x"), 1);
    CHECK_EQ(nst_http_is_url("http:/x"), 0);
    CHECK_EQ(nst_http_is_url("s3://b/k"), 0);
    CHECK_EQ(nst_http_is_url("/abs/a.jpg"), 0);
    CHECK_EQ(nst_http_is_url(""), 0);
    CHECK_EQ(nst_http_is_url(NULL), 0);
    nst_buf_free(&buf);
}

/* A port that was free a moment ago (bind to 0, read it, close). */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = 0;
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port;
}

/* https with a self-signed certificate: refused (not retried) when
 * verifying, fetched when verify_tls is 0. */
static void test_tls(void)
{
    char url[256];
    nst_buf buf = {0};
    nst_http_done d;
    snprintf(url, sizeof url, "https://127.0.0.1:%d/img_003.jpg", g_tls_port);
    nst_http *h = make(1, 5000, 3, 10, 0, NULL);
    if (!h) return;
    d = fetch1(h, url, &buf);
    CHECK_RC(d.status, NOSTALL_E_IO);
    CHECK_EQ(d.attempts, 1);
    CHECK(has(d.msg, url));
    printf("tls verify: %s\n", d.msg);
    nst_http_free(h);
    nst_http_opts o = {.max_inflight = 1, .timeout_ms = 5000, .verify_tls = 0};
    h = NULL;
    CHECK_OK(nst_http_create(&h, &o));
    if (!h) return;
    d = fetch1(h, url, &buf);
    CHECK_EQ(d.status, 0);
    CHECK_EQ(d.len, g_size[3]);
    if (d.status == 0 && d.len == g_size[3]) CHECK(memcmp(buf.data, g_data[3], d.len) == 0);
    nst_http_free(h);
    nst_buf_free(&buf);
}

typedef struct {
    atomic_int *stop;
    nst_http *h;
    int delay_ms;
    _Atomic uint64_t set_ns; /* when the flag was set */
} stopper;

static void *stop_later(void *arg)
{
    stopper *s = arg;
    usleep((useconds_t)s->delay_ms * 1000);
    atomic_store(&s->set_ns, nst_now_ns());
    atomic_store(s->stop, 1);
    if (s->h) nst_http_wakeup(s->h);
    return NULL;
}

static void test_stop(void)
{
    atomic_int stop = 0;
    nst_buf buf = {0};
    char url[256];
    nst_http_done d;
    nst_http *h = make(1, 30000, 0, 0, 0, &stop);
    if (!h) return;
    url_of(url, sizeof url, g_port, "/slow/big.bin");
    CHECK_OK(nst_http_submit(h, url, &buf, 1));
    /* Set from another thread while waiting: returns once the flag is set
     * (not before), promptly: within 5 s of it, where the wait's timeout is
     * 60 s and the transfer takes 20 s (the latency, ~20 ms by the periodic
     * check, is printed). Once with a wakeup, once by the check alone. */
    for (int with_wakeup = 1; with_wakeup >= 0; with_wakeup--) {
        atomic_store(&stop, 0);
        stopper s = {&stop, with_wakeup ? h : NULL, 150, 0};
        pthread_t t;
        CHECK_EQ(pthread_create(&t, NULL, stop_later, &s), 0);
        CHECK_EQ(nst_http_wait(h, 60000, &d), 0);
        uint64_t back = nst_now_ns();
        pthread_join(t, NULL);
        uint64_t set = atomic_load(&s.set_ns);
        CHECK(set > 0 && back >= set);
        double ms = set && back >= set ? (double)(back - set) / 1e6 : -1;
        CHECK(ms >= 0 && ms < 5000);
        printf("stop (%s): wait returned %.1f ms after the flag was set\n",
               with_wakeup ? "wakeup" : "poll", ms);
    }
    /* Already set: returns at once (not after its 60 s); the transfer is
     * still in flight. */
    uint64_t t0 = nst_now_ns();
    CHECK_EQ(nst_http_wait(h, 60000, &d), 0);
    CHECK(nst_now_ns() - t0 < 5000000000ULL);
    CHECK_EQ(nst_http_inflight(h), 1);
    nst_http_free(h);
    nst_buf_free(&buf);
}

/* Send sig to nginx's worker processes (children of the master in dir). */
static void signal_workers(const char *dir, int sig)
{
    char p[4400], cmd[4500];
    snprintf(p, sizeof p, "%s/nginx.pid", dir);
    FILE *f = fopen(p, "r");
    int master = 0;
    if (f) {
        if (fscanf(f, "%d", &master) != 1) master = 0;
        fclose(f);
    }
    CHECK(master > 0);
    if (master <= 0) return;
    snprintf(cmd, sizeof cmd, "ps -o pid= --ppid %d", master);
    FILE *ps = popen(cmd, "r");
    int pid, n = 0;
    while (ps && fscanf(ps, "%d", &pid) == 1) n += kill(pid, sig) == 0;
    if (ps) pclose(ps);
    CHECK(n >= 1);
}

/* 8 slow transfers in flight when the server goes away: killed (connections
 * closed, then refused) or hung (SIGSTOP: nothing answers, connections
 * still accepted by the kernel). Every transfer reports E_IO within
 * timeout x (retries + 1) plus the backoffs (with a quarter and 2 s of
 * slack for a loaded machine), never waits for the 40 s bodies. */
static void test_server_gone(int hang)
{
    char dir[4300];
    int port;
    snprintf(dir, sizeof dir, "%s/nginx-gone-%d", g_tmp, hang);
    if (nginx_start(dir, g_root, "50k", &port) != 0) {
        CHECK(!"nginx for test_server_gone");
        return;
    }
    const uint32_t timeout = hang ? 400 : 1500, retries = 2, backoff = 50;
    nst_http *h = make(8, timeout, retries, backoff, 0, NULL);
    if (!h) return;
    nst_buf bufs[8] = {{0}};
    char url[256];
    url_of(url, sizeof url, port, "/big.bin");
    for (int i = 0; i < 8; i++) CHECK_OK(nst_http_submit(h, url, &bufs[i], (uint64_t)i));
    nst_http_done d;
    CHECK_EQ(nst_http_wait(h, 200, &d), 0); /* all still receiving */
    uint64_t t0 = nst_now_ns();
    if (hang)
        signal_workers(dir, SIGSTOP);
    else
        nginx_stop(dir);
    int errors = 0, seen = 0;
    for (int k = 0; k < 8; k++) {
        int w = nst_http_wait(h, 20000, &d);
        CHECK_EQ(w, 1);
        if (w != 1) break;
        seen |= 1 << (int)d.tag;
        if (d.status < 0) errors++;
        if (k == 0) printf("server %s: %s\n", hang ? "hung" : "gone", d.msg);
        CHECK_RC(d.status, NOSTALL_E_IO);
        if (hang) CHECK(has(d.msg, "timed out"));
    }
    double s = (double)(nst_now_ns() - t0) / 1e9;
    double bound = 1.25 * (timeout * (retries + 1) / 1e3 + (backoff + 2 * backoff) / 1e3) + 2.0;
    CHECK_EQ(errors, 8);
    CHECK_EQ(seen, 255);
    CHECK(s < bound);
    printf("server %s: 8 transfers failed within %.2f s (bound %.2f s)\n", hang ? "hung" : "gone",
           s, bound);
    nst_http_free(h);
    for (int i = 0; i < 8; i++) nst_buf_free(&bufs[i]);
    if (hang) {
        signal_workers(dir, SIGCONT);
        nginx_stop(dir);
    }
}

static pid_t g_fpid;

/* Start tests/http_faulty_server.py (optionally serving `root`, paced at
 * `rate` per connection); sets g_fpid and g_fport. */
static int start_faulty(const char *root, const char *rate)
{
    const char *py = "/usr/bin/python3";
    char script[4096], portfile[4300];
    const char *hs = nginx_script();
    snprintf(script, sizeof script, "%.*s/http_faulty_server.py", (int)(strrchr(hs, '/') - hs), hs);
    snprintf(portfile, sizeof portfile, "%s/faulty.port", g_tmp);
    unlink(portfile);
    if (access(py, X_OK) != 0) py = "python3";
    const char *argv[10];
    int n = 0;
    argv[n++] = py;
    argv[n++] = script;
    if (root) argv[n++] = "--root", argv[n++] = root;
    if (rate) argv[n++] = "--rate", argv[n++] = rate;
    argv[n++] = portfile;
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        execvp(py, (char *const *)argv);
        _exit(127);
    }
    g_fpid = pid;
    for (int i = 0; i < 1200; i++) { /* up to 30 s for python to start */
        FILE *f = fopen(portfile, "r");
        if (f) {
            int ok = fscanf(f, "%d", &g_fport) == 1;
            fclose(f);
            if (ok && g_fport > 0) return 0;
        }
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            g_fpid = 0;
            return -1;
        }
        usleep(25000);
    }
    return -1;
}

static void stop_faulty(void)
{
    if (g_fpid > 0) {
        kill(g_fpid, SIGTERM);
        waitpid(g_fpid, NULL, 0);
        g_fpid = 0;
    }
}

/* 1 vs 16 transfers in flight over 32 files of 100 KB from port `port`;
 * returns the ratio of the times. */
static double bench_run(int port, const char *prefix, const char *what)
{
    double t[2];
    uint32_t depth[2] = {1, 16};
    for (int r = 0; r < 2; r++) {
        nst_http *h = make(depth[r], 60000, 0, 0, 0, NULL);
        if (!h) return 0;
        nst_buf bufs[16] = {{0}};
        int busy[16] = {0}, next = 0, fin = 0;
        uint64_t t0 = nst_now_ns();
        while (fin < 32) {
            while (next < 32 && nst_http_inflight(h) < depth[r]) {
                int b = 0;
                while (busy[b]) b++;
                char url[256], path[64];
                snprintf(path, sizeof path, "%s/f%02d.jpg", prefix, next++);
                url_of(url, sizeof url, port, path);
                CHECK_OK(nst_http_submit(h, url, &bufs[b], (uint64_t)b));
                busy[b] = 1;
            }
            nst_http_done dn;
            if (nst_http_wait(h, 60000, &dn) != 1) break;
            if (dn.status) fprintf(stderr, "%s\n", dn.msg);
            CHECK_EQ(dn.status, 0);
            CHECK_EQ(dn.len, 100000);
            busy[dn.tag] = 0;
            fin++;
        }
        t[r] = (double)(nst_now_ns() - t0) / 1e9;
        printf("bench %s: %2u in flight: 32 x 100 KB in %.3f s (%.0f KB/s)\n", what, depth[r], t[r],
               3200.0 / t[r]);
        fflush(stdout);
        nst_http_free(h);
        for (int b = 0; b < 16; b++) nst_buf_free(&bufs[b]);
    }
    printf("bench %s: 16 vs 1 in flight: %.1fx\n", what, t[0] / t[1]);
    return t[0] / t[1];
}

/* test_http bench [RATE]          python server pacing RATE (default 200k)
 *                                  per connection, smoothly
 * test_http bench-nginx [RATE]    nginx limit_rate RATE (default 64k: see
 *                                  http_faulty_server.py on why not 200k) */
static int bench(int use_nginx, const char *rate)
{
    char dir[4300], root[4300], p[4400], label[64];
    int port;
    snprintf(root, sizeof root, "%s/bench-root", g_tmp);
    mkdir(root, 0755);
    uint8_t *d = malloc(100000);
    if (!d) return 1;
    for (int i = 0; i < 32; i++) {
        for (int k = 0; k < 100000; k++) d[k] = (uint8_t)xs();
        snprintf(p, sizeof p, "%s/f%02d.jpg", root, i);
        write_bytes(p, d, 100000);
    }
    free(d);
    if (use_nginx) {
        if (!rate) rate = "64k";
        snprintf(dir, sizeof dir, "%s/nginx-bench", g_tmp);
        int rc = nginx_start(dir, root, rate, &port);
        if (rc) return rc;
        snprintf(label, sizeof label, "nginx limit_rate %s", rate);
        bench_run(port, "", label);
        nginx_stop(dir);
    } else {
        if (!rate) rate = "200k";
        if (start_faulty(root, rate) != 0) return 1;
        snprintf(label, sizeof label, "python %s/s per connection", rate);
        bench_run(g_fport, "", label);
        stop_faulty();
    }
    TEST_EXIT();
}

int main(int argc, char **argv)
{
    static const char *proxies[] = {"http_proxy",  "https_proxy", "HTTP_PROXY",
                                    "HTTPS_PROXY", "ALL_PROXY",   "all_proxy"};
    for (size_t i = 0; i < sizeof proxies / sizeof proxies[0]; i++) unsetenv(proxies[i]);
    snprintf(g_tmp, sizeof g_tmp, "%s", test_tmpdir("http"));
    snprintf(g_root, sizeof g_root, "%s/root", g_tmp);
    mkdir(g_root, 0755);
    if (argc > 1 && strncmp(argv[1], "bench", 5) == 0) {
        int rc = bench(strcmp(argv[1], "bench-nginx") == 0, argc > 2 ? argv[2] : NULL);
        if (rc == 77) printf("SKIP: nginx is not installed\n");
        return rc;
    }
    make_files();

    char ngdir[4300], conf[4400];
    snprintf(ngdir, sizeof ngdir, "%s/nginx", g_tmp);
    snprintf(conf, sizeof conf, "%s/conf.d", ngdir);
    mkdir(ngdir, 0755);
    mkdir(conf, 0755);
    snprintf(conf, sizeof conf, "%s/conf.d/test.conf", ngdir);
    char text[8192];
    snprintf(text, sizeof text,
             "location = /e500 { return 500; }\n"
             "location = /e403 { return 403; }\n"
             "location = /e401 { return 401; }\n"
             "location = /e410 { return 410; }\n"
             "location = /e418 { return 418; }\n"
             "location = /redir { return 302 /img_005.jpg; }\n"
             "location = /redir_ftp { return 302 ftp://127.0.0.1/x; }\n"
             "location /slow/ { alias %s/; limit_rate 100k; }\n",
             g_root);
    write_text(conf, text);
    /* https on a second port, when openssl can make a certificate. */
    char cmd[9000];
    snprintf(cmd, sizeof cmd,
             "openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=nostall-test -days 2 "
             "-keyout '%s/key.pem' -out '%s/cert.pem' >/dev/null 2>&1",
             ngdir, ngdir);
    if (system(cmd) == 0 && (g_tls_port = free_port()) > 0) {
        snprintf(conf, sizeof conf, "%s/conf.d/tls.conf", ngdir);
        snprintf(text, sizeof text,
                 "listen 127.0.0.1:%d ssl;\n"
                 "ssl_certificate %s/cert.pem;\n"
                 "ssl_certificate_key %s/key.pem;\n",
                 g_tls_port, ngdir, ngdir);
        write_text(conf, text);
    } else {
        printf("openssl cannot make a certificate: https not tested\n");
        g_tls_port = 0;
    }
    int rc = nginx_start(ngdir, g_root, NULL, &g_port);
    if (rc == 77) {
        printf("SKIP: nginx is not installed\n");
        return 77;
    }
    if (rc != 0) {
        fprintf(stderr, "FAIL: cannot start nginx\n");
        return 1;
    }
    if (start_faulty(NULL, NULL) != 0) {
        fprintf(stderr, "cannot start tests/http_faulty_server.py\n");
        check_failures_++;
    }

    test_success(ngdir, 1);
    test_success(ngdir, 16);
    test_statuses(ngdir);
    if (g_fport > 0) {
        test_faults();
        test_limits();
    }
    if (g_tls_port) test_tls();
    test_stop();
    test_server_gone(0);
    test_server_gone(1);

    stop_faulty();
    nginx_stop(ngdir);
    for (int i = 0; i < NFILES; i++) free(g_data[i]);
    TEST_EXIT();
}
