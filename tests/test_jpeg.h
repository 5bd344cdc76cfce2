/*
 * test_jpeg.h — helpers shared by the decoder tests: a reproducible
 * xorshift64* generator and a JPEG encoder over libjpeg's compressor (into
 * memory). Each test keeps its own pixel content and seed.
 */
#ifndef NOSTALL_TEST_JPEG_H
#define NOSTALL_TEST_JPEG_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

/* xorshift64*: a fixed seed gives a fixed sequence. */
static inline uint32_t test_xorshift(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return (uint32_t)((*s * 0x2545F4914F6CDD1Dull) >> 32);
}

typedef struct test_jpeg_opts {
    int w, h, comps; /* input components: 1, 3, 4 */
    J_COLOR_SPACE in_cs;
    J_COLOR_SPACE jpeg_cs; /* JCS_UNKNOWN: libjpeg's default for in_cs */
    int quality, progressive, restart_rows, no_adobe;
} test_jpeg_opts;

/* Layout beyond libjpeg's defaults: sampling factors of component 0 (luma)
 * and of component 3 (K of YCCK), 0 = default; a restart marker every
 * restart_mcus MCUs (0 = none; restart_rows in the options wins); a
 * progressive scan script of nscans scans (NULL = none; libjpeg checks it
 * is valid, not that it is complete); optimize: Huffman tables fitted to
 * the image (libjpeg's optimize_coding) instead of the standard ones;
 * arith: arithmetic coding instead of Huffman; no_jfif: no JFIF APP0
 * marker. */
typedef struct test_jpeg_layout {
    int luma_h, luma_v, k_h, k_v, restart_mcus;
    const jpeg_scan_info *scans;
    int nscans;
    int optimize;
    int arith, no_jfif;
} test_jpeg_layout;

/* The encoded bytes (malloc'd, *len set). */
static inline uint8_t *test_jpeg_encode_ex(const uint8_t *px, const test_jpeg_opts *o,
                                           const test_jpeg_layout *l, size_t *len)
{
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr err;
    unsigned char *mem = NULL;
    unsigned long mlen = 0;
    c.err = jpeg_std_error(&err);
    jpeg_create_compress(&c);
    jpeg_mem_dest(&c, &mem, &mlen);
    c.image_width = (JDIMENSION)o->w;
    c.image_height = (JDIMENSION)o->h;
    c.input_components = o->comps;
    c.in_color_space = o->in_cs;
    jpeg_set_defaults(&c);
    if (o->jpeg_cs != JCS_UNKNOWN) jpeg_set_colorspace(&c, o->jpeg_cs);
    if (o->no_adobe) c.write_Adobe_marker = FALSE;
    jpeg_set_quality(&c, o->quality, TRUE);
    if (l) {
        if (l->luma_h) c.comp_info[0].h_samp_factor = l->luma_h;
        if (l->luma_v) c.comp_info[0].v_samp_factor = l->luma_v;
        if (l->k_h) c.comp_info[3].h_samp_factor = l->k_h;
        if (l->k_v) c.comp_info[3].v_samp_factor = l->k_v;
    }
    if (o->progressive) jpeg_simple_progression(&c);
    if (l && l->optimize) c.optimize_coding = TRUE;
    if (l && l->arith) c.arith_code = TRUE;
    if (l && l->no_jfif) c.write_JFIF_header = FALSE;
    if (l && l->scans) {
        c.scan_info = l->scans;
        c.num_scans = l->nscans;
    }
    if (o->restart_rows)
        c.restart_in_rows = o->restart_rows;
    else if (l && l->restart_mcus)
        c.restart_interval = (unsigned)l->restart_mcus;
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = (JSAMPROW)(px + (size_t)c.next_scanline * o->w * o->comps);
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    uint8_t *out = malloc(mlen);
    memcpy(out, mem, mlen);
    free(mem);
    *len = mlen;
    return out;
}

static inline uint8_t *test_jpeg_encode(const uint8_t *px, const test_jpeg_opts *o, size_t *len)
{
    return test_jpeg_encode_ex(px, o, NULL, len);
}

#endif
