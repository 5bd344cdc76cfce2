/*
 * corpus_gen.c — writes the hand-made seeds of the decoder fuzz targets:
 * one small file per JPEG layout and PNG colour type our decoders
 * distinguish, and one per finding of issue 25 (each a test in
 * tests/test_decode.c or tests/test_huff.c as well):
 *
 *   jpeg/ jpeg_diff/  DQT hidden behind junk; DHT hidden (standard tables);
 *                     a DRI segment without restart markers; a junk marker
 *                     in place of an RSTn, alone and after 10 junk bytes;
 *                     bytes before an RSTn; an invalid Huffman code; a
 *                     12-bit, a lossless and a two-component JPEG;
 *   png/              a 57-byte PNG whose pCAL chunk declares 2 GiB; a
 *                     100000000x1 header; palette indices past the palette
 *                     at each bit depth; a tEXt chunk, and one with a bad
 *                     CRC.
 *
 * Usage: fuzz_corpus_gen DIR   (writes DIR/jpeg, DIR/jpeg_diff,
 * DIR/jpeg_transcode, DIR/png; the directories must exist). Deterministic:
 * the same files every run. tests/fuzz/make_corpus.sh runs it with
 * `nostall gen` and `nostall transcode` for the generated part.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "test_jpeg.h"

static const char *out_dir;
static uint64_t rng = 0x5DEECE66Dull;

static void put(const char *target, const char *name, const uint8_t *p, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s/%s", out_dir, target, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

/* ---- JPEG ---------------------------------------------------------------- */

static uint8_t *pixels(int w, int h, int comps)
{
    uint8_t *p = malloc((size_t)w * h * comps);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < comps; c++)
                p[((size_t)y * w + x) * comps + c] =
                    (uint8_t)(x * (3 + c) + y * (5 - c) + (test_xorshift(&rng) & 15));
    return p;
}

typedef struct jspec {
    const char *name;
    int w, h, comps;
    J_COLOR_SPACE in, jcs;
    int quality, progressive, restart_rows;
    test_jpeg_layout l;
} jspec;

static uint8_t *jpeg(const jspec *s, size_t *n)
{
    uint8_t *px = pixels(s->w, s->h, s->comps);
    test_jpeg_opts o = {s->w,       s->h,           s->comps,        s->in, s->jcs,
                        s->quality, s->progressive, s->restart_rows, 0};
    uint8_t *j = test_jpeg_encode_ex(px, &o, &s->l, n);
    free(px);
    return j;
}

/* Offset of the first segment with marker code m before the scan, or 0. */
static size_t segment(const uint8_t *b, size_t n, uint8_t m)
{
    for (size_t p = 2; p + 4 <= n && b[p] == 0xFF;) {
        if (b[p + 1] == m) return p;
        if (b[p + 1] == 0xDA) return 0;
        p += 2 + ((size_t)b[p + 2] << 8 | b[p + 3]);
    }
    return 0;
}

static size_t scan_data(const uint8_t *b, size_t n)
{
    const size_t s = segment(b, n, 0xDA);
    return s ? s + 2 + ((size_t)b[s + 2] << 8 | b[s + 3]) : 0;
}

/* b with `ins` inserted at `at` (malloc'd). */
static uint8_t *splice(const uint8_t *b, size_t n, size_t at, const uint8_t *ins, size_t k,
                       size_t *out)
{
    uint8_t *o = malloc(n + k);
    memcpy(o, b, at);
    memcpy(o + at, ins, k);
    memcpy(o + at + k, b + at, n - at);
    *out = n + k;
    return o;
}

/* The run of segments with marker m wrapped in an APP15 after 3 junk bytes:
 * libjpeg skips both (tests/test_decode.c, hide_segments). */
static uint8_t *hide(const uint8_t *b, size_t n, uint8_t m, size_t *out)
{
    const size_t p = segment(b, n, m);
    size_t e = p;
    while (e + 4 <= n && b[e] == 0xFF && b[e + 1] == m) e += 2 + ((size_t)b[e + 2] << 8 | b[e + 3]);
    const size_t seg = 2 + (e - p);
    const uint8_t ins[7] = {0x00, 0x12, 0x00, 0xFF, 0xEF, (uint8_t)(seg >> 8), (uint8_t)seg};
    return splice(b, n, p, ins, sizeof ins, out);
}

static size_t nth_rst(const uint8_t *b, size_t n, int k)
{
    for (size_t p = scan_data(b, n); p + 1 < n; p++)
        if (b[p] == 0xFF && b[p + 1] >= 0xD0 && b[p + 1] <= 0xD7 && k-- == 0) return p;
    return 0;
}

static void jpeg_seeds(void)
{
    static const jpeg_scan_info two_scans[2] = {{1, {0}, 0, 63, 0, 0}, {2, {1, 2}, 0, 63, 0, 0}};
    const jspec specs[] = {
        {"baseline-420.jpg", 48, 32, 3, JCS_RGB, JCS_UNKNOWN, 85, 0, 0, {0}},
        {"baseline-444-q100.jpg",
         24,
         16,
         3,
         JCS_RGB,
         JCS_UNKNOWN,
         100,
         0,
         0,
         {.luma_h = 1, .luma_v = 1}},
        {"baseline-422.jpg", 40, 24, 3, JCS_RGB, JCS_UNKNOWN, 75, 0, 0, {.luma_h = 2, .luma_v = 1}},
        {"baseline-440.jpg", 24, 40, 3, JCS_RGB, JCS_UNKNOWN, 75, 0, 0, {.luma_h = 1, .luma_v = 2}},
        {"baseline-411.jpg", 64, 16, 3, JCS_RGB, JCS_UNKNOWN, 75, 0, 0, {.luma_h = 4, .luma_v = 1}},
        {"baseline-42.jpg", 64, 32, 3, JCS_RGB, JCS_UNKNOWN, 60, 0, 0, {.luma_h = 4, .luma_v = 2}},
        {"baseline-31.jpg", 48, 16, 3, JCS_RGB, JCS_UNKNOWN, 60, 0, 0, {.luma_h = 3, .luma_v = 1}},
        {"gray.jpg", 33, 17, 1, JCS_GRAYSCALE, JCS_UNKNOWN, 90, 0, 0, {0}},
        {"gray-1x1.jpg", 1, 1, 1, JCS_GRAYSCALE, JCS_UNKNOWN, 90, 0, 0, {0}},
        {"rgb-nojfif.jpg", 16, 16, 3, JCS_RGB, JCS_UNKNOWN, 90, 0, 0, {.no_jfif = 1}},
        {"rgb-as-rgb.jpg", 16, 8, 3, JCS_RGB, JCS_RGB, 90, 0, 0, {0}},
        {"cmyk.jpg", 24, 16, 4, JCS_CMYK, JCS_UNKNOWN, 80, 0, 0, {0}},
        {"ycck.jpg", 24, 16, 4, JCS_CMYK, JCS_YCCK, 80, 0, 0, {.luma_h = 2, .luma_v = 2}},
        {"optimized.jpg", 40, 32, 3, JCS_RGB, JCS_UNKNOWN, 95, 0, 0, {.optimize = 1}},
        {"progressive.jpg", 40, 32, 3, JCS_RGB, JCS_UNKNOWN, 85, 1, 0, {0}},
        {"progressive-gray.jpg", 24, 24, 1, JCS_GRAYSCALE, JCS_UNKNOWN, 85, 1, 0, {0}},
        {"arith.jpg", 32, 24, 3, JCS_RGB, JCS_UNKNOWN, 85, 0, 0, {.arith = 1}},
        {"arith-progressive-rst.jpg",
         32,
         24,
         3,
         JCS_RGB,
         JCS_UNKNOWN,
         85,
         1,
         0,
         {.arith = 1, .restart_mcus = 2}},
        {"multiscan-sequential.jpg",
         32,
         24,
         3,
         JCS_RGB,
         JCS_UNKNOWN,
         85,
         0,
         0,
         {.scans = two_scans, .nscans = 2, .luma_h = 1, .luma_v = 1}},
        {"rst-every-mcu.jpg", 48, 32, 3, JCS_RGB, JCS_UNKNOWN, 85, 0, 0, {.restart_mcus = 1}},
        {"rst-every-3.jpg",
         96,
         32,
         3,
         JCS_RGB,
         JCS_UNKNOWN,
         85,
         0,
         0,
         {.restart_mcus = 3, .luma_h = 1, .luma_v = 1}},
        {"rst-every-row.jpg", 48, 48, 3, JCS_RGB, JCS_UNKNOWN, 85, 0, 1, {0}},
        {"rst-gray-optimized.jpg",
         40,
         40,
         1,
         JCS_GRAYSCALE,
         JCS_UNKNOWN,
         95,
         0,
         0,
         {.restart_mcus = 2, .optimize = 1}},
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        size_t n;
        uint8_t *j = jpeg(&specs[i], &n);
        put("jpeg", specs[i].name, j, n);
        if (specs[i].l.restart_mcus || specs[i].restart_rows) put("jpeg_diff", specs[i].name, j, n);
        if (!specs[i].l.restart_mcus && !specs[i].restart_rows && !specs[i].l.arith)
            put("jpeg_transcode", specs[i].name, j, n);
        free(j);
    }

    /* the findings */
    size_t n, m;
    uint8_t *base = jpeg(&specs[0], &n), *t;
    t = hide(base, n, 0xDB, &m);
    put("jpeg", "finding-dqt-behind-junk.jpg", t, m);
    free(t);
    t = hide(base, n, 0xC4, &m);
    put("jpeg", "finding-dht-behind-junk.jpg", t, m);
    put("jpeg_transcode", "finding-dht-behind-junk.jpg", t, m);
    free(t);
    {
        const size_t sos = segment(base, n, 0xDA);
        static const uint8_t dri[6] = {0xFF, 0xDD, 0x00, 0x04, 0x00, 0x02};
        t = splice(base, n, sos, dri, sizeof dri, &m);
        put("jpeg", "finding-dri-without-rst.jpg", t, m);
        put("jpeg_diff", "finding-dri-without-rst.jpg", t, m);
        free(t);
    }
    uint8_t *r = jpeg(&specs[19], &n); /* restart every MCU */
    const size_t m3 = nth_rst(r, n, 3);
    for (int junk = 0; junk <= 10; junk += 10) {
        uint8_t ins[10];
        memset(ins, 0x3C, sizeof ins);
        t = splice(r, n, m3, ins, (size_t)junk, &m);
        t[m3 + (size_t)junk + 1] = 0xE3;
        put("jpeg", junk ? "finding-junk-marker-after-bytes.jpg" : "finding-junk-marker.jpg", t, m);
        put("jpeg_diff", junk ? "finding-junk-marker-after-bytes.jpg" : "finding-junk-marker.jpg",
            t, m);
        free(t);
    }
    {
        uint8_t ins[3] = {0x11, 0x22, 0x33};
        t = splice(r, n, m3, ins, sizeof ins, &m);
        put("jpeg_diff", "bytes-before-rst.jpg", t, m);
        free(t);
        static const uint8_t ones[8] = {0xFF, 0x00, 0xFF, 0x00, 0xFF, 0x00, 0xFF, 0x00};
        const size_t sd = scan_data(base, n);
        t = splice(base, n, sd + (n - sd) / 2, ones, sizeof ones, &m);
        put("jpeg_diff", "bad-huffman-code.jpg", t, m);
        free(t);
    }
    free(r);
    {
        const size_t sof = segment(base, n, 0xC0);
        t = malloc(n);
        memcpy(t, base, n);
        t[sof + 4] = 12;
        put("jpeg", "finding-12-bit.jpg", t, n);
        t[sof + 4] = 8;
        t[sof + 1] = 0xC3;
        put("jpeg", "finding-lossless-sof3.jpg", t, n);
        free(t);
    }
    {
        const jspec two = {"", 16, 16, 2, JCS_UNKNOWN, JCS_UNKNOWN, 90, 0, 0, {0}};
        t = jpeg(&two, &m);
        put("jpeg", "finding-two-components.jpg", t, m);
        free(t);
    }
    free(base);
}

/* ---- PNG ----------------------------------------------------------------- */

typedef struct pngbuf {
    uint8_t data[1 << 16];
    size_t n;
} pngbuf;

static void be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8),
    p[3] = (uint8_t)v;
}

static void chunk(pngbuf *b, const char *type, const uint8_t *d, uint32_t n)
{
    be32(b->data + b->n, n);
    memcpy(b->data + b->n + 4, type, 4);
    if (n) memcpy(b->data + b->n + 8, d, n);
    be32(b->data + b->n + 8 + n, (uint32_t)crc32(0, b->data + b->n + 4, 4 + n));
    b->n += 12 + n;
}

static void png_start(pngbuf *b, uint32_t w, uint32_t h, int depth, int color, int interlace)
{
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
    memcpy(b->data, sig, 8);
    b->n = 8;
    uint8_t ihdr[13];
    be32(ihdr, w), be32(ihdr + 4, h);
    ihdr[8] = (uint8_t)depth, ihdr[9] = (uint8_t)color, ihdr[10] = 0, ihdr[11] = 0;
    ihdr[12] = (uint8_t)interlace;
    chunk(b, "IHDR", ihdr, 13);
}

/* Raw (filtered) image data, compressed into IDAT, then IEND. */
static void png_finish(pngbuf *b, const uint8_t *raw, size_t n)
{
    uLongf zl = compressBound((uLong)n);
    uint8_t *z = malloc(zl);
    compress2(z, &zl, raw, (uLong)n, 9);
    chunk(b, "IDAT", z, (uint32_t)zl);
    free(z);
    chunk(b, "IEND", NULL, 0);
}

/* Raw (filtered) data for a w x h image with `bits` bits per pixel, Adam7
 * passes when interlaced: filter bytes cycle through the five filters,
 * the rest is pseudo-random (masked by `mask`). */
static uint8_t *raw_image(uint32_t w, uint32_t h, int bits, int interlace, uint8_t mask, size_t *n)
{
    static const int adam7[7][4] = {{0, 0, 8, 8}, {0, 4, 8, 8}, {4, 0, 8, 4}, {0, 2, 4, 4},
                                    {2, 0, 4, 2}, {0, 1, 2, 2}, {1, 0, 2, 1}};
    static const int whole[1][4] = {{0, 0, 1, 1}};
    const int(*pass)[4] = interlace ? adam7 : whole;
    const int passes = interlace ? 7 : 1;
    size_t cap = 0;
    for (int p = 0; p < passes; p++) {
        const uint32_t pw = (w - pass[p][1] + pass[p][3] - 1) / pass[p][3];
        const uint32_t ph = (h - pass[p][0] + pass[p][2] - 1) / pass[p][2];
        if (w > (uint32_t)pass[p][1] && h > (uint32_t)pass[p][0])
            cap += ph * (1 + ((size_t)pw * bits + 7) / 8);
    }
    uint8_t *r = malloc(cap ? cap : 1);
    size_t o = 0;
    for (int p = 0; p < passes; p++) {
        if (w <= (uint32_t)pass[p][1] || h <= (uint32_t)pass[p][0]) continue;
        const uint32_t pw = (w - pass[p][1] + pass[p][3] - 1) / pass[p][3];
        const uint32_t ph = (h - pass[p][0] + pass[p][2] - 1) / pass[p][2];
        const size_t bpr = ((size_t)pw * bits + 7) / 8;
        for (uint32_t y = 0; y < ph; y++) {
            r[o++] = (uint8_t)(y % 5);
            for (size_t i = 0; i < bpr; i++) r[o++] = (uint8_t)test_xorshift(&rng) & mask;
        }
    }
    *n = o;
    return r;
}

static void png_plain(const char *name, uint32_t w, uint32_t h, int depth, int color, int interlace)
{
    static const int chans[7] = {1, 0, 3, 1, 2, 0, 4};
    pngbuf *b = malloc(sizeof *b);
    png_start(b, w, h, depth, color, interlace);
    if (color == 3) {
        uint8_t pal[3 * 16];
        for (int i = 0; i < 16; i++)
            pal[3 * i] = (uint8_t)(i * 16), pal[3 * i + 1] = 7, pal[3 * i + 2] = (uint8_t)(255 - i);
        const int npal = depth == 1 ? 2 : depth == 2 ? 4 : 16;
        chunk(b, "PLTE", pal, (uint32_t)(3 * npal));
        static const uint8_t trns[2] = {0, 128};
        chunk(b, "tRNS", trns, 2);
    }
    /* palette images: indices within the palette (filters make them
     * anything, but only where a filter is not None) */
    size_t n;
    uint8_t *raw = raw_image(w, h, chans[color] * depth, interlace,
                             color == 3 && depth == 8 ? 0x0F : 0xFF, &n);
    png_finish(b, raw, n);
    put("png", name, b->data, b->n);
    free(raw);
    free(b);
}

static void png_seeds(void)
{
    png_plain("rgb8.png", 7, 5, 8, 2, 0);
    png_plain("rgb8-interlaced.png", 9, 9, 8, 2, 1);
    png_plain("rgba8.png", 5, 4, 8, 6, 0);
    png_plain("rgb16.png", 4, 3, 16, 2, 0);
    png_plain("rgba16-interlaced.png", 5, 5, 16, 6, 1);
    png_plain("gray1.png", 13, 3, 1, 0, 0);
    png_plain("gray2.png", 11, 3, 2, 0, 0);
    png_plain("gray4-interlaced.png", 9, 9, 4, 0, 1);
    png_plain("gray8.png", 6, 6, 8, 0, 0);
    png_plain("gray16.png", 4, 4, 16, 0, 0);
    png_plain("graya8.png", 4, 4, 8, 4, 0);
    png_plain("graya16.png", 3, 3, 16, 4, 0);
    png_plain("palette1.png", 17, 2, 1, 3, 0);
    png_plain("palette2.png", 9, 2, 2, 3, 0);
    png_plain("palette4-interlaced.png", 9, 9, 4, 3, 1);
    png_plain("palette8.png", 8, 4, 8, 3, 0);

    pngbuf *b = malloc(sizeof *b);
    /* a 57-byte PNG whose pCAL chunk declares 2 GiB */
    png_start(b, 1, 1, 8, 0, 0);
    be32(b->data + b->n, 0x7fffffffu);
    memcpy(b->data + b->n + 4, "pCAL", 4);
    memset(b->data + b->n + 8, 0x41, 16);
    put("png", "finding-pcal-2gib.png", b->data, b->n + 24);
    /* a 100000000x1 header (the image data is a few rows only) */
    png_start(b, 100000000u, 1, 8, 0, 0);
    {
        static const uint8_t row[64] = {0};
        png_finish(b, row, sizeof row);
    }
    put("png", "finding-100000000x1.png", b->data, b->n);
    /* palette indices past the palette (PIL: grey) */
    for (int depth = 1; depth <= 8; depth *= 2) {
        png_start(b, 16, 2, depth, 3, 0);
        static const uint8_t pal[3] = {255, 0, 0};
        chunk(b, "PLTE", pal, 3);
        size_t n;
        uint8_t *raw = raw_image(16, 2, depth, 0, 0xFF, &n);
        raw[0] = raw[n / 2] = 0; /* filter None: the indices are as written */
        png_finish(b, raw, n);
        free(raw);
        char name[64];
        snprintf(name, sizeof name, "finding-palette%d-past-end.png", depth);
        put("png", name, b->data, b->n);
    }
    /* ancillary chunks: skipped; a CRC error in one fails the item */
    for (int bad = 0; bad < 2; bad++) {
        png_start(b, 2, 2, 8, 2, 0);
        static const char text[] = "Comment\0fuzz";
        chunk(b, "tEXt", (const uint8_t *)text, sizeof text - 1);
        if (bad) b->data[b->n - 5] ^= 1;
        static const uint8_t g[4] = {0, 0, 0xB1, 0x8F};
        chunk(b, "gAMA", g, 4);
        size_t n;
        uint8_t *raw = raw_image(2, 2, 24, 0, 0xFF, &n);
        png_finish(b, raw, n);
        free(raw);
        put("png", bad ? "text-bad-crc.png" : "text.png", b->data, b->n);
    }
    free(b);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    out_dir = argv[1];
    jpeg_seeds();
    png_seeds();
    return 0;
}
