/*
 * test_coord.c — the group engine of coordinated prep (src/coord/group.h),
 * with forked member processes and synthetic items whose bytes are a pure
 * function of (epoch, position), so every member checks every byte it gets.
 *
 * join/leave and /dev/shm cleanup; 2 and 4 members each consuming every
 * batch in order with items produced exactly once per epoch; fingerprint and
 * geometry mismatch; kill -9 of a member holding tickets (reaped only after
 * the others finish: a zombie is dead too); death while holding the mutex
 * mid-take and mid-finalize; a slow member holds others back by max_lead;
 * a late joiner starts at an epoch boundary; a clean leave mid-epoch with a
 * batch lent; a stale segment of a killed group is replaced (generation+1);
 * stop wakes waiters; bad items (skip: compaction, fail: the error).
 * Every child runs under alarm(); ctest's timeout bounds the rest.
 * Nothing here depends on how fast a machine is: steps wait for the event
 * they need (a member joined, a member waited, every worker started), and
 * the bounds on how long something may take are far above what a loaded
 * machine under TSan needs and far below the timeout they rule out.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <dirent.h>
#include <time.h>

#include "check.h"
#include "common/clock.h"
#include "coord/group.h"

#define ITEM_BYTES 40
#define ITEMS 50
#define BATCH 4
#define EPOCHS 3
#define MAXM 6

typedef struct role {
    int workers;
    int wait_members;     /* start once the group has this many          */
    uint32_t item_us;     /* work per item                               */
    int hang_after;       /* >0: after this many tickets, hold the next forever */
    int die_locked_after; /* >0: die holding the mutex after this many    */
    int die_what;
    int wait_go;        /* consume only after sh->go                   */
    int leave_after;    /* >0: leave after this many batches, one lent */
    int bad_mod;        /* >0: positions p with p % bad_mod == 3 are bad */
    uint32_t burn_us;   /* CPU work per item                           */
    int hold_after;     /* >0: after this many batches, keep the last lent
                              and stop consuming (until killed)            */
    int pause_after;    /* >0: after this many batches, wait for sh->go */
    int worker_barrier; /* >0: workers take no ticket before this many
                              workers (of every member) have started       */
} role;

typedef struct mres {
    _Atomic int joined, hung, holding, finished;
    _Atomic uint64_t delivered, after_kill_ns, timeouts;
    uint64_t run_ns; /* from the start gate to DONE */
    uint64_t first_epoch, items_produced, group_items, generation, repairs, dropped, requeued;
    int errors;
    uint8_t seen[EPOCHS][ITEMS];
} mres;

typedef struct shared {
    _Atomic uint32_t produced[EPOCHS][ITEMS];
    _Atomic int go, workers_ready;
    _Atomic uint64_t kill_ns;
    mres m[MAXM];
} shared;

static shared *sh;
static char gname[64];

static uint8_t item_byte(uint64_t e, uint64_t pos, uint32_t k)
{
    return (uint8_t)(e * 131 + pos * 31 + k * 7 + ((pos * k) >> 2));
}

static const nst_group_opt default_fp[] = {{"source", "/data/train"},
                                           {"seed", "7"},
                                           {"crop", "224"},
                                           {"output", "uint8"}};

static nst_group_params params(uint32_t epochs)
{
    nst_group_params p = {
        .name = gname,
        .fp = default_fp,
        .nfp = 4,
        .items_per_epoch = ITEMS,
        .batch_size = BATCH,
        .drop_last = 0,
        .epochs = epochs,
        .nslots = 4,
        .item_bytes = ITEM_BYTES,
        .max_lead = 0,
        .fail_on_bad = 0,
    };
    return p;
}

static void set_name(const char *test)
{
    snprintf(gname, sizeof gname, "t%d-%s", (int)getpid(), test);
}

static int shm_exists(void)
{
    char path[256];
    struct stat st;
    nst_group_path(gname, path, sizeof path);
    return stat(path, &st) == 0;
}

/* ------------------------------------------------------------ a member */

typedef struct wctx {
    nst_group *g;
    const role *r;
    mres *me;
    int ntaken;
} wctx;

static void *worker(void *arg)
{
    wctx *w = arg;
    nst_group_ticket t;
    atomic_fetch_add(&sh->workers_ready, 1);
    while (atomic_load(&sh->workers_ready) < w->r->worker_barrier) usleep(200);
    for (;;) {
        int rc = nst_group_take(w->g, &t, 200);
        if (rc == NOSTALL_TIMEOUT) continue;
        if (rc != 0) break;
        int n = ++w->ntaken;
        if (w->r->hang_after && n > w->r->hang_after) {
            atomic_store(&w->me->hung, 1);
            for (;;) pause(); /* hold the ticket until killed */
        }
        if (w->r->die_locked_after && n == w->r->die_locked_after)
            nst_group_test_die_locked(w->g, w->r->die_what);
        for (uint32_t k = 0; k < ITEM_BYTES; k++) t.image[k] = item_byte(t.epoch, t.position, k);
        *t.label = (int64_t)(t.epoch * 100000 + t.position);
        *t.index = t.position;
        t.io[0] = 1;
        if (t.epoch < EPOCHS && t.position < ITEMS)
            atomic_fetch_add(&sh->produced[t.epoch][t.position], 1);
        if (w->r->item_us) usleep(w->r->item_us);
        if (w->r->burn_us) {
            struct timespec a, c;
            clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
            do clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c);
            while ((uint64_t)(c.tv_sec - a.tv_sec) * 1000000000 + (uint64_t)(c.tv_nsec - a.tv_nsec) <
                   (uint64_t)w->r->burn_us * 1000);
        }
        int bad = w->r->bad_mod && t.position % (uint64_t)w->r->bad_mod == 3;
        nst_group_done(w->g, &t, bad ? NOSTALL_E_CORRUPT : 0, bad ? "synthetic bad item" : NULL);
    }
    return NULL;
}

static uint32_t expected_good(const role *r, uint64_t pos, uint32_t len)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < len; i++) n += !(r->bad_mod && (pos + i) % (uint64_t)r->bad_mod == 3);
    return n;
}

/* Consume every batch, checking order and bytes. Returns the error count. */
static int member_run(const role *r, const nst_group_params *p, mres *me)
{
    nst_group *g;
    int errors = 0;
    if (nst_group_join(&g, p) < 0) {
        fprintf(stderr, "join: %s\n", nostall_last_error());
        return 1;
    }
    nst_group_stats st;
    nst_group_stats_get(g, &st);
    me->first_epoch = st.first_epoch;
    me->generation = st.generation;
    atomic_store(&me->joined, 1);
    uint64_t t_gate = nst_now_ns() + 10ull * 1000000000;
    while (st.members < (uint32_t)r->wait_members && nst_now_ns() < t_gate) {
        usleep(2000);
        nst_group_stats_get(g, &st);
    }
    pthread_t th[4];
    wctx w[4];
    for (int i = 0; i < r->workers; i++) {
        w[i] = (wctx){g, r, me, 0};
        pthread_create(&th[i], NULL, worker, &w[i]);
    }
    while (r->wait_go && !atomic_load(&sh->go)) usleep(2000);
    uint64_t t_run = nst_now_ns();
    uint64_t e = st.first_epoch, pos = 0, nb = 0, timeouts = 0;
    nst_group_batch b;
    for (;;) {
        int rc = nst_group_next(g, &b, 100);
        if (rc == NOSTALL_TIMEOUT) {
            atomic_fetch_add(&me->timeouts, 1);
            if (++timeouts > 300) {
                fprintf(stderr, "member %d: no progress for 30 s\n", (int)getpid());
                errors++;
                break;
            }
            continue;
        }
        timeouts = 0;
        if (rc == NOSTALL_EPOCH_END) {
            if (pos != ITEMS) {
                fprintf(stderr, "epoch %llu ended at %llu\n", (unsigned long long)e,
                        (unsigned long long)pos);
                errors++;
            }
            e++;
            pos = 0;
            continue;
        }
        if (rc == NOSTALL_DONE) {
            me->run_ns = nst_now_ns() - t_run;
            break;
        }
        if (rc < 0) {
            fprintf(stderr, "next: %s: %s\n", nostall_status_name(rc), nostall_last_error());
            errors++;
            break;
        }
        uint64_t now = nst_now_ns(), kn = atomic_load(&sh->kill_ns);
        if (kn && now > kn && !atomic_load(&me->after_kill_ns))
            atomic_store(&me->after_kill_ns, now - kn);
        uint32_t want = pos + BATCH <= ITEMS ? BATCH : (uint32_t)(ITEMS - pos);
        if (b.epoch != e || b.position != pos || b.len != want ||
            b.count != expected_good(r, pos, want)) {
            fprintf(stderr,
                    "batch seq %llu: epoch %llu pos %llu len %u count %u, want %llu %llu %u\n",
                    (unsigned long long)b.seq, (unsigned long long)b.epoch,
                    (unsigned long long)b.position, b.len, b.count, (unsigned long long)e,
                    (unsigned long long)pos, want);
            errors++;
        }
        for (uint32_t i = 0; i < b.count; i++) {
            int64_t lab = b.labels[i];
            uint64_t pe = (uint64_t)lab / 100000, pp = (uint64_t)lab % 100000;
            if (pe != e || pp < pos || pp >= pos + want || b.indices[i] != pp) {
                errors++;
                continue;
            }
            for (uint32_t k = 0; k < ITEM_BYTES; k++)
                if (b.images[(size_t)i * ITEM_BYTES + k] != item_byte(pe, pp, k)) {
                    errors++;
                    break;
                }
            if (pe < EPOCHS) me->seen[pe][pp]++;
        }
        if (b.io[0] != b.len) errors++;
        for (uint32_t j = 0; j < b.len; j++) {
            int bad = r->bad_mod && (pos + j) % (uint64_t)r->bad_mod == 3;
            if (bad != (b.item_status[j] == NOSTALL_E_CORRUPT) ||
                (bad && strcmp(b.item_msgs + (size_t)j * NST_GROUP_ITEM_MSG, "synthetic bad item")))
                errors++;
        }
        pos += b.len;
        atomic_fetch_add(&me->delivered, 1);
        nb++;
        if (r->leave_after && nb == (uint64_t)r->leave_after) break; /* leave with b lent */
        if (r->pause_after && nb == (uint64_t)r->pause_after)
            while (!atomic_load(&sh->go)) usleep(1000);
        if (r->hold_after && nb == (uint64_t)r->hold_after) {
            atomic_store(&me->holding, 1);
            for (;;) pause(); /* b stays lent until killed */
        }
        if (nst_group_release(g, b.seq) < 0) {
            fprintf(stderr, "release: %s\n", nostall_last_error());
            errors++;
        }
    }
    nst_group_stop(g);
    for (int i = 0; i < r->workers; i++) pthread_join(th[i], NULL);
    nst_group_stats_get(g, &st);
    me->items_produced = st.items_produced;
    me->group_items = st.group_items_produced;
    me->repairs = st.mutex_repairs;
    me->dropped = st.members_dropped;
    me->requeued = st.items_requeued;
    nst_group_leave(g);
    me->errors = errors;
    atomic_store(&me->finished, 1);
    return errors;
}

static pid_t spawn(const role *r, const nst_group_params *p, int idx)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(45);
        int e = member_run(r, p, &sh->m[idx]);
        exit(e ? 1 : 0);
    }
    return pid;
}

static int reap(pid_t pid)
{
    int st;
    if (waitpid(pid, &st, 0) < 0) return -1000;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
}

/* Reap, adding the child's CPU time (user + system) to *cpu_ns. */
static int reap_cpu(pid_t pid, uint64_t *cpu_ns)
{
    int st;
    struct rusage ru;
    if (wait4(pid, &st, 0, &ru) < 0) return -1000;
    *cpu_ns += (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000 +
               (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
}

static void reset_shared(void) { memset(sh, 0, sizeof *sh); }

static void wait_until(_Atomic uint64_t *v, uint64_t at_least, int seconds)
{
    uint64_t end = nst_now_ns() + (uint64_t)seconds * 1000000000;
    while (atomic_load(v) < at_least && nst_now_ns() < end) usleep(1000);
}

/* Every (epoch, position) seen exactly once by member i for epochs >= e0. */
static int all_once(int i, uint64_t e0, uint32_t epochs)
{
    int bad = 0;
    for (uint64_t e = e0; e < epochs; e++)
        for (int p = 0; p < ITEMS; p++)
            if (sh->m[i].seen[e][p] != 1) bad++;
    return bad;
}

/* ------------------------------------------------------------------ tests */

static void test_join_leave(void)
{
    set_name("jl");
    nst_group_params p = params(1);
    nst_group *a, *b;
    nst_group_stats st;
    CHECK_OK(nst_group_join(&a, &p));
    CHECK(shm_exists());
    char path[256];
    struct stat sb;
    nst_group_path(gname, path, sizeof path);
    CHECK(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0600);
    CHECK_OK(nst_group_stats_get(a, &st));
    CHECK_EQ(st.members, 1);
    CHECK_EQ(st.generation, 1);
    CHECK_OK(nst_group_join(&b, &p));
    CHECK_OK(nst_group_stats_get(b, &st));
    CHECK_EQ(st.members, 2);
    CHECK_EQ(st.first_seq, 0);
    nst_group_leave(b);
    CHECK_OK(nst_group_stats_get(a, &st));
    CHECK_EQ(st.members, 1);
    nst_group_leave(a);
    CHECK(!shm_exists());
    nst_group_leave(NULL);

    nst_group_params q = p;
    q.name = "../etc";
    CHECK_RC(nst_group_join(&a, &q), NOSTALL_E_OPTION);
    CHECK(strstr(nostall_last_error(), "../etc") != NULL);
    q.name = "";
    CHECK_RC(nst_group_join(&a, &q), NOSTALL_E_OPTION);
    q = p;
    q.max_lead = 9;
    CHECK_RC(nst_group_join(&a, &q), NOSTALL_E_OPTION);
    CHECK(strstr(nostall_last_error(), "max_lead") != NULL);
    CHECK(!shm_exists());
}

static void test_mismatch(void)
{
    set_name("mm");
    nst_group_params p = params(1);
    nst_group *a, *b;
    CHECK_OK(nst_group_join(&a, &p));
    nst_group_opt fp[4];
    memcpy(fp, default_fp, sizeof fp);
    fp[2].value = "160";
    nst_group_params q = p;
    q.fp = fp;
    CHECK_RC(nst_group_join(&b, &q), NOSTALL_E_OPTION);
    const char *m = nostall_last_error();
    CHECK(strstr(m, "crop") && strstr(m, "224") && strstr(m, "160") && strstr(m, gname));
    q = p;
    q.nfp = 3;
    CHECK_RC(nst_group_join(&b, &q), NOSTALL_E_OPTION);
    CHECK(strstr(nostall_last_error(), "output") != NULL);
    q = p;
    q.batch_size = 8;
    CHECK_RC(nst_group_join(&b, &q), NOSTALL_E_OPTION);
    CHECK(strstr(nostall_last_error(), "batch_size") != NULL);
    q = p;
    q.item_bytes = 41;
    CHECK_RC(nst_group_join(&b, &q), NOSTALL_E_OPTION);
    CHECK(strstr(nostall_last_error(), "item_bytes") != NULL);
    nst_group_stats st;
    CHECK_OK(nst_group_stats_get(a, &st));
    CHECK_EQ(st.members, 1);
    nst_group_leave(a);
    CHECK(!shm_exists());
}

/* n members, each consuming every batch; items produced once per epoch, and
 * by more than one member: every worker of every member has started before
 * any takes a ticket, and each holds its ticket 2 ms, so no member's workers
 * can take them all unless they alone ran for the whole run. */
static void test_members(int n, int bad_mod)
{
    char t[16];
    snprintf(t, sizeof t, "m%d%s", n, bad_mod ? "b" : "");
    set_name(t);
    reset_shared();
    nst_group_params p = params(EPOCHS);
    role r = {.workers = 2,
              .wait_members = n,
              .item_us = 2000,
              .bad_mod = bad_mod,
              .worker_barrier = 2 * n};
    pid_t pid[MAXM];
    for (int i = 0; i < n; i++) pid[i] = spawn(&r, &p, i);
    uint64_t produced = 0;
    for (int i = 0; i < n; i++) {
        CHECK_EQ(reap(pid[i]), 0);
        CHECK_EQ(sh->m[i].errors, 0);
        CHECK_EQ(sh->m[i].first_epoch, 0);
        produced += sh->m[i].items_produced;
        if (!bad_mod) CHECK_EQ(all_once(i, 0, EPOCHS), 0);
    }
    CHECK_EQ(produced, EPOCHS * ITEMS);
    int twice = 0;
    for (int e = 0; e < EPOCHS; e++)
        for (int q = 0; q < ITEMS; q++) twice += atomic_load(&sh->produced[e][q]) != 1;
    CHECK_EQ(twice, 0);
    if (n > 1) { /* the work was shared */
        int producers = 0;
        for (int i = 0; i < n; i++) producers += sh->m[i].items_produced > 0;
        CHECK(producers >= 2);
    }
    CHECK(!shm_exists());
}

/* CPU-bound items: 4 members on this machine against one alone. The
 * acceptance figures (rate >= 0.9x, CPU <= 1.15x) are printed; only the CPU
 * ratio is checked, loosely (wall time on a shared machine is noise). */
static void test_perf(void)
{
    set_name("perf");
    nst_group_params p = params(EPOCHS);
    role r = {.workers = 2, .wait_members = 1, .burn_us = 1500};
    uint64_t cpu1 = 0, cpu4 = 0, wall1, wall4 = 0;
    reset_shared();
    CHECK_EQ(reap_cpu(spawn(&r, &p, 0), &cpu1), 0);
    wall1 = sh->m[0].run_ns;
    reset_shared();
    r.wait_members = 4;
    pid_t pid[4];
    for (int i = 0; i < 4; i++) pid[i] = spawn(&r, &p, i);
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(reap_cpu(pid[i], &cpu4), 0);
        CHECK_EQ(sh->m[i].errors, 0);
        CHECK_EQ(all_once(i, 0, EPOCHS), 0);
        if (sh->m[i].run_ns > wall4) wall4 = sh->m[i].run_ns;
    }
    double rate = (double)wall1 / (double)wall4, cpu = (double)cpu4 / (double)cpu1;
    printf("perf: one job %.0f ms wall %.0f ms CPU; four jobs slowest %.0f ms wall, %.0f ms CPU "
           "in all: per-job rate %.2fx, group CPU %.2fx\n",
           wall1 / 1e6, cpu1 / 1e6, wall4 / 1e6, cpu4 / 1e6, rate, cpu);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    CHECK(cpu < 1.3); /* wall-clock rates need a quiet machine: figures only */
#endif
    CHECK(!shm_exists());
}

/* kill -9 of a member holding a lent batch and (usually) tickets; reaped
 * only at the end (a zombie is dead). */
static void test_kill_tickets(void)
{
    set_name("kill");
    reset_shared();
    nst_group_params p = params(2);
    role ok = {.workers = 2, .wait_members = 3, .item_us = 300};
    role victim = ok;
    victim.hang_after = 2;
    victim.hold_after = 1;
    pid_t a = spawn(&ok, &p, 0), b = spawn(&ok, &p, 1), c = spawn(&victim, &p, 2);
    uint64_t end = nst_now_ns() + 20ull * 1000000000;
    while (!atomic_load(&sh->m[2].holding) && !atomic_load(&sh->m[2].hung) && nst_now_ns() < end)
        usleep(1000);
    CHECK(atomic_load(&sh->m[2].holding) || atomic_load(&sh->m[2].hung));
    usleep(200000); /* the group is stuck on the held ticket */
    atomic_store(&sh->kill_ns, nst_now_ns());
    kill(c, SIGKILL);
    CHECK_EQ(reap(a), 0);
    CHECK_EQ(reap(b), 0);
    CHECK_EQ(reap(c), -SIGKILL);
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(sh->m[i].errors, 0);
        CHECK_EQ(all_once(i, 0, 2), 0);
        uint64_t gap = atomic_load(&sh->m[i].after_kill_ns);
        printf("kill: member %d continued %.0f ms after kill -9\n", i, gap / 1e6);
        CHECK_EQ(sh->m[i].dropped, 1);
        CHECK(sh->m[i].requeued >= 1 || !atomic_load(&sh->m[2].hung));
        /* found dead by the heartbeat sweep (~0.5 s; the bound leaves room
         * for a loaded machine under TSan), not by the 30 s no-progress guard */
        CHECK(gap > 0 && gap < 10000000000ull);
    }
    CHECK(!shm_exists());
}

/* A member dies holding the group mutex in the middle of an update. */
static void test_kill_locked(int what)
{
    set_name(what ? "lockf" : "lockt");
    reset_shared();
    nst_group_params p = params(2);
    role ok = {.workers = 2, .wait_members = 3, .item_us = 300};
    role victim = ok;
    victim.die_locked_after = 3;
    victim.die_what = what;
    pid_t a = spawn(&ok, &p, 0), b = spawn(&ok, &p, 1), c = spawn(&victim, &p, 2);
    CHECK_EQ(reap(c), -SIGKILL);
    CHECK_EQ(reap(a), 0);
    CHECK_EQ(reap(b), 0);
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(sh->m[i].errors, 0);
        CHECK_EQ(all_once(i, 0, 2), 0);
        CHECK_EQ(sh->m[i].repairs, 1);
        CHECK_EQ(sh->m[i].dropped, 1);
    }
    CHECK(!shm_exists());
}

/* A member that does not consume holds the others back by max_lead. */
static void test_slow(void)
{
    set_name("slow");
    reset_shared();
    nst_group_params p = params(1);
    p.max_lead = 2;
    role fast = {.workers = 2, .wait_members = 2};
    role slow = fast;
    slow.wait_go = 1;
    pid_t a = spawn(&fast, &p, 0), b = spawn(&slow, &p, 1);
    wait_until(&sh->m[0].delivered, 2, 20);
    /* the fast member then waits (two timed-out next() calls of 100 ms)
     * and still has only the 2 batches max_lead allows */
    wait_until(&sh->m[0].timeouts, 2, 20);
    CHECK(atomic_load(&sh->m[0].timeouts) >= 2);
    CHECK_EQ(atomic_load(&sh->m[0].delivered), 2);
    atomic_store(&sh->go, 1);
    CHECK_EQ(reap(a), 0);
    CHECK_EQ(reap(b), 0);
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(sh->m[i].errors, 0);
        CHECK_EQ(all_once(i, 0, 1), 0);
    }
    CHECK(!shm_exists());
}

/* A member joining a running group starts at the next epoch boundary. The
 * first member pauses after 2 batches of epoch 0 until the late one has
 * joined (its workers fill at most the ring: still epoch 0), so the late
 * member must start at epoch 1 exactly. */
static void test_late_join(void)
{
    set_name("late");
    reset_shared();
    nst_group_params p = params(EPOCHS);
    role first = {.workers = 2, .wait_members = 1, .item_us = 2000, .pause_after = 2};
    role late = {.workers = 2, .wait_members = 1, .item_us = 2000};
    pid_t a = spawn(&first, &p, 0);
    wait_until(&sh->m[0].delivered, 2, 20);
    pid_t b = spawn(&late, &p, 1);
    uint64_t end = nst_now_ns() + 20ull * 1000000000;
    while (!atomic_load(&sh->m[1].joined) && nst_now_ns() < end) usleep(1000);
    CHECK(atomic_load(&sh->m[1].joined));
    atomic_store(&sh->go, 1);
    CHECK_EQ(reap(a), 0);
    CHECK_EQ(reap(b), 0);
    CHECK_EQ(sh->m[0].errors, 0);
    CHECK_EQ(sh->m[1].errors, 0);
    CHECK_EQ(all_once(0, 0, EPOCHS), 0);
    uint64_t e0 = sh->m[1].first_epoch;
    printf("late join: first epoch %llu\n", (unsigned long long)e0);
    CHECK_EQ(e0, 1);
    CHECK_EQ(all_once(1, e0, EPOCHS), 0);
    CHECK(sh->m[1].items_produced > 0);
    CHECK(!shm_exists());
}

/* A clean leave mid-epoch with a batch lent and tickets returned. */
static void test_leave_mid_epoch(void)
{
    set_name("leave");
    reset_shared();
    nst_group_params p = params(2);
    role ok = {.workers = 2, .wait_members = 3, .item_us = 300};
    role leaver = ok;
    leaver.leave_after = 4;
    pid_t a = spawn(&ok, &p, 0), b = spawn(&ok, &p, 1), c = spawn(&leaver, &p, 2);
    CHECK_EQ(reap(c), 0);
    CHECK_EQ(reap(a), 0);
    CHECK_EQ(reap(b), 0);
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(sh->m[i].errors, 0);
        CHECK_EQ(all_once(i, 0, 2), 0);
    }
    CHECK(!shm_exists());
}

/* kill -9 every member: the leftover is recognised and replaced. */
static void test_stale(void)
{
    set_name("stale");
    reset_shared();
    nst_group_params p = params(1);
    role victim = {.workers = 1, .wait_members = 2, .item_us = 300, .hang_after = 6};
    pid_t a = spawn(&victim, &p, 0), b = spawn(&victim, &p, 1);
    uint64_t end = nst_now_ns() + 20ull * 1000000000;
    while ((!atomic_load(&sh->m[0].hung) || !atomic_load(&sh->m[1].hung)) && nst_now_ns() < end)
        usleep(1000);
    kill(a, SIGKILL);
    kill(b, SIGKILL);
    CHECK_EQ(reap(a), -SIGKILL);
    CHECK_EQ(reap(b), -SIGKILL);
    CHECK(shm_exists());
    reset_shared();
    role solo = {.workers = 2, .wait_members = 1};
    CHECK_EQ(member_run(&solo, &p, &sh->m[0]), 0);
    CHECK_EQ(sh->m[0].generation, 2);
    CHECK_EQ(all_once(0, 0, 1), 0);
    CHECK(!shm_exists());
}

/* Members joining and leaving at the same instant, many rounds: creation
 * races, DEFUNCT retries, last-leaver removal. */
static void test_join_race(void)
{
    set_name("race");
    reset_shared();
    nst_group_params p = params(1);
    enum { N = 5, ROUNDS = 25 };
    pid_t pid[N];
    for (int i = 0; i < N; i++) {
        fflush(NULL);
        pid[i] = fork();
        if (pid[i] == 0) {
            alarm(45);
            int errors = 0;
            for (int round = 1; round <= ROUNDS; round++) {
                while (atomic_load(&sh->go) < round) usleep(100);
                nst_group *g;
                if (nst_group_join(&g, &p) < 0) {
                    fprintf(stderr, "race join: %s\n", nostall_last_error());
                    errors++;
                    continue;
                }
                usleep((unsigned)(i * 300));
                nst_group_leave(g);
                atomic_fetch_add(&sh->m[i].delivered, 1);
            }
            exit(errors ? 1 : 0);
        }
    }
    for (int round = 1; round <= ROUNDS; round++) {
        atomic_store(&sh->go, round);
        for (int i = 0; i < N; i++) wait_until(&sh->m[i].delivered, (uint64_t)round, 10);
    }
    for (int i = 0; i < N; i++) CHECK_EQ(reap(pid[i]), 0);
    CHECK(!shm_exists());
}

/* Something else under the group's name is refused, not used. */
static void test_foreign(void)
{
    set_name("foreign");
    char path[256];
    nst_group_path(gname, path, sizeof path);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs("not a segment", f);
    fclose(f);
    chmod(path, 0600);
    nst_group_params p = params(1);
    nst_group *g;
    CHECK_RC(nst_group_join(&g, &p), NOSTALL_E_PERMISSION);
    CHECK(strstr(nostall_last_error(), gname) != NULL);
    unlink(path);
}

typedef struct waiter {
    nst_group *g;
    int next, rc;
    uint64_t ns;
} waiter;

static void *wait_thread(void *arg)
{
    waiter *w = arg;
    uint64_t t0 = nst_now_ns();
    if (w->next) {
        nst_group_batch b;
        w->rc = nst_group_next(w->g, &b, 20000);
    } else {
        nst_group_ticket t;
        w->rc = nst_group_take(w->g, &t, 20000);
    }
    w->ns = nst_now_ns() - t0;
    return NULL;
}

static void test_stop(void)
{
    set_name("stop");
    nst_group_params p = params(1);
    p.max_lead = 1;
    nst_group *g;
    CHECK_OK(nst_group_join(&g, &p));
    nst_group_ticket t;
    for (int i = 0; i < BATCH; i++) CHECK_RC(nst_group_take(g, &t, 100), 0);
    CHECK_RC(nst_group_take(g, &t, 30), NOSTALL_TIMEOUT); /* ring full */
    waiter wn = {g, 1, 0, 0}, wt = {g, 0, 0, 0};
    pthread_t a, b;
    pthread_create(&a, NULL, wait_thread, &wn);
    pthread_create(&b, NULL, wait_thread, &wt);
    usleep(150000);
    nst_group_stop(g);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    CHECK_EQ(wn.rc, NOSTALL_E_STOPPED);
    CHECK_EQ(wt.rc, NOSTALL_E_STOPPED);
    /* woken by stop, not by their 20 s timeout (10 s: room for a loaded machine) */
    CHECK(wn.ns < 10000000000ull && wt.ns < 10000000000ull);
    nst_group_leave(g);
    CHECK(!shm_exists());
}

/* fail policy: earlier batches, then the first bad item's error, sticky. */
static void test_fail_policy(void)
{
    set_name("fail");
    nst_group_params p = params(1);
    p.fail_on_bad = 1;
    nst_group *g;
    CHECK_OK(nst_group_join(&g, &p));
    nst_group_ticket t;
    nst_group_batch b;
    int got = 0;
    for (int i = 0; i < 16 && nst_group_take(g, &t, 100) == 0; i++) {
        memset(t.image, 0, ITEM_BYTES);
        int bad = t.position == 9 || t.position == 10;
        nst_group_done(g, &t, bad ? NOSTALL_E_TRUNCATED : 0, "truncated file x.jpg");
    }
    while (nst_group_next(g, &b, 100) == 0) {
        got++;
        nst_group_release(g, b.seq);
    }
    CHECK_EQ(got, 2); /* positions 0..7 */
    CHECK_RC(nst_group_next(g, &b, 100), NOSTALL_E_TRUNCATED);
    CHECK(strstr(nostall_last_error(), "position 9") && strstr(nostall_last_error(), "x.jpg"));
    CHECK_RC(nst_group_take(g, &t, 50), NOSTALL_DONE); /* no batch after the failing one */
    CHECK_RC(nst_group_release(g, 99), NOSTALL_E_INVALID);
    nst_group_leave(g);
    CHECK(!shm_exists());
}

static void check_no_leftovers(void)
{
    char prefix[64];
    int n = snprintf(prefix, sizeof prefix, "nostall-%u-t%d-", (unsigned)getuid(), (int)getpid());
    DIR *d = opendir("/dev/shm");
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, (size_t)n) == 0) {
            fprintf(stderr, "leftover /dev/shm/%s\n", e->d_name);
            check_failures_++;
        }
    }
    closedir(d);
}

int main(void)
{
    alarm(240);
    if (access("/dev/shm", W_OK) != 0) {
        printf("SKIP: no writable /dev/shm\n");
        return 77;
    }
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) return 1;
    const char *only = getenv("COORD_TEST");
#define RUN(name, call)                                                                            \
    if (!only || strcmp(only, name) == 0) {                                                        \
        uint64_t t0_ = nst_now_ns();                                                               \
        call;                                                                                      \
        printf("%-12s %.2f s (failures so far: %d)\n", name, (nst_now_ns() - t0_) / 1e9,           \
               check_failures_);                                                                   \
        fflush(stdout);                                                                            \
    }
    RUN("join_leave", test_join_leave());
    RUN("mismatch", test_mismatch());
    RUN("stop", test_stop());
    RUN("foreign", test_foreign());
    RUN("race", test_join_race());
    RUN("fail", test_fail_policy());
    RUN("two", test_members(2, 0));
    RUN("four", test_members(4, 0));
    RUN("skip", test_members(2, 7));
    RUN("slow", test_slow());
    RUN("kill", test_kill_tickets());
    RUN("lock_take", test_kill_locked(0));
    RUN("lock_final", test_kill_locked(1));
    RUN("late", test_late_join());
    RUN("leave", test_leave_mid_epoch());
    RUN("stale", test_stale());
    RUN("perf", test_perf());
    check_no_leftovers();
    munmap(sh, sizeof *sh);
    TEST_EXIT();
}
