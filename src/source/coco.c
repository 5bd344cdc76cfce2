/*
 * coco.c — reading COCO instance annotations (see coco.h for the format,
 * the errors and the repairs).
 *
 * DESIGN  One pass over each of the three arrays with jansson's tree:
 * images are collected and sorted by id (duplicates refused), categories
 * sorted by id and numbered, annotations validated member by member (every
 * error names the JSON path) and matched to their image by binary search.
 * Then each kept image's boxes are clipped or dropped, counted per image,
 * and placed by a counting sort that keeps the file's order within an
 * image. The tree is freed before returning; what is kept is flat arrays.
 *
 * THREADS  Called at loader create only; nothing static and mutable.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <jansson.h>

#include "common/error.h"
#include "source/coco.h"
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
    n = 0;
    for (size_t i = 0; i < p->nimgs; i++) {
        char *path = w;
        w = join_into(w, root, rlen, p->imgs[i].file);
        struct stat st;
        if (o && o->check_files && !is_url(path) && stat(path, &st) != 0 &&
            (errno == ENOENT || errno == ENOTDIR)) {
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

static int syntax_error(const char *name, const json_error_t *e)
{
    if (e->line > 0)
        return nst_error(NOSTALL_E_DATASET, "coco: %s:%d:%d: JSON syntax error: %s",
                         NST_MSG_PATH(name), e->line, e->column, e->text);
    return nst_error(NOSTALL_E_DATASET, "coco: %s: JSON: %s", NST_MSG_PATH(name), e->text);
}

enum { COCO_JSON_FLAGS = JSON_REJECT_DUPLICATES };

int nst_coco_load_buffer(nst_coco **out, const char *data, size_t len, const char *name,
                         const nst_coco_opts *o)
{
    json_error_t e;
    *out = NULL;
    json_t *root = json_loadb(data, len, COCO_JSON_FLAGS, &e);
    if (!root) return syntax_error(name, &e);
    int rc = parse_root(out, root, name, o);
    json_decref(root);
    return rc;
}

int nst_coco_load(nst_coco **out, const char *path, const nst_coco_opts *o)
{
    json_error_t e;
    struct stat st;
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return nst_error(NOSTALL_E_DATASET, "coco: %s: %s", NST_MSG_PATH(path), strerror(errno));
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        return nst_error(NOSTALL_E_DATASET,
                         "coco: %s: a directory (task=detect reads a COCO instances JSON file)",
                         NST_MSG_PATH(path));
    }
    json_t *root = json_loadf(f, COCO_JSON_FLAGS, &e);
    fclose(f);
    if (!root) return syntax_error(path, &e);
    int rc = parse_root(out, root, path, o);
    json_decref(root);
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
