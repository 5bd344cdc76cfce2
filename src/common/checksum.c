/*
 * checksum.c — the 64-bit checksum of delivered batches that the CLI prints
 * so users can verify reproducibility (nostall_checksum_update/_batch).
 *
 * Not cryptographic; fast (8 bytes per step, two multiplies) and order
 * sensitive. Each call hashes its bytes (seeded with the length) and folds the
 * result into the running state, so the value depends on the bytes and on how
 * they were split into calls — the CLI and the Python binding both fold once
 * per field of a batch, in declaration order (classification: images, then
 * labels).
 */
#include <string.h>

#include "common/rng.h"
#include "nostall.h"

static uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

void nostall_checksum_update(uint64_t *state, const void *data, size_t len)
{
    const unsigned char *p = data;
    uint64_t h1 = 0x243f6a8885a308d3ULL ^ len, h2 = 0x13198a2e03707344ULL;
    size_t i = 0;
    for (; i + 16 <= len; i += 16) {
        uint64_t a, b;
        memcpy(&a, p + i, 8);
        memcpy(&b, p + i + 8, 8);
        h1 = rotl(h1 ^ (a * 0x9e3779b97f4a7c15ULL), 29) * 0xbf58476d1ce4e5b9ULL;
        h2 = rotl(h2 ^ (b * 0xc2b2ae3d27d4eb4fULL), 31) * 0x94d049bb133111ebULL;
    }
    uint64_t tail = 0;
    memcpy(&tail, p + i, len - i > 8 ? 8 : len - i);
    h1 ^= nst_mix64(tail);
    if (len - i > 8) {
        uint64_t t2 = 0;
        memcpy(&t2, p + i + 8, len - i - 8);
        h2 ^= nst_mix64(t2 + 1);
    }
    *state = nst_mix64(*state ^ nst_mix64(h1 + rotl(h2, 17)));
}

void nostall_checksum_batch(uint64_t *state, const nostall_batch *b)
{
    if (!b || !state) return;
    if (b->nfields && b->fields) {
        /* Every field in declaration order (classification: images, then
         * labels). Integers as stored: this library targets little-endian
         * hosts (x86-64, aarch64). */
        for (uint32_t i = 0; i < b->nfields; i++)
            nostall_checksum_update(state, b->fields[i].data, b->fields[i].item_bytes * b->count);
        return;
    }
    nostall_checksum_update(state, b->images, b->item_bytes * b->count);
    nostall_checksum_update(state, b->labels, sizeof(int64_t) * b->count);
}

const nostall_field *nostall_batch_field(const nostall_batch *b, const char *name)
{
    if (!b || !name || !b->fields) return NULL;
    for (uint32_t i = 0; i < b->nfields; i++)
        if (b->fields[i].name && strcmp(b->fields[i].name, name) == 0) return &b->fields[i];
    return NULL;
}
