/*
 * test_huff.c — nostall's Huffman decoder (src/decode/jpeg_huff.c) against
 * libjpeg-turbo's own on the same files: two decoders, one with ours
 * turned off (nst_jpeg_huff_enable).
 *
 *   exactness  gray; 4:4:4, 4:2:2, 4:2:0, 4:4:0, 4:1:1, 3x1 and 4x2 luma
 *              sampling (10 blocks per MCU, the most libjpeg takes); CMYK
 *              as YCCK; qualities 30 to 100 on noisy content (magnitudes
 *              up to 11 bits, codes up to 16 bits); standard and optimized
 *              tables (so the table cache sees many tables and evicts);
 *              restart markers every MCU, every 3 MCUs and every MCU row;
 *              sizes from 1x1 up: the full decode and random rois at every
 *              DCT scale (rows skipped above, MCU columns beside, AC
 *              terms left out at 1/8), with and without the restart-marker
 *              fast path, give the same bytes both ways, and ours ran
 *              (its scan counter).
 *   transcode  nst_decode_transcode() (the cache_transcode rewrite) reads
 *              the coefficients with ours: the same bytes as with libjpeg's.
 *   declined   progressive and multi-scan sequential files keep libjpeg's
 *              decoder (the counter does not move), same bytes.
 *   damage     an invalid Huffman code is E_CORRUPT (libjpeg-turbo's fast
 *              path would decode it as 0 and go on); a scan cut short is
 *              E_TRUNCATED, also when the cut is inside a restart
 *              interval; 8 or more bytes left before a restart marker (fewer
 *              are dropped, as libjpeg drops them: same pixels), a wrong
 *              restart number, a missing restart marker, a junk marker in
 *              its place and a DRI segment without restart markers in the
 *              data are E_CORRUPT (with libjpeg-turbo's decoder too); so
 *              is FF FF 00 in the data (libjpeg-turbo mixes two readings).
 *   fuzz       mutated files (byte flips, runs of 0xFF, cuts), full and
 *              region decodes: no crash (ASan in `make test`), the same
 *              answer twice, and whenever both decoders succeed, the same
 *              pixels.
 * Exactness and damage run a second time on the build without BMI2
 * (NOSTALL_NO_BMI2=1), which CPUs with BMI2 otherwise never run.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#include "check.h"
#include "test_jpeg.h"
#include "common/rng.h"
#include "decode/decode.h"
#include "decode/decode_impl.h"

static uint64_t noise_s = 0x243F6A8885A308D3ull;
static uint32_t noise(void) { return test_xorshift(&noise_s); }

enum { L_GRAY, L_444, L_422, L_420, L_440, L_411, L_31, L_42, L_CMYK, L_COUNT };
static const char *layout_name[] = {"gray",  "4:4:4", "4:2:2", "4:2:0", "4:4:0",
                                    "4:1:1", "3x1",   "4x2",   "cmyk"};
static const int luma_hv[][2] = {{1, 1}, {1, 1}, {2, 1}, {2, 2}, {1, 2},
                                 {4, 1}, {3, 1}, {4, 2}, {2, 2}};

typedef struct spec {
    int w, h, layout, quality, optimize, progressive;
    int restart; /* > 0: every `restart` MCU rows; < 0: every -restart MCUs */
    int grain;   /* noise amplitude: more gives larger coefficients        */
} spec;

static uint8_t *encode(const spec *s, size_t *len)
{
    const int comps = s->layout == L_GRAY ? 1 : s->layout == L_CMYK ? 4 : 3;
    uint8_t *px = malloc((size_t)s->w * s->h * comps);
    for (int y = 0; y < s->h; y++)
        for (int x = 0; x < s->w; x++)
            for (int c = 0; c < comps; c++) {
                int v = (x * (2 + c)) / 3 + (y * (4 - c)) / 2 + ((x / 9 + y / 7) % 2) * 70;
                if (s->grain) v += (int)(noise() % (unsigned)s->grain);
                px[((size_t)y * s->w + x) * comps + c] = (uint8_t)(v & 255);
            }
    test_jpeg_opts o = {s->w,
                        s->h,
                        comps,
                        comps == 1   ? JCS_GRAYSCALE
                        : comps == 4 ? JCS_CMYK
                                     : JCS_RGB,
                        s->layout == L_CMYK ? JCS_YCCK : JCS_UNKNOWN,
                        s->quality,
                        s->progressive,
                        s->restart > 0 ? s->restart : 0,
                        0};
    test_jpeg_layout l = {.luma_h = luma_hv[s->layout][0],
                          .luma_v = luma_hv[s->layout][1],
                          .restart_mcus = s->restart < 0 ? -s->restart : 0,
                          .optimize = s->optimize};
    uint8_t *out = test_jpeg_encode_ex(px, &o, &l, len);
    free(px);
    return out;
}

/* Same result from both: the same status and, on success, the same
 * geometry and bytes. Returns 1 if both succeeded. */
static int same(const char *what, int rc_a, const nst_image *a, int rc_b, const nst_image *b)
{
    if (rc_a != rc_b) {
        fprintf(stderr, "  %s: own decoder %d (%s), libjpeg's %d\n", what, rc_a,
                nostall_status_name(rc_a), rc_b);
        check_failures_++;
        return 0;
    }
    if (rc_a < 0) return 0;
    CHECK(a->width == b->width && a->height == b->height && a->x0 == b->x0 && a->y0 == b->y0 &&
          a->scale_den == b->scale_den && a->stride == b->stride);
    if (a->width != b->width || a->height != b->height || a->stride != b->stride) return 0;
    long diff = 0;
    for (uint32_t y = 0; y < a->height; y++)
        diff += memcmp(a->data + y * a->stride, b->data + y * b->stride, a->width * 3u) != 0;
    if (diff) {
        fprintf(stderr, "  %s: %ld rows differ\n", what, diff);
        check_failures_++;
    }
    return 1;
}

static void random_roi(nst_rng *r, int w, int h, nst_window *roi, uint32_t *ow, uint32_t *oh)
{
    double fw = 0.03 + 0.97 * nst_rng_double(r), fh = 0.03 + 0.97 * nst_rng_double(r);
    roi->w = fw * w;
    roi->h = fh * h;
    roi->x = nst_rng_double(r) * (w - roi->w);
    roi->y = nst_rng_double(r) * (h - roi->h);
    static const uint32_t sizes[] = {4, 8, 16, 32, 64, 224};
    *ow = sizes[nst_rng_u64(r) % 6];
    *oh = nst_rng_u64(r) % 4 == 0 ? sizes[nst_rng_u64(r) % 6] : *ow;
}

/* Full decode plus `rois` random regions, both decoders; the region ones
 * with the restart-marker fast path on and off. The pixels of the second
 * decoder's image are copied before the first decoder runs again. */
static void compare_file(nst_decoder *own, nst_decoder *lj, const uint8_t *buf, size_t len,
                         const char *what, int rois, uint64_t seed)
{
    nst_image a, b;
    int rb = nst_decode(lj, buf, len, what, NULL, 0, 0, &b);
    int ra = nst_decode(own, buf, len, what, NULL, 0, 0, &a);
    same(what, ra, &a, rb, &b);
    nst_rng r;
    nst_rng_seed(&r, seed);
    int w = 0, h = 0;
    nst_image_info info;
    if (nst_decode_probe(own, buf, len, what, &info) == 0) {
        w = (int)info.width;
        h = (int)info.height;
    }
    if (w == 0) return;
    for (int i = 0; i < rois; i++) {
        nst_window roi;
        uint32_t ow, oh;
        random_roi(&r, w, h, &roi, &ow, &oh);
        const int rst = i % 2;
        nst_jpeg_rst_enable(own, rst);
        nst_jpeg_rst_enable(lj, rst);
        rb = nst_decode(lj, buf, len, what, &roi, ow, oh, &b);
        ra = nst_decode(own, buf, len, what, &roi, ow, oh, &a);
        char label[256];
        snprintf(label, sizeof label, "%s roi %.1f,%.1f %.1fx%.1f -> %ux%u rst %d", what, roi.x,
                 roi.y, roi.w, roi.h, ow, oh, rst);
        same(label, ra, &a, rb, &b);
    }
    nst_jpeg_rst_enable(own, 1);
    nst_jpeg_rst_enable(lj, 1);
}

static void exactness(nst_decoder *own, nst_decoder *lj)
{
    static const struct {
        int w, h;
    } sizes[] = {{1, 1}, {7, 9}, {17, 33}, {97, 61}, {333, 517}, {470, 425}, {640, 8}, {9, 300}};
    static const int qualities[] = {30, 75, 95, 100};
    static const int restarts[] = {0, -1, -3, 1};
    int n = 0;
    for (int layout = 0; layout < L_COUNT; layout++)
        for (unsigned si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            /* each layout x size once per quality / table / restart choice,
             * cycled so that every combination of two of them occurs */
            const int q = qualities[(layout + si) % 4];
            const int rst = restarts[(layout * 3 + si) % 4];
            const int opt = (layout + 2 * si) % 3 == 0;
            spec s = {sizes[si].w, sizes[si].h, layout, q, opt, 0, rst, q >= 95 ? 160 : 40};
            size_t len;
            uint8_t *buf = encode(&s, &len);
            char what[128];
            snprintf(what, sizeof what, "%s %dx%d q%d%s rst %d", layout_name[layout], s.w, s.h, q,
                     opt ? " optimized" : "", rst);
            const uint64_t scans = nst_jpeg_huff_hits(own);
            compare_file(own, lj, buf, len, what, s.w * s.h > 100 ? 24 : 4, (uint64_t)n * 7919 + 1);
            if (nst_jpeg_huff_hits(own) == scans) {
                fprintf(stderr, "  %s: our decoder did not run\n", what);
                check_failures_++;
            }
            CHECK_EQ(nst_jpeg_huff_hits(lj), 0);
            free(buf);
            n++;
        }
    printf("exactness: %d files, %llu scans by our decoder\n", n,
           (unsigned long long)nst_jpeg_huff_hits(own));
}

/* nst_decode_transcode() reads the coefficients with our decoder too: the
 * same rewrite, byte for byte, as with libjpeg's. */
static void transcode(nst_decoder *own, nst_decoder *lj)
{
    nst_buf a = {0}, b = {0};
    for (int layout = L_GRAY; layout <= L_440; layout++) {
        spec s = {227, 181, layout, 93, layout % 2, 0, 0, 60};
        size_t len, la = 0, lb = 0;
        uint8_t *buf = encode(&s, &len);
        const uint64_t scans = nst_jpeg_huff_hits(own);
        CHECK_EQ(nst_decode_transcode(own, buf, len, &a, &la), 1);
        CHECK_EQ(nst_jpeg_huff_hits(own), scans + 1);
        CHECK_EQ(nst_decode_transcode(lj, buf, len, &b, &lb), 1);
        CHECK(la == lb && memcmp(a.data, b.data, la) == 0);
        free(buf);
    }
    nst_buf_free(&a);
    nst_buf_free(&b);
}

static void declined(nst_decoder *own, nst_decoder *lj)
{
    spec s = {200, 150, L_420, 90, 0, 1, 0, 40};
    size_t len;
    uint8_t *buf = encode(&s, &len);
    uint64_t scans = nst_jpeg_huff_hits(own);
    compare_file(own, lj, buf, len, "progressive", 6, 5);
    CHECK_EQ(nst_jpeg_huff_hits(own), scans);
    free(buf);

    /* sequential, one component per scan */
    static const jpeg_scan_info script[] = {{1, {0}, 0, 63, 0, 0},
                                            {1, {1}, 0, 63, 0, 0},
                                            {1, {2}, 0, 63, 0, 0}};
    const int w = 120, h = 90;
    uint8_t *px = malloc((size_t)w * h * 3);
    for (int i = 0; i < w * h * 3; i++) px[i] = (uint8_t)(i * 7 + (int)(noise() % 30));
    test_jpeg_opts o = {w, h, 3, JCS_RGB, JCS_UNKNOWN, 90, 0, 0, 0};
    test_jpeg_layout l = {.scans = script, .nscans = 3};
    buf = test_jpeg_encode_ex(px, &o, &l, &len);
    scans = nst_jpeg_huff_hits(own);
    compare_file(own, lj, buf, len, "multi-scan sequential", 6, 6);
    CHECK_EQ(nst_jpeg_huff_hits(own), scans);
    free(buf);
    free(px);
}

/* Offset of the first entropy-coded byte (after the SOS segment). */
static size_t scan_start(const uint8_t *b, size_t len)
{
    for (size_t p = 2; p + 4 <= len;) {
        if (b[p] != 0xFF) return 0;
        const uint8_t m = b[p + 1];
        const size_t seg = (size_t)b[p + 2] << 8 | b[p + 3];
        if (m == 0xDA) return p + 2 + seg;
        p += 2 + seg;
    }
    return 0;
}

/* The n-th RSTm marker at or after `from` (offset of its 0xFF), 0 if none. */
static size_t find_rst(const uint8_t *b, size_t len, size_t from, int n)
{
    for (size_t p = from; p + 1 < len; p++)
        if (b[p] == 0xFF && b[p + 1] >= 0xD0 && b[p + 1] <= 0xD7 && n-- == 0) return p;
    return 0;
}

static void expect_status(nst_decoder *own, const uint8_t *buf, size_t len, int want,
                          const char *what)
{
    nst_image img;
    const uint64_t scans = nst_jpeg_huff_hits(own);
    const int rc = nst_decode(own, buf, len, what, NULL, 0, 0, &img);
    if (rc != want) {
        fprintf(stderr, "  %s: got %d (%s), want %s: %s\n", what, rc, nostall_status_name(rc),
                nostall_status_name(want), nostall_last_error());
        check_failures_++;
    } else if (rc < 0 && !strstr(nostall_last_error(), what)) {
        fprintf(stderr, "  %s: message does not name the file: %s\n", what, nostall_last_error());
        check_failures_++;
    }
    CHECK(nst_jpeg_huff_hits(own) == scans + 1); /* ours ran */
}

/* expect_status() for our decoder, and libjpeg-turbo's says the same. */
static void expect_both(nst_decoder *own, nst_decoder *lj, const uint8_t *buf, size_t len, int want,
                        const char *what)
{
    nst_image img;
    const int rc = nst_decode(lj, buf, len, what, NULL, 0, 0, &img);
    if (rc != want)
        fprintf(stderr, "  %s: libjpeg's decoder: got %d, want %d: %s\n", what, rc, want,
                nostall_last_error());
    CHECK_EQ(rc, want);
    expect_status(own, buf, len, want, what);
}

static void damage(nst_decoder *own, nst_decoder *lj)
{
    spec s = {160, 120, L_420, 92, 0, 0, 0, 60};
    size_t len;
    uint8_t *buf = encode(&s, &len);
    const size_t sos = scan_start(buf, len);
    CHECK(sos > 0 && sos + 100 < len);

    /* 64 one bits (stuffed 0xFF bytes) in mid-scan: an invalid code */
    uint8_t *bad = malloc(len + 16);
    const size_t mid = sos + (len - sos) / 2;
    memcpy(bad, buf, mid);
    for (int i = 0; i < 8; i++) {
        bad[mid + 2 * i] = 0xFF;
        bad[mid + 2 * i + 1] = 0x00;
    }
    memcpy(bad + mid + 16, buf + mid, len - mid);
    expect_status(own, bad, len + 16, NOSTALL_E_CORRUPT, "bad-code.jpg");

    /* cut inside the scan */
    expect_status(own, buf, sos + (len - sos) * 2 / 3, NOSTALL_E_TRUNCATED, "cut.jpg");

    /* a data byte 0xFF written FF FF 00 (a fill byte before the stuffed
     * zero: not allowed; libjpeg-turbo reads it one way in its slow path
     * and another in its fast path, and mixes the two) */
    {
        size_t at = mid;
        while (at + 1 < len && !(buf[at] == 0xFF && buf[at + 1] == 0x00)) at++;
        CHECK(at + 1 < len);
        uint8_t *ff = malloc(len + 1);
        memcpy(ff, buf, at + 1);
        ff[at + 1] = 0xFF;
        memcpy(ff + at + 2, buf + at + 1, len - at - 1);
        expect_status(own, ff, len + 1, NOSTALL_E_CORRUPT, "fill-ff-00.jpg");
        CHECK(strstr(nostall_last_error(), "fill bytes before a stuffed zero") != NULL);
        free(ff);
    }
    free(bad);
    free(buf);

    /* restart markers every MCU */
    spec r = {160, 120, L_420, 92, 0, 0, -1, 60};
    buf = encode(&r, &len);
    const size_t rsos = scan_start(buf, len);
    const size_t m5 = find_rst(buf, len, rsos, 5);
    CHECK(m5 > rsos);
    bad = malloc(len);

    /* bytes between an interval's data and its restart marker: a few are
     * dropped (libjpeg's read-ahead drops them too), more are damage */
    nst_image ref, img;
    CHECK_OK(nst_decode(own, buf, len, "rst.jpg", NULL, 0, 0, &ref));
    uint8_t *refpx = malloc((size_t)ref.height * ref.stride);
    memcpy(refpx, ref.data, (size_t)ref.height * ref.stride);
    for (size_t extra = 1; extra <= 12; extra++) {
        uint8_t *pad = malloc(len + extra);
        memcpy(pad, buf, m5);
        memset(pad + m5, 0x5A, extra);
        memcpy(pad + m5 + extra, buf + m5, len - m5);
        if (extra < 8) {
            CHECK_OK(nst_decode(own, pad, len + extra, "pad.jpg", NULL, 0, 0, &img));
            CHECK(img.height == ref.height &&
                  memcmp(img.data, refpx, (size_t)ref.height * ref.stride) == 0);
        } else {
            expect_status(own, pad, len + extra, NOSTALL_E_CORRUPT, "extra-bytes.jpg");
        }
        free(pad);
    }
    free(refpx);

    /* a wrong restart number (RST5 is due; say RST7) */
    memcpy(bad, buf, len);
    bad[m5 + 1] = 0xD7;
    expect_status(own, bad, len, NOSTALL_E_CORRUPT, "wrong-rst.jpg");

    /* a missing restart marker */
    memcpy(bad, buf, m5);
    memcpy(bad + m5, buf + m5 + 2, len - m5 - 2);
    expect_status(own, bad, len - 2, NOSTALL_E_CORRUPT, "missing-rst.jpg");

    /* cut inside an interval */
    expect_status(own, buf, m5 - 3, NOSTALL_E_TRUNCATED, "cut-rst.jpg");

    /* a junk marker in place of RST5, alone or after 10 junk bytes
     * (libjpeg-turbo: "10 extraneous bytes before marker 0xe3", benign
     * alone, then "found marker 0xe3 instead of RST5") */
    for (size_t junk = 0; junk <= 10; junk += 10) {
        uint8_t *jm = malloc(len + junk);
        memcpy(jm, buf, m5);
        memset(jm + m5, 0x3C, junk);
        memcpy(jm + m5 + junk, buf + m5, len - m5);
        jm[m5 + junk + 1] = 0xE3;
        expect_both(own, lj, jm, len + junk, NOSTALL_E_CORRUPT, "junk-marker.jpg");
        free(jm);
    }
    free(bad);
    free(buf);

    /* a restart interval (DRI) but no restart markers in the data:
     * libjpeg-turbo says "found marker 0xd9 instead of RST0" */
    static const int intervals[] = {1, 7, 40}; /* of the 80 MCUs */
    for (size_t iv = 0; iv < sizeof intervals / sizeof intervals[0]; iv++) {
        const int mcus = intervals[iv];
        spec p = {160, 120, L_420, 92, 0, 0, 0, 60};
        buf = encode(&p, &len);
        const size_t dsos = scan_start(buf, len);
        size_t at = 2;
        while (buf[at + 1] != 0xDA) at += 2 + ((size_t)buf[at + 2] << 8 | buf[at + 3]);
        CHECK(dsos > at);
        uint8_t *dri = malloc(len + 6);
        memcpy(dri, buf, at);
        const uint8_t seg[6] = {0xFF, 0xDD, 0x00, 0x04, (uint8_t)(mcus >> 8), (uint8_t)mcus};
        memcpy(dri + at, seg, 6);
        memcpy(dri + at + 6, buf + at, len - at);
        expect_both(own, lj, dri, len + 6, NOSTALL_E_CORRUPT, "dri-without-rst.jpg");
        /* a region at the top: when the first restart is due inside it
         * (not after 40 MCUs, below it: not seen, as damage there) */
        const nst_window roi = {10, 4, 60, 40};
        CHECK_RC(nst_decode(own, dri, len + 6, "dri-without-rst.jpg", &roi, 32, 32, &img),
                 mcus < 10 ? NOSTALL_E_CORRUPT : 0);
        free(dri);
        free(buf);
    }
}

static void fuzz(nst_decoder *own, nst_decoder *lj)
{
    nst_rng r;
    nst_rng_seed(&r, 77);
    uint8_t *bases[4];
    size_t lens[4];
    const spec specs[4] = {{150, 110, L_420, 90, 0, 0, 0, 40},
                           {150, 110, L_420, 95, 1, 0, -1, 80},
                           {99, 130, L_GRAY, 75, 0, 0, 2, 40},
                           {80, 64, L_CMYK, 90, 1, 0, 0, 40}};
    for (int i = 0; i < 4; i++) bases[i] = encode(&specs[i], &lens[i]);
    int both_ok = 0, own_fail = 0;
    const int rounds = 600;
    for (int i = 0; i < rounds; i++) {
        const int k = i % 4;
        size_t len = lens[k];
        uint8_t *buf = malloc(len);
        memcpy(buf, bases[k], len);
        const size_t sos = scan_start(buf, len);
        const int kind = (int)(nst_rng_u64(&r) % 3);
        const int edits = 1 + (int)(nst_rng_u64(&r) % 4);
        for (int e = 0; e < edits; e++) {
            const size_t at = sos + nst_rng_u64(&r) % (len - sos);
            if (kind == 0)
                buf[at] ^= (uint8_t)(1u << (nst_rng_u64(&r) % 8));
            else if (kind == 1)
                buf[at] = 0xFF;
            else
                len = at > sos ? at : len;
        }
        char what[64];
        snprintf(what, sizeof what, "fuzz-%d.jpg", i);
        nst_image a, b;
        nst_window roi;
        uint32_t ow, oh;
        random_roi(&r, specs[k].w, specs[k].h, &roi, &ow, &oh);
        const nst_window *rp = i % 2 ? &roi : NULL;
        const int rb = nst_decode(lj, buf, len, what, rp, ow, oh, &b);
        const int ra = nst_decode(own, buf, len, what, rp, ow, oh, &a);
        nst_image a2;
        const int ra2 = nst_decode(own, buf, len, what, rp, ow, oh, &a2);
        CHECK_EQ(ra, ra2);
        if (ra == 0 && rb == 0) {
            /* libjpeg may have failed where we succeed (its read-ahead hit
             * the cut) and we may fail where it decoded damage as zeros;
             * when both succeed they must agree */
            both_ok++;
            same(what, 0, &a2, 0, &b);
        }
        if (ra < 0) own_fail++;
        free(buf);
    }
    for (int i = 0; i < 4; i++) free(bases[i]);
    printf("fuzz: %d files, both decoded %d, ours refused %d\n", rounds, both_ok, own_fail);
    CHECK(both_ok > 0 && own_fail > 0);
}

int main(void)
{
    nst_decoder *own, *lj;
    CHECK_OK(nst_decoder_create(&own, 1u << 26));
    CHECK_OK(nst_decoder_create(&lj, 1u << 26));
    nst_jpeg_huff_enable(own, 1);
    nst_jpeg_huff_enable(lj, 0);
    {
        /* a build without jpegint.h (CMakeLists.txt) has libjpeg's only */
        spec s = {64, 48, L_420, 90, 0, 0, 0, 20};
        size_t len;
        uint8_t *buf = encode(&s, &len);
        nst_image img;
        CHECK_OK(nst_decode(own, buf, len, "probe.jpg", NULL, 0, 0, &img));
        free(buf);
        if (nst_jpeg_huff_hits(own) == 0 && check_failures_ == 0) {
            printf("skip: built without our Huffman decoder (no jpegint.h)\n");
            nst_decoder_free(own);
            nst_decoder_free(lj);
            return 77;
        }
    }
    exactness(own, lj);
    transcode(own, lj);
    declined(own, lj);
    damage(own, lj);
    fuzz(own, lj);
    nst_decoder_free(own);
    /* The build without BMI2 (chosen per decoder, at its first attach): the
     * same coefficients and the same verdicts on damage. */
    setenv("NOSTALL_NO_BMI2", "1", 1);
    CHECK_OK(nst_decoder_create(&own, 1u << 26));
    nst_jpeg_huff_enable(own, 1);
    exactness(own, lj);
    damage(own, lj);
    unsetenv("NOSTALL_NO_BMI2");
    nst_decoder_free(own);
    nst_decoder_free(lj);
    TEST_EXIT();
}
