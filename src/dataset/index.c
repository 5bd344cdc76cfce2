/*
 * index.c — builds the dataset index (item paths and labels) from an
 * ImageFolder directory or a `path<TAB>label` list file; see index.h.
 * Room: dataset/ (what the items are).
 *
 * Design: strings live in "string tables": one growing char arena holding
 * every NUL-terminated string back to back, plus an array of offsets into it
 * (growth is amortized doubling, so building a million-item index makes a
 * few dozen allocations, not one per item). Item labels sit in a parallel
 * int64 array; class names in a second table. Ordering is deterministic and
 * locale-free: names are sorted with strcmp (bytewise, like Python sorted()).
 * For ImageFolder, class folders are listed and sorted first, then each
 * class folder is walked depth-first, each directory opened relative to its
 * parent (openat: no path length limit) and its entries read whole and
 * sorted so that directory names compare as if they ended in '/'
 * (cmp_entry): the walk then meets the paths in bytewise order, items are
 * appended as they are met (no final sort) and "the first path to a shared
 * directory" is the first in that order. Names like an image are items
 * without a stat() (whatever they are: fetch reports why one cannot be
 * read); other names are stat()ed only when d_type cannot tell a directory.
 * Symlinks are followed; a directory that is one of its own ancestors
 * (device and inode compared) is a symlink loop and fails the build; one
 * already walked in this class folder (a hash set of device and inode) is
 * skipped, so symlinked subtrees that form a DAG cost their size, not the
 * number of paths to them; nesting is limited to NST_INDEX_MAX_DEPTH levels.
 *
 * Tar shards (index.h): dataset/shards.c hands over each shard's index file
 * (tar.h's format) in shard order; each sample becomes an item appended as
 * for lists -- its member's name in the string table, its label -- plus a
 * 16-byte range (offset, length, shard number) in a parallel array, so a
 * shard's path is stored once, not per item. Labels are known to exist
 * only at the end: unlabeled samples of a labeled index are then removed
 * in place (strings move left in the arena). A shard that cannot be
 * indexed (shards.c hands over its status and message instead) and, in a
 * shard folder, a compressed shard (.tar.gz, ...) is a bad shard: counted,
 * the first ones kept with their reasons in two string tables, and the
 * build fails only when no shard is usable. Arrays are trimmed to their
 * size at the end (a million-item index would otherwise keep up to half
 * again of slack).
 *
 * Every failure frees everything built so far (one cleanup label per
 * function) and returns an NOSTALL_E_* status with a message naming the path.
 *
 * Threads: nst_index_build() runs once, on the thread creating the loader;
 * the finished index is immutable and read by any thread without locks.
 */
#include "dataset/index.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/error.h"
#include "source/http.h"
#include "source/reader.h"
#include "dataset/s3_list.h"
#include "source/s3.h"
#include "dataset/shards.h"
#include "dataset/tar.h"

/* Deepest directory nesting followed inside a class folder. */
#define NST_INDEX_MAX_DEPTH 64

/* A string table: NUL-terminated strings back to back in one arena. */
typedef struct nst_strtab {
    char *arena;
    size_t len, cap; /* bytes used / allocated in arena */
    uint64_t *offs;  /* start of string i in arena      */
    size_t count, ocap;
} nst_strtab;

/* A shard item's bytes: a member's data. */
typedef struct nst_range {
    uint64_t offset;
    uint32_t length, shard;
} nst_range;

struct nst_index {
    nst_strtab items; /* paths; for shard items, their member's name */
    int64_t *labels;  /* parallel to items.offs: an int label, a float
                         label's bits, or (offset << 20 | count) into multi */
    size_t lcap;      /* capacity of labels     */
    int label_kind;   /* NST_LABEL_*                                     */
    uint8_t *lkind;   /* while building a list: each line's kind         */
    uint32_t *multi;  /* NST_LABEL_MULTI: every item's labels, back to back */
    size_t nmulti, mcap;
    nst_strtab classes;
    uint64_t nclasses;
    uint64_t ignored;
    nst_strtab ignored_paths; /* the first NST_INDEX_IGNORED_KEEP, in walk order */
    uint64_t dirs_walked, dirs_shared;
    int is_list;
    unsigned flags; /* NST_INDEX_*                                     */
    /* tar shards: items are members (ranges); NULL ranges: whole files */
    nst_strtab shards;     /* paths / URLs                            */
    nst_range *ranges;     /* per item                                */
    nst_range *part[2];    /* per item: its .json, .txt (length 0: none;
                                 NULL until a sample has one)            */
    size_t rcap;           /* capacity of ranges and parts            */
    uint64_t *shard_first; /* nshards + 1 entries                     */
    uint64_t damaged, range_max;
    uint64_t bad_shards;        /* shards that could not be indexed         */
    nst_strtab bad_shard_paths; /* the first NST_INDEX_IGNORED_KEEP of them */
    nst_strtab bad_shard_why;   /* their reasons, parallel                  */
    int bad_status;             /* the first one's status                   */
    nst_shard_opts sopts;
    nst_shard_stats sstats;
};

static void strtab_free(nst_strtab *t)
{
    free(t->arena);
    free(t->offs);
    memset(t, 0, sizeof *t);
}

/* Grow *p (elements of `size` bytes, capacity *cap) to hold at least `need`. */
static int grow(void **p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap) return 0;
    size_t ncap = *cap ? *cap : 64;
    while (ncap < need) {
        if (nst_mul_overflow(ncap, 2, &ncap)) return -1;
    }
    size_t bytes;
    if (nst_mul_overflow(ncap, size, &bytes)) return -1;
    void *q = realloc(*p, bytes);
    if (!q) return -1;
    *p = q;
    *cap = ncap;
    return 0;
}

/* Append the concatenation of up to three pieces as one string. Returns 0 or
 * -1 (out of memory). */
static int strtab_add3(nst_strtab *t, const char *a, size_t alen, const char *b, size_t blen,
                       const char *c, size_t clen)
{
    size_t need = t->len;
    if (nst_add_overflow(need, alen, &need) || nst_add_overflow(need, blen, &need) ||
        nst_add_overflow(need, clen, &need) || nst_add_overflow(need, 1, &need))
        return -1;
    if (grow((void **)&t->arena, &t->cap, need, 1) ||
        grow((void **)&t->offs, &t->ocap, t->count + 1, sizeof *t->offs))
        return -1;
    char *d = t->arena + t->len;
    if (alen) memcpy(d, a, alen);
    if (blen) memcpy(d + alen, b, blen);
    if (clen) memcpy(d + alen + blen, c, clen);
    d[alen + blen + clen] = '\0';
    t->offs[t->count++] = t->len;
    t->len = need;
    return 0;
}

static const char *strtab_get(const nst_strtab *t, size_t i) { return t->arena + t->offs[i]; }

static int cmp_cstr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Pointers to the strings of t, sorted bytewise. NULL when out of memory
 * (or when t is empty: callers check count first). */
static const char **strtab_sorted(const nst_strtab *t)
{
    size_t bytes;
    if (t->count == 0 || nst_mul_overflow(t->count, sizeof(char *), &bytes)) return NULL;
    const char **v = malloc(bytes);
    if (!v) return NULL;
    for (size_t i = 0; i < t->count; i++) v[i] = strtab_get(t, i);
    qsort(v, t->count, sizeof *v, cmp_cstr);
    return v;
}

/* Append an item with its label. */
static int index_add(nst_index *ix, const char *a, size_t alen, const char *b, size_t blen,
                     const char *c, size_t clen, int64_t label)
{
    if (grow((void **)&ix->labels, &ix->lcap, ix->items.count + 1, sizeof *ix->labels) ||
        strtab_add3(&ix->items, a, alen, b, blen, c, clen))
        return -1;
    ix->labels[ix->items.count - 1] = label;
    return 0;
}

static int parse_label(const char *s, int64_t *out);
/* Tar shards (below). */
static int build_shards(nst_index *ix, const char *source, const nst_strtab *names);
static int shard_folder(nst_index *ix, const char *root, size_t rootlen, const nst_strtab *stray);
static int any_tar(const nst_strtab *t);

/* A list line's label column: nothing, an integer, a float, or several
 * integers separated by commas or spaces (multi-label). Returns the kind
 * (NST_LABEL_*) with the value (INT: *v; FLOAT: *f; MULTI: the labels
 * appended to ix->multi, *v = offset << 20 | count), or -1 malformed, -2 out
 * of range. */
static int parse_label_column(nst_index *ix, const char *s, int64_t *v, double *f)
{
    if (!s) return NST_LABEL_NONE;
    int64_t x;
    int rc = parse_label(s, &x);
    if (rc == 0) {
        *v = x;
        return NST_LABEL_INT;
    }
    if (rc == -2) return -2;
    if (s[0] == '-' && (rc = parse_label(s + 1, &x)) == 0) { /* a negative integer */
        *v = -x;
        return NST_LABEL_INT;
    }
    if (s[0] == '-' && rc == -2) return -2; /* an integer, out of range: not a float */
    if (strchr(s, ',')) {                   /* several integers; "3," one; "," none */
        size_t start = ix->nmulti, count = 0;
        char tok[32];
        for (const char *p = s; strcmp(s, ",") != 0; p++) {
            size_t n = strcspn(p, ",");
            while (n > 1 && p[0] == '0') p++, n--; /* as a label alone (found by fuzz_index) */
            if (n >= sizeof tok) return -2;
            memcpy(tok, p, n);
            tok[n] = '\0';
            if ((rc = parse_label(tok, &x)) < 0) return rc;
            if ((uint64_t)x > UINT32_MAX || count >= (1u << 20) - 1) return -2;
            if (grow((void **)&ix->multi, &ix->mcap, ix->nmulti + 1, sizeof *ix->multi)) return -3;
            ix->multi[ix->nmulti++] = (uint32_t)x;
            count++;
            p += n;
            if (!*p || (p[0] == ',' && !p[1])) break;
        }
        if (start >= ((size_t)1 << 43)) return -2;
        *v = (int64_t)(start << 20 | count);
        return NST_LABEL_MULTI;
    }
    /* A float, strictly: -?digits[.digits][(e|E)[+-]digits], or with
     * digits only after the point (no hex, no '+', no spaces, no inf/nan). */
    const char *p = s + (*s == '-');
    size_t ip = strspn(p, "0123456789"), fp = 0;
    p += ip;
    if (*p == '.') fp = strspn(++p, "0123456789"), p += fp;
    if (ip + fp == 0) return -1;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-') p++;
        size_t ep = strspn(p, "0123456789");
        if (!ep) return -1;
        p += ep;
    }
    if (*p) return -1;
    errno = 0;
    double d = strtod(s, NULL);
    if (errno == ERANGE || !isfinite(d)) return -2;
    *f = d;
    return NST_LABEL_FLOAT;
}

/* The list's kind from its lines' kinds: all without a label, or all with
 * one; integers mix with floats (FLOAT) or with several labels (MULTI).
 * Converts the stored values to the final kind. -1: a mix that does not
 * go together (message set). */
static int settle_labels(nst_index *ix, const char *mlist, const unsigned long long *first,
                         unsigned long long first_not_multi)
{
    int has[NST_LABEL_MULTI + 1] = {0};
    for (size_t i = 0; i < ix->items.count; i++) has[ix->lkind[i]] = 1;
    int labeled = has[NST_LABEL_INT] || has[NST_LABEL_FLOAT] || has[NST_LABEL_MULTI];
    if (has[NST_LABEL_NONE] && labeled) {
        unsigned long long a = first[NST_LABEL_NONE], b = ULLONG_MAX;
        for (int k = NST_LABEL_INT; k <= NST_LABEL_MULTI; k++)
            if (has[k] && first[k] < b) b = first[k];
        return nst_error(NOSTALL_E_DATASET,
                         "index: %s:%llu: a line without a label, but line "
                         "%llu has one (a list labels every line or none)",
                         mlist, a > b ? a : b, a > b ? b : a);
    }
    if (has[NST_LABEL_FLOAT] && has[NST_LABEL_MULTI]) {
        unsigned long long a = first[NST_LABEL_FLOAT], b = first[NST_LABEL_MULTI];
        return nst_error(NOSTALL_E_DATASET,
                         "index: %s:%llu: float labels (line %llu) and lines "
                         "with several labels (line %llu) do not mix",
                         mlist, a > b ? a : b, a, b);
    }
    ix->label_kind = !labeled               ? NST_LABEL_NONE
                     : has[NST_LABEL_MULTI] ? NST_LABEL_MULTI
                     : has[NST_LABEL_FLOAT] ? NST_LABEL_FLOAT
                                            : NST_LABEL_INT;
    if (ix->label_kind == NST_LABEL_MULTI && first_not_multi) {
        unsigned long long a = first_not_multi, b = first[NST_LABEL_MULTI];
        return nst_error(NOSTALL_E_DATASET,
                         "index: %s:%llu: line %llu's label is not in [0, 2^31), "
                         "as labels of a multi-label list (line %llu) must be",
                         mlist, a > b ? a : b, a, b);
    }
    uint64_t maxl = 0;
    int any = 0;
    for (size_t i = 0; i < ix->items.count; i++) {
        int64_t *v = &ix->labels[i];
        if (ix->label_kind == NST_LABEL_FLOAT && ix->lkind[i] == NST_LABEL_INT) {
            double d = (double)*v;
            memcpy(v, &d, sizeof d);
        } else if (ix->label_kind == NST_LABEL_MULTI && ix->lkind[i] == NST_LABEL_INT) {
            if (*v < 0 || *v > UINT32_MAX ||
                grow((void **)&ix->multi, &ix->mcap, ix->nmulti + 1, sizeof *ix->multi))
                return nst_error(NOSTALL_E_DATASET,
                                 "index: %s: label %lld of item %zu does not "
                                 "fit a multi-label list",
                                 mlist, (long long)*v, i);
            ix->multi[ix->nmulti] = (uint32_t)*v;
            *v = (int64_t)(ix->nmulti++ << 20 | 1);
        }
        if (ix->label_kind == NST_LABEL_INT && *v >= 0 && (uint64_t)*v + 1 > maxl)
            maxl = (uint64_t)*v + 1;
        if (ix->label_kind == NST_LABEL_MULTI) {
            const uint32_t *m;
            uint32_t n = nst_index_labels(ix, i, &m);
            for (uint32_t k = 0; k < n; k++)
                if ((uint64_t)m[k] + 1 > maxl) maxl = (uint64_t)m[k] + 1;
        }
        any = 1;
    }
    (void)any;
    ix->nclasses = maxl;
    return 0;
}

static int is_image_name(const char *name)
{
    const char *dot = strrchr(name, '.');
    if (!dot) return 0;
    dot++;
    static const char *const exts[] = {"jpg", "jpeg", "png"};
    for (size_t e = 0; e < sizeof exts / sizeof exts[0]; e++) {
        const char *x = exts[e];
        size_t k = 0;
        while (dot[k] && x[k]) {
            char ch = dot[k];
            if (ch >= 'A' && ch <= 'Z') ch = (char)(ch - 'A' + 'a');
            if (ch != x[k]) break;
            k++;
        }
        if (!dot[k] && !x[k]) return 1;
    }
    return 0;
}

/* What an entry below a class folder becomes: an item (named like an
 * image, whatever it is) or a directory to walk. */
enum { ENT_ITEM = 1, ENT_DIR = 2, ENT_IGNORED = 3 };

/* 1 if the entry `de` of the directory open as `dfd` is a directory,
 * following symlinks; 0 for anything else (a dangling symlink included).
 * d_type answers without a stat() for all but symlinks. */
static int is_dir_at(int dfd, const struct dirent *de)
{
#if defined(DT_UNKNOWN) && defined(DT_DIR) && defined(DT_LNK)
    if (de->d_type == DT_DIR) return 1;
    if (de->d_type != DT_UNKNOWN && de->d_type != DT_LNK) return 0;
#endif
    struct stat st;
    return fstatat(dfd, de->d_name, &st, 0) == 0 && S_ISDIR(st.st_mode);
}

/* A growing path buffer. */
typedef struct nst_pathbuf {
    char *s;
    size_t len, cap;
} nst_pathbuf;

/* Set the buffer's length to `at` and append "/name". */
static int path_push(nst_pathbuf *p, size_t at, const char *name)
{
    size_t nlen = strlen(name), need;
    if (nst_add_overflow(at, nlen, &need) || nst_add_overflow(need, 2, &need)) return -1;
    if (grow((void **)&p->s, &p->cap, need, 1)) return -1;
    p->s[at] = '/';
    memcpy(p->s + at + 1, name, nlen + 1);
    p->len = at + 1 + nlen;
    return 0;
}

/* The entries of one directory being walked: [kind byte][name NUL] back to
 * back in `arena`, then pointers to the names, sorted. One per nesting
 * level, reused by the directories walked at that level. */
typedef struct nst_level {
    char *arena;
    size_t len, cap;
    const char **v;
    size_t n, vcap;
} nst_level;

/* The directories walked in the current class folder, as (device, inode):
 * an open-addressing hash set; a slot is used when its gen is the set's
 * (a new class folder bumps gen instead of clearing). */
typedef struct nst_dirkey {
    uint64_t dev, ino;
    uint32_t gen;
} nst_dirkey;

typedef struct nst_dirset {
    nst_dirkey *v;
    size_t cap, n; /* cap: a power of two, or 0 */
    uint32_t gen;  /* >= 1 once in use */
} nst_dirset;

static size_t dirkey_slot(uint64_t dev, uint64_t ino, size_t cap)
{
    uint64_t h = (ino * 0x9E3779B97F4A7C15ULL) ^ ((dev + 1) * 0xC2B2AE3D27D4EB4FULL);
    return (size_t)(h ^ (h >> 31)) & (cap - 1);
}

/* Start a new class folder: the set is empty. */
static void dirset_next(nst_dirset *s)
{
    if (++s->gen == 0) { /* wrapped: really clear */
        if (s->v) memset(s->v, 0, s->cap * sizeof *s->v);
        s->gen = 1;
    }
    s->n = 0;
}

/* Add (dev, ino): 1 if added, 0 if it was there, -1 when out of memory. */
static int dirset_add(nst_dirset *s, uint64_t dev, uint64_t ino)
{
    if ((s->n + 1) * 2 > s->cap) {
        size_t ncap = s->cap ? s->cap * 2 : 64;
        nst_dirkey *nv = calloc(ncap, sizeof *nv);
        if (!nv) return -1;
        for (size_t i = 0; i < s->cap; i++) {
            if (s->v[i].gen != s->gen) continue;
            size_t j = dirkey_slot(s->v[i].dev, s->v[i].ino, ncap);
            while (nv[j].gen == s->gen) j = (j + 1) & (ncap - 1);
            nv[j] = s->v[i];
        }
        free(s->v);
        s->v = nv;
        s->cap = ncap;
    }
    size_t j = dirkey_slot(dev, ino, s->cap);
    while (s->v[j].gen == s->gen) {
        if (s->v[j].dev == dev && s->v[j].ino == ino) return 0;
        j = (j + 1) & (s->cap - 1);
    }
    s->v[j] = (nst_dirkey){dev, ino, s->gen};
    s->n++;
    return 1;
}

/* The walk of one ImageFolder: the path of the directory being walked, the
 * class's label, one entry list per level, the (device, inode) of the
 * directories being walked (ancestors, outermost first: symlink loops) and
 * of every directory walked in this class folder (shared subtrees). */
typedef struct nst_walk {
    nst_index *ix;
    nst_pathbuf p;
    int64_t label;
    nst_level lv[NST_INDEX_MAX_DEPTH + 1];
    dev_t dev[NST_INDEX_MAX_DEPTH + 1];
    ino_t ino[NST_INDEX_MAX_DEPTH + 1];
    nst_dirset seen;
} nst_walk;

static void walk_free(nst_walk *w)
{
    for (int k = 0; k <= NST_INDEX_MAX_DEPTH; k++) {
        free(w->lv[k].arena);
        free(w->lv[k].v);
    }
    free(w->seen.v);
    free(w->p.s);
}

/* Bytewise order of the paths below: a directory's name compares as if it
 * ended in '/', so a depth-first walk in this order meets every path in
 * bytewise order of the whole relative path ("a.jpg" < "a/b.jpg" <
 * "a0.jpg", as strcmp on the joined paths would sort them). */
static int cmp_entry(const void *a, const void *b)
{
    const unsigned char *x = *(const unsigned char *const *)a;
    const unsigned char *y = *(const unsigned char *const *)b;
    const int xd = x[-1] == ENT_DIR, yd = y[-1] == ENT_DIR;
    for (size_t i = 0;; i++) {
        int cx = x[i] ? x[i] : xd ? '/' : 0, cy = y[i] ? y[i] : yd ? '/' : 0;
        if (cx != cy) return cx < cy ? -1 : 1;
        if (!x[i] || !y[i]) return 0; /* the same name twice: cannot happen */
    }
}

/* Read the directory d into level lv: every non-hidden entry named like an
 * image (an item, whatever it turns out to be: a file that cannot be read
 * is a bad item with its reason when fetched) and every other directory
 * (walked); anything else is counted as ignored (and listed while the
 * index keeps the names of ignored files). Sorted (cmp_entry). */
static int read_level(nst_walk *w, DIR *d, nst_level *lv)
{
    nst_index *ix = w->ix;
    const int keep = ix->ignored_paths.count < NST_INDEX_IGNORED_KEEP;
    lv->len = lv->n = 0;
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (!de) {
            if (errno)
                return nst_error(NOSTALL_E_DATASET, "index: %s: cannot read directory: %s",
                                 NST_MSG_PATH(w->p.s), strerror(errno));
            break;
        }
        const char *name = de->d_name;
        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) continue;
        int kind;
        if (name[0] == '.') {
            if (is_dir_at(dirfd(d), de)) continue; /* hidden dirs: not walked */
            kind = ENT_IGNORED;
        } else if (!(ix->flags & NST_INDEX_ANY_NAME) && is_image_name(name)) {
            kind = ENT_ITEM;
        } else if (is_dir_at(dirfd(d), de)) {
            kind = ENT_DIR;
        } else if (ix->flags & NST_INDEX_ANY_NAME) {
            kind = ENT_ITEM;
        } else {
            kind = ENT_IGNORED;
        }
        if (kind == ENT_IGNORED) {
            ix->ignored++;
            if (!keep) continue;
        }
        size_t nlen = strlen(name), need;
        if (nst_add_overflow(lv->len, nlen + 2, &need) ||
            grow((void **)&lv->arena, &lv->cap, need, 1))
            return nst_error(NOSTALL_E_NOMEM, "index: %s: out of memory", NST_MSG_PATH(w->p.s));
        lv->arena[lv->len] = (char)kind;
        memcpy(lv->arena + lv->len + 1, name, nlen + 1);
        lv->len = need;
        lv->n++;
    }
    if (grow((void **)&lv->v, &lv->vcap, lv->n, sizeof *lv->v))
        return nst_error(NOSTALL_E_NOMEM, "index: %s: out of memory", NST_MSG_PATH(w->p.s));
    for (size_t i = 0, off = 0; i < lv->n; i++) {
        lv->v[i] = lv->arena + off + 1;
        off += strlen(lv->v[i]) + 2;
    }
    if (lv->n > 1) qsort(lv->v, lv->n, sizeof *lv->v, cmp_entry);
    return NOSTALL_OK;
}

/* Walk the directory open as `fd` (ours to close), whose path is w->p.s,
 * `depth` levels below the class folder (0), adding its items in order. A
 * directory already walked in this class folder (reached again through a
 * symlink) is not walked again: its items appear once, under the path met
 * first. */
static int walk_dir(nst_walk *w, int fd, int depth)
{
    nst_index *ix = w->ix;
    nst_pathbuf *p = &w->p;
    const size_t at = p->len;
    struct stat st;
    int rc = NOSTALL_OK;

    if (depth > NST_INDEX_MAX_DEPTH) {
        close(fd);
        return nst_error(NOSTALL_E_DATASET, "index: %s: directories nested deeper than %d levels",
                         NST_MSG_PATH(p->s), NST_INDEX_MAX_DEPTH);
    }
    if (fstat(fd, &st) != 0) {
        rc = nst_error(NOSTALL_E_DATASET, "index: %s: %s", NST_MSG_PATH(p->s), strerror(errno));
        close(fd);
        return rc;
    }
    for (int k = 0; k < depth; k++) {
        if (w->dev[k] == st.st_dev && w->ino[k] == st.st_ino) {
            close(fd);
            return nst_error(NOSTALL_E_DATASET,
                             "index: %s: symlink loop (leads back to a directory containing it)",
                             NST_MSG_PATH(p->s));
        }
    }
    int added = dirset_add(&w->seen, (uint64_t)st.st_dev, (uint64_t)st.st_ino);
    if (added <= 0) {
        close(fd);
        if (added < 0)
            return nst_error(NOSTALL_E_NOMEM, "index: %s: out of memory", NST_MSG_PATH(p->s));
        ix->dirs_shared++;
        return NOSTALL_OK;
    }
    ix->dirs_walked++;
    w->dev[depth] = st.st_dev;
    w->ino[depth] = st.st_ino;
    DIR *d = fdopendir(fd);
    if (!d) {
        rc = nst_error(NOSTALL_E_DATASET, "index: %s: cannot open directory: %s",
                       NST_MSG_PATH(p->s), strerror(errno));
        close(fd);
        return rc;
    }
    nst_level *lv = &w->lv[depth];
    if ((rc = read_level(w, d, lv)) < 0) goto out;
    for (size_t i = 0; i < lv->n; i++) {
        const char *name = lv->v[i];
        if (name[-1] == ENT_ITEM) {
            if (index_add(ix, p->s, at, "/", 1, name, strlen(name), w->label)) {
                rc = nst_error(NOSTALL_E_NOMEM, "index: %s: out of memory", NST_MSG_PATH(p->s));
                break;
            }
            continue;
        }
        if (name[-1] == ENT_IGNORED) {
            if (ix->ignored_paths.count < NST_INDEX_IGNORED_KEEP &&
                strtab_add3(&ix->ignored_paths, p->s, at, "/", 1, name, strlen(name))) {
                rc = nst_error(NOSTALL_E_NOMEM, "index: %s: out of memory", NST_MSG_PATH(p->s));
                break;
            }
            continue;
        }
        if (path_push(p, at, name)) {
            p->s[at] = '\0';
            rc = nst_error(NOSTALL_E_NOMEM, "index: %s: out of memory", NST_MSG_PATH(p->s));
            break;
        }
        int cfd = openat(dirfd(d), name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOCTTY);
        if (cfd < 0) {
            rc = nst_error(NOSTALL_E_DATASET, "index: %s: cannot open directory: %s",
                           NST_MSG_PATH(p->s), strerror(errno));
            break;
        }
        rc = walk_dir(w, cfd, depth + 1);
        p->len = at;
        p->s[at] = '\0';
        if (rc < 0) break;
    }
out:
    closedir(d);
    p->len = at;
    p->s[at] = '\0';
    return rc;
}

static int open_error(const char *what, const char *path, int e)
{
    return nst_error(e == EACCES                     ? NOSTALL_E_PERMISSION
                     : (e == ENOENT || e == ENOTDIR) ? NOSTALL_E_NOT_FOUND
                                                     : NOSTALL_E_DATASET,
                     "index: %s: %s%s", NST_MSG_PATH(path), what, strerror(e));
}

static int build_folder(nst_index *ix, const char *root)
{
    int rc = NOSTALL_OK;
    nst_walk *w = NULL;
    nst_strtab names = {0}, stray = {0};
    const char **sorted = NULL, **sstray = NULL;
    DIR *d = NULL;

    if (!(w = calloc(1, sizeof *w))) goto nomem;
    w->ix = ix;
    nst_pathbuf *p = &w->p;
    /* Root as given, minus trailing slashes (but keep "/"). */
    size_t rlen = strlen(root);
    while (rlen > 1 && root[rlen - 1] == '/') rlen--;
    if (grow((void **)&p->s, &p->cap, rlen + 1, 1)) goto nomem;
    memcpy(p->s, root, rlen);
    p->s[rlen] = '\0';
    p->len = rlen;
    size_t rootlen = (rlen == 1 && root[0] == '/') ? 0 : rlen;

    int rfd = open(p->s, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOCTTY);
    if (rfd < 0 || !(d = fdopendir(rfd))) {
        rc = open_error("cannot open directory: ", root, errno);
        if (rfd >= 0) close(rfd);
        goto err;
    }
    /* Class folders: the non-hidden directories at the root. */
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (!de) {
            if (errno) {
                rc = nst_error(NOSTALL_E_DATASET, "index: %s: cannot read directory: %s",
                               NST_MSG_PATH(root), strerror(errno));
                goto err;
            }
            break;
        }
        const char *name = de->d_name;
        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) continue;
        if (!is_dir_at(dirfd(d), de)) {
            ix->ignored++; /* files outside class folders, hidden or not */
            if (strtab_add3(&stray, name, strlen(name), NULL, 0, NULL, 0)) goto nomem;
            continue;
        }
        if (name[0] == '.') continue;
        if (strtab_add3(&names, name, strlen(name), NULL, 0, NULL, 0)) goto nomem;
    }

    if (names.count == 0 && any_tar(&stray)) { /* a folder of shards */
        rc = shard_folder(ix, p->s, rootlen, &stray);
        goto out;
    }
    if (names.count) {
        sorted = strtab_sorted(&names);
        if (!sorted) goto nomem;
    }
    for (size_t c = 0; c < names.count; c++) {
        const char *cname = sorted[c];
        if (strtab_add3(&ix->classes, cname, strlen(cname), NULL, 0, NULL, 0)) goto nomem;
    }
    ix->nclasses = names.count;
    /* Ignored files outside class folders come first in the list of names. */
    if (stray.count) {
        if (!(sstray = strtab_sorted(&stray))) goto nomem;
        for (size_t i = 0; i < stray.count && i < NST_INDEX_IGNORED_KEEP; i++)
            if (strtab_add3(&ix->ignored_paths, p->s, rootlen, "/", 1, sstray[i], strlen(sstray[i])))
                goto nomem;
    }

    for (size_t c = 0; c < ix->nclasses; c++) {
        const char *cname = strtab_get(&ix->classes, c);
        if (path_push(p, rootlen, cname)) goto nomem;
        int cfd = openat(dirfd(d), cname, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOCTTY);
        if (cfd < 0) {
            rc = nst_error(NOSTALL_E_DATASET, "index: %s: cannot open directory: %s",
                           NST_MSG_PATH(p->s), strerror(errno));
            goto err;
        }
        w->label = (int64_t)c;
        dirset_next(&w->seen);
        if ((rc = walk_dir(w, cfd, 0)) < 0) goto err;
    }

    if (ix->items.count == 0 && (ix->flags & NST_INDEX_ANY_NAME)) {
        rc = nst_error(NOSTALL_E_DATASET,
                       "index: %s: no files found (%llu class folders, %llu hidden or "
                       "outside class folders; expected %s/CLASS/NAME)",
                       NST_MSG_PATH(root), (unsigned long long)ix->nclasses,
                       (unsigned long long)ix->ignored, NST_MSG_PATH(root));
        goto err;
    }
    if (ix->items.count == 0) {
        rc = nst_error(NOSTALL_E_DATASET,
                       "index: %s: no images found (%llu class folders, %llu "
                       "files ignored; expected %s/CLASS/NAME.jpg, .jpeg or "
                       ".png)",
                       NST_MSG_PATH(root), (unsigned long long)ix->nclasses,
                       (unsigned long long)ix->ignored, NST_MSG_PATH(root));
        goto err;
    }
    rc = NOSTALL_OK;
    goto out;

nomem:
    rc = nst_error(NOSTALL_E_NOMEM, "index: %s: out of memory", NST_MSG_PATH(root));
err:
out:
    if (d) closedir(d);
    free(sorted);
    free(sstray);
    strtab_free(&names);
    strtab_free(&stray);
    if (w) walk_free(w);
    free(w);
    return rc;
}

/* Parse a label: decimal digits only, value in [0, 2^31). Returns 0, -1
 * when s is not a decimal integer, -2 when it is one but out of range. The
 * range is checked before each step, so no value wraps around (2^64 used to
 * come out as 0). */
static int parse_label(const char *s, int64_t *out)
{
    if (!*s) return -1;
    uint64_t v = 0;
    int big = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return -1;
        const uint64_t d = (uint64_t)(*s - '0');
        if (big || v > (NST_INDEX_LABEL_LIMIT - 1 - d) / 10)
            big = 1;
        else
            v = v * 10 + d;
    }
    if (big) return -2;
    *out = (int64_t)v;
    return 0;
}

/* Locale-free: 'A'-'Z', 'a'-'z'. */
static int ascii_alpha(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }

/* What a source may be, for the messages of a file that is not a list. */
#define NST_SOURCE_KINDS                                                                           \
    "a source is a folder (ImageFolder: one sub-folder of images per class) or a list file "       \
    "(one 'path' or 'path<TAB>label' per line)"

static int build_list(nst_index *ix, const char *list)
{
    int rc = NOSTALL_OK;
    char *line = NULL;
    size_t lcap = 0;
    unsigned long long lineno = 0, first_line[NST_LABEL_MULTI + 1] = {0, 0, 0, 0};
    unsigned long long first_not_multi = 0; /* an int line that cannot join a multi list */
    size_t lkcap = 0;

    /* Directory prefix for relative paths, with its trailing '/'. */
    const char *slash = strrchr(list, '/');
    size_t dlen = slash ? (size_t)(slash - list) + 1 : 0;

    FILE *f = fopen(list, "r");
    if (!f) {
        int e = errno;
        return nst_error(e == EACCES   ? NOSTALL_E_PERMISSION
                         : e == ENOENT ? NOSTALL_E_NOT_FOUND
                                       : NOSTALL_E_DATASET,
                         "index: %s: cannot open list file: %s", NST_MSG_PATH(list), strerror(e));
    }
    ix->is_list = 1;
    const char *mlist = NST_MSG_PATH(list); /* the list, as messages name it */
    /* An image given as the source (a common first try): say so, rather
     * than quote its bytes as a list line. */
    unsigned char head[8];
    size_t hn = fread(head, 1, sizeof head, f);
    const char *image = hn >= 3 && head[0] == 0xFF && head[1] == 0xD8 && head[2] == 0xFF ? "a JPEG"
                        : hn >= 8 && memcmp(head, "\x89PNG\r\n\x1a\n", 8) == 0           ? "a PNG"
                                                                                         : NULL;
    if (image) {
        rc = nst_error(NOSTALL_E_DATASET,
                       "index: %s is %s image, not a list file: " NST_SOURCE_KINDS, mlist, image);
        goto err;
    }
    rewind(f);
    for (;;) {
        errno = 0;
        ssize_t n = getline(&line, &lcap, f);
        if (n < 0) {
            if (ferror(f)) {
                rc = nst_error(NOSTALL_E_DATASET, "index: %s:%llu: read error: %s", mlist,
                               lineno + 1, strerror(errno ? errno : EIO));
                goto err;
            }
            break;
        }
        lineno++;
        size_t len = (size_t)n;
        if (len && line[len - 1] == '\n') line[--len] = '\0';
        if (len && line[len - 1] == '\r') line[--len] = '\0';
        if (len == 0 || line[0] == '#') continue;
        char *tab = strrchr(line, '\t');
        /* a NUL byte: not text (an image, an archive, ...); other control
         * bytes are legal in file names (an ESC in a name is an item) */
        if (strlen(line) != len) {
            rc = nst_error(
                NOSTALL_E_DATASET,
                "index: %s:%llu: binary bytes, not a line of text: is %s a list file? " NST_SOURCE_KINDS,
                mlist, lineno, mlist);
            goto err;
        }
        if (tab == line) {
            rc = nst_error(NOSTALL_E_DATASET,
                           "index: %s:%llu: expected 'path', 'path<TAB>label' or "
                           "'path<TAB>label,label,...', got '%.200s'",
                           mlist, lineno, line);
            goto err;
        }
        int64_t label = 0;
        double flabel = 0;
        int kind = parse_label_column(ix, tab ? tab + 1 : NULL, &label, &flabel);
        if (kind == -3) {
            rc = nst_error(NOSTALL_E_NOMEM, "index: %s:%llu: out of memory", mlist, lineno);
            goto err;
        }
        if (kind < 0) {
            rc = nst_error(NOSTALL_E_DATASET,
                           "index: %s:%llu: label '%.100s' %s (expected an integer in "
                           "(-2^31, 2^31), a finite float, or integers separated by commas)",
                           mlist, lineno, tab + 1, kind == -2 ? "is out of range" : "is malformed");
            goto err;
        }
        if (kind == NST_LABEL_FLOAT) memcpy(&label, &flabel, sizeof label);
        if (grow((void **)&ix->lkind, &lkcap, ix->items.count + 1, 1)) {
            rc = nst_error(NOSTALL_E_NOMEM, "index: %s:%llu: out of memory", mlist, lineno);
            goto err;
        }
        ix->lkind[ix->items.count] = (uint8_t)kind;
        if (!first_line[kind]) first_line[kind] = lineno;
        if (kind == NST_LABEL_INT && (label < 0 || label > UINT32_MAX) && !first_not_multi)
            first_not_multi = lineno;
        if (tab) *tab = '\0';
        size_t plen = tab ? (size_t)(tab - line) : len;
        /* A URL: "scheme://" at the start, the scheme a letter followed by
         * letters, digits, '+', '-' or '.'. Only http(s) can be fetched. */
        const char *sep = strstr(line, "://");
        int is_url = sep != NULL && sep > line && ascii_alpha(line[0]);
        for (const char *c = line; is_url && c < sep; c++)
            if (!ascii_alpha(*c) && !(*c >= '0' && *c <= '9') && *c != '+' && *c != '-' && *c != '.')
                is_url = 0;
        if (is_url && !nst_http_handles(line)) {
            rc = nst_error(NOSTALL_E_DATASET,
                           "index: %s:%llu: unsupported URL scheme '%.*s://' in "
                           "'%.200s' (only http://, https:// and s3:// are fetched)",
                           mlist, lineno, (int)(sep - line < 32 ? sep - line : 32), line, line);
            goto err;
        }
        int verbatim = line[0] == '/' || is_url;
        if (index_add(ix, verbatim ? NULL : list, verbatim ? 0 : dlen, line, plen, NULL, 0, label)) {
            rc = nst_error(NOSTALL_E_NOMEM, "index: %s:%llu: out of memory", mlist, lineno);
            goto err;
        }
    }
    if (ix->items.count == 0) {
        rc = nst_error(NOSTALL_E_DATASET,
                       "index: %s: no images found (the list has no "
                       "'path<TAB>label' lines)",
                       mlist);
        goto err;
    }
    if (!first_line[NST_LABEL_INT] && !first_line[NST_LABEL_FLOAT] && !first_line[NST_LABEL_MULTI]) {
        int shards = 1;
        for (size_t i = 0; shards && i < ix->items.count; i++)
            shards = nst_shard_is_tar(strtab_get(&ix->items, i));
        if (shards) { /* a list of shards: its lines become the shards */
            nst_strtab names = ix->items;
            memset(&ix->items, 0, sizeof ix->items);
            rc = build_shards(ix, list, &names);
            strtab_free(&names);
            goto err;
        }
    }
    rc = settle_labels(ix, mlist, first_line, first_not_multi) < 0 ? NOSTALL_E_DATASET : NOSTALL_OK;
err:
    free(ix->lkind);
    ix->lkind = NULL;
    free(line);
    fclose(f);
    return rc;
}

/* Give back the slack of amortized growth. Failure just keeps the slack. */
static void shrink_to(void **p, size_t *cap, size_t n, size_t size)
{
    if (!*p || n == 0 || n >= *cap) return;
    void *q = realloc(*p, n * size);
    if (q) {
        *p = q;
        *cap = n;
    }
}

static void shrink(nst_index *ix)
{
    nst_strtab *t = &ix->items;
    const size_t n = t->count;
    shrink_to((void **)&t->arena, &t->cap, t->len, 1);
    shrink_to((void **)&t->offs, &t->ocap, n, sizeof *t->offs);
    shrink_to((void **)&ix->labels, &ix->lcap, n, sizeof *ix->labels);
    if (ix->ranges) {
        size_t c = ix->rcap;
        shrink_to((void **)&ix->ranges, &c, n, sizeof *ix->ranges);
        for (int k = 0; k < 2; k++) {
            size_t pc = ix->rcap;
            shrink_to((void **)&ix->part[k], &pc, n, sizeof *ix->part[k]);
        }
        ix->rcap = c;
    }
}


/* ---- tar shards ------------------------------------------------------- */

/* No label (yet): a sample without a .cls in an index that may have labels. */
#define NO_LABEL INT64_MIN

/* Name an ignored sample or region (the first NST_INDEX_IGNORED_KEEP). */
static int note_ignored(nst_index *ix, const char *shard, const char *fmt, ...) NST_PRINTF(3, 4);
static int note_ignored(nst_index *ix, const char *shard, const char *fmt, ...)
{
    ix->ignored++;
    if (ix->ignored_paths.count >= NST_INDEX_IGNORED_KEEP) return 0;
    char what[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return strtab_add3(&ix->ignored_paths, shard, strlen(shard), ": ", 2, what, strlen(what));
}

typedef struct shard_ctx {
    nst_index *ix;
    int labeled; /* some sample has a .cls label */
} shard_ctx;

/* A shard that cannot be used: counted, the first ones named with their
 * reason (`why`; a leading "index: PATH: " is dropped, as the path is
 * kept beside it). -1 out of memory. */
static int note_bad_shard(nst_index *ix, const char *path, int status, const char *why)
{
    if (!ix->bad_shards++) ix->bad_status = status;
    if (ix->bad_shard_paths.count >= NST_INDEX_IGNORED_KEEP) return 0;
    const char *p = why;
    if (!strncmp(p, "index: ", 7)) p += 7;
    const char *mp = NST_MSG_PATH(path);
    const size_t ml = strlen(mp);
    if (!strncmp(p, mp, ml) && !strncmp(p + ml, ": ", 2)) p += ml + 2;
    if (strtab_add3(&ix->bad_shard_paths, path, strlen(path), NULL, 0, NULL, 0)) return -1;
    if (strtab_add3(&ix->bad_shard_why, p, strlen(p), NULL, 0, NULL, 0)) {
        ix->bad_shard_paths.count--;
        return -1;
    }
    return 0;
}

static int bad_shard(void *ctx, size_t k, int status, const char *msg)
{
    shard_ctx *c = ctx;
    nst_index *ix = c->ix;
    const char *sname = strtab_get(&ix->shards, k);
    if (note_bad_shard(ix, sname, status, msg) < 0)
        return nst_error(NOSTALL_E_NOMEM, "index: %s: out of memory", NST_MSG_PATH(sname));
    return 0;
}

static int ensure_ranges(nst_index *ix, size_t need)
{
    if (need <= ix->rcap) return 0;
    size_t cap = ix->rcap, cap2 = ix->rcap;
    if (grow((void **)&ix->ranges, &cap, need, sizeof *ix->ranges)) return -1;
    for (int k = 0; k < 2; k++) {
        if (!ix->part[k]) continue;
        size_t c = cap2;
        if (grow((void **)&ix->part[k], &c, cap, sizeof *ix->part[k])) return -1;
        memset(ix->part[k] + cap2, 0, (cap - cap2) * sizeof *ix->part[k]);
    }
    ix->rcap = cap;
    return 0;
}

/* The sample's member that is its item (see index.h), or -1. */
static int primary_member(const nst_tar_index_rec *r, unsigned flags)
{
    static const int order[] = {NST_EXT_IMAGE, NST_EXT_OTHER, NST_EXT_TXT, NST_EXT_JSON};
    const int kinds = (flags & NST_INDEX_ANY_NAME) ? 4 : 1;
    for (int o = 0; o < kinds; o++)
        for (uint32_t m = 0; m < r->nmembers; m++)
            if (nst_tar_ext_class(r->m[m].ext, r->m[m].ext_len) == order[o]) return (int)m;
    return -1;
}

static int add_sample(nst_index *ix, shard_ctx *c, uint32_t shard, const char *sname,
                      const nst_tar_index_rec *r)
{
    const int pm = primary_member(r, ix->flags);
    if (pm < 0)
        return note_ignored(ix, sname, "%.*s: no %s member", (int)r->key_len, r->key,
                            (ix->flags & NST_INDEX_ANY_NAME) ? "data" : "image (.jpg, .jpeg, .png)");
    const nst_tar_index_member *m = &r->m[pm];
    if (m->size >= ((uint64_t)1 << 32) || m->size == 0)
        return note_ignored(ix, sname, "%.*s.%.*s: %s", (int)r->key_len, r->key, (int)m->ext_len,
                            m->ext, m->size ? "4 GiB or more" : "empty");
    int64_t label = NO_LABEL;
    int has_cls = 0;
    for (uint32_t k = 0; k < r->nmembers; k++) {
        const nst_tar_index_member *x = &r->m[k];
        int cls = nst_tar_ext_class(x->ext, x->ext_len);
        if (cls == NST_EXT_CLS && !has_cls) {
            has_cls = 1;
            if (x->has_label) label = x->label;
        }
    }
    if (has_cls && label == NO_LABEL)
        return note_ignored(ix, sname, "%.*s.cls: not an integer label", (int)r->key_len, r->key);
    /* the shard index keeps labels in (-2^62, 2^62); a job uses (-2^31, 2^31) */
    if (label != NO_LABEL &&
        (label <= -(int64_t)NST_INDEX_LABEL_LIMIT || label >= (int64_t)NST_INDEX_LABEL_LIMIT))
        return note_ignored(ix, sname, "%.*s.cls: label %lld is outside (-2^31, 2^31)",
                            (int)r->key_len, r->key, (long long)label);
    if (label != NO_LABEL) c->labeled = 1;
    const size_t i = ix->items.count;
    if (ensure_ranges(ix, i + 1) ||
        index_add(ix, r->key, r->key_len, ".", 1, m->ext, m->ext_len, label))
        return -1;
    ix->ranges[i] = (nst_range){m->offset, (uint32_t)m->size, shard};
    if (m->size > ix->range_max) ix->range_max = m->size;
    int done[2] = {0, 0};
    for (uint32_t k = 0; k < r->nmembers; k++) {
        const nst_tar_index_member *x = &r->m[k];
        int cls = nst_tar_ext_class(x->ext, x->ext_len);
        int part = cls == NST_EXT_JSON ? NST_PART_JSON : cls == NST_EXT_TXT ? NST_PART_TXT : -1;
        if (part < 0 || done[part] || (int)k == pm || x->size >= ((uint64_t)1 << 32)) continue;
        done[part] = 1;
        if (!ix->part[part]) {
            if (!(ix->part[part] = calloc(ix->rcap, sizeof *ix->part[part]))) return -1;
        }
        ix->part[part][i] = (nst_range){x->offset, (uint32_t)x->size, shard};
    }
    for (int k = 0; k < 2; k++)
        if (ix->part[k] && !done[k]) ix->part[k][i] = (nst_range){0, 0, shard};
    return 0;
}

static int add_shard(void *ctx, size_t k, const uint8_t *file, size_t len)
{
    shard_ctx *c = ctx;
    nst_index *ix = c->ix;
    const char *sname = strtab_get(&ix->shards, k);
    nst_tar_index_reader r;
    nst_tar_index_rec *rec = malloc(sizeof *rec);
    char why[128];
    int rc = 0;
    if (!rec) return nst_error(NOSTALL_E_NOMEM, "index: %s: out of memory", NST_MSG_PATH(sname));
    if (nst_tar_index_open_checked(&r, file, len, why, sizeof why) < 0) goto bad;
    for (;;) {
        int e = nst_tar_index_next(&r, rec, why, sizeof why);
        if (e < 0) goto bad;
        if (e == 0) break;
        if (rec->key) {
            rc = add_sample(ix, c, (uint32_t)k, sname, rec);
        } else {
            ix->damaged++;
            const int cut = rec->dname_len > 200; /* a name over 4096 bytes: its start */
            if (rec->dname_len)
                rc = note_ignored(ix, sname, "%.*s%s: %s (bytes %llu-%llu lost)",
                                  cut ? 200 : (int)rec->dname_len, rec->dname, cut ? "..." : "",
                                  nst_tar_damage_name(rec->code), (unsigned long long)rec->offset,
                                  (unsigned long long)(rec->offset + rec->size - (rec->size > 0)));
            else
                rc = note_ignored(ix, sname, "bytes %llu-%llu: %s (members in it lost)",
                                  (unsigned long long)rec->offset,
                                  (unsigned long long)(rec->offset + rec->size - (rec->size > 0)),
                                  nst_tar_damage_name(rec->code));
        }
        if (rc < 0) {
            rc = nst_error(NOSTALL_E_NOMEM, "index: %s: out of memory", NST_MSG_PATH(sname));
            break;
        }
    }
    free(rec);
    return rc;
bad:
    free(rec);
    return nst_error(NOSTALL_E_DATASET, "index: %s: its index file is malformed: %s",
                     NST_MSG_PATH(sname), why);
}

/* A labeled index keeps only the items with a label: the others are left
 * out, in place (strings move left in the arena, which holds them in
 * item order). */
static int drop_unlabeled(nst_index *ix)
{
    nst_strtab *t = &ix->items;
    size_t j = 0, at = 0;
    for (size_t i = 0; i < t->count; i++) {
        const char *name = t->arena + t->offs[i];
        const size_t n = strlen(name) + 1;
        if (ix->labels[i] == NO_LABEL) {
            if (note_ignored(ix, strtab_get(&ix->shards, ix->ranges[i].shard),
                             "%s: no .cls label (other samples have one)", name) < 0)
                return -1;
            continue;
        }
        memmove(t->arena + at, name, n);
        t->offs[j] = at;
        at += n;
        ix->labels[j] = ix->labels[i];
        ix->ranges[j] = ix->ranges[i];
        for (int k = 0; k < 2; k++)
            if (ix->part[k]) ix->part[k][j] = ix->part[k][i];
        j++;
    }
    t->count = j;
    t->len = at;
    return 0;
}

/* Index the shards named in `names` (their strings; copied) for `source`. */
static int build_shards(nst_index *ix, const char *source, const nst_strtab *names)
{
    const size_t n = names->count;
    const char **v = NULL;
    int rc;
    ix->is_list = 1;
    if (n == 0 && ix->bad_shards)
        return nst_error(ix->bad_status, "index: %s: no usable shard: %s: %s", NST_MSG_PATH(source),
                         NST_MSG_PATH(strtab_get(&ix->bad_shard_paths, 0)),
                         strtab_get(&ix->bad_shard_why, 0));
    if (n == 0) return nst_error(NOSTALL_E_DATASET, "index: %s: no shards", NST_MSG_PATH(source));
    if (n > UINT32_MAX)
        return nst_error(NOSTALL_E_DATASET, "index: %s: too many shards", NST_MSG_PATH(source));
    if (!(v = malloc(n * sizeof *v))) goto nomem;
    for (size_t k = 0; k < n; k++) {
        const char *name = strtab_get(names, k);
        if (strtab_add3(&ix->shards, name, strlen(name), NULL, 0, NULL, 0)) goto nomem;
    }
    for (size_t k = 0; k < n; k++) v[k] = strtab_get(&ix->shards, k);
    shard_ctx c = {.ix = ix};
    if ((rc = nst_shards_index(v, n, &ix->sopts, add_shard, bad_shard, &c, &ix->sstats)) < 0)
        goto out;
    if (c.labeled) {
        if (drop_unlabeled(ix) < 0) goto nomem;
        ix->label_kind = NST_LABEL_INT;
        uint64_t maxl = 0;
        for (size_t i = 0; i < ix->items.count; i++)
            if (ix->labels[i] >= 0 && (uint64_t)ix->labels[i] + 1 > maxl)
                maxl = (uint64_t)ix->labels[i] + 1;
        ix->nclasses = maxl;
    } else {
        ix->label_kind = NST_LABEL_NONE;
        for (size_t i = 0; i < ix->items.count; i++) ix->labels[i] = 0;
    }
    if (ix->items.count == 0 && ix->bad_shards) { /* the first shard's own reason */
        rc = nst_error(ix->bad_status,
                       "index: %s: no usable shard (%llu of %zu could not be indexed); the first: "
                       "%s: %s",
                       NST_MSG_PATH(source), (unsigned long long)ix->bad_shards, n,
                       NST_MSG_PATH(strtab_get(&ix->bad_shard_paths, 0)),
                       strtab_get(&ix->bad_shard_why, 0));
        goto out;
    }
    if (ix->items.count == 0) {
        rc = nst_error(NOSTALL_E_DATASET,
                       "index: %s: no samples found in %zu shard%s (%llu left out, %llu damaged "
                       "regions; expected members KEY.jpg, KEY.jpeg or KEY.png)",
                       NST_MSG_PATH(source), n, n == 1 ? "" : "s", (unsigned long long)ix->ignored,
                       (unsigned long long)ix->damaged);
        goto out;
    }
    if (!(ix->shard_first = malloc((n + 1) * sizeof *ix->shard_first))) goto nomem;
    for (size_t k = 0, i = 0; k <= n; k++) {
        while (i < ix->items.count && ix->ranges[i].shard < k) i++;
        ix->shard_first[k] = i;
    }
    rc = 0;
    goto out;
nomem:
    rc = nst_error(NOSTALL_E_NOMEM, "index: %s: out of memory", NST_MSG_PATH(source));
out:
    free(v);
    return rc;
}

static int add_name(void *ctx, const char *name)
{
    return strtab_add3(ctx, name, strlen(name), NULL, 0, NULL, 0)
               ? nst_error(NOSTALL_E_NOMEM, "index: out of memory")
               : 0;
}

/* A source naming shards itself: a URL or a brace pattern. */
static int build_spec(nst_index *ix, const char *source)
{
    nst_strtab names = {0};
    /* s3://BUCKET/PREFIX/: the .tar objects listed under it */
    int rc = nst_s3_is_url(source) && source[strlen(source) - 1] == '/'
                 ? nst_s3_list_tars(source, add_name, &names, ix->sopts.timeout_ms,
                                    ix->sopts.retries, ix->sopts.verify_tls)
                 : nst_shards_expand(source, add_name, &names);
    for (size_t k = 0; rc == 0 && k < names.count; k++) {
        const char *name = strtab_get(&names, k);
        if (!nst_shard_is_tar(name))
            rc = nst_error(NOSTALL_E_DATASET,
                           "index: %s: '%s' is not a tar shard (a URL or pattern source names "
                           "shards ending in .tar; a list of image URLs goes in a list file)",
                           NST_MSG_PATH(source), NST_MSG_PATH(name));
        else if (nst_http_handles(source) != nst_http_handles(name) ||
                 (strstr(name, "://") && !nst_http_handles(name)))
            rc = nst_error(NOSTALL_E_DATASET,
                           "index: %s: unsupported URL scheme in '%s' (only http://, "
                           "https:// and s3:// are fetched)",
                           NST_MSG_PATH(source), NST_MSG_PATH(name));
    }
    if (rc == 0) rc = build_shards(ix, source, &names);
    strtab_free(&names);
    return rc;
}

/* 1 if `name` ends like a compressed tar (.tar.gz, .tgz, .tar.bz2, .tbz2,
 * .tar.xz, .txz, .tar.zst; any case). */
static int compressed_tar_name(const char *name)
{
    static const char *const ends[] = {".tar.gz", ".tgz", ".tar.bz2", ".tbz2",
                                       ".tar.xz", ".txz", ".tar.zst", ".tar.zstd"};
    const size_t len = strlen(name);
    for (size_t i = 0; i < sizeof ends / sizeof *ends; i++) {
        const size_t el = strlen(ends[i]);
        if (len > el && !strcasecmp(name + len - el, ends[i])) return 1;
    }
    return 0;
}

/* A compressed shard in a shard folder: a bad shard, with what its first
 * bytes are. -1 out of memory. */
static int compressed_shard(nst_index *ix, const char *path)
{
    uint8_t head[8];
    char why[200];
    ssize_t got = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK), e = 0;
    if (fd >= 0) {
        got = pread(fd, head, sizeof head, 0);
        e = errno;
        close(fd);
    } else {
        e = errno;
    }
    const char *z = got > 0 ? nst_shard_compression(head, (size_t)got) : NULL;
    if (got < 0)
        snprintf(why, sizeof why, "a compressed shard that cannot be read: %s", strerror(e));
    else if (z)
        snprintf(why, sizeof why,
                 "%s-compressed: nostall does not read compressed shards (decompress it first)", z);
    else
        snprintf(why, sizeof why,
                 "named like a compressed shard: nostall reads uncompressed .tar shards only");
    return note_bad_shard(ix, path, z ? NOSTALL_E_UNSUPPORTED : NOSTALL_E_DATASET, why);
}

/* A folder with .tar files and no class folder: its shards, sorted. The
 * other files are ignored (named), sidecar index files excepted, and
 * compressed shards (.tar.gz, ...) are bad shards, named with why. */
static int shard_folder(nst_index *ix, const char *root, size_t rootlen, const nst_strtab *stray)
{
    nst_strtab names = {0};
    const char **sorted = strtab_sorted(stray);
    int rc = 0;
    if (!sorted) return nst_error(NOSTALL_E_NOMEM, "index: %s: out of memory", NST_MSG_PATH(root));
    strtab_free(&ix->ignored_paths);
    ix->ignored = 0;
    for (size_t i = 0; i < stray->count && rc == 0; i++) {
        const char *name = sorted[i];
        const size_t len = strlen(name), sl = sizeof NST_TAR_INDEX_SUFFIX - 1;
        if (name[0] != '.' && nst_shard_is_tar(name)) {
            if (strtab_add3(&names, root, rootlen, "/", 1, name, len)) rc = -1;
        } else if (name[0] != '.' && compressed_tar_name(name)) {
            nst_strtab one = {0};
            if (strtab_add3(&one, root, rootlen, "/", 1, name, len) ||
                compressed_shard(ix, strtab_get(&one, 0)) < 0)
                rc = -1;
            strtab_free(&one);
        } else if (!(len > sl && strcmp(name + len - sl, NST_TAR_INDEX_SUFFIX) == 0)) {
            ix->ignored++;
            if (ix->ignored_paths.count < NST_INDEX_IGNORED_KEEP &&
                strtab_add3(&ix->ignored_paths, root, rootlen, "/", 1, name, len))
                rc = -1;
        }
    }
    free(sorted);
    if (rc < 0)
        rc = nst_error(NOSTALL_E_NOMEM, "index: %s: out of memory", NST_MSG_PATH(root));
    else
        rc = build_shards(ix, root, &names);
    strtab_free(&names);
    return rc;
}

static int any_tar(const nst_strtab *t)
{
    for (size_t i = 0; i < t->count; i++) {
        const char *name = strtab_get(t, i);
        if (name[0] != '.' && (nst_shard_is_tar(name) || compressed_tar_name(name))) return 1;
    }
    return 0;
}

int nst_index_build(nst_index **out, const char *source)
{
    return nst_index_build_flags(out, source, 0);
}

int nst_index_build_flags(nst_index **out, const char *source, unsigned flags)
{
    return nst_index_build_opts(out, source, flags, NULL);
}

int nst_index_build_opts(nst_index **out, const char *source, unsigned flags,
                         const nst_shard_opts *shard_opts)
{
    int rc;
    nst_index *ix = NULL;
    if (!out) return nst_error(NOSTALL_E_INVALID, "index: no output given");
    *out = NULL;
    if (!source || !*source) return nst_error(NOSTALL_E_INVALID, "index: no dataset source given");

    ix = calloc(1, sizeof *ix);
    if (!ix) return nst_error(NOSTALL_E_NOMEM, "index: %s: out of memory", NST_MSG_PATH(source));
    ix->flags = flags;
    if (shard_opts)
        ix->sopts = *shard_opts;
    else
        nst_shard_opts_default(&ix->sopts);

    struct stat st;
    if (nst_http_handles(source)) {
        rc = build_spec(ix, source);
    } else if (stat(source, &st) != 0) {
        int e = errno;
        if ((e == ENOENT || e == ENOTDIR) && nst_shard_has_braces(source))
            rc = build_spec(ix, source);
        else
            rc = nst_error(e == EACCES                     ? NOSTALL_E_PERMISSION
                           : (e == ENOENT || e == ENOTDIR) ? NOSTALL_E_NOT_FOUND
                                                           : NOSTALL_E_DATASET,
                           "index: %s: %s", NST_MSG_PATH(source), strerror(e));
    } else if (S_ISDIR(st.st_mode)) {
        rc = build_folder(ix, source);
        if (!ix->ranges) ix->label_kind = NST_LABEL_INT;
    } else if (S_ISREG(st.st_mode) && nst_shard_is_tar(source)) {
        nst_strtab one = {0};
        rc = strtab_add3(&one, source, strlen(source), NULL, 0, NULL, 0)
                 ? nst_error(NOSTALL_E_NOMEM, "index: out of memory")
                 : build_shards(ix, source, &one);
        strtab_free(&one);
    } else if (S_ISREG(st.st_mode)) {
        rc = build_list(ix, source);
        /* s3:// items: the credentials, bucket and region checked once, now */
        for (uint64_t i = 0; rc == 0 && !ix->ranges && i < nst_index_count(ix); i++)
            if (nst_s3_is_url(nst_index_path(ix, i))) {
                rc = nst_s3_probe(nst_index_path(ix, i), ix->sopts.timeout_ms, ix->sopts.retries,
                                  ix->sopts.verify_tls);
                break;
            }
    } else {
        rc = nst_error(NOSTALL_E_DATASET,
                       "index: %s: neither a directory (ImageFolder) nor a "
                       "regular file (list)",
                       NST_MSG_PATH(source));
    }
    if (rc < 0) goto err;
    shrink(ix);
    *out = ix;
    return NOSTALL_OK;
err:
    nst_index_free(ix);
    return rc;
}

int nst_index_from_paths(nst_index **out, const char *const *paths, const int64_t *labels,
                         uint64_t n)
{
    nst_index *ix = calloc(1, sizeof *ix);
    *out = NULL;
    if (!ix) return nst_error(NOSTALL_E_NOMEM, "index: out of memory");
    ix->is_list = 1;
    ix->label_kind = labels ? NST_LABEL_INT : NST_LABEL_NONE;
    for (uint64_t i = 0; i < n; i++) {
        if (index_add(ix, paths[i], strlen(paths[i]), "", 0, "", 0, labels ? labels[i] : 0))
            goto nomem;
        if (labels && labels[i] >= 0 && (uint64_t)labels[i] + 1 > ix->nclasses)
            ix->nclasses = (uint64_t)labels[i] + 1;
    }
    shrink(ix);
    *out = ix;
    return 0;
nomem:
    nst_index_free(ix);
    return nst_error(NOSTALL_E_NOMEM, "index: out of memory");
}

void nst_index_free(nst_index *ix)
{
    if (!ix) return;
    strtab_free(&ix->items);
    strtab_free(&ix->classes);
    strtab_free(&ix->ignored_paths);
    strtab_free(&ix->shards);
    strtab_free(&ix->bad_shard_paths);
    strtab_free(&ix->bad_shard_why);
    free(ix->labels);
    free(ix->multi);
    free(ix->ranges);
    free(ix->part[0]);
    free(ix->part[1]);
    free(ix->shard_first);
    free(ix);
}

uint64_t nst_index_count(const nst_index *ix) { return ix ? ix->items.count : 0; }

const char *nst_index_path(const nst_index *ix, uint64_t i)
{
    if (!ix || i >= ix->items.count) return NULL;
    if (ix->ranges) return strtab_get(&ix->shards, ix->ranges[i].shard);
    return strtab_get(&ix->items, (size_t)i);
}

int nst_index_label_kind(const nst_index *ix) { return ix ? ix->label_kind : NST_LABEL_NONE; }

double nst_index_label_float(const nst_index *ix, uint64_t i)
{
    if (ix->label_kind == NST_LABEL_FLOAT) {
        double d;
        memcpy(&d, &ix->labels[i], sizeof d);
        return d;
    }
    return (double)ix->labels[i];
}

uint32_t nst_index_labels(const nst_index *ix, uint64_t i, const uint32_t **labels)
{
    if (ix->label_kind != NST_LABEL_MULTI) {
        *labels = NULL;
        return 0;
    }
    uint64_t v = (uint64_t)ix->labels[i];
    /* a list whose every label set is empty has no multi array (NULL + 0
     * is undefined; found by fuzz_index) */
    *labels = ix->multi ? ix->multi + (v >> 20) : NULL;
    return (uint32_t)(v & ((1u << 20) - 1));
}

int64_t nst_index_label(const nst_index *ix, uint64_t i)
{
    if (!ix || i >= ix->items.count) return -1;
    return ix->labels[i];
}

uint64_t nst_index_classes(const nst_index *ix) { return ix ? ix->nclasses : 0; }

const char *nst_index_class_name(const nst_index *ix, uint64_t label)
{
    if (!ix || ix->is_list || label >= ix->classes.count) return NULL;
    return strtab_get(&ix->classes, (size_t)label);
}

uint64_t nst_index_ignored(const nst_index *ix) { return ix ? ix->ignored : 0; }

uint64_t nst_index_bad_shards(const nst_index *ix) { return ix ? ix->bad_shards : 0; }

int nst_index_bad_shard(const nst_index *ix, uint64_t i, const char **path, const char **why)
{
    if (!ix || i >= ix->bad_shard_paths.count) return -1;
    *path = strtab_get(&ix->bad_shard_paths, (size_t)i);
    *why = strtab_get(&ix->bad_shard_why, (size_t)i);
    return 0;
}

const char *nst_index_ignored_path(const nst_index *ix, uint64_t i)
{
    if (!ix || i >= ix->ignored_paths.count) return NULL;
    return strtab_get(&ix->ignored_paths, (size_t)i);
}

uint64_t nst_index_dirs_walked(const nst_index *ix) { return ix ? ix->dirs_walked : 0; }

uint64_t nst_index_dirs_shared(const nst_index *ix) { return ix ? ix->dirs_shared : 0; }

/* ---- shards ------------------------------------------------------------ */

int nst_index_range(const nst_index *ix, uint64_t i, uint64_t *offset, uint64_t *length)
{
    if (!ix || !ix->ranges || i >= ix->items.count) return 0;
    *offset = ix->ranges[i].offset;
    *length = ix->ranges[i].length;
    return 1;
}

const char *nst_index_member(const nst_index *ix, uint64_t i)
{
    if (!ix || !ix->ranges || i >= ix->items.count) return NULL;
    return strtab_get(&ix->items, (size_t)i);
}

const char *nst_index_name(const nst_index *ix, uint64_t i, char *buf, size_t n)
{
    if (!n) return buf;
    const char *path = nst_index_path(ix, i);
    if (!path) path = "";
    if (!ix->ranges) {
        snprintf(buf, n, "%s", NST_MSG_PATH(path));
        return buf;
    }
    const nst_range *r = &ix->ranges[i];
    snprintf(buf, n, "%s: %s (bytes %llu-%llu)", NST_MSG_PATH(path),
             strtab_get(&ix->items, (size_t)i), (unsigned long long)r->offset,
             (unsigned long long)(r->offset + r->length - 1));
    return buf;
}

int nst_index_part(const nst_index *ix, uint64_t i, int part, uint64_t *offset, uint64_t *length)
{
    if (!ix || !ix->ranges || i >= ix->items.count || part < 0 || part > 1 || !ix->part[part] ||
        ix->part[part][i].length == 0)
        return 0;
    *offset = ix->part[part][i].offset;
    *length = ix->part[part][i].length;
    return 1;
}

uint64_t nst_index_shards(const nst_index *ix) { return ix && ix->ranges ? ix->shards.count : 0; }

const char *nst_index_shard(const nst_index *ix, uint64_t s)
{
    if (!ix || !ix->ranges || s >= ix->shards.count) return NULL;
    return strtab_get(&ix->shards, (size_t)s);
}

uint64_t nst_index_shard_first(const nst_index *ix, uint64_t s)
{
    if (!ix || !ix->shard_first) return 0;
    if (s > ix->shards.count) s = ix->shards.count;
    return ix->shard_first[s];
}

uint64_t nst_index_shard_of(const nst_index *ix, uint64_t i)
{
    if (!ix || !ix->ranges || i >= ix->items.count) return 0;
    return ix->ranges[i].shard;
}

uint64_t nst_index_range_max(const nst_index *ix) { return ix ? ix->range_max : 0; }

uint64_t nst_index_damaged(const nst_index *ix) { return ix ? ix->damaged : 0; }

void nst_index_shard_stats(const nst_index *ix, nst_shard_stats *out)
{
    if (ix)
        *out = ix->sstats;
    else
        memset(out, 0, sizeof *out);
}

size_t nst_index_bytes(const nst_index *ix)
{
    if (!ix) return 0;
    size_t b = sizeof *ix;
    const nst_strtab *t[] = {&ix->items, &ix->classes, &ix->ignored_paths, &ix->shards};
    for (size_t k = 0; k < sizeof t / sizeof t[0]; k++)
        b += t[k]->cap + t[k]->ocap * sizeof *t[k]->offs;
    b += ix->lcap * sizeof *ix->labels + ix->mcap * sizeof *ix->multi;
    if (ix->ranges) {
        b += ix->rcap * sizeof *ix->ranges;
        for (int k = 0; k < 2; k++)
            if (ix->part[k]) b += ix->rcap * sizeof *ix->part[k];
        b += (ix->shards.count + 1) * sizeof *ix->shard_first;
    }
    return b;
}
