/*
 * loader_tune.c — autotune in the loader: the budgets and the starting
 * setting at create, the controller run after delivered batches (a window
 * of at least NST_TUNE_WINDOW batches and NST_TUNE_WINDOW_MS of time, or
 * NST_TUNE_WINDOW_MAX batches), which hands the counters' deltas to the
 * decision (analyze/tune.h) and applies what it chose: the active workers
 * (the others park on tune_cv), the reads in flight per worker (io_depth=0
 * only), batches_ahead (the backend's slot limit; the ring is sized for
 * the most at create), the MinIO cache's admission cap (the cache is made
 * at create with its most: cache_bytes, or what memory_budget leaves;
 * nst_cache_set_cap, which evicts nothing) and, with echo=adaptive only,
 * the most uses per item (nst_echo_set_max; a fixed echo_factor is part of
 * the bytes and never touched). Also the stats' autotune fields (with when
 * a setting last changed) and the reason.
 *
 * Budgets never exceeded: at most ceil(cpu_budget) workers active (a
 * fractional budget that comes from a cgroup quota is enforced by the
 * kernel; a given one is what the model plans for), and the ring's bytes
 * were checked against memory_budget at create (loader.c, plan_memory).
 *
 * Test hook: NOSTALL_TEST_TUNE_FLIP=1 (common/testhooks.h) changes every
 * setting after every batch (1 worker / all, depth 1 / its most, ahead 1 /
 * its most, the cache's cap 0 / its most, echo 1 / echo_max), to test that
 * the bytes do not depend on them.
 *
 * THREADS  setup: create. on_batch: the consumer thread. park: workers.
 *   wake: stop (any thread). stats, tune_reason: any thread. tune_mu
 *   guards tune_why and the parking condition; taken alone.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/clock.h"
#include "common/testhooks.h"
#include "loader_impl.h"

enum { NST_TUNE_WINDOW = 8, NST_TUNE_WINDOW_MAX = 256, NST_TUNE_WINDOW_MS = 200 };
#define NST_TUNE_TARGET 0.02 /* the stall allowed: 2% of the step */

static const char *const reason_names[] = {
#define NST_TUNE_NAME_(id, value, name) [value] = name,
    NOSTALL_TUNE_REASON_TABLE(NST_TUNE_NAME_)
#undef NST_TUNE_NAME_
};

const char *nostall_tune_reason_name(int code)
{
    if (code < 0 || code >= (int)(sizeof reason_names / sizeof *reason_names) || !reason_names[code])
        return "unknown";
    return reason_names[code];
}

static void set_why(struct nostall_loader *ld, const char *why)
{
    pthread_mutex_lock(&ld->tune_mu);
    snprintf(ld->tune_why, sizeof ld->tune_why, "%s", why);
    pthread_mutex_unlock(&ld->tune_mu);
}

int nst_tune_setup(struct nostall_loader *ld, const char *fn)
{
    const nst_optval *v = ld->cfg.v;
    (void)fn;
    ld->ahead_now = (uint32_t)v[NOSTALL_OPT_BATCHES_AHEAD].u;
    atomic_store(&ld->active, ld->nthreads);
    uint32_t echo_max = ld->echo_mode == NST_ECHO_ADAPTIVE ? (uint32_t)v[NOSTALL_OPT_ECHO_MAX].u : 0;
    atomic_store(&ld->echo_now, echo_max);
    if (!ld->autotune) return 0;
    nst_cache_stats cs;
    nst_cache_stats_get(ld->cache, &cs); /* zeros without a cache */
    ld->tune_flip = nst_test_env("NOSTALL_TEST_TUNE_FLIP") != NULL;
    ld->tune_depth = v[NOSTALL_OPT_IO_DEPTH].u == 0;
    if (!ld->ahead_max || !ld->bq->ops->limit) ld->ahead_max = ld->ahead_now; /* a group */
    if (ld->ahead_now > ld->ahead_max) ld->ahead_now = ld->ahead_max;
    nst_tune_budget *b = &ld->tune_budget;
    b->cpus = ld->cpu_budget_f;
    b->max_workers = ld->nthreads;
    b->max_ahead = ld->ahead_max;
    b->max_depth = ld->tune_depth ? NOSTALL_IO_DEPTH_AUTO_MAX : 0;
    b->target = NST_TUNE_TARGET;
    b->cache_max = (double)cs.budget;
    b->shard_items = (double)ld->sampler.per_rank;
    b->echo_max = echo_max;
    /* start: every worker the budget allows (the first window measures
     * with all of them), the configured batches_ahead, depth as io_depth=0
     * starts */
    nst_tune_setting st = {.workers = nst_tune_max_active(b),
                           .ahead = ld->ahead_now,
                           .depth = ld->tune_depth ? NST_IO_DEPTH_AUTO_START : 0,
                           .echo = echo_max,
                           .cache = cs.budget};
    nst_tune_init(&ld->tune, &st);
    ld->tune_start_ahead = st.ahead;
    ld->tune.settle = 1; /* the first window fills the pipeline */
    atomic_store(&ld->active, st.workers);
    atomic_store(&ld->depth_lim, st.depth);
    if (ld->bq->ops->limit) ld->bq->ops->limit(ld->bq, nst_loader_slots(ld, ld->ahead_now));
    STAT_ADD(ld->tune_reason, NOSTALL_TUNE_MEASURING);
    int n = snprintf(ld->tune_why, sizeof ld->tune_why,
                     "measuring: %u of %u workers active (budget %.2f CPUs), %u batches ahead (at "
                     "most %u), %u reads in flight",
                     st.workers, ld->nthreads, b->cpus, st.ahead, ld->ahead_max, st.depth);
    if (n > 0 && (size_t)n < sizeof ld->tune_why && st.cache)
        n += snprintf(ld->tune_why + n, sizeof ld->tune_why - (size_t)n, "; cache %.1f of %.1f MB",
                      (double)st.cache / 1e6, (double)st.cache / 1e6);
    if (n > 0 && (size_t)n < sizeof ld->tune_why && st.echo)
        snprintf(ld->tune_why + n, sizeof ld->tune_why - (size_t)n, "; echo at most %u uses of %u",
                 st.echo, st.echo);
    return 0;
}

void nst_tune_park(worker *w)
{
    struct nostall_loader *ld = w->ld;
    if (w->id < atomic_load_explicit(&ld->active, memory_order_relaxed)) return;
    pthread_mutex_lock(&ld->tune_mu);
    while (w->id >= atomic_load(&ld->active) && !atomic_load(&ld->stop_flag))
        pthread_cond_wait(&ld->tune_cv, &ld->tune_mu);
    pthread_mutex_unlock(&ld->tune_mu);
}

void nst_tune_wake(struct nostall_loader *ld)
{
    pthread_mutex_lock(&ld->tune_mu);
    pthread_cond_broadcast(&ld->tune_cv);
    pthread_mutex_unlock(&ld->tune_mu);
}

/* Put a setting in force. */
static void apply(struct nostall_loader *ld, const nst_tune_setting *s)
{
    uint32_t before = atomic_load(&ld->active);
    if (s->depth) atomic_store(&ld->depth_lim, s->depth);
    nst_cache_set_cap(ld->cache, s->cache); /* NULL: no-op */
    if (s->echo && s->echo != atomic_load(&ld->echo_now)) {
        atomic_store(&ld->echo_now, s->echo);
        nst_echo_set_max(ld->echo, s->echo);
    }
    if (s->ahead != ld->ahead_now && ld->bq->ops->limit) {
        ld->ahead_now = s->ahead;
        ld->bq->ops->limit(ld->bq, nst_loader_slots(ld, s->ahead));
    }
    if (s->workers != before) {
        pthread_mutex_lock(&ld->tune_mu);
        atomic_store(&ld->active, s->workers);
        if (s->workers > before) pthread_cond_broadcast(&ld->tune_cv);
        pthread_mutex_unlock(&ld->tune_mu);
    }
}

/* A setting changed now: when (the stats' time to settle). */
static void note_change(struct nostall_loader *ld, uint64_t now)
{
    if (!ld->tune_first_ns) ld->tune_first_ns = now;
    atomic_store_explicit(&ld->tune_last_batch, STAT_GET(ld->batches_delivered),
                          memory_order_relaxed);
    atomic_store_explicit(&ld->tune_last_ms, (now - ld->tune_first_ns) / 1000000,
                          memory_order_relaxed);
}

/* The test hook: every setting changes after every batch (batches_ahead
 * between its start and its most: it never goes below its start, which
 * the Python binding's leases count on). */
static void flip(struct nostall_loader *ld)
{
    nst_tune_setting s = ld->tune.cur;
    uint32_t most = nst_tune_max_active(&ld->tune_budget);
    s.workers = s.workers == 1 ? most : 1;
    if (s.depth) s.depth = s.depth == 1 ? ld->tune_budget.max_depth : 1;
    s.ahead = s.ahead == ld->tune_start_ahead ? ld->ahead_max : ld->tune_start_ahead;
    if (ld->tune_budget.cache_max > 0) s.cache = s.cache ? 0 : (uint64_t)ld->tune_budget.cache_max;
    if (s.echo) s.echo = s.echo == 1 ? ld->tune_budget.echo_max : 1;
    ld->tune.cur = s;
    apply(ld, &s);
    STAT_ADD(ld->tune_windows, 1);
    STAT_ADD(ld->tune_decisions, 1);
    atomic_store_explicit(&ld->tune_reason, NOSTALL_TUNE_TEST_FLIP, memory_order_relaxed);
    note_change(ld, nst_now_ns());
}

enum {
    C_BATCHES,
    C_ITEMS,
    C_STALL,
    C_STEP,
    C_FETCH,
    C_WAIT,
    C_DECODE,
    C_AUGMENT,
    C_READS,
    C_BYTES,
    C_FETCHED,
    C_HITS,
    C_ECHOED,
    C_COUNT_
};
_Static_assert(C_COUNT_ <= sizeof((struct nostall_loader *)0)->tune_prev / sizeof(uint64_t),
               "tune_prev holds every counter");

static void snapshot(struct nostall_loader *ld, uint64_t *c)
{
    memset(c, 0, sizeof ld->tune_prev);
    c[C_BATCHES] = STAT_GET(ld->batches_delivered);
    c[C_ITEMS] = STAT_GET(ld->items_delivered);
    c[C_STALL] = STAT_GET(ld->wait_ns);
    c[C_STEP] = STAT_GET(ld->consumer_busy_ns);
    for (uint32_t i = 0; i < ld->nthreads; i++) {
        worker_stats *w = &ld->workers[i].st;
        c[C_FETCH] += STAT_GET(w->fetch_ns);
        c[C_WAIT] += STAT_GET(w->storage_wait_ns);
        c[C_DECODE] += STAT_GET(w->decode_ns);
        c[C_AUGMENT] += STAT_GET(w->augment_ns);
        c[C_READS] += STAT_GET(w->storage_reads);
        c[C_BYTES] += STAT_GET(w->storage_bytes);
        c[C_FETCHED] += STAT_GET(w->fetch_items);
        c[C_HITS] += STAT_GET(w->cache_hits);
    }
    c[C_ECHOED] = STAT_GET(ld->dlv[NST_IO_echoed]);
}

void nst_tune_on_batch(struct nostall_loader *ld)
{
    if (ld->tune_flip) {
        flip(ld);
        return;
    }
    uint64_t now = nst_now_ns(), c[sizeof ld->tune_prev / sizeof *ld->tune_prev];
    if (!ld->tune_prev_ns) { /* the first batch starts the first window */
        snapshot(ld, ld->tune_prev);
        ld->tune_prev_ns = ld->tune_first_ns = now;
        return;
    }
    uint64_t nb = STAT_GET(ld->batches_delivered) - ld->tune_prev[C_BATCHES];
    if (nb < NST_TUNE_WINDOW || (now - ld->tune_prev_ns < (uint64_t)NST_TUNE_WINDOW_MS * 1000000 &&
                                 nb < NST_TUNE_WINDOW_MAX))
        return;
    snapshot(ld, c);
    const uint64_t *p = ld->tune_prev;
    nst_tune_meas m = {.batches = (double)(c[C_BATCHES] - p[C_BATCHES]),
                       .items = (double)(c[C_ITEMS] - p[C_ITEMS]),
                       .wall_ns = (double)(now - ld->tune_prev_ns),
                       .stall_ns = (double)(c[C_STALL] - p[C_STALL]),
                       .step_ns = (double)(c[C_STEP] - p[C_STEP]),
                       .fetch_ns = (double)(c[C_FETCH] - p[C_FETCH]),
                       .wait_ns = (double)(c[C_WAIT] - p[C_WAIT]),
                       .decode_ns = (double)(c[C_DECODE] - p[C_DECODE]),
                       .augment_ns = (double)(c[C_AUGMENT] - p[C_AUGMENT]),
                       .reads = (double)(c[C_READS] - p[C_READS]),
                       .bytes = (double)(c[C_BYTES] - p[C_BYTES]),
                       .fetched = (double)(c[C_FETCHED] - p[C_FETCHED]),
                       .hits = (double)(c[C_HITS] - p[C_HITS]),
                       .echoed = (double)(c[C_ECHOED] - p[C_ECHOED])};
    nst_cache_stats cs;
    nst_cache_stats_get(ld->cache, &cs);
    m.cache_held = (double)cs.bytes;
    memcpy(ld->tune_prev, c, sizeof c);
    ld->tune_prev_ns = now;
    nst_tune_out o;
    int changed = nst_tune_decide(&ld->tune, &ld->tune_budget, &m, &o);
    if (changed) apply(ld, &o.set);
    STAT_ADD(ld->tune_windows, 1);
    if (changed) {
        STAT_ADD(ld->tune_decisions, 1);
        note_change(ld, now);
    }
    atomic_store_explicit(&ld->tune_reason, (uint64_t)o.reason, memory_order_relaxed);
    atomic_store_explicit(&ld->tune_returned_milli, (uint64_t)llround(o.cpu_returned * 1000),
                          memory_order_relaxed);
    set_why(ld, o.why);
}

void nst_tune_stats(struct nostall_loader *ld, nostall_stats *s)
{
    s->autotune = (uint64_t)ld->autotune;
    s->active_workers = atomic_load_explicit(&ld->active, memory_order_relaxed);
    s->tuned_batches_ahead = atomic_load(&ld->ahead_now);
    s->tuned_io_depth = atomic_load_explicit(&ld->depth_lim, memory_order_relaxed);
    s->tune_windows = STAT_GET(ld->tune_windows);
    s->tune_decisions = STAT_GET(ld->tune_decisions);
    s->tune_reason = STAT_GET(ld->tune_reason);
    s->cpu_budget_milli = (uint64_t)llround(ld->cpu_budget_f * 1000);
    s->cpu_returned_milli = STAT_GET(ld->tune_returned_milli);
    s->tune_last_change_batch = STAT_GET(ld->tune_last_batch);
    s->tune_last_change_ms = STAT_GET(ld->tune_last_ms);
    nst_cache_stats cs;
    nst_cache_stats_get(ld->cache, &cs); /* zeros without a cache */
    s->cache_budget_bytes = cs.budget;
    s->tuned_cache_bytes = cs.cap;
    s->cache_capped = cs.capped;
    s->tuned_echo_max = atomic_load(&ld->echo_now);
}

size_t nostall_loader_tune_reason(const nostall_loader *cld, char *buf, size_t n)
{
    struct nostall_loader *ld = (struct nostall_loader *)cld;
    if (!ld || !buf || !n) return 0;
    pthread_mutex_lock(&ld->tune_mu);
    int k = snprintf(buf, n, "%s", ld->tune_why);
    pthread_mutex_unlock(&ld->tune_mu);
    return k < 0 ? 0 : (size_t)k;
}
