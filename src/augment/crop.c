/*
 * crop.c — crop geometry, exactly torchvision's.
 *
 * nst_crop_random_resized() is RandomResizedCrop.get_params: up to 10
 * attempts, each drawing an area fraction U(scale_min, scale_max) and then a
 * log aspect ratio U(log ratio_min, log ratio_max) from the caller's rng; the
 * sides are round(sqrt(...)) with Python's round-half-to-even (nearbyint in
 * the default rounding mode); an accepted size draws top then left, each
 * uniformly over the inclusive range of valid offsets. After 10 failures the
 * centred fallback crop clamped to [min ratio, max ratio] is used.
 *
 * nst_crop_center_hw() is Resize(resize) of the shorter side followed by
 * CenterCrop((crop_h, crop_w)), expressed as one fractional window of the
 * source image so a single resampling does both.
 *
 * nst_letterbox() places a whole image in an item with its aspect kept
 * (fit=pad): integer sizes, centred.
 *
 * Pure functions of their arguments (and the rng's state); any thread.
 */
#include <math.h>
#include <stdint.h>

#include "augment/augment.h"

/* int(round(v)) in Python: round half to even. */
static int64_t pyround(double v) { return (int64_t)nearbyint(v); }

void nst_crop_random_resized(uint32_t width, uint32_t height, double scale_min, double scale_max,
                             double ratio_min, double ratio_max, nst_rng *rng, nst_window *out)
{
    if (width == 0 || height == 0) {
        out->x = out->y = out->w = out->h = 0;
        return;
    }
    const int64_t W = width, H = height;
    const double area = (double)W * (double)H;
    const double lr0 = log(ratio_min), lr1 = log(ratio_max);
    for (int attempt = 0; attempt < 10; attempt++) {
        double target = area * nst_rng_uniform(rng, scale_min, scale_max);
        double aspect = exp(nst_rng_uniform(rng, lr0, lr1));
        double sw = sqrt(target * aspect), sh = sqrt(target / aspect);
        /* NaN/huge values (absurd parameters) fail the test below. */
        if (!(sw < 4e18) || !(sh < 4e18)) continue;
        int64_t w = pyround(sw), h = pyround(sh);
        if (0 < w && w <= W && 0 < h && h <= H) {
            int64_t top = (int64_t)nst_rng_below(rng, (uint64_t)(H - h + 1));
            int64_t left = (int64_t)nst_rng_below(rng, (uint64_t)(W - w + 1));
            out->x = (double)left;
            out->y = (double)top;
            out->w = (double)w;
            out->h = (double)h;
            return;
        }
    }
    /* Fallback: central crop with the ratio clamped into the allowed range. */
    double in_ratio = (double)W / (double)H;
    double rmin = fmin(ratio_min, ratio_max), rmax = fmax(ratio_min, ratio_max);
    int64_t w = W, h = H;
    if (in_ratio < rmin) {
        h = pyround((double)W / rmin);
    } else if (in_ratio > rmax) {
        w = pyround((double)H * rmax);
    }
    /* torchvision would produce an empty crop here; keep at least a pixel. */
    if (h < 1) h = 1;
    if (w < 1) w = 1;
    if (h > H) h = H;
    if (w > W) w = W;
    out->x = (double)((W - w) / 2); /* both non-negative: floor division */
    out->y = (double)((H - h) / 2);
    out->w = (double)w;
    out->h = (double)h;
}

void nst_crop_center_hw(uint32_t width, uint32_t height, uint32_t resize, uint32_t crop_w,
                        uint32_t crop_h, nst_window *out)
{
    if (width == 0 || height == 0 || resize == 0) {
        out->x = out->y = out->w = out->h = 0;
        return;
    }
    /* Resize: shorter side -> resize, longer -> int(resize * long / short)
     * (exact integer product, one correctly rounded division, truncation:
     * what Python computes). */
    uint64_t rw, rh;
    if (width <= height) {
        rw = resize;
        rh = (uint64_t)((double)((uint64_t)resize * height) / (double)width);
    } else {
        rh = resize;
        rw = (uint64_t)((double)((uint64_t)resize * width) / (double)height);
    }
    /* CenterCrop: offset int(round((resized - crop) / 2.0)), may be negative
     * when the crop is larger (torchvision pads; the resampler clamps). */
    double top = (double)pyround(((double)rh - (double)crop_h) / 2.0);
    double left = (double)pyround(((double)rw - (double)crop_w) / 2.0);
    out->x = left * (double)width / (double)rw;
    out->y = top * (double)height / (double)rh;
    out->w = (double)crop_w * (double)width / (double)rw;
    out->h = (double)crop_h * (double)height / (double)rh;
}

void nst_crop_center(uint32_t width, uint32_t height, uint32_t resize, uint32_t crop,
                     nst_window *out)
{
    nst_crop_center_hw(width, height, resize, crop, crop, out);
}

/* round(a * b / c) for a, b <= 2^32, c > 0, half up, in exact integers. */
static uint64_t muldiv_round(uint64_t a, uint64_t b, uint64_t c) { return (a * b + c / 2) / c; }

void nst_letterbox(uint32_t src_w, uint32_t src_h, nst_output *out)
{
    uint32_t W = out->width, H = out->height;
    if (W == 0 && H == 0) W = H = out->size;
    uint32_t iw = W, ih = H;
    if (src_w > 0 && src_h > 0 && W > 0 && H > 0) {
        /* W / src_w <= H / src_h: the width fits, the height is scaled */
        if ((uint64_t)W * src_h <= (uint64_t)H * src_w)
            ih = (uint32_t)muldiv_round(src_h, W, src_w);
        else
            iw = (uint32_t)muldiv_round(src_w, H, src_h);
        if (iw < 1) iw = 1;
        if (ih < 1) ih = 1;
        if (iw > W) iw = W;
        if (ih > H) ih = H;
    }
    out->inner_width = iw;
    out->inner_height = ih;
    out->pad_left = (W - iw) / 2;
    out->pad_top = (H - ih) / 2;
}
