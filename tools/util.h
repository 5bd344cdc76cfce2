/* util.h — small helpers shared by the CLI's subcommands. */
#ifndef NOSTALL_TOOLS_UTIL_H
#define NOSTALL_TOOLS_UTIL_H

/* Monotonic clock in seconds. */
double tool_now_s(void);
/* mkdir -p. Returns 0 or -1 with errno set (ENOTDIR if path is a file). */
int tool_mkdir_p(const char *path);
/* 1 if the directory has any entry besides . and .., 0 if empty, -1 on error. */
int tool_dir_nonempty(const char *path);

#endif
