/*
 * throttle.h — emulated storage: make every storage read take as long as it
 * would on a device of a given bandwidth and latency, so HDD-, SSD- and
 * cloud-like storage can be studied on any machine.
 * Room: source/ (reading bytes).
 *
 * Model: requests overlap their latency; transfers share the bandwidth one
 * after another. A read of n bytes issued at time t completes at
 *   start = max(t + latency, device_free);  done = start + n / bandwidth
 * and device_free becomes done. The caller sleeps until `done`
 * (clock_nanosleep: no CPU is spent waiting). The only shared state is
 * device_free, guarded by `mu`, held for a few instructions per read.
 * Called by worker threads.
 */
#ifndef NST_SOURCE_THROTTLE_H
#define NST_SOURCE_THROTTLE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

typedef struct nst_throttle {
    int on;
    double ns_per_byte; /* 0: unlimited bandwidth */
    uint64_t latency_ns;
    pthread_mutex_t mu;
    uint64_t device_free_ns; /* guarded by mu */
} nst_throttle;

/* mbps: 10^6 bytes per second (0 = unlimited); latency_ms (0 = none). */
void nst_throttle_init(nst_throttle *t, double mbps, double latency_ms);
void nst_throttle_destroy(nst_throttle *t);
/* For readers with several reads in flight: schedule a read of `bytes`
 * issued now and get the time (nst_now_ns clock) it completes on the
 * emulated device (0 when the throttle is off); later, sleep until that
 * time (returns the ns slept; at once for 0). Sleeps in slices of at most
 * 20 ms and returns early once *stop is set, so a loader's stop/free is
 * never held up by an emulated delay. */
uint64_t nst_throttle_schedule(nst_throttle *t, uint64_t bytes);
uint64_t nst_throttle_wait_until(uint64_t done_ns, const atomic_int *stop);

#endif
