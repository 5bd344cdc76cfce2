/*
 * error.h — internal error reporting: set this thread's detail message and
 * return a status in one expression.
 *
 *   return nst_error(NOSTALL_E_CORRUPT, "decode: %s: bad Huffman code", path);
 *
 * The message is thread-local (see nostall_last_error()); nothing here
 * allocates. Messages longer than NST_ERROR_MAX are truncated.
 */
#ifndef NST_COMMON_ERROR_H
#define NST_COMMON_ERROR_H

#include <stdarg.h>

#include "nostall.h"

#define NST_ERROR_MAX 1024

#if defined(__GNUC__)
#define NST_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define NST_PRINTF(f, a)
#endif

/* Format the thread-local message, return `status` unchanged. */
int nst_error(int status, const char *fmt, ...) NST_PRINTF(2, 3);
int nst_verror(int status, const char *fmt, va_list ap);
/* Set the thread-local message to `msg` verbatim (e.g. a message carried
 * from a worker thread to the consumer). */
int nst_error_set(int status, const char *msg);
/* Clear this thread's message (public entry points call this first). */
void nst_error_clear(void);

#endif
