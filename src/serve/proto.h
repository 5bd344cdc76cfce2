/*
 * proto.h — the prep-server protocol (`nostall serve` and the loader's
 * client, prep_servers): length-prefixed binary messages over TCP, every
 * field bounded and validated here, before anything acts on it. Pure
 * functions on byte buffers (fuzzed: tests/fuzz/fuzz_serve.c), plus the
 * socket reads and writes with a deadline and a stop flag (net.c).
 *
 * FRAME  u32 len (little-endian; the bytes after it, type included, at
 *   most the reader's limit), u8 type, payload. Integers little-endian.
 *
 *   HELLO   S->C  "NSTS", u16 version, u16 0, nonce_s[32]
 *   AUTH    C->S  u16 version, u16 credits wanted, nonce_c[32],
 *                 mac_c[32] = HMAC-SHA256(secret, "nostall-serve client" |
 *                 nonce_s | nonce_c), then the identity: u16 n, n x
 *                 (u8 name length, name, u16 value length, value)
 *   WELCOME S->C  mac_s[32] = HMAC-SHA256(secret, "nostall-serve server" |
 *                 nonce_c | nonce_s), u32 credits granted, u64 item bytes
 *   REFUSE  any   u16 length, text: why (the connection then closes)
 *   REQ     C->S  u32 n (1..NST_PROTO_REQ_MAX), n x (u64 id, u64 epoch,
 *                 u64 index): prepare item `index` of the dataset with the
 *                 draws of `epoch` (the item's own epoch)
 *   ITEM    S->C  u64 id, i32 status, u16 message length, message, then
 *                 (status 0 only) the item's bytes: each field's in order
 *
 * The identity is every fact the item bytes depend on, as text: the
 * dataset (item count, fingerprint of paths and labels), the fields'
 * layout, and every byte-affecting option (nst_proto_identity). A server
 * refuses a client whose identity differs, naming the first difference.
 * The secret never travels: each side proves it by a MAC over both nonces.
 */
#ifndef NST_SERVE_PROTO_H
#define NST_SERVE_PROTO_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common/config.h"
#include "recipe/recipe.h"

#define NST_PROTO_VERSION 1
#define NST_PROTO_HELLO_LEN 40                /* payload bytes                          */
#define NST_PROTO_WELCOME_LEN 44              /* payload bytes                          */
#define NST_PROTO_AUTH_MAX 65536              /* an AUTH frame's payload, at most       */
#define NST_PROTO_IDENT_MAX 256               /* identity entries                       */
#define NST_PROTO_NAME_MAX 64                 /* an identity entry's name (bytes)       */
#define NST_PROTO_VALUE_MAX 4096              /* ... its value                          */
#define NST_PROTO_REFUSE_MAX 1024             /* a refusal's text                       */
#define NST_PROTO_MSG_MAX 512                 /* a bad item's message                   */
#define NST_PROTO_REQ_MAX 256                 /* items of one REQ                       */
#define NST_PROTO_CREDITS_MAX 256             /* items in flight on one connection      */
#define NST_PROTO_ITEM_HDR 14                 /* u64 id, i32 status, u16 message length */
#define NST_PROTO_SECRET_MAX 4096             /* a secret's bytes                       */
#define NST_PROTO_ITEM_BYTES_MAX (1ull << 32) /* one item's bytes, at most    */

enum {
    NST_MSG_HELLO = 1,
    NST_MSG_AUTH = 2,
    NST_MSG_WELCOME = 3,
    NST_MSG_REFUSE = 4,
    NST_MSG_REQ = 5,
    NST_MSG_ITEM = 6
};

/* A frame found at the start of a buffer. */
typedef struct nst_frame {
    uint8_t type;
    const uint8_t *payload;
    uint32_t len;    /* payload bytes                                        */
    size_t consumed; /* header + payload                                     */
} nst_frame;

/* Parse the frame at buf[0, n): 0 with *f; 1 (incomplete: *need set to the
 * bytes the whole frame takes); -1 refused (why). A frame whose payload
 * exceeds `max_payload` is refused before its bytes arrive. */
int nst_proto_frame(const uint8_t *buf, size_t n, uint32_t max_payload, nst_frame *f, size_t *need,
                    char *why, size_t whyn);

/* An identity: entries in order, name and value each bounded. */
typedef struct nst_ident_entry {
    char name[NST_PROTO_NAME_MAX + 1];
    char *value; /* NUL-terminated, at most NST_PROTO_VALUE_MAX bytes */
} nst_ident_entry;
typedef struct nst_ident {
    uint32_t n;
    nst_ident_entry e[NST_PROTO_IDENT_MAX];
    char *store; /* the values (one allocation) */
} nst_ident;

/* The identity of the items a loader with `cfg` makes from `r`. */
int nst_proto_identity(const nostall_config *cfg, const nst_recipe *r, nst_ident *out);
void nst_ident_free(nst_ident *id);
/* The first difference between a server's identity and a client's, as
 * text into why (0: none, 1: they differ). */
int nst_ident_compare(const nst_ident *server, const nst_ident *client, char *why, size_t whyn);

typedef struct nst_hello {
    uint16_t version;
    uint8_t nonce[32];
} nst_hello;
typedef struct nst_auth {
    uint16_t version, credits;
    uint8_t nonce[32], mac[32];
    nst_ident ident; /* decode: values allocated (nst_ident_free) */
} nst_auth;
typedef struct nst_welcome {
    uint8_t mac[32];
    uint32_t credits;
    uint64_t item_bytes;
} nst_welcome;
typedef struct nst_req_item {
    uint64_t id, epoch, index;
} nst_req_item;
typedef struct nst_item_hdr {
    uint64_t id;
    int32_t status;
    uint16_t msglen;
} nst_item_hdr;

/* Encoders: the whole frame into out (cap bytes); its length, or 0 when it
 * does not fit. */
size_t nst_proto_put_hello(uint8_t *out, size_t cap, const nst_hello *h);
size_t nst_proto_put_auth(uint8_t *out, size_t cap, const nst_auth *a);
size_t nst_proto_put_welcome(uint8_t *out, size_t cap, const nst_welcome *w);
size_t nst_proto_put_refuse(uint8_t *out, size_t cap, const char *why);
size_t nst_proto_put_req(uint8_t *out, size_t cap, const nst_req_item *it, uint32_t n);
/* An ITEM's header and message (the item's bytes follow it, written by the
 * caller: `item_bytes` of them when status is 0). */
size_t nst_proto_put_item_hdr(uint8_t *out, size_t cap, uint64_t id, int32_t status,
                              const char *msg, uint64_t item_bytes);

/* Decoders of a frame's payload: 0, or -1 with why. */
int nst_proto_get_hello(const nst_frame *f, nst_hello *h, char *why, size_t whyn);
int nst_proto_get_auth(const nst_frame *f, nst_auth *a, char *why, size_t whyn);
int nst_proto_get_welcome(const nst_frame *f, nst_welcome *w, char *why, size_t whyn);
/* The refusal's text, made printable (control bytes become '?'). */
int nst_proto_get_refuse(const nst_frame *f, char *text, size_t textn, char *why, size_t whyn);
/* Up to `max` items into it (*n). */
int nst_proto_get_req(const nst_frame *f, nst_req_item *it, uint32_t max, uint32_t *n, char *why,
                      size_t whyn);
/* An ITEM's fixed header at the start of its payload, checked against the
 * frame's length: the message and, for status 0, exactly item_bytes. */
int nst_proto_get_item_hdr(const uint8_t *p, uint32_t frame_len, uint64_t item_bytes,
                           nst_item_hdr *h, char *why, size_t whyn);

/* The MACs of the handshake. */
void nst_proto_mac(const uint8_t *secret, size_t secret_len, int server, const uint8_t a[32],
                   const uint8_t b[32], uint8_t out[32]);
/* Constant-time comparison of two MACs: 1 equal. */
int nst_proto_mac_equal(const uint8_t a[32], const uint8_t b[32]);
/* 32 random bytes (getrandom). 0 or -1. */
int nst_proto_nonce(uint8_t out[32]);

/* A secret from a file: its bytes, one trailing newline dropped; refused
 * when empty, larger than NST_PROTO_SECRET_MAX or readable by others. */
int nst_proto_read_secret(const char *path, uint8_t *out, size_t *len, char *why, size_t whyn);

/* net.c: whole reads and writes on a socket; each returns 0, or -1 with
 * why (peer closed, error, deadline passed, stopped). deadline_ns 0: none;
 * `stop` (may be NULL) is polled every 100 ms. */
int nst_net_read(int fd, void *buf, size_t n, uint64_t deadline_ns, const atomic_int *stop,
                 char *why, size_t whyn);
int nst_net_write(int fd, const void *buf, size_t n, uint64_t deadline_ns, const atomic_int *stop,
                  char *why, size_t whyn);
/* Read one frame (header then payload, at most max_payload) into buf (cap
 * >= 5 + max_payload): 0 with *f. */
int nst_net_read_frame(int fd, uint8_t *buf, size_t cap, uint32_t max_payload, nst_frame *f,
                       uint64_t deadline_ns, const atomic_int *stop, char *why, size_t whyn);
/* "host:port" -> host (cap bytes) and port: 0 or -1. IPv6 as [addr]:port. */
int nst_net_split(const char *hp, char *host, size_t cap, uint16_t *port);
/* Connect to host:port within the deadline: the socket, or -1 with why. */
int nst_net_connect(const char *host, uint16_t port, uint64_t deadline_ns, const atomic_int *stop,
                    char *why, size_t whyn);
/* Listen on host:port (port 0: any); the socket and the port bound, or -1. */
int nst_net_listen(const char *host, uint16_t port, uint16_t *bound, char *why, size_t whyn);

#endif
