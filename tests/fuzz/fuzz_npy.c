/*
 * fuzz_npy.c — the .npy header parser of task=tokens (nst_npy_parse in
 * src/dataset/npy.c) on hostile bytes: the input is the start of a file.
 *
 * Properties checked (abort() on violation, so libFuzzer keeps the input):
 *   - the answer is 0 (parsed), 1 (give me *need bytes) or -1 (refused,
 *     with a NUL-terminated reason that fits its buffer: the buffer is
 *     allocated to its exact size, so ASan sees any write past it);
 *   - parsed: version 1-3, a known element kind, the data offset within
 *     what was given and equal to the prefix plus the header length;
 *   - "need more": need exceeds what was given and stays below 12 bytes plus
 *     the 1 MiB header limit;
 *   - reading incrementally, as tokens.c does, gives the same answer: no
 *     prefix shorter than the header parses, "need more" always asks for
 *     more than it was given (and, for a header that parses, no more than
 *     the header), and the prefix of exactly data_offset bytes parses to the
 *     same result;
 *   - no crash, leak or undefined behaviour (ASan, UBSan).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataset/npy.h"

#define WHY 96 /* smaller than most reasons: truncation must be safe */

static void die(const char *what, size_t size, int rc)
{
    fprintf(stderr, "fuzz_npy: %s (input of %zu bytes, rc %d)\n", what, size, rc);
    abort();
}

/* Parse a copy of data[0, n) in a buffer of exactly n bytes. */
static int parse(const uint8_t *data, size_t n, nst_npy *h, uint64_t *need)
{
    uint8_t *copy = malloc(n ? n : 1);
    char *why = malloc(WHY);
    if (!copy || !why) abort();
    if (n) memcpy(copy, data, n);
    memset(why, 'x', WHY);
    int rc = nst_npy_parse(copy, n, h, need, why, WHY);
    if (rc == -1 && (memchr(why, '\0', WHY) == NULL || why[0] == '\0'))
        die("refused without a reason", n, rc);
    free(copy);
    free(why);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    nst_npy h, p;
    uint64_t need = 0, pneed = 0;
    int rc = parse(data, size, &h, &need);
    if (rc != 0 && rc != 1 && rc != -1) die("answer not in {-1, 0, 1}", size, rc);
    if (rc == 0) {
        uint64_t prefix = h.major == 1 ? 10 : 12;
        if (h.major < 1 || h.major > 3 || h.kind < 0 || h.kind > 3)
            die("bad version or kind", size, rc);
        if (h.data_offset > size || h.data_offset <= prefix)
            die("data offset outside the input", size, rc);
        uint64_t hlen = h.major == 1 ? (uint64_t)data[8] | (uint64_t)data[9] << 8
                                     : (uint64_t)data[8] | (uint64_t)data[9] << 8 |
                                           (uint64_t)data[10] << 16 | (uint64_t)data[11] << 24;
        if (h.data_offset != prefix + hlen)
            die("data offset is not prefix + header length", size, rc);
        /* exactly the header: the same answer */
        if (parse(data, (size_t)h.data_offset, &p, &pneed) != 0 || memcmp(&p, &h, sizeof p) != 0)
            die("the header alone parses differently", size, rc);
    }
    if (rc == 1 && (need <= size || need > 12 + (1u << 20))) die("need out of range", size, rc);
    /* incremental reading */
    uint64_t whole = rc == 0 ? h.data_offset : size;
    for (size_t k = 0; k < whole && k < 64; k++) {
        int r = parse(data, k, &p, &pneed);
        if (r == 0) die("a prefix parsed before the header was complete", k, r);
        if (r == 1 && pneed <= k) die("a prefix asks for no more than it has", k, r);
        if (r == 1 && rc == 0 && pneed > h.data_offset)
            die("a prefix needs more than the whole header", k, r);
    }
    return 0;
}
