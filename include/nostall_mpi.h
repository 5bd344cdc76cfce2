/*
 * nostall_mpi.h — libnostall_mpi: a partitioned cache of encoded items across
 * the ranks of an MPI communicator (CoorDL's partitioned caching), built on
 * libnostall's peer-cache hook (nostall_config_set_peer_cache). The only
 * public header of the project that includes <mpi.h>.
 *
 *     MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided); // caller
 *     nostall_config_set_uint(cfg, NOSTALL_OPT_RANK, rank);
 *     nostall_config_set_uint(cfg, NOSTALL_OPT_WORLD_SIZE, world);
 *     nostall_mpi *pc;
 *     if (nostall_mpi_attach(&pc, cfg, MPI_COMM_WORLD, "/data/train", 8ull << 30) < 0)
 *         fprintf(stderr, "%s\n", nostall_last_error());
 *     nostall_loader_create(&ld, "/data/train", cfg);  // cache=none: this is the cache
 *     ... train ...
 *     nostall_loader_free(ld);
 *     nostall_mpi_detach(pc);                            // collective, bounded
 *     MPI_Finalize();                                    // caller
 *
 * OWNERSHIP
 *   Every item of the dataset has at most one owner rank, a pure function of
 *   (item sizes, every rank's cache_bytes): item i goes to rank i % W if it
 *   still has room, else to the next rank (i+1, i+2, ... mod W) with room,
 *   else to no rank (always read from storage). Caches are therefore
 *   disjoint, together hold min(aggregate budget, dataset) up to one item per
 *   rank, and no request is ever sent for an item nobody will hold.
 *   Filling: a rank that reads an item from storage (the loader's `put`)
 *   keeps it if it owns it, else sends it to its owner (push), so every
 *   item is read from storage once and, with an aggregate cache >= the
 *   dataset, never again. An owner that answered "miss" for an item a
 *   moment ago knows it is being read: a second request for it waits for
 *   the push (at most timeout_ms / 2) instead of reading storage too.
 *   Item sizes are learned at attach: rank 0 indexes `source` (as the loader
 *   does) and stats every file, then broadcasts the sizes. Items whose size
 *   cannot be learned (stat fails, http sources) are owned by nobody.
 *
 * TRANSPORT AND THREADS
 *   The library never calls MPI_Init/MPI_Finalize. attach duplicates `comm`
 *   (errors on the duplicate return instead of aborting) and starts one
 *   progress thread per attachment; it makes every MPI call after attach.
 *   Loader worker threads enqueue requests to it and wait on a condition
 *   variable with a deadline, so many requests are in flight at once (one per
 *   worker thread); the progress thread also serves the peers' requests from
 *   this rank's arena and receives pushed items. Requires MPI_THREAD_MULTIPLE
 *   (the application may call MPI concurrently from its own threads):
 *   attach fails with E_INVALID naming the level provided otherwise.
 *
 * SAFETY
 *   Every reply carries the item index, the request id, the length and the
 *   checksum recorded when the owner filled the item; the requester checks
 *   all of them and the length planned at attach. A request not answered
 *   within timeout_ms falls back to storage (the loader reads the item), with
 *   a one-time warning on stderr naming the peer; that peer is then skipped
 *   (straight to storage) until any message from it arrives. Never a hang,
 *   never a wrong item. A killed peer: with OpenMPI, start the job with
 *   `mpirun --enable-recovery` (else mpirun aborts the job when a process
 *   dies, which is also a clear, bounded failure). Open MPI 4.1 may still
 *   end a survivor whose request was on its way to the dead rank (its TCP
 *   transport has no recovery; docs/mpi.md).
 *
 * Thread safety: attach/detach by one thread; stats from any thread while
 * the attachment exists; the hooks are called by the loader's workers.
 */
#ifndef NOSTALL_MPI_H
#define NOSTALL_MPI_H

#include <mpi.h>
#include <stdint.h>

#include "nostall.h"

#if defined(NOSTALL_BUILDING_MPI) && defined(__GNUC__)
#define NOSTALL_MPI_API __attribute__((visibility("default")))
#else
#define NOSTALL_MPI_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nostall_mpi nostall_mpi;

/* Options of nostall_mpi_attach_opts (copied in; pass its size: fields are
 * only ever appended). */
typedef struct nostall_mpi_options {
    uint32_t timeout_ms;        /* one remote request; 0 = default 2000      */
    uint32_t detach_timeout_ms; /* detach waits this long for the other ranks
                                   to reach detach; 0 = default 30000        */
    int no_push;                /* 1: a non-owner does not send what it read
                                   from storage to the owner                 */
    int quiet;                  /* 1: no warnings on stderr                  */
} nostall_mpi_options;

/* Collective over `comm` (every rank calls it with the same `source`).
 * Learns the dataset's item sizes (rank 0 indexes `source`), plans
 * ownership from every rank's `cache_bytes` (0: this rank caches nothing
 * but still uses the others), reserves this rank's arena, starts the
 * progress thread, and attaches the peer cache to `cfg` (loaders created
 * from it use it; give them cache=none). `opts` may be NULL (defaults).
 * On error returns a negative NOSTALL_E_* with nostall_last_error() naming
 * the rank and the cause; every rank fails together where the cause is
 * collective (rank 0 cannot index the dataset). */
NOSTALL_MPI_API int nostall_mpi_attach(nostall_mpi **out, nostall_config *cfg, MPI_Comm comm,
                                       const char *source, uint64_t cache_bytes);
NOSTALL_MPI_API int nostall_mpi_attach_opts(nostall_mpi **out, nostall_config *cfg, MPI_Comm comm,
                                            const char *source, uint64_t cache_bytes,
                                            const nostall_mpi_options *opts, size_t opts_size);

/* The hooks attach installed (for loaders built from another config). */
NOSTALL_MPI_API int nostall_mpi_peer_cache(nostall_mpi *m, nostall_peer_cache *out);

typedef struct nostall_mpi_stats {
    uint64_t rank, world;
    uint64_t items;       /* dataset items                               */
    uint64_t owned_items; /* items this rank owns under the plan        */
    uint64_t owned_bytes;
    uint64_t unowned_items; /* items no rank can hold (read from storage) */
    uint64_t local_hits;    /* items served to this rank's loader from its arena */
    uint64_t remote_hits;   /* items fetched from a peer's arena          */
    uint64_t remote_misses; /* peer answered: not cached (yet)            */
    uint64_t storage_reads; /* items this rank's loader read from storage */
    uint64_t storage_bytes;
    uint64_t net_bytes_in;    /* payload bytes received (remote hits, pushes) */
    uint64_t net_bytes_out;   /* payload bytes sent (replies, pushes)        */
    uint64_t requests_served; /* peers' requests answered by this rank       */
    uint64_t served_hits;     /* ... of which from the arena                 */
    uint64_t pushes_sent, pushes_received;
    uint64_t timeouts;                 /* requests not answered within timeout_ms     */
    uint64_t skipped_down;             /* requests not sent: owner considered down    */
    uint64_t verify_failures;          /* replies rejected (size, checksum, identity) */
    uint64_t peers_down;               /* peers currently considered down             */
    uint64_t cache_items, cache_bytes; /* held in this rank's arena          */
    uint64_t remote_ns;                /* sum of request-to-reply times of remote hits */
    uint64_t parked;                   /* peers' requests held until the item's push
                                 arrived (it was being read right then)      */
} nostall_mpi_stats;

/* Snapshot (relaxed; any thread) into at most `size` bytes of *out (pass
 * sizeof *out: counters are only ever appended). */
NOSTALL_MPI_API int nostall_mpi_stats_get(const nostall_mpi *m, nostall_mpi_stats *out, size_t size);

/* Collective over the communicator, bounded: after every loader using the
 * hooks is freed, keeps serving peers until every rank has called detach
 * (or detach_timeout_ms passed: a peer is gone), then stops the progress
 * thread and frees everything. Returns 0, or NOSTALL_TIMEOUT if some rank
 * never arrived (its state is then left to MPI; prefer exiting without
 * MPI_Finalize's collective if peers are down). NULL is a no-op. */
NOSTALL_MPI_API int nostall_mpi_detach(nostall_mpi *m);

#ifdef __cplusplus
}
#endif
#endif /* NOSTALL_MPI_H */
