/*
 * plan.c — the host's part of GPU augmentation: an item's window, flip and
 * output (exactly what the CPU path hands nst_augment()) turned into an
 * nst_gpu_item and its filter taps, appended to a batch's tables, for the
 * kernels of augment.cu (gpu_item.h). The taps come from nst_pm_taps()
 * (common/pixel_math.h), the function resize.c builds its own from, laid out
 * as resize.c lays them out (aligned starts, k taps per output) and the pass
 * order chosen by the same cost model, so the device computes the CPU path's
 * bytes.
 *
 * Threads: the tables belong to whoever assembles the batch; no global
 * state. No allocation but the tables' scratch (grow-only).
 */
#include <math.h>
#include <string.h>

#include "augment/augment.h"
#include "common/error.h"
#include "gpu/gpu.h"

/* An axis of `size` outputs over [in0, in0 + len) of n pixels, appended. */
static int plan_axis(nst_gpu_tables *t, double in0, double len, uint32_t n, uint32_t size, int flip,
                     uint32_t *k_out, uint64_t *s_off, uint64_t *c_off, int32_t *lo_out,
                     int32_t *hi_out)
{
    const nst_pm_axis pa = nst_pm_axis_init(in0, len, n, size, flip);
    const uint32_t kc = nst_pm_axis_cap(&pa);
    size_t nk, nw;
    if (nst_mul_overflow(size, kc, &nk) || nst_mul_overflow(nk, sizeof(int16_t), &nw) ||
        nst_add_overflow(nw, (size_t)size * 2 * sizeof(int32_t), &nw))
        return nst_error(NOSTALL_E_NOMEM, "gpu plan: filter too large");
    int rc = nst_buf_reserve(&t->work, nw);
    if (rc < 0) return rc;
    int32_t *bounds = (int32_t *)(void *)t->work.data;
    int16_t *w = (int16_t *)(void *)(bounds + (size_t)size * 2);
    uint32_t k = 1;
    for (uint32_t i = 0; i < size; i++) {
        int32_t cnt;
        bounds[2 * i] = nst_pm_taps(&pa, i, w + (size_t)i * kc, &cnt);
        bounds[2 * i + 1] = cnt;
        if ((uint32_t)cnt > k) k = (uint32_t)cnt;
    }
    if (t->starts_len + size > t->starts_cap || t->coefs_len + (size_t)size * k > t->coefs_cap)
        return nst_error(NOSTALL_E_NOMEM, "gpu plan: batch tap tables full (%zu starts, %zu taps)",
                         t->starts_cap, t->coefs_cap);
    int32_t *starts = t->starts + t->starts_len;
    int16_t *coefs = t->coefs + t->coefs_len;
    int32_t lo = INT32_MAX, hi = 0;
    for (uint32_t i = 0; i < size; i++) {
        const int32_t first = bounds[2 * i], cnt = bounds[2 * i + 1];
        const int32_t start = first < (int32_t)(n - k) ? first : (int32_t)(n - k);
        int16_t *c = coefs + (size_t)i * k;
        memset(c, 0, sizeof(int16_t) * k);
        memcpy(c + (first - start), w + (size_t)i * kc, sizeof(int16_t) * (size_t)cnt);
        starts[i] = start;
        if (start < lo) lo = start;
        if (start + (int32_t)k > hi) hi = start + (int32_t)k;
    }
    *k_out = k;
    *s_off = t->starts_len;
    *c_off = t->coefs_len;
    *lo_out = lo;
    *hi_out = hi;
    t->starts_len += size;
    t->coefs_len += (size_t)size * k;
    return 0;
}

int nst_gpu_plan(nst_gpu_tables *t, const nst_image *img, const nst_window *win, int flip,
                 const nst_output *out, nst_gpu_item *it)
{
    nst_output o, in = *out;
    static uint8_t nowhere; /* out->dst is not used: the item's offset is the caller's */
    if (!in.dst) in.dst = &nowhere;
    int rc = nst_out_resolve(&in, &o);
    if (rc < 0) return rc;
    if (!img->width || !img->height || !img->scale_num || !img->scale_den ||
        img->width > NST_AUG_MAX_SIDE || img->height > NST_AUG_MAX_SIDE ||
        img->stride / 3 < img->width || img->stride > UINT32_MAX)
        return nst_error(NOSTALL_E_INVALID, "gpu plan: bad image %ux%u", img->width, img->height);
    /* The window in the coordinates of the decoded pixels (as resize.c). */
    const double s = (double)img->scale_num / (double)img->scale_den;
    const double wx = win->x * s - (double)img->x0, wy = win->y * s - (double)img->y0;
    const double ww = win->w * s, wh = win->h * s, m = (double)NST_AUG_MAX_SIDE;
    if (!(fabs(wx) <= m && fabs(wy) <= m && ww <= m && wh <= m && ww > 0.0 && wh > 0.0))
        return nst_error(NOSTALL_E_INVALID, "gpu plan: window (x %g, y %g, w %g, h %g) out of range",
                         win->x, win->y, win->w, win->h);
    memset(it, 0, sizeof *it);
    const size_t s0 = t->starts_len, c0 = t->coefs_len;
    if ((rc = plan_axis(t, wx, ww, img->width, o.inner_width, flip, &it->kx, &it->xs_off,
                        &it->xc_off, &it->xlo, &it->xhi)) < 0 ||
        (rc = plan_axis(t, wy, wh, img->height, o.inner_height, 0, &it->ky, &it->ys_off,
                        &it->yc_off, &it->ylo, &it->yhi)) < 0) {
        t->starts_len = s0; /* the item is not in the tables */
        t->coefs_len = c0;
        return rc;
    }
    it->src_w = img->width;
    it->src_h = img->height;
    it->src_stride = (uint32_t)img->stride;
    it->vert_first =
        (uint32_t)nst_pm_vert_first(o.inner_width, o.inner_height, it->kx, it->ky,
                                    (double)(it->xhi - it->xlo), (double)(it->yhi - it->ylo));
    it->width = o.width;
    it->height = o.height;
    it->pad_left = o.pad_left;
    it->pad_top = o.pad_top;
    it->inner_w = o.inner_width;
    it->inner_h = o.inner_height;
    it->dtype = o.dtype;
    it->layout = o.layout;
    for (int c = 0; c < 3; c++) {
        it->scale[c] = o.norm ? o.norm->scale[c] : 1.0f;
        it->bias[c] = o.norm ? o.norm->bias[c] : 0.0f;
    }
    return 0;
}

void nst_gpu_tables_free(nst_gpu_tables *t) { nst_buf_free(&t->work); }
