/* buf.c — grow-only scratch buffers (see buf.h). Single-owner, no locking. */
#include <stdlib.h>

#include "common/buf.h"
#include "common/error.h"

int nst_buf_reserve(nst_buf *b, size_t n)
{
    if (n <= b->cap) return 0;
    /* Grow geometrically so a slowly rising size does not reallocate often. */
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < n) {
        if (cap > SIZE_MAX / 2) {
            cap = n;
            break;
        }
        cap *= 2;
    }
    uint8_t *p = malloc(cap);
    if (!p) return nst_error(NOSTALL_E_NOMEM, "cannot allocate %zu bytes", cap);
    free(b->data);
    b->data = p;
    b->cap = cap;
    return 0;
}

void nst_buf_free(nst_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->cap = 0;
}

/* The public face of a worker's fetch buffer (nostall_peer_cache.get). */
void *nostall_fetch_buf_reserve(nostall_fetch_buf *buf, size_t len)
{
    nst_buf *b = (nst_buf *)buf;
    if (!b || nst_buf_reserve(b, len ? len : 1) < 0) return NULL;
    return b->data;
}
