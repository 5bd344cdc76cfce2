/*
 * coord_hooks.c — coordinated prep's test hook, linked into test_coord only
 * (the library carries no test code): die by SIGKILL while holding the
 * group's mutex in the middle of an update, as a crashing member would.
 *   what 0: right after taking an item (the next locker finds EOWNERDEAD,
 *           repairs, and the dead member's ticket is taken again);
 *   what 1: in the middle of finalizing a filling batch none of whose
 *           items another member's worker still holds, as a real
 *           finalization (journaled: the repair prepares that batch again).
 */
#include <signal.h>
#include <unistd.h>

#include "batch/engine_impl.h"
#include "coord/group_impl.h"

/* 1 if no live member's worker holds an item of slot s: finalizing starts
 * only once every item is done, so the repair that prepares the batch again
 * must not find another member's worker still writing one of its items. */
static int only_mine_taken(nst_group *g, uint32_t s)
{
    const item_ctl *it = nst_engine_items(g->q, s);
    for (uint32_t j = 0; j < g->q->slots[s].count; j++)
        if (it[j].state == I_TAKEN && it[j].owner != g->me) return 0;
    return 1;
}

void nst_group_test_die_locked(nst_group *g, int what)
{
    for (int tries = 0;; tries++) {
        if (grp_lock(g, 5000) < 0) _exit(3);
        nst_engine *q = g->q;
        nst_engine_ticket t;
        if (what == 0) {
            nst_engine_take(q, &g->plan, g->me, &t, 1);
            break;
        }
        uint32_t s = 0;
        while (s < q->nslots && !(q->slots[s].state == NST_ENGINE_FILLING && only_mine_taken(g, s)))
            s++;
        if (s < q->nslots || tries >= 5000) {
            if (s < q->nslots) {
                q->journal_arg = s;
                q->journal = NST_ENGINE_J_FINAL;
                q->slots[s].state = NST_ENGINE_FINALIZING;
            }
            break;
        }
        grp_unlock(g); /* others' workers are mid-item: let them finish */
        usleep(1000);
    }
    kill(getpid(), SIGKILL);
    for (;;) pause();
}
