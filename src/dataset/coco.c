/*
 * coco.c — reading COCO instance annotations (see coco.h for the format,
 * the errors and the repairs).
 * Room: dataset/ (what the items are).
 *
 * DESIGN  One pass over each of the three arrays with jansson's tree:
 * images are collected and sorted by id (duplicates refused), categories
 * sorted by id and numbered, annotations validated member by member (every
 * error names the JSON path) and matched to their image by binary search.
 * Then each kept image's boxes are clipped or dropped, counted per image,
 * and placed by a counting sort that keeps the file's order within an
 * image. The tree is freed before returning; what is kept is flat arrays.
 *
 * Before jansson sees the text, a pre-scan (coco_scan, below) checks its
 * syntax, blanks the values of members nostall does not use and estimates
 * the tree of the rest, so max_annotation_bytes is enforced before any
 * tree is built. Paths are checked against the image root (place_paths):
 * one that leaves it is refused unless allow_outside_root.
 *
 * THREADS  Called at loader create only; nothing static and mutable.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "common/error.h"
#include "dataset/coco.h"
#include "source/reader.h"

/* An image as listed, before sorting. */
typedef struct img_tmp {
    int64_t id;
    const char *file; /* in the JSON tree */
    uint32_t w, h;
    size_t at; /* its position in `images` */
} img_tmp;

/* An annotation, validated: its image (sorted position) and box. */
typedef struct ann_tmp {
    uint64_t pos; /* sorted image position; UINT64_MAX: dropped or unmatched */
    double x, y, w, h;
    float f[4]; /* the clipped box */
    uint32_t label, iscrowd;
} ann_tmp;

typedef struct cat_tmp {
    int64_t id;
    const char *name;
    size_t at;
} cat_tmp;

typedef struct parser {
    const char *file;
    nst_coco *c;
    img_tmp *imgs;
    size_t nimgs;
    cat_tmp *cats;
    size_t ncats;
    ann_tmp *anns;
    size_t nanns;
    uint64_t *kept; /* sorted position -> item index, UINT64_MAX: missing */
} parser;

#define BAD(p, ...) nst_error(NOSTALL_E_DATASET, __VA_ARGS__)

static int cmp_img(const void *a, const void *b)
{
    const img_tmp *x = a, *y = b;
    if (x->id != y->id) return x->id < y->id ? -1 : 1;
    return x->at < y->at ? -1 : x->at > y->at;
}

static int cmp_cat(const void *a, const void *b)
{
    const cat_tmp *x = a, *y = b;
    if (x->id != y->id) return x->id < y->id ? -1 : 1;
    return x->at < y->at ? -1 : x->at > y->at;
}

/* The array member `key` of the top-level object. */
static int top_array(const parser *p, json_t *root, const char *key, json_t **out)
{
    json_t *v = json_object_get(root, key);
    if (!v)
        return BAD(
            p,
            "coco: %s: no \"%s\" member (a COCO instances file has images, annotations and categories)",
            NST_MSG_PATH(p->file), key);
    if (!json_is_array(v))
        return BAD(p, "coco: %s: %s: expected an array", NST_MSG_PATH(p->file), key);
    *out = v;
    return 0;
}

/* Element i of array `arr`, which must be an object. */
static int element(const parser *p, json_t *a, const char *arr, size_t i, json_t **out)
{
    json_t *o = json_array_get(a, i);
    if (!json_is_object(o))
        return BAD(p, "coco: %s: %s[%zu]: expected an object", NST_MSG_PATH(p->file), arr, i);
    *out = o;
    return 0;
}

/* Integer member `key` of arr[i]. */
static int member_int(const parser *p, json_t *o, const char *arr, size_t i, const char *key,
                      int64_t *out)
{
    json_t *v = json_object_get(o, key);
    if (!v) return BAD(p, "coco: %s: %s[%zu].%s: missing", NST_MSG_PATH(p->file), arr, i, key);
    if (!json_is_integer(v))
        return BAD(p, "coco: %s: %s[%zu].%s: expected an integer", NST_MSG_PATH(p->file), arr, i,
                   key);
    *out = (int64_t)json_integer_value(v);
    return 0;
}

/* A width or height: an integer (or a number with an integral value, as
 * some tools write them) in 1..NST_COCO_MAX_SIDE. */
static int member_side(const parser *p, json_t *o, size_t i, const char *key, uint32_t *out)
{
    json_t *v = json_object_get(o, key);
    if (!v) return BAD(p, "coco: %s: images[%zu].%s: missing", NST_MSG_PATH(p->file), i, key);
    double d = json_is_number(v) ? json_number_value(v) : -1;
    if (!json_is_number(v) || !(d >= 1 && d <= NST_COCO_MAX_SIDE) || d != floor(d))
        return BAD(p, "coco: %s: images[%zu].%s: expected an integer in 1..%u",
                   NST_MSG_PATH(p->file), i, key, NST_COCO_MAX_SIDE);
    *out = (uint32_t)d;
    return 0;
}

static int read_images(parser *p, json_t *root)
{
    json_t *a;
    int rc = top_array(p, root, "images", &a);
    if (rc < 0) return rc;
    p->nimgs = json_array_size(a);
    if (p->nimgs == 0) return BAD(p, "coco: %s: images: empty (no items)", NST_MSG_PATH(p->file));
    p->imgs = calloc(p->nimgs, sizeof *p->imgs);
    if (!p->imgs)
        return nst_error(NOSTALL_E_NOMEM, "coco: %s: out of memory", NST_MSG_PATH(p->file));
    for (size_t i = 0; i < p->nimgs; i++) {
        json_t *o = NULL, *f;
        img_tmp *t = &p->imgs[i];
        t->at = i;
        if ((rc = element(p, a, "images", i, &o)) < 0 ||
            (rc = member_int(p, o, "images", i, "id", &t->id)) < 0)
            return rc;
        f = json_object_get(o, "file_name");
        if (!f) return BAD(p, "coco: %s: images[%zu].file_name: missing", NST_MSG_PATH(p->file), i);
        if (!json_is_string(f) || json_string_length(f) == 0)
            return BAD(p, "coco: %s: images[%zu].file_name: expected a non-empty string",
                       NST_MSG_PATH(p->file), i);
        t->file = json_string_value(f);
        if ((rc = member_side(p, o, i, "width", &t->w)) < 0 ||
            (rc = member_side(p, o, i, "height", &t->h)) < 0)
            return rc;
    }
    qsort(p->imgs, p->nimgs, sizeof *p->imgs, cmp_img);
    for (size_t i = 1; i < p->nimgs; i++)
        if (p->imgs[i].id == p->imgs[i - 1].id)
            return BAD(p, "coco: %s: images[%zu].id: %lld is also the id of images[%zu]",
                       NST_MSG_PATH(p->file), p->imgs[i].at, (long long)p->imgs[i].id,
                       p->imgs[i - 1].at);
    return 0;
}

static int read_categories(parser *p, json_t *root)
{
    json_t *a;
    int rc = top_array(p, root, "categories", &a);
    if (rc < 0) return rc;
    p->ncats = json_array_size(a);
    if (p->ncats > UINT32_MAX)
        return BAD(p, "coco: %s: categories: too many", NST_MSG_PATH(p->file));
    p->cats = calloc(p->ncats ? p->ncats : 1, sizeof *p->cats);
    if (!p->cats)
        return nst_error(NOSTALL_E_NOMEM, "coco: %s: out of memory", NST_MSG_PATH(p->file));
    for (size_t i = 0; i < p->ncats; i++) {
        json_t *o = NULL, *n;
        cat_tmp *t = &p->cats[i];
        t->at = i;
        if ((rc = element(p, a, "categories", i, &o)) < 0 ||
            (rc = member_int(p, o, "categories", i, "id", &t->id)) < 0)
            return rc;
        n = json_object_get(o, "name");
        if (n && !json_is_string(n))
            return BAD(p, "coco: %s: categories[%zu].name: expected a string",
                       NST_MSG_PATH(p->file), i);
        t->name = n ? json_string_value(n) : "";
    }
    qsort(p->cats, p->ncats, sizeof *p->cats, cmp_cat);
    for (size_t i = 1; i < p->ncats; i++)
        if (p->cats[i].id == p->cats[i - 1].id)
            return BAD(p, "coco: %s: categories[%zu].id: %lld is also the id of categories[%zu]",
                       NST_MSG_PATH(p->file), p->cats[i].at, (long long)p->cats[i].id,
                       p->cats[i - 1].at);
    return 0;
}

/* Sorted position of image `id`, or UINT64_MAX. */
static uint64_t find_image(const parser *p, int64_t id)
{
    size_t lo = 0, hi = p->nimgs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (p->imgs[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < p->nimgs && p->imgs[lo].id == id ? lo : UINT64_MAX;
}

static int64_t find_category(const parser *p, int64_t id)
{
    size_t lo = 0, hi = p->ncats;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (p->cats[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < p->ncats && p->cats[lo].id == id ? (int64_t)lo : -1;
}

/* One annotation's members, validated into t. */
static int read_annotation(parser *p, json_t *a, size_t i, ann_tmp *t)
{
    json_t *o = NULL, *b, *c;
    int64_t image_id, cat;
    int rc;
    if ((rc = element(p, a, "annotations", i, &o)) < 0 ||
        (rc = member_int(p, o, "annotations", i, "image_id", &image_id)) < 0 ||
        (rc = member_int(p, o, "annotations", i, "category_id", &cat)) < 0)
        return rc;
    b = json_object_get(o, "bbox");
    if (!b) return BAD(p, "coco: %s: annotations[%zu].bbox: missing", NST_MSG_PATH(p->file), i);
    if (!json_is_array(b) || json_array_size(b) != 4)
        return BAD(p, "coco: %s: annotations[%zu].bbox: expected an array of 4 numbers [x, y, w, h]",
                   NST_MSG_PATH(p->file), i);
    double v[4];
    for (size_t k = 0; k < 4; k++) {
        json_t *e = json_array_get(b, k);
        if (!json_is_number(e))
            return BAD(p, "coco: %s: annotations[%zu].bbox[%zu]: expected a number",
                       NST_MSG_PATH(p->file), i, k);
        v[k] = json_number_value(e);
    }
    t->x = v[0], t->y = v[1], t->w = v[2], t->h = v[3];
    c = json_object_get(o, "iscrowd");
    if (!c)
        t->iscrowd = 0;
    else if (json_is_boolean(c))
        t->iscrowd = json_is_true(c);
    else if (json_is_integer(c) && (json_integer_value(c) == 0 || json_integer_value(c) == 1))
        t->iscrowd = (uint32_t)json_integer_value(c);
    else
        return BAD(p, "coco: %s: annotations[%zu].iscrowd: expected 0 or 1", NST_MSG_PATH(p->file),
                   i);
    int64_t label = find_category(p, cat);
    if (label < 0)
        return BAD(p,
                   "coco: %s: annotations[%zu].category_id: %lld is not a category of \"categories\"",
                   NST_MSG_PATH(p->file), i, (long long)cat);
    t->label = (uint32_t)label;
    t->pos = find_image(p, image_id);
    if (t->pos == UINT64_MAX) p->c->parts_unmatched++;
    return 0;
}

static int read_annotations(parser *p, json_t *root)
{
    json_t *a;
    int rc = top_array(p, root, "annotations", &a);
    if (rc < 0) return rc;
    p->nanns = json_array_size(a);
    p->anns = calloc(p->nanns ? p->nanns : 1, sizeof *p->anns);
    if (!p->anns)
        return nst_error(NOSTALL_E_NOMEM, "coco: %s: out of memory", NST_MSG_PATH(p->file));
    for (size_t i = 0; i < p->nanns; i++)
        if ((rc = read_annotation(p, a, i, &p->anns[i])) < 0) return rc;
    return 0;
}

static int is_url(const char *s)
{
    return strncasecmp(s, "http://", 7) == 0 || strncasecmp(s, "https://", 8) == 0;
}

/* A file_name that stands alone: absolute, or a URL. */
static int alone(const char *file) { return file[0] == '/' || is_url(file); }

/* Bytes of root joined with file (os.path.join), without the NUL. */
static size_t join_len(const char *root, size_t rlen, const char *file)
{
    if (alone(file) || rlen == 0) return strlen(file);
    return rlen + (root[rlen - 1] != '/') + strlen(file);
}

static char *join_into(char *dst, const char *root, size_t rlen, const char *file)
{
    if (!alone(file) && rlen) {
        memcpy(dst, root, rlen);
        dst += rlen;
        if (root[rlen - 1] != '/') *dst++ = '/';
    }
    size_t n = strlen(file);
    memcpy(dst, file, n + 1);
    return dst + n + 1;
}

/* The root images are found under: o->image_root, else the folder of
 * `name` ("" when it has none). */
static void image_root(const char *name, const nst_coco_opts *o, const char **root, size_t *rlen)
{
    if (o && o->image_root && o->image_root[0]) {
        *root = o->image_root;
        *rlen = strlen(o->image_root);
        return;
    }
    const char *slash = strrchr(name, '/');
    *root = name;
    *rlen = slash ? (size_t)(slash - name) + (slash == name) : 0;
}

/* 1 when the relative path `rel` climbs above its start ("..", "a/../.."). */
static int climbs(const char *rel)
{
    long depth = 0;
    const char *s = rel;
    while (*s) {
        const char *e = strchr(s, '/');
        size_t l = e ? (size_t)(e - s) : strlen(s);
        if (l == 2 && s[0] == '.' && s[1] == '.') {
            if (--depth < 0) return 1;
        } else if (l && !(l == 1 && s[0] == '.')) {
            depth++;
        }
        s += l;
        while (*s == '/') s++;
    }
    return 0;
}

/* By the text alone: does `file` leave the root (rlen bytes of root)? An
 * absolute file is inside only when it starts with an absolute root. */
static int leaves_as_written(const char *root, size_t rlen, const char *file)
{
    if (file[0] != '/') return climbs(file);
    while (rlen > 1 && root[rlen - 1] == '/') rlen--;
    if (rlen == 0 || root[0] != '/') return 1;
    if (rlen == 1) return climbs(file + 1);
    if (strncmp(file, root, rlen) != 0 || file[rlen] != '/') return 1;
    return climbs(file + rlen + 1);
}

/* Is the resolved path rp the resolved root rr or under it? */
static int resolved_under(const char *rp, const char *rr)
{
    size_t l = strlen(rr);
    if (l == 1) return 1; /* "/" */
    return strncmp(rp, rr, l) == 0 && (rp[l] == '/' || rp[l] == '\0');
}

static int outside_root(const parser *p, size_t i, const char *root, size_t rlen)
{
    return BAD(p,
               "coco: %s: images[%zu].file_name \"%s\" leaves the image root %.*s (as written, "
               "or through a symlink): refused, so that an annotation file cannot make the loader "
               "read other files; allow_outside_root=1 reads it",
               NST_MSG_PATH(p->file), p->imgs[i].at, NST_MSG_PATH(p->imgs[i].file),
               rlen ? (int)rlen : 1, rlen ? root : ".");
}

int nst_coco_leaves_root(const char *root, const char *file)
{
    if (is_url(file)) return 0;
    size_t rlen = strlen(root);
    const int as_written = leaves_as_written(root, rlen, file);
    if (as_written && file[0] != '/') return 1;
    char *path = malloc(join_len(root, rlen, file) + 1);
    if (!path) return 1;
    join_into(path, root, rlen, file);
    char *rp = realpath(path, NULL), *rr = rp ? realpath(rlen ? root : ".", NULL) : NULL;
    int leaves = rp ? !(rr && resolved_under(rp, rr)) : as_written;
    free(rp);
    free(rr);
    free(path);
    return leaves;
}

/* Which images are kept (the file exists, or is not checked), their paths,
 * and the category names: all in one arena. */
static int place_paths(parser *p, const nst_coco_opts *o)
{
    nst_coco *c = p->c;
    const char *root;
    size_t rlen, total = 0, n;
    image_root(p->file, o, &root, &rlen);
    for (size_t i = 0; i < p->nimgs; i++) {
        if (nst_add_overflow(total, join_len(root, rlen, p->imgs[i].file) + 1, &total))
            return nst_error(NOSTALL_E_NOMEM, "coco: %s: out of memory", NST_MSG_PATH(p->file));
    }
    for (size_t k = 0; k < p->ncats; k++) total += strlen(p->cats[k].name) + 1;
    p->kept = malloc(p->nimgs * sizeof *p->kept);
    c->arena_ = malloc(total ? total : 1);
    c->paths = malloc(p->nimgs * sizeof *c->paths);
    c->images = calloc(p->nimgs, sizeof *c->images);
    c->category_ids = malloc((p->ncats ? p->ncats : 1) * sizeof *c->category_ids);
    c->category_names = malloc((p->ncats ? p->ncats : 1) * sizeof *c->category_names);
    if (!p->kept || !c->arena_ || !c->paths || !c->images || !c->category_ids || !c->category_names)
        return nst_error(NOSTALL_E_NOMEM, "coco: %s: out of memory", NST_MSG_PATH(p->file));
    char *w = c->arena_;
    const char *first_missing = NULL;
    const int guard = !(o && o->allow_outside_root), check = o && o->check_files;
    char *rroot = NULL; /* the root resolved, when files are checked */
    if (guard && check && !(rlen && is_url(root))) {
        char *r = malloc(rlen + 2);
        if (!r) return nst_error(NOSTALL_E_NOMEM, "coco: %s: out of memory", NST_MSG_PATH(p->file));
        memcpy(r, rlen ? root : ".", rlen ? rlen : 1);
        r[rlen ? rlen : 1] = '\0';
        rroot = realpath(r, NULL); /* NULL: no root, so nothing is under it */
        free(r);
    }
    int rc = 0;
    n = 0;
    for (size_t i = 0; i < p->nimgs; i++) {
        char *path = w;
        const char *file = p->imgs[i].file;
        w = join_into(w, root, rlen, file);
        const int as_written = guard && !is_url(file) && leaves_as_written(root, rlen, file);
        int missing = 0;
        if (as_written && file[0] != '/') { /* "../x": refused whether it exists or not */
            rc = outside_root(p, i, root, rlen);
            break;
        }
        if (check && !is_url(path)) {
            struct stat st;
            if (!guard) {
                missing = stat(path, &st) != 0 && (errno == ENOENT || errno == ENOTDIR);
            } else {
                char *rp = realpath(path, NULL);
                int err = errno, resolved = rp != NULL;
                int in = resolved && rroot && resolved_under(rp, rroot);
                free(rp);
                missing = !resolved && (err == ENOENT || err == ENOTDIR);
                if (!missing && (resolved ? !in : as_written)) {
                    rc = outside_root(p, i, root, rlen);
                    break;
                }
            }
        } else if (as_written) {
            rc = outside_root(p, i, root, rlen);
            break;
        }
        if (missing) {
            c->items_missing++;
            if (!first_missing) first_missing = path;
            p->kept[i] = UINT64_MAX;
            continue;
        }
        p->kept[i] = n;
        c->paths[n] = path;
        c->images[n].id = p->imgs[i].id;
        c->images[n].width = p->imgs[i].w;
        c->images[n].height = p->imgs[i].h;
        n++;
    }
    free(rroot);
    if (rc < 0) return rc;
    c->nimages = n;
    for (size_t k = 0; k < p->ncats; k++) {
        c->category_ids[k] = p->cats[k].id;
        c->category_names[k] = w;
        size_t l = strlen(p->cats[k].name);
        memcpy(w, p->cats[k].name, l + 1);
        w += l + 1;
    }
    c->ncategories = (uint32_t)p->ncats;
    if (n == 0)
        return BAD(p,
                   "coco: %s: no image left: the files of all %zu images are missing (the first: %s)",
                   NST_MSG_PATH(p->file), p->nimgs, NST_MSG_PATH(first_missing));
    return 0;
}

/* Clip annotation t's box to its image (w x h); 0 dropped, 1 kept. */
static int clip_box(nst_coco *c, ann_tmp *t, uint32_t w, uint32_t h)
{
    double x0 = t->x, y0 = t->y, x1 = t->x + t->w, y1 = t->y + t->h;
    if (!isfinite(x0) || !isfinite(y0) || !isfinite(x1) || !isfinite(y1) || !(t->w > 0) ||
        !(t->h > 0)) {
        c->parts_dropped++;
        return 0;
    }
    int clipped = x0 < 0 || y0 < 0 || x1 > w || y1 > h;
    x0 = x0 < 0 ? 0 : x0;
    y0 = y0 < 0 ? 0 : y0;
    x1 = x1 > w ? w : x1;
    y1 = y1 > h ? h : y1;
    t->f[0] = (float)x0, t->f[1] = (float)y0, t->f[2] = (float)x1, t->f[3] = (float)y1;
    if (!(t->f[2] > t->f[0]) || !(t->f[3] > t->f[1])) { /* outside, or too thin for a float */
        c->parts_dropped++;
        return 0;
    }
    c->parts_clipped += (uint64_t)clipped;
    return 1;
}

/* Boxes of the kept images, clipped, in file order within each image. */
static int place_boxes(parser *p, const nst_coco_opts *o)
{
    nst_coco *c = p->c;
    uint64_t total = 0;
    for (size_t i = 0; i < p->nanns; i++) {
        ann_tmp *t = &p->anns[i];
        if (t->pos == UINT64_MAX) continue;
        uint64_t item = p->kept[t->pos];
        if (item == UINT64_MAX || !clip_box(c, t, c->images[item].width, c->images[item].height)) {
            t->pos = UINT64_MAX;
            continue;
        }
        t->pos = item;
        if (c->images[item].count == UINT32_MAX)
            return BAD(p, "coco: %s: annotations[%zu]: too many boxes for one image",
                       NST_MSG_PATH(p->file), i);
        c->images[item].count++;
        total++;
    }
    c->boxes = malloc((total ? total : 1) * sizeof *c->boxes);
    if (!c->boxes)
        return nst_error(NOSTALL_E_NOMEM, "coco: %s: out of memory", NST_MSG_PATH(p->file));
    c->nboxes = total;
    uint64_t first = 0;
    for (uint64_t k = 0; k < c->nimages; k++) {
        nst_coco_image *im = &c->images[k];
        im->first = first;
        first += im->count;
        if (im->count > c->max_count) c->max_count = im->count;
        if (o && o->max_boxes && im->count > o->max_boxes) c->items_truncated++;
        im->count = 0; /* refilled below */
    }
    for (size_t i = 0; i < p->nanns; i++) {
        const ann_tmp *t = &p->anns[i];
        if (t->pos == UINT64_MAX) continue;
        nst_coco_image *im = &c->images[t->pos];
        c->boxes[im->first + im->count++] = (nst_coco_box){.x0 = t->f[0],
                                                           .y0 = t->f[1],
                                                           .x1 = t->f[2],
                                                           .y1 = t->f[3],
                                                           .label = t->label,
                                                           .iscrowd = t->iscrowd};
    }
    return 0;
}

static int parse_root(nst_coco **out, json_t *root, const char *name, const nst_coco_opts *o)
{
    parser p = {.file = name};
    int rc;
    *out = NULL;
    if (!json_is_object(root))
        return nst_error(NOSTALL_E_DATASET,
                         "coco: %s: the top level is not an object (a COCO instances file is)",
                         NST_MSG_PATH(name));
    p.c = calloc(1, sizeof *p.c);
    if (!p.c) return nst_error(NOSTALL_E_NOMEM, "coco: %s: out of memory", NST_MSG_PATH(name));
    if ((rc = read_images(&p, root)) == 0 && (rc = read_categories(&p, root)) == 0 &&
        (rc = read_annotations(&p, root)) == 0 && (rc = place_paths(&p, o)) == 0)
        rc = place_boxes(&p, o);
    free(p.imgs);
    free(p.cats);
    free(p.anns);
    free(p.kept);
    if (rc < 0) {
        nst_coco_free(p.c);
        return rc;
    }
    *out = p.c;
    return 0;
}

/* ---- the pre-scan ----------------------------------------------------------
 *
 * jansson has no way to skip a member: it builds every value, about 230
 * bytes for an empty object in an array, so 20 MB of {} in an ignored
 * member took 1.5 GB. coco_scan walks the text once first (a JSON grammar as strict
 * as jansson's: numbers, literals, escapes, UTF-8, depth), replaces each
 * value nostall does not use by "0" followed by its newlines and one space
 * per other character (so jansson's lines and columns are unchanged), and
 * sums an estimate of the tree jansson builds of the rest. On a syntax
 * error it stops there, leaves the text as it is up to a little past the
 * token there and cuts it, so jansson describes the error as it would have
 * (and builds no more than what the estimate counted). Duplicate keys inside a skipped value
 * are not checked (jansson would refuse them). */

enum { SCAN_MAX_DEPTH = JSON_PARSER_MAX_DEPTH, SCAN_SLACK = 256 };

/* Estimated bytes of jansson's tree (json_t structs, hashtables, array
 * slots, malloc's overhead; measured on glibc, rounded up). */
enum {
    EST_VALUE = 48,   /* any value */
    EST_OBJECT = 176, /* an object's hashtable, beyond its value */
    EST_MEMBER = 80,  /* a member's pair, beyond the key's bytes */
    EST_ARRAY = 32,   /* an array's table, beyond its value */
    EST_ELEMENT = 16, /* an array slot, doubled as it grows */
};

/* Where a value sits, which says what is kept of it. */
enum { K_ALL, K_IN, K_SKIP, K_ROOT, K_IMAGES, K_ANNS, K_CATS, K_IMAGE, K_ANN, K_CAT };

typedef struct scan {
    char *b;
    size_t n, i;  /* the text, its length, the read position */
    size_t w, at; /* bytes [0, w) are written; input before `at` is placed */
    uint64_t est; /* estimated bytes of the tree */
    int bad;      /* a syntax error at i */
    /* the last skipped value, [pa, pb), blanked only once something follows
     * it: jansson names the token before an error ("near '1'") */
    size_t pa, pb;
    uint64_t pest; /* its estimate, had it been kept */
    int pending;
} scan;

static int scan_bad(scan *s)
{
    s->bad = 1;
    return -1;
}

static void scan_ws(scan *s)
{
    while (s->i < s->n &&
           (s->b[s->i] == ' ' || s->b[s->i] == '\t' || s->b[s->i] == '\n' || s->b[s->i] == '\r'))
        s->i++;
}

/* After a number or a literal, jansson's reader puts back the byte that
 * ended it, and a NUL put back is lost: one NUL there is dropped. */
static void scan_unget(scan *s)
{
    if (s->i < s->n && s->b[s->i] == '\0') s->i++;
}

static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

static int hex4(const unsigned char *b, size_t n, size_t i, unsigned *out)
{
    unsigned v = 0;
    if (i + 4 > n) return -1;
    for (size_t k = i; k < i + 4; k++) {
        unsigned c = b[k];
        unsigned d = is_digit((unsigned char)c)           ? c - '0'
                     : (c | 32) >= 'a' && (c | 32) <= 'f' ? (c | 32) - 'a' + 10
                                                          : 16u;
        if (d > 15) return -1;
        v = v * 16 + d;
    }
    *out = v;
    return 0;
}

/* Bytes of the valid UTF-8 character at b (not ASCII), 0 if invalid: no
 * overlong form, surrogate or code point past U+10FFFF (jansson's rules). */
static size_t utf8_len(const unsigned char *b, size_t n)
{
    unsigned c = b[0], u;
    size_t len;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2, u = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF)
        len = 3, u = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4)
        len = 4, u = c & 0x07;
    else
        return 0;
    if (len > n) return 0;
    for (size_t k = 1; k < len; k++) {
        if ((b[k] & 0xC0) != 0x80) return 0;
        u = (u << 6) | (b[k] & 0x3F);
    }
    if ((len == 3 && u < 0x800) || (len == 4 && u < 0x10000) || (u >= 0xD800 && u <= 0xDFFF) ||
        u > 0x10FFFF)
        return 0;
    return len;
}

/* A string at s->i (its '"'). */
static int scan_string(scan *s)
{
    const unsigned char *b = (const unsigned char *)s->b;
    size_t i = s->i + 1;
    int late = 0; /* a \u jansson refuses only once the string's end is found */
    for (;;) {
        if (i >= s->n) return s->i = i, scan_bad(s);
        unsigned c = b[i];
        if (c == '"') break;
        if (c < 0x20) return s->i = i, scan_bad(s);
        if (c == '\\') {
            if (++i >= s->n) return s->i = i, scan_bad(s);
            c = b[i];
            if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' ||
                c == 't') {
                i++;
                continue;
            }
            unsigned u, lo;
            if (c != 'u' || hex4(b, s->n, i + 1, &u) < 0) return s->i = i, scan_bad(s);
            i += 5;
            if (u == 0 || (u >= 0xDC00 && u <= 0xDFFF))
                late = 1;
            else if (u >= 0xD800 && u <= 0xDBFF) {
                if (i + 1 >= s->n || b[i] != '\\' || b[i + 1] != 'u' ||
                    hex4(b, s->n, i + 2, &lo) < 0 || lo < 0xDC00 || lo > 0xDFFF)
                    late = 1; /* the next \u is scanned on its own */
                else
                    i += 6;
            }
            continue;
        }
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len = utf8_len(b + i, s->n - i);
        if (!len) return s->i = i, scan_bad(s);
        i += len;
    }
    if (late) return scan_bad(s); /* at the string: jansson reports it at its end */
    s->est += EST_VALUE + (i - s->i);
    s->i = i + 1;
    return 0;
}

/* A number at s->i, refused where jansson refuses it (an integer outside
 * json_int_t, a real that overflows). */
static int scan_number(scan *s)
{
    const unsigned char *b = (const unsigned char *)s->b;
    size_t i = s->i, st = i;
    int real = 0;
    if (b[i] == '-') i++;
    if (i < s->n && b[i] == '0')
        i++;
    else if (i < s->n && b[i] >= '1' && b[i] <= '9')
        while (i < s->n && is_digit(b[i])) i++;
    else
        return s->i = i, scan_bad(s);
    if (i < s->n && b[i] == '.') {
        real = 1;
        if (++i >= s->n || !is_digit(b[i])) return s->i = i, scan_bad(s);
        while (i < s->n && is_digit(b[i])) i++;
    }
    if (i < s->n && (b[i] == 'e' || b[i] == 'E')) {
        real = 1;
        if (++i < s->n && (b[i] == '+' || b[i] == '-')) i++;
        if (i >= s->n || !is_digit(b[i])) return s->i = i, scan_bad(s);
        while (i < s->n && is_digit(b[i])) i++;
    }
    size_t len = i - st;
    char small[64], *t = len < sizeof small ? small : malloc(len + 1);
    if (!t) return s->i = st, scan_bad(s); /* jansson will say what it can */
    memcpy(t, b + st, len);
    t[len] = '\0';
    errno = 0;
    int ok;
    if (real) {
        double v = strtod(t, NULL);
        ok = !(errno == ERANGE && isinf(v));
    } else {
        (void)strtoll(t, NULL, 10);
        ok = errno != ERANGE;
    }
    if (t != small) free(t);
    if (!ok) return s->i = st, scan_bad(s);
    s->est += EST_VALUE;
    s->i = i;
    scan_unget(s);
    return 0;
}

/* What is kept of member `key` (klen bytes, as written) of an object of kind k. */
static int member_kind(int k, const char *key, size_t klen)
{
#define IS(word) (klen == sizeof(word) - 1 && memcmp(key, word, klen) == 0)
    if (k == K_IN) return K_IN;
    if (memchr(key, '\\', klen)) return K_ALL; /* an escaped key: jansson decides */
    switch (k) {
    case K_ROOT:
        return IS("images")        ? K_IMAGES
               : IS("annotations") ? K_ANNS
               : IS("categories")  ? K_CATS
                                   : K_SKIP;
    case K_IMAGE:
        return IS("id") || IS("file_name") || IS("width") || IS("height") ? K_ALL : K_SKIP;
    case K_ANN:
        return IS("image_id") || IS("category_id") || IS("bbox") || IS("iscrowd") ? K_ALL : K_SKIP;
    case K_CAT: return IS("id") || IS("name") ? K_ALL : K_SKIP;
    default: return K_ALL;
    }
#undef IS
}

static int element_kind(int k)
{
    return k == K_IN       ? K_IN
           : k == K_IMAGES ? K_IMAGE
           : k == K_ANNS   ? K_ANN
           : k == K_CATS   ? K_CAT
                           : K_ALL;
}

/* Input [a, b) replaced by "0", its newlines, a space per other character. */
static void scan_blank(scan *s, size_t a, size_t b)
{
    memmove(s->b + s->w, s->b + s->at, a - s->at);
    s->w += a - s->at;
    char *o = s->b + s->w;
    *o++ = '0';
    for (size_t k = a + 1; k < b; k++) {
        unsigned char c = (unsigned char)s->b[k];
        if (c == '\n')
            *o++ = '\n';
        else if ((c & 0xC0) != 0x80)
            *o++ = ' ';
    }
    s->w = (size_t)(o - s->b);
    s->at = b;
}

static int scan_value(scan *s, int kind, int depth);

/* A member's or an element's value: skipped (blanked) or scanned. */
static int scan_child(scan *s, int kind, int depth)
{
    if (kind != K_SKIP) return scan_value(s, kind, depth);
    scan_ws(s);
    size_t a = s->i;
    uint64_t est = s->est;
    if (scan_value(s, K_IN, depth) < 0) return -1; /* jansson builds what was counted */
    if (s->pending) scan_blank(s, s->pa, s->pb);
    s->pa = a, s->pb = s->i, s->pest = s->est - est, s->pending = 1;
    s->est = est + EST_VALUE;
    return 0;
}

static int scan_value(scan *s, int kind, int depth)
{
    scan_ws(s);
    if (s->i >= s->n) return scan_bad(s);
    char c = s->b[s->i];
    if (c == '{' || c == '[') {
        const char close = c == '{' ? '}' : ']';
        if (depth >= SCAN_MAX_DEPTH) return scan_bad(s);
        s->est += EST_VALUE + (c == '{' ? EST_OBJECT : EST_ARRAY);
        s->i++;
        scan_ws(s);
        if (s->i < s->n && s->b[s->i] == close) {
            s->i++;
            return 0;
        }
        for (;;) {
            int ck;
            if (c == '{') {
                scan_ws(s);
                if (s->i >= s->n || s->b[s->i] != '"') return scan_bad(s);
                size_t k0 = s->i;
                if (scan_string(s) < 0) return -1;
                ck = member_kind(kind, s->b + k0 + 1, s->i - k0 - 2);
                s->est += EST_MEMBER;
                scan_ws(s);
                if (s->i >= s->n || s->b[s->i] != ':') return scan_bad(s);
                s->i++;
            } else {
                ck = element_kind(kind);
                s->est += EST_ELEMENT;
            }
            if (scan_child(s, ck, depth + 1) < 0) return -1;
            scan_ws(s);
            if (s->i < s->n && s->b[s->i] == ',') {
                s->i++;
                continue;
            }
            if (s->i < s->n && s->b[s->i] == close) {
                s->i++;
                return 0;
            }
            return scan_bad(s);
        }
    }
    if (c == '"') return scan_string(s);
    if (c == '-' || is_digit((unsigned char)c)) return scan_number(s);
    static const char *const words[] = {"true", "false", "null"};
    for (size_t k = 0; k < 3; k++) {
        size_t l = strlen(words[k]);
        if (s->n - s->i >= l && memcmp(s->b + s->i, words[k], l) == 0) {
            s->i += l;
            s->est += EST_VALUE;
            scan_unget(s);
            return 0;
        }
    }
    return scan_bad(s);
}

/* Where the token at i ends: jansson reads a whole token (a string to its
 * closing quote) before it reports an error at the token's end. */
static size_t token_end(const char *b, size_t n, size_t i)
{
    if (i >= n) return n;
    if (b[i] == '"') {
        for (size_t k = i + 1; k < n; k++) {
            if (b[k] == '"') return k + 1;
            if (b[k] == '\\') k++;
        }
        return n;
    }
    size_t k = i + 1;
    while (k < n &&
           (is_digit((unsigned char)b[k]) || (unsigned)(((unsigned char)b[k] | 32) - 'a') < 26u ||
            b[k] == '-' || b[k] == '+' || b[k] == '.'))
        k++;
    return k;
}

/* Pre-scan b (n bytes, rewritten in place): the length to parse, the
 * estimate in *est; *bad when the scan found a syntax error. */
static size_t coco_scan(char *b, size_t n, uint64_t *est, int *bad)
{
    scan s = {.b = b, .n = n};
    if (scan_value(&s, K_ROOT, 0) == 0) {
        scan_ws(&s);
        if (s.i < n) s.bad = 1; /* jansson: "end of file expected" */
    }
    size_t end = n;
    if (s.bad) {
        end = token_end(b, n, s.i);
        end = n - end > SCAN_SLACK ? end + SCAN_SLACK : n;
        if (s.pending) s.est += s.pest - EST_VALUE; /* left as it is: jansson builds it */
    } else if (s.pending) {
        scan_blank(&s, s.pa, s.pb);
    }
    memmove(b + s.w, b + s.at, end - s.at);
    *est = s.est;
    *bad = s.bad;
    return s.w + (end - s.at);
}

static int syntax_error(const char *name, const json_error_t *e)
{
    if (!e->text[0]) /* jansson out of memory: its message is empty */
        return nst_error(NOSTALL_E_NOMEM,
                         "coco: %s: out of memory while jansson built the JSON tree (lower "
                         "max_annotation_bytes to fail early, or free memory)",
                         NST_MSG_PATH(name));
    if (e->line > 0)
        return nst_error(NOSTALL_E_DATASET, "coco: %s:%d:%d: JSON syntax error: %s",
                         NST_MSG_PATH(name), e->line, e->column, e->text);
    return nst_error(NOSTALL_E_DATASET, "coco: %s: JSON: %s", NST_MSG_PATH(name), e->text);
}

enum { COCO_JSON_FLAGS = JSON_REJECT_DUPLICATES };

static int over_limit(const char *name, uint64_t file, uint64_t tree, const nst_coco_opts *o)
{
    if (!tree)
        return nst_error(NOSTALL_E_DATASET,
                         "coco: %s: the file is %llu bytes or more, over max_annotation_bytes=%llu "
                         "(raise it if the file is genuine)",
                         NST_MSG_PATH(name), (unsigned long long)file,
                         (unsigned long long)o->max_bytes);
    return nst_error(NOSTALL_E_DATASET,
                     "coco: %s: reading it takes about %llu bytes (the file's %llu and about %llu "
                     "for the JSON tree of the members nostall uses), over "
                     "max_annotation_bytes=%llu (raise it if the file is genuine)",
                     NST_MSG_PATH(name), (unsigned long long)(file + tree), (unsigned long long)file,
                     (unsigned long long)tree, (unsigned long long)o->max_bytes);
}

/* Parse buf (len bytes, ours: the pre-scan rewrites it). */
static int load_owned(nst_coco **out, char *buf, size_t len, const char *name,
                      const nst_coco_opts *o)
{
    json_error_t e;
    uint64_t est;
    int bad;
    size_t m = coco_scan(buf, len, &est, &bad);
    if (o && o->max_bytes && (uint64_t)len + est > o->max_bytes)
        return over_limit(name, len, est, o);
    json_t *root = json_loadb(buf, m, COCO_JSON_FLAGS, &e);
    if (!root) return syntax_error(name, &e);
    int rc = parse_root(out, root, name, o);
    json_decref(root);
    return rc;
}

int nst_coco_load_buffer(nst_coco **out, const char *data, size_t len, const char *name,
                         const nst_coco_opts *o)
{
    *out = NULL;
    if (o && o->max_bytes && len > o->max_bytes) return over_limit(name, len, 0, o);
    char *buf = malloc(len ? len : 1);
    if (!buf) return nst_error(NOSTALL_E_NOMEM, "coco: %s: out of memory", NST_MSG_PATH(name));
    memcpy(buf, data, len);
    int rc = load_owned(out, buf, len, name, o);
    free(buf);
    return rc;
}

static int has_suffix(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcasecmp(s + a - b, suf) == 0;
}

/* The folder `dir` stands for the one instances*.json in it: its path in
 * *file (malloc'd), or an error saying what the folder holds instead. */
static int instances_in(const char *dir, char **file)
{
    DIR *d = opendir(dir);
    if (!d) return nst_error(NOSTALL_E_DATASET, "coco: %s: %s", NST_MSG_PATH(dir), strerror(errno));
    char first[256] = "", second[256] = "";
    size_t found = 0, shards = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "instances", 9) == 0 && has_suffix(e->d_name, ".json")) {
            snprintf(found ? second : first, sizeof first, "%s", e->d_name);
            found++;
        } else if (has_suffix(e->d_name, ".tar") || has_suffix(e->d_name, ".nstidx")) {
            shards++;
        }
    }
    closedir(d);
    if (found == 1) {
        size_t l = strlen(dir);
        *file = malloc(l + strlen(first) + 2);
        if (!*file) return nst_error(NOSTALL_E_NOMEM, "coco: out of memory");
        sprintf(*file, "%s%s%s", dir, l && dir[l - 1] == '/' ? "" : "/", first);
        return 0;
    }
    if (found > 1)
        return nst_error(NOSTALL_E_DATASET,
                         "coco: %s: a directory with %zu instances*.json files (%s, %s%s): "
                         "name the one to read",
                         NST_MSG_PATH(dir), found, first, second, found > 2 ? ", ..." : "");
    if (shards)
        return nst_error(NOSTALL_E_DATASET,
                         "coco: %s: a directory of tar shards: task=detect does not read shards "
                         "(nostall pack writes COCO shards for the webdataset library only); give "
                         "the instances JSON file and image_root instead",
                         NST_MSG_PATH(dir));
    return nst_error(NOSTALL_E_DATASET,
                     "coco: %s: a directory without an instances*.json file (task=detect reads a "
                     "COCO instances JSON file, or a folder holding exactly one)",
                     NST_MSG_PATH(dir));
}

int nst_coco_load(nst_coco **out, const char *path, const nst_coco_opts *o)
{
    struct stat st;
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return nst_error(NOSTALL_E_DATASET, "coco: %s: %s", NST_MSG_PATH(path), strerror(errno));
    if (fstat(fd, &st) != 0) {
        int rc = nst_error(NOSTALL_E_DATASET, "coco: %s: %s", NST_MSG_PATH(path), strerror(errno));
        close(fd);
        return rc;
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        char *file = NULL;
        int rc = instances_in(path, &file);
        if (rc == 0) {
            rc = stat(file, &st) == 0 && S_ISDIR(st.st_mode)
                     ? nst_error(NOSTALL_E_DATASET, "coco: %s: a directory", NST_MSG_PATH(file))
                     : nst_coco_load(out, file, o);
            free(file);
        }
        return rc;
    }
    /* st_size is a hint only (a pipe has none): read to the end, within max_bytes */
    uint64_t limit = o && o->max_bytes ? o->max_bytes : UINT64_MAX;
    if ((uint64_t)st.st_size > limit) {
        close(fd);
        return over_limit(path, (uint64_t)st.st_size, 0, o);
    }
    size_t cap = S_ISREG(st.st_mode) && (uint64_t)st.st_size < SIZE_MAX - 1 ? (size_t)st.st_size + 1
                                                                            : 65536,
           len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            close(fd);
            return nst_error(NOSTALL_E_NOMEM, "coco: %s: out of memory for its bytes",
                             NST_MSG_PATH(path));
        }
        if (len == cap) {
            char *nb = cap > SIZE_MAX / 2 ? NULL : realloc(buf, cap * 2);
            if (!nb) free(buf);
            buf = nb;
            cap *= 2;
            continue;
        }
        ssize_t r = read(fd, buf + len, cap - len);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int rc =
                nst_error(NOSTALL_E_DATASET, "coco: %s: %s", NST_MSG_PATH(path), strerror(errno));
            free(buf);
            close(fd);
            return rc;
        }
        if (r == 0) break;
        len += (size_t)r;
        if ((uint64_t)len > limit) {
            free(buf);
            close(fd);
            return over_limit(path, len, 0, o);
        }
    }
    close(fd);
    int rc;
    if (len >= 262 && memcmp(buf + 257, "ustar", 5) == 0)
        rc = nst_error(NOSTALL_E_DATASET,
                       "coco: %s: a tar archive: task=detect does not read shards (nostall pack "
                       "writes COCO shards for the webdataset library only); give the instances "
                       "JSON file and image_root instead",
                       NST_MSG_PATH(path));
    else
        rc = load_owned(out, buf, len, path, o);
    free(buf);
    return rc;
}

void nst_coco_free(nst_coco *c)
{
    if (!c) return;
    free(c->images);
    free(c->paths);
    free(c->boxes);
    free(c->category_ids);
    free(c->category_names);
    free(c->arena_);
    free(c);
}
