/*
 * jpeg_impl.h — private to jpeg.c and jpeg_transcode.c: the per-decoder
 * libjpeg state they share (one decompressor, its error manager and
 * progress monitor, and the restart-marker rewriter's compressor, created
 * on first use). Includes jpeglib.h; nothing outside src/decode sees it.
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
    int status;                /* NOSTALL_E_* for the longjmp target */
    char msg[JMSG_LENGTH_MAX];
} nst_jpeg_err;

/* jpeg_transcode.c's compressor and output buffer (opaque to jpeg.c). */
typedef struct nst_jpeg_enc nst_jpeg_enc;
void nst_jpeg_enc_free(nst_jpeg_enc *e);

struct nst_jpeg {
    struct jpeg_decompress_struct cinfo; /* first: see progress_monitor */
    nst_jpeg_err err; /* error_exit / emit_message of jpeg.c, shared by enc */
    struct jpeg_progress_mgr progress;
    nst_jpeg_rst rst; /* restart-marker fast path scratch (jpeg_rst.c) */
    nst_jpeg_enc *enc; /* NULL until the first nst_decode_transcode()   */
    long mem_cap;      /* cinfo.mem->max_memory_to_use                   */
};

/* 1 if buf's header defines every table its first scan needs (jpeg.c);
 * else a reused decompressor would take the previous file's. */
int nst_jpeg_tables_defined(const uint8_t *buf, size_t len);

#endif
