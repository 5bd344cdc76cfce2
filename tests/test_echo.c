/*
 * test_echo.c — data echoing: the fixed-echo order (every item used exactly
 * floor(e) or floor(e)+1 times, mean uses within 1% of e, the epoch length,
 * replay for resume), and the loader at every echo point: exact use counts
 * per epoch, fresh/echoed counters, identical bytes for any thread count,
 * resume mid-epoch, bad items, stop while waiting; adaptive echoing repeats
 * only when the consumer would wait and never beyond echo_max uses; its
 * assembler's urgency (SCHED_BATCH while it works ahead, the normal policy
 * for NST_ADAPTIVE_URGENT batches after the consumer found none ready) and
 * that its named thread runs under one of the two (Linux).
 */
#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <sys/stat.h>

#include "check.h"
#include "test_data.h"
#include "echo/adaptive.h"
#include "echo/schedule.h"

/* ------------------------------------------------------------------ order */

static void test_schedule_counts(double factor, uint64_t n, uint32_t pool)
{
    nst_sampler sp;
    nst_echo_sched s;
    CHECK_OK(nst_sampler_init(&sp, n, 11, 0, 1, 1, 0));
    CHECK_OK(nst_echo_sched_init(&s, &sp, factor, 11, pool, pool + 16));
    uint32_t *count = calloc(n, sizeof *count);
    for (uint64_t epoch = 0; epoch < 2; epoch++) {
        memset(count, 0, n * sizeof *count);
        nst_echo_sched_start(&s, epoch, 0);
        uint64_t total = 0, produced = 0;
        nst_echo_use u;
        int rc;
        while ((rc = nst_echo_sched_next(&s, total / 32, &u)) == 1) {
            CHECK_EQ(u.copy, count[u.index]);
            count[u.index]++;
            produced += u.produce;
            if (u.last) nst_echo_sched_free_id(&s, u.store);
            total++;
        }
        CHECK_EQ(rc, 0);
        CHECK_EQ(total, nst_echo_sched_epoch_len(&s, epoch));
        CHECK_EQ(produced, n); /* each item's data made once */
        uint32_t lo = (uint32_t)floor(factor), hi = (uint32_t)ceil(factor);
        for (uint64_t i = 0; i < n; i++)
            if (count[i] < lo || count[i] > hi) {
                CHECK(!"uses outside floor/ceil of the factor");
                break;
            }
        double mean = (double)total / (double)n;
        if (fabs(mean - factor) > 0.01 * factor)
            fprintf(stderr, "factor %g: mean uses %g\n", factor, mean);
        CHECK(fabs(mean - factor) <= 0.01 * factor);
    }
    free(count);
    nst_echo_sched_destroy(&s);
}

/* Starting at delivery k replays exactly the rest of the uninterrupted
 * order (the basis of set_state with echoing). */
static void test_schedule_replay(void)
{
    nst_sampler sp;
    nst_echo_sched a, b;
    CHECK_OK(nst_sampler_init(&sp, 500, 5, 0, 1, 1, 0));
    CHECK_OK(nst_echo_sched_init(&a, &sp, 2.7, 5, 16, 64));
    CHECK_OK(nst_echo_sched_init(&b, &sp, 2.7, 5, 16, 64));
    nst_echo_use ua, ub;
    uint64_t k = 0;
    nst_echo_sched_start(&a, 3, 0);
    while (k < 401 && nst_echo_sched_next(&a, 0, &ua) == 1) {
        nst_echo_sched_free_id(&a, ua.store);
        k++;
    }
    nst_echo_sched_start(&b, 3, 401);
    int same = 1, n = 0;
    for (;;) {
        int ra = nst_echo_sched_next(&a, 0, &ua), rb = nst_echo_sched_next(&b, 0, &ub);
        if (ra != rb) same = 0;
        if (ra != 1 || rb != 1) break;
        if (ua.index != ub.index || ua.copy != ub.copy || ua.last != ub.last) same = 0;
        nst_echo_sched_free_id(&a, ua.store);
        nst_echo_sched_free_id(&b, ub.store);
        n++;
    }
    CHECK(same);
    CHECK(n > 100);
    nst_echo_sched_destroy(&a);
    nst_echo_sched_destroy(&b);
}

/* ----------------------------------------------------------------- loader */

static char data_dir[4096];
#define NITEMS 40

static nostall_loader *make_loader(const char *src, const char *kv[][2], int n)
{
    nostall_config *cfg = make_cfg(kv, n);
    nostall_loader *ld = NULL;
    CHECK_OK(nostall_loader_create(&ld, src, cfg));
    nostall_config_free(cfg);
    return ld;
}

typedef struct run_result {
    uint64_t sum, items, fresh, echoed;
    uint32_t uses[2][NITEMS]; /* per epoch */
} run_result;

/* Run `epochs` epochs (optionally starting at a state), folding every batch. */
static void run(const char *point, const char *factor, const char *threads, int epochs,
                run_result *r)
{
    char ep[8];
    snprintf(ep, sizeof ep, "%d", epochs);
    const char *kv[][2] = {{"threads", threads},    {"batch_size", "6"},  {"crop", "20"},
                           {"epochs", ep},          {"seed", "4"},        {"echo_point", point},
                           {"echo_factor", factor}, {"echo_buffer", "5"}, {"output", "uint8"}};
    nostall_loader *ld = make_loader(data_dir, kv, 9);
    memset(r, 0, sizeof *r);
    if (!ld) return;
    for (;;) {
        nostall_batch b;
        int rc = nostall_loader_next(ld, &b);
        if (rc == NOSTALL_DONE) break;
        if (rc == NOSTALL_EPOCH_END) continue;
        CHECK_OK(rc);
        if (rc < 0) break;
        nostall_checksum_batch(&r->sum, &b);
        for (uint32_t i = 0; i < b.count; i++)
            if (b.epoch < 2 && b.indices[i] < NITEMS) r->uses[b.epoch][b.indices[i]]++;
        r->items += b.count;
        CHECK_OK(nostall_loader_release(ld, &b));
    }
    nostall_stats st;
    nostall_loader_stats(ld, &st, sizeof st);
    r->fresh = st.fresh_items;
    r->echoed = st.echoed_items;
    nostall_loader_free(ld);
}

static void test_loader_points(void)
{
    static const char *points[] = {"fetch", "decode", "augment", "batch"};
    uint64_t sums[4];
    for (int p = 0; p < 4; p++) {
        run_result a, b;
        run(points[p], "2", "1", 2, &a);
        run(points[p], "2", "3", 2, &b);
        fprintf(stderr, "echo_point=%s e=2: %llu items, %llu fresh, %llu echoed, checksum %016llx\n",
                points[p], (unsigned long long)a.items, (unsigned long long)a.fresh,
                (unsigned long long)a.echoed, (unsigned long long)a.sum);
        CHECK_EQ(a.items, 4 * NITEMS); /* 2 epochs x 2 uses */
        CHECK_EQ(a.fresh, 2 * NITEMS);
        CHECK_EQ(a.echoed, 2 * NITEMS);
        int exact = 1;
        for (int e = 0; e < 2; e++)
            for (int i = 0; i < NITEMS; i++) exact &= a.uses[e][i] == 2;
        CHECK(exact);           /* every item exactly twice per epoch */
        CHECK_EQ(a.sum, b.sum); /* any thread count: the same bytes */
        sums[p] = a.sum;
    }
    /* Augmented copies differ from re-augmented ones. */
    CHECK(sums[0] != sums[2]);
    CHECK(sums[1] != sums[2]);
    /* Fractional: mean uses of 40 items is near e, counts are floor/ceil. */
    run_result f;
    run("decode", "1.5", "2", 2, &f);
    int ok = 1;
    for (int e = 0; e < 2; e++)
        for (int i = 0; i < NITEMS; i++) ok &= f.uses[e][i] == 1 || f.uses[e][i] == 2;
    CHECK(ok);
    CHECK_EQ(f.items, f.fresh + f.echoed);
    CHECK(f.echoed > 10 && f.echoed < 70);
}

/* Resume with set_state mid-epoch gives the same remaining batches. */
static void test_loader_resume(void)
{
    const char *kv[][2] = {{"threads", "2"},     {"batch_size", "6"},    {"crop", "20"},
                           {"seed", "9"},        {"echo_factor", "2.5"}, {"echo_point", "fetch"},
                           {"echo_buffer", "7"}, {"output", "uint8"}};
    nostall_loader *a = make_loader(data_dir, kv, 8), *b = make_loader(data_dir, kv, 8);
    if (!a || !b) return;
    nostall_batch x, y;
    nostall_state st;
    for (int i = 0; i < 5; i++) {
        CHECK_OK(nostall_loader_next(a, &x));
        CHECK_OK(nostall_loader_release(a, &x));
    }
    CHECK_OK(nostall_loader_get_state(a, &st));
    CHECK_EQ(st.position, 30);
    CHECK_OK(nostall_loader_set_state(b, &st));
    int same = 1, n = 0;
    for (;;) {
        int ra = nostall_loader_next(a, &x), rb = nostall_loader_next(b, &y);
        CHECK_EQ(ra, rb);
        if (ra != 0 || rb != 0) break;
        uint64_t ca = 0, cb = 0;
        nostall_checksum_batch(&ca, &x);
        nostall_checksum_batch(&cb, &y);
        same &= ca == cb && x.count == y.count;
        CHECK_OK(nostall_loader_release(a, &x));
        CHECK_OK(nostall_loader_release(b, &y));
        n++;
    }
    CHECK(same);
    CHECK(n > 3);
    nostall_loader_free(a);
    nostall_loader_free(b);
}

/* Stop and free while echoed uses may be waiting for their producer. */
static void test_loader_stop(void)
{
    const char *kv[][2] = {{"threads", "3"},
                           {"batch_size", "4"},
                           {"crop", "16"},
                           {"echo_factor", "4"},
                           {"echo_point", "decode"},
                           {"echo_buffer", "1"},
                           {"storage_latency_ms", "30"},
                           {"io_depth", "2"}};
    for (int i = 0; i < 3; i++) {
        nostall_loader *ld = make_loader(data_dir, kv, 8);
        if (!ld) return;
        nostall_batch b;
        if (i > 0) {
            CHECK_OK(nostall_loader_next(ld, &b));
            CHECK_OK(nostall_loader_release(ld, &b));
        }
        nostall_loader_free(ld); /* must not hang */
    }
}

/* Bad items under echoing: skipped each time they come up, never block. */
static void test_loader_bad_items(void)
{
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/bad", data_dir);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/zz_truncated.jpg", dir);
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs("\xff\xd8\xff\xe0 not really", f);
        fclose(f);
    }
    static const char *points[] = {"fetch", "decode", "augment"};
    for (int p = 0; p < 3; p++) {
        const char *kv[][2] = {{"threads", "2"}, {"batch_size", "6"},  {"crop", "16"},
                               {"epochs", "1"},  {"echo_factor", "3"}, {"echo_point", points[p]}};
        nostall_loader *ld = make_loader(data_dir, kv, 6);
        if (!ld) return;
        uint64_t items = 0;
        nostall_batch b;
        int rc;
        while ((rc = nostall_loader_next(ld, &b)) != NOSTALL_DONE) {
            if (rc == NOSTALL_EPOCH_END) continue;
            CHECK_OK(rc);
            if (rc < 0) break;
            items += b.count;
            CHECK_OK(nostall_loader_release(ld, &b));
        }
        nostall_stats st;
        nostall_loader_stats(ld, &st, sizeof st);
        CHECK_EQ(items, 3 * NITEMS); /* every good item 3 times */
        CHECK_EQ(st.skipped, 3);     /* the bad one, each of its uses */
        CHECK_EQ(st.skipped_unique, 1);
        nostall_loader_free(ld);
    }
    remove(path);
    rmdir(dir);
}

/* The scheduling policy of this process's thread named `name` (field 41
 * of /proc/self/task/TID/stat), or -1 if no thread has that name. */
static int thread_policy(const char *name)
{
    int policy = -1;
    DIR *d = opendir("/proc/self/task");
    struct dirent *de;
    while (d && policy < 0 && (de = readdir(d)) != NULL) {
        char path[300], buf[1024] = "";
        if (de->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", de->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        int match = fgets(buf, sizeof buf, f) && strncmp(buf, name, strlen(name)) == 0 &&
                    (buf[strlen(name)] == '\n' || buf[strlen(name)] == 0);
        fclose(f);
        if (!match) continue;
        snprintf(path, sizeof path, "/proc/self/task/%s/stat", de->d_name);
        if (!(f = fopen(path, "r"))) continue;
        const char *p = fgets(buf, sizeof buf, f) ? strrchr(buf, ')') : NULL;
        fclose(f);
        for (int field = 0; p && field < 39; field++) p = strchr(p + 1, ' ');
        if (p) policy = atoi(p + 1);
    }
    if (d) closedir(d);
    return policy;
}

/* The assembler's urgency: a miss sets NST_ADAPTIVE_URGENT, each batch
 * assembled counts down to 0 (SCHED_BATCH again), a miss on the way sets it
 * back up. */
static void test_adaptive_urgency(void)
{
    uint32_t u = 0;
    CHECK_EQ(nst_adaptive_urgency(u, NST_ADAPTIVE_ASSEMBLED), 0); /* stays ahead */
    u = nst_adaptive_urgency(u, NST_ADAPTIVE_MISSED);
    CHECK_EQ(u, NST_ADAPTIVE_URGENT);
    CHECK_EQ(nst_adaptive_urgency(u, NST_ADAPTIVE_MISSED), NST_ADAPTIVE_URGENT); /* no build-up */
    int steps = 0;
    while (u > 0 && steps < 1000) {
        u = nst_adaptive_urgency(u, NST_ADAPTIVE_ASSEMBLED);
        steps++;
        if (steps == NST_ADAPTIVE_URGENT / 2) {
            CHECK_EQ(u, NST_ADAPTIVE_URGENT / 2);
            CHECK_EQ(nst_adaptive_urgency(u, NST_ADAPTIVE_MISSED), NST_ADAPTIVE_URGENT);
        }
    }
    CHECK_EQ(steps, NST_ADAPTIVE_URGENT);
    CHECK_EQ(nst_adaptive_urgency(0, NST_ADAPTIVE_ASSEMBLED), 0);
}

/* Adaptive: with slow storage and a consumer that does no work, repeats
 * fill the gaps; no item is used more than echo_max times per fresh use;
 * every item is still delivered fresh once per epoch. */
static void test_adaptive(void)
{
    const char *kv[][2] = {{"threads", "1"},     {"batch_size", "4"},          {"crop", "16"},
                           {"epochs", "2"},      {"echo", "adaptive"},         {"echo_max", "3"},
                           {"echo_buffer", "8"}, {"storage_latency_ms", "15"}, {"io_depth", "1"}};
    nostall_loader *ld = make_loader(data_dir, kv, 9);
    if (!ld) return;
    uint32_t seen[NITEMS] = {0};
    uint64_t items = 0;
    nostall_batch b;
    int rc;
    while ((rc = nostall_loader_next(ld, &b)) != NOSTALL_DONE) {
        if (rc == NOSTALL_EPOCH_END) continue;
        CHECK_OK(rc);
        if (rc < 0) break;
        for (uint32_t i = 0; i < b.count; i++)
            if (b.indices[i] < NITEMS) seen[b.indices[i]]++;
        items += b.count;
        CHECK_OK(nostall_loader_release(ld, &b));
    }
    nostall_stats st;
    nostall_loader_stats(ld, &st, sizeof st);
    fprintf(stderr, "adaptive: %llu fresh, %llu echoed\n", (unsigned long long)st.fresh_items,
            (unsigned long long)st.echoed_items);
    CHECK_EQ(st.fresh_items, 2 * NITEMS);
    CHECK(st.echoed_items > 0);
    CHECK_EQ(items, st.fresh_items + st.echoed_items);
#if defined(__linux__) && defined(SCHED_BATCH)
    /* An echo batch was assembled, so the assembler set itself up: named,
     * under SCHED_BATCH or (after the consumer found no echo batch ready,
     * as this one that does no work does) the normal policy. */
    int policy = thread_policy(NST_ADAPTIVE_THREAD);
    CHECK(policy == SCHED_BATCH || policy == SCHED_OTHER);
#endif
    int bounded = 1;
    for (int i = 0; i < NITEMS; i++) bounded &= seen[i] >= 2 && seen[i] <= 2 * 3;
    CHECK(bounded);
    nostall_loader_free(ld);

    /* echo_buffer smaller than a batch is refused with a message. */
    const char *bad[][2] = {{"batch_size", "16"}, {"echo", "adaptive"}, {"echo_buffer", "8"}};
    nostall_config *cfg = make_cfg(bad, 3);
    CHECK_RC(nostall_loader_create(&ld, data_dir, cfg), NOSTALL_E_OPTION);
    CHECK(strstr(nostall_last_error(), "echo_buffer") != NULL);
    nostall_config_free(cfg);
}

int main(void)
{
    test_schedule_counts(2.0, 20000, 64);
    test_schedule_counts(1.37, 100000, 256);
    test_schedule_counts(3.5, 50000, 1);
    test_schedule_replay();

    snprintf(data_dir, sizeof data_dir, "%s", test_tmpdir("echo-data"));
    gen_dataset(data_dir, NITEMS, 4);
    test_loader_points();
    test_loader_resume();
    test_loader_stop();
    test_adaptive_urgency();
    test_adaptive();
    test_loader_bad_items();
    TEST_EXIT();
}
