/* clock.h — monotonic nanoseconds for stage timing and stall accounting. */
#ifndef NST_COMMON_CLOCK_H
#define NST_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t nst_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

#endif
