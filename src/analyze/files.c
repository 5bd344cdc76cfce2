/*
 * files.c — a dataset's distinct local files and the OS page cache, for the
 * analyzer's runs: nostall_analyze_files_* (the CLI's and Python's cached
 * and cold runs) and the same list, warmed and dropped, inside
 * nostall_analyze_measure() (measure.c).
 *
 * The list comes from a probe loader (one thread, no cache, no echo, no
 * group: it only indexes), freed at once. Many items may share one file
 * (the windows of a token corpus, the members of a tar shard, the clips of
 * one audio file): a set of strings keeps each file once, in the order of
 * its first item. http(s):// and s3:// items have no page cache here.
 *
 * Touches: the files' page cache (read, posix_fadvise), nothing else; no
 * global state.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "analyze/analyze_impl.h"
#include "common/error.h"

nostall_config *nst_an_config_variant(const nostall_config *cfg, const char *const *set)
{
    nostall_config *c;
    if ((cfg ? nostall_config_copy(&c, cfg) : nostall_config_create(&c)) < 0) return NULL;
    for (; set && set[0]; set += 2) nostall_config_set(c, set[0], set[1]);
    return c;
}

nostall_config *nostall_analyze_cached_config(const nostall_config *cfg)
{
    static const char *const cached_set[] = {"cache",
                                             "none",
                                             "cache_bytes",
                                             "0",
                                             "storage_mbps",
                                             "0",
                                             "storage_latency_ms",
                                             "0",
                                             "echo",
                                             "fixed",
                                             "echo_factor",
                                             "1",
                                             "epochs",
                                             "1",
                                             "coordinate",
                                             "",
                                             "cache_transcode",
                                             "0",
                                             NULL};
    return nst_an_config_variant(cfg, cached_set);
}

/* ---- a set of strings (open addressing, FNV-1a; the strings are the caller's) */

typedef struct strset {
    const char **slot;
    size_t cap, n; /* cap: a power of two, at most half full */
} strset;

static uint64_t str_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* 1 if `s` was added, 0 if it was there, -1 out of memory. */
static int strset_add(strset *t, const char *s)
{
    if (2 * (t->n + 1) > t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 1024;
        const char **slot = calloc(cap, sizeof *slot);
        if (!slot) return -1;
        for (size_t i = 0; i < t->cap; i++)
            if (t->slot[i]) {
                size_t j = (size_t)str_hash(t->slot[i]) & (cap - 1);
                while (slot[j]) j = (j + 1) & (cap - 1);
                slot[j] = t->slot[i];
            }
        free(t->slot);
        t->slot = slot;
        t->cap = cap;
    }
    size_t j = (size_t)str_hash(s) & (t->cap - 1);
    for (; t->slot[j]; j = (j + 1) & (t->cap - 1))
        if (!strcmp(t->slot[j], s)) return 0;
    t->slot[j] = s;
    t->n++;
    return 1;
}

/* ---- files and the page cache ------------------------------------------- */

void nst_an_files_clear(nostall_analyze_files *f)
{
    for (size_t i = 0; i < f->n; i++) free(f->v[i]);
    free(f->v);
    memset(f, 0, sizeof *f);
}

/* DONTNEED leaves dirty pages (and pages under writeback) in place, so a
 * dataset written moments ago (`nostall gen`, a copy) would stay cached
 * and the storage measured would be memory: write them back first
 * (fdatasync on a read-only descriptor is allowed, and costs nothing on
 * clean files). */
int nst_an_file_drop(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    (void)fdatasync(fd);
    int rc = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    return rc == 0 ? 0 : -1;
}

size_t nst_an_files_drop(const nostall_analyze_files *f)
{
    size_t failed = 0;
    for (size_t i = 0; i < f->n; i++)
        if (nst_an_file_drop(f->v[i]) < 0) failed++;
    return failed;
}

long long nst_an_read_upto(const char *path, char *buf, size_t buflen, long long max)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    long long total = 0;
    while (total < max) {
        ssize_t n = read(fd, buf, buflen);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            total = -1;
            break;
        }
        if (n == 0) break;
        total += n;
    }
    const int err = errno;
    close(fd);
    errno = err;
    return total;
}

int nst_an_files_index(nostall_analyze_files *f, const char *source, const nostall_config *cfg,
                       nostall_dataset_info *info, const char *fn)
{
    static const char *const probe_set[] = {"threads", "1", "batches_ahead", "1", NULL};
    memset(f, 0, sizeof *f);
    nostall_config *plain = nostall_analyze_cached_config(cfg);
    nostall_config *probe_cfg = plain ? nst_an_config_variant(plain, probe_set) : NULL;
    nostall_config_free(plain);
    nostall_loader *ld;
    if (!probe_cfg) return nst_error(NOSTALL_E_NOMEM, "%s: out of memory", fn);
    int rc = nostall_loader_create(&ld, source, probe_cfg);
    nostall_config_free(probe_cfg);
    if (rc < 0) return rc;
    nostall_dataset_info di;
    nostall_loader_info(ld, &di, sizeof di);
    nostall_loader_stop(ld);
    strset seen = {NULL, 0, 0};
    size_t cap = 0;
    int oom = 0;
    for (uint64_t i = 0; !oom && i < di.items; i++) {
        const char *path;
        int64_t label;
        if (nostall_loader_item(ld, i, &path, &label) < 0) continue;
        if (!strncmp(path, "http://", 7) || !strncmp(path, "https://", 8) ||
            !strncmp(path, "s3://", 5))
            continue;
        const int added = strset_add(&seen, path); /* the loader's string: lives as long */
        if (added <= 0) {
            oom = added < 0;
            continue;
        }
        if (f->n == cap) {
            size_t ncap = cap ? 2 * cap : 256;
            char **v = realloc(f->v, ncap * sizeof *v);
            if (!v) {
                oom = 1;
                break;
            }
            f->v = v;
            cap = ncap;
        }
        if (!(f->v[f->n] = strdup(path))) {
            oom = 1;
            break;
        }
        f->n++;
        struct stat sb;
        if (stat(path, &sb) == 0) f->bytes += (double)sb.st_size;
    }
    free(seen.slot);
    nostall_loader_free(ld);
    if (oom) {
        nst_an_files_clear(f);
        return nst_error(NOSTALL_E_NOMEM, "%s: out of memory indexing %s", fn, source);
    }
    if (info) *info = di;
    return 0;
}

/* ---- the public handle ---------------------------------------------------- */

int nostall_analyze_files_create(nostall_analyze_files **out, const char *source,
                                 const nostall_config *cfg, nostall_dataset_info *info,
                                 size_t info_size)
{
    static const char fn[] = "nostall_analyze_files_create";
    nst_error_clear();
    if (!out || !source) return nst_error(NOSTALL_E_INVALID, "%s: NULL argument", fn);
    *out = NULL;
    nostall_analyze_files *f = calloc(1, sizeof *f);
    if (!f) return nst_error(NOSTALL_E_NOMEM, "%s: out of memory", fn);
    nostall_dataset_info di;
    const int rc = nst_an_files_index(f, source, cfg, &di, fn);
    if (rc < 0) {
        free(f);
        return rc;
    }
    if (info) memcpy(info, &di, info_size < sizeof di ? info_size : sizeof di);
    *out = f;
    return 0;
}

void nostall_analyze_files_free(nostall_analyze_files *f)
{
    if (!f) return;
    nst_an_files_clear(f);
    free(f);
}

uint64_t nostall_analyze_files_count(const nostall_analyze_files *f) { return f ? f->n : 0; }

const char *nostall_analyze_files_path(const nostall_analyze_files *f, uint64_t i)
{
    return f && i < f->n ? f->v[i] : NULL;
}

uint64_t nostall_analyze_files_warm(const nostall_analyze_files *f)
{
    if (!f || !f->n) return 0;
    char *buf = malloc(1 << 20);
    if (!buf) return f->n;
    uint64_t failed = 0;
    for (size_t i = 0; i < f->n; i++)
        if (nst_an_read_upto(f->v[i], buf, 1 << 20, LLONG_MAX) < 0) failed++;
    free(buf);
    return failed;
}

uint64_t nostall_analyze_files_drop(const nostall_analyze_files *f)
{
    return f ? nst_an_files_drop(f) : 0;
}
