/*
 * bench.c — `nostall bench DATA [options]`: run the loader over a dataset for
 * a number of epochs, as fast as possible or with a simulated training step
 * (one that may change after a number of batches: --step-ms-after), and report throughput, the data stall, skipped items and a checksum of
 * every delivered byte.
 *
 * Every loader option is a flag of the same name (--batch-size for
 * batch_size), taken from the option table by the CLI's parser (args.h),
 * so nothing here repeats the library's defaults or bounds; bench's own
 * flags are the table below. Output: a readable summary (and a progress
 * line when stderr is a terminal), or one JSON object with --json. A first
 * SIGINT or SIGTERM ends the run at the next batch: the report covers what
 * was delivered, and the exit status is 128 + the signal's number.
 * gpu_output=device: batches come through the device ring
 * (nostall_loader_next_device); the checksum reads the images at their
 * device address, which only the test builds' fake backend makes host
 * memory (on a CUDA device: --no-checksum).
 */
#include <inttypes.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
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

/* The command's own flags; every loader option is one too (args.h). */
typedef struct bench_opts {
    double step_ms, step_ms_after; /* step_ms_after < 0: the step never changes */
    uint64_t step_change_batch;    /* batches at step_ms before step_ms_after (0: none) */
    int json, quiet, no_checksum;
    int device_out;     /* gpu_output=device: batches through the device ring */
    const char *pcache; /* --partitioned-cache BYTES */
    tool_list mix;      /* --mix, repeated: one SOURCE:WEIGHT list each */
} bench_opts;

static const tool_arg bench_args[] = {
    {"step-ms", TOOL_ARG_DOUBLE, offsetof(bench_opts, step_ms), 0, 3.6e6, NULL, "MS",
     "simulated training time per batch, in milliseconds; 0: as fast as possible", NULL, 0, NULL},
    {"step-ms-after", TOOL_ARG_DOUBLE, offsetof(bench_opts, step_ms_after), 0, 3.6e6, NULL, "MS",
     "with --step-change-batch N: the simulated step after the first N batches (a step that "
     "changes mid-run, e.g. halves; --json's \"step_change\" says when it did)",
     NULL, 0, "none: the step never changes"},
    {"step-change-batch", TOOL_ARG_U64, offsetof(bench_opts, step_change_batch), 1, 0, NULL, "N",
     "with --step-ms-after: the batches (counted over the whole run) that take --step-ms before "
     "the step becomes --step-ms-after",
     NULL, 0, ""},
    {"json", TOOL_ARG_FLAG, offsetof(bench_opts, json), 0, 0, NULL, NULL,
     "print one JSON object on stdout instead of the summary (strict UTF-8: a name that is "
     "not UTF-8 has U+FFFD in \"path\" and its exact bytes in hex in \"path_hex\"; the "
     "summary shows control characters and such bytes as \\xHH)",
     NULL, 0, NULL},
    {"quiet", TOOL_ARG_FLAG, offsetof(bench_opts, quiet), 0, 0, NULL, NULL, "no progress line",
     NULL, 0, NULL},
    {"no-checksum", TOOL_ARG_FLAG, offsetof(bench_opts, no_checksum), 0, 0, NULL, NULL,
     "skip hashing the delivered bytes (for timing against peers)", NULL, 0, NULL},
    {"mix", TOOL_ARG_LIST, offsetof(bench_opts, mix), 0, MIX_SOURCES_MAX, NULL, "DATA:WEIGHT",
     "read several sources as one, by weight: 'A:0.7,B:0.3', or one source per --mix (the "
     "loader's mix option; docs/mixing.md)",
     NULL, 0, NULL},
    {"partitioned-cache", TOOL_ARG_STRING, offsetof(bench_opts, pcache), 0, 0, NULL, "BYTES",
     "under mpirun/srun: a cache of BYTES (K/M/G/T or '25%') on this rank, partitioned across "
     "the ranks over MPI (libnostall_mpi; sets rank/world_size from MPI; use with --cache "
     "none)",
     NULL, 0, NULL},
};

static const tool_default bench_defaults[] = {{"epochs", "1"}}; /* bench runs one epoch */

static const tool_cmd bench_cmd = {
    .name = "bench",
    .prefix = "nostall bench",
    .usage = "usage: nostall bench DATA [options]\n"
             "       nostall bench --mix DATA:WEIGHT --mix DATA:WEIGHT ... [options]\n"
             "\n"
             "DATA is an ImageFolder directory or a file of `path<TAB>label` lines.\n"
             "--mix (repeated, or 'A:0.7,B:0.3') reads several sources as one, by weight\n"
             "(docs/mixing.md).\n"
             "Ctrl-C (or SIGTERM) ends the run at the next batch and reports what was\n"
             "delivered (exit status 128 + the signal; a coordinated job leaves its group);\n"
             "a second one ends it at once.\n",
    .positionals = "one DATA",
    .max_positionals = 1,
    .args = bench_args,
    .nargs = sizeof bench_args / sizeof bench_args[0],
    .loader = 1,
    .defaults = bench_defaults,
    .ndefaults = sizeof bench_defaults / sizeof bench_defaults[0],
};

/* The arguments into o and cfg, checked; *data: DATA, or "mix" (the mix's
 * name in messages). 0, or a tool_args_parse() status. */
static int bench_parse(int argc, char **argv, bench_opts *o, nostall_config *cfg, const char **data)
{
    memset(o, 0, sizeof *o);
    o->step_ms_after = -1;
    int n = tool_args_parse(&bench_cmd, argc, argv, o, cfg);
    if (n < 0) return n;
    if ((o->step_ms_after >= 0) != (o->step_change_batch > 0)) {
        fprintf(stderr, "nostall bench: --step-ms-after and --step-change-batch go together "
                        "(the step after the first N batches)\n");
        return TOOL_ARGS_ERROR;
    }
    if (o->mix.n) { /* the loader's mix option: one SOURCE:WEIGHT list per line */
        char mix[NOSTALL_PATH_MAX];
        size_t have = 0;
        for (int k = 0; k < o->mix.n; k++) {
            int w = snprintf(mix + have, sizeof mix - have, "%s%s", k ? "\n" : "", o->mix.v[k]);
            if (w < 0 || (size_t)w >= sizeof mix - have) {
                fprintf(stderr, "nostall bench: --mix: the sources take more than %zu bytes\n",
                        sizeof mix - 1);
                return TOOL_ARGS_ERROR;
            }
            have += (size_t)w;
        }
        if (nostall_config_set(cfg, "mix", mix) < 0) {
            tool_line(stderr, "nostall bench: %s", nostall_last_error());
            return TOOL_ARGS_ERROR;
        }
    }
    *data = n ? argv[1] : o->mix.n ? "mix" : NULL;
    if (!*data) {
        fprintf(stderr, "nostall bench: missing DATA (an ImageFolder directory or a file list)\n");
        return TOOL_ARGS_ERROR;
    }
    uint64_t epochs = 0;
    nostall_config_get_uint(cfg, NOSTALL_OPT_EPOCHS, &epochs);
    if (epochs == 0) {
        fprintf(stderr, "nostall bench: --epochs must be at least 1 for bench\n");
        return TOOL_ARGS_ERROR;
    }
#ifndef NOSTALL_HAVE_MPI
    if (o->pcache) {
        fprintf(stderr, "nostall bench: --partitioned-cache needs a build with MPI "
                        "(libopenmpi-dev found at configure time)\n");
        return TOOL_ARGS_ERROR;
    }
#endif
    return 0;
}

static void progress(uint64_t epoch, uint64_t epochs, uint64_t pos, uint64_t per_epoch,
                     double elapsed, uint64_t items, double stall, const nostall_stats *st)
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
    if (st->autotune) /* what autotune has in force now */
        fprintf(stderr, "autotune: %" PRIu64 "/%" PRIu64 " workers, %" PRIu64 " ahead, %s   ",
                st->active_workers, st->threads, st->tuned_batches_ahead,
                nostall_tune_reason_name((int)st->tune_reason));
    if (st->autotune && st->cache_budget_bytes)
        fprintf(stderr, "cache %.0f MB   ", st->tuned_cache_bytes / 1e6);
    if (st->autotune && st->tuned_echo_max)
        fprintf(stderr, "echo <= %" PRIu64 "   ", st->tuned_echo_max);
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

/* ---- the run ------------------------------------------------------------------ */

/* What a run delivered. */
typedef struct bench_run {
    const char *data; /* DATA, or "mix" */
    nostall_dataset_info info;
    nostall_stats st;                              /* at the end */
    uint64_t epochs, checksum, items, batches, ep; /* ep: the epochs ended */
    uint64_t mix_counts[MIX_SOURCES_MAX];          /* --mix: items delivered per source */
    epoch_rec *recs;                               /* [epochs]: each ended epoch */
    double setup_s, seconds, stall_s;
    double first_s;                     /* the first batch's arrival, from the loop's start */
    double change_s;                    /* --step-change-batch: when the step changed, or -1 */
    uint64_t steps_before, steps_after; /* batches that took --step-ms / --step-ms-after */
    int sig;                            /* the signal that ended the run, or 0 */
} bench_run;

/* The current epoch so far. */
typedef struct epoch_acc {
    uint64_t items, batches, sum, epoch;
    double t0, stall0;
    nostall_stats st0; /* the counters at its start */
} epoch_acc;

/* The epoch ended: its record, and the next one starts. */
static void epoch_close(nostall_loader *ld, bench_run *r, epoch_acc *e)
{
    double t = tool_now_s();
    nostall_stats st;
    nostall_loader_stats(ld, &st, sizeof st);
    double stall = st.consumer_wait_ns * 1e-9;
    if (r->ep < r->epochs) {
        r->recs[r->ep] = (epoch_rec){e->batches ? e->epoch : r->ep,
                                     e->items,
                                     e->batches,
                                     e->sum,
                                     t - e->t0,
                                     stall - e->stall0,
                                     st.storage_bytes_read - e->st0.storage_bytes_read,
                                     st.storage_reads - e->st0.storage_reads,
                                     st.cache_hits - e->st0.cache_hits,
                                     st.cache_misses - e->st0.cache_misses,
                                     st.cache_bytes};
    }
    e->st0 = st;
    e->stall0 = stall;
    e->t0 = t;
    e->items = e->batches = e->sum = 0;
    r->ep++;
}

/* gpu_output=device: the next batch through the device ring, its images'
 * device address put where the checksum reads them -- readable on the host
 * only with the test builds' fake backend (device -1); on a CUDA device the
 * checksum needs --no-checksum. */
static int next_device(nostall_loader *ld, const bench_opts *o, nostall_batch *b,
                       nostall_batch *view, nostall_field *fields)
{
    nostall_device_batch d;
    int rc = nostall_loader_next_device(ld, b, &d, UINT32_MAX);
    if (rc != 0) return rc;
    *view = *b;
    if (o->no_checksum) return 0;
    if (d.device >= 0) {
        nostall_loader_release(ld, b);
        tool_line(stderr,
                  "nostall bench: gpu_output=device: the images are on CUDA device "
                  "%d, which this tool does not read; pass --no-checksum",
                  (int)d.device);
        return NOSTALL_E_OPTION;
    }
    for (uint32_t f = 0; f < b->nfields && f < 16; f++) {
        fields[f] = b->fields[f];
        if (fields[f].data == b->images) fields[f].data = d.images;
    }
    view->images = d.images;
    view->fields = fields;
    return 0;
}

/* Every batch until the loader is done or a signal came: 0, or -1 after a
 * message. */
static int bench_loop(nostall_loader *ld, const bench_opts *o, bench_run *r)
{
    int show = !o->quiet && isatty(2);
    epoch_acc e = {0};
    nostall_stats st;
    double t0 = tool_now_s(), last_draw = 0;
    e.t0 = t0;
    r->change_s = -1;
    nostall_loader_stats(ld, &e.st0, sizeof e.st0);
    tool_catch_interrupts();
    for (;;) {
        nostall_batch b, view;
        nostall_field fields[16];
        if (tool_interrupted()) break;
        int rc = o->device_out ? next_device(ld, o, &b, &view, fields) : nostall_loader_next(ld, &b);
        if (rc == NOSTALL_E_OPTION && o->device_out) return -1; /* said why */
        if (!o->device_out) view = b;
        if (rc == NOSTALL_DONE) break;
        if (rc == NOSTALL_EPOCH_END) {
            epoch_close(ld, r, &e);
            continue;
        }
        if (rc < 0) {
            if (show) fputc('\n', stderr);
            tool_line(stderr, "nostall bench: %s", nostall_last_error());
            return -1;
        }
        if (!o->no_checksum) {
            nostall_checksum_batch(&r->checksum, &view);
            nostall_checksum_batch(&e.sum, &view);
        }
        e.epoch = b.epoch;
        if (o->mix.n) count_sources(&b, r->mix_counts);
        r->items += b.count;
        e.items += b.count;
        r->batches++;
        e.batches++;
        if (r->batches == 1) r->first_s = tool_now_s() - t0;
        double step = o->step_ms;
        if (o->step_change_batch && r->batches > o->step_change_batch) {
            if (r->change_s < 0) r->change_s = tool_now_s() - t0;
            step = o->step_ms_after;
            r->steps_after++;
        } else {
            r->steps_before++;
        }
        if (step > 0) tool_sleep_s(step / 1000.0);
        if (tool_interrupted()) break; /* the batch stays lent: freeing the loader returns it */
        uint64_t pos = b.position + b.count;
        if (nostall_loader_release(ld, &b) < 0) {
            tool_line(stderr, "nostall bench: %s", nostall_last_error());
            return -1;
        }
        double t = show ? tool_now_s() : 0;
        if (show && t - last_draw > 0.1) {
            nostall_loader_stats(ld, &st, sizeof st);
            progress(r->ep, r->epochs, pos, r->info.items_per_epoch, t - t0, r->items,
                     st.consumer_wait_ns * 1e-9, &st);
            last_draw = t;
        }
    }
    r->seconds = tool_now_s() - t0;
    r->sig = tool_interrupted();
    if (show) fputc('\n', stderr);
    nostall_loader_stats(ld, &r->st, sizeof r->st);
    r->stall_s = r->st.consumer_wait_ns * 1e-9;
    return 0;
}

/* ---- the reports ---------------------------------------------------------------- */

/* JSON: the dataset, the bad shards and the skipped items. */
static void json_dataset(FILE *f, nostall_loader *ld, const bench_run *r)
{
    const nostall_dataset_info *in = &r->info;
    fprintf(f,
            ", \"dataset\": {\"items\": %" PRIu64 ", \"classes\": %" PRIu64
            ", \"files_ignored\": %" PRIu64 ", \"items_per_epoch\": %" PRIu64
            ", \"batches_per_epoch\": %" PRIu64 ", \"items_truncated\": %" PRIu64
            ", \"parts_dropped\": %" PRIu64 ", \"parts_clipped\": %" PRIu64
            ", \"parts_unmatched\": %" PRIu64 ", \"items_missing\": %" PRIu64
            ", \"shards_bad\": %" PRIu64 "}",
            in->items, in->classes, in->files_ignored, in->items_per_epoch, in->batches_per_epoch,
            in->items_truncated, in->parts_dropped, in->parts_clipped, in->parts_unmatched,
            in->items_missing, in->shards_bad);
    fprintf(f, ", \"bad_shards\": [");
    for (uint64_t i = 0; i < in->shards_bad; i++) {
        const char *bp, *why;
        if (nostall_loader_bad_shard(ld, i, &bp, &why) < 0) break;
        fprintf(f, "%s{", i ? ", " : "");
        tool_json_member(f, "path", bp);
        fprintf(f, ", \"reason\": ");
        tool_json_string(f, why);
        fprintf(f, "}");
    }
    fprintf(f, "]");
    uint64_t nskip = nostall_loader_skipped_count(ld);
    fprintf(f, ", \"skipped_count\": %" PRIu64 ", \"skipped\": [", r->st.skipped);
    for (uint64_t i = 0; i < nskip; i++) {
        nostall_skip_info si;
        if (nostall_loader_skipped(ld, i, &si) < 0) break;
        fprintf(f, "%s{", i ? ", " : "");
        tool_json_member(f, "path", si.path);
        fprintf(f, ", \"status\": \"%s\", \"reason\": ", nostall_status_name(si.status));
        tool_json_string(f, si.reason);
        fprintf(f, "}");
    }
    fprintf(f, "]");
}

/* JSON: each epoch, echoing, the configuration and every counter. */
static void json_details(FILE *f, const nostall_config *cfg, const bench_run *r)
{
    const nostall_stats *st = &r->st;
    fprintf(f, ", \"per_epoch\": [");
    for (uint64_t e = 0; e < r->ep && e < r->epochs; e++) {
        const epoch_rec *x = &r->recs[e];
        fprintf(f,
                "%s{\"epoch\": %" PRIu64 ", \"items\": %" PRIu64 ", \"batches\": %" PRIu64
                ", \"seconds\": %.6f, \"items_per_second\": %.3f, \"stall_seconds\": %.6f"
                ", \"storage_bytes_read\": %" PRIu64 ", \"storage_reads\": %" PRIu64
                ", \"cache_hits\": %" PRIu64 ", \"cache_misses\": %" PRIu64
                ", \"cache_bytes\": %" PRIu64 ", \"checksum\": \"%016" PRIx64 "\"}",
                e ? ", " : "", x->epoch, x->items, x->batches, x->seconds,
                x->seconds > 0 ? x->items / x->seconds : 0.0, x->stall_seconds,
                x->storage_bytes_read, x->storage_reads, x->cache_hits, x->cache_misses,
                x->cache_bytes, x->checksum);
    }
    fprintf(f, "]");
    echo_summary es = echo_summarize(st, cfg);
    fprintf(f,
            ", \"echo\": {\"fresh_items\": %" PRIu64 ", \"echoed_items\": %" PRIu64
            ", \"achieved_factor\": %.6f, \"uses_histogram\": {\"1\": %" PRIu64 ", \"2\": %" PRIu64
            ", \"3\": %" PRIu64 ", \"4\": %" PRIu64 ", \"5-8\": %" PRIu64 ", \"9+\": %" PRIu64
            "}, \"duplicates_per_batch\": %.6f"
            ", \"mean_repeat_distance\": %.3f, \"estimated_R\": %.4f, \"warning\": ",
            st->fresh_items, st->echoed_items, es.factor, st->echo_uses_1, st->echo_uses_2,
            st->echo_uses_3, st->echo_uses_4, st->echo_uses_5_8, st->echo_uses_9_up,
            es.dups_per_batch, es.mean_distance, es.r_est);
    if (es.warn)
        fprintf(f, "\"echo_factor exceeds the estimated R: repeats beyond R only slow training\"}");
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
    const uint64_t *sv = (const uint64_t *)st;
    for (int i = 0; i < nostall_stats_count(); i++)
        fprintf(f, "%s\"%s\": %" PRIu64, i ? ", " : "", nostall_stats_name(i), sv[i]);
    fprintf(f, "}");
}

/* "autotune": what it chose and why (on: false without it). */
static void json_autotune(FILE *f, nostall_loader *ld, const bench_run *r)
{
    const nostall_stats *st = &r->st;
    char why[512];
    nostall_loader_tune_reason(ld, why, sizeof why);
    fprintf(f,
            ", \"autotune\": {\"on\": %s, \"active_workers\": %" PRIu64 ", \"threads\": %" PRIu64
            ", \"batches_ahead\": %" PRIu64 ", \"io_depth\": %" PRIu64 ", \"windows\": %" PRIu64
            ", \"decisions\": %" PRIu64 ", \"cpu_budget\": %.3f, \"cpu_returned\": %.3f"
            ", \"ring_bytes\": %" PRIu64 ", \"cache_bytes\": %" PRIu64
            ", \"cache_budget\": %" PRIu64 ", \"echo_max\": %" PRIu64 ", \"reason\": \"%s\", ",
            st->autotune ? "true" : "false", st->active_workers, st->threads,
            st->tuned_batches_ahead, st->tuned_io_depth, st->tune_windows, st->tune_decisions,
            st->cpu_budget_milli / 1000.0, st->cpu_returned_milli / 1000.0, st->ring_bytes_max,
            st->tuned_cache_bytes, st->cache_budget_bytes, st->tuned_echo_max,
            nostall_tune_reason_name((int)st->tune_reason));
    /* when it settled: its last change, in batches and in seconds from the
     * run's start (null: it never changed a setting) */
    if (st->tune_last_change_batch)
        fprintf(f, "\"last_change_batch\": %" PRIu64 ", \"last_change_s\": %.3f, ",
                st->tune_last_change_batch, r->first_s + st->tune_last_change_ms / 1000.0);
    else
        fprintf(f, "\"last_change_batch\": null, \"last_change_s\": null, ");
    tool_json_member(f, "why", why);
    fprintf(f, "}");
}

/* "step_change": --step-ms-after's batches and when the step changed. */
static void json_step_change(FILE *f, const bench_opts *o, const bench_run *r)
{
    if (!o->step_change_batch) {
        fprintf(f, ", \"step_change\": null");
        return;
    }
    fprintf(f,
            ", \"step_change\": {\"batch\": %" PRIu64 ", \"step_ms_after\": %g"
            ", \"batches_before\": %" PRIu64 ", \"batches_after\": %" PRIu64 ", \"seconds\": ",
            o->step_change_batch, o->step_ms_after, r->steps_before, r->steps_after);
    if (r->change_s >= 0)
        fprintf(f, "%.3f}", r->change_s);
    else
        fprintf(f, "null}");
}

/* --json: one object on stdout. */
static void report_json(nostall_loader *ld, const nostall_config *cfg, const bench_opts *o,
                        const bench_run *r, void *mpi)
{
    FILE *f = stdout;
    const nostall_stats *st = &r->st;
    double s = r->seconds;
    fprintf(f, "{");
    tool_json_member(f, "data", r->data);
    fprintf(f,
            ", \"items\": %" PRIu64 ", \"batches\": %" PRIu64 ", \"epochs\": %" PRIu64
            ", \"seconds\": %.6f, \"items_per_second\": %.3f, \"stall_seconds\": %.6f"
            ", \"stall_fraction\": %.6f, \"setup_seconds\": %.6f, \"step_ms\": %g",
            r->items, r->batches, r->ep, s, s > 0 ? r->items / s : 0.0, r->stall_s,
            s > 0 ? r->stall_s / s : 0.0, r->setup_s, o->step_ms);
    /* the worker count the loader resolved (threads=0: the CPU budget) */
    fprintf(f, ", \"threads\": %u", r->info.threads);
    fprintf(f, ", \"interrupted\": ");
    if (r->sig)
        fprintf(f, "\"%s\"", r->sig == SIGINT ? "SIGINT" : "SIGTERM");
    else
        fprintf(f, "null");
    if (o->mix.n) { /* items delivered per source, in --mix order */
        int last = MIX_SOURCES_MAX - 1;
        while (last > 0 && !r->mix_counts[last]) last--;
        fprintf(f, ", \"mix_items\": [");
        for (int k = 0; k <= last; k++) fprintf(f, "%s%" PRIu64, k ? ", " : "", r->mix_counts[k]);
        fprintf(f, "]");
    }
    if (o->no_checksum)
        fprintf(f, ", \"checksum\": null");
    else
        fprintf(f, ", \"checksum\": \"%016" PRIx64 "\"", r->checksum);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    fprintf(f, ", \"peak_rss_bytes\": %lld", (long long)ru.ru_maxrss * 1024);
    fprintf(f,
            ", \"storage_bytes_read\": %" PRIu64 ", \"cache_hits\": %" PRIu64
            ", \"cache_misses\": %" PRIu64 ", \"cache_bytes\": %" PRIu64,
            st->storage_bytes_read, st->cache_hits, st->cache_misses, st->cache_bytes);
    json_dataset(f, ld, r);
    json_details(f, cfg, r);
    json_autotune(f, ld, r);
    json_step_change(f, o, r);
#ifdef NOSTALL_HAVE_MPI
    tool_mpi_report(mpi, f, 1);
#else
    (void)mpi;
#endif
    fprintf(f, "}\n");
}

/* The summary: the dataset, what the recipe repaired, the loader, the mix. */
static void text_dataset(nostall_loader *ld, const nostall_config *cfg, const bench_opts *o,
                         const bench_run *r)
{
    const nostall_dataset_info *in = &r->info;
    tool_line(stdout, "nostall bench: %s", r->data);
    printf("  dataset     %" PRIu64 " items in %" PRIu64 " classes", in->items, in->classes);
    if (in->files_ignored)
        printf(" (%" PRIu64 " file%s ignored: not named .jpg, .jpeg or .png, hidden, or outside "
               "class folders)",
               in->files_ignored, in->files_ignored == 1 ? "" : "s");
    printf("; indexed in %.2f s\n", r->setup_s);
    if (in->shards_bad) { /* not read: each named with why */
        printf("  bad shards  %" PRIu64 " shard%s not read (their items are missing):\n",
               in->shards_bad, in->shards_bad == 1 ? "" : "s");
        for (uint64_t i = 0; i < in->shards_bad && i < 8; i++) {
            const char *bp, *why;
            if (nostall_loader_bad_shard(ld, i, &bp, &why) < 0) break;
            tool_line(stdout, "              %s: %s", bp, why);
        }
        if (in->shards_bad > 8)
            printf("              ... and %" PRIu64 " more\n", in->shards_bad - 8);
    }
    if (o->mix.n && r->items) { /* the share of each source, in --mix order */
        printf("  mix        ");
        for (int k = 0; k < MIX_SOURCES_MAX; k++)
            if (r->mix_counts[k])
                printf(" source %d: %.1f%%", k, 100.0 * (double)r->mix_counts[k] / (double)r->items);
        printf("\n");
    }
    print_repairs(in);
    uint64_t bs = 0;
    nostall_config_get_uint(cfg, NOSTALL_OPT_BATCH_SIZE, &bs);
    printf("  loader      %u threads, batch %" PRIu64 ", %u batches in the ring (%.1f MiB)\n",
           in->threads, bs, in->ring_slots, (double)in->ring_bytes / 1048576.0);
}

/* The summary: delivery, stall, where the workers' time went, cache and storage. */
static void text_run(const nostall_config *cfg, const bench_opts *o, const bench_run *r)
{
    const nostall_stats *st = &r->st;
    double s = r->seconds;
    printf("  delivered   %" PRIu64 " items in %" PRIu64 " batches over %" PRIu64
           " epoch(s) in %.2f s: %.1f items/s\n",
           r->items, r->batches, r->ep, s, s > 0 ? r->items / s : 0.0);
    if (r->sig)
        printf("  interrupted by %s: the figures are those of the run until then\n",
               r->sig == SIGINT ? "SIGINT" : "SIGTERM");
    for (uint64_t e = 0; e < r->ep && e < r->epochs; e++)
        printf("    epoch %-4" PRIu64 " %8" PRIu64 " items  %7.2f s  %8.1f items/s  stall %.2f s\n",
               e, r->recs[e].items, r->recs[e].seconds,
               r->recs[e].seconds > 0 ? r->recs[e].items / r->recs[e].seconds : 0.0,
               r->recs[e].stall_seconds);
    printf("  data stall  %.2f s waiting for batches (%.1f%% of the run)%s\n", r->stall_s,
           s > 0 ? 100.0 * r->stall_s / s : 0.0,
           o->step_ms > 0 || o->step_ms_after > 0
               ? ""
               : " [no --step-ms: the consumer does no work, so it always waits]");
    if (o->step_change_batch) {
        printf("  step        %g ms for %" PRIu64 " batches, then %g ms for %" PRIu64, o->step_ms,
               r->steps_before, o->step_ms_after, r->steps_after);
        if (r->change_s >= 0) printf(" (changed %.2f s into the run)", r->change_s);
        printf("\n");
    }
    double busy = (st->fetch_busy_ns + st->decode_busy_ns + st->augment_busy_ns) * 1e-9;
    if (busy > 0)
        printf("  worker time fetch %.0f%%  decode %.0f%%  augment %.0f%%  (%.1f items/s per busy core)\n",
               100 * st->fetch_busy_ns * 1e-9 / busy, 100 * st->decode_busy_ns * 1e-9 / busy,
               100 * st->augment_busy_ns * 1e-9 / busy, st->augment_items / busy);
    if (st->cache_hits + st->cache_misses)
        printf("  cache       %.1f MiB in %" PRIu64 " items; %" PRIu64 " hits, %" PRIu64 " misses\n",
               st->cache_bytes / 1048576.0, st->cache_items, st->cache_hits, st->cache_misses);
    if (st->cache_transcode_ns)
        printf("  transcode   %" PRIu64 " items cached with restart markers; %.2f s spent "
               "rewriting\n",
               st->cache_transcoded, st->cache_transcode_ns * 1e-9);
    printf("  storage     %.1f MiB read in %" PRIu64 " reads", st->storage_bytes_read / 1048576.0,
           st->storage_reads);
    if (st->storage_wait_ns) printf("; workers waited %.2f s for them", st->storage_wait_ns * 1e-9);
    uint64_t depth_opt = 0;
    nostall_config_get_uint(cfg, NOSTALL_OPT_IO_DEPTH, &depth_opt);
    if (depth_opt)
        printf("; %" PRIu64 " in flight per worker", st->io_depth_max);
    else
        printf("; %" PRIu64 " in flight per worker (io_depth auto: grows while they wait, "
               "up to %d)",
               st->io_depth_max, NOSTALL_IO_DEPTH_AUTO_MAX);
    printf("\n");
}

/* The summary: echoing, the skipped items, the checksum. */
static void text_end(nostall_loader *ld, const nostall_config *cfg, const bench_opts *o,
                     const bench_run *r, void *mpi)
{
    const nostall_stats *st = &r->st;
    echo_summary es = echo_summarize(st, cfg);
    if (es.echoing) {
        printf("  echo        %" PRIu64 " fresh + %" PRIu64 " repeats: %.3f uses per item; "
               "%.2f duplicates per batch; repeats %.1f items apart",
               st->fresh_items, st->echoed_items, es.factor, es.dups_per_batch, es.mean_distance);
        if (es.r_est > 0) printf("; estimated R %.2f", es.r_est);
        printf("\n");
        if (es.warn)
            fprintf(stderr,
                    "nostall bench: warning: echo_factor exceeds the estimated R (%.2f): "
                    "repeats beyond R only slow training\n",
                    es.r_est);
    }
    uint64_t nskip = nostall_loader_skipped_count(ld);
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
    if (r->st.autotune) {
        char why[512];
        nostall_loader_tune_reason(ld, why, sizeof why);
        tool_line(stdout, "  autotune    %s", why);
        if (r->st.tune_last_change_batch)
            printf("              last change after batch %" PRIu64 ", %.2f s into the run\n",
                   r->st.tune_last_change_batch, r->first_s + r->st.tune_last_change_ms / 1000.0);
    }
    if (!o->no_checksum) printf("  checksum    %016" PRIx64 "\n", r->checksum);
#ifdef NOSTALL_HAVE_MPI
    tool_mpi_report(mpi, stdout, 0);
#else
    (void)mpi;
#endif
}

/* ---- the command ------------------------------------------------------------------ */

int cmd_bench(int argc, char **argv)
{
    bench_opts o;
    bench_run r;
    nostall_config *cfg = NULL;
    nostall_loader *ld = NULL;
    void *mpi = NULL; /* --partitioned-cache's handle (tools/mpi) */
    int status = 1;

    memset(&r, 0, sizeof r);
    if (nostall_config_create(&cfg) < 0) {
        tool_line(stderr, "nostall bench: %s", nostall_last_error());
        return 1;
    }
    int prc = bench_parse(argc, argv, &o, cfg, &r.data);
    if (prc < 0) {
        nostall_config_free(cfg);
        return tool_args_status(prc);
    }
    nostall_config_get_uint(cfg, NOSTALL_OPT_EPOCHS, &r.epochs);
    uint64_t gpu_out = 0;
    nostall_config_get_uint(cfg, NOSTALL_OPT_GPU_OUTPUT, &gpu_out);
    o.device_out = gpu_out == NOSTALL_GPU_OUTPUT_DEVICE;
#ifdef NOSTALL_HAVE_MPI
    if (o.pcache && tool_mpi_attach(cfg, r.data, o.pcache, &mpi) != 0) goto out;
#endif
    double t_create = tool_now_s();
    if (nostall_loader_create(&ld, r.data, cfg) < 0) {
        tool_line(stderr, "nostall bench: %s", nostall_last_error());
        goto out;
    }
    r.setup_s = tool_now_s() - t_create;
    nostall_loader_info(ld, &r.info, sizeof r.info);
    r.recs = calloc(r.epochs, sizeof *r.recs);
    if (!r.recs) {
        fprintf(stderr, "nostall bench: out of memory\n");
        goto out;
    }
    if (bench_loop(ld, &o, &r) < 0) goto out;
    if (o.json) {
        report_json(ld, cfg, &o, &r, mpi);
    } else {
        text_dataset(ld, cfg, &o, &r);
        text_run(cfg, &o, &r);
        text_end(ld, cfg, &o, &r, mpi);
    }
    status = r.sig ? 128 + r.sig : 0;
out:
    free(r.recs);
    nostall_loader_free(ld);
    nostall_config_free(cfg);
#ifdef NOSTALL_HAVE_MPI
    tool_mpi_end(mpi, status); /* after the loader: detach (collective), MPI_Finalize */
#endif
    return status;
}
