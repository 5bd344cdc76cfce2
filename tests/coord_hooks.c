/*
 * coord_hooks.c — coordinated prep's test hook, linked into test_coord only
 * (the library carries no test code): die by SIGKILL while holding the
 * group's mutex in the middle of an update, as a crashing member would.
 *   what 0: right after taking an item (the next locker finds EOWNERDEAD,
 *           repairs, and the dead member's ticket is taken again);
 *   what 1: in the middle of finalizing a filling batch (journaled: the
 *           repair prepares that batch again).
 */
#include <signal.h>
#include <unistd.h>

#include "coord/group_impl.h"

void nst_group_test_die_locked(nst_group *g, int what)
{
    if (grp_lock(g, 5000) < 0) _exit(3);
    nst_bq *q = g->q;
    nst_bq_ticket t;
    if (what == 0) {
        nst_bq_take(q, &g->plan, g->me, &t, 1);
    } else if (what == 1) {
        for (uint32_t s = 0; s < q->nslots; s++) {
            if (q->slots[s].state != NST_BQ_FILLING) continue;
            q->journal_arg = s;
            q->journal = NST_BQ_J_FINAL;
            q->slots[s].state = NST_BQ_FINALIZING;
            break;
        }
    }
    kill(getpid(), SIGKILL);
    for (;;) pause();
}
