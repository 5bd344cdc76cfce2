/*
 * cpubudget.c — the CPUs this process may use (see cpubudget.h), the default
 * worker count.
 *
 * Affinity: sched_getaffinity (a mask sized for up to 64 Ki CPUs), else the
 * online CPUs. cgroup: the process's cgroup path from /proc/self/cgroup, the
 * hierarchy's mount point from /proc/self/mountinfo (its root prefix, as in a
 * container without a cgroup namespace, is stripped), then the quota of
 * that cgroup and of each parent up to the mount point, the tightest taken:
 * cpu.max for v2, cpu.cfs_quota_us / cpu.cfs_period_us for v1. Both
 * hierarchies are read (a hybrid machine has the v2 one mounted without the
 * cpu controller); the smaller quota wins. LOCAL_WORLD_SIZE (torchrun) then
 * divides the budget among the ranks of the machine.
 */
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cpubudget.h"

#define PATH_CAP 4096

/* An unsigned decimal after optional blanks; *p moves past it. */
static int parse_u64(const char **p, unsigned long long *out)
{
    const char *s = *p;
    while (*s == ' ' || *s == '\t') s++;
    if (*s < '0' || *s > '9') return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno) return -1;
    *out = v;
    *p = end;
    return 0;
}

/* Only blanks and line ends left. */
static int at_end(const char *s)
{
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') s++;
    return *s == '\0';
}

int nst_cpu_quota_v2(const char *text, double *cpus)
{
    unsigned long long quota, period;
    const char *s = text;
    if (!s) return -1;
    while (*s == ' ' || *s == '\t') s++;
    if (strncmp(s, "max", 3) == 0 && (s[3] == '\0' || s[3] == ' ' || s[3] == '\n')) {
        s += 3;
        /* "max" alone, or "max PERIOD" */
        if (at_end(s)) return 0;
        return parse_u64(&s, &period) == 0 && at_end(s) ? 0 : -1;
    }
    if (parse_u64(&s, &quota) < 0 || parse_u64(&s, &period) < 0 || !at_end(s)) return -1;
    if (quota == 0 || period == 0) return -1;
    *cpus = (double)quota / (double)period;
    return 1;
}

int nst_cpu_quota_v1(const char *quota_text, const char *period_text, double *cpus)
{
    const char *s = quota_text;
    unsigned long long quota, period;
    if (!s || !period_text) return -1;
    while (*s == ' ' || *s == '\t') s++;
    if (*s == '-') { /* -1: no quota */
        s++;
        return parse_u64(&s, &quota) == 0 && quota == 1 && at_end(s) ? 0 : -1;
    }
    if (parse_u64(&s, &quota) < 0 || !at_end(s) || quota == 0) return -1;
    s = period_text;
    if (parse_u64(&s, &period) < 0 || !at_end(s) || period == 0) return -1;
    *cpus = (double)quota / (double)period;
    return 1;
}

/* The next line of *text (without its '\n') into buf; 0 at the end. A line
 * longer than the buffer is cut (it then matches nothing it should not). */
static int next_line(const char **text, char *buf, size_t n)
{
    const char *s = *text;
    if (!s || !*s) return 0;
    size_t len = strcspn(s, "\n");
    size_t k = len < n - 1 ? len : n - 1;
    memcpy(buf, s, k);
    buf[k] = '\0';
    *text = s[len] ? s + len + 1 : s + len;
    return 1;
}

/* Is `tok` one of the comma-separated words of `list`? */
static int has_word(const char *list, const char *tok)
{
    size_t tn = strlen(tok);
    for (const char *s = list; *s;) {
        size_t len = strcspn(s, ",");
        if (len == tn && strncmp(s, tok, tn) == 0) return 1;
        s += len;
        if (*s == ',') s++;
    }
    return 0;
}

/* A mountinfo field, with its octal escapes (\040 for a space) decoded. */
static void unescape(const char *in, char *out, size_t n)
{
    size_t k = 0;
    while (*in && k + 1 < n) {
        if (in[0] == '\\' && in[1] >= '0' && in[1] <= '3' && in[2] >= '0' && in[2] <= '7' &&
            in[3] >= '0' && in[3] <= '7') {
            out[k++] = (char)((in[1] - '0') * 64 + (in[2] - '0') * 8 + (in[3] - '0'));
            in += 4;
        } else {
            out[k++] = *in++;
        }
    }
    out[k] = '\0';
}

/* The cgroup path of the hierarchy asked for, from /proc/self/cgroup. */
static int cgroup_path(const char *proc_cgroup, int v2, char *path, size_t n)
{
    char line[PATH_CAP + 128];
    const char *t = proc_cgroup;
    while (next_line(&t, line, sizeof line)) {
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c1 = *c2 = '\0';
        int match = v2 ? strcmp(line, "0") == 0 && c1[1] == '\0' : has_word(c1 + 1, "cpu");
        if (!match || c2[1] != '/') continue;
        if (strlen(c2 + 1) >= n) return 0;
        snprintf(path, n, "%s", c2 + 1);
        return 1;
    }
    return 0;
}

int nst_cpu_cgroup_dir(const char *proc_cgroup, const char *mountinfo, int v2, char *dir,
                       char *mount, size_t n)
{
    char path[PATH_CAP], line[3 * PATH_CAP], root[PATH_CAP], mnt[PATH_CAP];
    int found = 0;
    if (!proc_cgroup || !mountinfo || !cgroup_path(proc_cgroup, v2, path, sizeof path)) return 0;
    const char *t = mountinfo;
    while (next_line(&t, line, sizeof line)) {
        /* id parent maj:min root mountpoint options [optional...] - type source superoptions */
        char *f[6], *sep = strstr(line, " - ");
        if (!sep) continue;
        *sep = '\0';
        char *save = NULL, *type = strtok_r(sep + 3, " ", &save);
        (void)strtok_r(NULL, " ", &save); /* source */
        char *super = strtok_r(NULL, " ", &save);
        if (!type) continue;
        if (v2 ? strcmp(type, "cgroup2") != 0
               : strcmp(type, "cgroup") != 0 || !super || !has_word(super, "cpu"))
            continue;
        int k = 0;
        save = NULL;
        for (char *w = strtok_r(line, " ", &save); w && k < 6; w = strtok_r(NULL, " ", &save))
            f[k++] = w;
        if (k < 5) continue;
        unescape(f[3], root, sizeof root);
        unescape(f[4], mnt, sizeof mnt);
        size_t rl = strlen(root);
        const char *rest;
        int exact = 1;
        if (strcmp(root, "/") == 0)
            rest = path;
        else if (strncmp(path, root, rl) == 0 && (path[rl] == '/' || path[rl] == '\0'))
            rest = path + rl;
        else if (!found) /* another part of the tree: its top, if nothing better */
            rest = "", exact = 0;
        else
            continue;
        if (strcmp(rest, "/") == 0) rest = "";
        if (strlen(mnt) + strlen(rest) >= n) return 0;
        snprintf(dir, n, "%s%s", mnt, rest);
        snprintf(mount, n, "%s", mnt);
        found = 1;
        if (exact) return 1;
    }
    return found;
}

uint32_t nst_cpu_budget_combine(long affinity, double quota, const char *local_world_size,
                                uint32_t *lws)
{
    double n = affinity > 0 ? (double)affinity : 1;
    if (quota > 0) {
        double q = ceil(quota - 1e-9); /* 150000/100000 -> 2; exact ratios stay */
        if (q < 1) q = 1;
        if (q < n) n = q;
    }
    uint32_t div = 1;
    if (local_world_size && *local_world_size) {
        const char *s = local_world_size;
        unsigned long long v;
        if (parse_u64(&s, &v) == 0 && at_end(s) && v >= 1 && v <= 1u << 20) div = (uint32_t)v;
    }
    if (lws) *lws = div;
    n = floor(n / div);
    if (n < 1) n = 1;
    if (n > 1u << 20) n = 1u << 20;
    return (uint32_t)n;
}

/* A whole small file (a /proc or /sys text), NUL-terminated; NULL if
 * unreadable. At most 4 MiB. */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + len, 1, cap - 1 - len, f);
        len += got;
        if (len < cap - 1) break;
        if (cap >= (4u << 20)) break;
        char *p = realloc(buf, cap * 2);
        if (!p) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = p;
        cap *= 2;
    }
    fclose(f);
    if (buf) buf[len] = '\0';
    return buf;
}

double nst_cpu_quota_walk(const char *start, const char *mount, int v2, char *where, size_t wn)
{
    double best = 0;
    char dir[PATH_CAP];
    if (strlen(start) >= sizeof dir) return 0;
    snprintf(dir, sizeof dir, "%s", start);
    size_t ml = strlen(mount);
    char p[PATH_CAP + 32];
    for (;;) {
        double q = 0;
        int got;
        if (v2) {
            snprintf(p, sizeof p, "%s/cpu.max", dir);
            char *t = slurp(p);
            got = t ? nst_cpu_quota_v2(t, &q) : 0;
            free(t);
        } else {
            snprintf(p, sizeof p, "%s/cpu.cfs_quota_us", dir);
            char *tq = slurp(p);
            snprintf(p, sizeof p, "%s/cpu.cfs_period_us", dir);
            char *tp = slurp(p);
            got = tq && tp ? nst_cpu_quota_v1(tq, tp, &q) : 0;
            free(tq);
            free(tp);
        }
        if (got == 1 && (best == 0 || q < best)) {
            best = q;
            snprintf(where, wn, "%.100s/%s", dir, v2 ? "cpu.max" : "cpu.cfs_quota_us");
        }
        size_t dl = strlen(dir);
        char *slash = strrchr(dir, '/');
        if (dl <= ml || !slash || (size_t)(slash - dir) < ml) break;
        *slash = '\0';
    }
    return best;
}

static long affinity_cpus(void)
{
    for (int n = 1024; n <= 65536; n *= 2) {
        cpu_set_t *set = CPU_ALLOC(n);
        if (!set) break;
        size_t sz = CPU_ALLOC_SIZE(n);
        CPU_ZERO_S(sz, set);
        if (sched_getaffinity(0, sz, set) == 0) {
            long c = CPU_COUNT_S(sz, set);
            CPU_FREE(set);
            return c;
        }
        CPU_FREE(set);
        if (errno != EINVAL) break;
    }
    return sysconf(_SC_NPROCESSORS_ONLN);
}

void nst_cpu_budget_get(nst_cpu_budget *b)
{
    char dir[PATH_CAP], mount[PATH_CAP], where[128] = "";
    memset(b, 0, sizeof b[0]);
    long aff = affinity_cpus();
    b->affinity = aff > 0 ? (uint32_t)aff : 1;
    char *cg = slurp("/proc/self/cgroup"), *mi = cg ? slurp("/proc/self/mountinfo") : NULL;
    for (int v2 = 1; v2 >= 0 && mi; v2--) {
        if (!nst_cpu_cgroup_dir(cg, mi, v2, dir, mount, sizeof dir)) continue;
        double q = nst_cpu_quota_walk(dir, mount, v2, where, sizeof where);
        if (q > 0 && (b->quota == 0 || q < b->quota)) b->quota = q;
    }
    free(cg);
    free(mi);
    const char *lws = getenv("LOCAL_WORLD_SIZE");
    b->threads = nst_cpu_budget_combine(b->affinity, b->quota, lws, &b->local_world_size);
    int k = snprintf(b->source, sizeof b->source, "%u CPUs in the affinity mask", b->affinity);
    if (b->quota > 0 && k > 0 && (size_t)k < sizeof b->source)
        k += snprintf(b->source + k, sizeof b->source - (size_t)k, ", quota %.2f CPUs (%s)",
                      b->quota, where);
    if (b->local_world_size > 1 && k > 0 && (size_t)k < sizeof b->source)
        snprintf(b->source + k, sizeof b->source - (size_t)k, ", / LOCAL_WORLD_SIZE=%u",
                 b->local_world_size);
}
