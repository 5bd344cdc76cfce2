/*
 * fetch.h — the fetch stage of one worker thread: get an item's encoded
 * bytes (a whole file, or a byte range of one) from the MinIO cache, a peer
 * cache, local storage or HTTP, with up to `depth` fetches in flight.
 * Room: source/ (reading bytes).
 *
 * A worker submits the items it will decode next (in its order) and then
 * completes them oldest first. Meanwhile the others are in flight: io_uring
 * reads of local files, libcurl transfers, emulated storage delays (each
 * local read is scheduled on the emulated device when submitted, each
 * transfer when its size is known, so `depth` emulated reads overlap).
 * depth = 1 reads each item when it is submitted.
 *
 * Sources, in order: the MinIO cache (a hit is a pointer into cache memory:
 * no copy, no read), the peer cache hook (nostall_peer_cache), then storage
 * — a path is read with pread or io_uring, an http://, https:// or s3://
 * URL with the worker's libcurl multi handle (created on the first URL;
 * s3:// objects are signed GETs, source/s3.h). What was
 * read from storage is offered to the MinIO cache and the peer cache (after
 * the optional rewrite hook, when the MinIO cache would keep it), and, when
 * either cache exists, dropped from the OS page cache.
 *
 * Keys and ranges. A fetch names a key (the caches' item number, the index
 * into env->reading) apart from what it reads: a whole file, or bytes
 * [offset, offset + length) of one (token windows of a corpus file, members
 * of tar shards: a ranged pread, an HTTP Range request). Caches are looked up
 * and filled by key only, so the caller must give a key the same range
 * every time; two ranges of one file are two keys. The size limit
 * (max_file_bytes) applies to what is read: the range, not its file.
 *
 * Threads: one fetcher per worker, used only by that thread. It touches the
 * shared MinIO cache (thread-safe), the shared throttle (its own lock) and
 * the peer hooks (thread-safe by contract); nothing else outside itself.
 */
#ifndef NST_SOURCE_FETCH_H
#define NST_SOURCE_FETCH_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/minio.h"
#include "common/buf.h"
#include "common/error.h"
#include "source/throttle.h"

/* What every fetcher of a loader shares (owned by the loader). */
typedef struct nst_fetch_env {
    nst_cache *cache;               /* NULL: none */
    _Atomic uint8_t *reading;       /* with a cache: per item, 1 while some
                                        worker reads it from storage (so a
                                        second miss waits for the cache
                                        instead of reading it again) */
    const nostall_peer_cache *peer; /* NULL: none */
    nst_throttle *throttle;
    const atomic_int *stop;
    uint64_t max_file_bytes;
    uint64_t keys; /* keys are < keys (the cache's item
                                        count); a larger one fails with
                                        E_INVALID. 0: not checked      */
    int reader;    /* NOSTALL_READER_* (the reader option) */
    uint32_t http_timeout_ms, http_retries;
    int http_verify_tls;
} nst_fetch_env;

/* Where an item's bytes came from (added to its batch's accounting), and
 * whether the rewrite hook replaced them (counted by the worker). */
typedef struct nst_fetch_io {
    uint64_t storage_bytes, peer_bytes;
    uint8_t storage_read, cache_hit, cache_miss, peer_hit;
    uint8_t http_transfers, http_retries;
    uint8_t rewritten;   /* the bytes are the rewrite hook's output and
                            went into the MinIO cache                    */
    uint64_t rewrite_ns; /* time spent in the hook (rewritten or not)  */
} nst_fetch_io;

/* Optional per-fetcher hook (cache_transcode): rewrite the bytes of an item
 * just read from storage, before they are offered to the caches and
 * returned, when the MinIO cache would keep them. Returns 1 with the new
 * bytes in `out` (grow-only, the fetcher's) and *out_len set, or 0 to keep
 * the original. Runs on the fetcher's thread. */
typedef int (*nst_fetch_rewrite_fn)(void *ctx, const uint8_t *in, size_t len, nst_buf *out,
                                    size_t *out_len);

/* One fetch. After nst_fetch_next() returns it: status 0 with data/len the
 * item's bytes (valid until nst_fetch_release), or a negative status with
 * msg naming the item. */
typedef struct nst_fetch_req {
    uint64_t index; /* the key (cache item) */
    const char *path;
    uint64_t offset, length; /* the range read; length 0: the whole file */
    const uint8_t *data;
    size_t len;
    int status;
    char msg[NST_ERROR_MAX - 128];
    nst_fetch_io io;
    uint64_t wait_ns; /* time spent waiting for this fetch in next() (rewrites
                         done meanwhile not counted: they are work) */
    /* private */
    int state, fd;
    uint32_t again; /* io_uring: resubmissions after EINTR/EAGAIN */
    int claimed;    /* this request set env->reading[index]              */
    size_t size, have;
    uint64_t deadline;
    nst_buf buf;
} nst_fetch_req;

typedef struct nst_fetcher nst_fetcher;

/* depth >= 1 fetches in flight, room allocated for up to cap (>= depth;
 * nst_fetcher_grow). With env->reader AUTO, io_uring is used when cap > 1
 * and the kernel allows it; URING fails with E_IO when it is unavailable. */
int nst_fetcher_create(nst_fetcher **out, const nst_fetch_env *env, uint32_t depth, uint32_t cap);
/* Allow `depth` fetches in flight (depth <= cap). Only possible while the
 * pending fetches do not wrap around the FIFO's current size: returns 1 if
 * done, 0 if not now (try again after a release). Request buffers beyond
 * the current depth are never touched before it grows. */
int nst_fetcher_grow(nst_fetcher *f, uint32_t depth);
/* Install (fn non-NULL) or remove the rewrite hook. */
void nst_fetcher_set_rewrite(nst_fetcher *f, nst_fetch_rewrite_fn fn, void *ctx);
/* Waits for reads in flight (their buffers are freed), aborts transfers. */
void nst_fetcher_free(nst_fetcher *f);
/* "pread" or "io_uring". */
const char *nst_fetcher_reader(const nst_fetcher *f);

/* Fetches submitted and not yet released; room = depth - pending. */
uint32_t nst_fetch_pending(const nst_fetcher *f);
uint32_t nst_fetch_room(const nst_fetcher *f);
/* Start fetching bytes [offset, offset + length) of `path` (length 0: the
 * whole file, offset must be 0), cached and looked up under `key` (the
 * MinIO cache, env->reading[], the peer cache hooks; key < the cache's item
 * count). Needs room. Never fails: errors are reported by nst_fetch_next
 * for this fetch, each naming the path (or URL) and the range:
 *   E_INVALID        offset without length, a range ending past 2^63, a
 *                    key >= env->keys
 *   E_FILE_TOO_LARGE length > max_file_bytes (whatever the file's size)
 *   E_TRUNCATED      the file ends before the range does ("read: PATH:
 *                    bytes 100-199 asked, the file has 150"); HTTP 416, or
 *                    a 206 whose Content-Range says the file ends early
 *   E_IO             HTTP: the server ignored Range (a 200, aborted at its
 *                    headers, unless offset is 0 and its Content-Length is
 *                    length), a Content-Range not starting at offset, a body
 *                    longer than length; a body shorter than length is
 *                    retried like one cut short
 * and the whole-file errors of nst_read_file / nst_http_wait otherwise. A
 * cache hit returns the cached bytes as they are. Emulated storage schedules
 * the bytes read (length). */
void nst_fetch_submit_range(nst_fetcher *f, uint64_t key, const char *path, uint64_t offset,
                            uint64_t length);
/* The whole file: nst_fetch_submit_range(f, index, path, 0, 0). */
void nst_fetch_submit(nst_fetcher *f, uint64_t index, const char *path);
/* Queue an entry that fetches nothing (an echoed use whose data is held
 * elsewhere), keeping the FIFO in ticket order; it completes at once with
 * data NULL. */
void nst_fetch_submit_none(nst_fetcher *f, uint64_t index);
/* Complete the oldest pending fetch and return it (still counted pending
 * until released). NULL only when stop was set while waiting. */
nst_fetch_req *nst_fetch_next(nst_fetcher *f);
/* Fetch k (0: the oldest) of the pending ones if it is complete now,
 * without waiting (completed reads are reaped first; an emulated read
 * whose time has not come, a read or transfer in flight, or a wait for
 * another worker's read is not complete): NULL otherwise. Its data stays
 * valid until it is released (oldest first, one release each). */
nst_fetch_req *nst_fetch_ready(nst_fetcher *f, uint32_t k);
/* Recycle the oldest fetch (the one nst_fetch_next returned). */
void nst_fetch_release(nst_fetcher *f);

#endif
