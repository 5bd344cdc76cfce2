/*
 * decode_impl.h — private to src/decode: the decoder object that decode.c
 * owns and jpeg.c / png.c fill in. Nothing outside src/decode includes it.
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
    nst_buf out;    /* RGB8 output (JPEG CMYK: 4 bytes/pixel, converted in
                       place), grow-only                                  */
    nst_jpeg *jpeg;
    nst_png_io png;
};

/* Limit check shared by both formats: zero dimension or w*h > max_pixels
 * gives E_TOO_MANY_PIXELS naming the path. */
int nst_decode_check_dims(const nst_decoder *d, uint32_t w, uint32_t h,
                          const char *path, const char *fmt);

/* Fill `out` for a full (unscaled, uncropped) decode held in d->out. */
void nst_decode_full_image(const nst_decoder *d, uint32_t w, uint32_t h,
                           nst_image *out);

int nst_jpeg_create(nst_jpeg **out, uint64_t max_pixels);
void nst_jpeg_free(nst_jpeg *j);
int nst_jpeg_probe(nst_decoder *d, const uint8_t *buf, size_t len,
                   const char *path, nst_image_info *info);
int nst_jpeg_decode(nst_decoder *d, const uint8_t *buf, size_t len,
                    const char *path, const nst_window *roi, uint32_t out_w,
                    uint32_t out_h, nst_image *out);

int nst_png_probe(nst_decoder *d, const uint8_t *buf, size_t len,
                  const char *path, nst_image_info *info);
int nst_png_decode(nst_decoder *d, const uint8_t *buf, size_t len,
                   const char *path, nst_image *out);

#endif
