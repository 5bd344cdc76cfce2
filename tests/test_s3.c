/*
 * test_s3.c — the s3:// source's pieces without a server (src/source/s3*.c):
 *   SHA-256 (FIPS 180-2 examples) and HMAC-SHA256 (RFC 4231);
 *   the reference SigV4 signer against the AWS documentation's published
 *   examples (the S3 GET Object example with a Range header, the GET
 *   bucket lifecycle and ListObjects examples, all with the access key
 *   AKIAIOSFODNN7EXAMPLE; the SigV4 test suite's get-vanilla);
 *   libcurl's own Authorization header (CURLOPT_AWS_SIGV4, as set up by
 *   nst_s3_setup_easy) captured by a one-shot loopback listener and
 *   recomputed by the reference signer, for a key with + = , ; @ and a
 *   space: the header x-amz-content-sha256 sent once, the path encoded;
 *   URL forms (path-style endpoint, virtual-hosted, dotted bucket, cn-);
 *   URI encoding and the sorted query; bucket/key parsing;
 *   configuration from the environment and the shared credentials file
 *   (profiles, half-set pairs, a missing profile) with no secret in any
 *   message; S3 error bodies parsed and redacted; reasons that name the
 *   bucket and key; nst_s3_current's one configuration per environment.
 */
#include <curl/curl.h>
#include <pthread.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "check.h"
#include "source/s3.h"

static const char *const AK = "AKIAIOSFODNN7EXAMPLE";
static const char *const SK = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
#define EMPTY "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

static void hex_of(const void *d, size_t n, char out[65])
{
    uint8_t h[32];
    nst_sha256(d, n, h);
    nst_hex32(h, out);
}

static void test_sha256(void)
{
    char hx[65];
    hex_of("", 0, hx);
    CHECK(strcmp(hx, EMPTY) == 0);
    hex_of("abc", 3, hx);
    CHECK(strcmp(hx, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == 0);
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    hex_of(m, strlen(m), hx);
    CHECK(strcmp(hx, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1") == 0);
    char *a = malloc(1000000);
    memset(a, 'a', 1000000);
    hex_of(a, 1000000, hx);
    CHECK(strcmp(hx, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0") == 0);
    free(a);
    /* RFC 4231 test case 2 */
    uint8_t mac[32];
    const char *d = "what do ya want for nothing?";
    nst_hmac_sha256("Jefe", 4, d, strlen(d), mac);
    nst_hex32(mac, hx);
    CHECK(strcmp(hx, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843") == 0);
}

/* The AWS S3 documentation's examples ("Signature Calculations for the
 * Authorization Header: Transferring Payload in a Single Chunk"), bucket
 * examplebucket, 20130524T000000Z, us-east-1. */
static void test_sigv4_docs(void)
{
    nst_sigv4_out o;
    const char *get_obj[] = {"Host: examplebucket.s3.amazonaws.com", "Range: bytes=0-9",
                             ("x-amz-content-sha256: " EMPTY), "x-amz-date: 20130524T000000Z"};
    nst_sigv4_req r = {.method = "GET",
                       .uri = "/test.txt",
                       .query = "",
                       .headers = get_obj,
                       .nheaders = 4,
                       .payload_hash = EMPTY,
                       .amz_date = "20130524T000000Z",
                       .region = "us-east-1",
                       .service = "s3",
                       .access_key = AK,
                       .secret = SK};
    CHECK_OK(nst_sigv4_sign(&r, &o));
    CHECK(strcmp(o.canonical_request,
                 "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
                 "x-amz-content-sha256:" EMPTY "\nx-amz-date:20130524T000000Z\n\n"
                 "host;range;x-amz-content-sha256;x-amz-date\n" EMPTY) == 0);
    CHECK(strstr(o.string_to_sign,
                 "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972") != NULL);
    CHECK(strcmp(o.signature, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41") ==
          0);
    CHECK(strstr(o.authorization, "Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/"
                                  "aws4_request") != NULL);
    CHECK(strstr(o.authorization, "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date") !=
          NULL);

    /* GET Bucket Lifecycle: GET /?lifecycle */
    const char *hdrs[] = {"Host: examplebucket.s3.amazonaws.com", "x-amz-date: 20130524T000000Z",
                          ("x-amz-content-sha256: " EMPTY)};
    r.headers = hdrs;
    r.nheaders = 3;
    r.uri = "/";
    r.query = "lifecycle=";
    CHECK_OK(nst_sigv4_sign(&r, &o));
    CHECK(strcmp(o.signature, "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543") ==
          0);

    /* GET Bucket (list objects): GET /?max-keys=2&prefix=J, the query
     * built the way nst_s3_list builds it */
    char q[128] = "";
    CHECK_OK(nst_s3_query_add(q, sizeof q, "max-keys", "2"));
    CHECK_OK(nst_s3_query_add(q, sizeof q, "prefix", "J"));
    CHECK(strcmp(q, "max-keys=2&prefix=J") == 0);
    r.query = q;
    CHECK_OK(nst_sigv4_sign(&r, &o));
    CHECK(strcmp(o.signature, "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7") ==
          0);

    /* the SigV4 test suite's get-vanilla (service "service") */
    const char *gv[] = {"Host:example.amazonaws.com", "X-Amz-Date:20150830T123600Z"};
    nst_sigv4_req v = {.method = "GET",
                       .uri = "/",
                       .query = "",
                       .headers = gv,
                       .nheaders = 2,
                       .payload_hash = EMPTY,
                       .amz_date = "20150830T123600Z",
                       .region = "us-east-1",
                       .service = "service",
                       .access_key = "AKIDEXAMPLE",
                       .secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"};
    CHECK_OK(nst_sigv4_sign(&v, &o));
    CHECK(strcmp(o.signature, "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31") ==
          0);
    CHECK(strcmp(o.signed_headers, "host;x-amz-date") == 0);

    /* out-of-order query parameters are refused */
    char q2[64] = "";
    CHECK_OK(nst_s3_query_add(q2, sizeof q2, "prefix", "a"));
    CHECK_RC(nst_s3_query_add(q2, sizeof q2, "max-keys", "2"), NOSTALL_E_INVALID);
    CHECK_RC(nst_sigv4_sign(&(nst_sigv4_req){.method = "GET"}, &o), NOSTALL_E_INVALID);
}

static void test_encoding(void)
{
    char out[256];
    const char *k = "dir/a+b=c,d;e@f g~.-_%.jpg";
    CHECK(nst_s3_uri_encode(k, strlen(k), 1, out, sizeof out) > 0);
    CHECK(strcmp(out, "dir/a%2Bb%3Dc%2Cd%3Be%40f%20g~.-_%25.jpg") == 0);
    CHECK(nst_s3_uri_encode(k, strlen(k), 0, out, sizeof out) > 0);
    CHECK(strncmp(out, "dir%2Fa", 7) == 0);
    CHECK_EQ(nst_s3_uri_encode("a+b", 3, 1, out, 5), -1);
    const char *u = "\xc3\xa9";
    CHECK(nst_s3_uri_encode(u, 2, 1, out, sizeof out) == 6 && strcmp(out, "%C3%A9") == 0);

    char b[NST_S3_BUCKET_MAX + 1];
    const char *key;
    CHECK_OK(nst_s3_parse("s3://my-bucket/a/b c.jpg", b, sizeof b, &key));
    CHECK(strcmp(b, "my-bucket") == 0 && strcmp(key, "a/b c.jpg") == 0);
    CHECK_OK(nst_s3_parse("S3://bkt", b, sizeof b, &key));
    CHECK(strcmp(b, "bkt") == 0 && *key == '\0');
    CHECK_RC(nst_s3_parse("s3:///key", b, sizeof b, &key), NOSTALL_E_INVALID);
    CHECK_RC(nst_s3_parse("s3://user@host/key", b, sizeof b, &key), NOSTALL_E_INVALID);
    CHECK_RC(nst_s3_parse("http://b/k", b, sizeof b, &key), NOSTALL_E_INVALID);
    CHECK(nst_s3_is_url("s3://b/k") && nst_s3_is_url("S3://b/k") && !nst_s3_is_url("s3:/b"));
}

static void clear_env(void)
{
    const char *v[] = {"AWS_ACCESS_KEY_ID",
                       "AWS_SECRET_ACCESS_KEY",
                       "AWS_SESSION_TOKEN",
                       "AWS_PROFILE",
                       "AWS_SHARED_CREDENTIALS_FILE",
                       "AWS_CONFIG_FILE",
                       "AWS_REGION",
                       "AWS_DEFAULT_REGION",
                       "AWS_ENDPOINT_URL",
                       "AWS_ENDPOINT_URL_S3",
                       NULL};
    for (int i = 0; v[i]; i++) unsetenv(v[i]);
}

static void test_urls(const char *tmp)
{
    char home[512];
    snprintf(home, sizeof home, "%s/home", tmp);
    setenv("HOME", home, 1); /* no ~/.aws here */
    clear_env();
    nst_s3 *s;
    char *u = NULL;
    size_t cap = 0;
    CHECK_OK(nst_s3_create(&s));
    CHECK(!nst_s3_signed(s));
    CHECK(strcmp(nst_s3_region(s), "us-east-1") == 0);
    CHECK_OK(nst_s3_object_url(s, "s3://my-bucket/a b+c.jpg", &u, &cap));
    CHECK(strcmp(u, "https://my-bucket.s3.us-east-1.amazonaws.com/a%20b%2Bc.jpg") == 0);
    CHECK_OK(nst_s3_object_url(s, "s3://my.dotted.bucket/k", &u, &cap));
    CHECK(strcmp(u, "https://s3.us-east-1.amazonaws.com/my.dotted.bucket/k") == 0);
    CHECK_RC(nst_s3_object_url(s, "s3://bucket/", &u, &cap), NOSTALL_E_INVALID);
    nst_s3_free(s);

    setenv("AWS_REGION", "cn-north-1", 1);
    CHECK_OK(nst_s3_create(&s));
    CHECK_OK(nst_s3_object_url(s, "s3://bkt/k", &u, &cap));
    CHECK(strcmp(u, "https://bkt.s3.cn-north-1.amazonaws.com.cn/k") == 0);
    nst_s3_free(s);

    setenv("AWS_ENDPOINT_URL", "HTTP://127.0.0.1:9000/", 1);
    setenv("AWS_REGION", "eu-west-3", 1);
    CHECK_OK(nst_s3_create(&s));
    CHECK(strcmp(nst_s3_endpoint(s), "http://127.0.0.1:9000") == 0);
    CHECK_OK(nst_s3_object_url(s, "s3://bkt/x/y;z.tar", &u, &cap));
    CHECK(strcmp(u, "http://127.0.0.1:9000/bkt/x/y%3Bz.tar") == 0);
    CHECK_OK(nst_s3_http_url(s, "bkt", "", "list-type=2", &u, &cap));
    CHECK(strcmp(u, "http://127.0.0.1:9000/bkt/?list-type=2") == 0);
    nst_s3_free(s);

    setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000/some/path", 1);
    CHECK_RC(nst_s3_create(&s), NOSTALL_E_INVALID);
    setenv("AWS_ENDPOINT_URL", "ftp://h", 1);
    CHECK_RC(nst_s3_create(&s), NOSTALL_E_INVALID);
    setenv("AWS_ENDPOINT_URL", "http://user:pw@h", 1);
    CHECK_RC(nst_s3_create(&s), NOSTALL_E_INVALID);
    CHECK(strstr(nostall_last_error(), "pw") == NULL);
    unsetenv("AWS_ENDPOINT_URL");
    setenv("AWS_REGION", "us east", 1);
    CHECK_RC(nst_s3_create(&s), NOSTALL_E_INVALID);
    clear_env();
    free(u);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static void test_credentials(const char *tmp)
{
    const char *secret = "Zx9SECRETvalue/with+chars=";
    char cred[512], cfg[512];
    snprintf(cred, sizeof cred, "%s/credentials", tmp);
    snprintf(cfg, sizeof cfg, "%s/config", tmp);
    clear_env();
    nst_s3 *s;

    /* the environment: a half-set pair is an error that names no secret */
    setenv("AWS_SECRET_ACCESS_KEY", secret, 1);
    CHECK_RC(nst_s3_create(&s), NOSTALL_E_INVALID);
    CHECK(strstr(nostall_last_error(), "AWS_ACCESS_KEY_ID") != NULL);
    CHECK(strstr(nostall_last_error(), secret) == NULL);
    setenv("AWS_ACCESS_KEY_ID", AK, 1);
    setenv("AWS_SESSION_TOKEN", "TOKENtokenTOKEN123", 1);
    CHECK_OK(nst_s3_create(&s));
    CHECK(nst_s3_signed(s));
    CHECK(strstr(nst_s3_cred_source(s), "environment") != NULL);
    CHECK(strstr(nst_s3_cred_source(s), "AWS_SESSION_TOKEN") != NULL);

    /* redaction: server text and our reasons never carry the secret */
    char msg[256];
    snprintf(msg, sizeof msg, "a %s b TOKENtokenTOKEN123 c %s", secret, secret);
    nst_s3_redact(s, msg, sizeof msg);
    CHECK(strcmp(msg, "a [redacted] b [redacted] c [redacted]") == 0);
    char body[512];
    snprintf(body, sizeof body,
             "<?xml version=\"1.0\"?><Error><Code>SignatureDoesNotMatch</Code><Message>you "
             "signed with %s &amp; more</Message></Error>",
             secret);
    nst_s3_errinfo ei;
    nst_s3_parse_error(s, body, strlen(body), &ei);
    CHECK(strcmp(ei.code, "SignatureDoesNotMatch") == 0);
    CHECK(strcmp(ei.message, "you signed with [redacted] & more") == 0);
    char reason[600];
    CHECK_EQ(nst_s3_reason(s, 403, &ei, "", "bkt", "a/b.jpg", reason, sizeof reason), 0);
    CHECK(strstr(reason, "HTTP 403 SignatureDoesNotMatch") != NULL);
    CHECK(strstr(reason, "key 'a/b.jpg' in bucket 'bkt'") != NULL);
    CHECK(strstr(reason, "environment") != NULL);
    CHECK(strstr(reason, secret) == NULL && strstr(reason, AK) == NULL);
    nst_s3_errinfo slow = {.code = "SlowDown", .message = "Please reduce your request rate."};
    CHECK_EQ(nst_s3_reason(s, 503, &slow, "", "bkt", "k", reason, sizeof reason), 1);
    nst_s3_errinfo nb = {.code = "NoSuchBucket", .message = ""};
    CHECK_EQ(nst_s3_reason(s, 404, &nb, "", "bkt", "k", reason, sizeof reason), 0);
    CHECK(strstr(reason, "no bucket 'bkt'") != NULL);
    nst_s3_errinfo redir = {.code = "PermanentRedirect", .message = ""};
    nst_s3_reason(s, 301, &redir, "eu-west-1", "bkt", "k", reason, sizeof reason);
    CHECK(strstr(reason, "AWS_REGION=eu-west-1") != NULL);
    nst_s3_reason(s, 403, NULL, "", "bkt", "pre/", reason, sizeof reason);
    CHECK(strstr(reason, "prefix 'pre/' in bucket 'bkt'") != NULL);
    nst_s3_free(s);
    clear_env();

    /* the shared credentials file: a named profile, its region from config */
    char text[1024];
    snprintf(text, sizeof text,
             "# comment\n[default]\naws_access_key_id = DEFAULTKEY\naws_secret_access_key = "
             "%s\n\n[work]\naws_access_key_id=WORKKEY\n  aws_secret_access_key =  %s  \n"
             "[half]\naws_access_key_id = X\n",
             secret, secret);
    write_file(cred, text);
    write_file(cfg, "[default]\nregion = us-west-2\n[profile work]\nregion = ap-south-1\n"
                    "s3 =\n  addressing_style = path\n");
    setenv("AWS_SHARED_CREDENTIALS_FILE", cred, 1);
    setenv("AWS_CONFIG_FILE", cfg, 1);
    CHECK_OK(nst_s3_create(&s));
    CHECK(nst_s3_signed(s) && strstr(nst_s3_cred_source(s), "profile 'default'") != NULL);
    CHECK(strcmp(nst_s3_region(s), "us-west-2") == 0);
    nst_s3_free(s);
    setenv("AWS_PROFILE", "work", 1);
    CHECK_OK(nst_s3_create(&s));
    CHECK(strstr(nst_s3_cred_source(s), "profile 'work'") != NULL);
    CHECK(strcmp(nst_s3_region(s), "ap-south-1") == 0);
    snprintf(msg, sizeof msg, "%s", secret);
    nst_s3_redact(s, msg, sizeof msg); /* the file's secret, trimmed */
    CHECK(strcmp(msg, "[redacted]") == 0);
    nst_s3_free(s);
    setenv("AWS_PROFILE", "half", 1);
    CHECK_RC(nst_s3_create(&s), NOSTALL_E_INVALID);
    CHECK(strstr(nostall_last_error(), "aws_secret_access_key") != NULL);
    setenv("AWS_PROFILE", "nope", 1);
    CHECK_RC(nst_s3_create(&s), NOSTALL_E_INVALID);
    CHECK(strstr(nostall_last_error(), "'nope'") != NULL);
    CHECK(strstr(nostall_last_error(), secret) == NULL);
    unsetenv("AWS_PROFILE");
    write_file(cred, "[default]\nthis line is broken\n");
    CHECK_RC(nst_s3_create(&s), NOSTALL_E_INVALID);
    CHECK(strstr(nostall_last_error(), ":2:") != NULL);
    setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/creds", 1);
    CHECK_RC(nst_s3_create(&s), NOSTALL_E_NOT_FOUND);
    clear_env();

    /* nst_s3_current: one configuration per environment */
    const nst_s3 *a, *b, *c;
    setenv("AWS_REGION", "eu-north-1", 1);
    CHECK_OK(nst_s3_current(&a));
    CHECK_OK(nst_s3_current(&b));
    CHECK(a == b);
    setenv("AWS_REGION", "eu-south-1", 1);
    CHECK_OK(nst_s3_current(&c));
    CHECK(c != a && strcmp(nst_s3_region(c), "eu-south-1") == 0);
    setenv("AWS_REGION", "eu-north-1", 1);
    CHECK_OK(nst_s3_current(&b));
    CHECK(b == a);
    clear_env();
}

/* ---- libcurl's Authorization header, recomputed ------------------------- */

typedef struct capture {
    int lfd;
    char req[16384];
} capture;

static void *serve_one(void *arg)
{
    capture *c = arg;
    int fd = accept(c->lfd, NULL, NULL);
    if (fd < 0) return NULL;
    size_t n = 0;
    while (n + 1 < sizeof c->req) {
        ssize_t k = recv(fd, c->req + n, sizeof c->req - 1 - n, 0);
        if (k <= 0) break;
        n += (size_t)k;
        c->req[n] = '\0';
        if (strstr(c->req, "\r\n\r\n")) break;
    }
    static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
    if (send(fd, ok, sizeof ok - 1, MSG_NOSIGNAL) < 0) perror("send");
    close(fd);
    return NULL;
}

static size_t sink(char *p, size_t s, size_t n, void *u)
{
    (void)p, (void)u;
    return s * n;
}

/* The value of header `name` (case-insensitive) in req into out; count of
 * occurrences. */
static int header(const char *req, const char *name, char *out, size_t cap)
{
    int count = 0;
    size_t nl = strlen(name);
    out[0] = '\0';
    for (const char *p = strstr(req, "\r\n"); p && p[2] != '\r'; p = strstr(p + 2, "\r\n")) {
        const char *l = p + 2, *e = strstr(l, "\r\n");
        if (!e) break;
        if ((size_t)(e - l) > nl && strncasecmp(l, name, nl) == 0 && l[nl] == ':') {
            const char *v = l + nl + 1;
            while (*v == ' ') v++;
            size_t vl = (size_t)(e - v) < cap - 1 ? (size_t)(e - v) : cap - 1;
            memcpy(out, v, vl);
            out[vl] = '\0';
            count++;
        }
    }
    return count;
}

static void test_curl_signature(void)
{
    capture *c = calloc(1, sizeof *c);
    c->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    CHECK(bind(c->lfd, (struct sockaddr *)&a, sizeof a) == 0 && listen(c->lfd, 1) == 0);
    getsockname(c->lfd, (struct sockaddr *)&a, &al);
    char ep[64];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", ntohs(a.sin_port));
    clear_env();
    setenv("AWS_ENDPOINT_URL", ep, 1);
    setenv("AWS_REGION", "eu-west-1", 1);
    setenv("AWS_ACCESS_KEY_ID", AK, 1);
    setenv("AWS_SECRET_ACCESS_KEY", SK, 1);
    nst_s3 *s;
    CHECK_OK(nst_s3_create(&s));
    pthread_t t;
    pthread_create(&t, NULL, serve_one, c);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    CURL *e = curl_easy_init();
    char *u = NULL;
    size_t cap = 0;
    const char *key = "dir/a+b=c,d;e@f g.jpg";
    char url[256];
    snprintf(url, sizeof url, "s3://bkt/%s", key);
    CHECK_OK(nst_s3_object_url(s, url, &u, &cap));
    CHECK_OK(nst_s3_setup_easy(s, e));
    curl_easy_setopt(e, CURLOPT_URL, u);
    curl_easy_setopt(e, CURLOPT_RANGE, "10-19");
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, sink);
    CURLcode cc = curl_easy_perform(e);
    CHECK_EQ(cc, CURLE_OK);
    pthread_join(t, NULL);

    char line[512], v[1024];
    sscanf(c->req, "GET %511s HTTP/1.1", line);
    CHECK(strcmp(line, "/bkt/dir/a%2Bb%3Dc%2Cd%3Be%40f%20g.jpg") == 0);
    CHECK_EQ(header(c->req, "x-amz-content-sha256", v, sizeof v), 1);
    CHECK(strcmp(v, EMPTY) == 0);
    char date[64], host[128], auth[1024];
    CHECK_EQ(header(c->req, "x-amz-date", date, sizeof date), 1);
    CHECK_EQ(header(c->req, "host", host, sizeof host), 1);
    CHECK_EQ(header(c->req, "authorization", auth, sizeof auth), 1);
    CHECK(strstr(c->req, SK) == NULL);

    /* recompute over the headers curl says it signed */
    const char *sh = strstr(auth, "SignedHeaders=");
    char signed_names[256] = "";
    if (sh) sscanf(sh, "SignedHeaders=%255[^,]", signed_names);
    char hl[8][1200];
    const char *hp[8];
    size_t nh = 0;
    for (char *tok = strtok(signed_names, ";"); tok && nh < 8; tok = strtok(NULL, ";")) {
        char val[1024];
        CHECK_EQ(header(c->req, tok, val, sizeof val), 1);
        snprintf(hl[nh], sizeof hl[nh], "%s: %s", tok, val);
        hp[nh] = hl[nh];
        nh++;
    }
    CHECK(nh >= 3);
    nst_sigv4_req r = {.method = "GET",
                       .uri = line,
                       .query = "",
                       .headers = hp,
                       .nheaders = nh,
                       .payload_hash = EMPTY,
                       .amz_date = date,
                       .region = "eu-west-1",
                       .service = "s3",
                       .access_key = AK,
                       .secret = SK};
    nst_sigv4_out o;
    CHECK_OK(nst_sigv4_sign(&r, &o));
    const char *sig = strstr(auth, "Signature=");
    CHECK(sig && strcmp(sig + 10, o.signature) == 0);
    if (!sig || strcmp(sig + 10, o.signature) != 0)
        fprintf(stderr, "request:\n%s\nours: %s\ncanonical:\n%s\n", c->req, o.signature,
                o.canonical_request);

    curl_easy_cleanup(e);
    nst_s3_free(s);
    free(u);
    close(c->lfd);
    free(c);
    clear_env();
}

int main(void)
{
    const char *tmp = test_tmpdir("s3");
    test_sha256();
    test_sigv4_docs();
    test_encoding();
    test_urls(tmp);
    test_credentials(tmp);
    test_curl_signature();
    TEST_EXIT();
}
