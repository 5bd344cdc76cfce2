/*
 * tool_mpi.c — see tool_mpi.h. One attachment per process; main thread only.
 */
#include "mpi/tool_mpi.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nostall_mpi.h"
#include "util.h"

typedef struct tool_mpi {
    nostall_mpi *pc;
    int rank, world, we_initialized;
} tool_mpi;

int tool_mpi_attach(nostall_config *cfg, const char *source, const char *cache_bytes,
                    void **handle)
{
    int flag = 0, provided = 0;
    tool_mpi *t = calloc(1, sizeof *t);
    *handle = t;
    if (!t) {
        fprintf(stderr, "nostall bench: out of memory\n");
        return 1;
    }
    /* Parse BYTES like the cache_bytes option (K/M/G/T, "25%"). */
    uint64_t bytes = 0;
    nostall_config *tmp = NULL;
    if (nostall_config_create(&tmp) < 0 || nostall_config_set(tmp, "cache_bytes", cache_bytes) < 0 ||
        nostall_config_get_uint(tmp, NOSTALL_OPT_CACHE_BYTES, &bytes) < 0) {
        tool_line(stderr, "nostall bench: --partitioned-cache: %s", nostall_last_error());
        nostall_config_free(tmp);
        return 1;
    }
    nostall_config_free(tmp);
    MPI_Initialized(&flag);
    if (!flag) {
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
            fprintf(stderr, "nostall bench: MPI_Init_thread failed\n");
            return 1;
        }
        t->we_initialized = 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &t->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &t->world);
    if (nostall_config_set_uint(cfg, NOSTALL_OPT_RANK, (uint64_t)t->rank) < 0 ||
        nostall_config_set_uint(cfg, NOSTALL_OPT_WORLD_SIZE, (uint64_t)t->world) < 0 ||
        nostall_mpi_attach(&t->pc, cfg, MPI_COMM_WORLD, source, bytes) < 0) {
        tool_line(stderr, "nostall bench: rank %d: %s", t->rank, nostall_last_error());
        return 1;
    }
    return 0;
}

void tool_mpi_report(void *handle, FILE *f, int json)
{
    tool_mpi *t = handle;
    nostall_mpi_stats s;
    if (!t || !t->pc || nostall_mpi_stats_get(t->pc, &s, sizeof s) < 0) return;
    double lat_ms = s.remote_hits ? s.remote_ns * 1e-6 / (double)s.remote_hits : 0.0;
    if (json) {
        fprintf(f,
                ", \"partitioned_cache\": {\"rank\": %" PRIu64 ", \"world\": %" PRIu64
                ", \"items\": %" PRIu64 ", \"owned_items\": %" PRIu64 ", \"owned_bytes\": %" PRIu64
                ", \"unowned_items\": %" PRIu64 ", \"cache_items\": %" PRIu64
                ", \"cache_bytes\": %" PRIu64 ", \"local_hits\": %" PRIu64
                ", \"remote_hits\": %" PRIu64 ", \"remote_misses\": %" PRIu64
                ", \"storage_reads\": %" PRIu64 ", \"storage_bytes\": %" PRIu64
                ", \"net_bytes_in\": %" PRIu64 ", \"net_bytes_out\": %" PRIu64
                ", \"requests_served\": %" PRIu64 ", \"pushes_sent\": %" PRIu64
                ", \"pushes_received\": %" PRIu64 ", \"timeouts\": %" PRIu64
                ", \"skipped_down\": %" PRIu64 ", \"verify_failures\": %" PRIu64
                ", \"peers_down\": %" PRIu64 ", \"remote_ms_mean\": %.4f}",
                s.rank, s.world, s.items, s.owned_items, s.owned_bytes, s.unowned_items,
                s.cache_items, s.cache_bytes, s.local_hits, s.remote_hits, s.remote_misses,
                s.storage_reads, s.storage_bytes, s.net_bytes_in, s.net_bytes_out,
                s.requests_served, s.pushes_sent, s.pushes_received, s.timeouts,
                s.skipped_down, s.verify_failures, s.peers_down, lat_ms);
    } else {
        fprintf(f,
                "  partitioned cache (rank %" PRIu64 " of %" PRIu64 "): owns %" PRIu64
                " items (%.1f MB), holds %" PRIu64 "\n"
                "    hits        %" PRIu64 " local, %" PRIu64 " remote (%.3f ms mean), %" PRIu64
                " remote misses\n"
                "    storage     %" PRIu64 " reads, %.1f MB\n"
                "    network     %.1f MB in, %.1f MB out, %" PRIu64 " requests served, %" PRIu64
                " pushes sent\n"
                "    failures    %" PRIu64 " timeouts, %" PRIu64 " skipped (peer down), %" PRIu64
                " rejected replies, %" PRIu64 " peers down\n",
                s.rank, s.world, s.owned_items, s.owned_bytes / 1e6, s.cache_items, s.local_hits,
                s.remote_hits, lat_ms, s.remote_misses, s.storage_reads, s.storage_bytes / 1e6,
                s.net_bytes_in / 1e6, s.net_bytes_out / 1e6, s.requests_served, s.pushes_sent,
                s.timeouts, s.skipped_down, s.verify_failures, s.peers_down);
    }
}

void tool_mpi_end(void *handle, int status)
{
    tool_mpi *t = handle;
    if (!t) return;
    int gone = 0;
    if (t->pc) {
        if (nostall_mpi_detach(t->pc) != 0) {
            tool_line(stderr, "nostall bench: rank %d: %s", t->rank, nostall_last_error());
            gone = 1;
        }
    }
    int fin = 1;
    MPI_Finalized(&fin);
    if (t->we_initialized && !fin) {
        if (gone) { /* a peer is gone: MPI_Finalize could wait for it forever */
            fflush(stdout);
            fflush(stderr);
            free(t);
            _exit(status);
        }
        MPI_Finalize();
    }
    free(t);
}
