/* util.h — small helpers shared by the CLI's subcommands. */
#ifndef NOSTALL_TOOLS_UTIL_H
#define NOSTALL_TOOLS_UTIL_H

/* Monotonic clock in seconds. */
double tool_now_s(void);
/* mkdir -p. Returns 0 or -1 with errno set (ENOTDIR if path is a file). */
int tool_mkdir_p(const char *path);
/* 1 if the directory has any entry besides . and .., 0 if empty, -1 on error. */
int tool_dir_nonempty(const char *path);
/* Interrupts. After tool_catch_interrupts(), the first SIGINT or SIGTERM
 * only asks the command to stop (tool_interrupted() returns its number, 0
 * before one came): it ends at the next batch and reports what it did. A
 * second one ends the process as usual. A SIGINT the shell ignored (a
 * background job) stays ignored. */
void tool_catch_interrupts(void);
int tool_interrupted(void);
/* Sleep S seconds (nothing if S <= 0), ending early once interrupted. */
void tool_sleep_s(double s);

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "nostall.h"

/* A whole regular file into *buf (grown with realloc; *cap its size, both
 * start as NULL/0 and belong to the caller). Returns the length, or -1 with
 * errno set (EINVAL: not a regular file; EFBIG: longer than max; ENOMEM;
 * EIO). */
long long tool_read_file(const char *path, uint8_t **buf, size_t *cap, size_t max);

/* Untrusted text in the CLI's outputs. File names (and the messages that
 * name them) may hold any byte but '/' and NUL: control characters, ESC
 * sequences, bytes that are not UTF-8. Nothing of them reaches a terminal,
 * a JSON parser or a browser raw:
 *
 * tool_text: for terminals and text reports. Valid UTF-8 is written as it
 *   is, except: '\' as "\\"; newline, tab and carriage return as "\n",
 *   "\t", "\r"; other C0 controls and DEL as "\xHH"; C1 controls
 *   (U+0080..U+009F) and the line/paragraph separators and bidirectional
 *   overrides (U+2028..U+2029, U+202A..U+202E, U+2066..U+2069) as
 *   "\uHHHH"; each byte that is not part of a valid UTF-8 sequence as
 *   "\xHH". So "\xHH" always stands for one byte of the name, "\uHHHH"
 *   for one character, and the output is valid UTF-8 without controls.
 * tool_json_string: a JSON string literal (quotes included) that strict
 *   parsers accept: valid UTF-8 as it is, '"' and '\' escaped, every
 *   control character (C0, DEL, C1) and U+2028..U+202E, U+2066..U+2069 as
 *   "\uHHHH" (or \n \t \r \b \f); each byte that is not part of a valid
 *   UTF-8 sequence as "\ufffd" (U+FFFD, the replacement character). Returns
 *   1 when a byte was replaced (the string does not give the bytes back),
 *   else 0.
 * tool_json_member: `"key": "..."` as above and, only when a byte was
 *   replaced, a second member `"key_hex": "..."` with every byte of the
 *   value as two lowercase hex digits, so the exact name can be recovered
 *   (Python: bytes.fromhex(j["path_hex"])).
 * tool_html_text: for HTML text and attribute values: & < > " ' as
 *   entities, the rest as tool_text writes it. */
void tool_text(FILE *f, const char *s);
/* printf the format, write the result through tool_text, then a newline:
 * one line whatever the arguments hold (messages naming files). */
void tool_line(FILE *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int tool_json_string(FILE *f, const char *s);
void tool_json_member(FILE *f, const char *key, const char *s);
void tool_html_text(FILE *f, const char *s);
/* tool_text into buf (cap >= 1 bytes, NUL-terminated), cut at a character
 * boundary when it does not fit: for columns of fixed width. */
void tool_text_buf(char *buf, size_t cap, const char *s);

#endif
