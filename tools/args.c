/*
 * args.c — the CLI's one argument parser and help writer (see args.h): a
 * subcommand's table of flags plus, for a command that builds a loader,
 * the library's option table. Touches only what args.h says: the options
 * struct and config it is handed, argv's order, stdout and stderr.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "util.h"

#define HELP_WIDTH 79  /* wrap the help's text at this column       */
#define HELP_INDENT 21 /* where an option's description starts      */

/* ---- values ---------------------------------------------------------------- */

int tool_parse_int(const char *prefix, const char *name, const char *value, double lo, double hi,
                   long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(value, &end, 10);
    if (!(*value == '-' || (*value >= '0' && *value <= '9')) || *end || errno == ERANGE ||
        (double)v < lo || (double)v > hi) {
        tool_line(stderr, "%s: --%s must be an integer in %.0f..%.0f (got '%s')", prefix, name, lo,
                  hi, value);
        return -1;
    }
    *out = (long)v;
    return 0;
}

/* "512M": the largest suffix that divides the size. */
static void size_text(uint64_t v, char *buf, size_t cap)
{
    static const char suffix[] = "KMG";
    int k = -1;
    while (k < 2 && v && v % 1024 == 0) v /= 1024, k++;
    if (k < 0)
        snprintf(buf, cap, "%llu", (unsigned long long)v);
    else
        snprintf(buf, cap, "%llu%c", (unsigned long long)v, suffix[k]);
}

int tool_parse_size(const char *prefix, const char *name, const char *value, uint64_t lo,
                    uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(value, &end, 10);
    int sh = 0, bad = end == value || errno || *value < '0' || *value > '9';
    if (*end == 'K' || *end == 'k')
        sh = 10, end++;
    else if (*end == 'M' || *end == 'm')
        sh = 20, end++;
    else if (*end == 'G' || *end == 'g')
        sh = 30, end++;
    bad = bad || *end || x > (1ULL << (62 - sh));
    if (bad || ((uint64_t)x << sh) < lo) {
        char l[32];
        size_text(lo, l, sizeof l);
        tool_line(stderr,
                  "%s: --%s must be a size (bytes, with K, M or G: powers of 1024) of at least "
                  "%s (got '%s')",
                  prefix, name, l, value);
        return -1;
    }
    *out = (uint64_t)x << sh;
    return 0;
}

static int parse_u64(const char *prefix, const char *name, const char *value, double lo,
                     uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(value, &end, 10);
    if (!(*value >= '0' && *value <= '9') || *end || errno == ERANGE || (double)v < lo) {
        tool_line(stderr, "%s: --%s must be an integer in %.0f..18446744073709551615 (got '%s')",
                  prefix, name, lo, value);
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

/* A bound as text: whole numbers in full ("3600000"), others as %g. */
static const char *num_text(double v, char *buf, size_t cap)
{
    if (v == floor(v) && fabs(v) < 1e15)
        snprintf(buf, cap, "%.0f", v);
    else
        snprintf(buf, cap, "%g", v);
    return buf;
}

/* The bounds of a DOUBLE flag: "0..0.5", "> 0"; `sentence`: "a number in 0..0.5". */
static void double_bounds(const tool_arg *a, int sentence, char *buf, size_t cap)
{
    const char *num = sentence ? "a number " : "", *in = sentence ? "in " : "";
    char lo[32], hi[32];
    num_text(a->lo, lo, sizeof lo);
    num_text(a->hi, hi, sizeof hi);
    if (isinf(a->hi))
        snprintf(buf, cap, "%s%s %s", num, a->flags & TOOL_ARG_OPEN_LO ? ">" : ">=", lo);
    else if (a->flags & TOOL_ARG_OPEN_LO)
        snprintf(buf, cap, "%s%s(%s, %s]", num, in, lo, hi);
    else
        snprintf(buf, cap, "%s%s%s..%s", num, in, lo, hi);
}

static int parse_double(const char *prefix, const tool_arg *a, const char *value, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(value, &end);
    int low_ok = a->flags & TOOL_ARG_OPEN_LO ? v > a->lo : v >= a->lo;
    if (end == value || *end || errno == ERANGE || !low_ok || !(v <= a->hi)) {
        char b[96];
        double_bounds(a, 1, b, sizeof b);
        tool_line(stderr, "%s: --%s must be %s (got '%s')", prefix, a->name, b, value);
        return -1;
    }
    *out = v;
    return 0;
}

/* The choices of an ENUM, first names only (aliases left out): "jpeg|png",
 * or in words ("classify, detect or audio"). */
static void enum_names(const char *choices, int words, char *buf, size_t cap)
{
    size_t n = 0;
    int alias = 0, left = 0;
    for (const char *p = choices; *p; p++) left += *p == '|';
    for (const char *p = choices; *p && n + 5 < cap; p++) {
        if (*p == '|') { /* the next choice */
            const char *sep = !words ? "|" : --left ? ", " : " or ";
            memcpy(buf + n, sep, strlen(sep));
            n += strlen(sep);
            alias = 0;
        } else if (*p == ',' || alias) { /* an alias of the choice */
            alias = 1;
        } else {
            buf[n++] = *p;
        }
    }
    buf[n] = '\0';
}

/* The index of `value` among the choices "a,alias|b|c", or -1. */
static int enum_find(const char *choices, const char *value)
{
    size_t vl = strlen(value);
    int k = 0;
    for (const char *p = choices;; k++) {
        const char *end = p + strcspn(p, "|");
        while (p < end) { /* the names of choice k, ',' between them */
            const char *q = memchr(p, ',', (size_t)(end - p));
            if (!q) q = end;
            if ((size_t)(q - p) == vl && !strncmp(p, value, vl)) return k;
            p = q < end ? q + 1 : end;
        }
        if (!*end) return -1;
        p = end + 1;
    }
}

/* The name at index k of the choices, into buf. */
static void enum_name(const char *choices, int k, char *buf, size_t cap)
{
    const char *p = choices;
    for (int i = 0; i < k && p; i++) {
        p = strchr(p, '|');
        if (p) p++;
    }
    size_t n = p ? strcspn(p, "|,") : 0;
    if (n >= cap) n = cap - 1;
    memcpy(buf, p ? p : "", n);
    buf[n] = '\0';
}

/* ---- one flag ---------------------------------------------------------------- */

/* Two flag names alike, '-' and '_' the same ("batch-size", "batch_size"). */
static int same_name(const char *a, const char *b, size_t blen)
{
    size_t i = 0;
    for (; i < blen && a[i]; i++) {
        char x = a[i] == '_' ? '-' : a[i], y = b[i] == '_' ? '-' : b[i];
        if (x != y) return 0;
    }
    return i == blen && !a[i];
}

static const tool_arg *find_arg(const tool_cmd *cmd, const char *name, size_t len)
{
    for (int k = 0; k < cmd->nargs; k++)
        if (same_name(cmd->args[k].name, name, len)) return &cmd->args[k];
    return NULL;
}

/* Take `value` (not NULL) into the field of own flag `a`. */
static int take_value(const tool_cmd *cmd, const tool_arg *a, const char *value, void *opts)
{
    char *field = (char *)opts + a->at;
    const char *pre = cmd->prefix;
    switch (a->type) {
    case TOOL_ARG_INT:
        if (tool_parse_int(pre, a->name, value, a->lo, a->hi, (long *)(void *)field) < 0) return -1;
        break;
    case TOOL_ARG_U64:
        if (parse_u64(pre, a->name, value, a->lo, (uint64_t *)(void *)field) < 0) return -1;
        break;
    case TOOL_ARG_SIZE:
        if (tool_parse_size(pre, a->name, value, (uint64_t)a->lo, (uint64_t *)(void *)field) < 0)
            return -1;
        break;
    case TOOL_ARG_DOUBLE:
        if (parse_double(pre, a, value, (double *)(void *)field) < 0) return -1;
        break;
    case TOOL_ARG_STRING: *(const char **)(void *)field = value; break;
    case TOOL_ARG_ENUM: {
        int k = enum_find(a->choices, value);
        if (k < 0) {
            char names[256];
            enum_names(a->choices, 1, names, sizeof names);
            tool_line(stderr, "%s: --%s must be %s (got '%s')", pre, a->name, names, value);
            return -1;
        }
        *(int *)(void *)field = k;
        break;
    }
    case TOOL_ARG_LIST: {
        tool_list *l = (tool_list *)(void *)field;
        if (l->n >= (int)a->hi || l->n >= TOOL_LIST_MAX) {
            tool_line(stderr, "%s: at most %d --%s (got '%s' beyond them)", pre, l->n, a->name,
                      value);
            return -1;
        }
        l->v[l->n++] = value;
        break;
    }
    case TOOL_ARG_CALL: return a->fn(a, pre, value, opts);
    case TOOL_ARG_FLAG: break;
    }
    return a->fn ? a->fn(a, pre, value, opts) : 0;
}

/* The loader option `name` with `value` (NULL: from the next argument,
 * consumed by advancing *i, or 1 for a bare boolean). Returns 1 when set,
 * 0 when `name` is no loader option (nothing printed), -1 after a message. */
static int take_loader(const tool_cmd *cmd, nostall_config *cfg, const char *name,
                       const char *value, int argc, char **argv, int *i)
{
    int id = nostall_option_find(name);
    if (id < 0) return 0;
    nostall_option_info info;
    nostall_option_info_get(id, &info);
    if (!value && info.type == NOSTALL_TYPE_BOOL) {
        /* a bare boolean flag means 1, unless a boolean value follows */
        if (*i + 1 < argc && strncmp(argv[*i + 1], "--", 2) != 0 &&
            nostall_config_set(cfg, name, argv[*i + 1]) == 0) {
            ++*i;
            return 1;
        }
        value = "1";
    } else if (!value) {
        if (*i + 1 >= argc) {
            tool_line(stderr, "%s: %s needs a value", cmd->prefix, argv[*i]); /* as given */
            return -1;
        }
        value = argv[++*i];
    }
    if (nostall_config_set(cfg, name, value) < 0) {
        tool_line(stderr, "%s: %s", cmd->prefix, nostall_last_error()); /* names both */
        return -1;
    }
    return 1;
}

/* ---- the parse ------------------------------------------------------------------ */

/* One "--name[=value]" at argv[*i]: 0, or -1 after a message. */
static int take_flag(const tool_cmd *cmd, int argc, char **argv, int *i, void *opts,
                     nostall_config *cfg)
{
    const char *a = argv[*i] + 2, *eq = strchr(a, '=');
    size_t len = eq ? (size_t)(eq - a) : strlen(a);
    const char *value = eq ? eq + 1 : NULL;
    const tool_arg *t = find_arg(cmd, a, len);
    if (t && t->type == TOOL_ARG_FLAG) {
        if (value) {
            tool_line(stderr, "%s: --%s takes no value (got '%s')", cmd->prefix, t->name, value);
            return -1;
        }
        *(int *)(void *)((char *)opts + t->at) = 1;
        return t->fn ? t->fn(t, cmd->prefix, "1", opts) : 0;
    }
    if (t) {
        if (!value && *i + 1 >= argc) {
            tool_line(stderr, "%s: --%s needs a value", cmd->prefix, t->name);
            return -1;
        }
        return take_value(cmd, t, value ? value : argv[++*i], opts);
    }
    if (cmd->loader && cfg && len < 128) {
        char name[128];
        memcpy(name, a, len);
        name[len] = '\0';
        for (char *q = name; *q; q++)
            if (*q == '-') *q = '_';
        int r = take_loader(cmd, cfg, name, value, argc, argv, i);
        if (r != 0) return r > 0 ? 0 : -1;
    }
    tool_line(stderr, "%s: unknown option '%s' (see nostall %s --help)", cmd->prefix, argv[*i],
              cmd->name);
    return -1;
}

int tool_args_parse(const tool_cmd *cmd, int argc, char **argv, void *opts, nostall_config *cfg)
{
    for (int k = 0; cmd->loader && cfg && k < cmd->ndefaults; k++)
        if (nostall_config_set(cfg, cmd->defaults[k].name, cmd->defaults[k].value) < 0) {
            tool_line(stderr, "%s: %s", cmd->prefix, nostall_last_error());
            return TOOL_ARGS_ERROR;
        }
    int npos = 0, flags_done = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (flags_done || a[0] != '-' || a[1] == '\0') {
            if (cmd->max_positionals >= 0 && npos >= cmd->max_positionals) {
                tool_line(stderr, "%s: unexpected extra argument '%s' (%s expected)", cmd->prefix,
                          a, cmd->positionals);
                return TOOL_ARGS_ERROR;
            }
            argv[++npos] = (char *)a; /* npos + 1 <= i: nothing unread is overwritten */
        } else if (!strcmp(a, "--")) {
            flags_done = 1;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            tool_args_help(cmd, opts, stdout);
            return TOOL_ARGS_HELP;
        } else if (a[1] != '-') {
            tool_line(stderr, "%s: unknown option '%s' (see nostall %s --help)", cmd->prefix, a,
                      cmd->name);
            return TOOL_ARGS_ERROR;
        } else if (take_flag(cmd, argc, argv, &i, opts, cfg) < 0) {
            return TOOL_ARGS_ERROR;
        }
    }
    return npos;
}

/* ---- the help ------------------------------------------------------------------ */

/* "  LEFT  text" with the text wrapped at HELP_WIDTH, continuation lines at
 * HELP_INDENT; a LEFT too wide for its column pushes the text along. */
static void help_line(FILE *f, const char *left, const char *text)
{
    int col = fprintf(f, "  %s", left);
    col += fprintf(f, "%*s", col < HELP_INDENT - 1 ? HELP_INDENT - col : 2, "");
    int first = 1;
    for (const char *p = text; *p;) {
        while (*p == ' ') p++;
        size_t w = strcspn(p, " ");
        if (!w) break;
        if (!first && col + 1 + (int)w > HELP_WIDTH)
            col = fprintf(f, "\n%*s", HELP_INDENT, "") - 1;
        else if (!first)
            col += fprintf(f, " ");
        col += fprintf(f, "%.*s", (int)w, p);
        p += w;
        first = 0;
    }
    fputc('\n', f);
}

/* What --help says of own flag `a`'s values and default: "1..64; default 1". */
static void arg_bounds(const tool_arg *a, const void *opts, char *buf, size_t cap)
{
    const char *field = opts ? (const char *)opts + a->at : NULL;
    char b[128] = "", d[256] = "";
    switch (a->type) {
    case TOOL_ARG_INT:
        snprintf(b, sizeof b, "%.0f..%.0f", a->lo, a->hi);
        if (field) snprintf(d, sizeof d, "%ld", *(const long *)(const void *)field);
        break;
    case TOOL_ARG_U64:
        snprintf(b, sizeof b, "%.0f..2^64-1", a->lo);
        if (field)
            snprintf(d, sizeof d, "%llu",
                     (unsigned long long)*(const uint64_t *)(const void *)field);
        break;
    case TOOL_ARG_SIZE: {
        char l[32];
        size_text((uint64_t)a->lo, l, sizeof l);
        snprintf(b, sizeof b, "bytes with K, M or G, at least %s", l);
        if (field) size_text(*(const uint64_t *)(const void *)field, d, sizeof d);
        break;
    }
    case TOOL_ARG_DOUBLE:
        double_bounds(a, 0, b, sizeof b);
        if (field) snprintf(d, sizeof d, "%g", *(const double *)(const void *)field);
        break;
    case TOOL_ARG_STRING:
        if (field && *(const char *const *)(const void *)field)
            snprintf(d, sizeof d, "'%s'", *(const char *const *)(const void *)field);
        break;
    case TOOL_ARG_ENUM:
        enum_names(a->choices, 0, b, sizeof b);
        if (field) enum_name(a->choices, *(const int *)(const void *)field, d, sizeof d);
        break;
    case TOOL_ARG_LIST: snprintf(b, sizeof b, "repeatable, at most %.0f", a->hi); break;
    case TOOL_ARG_FLAG:
    case TOOL_ARG_CALL: break;
    }
    const char *dw = "default ";
    if (a->def) snprintf(d, sizeof d, "%s", a->def), dw = "default: "; /* words, not a value */
    snprintf(buf, cap, "%s%s%s%s", b, *b && *d ? "; " : "", *d ? dw : "", d);
}

/* The loader options, as the library's table describes them. */
static void loader_help(const tool_cmd *cmd, FILE *f)
{
    fprintf(f, "\nloader options (the library's; --name VALUE or --name=VALUE):\n");
    int n = nostall_option_count();
    for (int i = 0; i < n; i++) {
        nostall_option_info info;
        char flag[80], text[2048];
        nostall_option_info_get(i, &info);
        if (find_arg(cmd, info.name, strlen(info.name))) continue; /* the command's own */
        const char *def = info.default_value;
        for (int k = 0; k < cmd->ndefaults; k++)
            if (!strcmp(cmd->defaults[k].name, info.name)) def = cmd->defaults[k].value;
        snprintf(flag, sizeof flag, "--%s", info.name);
        for (char *p = flag + 2; *p; p++)
            if (*p == '_') *p = '-';
        if (info.type == NOSTALL_TYPE_ENUM)
            snprintf(text, sizeof text, "%s (one of %s; default %s)", info.help, info.min, def);
        else if (info.type == NOSTALL_TYPE_BOOL)
            snprintf(text, sizeof text, "%s (0|1; default %s)", info.help, def);
        else if (info.type == NOSTALL_TYPE_STRING || info.type == NOSTALL_TYPE_PATH)
            snprintf(text, sizeof text, "%s (%s; default '%s')", info.help, info.type_name, def);
        else
            snprintf(text, sizeof text, "%s (%s in [%s, %s]; default %s)", info.help,
                     info.type_name, info.min, info.max, def);
        help_line(f, flag, text);
    }
}

void tool_args_help(const tool_cmd *cmd, const void *opts, FILE *f)
{
    fprintf(f, "%s\noptions (--flag VALUE or --flag=VALUE):\n", cmd->usage);
    for (int k = 0; k < cmd->nargs; k++) {
        const tool_arg *a = &cmd->args[k];
        char left[96], bounds[512], text[2048];
        snprintf(left, sizeof left, "--%s%s%s", a->name, a->meta ? " " : "", a->meta ? a->meta : "");
        arg_bounds(a, opts, bounds, sizeof bounds);
        snprintf(text, sizeof text, "%s%s%s%s", a->help, *bounds ? " (" : "", bounds,
                 *bounds ? ")" : "");
        help_line(f, left, text);
    }
    help_line(f, "-h, --help", "this text");
    if (cmd->loader) loader_help(cmd, f);
}
