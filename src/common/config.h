/*
 * config.h — the configuration object's layout, for the library's own
 * modules. The public API (nostall.h) sees it only as an opaque handle.
 * Values are indexed by nostall_option; UINT/SIZE/BOOL/ENUM use .u, DOUBLE
 * .d, DOUBLE3 .d3, STRING .s.
 */
#ifndef NST_COMMON_CONFIG_H
#define NST_COMMON_CONFIG_H

#include <stdint.h>

#include "nostall.h"

typedef union nst_optval {
    uint64_t u; /* PATH: its slot in nostall_config.paths           */
    double d;
    double d3[3];
    char s[NOSTALL_STRING_MAX];
} nst_optval;

/* PATH options keep their text here (a config is copied by value). */
#define NST_PATH_OPTIONS 6

struct nostall_op; /* nostall_op.h */

struct nostall_config {
    nst_optval v[NOSTALL_OPT_COUNT_];
    char paths[NST_PATH_OPTIONS][NOSTALL_PATH_MAX];
    nostall_peer_cache peer; /* all NULL: none */
    int has_peer;
    const struct nostall_op *op; /* nostall_config_set_op's; NULL: none */
    void *op_ctx;                /* handed to the op's create           */
};

/* The text of a PATH option ("" when unset). */
const char *nst_config_path(const struct nostall_config *cfg, nostall_option id);

#endif
