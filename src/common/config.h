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
    uint64_t u;
    double d;
    double d3[3];
    char s[NOSTALL_STRING_MAX];
} nst_optval;

struct nostall_config {
    nst_optval v[NOSTALL_OPT_COUNT_];
    nostall_peer_cache peer; /* all NULL: none */
    int has_peer;
};

#endif
