/*
 * analyze.h — the stall analyzer's pieces (`nostall analyze`): what it
 * measures (one flat table of numbers, which is also the JSON that
 * `--measurements FILE` reads back, e.g. from Python's nostall.analyze), the
 * what-if model (analyze_model.c, the only copy of the model), and the
 * reports (analyze_report.c: terminal, JSON, HTML with SVG charts).
 */
#ifndef NOSTALL_TOOLS_ANALYZE_H
#define NOSTALL_TOOLS_ANALYZE_H

#include <stdio.h>

/* Every measurement, in one table: X(name, help). All are doubles; times in
 * seconds, sizes in bytes, rates in bytes/s. The three runs (syn, warm, cold)
 * may cover fewer items than an epoch (--max-batches): the model uses their
 * per-item and per-batch figures. */
#define AN_MEAS_TABLE(X)                                                               \
    X(items_per_epoch, "items one epoch delivers to this rank")                        \
    X(batch_size, "items per batch")                                                   \
    X(dataset_items, "items in the dataset index")                                     \
    X(dataset_bytes, "bytes of every dataset file (stat)")                             \
    X(item_out_bytes, "bytes of one delivered item (output tensor)")                   \
    X(cores, "online CPUs of this machine")                                            \
    X(mem_available_bytes, "memory available for caching (MemAvailable)")              \
    X(threads, "worker threads of the measured runs")                                  \
    X(io_depth, "configured reads in flight per worker (io_depth)")                    \
    X(cache_minio, "1: the MinIO cache is on (cache=minio, cache_bytes > 0)")          \
    X(cache_bytes, "MinIO cache budget in bytes (0: none)")                            \
    X(emu_mbps, "emulated storage bandwidth, MB/s (0: not emulated)")                  \
    X(emu_latency_ms, "emulated storage latency per read, ms")                         \
    X(echo_factor, "configured echo factor")                                           \
    X(echo_point, "configured echo point: 0 fetch, 1 decode, 2 augment, 3 batch")      \
    X(step_s, "training step per batch (synthetic run: data already in memory)")       \
    X(step_cpu_s, "CPU time of one training step")                                     \
    X(syn_seconds, "synthetic run: wall time")                                         \
    X(syn_batches, "synthetic run: steps")                                             \
    X(prep_items, "prep run (loader alone, as fast as it goes, page cache warm): items")  \
    X(prep_seconds, "prep run: wall time")                                             \
    X(prep_cpu_s, "prep run: CPU time of the process")                                 \
    X(prep_fetch_ns, "prep run: worker busy ns fetching")                              \
    X(prep_decode_ns, "prep run: worker busy ns decoding")                             \
    X(prep_augment_ns, "prep run: worker busy ns augmenting")                          \
    X(warm_seconds, "cached run (page cache warm, no storage delay): wall time")       \
    X(warm_items, "cached run: items delivered")                                       \
    X(warm_batches, "cached run: batches delivered")                                   \
    X(warm_stall_s, "cached run: time the step waited for data")                       \
    X(warm_cpu_s, "cached run: CPU time of the process")                               \
    X(warm_fetch_ns, "cached run: worker busy ns fetching")                            \
    X(warm_decode_ns, "cached run: worker busy ns decoding")                           \
    X(warm_augment_ns, "cached run: worker busy ns augmenting")                        \
    X(cold_seconds, "cold run (page cache dropped, configured storage): wall time")    \
    X(cold_items, "cold run: items delivered")                                         \
    X(cold_batches, "cold run: batches delivered")                                     \
    X(cold_stall_s, "cold run: time the step waited for data")                         \
    X(cold_storage_reads, "cold run: reads from storage")                              \
    X(cold_storage_bytes, "cold run: bytes read from storage")                         \
    X(cold_storage_wait_ns, "cold run: worker ns in emulated storage delays")          \
    X(cold_fetch_ns, "cold run: worker busy ns fetching")                              \
    X(disk_bw, "real storage: bandwidth with several reads in flight (bytes/s)")       \
    X(disk_bw1, "real storage: bandwidth of one read at a time (bytes/s)")             \
    X(disk_latency_s, "real storage: latency per read, one in flight")                 \
    X(mem_bw, "memory bandwidth (memcpy, bytes/s)")                                     \
    X(cpu_available, "CPUs this process obtained with one busy thread per core (shared machine: < cores)") \
    X(rst_sample_items, "restart-marker what-if: JPEG items of the sample (0: not measured)")  \
    X(rst_cpu_ratio, "CPU per item of the sample after `nostall transcode` / as it is (0: not measured)")

typedef struct an_meas {
#define AN_MEAS_FIELD_(name, help) double name;
    AN_MEAS_TABLE(AN_MEAS_FIELD_)
#undef AN_MEAS_FIELD_
} an_meas;

/* A configuration to predict. Start from an_scenario_current(). */
typedef struct an_scenario {
    double threads;       /* worker threads                                  */
    double io_depth;      /* reads in flight per worker                      */
    double cores;         /* CPUs of the machine                             */
    double cache_frac;    /* MinIO cache, fraction of the dataset's bytes    */
    int minio;            /* 1: MinIO cache (misses bypass the page cache)   */
    double emu_mbps;      /* emulated storage MB/s (0: off)                  */
    double emu_latency_ms;
    double bw_scale;      /* multiplies every storage bandwidth (what-if)    */
    double step_s;        /* training step per batch                         */
    double echo_factor;
    int echo_point;       /* 0 fetch, 1 decode, 2 augment, 3 batch           */
    int cold;             /* 1: first epoch after dropping the page cache    */
    /* Partitioned cache over MPI (libnostall_mpi): `nodes` ranks each cache
     * cache_frac of the dataset, disjointly; items a peer holds come over
     * the network. nodes <= 1: off. */
    double nodes;
    double net_mbps;      /* network bandwidth per rank, MB/s                */
    double net_latency_ms;/* one remote request                              */
    /* Restart-marker what-if: CPU per item multiplied by this (1: the files
     * as they are; m->rst_cpu_ratio: after `nostall transcode`). */
    double cpu_scale;
    /* cache_transcode=1: the items the MinIO cache holds (cache_frac) are
     * decoded from the rewritten form, CPU x m->rst_cpu_ratio, in every
     * epoch after the fill; the rest as they are. */
    int cache_transcode;
} an_scenario;

typedef struct an_pred {
    double epoch_s;       /* predicted epoch time (steady state, or cold)    */
    double compute_s;     /* the steps alone                                 */
    double prep_stall_s;  /* waiting caused by preprocessing (CPU)           */
    double fetch_stall_s; /* waiting caused by storage                       */
    double nofetch_s;     /* the epoch if fetching cost nothing              */
    double prep_s;        /* upstream CPU time / effective cores             */
    double fetch_s;       /* storage bound (device or per-worker latency)    */
    double eff_cores;
    double delivered;     /* items per epoch (echo included)                 */
    const char *bound;    /* "compute", "prep", "fetch"                      */
} an_pred;

/* The rates behind the stalls, in items per second. */
typedef struct an_rates {
    double cpu_item_s;   /* CPU seconds of preprocessing per item (one core)     */
    double per_core;     /* items/s one core prepares                            */
    double prep;         /* items/s the configured threads prepare               */
    double fetch;        /* items/s storage delivers (cold, configured storage)  */
    double accel;        /* items/s the training step consumes                   */
    double item_bytes;   /* mean bytes of a dataset file                         */
} an_rates;

an_scenario an_scenario_current(const an_meas *m);
void an_rates_get(const an_meas *m, an_rates *r);
void an_predict(const an_meas *m, const an_scenario *s, an_pred *p);
/* Applies "key=value,key=value" (threads, cores, cache_fraction, cache_bytes,
 * storage_mbps, storage_latency_ms, step_ms, echo_factor, echo_point, cold,
 * transcode, cache_transcode, ...)
 * to *s. Returns 0, or -1 with a message naming the bad key in err. */
int an_scenario_parse(const an_meas *m, an_scenario *s, const char *spec, char *err,
                      size_t errlen);

/* What-if rows and recommendations, computed by analyze_model.c. */
typedef struct an_row {
    char group[16];  /* "cache", "cores", "storage", "echo", "combined" */
    char label[96];
    double x;        /* the varied value (for the curves) */
    an_scenario s;
    an_pred p;
} an_row;

typedef struct an_reco {
    char what[16];   /* "cores", "cache", "echo", "transcode" */
    double value;    /* cores, cache fraction, echo factor, CPU ratio; < 0: none suffices */
    int needed;      /* 0: the stall it targets is already under the threshold */
    double epoch_before_s, epoch_after_s;
    char text[512];
} an_reco;

typedef struct an_result {
    an_meas m;
    an_pred measured_syn, cold_run, warm_run; /* model for the runs that were measured */
    an_scenario cur;
    an_pred now;           /* steady state of the configuration as given */
    const char *bound;     /* classification of `now` */
    an_row rows[96];
    int nrows;
    an_reco reco[4];
    int nreco;
    an_row predict[32];    /* --predict */
    int npredict;
} an_result;

#define AN_STALL_OK 0.05 /* stall fraction considered negligible */
/* A transcode is recommended only when it cuts CPU per item below this (the sample runs are short: a few % is noise). */
#define AN_RST_USEFUL 0.90

void an_analyze(an_result *r);

/* analyze_report.c */
void an_report_text(FILE *f, const an_result *r, const char *data);
void an_report_json(FILE *f, const an_result *r, const char *data);
int an_report_html(const char *path, const an_result *r, const char *data);
/* Read a flat JSON object of numbers (or an object with a "measurements"
 * member holding one) into *m. Returns 0, or -1 with a message naming the
 * file in err. */
int an_read_measurements(const char *path, an_meas *m, char *err, size_t errlen);

#endif
