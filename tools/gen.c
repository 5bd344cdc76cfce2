/*
 * gen.c — `nostall gen`: write a synthetic, learnable ImageFolder dataset.
 *
 * Layout: OUT_DIR/class_000/img_000000.jpg ...; image i belongs to class
 * i % K and keeps its global index in its name, so sorted order is class
 * order and, within a class, generation order.
 *
 * Picture design. Every class has a fixed "look" that depends only on the
 * class index and the class count (not on --seed, so a train set and a val
 * set generated with different seeds share their classes): a dominant hue
 * (classes spread evenly round the hue circle), a second palette colour, and
 * a texture family (stripes, checker, rings, wavy stripes, polka dots, blobs,
 * zigzag, plaid) with its own period and orientation. Both cues are spread
 * over the whole frame, so they survive random-resized-crop and flips.
 * Every image then draws its own randomness from (seed, image index): phase,
 * small hue/saturation/angle/period jitter, multi-octave value noise for
 * shading and domain warp, a lighting gradient, a few distractor shapes in
 * random colours, and per-pixel grain. The grain and fine noise octaves give
 * JPEGs the entropy of photographs (about 100 KB at 500x375, quality 90).
 *
 * Determinism: pixels are a pure function of (seed, image index, class
 * count, size options). All randomness comes from the CLI's splitmix64
 * (rng.h) and a local xorshift for grain, each random draw is its own
 * statement (C leaves the order of argument evaluation open), and per pixel
 * there is no libm call but sqrtf, so gcc and clang at any -O give byte-identical files.
 *
 * Speed: per pixel, table look-ups (sine), bilinear interpolation of
 * precomputed noise grids, and one xorshift step for grain; rendering costs
 * a little more than libjpeg's encoding (about 200 images/s at 500x375).
 *
 * Files are written to NAME.tmp and renamed into place, so an interrupted
 * run never leaves a truncated file under a final name. Sizes in the
 * summary are decimal (1 MB = 10^6 bytes, 1 KB = 10^3 bytes).
 */
#include "args.h"
#include "commands.h"
#include "gen.h"
#include "rng.h"
#include "util.h"

#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <jpeglib.h>
#include <png.h>

/* ------------------------------------------------------------------------ */
/* Options                                                                   */

enum { FMT_JPEG, FMT_PNG };

typedef struct {
    const char *out_dir;
    long images, classes, width, height, quality;
    uint64_t seed;
    double jitter;
    int format, quiet, force, task;
} gen_opts;

static const tool_arg gen_args[] = {
    {"images", TOOL_ARG_INT, offsetof(gen_opts, images), 1, 100000000, NULL, "N",
     "number of images", NULL, 0, NULL},
    {"classes", TOOL_ARG_INT, offsetof(gen_opts, classes), 1, 100000, NULL, "K",
     "number of classes, at most N", NULL, 0, NULL},
    {"width", TOOL_ARG_INT, offsetof(gen_opts, width), 8, 16384, NULL, "W", "image width", NULL, 0,
     NULL},
    {"height", TOOL_ARG_INT, offsetof(gen_opts, height), 8, 16384, NULL, "H", "image height", NULL,
     0, NULL},
    {"quality", TOOL_ARG_INT, offsetof(gen_opts, quality), 1, 100, NULL, "Q", "JPEG quality", NULL,
     0, NULL},
    {"seed", TOOL_ARG_U64, offsetof(gen_opts, seed), 0, 0, NULL, "S", "seed", NULL, 0, NULL},
    {"size-jitter", TOOL_ARG_DOUBLE, offsetof(gen_opts, jitter), 0, 0.5, NULL, "F",
     "scale each image's width and height by a per-image factor in [1-F, 1+F]", NULL, 0, NULL},
    {"format", TOOL_ARG_ENUM, offsetof(gen_opts, format), 0, 0, "jpeg,jpg|png", "FMT",
     "image format", NULL, 0, NULL},
    {"task", TOOL_ARG_ENUM, offsetof(gen_opts, task), 0, 0, GEN_TASKS, "TASK",
     "classify (this folder layout), detect (a COCO detection dataset: nostall gen --task "
     "detect --help) or audio (an AudioFolder: nostall gen --task audio --help)",
     NULL, 0, NULL},
    {"force", TOOL_ARG_FLAG, offsetof(gen_opts, force), 0, 0, NULL, NULL,
     "write into OUT_DIR even if it is not empty (files of the same name are replaced; other "
     "files stay, with a warning)",
     NULL, 0, NULL},
    {"quiet", TOOL_ARG_FLAG, offsetof(gen_opts, quiet), 0, 0, NULL, NULL,
     "no progress line (the summary is still printed)", NULL, 0, NULL},
};

static const tool_cmd gen_cmd = {
    .name = "gen",
    .prefix = "gen",
    .usage = "usage: nostall gen OUT_DIR [options]\n"
             "Write a synthetic ImageFolder dataset: OUT_DIR/class_000/img_000000.jpg ...\n"
             "(image i belongs to class i % K; each class has its own hue and texture).\n",
    .positionals = "one OUT_DIR",
    .max_positionals = 1,
    .args = gen_args,
    .nargs = sizeof gen_args / sizeof gen_args[0],
};

static int parse_args(int argc, char **argv, gen_opts *o)
{
    memset(o, 0, sizeof *o);
    o->images = 1000;
    o->classes = 10;
    o->width = 500;
    o->height = 375;
    o->quality = 90;
    o->format = FMT_JPEG;
    o->task = GEN_TASK_CLASSIFY;
    int n = tool_args_parse(&gen_cmd, argc, argv, o, NULL);
    if (n < 0) return n;
    if (n == 0) {
        fprintf(stderr, "gen: missing OUT_DIR (usage: nostall gen OUT_DIR [options]; see --help)\n");
        return TOOL_ARGS_ERROR;
    }
    o->out_dir = argv[1];
    if (o->classes > o->images) {
        fprintf(stderr, "gen: --classes (%ld) must be <= --images (%ld)\n", o->classes, o->images);
        return TOOL_ARGS_ERROR;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Small numeric helpers                                                     */

#define SIN_N 4096
static float g_sin[SIN_N]; /* one period of sin, built once */
static int g_sin_ready;

static void sin_init(void)
{
    if (g_sin_ready) return;
    for (int i = 0; i < SIN_N; i++) g_sin[i] = (float)sin(2.0 * 3.14159265358979323846 * i / SIN_N);
    g_sin_ready = 1;
}

/* sin(2*pi*u) for u >= -1000 (the offset keeps the index positive). */
static inline float sin_p(float u)
{
    return g_sin[(int)((u + 1024.0f) * (float)SIN_N) & (SIN_N - 1)];
}

static inline float clampf(float v, float lo, float hi) { return v < lo ? lo : v > hi ? hi : v; }

static inline float fracf_pos(float u) /* u + 1024 >= 0 */
{
    float t = u + 1024.0f;
    return t - (float)(int)t;
}

static void hsv_to_rgb(double h, double s, double v, float rgb[3])
{
    h = h - floor(h);
    double hh = h * 6.0;
    int i = (int)hh;
    double f = hh - i, p = v * (1 - s), q = v * (1 - s * f), t = v * (1 - s * (1 - f));
    double r, g, b;
    switch (i % 6) {
    case 0: r = v, g = t, b = p; break;
    case 1: r = q, g = v, b = p; break;
    case 2: r = p, g = v, b = t; break;
    case 3: r = p, g = q, b = v; break;
    case 4: r = t, g = p, b = v; break;
    default: r = v, g = p, b = q; break;
    }
    rgb[0] = (float)r, rgb[1] = (float)g, rgb[2] = (float)b;
}

/* ------------------------------------------------------------------------ */
/* Value noise: a random grid bilinearly interpolated with smoothstep.       */

typedef struct {
    float cell, amp;
    int gw, gh;
    float *grid; /* gh x gw values in [-1, 1] */
    int *ix;     /* per x: grid column */
    float *sx;   /* per x: smoothstep weight */
} octave_t;

static int octave_init(octave_t *o, int w, int h, float cell, float amp, tool_rng *r)
{
    if (cell < 1.0f) cell = 1.0f;
    o->cell = cell;
    o->amp = amp;
    o->gw = (int)(w / cell) + 2;
    o->gh = (int)(h / cell) + 2;
    o->grid = malloc(sizeof(float) * (size_t)o->gw * (size_t)o->gh);
    o->ix = malloc(sizeof(int) * (size_t)w);
    o->sx = malloc(sizeof(float) * (size_t)w);
    if (!o->grid || !o->ix || !o->sx) return -1;
    for (int i = 0; i < o->gw * o->gh; i++) o->grid[i] = (float)tool_rng_range(r, -1.0, 1.0);
    for (int x = 0; x < w; x++) {
        float g = (float)x / cell;
        int i = (int)g;
        float s = g - (float)i;
        o->ix[x] = i;
        o->sx[x] = s * s * (3.0f - 2.0f * s);
    }
    return 0;
}

static void octave_free(octave_t *o)
{
    free(o->grid);
    free(o->ix);
    free(o->sx);
    o->grid = NULL;
    o->ix = NULL;
    o->sx = NULL;
}

/* acc[x] += amp * noise(x, y) for the whole row; tmp holds gw floats. */
static void octave_row(const octave_t *o, int y, int w, float *acc, float *tmp)
{
    float g = (float)y / o->cell;
    int iy = (int)g;
    float s = g - (float)iy;
    s = s * s * (3.0f - 2.0f * s);
    const float *r0 = o->grid + (size_t)iy * (size_t)o->gw, *r1 = r0 + o->gw;
    for (int i = 0; i < o->gw; i++) tmp[i] = o->amp * (r0[i] + (r1[i] - r0[i]) * s);
    for (int x = 0; x < w; x++) {
        int i = o->ix[x];
        acc[x] += tmp[i] + (tmp[i + 1] - tmp[i]) * o->sx[x];
    }
}

/* ------------------------------------------------------------------------ */
/* Class looks and image synthesis                                           */

enum {
    FAM_STRIPES,
    FAM_CHECKER,
    FAM_RINGS,
    FAM_WAVES,
    FAM_DOTS,
    FAM_BLOBS,
    FAM_ZIGZAG,
    FAM_PLAID,
    N_FAM
};

typedef struct {
    int family;
    double hue_a, hue_b, sat_a, sat_b, val_a, val_b;
    double period; /* fraction of min(w, h) */
    double angle;  /* radians */
} class_look;

static void class_look_for(long c, long k, class_look *L)
{
    tool_rng r = {tool_mix64(0x5eedc1a55ULL ^ ((uint64_t)c * 0x9e3779b97f4a7c15ULL))};
    L->family = (int)(c % N_FAM);
    L->hue_a = (double)c / (double)k + 0.02;
    /* Second colour: an analogous hue, or a darker/lighter shade of the first. */
    /* (Random draws are in separate statements: argument and operand
     * evaluation order is unspecified, and files must not depend on it.) */
    double d = tool_rng_range(&r, 0.06, 0.16);
    if (tool_rng_unit(&r) < 0.5) d = -d;
    if (k > 12) d *= 12.0 / (double)k + 0.25; /* keep class hue bands narrow */
    L->hue_b = L->hue_a + d;
    L->sat_a = tool_rng_range(&r, 0.65, 0.95);
    L->sat_b = tool_rng_range(&r, 0.35, 0.8);
    L->val_a = tool_rng_range(&r, 0.7, 0.95);
    L->val_b =
        tool_rng_unit(&r) < 0.5 ? tool_rng_range(&r, 0.25, 0.45) : tool_rng_range(&r, 0.85, 1.0);
    L->period = tool_rng_range(&r, 0.05, 0.12);
    L->angle = tool_rng_range(&r, 0.0, 3.14159265358979323846);
}

typedef struct {
    int w, h;
    uint8_t *rgb; /* w*h*3 */
    float *lum;   /* w*h shading field */
    float *row_a; /* w: shading accumulator */
    float *row_b; /* w: warp / blob accumulator */
    float *tmp;   /* grid row scratch */
    size_t tmp_n;
} canvas;

#define N_OCT 6

/* Distractor shapes: ellipses and rectangles in random colours over the
 * picture, shaded by its luminance field (S: the smaller side). */
static void distractors(canvas *cv, tool_rng *r, float S)
{
    const int w = cv->w, h = cv->h;
    const float lo = 0.0f, hi = 255.0f;
    int nshapes = 2 + (int)(tool_rng_next(r) % 6);
    for (int s = 0; s < nshapes; s++) {
        float col[3];
        double sh = tool_rng_unit(r);
        double ss = tool_rng_range(r, 0.0, 0.8);
        double sv = tool_rng_range(r, 0.3, 1.0);
        hsv_to_rgb(sh, ss, sv, col);
        float scx = (float)tool_rng_unit(r) * (float)w, scy = (float)tool_rng_unit(r) * (float)h;
        float rx = (float)tool_rng_range(r, 0.03, 0.16) * S,
              ry = (float)tool_rng_range(r, 0.03, 0.16) * S;
        int ellipse = tool_rng_unit(r) < 0.6;
        float bandf = (float)tool_rng_range(r, 0.0, 0.25); /* faint own banding */
        float bperiod = (float)tool_rng_range(r, 4.0, 20.0);
        int x0 = (int)(scx - rx), x1 = (int)(scx + rx) + 1, y0 = (int)(scy - ry),
            y1 = (int)(scy + ry) + 1;
        if (x0 < 0) x0 = 0;
        if (y0 < 0) y0 = 0;
        if (x1 > w) x1 = w;
        if (y1 > h) y1 = h;
        for (int y = y0; y < y1; y++) {
            float ey = ((float)y - scy) / ry;
            const float *lum = cv->lum + (size_t)y * (size_t)w;
            uint8_t *px = cv->rgb + (size_t)y * (size_t)w * 3;
            for (int x = x0; x < x1; x++) {
                float ex = ((float)x - scx) / rx;
                if (ellipse && ex * ex + ey * ey > 1.0f) continue;
                float k = 255.0f * lum[x] * (1.0f + bandf * sin_p(((float)x + (float)y) / bperiod));
                px[3 * x + 0] = (uint8_t)clampf(col[0] * k, lo, hi);
                px[3 * x + 1] = (uint8_t)clampf(col[1] * k, lo, hi);
                px[3 * x + 2] = (uint8_t)clampf(col[2] * k, lo, hi);
            }
        }
    }
}

/* Grain: triangular-distributed luma noise plus weaker chroma noise. */
static void grain(canvas *cv, tool_rng *r)
{
    const int w = cv->w, h = cv->h;
    int gl = 20 + (int)(tool_rng_next(r) % 5); /* luma amplitude */
    int gc = 4;
    uint64_t st = tool_rng_next(r) | 1;
    uint8_t *px = cv->rgb;
    for (size_t i = 0, n = (size_t)w * (size_t)h; i < n; i++, px += 3) {
        st ^= st << 13;
        st ^= st >> 7;
        st ^= st << 17;
        uint64_t z = st * 0x2545f4914f6cdd1dULL;
        int tl = (int)(z & 0xff) + (int)((z >> 8) & 0xff) - 255;
        int tr = (int)((z >> 16) & 0xff) + (int)((z >> 24) & 0xff) - 255;
        int tb = (int)((z >> 32) & 0xff) + (int)((z >> 40) & 0xff) - 255;
        int dl = tl * gl / 256, dr = tr * gc / 256, db = tb * gc / 256;
        int v0 = px[0] + dl + dr, v1 = px[1] + dl, v2 = px[2] + dl + db;
        px[0] = (uint8_t)(v0 < 0 ? 0 : v0 > 255 ? 255 : v0);
        px[1] = (uint8_t)(v1 < 0 ? 0 : v1 > 255 ? 255 : v1);
        px[2] = (uint8_t)(v2 < 0 ? 0 : v2 > 255 ? 255 : v2);
    }
}

/*
 * Render image `index` into c (already sized w x h). Returns 0, or -1 when
 * out of memory.
 */
static int render(canvas *cv, const gen_opts *o, long index)
{
    const int w = cv->w, h = cv->h;
    tool_rng r = {
        tool_mix64(o->seed * 0xd1b54a32d192ed03ULL ^ tool_mix64((uint64_t)index + 0x1234567ULL))};
    class_look L;
    class_look_for(index % o->classes, o->classes, &L);

    const float S = (float)(w < h ? w : h);
    /* Per-image variation of the class look. */
    double hue_shift = tool_rng_range(&r, -0.02, 0.02);
    double sat_scale = tool_rng_range(&r, 0.85, 1.1);
    double val_scale = tool_rng_range(&r, 0.85, 1.1);
    float colA[3], colB[3];
    hsv_to_rgb(L.hue_a + hue_shift, fmin(1.0, L.sat_a * sat_scale), fmin(1.0, L.val_a * val_scale),
               colA);
    hsv_to_rgb(L.hue_b + hue_shift, fmin(1.0, L.sat_b * sat_scale), fmin(1.0, L.val_b * val_scale),
               colB);
    float period = (float)(L.period * tool_rng_range(&r, 0.85, 1.2)) * S;
    if (period < 3.0f) period = 3.0f;
    double ang = L.angle + tool_rng_range(&r, -0.2, 0.2);
    float ca = (float)cos(ang) / period, sa = (float)sin(ang) / period;
    float ph_u = (float)tool_rng_unit(&r), ph_v = (float)tool_rng_unit(&r);
    float cx = (float)tool_rng_range(&r, -0.2, 1.2) * (float)w,
          cy = (float)tool_rng_range(&r, -0.2, 1.2) * (float)h;
    float warp = (float)tool_rng_range(&r, 0.15, 0.45); /* in periods */
    float sharp = (float)tool_rng_range(&r, 1.3, 3.0);  /* pattern edge hardness */
    float gx = (float)tool_rng_range(&r, -0.35, 0.35) / (float)w,
          gy = (float)tool_rng_range(&r, -0.35, 0.35) / (float)h;
    float contrast = (float)tool_rng_range(&r, 0.3, 0.5);

    /* Shading octaves (coarse to fine) plus one warp/blob octave. */
    static const float cells[N_OCT] = {0.5f, 0.22f, 0.09f, 0.035f, 0.012f, 0.004f};
    static const float amps[N_OCT] = {0.5f, 0.3f, 0.2f, 0.16f, 0.14f, 0.6f};
    octave_t oct[N_OCT + 1];
    memset(oct, 0, sizeof oct);
    int rc = 0;
    for (int i = 0; i < N_OCT && rc == 0; i++)
        rc = octave_init(&oct[i], w, h, cells[i] * S, amps[i], &r);
    if (rc == 0) rc = octave_init(&oct[N_OCT], w, h, period * 0.9f, 1.0f, &r);
    size_t need = 0;
    for (int i = 0; i <= N_OCT; i++)
        if (oct[i].grid && (size_t)oct[i].gw > need) need = (size_t)oct[i].gw;
    if (rc == 0 && need > cv->tmp_n) {
        free(cv->tmp);
        cv->tmp = malloc(sizeof(float) * need);
        cv->tmp_n = cv->tmp ? need : 0;
        if (!cv->tmp) rc = -1;
    }
    if (rc != 0) {
        for (int i = 0; i <= N_OCT; i++) octave_free(&oct[i]);
        return -1;
    }

    const float lo = 0.0f, hi = 255.0f;
    for (int y = 0; y < h; y++) {
        float *A = cv->row_a, *B = cv->row_b;
        for (int x = 0; x < w; x++) A[x] = 0.0f, B[x] = 0.0f;
        for (int i = 0; i < N_OCT; i++) octave_row(&oct[i], y, w, A, cv->tmp);
        octave_row(&oct[N_OCT], y, w, B, cv->tmp);
        float *lum = cv->lum + (size_t)y * (size_t)w;
        uint8_t *px = cv->rgb + (size_t)y * (size_t)w * 3;
        float u = (float)y * sa + ph_u; /* along-stripe-normal coordinate, in periods */
        float v = (float)y * ca + ph_v; /* perpendicular coordinate */
        float dy = ((float)y - cy) / period;
        float lit = 1.0f + gy * ((float)y - 0.5f * (float)h);
        /* Pattern value into B (in place of the warp noise it consumes);
         * one loop per family keeps the switch out of the pixel loop. */
        switch (L.family) {
        case FAM_STRIPES:
            for (int x = 0; x < w; x++, u += ca) B[x] = sin_p(u + warp * B[x]);
            break;
        case FAM_CHECKER:
            for (int x = 0; x < w; x++, u += ca, v -= sa) {
                float n = warp * B[x];
                B[x] = 1.6f * sin_p(u + n) * sin_p(v + 0.3f * n);
            }
            break;
        case FAM_RINGS:
            for (int x = 0; x < w; x++) {
                float dx = ((float)x - cx) / period;
                B[x] = sin_p(sqrtf(dx * dx + dy * dy) + ph_u + warp * B[x]);
            }
            break;
        case FAM_WAVES:
            for (int x = 0; x < w; x++, u += ca, v -= sa)
                B[x] = sin_p(u + warp * B[x] + 0.45f * sin_p(0.35f * v));
            break;
        case FAM_DOTS:
            for (int x = 0; x < w; x++, u += ca, v -= sa) {
                float fu = fracf_pos(u + warp * B[x]) - 0.5f, fv = fracf_pos(v) - 0.5f;
                B[x] = (fu * fu + fv * fv) * 16.0f - 1.4f; /* negative inside the dot */
            }
            break;
        case FAM_BLOBS:
            for (int x = 0; x < w; x++) B[x] = 2.5f * B[x];
            break;
        case FAM_ZIGZAG:
            for (int x = 0; x < w; x++, u += ca, v -= sa) {
                float t = fracf_pos(0.5f * v);
                t = t < 0.5f ? t : 1.0f - t; /* triangle wave, 0..0.5 */
                B[x] = sin_p(u + warp * B[x] + 1.2f * t);
            }
            break;
        default: /* FAM_PLAID: two sets of bands */
            for (int x = 0; x < w; x++, u += ca, v -= sa) {
                float a = sin_p(u + warp * B[x]), b = sin_p(v);
                B[x] = (a > b ? a : b) * 1.4f - 0.4f;
            }
            break;
        }
        /* Colour: palette mix by the pattern, times the shading field. */
        const float d0 = colB[0] - colA[0], d1 = colB[1] - colA[1], d2 = colB[2] - colA[2];
        const float hs = 0.5f * sharp, lx0 = lit - gx * 0.5f * (float)w;
        for (int x = 0; x < w; x++) {
            float p = clampf(0.5f + hs * B[x], 0.0f, 1.0f);
            float l = clampf((1.0f + contrast * A[x]) * (lx0 + gx * (float)x), 0.2f, 1.6f);
            lum[x] = l;
            float k = 255.0f * l;
            px[3 * x + 0] = (uint8_t)clampf((colA[0] + d0 * p) * k, lo, hi);
            px[3 * x + 1] = (uint8_t)clampf((colA[1] + d1 * p) * k, lo, hi);
            px[3 * x + 2] = (uint8_t)clampf((colA[2] + d2 * p) * k, lo, hi);
        }
    }
    for (int i = 0; i <= N_OCT; i++) octave_free(&oct[i]);

    distractors(cv, &r, S);
    grain(cv, &r);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Encoding                                                                  */

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
} jpeg_err;

static void jpeg_err_exit(j_common_ptr cinfo)
{
    jpeg_err *e = (jpeg_err *)cinfo->err;
    e->pub.format_message(cinfo, e->msg);
    longjmp(e->jb, 1);
}

static void jpeg_err_quiet(j_common_ptr cinfo, int level)
{
    (void)cinfo;
    (void)level;
}

/* Encode into fp. Returns 0, or -1 with errbuf filled. */
static int write_jpeg(FILE *fp, const canvas *cv, int quality, char *errbuf, size_t errlen)
{
    struct jpeg_compress_struct ci;
    jpeg_err je;
    memset(&ci, 0, sizeof ci);
    ci.err = jpeg_std_error(&je.pub);
    je.pub.error_exit = jpeg_err_exit;
    je.pub.emit_message = jpeg_err_quiet;
    je.msg[0] = '\0';
    if (setjmp(je.jb)) {
        snprintf(errbuf, errlen, "libjpeg: %s", je.msg);
        jpeg_destroy_compress(&ci);
        return -1;
    }
    jpeg_create_compress(&ci);
    jpeg_stdio_dest(&ci, fp);
    ci.image_width = (JDIMENSION)cv->w;
    ci.image_height = (JDIMENSION)cv->h;
    ci.input_components = 3;
    ci.in_color_space = JCS_RGB;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, quality, TRUE);
    jpeg_start_compress(&ci, TRUE);
    while (ci.next_scanline < ci.image_height) {
        JSAMPROW row = (JSAMPROW)(cv->rgb + (size_t)ci.next_scanline * (size_t)cv->w * 3);
        jpeg_write_scanlines(&ci, &row, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    return 0;
}

typedef struct {
    char *errbuf;
    size_t errlen;
} png_errctx;

static void png_err_fn(png_structp png, png_const_charp msg)
{
    png_errctx *e = (png_errctx *)png_get_error_ptr(png);
    snprintf(e->errbuf, e->errlen, "libpng: %s", msg);
    png_longjmp(png, 1);
}

static void png_warn_fn(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;
}

static int write_png(FILE *fp, const canvas *cv, char *errbuf, size_t errlen)
{
    png_errctx ctx = {errbuf, errlen};
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &ctx, png_err_fn, png_warn_fn);
    if (!png) {
        snprintf(errbuf, errlen, "libpng: out of memory");
        return -1;
    }
    png_infop info = png_create_info_struct(png);
    if (!info) {
        png_destroy_write_struct(&png, NULL);
        snprintf(errbuf, errlen, "libpng: out of memory");
        return -1;
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        return -1;
    }
    png_init_io(png, fp);
    png_set_compression_level(png, 3);
    png_set_IHDR(png, info, (png_uint_32)cv->w, (png_uint_32)cv->h, 8, PNG_COLOR_TYPE_RGB,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (int y = 0; y < cv->h; y++)
        png_write_row(png, (png_const_bytep)(cv->rgb + (size_t)y * (size_t)cv->w * 3));
    png_write_end(png, info);
    png_destroy_write_struct(&png, &info);
    return 0;
}

/* Write the canvas to `path` via `path.tmp` + rename. Returns the file size or -1. */
static long long write_image(const char *path, const canvas *cv, const gen_opts *o)
{
    char tmp[4200], err[JMSG_LENGTH_MAX + 64];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *fp = fopen(tmp, "wb");
    if (!fp) {
        tool_line(stderr, "gen: cannot create '%s': %s", tmp, strerror(errno));
        return -1;
    }
    err[0] = '\0';
    int rc = o->format == FMT_PNG ? write_png(fp, cv, err, sizeof err)
                                  : write_jpeg(fp, cv, (int)o->quality, err, sizeof err);
    long long size = -1;
    if (rc == 0) {
        if (fflush(fp) != 0 || ferror(fp)) {
            snprintf(err, sizeof err, "%s", strerror(errno));
            rc = -1;
        } else {
            long pos = ftell(fp);
            size = pos;
        }
    }
    if (fclose(fp) != 0 && rc == 0) {
        snprintf(err, sizeof err, "%s", strerror(errno));
        rc = -1;
    }
    if (rc == 0 && rename(tmp, path) != 0) {
        snprintf(err, sizeof err, "rename: %s", strerror(errno));
        rc = -1;
    }
    if (rc != 0) {
        unlink(tmp);
        tool_line(stderr, "gen: cannot write '%s': %s", path, err[0] ? err : "write error");
        return -1;
    }
    return size;
}

long long gen_write_rgb(const char *path, const uint8_t *rgb, int w, int h, int png, int quality)
{
    canvas cv = {.w = w, .h = h, .rgb = (uint8_t *)rgb};
    gen_opts o = {.format = png ? FMT_PNG : FMT_JPEG, .quality = quality};
    return write_image(path, &cv, &o);
}

/* ------------------------------------------------------------------------ */
/* Filesystem                                                                */


static int digits(long v)
{
    int d = 1;
    while (v >= 10) v /= 10, d++;
    return d;
}


/* Per-image size with --size-jitter (its own stream, independent of pixels). */
static void image_size(const gen_opts *o, long index, int *w, int *h)
{
    *w = (int)o->width;
    *h = (int)o->height;
    if (o->jitter <= 0.0) return;
    tool_rng r = {tool_mix64(o->seed ^ 0x51ce51ce51ceULL) ^
                  tool_mix64((uint64_t)index * 0x9e3779b97f4a7c15ULL)};
    double fw = tool_rng_range(&r, 1.0 - o->jitter, 1.0 + o->jitter);
    double fh = tool_rng_range(&r, 1.0 - o->jitter, 1.0 + o->jitter);
    long nw = lround((double)o->width * fw), nh = lround((double)o->height * fh);
    *w = (int)(nw < 8 ? 8 : nw);
    *h = (int)(nh < 8 ? 8 : nh);
}

/* ------------------------------------------------------------------------ */

/* The last `--task` value among the arguments (before a "--"), or NULL:
 * which generator, and so which table, parses them. */
static const char *task_of(int argc, char **argv)
{
    const char *task = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) break;
        if (strncmp(argv[i], "--task=", 7) == 0) task = argv[i] + 7;
        if (strcmp(argv[i], "--task") == 0 && i + 1 < argc) task = argv[++i];
    }
    return task;
}

int cmd_gen(int argc, char **argv)
{
    gen_opts o;
    const char *task = task_of(argc, argv);
    if (task && strcmp(task, "detect") == 0) return cmd_gen_detect(argc, argv);
    if (task && strcmp(task, "audio") == 0) return gen_audio_main(argc, argv);
    int prc = parse_args(argc, argv, &o);
    if (prc < 0) return tool_args_status(prc);

    size_t dlen = strlen(o.out_dir);
    if (dlen > 3000) {
        fprintf(stderr, "gen: OUT_DIR is too long\n");
        return 2;
    }
    struct stat st;
    if (stat(o.out_dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) {
            tool_line(stderr, "gen: '%s' exists and is not a directory", o.out_dir);
            return 2;
        }
        int ne = tool_dir_nonempty(o.out_dir);
        if (ne < 0) {
            tool_line(stderr, "gen: cannot read '%s': %s", o.out_dir, strerror(errno));
            return 1;
        }
        if (ne && !o.force) {
            tool_line(stderr, "gen: '%s' exists and is not empty (use --force to write into it)",
                      o.out_dir);
            return 2;
        }
        if (ne)
            tool_line(stderr,
                      "gen: warning: '%s' is not empty: files with the names gen writes "
                      "are replaced, any others stay and remain part of the dataset",
                      o.out_dir);
    }
    if (tool_mkdir_p(o.out_dir) != 0) {
        tool_line(stderr, "gen: cannot create '%s': %s", o.out_dir, strerror(errno));
        return 1;
    }

    const int cdig = digits(o.classes - 1) < 3 ? 3 : digits(o.classes - 1);
    const int idig = digits(o.images - 1) < 6 ? 6 : digits(o.images - 1);
    const char *ext = o.format == FMT_PNG ? "png" : "jpg";
    char path[4096];
    for (long c = 0; c < o.classes; c++) {
        int n = snprintf(path, sizeof path, "%s/class_%0*ld", o.out_dir, cdig, c);
        if (n < 0 || (size_t)n >= sizeof path) {
            tool_line(stderr, "gen: path too long under '%s'", o.out_dir);
            return 1;
        }
        if (mkdir(path, 0777) != 0 &&
            (errno != EEXIST || stat(path, &st) != 0 || !S_ISDIR(st.st_mode))) {
            if (errno == EEXIST) errno = ENOTDIR;
            tool_line(stderr, "gen: cannot create '%s': %s", path, strerror(errno));
            return 1;
        }
    }

    sin_init();
    canvas cv;
    memset(&cv, 0, sizeof cv);
    size_t cap = 0; /* pixels allocated */
    int cap_w = 0;
    int status = 0;
    const int progress = !o.quiet && isatty(STDERR_FILENO);
    double t0 = tool_now_s(), last = t0;
    long long total = 0;
    long done = 0;

    for (long i = 0; i < o.images; i++) {
        int w, h;
        image_size(&o, i, &w, &h);
        size_t npx = (size_t)w * (size_t)h;
        if (npx > cap || w > cap_w) {
            free(cv.rgb);
            free(cv.lum);
            free(cv.row_a);
            free(cv.row_b);
            size_t nc = npx > cap ? npx : cap;
            int ncw = w > cap_w ? w : cap_w;
            cv.rgb = malloc(nc * 3);
            cv.lum = malloc(nc * sizeof(float));
            cv.row_a = malloc((size_t)ncw * sizeof(float));
            cv.row_b = malloc((size_t)ncw * sizeof(float));
            if (!cv.rgb || !cv.lum || !cv.row_a || !cv.row_b) {
                fprintf(stderr, "gen: out of memory for a %dx%d image\n", w, h);
                status = 1;
                break;
            }
            cap = nc;
            cap_w = ncw;
        }
        cv.w = w;
        cv.h = h;
        if (render(&cv, &o, i) != 0) {
            fprintf(stderr, "gen: out of memory rendering image %ld\n", i);
            status = 1;
            break;
        }
        int n = snprintf(path, sizeof path, "%s/class_%0*ld/img_%0*ld.%s", o.out_dir, cdig,
                         i % o.classes, idig, i, ext);
        if (n < 0 || (size_t)n >= sizeof path) { /* cannot happen: OUT_DIR length is bounded */
            tool_line(stderr, "gen: path too long under '%s'", o.out_dir);
            status = 1;
            break;
        }
        long long sz = write_image(path, &cv, &o);
        if (sz < 0) {
            status = 1;
            break;
        }
        total += sz;
        done++;
        if (progress) {
            double t = tool_now_s();
            if (t - last >= 0.1 || done == o.images) {
                fprintf(stderr, "\rgen: %ld/%ld images, %.1f MB", done, o.images,
                        (double)total / 1e6);
                fflush(stderr);
                last = t;
            }
        }
    }
    free(cv.rgb);
    free(cv.lum);
    free(cv.row_a);
    free(cv.row_b);
    free(cv.tmp);
    if (progress) fprintf(stderr, "\r\033[K");
    if (status != 0) return status;

    double el = tool_now_s() - t0;
    tool_line(stderr, "gen: wrote %ld images in %ld classes to %s (%.1f MB, mean %.1f KB) in %.1f s",
              done, o.classes, o.out_dir, (double)total / 1e6,
              done ? (double)total / (double)done / 1e3 : 0.0, el);
    return 0;
}
