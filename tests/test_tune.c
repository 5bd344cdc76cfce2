/*
 * test_tune.c — autotune's decision (analyze/tune.h) as a pure function on
 * fixed windows of measurements: prep-bound (more workers, as many as the
 * model needs), fetch-bound (reads in flight before workers; a storage
 * rate that does not grow becomes a ceiling), step-bound (workers parked
 * after two windows that agree, the CPU given back said), the step time
 * halving (more workers at once), budgets of 0.5, 1 and 2 CPUs, bursts
 * (batches_ahead up to its most), the window skipped after a change, and
 * on a thousand pseudo-random windows that no budget is ever exceeded.
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
        nst_tune_state st;
        nst_tune_out o;
        start(&st, 1 + (uint32_t)(8 * r[4]), 1 + (uint32_t)(10 * r[5]), b.max_depth ? 4 : 0);
        for (int k = 0; k < 4; k++) {
            nst_tune_meas m = win(20 * r[6] + 0.01, 5 * r[7] * k, 2 * r[k], 3 * r[(k + 3) % 8]);
            nst_tune_decide(&st, &b, &m, &o);
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
    never_over();
    TEST_EXIT();
}
