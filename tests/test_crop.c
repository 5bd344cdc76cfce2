/*
 * test_crop.c — crop geometry: RandomResizedCrop bounds, statistics, draw
 * order, fallback and determinism; CenterCrop golden values computed by hand
 * from torchvision's formulas.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "augment/augment.h"
#include "check.h"

#define W 500
#define H 375

static int is_int(double v) { return v == floor(v); }

/* Every draw: integer window inside the image, area and aspect consistent
 * with the parameters up to the rounding of w and h to integers. */
static void test_bounds(double smin, double smax, double rmin, double rmax)
{
    nst_rng r;
    nst_rng_seed(&r, 0x5eed);
    const double area = (double)W * H;
    int bad_inside = 0, bad_area = 0, bad_ratio = 0;
    for (int t = 0; t < 10000; t++) {
        nst_window win;
        nst_crop_random_resized(W, H, smin, smax, rmin, rmax, &r, &win);
        if (!(is_int(win.x) && is_int(win.y) && is_int(win.w) && is_int(win.h) && win.w > 0 &&
              win.h > 0 && win.x >= 0 && win.y >= 0 && win.x + win.w <= W && win.y + win.h <= H))
            bad_inside++;
        int fallback = win.x == 0 && win.y == 0 && win.w == W && win.h == H;
        if (fallback) continue;
        /* target area A and aspect q satisfy |w - sqrt(A q)| <= 0.5 and
         * |h - sqrt(A / q)| <= 0.5. */
        if ((win.w + 0.5) * (win.h + 0.5) < smin * area ||
            (win.w - 0.5) * (win.h - 0.5) > smax * area)
            bad_area++;
        if ((win.w + 0.5) / (win.h - 0.5) < rmin || (win.w - 0.5) / (win.h + 0.5) > rmax)
            bad_ratio++;
    }
    CHECK_EQ(bad_inside, 0);
    CHECK_EQ(bad_area, 0);
    CHECK_EQ(bad_ratio, 0);
}

/* With scale [0.08, 0.5] on 500x375 every first attempt is accepted (the
 * largest side is sqrt(0.5 * 187500 * 4/3) = 353.6 < 375), so the draws can
 * be replayed here: area fraction, log ratio, then top, then left. */
static void test_draw_order_and_stats(void)
{
    const double smin = 0.08, smax = 0.5, rmin = 3.0 / 4, rmax = 4.0 / 3;
    nst_rng r, replay;
    nst_rng_seed(&r, 42);
    double sum_frac = 0, sum_lr = 0;
    int mismatch = 0;
    const int N = 10000;
    for (int t = 0; t < N; t++) {
        replay = r;
        nst_window win;
        nst_crop_random_resized(W, H, smin, smax, rmin, rmax, &r, &win);
        double frac = nst_rng_uniform(&replay, smin, smax);
        double lr = nst_rng_uniform(&replay, log(rmin), log(rmax));
        double target = W * H * frac, aspect = exp(lr);
        double w = nearbyint(sqrt(target * aspect)), h = nearbyint(sqrt(target / aspect));
        double top = (double)nst_rng_below(&replay, (uint64_t)(H - h + 1));
        double left = (double)nst_rng_below(&replay, (uint64_t)(W - w + 1));
        if (win.x != left || win.y != top || win.w != w || win.h != h) mismatch++;
        if (memcmp(&replay, &r, sizeof r)) mismatch++;
        sum_frac += win.w * win.h / (W * H);
        sum_lr += log(win.w / win.h);
    }
    CHECK_EQ(mismatch, 0);
    double mean = sum_frac / N, mlr = sum_lr / N;
    printf("first-try draws: mean area fraction %.4f (expect ~%.3f), mean log ratio %.4f\n", mean,
           (smin + smax) / 2, mlr);
    CHECK(fabs(mean - (smin + smax) / 2) < 0.01);
    CHECK(fabs(mlr) < 0.01);
}

static void test_fallback(void)
{
    /* 1000x10, scale [0.99, 1], ratio [0.75, 1.33]: the target area is at
     * least 9900 and the aspect at most 1.33, so h >= sqrt(9900 / 1.33) = 86
     * > 10 on every attempt: fallback. in_ratio = 100 > 1.33, so h = 10,
     * w = round(10 * 1.33) = round(13.3) = 13, top = (10 - 10) // 2 = 0,
     * left = (1000 - 13) // 2 = 493. */
    nst_rng r;
    nst_rng_seed(&r, 7);
    for (int t = 0; t < 100; t++) {
        nst_window win;
        nst_crop_random_resized(1000, 10, 0.99, 1.0, 0.75, 1.33, &r, &win);
        CHECK(win.x == 493 && win.y == 0 && win.w == 13 && win.h == 10);
    }
    /* Tall: 10x1000: in_ratio = 0.01 < 0.75, w = 10, h = round(10 / 0.75)
     * = round(13.33) = 13, top = (1000 - 13) // 2 = 493, left = 0. */
    nst_window win;
    nst_crop_random_resized(10, 1000, 0.99, 1.0, 0.75, 1.33, &r, &win);
    CHECK(win.x == 0 && win.y == 493 && win.w == 10 && win.h == 13);
    /* Tall with a .5 tie: 6x1000, ratio [0.8, 1.25]: h = round(6 / 0.8) =
     * round(7.5) = 8 (half to even), top = (1000 - 8) // 2 = 496. */
    nst_crop_random_resized(6, 1000, 0.99, 1.0, 0.8, 1.25, &r, &win);
    CHECK(win.x == 0 && win.y == 496 && win.w == 6 && win.h == 8);
    /* Within the ratio range but scale impossible (> 1): whole image. */
    nst_crop_random_resized(300, 280, 1.5, 2.0, 0.75, 1.33, &r, &win);
    CHECK(win.x == 0 && win.y == 0 && win.w == 300 && win.h == 280);
}

static void test_determinism(void)
{
    nst_rng a, b;
    nst_rng_seed(&a, 1234);
    nst_rng_seed(&b, 1234);
    int diff = 0, varied = 0;
    nst_window prev = {0, 0, 0, 0};
    for (int t = 0; t < 1000; t++) {
        nst_window wa, wb;
        nst_crop_random_resized(W, H, 0.08, 1.0, 0.75, 4.0 / 3, &a, &wa);
        nst_crop_random_resized(W, H, 0.08, 1.0, 0.75, 4.0 / 3, &b, &wb);
        if (memcmp(&wa, &wb, sizeof wa)) diff++;
        if (memcmp(&wa, &prev, sizeof wa)) varied++;
        prev = wa;
    }
    CHECK_EQ(diff, 0);
    CHECK(varied > 990);
}

static void test_center(void)
{
    nst_window w;
    /* Landscape 500x375, Resize(256), CenterCrop(224):
     *   short side 375 -> 256, long side int(256 * 500 / 375) = int(341.33) = 341
     *   top  = int(round((256 - 224) / 2.0)) = round(16.0) = 16
     *   left = int(round((341 - 224) / 2.0)) = round(58.5) = 58 (half to even)
     *   x = 58 * 500 / 341 = 29000 / 341 = 85.0439...
     *   y = 16 * 375 / 256 = 6000 / 256  = 23.4375
     *   w = 224 * 500 / 341 = 112000 / 341 = 328.4457...
     *   h = 224 * 375 / 256 = 84000 / 256 = 328.125 */
    nst_crop_center(500, 375, 256, 224, &w);
    CHECK(w.x == 29000.0 / 341);
    CHECK(w.y == 23.4375);
    CHECK(w.w == 112000.0 / 341);
    CHECK(w.h == 328.125);
    CHECK(fabs(w.x - 85.04398827) < 1e-6 && fabs(w.w - 328.44574780) < 1e-6);
    /* Portrait 375x500: the same with the axes swapped. */
    nst_crop_center(375, 500, 256, 224, &w);
    CHECK(w.x == 23.4375);
    CHECK(w.y == 29000.0 / 341);
    CHECK(w.w == 328.125);
    CHECK(w.h == 112000.0 / 341);
    /* 640x480, Resize(256), CenterCrop(224):
     *   480 -> 256, 640 -> int(256 * 640 / 480) = int(341.33) = 341: as above
     *   but x = 58 * 640 / 341 = 37120 / 341, w = 224 * 640 / 341 = 143360 / 341,
     *   y = 16 * 480 / 256 = 30, h = 224 * 480 / 256 = 420. */
    nst_crop_center(640, 480, 256, 224, &w);
    CHECK(w.x == 37120.0 / 341 && w.w == 143360.0 / 341 && w.y == 30 && w.h == 420);
    /* 333x1000, Resize(256), CenterCrop(224):
     *   333 -> 256, 1000 -> int(256000 / 333) = int(768.77) = 768
     *   left = round(16.0) = 16, top = round((768 - 224) / 2.0) = 272
     *   x = 16 * 333 / 256 = 20.8125, w = 224 * 333 / 256 = 291.375
     *   y = 272 * 1000 / 768 = 354.1666..., h = 224 * 1000 / 768 = 291.666... */
    nst_crop_center(333, 1000, 256, 224, &w);
    CHECK(w.x == 20.8125 && w.w == 291.375);
    CHECK(w.y == 272000.0 / 768 && w.h == 224000.0 / 768);
    /* Square 300x300, Resize(256), CenterCrop(225): 256x256, offset
     * round(31 / 2.0) = round(15.5) = 16 (half to even),
     * x = y = 16 * 300 / 256 = 18.75, w = h = 225 * 300 / 256 = 263.671875. */
    nst_crop_center(300, 300, 256, 225, &w);
    CHECK(w.x == 18.75 && w.y == 18.75 && w.w == 263.671875 && w.h == 263.671875);
    /* Crop larger than the resized image: 100x100 -> 32x32, crop 64:
     * offset round(-32 / 2.0) = -16, x = -16 * 100 / 32 = -50, w = 200. */
    nst_crop_center(100, 100, 32, 64, &w);
    CHECK(w.x == -50 && w.y == -50 && w.w == 200 && w.h == 200);
    /* Rounding: (341-224)/2 = 58.5 -> 58 above; an odd difference going the
     * other way: 500x381, 381 -> 256, 500 -> int(335.96) = 335,
     * left = round(55.5) = 56 (half to even), x = 56 * 500 / 335. */
    nst_crop_center(500, 381, 256, 224, &w);
    CHECK(w.x == 28000.0 / 335 && w.w == 112000.0 / 335);
}

int main(void)
{
    test_bounds(0.08, 1.0, 3.0 / 4, 4.0 / 3);
    test_bounds(0.25, 0.3, 0.5, 2.0);
    test_bounds(0.9, 1.0, 3.0 / 4, 4.0 / 3); /* many fallbacks */
    test_draw_order_and_stats();
    test_fallback();
    test_determinism();
    test_center();
    TEST_EXIT();
}
