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
#include <stdint.h>

#include "nostall.h"

/* A whole regular file into *buf (grown with realloc; *cap its size, both
 * start as NULL/0 and belong to the caller). Returns the length, or -1 with
 * errno set (EINVAL: not a regular file; EFBIG: longer than max; ENOMEM;
 * EIO). */
long long tool_read_file(const char *path, uint8_t **buf, size_t *cap, size_t max);

/* `nostall transcode` of one JPEG (transcode.c): in[0..len) rewritten
 * losslessly into a malloc'd *out (free() it), with a restart marker every
 * `rows` MCU rows (rows > 0) or every `per` MCUs (lowered to a divisor of
 * the MCUs per row) and optimized Huffman tables. 0; -1 with msg filled
 * for damaged or unsupported input; 1 with msg filled for a file that a
 * baseline copy would decode to other pixels (kept as it is). */
int tool_transcode_jpeg(const uint8_t *in, size_t len, int rows, int per, unsigned char **out,
                        unsigned long *out_len, char *msg, size_t msglen);

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
