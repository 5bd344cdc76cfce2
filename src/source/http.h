/*
 * http.h — the HTTP(S) source: many transfers (whole items, or byte ranges
 * of them) in flight from one thread, on a libcurl multi handle.
 * Room: source/ (reading bytes).
 *
 * What it does. A worker submits up to max_inflight URLs, each with its own
 * destination buffer, then calls nst_http_wait() to drive the transfers and
 * collect them one at a time as they finish (in completion order, not
 * submission order; the tag says which one). A transfer is reported once:
 * when it succeeded or failed for good.
 *   - HTTP 200 with a non-empty body: success, the body in buf->data[0..len).
 *     An empty body: E_EMPTY. A Content-Length over max_bytes fails as soon
 *     as the headers arrive, a body growing past it while it arrives:
 *     E_FILE_TOO_LARGE (neither is retried).
 *   - 404/410: E_NOT_FOUND; 401/403: E_PERMISSION; other 4xx and unexpected
 *     statuses (1xx/2xx other than 200, 3xx left after following up to 5
 *     redirects): E_IO, not retried. Malformed URLs, TLS verification
 *     failures, too many redirects: E_IO, not retried.
 *   - Transient failures are retried up to `retries` times: connection
 *     refused/reset, nothing received, send/receive errors, DNS failures,
 *     TLS handshake errors, timeouts (timeout_ms per attempt, also the
 *     connect timeout), 5xx, 429, and a body cut short (fewer bytes than
 *     Content-Length). Retry k (k = 1, 2, ...) waits backoff_ms * 2^(k-1),
 *     capped at 2 s, without blocking: the transfer is parked and re-added
 *     to the multi handle when its time comes while the others proceed.
 *     After the last retry the failure is reported as E_IO.
 *   Byte ranges (nst_http_submit_range, length > 0) send "Range: bytes=A-B"
 *   (B = offset + length - 1):
 *   - HTTP 206 whose Content-Range starts at offset and ends at B, with
 *     exactly length body bytes: success. Fewer bytes: "body cut short",
 *     retried as above. A Content-Range starting elsewhere or ending past B,
 *     a Content-Length over length, a 206 without Content-Range (multipart),
 *     or a body growing past length: E_IO, not retried. A Content-Range
 *     ending before B at the end of the file (S-E/T with E + 1 = T):
 *     E_TRUNCATED "bytes A-B asked, the file has T".
 *   - HTTP 200 (the server ignored Range): E_IO "the server does not
 *     support range requests", stopped as soon as its headers arrive (the
 *     body may be huge) — unless offset is 0 and its Content-Length is
 *     length: that is the range, taken as a 206 would be.
 *   - HTTP 416: E_TRUNCATED, naming the range (and the file's size when the
 *     server sends it), not retried.
 *   - length > max_bytes: E_FILE_TOO_LARGE from submit (the limit applies
 *     to the range, not the file).
 *   Other statuses as for whole files.
 *   Every failure message names the URL and the reason (HTTP status, curl's
 *   error, "body cut short: got X of Y bytes", "timed out after N ms") and
 *   the number of attempts.
 * Connections are kept alive and reused across items (the connection and
 * DNS caches belong to the multi handle); up to max_inflight parallel
 * connections per host; HTTP/2 multiplexing is off on purpose (parallel
 * connections, so one slow TCP stream does not hold back the others). Only
 * http:// and https:// are allowed, also for redirects. User-Agent
 * "nostall/<version>". TLS peer and host verification unless verify_tls is 0.
 * Proxies follow libcurl's environment variables (http_proxy, no_proxy...).
 *
 * s3:// URLs (source/s3.h). The first one read by a handle loads the S3
 * configuration (credentials, region, endpoint) into it; each is fetched
 * as the signed GET of its object (SigV4 by libcurl, ranges as Range
 * requests), judged as above, except that S3's error responses are read:
 * the message says "s3: s3://BUCKET/KEY: HTTP 404 NoSuchKey: ... (no
 * object: key 'KEY' in bucket 'BUCKET')", a 403 names where the
 * credentials came from, a 301 the bucket's region; 503 SlowDown, 500,
 * 429 and 400 RequestTimeout are retried like other transient failures.
 * Redirects are not followed (they would lose the signature). A
 * configuration that cannot be read (a half-set key pair, a missing
 * profile) fails every s3:// submit with its reason. No secret appears in
 * any message (server text is scrubbed: nst_s3_redact).
 *
 * Memory. The handle owns max_inflight easy handles, configured once at
 * create; a submit only sets the URL, so the steady state allocates nothing
 * of ours (libcurl allocates a little internally per transfer). The body
 * goes straight into the caller's nst_buf: reserved once from Content-Length
 * when the server sends one, else grown geometrically (contents copied).
 *
 * Threads. One nst_http per worker thread; it is not thread-safe itself:
 * create, submit, wait, inflight and free are called by that one thread.
 * nst_http_wakeup() alone may be called from any thread (e.g. stop()).
 * curl_global_init runs once per process (pthread_once) at the first create.
 * It touches only its own state, the buffers submitted to it (until their
 * transfer is reported), the thread-local error message, and reads *stop.
 * No signals are used (CURLOPT_NOSIGNAL); the handle never sleeps longer
 * than 20 ms at a time without checking *stop.
 */
#ifndef NST_SOURCE_HTTP_H
#define NST_SOURCE_HTTP_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"

typedef struct nst_http nst_http; /* one per worker thread; not thread-safe itself */

typedef struct nst_http_opts {
    uint32_t max_inflight; /* transfers in flight at once (>= 1, <= NST_HTTP_MAX_INFLIGHT) */
    uint32_t timeout_ms; /* one attempt fails after this long (also a connect timeout); 0 = 30 s */
    uint32_t retries;    /* retries of transient failures */
    uint32_t backoff_ms; /* first retry delay; doubles each retry (capped at 2 s); 0 = 50 ms */
    int verify_tls;      /* 1: verify peer and host (default behaviour) */
    uint64_t max_bytes;  /* larger bodies fail with E_FILE_TOO_LARGE; 0 = no limit */
    const atomic_int *stop; /* when set, waits return promptly (within ~20 ms); may be NULL */
} nst_http_opts;

enum { NST_HTTP_MAX_INFLIGHT = 4096, NST_HTTP_MAX_BACKOFF_MS = 2000 };

typedef struct nst_http_done {
    uint64_t tag;      /* as given to submit */
    int status;        /* 0 or a negative NOSTALL_E_* */
    size_t len;        /* body bytes in the caller's buffer when status == 0 */
    uint32_t attempts; /* 1 + retries used */
    char msg[512];     /* when status < 0: names the URL and the reason */
} nst_http_done;

/* E_INVALID (bad options), E_NOMEM, E_IO (libcurl could not initialize). */
int nst_http_create(nst_http **out, const nst_http_opts *o);
/* Aborts transfers in flight (their buffers are not touched afterwards).
 * NULL is a no-op. */
void nst_http_free(nst_http *h);
/* Start fetching url into *buf (grown with nst_buf_reserve as needed; the
 * caller keeps buf alive and untouched until the transfer is reported done).
 * E_STATE if max_inflight transfers are already in flight; E_INVALID if url
 * is not http://, https:// or s3:// (or not a valid s3:// object URL), the
 * S3 configuration's error for s3:// when it cannot be read. The URL is
 * copied. */
int nst_http_submit(nst_http *h, const char *url, nst_buf *buf, uint64_t tag);
/* The same for bytes [offset, offset + length) (length 0: the whole file,
 * offset must then be 0; see the top of this file). Also E_INVALID for an
 * offset with length 0 or a range ending past 2^63, E_FILE_TOO_LARGE for
 * length > max_bytes. The body is exactly length bytes when reported done. */
int nst_http_submit_range(nst_http *h, const char *url, uint64_t offset, uint64_t length,
                          nst_buf *buf, uint64_t tag);
/* Drive transfers and wait up to timeout_ms (0 = just poll) for one to
 * finish (success or final failure after retries). 1: *done filled (on
 * failure the thread-local error is set to done->msg too); 0: none finished
 * in time, *stop was set, or nothing is in flight; <0: internal error
 * (libcurl's multi interface failed; the handle should be freed). */
int nst_http_wait(nst_http *h, uint32_t timeout_ms, nst_http_done *done);
/* Submitted, not yet reported done (including those waiting for a retry). */
uint32_t nst_http_inflight(const nst_http *h);
/* Wake a thread blocked in nst_http_wait on h (it re-checks *stop and
 * returns 0 if set). Any thread, any time while h exists. */
void nst_http_wakeup(nst_http *h);
/* 1 for http:// or https:// (case-insensitive scheme), else 0. */
int nst_http_is_url(const char *path);
/* 1 for what a handle fetches: http://, https:// or s3://. */
int nst_http_handles(const char *path);

#endif
