/*
 * s3_sign.c — SHA-256, HMAC-SHA256 and a reference AWS Signature V4 signer
 * (see s3.h).
 * Room: source/ (reading bytes).
 *
 * Requests are signed by libcurl in production; this signer computes the
 * same thing from a request's canonical pieces so that the tests can check
 * libcurl's Authorization header, and the pieces themselves, against the
 * AWS documentation's published examples (tests/test_s3.c). SHA-256 is
 * written from FIPS 180-4 (no crypto library is linked by nostall itself;
 * libcurl's OpenSSL is libcurl's). Pure functions, any thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "source/s3.h"

/* ---- SHA-256 (FIPS 180-4) ------------------------------------------------ */

typedef struct sha256_ctx {
    uint32_t h[8];
    uint64_t len; /* bytes so far */
    uint8_t blk[64];
    size_t fill;
} sha256_ctx;

static const uint32_t K[64] = {0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b,
                               0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01,
                               0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7,
                               0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc,
                               0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152,
                               0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
                               0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
                               0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
                               0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
                               0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08,
                               0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f,
                               0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
                               0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t ror(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void sha256_block(sha256_ctx *c, const uint8_t *p)
{
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = c->h[0], b = c->h[1], cc = c->h[2], d = c->h[3], e = c->h[4], f = c->h[5],
             g = c->h[6], h = c->h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t S1 = ror(e, 6) ^ ror(e, 11) ^ ror(e, 25);
        uint32_t ch = (e & f) ^ (~e & g);
        uint32_t t1 = h + S1 + ch + K[i] + w[i];
        uint32_t S0 = ror(a, 2) ^ ror(a, 13) ^ ror(a, 22);
        uint32_t maj = (a & b) ^ (a & cc) ^ (b & cc);
        uint32_t t2 = S0 + maj;
        h = g;
        g = f;
        f = e;
        e = d + t1;
        d = cc;
        cc = b;
        b = a;
        a = t1 + t2;
    }
    c->h[0] += a;
    c->h[1] += b;
    c->h[2] += cc;
    c->h[3] += d;
    c->h[4] += e;
    c->h[5] += f;
    c->h[6] += g;
    c->h[7] += h;
}

static void sha256_init(sha256_ctx *c)
{
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(c->h, iv, sizeof iv);
    c->len = 0;
    c->fill = 0;
}

static void sha256_update(sha256_ctx *c, const void *data, size_t n)
{
    const uint8_t *p = data;
    c->len += n;
    if (c->fill) {
        size_t t = 64 - c->fill < n ? 64 - c->fill : n;
        memcpy(c->blk + c->fill, p, t);
        c->fill += t;
        p += t;
        n -= t;
        if (c->fill < 64) return;
        sha256_block(c, c->blk);
        c->fill = 0;
    }
    for (; n >= 64; p += 64, n -= 64) sha256_block(c, p);
    memcpy(c->blk, p, n);
    c->fill = n;
}

static void sha256_final(sha256_ctx *c, uint8_t out[32])
{
    uint64_t bits = c->len * 8;
    uint8_t pad = 0x80, zero = 0, lenb[8];
    sha256_update(c, &pad, 1);
    while (c->fill != 56) sha256_update(c, &zero, 1);
    for (int i = 0; i < 8; i++) lenb[i] = (uint8_t)(bits >> (56 - 8 * i));
    sha256_update(c, lenb, 8);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(c->h[i] >> 24);
        out[4 * i + 1] = (uint8_t)(c->h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(c->h[i] >> 8);
        out[4 * i + 3] = (uint8_t)c->h[i];
    }
}

void nst_sha256(const void *data, size_t n, uint8_t out[32])
{
    sha256_ctx c;
    sha256_init(&c);
    sha256_update(&c, data, n);
    sha256_final(&c, out);
}

void nst_hmac_sha256(const void *key, size_t klen, const void *msg, size_t n, uint8_t out[32])
{
    uint8_t k[64] = {0}, pad[64], inner[32];
    if (klen > 64)
        nst_sha256(key, klen, k);
    else
        memcpy(k, key, klen);
    sha256_ctx c;
    for (int i = 0; i < 64; i++) pad[i] = k[i] ^ 0x36;
    sha256_init(&c);
    sha256_update(&c, pad, 64);
    sha256_update(&c, msg, n);
    sha256_final(&c, inner);
    for (int i = 0; i < 64; i++) pad[i] = k[i] ^ 0x5c;
    sha256_init(&c);
    sha256_update(&c, pad, 64);
    sha256_update(&c, inner, 32);
    sha256_final(&c, out);
    explicit_bzero(k, sizeof k);
    explicit_bzero(pad, sizeof pad);
}

void nst_hex32(const uint8_t in[32], char out[65])
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        out[2 * i] = hex[in[i] >> 4];
        out[2 * i + 1] = hex[in[i] & 15];
    }
    out[64] = '\0';
}

/* ---- SigV4 ---------------------------------------------------------------- */

typedef struct hdr {
    char name[128];
    char value[1024];
} hdr;

static int hdr_cmp(const void *a, const void *b)
{
    return strcmp(((const hdr *)a)->name, ((const hdr *)b)->name);
}

/* Append to dst[cap] at *len; 0 if it does not fit. */
static int put(char *dst, size_t cap, size_t *len, const char *s)
{
    size_t n = strlen(s);
    if (*len + n + 1 > cap) return 0;
    memcpy(dst + *len, s, n + 1);
    *len += n;
    return 1;
}

int nst_sigv4_sign(const nst_sigv4_req *r, nst_sigv4_out *out)
{
    if (!r || !out || !r->method || !r->uri || !r->payload_hash || !r->amz_date || !r->region ||
        !r->service || !r->access_key || !r->secret || strlen(r->amz_date) != 16 ||
        r->nheaders > 64 || (r->nheaders && !r->headers))
        return nst_error(NOSTALL_E_INVALID, "sigv4: missing or malformed request pieces");
    memset(out, 0, sizeof *out);
    hdr *h = calloc(r->nheaders ? r->nheaders : 1, sizeof *h);
    if (!h) return nst_error(NOSTALL_E_NOMEM, "sigv4: out of memory");
    size_t nh = 0;
    int rc = 0;
    for (size_t i = 0; i < r->nheaders && rc == 0; i++) {
        const char *line = r->headers[i], *colon = strchr(line, ':');
        size_t nl = colon ? (size_t)(colon - line) : 0;
        if (!colon || nl == 0 || nl >= sizeof h[0].name) {
            rc = nst_error(NOSTALL_E_INVALID, "sigv4: header '%.60s' is not 'Name: value'", line);
            break;
        }
        hdr t;
        for (size_t k = 0; k < nl; k++)
            t.name[k] = (char)((line[k] >= 'A' && line[k] <= 'Z') ? line[k] + 32 : line[k]);
        t.name[nl] = '\0';
        /* trim, and fold runs of spaces into one */
        const char *v = colon + 1;
        size_t o = 0;
        while (*v == ' ' || *v == '\t') v++;
        for (; *v; v++) {
            if (*v == ' ' || *v == '\t') {
                const char *w = v;
                while (*w == ' ' || *w == '\t') w++;
                if (!*w) break;
                if (o + 1 >= sizeof t.value) break;
                t.value[o++] = ' ';
                v = w - 1;
                continue;
            }
            if (o + 1 >= sizeof t.value) {
                rc = nst_error(NOSTALL_E_INVALID, "sigv4: header %s too long", t.name);
                break;
            }
            t.value[o++] = *v;
        }
        t.value[o] = '\0';
        /* a repeated name: values joined by ',' */
        size_t j;
        for (j = 0; j < nh && strcmp(h[j].name, t.name) != 0; j++) {
        }
        if (j < nh) {
            size_t l = strlen(h[j].value);
            if (l + 1 + strlen(t.value) + 1 > sizeof h[j].value)
                rc = nst_error(NOSTALL_E_INVALID, "sigv4: header %s too long", t.name);
            else {
                h[j].value[l] = ',';
                memcpy(h[j].value + l + 1, t.value, strlen(t.value) + 1);
            }
        } else {
            h[nh++] = t;
        }
    }
    if (rc < 0) {
        free(h);
        return rc;
    }
    qsort(h, nh, sizeof *h, hdr_cmp);

    size_t cl = 0, sl = 0;
    char *cr = out->canonical_request;
    const size_t crcap = sizeof out->canonical_request;
    int ok = put(cr, crcap, &cl, r->method) && put(cr, crcap, &cl, "\n") &&
             put(cr, crcap, &cl, r->uri) && put(cr, crcap, &cl, "\n") &&
             put(cr, crcap, &cl, r->query ? r->query : "") && put(cr, crcap, &cl, "\n");
    for (size_t i = 0; ok && i < nh; i++) {
        ok = put(cr, crcap, &cl, h[i].name) && put(cr, crcap, &cl, ":") &&
             put(cr, crcap, &cl, h[i].value) && put(cr, crcap, &cl, "\n") &&
             (i == 0 || put(out->signed_headers, sizeof out->signed_headers, &sl, ";")) &&
             put(out->signed_headers, sizeof out->signed_headers, &sl, h[i].name);
    }
    free(h);
    ok = ok && put(cr, crcap, &cl, "\n") && put(cr, crcap, &cl, out->signed_headers) &&
         put(cr, crcap, &cl, "\n") && put(cr, crcap, &cl, r->payload_hash);
    if (!ok) return nst_error(NOSTALL_E_INVALID, "sigv4: the canonical request does not fit");

    uint8_t d[32];
    char hexd[65], date[9], scope[200];
    nst_sha256(cr, cl, d);
    nst_hex32(d, hexd);
    memcpy(date, r->amz_date, 8);
    date[8] = '\0';
    int n = snprintf(scope, sizeof scope, "%s/%s/%s/aws4_request", date, r->region, r->service);
    if (n < 0 || (size_t)n >= sizeof scope)
        return nst_error(NOSTALL_E_INVALID, "sigv4: region or service too long");
    n = snprintf(out->string_to_sign, sizeof out->string_to_sign, "AWS4-HMAC-SHA256\n%s\n%s\n%s",
                 r->amz_date, scope, hexd);
    if (n < 0 || (size_t)n >= sizeof out->string_to_sign)
        return nst_error(NOSTALL_E_INVALID, "sigv4: the string to sign does not fit");

    /* kSigning = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, date), region), service), "aws4_request") */
    size_t skl = strlen(r->secret) + 4;
    char *sk = malloc(skl + 1);
    if (!sk) return nst_error(NOSTALL_E_NOMEM, "sigv4: out of memory");
    snprintf(sk, skl + 1, "AWS4%s", r->secret);
    uint8_t k1[32], k2[32];
    nst_hmac_sha256(sk, skl, date, 8, k1);
    explicit_bzero(sk, skl);
    free(sk);
    nst_hmac_sha256(k1, 32, r->region, strlen(r->region), k2);
    nst_hmac_sha256(k2, 32, r->service, strlen(r->service), k1);
    nst_hmac_sha256(k1, 32, "aws4_request", 12, k2);
    nst_hmac_sha256(k2, 32, out->string_to_sign, strlen(out->string_to_sign), d);
    explicit_bzero(k1, sizeof k1);
    explicit_bzero(k2, sizeof k2);
    nst_hex32(d, out->signature);
    n = snprintf(out->authorization, sizeof out->authorization,
                 "AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s", r->access_key,
                 scope, out->signed_headers, out->signature);
    if (n < 0 || (size_t)n >= sizeof out->authorization)
        return nst_error(NOSTALL_E_INVALID, "sigv4: the authorization does not fit");
    return 0;
}
