/*
 * test_tune.c — autotune's decision (analyze/tune.h) as a pure function on
 * fixed windows of measurements: prep-bound (more workers, as many as the
 * model needs), fetch-bound (reads in flight before workers; a storage
 * rate that does not grow becomes a ceiling), step-bound (workers parked
 * after two windows that agree, the CPU given back said), the step time
 * halving (more workers at once), budgets of 0.5, 1 and 2 CPUs, bursts
 * (batches_ahead up to its most), the window skipped after a change, and
 * on a thousand pseudo-random windows that no budget is ever exceeded.
 * The MinIO cache's size (a cache that fits the budget: the whole shard
 * and a tenth; one that does not: all of the budget; one that makes no
 * difference: what is held, never less) and adaptive echoing's factor
 * (storage-bound: the smallest that hides the stall; step-bound: 1), with
 * their expectations computed by hand in the comments.
 * No clock: every input is a number given here. Then the batch engine's
 * slot_limit, through which the loader applies batches_ahead: batches
 * open in no more slots than it allows, and more once it grows.
 */
#include <stdlib.h>
#include <string.h>

#include "batch/engine.h"
#include "check.h"
#include "recipe/recipe.h"
#include "tune.h"

/* A window of 100 batches of 8 items: step_ms per batch, stall_ms per
 * batch, CPU ms per item (decode), storage wait ms per item. */
static nst_tune_meas win(double step_ms, double stall_ms, double cpu_ms, double wait_ms)
{
    nst_tune_meas m;
    memset(&m, 0, sizeof m);
    m.batches = 100;
    m.items = 800;
    m.step_ns = 100 * step_ms * 1e6;
    m.stall_ns = 100 * stall_ms * 1e6;
    m.wall_ns = m.step_ns + m.stall_ns;
    m.decode_ns = 800 * cpu_ms * 1e6;
    m.wait_ns = 800 * wait_ms * 1e6;
    m.fetch_ns = m.wait_ns;
    m.reads = 800;
    m.bytes = 800 * 100000.0;
    return m;
}

static nst_tune_budget budget(double cpus, uint32_t workers, uint32_t depth)
{
    nst_tune_budget b = {.cpus = cpus,
                         .max_workers = workers,
                         .max_ahead = 8,
                         .max_depth = depth,
                         .target = 0.02};
    return b;
}

static void start(nst_tune_state *st, uint32_t w, uint32_t ahead, uint32_t depth)
{
    nst_tune_setting s = {.workers = w, .ahead = ahead, .depth = depth};
    nst_tune_init(st, &s);
}

static void prep_bound(void)
{
    /* 0.25 ms of CPU per item: 2 ms per batch; a 1 ms step needs 3 of 4 */
    nst_tune_budget b = budget(4, 4, 32);
    nst_tune_state st;
    nst_tune_out o;
    start(&st, 1, 3, 4);
    nst_tune_meas m = win(1, 1, 0.25, 0);
    CHECK_EQ(nst_tune_decide(&st, &b, &m, &o), 1);
    CHECK_EQ(o.set.workers, 3);
    CHECK_EQ(o.reason, NOSTALL_TUNE_PREP_BOUND);
    CHECK(o.set.depth <= 4);
    CHECK(strstr(o.why, "3 of 4 workers") != NULL);
    /* the next window mixes two settings: skipped */
    CHECK_EQ(nst_tune_decide(&st, &b, &m, &o), 0);
    CHECK_EQ(o.reason, NOSTALL_TUNE_HOLD);
    CHECK_EQ(st.cur.workers, 3);
}

static void fetch_bound(void)
{
    /* 4 ms storage wait per item at depth 1, little CPU, a 2 ms step: reads
     * in flight (free) before workers (CPU): 1 worker, 32 reads */
    nst_tune_budget b = budget(2, 2, 32);
    nst_tune_state st;
    nst_tune_out o;
    start(&st, 1, 3, 1);
    nst_tune_meas m = win(2, 30, 0.01, 4);
    CHECK_EQ(nst_tune_decide(&st, &b, &m, &o), 1);
    CHECK_EQ(o.set.workers, 1);
    CHECK_EQ(o.set.depth, 32);
    CHECK_EQ(o.reason, NOSTALL_TUNE_FETCH_BOUND);
    CHECK(st.raised_for_fetch);
    /* skipped window, then the same item rate: storage is saturated */
    CHECK_EQ(nst_tune_decide(&st, &b, &m, &o), 0);
    nst_tune_decide(&st, &b, &m, &o);
    CHECK(st.fetch_ceiling > 0);
    CHECK(o.set.workers <= 2 && o.set.depth <= 32);
}

static void step_bound(void)
{
    /* 0.1 ms per item (0.8 ms a batch), a 20 ms step: one worker is enough;
     * fewer only after two windows in a row agree */
    nst_tune_budget b = budget(4, 4, 32);
    nst_tune_state st;
    nst_tune_out o;
    start(&st, 4, 3, 4);
    nst_tune_meas m = win(20, 0, 0.1, 0);
    CHECK_EQ(nst_tune_decide(&st, &b, &m, &o), 0);
    CHECK_EQ(st.cur.workers, 4);
    CHECK_EQ(nst_tune_decide(&st, &b, &m, &o), 1);
    CHECK_EQ(o.set.workers, 1);
    CHECK_EQ(o.set.depth, 1);
    CHECK_EQ(o.reason, NOSTALL_TUNE_STEP_BOUND);
    CHECK(o.cpu_returned > 2.99 && o.cpu_returned < 3.01);
    CHECK(strstr(o.why, "3.00 of 4.00 CPUs given back") != NULL);
    /* a stall above the target blocks going down */
    start(&st, 4, 3, 4);
    nst_tune_meas s = win(20, 2, 0.1, 0);
    nst_tune_decide(&st, &b, &s, &o);
    nst_tune_decide(&st, &b, &s, &o);
    CHECK_EQ(st.cur.workers, 4);
}

static void step_halves(void)
{
    /* 1 ms per item (8 ms a batch) on 2 CPUs: a 10 ms step needs 1 worker;
     * halved to 5 ms, it needs 2 at once */
    nst_tune_budget b = budget(2, 2, 32);
    nst_tune_state st;
    nst_tune_out o;
    start(&st, 1, 3, 1);
    nst_tune_meas m = win(10, 0, 1, 0);
    CHECK_EQ(nst_tune_decide(&st, &b, &m, &o), 0);
    CHECK_EQ(o.reason, NOSTALL_TUNE_STEP_BOUND);
    nst_tune_meas h = win(5, 3, 1, 0);
    CHECK_EQ(nst_tune_decide(&st, &b, &h, &o), 1);
    CHECK_EQ(o.set.workers, 2);
    CHECK_EQ(o.reason, NOSTALL_TUNE_PREP_BOUND);
    /* back to 10 ms: 1 again, after the skipped window and two that agree */
    nst_tune_decide(&st, &b, &m, &o);
    CHECK_EQ(nst_tune_decide(&st, &b, &m, &o), 0);
    CHECK_EQ(nst_tune_decide(&st, &b, &m, &o), 1);
    CHECK_EQ(o.set.workers, 1);
}

static void budgets(void)
{
    nst_tune_state st;
    nst_tune_out o;
    /* 1 ms per item, a 10 ms step, 2 workers started */
    nst_tune_meas m = win(10, 2, 1, 0);
    /* 0.5 CPUs: one worker at most (it had two) */
    nst_tune_budget b = budget(0.5, 2, 32);
    CHECK_EQ(nst_tune_max_active(&b), 1);
    start(&st, 2, 3, 1);
    nst_tune_decide(&st, &b, &m, &o);
    CHECK_EQ(o.set.workers, 1);
    /* one worker busy 2 ms per item under 0.5 CPUs used 1 ms of CPU: 16 ms
     * a batch at half a core, over the 10 ms step; it cannot keep up */
    nst_tune_meas h = win(10, 6, 2, 0);
    start(&st, 1, 3, 1);
    nst_tune_decide(&st, &b, &h, &o);
    CHECK_EQ(o.set.workers, 1);
    CHECK_EQ(o.reason, NOSTALL_TUNE_AT_BUDGET);
    CHECK(o.pred_stall > 0.5);
    /* 1 CPU: one worker keeps up */
    b = budget(1, 2, 32);
    CHECK_EQ(nst_tune_max_active(&b), 1);
    start(&st, 1, 3, 1);
    nst_tune_decide(&st, &b, &m, &o);
    CHECK_EQ(o.set.workers, 1);
    CHECK(o.reason != NOSTALL_TUNE_AT_BUDGET);
    CHECK(o.pred_stall <= 0.02);
    /* 2 CPUs, 2 ms per item: two needed, two allowed */
    nst_tune_meas p = win(10, 8, 2, 0);
    b = budget(2, 4, 32);
    CHECK_EQ(nst_tune_max_active(&b), 2);
    start(&st, 1, 3, 1);
    CHECK_EQ(nst_tune_decide(&st, &b, &p, &o), 1);
    CHECK_EQ(o.set.workers, 2);
    CHECK_EQ(o.reason, NOSTALL_TUNE_PREP_BOUND);
    /* 1.5 CPUs: ceil, 2 */
    b = budget(1.5, 4, 32);
    CHECK_EQ(nst_tune_max_active(&b), 2);
}

static void bursts(void)
{
    /* the means keep up but the window stalled 10%: one more batch ahead,
     * never past the most memory allows */
    nst_tune_budget b = budget(2, 2, 32);
    b.max_ahead = 4;
    nst_tune_state st;
    nst_tune_out o;
    start(&st, 1, 3, 1);
    nst_tune_meas m = win(10, 1, 0.1, 0);
    CHECK_EQ(nst_tune_decide(&st, &b, &m, &o), 1);
    CHECK_EQ(o.set.ahead, 4);
    CHECK_EQ(o.reason, NOSTALL_TUNE_JITTER);
    nst_tune_decide(&st, &b, &m, &o); /* skipped */
    nst_tune_decide(&st, &b, &m, &o);
    CHECK_EQ(st.cur.ahead, 4);
    CHECK_EQ(st.cur.workers, 2); /* at the most ahead: a worker instead */
}

/* The storage-bound window of the cache tests: 100 batches of 8 items,
 * 100 KB each, 0.01 ms of CPU and 1 ms of storage wait per read, a 2 ms
 * step; `hits` of the 800 fetched items came from the cache. */
static nst_tune_meas cached_win(double stall_ms, double hits)
{
    nst_tune_meas m = win(2, stall_ms, 0.01, 1);
    m.fetched = 800;
    m.hits = hits;
    m.reads = 800 - hits;
    m.wait_ns = m.reads * 1e6;
    m.fetch_ns = m.wait_ns;
    m.bytes = m.reads * 100000.0;
    return m;
}

static void cache_fits(void)
{
    /* Storage gives 400 reads/s (a known ceiling: 40 MB/s); the shard is
     * 800 items of 100 KB, 80 MB, 88 MB with the tenth of margin. Per
     * epoch, with the step shortened by the 15% headroom: compute 100 x 1.7
     * = 170 ms; device 800 (1 - h) x 2.5 ms = 2000 (1 - h) ms. Under a 2%
     * stall: 2000 (1 - h) <= 173.4, h >= 0.913: above 7/8, so all of the
     * 88 MB, within the 100 MB budget (hit rate 1 once filled; then one
     * worker, one read). */
    nst_tune_budget b = budget(2, 2, 32);
    b.cache_max = 100e6;
    b.shard_items = 800;
    nst_tune_state st;
    nst_tune_out o;
    start(&st, 1, 3, 1);
    st.fetch_ceiling = 400;
    nst_tune_meas m = cached_win(30, 0); /* the first epoch: all from storage */
    CHECK_EQ(nst_tune_decide(&st, &b, &m, &o), 1);
    CHECK(o.set.cache >= 88e6 - 1 && o.set.cache <= 88e6); /* raised at once */
    CHECK(o.hit_filled > 0.999);
    CHECK(o.hit_now == 0);
    /* now, from storage alone, nothing meets the target: the least stall is
     * the device's (2000 ms against 170), reached with 2 reads in flight on
     * one worker (serial 2800 / 2 = 1400 ms < 2000) */
    CHECK_EQ(o.reason, NOSTALL_TUNE_AT_BUDGET);
    CHECK_EQ(o.set.workers, 1);
    CHECK_EQ(o.set.depth, 2);
    CHECK(strstr(o.why, "cache 88.0 of 100.0 MB (hits 0% now, model 100% once filled)") != NULL);
    /* a later epoch served from the cache, which holds 80 MB: the cap
     * stays (80 of 88 MB is a hit rate of 0.909, under 0.913: the rest of
     * the shard may still come), one worker, one read */
    nst_tune_meas h = cached_win(0, 800);
    h.cache_held = 80e6;
    nst_tune_decide(&st, &b, &h, &o); /* the window after the change */
    nst_tune_decide(&st, &b, &h, &o);
    nst_tune_decide(&st, &b, &h, &o);
    CHECK(st.cur.cache >= 88e6 - 1 && st.cur.cache <= 88e6);
    CHECK_EQ(st.cur.workers, 1);
    CHECK_EQ(st.cur.depth, 1);
    CHECK(o.hit_now > 0.999);
}

static void cache_does_not_fit(void)
{
    /* The same job with a budget of 40 MB, under half the shard: no cap
     * meets the target (h 40/88 = 0.45 at most); the stall falls with each
     * eighth (11 MB), so all of the budget is taken, and never more */
    nst_tune_budget b = budget(2, 2, 32);
    b.cache_max = 40e6;
    b.shard_items = 800;
    nst_tune_state st;
    nst_tune_out o;
    start(&st, 1, 3, 1);
    st.fetch_ceiling = 400;
    nst_tune_meas m = cached_win(30, 0);
    CHECK_EQ(nst_tune_decide(&st, &b, &m, &o), 1);
    CHECK_EQ(o.set.cache, 40000000);
    CHECK(o.hit_filled > 0.454 && o.hit_filled < 0.455);
    CHECK_EQ(o.reason, NOSTALL_TUNE_AT_BUDGET);
    CHECK(strstr(o.why, "cache 40.0 of 40.0 MB (hits 0% now, model 45% once filled)") != NULL);
}

static void cache_not_needed(void)
{
    /* Prep-bound (the prep_bound window: 0.25 ms of CPU per item, a 1 ms
     * step, no storage wait): the cache changes no prediction, so the cap
     * falls to what the cache holds (5 MB; never below: nothing is
     * evicted) after two windows that agree, though the stall is above
     * the target */
    nst_tune_budget b = budget(4, 4, 32);
    b.cache_max = 100e6;
    b.shard_items = 800;
    nst_tune_state st;
    nst_tune_out o;
    nst_tune_setting s0 = {.workers = 1, .ahead = 3, .depth = 4, .cache = 100000000};
    nst_tune_init(&st, &s0);
    nst_tune_meas m = win(1, 1, 0.25, 0);
    m.cache_held = 5e6;
    CHECK_EQ(nst_tune_decide(&st, &b, &m, &o), 1);
    CHECK_EQ(o.set.workers, 3);
    CHECK_EQ(o.set.cache, 100000000); /* one vote */
    nst_tune_decide(&st, &b, &m, &o); /* skipped */
    CHECK_EQ(nst_tune_decide(&st, &b, &m, &o), 1);
    CHECK_EQ(o.set.cache, 5000000);
    CHECK_EQ(o.set.workers, 3);
}

static void echo_factor(void)
{
    /* Adaptive echoing, at most 4 uses. One worker (1 CPU), io_depth fixed
     * at 1: a fresh item costs 1 ms of storage wait + 0.01 ms of CPU, 808
     * ms for 800; a 4 ms step (3.4 with the headroom) over batches of 8:
     * at factor e the consumer trains 100 e x 3.4 = 340 e ms. e = 2: 680 <
     * 808, a stall of 19%; e = 3: 1020 >= 808, none. So 3, at once. */
    nst_tune_budget b = budget(1, 1, 0);
    b.echo_max = 4;
    nst_tune_state st;
    nst_tune_out o;
    nst_tune_setting s0 = {.workers = 1, .ahead = 3, .depth = 0, .echo = 1};
    nst_tune_init(&st, &s0);
    nst_tune_meas m = win(4, 4, 0.01, 1);
    CHECK_EQ(nst_tune_decide(&st, &b, &m, &o), 1);
    CHECK_EQ(o.set.echo, 3);
    CHECK_EQ(o.set.workers, 1);
    CHECK_EQ(o.reason, NOSTALL_TUNE_AT_BUDGET);
    CHECK(strstr(o.why, "echo at most 3 uses of 4") != NULL);
    /* half the window's items repeats: the workers made 400 fresh ones (404
     * ms); 50 e batches of 3.4 ms: the same 3 */
    nst_tune_meas r = win(4, 0, 0.01, 1);
    r.echoed = 400;
    r.reads = 400;
    r.wait_ns = r.fetch_ns = 400 * 1e6;
    r.decode_ns = 400 * 0.01e6;
    r.bytes = 400 * 100000.0;
    nst_tune_init(&st, &s0);
    CHECK_EQ(nst_tune_decide(&st, &b, &r, &o), 1);
    CHECK_EQ(o.set.echo, 3);
    /* step-bound (a 20 ms step: 1700 ms per epoch against 808): no
     * repeats; from 4, after two windows that agree */
    nst_tune_meas q = win(20, 0, 0.01, 1);
    nst_tune_setting s4 = {.workers = 1, .ahead = 3, .depth = 0, .echo = 4};
    nst_tune_init(&st, &s4);
    CHECK_EQ(nst_tune_decide(&st, &b, &q, &o), 0);
    CHECK_EQ(o.set.echo, 4);
    CHECK_EQ(nst_tune_decide(&st, &b, &q, &o), 1);
    CHECK_EQ(o.set.echo, 1);
    CHECK_EQ(o.reason, NOSTALL_TUNE_STEP_BOUND);
    /* a fixed factor (echo_max 0 in the budget) is never tuned */
    b.echo_max = 0;
    nst_tune_init(&st, &s0);
    st.cur.echo = 0;
    nst_tune_decide(&st, &b, &m, &o);
    CHECK_EQ(o.set.echo, 0);
    CHECK(strstr(o.why, "echo") == NULL);
}

static void never_over(void)
{
    uint64_t x = 12345;
    for (int i = 0; i < 1000; i++) {
        double r[8];
        for (int k = 0; k < 8; k++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            r[k] = (double)(x >> 11) / 9007199254740992.0;
        }
        nst_tune_budget b = budget(0.25 + 4 * r[0], 1 + (uint32_t)(6 * r[1]), r[2] < 0.3 ? 0 : 32);
        b.max_ahead = 1 + (uint32_t)(8 * r[3]);
        b.cache_max = r[5] < 0.5 ? 0 : 1e8 * r[6];
        b.shard_items = 2000 * r[7];
        b.echo_max = r[1] < 0.5 ? 0 : 1 + (uint32_t)(6 * r[2]);
        nst_tune_state st;
        nst_tune_out o;
        start(&st, 1 + (uint32_t)(8 * r[4]), 1 + (uint32_t)(10 * r[5]), b.max_depth ? 4 : 0);
        st.cur.cache = (uint64_t)(2e8 * r[0]);
        st.cur.echo = b.echo_max ? 1 + (uint32_t)(8 * r[3]) : 0;
        if (r[4] < 0.3) st.fetch_ceiling = 1000 * r[6];
        for (int k = 0; k < 4; k++) {
            nst_tune_meas m = win(20 * r[6] + 0.01, 5 * r[7] * k, 2 * r[k], 3 * r[(k + 3) % 8]);
            m.fetched = 800;
            m.hits = 800 * r[(k + 5) % 8];
            m.reads = 800 - m.hits;
            m.cache_held = b.cache_max * r[(k + 1) % 8];
            m.echoed = b.echo_max ? 700 * r[(k + 2) % 8] : 0;
            nst_tune_decide(&st, &b, &m, &o);
            CHECK(b.cache_max > 0 ? (double)o.set.cache <= b.cache_max
                                  : o.set.cache == st.cur.cache);
            CHECK(b.echo_max ? o.set.echo >= 1 && o.set.echo <= b.echo_max : 1);
            CHECK(o.set.workers >= 1 && o.set.workers <= nst_tune_max_active(&b));
            CHECK(o.set.workers <= b.max_workers);
            CHECK(o.set.ahead >= 1 && o.set.ahead <= b.max_ahead);
            CHECK(b.max_depth ? o.set.depth >= 1 && o.set.depth <= b.max_depth : o.set.depth == 0);
            CHECK(o.cpu_returned >= 0 && o.cpu_returned <= b.cpus);
        }
    }
    /* no batches: measuring, nothing changes */
    nst_tune_budget b = budget(2, 2, 32);
    nst_tune_state st;
    nst_tune_out o;
    start(&st, 2, 3, 4);
    nst_tune_meas z;
    memset(&z, 0, sizeof z);
    CHECK_EQ(nst_tune_decide(&st, &b, &z, &o), 0);
    CHECK_EQ(o.reason, NOSTALL_TUNE_MEASURING);
}

static uint32_t two(void *ctx, uint64_t epoch, uint64_t pos)
{
    (void)ctx;
    (void)epoch;
    (void)pos;
    return 2;
}

/* Batches opened by taking every item the engine hands out (none done). */
static int opened(nst_engine *q, const nst_engine_plan *p)
{
    nst_engine_ticket t;
    while (nst_engine_take(q, p, 0, &t, 1) == 0) {
    }
    int n = 0;
    for (uint32_t s = 0; s < q->nslots; s++) n += q->slots[s].state != NST_ENGINE_FREE;
    return n;
}

static void slot_limit(void)
{
    nst_field_decl f;
    memset(&f, 0, sizeof f);
    f.dtype = NOSTALL_DTYPE_UINT8;
    f.item_bytes = 16;
    f.shape_field = -1;
    size_t bytes = nst_engine_size(6, 2, &f, 1);
    void *mem = NULL;
    CHECK(bytes > 0 && posix_memalign(&mem, 64, bytes) == 0);
    if (!mem) return;
    memset(mem, 0, bytes);
    nst_engine *q = nst_engine_init(mem, 6, 2, &f, 1, 0);
    nst_engine_member_join(q, 0, 0, 0);
    nst_engine_plan p = {.batch_len = two};
    q->slot_limit = 3;
    CHECK_EQ(opened(q, &p), 3);
    q->slot_limit = 5;
    CHECK_EQ(opened(q, &p), 5);
    q->slot_limit = 0; /* all */
    CHECK_EQ(opened(q, &p), 6);
    free(mem);
}

int main(void)
{
    slot_limit();
    prep_bound();
    fetch_bound();
    step_bound();
    step_halves();
    budgets();
    bursts();
    cache_fits();
    cache_does_not_fit();
    cache_not_needed();
    echo_factor();
    never_over();
    TEST_EXIT();
}
