/*
 * png.c — PNG to RGB8 through libpng.
 *
 * Design: libpng read structs cannot be reset, so one is created and
 * destroyed per image (a few small allocations); the pixels go into the
 * decoder's grow-only output buffer, which is the large allocation and is
 * reused. Data is read from memory by a bounds-checked callback that raises
 * a libpng error on overrun (reported as E_TRUNCATED). libpng errors
 * longjmp back to png_jmpbuf; warnings are ignored (they concern metadata).
 * Every colour type ends as RGB8: palette and low-bit gray expanded, 16-bit
 * cut to 8 (the high byte, as PIL does for RGB), alpha and tRNS dropped,
 * gray replicated; interlaced images are de-interlaced by libpng. Palette
 * indices past the PLTE entries (invalid, but found in real files) give
 * the grey (i, i, i), as PIL does (its palettes start as a grey ramp), not
 * libpng's black.
 * Limits: the IHDR dimensions are checked against max_pixels and the side
 * limit (decode.h) before libpng sees the data and again after
 * png_read_info(), and libpng's own user limits are set. Ancillary chunks
 * other than tRNS are skipped unread (libpng's "unknown chunk, never
 * keep"): none of them changes our pixels (no gamma, colour management or
 * background is applied), and libpng 1.6.39 would otherwise allocate what
 * some of them declare before finding the data is not there (a 57-byte
 * file with a pCAL chunk of length 2^31-1 took 2 GiB and 4 s: its
 * "chunk data is too large" check is only a warning).
 * A CRC error in any chunk, skipped ones included, fails the item as
 * E_CORRUPT (PIL also rejects them).
 *
 * Threads: called by the thread that owns the decoder; no static mutable
 * state. The libpng I/O state lives in the decoder, not on the stack, so it
 * is well defined after a longjmp.
 */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <png.h>

#include "common/error.h"
#include "decode/decode_impl.h"

/* What libpng may allocate for one chunk (it reads none but IHDR, PLTE,
 * tRNS into memory here, all small; image data is streamed). */
#define NST_PNG_CHUNK_MAX (16u << 20)
/* Most ancillary/unknown chunks kept in memory (libpng's default too). */
#define NST_PNG_CHUNK_CACHE_MAX 1000

static void read_cb(png_structp png, png_bytep data, size_t n)
{
    nst_png_io *io = png_get_io_ptr(png);
    if (n > io->len - io->pos) {
        io->overrun = 1;
        png_error(png, "data ends early (read past end)");
    }
    memcpy(data, io->buf + io->pos, n);
    io->pos += n;
}

static void error_cb(png_structp png, png_const_charp msg)
{
    nst_png_io *io = png_get_error_ptr(png);
    snprintf(io->msg, sizeof io->msg, "%s", msg ? msg : "libpng error");
    png_longjmp(png, 1);
}

static void warning_cb(png_structp png, png_const_charp msg)
{
    (void)png; /* e.g. "iCCP: known incorrect sRGB profile": not our concern */
    (void)msg;
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* The limit check before libpng allocates anything for the image: the
 * first chunk must be IHDR (8-byte signature, 4-byte length, "IHDR",
 * width, height). If it is not there, libpng reports the error. */
static int precheck(const nst_decoder *d, const uint8_t *buf, size_t len, const char *path)
{
    if (len < 24 || memcmp(buf + 12, "IHDR", 4) != 0) return 0;
    return nst_decode_check_dims(d, be32(buf + 16), be32(buf + 20), path, "PNG");
}

/* Palette entries past PLTE's, up to all 2^depth an index can name, as the
 * grey (i, i, i): PIL's pixels for such indices (libpng's are black). */
static void grey_past_palette(png_structp png, png_infop info, int depth)
{
    png_colorp pal = NULL;
    int n = 0;
    const int all = 1 << depth;
    if (png_get_PLTE(png, info, &pal, &n) != PNG_INFO_PLTE || !pal || n <= 0 || n >= all) return;
    png_color full[256];
    memcpy(full, pal, (size_t)n * sizeof *full);
    for (int i = n; i < all; i++) full[i].red = full[i].green = full[i].blue = (png_byte)i;
    png_set_PLTE(png, info, full, all);
}

/* Runs after png_read_info() under the caller's setjmp: set the transforms
 * and read every row into d->out. Returns 0 or a status with the message
 * set (limits, allocation); libpng errors longjmp past it. */
static int read_pixels(nst_decoder *d, png_structp png, png_infop info, const char *path,
                       uint32_t *w_out, uint32_t *h_out)
{
    png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    int color = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);

    if (color == PNG_COLOR_TYPE_PALETTE) {
        grey_past_palette(png, info, depth);
        png_set_palette_to_rgb(png);
    }
    if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (depth == 16) png_set_strip_16(png);
    /* Also removes the alpha channel a palette/tRNS expansion may add, so
     * tRNS is in effect ignored. */
    png_set_strip_alpha(png);
    if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA)
        png_set_gray_to_rgb(png);
    int passes = png_set_interlace_handling(png);
    png_read_update_info(png, info);

    size_t row;
    if (nst_mul_overflow((size_t)w, 3, &row))
        return nst_error(NOSTALL_E_TOO_MANY_PIXELS, "decode: %s: PNG size overflows", path);
    if (png_get_rowbytes(png, info) != row || png_get_channels(png, info) != 3 ||
        png_get_bit_depth(png, info) != 8)
        return nst_error(NOSTALL_E_CORRUPT,
                         "decode: %s: unsupported PNG layout "
                         "(colour type %d, bit depth %d)",
                         path, color, depth);
    size_t total;
    if (nst_mul_overflow(row, (size_t)h, &total))
        return nst_error(NOSTALL_E_TOO_MANY_PIXELS, "decode: %s: PNG size overflows", path);
    int rc = nst_buf_reserve(&d->out, total);
    if (rc < 0)
        return nst_error(rc, "decode: %s: cannot allocate %zu bytes for pixels", path, total);

    /* With interlace handling, each pass combines its pixels into the rows
     * already there, so reading every row `passes` times in order gives the
     * full image without a row-pointer array. */
    for (int p = 0; p < passes; p++)
        for (png_uint_32 y = 0; y < h; y++) png_read_row(png, d->out.data + (size_t)y * row, NULL);
    /* Not png_read_end(): the pixels are complete; chunks after the image
     * data (text, a missing IEND) must not fail the item. */
    *w_out = w;
    *h_out = h;
    return 0;
}

/* Probe (out == NULL: header only, fill *info) or decode (fill *out). */
static int run(nst_decoder *d, const uint8_t *buf, size_t len, const char *path,
               nst_image_info *info, nst_image *out)
{
    int rc = precheck(d, buf, len, path);
    if (rc < 0) return rc;

    nst_png_io *io = &d->png;
    io->buf = buf;
    io->len = len;
    io->pos = 0;
    io->overrun = 0;
    io->msg[0] = '\0';

    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, io, error_cb, warning_cb);
    if (!png) return nst_error(NOSTALL_E_NOMEM, "decode: %s: cannot create PNG reader", path);
    png_infop pinfo = png_create_info_struct(png);
    if (!pinfo) {
        png_destroy_read_struct(&png, NULL, NULL);
        return nst_error(NOSTALL_E_NOMEM, "decode: %s: cannot create PNG reader", path);
    }
    /* png and pinfo are not modified after this point, so they are intact
     * after a longjmp. */
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &pinfo, NULL);
        return nst_error(io->overrun ? NOSTALL_E_TRUNCATED : NOSTALL_E_CORRUPT, "decode: %s: %s",
                         path, io->msg);
    }
    png_set_read_fn(png, io, read_cb);
    if (d->png_crc_off)
        png_set_crc_action(png, PNG_CRC_QUIET_USE, PNG_CRC_QUIET_USE);
    else
        png_set_crc_action(png, PNG_CRC_DEFAULT, PNG_CRC_ERROR_QUIT);
    png_set_user_limits(png, NST_DECODE_MAX_SIDE, NST_DECODE_MAX_SIDE);
    png_set_chunk_malloc_max(png, NST_PNG_CHUNK_MAX);
    png_set_chunk_cache_max(png, NST_PNG_CHUNK_CACHE_MAX);
    /* Every chunk but IHDR, PLTE, tRNS, IDAT, IEND: skipped, CRC checked. */
    png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, NULL, -1);

    png_read_info(png, pinfo);
    uint32_t w = png_get_image_width(png, pinfo), h = png_get_image_height(png, pinfo);
    rc = nst_decode_check_dims(d, w, h, path, "PNG");
    if (rc == 0 && info) {
        int color = png_get_color_type(png, pinfo);
        info->format = NST_FORMAT_PNG;
        info->width = w;
        info->height = h;
        info->components = color == PNG_COLOR_TYPE_PALETTE ? 3 : png_get_channels(png, pinfo);
    }
    if (rc == 0 && out) rc = read_pixels(d, png, pinfo, path, &w, &h);
    png_destroy_read_struct(&png, &pinfo, NULL);
    if (rc < 0) return rc;
    if (out) nst_decode_full_image(d, w, h, out);
    return 0;
}

int nst_png_probe(nst_decoder *d, const uint8_t *buf, size_t len, const char *path,
                  nst_image_info *info)
{
    return run(d, buf, len, path, info, NULL);
}

int nst_png_decode(nst_decoder *d, const uint8_t *buf, size_t len, const char *path, nst_image *out)
{
    return run(d, buf, len, path, NULL, out);
}

void nst_png_crc_check(nst_decoder *d, int on) { d->png_crc_off = !on; }
