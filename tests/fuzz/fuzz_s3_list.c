/*
 * fuzz_s3_list.c — the parsers of S3's XML responses (src/dataset/s3_list.c,
 * src/source/s3.c) on hostile bytes: the input is a response body, given
 * in a buffer of exactly its size (no NUL after it: ASan sees a read past
 * the end), as a ListObjectsV2 page and as an error document.
 *
 * Properties checked (abort() on violation, so libFuzzer keeps the input):
 *   - nst_s3_parse_listing answers 0 or a negative status with a message
 *     that names the listing ("s3: ");
 *   - parsed: every key is 1 to NST_S3_KEY_MAX bytes and is not a folder
 *     marker (no '/' at its end); objects plus folder markers are no more
 *     than the page's <Contents> elements; a truncated page has a
 *     continuation token, NUL-terminated within its buffer (allocated to
 *     its exact size);
 *   - nst_s3_parse_error: a code of letters, digits and dots, a message
 *     without control characters, both NUL-terminated in their arrays;
 *   - nst_s3_xml_unescape never lengthens a string (it decodes in place);
 *   - no crash, leak or undefined behaviour (ASan, UBSan).
 */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nostall.h"
#include "dataset/s3_list.h"
#include "source/s3.h"

#define TOKEN_CAP 256 /* smaller than a real token may be: truncation must be safe */

static void die(const char *what, size_t size)
{
    fprintf(stderr, "fuzz_s3_list: %s (input of %zu bytes)\n", what, size);
    abort();
}

typedef struct seen {
    size_t objects, size;
} seen;

static int on_object(void *ctx, const char *url, const char *key, uint64_t bytes)
{
    seen *s = ctx;
    (void)bytes;
    size_t kl = strlen(key);
    if (url) die("a URL from a parsed page", s->size);
    if (kl == 0 || kl > NST_S3_KEY_MAX) die("a key of 0 or too many bytes", s->size);
    if (key[kl - 1] == '/') die("a folder marker listed as an object", s->size);
    s->objects++;
    return 0;
}

static size_t count(const char *b, size_t n, const char *lit)
{
    size_t c = 0, l = strlen(lit);
    for (const char *p = b; (p = memmem(p, n - (size_t)(p - b), lit, l)); p += l) c++;
    return c;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *body = malloc(size ? size : 1);
    char *token = malloc(TOKEN_CAP);
    if (!body || !token) abort();
    if (size) memcpy(body, data, size);
    memset(token, 'x', TOKEN_CAP);

    seen s = {0, size};
    uint64_t folders = 0;
    int truncated = 0;
    int rc = nst_s3_parse_listing("listing s3://b/p/", body, size, on_object, &s, &folders,
                                  &truncated, token, TOKEN_CAP);
    if (rc > 0) die("a positive answer", size);
    if (rc < 0 && !strstr(nostall_last_error(), "s3: "))
        die("refused without a message naming the listing", size);
    if (!memchr(token, '\0', TOKEN_CAP)) die("the token is not NUL-terminated", size);
    if (rc == 0) {
        if (s.objects + folders > count(body, size, "<Contents>"))
            die("more objects than <Contents>", size);
        if (truncated && !token[0]) die("a truncated page without a token", size);
    }

    nst_s3_errinfo ei;
    memset(&ei, 'x', sizeof ei);
    nst_s3_parse_error(NULL, body, size, &ei);
    if (!memchr(ei.code, '\0', sizeof ei.code) || !memchr(ei.message, '\0', sizeof ei.message))
        die("an error code or message not NUL-terminated", size);
    for (const char *p = ei.code; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '.') die("an error code with a stray byte", size);
    for (const char *p = ei.message; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) die("a control character in a message", size);

    char *text = malloc(size + 1);
    if (!text) abort();
    if (size) memcpy(text, data, size);
    text[size] = '\0';
    size_t before = strlen(text);
    nst_s3_xml_unescape(text);
    if (strlen(text) > before) die("unescaping lengthened a string", size);

    free(text);
    free(body);
    free(token);
    return 0;
}
