/*
 * mpi_loader_check.c — acceptance driver of libnostall_mpi. Under mpirun,
 * each rank initialises MPI (MPI_THREAD_MULTIPLE), optionally attaches the
 * partitioned cache, runs a loader sharded by (rank, world) for N epochs and
 * writes one JSON line per epoch to OUT/rank_R.jsonl:
 *   {"rank","world","epoch","seconds","items","storage_reads","peer_hits",
 *    "checksum","local_hits","remote_hits","remote_misses","timeouts",
 *    "skipped_down","verify_failures","net_bytes_in","remote_ns","indices":[..]}
 * then a final {"rank","done":1,...} line. tests/mpi/run.sh checks them.
 *
 * usage: mpi_loader_check DATA OUT_DIR [--cache-bytes B] [--epochs N]
 *        [--timeout-ms T] [--detach-timeout-ms T] [--kill-rank R]
 *        [--kill-epoch E] [--kill-after-batches K] [--no-indices] [--sync]
 *        [--step-ms MS]
 *        [loader options as name=value ...]
 * --cache-bytes 0 (default): no partitioned cache (the reference run).
 * --sync: an allreduce after every batch, as a data-parallel training step
 * does (ranks stay within the loader's prefetch of each other).
 * --step-ms: sleep this long per batch (a simulated training step).
 */
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nostall_mpi.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    int provided, rank, world;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (argc < 3) {
        if (rank == 0) fprintf(stderr, "usage: mpi_loader_check DATA OUT_DIR [options]\n");
        MPI_Finalize();
        return 2;
    }
    const char *data = argv[1], *outdir = argv[2];
    uint64_t cache_bytes = 0, epochs = 3;
    int kill_rank = -1, kill_epoch = 1, kill_after = 2, indices = 1, sync = 0;
    double step_ms = 0;
    nostall_mpi_options mo;
    memset(&mo, 0, sizeof mo);
    nostall_config *cfg;
    nostall_config_create(&cfg);
    /* test defaults: small output, a few threads */
    nostall_config_set(cfg, "crop", "32");
    nostall_config_set(cfg, "output", "uint8");
    nostall_config_set(cfg, "batch_size", "16");
    nostall_config_set(cfg, "threads", "2");
    nostall_config_set(cfg, "seed", "7");
    nostall_config_set(cfg, "cache", "none");
    for (int i = 3; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : "0";
        if (!strcmp(a, "--cache-bytes")) cache_bytes = strtoull(v, NULL, 10), i++;
        else if (!strcmp(a, "--epochs")) epochs = strtoull(v, NULL, 10), i++;
        else if (!strcmp(a, "--timeout-ms")) mo.timeout_ms = (uint32_t)atoi(v), i++;
        else if (!strcmp(a, "--detach-timeout-ms")) mo.detach_timeout_ms = (uint32_t)atoi(v), i++;
        else if (!strcmp(a, "--kill-rank")) kill_rank = atoi(v), i++;
        else if (!strcmp(a, "--kill-epoch")) kill_epoch = atoi(v), i++;
        else if (!strcmp(a, "--kill-after-batches")) kill_after = atoi(v), i++;
        else if (!strcmp(a, "--no-indices")) indices = 0;
        else if (!strcmp(a, "--sync")) sync = 1;
        else if (!strcmp(a, "--step-ms")) step_ms = atof(v), i++;
        else {
            char name[128];
            const char *eq = strchr(a, '=');
            if (!eq || (size_t)(eq - a) >= sizeof name) {
                fprintf(stderr, "rank %d: bad argument '%s'\n", rank, a);
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
            memcpy(name, a, (size_t)(eq - a));
            name[eq - a] = 0;
            if (nostall_config_set(cfg, name, eq + 1) < 0) {
                fprintf(stderr, "rank %d: %s\n", rank, nostall_last_error());
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
        }
    }
    nostall_config_set_uint(cfg, NOSTALL_OPT_RANK, (uint64_t)rank);
    nostall_config_set_uint(cfg, NOSTALL_OPT_WORLD_SIZE, (uint64_t)world);
    nostall_config_set_uint(cfg, NOSTALL_OPT_EPOCHS, epochs);

    nostall_mpi *pc = NULL;
    if (cache_bytes && nostall_mpi_attach_opts(&pc, cfg, MPI_COMM_WORLD, data, cache_bytes, &mo, sizeof mo) < 0) {
        fprintf(stderr, "rank %d: %s\n", rank, nostall_last_error());
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    nostall_loader *ld;
    if (nostall_loader_create(&ld, data, cfg) < 0) {
        fprintf(stderr, "rank %d: %s\n", rank, nostall_last_error());
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    nostall_config_free(cfg);
    char path[4096];
    snprintf(path, sizeof path, "%s/rank_%d.jsonl", outdir, rank);
    FILE *out = fopen(path, "w");
    if (!out) {
        perror(path);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    nostall_dataset_info info;
    nostall_loader_info(ld, &info, sizeof info);
    size_t cap = info.items_per_epoch + 16, nidx = 0;
    uint64_t *idx = malloc(cap * sizeof *idx);

    nostall_stats s0, s1;
    nostall_mpi_stats m0, m1;
    memset(&m0, 0, sizeof m0);
    memset(&m1, 0, sizeof m1);
    nostall_loader_stats(ld, &s0, sizeof s0);
    if (pc) nostall_mpi_stats_get(pc, &m0, sizeof m0);
    uint64_t csum = 0, epoch = 0, items = 0, batches = 0;
    double t0 = now_s();
    int rc, failed = 0;
    double next_s = 0, sync_s = 0; /* this epoch: waiting in next / in the step sync */
    for (;;) {
        nostall_batch b;
        double tn = now_s();
        rc = nostall_loader_next(ld, &b);
        next_s += now_s() - tn;
        if (rc == NOSTALL_DONE) break;
        if (rc < 0) {
            fprintf(stderr, "rank %d: %s\n", rank, nostall_last_error());
            failed = 1;
            break;
        }
        if (rc == NOSTALL_EPOCH_END) {
            double t1 = now_s();
            nostall_loader_stats(ld, &s1, sizeof s1);
            if (pc) nostall_mpi_stats_get(pc, &m1, sizeof m1);
            fprintf(out,
                    "{\"rank\":%d,\"world\":%d,\"epoch\":%" PRIu64 ",\"seconds\":%.6f,"
                    "\"items\":%" PRIu64 ",\"storage_reads\":%" PRIu64 ",\"peer_hits\":%" PRIu64
                    ",\"checksum\":\"%016" PRIx64 "\",\"local_hits\":%" PRIu64
                    ",\"remote_hits\":%" PRIu64 ",\"remote_misses\":%" PRIu64
                    ",\"timeouts\":%" PRIu64 ",\"skipped_down\":%" PRIu64
                    ",\"verify_failures\":%" PRIu64 ",\"net_bytes_in\":%" PRIu64
                    ",\"remote_ns\":%" PRIu64 ",\"parked\":%" PRIu64
                    ",\"next_s\":%.6f,\"sync_s\":%.6f,\"indices\":[",
                    rank, world, epoch, t1 - t0, items, s1.storage_reads - s0.storage_reads,
                    s1.peer_hits - s0.peer_hits, csum, m1.local_hits - m0.local_hits,
                    m1.remote_hits - m0.remote_hits, m1.remote_misses - m0.remote_misses,
                    m1.timeouts - m0.timeouts, m1.skipped_down - m0.skipped_down,
                    m1.verify_failures - m0.verify_failures, m1.net_bytes_in - m0.net_bytes_in,
                    m1.remote_ns - m0.remote_ns, m1.parked - m0.parked, next_s, sync_s);
            for (size_t i = 0; indices && i < nidx; i++)
                fprintf(out, "%s%" PRIu64, i ? "," : "", idx[i]);
            fprintf(out, "]}\n");
            fflush(out);
            s0 = s1;
            m0 = m1;
            csum = 0;
            items = 0;
            nidx = 0;
            batches = 0;
            next_s = sync_s = 0;
            epoch++;
            t0 = now_s();
            continue;
        }
        nostall_checksum_batch(&csum, &b);
        for (uint32_t i = 0; i < b.count; i++) {
            if (nidx == cap) idx = realloc(idx, (cap *= 2) * sizeof *idx);
            idx[nidx++] = b.indices[i];
        }
        items += b.count;
        nostall_loader_release(ld, &b);
        batches++;
        if (step_ms > 0) {
            struct timespec ts = {(time_t)(step_ms / 1000), (long)(fmod(step_ms, 1000) * 1e6)};
            nanosleep(&ts, NULL);
        }
        if (sync) { /* a synchronous training step: ranks stay in step, as
                       with a gradient allreduce */
            /* Polled with sleeps, not MPI_Allreduce: a blocking collective
             * busy-waits, and 3 spinning ranks on 2 shared cores starve the
             * 4th rank's loader (a GPU job waits in NCCL, not on the CPU). */
            int one = 1, sum = 0, flag = 0;
            double ts = now_s();
            MPI_Request rq;
            MPI_Iallreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &rq);
            for (;;) {
                MPI_Test(&rq, &flag, MPI_STATUS_IGNORE);
                if (flag) break;
                struct timespec ts2 = {0, 100000};
                nanosleep(&ts2, NULL);
            }
            sync_s += now_s() - ts;
        }
        if (rank == kill_rank && (int)epoch == kill_epoch && (int)batches == kill_after) {
            fprintf(stderr, "rank %d: killing myself (SIGKILL) in epoch %" PRIu64 "\n", rank, epoch);
            fclose(out);
            raise(SIGKILL);
        }
    }
    nostall_loader_free(ld);
    int drc = 0;
    nostall_mpi_stats ms;
    memset(&ms, 0, sizeof ms);
    if (pc) {
        nostall_mpi_stats_get(pc, &ms, sizeof ms);
        drc = nostall_mpi_detach(pc);
        if (drc != 0) fprintf(stderr, "rank %d: %s\n", rank, nostall_last_error());
    }
    fprintf(out,
            "{\"rank\":%d,\"done\":%d,\"epochs\":%" PRIu64 ",\"detach\":%d,\"owned_items\":%" PRIu64
            ",\"cache_items\":%" PRIu64 ",\"unowned_items\":%" PRIu64 ",\"pushes_sent\":%" PRIu64
            ",\"pushes_received\":%" PRIu64 ",\"requests_served\":%" PRIu64
            ",\"timeouts\":%" PRIu64 ",\"peers_down\":%" PRIu64 ",\"net_bytes_out\":%" PRIu64 "}\n",
            rank, !failed, epoch, drc, ms.owned_items, ms.cache_items, ms.unowned_items,
            ms.pushes_sent, ms.pushes_received, ms.requests_served, ms.timeouts, ms.peers_down,
            ms.net_bytes_out);
    fclose(out);
    free(idx);
    if (drc != 0) {
        /* Some rank never reached detach (gone): MPI_Finalize could block. */
        fflush(stderr);
        _exit(failed ? 1 : 0);
    }
    MPI_Finalize();
    return failed ? 1 : 0;
}
