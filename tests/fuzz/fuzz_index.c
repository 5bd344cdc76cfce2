/*
 * fuzz_index.c — the dataset index on hostile input: the file-list parser
 * and the ImageFolder walk (src/dataset/index.c), and the reader's refusals
 * of what is not a regular file (src/source/reader.c).
 *
 * The first byte picks the mode.
 *
 * Even: the rest is a list file, written to a memfd and indexed through
 * /proc/self/fd/N. The result is compared with a reference parser written
 * from the rules in index.h: the same items (path, joined or verbatim, and
 * label) and classes, or the same failure (E_DATASET naming the line of the
 * first bad line, or the list when it has no items). A list of tar shards
 * (every line a bare path ending in .tar) is built but not compared.
 *
 * Odd: the rest is a program of 3-byte steps that builds a small tree under
 * /dev/shm from a fixed table of names (directories, files, symlinks to
 * directories of the tree — shared subtrees, loops — or to nowhere, FIFOs,
 * unreadable files, hidden entries), and the index is built from it. It
 * must finish (the walk of a DAG of symlinks costs its size), and then:
 * items sorted bytewise within each class and unique, every one named like
 * an image and present on disk; reading each either succeeds or fails with
 * a message that starts "read: " (a FIFO never blocks); a failure is an
 * "index: " message that was not cut off; no descriptor leaks.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>

#include "common/buf.h"
#include "common/error.h"
#include "dataset/index.h"
#include "source/reader.h"

static char g_root[256]; /* the ImageFolder mode's tree */
static void rm_tree(const char *root);

/* Report, remove the tree (abort() skips atexit), and crash: libFuzzer keeps
 * the input. */
#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "fuzz_index: " __VA_ARGS__);                                               \
        fprintf(stderr, " (last error: %s)\n", nostall_last_error());                              \
        if (g_root[0]) rm_tree(g_root);                                                            \
        abort();                                                                                   \
    } while (0)

static int open_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    while (readdir(d)) n++;
    closedir(d);
    return n;
}

/* ---- list mode -------------------------------------------------------- */

typedef struct ref_item {
    char *path;
    int kind;           /* NST_LABEL_* of the line */
    int64_t label;      /* INT */
    double flabel;      /* FLOAT */
    uint32_t multi[64]; /* MULTI (the fuzzer's lines are short) */
    uint32_t nmulti;
} ref_item;

static int alpha(int c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }

/* Set when the reference cannot judge an input (more labels on a line than
 * it holds): the index is still built (crashes, leaks, UB), its answer not
 * compared. */
static int ref_unsure;

static int digits(const uint8_t *p, size_t n, uint64_t lim, uint64_t *out)
{
    uint64_t v = 0;
    if (n == 0) return 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') return 0;
        if (v > (lim - 1 - (uint64_t)(p[i] - '0')) / 10) return 0;
        v = v * 10 + (uint64_t)(p[i] - '0');
    }
    *out = v;
    return 1;
}

/* A label column by the rules of index.h: its kind, or -1. */
static int ref_label(const uint8_t *p, size_t n, ref_item *it)
{
    uint64_t v;
    if (n == 0) return -1;
    if (digits(p, n, NST_INDEX_LABEL_LIMIT, &v)) {
        it->label = (int64_t)v;
        return NST_LABEL_INT;
    }
    if (n > 1 && p[0] == '-' && digits(p + 1, n - 1, NST_INDEX_LABEL_LIMIT, &v)) {
        it->label = -(int64_t)v;
        return NST_LABEL_INT;
    }
    size_t all = p[0] == '-';
    while (all < n && p[all] >= '0' && p[all] <= '9') all++;
    if (all == n && n > (size_t)(p[0] == '-')) return -1; /* an integer out of range */
    if (memchr(p, ',', n)) {
        size_t start = 0;
        it->nmulti = 0;
        if (n == 1) return NST_LABEL_MULTI; /* ",": no label      */
        if (p[n - 1] == ',') n--;           /* "3,": one label    */
        for (size_t i = 0; i <= n; i++) {
            if (i < n && p[i] != ',') continue;
            if (!digits(p + start, i - start, NST_INDEX_LABEL_LIMIT, &v) || v > UINT32_MAX)
                return -1;
            if (it->nmulti == 64) return ref_unsure = 1, -1; /* past what it holds */
            it->multi[it->nmulti++] = (uint32_t)v;
            start = i + 1;
        }
        return NST_LABEL_MULTI;
    }
    size_t i = p[0] == '-', ip = 0, fp = 0;
    while (i < n && p[i] >= '0' && p[i] <= '9') i++, ip++;
    if (i < n && p[i] == '.')
        for (i++; i < n && p[i] >= '0' && p[i] <= '9'; i++) fp++;
    if (ip + fp == 0) return -1;
    if (i < n && (p[i] == 'e' || p[i] == 'E')) {
        size_t ep = 0;
        i++;
        if (i < n && (p[i] == '+' || p[i] == '-')) i++;
        while (i < n && p[i] >= '0' && p[i] <= '9') i++, ep++;
        if (!ep) return -1;
    }
    if (i != n) return -1;
    char buf[512];
    if (n >= sizeof buf) return -1;
    memcpy(buf, p, n);
    buf[n] = '\0';
    errno = 0;
    it->flabel = strtod(buf, NULL);
    if (errno == ERANGE || !isfinite(it->flabel)) return -1;
    return NST_LABEL_FLOAT;
}

/* The list rules of index.h. Returns 0 with the items, or the number of
 * the first bad line (> 0), or -1 when there is no item. */
static long long ref_list(const uint8_t *d, size_t n, const char *prefix, ref_item **items,
                          size_t *count)
{
    long long lineno = 0, first[4] = {0, 0, 0, 0}, not_multi = 0;
    *items = NULL;
    *count = 0;
    for (size_t pos = 0; pos < n;) {
        const uint8_t *line = d + pos, *nl = memchr(line, '\n', n - pos);
        size_t len = nl ? (size_t)(nl - line) : n - pos;
        pos += len + (nl ? 1 : 0);
        lineno++;
        if (len && line[len - 1] == '\r') len--;
        if (len == 0 || line[0] == '#') continue;
        if (memchr(line, 0, len)) return lineno;
        size_t tab = len;
        for (size_t i = 0; i < len; i++)
            if (line[i] == '\t') tab = i;
        if (tab == 0) return lineno;
        ref_item it = {0};
        it.kind = tab == len ? NST_LABEL_NONE : ref_label(line + tab + 1, len - tab - 1, &it);
        if (it.kind < 0) return lineno;
        if (!first[it.kind]) first[it.kind] = lineno;
        if (it.kind == NST_LABEL_INT && (it.label < 0 || it.label > (int64_t)UINT32_MAX) &&
            !not_multi)
            not_multi = lineno;
        /* a URL: "scheme://" at the start; only http(s) and s3 */
        int is_url = 0;
        if (alpha(line[0])) {
            size_t sep = 0;
            for (size_t i = 1; i + 2 < tab && !sep; i++)
                if (line[i] == ':' && line[i + 1] == '/' && line[i + 2] == '/') sep = i;
            is_url = sep > 0;
            for (size_t i = 0; is_url && i < sep; i++) {
                int c = line[i];
                if (!alpha(c) && !(c >= '0' && c <= '9') && c != '+' && c != '-' && c != '.')
                    is_url = 0;
            }
            if (is_url && !((tab >= 7 && strncasecmp((const char *)line, "http://", 7) == 0) ||
                            (tab >= 8 && strncasecmp((const char *)line, "https://", 8) == 0) ||
                            (tab >= 5 && strncasecmp((const char *)line, "s3://", 5) == 0)))
                return lineno;
        }
        int verbatim = line[0] == '/' || is_url;
        size_t plen = verbatim ? 0 : strlen(prefix);
        char *p = malloc(plen + tab + 1);
        if (!p) abort();
        memcpy(p, prefix, plen);
        memcpy(p + plen, line, tab);
        p[plen + tab] = '\0';
        it.path = p;
        *items = realloc(*items, (*count + 1) * sizeof **items);
        if (!*items) abort();
        (*items)[(*count)++] = it;
    }
    if (!*count) return -1;
    long long labeled = 0;
    for (int k = NST_LABEL_INT; k <= NST_LABEL_MULTI; k++)
        if (first[k] && (!labeled || first[k] < labeled)) labeled = first[k];
    if (first[NST_LABEL_NONE] && labeled)
        return first[NST_LABEL_NONE] > labeled ? first[NST_LABEL_NONE] : labeled;
    if (first[NST_LABEL_FLOAT] && first[NST_LABEL_MULTI])
        return first[NST_LABEL_FLOAT] > first[NST_LABEL_MULTI] ? first[NST_LABEL_FLOAT]
                                                               : first[NST_LABEL_MULTI];
    if (first[NST_LABEL_MULTI] && not_multi)
        return not_multi > first[NST_LABEL_MULTI] ? not_multi : first[NST_LABEL_MULTI];
    return 0;
}

static int is_url(const char *p)
{
    return strncasecmp(p, "http://", 7) == 0 || strncasecmp(p, "https://", 8) == 0;
}

/* index.h: a list whose lines are all bare paths (no label) naming ".tar"
 * files (any case; a URL's query left out) is a list of tar shards. */
static int ref_shard_list(const ref_item *it, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (it[i].kind != NST_LABEL_NONE) return 0;
        size_t len = strlen(it[i].path);
        const char *q = is_url(it[i].path) ? strchr(it[i].path, '?') : NULL;
        if (q) len = (size_t)(q - it[i].path);
        if (len < 4 || strncasecmp(it[i].path + len - 4, ".tar", 4) != 0) return 0;
    }
    return n > 0;
}

static void fuzz_list(const uint8_t *d, size_t n)
{
    int fd = memfd_create("nostall-fuzz-list", MFD_CLOEXEC);
    if (fd < 0) abort();
    for (size_t off = 0; off < n;) {
        ssize_t w = write(fd, d + off, n - off);
        if (w <= 0) abort();
        off += (size_t)w;
    }
    char list[64];
    snprintf(list, sizeof list, "/proc/self/fd/%d", fd);
    ref_item *want;
    size_t nwant;
    ref_unsure = 0;
    /* s3:// lines: the index probes the first one's bucket over the network
     * at build; their parsing is http(s)'s, fuzzed with those */
    for (size_t i = 0; i + 5 <= n; i++)
        if (strncasecmp((const char *)d + i, "s3://", 5) == 0) {
            close(fd);
            return;
        }
    /* a JPEG or PNG given as the list (a new user's first try): refused as
     * an image, whatever its bytes would parse to as lines */
    if ((n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF) ||
        (n >= 8 && memcmp(d, "\x89PNG\r\n\x1a\n", 8) == 0)) {
        nst_index *ix = NULL;
        int rc = nst_index_build(&ix, list);
        if (rc != NOSTALL_E_DATASET) FAIL("an image as the list: status %d, want E_DATASET", rc);
        if (!strstr(nostall_last_error(), "image, not a list file"))
            FAIL("an image as the list: the message does not say so");
        close(fd);
        return;
    }
    long long ref = ref_list(d, n, "/proc/self/fd/", &want, &nwant);
    /* a list of tar shards: its lines are shards to open, not items, and
     * the reference does not follow them (the tar parser is fuzz_tar's):
     * built and not compared, or not built when it names URLs (the index
     * would fetch them) */
    if (ref == 0 && ref_shard_list(want, nwant)) {
        int urls = 0;
        for (size_t i = 0; i < nwant; i++) urls |= is_url(want[i].path);
        if (urls) {
            for (size_t i = 0; i < nwant; i++) free(want[i].path);
            free(want);
            close(fd);
            return;
        }
        ref_unsure = 1;
    }
    nst_index *ix = NULL;
    int rc = nst_index_build(&ix, list);
    if (ref_unsure) {
        /* built, not compared */
    } else if (ref == 0) {
        if (rc < 0) FAIL("list refused, the reference accepts %zu items", nwant);
        if (nst_index_count(ix) != nwant)
            FAIL("%llu items, want %zu", (unsigned long long)nst_index_count(ix), nwant);
        int kind = NST_LABEL_NONE;
        for (size_t i = 0; i < nwant; i++)
            if (want[i].kind > kind) kind = want[i].kind; /* INT < FLOAT, INT < MULTI */
        if (nst_index_label_kind(ix) != kind)
            FAIL("label kind %d, want %d", nst_index_label_kind(ix), kind);
        uint64_t classes = 0;
        for (size_t i = 0; i < nwant; i++) {
            if (strcmp(nst_index_path(ix, i), want[i].path) != 0)
                FAIL("item %zu: '%s', want '%s'", i, nst_index_path(ix, i), want[i].path);
            if (kind == NST_LABEL_INT) {
                if (nst_index_label(ix, i) != want[i].label)
                    FAIL("item %zu: label %lld, want %lld", i, (long long)nst_index_label(ix, i),
                         (long long)want[i].label);
                if (want[i].label >= 0 && (uint64_t)want[i].label + 1 > classes)
                    classes = (uint64_t)want[i].label + 1;
            } else if (kind == NST_LABEL_FLOAT) {
                double w = want[i].kind == NST_LABEL_INT ? (double)want[i].label : want[i].flabel;
                if (nst_index_label_float(ix, i) != w) FAIL("item %zu: float label", i);
            } else if (kind == NST_LABEL_MULTI) {
                const uint32_t *l;
                uint32_t nl = nst_index_labels(ix, i, &l);
                uint32_t wn = want[i].kind == NST_LABEL_INT ? 1 : want[i].nmulti;
                if (nl != wn) FAIL("item %zu: %u labels, want %u", i, nl, wn);
                for (uint32_t k = 0; k < nl; k++) {
                    uint32_t w =
                        want[i].kind == NST_LABEL_INT ? (uint32_t)want[i].label : want[i].multi[k];
                    if (l[k] != w) FAIL("item %zu: label %u", i, k);
                    if ((uint64_t)w + 1 > classes) classes = (uint64_t)w + 1;
                }
            }
        }
        if (nst_index_classes(ix) != classes) FAIL("classes");
        if (nst_index_ignored(ix) != 0 || nst_index_class_name(ix, 0) != NULL) FAIL("list extras");
    } else {
        if (rc != NOSTALL_E_DATASET) FAIL("status %d, want E_DATASET (reference: %lld)", rc, ref);
        const char *msg = nostall_last_error();
        char at[128];
        snprintf(at, sizeof at, "%s:%lld: ", list, ref);
        if (ref > 0 && !strstr(msg, at)) FAIL("message does not name line %lld", ref);
        if (ref < 0 && !strstr(msg, "no images found")) FAIL("empty list message");
        if (strncmp(msg, "index: ", 7) != 0) FAIL("message does not start with 'index: '");
    }
    nst_index_free(ix);
    for (size_t i = 0; i < nwant; i++) free(want[i].path);
    free(want);
    close(fd);
}

/* ---- ImageFolder mode ----------------------------------------------------- */

static const char *const names[16] = {
    "c",  "d",        "a.jpg", "B.JPEG", "x.png",   ".h",  ".h.jpg", "a-b",
    "a0", "\xff.jpg", "sub",   "d.jpg",  "n\n.png", "jpg", "a.jpgx", "z",
};

#define MAX_DIRS 48
#define MAX_FILES 64

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    if (remove(path) != 0 && errno != ENOENT) {
        chmod(path, 0700);
        remove(path);
    }
    return 0;
}

static void rm_tree(const char *root) { nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

static int is_image_name(const char *name)
{
    const char *dot = strrchr(name, '.');
    return dot &&
           (!strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg") || !strcasecmp(dot, ".png"));
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Each directory is walked once per class: no two items of a class are the
 * same name in the same (resolved) directory. */
static void check_walked_once(const nst_index *ix)
{
    uint64_t count = nst_index_count(ix);
    char **keys = calloc(count, sizeof *keys);
    if (!keys) abort();
    for (uint64_t i = 0; i < count; i++) {
        const char *p = nst_index_path(ix, i);
        const char *slash = strrchr(p, '/');
        char dir[4096], real[PATH_MAX];
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - p), p);
        if (!realpath(dir, real)) FAIL("realpath '%s'", dir);
        size_t k = strlen(real) + strlen(slash) + 32;
        keys[i] = malloc(k);
        if (!keys[i]) abort();
        snprintf(keys[i], k, "%020lld%s%s", (long long)nst_index_label(ix, i), real, slash);
    }
    qsort(keys, count, sizeof *keys, cmp_str);
    for (uint64_t i = 1; i < count; i++)
        if (strcmp(keys[i - 1], keys[i]) == 0)
            FAIL("walked twice in one class: '%s'", keys[i] + 20);
    for (uint64_t i = 0; i < count; i++) free(keys[i]);
    free(keys);
}

static void fuzz_folder(const uint8_t *d, size_t n)
{
    static char dirs[MAX_DIRS][1024], files[MAX_FILES][1024];
    int ndirs = 1, nfiles = 0;
    char path[2048];
    rm_tree(g_root);
    if (mkdir(g_root, 0755) != 0) abort();
    dirs[0][0] = '\0';
    for (size_t i = 0; i + 3 <= n && i < 3 * 96; i += 3) {
        const uint8_t op = d[i], a = d[i + 1], b = d[i + 2];
        const char *name = names[a % 16];
        const char *parent = dirs[b % ndirs];
        int len = snprintf(path, sizeof path, "%s%s/%s", g_root, parent, name);
        if (len < 0 || (size_t)len >= sizeof path - 64) continue;
        const char *rel = path + strlen(g_root);
        char target[2048];
        switch (op % 8) {
        case 0:
        case 1:
            if (mkdir(path, 0755) == 0 && ndirs < MAX_DIRS)
                snprintf(dirs[ndirs++], sizeof dirs[0], "%s", rel);
            break;
        case 2: {
            int f = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
            if (f >= 0) {
                if (write(f, &op, 1) != 1) abort();
                close(f);
                if (nfiles < MAX_FILES) snprintf(files[nfiles++], sizeof files[0], "%s", rel);
            }
            break;
        }
        case 3: /* a symlink to a directory of the tree: shared subtrees, loops */
            snprintf(target, sizeof target, "%s%s", g_root, dirs[(op >> 3) % ndirs]);
            if (symlink(target, path) == 0 && ndirs < MAX_DIRS)
                snprintf(dirs[ndirs++], sizeof dirs[0], "%s", rel);
            break;
        case 4:
            if (symlink("no-such-target", path) != 0) break;
            break;
        case 5: mkfifo(path, 0644); break;
        case 6: /* a symlink to a file, or to itself (ELOOP) */
            if (nfiles)
                snprintf(target, sizeof target, "%s%s", g_root, files[(op >> 3) % nfiles]);
            else
                snprintf(target, sizeof target, "%s", path);
            if (symlink(target, path) != 0) break;
            break;
        case 7: {
            int f = open(path, O_WRONLY | O_CREAT | O_EXCL, 0);
            if (f >= 0) close(f);
            break;
        }
        }
    }
    nst_index *ix = NULL;
    int rc = nst_index_build(&ix, g_root);
    if (rc < 0) {
        const char *msg = nostall_last_error();
        size_t len = strlen(msg);
        if (strncmp(msg, "index: ", 7) != 0 || len == 0 || len >= NST_ERROR_MAX - 1)
            FAIL("failure message cut or unnamed");
        if (rc != NOSTALL_E_DATASET && rc != NOSTALL_E_NOT_FOUND && rc != NOSTALL_E_PERMISSION)
            FAIL("status %d", rc);
    } else {
        uint64_t count = nst_index_count(ix);
        if (count == 0) FAIL("an empty index was built");
        if (nst_index_dirs_walked(ix) < nst_index_classes(ix)) FAIL("dirs walked");
        uint64_t kept = nst_index_ignored(ix) < NST_INDEX_IGNORED_KEEP ? nst_index_ignored(ix)
                                                                       : NST_INDEX_IGNORED_KEEP;
        for (uint64_t i = 0; i < kept; i++) {
            const char *p = nst_index_ignored_path(ix, i);
            struct stat st;
            if (!p || strncmp(p, g_root, strlen(g_root)) != 0 || lstat(p, &st) != 0)
                FAIL("ignored file %llu: '%s'", (unsigned long long)i, p ? p : "(null)");
            const char *base = strrchr(p, '/') + 1;
            if (base[0] != '.' && is_image_name(base) && strchr(p + strlen(g_root) + 1, '/'))
                FAIL("a file named like an image in a class folder was ignored: '%s'", p);
        }
        if (nst_index_ignored_path(ix, kept) != NULL) FAIL("ignored paths beyond the count");
        nst_buf buf = {0};
        for (uint64_t i = 0; i < count; i++) {
            const char *p = nst_index_path(ix, i);
            const char *base = strrchr(p, '/');
            if (!base || !is_image_name(base + 1) || base[1] == '.')
                FAIL("item '%s' is not named like an image", p);
            struct stat st;
            if (lstat(p, &st) != 0) FAIL("item '%s' does not exist", p);
            if (i > 0) {
                int64_t l0 = nst_index_label(ix, i - 1), l1 = nst_index_label(ix, i);
                if (l1 < l0 || (l1 == l0 && strcmp(nst_index_path(ix, i - 1), p) >= 0))
                    FAIL("items %llu, %llu out of order: '%s', '%s'", (unsigned long long)i - 1,
                         (unsigned long long)i, nst_index_path(ix, i - 1), p);
            }
            size_t len;
            int r = nst_read_file(p, 1 << 16, 0, &buf, &len);
            if (r < 0 && strncmp(nostall_last_error(), "read: ", 6) != 0) FAIL("read message");
            if (r == 0 && len != 1) FAIL("read %zu bytes of a 1-byte file", len);
        }
        nst_buf_free(&buf);
        check_walked_once(ix);
    }
    nst_index_free(ix);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    snprintf(g_root, sizeof g_root, "/dev/shm/nostall-fuzz-index-%d", (int)getpid());
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 1 << 16) return 0;
    if (!g_root[0]) LLVMFuzzerInitialize(NULL, NULL);
    int fds = open_fds();
    if (data[0] & 1) {
        fuzz_folder(data + 1, size - 1);
        rm_tree(g_root);
    } else {
        fuzz_list(data + 1, size - 1);
    }
    if (open_fds() != fds) FAIL("descriptors leaked: %d before, %d after", fds, open_fds());
    return 0;
}
