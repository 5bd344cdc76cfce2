/*
 * jpeg_impl.h — private to jpeg.c, jpeg_transcode.c and jpeg_huff.c: the
 * per-decoder libjpeg state they share (one decompressor, its error manager
 * and progress monitor, the restart-marker rewriter's compressor and our
 * Huffman decoder's state, both created on first use). Includes jpeglib.h;
 * nothing outside src/decode sees it.
 */
#ifndef NST_DECODE_JPEG_IMPL_H
#define NST_DECODE_JPEG_IMPL_H

#include <setjmp.h>
#include <stdio.h> /* before jpeglib.h: it uses FILE and size_t */

#include <jpeglib.h>

#include "decode/decode_impl.h"

typedef struct nst_jpeg_err {
    struct jpeg_error_mgr pub; /* first: libjpeg sees only this */
    jmp_buf jmp;
    int status; /* NOSTALL_E_* for the longjmp target */
    char msg[JMSG_LENGTH_MAX];
    /* nst_jpeg_coefficients(lenient): warnings that would fail a decode
     * are recorded (the first one's status, libjpeg message code and
     * text) instead of stopping it. */
    int lenient, warned, warn_code;
    char warn_msg[JMSG_LENGTH_MAX];
} nst_jpeg_err;

/* nostall's own libjpeg warning codes, in jpeg.c's addon message table
 * (emitted by jpeg_huff.c; jpeg.c's warning policy fails the item). */
enum {
    NST_JWRN_FIRST = 1000,
    /* 0xFF fill bytes before 0x00 inside entropy-coded data (FF FF 00):
     * invalid; libjpeg-turbo's slow path reads one 0xFF data byte, its
     * fast path a marker, and it then decodes the MCU again leaving some
     * of the first attempt's coefficients in the block */
    NST_JWRN_FILL_IN_DATA = 1000,
    NST_JWRN_LAST = 1000
};

/* jpeg_transcode.c's compressor and output buffer (opaque to jpeg.c). */
typedef struct nst_jpeg_enc nst_jpeg_enc;
void nst_jpeg_enc_free(nst_jpeg_enc *e);

/* jpeg_huff.c's state: lookup tables and the segment buffer (opaque). */
typedef struct nst_jpeg_huff nst_jpeg_huff;

struct nst_jpeg {
    struct jpeg_decompress_struct cinfo; /* first: see progress_monitor,
                                            alloc_small and jpeg_huff.c's
                                            decode_mcu                    */
    nst_jpeg_err err;                    /* error_exit / emit_message of jpeg.c, shared by enc */
    struct jpeg_progress_mgr progress;
    nst_jpeg_rst rst;    /* restart-marker fast path scratch (jpeg_rst.c) */
    nst_jpeg_enc *enc;   /* NULL until the first nst_decode_transcode()   */
    long mem_cap;        /* cinfo.mem->max_memory_to_use                   */
    nst_jpeg_huff *huff; /* NULL until the first single-scan decode      */
    int huff_off;        /* libjpeg's Huffman decoder only: tests, and
                          NOSTALL_NO_OWN_HUFFMAN=1 for measurements       */
    int huff_arm;        /* jpeg_read_coefficients() under way: the progress
                          monitor attaches our decoder (jpeg_transcode.c) */
    int huff_plain;      /* our decoder's plain build even where the CPU has
                          BMI2 (tests, fuzz targets)                      */
    /* The table objects of earlier files, taken out of cinfo by
     * nst_jpeg_reset() and handed back to libjpeg when a DQT or DHT
     * (or its standard Huffman tables) needs one (jpeg.c). */
    void *(*lj_alloc_small)(j_common_ptr, int, size_t); /* libjpeg's own */
    JQUANT_TBL *spare_q[NUM_QUANT_TBLS];
    JHUFF_TBL *spare_h[2 * NUM_HUFF_TBLS];
    int nspare_q, nspare_h;
    uint64_t perm_allocs; /* permanent-pool allocations passed to libjpeg */
};

/* Forget everything libjpeg keeps from one file to the next in a reused
 * decompressor (its quantization and Huffman tables; the rest is reset by
 * libjpeg itself at SOI), so that the next file decodes as with a fresh
 * one. Called before each file's header is read (jpeg.c, jpeg_transcode.c). */
void nst_jpeg_reset(nst_jpeg *j);

/* Put nostall's Huffman decoder (jpeg_huff.c) in the place of libjpeg's for
 * the scan jpeg_start_decompress() has just set up. 1 if it did; 0 if the
 * file is not a single-scan 8-bit Huffman JPEG (progressive, arithmetic,
 * multi-scan, 12-bit), a table is refused or memory is short: libjpeg's
 * own decoder then runs, as before. Must be called before any scanline is
 * read or skipped. every_block: store every block's coefficients (for
 * jpeg_read_coefficients) rather than only those of the MCU columns a
 * jpeg_crop_scanline() region inverse-transforms. */
int nst_jpeg_huff_attach(nst_jpeg *j, int every_block);
/* From jpeg.c's progress monitor: with j->huff_arm set, attach (every
 * block) at the first call inside jpeg_read_coefficients(), when libjpeg
 * has set up the scan and decoded nothing yet; disarms. */
void nst_jpeg_huff_progress(nst_jpeg *j);
void nst_jpeg_huff_free(nst_jpeg_huff *h);
/* Scans decoded by it so far (tests). */
uint64_t nst_jpeg_huff_scans(const nst_jpeg_huff *h);

#endif
