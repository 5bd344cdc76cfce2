/*
 * tune.c — autotune's decision (see src/tune.h): the window's measurements
 * turned into the analyzer's measurements table, nst_an_predict (model.c)
 * asked for each candidate (workers, reads in flight; the MinIO cache's
 * size through the model's cache fraction; adaptive echoing's factor
 * through its echo factor), the cheapest that keeps the stall under the
 * target chosen, with hysteresis.
 *
 * Pure: touches only its arguments. Any thread.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "analyze/analyze_impl.h"
#include "tune.h"

enum { HEADROOM_PCT = 15, DOWN_VOTES = 2, CACHE_STEPS = 8 };

void nst_tune_init(nst_tune_state *st, const nst_tune_setting *start)
{
    memset(st, 0, sizeof *st);
    st->cur = *start;
}

uint32_t nst_tune_max_active(const nst_tune_budget *b)
{
    double c = ceil(b->cpus > 0 ? b->cpus - 1e-9 : 1);
    uint32_t n = c < 1 ? 1 : c > 1024 ? 1024 : (uint32_t)c;
    if (b->max_workers && n > b->max_workers) n = b->max_workers;
    return n;
}

/* The window's cache hit rate, among the items the workers fetched. */
static double hit_rate(const nst_tune_meas *m)
{
    return m->fetched > 0 ? fmin(1, fmax(0, m->hits / m->fetched)) : 0;
}

/* The model's stall (fraction of the step) of `w` workers with `d` reads
 * in flight each, for the window's items at the step time `step_s`, with
 * a cache hit rate `hit` and (adaptive echoing) `echo` uses per fresh
 * item. With adaptive echoing the items are the fresh ones (repeats cost
 * the workers nothing: the pool's assembler copies them); else every
 * delivered item (a fixed factor's repeats are made by the workers). */
static double predict(const nst_tune_budget *b, const nst_tune_meas *m, const nst_tune_state *st,
                      double w, double d, double step_s, double hit, double echo, const char **bound)
{
    nostall_analyze_meas mm;
    memset(&mm, 0, sizeof mm);
    double n = b->echo_max && m->items - m->echoed > 0 ? m->items - m->echoed : m->items;
    double per_busy = st->cur.workers > b->cpus && b->cpus > 0
                          ? b->cpus / st->cur.workers
                          : 1; /* time-sliced: busy wall > CPU */
    double fetch_cpu = fmax(0, m->fetch_ns - m->wait_ns);
    double bpi = st->read_bytes > 0 ? st->read_bytes : 1;
    mm.items_per_epoch = n;
    mm.batch_size = m->batches > 0 ? m->items / m->batches : n;
    mm.dataset_items = n;
    mm.dataset_bytes = n * bpi;
    mm.cores = b->cpus;
    mm.threads = w;
    mm.io_depth = d;
    mm.step_s = step_s;
    mm.prep_items = n;
    mm.prep_cpu_s = (fetch_cpu + m->decode_ns + m->augment_ns) * per_busy * 1e-9;
    mm.prep_fetch_ns = fetch_cpu;
    mm.prep_decode_ns = m->decode_ns;
    mm.prep_augment_ns = m->augment_ns;
    mm.echo_factor = 1;
    mm.echo_point = NOSTALL_ECHO_POINT_AUGMENT; /* adaptive: repeats are copies */
    /* each storage read's wait, as measured at the depth in force */
    mm.emu_latency_ms = st->read_wait_ns * 1e-6;
    if (st->fetch_ceiling > 0) mm.emu_mbps = st->fetch_ceiling * bpi / 1e6;
    nst_an_scenario s = nst_an_scenario_current(&mm);
    s.minio = hit > 0;
    s.cache_frac = fmin(1, fmax(0, hit));
    s.echo_factor = echo >= 1 ? echo : 1;
    nst_an_pred p;
    nst_an_predict(&mm, &s, &p);
    if (bound) *bound = p.bound;
    return p.compute_s > 0 ? fmax(0, p.epoch_s - p.compute_s) / p.compute_s : 0;
}

/* The cheapest (workers, depth) whose predicted stall at hit rate `hit`,
 * with the step shortened by the headroom, is under the target; when none
 * is, the cheapest of those with the least predicted stall (more reads or
 * workers that the model says do not help are not taken). 1 if one meets
 * it. */
static int cheapest(const nst_tune_budget *b, const nst_tune_meas *m, const nst_tune_state *st,
                    double step_s, double hit, nst_tune_setting *best)
{
    uint32_t wmax = nst_tune_max_active(b), dmax = b->max_depth ? b->max_depth : st->cur.depth;
    double hs = step_s * (100 - HEADROOM_PCT) / 100, least = 1e300;
    for (uint32_t w = 1; w <= wmax; w++)
        for (uint32_t d = b->max_depth ? 1 : st->cur.depth;; d *= 2) {
            if (d > dmax) d = dmax;
            double x = predict(b, m, st, w, d ? d : 1, hs, hit, 1, NULL);
            if (x <= b->target) {
                best->workers = w;
                best->depth = d;
                return 1;
            }
            if (x < least * (1 - 1e-3)) { /* a real gain, not rounding */
                least = x;
                best->workers = w;
                best->depth = d;
            }
            if (d >= dmax) break;
        }
    return 0;
}

/* The shard's bytes as the cache sees them: its items times the mean
 * read's bytes, and a tenth more (0: not known yet). */
static double shard_bytes(const nst_tune_budget *b, const nst_tune_state *st)
{
    return b->shard_items * st->read_bytes * 1.1;
}

/* The cache's admission cap to use: among eighths of the shard's bytes
 * (estimated as its items times the mean read's bytes, with a tenth more
 * for sizes that vary: the hit rate of a cap is its share of that, so a
 * cache at what it holds is not taken for the whole shard), never below
 * what is held nor above cache_max, the smallest that lets the fewest
 * workers keep the stall under the target once filled; when no cap does,
 * the smallest with the least stall at every worker and read the budget
 * allows. *hit: its hit rate once filled (-1: the current cap, while the
 * shard's size is not known: no read measured yet). */
static uint64_t choose_cache(const nst_tune_budget *b, const nst_tune_meas *m,
                             const nst_tune_state *st, double step_s, double *hit)
{
    double shard = shard_bytes(b, st), held = fmax(0, m->cache_held);
    uint32_t wmax = nst_tune_max_active(b), dmax = b->max_depth ? b->max_depth : st->cur.depth;
    *hit = 0;
    if (!(shard > 0)) {
        *hit = -1; /* unknown */
        return st->cur.cache;
    }
    double best = st->cur.cache, best_x = 1e300;
    uint32_t best_w = UINT32_MAX;
    for (int k = 0; k <= CACHE_STEPS; k++) {
        double want = shard * k / CACHE_STEPS;
        double cap = floor(fmin(b->cache_max, fmax(held, want))), h = fmin(1, cap / shard);
        nst_tune_setting s = st->cur;
        if (cheapest(b, m, st, step_s, h, &s)) {
            if (s.workers < best_w) {
                best_w = s.workers;
                best = cap;
                *hit = h;
            }
        } else if (best_w == UINT32_MAX) {
            double x = predict(b, m, st, wmax, dmax ? dmax : 1, step_s * (100 - HEADROOM_PCT) / 100,
                               h, 1, NULL);
            if (x < best_x * (1 - 1e-3)) {
                best_x = x;
                best = cap;
                *hit = h;
            }
        }
        if (cap >= b->cache_max) break;
    }
    return (uint64_t)best;
}

static void say(nst_tune_out *o, const nst_tune_budget *b, const char *what, double step_ms)
{
    int n = snprintf(o->why, sizeof o->why,
                     "%s: step %.2f ms, stall %.1f%% (model %.1f%%); %u of %u workers active, "
                     "%u batches ahead, %u reads in flight; %.2f of %.2f CPUs given back",
                     what, step_ms, 100 * o->meas_stall, 100 * o->pred_stall, o->set.workers,
                     nst_tune_max_active(b), o->set.ahead, o->set.depth, o->cpu_returned, b->cpus);
    if (n > 0 && (size_t)n < sizeof o->why && b->cache_max > 0) {
        int k = snprintf(o->why + n, sizeof o->why - (size_t)n,
                         "; cache %.1f of %.1f MB (hits %.0f%% now", (double)o->set.cache / 1e6,
                         b->cache_max / 1e6, 100 * o->hit_now);
        n = k > 0 ? n + k : n;
        if (n > 0 && (size_t)n < sizeof o->why)
            k = o->hit_filled >= 0 ? snprintf(o->why + n, sizeof o->why - (size_t)n,
                                              ", model %.0f%% once filled)", 100 * o->hit_filled)
                                   : snprintf(o->why + n, sizeof o->why - (size_t)n, ")");
        n = k > 0 ? n + k : n;
    }
    if (n > 0 && (size_t)n < sizeof o->why && b->echo_max > 0)
        snprintf(o->why + n, sizeof o->why - (size_t)n, "; echo at most %u uses of %u", o->set.echo,
                 b->echo_max);
}

/* The storage check: the last change added capacity for storage; if the
 * storage read rate did not grow by 5%, storage is saturated at that rate.
 * A window without reads (the cache served all) tells nothing. */
static void learn_ceiling(nst_tune_state *st, const nst_tune_meas *m)
{
    double rate = m->wall_ns > 0 ? m->reads / m->wall_ns * 1e9 : 0;
    if (!(m->reads > 0)) {
        st->raised_for_fetch = 0;
        return;
    }
    if (st->raised_for_fetch && st->rate_before > 0 && rate < 1.05 * st->rate_before)
        st->fetch_ceiling = fmax(rate, st->rate_before);
    else if (st->fetch_ceiling > 0 && rate > 1.1 * st->fetch_ceiling)
        st->fetch_ceiling = 0; /* storage got faster */
    st->raised_for_fetch = 0;
}

/* What the setting's last worker (or its reads in flight) is there for:
 * the bound the model sees with one less; with one worker and one read,
 * the step itself. */
static int what_for(const nst_tune_budget *b, const nst_tune_meas *m, const nst_tune_state *st,
                    const nst_tune_setting *s, double step_s, double hit)
{
    const char *bound = "compute";
    step_s = step_s * (100 - HEADROOM_PCT) / 100; /* as cheapest() judged */
    if (s->workers > 1)
        predict(b, m, st, s->workers - 1, s->depth ? s->depth : 1, step_s, hit, 1, &bound);
    else if (s->depth > 1)
        predict(b, m, st, 1, s->depth / 2, step_s, hit, 1, &bound);
    else
        return NOSTALL_TUNE_STEP_BOUND;
    return strcmp(bound, "fetch") == 0  ? NOSTALL_TUNE_FETCH_BOUND
           : strcmp(bound, "prep") == 0 ? NOSTALL_TUNE_PREP_BOUND
                                        : NOSTALL_TUNE_STEP_BOUND;
}

/* A value that rises at once and falls after DOWN_VOTES windows in a row
 * propose less (and `may_fall` holds): the new value. */
static uint64_t vote(uint64_t cur, uint64_t want, int may_fall, uint32_t *votes)
{
    if (want >= cur) {
        *votes = 0;
        return want;
    }
    if (!may_fall || ++*votes < DOWN_VOTES) return cur;
    *votes = 0;
    return want;
}

/* The cache's cap and the echo factor for the setting in o->set (its
 * workers and reads already chosen). */
static void cache_and_echo(nst_tune_state *st, const nst_tune_budget *b, const nst_tune_meas *m,
                           nst_tune_out *o, double step_s)
{
    double hs = step_s * (100 - HEADROOM_PCT) / 100, d = o->set.depth ? o->set.depth : 1;
    if (b->cache_max > 0) {
        double h_want;
        uint64_t want = choose_cache(b, m, st, step_s, &h_want);
        /* lower: when the stall is under the target, or the model says the
         * cache makes no difference to it (prep-bound) */
        double shard = shard_bytes(b, st);
        double h_cur = shard > 0 ? fmin(1, (double)o->set.cache / shard) : 0;
        int same =
            fabs(predict(b, m, st, o->set.workers, d, hs, h_cur, 1, NULL) -
                 predict(b, m, st, o->set.workers, d, hs, h_want > 0 ? h_want : 0, 1, NULL)) <= 1e-3;
        o->set.cache =
            vote(o->set.cache, want, o->meas_stall <= b->target || same, &st->cache_votes);
        o->hit_filled = shard > 0 ? fmin(1, (double)o->set.cache / shard) : -1;
    }
    if (b->echo_max > 0) {
        uint32_t e = 1;
        while (e < b->echo_max &&
               predict(b, m, st, o->set.workers, d, hs, o->hit_now, e, NULL) > b->target)
            e++;
        o->set.echo = (uint32_t)vote(o->set.echo, e, 1, &st->echo_votes);
    }
}

int nst_tune_decide(nst_tune_state *st, const nst_tune_budget *b, const nst_tune_meas *m,
                    nst_tune_out *o)
{
    memset(o, 0, sizeof *o);
    o->set = st->cur;
    o->hit_filled = -1;
    uint32_t wmax = nst_tune_max_active(b);
    if (o->set.workers > wmax) o->set.workers = wmax; /* a budget never exceeded */
    if (o->set.ahead > b->max_ahead) o->set.ahead = b->max_ahead;
    if (b->cache_max > 0 && (double)o->set.cache > b->cache_max)
        o->set.cache = (uint64_t)b->cache_max;
    if (b->echo_max > 0 && (o->set.echo < 1 || o->set.echo > b->echo_max))
        o->set.echo = o->set.echo < 1 ? 1 : b->echo_max;
    if (!(m->batches >= 1) || !(m->items > 0) || !(m->step_ns + m->stall_ns > 0)) {
        o->reason = NOSTALL_TUNE_MEASURING;
        snprintf(o->why, sizeof o->why, "measuring");
        goto out;
    }
    if (m->reads > 0) { /* what one storage read costs: kept for windows without */
        st->read_wait_ns = m->wait_ns / m->reads;
        st->read_bytes = m->bytes > 0 ? m->bytes / m->reads : st->read_bytes;
    }
    double step_s = m->step_ns / m->batches * 1e-9;
    o->hit_now = hit_rate(m);
    o->meas_stall = m->step_ns > 0 ? m->stall_ns / m->step_ns : 1e9;
    o->cpu_returned = fmax(0, fmin(b->cpus, wmax) - o->set.workers);
    if (st->settle) {
        st->settle--;
        o->reason = NOSTALL_TUNE_HOLD;
        o->pred_stall = predict(b, m, st, o->set.workers, o->set.depth ? o->set.depth : 1, step_s,
                                o->hit_now, 1, NULL);
        say(o, b, "settling after a change", step_s * 1e3);
        goto out;
    }
    learn_ceiling(st, m);
    nst_tune_setting best = o->set;
    int meets = cheapest(b, m, st, step_s, o->hit_now, &best);
    const char *bound = "compute";
    double cur_pred = predict(b, m, st, o->set.workers, o->set.depth ? o->set.depth : 1, step_s,
                              o->hit_now, 1, &bound);
    int up = best.workers > o->set.workers || best.depth > o->set.depth;
    int down = best.workers < o->set.workers || (best.depth < o->set.depth && !up);
    if (up) {
        st->down_votes = 0;
        if (strcmp(bound, "fetch") == 0) {
            st->raised_for_fetch = 1;
            st->rate_before = m->wall_ns > 0 ? m->reads / m->wall_ns * 1e9 : 0;
        }
        if (best.workers > o->set.workers) o->set.workers = best.workers;
        if (best.depth > o->set.depth) o->set.depth = best.depth;
    } else if (down && o->meas_stall <= b->target && ++st->down_votes >= DOWN_VOTES) {
        st->down_votes = 0;
        o->set.workers = best.workers;
        o->set.depth = best.depth;
    } else if (!down)
        st->down_votes = 0;
    /* bursts the means do not explain: more batches ahead */
    if (!up && o->meas_stall > 2 * b->target && cur_pred <= b->target) {
        if (o->set.ahead < b->max_ahead)
            o->set.ahead++;
        else if (o->set.workers < wmax) /* the model is optimistic here: one more */
            o->set.workers++;
    }
    cache_and_echo(st, b, m, o, step_s);
    o->pred_stall = predict(b, m, st, o->set.workers, o->set.depth ? o->set.depth : 1, step_s,
                            o->hit_now, o->set.echo ? o->set.echo : 1, &bound);
    o->cpu_returned = fmax(0, fmin(b->cpus, wmax) - o->set.workers);
    if ((o->set.ahead != st->cur.ahead || o->set.workers > st->cur.workers) && !up)
        o->reason = NOSTALL_TUNE_JITTER;
    else if (!meets)
        o->reason = NOSTALL_TUNE_AT_BUDGET;
    else
        o->reason = what_for(b, m, st, &o->set, step_s, o->hit_now);
    say(o, b, nostall_tune_reason_name(o->reason), step_s * 1e3);
out:;
    int changed = memcmp(&o->set, &st->cur, sizeof o->set) != 0;
    if (changed) st->settle = 1;
    st->cur = o->set;
    return changed;
}
