/*
 * stream.h — streaming reads of tar shards: every shard read whole and in
 * order, once per epoch, for stores where a request costs more than its
 * bytes (object stores, far HTTP servers). The alternative, indexed reads
 * (one ranged read per item: source/fetch.h), is the default.
 * Room: dataset/ (what the items are).
 *
 * The order. Epoch e's *stream* is the shards in the keyed order
 * nst_permute(K, seed, e, .) (shard order 0..K-1 without shuffle), each
 * shard's items in archive order. The *delivery order* is the stream put
 * through a shuffle buffer of B items (WebDataset's shuffle(B)): the first
 * B items fill it; then each next item takes the place of an entry drawn
 * uniformly, which is delivered; at the stream's end the rest are drawn
 * one by one. Draws come from one counter-based stream keyed by (seed, e,
 * NST_RNG_STREAM), so the order is a pure function of (seed, epoch) and of
 * the index, computed in O(n) (nst_stream_order; n 4-byte entries) — any
 * thread count, any resume point, the same items in the same places. An
 * item at stream position s is delivered at position >= s - B: reading
 * runs at most B items ahead of delivery. shuffle = 0: the stream itself.
 *
 * The reader. One thread per loader (nst_stream) reads the shards of an
 * epoch in stream order — a local shard with sequential preads of 1 MiB, a
 * URL with one GET per shard (a transfer cut short is resumed where it
 * stopped with a Range request, up to `retries` times) — through tar.c's
 * scanner, matches each member to its index entry by offset, and keeps the
 * bytes of the items this rank will deliver in a store of `capacity`
 * items, keyed by (epoch, position), until the worker that fetches the
 * item releases it. It runs ahead of the oldest position not yet released
 * by at most the store's capacity: buffer + the tickets in flight, so
 * memory is bounded by capacity x the largest item. Epochs follow each
 * other (the next epoch's first shard is read when the last one's last
 * item is stored), up to `epochs` (0: until freed).
 *
 * Damage is per item, never a hang: an item whose member the scanner does
 * not see where its index says (a damaged region, a shard shorter than
 * indexed, a transfer that fails after its retries) is published as
 * failed with a message naming the shard, the member and the byte range;
 * the worker fetching it gets that status (a bad item: skipped and
 * reported, or the run's error under on_bad_item=fail). A shard that
 * cannot be opened fails all of its items the same way.
 *
 * Resume. nst_stream_start(epoch, position) restarts the reader at the
 * first shard holding an item delivered at or after `position` (a shard
 * boundary) and skips the items delivered before it (the offset): the
 * rest of the epoch is exactly what an uninterrupted run delivers.
 *
 * Ranks. The store keeps only the items of this rank's positions:
 * nst_stream_local maps a global position to the rank's positions (one, or
 * two where the sampler pads by wrapping around), with the sampler's
 * arithmetic (a resumed epoch included); a shard holding none of them from
 * the restart point on is not read. Every rank still reads most shards
 * (reads are up to W times the data with W ranks: use indexed reads, or
 * one stream per data-parallel group).
 *
 * Threads: the reader thread, and any number of consumer threads calling
 * nst_stream_item, _get and _release. One mutex guards the store, the
 * cursor and the order tables; one condition wakes consumers (an item
 * arrived or failed, stop), another the reader (room freed, restart,
 * stop). The reader holds the mutex only to publish an item or take a
 * slot, never while it reads.
 */
#ifndef NST_DATASET_STREAM_H
#define NST_DATASET_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "dataset/index.h"
#include "order/sampler.h"

/* Randomness purpose of the shuffle buffer's draws (common/rng.h). */
#define NST_RNG_STREAM 0x73747265616dULL /* "stream" */

/* Epoch e's delivery order: out[d] = the item delivered at global position
 * d, for d < nst_index_count(ix) (see above). buffer >= 1. E_INVALID for an
 * index that is not of shards or of 2^32 items or more. */
int nst_stream_order(const nst_index *ix, uint64_t seed, uint64_t epoch, uint32_t buffer,
                     int shuffle, uint32_t *out);

/* The sampler's position arithmetic without its permutation: the global
 * position (< n) that this rank's position `pos` of `epoch` reads, and the
 * inverse (this rank's positions reading global position g: 0, 1 or 2 of
 * them into local[]). */
uint64_t nst_stream_global(const nst_sampler *sm, uint64_t epoch, uint64_t pos);
uint32_t nst_stream_local(const nst_sampler *sm, uint64_t epoch, uint64_t g, uint64_t local[2]);

typedef struct nst_stream nst_stream;

typedef struct nst_stream_opts {
    uint64_t seed;
    int shuffle;
    uint32_t buffer;   /* the shuffle buffer's items (>= 1)                 */
    uint32_t capacity; /* items the store holds (>= buffer + the tickets in
                          flight, or the reader can wait for room that only
                          a later item would free)                          */
    uint64_t epochs;   /* epochs to read (0: until freed)                   */
    uint64_t max_item_bytes;
    uint32_t timeout_ms, retries; /* HTTP, per request / per shard          */
    int verify_tls;
    nst_sampler sampler; /* this rank's positions (copied; its permutation
                            is not used)                                   */
} nst_stream_opts;

typedef struct nst_stream_stats {
    uint64_t shards, requests, bytes_read;
    uint64_t items_stored, items_failed;
    uint64_t reader_wait_ns;   /* the reader waiting for room            */
    uint64_t consumer_wait_ns; /* consumers waiting for an item           */
} nst_stream_stats;

/* A reader over the shards of ix (which must outlive it), started at
 * (epoch 0, position 0). */
int nst_stream_create(nst_stream **out, const nst_index *ix, const nst_stream_opts *o);
/* Stops and joins the reader; waiters get E_STOPPED. NULL: no-op. */
void nst_stream_free(nst_stream *s);
/* Restart at this rank's (epoch, position) with the sampler as it is now
 * (a resumed epoch): the store is emptied, the reader starts again. Call
 * with no item held by a consumer (the loader: in the backend's reset). */
void nst_stream_start(nst_stream *s, uint64_t epoch, uint64_t position, const nst_sampler *sm);
/* Wake every waiter with E_STOPPED and stop the reader (any thread). */
void nst_stream_stop(nst_stream *s);

/* The item delivered at global position `global` of `epoch` (the order
 * above; computed for the epoch on first use, a few epochs kept). */
uint64_t nst_stream_item(nst_stream *s, uint64_t epoch, uint64_t global);
/* The bytes of the item at this rank's position `local` of `epoch`: waits
 * until the reader stored it. 0 with *data, *len (valid until released);
 * a negative status with msg (the item's failure, E_STOPPED, or E_INVALID
 * for a position the reader has passed or will not read). */
int nst_stream_get(nst_stream *s, uint64_t epoch, uint64_t local, const uint8_t **data, size_t *len,
                   char *msg, size_t msgn);
/* Give the slot of (epoch, local) back (after a get; no-op when absent). */
void nst_stream_release(nst_stream *s, uint64_t epoch, uint64_t local);
void nst_stream_stats_get(nst_stream *s, nst_stream_stats *out);

#endif
