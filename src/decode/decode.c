/*
 * decode.c — the decoder object and format dispatch.
 *
 * A decoder belongs to one worker thread: it owns the reusable libjpeg state
 * (jpeg.c), the libpng I/O state (png.c) and a grow-only RGB8 output buffer,
 * so that decoding a stream of images allocates nothing once the buffer has
 * reached the largest image. The format is chosen by magic bytes only (never
 * by file name). Decoders of different threads share nothing; there is no
 * static mutable state in this module.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "decode/decode_impl.h"

static const uint8_t jpeg_magic[3] = {0xFF, 0xD8, 0xFF};
static const uint8_t png_magic[8] = {0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A};

int nst_decoder_create(nst_decoder **out, uint64_t max_pixels)
{
    if (!out) return nst_error(NOSTALL_E_INVALID, "nst_decoder_create: out is NULL");
    *out = NULL;
    if (max_pixels == 0) return nst_error(NOSTALL_E_INVALID, "nst_decoder_create: max_pixels is 0");
    nst_decoder *d = calloc(1, sizeof *d);
    if (!d) return nst_error(NOSTALL_E_NOMEM, "nst_decoder_create: out of memory");
    d->max_pixels = max_pixels;
    int rc = nst_jpeg_create(&d->jpeg, max_pixels);
    if (rc < 0) {
        free(d);
        return rc;
    }
    *out = d;
    return 0;
}

void nst_decoder_free(nst_decoder *d)
{
    if (!d) return;
    nst_jpeg_free(d->jpeg);
    nst_buf_free(&d->out);
    free(d);
}

int nst_decode_check_dims(const nst_decoder *d, uint32_t w, uint32_t h, const char *path,
                          const char *fmt)
{
    if (w == 0 || h == 0)
        return nst_error(NOSTALL_E_TOO_MANY_PIXELS, "decode: %s: %s has a zero dimension (%ux%u)",
                         path, fmt, (unsigned)w, (unsigned)h);
    if (w > NST_DECODE_MAX_SIDE || h > NST_DECODE_MAX_SIDE)
        return nst_error(NOSTALL_E_TOO_MANY_PIXELS,
                         "decode: %s: %s is %ux%u, over the longest side decoded "
                         "(%u pixels, the most the resampler takes)",
                         path, fmt, (unsigned)w, (unsigned)h, (unsigned)NST_DECODE_MAX_SIDE);
    /* uint32 * uint32 fits in uint64. */
    uint64_t px = (uint64_t)w * (uint64_t)h;
    if (px > d->max_pixels)
        return nst_error(NOSTALL_E_TOO_MANY_PIXELS,
                         "decode: %s: %s is %ux%u = %llu pixels, over max_pixels %llu", path, fmt,
                         (unsigned)w, (unsigned)h, (unsigned long long)px,
                         (unsigned long long)d->max_pixels);
    return 0;
}

void nst_decode_full_image(const nst_decoder *d, uint32_t w, uint32_t h, nst_image *out)
{
    memset(out, 0, sizeof *out);
    out->data = d->out.data;
    out->width = w;
    out->height = h;
    out->stride = (size_t)w * 3;
    out->x0 = 0;
    out->y0 = 0;
    out->scale_num = 1;
    out->scale_den = 1;
    out->full_width = w;
    out->full_height = h;
    out->src_width = w;
    out->src_height = h;
}

/* Which format `buf` is, or a status with the message set. */
static int sniff(const uint8_t *buf, size_t len, const char *path, int *format)
{
    if (len == 0) return nst_error(NOSTALL_E_EMPTY, "decode: %s: empty file", path);
    if (len >= sizeof jpeg_magic && memcmp(buf, jpeg_magic, sizeof jpeg_magic) == 0) {
        *format = NST_FORMAT_JPEG;
        return 0;
    }
    if (len >= sizeof png_magic && memcmp(buf, png_magic, sizeof png_magic) == 0) {
        *format = NST_FORMAT_PNG;
        return 0;
    }
    char hex[16] = "";
    size_t n = len < 4 ? len : 4, o = 0;
    for (size_t i = 0; i < n; i++)
        o += (size_t)snprintf(hex + o, sizeof hex - o, "%s%02x", i ? " " : "", (unsigned)buf[i]);
    return nst_error(NOSTALL_E_NOT_IMAGE, "decode: %s: not a JPEG or PNG (starts with '%s')", path,
                     hex);
}

int nst_decode_probe(nst_decoder *d, const uint8_t *buf, size_t len, const char *path,
                     nst_image_info *info)
{
    if (!path) path = "(memory)";
    if (!d || !info || (!buf && len))
        return nst_error(NOSTALL_E_INVALID, "decode: %s: invalid argument", path);
    memset(info, 0, sizeof *info);
    int format = NST_FORMAT_UNKNOWN;
    int rc = sniff(buf, len, path, &format);
    if (rc < 0) return rc;
    if (format == NST_FORMAT_JPEG) return nst_jpeg_probe(d, buf, len, path, info);
    return nst_png_probe(d, buf, len, path, info);
}

int nst_decode(nst_decoder *d, const uint8_t *buf, size_t len, const char *path,
               const nst_window *roi, uint32_t out_w, uint32_t out_h, nst_image *out)
{
    if (!path) path = "(memory)";
    if (!d || !out || (!buf && len))
        return nst_error(NOSTALL_E_INVALID, "decode: %s: invalid argument", path);
    memset(out, 0, sizeof *out);
    int format = NST_FORMAT_UNKNOWN;
    int rc = sniff(buf, len, path, &format);
    if (rc < 0) return rc;
    if (format == NST_FORMAT_JPEG)
        return nst_jpeg_decode(d, buf, len, path, roi, out_w, out_h, out);
    return nst_png_decode(d, buf, len, path, out);
}
