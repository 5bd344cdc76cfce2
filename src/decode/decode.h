/*
 * decode.h — encoded bytes to RGB8 pixels. The only module that includes
 * jpeglib.h and png.h.
 *
 * A decoder is a per-worker object: it keeps the libjpeg/libpng state it can
 * reuse and a grow-only output buffer, so the steady state does not allocate.
 * Untrusted input: the format is found by magic bytes (not the extension);
 * dimensions are checked against max_pixels right after the header is parsed
 * and before any pixel buffer is sized; size arithmetic is overflow-checked.
 *
 * Errors (the message names the path and what was wrong):
 *   E_NOT_IMAGE        not JPEG or PNG by its magic bytes
 *   E_TRUNCATED        data ends early (libjpeg "premature end of data"
 *                      warning, libpng read past end)
 *   E_CORRUPT          any other decoding error or data-corruption warning
 *   E_TOO_MANY_PIXELS  width * height > max_pixels, a zero dimension, or
 *                      a side over NST_DECODE_MAX_SIDE
 *   E_UNSUPPORTED      a valid file using what is not decoded: 12-bit,
 *                      lossless or hierarchical JPEG, fractional sampling,
 *                      a JPEG colour space of 2 (or unnamed 3/4) components
 *   E_NOMEM
 *
 * A decoder's output for a file never depends on the files it decoded
 * before: each file starts from the state of a fresh decoder (jpeg.c takes
 * the previous file's tables out of its reused libjpeg decompressor, without
 * allocating), so a JPEG that leaves tables out of its header (Motion-JPEG
 * frames) or hides them behind junk libjpeg skips decodes with the standard
 * Huffman tables and fails without a quantization table, instead of
 * inheriting an earlier file's.
 *
 * Colour: JPEG grayscale, YCbCr and RGB give RGB; CMYK/YCCK are converted by
 * hand (Adobe-inverted when an Adobe marker is present, as Photoshop writes
 * them). PNG: palette, grayscale, 16-bit, alpha (dropped) all give RGB8;
 * palette indices past the palette give the grey (i, i, i), as PIL does.
 * PNG ancillary chunks are skipped unread (png.c).
 *
 * The `roi` and output-size hints let a decoder produce only the part of the
 * image a crop needs, possibly DCT-scaled; the result says which part it is
 * (x0, y0, scale). A decoder may ignore the hints and decode everything.
 * JPEG uses them (jpeg.c): the roi's rows and iMCU-aligned columns plus the
 * resampling filter's margin, at the smallest DCT scale 1/1, 1/2, 1/4 or
 * 1/8 that keeps the roi at least out_w x out_h. Decoding stops after the
 * roi's last row, so damage confined to the part of a baseline JPEG below
 * it is not detected (the item succeeds); progressive files are always
 * read whole. PNG ignores the hints.
 *
 * Huffman decoding of single-scan JPEGs is nostall's own (jpeg_huff.c; the
 * rest is libjpeg-turbo's): the same pixels, faster, and an invalid Huffman
 * code is always E_CORRUPT where libjpeg-turbo's fast path would decode it
 * as zeros. NOSTALL_NO_OWN_HUFFMAN=1 in the environment (read when a
 * decoder is created) leaves it to libjpeg-turbo.
 *
 * Restart markers (files from `nostall transcode`, or any baseline JPEG with
 * a restart interval of whole MCU rows): only the restart intervals covering
 * the window's rows are Huffman-decoded (jpeg_rst.c), so damage above the
 * window goes unseen as well, and a truncated file decodes when the
 * window's intervals are complete. Pixels are identical to the normal path.
 *
 * Fuzzed (tests/fuzz/): fuzz_jpeg (every path above, both builds of our
 * Huffman decoder), fuzz_jpeg_diff (our Huffman decoder against
 * libjpeg-turbo's), fuzz_jpeg_transcode (the rewrite), fuzz_png.
 */
#ifndef NST_DECODE_DECODE_H
#define NST_DECODE_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/image.h" /* nst_image, nst_window */

enum { NST_FORMAT_UNKNOWN = 0, NST_FORMAT_JPEG = 1, NST_FORMAT_PNG = 2 };

/* The longest side decoded, 2^26 pixels: the most the resampler
 * (src/augment/resize.c, NST_AUG_MAX_COORD) takes. A longer image (a PNG of
 * 100000000 x 1 is 97 KB, within the default max_pixels) is refused from
 * its header, before any pixel buffer is sized, instead of being decoded
 * whole only for the augment stage to refuse it. JPEG's own limit is
 * 65500. No aspect limit: any image within both limits can be cropped. */
#define NST_DECODE_MAX_SIDE (1u << 26)

typedef struct nst_image_info {
    int format; /* NST_FORMAT_*            */
    uint32_t width, height;
    int components; /* in the file: 1, 3, 4    */
} nst_image_info;

typedef struct nst_decoder nst_decoder;

int nst_decoder_create(nst_decoder **out, uint64_t max_pixels);
void nst_decoder_free(nst_decoder *d);

/* Parse only the header: format and dimensions, with the limit checks. */
int nst_decode_probe(nst_decoder *d, const uint8_t *buf, size_t len, const char *path,
                     nst_image_info *info);

/* Decode to RGB8. `roi` (may be NULL: whole image) and out_w/out_h (the size
 * the roi will be resampled to; 0 if unknown) are hints, see above. */
int nst_decode(nst_decoder *d, const uint8_t *buf, size_t len, const char *path,
               const nst_window *roi, uint32_t out_w, uint32_t out_h, nst_image *out);

/* The MinIO cache's placement of the lossless restart-marker rewrite
 * (cache_transcode; the rewrite itself, its policy and the public entry
 * nostall_transcode_jpeg(): nostall.h, jpeg_transcode.c): a restart marker
 * every MCU, no APPn/COM segments, images up to the decoder's max_pixels
 * (and NOSTALL_TRANSCODE_MAX_PIXELS), using this decoder's libjpeg state.
 * Writes into `out` (grow-only, reserved at nostall_transcode_bound(len));
 * returns 1 with *out_len bytes of it, or 0: keep the original (not a JPEG,
 * kept by the policy, damaged -- the normal decode then reports the damage
 * --, or no memory). Never an error in the thread's slot unless `out`
 * cannot grow. */
int nst_decode_transcode(nst_decoder *d, const uint8_t *buf, size_t len, nst_buf *out,
                         size_t *out_len);

#endif
