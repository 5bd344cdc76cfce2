/*
 * meas.c — the stall analyzer's measurements as a table
 * (NOSTALL_ANALYZE_MEAS_TABLE in nostall_analyze.h): their names and help
 * for bindings that build the struct from the library (Python), and the
 * reader of a measurements file: a flat JSON object of numbers, or a JSON
 * report whose "measurements" member holds one (what the JSON report
 * writes, with 17 significant digits: an exact round trip).
 *
 * The reader is deliberately small: keys are taken as they are (no escapes),
 * values are numbers or null; anything else is refused with a message
 * naming the file. Pure functions and per-call state: any thread.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyze/analyze_impl.h"
#include "common/error.h"

static const char *const meas_names[] = {
#define NST_AN_NAME_(name, help) #name,
    NOSTALL_ANALYZE_MEAS_TABLE(NST_AN_NAME_)
#undef NST_AN_NAME_
};

static const char *const meas_help[] = {
#define NST_AN_HELP_(name, help) help,
    NOSTALL_ANALYZE_MEAS_TABLE(NST_AN_HELP_)
#undef NST_AN_HELP_
};

#define NST_AN_NMEAS ((int)(sizeof meas_names / sizeof meas_names[0]))

int nostall_analyze_meas_count(void) { return NST_AN_NMEAS; }

const char *nostall_analyze_meas_name(int i)
{
    return i >= 0 && i < NST_AN_NMEAS ? meas_names[i] : NULL;
}

const char *nostall_analyze_meas_help(int i)
{
    return i >= 0 && i < NST_AN_NMEAS ? meas_help[i] : NULL;
}

/* The whole file, NUL-terminated, into a malloc'd *out. 0 or a status
 * with the error set. */
static int read_text(const char *path, char **out)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return nst_error(NOSTALL_E_IO, "cannot open measurements %s: %s", path, strerror(errno));
    size_t cap = 1 << 16, len = 0;
    char *text = malloc(cap + 1);
    for (size_t n; text && (n = fread(text + len, 1, cap - len, f)) > 0;) {
        len += n;
        if (len == cap) {
            char *t = cap > (1u << 30) ? NULL : realloc(text, 2 * cap + 1);
            if (!t) {
                free(text);
                text = NULL;
                break;
            }
            text = t;
            cap *= 2;
        }
    }
    const int bad = ferror(f);
    fclose(f);
    if (!text) return nst_error(NOSTALL_E_NOMEM, "out of memory reading %s", path);
    if (bad) {
        free(text);
        return nst_error(NOSTALL_E_IO, "cannot read measurements %s", path);
    }
    text[len] = '\0';
    *out = text;
    return 0;
}

static const char *skip_ws(const char *p)
{
    while (*p && isspace((unsigned char)*p)) p++;
    return p;
}

/* Set the measurement named k[0..klen) to x; 1 if the name is known. */
static int set_field(nostall_analyze_meas *m, const char *k, size_t klen, double x)
{
#define NST_AN_SET_(name, help)                                                                    \
    if (klen == strlen(#name) && !strncmp(k, #name, klen)) {                                       \
        m->name = x;                                                                               \
        return 1;                                                                                  \
    }
    NOSTALL_ANALYZE_MEAS_TABLE(NST_AN_SET_)
#undef NST_AN_SET_
    return 0;
}

/* Parse the object of numbers in `text` into *m (zeroed first). Returns
 * the number of known fields read, or -1 if it is not such an object. */
static int parse(const char *text, nostall_analyze_meas *m)
{
    memset(m, 0, sizeof *m);
    const char *p = strstr(text, "\"measurements\"");
    p = p ? strchr(p, '{') : skip_ws(text);
    int found = 0;
    if (!p || *p != '{') return -1;
    p++;
    for (;;) {
        p = skip_ws(p);
        if (*p == '}') return found;
        if (*p != '"') return -1;
        const char *k = ++p;
        while (*p && *p != '"') p++;
        if (!*p) return -1;
        const size_t klen = (size_t)(p - k);
        p = skip_ws(p + 1);
        if (*p != ':') return -1;
        p = skip_ws(p + 1);
        char *end;
        double x = strtod(p, &end);
        if (end == p) {
            if (strncmp(p, "null", 4) != 0) return -1;
            x = 0;
            end = (char *)p + 4;
        }
        p = skip_ws(end);
        found += set_field(m, k, klen, x);
        if (*p == ',')
            p++;
        else if (*p != '}')
            return -1;
    }
}

int nostall_analyze_meas_read(nostall_analyze_meas *out, size_t size, const char *path)
{
    nst_error_clear();
    if (!out || !path)
        return nst_error(NOSTALL_E_INVALID, "nostall_analyze_meas_read: NULL argument");
    char *text = NULL;
    const int rc = read_text(path, &text);
    if (rc < 0) return rc;
    nostall_analyze_meas m;
    const int found = parse(text, &m);
    free(text);
    if (found < 0)
        return nst_error(NOSTALL_E_INVALID,
                         "measurements %s: not a JSON object of numbers (or an object with a "
                         "\"measurements\" member holding one)",
                         path);
    if (!(m.items_per_epoch > 0) || !(m.batch_size > 0) || !(m.warm_items > 0))
        return nst_error(NOSTALL_E_INVALID,
                         "measurements %s: items_per_epoch, batch_size and warm_items must be > 0 "
                         "(%d known fields read)",
                         path, found);
    memcpy(out, &m, size < sizeof m ? size : sizeof m);
    return 0;
}
