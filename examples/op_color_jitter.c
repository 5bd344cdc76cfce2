/*
 * op_color_jitter.c — an example user op (nostall_op.h): the image's
 * centre square, resized to SIZE x SIZE (bilinear or nearest), then
 * torchvision ColorJitter-like brightness, contrast and saturation changes
 * with factors drawn from the item's random stream, applied in a random
 * order. Output: "image" uint8 [SIZE, SIZE, 3] (HWC). In mode=eval the
 * colours are left alone (the resize only).
 *
 * Build (CMake builds it as examples/libop_color_jitter.so):
 *   cc -O2 -shared -fPIC -fvisibility=hidden -I include \
 *      examples/op_color_jitter.c -o libop_color_jitter.so
 * Run:
 *   nostall bench DATA --op-library ./libop_color_jitter.so \
 *       --op-args "size=224 brightness=0.4 contrast=0.4 saturation=0.4"
 *
 * op_args: space-separated key=value; keys: size (default: the crop
 * option), brightness, contrast, saturation (each f: factor uniform in
 * [max(0, 1 - f), 1 + f], as ColorJitter; default 0.4), resize
 * (bilinear|nearest, default bilinear).
 *
 * Threads: run is called concurrently; the op's state is read-only, and
 * each worker thread has its own scratch (create_worker), a table of
 * source columns grown as needed.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nostall_op.h"

typedef struct jitter {
    uint32_t size;
    double brightness, contrast, saturation;
    int nearest, train;
} jitter;

typedef struct scratch {
    float *xs; /* source x of each output column */
    size_t cap;
} scratch;

/* One key=value of op_args. */
static int parse_one(jitter *j, char *tok, char *msg, size_t msgn)
{
    char *eq = strchr(tok, '='), *end = NULL;
    if (!eq) {
        snprintf(msg, msgn, "op_args: '%.200s' is not key=value", tok);
        return -1;
    }
    *eq = '\0';
    const char *key = tok, *val = eq + 1;
    if (strcmp(key, "resize") == 0) {
        if (strcmp(val, "nearest") != 0 && strcmp(val, "bilinear") != 0) {
            snprintf(msg, msgn, "op_args: resize=%.200s (bilinear or nearest)", val);
            return -1;
        }
        j->nearest = strcmp(val, "nearest") == 0;
        return 0;
    }
    double v = strtod(val, &end);
    if (!*val || *end || !(v >= 0) || v > 100000) {
        snprintf(msg, msgn, "op_args: %.100s=%.200s is not a number in 0..100000", key, val);
        return -1;
    }
    if (strcmp(key, "size") == 0 && v >= 1 && v <= 8192 && v == floor(v))
        j->size = (uint32_t)v;
    else if (strcmp(key, "brightness") == 0)
        j->brightness = v;
    else if (strcmp(key, "contrast") == 0)
        j->contrast = v;
    else if (strcmp(key, "saturation") == 0)
        j->saturation = v;
    else {
        snprintf(msg, msgn,
                 "op_args: unknown key '%.100s' or bad value '%.200s' (size is 1..8192; "
                 "keys: size, brightness, contrast, saturation, resize)",
                 key, val);
        return -1;
    }
    return 0;
}

/* op_args: key=value words separated by spaces or tabs. */
static int parse_args(jitter *j, const char *args, char *msg, size_t msgn)
{
    char buf[1024];
    if (strlen(args) >= sizeof buf) {
        snprintf(msg, msgn, "op_args: longer than %zu characters", sizeof buf - 1);
        return -1;
    }
    snprintf(buf, sizeof buf, "%s", args);
    for (char *p = buf; *p;) {
        while (*p == ' ' || *p == '\t') p++;
        if (!*p) break;
        char *tok = p;
        while (*p && *p != ' ' && *p != '\t') p++;
        if (*p) *p++ = '\0';
        if (parse_one(j, tok, msg, msgn) < 0) return -1;
    }
    return 0;
}

static int jitter_create(void *ctx, nostall_op_setup *s, void **state)
{
    (void)ctx;
    jitter *j = calloc(1, sizeof *j);
    if (!j) {
        snprintf(s->message, sizeof s->message, "out of memory");
        return NOSTALL_E_NOMEM;
    }
    j->size = s->crop ? s->crop : 224;
    j->brightness = j->contrast = j->saturation = 0.4;
    j->train = (int)s->train;
    if (parse_args(j, s->args, s->message, sizeof s->message) < 0) {
        free(j);
        return NOSTALL_E_OPTION;
    }
    s->nfields = 1;
    s->image_field = 0;
    nostall_op_field *f = &s->fields[0];
    snprintf(f->name, sizeof f->name, "image");
    f->dtype = NOSTALL_DTYPE_UINT8;
    f->ndim = 3;
    f->shape[0] = f->shape[1] = j->size;
    f->shape[2] = 3;
    f->shape_field = -1;
    *state = j;
    return 0;
}

static void jitter_destroy(void *state) { free(state); }

static int jitter_worker(void *state, void **worker)
{
    (void)state;
    *worker = calloc(1, sizeof(scratch));
    return *worker ? 0 : NOSTALL_E_NOMEM;
}

static void jitter_free_worker(void *state, void *worker)
{
    (void)state;
    scratch *w = worker;
    if (w) free(w->xs);
    free(w);
}

static inline uint8_t clamp_u8(float v)
{
    return v <= 0.0f ? 0 : v >= 255.0f ? 255 : (uint8_t)(v + 0.5f);
}

/* The centre square of the input, resized to size x size into dst. */
static int resize_centre(const jitter *j, scratch *w, const nostall_op_item *it, uint8_t *dst)
{
    uint32_t side = it->width < it->height ? it->width : it->height, n = j->size;
    double x0 = (it->width - side) / 2.0, y0 = (it->height - side) / 2.0, step = (double)side / n;
    if (w->cap < n) {
        float *xs = realloc(w->xs, n * sizeof *xs);
        if (!xs) return -1;
        w->xs = xs, w->cap = n;
    }
    for (uint32_t x = 0; x < n; x++) w->xs[x] = (float)(x0 + (x + 0.5) * step - 0.5);
    for (uint32_t y = 0; y < n; y++) {
        double sy = y0 + (y + 0.5) * step - 0.5;
        if (sy < 0) sy = 0;
        if (sy > it->height - 1) sy = it->height - 1;
        uint32_t ya = (uint32_t)sy, yb = ya + 1 < it->height ? ya + 1 : ya;
        float fy = j->nearest ? 0.0f : (float)(sy - ya);
        if (j->nearest && sy - ya >= 0.5) ya = yb;
        const uint8_t *ra = it->data + (size_t)ya * it->stride,
                      *rb = it->data + (size_t)yb * it->stride;
        uint8_t *out = dst + (size_t)y * n * 3;
        for (uint32_t x = 0; x < n; x++) {
            float sx = w->xs[x] < 0               ? 0
                       : w->xs[x] > it->width - 1 ? (float)(it->width - 1)
                                                  : w->xs[x];
            uint32_t xa = (uint32_t)sx, xb = xa + 1 < it->width ? xa + 1 : xa;
            float fx = j->nearest ? 0.0f : sx - xa;
            if (j->nearest && sx - xa >= 0.5f) xa = xb;
            for (int c = 0; c < 3; c++) {
                float top = ra[xa * 3 + c] + fx * (ra[xb * 3 + c] - ra[xa * 3 + c]);
                float bot = rb[xa * 3 + c] + fx * (rb[xb * 3 + c] - rb[xa * 3 + c]);
                out[x * 3 + c] = clamp_u8(top + fy * (bot - top));
            }
        }
    }
    return 0;
}

static inline float gray(const uint8_t *p)
{
    return 0.2989f * p[0] + 0.587f * p[1] + 0.114f * p[2];
}

/* ColorJitter's three colour changes, in a random order, in place. */
static void color_jitter(const jitter *j, nostall_op_item *it, uint8_t *img, size_t pixels)
{
    double f[3] = {1, 1, 1}, amount[3] = {j->brightness, j->contrast, j->saturation};
    int order[3] = {0, 1, 2};
    for (int i = 2; i > 0; i--) { /* Fisher-Yates, from the item's stream */
        int k = (int)nostall_op_random_below(it, (uint64_t)i + 1), t = order[i];
        order[i] = order[k], order[k] = t;
    }
    for (int i = 0; i < 3; i++)
        if (amount[i] > 0)
            f[i] = nostall_op_random_uniform(it, amount[i] < 1 ? 1 - amount[i] : 0, 1 + amount[i]);
    for (int s = 0; s < 3; s++) {
        int op = order[s];
        float k = (float)f[op];
        if (k == 1.0f) continue;
        if (op == 0) { /* brightness: blend with black */
            for (size_t i = 0; i < pixels * 3; i++) img[i] = clamp_u8(img[i] * k);
        } else if (op == 1) { /* contrast: blend with the mean grey */
            double sum = 0;
            for (size_t i = 0; i < pixels; i++) sum += gray(img + i * 3);
            float m = (float)(sum / (double)pixels);
            for (size_t i = 0; i < pixels * 3; i++) img[i] = clamp_u8(k * img[i] + (1 - k) * m);
        } else { /* saturation: blend with each pixel's grey */
            for (size_t i = 0; i < pixels; i++) {
                float g = gray(img + i * 3);
                for (int c = 0; c < 3; c++)
                    img[i * 3 + c] = clamp_u8(k * img[i * 3 + c] + (1 - k) * g);
            }
        }
    }
}

static int jitter_run(void *state, void *worker, nostall_op_item *it)
{
    const jitter *j = state;
    uint8_t *img = it->dst[0];
    if (it->width == 0 || it->height == 0)
        return nostall_op_fail(it, NOSTALL_E_CORRUPT, "empty image");
    if (resize_centre(j, worker, it, img) < 0)
        return nostall_op_fail(it, NOSTALL_E_NOMEM, "out of memory");
    if (j->train) color_jitter(j, it, img, (size_t)j->size * j->size);
    return 0;
}

NOSTALL_OP_EXPORT const nostall_op nostall_op_v1 = {
    .version = NOSTALL_OP_VERSION,
    .size = sizeof(nostall_op),
    .name = "color_jitter",
    .input = NOSTALL_OP_INPUT_IMAGE,
    .create = jitter_create,
    .destroy = jitter_destroy,
    .create_worker = jitter_worker,
    .free_worker = jitter_free_worker,
    .run = jitter_run,
};
