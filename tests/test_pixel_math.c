/*
 * test_pixel_math.c — the GPU augment path's arithmetic against the CPU
 * path, on the host: random images (smooth and noisy, windows partly
 * outside the decoded data, decoded regions with offsets and DCT scales),
 * flips, sizes up and down, letterbox borders, every dtype and layout. Each
 * item is planned as the GPU path plans it (nst_gpu_plan) and run through
 * the kernels' per-element functions (gpu_item.h) one element at a time;
 * the bytes must equal nst_augment()'s. Both pass orders must occur. Also:
 * the normalization tables are pixel_math.h's conversions, and the planner's
 * refusals (bad window, full tables) leave the tables as they were.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "augment/augment.h"
#include "check.h"
#include "common/rng.h"
#include "gpu/gpu.h"

static uint8_t *make_image(nst_rng *r, uint32_t w, uint32_t h, size_t stride, int noisy)
{
    uint8_t *p = malloc(stride * h);
    if (!p) abort();
    const double fx = nst_rng_uniform(r, 0.01, 0.3), fy = nst_rng_uniform(r, 0.01, 0.3);
    for (uint32_t y = 0; y < h; y++)
        for (size_t x = 0; x < stride; x++) {
            const double s = 127.5 + 120.0 * sin(fx * (double)(x / 3) + fy * y + (double)(x % 3));
            p[(size_t)y * stride + x] = noisy ? (uint8_t)nst_rng_below(r, 256) : (uint8_t)s;
        }
    return p;
}

/* The GPU path, serially: plan, pass 1 over the intermediate, pass 2 over
 * the item. 0, or the planner's error. */
static int gpu_sim(nst_gpu_tables *t, const nst_image *img, const nst_window *win, int flip,
                   const nst_output *out, uint8_t *dst, int *vert_first)
{
    nst_gpu_item it;
    t->starts_len = t->coefs_len = 0;
    int rc = nst_gpu_plan(t, img, win, flip, out, &it);
    if (rc < 0) return rc;
    *vert_first = (int)it.vert_first;
    const uint64_t nt = nst_gpu_tmp_elems(&it);
    int16_t *tmp = malloc((size_t)nt * sizeof *tmp + 1);
    if (!tmp) abort();
    for (uint64_t e = 0; e < nt; e++) nst_gpu_pass1(&it, img->data, t->starts, t->coefs, tmp, e);
    const uint64_t n = (uint64_t)it.width * it.height * 3u;
    for (uint64_t e = 0; e < n; e++) nst_gpu_pass2(&it, t->starts, t->coefs, tmp, dst, e);
    free(tmp);
    return 0;
}

static void test_against_cpu(void)
{
    nst_rng r;
    nst_rng_seed(&r, 0x9e3779b97f4a7c15ull);
    nst_augmenter *a;
    CHECK_OK(nst_augmenter_create(&a));
    nst_norm norm;
    const double mean[3] = {0.485, 0.456, 0.406}, stdv[3] = {0.229, 0.224, 0.225};
    nst_norm_init(&norm, mean, stdv);
    nst_gpu_tables t = {0};
    t.starts_cap = 1 << 16;
    t.coefs_cap = 1 << 22;
    t.starts = malloc(t.starts_cap * sizeof *t.starts);
    t.coefs = malloc(t.coefs_cap * sizeof *t.coefs);
    int orders[2] = {0, 0}, mismatches = 0, runs = 0;
    for (int iter = 0; iter < 400; iter++) {
        /* the decoded data: the whole file, or a region of it at a scale */
        const uint32_t w = 1 + (uint32_t)nst_rng_below(&r, iter % 5 == 0 ? 8 : 300);
        const uint32_t h = 1 + (uint32_t)nst_rng_below(&r, iter % 7 == 0 ? 8 : 300);
        const size_t stride = (size_t)w * 3 + nst_rng_below(&r, 3) * 5;
        uint8_t *data = make_image(&r, w, h, stride, iter % 3 == 0);
        nst_image img = {.data = data,
                         .width = w,
                         .height = h,
                         .stride = stride,
                         .scale_num = 1,
                         .scale_den = 1};
        if (iter % 4 == 1) { /* a region decoded at 1/2 or 3/8 */
            img.scale_den = 8;
            img.scale_num = nst_rng_below(&r, 2) ? 4 : 3;
            img.x0 = (uint32_t)nst_rng_below(&r, 20);
            img.y0 = (uint32_t)nst_rng_below(&r, 20);
        }
        const double s = (double)img.scale_den / img.scale_num; /* data px -> file px */
        const double fw = (img.x0 + w) * s, fh = (img.y0 + h) * s;
        nst_window win;
        win.w = nst_rng_uniform(&r, 0.3, fw * 1.1);
        win.h = nst_rng_uniform(&r, 0.3, fh * 1.1);
        win.x = nst_rng_uniform(&r, -0.1 * fw, fw - win.w * 0.5);
        win.y = nst_rng_uniform(&r, -0.1 * fh, fh - win.h * 0.5);
        if (iter % 2) { /* integer windows, as RandomResizedCrop's */
            win.x = floor(win.x);
            win.y = floor(win.y);
            win.w = ceil(win.w);
            win.h = ceil(win.h);
        }
        nst_output out = {.dtype = (int)nst_rng_below(&r, 4),
                          .norm = &norm,
                          .layout = 1 + (int)nst_rng_below(&r, 2),
                          .width = 1 + (uint32_t)nst_rng_below(&r, 160),
                          .height = 1 + (uint32_t)nst_rng_below(&r, 160)};
        if (iter % 6 == 5) nst_letterbox((uint32_t)win.w + 1, (uint32_t)win.h + 1, &out);
        const int flip = (int)nst_rng_below(&r, 2);
        const size_t bytes = nst_output_bytes(&out);
        uint8_t *cpu = malloc(bytes), *gpu = malloc(bytes);
        memset(cpu, 0xa5, bytes);
        memset(gpu, 0x5a, bytes);
        out.dst = cpu;
        int rc_cpu = nst_augment(a, &img, &win, flip, &out);
        int vf = 0, rc_gpu = gpu_sim(&t, &img, &win, flip, &out, gpu, &vf);
        CHECK_EQ(rc_gpu, rc_cpu);
        if (rc_cpu == 0 && rc_gpu == 0) {
            runs++;
            orders[vf]++;
            if (memcmp(cpu, gpu, bytes) != 0) {
                if (mismatches++ < 5)
                    fprintf(stderr,
                            "iter %d: %ux%u (stride %zu, x0 %u y0 %u scale %u/%u) window %g %g "
                            "%g %g flip %d -> %ux%u dtype %d layout %d: bytes differ\n",
                            iter, w, h, stride, img.x0, img.y0, img.scale_num, img.scale_den, win.x,
                            win.y, win.w, win.h, flip, out.width, out.height, out.dtype, out.layout);
            }
        }
        free(cpu);
        free(gpu);
        free(data);
    }
    CHECK_EQ(mismatches, 0);
    CHECK(runs > 350);
    CHECK(orders[0] > 20 && orders[1] > 20); /* both pass orders compared */
    printf("pixel math: %d items equal to the CPU path (%d horizontal first, %d vertical)\n", runs,
           orders[0], orders[1]);
    free(t.starts);
    free(t.coefs);
    nst_gpu_tables_free(&t);
    nst_augmenter_free(a);
}

/* The tables the CPU writers use are pixel_math.h's values. */
static void test_norm_tables(void)
{
    nst_norm n;
    const double mean[3] = {0.5, 0.25, -3.0}, stdv[3] = {0.5, 0.001, 7.0};
    nst_norm_init(&n, mean, stdv);
    int bad = 0;
    for (uint32_t c = 0; c < 3; c++)
        for (int v = 0; v < 256; v++) {
            float f;
            uint16_t h, b;
            nst_pm_store(&f, NST_OUT_F32, 0, (uint8_t)v, n.scale[c], n.bias[c]);
            nst_pm_store(&h, NST_OUT_F16, 0, (uint8_t)v, n.scale[c], n.bias[c]);
            nst_pm_store(&b, NST_OUT_BF16, 0, (uint8_t)v, n.scale[c], n.bias[c]);
            if (memcmp(&f, &n.f32[c * 256 + v], 4) || h != n.f16[c * 256 + v] ||
                b != n.bf16[c * 256 + v])
                bad++;
        }
    CHECK_EQ(bad, 0);
    /* conversions at the edges */
    CHECK_EQ(nst_pm_f32_to_f16(65504.0f), 0x7bff);
    CHECK_EQ(nst_pm_f32_to_f16(65520.0f), 0x7c00);
    CHECK_EQ(nst_pm_f32_to_f16(-0.0f), 0x8000);
    CHECK_EQ(nst_pm_f32_to_f16(5.9604645e-8f), 0x0001); /* 2^-24 */
    CHECK_EQ(nst_pm_f32_to_bf16(1.0f), 0x3f80);
    CHECK_EQ(nst_pm_f32_to_bf16(1.00390625f), 0x3f80); /* tie to even */
    CHECK_EQ(nst_pm_f32_to_bf16(1.01171875f), 0x3f82); /* tie to even, up */
    CHECK_EQ(nst_pm_offset(NST_OUT_NCHW, 5, 4, 2, 3, 1), (1 * 4 + 3) * 5 + 2);
    CHECK_EQ(nst_pm_offset(NST_OUT_NHWC, 5, 4, 2, 3, 1), (3 * 5 + 2) * 3 + 1);
    CHECK_EQ(nst_pm_src_index(0, 7, 1), 6);
    CHECK_EQ(nst_pm_src_index(2, 7, 0), 2);
}

/* Taps: non-negative, summing to one, within the image and the cap. */
static void test_taps(void)
{
    nst_rng r;
    nst_rng_seed(&r, 7);
    int16_t c[2048];
    int bad = 0;
    for (int iter = 0; iter < 2000; iter++) {
        const uint32_t n = 1 + (uint32_t)nst_rng_below(&r, 400);
        const uint32_t size = 1 + (uint32_t)nst_rng_below(&r, 300);
        const double len = nst_rng_uniform(&r, 0.2, n * 1.5);
        const double in0 = nst_rng_uniform(&r, -0.2 * n, n);
        const nst_pm_axis ax = nst_pm_axis_init(in0, len, n, size, iter & 1);
        const uint32_t cap = nst_pm_axis_cap(&ax);
        if (cap > 2048) continue;
        for (uint32_t i = 0; i < size; i++) {
            int32_t cnt;
            const int32_t first = nst_pm_taps(&ax, i, c, &cnt);
            int32_t sum = 0, neg = 0;
            for (int32_t j = 0; j < cnt; j++) {
                sum += c[j];
                neg += c[j] < 0;
            }
            if (sum != NST_AUG_ONE || neg || cnt < 1 || (uint32_t)cnt > cap || first < 0 ||
                (uint32_t)(first + cnt) > n)
                bad++;
        }
    }
    CHECK_EQ(bad, 0);
}

/* Refusals leave the batch's tables as they were. */
static void test_plan_errors(void)
{
    static uint8_t data[16 * 16 * 3];
    nst_image img =
        {.data = data, .width = 16, .height = 16, .stride = 48, .scale_num = 1, .scale_den = 1};
    nst_gpu_tables t = {0};
    int32_t starts[40];
    int16_t coefs[100];
    t.starts = starts;
    t.starts_cap = 40;
    t.coefs = coefs;
    t.coefs_cap = 100;
    nst_output out = {.dtype = NST_OUT_U8, .width = 8, .height = 8, .dst = data};
    nst_window win = {0, 0, 16, 16};
    nst_gpu_item it;
    CHECK_OK(nst_gpu_plan(&t, &img, &win, 0, &out, &it)); /* 2 x 8 starts, 2 x 8 x 4 taps */
    CHECK_EQ(t.starts_len, 16);
    CHECK_EQ(t.coefs_len, 64);
    CHECK_EQ(it.kx, 4);
    CHECK_EQ(it.layout, NST_OUT_NHWC);
    CHECK_RC(nst_gpu_plan(&t, &img, &win, 0, &out, &it),
             NOSTALL_E_NOMEM); /* y: 64 + 32 + 32 > 100 */
    CHECK(strstr(nostall_last_error(), "tables full") != NULL);
    CHECK_EQ(t.starts_len, 16);
    CHECK_EQ(t.coefs_len, 64);
    nst_window nan = {0, 0, NAN, 4};
    CHECK_RC(nst_gpu_plan(&t, &img, &nan, 0, &out, &it), NOSTALL_E_INVALID);
    nst_window empty = {0, 0, 0, 4};
    CHECK_RC(nst_gpu_plan(&t, &img, &empty, 0, &out, &it), NOSTALL_E_INVALID);
    nst_output bad = out;
    bad.dtype = NST_OUT_F32; /* no normalization table */
    CHECK_RC(nst_gpu_plan(&t, &img, &win, 0, &bad, &it), NOSTALL_E_INVALID);
    CHECK_EQ(t.starts_len, 16);
    nst_gpu_tables_free(&t);
}

int main(void)
{
    test_norm_tables();
    test_taps();
    test_plan_errors();
    test_against_cpu();
    TEST_EXIT();
}
