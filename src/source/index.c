/*
 * index.c — builds the dataset index (item paths and labels) from an
 * ImageFolder directory or a `path<TAB>label` list file; see index.h.
 *
 * Design: strings live in "string tables": one growing char arena holding
 * every NUL-terminated string back to back, plus an array of offsets into it
 * (growth is amortized doubling, so building a million-item index makes a
 * few dozen allocations, not one per item). Item labels sit in a parallel
 * int64 array; class names in a second table. Ordering is deterministic and
 * locale-free: names are sorted with strcmp (bytewise, like Python sorted()).
 * For ImageFolder, class folders are listed and sorted first, then each
 * class folder is walked recursively into a scratch table of paths relative
 * to the class folder, which is sorted and appended to the items. Symlinks
 * are followed; a directory that is one of its own ancestors (device and
 * inode compared) is a symlink loop and fails the build, and nesting is
 * limited to NST_INDEX_MAX_DEPTH levels.
 *
 * Every failure frees everything built so far (one cleanup label per
 * function) and returns an NOSTALL_E_* status with a message naming the path.
 *
 * Threads: nst_index_build() runs once, on the thread creating the loader;
 * the finished index is immutable and read by any thread without locks.
 */
#include "source/index.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "common/buf.h"
#include "common/error.h"
#include "source/http.h"

/* Deepest directory nesting followed inside a class folder. */
#define NST_INDEX_MAX_DEPTH 64
/* Labels of list files are in [0, 2^62). */
#define NST_INDEX_MAX_LABEL (1ULL << 62)

/* A string table: NUL-terminated strings back to back in one arena. */
typedef struct nst_strtab {
    char *arena;
    size_t len, cap;  /* bytes used / allocated in arena */
    uint64_t *offs;   /* start of string i in arena      */
    size_t count, ocap;
} nst_strtab;

struct nst_index {
    nst_strtab items;
    int64_t *labels;  /* parallel to items.offs */
    size_t lcap;      /* capacity of labels     */
    nst_strtab classes;
    uint64_t nclasses;
    uint64_t ignored;
    int is_list;
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
static int strtab_add3(nst_strtab *t, const char *a, size_t alen,
                       const char *b, size_t blen, const char *c, size_t clen)
{
    size_t need = t->len;
    if (nst_add_overflow(need, alen, &need) ||
        nst_add_overflow(need, blen, &need) ||
        nst_add_overflow(need, clen, &need) ||
        nst_add_overflow(need, 1, &need))
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

static const char *strtab_get(const nst_strtab *t, size_t i)
{
    return t->arena + t->offs[i];
}

static int cmp_cstr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Pointers to the strings of t, sorted bytewise. NULL when out of memory
 * (or when t is empty: callers check count first). */
static const char **strtab_sorted(const nst_strtab *t)
{
    size_t bytes;
    if (t->count == 0 || nst_mul_overflow(t->count, sizeof(char *), &bytes))
        return NULL;
    const char **v = malloc(bytes);
    if (!v) return NULL;
    for (size_t i = 0; i < t->count; i++) v[i] = strtab_get(t, i);
    qsort(v, t->count, sizeof *v, cmp_cstr);
    return v;
}

/* Append an item with its label. */
static int index_add(nst_index *ix, const char *a, size_t alen, const char *b,
                     size_t blen, const char *c, size_t clen, int64_t label)
{
    if (grow((void **)&ix->labels, &ix->lcap, ix->items.count + 1,
             sizeof *ix->labels) ||
        strtab_add3(&ix->items, a, alen, b, blen, c, clen))
        return -1;
    ix->labels[ix->items.count - 1] = label;
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

enum { KIND_OTHER = 0, KIND_FILE = 1, KIND_DIR = 2 };

/* Kind of the entry `de` whose full path is `path`, following symlinks. */
static int entry_kind(const struct dirent *de, const char *path)
{
#if defined(DT_UNKNOWN) && defined(DT_DIR) && defined(DT_REG)
    if (de->d_type == DT_DIR) return KIND_DIR;
    if (de->d_type == DT_REG) return KIND_FILE;
    if (de->d_type != DT_UNKNOWN && de->d_type != DT_LNK) return KIND_OTHER;
#else
    (void)de;
#endif
    struct stat st;
    if (stat(path, &st) != 0) return KIND_OTHER; /* e.g. a dangling symlink */
    if (S_ISDIR(st.st_mode)) return KIND_DIR;
    if (S_ISREG(st.st_mode)) return KIND_FILE;
    return KIND_OTHER;
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
    if (nst_add_overflow(at, nlen, &need) || nst_add_overflow(need, 2, &need))
        return -1;
    if (grow((void **)&p->s, &p->cap, need, 1)) return -1;
    p->s[at] = '/';
    memcpy(p->s + at + 1, name, nlen + 1);
    p->len = at + 1 + nlen;
    return 0;
}

/* The directories being walked, outermost first, to detect symlink loops. */
typedef struct nst_walk {
    dev_t dev[NST_INDEX_MAX_DEPTH + 1];
    ino_t ino[NST_INDEX_MAX_DEPTH + 1];
} nst_walk;

/* Walk the directory p->s (its first `base` bytes are the class folder; it is
 * `depth` levels deep, the class folder being 0) and add the paths of image
 * files, relative to the class folder, to `rel`. */
static int walk_class(nst_index *ix, nst_pathbuf *p, size_t base,
                      nst_strtab *rel, nst_walk *w, int depth)
{
    int rc = NOSTALL_OK;
    size_t at = p->len;
    struct stat st;
    if (depth > NST_INDEX_MAX_DEPTH)
        return nst_error(NOSTALL_E_DATASET,
                         "index: %s: directories nested deeper than %d levels",
                         p->s, NST_INDEX_MAX_DEPTH);
    if (stat(p->s, &st) != 0)
        return nst_error(NOSTALL_E_DATASET, "index: %s: %s", p->s,
                         strerror(errno));
    for (int k = 0; k < depth; k++) {
        if (w->dev[k] == st.st_dev && w->ino[k] == st.st_ino)
            return nst_error(NOSTALL_E_DATASET,
                             "index: %s: symlink loop (leads back to a "
                             "directory containing it)",
                             p->s);
    }
    w->dev[depth] = st.st_dev;
    w->ino[depth] = st.st_ino;
    DIR *d = opendir(p->s);
    if (!d)
        return nst_error(NOSTALL_E_DATASET, "index: %s: cannot open directory: %s",
                         p->s, strerror(errno));
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (!de) {
            if (errno) {
                p->s[at] = '\0';
                rc = nst_error(NOSTALL_E_DATASET,
                               "index: %s: cannot read directory: %s", p->s,
                               strerror(errno));
            }
            break;
        }
        const char *name = de->d_name;
        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) continue;
        if (path_push(p, at, name)) {
            p->s[at] = '\0';
            rc = nst_error(NOSTALL_E_NOMEM, "index: %s: out of memory", p->s);
            break;
        }
        int kind = entry_kind(de, p->s);
        if (name[0] == '.') {
            if (kind != KIND_DIR) ix->ignored++;
            continue;
        }
        if (kind == KIND_DIR) {
            rc = walk_class(ix, p, base, rel, w, depth + 1);
            if (rc < 0) break;
        } else if (kind == KIND_FILE && is_image_name(name)) {
            /* Path relative to the class folder (skip its '/'). */
            if (strtab_add3(rel, p->s + base + 1, p->len - base - 1, NULL, 0,
                            NULL, 0)) {
                rc = nst_error(NOSTALL_E_NOMEM, "index: %s: out of memory",
                               p->s);
                break;
            }
        } else {
            ix->ignored++;
        }
    }
    closedir(d);
    p->len = at;
    p->s[at] = '\0';
    return rc;
}

static int build_folder(nst_index *ix, const char *root)
{
    int rc = NOSTALL_OK;
    nst_pathbuf p = {0};
    nst_strtab names = {0}, rel = {0};
    const char **sorted = NULL, **srel = NULL;
    DIR *d = NULL;
    nst_walk walk;

    /* Root as given, minus trailing slashes (but keep "/"). */
    size_t rlen = strlen(root);
    while (rlen > 1 && root[rlen - 1] == '/') rlen--;
    if (grow((void **)&p.s, &p.cap, rlen + 1, 1)) goto nomem;
    memcpy(p.s, root, rlen);
    p.s[rlen] = '\0';
    p.len = rlen;
    size_t rootlen = (rlen == 1 && root[0] == '/') ? 0 : rlen;

    d = opendir(p.s);
    if (!d) {
        int e = errno;
        rc = nst_error(e == EACCES ? NOSTALL_E_PERMISSION
                       : e == ENOENT ? NOSTALL_E_NOT_FOUND
                                     : NOSTALL_E_DATASET,
                       "index: %s: cannot open directory: %s", root,
                       strerror(e));
        goto err;
    }
    /* Class folders: the non-hidden directories at the root. */
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (!de) {
            if (errno) {
                rc = nst_error(NOSTALL_E_DATASET,
                               "index: %s: cannot read directory: %s", root,
                               strerror(errno));
                goto err;
            }
            break;
        }
        const char *name = de->d_name;
        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) continue;
        if (path_push(&p, rootlen, name)) goto nomem;
        int kind = entry_kind(de, p.s);
        if (kind != KIND_DIR) {
            ix->ignored++; /* files outside class folders, hidden or not */
            continue;
        }
        if (name[0] == '.') continue;
        if (strtab_add3(&names, name, strlen(name), NULL, 0, NULL, 0))
            goto nomem;
    }
    closedir(d);
    d = NULL;

    if (names.count) {
        sorted = strtab_sorted(&names);
        if (!sorted) goto nomem;
    }
    for (size_t c = 0; c < names.count; c++) {
        const char *cname = sorted[c];
        if (strtab_add3(&ix->classes, cname, strlen(cname), NULL, 0, NULL, 0))
            goto nomem;
    }
    ix->nclasses = names.count;

    for (size_t c = 0; c < ix->nclasses; c++) {
        const char *cname = strtab_get(&ix->classes, c);
        if (path_push(&p, rootlen, cname)) goto nomem;
        size_t base = p.len;
        rel.len = rel.count = 0;
        rc = walk_class(ix, &p, base, &rel, &walk, 0);
        if (rc < 0) goto err;
        if (!rel.count) continue;
        free(srel);
        srel = strtab_sorted(&rel);
        if (!srel) goto nomem;
        for (size_t i = 0; i < rel.count; i++) {
            if (index_add(ix, p.s, base, "/", 1, srel[i], strlen(srel[i]),
                          (int64_t)c))
                goto nomem;
        }
    }

    if (ix->items.count == 0) {
        rc = nst_error(NOSTALL_E_DATASET,
                       "index: %s: no images found (%llu class folders, %llu "
                       "files ignored; expected %s/CLASS/NAME.jpg, .jpeg or "
                       ".png)",
                       root, (unsigned long long)ix->nclasses,
                       (unsigned long long)ix->ignored, root);
        goto err;
    }
    rc = NOSTALL_OK;
    goto out;

nomem:
    rc = nst_error(NOSTALL_E_NOMEM, "index: %s: out of memory", root);
err:
out:
    if (d) closedir(d);
    free(sorted);
    free(srel);
    strtab_free(&names);
    strtab_free(&rel);
    free(p.s);
    return rc;
}

/* Parse a label: decimal digits only, value in [0, 2^62). Returns 0, -1
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
        if (big || v > (NST_INDEX_MAX_LABEL - 1 - d) / 10) big = 1;
        else v = v * 10 + d;
    }
    if (big) return -2;
    *out = (int64_t)v;
    return 0;
}

/* Locale-free: 'A'-'Z', 'a'-'z'. */
static int ascii_alpha(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

static int build_list(nst_index *ix, const char *list)
{
    int rc = NOSTALL_OK;
    char *line = NULL;
    size_t lcap = 0;
    unsigned long long lineno = 0;
    int64_t maxlabel = -1;

    /* Directory prefix for relative paths, with its trailing '/'. */
    const char *slash = strrchr(list, '/');
    size_t dlen = slash ? (size_t)(slash - list) + 1 : 0;

    FILE *f = fopen(list, "r");
    if (!f) {
        int e = errno;
        return nst_error(e == EACCES ? NOSTALL_E_PERMISSION
                         : e == ENOENT ? NOSTALL_E_NOT_FOUND
                                       : NOSTALL_E_DATASET,
                         "index: %s: cannot open list file: %s", list,
                         strerror(e));
    }
    ix->is_list = 1;
    for (;;) {
        errno = 0;
        ssize_t n = getline(&line, &lcap, f);
        if (n < 0) {
            if (ferror(f)) {
                rc = nst_error(NOSTALL_E_DATASET,
                               "index: %s:%llu: read error: %s", list,
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
        if (strlen(line) != len || !tab || tab == line) {
            rc = nst_error(NOSTALL_E_DATASET,
                           "index: %s:%llu: expected 'path<TAB>label', got "
                           "'%.200s'",
                           list, lineno, line);
            goto err;
        }
        int64_t label;
        int lrc = parse_label(tab + 1, &label);
        if (lrc < 0) {
            rc = nst_error(NOSTALL_E_DATASET,
                           "index: %s:%llu: label '%.100s' %s (expected "
                           "'path<TAB>label', the label a decimal integer in "
                           "[0, 2^62))",
                           list, lineno, tab + 1,
                           lrc == -2 ? "is out of range" : "is not a decimal integer");
            goto err;
        }
        *tab = '\0';
        size_t plen = (size_t)(tab - line);
        /* A URL: "scheme://" at the start, the scheme a letter followed by
         * letters, digits, '+', '-' or '.'. Only http(s) can be fetched. */
        const char *sep = strstr(line, "://");
        int is_url = sep != NULL && sep > line && ascii_alpha(line[0]);
        for (const char *c = line; is_url && c < sep; c++)
            if (!ascii_alpha(*c) && !(*c >= '0' && *c <= '9') && *c != '+' &&
                *c != '-' && *c != '.')
                is_url = 0;
        if (is_url && !nst_http_is_url(line)) {
            rc = nst_error(NOSTALL_E_DATASET,
                           "index: %s:%llu: unsupported URL scheme '%.*s://' in "
                           "'%.200s' (only http:// and https:// are fetched)",
                           list, lineno, (int)(sep - line < 32 ? sep - line : 32), line, line);
            goto err;
        }
        int verbatim = line[0] == '/' || is_url;
        if (index_add(ix, verbatim ? NULL : list, verbatim ? 0 : dlen, line,
                      plen, NULL, 0, label)) {
            rc = nst_error(NOSTALL_E_NOMEM, "index: %s:%llu: out of memory",
                           list, lineno);
            goto err;
        }
        if (label > maxlabel) maxlabel = label;
    }
    if (ix->items.count == 0) {
        rc = nst_error(NOSTALL_E_DATASET,
                       "index: %s: no images found (the list has no "
                       "'path<TAB>label' lines)",
                       list);
        goto err;
    }
    ix->nclasses = (uint64_t)(maxlabel + 1);
    rc = NOSTALL_OK;
err:
    free(line);
    fclose(f);
    return rc;
}

/* Give back the slack of amortized growth. Failure just keeps the slack. */
static void shrink(nst_index *ix)
{
    nst_strtab *t = &ix->items;
    if (t->len && t->len < t->cap) {
        char *q = realloc(t->arena, t->len);
        if (q) {
            t->arena = q;
            t->cap = t->len;
        }
    }
}

int nst_index_build(nst_index **out, const char *source)
{
    int rc;
    nst_index *ix = NULL;
    if (!out) return nst_error(NOSTALL_E_INVALID, "index: no output given");
    *out = NULL;
    if (!source || !*source)
        return nst_error(NOSTALL_E_INVALID, "index: no dataset source given");

    struct stat st;
    if (stat(source, &st) != 0) {
        int e = errno;
        return nst_error(e == EACCES ? NOSTALL_E_PERMISSION
                         : (e == ENOENT || e == ENOTDIR) ? NOSTALL_E_NOT_FOUND
                                                         : NOSTALL_E_DATASET,
                         "index: %s: %s", source, strerror(e));
    }
    ix = calloc(1, sizeof *ix);
    if (!ix) return nst_error(NOSTALL_E_NOMEM, "index: %s: out of memory", source);
    if (S_ISDIR(st.st_mode)) {
        rc = build_folder(ix, source);
    } else if (S_ISREG(st.st_mode)) {
        rc = build_list(ix, source);
    } else {
        rc = nst_error(NOSTALL_E_DATASET,
                       "index: %s: neither a directory (ImageFolder) nor a "
                       "regular file (list)",
                       source);
    }
    if (rc < 0) goto err;
    shrink(ix);
    *out = ix;
    return NOSTALL_OK;
err:
    nst_index_free(ix);
    return rc;
}

void nst_index_free(nst_index *ix)
{
    if (!ix) return;
    strtab_free(&ix->items);
    strtab_free(&ix->classes);
    free(ix->labels);
    free(ix);
}

uint64_t nst_index_count(const nst_index *ix) { return ix ? ix->items.count : 0; }

const char *nst_index_path(const nst_index *ix, uint64_t i)
{
    if (!ix || i >= ix->items.count) return NULL;
    return strtab_get(&ix->items, (size_t)i);
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
