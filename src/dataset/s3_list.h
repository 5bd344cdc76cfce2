/*
 * s3_list.h — the synchronous S3 requests a dataset makes at create time
 * (dataset/s3_list.c): listing a prefix with ListObjectsV2 (the objects,
 * or the .tar shards, under s3://BUCKET/PREFIX/) and the probe, a 1-byte
 * GET of one object. Room: dataset/ (what the items are); it reaches S3
 * through source/s3.h (configuration, signing, URLs, error documents).
 */
#ifndef NST_DATASET_S3_LIST_H
#define NST_DATASET_S3_LIST_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "source/s3.h"

/* One object of a listing: its s3:// URL, its key and its size. Return 0
 * to go on, a negative NOSTALL_E_* to stop the listing with that status
 * (the callback sets the message). The strings are valid during the call
 * only. */
typedef int (*nst_s3_list_fn)(void *ctx, const char *url, const char *key, uint64_t size);

/* One page of a ListObjectsV2 response, body[0..n) (what nst_s3_list does
 * with each page; also the entry of tests/fuzz/fuzz_s3_list.c): its
 * objects in page order to fn(ctx, NULL, key, size), keys decoded (XML
 * character references, then encoding-type=url), folder markers (keys
 * ending in '/') skipped and counted in *folders; *truncated, and the
 * continuation token into token[tcap]. Returns 0, fn's status, or E_IO
 * naming `what` for a malformed page (not a ListBucketResult, an object
 * without a Key or a valid Size, a key of 0 or over NST_S3_KEY_MAX bytes, a
 * bad %XX, a truncated page without a token). */
int nst_s3_parse_listing(const char *what, const char *body, size_t n, nst_s3_list_fn fn, void *ctx,
                         uint64_t *folders, int *truncated, char *token, size_t tcap);

typedef struct nst_s3_list_opts {
    const nst_s3 *s3;       /* NULL: read the configuration now */
    uint32_t timeout_ms;    /* per request; 0 = 30 s */
    uint32_t retries;       /* of transient failures; backoff 50 ms doubling, capped at 2 s */
    uint32_t max_keys;      /* per page; 0 = 1000 (S3's maximum) */
    int verify_tls;         /* 1: verify peer and host */
    const atomic_int *stop; /* set: return E_STOPPED promptly; may be NULL */
} nst_s3_list_opts;

typedef struct nst_s3_list_stats {
    uint64_t objects; /* given to the callback */
    uint64_t folders; /* "folder" markers left out (key ending in '/') */
    uint64_t pages, requests, retries;
    int sorted; /* 1: the server listed in key order (S3 does) */
} nst_s3_list_stats;

/* Every object under s3://bucket/prefix/ (prefix "" for a whole bucket)
 * with ListObjectsV2 (list-type=2, paginated with continuation-token,
 * encoding-type=url honoured when the server echoes it), in ascending
 * byte order of the keys (sorted here if the server did not), each given
 * to fn. Keys ending in '/' are folder markers: left out and counted.
 * The URL must end in '/' or name just the bucket. Errors (messages name
 * the bucket and the prefix): E_INVALID (not such a URL), E_NOT_FOUND (no
 * such bucket; no object under the prefix), E_PERMISSION (403: the
 * message says where the credentials came from), E_IO (other statuses,
 * transient failures after the retries, a malformed listing), E_STOPPED,
 * E_NOMEM, or what fn returned. st may be NULL. */
int nst_s3_list(const char *prefix_url, nst_s3_list_fn fn, void *ctx, const nst_s3_list_opts *o,
                nst_s3_list_stats *st);

/* The shards under s3://bucket/prefix/ (a dataset source): every object
 * whose key ends in ".tar" (any case), in key order, its s3:// URL given
 * to add (others, e.g. the .nstidx index files, are left out). E_NOT_FOUND
 * naming the prefix when there is none; nst_s3_list's errors. */
int nst_s3_list_tars(const char *prefix_url, int (*add)(void *ctx, const char *url), void *ctx,
                     uint32_t timeout_ms, uint32_t retries, int verify_tls);

/* At create: a 1-byte GET of one object of a dataset, so that what would
 * fail every request (credentials: 401/403; no such bucket; a wrong region
 * or endpoint) fails the create as one error naming the bucket and the
 * key. 0 otherwise: the object itself missing is that item's own failure,
 * and transient failures (after the retries) are left to the reads. */
int nst_s3_probe(const char *url, uint32_t timeout_ms, uint32_t retries, int verify_tls);

#endif
