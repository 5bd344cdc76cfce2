/*
 * group.c — coordinated prep: one shared-memory segment per group, in which
 * several loader processes prepare each item once and every member consumes
 * every batch (docs/coordinated.md is the full protocol).
 *
 * SEGMENT  /dev/shm/nostall-<uid>-<name>, mode 0600:
 *   header (magic, ABI, generation, geometry, fingerprint, robust mutex,
 *   event words, cursor, journal, members[64], slot control[nslots]),
 *   then per slot, 64-byte aligned: images, labels, indices, item status,
 *   item control. Offsets only, no pointers: every process maps it anywhere.
 *
 * LOCKING  One robust, process-shared mutex guards everything in the header
 *   and the slot control; item bytes are written without it by the ticket's
 *   holder and read by consumers after the slot is READY. A holder that dies
 *   leaves EOWNERDEAD to the next locker, which repairs (repair()): multi-step
 *   updates are journaled, counters are recomputed from per-item states.
 *   Waits: futex on two shared event words (work, ready) in slices of at
 *   most 50 ms, each slice checking the local stop flag and sweeping for
 *   dead members (at most every 100 ms per group). Lock attempts are timed
 *   (100 ms slices) so a stopped member never blocks on a stuck holder.
 *
 * THREADS  take/done from any thread; next/release from the consumer; the
 *   handle's local fields (cur_epoch, failed) belong to the consumer.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "coord/group.h"

#define GRP_MAGIC UINT64_C(0x31305052474e534e) /* "NSNGRP01" little-endian */
#define GRP_ABI 1u
#define SLICE_NS (50ull * 1000000)
#define SWEEP_NS (100ull * 1000000)
#define STALE_HB_NS (300ull * 1000000)
#define NO_MEMBER 0xffu

enum { SEG_LIVE = 1, SEG_DEFUNCT = 2 };
enum { M_FREE = 0, M_ACTIVE = 1 };
enum { S_FREE = 0, S_OPENING, S_FILLING, S_FINALIZING, S_READY };
enum { I_FREE = 0, I_TAKEN, I_DONE };
enum { J_NONE = 0, J_OPEN, J_FINAL, J_DROP, J_TEST };

typedef struct member {
    uint32_t state;
    int32_t pid;
    uint64_t start_time;        /* /proc/<pid>/stat field 22               */
    _Atomic uint64_t heartbeat; /* CLOCK_MONOTONIC ns of its last call     */
    uint64_t first_seq, next_seq, released;
    uint64_t items_produced, batches_produced, batches_consumed, wait_ns, take_wait_ns;
    uint8_t pad_[24];
} member;

typedef struct slot_ctl {
    uint32_t state, count;
    uint64_t seq;
    uint32_t hint;      /* every item below is not I_FREE              */
    uint32_t done, failed, delivered;
    int32_t error;      /* fail policy: first failing item's status     */
    uint32_t error_item;
    uint64_t io[NST_GROUP_IO_MAX];
    char errmsg[NST_GROUP_MSG_MAX];
} slot_ctl;

typedef struct item_ctl {
    uint8_t state, owner;
    uint16_t pad_;
    uint32_t tag;
} item_ctl;

typedef struct gstats {
    uint64_t items_produced, batches_produced, batches_consumed, wait_ns, take_wait_ns;
} gstats;

typedef struct header {
    uint64_t magic;
    uint32_t abi;
    _Atomic uint32_t seg_state;
    uint64_t layout; /* LAYOUT_SIG: struct sizes of the build that made it */
    uint64_t generation;
    uint64_t total_bytes;
    /* geometry and plan */
    uint64_t items_per_epoch, epochs, item_bytes, batches_per_epoch, total_batches;
    uint32_t batch_size, drop_last, nslots, max_lead, fail_on_bad, nfp;
    uint64_t data_off, slot_bytes, off_labels, off_indices, off_status, off_items, off_msgs;
    uint32_t fp_len;
    char fp[NST_GROUP_FP_MAX];
    /* shared state (mu) */
    _Alignas(64) pthread_mutex_t mu;
    _Alignas(64) _Atomic uint32_t ev_work;
    uint32_t nwait_work;
    _Atomic uint32_t ev_ready;
    uint32_t nwait_ready;
    uint32_t journal, journal_arg;
    uint64_t prod_seq;
    uint32_t halted, pad_;
    uint64_t last_sweep_ns;
    gstats departed;
    uint64_t members_joined, members_dropped, items_requeued, mutex_repairs;
    member members[NST_GROUP_MAX_MEMBERS];
    slot_ctl slots[];
} header;

struct nst_group {
    header *h;
    uint8_t *base;
    size_t size;
    uint32_t me;
    pid_t pid;
    dev_t dev;
    ino_t ino;
    atomic_int stop;
    /* consumer only */
    uint64_t cur_epoch;
    int failed;
    char failmsg[NST_ERROR_MAX - 128];
    char name[NST_GROUP_NAME_MAX + 1];
    char shm[NST_GROUP_NAME_MAX + 48]; /* shm_open name: "/nostall-<uid>-<name>" */
};

#define LAYOUT_SIG                                                                         \
    ((uint64_t)sizeof(header) | (uint64_t)sizeof(slot_ctl) << 20 |                         \
     (uint64_t)sizeof(member) << 36 | (uint64_t)sizeof(pthread_mutex_t) << 48)

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

/* ------------------------------------------------------------------------
 * Futex events.
 * ------------------------------------------------------------------------ */

static void ev_wait(_Atomic uint32_t *ev, uint32_t val, uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
    syscall(SYS_futex, (uint32_t *)ev, FUTEX_WAIT, val, &ts, NULL, 0);
}

static void ev_wake(_Atomic uint32_t *ev, uint32_t nwait)
{
    atomic_fetch_add_explicit(ev, 1, memory_order_release);
    if (nwait) syscall(SYS_futex, (uint32_t *)ev, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static void wake_all(header *h)
{
    ev_wake(&h->ev_work, h->nwait_work);
    ev_wake(&h->ev_ready, h->nwait_ready);
}

/* ------------------------------------------------------------------------
 * Geometry.
 * ------------------------------------------------------------------------ */

static slot_ctl *sctl(header *h, uint32_t s) { return &h->slots[s]; }
static uint8_t *sdata(nst_group *g, uint32_t s)
{
    return g->base + g->h->data_off + (size_t)s * g->h->slot_bytes;
}
static item_ctl *sitems(nst_group *g, uint32_t s)
{
    return (item_ctl *)(sdata(g, s) + g->h->off_items);
}
static int32_t *sstatus(nst_group *g, uint32_t s)
{
    return (int32_t *)(sdata(g, s) + g->h->off_status);
}

static uint32_t batch_len(const header *h, uint64_t seq)
{
    uint64_t pos = (seq % h->batches_per_epoch) * h->batch_size;
    uint64_t rem = h->items_per_epoch - pos;
    return rem >= h->batch_size ? h->batch_size : (uint32_t)rem;
}

/* ------------------------------------------------------------------------
 * Process liveness.
 * ------------------------------------------------------------------------ */

/* Field 22 (start time) of /proc/<pid>/stat and the state letter; 0 if the
 * file cannot be read. No allocation. */
static int proc_stat(pid_t pid, uint64_t *start, char *state)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ') return 0;
    p += 2; /* field 3: state */
    *state = *p;
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (!p) return 0;
        p++;
    }
    *start = strtoull(p, NULL, 10);
    return 1;
}

static int proc_alive(pid_t pid, uint64_t start)
{
    if (pid <= 0) return 0;
    if (kill(pid, 0) < 0 && errno == ESRCH) return 0;
    uint64_t st = 0;
    char state = 0;
    if (!proc_stat(pid, &st, &state)) return access("/proc/self/stat", R_OK) == 0 ? 0 : 1;
    if (state == 'Z' || state == 'X' || state == 'x') return 0; /* exited, not yet reaped */
    return st == start;
}

/* ------------------------------------------------------------------------
 * Membership changes and repair (mutex held).
 * ------------------------------------------------------------------------ */

static void fold_stats(header *h, member *m)
{
    h->departed.items_produced += m->items_produced;
    h->departed.batches_produced += m->batches_produced;
    h->departed.batches_consumed += m->batches_consumed;
    h->departed.wait_ns += m->wait_ns;
    h->departed.take_wait_ns += m->take_wait_ns;
    m->items_produced = m->batches_produced = m->batches_consumed = 0;
    m->wait_ns = m->take_wait_ns = 0;
}

/* Remove member i: its tickets go back to the group, its lent batches count
 * as released (it no longer enters the minimum). Idempotent but for stats. */
static void drop_member(nst_group *g, uint32_t i, int dead)
{
    header *h = g->h;
    h->journal_arg = i;
    h->journal = J_DROP;
    for (uint32_t s = 0; s < h->nslots; s++) {
        slot_ctl *sc = sctl(h, s);
        if (sc->state != S_FILLING) continue;
        item_ctl *it = sitems(g, s);
        for (uint32_t j = 0; j < sc->count; j++) {
            if (it[j].state == I_TAKEN && it[j].owner == i) {
                it[j].state = I_FREE;
                if (j < sc->hint) sc->hint = j;
                h->items_requeued++;
            }
        }
    }
    if (h->members[i].state != M_FREE) {
        fold_stats(h, &h->members[i]);
        if (dead) h->members_dropped++;
    }
    h->members[i].state = M_FREE;
    h->journal = J_NONE;
    wake_all(h);
}

/* Check members for death: every member when `force`, else those whose
 * heartbeat is older than STALE_HB_NS, at most every SWEEP_NS per group. */
static void sweep(nst_group *g, int force)
{
    header *h = g->h;
    uint64_t now = nst_now_ns();
    if (!force && now - h->last_sweep_ns < SWEEP_NS) return;
    h->last_sweep_ns = now;
    for (uint32_t i = 0; i < NST_GROUP_MAX_MEMBERS; i++) {
        member *m = &h->members[i];
        if (m->state != M_ACTIVE || i == g->me) continue;
        uint64_t hb = atomic_load_explicit(&m->heartbeat, memory_order_relaxed);
        if (!force && now > hb && now - hb < STALE_HB_NS) continue;
        if (!proc_alive(m->pid, m->start_time)) drop_member(g, i, 1);
    }
}

static uint32_t live_members(const header *h)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < NST_GROUP_MAX_MEMBERS; i++) n += h->members[i].state == M_ACTIVE;
    return n;
}

/* Every batch below this is released by every member. */
static uint64_t group_free(const header *h)
{
    uint64_t lo = UINT64_MAX;
    for (uint32_t i = 0; i < NST_GROUP_MAX_MEMBERS; i++)
        if (h->members[i].state == M_ACTIVE && h->members[i].released < lo)
            lo = h->members[i].released;
    return lo == UINT64_MAX ? h->prod_seq : lo;
}

static void init_slot(nst_group *g, uint32_t s, uint64_t seq)
{
    header *h = g->h;
    slot_ctl *sc = sctl(h, s);
    item_ctl *it = sitems(g, s);
    int32_t *st = sstatus(g, s);
    sc->seq = seq;
    sc->count = batch_len(h, seq);
    sc->hint = sc->done = sc->failed = sc->delivered = 0;
    sc->error = 0;
    sc->error_item = 0;
    sc->errmsg[0] = '\0';
    memset(sc->io, 0, sizeof sc->io);
    for (uint32_t j = 0; j < h->batch_size; j++) {
        it[j].state = I_FREE;
        it[j].owner = NO_MEMBER;
        st[j] = NST_GROUP_PENDING_STATUS;
    }
}

/* Compact away bad items (skip policy) and publish the slot. Item status is
 * left in place (the batch reports it by original index). */
static void finalize(nst_group *g, uint32_t s)
{
    header *h = g->h;
    slot_ctl *sc = sctl(h, s);
    h->journal_arg = s;
    h->journal = J_FINAL;
    sc->state = S_FINALIZING;
    if (sc->failed && !h->fail_on_bad) {
        uint8_t *d = sdata(g, s);
        int64_t *labels = (int64_t *)(d + h->off_labels);
        uint64_t *indices = (uint64_t *)(d + h->off_indices);
        const int32_t *st = sstatus(g, s);
        uint32_t out = 0;
        for (uint32_t j = 0; j < sc->count; j++) {
            if (st[j] < 0) continue;
            if (out != j) {
                memmove(d + (size_t)out * h->item_bytes, d + (size_t)j * h->item_bytes,
                        h->item_bytes);
                labels[out] = labels[j];
                indices[out] = indices[j];
            }
            out++;
        }
        sc->delivered = out;
    } else {
        sc->delivered = sc->count;
    }
    sc->state = S_READY;
    h->journal = J_NONE;
    ev_wake(&h->ev_ready, h->nwait_ready);
}

/* After EOWNERDEAD: finish or undo the dead holder's update. */
static void repair(nst_group *g)
{
    header *h = g->h;
    uint32_t arg = h->journal_arg;
    switch (h->journal) {
    case J_OPEN:
        if (arg < h->nslots) {
            slot_ctl *sc = sctl(h, arg);
            if (sc->state == S_OPENING) {
                init_slot(g, arg, h->prod_seq);
                sc->state = S_FILLING;
            }
        }
        break;
    case J_FINAL:
        if (arg < h->nslots && sctl(h, arg)->state == S_FINALIZING) {
            /* compaction may have moved bytes: prepare the batch again */
            slot_ctl *sc = sctl(h, arg);
            item_ctl *it = sitems(g, arg);
            int32_t *st = sstatus(g, arg);
            for (uint32_t j = 0; j < sc->count; j++) {
                if (it[j].state != I_DONE) continue;
                it[j].state = I_FREE;
                st[j] = NST_GROUP_PENDING_STATUS;
            }
            memset(sc->io, 0, sizeof sc->io);
            sc->error = 0;
            sc->errmsg[0] = '\0';
            sc->state = S_FILLING;
        }
        break;
    case J_DROP:
        if (arg < NST_GROUP_MAX_MEMBERS) drop_member(g, arg, 1);
        break;
    default:
        break;
    }
    h->journal = J_NONE;
    /* The cursor: the open slot at prod_seq may be published already. */
    slot_ctl *cur = sctl(h, (uint32_t)(h->prod_seq % h->nslots));
    if (cur->state == S_FILLING && cur->seq == h->prod_seq) h->prod_seq++;
    /* Counters are derived from item states. */
    for (uint32_t s = 0; s < h->nslots; s++) {
        slot_ctl *sc = sctl(h, s);
        if (sc->state != S_FILLING) continue;
        item_ctl *it = sitems(g, s);
        const int32_t *st = sstatus(g, s);
        uint32_t done = 0, failed = 0, hint = sc->count;
        for (uint32_t j = 0; j < sc->count; j++) {
            if (it[j].state == I_DONE) {
                done++;
                failed += st[j] < 0;
            } else if (it[j].state == I_FREE && j < hint) {
                hint = j;
            }
        }
        sc->done = done;
        sc->failed = failed;
        sc->hint = hint;
        if (done == sc->count) finalize(g, s);
    }
    h->mutex_repairs++;
    h->last_sweep_ns = 0; /* find the dead holder at once */
    wake_all(h);
}

#if defined(__SANITIZE_THREAD__)
#define NST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define NST_TSAN 1
#endif
#endif

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
static int glock(nst_group *g, uint32_t bounded_ms)
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
            return nst_error(NOSTALL_E_STATE, "group %s: mutex unusable (%s)", g->name,
                             strerror(r));
        if (bounded_ms ? nst_now_ns() >= until : atomic_load(&g->stop))
            return nst_error(bounded_ms ? NOSTALL_E_STATE : NOSTALL_E_STOPPED,
                             "group %s: %s", g->name,
                             bounded_ms ? "mutex held too long" : "stopped");
    }
}

static void gunlock(nst_group *g) { pthread_mutex_unlock(&g->h->mu); }

static void heartbeat(nst_group *g)
{
    atomic_store_explicit(&g->h->members[g->me].heartbeat, nst_now_ns(), memory_order_relaxed);
}

/* Sleep on an event (mutex held on entry and on a 0 return). Returns <0 if
 * the mutex could not be retaken (then it is not held). */
static int wait_event(nst_group *g, _Atomic uint32_t *ev, uint32_t *nwait, uint64_t deadline)
{
    uint32_t v = atomic_load_explicit(ev, memory_order_acquire);
    uint64_t now = nst_now_ns(), ns = SLICE_NS;
    if (deadline && deadline - now < ns) ns = deadline - now;
    (*nwait)++;
    gunlock(g);
    if (!atomic_load(&g->stop)) ev_wait(ev, v, ns);
    int rc = glock(g, 0);
    if (rc < 0) return rc;
    if (*nwait) (*nwait)--;
    heartbeat(g);
    return 0;
}

static int forked(const nst_group *g, const char *fn)
{
    if (getpid() != g->pid)
        return nst_error(NOSTALL_E_FORK, "%s: group %s used in a child process after fork()", fn,
                         g->name);
    return 0;
}

/* ------------------------------------------------------------------------
 * Workers.
 * ------------------------------------------------------------------------ */

/* Open the batch at the cursor if the ring allows (mutex held). */
static int open_batch(nst_group *g)
{
    header *h = g->h;
    if (h->halted || h->prod_seq >= h->total_batches) return 0;
    if (h->prod_seq >= group_free(h) + h->max_lead) return 0;
    uint32_t s = (uint32_t)(h->prod_seq % h->nslots);
    slot_ctl *sc = sctl(h, s);
    h->journal_arg = s;
    h->journal = J_OPEN;
    sc->state = S_OPENING;
    init_slot(g, s, h->prod_seq);
    sc->state = S_FILLING;
    h->prod_seq++;
    h->journal = J_NONE;
    return 1;
}

/* The oldest free item of an open batch; 1 with *s, *j (mutex held). */
static int find_item(nst_group *g, uint32_t *s_out, uint32_t *j_out)
{
    header *h = g->h;
    uint64_t lo = h->prod_seq > h->nslots ? h->prod_seq - h->nslots : 0;
    for (uint64_t seq = lo; seq < h->prod_seq; seq++) {
        uint32_t s = (uint32_t)(seq % h->nslots);
        slot_ctl *sc = sctl(h, s);
        if (sc->state != S_FILLING || sc->seq != seq || sc->hint >= sc->count) continue;
        item_ctl *it = sitems(g, s);
        for (uint32_t j = sc->hint; j < sc->count; j++) {
            if (it[j].state == I_FREE) {
                *s_out = s;
                *j_out = j;
                return 1;
            }
            sc->hint = j + 1;
        }
    }
    return 0;
}

static int any_filling(const header *h)
{
    for (uint32_t s = 0; s < h->nslots; s++)
        if (h->slots[s].state == S_FILLING || h->slots[s].state == S_OPENING) return 1;
    return 0;
}

int nst_group_take(nst_group *g, nst_group_ticket *t, uint32_t timeout_ms)
{
    static const char fn[] = "nst_group_take";
    int rc;
    if (!g || !t) return nst_error(NOSTALL_E_INVALID, "%s: NULL argument", fn);
    if ((rc = forked(g, fn)) < 0) return rc;
    header *h = g->h;
    uint64_t t0 = nst_now_ns(), deadline = t0 + (uint64_t)timeout_ms * 1000000 + 1;
    if ((rc = glock(g, 0)) < 0) return rc;
    heartbeat(g);
    uint32_t s = 0, j = 0;
    for (;;) {
        if (atomic_load(&g->stop)) {
            rc = nst_error(NOSTALL_E_STOPPED, "%s: group %s stopped", fn, g->name);
            break;
        }
        if (find_item(g, &s, &j) || (open_batch(g) && find_item(g, &s, &j))) {
            rc = 0;
            break;
        }
        if ((h->halted || h->prod_seq >= h->total_batches) && !any_filling(h)) {
            rc = NOSTALL_DONE;
            break;
        }
        sweep(g, 0);
        if (nst_now_ns() >= deadline) {
            rc = NOSTALL_TIMEOUT;
            break;
        }
        if ((rc = wait_event(g, &h->ev_work, &h->nwait_work, deadline)) < 0) {
            h = NULL;
            break;
        }
    }
    if (!h) return rc; /* mutex not held */
    if (rc == 0) {
        slot_ctl *sc = sctl(h, s);
        item_ctl *it = &sitems(g, s)[j];
        it->owner = (uint8_t)g->me;
        it->tag++;
        it->state = I_TAKEN;
        if (j == sc->hint) sc->hint = j + 1;
        uint8_t *d = sdata(g, s);
        t->seq = sc->seq;
        t->epoch = sc->seq / h->batches_per_epoch;
        t->position = (sc->seq % h->batches_per_epoch) * h->batch_size + j;
        t->j = j;
        t->slot = s;
        t->tag = it->tag;
        t->image = d + (size_t)j * h->item_bytes;
        t->label = (int64_t *)(d + h->off_labels) + j;
        t->index = (uint64_t *)(d + h->off_indices) + j;
        memset(t->io, 0, sizeof t->io);
    }
    h->members[g->me].take_wait_ns += nst_now_ns() - t0;
    gunlock(g);
    return rc;
}

void nst_group_done(nst_group *g, const nst_group_ticket *t, int status, const char *msg)
{
    if (!g || !t || getpid() != g->pid) return;
    header *h = g->h;
    if (glock(g, 2000) < 0) return; /* the ticket is returned at leave */
    heartbeat(g);
    if (t->slot >= h->nslots || t->j >= h->batch_size) goto out;
    slot_ctl *sc = sctl(h, t->slot);
    item_ctl *it = &sitems(g, t->slot)[t->j];
    if (sc->state != S_FILLING || sc->seq != t->seq || it->state != I_TAKEN ||
        it->owner != g->me || it->tag != t->tag)
        goto out; /* reassigned meanwhile: someone else's result counts */
    sstatus(g, t->slot)[t->j] = status < 0 ? status : 0;
    for (int k = 0; k < NST_GROUP_IO_MAX; k++) sc->io[k] += t->io[k];
    if (status < 0) {
        snprintf((char *)sdata(g, t->slot) + h->off_msgs + (size_t)t->j * NST_GROUP_ITEM_MSG,
                 NST_GROUP_ITEM_MSG, "%s", msg ? msg : nostall_strerror(status));
        sc->failed++;
        if (h->fail_on_bad) {
            h->halted = 1;
            if (!sc->error || t->j < sc->error_item) {
                sc->error = status;
                sc->error_item = t->j;
                snprintf(sc->errmsg, sizeof sc->errmsg, "epoch %llu position %llu: %s",
                         (unsigned long long)t->epoch, (unsigned long long)t->position,
                         msg ? msg : nostall_strerror(status));
            }
        }
    }
    it->state = I_DONE;
    member *m = &h->members[g->me];
    m->items_produced++;
    if (++sc->done == sc->count) {
        finalize(g, t->slot);
        m->batches_produced++;
    }
out:
    gunlock(g);
}

/* ------------------------------------------------------------------------
 * Consumer.
 * ------------------------------------------------------------------------ */

int nst_group_next(nst_group *g, nst_group_batch *b, uint32_t timeout_ms)
{
    static const char fn[] = "nst_group_next";
    int rc;
    if (!g || !b) return nst_error(NOSTALL_E_INVALID, "%s: NULL argument", fn);
    if ((rc = forked(g, fn)) < 0) return rc;
    if (g->failed) return nst_error_set(g->failed, g->failmsg);
    header *h = g->h;
    uint64_t t0 = nst_now_ns(), deadline = t0 + (uint64_t)timeout_ms * 1000000 + 1;
    if ((rc = glock(g, 0)) < 0) return rc;
    heartbeat(g);
    member *m = &h->members[g->me];
    for (;;) {
        if (atomic_load(&g->stop)) {
            rc = nst_error(NOSTALL_E_STOPPED, "%s: group %s stopped", fn, g->name);
            break;
        }
        uint64_t seq = m->next_seq, e = seq / h->batches_per_epoch;
        if (e > g->cur_epoch) {
            g->cur_epoch = e;
            rc = NOSTALL_EPOCH_END;
            break;
        }
        if (seq >= h->total_batches) {
            rc = NOSTALL_DONE;
            break;
        }
        if (seq - m->released >= h->max_lead) {
            rc = nst_error(NOSTALL_E_STATE,
                           "%s: group %s: all %u batches of max_lead are lent; release one", fn,
                           g->name, h->max_lead);
            break;
        }
        uint32_t s = (uint32_t)(seq % h->nslots);
        slot_ctl *sc = sctl(h, s);
        if (sc->state == S_READY && sc->seq == seq) {
            if (sc->error) {
                g->failed = sc->error;
                snprintf(g->failmsg, sizeof g->failmsg, "%s: group %s: %s", fn, g->name,
                         sc->errmsg);
                rc = nst_error_set(g->failed, g->failmsg);
                break;
            }
            m->next_seq++;
            m->batches_consumed++;
            if (sc->delivered == 0) { /* every item bad and skipped */
                if (m->released == seq) {
                    m->released++;
                    ev_wake(&h->ev_work, h->nwait_work);
                }
                continue;
            }
            uint8_t *d = sdata(g, s);
            b->seq = seq;
            b->epoch = e;
            b->position = (seq % h->batches_per_epoch) * h->batch_size;
            b->count = sc->delivered;
            b->len = sc->count;
            b->images = d;
            b->labels = (int64_t *)(d + h->off_labels);
            b->indices = (uint64_t *)(d + h->off_indices);
            b->item_status = sstatus(g, s);
            b->item_msgs = (const char *)d + h->off_msgs;
            b->io = sc->io;
            rc = 0;
            break;
        }
        sweep(g, 0);
        if (nst_now_ns() >= deadline) {
            rc = NOSTALL_TIMEOUT;
            break;
        }
        if ((rc = wait_event(g, &h->ev_ready, &h->nwait_ready, deadline)) < 0) {
            /* mutex not held */
            return rc;
        }
    }
    m->wait_ns += nst_now_ns() - t0;
    gunlock(g);
    return rc;
}

int nst_group_release(nst_group *g, uint64_t seq)
{
    static const char fn[] = "nst_group_release";
    int rc;
    if (!g) return nst_error(NOSTALL_E_INVALID, "%s: NULL argument", fn);
    if ((rc = forked(g, fn)) < 0) return rc;
    header *h = g->h;
    if ((rc = glock(g, 2000)) < 0) return rc;
    heartbeat(g);
    member *m = &h->members[g->me];
    if (seq != m->released || seq >= m->next_seq) {
        rc = nst_error(NOSTALL_E_INVALID,
                       "%s: group %s: batch %llu is not the oldest lent batch (%llu of %llu lent)",
                       fn, g->name, (unsigned long long)seq, (unsigned long long)m->released,
                       (unsigned long long)m->next_seq);
    } else {
        m->released++;
        while (m->released < m->next_seq) { /* skipped empty batches lent meanwhile */
            slot_ctl *sc = sctl(h, (uint32_t)(m->released % h->nslots));
            if (sc->seq != m->released || sc->state != S_READY || sc->delivered) break;
            m->released++;
        }
        ev_wake(&h->ev_work, h->nwait_work);
    }
    gunlock(g);
    return rc;
}

/* ------------------------------------------------------------------------
 * Stop, stats.
 * ------------------------------------------------------------------------ */

void nst_group_stop(nst_group *g)
{
    if (!g) return;
    atomic_store(&g->stop, 1);
    if (getpid() != g->pid) return;
    /* Wake this member's sleepers (and, harmlessly, everyone else's). */
    atomic_fetch_add(&g->h->ev_work, 1);
    atomic_fetch_add(&g->h->ev_ready, 1);
    syscall(SYS_futex, (uint32_t *)&g->h->ev_work, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
    syscall(SYS_futex, (uint32_t *)&g->h->ev_ready, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

int nst_group_stats_get(nst_group *g, nst_group_stats *s)
{
    int rc;
    if (!g || !s) return nst_error(NOSTALL_E_INVALID, "nst_group_stats_get: NULL argument");
    if ((rc = forked(g, "nst_group_stats_get")) < 0) return rc;
    header *h = g->h;
    if ((rc = glock(g, 2000)) < 0) return rc;
    memset(s, 0, sizeof *s);
    const member *m = &h->members[g->me];
    s->members = live_members(h);
    s->member_id = g->me;
    s->generation = h->generation;
    s->first_seq = m->first_seq;
    s->first_epoch = m->first_seq / h->batches_per_epoch;
    s->items_produced = m->items_produced;
    s->batches_produced = m->batches_produced;
    s->batches_consumed = m->batches_consumed;
    s->wait_ns = m->wait_ns;
    s->take_wait_ns = m->take_wait_ns;
    gstats t = h->departed;
    for (uint32_t i = 0; i < NST_GROUP_MAX_MEMBERS; i++) {
        const member *x = &h->members[i];
        if (x->state != M_ACTIVE) continue;
        t.items_produced += x->items_produced;
        t.batches_produced += x->batches_produced;
        t.batches_consumed += x->batches_consumed;
        t.wait_ns += x->wait_ns;
    }
    s->group_items_produced = t.items_produced;
    s->group_batches_produced = t.batches_produced;
    s->group_batches_consumed = t.batches_consumed;
    s->group_wait_ns = t.wait_ns;
    s->members_joined = h->members_joined;
    s->members_dropped = h->members_dropped;
    s->items_requeued = h->items_requeued;
    s->mutex_repairs = h->mutex_repairs;
    s->produced_seq = h->prod_seq;
    s->freed_seq = group_free(h);
    gunlock(g);
    return 0;
}

/* ------------------------------------------------------------------------
 * Join / leave.
 * ------------------------------------------------------------------------ */

int nst_group_path(const char *name, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "/dev/shm/nostall-%u-%s", (unsigned)getuid(), name ? name : "");
    return n < 0 || (size_t)n >= cap ? NOSTALL_E_INVALID : 0;
}

static int valid_name(const char *n)
{
    size_t len = strlen(n);
    if (len == 0 || len > NST_GROUP_NAME_MAX || n[0] == '.') return 0;
    for (size_t i = 0; i < len; i++) {
        char c = n[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.'))
            return 0;
    }
    return 1;
}

typedef struct plan {
    uint64_t batches_per_epoch, total_batches, slot_bytes, data_off, total;
    uint64_t off_labels, off_indices, off_status, off_items, off_msgs;
    uint32_t max_lead, fp_len;
    char fp[NST_GROUP_FP_MAX];
} plan;

static int make_plan(const nst_group_params *p, plan *pl, const char *fn)
{
    const char *nm = p->name;
    if (p->nslots == 0 || p->nslots > NST_GROUP_MAX_SLOTS)
        return nst_error(NOSTALL_E_OPTION, "%s: group %s: nslots %u out of 1..%u", fn, nm,
                         p->nslots, NST_GROUP_MAX_SLOTS);
    if (p->batch_size == 0 || p->item_bytes == 0 || p->items_per_epoch == 0)
        return nst_error(NOSTALL_E_INVALID, "%s: group %s: empty batch, item or epoch", fn, nm);
    if (p->max_lead > p->nslots)
        return nst_error(NOSTALL_E_OPTION, "%s: group %s: max_lead %u exceeds nslots %u", fn, nm,
                         p->max_lead, p->nslots);
    pl->max_lead = p->max_lead ? p->max_lead : p->nslots;
    pl->batches_per_epoch = p->drop_last ? p->items_per_epoch / p->batch_size
                                         : (p->items_per_epoch + p->batch_size - 1) / p->batch_size;
    if (pl->batches_per_epoch == 0)
        return nst_error(NOSTALL_E_INVALID,
                         "%s: group %s: %llu items make no batch of %u with drop_last", fn, nm,
                         (unsigned long long)p->items_per_epoch, p->batch_size);
    pl->total_batches = UINT64_MAX;
    if (p->epochs && p->epochs <= UINT64_MAX / pl->batches_per_epoch)
        pl->total_batches = p->epochs * pl->batches_per_epoch;
    uint64_t bs = p->batch_size;
    if (p->item_bytes > (UINT64_MAX >> 24) / bs)
        return nst_error(NOSTALL_E_INVALID, "%s: group %s: batch of %u items of %zu bytes too large",
                         fn, nm, p->batch_size, p->item_bytes);
    pl->off_labels = align64(bs * p->item_bytes);
    pl->off_indices = pl->off_labels + align64(bs * sizeof(int64_t));
    pl->off_status = pl->off_indices + align64(bs * sizeof(uint64_t));
    pl->off_items = pl->off_status + align64(bs * sizeof(int32_t));
    pl->off_msgs = pl->off_items + align64(bs * sizeof(item_ctl));
    pl->slot_bytes = pl->off_msgs + align64(bs * NST_GROUP_ITEM_MSG);
    pl->data_off = (sizeof(header) + (uint64_t)p->nslots * sizeof(slot_ctl) + 4095) & ~(uint64_t)4095;
    if (pl->slot_bytes > (UINT64_MAX / 2 - pl->data_off) / p->nslots)
        return nst_error(NOSTALL_E_INVALID, "%s: group %s: ring too large", fn, nm);
    pl->total = pl->data_off + pl->slot_bytes * p->nslots;
    /* fingerprint: name\0value\0 ... */
    size_t off = 0;
    for (uint32_t i = 0; i < p->nfp; i++) {
        const char *n = p->fp[i].name ? p->fp[i].name : "", *v = p->fp[i].value ? p->fp[i].value : "";
        size_t ln = strlen(n) + 1, lv = strlen(v) + 1;
        if (off + ln + lv > sizeof pl->fp)
            return nst_error(NOSTALL_E_OPTION, "%s: group %s: fingerprint over %d bytes at option %s",
                             fn, nm, NST_GROUP_FP_MAX, n);
        memcpy(pl->fp + off, n, ln);
        memcpy(pl->fp + off + ln, v, lv);
        off += ln + lv;
    }
    pl->fp_len = (uint32_t)off;
    return 0;
}

/* First difference between the group's plan and ours: E_OPTION naming it. */
static int compare(nst_group *g, const nst_group_params *p, const plan *pl)
{
    header *h = g->h;
    const char *a = h->fp, *ae = h->fp + h->fp_len, *b = pl->fp, *be = pl->fp + pl->fp_len;
    while (a < ae || b < be) {
        if (a >= ae || b >= be) {
            const char *extra = a < ae ? a : b;
            return nst_error(NOSTALL_E_OPTION,
                             "group %s: option %s is set by %s but not by %s", g->name, extra,
                             a < ae ? "the group" : "this job", a < ae ? "this job" : "the group");
        }
        const char *av = a + strlen(a) + 1, *bv = b + strlen(b) + 1;
        if (strcmp(a, b) != 0)
            return nst_error(NOSTALL_E_OPTION, "group %s: option lists differ: group has %s, this job %s",
                             g->name, a, b);
        if (strcmp(av, bv) != 0)
            return nst_error(NOSTALL_E_OPTION,
                             "group %s: option %s differs: group has '%s', this job '%s'", g->name,
                             a, av, bv);
        a = av + strlen(av) + 1;
        b = bv + strlen(bv) + 1;
    }
#define CMP_(field, what, val)                                                                   \
    if ((uint64_t)h->field != (uint64_t)(val))                                                   \
        return nst_error(NOSTALL_E_OPTION, "group %s: option %s differs: group has %llu, this job %llu", \
                         g->name, what, (unsigned long long)h->field, (unsigned long long)(val));
    CMP_(items_per_epoch, "items_per_epoch", p->items_per_epoch)
    CMP_(batch_size, "batch_size", p->batch_size)
    CMP_(drop_last, "drop_last", p->drop_last ? 1 : 0)
    CMP_(epochs, "epochs", p->epochs)
    CMP_(item_bytes, "item_bytes", p->item_bytes)
    CMP_(nslots, "nslots", p->nslots)
    CMP_(max_lead, "max_lead", pl->max_lead)
    CMP_(fail_on_bad, "on_bad_item (fail)", p->fail_on_bad ? 1 : 0)
#undef CMP_
    return 0;
}

static void fill_member(nst_group *g, uint32_t i, uint64_t first_seq)
{
    member *m = &g->h->members[i];
    char state;
    memset(m, 0, sizeof *m);
    m->pid = (int32_t)g->pid;
    proc_stat(g->pid, &m->start_time, &state);
    atomic_store(&m->heartbeat, nst_now_ns());
    m->first_seq = m->next_seq = m->released = first_seq;
    m->state = M_ACTIVE;
    g->me = i;
    g->cur_epoch = first_seq / g->h->batches_per_epoch;
    g->h->members_joined++;
}

static void unmap(nst_group *g)
{
    if (g->h) munmap(g->h, g->size);
    g->h = NULL;
    g->base = NULL;
}

/* Mark the segment defunct and remove its name if the name is still ours
 * (mutex held, so no two processes unlink the same name). */
static void retire(nst_group *g)
{
    struct stat st;
    char path[sizeof g->shm + 16];
    atomic_store(&g->h->seg_state, SEG_DEFUNCT);
    snprintf(path, sizeof path, "/dev/shm%s", g->shm);
    if (stat(path, &st) == 0 && st.st_ino == g->ino && st.st_dev == g->dev) shm_unlink(g->shm);
}

/* Build a segment under a temporary name with ourselves as member 0, then
 * link it to the group's name. 1: created; 0: someone else won; <0 error. */
static int create(nst_group *g, const nst_group_params *p, const plan *pl, uint64_t gen,
                  int *fd_out)
{
    static atomic_uint counter;
    char tmp[sizeof g->shm + 48], tpath[sizeof tmp + 16], fpath[sizeof g->shm + 16];
    snprintf(tmp, sizeof tmp, "/nostall-%u~tmp~%d~%u", (unsigned)getuid(), (int)g->pid,
             atomic_fetch_add(&counter, 1));
    snprintf(tpath, sizeof tpath, "/dev/shm%s", tmp);
    snprintf(fpath, sizeof fpath, "/dev/shm%s", g->shm);
    int fd = shm_open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return nst_error(errno == EACCES ? NOSTALL_E_PERMISSION : NOSTALL_E_IO,
                         "group %s: cannot create %s: %s", g->name, tpath, strerror(errno));
    int rc, err;
    if (ftruncate(fd, (off_t)pl->total) < 0 || (err = posix_fallocate(fd, 0, (off_t)pl->total)) != 0) {
        rc = nst_error(NOSTALL_E_NOMEM, "group %s: cannot reserve %llu bytes in /dev/shm", g->name,
                       (unsigned long long)pl->total);
        goto fail;
    }
    void *mem = mmap(NULL, pl->total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (mem == MAP_FAILED) {
        rc = nst_error(NOSTALL_E_NOMEM, "group %s: cannot map %llu bytes: %s", g->name,
                       (unsigned long long)pl->total, strerror(errno));
        goto fail;
    }
    g->h = mem;
    g->base = mem;
    g->size = pl->total;
    header *h = g->h;
    h->abi = GRP_ABI;
    h->layout = LAYOUT_SIG;
    h->generation = gen;
    h->total_bytes = pl->total;
    h->items_per_epoch = p->items_per_epoch;
    h->epochs = p->epochs;
    h->item_bytes = p->item_bytes;
    h->batches_per_epoch = pl->batches_per_epoch;
    h->total_batches = pl->total_batches;
    h->batch_size = p->batch_size;
    h->drop_last = p->drop_last ? 1 : 0;
    h->nslots = p->nslots;
    h->max_lead = pl->max_lead;
    h->fail_on_bad = p->fail_on_bad ? 1 : 0;
    h->nfp = p->nfp;
    h->data_off = pl->data_off;
    h->slot_bytes = pl->slot_bytes;
    h->off_labels = pl->off_labels;
    h->off_indices = pl->off_indices;
    h->off_status = pl->off_status;
    h->off_items = pl->off_items;
    h->off_msgs = pl->off_msgs;
    h->fp_len = pl->fp_len;
    memcpy(h->fp, pl->fp, pl->fp_len);
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
    err = pthread_mutex_init(&h->mu, &ma);
    pthread_mutexattr_destroy(&ma);
    if (err) {
        rc = nst_error(NOSTALL_E_STATE, "group %s: robust process-shared mutex: %s", g->name,
                       strerror(err));
        unmap(g);
        goto fail;
    }
    for (uint32_t s = 0; s < h->nslots; s++) {
        init_slot(g, s, UINT64_MAX);
        h->slots[s].state = S_FREE;
    }
    fill_member(g, 0, 0);
    atomic_store(&h->seg_state, SEG_LIVE);
    h->magic = GRP_MAGIC;
    struct stat st;
    fstat(fd, &st);
    g->dev = st.st_dev;
    g->ino = st.st_ino;
    if (link(tpath, fpath) < 0) {
        err = errno;
        unmap(g);
        close(fd);
        shm_unlink(tmp);
        if (err == EEXIST) return 0;
        return nst_error(NOSTALL_E_IO, "group %s: cannot link %s: %s", g->name, fpath,
                         strerror(err));
    }
    shm_unlink(tmp);
    *fd_out = fd;
    return 1;
fail:
    close(fd);
    shm_unlink(tmp);
    return rc;
}

/* Remove temporary segments of creators that died before linking. */
static void clean_tmp(void)
{
    char prefix[64];
    int n = snprintf(prefix, sizeof prefix, "nostall-%u~tmp~", (unsigned)getuid());
    DIR *d = opendir("/dev/shm");
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, (size_t)n) != 0) continue;
        pid_t pid = (pid_t)atoi(e->d_name + n);
        if (pid > 0 && kill(pid, 0) < 0 && errno == ESRCH) {
            char name[300];
            snprintf(name, sizeof name, "/%s", e->d_name);
            shm_unlink(name);
        }
    }
    closedir(d);
}

int nst_group_join(nst_group **out, const nst_group_params *p)
{
    static const char fn[] = "nst_group_join";
    int rc;
    nst_error_clear();
    if (!out || !p || !p->name || (p->nfp && !p->fp))
        return nst_error(NOSTALL_E_INVALID, "%s: NULL argument", fn);
    *out = NULL;
    if (!valid_name(p->name))
        return nst_error(NOSTALL_E_OPTION,
                         "%s: coordinate: group name '%s' must be 1-%d characters of "
                         "[A-Za-z0-9_.-], not starting with '.'",
                         fn, p->name, NST_GROUP_NAME_MAX);
    plan *pl = malloc(sizeof *pl);
    nst_group *g = calloc(1, sizeof *g);
    if (!pl || !g) {
        free(pl);
        free(g);
        return nst_error(NOSTALL_E_NOMEM, "%s: out of memory", fn);
    }
    if ((rc = make_plan(p, pl, fn)) < 0) goto fail;
    g->pid = getpid();
    snprintf(g->name, sizeof g->name, "%s", p->name);
    snprintf(g->shm, sizeof g->shm, "/nostall-%u-%s", (unsigned)getuid(), p->name);
    clean_tmp();

    uint64_t gen = 1, deadline = nst_now_ns() + 10ull * 1000000000;
    for (int attempt = 0;; attempt++) {
        if (nst_now_ns() > deadline) {
            rc = nst_error(NOSTALL_E_STATE, "%s: group %s: cannot attach to /dev/shm%s", fn,
                           g->name, g->shm);
            goto fail;
        }
        if (attempt) usleep(1000);
        int fd = shm_open(g->shm, O_RDWR | O_CLOEXEC, 0);
        if (fd < 0 && errno == ENOENT) {
            rc = create(g, p, pl, gen, &fd);
            if (rc < 0) goto fail;
            if (rc == 0) continue; /* another member created it first */
            close(fd);
            *out = g;
            free(pl);
            return 0;
        }
        if (fd < 0) {
            rc = nst_error(errno == EACCES ? NOSTALL_E_PERMISSION : NOSTALL_E_IO,
                           "%s: group %s: cannot open /dev/shm%s: %s", fn, g->name, g->shm,
                           strerror(errno));
            goto fail;
        }
        struct stat st;
        if (fstat(fd, &st) < 0 || st.st_uid != getuid() || (st.st_mode & 077) ||
            (size_t)st.st_size < sizeof(header)) {
            close(fd);
            rc = nst_error(NOSTALL_E_PERMISSION,
                           "%s: group %s: /dev/shm%s is not a private nostall segment of this "
                           "user (owner, mode 0600, size); remove it",
                           fn, g->name, g->shm);
            goto fail;
        }
        void *mem = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (mem == MAP_FAILED) {
            rc = nst_error(NOSTALL_E_NOMEM, "%s: group %s: cannot map /dev/shm%s: %s", fn,
                           g->name, g->shm, strerror(errno));
            goto fail;
        }
        g->h = mem;
        g->base = mem;
        g->size = (size_t)st.st_size;
        g->dev = st.st_dev;
        g->ino = st.st_ino;
        header *h = g->h;
        if (h->magic != GRP_MAGIC || h->abi != GRP_ABI || h->layout != LAYOUT_SIG ||
            h->total_bytes != (uint64_t)st.st_size) {
            rc = nst_error(NOSTALL_E_STATE,
                           "%s: group %s: /dev/shm%s has magic %016llx ABI %u size %llu, not a "
                           "segment of this library (ABI %u); remove it or use another name",
                           fn, g->name, g->shm, (unsigned long long)h->magic, h->abi,
                           (unsigned long long)st.st_size, GRP_ABI);
            unmap(g);
            goto fail;
        }
        g->me = UINT32_MAX;
        if ((rc = glock(g, 5000)) < 0) {
            unmap(g);
            goto fail;
        }
        if (atomic_load(&h->seg_state) != SEG_LIVE) { /* the last member just left */
            gunlock(g);
            unmap(g);
            continue;
        }
        sweep(g, 1);
        if (live_members(h) == 0) { /* leftover of a crashed group */
            gen = h->generation + 1;
            retire(g);
            gunlock(g);
            unmap(g);
            continue;
        }
        if ((rc = compare(g, p, pl)) < 0) {
            gunlock(g);
            unmap(g);
            goto fail;
        }
        uint32_t i = 0;
        while (i < NST_GROUP_MAX_MEMBERS && h->members[i].state != M_FREE) i++;
        if (i == NST_GROUP_MAX_MEMBERS) {
            rc = nst_error(NOSTALL_E_STATE, "%s: group %s is full (%d members)", fn, g->name,
                           NST_GROUP_MAX_MEMBERS);
            gunlock(g);
            unmap(g);
            goto fail;
        }
        /* Consume from the first batch of the first epoch not yet begun to
         * be freed: nothing of it is released by anyone yet. */
        uint64_t freed = group_free(h), B = h->batches_per_epoch;
        uint64_t first = freed % B ? (freed / B + 1) * B : freed;
        if (first > h->total_batches) first = h->total_batches;
        fill_member(g, i, first);
        wake_all(h);
        gunlock(g);
        *out = g;
        free(pl);
        return 0;
    }
fail:
    free(pl);
    free(g);
    return rc;
}

void nst_group_leave(nst_group *g)
{
    if (!g) return;
    if (getpid() == g->pid && g->h) {
        if (glock(g, 5000) == 0) {
            drop_member(g, g->me, 0);
            sweep(g, 1);
            if (live_members(g->h) == 0) retire(g);
            gunlock(g);
        }
    }
    unmap(g);
    free(g);
}

void nst_group_test_die_locked(nst_group *g, int what)
{
    if (glock(g, 5000) < 0) _exit(3);
    header *h = g->h;
    uint32_t s, j;
    if (what == 0 && (find_item(g, &s, &j) || (open_batch(g) && find_item(g, &s, &j)))) {
        item_ctl *it = &sitems(g, s)[j];
        it->owner = (uint8_t)g->me; /* taken, but the hint not yet moved */
        it->tag++;
        it->state = I_TAKEN;
    } else if (what == 1) {
        for (s = 0; s < h->nslots; s++) {
            if (h->slots[s].state != S_FILLING) continue;
            h->journal_arg = s;
            h->journal = J_FINAL;
            h->slots[s].state = S_FINALIZING;
            break;
        }
    }
    kill(getpid(), SIGKILL);
    for (;;) pause();
}
