/*
 * rng.h — counter-based randomness: every random choice in nostall is a pure
 * function of a few integers (seed, epoch, item, purpose), so results never
 * depend on which thread did the work or in what order.
 *
 * nst_mix64() is a strong 64-bit finalizer (splitmix64's); nst_rng is a
 * splitmix64 stream seeded from such a hash. Header-only, no state shared.
 */
#ifndef NST_COMMON_RNG_H
#define NST_COMMON_RNG_H

#include <stdint.h>

static inline uint64_t nst_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Hash of an ordered tuple of up to four words. */
static inline uint64_t nst_hash4(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    uint64_t h = nst_mix64(a + 0x9e3779b97f4a7c15ULL);
    h = nst_mix64(h ^ (b + 0x632be59bd9b4e019ULL));
    h = nst_mix64(h ^ (c + 0x85157af5ULL));
    h = nst_mix64(h ^ (d + 0x3c6ef372fe94f82bULL));
    return h;
}

/* Purposes keep the streams of different uses of (seed, epoch, item) apart. */
enum {
    NST_RNG_ORDER = 1,           /* item order of an epoch    */
    NST_RNG_AUGMENT = 2,         /* per-item augmentation     */
    NST_RNG_ECHO_USES = 3,       /* echoing: uses of an item  */
    NST_RNG_ECHO_DRAW = 4,       /* echoing: pool draws        */
    NST_RNG_ECHO_BATCH = 5,      /* batch echoing: uses of a batch */
    NST_RNG_ECHO_BATCH_DRAW = 6, /* batch echoing: shuffle-buffer draws */
};
/* task=tokens: a window's start (not per copy: an echoed window is the
 * same window). "tokens" in ASCII, kept as the tests' references know it. */
#define NST_RNG_WINDOW 0x746f6b656e73ULL
/* Augmentation of the k-th echoed copy of an item (k = 0: the item's own
 * stream, as without echoing). */
#define NST_RNG_AUGMENT_COPY(k) (NST_RNG_AUGMENT + ((uint64_t)(k) << 8))

typedef struct nst_rng {
    uint64_t state;
} nst_rng;

static inline void nst_rng_seed(nst_rng *r, uint64_t seed) { r->state = seed; }

static inline uint64_t nst_rng_u64(nst_rng *r)
{
    r->state += 0x9e3779b97f4a7c15ULL;
    return nst_mix64(r->state);
}

/* Uniform double in [0, 1), 53 bits. */
static inline double nst_rng_double(nst_rng *r)
{
    return (double)(nst_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* Uniform double in [lo, hi). */
static inline double nst_rng_uniform(nst_rng *r, double lo, double hi)
{
    return lo + (hi - lo) * nst_rng_double(r);
}

/* Uniform integer in [0, n), n >= 1, without modulo bias (Lemire). */
static inline uint64_t nst_rng_below(nst_rng *r, uint64_t n)
{
    unsigned __int128 m = (unsigned __int128)nst_rng_u64(r) * n;
    uint64_t lo = (uint64_t)m;
    if (lo < n) {
        uint64_t t = (0 - n) % n;
        while (lo < t) {
            m = (unsigned __int128)nst_rng_u64(r) * n;
            lo = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

#endif
