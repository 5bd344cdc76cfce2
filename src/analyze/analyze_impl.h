/*
 * analyze_impl.h — private to src/analyze: the stall analyzer's model types
 * (a configuration to predict, a prediction, the rates behind it), the
 * analysis object behind nostall_analysis, and the text escaping its
 * reports use. The public side is include/nostall_analyze.h.
 *
 *   model.c      the what-if model: nst_an_predict() and its scenarios
 *   recommend.c  the what-if rows and the four recommendations
 *   report.c     the terminal and JSON reports
 *   report_html.c  the HTML report with SVG charts
 *   escape.c     untrusted text (file names) for terminals, JSON, HTML
 *   meas.c       the measurements' table, reading them from JSON
 *   measure.c    the measurements that need no training step
 *   files.c      a dataset's distinct local files and the page cache
 *   analysis.c   the public handle: create, predict, copy-outs, reports
 *
 * Nothing here keeps global state; an analysis is used by one thread at a
 * time.
 */
#ifndef NST_ANALYZE_IMPL_H
#define NST_ANALYZE_IMPL_H

#include <stdio.h>

#include "nostall_analyze.h"

/* A configuration to predict. Start from nst_an_scenario_current(). */
typedef struct nst_an_scenario {
    double threads;    /* worker threads                                  */
    double io_depth;   /* reads in flight per worker                      */
    double cores;      /* CPUs of the machine                             */
    double cache_frac; /* MinIO cache, fraction of the dataset's bytes    */
    int minio;         /* 1: MinIO cache (misses bypass the page cache)   */
    double emu_mbps;   /* emulated storage MB/s (0: off)                  */
    double emu_latency_ms;
    double bw_scale; /* multiplies every storage bandwidth (what-if)    */
    double step_s;   /* training step per batch                         */
    double echo_factor;
    int echo_point; /* NOSTALL_ECHO_POINT_*                             */
    int cold;       /* 1: first epoch after dropping the page cache    */
    /* Partitioned cache over MPI (libnostall_mpi): `nodes` ranks each cache
     * cache_frac of the dataset, disjointly; items a peer holds come over
     * the network. nodes <= 1: off. */
    double nodes;
    double net_mbps;       /* network bandwidth per rank, MB/s                */
    double net_latency_ms; /* one remote request                              */
    /* Restart-marker what-if: CPU per item multiplied by this (1: the files
     * as they are; m->rst_cpu_ratio: after `nostall transcode`). */
    double cpu_scale;
    /* cache_transcode=1: the items the MinIO cache holds (cache_frac) are
     * decoded from the rewritten form, CPU x m->rst_cpu_ratio, in every
     * epoch after the fill; the rest as they are. */
    int cache_transcode;
    /* Prep servers (src/serve, docs/serve.md): prep_servers servers, each
     * making server_rate items/s; the trainer spends recv_cpu_s of its CPU
     * on each item it receives (one thread per server); prep_net_mbps > 0
     * caps the bytes they send (0: not limited). Storage reads are the
     * trainer's for its own workers' share of the items only. */
    double prep_servers, server_rate, recv_cpu_s, prep_net_mbps;
} nst_an_scenario;

/* What a trainer's prep makes per second with prep servers (nst_an_prep_mix). */
typedef struct nst_an_mix {
    double remote; /* items/s received from the servers              */
    double local;  /* items/s its own worker threads make            */
    double total;  /* remote + local                                 */
    double cpu;    /* the trainer's cores busy with both             */
} nst_an_mix;

typedef struct nst_an_pred {
    double epoch_s;       /* predicted epoch time (steady state, or cold)    */
    double compute_s;     /* the steps alone                                 */
    double prep_stall_s;  /* waiting caused by preprocessing (CPU)           */
    double fetch_stall_s; /* waiting caused by storage                       */
    double nofetch_s;     /* the epoch if fetching cost nothing              */
    double prep_s;        /* upstream CPU time / effective cores             */
    double fetch_s;       /* storage bound (device or per-worker latency)    */
    double eff_cores;
    double delivered;    /* items per epoch (echo included)                 */
    const char *bound;   /* "compute", "prep", "fetch"                      */
    double remote_items; /* of them prepared by prep servers              */
} nst_an_pred;

/* The rates behind the stalls, in items per second. */
typedef struct nst_an_rates {
    double cpu_item_s; /* CPU seconds of preprocessing per item (one core)     */
    double per_core;   /* items/s one core prepares                            */
    double prep;       /* items/s the configured threads prepare               */
    double fetch;      /* items/s storage delivers (cold, configured storage)  */
    double accel;      /* items/s the training step consumes                   */
    double item_bytes; /* mean bytes of a dataset file                         */
    double remote;     /* of `prep`, items/s from prep servers (0: none)       */
} nst_an_rates;

typedef struct nst_an_row {
    char group[16]; /* "cache", "cores", "storage", "echo", "partitioned",
                        "combined", "predict" */
    char label[96];
    double x; /* the varied value (for the curves) */
    nst_an_scenario s;
    nst_an_pred p;
} nst_an_row;

typedef struct nst_an_reco {
    char what[16]; /* "cores", "cache", "echo", "transcode", "start", "servers" */
    double value;  /* cores, cache fraction, echo factor, CPU ratio; < 0: none suffices */
    int needed;    /* 0: the stall it targets is already under the threshold */
    double epoch_before_s, epoch_after_s;
    char text[512];
} nst_an_reco;

#define NST_AN_MAX_PREDICT 32

struct nostall_analysis {
    nostall_analyze_meas m;
    nst_an_pred cold_run, warm_run; /* the model of the runs that were measured */
    nst_an_scenario cur;
    nst_an_pred now;   /* steady state of the configuration as given */
    const char *bound; /* classification of `now` */
    nst_an_row rows[96];
    int nrows;
    nst_an_reco reco[6];
    int nreco;
    nst_an_row predict[NST_AN_MAX_PREDICT]; /* nostall_analyze_predict() */
    int npredict;
    /* nostall_analyze_note(): the caller's lines, in order */
    char notes[NOSTALL_ANALYZE_MAX_NOTES][1024];
    int note_warning[NOSTALL_ANALYZE_MAX_NOTES];
    int nnotes;
};

#define NST_AN_STALL_OK 0.05 /* stall fraction considered negligible */
/* A transcode is recommended only when it cuts CPU per item below this (the
 * sample runs are short: a few % is noise). */
#define NST_AN_RST_USEFUL 0.90

/* model.c */
nst_an_scenario nst_an_scenario_current(const nostall_analyze_meas *m);
void nst_an_rates_get(const nostall_analyze_meas *m, nst_an_rates *r);
void nst_an_predict(const nostall_analyze_meas *m, const nst_an_scenario *s, nst_an_pred *p);
/* The cores a scenario leaves for preparing: the machine's less the step's
 * own CPU use (at least one, or all of fewer). */
double nst_an_cpu_free(const nostall_analyze_meas *m, const nst_an_scenario *s);
/* Items/s of a trainer with `threads` worker threads (local_cpu_s of CPU
 * per item each) and k prep servers of server_rate items/s each, received
 * at recv_cpu_s of the trainer's CPU per item (one thread per server: at
 * most k / recv_cpu_s), remote items/s at most net_items_s (0: no cap), on
 * `cores` cores free for preparing. The cores go first to the cheaper
 * items in CPU (received ones, as a rule), then to the others: the most
 * items/s those limits allow (an upper bound: the scheduler shares the
 * cores less well). Pure. */
void nst_an_prep_mix(double k, double server_rate, double recv_cpu_s, double net_items_s,
                     double threads, double cores, double local_cpu_s, nst_an_mix *o);
/* Bytes this rank reads in an epoch: what a cache fraction is a fraction of. */
double nst_an_shard_bytes(const nostall_analyze_meas *m);
/* Applies "key=value,key=value" (see nostall_analyze_predict) to *s.
 * Returns 0, or -1 with a message naming the bad key in err. */
int nst_an_scenario_parse(const nostall_analyze_meas *m, nst_an_scenario *s, const char *spec,
                          char *err, size_t errlen);

/* recommend.c: everything of `a` but its --predict rows and notes, from a->m. */
void nst_an_analyze(struct nostall_analysis *a);

/* report.c, report_html.c */
void nst_an_report_text(FILE *f, const struct nostall_analysis *a, const char *data);
void nst_an_report_json(FILE *f, const struct nostall_analysis *a, const char *data);
void nst_an_report_html(FILE *f, const struct nostall_analysis *a, const char *data);
/* The measured epoch figures, scaled from the (possibly capped) runs; the
 * stalls are parts of the epoch `ref` (the cold run's, or the cached run's
 * without a cold run), stall_frac of it: at most 1. start_stall: starting
 * the loader, once per epoch (the mean of the runs' *_start_s; 0 for
 * nostall's own runs). bound: "compute", "start", "prep" or "fetch". */
typedef struct nst_an_measured {
    double syn, warm, cold, ref, prep_stall, fetch_stall, start_stall, stall_frac;
    const char *bound;
} nst_an_measured;
void nst_an_measured_get(const nostall_analyze_meas *m, nst_an_measured *o);
/* Prep servers as measured (the run with them, loader alone): 0s without. */
typedef struct nst_an_remote {
    double servers, items, bytes, seconds;
    double items_s;                   /* items/s received                                 */
    double per_server;                /* items per second a server had items outstanding  */
    double net_bps;                   /* item bytes/s received                            */
    double item_bytes;                /* bytes / items                                    */
    double wait_ms;                   /* request to reply, mean                           */
    double recv_cpu_ms, local_cpu_ms; /* trainer CPU per received / own item */
    double share;                     /* of the run's items, received       */
} nst_an_remote;
void nst_an_remote_get(const nostall_analyze_meas *m, nst_an_remote *o);
/* What the model of prep servers includes, and what it does not. */
extern const char nst_an_remote_models[], nst_an_remote_omits[];
const char *nst_an_bound_words(const char *bound);

/* escape.c: untrusted text (file names, and messages that name them).
 * nst_an_text: for terminals and text reports: valid UTF-8 as it is,
 *   except '\' as "\\"; \n \t \r as such; other C0 controls and DEL as
 *   "\xHH"; C1 controls, U+2028..U+202E and U+2066..U+2069 as "\uHHHH";
 *   each byte not part of valid UTF-8 as "\xHH".
 * nst_an_line: printf, then nst_an_text, then a newline.
 * nst_an_text_buf: nst_an_text into buf (cap >= 1), cut at a character.
 * nst_an_json_string: a strict JSON string literal; bytes that are not
 *   UTF-8 become U+FFFD; returns 1 when one was replaced.
 * nst_an_json_member: "key": "..." and, when a byte was replaced,
 *   "key_hex": every byte as two hex digits.
 * nst_an_html_text: & < > " ' as entities, the rest as nst_an_text. */
void nst_an_text(FILE *f, const char *s);
void nst_an_line(FILE *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void nst_an_text_buf(char *buf, size_t cap, const char *s);
int nst_an_json_string(FILE *f, const char *s);
void nst_an_json_member(FILE *f, const char *key, const char *s);
void nst_an_html_text(FILE *f, const char *s);

/* files.c: a dataset's distinct local files (the public handle's body).
 * nst_an_files_index: list them from a dataset of `source` and `cfg`
 *   (info: what a loader would report, nst_loader_plan_info; may be NULL);
 *   errors name `fn`.
 * nst_an_files_drop: drop each from the page cache; the number that could
 *   not be (works on any list, e.g. a sample of the files).
 * nst_an_read_upto: read a file through buf, at most `max` bytes; bytes
 *   read, or -1 (errno set) when it cannot be opened or read.
 * nst_an_config_variant: a copy of cfg (NULL: defaults) with name/value
 *   pairs (a NULL-terminated list) set on top; NULL out of memory. */
struct nostall_analyze_files {
    char **v; /* each file once, in the order of its first item */
    size_t n;
    double bytes; /* their sizes (stat), each once */
};
int nst_an_files_index(nostall_analyze_files *f, const char *source, const nostall_config *cfg,
                       nostall_dataset_info *info, const char *fn);
void nst_an_files_clear(nostall_analyze_files *f);
int nst_an_file_drop(const char *path);
size_t nst_an_files_drop(const nostall_analyze_files *f);
long long nst_an_read_upto(const char *path, char *buf, size_t buflen, long long max);
nostall_config *nst_an_config_variant(const nostall_config *cfg, const char *const *set);

#endif
