/*
 * test_serve_proto.c — the prep-server protocol's pieces (src/serve/
 * proto.c, ident.c): HMAC-SHA256 against RFC 4231's vectors (the
 * handshake's MACs are built on it), each message encoded and decoded
 * back, every bound refused with a reason (frame over the limit, unknown
 * type, REQ count and length, ITEM length, AUTH cut short or with bytes
 * after it), the two MACs of the handshake distinct, and identities
 * compared naming the difference.
 */
#include "check.h"
#include "serve/proto.h"
#include "source/s3.h"

static int hex_is(const uint8_t *d, const char *hex)
{
    char s[65];
    for (int i = 0; i < 32; i++) snprintf(s + 2 * i, 3, "%02x", d[i]);
    return strcmp(s, hex) == 0;
}

static void rfc4231(void)
{
    uint8_t out[32], key[131];
    memset(key, 0x0b, 20);
    nst_hmac_sha256(key, 20, "Hi There", 8, out);
    CHECK(hex_is(out, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"));
    nst_hmac_sha256("Jefe", 4, "what do ya want for nothing?", 28, out);
    CHECK(hex_is(out, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"));
    memset(key, 0xaa, 131); /* test case 6: a key longer than the block */
    const char *m = "Test Using Larger Than Block-Size Key - Hash Key First";
    nst_hmac_sha256(key, 131, m, strlen(m), out);
    CHECK(hex_is(out, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"));
}

static void messages(void)
{
    uint8_t buf[70000];
    char why[200];
    nst_frame f;
    size_t need;
    nst_hello h = {.version = NST_PROTO_VERSION}, h2;
    for (int i = 0; i < 32; i++) h.nonce[i] = (uint8_t)i;
    size_t n = nst_proto_put_hello(buf, sizeof buf, &h);
    CHECK_EQ(nst_proto_frame(buf, n - 1, 100, &f, &need, why, sizeof why), 1);
    CHECK_EQ(need, n);
    CHECK_EQ(nst_proto_frame(buf, n, 100, &f, &need, why, sizeof why), 0);
    CHECK_EQ(f.consumed, n);
    CHECK_OK(nst_proto_get_hello(&f, &h2, why, sizeof why));
    CHECK(memcmp(h.nonce, h2.nonce, 32) == 0);
    CHECK_EQ(nst_proto_get_welcome(&f, &(nst_welcome){0}, why, sizeof why), -1);
    /* over the reader's limit: refused from the header alone */
    CHECK_EQ(nst_proto_frame(buf, 5, 10, &f, &need, why, sizeof why), -1);
    CHECK(strstr(why, "over the limit") != NULL);
    uint8_t bad[5] = {1, 0, 0, 0, 99};
    CHECK_EQ(nst_proto_frame(bad, 5, 100, &f, &need, why, sizeof why), -1);
    CHECK(strstr(why, "unknown message type") != NULL);

    nst_req_item it[3] = {{1, 2, 3}, {4, 5, 6}, {7, 8, 9}}, back[3];
    uint32_t k = 0;
    n = nst_proto_put_req(buf, sizeof buf, it, 3);
    CHECK_EQ(nst_proto_frame(buf, n, 1000, &f, &need, why, sizeof why), 0);
    CHECK_OK(nst_proto_get_req(&f, back, 3, &k, why, sizeof why));
    CHECK_EQ(k, 3);
    CHECK(memcmp(it, back, sizeof it) == 0);
    CHECK_EQ(nst_proto_get_req(&f, back, 2, &k, why, sizeof why), -1); /* over the caller's max */
    buf[5] = 4; /* count 4, but the length holds 3 */
    CHECK_EQ(nst_proto_get_req(&f, back, 3, &k, why, sizeof why), -1);

    n = nst_proto_put_item_hdr(buf, sizeof buf, 42, -7, "corrupt", 100);
    nst_item_hdr ih;
    CHECK_OK(nst_proto_get_item_hdr(buf + 5, (uint32_t)(n - 5), 100, &ih, why, sizeof why));
    CHECK_EQ(ih.id, 42);
    CHECK_EQ(ih.status, -7);
    CHECK_EQ(ih.msglen, 7);
    n = nst_proto_put_item_hdr(buf, sizeof buf, 43, 0, NULL, 100);
    /* a good item's frame counts its bytes: the header alone is short */
    CHECK_EQ(nst_proto_get_item_hdr(buf + 5, (uint32_t)(n - 5), 100, &ih, why, sizeof why), -1);
    CHECK_OK(nst_proto_get_item_hdr(buf + 5, (uint32_t)(n - 5 + 100), 100, &ih, why, sizeof why));

    char text[64];
    n = nst_proto_put_refuse(buf, sizeof buf, "no\x01pe");
    CHECK_EQ(nst_proto_frame(buf, n, 2000, &f, &need, why, sizeof why), 0);
    CHECK_OK(nst_proto_get_refuse(&f, text, sizeof text, why, sizeof why));
    CHECK(strcmp(text, "no?pe") == 0);

    nst_welcome w = {.credits = 16, .item_bytes = 12296}, w2;
    memset(w.mac, 7, 32);
    n = nst_proto_put_welcome(buf, sizeof buf, &w);
    CHECK_EQ(nst_proto_frame(buf, n, 100, &f, &need, why, sizeof why), 0);
    CHECK_OK(nst_proto_get_welcome(&f, &w2, why, sizeof why));
    CHECK_EQ(w2.credits, 16);
    CHECK_EQ(w2.item_bytes, 12296);
}

static void auth_and_identity(void)
{
    nostall_config *cfg = NULL;
    CHECK_OK(nostall_config_create(&cfg));
    static uint8_t buf[8 + NST_PROTO_AUTH_MAX];
    char why[300];
    nst_auth a = {.version = 1, .credits = 8}, b;
    a.ident.n = 2;
    char v0[] = "48", v1[] = "224";
    snprintf(a.ident.e[0].name, sizeof a.ident.e[0].name, "dataset items");
    a.ident.e[0].value = v0;
    snprintf(a.ident.e[1].name, sizeof a.ident.e[1].name, "crop");
    a.ident.e[1].value = v1;
    size_t n = nst_proto_put_auth(buf, sizeof buf, &a);
    nst_frame f;
    size_t need;
    CHECK_EQ(nst_proto_frame(buf, n, NST_PROTO_AUTH_MAX, &f, &need, why, sizeof why), 0);
    CHECK_OK(nst_proto_get_auth(&f, &b, why, sizeof why));
    CHECK_EQ(b.ident.n, 2);
    CHECK(strcmp(b.ident.e[1].value, "224") == 0);
    CHECK_EQ(nst_ident_compare(&a.ident, &b.ident, why, sizeof why), 0);
    b.ident.e[1].value[2] = '0';
    CHECK_EQ(nst_ident_compare(&a.ident, &b.ident, why, sizeof why), 1);
    CHECK(strcmp(why, "crop differs: server '224', client '220'") == 0);
    nst_ident_free(&b.ident);
    f.len -= 1; /* cut: the last value is short */
    CHECK_EQ(nst_proto_get_auth(&f, &b, why, sizeof why), -1);
    CHECK(why[0] != '\0');
    f.len += 2; /* a byte after the identity */
    CHECK_EQ(nst_proto_get_auth(&f, &b, why, sizeof why), -1);

    uint8_t s1[32], s2[32], x[32] = {1}, y[32] = {2};
    nst_proto_mac((const uint8_t *)"k", 1, 0, x, y, s1);
    nst_proto_mac((const uint8_t *)"k", 1, 1, y, x, s2);
    CHECK(!nst_proto_mac_equal(s1, s2)); /* a client's proof is no server's */
    CHECK(nst_proto_mac_equal(s1, s1));
    nostall_config_free(cfg);
}

int main(void)
{
    rfc4231();
    messages();
    auth_and_identity();
    TEST_EXIT();
}
