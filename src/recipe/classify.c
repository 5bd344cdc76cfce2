/*
 * classify.c — the image classification recipe: a JPEG/PNG as an image in
 * one of three modes, plus its label.
 *
 *   image_mode=crop    train: RandomResizedCrop + flip; eval: Resize(resize)
 *                      of the shorter side + CenterCrop; to out_height x
 *                      out_width (0: crop, so crop x crop by default).
 *   image_mode=resize  the whole image to out_height x out_width: stretched
 *                      (fit=stretch), or with its aspect kept and centred in
 *                      a letterbox (fit=pad; the border is pixel value 0
 *                      before normalization). Train: the flip only.
 *   image_mode=full    every image at its own size, no resampling (train:
 *                      the flip only), in a ragged field: a room of
 *                      full_max_pixels * 3 elements with the item's shape in
 *                      "image_shape" (int64 [3]: (3, h, w) for NCHW, (h, w,
 *                      3) for NHWC; the rest of the room zeroed); a larger
 *                      image is a bad item.
 * Every mode in any layout (NCHW / NHWC; auto: NCHW for float outputs,
 * NHWC for uint8) and dtype (uint8 as decoded; float32, float16, bfloat16
 * normalized by mean/std): augment.h's output contract.
 *
 * Items: the files of an ImageFolder or a list (dataset/index.h), one item
 * per file. Fields: "image", then (full) "image_shape", then "label" by the
 * index's label kind: int64 (ImageFolder, integer lists), float32 (float
 * lists), float32 [classes] multi-hot (multi-label lists: 1 for each label
 * of the item), or no label field (lists of paths alone).
 * Random draws (train): the stream hash(seed, epoch, item,
 * NST_RNG_AUGMENT_COPY(copy)) gives the crop in torchvision's order
 * (scale, log-ratio, then top/left), then the flip; resize and full draw
 * the flip alone.
 *
 * decode_device=gpu (crop and resize modes): make goes through the
 * worker's GPU route (gpu/gpu.h; make_gpu), planned with the same draws;
 * make_many takes a worker's ready items through the route at once (one
 * batched decode of their JPEGs; worker.c), each with make's bytes;
 * echo_point=decode's decode stays on the CPU, its transform re-augments
 * the kept image on the route (transform_gpu); full stays on the CPU.
 *
 * make: probe the header, plan the window, decode only what it needs
 * (decode/: crop mode the window's region; crop and resize at the smallest
 * DCT scale that keeps the window at least the output's size), resample it
 * into the slot (augment/). decode (echo_point=decode): the same decode
 * wherever make's does not depend on the use's draws -- eval crops, resize,
 * full -- so transform(decode) == make byte for byte there; train crops
 * keep the whole image at full scale for every copy's window, so they equal
 * make's bytes when make decodes at full scale too (a window under twice
 * the output on one side, e.g. 224 crops of images with a side under 448
 * pixels) and differ by the DCT scaling otherwise (docs/images.md).
 *
 * Workers call the stages concurrently, each with its own
 * nst_recipe_worker; the recipe itself is read-only after create.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "augment/augment.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/rng.h"
#include "decode/decode.h"
#include "gpu/gpu.h"
#include "recipe/gpu_many.h"
#include "recipe/recipe.h"

typedef struct classify {
    nst_recipe base;
    uint64_t seed, max_pixels, full_max_pixels;
    int train, mode, pad;
    uint32_t out_w, out_h, resize; /* crop, resize: the item's size */
    double scale_min, scale_max, ratio_min, ratio_max, flip_prob;
    int dtype, layout; /* NST_OUT_*, the layout resolved */
    int gpu;           /* decode_device=gpu: crop and resize go the GPU route */
    unsigned gpu_id;
    uint32_t shape_field; /* full: "image_shape"             */
    nst_norm norm;
} classify;

struct nst_recipe_worker {
    const classify *r;
    nst_decoder *dec;
    nst_augmenter *aug;
    nst_gpu_route *route; /* decode_device=gpu */
    nst_gpu_backend be;
    nst_gpu_many many; /* make_many's, per item (grow-only) */
};

/* The window and flip of use `copy` of an item of width x height. */
static void plan(const classify *r, const nst_item_ctx *c, uint32_t width, uint32_t height,
                 nst_window *win, int *flip)
{
    *flip = 0;
    if (r->mode != NOSTALL_IMAGE_CROP) {
        *win = (nst_window){0, 0, width, height};
    } else if (!r->train) {
        nst_crop_center_hw(width, height, r->resize, r->out_w, r->out_h, win);
        return;
    }
    if (!r->train) return;
    nst_rng rng;
    nst_rng_seed(&rng, nst_hash4(r->seed, c->epoch, c->index, NST_RNG_AUGMENT_COPY(c->copy)));
    if (r->mode == NOSTALL_IMAGE_CROP)
        nst_crop_random_resized(width, height, r->scale_min, r->scale_max, r->ratio_min,
                                r->ratio_max, &rng, win);
    *flip = nst_rng_double(&rng) < r->flip_prob;
}

/* The output of an image of the file's own width x height into dst. */
static nst_output output_of(const classify *r, uint32_t width, uint32_t height, void *dst)
{
    nst_output o = {.dtype = r->dtype,
                    .layout = r->layout,
                    .dst = dst,
                    .norm = &r->norm,
                    .width = r->out_w,
                    .height = r->out_h};
    if (r->mode == NOSTALL_IMAGE_FULL) {
        o.width = width;
        o.height = height;
    } else if (r->mode == NOSTALL_IMAGE_RESIZE && r->pad) {
        nst_letterbox(width, height, &o);
    }
    return o;
}

/* image_mode=full: an image must fit the item's room. */
static int full_check(const classify *r, const nst_item_ctx *c, uint32_t width, uint32_t height)
{
    const uint64_t px = (uint64_t)width * height;
    if (r->mode != NOSTALL_IMAGE_FULL || px <= r->full_max_pixels) return 0;
    return nst_error(NOSTALL_E_TOO_MANY_PIXELS,
                     "%s: image %ux%u has %" PRIu64 " pixels, over full_max_pixels = %" PRIu64
                     " (image_mode=full keeps each image in a place of that many pixels)",
                     c->path, width, height, px, r->full_max_pixels);
}

/* Write the image of `win` of a decoded image into the item's image field
 * (and its shape), and its label. */
static int augment(nst_recipe_worker *w, const nst_item_ctx *c, const nst_image *img,
                   const nst_window *win, int flip, nst_recipe_times *t)
{
    const classify *r = w->r;
    const nst_output out = output_of(r, img->src_width, img->src_height, c->dst[0]);
    uint64_t t0 = nst_now_ns();
    int rc;
    if (r->mode == NOSTALL_IMAGE_FULL) {
        rc = full_check(r, c, img->src_width, img->src_height);
        if (rc == 0) rc = nst_augment_copy(w->aug, img, flip, &out);
    } else {
        rc = nst_augment(w->aug, img, win, flip, &out);
    }
    t->augment_ns += nst_now_ns() - t0;
    if (rc < 0) return rc;
    if (r->mode == NOSTALL_IMAGE_FULL) {
        /* the rest of the room zeroed: a batch's bytes (and checksum) are
         * then a function of the items alone, as with task=bytes */
        const size_t used = nst_output_bytes(&out), room = r->base.fields[0].item_bytes;
        memset(c->dst[0] + used, 0, room - used);
        const int64_t hw[2] = {img->height, img->width};
        int64_t shape[3] = {3, hw[0], hw[1]};
        if (r->layout == NST_OUT_NHWC) shape[0] = hw[0], shape[1] = hw[1], shape[2] = 3;
        memcpy(c->dst[r->shape_field], shape, sizeof shape);
    }
    nst_label_write(&r->base, c);
    t->augment_items++;
    t->augment_bytes += nst_output_bytes(&out);
    return 0;
}

/* What make decodes of an image of info's size for window `win` (the
 * region and the output size hints of nst_decode). */
static void decode_hints(const classify *r, const nst_image_info *info, const nst_window *win,
                         const nst_window **roi, uint32_t *ow, uint32_t *oh)
{
    *roi = NULL;
    *ow = *oh = 0;
    if (r->mode == NOSTALL_IMAGE_FULL) return;
    const nst_output o = output_of(r, info->width, info->height, NULL);
    *roi = win;
    *ow = o.inner_width ? o.inner_width : o.width;
    *oh = o.inner_height ? o.inner_height : o.height;
}

/* decode_device=gpu (crop, resize): the item through the worker's GPU
 * route (gpu/route.c: the decode of the window's region, the kernels),
 * planned with the same draws as the CPU path. The decode is at full scale,
 * so the bytes equal the CPU path's where it decodes at full scale too. */
static int make_gpu(nst_recipe_worker *w, const nst_item_ctx *c, const uint8_t *data, size_t len,
                    nst_recipe_times *t)
{
    const classify *r = w->r;
    nst_image_info info;
    uint64_t t1 = nst_now_ns();
    int rc = nst_decode_probe(w->dec, data, len, c->path, &info);
    if (rc < 0) return rc;
    nst_gpu_job job = {.data = data, .len = len, .path = c->path};
    plan(r, c, info.width, info.height, &job.win, &job.flip);
    job.out = output_of(r, info.width, info.height, NULL);
    const size_t bytes = nst_output_bytes(&job.out);
    int st, engine;
    char why[1][NST_GPU_REASON];
    w->be.out_device = c->dst_device; /* the device ring's memory, or the host slot */
    rc = nst_gpu_route_batch(w->route, &w->be, &job, 1, c->dst[0], bytes, &st, why, &engine);
    t->decode_ns += nst_now_ns() - t1;
    if (rc < 0) return rc;
    if (st != NST_GPU_DECODED) return nst_error(nst_gpu_route_code(w->route, 0), "%s", why[0]);
    t->decode_items++;
    t->gpu_hw_items += engine == NST_GPU_ENGINE_HW; /* the stats' per-backend split */
    t->gpu_default_items += engine == NST_GPU_ENGINE_DEFAULT;
    t->gpu_cpu_items += engine == NST_GPU_ENGINE_CPU;
    t->decode_pixels += (uint64_t)info.width * info.height;
    nst_label_write(&r->base, c);
    t->augment_items++;
    t->augment_bytes += bytes;
    return 0;
}

/* make_many's per-item write beside the image: the label. */
typedef struct many_ctx {
    const classify *r;
    const nst_item_ctx *c;
} many_ctx;

static void many_done(void *ctx, size_t k, size_t i)
{
    const many_ctx *x = ctx;
    (void)k;
    nst_label_write(&x->r->base, &x->c[i]);
}

/* decode_device=gpu: n items through the route at once (gpu_many.h: one
 * decode call for their JPEGs), each planned, written and reported as
 * make_gpu does it alone; an error of the whole call is every item's. */
static int make_many(nst_recipe_worker *w, const nst_item_ctx *c, const uint8_t *const *data,
                     const size_t *len, size_t n, int *rc, char *msg, size_t msgn,
                     nst_recipe_times *t)
{
    const classify *r = w->r;
    if (!w->route) return NOSTALL_E_UNSUPPORTED;
    if (!n) return 0;
    int e = nst_gpu_many_reserve(&w->many, n);
    for (size_t i = 0; e < 0 && i < n; i++) rc[i] = e, nst_gpu_many_error(msg + i * msgn, msgn, e);
    if (e < 0) return 0;
    nst_gpu_job *jobs = nst_gpu_many_jobs(&w->many);
    uint8_t **dst = nst_gpu_many_dst(&w->many);
    uint64_t *px = nst_gpu_many_px(&w->many), t1 = nst_now_ns();
    int *idx = nst_gpu_many_idx(&w->many, n);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        nst_image_info info;
        if ((rc[i] = nst_decode_probe(w->dec, data[i], len[i], c[i].path, &info)) < 0) {
            nst_gpu_many_error(msg + i * msgn, msgn, rc[i]);
            continue;
        }
        jobs[m] = (nst_gpu_job){.data = data[i], .len = len[i], .path = c[i].path};
        plan(r, &c[i], info.width, info.height, &jobs[m].win, &jobs[m].flip);
        jobs[m].out = output_of(r, info.width, info.height, NULL);
        dst[m] = c[i].dst[0];
        px[m] = (uint64_t)info.width * info.height;
        idx[m++] = (int)i;
    }
    many_ctx x = {r, c};
    nst_gpu_many_route(&w->many, w->route, &w->be, c[0].dst_device, n, m, rc, msg, msgn, t, t1,
                       many_done, &x);
    return 0;
}

static int make(nst_recipe_worker *w, const nst_item_ctx *c, const uint8_t *data, size_t len,
                nst_recipe_times *t)
{
    if (w->route) return make_gpu(w, c, data, len, t);
    nst_image_info info;
    nst_window win;
    nst_image img;
    int flip, rc;
    uint64_t t1 = nst_now_ns();
    rc = nst_decode_probe(w->dec, data, len, c->path, &info);
    if (rc == 0) rc = full_check(w->r, c, info.width, info.height);
    if (rc == 0) {
        const nst_window *roi;
        uint32_t ow, oh;
        plan(w->r, c, info.width, info.height, &win, &flip);
        decode_hints(w->r, &info, &win, &roi, &ow, &oh);
        rc = nst_decode(w->dec, data, len, c->path, roi, ow, oh, &img);
    }
    t->decode_ns += nst_now_ns() - t1;
    if (rc < 0) return rc;
    t->decode_items++;
    t->decode_pixels += (uint64_t)img.width * img.height;
    return augment(w, c, &img, &win, flip, t);
}

/* What make decodes, when that does not depend on the use's draws (eval
 * crops, resize, full); train crops: the whole image at full scale. Into
 * out->buf (RGB rows, no padding); meta: nst_image. */
static int decode(nst_recipe_worker *w, const nst_item_ctx *c, const uint8_t *data, size_t len,
                  nst_decoded *out, nst_recipe_times *t)
{
    const classify *r = w->r;
    nst_image_info info;
    nst_image img;
    uint64_t t1 = nst_now_ns();
    int rc = nst_decode_probe(w->dec, data, len, c->path, &info);
    if (rc == 0) rc = full_check(r, c, info.width, info.height);
    if (rc == 0) {
        const nst_window *roi = NULL;
        uint32_t ow = 0, oh = 0;
        nst_window win;
        int flip;
        if (!(r->mode == NOSTALL_IMAGE_CROP && r->train)) {
            plan(r, c, info.width, info.height, &win, &flip); /* the window: no draw */
            decode_hints(r, &info, &win, &roi, &ow, &oh);
        }
        rc = nst_decode(w->dec, data, len, c->path, roi, ow, oh, &img);
    }
    size_t row = 0, bytes = 0;
    if (rc == 0 &&
        (nst_mul_overflow(img.width, 3, &row) || nst_mul_overflow(row, img.height, &bytes)))
        rc = nst_error(NOSTALL_E_TOO_MANY_PIXELS, "decode: %s: image too large to echo", c->path);
    if (rc == 0) rc = nst_buf_reserve(&out->buf, bytes ? bytes : 1);
    if (rc == 0) {
        for (uint32_t y = 0; y < img.height; y++)
            memcpy(out->buf.data + (size_t)y * row, img.data + (size_t)y * img.stride, row);
        img.data = NULL; /* transform points it at the buffer */
        img.stride = row;
        _Static_assert(sizeof img <= sizeof out->meta, "nst_image fits nst_decoded.meta");
        memcpy(out->meta, &img, sizeof img);
        out->len = bytes;
        t->decode_items++;
        t->decode_pixels += (uint64_t)img.width * img.height;
    }
    t->decode_ns += nst_now_ns() - t1;
    return rc;
}

/* decode_device=gpu: the kept decoded image re-augmented on the route
 * (put to the device, the kernels), as augment() would on the CPU. */
static int transform_gpu(nst_recipe_worker *w, const nst_item_ctx *c, const nst_image *img,
                         const nst_window *win, int flip, nst_recipe_times *t)
{
    const classify *r = w->r;
    nst_gpu_job job = {.path = c->path, .win = *win, .flip = flip};
    job.out = output_of(r, img->src_width, img->src_height, NULL);
    const size_t bytes = nst_output_bytes(&job.out);
    w->be.out_device = c->dst_device;
    uint64_t t0 = nst_now_ns();
    int rc = nst_gpu_route_image(w->route, &w->be, img, &job, c->dst[0], bytes);
    t->augment_ns += nst_now_ns() - t0;
    if (rc < 0) return rc;
    nst_label_write(&r->base, c);
    t->augment_items++;
    t->augment_bytes += bytes;
    return 0;
}

static int transform(nst_recipe_worker *w, const nst_item_ctx *c, const nst_decoded *in,
                     nst_recipe_times *t)
{
    nst_image img;
    nst_window win;
    int flip;
    memcpy(&img, in->meta, sizeof img);
    img.data = in->buf.data;
    plan(w->r, c, img.src_width, img.src_height, &win, &flip);
    if (w->route) return transform_gpu(w, c, &img, &win, flip, t);
    return augment(w, c, &img, &win, flip, t);
}

static void worker_free(nst_recipe_worker *w)
{
    if (!w) return;
    nst_decoder_free(w->dec);
    nst_augmenter_free(w->aug);
    nst_gpu_route_free(w->route);
    if (w->be.destroy) w->be.destroy(w->be.ctx);
    nst_gpu_many_free(&w->many);
    free(w);
}

static int worker_create(const nst_recipe *base, nst_recipe_worker **out)
{
    const classify *r = (const classify *)base;
    nst_recipe_worker *w = calloc(1, sizeof *w);
    int rc;
    *out = NULL;
    if (!w) return nst_error(NOSTALL_E_NOMEM, "recipe: out of memory");
    w->r = r;
    if ((rc = nst_decoder_create(&w->dec, r->max_pixels)) < 0 ||
        (rc = nst_augmenter_create(&w->aug)) < 0) {
        worker_free(w);
        return rc;
    }
    if (r->gpu && r->mode != NOSTALL_IMAGE_FULL) {
        if ((rc = nst_gpu_route_create(&w->route, r->max_pixels)) < 0 ||
            (rc = nst_gpu_backend_open(&w->be, r->gpu_id, r->max_pixels)) < 0) {
            worker_free(w);
            return rc;
        }
    }
    *out = w;
    return 0;
}


static void *decoder(nst_recipe_worker *w) { return w->dec; }

static void recipe_free(nst_recipe *r) { free(r); }

static const nst_recipe_ops classify_ops = {
    .name = "classify",
    .worker_create = worker_create,
    .worker_free = worker_free,
    .make = make,
    .make_many = make_many,
    .decode = decode,
    .transform = transform,
    .decoder = decoder,
    .free = recipe_free,
};

/* The options of the image: mode, size, fit, dtype and layout. */
static int image_options(classify *r, const nst_optval *v)
{
    static const struct {
        uint64_t opt;
        int dtype;
        nostall_dtype field;
    } dtypes[] = {{NOSTALL_OUTPUT_FLOAT, NST_OUT_F32, NOSTALL_DTYPE_FLOAT32},
                  {NOSTALL_OUTPUT_UINT8, NST_OUT_U8, NOSTALL_DTYPE_UINT8},
                  {NOSTALL_OUTPUT_FLOAT16, NST_OUT_F16, NOSTALL_DTYPE_FLOAT16},
                  {NOSTALL_OUTPUT_BFLOAT16, NST_OUT_BF16, NOSTALL_DTYPE_BFLOAT16}};
    const uint32_t crop = (uint32_t)v[NOSTALL_OPT_CROP].u;
    const uint64_t layout = v[NOSTALL_OPT_LAYOUT].u;
    size_t i = 0;
    while (i < sizeof dtypes / sizeof dtypes[0] && dtypes[i].opt != v[NOSTALL_OPT_OUTPUT].u) i++;
    if (i == sizeof dtypes / sizeof dtypes[0])
        return nst_error(NOSTALL_E_OPTION, "output: unknown value %" PRIu64,
                         v[NOSTALL_OPT_OUTPUT].u);
    r->dtype = dtypes[i].dtype;
    r->base.fields[0].dtype = dtypes[i].field;
    r->layout = layout == NOSTALL_LAYOUT_OPT_NCHW   ? NST_OUT_NCHW
                : layout == NOSTALL_LAYOUT_OPT_NHWC ? NST_OUT_NHWC
                : r->dtype == NST_OUT_U8            ? NST_OUT_NHWC
                                                    : NST_OUT_NCHW;
    r->mode = (int)v[NOSTALL_OPT_IMAGE_MODE].u;
    r->pad = v[NOSTALL_OPT_FIT].u == NOSTALL_FIT_PAD;
    r->out_w = v[NOSTALL_OPT_OUT_WIDTH].u ? (uint32_t)v[NOSTALL_OPT_OUT_WIDTH].u : crop;
    r->out_h = v[NOSTALL_OPT_OUT_HEIGHT].u ? (uint32_t)v[NOSTALL_OPT_OUT_HEIGHT].u : crop;
    r->full_max_pixels = v[NOSTALL_OPT_FULL_MAX_PIXELS].u;
    if (r->pad && r->mode != NOSTALL_IMAGE_RESIZE)
        return nst_error(NOSTALL_E_OPTION,
                         "fit=pad: only image_mode=resize letterboxes (image_mode=%s does not)",
                         r->mode == NOSTALL_IMAGE_CROP ? "crop" : "full");
    if (r->mode == NOSTALL_IMAGE_FULL && (v[NOSTALL_OPT_OUT_WIDTH].u || v[NOSTALL_OPT_OUT_HEIGHT].u))
        return nst_error(NOSTALL_E_OPTION,
                         "out_height/out_width: image_mode=full keeps every image at its own "
                         "size (set full_max_pixels for the largest)");
    return 0;
}

/* The image field: [3, h, w] (NCHW) or [h, w, 3] (NHWC) of the dtype;
 * image_mode=full: a room of full_max_pixels * 3 elements, with its shape
 * in "image_shape" (int64 [3]). */
static int declare_image(classify *r)
{
    nst_field_decl *img = &r->base.fields[0];
    int rc;
    snprintf(img->name, sizeof img->name, "image");
    img->shape_field = -1;
    r->base.image_layout =
        1 + (r->layout == NST_OUT_NCHW ? NOSTALL_LAYOUT_NCHW : NOSTALL_LAYOUT_NHWC);
    if (r->mode == NOSTALL_IMAGE_FULL) {
        img->ndim = 1;
        img->shape[0] = r->full_max_pixels * 3;
        r->shape_field = 1;
        img->shape_field = (int32_t)r->shape_field;
        nst_field_decl *shape = &r->base.fields[1];
        memset(shape, 0, sizeof *shape);
        snprintf(shape->name, sizeof shape->name, "image_shape");
        shape->dtype = NOSTALL_DTYPE_INT64;
        shape->ndim = 1;
        shape->shape[0] = 3;
        shape->shape_field = -1;
        if ((rc = nst_field_finish(shape)) < 0) return rc;
        r->base.nfields = 2;

    } else {
        img->ndim = 3;
        if (r->layout == NST_OUT_NCHW)
            img->shape[0] = 3, img->shape[1] = r->out_h, img->shape[2] = r->out_w;
        else
            img->shape[0] = r->out_h, img->shape[1] = r->out_w, img->shape[2] = 3;
        r->base.nfields = 1;
    }
    return nst_field_finish(img);
}

int nst_classify_create(nst_recipe **out, const nostall_config *cfg, const char *source)
{
    const nst_optval *v = cfg->v;
    classify *r = calloc(1, sizeof *r);
    int rc;
    *out = NULL;
    if (!r) return nst_error(NOSTALL_E_NOMEM, "recipe: out of memory");
    r->base.ops = &classify_ops;
    r->base.size_hint = "crop (or out_height/out_width; image_mode=full: full_max_pixels)";
    if ((rc = image_options(r, v)) < 0) goto fail;
    if ((rc = nst_index_build_cfg(&r->base.index, source, 0, cfg)) < 0) goto fail;
    nst_recipe_items_from_index(&r->base);
    r->seed = v[NOSTALL_OPT_SEED].u;
    r->max_pixels = v[NOSTALL_OPT_MAX_PIXELS].u;
    r->train = v[NOSTALL_OPT_MODE].u == NOSTALL_MODE_TRAIN;
    /* eval crops: the shorter side before the center crop (crop * 8 / 7 of
     * the crop's larger side by default) */
    const uint32_t side = r->out_w > r->out_h ? r->out_w : r->out_h;
    r->resize = v[NOSTALL_OPT_RESIZE].u ? (uint32_t)v[NOSTALL_OPT_RESIZE].u
                                        : (uint32_t)((uint64_t)side * 8 / 7);
    if (r->resize < side) r->resize = side;
    r->scale_min = v[NOSTALL_OPT_SCALE_MIN].d;
    r->scale_max = v[NOSTALL_OPT_SCALE_MAX].d;
    r->ratio_min = v[NOSTALL_OPT_RATIO_MIN].d;
    r->ratio_max = v[NOSTALL_OPT_RATIO_MAX].d;
    r->flip_prob = v[NOSTALL_OPT_FLIP_PROB].d;
    r->gpu = v[NOSTALL_OPT_DECODE_DEVICE].u == NOSTALL_DECODE_GPU;
    r->gpu_id = (unsigned)v[NOSTALL_OPT_GPU_ID].u;
    nst_norm_init(&r->norm, v[NOSTALL_OPT_MEAN].d3, v[NOSTALL_OPT_STD].d3);
    if ((rc = declare_image(r)) < 0 || (rc = nst_label_declare(&r->base, source)) < 0) goto fail;
    r->base.item_bytes = 0;
    for (uint32_t f = 0; f < r->base.nfields; f++)
        r->base.item_bytes += r->base.fields[f].item_bytes;
    r->base.image_field = 0;
    *out = &r->base;
    return 0;
fail:
    nst_recipe_free(&r->base);
    return rc;
}
