/*
 * s3_list.c — synchronous S3 requests made at create time: listing a
 * prefix with ListObjectsV2 and the probe, a 1-byte GET of one object
 * (see s3_list.h).
 * Room: dataset/ (what the items are).
 *
 * Design. One easy handle per call (connections are reused across the
 * pages of a listing), signed by nst_s3_setup_easy. Each request is
 * retried on transient failures (connection errors, timeouts, 5xx with
 * S3's SlowDown, 429, 400 RequestTimeout) with exponential backoff, waiting
 * in 20 ms slices so a stop flag ends it promptly. A listing's pages are
 * collected (keys in one arena), checked for order and sorted if the
 * server did not sort them, then handed to the callback: every caller
 * sees the same order whatever the server. Runs on the calling thread;
 * touches nothing shared.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "common/buf.h"
#include "common/error.h"
#include "dataset/s3_list.h"
#include "source/s3.h"

enum {
    LIST_BODY_MAX = 32 << 20,
    ERR_BODY_MAX = 8192,
    BACKOFF_MS = 50,
    BACKOFF_CAP_MS = 2000,
    DEFAULT_TIMEOUT_MS = 30000
};

typedef struct resp {
    char *data;
    size_t len, cap, limit;
    int over;
    long code;
    char region[NST_S3_REGION_MAX + 1];
    const atomic_int *stop;
} resp;

static size_t on_body(char *p, size_t size, size_t nmemb, void *ud)
{
    resp *r = ud;
    size_t n = size * nmemb;
    size_t lim = r->code == 200 ? r->limit : ERR_BODY_MAX;
    if (r->len + n > lim) {
        if (r->code != 200) { /* an error page: keep its start */
            n = r->len < lim ? lim - r->len : 0;
            if (!n) return size * nmemb;
        } else {
            r->over = 1;
            return 0;
        }
    }
    if (r->len + n + 1 > r->cap) {
        size_t want = r->cap ? r->cap * 2 : 65536;
        while (want < r->len + n + 1) want *= 2;
        char *d = realloc(r->data, want);
        if (!d) {
            r->over = 2;
            return 0;
        }
        r->data = d;
        r->cap = want;
    }
    memcpy(r->data + r->len, p, n);
    r->len += n;
    r->data[r->len] = '\0';
    return size * nmemb;
}

static int starts_ci(const char *b, size_t n, const char *lit)
{
    size_t l = strlen(lit);
    return n >= l && strncasecmp(b, lit, l) == 0;
}

static size_t on_header(char *b, size_t size, size_t nitems, void *ud)
{
    resp *r = ud;
    size_t n = size * nitems;
    if (starts_ci(b, n, "HTTP/")) {
        size_t i = 5;
        long code = 0;
        while (i < n && b[i] != ' ') i++;
        while (i < n && b[i] == ' ') i++;
        for (int d = 0; d < 3 && i < n && b[i] >= '0' && b[i] <= '9'; d++, i++)
            code = code * 10 + (b[i] - '0');
        r->code = code;
        r->region[0] = '\0';
        r->len = 0;
    } else if (starts_ci(b, n, "x-amz-bucket-region:")) {
        size_t o = 0;
        for (size_t i = 20; i < n && o < NST_S3_REGION_MAX; i++)
            if ((b[i] >= 'a' && b[i] <= 'z') || (b[i] >= '0' && b[i] <= '9') || b[i] == '-')
                r->region[o++] = b[i];
        r->region[o] = '\0';
    }
    return n;
}

static int on_progress(void *ud, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    (void)a, (void)b, (void)c, (void)d;
    resp *r = ud;
    return r->stop && atomic_load_explicit(r->stop, memory_order_relaxed) ? 1 : 0;
}

static int stopped(const atomic_int *stop)
{
    return stop && atomic_load_explicit(stop, memory_order_relaxed);
}

/* Sleep ms, in slices, unless stop is set. 0 if stopped. */
static int backoff_sleep(uint32_t ms, const atomic_int *stop)
{
    while (ms) {
        if (stopped(stop)) return 0;
        uint32_t t = ms < 20 ? ms : 20;
        struct timespec ts = {0, (long)t * 1000000L};
        nanosleep(&ts, NULL);
        ms -= t;
    }
    return !stopped(stop);
}

static int curl_transient(CURLcode rc)
{
    switch (rc) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM: return 1;
    default: return 0;
    }
}

typedef struct req_ctx {
    const nst_s3 *s3;
    CURL *e;
    const nst_s3_list_opts *o;
    uint32_t timeout_ms;
    nst_s3_list_stats *st;
    const char *what;         /* "listing s3://b/p/" or "s3://b/k": message prefix */
    const char *bucket, *key; /* for reasons */
    const char *range;        /* "0-0" (the probe) or NULL */
} req_ctx;

/* One GET with retries; r filled. 0 on a 200,
 * else a status with the message set. */
static int request(req_ctx *c, const char *url, resp *r)
{
    char errbuf[CURL_ERROR_SIZE];
    uint32_t attempts = 0;
    for (;;) {
        attempts++;
        r->len = 0;
        r->code = 0;
        r->over = 0;
        r->region[0] = '\0';
        errbuf[0] = '\0';
        curl_easy_setopt(c->e, CURLOPT_URL, url);
        curl_easy_setopt(c->e, CURLOPT_RANGE, c->range);
        curl_easy_setopt(c->e, CURLOPT_ERRORBUFFER, errbuf);
        CURLcode cc = curl_easy_perform(c->e);
        if (c->st) c->st->requests++;
        if (stopped(c->o->stop)) return nst_error(NOSTALL_E_STOPPED, "s3: %s: stopped", c->what);
        long code = 0;
        curl_easy_getinfo(c->e, CURLINFO_RESPONSE_CODE, &code);
        if (cc == CURLE_OK && (code == 200 || code == 206)) return 0;
        char reason[700];
        int transient, status = NOSTALL_E_IO;
        if (cc == CURLE_WRITE_ERROR && r->over == 1) {
            snprintf(reason, sizeof reason, "the response is over %d MB", LIST_BODY_MAX >> 20);
            transient = 0;
        } else if (cc == CURLE_WRITE_ERROR && r->over == 2) {
            return nst_error(NOSTALL_E_NOMEM, "s3: %s: out of memory", c->what);
        } else if (cc != CURLE_OK) {
            transient = curl_transient(cc);
            if (cc == CURLE_OPERATION_TIMEDOUT)
                snprintf(reason, sizeof reason, "timed out after %u ms: %s", c->timeout_ms,
                         errbuf[0] ? errbuf : curl_easy_strerror(cc));
            else
                snprintf(reason, sizeof reason, "%s (curl error %d)",
                         errbuf[0] ? errbuf : curl_easy_strerror(cc), (int)cc);
        } else {
            nst_s3_errinfo ei;
            nst_s3_parse_error(c->s3, r->data, r->len, &ei);
            transient = nst_s3_reason(c->s3, code, &ei, r->region, c->bucket, c->key, reason,
                                      sizeof reason);
            if (code == 404 || code == 410)
                status = NOSTALL_E_NOT_FOUND;
            else if (code == 401 || code == 403)
                status = NOSTALL_E_PERMISSION;
        }
        if (transient && attempts <= c->o->retries) {
            uint64_t d = BACKOFF_MS;
            for (uint32_t i = 1; i < attempts && d < BACKOFF_CAP_MS; i++) d *= 2;
            if (d > BACKOFF_CAP_MS) d = BACKOFF_CAP_MS;
            if (c->st) c->st->retries++;
            if (!backoff_sleep((uint32_t)d, c->o->stop))
                return nst_error(NOSTALL_E_STOPPED, "s3: %s: stopped", c->what);
            continue;
        }
        nst_s3_redact(c->s3, reason, sizeof reason);
        if (attempts > 1)
            return nst_error(status, "s3: %s: %s (after %u attempts)", c->what, reason, attempts);
        return nst_error(status, "s3: %s: %s", c->what, reason);
    }
}

static int setup(req_ctx *c, resp *r, nst_s3 **own)
{
    *own = NULL;
    if (!c->s3) {
        int rc = nst_s3_create(own);
        if (rc < 0) return rc;
        c->s3 = *own;
    }
    c->timeout_ms = c->o->timeout_ms ? c->o->timeout_ms : DEFAULT_TIMEOUT_MS;
    c->e = curl_easy_init();
    if (!c->e) return nst_error(NOSTALL_E_NOMEM, "s3: cannot create a libcurl handle");
    CURL *e = c->e;
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)c->timeout_ms);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)c->timeout_ms);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, (void *)r);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, (void *)r);
    curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(e, CURLOPT_XFERINFODATA, (void *)r);
    curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, c->o->verify_tls ? 1L : 0L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, c->o->verify_tls ? 2L : 0L);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "nostall");
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
#else
    curl_easy_setopt(e, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    r->stop = c->o->stop;
    return nst_s3_setup_easy(c->s3, e);
}

/* ---- listing -------------------------------------------------------------- */

typedef struct entry {
    size_t off, len;
    uint64_t size;
} entry;

typedef struct listing {
    char *keys;
    size_t klen, kcap;
    entry *e;
    size_t n, cap;
} listing;

static int entry_cmp(const void *a, const void *b, void *arg)
{
    const char *keys = arg;
    const entry *x = a, *y = b;
    size_t m = x->len < y->len ? x->len : y->len;
    int c = memcmp(keys + x->off, keys + y->off, m);
    if (c) return c;
    return x->len < y->len ? -1 : x->len > y->len;
}

static int hexv(int c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* encoding-type=url: '+' is a space, %XX a byte (botocore's unquote_plus). */
static int url_decode(char *s, size_t *len)
{
    char *o = s;
    for (char *p = s; *p; p++) {
        if (*p == '+') {
            *o++ = ' ';
        } else if (*p == '%') {
            int h = hexv((unsigned char)p[1]), l = h < 0 ? -1 : hexv((unsigned char)p[2]);
            if (h < 0 || l < 0) return -1;
            if (h == 0 && l == 0) return -1; /* a NUL cannot be in a C string */
            *o++ = (char)(h * 16 + l);
            p += 2;
        } else {
            *o++ = *p;
        }
    }
    *o = '\0';
    *len = (size_t)(o - s);
    return 0;
}

static int add_entry(listing *L, const char *key, size_t kl, uint64_t size)
{
    if (L->n == L->cap) {
        size_t nc = L->cap ? L->cap * 2 : 1024;
        entry *ne = realloc(L->e, nc * sizeof *ne);
        if (!ne) return nst_error(NOSTALL_E_NOMEM, "s3: out of memory (listing)");
        L->e = ne;
        L->cap = nc;
    }
    if (L->klen + kl + 1 > L->kcap) {
        size_t nc = L->kcap ? L->kcap * 2 : 65536;
        while (nc < L->klen + kl + 1) nc *= 2;
        char *nk = realloc(L->keys, nc);
        if (!nk) return nst_error(NOSTALL_E_NOMEM, "s3: out of memory (listing)");
        L->keys = nk;
        L->kcap = nc;
    }
    memcpy(L->keys + L->klen, key, kl);
    L->keys[L->klen + kl] = '\0';
    L->e[L->n++] = (entry){L->klen, kl, size};
    L->klen += kl + 1;
    return 0;
}

/* Parse one page: its objects into L; *truncated and token[tcap]. */
static int parse_page(const char *what, const char *body, size_t n, listing *L,
                      nst_s3_list_stats *st, int *truncated, char *token, size_t tcap)
{
    char tmp[64];
    *truncated = 0;
    token[0] = '\0';
    nst_s3_xml_text(body, n, "EncodingType", tmp, sizeof tmp);
    int urlenc = strcmp(tmp, "url") == 0;
    if (!memmem(body, n, "<ListBucketResult", 17))
        return nst_error(NOSTALL_E_IO, "s3: %s: the response is not a ListBucketResult", what);
    nst_s3_xml_text(body, n, "IsTruncated", tmp, sizeof tmp);
    *truncated = strcmp(tmp, "true") == 0;
    token[0] = '\0';
    if (*truncated) {
        nst_s3_xml_text(body, n, "NextContinuationToken", token, tcap);
        nst_s3_xml_unescape(token);
        if (!token[0])
            return nst_error(NOSTALL_E_IO,
                             "s3: %s: a truncated listing without "
                             "NextContinuationToken (does the server support ListObjectsV2?)",
                             what);
    }
    char *key = malloc(NST_S3_KEY_MAX * 6 + 16);
    if (!key) return nst_error(NOSTALL_E_NOMEM, "s3: out of memory");
    const char *p = body, *end = body + n;
    int rc = 0;
    while ((p = memmem(p, (size_t)(end - p), "<Contents>", 10))) {
        const char *q = memmem(p, (size_t)(end - p), "</Contents>", 11);
        if (!q) {
            rc = nst_error(NOSTALL_E_IO, "s3: %s: malformed listing (<Contents> not closed)", what);
            break;
        }
        size_t bl = (size_t)(q - p);
        nst_s3_xml_text(p, bl, "Key", key, NST_S3_KEY_MAX * 6 + 16);
        nst_s3_xml_text(p, bl, "Size", tmp, sizeof tmp);
        p = q + 11;
        if (!memmem(p - 11 - bl, bl, "<Key>", 5)) {
            rc = nst_error(NOSTALL_E_IO, "s3: %s: malformed listing (an object without a Key)",
                           what);
            break;
        }
        nst_s3_xml_unescape(key);
        size_t kl = strlen(key);
        if (urlenc && url_decode(key, &kl) < 0) {
            rc = nst_error(NOSTALL_E_IO, "s3: %s: malformed URL-encoded key '%.200s'", what, key);
            break;
        }
        char *e2;
        unsigned long long size = strtoull(tmp, &e2, 10);
        if (!tmp[0] || *e2) {
            rc = nst_error(NOSTALL_E_IO, "s3: %s: key '%.200s' has no valid Size", what, key);
            break;
        }
        if (kl == 0 || kl > NST_S3_KEY_MAX) {
            rc = nst_error(NOSTALL_E_IO, "s3: %s: a key of %zu bytes in the listing", what, kl);
            break;
        }
        if (key[kl - 1] == '/') {
            if (st) st->folders++;
            continue;
        }
        if ((rc = add_entry(L, key, kl, size)) < 0) break;
    }
    free(key);
    return rc;
}

int nst_s3_parse_listing(const char *what, const char *body, size_t n, nst_s3_list_fn fn, void *ctx,
                         uint64_t *folders, int *truncated, char *token, size_t tcap)
{
    listing L = {0};
    nst_s3_list_stats st = {0};
    int rc = parse_page(what, body, n, &L, &st, truncated, token, tcap);
    for (size_t i = 0; rc == 0 && i < L.n; i++)
        rc = fn(ctx, NULL, L.keys + L.e[i].off, L.e[i].size);
    if (folders) *folders = st.folders;
    free(L.keys);
    free(L.e);
    return rc;
}

int nst_s3_list(const char *prefix_url, nst_s3_list_fn fn, void *ctx, const nst_s3_list_opts *o,
                nst_s3_list_stats *st)
{
    nst_s3_list_opts dflt = {0};
    nst_s3_list_stats st0;
    if (!o) o = &dflt;
    if (!st) st = &st0;
    memset(st, 0, sizeof *st);
    char bucket[NST_S3_BUCKET_MAX + 1];
    const char *prefix;
    int rc = nst_s3_parse(prefix_url, bucket, sizeof bucket, &prefix);
    if (rc < 0) return rc;
    if (!fn) return nst_error(NOSTALL_E_INVALID, "s3: list: no callback");
    size_t pl = strlen(prefix);
    if (pl && prefix[pl - 1] != '/')
        return nst_error(NOSTALL_E_INVALID,
                         "s3: %.300s is an object, not a prefix (a prefix "
                         "ends in '/')",
                         prefix_url);
    char what[NST_S3_BUCKET_MAX + 400];
    snprintf(what, sizeof what, "listing %.300s", prefix_url);
    resp r = {.limit = LIST_BODY_MAX};
    req_ctx c = {.s3 = o->s3, .o = o, .st = st, .what = what, .bucket = bucket, .key = prefix};
    nst_s3 *own = NULL;
    listing L = {0};
    char *url = NULL, *surl = NULL, *q = NULL;
    size_t ucap = 0, scap = 0;
    char *token = NULL, *prev = NULL;
    const size_t tcap = 4096, qcap = 3 * NST_S3_KEY_MAX + 3 * 4096 + 256;
    if ((rc = setup(&c, &r, &own)) < 0) goto out;
    token = calloc(1, tcap);
    prev = calloc(1, tcap);
    q = calloc(1, qcap);
    if (!token || !prev || !q) {
        rc = nst_error(NOSTALL_E_NOMEM, "s3: out of memory");
        goto out;
    }
    char mk[16];
    snprintf(mk, sizeof mk, "%u", o->max_keys ? o->max_keys : 1000);
    for (;;) {
        /* parameters in ascending order of their names: the canonical query */
        q[0] = '\0';
        if ((token[0] && (rc = nst_s3_query_add(q, qcap, "continuation-token", token)) < 0) ||
            (rc = nst_s3_query_add(q, qcap, "encoding-type", "url")) < 0 ||
            (rc = nst_s3_query_add(q, qcap, "list-type", "2")) < 0 ||
            (rc = nst_s3_query_add(q, qcap, "max-keys", mk)) < 0 ||
            (pl && (rc = nst_s3_query_add(q, qcap, "prefix", prefix)) < 0))
            goto out;
        if ((rc = nst_s3_http_url(c.s3, bucket, "", q, &url, &ucap)) < 0) goto out;
        if ((rc = request(&c, url, &r)) < 0) goto out;
        st->pages++;
        int truncated = 0;
        memcpy(prev, token, tcap);
        if ((rc = parse_page(what, r.data ? r.data : "", r.len, &L, st, &truncated, token, tcap)) <
            0)
            goto out;
        if (!truncated) break;
        if (strcmp(prev, token) == 0) {
            rc = nst_error(NOSTALL_E_IO,
                           "s3: %s: the server repeats the same continuation "
                           "token",
                           what);
            goto out;
        }
    }
    if (L.n == 0) {
        rc = nst_error(NOSTALL_E_NOT_FOUND,
                       "s3: %s: no objects under prefix '%.300s' in bucket "
                       "'%s'%s",
                       what, prefix, bucket, st->folders ? " (only folder markers)" : "");
        goto out;
    }
    st->sorted = 1;
    for (size_t i = 1; i < L.n && st->sorted; i++)
        if (entry_cmp(&L.e[i - 1], &L.e[i], L.keys) > 0) st->sorted = 0;
    if (!st->sorted) qsort_r(L.e, L.n, sizeof *L.e, entry_cmp, L.keys);
    for (size_t i = 0; i < L.n; i++) {
        const char *k = L.keys + L.e[i].off;
        size_t need = strlen(bucket) + L.e[i].len + 8;
        if (need > scap) {
            char *ns = realloc(surl, need);
            if (!ns) {
                rc = nst_error(NOSTALL_E_NOMEM, "s3: out of memory");
                goto out;
            }
            surl = ns;
            scap = need;
        }
        snprintf(surl, scap, "s3://%s/%s", bucket, k);
        if ((rc = fn(ctx, surl, k, L.e[i].size)) < 0) goto out;
        st->objects++;
    }
    rc = 0;
out:
    if (c.e) curl_easy_cleanup(c.e);
    nst_s3_free(own);
    free(r.data);
    free(url);
    free(surl);
    free(q);
    free(token);
    free(prev);
    free(L.keys);
    free(L.e);
    return rc;
}

typedef struct tars_ctx {
    int (*add)(void *, const char *);
    void *ctx;
    uint64_t others;
} tars_ctx;

static int add_tar(void *ctx, const char *url, const char *key, uint64_t size)
{
    tars_ctx *t = ctx;
    size_t n = strlen(key);
    (void)size;
    if (n < 4 || strcasecmp(key + n - 4, ".tar") != 0) {
        t->others++;
        return 0;
    }
    return t->add(t->ctx, url);
}

int nst_s3_list_tars(const char *prefix_url, int (*add)(void *ctx, const char *url), void *ctx,
                     uint32_t timeout_ms, uint32_t retries, int verify_tls)
{
    const nst_s3 *s3;
    int rc = nst_s3_current(&s3);
    if (rc < 0) return rc;
    nst_s3_list_opts o = {.s3 = s3,
                          .timeout_ms = timeout_ms,
                          .retries = retries,
                          .verify_tls = verify_tls};
    nst_s3_list_stats st;
    tars_ctx t = {.add = add, .ctx = ctx};
    rc = nst_s3_list(prefix_url, add_tar, &t, &o, &st);
    if (rc == 0 && st.objects == t.others)
        rc = nst_error(NOSTALL_E_NOT_FOUND,
                       "s3: %.300s: no .tar objects under the prefix (%llu other objects; a "
                       "list of per-file objects goes in a list file of s3:// lines)",
                       prefix_url, (unsigned long long)t.others);
    return rc;
}

int nst_s3_probe(const char *url, uint32_t timeout_ms, uint32_t retries, int verify_tls)
{
    char bucket[NST_S3_BUCKET_MAX + 1];
    const char *key;
    int rc = nst_s3_parse(url, bucket, sizeof bucket, &key);
    if (rc < 0) return rc;
    const nst_s3 *s3;
    if ((rc = nst_s3_current(&s3)) < 0) return rc;
    nst_s3_list_opts o = {.s3 = s3,
                          .timeout_ms = timeout_ms,
                          .retries = retries,
                          .verify_tls = verify_tls};
    char what[NST_S3_KEY_MAX + 400];
    snprintf(what, sizeof what, "%.300s", url);
    resp r = {.limit = ERR_BODY_MAX};
    req_ctx c = {.s3 = s3, .o = &o, .what = what, .bucket = bucket, .key = key, .range = "0-0"};
    nst_s3 *own = NULL;
    char *hurl = NULL;
    size_t hcap = 0;
    if ((rc = setup(&c, &r, &own)) < 0) goto out;
    if ((rc = nst_s3_http_url(s3, bucket, key, NULL, &hurl, &hcap)) < 0) goto out;
    if ((rc = request(&c, hurl, &r)) < 0) {
        nst_s3_errinfo ei;
        nst_s3_parse_error(s3, r.data, r.len, &ei);
        int fatal = r.code == 401 || r.code == 403 || r.code == 301 || r.code == 307 ||
                    (r.code == 404 && strcmp(ei.code, "NoSuchBucket") == 0) ||
                    (r.code == 400 && strcmp(ei.code, "AuthorizationHeaderMalformed") == 0);
        if (!fatal) {
            nst_error_clear();
            rc = 0;
        }
    }
out:
    if (c.e) curl_easy_cleanup(c.e);
    nst_s3_free(own);
    free(r.data);
    free(hurl);
    return rc;
}
