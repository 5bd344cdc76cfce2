/*
 * test_resize.c — the fused resampler (nst_augment) against exact
 * expectations (identity, flip, constants, clamping, float layout, errors,
 * buffer reuse) and against a double-precision reference resampler written
 * here independently (PSNR).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "augment/augment.h"
#include "check.h"

#define NST_TEST_RESIZE_HASH 0xa839a080c37fbb05ull

/* ---- test images ---- */

static uint32_t lcg_state = 12345;
static uint32_t lcg(void)
{
    lcg_state = lcg_state * 1664525u + 1013904223u;
    return lcg_state >> 8;
}

static uint8_t clampd(double v) { return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v + 0.5); }

/* Smooth gradients + a sinusoid + noise + hard edges (a rectangle, a
 * diagonal), different per channel. */
static uint8_t *make_natural(uint32_t w, uint32_t h, double noise)
{
    uint8_t *p = malloc((size_t)w * h * 3);
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++)
            for (int c = 0; c < 3; c++) {
                double v = 40 + 120.0 * x / w + 60.0 * y / h * (c + 1) / 3;
                v += 25 * sin(x * 0.05 + c) * cos(y * 0.031);
                if (x > w / 4 && x < w / 2 && y > h / 3 && y < 2 * h / 3) v += 70 - 40 * c;
                if (x + y / 2 > w * 3 / 4 && x + y / 2 < w * 3 / 4 + 6) v = 250 - 100 * c;
                v += noise * (((double)(lcg() & 0xffff) / 65535.0) - 0.5);
                p[((size_t)y * w + x) * 3 + c] = clampd(v);
            }
    return p;
}

static nst_image full_image(const uint8_t *data, uint32_t w, uint32_t h)
{
    nst_image im;
    memset(&im, 0, sizeof im);
    im.data = data;
    im.width = im.full_width = im.src_width = w;
    im.height = im.full_height = im.src_height = h;
    im.stride = (size_t)w * 3;
    im.scale_num = im.scale_den = 1;
    return im;
}

static int aug_u8(nst_augmenter *a, const nst_image *im, double x, double y, double w, double h,
                  uint32_t size, int flip, uint8_t *dst)
{
    nst_window win = {x, y, w, h};
    nst_output out = {NST_OUT_UINT8_NHWC, size, dst, NULL};
    return nst_augment(a, im, &win, flip, &out);
}

/* ---- double-precision reference: triangle filter, support max(1, scale),
 * edge-clamped taps, no fixed point, no intermediate rounding ---- */

static int ref_taps(double in0, double len, int n, int size, int i, int *idx, double *wt)
{
    double scale = len / size, sup = scale > 1 ? scale : 1;
    double c = in0 + (i + 0.5) * scale, tot = 0;
    int cnt = 0;
    for (long x = (long)floor(c - sup) - 1; x <= (long)ceil(c + sup) + 1; x++) {
        double t = fabs(x + 0.5 - c) / sup;
        if (t >= 1) continue;
        idx[cnt] = x < 0 ? 0 : x >= n ? n - 1 : (int)x;
        wt[cnt] = 1 - t;
        tot += wt[cnt++];
    }
    for (int k = 0; k < cnt; k++) wt[k] /= tot;
    return cnt;
}

static double *ref_resample(const uint8_t *src, int W, int H, double x, double y, double w,
                            double h, int size)
{
    int kmax = 2 * (int)ceil(fmax(w, h) / size + 1) + 8;
    int *idx = malloc(sizeof(int) * kmax);
    double *wt = malloc(sizeof(double) * kmax);
    double *tmp = calloc((size_t)H * size * 3, sizeof(double));
    double *out = calloc((size_t)size * size * 3, sizeof(double));
    for (int i = 0; i < size; i++) {
        int n = ref_taps(x, w, W, size, i, idx, wt);
        for (int r = 0; r < H; r++)
            for (int k = 0; k < n; k++)
                for (int c = 0; c < 3; c++)
                    tmp[((size_t)r * size + i) * 3 + c] +=
                        wt[k] * src[((size_t)r * W + idx[k]) * 3 + c];
    }
    for (int j = 0; j < size; j++) {
        int n = ref_taps(y, h, H, size, j, idx, wt);
        for (int k = 0; k < n; k++)
            for (int i = 0; i < size * 3; i++)
                out[(size_t)j * size * 3 + i] += wt[k] * tmp[(size_t)idx[k] * size * 3 + i];
    }
    free(idx);
    free(wt);
    free(tmp);
    return out;
}

static double psnr_ref(const uint8_t *a, const double *ref, size_t n)
{
    double mse = 0;
    for (size_t i = 0; i < n; i++) mse += (a[i] - ref[i]) * (a[i] - ref[i]);
    mse /= (double)n;
    return mse == 0 ? 999 : 10 * log10(255.0 * 255.0 / mse);
}

static double psnr_u8(const uint8_t *a, const uint8_t *b, size_t n)
{
    double mse = 0;
    for (size_t i = 0; i < n; i++) mse += (double)(a[i] - b[i]) * (a[i] - b[i]);
    mse /= (double)n;
    return mse == 0 ? 999 : 10 * log10(255.0 * 255.0 / mse);
}

/* ---- tests ---- */

static void test_identity(nst_augmenter *a)
{
    const uint32_t W = 97, H = 61;
    uint8_t *img = make_natural(W, H, 40);
    /* Same image with a padded stride. */
    size_t stride = W * 3 + 13;
    uint8_t *padded = malloc(stride * H);
    memset(padded, 0xAB, stride * H);
    for (uint32_t y = 0; y < H; y++) memcpy(padded + y * stride, img + y * W * 3, W * 3);
    /* Square output needs a square image for identity. */
    uint8_t *sq = malloc(61 * 61 * 3), *out = malloc(61 * 61 * 3);
    for (uint32_t y = 0; y < 61; y++) memcpy(sq + y * 61 * 3, img + y * W * 3, 61 * 3);
    nst_image im = full_image(sq, 61, 61);
    CHECK_OK(aug_u8(a, &im, 0, 0, 61, 61, 61, 0, out));
    CHECK(memcmp(out, sq, 61 * 61 * 3) == 0);
    /* A 61x61 window of the padded-stride image, integer offset. */
    nst_image ip = full_image(padded, W, H);
    ip.stride = stride;
    CHECK_OK(aug_u8(a, &ip, 20, 0, 61, 61, 61, 0, out));
    int ok = 1;
    for (uint32_t y = 0; y < 61; y++)
        if (memcmp(out + y * 61 * 3, img + (y * W + 20) * 3, 61 * 3) != 0) ok = 0;
    CHECK(ok);
    free(img);
    free(padded);
    free(sq);
    free(out);
}

static void test_flip(nst_augmenter *a)
{
    const uint32_t W = 320, H = 240;
    uint8_t *img = make_natural(W, H, 30);
    nst_image im = full_image(img, W, H);
    const double wins[][5] = {{10.5, 20.25, 250.7, 200.1, 96},
                              {100, 50, 30, 40, 77},
                              {-10, -5, 340, 250, 64}};
    for (size_t t = 0; t < sizeof wins / sizeof wins[0]; t++) {
        uint32_t s = (uint32_t)wins[t][4];
        uint8_t *o = malloc((size_t)s * s * 3), *f = malloc((size_t)s * s * 3);
        CHECK_OK(aug_u8(a, &im, wins[t][0], wins[t][1], wins[t][2], wins[t][3], s, 0, o));
        CHECK_OK(aug_u8(a, &im, wins[t][0], wins[t][1], wins[t][2], wins[t][3], s, 1, f));
        int ok = 1;
        for (uint32_t y = 0; y < s; y++)
            for (uint32_t x = 0; x < s; x++)
                if (memcmp(f + ((size_t)y * s + x) * 3, o + ((size_t)y * s + s - 1 - x) * 3, 3))
                    ok = 0;
        CHECK(ok);
        CHECK(memcmp(o, f, (size_t)s * s * 3) != 0); /* not symmetric by accident */
        free(o);
        free(f);
    }
    free(img);
}

static void test_quality(nst_augmenter *a)
{
    const uint32_t W = 640, H = 480;
    uint8_t *img = make_natural(W, H, 40);
    nst_image im = full_image(img, W, H);
    const double wins[][5] = {
        {80.25, 60.5, 480, 360, 224},    /* ~2.1x down, fractional origin */
        {100.3, 200.7, 50, 40, 224},     /* strong upscale */
        {10, 150, 400, 100, 224},        /* down in x, up in y */
        {33.3, 21.9, 417.6, 401.2, 224}, /* fractional everything */
        {0, 0, 640, 480, 32},            /* strong downscale (20x / 15x) */
        {5.5, 7.75, 600.5, 33.3, 160},   /* very elongated */
        {0, 0, 640, 480, 224},
        {0, 0, 640, 480, 7},            /* ~90x: many taps, generic path */
        {-50.5, 100.2, 700.3, 20.1, 5}, /* outside the image, 140x */
    };
    for (size_t t = 0; t < sizeof wins / sizeof wins[0]; t++) {
        uint32_t s = (uint32_t)wins[t][4];
        size_t n = (size_t)s * s * 3;
        uint8_t *o = malloc(n);
        CHECK_OK(aug_u8(a, &im, wins[t][0], wins[t][1], wins[t][2], wins[t][3], s, 0, o));
        double *ref =
            ref_resample(img, W, H, wins[t][0], wins[t][1], wins[t][2], wins[t][3], (int)s);
        double p = psnr_ref(o, ref, n);
        double maxerr = 0;
        for (size_t i = 0; i < n; i++) maxerr = fmax(maxerr, fabs(o[i] - ref[i]));
        printf("quality: window %zu -> %u: PSNR %.2f dB, max |err| %.3f\n", t, s, p, maxerr);
        CHECK(p >= 40.0);
        CHECK(maxerr <= 1.5);
        free(o);
        free(ref);
    }
    free(img);
}

/* Images smaller than the filter: taps clamped to very few pixels. */
static void test_tiny(nst_augmenter *a)
{
    const uint32_t dims[][2] = {{1, 1}, {3, 2}, {1, 9}, {7, 1}};
    for (size_t t = 0; t < sizeof dims / sizeof dims[0]; t++) {
        uint32_t W = dims[t][0], H = dims[t][1];
        uint8_t *img = make_natural(W, H, 200);
        nst_image im = full_image(img, W, H);
        const double wins[][5] = {{0, 0, W, H, 9},
                                  {-0.5, 0.25, W + 1.5, H * 0.5, 4},
                                  {0, 0, W, H, 1}};
        for (size_t u = 0; u < 3; u++) {
            uint32_t s = (uint32_t)wins[u][4];
            size_t n = (size_t)s * s * 3;
            uint8_t *o = malloc(n);
            CHECK_OK(aug_u8(a, &im, wins[u][0], wins[u][1], wins[u][2], wins[u][3], s, 0, o));
            double *ref = ref_resample(img, (int)W, (int)H, wins[u][0], wins[u][1], wins[u][2],
                                       wins[u][3], (int)s);
            double maxerr = 0;
            for (size_t i = 0; i < n; i++) maxerr = fmax(maxerr, fabs(o[i] - ref[i]));
            CHECK(maxerr <= 1.0);
            free(o);
            free(ref);
        }
        free(img);
    }
}

static void test_float(nst_augmenter *a)
{
    const uint32_t W = 200, H = 150, S = 57;
    uint8_t *img = make_natural(W, H, 30);
    nst_image im = full_image(img, W, H);
    nst_norm lut;
    const double mean[3] = {0.485, 0.456, 0.406}, stdv[3] = {0.229, 0.224, 0.225};
    nst_norm_init(&lut, mean, stdv);
    CHECK(fabsf(lut.f32[0] - (float)((0 - 0.485) / 0.229)) < 1e-6f);
    CHECK(fabsf(lut.f32[256 + 255] - (float)((1 - 0.456) / 0.224)) < 1e-6f);
    CHECK(fabsf(lut.f32[512 + 128] - (float)((128 / 255.0 - 0.406) / 0.225)) < 1e-6f);
    for (int flip = 0; flip < 2; flip++) {
        uint8_t *o = malloc(S * S * 3);
        float *f = malloc(sizeof(float) * (S * S * 3 + 1));
        f[S * S * 3] = 12345.0f; /* sentinel just past the end */
        nst_window win = {13.7, 9.1, 160.2, 121.5};
        nst_output ou = {NST_OUT_UINT8_NHWC, S, o, NULL};
        nst_output of = {NST_OUT_FLOAT_NCHW, S, f, &lut};
        CHECK_OK(nst_augment(a, &im, &win, flip, &ou));
        CHECK_OK(nst_augment(a, &im, &win, flip, &of));
        int ok = 1;
        for (uint32_t c = 0; c < 3; c++)
            for (uint32_t p = 0; p < S * S; p++) {
                float want = lut.f32[c * 256 + o[p * 3 + c]];
                if (memcmp(&f[c * S * S + p], &want, sizeof want)) ok = 0;
            }
        CHECK(ok);
        CHECK(f[S * S * 3] == 12345.0f);
        free(o);
        free(f);
    }
    free(img);
}

static void test_constant(nst_augmenter *a)
{
    const uint32_t W = 123, H = 77;
    const uint8_t rgb[3] = {0, 255, 137};
    uint8_t *img = malloc(W * H * 3);
    for (size_t i = 0; i < W * H; i++) memcpy(img + 3 * i, rgb, 3);
    nst_image im = full_image(img, W, H);
    const double wins[][5] = {{0, 0, 123, 77, 64},
                              {3.3, 4.4, 10.1, 7.7, 100},
                              {-20.5, -3, 160, 90, 31},
                              {1, 1, 121, 75, 1},
                              {0.123, 0.456, 117.7, 70.3, 224}};
    for (size_t t = 0; t < sizeof wins / sizeof wins[0]; t++) {
        uint32_t s = (uint32_t)wins[t][4];
        uint8_t *o = malloc((size_t)s * s * 3);
        CHECK_OK(aug_u8(a, &im, wins[t][0], wins[t][1], wins[t][2], wins[t][3], s, 0, o));
        int ok = 1;
        for (size_t i = 0; i < (size_t)s * s; i++)
            if (memcmp(o + 3 * i, rgb, 3)) ok = 0;
        CHECK(ok);
        free(o);
    }
    free(img);
}

static void test_clamp(nst_augmenter *a)
{
    const uint32_t W = 50, H = 40;
    /* Exact-size allocation so ASan catches any read past the data. */
    uint8_t *img = make_natural(W, H, 60);
    nst_image im = full_image(img, W, H);
    /* Entirely left of the image, vertical identity: every output pixel of
     * row y is the image's pixel (0, y). */
    uint8_t *o = malloc(H * H * 3);
    CHECK_OK(aug_u8(a, &im, -100, 0, 60, H, H, 0, o));
    int ok = 1;
    for (uint32_t y = 0; y < H; y++)
        for (uint32_t x = 0; x < H; x++)
            if (memcmp(o + (y * H + x) * 3, img + y * W * 3, 3)) ok = 0;
    CHECK(ok);
    free(o);

    /* Partly outside at the top-left and at the bottom-right: outputs whose
     * every tap lies beyond the corner equal the corner pixel. */
    const uint32_t S = 64;
    o = malloc(S * S * 3);
    double x0 = -30.5, y0 = -20.25, w = 100, h = 90;
    CHECK_OK(aug_u8(a, &im, x0, y0, w, h, S, 0, o));
    int n = 0;
    ok = 1;
    for (uint32_t j = 0; j < S; j++)
        for (uint32_t i = 0; i < S; i++) {
            double sx = fmax(1, w / S), sy = fmax(1, h / S);
            double cx = x0 + (i + 0.5) * w / S, cy = y0 + (j + 0.5) * h / S;
            if (cx + sx < 0.5 && cy + sy < 0.5) {
                n++;
                if (memcmp(o + (j * S + i) * 3, img, 3)) ok = 0;
            }
        }
    CHECK(ok);
    CHECK(n > 50);
    x0 = W - 20.3;
    y0 = H - 10.6;
    w = 60;
    h = 55;
    CHECK_OK(aug_u8(a, &im, x0, y0, w, h, S, 1, o));
    n = 0;
    ok = 1;
    const uint8_t *corner = img + ((H - 1) * W + (W - 1)) * 3;
    for (uint32_t j = 0; j < S; j++)
        for (uint32_t i = 0; i < S; i++) {
            uint32_t src_i = S - 1 - i; /* flipped */
            double sx = fmax(1, w / S), sy = fmax(1, h / S);
            double cx = x0 + (src_i + 0.5) * w / S, cy = y0 + (j + 0.5) * h / S;
            if (cx - sx + 0.5 >= W && cy - sy + 0.5 >= H) {
                n++;
                if (memcmp(o + (j * S + i) * 3, corner, 3)) ok = 0;
            }
        }
    CHECK(ok);
    CHECK(n > 50);
    /* A window far outside in both directions. */
    CHECK_OK(aug_u8(a, &im, 1e6, -1e6, 3000, 2000, S, 0, o));
    ok = 1;
    const uint8_t *bl = img + (W - 1) * 3; /* top-right pixel (x=W-1, y=0) */
    for (uint32_t i = 0; i < S * S; i++)
        if (memcmp(o + 3 * i, bl, 3)) ok = 0;
    CHECK(ok);
    free(o);
    free(img);
}

/* Half-resolution decoded region vs the full-resolution image. */
static void test_mapping(nst_augmenter *a)
{
    const uint32_t W = 400, H = 300;
    uint8_t *full = make_natural(W, H, 8);
    /* 2x2 box-average to 200x150, then keep the region x in [20, 140),
     * y in [10, 110) of that half-size image. */
    const uint32_t RX = 20, RY = 10, RW = 120, RH = 100;
    uint8_t *reg = malloc(RW * RH * 3);
    for (uint32_t y = 0; y < RH; y++)
        for (uint32_t x = 0; x < RW; x++)
            for (int c = 0; c < 3; c++) {
                uint32_t fx = 2 * (RX + x), fy = 2 * (RY + y);
                int s = full[(fy * W + fx) * 3 + c] + full[(fy * W + fx + 1) * 3 + c] +
                        full[((fy + 1) * W + fx) * 3 + c] + full[((fy + 1) * W + fx + 1) * 3 + c];
                reg[(y * RW + x) * 3 + c] = (uint8_t)((s + 2) / 4);
            }
    nst_image fi = full_image(full, W, H);
    nst_image hi;
    memset(&hi, 0, sizeof hi);
    hi.data = reg;
    hi.width = RW;
    hi.height = RH;
    hi.stride = RW * 3;
    hi.x0 = RX;
    hi.y0 = RY;
    hi.scale_num = 1;
    hi.scale_den = 2;
    hi.full_width = W / 2;
    hi.full_height = H / 2;
    hi.src_width = W;
    hi.src_height = H;
    const double wins[][5] = {{60, 40, 200, 180, 64},
                              {70.5, 33.3, 150.2, 150.7, 96},
                              {45, 25, 230, 190, 224}};
    for (size_t t = 0; t < sizeof wins / sizeof wins[0]; t++) {
        uint32_t s = (uint32_t)wins[t][4];
        size_t n = (size_t)s * s * 3;
        uint8_t *o1 = malloc(n), *o2 = malloc(n);
        CHECK_OK(aug_u8(a, &fi, wins[t][0], wins[t][1], wins[t][2], wins[t][3], s, 0, o1));
        CHECK_OK(aug_u8(a, &hi, wins[t][0], wins[t][1], wins[t][2], wins[t][3], s, 0, o2));
        double p = psnr_u8(o1, o2, n);
        printf("mapping: window %zu -> %u: PSNR %.2f dB\n", t, s, p);
        CHECK(p >= 25.0);
        free(o1);
        free(o2);
    }
    free(full);
    free(reg);
}

static void test_errors(nst_augmenter *a)
{
    uint8_t img[4 * 4 * 3] = {0};
    uint8_t o[8 * 8 * 3];
    float fo[8 * 8 * 3];
    nst_image im = full_image(img, 4, 4);
    CHECK_RC(aug_u8(a, &im, 0, 0, 0, 4, 8, 0, o), NOSTALL_E_INVALID);
    CHECK(strncmp(nostall_last_error(), "augment: ", 9) == 0);
    CHECK_RC(aug_u8(a, &im, 0, 0, 4, 0, 8, 0, o), NOSTALL_E_INVALID);
    CHECK_RC(aug_u8(a, &im, 0, 0, -1, 4, 8, 0, o), NOSTALL_E_INVALID);
    CHECK_RC(aug_u8(a, &im, NAN, 0, 4, 4, 8, 0, o), NOSTALL_E_INVALID);
    CHECK_RC(aug_u8(a, &im, 0, 0, INFINITY, 4, 8, 0, o), NOSTALL_E_INVALID);
    CHECK_RC(aug_u8(a, &im, 0, 0, 4, NAN, 8, 0, o), NOSTALL_E_INVALID);
    CHECK_RC(aug_u8(a, &im, 0, 0, 1e30, 4, 8, 0, o), NOSTALL_E_INVALID);
    CHECK_RC(aug_u8(a, &im, 0, 0, 4, 4, 0, 0, o), NOSTALL_E_INVALID);
    CHECK(strncmp(nostall_last_error(), "augment: ", 9) == 0);
    nst_window win = {0, 0, 4, 4};
    nst_output bad = {NST_OUT_FLOAT_NCHW, 8, fo, NULL};
    CHECK_RC(nst_augment(a, &im, &win, 0, &bad), NOSTALL_E_INVALID);
    bad.dtype = 7;
    CHECK_RC(nst_augment(a, &im, &win, 0, &bad), NOSTALL_E_INVALID);
    nst_image z = im;
    z.scale_den = 0;
    CHECK_RC(aug_u8(a, &z, 0, 0, 4, 4, 8, 0, o), NOSTALL_E_INVALID);
    /* Still usable after errors. */
    CHECK_OK(aug_u8(a, &im, 0, 0, 4, 4, 8, 0, o));
}

static void test_reuse(nst_augmenter *a)
{
    const uint32_t W = 300, H = 220;
    uint8_t *img = make_natural(W, H, 30);
    nst_image im = full_image(img, W, H);
    uint32_t rs = 99;
    int ok = 1;
    for (int t = 0; t < 60; t++) {
        rs = rs * 1103515245u + 12345u;
        uint32_t s = 1 + (rs >> 8) % 150;
        rs = rs * 1103515245u + 12345u;
        double w = 1 + (rs >> 8) % 400 * 0.73, h = 1 + (rs >> 12) % 300 * 0.61;
        rs = rs * 1103515245u + 12345u;
        double x = (double)((rs >> 8) % 400) * 0.77 - 40, y = (double)((rs >> 16) % 300) * 0.71 - 30;
        size_t n = (size_t)s * s * 3;
        uint8_t *o1 = malloc(n), *o2 = malloc(n);
        nst_augmenter *f = NULL;
        CHECK_OK(nst_augmenter_create(&f));
        CHECK_OK(aug_u8(a, &im, x, y, w, h, s, t & 1, o1));
        CHECK_OK(aug_u8(f, &im, x, y, w, h, s, t & 1, o2));
        if (memcmp(o1, o2, n)) ok = 0;
        nst_augmenter_free(f);
        free(o1);
        free(o2);
    }
    CHECK(ok);
    nst_augmenter_free(NULL);
    free(img);
}

/* The SIMD and the portable (-DNST_RESIZE_SCALAR) paths do the same
 * integer arithmetic, so both must produce these exact bytes: a hash over
 * outputs covering both pass orders, odd and even tap counts, flips, edge
 * clamping and the generic (many-tap) kernels. Update the constant only for
 * an intentional change of the arithmetic, checked on both builds. */
static void test_bitexact(nst_augmenter *a)
{
    const uint32_t W = 211, H = 167;
    lcg_state = 777;
    uint8_t *img = make_natural(W, H, 50);
    nst_image im = full_image(img, W, H);
    const double wins[][5] = {{3.3, 7.9, 190.2, 150.1, 64},    {20.5, 10.25, 40.3, 30.7, 97},
                              {-15.2, 5.5, 230.9, 60.3, 50},   {0, 0, 211, 167, 9},
                              {100.1, 80.7, 111.3, 90.2, 111}, {7, 3, 17, 160, 33}};
    uint64_t h = 1469598103934665603ull;
    for (size_t t = 0; t < sizeof wins / sizeof wins[0]; t++)
        for (int flip = 0; flip < 2; flip++) {
            uint32_t s = (uint32_t)wins[t][4];
            size_t n = (size_t)s * s * 3;
            uint8_t *o = malloc(n);
            CHECK_OK(aug_u8(a, &im, wins[t][0], wins[t][1], wins[t][2], wins[t][3], s, flip, o));
            for (size_t i = 0; i < n; i++) h = (h ^ o[i]) * 1099511628211ull;
            free(o);
        }
    printf("bitexact: hash %016llx\n", (unsigned long long)h);
    CHECK(h == NST_TEST_RESIZE_HASH);
    free(img);
}

/* The AVX2 kernels (x86-64, chosen at run time) against the SSE2 ones
 * (NOSTALL_NO_AVX2=1 at augmenter creation): identical bytes over random
 * windows (both pass orders, odd and even sizes and tap counts, flips,
 * clamping) and a float output. Nothing to compare without AVX2. */
static void test_avx2(void)
{
#if defined(__x86_64__) && defined(__GNUC__) && !defined(NST_RESIZE_SCALAR)
    if (!__builtin_cpu_supports("avx2")) {
        printf("avx2: no AVX2, skipped\n");
        return;
    }
    const char *env = getenv("NOSTALL_NO_AVX2");
    char *saved = env ? strdup(env) : NULL;
    nst_augmenter *on = NULL, *off = NULL;
    unsetenv("NOSTALL_NO_AVX2");
    CHECK_OK(nst_augmenter_create(&on));
    setenv("NOSTALL_NO_AVX2", "1", 1);
    CHECK_OK(nst_augmenter_create(&off));
    if (saved)
        setenv("NOSTALL_NO_AVX2", saved, 1);
    else
        unsetenv("NOSTALL_NO_AVX2");
    free(saved);
    if (!on || !off) {
        nst_augmenter_free(on);
        nst_augmenter_free(off);
        return;
    }
    const uint32_t W = 257, H = 203;
    uint8_t *img = make_natural(W, H, 60);
    nst_image im = full_image(img, W, H);
    uint32_t rs = 4242;
    int ok = 1;
    for (int t = 0; t < 200; t++) {
        rs = rs * 1103515245u + 12345u;
        uint32_t s = 1 + (rs >> 8) % 240;
        rs = rs * 1103515245u + 12345u;
        double w = 0.5 + (rs >> 8) % 500 * 0.71, h = 0.5 + (rs >> 12) % 400 * 0.59;
        rs = rs * 1103515245u + 12345u;
        double x = (double)((rs >> 8) % 300) * 0.83 - 30, y = (double)((rs >> 16) % 250) * 0.79 - 25;
        size_t n = (size_t)s * s * 3;
        uint8_t *o1 = malloc(n), *o2 = malloc(n);
        CHECK_OK(aug_u8(on, &im, x, y, w, h, s, t & 1, o1));
        CHECK_OK(aug_u8(off, &im, x, y, w, h, s, t & 1, o2));
        if (memcmp(o1, o2, n)) ok = 0;
        free(o1);
        free(o2);
    }
    const uint32_t S = 224;
    nst_norm lut;
    const double mean[3] = {0.485, 0.456, 0.406}, stdv[3] = {0.229, 0.224, 0.225};
    nst_norm_init(&lut, mean, stdv);
    float *f1 = malloc(sizeof(float) * S * S * 3), *f2 = malloc(sizeof(float) * S * S * 3);
    nst_window win = {11.3, 7.9, 231.4, 180.2};
    nst_output of1 = {NST_OUT_FLOAT_NCHW, S, f1, &lut}, of2 = {NST_OUT_FLOAT_NCHW, S, f2, &lut};
    CHECK_OK(nst_augment(on, &im, &win, 1, &of1));
    CHECK_OK(nst_augment(off, &im, &win, 1, &of2));
    if (memcmp(f1, f2, sizeof(float) * S * S * 3)) ok = 0;
    CHECK(ok);
    printf("avx2: %s SSE2\n", ok ? "identical to" : "DIFFERS from");
    free(f1);
    free(f2);
    free(img);
    nst_augmenter_free(on);
    nst_augmenter_free(off);
#else
    printf("avx2: not x86-64 (or the portable build), skipped\n");
#endif
}

int main(void)
{
    nst_augmenter *a = NULL;
    CHECK_OK(nst_augmenter_create(&a));
    if (!a) TEST_EXIT();
    test_identity(a);
    test_flip(a);
    test_quality(a);
    test_tiny(a);
    test_float(a);
    test_constant(a);
    test_clamp(a);
    test_mapping(a);
    test_errors(a);
    test_reuse(a);
    test_bitexact(a);
    test_avx2();
    nst_augmenter_free(a);
    TEST_EXIT();
}
