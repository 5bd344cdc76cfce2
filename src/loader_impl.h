/*
 * loader_impl.h — the loader's parts, shared by the files of the loader:
 * loader.c (the public API: create, free, stop, join, next, release,
 * introspection; the plan's lengths), loader_source.c (the items and the
 * fetch environment, made at create), loader_state.c (get/set state),
 * loader_stats.c (statistics and the skip table), loader_tune.c
 * (autotune: the active workers, batches ahead, reads in flight, the cache
 * cap, adaptive echoing's factor) and
 * worker.c (the one
 * worker loop: tickets, fetches in flight, each item made through data
 * echoing's entry, echo/echo.h). Nothing else includes it.
 *
 * LOCKS  The loader itself has one small mutex, `skip_mu` (the table of
 *   distinct bad items, filled by the backend's sink under its lock and
 *   read by any thread: taken last). Everything about batches is the
 *   backend's (batch/ring.c or coord/). Statistics are per-worker relaxed
 *   atomics written only by their owner and summed at snapshot, plus the
 *   consumer's, written by the consumer thread (or the backend's sink).
 */
#ifndef NST_LOADER_IMPL_H
#define NST_LOADER_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "batch/batches.h"
#include "cache/minio.h"
#include "common/config.h"
#include "echo/echo.h"
#include "dataset.h"
#include "recipe/recipe.h"
#include "source/fetch.h"
#include "dataset/index.h"
#include "order/sampler.h"
#include "source/throttle.h"
#include "tune.h"

typedef _Atomic uint64_t nst_counter;

/* Single-writer add: only the owning thread writes, any thread may read. */
#define STAT_ADD(c, d)                                                                             \
    atomic_store_explicit(&(c), atomic_load_explicit(&(c), memory_order_relaxed) + (d),            \
                          memory_order_relaxed)
#define STAT_GET(c) atomic_load_explicit(&(c), memory_order_relaxed)

typedef struct worker_stats {
    nst_counter fetch_items, fetch_bytes, fetch_ns;
    nst_counter decode_items, decode_pixels, decode_ns;
    nst_counter augment_items, augment_bytes, augment_ns;
    nst_counter idle_ns;
    nst_counter storage_reads, storage_bytes, storage_wait_ns;
    nst_counter cache_hits, cache_misses;
    nst_counter transcoded, transcode_ns; /* cache_transcode rewrites (fetch stage) */
    nst_counter depth;                    /* io_depth in effect (auto: grows)      */
    nst_counter gpu_hw_items, gpu_default_items, gpu_cpu_items; /* the GPU route's decoders */
} worker_stats;

/* A worker's arrays for making its ready items at once (worker.c). */
typedef struct worker_many worker_many;
void nst_worker_many_free(worker_many *b);

typedef struct worker {
    _Alignas(64) worker_stats st;
    struct nostall_loader *ld;
    pthread_t thread;
    int started;
    nst_fetcher *fetch; /* the fetches in flight, oldest first          */
    nst_ticket *tk;     /* their tickets, same FIFO order (cap entries)  */
    uint32_t tk_head, tk_count;
    /* Tickets kept now (the FIFO's modulus, as in the fetcher) / room for
     * (io_depth=0: auto grows depth up to cap) / the depth decided, applied
     * once the FIFO does not wrap (depth_apply). */
    uint32_t depth, cap, want;
    /* io_depth=0: the current window of completed items (depth_adapt) */
    uint64_t win_wait_ns, win_busy_ns;
    uint32_t win_items, win_full;
    nst_recipe_worker *rw;
    uint32_t id;       /* 0 .. nthreads-1: autotune parks those >= active */
    worker_many *many; /* make_many with the route (echo off); else NULL */
} worker;

typedef struct skip_entry {
    uint64_t index;
    int status;
    char *msg;
} skip_entry;

struct nostall_loader {
    nostall_config cfg;
    char *source;
    nst_sampler sampler;
    nst_recipe *recipe;  /* the dataset's: borrowed, never freed here    */
    nostall_dataset *ds; /* the items (one reference held; dataset.h)    */
    pid_t pid;
    nst_cache *cache;      /* NULL: no cache; thread-safe, lock-free reads */
    nst_throttle throttle; /* emulated storage (off unless configured)    */
    nst_fetch_env fenv;    /* what every worker's fetcher shares          */

    nst_batches *bq;             /* the batch backend: local ring or a group    */
    struct nst_gpu_dring *dring; /* gpu_output=device: the device ring over
                                    bq's arena (gpu/dring.c); NULL: host  */
    nst_engine_plan plan;        /* the delivery plan the backend walks          */

    /* data echoing (echo/echo.h; the ring's hooks; NULL/off in a group) */
    int echo_mode, echo_point; /* NST_ECHO_*, NOSTALL_ECHO_POINT_*        */
    struct nst_echo *echo;

    /* Immutable after create. */
    uint32_t batch_size, nthreads;
    uint32_t cpu_budget; /* the default of threads (common/cpubudget.h) */
    int on_bad, drop_last;
    uint64_t epochs_limit; /* 0 = unlimited */
    uint64_t batches_per_epoch, items_per_epoch;

    /* the skip table: distinct bad items, sorted by index (skip_mu) */
    pthread_mutex_t skip_mu;
    skip_entry *skips;
    uint64_t nskips, skips_cap, skipped_total;
    char *skip_reason;    /* copy handed out by nostall_loader_skipped      */
    uint64_t fingerprint; /* of the item list and byte options (skip_mu)  */

    atomic_int stop_flag;
    /* consumer side */
    uint64_t cons_last_ns; /* when next last returned (consumer thread)  */
    nst_counter consumer_busy_ns, batches_delivered, items_delivered, wait_ns;
    nst_counter dlv[NST_IO_COUNT_]; /* accounting of delivered batches      */

    worker *workers;
    struct nst_prep *prep; /* prep_servers: the client (serve/serve.h)     */
    /* nst_loader_create_backend: the backend's maker (NULL: ring/group) */
    int (*mk_backend)(void *ctx, const nst_recipe *r, nst_batches **out, const char *fn);
    void *mk_ctx;
    struct nst_stream *stream; /* shard_mode=stream: the shards' reader    */

    /* autotune (loader_tune.c). Workers read `active` and `depth_lim`
     * (atomics); parked workers wait on tune_cv under tune_mu, which also
     * guards tune_why. The rest is the consumer thread's (the controller
     * runs after a delivered batch), set at create otherwise. */
    int autotune, tune_flip, tune_depth;  /* tune_depth: io_depth=0, tuned */
    double cpu_budget_f;                  /* CPUs (cpu_budget or derived)    */
    uint32_t ahead_max, tune_start_ahead; /* batches_ahead: the ring's most, the start */
    _Atomic uint32_t ahead_now;           /* ... and now                    */
    uint64_t plan_batches;                /* an epoch's most batches (plan_memory) */
    uint32_t plan_extra;                  /* slots beyond batches_ahead + 1 */
    _Atomic uint32_t active, depth_lim;
    pthread_mutex_t tune_mu;
    pthread_cond_t tune_cv;
    char tune_why[NST_TUNE_WHY];
    nst_tune_state tune;
    nst_tune_budget tune_budget;
    uint64_t tune_prev[16], tune_prev_ns; /* the window's start (loader_tune.c) */
    uint64_t cache_auto;                  /* autotune: the cache memory_budget
                                             leaves (no cache_bytes; plan_memory) */
    _Atomic uint32_t echo_now;            /* adaptive echoing's most uses now */
    uint64_t tune_first_ns;               /* the first delivered batch */
    nst_counter tune_windows, tune_decisions, tune_reason, tune_returned_milli;
    nst_counter tune_last_batch, tune_last_ms; /* the last change of a setting */

    /* An elastic resume from every old rank's state (loader_state.c; the
     * consumer thread): the sampler's band of positions not yet consumed
     * (owned), and the states it was computed from, in the epoch
     * chain_epoch (chain_levels world-size changes), saved again by
     * nostall_loader_get_states so a later resume sees them too. */
    uint64_t *res_band;
    nostall_state *chain;
    uint32_t chain_n, chain_levels;
    uint64_t chain_epoch;
};

/* Deliveries in `epoch` (the shard, or with fixed item echoing the sum of
 * the items' uses: memoized by echo/, its mutex taken inside); the plan's
 * batch length. */
uint64_t nst_loader_epoch_len(struct nostall_loader *ld, uint64_t epoch);
uint32_t nst_loader_batch_len(void *ctx, uint64_t epoch, uint64_t pos);
/* The engine's RESERVE is on (every rank delivers the plan's batches). */
int nst_loader_uses_reserve(const struct nostall_loader *ld);
/* The sampler position of a ticket's item: its position, or for a reserve
 * item (NST_ENGINE_RESERVE, batch/engine.h) the rank's dropped remainder after
 * the plan's end, then its own items from the start, wrapped (as torch's
 * DistributedSampler pads). */
uint64_t nst_loader_item_pos(struct nostall_loader *ld, const nst_ticket *t);
/* The plan's budget of bad items in `epoch` (max_bad_fraction of *items,
 * the planned ones). */
uint64_t nst_loader_max_bad(void *ctx, uint64_t epoch, uint64_t *items);
/* The plan's move and moved (batch/engine.h): with gpu_output=device the
 * image field's compaction and top-ups are copies in the device ring
 * (gpu/dring.c); every other field, and the host output, the engine's. */
int nst_loader_move(void *ctx, uint32_t field, uint8_t *dst, const uint8_t *src, size_t bytes);
int nst_loader_moved(void *ctx);

/* loader_source.c, at create: the recipe (or mix) from ld->ds, sampler,
 * echo mode and plan; then the fetch environment (after the backend: the
 * cache's keys). */
int nst_loader_make_source(struct nostall_loader *ld, const char *source, const char *fn);
int nst_loader_make_fetch_env(struct nostall_loader *ld, const char *fn);

/* worker.c: start / the thread body. */
int nst_workers_create(struct nostall_loader *ld, const char *fn);
/* A ticket's item: its dataset index and its own epoch (prep servers). */
uint64_t nst_worker_map(void *ctx, const nst_ticket *t, uint64_t *item_epoch);
void *nst_worker_main(void *arg);
enum { NST_IO_DEPTH_AUTO_START = 4, NST_IO_DEPTH_AUTO_WINDOW = 16 };

/* loader_tune.c: autotune. setup at create (after the backend, before the
 * workers start); on_batch on the consumer thread after each delivered
 * batch; park in a worker holding no ticket while it is not active
 * (returns at once otherwise, and on stop); wake at stop; stats at a
 * snapshot. nst_loader_slots: the ring slots batches_ahead `ahead` needs. */
enum { NST_TUNE_AHEAD_MAX = 16 };
uint32_t nst_loader_slots(const struct nostall_loader *ld, uint64_t ahead);
int nst_tune_setup(struct nostall_loader *ld, const char *fn);
void nst_tune_on_batch(struct nostall_loader *ld);
void nst_tune_park(worker *w);
void nst_tune_wake(struct nostall_loader *ld);
void nst_tune_stats(struct nostall_loader *ld, nostall_stats *s);

#endif
