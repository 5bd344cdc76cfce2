/*
 * test_cli_args.c — the CLI's one argument parser (tools/args.c, built into
 * this test): every value type with its bounds (int, u64, size with
 * suffixes, float with an open bound, string, flag, enum by name and
 * alias, list, a function), --name=value and --name value, '-'/'_' alike,
 * a missing value, an unknown flag, a value given to a flag, the repeated
 * flag rule (last wins; lists append), "--" and positionals, the loader's
 * options taken from the library's table (bare booleans, command defaults,
 * the library's own errors), and the help written from the tables. Errors
 * are read back from stderr: each must name the flag and the value.
 */
#include <math.h>
#include <stddef.h>

#include "check.h"
#include "../tools/args.h"

typedef struct t_opts {
    long n;
    uint64_t seed, bytes;
    double rate, frac;
    const char *name;
    int quiet, fmt, calls;
    tool_list items;
    char last_call[32];
} t_opts;

static int t_call(const tool_arg *a, const char *prefix, const char *v, void *opts)
{
    t_opts *o = opts;
    if (!strcmp(v, "bad")) {
        fprintf(stderr, "%s: --%s: '%s' refused\n", prefix, a->name, v);
        return -1;
    }
    o->calls++;
    snprintf(o->last_call, sizeof o->last_call, "%s", v);
    return 0;
}

static int t_no_dots(const tool_arg *a, const char *prefix, const char *v, void *opts)
{
    (void)opts;
    if (!strchr(v, '.')) return 0;
    fprintf(stderr, "%s: --%s has a dot (got '%s')\n", prefix, a->name, v);
    return -1;
}

static const tool_arg t_args[] = {
    {"count", TOOL_ARG_INT, offsetof(t_opts, n), 1, 64, NULL, "N", "how many", NULL, 0, NULL},
    {"seed", TOOL_ARG_U64, offsetof(t_opts, seed), 0, 0, NULL, "S", "seed", NULL, 0, NULL},
    {"bytes", TOOL_ARG_SIZE, offsetof(t_opts, bytes), 10240, 0, NULL, "N", "a size", NULL, 0, NULL},
    {"rate", TOOL_ARG_DOUBLE, offsetof(t_opts, rate), 0, INFINITY, NULL, "R", "a rate", NULL,
     TOOL_ARG_OPEN_LO, ""},
    {"frac", TOOL_ARG_DOUBLE, offsetof(t_opts, frac), 0, 0.5, NULL, "F", "a fraction", NULL, 0,
     NULL},
    {"name", TOOL_ARG_STRING, offsetof(t_opts, name), 0, 0, NULL, "NAME", "a name", t_no_dots, 0,
     NULL},
    {"quiet-mode", TOOL_ARG_FLAG, offsetof(t_opts, quiet), 0, 0, NULL, NULL, "no noise", NULL, 0,
     NULL},
    {"format", TOOL_ARG_ENUM, offsetof(t_opts, fmt), 0, 0, "jpeg,jpg|png", "FMT", "image format",
     NULL, 0, NULL},
    {"item", TOOL_ARG_LIST, offsetof(t_opts, items), 0, 3, NULL, "X", "an item", NULL, 0, NULL},
    {"call", TOOL_ARG_CALL, 0, 0, 0, NULL, "V", "a function's value", t_call, 0, "its own words"},
    /* shadows the loader's option of the same name */
    {"mix", TOOL_ARG_STRING, offsetof(t_opts, name), 0, 0, NULL, "M", "own mix", NULL, 0, ""},
};

static const tool_default t_defaults[] = {{"epochs", "1"}};

static const tool_cmd t_cmd = {
    .name = "t",
    .prefix = "nostall t",
    .usage = "usage: nostall t ARG [options]\n",
    .positionals = "one ARG",
    .max_positionals = 1,
    .args = t_args,
    .nargs = sizeof t_args / sizeof t_args[0],
};

static const tool_cmd t_loader_cmd = {
    .name = "tl",
    .prefix = "nostall tl",
    .usage = "usage: nostall tl DATA [options]\n",
    .positionals = "DATA",
    .max_positionals = -1,
    .args = t_args,
    .nargs = sizeof t_args / sizeof t_args[0],
    .loader = 1,
    .defaults = t_defaults,
    .ndefaults = 1,
};

/* ---- capture one stream into a buffer ---- */
static char captured[1 << 16];

static int capture_begin(int fd, FILE **tmp)
{
    fflush(fd == 1 ? stdout : stderr);
    *tmp = tmpfile();
    int saved = dup(fd);
    if (!*tmp || saved < 0 || dup2(fileno(*tmp), fd) < 0) {
        fprintf(stderr, "capture: cannot redirect fd %d\n", fd);
        exit(1);
    }
    return saved;
}

static void capture_end(int fd, int saved, FILE *tmp)
{
    fflush(fd == 1 ? stdout : stderr);
    dup2(saved, fd);
    close(saved);
    rewind(tmp);
    size_t n = fread(captured, 1, sizeof captured - 1, tmp);
    captured[n] = '\0';
    fclose(tmp);
}

static void defaults(t_opts *o)
{
    memset(o, 0, sizeof *o);
    o->n = 8;
    o->bytes = 512ULL << 20;
    o->frac = 0.25;
    o->name = "shard";
}

/* Parse the NULL-terminated words (argv[0] "t" added) with cmd; the result,
 * and what went to stderr in `captured`. */
static int parse_cmd(const tool_cmd *cmd, t_opts *o, nostall_config *cfg, char **argv_out,
                     const char *const *words)
{
    static char *argv[32];
    static char store[32][256];
    int argc = 0;
    argv[argc++] = (char *)"t";
    for (; *words && argc < 32; words++, argc++) {
        snprintf(store[argc], sizeof store[argc], "%s", *words);
        argv[argc] = store[argc];
    }
    FILE *tmp;
    int saved = capture_begin(2, &tmp);
    int rc = tool_args_parse(cmd, argc, argv, o, cfg);
    capture_end(2, saved, tmp);
    if (argv_out)
        for (int i = 0; i < argc; i++) argv_out[i] = argv[i];
    return rc;
}

#define PARSE(o, ...) parse_cmd(&t_cmd, (o), NULL, NULL, (const char *const[]){__VA_ARGS__, NULL})

/* A usage error whose message holds each of the needles. */
static void expect_error(int line, int rc, const char *n1, const char *n2)
{
    if (rc != TOOL_ARGS_ERROR || !strstr(captured, n1) || (n2 && !strstr(captured, n2))) {
        fprintf(stderr, "test_cli_args.c:%d: want an error naming '%s'%s%s, got rc %d: %s\n", line,
                n1, n2 ? " and " : "", n2 ? n2 : "", rc, captured);
        check_failures_++;
    }
    if (strncmp(captured, "nostall t", 9) != 0) { /* every message starts with the prefix */
        fprintf(stderr, "test_cli_args.c:%d: message lacks the prefix: %s\n", line, captured);
        check_failures_++;
    }
    if (strchr(captured, '\n') != captured + strlen(captured) - 1) {
        fprintf(stderr, "test_cli_args.c:%d: not one line: %s\n", line, captured);
        check_failures_++;
    }
}
#define ERR(rc, n1, n2) expect_error(__LINE__, (rc), (n1), (n2))

static void test_types(void)
{
    t_opts o;
    /* int with range, both spellings */
    defaults(&o);
    CHECK_EQ(PARSE(&o, "--count", "64"), 0);
    CHECK_EQ(o.n, 64);
    CHECK_EQ(PARSE(&o, "--count=1"), 0);
    CHECK_EQ(o.n, 1);
    ERR(PARSE(&o, "--count", "0"), "--count", "'0'");
    ERR(PARSE(&o, "--count", "65"), "1..64", "'65'");
    ERR(PARSE(&o, "--count=x"), "--count", "'x'");
    ERR(PARSE(&o, "--count", "3.5"), "--count", "'3.5'");
    ERR(PARSE(&o, "--count", ""), "--count", "''");
    CHECK_EQ(o.n, 1); /* unchanged by the refusals */
    /* u64: the whole range, no sign */
    CHECK_EQ(PARSE(&o, "--seed", "18446744073709551615"), 0);
    CHECK(o.seed == UINT64_MAX);
    ERR(PARSE(&o, "--seed", "18446744073709551616"), "--seed", "'18446744073709551616'");
    ERR(PARSE(&o, "--seed", "-1"), "--seed", "'-1'");
    /* size with suffixes (powers of 1024), a lower bound */
    CHECK_EQ(PARSE(&o, "--bytes", "10K"), 0);
    CHECK(o.bytes == 10240);
    CHECK_EQ(PARSE(&o, "--bytes=3m"), 0);
    CHECK(o.bytes == 3ULL << 20);
    CHECK_EQ(PARSE(&o, "--bytes", "2G"), 0);
    CHECK(o.bytes == 2ULL << 30);
    CHECK_EQ(PARSE(&o, "--bytes", "20000"), 0);
    CHECK(o.bytes == 20000);
    ERR(PARSE(&o, "--bytes", "1"), "--bytes", "'1'");
    ERR(PARSE(&o, "--bytes", "10Q"), "10K", "'10Q'");
    ERR(PARSE(&o, "--bytes", "-5K"), "--bytes", "'-5K'");
    ERR(PARSE(&o, "--bytes", "99999999999G"), "--bytes", "'99999999999G'");
    /* float: an open lower bound, a closed range */
    CHECK_EQ(PARSE(&o, "--rate", "0.001"), 0);
    CHECK(o.rate == 0.001);
    ERR(PARSE(&o, "--rate", "0"), "> 0", "'0'");
    ERR(PARSE(&o, "--rate", "nan"), "--rate", "'nan'");
    CHECK_EQ(PARSE(&o, "--frac", "0.5"), 0);
    CHECK(o.frac == 0.5);
    ERR(PARSE(&o, "--frac", "0.51"), "0..0.5", "'0.51'");
    ERR(PARSE(&o, "--frac", "1e"), "--frac", "'1e'");
    /* string, with a check */
    CHECK_EQ(PARSE(&o, "--name", "abc"), 0);
    CHECK(!strcmp(o.name, "abc"));
    ERR(PARSE(&o, "--name", "a.b"), "--name", "'a.b'");
    /* flag (bool): no value; '-' and '_' alike */
    CHECK_EQ(PARSE(&o, "--quiet_mode"), 0);
    CHECK_EQ(o.quiet, 1);
    ERR(PARSE(&o, "--quiet-mode=1"), "--quiet-mode", "'1'");
    /* enum by name, by alias */
    CHECK_EQ(PARSE(&o, "--format", "png"), 0);
    CHECK_EQ(o.fmt, 1);
    CHECK_EQ(PARSE(&o, "--format=jpg"), 0);
    CHECK_EQ(o.fmt, 0);
    CHECK_EQ(PARSE(&o, "--format", "png", "--format", "jpeg"), 0);
    CHECK_EQ(o.fmt, 0);
    ERR(PARSE(&o, "--format", "gif"), "must be jpeg or png", "'gif'");
    ERR(PARSE(&o, "--format", "jp"), "--format", "'jp'");
    /* a function takes the value */
    CHECK_EQ(PARSE(&o, "--call", "x", "--call=y"), 0);
    CHECK_EQ(o.calls, 2);
    CHECK(!strcmp(o.last_call, "y"));
    ERR(PARSE(&o, "--call", "bad"), "--call", "'bad'");
}

static void test_rules(void)
{
    t_opts o;
    char *argv[32];
    /* missing value, unknown flag, single dash */
    defaults(&o);
    ERR(PARSE(&o, "--count"), "--count", "needs a value");
    ERR(PARSE(&o, "--no-such", "3"), "'--no-such'", "nostall t --help");
    ERR(PARSE(&o, "--no-such=3"), "'--no-such=3'", NULL);
    ERR(PARSE(&o, "-x"), "'-x'", NULL);
    /* a valued flag takes the next word whatever it is */
    CHECK_EQ(PARSE(&o, "--name", "--count"), 0);
    CHECK(!strcmp(o.name, "--count"));
    /* repeated: the last wins; a list takes every value, in order, up to its bound */
    CHECK_EQ(PARSE(&o, "--count", "3", "--count", "5"), 0);
    CHECK_EQ(o.n, 5);
    CHECK_EQ(PARSE(&o, "--item", "a", "--item=b", "--item", "c"), 0);
    CHECK_EQ(o.items.n, 3);
    CHECK(o.items.n == 3 && !strcmp(o.items.v[0], "a") && !strcmp(o.items.v[2], "c"));
    o.items.n = 0;
    ERR(PARSE(&o, "--item", "a", "--item", "b", "--item", "c", "--item", "d"), "--item", "'d'");
    /* positionals: moved to argv[1..n] in order; "-" is one; "--" ends the flags */
    defaults(&o);
    int n = parse_cmd(&t_cmd, &o, NULL, argv, (const char *const[]){"--count", "2", "-", NULL});
    CHECK_EQ(n, 1);
    CHECK(n == 1 && !strcmp(argv[1], "-"));
    n = parse_cmd(&t_cmd, &o, NULL, argv, (const char *const[]){"--", "--count", NULL});
    CHECK_EQ(n, 1);
    CHECK(n == 1 && !strcmp(argv[1], "--count"));
    CHECK_EQ(o.n, 2);
    ERR(PARSE(&o, "a", "b"), "'b'", "one ARG");
    n = parse_cmd(&t_loader_cmd, &o, NULL, argv,
                  (const char *const[]){"a", "--count", "3", "b", "c", NULL});
    CHECK_EQ(n, 3);
    CHECK(n == 3 && !strcmp(argv[1], "a") && !strcmp(argv[2], "b") && !strcmp(argv[3], "c"));
    /* -h / --help: the help on stdout, the parse ends there */
    FILE *tmp;
    int saved = capture_begin(1, &tmp);
    int rc = PARSE(&o, "--count", "4", "-h", "--bogus");
    capture_end(1, saved, tmp);
    CHECK_EQ(rc, TOOL_ARGS_HELP);
    CHECK_EQ(tool_args_status(rc), 0);
    CHECK_EQ(tool_args_status(TOOL_ARGS_ERROR), 2);
    CHECK(strstr(captured, "usage: nostall t ARG") != NULL);
}

static void test_loader(void)
{
    t_opts o;
    nostall_config *cfg = NULL;
    char buf[256];
    uint64_t u = 0;
    CHECK_OK(nostall_config_create(&cfg));
    if (!cfg) return;
    defaults(&o);
    /* the command's loader defaults are set before the arguments */
    CHECK_EQ(parse_cmd(&t_loader_cmd, &o, cfg, NULL, (const char *const[]){"d", NULL}), 1);
    nostall_config_get_uint(cfg, NOSTALL_OPT_EPOCHS, &u);
    CHECK_EQ(u, 1);
    /* every loader option is a flag: both spellings, '-' or '_' */
    CHECK_EQ(parse_cmd(&t_loader_cmd, &o, cfg, NULL,
                       (const char *const[]){"--batch-size", "7", "--echo_factor=2.5", "--mode",
                                             "eval", "--epochs", "3", NULL}),
             0);
    CHECK_OK(nostall_config_get(cfg, "batch_size", buf, sizeof buf));
    CHECK(!strcmp(buf, "7"));
    CHECK_OK(nostall_config_get(cfg, "echo_factor", buf, sizeof buf));
    CHECK(atof(buf) == 2.5);
    CHECK_OK(nostall_config_get(cfg, "mode", buf, sizeof buf));
    CHECK(!strcmp(buf, "eval"));
    nostall_config_get_uint(cfg, NOSTALL_OPT_EPOCHS, &u);
    CHECK_EQ(u, 3);
    /* a bare boolean is 1; a boolean word after it is its value; another flag is not */
    CHECK_EQ(parse_cmd(&t_loader_cmd, &o, cfg, NULL,
                       (const char *const[]){"--shuffle", "no", "d", NULL}),
             1);
    CHECK_OK(nostall_config_get(cfg, "shuffle", buf, sizeof buf));
    CHECK(!strcmp(buf, "0"));
    CHECK_EQ(parse_cmd(&t_loader_cmd, &o, cfg, NULL,
                       (const char *const[]){"--shuffle", "--count", "2", NULL}),
             0);
    CHECK_OK(nostall_config_get(cfg, "shuffle", buf, sizeof buf));
    CHECK(!strcmp(buf, "1"));
    CHECK_EQ(parse_cmd(&t_loader_cmd, &o, cfg, NULL, (const char *const[]){"--shuffle", "0", NULL}),
             0);
    CHECK_EQ(parse_cmd(&t_loader_cmd, &o, cfg, NULL, (const char *const[]){"--shuffle", "d", NULL}),
             1); /* "d" is no boolean: a positional */
    CHECK_OK(nostall_config_get(cfg, "shuffle", buf, sizeof buf));
    CHECK(!strcmp(buf, "1"));
    /* the library's own errors name the option and the value; the config is unchanged */
    CHECK_EQ(parse_cmd(&t_loader_cmd, &o, cfg, NULL,
                       (const char *const[]){"--batch-size", "0", NULL}),
             TOOL_ARGS_ERROR);
    CHECK(strstr(captured, "nostall tl: ") == captured && strstr(captured, "'batch_size': 0"));
    CHECK_OK(nostall_config_get(cfg, "batch_size", buf, sizeof buf));
    CHECK(!strcmp(buf, "7"));
    CHECK_EQ(parse_cmd(&t_loader_cmd, &o, cfg, NULL, (const char *const[]){"--threads", NULL}),
             TOOL_ARGS_ERROR);
    CHECK(strstr(captured, "--threads needs a value") != NULL);
    /* the command's own flag shadows the loader option of its name */
    CHECK_EQ(parse_cmd(&t_loader_cmd, &o, cfg, NULL, (const char *const[]){"--mix", "m", NULL}), 0);
    CHECK(!strcmp(o.name, "m"));
    CHECK_OK(nostall_config_get(cfg, "mix", buf, sizeof buf));
    CHECK(!strcmp(buf, ""));
    /* a command without the loader does not take its options */
    ERR(PARSE(&o, "--batch-size", "7"), "'--batch-size'", NULL);
    nostall_config_free(cfg);
}

static void test_help(void)
{
    t_opts o;
    FILE *tmp;
    defaults(&o);
    int saved = capture_begin(1, &tmp);
    tool_args_help(&t_loader_cmd, &o, stdout);
    capture_end(1, saved, tmp);
    /* wrapped: no line wider than 80 columns unless one word is */
    for (char *line = captured, *end; *line; line = end + 1) {
        end = strchr(line, '\n');
        if (!end) break;
        int width = (int)(end - line);
        if (width > 80) {
            const char *sp = memchr(line + 22, ' ', (size_t)(width - 22));
            CHECK(sp == NULL); /* only an unbreakable word may pass the margin */
        }
    }
    /* unwrapped for the checks below: a continuation line's indent is one space */
    char *w = captured;
    for (const char *r = captured; *r;) {
        if (r[0] == '\n' && !strncmp(r + 1, "                     ", 21)) {
            *w++ = ' ';
            r += 22;
        } else {
            *w++ = *r++;
        }
    }
    *w = '\0';
    /* every own flag, with its bounds and the default held by the options */
    static const char *const want[] = {
        "usage: nostall tl DATA [options]",
        "  --count N ",
        "how many (1..64; default 8)",
        "seed (0..2^64-1; default 0)",
        "(bytes with K, M or G, at least 10K; default 512M)",
        "a rate (> 0)\n",
        "a fraction (0..0.5; default 0.25)",
        "a name (default 'shard')",
        "  --quiet-mode ",
        "image format (jpeg|png; default jpeg)",
        "an item (repeatable, at most 3)",
        "a function's value (default: its own words)",
        "  -h, --help ",
        /* the loader's options, from the library's table, with this command's defaults */
        "loader options",
        "  --batch-size ",
        "(uint in [1, 65536]; default 64)",
        "(uint in [0, 1000000000]; default 1)",
        "(one of train|eval; default train)",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(captured, want[i])) {
            fprintf(stderr, "help lacks '%s':\n%s\n", want[i], captured);
            check_failures_++;
        }
    /* every loader option but the one shadowed ("mix" is the command's own) */
    int n = nostall_option_count(), listed = 0;
    for (int i = 0; i < n; i++) {
        nostall_option_info info;
        char flag[96];
        nostall_option_info_get(i, &info);
        snprintf(flag, sizeof flag, "  --%s ", info.name);
        for (char *p = flag + 4; *p; p++)
            if (*p == '_') *p = '-';
        listed += strstr(captured, flag) != NULL;
    }
    CHECK_EQ(listed, n); /* "--mix " is listed once, as the command's own */
    CHECK(strstr(captured, "own mix") != NULL);
    CHECK(strstr(strstr(captured, "loader options"), "  --mix ") == NULL);
    /* without the loader: no loader options */
    saved = capture_begin(1, &tmp);
    tool_args_help(&t_cmd, NULL, stdout);
    capture_end(1, saved, tmp);
    CHECK(strstr(captured, "--count") != NULL);
    CHECK(strstr(captured, "loader options") == NULL);
    CHECK(strstr(captured, "default 8") == NULL); /* no options struct: no defaults */
}

int main(void)
{
    test_types();
    test_rules();
    test_loader();
    test_help();
    TEST_EXIT();
}
