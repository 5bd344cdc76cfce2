/*
 * memlimit.h — how much memory this process may use: the smaller of the
 * machine's RAM and the memory limit of its cgroup (v2 memory.max, or v1
 * memory.limit_in_bytes), and how much of that is still available.
 *
 * Read from /proc and /sys at the time of the call (a loader create, an
 * option parse); no state. Pure apart from those reads; any thread.
 */
#ifndef NST_COMMON_MEMLIMIT_H
#define NST_COMMON_MEMLIMIT_H

#include <stddef.h>
#include <stdint.h>

typedef struct nst_memlimit {
    uint64_t limit;     /* bytes the process may use in all (RAM or cgroup) */
    uint64_t available; /* of which not in use now (MemAvailable, or the
                           cgroup's limit minus its current usage)         */
    int cgroup;         /* 1: a cgroup limit is the binding one            */
    char source[96];    /* where the figures come from, for messages       */
} nst_memlimit;

/* Fills *m. NOSTALL_E_IO if neither /proc/meminfo nor sysconf gives RAM. */
int nst_memlimit_get(nst_memlimit *m);

/* Test hook: NOSTALL_MEMLIMIT_BYTES=<n> in the environment replaces both
 * figures (source "NOSTALL_MEMLIMIT_BYTES"), so limits can be tested on any
 * machine. */

#endif
