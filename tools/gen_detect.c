/*
 * gen_detect.c — `nostall gen --task detect`: write a synthetic, learnable
 * object detection dataset in COCO format.
 *
 * Layout: OUT_DIR/instances.json and OUT_DIR/images/img_000000.jpg ...;
 * file_name is "images/img_000000.jpg", so the default image_root (the
 * annotation file's folder) finds the images, and torchvision's
 * CocoDetection(root=OUT_DIR, annFile=OUT_DIR/instances.json) too.
 *
 * Picture design. A background of low saturation (a tinted grey with
 * gentle gradients and bands, plus per-pixel grain that gives the JPEGs a
 * photograph's entropy), and 1..--objects objects that do not overlap. Each
 * category k has its own saturated colour (hues spread round the circle) and
 * its own shape (rectangle, ellipse, triangle, diamond, cross, ring, then
 * the shapes again with other hues), so category and box are learnable.
 * An object's annotation is the tight box of the pixels drawn for it
 * ([x, y, w, h] in whole pixels: w and h count pixels). A fraction of the
 * images (--crowd) also holds a crowd: a cluster of small objects of one
 * category under one annotation with iscrowd 1.
 *
 * Categories have ids with gaps (1, 2, 3, 4, 6, 7, ... as COCO's do), so a
 * reader must map them to contiguous labels; images are listed by id.
 *
 * Determinism: files are a pure function of (seed, image index, options):
 * splitmix64 generators (rng.h), one draw per statement, per-row and
 * per-column libm calls only.
 */
#include "args.h"
#include "gen.h"
#include "rng.h"
#include "util.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    const char *out_dir;
    long images, classes, width, height, quality, objects;
    double crowd;
    uint64_t seed;
    int png, quiet, force, task;
} det_opts;

static const tool_arg det_args[] = {
    {"images", TOOL_ARG_INT, offsetof(det_opts, images), 1, 1e7, NULL, "N", "number of images",
     NULL, 0, NULL},
    {"classes", TOOL_ARG_INT, offsetof(det_opts, classes), 1, 64, NULL, "K", "categories", NULL, 0,
     NULL},
    {"objects", TOOL_ARG_INT, offsetof(det_opts, objects), 1, 64, NULL, "M",
     "most objects per image", NULL, 0, NULL},
    {"crowd", TOOL_ARG_DOUBLE, offsetof(det_opts, crowd), 0, 1, NULL, "F",
     "fraction of images with a crowd", NULL, 0, NULL},
    {"width", TOOL_ARG_INT, offsetof(det_opts, width), 32, 16384, NULL, "W", "image width", NULL, 0,
     NULL},
    {"height", TOOL_ARG_INT, offsetof(det_opts, height), 32, 16384, NULL, "H", "image height", NULL,
     0, NULL},
    {"quality", TOOL_ARG_INT, offsetof(det_opts, quality), 1, 100, NULL, "Q", "JPEG quality", NULL,
     0, NULL},
    {"seed", TOOL_ARG_U64, offsetof(det_opts, seed), 0, 0, NULL, "S", "seed", NULL, 0, NULL},
    {"format", TOOL_ARG_ENUM, offsetof(det_opts, png), 0, 0, "jpeg,jpg|png", "FMT", "image format",
     NULL, 0, NULL},
    {"task", TOOL_ARG_ENUM, offsetof(det_opts, task), 0, 0, GEN_TASKS, "TASK",
     "detect here (nostall gen --help: the others)", NULL, 0, NULL},
    {"force", TOOL_ARG_FLAG, offsetof(det_opts, force), 0, 0, NULL, NULL,
     "write into OUT_DIR even if it is not empty", NULL, 0, NULL},
    {"quiet", TOOL_ARG_FLAG, offsetof(det_opts, quiet), 0, 0, NULL, NULL, "no progress line", NULL,
     0, NULL},
};

static const tool_cmd det_cmd = {
    .name = "gen --task detect",
    .prefix = "gen",
    .usage = "usage: nostall gen --task detect OUT_DIR [options]\n"
             "Write a synthetic COCO-format detection dataset: OUT_DIR/instances.json and\n"
             "OUT_DIR/images/img_000000.jpg ... (each category its own colour and shape;\n"
             "boxes are the tight extents of the objects drawn).\n",
    .positionals = "one OUT_DIR",
    .max_positionals = 1,
    .args = det_args,
    .nargs = sizeof det_args / sizeof det_args[0],
};

static int parse_args(int argc, char **argv, det_opts *o)
{
    memset(o, 0, sizeof *o);
    o->images = 200, o->classes = 6, o->objects = 6, o->crowd = 0.1;
    o->width = 640, o->height = 480, o->quality = 90, o->task = GEN_TASK_DETECT;
    int n = tool_args_parse(&det_cmd, argc, argv, o, NULL);
    if (n < 0) return n;
    if (n == 0) {
        fprintf(stderr,
                "gen: missing OUT_DIR (usage: nostall gen --task detect OUT_DIR [options])\n");
        return TOOL_ARGS_ERROR;
    }
    o->out_dir = argv[1];
    return 0;
}

static void hsv_rgb(double h, double s, double v, double rgb[3])
{
    h -= floor(h);
    double hh = h * 6, f = hh - floor(hh), p = v * (1 - s), q = v * (1 - s * f),
           t = v * (1 - s * (1 - f));
    switch ((int)hh % 6) {
    case 0: rgb[0] = v, rgb[1] = t, rgb[2] = p; break;
    case 1: rgb[0] = q, rgb[1] = v, rgb[2] = p; break;
    case 2: rgb[0] = p, rgb[1] = v, rgb[2] = t; break;
    case 3: rgb[0] = p, rgb[1] = q, rgb[2] = v; break;
    case 4: rgb[0] = t, rgb[1] = p, rgb[2] = v; break;
    default: rgb[0] = v, rgb[1] = p, rgb[2] = q; break;
    }
}

/* ---- objects ------------------------------------------------------------- */

enum { SH_RECT, SH_ELLIPSE, SH_TRIANGLE, SH_DIAMOND, SH_CROSS, SH_RING, N_SHAPES };
static const char *const shape_names[N_SHAPES] = {"rectangle", "ellipse", "triangle",
                                                  "diamond",   "cross",   "ring"};

/* Is pixel (x, y) of a box [x0, x0 + w) x [y0, y0 + h) part of shape s? */
static int in_shape(int s, int x, int y, int x0, int y0, int w, int h)
{
    double rx = w / 2.0, ry = h / 2.0;
    double dx = (x + 0.5 - x0 - rx) / rx, dy = (y + 0.5 - y0 - ry) / ry;
    switch (s) {
    case SH_RECT: return 1;
    case SH_ELLIPSE: return dx * dx + dy * dy <= 1.0;
    case SH_TRIANGLE: return fabs(dx) <= (dy + 1.0) / 2.0;
    case SH_DIAMOND: return fabs(dx) + fabs(dy) <= 1.0;
    case SH_CROSS: return fabs(dx) <= 0.34 || fabs(dy) <= 0.34;
    default: {
        double r = dx * dx + dy * dy;
        return r <= 1.0 && r >= 0.36;
    }
    }
}

/* The category's colour (0..255 per channel). */
static void cat_colour(long k, long K, double rgb[3])
{
    hsv_rgb((double)k / (double)K + 0.03, 0.85, 0.92, rgb);
    for (int c = 0; c < 3; c++) rgb[c] *= 255.0;
}

typedef struct ann {
    int x0, y0, x1, y1; /* tight pixel box, x1/y1 exclusive */
    long cat;
    int crowd;
} ann;

/* Draw shape `s` of category `cat` in box (x0, y0, w, h); grow *a to the
 * tight box of the pixels drawn (a->x1 < a->x0 when none yet). */
static void draw(uint8_t *rgb, int W, int H, const det_opts *o, long cat, int x0, int y0, int w,
                 int h, ann *a)
{
    double col[3];
    cat_colour(cat, o->classes, col);
    int s = (int)(cat % N_SHAPES);
    for (int y = y0; y < y0 + h && y < H; y++)
        for (int x = x0; x < x0 + w && x < W; x++) {
            if (x < 0 || y < 0 || !in_shape(s, x, y, x0, y0, w, h)) continue;
            uint8_t *p = rgb + ((size_t)y * (size_t)W + (size_t)x) * 3;
            for (int c = 0; c < 3; c++) p[c] = (uint8_t)col[c];
            if (x < a->x0) a->x0 = x;
            if (y < a->y0) a->y0 = y;
            if (x + 1 > a->x1) a->x1 = x + 1;
            if (y + 1 > a->y1) a->y1 = y + 1;
        }
}

static int overlaps(const int *r, const int (*taken)[4], int n, int margin)
{
    for (int i = 0; i < n; i++)
        if (r[0] < taken[i][2] + margin && taken[i][0] < r[2] + margin &&
            r[1] < taken[i][3] + margin && taken[i][1] < r[3] + margin)
            return 1;
    return 0;
}

/* The background of image `index` into rgb. */
static void background(uint8_t *rgb, int W, int H, tool_rng *r, float *colv, float *rowv)
{
    double base = tool_rng_range(r, 70, 180), tint[3];
    for (int c = 0; c < 3; c++) tint[c] = tool_rng_range(r, 0.85, 1.15);
    double fx = tool_rng_range(r, 1, 6) * 6.283185307179586 / W,
           fy = tool_rng_range(r, 1, 6) * 6.283185307179586 / H;
    double px = tool_rng_range(r, 0, 6.3), py = tool_rng_range(r, 0, 6.3),
           gx = tool_rng_range(r, -40, 40) / W;
    double gy = tool_rng_range(r, -40, 40) / H;
    for (int x = 0; x < W; x++) colv[x] = (float)(gx * x + 18 * sin(fx * x + px));
    for (int y = 0; y < H; y++) rowv[y] = (float)(gy * y + 18 * sin(fy * y + py));
    uint64_t st = tool_rng_next(r) | 1;
    for (int y = 0; y < H; y++) {
        uint8_t *p = rgb + (size_t)y * (size_t)W * 3;
        for (int x = 0; x < W; x++, p += 3) {
            st ^= st << 13;
            st ^= st >> 7;
            st ^= st << 17;
            uint64_t z = st * 0x2545f4914f6cdd1dULL;
            int g = ((int)(z & 0xff) + (int)((z >> 8) & 0xff) - 255) * 22 / 256;
            float v = (float)base + colv[x] + rowv[y] + (float)g;
            for (int c = 0; c < 3; c++) {
                float t = v * (float)tint[c];
                p[c] = (uint8_t)(t < 0 ? 0 : t > 255 ? 255 : t);
            }
        }
    }
}

/* Draw image `index`; its annotations into anns (returns how many). */
static int render(uint8_t *rgb, float *colv, float *rowv, const det_opts *o, long index, ann *anns)
{
    const int W = (int)o->width, H = (int)o->height, S = W < H ? W : H;
    tool_rng r = {
        tool_mix64(o->seed * 0xd1b54a32d192ed03ULL ^ tool_mix64((uint64_t)index + 0xde7ec7ULL))};
    background(rgb, W, H, &r, colv, rowv);
    int taken[65][4], n = 0;
    int want = 1 + (int)(tool_rng_next(&r) % (uint64_t)o->objects);
    int crowd = tool_rng_unit(&r) < o->crowd;
    if (crowd) { /* a cluster of small objects of one category, one annotation */
        int cw = (int)(tool_rng_range(&r, 0.22, 0.35) * S),
            ch = (int)(tool_rng_range(&r, 0.22, 0.35) * S);
        int cx = (int)(tool_rng_unit(&r) * (W - cw)), cy = (int)(tool_rng_unit(&r) * (H - ch));
        long cat = (long)(tool_rng_next(&r) % (uint64_t)o->classes);
        ann a = {.x0 = W, .y0 = H, .x1 = 0, .y1 = 0, .cat = cat, .crowd = 1};
        int small[12][4], ns = 0;
        for (int t = 0; t < 60 && ns < 9; t++) {
            int w = (int)(tool_rng_range(&r, 0.05, 0.09) * S),
                h = (int)(tool_rng_range(&r, 0.05, 0.09) * S);
            int x = cx + (int)(tool_rng_unit(&r) * (cw - w)),
                y = cy + (int)(tool_rng_unit(&r) * (ch - h));
            int box[4] = {x, y, x + w, y + h};
            if (w < 2 || h < 2 || overlaps(box, (const int(*)[4])small, ns, 1)) continue;
            memcpy(small[ns++], box, sizeof box);
            draw(rgb, W, H, o, cat, x, y, w, h, &a);
        }
        if (a.x1 > a.x0) {
            anns[n] = a;
            int box[4] = {a.x0, a.y0, a.x1, a.y1};
            memcpy(taken[n++], box, sizeof box);
        }
    }
    const int target = n + want;
    for (int t = 0; t < 40 * want && n < target; t++) {
        int w = (int)(tool_rng_range(&r, 0.1, 0.45) * S),
            h = (int)(tool_rng_range(&r, 0.1, 0.45) * S);
        int x = (int)(tool_rng_unit(&r) * (W - w)), y = (int)(tool_rng_unit(&r) * (H - h));
        long cat = (long)(tool_rng_next(&r) % (uint64_t)o->classes);
        int box[4] = {x, y, x + w, y + h};
        if (w < 4 || h < 4 || overlaps(box, (const int(*)[4])taken, n, 3)) continue;
        ann a = {.x0 = W, .y0 = H, .x1 = 0, .y1 = 0, .cat = cat, .crowd = 0};
        draw(rgb, W, H, o, cat, x, y, w, h, &a);
        if (a.x1 <= a.x0) continue;
        anns[n] = a;
        memcpy(taken[n++], box, sizeof box);
    }
    return n;
}

/* ---- the dataset --------------------------------------------------------- */

static long cat_id(long k) { return k + 1 + k / 4; } /* 1 2 3 4 6 7 8 9 11 ... */

int cmd_gen_detect(int argc, char **argv)
{
    det_opts o;
    int prc = parse_args(argc, argv, &o);
    if (prc < 0) return tool_args_status(prc);
    if (strlen(o.out_dir) > 3000) {
        fprintf(stderr, "gen: OUT_DIR is too long\n");
        return 2;
    }
    struct stat st;
    if (stat(o.out_dir, &st) == 0) {
        int ne = S_ISDIR(st.st_mode) ? tool_dir_nonempty(o.out_dir) : -1;
        if (!S_ISDIR(st.st_mode)) {
            tool_line(stderr, "gen: '%s' exists and is not a directory", o.out_dir);
            return 2;
        }
        if (ne < 0) {
            tool_line(stderr, "gen: cannot read '%s': %s", o.out_dir, strerror(errno));
            return 1;
        }
        if (ne && !o.force) {
            tool_line(stderr, "gen: '%s' exists and is not empty (use --force to write into it)",
                      o.out_dir);
            return 2;
        }
    }
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/images", o.out_dir);
    if (tool_mkdir_p(path) != 0) {
        tool_line(stderr, "gen: cannot create '%s': %s", path, strerror(errno));
        return 1;
    }
    snprintf(path, sizeof path, "%s/instances.json", o.out_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *js = fopen(tmp, "w");
    const size_t W = (size_t)o.width, H = (size_t)o.height;
    uint8_t *rgb = malloc(W * H * 3);
    float *colv = malloc(W * sizeof *colv), *rowv = malloc(H * sizeof *rowv);
    ann anns[80];
    int status = 0;
    if (!js || !rgb || !colv || !rowv) {
        tool_line(stderr, "gen: cannot create '%s': %s", tmp,
                  js ? "out of memory" : strerror(errno));
        status = 1;
        goto done;
    }
    fprintf(js, "{\"info\": {\"description\": \"nostall gen --task detect\", \"seed\": %llu},\n",
            (unsigned long long)o.seed);
    fprintf(js, "\"categories\": [");
    for (long k = 0; k < o.classes; k++)
        fprintf(js, "%s\n {\"id\": %ld, \"name\": \"c%02ld_%s\", \"supercategory\": \"shape\"}",
                k ? "," : "", cat_id(k), k, shape_names[k % N_SHAPES]);
    fprintf(js, "],\n\"images\": [");
    for (long i = 0; i < o.images; i++)
        fprintf(js,
                "%s\n {\"id\": %ld, \"file_name\": \"images/img_%06ld.%s\", \"width\": %ld, \"height\": %ld}",
                i ? "," : "", i + 1, i, o.png ? "png" : "jpg", o.width, o.height);
    fprintf(js, "],\n\"annotations\": [");
    long ann_id = 0, crowds = 0;
    long long bytes = 0;
    const int progress = !o.quiet && isatty(STDERR_FILENO);
    double t0 = tool_now_s();
    for (long i = 0; i < o.images; i++) {
        int n = render(rgb, colv, rowv, &o, i, anns);
        snprintf(path, sizeof path, "%s/images/img_%06ld.%s", o.out_dir, i, o.png ? "png" : "jpg");
        long long sz = gen_write_rgb(path, rgb, (int)W, (int)H, o.png, (int)o.quality);
        if (sz < 0) {
            status = 1;
            goto done;
        }
        bytes += sz;
        for (int k = 0; k < n; k++) {
            const ann *a = &anns[k];
            int w = a->x1 - a->x0, h = a->y1 - a->y0;
            fprintf(
                js,
                "%s\n {\"id\": %ld, \"image_id\": %ld, \"category_id\": %ld, \"bbox\": [%d, %d, %d, %d], "
                "\"area\": %d, \"iscrowd\": %d, \"segmentation\": [[%d, %d, %d, %d, %d, %d, %d, %d]]}",
                ann_id ? "," : "", ann_id + 1, i + 1, cat_id(a->cat), a->x0, a->y0, w, h, w * h,
                a->crowd, a->x0, a->y0, a->x1, a->y0, a->x1, a->y1, a->x0, a->y1);
            ann_id++;
            crowds += a->crowd;
        }
        if (progress && (i % 16 == 15 || i + 1 == o.images)) {
            fprintf(stderr, "\rgen: %ld/%ld images", i + 1, o.images);
            fflush(stderr);
        }
    }
    fprintf(js, "]}\n");
    if (progress) fprintf(stderr, "\r\033[K");
done:
    if (js && (fclose(js) != 0 || status != 0)) {
        if (status == 0) tool_line(stderr, "gen: cannot write '%s': %s", tmp, strerror(errno));
        status = 1;
    }
    snprintf(path, sizeof path, "%s/instances.json", o.out_dir);
    if (status == 0 && rename(tmp, path) != 0) {
        tool_line(stderr, "gen: cannot write '%s': %s", path, strerror(errno));
        status = 1;
    }
    if (status != 0 && js) unlink(tmp);
    free(rgb);
    free(colv);
    free(rowv);
    if (status == 0)
        tool_line(stderr,
                  "gen: wrote %ld images with %ld boxes (%ld crowds) in %ld categories to %s (%.1f MB, mean "
                  "%.1f KB) in %.1f s",
                  o.images, ann_id, crowds, o.classes, o.out_dir, (double)bytes / 1e6,
                  (double)bytes / (double)o.images / 1e3, tool_now_s() - t0);
    return status;
}
