/*
 * gpu_item.h — one item of a GPU batch as the augment kernels see it, and
 * the kernels' per-element work, written once for the device (augment.cu)
 * and the host (tests/test_pixel_math.c runs the same functions over every
 * element serially and compares with nst_augment()).
 *
 * The host plans an item (plan.c: nst_gpu_plan) from the same window, flip
 * and output the CPU path would use: the filter taps of both axes (laid out
 * as resize.c lays them out: every output k taps from an aligned start,
 * zero-padded) and the pass order. The device then runs two passes:
 *   pass 1  the int16 intermediate: horizontal first, rows ylo .. yhi - 1 of
 *           the input resampled to inner_width pixels; vertical first,
 *           inner_height rows over input columns xlo .. xhi - 1;
 *   pass 2  every element of the item: inside the inner rectangle the other
 *           axis' taps over the intermediate, rounded to uint8; the border
 *           pixel value 0; then normalized and converted to the dtype, at
 *           the layout's offset (common/pixel_math.h).
 * Offsets are in elements of the arrays the kernels get: the decoded RGB8
 * images, the int32 starts, the int16 coefficients, the int16 intermediate;
 * dst_off is in bytes of the batch. Pure functions; no allocation.
 */
#ifndef NST_GPU_GPU_ITEM_H
#define NST_GPU_GPU_ITEM_H

#include <stddef.h>
#include <stdint.h>

#include "common/pixel_math.h"

typedef struct nst_gpu_item {
    uint64_t src_off;        /* decoded RGB8 image: first byte            */
    uint32_t src_w, src_h;   /* its pixels                                 */
    uint32_t src_stride;     /* bytes per row                              */
    uint32_t kx, ky;         /* taps per output, each axis                 */
    uint64_t xs_off, ys_off; /* starts (int32, absolute input indices)     */
    uint64_t xc_off, yc_off; /* coefficients (int16, k per output)         */
    int32_t xlo, xhi;        /* input columns the horizontal taps touch    */
    int32_t ylo, yhi;        /* input rows the vertical taps touch         */
    uint32_t vert_first;     /* pass order (nst_pm_vert_first)             */
    uint64_t tmp_off;        /* int16 intermediate                         */
    uint64_t dst_off;        /* the item in the batch, bytes               */
    uint32_t width, height;  /* the item                                   */
    uint32_t pad_left, pad_top, inner_w, inner_h;
    int32_t dtype, layout; /* NST_OUT_*; layout resolved (NCHW or NHWC)  */
    float scale[3], bias[3];
} nst_gpu_item;

/* Elements of the intermediate: horizontal first (yhi - ylo) rows of
 * inner_w * 3, vertical first inner_h rows of (xhi - xlo) * 3. */
NST_HD uint64_t nst_gpu_tmp_elems(const nst_gpu_item *it)
{
    if (it->vert_first) return (uint64_t)it->inner_h * (uint64_t)(it->xhi - it->xlo) * 3u;
    return (uint64_t)(it->yhi - it->ylo) * (uint64_t)it->inner_w * 3u;
}

/* Pass 1, element e (0 <= e < nst_gpu_tmp_elems) of the intermediate. */
NST_HD void nst_gpu_pass1(const nst_gpu_item *it, const uint8_t *src, const int32_t *starts,
                          const int16_t *coefs, int16_t *tmp, uint64_t e)
{
    const uint8_t *img = src + it->src_off;
    if (it->vert_first) { /* row y of the output, column element x */
        const uint64_t cols = (uint64_t)(it->xhi - it->xlo) * 3u;
        const uint32_t y = (uint32_t)(e / cols), x = (uint32_t)(e % cols);
        const int32_t y0 = starts[it->ys_off + y];
        const uint8_t *p = img + (size_t)y0 * it->src_stride + (size_t)it->xlo * 3u + x;
        tmp[it->tmp_off + e] =
            nst_pm_pass1(p, it->src_stride, coefs + it->yc_off + (size_t)y * it->ky, it->ky);
        return;
    }
    /* input row ylo + r, output column i, channel c */
    const uint64_t cols = (uint64_t)it->inner_w * 3u;
    const uint32_t r = (uint32_t)(e / cols), i = (uint32_t)(e % cols / 3u), c = (uint32_t)(e % 3u);
    const int32_t x0 = starts[it->xs_off + i];
    const uint8_t *p = img + (size_t)(it->ylo + (int32_t)r) * it->src_stride + (size_t)x0 * 3u + c;
    tmp[it->tmp_off + e] = nst_pm_pass1(p, 3, coefs + it->xc_off + (size_t)i * it->kx, it->kx);
}

/* Pass 2: pixel value of channel c at (x, y) of the inner rectangle. */
NST_HD uint8_t nst_gpu_pass2_value(const nst_gpu_item *it, const int32_t *starts,
                                   const int16_t *coefs, const int16_t *tmp, uint32_t x, uint32_t y,
                                   uint32_t c)
{
    const int16_t *t = tmp + it->tmp_off;
    if (it->vert_first) {
        const uint64_t cols = (uint64_t)(it->xhi - it->xlo) * 3u;
        const int32_t x0 = starts[it->xs_off + x] - it->xlo;
        return nst_pm_pass2(t + y * cols + (size_t)x0 * 3u + c, 3,
                            coefs + it->xc_off + (size_t)x * it->kx, it->kx);
    }
    const uint64_t cols = (uint64_t)it->inner_w * 3u;
    const int32_t y0 = starts[it->ys_off + y] - it->ylo;
    return nst_pm_pass2(t + (size_t)y0 * cols + (size_t)x * 3u + c, (size_t)cols,
                        coefs + it->yc_off + (size_t)y * it->ky, it->ky);
}

/* Pass 2, element e (0 <= e < width * height * 3, in (y, x, c) order) of
 * the item: computed, normalized, converted and stored in `batch`. */
NST_HD void nst_gpu_pass2(const nst_gpu_item *it, const int32_t *starts, const int16_t *coefs,
                          const int16_t *tmp, uint8_t *batch, uint64_t e)
{
    const uint32_t c = (uint32_t)(e % 3u);
    const uint32_t x = (uint32_t)(e / 3u % it->width), y = (uint32_t)(e / 3u / it->width);
    uint8_t v = 0; /* the letterbox border */
    if (x >= it->pad_left && x - it->pad_left < it->inner_w && y >= it->pad_top &&
        y - it->pad_top < it->inner_h)
        v = nst_gpu_pass2_value(it, starts, coefs, tmp, x - it->pad_left, y - it->pad_top, c);
    const size_t off = nst_pm_offset(it->layout, it->width, it->height, x, y, c);
    nst_pm_store(batch + it->dst_off, it->dtype, off, v, it->scale[c], it->bias[c]);
}

#endif
