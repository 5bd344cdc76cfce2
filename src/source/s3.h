/*
 * s3.h — s3:// sources: objects and prefixes of S3 (or an S3-compatible
 * server) read over HTTP(S) with AWS Signature Version 4.
 * Room: source/ (reading bytes).
 *
 * URLs. `s3://BUCKET/KEY` names one object; the key is taken verbatim, as
 * the AWS CLI does (not percent-encoded: "s3://b/a b+c.jpg" is the key
 * "a b+c.jpg"). `s3://BUCKET/PREFIX/` (ending in '/', or just
 * `s3://BUCKET/`) names every object under the prefix (nst_s3_list,
 * dataset/s3_list.h).
 *
 * Configuration (nst_s3_create, read once per handle from the environment,
 * as the AWS SDKs do):
 *   - credentials: AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+
 *     AWS_SESSION_TOKEN, sent as x-amz-security-token); else the profile
 *     AWS_PROFILE (or "default") of the shared credentials file
 *     (AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials: keys
 *     aws_access_key_id, aws_secret_access_key, aws_session_token); else
 *     none: requests go unsigned (public buckets), and a 403 says so. A
 *     profile named by AWS_PROFILE that does not exist, a half-set pair of
 *     variables, or a credentials file that cannot be parsed is an error.
 *   - region: AWS_REGION, else AWS_DEFAULT_REGION, else the profile's
 *     `region` in the shared config file (AWS_CONFIG_FILE, else
 *     ~/.aws/config, section [default] or [profile NAME]), else us-east-1.
 *   - endpoint: AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL
 *     ("http[s]://host[:port]"): an S3-compatible server, addressed
 *     path-style (http://host:port/BUCKET/KEY). Without one, AWS itself,
 *     virtual-hosted style (https://BUCKET.s3.REGION.amazonaws.com/KEY;
 *     .amazonaws.com.cn for cn-* regions), or path-style on
 *     https://s3.REGION.amazonaws.com for bucket names that are not valid
 *     host names (dots break the TLS wildcard certificate; upper case,
 *     underscores).
 *
 * Signing. Requests are signed by libcurl (CURLOPT_AWS_SIGV4
 * "aws:amz:REGION:s3"). Debian 12's libcurl 7.88 signs what it is given
 * verbatim, so nst_s3 hands it requests already in canonical form:
 *   - the key percent-encoded (every byte but A-Z a-z 0-9 - . _ ~ and '/'
 *     as %XX, upper-case hex: '+', '=', ',', ';', '@', ' ', '%'...), and
 *     CURLOPT_PATH_AS_IS so that curl leaves "." and ".." segments alone
 *     (7.88 uses the URL's path as the canonical URI without encoding it);
 *   - query parameters sorted by name, every value encoded the same way
 *     ('/' too), each with its '=' (7.88 does not sort or normalise the
 *     query);
 *   - x-amz-content-sha256 sent by us (7.88 signs the hash but never
 *     sends the header; S3 requires it): the SHA-256 of the empty body,
 *     which every S3 implementation accepts for a GET or HEAD;
 *   - x-amz-date left to curl (7.88 sends a date header given by the
 *     caller twice: its own copy and ours);
 *   - CURLOPT_USERNAME / CURLOPT_PASSWORD rather than USERPWD (a ':' in a
 *     key would split it).
 * Only host, x-amz-content-sha256, x-amz-date and x-amz-security-token are
 * signed (Range and the rest are not, which S3 allows). tests/test_s3.c
 * checks curl's Authorization header against the AWS documentation's
 * examples and against the reference signer below, and the tests' S3 proxy
 * (tests/s3_proxy.py) verifies every signature independently.
 *
 * Secrets. The secret key and the session token go to libcurl only; no
 * message of ours contains them, and text that came from a server (an
 * error's Message) is scrubbed of both before it is shown
 * (nst_s3_redact). The access key id is not printed either; messages say
 * where the credentials came from.
 *
 * Threads. An nst_s3 is immutable after create: any thread may use it.
 */
#ifndef NST_SOURCE_S3_H
#define NST_SOURCE_S3_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>

typedef struct nst_s3 nst_s3;

enum {
    NST_S3_BUCKET_MAX = 255, /* longer bucket names are refused */
    NST_S3_KEY_MAX = 4096,   /* S3's own limit is 1024 bytes */
    NST_S3_REGION_MAX = 64,
};

/* 1 if s starts with "s3://" (scheme case-insensitive), else 0. */
int nst_s3_is_url(const char *s);

/* Split an s3:// URL: the bucket into bucket[bcap] and *key pointing into
 * url (the object key, "" for "s3://bucket/" or "s3://bucket"). E_INVALID
 * naming the URL when it is not s3://, the bucket is empty, too long or
 * has characters S3 never allows, or the key is longer than
 * NST_S3_KEY_MAX. */
int nst_s3_parse(const char *url, char *bucket, size_t bcap, const char **key);

/* Read the configuration (see the top of this file). E_INVALID with the
 * reason (never a secret) when it is inconsistent, E_IO when a named file
 * cannot be read, E_NOMEM. */
int nst_s3_create(nst_s3 **out);
/* NULL is a no-op. The secret is wiped before the memory is freed. */
void nst_s3_free(nst_s3 *s);

const char *nst_s3_region(const nst_s3 *s);
/* "http://127.0.0.1:9000" (the override) or "" for AWS. */
const char *nst_s3_endpoint(const nst_s3 *s);
/* Where the credentials came from, for messages: "the environment
 * (AWS_ACCESS_KEY_ID)", "profile 'default' of /root/.aws/credentials",
 * "none (requests are unsigned)". */
const char *nst_s3_cred_source(const nst_s3 *s);
/* 1 when requests are signed. */
int nst_s3_signed(const nst_s3 *s);

/* The HTTP(S) URL for bucket + key (key raw; encoded here), with `query`
 * appended after '?' when non-empty (already canonical: see
 * nst_s3_query_add). Written into *buf (grown with realloc; *cap its
 * size). E_NOMEM, E_INVALID (bucket or key as for nst_s3_parse). */
int nst_s3_http_url(const nst_s3 *s, const char *bucket, const char *key, const char *query,
                    char **buf, size_t *cap);
/* The same from an s3:// object URL. */
int nst_s3_object_url(const nst_s3 *s, const char *s3url, char **buf, size_t *cap);

/* Percent-encode src[0..n) for SigV4 (unreserved bytes kept; '/' kept
 * when keep_slash) into dst[dcap], NUL-terminated. Returns the length, or
 * -1 if dcap is too small (needs 3 n + 1 at most). */
long nst_s3_uri_encode(const char *src, size_t n, int keep_slash, char *dst, size_t dcap);

/* Configure an easy handle for requests to S3 with this configuration:
 * SigV4 (when signed), the credentials, the x-amz-content-sha256 and
 * x-amz-security-token headers (CURLOPT_HTTPHEADER: the caller must not
 * set its own), CURLOPT_PATH_AS_IS. The handle must not outlive s (libcurl
 * keeps a pointer to the header list). nst_s3_clear_easy undoes it all
 * (the handle is then as for plain HTTP). E_IO with curl's reason. */
int nst_s3_setup_easy(const nst_s3 *s, CURL *e);
void nst_s3_clear_easy(CURL *e);

/* The configuration of the current environment, for code that cannot own
 * one (shards.c's synchronous readers, the stream reader): one nst_s3 per
 * distinct set of the variables above seen by the process (a fingerprint
 * of their values; the files are read when a new one is made), kept until
 * exit, at most NST_S3_CONFIGS. An error (the configuration cannot be
 * read) is returned each time, with its reason. */
enum { NST_S3_CONFIGS = 16 };
int nst_s3_current(const nst_s3 **out);
/* Point e at url for its next transfer: an http(s) URL as it is, an s3://
 * object URL as the signed request for the object (nst_s3_current,
 * nst_s3_setup_easy, redirects off). A handle set up for s3:// stays so:
 * use one handle per scheme. E_INVALID for another scheme or a bad s3://
 * URL, the configuration's error, E_NOMEM. */
int nst_s3_curl_url(CURL *e, const char *url);
/* A failed request's message for a synchronous reader: "PREFIX: URL:
 * HTTP 403 AccessDenied: ... (access denied to key 'K' in bucket 'B';
 * credentials: ...)" from the status and the error body (may be NULL),
 * set with nst_error; returns status. */
int nst_s3_fail(int status, const char *prefix, const char *url, long http_code, const void *body,
                size_t len);

/* Replace every occurrence of the secret key and of the session token in
 * msg (NUL-terminated, in place) by "[redacted]" (shortening it if need
 * be). Messages built from what a server sent go through this. */
void nst_s3_redact(const nst_s3 *s, char *msg, size_t cap);

/* ---- S3 error responses ------------------------------------------------ */

/* What an S3 error body says (<Error><Code>..</Code><Message>..</Message>):
 * code[] only letters and digits, message[] decoded, control characters
 * dropped, redacted. Empty strings when absent. */
typedef struct nst_s3_errinfo {
    char code[64];
    char message[200];
} nst_s3_errinfo;
void nst_s3_parse_error(const nst_s3 *s, const char *body, size_t n, nst_s3_errinfo *ei);

/* The reason of a failed S3 request for messages, from its HTTP status,
 * the parsed error and the bucket's region header (x-amz-bucket-region,
 * may be "") into out[cap]: names the bucket and the key, says what to
 * check (credentials' source for 403, AWS_REGION for a 301). Returns 1 if
 * the failure is transient (500, 503 SlowDown, 429, 400 RequestTimeout),
 * else 0. */
int nst_s3_reason(const nst_s3 *s, long http_code, const nst_s3_errinfo *ei,
                  const char *bucket_region, const char *bucket, const char *key, char *out,
                  size_t cap);

/* XML helpers (S3's responses): the text of the first <tag>...</tag> in
 * body[0..n) into out[cap] (truncated; "" if absent), and character
 * references decoded in place (&amp; &lt; &gt; &quot; &apos; &#N; &#xN;). */
void nst_s3_xml_text(const char *body, size_t n, const char *tag, char *out, size_t cap);
void nst_s3_xml_unescape(char *s);

/* ---- the reference signer (tests, diagnosis) ------------------------------ */

/* SHA-256 and HMAC-SHA256 (FIPS 180-4, RFC 2104). */
void nst_sha256(const void *data, size_t n, uint8_t out[32]);
void nst_hmac_sha256(const void *key, size_t klen, const void *msg, size_t n, uint8_t out[32]);
/* 64 lower-case hex digits + NUL. */
void nst_hex32(const uint8_t in[32], char out[65]);

/* One request to sign, already in canonical pieces: the URI path as sent
 * (percent-encoded), the canonical query (sorted, encoded; "" for none),
 * headers as "Name: value" (names any case; values trimmed and inner
 * runs of spaces folded here), the payload's hash (hex or
 * "UNSIGNED-PAYLOAD"). */
typedef struct nst_sigv4_req {
    const char *method, *uri, *query;
    const char *const *headers;
    size_t nheaders;
    const char *payload_hash;
    const char *amz_date; /* YYYYMMDDTHHMMSSZ */
    const char *region, *service;
    const char *access_key, *secret;
} nst_sigv4_req;

typedef struct nst_sigv4_out {
    char canonical_request[8192];
    char string_to_sign[512];
    char signed_headers[512];
    char signature[65];
    char authorization[1024]; /* "AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=..." */
} nst_sigv4_out;

/* E_INVALID when a piece is missing or does not fit the output. */
int nst_sigv4_sign(const nst_sigv4_req *r, nst_sigv4_out *out);

/* Append name=value (value raw; encoded here) to a query being built in
 * q[qcap] in sorted order: callers add parameters in ascending name order
 * (checked: E_INVALID otherwise), as SigV4 needs. E_INVALID if it does not
 * fit. */
int nst_s3_query_add(char *q, size_t qcap, const char *name, const char *value);

#endif
