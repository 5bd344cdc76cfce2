/*
 * nostall_analyze.h — the stall analyzer of libnostall (an extension header:
 * nostall.h stays the one header of the loader). Where does the data stall of
 * a training job come from, and what would remove it? `nostall analyze` and
 * Python's nostall.analyze() are thin drivers of what is declared here; the
 * model and its documentation: docs/analyzer.md.
 *
 *     nostall_analyze_meas m;                 // what was measured
 *     nostall_analyze_measure(&m, sizeof m, "/data/train", cfg, NULL, 0);
 *     ... the caller's own runs with its training step fill step_s,
 *         syn_*, warm_* and cold_* (see the table) ...
 *     nostall_analysis *a;
 *     if (nostall_analyze_create(&a, &m, sizeof m) < 0)
 *         fprintf(stderr, "%s\n", nostall_last_error());
 *     nostall_analyze_predict(a, "threads=16,cache_fraction=0.5", NULL, 0);
 *     size_t n;
 *     nostall_analyze_report(a, NOSTALL_ANALYZE_TEXT, "/data/train", NULL, 0, &n);
 *     char *text = malloc(n + 1);
 *     nostall_analyze_report(a, NOSTALL_ANALYZE_TEXT, "/data/train", text, n + 1, &n);
 *     nostall_analyze_free(a);
 *
 * THE PIECES
 *   1. Measurements (nostall_analyze_meas): one flat struct of doubles
 *      defined by NOSTALL_ANALYZE_MEAS_TABLE. It is also the JSON object
 *      that the JSON report writes as "measurements" and
 *      nostall_analyze_meas_read() reads back (exact round trip).
 *   2. Measuring what needs no training step (nostall_analyze_measure): the
 *      dataset, the machine, storage and memory bandwidth, the prep rate (the
 *      loader alone) and the restart-marker what-if. The three runs with the
 *      step (synthetic, cached, cold) are the caller's: the CLI simulates a
 *      step, Python runs the user's.
 *   3. The model (nostall_analyze_create): predictions for the configuration
 *      as measured and for what-if variations, the classification (compute-,
 *      prep- or fetch-bound), the measured runs' own classification, and
 *      four recommendations (cores, storage, echo, restart-marker
 *      transcode; prep servers when the cores are the limit). With prep
 *      servers, their measured rate and the trainer's cost to receive
 *      predict 1 to 8 of them. Further configurations with nostall_analyze_predict().
 *      The runs may be another loader's: nostall.profile measures a torch
 *      DataLoader's into the same table and has them classified and
 *      reported here.
 *   4. Reports (nostall_analyze_report): the terminal text, one JSON object,
 *      a self-contained HTML page with SVG charts; the driver's own warnings
 *      and notes in each (nostall_analyze_note).
 *
 * CONVENTIONS (as in nostall.h)
 *   Status returns (0 ok, negative NOSTALL_E_* with nostall_last_error()).
 *   Structs passed in or copied out come with their size (pass sizeof): their
 *   fields are only ever appended, so a caller compiled against an older
 *   header stays valid (fields it does not know are zero on the way in and
 *   not written on the way out). Out-parameters come first in functions
 *   without a handle (as in nostall_loader_create), after the handle and
 *   what selects in the others (as in nostall_loader_item).
 *
 * THREAD SAFETY
 *   The table functions are pure. An analysis is used by one thread at a
 *   time; different analyses are independent. nostall_analyze_measure()
 *   starts and joins its own threads and loaders before it returns.
 */
#ifndef NOSTALL_ANALYZE_H
#define NOSTALL_ANALYZE_H

#include <stddef.h>
#include <stdint.h>

#include "nostall.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------
 * Measurements. X(name, help); every one a double: times in seconds, sizes
 * in bytes, rates in bytes/s. The three runs (syn, warm, cold) may cover
 * fewer items than an epoch: the model uses their per-item and per-batch
 * figures. New measurements are only ever appended.
 * ------------------------------------------------------------------------ */
#define NOSTALL_ANALYZE_MEAS_TABLE(X)                                                              \
    X(items_per_epoch, "items one epoch delivers to this rank")                                    \
    X(batch_size, "items per batch")                                                               \
    X(dataset_items, "items in the dataset index")                                                 \
    X(dataset_bytes, "bytes of the distinct dataset files (stat)")                                 \
    X(item_out_bytes, "bytes of one delivered item (output tensor)")                               \
    X(cores, "online CPUs of this machine")                                                        \
    X(mem_available_bytes, "memory available for caching (MemAvailable)")                          \
    X(threads, "worker threads of the measured runs")                                              \
    X(io_depth, "configured reads in flight per worker (io_depth)")                                \
    X(cache_minio, "1: the MinIO cache is on (cache=minio, cache_bytes > 0)")                      \
    X(cache_bytes, "MinIO cache budget in bytes (0: none)")                                        \
    X(emu_mbps, "emulated storage bandwidth, MB/s (0: not emulated)")                              \
    X(emu_latency_ms, "emulated storage latency per read, ms")                                     \
    X(echo_factor, "configured echo factor")                                                       \
    X(echo_point, "configured echo point: 0 fetch, 1 decode, 2 augment, 3 batch")                  \
    X(step_s, "training step per batch (synthetic run: data already in memory)")                   \
    X(step_cpu_s, "CPU time of one training step")                                                 \
    X(syn_seconds, "synthetic run: wall time")                                                     \
    X(syn_batches, "synthetic run: steps")                                                         \
    X(prep_items, "prep run (loader alone, as fast as it goes, page cache warm): items")           \
    X(prep_seconds, "prep run: wall time")                                                         \
    X(prep_cpu_s, "prep run: CPU time of the process")                                             \
    X(prep_fetch_ns, "prep run: worker busy ns fetching")                                          \
    X(prep_decode_ns, "prep run: worker busy ns decoding")                                         \
    X(prep_augment_ns, "prep run: worker busy ns augmenting")                                      \
    X(warm_seconds, "cached run (page cache warm, no storage delay): wall time")                   \
    X(warm_items, "cached run: items delivered")                                                   \
    X(warm_batches, "cached run: batches delivered")                                               \
    X(warm_stall_s, "cached run: time the step waited for data")                                   \
    X(warm_cpu_s, "cached run: CPU time of the process")                                           \
    X(warm_fetch_ns, "cached run: worker busy ns fetching")                                        \
    X(warm_decode_ns, "cached run: worker busy ns decoding")                                       \
    X(warm_augment_ns, "cached run: worker busy ns augmenting")                                    \
    X(cold_seconds, "cold run (page cache dropped, configured storage): wall time")                \
    X(cold_items, "cold run: items delivered")                                                     \
    X(cold_batches, "cold run: batches delivered")                                                 \
    X(cold_stall_s, "cold run: time the step waited for data")                                     \
    X(cold_storage_reads, "cold run: reads from storage")                                          \
    X(cold_storage_bytes, "cold run: bytes read from storage")                                     \
    X(cold_storage_wait_ns, "cold run: worker ns in emulated storage delays")                      \
    X(cold_fetch_ns, "cold run: worker busy ns fetching")                                          \
    X(disk_bw, "real storage: bandwidth with several reads in flight (bytes/s)")                   \
    X(disk_bw1, "real storage: bandwidth of one read at a time (bytes/s)")                         \
    X(disk_latency_s, "real storage: latency per read, one in flight")                             \
    X(mem_bw, "memory bandwidth (memcpy, bytes/s)")                                                \
    X(cpu_available, "CPUs this process obtained with one busy thread per core (shared "           \
                     "machine: < cores)")                                                          \
    X(rst_sample_items, "restart-marker what-if: JPEG items of the sample (0: not measured)")      \
    X(rst_cpu_ratio, "CPU per item of the sample after `nostall transcode` / as it is (0: "        \
                     "not measured)")                                                              \
    X(dataset_files, "distinct local files the items are read from (token windows of one "         \
                     "corpus share it: dataset_bytes counts each file once; 0: not measured)")     \
    X(warm_start_s, "cached run: starting the loader (its iterator and worker processes) and "     \
                    "its start-up inside the first wait: in warm_seconds, not in warm_stall_s; "   \
                    "once per epoch, not scaled with the batches (0: not measured apart; "         \
                    "nostall.profile measures it for foreign loaders)")                            \
    X(cold_start_s, "cold run: the same as warm_start_s")                                          \
    X(cold_autotune, "cold run: 1 when the loader ran with autotune (the configuration's)")        \
    X(cold_tuned_workers, "cold run: autotune's active workers at its end (0: no autotune)")       \
    X(cold_tuned_ahead, "cold run: autotune's batches ahead at its end")                           \
    X(cold_tuned_depth, "cold run: autotune's reads in flight per worker at its end (0: "          \
                        "io_depth set, not tuned)")                                                \
    X(cold_tune_reason, "cold run: autotune's last reason, a NOSTALL_TUNE_* code")                 \
    X(prep_servers, "prep servers configured (prep_servers; 0: none). With them the prep run "     \
                    "(prep_*) is the trainer's local threads alone, and srv_* the loader "         \
                    "alone as configured, with its servers")                                       \
    X(srv_items, "run with the prep servers (loader alone, as fast as it goes; the second of "     \
                 "two epochs, the first not counted): items")                                      \
    X(srv_seconds, "run with the prep servers: wall time")                                         \
    X(srv_cpu_s, "run with the prep servers: CPU time of the process")                             \
    X(srv_remote_items, "run with the prep servers: items received from them")                     \
    X(srv_remote_bytes, "run with the prep servers: item bytes received (prep_remote_bytes)")      \
    X(srv_remote_wait_ns, "run with the prep servers: request to reply, summed over items")        \
    X(srv_remote_busy_ns, "run with the prep servers: time servers had items outstanding, "        \
                          "summed over servers")                                                   \
    X(srv_recv_cpu_s, "run with the prep servers: CPU time of the trainer's prep-server "          \
                      "threads (requesting, receiving)")                                           \
    X(cold_tuned_cache, "cold run: autotune's MinIO cache admission cap at its end, bytes (0: "    \
                        "no cache)")                                                               \
    X(decode_gpu, "1 with decode_device=gpu: decode and augment on the GPU, their time "           \
                  "counted as prep time (0: on the CPU)")

typedef struct nostall_analyze_meas {
#define NOSTALL_ANALYZE_MEAS_FIELD_(name, help) double name;
    NOSTALL_ANALYZE_MEAS_TABLE(NOSTALL_ANALYZE_MEAS_FIELD_)
#undef NOSTALL_ANALYZE_MEAS_FIELD_
} nostall_analyze_meas;

/* Number of measurements and their names/help, in struct order (static
 * strings; NULL for an index out of range). */
NOSTALL_API int nostall_analyze_meas_count(void);
NOSTALL_API const char *nostall_analyze_meas_name(int i);
NOSTALL_API const char *nostall_analyze_meas_help(int i);

/* Read measurements from a JSON file: a flat object of numbers (null reads
 * as 0) or an object with a "measurements" member holding one (a JSON
 * report). Unknown names are passed over; measurements not in the file are
 * 0. E_IO naming the file when it cannot be read, E_INVALID when it is not
 * such an object or lacks items_per_epoch, batch_size or warm_items > 0. */
NOSTALL_API int nostall_analyze_meas_read(nostall_analyze_meas *out, size_t size, const char *path);

/* ------------------------------------------------------------------------
 * Measuring what needs no training step.
 * ------------------------------------------------------------------------ */
typedef struct nostall_analyze_measure_options {
    /* Cap the prep run at this many batches (0: one epoch). */
    uint64_t max_batches;
    /* 1: leave the dataset's files in the OS page cache, as the prep run
     * read them (for a cached run that follows); 0: drop them again. */
    int keep_cached;
    /* Called on the calling thread, may be NULL. message: a note on what is
     * being measured (warning = 0) or a warning (1: a file that could not be
     * read or dropped, a what-if that could not be measured), one line
     * without a newline. progress: the prep run's batches, at most every
     * 0.1 s, then once with finished = 1. */
    void *ctx;
    void (*message)(void *ctx, int warning, const char *text);
    void (*progress)(void *ctx, const char *run, uint64_t done, uint64_t total, double seconds,
                     int finished);
} nostall_analyze_measure_options;

/* Index `source` with `cfg` (NULL: defaults) as a loader would and fill
 * every measurement that needs no training step: items_per_epoch,
 * batch_size, dataset_items, dataset_bytes and dataset_files (stat of
 * each distinct local file, once however many items share it),
 * item_out_bytes, cores (the CPUs this process may run on), threads,
 * io_depth (auto: NOSTALL_IO_DEPTH_AUTO_MAX), the cache, storage emulation
 * and echo settings of `cfg`, mem_available_bytes, mem_bw, cpu_available,
 * disk_bw / disk_bw1 / disk_latency_s (cold reads of up to 128 files), the
 * prep run (prep_*: every file read into the page cache, then the loader
 * without a step, no cache, no emulated storage, no echo) and the
 * restart-marker what-if (rst_*: up to 96 JPEG items as
 * nostall_transcode_jpeg() leaves them -- rewritten, or kept as they are --
 * in memory (memfd; nothing is written to disk), and the loader's CPU per
 * item on them and on the originals, one thread, three alternating runs
 * each, the lowest kept; 0 when fewer than 16 undamaged JPEGs were found). Everything else is 0. Runs for as long as reading the dataset
 * twice and preparing it once take. `opts` may be NULL. Errors: those of
 * nostall_loader_create() (the message names `source`), E_NOMEM. */
NOSTALL_API int nostall_analyze_measure(nostall_analyze_meas *out, size_t size, const char *source,
                                        const nostall_config *cfg,
                                        const nostall_analyze_measure_options *opts,
                                        size_t opts_size);

/* ------------------------------------------------------------------------
 * A dataset's local files and the OS page cache.
 * ------------------------------------------------------------------------
 * The cached run wants every file of the dataset in the page cache, the
 * cold run none of them: the CLI and Python warm and drop them with these
 * (nostall_analyze_measure() uses the same list). The list holds each
 * distinct local file once, however many items it holds (a token corpus,
 * a tar shard, a clip list's audio file); http(s):// and s3:// items have
 * no page cache here and are left out. A drop is posix_fadvise(DONTNEED)
 * after writing back dirty pages: no root needed. */
typedef struct nostall_analyze_files nostall_analyze_files;

/* Index `source` with `cfg` (NULL: defaults; the options that choose the
 * items count: task, mix, world_size, ...) as a loader would, and list its
 * distinct local files. `info` (may be NULL) receives the dataset as that
 * loader reports it (nostall_loader_info). Errors: those of
 * nostall_loader_create() (the message names `source`), E_NOMEM. */
NOSTALL_API int nostall_analyze_files_create(nostall_analyze_files **out, const char *source,
                                             const nostall_config *cfg, nostall_dataset_info *info,
                                             size_t info_size);
NOSTALL_API void nostall_analyze_files_free(nostall_analyze_files *f);
/* The number of files, and file i (NULL past the end). */
NOSTALL_API uint64_t nostall_analyze_files_count(const nostall_analyze_files *f);
NOSTALL_API const char *nostall_analyze_files_path(const nostall_analyze_files *f, uint64_t i);
/* Read every file once, whole (into the page cache, as memory allows):
 * the number of files that could not be read. */
NOSTALL_API uint64_t nostall_analyze_files_warm(const nostall_analyze_files *f);
/* Drop every file from the page cache: the number that could not be
 * dropped (a file gone or unreadable since). */
NOSTALL_API uint64_t nostall_analyze_files_drop(const nostall_analyze_files *f);
/* The configuration of the analyzer's cached run (and of its probe, which
 * lists the files): a copy of cfg (NULL: defaults) without a cache,
 * emulated storage, echoing, coordination or cache_transcode, for one
 * epoch; what is left is the pipeline's own work. Free it with
 * nostall_config_free(); NULL when out of memory. */
NOSTALL_API nostall_config *nostall_analyze_cached_config(const nostall_config *cfg);

/* ------------------------------------------------------------------------
 * The model.
 * ------------------------------------------------------------------------ */
typedef struct nostall_analysis nostall_analysis;

/* Run the model on `m` (copied): the steady state as configured, the
 * measured runs as the model sees them, the what-if rows and the four
 * recommendations. E_INVALID (naming the field) when items_per_epoch or
 * batch_size is not > 0; E_NOMEM. */
NOSTALL_API int nostall_analyze_create(nostall_analysis **out, const nostall_analyze_meas *m,
                                       size_t size);
NOSTALL_API void nostall_analyze_free(nostall_analysis *a);

/* A predicted epoch. Times in seconds per epoch. */
typedef struct nostall_analyze_prediction {
    double epoch_s;       /* predicted epoch time (steady state, or cold)   */
    double compute_s;     /* the steps alone                                */
    double prep_stall_s;  /* waiting caused by preprocessing (CPU)          */
    double fetch_stall_s; /* waiting caused by storage                      */
    double nofetch_s;     /* the epoch if fetching cost nothing             */
    double prep_s;        /* upstream CPU time / effective cores            */
    double fetch_s;       /* storage bound (device or per-worker latency)   */
    double effective_cores;
    double delivered_items; /* items per epoch (echo included)                */
    const char *bound;      /* "compute", "prep" or "fetch" (static)          */
} nostall_analyze_prediction;

/* Which prediction nostall_analyze_prediction_get() copies out. */
typedef enum nostall_analyze_which {
    NOSTALL_ANALYZE_STEADY_STATE = 0, /* the configuration as given, epochs after the first */
    NOSTALL_ANALYZE_CACHED_RUN = 1,   /* the model of the measured cached run */
    NOSTALL_ANALYZE_COLD_RUN = 2      /* the model of the measured cold run   */
} nostall_analyze_which;

NOSTALL_API int nostall_analyze_prediction_get(const nostall_analysis *a, int which,
                                               nostall_analyze_prediction *out, size_t size);

/* Predict the configuration as measured changed by `spec`, "key=value" pairs
 * separated by commas: threads, io_depth, cores, cache_fraction,
 * cache_bytes, minio, storage_mbps, storage_latency_ms, bw_scale, step_ms,
 * echo_factor, echo_point (fetch|decode|augment|batch), cold, transcode (1:
 * CPU per item x rst_cpu_ratio), cache_transcode (1: the same for the share
 * the MinIO cache holds, after its fill epoch), nodes, net_mbps,
 * net_latency_ms, server_rate (items/s per prep server), recv_cpu_ms (the
 * trainer's CPU per received item), prep_servers (that many servers; needs
 * a rate, measured or given first), prep_net_mbps (caps their bytes). The
 * prediction is added to the reports ("predictions", labelled with `spec`,
 * at most 32) and copied to *out (may be NULL). E_INVALID with a message
 * naming the bad key or value (a transcode key when the sample was not
 * measured, prep_servers without a rate), or when 32 are there already. */
NOSTALL_API int nostall_analyze_predict(nostall_analysis *a, const char *spec,
                                        nostall_analyze_prediction *out, size_t size);

/* The classification of the steady state: "compute", "prep" or "fetch". */
NOSTALL_API const char *nostall_analyze_bound(const nostall_analysis *a);

/* The classification of the measured runs (DS-Analyzer's differential
 * method, the JSON report's "measured"): "compute" when their stalls are
 * under 5% of the epoch, else "start" when starting the loader
 * (warm_start_s, cold_start_s) stalls more than either of the others, else
 * "fetch" or "prep", the larger. The prep stall is what the cached run
 * waited (at most what the cold run waited), the fetch stall the rest of
 * the cold run's wait. A driver that measured another loader's runs
 * (nostall.profile: a torch DataLoader) fills the table with them and has
 * them classified and reported here, as nostall's own. */
NOSTALL_API const char *nostall_analyze_measured_bound(const nostall_analysis *a);

/* Add a line of the caller's to the reports (copied; untrusted text,
 * escaped like `data`; cut at a character after 1023 bytes): warning = 1:
 * a warning (the text report's WARNING lines, the JSON "warnings", the
 * HTML's warning boxes), e.g. nostall.profile's "the files could not be
 * dropped from the page cache"; warning = 0: a note (the JSON "notes", a
 * "notes" section in the text and HTML reports). At most
 * NOSTALL_ANALYZE_MAX_NOTES in all: E_INVALID beyond, or for a NULL
 * argument. */
#define NOSTALL_ANALYZE_MAX_NOTES 16
NOSTALL_API int nostall_analyze_note(nostall_analysis *a, int warning, const char *text);

typedef struct nostall_analyze_recommendation {
    const char *what; /* "cores", "cache", "echo", "transcode", "start",
                         "servers"                                        */
    double value;     /* cores, cache fraction, echo factor, CPU ratio;
                              < 0: none suffices, or not measured             */
    int needed;       /* 0: the stall it targets is under 5% already      */
    double epoch_before_s, epoch_after_s;
    const char *text; /* one sentence; `what` and `text` live as long as
                              the analysis                                    */
} nostall_analyze_recommendation;

/* Recommendations, in the order cores, cache, echo, transcode, and a fifth,
 * "start", only when the measured runs' start-up stalls at least 5% of the
 * epoch (a foreign loader's worker processes: see warm_start_s), and last
 * "servers" (value: prep servers; < 0 none suffices, or none measured),
 * only when the model predicts a prep stall and the trainer's cores are
 * the limit (docs/analyzer.md, "Prep servers"). */
NOSTALL_API int nostall_analyze_recommendation_count(const nostall_analysis *a);
NOSTALL_API int nostall_analyze_recommendation_get(const nostall_analysis *a, int i,
                                                   nostall_analyze_recommendation *out, size_t size);

/* ------------------------------------------------------------------------
 * Reports.
 * ------------------------------------------------------------------------ */
typedef enum nostall_analyze_format {
    NOSTALL_ANALYZE_TEXT = 0, /* the terminal report                              */
    NOSTALL_ANALYZE_JSON = 1, /* one JSON object and a newline: measurements,
                                 measured, rates, model, bound, warnings,
                                 recommendations, whatif, predictions, notes     */
    NOSTALL_ANALYZE_HTML = 2  /* a self-contained page: inline CSS and SVG        */
} nostall_analyze_format;

/* Write report `format` of the analysis; `data` names the dataset in it
 * (untrusted text: escaped for terminals, JSON and HTML). *len is set to the
 * report's length in bytes (without the terminating NUL) in every case; the
 * report and a NUL are written to buf when cap > *len. buf may be NULL with
 * cap 0 to ask for the length. E_INVALID for an unknown format, or a buf
 * too small (then nothing is written); E_NOMEM. */
NOSTALL_API int nostall_analyze_report(const nostall_analysis *a, int format, const char *data,
                                       char *buf, size_t cap, size_t *len);

#ifdef __cplusplus
}
#endif
#endif /* NOSTALL_ANALYZE_H */
