/*
 * npy.h — the .npy header parser (npy.c): a NumPy array file's element
 * type, shape and data offset. Room: dataset/ (what the items are); used by
 * task=tokens (recipe/tokens.c), its tests and fuzz target
 * (tests/test_tokens.c, tests/fuzz/fuzz_npy.c).
 */
#ifndef NST_DATASET_NPY_H
#define NST_DATASET_NPY_H

#include <stddef.h>
#include <stdint.h>

/* Token element types (tokens.c's tables are indexed by them). */
enum { NST_TOK_U16 = 0, NST_TOK_U32 = 1, NST_TOK_I32 = 2, NST_TOK_I64 = 3 };

typedef struct nst_npy {
    uint64_t data_offset; /* bytes before the first element */
    uint64_t count;       /* elements (the 1-D shape)       */
    int kind;             /* NST_TOK_*                       */
    int major, minor;
} nst_npy;

/* Parse a .npy header from the first `len` bytes of a file. Returns 0 with
 * *out filled; 1 if `len` is too short and *need says how many bytes the
 * header takes (read that many and call again); -1 with the reason in why
 * if the header is malformed or describes what is not accepted. Reads only
 * buf[0, len). */
int nst_npy_parse(const uint8_t *buf, size_t len, nst_npy *out, uint64_t *need, char *why,
                  size_t whyn);

#endif
