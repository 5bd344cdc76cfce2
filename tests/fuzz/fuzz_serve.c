/*
 * fuzz_serve.c — the prep-server protocol's parser (src/serve/proto.c) on
 * hostile bytes: the input is a byte stream as a peer would send it.
 *
 * Frames are parsed one after another with the AUTH limit (64 KiB); each
 * frame goes to every decoder (its own type's and the others', which must
 * refuse it), and an ITEM's header to the item decoder with a few item
 * sizes. Properties (abort() on violation):
 *   - the frame parser answers 0, 1 or -1; a frame consumes 5 + its payload
 *     and no more than was given; "need more" asks for more than was given;
 *   - a refusal always has a reason;
 *   - what HELLO, WELCOME, REQ and REFUSE decode encodes back to a frame
 *     that decodes the same (REQ, HELLO, WELCOME: byte for byte);
 *   - a decoded AUTH's identity is within its bounds, its values
 *     NUL-terminated, no name twice, and comparing it with itself finds
 *     no difference;
 *   - no crash, leak or undefined behaviour (ASan, UBSan).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/proto.h"

static void die(const char *what)
{
    fprintf(stderr, "fuzz_serve: %s\n", what);
    abort();
}

static void decoders(const nst_frame *f)
{
    char why[128];
    uint8_t out[8 + 4 + 24 * NST_PROTO_REQ_MAX + NST_PROTO_REFUSE_MAX];
    nst_hello h;
    if (nst_proto_get_hello(f, &h, why, sizeof why) == 0) {
        if (f->type != NST_MSG_HELLO) die("HELLO decoded from another type");
        size_t n = nst_proto_put_hello(out, sizeof out, &h);
        if (n != 5 + f->len || memcmp(out + 5, f->payload, 8) || memcmp(out + 13, h.nonce, 32))
            die("HELLO does not round-trip");
    } else if (!why[0])
        die("HELLO refused without a reason");
    nst_welcome w;
    if (nst_proto_get_welcome(f, &w, why, sizeof why) == 0) {
        size_t n = nst_proto_put_welcome(out, sizeof out, &w);
        if (n != 5 + f->len || memcmp(out + 5, f->payload, f->len)) die("WELCOME round trip");
    }
    nst_req_item it[NST_PROTO_REQ_MAX];
    uint32_t k = 0;
    if (nst_proto_get_req(f, it, NST_PROTO_REQ_MAX, &k, why, sizeof why) == 0) {
        if (k < 1 || k > NST_PROTO_REQ_MAX) die("REQ count out of bounds");
        size_t n = nst_proto_put_req(out, sizeof out, it, k);
        if (n != 5 + f->len || memcmp(out + 5, f->payload, f->len)) die("REQ round trip");
    }
    char text[64];
    if (nst_proto_get_refuse(f, text, sizeof text, why, sizeof why) == 0) {
        if (!memchr(text, '\0', sizeof text)) die("REFUSE text not terminated");
        for (const char *c = text; *c; c++)
            if ((unsigned char)*c < 0x20) die("REFUSE text with a control byte");
    }
    nst_auth a;
    if (nst_proto_get_auth(f, &a, why, sizeof why) == 0) {
        if (a.ident.n > NST_PROTO_IDENT_MAX) die("AUTH identity too long");
        for (uint32_t i = 0; i < a.ident.n; i++)
            if (strlen(a.ident.e[i].name) > NST_PROTO_NAME_MAX ||
                strlen(a.ident.e[i].value) > NST_PROTO_VALUE_MAX)
                die("AUTH entry over its bounds");
        char diff[256];
        if (nst_ident_compare(&a.ident, &a.ident, diff, sizeof diff) != 0)
            die("an identity differs from itself");
        nst_ident_free(&a.ident);
    } else if (!why[0])
        die("AUTH refused without a reason");
    if (f->type == NST_MSG_ITEM) {
        static const uint64_t sizes[] = {0, 1, 16, 1u << 20};
        for (int s = 0; s < 4; s++) {
            nst_item_hdr ih;
            if (nst_proto_get_item_hdr(f->payload, f->len, sizes[s], &ih, why, sizeof why) == 0) {
                if (ih.msglen > NST_PROTO_MSG_MAX || ih.status > 0) die("ITEM out of bounds");
                uint64_t want = NST_PROTO_ITEM_HDR + ih.msglen + (ih.status == 0 ? sizes[s] : 0);
                if (want != f->len) die("ITEM length not checked");
            }
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t off = 0;
    while (off < size) {
        nst_frame f;
        size_t need = 0;
        char why[128] = "";
        int rc =
            nst_proto_frame(data + off, size - off, NST_PROTO_AUTH_MAX, &f, &need, why, sizeof why);
        if (rc == 1) {
            if (need <= size - off) die("need more, but not more than given");
            break;
        }
        if (rc < 0) {
            if (!why[0]) die("frame refused without a reason");
            break;
        }
        if (rc != 0) die("frame answer not in {-1, 0, 1}");
        if (f.consumed != 5 + (size_t)f.len || f.consumed > size - off) die("frame overruns");
        decoders(&f);
        off += f.consumed;
    }
    return 0;
}
