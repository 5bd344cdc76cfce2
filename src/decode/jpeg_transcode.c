/*
 * jpeg_transcode.c — the lossless JPEG rewrite with restart markers, in
 * memory: the one implementation behind nostall_transcode_jpeg() (used by
 * `nostall transcode`, Python's nostall.transcode() and the stall analyzer's
 * restart-marker what-if) and nst_decode_transcode() (the MinIO cache's
 * cache_transcode).
 *
 * Why: region decode must entropy-decode every MCU above and beside the
 * crop (jpeg.c), about 80% of a file for RandomResizedCrop; with a restart
 * marker every MCU the fast path (jpeg_rst.c) hands libjpeg only the crop's
 * MCUs.
 *
 * How: jpeg_read_coefficients() (entropy decoding only, by jpeg_huff.c's
 * decoder for single-scan files: the coefficients, hence the pixels, are
 * exactly those of the original; its damage policy is a decode's, jpeg.c's
 * error manager), then jpeg_write_coefficients() as a baseline sequential
 * file with a restart interval of N MCUs (lowered to a divisor of the MCUs
 * per row) or N MCU rows, into the caller's buffer. Tables: libjpeg's
 * standard Huffman tables first (one pass over the coefficients); if that
 * does not fit the limit (smooth, high-quality images whose own optimized
 * tables beat the standard ones by more than the markers' cost), a second
 * pass with optimized tables (two passes: statistics, then output), from
 * the coefficients already read. Progressive sources go straight to
 * optimized tables (they are 10-15% smaller than their baseline form with
 * standard ones). Why standard first: the rewrite runs in a training job's
 * first epoch with cache_transcode, where optimized tables cost about twice
 * the CPU (measured on 500x375 files, 1.9 vs 4.2 ms) for files ~3% smaller;
 * the same policy everywhere means the analyzer's what-if measures what the
 * cache and `nostall transcode` ship. APPn and COM segments are copied
 * unless the caller drops them (the cache: nothing downstream reads them);
 * libjpeg writes its own JFIF segment (and no Adobe one: only grayscale and
 * YCbCr are rewritten), so an original JFIF APP0 is not copied twice.
 *
 * What is kept as it is (status 0, *out_len = 0, res->kept says why):
 * anything but an 8-bit Huffman-coded grayscale or YCbCr JPEG (CMYK, RGB
 * and YCCK colour transforms hang on the Adobe and JFIF markers, which a
 * rewrite would change); sampling factors libjpeg cannot upsample (the file
 * does not decode); a file that already has the restart interval asked for;
 * more pixels than max_pixels; a progressive file with coefficients never
 * sent or refined (see scans_complete()); coefficients baseline coding
 * cannot hold (see coefs_in_range()); a rewrite over the limit (the
 * caller's capacity, at most nostall_transcode_bound(len): more than an
 * eighth plus 4 KiB larger, as for tiny flat images where the markers
 * would dominate). Damage a decode would report (truncation, corrupt
 * entropy data) is an error: E_TRUNCATED or E_CORRUPT with libjpeg's words
 * in res->message. Nothing here writes the thread's error slot; the public
 * entry does.
 *
 * Threads: nst_decode_transcode() uses the calling decoder's libjpeg state
 * (jpeg_impl.h): the thread that owns the decoder, between decodes.
 * nostall_transcode_jpeg() makes its own decoder per call: any thread.
 */
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "common/error.h"
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
    uint8_t *dst; /* the caller's buffer for this call            */
    size_t limit; /* bytes the rewrite may take (dst holds them)   */
    size_t len;   /* bytes written, set at term_destination        */
    int full;     /* the last pass ran out of `limit`              */
};

/* The output buffer holds `limit` bytes; running out of it means the
 * rewrite is too large to be worth keeping: unwind, kept as it is. */
static nst_jpeg_enc *enc_of(j_compress_ptr c) { return ((nst_jpeg_enc1 *)(void *)c)->owner; }

static void dest_init(j_compress_ptr c)
{
    nst_jpeg_enc *e = enc_of(c);
    e->dest.next_output_byte = e->dst;
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
        const __m128i v =
            _mm_add_epi16(_mm_loadu_si128((const __m128i *)(const void *)(k + i)), bias);
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

/* ---- what is rewritten -------------------------------------------------- */

/* Set the result to "kept", with the table's words or a formatted detail. */
static int kept(nostall_transcode_result *res, int why, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int kept(nostall_transcode_result *res, int why, const char *fmt, ...)
{
    res->kept = why;
    res->restart_interval = 0;
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(res->message, sizeof res->message, fmt, ap);
        va_end(ap);
    } else {
        snprintf(res->message, sizeof res->message, "%s", nostall_transcode_kept_text(why));
    }
    return 0;
}

/* MCUs per row of the baseline rewrite (libjpeg's layout: one block per
 * MCU for one component, else max_h_samp_factor x 8 columns). */
static uint32_t mcus_per_row(const struct jpeg_decompress_struct *ci)
{
    if (ci->num_components == 1) return (ci->image_width + 7) / 8;
    const uint32_t w = 8u * (uint32_t)ci->max_h_samp_factor;
    return (ci->image_width + w - 1) / w;
}

/* The restart interval to write, in MCUs: restart_rows whole rows (at most
 * 65535 MCUs, libjpeg's limit, but at least one row), or the largest
 * divisor of the MCUs per row not above restart_mcus (so the intervals tile
 * each row, as the fast path needs). */
static uint32_t restart_interval(const struct jpeg_decompress_struct *ci,
                                 const nostall_transcode_options *o)
{
    uint32_t mcus = mcus_per_row(ci);
    if (mcus < 1) mcus = 1;
    if (o->restart_rows > 0) {
        uint32_t rows = o->restart_rows;
        if ((uint64_t)rows * mcus > 65535) rows = 65535 / mcus ? 65535 / mcus : 1;
        return rows * mcus;
    }
    uint32_t k = o->restart_mcus < mcus ? o->restart_mcus : mcus;
    while (k > 1 && mcus % k != 0) k--;
    return k;
}

/* 1 if the header just read is one this rewrites; else 0, and the result
 * says why not (kept). */
static int eligible(const struct jpeg_decompress_struct *ci, const nostall_transcode_options *o,
                    uint32_t interval, nostall_transcode_result *res)
{
    const char *unsupported = nostall_transcode_kept_text(NOSTALL_TRANSCODE_UNSUPPORTED);
    const uint64_t px = (uint64_t)ci->image_width * ci->image_height;
    if (px == 0 || px > o->max_pixels) {
        kept(res, NOSTALL_TRANSCODE_TOO_MANY_PIXELS, "%ux%u is more than max_pixels (%llu)",
             (unsigned)ci->image_width, (unsigned)ci->image_height,
             (unsigned long long)o->max_pixels);
        return 0;
    }
    if (ci->data_precision != 8 || ci->arith_code) {
        kept(res, NOSTALL_TRANSCODE_UNSUPPORTED, "%s (%s)", unsupported,
             ci->arith_code ? "arithmetic coding" : "not 8-bit");
        return 0;
    }
    if (!((ci->jpeg_color_space == JCS_YCbCr && ci->num_components == 3) ||
          (ci->jpeg_color_space == JCS_GRAYSCALE && ci->num_components == 1))) {
        kept(res, NOSTALL_TRANSCODE_UNSUPPORTED, "%s (%d components, libjpeg colour space %d)",
             unsupported, ci->num_components, (int)ci->jpeg_color_space);
        return 0;
    }
    /* Sampling factors that do not divide the largest ones (luma 2x2 with
     * chroma 1x3): libjpeg-turbo cannot upsample them, so the file does not
     * decode (E_UNSUPPORTED), but its coefficients can be read and written:
     * a rewrite of it would not decode either. Found by fuzz_jpeg_transcode. */
    for (int c = 0; c < ci->num_components; c++) {
        const jpeg_component_info *p = &ci->comp_info[c];
        if (p->h_samp_factor < 1 || p->v_samp_factor < 1 ||
            ci->max_h_samp_factor % p->h_samp_factor != 0 ||
            ci->max_v_samp_factor % p->v_samp_factor != 0) {
            kept(res, NOSTALL_TRANSCODE_UNSUPPORTED,
                 "%s (sampling factors libjpeg cannot "
                 "upsample)",
                 unsupported);
            return 0;
        }
    }
    if (ci->restart_interval == interval) {
        kept(res, NOSTALL_TRANSCODE_HAS_RESTARTS, "it already has a restart marker every %u MCU%s",
             (unsigned)interval, interval == 1 ? "" : "s");
        return 0;
    }
    return 1;
}

/* ---- writing -------------------------------------------------------------- */

static int is_marker(const jpeg_saved_marker_ptr m, int code, const char *id, unsigned idlen)
{
    return m->marker == code && m->data_length >= idlen && memcmp(m->data, id, idlen) == 0;
}

/* Save (on) or stop saving (off: libjpeg's default) the APPn and COM
 * segments while reading a header. */
static void save_markers(j_decompress_ptr ci, int on)
{
    const unsigned len = on ? 0xFFFF : 0;
    jpeg_save_markers(ci, JPEG_COM, len);
    for (int m = 0; m < 16; m++) jpeg_save_markers(ci, JPEG_APP0 + m, len);
}

/* One rewrite of ci's coefficients with tables `k` into e->dst. Returns 1
 * (e->len set), 0 if it did not fit in e->limit, or a status for a libjpeg
 * error. Catches its own longjmps (the caller's jump target is restored on
 * return), so the caller can try again with other tables. */
static int encode_pass(nst_jpeg *j, nst_jpeg_enc *e, j_decompress_ptr ci, jvirt_barray_ptr *coefs,
                       int k, uint32_t interval, int metadata)
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
        rc = e->full ? 0 : j->err.status < 0 ? j->err.status : NOSTALL_E_CORRUPT;
    } else {
        co = enc_compressor(j, e, k);
        jpeg_copy_critical_parameters(ci, co);
        co->optimize_coding = k == ENC_OPTIMIZED ? TRUE : FALSE;
        co->restart_interval = interval;
        co->dest = &e->dest;
        jpeg_write_coefficients(co, coefs);
        for (jpeg_saved_marker_ptr m = metadata ? ci->marker_list : NULL; m; m = m->next) {
            if (co->write_JFIF_header && is_marker(m, JPEG_APP0, "JFIF\0", 5)) continue;
            if (co->write_Adobe_marker && is_marker(m, JPEG_APP0 + 14, "Adobe", 5)) continue;
            jpeg_write_marker(co, m->marker, m->data, m->data_length);
        }
        jpeg_finish_compress(co);
    }
    memcpy(j->err.jmp, outer, sizeof outer);
    return rc;
}

/* From the header on, under the caller's setjmp: the checks, the
 * coefficients, the passes. 0 (rewritten: e->len; or kept: res), or a
 * status. */
static int rewrite(nst_jpeg *j, nst_jpeg_enc *e, const nostall_transcode_options *o,
                   nostall_transcode_result *res)
{
    struct jpeg_decompress_struct *ci = &j->cinfo;
    const int metadata = !(o->flags & NOSTALL_TRANSCODE_DROP_METADATA);
    jpeg_read_header(ci, TRUE);
    res->width = ci->image_width;
    res->height = ci->image_height;
    const uint32_t interval = restart_interval(ci, o);
    if (!eligible(ci, o, interval, res)) return 0;
    /* Our Huffman decoder reads the coefficients (jpeg.c's progress
     * monitor attaches it once libjpeg has set up the scan): faster, and
     * it finds what a decode would report as damaged. */
    j->huff_arm = 1;
    jvirt_barray_ptr *coefs = jpeg_read_coefficients(ci);
    j->huff_arm = 0;
    if (!coefs) /* suspension, which cannot happen with a memory source */
        return kept(res, NOSTALL_TRANSCODE_UNSUPPORTED, NULL);
    if (!scans_complete(ci)) return kept(res, NOSTALL_TRANSCODE_INCOMPLETE_SCANS, NULL);
    if (!coefs_in_range(ci, coefs)) return kept(res, NOSTALL_TRANSCODE_COEF_RANGE, NULL);
    int rc = 0;
    if (!ci->progressive_mode) rc = encode_pass(j, e, ci, coefs, ENC_STANDARD, interval, metadata);
    res->optimized = rc == 0;
    if (rc == 0) rc = encode_pass(j, e, ci, coefs, ENC_OPTIMIZED, interval, metadata);
    if (rc < 0) return rc;
    if (rc == 0)
        return kept(res, NOSTALL_TRANSCODE_TOO_LARGE, "the rewrite would take more than %zu bytes",
                    e->limit);
    res->restart_interval = interval;
    return 0;
}

/* A status the error manager set: kept for what is not damage. */
static int after_error(nostall_transcode_result *res, int status, const char *msg)
{
    if (status == NOSTALL_E_UNSUPPORTED)
        return kept(res, NOSTALL_TRANSCODE_UNSUPPORTED, "%s (%s)",
                    nostall_transcode_kept_text(NOSTALL_TRANSCODE_UNSUPPORTED), msg);
    if (status == NOSTALL_E_TOO_MANY_PIXELS)
        return kept(res, NOSTALL_TRANSCODE_TOO_MANY_PIXELS, "%s", msg);
    if (status >= 0) status = NOSTALL_E_CORRUPT;
    res->status = status;
    snprintf(res->message, sizeof res->message, "%s", msg);
    return status;
}

/* Header to output under one setjmp (libjpeg's errors land here): 0 or a
 * status, as jpeg_transcode(). */
static int guarded(nst_jpeg *j, const uint8_t *buf, size_t len, const nostall_transcode_options *o,
                   nostall_transcode_result *res)
{
    const int metadata = !(o->flags & NOSTALL_TRANSCODE_DROP_METADATA);
    volatile int rc = 0;
    nst_jpeg_reset(j); /* nothing of an earlier file's tables */
    j->err.status = 0;
    j->err.msg[0] = '\0';
    j->err.pub.num_warnings = 0;
    if (setjmp(j->err.jmp)) {
        j->huff_arm = 0;
        rc = after_error(res, j->err.status, j->err.msg);
    } else {
        jpeg_mem_src(&j->cinfo, buf, (unsigned long)len);
        if (metadata) save_markers(&j->cinfo, 1);
        rc = rewrite(j, j->enc, o, res);
    }
    /* Not jpeg_finish_decompress(): trailing bytes after the last scan
     * must not matter, as for decoding. */
    jpeg_abort_decompress(&j->cinfo);
    if (metadata) save_markers(&j->cinfo, 0);
    return rc;
}

/* The rewrite of buf[0..len) into dst[0..cap) with the decoder's libjpeg
 * state and resolved options: 0 (rewritten, *out_len > 0; or kept,
 * *out_len = 0 and res says why), or a status with res->message (damaged,
 * not a JPEG, out of memory). The thread's error slot is left alone. */
static int jpeg_transcode(nst_decoder *d, const uint8_t *buf, size_t len,
                          const nostall_transcode_options *o, uint8_t *dst, size_t cap,
                          size_t *out_len, nostall_transcode_result *res)
{
    memset(res, 0, sizeof *res);
    *out_len = 0;
    if (len < 4 || buf[0] != 0xFF || buf[1] != 0xD8 || buf[2] != 0xFF) {
        snprintf(res->message, sizeof res->message, "not a JPEG (it does not start with FF D8 FF)");
        return res->status = NOSTALL_E_NOT_IMAGE;
    }
    const size_t bound = nostall_transcode_bound(len);
    if ((unsigned long long)len > (unsigned long long)ULONG_MAX / 2 || bound == SIZE_MAX)
        return kept(res, NOSTALL_TRANSCODE_TOO_LARGE, "the file is too large to rewrite");
    nst_jpeg *j = d->jpeg;
    nst_jpeg_enc *e = j->cinfo.mem ? enc_get(j) : NULL;
    if (!e) {
        snprintf(res->message, sizeof res->message, "out of memory");
        return res->status = NOSTALL_E_NOMEM;
    }
    e->dst = dst;
    e->limit = cap < bound ? cap : bound;
    const int rc = guarded(j, buf, len, o, res);
    if (rc == 0 && res->restart_interval) *out_len = e->len;
    return rc;
}

/* ---- the entries -------------------------------------------------------- */

size_t nostall_transcode_bound(size_t src_len)
{
    const size_t slack = src_len / 8 + 4096;
    return src_len > SIZE_MAX - slack ? SIZE_MAX : src_len + slack;
}

const char *nostall_transcode_kept_text(int why)
{
    switch (why) {
#define NST_KEPT_CASE_(name, value, msg)                                                           \
    case value: return msg;
        NOSTALL_TRANSCODE_KEPT_TABLE(NST_KEPT_CASE_)
#undef NST_KEPT_CASE_
    }
    return "unknown";
}

/* The caller's options (opts_size bytes of them) with the defaults filled
 * in; E_INVALID naming a value out of range. */
static int resolve(nostall_transcode_options *o, const nostall_transcode_options *opts,
                   size_t opts_size)
{
    memset(o, 0, sizeof *o);
    if (opts) memcpy(o, opts, opts_size < sizeof *o ? opts_size : sizeof *o);
    if (o->restart_mcus && o->restart_rows)
        return nst_error(NOSTALL_E_INVALID,
                         "nostall_transcode_jpeg: restart_mcus (%u) and "
                         "restart_rows (%u) exclude each other",
                         o->restart_mcus, o->restart_rows);
    if (o->restart_mcus > 65535 || o->restart_rows > 65535)
        return nst_error(NOSTALL_E_INVALID, "nostall_transcode_jpeg: restart_%s %u is over 65535",
                         o->restart_mcus ? "mcus" : "rows",
                         o->restart_mcus ? o->restart_mcus : o->restart_rows);
    if (o->flags & ~NOSTALL_TRANSCODE_DROP_METADATA)
        return nst_error(NOSTALL_E_INVALID, "nostall_transcode_jpeg: unknown flags 0x%x", o->flags);
    if (!o->restart_rows && !o->restart_mcus) o->restart_mcus = 1;
    if (!o->max_pixels) o->max_pixels = NOSTALL_TRANSCODE_MAX_PIXELS;
    return 0;
}

int nostall_transcode_jpeg(void *dst, size_t dst_cap, size_t *dst_len, const void *src,
                           size_t src_len, const nostall_transcode_options *opts, size_t opts_size,
                           nostall_transcode_result *res, size_t res_size)
{
    nst_error_clear();
    nostall_transcode_result r;
    memset(&r, 0, sizeof r);
    if (dst_len) *dst_len = 0;
    nostall_transcode_options o;
    int rc = resolve(&o, opts, opts_size);
    if (rc == 0 && (!dst_len || !src || (!dst && dst_cap)))
        rc = nst_error(NOSTALL_E_INVALID, "nostall_transcode_jpeg: NULL argument");
    nst_decoder *d = NULL;
    /* its own decoder (about 50 KB, a few us): calls stay independent */
    if (rc == 0) rc = nst_decoder_create(&d, o.max_pixels);
    if (rc == 0) {
        rc = jpeg_transcode(d, src, src_len, &o, dst, dst_cap, dst_len, &r);
        if (rc < 0) nst_error(rc, "nostall_transcode_jpeg: %s", r.message);
    }
    nst_decoder_free(d);
    if (rc < 0) {
        r.status = rc;
        if (!r.message[0]) snprintf(r.message, sizeof r.message, "%s", nostall_last_error());
    }
    if (res) memcpy(res, &r, res_size < sizeof r ? res_size : sizeof r);
    return rc;
}

int nst_decode_transcode(nst_decoder *d, const uint8_t *buf, size_t len, nst_buf *out,
                         size_t *out_len)
{
    if (!d || !buf || !out || !out_len) return 0;
    *out_len = 0;
    /* the cache's placement of the one policy: a marker every MCU, the
     * decoder's pixel limit too, no metadata (nothing downstream reads it) */
    const nostall_transcode_options o = {.restart_mcus = 1,
                                         .max_pixels = d->max_pixels < NOSTALL_TRANSCODE_MAX_PIXELS
                                                           ? d->max_pixels
                                                           : NOSTALL_TRANSCODE_MAX_PIXELS,
                                         .flags = NOSTALL_TRANSCODE_DROP_METADATA};
    const size_t bound = nostall_transcode_bound(len);
    if (bound == SIZE_MAX || nst_buf_reserve(out, bound) < 0) return 0;
    nostall_transcode_result r;
    const int rc = jpeg_transcode(d, buf, len, &o, out->data, bound, out_len, &r);
    return rc == 0 && *out_len > 0;
}
