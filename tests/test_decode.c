/*
 * test_decode.c — tests of src/decode: JPEG and PNG to RGB8, limits, error
 * classification and robustness against damaged input; that a decoder's
 * answer for a file does not depend on the files before it (tables hidden
 * from libjpeg, left out or only defined by an earlier file); hostile PNGs
 * (ancillary chunks declaring 2 GiB, in a forked child whose peak memory is
 * compared with an ordinary PNG's; a 100000000x1 image); palette indices
 * past the palette (PIL's grey); valid but unsupported JPEGs (12-bit,
 * lossless, two components: E_UNSUPPORTED).
 *
 * Test images are made in memory with libjpeg's compressor (jpeg_mem_dest)
 * and libpng's writer (png_set_write_fn into a growing buffer), so the test
 * needs no files. Single-threaded.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jpeglib.h>
#include <png.h>
#include <zlib.h>

#include "check.h"
#include "test_jpeg.h"
#include "decode/decode.h"
#include "decode/decode_impl.h"

/* ---- helpers ----------------------------------------------------------- */

/* xorshift64*, fixed seed: the fuzz loop is reproducible. */
static uint64_t rng_s = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) { return test_xorshift(&rng_s); }

/* A smooth RGB pattern (JPEG-friendly). */
static uint8_t *make_rgb(int w, int h)
{
    uint8_t *p = malloc((size_t)w * h * 3);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *q = p + ((size_t)y * w + x) * 3;
            q[0] = (uint8_t)(x * 255 / (w > 1 ? w - 1 : 1));
            q[1] = (uint8_t)(y * 255 / (h > 1 ? h - 1 : 1));
            q[2] = (uint8_t)(128 + 100 * sin((x + y) / 13.0));
        }
    return p;
}

/* Noisy bytes (PNG is lossless, so exact comparison tests everything). */
static uint8_t *make_noise(size_t n)
{
    uint8_t *p = malloc(n ? n : 1);
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)rnd();
    return p;
}

static uint8_t *jpeg_rgb(int w, int h, int progressive, size_t *len)
{
    uint8_t *px = make_rgb(w, h);
    test_jpeg_opts o = {w, h, 3, JCS_RGB, JCS_UNKNOWN, 95, progressive, 0, 0};
    uint8_t *j = test_jpeg_encode(px, &o, len);
    free(px);
    return j;
}

typedef struct {
    uint8_t *data;
    size_t len, cap;
} membuf;

static void png_write_cb(png_structp png, png_bytep data, size_t n)
{
    membuf *m = png_get_io_ptr(png);
    if (m->len + n > m->cap) {
        m->cap = (m->len + n) * 2;
        m->data = realloc(m->data, m->cap);
    }
    memcpy(m->data + m->len, data, n);
    m->len += n;
}

static void png_flush_cb(png_structp png) { (void)png; }

typedef struct {
    int w, h, color, depth, interlace;
    const png_color *pal;
    int npal;
    const uint8_t *trns;
    int ntrns;
} png_opts;

/* `px` rows are packed as PNG stores them (rowbytes from color/depth). */
static uint8_t *png_encode(const uint8_t *px, const png_opts *o, size_t *len)
{
    membuf m = {NULL, 0, 0};
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    if (setjmp(png_jmpbuf(png))) {
        fprintf(stderr, "png_encode failed\n");
        exit(1);
    }
    png_set_write_fn(png, &m, png_write_cb, png_flush_cb);
    png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
    png_set_check_for_invalid_index(png, 0); /* test_palette_range writes them */
    png_set_IHDR(png, info, (png_uint_32)o->w, (png_uint_32)o->h, o->depth, o->color,
                 o->interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    if (o->pal) png_set_PLTE(png, info, o->pal, o->npal);
    if (o->trns) png_set_tRNS(png, info, o->trns, o->ntrns, NULL);
    png_write_info(png, info);
    size_t rowbytes = png_get_rowbytes(png, info);
    png_bytep *rows = malloc(sizeof *rows * (size_t)o->h);
    for (int y = 0; y < o->h; y++) rows[y] = (png_bytep)(px + (size_t)y * rowbytes);
    png_write_image(png, rows);
    png_write_end(png, info);
    png_destroy_write_struct(&png, &info);
    free(rows);
    *len = m.len;
    return m.data;
}

static uint8_t *png_rgb(int w, int h, size_t *len)
{
    uint8_t *px = make_noise((size_t)w * h * 3);
    png_opts o = {w, h, PNG_COLOR_TYPE_RGB, 8, 0, NULL, 0, NULL, 0};
    uint8_t *p = png_encode(px, &o, len);
    free(px);
    return p;
}

static double mean_abs_err(const nst_image *im, const uint8_t *ref)
{
    double s = 0;
    for (uint32_t y = 0; y < im->height; y++)
        for (uint32_t x = 0; x < im->width * 3; x++)
            s += fabs((double)im->data[y * im->stride + x] - ref[(size_t)y * im->width * 3 + x]);
    return s / ((double)im->width * im->height * 3);
}

static int same_pixels(const nst_image *im, const uint8_t *ref)
{
    for (uint32_t y = 0; y < im->height; y++)
        if (memcmp(im->data + y * im->stride, ref + (size_t)y * im->width * 3,
                   (size_t)im->width * 3) != 0)
            return 0;
    return 1;
}

static void check_full(const nst_image *im, uint32_t w, uint32_t h)
{
    CHECK_EQ(im->width, w);
    CHECK_EQ(im->height, h);
    CHECK_EQ(im->stride, (size_t)w * 3);
    CHECK_EQ(im->x0, 0);
    CHECK_EQ(im->y0, 0);
    CHECK_EQ(im->scale_num, 1);
    CHECK_EQ(im->scale_den, 1);
    CHECK_EQ(im->full_width, w);
    CHECK_EQ(im->full_height, h);
    CHECK_EQ(im->src_width, w);
    CHECK_EQ(im->src_height, h);
    CHECK(im->data != NULL);
}

static int msg_has(const char *s) { return strstr(nostall_last_error(), s) != NULL; }

/* Offset of the first byte after the SOS segment header, or 0. */
static size_t jpeg_scan_start(const uint8_t *j, size_t len)
{
    for (size_t i = 2; i + 4 < len; i++)
        if (j[i] == 0xFF && j[i + 1] == 0xDA) return i + 2 + ((size_t)j[i + 2] << 8 | j[i + 3]);
    return 0;
}

/* Offset of the SOF0/SOF2 marker, or 0. */
static size_t jpeg_sof(const uint8_t *j, size_t len)
{
    for (size_t i = 2; i + 9 < len; i++)
        if (j[i] == 0xFF && (j[i + 1] == 0xC0 || j[i + 1] == 0xC2)) return i;
    return 0;
}

static uint32_t crc_table[256];
static void crc_init(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[n] = c;
    }
}
static uint32_t crc32_of(const uint8_t *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) c = crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}
static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}
static uint32_t get_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
/* Recompute every chunk CRC that lies wholly inside the buffer, so that
 * mutations reach libpng's decoding instead of its CRC check. */
static void png_fix_crcs(uint8_t *p, size_t len)
{
    size_t i = 8;
    while (i + 12 <= len) {
        uint32_t n = get_be32(p + i);
        if (n > len - i - 12) break;
        put_be32(p + i + 8 + n, crc32_of(p + i + 4, (size_t)n + 4));
        i += 12 + (size_t)n;
    }
}

/* ---- tests --------------------------------------------------------------- */

static void test_jpeg_rgb(nst_decoder *d)
{
    for (int prog = 0; prog < 2; prog++) {
        int w = 173, h = 91;
        uint8_t *px = make_rgb(w, h);
        test_jpeg_opts o = {w, h, 3, JCS_RGB, JCS_UNKNOWN, 95, prog, 0, 0};
        size_t len;
        uint8_t *j = test_jpeg_encode(px, &o, &len);

        nst_image_info info;
        CHECK_OK(nst_decode_probe(d, j, len, "rgb.jpg", &info));
        CHECK_EQ(info.format, NST_FORMAT_JPEG);
        CHECK_EQ(info.width, w);
        CHECK_EQ(info.height, h);
        CHECK_EQ(info.components, 3);

        nst_image im;
        CHECK_OK(nst_decode(d, j, len, "rgb.jpg", NULL, 0, 0, &im));
        check_full(&im, (uint32_t)w, (uint32_t)h);
        double e = mean_abs_err(&im, px);
        printf("jpeg rgb (progressive=%d): mean abs err %.3f\n", prog, e);
        CHECK(e < 3);

        /* Hints give a region at scale 1/2 (50.5 x 40 -> 16 x 16: 1/2 keeps
         * it >= 16, 1/4 would not) that covers the roi with a margin. */
        nst_window roi = {10, 5, 50.5, 40};
        CHECK_OK(nst_decode(d, j, len, "rgb.jpg", &roi, 16, 16, &im));
        CHECK_EQ(im.scale_num, 1);
        CHECK_EQ(im.scale_den, 2);
        CHECK_EQ(im.full_width, 87); /* ceil(173 / 2) */
        CHECK_EQ(im.full_height, 46);
        CHECK_EQ(im.src_width, w);
        CHECK_EQ(im.src_height, h);
        CHECK_EQ(im.stride, (size_t)im.width * 3);
        CHECK(im.x0 + 1 <= 5 && im.y0 + 1 <= 2);                  /* roi starts at 5, 2.5 */
        CHECK(im.x0 + im.width >= 31 && im.y0 + im.height >= 25); /* ends 30.25, 22.5 */
        CHECK(im.x0 + im.width <= 87 && im.y0 + im.height <= 46);
        CHECK(im.width < 87 || im.height < 46);
        /* No output size: full scale, the roi's region only. */
        CHECK_OK(nst_decode(d, j, len, "rgb.jpg", &roi, 0, 0, &im));
        CHECK_EQ(im.scale_den, 1);
        CHECK(im.x0 <= 10 && im.x0 + im.width >= 61 && im.x0 + im.width <= (uint32_t)w);
        CHECK(im.y0 <= 5 && im.y0 + im.height >= 45 && im.y0 + im.height <= (uint32_t)h);
        /* Output size without roi: the whole image, DCT-scaled (173x91 to
         * 40x20 allows 1/4). */
        CHECK_OK(nst_decode(d, j, len, "rgb.jpg", NULL, 40, 20, &im));
        CHECK_EQ(im.scale_den, 4);
        CHECK_EQ(im.width, 44);
        CHECK_EQ(im.height, 23);
        CHECK_EQ(im.x0, 0);
        CHECK_EQ(im.y0, 0);
        /* A useless roi (NaN, empty) is ignored: full image. */
        nst_window bad = {NAN, 0, 10, 10};
        CHECK_OK(nst_decode(d, j, len, "rgb.jpg", &bad, 0, 0, &im));
        check_full(&im, (uint32_t)w, (uint32_t)h);
        nst_window empty = {3, 3, 0, 10};
        CHECK_OK(nst_decode(d, j, len, "rgb.jpg", &empty, 0, 0, &im));
        check_full(&im, (uint32_t)w, (uint32_t)h);
        free(j);
        free(px);
    }
}

static void test_jpeg_gray(nst_decoder *d)
{
    int w = 64, h = 50;
    uint8_t *g = malloc((size_t)w * h);
    for (int i = 0; i < w * h; i++) g[i] = (uint8_t)((i % w) * 4 + (i / w));
    test_jpeg_opts o = {w, h, 1, JCS_GRAYSCALE, JCS_UNKNOWN, 95, 0, 0, 0};
    size_t len;
    uint8_t *j = test_jpeg_encode(g, &o, &len);
    nst_image_info info;
    CHECK_OK(nst_decode_probe(d, j, len, "gray.jpg", &info));
    CHECK_EQ(info.components, 1);
    nst_image im;
    CHECK_OK(nst_decode(d, j, len, "gray.jpg", NULL, 0, 0, &im));
    check_full(&im, (uint32_t)w, (uint32_t)h);
    int rgb_equal = 1;
    double err = 0;
    for (int i = 0; i < w * h; i++) {
        const uint8_t *q = im.data + (size_t)i * 3;
        if (q[0] != q[1] || q[1] != q[2]) rgb_equal = 0;
        err += fabs((double)q[0] - g[i]);
    }
    CHECK(rgb_equal);
    CHECK(err / (w * h) < 3);
    free(j);
    free(g);
}

/* CMYK as Photoshop stores it (Adobe convention: 255 - ink). Expected RGB is
 * what PIL gives: R = stored_C * stored_K / 255, rounded. */
static void test_jpeg_cmyk(nst_decoder *d)
{
    int w = 80, h = 48;
    uint8_t *cmyk = malloc((size_t)w * h * 4), *want = malloc((size_t)w * h * 3);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *q = cmyk + ((size_t)y * w + x) * 4;
            q[0] = (uint8_t)(255 - x * 2);       /* stored C */
            q[1] = (uint8_t)(255 - y * 3);       /* stored M */
            q[2] = (uint8_t)(200);               /* stored Y */
            q[3] = (uint8_t)(255 - (x + y) / 2); /* stored K */
            for (int c = 0; c < 3; c++)
                want[((size_t)y * w + x) * 3 + c] = (uint8_t)floor(q[c] * q[3] / 255.0 + 0.5);
        }
    /* 0: CMYK with Adobe marker (libjpeg writes one for CMYK); 1: YCCK
     * (Adobe transform 2); 2: CMYK without Adobe marker, which PIL also
     * reads as Adobe-inverted. */
    for (int variant = 0; variant < 3; variant++) {
        test_jpeg_opts o = {w,  h, 4, JCS_CMYK,    variant == 1 ? JCS_YCCK : JCS_UNKNOWN,
                            95, 0, 0, variant == 2};
        size_t len;
        uint8_t *j = test_jpeg_encode(cmyk, &o, &len);
        int has_adobe = 0;
        for (size_t i = 0; i + 1 < len; i++)
            if (j[i] == 0xFF && j[i + 1] == 0xEE) has_adobe = 1;
        CHECK_EQ(has_adobe, variant != 2);
        nst_image_info info;
        CHECK_OK(nst_decode_probe(d, j, len, "cmyk.jpg", &info));
        CHECK_EQ(info.components, 4);
        nst_image im;
        CHECK_OK(nst_decode(d, j, len, "cmyk.jpg", NULL, 0, 0, &im));
        check_full(&im, (uint32_t)w, (uint32_t)h);
        double e = mean_abs_err(&im, want);
        printf("cmyk variant %d: mean abs err %.3f\n", variant, e);
        CHECK(e < 3);
        free(j);
    }
    free(cmyk);
    free(want);
}

static void test_png(nst_decoder *d)
{
    int w = 37, h = 29; /* odd sizes: every Adam7 pass is partial */
    size_t n = (size_t)w * h;
    uint8_t *want = malloc(n * 3);

    for (int interlace = 0; interlace < 2; interlace++) {
        size_t len;
        uint8_t *p, *src;
        nst_image im;
        nst_image_info info;

        /* RGB 8 */
        src = make_noise(n * 3);
        png_opts o = {w, h, PNG_COLOR_TYPE_RGB, 8, interlace, NULL, 0, NULL, 0};
        p = png_encode(src, &o, &len);
        CHECK_OK(nst_decode_probe(d, p, len, "rgb.png", &info));
        CHECK_EQ(info.format, NST_FORMAT_PNG);
        CHECK_EQ(info.width, w);
        CHECK_EQ(info.height, h);
        CHECK_EQ(info.components, 3);
        CHECK_OK(nst_decode(d, p, len, "rgb.png", NULL, 0, 0, &im));
        check_full(&im, (uint32_t)w, (uint32_t)h);
        CHECK(same_pixels(&im, src));
        free(p);
        free(src);

        /* RGBA 8: alpha dropped */
        src = make_noise(n * 4);
        for (size_t i = 0; i < n; i++) memcpy(want + i * 3, src + i * 4, 3);
        o = (png_opts){w, h, PNG_COLOR_TYPE_RGB_ALPHA, 8, interlace, NULL, 0, NULL, 0};
        p = png_encode(src, &o, &len);
        CHECK_OK(nst_decode_probe(d, p, len, "rgba.png", &info));
        CHECK_EQ(info.components, 4);
        CHECK_OK(nst_decode(d, p, len, "rgba.png", NULL, 0, 0, &im));
        check_full(&im, (uint32_t)w, (uint32_t)h);
        CHECK(same_pixels(&im, want));
        free(p);
        free(src);

        /* gray 8 */
        src = make_noise(n);
        for (size_t i = 0; i < n; i++) memset(want + i * 3, src[i], 3);
        o = (png_opts){w, h, PNG_COLOR_TYPE_GRAY, 8, interlace, NULL, 0, NULL, 0};
        p = png_encode(src, &o, &len);
        CHECK_OK(nst_decode_probe(d, p, len, "gray.png", &info));
        CHECK_EQ(info.components, 1);
        CHECK_OK(nst_decode(d, p, len, "gray.png", NULL, 0, 0, &im));
        CHECK(same_pixels(&im, want));
        free(p);
        free(src);

        /* gray + alpha 8 */
        src = make_noise(n * 2);
        for (size_t i = 0; i < n; i++) memset(want + i * 3, src[i * 2], 3);
        o = (png_opts){w, h, PNG_COLOR_TYPE_GRAY_ALPHA, 8, interlace, NULL, 0, NULL, 0};
        p = png_encode(src, &o, &len);
        CHECK_OK(nst_decode(d, p, len, "graya.png", NULL, 0, 0, &im));
        CHECK(same_pixels(&im, want));
        free(p);
        free(src);

        /* gray 2-bit: values scale by 85 */
        {
            size_t rb = ((size_t)w * 2 + 7) / 8;
            src = calloc(rb * h, 1);
            for (int y = 0; y < h; y++)
                for (int x = 0; x < w; x++) {
                    unsigned v = rnd() & 3;
                    src[y * rb + x / 4] |= (uint8_t)(v << (6 - 2 * (x % 4)));
                    memset(want + ((size_t)y * w + x) * 3, (int)(v * 85), 3);
                }
            o = (png_opts){w, h, PNG_COLOR_TYPE_GRAY, 2, interlace, NULL, 0, NULL, 0};
            p = png_encode(src, &o, &len);
            CHECK_OK(nst_decode(d, p, len, "gray2.png", NULL, 0, 0, &im));
            CHECK(same_pixels(&im, want));
            free(p);
            free(src);
        }

        /* palette 8 with tRNS (ignored) */
        {
            png_color pal[200];
            uint8_t trns[200];
            for (int i = 0; i < 200; i++) {
                pal[i].red = (uint8_t)rnd();
                pal[i].green = (uint8_t)rnd();
                pal[i].blue = (uint8_t)rnd();
                trns[i] = (uint8_t)rnd();
            }
            src = malloc(n);
            for (size_t i = 0; i < n; i++) {
                src[i] = (uint8_t)(rnd() % 200);
                want[i * 3] = pal[src[i]].red;
                want[i * 3 + 1] = pal[src[i]].green;
                want[i * 3 + 2] = pal[src[i]].blue;
            }
            o = (png_opts){w, h, PNG_COLOR_TYPE_PALETTE, 8, interlace, pal, 200, trns, 100};
            p = png_encode(src, &o, &len);
            CHECK_OK(nst_decode_probe(d, p, len, "pal.png", &info));
            CHECK_EQ(info.components, 3);
            CHECK_OK(nst_decode(d, p, len, "pal.png", NULL, 0, 0, &im));
            CHECK(same_pixels(&im, want));
            free(p);
            free(src);
        }

        /* RGB 16: the high byte (big-endian first byte) is kept */
        src = make_noise(n * 6);
        for (size_t i = 0; i < n * 3; i++) want[i] = src[i * 2];
        o = (png_opts){w, h, PNG_COLOR_TYPE_RGB, 16, interlace, NULL, 0, NULL, 0};
        p = png_encode(src, &o, &len);
        CHECK_OK(nst_decode(d, p, len, "rgb16.png", NULL, 0, 0, &im));
        CHECK(same_pixels(&im, want));
        free(p);
        free(src);

        /* RGBA 16 */
        src = make_noise(n * 8);
        for (size_t i = 0; i < n; i++)
            for (int c = 0; c < 3; c++) want[i * 3 + c] = src[i * 8 + c * 2];
        o = (png_opts){w, h, PNG_COLOR_TYPE_RGB_ALPHA, 16, interlace, NULL, 0, NULL, 0};
        p = png_encode(src, &o, &len);
        CHECK_OK(nst_decode(d, p, len, "rgba16.png", NULL, 0, 0, &im));
        CHECK(same_pixels(&im, want));
        free(p);
        free(src);

        /* gray 16 */
        src = make_noise(n * 2);
        for (size_t i = 0; i < n; i++) memset(want + i * 3, src[i * 2], 3);
        o = (png_opts){w, h, PNG_COLOR_TYPE_GRAY, 16, interlace, NULL, 0, NULL, 0};
        p = png_encode(src, &o, &len);
        CHECK_OK(nst_decode(d, p, len, "gray16.png", NULL, 0, 0, &im));
        CHECK(same_pixels(&im, want));
        free(p);
        free(src);
    }
    free(want);
}

/* Copy of `j` with `n` bytes of `junk` inserted at `at`. */
static uint8_t *insert_bytes(const uint8_t *j, size_t len, size_t at, const uint8_t *junk, size_t n,
                             size_t *out_len)
{
    uint8_t *o = malloc(len + n);
    memcpy(o, j, at);
    memcpy(o + at, junk, n);
    memcpy(o + at + n, j + at, len - at);
    *out_len = len + n;
    return o;
}

/* The warning policy: extraneous bytes between segments or before EOI (as
 * some encoders write) do not fail an item; before an RSTn (when libjpeg
 * reports them at all) they mean the entropy decoder lost sync and do. */
static void test_warnings(nst_decoder *d)
{
    static const uint8_t junk[3] = {0x00, 0x12, 0x00};
    nst_image im;
    size_t len, jl;
    for (int prog = 0; prog < 2; prog++) {
        uint8_t *j = jpeg_rgb(96, 64, prog, &len);
        CHECK_OK(nst_decode(d, j, len, "ref.jpg", NULL, 0, 0, &im));
        uint8_t *ref = malloc(96 * 64 * 3);
        memcpy(ref, im.data, 96 * 64 * 3);

        uint8_t *k = insert_bytes(j, len, len - 2, junk, sizeof junk, &jl);
        CHECK_OK(nst_decode(d, k, jl, "pad-eoi.jpg", NULL, 0, 0, &im));
        CHECK(same_pixels(&im, ref));
        free(k);

        size_t sof = jpeg_sof(j, len);
        k = insert_bytes(j, len, sof, junk, sizeof junk, &jl);
        CHECK_OK(nst_decode(d, k, jl, "pad-sof.jpg", NULL, 0, 0, &im));
        CHECK(same_pixels(&im, ref));
        free(k);
        free(ref);
        free(j);
    }
    {
        uint8_t *px = make_rgb(96, 64);
        test_jpeg_opts o = {96, 64, 3, JCS_RGB, JCS_UNKNOWN, 90, 0, 1, 0};
        uint8_t *j = test_jpeg_encode(px, &o, &len);
        size_t s = jpeg_scan_start(j, len), rst = 0;
        for (size_t i = s; i + 1 < len; i++)
            if (j[i] == 0xFF && j[i + 1] == 0xD0) {
                rst = i;
                break;
            }
        CHECK(rst > 0);
        CHECK_OK(nst_decode(d, j, len, "rst.jpg", NULL, 0, 0, &im));
        uint8_t *ref = malloc(96 * 64 * 3);
        memcpy(ref, im.data, 96 * 64 * 3);
        /* A few bytes: libjpeg's bit reader has already read ahead to the
         * RSTn marker and drops them silently (no warning); the interval
         * was complete, so the pixels are right. */
        uint8_t *k = insert_bytes(j, len, rst, junk, sizeof junk, &jl);
        CHECK_OK(nst_decode(d, k, jl, "pad-rst.jpg", NULL, 0, 0, &im));
        CHECK(same_pixels(&im, ref));
        free(k);
        /* More than the bit reader holds: libjpeg warns "extraneous bytes
         * before marker 0xd0", which is fatal before an RSTn. */
        uint8_t many[40];
        for (size_t i = 0; i < sizeof many; i++) many[i] = (uint8_t)(1 + i);
        k = insert_bytes(j, len, rst, many, sizeof many, &jl);
        CHECK_RC(nst_decode(d, k, jl, "pad-rst.jpg", NULL, 0, 0, &im), NOSTALL_E_CORRUPT);
        CHECK(msg_has("pad-rst.jpg"));
        CHECK(msg_has("extraneous"));
        free(k);
        free(ref);
        free(j);
        free(px);
    }
}

static void test_bad_inputs(nst_decoder *d)
{
    nst_image im;
    nst_image_info info;
    size_t len;
    const char *path = "bad/dir/item 42.jpg";

    /* JPEG cut at 50%: libjpeg warns "Premature end of JPEG file". */
    for (int prog = 0; prog < 2; prog++) {
        uint8_t *j = jpeg_rgb(120, 90, prog, &len);
        CHECK_RC(nst_decode(d, j, len / 2, path, NULL, 0, 0, &im), NOSTALL_E_TRUNCATED);
        CHECK(msg_has(path));
        /* Cut inside the header: also truncated. */
        CHECK_RC(nst_decode(d, j, 40, path, NULL, 0, 0, &im), NOSTALL_E_TRUNCATED);
        CHECK_RC(nst_decode_probe(d, j, 40, path, &info), NOSTALL_E_TRUNCATED);
        /* Note: even a missing EOI alone is E_TRUNCATED: libjpeg's bit
         * reader reads ahead past the last MCU and hits the end. */
        free(j);
    }

    /* PNG cut at 50%: the read callback runs past the end of the data, so
     * this is E_TRUNCATED (E_CORRUPT is for damage inside the data). */
    {
        uint8_t *p = png_rgb(64, 64, &len);
        CHECK_RC(nst_decode(d, p, len / 2, "cut.png", NULL, 0, 0, &im), NOSTALL_E_TRUNCATED);
        CHECK(msg_has("cut.png"));
        CHECK_RC(nst_decode_probe(d, p, 30, "cut.png", &info), NOSTALL_E_TRUNCATED);
        /* A flipped byte in IDAT: CRC error -> E_CORRUPT. */
        p[len / 2] ^= 0x55;
        CHECK_RC(nst_decode(d, p, len, "crc.png", NULL, 0, 0, &im), NOSTALL_E_CORRUPT);
        CHECK(msg_has("crc.png"));
        free(p);
    }

    /* Garbage (48 random bytes) over the middle of the entropy data, with
     * and without restart markers (one per MCU row). What libjpeg-turbo
     * reports is a bad Huffman code (slow path), a premature marker, a lost
     * RSTn or extraneous bytes before an RSTn: all fatal here. But it cannot
     * see everything: its fast Huffman path maps an invalid code to 0
     * without a warning, and a decoder that lost sync may realign or end the
     * interval within the bytes already in its bit buffer, again without a
     * warning; without restarts, ending early shows only as "extraneous
     * bytes before marker 0xd9", which real photographs also produce and we
     * accept. Verified with a plain libjpeg program: the undetected mutants
     * here decode with no warning at all. So the test requires: no crash;
     * an error is E_CORRUPT or E_TRUNCATED naming the file; a success has
     * the right dimensions; and most placements are detected (the counts
     * are deterministic: fixed PRNG seed). */
    for (int restarts = 0; restarts < 2; restarts++) {
        int detected = 0, total = 0;
        for (int rep = 0; rep < 20; rep++) {
            uint8_t *px = make_rgb(160, 120);
            test_jpeg_opts o = {160,      120, 3, JCS_RGB, JCS_UNKNOWN, 90, !restarts && (rep & 1),
                                restarts, 0};
            uint8_t *j = test_jpeg_encode(px, &o, &len);
            size_t s = jpeg_scan_start(j, len);
            CHECK(s > 0);
            size_t at = s + (len - s) / 4 + rnd() % ((len - s) / 2);
            for (size_t i = 0; i < 48 && at + i < len - 2; i++) j[at + i] = (uint8_t)rnd();
            int rc = nst_decode(d, j, len, "garbage.jpg", NULL, 0, 0, &im);
            total++;
            if (rc == 0) {
                check_full(&im, 160, 120);
            } else {
                CHECK(rc == NOSTALL_E_CORRUPT || rc == NOSTALL_E_TRUNCATED);
                CHECK(msg_has("garbage.jpg"));
                detected++;
            }
            free(j);
            free(px);
        }
        printf("garbage in entropy data (restarts=%d): %d of %d detected\n", restarts, detected,
               total);
        CHECK(detected * 2 > total);
    }

    /* Not an image. */
    const char *text = "hello, this is a text file\n";
    CHECK_RC(nst_decode(d, (const uint8_t *)text, strlen(text), "notes.txt", NULL, 0, 0, &im),
             NOSTALL_E_NOT_IMAGE);
    CHECK(msg_has("notes.txt"));
    CHECK(msg_has("starts with '68 65 6c 6c'"));
    CHECK_RC(nst_decode_probe(d, (const uint8_t *)text, strlen(text), "notes.txt", &info),
             NOSTALL_E_NOT_IMAGE);
    static const uint8_t two[2] = {0xFF, 0xD8};
    CHECK_RC(nst_decode(d, two, 2, "two.jpg", NULL, 0, 0, &im), NOSTALL_E_NOT_IMAGE);
    CHECK(msg_has("'ff d8'"));
    /* JPEG magic then nothing useful */
    static const uint8_t soi[4] = {0xFF, 0xD8, 0xFF, 0xD9};
    int rc = nst_decode(d, soi, 4, "soi.jpg", NULL, 0, 0, &im);
    CHECK(rc == NOSTALL_E_CORRUPT || rc == NOSTALL_E_TRUNCATED);
    CHECK(msg_has("soi.jpg"));

    /* Empty. */
    CHECK_RC(nst_decode(d, (const uint8_t *)"", 0, "empty.jpg", NULL, 0, 0, &im), NOSTALL_E_EMPTY);
    CHECK(msg_has("empty.jpg"));
    CHECK_RC(nst_decode(d, NULL, 0, "empty.jpg", NULL, 0, 0, &im), NOSTALL_E_EMPTY);
    CHECK_RC(nst_decode_probe(d, NULL, 0, "empty.jpg", &info), NOSTALL_E_EMPTY);

    /* Invalid arguments. */
    CHECK_RC(nst_decode(NULL, soi, 4, "x", NULL, 0, 0, &im), NOSTALL_E_INVALID);
    CHECK_RC(nst_decode(d, soi, 4, "x", NULL, 0, 0, NULL), NOSTALL_E_INVALID);
    CHECK_RC(nst_decode_probe(d, soi, 4, "x", NULL), NOSTALL_E_INVALID);
}

static void test_limits(void)
{
    nst_decoder *d = NULL;
    CHECK_OK(nst_decoder_create(&d, 100000000ull));
    nst_image im;
    nst_image_info info;
    size_t len;

    /* JPEG header forged to 60000x60000 (3.6e9 pixels): rejected right after
     * the header, before any pixel buffer (the output buffer does not grow;
     * no timing is asserted: sanitizer builds on a loaded machine). */
    for (int prog = 0; prog < 2; prog++) {
        uint8_t *j = jpeg_rgb(64, 48, prog, &len);
        size_t sof = jpeg_sof(j, len);
        CHECK(sof > 0);
        j[sof + 5] = 0xEA; /* height 60000 */
        j[sof + 6] = 0x60;
        j[sof + 7] = 0xEA; /* width 60000 */
        j[sof + 8] = 0x60;
        const size_t cap0 = d->out.cap;
        CHECK_RC(nst_decode(d, j, len, "huge.jpg", NULL, 0, 0, &im), NOSTALL_E_TOO_MANY_PIXELS);
        CHECK(msg_has("huge.jpg"));
        /* With region hints (a tiny roi, DCT scaling) too: the check is on
         * the file's dimensions, before scale or region are considered. */
        nst_window roi = {100, 100, 2000, 2000};
        CHECK_RC(nst_decode(d, j, len, "huge.jpg", &roi, 224, 224, &im), NOSTALL_E_TOO_MANY_PIXELS);
        CHECK(msg_has("huge.jpg"));
        CHECK_RC(nst_decode_probe(d, j, len, "huge.jpg", &info), NOSTALL_E_TOO_MANY_PIXELS);
        CHECK_EQ(d->out.cap, cap0);
        /* Zero height: also E_TOO_MANY_PIXELS (libjpeg: empty image). */
        j[sof + 5] = 0;
        j[sof + 6] = 0;
        CHECK_RC(nst_decode(d, j, len, "zero.jpg", NULL, 0, 0, &im), NOSTALL_E_TOO_MANY_PIXELS);
        CHECK(msg_has("zero.jpg"));
        free(j);
    }

    /* PNG IHDR forged the same way (the CRC no longer matches, but the limit
     * check comes first), and a zero width. */
    {
        uint8_t *p = png_rgb(64, 48, &len);
        put_be32(p + 16, 60000);
        put_be32(p + 20, 60000);
        const size_t cap0 = d->out.cap;
        CHECK_RC(nst_decode(d, p, len, "huge.png", NULL, 0, 0, &im), NOSTALL_E_TOO_MANY_PIXELS);
        CHECK(msg_has("huge.png"));
        CHECK_EQ(d->out.cap, cap0);
        png_fix_crcs(p, len);
        CHECK_RC(nst_decode_probe(d, p, len, "huge.png", &info), NOSTALL_E_TOO_MANY_PIXELS);
        put_be32(p + 16, 0);
        put_be32(p + 20, 48);
        png_fix_crcs(p, len);
        CHECK_RC(nst_decode(d, p, len, "zero.png", NULL, 0, 0, &im), NOSTALL_E_TOO_MANY_PIXELS);
        /* A very wide but small-area image is fine by max_pixels (libpng's
         * own 1e6 default width limit is raised accordingly). */
        free(p);
        uint8_t *src = make_noise(1200000 * 3);
        png_opts o = {1200000, 1, PNG_COLOR_TYPE_RGB, 8, 0, NULL, 0, NULL, 0};
        p = png_encode(src, &o, &len);
        CHECK_OK(nst_decode(d, p, len, "wide.png", NULL, 0, 0, &im));
        CHECK_EQ(im.width, 1200000);
        free(p);
        free(src);
    }
    nst_decoder_free(d);

    /* max_pixels below a valid image. */
    CHECK_OK(nst_decoder_create(&d, 64 * 48 - 1));
    {
        uint8_t *j = jpeg_rgb(64, 48, 0, &len);
        CHECK_RC(nst_decode(d, j, len, "small.jpg", NULL, 0, 0, &im), NOSTALL_E_TOO_MANY_PIXELS);
        CHECK(msg_has("small.jpg"));
        CHECK_RC(nst_decode_probe(d, j, len, "small.jpg", &info), NOSTALL_E_TOO_MANY_PIXELS);
        free(j);
        uint8_t *p = png_rgb(64, 48, &len);
        CHECK_RC(nst_decode(d, p, len, "small.png", NULL, 0, 0, &im), NOSTALL_E_TOO_MANY_PIXELS);
        CHECK(msg_has("small.png"));
        CHECK_RC(nst_decode_probe(d, p, len, "small.png", &info), NOSTALL_E_TOO_MANY_PIXELS);
        free(p);
        /* At exactly the limit: fine. */
        j = jpeg_rgb(63, 48, 0, &len);
        CHECK_OK(nst_decode(d, j, len, "ok.jpg", NULL, 0, 0, &im));
        free(j);
    }
    nst_decoder_free(d);

    CHECK_RC(nst_decoder_create(&d, 0), NOSTALL_E_INVALID);
    CHECK(d == NULL);
    CHECK_RC(nst_decoder_create(NULL, 1), NOSTALL_E_INVALID);
    nst_decoder_free(NULL);
}

/* One decoder across many sizes and formats, with errors in between: each
 * JPEG result must be byte-identical to a fresh decoder's, each PNG result
 * identical to the source. */
static void test_reuse(nst_decoder *d)
{
    static const int sizes[][2] = {{16, 16}, {300, 200}, {8, 8},  {513, 77},
                                   {1, 1},   {640, 480}, {33, 2}, {200, 300}};
    nst_image im;
    for (int round = 0; round < 3; round++)
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            int w = sizes[k][0], h = sizes[k][1];
            uint8_t *px = make_rgb(w, h);
            test_jpeg_opts o = {w, h, 3, JCS_RGB, JCS_UNKNOWN, 95, (int)(k & 1), 0, 0};
            size_t len;
            uint8_t *j = test_jpeg_encode(px, &o, &len);

            nst_decoder *fresh = NULL;
            CHECK_OK(nst_decoder_create(&fresh, 1u << 30));
            CHECK_OK(nst_decode(fresh, j, len, "ref.jpg", NULL, 0, 0, &im));
            uint8_t *ref = malloc((size_t)w * h * 3);
            memcpy(ref, im.data, (size_t)w * h * 3);
            if (w >= 16 && h >= 16) CHECK(mean_abs_err(&im, px) < 3);
            nst_decoder_free(fresh);

            CHECK_OK(nst_decode(d, j, len, "reuse.jpg", NULL, 0, 0, &im));
            check_full(&im, (uint32_t)w, (uint32_t)h);
            CHECK(same_pixels(&im, ref));
            /* an error, then the same decoder again */
            CHECK_RC(nst_decode(d, j, len / 2, "reuse.jpg", NULL, 0, 0, &im), NOSTALL_E_TRUNCATED);
            CHECK_OK(nst_decode(d, j, len, "reuse.jpg", NULL, 0, 0, &im));
            CHECK(same_pixels(&im, ref));

            png_opts po = {w, h, PNG_COLOR_TYPE_RGB, 8, (int)(k & 1), NULL, 0, NULL, 0};
            size_t plen;
            uint8_t *p = png_encode(px, &po, &plen);
            CHECK_OK(nst_decode(d, p, plen, "reuse.png", NULL, 0, 0, &im));
            check_full(&im, (uint32_t)w, (uint32_t)h);
            CHECK(same_pixels(&im, px));
            CHECK_RC(nst_decode(d, p, plen - 30, "reuse.png", NULL, 0, 0, &im), NOSTALL_E_TRUNCATED);
            CHECK_RC(nst_decode(d, j, 0, "reuse.jpg", NULL, 0, 0, &im), NOSTALL_E_EMPTY);
            CHECK_OK(nst_decode(d, p, plen, "reuse.png", NULL, 0, 0, &im));
            CHECK(same_pixels(&im, px));
            CHECK_OK(nst_decode(d, j, len, "reuse.jpg", NULL, 0, 0, &im));
            CHECK(same_pixels(&im, ref));
            free(ref);
            free(p);
            free(j);
            free(px);
        }
}

/* Mutated valid files: any status, never a crash or leak (ASan), and a
 * success must agree with probe on the dimensions and be fully readable. */
static void fuzz_one(nst_decoder *d, const uint8_t *orig, size_t len, uint8_t *buf, int is_png,
                     int *ok_count)
{
    memcpy(buf, orig, len);
    size_t n = len;
    int muts = 1 + (int)(rnd() % 8);
    for (int m = 0; m < muts; m++) {
        size_t at = rnd() % n;
        switch (rnd() % 4) {
        case 0: buf[at] = (uint8_t)rnd(); break;
        case 1: buf[at] ^= (uint8_t)(1u << (rnd() % 8)); break;
        case 2: buf[at] = (rnd() & 1) ? 0xFF : 0x00; break;
        default:
            if (rnd() % 4 == 0) n = at + 1;
            break; /* truncate */
        }
    }
    if (is_png && (rnd() & 1)) png_fix_crcs(buf, n);
    nst_image_info info;
    nst_image im;
    int prc = nst_decode_probe(d, buf, n, "fuzz", &info);
    int rc = nst_decode(d, buf, n, "fuzz", NULL, 0, 0, &im);
    CHECK(rc <= 0);
    CHECK(prc <= 0);
    if (rc < 0) {
        CHECK(rc == NOSTALL_E_CORRUPT || rc == NOSTALL_E_TRUNCATED || rc == NOSTALL_E_NOT_IMAGE ||
              rc == NOSTALL_E_TOO_MANY_PIXELS || rc == NOSTALL_E_UNSUPPORTED);
        CHECK(msg_has("fuzz"));
    } else {
        (*ok_count)++;
        CHECK_EQ(prc, 0);
        CHECK_EQ(im.width, info.width);
        CHECK_EQ(im.height, info.height);
        CHECK_EQ(im.stride, (size_t)im.width * 3);
        unsigned sum = 0; /* touch every byte: ASan checks the bounds */
        for (size_t i = 0; i < im.stride * im.height; i++) sum += im.data[i];
        (void)sum;
    }
    if (prc == 0) {
        /* The same bytes through region decode (a fixed roi, so the rnd()
         * sequence above stays as it was); damage below the roi may go
         * unnoticed, so a success here says nothing about `rc`. */
        nst_window roi = {info.width / 4.0, info.height / 3.0, info.width / 2.0, info.height / 2.0};
        int rrc = nst_decode(d, buf, n, "fuzz", &roi, 8, 8, &im);
        CHECK(rrc <= 0);
        if (rrc < 0) {
            CHECK(rrc == NOSTALL_E_CORRUPT || rrc == NOSTALL_E_TRUNCATED ||
                  rrc == NOSTALL_E_TOO_MANY_PIXELS || rrc == NOSTALL_E_UNSUPPORTED);
        } else {
            CHECK(im.x0 + im.width <= im.full_width && im.y0 + im.height <= im.full_height);
            CHECK_EQ(im.src_width, info.width);
            unsigned sum = 0;
            for (uint32_t y = 0; y < im.height; y++)
                for (size_t i = 0; i < (size_t)im.width * 3; i++) sum += im.data[y * im.stride + i];
            (void)sum;
        }
    }
}

/* buf without its header segments with marker FF `code` (malloc'd). */
static uint8_t *strip_segments(const uint8_t *buf, size_t len, uint8_t code, size_t *out_len)
{
    uint8_t *o = malloc(len);
    size_t n = 0, p = 2;
    memcpy(o, buf, 2);
    while (p + 4 <= len && buf[p] == 0xFF && buf[p + 1] != 0xDA) {
        const size_t seg = 2 + ((size_t)buf[p + 2] << 8 | buf[p + 3]);
        if (buf[p + 1] != code) memcpy(o + 2 + n, buf + p, seg), n += seg;
        p += seg;
    }
    memcpy(o + 2 + n, buf + p, len - p);
    *out_len = 2 + n + len - p;
    return o;
}

/* Abbreviated files, which leave tables out of their header, decode the
 * same on a decoder that has seen other files as on a fresh one: without
 * Huffman tables (Motion-JPEG frames), with libjpeg's standard ones, not
 * the previous file's; without quantization tables, an error, not the
 * previous file's tables. */
static void test_abbreviated(void)
{
    size_t blen, plen, mlen, qlen;
    uint8_t *base = jpeg_rgb(120, 90, 0, &blen); /* libjpeg's standard Huffman tables */
    uint8_t *prog = jpeg_rgb(64, 48, 1, &plen);  /* progressive: optimized tables */
    uint8_t *mjpeg = strip_segments(base, blen, 0xC4, &mlen);
    uint8_t *noq = strip_segments(base, blen, 0xDB, &qlen);
    CHECK(mlen < blen && qlen < blen);
    nst_decoder *fresh = NULL, *used = NULL;
    CHECK_OK(nst_decoder_create(&fresh, 1u << 24));
    CHECK_OK(nst_decoder_create(&used, 1u << 24));
    if (!fresh || !used) return;
    nst_image a, b, c;
    CHECK_OK(nst_decode(fresh, base, blen, "base.jpg", NULL, 0, 0, &a));
    uint8_t *ref = malloc((size_t)a.height * a.stride);
    memcpy(ref, a.data, (size_t)a.height * a.stride);
    CHECK_OK(nst_decode(fresh, mjpeg, mlen, "mjpeg.jpg", NULL, 0, 0, &b));
    CHECK(b.width == a.width && b.height == a.height &&
          memcmp(b.data, ref, (size_t)a.height * a.stride) == 0);
    for (int round = 0; round < 2; round++) {
        CHECK_OK(nst_decode(used, prog, plen, "prog.jpg", NULL, 0, 0, &c));
        CHECK_OK(nst_decode(used, mjpeg, mlen, "mjpeg.jpg", NULL, 0, 0, &c));
        CHECK(c.width == a.width && c.height == a.height &&
              memcmp(c.data, ref, (size_t)a.height * a.stride) == 0);
        const nst_window roi = {30, 40, 60, 40};
        CHECK_OK(nst_decode(used, prog, plen, "prog.jpg", NULL, 0, 0, &c));
        CHECK_OK(nst_decode(used, mjpeg, mlen, "mjpeg.jpg", &roi, 32, 32, &c));
        CHECK_OK(nst_decode(used, base, blen, "base.jpg", NULL, 0, 0, &c));
        CHECK_RC(nst_decode(used, noq, qlen, "noq.jpg", NULL, 0, 0, &c), NOSTALL_E_CORRUPT);
        CHECK(msg_has("noq.jpg"));
        CHECK_RC(nst_decode(fresh, noq, qlen, "noq.jpg", NULL, 0, 0, &c), NOSTALL_E_CORRUPT);
    }
    /* The rewrite for the cache reads them as a decode does: without
     * Huffman tables, with the standard ones (the same pixels as the
     * original); without quantization tables, declined. */
    nst_buf out = {0};
    size_t tlen = 0;
    CHECK_OK(nst_decode(used, prog, plen, "prog.jpg", NULL, 0, 0, &c));
    CHECK_EQ(nst_decode_transcode(used, mjpeg, mlen, &out, &tlen), 1);
    CHECK_OK(nst_decode(used, out.data, tlen, "mjpeg-rst.jpg", NULL, 0, 0, &c));
    CHECK(c.width == a.width && c.height == a.height &&
          memcmp(c.data, ref, (size_t)a.height * a.stride) == 0);
    CHECK_EQ(nst_decode_transcode(used, noq, qlen, &out, &tlen), 0);
    CHECK_EQ(nst_decode_transcode(used, base, blen, &out, &tlen), 1);
    nst_buf_free(&out);
    free(ref);
    free(noq);
    free(mjpeg);
    free(prog);
    free(base);
    nst_decoder_free(fresh);
    nst_decoder_free(used);
}

/* ---- decoder state: nothing of an earlier file is visible -------------- */

/* buf with `junk` inserted before the first segment with marker FF `code`,
 * and every run of consecutive such segments there wrapped into an APP15
 * segment, so that libjpeg skips them (malloc'd). Junk between segments is
 * what libjpeg passes over with a benign warning. */
static uint8_t *hide_segments(const uint8_t *buf, size_t len, uint8_t code, size_t *out_len)
{
    static const uint8_t junk[3] = {0x00, 0x12, 0x00};
    size_t p = 2;
    while (p + 4 <= len && buf[p] == 0xFF && buf[p + 1] != code && buf[p + 1] != 0xDA)
        p += 2 + ((size_t)buf[p + 2] << 8 | buf[p + 3]);
    size_t e = p;
    while (e + 4 <= len && buf[e] == 0xFF && buf[e + 1] == code)
        e += 2 + ((size_t)buf[e + 2] << 8 | buf[e + 3]);
    uint8_t *o = malloc(len + sizeof junk + 4);
    memcpy(o, buf, p);
    memcpy(o + p, junk, sizeof junk);
    uint8_t *app = o + p + sizeof junk;
    const size_t seg = 2 + (e - p);
    app[0] = 0xFF;
    app[1] = 0xEF;
    app[2] = (uint8_t)(seg >> 8);
    app[3] = (uint8_t)seg;
    memcpy(app + 4, buf + p, len - p);
    *out_len = len + sizeof junk + 4;
    return o;
}

/* buf with every SOF component's quantization table number k set to k + by,
 * and every DQT table id too (when dqt) (in place). */
static void shift_qtables(uint8_t *buf, size_t len, int by, int dqt)
{
    for (size_t p = 2; p + 4 <= len && buf[p] == 0xFF && buf[p + 1] != 0xDA;) {
        const size_t seg = (size_t)buf[p + 2] << 8 | buf[p + 3];
        uint8_t *s = buf + p + 4;
        if (buf[p + 1] == 0xC0 || buf[p + 1] == 0xC2) {
            for (int c = 0; c < s[5]; c++) s[6 + 3 * c + 2] = (uint8_t)(s[6 + 3 * c + 2] + by);
        } else if (buf[p + 1] == 0xDB && dqt) {
            for (size_t i = 0; i + 65 <= seg - 2; i += 65) s[i] = (uint8_t)(s[i] + by);
        }
        p += 2 + seg;
    }
}

/* `d` (which has decoded other files) and a fresh decoder give the same
 * answer for buf: the same status and message, or the same image; for a
 * full decode, a region decode and the rewrite for the cache. */
static int same_as_fresh(nst_decoder *d, const uint8_t *buf, size_t len, const char *what)
{
    int ok = 1;
    nst_decoder *f = NULL;
    CHECK_OK(nst_decoder_create(&f, 100000000ull));
    if (!f) return 0;
    static const nst_window rois[2] = {{0, 0, 0, 0}, {20, 10, 50, 40}};
    for (int r = 0; r < 2; r++) {
        const nst_window *roi = r ? &rois[r] : NULL;
        const uint32_t o = r ? 16 : 0;
        nst_image a, b;
        const int ra = nst_decode(d, buf, len, "b.jpg", roi, o, o, &a);
        char ma[512];
        snprintf(ma, sizeof ma, "%s", ra < 0 ? nostall_last_error() : "");
        size_t asz = ra == 0 ? (size_t)a.height * a.stride : 0;
        uint8_t *apx = malloc(asz ? asz : 1);
        if (asz) memcpy(apx, a.data, asz);
        const int rb = nst_decode(f, buf, len, "b.jpg", roi, o, o, &b);
        const char *mb = rb < 0 ? nostall_last_error() : "";
        if (ra != rb || strcmp(ma, mb) != 0) {
            fprintf(stderr, "  %s (roi %d): after other files %d '%s', fresh %d '%s'\n", what, r,
                    ra, ma, rb, mb);
            ok = 0;
        } else if (ra == 0 &&
                   (a.width != b.width || a.height != b.height || a.x0 != b.x0 || a.y0 != b.y0 ||
                    a.scale_den != b.scale_den || memcmp(apx, b.data, asz) != 0)) {
            fprintf(stderr, "  %s (roi %d): pixels differ from a fresh decoder's\n", what, r);
            ok = 0;
        }
        free(apx);
    }
    nst_buf ta = {0}, tb = {0};
    size_t la = 0, lb = 0;
    const int ta_rc = nst_decode_transcode(d, buf, len, &ta, &la);
    const int tb_rc = nst_decode_transcode(f, buf, len, &tb, &lb);
    if (ta_rc != tb_rc || (ta_rc == 1 && (la != lb || memcmp(ta.data, tb.data, la) != 0))) {
        fprintf(stderr, "  %s: the rewrite differs from a fresh decoder's (%d, %d)\n", what, ta_rc,
                tb_rc);
        ok = 0;
    }
    nst_buf_free(&ta);
    nst_buf_free(&tb);
    nst_decoder_free(f);
    return ok;
}

/* Determinism: one decoder's answer for B does not depend on the files it
 * decoded before (A), for pairs where libjpeg keeps something from A in a
 * reused decompressor: quantization tables (B's are hidden from libjpeg
 * behind junk, or B names a table only A defined), Huffman tables (B has
 * none: libjpeg's standard ones, not A's), restart interval, Adobe and
 * JFIF markers, arithmetic-coding conditioning. */
static void test_clean_state(void)
{
    size_t n[12];
    uint8_t *f[12];
    const char *name[12];
    int k = 0;
    uint8_t *px = make_rgb(120, 90);
    test_jpeg_opts base = {120, 90, 3, JCS_RGB, JCS_UNKNOWN, 90, 0, 0, 0};
    name[k] = "baseline";
    f[k] = test_jpeg_encode(px, &base, &n[k]), k++;
    test_jpeg_opts q10 = base;
    q10.quality = 10;
    name[k] = "quality 10";
    f[k] = test_jpeg_encode(px, &q10, &n[k]), k++;
    test_jpeg_opts prog = base;
    prog.progressive = 1;
    name[k] = "progressive";
    f[k] = test_jpeg_encode(px, &prog, &n[k]), k++;
    test_jpeg_opts rst = base;
    rst.restart_rows = 1;
    name[k] = "restart markers";
    f[k] = test_jpeg_encode(px, &rst, &n[k]), k++;
    test_jpeg_layout ar = {.arith = 1, .restart_mcus = 3};
    name[k] = "arithmetic";
    f[k] = test_jpeg_encode_ex(px, &base, &ar, &n[k]), k++;
    test_jpeg_layout opt = {.optimize = 1, .luma_h = 1, .luma_v = 1};
    name[k] = "optimized 4:4:4";
    f[k] = test_jpeg_encode_ex(px, &q10, &opt, &n[k]), k++;
    name[k] = "DQT hidden behind junk";
    f[k] = hide_segments(f[0], n[0], 0xDB, &n[k]), k++;
    name[k] = "DHT hidden behind junk";
    f[k] = hide_segments(f[0], n[0], 0xC4, &n[k]), k++;
    name[k] = "tables 2 and 3";
    f[k] = malloc(n[1]), n[k] = n[1], memcpy(f[k], f[1], n[1]);
    shift_qtables(f[k], n[k], 2, 1), k++;
    name[k] = "needs table 2, junk";
    {
        size_t m;
        uint8_t *t = hide_segments(f[0], n[0], 0xFE, &m); /* junk (no COM to hide) */
        shift_qtables(t, m, 2, 0);
        f[k] = t, n[k] = m, k++;
    }
    {
        uint8_t *cmyk = malloc(120 * 90 * 4);
        for (int i = 0; i < 120 * 90 * 4; i++) cmyk[i] = (uint8_t)(i * 7);
        test_jpeg_opts c = {120, 90, 4, JCS_CMYK, JCS_UNKNOWN, 90, 0, 0, 0};
        name[k] = "CMYK (Adobe)";
        f[k] = test_jpeg_encode(cmyk, &c, &n[k]), k++;
        free(cmyk);
    }
    test_jpeg_layout nojfif = {.no_jfif = 1};
    name[k] = "no JFIF";
    f[k] = test_jpeg_encode_ex(px, &base, &nojfif, &n[k]), k++;
    free(px);

    /* The two files the fix is about, on their own: what a fresh decoder
     * says about them. */
    {
        nst_decoder *fresh = NULL;
        nst_image im;
        CHECK_OK(nst_decoder_create(&fresh, 100000000ull));
        CHECK_RC(nst_decode(fresh, f[6], n[6], "noq.jpg", NULL, 0, 0, &im), NOSTALL_E_CORRUPT);
        CHECK(msg_has("Quantization table 0x00 was not defined"));
        CHECK_OK(nst_decode(fresh, f[0], n[0], "base.jpg", NULL, 0, 0, &im));
        uint8_t *ref = malloc((size_t)im.height * im.stride);
        memcpy(ref, im.data, (size_t)im.height * im.stride);
        CHECK_OK(nst_decode(fresh, f[7], n[7], "nohuff.jpg", NULL, 0, 0, &im));
        CHECK(memcmp(ref, im.data, (size_t)im.height * im.stride) == 0);
        CHECK_RC(nst_decode(fresh, f[9], n[9], "q2.jpg", NULL, 0, 0, &im), NOSTALL_E_CORRUPT);
        CHECK(msg_has("Quantization table 0x02 was not defined"));
        free(ref);
        nst_decoder_free(fresh);
    }
    int bad = 0;
    for (int a = 0; a < k; a++)
        for (int b = 0; b < k; b++) {
            nst_decoder *d = NULL;
            nst_image im;
            CHECK_OK(nst_decoder_create(&d, 100000000ull));
            if (!d) continue;
            const nst_window roi = {8, 8, 64, 48};
            (void)nst_decode(d, f[a], n[a], "a.jpg", NULL, 0, 0, &im);
            (void)nst_decode(d, f[a], n[a], "a.jpg", &roi, 16, 16, &im);
            char what[160];
            snprintf(what, sizeof what, "'%s' after '%s'", name[b], name[a]);
            if (!same_as_fresh(d, f[b], n[b], what)) bad++;
            nst_decoder_free(d);
        }
    printf("clean state: %d of %d ordered pairs differ from a fresh decoder\n", bad, k * k);
    CHECK_EQ(bad, 0);

    /* Without allocating per file: the table objects are recycled, so
     * libjpeg's permanent pool does not grow after the first round. */
    nst_decoder *d = NULL;
    CHECK_OK(nst_decoder_create(&d, 100000000ull));
    if (d) {
        nst_image im;
        nst_buf out = {0};
        size_t tl;
        uint64_t after_first = 0;
        for (int round = 0; round < 20; round++) {
            for (int i = 0; i < k; i++) {
                (void)nst_decode(d, f[i], n[i], "p.jpg", NULL, 0, 0, &im);
                const nst_window roi = {30, 20, 40, 30};
                (void)nst_decode(d, f[i], n[i], "p.jpg", &roi, 16, 16, &im);
                (void)nst_decode_transcode(d, f[i], n[i], &out, &tl);
            }
            if (round == 0) after_first = nst_jpeg_permanent_allocs(d);
        }
        printf("permanent-pool allocations: %llu after one round, %llu after 20\n",
               (unsigned long long)after_first, (unsigned long long)nst_jpeg_permanent_allocs(d));
        CHECK_EQ(nst_jpeg_permanent_allocs(d), after_first);
        CHECK(after_first <= 4 + 8 + 1); /* tables and jpeg_mem_src's manager */
        nst_buf_free(&out);
        nst_decoder_free(d);
    }
    for (int i = 0; i < k; i++) free(f[i]);
}

/* ---- hostile PNGs, unsupported JPEGs -------------------------------------- */

/* The peak resident memory (KiB) of a child process that decodes buf with
 * a fresh decoder (max_pixels 1e8), and the status it got. The child
 * inherits the parent's pages, so only differences between two such
 * children mean anything. */
static long child_peak_kb(const uint8_t *buf, size_t len, int *rc_out)
{
    int fd[2];
    if (pipe(fd) != 0) return -1;
    fflush(NULL);
    const pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        close(fd[0]);
        nst_decoder *d = NULL;
        nst_image im;
        int rc = nst_decoder_create(&d, 100000000ull);
        if (rc == 0) rc = nst_decode(d, buf, len, "child.png", NULL, 0, 0, &im);
        if (write(fd[1], &rc, sizeof rc) != (ssize_t)sizeof rc) _exit(2);
        _exit(0);
    }
    close(fd[1]);
    int status = 0, rc = 1;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    if (wait4(pid, &status, 0, &ru) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
        read(fd[0], &rc, sizeof rc) != (ssize_t)sizeof rc)
        rc = 1;
    close(fd[0]);
    *rc_out = rc;
    return ru.ru_maxrss;
}

/* A 1x1 8-bit gray PNG (valid, 67 bytes), with `extra` bytes spliced in
 * after IHDR (malloc'd). */
static uint8_t *tiny_png(const uint8_t *extra, size_t nextra, size_t *len)
{
    static const uint8_t px[2] = {0, 0x80};
    uint8_t *p = malloc(8 + 25 + nextra + 12 + 64 + 12);
    size_t n = 0;
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
    memcpy(p, sig, 8), n = 8;
    uint8_t ihdr[13] = {0};
    put_be32(ihdr, 1);
    put_be32(ihdr + 4, 1);
    ihdr[8] = 8;
    put_be32(p + n, 13), memcpy(p + n + 4, "IHDR", 4), memcpy(p + n + 8, ihdr, 13);
    put_be32(p + n + 21, crc32_of(p + n + 4, 17)), n += 25;
    if (nextra) memcpy(p + n, extra, nextra), n += nextra;
    uLongf zl = 64;
    compress2(p + n + 8, &zl, px, sizeof px, 9);
    put_be32(p + n, (uint32_t)zl), memcpy(p + n + 4, "IDAT", 4);
    put_be32(p + n + 8 + zl, crc32_of(p + n + 4, 4 + zl)), n += 12 + zl;
    put_be32(p + n, 0), memcpy(p + n + 4, "IEND", 4), put_be32(p + n + 8, crc32_of(p + n + 4, 4));
    *len = n + 12;
    return p;
}

/* An ancillary chunk declaring 0x7fffffff bytes of data (57 bytes in all
 * for pCAL: libpng 1.6.39 allocated and cleared 2 GiB for it before
 * noticing the data is not there) costs no more memory than an ordinary
 * PNG; likewise for the other ancillary chunks libpng reads into memory.
 * Ancillary chunks of a valid file are skipped: same pixels; but a CRC
 * error in one still fails the item. */
static void test_png_chunks(nst_decoder *d)
{
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
    size_t olen;
    uint8_t *ok = tiny_png(NULL, 0, &olen);
    int rc;
    const long base_kb = child_peak_kb(ok, olen, &rc);
    CHECK_EQ(rc, 0);
    static const char *types[] = {"pCAL", "iCCP", "sPLT", "tEXt", "zTXt",
                                  "iTXt", "eXIf", "sCAL", "prVt"};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        uint8_t p[57];
        memcpy(p, sig, 8);
        memcpy(p + 8, ok + 8, 25); /* IHDR */
        put_be32(p + 33, 0x7fffffffu);
        memcpy(p + 37, types[t], 4);
        memset(p + 41, 0x41, sizeof p - 41);
        const long kb = child_peak_kb(p, sizeof p, &rc);
        printf("57-byte PNG with a 2 GiB %s chunk: status %d, peak %ld KiB (ordinary: %ld)\n",
               types[t], rc, kb, base_kb);
        CHECK(rc == NOSTALL_E_TRUNCATED || rc == NOSTALL_E_CORRUPT);
        CHECK(kb > 0 && kb <= base_kb + 16 * 1024);
    }
    /* Valid ancillary chunks: skipped, the image decodes as without them. */
    uint8_t extra[64];
    size_t ne = 0;
    static const char text[] = "Comment\0hello";
    put_be32(extra, sizeof text - 1), memcpy(extra + 4, "tEXt", 4);
    memcpy(extra + 8, text, sizeof text - 1);
    put_be32(extra + 8 + sizeof text - 1, crc32_of(extra + 4, 4 + sizeof text - 1));
    ne = 12 + sizeof text - 1;
    size_t tlen;
    uint8_t *withtext = tiny_png(extra, ne, &tlen);
    nst_image im;
    CHECK_OK(nst_decode(d, withtext, tlen, "text.png", NULL, 0, 0, &im));
    CHECK(im.width == 1 && im.height == 1 && im.data[0] == 0x80 && im.data[2] == 0x80);
    withtext[33 + 9] ^= 1; /* the tEXt data: its CRC no longer matches */
    CHECK_RC(nst_decode(d, withtext, tlen, "text-crc.png", NULL, 0, 0, &im), NOSTALL_E_CORRUPT);
    CHECK(msg_has("text-crc.png"));
    free(withtext);
    free(ok);
}

/* A side longer than the resampler takes (2^26): refused from the header,
 * before any pixel buffer, even within max_pixels (100000000 x 1 is 97 KB
 * of PNG and was decoded whole, 300 MB, then refused by augment). */
static void test_side_limit(nst_decoder *d)
{
    const uint32_t w = 100000000u;
    const size_t raw = (size_t)w + 1;
    uint8_t *row = calloc(raw, 1);
    uLongf zl = compressBound((uLong)raw);
    uint8_t *z = malloc(zl);
    CHECK_EQ(compress2(z, &zl, row, (uLong)raw, 1), Z_OK);
    free(row);
    const size_t len = 8 + 25 + 12 + zl + 12;
    uint8_t *p = malloc(len);
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
    memcpy(p, sig, 8);
    uint8_t *c = p + 8;
    put_be32(c, 13), memcpy(c + 4, "IHDR", 4), put_be32(c + 8, w), put_be32(c + 12, 1);
    c[16] = 8, c[17] = 0, c[18] = 0, c[19] = 0, c[20] = 0;
    put_be32(c + 21, crc32_of(c + 4, 17));
    c += 25;
    put_be32(c, (uint32_t)zl), memcpy(c + 4, "IDAT", 4), memcpy(c + 8, z, zl);
    put_be32(c + 8 + zl, crc32_of(c + 4, 4 + zl));
    c += 12 + zl;
    put_be32(c, 0), memcpy(c + 4, "IEND", 4), put_be32(c + 8, crc32_of(c + 4, 4));
    free(z);
    printf("100000000x1 PNG: %zu bytes\n", len);

    const size_t cap0 = d->out.cap;
    nst_image im;
    nst_image_info info;
    CHECK_RC(nst_decode_probe(d, p, len, "long.png", &info), NOSTALL_E_TOO_MANY_PIXELS);
    CHECK(msg_has("long.png"));
    CHECK(msg_has("67108864"));
    CHECK_RC(nst_decode(d, p, len, "long.png", NULL, 0, 0, &im), NOSTALL_E_TOO_MANY_PIXELS);
    CHECK(msg_has("long.png"));
    CHECK_EQ(d->out.cap, cap0); /* no pixel buffer was sized */
    /* the same height, and at exactly 2^26 (the header alone is read) */
    put_be32(p + 16, 1), put_be32(p + 20, w), put_be32(p + 29, crc32_of(p + 12, 17));
    CHECK_RC(nst_decode_probe(d, p, len, "tall.png", &info), NOSTALL_E_TOO_MANY_PIXELS);
    put_be32(p + 16, 1u << 26), put_be32(p + 20, 1), put_be32(p + 29, crc32_of(p + 12, 17));
    CHECK_OK(nst_decode_probe(d, p, len, "edge.png", &info));
    put_be32(p + 16, (1u << 26) + 1), put_be32(p + 29, crc32_of(p + 12, 17));
    CHECK_RC(nst_decode_probe(d, p, len, "edge.png", &info), NOSTALL_E_TOO_MANY_PIXELS);
    free(p);
}

/* Palette indices past the PLTE entries: PIL (9.4) gives index i as the
 * grey (i, i, i); so do we, at every bit depth, interlaced or not. */
static void test_palette_range(nst_decoder *d)
{
    for (int depth = 1; depth <= 8; depth *= 2)
        for (int interlace = 0; interlace < 2; interlace++) {
            const int w = 19, h = 7, n = 1 << depth;
            const int npal = depth == 1 ? 1 : n / 2 - 1;
            png_color pal[256];
            for (int i = 0; i < npal; i++) pal[i] = (png_color){(uint8_t)(200 + i), 10, (uint8_t)i};
            const size_t rb = ((size_t)w * depth + 7) / 8;
            uint8_t *src = calloc(rb * h, 1), *want = malloc((size_t)w * h * 3);
            for (int y = 0; y < h; y++)
                for (int x = 0; x < w; x++) {
                    const unsigned v = (unsigned)(x + y * w) % (unsigned)n;
                    const int sh = 8 - depth - (x * depth) % 8;
                    src[y * rb + (size_t)x * depth / 8] |= (uint8_t)(v << sh);
                    uint8_t *q = want + ((size_t)y * w + x) * 3;
                    if ((int)v < npal)
                        q[0] = pal[v].red, q[1] = pal[v].green, q[2] = pal[v].blue;
                    else
                        q[0] = q[1] = q[2] = (uint8_t)v;
                }
            png_opts o = {w, h, PNG_COLOR_TYPE_PALETTE, depth, interlace, pal, npal, NULL, 0};
            size_t len;
            uint8_t *p = png_encode(src, &o, &len);
            nst_image im;
            CHECK_OK(nst_decode(d, p, len, "palette.png", NULL, 0, 0, &im));
            check_full(&im, (uint32_t)w, (uint32_t)h);
            if (!same_pixels(&im, want)) {
                fprintf(stderr, "palette depth %d interlace %d: not PIL's pixels\n", depth,
                        interlace);
                check_failures_++;
            }
            free(p);
            free(want);
            free(src);
        }
}

/* Valid JPEGs using what libjpeg-turbo 2.1.5 (8-bit) does not decode:
 * E_UNSUPPORTED with a message that says what, not E_CORRUPT. */
static void test_unsupported(nst_decoder *d)
{
    size_t len;
    uint8_t *j = jpeg_rgb(64, 48, 0, &len);
    const size_t sof = jpeg_sof(j, len);
    CHECK(sof > 0);
    nst_image im;
    nst_image_info info;
    j[sof + 4] = 12; /* data precision */
    CHECK_RC(nst_decode(d, j, len, "deep.jpg", NULL, 0, 0, &im), NOSTALL_E_UNSUPPORTED);
    CHECK(msg_has("deep.jpg"));
    CHECK(msg_has("12-bit JPEG (data precision 12) is not supported"));
    CHECK_RC(nst_decode_probe(d, j, len, "deep.jpg", &info), NOSTALL_E_UNSUPPORTED);
    nst_buf out = {0};
    size_t tl;
    CHECK_EQ(nst_decode_transcode(d, j, len, &out, &tl), 0);
    j[sof + 4] = 7; /* not a JPEG precision: damage */
    CHECK_RC(nst_decode(d, j, len, "seven.jpg", NULL, 0, 0, &im), NOSTALL_E_CORRUPT);
    j[sof + 4] = 8;
    j[sof + 1] = 0xC3; /* lossless */
    CHECK_RC(nst_decode(d, j, len, "lossless.jpg", NULL, 0, 0, &im), NOSTALL_E_UNSUPPORTED);
    CHECK(msg_has("lossless JPEG (SOF marker 0xc3) is not supported"));
    j[sof + 1] = 0xC5; /* hierarchical */
    CHECK_RC(nst_decode(d, j, len, "hier.jpg", NULL, 0, 0, &im), NOSTALL_E_UNSUPPORTED);
    CHECK(msg_has("hierarchical"));
    j[sof + 1] = 0xC0;
    CHECK_OK(nst_decode(d, j, len, "fine.jpg", NULL, 0, 0, &im));
    free(j);
    /* two components: valid, no colour space for it */
    uint8_t px[32 * 16 * 2];
    for (size_t i = 0; i < sizeof px; i++) px[i] = (uint8_t)(i * 3);
    test_jpeg_opts o = {32, 16, 2, JCS_UNKNOWN, JCS_UNKNOWN, 90, 0, 0, 0};
    j = test_jpeg_encode(px, &o, &len);
    CHECK_RC(nst_decode(d, j, len, "two.jpg", NULL, 0, 0, &im), NOSTALL_E_UNSUPPORTED);
    CHECK(msg_has("two.jpg"));
    CHECK(msg_has("2 components"));
    free(j);
    nst_buf_free(&out);
}

static void test_fuzz(void)
{
    nst_decoder *d = NULL;
    CHECK_OK(nst_decoder_create(&d, 1u << 20));
    size_t jl[3], pl[2];
    uint8_t *js[3], *ps[2];
    js[0] = jpeg_rgb(48, 40, 0, &jl[0]);
    js[1] = jpeg_rgb(48, 40, 1, &jl[1]);
    {
        uint8_t *px = make_rgb(40, 32);
        test_jpeg_opts o = {40, 32, 3, JCS_RGB, JCS_UNKNOWN, 80, 0, 1, 0};
        js[2] = test_jpeg_encode(px, &o, &jl[2]);
        free(px);
    }
    ps[0] = png_rgb(40, 30, &pl[0]);
    {
        uint8_t *src = make_noise(40 * 30);
        png_color pal[256];
        for (int i = 0; i < 256; i++) pal[i] = (png_color){(uint8_t)i, (uint8_t)(255 - i), 7};
        png_opts o = {40, 30, PNG_COLOR_TYPE_PALETTE, 8, 1, pal, 256, NULL, 0};
        ps[1] = png_encode(src, &o, &pl[1]);
        free(src);
    }
    uint8_t *buf = malloc(1 << 16);
    int ok_j = 0, ok_p = 0;
    for (int it = 0; it < 3000; it++) fuzz_one(d, js[it % 3], jl[it % 3], buf, 0, &ok_j);
    for (int it = 0; it < 2000; it++) fuzz_one(d, ps[it % 2], pl[it % 2], buf, 1, &ok_p);
    printf("fuzz: %d/3000 JPEG and %d/2000 PNG mutants decoded\n", ok_j, ok_p);
    /* Still fine afterwards. */
    nst_image im;
    CHECK_OK(nst_decode(d, js[0], jl[0], "after.jpg", NULL, 0, 0, &im));
    check_full(&im, 48, 40);
    CHECK_OK(nst_decode(d, ps[0], pl[0], "after.png", NULL, 0, 0, &im));
    check_full(&im, 40, 30);
    free(buf);
    for (int i = 0; i < 3; i++) free(js[i]);
    for (int i = 0; i < 2; i++) free(ps[i]);
    nst_decoder_free(d);
}

int main(void)
{
    crc_init();
    nst_decoder *d = NULL;
    CHECK_OK(nst_decoder_create(&d, 100000000ull));
    if (!d) TEST_EXIT();
    test_jpeg_rgb(d);
    test_jpeg_gray(d);
    test_jpeg_cmyk(d);
    test_png(d);
    test_warnings(d);
    test_bad_inputs(d);
    test_reuse(d);
    test_png_chunks(d);
    test_side_limit(d);
    test_palette_range(d);
    test_unsupported(d);
    nst_decoder_free(d);
    test_limits();
    test_abbreviated();
    test_clean_state();
    test_fuzz();
    TEST_EXIT();
}
