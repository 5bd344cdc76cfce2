/*
 * decode_impl.h — private to src/decode (and the decoder's tests): the
 * image decoder object that decode.c owns and jpeg.c / png.c fill in, and
 * the entry points of the JPEG fast paths (jpeg_rst.c: restart markers;
 * jpeg_huff.c: our Huffman decoder) with their hit counters.
 */
#ifndef NST_DECODE_DECODE_IMPL_H
#define NST_DECODE_DECODE_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "decode/decode.h"

/* jpeg.c's reusable libjpeg state (one jpeg_decompress_struct per decoder). */
typedef struct nst_jpeg nst_jpeg;

/* State of one libpng read. It lives in the decoder (not on the stack) so
 * that the fields the callbacks change before a png_error() longjmp are
 * well defined afterwards. */
typedef struct nst_png_io {
    const uint8_t *buf;
    size_t len, pos;
    int overrun;   /* the read callback ran past the end of the data */
    char msg[256]; /* libpng's error message                         */
} nst_png_io;

struct nst_decoder {
    uint64_t max_pixels;
    nst_buf out; /* RGB8 output (JPEG CMYK: 4 bytes/pixel, converted in
                       place), grow-only                                  */
    nst_jpeg *jpeg;
    nst_png_io png;
    int png_crc_off; /* tests/fuzz: CRC errors ignored (nst_png_crc_check) */
};

/* Limit check shared by both formats: zero dimension or w*h > max_pixels
 * gives E_TOO_MANY_PIXELS naming the path. */
int nst_decode_check_dims(const nst_decoder *d, uint32_t w, uint32_t h, const char *path,
                          const char *fmt);

/* Fill `out` for a full (unscaled, uncropped) decode held in d->out. */
void nst_decode_full_image(const nst_decoder *d, uint32_t w, uint32_t h, nst_image *out);

int nst_jpeg_create(nst_jpeg **out, uint64_t max_pixels);
void nst_jpeg_free(nst_jpeg *j);
int nst_jpeg_probe(nst_decoder *d, const uint8_t *buf, size_t len, const char *path,
                   nst_image_info *info);
int nst_jpeg_decode(nst_decoder *d, const uint8_t *buf, size_t len, const char *path,
                    const nst_window *roi, uint32_t out_w, uint32_t out_h, nst_image *out);

int nst_png_probe(nst_decoder *d, const uint8_t *buf, size_t len, const char *path,
                  nst_image_info *info);
int nst_png_decode(nst_decoder *d, const uint8_t *buf, size_t len, const char *path, nst_image *out);
/* Test hook (tests/fuzz/fuzz_png.c): on = 0 makes libpng ignore CRC
 * errors, so that mutated inputs reach the decoding behind the CRC check
 * (as libpng's own fuzz target does). Never off outside tests. */
void nst_png_crc_check(nst_decoder *d, int on);

/* ---- restart-marker fast path (jpeg_rst.c) ------------------------------ */

/* Scratch of the fast path; lives in jpeg.c's nst_jpeg. Grow-only. */
typedef struct nst_jpeg_rst {
    nst_buf stream; /* the rebuilt JPEG                              */
    nst_buf marks;  /* restart-interval offsets (size_t)             */
    uint64_t hits;  /* decodes that took the fast path (tests, stats) */
    int disabled;   /* tests: compare with the normal path           */
} nst_jpeg_rst;

/* What libjpeg parsed (jpeg.c fills it in after jpeg_read_header) and the
 * image rows and columns the region needs. */
typedef struct nst_jpeg_rst_geom {
    uint32_t width, height; /* image                                   */
    uint32_t mcu_w, mcu_h;  /* image columns / rows per MCU            */
    uint32_t mcus_per_row, mcu_rows;
    uint32_t restart_interval; /* in MCUs (DRI)                           */
    uint32_t row_lo, row_hi;   /* image rows [row_lo, row_hi) needed      */
    uint32_t col_lo, col_hi;   /* image columns [col_lo, col_hi) needed   */
} nst_jpeg_rst_geom;

typedef struct nst_jpeg_rst_out {
    const uint8_t *data; /* the rebuilt JPEG, in r->stream                  */
    size_t len;
    uint32_t first_row; /* image row of its first row (MCU-aligned)       */
    uint32_t height;    /* its height                                     */
    uint32_t first_col; /* image column of its first column (MCU-aligned) */
    uint32_t width;     /* its width                                      */
} nst_jpeg_rst_out;

/* Rebuild a JPEG of only the restart intervals holding rows
 * [row_lo, row_hi) (and, where each interval is k MCUs with k dividing the
 * MCUs per row, columns [col_lo, col_hi)) of a baseline, single-scan file
 * with a restart marker every whole number of MCU rows or every k MCUs.
 * 1: built (out filled); 0: not possible or no gain (nothing left out but
 * rows below the region): use the normal path. Never an error: damage is
 * left for libjpeg to find. */
int nst_jpeg_rst_build(nst_jpeg_rst *r, const uint8_t *buf, size_t len, const nst_jpeg_rst_geom *g,
                       nst_jpeg_rst_out *out);
void nst_jpeg_rst_free(nst_jpeg_rst *r);

/* Test hooks (jpeg.c): decodes that took the fast path so far, and turning
 * it off (on = 0) to compare with the normal path. */
uint64_t nst_jpeg_rst_hits(const nst_decoder *d);
void nst_jpeg_rst_enable(nst_decoder *d, int on);

/* Test hooks (jpeg.c): scans our Huffman decoder (jpeg_huff.c) has decoded
 * so far, and turning it off (on = 0) to compare with libjpeg's. */
uint64_t nst_jpeg_huff_hits(const nst_decoder *d);
void nst_jpeg_huff_enable(nst_decoder *d, int on);
/* Test hook: our Huffman decoder's plain build (plain = 1) even on a CPU
 * with BMI2, as NOSTALL_NO_BMI2=1 does for a whole process. */
void nst_jpeg_huff_plain(nst_decoder *d, int plain);
/* Test hook: allocations libjpeg's permanent pool has made for this
 * decoder's decompressor since the first file (tables: at most 4
 * quantization and 8 Huffman tables, however many files). */
uint64_t nst_jpeg_permanent_allocs(const nst_decoder *d);
/* Test hook (tests/fuzz/fuzz_jpeg_diff.c): the quantized DCT coefficients
 * of a JPEG as jpeg_read_coefficients() gives them (read by our Huffman
 * decoder for single-scan files unless nst_jpeg_huff_enable(d, 0)), every
 * block of every component, component by component and row by row, into
 * out as JCOEF (int16); *n of them. 0, or the status of the error or of
 * the first warning a decode would fail on, with *code libjpeg's message
 * code (JERR_* / JWRN_*) and msg its text. lenient: such warnings do not
 * stop the read (libjpeg goes on as it does by default: zeros for what it
 * could not decode), so out holds every coefficient even then. */
int nst_jpeg_coefficients(nst_decoder *d, const uint8_t *buf, size_t len, int lenient, nst_buf *out,
                          size_t *n, int *code, char *msg, size_t msg_size);

#endif
