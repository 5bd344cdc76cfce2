/* util.c — small helpers shared by the CLI's subcommands (see util.h),
 * among them the escaping of untrusted text (file names, messages) for
 * terminals, JSON and HTML: one UTF-8 reader decides what each byte is,
 * three writers decide how it is shown. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "util.h"

double tool_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig) { interrupted = sig; }

void tool_catch_interrupts(void)
{
    static const int sigs[] = {SIGINT, SIGTERM};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction sa, old;
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_interrupt;
        sa.sa_flags = SA_RESETHAND | SA_RESTART; /* a second one ends the process */
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
    }
}

int tool_interrupted(void) { return interrupted; }

void tool_sleep_s(double s)
{
    double end = tool_now_s() + s;
    for (;;) { /* in slices: the signal may reach any of the loader's threads */
        double left = end - tool_now_s();
        if (left <= 0 || interrupted) return;
        if (left > 0.05) left = 0.05;
        struct timespec ts = {0, (long)(left * 1e9)};
        nanosleep(&ts, NULL);
    }
}

int tool_mkdir_p(const char *path)
{
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] == '/' || buf[i] == '\0') {
            char c = buf[i];
            buf[i] = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
            buf[i] = c;
        }
    }
    struct stat st;
    if (stat(path, &st) != 0) return -1;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

int tool_dir_nonempty(const char *path)
{
    DIR *d = opendir(path);
    if (!d) return -1;
    struct dirent *e;
    int any = 0;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            any = 1;
            break;
        }
    }
    closedir(d);
    return any;
}

long long tool_read_file(const char *path, uint8_t **buf, size_t *cap, size_t max)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 0) {
        if (errno == 0) errno = EINVAL;
        fclose(f);
        return -1;
    }
    if ((unsigned long long)st.st_size > max) {
        fclose(f);
        errno = EFBIG;
        return -1;
    }
    size_t want = (size_t)st.st_size;
    if (want + 1 > *cap) {
        uint8_t *p = realloc(*buf, want + 1);
        if (!p) {
            fclose(f);
            errno = ENOMEM;
            return -1;
        }
        *buf = p;
        *cap = want + 1;
    }
    size_t got = fread(*buf, 1, want, f);
    int bad = ferror(f) || got != want;
    fclose(f);
    if (bad) {
        errno = EIO;
        return -1;
    }
    return (long long)got;
}

/* ---- untrusted text ---------------------------------------------------- */

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

/* tool_text, and tool_html_text when `html`. */
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

void tool_text(FILE *f, const char *s) { text_write(f, s, 0); }

void tool_text_buf(char *buf, size_t cap, const char *s)
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

void tool_line(FILE *f, const char *fmt, ...)
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

void tool_html_text(FILE *f, const char *s) { text_write(f, s, 1); }

int tool_json_string(FILE *f, const char *str)
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

void tool_json_member(FILE *f, const char *key, const char *s)
{
    fprintf(f, "\"%s\": ", key);
    if (!tool_json_string(f, s)) return;
    fprintf(f, ", \"%s_hex\": \"", key);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) fprintf(f, "%02x", *p);
    fputc('"', f);
}
