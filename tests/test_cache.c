/*
 * test_cache.c — the MinIO cache: the budget is respected to the byte,
 * get returns exactly what put copied (zero-copy, stable pointers), the hit
 * fraction across a fresh random order equals the cached fraction, puts and
 * gets race cleanly from several threads, RSS tracks the cached bytes rather
 * than the budget, and create rejects bad arguments. The admission cap
 * (autotune's cache size): a put over it is refused without marking the
 * item, taken once the cap is raised; lowered below what is held, held
 * items stay and later puts are refused.
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "cache/minio.h"
#include "check.h"

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Deterministic content and size of item i: any thread putting i puts the
 * same bytes. */
static uint8_t item_byte(uint64_t i, size_t j) { return (uint8_t)(i * 131u + j * 7u + (j >> 8)); }
static size_t item_size(uint64_t i, size_t max)
{
    uint64_t s = i * 2654435761u + 12345;
    return 1 + (size_t)(splitmix(&s) % max);
}
static void item_fill(uint64_t i, uint8_t *p, size_t n)
{
    for (size_t j = 0; j < n; j++) p[j] = item_byte(i, j);
}
static int item_ok(uint64_t i, const uint8_t *p, size_t n)
{
    for (size_t j = 0; j < n; j++)
        if (p[j] != item_byte(i, j)) return 0;
    return 1;
}

static void shuffle(uint64_t *a, uint64_t n, uint64_t *seed)
{
    for (uint64_t i = n; i > 1; i--) {
        uint64_t j = splitmix(seed) % i;
        uint64_t t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}

static void test_create_errors(void)
{
    nst_cache *c = (nst_cache *)1;
    CHECK_RC(nst_cache_create(&c, 0, 10), NOSTALL_E_INVALID);
    CHECK(c == NULL);
    CHECK_RC(nst_cache_create(&c, 1024, 0), NOSTALL_E_INVALID);
    CHECK(c == NULL);
    /* Far beyond any address space: mmap must refuse it. */
    CHECK_RC(nst_cache_create(&c, UINT64_MAX / 2, 10), NOSTALL_E_NOMEM);
    CHECK(c == NULL);
    CHECK(strstr(nostall_last_error(), "9223372036854775807") != NULL);
    nst_cache_free(NULL);
}

static void test_budget(void)
{
    /* Varied sizes until refusals: bytes <= budget at every step. */
    const uint64_t budget = 100000, n = 1000;
    nst_cache *c = NULL;
    CHECK_OK(nst_cache_create(&c, budget, n));
    if (!c) return;
    static uint8_t buf[4096];
    uint64_t seed = 7, sum = 0, refused = 0, cached = 0;
    for (uint64_t i = 0; i < n; i++) {
        size_t len = 1 + (size_t)(splitmix(&seed) % sizeof buf);
        item_fill(i, buf, len);
        int r = nst_cache_put(c, i, buf, len);
        nst_cache_stats st;
        nst_cache_stats_get(c, &st);
        CHECK(st.bytes <= budget);
        if (r == 1) {
            sum += len;
            cached++;
        } else {
            CHECK_EQ(r, 0);
            CHECK(sum + len > budget); /* refused only when it truly did not fit */
            refused++;
            const uint8_t *p;
            size_t l;
            CHECK_EQ(nst_cache_get(c, i, &p, &l), 0); /* NOFIT misses */
            CHECK_EQ(nst_cache_put(c, i, buf, 1), 0); /* and stays refused */
        }
        CHECK_EQ(st.bytes, sum);
        CHECK_EQ(st.items, cached);
        CHECK_EQ(st.nofit, refused);
    }
    CHECK(refused > 0);
    CHECK(budget - sum < sizeof buf);
    nst_cache_free(c);

    /* Exact fit, then a larger item refused, then a smaller one still fits. */
    CHECK_OK(nst_cache_create(&c, 1000, 10));
    if (!c) return;
    item_fill(0, buf, 600);
    CHECK_EQ(nst_cache_put(c, 0, buf, 600), 1);
    item_fill(1, buf, 300);
    CHECK_EQ(nst_cache_put(c, 1, buf, 300), 1);
    item_fill(2, buf, 101);
    CHECK_EQ(nst_cache_put(c, 2, buf, 101), 0); /* one byte too many */
    item_fill(3, buf, 60);
    CHECK_EQ(nst_cache_put(c, 3, buf, 60), 1); /* smaller still fits */
    item_fill(4, buf, 40);
    CHECK_EQ(nst_cache_put(c, 4, buf, 40), 1); /* exactly fills */
    item_fill(5, buf, 1);
    CHECK_EQ(nst_cache_put(c, 5, buf, 1), 0); /* full */
    nst_cache_stats st;
    nst_cache_stats_get(c, &st);
    CHECK_EQ(st.budget, 1000);
    CHECK_EQ(st.bytes, 1000);
    CHECK_EQ(st.items, 4);
    CHECK_EQ(st.nofit, 2);
    /* A single item larger than the whole budget. */
    nst_cache_free(c);
    CHECK_OK(nst_cache_create(&c, 10, 2));
    if (!c) return;
    CHECK_EQ(nst_cache_put(c, 0, buf, 11), 0);
    CHECK_EQ(nst_cache_put(c, 1, buf, 10), 1);
    nst_cache_free(c);
}

static void test_get_put(void)
{
    const uint64_t n = 64;
    nst_cache *c = NULL;
    CHECK_OK(nst_cache_create(&c, 1 << 16, n));
    if (!c) return;
    static uint8_t buf[2048];
    const uint8_t *p0 = NULL, *p;
    size_t l0 = 0, l;

    CHECK_EQ(nst_cache_get(c, 0, &p, &l), 0); /* never put */
    CHECK_EQ(nst_cache_put(c, 0, buf, 0), 0); /* len 0 refused */
    CHECK_EQ(nst_cache_get(c, 0, &p, &l), 0);
    CHECK_EQ(nst_cache_put(c, n, buf, 10), 0); /* out of range */
    CHECK_EQ(nst_cache_get(c, n, &p, &l), 0);
    CHECK_EQ(nst_cache_get(c, UINT64_MAX, &p, &l), 0);

    for (uint64_t i = 0; i < n; i += 2) {
        size_t len = item_size(i, sizeof buf);
        item_fill(i, buf, len);
        CHECK_EQ(nst_cache_put(c, i, buf, len), 1);
        memset(buf, 0xAA, len); /* the cache holds its own copy */
        CHECK_EQ(nst_cache_get(c, i, &p, &l), 1);
        CHECK_EQ(l, len);
        CHECK(item_ok(i, p, l));
        if (i == 0) {
            p0 = p;
            l0 = l;
        }
    }
    /* Pointer stable and bytes unchanged after later puts. */
    CHECK_EQ(nst_cache_get(c, 0, &p, &l), 1);
    CHECK(p == p0);
    CHECK_EQ(l, l0);
    CHECK(item_ok(0, p, l));
    /* Odd items were never put. */
    for (uint64_t i = 1; i < n; i += 2) CHECK_EQ(nst_cache_get(c, i, &p, &l), 0);
    /* Double put: refused, bytes and stats unchanged. */
    nst_cache_stats before, after;
    nst_cache_stats_get(c, &before);
    memset(buf, 0x55, 100);
    CHECK_EQ(nst_cache_put(c, 0, buf, 100), 0);
    nst_cache_stats_get(c, &after);
    CHECK_EQ(after.bytes, before.bytes);
    CHECK_EQ(after.items, before.items);
    CHECK_EQ(after.nofit, before.nofit);
    CHECK_EQ(nst_cache_get(c, 0, &p, &l), 1);
    CHECK(p == p0);
    CHECK_EQ(l, l0);
    CHECK(item_ok(0, p, l));
    nst_cache_free(c);
}

/* The MinIO property: fill in one random epoch order until the budget is
 * c x total; in a new random order the fraction of bytes that hit is c. */
static void test_hit_fraction(void)
{
    const uint64_t n = 4000;
    const size_t maxlen = 3000;
    static uint8_t buf[3000];
    static uint64_t order[4000];
    uint64_t total = 0;
    for (uint64_t i = 0; i < n; i++) total += item_size(i, maxlen);
    const double fracs[] = {0.25, 0.5, 0.75};
    for (int k = 0; k < 3; k++) {
        uint64_t budget = (uint64_t)(fracs[k] * (double)total);
        nst_cache *c = NULL;
        CHECK_OK(nst_cache_create(&c, budget, n));
        if (!c) return;
        uint64_t seed = 1000 + (uint64_t)k;
        for (uint64_t i = 0; i < n; i++) order[i] = i;
        for (int epoch = 0; epoch < 3; epoch++) {
            shuffle(order, n, &seed);
            uint64_t hit = 0;
            for (uint64_t t = 0; t < n; t++) {
                uint64_t i = order[t];
                size_t len = item_size(i, maxlen);
                const uint8_t *p;
                size_t l;
                if (nst_cache_get(c, i, &p, &l)) {
                    CHECK_EQ(l, len);
                    hit += l;
                } else {
                    item_fill(i, buf, len); /* "read from storage" */
                    nst_cache_put(c, i, buf, len);
                }
            }
            double f = (double)hit / (double)total;
            if (epoch == 0) {
                CHECK_EQ(hit, 0);
            } else if (f < fracs[k] - 0.02 || f > fracs[k] + 0.02) {
                fprintf(stderr, "hit fraction %.4f, want %.2f\n", f, fracs[k]);
                CHECK(0);
            }
        }
        nst_cache_stats st;
        nst_cache_stats_get(c, &st);
        CHECK(st.bytes <= budget);
        CHECK(budget - st.bytes < maxlen);
        nst_cache_free(c);
    }
}

/* Concurrency: 4 threads put and get overlapping ranges at once. */
#define CT_THREADS 4
#define CT_ITEMS 4096
#define CT_MAXLEN 1500

typedef struct ct_arg {
    nst_cache *c;
    int id;
    int bad;
    uint64_t mine; /* puts this thread won */
} ct_arg;

static void *ct_main(void *arg)
{
    ct_arg *a = arg;
    uint8_t buf[CT_MAXLEN];
    /* Thread t covers [t*N/8, t*N/8 + N/2): neighbours overlap by 3/4. */
    uint64_t lo = (uint64_t)a->id * CT_ITEMS / 8, hi = lo + CT_ITEMS / 2;
    for (int pass = 0; pass < 2; pass++) {
        for (uint64_t k = lo; k < hi; k++) {
            /* Odd threads walk backwards so fills collide in the middle. */
            uint64_t i = (a->id & 1) ? hi - 1 - (k - lo) : k;
            const uint8_t *p;
            size_t l, len = item_size(i, CT_MAXLEN);
            if (nst_cache_get(a->c, i, &p, &l)) {
                if (l != len || !item_ok(i, p, l)) a->bad++;
                continue;
            }
            item_fill(i, buf, len);
            a->mine += (uint64_t)nst_cache_put(a->c, i, buf, len);
            if (nst_cache_get(a->c, i + 1 < CT_ITEMS ? i + 1 : 0, &p, &l)) {
                uint64_t j = i + 1 < CT_ITEMS ? i + 1 : 0;
                if (l != item_size(j, CT_MAXLEN) || !item_ok(j, p, l)) a->bad++;
            }
        }
    }
    return NULL;
}

static void test_concurrent(void)
{
    uint64_t total = 0;
    for (uint64_t i = 0; i < CT_ITEMS; i++) total += item_size(i, CT_MAXLEN);
    nst_cache *c = NULL;
    CHECK_OK(nst_cache_create(&c, total / 2, CT_ITEMS)); /* some refusals */
    if (!c) return;
    pthread_t th[CT_THREADS];
    ct_arg args[CT_THREADS];
    for (int t = 0; t < CT_THREADS; t++) {
        args[t] = (ct_arg){.c = c, .id = t};
        CHECK_EQ(pthread_create(&th[t], NULL, ct_main, &args[t]), 0);
    }
    uint64_t won = 0;
    for (int t = 0; t < CT_THREADS; t++) {
        pthread_join(th[t], NULL);
        CHECK_EQ(args[t].bad, 0);
        won += args[t].mine;
    }
    uint64_t sum = 0, ready = 0;
    for (uint64_t i = 0; i < CT_ITEMS; i++) {
        const uint8_t *p;
        size_t l;
        if (!nst_cache_get(c, i, &p, &l)) continue;
        CHECK_EQ(l, item_size(i, CT_MAXLEN));
        CHECK(item_ok(i, p, l));
        sum += l;
        ready++;
    }
    nst_cache_stats st;
    nst_cache_stats_get(c, &st);
    CHECK_EQ(st.bytes, sum);
    CHECK_EQ(st.items, ready);
    CHECK_EQ(won, ready); /* each cached item was won by exactly one put */
    CHECK(st.bytes <= total / 2);
    CHECK(st.nofit > 0);
    CHECK(ready > 0);
    nst_cache_free(c);
}

static long rss_pages(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, res = -1;
    if (!f) return -1;
    if (fscanf(f, "%ld %ld", &size, &res) != 2) res = -1;
    fclose(f);
    return res;
}

static void test_rss(void)
{
    const uint64_t budget = 1ull << 30, chunk = 64 * 1024, n = 160; /* 10 MiB */
    long page = sysconf(_SC_PAGESIZE);
    long before = rss_pages();
    if (before < 0) {
        fprintf(stderr, "no /proc/self/statm; RSS check skipped\n");
        return;
    }
    nst_cache *c = NULL;
    CHECK_OK(nst_cache_create(&c, budget, n));
    if (!c) return;
    static uint8_t buf[64 * 1024];
    for (uint64_t i = 0; i < n; i++) {
        item_fill(i, buf, chunk);
        CHECK_EQ(nst_cache_put(c, i, buf, chunk), 1);
    }
    long after = rss_pages();
    double grown_mb = (double)(after - before) * (double)page / (1024.0 * 1024.0);
    CHECK(grown_mb >= 9.0); /* the cached bytes are really resident */
    CHECK(grown_mb < 64.0); /* ... and the budget is not */
    if (grown_mb < 9.0 || grown_mb >= 64.0)
        fprintf(stderr, "RSS grew by %.1f MiB for 10 MiB cached\n", grown_mb);
    nst_cache_stats st;
    nst_cache_stats_get(c, &st);
    CHECK_EQ(st.bytes, chunk * n);
    nst_cache_free(c);
}

static void test_cap(void)
{
    nst_cache *c = NULL;
    uint8_t buf[600];
    CHECK_OK(nst_cache_create(&c, 1000, 8));
    if (!c) return;
    nst_cache_stats st;
    nst_cache_stats_get(c, &st);
    CHECK_EQ(st.cap, 1000); /* the budget until set */
    nst_cache_set_cap(c, 500);
    item_fill(0, buf, 400);
    CHECK_EQ(nst_cache_put(c, 0, buf, 400), 1);
    item_fill(1, buf, 200);
    CHECK_EQ(nst_cache_wants(c, 1, 200), 0);
    CHECK_EQ(nst_cache_put(c, 1, buf, 200), 0); /* over the cap, within the budget */
    nst_cache_stats_get(c, &st);
    CHECK_EQ(st.nofit, 0);
    CHECK_EQ(st.capped, 1);
    CHECK_EQ(st.bytes, 400);
    nst_cache_set_cap(c, 5000); /* above the budget: the budget */
    nst_cache_stats_get(c, &st);
    CHECK_EQ(st.cap, 1000);
    CHECK_EQ(nst_cache_wants(c, 1, 200), 1);
    CHECK_EQ(nst_cache_put(c, 1, buf, 200), 1); /* not refused for good */
    const uint8_t *d = NULL;
    size_t n = 0;
    CHECK_EQ(nst_cache_get(c, 1, &d, &n), 1);
    CHECK_EQ(n, 200);
    CHECK(d && memcmp(d, buf, 200) == 0);
    nst_cache_set_cap(c, 0); /* below what is held: nothing evicted */
    CHECK_EQ(nst_cache_get(c, 0, &d, &n), 1);
    CHECK_EQ(n, 400);
    item_fill(2, buf, 1);
    CHECK_EQ(nst_cache_put(c, 2, buf, 1), 0);
    nst_cache_stats_get(c, &st);
    CHECK_EQ(st.bytes, 600);
    CHECK_EQ(st.items, 2);
    CHECK_EQ(st.capped, 2);
    nst_cache_free(c);
}

int main(void)
{
    test_create_errors();
    test_budget();
    test_get_put();
    test_hit_fraction();
    test_concurrent();
    test_rss();
    test_cap();
    TEST_EXIT();
}
