/*
 * test_image_modes.c — the general image output (augment.h) and the
 * classification recipe's image modes:
 *   - float16 / bfloat16 rounding: every pair of neighbouring finite values
 *     of each format, its midpoint (ties to even) and the floats next to
 *     it, overflow, subnormals, NaN; against F16C's conversion where the
 *     CPU has it;
 *   - every dtype x layout, with and without the SIMD writers, equals the
 *     normalization table applied to the uint8 NHWC output of the same
 *     window (odd widths reach every tail), letterbox borders are pixel
 *     value 0 through the table, nothing is written past the item;
 *   - the copy without resampling (flip, placement), letterbox placements
 *     and non-square center crops computed by hand, non-square resampling
 *     against a double-precision reference;
 *   - the recipe (a generated dataset, through $NOSTALL_CLI): make ==
 *     transform(decode) byte for byte in every mode where the decode does
 *     not depend on the use's draws (and train crops decoded at full
 *     scale), image_shape of full images, NCHW as NHWC transposed, an image
 *     over full_max_pixels refused naming its size and the limit, and a
 *     loader resumed mid-epoch in resize and full mode.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "augment/augment.h"
#include "check.h"
#include "common/config.h"
#include "recipe/recipe.h"
#include "test_data.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define HAVE_X86 1
#else
#define HAVE_X86 0
#endif

/* ------------------------------------------------------------ helpers */

static uint32_t lcg_state = 2024;
static uint32_t lcg(void)
{
    lcg_state = lcg_state * 1664525u + 1013904223u;
    return lcg_state >> 8;
}

static float bits_f(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static uint32_t f_bits(float f)
{
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

/* The exact value of a binary16 (independent of the code under test). */
static float half_value(uint16_t h)
{
    const int e = (h >> 10) & 31, m = h & 1023;
    const double s = (h & 0x8000) ? -1.0 : 1.0;
    if (e == 31) return m ? NAN : (float)(s * INFINITY);
    if (e == 0) return (float)(s * ldexp(m, -24));
    return (float)(s * ldexp(1024 + m, e - 25));
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

static uint8_t *make_image(uint32_t w, uint32_t h)
{
    uint8_t *p = malloc((size_t)w * h * 3);
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++)
            for (int c = 0; c < 3; c++) {
                double v = 30 + 150.0 * x / w + 60.0 * y / h * (c + 1) / 3 +
                           25 * sin(x * 0.07 + c) * cos(y * 0.05) + (double)(lcg() % 40);
                p[((size_t)y * w + x) * 3 + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
    return p;
}

/* ------------------------------------------------------------ rounding */

/* Each pair of consecutive finite values (a, b) of the format: a and b
 * themselves, the floats just inside their midpoint, and the midpoint
 * (ties to the even one; exact in float32 for both formats). */
static void test_round_neighbours(void)
{
    int bad16 = 0, badbf = 0;
    for (uint32_t h = 0; h < 0x7c00; h++) { /* +0 .. largest finite */
        const uint16_t a = (uint16_t)h, b = (uint16_t)(h + 1);
        const float va = half_value(a), vb = b == 0x7c00 ? 65536.0f : half_value(b);
        const float mid = (va + vb) / 2; /* exact */
        const uint16_t even = (a & 1) ? b : a;
        for (int neg = 0; neg < 2; neg++) {
            const uint16_t s = neg ? 0x8000 : 0;
            const float sg = neg ? -1.0f : 1.0f;
            if (nst_f32_to_f16(sg * va) != (a | s)) bad16++;
            if (nst_f32_to_f16(sg * nextafterf(mid, 0)) != (a | s)) bad16++;
            if (nst_f32_to_f16(sg * nextafterf(mid, INFINITY)) != (b | s)) bad16++;
            if (nst_f32_to_f16(sg * mid) != (even | s)) bad16++;
        }
    }
    for (uint32_t h = 0; h < 0x7f80; h++) { /* bfloat16: upper halves of floats */
        const uint16_t a = (uint16_t)h, b = (uint16_t)(h + 1);
        const float va = bits_f((uint32_t)a << 16);
        const float vb = b == 0x7f80 ? bits_f(0x7f7fffffu) : bits_f((uint32_t)b << 16);
        const uint16_t even = (a & 1) ? b : a;
        if (b == 0x7f80) { /* past the largest: the rounding of FLT_MAX's neighbourhood */
            if (nst_f32_to_bf16(va) != a) badbf++;
            if (nst_f32_to_bf16(vb) != 0x7f80) badbf++; /* rounds up to inf */
            continue;
        }
        const float mid = bits_f(((uint32_t)a << 16) | 0x8000u);
        for (int neg = 0; neg < 2; neg++) {
            const uint16_t s = neg ? 0x8000 : 0;
            const float sg = neg ? -1.0f : 1.0f;
            if (nst_f32_to_bf16(sg * va) != (a | s)) badbf++;
            if (nst_f32_to_bf16(sg * nextafterf(mid, 0)) != (a | s)) badbf++;
            if (nst_f32_to_bf16(sg * nextafterf(mid, INFINITY)) != (b | s)) badbf++;
            if (nst_f32_to_bf16(sg * mid) != (even | s)) badbf++;
        }
    }
    CHECK_EQ(bad16, 0);
    CHECK_EQ(badbf, 0);
    /* specials */
    CHECK_EQ(nst_f32_to_f16(INFINITY), 0x7c00);
    CHECK_EQ(nst_f32_to_f16(-INFINITY), 0xfc00);
    CHECK_EQ(nst_f32_to_f16(1e10f), 0x7c00);
    CHECK_EQ(nst_f32_to_f16(65519.996f), 0x7bff);
    CHECK_EQ(nst_f32_to_f16(65520.0f), 0x7c00);
    CHECK_EQ(nst_f32_to_f16(ldexpf(1, -25)), 0);                /* tie: to even 0 */
    CHECK_EQ(nst_f32_to_f16(nextafterf(ldexpf(1, -25), 1)), 1); /* smallest subnormal */
    CHECK_EQ(nst_f32_to_f16(ldexpf(3, -25)), 2);                /* tie 1.5 -> 2 */
    CHECK_EQ(nst_f32_to_f16(-0.0f), 0x8000);
    CHECK_EQ(nst_f32_to_f16(1.0f), 0x3c00);
    CHECK((nst_f32_to_f16(NAN) & 0x7c00) == 0x7c00 && (nst_f32_to_f16(NAN) & 0x3ff) != 0);
    CHECK_EQ(nst_f32_to_bf16(1.0f), 0x3f80);
    CHECK_EQ(nst_f32_to_bf16(INFINITY), 0x7f80);
    CHECK((nst_f32_to_bf16(NAN) & 0x7f80) == 0x7f80 && (nst_f32_to_bf16(NAN) & 0x7f) != 0);
    CHECK((nst_f32_to_bf16(bits_f(0x7f800001u)) & 0x7f) != 0); /* a NaN stays a NaN */
}

#if HAVE_X86
__attribute__((target("f16c"))) static uint16_t f16c_convert(float f)
{
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
#endif

/* The scalar conversion against the CPU's (where it has F16C). */
static void test_round_f16c(void)
{
#if HAVE_X86
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !((ecx >> 29) & 1u)) {
        printf("f16c: no F16C, skipped\n");
        return;
    }
    int bad = 0;
    for (uint32_t i = 0; i < 2000000; i++) {
        uint32_t b = i < 1000000 ? lcg() << 8 ^ lcg() : (0x30000000u + i * 1031u) ^ (i & 1) << 31;
        float f = bits_f(b);
        if (isnan(f)) continue;
        if (nst_f32_to_f16(f) != f16c_convert(f)) bad++;
    }
    CHECK_EQ(bad, 0);
    printf("f16c: 2M floats, %d differ\n", bad);
#else
    printf("f16c: not x86-64, skipped\n");
#endif
}

/* ------------------------------------------------------------ outputs */

static size_t elem_bytes(int dtype)
{
    return dtype == NST_OUT_U8 ? 1 : dtype == NST_OUT_F32 ? 4 : 2;
}

/* Element (c, y, x) of an output of w x h in `layout`, as raw bits. */
static uint32_t elem_at(const uint8_t *p, int dtype, int layout, uint32_t w, uint32_t h, uint32_t c,
                        uint32_t y, uint32_t x)
{
    size_t i = layout == NST_OUT_NCHW ? ((size_t)c * h + y) * w + x : ((size_t)y * w + x) * 3 + c;
    uint32_t v = 0;
    memcpy(&v, p + i * elem_bytes(dtype), elem_bytes(dtype));
    return v;
}

/* The expected bits of uint8 value v of channel c in the dtype. */
static uint32_t table_bits(const nst_norm *n, int dtype, uint32_t c, uint8_t v)
{
    switch (dtype) {
    case NST_OUT_U8: return v;
    case NST_OUT_F32: return f_bits(n->f32[c * 256 + v]);
    case NST_OUT_F16: return n->f16[c * 256 + v];
    default: return n->bf16[c * 256 + v];
    }
}

static nst_augmenter *augmenter(int simd)
{
    const char *env = getenv("NOSTALL_NO_AVX2");
    char *saved = env ? strdup(env) : NULL;
    nst_augmenter *a = NULL;
    if (simd)
        unsetenv("NOSTALL_NO_AVX2");
    else
        setenv("NOSTALL_NO_AVX2", "1", 1);
    CHECK_OK(nst_augmenter_create(&a));
    if (saved)
        setenv("NOSTALL_NO_AVX2", saved, 1);
    else
        unsetenv("NOSTALL_NO_AVX2");
    free(saved);
    return a;
}

/* One window into every dtype x layout, with a letterbox border or not,
 * SIMD writers or not: each element is the table of the uint8 output. */
static void test_outputs(void)
{
    const uint32_t W = 173, H = 131;
    uint8_t *img = make_image(W, H);
    nst_image im = full_image(img, W, H);
    /* ImageNet's normalization, and one whose values are ties of the
     * 16-bit roundings: v + 0.5 (bfloat16 keeps no fraction above 128) and
     * v + 1/16 (float16 keeps eighths there), so the SIMD conversions'
     * ties-to-even is seen too */
    nst_norm norms[2];
    const double mean[2][3] = {{0.485, 0.456, 0.406}, {-0.5 / 255, -0.0625 / 255, 0}};
    const double stdv[2][3] = {{0.229, 0.224, 0.225}, {1 / 255.0, 1 / 255.0, 1 / 255.0}};
    nst_norm_init(&norms[0], mean[0], stdv[0]);
    nst_norm_init(&norms[1], mean[1], stdv[1]);
    CHECK(norms[1].scale[0] == 1.0f && norms[1].bias[0] == 0.5f && norms[1].bias[1] == 0.0625f);
    int ties = 0;
    for (int v = 128; v < 256; v++)
        ties += (f_bits(norms[1].f32[v]) & 0xffff) == 0x8000 &&
                (f_bits(norms[1].f32[256 + v]) & 0x1fff) == 0x1000;
    CHECK_EQ(ties, 128);
    /* item sizes: odd widths (tails of every SIMD loop), a wide and a tall */
    const uint32_t sizes[][2] = {{37, 29}, {64, 48}, {101, 7}, {5, 90}, {224, 224}};
    const nst_window win = {11.25, 7.5, 141.3, 97.9};
    int bad = 0, bad_border = 0, overrun = 0, checked = 0;
    for (int simd = 0; simd < 4; simd++) {
        const nst_norm *norm = &norms[simd / 2];
        nst_augmenter *a = augmenter(simd & 1);
        if (!a) break;
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            for (int pad = 0; pad < 2; pad++) {
                const uint32_t w = sizes[s][0], h = sizes[s][1];
                /* the reference: uint8 NHWC of the inner size */
                nst_output ref = {.dtype = NST_OUT_U8, .width = w, .height = h};
                if (pad) nst_letterbox((uint32_t)win.w, (uint32_t)win.h, &ref);
                if (pad && ref.inner_width == w && ref.inner_height == h) {
                    ref.inner_width = w - 3 > 0 ? w - 3 : w; /* a border on both axes */
                    ref.pad_left = 1;
                    if (h > 4) ref.inner_height = h - 4, ref.pad_top = 3;
                }
                const uint32_t iw = pad ? ref.inner_width : w, ih = pad ? ref.inner_height : h;
                uint8_t *u8 = malloc((size_t)iw * ih * 3);
                nst_output ro = {.dtype = NST_OUT_U8, .width = iw, .height = ih, .dst = u8};
                CHECK_OK(nst_augment(a, &im, &win, (int)s & 1, &ro));
                for (int dtype = NST_OUT_U8; dtype <= NST_OUT_BF16; dtype++)
                    for (int layout = NST_OUT_NCHW; layout <= NST_OUT_NHWC; layout++) {
                        nst_output o = ref;
                        o.dtype = dtype;
                        o.layout = layout;
                        o.norm = norm;
                        const size_t n = nst_output_bytes(&o);
                        CHECK_EQ(n, (size_t)w * h * 3 * elem_bytes(dtype));
                        uint8_t *out = malloc(n + 64);
                        memset(out, 0xA5, n + 64);
                        o.dst = out;
                        CHECK_OK(nst_augment(a, &im, &win, (int)s & 1, &o));
                        for (size_t i = n; i < n + 64; i++) overrun += out[i] != 0xA5;
                        for (uint32_t y = 0; y < h; y++)
                            for (uint32_t x = 0; x < w; x++)
                                for (uint32_t c = 0; c < 3; c++) {
                                    const uint32_t got = elem_at(out, dtype, layout, w, h, c, y, x);
                                    const int inside = x >= o.pad_left && x < o.pad_left + iw &&
                                                       y >= o.pad_top && y < o.pad_top + ih;
                                    const uint8_t v =
                                        inside
                                            ? u8[(((size_t)(y - o.pad_top)) * iw + (x - o.pad_left)) *
                                                     3 +
                                                 c]
                                            : 0;
                                    if (got != table_bits(norm, dtype, c, v))
                                        (inside ? bad++ : bad_border++);
                                    checked++;
                                }
                        free(out);
                    }
                free(u8);
            }
        nst_augmenter_free(a);
    }
    printf("outputs: %d elements checked, %d inner and %d border differ, %d overrun bytes\n",
           checked, bad, bad_border, overrun);
    CHECK_EQ(bad, 0);
    CHECK_EQ(bad_border, 0);
    CHECK_EQ(overrun, 0);
    CHECK(checked > 1000000);
    /* the border of a float output is (0 - mean) / std */
    CHECK(fabsf(norms[0].f32[0] - (float)(-0.485 / 0.229)) < 1e-6f);
    free(img);
}

/* nst_augment_copy: the image as is (flipped when asked) in its place,
 * the same bytes as an identity resample; sizes must match. */
static void test_copy(void)
{
    const uint32_t W = 45, H = 31;
    uint8_t *img = make_image(W, H);
    nst_image im = full_image(img, W, H);
    nst_norm norm;
    const double mean[3] = {0.5, 0.4, 0.3}, stdv[3] = {0.2, 0.25, 0.3};
    nst_norm_init(&norm, mean, stdv);
    nst_augmenter *a = NULL;
    CHECK_OK(nst_augmenter_create(&a));
    if (!a) return;
    const size_t n = (size_t)W * H * 3 * 4;
    uint8_t *c1 = malloc(n), *c2 = malloc(n);
    for (int flip = 0; flip < 2; flip++)
        for (int dtype = NST_OUT_U8; dtype <= NST_OUT_BF16; dtype++)
            for (int layout = NST_OUT_NCHW; layout <= NST_OUT_NHWC; layout++) {
                nst_output o = {.dtype = dtype,
                                .layout = layout,
                                .width = W,
                                .height = H,
                                .dst = c1,
                                .norm = &norm};
                CHECK_OK(nst_augment_copy(a, &im, flip, &o));
                o.dst = c2;
                const nst_window whole = {0, 0, W, H};
                CHECK_OK(nst_augment(a, &im, &whole, flip, &o));
                CHECK(memcmp(c1, c2, nst_output_bytes(&o)) == 0);
                int ok = 1;
                for (uint32_t y = 0; y < H; y++)
                    for (uint32_t x = 0; x < W; x++)
                        for (uint32_t c = 0; c < 3; c++) {
                            uint32_t sx = flip ? W - 1 - x : x;
                            uint8_t v = img[((size_t)y * W + sx) * 3 + c];
                            if (elem_at(c1, dtype, layout, W, H, c, y, x) !=
                                table_bits(&norm, dtype, c, v))
                                ok = 0;
                        }
                CHECK(ok);
            }
    /* placed in a larger item: the border is pixel 0 */
    nst_output o = {.dtype = NST_OUT_U8,
                    .width = W + 4,
                    .height = H + 3,
                    .dst = c1,
                    .pad_left = 3,
                    .pad_top = 2,
                    .inner_width = W,
                    .inner_height = H};
    CHECK_OK(nst_augment_copy(a, &im, 0, &o));
    CHECK(memcmp(c1 + (((size_t)2 * (W + 4)) + 3) * 3, img, (size_t)W * 3) == 0);
    CHECK(c1[0] == 0 && c1[(size_t)(W + 4) * (H + 3) * 3 - 1] == 0);
    /* wrong sizes */
    o.inner_width = W - 1;
    CHECK_RC(nst_augment_copy(a, &im, 0, &o), NOSTALL_E_INVALID);
    CHECK(strstr(nostall_last_error(), "45x31") != NULL);
    free(c1);
    free(c2);
    nst_augmenter_free(a);
    free(img);
}

static void test_errors(void)
{
    uint8_t img[4 * 4 * 3] = {0}, o[16 * 16 * 4];
    nst_image im = full_image(img, 4, 4);
    nst_augmenter *a = NULL;
    CHECK_OK(nst_augmenter_create(&a));
    if (!a) return;
    const nst_window win = {0, 0, 4, 4};
    nst_norm norm;
    const double mean[3] = {0, 0, 0}, stdv[3] = {1, 1, 1};
    nst_norm_init(&norm, mean, stdv);
    nst_output bad = {.dtype = NST_OUT_F16, .width = 8, .height = 8, .dst = o};
    CHECK_RC(nst_augment(a, &im, &win, 0, &bad), NOSTALL_E_INVALID); /* no table */
    bad.norm = &norm;
    bad.layout = 9;
    CHECK_RC(nst_augment(a, &im, &win, 0, &bad), NOSTALL_E_INVALID);
    bad.layout = NST_OUT_NHWC;
    bad.pad_left = 1; /* padding without an inner size */
    CHECK_RC(nst_augment(a, &im, &win, 0, &bad), NOSTALL_E_INVALID);
    bad.inner_width = 8, bad.inner_height = 8; /* does not fit */
    CHECK_RC(nst_augment(a, &im, &win, 0, &bad), NOSTALL_E_INVALID);
    CHECK(strstr(nostall_last_error(), "does not fit") != NULL);
    bad.pad_left = 0;
    bad.height = 0;
    CHECK_RC(nst_augment(a, &im, &win, 0, &bad), NOSTALL_E_INVALID);
    bad.height = 8;
    CHECK_OK(nst_augment(a, &im, &win, 0, &bad));
    bad.dtype = 4;
    CHECK_RC(nst_augment(a, &im, &win, 0, &bad), NOSTALL_E_INVALID);
    CHECK_EQ(nst_output_bytes(&bad), 0);
    /* the classic shorthand still works: size x size, uint8 NHWC */
    nst_output classic = {NST_OUT_UINT8_NHWC, 8, o, NULL};
    CHECK_OK(nst_augment(a, &im, &win, 0, &classic));
    CHECK_EQ(nst_output_bytes(&classic), 8 * 8 * 3);
    nst_augmenter_free(a);
}

/* Letterbox placements by hand, and non-square center crops. */
static void test_geometry(void)
{
    const struct {
        uint32_t sw, sh, w, h, iw, ih, l, t;
    } lb[] = {
        {500, 375, 224, 224, 224, 168, 0, 28}, /* 375 * 224 / 500 = 168 */
        {375, 500, 224, 224, 168, 224, 28, 0},
        {100, 10, 64, 64, 64, 6, 0, 29},      /* 6.4 -> 6, (64 - 6) / 2 */
        {1, 1000, 30, 40, 1, 40, 14, 0},      /* 0.04 -> at least 1 */
        {4, 1, 2, 9, 2, 1, 0, 4},             /* 0.5 -> 1 (half up) */
        {640, 480, 640, 480, 640, 480, 0, 0}, /* same aspect: no border */
        {300, 200, 97, 50, 75, 50, 11, 0},    /* 300 * 50 / 200 = 75, (97 - 75) / 2 = 11 */
    };
    for (size_t i = 0; i < sizeof lb / sizeof lb[0]; i++) {
        nst_output o = {.width = lb[i].w, .height = lb[i].h};
        nst_letterbox(lb[i].sw, lb[i].sh, &o);
        CHECK(o.inner_width == lb[i].iw && o.inner_height == lb[i].ih && o.pad_left == lb[i].l &&
              o.pad_top == lb[i].t);
    }
    /* CenterCrop((h, w)) after Resize(256) of 500x375: resized 341x256;
     * crop 160 (h) x 224 (w): top = round((256 - 160) / 2) = 48, left =
     * round((341 - 224) / 2) = round(58.5) = 58 (half to even); in source
     * pixels: scale 375 / 256 vertically, 500 / 341 horizontally. */
    nst_window w, sq;
    nst_crop_center_hw(500, 375, 256, 224, 160, &w);
    CHECK(fabs(w.y - 48.0 * 375 / 256) < 1e-9 && fabs(w.h - 160.0 * 375 / 256) < 1e-9);
    CHECK(fabs(w.x - 58.0 * 500 / 341) < 1e-9 && fabs(w.w - 224.0 * 500 / 341) < 1e-9);
    nst_crop_center_hw(500, 375, 256, 224, 224, &w);
    nst_crop_center(500, 375, 256, 224, &sq);
    CHECK(memcmp(&w, &sq, sizeof w) == 0);
}

/* Non-square resampling against a double-precision triangle filter
 * (support max(1, scale), edge-clamped taps). */
static void ref_axis(double in0, double len, int n, int size, int i, int *idx, double *wt, int *cnt)
{
    double scale = len / size, sup = scale > 1 ? scale : 1, c = in0 + (i + 0.5) * scale, tot = 0;
    *cnt = 0;
    for (long x = (long)floor(c - sup) - 1; x <= (long)ceil(c + sup) + 1; x++) {
        double t = fabs(x + 0.5 - c) / sup;
        if (t >= 1) continue;
        idx[*cnt] = x < 0 ? 0 : x >= n ? n - 1 : (int)x;
        wt[*cnt] = 1 - t;
        tot += wt[(*cnt)++];
    }
    for (int k = 0; k < *cnt; k++) wt[k] /= tot;
}

static void test_nonsquare_quality(void)
{
    const uint32_t W = 160, H = 120;
    uint8_t *img = make_image(W, H);
    nst_image im = full_image(img, W, H);
    nst_augmenter *a = NULL;
    CHECK_OK(nst_augmenter_create(&a));
    if (!a) return;
    const double wins[][6] = {{0, 0, 160, 120, 57, 31},
                              {10.5, 3.25, 90.3, 100.1, 40, 120},
                              {-5, 20, 170, 30, 200, 9}};
    int idx[512], idy[512], nx, ny;
    double wx[512], wy[512];
    for (size_t t = 0; t < sizeof wins / sizeof wins[0]; t++) {
        const int ow = (int)wins[t][4], oh = (int)wins[t][5];
        uint8_t *o = malloc((size_t)ow * oh * 3);
        nst_output out = {.dtype = NST_OUT_U8,
                          .width = (uint32_t)ow,
                          .height = (uint32_t)oh,
                          .dst = o};
        const nst_window win = {wins[t][0], wins[t][1], wins[t][2], wins[t][3]};
        CHECK_OK(nst_augment(a, &im, &win, 0, &out));
        double maxerr = 0, mse = 0;
        for (int y = 0; y < oh; y++) {
            ref_axis(win.y, win.h, (int)H, oh, y, idy, wy, &ny);
            for (int x = 0; x < ow; x++) {
                ref_axis(win.x, win.w, (int)W, ow, x, idx, wx, &nx);
                for (int c = 0; c < 3; c++) {
                    double v = 0;
                    for (int j = 0; j < ny; j++)
                        for (int i = 0; i < nx; i++)
                            v += wy[j] * wx[i] *
                                 img[((size_t)idy[j] * W + (size_t)idx[i]) * 3 + (size_t)c];
                    double e = fabs(v - o[((size_t)y * ow + x) * 3 + (size_t)c]);
                    maxerr = fmax(maxerr, e);
                    mse += e * e;
                }
            }
        }
        mse /= (double)ow * oh * 3;
        double psnr = mse == 0 ? 999 : 10 * log10(255.0 * 255.0 / mse);
        printf("non-square %dx%d: PSNR %.1f dB, max |err| %.2f\n", ow, oh, psnr, maxerr);
        CHECK(psnr >= 40.0);
        CHECK(maxerr <= 1.5);
        free(o);
    }
    nst_augmenter_free(a);
    free(img);
}

/* ------------------------------------------------------------ recipe */

static char data_dir[4096];

static nst_recipe *recipe(const char *kv[][2], int n)
{
    nostall_config *cfg = make_cfg(kv, n);
    nst_recipe *r = NULL;
    CHECK_OK(nst_recipe_create(&r, cfg, data_dir));
    nostall_config_free(cfg);
    return r;
}

static uint8_t *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    rewind(f);
    uint8_t *b = malloc((size_t)len);
    *n = fread(b, 1, (size_t)len, f);
    fclose(f);
    return b;
}

/* make(bytes) == transform(decode(bytes)) for every item and two uses. */
static void check_echo_equal(const char *what, const char *kv[][2], int n)
{
    nst_recipe *r = recipe(kv, n);
    if (!r) return;
    nst_recipe_worker *w = NULL;
    CHECK_OK(r->ops->worker_create(r, &w));
    uint8_t *a = calloc(1, r->item_bytes), *b = calloc(1, r->item_bytes);
    uint8_t *da[NST_FIELDS_MAX], *db[NST_FIELDS_MAX];
    size_t off = 0;
    for (uint32_t f = 0; f < r->nfields; f++) {
        da[f] = a + off, db[f] = b + off;
        off += r->fields[f].item_bytes;
    }
    nst_decoded dec;
    memset(&dec, 0, sizeof dec);
    int differ = 0, made = 0;
    for (uint64_t i = 0; i < r->items && w; i++)
        for (uint32_t copy = 0; copy < 2; copy++) {
            size_t len = 0;
            const char *path = nst_recipe_path(r, i);
            uint8_t *bytes = slurp(path, &len);
            nst_item_ctx c = {.epoch = 1, .index = i, .copy = copy, .path = path, .dst = da};
            nst_recipe_times t;
            memset(&t, 0, sizeof t);
            CHECK_OK(r->ops->make(w, &c, bytes, len, &t));
            c.dst = db;
            CHECK_OK(r->ops->decode(w, &c, bytes, len, &dec, &t));
            CHECK_OK(r->ops->transform(w, &c, &dec, &t));
            differ += memcmp(a, b, r->item_bytes) != 0;
            made++;
            free(bytes);
        }
    printf("echo %s: %d uses, %d differ\n", what, made, differ);
    CHECK(made > 0);
    CHECK_EQ(differ, 0);
    nst_buf_free(&dec.buf);
    free(a);
    free(b);
    r->ops->worker_free(w);
    nst_recipe_free(r);
}

static void test_echo_equal(void)
{
    /* train crops of 32 from images of at most 80x60 x 1.3: make decodes at
     * full scale (no window is twice the output) */
    const char *crop_train[][2] = {{"crop", "40"}, {"output", "float16"}, {"layout", "nhwc"}};
    check_echo_equal("crop train", crop_train, 3);
    /* eval crops of 12 decode at 1/2 or 1/4: make's own decode is echoed */
    const char *crop_eval[][2] = {{"crop", "12"},
                                  {"mode", "eval"},
                                  {"output", "uint8"},
                                  {"layout", "nchw"}};
    check_echo_equal("crop eval", crop_eval, 4);
    const char *resize[][2] = {{"image_mode", "resize"},
                               {"out_height", "13"},
                               {"out_width", "19"},
                               {"output", "bfloat16"}};
    check_echo_equal("resize stretch", resize, 4);
    const char *pad[][2] = {{"image_mode", "resize"}, {"fit", "pad"},      {"out_height", "30"},
                            {"out_width", "30"},      {"output", "float"}, {"layout", "nhwc"}};
    check_echo_equal("resize pad", pad, 6);
    const char *full[][2] = {{"image_mode", "full"}, {"output", "float16"}};
    check_echo_equal("full", full, 2);
}

/* One item through make, its fields. */
static int make_item(nst_recipe *r, nst_recipe_worker *w, uint64_t i, uint8_t *buf, uint8_t **dst)
{
    size_t len = 0, off = 0;
    const char *path = nst_recipe_path(r, i);
    for (uint32_t f = 0; f < r->nfields; f++) {
        dst[f] = buf + off;
        off += r->fields[f].item_bytes;
    }
    uint8_t *bytes = slurp(path, &len);
    nst_item_ctx c = {.epoch = 0, .index = i, .copy = 0, .path = path, .dst = dst};
    nst_recipe_times t;
    memset(&t, 0, sizeof t);
    int rc = r->ops->make(w, &c, bytes, len, &t);
    free(bytes);
    return rc;
}

/* Full mode: the declared fields, image_shape, NCHW == NHWC transposed,
 * an image over full_max_pixels refused. Resize mode: field shapes. */
static void test_full_and_shapes(void)
{
    const char *nchw_kv[][2] = {{"image_mode", "full"},
                                {"output", "uint8"},
                                {"layout", "nchw"},
                                {"full_max_pixels", "20000"},
                                {"mode", "eval"}};
    const char *nhwc_kv[][2] = {{"image_mode", "full"},
                                {"output", "uint8"},
                                {"layout", "nhwc"},
                                {"full_max_pixels", "20000"},
                                {"mode", "eval"}};
    nst_recipe *a = recipe(nchw_kv, 5), *b = recipe(nhwc_kv, 5);
    if (!a || !b) return;
    CHECK_EQ(a->nfields, 3);
    CHECK(strcmp(a->fields[0].name, "image") == 0 &&
          strcmp(a->fields[1].name, "image_shape") == 0 && strcmp(a->fields[2].name, "label") == 0);
    CHECK_EQ(a->fields[0].shape_field, 1);
    CHECK_EQ(a->fields[0].ndim, 1);
    CHECK_EQ(a->fields[0].shape[0], 60000);
    CHECK_EQ(a->fields[1].dtype, NOSTALL_DTYPE_INT64);
    nst_recipe_worker *wa = NULL, *wb = NULL;
    CHECK_OK(a->ops->worker_create(a, &wa));
    CHECK_OK(b->ops->worker_create(b, &wb));
    uint8_t *ba = calloc(1, a->item_bytes), *bb = calloc(1, b->item_bytes), *da[8], *db[8];
    int sizes_vary = 0, ok = 1;
    int64_t first_w = -1;
    for (uint64_t i = 0; i < a->items && wa && wb; i++) {
        CHECK_OK(make_item(a, wa, i, ba, da));
        CHECK_OK(make_item(b, wb, i, bb, db));
        int64_t sa[3], sb[3];
        memcpy(sa, da[1], sizeof sa);
        memcpy(sb, db[1], sizeof sb);
        CHECK(sa[0] == 3 && sb[2] == 3 && sa[1] == sb[0] && sa[2] == sb[1]);
        if (first_w < 0)
            first_w = sa[2];
        else if (sa[2] != first_w)
            sizes_vary = 1;
        const int64_t h = sa[1], w = sa[2];
        for (int64_t y = 0; y < h; y++)
            for (int64_t x = 0; x < w; x++)
                for (int c = 0; c < 3; c++)
                    if (da[0][(c * h + y) * w + x] != db[0][(y * w + x) * 3 + c]) ok = 0;
    }
    CHECK(ok);
    CHECK(sizes_vary); /* the dataset's sizes jitter */
    free(ba);
    free(bb);
    a->ops->worker_free(wa);
    b->ops->worker_free(wb);
    nst_recipe_free(a);
    nst_recipe_free(b);

    /* too small a room: a bad item naming its size and the limit */
    const char *small[][2] = {{"image_mode", "full"}, {"full_max_pixels", "100"}};
    nst_recipe *s = recipe(small, 2);
    if (!s) return;
    nst_recipe_worker *ws = NULL;
    CHECK_OK(s->ops->worker_create(s, &ws));
    uint8_t *bs = calloc(1, s->item_bytes), *ds[8];
    CHECK_RC(make_item(s, ws, 0, bs, ds), NOSTALL_E_TOO_MANY_PIXELS);
    CHECK(strstr(nostall_last_error(), "full_max_pixels = 100") != NULL);
    CHECK(strstr(nostall_last_error(), "pixels") != NULL);
    CHECK(strstr(nostall_last_error(), nst_recipe_path(s, 0)) != NULL);
    free(bs);
    s->ops->worker_free(ws);
    nst_recipe_free(s);

    /* resize: [3, h, w] / [h, w, 3] of the dtype */
    const char *rz[][2] = {{"image_mode", "resize"},
                           {"out_height", "21"},
                           {"out_width", "34"},
                           {"output", "bfloat16"}};
    nst_recipe *r = recipe(rz, 4);
    if (r) {
        CHECK(r->fields[0].dtype == NOSTALL_DTYPE_BFLOAT16 && r->fields[0].ndim == 3 &&
              r->fields[0].shape[0] == 3 && r->fields[0].shape[1] == 21 &&
              r->fields[0].shape[2] == 34);
        CHECK_EQ(r->fields[0].item_bytes, 3 * 21 * 34 * 2);
        nst_recipe_free(r);
    }
    const char *cr[][2] = {{"out_height", "20"},
                           {"out_width", "30"},
                           {"layout", "nhwc"},
                           {"output", "float"}};
    r = recipe(cr, 4);
    if (r) {
        CHECK(r->fields[0].dtype == NOSTALL_DTYPE_FLOAT32 && r->fields[0].shape[0] == 20 &&
              r->fields[0].shape[1] == 30 && r->fields[0].shape[2] == 3);
        nst_recipe_free(r);
    }
    /* options that do not go together */
    nostall_config *cfg = NULL;
    const char *pad_crop[][2] = {{"fit", "pad"}};
    cfg = make_cfg(pad_crop, 1);
    CHECK_RC(nst_recipe_create(&r, cfg, data_dir), NOSTALL_E_OPTION);
    CHECK(strstr(nostall_last_error(), "fit=pad") != NULL);
    nostall_config_free(cfg);
    const char *full_size[][2] = {{"image_mode", "full"}, {"out_width", "64"}};
    cfg = make_cfg(full_size, 2);
    CHECK_RC(nst_recipe_create(&r, cfg, data_dir), NOSTALL_E_OPTION);
    CHECK(strstr(nostall_last_error(), "image_mode=full") != NULL);
    nostall_config_free(cfg);
}

/* ------------------------------------------------------------ loader */

static int run_batches(nostall_loader *ld, uint64_t *sums, int max)
{
    int n = 0;
    nostall_batch b;
    int rc;
    while (n < max && (rc = nostall_loader_next(ld, &b)) != NOSTALL_DONE) {
        if (rc == NOSTALL_EPOCH_END) continue;
        CHECK_OK(rc);
        if (rc < 0) break;
        sums[n] = 0;
        nostall_checksum_batch(&sums[n], &b);
        n++;
        nostall_loader_release(ld, &b);
    }
    return n;
}

/* Resume mid-epoch: the rest of the run equals an uninterrupted one. */
static void check_resume(const char *what, const char *kv[][2], int n)
{
    nostall_config *cfg = make_cfg(kv, n);
    nostall_loader *a = NULL, *b = NULL, *ref = NULL;
    CHECK_OK(nostall_loader_create(&a, data_dir, cfg));
    CHECK_OK(nostall_loader_create(&b, data_dir, cfg));
    CHECK_OK(nostall_loader_create(&ref, data_dir, cfg));
    nostall_config_free(cfg);
    if (!a || !b || !ref) {
        nostall_loader_free(a);
        nostall_loader_free(b);
        nostall_loader_free(ref);
        return;
    }
    uint64_t all[64], head[64], rest[64];
    const int nall = run_batches(ref, all, 64);
    const int k = nall / 2 + 1; /* mid-epoch of the second epoch */
    CHECK_EQ(run_batches(a, head, k), k);
    nostall_state st;
    CHECK_OK(nostall_loader_get_state(a, &st));
    CHECK_OK(nostall_loader_set_state(b, &st));
    const int nrest = run_batches(b, rest, 64);
    CHECK_EQ(k + nrest, nall);
    CHECK(memcmp(head, all, sizeof(uint64_t) * (size_t)k) == 0);
    CHECK(nrest > 0 && memcmp(rest, all + k, sizeof(uint64_t) * (size_t)nrest) == 0);
    printf("resume %s: %d batches, resumed after %d\n", what, nall, k);
    nostall_loader_free(a);
    nostall_loader_free(b);
    nostall_loader_free(ref);
}

static void test_resume(void)
{
    const char *resize[][2] =
        {{"image_mode", "resize"}, {"fit", "pad"},        {"out_height", "24"},
         {"out_width", "16"},      {"output", "float16"}, {"threads", "2"},
         {"batch_size", "5"},      {"epochs", "2"},       {"seed", "3"}};
    check_resume("resize pad float16", resize, 9);
    const char *full[][2] = {{"image_mode", "full"}, {"layout", "nhwc"},
                             {"output", "uint8"},    {"threads", "2"},
                             {"batch_size", "5"},    {"epochs", "2"},
                             {"seed", "3"},          {"full_max_pixels", "8000"}};
    check_resume("full uint8 nhwc", full, 8);
    /* the batch header: resize fills it, full (ragged) leaves the sizes 0 */
    const char *kv[][2] = {{"image_mode", "resize"}, {"out_height", "24"}, {"out_width", "16"},
                           {"output", "bfloat16"},   {"layout", "nhwc"},   {"batch_size", "4"}};
    nostall_config *cfg = make_cfg(kv, 6);
    nostall_loader *ld = NULL;
    CHECK_OK(nostall_loader_create(&ld, data_dir, cfg));
    nostall_config_free(cfg);
    nostall_batch bt;
    if (ld && nostall_loader_next(ld, &bt) == 0) {
        CHECK(bt.layout == NOSTALL_LAYOUT_NHWC && bt.height == 24 && bt.width == 16 &&
              bt.channels == 3 && bt.dtype == NOSTALL_DTYPE_BFLOAT16);
        CHECK_EQ(bt.item_bytes, 24 * 16 * 3 * 2);
        nostall_loader_release(ld, &bt);
    }
    nostall_loader_free(ld);
}

int main(void)
{
    test_round_neighbours();
    test_round_f16c();
    test_outputs();
    test_copy();
    test_errors();
    test_geometry();
    test_nonsquare_quality();
    if (!getenv("NOSTALL_CLI")) { /* the recipe's tests need a dataset */
        printf("NOSTALL_CLI not set: the recipe's tests skipped (run through ctest)\n");
        TEST_EXIT();
    }
    const char *tmp = test_tmpdir("image_modes");
    snprintf(data_dir, sizeof data_dir, "%s/data", tmp);
    gen_dataset(data_dir, 12, 2);
    test_echo_equal();
    test_full_and_shapes();
    test_resume();
    TEST_EXIT();
}
