/*
 * test_sampler.c — the keyed epoch permutation and DistributedSampler-style
 * sharding: bijection for many n, keying by seed and epoch, rough uniformity,
 * shard sizes/disjointness/coverage, init errors, and order-independent
 * lookup (resume).
 */
#include <stdint.h>

#include "check.h"
#include "order/sampler.h"

/* 1 if nst_permute(n, seed, epoch, .) is a bijection on [0, n). */
static int is_bijection(uint64_t n, uint64_t seed, uint64_t epoch)
{
    unsigned char *seen = calloc((size_t)n, 1);
    int ok = 1;
    if (!seen) return 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t p = nst_permute(n, seed, epoch, i);
        if (p >= n || seen[p]) {
            ok = 0;
            break;
        }
        seen[p] = 1;
    }
    free(seen);
    return ok;
}

static void test_bijection(void)
{
    static const uint64_t ns[] = {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 64, 65, 1000, 4096, 4097, 100003};
    static const uint64_t seeds[] = {0, 1, 42, 0xdeadbeefcafef00dULL};
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (size_t b = 0; b < sizeof seeds / sizeof seeds[0]; b++)
            for (uint64_t e = 0; e < 3; e++) {
                if (ns[a] > 5000 && (b > 1 || e > 1)) continue; /* keep fast */
                if (!is_bijection(ns[a], seeds[b], e)) {
                    fprintf(stderr, "not a bijection: n=%llu seed=%llu e=%llu\n",
                            (unsigned long long)ns[a], (unsigned long long)seeds[b],
                            (unsigned long long)e);
                    check_failures_++;
                }
            }
    /* Every n up to 300 (all half widths and cycle-walking ratios). */
    for (uint64_t n = 1; n <= 300; n++) CHECK(is_bijection(n, 7, n));
    CHECK_EQ(nst_permute(1, 123, 4, 0), 0);

    /* Large n: values stay in range; distinct inputs give distinct outputs
     * (injective on a sample, the rest is the Feistel structure). */
    uint64_t big = (1ULL << 40) + 12345;
    uint64_t prev[64];
    for (int i = 0; i < 64; i++) {
        uint64_t x = (uint64_t)i * 17179869143ULL;
        prev[i] = nst_permute(big, 5, 1, x);
        CHECK(prev[i] < big);
        for (int j = 0; j < i; j++) CHECK(prev[i] != prev[j]);
    }
    /* Near 2^64: 64-bit domain, no shift overflow. */
    uint64_t huge = UINT64_MAX - 3;
    for (uint64_t i = 0; i < 16; i++) CHECK(nst_permute(huge, 9, 0, i) < huge);
}

static int same_order(uint64_t n, uint64_t s1, uint64_t e1, uint64_t s2, uint64_t e2)
{
    for (uint64_t i = 0; i < n; i++)
        if (nst_permute(n, s1, e1, i) != nst_permute(n, s2, e2, i)) return 0;
    return 1;
}

static void test_keying(void)
{
    uint64_t n = 1000;
    CHECK(same_order(n, 3, 5, 3, 5));
    CHECK(!same_order(n, 3, 5, 3, 6));
    CHECK(!same_order(n, 3, 5, 4, 5));
    CHECK(!same_order(n, 0, 0, 0, 1));
    /* Not the identity for n >= 10 with shuffling. */
    for (uint64_t nn = 10; nn <= 40; nn++)
        for (uint64_t e = 0; e < 4; e++) {
            uint64_t fixed = 0;
            for (uint64_t i = 0; i < nn; i++) fixed += nst_permute(nn, 11, e, i) == i;
            CHECK(fixed < nn);
        }
    /* Few fixed points on a large n (a random permutation has ~1). */
    uint64_t fixed = 0;
    for (uint64_t i = 0; i < 100003; i++) fixed += nst_permute(100003, 1, 0, i) == i;
    CHECK(fixed < 20);
}

static void test_uniformity(void)
{
    /* Position 0 of a 10-item epoch over 20000 seeds: each item ~2000. */
    enum { N = 10, DRAWS = 20000 };
    unsigned count[N] = {0};
    for (uint64_t s = 0; s < DRAWS; s++) count[nst_permute(N, s, 0, 0)]++;
    for (int k = 0; k < N; k++) {
        if (count[k] < DRAWS / N * 8 / 10 || count[k] > DRAWS / N * 12 / 10) {
            fprintf(stderr, "position 0 holds item %d %u times of %d\n", k, count[k], DRAWS);
            check_failures_++;
        }
    }
    /* Same over epochs with a fixed seed, and for another position. */
    unsigned count2[N] = {0};
    for (uint64_t e = 0; e < DRAWS; e++) count2[nst_permute(N, 77, e, 7)]++;
    for (int k = 0; k < N; k++) {
        if (count2[k] < DRAWS / N * 8 / 10 || count2[k] > DRAWS / N * 12 / 10) {
            fprintf(stderr, "position 7 holds item %d %u times of %d\n", k, count2[k], DRAWS);
            check_failures_++;
        }
    }
    /* n = 17 (cycle-walking from a 32-value domain). */
    enum { M = 17 };
    unsigned count3[M] = {0};
    for (uint64_t s = 0; s < 34000; s++) count3[nst_permute(M, s, 3, 16)]++;
    for (int k = 0; k < M; k++) CHECK(count3[k] > 1600 && count3[k] < 2400);
}

static void test_identity(void)
{
    nst_sampler s;
    CHECK_OK(nst_sampler_init(&s, 10, 99, 0, 1, 0, 0));
    CHECK_EQ(s.per_rank, 10);
    for (uint64_t e = 0; e < 3; e++)
        for (uint64_t i = 0; i < 10; i++) CHECK_EQ(nst_sampler_item(&s, e, i), i);
    CHECK_OK(nst_sampler_init(&s, 10, 99, 1, 3, 0, 0));
    CHECK_EQ(s.per_rank, 4);
    CHECK_EQ(nst_sampler_item(&s, 0, 0), 1);
    CHECK_EQ(nst_sampler_item(&s, 0, 1), 4);
    CHECK_EQ(nst_sampler_item(&s, 0, 2), 7);
    CHECK_EQ(nst_sampler_item(&s, 0, 3), 0); /* wrapped padding: p[10 % 10] */
    /* With shuffle and one rank: the sampler is the permutation itself. */
    CHECK_OK(nst_sampler_init(&s, 50, 5, 0, 1, 1, 1));
    for (uint64_t i = 0; i < 50; i++)
        CHECK_EQ(nst_sampler_item(&s, 2, i), nst_permute(50, 5, 2, i));
}

static void test_sharding(void)
{
    static const uint32_t worlds[] = {1, 2, 3, 4, 8};
    static const uint64_t ns[] = {10, 16, 17, 100};
    for (size_t wi = 0; wi < sizeof worlds / sizeof worlds[0]; wi++)
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
            for (int shuffle = 0; shuffle <= 1; shuffle++)
                for (int drop = 0; drop <= 1; drop++)
                    for (uint64_t epoch = 0; epoch < 2; epoch++) {
                        uint32_t w = worlds[wi];
                        uint64_t n = ns[ni];
                        unsigned hits[100] = {0};
                        uint64_t total = 0;
                        uint64_t want = drop ? n / w : (n + w - 1) / w;
                        for (uint32_t r = 0; r < w; r++) {
                            nst_sampler s;
                            CHECK_OK(nst_sampler_init(&s, n, 1234, r, w, shuffle, drop));
                            CHECK_EQ(s.per_rank, want);
                            for (uint64_t pos = 0; pos < s.per_rank; pos++) {
                                uint64_t it = nst_sampler_item(&s, epoch, pos);
                                CHECK(it < n);
                                if (it < n) hits[it]++;
                                total++;
                            }
                        }
                        CHECK_EQ(total, w * want);
                        uint64_t distinct = 0, dups = 0;
                        for (uint64_t i = 0; i < n; i++) {
                            if (hits[i]) distinct++;
                            if (hits[i] > 1) dups += hits[i] - 1;
                        }
                        if (drop) {
                            /* disjoint: no item twice; union is W*floor(n/W) */
                            CHECK_EQ(dups, 0);
                            CHECK_EQ(distinct, w * (n / w));
                        } else {
                            CHECK_EQ(distinct, n);
                            CHECK_EQ(dups, w * want - n);
                        }
                    }
    /* drop_last: the left-out items change across epochs when shuffled. */
    {
        uint64_t n = 17;
        uint32_t w = 4;
        int differs = 0;
        unsigned char in0[17] = {0};
        for (uint32_t r = 0; r < w; r++) {
            nst_sampler s;
            CHECK_OK(nst_sampler_init(&s, n, 8, r, w, 1, 1));
            for (uint64_t p = 0; p < s.per_rank; p++) in0[nst_sampler_item(&s, 0, p)] = 1;
        }
        for (uint64_t e = 1; e < 10 && !differs; e++) {
            unsigned char in[17] = {0};
            for (uint32_t r = 0; r < w; r++) {
                nst_sampler s;
                CHECK_OK(nst_sampler_init(&s, n, 8, r, w, 1, 1));
                for (uint64_t p = 0; p < s.per_rank; p++) in[nst_sampler_item(&s, e, p)] = 1;
            }
            differs = memcmp(in, in0, sizeof in) != 0;
        }
        CHECK(differs);
    }
}

static void test_init_errors(void)
{
    nst_sampler s;
    CHECK_RC(nst_sampler_init(&s, 10, 0, 2, 2, 1, 0), NOSTALL_E_INVALID);
    CHECK(strstr(nostall_last_error(), "sampler") != NULL);
    CHECK(strstr(nostall_last_error(), "rank") != NULL);
    CHECK_RC(nst_sampler_init(&s, 10, 0, 5, 2, 1, 0), NOSTALL_E_INVALID);
    CHECK_RC(nst_sampler_init(&s, 10, 0, 0, 0, 1, 0), NOSTALL_E_INVALID);
    CHECK(strstr(nostall_last_error(), "world") != NULL);
    CHECK_RC(nst_sampler_init(&s, 0, 0, 0, 1, 1, 0), NOSTALL_E_INVALID);
    CHECK(strstr(nostall_last_error(), "sampler") != NULL);
    CHECK_RC(nst_sampler_init(&s, 3, 0, 0, 4, 1, 1), NOSTALL_E_INVALID);
    CHECK(strstr(nostall_last_error(), "drop_last") != NULL);
    /* Without drop_last, n < world is fine: ranks get padded items. */
    CHECK_OK(nst_sampler_init(&s, 3, 0, 3, 4, 1, 0));
    CHECK_EQ(s.per_rank, 1);
    CHECK(nst_sampler_item(&s, 0, 0) < 3);
    CHECK_OK(nst_sampler_init(&s, 4, 0, 3, 4, 1, 1));
    CHECK_EQ(s.per_rank, 1);
}

static void test_resume(void)
{
    /* Look up (epoch, pos) in forward order, then in a scrambled order and
     * interleaved with other epochs: the answers must match. */
    enum { N = 1000 };
    static uint64_t fwd[3][N / 3 + 1];
    nst_sampler s;
    CHECK_OK(nst_sampler_init(&s, N, 2024, 1, 3, 1, 0));
    for (uint64_t e = 0; e < 3; e++)
        for (uint64_t p = 0; p < s.per_rank; p++) fwd[e][p] = nst_sampler_item(&s, e, p);
    for (uint64_t k = 0; k < 3 * s.per_rank; k++) {
        uint64_t idx = (k * 7919) % (3 * s.per_rank);
        uint64_t e = 2 - idx % 3, p = idx / 3;
        CHECK_EQ(nst_sampler_item(&s, e, p), fwd[e][p]);
    }
    /* A copy of the sampler (another thread, a resumed loader) agrees. */
    nst_sampler t;
    CHECK_OK(nst_sampler_init(&t, N, 2024, 1, 3, 1, 0));
    CHECK_EQ(nst_sampler_item(&t, 1, 200), fwd[1][200]);
    CHECK_EQ(t.per_rank, s.per_rank);
}

/* A resumed epoch with a band: the rest is the band's positions, then
 * every one from the offset on, sharded as any epoch (here unshuffled:
 * positions are items); past the rest, padding. */
static void test_resume_band(void)
{
    static const uint64_t band[] = {2, 5};
    nst_sampler s;
    for (int drop = 1; drop >= 0; drop--)
        for (uint32_t r = 0; r < 2; r++) { /* rest: 2 5 7 8 9 */
            CHECK_OK(nst_sampler_init(&s, 10, 1, r, 2, 0, drop));
            nst_sampler_resume_band(&s, 4, band, 2, 7);
            CHECK_EQ(nst_sampler_len(&s, 4), drop ? 2 : 3);
            CHECK_EQ(nst_sampler_len(&s, 5), 5); /* another epoch: whole */
            CHECK_EQ(nst_sampler_item(&s, 4, 0), r ? 5 : 2);
            CHECK_EQ(nst_sampler_item(&s, 4, 1), r ? 8 : 7);
            CHECK_EQ(nst_sampler_global(&s, 4, 1), r ? 8 : 7);
            if (!drop) {
                CHECK_EQ(nst_sampler_item(&s, 4, 2), r ? 2 : 9); /* rank 1: a wrap */
                CHECK_EQ(nst_sampler_global(&s, 4, 2), r ? UINT64_MAX : 9);
            }
            CHECK_EQ(nst_sampler_global(&s, 5, 4), r ? 9 : 8);
            CHECK_EQ(nst_sampler_global(&s, 5, 5), UINT64_MAX);
            nst_sampler_resume(&s, 4, 0); /* cleared */
            CHECK_EQ(nst_sampler_item(&s, 4, 1), r ? 3 : 2);
        }
}

int main(void)
{
    test_bijection();
    test_keying();
    test_uniformity();
    test_identity();
    test_sharding();
    test_init_errors();
    test_resume();
    test_resume_band();
    TEST_EXIT();
}
