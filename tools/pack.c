/*
 * pack.c — `nostall pack SRC DST`: write a dataset as WebDataset tar shards
 * with their sidecar index files; `nostall pack --index SHARD...` writes
 * the index files of existing shards.
 *
 * What it writes (docs/shards.md): DST/PREFIX-000000.tar, -000001.tar, ...
 * each at most --shard-bytes (a sample larger than that gets a shard of
 * its own), and beside each NAME.tar.nstidx (src/dataset/tar.h's format),
 * so the loader indexes a shard without reading it. Samples, in the
 * source's order (or a seeded shuffle with --shuffle):
 *   KEY.jpg / KEY.png   the image (by its magic bytes; other files keep
 *                       their extension, lowercased, or .bin)
 *   KEY.cls             the integer label as decimal text (sources with
 *                       labels: ImageFolder, labeled lists)
 *   KEY.json            COCO: {"image": the image's object, "annotations":
 *                       [its annotation objects, in file order],
 *                       "categories": [every category id, ascending]}
 * KEY is the file's path relative to the source's folder without its
 * extension, dots in its last component turned into '_' (webdataset
 * splits at the first dot), "." and ".." components and leading '/'
 * dropped (a member never climbs out of the folder it is extracted to),
 * made unique with "_N" (N the item's number) when two items would share
 * it. Members are ustar regular files (mode
 * 0444, owner 0, mtime 0; a pax header for a name over ustar's 255 bytes),
 * each padded to 512 bytes, the archive ended by two zero blocks: what
 * Python's tarfile and the webdataset library read.
 *
 * Sources: an ImageFolder or a list file (indexed as the loader indexes
 * them: nostall_dataset), or, with --coco-webdataset, a COCO annotation
 * file (*.json, images under --image-root, default its folder, in id order
 * as task=detect; refused without the flag, since no nostall loader reads
 * COCO shards: they are for the webdataset library). A COCO file_name that
 * leaves the image root (nostall_path_leaves_root: absolute, "..", a symlink
 * out) is refused unless --allow-outside-root, so a downloaded annotation
 * file cannot pack ~/.aws/credentials.
 * URLs are not packed. A file that cannot be read is reported, left out
 * and counted (exit status 1); a JPEG the rewrite (--transcode) keeps as
 * it is or finds damaged is packed unchanged.
 *
 * Threads: --threads readers (default: online CPUs) read (and rewrite)
 * files into a ring of slots in item order; this thread writes them in
 * order, so the shards are the same bytes whatever the thread count. The
 * ring's mutex guards the slots' states and the cursors.
 *
 * Public headers only: the source is read as a nostall_dataset (the
 * loader's own indexing) and written by a nostall_shard_writer (the
 * library's writer of shards and their index format), nostall_dataset.h.
 */
#include "args.h"
#include "commands.h"
#include "rng.h"
#include "util.h"

#include "nostall_dataset.h"

#include <errno.h>
#include <jansson.h>
#include <stddef.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_THREADS 256
#define DEFAULT_SHARD_BYTES (512ULL << 20)

typedef struct pk_opts {
    const char *src, *dst, *prefix, *image_root;
    uint64_t shard_bytes, max_file_bytes, seed;
    long threads;
    int shuffle, transcode, force, quiet, index_only;
    int coco_webdataset, allow_outside_root; /* COCO: write it anyway; read outside the root */
} pk_opts;

/* One item to pack. */
typedef struct pk_item {
    const char *path; /* the file */
    char *key;        /* its sample key (malloc'd) */
    int64_t label;
    int has_label;
    json_t *json; /* COCO: the sample's .json (owned) */
} pk_item;

/* A slot of the ring: the bytes of item `item` once READY. */
enum { SLOT_FREE, SLOT_BUSY, SLOT_READY };
typedef struct pk_slot {
    int state;
    uint64_t item;
    uint8_t *buf, *out; /* the file, the rewrite */
    size_t cap, out_cap;
    const uint8_t *data;
    size_t len;
    int err, transcoded, damaged;
    char msg[512];
} pk_slot;

typedef struct pk_state {
    const pk_opts *o;
    pk_item *items;
    uint64_t n, *order; /* write order: order[k] is the k-th item written */
    pthread_mutex_t mu;
    pthread_cond_t cv; /* any slot's state changed */
    pk_slot *slots;
    uint32_t nslots;
    uint64_t next_read, next_write; /* positions in order[] */
    int stop;
} pk_state;

static int pk_prefix_ok(const tool_arg *a, const char *prefix, const char *v, void *opts)
{
    (void)a, (void)opts;
    if (*v && !strchr(v, '/') && !strchr(v, '{') && !strchr(v, '.')) return 0;
    tool_line(stderr, "%s: --prefix must be a name without '/', '.' or braces (got '%s')", prefix,
              v);
    return -1;
}

static int pk_shuffle_on(const tool_arg *a, const char *prefix, const char *v, void *opts)
{
    (void)a, (void)prefix, (void)v;
    ((pk_opts *)opts)->shuffle = 1;
    return 0;
}

static const tool_arg pk_args[] = {
    {"shard-bytes", TOOL_ARG_SIZE, offsetof(pk_opts, shard_bytes), 10240, 0, NULL, "N",
     "largest shard; a sample larger than that is a shard of its own", NULL, 0, NULL},
    {"prefix", TOOL_ARG_STRING, offsetof(pk_opts, prefix), 0, 0, NULL, "NAME", "shard names",
     pk_prefix_ok, 0, NULL},
    {"shuffle", TOOL_ARG_U64, offsetof(pk_opts, seed), 0, 0, NULL, "SEED",
     "write samples in a random order drawn from SEED (shuffle for streaming reads)", pk_shuffle_on,
     0, "the source's order"},
    {"transcode", TOOL_ARG_FLAG, offsetof(pk_opts, transcode), 0, 0, NULL, NULL,
     "rewrite JPEGs losslessly with restart markers as they are packed (as nostall transcode "
     "does)",
     NULL, 0, NULL},
    {"image-root", TOOL_ARG_STRING, offsetof(pk_opts, image_root), 0, 0, NULL, "DIR",
     "COCO: the images' folder", NULL, 0, "the annotation file's"},
    {"coco-webdataset", TOOL_ARG_FLAG, offsetof(pk_opts, coco_webdataset), 0, 0, NULL, NULL,
     "write a COCO source's shards although nostall's loader does not read them (task=detect "
     "reads the instances JSON and its images): for the webdataset library",
     NULL, 0, NULL},
    {"allow-outside-root", TOOL_ARG_FLAG, offsetof(pk_opts, allow_outside_root), 0, 0, NULL, NULL,
     "COCO: pack file_names that leave the image root (absolute, '..', a symlink out of it; "
     "refused by default)",
     NULL, 0, NULL},
    {"max-file-bytes", TOOL_ARG_SIZE, offsetof(pk_opts, max_file_bytes), 10240, 0, NULL, "N",
     "larger files are left out", NULL, 0, NULL},
    {"threads", TOOL_ARG_INT, offsetof(pk_opts, threads), 1, MAX_THREADS, NULL, "N",
     "files read at once", NULL, 0, "the online CPUs"},
    {"index", TOOL_ARG_FLAG, offsetof(pk_opts, index_only), 0, 0, NULL, NULL,
     "write the index files of the existing tar shards given instead of packing", NULL, 0, NULL},
    {"force", TOOL_ARG_FLAG, offsetof(pk_opts, force), 0, 0, NULL, NULL,
     "write into DST even if it is not empty", NULL, 0, NULL},
    {"quiet", TOOL_ARG_FLAG, offsetof(pk_opts, quiet), 0, 0, NULL, NULL,
     "no progress line (the summary is still printed)", NULL, 0, NULL},
};

static const tool_cmd pk_cmd = {
    .name = "pack",
    .prefix = "pack",
    .usage = "usage: nostall pack SRC DST [options]\n"
             "       nostall pack --index SHARD.tar...\n"
             "Write SRC (an ImageFolder, a file list, or a COCO annotation file *.json) into\n"
             "DST as WebDataset tar shards PREFIX-000000.tar, ... (members KEY.jpg or KEY.png,\n"
             "KEY.cls with the label, KEY.json with a COCO image's annotations), each with its\n"
             "index file NAME.tar.nstidx so the loader indexes it without reading it. DST is\n"
             "then a source: nostall bench DST, or DST/PREFIX-{000000..000009}.tar.\n"
             "With --index, write the index files of existing tar shards (a pass over\n"
             "their headers).\n",
    .positionals = "SRC DST",
    .max_positionals = -1, /* --index takes any number of shards */
    .args = pk_args,
    .nargs = sizeof pk_args / sizeof pk_args[0],
};

/* The options of argv; *npos: the positional arguments, at argv[1..]. */
static int parse_args(int argc, char **argv, pk_opts *o, int *npos)
{
    memset(o, 0, sizeof *o);
    o->prefix = "shard";
    o->shard_bytes = DEFAULT_SHARD_BYTES;
    o->max_file_bytes = 1ULL << 30;
    int n = tool_args_parse(&pk_cmd, argc, argv, o, NULL);
    if (n < 0) return n;
    *npos = n;
    if (o->index_only) {
        if (n == 0) {
            fprintf(stderr, "pack: --index needs shard files (nostall pack --index SHARD.tar...)\n");
            return TOOL_ARGS_ERROR;
        }
        return 0;
    }
    if (n > 2) {
        tool_line(stderr, "pack: unexpected extra argument '%s' (SRC DST expected)", argv[3]);
        return TOOL_ARGS_ERROR;
    }
    o->src = n > 0 ? argv[1] : NULL;
    o->dst = n > 1 ? argv[2] : NULL;
    if (!o->threads) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        o->threads = c < 1 ? 1 : c > MAX_THREADS ? MAX_THREADS : c;
    }
    if (!o->src || !o->dst) {
        fprintf(stderr, "pack: missing %s (usage: nostall pack SRC DST [options]; see --help)\n",
                o->src ? "DST" : "SRC");
        return TOOL_ARGS_ERROR;
    }
    return 0;
}

/* ---- items ------------------------------------------------------------- */

/* The key of a file: its path relative to `root` (when under it) without
 * the extension, dots of the last component turned into '_'. */
static char *make_key(const char *path, const char *root)
{
    size_t rl = root ? strlen(root) : 0;
    while (rl > 1 && root[rl - 1] == '/') rl--;
    const char *rel = path;
    if (rl && !strncmp(path, root, rl) && path[rl] == '/') rel = path + rl + 1;
    /* the member name: no "." or ".." component, no leading '/' (a tar
     * member "../x" would be written outside the folder it is extracted to) */
    char *k = malloc(strlen(rel) + 5);
    if (!k) return NULL;
    char *w = k;
    for (const char *s = rel; *s;) {
        size_t l = strcspn(s, "/");
        if (l && !(l == 1 && s[0] == '.') && !(l == 2 && s[0] == '.' && s[1] == '.')) {
            if (w != k) *w++ = '/';
            memcpy(w, s, l);
            w += l;
        }
        s += l;
        while (*s == '/') s++;
    }
    if (w == k) w += sprintf(k, "item");
    *w = '\0';
    char *base = strrchr(k, '/');
    base = base ? base + 1 : k;
    char *dot = strrchr(base, '.');
    if (dot && dot != base) *dot = '\0';
    for (char *p = base; *p; p++)
        if (*p == '.') *p = '_';
    if (!*base) { /* ".jpg": the name was all extension */
        char *k2 = malloc(strlen(k) + 5);
        if (!k2) return free(k), NULL;
        sprintf(k2, "%sitem", k);
        free(k);
        k = k2;
    }
    return k;
}

/* Keys made unique: a key met before gets "_N". */
static int unique_keys(pk_item *it, uint64_t n)
{
    uint64_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    uint64_t *set = calloc(cap, sizeof *set);
    if (!set) return -1;
    for (uint64_t i = 0; i < n; i++) {
        for (int round = 0; round < 2; round++) {
            uint64_t h = 0;
            nostall_checksum_update(&h, it[i].key, strlen(it[i].key));
            h |= 1;
            uint64_t j = h & (cap - 1);
            int dup = 0;
            while (set[j]) {
                if (set[j] == h) {
                    dup = 1;
                    break;
                }
                j = (j + 1) & (cap - 1);
            }
            if (!dup) {
                set[j] = h;
                break;
            }
            char *k = malloc(strlen(it[i].key) + 24);
            if (!k) return free(set), -1;
            sprintf(k, "%s_%llu", it[i].key, (unsigned long long)i);
            free(it[i].key);
            it[i].key = k;
        }
    }
    free(set);
    return 0;
}

static int load_index(const pk_opts *o, nostall_dataset **dsp, pk_item **out, uint64_t *n)
{
    nostall_dataset *ds;
    if (nostall_dataset_open(&ds, o->src, NULL) < 0) {
        fprintf(stderr, "pack: %s\n", nostall_last_error());
        return -1;
    }
    *dsp = ds;
    uint64_t off, len;
    if (nostall_dataset_count(ds) && nostall_dataset_item(ds, 0, NULL, NULL, &off, &len) == 0 &&
        len) {
        fprintf(stderr, "pack: %s is already tar shards\n", o->src);
        return -1;
    }
    int kind = nostall_dataset_label_kind(ds);
    if (kind == NOSTALL_LABELS_FLOAT || kind == NOSTALL_LABELS_MULTI) {
        fprintf(stderr, "pack: %s has %s labels; a .cls member holds one integer\n", o->src,
                kind == NOSTALL_LABELS_FLOAT ? "float" : "multi-label");
        return -1;
    }
    *n = nostall_dataset_count(ds);
    pk_item *it = calloc(*n, sizeof *it);
    if (!it) return -1;
    *out = it;
    /* keys relative to the folder, or to the list's folder */
    char root[PATH_MAX];
    struct stat st;
    snprintf(root, sizeof root, "%s", o->src);
    if (stat(o->src, &st) == 0 && !S_ISDIR(st.st_mode)) {
        char *slash = strrchr(root, '/');
        if (slash)
            *slash = '\0';
        else
            snprintf(root, sizeof root, ".");
    }
    for (uint64_t i = 0; i < *n; i++) {
        nostall_dataset_item(ds, i, &it[i].path, &it[i].label, NULL, NULL);
        it[i].has_label = kind == NOSTALL_LABELS_INT;
        if (!(it[i].key = make_key(it[i].path, root))) return -1;
    }
    return 0;
}

static int cmp_id(const void *a, const void *b)
{
    json_int_t x = json_integer_value(json_object_get(*(json_t *const *)a, "id"));
    json_int_t y = json_integer_value(json_object_get(*(json_t *const *)b, "id"));
    return x < y ? -1 : x > y;
}

static int cmp_int(const void *a, const void *b)
{
    json_int_t x = *(const json_int_t *)a, y = *(const json_int_t *)b;
    return x < y ? -1 : x > y;
}

/* COCO: images in id order with their annotations. */
static int load_coco(const pk_opts *o, json_t **docp, pk_item **out, uint64_t *n, char **paths)
{
    json_error_t err;
    json_t *doc = json_load_file(o->src, JSON_REJECT_DUPLICATES, &err);
    *docp = doc;
    if (!doc) {
        fprintf(stderr, "pack: %s:%d:%d: %s\n", o->src, err.line, err.column, err.text);
        return -1;
    }
    json_t *images = json_object_get(doc, "images"), *anns = json_object_get(doc, "annotations"),
           *cats = json_object_get(doc, "categories");
    if (!json_is_array(images) || (anns && !json_is_array(anns)) || (cats && !json_is_array(cats))) {
        fprintf(stderr,
                "pack: %s: expected \"images\" (and \"annotations\", \"categories\") arrays\n",
                o->src);
        return -1;
    }
    size_t ni = json_array_size(images), nc = cats ? json_array_size(cats) : 0;
    json_t **sorted = calloc(ni ? ni : 1, sizeof *sorted);
    json_int_t *catids = calloc(nc ? nc : 1, sizeof *catids);
    pk_item *it = calloc(ni ? ni : 1, sizeof *it);
    if (!sorted || !catids || !it) return -1;
    *out = it;
    for (size_t i = 0; i < ni; i++) {
        sorted[i] = json_array_get(images, i);
        if (!json_is_object(sorted[i]) || !json_is_integer(json_object_get(sorted[i], "id")) ||
            !json_is_string(json_object_get(sorted[i], "file_name"))) {
            fprintf(stderr,
                    "pack: %s: images[%zu]: expected an object with an integer id and a file_name\n",
                    o->src, i);
            free(sorted);
            free(catids);
            return -1;
        }
    }
    qsort(sorted, ni, sizeof *sorted, cmp_id);
    char root[PATH_MAX];
    if (o->image_root)
        snprintf(root, sizeof root, "%s", o->image_root);
    else {
        snprintf(root, sizeof root, "%s", o->src);
        char *slash = strrchr(root, '/');
        if (slash)
            *slash = '\0';
        else
            snprintf(root, sizeof root, ".");
    }
    /* every file_name inside the image root, before anything is built */
    for (size_t i = 0; i < ni && !o->allow_outside_root; i++) {
        const char *fn = json_string_value(json_object_get(sorted[i], "file_name"));
        if (nostall_path_leaves_root(root, fn)) {
            fprintf(stderr,
                    "pack: %s: the file_name \"%s\" of image id %lld leaves the image root %s "
                    "(as written, or through a symlink): refused, so that an annotation file "
                    "cannot pack other files; --allow-outside-root packs it\n",
                    o->src, fn, (long long)json_integer_value(json_object_get(sorted[i], "id")),
                    root);
            free(sorted);
            free(catids);
            return -1;
        }
    }
    for (size_t c = 0; c < nc; c++)
        catids[c] = json_integer_value(json_object_get(json_array_get(cats, c), "id"));
    qsort(catids, nc, sizeof *catids, cmp_int);
    json_t *catarr = json_array();
    for (size_t c = 0; c < nc; c++) json_array_append_new(catarr, json_integer(catids[c]));
    /* annotations by image id: each image's sample gets its list */
    json_t *by_id = json_object();
    char idbuf[32];
    for (size_t i = 0; i < ni; i++) {
        json_t *s = json_object();
        json_object_set(s, "image", sorted[i]);
        json_object_set_new(s, "annotations", json_array());
        json_object_set(s, "categories", catarr);
        snprintf(idbuf, sizeof idbuf, "%lld",
                 (long long)json_integer_value(json_object_get(sorted[i], "id")));
        json_object_set_new(by_id, idbuf, s);
    }
    for (size_t a = 0; anns && a < json_array_size(anns); a++) {
        json_t *an = json_array_get(anns, a), *iid = json_object_get(an, "image_id");
        if (!json_is_integer(iid)) continue;
        snprintf(idbuf, sizeof idbuf, "%lld", (long long)json_integer_value(iid));
        json_t *s = json_object_get(by_id, idbuf);
        if (s) json_array_append(json_object_get(s, "annotations"), an);
    }
    size_t total = 0;
    for (size_t i = 0; i < ni; i++)
        total +=
            strlen(root) + 2 + strlen(json_string_value(json_object_get(sorted[i], "file_name")));
    char *arena = malloc(total + 1), *p = arena;
    *paths = arena;
    if (!arena) return -1;
    for (size_t i = 0; i < ni; i++) {
        const char *fn = json_string_value(json_object_get(sorted[i], "file_name"));
        it[i].path = p;
        if (fn[0] == '/')
            p += sprintf(p, "%s", fn) + 1;
        else
            p += sprintf(p, "%s/%s", root, fn) + 1;
        if (!(it[i].key = make_key(fn, NULL))) return -1;
        snprintf(idbuf, sizeof idbuf, "%lld",
                 (long long)json_integer_value(json_object_get(sorted[i], "id")));
        it[i].json = json_incref(json_object_get(by_id, idbuf));
    }
    json_decref(by_id);
    json_decref(catarr);
    free(sorted);
    free(catids);
    *n = ni;
    return 0;
}

/* ---- reading (the ring) ---------------------------------------------------- */

static void read_item(pk_state *s, pk_slot *sl)
{
    const pk_opts *o = s->o;
    const pk_item *it = &s->items[s->order[sl->item]];
    sl->err = sl->transcoded = sl->damaged = 0;
    sl->msg[0] = '\0';
    errno = 0;
    long long len = strstr(it->path, "://")
                        ? (errno = EINVAL, -1)
                        : tool_read_file(it->path, &sl->buf, &sl->cap, (size_t)o->max_file_bytes);
    if (len < 0) {
        sl->err = 1;
        snprintf(sl->msg, sizeof sl->msg, "%s",
                 strstr(it->path, "://") ? "a URL (pack reads local files)"
                 : errno == EFBIG        ? "over --max-file-bytes"
                                         : strerror(errno));
        return;
    }
    sl->data = sl->buf;
    sl->len = (size_t)len;
    if (!o->transcode || len < 3 || sl->buf[0] != 0xFF || sl->buf[1] != 0xD8 || sl->buf[2] != 0xFF)
        return;
    const size_t bound = nostall_transcode_bound((size_t)len);
    if (bound > sl->out_cap) {
        uint8_t *p = bound == SIZE_MAX ? NULL : realloc(sl->out, bound);
        if (!p) return; /* packed as it is */
        sl->out = p;
        sl->out_cap = bound;
    }
    nostall_transcode_result res;
    memset(&res, 0, sizeof res);
    const nostall_transcode_options topt = {.restart_mcus = 1};
    size_t n = 0;
    int rc = nostall_transcode_jpeg(sl->out, sl->out_cap, &n, sl->buf, (size_t)len, &topt,
                                    sizeof topt, &res, sizeof res);
    if (rc == 0 && n > 0) {
        sl->data = sl->out;
        sl->len = n;
        sl->transcoded = 1;
    } else if (rc == NOSTALL_E_CORRUPT || rc == NOSTALL_E_TRUNCATED) {
        sl->damaged = 1;
        snprintf(sl->msg, sizeof sl->msg, "%s", res.message);
    }
}

static void *reader_main(void *arg)
{
    pk_state *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->stop && s->next_read < s->n && s->next_read >= s->next_write + s->nslots)
            pthread_cond_wait(&s->cv, &s->mu);
        if (s->stop || s->next_read >= s->n) break;
        pk_slot *sl = &s->slots[s->next_read % s->nslots];
        sl->item = s->next_read++;
        sl->state = SLOT_BUSY;
        pthread_mutex_unlock(&s->mu);
        read_item(s, sl);
        pthread_mutex_lock(&s->mu);
        sl->state = SLOT_READY;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- writing shards ---------------------------------------------------------- */

static const char *image_ext(const uint8_t *d, size_t n, const char *path)
{
    if (n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF) return "jpg";
    if (n >= 8 && !memcmp(d, "\x89PNG\r\n\x1a\n", 8)) return "png";
    const char *base = strrchr(path, '/');
    const char *dot = strrchr(base ? base + 1 : path, '.');
    return dot && dot[1] ? dot + 1 : "bin";
}

/* Write one sample: image, label, json. 0, or -1 with the reason printed. */
static int write_sample(nostall_shard_writer *w, const pk_item *it, const pk_slot *sl)
{
    char ext[32], cls[32];
    snprintf(ext, sizeof ext, "%s", image_ext(sl->data, sl->len, it->path));
    for (char *p = ext; *p; p++)
        if (*p >= 'A' && *p <= 'Z')
            *p = (char)(*p - 'A' + 'a');
        else if (*p == '/' || *p == '.')
            *p = '_';
    char *js = it->json ? json_dumps(it->json, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    nostall_shard_member m[3] = {{ext, sl->data, sl->len}};
    uint32_t nm = 1;
    if (it->has_label) {
        int cl = snprintf(cls, sizeof cls, "%lld", (long long)it->label);
        m[nm++] = (nostall_shard_member){"cls", cls, (size_t)cl};
    }
    if (js) m[nm++] = (nostall_shard_member){"json", js, strlen(js)};
    int rc = nostall_shard_writer_add(w, it->key, m, nm);
    free(js);
    if (rc < 0) fprintf(stderr, "pack: %s: %s\n", it->path, nostall_last_error());
    return rc < 0 ? -1 : 0;
}

/* ---- the command --------------------------------------------------------------- */

/* --index: the shards at argv[1..n]. */
static int index_shards(int n, char **argv)
{
    int bad = 0;
    for (int i = 1; i <= n; i++) {
        uint64_t samples = 0, damaged = 0;
        if (nostall_shard_index_write(argv[i], &samples, &damaged) < 0) {
            fprintf(stderr, "pack: %s\n", nostall_last_error());
            bad = 1;
            continue;
        }
        tool_line(stdout, "pack: %s.nstidx: %llu samples%s%s", argv[i], (unsigned long long)samples,
                  damaged ? ", damaged regions: " : "", damaged ? "see nostall bench" : "");
    }
    return bad ? 1 : 0;
}

static void shuffle_order(uint64_t *order, uint64_t n, uint64_t seed)
{
    uint64_t x = seed * TOOL_GOLDEN_GAMMA + 0x632BE59BD9B4E019ULL;
    for (uint64_t i = n; i > 1; i--) {
        x = tool_mix64(x);
        uint64_t j = x % i, t = order[i - 1];
        order[i - 1] = order[j];
        order[j] = t;
        x += TOOL_GOLDEN_GAMMA;
    }
}

static int prepare_dst(const pk_opts *o)
{
    struct stat st;
    if (stat(o->dst, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) {
            fprintf(stderr, "pack: '%s' exists and is not a directory\n", o->dst);
            return 2;
        }
        int ne = tool_dir_nonempty(o->dst);
        if (ne < 0) {
            fprintf(stderr, "pack: cannot read '%s': %s\n", o->dst, strerror(errno));
            return 1;
        }
        if (ne && !o->force) {
            fprintf(stderr, "pack: '%s' exists and is not empty (use --force to write into it)\n",
                    o->dst);
            return 2;
        }
    }
    if (tool_mkdir_p(o->dst) != 0) {
        fprintf(stderr, "pack: cannot create '%s': %s\n", o->dst, strerror(errno));
        return 1;
    }
    return 0;
}

static void progress(const nostall_shard_writer *w, uint64_t done, uint64_t n, double t0,
                     double *last, int final)
{
    double t = tool_now_s();
    if (!final && t - *last < 0.1) return;
    *last = t;
    const int width = 30;
    int fill = n ? (int)((double)done / (double)n * width) : width;
    char bar[64];
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
    bar[width] = '\0';
    double mb = (double)nostall_shard_writer_bytes(w) / 1e6;
    const uint64_t shards = nostall_shard_writer_shards(w) + (done < n);
    fprintf(stderr, "\rpack: [%s] %llu/%llu samples, %llu shard%s, %.1f MB, %.0f MB/s", bar,
            (unsigned long long)done, (unsigned long long)n, (unsigned long long)shards,
            shards == 1 ? "" : "s", mb, t > t0 ? mb / (t - t0) : 0.0);
    fflush(stderr);
}

int cmd_pack(int argc, char **argv)
{
    pk_opts o;
    int npos = 0, prc = parse_args(argc, argv, &o, &npos);
    if (prc < 0) return tool_args_status(prc);
    if (o.index_only) return index_shards(npos, argv);
    if (strlen(o.dst) > 3000) {
        fprintf(stderr, "pack: DST path is too long\n");
        return 2;
    }
    const size_t sl = strlen(o.src);
    const int coco = sl > 5 && !strcmp(o.src + sl - 5, ".json");
    if (coco && !o.coco_webdataset) {
        fprintf(stderr,
                "pack: %s is a COCO annotation file: nostall's loader does not read COCO shards "
                "(task=detect reads the instances JSON and its images: nostall bench %s --task "
                "detect); --coco-webdataset writes them anyway, for the webdataset library\n",
                o.src, o.src);
        return 2;
    }
    int rc = prepare_dst(&o);
    if (rc) return rc;

    nostall_dataset *ix = NULL;
    json_t *doc = NULL;
    char *arena = NULL;
    pk_item *items = NULL;
    uint64_t n = 0;
    int lrc = coco ? load_coco(&o, &doc, &items, &n, &arena) : load_index(&o, &ix, &items, &n);
    if (lrc == 0 && unique_keys(items, n) < 0) lrc = -1;
    if (lrc < 0 || n == 0) {
        if (lrc == 0)
            fprintf(stderr, "pack: %s has no items\n", o.src);
        else if (!ix && !doc && !coco)
            fprintf(stderr, "pack: out of memory\n");
        rc = 1;
        goto out;
    }

    pk_state s;
    memset(&s, 0, sizeof s);
    s.o = &o;
    s.items = items;
    s.n = n;
    s.order = malloc(n * sizeof *s.order);
    s.nslots = (uint32_t)(o.threads * 4 < 1024 ? o.threads * 4 : 1024);
    s.slots = calloc(s.nslots, sizeof *s.slots);
    if (!s.order || !s.slots) {
        fprintf(stderr, "pack: out of memory\n");
        free(s.order);
        free(s.slots);
        rc = 1;
        goto out;
    }
    for (uint64_t i = 0; i < n; i++) s.order[i] = i;
    if (o.shuffle) shuffle_order(s.order, n, o.seed);
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.cv, NULL);
    pthread_t tids[MAX_THREADS];
    long started = 0;
    for (; started < o.threads; started++)
        if (pthread_create(&tids[started], NULL, reader_main, &s) != 0) break;

    nostall_shard_writer *w = NULL;
    int failed = 0;
    if (nostall_shard_writer_open(&w, o.dst, o.prefix, o.shard_bytes) < 0) {
        fprintf(stderr, "pack: %s\n", nostall_last_error());
        failed = 1;
    }
    const int show = !o.quiet && isatty(STDERR_FILENO);
    const double t0 = tool_now_s();
    double last = 0;
    uint64_t packed = 0, skipped = 0, transcoded = 0, damaged = 0;
    for (uint64_t k = 0; k < n && !failed; k++) {
        pk_slot *slot = &s.slots[k % s.nslots];
        if (started == 0) { /* no thread: read here */
            slot->item = k;
            read_item(&s, slot);
            slot->state = SLOT_READY;
        }
        pthread_mutex_lock(&s.mu);
        while (!(slot->state == SLOT_READY && slot->item == k)) pthread_cond_wait(&s.cv, &s.mu);
        pthread_mutex_unlock(&s.mu);
        const pk_item *it = &items[s.order[k]];
        if (show && (slot->err || slot->damaged)) fprintf(stderr, "\r\033[K");
        if (slot->err) {
            tool_line(stderr, "pack: cannot read '%s': %s (left out)", it->path, slot->msg);
            skipped++;
        } else {
            if (slot->damaged)
                tool_line(stderr, "pack: %s: damaged JPEG (%s), packed unchanged", it->path,
                          slot->msg);
            if (write_sample(w, it, slot) == 0)
                packed++;
            else
                failed = 1;
            transcoded += (uint64_t)slot->transcoded;
            damaged += (uint64_t)slot->damaged;
        }
        pthread_mutex_lock(&s.mu);
        slot->state = SLOT_FREE;
        s.next_write = k + 1;
        pthread_cond_broadcast(&s.cv);
        pthread_mutex_unlock(&s.mu);
        if (show) progress(w, k + 1, n, t0, &last, 0);
    }
    pthread_mutex_lock(&s.mu);
    s.stop = 1;
    pthread_cond_broadcast(&s.cv);
    pthread_mutex_unlock(&s.mu);
    for (long i = 0; i < started; i++) pthread_join(tids[i], NULL);
    if (show) progress(w, n, n, t0, &last, 1), fprintf(stderr, "\r\033[K");
    const uint64_t nshards = nostall_shard_writer_shards(w) +
                             (w && nostall_shard_writer_bytes(w) > 0 && !failed),
                   nbytes = nostall_shard_writer_bytes(w);
    if (w && nostall_shard_writer_close(w) < 0 && !failed) {
        fprintf(stderr, "pack: %s\n", nostall_last_error());
        failed = 1;
    }
    for (uint32_t i = 0; i < s.nslots; i++) {
        free(s.slots[i].buf);
        free(s.slots[i].out);
    }
    free(s.slots);
    free(s.order);
    pthread_cond_destroy(&s.cv);
    pthread_mutex_destroy(&s.mu);
    double t = tool_now_s() - t0;
    printf("pack: %llu samples in %llu shard%s (%.1f MB) in %.1f s into %s",
           (unsigned long long)packed, (unsigned long long)nshards, nshards == 1 ? "" : "s",
           (double)nbytes / 1e6, t, o.dst);
    if (o.transcode)
        printf("; %llu JPEGs rewritten with restart markers, %llu damaged packed unchanged",
               (unsigned long long)transcoded, (unsigned long long)damaged);
    if (skipped) printf("; %llu files left out (see above)", (unsigned long long)skipped);
    printf("\n");
    rc = failed || skipped ? 1 : 0;
out:
    for (uint64_t i = 0; items && i < n; i++) {
        free(items[i].key);
        json_decref(items[i].json);
    }
    free(items);
    free(arena);
    json_decref(doc);
    nostall_dataset_free(ix);
    return rc;
}
