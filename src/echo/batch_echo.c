/*
 * batch_echo.c — batch echoing's shuffle buffer (see batch_echo.h).
 */
#include <math.h>
#include <stdlib.h>

#include "common/error.h"
#include "common/rng.h"
#include "echo/batch_echo.h"

int nst_batch_echo_init(nst_batch_echo *b, double factor, uint64_t seed, uint32_t cap)
{
    b->factor = factor;
    b->seed = seed;
    b->cap = cap ? cap : 1;
    b->pool = calloc(b->cap, sizeof *b->pool);
    if (!b->pool) return nst_error(NOSTALL_E_NOMEM, "echo: out of memory");
    nst_batch_echo_start(b, 0);
    return 0;
}

void nst_batch_echo_destroy(nst_batch_echo *b)
{
    free(b->pool);
    b->pool = NULL;
}

uint32_t nst_batch_echo_uses(const nst_batch_echo *b, uint64_t epoch, uint64_t position)
{
    double whole = floor(b->factor);
    uint32_t n = (uint32_t)whole;
    uint64_t h = nst_hash4(b->seed, epoch, position, NST_RNG_ECHO_BATCH);
    if (b->factor > whole && (double)(h >> 11) * 0x1.0p-53 < b->factor - whole) n++;
    return n ? n : 1;
}

void nst_batch_echo_start(nst_batch_echo *b, uint64_t epoch)
{
    b->epoch = epoch;
    b->n = 0;
    b->draws = b->fresh_in = b->delivered = 0;
    b->fresh_done = 0;
}

int nst_batch_echo_want(const nst_batch_echo *b) { return !b->fresh_done && b->n < b->cap; }

void nst_batch_echo_add(nst_batch_echo *b, uint64_t position, uint32_t count, uint32_t slot,
                        uint64_t seq)
{
    nst_batch_echo_entry *e = &b->pool[b->n++];
    e->fresh = b->fresh_in++;
    e->position = position;
    e->count = count;
    e->uses = e->left = nst_batch_echo_uses(b, b->epoch, position);
    e->slot = slot;
    e->seq = seq;
    e->last_at = e->gap = 0;
}

int nst_batch_echo_draw(nst_batch_echo *b, nst_batch_echo_entry *out)
{
    if (b->n == 0) return 0;
    uint64_t h = nst_hash4(b->seed, b->epoch, b->draws++, NST_RNG_ECHO_BATCH_DRAW);
    uint32_t k = (uint32_t)(h % b->n);
    nst_batch_echo_entry *e = &b->pool[k];
    e->gap = e->left < e->uses ? b->delivered - e->last_at : 0;
    e->last_at = b->delivered;
    e->left--;
    b->delivered += e->count;
    *out = *e;
    if (e->left == 0) *e = b->pool[--b->n];
    return 1;
}

void nst_batch_echo_replay(nst_batch_echo *b, uint64_t epoch, uint64_t position,
                           uint32_t (*plan)(void *ctx, uint64_t position), void *ctx)
{
    nst_batch_echo_start(b, epoch);
    uint64_t fresh_pos = 0;
    while (b->delivered < position) {
        while (nst_batch_echo_want(b)) {
            uint32_t len = plan(ctx, fresh_pos);
            if (!len) {
                b->fresh_done = 1;
                break;
            }
            nst_batch_echo_add(b, fresh_pos, len, UINT32_MAX, 0);
            fresh_pos += len;
        }
        nst_batch_echo_entry e;
        if (!nst_batch_echo_draw(b, &e)) break;
    }
    /* The live run learns that the epoch's fresh batches are all in from
     * the batches themselves (the end of the epoch), at its next refill:
     * leave that to it. */
    b->fresh_done = 0;
}
