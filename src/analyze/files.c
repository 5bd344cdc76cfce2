/*
 * files.c — a dataset's distinct local files and the OS page cache, for the
 * analyzer's runs: nostall_analyze_files_* (the CLI's and Python's cached
 * and cold runs) and the same list, warmed and dropped, inside
 * nostall_analyze_measure() (measure.c).
 *
 * The list is a dataset's distinct files (nostall_dataset: the source
 * indexed, no thread, no ring), freed at once; the epoch plan beside it is
 * nst_loader_plan_info's (what a loader would report, without one). Many
 * items may share one file (the windows of a token corpus, the members of
 * a tar shard, the clips of one audio file): each is listed once, in the
 * order of its first item. http(s):// and s3:// items have no page cache
 * here.
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
#include "dataset.h"

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
    memset(f, 0, sizeof *f);
    nostall_config *plain = nostall_analyze_cached_config(cfg);
    if (!plain) return nst_error(NOSTALL_E_NOMEM, "%s: out of memory", fn);
    nostall_dataset *ds = NULL;
    nostall_dataset_info di;
    int rc = nst_dataset_open(&ds, source, plain, fn);
    if (rc == 0) rc = nst_loader_plan_info(ds, plain, &di, fn);
    nostall_config_free(plain);
    const uint64_t n = rc == 0 ? nostall_dataset_files(ds) : 0;
    if (rc == 0 && !(f->v = calloc(n ? n : 1, sizeof *f->v)))
        rc = nst_error(NOSTALL_E_NOMEM, "%s: out of memory indexing %s", fn, source);
    for (uint64_t i = 0; rc == 0 && i < n; i++) {
        const char *path = nostall_dataset_file(ds, i);
        if (!strncmp(path, "http://", 7) || !strncmp(path, "https://", 8) ||
            !strncmp(path, "s3://", 5))
            continue;
        if (!(f->v[f->n] = strdup(path))) {
            rc = nst_error(NOSTALL_E_NOMEM, "%s: out of memory indexing %s", fn, source);
            break;
        }
        f->n++;
        struct stat sb;
        if (stat(path, &sb) == 0) f->bytes += (double)sb.st_size;
    }
    nostall_dataset_free(ds);
    if (rc < 0) {
        nst_an_files_clear(f);
        return rc;
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
