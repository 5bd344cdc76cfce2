/*
 * jpeg.c — JPEG to RGB8 through the libjpeg API (libjpeg-turbo).
 *
 * Design: each decoder owns one jpeg_decompress_struct, created once and
 * reset with jpeg_abort_decompress() between images, so the per-image cost
 * is only what libjpeg allocates in its image pool; pixels go straight into
 * the decoder's grow-only output buffer.
 *
 * Clean state: a reused decompressor keeps the quantization and Huffman
 * tables of the files before (libjpeg resets the rest at each SOI: restart
 * interval, JFIF/Adobe markers, arithmetic conditioning), so a file whose
 * header leaves a table out, or hides it behind junk libjpeg skips, would
 * decode with an earlier file's. nst_jpeg_reset() takes every table out of
 * the decompressor before each file; the table objects are kept and handed
 * back to libjpeg when the next DQT or DHT (or its standard Huffman
 * tables) asks its permanent pool for one (alloc_small()), so the pool
 * does not grow with the number of files and nothing is allocated per
 * file. The result for a file is the one a fresh decoder gives.
 *
 * Errors come back through a custom error manager that longjmps to the
 * call that started the work; libjpeg never prints and never exits.
 * Warnings are sorted into truncation, corruption (both fatal for the
 * item) and benign ones (see warning_status()); errors about valid files
 * using what libjpeg-turbo does not decode (12-bit, lossless) are
 * E_UNSUPPORTED (unsupported()). Untrusted input is bounded three ways:
 * dimensions are checked against max_pixels right after
 * jpeg_read_header(), before any pixel buffer is sized; libjpeg's own
 * working memory (the whole-image coefficient buffer of progressive files)
 * is capped by max_memory_to_use; and a progress monitor stops files with
 * an absurd number of scans.
 *
 * Huffman decoding: for single-scan files, jpeg_huff.c's decoder takes
 * the place of libjpeg's right after jpeg_start_decompress() (see there).
 *
 * Threads: a decoder's jpeg state is used by the one thread that owns the
 * decoder. Nothing here is static and mutable.
 *
 * Region decode: given the roi and output-size hints, only the part of the
 * image the resampler will touch is decoded, at the smallest DCT scale 1/den
 * (den in 1, 2, 4, 8) that keeps the roi at least as large as the output:
 * jpeg_crop_scanline() for the columns (widened to an iMCU boundary),
 * jpeg_skip_scanlines() for the rows above, and the decode stops after the
 * last row needed. Corruption below that row is therefore not detected (see
 * decode_body()). Without hints (roi NULL, sizes 0) it is a full decode.
 * Layouts libjpeg handles badly get less: 4:1:1 at 1/2 at most
 * (coarse_chroma()), 4x2 / 2x4 sampling without the column crop
 * (crop_safe()).
 */
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h> /* before jpeglib.h: it uses FILE and size_t */
#include <stdlib.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>

#include "common/error.h"
#include "decode/decode_impl.h"
#include "decode/jpeg_impl.h"

/* A progressive file may legitimately have a dozen or so scans; thousands
 * of tiny scans are a known denial-of-service pattern (each scan re-walks
 * the coefficient buffer). libjpeg-turbo's TurboJPEG uses the same bound. */
#define NST_JPEG_MAX_SCANS 500

/* PIL assumes the Adobe (inverted) CMYK convention for every 4-component
 * JPEG, marker or not (JpegImagePlugin: rawmode "CMYK;I"). We match PIL so
 * that training on nostall and on a PIL pipeline sees the same pixels. Set
 * to 0 to read CMYK without an Adobe marker as plain (non-inverted) CMYK. */
#define NST_JPEG_CMYK_ASSUME_ADOBE 1

/* Rows handed to one jpeg_read_scanlines() call. */
#define NST_JPEG_ROWS 16

/* The narrowest region axis_range() asks for, in scaled pixels. */
#define NST_JPEG_MIN_SPAN 16.0

/* Largest DCT scale-down used for region decode: 1/8. libjpeg-turbo 2.x has
 * SIMD inverse DCTs for 1/8, 2/8, 4/8 and 8/8 only, so only those powers of
 * two are used (see choose_den()). Overridable for measurements: on
 * 1200x900 images to 64x64, allowing 1/4 and 1/8 (vs 1/2 at most) was
 * about 8% faster end to end. */
#ifndef NST_JPEG_MAX_DEN
#define NST_JPEG_MAX_DEN 8
#endif

/* ---- error manager --------------------------------------------------- */

/* Record the status and libjpeg's message, then unwind to the setjmp of the
 * current call (nst_jpeg_decode / nst_jpeg_probe / nst_jpeg_create). */
_Noreturn static void fail(j_common_ptr cinfo, int status)
{
    nst_jpeg_err *e = (nst_jpeg_err *)cinfo->err;
    e->status = status;
    e->msg[0] = '\0';
    (*cinfo->err->format_message)(cinfo, e->msg);
    longjmp(e->jmp, 1);
}

/* Whether libjpeg's error is about a valid file using a feature
 * libjpeg-turbo 2.1.5 (8-bit build) does not decode: 12-bit samples,
 * lossless or hierarchical processes, fractional sampling, a colour
 * conversion it lacks. */
static int unsupported(j_common_ptr cinfo)
{
    const struct jpeg_error_mgr *err = cinfo->err;
    switch (err->msg_code) {
    case JERR_BAD_PRECISION: /* DCT processes have 8 or 12 (other values: damage) */
        return err->msg_parm.i[0] == 12;
    case JERR_SOF_UNSUPPORTED: /* SOF3, 5-7, 11, 13-15; 0xC8 (JPG) is reserved */
        return err->msg_parm.i[0] != 0xC8;
    case JERR_FRACT_SAMPLE_NOTIMPL:
    case JERR_CONVERSION_NOTIMPL:
    case JERR_ARITH_NOTIMPL:
    case JERR_NOT_COMPILED: return 1;
    default: return 0;
    }
}

/* The message for such an error into msg (JMSG_LENGTH_MAX bytes). */
static void describe_unsupported(j_common_ptr cinfo, char *msg, size_t size)
{
    const struct jpeg_error_mgr *err = cinfo->err;
    const int v = err->msg_parm.i[0];
    switch (err->msg_code) {
    case JERR_BAD_PRECISION:
        snprintf(msg, size, "%d-bit JPEG (data precision %d) is not supported, only 8-bit", v, v);
        break;
    case JERR_SOF_UNSUPPORTED:
        snprintf(msg, size, "%s JPEG (SOF marker 0x%02x) is not supported",
                 v == 0xC3 || v == 0xCB   ? "lossless"
                 : v == 0xC7 || v == 0xCF ? "hierarchical lossless"
                                          : "hierarchical",
                 (unsigned)v);
        break;
    case JERR_FRACT_SAMPLE_NOTIMPL:
        snprintf(msg, size,
                 "JPEG with fractional chroma sampling (a component sampled "
                 "more finely than the image's largest factor allows "
                 "in whole steps) is not supported");
        break;
    default: /* libjpeg's words: "Unsupported color conversion request", ... */
        (*cinfo->err->format_message)(cinfo, msg);
        break;
    }
}

static void error_exit(j_common_ptr cinfo)
{
    int status;
    switch (cinfo->err->msg_code) {
    case JERR_OUT_OF_MEMORY: status = NOSTALL_E_NOMEM; break;
    /* Zero dimension, a dimension over libjpeg's 65500, or a (progressive)
     * image whose working memory exceeds the cap derived from max_pixels:
     * all are "too big/degenerate", not damage. */
    case JERR_EMPTY_IMAGE:
    case JERR_IMAGE_TOO_BIG:
    case JERR_NO_BACKING_STORE: status = NOSTALL_E_TOO_MANY_PIXELS; break;
    case JERR_INPUT_EOF:
    case JERR_INPUT_EMPTY: status = NOSTALL_E_TRUNCATED; break;
    default: status = NOSTALL_E_CORRUPT; break;
    }
    if (unsupported(cinfo)) {
        nst_jpeg_err *e = (nst_jpeg_err *)cinfo->err;
        e->status = NOSTALL_E_UNSUPPORTED;
        describe_unsupported(cinfo, e->msg, sizeof e->msg);
        longjmp(e->jmp, 1);
    }
    fail(cinfo, status);
}

/*
 * Which libjpeg warnings fail the item (returns a status) and which do not
 * (returns 0). libjpeg keeps decoding after a warning, so a warning we let
 * pass must be one that does not put wrong pixels in the output:
 *
 * Fatal:
 *   JWRN_JPEG_EOF          "Premature end of JPEG file": the data ran out;
 *                          libjpeg would pad the rest grey. -> E_TRUNCATED.
 *   JWRN_HIT_MARKER        entropy data ended before the scan was complete
 *                          (truncated segment or corruption); rest is padded.
 *   JWRN_HUFF_BAD_CODE     invalid Huffman code: the entropy data is damaged.
 *   JWRN_ARITH_BAD_CODE    the same for arithmetic coding.
 *   JWRN_MUST_RESYNC       expected RSTn not found: a restart interval was
 *                          lost and libjpeg resynchronises over garbage.
 *   JWRN_BOGUS_PROGRESSION progressive scans out of order: coefficients are
 *                          refined that were never started, wrong pixels.
 *   JWRN_TOO_MUCH_DATA     an application bug (too many scanlines read);
 *                          cannot happen here, fatal to be safe.
 *   NST_JWRN_FILL_IN_DATA  our Huffman decoder's: FF FF 00 in entropy data
 *                          (jpeg_impl.h).
 *   JWRN_EXTRANEOUS_DATA   only before an RSTn marker: the entropy decoder
 *                          finished a restart interval without consuming
 *                          all of it, i.e. it lost sync on damaged data.
 *                          (libjpeg-turbo only reports this when the excess
 *                          is more than its bit reader had read ahead; a
 *                          few bytes are dropped silently.)
 *   anything unknown       conservative default.
 *   -> E_CORRUPT.
 *
 * Benign (seen in real, visually intact photographs):
 *   JWRN_EXTRANEOUS_DATA   before any other marker, typically "N extraneous
 *                          bytes before marker 0xd9": padding some encoders
 *                          and editors leave between segments or before EOI
 *                          (a few ImageNet files have it; PIL decodes them).
 *   JWRN_NOT_SEQUENTIAL    odd Ss/Se/Ah/Al in a baseline SOS; written by some
 *                          phone cameras (Samsung); libjpeg ignores those
 *                          fields for sequential scans and the pixels are
 *                          right.
 *   JWRN_ADOBE_XFORM       unknown Adobe transform code; libjpeg picks the
 *                          colour space from the component count as usual.
 *   JWRN_JFIF_MAJOR        unknown JFIF version: metadata only.
 *   JWRN_BOGUS_ICC         bad ICC marker: only raised when reading the ICC
 *                          profile, which we never use.
 * Trace messages (msg_level >= 0, e.g. JFIF thumbnails) are ignored.
 *
 * Not every damage is reported: libjpeg-turbo's fast Huffman path turns an
 * invalid code into 0 without a warning, and a decoder that lost sync can
 * end a scan early with only "extraneous bytes before marker 0xd9" (benign
 * above). Such files decode to partly wrong pixels; we cannot tell them
 * from intact ones without a second opinion, and PIL accepts them too.
 */
static int warning_status(j_common_ptr cinfo)
{
    const struct jpeg_error_mgr *err = cinfo->err;
    switch (err->msg_code) {
    case JWRN_JPEG_EOF: return NOSTALL_E_TRUNCATED;
    case JWRN_EXTRANEOUS_DATA: {
        int marker = err->msg_parm.i[1];
        return (marker >= 0xD0 && marker <= 0xD7) ? NOSTALL_E_CORRUPT : 0;
    }
    case JWRN_NOT_SEQUENTIAL:
    case JWRN_ADOBE_XFORM:
    case JWRN_JFIF_MAJOR:
    case JWRN_BOGUS_ICC: return 0;
    case JWRN_HIT_MARKER:
    case JWRN_HUFF_BAD_CODE:
    /* JWRN_ARITH_BAD_CODE: only declared by jerror.h when the arithmetic
     * codec macros are visible; it falls to the default. */
    case JWRN_MUST_RESYNC:
    case JWRN_BOGUS_PROGRESSION:
    case JWRN_TOO_MUCH_DATA:
    default: return NOSTALL_E_CORRUPT;
    }
}

static void emit_message(j_common_ptr cinfo, int msg_level)
{
    if (msg_level >= 0) return; /* trace output */
    cinfo->err->num_warnings++;
    int status = warning_status(cinfo);
    if (status < 0) {
        nst_jpeg_err *e = (nst_jpeg_err *)cinfo->err;
        if (!e->lenient) fail(cinfo, status);
        if (!e->warned) {
            e->warned = status;
            e->warn_code = cinfo->err->msg_code;
            (*cinfo->err->format_message)(cinfo, e->warn_msg);
        }
    }
}

/* Texts of the NST_JWRN_* codes (jpeg_impl.h), in their order. */
static const char *const nst_messages[] =
    {"Corrupt JPEG data: 0xFF fill bytes before a stuffed zero in entropy-coded data", NULL};

static void output_message(j_common_ptr cinfo)
{
    (void)cinfo; /* never print: errors are reported through nst_error */
}

static void progress_monitor(j_common_ptr cinfo)
{
    if (!cinfo->is_decompressor) return;
    j_decompress_ptr dinfo = (j_decompress_ptr)cinfo;
    nst_jpeg_huff_progress((nst_jpeg *)(void *)dinfo);
    if (dinfo->input_scan_number > NST_JPEG_MAX_SCANS) {
        nst_jpeg_err *e = (nst_jpeg_err *)cinfo->err;
        e->status = NOSTALL_E_CORRUPT;
        snprintf(e->msg, sizeof e->msg, "more than %d scans", NST_JPEG_MAX_SCANS);
        longjmp(e->jmp, 1);
    }
}

/* ---- create / free ---------------------------------------------------- */

/* libjpeg's alloc_small, with the decompressor's table objects recycled:
 * JPOOL_PERMANENT requests of a table's size are served from the spares
 * nst_jpeg_reset() took out of the decompressor. Once the decompressor
 * exists, only jpeg_alloc_quant_table() / jpeg_alloc_huff_table() (and
 * jpeg_mem_src's one source manager, of another size) allocate from that
 * pool; and a spare is permanent-pool memory of exactly the size asked
 * that nothing else refers to, so handing one out is safe whoever asks.
 * Every table object is either in a slot of the decompressor or a spare,
 * so there are never more than 4 + 8 of them. */
static void *alloc_small(j_common_ptr cinfo, int pool_id, size_t size)
{
    nst_jpeg *j = (nst_jpeg *)(void *)cinfo;
    if (pool_id == JPOOL_PERMANENT) {
        if (size == sizeof(JQUANT_TBL) && j->nspare_q > 0) return j->spare_q[--j->nspare_q];
        if (size == sizeof(JHUFF_TBL) && j->nspare_h > 0) return j->spare_h[--j->nspare_h];
        j->perm_allocs++;
    }
    return j->lj_alloc_small(cinfo, pool_id, size);
}

void nst_jpeg_reset(nst_jpeg *j)
{
    struct jpeg_decompress_struct *ci = &j->cinfo;
    for (int i = 0; i < NUM_QUANT_TBLS; i++) {
        if (ci->quant_tbl_ptrs[i] && j->nspare_q < NUM_QUANT_TBLS)
            j->spare_q[j->nspare_q++] = ci->quant_tbl_ptrs[i];
        ci->quant_tbl_ptrs[i] = NULL;
    }
    for (int i = 0; i < NUM_HUFF_TBLS; i++) {
        if (ci->dc_huff_tbl_ptrs[i] && j->nspare_h < 2 * NUM_HUFF_TBLS)
            j->spare_h[j->nspare_h++] = ci->dc_huff_tbl_ptrs[i];
        if (ci->ac_huff_tbl_ptrs[i] && j->nspare_h < 2 * NUM_HUFF_TBLS)
            j->spare_h[j->nspare_h++] = ci->ac_huff_tbl_ptrs[i];
        ci->dc_huff_tbl_ptrs[i] = NULL;
        ci->ac_huff_tbl_ptrs[i] = NULL;
    }
}

/* Create the decompressor with nostall's settings. 0, or a status (out of
 * memory: jpeg_create_decompress cleaned up after itself). */
static int cinfo_init(nst_jpeg *j)
{
    if (setjmp(j->err.jmp)) {
        j->cinfo.mem = NULL;
        return nst_error(j->err.status, "decode: cannot create JPEG decoder: %s", j->err.msg);
    }
    jpeg_create_decompress(&j->cinfo);
    j->cinfo.mem->max_memory_to_use = j->mem_cap;
    j->lj_alloc_small = j->cinfo.mem->alloc_small;
    j->cinfo.mem->alloc_small = alloc_small;
    j->cinfo.progress = &j->progress;
    return 0;
}

int nst_jpeg_create(nst_jpeg **out, uint64_t max_pixels)
{
    *out = NULL;
    nst_jpeg *j = calloc(1, sizeof *j);
    if (!j) return nst_error(NOSTALL_E_NOMEM, "decode: cannot allocate JPEG state");
    j->cinfo.err = jpeg_std_error(&j->err.pub);
    j->err.pub.error_exit = error_exit;
    j->err.pub.emit_message = emit_message;
    j->err.pub.output_message = output_message;
    j->err.pub.addon_message_table = nst_messages;
    j->err.pub.first_addon_message = NST_JWRN_FIRST;
    j->err.pub.last_addon_message = NST_JWRN_LAST;
    /* Working-memory cap. The largest legitimate need is the whole-image
     * coefficient buffer of a multi-scan (progressive) file: 2 bytes per
     * sample (64 int16 per 8x8 block), at most 4 full-resolution
     * components, so 8 bytes per pixel; doubled for MCU padding, plus
     * 64 MiB for tables and row buffers. libjpeg has no backing store, so
     * going over fails with JERR_NO_BACKING_STORE instead of allocating. */
    uint64_t cap = 64u << 20;
    if (max_pixels > (UINT64_MAX - cap) / 16)
        cap = UINT64_MAX;
    else
        cap += max_pixels * 16;
    if (cap > (uint64_t)LONG_MAX) cap = (uint64_t)LONG_MAX;
    j->mem_cap = (long)cap;
    j->progress.progress_monitor = progress_monitor;
    const char *no = getenv("NOSTALL_NO_OWN_HUFFMAN");
    j->huff_off = no && *no && *no != '0';
    int rc = cinfo_init(j);
    if (rc < 0) {
        free(j);
        return rc;
    }
    *out = j;
    return 0;
}

void nst_jpeg_free(nst_jpeg *j)
{
    if (!j) return;
    nst_jpeg_enc_free(j->enc);
    nst_jpeg_huff_free(j->huff);
    if (j->cinfo.mem) jpeg_destroy_decompress(&j->cinfo);
    nst_jpeg_rst_free(&j->rst);
    free(j);
}

uint64_t nst_jpeg_rst_hits(const nst_decoder *d) { return d->jpeg->rst.hits; }

void nst_jpeg_rst_enable(nst_decoder *d, int on) { d->jpeg->rst.disabled = !on; }

uint64_t nst_jpeg_huff_hits(const nst_decoder *d) { return nst_jpeg_huff_scans(d->jpeg->huff); }

void nst_jpeg_huff_enable(nst_decoder *d, int on) { d->jpeg->huff_off = !on; }

void nst_jpeg_huff_plain(nst_decoder *d, int plain) { d->jpeg->huff_plain = plain; }

uint64_t nst_jpeg_permanent_allocs(const nst_decoder *d) { return d->jpeg->perm_allocs; }

/* ---- decoding ---------------------------------------------------------- */

/* Reject what jpeg_mem_src cannot take; forget the tables of earlier files
 * (nst_jpeg_reset()); reset the per-image error state. */
static int set_source(const uint8_t *buf, size_t len, const char *path, nst_jpeg *j)
{
    (void)buf;
    if ((unsigned long long)len > (unsigned long long)ULONG_MAX)
        return nst_error(NOSTALL_E_FILE_TOO_LARGE, "decode: %s: JPEG too large", path);
    nst_jpeg_reset(j);
    j->err.status = 0;
    j->err.msg[0] = '\0';
    j->err.pub.num_warnings = 0;
    j->huff_arm = 0;
    return 0;
}

/* Exact round(t / 255) for 0 <= t <= 255 * 255. */
static inline unsigned div255(unsigned t)
{
    t += 128;
    return (t + (t >> 8)) >> 8;
}

/* CMYK (4 bytes/pixel, as stored) to RGB8 in place, front to back: pixel
 * i is read whole before its 3 bytes are written at 3i <= 4i, and the
 * write never reaches pixel i+1 (3i+2 < 4i+4). Inverted (Adobe) data holds
 * 255-C etc., so R = (255-C)(255-K)/255 = stored_C * stored_K / 255; this
 * is the same number, rounding included, as PIL's "CMYK;I" + convert. */
static void cmyk_to_rgb(uint8_t *p, size_t pixels, int inverted)
{
    for (size_t i = 0; i < pixels; i++) {
        unsigned c = p[4 * i], m = p[4 * i + 1], y = p[4 * i + 2], k = p[4 * i + 3];
        if (!inverted) {
            c = 255 - c;
            m = 255 - m;
            y = 255 - y;
            k = 255 - k;
        }
        p[3 * i] = (uint8_t)div255(c * k);
        p[3 * i + 1] = (uint8_t)div255(m * k);
        p[3 * i + 2] = (uint8_t)div255(y * k);
    }
}

/* ---- region planning ---------------------------------------------------- */

/* The part of the image to decode, in the coordinates of the image scaled by
 * 1/den (libjpeg's output_width x output_height). */
typedef struct nst_jpeg_plan {
    unsigned den;    /* DCT scale 1/den, den in {1, 2, 4, 8}        */
    uint32_t x0, x1; /* columns [x0, x1) wanted (before alignment)  */
    uint32_t y0, y1; /* rows [y0, y1)                               */
} nst_jpeg_plan;

/* A usable roi hint: finite, positive size, not absurdly large. */
static int roi_ok(const nst_window *r)
{
    const double m = 1e9;
    return r && isfinite(r->x) && isfinite(r->y) && isfinite(r->w) && isfinite(r->h) &&
           r->w > 0.0 && r->h > 0.0 && fabs(r->x) < m && fabs(r->y) < m && r->w < m && r->h < m;
}

/* The smallest scale 1/den, den in {1, 2, 4, 8} (the scales libjpeg-turbo
 * 2.x has SIMD inverse DCTs for), that keeps a w x h window at least
 * out_w x out_h, so the resampler still only shrinks (or keeps) it and the
 * result matches a full-resolution decode closely (see tests/test_region.c).
 * out_w or out_h 0 (size unknown): full scale. */
static unsigned choose_den(double w, double h, uint32_t out_w, uint32_t out_h)
{
    if (out_w == 0 || out_h == 0) return 1;
    unsigned den = 1;
    while (den < NST_JPEG_MAX_DEN && w / (2.0 * den) >= (double)out_w &&
           h / (2.0 * den) >= (double)out_h)
        den *= 2;
    return den;
}

/* Pixels [lo, hi) of an axis of n scaled pixels that the resampler's taps
 * can touch for the source interval [a, a + len) resampled to `out`
 * samples (0: unknown): the interval mapped by 1/den, rounded outwards,
 * widened by the triangle filter's support (max(1, len/den/out) pixels)
 * plus 2 for rounding and the fancy-upsampling edge columns, and clamped
 * into [0, n) but never empty (a window wholly outside the image needs the
 * edge pixel, which the resampler clamps to). */
static void axis_range(double a, double len, unsigned den, uint32_t out, uint32_t n, uint32_t *lo,
                       uint32_t *hi)
{
    const double s = 1.0 / (double)den;
    double support = out ? len * s / (double)out : 1.0;
    if (support < 1.0) support = 1.0;
    const double margin = ceil(support) + 2.0;
    double l = floor(a * s) - margin, h = ceil((a + len) * s) + margin;
    if (l < 0.0) l = 0.0;
    if (l > (double)n - 1.0) l = (double)n - 1.0;
    if (h > (double)n) h = (double)n;
    if (h < l + 1.0) h = l + 1.0;
    /* At least NST_JPEG_MIN_SPAN pixels (or the whole axis): a region only
     * one or two pixels wide (a window off the image edge) would give
     * libjpeg a chroma row of one sample to upsample, a corner case we
     * would rather not rely on. */
    if (h - l < NST_JPEG_MIN_SPAN) {
        h = l + NST_JPEG_MIN_SPAN < (double)n ? l + NST_JPEG_MIN_SPAN : (double)n;
        l = h - NST_JPEG_MIN_SPAN > 0.0 ? h - NST_JPEG_MIN_SPAN : 0.0;
    }
    *lo = (uint32_t)l;
    *hi = (uint32_t)h;
}

/* Decode parameters after jpeg_read_header(): output colour space, DCT
 * scale 1/den, libjpeg's default (accurate) IDCT and fancy upsampling (at
 * full scale the same pixels as PIL's default decode). */
static void set_output(struct jpeg_decompress_struct *ci, J_COLOR_SPACE cs, unsigned den)
{
    ci->out_color_space = cs;
    ci->scale_num = 1;
    ci->scale_denom = den;
    ci->dct_method = JDCT_ISLOW;
    ci->do_fancy_upsampling = TRUE;
    jpeg_calc_output_dimensions(ci);
}

/* Whether some component is still box-upsampled more than 2x at this
 * scale (after jpeg_calc_output_dimensions): 4:1:1 chroma is, at every
 * scale, since libjpeg can only trade upsampling for a larger IDCT when
 * both directions allow it. At 1/4 and 1/8 that leaves one chroma sample
 * per four output pixels, coarser than the resampled output (PSNR under
 * 30 dB on colourful images), so such files decode at 1/2 at most. */
static int coarse_chroma(const struct jpeg_decompress_struct *ci)
{
    const int min = ci->min_DCT_scaled_size;
    for (int c = 0; c < ci->num_components; c++) {
        const jpeg_component_info *p = &ci->comp_info[c];
        const int s = p->DCT_scaled_size;
        if (ci->max_h_samp_factor * min > 2 * p->h_samp_factor * s ||
            ci->max_v_samp_factor * min > 2 * p->v_samp_factor * s)
            return 1;
    }
    return 0;
}

/* Whether jpeg_crop_scanline() gives the right pixels for this file at this
 * scale (after jpeg_start_decompress). libjpeg-turbo's crop (2.1.5, as
 * Debian 12 ships it) sets each component's cropped width as if its IDCT ran
 * at the smallest scaled size. When scaling gives a component a larger IDCT
 * (libjpeg does that to save upsampling) and the component still needs
 * upsampling — 4x2 or 2x4 luma sampling at 1/2, 1/4, 1/8 — its upsampler
 * then reads columns that were never decoded: wrong pixels that depend on
 * stale memory. Such files (4:1:0, rare) decode the full width instead. */
static int crop_safe(const struct jpeg_decompress_struct *ci)
{
    const int min = ci->min_DCT_scaled_size;
    for (int c = 0; c < ci->num_components; c++) {
        const jpeg_component_info *p = &ci->comp_info[c];
        if (p->DCT_scaled_size == min) continue;
        if (p->h_samp_factor * p->DCT_scaled_size != ci->max_h_samp_factor * min ||
            p->v_samp_factor * p->DCT_scaled_size != ci->max_v_samp_factor * min)
            return 0;
    }
    return 1;
}

/* The restart-marker fast path (jpeg_rst.c): if the file (just through
 * jpeg_read_header, parameters set) is a single-scan baseline JPEG with a
 * restart marker every whole number of MCU rows, or every k MCUs with k
 * dividing the MCUs per row, and the region leaves out whole intervals
 * above it (or, with k dividing a row, beside it), point libjpeg at a
 * rebuilt stream of only the intervals the region needs (so the MCUs left
 * out are never Huffman-decoded) and move plan->x0/x1/y0/y1 into its
 * coordinates. Returns 1 with *cut_x / *cut_y the scaled columns / rows
 * left out left of / above it, or 0 (not switched, nothing changed). The
 * pixels asked for reach 2 * max_v_samp_factor source rows and
 * 2 * max_h_samp_factor source columns beyond the plan on every side:
 * enough that fancy upsampling never sees a cut as the image edge inside
 * the plan, so the pixels are the normal path's. */
static int rst_switch(nst_jpeg *j, const uint8_t *buf, size_t len, nst_jpeg_plan *plan,
                      J_COLOR_SPACE cs, uint32_t *cut_x, uint32_t *cut_y)
{
    struct jpeg_decompress_struct *ci = &j->cinfo;
    *cut_x = *cut_y = 0;
    if (j->rst.disabled || ci->restart_interval == 0 || ci->progressive_mode || ci->arith_code ||
        ci->data_precision != 8 || ci->comps_in_scan != ci->num_components ||
        ci->num_components < 1 || ci->max_v_samp_factor < 1 || ci->max_h_samp_factor < 1)
        return 0;
    const unsigned den = plan->den;
    nst_jpeg_rst_geom g;
    g.width = ci->image_width;
    g.height = ci->image_height;
    g.restart_interval = ci->restart_interval;
    if (ci->comps_in_scan == 1) { /* one block per MCU */
        const jpeg_component_info *c = &ci->comp_info[0];
        if (c->v_samp_factor != ci->max_v_samp_factor || c->h_samp_factor != ci->max_h_samp_factor)
            return 0;
        g.mcu_w = 8;
        g.mcu_h = 8;
        g.mcus_per_row = c->width_in_blocks;
        g.mcu_rows = c->height_in_blocks;
    } else {
        g.mcu_w = 8u * (uint32_t)ci->max_h_samp_factor;
        g.mcu_h = 8u * (uint32_t)ci->max_v_samp_factor;
        g.mcus_per_row = (g.width + g.mcu_w - 1) / g.mcu_w;
        g.mcu_rows = ci->total_iMCU_rows;
    }
    if (g.mcu_h % den != 0 || g.mcu_w % den != 0) return 0;
    const uint64_t ym = 2ull * (uint64_t)ci->max_v_samp_factor * den;
    uint64_t lo = (uint64_t)plan->y0 * den, hi = (uint64_t)plan->y1 * den + ym;
    lo = lo > ym ? lo - ym : 0;
    if (hi > g.height) hi = g.height;
    if (lo >= hi) return 0;
    g.row_lo = (uint32_t)lo;
    g.row_hi = (uint32_t)hi;
    const uint64_t xm = 2ull * (uint64_t)ci->max_h_samp_factor * den;
    lo = (uint64_t)plan->x0 * den;
    hi = (uint64_t)plan->x1 * den + xm;
    lo = lo > xm ? lo - xm : 0;
    if (hi > g.width) hi = g.width;
    if (lo >= hi) return 0;
    g.col_lo = (uint32_t)lo;
    g.col_hi = (uint32_t)hi;
    nst_jpeg_rst_out r;
    if (!nst_jpeg_rst_build(&j->rst, buf, len, &g, &r)) return 0;
    const uint32_t cy = r.first_row / den, rows = (r.height + den - 1) / den;
    const uint32_t cx = r.first_col / den, cols = (r.width + den - 1) / den;
    if (r.first_row % den != 0 || plan->y0 < cy || plan->y1 > cy + rows || r.first_col % den != 0 ||
        plan->x0 < cx || plan->x1 > cx + cols)
        return 0;

    const JDIMENSION fw = ci->output_width;
    const J_COLOR_SPACE jcs = ci->jpeg_color_space;
    jpeg_abort_decompress(ci);
    nst_jpeg_reset(j); /* the rebuilt header defines the same tables again */
    jpeg_mem_src(ci, r.data, (unsigned long)r.len);
    jpeg_read_header(ci, TRUE);
    set_output(ci, cs, den);
    if (ci->image_width != r.width || ci->image_height != r.height || ci->output_width != cols ||
        ci->output_height != rows || ci->jpeg_color_space != jcs || ci->progressive_mode ||
        ci->comps_in_scan != ci->num_components || (r.width == g.width && ci->output_width != fw)) {
        /* Cannot happen (the header is the original's but for the size);
         * back to the original, as if never switched. */
        jpeg_abort_decompress(ci);
        nst_jpeg_reset(j);
        jpeg_mem_src(ci, buf, (unsigned long)len);
        jpeg_read_header(ci, TRUE);
        set_output(ci, cs, den);
        return 0;
    }
    plan->y0 -= cy;
    plan->y1 -= cy;
    plan->x0 -= cx;
    plan->x1 -= cx;
    *cut_x = cx;
    *cut_y = cy;
    j->rst.hits++;
    return 1;
}

/* Everything between jpeg_read_header() and the last scanline. Runs under
 * the setjmp of nst_jpeg_decode(); any libjpeg error longjmps out of it, so
 * it keeps no state that the caller needs afterwards except through `j`
 * and `d`, which live on the heap. Returns 0 or a status for a non-libjpeg
 * failure (limits, allocation) with the message set; fills `out` but for
 * `data`'s owner (d->out).
 *
 * Region decode (roi given): the scale 1/den comes from choose_den(); the
 * columns go through jpeg_crop_scanline(), which moves the left edge down
 * to an iMCU boundary (so the region may start up to one iMCU column, 8 to
 * 16 scaled pixels, left of what was asked; we keep those columns rather
 * than copy rows), the rows above through jpeg_skip_scanlines(), and
 * decoding stops after the last row needed (jpeg_abort_decompress in the
 * caller). What that means for damage: libjpeg must still entropy-decode
 * every MCU above and beside the region (Huffman data cannot be skipped),
 * so truncation or corruption there is reported as for a full decode; but
 * the data below the region's last iMCU row is never read, so truncation
 * or corruption confined to it goes unnoticed and the item decodes fine.
 * Progressive (multi-scan) files are entropy-decoded whole inside
 * jpeg_start_decompress(), so for them damage anywhere is still found.
 *
 * All colour spaces take this path: libjpeg-turbo supports crop and skip
 * for every combination we use (fancy upsampling is on, so the merged
 * h2v2 upsampler, whose skip support is fragile, is never chosen; buffered
 * image mode is not used).
 *
 * Restart markers: see rst_switch(); with them the rows above the region
 * (and, with intervals of k MCUs dividing a row, the MCUs left and right
 * of it) are not entropy-decoded either, so damage there goes unseen too,
 * and a truncated file decodes if the region's restart intervals are
 * whole. */
static int decode_body(nst_decoder *d, nst_jpeg *j, const uint8_t *buf, size_t len, const char *path,
                       const nst_window *roi, uint32_t out_w, uint32_t out_h, nst_image *out)
{
    struct jpeg_decompress_struct *ci = &j->cinfo;
    jpeg_read_header(ci, TRUE);
    const uint32_t sw = ci->image_width, sh = ci->image_height;
    int rc = nst_decode_check_dims(d, sw, sh, path, "JPEG");
    if (rc < 0) return rc;

    int cmyk = 0;
    J_COLOR_SPACE cs;
    switch (ci->jpeg_color_space) {
    case JCS_GRAYSCALE:
    case JCS_YCbCr:
    case JCS_RGB: cs = JCS_RGB; break;
    case JCS_CMYK:
    case JCS_YCCK:
        cs = JCS_CMYK;
        cmyk = 1;
        break;
    default: /* 2 components, or 3/4 that libjpeg cannot name */
        return nst_error(NOSTALL_E_UNSUPPORTED,
                         "decode: %s: JPEG colour space of %d components is not supported", path,
                         ci->num_components);
    }

    /* Scale: from the roi (or the whole image) against the output size. */
    const int use_roi = roi_ok(roi);
    nst_jpeg_plan plan;
    plan.den = use_roi ? choose_den(roi->w, roi->h, out_w, out_h)
                       : choose_den((double)sw, (double)sh, out_w, out_h);
    set_output(ci, cs, plan.den);
    if (plan.den > 2 && coarse_chroma(ci)) set_output(ci, cs, plan.den = 2);
    const uint32_t fw = ci->output_width, fh = ci->output_height;
    if (use_roi) {
        axis_range(roi->x, roi->w, plan.den, out_w, fw, &plan.x0, &plan.x1);
        axis_range(roi->y, roi->h, plan.den, out_h, fh, &plan.y0, &plan.y1);
    } else {
        plan.x0 = plan.y0 = 0;
        plan.x1 = fw;
        plan.y1 = fh;
    }
    /* Columns left of and rows above the stream libjpeg now reads
     * (restart-marker fast path). */
    uint32_t cut_x = 0, cut_y = 0;
    if (use_roi) (void)rst_switch(j, buf, len, &plan, cs, &cut_x, &cut_y);
    const uint32_t cur_w = ci->output_width, cur_h = ci->output_height;

    jpeg_start_decompress(ci);
    int comps = ci->output_components;
    if (comps != (cmyk ? 4 : 3))
        return nst_error(NOSTALL_E_CORRUPT, "decode: %s: unexpected %d output components", path,
                         comps);
    if (ci->output_width != cur_w || ci->output_height != cur_h)
        return nst_error(NOSTALL_E_CORRUPT, "decode: %s: JPEG output size changed", path);
    /* Our Huffman decoder for single-scan files (jpeg_huff.c). */
    (void)nst_jpeg_huff_attach(j, 0);

    /* Columns: libjpeg widens [x0, x1) leftwards to an iMCU boundary. */
    if (!crop_safe(ci)) plan.x0 = 0, plan.x1 = cur_w;
    JDIMENSION xoff = plan.x0, cw = plan.x1 - plan.x0;
    if (cw < cur_w)
        jpeg_crop_scanline(ci, &xoff, &cw);
    else
        xoff = 0, cw = cur_w;
    if (xoff > plan.x0 || xoff + cw != plan.x1 || ci->output_width != cw)
        return nst_error(NOSTALL_E_CORRUPT, "decode: %s: JPEG crop failed", path);

    const uint32_t w = cw, h = plan.y1 - plan.y0;
    size_t row, total;
    if (nst_mul_overflow((size_t)w, (size_t)comps, &row) || nst_mul_overflow(row, (size_t)h, &total))
        return nst_error(NOSTALL_E_TOO_MANY_PIXELS, "decode: %s: JPEG size overflows", path);
    rc = nst_buf_reserve(&d->out, total);
    if (rc < 0)
        return nst_error(rc, "decode: %s: cannot allocate %zu bytes for pixels", path, total);

    /* Rows: skip to y0 (whole iMCU rows are entropy-decoded only), read to y1. */
    if (plan.y0 > 0 && jpeg_skip_scanlines(ci, plan.y0) != plan.y0)
        return nst_error(NOSTALL_E_CORRUPT, "decode: %s: JPEG skip failed", path);
    if (ci->output_scanline != plan.y0)
        return nst_error(NOSTALL_E_CORRUPT, "decode: %s: JPEG skip failed", path);
    while (ci->output_scanline < plan.y1) {
        JSAMPROW rows[NST_JPEG_ROWS];
        uint32_t y = ci->output_scanline - plan.y0, n = h - y;
        if (n > NST_JPEG_ROWS) n = NST_JPEG_ROWS;
        for (uint32_t i = 0; i < n; i++) rows[i] = d->out.data + (size_t)(y + i) * row;
        if (jpeg_read_scanlines(ci, rows, n) == 0)
            return nst_error(NOSTALL_E_CORRUPT, "decode: %s: JPEG decoder made no progress", path);
    }
    if (cmyk)
        cmyk_to_rgb(d->out.data, (size_t)w * h, ci->saw_Adobe_marker || NST_JPEG_CMYK_ASSUME_ADOBE);

    memset(out, 0, sizeof *out);
    out->data = d->out.data;
    out->width = w;
    out->height = h;
    out->stride = (size_t)w * 3;
    out->x0 = (uint32_t)xoff + cut_x;
    out->y0 = plan.y0 + cut_y;
    out->scale_num = 1;
    out->scale_den = plan.den;
    out->full_width = fw;
    out->full_height = fh;
    out->src_width = sw;
    out->src_height = sh;
    return 0;
}

int nst_jpeg_decode(nst_decoder *d, const uint8_t *buf, size_t len, const char *path,
                    const nst_window *roi, uint32_t out_w, uint32_t out_h, nst_image *out)
{
    nst_jpeg *j = d->jpeg;
    int rc = set_source(buf, len, path, j);
    if (rc < 0) return rc;
    if (setjmp(j->err.jmp)) {
        jpeg_abort_decompress(&j->cinfo);
        return nst_error(j->err.status, "decode: %s: %s", path, j->err.msg);
    }
    jpeg_mem_src(&j->cinfo, buf, (unsigned long)len);
    rc = decode_body(d, j, buf, len, path, roi, out_w, out_h, out);
    /* Not jpeg_finish_decompress(): every pixel we need is in; what follows
     * (the rest of the image for a region, trailing junk, a missing EOI)
     * must not fail the item. */
    jpeg_abort_decompress(&j->cinfo);
    if (rc < 0) {
        memset(out, 0, sizeof *out);
        return rc;
    }
    return 0;
}

int nst_jpeg_coefficients(nst_decoder *d, const uint8_t *buf, size_t len, int lenient, nst_buf *out,
                          size_t *n, int *code, char *msg, size_t msg_size)
{
    nst_jpeg *j = d->jpeg;
    *n = 0;
    *code = 0;
    if (msg_size) msg[0] = '\0';
    int rc = set_source(buf, len, "(coefficients)", j);
    if (rc < 0) return rc;
    j->err.lenient = lenient;
    j->err.warned = 0;
    j->err.warn_code = 0;
    if (setjmp(j->err.jmp)) {
        j->huff_arm = 0;
        j->err.lenient = 0;
        *code = j->cinfo.err->msg_code;
        snprintf(msg, msg_size, "%s", j->err.msg);
        jpeg_abort_decompress(&j->cinfo);
        return j->err.status;
    }
    struct jpeg_decompress_struct *ci = &j->cinfo;
    jpeg_mem_src(ci, buf, (unsigned long)len);
    jpeg_read_header(ci, TRUE);
    rc = nst_decode_check_dims(d, ci->image_width, ci->image_height, "(coefficients)", "JPEG");
    size_t total = 0;
    for (int c = 0; rc == 0 && c < ci->num_components; c++) {
        const jpeg_component_info *p = &ci->comp_info[c];
        size_t blocks;
        if (nst_mul_overflow((size_t)p->width_in_blocks, (size_t)p->height_in_blocks, &blocks) ||
            nst_add_overflow(total, blocks * DCTSIZE2, &total))
            rc = nst_error(NOSTALL_E_TOO_MANY_PIXELS, "(coefficients): too many blocks");
    }
    if (rc == 0) rc = nst_buf_reserve(out, total * sizeof(JCOEF) + 1);
    if (rc < 0) {
        j->err.lenient = 0;
        jpeg_abort_decompress(ci);
        return rc;
    }
    j->huff_arm = 1;
    jvirt_barray_ptr *coefs = jpeg_read_coefficients(ci);
    j->huff_arm = 0;
    JCOEF *o = (JCOEF *)(void *)out->data;
    for (int c = 0; coefs && c < ci->num_components; c++) {
        const jpeg_component_info *p = &ci->comp_info[c];
        for (JDIMENSION y = 0; y < p->height_in_blocks; y++) {
            JBLOCKARRAY row =
                (*ci->mem->access_virt_barray)((j_common_ptr)ci, coefs[c], y, 1, FALSE);
            memcpy(o + *n, row[0][0], (size_t)p->width_in_blocks * DCTSIZE2 * sizeof(JCOEF));
            *n += (size_t)p->width_in_blocks * DCTSIZE2;
        }
    }
    j->err.lenient = 0;
    jpeg_abort_decompress(ci);
    if (j->err.warned) {
        *code = j->err.warn_code;
        snprintf(msg, msg_size, "%s", j->err.warn_msg);
        return j->err.warned;
    }
    return coefs ? 0 : nst_error(NOSTALL_E_CORRUPT, "(coefficients): suspended");
}

int nst_jpeg_probe(nst_decoder *d, const uint8_t *buf, size_t len, const char *path,
                   nst_image_info *info)
{
    nst_jpeg *j = d->jpeg;
    int rc = set_source(buf, len, path, j);
    if (rc < 0) return rc;
    if (setjmp(j->err.jmp)) {
        jpeg_abort_decompress(&j->cinfo);
        return nst_error(j->err.status, "decode: %s: %s", path, j->err.msg);
    }
    jpeg_mem_src(&j->cinfo, buf, (unsigned long)len);
    jpeg_read_header(&j->cinfo, TRUE);
    uint32_t w = j->cinfo.image_width, h = j->cinfo.image_height;
    int comps = j->cinfo.num_components;
    jpeg_abort_decompress(&j->cinfo);
    rc = nst_decode_check_dims(d, w, h, path, "JPEG");
    if (rc < 0) return rc;
    info->format = NST_FORMAT_JPEG;
    info->width = w;
    info->height = h;
    info->components = comps;
    return 0;
}
