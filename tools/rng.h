/*
 * rng.h — the CLI's one random generator: splitmix64 (the library's
 * src/common/rng.h is internal; tools/ include public headers only). The
 * synthetic datasets of `nostall gen` (images, COCO, audio) and the order
 * of `nostall pack --shuffle` are pure functions of their seeds through it,
 * so the streams below must never change: tests/golden and the
 * generators' references know their bytes. Header-only, no shared state.
 */
#ifndef NOSTALL_TOOLS_RNG_H
#define NOSTALL_TOOLS_RNG_H

#include <stdint.h>

#define TOOL_GOLDEN_GAMMA 0x9e3779b97f4a7c15ULL /* splitmix64's increment */

/* splitmix64's finalizer: a strong 64-bit mix. */
static inline uint64_t tool_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* A splitmix64 stream; seed it with {state}. */
typedef struct tool_rng {
    uint64_t s;
} tool_rng;

static inline uint64_t tool_rng_next(tool_rng *r)
{
    r->s += TOOL_GOLDEN_GAMMA;
    return tool_mix64(r->s);
}

/* Uniform in [0, 1), 53 bits. */
static inline double tool_rng_unit(tool_rng *r)
{
    return (double)(tool_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* Uniform in [lo, hi). */
static inline double tool_rng_range(tool_rng *r, double lo, double hi)
{
    return lo + (hi - lo) * tool_rng_unit(r);
}

#endif
