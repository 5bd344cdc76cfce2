/*
 * npy.c — the .npy header parser (npy.h): what a NumPy array file holds
 * (element type, 1-D shape, where the data begins), read from its first
 * bytes without trusting them. Room: dataset/ (what the items are); its
 * user is task=tokens (recipe/tokens.c). Pure: no allocation, no I/O, no
 * state; any thread may call it.
 */
#include <stdio.h>
#include <string.h>

#include "dataset/npy.h"

/* ---- .npy header ----------------------------------------------------------
 * The format (numpy's lib/format.py, NEP 1): "\x93NUMPY", major and minor
 * version bytes, the header's length (2 bytes little-endian in 1.x, 4 in
 * 2.x and 3.x), then the header: a Python dict literal with exactly the keys
 * 'descr', 'fortran_order' and 'shape' (ASCII; UTF-8 in 3.x), padded with
 * spaces and a newline. The data follows. */

#define NST_NPY_HEADER_MAX (1u << 20) /* numpy's reader refuses > 10000 */
#define NST_NPY_DIMS_MAX 64

/* The parser's cursor over the header text. */
typedef struct npy_cur {
    const char *p, *end;
} npy_cur;

static void npy_ws(npy_cur *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static int npy_eat(npy_cur *c, char ch)
{
    npy_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

/* A quoted string (' or ", no escapes: numpy writes none in these values)
 * into out (NUL-terminated; too long: 0). */
static int npy_string(npy_cur *c, char *out, size_t n)
{
    npy_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return 0;
    char q = *c->p++;
    size_t k = 0;
    while (c->p < c->end && *c->p != q) {
        if (*c->p == '\\' || k + 1 >= n) return 0;
        out[k++] = *c->p++;
    }
    if (c->p >= c->end) return 0;
    c->p++;
    out[k] = '\0';
    return 1;
}

/* A non-negative integer below 2^63 (a Python 2 'L' suffix allowed). */
static int npy_uint(npy_cur *c, uint64_t *v)
{
    npy_ws(c);
    if (c->p >= c->end || *c->p < '0' || *c->p > '9') return 0;
    uint64_t x = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        uint64_t d = (uint64_t)(*c->p++ - '0');
        if (x > (((uint64_t)1 << 63) - 1 - d) / 10) return 0;
        x = x * 10 + d;
    }
    if (c->p < c->end && (*c->p == 'L' || *c->p == 'l')) c->p++;
    *v = x;
    return 1;
}

static int npy_word(npy_cur *c, const char *w)
{
    size_t n = strlen(w);
    npy_ws(c);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, w, n) != 0) return 0;
    c->p += n;
    return 1;
}

/* npy.h */
int nst_npy_parse(const uint8_t *buf, size_t len, nst_npy *out, uint64_t *need, char *why,
                  size_t whyn)
{
    static const uint8_t magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
    memset(out, 0, sizeof *out);
    *need = 0;
    if (len < 8) {
        if (memcmp(buf, magic, len < sizeof magic ? len : sizeof magic) != 0) goto not_npy;
        *need = 12;
        return 1;
    }
    if (memcmp(buf, magic, sizeof magic) != 0) goto not_npy;
    out->major = buf[6], out->minor = buf[7];
    uint64_t prefix, hlen;
    if (out->major == 1) {
        prefix = 10;
    } else if (out->major == 2 || out->major == 3) {
        prefix = 12;
    } else {
        snprintf(why, whyn, ".npy format version %d.%d (1.0, 2.0 and 3.0 are read)", out->major,
                 out->minor);
        return -1;
    }
    if (len < prefix) {
        *need = prefix;
        return 1;
    }
    hlen = prefix == 10 ? (uint64_t)buf[8] | (uint64_t)buf[9] << 8
                        : (uint64_t)buf[8] | (uint64_t)buf[9] << 8 | (uint64_t)buf[10] << 16 |
                              (uint64_t)buf[11] << 24;
    if (hlen > NST_NPY_HEADER_MAX) {
        snprintf(why, whyn, ".npy header of %llu bytes (at most %u are read)",
                 (unsigned long long)hlen, NST_NPY_HEADER_MAX);
        return -1;
    }
    out->data_offset = prefix + hlen;
    if (len < out->data_offset) {
        *need = out->data_offset;
        return 1;
    }
    npy_cur c = {(const char *)buf + prefix, (const char *)buf + prefix + hlen};
    char key[32], descr[32];
    uint64_t dims[NST_NPY_DIMS_MAX];
    int ndim = -1, have_descr = 0, have_order = 0, fortran = 0;
    if (!npy_eat(&c, '{')) {
        snprintf(why, whyn, ".npy header is not a dict (no '{')");
        return -1;
    }
    while (!npy_eat(&c, '}')) {
        if (!npy_string(&c, key, sizeof key) || !npy_eat(&c, ':')) {
            snprintf(why, whyn, ".npy header: malformed key at byte %llu of the header",
                     (unsigned long long)(c.p - (const char *)buf - prefix));
            return -1;
        }
        if (!strcmp(key, "descr") && !have_descr) {
            if (!npy_string(&c, descr, sizeof descr)) {
                snprintf(why, whyn, ".npy header: 'descr' is not a type string such as '<u2'");
                return -1;
            }
            have_descr = 1;
        } else if (!strcmp(key, "fortran_order") && !have_order) {
            if (npy_word(&c, "True"))
                fortran = 1;
            else if (!npy_word(&c, "False")) {
                snprintf(why, whyn, ".npy header: 'fortran_order' is not True or False");
                return -1;
            }
            have_order = 1;
        } else if (!strcmp(key, "shape") && ndim < 0) {
            if (!npy_eat(&c, '(')) {
                snprintf(why, whyn, ".npy header: 'shape' is not a tuple");
                return -1;
            }
            ndim = 0;
            while (!npy_eat(&c, ')')) {
                if (ndim == NST_NPY_DIMS_MAX || !npy_uint(&c, &dims[ndim])) {
                    snprintf(why, whyn, ".npy header: 'shape' is not a tuple of sizes");
                    return -1;
                }
                ndim++;
                if (!npy_eat(&c, ',')) {
                    if (npy_eat(&c, ')')) break;
                    snprintf(why, whyn, ".npy header: 'shape' is not a tuple of sizes");
                    return -1;
                }
            }
        } else {
            snprintf(why, whyn,
                     ".npy header: unexpected or repeated key '%s' (the keys are 'descr', "
                     "'fortran_order' and 'shape', once each)",
                     key);
            return -1;
        }
        if (!npy_eat(&c, ',')) {
            if (npy_eat(&c, '}')) break;
            snprintf(why, whyn, ".npy header: expected ',' or '}' at byte %llu of the header",
                     (unsigned long long)(c.p - (const char *)buf - prefix));
            return -1;
        }
    }
    npy_ws(&c);
    while (c.p < c.end && *c.p == '\0') c.p++; /* some writers pad with NULs */
    if (c.p != c.end) {
        snprintf(why, whyn, ".npy header: bytes after the dict");
        return -1;
    }
    if (!have_descr || !have_order || ndim < 0) {
        snprintf(why, whyn, ".npy header lacks '%s'",
                 !have_descr   ? "descr"
                 : !have_order ? "fortran_order"
                               : "shape");
        return -1;
    }
    (void)fortran; /* a 1-D array is laid out the same either way */
    static const char *const descrs[] = {"<u2", "<u4", "<i4", "<i8"};
    out->kind = -1;
    for (int k = 0; k < 4; k++)
        if (!strcmp(descr, descrs[k])) out->kind = k;
    if (out->kind < 0) {
        snprintf(why, whyn,
                 ".npy of dtype '%s' (token files are '<u2', '<u4', '<i4' or '<i8': "
                 "little-endian 16/32-bit unsigned, 32/64-bit signed)",
                 descr);
        return -1;
    }
    if (ndim != 1) {
        snprintf(why, whyn, ".npy of %d dimensions (a token file is 1-D)", ndim);
        return -1;
    }
    out->count = dims[0];
    return 0;
not_npy:
    snprintf(why, whyn, "not a .npy file (no \\x93NUMPY magic)");
    return -1;
}
