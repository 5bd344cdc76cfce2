/*
 * jpeg_huff.c — nostall's own Huffman decoder for sequential JPEG scans,
 * put in the place of libjpeg-turbo's (cinfo->entropy->decode_mcu) after
 * jpeg_start_decompress(). libjpeg keeps everything else: markers, the
 * inverse DCT, upsampling, colour conversion, cropping and skipping. The
 * coefficients are the ones libjpeg's decoder would produce, so the pixels
 * are identical (tests/test_huff.c compares both on every layout).
 *
 * Why: entropy decoding is most of the time of a region decode (the rows
 * above a crop and the columns beside it cannot be skipped without restart
 * markers). Three things make this one faster than libjpeg-turbo 2.1's:
 *   - one table lookup decodes a whole symbol, its magnitude bits and the
 *     coefficient value when they fit in NST_HUFF_FAST_BITS (most symbols of
 *     photographs), often two symbols, or a symbol and the end of the
 *     block, without a branch between those cases; the next lookup
 *     depends only on a shift;
 *   - blocks whose coefficients nobody uses (rows skipped above a crop,
 *     MCU columns beside it, AC terms at the 1/8 DCT scale) only measure
 *     their symbols: DC is still decoded, as prediction needs it;
 *   - the entropy-coded segment is unstuffed (FF 00 -> FF) into a buffer a
 *     chunk at a time, so the bit reader refills without looking for
 *     markers, and restart intervals do not fall back to a slow path.
 *
 * Which files: baseline and extended sequential Huffman JPEGs with one
 * scan (everything but progressive, arithmetic-coded, multi-scan and
 * 12-bit files, which keep libjpeg's decoder). Tables are libjpeg's own
 * (cinfo->*_huff_tbl_ptrs after start_pass, standard tables filled in),
 * built into lookup tables kept in a small per-decoder cache keyed by
 * their contents, so a dataset with the usual standard tables builds them
 * once.
 *
 * Damage: an invalid code, data that runs out inside the scan (a marker or
 * the end of the file where bits are needed), bytes left over before a
 * restart marker, and a restart marker that is wrong or missing (another
 * marker, or the end of the data, where one is due: a DRI segment without
 * RSTn markers in the data) are reported through libjpeg's warnings
 * (JWRN_HUFF_BAD_CODE, JWRN_HIT_MARKER / JWRN_JPEG_EOF,
 * JWRN_EXTRANEOUS_DATA, JWRN_MUST_RESYNC), in the order libjpeg-turbo
 * reports them, which jpeg.c turns into a bad item (the one warning it
 * lets pass, extraneous bytes before a marker other than RSTn, is always
 * followed here by JWRN_MUST_RESYNC, as in libjpeg). An invalid code is
 * always reported, where libjpeg-turbo's fast path turns it into 0
 * silently, and so are 0xFF fill bytes before a stuffed zero (FF FF 00),
 * which libjpeg-turbo decodes to coefficients of two readings mixed
 * (NST_JWRN_FILL_IN_DATA, see unstuff_more; found by fuzz_jpeg_diff);
 * fewer than NST_HUFF_RST_SLACK bytes before a restart marker are
 * dropped, as libjpeg does. If a warning were let through, the rest
 * of the restart interval (or scan) decodes as zeros (libjpeg's
 * "insufficient data" behaviour).
 *
 * Memory: the per-decoder state (tables, the unstuffed-segment buffer,
 * grow-only) is allocated on first use; decoding allocates nothing. The
 * bit reader never reads outside the buffer: before each MCU at least
 * NST_HUFF_MCU_MAX bytes lie beyond the read position, real or zero
 * padding, and no MCU can consume more.
 *
 * Threads: per decoder, like the rest of jpeg.c. The tables are built at
 * run time; nothing here is static and mutable.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "common/testhooks.h"

#ifdef NST_NO_JPEGINT
/* Built without jpegint.h (CMakeLists.txt): libjpeg decodes everything. */
#include "decode/jpeg_impl.h"
int nst_jpeg_huff_attach(nst_jpeg *j, int every_block)
{
    (void)j;
    (void)every_block;
    return 0;
}
void nst_jpeg_huff_progress(nst_jpeg *j) { j->huff_arm = 0; }
void nst_jpeg_huff_free(nst_jpeg_huff *h) { (void)h; }
uint64_t nst_jpeg_huff_scans(const nst_jpeg_huff *h)
{
    (void)h;
    return 0;
}
#else

#include <jerror.h>
/* jpeglib.h then includes jpegint.h (installed by Debian's
 * libjpeg62-turbo-dev): the entropy decoder, master and input controller
 * structs and the decompressor states. */
#define JPEG_INTERNALS
#include "decode/jpeg_impl.h"

/* Index bits of the one-lookup tables: 2^11 entries of 4 bytes, 8 KiB per
 * table. Codes plus magnitude bits up to this long decode in one step. */
#ifndef NST_HUFF_FAST_BITS
#define NST_HUFF_FAST_BITS 11
#endif
#define FAST_BITS NST_HUFF_FAST_BITS

/* The most bytes one MCU can consume: 10 blocks of one DC symbol and at
 * most 63 AC symbols, each at most 16 code + 15 magnitude bits, rounded up,
 * plus the 8 bytes a refill reads ahead. */
#define NST_HUFF_MCU_MAX 4096
/* Zero bytes after the end of a segment's data (a refill never reads
 * further than one MCU plus 8 bytes past it). */
#define NST_HUFF_PAD (NST_HUFF_MCU_MAX + 64)
/* The hot helpers are inlined into both builds of decode_mcu (plain
 * x86-64 and BMI2, see decode_mcu_body). */
#define HOT static inline __attribute__((always_inline))

/* Bytes unstuffed per refill of the segment buffer. */
#define NST_HUFF_CHUNK 16384
/* Bytes after a restart interval's data and before its RSTn marker that
 * are dropped silently: libjpeg-turbo's bit reader has read up to 7 bytes
 * ahead by then and discards them without a warning (the interval was
 * complete, the pixels are right); more is reported as damage, as libjpeg
 * reports it. */
#define NST_HUFF_RST_SLACK 8
/* h->marker for a segment that ends at 0xFF fill bytes followed by 0x00
 * (FF FF 00): not a marker, not a data byte either (see unstuff_more). */
#define NST_HUFF_FILL_00 0x100
/* Built tables kept per decoder: a scan uses at most 8 (4 DC + 4 AC). */
#define NST_HUFF_CACHE 8

/* Table entry: bits 0-5 how many bits the entry consumes (at most 31, so a
 * shift by the whole entry, masked to 6 bits as shlx does, is a shift by
 * it), bits 6-7 its kind:
 *   SMALL one or two AC symbols with values within +-63, decoded the same
 *         way, without a branch between the cases (build_small()): run r1
 *         (bits 8-11) and value v1 (bits 17-23) of the first; the second
 *         written d2 (bits 12-16) positions after it, value v2 (bits
 *         24-30): a second symbol has d2 = r2 + 1, and a lone one d2 = 0,
 *         v2 = v1 (the same write again); bit 31: an end of block follows;
 *   FULL  one symbol, code and magnitude bits inside the index: run r
 *         (bits 8-11), size s (bits 12-15), value (bits 16-31);
 *   EOB   an AC symbol with s = 0, r != 15: end of block (code length);
 *   PART  a symbol whose code is inside the index but whose magnitude bits
 *         are not: length code + s, r, s, no value.
 * An entry of 0 is a code longer than FAST_BITS: decode_long(). */
enum {
    K_PART = 0u << 6,
    K_FULL = 1u << 6,
    K_EOB = 2u << 6,
    K_SMALL = 3u << 6,
};
#define E_KIND(e) ((e) & (3u << 6))
#define S_D2(e) (((e) >> 12) & 31u)
#define S_V1(e) ((int32_t)((e) << 8) >> 25)
#define S_V2(e) ((int32_t)((e) << 1) >> 25)
#define S_EOB(e) ((e) >> 31)
/* a second symbol or an end of block follows the first */
#define S_MORE(e) (((e) & (31u << 12 | 1u << 31)) != 0)
#define E_LEN(e) ((e)&63u)
#define E_RUN(e) (((e) >> 8) & 15u)
#define E_SIZE(e) (((e) >> 12) & 15u)
#define E_VALUE(e) ((int32_t)(e) >> 16)

typedef struct huff_table {
    uint32_t fast[1u << FAST_BITS];
    int32_t maxcode[18]; /* largest code of each length; -1: none       */
    int32_t valoffset[17];
    /* the key: libjpeg's table (class, counts, symbols; vals also decodes) */
    int used;      /* slot holds a table                           */
    uint64_t scan; /* the last scan (attach) that looked it up     */
    int is_dc;
    uint8_t bits[17];
    uint8_t vals[256];
} huff_table;

/* The bit reader: `bits` holds `nbits` valid bits, next bit at the top;
 * `ptr` is the next byte of the segment buffer not yet in `bits`. */
typedef struct bitreader {
    uint64_t bits;
    unsigned nbits;
    const uint8_t *ptr;
} bitreader;

struct nst_jpeg_huff {
    huff_table tables[NST_HUFF_CACHE];
    unsigned next_slot; /* round-robin replacement               */
    /* the scan */
    const huff_table *dc[D_MAX_BLOCKS_IN_MCU], *ac[D_MAX_BLOCKS_IN_MCU];
    int comp[D_MAX_BLOCKS_IN_MCU]; /* MCU_membership                  */
    int dc_needed[D_MAX_BLOCKS_IN_MCU], ac_needed[D_MAX_BLOCKS_IN_MCU];
    int blocks;
    int dc_pred[MAX_COMPS_IN_SCAN];
    unsigned restarts_to_go, next_rst;
    JDIMENSION mcu_col, mcus_per_row;
    uint64_t mcus_left;
    int dead;        /* a warning was let through: zeros      */
    int every_block; /* store all blocks (read_coefficients)  */
    /* the segment: raw bytes from libjpeg's source, unstuffed into seg */
    const uint8_t *raw, *raw_end;
    nst_buf seg;
    size_t seg_len;              /* real (unstuffed) bytes in seg         */
    int seg_done;                /* the segment's end was found           */
    int marker;                  /* the marker that ended it; 0: the end of
                                     the data                              */
    const uint8_t *marker_at;    /* its first 0xFF in the raw data        */
    const uint8_t *after_marker; /* the byte after its code               */
    bitreader br;
    uint64_t attached; /* scans decoded here (tests)            */
    uint64_t scan;     /* attach calls: pins the scan's tables  */
    boolean (*decode_mcu)(j_decompress_ptr, JBLOCKROW *); /* this CPU's build */
};

/* Zigzag index to natural (row-major) index, with 16 extra entries for a
 * run that carries k past 63 in damaged data (libjpeg writes those to 63
 * as well, so damaged blocks still match). */
static const uint8_t natural_order[64 + 16] = {0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25,
                                               18, 11, 4,  5,  12, 19, 26, 33, 40, 48, 41, 34,
                                               27, 20, 13, 6,  7,  14, 21, 28, 35, 42, 49, 56,
                                               57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51,
                                               58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54,
                                               47, 55, 62, 63, 63, 63, 63, 63, 63, 63, 63, 63,
                                               63, 63, 63, 63, 63, 63, 63, 63};

/* Figure F.12: the s magnitude bits v as a signed value. */
HOT int32_t extend(uint32_t v, unsigned s)
{
    return v < (1u << (s - 1)) ? (int32_t)v - (int32_t)((1u << s) - 1) : (int32_t)v;
}

/* ---- tables -------------------------------------------------------------- */

/* AC tables: FULL entries with values within +-63 become SMALL ones, with
 * a second symbol when the index has room for it: a FULL one within +-63
 * (ZRL included), or an end of block. The second symbol is read from the
 * single-symbol entry of the bits after the first (the rest of the index,
 * zero-filled: an entry no longer than the bits known is decided by them
 * alone). */
static void build_small(huff_table *t)
{
    uint32_t *f = t->fast;
    uint32_t single[1u << FAST_BITS];
    memcpy(single, f, sizeof single);
    for (uint32_t i = 0; i < (1u << FAST_BITS); i++) {
        const uint32_t e1 = single[i];
        if (E_KIND(e1) != K_FULL) continue;
        const unsigned l1 = E_LEN(e1);
        const int32_t v1 = E_VALUE(e1);
        if (v1 < -63 || v1 > 63) continue;
        uint32_t len = l1, d2 = 0, eob = 0;
        int32_t v2 = v1;
        if (l1 < FAST_BITS) {
            const uint32_t e2 = single[(i << l1) & ((1u << FAST_BITS) - 1)];
            const unsigned l2 = E_LEN(e2);
            if (l2 <= FAST_BITS - l1) {
                if (E_KIND(e2) == K_FULL && E_VALUE(e2) >= -63 && E_VALUE(e2) <= 63) {
                    len += l2;
                    d2 = E_RUN(e2) + 1;
                    v2 = E_VALUE(e2);
                } else if (E_KIND(e2) == K_EOB) {
                    len += l2;
                    eob = 1;
                }
            }
        }
        f[i] = K_SMALL | len | E_RUN(e1) << 8 | d2 << 12 | ((uint32_t)v1 & 127u) << 17 |
               ((uint32_t)v2 & 127u) << 24 | eob << 31;
    }
}

/* Build t from libjpeg's table (which libjpeg has already checked when it
 * built its own). 0, or -1 for a table we refuse (then libjpeg decodes). */
static int build_table(huff_table *t, const JHUFF_TBL *src, int is_dc)
{
    unsigned count = 0;
    for (int l = 1; l <= 16; l++) count += src->bits[l];
    if (count > 256) return -1;
    memset(t->fast, 0, sizeof t->fast);
    uint32_t code = 0;
    unsigned p = 0;
    for (int l = 1; l <= 16; l++) {
        const unsigned n = src->bits[l];
        /* every code of length l must fit in l bits */
        if (code + n > (1u << l)) return -1;
        t->valoffset[l] = (int32_t)p - (int32_t)code;
        t->maxcode[l] = n ? (int32_t)(code + n - 1) : -1;
        for (unsigned i = 0; i < n; i++, p++, code++) {
            const unsigned sym = src->huffval[p];
            const unsigned r = is_dc ? 0 : sym >> 4, s = is_dc ? sym : sym & 15;
            if (is_dc && sym > 15) return -1;
            if (l > FAST_BITS) continue;
            const unsigned shift = FAST_BITS - (unsigned)l;
            const uint32_t first = code << shift;
            if (s == 0) {
                /* DC difference 0, AC ZRL (a zero written 15 on, then one
                 * more: 16 positions) or end of block. */
                const uint32_t e =
                    (!is_dc && r != 15) ? K_EOB | (uint32_t)l : K_FULL | (uint32_t)l | r << 8;
                for (uint32_t x = 0; x < (1u << shift); x++) t->fast[first + x] = e;
            } else if ((unsigned)l + s <= FAST_BITS) {
                const unsigned rest = shift - s;
                for (uint32_t v = 0; v < (1u << s); v++) {
                    const uint32_t e = K_FULL | ((uint32_t)l + s) | r << 8 | s << 12 |
                                       (uint32_t)extend(v, s) << 16;
                    const uint32_t base = first | v << rest;
                    for (uint32_t x = 0; x < (1u << rest); x++) t->fast[base + x] = e;
                }
            } else {
                const uint32_t e = ((uint32_t)l + s) | r << 8 | s << 12; /* PART */
                for (uint32_t x = 0; x < (1u << shift); x++) t->fast[first + x] = e;
            }
        }
        code <<= 1;
    }
    t->maxcode[0] = -1;
    t->maxcode[17] = INT32_MAX; /* never reached: decode_long stops at 16 */
    if (!is_dc) build_small(t);
    t->is_dc = is_dc;
    memcpy(t->bits, src->bits, sizeof t->bits);
    memcpy(t->vals, src->huffval, sizeof t->vals);
    t->used = 1;
    return 0;
}

/* The built table for libjpeg's `src`, from the cache or built into a slot
 * no table of this scan uses (a scan needs at most 8, the cache holds 8:
 * slots looked up for it carry its generation and are never taken). NULL
 * if refused. */
static const huff_table *get_table(nst_jpeg_huff *h, const JHUFF_TBL *src, int is_dc)
{
    if (!src) return NULL;
    for (unsigned i = 0; i < NST_HUFF_CACHE; i++) {
        huff_table *t = &h->tables[i];
        if (t->used && t->is_dc == is_dc && !memcmp(t->bits, src->bits, sizeof t->bits) &&
            !memcmp(t->vals, src->huffval, sizeof t->vals)) {
            t->scan = h->scan;
            return t;
        }
    }
    for (unsigned n = 0; n < NST_HUFF_CACHE; n++) {
        huff_table *t = &h->tables[h->next_slot];
        h->next_slot = (h->next_slot + 1) % NST_HUFF_CACHE;
        if (t->used && t->scan == h->scan) continue;
        t->used = 0;
        if (build_table(t, src, is_dc) < 0) return NULL;
        t->scan = h->scan;
        return t;
    }
    return NULL; /* cannot happen: at most 8 tables per scan */
}

/* ---- the segment buffer -------------------------------------------------- */

/* Unstuff about NST_HUFF_CHUNK more bytes of the current segment into
 * h->seg, or up to its end: a marker (0xFF then neither 0x00 nor 0xFF),
 * 0xFF fill bytes before 0x00 (FF FF 00, which the standard does not
 * allow inside entropy-coded data: libjpeg-turbo reads it as one 0xFF
 * data byte in its slow path and as a marker in its fast path, and mixes
 * the two MCUs' coefficients; here it ends the data: a block that needs
 * bits beyond it is damaged, NST_JWRN_FILL_IN_DATA) or the end of the
 * data. At the end, NST_HUFF_PAD zero bytes follow the data
 * (libjpeg too feeds zeros past the end; a read of them is reported). The
 * buffer was sized at attach for the whole remaining input plus padding,
 * and unstuffing only shrinks, so nothing here can overflow. */
static void unstuff_more(nst_jpeg_huff *h)
{
    uint8_t *out = h->seg.data;
    size_t len = h->seg_len;
    const size_t target = len + NST_HUFF_CHUNK;
    const uint8_t *raw = h->raw, *end = h->raw_end;
    while (len < target) {
        const uint8_t *ff = memchr(raw, 0xFF, (size_t)(end - raw));
        const size_t n = (size_t)((ff ? ff : end) - raw);
        memcpy(out + len, raw, n);
        len += n;
        raw += n;
        if (!ff) {
            h->seg_done = 1;
            h->marker = 0;
            h->marker_at = h->after_marker = end;
            break;
        }
        /* 0xFF: fill bytes, then 0x00 (a data byte 0xFF) or a marker code */
        const uint8_t *q = ff + 1;
        while (q < end && *q == 0xFF) q++;
        if (q == end) {
            h->seg_done = 1;
            h->marker = 0;
            h->marker_at = h->after_marker = end;
            raw = ff;
            break;
        }
        if (*q == 0 && q == ff + 1) {
            out[len++] = 0xFF;
            raw = q + 1;
            continue;
        }
        h->seg_done = 1;
        h->marker = *q ? *q : NST_HUFF_FILL_00;
        h->marker_at = ff;
        h->after_marker = q + 1;
        raw = ff;
        break;
    }
    h->raw = raw;
    h->seg_len = len;
    if (h->seg_done) memset(out + len, 0, NST_HUFF_PAD);
}

/* Start the segment at h->raw: empty buffer, bit reader at its start. */
static void start_segment(nst_jpeg_huff *h)
{
    h->seg_len = 0;
    h->seg_done = 0;
    h->marker = 0;
    h->marker_at = h->after_marker = NULL;
    unstuff_more(h);
    h->br.bits = 0;
    h->br.nbits = 0;
    h->br.ptr = h->seg.data;
}

/* Bits the reader has consumed from the segment. */
static inline uint64_t consumed_bits(const nst_jpeg_huff *h, const bitreader *b)
{
    return (uint64_t)(b->ptr - h->seg.data) * 8u - b->nbits;
}

/* ---- the bit reader ------------------------------------------------------ */

HOT uint64_t load_be64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return __builtin_bswap64(v);
}

/* At least 56 valid bits afterwards. The bytes re-read into the low bits
 * are the same each time, so or-ing them in again is harmless. */
HOT void refill(bitreader *b)
{
    b->bits |= load_be64(b->ptr) >> b->nbits;
    b->ptr += (63u - b->nbits) >> 3;
    b->nbits |= 56u;
}

/* At least 32 valid bits: enough for any one symbol with its magnitude
 * bits (a refill is a load and a few operations on the chain from one
 * symbol to the next; skipping it while 32 bits remain pays). */
HOT void refill32(bitreader *b)
{
    if (b->nbits < 32) refill(b);
}

HOT void consume(bitreader *b, unsigned n)
{
    b->bits <<= n;
    b->nbits -= n;
}

/* A code longer than FAST_BITS (the reader holds at least 16 bits):
 * the symbol and *len its length, or -1 for an invalid code. */
static int decode_long(const huff_table *t, uint64_t bits, unsigned *len)
{
    for (unsigned l = FAST_BITS + 1; l <= 16; l++) {
        const int32_t code = (int32_t)(bits >> (64 - l));
        if (code <= t->maxcode[l]) {
            *len = l;
            return t->vals[(code + t->valoffset[l]) & 0xFF];
        }
    }
    return -1;
}

/* ---- blocks -------------------------------------------------------------- */

/* A bad code: warn (jpeg.c makes it fatal). If the warning is let through,
 * the scan continues as zeros. */
static void bad_code(j_decompress_ptr ci, nst_jpeg_huff *h)
{
    WARNMS(ci, JWRN_HUFF_BAD_CODE);
    h->dead = 1;
}

/* The DC difference of one block, or 0 with h->dead set. */
HOT int32_t decode_dc(j_decompress_ptr ci, nst_jpeg_huff *h, bitreader *b, const huff_table *t)
{
    refill32(b);
    const uint32_t e = t->fast[b->bits >> (64 - FAST_BITS)];
    if (__builtin_expect(E_KIND(e) == K_FULL, 1)) { /* DC tables have no pairs */
        consume(b, E_LEN(e));
        return E_VALUE(e);
    }
    unsigned len, s;
    if (e) { /* PART */
        len = E_LEN(e);
        s = E_SIZE(e);
    } else {
        unsigned cl;
        const int sym = decode_long(t, b->bits, &cl);
        if (sym < 0) {
            bad_code(ci, h);
            return 0;
        }
        s = (unsigned)sym; /* <= 15: build_table refuses more */
        len = cl + s;
        if (s == 0) {
            consume(b, len);
            return 0;
        }
    }
    const uint32_t v = (uint32_t)(b->bits >> (64 - len)) & ((1u << s) - 1);
    consume(b, len);
    return extend(v, s);
}

/* One AC symbol by the canonical code alone (any length): the rare case
 * of a SMALL entry whose first symbol ends the block (k reaches 64, so
 * what follows is the next block's). Returns the symbol with *len its code
 * length, or -1 for an invalid code. */
static int decode_any(const huff_table *t, uint64_t bits, unsigned *len)
{
    for (unsigned l = 1; l <= 16; l++) {
        const int32_t code = (int32_t)(bits >> (64 - l));
        if (code <= t->maxcode[l]) {
            *len = l;
            return t->vals[(code + t->valoffset[l]) & 0xFF];
        }
    }
    return -1;
}

/* The AC coefficients of one block into blk (zeroed by libjpeg). 0, or -1
 * on a bad code. */
HOT int decode_ac(bitreader *b, const huff_table *t, JCOEF *blk)
{
    unsigned k = 1;
    do {
        refill32(b);
        const uint32_t e = t->fast[b->bits >> (64 - FAST_BITS)];
        const uint32_t kind = E_KIND(e);
        if (__builtin_expect(kind == K_SMALL, 1)) {
            const unsigned k1 = k + E_RUN(e);
            if (__builtin_expect(k1 + S_MORE(e) < 64, 1)) {
                blk[natural_order[k1]] = (JCOEF)S_V1(e);
                const unsigned k2 = k1 + S_D2(e);
                blk[natural_order[k2]] = (JCOEF)S_V2(e);
                k = k2 + 1 + (S_EOB(e) << 6);
                consume(b, E_LEN(e));
                continue;
            }
        } else if (kind == K_FULL) {
            k += E_RUN(e);
            blk[natural_order[k]] = (JCOEF)E_VALUE(e);
            k++;
            consume(b, E_LEN(e));
            continue;
        } else if (kind == K_EOB) {
            consume(b, E_LEN(e));
            break;
        }
        unsigned len, r, s;
        if (kind == K_PART && e) {
            len = E_LEN(e);
            r = E_RUN(e);
            s = E_SIZE(e);
        } else {
            /* a long code, or a SMALL entry whose first symbol ends the block */
            unsigned cl;
            const int sym =
                kind == K_SMALL ? decode_any(t, b->bits, &cl) : decode_long(t, b->bits, &cl);
            if (sym < 0) return -1;
            r = (unsigned)sym >> 4;
            s = (unsigned)sym & 15;
            len = cl + s;
            if (s == 0) {
                consume(b, cl);
                if (r != 15) break;
                k += 16;
                continue;
            }
        }
        const uint32_t v = (uint32_t)(b->bits >> (64 - len)) & ((1u << s) - 1);
        k += r;
        blk[natural_order[k]] = (JCOEF)extend(v, s);
        k++;
        consume(b, len);
    } while (k < 64);
    return 0;
}

/* The same symbols, measured only. 0, or -1 on a bad code. A loop of its
 * own rather than decode_ac with a flag: it never extracts a value, so FULL
 * and PART entries are one case and its slow path is shorter. */
HOT int skip_ac(bitreader *b, const huff_table *t)
{
    unsigned k = 1;
    do {
        refill32(b);
        const uint32_t e = t->fast[b->bits >> (64 - FAST_BITS)];
        const uint32_t kind = E_KIND(e);
        if (__builtin_expect(kind == K_SMALL, 1)) {
            const unsigned k1 = k + E_RUN(e);
            if (__builtin_expect(k1 + S_MORE(e) < 64, 1)) {
                k = k1 + S_D2(e) + 1 + (S_EOB(e) << 6);
                consume(b, E_LEN(e));
                continue;
            }
        } else if (kind == K_EOB) {
            consume(b, E_LEN(e));
            break;
        } else if (e != 0) { /* FULL or PART */
            k += E_RUN(e) + 1;
            consume(b, E_LEN(e));
            continue;
        }
        unsigned cl;
        const int sym = kind == K_SMALL ? decode_any(t, b->bits, &cl) : decode_long(t, b->bits, &cl);
        if (sym < 0) return -1;
        const unsigned r = (unsigned)sym >> 4, s = (unsigned)sym & 15;
        consume(b, cl + s);
        if (s == 0 && r != 15) break;
        k += r + 1;
    } while (k < 64);
    return 0;
}

/* ---- MCUs ---------------------------------------------------------------- */

/* The restart marker due before this MCU (libjpeg's process_restart): the
 * interval's data must be used up (to the padding bits of its last byte)
 * and end at the expected RSTn. */
static void restart(j_decompress_ptr ci, nst_jpeg_huff *h)
{
    while (!h->seg_done) unstuff_more(h);
    const uint64_t used = (consumed_bits(h, &h->br) + 7) / 8;
    const int want = 0xD0 + (int)h->next_rst;
    if (h->marker == NST_HUFF_FILL_00) {
        /* FF FF 00 in the interval: its data ends there */
        WARNMS(ci, NST_JWRN_FILL_IN_DATA);
        h->dead = 1;
        return;
    }
    if (!h->dead && used + NST_HUFF_RST_SLACK <= h->seg_len) {
        /* the decoder finished the interval well before its end: it lost
         * sync (a few bytes are dropped, as libjpeg does). jpeg.c lets this
         * warning pass before a marker other than RSTn (then the check
         * below reports the marker, as libjpeg does next). */
        WARNMS2(ci, JWRN_EXTRANEOUS_DATA, (int)(h->seg_len - used), h->marker);
    }
    if (h->marker != want) {
        /* another marker, the end of the data (0) or the wrong RSTn:
         * libjpeg's "found marker 0x.. instead of RSTn", also after
         * damage it has already reported */
        WARNMS2(ci, JWRN_MUST_RESYNC, h->marker, (int)h->next_rst);
        h->dead = 1;
        return;
    }
    h->raw = h->after_marker;
    start_segment(h);
    for (int c = 0; c < MAX_COMPS_IN_SCAN; c++) h->dc_pred[c] = 0;
    h->restarts_to_go = ci->restart_interval;
    h->next_rst = (h->next_rst + 1) & 7;
    h->dead = 0;
    ci->entropy->insufficient_data = FALSE;
}

/* After the scan's last MCU: leave libjpeg's source at the marker that
 * ends the scan, as its own decoder does, should anything read on. */
static void finish_scan(j_decompress_ptr ci, nst_jpeg_huff *h)
{
    while (!h->seg_done) unstuff_more(h);
    ci->src->next_input_byte = h->marker_at;
    ci->src->bytes_in_buffer = (size_t)(h->raw_end - h->marker_at);
    ci->unread_marker = 0;
}

/* libjpeg's decode_mcu, with its contract: MCU_data NULL (rows being
 * skipped) or blocks zeroed by the caller; TRUE (we never suspend). Built
 * twice below: the bit reader's variable shifts are one instruction each
 * with BMI2 (shlx/shrx) and three without. */
HOT boolean decode_mcu_body(j_decompress_ptr ci, JBLOCKROW *MCU_data)
{
    nst_jpeg_huff *h = ((nst_jpeg *)ci)->huff;
    if (ci->restart_interval) {
        if (h->restarts_to_go == 0) restart(ci, h);
        h->restarts_to_go--;
    }
    if (!h->dead && !ci->entropy->insufficient_data) {
        if (!h->seg_done && (size_t)(h->seg.data + h->seg_len - h->br.ptr) < NST_HUFF_MCU_MAX)
            unstuff_more(h);
        /* The coefficient controller inverse-transforms only the MCU
         * columns [first_iMCU_col, last_iMCU_col] of a cropped row. */
        const int use = MCU_data && (h->every_block || (h->mcu_col >= ci->master->first_iMCU_col &&
                                                        h->mcu_col <= ci->master->last_iMCU_col));
        bitreader b = h->br;
        for (int blkn = 0; blkn < h->blocks; blkn++) {
            const int32_t diff = decode_dc(ci, h, &b, h->dc[blkn]);
            if (h->dead) break;
            if (h->dc_needed[blkn]) {
                const int c = h->comp[blkn];
                /* libjpeg adds in int and lets damaged data wrap */
                const int32_t dc = (int32_t)((uint32_t)h->dc_pred[c] + (uint32_t)diff);
                h->dc_pred[c] = dc;
                if (use) MCU_data[blkn][0][0] = (JCOEF)dc;
            }
            const int rc = use && h->ac_needed[blkn] ? decode_ac(&b, h->ac[blkn], MCU_data[blkn][0])
                                                     : skip_ac(&b, h->ac[blkn]);
            if (rc < 0) {
                bad_code(ci, h);
                break;
            }
        }
        h->br = b;
        if (h->seg_done && consumed_bits(h, &b) > (uint64_t)h->seg_len * 8u && !h->dead) {
            /* the scan needed bits past its data (zeros were read) */
            if (h->marker == NST_HUFF_FILL_00)
                WARNMS(ci, NST_JWRN_FILL_IN_DATA);
            else if (h->marker)
                WARNMS(ci, JWRN_HIT_MARKER);
            else
                WARNMS(ci, JWRN_JPEG_EOF);
            ci->entropy->insufficient_data = TRUE;
        }
    }
    if (++h->mcu_col == h->mcus_per_row) h->mcu_col = 0;
    if (h->mcus_left && --h->mcus_left == 0 && !h->dead) finish_scan(ci, h);
    return TRUE;
}

static boolean decode_mcu(j_decompress_ptr ci, JBLOCKROW *MCU_data)
{
    return decode_mcu_body(ci, MCU_data);
}

#if defined(__GNUC__) && defined(__x86_64__)
#define NST_HUFF_BMI2 1
__attribute__((target("bmi2"))) static boolean decode_mcu_bmi2(j_decompress_ptr ci,
                                                               JBLOCKROW *MCU_data)
{
    return decode_mcu_body(ci, MCU_data);
}
#endif

/* The build of decode_mcu this CPU runs. */
static boolean (*pick_decode_mcu(void))(j_decompress_ptr, JBLOCKROW *)
{
#ifdef NST_HUFF_BMI2
    /* libgcc fills in the CPU model before main(); no __builtin_cpu_init(),
     * which would write it again from a worker thread. NOSTALL_NO_BMI2=1
     * picks the plain build (tests run both; a test-hooks build only:
     * common/testhooks.h). */
    const char *no = nst_test_env("NOSTALL_NO_BMI2");
    if (!(no && *no && *no != '0') && __builtin_cpu_supports("bmi2")) return decode_mcu_bmi2;
#endif
    return decode_mcu;
}

/* ---- attach -------------------------------------------------------------- */

int nst_jpeg_huff_attach(nst_jpeg *j, int every_block)
{
    struct jpeg_decompress_struct *ci = &j->cinfo;
    if (j->huff_off) return 0;
    if (!j->huff) {
        j->huff = calloc(1, sizeof *j->huff);
        if (!j->huff) return 0; /* libjpeg's decoder will do */
        j->huff->decode_mcu = pick_decode_mcu();
    }
    nst_jpeg_huff *h = j->huff;
    h->scan++;
    /* jpeg_read_coefficients() runs in buffered-image mode */
    if (ci->progressive_mode || ci->arith_code || ci->data_precision != 8 ||
        (ci->buffered_image && !every_block) || !ci->inputctl || ci->inputctl->has_multiple_scans ||
        !ci->entropy || !ci->master || !ci->src || ci->unread_marker != 0 ||
        ci->comps_in_scan < 1 || ci->comps_in_scan > MAX_COMPS_IN_SCAN || ci->blocks_in_MCU < 1 ||
        ci->blocks_in_MCU > D_MAX_BLOCKS_IN_MCU || ci->MCUs_per_row < 1 ||
        ci->src->bytes_in_buffer == 0)
        return 0;
    /* A check that this libjpeg's internal structs are laid out as the
     * jpegint.h we were built with says: before any crop, the master
     * selects every MCU column (jdmaster.c). Otherwise libjpeg decodes. */
    if (!every_block &&
        (ci->master->first_iMCU_col != 0 || ci->master->last_iMCU_col != ci->MCUs_per_row - 1))
        return 0;
    for (int blkn = 0; blkn < ci->blocks_in_MCU; blkn++) {
        const int c = ci->MCU_membership[blkn];
        if (c < 0 || c >= ci->comps_in_scan) return 0;
        const jpeg_component_info *comp = ci->cur_comp_info[c];
        if (!comp || comp->dc_tbl_no < 0 || comp->dc_tbl_no >= NUM_HUFF_TBLS ||
            comp->ac_tbl_no < 0 || comp->ac_tbl_no >= NUM_HUFF_TBLS)
            return 0;
        h->dc[blkn] = get_table(h, ci->dc_huff_tbl_ptrs[comp->dc_tbl_no], 1);
        h->ac[blkn] = get_table(h, ci->ac_huff_tbl_ptrs[comp->ac_tbl_no], 0);
        if (!h->dc[blkn] || !h->ac[blkn]) return 0;
        h->comp[blkn] = c;
        h->dc_needed[blkn] = comp->component_needed;
        h->ac_needed[blkn] = comp->component_needed && comp->DCT_scaled_size > 1;
    }
    size_t need;
    if (nst_add_overflow(ci->src->bytes_in_buffer, (size_t)NST_HUFF_PAD, &need) ||
        nst_buf_reserve(&h->seg, need) < 0)
        return 0;
    h->blocks = ci->blocks_in_MCU;
    h->raw = ci->src->next_input_byte;
    h->raw_end = h->raw + ci->src->bytes_in_buffer;
    start_segment(h);
    for (int c = 0; c < MAX_COMPS_IN_SCAN; c++) h->dc_pred[c] = 0;
    h->restarts_to_go = ci->restart_interval;
    h->next_rst = 0;
    h->mcu_col = 0;
    h->mcus_per_row = ci->MCUs_per_row;
    h->mcus_left = (uint64_t)ci->MCUs_per_row * ci->MCU_rows_in_scan;
    h->dead = 0;
    h->every_block = every_block;
    ci->entropy->insufficient_data = FALSE;
    ci->entropy->decode_mcu = j->huff_plain ? decode_mcu : h->decode_mcu;
    h->attached++;
    return 1;
}

void nst_jpeg_huff_progress(nst_jpeg *j)
{
    if (!j->huff_arm || j->cinfo.global_state != DSTATE_RDCOEFS) return;
    j->huff_arm = 0;
    (void)nst_jpeg_huff_attach(j, 1);
}

void nst_jpeg_huff_free(nst_jpeg_huff *h)
{
    if (!h) return;
    nst_buf_free(&h->seg);
    free(h);
}

uint64_t nst_jpeg_huff_scans(const nst_jpeg_huff *h) { return h ? h->attached : 0; }

#endif /* NST_NO_JPEGINT */
