/*
 * image.h — the pixels that pass from decode to augment: a decoded image
 * (RGB8 rows, and where they lie in the full image when a decoder produced
 * only a window of it, possibly DCT-scaled) and a window of an image in
 * source pixel coordinates. Room: common/ (types every stage shares); the
 * decoders fill them (decode/decode.h), the augment stage reads them
 * (augment/augment.h), so neither includes the other.
 */
#ifndef NST_COMMON_IMAGE_H
#define NST_COMMON_IMAGE_H

#include <stddef.h>
#include <stdint.h>

/* A window of the full image in source pixel coordinates (may be fractional). */
typedef struct nst_window {
    double x, y, w, h;
} nst_window;

typedef struct nst_image {
    const uint8_t *data;    /* RGB8, owned by the decoder, valid until its next call */
    uint32_t width, height; /* of `data`                                   */
    size_t stride;          /* bytes per row of `data`                     */
    /* Where `data` lies: the full image decoded at scale scale_num/scale_den
     * would be full_width x full_height pixels; data's pixel (0,0) is pixel
     * (x0, y0) of that scaled full image. Full decode: 0, 0, 1/1. */
    uint32_t x0, y0;
    uint32_t scale_num, scale_den;
    uint32_t full_width, full_height; /* scaled full image                   */
    uint32_t src_width, src_height;   /* the file's own dimensions           */
} nst_image;

#endif
