/*
 * jpeg_transcode.c — lossless rewrite of a JPEG with a restart marker after
 * every MCU, in memory, for the MinIO cache (option cache_transcode).
 *
 * Why: region decode must entropy-decode every MCU above and beside the
 * crop (jpeg.c), about 80% of a file for RandomResizedCrop; with a restart
 * marker per MCU the fast path (jpeg_rst.c) hands libjpeg only the crop's
 * MCUs. `nostall transcode` does this to a copy of a dataset on disk; this
 * does it to the copy the cache keeps, once per cached item, so every later
 * epoch reads the cheap form without a second dataset on disk.
 *
 * How: jpeg_read_coefficients() (entropy decoding only, by jpeg_huff.c's
 * decoder for single-scan files: the coefficients, hence the pixels, are
 * exactly those of the original), then
 * jpeg_write_coefficients() as a baseline sequential file with
 * restart_interval = 1 MCU and libjpeg's standard Huffman tables, into a
 * grow-only buffer of the caller's; if that does not fit the size limit
 * below (smooth, high-quality photos whose own optimized tables beat the
 * standard ones by more than the markers' cost), a second pass with
 * optimized tables, from the coefficients already read. Progressive
 * sources go straight to optimized tables (they are 10-15% smaller than
 * their baseline form with standard ones) and become baseline too, with
 * the same coefficients. Markers that do not change decoding (APPn,
 * COM: EXIF, ICC, comments) are not copied: nothing downstream reads them.
 *
 * What is declined (return 0, the caller keeps the original bytes, and the
 * normal decode later reports any damage as usual): anything but an 8-bit
 * Huffman-coded grayscale or YCbCr JPEG; sampling factors libjpeg cannot
 * upsample (the file does not decode); a file that already has restart
 * markers; dimensions over max_pixels or NST_TRANSCODE_MAX_PIXELS; a
 * progressive file with coefficients never sent or refined (see
 * scans_complete()); coefficients baseline coding cannot hold (see
 * coefs_in_range()); any libjpeg error or any warning
 * that would fail a decode (truncation, corrupt entropy data: the error
 * manager of jpeg.c decides, as for decoding); and a rewrite that would be
 * more than an eighth (plus 4 KiB) larger than the original, as for tiny,
 * flat images where the markers would dominate (with optimized tables:
 * the last attempt). Never an error, and no
 * message in the thread's error slot (unless the output buffer cannot be
 * allocated).
 *
 * Threads: uses the calling decoder's libjpeg state (jpeg_impl.h), so the
 * thread that owns the decoder, between decodes.
 */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "decode/jpeg_impl.h"

/* One compressor per kind of Huffman tables: libjpeg-turbo fills in the
 * standard tables only where a compressor has none yet (jpeg_set_defaults
 * keeps existing ones), and optimize_coding overwrites them; so a
 * compressor that ever optimized would later write baseline files with a
 * previous image's tables, which may lack codes this one needs. */
enum { ENC_STANDARD = 0, ENC_OPTIMIZED = 1 };

typedef struct nst_jpeg_enc1 {
    struct jpeg_compress_struct cinfo; /* first: dest callbacks cast back */
    struct nst_jpeg_enc *owner;
} nst_jpeg_enc1;

struct nst_jpeg_enc {
    nst_jpeg_enc1 c[2]; /* ENC_STANDARD, ENC_OPTIMIZED; created on first use */
    int created[2];
    struct jpeg_destination_mgr dest;
    nst_buf *out;   /* the caller's buffer for this call            */
    size_t limit;   /* bytes the rewrite may take (reserved in out)  */
    size_t len;     /* bytes written, set at term_destination        */
    int full;       /* the last pass ran out of `limit`              */
};

/* The output buffer is reserved at `limit` up front; running out of it
 * means the rewrite is too large to be worth keeping: unwind, declined. */
static nst_jpeg_enc *enc_of(j_compress_ptr c) { return ((nst_jpeg_enc1 *)(void *)c)->owner; }

static void dest_init(j_compress_ptr c)
{
    nst_jpeg_enc *e = enc_of(c);
    e->dest.next_output_byte = e->out->data;
    e->dest.free_in_buffer = e->limit;
}

static boolean dest_full(j_compress_ptr c)
{
    nst_jpeg_err *err = (nst_jpeg_err *)(void *)c->err;
    enc_of(c)->full = 1;
    err->status = 0;
    longjmp(err->jmp, 1);
}

static void dest_term(j_compress_ptr c)
{
    nst_jpeg_enc *e = enc_of(c);
    e->len = e->limit - e->dest.free_in_buffer;
}

void nst_jpeg_enc_free(nst_jpeg_enc *e)
{
    if (!e) return;
    for (int k = 0; k < 2; k++)
        if (e->created[k]) jpeg_destroy_compress(&e->c[k].cinfo);
    free(e);
}

/* The rewriter, allocated on first use. */
static nst_jpeg_enc *enc_get(nst_jpeg *j)
{
    if (j->enc) return j->enc;
    nst_jpeg_enc *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->dest.init_destination = dest_init;
    e->dest.empty_output_buffer = dest_full;
    e->dest.term_destination = dest_term;
    j->enc = e;
    return e;
}

/* Compressor `k`, created on first use (under the caller's setjmp: libjpeg
 * may fail allocating, and then cleans up after itself). */
static struct jpeg_compress_struct *enc_compressor(nst_jpeg *j, nst_jpeg_enc *e, int k)
{
    nst_jpeg_enc1 *c = &e->c[k];
    if (!e->created[k]) {
        c->owner = e;
        c->cinfo.err = &j->err.pub; /* jpeg.c's handlers: same warning policy */
        jpeg_create_compress(&c->cinfo);
        e->created[k] = 1;
    }
    return &c->cinfo;
}

/* Baseline Huffman tables code DC values in at most 11 bits, whole (the
 * first of each MCU, after its restart marker) or as the difference from
 * the previous block of the component in the MCU, and AC values in at most
 * 10. So DC must lie in [-1024, 1023] (two neighbours at -1024 and +1024
 * would differ by 2048) and AC in [-1023, 1023]. Intact 8-bit data stays
 * inside (DC in [-1024, 1016], |AC| < 1000: the DCT of samples in [-128,
 * 127]); damaged or unusual entropy data can decode to more, and
 * libjpeg-turbo's encoder then writes codes its tables do not have, without
 * an error: a broken file. Such files are declined (cached as they are;
 * decoding them behaves as without the option). */
/* Exact check of one row of n blocks. */
static int row_in_range(const JCOEF *k, JDIMENSION n)
{
    for (JDIMENSION x = 0; x < n; x++, k += DCTSIZE2) {
        if (k[0] < -1024 || k[0] > 1023) return 0;
        for (int i = 1; i < DCTSIZE2; i++)
            if (k[i] < -1023 || k[i] > 1023) return 0;
    }
    return 1;
}

/* Fast screen of a row of n coefficients (its blocks are contiguous: a
 * JBLOCK is JCOEF[64]): 0 if every one is in [-1023, 1023], so the row is
 * in range; else nonzero, and row_in_range() decides (a DC may be -1024).
 * Eight at a time with SSE2 (x86-64's baseline). */
static unsigned row_screen(const JCOEF *k, size_t n)
{
    size_t i = 0;
    unsigned bad = 0;
#if defined(__SSE2__)
    const __m128i bias = _mm_set1_epi16(1023), lim = _mm_set1_epi16(2046);
    __m128i acc = _mm_setzero_si128();
    for (; i + 8 <= n; i += 8) {
        /* (k + 1023) as unsigned 16-bit, above 2046 iff k is outside */
        const __m128i v = _mm_add_epi16(_mm_loadu_si128((const __m128i *)(const void *)(k + i)), bias);
        acc = _mm_or_si128(acc, _mm_subs_epu16(v, lim));
    }
    bad = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi16(acc, _mm_setzero_si128())) != 0xFFFFu;
#endif
    for (; i < n; i++) bad |= (uint16_t)(k[i] + 1023) > 2046u;
    return bad;
}

static int coefs_in_range(j_decompress_ptr ci, jvirt_barray_ptr *coefs)
{
    for (int c = 0; c < ci->num_components; c++) {
        const jpeg_component_info *comp = &ci->comp_info[c];
        const JDIMENSION n = comp->width_in_blocks;
        for (JDIMENSION y = 0; y < comp->height_in_blocks; y++) {
            JBLOCKARRAY row =
                (*ci->mem->access_virt_barray)((j_common_ptr)ci, coefs[c], y, 1, FALSE);
            const JCOEF *k = row[0][0];
            if (row_screen(k, (size_t)n * DCTSIZE2) && !row_in_range(k, n)) return 0;
        }
    }
    return 1;
}

/* A progressive file whose scans leave coefficients unsent or unrefined is
 * decoded with block smoothing (libjpeg estimates what is missing); its
 * baseline rewrite would not be smoothed, so it would decode to other
 * pixels. libjpeg records what each coefficient received in coef_bits:
 * 0 everywhere once every bit has come. */
static int scans_complete(j_decompress_ptr ci)
{
    if (!ci->progressive_mode) return 1;
    if (!ci->coef_bits) return 0;
    for (int c = 0; c < ci->num_components; c++)
        for (int k = 0; k < DCTSIZE2; k++)
            if (ci->coef_bits[c][k] != 0) return 0;
    return 1;
}

/* Larger images are declined: reading the coefficients holds the whole
 * image's (2 bytes each: 3 bytes per pixel for 4:2:0, 6 for 4:4:4) at once,
 * where a region decode of a baseline file needs only row buffers. */
#define NST_TRANSCODE_MAX_PIXELS (1u << 25) /* 33.5 Mpixel */

static int eligible(const struct jpeg_decompress_struct *ci, uint64_t max_pixels)
{
    const uint64_t px = (uint64_t)ci->image_width * ci->image_height;
    if (px == 0 || px > max_pixels || px > NST_TRANSCODE_MAX_PIXELS) return 0;
    if (ci->data_precision != 8 || ci->arith_code || ci->restart_interval != 0) return 0;
    /* Sampling factors that do not divide the largest ones (luma 2x2 with
     * chroma 1x3): libjpeg-turbo cannot upsample them, so the file does not
     * decode (E_UNSUPPORTED), but its coefficients can be read and written:
     * a rewrite of it would not decode either. Found by fuzz_jpeg_transcode. */
    for (int c = 0; c < ci->num_components; c++) {
        const jpeg_component_info *p = &ci->comp_info[c];
        if (p->h_samp_factor < 1 || p->v_samp_factor < 1 ||
            ci->max_h_samp_factor % p->h_samp_factor != 0 ||
            ci->max_v_samp_factor % p->v_samp_factor != 0)
            return 0;
    }
    return (ci->jpeg_color_space == JCS_YCbCr && ci->num_components == 3) ||
           (ci->jpeg_color_space == JCS_GRAYSCALE && ci->num_components == 1);
}

/* One rewrite of ci's coefficients with tables `k` into e->out. Returns 1
 * (e->len set), 0 if it did not fit in e->limit, -1 on a libjpeg error.
 * Catches its own longjmps (the caller's jump target is restored on
 * return), so the caller can try again with other tables. */
static int encode_pass(nst_jpeg *j, nst_jpeg_enc *e, j_decompress_ptr ci,
                       jvirt_barray_ptr *coefs, int k)
{
    jmp_buf outer;
    memcpy(outer, j->err.jmp, sizeof outer);
    /* volatile: read after a longjmp from a libjpeg call. */
    struct jpeg_compress_struct *volatile co = NULL;
    volatile int rc = 1;
    e->full = 0;
    e->len = 0;
    if (setjmp(j->err.jmp)) {
        if (co) jpeg_abort_compress(co);
        rc = e->full ? 0 : -1;
    } else {
        co = enc_compressor(j, e, k);
        jpeg_copy_critical_parameters(ci, co);
        co->optimize_coding = k == ENC_OPTIMIZED ? TRUE : FALSE;
        co->restart_interval = 1;
        co->dest = &e->dest;
        jpeg_write_coefficients(co, coefs);
        jpeg_finish_compress(co);
    }
    memcpy(j->err.jmp, outer, sizeof outer);
    return rc;
}

int nst_decode_transcode(nst_decoder *d, const uint8_t *buf, size_t len, nst_buf *out,
                         size_t *out_len)
{
    if (!d || !buf || !out || !out_len) return 0;
    if (len < 4 || buf[0] != 0xFF || buf[1] != 0xD8 || buf[2] != 0xFF) return 0;
    const size_t slack = len / 8 + 4096;
    if ((unsigned long long)len > (unsigned long long)ULONG_MAX / 2 || len > SIZE_MAX - slack)
        return 0;
    nst_jpeg *j = d->jpeg;
    if (!j->cinfo.mem) return 0;
    nst_jpeg_reset(j); /* nothing of an earlier file's tables */
    j->err.status = 0;
    j->err.msg[0] = '\0';
    j->err.pub.num_warnings = 0;
    if (setjmp(j->err.jmp)) {
        j->huff_arm = 0;
        jpeg_abort_decompress(&j->cinfo);
        return 0;
    }
    nst_jpeg_enc *e;
    e = enc_get(j);
    if (!e) return 0;
    const size_t limit = len + slack;
    if (nst_buf_reserve(out, limit) < 0) return 0;
    e->out = out;
    e->limit = limit;

    struct jpeg_decompress_struct *ci = &j->cinfo;
    jpeg_mem_src(ci, buf, (unsigned long)len);
    jpeg_read_header(ci, TRUE);
    if (!eligible(ci, d->max_pixels)) {
        jpeg_abort_decompress(ci);
        return 0;
    }
    /* Our Huffman decoder reads the coefficients (jpeg.c's progress
     * monitor attaches it once libjpeg has set up the scan): faster, and
     * it declines what a decode would report as damaged. */
    j->huff_arm = 1;
    jvirt_barray_ptr *coefs = jpeg_read_coefficients(ci);
    j->huff_arm = 0;
    /* !coefs: suspension, which cannot happen with a memory source */
    if (!coefs || !scans_complete(ci) || !coefs_in_range(ci, coefs)) {
        jpeg_abort_decompress(ci);
        return 0;
    }
    /* Standard tables: one pass over the coefficients. Optimized tables
     * (two passes) where that does not fit, and for progressive sources,
     * which are smaller than their baseline form with standard tables. */
    int rc = ci->progressive_mode ? 0 : encode_pass(j, e, ci, coefs, ENC_STANDARD);
    if (rc == 0) rc = encode_pass(j, e, ci, coefs, ENC_OPTIMIZED);
    /* Not jpeg_finish_decompress(): trailing bytes after the last scan
     * must not matter, as for decoding. */
    jpeg_abort_decompress(ci);
    if (rc != 1) return 0;
    *out_len = e->len;
    return 1;
}
