/*
 * bench.c — `nostall bench DATA [options]`: run the loader over a dataset for
 * a number of epochs, as fast as possible or with a simulated training step,
 * and report throughput, the data stall, skipped items and a checksum of
 * every delivered byte.
 *
 * Every loader option is a flag of the same name (--batch-size for
 * batch_size), taken from the option table, so nothing here repeats the
 * library's defaults or bounds. Output: a readable summary (and a progress
 * line when stderr is a terminal), or one JSON object with --json. A first
 * SIGINT or SIGTERM ends the run at the next batch: the report covers what
 * was delivered, and the exit status is 128 + the signal's number.
 */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "util.h"
#include "nostall.h"
#ifdef NOSTALL_HAVE_MPI
#include "mpi/tool_mpi.h"
#endif

typedef struct epoch_rec {
    uint64_t epoch, items, batches, checksum;
    double seconds, stall_seconds;
    uint64_t storage_bytes_read, storage_reads, cache_hits, cache_misses, cache_bytes;
} epoch_rec;

/* --mix: count each item of a batch under its source (the "source" field). */
#define MIX_SOURCES_MAX 64
static void count_sources(const nostall_batch *b, uint64_t *counts)
{
    for (uint32_t f = 0; f < b->nfields; f++) {
        const nostall_field *fd = &b->fields[f];
        if (strcmp(fd->name, "source") != 0 || fd->dtype != NOSTALL_DTYPE_INT64) continue;
        for (uint32_t i = 0; i < b->count; i++) {
            int64_t s;
            memcpy(&s, fd->data + (size_t)i * sizeof s, sizeof s);
            if (s >= 0 && s < MIX_SOURCES_MAX) counts[s]++;
        }
    }
}

static void bench_usage(FILE *f)
{
    fprintf(f,
            "usage: nostall bench DATA [options]\n"
            "       nostall bench --mix DATA:WEIGHT --mix DATA:WEIGHT ... [options]\n"
            "\n"
            "DATA is an ImageFolder directory or a file of `path<TAB>label` lines.\n"
            "--mix (repeated, or 'A:0.7,B:0.3') reads several sources as one, by weight\n"
            "(docs/mixing.md).\n"
            "Ctrl-C (or SIGTERM) ends the run at the next batch and reports what was\n"
            "delivered (exit status 128 + the signal; a coordinated job leaves its group);\n"
            "a second one ends it at once.\n"
            "\n"
            "bench options:\n"
            "  --step-ms MS      simulated training time per batch (default 0: as fast as possible)\n"
            "  --json            print one JSON object on stdout instead of the summary (strict\n"
            "                    UTF-8: a name that is not UTF-8 has U+FFFD in \"path\" and its\n"
            "                    exact bytes in hex in \"path_hex\"; the summary shows control\n"
            "                    characters and such bytes as \\xHH)\n"
            "  --quiet           no progress line\n"
            "  --no-checksum     skip hashing the delivered bytes (for timing against peers)\n"
            "  --partitioned-cache BYTES  under mpirun/srun: a cache of BYTES (K/M/G/T or '25%%')\n"
            "                    on this rank, partitioned across the ranks over MPI (libnostall_mpi;\n"
            "                    sets rank/world_size from MPI; use with --cache none)\n"
            "  --help            this text\n"
            "\n"
            "loader options (--name VALUE or --name=VALUE; defaults and bounds):\n");
    int n = nostall_option_count();
    for (int i = 0; i < n; i++) {
        nostall_option_info info;
        char flag[64];
        nostall_option_info_get(i, &info);
        snprintf(flag, sizeof flag, "--%s", info.name);
        for (char *p = flag + 2; *p; p++)
            if (*p == '_') *p = '-';
        const char *def = info.default_value;
        /* bench runs one epoch unless told otherwise */
        if (!strcmp(info.name, "epochs")) def = "1";
        if (info.type == NOSTALL_TYPE_ENUM)
            fprintf(f, "  %-18s %s (one of %s; default %s)\n", flag, info.help, info.min, def);
        else if (info.type == NOSTALL_TYPE_BOOL)
            fprintf(f, "  %-18s %s (0|1; default %s)\n", flag, info.help, def);
        else if (info.type == NOSTALL_TYPE_STRING || info.type == NOSTALL_TYPE_PATH)
            fprintf(f, "  %-18s %s (%s; default '%s')\n", flag, info.help, info.type_name, def);
        else
            fprintf(f, "  %-18s %s (%s in [%s, %s]; default %s)\n", flag, info.help, info.type_name,
                    info.min, info.max, def);
    }
}

static void progress(uint64_t epoch, uint64_t epochs, uint64_t pos, uint64_t per_epoch,
                     double elapsed, uint64_t items, double stall)
{
    int width = 30, fill = per_epoch ? (int)(width * pos / per_epoch) : 0;
    char bar[64];
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
    bar[width] = '\0';
    fprintf(stderr,
            "\repoch %" PRIu64 "/%" PRIu64 " [%s] %" PRIu64 "/%" PRIu64
            "  %.0f items/s  stall %.0f%%   ",
            epoch + 1, epochs, bar, pos, per_epoch, elapsed > 0 ? items / elapsed : 0.0,
            elapsed > 0 ? 100.0 * stall / elapsed : 0.0);
    fflush(stderr);
}

/* Data echoing as seen in the stats: achieved factor, and R (upstream time
 * per fresh item over the consumer's step time per item) when the consumer
 * did work between batches. */
typedef struct echo_summary {
    double factor, dups_per_batch, mean_distance, r_est;
    int echoing, warn;
} echo_summary;

static echo_summary echo_summarize(const nostall_stats *st, const nostall_config *cfg)
{
    echo_summary e = {0};
    double want = 1;
    nostall_config_get_double(cfg, NOSTALL_OPT_ECHO_FACTOR, &want);
    uint64_t mode = 0;
    nostall_config_get_uint(cfg, NOSTALL_OPT_ECHO, &mode);
    e.echoing = st->echoed_items > 0 || want > 1 || mode == NOSTALL_ECHO_ADAPTIVE;
    e.factor = st->fresh_items ? (double)st->items_delivered / (double)st->fresh_items : 0;
    e.dups_per_batch = st->batches_delivered
                           ? (double)st->echo_batch_duplicates / (double)st->batches_delivered
                           : 0;
    e.mean_distance =
        st->echoed_items ? (double)st->echo_repeat_distance / (double)st->echoed_items : 0;
    if (st->consumer_busy_ns && st->fresh_items && st->items_delivered && st->threads) {
        double up = (double)st->upstream_busy_ns / st->threads / (double)st->fresh_items;
        double down = (double)st->consumer_busy_ns / (double)st->items_delivered;
        e.r_est = down > 0 ? up / down : 0;
    }
    e.warn = mode == 0 && want > 1 && e.r_est > 0 && want > e.r_est * 1.1;
    return e;
}

/* What the recipe repaired at create (nothing silently lost). */
static void print_repairs(const nostall_dataset_info *in)
{
    const struct {
        uint64_t n;
        const char *what;
    } r[] = {
        {in->items_missing, "item(s) left out: their file does not exist"},
        {in->parts_unmatched, "annotation(s) name no image of the dataset"},
        {in->parts_clipped, "box(es) reaching outside their image clipped to it"},
        {in->parts_dropped, "degenerate box(es) dropped"},
        {in->items_truncated, "item(s) with more boxes than max_boxes (truncated)"},
    };
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++)
        if (r[i].n) printf("  repaired    %" PRIu64 " %s\n", r[i].n, r[i].what);
}

int cmd_bench(int argc, char **argv)
{
    const char *data = NULL;
    double step_ms = 0;
    int json = 0, quiet = 0, no_checksum = 0, epochs_set = 0, rc, status = 1;
    nostall_config *cfg = NULL;
    nostall_loader *ld = NULL;
    const char *pcache = NULL;         /* --partitioned-cache BYTES */
    static char mix[NOSTALL_PATH_MAX]; /* --mix, repeated */
#ifdef NOSTALL_HAVE_MPI
    void *mpi = NULL;
#endif
    epoch_rec *recs = NULL;

    if (nostall_config_create(&cfg) < 0) {
        tool_line(stderr, "nostall bench: %s", nostall_last_error());
        return 1;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            bench_usage(stdout);
            nostall_config_free(cfg);
            return 0;
        }
        if (!strcmp(a, "--json")) {
            json = 1;
            continue;
        }
        if (!strcmp(a, "--quiet")) {
            quiet = 1;
            continue;
        }
        if (!strcmp(a, "--no-checksum")) {
            no_checksum = 1;
            continue;
        }
        if (strncmp(a, "--", 2) != 0) {
            if (data) {
                tool_line(stderr, "nostall bench: unexpected argument '%s' (DATA is '%s')", a, data);
                goto usage_error;
            }
            data = a;
            continue;
        }
        /* --name=value or --name value */
        char name[128];
        const char *value;
        tool_flag_name(a, name, sizeof name, &value);
        if (!strcmp(name, "partitioned_cache")) {
            if (!value) value = i + 1 < argc ? argv[++i] : NULL;
            if (!value) {
                fprintf(stderr,
                        "nostall bench: --partitioned-cache needs a size (e.g. 8G or 25%%)\n");
                goto usage_error;
            }
            pcache = value;
            continue;
        }
        if (!strcmp(name, "step_ms")) {
            if (!value) value = i + 1 < argc ? argv[++i] : NULL;
            char *end;
            step_ms = value ? strtod(value, &end) : -1;
            if (!value || *end || !(step_ms >= 0) || step_ms > 3.6e6) {
                fprintf(stderr,
                        "nostall bench: --step-ms needs a number of milliseconds in [0, 3600000]\n");
                goto usage_error;
            }
            continue;
        }
        if (!strcmp(name, "mix")) { /* repeated: one SOURCE:WEIGHT per line */
            if (!value) value = i + 1 < argc ? argv[++i] : NULL;
            size_t have = strlen(mix);
            if (!value || have + strlen(value) + 2 > sizeof mix) {
                fprintf(stderr, "nostall bench: --mix needs SOURCE:WEIGHT (at most %zu bytes)\n",
                        sizeof mix - 1);
                goto usage_error;
            }
            snprintf(mix + have, sizeof mix - have, "%s%s", have ? "\n" : "", value);
            if (nostall_config_set(cfg, "mix", mix) < 0) {
                tool_line(stderr, "nostall bench: %s", nostall_last_error());
                goto usage_error;
            }
            continue;
        }
        int id = tool_loader_option(cfg, "bench", name, value, argc, argv, &i);
        if (id == -1)
            tool_line(stderr, "nostall bench: unknown option '%s' (see nostall bench --help)", a);
        if (id < 0) goto usage_error;
        if (id == NOSTALL_OPT_EPOCHS) epochs_set = 1;
    }
    if (!data && mix[0]) data = "mix"; /* the mix's name in messages */
    if (!data) {
        fprintf(stderr, "nostall bench: missing DATA (an ImageFolder directory or a file list)\n");
        goto usage_error;
    }
    uint64_t epochs = 1;
    if (epochs_set) nostall_config_get_uint(cfg, NOSTALL_OPT_EPOCHS, &epochs);
    if (epochs == 0) {
        fprintf(stderr, "nostall bench: --epochs must be at least 1 for bench\n");
        goto usage_error;
    }
    nostall_config_set_uint(cfg, NOSTALL_OPT_EPOCHS, epochs);

    if (pcache) {
#ifdef NOSTALL_HAVE_MPI
        if (tool_mpi_attach(cfg, data, pcache, &mpi) != 0) goto out;
#else
        fprintf(stderr, "nostall bench: --partitioned-cache needs a build with MPI "
                        "(libopenmpi-dev found at configure time)\n");
        goto usage_error;
#endif
    }
    double t_create = tool_now_s();
    if (nostall_loader_create(&ld, data, cfg) < 0) {
        tool_line(stderr, "nostall bench: %s", nostall_last_error());
        goto out;
    }
    double setup_s = tool_now_s() - t_create;
    nostall_dataset_info info;
    nostall_loader_info(ld, &info, sizeof info);
    recs = calloc(epochs, sizeof *recs);
    if (!recs) {
        fprintf(stderr, "nostall bench: out of memory\n");
        goto out;
    }

    int show = !quiet && isatty(2);
    uint64_t checksum = 0, items = 0, batches = 0, ep = 0, ep_items = 0, ep_batches = 0;
    uint64_t ep_sum = 0, ep_epoch = 0;          /* this epoch's checksum and number */
    uint64_t mix_counts[MIX_SOURCES_MAX] = {0}; /* --mix: items delivered per source */
    nostall_stats st;
    double t0 = tool_now_s(), t_ep = t0, last_draw = 0, stall_ep0 = 0;
    nostall_stats st0; /* counters at the start of the current epoch */
    nostall_loader_stats(ld, &st0, sizeof st0);
    tool_catch_interrupts();
    for (;;) {
        nostall_batch b;
        if (tool_interrupted()) break;
        rc = nostall_loader_next(ld, &b);
        if (rc == NOSTALL_DONE) break;
        if (rc == NOSTALL_EPOCH_END) {
            double t = tool_now_s();
            nostall_loader_stats(ld, &st, sizeof st);
            double stall = st.consumer_wait_ns * 1e-9;
            if (ep < epochs) {
                recs[ep] = (epoch_rec){ep_batches ? ep_epoch : ep,
                                       ep_items,
                                       ep_batches,
                                       ep_sum,
                                       t - t_ep,
                                       stall - stall_ep0,
                                       st.storage_bytes_read - st0.storage_bytes_read,
                                       st.storage_reads - st0.storage_reads,
                                       st.cache_hits - st0.cache_hits,
                                       st.cache_misses - st0.cache_misses,
                                       st.cache_bytes};
            }
            st0 = st;
            stall_ep0 = stall;
            t_ep = t;
            ep++;
            ep_items = ep_batches = ep_sum = 0;
            continue;
        }
        if (rc < 0) {
            if (show) fputc('\n', stderr);
            tool_line(stderr, "nostall bench: %s", nostall_last_error());
            goto out;
        }
        if (!no_checksum) {
            nostall_checksum_batch(&checksum, &b);
            nostall_checksum_batch(&ep_sum, &b);
        }
        ep_epoch = b.epoch;
        if (mix[0]) count_sources(&b, mix_counts);
        items += b.count;
        ep_items += b.count;
        batches++;
        ep_batches++;
        if (step_ms > 0) tool_sleep_s(step_ms / 1000.0);
        if (tool_interrupted()) break; /* the batch stays lent: freeing the loader returns it */
        uint64_t pos = b.position + b.count;
        if (nostall_loader_release(ld, &b) < 0) {
            tool_line(stderr, "nostall bench: %s", nostall_last_error());
            goto out;
        }
        if (show) {
            double t = tool_now_s();
            if (t - last_draw > 0.1) {
                nostall_loader_stats(ld, &st, sizeof st);
                progress(ep, epochs, pos, info.items_per_epoch, t - t0, items,
                         st.consumer_wait_ns * 1e-9);
                last_draw = t;
            }
        }
    }
    double seconds = tool_now_s() - t0;
    int sig = tool_interrupted();
    if (show) fputc('\n', stderr);
    nostall_loader_stats(ld, &st, sizeof st);
    double stall_s = st.consumer_wait_ns * 1e-9;
    uint64_t nskip = nostall_loader_skipped_count(ld);

    if (json) {
        FILE *f = stdout;
        fprintf(f, "{");
        tool_json_member(f, "data", data);
        fprintf(f,
                ", \"items\": %" PRIu64 ", \"batches\": %" PRIu64 ", \"epochs\": %" PRIu64
                ", \"seconds\": %.6f, \"items_per_second\": %.3f, \"stall_seconds\": %.6f"
                ", \"stall_fraction\": %.6f, \"setup_seconds\": %.6f, \"step_ms\": %g",
                items, batches, ep, seconds, seconds > 0 ? items / seconds : 0.0, stall_s,
                seconds > 0 ? stall_s / seconds : 0.0, setup_s, step_ms);
        /* the worker count the loader resolved (threads=0: the CPU budget) */
        fprintf(f, ", \"threads\": %u", info.threads);
        fprintf(f, ", \"interrupted\": ");
        if (sig)
            fprintf(f, "\"%s\"", sig == SIGINT ? "SIGINT" : "SIGTERM");
        else
            fprintf(f, "null");
        if (mix[0]) { /* items delivered per source, in --mix order */
            int last = MIX_SOURCES_MAX - 1;
            while (last > 0 && !mix_counts[last]) last--;
            fprintf(f, ", \"mix_items\": [");
            for (int k = 0; k <= last; k++) fprintf(f, "%s%" PRIu64, k ? ", " : "", mix_counts[k]);
            fprintf(f, "]");
        }
        if (no_checksum)
            fprintf(f, ", \"checksum\": null");
        else
            fprintf(f, ", \"checksum\": \"%016" PRIx64 "\"", checksum);
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        fprintf(f, ", \"peak_rss_bytes\": %lld", (long long)ru.ru_maxrss * 1024);
        fprintf(f,
                ", \"storage_bytes_read\": %" PRIu64 ", \"cache_hits\": %" PRIu64
                ", \"cache_misses\": %" PRIu64 ", \"cache_bytes\": %" PRIu64,
                st.storage_bytes_read, st.cache_hits, st.cache_misses, st.cache_bytes);
        fprintf(f,
                ", \"dataset\": {\"items\": %" PRIu64 ", \"classes\": %" PRIu64
                ", \"files_ignored\": %" PRIu64 ", \"items_per_epoch\": %" PRIu64
                ", \"batches_per_epoch\": %" PRIu64 ", \"items_truncated\": %" PRIu64
                ", \"parts_dropped\": %" PRIu64 ", \"parts_clipped\": %" PRIu64
                ", \"parts_unmatched\": %" PRIu64 ", \"items_missing\": %" PRIu64
                ", \"shards_bad\": %" PRIu64 "}",
                info.items, info.classes, info.files_ignored, info.items_per_epoch,
                info.batches_per_epoch, info.items_truncated, info.parts_dropped,
                info.parts_clipped, info.parts_unmatched, info.items_missing, info.shards_bad);
        fprintf(f, ", \"bad_shards\": [");
        for (uint64_t i = 0; i < info.shards_bad; i++) {
            const char *bp, *why;
            if (nostall_loader_bad_shard(ld, i, &bp, &why) < 0) break;
            fprintf(f, "%s{", i ? ", " : "");
            tool_json_member(f, "path", bp);
            fprintf(f, ", \"reason\": ");
            tool_json_string(f, why);
            fprintf(f, "}");
        }
        fprintf(f, "]");
        fprintf(f, ", \"skipped_count\": %" PRIu64 ", \"skipped\": [", st.skipped);
        for (uint64_t i = 0; i < nskip; i++) {
            nostall_skip_info si;
            if (nostall_loader_skipped(ld, i, &si) < 0) break;
            fprintf(f, "%s{", i ? ", " : "");
            tool_json_member(f, "path", si.path);
            fprintf(f, ", \"status\": \"%s\", \"reason\": ", nostall_status_name(si.status));
            tool_json_string(f, si.reason);
            fprintf(f, "}");
        }
        fprintf(f, "], \"per_epoch\": [");
        for (uint64_t e = 0; e < ep && e < epochs; e++)
            fprintf(f,
                    "%s{\"epoch\": %" PRIu64 ", \"items\": %" PRIu64 ", \"batches\": %" PRIu64
                    ", \"seconds\": %.6f, \"items_per_second\": %.3f, \"stall_seconds\": %.6f"
                    ", \"storage_bytes_read\": %" PRIu64 ", \"storage_reads\": %" PRIu64
                    ", \"cache_hits\": %" PRIu64 ", \"cache_misses\": %" PRIu64
                    ", \"cache_bytes\": %" PRIu64 ", \"checksum\": \"%016" PRIx64 "\"}",
                    e ? ", " : "", recs[e].epoch, recs[e].items, recs[e].batches, recs[e].seconds,
                    recs[e].seconds > 0 ? recs[e].items / recs[e].seconds : 0.0,
                    recs[e].stall_seconds, recs[e].storage_bytes_read, recs[e].storage_reads,
                    recs[e].cache_hits, recs[e].cache_misses, recs[e].cache_bytes, recs[e].checksum);
        fprintf(f, "]");
        echo_summary es = echo_summarize(&st, cfg);
        fprintf(f,
                ", \"echo\": {\"fresh_items\": %" PRIu64 ", \"echoed_items\": %" PRIu64
                ", \"achieved_factor\": %.6f, \"uses_histogram\": {\"1\": %" PRIu64
                ", \"2\": %" PRIu64 ", \"3\": %" PRIu64 ", \"4\": %" PRIu64 ", \"5-8\": %" PRIu64
                ", \"9+\": %" PRIu64 "}, \"duplicates_per_batch\": %.6f"
                ", \"mean_repeat_distance\": %.3f, \"estimated_R\": %.4f, \"warning\": ",
                st.fresh_items, st.echoed_items, es.factor, st.echo_uses_1, st.echo_uses_2,
                st.echo_uses_3, st.echo_uses_4, st.echo_uses_5_8, st.echo_uses_9_up,
                es.dups_per_batch, es.mean_distance, es.r_est);
        if (es.warn)
            fprintf(f,
                    "\"echo_factor exceeds the estimated R: repeats beyond R only slow training\"}");
        else
            fprintf(f, "null}");
        fprintf(f, ", \"config\": {");
        for (int i = 0; i < nostall_option_count(); i++) {
            nostall_option_info oi;
            char val[NOSTALL_PATH_MAX]; /* a path option's longest text */
            nostall_option_info_get(i, &oi);
            nostall_config_get(cfg, oi.name, val, sizeof val);
            fprintf(f, "%s\"%s\": ", i ? ", " : "", oi.name);
            tool_json_string(f, val);
        }
        fprintf(f, "}, \"stats\": {");
        const uint64_t *sv = (const uint64_t *)&st;
        for (int i = 0; i < nostall_stats_count(); i++)
            fprintf(f, "%s\"%s\": %" PRIu64, i ? ", " : "", nostall_stats_name(i), sv[i]);
        fprintf(f, "}");
#ifdef NOSTALL_HAVE_MPI
        tool_mpi_report(mpi, f, 1);
#endif
        fprintf(f, "}\n");
    } else {
        tool_line(stdout, "nostall bench: %s", data);
        printf("  dataset     %" PRIu64 " items in %" PRIu64 " classes", info.items, info.classes);
        if (info.files_ignored)
            printf(" (%" PRIu64 " file%s ignored: not named .jpg, .jpeg or .png, hidden, or outside "
                   "class folders)",
                   info.files_ignored, info.files_ignored == 1 ? "" : "s");
        printf("; indexed in %.2f s\n", setup_s);
        if (info.shards_bad) { /* not read: each named with why */
            printf("  bad shards  %" PRIu64 " shard%s not read (their items are missing):\n",
                   info.shards_bad, info.shards_bad == 1 ? "" : "s");
            for (uint64_t i = 0; i < info.shards_bad && i < 8; i++) {
                const char *bp, *why;
                if (nostall_loader_bad_shard(ld, i, &bp, &why) < 0) break;
                tool_line(stdout, "              %s: %s", bp, why);
            }
            if (info.shards_bad > 8)
                printf("              ... and %" PRIu64 " more\n", info.shards_bad - 8);
        }
        if (mix[0] && items) { /* the share of each source, in --mix order */
            printf("  mix        ");
            for (int k = 0; k < MIX_SOURCES_MAX; k++)
                if (mix_counts[k])
                    printf(" source %d: %.1f%%", k, 100.0 * (double)mix_counts[k] / (double)items);
            printf("\n");
        }
        print_repairs(&info);
        uint64_t bs = 0;
        nostall_config_get_uint(cfg, NOSTALL_OPT_BATCH_SIZE, &bs);
        printf("  loader      %u threads, batch %" PRIu64 ", %u batches in the ring (%.1f MiB)\n",
               info.threads, bs, info.ring_slots, (double)info.ring_bytes / 1048576.0);
        printf("  delivered   %" PRIu64 " items in %" PRIu64 " batches over %" PRIu64
               " epoch(s) in %.2f s: %.1f items/s\n",
               items, batches, ep, seconds, seconds > 0 ? items / seconds : 0.0);
        if (sig)
            printf("  interrupted by %s: the figures are those of the run until then\n",
                   sig == SIGINT ? "SIGINT" : "SIGTERM");
        for (uint64_t e = 0; e < ep && e < epochs; e++)
            printf("    epoch %-4" PRIu64 " %8" PRIu64
                   " items  %7.2f s  %8.1f items/s  stall %.2f s\n",
                   e, recs[e].items, recs[e].seconds,
                   recs[e].seconds > 0 ? recs[e].items / recs[e].seconds : 0.0,
                   recs[e].stall_seconds);
        printf("  data stall  %.2f s waiting for batches (%.1f%% of the run)%s\n", stall_s,
               seconds > 0 ? 100.0 * stall_s / seconds : 0.0,
               step_ms > 0 ? "" : " [no --step-ms: the consumer does no work, so it always waits]");
        double busy = (st.fetch_busy_ns + st.decode_busy_ns + st.augment_busy_ns) * 1e-9;
        if (busy > 0)
            printf("  worker time fetch %.0f%%  decode %.0f%%  augment %.0f%%  (%.1f items/s per busy core)\n",
                   100 * st.fetch_busy_ns * 1e-9 / busy, 100 * st.decode_busy_ns * 1e-9 / busy,
                   100 * st.augment_busy_ns * 1e-9 / busy, st.augment_items / busy);
        if (st.cache_hits + st.cache_misses)
            printf("  cache       %.1f MiB in %" PRIu64 " items; %" PRIu64 " hits, %" PRIu64
                   " misses\n",
                   st.cache_bytes / 1048576.0, st.cache_items, st.cache_hits, st.cache_misses);
        if (st.cache_transcode_ns)
            printf("  transcode   %" PRIu64 " items cached with restart markers; %.2f s spent "
                   "rewriting\n",
                   st.cache_transcoded, st.cache_transcode_ns * 1e-9);
        printf("  storage     %.1f MiB read in %" PRIu64 " reads",
               st.storage_bytes_read / 1048576.0, st.storage_reads);
        if (st.storage_wait_ns)
            printf("; workers waited %.2f s for them", st.storage_wait_ns * 1e-9);
        {
            uint64_t depth_opt = 0;
            nostall_config_get_uint(cfg, NOSTALL_OPT_IO_DEPTH, &depth_opt);
            if (depth_opt)
                printf("; %" PRIu64 " in flight per worker", st.io_depth_max);
            else
                printf("; %" PRIu64 " in flight per worker (io_depth auto: grows while they wait, "
                       "up to %d)",
                       st.io_depth_max, NOSTALL_IO_DEPTH_AUTO_MAX);
        }
        printf("\n");
        echo_summary es = echo_summarize(&st, cfg);
        if (es.echoing) {
            printf("  echo        %" PRIu64 " fresh + %" PRIu64 " repeats: %.3f uses per item; "
                   "%.2f duplicates per batch; repeats %.1f items apart",
                   st.fresh_items, st.echoed_items, es.factor, es.dups_per_batch, es.mean_distance);
            if (es.r_est > 0) printf("; estimated R %.2f", es.r_est);
            printf("\n");
            if (es.warn)
                fprintf(stderr,
                        "nostall bench: warning: echo_factor exceeds the estimated R (%.2f): "
                        "repeats beyond R only slow training\n",
                        es.r_est);
        }
        printf("  skipped     %" PRIu64 " bad item(s)", nskip);
        if (nskip) printf(":");
        printf("\n");
        for (uint64_t i = 0; i < nskip && i < 20; i++) {
            nostall_skip_info si;
            if (nostall_loader_skipped(ld, i, &si) < 0) break;
            /* the reason names the path already */
            tool_line(stdout, "    %-18s %s", nostall_status_name(si.status), si.reason);
        }
        if (nskip > 20) printf("    ... and %" PRIu64 " more (see --json)\n", nskip - 20);
        if (!no_checksum) printf("  checksum    %016" PRIx64 "\n", checksum);
#ifdef NOSTALL_HAVE_MPI
        tool_mpi_report(mpi, stdout, 0);
#endif
    }
    status = sig ? 128 + sig : 0;
out:
    free(recs);
    nostall_loader_free(ld);
    nostall_config_free(cfg);
#ifdef NOSTALL_HAVE_MPI
    tool_mpi_end(mpi, status); /* after the loader: detach (collective), MPI_Finalize */
#endif
    return status;
usage_error:
    nostall_config_free(cfg);
    return 2;
}
