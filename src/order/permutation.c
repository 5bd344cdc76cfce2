/*
 * permutation.c — the keyed permutation of an epoch: a bijection on [0, n)
 * keyed by (seed, epoch), evaluated one position at a time (permutation.h).
 * Room: order/ (which item comes when); the sampler (sampler.c), a mix's
 * sources (mix.c) and the shard order of streaming (dataset/stream.c) use it.
 *
 * Design: a balanced Feistel network over a domain of 2^bits values, bits
 * being the smallest even number >= bits(n - 1) (at least 2), so
 * 2^bits < 4n. A Feistel network is a bijection on its domain whatever its
 * round function; restricting it to [0, n) by cycle-walking (apply it again
 * while the value is >= n) keeps it a bijection on [0, n), and since the
 * domain is under 4n a walk takes fewer than 4 steps on average. Round
 * functions are nst_hash4(seed, epoch, purpose|round, half) masked to the
 * half width, so the order is a pure function of (n, seed, epoch).
 *
 * Threads: pure (no state, no allocation); any thread may call it.
 */
#include "order/permutation.h"

#include "common/rng.h"

/* Rounds of the Feistel network. Four make a pseudo-random permutation for
 * wide halves; the extra rounds improve the mixing of the tiny domains
 * (a 10-item dataset uses 2-bit halves). */
#define NST_FEISTEL_ROUNDS 8

/* Number of bits needed to write v (0 for v == 0). */
static unsigned bit_length(uint64_t v)
{
    unsigned b = 0;
    while (v) {
        b++;
        v >>= 1;
    }
    return b;
}

/* One pass of the Feistel network over [0, 2^(2*half)). */
static uint64_t feistel(uint64_t x, unsigned half, uint64_t mask, uint64_t seed, uint64_t epoch)
{
    uint64_t l = (x >> half) & mask, r = x & mask;
    for (uint64_t round = 0; round < NST_FEISTEL_ROUNDS; round++) {
        uint64_t f = nst_hash4(seed, epoch, ((uint64_t)NST_RNG_ORDER << 32) | round, r) & mask;
        uint64_t t = l ^ f;
        l = r;
        r = t;
    }
    return (l << half) | r;
}

uint64_t nst_permute(uint64_t n, uint64_t seed, uint64_t epoch, uint64_t i)
{
    if (n <= 1) return 0;
    unsigned bits = bit_length(n - 1);
    if (bits < 2) bits = 2;
    bits += bits & 1u;
    unsigned half = bits / 2; /* 1..32 */
    uint64_t mask = (half >= 64) ? ~0ULL : ((1ULL << half) - 1);
    uint64_t x = i % n;
    /* Cycle-walking: the cycle through x comes back to x at the latest, so
     * this terminates, and maps [0, n) onto itself one-to-one. */
    do {
        x = feistel(x, half, mask, seed, epoch);
    } while (x >= n);
    return x;
}
