/*
 * cpubudget.h — how many CPUs this process may really use, the default
 * worker count: the CPUs in its affinity mask (taskset, cpusets), capped by
 * its cgroup's CPU quota (v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us,
 * the tightest on the path from its cgroup to the hierarchy's root; rounded
 * up, at least 1), divided by LOCAL_WORLD_SIZE when torchrun sets it (the
 * ranks on one machine share it; at least 1).
 *
 * The parsing is in pure functions that take the files' text, so it is
 * tested on fixed inputs; nst_cpu_budget_get() reads /proc and /sys at the
 * time of the call (a loader create) and keeps no state. Any thread.
 */
#ifndef NST_COMMON_CPUBUDGET_H
#define NST_COMMON_CPUBUDGET_H

#include <stddef.h>
#include <stdint.h>

typedef struct nst_cpu_budget {
    uint32_t threads;          /* the budget: the default worker count       */
    uint32_t affinity;         /* CPUs in the affinity mask (else online)    */
    double quota;              /* cgroup CPU quota in CPUs; 0 = none          */
    uint32_t local_world_size; /* LOCAL_WORLD_SIZE, 1 when unset or invalid  */
    char source[160];          /* how the figure was found, for messages     */
} nst_cpu_budget;

/* cgroup v2 cpu.max text ("max 100000", "150000 100000"). Returns 1 with
 * *cpus = quota / period, 0 for no quota ("max"), -1 for text that is
 * neither (*cpus untouched). */
int nst_cpu_quota_v2(const char *cpu_max, double *cpus);

/* cgroup v1 cpu.cfs_quota_us and cpu.cfs_period_us texts. Returns 1 with
 * *cpus = quota / period, 0 for no quota (-1), -1 for bad text. */
int nst_cpu_quota_v1(const char *quota, const char *period, double *cpus);

/* The directory of this process's CPU cgroup, from the texts of
 * /proc/self/cgroup and /proc/self/mountinfo: for v2 the "0::" line and the
 * cgroup2 mount, for v1 the line whose controllers include "cpu" and the
 * cgroup mount with the "cpu" option (its root prefix stripped from the
 * path). Writes the directory and the mount point (the walk's upper end).
 * Returns 1 if found, 0 if not (or it does not fit in n bytes). */
int nst_cpu_cgroup_dir(const char *proc_cgroup, const char *mountinfo, int v2, char *dir,
                       char *mount, size_t n);

/* The tightest quota (in CPUs) of the cgroup directory `dir` and of each
 * parent up to `mount` (inclusive), read from their cpu.max (v2) or
 * cpu.cfs_quota_us / cpu.cfs_period_us (v1); 0 if none. Files that are
 * missing or malformed count as no quota. *where names the binding file. */
double nst_cpu_quota_walk(const char *dir, const char *mount, int v2, char *where, size_t wn);

/* The budget from its parts: affinity CPUs (< 1 counts as 1), a quota in
 * CPUs (<= 0: none; rounded up), the LOCAL_WORLD_SIZE text (NULL, empty or
 * not a positive integer: 1). *lws (if not NULL) receives the divisor used. */
uint32_t nst_cpu_budget_combine(long affinity, double quota, const char *local_world_size,
                                uint32_t *lws);

/* Fills *b from the affinity mask, the cgroup files and the environment.
 * Never fails: a figure that cannot be read is left out. */
void nst_cpu_budget_get(nst_cpu_budget *b);

#endif
