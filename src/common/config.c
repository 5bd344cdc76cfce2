/*
 * config.c — the option table (NOSTALL_OPTION_TABLE in nostall.h) turned into
 * a configuration object: parsing from text, bounds checking, typed access,
 * and the descriptions the CLI's --help and Python's keywords come from.
 *
 * DESIGN
 *   The table is the single source of truth: defaults and bounds are kept as
 *   text and parsed with the same functions as user input, so --help shows
 *   exactly what is enforced. A value is validated completely before it is
 *   stored: on error the config is unchanged and the message names the
 *   option, the value and the bounds. Nothing is clamped.
 *
 * THREADS
 *   A config is used by one thread at a time. The option-info functions read
 *   only static data and are thread-safe.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/config.h"
#include "common/memlimit.h"
#include "common/error.h"

typedef struct opt_desc {
    const char *name;
    nostall_option_type type;
    const char *type_name;
    const char *def, *lo, *hi, *help;
} opt_desc;

static const opt_desc opts[NOSTALL_OPT_COUNT_] = {
#define NST_OPT_(id, value, name, type, def, lo, hi, help)                                         \
    [value] = {name, NOSTALL_TYPE_##type, #type, def, lo, hi, help},
    NOSTALL_OPTION_TABLE(NST_OPT_)
#undef NST_OPT_
};
/* Pinned ids are dense: as many table rows as ids (a skipped value would
 * leave a hole, a repeated one a row too few). */
#define NST_OPT_ONE_(id, value, name, type, def, lo, hi, help) +1
_Static_assert(0 NOSTALL_OPTION_TABLE(NST_OPT_ONE_) == NOSTALL_OPT_COUNT_,
               "option ids must be 0 .. count-1, each once");
#undef NST_OPT_ONE_
#define NST_OPT_PATH_(id, value, name, type, def, lo, hi, help)                                    \
    +(NOSTALL_TYPE_##type == NOSTALL_TYPE_PATH)
_Static_assert(0 NOSTALL_OPTION_TABLE(NST_OPT_PATH_) <= NST_PATH_OPTIONS,
               "NST_PATH_OPTIONS (common/config.h) must hold every PATH option");
#undef NST_OPT_PATH_

static const char *type_label(nostall_option_type t)
{
    switch (t) {
    case NOSTALL_TYPE_UINT: return "uint";
    case NOSTALL_TYPE_DOUBLE: return "double";
    case NOSTALL_TYPE_BOOL: return "bool";
    case NOSTALL_TYPE_ENUM: return "enum";
    case NOSTALL_TYPE_DOUBLE3: return "double3";
    case NOSTALL_TYPE_SIZE: return "size";
    case NOSTALL_TYPE_STRING: return "string";
    case NOSTALL_TYPE_PATH: return "path";
    }
    return "?";
}

int nostall_option_count(void) { return NOSTALL_OPT_COUNT_; }

int nostall_option_info_get(int id, nostall_option_info *out)
{
    if (id < 0 || id >= NOSTALL_OPT_COUNT_ || !out)
        return nst_error(NOSTALL_E_INVALID, "nostall_option_info_get: no option %d", id);
    const opt_desc *d = &opts[id];
    out->name = d->name;
    out->type = d->type;
    out->type_name = type_label(d->type);
    out->default_value = d->def;
    out->min = d->lo;
    out->max = d->hi;
    out->help = d->help;
    return 0;
}

int nostall_option_find(const char *name)
{
    char norm[64];
    size_t n;
    if (!name) return nst_error(NOSTALL_E_OPTION, "unknown option (null)");
    n = strlen(name);
    if (n >= sizeof norm) return nst_error(NOSTALL_E_OPTION, "unknown option '%s'", name);
    for (size_t i = 0; i <= n; i++) norm[i] = name[i] == '-' ? '_' : name[i];
    for (int i = 0; i < NOSTALL_OPT_COUNT_; i++)
        if (strcmp(opts[i].name, norm) == 0) return i;
    return nst_error(NOSTALL_E_OPTION, "unknown option '%s'", name);
}

/* --- parsers: 0 and *out on success, -1 on malformed text --- */

static int parse_uint(const char *s, uint64_t *out)
{
    char *end;
    while (isspace((unsigned char)*s)) s++;
    if (!isdigit((unsigned char)*s)) return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno == ERANGE) return -1;
    while (isspace((unsigned char)*end)) end++;
    if (*end) return -1;
    *out = v;
    return 0;
}

static int parse_double(const char *s, double *out)
{
    char *end;
    while (isspace((unsigned char)*s)) s++;
    if (!*s) return -1;
    errno = 0;
    double v = strtod(s, &end);
    if (errno == ERANGE || end == s || !isfinite(v)) return -1;
    while (isspace((unsigned char)*end)) end++;
    if (*end) return -1;
    *out = v;
    return 0;
}

/* "123", "64K", "1.5G", "256MiB", "2gb": powers of 1024; must be whole bytes.
 * "25%": a percentage of the memory the process may use (RAM, or its
 * cgroup's limit when that is lower: common/memlimit.h), rounded down. */
static int parse_size(const char *s, uint64_t *out)
{
    char *end;
    while (isspace((unsigned char)*s)) s++;
    if (!isdigit((unsigned char)*s) && *s != '.') return -1;
    errno = 0;
    double v = strtod(s, &end);
    if (errno == ERANGE || end == s || !isfinite(v) || v < 0) return -1;
    if (*end == '%') {
        nst_memlimit m;
        for (end++; isspace((unsigned char)*end); end++) {
        }
        if (*end || v > 100 || nst_memlimit_get(&m) < 0) return -1;
        *out = (uint64_t)floor((double)m.limit * v / 100.0);
        return 0;
    }
    double mul = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K':
        mul = 1024.0;
        end++;
        break;
    case 'M':
        mul = 1024.0 * 1024;
        end++;
        break;
    case 'G':
        mul = 1024.0 * 1024 * 1024;
        end++;
        break;
    case 'T':
        mul = 1024.0 * 1024 * 1024 * 1024;
        end++;
        break;
    case 'B': break;
    default: break;
    }
    if (mul > 1 && (*end == 'i' || *end == 'I')) end++;
    if (*end == 'b' || *end == 'B') end++;
    while (isspace((unsigned char)*end)) end++;
    if (*end) return -1;
    v *= mul;
    if (v >= 18446744073709551616.0 || v != floor(v)) return -1;
    *out = (uint64_t)v;
    return 0;
}

static int parse_bool(const char *s, uint64_t *out)
{
    static const char *yes[] = {"1", "true", "yes", "on"};
    static const char *no[] = {"0", "false", "no", "off"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = 1;
            return 0;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = 0;
            return 0;
        }
    }
    return -1;
}

static int parse_enum(const char *choices, const char *s, uint64_t *out)
{
    size_t n = strlen(s);
    uint64_t idx = 0;
    for (const char *p = choices; *p; idx++) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, s, n) == 0) {
            *out = idx;
            return 0;
        }
        p += len + (bar ? 1 : 0);
    }
    return -1;
}

/* Choice `idx` of "a|b|c" into buf. */
static void enum_name(const char *choices, uint64_t idx, char *buf, size_t len)
{
    const char *p = choices;
    for (uint64_t i = 0; i < idx && p; i++) {
        p = strchr(p, '|');
        if (p) p++;
    }
    if (!p) {
        snprintf(buf, len, "%llu", (unsigned long long)idx);
        return;
    }
    const char *bar = strchr(p, '|');
    int n = bar ? (int)(bar - p) : (int)strlen(p);
    snprintf(buf, len, "%.*s", n, p);
}

/* Parse and bound-check `text` for option `id` into *v. */
/* Where PATH option `id` keeps its text: the PATH options before it. */
static uint64_t path_slot(int id)
{
    uint64_t k = 0;
    for (int i = 0; i < id; i++) k += opts[i].type == NOSTALL_TYPE_PATH;
    return k;
}

const char *nst_config_path(const nostall_config *cfg, nostall_option id)
{
    return cfg->paths[cfg->v[id].u];
}

static int parse_value(int id, const char *text, nst_optval *v)
{
    const opt_desc *d = &opts[id];
    switch (d->type) {
    case NOSTALL_TYPE_UINT:
    case NOSTALL_TYPE_SIZE: {
        uint64_t x, lo, hi;
        int (*p)(const char *, uint64_t *) = d->type == NOSTALL_TYPE_UINT ? parse_uint : parse_size;
        if (p(text, &x) != 0)
            return nst_error(NOSTALL_E_OPTION, "option '%s': '%s' is not %s", d->name, text,
                             d->type == NOSTALL_TYPE_UINT ? "a non-negative integer"
                                                          : "a size (e.g. 4096, 64K, 1.5G, 25%)");
        p(d->lo, &lo);
        p(d->hi, &hi);
        if (x < lo || x > hi)
            return nst_error(NOSTALL_E_OPTION, "option '%s': %s is out of bounds [%s, %s]", d->name,
                             text, d->lo, d->hi);
        v->u = x;
        return 0;
    }
    case NOSTALL_TYPE_DOUBLE: {
        double x, lo, hi;
        if (parse_double(text, &x) != 0)
            return nst_error(NOSTALL_E_OPTION, "option '%s': '%s' is not a number", d->name, text);
        parse_double(d->lo, &lo);
        parse_double(d->hi, &hi);
        if (x < lo || x > hi)
            return nst_error(NOSTALL_E_OPTION, "option '%s': %s is out of bounds [%s, %s]", d->name,
                             text, d->lo, d->hi);
        v->d = x;
        return 0;
    }
    case NOSTALL_TYPE_BOOL:
        if (parse_bool(text, &v->u) != 0)
            return nst_error(NOSTALL_E_OPTION,
                             "option '%s': '%s' is not a boolean (0|1|true|false)", d->name, text);
        return 0;
    case NOSTALL_TYPE_ENUM:
        if (parse_enum(d->lo, text, &v->u) != 0)
            return nst_error(NOSTALL_E_OPTION, "option '%s': '%s' is not one of %s", d->name, text,
                             d->lo);
        return 0;
    case NOSTALL_TYPE_DOUBLE3: {
        char tmp[256];
        double lo, hi, x[3];
        int n = 0;
        if (strlen(text) >= sizeof tmp)
            return nst_error(NOSTALL_E_OPTION, "option '%s': value too long", d->name);
        strcpy(tmp, text);
        parse_double(d->lo, &lo);
        parse_double(d->hi, &hi);
        for (char *save = NULL, *tok = strtok_r(tmp, ",", &save); tok;
             tok = strtok_r(NULL, ",", &save)) {
            if (n == 3 || parse_double(tok, &x[n]) != 0) {
                n = -1;
                break;
            }
            if (x[n] < lo || x[n] > hi)
                return nst_error(NOSTALL_E_OPTION,
                                 "option '%s': %s is out of bounds [%s, %s] (in '%s')", d->name,
                                 tok, d->lo, d->hi, text);
            n++;
        }
        if (n == 1)
            x[1] = x[2] = x[0];
        else if (n != 3)
            return nst_error(NOSTALL_E_OPTION,
                             "option '%s': '%s' is not one or three comma-separated numbers",
                             d->name, text);
        memcpy(v->d3, x, sizeof x);
        return 0;
    }
    case NOSTALL_TYPE_PATH: /* the text itself is kept by the caller */
        if (strlen(text) >= NOSTALL_PATH_MAX)
            return nst_error(NOSTALL_E_OPTION, "option '%s': a path of %zu bytes is longer than %d",
                             d->name, strlen(text), NOSTALL_PATH_MAX - 1);
        v->u = path_slot(id);
        return 0;
    case NOSTALL_TYPE_STRING: {
        size_t n = strlen(text);
        if (n >= NOSTALL_STRING_MAX)
            return nst_error(NOSTALL_E_OPTION, "option '%s': '%s' is longer than %d characters",
                             d->name, text, NOSTALL_STRING_MAX - 1);
        for (size_t i = 0; i < n; i++)
            if (!isalnum((unsigned char)text[i]) && !strchr("._-", text[i]))
                return nst_error(NOSTALL_E_OPTION,
                                 "option '%s': '%s' may only hold letters, digits, '.', '_', '-'",
                                 d->name, text);
        memcpy(v->s, text, n + 1);
        return 0;
    }
    }
    return nst_error(NOSTALL_E_OPTION, "option '%s': unknown type", d->name);
}

int nostall_config_create(nostall_config **out)
{
    nst_error_clear();
    if (!out) return nst_error(NOSTALL_E_INVALID, "nostall_config_create: out is NULL");
    *out = NULL;
    nostall_config *c = calloc(1, sizeof *c);
    if (!c) return nst_error(NOSTALL_E_NOMEM, "nostall_config_create: out of memory");
    for (int i = 0; i < NOSTALL_OPT_COUNT_; i++) {
        if (parse_value(i, opts[i].def, &c->v[i]) != 0) {
            /* A default outside its own bounds is a bug in the table. */
            free(c);
            return nst_error(NOSTALL_E_OPTION, "nostall_config_create: bad default of '%s'",
                             opts[i].name);
        }
    }
    *out = c;
    return 0;
}

void nostall_config_free(nostall_config *cfg) { free(cfg); }

int nostall_config_copy(nostall_config **out, const nostall_config *cfg)
{
    nst_error_clear();
    if (!out) return nst_error(NOSTALL_E_INVALID, "nostall_config_copy: out is NULL");
    *out = NULL;
    if (!cfg) return nst_error(NOSTALL_E_INVALID, "nostall_config_copy: cfg is NULL");
    nostall_config *c = malloc(sizeof *c);
    if (!c) return nst_error(NOSTALL_E_NOMEM, "nostall_config_copy: out of memory");
    *c = *cfg; /* values, path texts, peer hooks and op: all held by value */
    *out = c;
    return 0;
}

int nostall_config_set_peer_cache(nostall_config *cfg, const nostall_peer_cache *pc)
{
    nst_error_clear();
    if (!cfg) return nst_error(NOSTALL_E_INVALID, "nostall_config_set_peer_cache: cfg is NULL");
    memset(&cfg->peer, 0, sizeof cfg->peer);
    cfg->has_peer = 0;
    if (pc && (pc->get || pc->put)) {
        cfg->peer = *pc;
        cfg->has_peer = 1;
    }
    return 0;
}

int nostall_config_set(nostall_config *cfg, const char *name, const char *value)
{
    nst_error_clear();
    if (!cfg || !value) return nst_error(NOSTALL_E_INVALID, "nostall_config_set: NULL argument");
    int id = nostall_option_find(name);
    if (id < 0) return id;
    nst_optval v;
    int rc = parse_value(id, value, &v);
    if (rc < 0) return rc;
    cfg->v[id] = v;
    if (opts[id].type == NOSTALL_TYPE_PATH)
        snprintf(cfg->paths[v.u], NOSTALL_PATH_MAX, "%s", value);
    return 0;
}

int nostall_config_get(const nostall_config *cfg, const char *name, char *buf, size_t buflen)
{
    nst_error_clear();
    if (!cfg || !buf || buflen == 0)
        return nst_error(NOSTALL_E_INVALID, "nostall_config_get: NULL argument");
    int id = nostall_option_find(name);
    if (id < 0) return id;
    const nst_optval *v = &cfg->v[id];
    int n = 0;
    switch (opts[id].type) {
    case NOSTALL_TYPE_UINT:
    case NOSTALL_TYPE_SIZE:
    case NOSTALL_TYPE_BOOL: n = snprintf(buf, buflen, "%llu", (unsigned long long)v->u); break;
    case NOSTALL_TYPE_DOUBLE: n = snprintf(buf, buflen, "%.17g", v->d); break;
    case NOSTALL_TYPE_ENUM: { /* the whole name's length, so a short buffer is an error */
        char choice[64];
        enum_name(opts[id].lo, v->u, choice, sizeof choice);
        n = snprintf(buf, buflen, "%s", choice);
        break;
    }
    case NOSTALL_TYPE_DOUBLE3:
        n = snprintf(buf, buflen, "%.17g,%.17g,%.17g", v->d3[0], v->d3[1], v->d3[2]);
        break;
    case NOSTALL_TYPE_STRING: n = snprintf(buf, buflen, "%s", v->s); break;
    case NOSTALL_TYPE_PATH: n = snprintf(buf, buflen, "%s", cfg->paths[v->u]); break;
    }
    if (n < 0 || (size_t)n >= buflen)
        return nst_error(NOSTALL_E_INVALID, "nostall_config_get: buffer too small for '%s'", name);
    return 0;
}

static int check_id(int id, int want_double, const char *fn)
{
    if (id < 0 || id >= NOSTALL_OPT_COUNT_)
        return nst_error(NOSTALL_E_OPTION, "%s: no option %d", fn, id);
    nostall_option_type t = opts[id].type;
    int is_double = t == NOSTALL_TYPE_DOUBLE;
    if (t == NOSTALL_TYPE_DOUBLE3 || t == NOSTALL_TYPE_STRING || t == NOSTALL_TYPE_PATH ||
        is_double != want_double)
        return nst_error(NOSTALL_E_OPTION, "%s: option '%s' is of type %s", fn, opts[id].name,
                         type_label(t));
    return 0;
}

int nostall_config_set_uint(nostall_config *cfg, nostall_option id, uint64_t value)
{
    nst_error_clear();
    int rc = check_id((int)id, 0, "nostall_config_set_uint");
    if (rc < 0) return rc;
    if (!cfg) return nst_error(NOSTALL_E_INVALID, "nostall_config_set_uint: cfg is NULL");
    char text[32];
    if (opts[id].type == NOSTALL_TYPE_ENUM) {
        char name[64];
        enum_name(opts[id].lo, value, name, sizeof name);
        return nostall_config_set(cfg, opts[id].name, name);
    }
    snprintf(text, sizeof text, "%llu", (unsigned long long)value);
    return nostall_config_set(cfg, opts[id].name, text);
}

int nostall_config_get_uint(const nostall_config *cfg, nostall_option id, uint64_t *value)
{
    nst_error_clear();
    int rc = check_id((int)id, 0, "nostall_config_get_uint");
    if (rc < 0) return rc;
    if (!cfg || !value)
        return nst_error(NOSTALL_E_INVALID, "nostall_config_get_uint: NULL argument");
    *value = cfg->v[id].u;
    return 0;
}

int nostall_config_set_double(nostall_config *cfg, nostall_option id, double value)
{
    nst_error_clear();
    int rc = check_id((int)id, 1, "nostall_config_set_double");
    if (rc < 0) return rc;
    if (!cfg) return nst_error(NOSTALL_E_INVALID, "nostall_config_set_double: cfg is NULL");
    char text[64];
    snprintf(text, sizeof text, "%.17g", value);
    return nostall_config_set(cfg, opts[id].name, text);
}

int nostall_config_get_double(const nostall_config *cfg, nostall_option id, double *value)
{
    nst_error_clear();
    int rc = check_id((int)id, 1, "nostall_config_get_double");
    if (rc < 0) return rc;
    if (!cfg || !value)
        return nst_error(NOSTALL_E_INVALID, "nostall_config_get_double: NULL argument");
    *value = cfg->v[id].d;
    return 0;
}
