/*
 * escape.c — untrusted text in the analyzer's reports (the dataset's name,
 * --predict labels): one UTF-8 reader decides what each byte is, three
 * writers decide how it is shown on a terminal, in JSON and in HTML (see
 * analyze_impl.h). The same rules as the CLI's (tools/util.c), so a report
 * reads the same whoever writes it. Pure functions: any thread.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyze/analyze_impl.h"

/* Length of the valid UTF-8 sequence at s (1..4) with its code point in
 * *cp, or 0 when the byte at s does not start one (a stray continuation
 * byte, an overlong form, a surrogate, beyond U+10FFFF, a sequence cut
 * short). Reads past s only while bytes are continuation bytes, so never
 * past the NUL. */
static int utf8_seq(const unsigned char *s, uint32_t *cp)
{
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int n;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF)
        n = 2, v = c & 0x1F, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF)
        n = 3, v = c & 0x0F, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4)
        n = 4, v = c & 0x07, min = 0x10000;
    else
        return 0;
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return n;
}

/* Code points shown escaped even when valid: controls (C0, DEL, C1), line
 * and paragraph separators, bidirectional embeddings/overrides/isolates. */
static int cp_hidden(uint32_t cp)
{
    return cp < 0x20 || (cp >= 0x7F && cp <= 0x9F) || (cp >= 0x2028 && cp <= 0x202E) ||
           (cp >= 0x2066 && cp <= 0x2069);
}

/* nst_an_text, and nst_an_html_text when `html`. */
static void text_write(FILE *f, const char *str, int html)
{
    const unsigned char *s = (const unsigned char *)str;
    while (*s) {
        uint32_t cp;
        int n = utf8_seq(s, &cp);
        if (n == 0)
            fprintf(f, "\\x%02x", *s), n = 1;
        else if (html && cp == '&')
            fputs("&amp;", f);
        else if (html && cp == '<')
            fputs("&lt;", f);
        else if (html && cp == '>')
            fputs("&gt;", f);
        else if (html && cp == '"')
            fputs("&quot;", f);
        else if (html && cp == '\'')
            fputs("&#39;", f);
        else if (cp == '\\')
            fputs("\\\\", f);
        else if (cp == '\n')
            fputs("\\n", f);
        else if (cp == '\t')
            fputs("\\t", f);
        else if (cp == '\r')
            fputs("\\r", f);
        else if (cp < 0x20 || cp == 0x7F)
            fprintf(f, "\\x%02x", (unsigned)cp);
        else if (cp_hidden(cp))
            fprintf(f, "\\u%04x", (unsigned)cp);
        else
            fwrite(s, 1, (size_t)n, f);
        s += n;
    }
}

void nst_an_text(FILE *f, const char *s) { text_write(f, s, 0); }

void nst_an_text_buf(char *buf, size_t cap, const char *s)
{
    char *out = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&out, &len);
    buf[0] = '\0';
    if (!m) return;
    text_write(m, s, 0);
    if (fclose(m) != 0 || !out) {
        free(out);
        return;
    }
    if (len >= cap) {
        len = cap - 1;
        while (len > 0 && ((unsigned char)out[len] & 0xC0) == 0x80) len--;
    }
    memcpy(buf, out, len);
    buf[len] = '\0';
    free(out);
}

void nst_an_line(FILE *f, const char *fmt, ...)
{
    char small[1024], *buf = small;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof small && (buf = malloc((size_t)n + 1)) != NULL) {
        va_start(ap, fmt);
        vsnprintf(buf, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    text_write(f, buf ? buf : small, 0);
    fputc('\n', f);
    if (buf != small) free(buf);
}

void nst_an_html_text(FILE *f, const char *s) { text_write(f, s, 1); }

int nst_an_json_string(FILE *f, const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    int lossy = 0;
    fputc('"', f);
    while (*s) {
        uint32_t cp;
        int n = utf8_seq(s, &cp);
        if (n == 0)
            fputs("\\ufffd", f), lossy = 1, n = 1;
        else if (cp == '"' || cp == '\\')
            fprintf(f, "\\%c", (char)cp);
        else if (cp == '\n')
            fputs("\\n", f);
        else if (cp == '\t')
            fputs("\\t", f);
        else if (cp == '\r')
            fputs("\\r", f);
        else if (cp == '\b')
            fputs("\\b", f);
        else if (cp == '\f')
            fputs("\\f", f);
        else if (cp_hidden(cp))
            fprintf(f, "\\u%04x", (unsigned)cp);
        else
            fwrite(s, 1, (size_t)n, f);
        s += n;
    }
    fputc('"', f);
    return lossy;
}

void nst_an_json_member(FILE *f, const char *key, const char *s)
{
    fprintf(f, "\"%s\": ", key);
    if (!nst_an_json_string(f, s)) return;
    fprintf(f, ", \"%s_hex\": \"", key);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) fprintf(f, "%02x", *p);
    fputc('"', f);
}
