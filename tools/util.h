/* util.h — small helpers shared by the CLI's subcommands. */
#ifndef NOSTALL_TOOLS_UTIL_H
#define NOSTALL_TOOLS_UTIL_H

/* Monotonic clock in seconds. */
double tool_now_s(void);
/* mkdir -p. Returns 0 or -1 with errno set (ENOTDIR if path is a file). */
int tool_mkdir_p(const char *path);
/* 1 if the directory has any entry besides . and .., 0 if empty, -1 on error. */
int tool_dir_nonempty(const char *path);

#include <stddef.h>

#include "nostall.h"

/* Split a flag "--name=value" or "--name": the name, dashes turned into
 * underscores, into name[cap]; *value = the text after '=' or NULL. */
void tool_flag_name(const char *arg, char *name, size_t cap, const char **value);
/* If `name` is a loader option, take its value (`value`, else the next
 * argument — consumed by advancing *i — or 1 for a bare boolean flag) and
 * set it in cfg. Returns the option id; -1 if `name` is not a loader option
 * (nothing printed); -2 after printing "nostall CMD: why" on stderr. */
int tool_loader_option(nostall_config *cfg, const char *cmd, const char *name, const char *value,
                       int argc, char **argv, int *i);

#endif
