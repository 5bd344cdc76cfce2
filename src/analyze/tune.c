/*
 * tune.c — autotune's decision (see src/tune.h): the window's measurements
 * turned into the analyzer's measurements table, nst_an_predict (model.c)
 * asked for each candidate (workers, reads in flight), the cheapest that
 * keeps the stall under the target chosen, with hysteresis.
 *
 * Pure: touches only its arguments. Any thread.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "analyze/analyze_impl.h"
#include "tune.h"

enum { HEADROOM_PCT = 15, DOWN_VOTES = 2 };

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

/* The model's stall (fraction of the step) of `w` workers with `d` reads
 * in flight each, for the window's items at the step time `step_s`. */
static double predict(const nst_tune_budget *b, const nst_tune_meas *m, const nst_tune_state *st,
                      double w, double d, double step_s, const char **bound)
{
    nostall_analyze_meas mm;
    memset(&mm, 0, sizeof mm);
    double n = m->items, per_busy = st->cur.workers > b->cpus && b->cpus > 0
                                        ? b->cpus / st->cur.workers
                                        : 1; /* time-sliced: busy wall > CPU */
    double fetch_cpu = fmax(0, m->fetch_ns - m->wait_ns);
    double bpi = m->reads > 0 && m->bytes > 0 ? m->bytes / m->reads : 1;
    mm.items_per_epoch = n;
    mm.batch_size = m->batches > 0 ? n / m->batches : n;
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
    /* each read's wait, as measured at the depth in force */
    mm.emu_latency_ms = n > 0 ? m->wait_ns / n * 1e-6 : 0;
    if (st->fetch_ceiling > 0) mm.emu_mbps = st->fetch_ceiling * bpi / 1e6;
    nst_an_scenario s = nst_an_scenario_current(&mm);
    nst_an_pred p;
    nst_an_predict(&mm, &s, &p);
    if (bound) *bound = p.bound;
    return p.compute_s > 0 ? fmax(0, p.epoch_s - p.compute_s) / p.compute_s : 0;
}

/* The cheapest (workers, depth) whose predicted stall, with the step
 * shortened by the headroom, is under the target; when none is, the
 * cheapest of those with the least predicted stall (more reads or workers
 * that the model says do not help are not taken). 1 if one meets it. */
static int cheapest(const nst_tune_budget *b, const nst_tune_meas *m, const nst_tune_state *st,
                    double step_s, nst_tune_setting *best)
{
    uint32_t wmax = nst_tune_max_active(b), dmax = b->max_depth ? b->max_depth : st->cur.depth;
    double hs = step_s * (100 - HEADROOM_PCT) / 100, least = 1e300;
    for (uint32_t w = 1; w <= wmax; w++)
        for (uint32_t d = b->max_depth ? 1 : st->cur.depth;; d *= 2) {
            if (d > dmax) d = dmax;
            double x = predict(b, m, st, w, d ? d : 1, hs, NULL);
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

static void say(nst_tune_out *o, const nst_tune_budget *b, const char *what, double step_ms,
                double up_ms)
{
    snprintf(o->why, sizeof o->why,
             "%s: step %.2f ms, stall %.1f%% (model %.1f%%); %u of %u workers active, "
             "%u batches ahead, %u reads in flight; %.2f of %.2f CPUs given back",
             what, step_ms, 100 * o->meas_stall, 100 * o->pred_stall, o->set.workers,
             nst_tune_max_active(b), o->set.ahead, o->set.depth, o->cpu_returned, b->cpus);
    (void)up_ms;
}

/* The storage check: the last change added capacity for storage; if the
 * item rate did not grow by 5%, storage is saturated at that rate. */
static void learn_ceiling(nst_tune_state *st, double rate)
{
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
                    const nst_tune_setting *s, double step_s)
{
    const char *bound = "compute";
    step_s = step_s * (100 - HEADROOM_PCT) / 100; /* as cheapest() judged */
    if (s->workers > 1)
        predict(b, m, st, s->workers - 1, s->depth ? s->depth : 1, step_s, &bound);
    else if (s->depth > 1)
        predict(b, m, st, 1, s->depth / 2, step_s, &bound);
    else
        return NOSTALL_TUNE_STEP_BOUND;
    return strcmp(bound, "fetch") == 0  ? NOSTALL_TUNE_FETCH_BOUND
           : strcmp(bound, "prep") == 0 ? NOSTALL_TUNE_PREP_BOUND
                                        : NOSTALL_TUNE_STEP_BOUND;
}

int nst_tune_decide(nst_tune_state *st, const nst_tune_budget *b, const nst_tune_meas *m,
                    nst_tune_out *o)
{
    memset(o, 0, sizeof *o);
    o->set = st->cur;
    uint32_t wmax = nst_tune_max_active(b);
    if (o->set.workers > wmax) o->set.workers = wmax; /* a budget never exceeded */
    if (o->set.ahead > b->max_ahead) o->set.ahead = b->max_ahead;
    if (!(m->batches >= 1) || !(m->items > 0) || !(m->step_ns + m->stall_ns > 0)) {
        o->reason = NOSTALL_TUNE_MEASURING;
        snprintf(o->why, sizeof o->why, "measuring");
        goto out;
    }
    double step_s = m->step_ns / m->batches * 1e-9,
           rate = m->wall_ns > 0 ? m->items / m->wall_ns * 1e9 : 0;
    o->meas_stall = m->step_ns > 0 ? m->stall_ns / m->step_ns : 1e9;
    o->cpu_returned = fmax(0, fmin(b->cpus, wmax) - o->set.workers);
    if (st->settle) {
        st->settle--;
        o->reason = NOSTALL_TUNE_HOLD;
        o->pred_stall =
            predict(b, m, st, o->set.workers, o->set.depth ? o->set.depth : 1, step_s, NULL);
        say(o, b, "settling after a change", step_s * 1e3, 0);
        goto out;
    }
    learn_ceiling(st, rate);
    nst_tune_setting best = o->set;
    int meets = cheapest(b, m, st, step_s, &best);
    const char *bound = "compute";
    double cur_pred =
        predict(b, m, st, o->set.workers, o->set.depth ? o->set.depth : 1, step_s, &bound);
    int up = best.workers > o->set.workers || best.depth > o->set.depth;
    int down = best.workers < o->set.workers || (best.depth < o->set.depth && !up);
    if (up) {
        st->down_votes = 0;
        if (strcmp(bound, "fetch") == 0) {
            st->raised_for_fetch = 1;
            st->rate_before = rate;
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
    o->pred_stall =
        predict(b, m, st, o->set.workers, o->set.depth ? o->set.depth : 1, step_s, &bound);
    o->cpu_returned = fmax(0, fmin(b->cpus, wmax) - o->set.workers);
    if ((o->set.ahead != st->cur.ahead || o->set.workers > st->cur.workers) && !up)
        o->reason = NOSTALL_TUNE_JITTER;
    else if (!meets)
        o->reason = NOSTALL_TUNE_AT_BUDGET;
    else
        o->reason = what_for(b, m, st, &o->set, step_s);
    say(o, b, nostall_tune_reason_name(o->reason), step_s * 1e3, 0);
out:;
    int changed = memcmp(&o->set, &st->cur, sizeof o->set) != 0;
    if (changed) st->settle = 1;
    st->cur = o->set;
    return changed;
}
