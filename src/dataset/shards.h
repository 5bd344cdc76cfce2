/*
 * shards.h — tar shards as a dataset source: which names are shards,
 * brace patterns, and each shard's members (its index file) from a
 * sidecar, a cached header pass, or one pass over its tar headers.
 * Room: dataset/ (what the items are).
 *
 * Names. A shard is a path or an http(s):// URL ending in ".tar" (any
 * case). A brace pattern names many: "train-{000000..000146}.tar" (a
 * decimal range, zero-padded to the width of its first bound when that
 * starts with a 0, counting down when the first bound is larger) and
 * "{a,b,c}" (alternatives), several per pattern (the product, leftmost
 * varying slowest), as WebDataset's braceexpand does; at most
 * NST_SHARDS_MAX names.
 *
 * A shard's members, in order of preference:
 *   1. its sidecar index file NAME.tar.nstidx (tar.h; `nostall pack`
 *      writes it), when it describes this version of the shard (its
 *      identity, tar.h): the same size and fingerprint (the shard's first
 *      and last 64 KiB, read each time: two preads, or for URLs one
 *      ranged GET of the first 64 KiB, which also tells the size and
 *      validator, and one of the last); for a local shard the same mtime
 *      when the file records one (a header pass's does; pack's sidecars do
 *      not, so that their bytes are the same for every run and a copy of
 *      shard and sidecar stays valid); for a URL the same ETag (else
 *      Last-Modified) when the file records one (a header pass's cache
 *      does; pack's sidecars do not);
 *   2. the cache of an earlier header pass, when it describes this version
 *      of the shard (the same checks): local shards' cache is the sidecar
 *      path itself when the shard's folder is writable, else
 *      $XDG_CACHE_HOME/nostall/shards/ (or ~/.cache/nostall/shards/) under
 *      a hash of the shard's real path, size, mtime and inode; URLs' cache
 *      is only there, under a hash of the URL; nothing is cached when
 *      neither place is writable (or with no_cache);
 *   3. one pass over its tar headers (tar.c's scanner, skipping member
 *      data): pread in chunks of 64 KiB for local shards; ranged GETs of
 *      16 KiB through libcurl for URLs (about one request per sample, one
 *      after the other per shard: latency-bound, which is why pack writes
 *      sidecars). A .cls member's text is read for its label. Damage is
 *      recorded in the index file (tar.h), so a cached index reports it
 *      again; so is, as a damaged region naming the member, a sample
 *      webdataset would not read as nostall would: one with two members of
 *      one key and extension (any case), one of more than 64 members (the
 *      whole sample, never split), and a member whose key is over 4096
 *      bytes or extension over 255 (tar.c reports GNU sparse members).
 * A shard rebuilt in place with the same size (its samples re-shuffled)
 * thus gets a header pass, never its old index. (An index file of version
 * 1 has no identity and is never used.)
 * Shards are indexed on `threads` threads at once (default: 4 per online
 * CPU for URLs, one per CPU for local header passes, at most 64) and
 * handed to the caller in order.
 *
 * A shard that cannot be indexed -- it does not exist, is not a regular
 * file, or cannot be read (E_NOT_FOUND, E_PERMISSION, E_IO); a URL answered
 * 404/403, by a server that ignores Range, or still failing (5xx, 429, a
 * reset) after `retries` retries (E_IO); compressed data (gzip, bzip2, xz,
 * zstd) under a .tar name (E_UNSUPPORTED: nostall reads uncompressed tar
 * only) -- goes to the caller's `bad` callback with its status and a
 * message naming it, and the others are indexed (without `bad`: the build
 * fails with it). Out of memory always fails the build, and so does a
 * sidecar that passes its checksum but is malformed (E_DATASET, from the
 * caller's parse). An empty shard (0 bytes) has no members.
 *
 * HTTP retries wait backoff_ms (default 250 ms), doubling each retry, at
 * most max_backoff_ms (default 8 s), or what a 503/429's Retry-After
 * (seconds) asks when that is longer, still at most max_backoff_ms.
 *
 * Threads: nst_shards_index() runs on the calling thread and starts and
 * joins its own; the callback runs on the calling thread.
 */
#ifndef NST_DATASET_SHARDS_H
#define NST_DATASET_SHARDS_H

#include <stddef.h>
#include <stdint.h>

#define NST_SHARDS_MAX 1000000

typedef struct nst_shard_opts {
    uint32_t threads;        /* shards indexed at once; 0: auto              */
    uint32_t timeout_ms;     /* one HTTP request; 0: 30 s                    */
    uint32_t retries;        /* transient HTTP failures (5xx, 429, resets)   */
    int verify_tls;          /* https: verify peer and host                  */
    int no_cache;            /* do not write header-pass results             */
    uint32_t backoff_ms;     /* first HTTP retry's wait; 0: 250 ms          */
    uint32_t max_backoff_ms; /* longest wait (Retry-After too); 0: 8 s      */
} nst_shard_opts;

/* The defaults: auto threads, 30 s, 3 retries, TLS verified, cached. */
void nst_shard_opts_default(nst_shard_opts *o);

/* Where each shard's members came from, and what indexing cost. */
typedef struct nst_shard_stats {
    uint64_t sidecar, cached, passes; /* shards by source (1, 2, 3 above) */
    uint64_t cache_written;           /* header passes saved to a file  */
    uint64_t http_requests, bytes_read;
} nst_shard_stats;

/* 1 if `s` ends in ".tar" (any case; a URL's query string excluded). */
int nst_shard_is_tar(const char *s);
/* 1 if shards can be read from this URL (http://, https://). */
int nst_shard_is_url(const char *s);
/* 1 if `s` holds a brace pattern ("{a..b}" or "{a,b}"). */
int nst_shard_has_braces(const char *s);
/* Expand a brace pattern, calling add(ctx, name) for each name in order
 * (a pattern without braces: itself). E_DATASET for a malformed pattern
 * or more than NST_SHARDS_MAX names, with a message naming it; add's
 * negative status stops it. */
int nst_shards_expand(const char *pattern, int (*add)(void *ctx, const char *name), void *ctx);

/* Index `n` shards; for each, in order, cb(ctx, k, file, len): `file` is
 * its index file (checked: magic, version, size, checksum; len bytes;
 * valid during the call), or, for a shard that cannot be indexed (above),
 * bad(ctx, k, status, message). A negative status from cb or bad stops
 * everything and is returned. bad and stats may be NULL. */
typedef int (*nst_shard_cb)(void *ctx, size_t k, const uint8_t *file, size_t len);
typedef int (*nst_shard_bad_cb)(void *ctx, size_t k, int status, const char *message);
int nst_shards_index(const char *const *shards, size_t n, const nst_shard_opts *o, nst_shard_cb cb,
                     nst_shard_bad_cb bad, void *ctx, nst_shard_stats *stats);
/* The compression whose magic number `p` (n bytes) starts with: "gzip",
 * "bzip2", "xz", "zstd", or NULL. */
const char *nst_shard_compression(const uint8_t *p, size_t n);

/* The header pass alone, over a local shard (tests, `nostall pack
 * --index`): its index file into *out (malloc'd, *len bytes). */
int nst_shard_scan_file(const char *path, uint8_t **out, size_t *len);
/* A local shard's identity (tar.h: the fingerprint of its first and last
 * NST_TAR_INDEX_FP_BYTES bytes, its mtime), for an index file written apart
 * from a header pass (`nostall pack`). */
struct nst_tar_index_ident;
int nst_shard_ident_file(const char *path, struct nst_tar_index_ident *id);
/* A libcurl easy handle (as void *: CURL *) set up for shards: http(s)
 * only, redirects, User-Agent, TLS verification, timeout_ms per request
 * (streaming: a transfer fails only when it stalls that long). Where a
 * URL scheme needs more (signing), this is the one place to add it. */
int nst_shard_curl_new(void **out, uint32_t timeout_ms, int verify_tls, int streaming);
/* The sidecar path of a shard: shard + ".nstidx" (before a URL's query). */
int nst_shard_sidecar_name(const char *shard, char *buf, size_t n);

#endif
