/*
 * members.c — a coordinated group's member table: who is in, whether they
 * are alive (heartbeats, then kill(pid, 0) and the process start time, so a
 * recycled pid is not mistaken for the member), and dropping the dead or
 * leaving: their tickets go back to the pool and what they held or still
 * needed counts as released (nst_engine_member_drop, journaled). With the group
 * mutex held.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "coord/group_impl.h"

#define SWEEP_NS (100ull * 1000000)
#define STALE_HB_NS (300ull * 1000000)

/* Field 22 (start time) of /proc/<pid>/stat and the state letter; 0 if the
 * file cannot be read. No allocation. */
int grp_proc_stat(pid_t pid, uint64_t *start, char *state)
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
    if (!grp_proc_stat(pid, &st, &state)) return access("/proc/self/stat", R_OK) == 0 ? 0 : 1;
    if (state == 'Z' || state == 'X' || state == 'x') return 0; /* exited, not yet reaped */
    return st == start;
}

static void fold_stats(header *h, member *m, uint64_t consumed)
{
    h->departed.items_produced += m->items_produced;
    h->departed.batches_produced += m->batches_produced;
    h->departed.batches_consumed += consumed;
    h->departed.wait_ns += m->wait_ns;
    h->departed.take_wait_ns += m->take_wait_ns;
    m->items_produced = m->batches_produced = m->batches_consumed = 0;
    m->wait_ns = m->take_wait_ns = 0;
}

void grp_drop_member(nst_group *g, uint32_t i, int dead)
{
    header *h = g->h;
    /* The engine first (journaled): a holder dying after it leaves a member
     * that the next sweep drops again, harmlessly. */
    nst_engine_member_drop(g->q, i);
    if (h->members[i].state != M_FREE) {
        fold_stats(h, &h->members[i], g->q->members[i].consumed);
        if (dead) h->members_dropped++;
    }
    h->members[i].state = M_FREE;
    grp_wake_all(h);
}

/* Check members for death: every member when `force`, else those whose
 * heartbeat is older than STALE_HB_NS, at most every SWEEP_NS per group. */
void grp_sweep(nst_group *g, int force)
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
        if (!proc_alive(m->pid, m->start_time)) grp_drop_member(g, i, 1);
    }
}

uint32_t grp_live_members(const header *h)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < NST_GROUP_MAX_MEMBERS; i++) n += h->members[i].state == M_ACTIVE;
    return n;
}

void grp_fill_member(nst_group *g, uint32_t i, uint64_t first_seq, uint64_t epoch)
{
    member *m = &g->h->members[i];
    char state;
    memset(m, 0, sizeof *m);
    m->pid = (int32_t)g->pid;
    grp_proc_stat(g->pid, &m->start_time, &state);
    atomic_store(&m->heartbeat, nst_now_ns());
    m->state = M_ACTIVE;
    g->me = i;
    g->h->members_joined++;
    nst_engine_member_join(g->q, i, first_seq, epoch);
}
