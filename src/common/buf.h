/*
 * buf.h — grow-only scratch buffers and overflow-checked size arithmetic.
 *
 * Each worker owns its scratch buffers. A buffer grows to the largest size
 * it has needed and never shrinks, so after the first few items of a dataset
 * the steady state allocates nothing.
 */
#ifndef NST_COMMON_BUF_H
#define NST_COMMON_BUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct nst_buf {
    uint8_t *data;
    size_t cap;
} nst_buf;

/* Ensure cap >= n (contents are not preserved). NOSTALL_E_NOMEM on failure. */
int nst_buf_reserve(nst_buf *b, size_t n);
void nst_buf_free(nst_buf *b);

/* *out = a * b; returns 1 on overflow (and leaves *out unspecified). */
static inline int nst_mul_overflow(size_t a, size_t b, size_t *out)
{
    return __builtin_mul_overflow(a, b, out);
}

static inline int nst_add_overflow(size_t a, size_t b, size_t *out)
{
    return __builtin_add_overflow(a, b, out);
}

#endif
