/*
 * lock.c — a coordinated group's robust process-shared mutex and its
 * events. A holder that dies leaves EOWNERDEAD to the next locker, which
 * makes the mutex consistent and repairs: the batch engine finishes or
 * undoes the journaled update (nst_engine_repair), dead members are found at
 * once by the next sweep. Lock attempts are timed (100 ms slices) so a
 * stopped member never blocks on a stuck holder; waits are futex waits on
 * a shared event word, in slices of at most 50 ms, each slice rechecking
 * the member's stop flag and sweeping for dead members (group.c).
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/sanitizer.h"
#include "coord/group_impl.h"

#define SLICE_NS (50ull * 1000000)

static void ev_wait(_Atomic uint32_t *ev, uint32_t val, uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
    syscall(SYS_futex, (uint32_t *)ev, FUTEX_WAIT, val, &ts, NULL, 0);
}

void grp_wake(_Atomic uint32_t *ev, uint32_t nwait)
{
    atomic_fetch_add_explicit(ev, 1, memory_order_release);
    if (nwait) syscall(SYS_futex, (uint32_t *)ev, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void grp_wake_all(header *h)
{
    grp_wake(&h->ev_work, h->nwait_work);
    grp_wake(&h->ev_ready, h->nwait_ready);
}

int grp_init_mutex(header *h, const char *name)
{
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
    int err = pthread_mutex_init(&h->mu, &ma);
    pthread_mutexattr_destroy(&ma);
    if (err)
        return nst_error(NOSTALL_E_STATE, "group %s: robust process-shared mutex: %s", name,
                         strerror(err));
    return 0;
}

/* After EOWNERDEAD: finish or undo the dead holder's update. */
static void repair(nst_group *g)
{
    header *h = g->h;
    nst_engine_repair(g->q);
    h->mutex_repairs++;
    h->last_sweep_ns = 0; /* find the dead holder at once */
    grp_wake_all(h);
}

/* Try to lock for about 100 ms: 0, EOWNERDEAD, ETIMEDOUT or an error. */
static int lock_slice(pthread_mutex_t *mu)
{
#ifdef NST_TSAN
    /* TSan's pthread_mutex_timedlock interceptor ignores EOWNERDEAD (it then
     * believes the mutex unlocked); its trylock handles it. Same semantics. */
    for (int i = 0; i < 100; i++) {
        int r = pthread_mutex_trylock(mu);
        if (r != EBUSY) return r;
        usleep(1000);
    }
    return ETIMEDOUT;
#else
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 100 * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    return pthread_mutex_timedlock(mu, &ts);
#endif
}

/* Lock the group. Stop-aware unless `bounded_ms` > 0 (then give up after it). */
int grp_lock(nst_group *g, uint32_t bounded_ms)
{
    header *h = g->h;
    uint64_t until = bounded_ms ? nst_now_ns() + (uint64_t)bounded_ms * 1000000 : 0;
    for (;;) {
        int r = lock_slice(&h->mu);
        if (r == 0) return 0;
        if (r == EOWNERDEAD) {
            pthread_mutex_consistent(&h->mu);
            repair(g);
            return 0;
        }
        if (r != ETIMEDOUT)
            return nst_error(NOSTALL_E_STATE, "group %s: mutex unusable (%s)", g->name, strerror(r));
        if (bounded_ms ? nst_now_ns() >= until : atomic_load(&g->stop))
            return nst_error(bounded_ms ? NOSTALL_E_STATE : NOSTALL_E_STOPPED, "group %s: %s",
                             g->name, bounded_ms ? "mutex held too long" : "stopped");
    }
}

void grp_unlock(nst_group *g) { pthread_mutex_unlock(&g->h->mu); }

void grp_heartbeat(nst_group *g)
{
    atomic_store_explicit(&g->h->members[g->me].heartbeat, nst_now_ns(), memory_order_relaxed);
}

/* Sleep on an event (mutex held on entry and on a 0 return). Returns <0 if
 * the mutex could not be retaken (then it is not held). */
int grp_wait(nst_group *g, _Atomic uint32_t *ev, uint32_t *nwait, uint64_t deadline)
{
    uint32_t v = atomic_load_explicit(ev, memory_order_acquire);
    uint64_t now = nst_now_ns(), ns = SLICE_NS;
    if (deadline && deadline > now && deadline - now < ns) ns = deadline - now;
    (*nwait)++;
    grp_unlock(g);
    if (!atomic_load(&g->stop)) ev_wait(ev, v, ns);
    int rc = grp_lock(g, 0);
    if (rc < 0) return rc;
    if (*nwait) (*nwait)--;
    grp_heartbeat(g);
    return 0;
}
