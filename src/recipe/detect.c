/*
 * detect.c — the object detection recipe (task=detect): an image and its
 * boxes from COCO instance annotations (dataset/coco.h), cropped, flipped and
 * resized together with torchvision's semantics.
 *
 * Items: the images of the annotation file sorted by id (as torchvision's
 * CocoDetection), those whose file is missing left out and counted; each
 * item's boxes clipped to its image, degenerate ones dropped (coco.h says
 * what is counted where). Categories sorted by id are labels 0..K-1, or
 * with box_labels=category_id the COCO category ids themselves (what
 * torchvision's detection references train on, 0 being the background).
 * File_names leaving the image root are refused unless allow_outside_root;
 * the annotation file's memory is bounded by max_annotation_bytes (coco.h).
 *
 * Fields (declaration order; M = max_boxes):
 *   image        float32 [3, H, W] normalized, or uint8 [H, W, 3] (output,
 *                layout, out_height x out_width; out_* 0: crop)
 *   boxes        float32 [M, 4], xyxy in output pixels; ragged: boxes_shape
 *   box_labels   int64 [M]; ragged: box_count
 *   iscrowd      uint8 [M]; ragged: box_count
 *   box_count    int64 (scalar): boxes delivered, n <= M
 *   boxes_shape  int64 [2]: (n, 4)
 * The rooms past n are zero, so a batch's bytes are a function of the seed.
 *
 * Train (one random stream per use: hash(seed, epoch, item,
 * NST_RNG_AUGMENT_COPY(copy))), in this order:
 *   1. the crop (box_crop):
 *      iou  torchvision v2 RandomIoUCrop (min_scale 0.3, max_scale 1, aspect
 *           0.5..2, sampler options {0, .1, .3, .5, .7, .9, 1}, 40 trials):
 *           draw an option (below(7)); 1 means no crop; else up to 40 trials
 *           of (u_w, u_h) -> new_w = int(W * (0.3 + 0.7 u_w)), new_h alike,
 *           refused unless 0.5 <= new_w / new_h <= 2; then (u_l, u_t) ->
 *           left = int((W - new_w) u_l), top alike; refused if empty, if no
 *           box centre lies strictly inside, or if the largest IoU of a box
 *           whose centre is inside is below the option. torchvision loops
 *           over options until one succeeds; here at most 50 options are
 *           drawn, then no crop (an image without boxes is never cropped,
 *           without draws: torchvision would end the same way, by drawing
 *           the option 1). Boxes whose centre is not strictly inside the
 *           crop are dropped, the others clipped to it (RandomIoUCrop
 *           followed by SanitizeBoundingBoxes).
 *      rrc  RandomResizedCrop (nst_crop_random_resized: scale_min/max,
 *           ratio_min/max, torchvision's draws); boxes clipped to the
 *           window, those left without area dropped.
 *      none the whole image.
 *   2. the flip: one draw u < flip_prob.
 *   3. the resize of the crop to out_width x out_height: stretched (fit =
 *      stretch) or letterboxed (fit = pad: aspect kept, centred, zero
 *      border; nst_letterbox).
 *   Then the first M boxes left are delivered.
 * Eval: no draws; the whole image resized (stretch or pad).
 * Draws are uniform doubles in [0, 1) of nostall's stream (torch draws
 * float32s: the arithmetic is torchvision's, the numbers nostall's own).
 *
 * A box (x0, y0, x1, y1) of the crop window (x, y, w, h) lands at
 * pad_left + (x0 - x) * inner_w / w ... (augment.h's output contract), the
 * flip mirroring it within the inner rectangle, so boxes follow pixels.
 *
 * Stages: make probes the header (its size must be what `images` says, or
 * the item is bad: boxes would not match the pixels), plans, decodes only
 * the crop's region and resamples it into the slot; decode keeps the whole
 * image (echo_point=decode), transform plans and resamples from it. Boxes
 * come from the recipe's annotations, by item, in both.
 * decode_device=gpu: make sends the image through the worker's GPU route
 * (gpu/gpu.h; make_gpu) with the same plan, the boxes written on the host;
 * make_many takes a worker's ready items through the route at once (one
 * batched decode of their JPEGs; worker.c), each with make's bytes;
 * echo_point=decode's decode stays on the CPU, its transform re-augments
 * the kept image on the route.
 *
 * Workers call the stages concurrently, each with its own
 * nst_recipe_worker; the recipe is read-only after create.
 */
#include <math.h>
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
#include "dataset/coco.h"

/* RandomIoUCrop's defaults (torchvision v2), and our bound on its loop. */
#define IOU_MIN_SCALE 0.3
#define IOU_MAX_SCALE 1.0
#define IOU_MIN_ASPECT 0.5
#define IOU_MAX_ASPECT 2.0
#define IOU_TRIALS 40
#define IOU_MAX_OPTIONS 50
static const double iou_options[] = {0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0};

enum { F_IMAGE, F_BOXES, F_LABELS, F_ISCROWD, F_COUNT, F_SHAPE, F_N };

typedef struct detect {
    nst_recipe base;
    nst_coco *coco;
    uint64_t seed, max_pixels;
    int train, box_crop, pad;
    int label_ids;     /* box_labels=category_id: the COCO ids, not 0..K-1 */
    int dtype, layout; /* nst_output's */
    uint32_t out_w, out_h, max_boxes;
    double scale_min, scale_max, ratio_min, ratio_max, flip_prob;
    nst_norm norm;
    int gpu; /* decode_device=gpu: make goes the GPU route */
    unsigned gpu_id;
} detect;

struct nst_recipe_worker {
    const detect *r;
    nst_decoder *dec;
    nst_augmenter *aug;
    nst_gpu_route *route; /* decode_device=gpu */
    nst_gpu_backend be;
    nst_gpu_many many; /* make_many's, per item (grow-only) */
    nst_buf mplan;     /* and its plans */
};

/* What one use of an item does: the window of the source, the flip, the
 * output's placement (letterbox), and which boxes survive the crop. */
typedef struct det_plan {
    nst_window win;
    int flip;
    int iou;                    /* drop boxes whose centre is not strictly inside win */
    uint32_t pad_left, pad_top; /* where the window goes in the item (letterbox)    */
    uint32_t inner_w, inner_h;  /* ... and its size                                 */
} det_plan;

/* The image output of plan p into dst. */
static void output_of(const detect *r, const det_plan *p, void *dst, nst_output *o)
{
    *o = (nst_output){.dtype = r->dtype,
                      .layout = r->layout,
                      .dst = dst,
                      .norm = &r->norm,
                      .width = r->out_w,
                      .height = r->out_h,
                      .pad_left = p->pad_left,
                      .pad_top = p->pad_top,
                      .inner_width = p->inner_w,
                      .inner_height = p->inner_h};
}

/* Does box b's centre lie strictly inside [l, r] x [t, b]? */
static int centre_inside(const nst_coco_box *b, double l, double t, double r, double bo)
{
    double cx = 0.5 * ((double)b->x0 + (double)b->x1), cy = 0.5 * ((double)b->y0 + (double)b->y1);
    return l < cx && cx < r && t < cy && cy < bo;
}

/* RandomIoUCrop's search (see the top). 1 with *win set, 0: no crop. */
static int iou_crop(uint32_t W, uint32_t H, const nst_coco_box *bx, uint32_t n, nst_rng *rng,
                    nst_window *win)
{
    if (n == 0) return 0;
    for (int draw = 0; draw < IOU_MAX_OPTIONS; draw++) {
        double need = iou_options[nst_rng_below(rng, sizeof iou_options / sizeof *iou_options)];
        if (need >= 1.0) return 0;
        for (int trial = 0; trial < IOU_TRIALS; trial++) {
            double uw = nst_rng_double(rng), uh = nst_rng_double(rng);
            int64_t nw =
                (int64_t)((double)W * (IOU_MIN_SCALE + (IOU_MAX_SCALE - IOU_MIN_SCALE) * uw));
            int64_t nh =
                (int64_t)((double)H * (IOU_MIN_SCALE + (IOU_MAX_SCALE - IOU_MIN_SCALE) * uh));
            if (nh == 0) continue;
            double aspect = (double)nw / (double)nh;
            if (!(IOU_MIN_ASPECT <= aspect && aspect <= IOU_MAX_ASPECT)) continue;
            double ul = nst_rng_double(rng), ut = nst_rng_double(rng);
            int64_t left = (int64_t)((double)(W - nw) * ul), top = (int64_t)((double)(H - nh) * ut);
            int64_t right = left + nw, bottom = top + nh;
            if (left == right || top == bottom) continue;
            double l = (double)left, t = (double)top, r = (double)right, b = (double)bottom;
            double area = (r - l) * (b - t), best = -1;
            for (uint32_t i = 0; i < n; i++) {
                if (!centre_inside(&bx[i], l, t, r, b)) continue;
                double iw = fmin(bx[i].x1, r) - fmax(bx[i].x0, l);
                double ih = fmin(bx[i].y1, b) - fmax(bx[i].y0, t);
                double inter = iw > 0 && ih > 0 ? iw * ih : 0;
                double ba = ((double)bx[i].x1 - bx[i].x0) * ((double)bx[i].y1 - bx[i].y0);
                double iou = inter / (ba + area - inter);
                if (iou > best) best = iou;
            }
            if (best < 0 || best < need) continue; /* no centre inside, or too little overlap */
            *win = (nst_window){.x = l, .y = t, .w = r - l, .h = b - t};
            return 1;
        }
    }
    return 0;
}

/* The plan of use `copy` of item c->index, a W x H image. */
static void plan(const detect *r, const nst_item_ctx *c, uint32_t W, uint32_t H, det_plan *p)
{
    const nst_coco_image *im = &r->coco->images[c->index];
    p->win = (nst_window){.x = 0, .y = 0, .w = W, .h = H};
    p->flip = p->iou = 0;
    if (r->train) {
        nst_rng rng;
        nst_rng_seed(&rng, nst_hash4(r->seed, c->epoch, c->index, NST_RNG_AUGMENT_COPY(c->copy)));
        if (r->box_crop == NOSTALL_BOX_CROP_IOU)
            p->iou = iou_crop(W, H, r->coco->boxes + im->first, im->count, &rng, &p->win);
        else if (r->box_crop == NOSTALL_BOX_CROP_RRC)
            nst_crop_random_resized(W, H, r->scale_min, r->scale_max, r->ratio_min, r->ratio_max,
                                    &rng, &p->win);
        p->flip = nst_rng_double(&rng) < r->flip_prob;
    }
    p->pad_left = p->pad_top = 0;
    p->inner_w = r->out_w, p->inner_h = r->out_h;
    if (r->pad) { /* the crop's own aspect: its sides are whole pixels in every mode */
        nst_output o;
        output_of(r, p, NULL, &o);
        nst_letterbox((uint32_t)p->win.w, (uint32_t)p->win.h, &o);
        p->pad_left = o.pad_left, p->pad_top = o.pad_top;
        p->inner_w = o.inner_width, p->inner_h = o.inner_height;
    }
}

/* The item's boxes through plan p into the box fields (zero past them). */
static void write_boxes(const detect *r, const nst_item_ctx *c, const det_plan *p)
{
    const nst_coco_image *im = &r->coco->images[c->index];
    const nst_coco_box *bx = r->coco->boxes + im->first;
    float *boxes = (float *)(void *)c->dst[F_BOXES];
    int64_t *labels = (int64_t *)(void *)c->dst[F_LABELS];
    uint8_t *crowd = c->dst[F_ISCROWD];
    const double wx0 = p->win.x, wy0 = p->win.y, wx1 = p->win.x + p->win.w,
                 wy1 = p->win.y + p->win.h;
    const double iw = p->inner_w, ih = p->inner_h;
    const double sx = iw / p->win.w, sy = ih / p->win.h;
    const double px = p->pad_left, py = p->pad_top;
    uint32_t n = 0;
    for (uint32_t i = 0; i < im->count && n < r->max_boxes; i++) {
        if (p->iou && !centre_inside(&bx[i], wx0, wy0, wx1, wy1)) continue;
        double x0 = fmax(bx[i].x0, wx0), y0 = fmax(bx[i].y0, wy0);
        double x1 = fmin(bx[i].x1, wx1), y1 = fmin(bx[i].y1, wy1);
        if (!(x1 > x0) || !(y1 > y0)) continue; /* nothing of it in the crop */
        double o0 = (x0 - wx0) * sx, o1 = (x1 - wx0) * sx;
        if (p->flip) {
            double t = iw - o1;
            o1 = iw - o0;
            o0 = t;
        }
        float v[4] = {(float)(px + fmax(o0, 0)), (float)(py + fmax((y0 - wy0) * sy, 0)),
                      (float)(px + fmin(o1, iw)), (float)(py + fmin((y1 - wy0) * sy, ih))};
        memcpy(boxes + 4 * (size_t)n, v, sizeof v);
        labels[n] = r->label_ids ? r->coco->category_ids[bx[i].label] : bx[i].label;
        crowd[n] = (uint8_t)bx[i].iscrowd;
        n++;
    }
    size_t m = r->max_boxes;
    memset(boxes + 4 * (size_t)n, 0, (m - n) * 4 * sizeof *boxes);
    memset(labels + n, 0, (m - n) * sizeof *labels);
    memset(crowd + n, 0, m - n);
    int64_t count = n, shape[2] = {n, 4};
    memcpy(c->dst[F_COUNT], &count, sizeof count);
    memcpy(c->dst[F_SHAPE], shape, sizeof shape);
}

/* The decoded image must have the size the annotations give it. */
static int check_size(const detect *r, const nst_item_ctx *c, uint32_t W, uint32_t H)
{
    const nst_coco_image *im = &r->coco->images[c->index];
    if (W == im->width && H == im->height) return 0;
    return nst_error(NOSTALL_E_DATASET,
                     "detect: %s: the image is %ux%u, its annotations (image id %lld) say %ux%u",
                     c->path, W, H, (long long)im->id, im->width, im->height);
}

static int augment(nst_recipe_worker *w, const nst_item_ctx *c, const nst_image *img,
                   const det_plan *p, nst_recipe_times *t)
{
    nst_output out;
    output_of(w->r, p, c->dst[F_IMAGE], &out);
    uint64_t t0 = nst_now_ns();
    int rc = nst_augment(w->aug, img, &p->win, p->flip, &out);
    if (rc == 0) write_boxes(w->r, c, p);
    t->augment_ns += nst_now_ns() - t0;
    if (rc < 0) return rc;
    t->augment_items++;
    t->augment_bytes += w->r->base.fields[F_IMAGE].item_bytes;
    return 0;
}

/* decode_device=gpu: the image through the worker's GPU route (gpu/
 * route.c) with the same plan as the CPU path (the route decodes at full
 * scale: the CPU path's bytes where it decodes at full scale too); the
 * boxes on the host from that plan, as the CPU path writes them. With
 * gpu_output=device the image lands in the device ring (c->dst_device),
 * the boxes in the host slot. */
static int make_gpu(nst_recipe_worker *w, const nst_item_ctx *c, const uint8_t *data, size_t len,
                    nst_recipe_times *t)
{
    const detect *r = w->r;
    nst_image_info info;
    det_plan p;
    uint64_t t1 = nst_now_ns();
    int rc = nst_decode_probe(w->dec, data, len, c->path, &info);
    if (rc == 0) rc = check_size(r, c, info.width, info.height);
    if (rc < 0) {
        t->decode_ns += nst_now_ns() - t1;
        return rc;
    }
    plan(r, c, info.width, info.height, &p);
    nst_gpu_job job = {.data = data, .len = len, .path = c->path, .win = p.win, .flip = p.flip};
    output_of(r, &p, NULL, &job.out);
    const size_t bytes = nst_output_bytes(&job.out);
    int st, engine;
    char why[1][NST_GPU_REASON];
    w->be.out_device = c->dst_device;
    rc = nst_gpu_route_batch(w->route, &w->be, &job, 1, c->dst[F_IMAGE], bytes, &st, why, &engine);
    t->decode_ns += nst_now_ns() - t1;
    if (rc < 0) return rc;
    if (st != NST_GPU_DECODED) return nst_error(nst_gpu_route_code(w->route, 0), "%s", why[0]);
    t->decode_items++;
    t->gpu_hw_items += engine == NST_GPU_ENGINE_HW; /* the stats' per-backend split */
    t->gpu_default_items += engine == NST_GPU_ENGINE_DEFAULT;
    t->gpu_cpu_items += engine == NST_GPU_ENGINE_CPU;
    t->decode_pixels += (uint64_t)info.width * info.height;
    write_boxes(r, c, &p);
    t->augment_items++;
    t->augment_bytes += bytes;
    return 0;
}

/* make_many's per-item write beside the image: the boxes of its plan. */
typedef struct many_ctx {
    const detect *r;
    const nst_item_ctx *c;
    const det_plan *p;
} many_ctx;

static void many_done(void *ctx, size_t k, size_t i)
{
    const many_ctx *x = ctx;
    write_boxes(x->r, &x->c[i], &x->p[k]);
}

/* decode_device=gpu: n items through the route at once (gpu_many.h: one
 * decode call for their JPEGs), each planned, written (image, boxes) and
 * reported as make_gpu does it alone; an error of the whole call is every
 * item's. */
static int make_many(nst_recipe_worker *w, const nst_item_ctx *c, const uint8_t *const *data,
                     const size_t *len, size_t n, int *rc, char *msg, size_t msgn,
                     nst_recipe_times *t)
{
    const detect *r = w->r;
    if (!w->route) return NOSTALL_E_UNSUPPORTED;
    if (!n) return 0;
    int e = nst_gpu_many_reserve(&w->many, n);
    if (e == 0) e = nst_buf_reserve(&w->mplan, n * sizeof(det_plan));
    for (size_t i = 0; e < 0 && i < n; i++) rc[i] = e, nst_gpu_many_error(msg + i * msgn, msgn, e);
    if (e < 0) return 0;
    nst_gpu_job *jobs = nst_gpu_many_jobs(&w->many);
    uint8_t **dst = nst_gpu_many_dst(&w->many);
    uint64_t *px = nst_gpu_many_px(&w->many), t1 = nst_now_ns();
    int *idx = nst_gpu_many_idx(&w->many, n);
    det_plan *p = (det_plan *)(void *)w->mplan.data;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        nst_image_info info;
        rc[i] = nst_decode_probe(w->dec, data[i], len[i], c[i].path, &info);
        if (rc[i] == 0) rc[i] = check_size(r, &c[i], info.width, info.height);
        if (rc[i] < 0) {
            nst_gpu_many_error(msg + i * msgn, msgn, rc[i]);
            continue;
        }
        plan(r, &c[i], info.width, info.height, &p[m]);
        jobs[m] = (nst_gpu_job){.data = data[i],
                                .len = len[i],
                                .path = c[i].path,
                                .win = p[m].win,
                                .flip = p[m].flip};
        output_of(r, &p[m], NULL, &jobs[m].out);
        dst[m] = c[i].dst[F_IMAGE];
        px[m] = (uint64_t)info.width * info.height;
        idx[m++] = (int)i;
    }
    many_ctx x = {r, c, p};
    nst_gpu_many_route(&w->many, w->route, &w->be, c[0].dst_device, n, m, rc, msg, msgn, t, t1,
                       many_done, &x);
    return 0;
}

static int make(nst_recipe_worker *w, const nst_item_ctx *c, const uint8_t *data, size_t len,
                nst_recipe_times *t)
{
    if (w->route) return make_gpu(w, c, data, len, t);
    nst_image_info info;
    nst_image img;
    det_plan p;
    uint64_t t1 = nst_now_ns();
    int rc = nst_decode_probe(w->dec, data, len, c->path, &info);
    if (rc == 0) rc = check_size(w->r, c, info.width, info.height);
    if (rc == 0) {
        plan(w->r, c, info.width, info.height, &p);
        rc = nst_decode(w->dec, data, len, c->path, &p.win, p.inner_w, p.inner_h, &img);
    }
    t->decode_ns += nst_now_ns() - t1;
    if (rc < 0) return rc;
    t->decode_items++;
    t->decode_pixels += (uint64_t)img.width * img.height;
    return augment(w, c, &img, &p, t);
}

/* The whole image into out->buf (RGB rows, no padding); meta: nst_image. */
static int decode(nst_recipe_worker *w, const nst_item_ctx *c, const uint8_t *data, size_t len,
                  nst_decoded *out, nst_recipe_times *t)
{
    nst_image_info info;
    nst_image img;
    uint64_t t1 = nst_now_ns();
    int rc = nst_decode_probe(w->dec, data, len, c->path, &info);
    if (rc == 0) rc = check_size(w->r, c, info.width, info.height);
    if (rc == 0) rc = nst_decode(w->dec, data, len, c->path, NULL, 0, 0, &img);
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

static int transform(nst_recipe_worker *w, const nst_item_ctx *c, const nst_decoded *in,
                     nst_recipe_times *t)
{
    nst_image img;
    det_plan p;
    memcpy(&img, in->meta, sizeof img);
    img.data = in->buf.data;
    plan(w->r, c, img.src_width, img.src_height, &p);
    if (!w->route) return augment(w, c, &img, &p, t);
    /* decode_device=gpu: the kept image re-augmented on the route */
    nst_gpu_job job = {.path = c->path, .win = p.win, .flip = p.flip};
    output_of(w->r, &p, NULL, &job.out);
    const size_t bytes = nst_output_bytes(&job.out);
    w->be.out_device = c->dst_device;
    uint64_t t0 = nst_now_ns();
    int rc = nst_gpu_route_image(w->route, &w->be, &img, &job, c->dst[F_IMAGE], bytes);
    t->augment_ns += nst_now_ns() - t0;
    if (rc < 0) return rc;
    write_boxes(w->r, c, &p);
    t->augment_items++;
    t->augment_bytes += bytes;
    return 0;
}

static void worker_free(nst_recipe_worker *w);

static int worker_create(const nst_recipe *base, nst_recipe_worker **out)
{
    const detect *r = (const detect *)base;
    nst_recipe_worker *w = calloc(1, sizeof *w);
    int rc;
    *out = NULL;
    if (!w) return nst_error(NOSTALL_E_NOMEM, "recipe: out of memory");
    w->r = r;
    if ((rc = nst_decoder_create(&w->dec, r->max_pixels)) < 0 ||
        (rc = nst_augmenter_create(&w->aug)) < 0 ||
        (r->gpu && ((rc = nst_gpu_route_create(&w->route, r->max_pixels)) < 0 ||
                    (rc = nst_gpu_backend_open(&w->be, r->gpu_id, r->max_pixels)) < 0))) {
        worker_free(w);
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
    nst_gpu_route_free(w->route);
    if (w->be.destroy) w->be.destroy(w->be.ctx);
    nst_gpu_many_free(&w->many);
    nst_buf_free(&w->mplan);
    free(w);
}

static void *decoder(nst_recipe_worker *w) { return w->dec; }

static void recipe_free(nst_recipe *base)
{
    detect *r = (detect *)base;
    nst_coco_free(r->coco);
    free(r);
}

static const nst_recipe_ops detect_ops = {
    .name = "detect",
    .worker_create = worker_create,
    .worker_free = worker_free,
    .make = make,
    .make_many = make_many,
    .decode = decode,
    .transform = transform,
    .decoder = decoder,
    .free = recipe_free,
};

static int declare(nst_field_decl *d, const char *name, nostall_dtype dtype, uint32_t ndim,
                   uint64_t s0, uint64_t s1, int32_t shape_field)
{
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "%s", name);
    d->dtype = dtype;
    d->ndim = ndim;
    d->shape[0] = s0;
    d->shape[1] = s1;
    d->shape_field = shape_field;
    return nst_field_finish(d);
}

/* The image field from output and layout, out_height x out_width. */
static int declare_image(detect *r, const nst_optval *v)
{
    static const struct {
        uint64_t opt;
        int dtype;
        nostall_dtype ft;
    } dt[] = {
        {NOSTALL_OUTPUT_FLOAT, NST_OUT_F32, NOSTALL_DTYPE_FLOAT32},
        {NOSTALL_OUTPUT_UINT8, NST_OUT_U8, NOSTALL_DTYPE_UINT8},
        {NOSTALL_OUTPUT_FLOAT16, NST_OUT_F16, NOSTALL_DTYPE_FLOAT16},
        {NOSTALL_OUTPUT_BFLOAT16, NST_OUT_BF16, NOSTALL_DTYPE_BFLOAT16},
    };
    nst_field_decl *d = &r->base.fields[F_IMAGE];
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "image");
    d->shape_field = -1;
    d->ndim = 3;
    for (size_t i = 0; i < sizeof dt / sizeof *dt; i++)
        if (dt[i].opt == v[NOSTALL_OPT_OUTPUT].u) r->dtype = dt[i].dtype, d->dtype = dt[i].ft;
    uint64_t layout = v[NOSTALL_OPT_LAYOUT].u;
    if (layout == NOSTALL_LAYOUT_OPT_NCHW ||
        (layout == NOSTALL_LAYOUT_AUTO && r->dtype != NST_OUT_U8)) {
        r->layout = NST_OUT_NCHW;
        d->shape[0] = 3, d->shape[1] = r->out_h, d->shape[2] = r->out_w;
    } else {
        r->layout = NST_OUT_NHWC;
        d->shape[0] = r->out_h, d->shape[1] = r->out_w, d->shape[2] = 3;
    }
    return nst_field_finish(d);
}

static int declare_fields(detect *r, const nst_optval *v)
{
    int rc;
    const uint64_t m = r->max_boxes;
    if ((rc = declare_image(r, v)) < 0 ||
        (rc = declare(&r->base.fields[F_BOXES], "boxes", NOSTALL_DTYPE_FLOAT32, 2, m, 4, F_SHAPE)) <
            0 ||
        (rc = declare(&r->base.fields[F_LABELS], "box_labels", NOSTALL_DTYPE_INT64, 1, m, 0,
                      F_COUNT)) < 0 ||
        (rc = declare(&r->base.fields[F_ISCROWD], "iscrowd", NOSTALL_DTYPE_UINT8, 1, m, 0,
                      F_COUNT)) < 0 ||
        (rc = declare(&r->base.fields[F_COUNT], "box_count", NOSTALL_DTYPE_INT64, 0, 0, 0, -1)) < 0 ||
        (rc = declare(&r->base.fields[F_SHAPE], "boxes_shape", NOSTALL_DTYPE_INT64, 1, 2, 0, -1)) <
            0)
        return rc;
    r->base.nfields = F_N;
    r->base.item_bytes = 0;
    for (uint32_t f = 0; f < F_N; f++) r->base.item_bytes += r->base.fields[f].item_bytes;
    r->base.image_field = F_IMAGE;
    r->base.label_field = UINT32_MAX;
    return 0;
}

/* What defines the items beyond their paths: sizes, boxes, labels, crowd
 * flags and the category ids. */
static uint64_t fingerprint(const detect *r)
{
    const nst_coco *k = r->coco;
    uint64_t h = nst_index_fingerprint(r->base.index);
    for (uint64_t i = 0; i < k->nimages; i++) {
        uint32_t d[3] = {k->images[i].width, k->images[i].height, k->images[i].count};
        nostall_checksum_update(&h, d, sizeof d);
    }
    nostall_checksum_update(&h, k->boxes, k->nboxes * sizeof *k->boxes);
    nostall_checksum_update(&h, k->category_ids, k->ncategories * sizeof *k->category_ids);
    if (r->label_ids) nostall_checksum_update(&h, "category_id", 11); /* other labels delivered */
    return h ? h : 1;
}

int nst_detect_create(nst_recipe **out, const nostall_config *cfg, const char *source)
{
    const nst_optval *v = cfg->v;
    detect *r = calloc(1, sizeof *r);
    int rc;
    *out = NULL;
    if (!r) return nst_error(NOSTALL_E_NOMEM, "recipe: out of memory");
    r->base.ops = &detect_ops;
    r->base.size_hint = "out_height/out_width or max_boxes";
    r->seed = v[NOSTALL_OPT_SEED].u;
    r->max_pixels = v[NOSTALL_OPT_MAX_PIXELS].u;
    r->train = v[NOSTALL_OPT_MODE].u == NOSTALL_MODE_TRAIN;
    r->box_crop = (int)v[NOSTALL_OPT_BOX_CROP].u;
    r->pad = v[NOSTALL_OPT_FIT].u == NOSTALL_FIT_PAD;
    r->max_boxes = (uint32_t)v[NOSTALL_OPT_MAX_BOXES].u;
    r->label_ids = v[NOSTALL_OPT_BOX_LABELS].u == NOSTALL_BOX_LABELS_CATEGORY_ID;
    uint32_t crop = (uint32_t)v[NOSTALL_OPT_CROP].u;
    r->out_h = v[NOSTALL_OPT_OUT_HEIGHT].u ? (uint32_t)v[NOSTALL_OPT_OUT_HEIGHT].u : crop;
    r->out_w = v[NOSTALL_OPT_OUT_WIDTH].u ? (uint32_t)v[NOSTALL_OPT_OUT_WIDTH].u : crop;
    r->scale_min = v[NOSTALL_OPT_SCALE_MIN].d;
    r->scale_max = v[NOSTALL_OPT_SCALE_MAX].d;
    r->ratio_min = v[NOSTALL_OPT_RATIO_MIN].d;
    r->ratio_max = v[NOSTALL_OPT_RATIO_MAX].d;
    r->flip_prob = v[NOSTALL_OPT_FLIP_PROB].d;
    r->gpu = v[NOSTALL_OPT_DECODE_DEVICE].u == NOSTALL_DECODE_GPU;
    r->gpu_id = (unsigned)v[NOSTALL_OPT_GPU_ID].u;
    nst_norm_init(&r->norm, v[NOSTALL_OPT_MEAN].d3, v[NOSTALL_OPT_STD].d3);
    if (v[NOSTALL_OPT_IMAGE_MODE].u == NOSTALL_IMAGE_FULL) {
        nst_recipe_free(&r->base);
        return nst_error(NOSTALL_E_UNSUPPORTED,
                         "task=detect: image_mode=full is not built (detect resizes every item to "
                         "out_height x out_width; image_mode crop and resize mean the same here)");
    }
    nst_coco_opts o = {.image_root = nst_config_path(cfg, NOSTALL_OPT_IMAGE_ROOT),
                       .max_boxes = r->max_boxes,
                       .check_files = 1,
                       .allow_outside_root = (int)v[NOSTALL_OPT_ALLOW_OUTSIDE_ROOT].u,
                       .max_bytes = v[NOSTALL_OPT_MAX_ANNOTATION_BYTES].u};
    if ((rc = nst_coco_load(&r->coco, source, &o)) < 0 ||
        (rc = nst_index_from_paths(&r->base.index, r->coco->paths, NULL, r->coco->nimages)) < 0 ||
        (rc = declare_fields(r, v)) < 0) {
        nst_recipe_free(&r->base);
        return rc;
    }
    const nst_coco *k = r->coco;
    r->base.items = r->base.keys = k->nimages;
    r->base.fingerprint = fingerprint(r);
    r->base.items_truncated = k->items_truncated;
    r->base.parts_dropped = k->parts_dropped;
    r->base.parts_clipped = k->parts_clipped;
    r->base.parts_unmatched = k->parts_unmatched;
    r->base.items_missing = k->items_missing;
    *out = &r->base;
    return 0;
}
