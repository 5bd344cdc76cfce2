/*
 * http.c — the HTTP(S) source on libcurl's multi interface (see http.h):
 * whole files (200) and byte ranges (Range requests, 206).
 * Room: source/ (reading bytes).
 *
 * One nst_http owns a multi handle and a fixed pool of max_inflight slots,
 * each with an easy handle configured once at create; a submit sets the URL
 * and the Range (or clears it). A range's answer is judged when its headers
 * end (on_header): a 200 that is not exactly the range, a Content-Range that
 * does not start at the offset, or one saying the file ends early stops the
 * transfer there, before any body. A slot is FREE,
 * ACTIVE (its easy handle is in the multi handle), PARKED (waiting for its
 * retry time, not in the multi handle) or DONE (finished for good, waiting
 * to be reported by nst_http_wait, oldest first). Callbacks run inside
 * curl_multi_perform on the owning thread and touch only their slot and the
 * slot's destination buffer. Called by one worker thread per handle;
 * nst_http_wakeup by any thread (curl_multi_wakeup is thread-safe).
 */
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#include "common/clock.h"
#include "common/error.h"
#include "source/http.h"
#include "source/s3.h"

#define NST_STR2_(x) #x
#define NST_STR_(x) NST_STR2_(x)
#define NST_HTTP_UA                                                                                \
    "nostall/" NST_STR_(NOSTALL_VERSION_MAJOR) "." NST_STR_(NOSTALL_VERSION_MINOR) "." NST_STR_(   \
        NOSTALL_VERSION_PATCH)

enum { SLOT_FREE, SLOT_ACTIVE, SLOT_PARKED, SLOT_DONE };
enum {
    DEFAULT_BACKOFF_MS = 50,
    DEFAULT_TIMEOUT_MS = 30000,
    STOP_POLL_MS = 20,
    MAX_REDIRS = 5,
    REASON_MAX = 384,
    ERRBODY_MAX = 2048
};

typedef struct slot {
    CURL *easy;
    struct nst_http *h;
    int state;
    char *url; /* copy of the submitted URL (grow-only) */
    size_t urlcap;
    int s3;        /* url is s3://: the request goes to req_url */
    int easy_s3;   /* the easy handle is set up for S3 (signing) */
    char *req_url; /* s3: the HTTP(S) URL (grow-only) */
    size_t req_urlcap;
    char errbody[ERRBODY_MAX]; /* s3: the start of an error response's body */
    size_t errlen;
    char bucket_region[NST_S3_REGION_MAX + 1]; /* s3: x-amz-bucket-region */
    nst_buf *buf;                              /* caller's destination */
    uint64_t tag;
    size_t len;                         /* body bytes received in this attempt */
    int64_t clen;                       /* Content-Length of the current response, -1 unknown */
    uint64_t offset, length;            /* the range asked; length 0: the whole file */
    char range[48];                     /* CURLOPT_RANGE's "A-B" while length > 0 */
    int64_t cr_start, cr_end, cr_total; /* Content-Range of the current
                                           response: bytes S-E/T, -1 unknown
                                           (or "*")                      */
    long code;                          /* status of the current response's header block */
    int hdr_done;                       /* the current header block ended */
    int fail_status;                    /* set by a callback: final failure (no retry) */
    uint32_t attempts;
    uint64_t retry_at_ns;
    uint64_t done_seq;
    int status;              /* final status when DONE */
    char reason[REASON_MAX]; /* why the last attempt failed */
    char msg[512];           /* final message when DONE */
    char errbuf[CURL_ERROR_SIZE];
} slot;

struct nst_http {
    CURLM *multi;
    nst_http_opts o;
    slot *slots;
    uint32_t inflight; /* slots not FREE */
    uint64_t seq;
    nst_s3 *s3; /* S3 configuration, read at the first s3:// URL */
    int s3_rc;  /* reading it failed: every s3:// submit fails so */
    char s3_msg[NST_ERROR_MAX];
};

/* ---- process-wide init ------------------------------------------------- */

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static CURLcode g_init_rc = CURLE_FAILED_INIT;

static void global_init(void) { g_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

int nst_http_is_url(const char *path)
{
    if (!path) return 0;
    return strncasecmp(path, "http://", 7) == 0 || strncasecmp(path, "https://", 8) == 0;
}

int nst_http_handles(const char *path) { return nst_http_is_url(path) || nst_s3_is_url(path); }

/* The start of an error response's body, for S3's <Code> and <Message>. */
static void keep_error_body(slot *s, const char *p, size_t n)
{
    if (!s->s3 || s->errlen >= sizeof s->errbody - 1) return;
    size_t t = sizeof s->errbody - 1 - s->errlen;
    if (t > n) t = n;
    memcpy(s->errbody + s->errlen, p, t);
    s->errlen += t;
    s->errbody[s->errlen] = '\0';
}

static void set_reason(slot *s, const char *fmt, ...) NST_PRINTF(2, 3);
static void set_reason(slot *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->reason, sizeof s->reason, fmt, ap);
    va_end(ap);
}

/* ---- callbacks (inside curl_multi_perform) ------------------------------ */

/* Size the buffer for the range once (nothing received yet in this
 * attempt); 0 if it cannot be. */
static int reserve_range(slot *s)
{
    if (s->len == 0 && s->length > s->buf->cap && nst_buf_reserve(s->buf, (size_t)s->length) < 0) {
        s->fail_status = NOSTALL_E_NOMEM;
        set_reason(s, "cannot allocate %llu bytes for the range", (unsigned long long)s->length);
        return 0;
    }
    return 1;
}

static int starts_with_ci(const char *b, size_t n, const char *lit)
{
    size_t l = strlen(lit);
    return n >= l && strncasecmp(b, lit, l) == 0;
}

/* A decimal number of at most 18 digits at b[*i..n), -1 if none. */
static int64_t parse_u63(const char *b, size_t n, size_t *i)
{
    int64_t v = 0;
    int d = 0;
    for (; *i < n && b[*i] >= '0' && b[*i] <= '9'; (*i)++, d++) {
        if (d == 18) return -1;
        v = v * 10 + (b[*i] - '0');
    }
    return d ? v : -1;
}

/* "bytes S-E/T" or "bytes * /T" (T may be "*"); fields left -1 when absent
 * or malformed. */
static void parse_content_range(slot *s, const char *b, size_t n)
{
    size_t i = 0;
    while (i < n && (b[i] == ' ' || b[i] == '\t')) i++;
    if (n - i < 6 || strncasecmp(b + i, "bytes ", 6) != 0) return;
    i += 6;
    while (i < n && b[i] == ' ') i++;
    int64_t st = -1, en = -1;
    if (i < n && b[i] == '*') {
        i++;
    } else {
        st = parse_u63(b, n, &i);
        if (st < 0 || i >= n || b[i] != '-') return;
        i++;
        en = parse_u63(b, n, &i);
        if (en < st) return;
    }
    if (i >= n || b[i] != '/') return;
    i++;
    s->cr_start = st;
    s->cr_end = en;
    s->cr_total = parse_u63(b, n, &i); /* "*": -1 */
}

/* "bytes A-B" of the slot's range, for messages. */
#define RANGE_ASKED(s)                                                                             \
    (unsigned long long)(s)->offset, (unsigned long long)((s)->offset + (s)->length - 1)

/* The headers of a response to a Range request ended: is it the range?
 * 0 (with fail_status and the reason set) stops the transfer now. Other
 * statuses than 200/206 are judged when the transfer ends. */
static int range_headers_ok(slot *s)
{
    const uint64_t last = s->offset + s->length - 1;
    if (s->code == 200) {
        /* The whole file, which is only the range if it starts at 0 and
         * is exactly as long. Anything else may be huge: do not download. */
        if (s->offset == 0 && s->clen >= 0 && (uint64_t)s->clen == s->length)
            return reserve_range(s);
        s->fail_status = NOSTALL_E_IO;
        if (s->clen >= 0)
            set_reason(s,
                       "bytes %llu-%llu asked: the server does not support range requests "
                       "(HTTP 200 with all %lld bytes instead of 206)",
                       RANGE_ASKED(s), (long long)s->clen);
        else
            set_reason(s,
                       "bytes %llu-%llu asked: the server does not support range requests "
                       "(HTTP 200 of unknown length instead of 206)",
                       RANGE_ASKED(s));
        return 0;
    }
    if (s->code != 206) return 1;
    if (s->cr_start < 0) {
        s->fail_status = NOSTALL_E_IO;
        set_reason(s,
                   "bytes %llu-%llu asked: HTTP 206 without a usable Content-Range "
                   "(multipart or malformed)",
                   RANGE_ASKED(s));
        return 0;
    }
    if ((uint64_t)s->cr_start != s->offset) {
        s->fail_status = NOSTALL_E_IO;
        set_reason(s,
                   "bytes %llu-%llu asked: the server sends bytes %lld-%lld (Content-Range "
                   "does not start at the offset)",
                   RANGE_ASKED(s), (long long)s->cr_start, (long long)s->cr_end);
        return 0;
    }
    if ((uint64_t)s->cr_end > last) {
        s->fail_status = NOSTALL_E_IO;
        set_reason(s, "bytes %llu-%llu asked: the server sends bytes %lld-%lld, more than asked",
                   RANGE_ASKED(s), (long long)s->cr_start, (long long)s->cr_end);
        return 0;
    }
    if ((uint64_t)s->cr_end < last) {
        /* A server ends the range at the end of the file. */
        if (s->cr_total >= 0 && s->cr_end + 1 == s->cr_total) {
            s->fail_status = NOSTALL_E_TRUNCATED;
            set_reason(s, "bytes %llu-%llu asked, the file has %lld", RANGE_ASKED(s),
                       (long long)s->cr_total);
        } else {
            s->fail_status = NOSTALL_E_IO;
            set_reason(s, "bytes %llu-%llu asked: the server sends only bytes %lld-%lld",
                       RANGE_ASKED(s), (long long)s->cr_start, (long long)s->cr_end);
        }
        return 0;
    }
    if (s->clen >= 0 && (uint64_t)s->clen > s->length) {
        s->fail_status = NOSTALL_E_IO;
        set_reason(s,
                   "bytes %llu-%llu asked: HTTP 206 with Content-Length %lld, more than "
                   "the %llu bytes asked",
                   RANGE_ASKED(s), (long long)s->clen, (unsigned long long)s->length);
        return 0;
    }
    return reserve_range(s);
}

static size_t on_header(char *b, size_t size, size_t nitems, void *ud)
{
    slot *s = ud;
    size_t n = size * nitems;
    nst_http_opts *o = &s->h->o;

    if (starts_with_ci(b, n, "HTTP/")) {
        /* A new response (after a redirect or a 1xx): start over. */
        long code = 0;
        size_t i = 5;
        while (i < n && b[i] != ' ') i++;
        while (i < n && b[i] == ' ') i++;
        for (int d = 0; d < 3 && i < n && b[i] >= '0' && b[i] <= '9'; d++, i++)
            code = code * 10 + (b[i] - '0');
        s->code = code;
        s->clen = -1;
        s->cr_start = s->cr_end = s->cr_total = -1;
        s->hdr_done = 0;
        s->errlen = 0;
        s->bucket_region[0] = '\0';
        return n;
    }
    if (s->hdr_done) return n; /* trailers */
    if (s->s3 && starts_with_ci(b, n, "x-amz-bucket-region:")) {
        size_t k = 0;
        for (size_t i = 20; i < n && k < NST_S3_REGION_MAX; i++)
            if ((b[i] >= 'a' && b[i] <= 'z') || (b[i] >= '0' && b[i] <= '9') || b[i] == '-')
                s->bucket_region[k++] = b[i];
        s->bucket_region[k] = '\0';
        return n;
    }
    if (starts_with_ci(b, n, "content-range:")) {
        parse_content_range(s, b + 14, n - 14);
        return n;
    }
    if (starts_with_ci(b, n, "content-length:")) {
        size_t i = 15;
        int64_t v = 0;
        int any = 0;
        while (i < n && (b[i] == ' ' || b[i] == '\t')) i++;
        for (; i < n && b[i] >= '0' && b[i] <= '9'; i++) {
            if (v > (INT64_MAX - 9) / 10) break;
            v = v * 10 + (b[i] - '0');
            any = 1;
        }
        if (any) s->clen = v;
        return n;
    }
    if ((n == 2 && b[0] == '\r' && b[1] == '\n') || (n == 1 && b[0] == '\n')) {
        s->hdr_done = 1;
        if (s->length) return range_headers_ok(s) ? n : 0;
        if (s->code != 200 || s->clen < 0) return n;
        if (o->max_bytes && (uint64_t)s->clen > o->max_bytes) {
            s->fail_status = NOSTALL_E_FILE_TOO_LARGE;
            set_reason(s, "Content-Length %lld is over the limit of %llu bytes", (long long)s->clen,
                       (unsigned long long)o->max_bytes);
            return 0; /* abort the transfer */
        }
        if ((uint64_t)s->clen > SIZE_MAX) {
            s->fail_status = NOSTALL_E_FILE_TOO_LARGE;
            set_reason(s, "Content-Length %lld does not fit in memory", (long long)s->clen);
            return 0;
        }
        /* Size the buffer once (nothing received yet in this attempt). */
        if (s->len == 0 && (size_t)s->clen > s->buf->cap &&
            nst_buf_reserve(s->buf, (size_t)s->clen) < 0) {
            s->fail_status = NOSTALL_E_NOMEM;
            set_reason(s, "cannot allocate %lld bytes for the body", (long long)s->clen);
            return 0;
        }
    }
    return n;
}

/* The body of a response to a Range request: a 206 (or a 200 accepted as
 * the range) goes into the buffer sized at the end of the headers, never
 * past the range. */
static size_t on_range_body(slot *s, const char *ptr, size_t n)
{
    size_t need;
    if (s->code != 200 && s->code != 206) { /* an error page */
        keep_error_body(s, ptr, n);
        return n;
    }
    if (nst_add_overflow(s->len, n, &need) || (uint64_t)need > s->length) {
        s->fail_status = NOSTALL_E_IO;
        set_reason(s, "bytes %llu-%llu asked: the server sends more than the %llu bytes asked",
                   RANGE_ASKED(s), (unsigned long long)s->length);
        return 0;
    }
    if (need > s->buf->cap && !reserve_range(s)) return 0; /* not sized: cannot happen */
    memcpy(s->buf->data + s->len, ptr, n);
    s->len = need;
    return n;
}

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *ud)
{
    slot *s = ud;
    size_t n = size * nmemb, need;
    nst_http_opts *o = &s->h->o;

    if (s->length) return on_range_body(s, ptr, n);
    if (s->code != 200) { /* an error page: not the item */
        keep_error_body(s, ptr, n);
        return n;
    }
    if (nst_add_overflow(s->len, n, &need) || (o->max_bytes && (uint64_t)need > o->max_bytes)) {
        s->fail_status = NOSTALL_E_FILE_TOO_LARGE;
        set_reason(s, "body over the limit of %llu bytes", (unsigned long long)o->max_bytes);
        return 0;
    }
    nst_buf *b = s->buf;
    if (need > b->cap) {
        /* Unknown length (or a server sending more than announced): grow
         * geometrically, keeping what arrived. */
        size_t want = need;
        if (b->cap <= SIZE_MAX / 2 && b->cap * 2 > want) want = b->cap * 2;
        if (want < 65536) want = 65536;
        if (o->max_bytes && want > o->max_bytes && need <= o->max_bytes)
            want = (size_t)o->max_bytes;
        nst_buf nb = {0};
        if (nst_buf_reserve(&nb, want) < 0) {
            s->fail_status = NOSTALL_E_NOMEM;
            set_reason(s, "cannot allocate %zu bytes for the body", want);
            return 0;
        }
        if (s->len) memcpy(nb.data, b->data, s->len);
        nst_buf_free(b);
        *b = nb;
    }
    memcpy(b->data + s->len, ptr, n);
    s->len = need;
    return n;
}

/* ---- transfers ------------------------------------------------------------ */

static int setup_easy(nst_http *h, slot *s)
{
    CURL *e = s->easy;
    const nst_http_opts *o = &h->o;
    CURLcode rc = CURLE_OK;
#define SET(opt, val)                                                                              \
    do {                                                                                           \
        if (rc == CURLE_OK) rc = curl_easy_setopt(e, opt, val);                                    \
    } while (0)
    SET(CURLOPT_NOSIGNAL, 1L);
    SET(CURLOPT_PRIVATE, (void *)s);
    SET(CURLOPT_WRITEFUNCTION, on_body);
    SET(CURLOPT_WRITEDATA, (void *)s);
    SET(CURLOPT_HEADERFUNCTION, on_header);
    SET(CURLOPT_HEADERDATA, (void *)s);
    SET(CURLOPT_ERRORBUFFER, s->errbuf);
    SET(CURLOPT_TIMEOUT_MS, (long)o->timeout_ms);
    SET(CURLOPT_CONNECTTIMEOUT_MS, (long)o->timeout_ms);
    SET(CURLOPT_FOLLOWLOCATION, 1L);
    SET(CURLOPT_MAXREDIRS, (long)MAX_REDIRS);
#if LIBCURL_VERSION_NUM >= 0x075500
    SET(CURLOPT_PROTOCOLS_STR, "http,https");
    SET(CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#else
    SET(CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
    SET(CURLOPT_REDIR_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    SET(CURLOPT_USERAGENT, NST_HTTP_UA);
    SET(CURLOPT_SSL_VERIFYPEER, o->verify_tls ? 1L : 0L);
    SET(CURLOPT_SSL_VERIFYHOST, o->verify_tls ? 2L : 0L);
    SET(CURLOPT_TCP_KEEPALIVE, 1L);
#undef SET
    if (rc != CURLE_OK)
        return nst_error(rc == CURLE_OUT_OF_MEMORY ? NOSTALL_E_NOMEM : NOSTALL_E_IO,
                         "http: cannot configure a transfer: %s", curl_easy_strerror(rc));
    return 0;
}

/* Start (or restart) an attempt: the easy handle goes into the multi handle. */
static int start_attempt(nst_http *h, slot *s)
{
    s->len = 0;
    s->clen = -1;
    s->code = 0;
    s->hdr_done = 0;
    s->fail_status = 0;
    s->errbuf[0] = '\0';
    s->reason[0] = '\0';
    s->errlen = 0;
    s->bucket_region[0] = '\0';
    s->attempts++;
    CURLMcode mc = curl_multi_add_handle(h->multi, s->easy);
    if (mc != CURLM_OK)
        return nst_error(mc == CURLM_OUT_OF_MEMORY ? NOSTALL_E_NOMEM : NOSTALL_E_IO,
                         "http: %.300s: cannot start the transfer: %s", s->url,
                         curl_multi_strerror(mc));
    s->state = SLOT_ACTIVE;
    return 0;
}

static void finish(nst_http *h, slot *s, int status)
{
    s->state = SLOT_DONE;
    s->status = status;
    s->done_seq = ++h->seq;
    if (status < 0) {
        int n = snprintf(s->msg, sizeof s->msg, "%s: %.300s: %s", s->s3 ? "s3" : "http", s->url,
                         s->reason);
        if (n > 0 && (size_t)n < sizeof s->msg && s->attempts > 1)
            snprintf(s->msg + n, sizeof s->msg - (size_t)n, " (after %u attempts)", s->attempts);
        if (s->s3) nst_s3_redact(h->s3, s->msg, sizeof s->msg);
    } else {
        s->msg[0] = '\0';
    }
}

static int curl_transient(CURLcode rc)
{
    switch (rc) {
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_HTTP2:
    case CURLE_PARTIAL_FILE:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_HTTP2_STREAM: return 1;
    default: return 0;
    }
}

static uint64_t backoff_ms(const nst_http_opts *o, uint32_t retry_no)
{
    uint64_t d = o->backoff_ms;
    for (uint32_t i = 1; i < retry_no && d < NST_HTTP_MAX_BACKOFF_MS; i++) d *= 2;
    return d < NST_HTTP_MAX_BACKOFF_MS ? d : NST_HTTP_MAX_BACKOFF_MS;
}

/* One attempt of s ended with rc: finish it, or park it for a retry. */
static void attempt_ended(nst_http *h, slot *s, CURLcode rc)
{
    int transient = 0, status = NOSTALL_E_IO;
    long code = 0;
    curl_easy_getinfo(s->easy, CURLINFO_RESPONSE_CODE, &code);
    const char *detail = s->errbuf[0] ? s->errbuf : curl_easy_strerror(rc);

    if (s->fail_status) {
        status = s->fail_status; /* reason set by the callback */
    } else if (rc == CURLE_OK && s->length && (code == 200 || code == 206)) {
        if (s->len == s->length) {
            finish(h, s, 0);
            return;
        }
        transient = 1; /* on_range_body never takes more than the range */
        set_reason(s, "body cut short: got %zu of the %llu bytes asked (bytes %llu-%llu)", s->len,
                   (unsigned long long)s->length, RANGE_ASKED(s));
    } else if (rc == CURLE_OK && s->length && code == 416) {
        status = NOSTALL_E_TRUNCATED;
        if (s->cr_total >= 0)
            set_reason(s, "bytes %llu-%llu asked, the file has %lld (HTTP 416)", RANGE_ASKED(s),
                       (long long)s->cr_total);
        else
            set_reason(s,
                       "bytes %llu-%llu asked: past the end of the file (HTTP 416 Range Not "
                       "Satisfiable)",
                       RANGE_ASKED(s));
    } else if (rc == CURLE_OK && s->s3 && code != 200) {
        /* S3's own error: its Code (SlowDown, NoSuchKey, AccessDenied...),
         * the bucket and the key, what to check */
        char bucket[NST_S3_BUCKET_MAX + 1] = "";
        const char *key = "";
        nst_s3_errinfo ei;
        (void)nst_s3_parse(s->url, bucket, sizeof bucket, &key); /* checked at submit */
        nst_s3_parse_error(h->s3, s->errbody, s->errlen, &ei);
        transient = nst_s3_reason(h->s3, code, &ei, s->bucket_region, bucket, key, s->reason,
                                  sizeof s->reason);
        if (code == 404 || code == 410)
            status = NOSTALL_E_NOT_FOUND;
        else if (code == 401 || code == 403)
            status = NOSTALL_E_PERMISSION;
    } else if (rc == CURLE_OK) {
        if (code == 200) {
            if (s->len > 0) {
                finish(h, s, 0);
                return;
            }
            status = NOSTALL_E_EMPTY;
            set_reason(s, "empty body (HTTP 200 with 0 bytes)");
        } else if (code == 404 || code == 410) {
            status = NOSTALL_E_NOT_FOUND;
            set_reason(s, "HTTP %ld (not found)", code);
        } else if (code == 401 || code == 403) {
            status = NOSTALL_E_PERMISSION;
            set_reason(s, "HTTP %ld (permission denied)", code);
        } else if (code == 429 || (code >= 500 && code <= 599)) {
            transient = 1;
            set_reason(s, "HTTP %ld", code);
        } else if (code >= 300 && code <= 399) {
            set_reason(s, "HTTP %ld (redirect not followed)", code);
        } else {
            set_reason(s, "HTTP %ld (unexpected status)", code);
        }
    } else if (rc == CURLE_PARTIAL_FILE) {
        transient = 1;
        if (s->clen >= 0)
            set_reason(s, "body cut short: got %zu of %lld bytes", s->len, (long long)s->clen);
        else
            set_reason(s, "body cut short: got %zu bytes (%s)", s->len, detail);
    } else if (rc == CURLE_OPERATION_TIMEDOUT) {
        transient = 1;
        set_reason(s, "timed out after %u ms (http_timeout_ms): %s", h->o.timeout_ms, detail);
    } else if (curl_transient(rc)) {
        transient = 1;
        set_reason(s, "%s (curl error %d)", detail, (int)rc);
    } else if (rc == CURLE_OUT_OF_MEMORY) {
        status = NOSTALL_E_NOMEM;
        set_reason(s, "out of memory (curl)");
    } else {
        set_reason(s, "%s (curl error %d)", detail, (int)rc);
    }

    if (transient && s->attempts <= h->o.retries) {
        s->state = SLOT_PARKED;
        s->retry_at_ns = nst_now_ns() + backoff_ms(&h->o, s->attempts) * 1000000ULL;
        return;
    }
    finish(h, s, transient ? NOSTALL_E_IO : status);
}

static void collect(nst_http *h)
{
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(h->multi, &left))) {
        if (m->msg != CURLMSG_DONE) continue;
        CURL *e = m->easy_handle;
        CURLcode rc = m->data.result;
        char *priv = NULL;
        curl_easy_getinfo(e, CURLINFO_PRIVATE, &priv);
        slot *s = (slot *)(void *)priv;
        curl_multi_remove_handle(h->multi, e);
        if (!s) continue;
        s->state = SLOT_PARKED; /* not in the multi handle any more */
        attempt_ended(h, s, rc);
    }
}

/* Re-add parked transfers whose time has come; *next = earliest pending
 * retry time (UINT64_MAX if none). A restart that fails finishes that
 * transfer with the error. */
static void unpark(nst_http *h, uint64_t now, uint64_t *next)
{
    *next = UINT64_MAX;
    for (uint32_t i = 0; i < h->o.max_inflight; i++) {
        slot *s = &h->slots[i];
        if (s->state != SLOT_PARKED) continue;
        if (s->retry_at_ns <= now) {
            int rc = start_attempt(h, s);
            if (rc < 0) {
                set_reason(s, "cannot restart the transfer: %s", nostall_last_error());
                finish(h, s, rc);
            }
        } else if (s->retry_at_ns < *next) {
            *next = s->retry_at_ns;
        }
    }
}

static int drive(nst_http *h)
{
    int running;
    CURLMcode mc = curl_multi_perform(h->multi, &running);
    if (mc != CURLM_OK && mc != CURLM_CALL_MULTI_PERFORM)
        return nst_error(mc == CURLM_OUT_OF_MEMORY ? NOSTALL_E_NOMEM : NOSTALL_E_IO,
                         "http: curl_multi_perform: %s", curl_multi_strerror(mc));
    collect(h);
    return 0;
}

static int report(nst_http *h, nst_http_done *done)
{
    slot *best = NULL;
    for (uint32_t i = 0; i < h->o.max_inflight; i++) {
        slot *s = &h->slots[i];
        if (s->state == SLOT_DONE && (!best || s->done_seq < best->done_seq)) best = s;
    }
    if (!best) return 0;
    done->tag = best->tag;
    done->status = best->status;
    done->len = best->status == 0 ? best->len : 0;
    done->attempts = best->attempts;
    memcpy(done->msg, best->msg, sizeof done->msg);
    if (best->status < 0) nst_error_set(best->status, best->msg);
    best->state = SLOT_FREE;
    best->buf = NULL;
    h->inflight--;
    return 1;
}

/* ---- API ---------------------------------------------------------------- */

int nst_http_create(nst_http **out, const nst_http_opts *o)
{
    if (!out || !o) return nst_error(NOSTALL_E_INVALID, "http: no options given");
    *out = NULL;
    if (o->max_inflight < 1 || o->max_inflight > NST_HTTP_MAX_INFLIGHT)
        return nst_error(NOSTALL_E_INVALID, "http: max_inflight %u is not in [1, %d]",
                         o->max_inflight, NST_HTTP_MAX_INFLIGHT);
    pthread_once(&g_once, global_init);
    if (g_init_rc != CURLE_OK)
        return nst_error(NOSTALL_E_IO, "http: curl_global_init failed: %s",
                         curl_easy_strerror(g_init_rc));

    nst_http *h = calloc(1, sizeof *h);
    if (!h) return nst_error(NOSTALL_E_NOMEM, "http: out of memory");
    h->o = *o;
    if (!h->o.timeout_ms) h->o.timeout_ms = DEFAULT_TIMEOUT_MS;
    if (!h->o.backoff_ms) h->o.backoff_ms = DEFAULT_BACKOFF_MS;
    if (h->o.timeout_ms > (uint32_t)LONG_MAX) h->o.timeout_ms = (uint32_t)LONG_MAX;
    h->slots = calloc(o->max_inflight, sizeof *h->slots);
    h->multi = curl_multi_init();
    if (!h->slots || !h->multi) {
        nst_http_free(h);
        return nst_error(NOSTALL_E_NOMEM, "http: out of memory");
    }
    /* Parallel connections, not HTTP/2 streams on one; one per transfer. */
    curl_multi_setopt(h->multi, CURLMOPT_PIPELINING, (long)CURLPIPE_NOTHING);
    curl_multi_setopt(h->multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)o->max_inflight);
    curl_multi_setopt(h->multi, CURLMOPT_MAXCONNECTS,
                      (long)(o->max_inflight < 4 ? 8 : 2 * o->max_inflight));
    for (uint32_t i = 0; i < o->max_inflight; i++) {
        slot *s = &h->slots[i];
        s->h = h;
        s->easy = curl_easy_init();
        if (!s->easy) {
            nst_http_free(h);
            return nst_error(NOSTALL_E_NOMEM, "http: out of memory (curl_easy_init)");
        }
        int rc = setup_easy(h, s);
        if (rc < 0) {
            nst_http_free(h);
            return rc;
        }
    }
    *out = h;
    return 0;
}

void nst_http_free(nst_http *h)
{
    if (!h) return;
    if (h->slots) {
        for (uint32_t i = 0; i < h->o.max_inflight; i++) {
            slot *s = &h->slots[i];
            if (!s->easy) continue;
            if (s->state == SLOT_ACTIVE && h->multi) curl_multi_remove_handle(h->multi, s->easy);
            curl_easy_cleanup(s->easy);
            free(s->url);
            free(s->req_url);
        }
    }
    if (h->multi) curl_multi_cleanup(h->multi);
    nst_s3_free(h->s3);
    free(h->slots);
    free(h);
}

/* Point the slot's easy handle at s->url: an http(s) URL as it is, an
 * s3:// URL as the signed request for its object (the configuration read
 * at the first one). The handle is switched between the two set-ups only
 * when the kind of URL changes. */
static int set_target(nst_http *h, slot *s)
{
    s->s3 = nst_s3_is_url(s->url);
    if (s->s3) {
        if (!h->s3 && !h->s3_rc) {
            int rc = nst_s3_create(&h->s3);
            if (rc < 0) {
                h->s3_rc = rc;
                snprintf(h->s3_msg, sizeof h->s3_msg, "%s", nostall_last_error());
            }
        }
        if (h->s3_rc) return nst_error_set(h->s3_rc, h->s3_msg);
        int rc = nst_s3_object_url(h->s3, s->url, &s->req_url, &s->req_urlcap);
        if (rc < 0) return rc;
        if (!s->easy_s3) {
            if ((rc = nst_s3_setup_easy(h->s3, s->easy)) < 0) return rc;
            /* a redirect elsewhere would lose the signature: report it */
            curl_easy_setopt(s->easy, CURLOPT_FOLLOWLOCATION, 0L);
            s->easy_s3 = 1;
        }
    } else if (s->easy_s3) {
        nst_s3_clear_easy(s->easy);
        curl_easy_setopt(s->easy, CURLOPT_FOLLOWLOCATION, 1L);
        s->easy_s3 = 0;
    }
    return 0;
}

int nst_http_submit(nst_http *h, const char *url, nst_buf *buf, uint64_t tag)
{
    return nst_http_submit_range(h, url, 0, 0, buf, tag);
}

int nst_http_submit_range(nst_http *h, const char *url, uint64_t offset, uint64_t length,
                          nst_buf *buf, uint64_t tag)
{
    if (!h || !url || !buf) return nst_error(NOSTALL_E_INVALID, "http: submit: missing argument");
    if (!nst_http_handles(url))
        return nst_error(NOSTALL_E_INVALID, "http: %.300s: not an http://, https:// or s3:// URL",
                         url);
    if (length == 0 && offset != 0)
        return nst_error(NOSTALL_E_INVALID,
                         "http: %.300s: offset %llu with length 0 (the whole "
                         "file)",
                         url, (unsigned long long)offset);
    if (length && (offset > (uint64_t)INT64_MAX || length > (uint64_t)INT64_MAX - offset))
        return nst_error(NOSTALL_E_INVALID,
                         "http: %.300s: range of %llu bytes at offset %llu "
                         "ends past 2^63",
                         url, (unsigned long long)length, (unsigned long long)offset);
    if (length && h->o.max_bytes && length > h->o.max_bytes)
        return nst_error(NOSTALL_E_FILE_TOO_LARGE,
                         "http: %.300s: bytes %llu-%llu asked: %llu "
                         "bytes is over the limit of %llu bytes",
                         url, (unsigned long long)offset, (unsigned long long)(offset + length - 1),
                         (unsigned long long)length, (unsigned long long)h->o.max_bytes);
    if (h->inflight >= h->o.max_inflight)
        return nst_error(NOSTALL_E_STATE, "http: %.300s: %u transfers already in flight", url,
                         h->inflight);
    slot *s = NULL;
    for (uint32_t i = 0; i < h->o.max_inflight && !s; i++)
        if (h->slots[i].state == SLOT_FREE) s = &h->slots[i];
    if (!s) return nst_error(NOSTALL_E_STATE, "http: no free transfer slot");

    size_t ul = strlen(url) + 1;
    if (ul > s->urlcap) {
        char *p = realloc(s->url, ul);
        if (!p) return nst_error(NOSTALL_E_NOMEM, "http: %.300s: out of memory", url);
        s->url = p;
        s->urlcap = ul;
    }
    memcpy(s->url, url, ul);
    int rc = set_target(h, s);
    if (rc < 0) return rc;
    CURLcode cc = curl_easy_setopt(s->easy, CURLOPT_URL, s->s3 ? s->req_url : s->url);
    /* The easy handle is reused: a whole-file transfer clears the Range. */
    s->offset = offset;
    s->length = length;
    if (length)
        snprintf(s->range, sizeof s->range, "%llu-%llu", (unsigned long long)offset,
                 (unsigned long long)(offset + length - 1));
    if (cc == CURLE_OK) cc = curl_easy_setopt(s->easy, CURLOPT_RANGE, length ? s->range : NULL);
    if (cc != CURLE_OK)
        return nst_error(cc == CURLE_OUT_OF_MEMORY ? NOSTALL_E_NOMEM : NOSTALL_E_INVALID,
                         "http: %.300s: %s", url, curl_easy_strerror(cc));
    s->buf = buf;
    s->tag = tag;
    s->attempts = 0;
    rc = start_attempt(h, s);
    if (rc < 0) {
        s->state = SLOT_FREE;
        s->buf = NULL;
        return rc;
    }
    h->inflight++;
    /* Get the request out now (connect, send): the response then arrives in
     * the kernel's socket buffers while the caller does other work. */
    (void)drive(h); /* a multi-handle failure shows again in nst_http_wait */
    return 0;
}

int nst_http_wait(nst_http *h, uint32_t timeout_ms, nst_http_done *done)
{
    if (!h || !done) return nst_error(NOSTALL_E_INVALID, "http: wait: missing argument");
    uint64_t deadline = nst_now_ns() + (uint64_t)timeout_ms * 1000000ULL;
    for (;;) {
        if (report(h, done)) return 1;
        if (h->inflight == 0) return 0;
        if (h->o.stop && atomic_load_explicit(h->o.stop, memory_order_relaxed)) return 0;
        uint64_t next_retry;
        unpark(h, nst_now_ns(), &next_retry);
        int rc = drive(h);
        if (rc < 0) return rc;
        if (report(h, done)) return 1;
        uint64_t now = nst_now_ns();
        if (now >= deadline) return 0;
        uint64_t until = deadline;
        if (next_retry < until) until = next_retry;
        uint64_t ms = until > now ? (until - now + 999999) / 1000000 : 0;
        if (ms > STOP_POLL_MS) ms = STOP_POLL_MS;
        if (ms == 0) continue;
        CURLMcode mc = curl_multi_poll(h->multi, NULL, 0, (int)ms, NULL);
        if (mc != CURLM_OK)
            return nst_error(NOSTALL_E_IO, "http: curl_multi_poll: %s", curl_multi_strerror(mc));
    }
}

uint32_t nst_http_inflight(const nst_http *h) { return h ? h->inflight : 0; }

void nst_http_wakeup(nst_http *h)
{
    if (h && h->multi) curl_multi_wakeup(h->multi);
}
