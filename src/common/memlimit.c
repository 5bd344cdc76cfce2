/*
 * memlimit.c — the memory this process may use (see memlimit.h).
 *
 * RAM: /proc/meminfo's MemTotal and MemAvailable (sysconf as a fallback).
 * cgroup v2: the process's cgroup from /proc/self/cgroup ("0::/path"), then
 * memory.max and memory.current under /sys/fs/cgroup/path, and the same of
 * each parent up to the root (a limit may be set on any ancestor). cgroup
 * v1: /sys/fs/cgroup/memory/memory.limit_in_bytes and memory.usage_in_bytes.
 * "max" or an absurdly large v1 value means no limit.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/testhooks.h"

#include "common/error.h"
#include "common/memlimit.h"

static int read_u64(const char *path, uint64_t *out)
{
    FILE *f = fopen(path, "r");
    char buf[64];
    if (!f) return -1;
    char *line = fgets(buf, sizeof buf, f);
    fclose(f);
    if (!line || strncmp(buf, "max", 3) == 0) return -1;
    char *end;
    unsigned long long v = strtoull(buf, &end, 10);
    if (end == buf) return -1;
    *out = v;
    return 0;
}

static void meminfo(uint64_t *total, uint64_t *avail)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    *total = *avail = 0;
    if (f) {
        while (fgets(line, sizeof line, f)) {
            unsigned long long kb;
            if (sscanf(line, "MemTotal: %llu kB", &kb) == 1)
                *total = kb * 1024;
            else if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
                *avail = kb * 1024;
        }
        fclose(f);
    }
    if (*total == 0) {
        long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
        if (pages > 0 && psize > 0) *total = (uint64_t)pages * (uint64_t)psize;
    }
    if (*avail == 0 || *avail > *total) *avail = *total;
}

/* cgroup v2: the tightest memory.max on the path from the process's cgroup
 * to the root, with that cgroup's memory.current. */
static int cgroup_v2(uint64_t *limit, uint64_t *used, char *where, size_t wn)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    char line[4096], path[4096 + 64];
    int found = 0;
    if (!f) return 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "0::", 3) != 0) continue;
        char *rel = line + 3;
        rel[strcspn(rel, "\n")] = '\0';
        for (;;) {
            uint64_t lim, cur;
            snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.max", rel);
            if (read_u64(path, &lim) == 0 && (!found || lim < *limit)) {
                snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.current", rel);
                if (read_u64(path, &cur) != 0) cur = 0;
                *limit = lim;
                *used = cur;
                snprintf(where, wn, "cgroup %.60s memory.max", *rel ? rel : "/");
                found = 1;
            }
            char *slash = strrchr(rel, '/');
            if (!slash || slash == rel) {
                if (*rel == '\0') break;
                rel[0] = '\0'; /* the root itself last */
                continue;
            }
            *slash = '\0';
        }
        break;
    }
    fclose(f);
    return found;
}

static int cgroup_v1(uint64_t *limit, uint64_t *used, char *where, size_t wn)
{
    uint64_t lim, cur;
    if (read_u64("/sys/fs/cgroup/memory/memory.limit_in_bytes", &lim) != 0) return 0;
    if (lim >= ((uint64_t)1 << 60)) return 0; /* "unlimited" */
    if (read_u64("/sys/fs/cgroup/memory/memory.usage_in_bytes", &cur) != 0) cur = 0;
    *limit = lim;
    *used = cur;
    snprintf(where, wn, "cgroup v1 memory.limit_in_bytes");
    return 1;
}

int nst_memlimit_get(nst_memlimit *m)
{
    uint64_t total, avail, lim = 0, used = 0;
    char where[80];
    memset(m, 0, sizeof *m);
    const char *fake = nst_test_env("NOSTALL_MEMLIMIT_BYTES"); /* testhooks.h */
    if (fake && *fake) {
        m->limit = m->available = strtoull(fake, NULL, 10);
        snprintf(m->source, sizeof m->source, "NOSTALL_MEMLIMIT_BYTES");
        return 0;
    }
    meminfo(&total, &avail);
    if (total == 0) return nst_error(NOSTALL_E_IO, "memory limit: cannot read the machine's RAM");
    m->limit = total;
    m->available = avail;
    snprintf(m->source, sizeof m->source, "RAM (/proc/meminfo)");
    if (cgroup_v2(&lim, &used, where, sizeof where) || cgroup_v1(&lim, &used, where, sizeof where)) {
        if (lim < total) {
            m->limit = lim;
            m->cgroup = 1;
            snprintf(m->source, sizeof m->source, "%s", where);
        }
        uint64_t cg_avail = lim > used ? lim - used : 0;
        if (cg_avail < m->available) m->available = cg_avail;
    }
    return 0;
}
