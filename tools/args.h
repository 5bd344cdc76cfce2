/*
 * args.h — the CLI's one argument parser, driven by tables.
 *
 * A subcommand describes its own flags in a table of tool_arg (name, type,
 * bounds, help, and where the value lands: an offset into the command's
 * options struct) and, when it builds a loader, asks for the library's
 * option table too (nostall.h: nostall_option_find/_info_get): every
 * loader option is then a flag of the same name (--batch-size for
 * batch_size) set on a nostall_config, without being listed again.
 * tool_args_parse() reads argv once against both; tool_args_help() writes
 * the --help text from the same tables. May touch: the options struct and
 * the config it is given, argv (positionals are moved to the front),
 * stdout (help) and stderr (one-line usage errors). No global state.
 *
 * Rules, the same for every subcommand:
 *   --name VALUE and --name=VALUE both work; '-' and '_' in a name are the
 *     same (--batch-size, --batch_size). "--" ends the flags; "-" alone is a
 *     positional argument; -h and --help print the help.
 *   A flag given twice: the last value wins, except LIST flags, which take
 *     every value in order (--mix A:1 --mix B:1); a CALL flag's function
 *     sees every value and decides (gen's --rates: the last list wins).
 *   A single-dash word other than "-" and "-h" is an unknown option.
 *   Errors name the flag and the value: "PREFIX: --flag must be an integer
 *     in 1..64 (got '0')", "PREFIX: --flag needs a value", "PREFIX: unknown
 *     option '--x' (see nostall CMD --help)", "PREFIX: --flag takes no value".
 *   A bare boolean loader option means 1 (--cache-transcode); a following
 *     0/1/yes/no/... is taken as its value.
 */
#ifndef NOSTALL_TOOLS_ARGS_H
#define NOSTALL_TOOLS_ARGS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "nostall.h"

typedef enum tool_arg_type {
    TOOL_ARG_FLAG,   /* no value: the int at `at` becomes 1                         */
    TOOL_ARG_INT,    /* long in [lo, hi]                                             */
    TOOL_ARG_U64,    /* uint64_t in [lo, 2^64 - 1], digits only (seeds, counts)      */
    TOOL_ARG_SIZE,   /* uint64_t bytes: digits with K, M or G (binary), at least lo */
    TOOL_ARG_DOUBLE, /* double in [lo, hi] (lo excluded with TOOL_ARG_OPEN_LO)       */
    TOOL_ARG_STRING, /* const char *: the argument itself                            */
    TOOL_ARG_ENUM,   /* int: index of the choice in `choices`                        */
    TOOL_ARG_LIST,   /* tool_list: every value, in order, at most hi of them        */
    TOOL_ARG_CALL    /* `fn` takes each value given                                  */
} tool_arg_type;

#define TOOL_ARG_OPEN_LO 1    /* flags: DOUBLE's lower bound is excluded */
#define TOOL_ARG_NO_DEFAULT 2 /* flags: --help shows no default (given in help) */
#define TOOL_LIST_MAX 64

typedef struct tool_list {
    int n;
    const char *v[TOOL_LIST_MAX];
} tool_list;

struct tool_arg;
/* CALL: take `value` into `opts`; or, for the other types, a check run after
 * the value landed. 0, or -1 after printing "PREFIX: why" on stderr. */
typedef int (*tool_arg_fn)(const struct tool_arg *a, const char *prefix, const char *value,
                           void *opts);

typedef struct tool_arg {
    const char *name;    /* "step-ms" (no dashes in front)                          */
    tool_arg_type type;  /*                                                         */
    size_t at;           /* offsetof(the command's options struct, the field)       */
    double lo, hi;       /* INT, DOUBLE: bounds; U64, SIZE: lo; LIST: most values   */
    const char *choices; /* ENUM: "jpeg,jpg|png": '|' between choices, ',' aliases  */
    const char *meta;    /* the value's name in --help ("MS"); NULL for FLAG        */
    const char *help;    /* one sentence for --help (wrapped when printed)          */
    tool_arg_fn fn;      /* CALL: the parser; others: an extra check, or NULL       */
    int flags;           /* TOOL_ARG_OPEN_LO                                        */
    const char *def;     /* --help's default: NULL: the field's value on entry; "": */
                         /* none shown; else this text ("the online CPUs")          */
} tool_arg;

/* A loader option whose default differs for this command (bench: epochs 1). */
typedef struct tool_default {
    const char *name, *value;
} tool_default;

typedef struct tool_cmd {
    const char *name;             /* "bench": "see nostall bench --help"                    */
    const char *prefix;           /* "nostall bench" or "gen": the start of every message */
    const char *usage;            /* the help's opening lines, up to the options          */
    const char *positionals;      /* "DATA", "SRC DST": in the extra-argument message     */
    int max_positionals;          /* more is an error; -1: any number                     */
    const tool_arg *args;         /* the command's own flags                              */
    int nargs;                    /*                                                      */
    int loader;                   /* 1: every loader option is a flag too                 */
    const tool_default *defaults; /* loader options set before parsing (or NULL)     */
    int ndefaults;                /*                                                      */
    const char *footer;           /* printed after the flags (or NULL)                    */
} tool_cmd;

#define TOOL_ARGS_HELP (-2)  /* tool_args_parse printed the help: exit 0  */
#define TOOL_ARGS_ERROR (-1) /* it printed a usage error: exit 2          */

/* Parse argv[1..argc) (argv[0] is the subcommand) into `opts` (which holds
 * the defaults on entry) and, for a loader command, into `cfg` (created by
 * the caller; the command's loader defaults are set on it first). Returns
 * the number of positional arguments, now at argv[1..n] in their order; or
 * TOOL_ARGS_HELP after writing the help on stdout; or TOOL_ARGS_ERROR after
 * a one-line message on stderr. */
int tool_args_parse(const tool_cmd *cmd, int argc, char **argv, void *opts, nostall_config *cfg);

/* The help of `cmd` with the defaults held by `opts` (NULL: none shown). */
void tool_args_help(const tool_cmd *cmd, const void *opts, FILE *f);

/* The exit status for a tool_args_parse() result below 0. */
static inline int tool_args_status(int rc) { return rc == TOOL_ARGS_HELP ? 0 : 2; }

/* The parsers of the value types, for CALL flags and lists of values:
 * 0, or -1 after "PREFIX: --NAME must be ... (got 'VALUE')" on stderr. */
int tool_parse_int(const char *prefix, const char *name, const char *value, double lo, double hi,
                   long *out);
int tool_parse_size(const char *prefix, const char *name, const char *value, uint64_t lo,
                    uint64_t *out);

#endif
