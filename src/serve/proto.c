/*
 * proto.c — the prep-server protocol's messages (proto.h): frames, their
 * encoders and decoders, the identity a client and a server compare, the
 * handshake's MACs and the secret file. Pure functions on buffers (no
 * sockets: net.c), so that the fuzz target (tests/fuzz/fuzz_serve.c)
 * reaches every decoder. Every length is checked against what is left
 * before it is used; nothing allocates more than a bounded identity.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "serve/proto.h"
#include "source/s3.h" /* nst_hmac_sha256 */

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static int refuse(char *why, size_t whyn, const char *what)
{
    if (whyn) snprintf(why, whyn, "%s", what);
    return -1;
}

int nst_proto_frame(const uint8_t *buf, size_t n, uint32_t max_payload, nst_frame *f, size_t *need,
                    char *why, size_t whyn)
{
    if (n < 5) {
        *need = 5;
        return 1;
    }
    uint32_t len = get32(buf);
    if (len < 1) return refuse(why, whyn, "frame of length 0");
    if (len - 1 > max_payload) {
        if (whyn)
            snprintf(why, whyn, "frame of %u bytes over the limit of %u", len - 1, max_payload);
        return -1;
    }
    uint8_t type = buf[4];
    if (type < NST_MSG_HELLO || type > NST_MSG_ITEM) {
        if (whyn) snprintf(why, whyn, "unknown message type %u", type);
        return -1;
    }
    if (n < 4 + (size_t)len) {
        *need = 4 + (size_t)len;
        return 1;
    }
    *f = (nst_frame){.type = type, .payload = buf + 5, .len = len - 1, .consumed = 4 + (size_t)len};
    return 0;
}

/* A frame's header for a payload of `len` bytes: 5, or 0 if cap is short. */
static size_t header(uint8_t *out, size_t cap, uint8_t type, size_t len)
{
    if (cap < 5 || len > cap - 5 || len >= UINT32_MAX) return 0;
    put32(out, (uint32_t)(len + 1));
    out[4] = type;
    return 5;
}

size_t nst_proto_put_hello(uint8_t *out, size_t cap, const nst_hello *h)
{
    if (!header(out, cap, NST_MSG_HELLO, NST_PROTO_HELLO_LEN)) return 0;
    memcpy(out + 5, "NSTS", 4);
    put16(out + 9, h->version);
    put16(out + 11, 0);
    memcpy(out + 13, h->nonce, 32);
    return 5 + NST_PROTO_HELLO_LEN;
}

int nst_proto_get_hello(const nst_frame *f, nst_hello *h, char *why, size_t whyn)
{
    if (f->type != NST_MSG_HELLO) return refuse(why, whyn, "expected HELLO");
    if (f->len != NST_PROTO_HELLO_LEN) return refuse(why, whyn, "HELLO of the wrong length");
    if (memcmp(f->payload, "NSTS", 4) != 0)
        return refuse(why, whyn, "not a nostall prep server (no NSTS magic)");
    if (get16(f->payload + 6) != 0) return refuse(why, whyn, "HELLO with a reserved field set");
    h->version = get16(f->payload + 4);
    memcpy(h->nonce, f->payload + 8, 32);
    return 0;
}

size_t nst_proto_put_auth(uint8_t *out, size_t cap, const nst_auth *a)
{
    size_t len = 2 + 2 + 32 + 32 + 2;
    if (a->ident.n > NST_PROTO_IDENT_MAX) return 0;
    for (uint32_t i = 0; i < a->ident.n; i++) {
        size_t nl = strlen(a->ident.e[i].name), vl = strlen(a->ident.e[i].value);
        if (nl > NST_PROTO_NAME_MAX || vl > NST_PROTO_VALUE_MAX) return 0;
        len += 1 + nl + 2 + vl;
    }
    if (len > NST_PROTO_AUTH_MAX || !header(out, cap, NST_MSG_AUTH, len)) return 0;
    uint8_t *p = out + 5;
    put16(p, a->version);
    put16(p + 2, a->credits);
    memcpy(p + 4, a->nonce, 32);
    memcpy(p + 36, a->mac, 32);
    put16(p + 68, (uint16_t)a->ident.n);
    p += 70;
    for (uint32_t i = 0; i < a->ident.n; i++) {
        size_t nl = strlen(a->ident.e[i].name), vl = strlen(a->ident.e[i].value);
        *p++ = (uint8_t)nl;
        memcpy(p, a->ident.e[i].name, nl);
        p += nl;
        put16(p, (uint16_t)vl);
        memcpy(p + 2, a->ident.e[i].value, vl);
        p += 2 + vl;
    }
    return 5 + len;
}

/* The identity entries of an AUTH's payload from p[0, n). */
static int get_ident(const uint8_t *p, size_t n, nst_ident *id, char *why, size_t whyn)
{
    memset(id, 0, sizeof *id);
    if (n < 2) return refuse(why, whyn, "AUTH cut short before its identity");
    uint32_t count = get16(p);
    if (count > NST_PROTO_IDENT_MAX)
        return refuse(why, whyn, "AUTH with too many identity entries");
    /* values total at most the payload: one allocation */
    if (!(id->store = malloc(n + count + 1))) return refuse(why, whyn, "out of memory");
    size_t off = 2, so = 0;
    for (uint32_t i = 0; i < count; i++) {
        if (n - off < 1) goto cut;
        size_t nl = p[off++];
        if (nl == 0 || nl > NST_PROTO_NAME_MAX || n - off < nl + 2) goto cut;
        memcpy(id->e[i].name, p + off, nl);
        id->e[i].name[nl] = '\0';
        off += nl;
        size_t vl = get16(p + off);
        off += 2;
        if (vl > NST_PROTO_VALUE_MAX || n - off < vl) goto cut;
        if (memchr(id->e[i].name, '\0', nl) || memchr(p + off, '\0', vl)) {
            nst_ident_free(id);
            return refuse(why, whyn, "AUTH identity with a NUL byte");
        }
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(id->e[j].name, id->e[i].name) == 0) {
                nst_ident_free(id);
                return refuse(why, whyn, "AUTH identity names an entry twice");
            }
        id->e[i].value = id->store + so;
        memcpy(id->e[i].value, p + off, vl);
        id->e[i].value[vl] = '\0';
        so += vl + 1;
        off += vl;
        id->n = i + 1;
    }
    if (off != n) {
        nst_ident_free(id);
        return refuse(why, whyn, "AUTH with bytes after its identity");
    }
    return 0;
cut:
    nst_ident_free(id);
    return refuse(why, whyn, "AUTH identity entry cut short or over its bounds");
}

int nst_proto_get_auth(const nst_frame *f, nst_auth *a, char *why, size_t whyn)
{
    memset(a, 0, sizeof *a);
    if (f->type != NST_MSG_AUTH) return refuse(why, whyn, "expected AUTH");
    if (f->len < 68 || f->len > NST_PROTO_AUTH_MAX)
        return refuse(why, whyn, "AUTH of a bad length");
    a->version = get16(f->payload);
    a->credits = get16(f->payload + 2);
    memcpy(a->nonce, f->payload + 4, 32);
    memcpy(a->mac, f->payload + 36, 32);
    return get_ident(f->payload + 68, f->len - 68, &a->ident, why, whyn);
}

size_t nst_proto_put_welcome(uint8_t *out, size_t cap, const nst_welcome *w)
{
    if (!header(out, cap, NST_MSG_WELCOME, NST_PROTO_WELCOME_LEN)) return 0;
    memcpy(out + 5, w->mac, 32);
    put32(out + 37, w->credits);
    put64(out + 41, w->item_bytes);
    return 5 + NST_PROTO_WELCOME_LEN;
}

int nst_proto_get_welcome(const nst_frame *f, nst_welcome *w, char *why, size_t whyn)
{
    if (f->type != NST_MSG_WELCOME) return refuse(why, whyn, "expected WELCOME");
    if (f->len != NST_PROTO_WELCOME_LEN) return refuse(why, whyn, "WELCOME of the wrong length");
    memcpy(w->mac, f->payload, 32);
    w->credits = get32(f->payload + 32);
    w->item_bytes = get64(f->payload + 36);
    if (w->credits < 1 || w->credits > NST_PROTO_CREDITS_MAX)
        return refuse(why, whyn, "WELCOME with credits out of bounds");
    if (w->item_bytes > NST_PROTO_ITEM_BYTES_MAX)
        return refuse(why, whyn, "WELCOME with item bytes out of bounds");
    return 0;
}

size_t nst_proto_put_refuse(uint8_t *out, size_t cap, const char *text)
{
    size_t tl = strlen(text);
    if (tl > NST_PROTO_REFUSE_MAX) tl = NST_PROTO_REFUSE_MAX;
    if (!header(out, cap, NST_MSG_REFUSE, 2 + tl)) return 0;
    put16(out + 5, (uint16_t)tl);
    memcpy(out + 7, text, tl);
    return 7 + tl;
}

int nst_proto_get_refuse(const nst_frame *f, char *text, size_t textn, char *why, size_t whyn)
{
    if (f->type != NST_MSG_REFUSE) return refuse(why, whyn, "expected REFUSE");
    if (f->len < 2) return refuse(why, whyn, "REFUSE cut short");
    size_t tl = get16(f->payload);
    if (tl > NST_PROTO_REFUSE_MAX || tl != f->len - 2u)
        return refuse(why, whyn, "REFUSE of a bad length");
    if (textn == 0) return 0;
    size_t k = tl < textn - 1 ? tl : textn - 1;
    for (size_t i = 0; i < k; i++) {
        uint8_t c = f->payload[2 + i];
        text[i] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    text[k] = '\0';
    return 0;
}

size_t nst_proto_put_req(uint8_t *out, size_t cap, const nst_req_item *it, uint32_t n)
{
    if (n < 1 || n > NST_PROTO_REQ_MAX) return 0;
    size_t len = 4 + (size_t)n * 24;
    if (!header(out, cap, NST_MSG_REQ, len)) return 0;
    put32(out + 5, n);
    for (uint32_t i = 0; i < n; i++) {
        put64(out + 9 + 24 * i, it[i].id);
        put64(out + 17 + 24 * i, it[i].epoch);
        put64(out + 25 + 24 * i, it[i].index);
    }
    return 5 + len;
}

int nst_proto_get_req(const nst_frame *f, nst_req_item *it, uint32_t max, uint32_t *n, char *why,
                      size_t whyn)
{
    if (f->type != NST_MSG_REQ) return refuse(why, whyn, "expected REQ");
    if (f->len < 4) return refuse(why, whyn, "REQ cut short");
    uint32_t k = get32(f->payload);
    if (k < 1 || k > NST_PROTO_REQ_MAX || k > max)
        return refuse(why, whyn, "REQ with a count out of bounds");
    if (f->len != 4 + (size_t)k * 24) return refuse(why, whyn, "REQ of the wrong length");
    for (uint32_t i = 0; i < k; i++) {
        it[i].id = get64(f->payload + 4 + 24 * i);
        it[i].epoch = get64(f->payload + 12 + 24 * i);
        it[i].index = get64(f->payload + 20 + 24 * i);
    }
    *n = k;
    return 0;
}

size_t nst_proto_put_item_hdr(uint8_t *out, size_t cap, uint64_t id, int32_t status,
                              const char *msg, uint64_t item_bytes)
{
    size_t ml = status < 0 && msg ? strlen(msg) : 0;
    if (ml > NST_PROTO_MSG_MAX) ml = NST_PROTO_MSG_MAX;
    uint64_t body = status == 0 ? item_bytes : 0;
    uint64_t len = 1 + NST_PROTO_ITEM_HDR + ml + body;
    if (cap < 5 + NST_PROTO_ITEM_HDR + ml || len >= UINT32_MAX) return 0;
    put32(out, (uint32_t)len);
    out[4] = NST_MSG_ITEM;
    put64(out + 5, id);
    put32(out + 13, (uint32_t)status);
    put16(out + 17, (uint16_t)ml);
    memcpy(out + 19, msg ? msg : "", ml);
    return 5 + NST_PROTO_ITEM_HDR + ml;
}

int nst_proto_get_item_hdr(const uint8_t *p, uint32_t frame_len, uint64_t item_bytes,
                           nst_item_hdr *h, char *why, size_t whyn)
{
    if (frame_len < NST_PROTO_ITEM_HDR) return refuse(why, whyn, "ITEM cut short");
    h->id = get64(p);
    h->status = (int32_t)get32(p + 8);
    h->msglen = get16(p + 12);
    if (h->status > 0) return refuse(why, whyn, "ITEM with a positive status");
    if (h->status < 0 && h->status < -1000) return refuse(why, whyn, "ITEM with an unknown status");
    if (h->msglen > NST_PROTO_MSG_MAX) return refuse(why, whyn, "ITEM message over its bound");
    uint64_t want = (uint64_t)NST_PROTO_ITEM_HDR + h->msglen + (h->status == 0 ? item_bytes : 0);
    if (frame_len != want) return refuse(why, whyn, "ITEM of the wrong length");
    return 0;
}

void nst_proto_mac(const uint8_t *secret, size_t secret_len, int server, const uint8_t a[32],
                   const uint8_t b[32], uint8_t out[32])
{
    uint8_t m[20 + 64];
    memcpy(m, server ? "nostall-serve server" : "nostall-serve client", 20);
    memcpy(m + 20, a, 32);
    memcpy(m + 52, b, 32);
    nst_hmac_sha256(secret, secret_len, m, sizeof m, out);
}

int nst_proto_mac_equal(const uint8_t a[32], const uint8_t b[32])
{
    uint8_t d = 0;
    for (int i = 0; i < 32; i++) d |= (uint8_t)(a[i] ^ b[i]);
    return d == 0;
}

int nst_proto_nonce(uint8_t out[32])
{
    size_t got = 0;
    while (got < 32) {
        ssize_t k = getrandom(out + got, 32 - got, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        got += (size_t)k;
    }
    return 0;
}

int nst_proto_read_secret(const char *path, uint8_t *out, size_t *len, char *why, size_t whyn)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, whyn, "%s: cannot open the secret file: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        snprintf(why, whyn, "%s: the secret file is not a regular file", path);
        return -1;
    }
    if (st.st_mode & (S_IRWXG | S_IRWXO)) {
        close(fd);
        snprintf(why, whyn, "%s: the secret file is readable by others (chmod 600 it)", path);
        return -1;
    }
    ssize_t k = read(fd, out, NST_PROTO_SECRET_MAX);
    uint8_t extra;
    ssize_t more = k == NST_PROTO_SECRET_MAX ? read(fd, &extra, 1) : 0;
    close(fd);
    if (k < 0 || more != 0) {
        snprintf(why, whyn, "%s: cannot read the secret (at most %d bytes)", path,
                 NST_PROTO_SECRET_MAX);
        return -1;
    }
    if (k > 0 && out[k - 1] == '\n') k--;
    if (k == 0) {
        snprintf(why, whyn, "%s: the secret file is empty", path);
        return -1;
    }
    *len = (size_t)k;
    return 0;
}
