/*
 * shards.c — shard names, brace patterns, and each shard's index file
 * from its sidecar, the cache or a header pass (see shards.h).
 * Room: dataset/ (what the items are).
 *
 * Design. Each shard is one job: find an index file that describes it, or
 * make one by scanning its tar headers with tar.c's scanner through a
 * buffered window (pread for local files, ranged GETs with a small
 * synchronous libcurl helper for URLs; the window is refilled at the
 * scanner's position, so skipping a member's data costs nothing but the
 * next read). Jobs run on a few threads, taken in shard order with a
 * bounded lead over the caller (at most `window` finished and unconsumed),
 * and are handed back in order, so memory stays that of a few shards'
 * index files whatever the number of shards. A job that fails is handed
 * back as its status and message (the caller counts a bad shard); a
 * header pass refuses compressed data (gzip, bzip2, xz, zstd magic) before
 * scanning it as a damaged tar. HTTP retries wait a doubling backoff or
 * the server's Retry-After, bounded by the options.
 *
 * Threads: the caller's thread and the pool's; the pool's mutex guards
 * next, consumed, stop, the jobs' done flags and the summed stats; each
 * worker owns its libcurl handle and its job's buffers until done is set.
 */
#include "dataset/shards.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "nostall.h"
#include "source/http.h"
#include "source/reader.h"
#include "source/s3.h"
#include "dataset/tar.h"

#define LOCAL_CHUNK (64 * 1024)
#define HTTP_CHUNK (16 * 1024)
#define SIDECAR_MAX ((size_t)1 << 30)
#define MAX_THREADS 64
#define MAX_REDIRS 5
#define STR2_(x) #x
#define STR_(x) STR2_(x)
#define USER_AGENT                                                                                 \
    "nostall/" STR_(NOSTALL_VERSION_MAJOR) "." STR_(NOSTALL_VERSION_MINOR) "." STR_(               \
        NOSTALL_VERSION_PATCH)

void nst_shard_opts_default(nst_shard_opts *o)
{
    *o = (nst_shard_opts){.threads = 0, .timeout_ms = 30000, .retries = 3, .verify_tls = 1};
}

/* ---- names ------------------------------------------------------------- */

int nst_shard_is_url(const char *s) { return nst_http_handles(s); }

const char *nst_shard_compression(const uint8_t *p, size_t n)
{
    if (n >= 2 && p[0] == 0x1f && p[1] == 0x8b) return "gzip";
    if (n >= 3 && memcmp(p, "BZh", 3) == 0) return "bzip2";
    if (n >= 6 && memcmp(p,
                         "\xfd"
                         "7zXZ\0",
                         6) == 0)
        return "xz";
    if (n >= 4 && memcmp(p, "\x28\xb5\x2f\xfd", 4) == 0) return "zstd";
    return NULL;
}

int nst_shard_is_tar(const char *s)
{
    size_t n = strlen(s);
    if (nst_shard_is_url(s)) {
        const char *q = strchr(s, '?');
        if (q) n = (size_t)(q - s);
    }
    if (n < 4) return 0;
    const char *e = s + n - 4;
    return e[0] == '.' && (e[1] | 0x20) == 't' && (e[2] | 0x20) == 'a' && (e[3] | 0x20) == 'r';
}

/* The next brace group at or after p: *open at '{', *close at its '}',
 * *range set when it is "a..b" (digits), else alternatives (a ','). 0 if
 * none. Braces without ".." or ',' are literal text. */
static int next_group(const char *p, const char **open, const char **close, int *range)
{
    for (const char *o = strchr(p, '{'); o; o = strchr(o + 1, '{')) {
        const char *c = strchr(o + 1, '}');
        if (!c) return 0;
        const char *inner_open = memchr(o + 1, '{', (size_t)(c - o - 1));
        if (inner_open) continue; /* nested: the inner one is tried next */
        const char *dots = NULL;
        for (const char *q = o + 1; q + 1 < c; q++)
            if (q[0] == '.' && q[1] == '.') {
                dots = q;
                break;
            }
        if (dots) {
            int ok = dots > o + 1 && dots + 2 < c;
            for (const char *q = o + 1; ok && q < c; q++)
                if (q != dots && q != dots + 1 && (*q < '0' || *q > '9')) ok = 0;
            if (ok) {
                *open = o, *close = c, *range = 1;
                return 1;
            }
        }
        if (memchr(o + 1, ',', (size_t)(c - o - 1))) {
            *open = o, *close = c, *range = 0;
            return 1;
        }
    }
    return 0;
}

int nst_shard_has_braces(const char *s)
{
    const char *o, *c;
    int r;
    return next_group(s, &o, &c, &r);
}

typedef struct expander {
    const char *pattern;
    int (*add)(void *, const char *);
    void *ctx;
    char *buf;
    size_t cap;
    uint64_t count;
} expander;

static int expand_at(expander *x, const char *p, size_t blen)
{
    const char *o, *c;
    int range;
    if (!next_group(p, &o, &c, &range)) {
        size_t n = strlen(p);
        if (blen + n + 1 > x->cap)
            return nst_error(NOSTALL_E_DATASET, "index: %s: pattern too long", x->pattern);
        memcpy(x->buf + blen, p, n + 1);
        if (++x->count > NST_SHARDS_MAX)
            return nst_error(NOSTALL_E_DATASET, "index: %s: more than %d shards",
                             NST_MSG_PATH(x->pattern), NST_SHARDS_MAX);
        return x->add(x->ctx, x->buf);
    }
    const size_t lit = (size_t)(o - p);
    if (blen + lit + 24 > x->cap)
        return nst_error(NOSTALL_E_DATASET, "index: %s: pattern too long", x->pattern);
    memcpy(x->buf + blen, p, lit);
    blen += lit;
    int rc = 0;
    if (range) {
        const char *a = o + 1, *dots = strstr(a, "..");
        const size_t alen = (size_t)(dots - a), zlen = (size_t)(c - dots - 2);
        if (alen > 18 || zlen > 18)
            return nst_error(NOSTALL_E_DATASET, "index: %s: range bound too large",
                             NST_MSG_PATH(x->pattern));
        uint64_t lo = strtoull(a, NULL, 10), hi = strtoull(dots + 2, NULL, 10);
        int width = 0;
        if ((alen > 1 && a[0] == '0') || (zlen > 1 && dots[2] == '0'))
            width = (int)(alen > zlen ? alen : zlen);
        const int down = lo > hi;
        for (uint64_t v = lo;; v = down ? v - 1 : v + 1) {
            int k = snprintf(x->buf + blen, 24, "%0*llu", width, (unsigned long long)v);
            if ((rc = expand_at(x, c + 1, blen + (size_t)k)) < 0) return rc;
            if (v == hi) break;
        }
        return 0;
    }
    for (const char *q = o + 1; q <= c;) {
        const char *e = q;
        while (e < c && *e != ',') e++;
        memcpy(x->buf + blen, q, (size_t)(e - q));
        if ((rc = expand_at(x, c + 1, blen + (size_t)(e - q))) < 0) return rc;
        q = e + 1;
    }
    return 0;
}

int nst_shards_expand(const char *pattern, int (*add)(void *ctx, const char *name), void *ctx)
{
    size_t groups = 0;
    for (const char *p = pattern; *p; p++) groups += *p == '{';
    expander x = {.pattern = pattern, .add = add, .ctx = ctx};
    x.cap = strlen(pattern) + 24 * (groups + 1) + 1;
    if (!(x.buf = malloc(x.cap))) return nst_error(NOSTALL_E_NOMEM, "index: out of memory");
    int rc = expand_at(&x, pattern, 0);
    free(x.buf);
    return rc;
}

int nst_shard_sidecar_name(const char *shard, char *buf, size_t n)
{
    size_t len = strlen(shard);
    const char *q = nst_shard_is_url(shard) ? strchr(shard, '?') : NULL;
    size_t head = q ? (size_t)(q - shard) : len;
    int k = snprintf(buf, n, "%.*s%s%s", (int)head, shard, NST_TAR_INDEX_SUFFIX, q ? q : "");
    return k < 0 || (size_t)k >= n ? -1 : 0;
}

/* ---- reading a shard --------------------------------------------------- */

typedef struct rd {
    const char *name; /* path or URL */
    const nst_shard_opts *o;
    int fd;
    CURL *c;       /* the worker's handle (URLs) */
    uint64_t size; /* the shard's bytes */
    uint8_t *buf;  /* the window: bytes [boff, boff + len) */
    size_t cap, len;
    uint64_t boff;
    nst_tar_index_ident id; /* the shard's identity, as read */
    nst_shard_stats st;
} rd;

/* A response being received. */
typedef struct hbody {
    uint8_t *data;
    size_t len, cap, limit;
    int over, has_range;
    uint64_t a, b, total;   /* Content-Range: bytes a-b/total (total 0: '*') */
    uint64_t etag, lastmod; /* hashes of those headers' values (0: absent) */
    uint64_t retry_after;   /* Retry-After: seconds (0: none or a date)      */
} hbody;

static size_t h_body(char *p, size_t sz, size_t nm, void *ud)
{
    hbody *h = ud;
    const size_t n = sz * nm;
    if (n > h->limit - h->len) {
        h->over = 1;
        return 0;
    }
    if (h->len + n > h->cap) {
        size_t cap = h->cap ? h->cap : 4096;
        while (cap < h->len + n) cap *= 2;
        uint8_t *d = realloc(h->data, cap);
        if (!d) return 0;
        h->data = d;
        h->cap = cap;
    }
    memcpy(h->data + h->len, p, n);
    h->len += n;
    return n;
}

static uint64_t dec(const char **pp, const char *end, int *ok)
{
    const char *p = *pp;
    uint64_t v = 0;
    int digits = 0;
    while (p < end && *p >= '0' && *p <= '9' && digits < 19)
        v = v * 10 + (uint64_t)(*p++ - '0'), digits++;
    if (!digits) *ok = 0;
    *pp = p;
    return v;
}

static size_t h_header(char *p, size_t sz, size_t nm, void *ud)
{
    hbody *h = ud;
    const size_t n = sz * nm;
    const char *end = p + n;
    if (n >= 5 && !strncmp(p, "HTTP/", 5)) { /* a new response (redirect): start over */
        h->len = 0;
        h->has_range = 0;
        h->etag = h->lastmod = 0;
        h->retry_after = 0;
        return n;
    }
    static const char et[] = "etag:", lm[] = "last-modified:";
    for (int k = 0; k < 2; k++) { /* the validators, for the shard's identity */
        const char *f = k ? lm : et;
        const size_t fl = k ? sizeof lm - 1 : sizeof et - 1;
        size_t i = 0;
        while (i < fl && i < n && (p[i] | 0x20) == f[i]) i++;
        if (i < fl) continue;
        const char *v = p + fl, *e = end;
        while (v < e && (*v == ' ' || *v == '\t')) v++;
        while (e > v && (e[-1] == '\r' || e[-1] == '\n' || e[-1] == ' ')) e--;
        uint64_t x = 0;
        nostall_checksum_update(&x, v, (size_t)(e - v));
        *(k ? &h->lastmod : &h->etag) = x ? x : 1;
        return n;
    }
    static const char ra[] = "retry-after:";
    if (n > sizeof ra - 1 && !strncasecmp(p, ra, sizeof ra - 1)) {
        const char *q = p + sizeof ra - 1;
        while (q < end && *q == ' ') q++;
        int ok = 1;
        uint64_t s = dec(&q, end, &ok); /* delta-seconds; an HTTP-date is not read */
        h->retry_after = ok ? s : 0;
        return n;
    }
    static const char cr[] = "content-range:";
    if (n < sizeof cr - 1) return n;
    for (size_t i = 0; i < sizeof cr - 1; i++)
        if ((p[i] | 0x20) != cr[i]) return n;
    const char *q = p + sizeof cr - 1;
    while (q < end && *q == ' ') q++;
    if (end - q < 6 || strncmp(q, "bytes ", 6) != 0) return n;
    q += 6;
    int ok = 1;
    h->a = dec(&q, end, &ok);
    if (q < end && *q == '-')
        q++;
    else
        ok = 0;
    h->b = dec(&q, end, &ok);
    if (q < end && *q == '/')
        q++;
    else
        ok = 0;
    h->total = (q < end && *q == '*') ? 0 : dec(&q, end, &ok);
    h->has_range = ok && h->b >= h->a;
    return n;
}

static int curl_transient(CURLcode rc)
{
    switch (rc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR: return 1;
    default: return 0;
    }
}

static void sleep_ms(uint32_t ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* The wait before retry attempt + 1: backoff_ms * 2^attempt, or the
 * server's Retry-After when longer; at most max_backoff_ms. */
static uint32_t retry_wait_ms(const nst_shard_opts *o, uint32_t attempt, uint64_t retry_after_s)
{
    const uint64_t cap = o->max_backoff_ms ? o->max_backoff_ms : 8000;
    uint64_t ms = o->backoff_ms ? o->backoff_ms : 250;
    for (uint32_t i = 0; i < attempt && ms < cap; i++) ms *= 2;
    if (retry_after_s && retry_after_s < UINT32_MAX && retry_after_s * 1000 > ms)
        ms = retry_after_s * 1000;
    if (retry_after_s >= UINT32_MAX) ms = cap;
    return (uint32_t)(ms < cap ? ms : cap);
}

/* GET url (bytes [off, off + len) when len > 0) into h, limit bytes at
 * most. 0 with h->data / h->len and *code (200 or 206), or an error naming
 * the URL. Transient failures are retried with backoff. */
static int http_get(rd *r, const char *url, uint64_t off, uint64_t len, size_t limit, hbody *h,
                    long *code)
{
    const nst_shard_opts *o = r->o;
    char range[48], err[CURL_ERROR_SIZE] = "";
    if (len)
        snprintf(range, sizeof range, "%llu-%llu", (unsigned long long)off,
                 (unsigned long long)(off + len - 1));
    for (uint32_t attempt = 0;; attempt++) {
        CURL *c = r->c;
        h->len = 0;
        h->over = h->has_range = 0;
        h->retry_after = 0;
        h->limit = limit;
        int urc = nst_s3_curl_url(c, url); /* s3://: the signed request */
        if (urc < 0) return urc;
        curl_easy_setopt(c, CURLOPT_RANGE, len ? range : NULL);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, h_body);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, (void *)h);
        curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, h_header);
        curl_easy_setopt(c, CURLOPT_HEADERDATA, (void *)h);
        curl_easy_setopt(c, CURLOPT_ERRORBUFFER, err);
        err[0] = '\0';
        CURLcode cc = curl_easy_perform(c);
        r->st.http_requests++;
        *code = 0;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, code);
        int transient = 0;
        if (cc == CURLE_OK && (*code == 200 || *code == 206)) {
            r->st.bytes_read += h->len;
            return 0;
        }
        if (cc == CURLE_WRITE_ERROR && h->over)
            return nst_error(
                NOSTALL_E_IO, "index: %s: %s", NST_MSG_PATH(url),
                len ? "the server does not support range requests (indexing a shard needs them)"
                    : "the index file is over 1 GiB");
        if (cc == CURLE_OK && nst_s3_is_url(url) && (*code == 404 || *code == 403))
            return nst_s3_fail(*code == 404 ? NOSTALL_E_NOT_FOUND : NOSTALL_E_PERMISSION, "index",
                               url, *code, h->data, h->len);
        if (cc == CURLE_OK) {
            if (*code == 404 || *code == 410)
                return nst_error(NOSTALL_E_NOT_FOUND, "index: %s: HTTP %ld", NST_MSG_PATH(url),
                                 *code);
            if (*code == 401 || *code == 403)
                return nst_error(NOSTALL_E_PERMISSION, "index: %s: HTTP %ld", NST_MSG_PATH(url),
                                 *code);
            if (*code == 416)
                return nst_error(NOSTALL_E_TRUNCATED, "index: %s: HTTP 416 (bytes %llu-%llu asked)",
                                 NST_MSG_PATH(url), (unsigned long long)off,
                                 (unsigned long long)(off + len - 1));
            transient = *code >= 500 || *code == 429;
        } else {
            transient = curl_transient(cc);
        }
        if (!transient || attempt >= o->retries) {
            if (cc == CURLE_OK)
                return nst_error(NOSTALL_E_IO, "index: %s: HTTP %ld after %u attempt%s",
                                 NST_MSG_PATH(url), *code, attempt + 1, attempt ? "s" : "");
            return nst_error(NOSTALL_E_IO, "index: %s: %s after %u attempt%s", NST_MSG_PATH(url),
                             err[0] ? err : curl_easy_strerror(cc), attempt + 1, attempt ? "s" : "");
        }
        sleep_ms(retry_wait_ms(o, attempt, cc == CURLE_OK ? h->retry_after : 0));
    }
}

int nst_shard_curl_new(void **out, uint32_t timeout_ms, int verify_tls, int streaming)
{
    *out = NULL;
    /* curl_global_init runs once, in http.c (nst_http_create's once) */
    nst_http *h = NULL;
    nst_http_opts ho = {.max_inflight = 1};
    int rc = nst_http_create(&h, &ho);
    nst_http_free(h);
    if (rc < 0) return rc;
    CURL *c = curl_easy_init();
    if (!c) return nst_error(NOSTALL_E_IO, "shards: cannot create a libcurl handle");
    const long t = timeout_ms ? (long)timeout_ms : 30000L;
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    if (streaming) { /* a whole shard may take long: fail only when it stalls */
        curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
        curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, (t + 999) / 1000);
    } else {
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, t);
    }
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, t);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, (long)MAX_REDIRS);
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#else
    curl_easy_setopt(c, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    curl_easy_setopt(c, CURLOPT_USERAGENT, USER_AGENT);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, verify_tls ? 1L : 0L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, verify_tls ? 2L : 0L);
    curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
    *out = c;
    return 0;
}

static int curl_setup(rd *r)
{
    if (r->c) return 0;
    void *c;
    int rc = nst_shard_curl_new(&c, r->o->timeout_ms, r->o->verify_tls, 0);
    r->c = c;
    return rc;
}

/* The window holds bytes at `off` (up to the shard's end): *p, *n >= 1. */
static int rd_window(rd *r, uint64_t off, const uint8_t **p, size_t *n)
{
    if (off >= r->boff && off < r->boff + r->len) {
        *p = r->buf + (off - r->boff);
        *n = (size_t)(r->boff + r->len - off);
        return 0;
    }
    const size_t chunk = r->c ? HTTP_CHUNK : LOCAL_CHUNK;
    size_t want = r->size - off < chunk ? (size_t)(r->size - off) : chunk;
    if (r->c) {
        hbody h = {.data = r->buf, .cap = r->cap};
        long code;
        int rc = http_get(r, r->name, off, want, want, &h, &code);
        r->buf = h.data, r->cap = h.cap;
        if (rc < 0) return rc;
        if (code == 206 && (!h.has_range || h.a != off || h.len != h.b - h.a + 1))
            return nst_error(NOSTALL_E_IO, "index: %s: a range answer not for bytes %llu-%llu",
                             NST_MSG_PATH(r->name), (unsigned long long)off,
                             (unsigned long long)(off + want - 1));
        if (code == 200 && off != 0)
            return nst_error(NOSTALL_E_IO, "index: %s: the server does not support range requests",
                             NST_MSG_PATH(r->name));
        if (h.len < want)
            return nst_error(NOSTALL_E_TRUNCATED, "index: %s: bytes %llu-%llu asked, got %zu",
                             NST_MSG_PATH(r->name), (unsigned long long)off,
                             (unsigned long long)(off + want - 1), h.len);
        r->len = want;
    } else {
        if (r->cap < want) {
            uint8_t *b = realloc(r->buf, chunk);
            if (!b) return nst_error(NOSTALL_E_NOMEM, "index: out of memory");
            r->buf = b, r->cap = chunk;
        }
        size_t got = 0;
        while (got < want) {
            ssize_t k = pread(r->fd, r->buf + got, want - got, (off_t)(off + got));
            if (k < 0 && errno == EINTR) continue;
            if (k < 0)
                return nst_error(NOSTALL_E_IO, "index: %s: read error at byte %llu: %s",
                                 NST_MSG_PATH(r->name), (unsigned long long)(off + got),
                                 strerror(errno));
            if (k == 0)
                return nst_error(NOSTALL_E_TRUNCATED,
                                 "index: %s: the file shrank to %llu bytes while indexed",
                                 NST_MSG_PATH(r->name), (unsigned long long)(off + got));
            got += (size_t)k;
        }
        r->st.bytes_read += want;
        r->len = want;
    }
    r->boff = off;
    *p = r->buf;
    *n = r->len;
    return 0;
}

/* ---- the header pass ------------------------------------------------------ */

/* The sample being gathered. A sample found bad (a duplicate member, too
 * many members) keeps gathering its key's members, unrecorded, and is
 * written as one damaged region naming the member that made it bad. */
typedef struct gather {
    nst_tar_index_rec rec;
    char key[NST_TAR_INDEX_MAX_KEY];
    char ext[NST_TAR_INDEX_MAX_MEMBERS][NST_TAR_INDEX_MAX_EXT + 1];
    int cls; /* member index whose text is being collected, or -1 */
    uint8_t text[64];
    size_t text_len;
    int bad;          /* NST_TAR_DMG_DUPLICATE / _MEMBERS, or 0 */
    uint64_t bad_end; /* the end of the bad sample's last member */
    size_t bad_len;
    char bad_name[NST_TAR_INDEX_MAX_KEY + NST_TAR_INDEX_MAX_EXT + 2];
} gather;

static int flush(nst_tar_index_writer *w, gather *g)
{
    int rc = 0;
    if (g->rec.nmembers && g->bad) {
        nst_tar_index_rec d = {.key = NULL,
                               .offset = g->rec.m[0].offset,
                               .size = g->bad_end - g->rec.m[0].offset,
                               .code = g->bad,
                               .dname = g->bad_name,
                               .dname_len = (uint32_t)g->bad_len};
        rc = nst_tar_index_add(w, &d);
    } else if (g->rec.nmembers) {
        rc = nst_tar_index_add(w, &g->rec);
    }
    g->rec.nmembers = 0;
    g->cls = -1;
    g->bad = 0;
    return rc;
}

static int same_ext(const char *a, size_t an, const char *b, size_t bn)
{
    if (an != bn) return 0;
    for (size_t i = 0; i < an; i++) {
        char x = a[i], y = b[i];
        if (x >= 'A' && x <= 'Z') x = (char)(x - 'A' + 'a');
        if (y >= 'A' && y <= 'Z') y = (char)(y - 'A' + 'a');
        if (x != y) return 0;
    }
    return 1;
}

static int on_member(rd *r, nst_tar_scan *s, nst_tar_index_writer *w, gather *g,
                     const nst_tar_ev *ev)
{
    size_t klen, elen;
    const char *ext;
    const size_t nlen = strlen(ev->name);
    if (ev->size > r->size - ev->offset || ev->offset > r->size) { /* cut off: finish reports it */
        nst_tar_skip(s);
        return 0;
    }
    if (!nst_tar_split_name(ev->name, nlen, &klen, &ext, &elen)) {
        nst_tar_skip(s); /* in no sample (webdataset skips it too) */
        return 0;
    }
    if (klen > NST_TAR_INDEX_MAX_KEY || elen > NST_TAR_INDEX_MAX_EXT) { /* a counted skip, named */
        nst_tar_skip(s);
        if (flush(w, g) < 0) return -1;
        nst_tar_index_rec d = {.key = NULL,
                               .offset = ev->offset,
                               .size = ev->size,
                               .code = NST_TAR_DMG_LONGNAME,
                               .dname = ev->name,
                               .dname_len = (uint32_t)(nlen < NST_TAR_INDEX_MAX_DNAME
                                                           ? nlen
                                                           : NST_TAR_INDEX_MAX_DNAME)};
        return nst_tar_index_add(w, &d);
    }
    if (g->rec.nmembers && (g->rec.key_len != klen || memcmp(g->key, ev->name, klen) != 0))
        if (flush(w, g) < 0) return -1;
    if (!g->rec.nmembers) {
        memcpy(g->key, ev->name, klen);
        g->rec.key = g->key;
        g->rec.key_len = (uint32_t)klen;
    } else if (!g->bad) { /* the same key: a duplicate extension, or one too many */
        for (uint32_t i = 0; i < g->rec.nmembers && !g->bad; i++)
            if (same_ext(g->rec.m[i].ext, g->rec.m[i].ext_len, ext, elen))
                g->bad = NST_TAR_DMG_DUPLICATE;
        if (!g->bad && g->rec.nmembers == NST_TAR_INDEX_MAX_MEMBERS) g->bad = NST_TAR_DMG_MEMBERS;
        if (g->bad) {
            g->bad_len = nlen < sizeof g->bad_name ? nlen : sizeof g->bad_name - 1;
            memcpy(g->bad_name, ev->name, g->bad_len);
        }
    }
    if (g->bad) { /* the rest of a bad sample: only its extent */
        g->bad_end = ev->offset + ev->size;
        nst_tar_skip(s);
        return 0;
    }
    const uint32_t k = g->rec.nmembers++;
    memcpy(g->ext[k], ext, elen);
    g->rec.m[k] = (nst_tar_index_member){.ext = g->ext[k],
                                         .ext_len = (uint32_t)elen,
                                         .offset = ev->offset,
                                         .size = ev->size};
    if (nst_tar_ext_class(ext, elen) == NST_EXT_CLS && ev->size <= sizeof g->text) {
        g->cls = (int)k; /* its text follows as DATA */
        g->text_len = 0;
        if (ev->size == 0) g->cls = -1;
    } else {
        nst_tar_skip(s);
    }
    return 0;
}

static int on_damage(rd *r, nst_tar_index_writer *w, gather *g, const nst_tar_ev *ev)
{
    if (g->cls >= 0 && g->rec.nmembers && g->rec.m[g->rec.nmembers - 1].offset == ev->offset)
        g->rec.nmembers--; /* the .cls being read was cut off */
    if (flush(w, g) < 0) return -1;
    uint64_t off = ev->offset < r->size ? ev->offset : r->size;
    uint64_t len = ev->size < r->size - off ? ev->size : r->size - off;
    const size_t nlen = ev->name ? strnlen(ev->name, NST_TAR_INDEX_MAX_DNAME) : 0;
    nst_tar_index_rec d = {.key = NULL,
                           .offset = off,
                           .size = len,
                           .code = ev->code,
                           .dname = ev->name,
                           .dname_len = (uint32_t)nlen};
    return nst_tar_index_add(w, &d);
}

/* Scan the shard's headers into w. */
static int header_pass(rd *r, nst_tar_index_writer *w)
{
    nst_tar_scan *s = malloc(sizeof *s);
    gather *g = malloc(sizeof *g);
    int rc = 0, ended = 0;
    if (!s || !g) {
        rc = nst_error(NOSTALL_E_NOMEM, "index: out of memory");
        goto out;
    }
    nst_tar_scan_init(s);
    g->rec.nmembers = 0;
    g->cls = -1;
    g->bad = 0;
    nst_tar_ev ev;
    if (r->size > 0) { /* compressed data under a .tar name: not a damaged tar */
        const uint8_t *p = NULL;
        size_t n = 0;
        if ((rc = rd_window(r, 0, &p, &n)) < 0) goto out;
        const char *z = nst_shard_compression(p, n);
        if (z) {
            rc = nst_error(NOSTALL_E_UNSUPPORTED,
                           "index: %s: %s-compressed data, not a tar: nostall does not read "
                           "compressed shards (decompress it first)",
                           NST_MSG_PATH(r->name), z);
            goto out;
        }
    }
    while (!ended && s->pos < r->size) {
        const uint8_t *p = NULL;
        size_t n = 0;
        if ((rc = rd_window(r, s->pos, &p, &n)) < 0) goto out;
        uint64_t fed = s->pos;
        while (n && !ended) {
            size_t used;
            int e = nst_tar_feed(s, p, n, &used, &ev);
            p += used, n -= used, fed += used;
            if (!e) continue;
            if (ev.kind == NST_TAR_EV_MEMBER) {
                if (on_member(r, s, w, g, &ev) < 0) goto nomem;
                if (s->pos != fed) break; /* its data skipped: read on at s->pos */
            } else if (ev.kind == NST_TAR_EV_DATA && g->cls >= 0) {
                size_t take =
                    ev.len < sizeof g->text - g->text_len ? ev.len : sizeof g->text - g->text_len;
                memcpy(g->text + g->text_len, ev.data, take);
                g->text_len += take;
                nst_tar_index_member *m = &g->rec.m[g->cls];
                if (g->text_len == m->size) {
                    m->has_label = nst_tar_parse_label(g->text, g->text_len, &m->label);
                    g->cls = -1;
                }
            } else if (ev.kind == NST_TAR_EV_DAMAGE) {
                if (on_damage(r, w, g, &ev) < 0) goto nomem;
            } else if (ev.kind == NST_TAR_EV_END) {
                ended = 1;
            }
        }
    }
    if (!ended && nst_tar_finish(s, r->size, &ev) && on_damage(r, w, g, &ev) < 0) goto nomem;
    if (flush(w, g) < 0) goto nomem;
    goto out;
nomem:
    rc = nst_error(NOSTALL_E_NOMEM, "index: %s: out of memory", NST_MSG_PATH(r->name));
out:
    free(s);
    free(g);
    return rc;
}

/* ---- files --------------------------------------------------------------- */

/* A whole small file (at most max bytes) into *out; 1 read, 0 absent or
 * unreadable or too large. */
static int slurp(const char *path, size_t max, uint8_t **out, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) return 0;
    struct stat st;
    uint8_t *b = NULL;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > max ||
        !(b = malloc((size_t)st.st_size + 1))) {
        close(fd);
        return 0;
    }
    size_t got = 0, want = (size_t)st.st_size;
    while (got < want) {
        ssize_t k = pread(fd, b + got, want - got, (off_t)got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += (size_t)k;
    }
    close(fd);
    if (got != want) {
        free(b);
        return 0;
    }
    *out = b;
    *len = want;
    return 1;
}

/* Write a file whole (a temporary name, then renamed into place). */
static int write_atomic(const char *path, const uint8_t *d, size_t len)
{
    char tmp[PATH_MAX + 32];
    if (snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid()) >= (int)sizeof tmp) return -1;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    size_t put = 0;
    while (put < len) {
        ssize_t k = write(fd, d + put, len - put);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        put += (size_t)k;
    }
    if (close(fd) != 0 || put != len || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* The cache folder ($XDG_CACHE_HOME or ~/.cache, + /nostall/shards),
 * created; 0 when there is none. */
static int cache_dir(char *buf, size_t n)
{
    const char *x = getenv("XDG_CACHE_HOME");
    int k;
    if (x && x[0] == '/')
        k = snprintf(buf, n, "%s/nostall/shards", x);
    else if ((x = getenv("HOME")) && x[0] == '/')
        k = snprintf(buf, n, "%s/.cache/nostall/shards", x);
    else
        return 0;
    if (k < 0 || (size_t)k >= n) return 0;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0700) != 0 && errno != EEXIST) return 0;
        *p = '/';
    }
    if (mkdir(buf, 0700) != 0 && errno != EEXIST) return 0;
    return 1;
}

/* The cache file of a shard, named by a hash of what identifies it. */
static int cache_file(char *buf, size_t n, const char *id, size_t idlen)
{
    char dir[PATH_MAX];
    if (!cache_dir(dir, sizeof dir)) return 0;
    uint64_t h = 0;
    nostall_checksum_update(&h, id, idlen);
    return snprintf(buf, n, "%s/%016llx%s", dir, (unsigned long long)h, NST_TAR_INDEX_SUFFIX) <
           (int)n;
}

/* 1 if an index file's identity is that of the shard as read: the size
 * and the fingerprint always; a local shard's mtime when the file records
 * one (a header pass's does; pack's sidecars do not, so that their bytes
 * do not depend on when they were written and a copy stays valid); a
 * URL's validator when both the file and the server have one. */
static int same_shard(const nst_tar_index_reader *tr, const rd *r)
{
    if (tr->tar_bytes != r->size || tr->ident.fingerprint != r->id.fingerprint) return 0;
    if (!nst_shard_is_url(r->name)) return !tr->ident.mtime || tr->ident.mtime == r->id.mtime;
    return !tr->ident.validator || !r->id.validator || tr->ident.validator == r->id.validator;
}

/* An index file read from `path`, if it describes the shard as read. */
static int usable(const char *path, const rd *r, uint8_t **out, size_t *len)
{
    uint8_t *b;
    size_t n;
    nst_tar_index_reader tr;
    if (!slurp(path, SIDECAR_MAX, &b, &n)) return 0;
    if (nst_tar_index_open(&tr, b, n, NULL, 0) < 0 || !same_shard(&tr, r)) {
        free(b);
        return 0;
    }
    *out = b;
    *len = n;
    return 1;
}

/* n bytes at `off` of an open local file. */
static int pread_all(int fd, uint8_t *b, size_t n, uint64_t off)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = pread(fd, b + got, n - got, (off_t)(off + got));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        got += (size_t)k;
    }
    return 0;
}

/* A local shard's identity: the fingerprint of its ends, its mtime. */
static int ident_fd(int fd, uint64_t size, const struct stat *st, nst_tar_index_ident *id,
                    const char *name)
{
    const size_t fp = size < NST_TAR_INDEX_FP_BYTES ? (size_t)size : NST_TAR_INDEX_FP_BYTES;
    uint8_t *b = malloc(2 * (size_t)NST_TAR_INDEX_FP_BYTES);
    if (!b) return nst_error(NOSTALL_E_NOMEM, "index: out of memory");
    errno = 0;
    if (pread_all(fd, b, fp, 0) < 0 || pread_all(fd, b + fp, fp, size - fp) < 0) {
        free(b);
        return nst_error(NOSTALL_E_IO, "index: %s: cannot read its first and last %zu bytes: %s",
                         NST_MSG_PATH(name), fp, errno ? strerror(errno) : "the file shrank");
    }
    id->fingerprint = nst_tar_index_fingerprint(size, b, fp, b + fp, fp);
    id->mtime = (uint64_t)st->st_mtim.tv_sec * 1000000000u + (uint64_t)st->st_mtim.tv_nsec;
    id->validator = 0;
    free(b);
    return 0;
}

int nst_shard_ident_file(const char *path, nst_tar_index_ident *id)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        const int e = errno;
        if (fd >= 0) close(fd);
        return nst_error(e == ENOENT ? NOSTALL_E_NOT_FOUND : NOSTALL_E_IO,
                         "index: %s: cannot read: %s", NST_MSG_PATH(path),
                         fd >= 0 ? "not a regular file" : strerror(e));
    }
    const int rc = ident_fd(fd, (uint64_t)st.st_size, &st, id, path);
    close(fd);
    return rc;
}

/* ---- one shard ------------------------------------------------------------ */

typedef struct job {
    uint8_t *file;
    size_t len;
    int status;
    char *msg;
    int done;
} job;

static int pass_and_cache(rd *r, const char *sidecar, const char *cache, job *j)
{
    nst_tar_index_writer w;
    nst_tar_index_writer_init(&w, 1);
    w.ident = r->id;
    int rc = header_pass(r, &w);
    if (rc == 0 && nst_tar_index_finish(&w, r->size, &j->len) < 0)
        rc = nst_error(NOSTALL_E_NOMEM, "index: %s: out of memory", NST_MSG_PATH(r->name));
    if (rc < 0) {
        nst_tar_index_writer_free(&w);
        return rc;
    }
    j->file = w.buf; /* the writer's buffer, handed over */
    r->st.passes++;
    if (!r->o->no_cache && ((sidecar && write_atomic(sidecar, j->file, j->len) == 0) ||
                            (cache && write_atomic(cache, j->file, j->len) == 0)))
        r->st.cache_written++;
    return 0;
}

static int index_local(rd *r, job *j)
{
    struct stat st;
    char side[PATH_MAX + 16], cache[PATH_MAX];
    if (stat(r->name, &st) != 0) {
        int e = errno;
        return nst_error(e == EACCES                   ? NOSTALL_E_PERMISSION
                         : e == ENOENT || e == ENOTDIR ? NOSTALL_E_NOT_FOUND
                                                       : NOSTALL_E_IO,
                         "index: %s: %s", NST_MSG_PATH(r->name), strerror(e));
    }
    if (!S_ISREG(st.st_mode))
        return nst_error(NOSTALL_E_IO, "index: %s: a shard must be a regular file",
                         NST_MSG_PATH(r->name));
    r->size = (uint64_t)st.st_size;
    r->fd = open(r->name, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (r->fd < 0) {
        int e = errno;
        return nst_error(e == EACCES ? NOSTALL_E_PERMISSION : NOSTALL_E_IO, "index: %s: %s",
                         NST_MSG_PATH(r->name), strerror(e));
    }
    int rc = ident_fd(r->fd, r->size, &st, &r->id, r->name);
    const int has_side = nst_shard_sidecar_name(r->name, side, sizeof side) == 0;
    if (rc == 0 && has_side && usable(side, r, &j->file, &j->len)) {
        r->st.sidecar++;
        goto done;
    }
    char id[PATH_MAX + 96], real[PATH_MAX];
    const char *rp = realpath(r->name, real) ? real : r->name;
    int idlen =
        snprintf(id, sizeof id, "%s%c%llu %lld.%09ld %llu", rp, 0, (unsigned long long)st.st_size,
                 (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec, (unsigned long long)st.st_ino);
    const int has_cache =
        idlen > 0 && idlen < (int)sizeof id && cache_file(cache, sizeof cache, id, (size_t)idlen);
    if (rc == 0 && has_cache && usable(cache, r, &j->file, &j->len)) {
        r->st.cached++;
        goto done;
    }
    if (rc == 0) rc = pass_and_cache(r, has_side ? side : NULL, has_cache ? cache : NULL, j);
done:
    close(r->fd);
    r->fd = -1;
    return rc;
}

static int index_url(rd *r, job *j)
{
    char side[8192], cache[PATH_MAX];
    int rc = curl_setup(r);
    if (rc < 0) return rc;
    /* the first window tells the shard's size, validator and head */
    hbody h = {.data = r->buf, .cap = r->cap};
    long code;
    rc = http_get(r, r->name, 0, NST_TAR_INDEX_FP_BYTES, NST_TAR_INDEX_FP_BYTES, &h, &code);
    r->buf = h.data, r->cap = h.cap;
    if (rc == NOSTALL_E_TRUNCATED) { /* 416: an empty file */
        nst_error_clear();
        r->size = 0, r->len = 0;
    } else if (rc < 0) {
        return rc;
    } else if (code == 206) {
        if (!h.has_range || h.a != 0 || h.total == 0 || h.len != h.b + 1)
            return nst_error(NOSTALL_E_IO, "index: %s: a range answer without the shard's size",
                             NST_MSG_PATH(r->name));
        r->size = h.total;
        r->len = h.len;
    } else { /* 200: the whole shard fits the first window */
        r->size = h.len;
        r->len = h.len;
    }
    r->boff = 0;
    r->id.validator = h.etag ? h.etag : h.lastmod;
    /* the identity: the fingerprint of both ends (one more request when
       the shard is larger than the window) */
    if (r->size > r->len) {
        const uint64_t fp = NST_TAR_INDEX_FP_BYTES, off = r->size - fp;
        hbody t = {0};
        rc = http_get(r, r->name, off, fp, fp, &t, &code);
        if (rc == 0 && (code != 206 || !t.has_range || t.a != off || t.len != fp))
            rc = nst_error(NOSTALL_E_IO, "index: %s: a range answer not for bytes %llu-%llu",
                           NST_MSG_PATH(r->name), (unsigned long long)off,
                           (unsigned long long)(r->size - 1));
        if (rc == 0) r->id.fingerprint = nst_tar_index_fingerprint(r->size, r->buf, fp, t.data, fp);
        free(t.data);
        if (rc < 0) return rc;
    } else {
        r->id.fingerprint = nst_tar_index_fingerprint(r->size, r->buf, r->len, r->buf, r->len);
    }
    r->id.mtime = 0;
    if (nst_shard_sidecar_name(r->name, side, sizeof side) == 0) {
        hbody sh = {0};
        nst_tar_index_reader tr;
        rc = http_get(r, side, 0, 0, SIDECAR_MAX, &sh, &code);
        if (rc == 0 && code == 200 && nst_tar_index_open(&tr, sh.data, sh.len, NULL, 0) == 0 &&
            same_shard(&tr, r)) {
            j->file = sh.data;
            j->len = sh.len;
            r->st.sidecar++;
            return 0;
        }
        free(sh.data);
        nst_error_clear();
    }
    const int has_cache = cache_file(cache, sizeof cache, r->name, strlen(r->name));
    if (has_cache && usable(cache, r, &j->file, &j->len)) {
        r->st.cached++;
        return 0;
    }
    return pass_and_cache(r, NULL, has_cache ? cache : NULL, j);
}

static void run_job(rd *r, job *j)
{
    r->boff = r->len = 0;
    r->fd = -1;
    r->size = 0;
    memset(&r->id, 0, sizeof r->id);
    nst_error_clear();
    j->status = nst_shard_is_url(r->name) ? index_url(r, j) : index_local(r, j);
    if (j->status < 0) {
        free(j->file);
        j->file = NULL;
        j->msg = strdup(nostall_last_error());
    }
}

/* ---- the pool --------------------------------------------------------------- */

typedef struct pool {
    pthread_mutex_t mu;
    pthread_cond_t done_cv, room_cv;
    const char *const *shards;
    size_t n, next, consumed, window;
    int stop;
    job *jobs;
    const nst_shard_opts *o;
    nst_shard_stats st;
} pool;

static void stats_add(nst_shard_stats *a, const nst_shard_stats *b)
{
    a->sidecar += b->sidecar, a->cached += b->cached, a->passes += b->passes;
    a->cache_written += b->cache_written;
    a->http_requests += b->http_requests, a->bytes_read += b->bytes_read;
}

static void *pool_main(void *arg)
{
    pool *p = arg;
    rd r = {.o = p->o, .fd = -1};
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->next < p->n && p->next >= p->consumed + p->window)
            pthread_cond_wait(&p->room_cv, &p->mu);
        if (p->stop || p->next >= p->n) break;
        size_t k = p->next++;
        pthread_mutex_unlock(&p->mu);
        r.name = p->shards[k];
        memset(&r.st, 0, sizeof r.st);
        job j = {0};
        run_job(&r, &j);
        pthread_mutex_lock(&p->mu);
        p->jobs[k] = j;
        p->jobs[k].done = 1;
        stats_add(&p->st, &r.st);
        pthread_cond_broadcast(&p->done_cv);
    }
    pthread_mutex_unlock(&p->mu);
    if (r.c) curl_easy_cleanup(r.c);
    free(r.buf);
    return NULL;
}

static uint32_t auto_threads(const char *const *shards, size_t n)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus < 1) cpus = 1;
    const int url = n && nst_shard_is_url(shards[0]);
    size_t t = url ? (size_t)cpus * 4 : (size_t)cpus;
    if (t > MAX_THREADS) t = MAX_THREADS;
    return (uint32_t)(t < n ? t : n);
}

int nst_shards_index(const char *const *shards, size_t n, const nst_shard_opts *o, nst_shard_cb cb,
                     nst_shard_bad_cb bad, void *ctx, nst_shard_stats *stats)
{
    nst_shard_opts def;
    if (!o) nst_shard_opts_default(&def), o = &def;
    pool p = {.shards = shards, .n = n, .o = o};
    uint32_t threads = o->threads ? o->threads : auto_threads(shards, n);
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if (threads > n) threads = (uint32_t)n;
    if (threads < 1) threads = 1;
    p.window = (size_t)threads * 4;
    int rc = 0;
    if (!(p.jobs = calloc(n ? n : 1, sizeof *p.jobs)))
        return nst_error(NOSTALL_E_NOMEM, "index: out of memory");
    pthread_t tid[MAX_THREADS];
    uint32_t started = 0;
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.done_cv, NULL);
    pthread_cond_init(&p.room_cv, NULL);
    for (; started < threads; started++)
        if (pthread_create(&tid[started], NULL, pool_main, &p) != 0) break;
    if (!started) {
        rc = nst_error(NOSTALL_E_THREAD, "index: cannot start a thread to index shards");
        goto out;
    }
    for (size_t k = 0; k < n; k++) {
        pthread_mutex_lock(&p.mu);
        while (!p.jobs[k].done) pthread_cond_wait(&p.done_cv, &p.mu);
        pthread_mutex_unlock(&p.mu);
        job *j = &p.jobs[k];
        if (j->status < 0 && bad && j->status != NOSTALL_E_NOMEM) {
            rc = bad(ctx, k, j->status, j->msg ? j->msg : "index: a shard could not be indexed");
        } else if (j->status < 0) {
            rc = nst_error_set(j->status, j->msg ? j->msg : "index: a shard could not be indexed");
        } else {
            rc = cb(ctx, k, j->file, j->len);
        }
        free(j->file);
        free(j->msg);
        j->file = NULL, j->msg = NULL;
        pthread_mutex_lock(&p.mu);
        p.consumed = k + 1;
        if (rc < 0) p.stop = 1;
        pthread_cond_broadcast(&p.room_cv);
        pthread_mutex_unlock(&p.mu);
        if (rc < 0) break;
    }
out:
    pthread_mutex_lock(&p.mu);
    p.stop = 1;
    pthread_cond_broadcast(&p.room_cv);
    pthread_mutex_unlock(&p.mu);
    for (uint32_t t = 0; t < started; t++) pthread_join(tid[t], NULL);
    for (size_t k = 0; k < n; k++) {
        free(p.jobs[k].file);
        free(p.jobs[k].msg);
    }
    free(p.jobs);
    pthread_mutex_destroy(&p.mu);
    pthread_cond_destroy(&p.done_cv);
    pthread_cond_destroy(&p.room_cv);
    if (stats) *stats = p.st;
    return rc;
}

int nst_shard_scan_file(const char *path, uint8_t **out, size_t *len)
{
    nst_shard_opts o;
    nst_shard_opts_default(&o);
    o.no_cache = 1;
    rd r = {.name = path, .o = &o, .fd = -1};
    struct stat st;
    *out = NULL;
    *len = 0;
    r.fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (r.fd < 0 || fstat(r.fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int e = errno;
        if (r.fd >= 0) close(r.fd);
        return nst_error(e == ENOENT ? NOSTALL_E_NOT_FOUND : NOSTALL_E_IO,
                         "index: %s: cannot read: %s", NST_MSG_PATH(path),
                         r.fd >= 0 ? "not a regular file" : strerror(e));
    }
    r.size = (uint64_t)st.st_size;
    job j = {0};
    int rc = ident_fd(r.fd, r.size, &st, &r.id, path);
    if (rc == 0) rc = pass_and_cache(&r, NULL, NULL, &j);
    close(r.fd);
    free(r.buf);
    if (rc < 0) return rc;
    *out = j.file;
    *len = j.len;
    return 0;
}
