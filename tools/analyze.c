/*
 * analyze.c — `nostall analyze DATA [loader options] (--step-ms MS | --step-rate N)`:
 * where does the data stall of this job come from, and what would remove it?
 *
 * Runs the job three ways, as DS-Analyzer does, but without root:
 *   synthetic  the training step alone (the accelerator's own rate),
 *   cached     the loader with every file in the OS page cache and no storage
 *              delay (adds preprocessing: prep stall = its wait in next),
 *   cold       the loader as configured after dropping the dataset's files
 *              from the page cache with posix_fadvise(DONTNEED) (adds
 *              fetching: fetch stall = its wait - the cached run's).
 * The step here is simulated (a sleep per batch); Python's nostall.analyze()
 * runs the same three with the user's step. Everything else is the
 * library's (nostall_analyze.h): nostall_analyze_measure() measures what
 * needs no step (dataset, machine, storage, memory, the prep rate, the
 * restart-marker what-if), the model makes the predictions and
 * recommendations, and the reports are written by it too. This file
 * describes its flags (a table for the CLI's parser, args.h), runs the
 * three runs and prints.
 *
 * `--measurements FILE` skips the runs and models measurements taken
 * elsewhere; `--runs FILE` takes the three runs from FILE and measures the
 * rest here; `--predict k=v,...` predicts further configurations.
 *
 * Threads: the main thread only (the loaders have their own).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "nostall.h"
#include "nostall_analyze.h"
#include "args.h"
#include "util.h"

/* The command's own flags; every loader option is one too (args.h). */
typedef struct an_opts {
    const char *report, *meas_file, *runs_file;
    tool_list predict;
    double step_ms, step_rate; /* -1: not given */
    uint64_t max_batches;      /* 0: one epoch  */
    int json, quiet;
} an_opts;

static const tool_arg an_args[] = {
    {"step-ms", TOOL_ARG_DOUBLE, offsetof(an_opts, step_ms), 0, 3.6e6, NULL, "MS",
     "simulated training step per batch, in milliseconds", NULL, 0, ""},
    {"step-rate", TOOL_ARG_DOUBLE, offsetof(an_opts, step_rate), 0, INFINITY, NULL, "N",
     "... or the accelerator's rate in items/s (step = batch / N)", NULL, TOOL_ARG_OPEN_LO, ""},
    {"max-batches", TOOL_ARG_U64, offsetof(an_opts, max_batches), 1, 0, NULL, "N",
     "cap each measured run at N batches", NULL, 0, "one epoch"},
    {"json", TOOL_ARG_FLAG, offsetof(an_opts, json), 0, 0, NULL, NULL,
     "one JSON object on stdout instead of the report", NULL, 0, NULL},
    {"report", TOOL_ARG_STRING, offsetof(an_opts, report), 0, 0, NULL, "FILE.html",
     "also write a self-contained HTML report with SVG charts", NULL, 0, NULL},
    {"measurements", TOOL_ARG_STRING, offsetof(an_opts, meas_file), 0, 0, NULL, "FILE",
     "do not run anything: model these measurements (a JSON object of numbers, or an earlier "
     "--json output); DATA not needed",
     NULL, 0, NULL},
    {"runs", TOOL_ARG_STRING, offsetof(an_opts, runs_file), 0, 0, NULL, "FILE",
     "take the synthetic, cached and cold runs from FILE (measured with a real step, e.g. by "
     "Python's nostall.analyze) and measure only the dataset, storage, memory, CPU share and "
     "prep rate (loader without a step) here",
     NULL, 0, NULL},
    {"predict", TOOL_ARG_LIST, offsetof(an_opts, predict), 0, 32, NULL, "K=V[,K=V]",
     "also predict this configuration; keys: threads, io_depth, cores, cache_fraction, "
     "cache_bytes, storage_mbps, storage_latency_ms, step_ms, echo_factor, echo_point, cold, "
     "transcode (1: CPU per item of a restart-marker copy, measured on a sample), "
     "cache_transcode (1: the same for the items the MinIO cache holds, after its fill "
     "epoch), nodes, net_mbps, net_latency_ms, prep_servers (K servers; with their rate "
     "measured, or server_rate=ITEMS_PER_S and recv_cpu_ms=MS given first), prep_net_mbps",
     NULL, 0, NULL},
    {"quiet", TOOL_ARG_FLAG, offsetof(an_opts, quiet), 0, 0, NULL, NULL, "no progress line", NULL,
     0, NULL},
};

static const tool_cmd an_cmd = {
    .name = "analyze",
    .prefix = "nostall analyze",
    .usage = "usage: nostall analyze DATA [loader options] (--step-ms MS | --step-rate N) "
             "[options]\n"
             "\n"
             "Measures where the data stall of a training job comes from (the step alone, with\n"
             "every file cached, and cold), measures storage, CPU and memory, and predicts the\n"
             "epoch time for other cache sizes, core counts, storage speeds and echo factors.\n",
    .positionals = "one DATA",
    .max_positionals = 1,
    .args = an_args,
    .nargs = sizeof an_args / sizeof an_args[0],
    .loader = 1,
};

/* ---- small helpers ----------------------------------------------------- */

static double cpu_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- the measured runs ---------------------------------------------------- */

typedef struct run_out {
    double seconds, cpu_s, stall_s;
    uint64_t items, batches;
    nostall_stats st;
} run_out;

static void draw(const char *label, uint64_t done, uint64_t total, double t)
{
    int width = 30, fill = total ? (int)(width * (done > total ? total : done) / total) : 0;
    char bar[64];
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
    bar[width] = '\0';
    fprintf(stderr, "\r%-10s [%s] %" PRIu64 "/%" PRIu64 " batches  %.1f s   ", label, bar, done,
            total, t);
    fflush(stderr);
}

/* The step alone: `batches` steps, no loader. */
static void run_synthetic(double step_s, uint64_t batches, int show, run_out *o)
{
    memset(o, 0, sizeof *o);
    double t0 = tool_now_s(), c0 = cpu_now_s(), last = 0;
    for (uint64_t i = 0; i < batches; i++) {
        tool_sleep_s(step_s);
        if (show && tool_now_s() - last > 0.1) {
            last = tool_now_s();
            draw("synthetic", i + 1, batches, last - t0);
        }
    }
    o->seconds = tool_now_s() - t0;
    o->cpu_s = cpu_now_s() - c0;
    o->batches = batches;
    if (show) fputc('\n', stderr);
}

/* A stats field that says what is now, not a count: kept as it is at a
 * run's end, not made the run's own by subtracting its start. */
/* One epoch (or max_batches) of the loader with the step. */
static int run_loader(const char *data, const nostall_config *cfg, double step_s,
                      uint64_t max_batches, const char *label, int show, run_out *o)
{
    nostall_loader *ld;
    memset(o, 0, sizeof *o);
    if (nostall_loader_create(&ld, data, cfg) < 0) {
        fprintf(stderr, "nostall analyze: %s run: %s\n", label, nostall_last_error());
        return -1;
    }
    nostall_dataset_info info;
    nostall_loader_info(ld, &info, sizeof info);
    uint64_t total = info.batches_per_epoch;
    if (max_batches && max_batches < total) total = max_batches;
    nostall_stats st0;
    nostall_loader_stats(ld, &st0, sizeof st0);
    double t0 = tool_now_s(), c0 = cpu_now_s(), last = 0;
    int status = 0;
    for (;;) {
        nostall_batch b;
        int rc = nostall_loader_next(ld, &b);
        if (rc == NOSTALL_DONE || rc == NOSTALL_EPOCH_END) break;
        if (rc < 0) {
            if (show) fputc('\n', stderr);
            fprintf(stderr, "nostall analyze: %s run on %s: %s\n", label, data,
                    nostall_last_error());
            status = -1;
            break;
        }
        o->items += b.count;
        o->batches++;
        tool_sleep_s(step_s);
        if (nostall_loader_release(ld, &b) < 0) {
            fprintf(stderr, "nostall analyze: %s run on %s: %s\n", label, data,
                    nostall_last_error());
            status = -1;
            break;
        }
        if (show && tool_now_s() - last > 0.1) {
            last = tool_now_s();
            draw(label, o->batches, total, last - t0);
        }
        if (o->batches >= total) break;
    }
    o->seconds = tool_now_s() - t0;
    o->cpu_s = cpu_now_s() - c0;
    nostall_loader_stats(ld, &o->st, sizeof o->st);
    /* make the counters this run's own */
    uint64_t *a = (uint64_t *)&o->st;
    const uint64_t *z = (const uint64_t *)&st0;
    int nst = nostall_stats_count();
    for (int i = 0; i < nst && i < (int)(sizeof o->st / sizeof(uint64_t)); i++)
        if (nostall_stats_gauge(i) == 0) a[i] -= z[i];
    o->stall_s = o->st.consumer_wait_ns * 1e-9;
    if (show) fputc('\n', stderr);
    nostall_loader_free(ld);
    return status;
}

/* ---- the whole measurement ---------------------------------------------- */

/* nostall_analyze_measure()'s notes and warnings, and its prep run's
 * progress bar (ctx: show, the progress line is wanted). */
static void on_message(void *ctx, int warning, const char *text)
{
    if (warning)
        tool_line(stderr, "nostall analyze: warning: %s", text);
    else if (*(const int *)ctx)
        tool_line(stderr, "%s", text);
}

static void on_progress(void *ctx, const char *run, uint64_t done, uint64_t total, double seconds,
                        int finished)
{
    (void)ctx;
    if (finished)
        fputc('\n', stderr);
    else
        draw(run, done, total, seconds);
}

/* The three runs with the simulated step: synthetic, cached (every file in
 * the page cache, no emulated storage, no echo), cold (the configuration as
 * given, the dataset dropped from the page cache). */
static int step_runs(const char *data, nostall_config *cfg, double step_s, uint64_t max_batches,
                     int show, nostall_analyze_meas *m)
{
    nostall_analyze_files *files = NULL;
    nostall_config *wcfg = NULL;
    int status = -1;
    nostall_dataset_info info;
    if (nostall_analyze_files_create(&files, data, cfg, &info, sizeof info) < 0) {
        tool_line(stderr, "nostall analyze: %s", nostall_last_error());
        goto out;
    }
    uint64_t nb = info.batches_per_epoch;
    if (!(wcfg = nostall_analyze_cached_config(cfg))) goto out;
    if (max_batches && max_batches < nb) nb = max_batches;
    /* 1. synthetic: the step alone */
    run_out syn, warm, cold;
    run_synthetic(step_s, nb, show, &syn);
    m->syn_seconds = syn.seconds;
    m->syn_batches = (double)syn.batches;
    m->step_s = syn.batches ? syn.seconds / syn.batches : 0;
    m->step_cpu_s = syn.batches ? syn.cpu_s / syn.batches : 0;

    /* 2. cached: every file in the page cache (nostall_analyze_measure left
     * them there), no emulated storage, no echo */
    (void)nostall_analyze_files_warm(files);
    if (run_loader(data, wcfg, m->step_s, max_batches, "cached", show, &warm) < 0) goto out;
    m->warm_seconds = warm.seconds;
    m->warm_items = (double)warm.items;
    m->warm_batches = (double)warm.batches;
    m->warm_stall_s = warm.stall_s;
    m->warm_cpu_s = warm.cpu_s;
    m->warm_fetch_ns = (double)warm.st.fetch_busy_ns;
    m->warm_decode_ns = (double)warm.st.decode_busy_ns;
    m->warm_augment_ns = (double)warm.st.augment_busy_ns;

    /* 3. cold: the configuration as given, the dataset dropped from the page cache */
    const uint64_t failed = nostall_analyze_files_drop(files);
    if (failed)
        tool_line(stderr,
                  "nostall analyze: warning: could not drop %" PRIu64
                  " file(s) from the page cache (e.g. %s)",
                  failed, nostall_analyze_files_path(files, 0));
    nostall_config_set(cfg, "epochs", "1");
    nostall_config_set(cfg, "echo", "fixed");
    nostall_config_set(cfg, "echo_factor", "1");
    if (run_loader(data, cfg, m->step_s, max_batches, "cold", show, &cold) < 0) goto out;
    m->cold_seconds = cold.seconds;
    m->cold_items = (double)cold.items;
    m->cold_batches = (double)cold.batches;
    m->cold_stall_s = cold.stall_s;
    m->cold_storage_reads = (double)cold.st.storage_reads;
    m->cold_storage_bytes = (double)cold.st.storage_bytes_read;
    m->cold_storage_wait_ns = (double)cold.st.storage_wait_ns;
    m->cold_fetch_ns = (double)cold.st.fetch_busy_ns;
    if (cold.st.autotune) { /* what it chose, for the report */
        m->cold_autotune = 1;
        m->cold_tuned_workers = (double)cold.st.active_workers;
        m->cold_tuned_ahead = (double)cold.st.tuned_batches_ahead;
        m->cold_tuned_depth = (double)cold.st.tuned_io_depth;
        m->cold_tune_reason = (double)cold.st.tune_reason;
        m->cold_tuned_cache = (double)cold.st.tuned_cache_bytes;
    }
    status = 0;
out:
    nostall_config_free(wcfg);
    nostall_analyze_files_drop(files);
    nostall_analyze_files_free(files);
    return status;
}

/* Everything measured on DATA with the configuration `cfg`: the library's
 * part, then the runs with the step (or those of `runs`, measured
 * elsewhere, e.g. with a real step by Python). */
static int measure(const char *data, nostall_config *cfg, double step_s, uint64_t max_batches,
                   int show, const nostall_analyze_meas *runs, nostall_analyze_meas *m)
{
    nostall_analyze_measure_options o = {.max_batches = max_batches,
                                         .keep_cached = !runs,
                                         .ctx = &show,
                                         .message = on_message,
                                         .progress = show ? on_progress : NULL};
    if (nostall_analyze_measure(m, sizeof *m, data, cfg, &o, sizeof o) < 0) {
        tool_line(stderr, "nostall analyze: %s", nostall_last_error());
        return -1;
    }
    if (!runs) return step_runs(data, cfg, step_s, max_batches, show, m);
        /* the three runs were measured elsewhere (Python, with a real step) */
#define AN_TAKE_(f) m->f = runs->f
    AN_TAKE_(step_s);
    AN_TAKE_(step_cpu_s);
    AN_TAKE_(syn_seconds);
    AN_TAKE_(syn_batches);
    AN_TAKE_(warm_seconds);
    AN_TAKE_(warm_items);
    AN_TAKE_(warm_batches);
    AN_TAKE_(warm_stall_s);
    AN_TAKE_(warm_cpu_s);
    AN_TAKE_(warm_fetch_ns);
    AN_TAKE_(warm_decode_ns);
    AN_TAKE_(warm_augment_ns);
    AN_TAKE_(cold_seconds);
    AN_TAKE_(cold_items);
    AN_TAKE_(cold_batches);
    AN_TAKE_(cold_stall_s);
    AN_TAKE_(cold_storage_reads);
    AN_TAKE_(cold_storage_bytes);
    AN_TAKE_(cold_storage_wait_ns);
    AN_TAKE_(cold_fetch_ns);
    AN_TAKE_(cold_autotune);
    AN_TAKE_(cold_tuned_workers);
    AN_TAKE_(cold_tuned_ahead);
    AN_TAKE_(cold_tuned_depth);
    AN_TAKE_(cold_tune_reason);
    AN_TAKE_(cold_tuned_cache);
#undef AN_TAKE_
    if (runs->cores > 0) m->cores = runs->cores;
    return 0;
}

/* ---- the reports ------------------------------------------------------------ */

/* Report `format` of `a` into a malloc'd string (*len bytes); NULL with a
 * message printed. */
static char *report_text(const nostall_analysis *a, int format, const char *data, size_t *len)
{
    char *text = NULL;
    if (nostall_analyze_report(a, format, data, NULL, 0, len) == 0 && (text = malloc(*len + 1)) &&
        nostall_analyze_report(a, format, data, text, *len + 1, len) == 0)
        return text;
    free(text);
    tool_line(stderr, "nostall analyze: %s", text ? nostall_last_error() : "out of memory");
    return NULL;
}

/* The report on stdout (text or JSON), and the HTML one into `html`. */
static int reports(const nostall_analysis *a, int json, const char *html, const char *shown)
{
    size_t len;
    char *text = report_text(a, json ? NOSTALL_ANALYZE_JSON : NOSTALL_ANALYZE_TEXT, shown, &len);
    if (!text) return -1;
    fwrite(text, 1, len, stdout);
    free(text);
    if (!html) return 0;
    if (!(text = report_text(a, NOSTALL_ANALYZE_HTML, shown, &len))) return -1;
    FILE *f = fopen(html, "w");
    int bad = !f || fwrite(text, 1, len, f) != len;
    if (f && fclose(f) != 0) bad = 1;
    free(text);
    if (bad) {
        tool_line(stderr, "nostall analyze: cannot write %s: %s", html, strerror(errno));
        return -1;
    }
    return 0;
}

/* ---- the command ---------------------------------------------------------- */

/* The arguments into o and cfg, checked: 0, or a tool_args_parse() status. */
static int an_parse(int argc, char **argv, an_opts *o, const char **data, nostall_config *cfg)
{
    memset(o, 0, sizeof *o);
    o->step_ms = o->step_rate = -1;
    int n = tool_args_parse(&an_cmd, argc, argv, o, cfg);
    if (n < 0) return n;
    *data = n ? argv[1] : NULL;
    if (o->step_ms >= 0 && o->step_rate > 0) {
        fprintf(stderr, "nostall analyze: give --step-ms or --step-rate, not both\n");
        return TOOL_ARGS_ERROR;
    }
    if (!o->meas_file && !*data) {
        fprintf(stderr, "nostall analyze: missing DATA (an ImageFolder directory or a file list)\n");
        return TOOL_ARGS_ERROR;
    }
    if (!o->meas_file && !o->runs_file && o->step_ms < 0 && o->step_rate < 0) {
        fprintf(stderr,
                "nostall analyze: need --step-ms MS or --step-rate ITEMS_PER_S (the training step)\n");
        return TOOL_ARGS_ERROR;
    }
    return 0;
}

int cmd_analyze(int argc, char **argv)
{
    const char *data = NULL;
    an_opts o;
    int status = 1;
    nostall_config *cfg = NULL;
    nostall_analysis *an = NULL;

    if (nostall_config_create(&cfg) < 0) {
        fprintf(stderr, "nostall analyze: %s\n", nostall_last_error());
        return 1;
    }
    int prc = an_parse(argc, argv, &o, &data, cfg);
    if (prc < 0) {
        nostall_config_free(cfg);
        return tool_args_status(prc);
    }
    nostall_analyze_meas m;
    memset(&m, 0, sizeof m);
    if (o.meas_file) {
        if (nostall_analyze_meas_read(&m, sizeof m, o.meas_file) < 0) {
            tool_line(stderr, "nostall analyze: %s", nostall_last_error());
            goto out;
        }
    } else {
        uint64_t bs = 1;
        nostall_config_get_uint(cfg, NOSTALL_OPT_BATCH_SIZE, &bs);
        double step_s = o.step_rate > 0 ? bs / o.step_rate : o.step_ms / 1000;
        int show = !o.quiet && isatty(2);
        nostall_analyze_meas runs, *have_runs = NULL;
        if (o.runs_file) {
            if (nostall_analyze_meas_read(&runs, sizeof runs, o.runs_file) < 0) {
                tool_line(stderr, "nostall analyze: %s", nostall_last_error());
                goto out;
            }
            have_runs = &runs;
        }
        if (measure(data, cfg, step_s, o.max_batches, show, have_runs, &m) < 0) goto out;
    }
    if (nostall_analyze_create(&an, &m, sizeof m) < 0) {
        tool_line(stderr, "nostall analyze: %s", nostall_last_error());
        goto out;
    }
    for (int i = 0; i < o.predict.n; i++)
        if (nostall_analyze_predict(an, o.predict.v[i], NULL, 0) < 0) {
            tool_line(stderr, "nostall analyze: %s", nostall_last_error());
            status = 2;
            goto out;
        }
    if (reports(an, o.json, o.report, data ? data : o.meas_file) < 0) goto out;
    status = 0;
out:
    nostall_analyze_free(an);
    nostall_config_free(cfg);
    return status;
}
