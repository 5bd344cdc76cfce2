/* throttle.c — emulated storage delays (see throttle.h for the model).
 * Room: source/ (reading bytes). */
#include <errno.h>
#include <time.h>

#include "common/clock.h"
#include "source/throttle.h"

void nst_throttle_init(nst_throttle *t, double mbps, double latency_ms)
{
    t->ns_per_byte = mbps > 0 ? 1e3 / mbps : 0; /* 1e9 ns / (mbps * 1e6 B) */
    t->latency_ns = latency_ms > 0 ? (uint64_t)(latency_ms * 1e6) : 0;
    t->on = mbps > 0 || latency_ms > 0;
    t->device_free_ns = 0;
    pthread_mutex_init(&t->mu, NULL);
}

void nst_throttle_destroy(nst_throttle *t) { pthread_mutex_destroy(&t->mu); }

uint64_t nst_throttle_schedule(nst_throttle *t, uint64_t bytes)
{
    if (!t->on) return 0;
    uint64_t start = nst_now_ns() + t->latency_ns, done;
    pthread_mutex_lock(&t->mu);
    if (t->device_free_ns > start) start = t->device_free_ns;
    done = start + (uint64_t)((double)bytes * t->ns_per_byte);
    t->device_free_ns = done;
    pthread_mutex_unlock(&t->mu);
    return done;
}

uint64_t nst_throttle_wait_until(uint64_t done, const atomic_int *stop)
{
    uint64_t now = nst_now_ns();
    for (;;) {
        uint64_t t_now = nst_now_ns();
        if (t_now >= done || (stop && atomic_load(stop))) break;
        uint64_t until = done - t_now > 20000000 ? t_now + 20000000 : done;
        struct timespec ts = {(time_t)(until / 1000000000), (long)(until % 1000000000)};
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL); /* EINTR: loop */
    }
    return nst_now_ns() - now;
}
