/*
 * s3.c — the S3 configuration, s3:// URLs, libcurl's SigV4 set-up with
 * 7.88's gaps filled, and S3 error responses (see s3.h).
 * Room: source/ (reading bytes).
 *
 * Design. nst_s3_create reads the environment and, when needed, the shared
 * credentials and config files (a small INI reader: sections, `name =
 * value`, comments), once; the handle is then read-only. Secrets are kept
 * in the handle only to give them to libcurl and to scrub server text;
 * parse errors name the file and the line, never the line's text.
 * A URL is built by percent-encoding the key once (SigV4's encoding, which
 * S3 also uses to read the path), so what curl signs is what S3 checks.
 * Any thread may call anything here on a created handle.
 */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/error.h"
#include "source/s3.h"

/* SHA-256 of the empty string: the payload hash of every GET and HEAD. */
#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

enum { SECRET_MAX = 512, SOURCE_MAX = 512, ENDPOINT_MAX = 512 };

struct nst_s3 {
    char region[NST_S3_REGION_MAX + 1];
    char endpoint[ENDPOINT_MAX]; /* "scheme://host[:port]", "" for AWS */
    char source[SOURCE_MAX];     /* where the credentials came from */
    char access_key[SECRET_MAX]; /* "" when unsigned */
    char secret[SECRET_MAX];
    char token[4096];           /* session token, may be "" */
    char sigv4[96];             /* "aws:amz:REGION:s3" */
    struct curl_slist *headers; /* x-amz-content-sha256 (+ token) */
};

int nst_s3_is_url(const char *s) { return s && strncasecmp(s, "s3://", 5) == 0; }

/* Bucket names: S3 allows lower case, digits, '.', '-' (and, for legacy
 * buckets, upper case and '_'). Anything else cannot be a bucket and would
 * change the URL's meaning (':', '@', '/', '?', '#'). */
static int bucket_char(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '-' || c == '_';
}

int nst_s3_parse(const char *url, char *bucket, size_t bcap, const char **key)
{
    if (!nst_s3_is_url(url))
        return nst_error(NOSTALL_E_INVALID, "s3: '%.300s' is not an s3:// URL", url ? url : "");
    const char *b = url + 5, *slash = strchr(b, '/');
    size_t bl = slash ? (size_t)(slash - b) : strlen(b);
    if (bl == 0)
        return nst_error(NOSTALL_E_INVALID, "s3: %.300s: no bucket name (s3://BUCKET/KEY)", url);
    if (bl > NST_S3_BUCKET_MAX || bl + 1 > bcap)
        return nst_error(NOSTALL_E_INVALID, "s3: %.300s: the bucket name is longer than %d bytes",
                         url, NST_S3_BUCKET_MAX);
    for (size_t i = 0; i < bl; i++)
        if (!bucket_char((unsigned char)b[i]))
            return nst_error(NOSTALL_E_INVALID,
                             "s3: %.300s: '%c' cannot be in a bucket name (letters, digits, "
                             "'.', '-', '_')",
                             url, isprint((unsigned char)b[i]) ? b[i] : '?');
    const char *k = slash ? slash + 1 : b + bl;
    if (strlen(k) > NST_S3_KEY_MAX)
        return nst_error(NOSTALL_E_INVALID, "s3: %.200s...: the key is longer than %d bytes", url,
                         NST_S3_KEY_MAX);
    memcpy(bucket, b, bl);
    bucket[bl] = '\0';
    *key = k;
    return 0;
}

/* ---- encoding ------------------------------------------------------------- */

static int unreserved(int c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_' || c == '~';
}

long nst_s3_uri_encode(const char *src, size_t n, int keep_slash, char *dst, size_t dcap)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)src[i];
        if (unreserved(c) || (keep_slash && c == '/')) {
            if (o + 1 >= dcap) return -1;
            dst[o++] = (char)c;
        } else {
            if (o + 3 >= dcap) return -1;
            dst[o++] = '%';
            dst[o++] = hex[c >> 4];
            dst[o++] = hex[c & 15];
        }
    }
    if (o >= dcap) return -1;
    dst[o] = '\0';
    return (long)o;
}

int nst_s3_query_add(char *q, size_t qcap, const char *name, const char *value)
{
    size_t ql = strlen(q);
    if (ql) {
        /* the last parameter's name must sort before this one */
        const char *last = strrchr(q, '&');
        last = last ? last + 1 : q;
        size_t ll = strcspn(last, "=");
        char enc[256];
        long el = nst_s3_uri_encode(name, strlen(name), 0, enc, sizeof enc);
        if (el < 0 || strncmp(last, enc, ll) > 0 ||
            (strncmp(last, enc, ll) == 0 && (size_t)el <= ll))
            return nst_error(NOSTALL_E_INVALID, "s3: query parameter '%.100s' added out of order",
                             name);
    }
    char *p = q + ql;
    size_t room = qcap - ql;
    if (ql) {
        if (room < 2) goto full;
        *p++ = '&';
        room--;
    }
    long n = nst_s3_uri_encode(name, strlen(name), 0, p, room);
    if (n < 0 || (size_t)n + 2 > room) goto full;
    p += n;
    room -= (size_t)n;
    *p++ = '=';
    room--;
    if (nst_s3_uri_encode(value, strlen(value), 0, p, room) < 0) goto full;
    return 0;
full:
    q[ql] = '\0';
    return nst_error(NOSTALL_E_INVALID, "s3: query parameter '%.100s' does not fit", name);
}

/* ---- configuration ---------------------------------------------------------- */

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n'))
        s[--n] = '\0';
    return s;
}

/* Path of a shared file: $VAR, else ~/.aws/NAME. 0 if there is none. */
static int aws_file(const char *var, const char *name, char *out, size_t cap, int *explicit_)
{
    const char *p = env(var);
    *explicit_ = p != NULL;
    if (p) {
        if (p[0] == '~' && p[1] == '/' && env("HOME"))
            snprintf(out, cap, "%s%s", env("HOME"), p + 1);
        else
            snprintf(out, cap, "%s", p);
        return 1;
    }
    const char *home = env("HOME");
    if (!home) return 0;
    return snprintf(out, cap, "%s/.aws/%s", home, name) < (int)cap;
}

typedef struct ini_want {
    const char *section;      /* exact section name wanted */
    const char *const *names; /* keys wanted, NULL-terminated */
    char **values;            /* out: one buffer per name */
    const size_t *caps;       /* their sizes */
    int found_section;
} ini_want;

/* Read `path` and fill the wanted keys of the wanted section. 0 ok, 1 the
 * file does not exist, <0 error (the message names the file and line, never
 * a value). */
static int ini_read(const char *path, ini_want *w)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT) return 1;
        return nst_error(errno == EACCES ? NOSTALL_E_PERMISSION : NOSTALL_E_IO,
                         "s3: cannot read %.300s: %s", path, strerror(errno));
    }
    char line[8192];
    int in = 0, lineno = 0, rc = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        size_t ll = strlen(line);
        if (ll == sizeof line - 1 && line[ll - 1] != '\n') {
            rc = nst_error(NOSTALL_E_INVALID, "s3: %.300s:%d: line longer than %zu bytes", path,
                           lineno, sizeof line - 2);
            break;
        }
        char *s = trim(line);
        if (!*s || *s == '#' || *s == ';') continue;
        if (*s == '[') {
            char *e = strchr(s, ']');
            if (!e) {
                rc = nst_error(NOSTALL_E_INVALID, "s3: %.300s:%d: a section header without ']'",
                               path, lineno);
                break;
            }
            *e = '\0';
            in = strcmp(trim(s + 1), w->section) == 0;
            if (in) w->found_section = 1;
            continue;
        }
        char *eq = strchr(s, '=');
        if (!eq) {
            /* a continuation line of a nested value (config files' s3 =
             * sections) is indented; anything else is a syntax error */
            if (line[0] == ' ' || line[0] == '\t') continue;
            rc = nst_error(NOSTALL_E_INVALID, "s3: %.300s:%d: expected 'name = value'", path,
                           lineno);
            break;
        }
        if (!in) continue;
        *eq = '\0';
        char *name = trim(s), *value = trim(eq + 1);
        for (int i = 0; w->names[i]; i++) {
            if (strcasecmp(name, w->names[i]) != 0) continue;
            if (strlen(value) >= w->caps[i]) {
                rc = nst_error(NOSTALL_E_INVALID, "s3: %.300s:%d: the value of %s is too long",
                               path, lineno, w->names[i]);
                break;
            }
            strcpy(w->values[i], value);
        }
        if (rc) break;
    }
    if (!rc && ferror(f)) rc = nst_error(NOSTALL_E_IO, "s3: error reading %.300s", path);
    explicit_bzero(line, sizeof line);
    fclose(f);
    return rc;
}

static int load_credentials(nst_s3 *s)
{
    const char *ak = env("AWS_ACCESS_KEY_ID"), *sk = env("AWS_SECRET_ACCESS_KEY");
    if (ak || sk) {
        if (!ak || !sk)
            return nst_error(NOSTALL_E_INVALID, "s3: %s is set but %s is not",
                             ak ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY",
                             ak ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID");
        const char *tok = env("AWS_SESSION_TOKEN");
        if (strlen(ak) >= sizeof s->access_key || strlen(sk) >= sizeof s->secret ||
            (tok && strlen(tok) >= sizeof s->token))
            return nst_error(NOSTALL_E_INVALID, "s3: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY "
                                                "or AWS_SESSION_TOKEN is too long");
        strcpy(s->access_key, ak);
        strcpy(s->secret, sk);
        if (tok) strcpy(s->token, tok);
        snprintf(s->source, sizeof s->source, "the environment (AWS_ACCESS_KEY_ID%s)",
                 tok ? ", AWS_SESSION_TOKEN" : "");
        return 0;
    }
    const char *profile = env("AWS_PROFILE");
    int profile_named = profile != NULL, file_named;
    if (!profile) profile = "default";
    char path[1024];
    if (!aws_file("AWS_SHARED_CREDENTIALS_FILE", "credentials", path, sizeof path, &file_named)) {
        snprintf(s->source, sizeof s->source, "none (requests are unsigned)");
        return 0;
    }
    static const char *const names[] = {"aws_access_key_id", "aws_secret_access_key",
                                        "aws_session_token", "aws_security_token", NULL};
    char tok2[sizeof s->token];
    char *vals[] = {s->access_key, s->secret, s->token, tok2};
    const size_t caps[] = {sizeof s->access_key, sizeof s->secret, sizeof s->token, sizeof tok2};
    tok2[0] = '\0';
    ini_want w = {.section = profile, .names = names, .values = vals, .caps = caps};
    int rc = ini_read(path, &w);
    if (!s->token[0] && tok2[0]) memcpy(s->token, tok2, sizeof s->token);
    explicit_bzero(tok2, sizeof tok2);
    if (rc < 0) return rc;
    if (rc == 1) {
        if (file_named)
            return nst_error(NOSTALL_E_NOT_FOUND,
                             "s3: AWS_SHARED_CREDENTIALS_FILE names %.300s, which does not exist",
                             path);
        if (profile_named)
            return nst_error(NOSTALL_E_INVALID, "s3: AWS_PROFILE=%.100s but there is no %.300s",
                             profile, path);
        snprintf(s->source, sizeof s->source, "none (requests are unsigned)");
        return 0;
    }
    if (!w.found_section) {
        if (profile_named)
            return nst_error(NOSTALL_E_INVALID,
                             "s3: profile '%.100s' (AWS_PROFILE) is not in "
                             "%.300s",
                             profile, path);
        snprintf(s->source, sizeof s->source,
                 "none (requests are unsigned; %.300s has no "
                 "[default] profile)",
                 path);
        s->token[0] = '\0';
        return 0;
    }
    if (!s->access_key[0] || !s->secret[0]) {
        const char *missing = !s->access_key[0] ? "aws_access_key_id" : "aws_secret_access_key";
        explicit_bzero(s->secret, sizeof s->secret);
        explicit_bzero(s->token, sizeof s->token);
        return nst_error(NOSTALL_E_INVALID, "s3: profile '%.100s' of %.300s has no %s", profile,
                         path, missing);
    }
    snprintf(s->source, sizeof s->source, "profile '%.100s' of %.300s", profile, path);
    return 0;
}

static int valid_region(const char *r)
{
    size_t n = strlen(r);
    if (n == 0 || n > NST_S3_REGION_MAX) return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)r[i]) && r[i] != '-') return 0;
    return 1;
}

static int load_region(nst_s3 *s)
{
    const char *r = env("AWS_REGION");
    const char *from = "AWS_REGION";
    if (!r) {
        r = env("AWS_DEFAULT_REGION");
        from = "AWS_DEFAULT_REGION";
    }
    char cfg_region[NST_S3_REGION_MAX + 64] = "";
    if (!r) {
        char path[1024], section[160];
        int named;
        const char *profile = env("AWS_PROFILE");
        if (profile)
            snprintf(section, sizeof section, "profile %.140s", profile);
        else
            snprintf(section, sizeof section, "default");
        if (aws_file("AWS_CONFIG_FILE", "config", path, sizeof path, &named)) {
            static const char *const names[] = {"region", NULL};
            char *vals[] = {cfg_region};
            const size_t caps[] = {sizeof cfg_region};
            ini_want w = {.section = section, .names = names, .values = vals, .caps = caps};
            int rc = ini_read(path, &w);
            if (rc < 0) return rc;
            if (rc == 1 && named)
                return nst_error(NOSTALL_E_NOT_FOUND,
                                 "s3: AWS_CONFIG_FILE names %.300s, which does not exist", path);
        }
        if (cfg_region[0]) {
            r = cfg_region;
            from = "the shared config file";
        }
    }
    if (!r) r = "us-east-1";
    if (!valid_region(r))
        return nst_error(NOSTALL_E_INVALID, "s3: region '%.80s' (%s) is not a region name", r, from);
    memcpy(s->region, r, strlen(r) + 1); /* valid_region: at most NST_S3_REGION_MAX */
    return 0;
}

static int load_endpoint(nst_s3 *s)
{
    const char *e = env("AWS_ENDPOINT_URL_S3");
    const char *from = "AWS_ENDPOINT_URL_S3";
    if (!e) {
        e = env("AWS_ENDPOINT_URL");
        from = "AWS_ENDPOINT_URL";
    }
    if (!e) return 0;
    size_t skip;
    if (strncasecmp(e, "http://", 7) == 0)
        skip = 7;
    else if (strncasecmp(e, "https://", 8) == 0)
        skip = 8;
    else
        return nst_error(NOSTALL_E_INVALID, "s3: %s='%.200s' is not an http:// or https:// URL",
                         from, e);
    /* keep scheme://host[:port]; a path is not part of an S3 endpoint */
    size_t hl = strcspn(e + skip, "/?#");
    if (hl == 0) return nst_error(NOSTALL_E_INVALID, "s3: %s='%.200s' has no host", from, e);
    for (size_t i = 0; i < hl; i++)
        if (e[skip + i] == '@')
            return nst_error(NOSTALL_E_INVALID,
                             "s3: %s must not carry credentials "
                             "(user@host): use AWS_ACCESS_KEY_ID",
                             from);
    const char *rest = e + skip + hl;
    if (*rest && strcmp(rest, "/") != 0)
        return nst_error(NOSTALL_E_INVALID,
                         "s3: %s='%.200s': an endpoint is scheme://host[:port] "
                         "(no path)",
                         from, e);
    if (skip + hl >= sizeof s->endpoint)
        return nst_error(NOSTALL_E_INVALID, "s3: %s is too long", from);
    memcpy(s->endpoint, e, skip + hl);
    s->endpoint[skip + hl] = '\0';
    for (size_t i = 0; i < skip; i++) s->endpoint[i] = (char)tolower((unsigned char)e[i]);
    return 0;
}

int nst_s3_create(nst_s3 **out)
{
    if (!out) return nst_error(NOSTALL_E_INVALID, "s3: no output");
    *out = NULL;
    nst_s3 *s = calloc(1, sizeof *s);
    if (!s) return nst_error(NOSTALL_E_NOMEM, "s3: out of memory");
    int rc = load_credentials(s);
    if (rc == 0) rc = load_region(s);
    if (rc == 0) rc = load_endpoint(s);
    if (rc == 0) {
        snprintf(s->sigv4, sizeof s->sigv4, "aws:amz:%s:s3", s->region);
        struct curl_slist *h = curl_slist_append(NULL, "x-amz-content-sha256: " EMPTY_SHA256);
        if (h && s->token[0]) {
            size_t n = strlen(s->token) + 32;
            char *line = malloc(n);
            struct curl_slist *h2 = NULL;
            if (line) {
                snprintf(line, n, "x-amz-security-token: %s", s->token);
                h2 = curl_slist_append(h, line);
                explicit_bzero(line, n);
                free(line);
            }
            if (!h2) {
                curl_slist_free_all(h);
                h = NULL;
            }
        }
        s->headers = h;
        if (!h) rc = nst_error(NOSTALL_E_NOMEM, "s3: out of memory");
    }
    if (rc < 0) {
        nst_s3_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

void nst_s3_free(nst_s3 *s)
{
    if (!s) return;
    if (s->headers) {
        /* the token's line: wipe it before libcurl frees it */
        for (struct curl_slist *l = s->headers; l; l = l->next)
            explicit_bzero(l->data, strlen(l->data));
        curl_slist_free_all(s->headers);
    }
    explicit_bzero(s, sizeof *s);
    free(s);
}

const char *nst_s3_region(const nst_s3 *s) { return s->region; }
const char *nst_s3_endpoint(const nst_s3 *s) { return s->endpoint; }
const char *nst_s3_cred_source(const nst_s3 *s) { return s->source; }
int nst_s3_signed(const nst_s3 *s) { return s->access_key[0] != '\0'; }

/* ---- URLs ------------------------------------------------------------------- */

/* A bucket that can be the first label(s) of a host name under a TLS
 * wildcard certificate: lower case, digits, '-', 3-63 bytes, no dots. */
static int virtual_host_ok(const char *b)
{
    size_t n = strlen(b);
    if (n < 3 || n > 63 || b[0] == '-' || b[n - 1] == '-') return 0;
    for (size_t i = 0; i < n; i++)
        if (!((b[i] >= 'a' && b[i] <= 'z') || (b[i] >= '0' && b[i] <= '9') || b[i] == '-'))
            return 0;
    return 1;
}

int nst_s3_http_url(const nst_s3 *s, const char *bucket, const char *key, const char *query,
                    char **buf, size_t *cap)
{
    size_t kl = strlen(key), bl = strlen(bucket);
    if (bl == 0 || bl > NST_S3_BUCKET_MAX || kl > NST_S3_KEY_MAX)
        return nst_error(NOSTALL_E_INVALID, "s3: bucket or key too long");
    size_t ql = query ? strlen(query) : 0;
    size_t need = ENDPOINT_MAX + 2 * bl + 3 * kl + ql + 128;
    if (*cap < need) {
        char *p = realloc(*buf, need);
        if (!p) return nst_error(NOSTALL_E_NOMEM, "s3: out of memory");
        *buf = p;
        *cap = need;
    }
    char *o = *buf;
    int n;
    const char *dom = strncmp(s->region, "cn-", 3) == 0 ? "amazonaws.com.cn" : "amazonaws.com";
    if (s->endpoint[0])
        n = snprintf(o, *cap, "%s/%s/", s->endpoint, bucket);
    else if (virtual_host_ok(bucket))
        n = snprintf(o, *cap, "https://%s.s3.%s.%s/", bucket, s->region, dom);
    else
        n = snprintf(o, *cap, "https://s3.%s.%s/%s/", s->region, dom, bucket);
    if (n < 0 || (size_t)n >= *cap) return nst_error(NOSTALL_E_INVALID, "s3: URL too long");
    long e = nst_s3_uri_encode(key, kl, 1, o + n, *cap - (size_t)n);
    if (e < 0) return nst_error(NOSTALL_E_INVALID, "s3: URL too long");
    size_t len = (size_t)n + (size_t)e;
    if (ql) {
        if (len + ql + 2 > *cap) return nst_error(NOSTALL_E_INVALID, "s3: URL too long");
        o[len++] = '?';
        memcpy(o + len, query, ql + 1);
    }
    return 0;
}

int nst_s3_object_url(const nst_s3 *s, const char *s3url, char **buf, size_t *cap)
{
    char bucket[NST_S3_BUCKET_MAX + 1];
    const char *key;
    int rc = nst_s3_parse(s3url, bucket, sizeof bucket, &key);
    if (rc < 0) return rc;
    if (!*key)
        return nst_error(NOSTALL_E_INVALID,
                         "s3: %.300s names a bucket, not an object "
                         "(s3://BUCKET/KEY)",
                         s3url);
    return nst_s3_http_url(s, bucket, key, NULL, buf, cap);
}

/* ---- libcurl ------------------------------------------------------------------ */

int nst_s3_setup_easy(const nst_s3 *s, CURL *e)
{
    CURLcode rc = CURLE_OK;
#define SET(opt, val)                                                                              \
    do {                                                                                           \
        if (rc == CURLE_OK) rc = curl_easy_setopt(e, opt, val);                                    \
    } while (0)
    if (s->access_key[0]) {
        SET(CURLOPT_AWS_SIGV4, s->sigv4);
        SET(CURLOPT_USERNAME, s->access_key);
        SET(CURLOPT_PASSWORD, s->secret);
    } else {
        SET(CURLOPT_AWS_SIGV4, (char *)NULL);
        SET(CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
        SET(CURLOPT_USERNAME, (char *)NULL);
        SET(CURLOPT_PASSWORD, (char *)NULL);
    }
    SET(CURLOPT_HTTPHEADER, s->headers);
    SET(CURLOPT_PATH_AS_IS, 1L);
#undef SET
    if (rc != CURLE_OK)
        return nst_error(rc == CURLE_OUT_OF_MEMORY ? NOSTALL_E_NOMEM : NOSTALL_E_IO,
                         "s3: cannot configure a transfer: %s", curl_easy_strerror(rc));
    return 0;
}

void nst_s3_clear_easy(CURL *e)
{
    /* Setting CURLOPT_AWS_SIGV4 to NULL does not undo its auth method in
     * 7.88: set Basic back (used only if a URL carries user:password). */
    curl_easy_setopt(e, CURLOPT_AWS_SIGV4, (char *)NULL);
    curl_easy_setopt(e, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
    curl_easy_setopt(e, CURLOPT_USERNAME, (char *)NULL);
    curl_easy_setopt(e, CURLOPT_PASSWORD, (char *)NULL);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, (struct curl_slist *)NULL);
    curl_easy_setopt(e, CURLOPT_PATH_AS_IS, 0L);
}

/* ---- the process-wide configurations --------------------------------------- */

static const char *const cfg_vars[] = {"AWS_ACCESS_KEY_ID",
                                       "AWS_SECRET_ACCESS_KEY",
                                       "AWS_SESSION_TOKEN",
                                       "AWS_PROFILE",
                                       "AWS_SHARED_CREDENTIALS_FILE",
                                       "AWS_CONFIG_FILE",
                                       "AWS_REGION",
                                       "AWS_DEFAULT_REGION",
                                       "AWS_ENDPOINT_URL_S3",
                                       "AWS_ENDPOINT_URL",
                                       "HOME",
                                       NULL};

/* guarded by cfg_mu; the configurations themselves are immutable */
static pthread_mutex_t cfg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    uint8_t fp[32];
    nst_s3 *s3;
} cfg[NST_S3_CONFIGS];
static int ncfg;

/* SHA-256 of "NAME=value\n" for each variable (unset: "NAME\n"). */
static int fingerprint(uint8_t fp[32])
{
    size_t n = 1;
    for (int i = 0; cfg_vars[i]; i++) {
        const char *v = getenv(cfg_vars[i]);
        n += strlen(cfg_vars[i]) + 2 + (v ? strlen(v) : 0);
    }
    char *b = malloc(n);
    if (!b) return nst_error(NOSTALL_E_NOMEM, "s3: out of memory");
    size_t o = 0;
    for (int i = 0; cfg_vars[i]; i++) {
        const char *v = getenv(cfg_vars[i]);
        size_t l = strlen(cfg_vars[i]);
        memcpy(b + o, cfg_vars[i], l);
        o += l;
        if (v) {
            b[o++] = '=';
            memcpy(b + o, v, strlen(v));
            o += strlen(v);
        }
        b[o++] = '\n';
    }
    nst_sha256(b, o, fp);
    explicit_bzero(b, n);
    free(b);
    return 0;
}

int nst_s3_current(const nst_s3 **out)
{
    uint8_t fp[32];
    *out = NULL;
    int rc = fingerprint(fp);
    if (rc < 0) return rc;
    pthread_mutex_lock(&cfg_mu);
    for (int i = ncfg - 1; i >= 0; i--)
        if (memcmp(cfg[i].fp, fp, sizeof fp) == 0) {
            *out = cfg[i].s3;
            pthread_mutex_unlock(&cfg_mu);
            return 0;
        }
    nst_s3 *s = NULL;
    if (ncfg == NST_S3_CONFIGS)
        rc = nst_error(NOSTALL_E_STATE,
                       "s3: the AWS_* environment changed more than %d times in this process",
                       NST_S3_CONFIGS);
    else if ((rc = nst_s3_create(&s)) == 0) {
        memcpy(cfg[ncfg].fp, fp, sizeof fp);
        cfg[ncfg++].s3 = s;
        *out = s;
    }
    pthread_mutex_unlock(&cfg_mu);
    return rc;
}

int nst_s3_curl_url(CURL *e, const char *url)
{
    if (!nst_s3_is_url(url)) {
        if (strncasecmp(url, "http://", 7) != 0 && strncasecmp(url, "https://", 8) != 0)
            return nst_error(NOSTALL_E_INVALID, "s3: %.300s: not an http://, https:// or s3:// URL",
                             url);
        return curl_easy_setopt(e, CURLOPT_URL, url) == CURLE_OK
                   ? 0
                   : nst_error(NOSTALL_E_NOMEM, "s3: %.300s: cannot set the URL", url);
    }
    const nst_s3 *s;
    int rc = nst_s3_current(&s);
    if (rc < 0) return rc;
    char *buf = NULL;
    size_t cap = 0;
    if ((rc = nst_s3_object_url(s, url, &buf, &cap)) == 0 && (rc = nst_s3_setup_easy(s, e)) == 0) {
        curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
        if (curl_easy_setopt(e, CURLOPT_URL, buf) != CURLE_OK)
            rc = nst_error(NOSTALL_E_NOMEM, "s3: %.300s: cannot set the URL", url);
    }
    free(buf);
    return rc;
}

int nst_s3_fail(int status, const char *prefix, const char *url, long http_code, const void *body,
                size_t len)
{
    const nst_s3 *s = NULL;
    if (nst_s3_current(&s) < 0) s = NULL;
    char bucket[NST_S3_BUCKET_MAX + 1] = "";
    const char *key = "";
    if (nst_s3_parse(url, bucket, sizeof bucket, &key) < 0) key = "";
    nst_s3_errinfo ei;
    nst_s3_parse_error(s, (const char *)body, len, &ei);
    char reason[800];
    nst_s3_reason(s, http_code, &ei, "", bucket, key, reason, sizeof reason);
    return nst_error(status, "%s: %.300s: %s", prefix, url, reason);
}

/* ---- redaction and errors ---------------------------------------------------------- */

static void redact_one(char *msg, size_t cap, const char *secret)
{
    static const char mark[] = "[redacted]";
    size_t sl = strlen(secret), ml = sizeof mark - 1;
    if (sl < 4) return; /* too short to be a secret worth scanning for */
    char *p;
    while ((p = strstr(msg, secret))) {
        size_t tail = strlen(p + sl);
        size_t at = (size_t)(p - msg);
        if (at + ml + tail + 1 > cap) tail = cap > at + ml + 1 ? cap - at - ml - 1 : 0;
        if (at + ml + 1 > cap) {
            *p = '\0';
            return;
        }
        memmove(p + ml, p + sl, tail);
        memcpy(p, mark, ml);
        p[ml + tail] = '\0';
    }
}

void nst_s3_redact(const nst_s3 *s, char *msg, size_t cap)
{
    if (!s || !msg || !cap) return;
    msg[cap - 1] = '\0';
    if (s->secret[0]) redact_one(msg, cap, s->secret);
    if (s->token[0]) redact_one(msg, cap, s->token);
}

/* Decode XML character references in place (&amp; &lt; &gt; &quot; &apos;
 * &#N; &#xN;, to UTF-8). */
void nst_s3_xml_unescape(char *s)
{
    char *o = s;
    while (*s) {
        if (*s != '&') {
            *o++ = *s++;
            continue;
        }
        static const struct {
            const char *e;
            char c;
        } ents[] = {{"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
        int done = 0;
        for (size_t i = 0; i < sizeof ents / sizeof ents[0] && !done; i++) {
            size_t l = strlen(ents[i].e);
            if (strncmp(s, ents[i].e, l) == 0) {
                *o++ = ents[i].c;
                s += l;
                done = 1;
            }
        }
        if (done) continue;
        if (s[1] == '#') {
            char *end;
            unsigned long cp = s[2] == 'x' ? strtoul(s + 3, &end, 16) : strtoul(s + 2, &end, 10);
            if (*end == ';' && cp > 0 && cp <= 0x10FFFF) {
                if (cp < 0x80) {
                    *o++ = (char)cp;
                } else if (cp < 0x800) {
                    *o++ = (char)(0xC0 | (cp >> 6));
                    *o++ = (char)(0x80 | (cp & 63));
                } else if (cp < 0x10000) {
                    *o++ = (char)(0xE0 | (cp >> 12));
                    *o++ = (char)(0x80 | ((cp >> 6) & 63));
                    *o++ = (char)(0x80 | (cp & 63));
                } else {
                    *o++ = (char)(0xF0 | (cp >> 18));
                    *o++ = (char)(0x80 | ((cp >> 12) & 63));
                    *o++ = (char)(0x80 | ((cp >> 6) & 63));
                    *o++ = (char)(0x80 | (cp & 63));
                }
                s = end + 1;
                continue;
            }
        }
        *o++ = *s++;
    }
    *o = '\0';
}

/* The text of the first <tag>...</tag> in body[0..n) into out[cap]. */
void nst_s3_xml_text(const char *body, size_t n, const char *tag, char *out, size_t cap)
{
    char open[48], close[48];
    snprintf(open, sizeof open, "<%s>", tag);
    snprintf(close, sizeof close, "</%s>", tag);
    out[0] = '\0';
    const char *p = memmem(body, n, open, strlen(open));
    if (!p) return;
    p += strlen(open);
    const char *e = memmem(p, n - (size_t)(p - body), close, strlen(close));
    size_t l = e ? (size_t)(e - p) : n - (size_t)(p - body);
    if (l >= cap) l = cap - 1;
    memcpy(out, p, l);
    out[l] = '\0';
}

void nst_s3_parse_error(const nst_s3 *s, const char *body, size_t n, nst_s3_errinfo *ei)
{
    ei->code[0] = ei->message[0] = '\0';
    if (!body || !n) return;
    char tmp[sizeof ei->message];
    nst_s3_xml_text(body, n, "Code", tmp, sizeof ei->code);
    size_t o = 0;
    for (size_t i = 0; tmp[i] && o + 1 < sizeof ei->code; i++)
        if (isalnum((unsigned char)tmp[i]) || tmp[i] == '.') ei->code[o++] = tmp[i];
    ei->code[o] = '\0';
    nst_s3_xml_text(body, n, "Message", tmp, sizeof tmp);
    nst_s3_xml_unescape(tmp);
    o = 0;
    for (size_t i = 0; tmp[i] && o + 1 < sizeof ei->message; i++)
        if ((unsigned char)tmp[i] >= 0x20 && tmp[i] != 0x7f) ei->message[o++] = tmp[i];
    ei->message[o] = '\0';
    nst_s3_redact(s, ei->message, sizeof ei->message);
}

int nst_s3_reason(const nst_s3 *s, long code, const nst_s3_errinfo *ei, const char *bucket_region,
                  const char *bucket, const char *key, char *out, size_t cap)
{
    const char *c = ei && ei->code[0] ? ei->code : NULL;
    const char *m = ei && ei->message[0] ? ei->message : NULL;
    char what[600];
    size_t kl = key ? strlen(key) : 0;
    if (kl && key[kl - 1] == '/')
        snprintf(what, sizeof what, "prefix '%.300s' in bucket '%.255s'", key, bucket);
    else if (kl)
        snprintf(what, sizeof what, "key '%.300s' in bucket '%.255s'", key, bucket);
    else
        snprintf(what, sizeof what, "bucket '%.255s'", bucket);
    char cm[300] = "";
    if (c) snprintf(cm, sizeof cm, " %s%s%.200s", c, m ? ": " : "", m ? m : "");
    int transient = 0;
    if (code == 404) {
        if (c && strcmp(c, "NoSuchBucket") == 0)
            snprintf(out, cap, "HTTP 404%s (no bucket '%.255s')", cm, bucket);
        else if (key && *key)
            snprintf(out, cap, "HTTP 404%s (no object: %s%s)", cm, what,
                     c ? "" : ", or no such bucket");
        else
            snprintf(out, cap, "HTTP 404%s (no %s)", cm, what);
    } else if (code == 403) {
        snprintf(out, cap, "HTTP 403%s (access denied to %s; credentials: %s%s)", cm, what,
                 s ? s->source : "?",
                 c && (strcmp(c, "SignatureDoesNotMatch") == 0 ||
                       strcmp(c, "InvalidAccessKeyId") == 0)
                     ? "; check the key pair"
                 : c && strcmp(c, "RequestTimeTooSkewed") == 0 ? "; check the clock"
                                                               : "");
    } else if (code == 301 || code == 307 ||
               (code == 400 && c && strcmp(c, "AuthorizationHeaderMalformed") == 0)) {
        if (bucket_region && *bucket_region && s && strcmp(bucket_region, s->region) != 0)
            snprintf(out, cap,
                     "HTTP %ld%s (bucket '%.255s' is in region %.64s, not %s: set "
                     "AWS_REGION=%.64s)",
                     code, cm, bucket, bucket_region, s->region, bucket_region);
        else
            snprintf(out, cap, "HTTP %ld%s (%s: wrong region or endpoint? region %s)", code, cm,
                     what, s ? s->region : "?");
    } else if (code == 503 || code == 500 || code == 502 || code == 504 || code == 429) {
        transient = 1;
        snprintf(out, cap, "HTTP %ld%s (%s)", code, cm, what);
    } else if (code == 400 && c && strcmp(c, "RequestTimeout") == 0) {
        transient = 1;
        snprintf(out, cap, "HTTP 400%s (%s)", cm, what);
    } else {
        transient = code >= 500 && code <= 599;
        snprintf(out, cap, "HTTP %ld%s (%s)", code, cm, what);
    }
    nst_s3_redact(s, out, cap);
    return transient;
}
