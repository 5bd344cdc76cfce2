/*
 * classify.c — the image classification recipe: a JPEG/PNG, cropped
 * (RandomResizedCrop + flip in train mode, resize + center crop in eval),
 * as float32 NCHW normalized by mean/std or uint8 NHWC, plus its label.
 *
 * Items: the files of an ImageFolder or a list (source/index.h), one item
 * per file. Fields: "image" [3, crop, crop] float32 or [crop, crop, 3]
 * uint8, and "label" by the index's label kind: int64 (ImageFolder, integer
 * lists), float32 (float lists), float32 [classes] multi-hot (multi-label
 * lists: 1 for each label of the item), or no label field (lists of paths
 * alone).
 * Random draws (train): the stream hash(seed, epoch, item,
 * NST_RNG_AUGMENT_COPY(copy)) gives the crop in torchvision's order
 * (scale, log-ratio, then top/left), then the flip.
 *
 * make: probe the header, plan the crop window, decode only the region it
 * needs (decode/), resample it into the slot (augment/). decode: the whole
 * image (for echo_point=decode); transform: plan and resample from it.
 * Both give the same bytes (the region decode is exact).
 *
 * Workers call the stages concurrently, each with its own
 * nst_recipe_worker; the recipe itself is read-only after create.
 */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "augment/augment.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/rng.h"
#include "decode/decode.h"
#include "recipe/recipe.h"

typedef struct classify {
    nst_recipe base;
    uint64_t seed, max_pixels;
    int train, flip_float;
    uint32_t crop, resize;
    double scale_min, scale_max, ratio_min, ratio_max, flip_prob;
    int float_out;
    nst_norm norm;
} classify;


struct nst_recipe_worker {
    const classify *r;
    nst_decoder *dec;
    nst_augmenter *aug;
};

/* The crop window and flip of use `copy` of an item of width x height. */
static void plan(const classify *r, const nst_item_ctx *c, uint32_t width, uint32_t height,
                 nst_window *win, int *flip)
{
    *flip = 0;
    if (!r->train) {
        nst_crop_center(width, height, r->resize, r->crop, win);
        return;
    }
    nst_rng rng;
    nst_rng_seed(&rng, nst_hash4(r->seed, c->epoch, c->index, NST_RNG_AUGMENT_COPY(c->copy)));
    nst_crop_random_resized(width, height, r->scale_min, r->scale_max, r->ratio_min,
                            r->ratio_max, &rng, win);
    *flip = nst_rng_double(&rng) < r->flip_prob;
}

/* Resample `win` of a decoded image into the item's image field, and write
 * its label. */
static int augment(nst_recipe_worker *w, const nst_item_ctx *c, const nst_image *img,
                   const nst_window *win, int flip, nst_recipe_times *t)
{
    const classify *r = w->r;
    nst_output out = {
        .dtype = r->float_out ? NST_OUT_F32 : NST_OUT_U8,
        .size = r->crop,
        .dst = c->dst[0],
        .norm = &r->norm,
    };
    uint64_t t0 = nst_now_ns();
    int rc = nst_augment(w->aug, img, win, flip, &out);
    t->augment_ns += nst_now_ns() - t0;
    if (rc < 0) return rc;
    nst_label_write(&r->base, c);
    t->augment_items++;
    t->augment_bytes += r->base.fields[0].item_bytes;
    return 0;
}

static int make(nst_recipe_worker *w, const nst_item_ctx *c, const uint8_t *data, size_t len,
                nst_recipe_times *t)
{
    nst_image_info info;
    nst_window win;
    nst_image img;
    int flip, rc;
    uint64_t t1 = nst_now_ns();
    rc = nst_decode_probe(w->dec, data, len, c->path, &info);
    if (rc == 0) {
        plan(w->r, c, info.width, info.height, &win, &flip);
        rc = nst_decode(w->dec, data, len, c->path, &win, w->r->crop, w->r->crop, &img);
    }
    t->decode_ns += nst_now_ns() - t1;
    if (rc < 0) return rc;
    t->decode_items++;
    t->decode_pixels += (uint64_t)img.width * img.height;
    return augment(w, c, &img, &win, flip, t);
}

/* The whole image into out->buf (RGB rows, no padding); meta: nst_image. */
static int decode(nst_recipe_worker *w, const nst_item_ctx *c, const uint8_t *data, size_t len,
                  nst_decoded *out, nst_recipe_times *t)
{
    nst_image_info info;
    nst_image img;
    uint64_t t1 = nst_now_ns();
    int rc = nst_decode_probe(w->dec, data, len, c->path, &info);
    if (rc == 0) rc = nst_decode(w->dec, data, len, c->path, NULL, 0, 0, &img);
    size_t row = 0, bytes = 0;
    if (rc == 0 && (nst_mul_overflow(img.width, 3, &row) || nst_mul_overflow(row, img.height, &bytes)))
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

static int transform(nst_recipe_worker *w, const nst_item_ctx *c, const nst_decoded *in,
                     nst_recipe_times *t)
{
    nst_image img;
    nst_window win;
    int flip;
    memcpy(&img, in->meta, sizeof img);
    img.data = in->buf.data;
    plan(w->r, c, img.src_width, img.src_height, &win, &flip);
    return augment(w, c, &img, &win, flip, t);
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
        nst_decoder_free(w->dec);
        free(w);
        return rc;
    }
    *out = w;
    return 0;
}

static void worker_free(nst_recipe_worker *w)
{
    if (!w) return;
    nst_decoder_free(w->dec);
    nst_augmenter_free(w->aug);
    free(w);
}

static void *decoder(nst_recipe_worker *w) { return w->dec; }

static void recipe_free(nst_recipe *r) { free(r); }

static const nst_recipe_ops classify_ops = {
    .name = "classify",
    .worker_create = worker_create,
    .worker_free = worker_free,
    .make = make,
    .decode = decode,
    .transform = transform,
    .decoder = decoder,
    .free = recipe_free,
};

/* The image field: NCHW float32 or NHWC uint8. */
static int declare_image(classify *r, const nst_optval *v)
{
    nst_field_decl *img = &r->base.fields[0];
    uint64_t layout = v[NOSTALL_OPT_LAYOUT].u;
    if (v[NOSTALL_OPT_OUTPUT].u == NOSTALL_OUTPUT_FLOAT16 ||
        v[NOSTALL_OPT_OUTPUT].u == NOSTALL_OUTPUT_BFLOAT16)
        return nst_error(NOSTALL_E_UNSUPPORTED,
                         "output=%s: not built into this nostall yet (float and uint8 are)",
                         v[NOSTALL_OPT_OUTPUT].u == NOSTALL_OUTPUT_FLOAT16 ? "float16" : "bfloat16");
    if (v[NOSTALL_OPT_IMAGE_MODE].u != NOSTALL_IMAGE_CROP)
        return nst_error(NOSTALL_E_UNSUPPORTED,
                         "image_mode=%s: not built into this nostall yet (image_mode=crop is)",
                         v[NOSTALL_OPT_IMAGE_MODE].u == NOSTALL_IMAGE_RESIZE ? "resize" : "full");
    if ((layout == NOSTALL_LAYOUT_OPT_NHWC && r->float_out) ||
        (layout == NOSTALL_LAYOUT_OPT_NCHW && !r->float_out))
        return nst_error(NOSTALL_E_UNSUPPORTED,
                         "layout=%s with output=%s: not built into this nostall yet (float is "
                         "NCHW, uint8 NHWC)",
                         layout == NOSTALL_LAYOUT_OPT_NHWC ? "nhwc" : "nchw",
                         r->float_out ? "float" : "uint8");
    snprintf(img->name, sizeof img->name, "image");
    img->ndim = 3;
    img->shape_field = -1;
    if (r->float_out) {
        img->dtype = NOSTALL_DTYPE_FLOAT32;
        img->shape[0] = 3, img->shape[1] = img->shape[2] = r->crop;
    } else {
        img->dtype = NOSTALL_DTYPE_UINT8;
        img->shape[0] = img->shape[1] = r->crop, img->shape[2] = 3;
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
    if ((rc = nst_index_build(&r->base.index, source)) < 0) goto fail;
    nst_recipe_items_from_index(&r->base);
    r->seed = v[NOSTALL_OPT_SEED].u;
    r->max_pixels = v[NOSTALL_OPT_MAX_PIXELS].u;
    r->train = v[NOSTALL_OPT_MODE].u == NOSTALL_MODE_TRAIN;
    r->crop = (uint32_t)v[NOSTALL_OPT_CROP].u;
    r->resize = v[NOSTALL_OPT_RESIZE].u ? (uint32_t)v[NOSTALL_OPT_RESIZE].u
                                        : (uint32_t)((uint64_t)r->crop * 8 / 7);
    if (r->resize < r->crop) r->resize = r->crop;
    r->scale_min = v[NOSTALL_OPT_SCALE_MIN].d;
    r->scale_max = v[NOSTALL_OPT_SCALE_MAX].d;
    r->ratio_min = v[NOSTALL_OPT_RATIO_MIN].d;
    r->ratio_max = v[NOSTALL_OPT_RATIO_MAX].d;
    r->flip_prob = v[NOSTALL_OPT_FLIP_PROB].d;
    r->float_out = v[NOSTALL_OPT_OUTPUT].u == NOSTALL_OUTPUT_FLOAT;
    nst_norm_init(&r->norm, v[NOSTALL_OPT_MEAN].d3, v[NOSTALL_OPT_STD].d3);
    r->base.nfields = 1;
    if ((rc = declare_image(r, v)) < 0 || (rc = nst_label_declare(&r->base, source)) < 0)
        goto fail;
    r->base.item_bytes = 0;
    for (uint32_t f = 0; f < r->base.nfields; f++) r->base.item_bytes += r->base.fields[f].item_bytes;
    r->base.image_field = 0;
    *out = &r->base;
    return 0;
fail:
    nst_recipe_free(&r->base);
    return rc;
}
