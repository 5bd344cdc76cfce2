/*
 * error.c — the status table's strings and the thread-local detail message.
 *
 * Every thread has its own message buffer (C11 _Thread_local), so workers and
 * the consumer never share one; messages that must cross threads (a worker's
 * bad-item error reported by the consumer's next call) are copied by the
 * pipeline and re-set with nst_error_set().
 */
#include <stdio.h>
#include <string.h>

#include "common/error.h"

static _Thread_local char tls_msg[NST_ERROR_MAX];

const char *nostall_strerror(int status)
{
    switch (status) {
#define NST_CASE_(name, value, msg)                                                                \
    case value: return msg;
        NOSTALL_STATUS_TABLE(NST_CASE_)
#undef NST_CASE_
    }
    return "unknown status";
}

const char *nostall_status_name(int status)
{
    switch (status) {
#define NST_CASE_(name, value, msg)                                                                \
    case value: return #name;
        NOSTALL_STATUS_TABLE(NST_CASE_)
#undef NST_CASE_
    }
    return "UNKNOWN";
}

const char *nostall_last_error(void) { return tls_msg; }

const char *nostall_version_string(void) { return "0.1.0"; }

int nst_verror(int status, const char *fmt, va_list ap)
{
    vsnprintf(tls_msg, sizeof tls_msg, fmt, ap);
    return status;
}

int nst_error(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    nst_verror(status, fmt, ap);
    va_end(ap);
    return status;
}

int nst_error_set(int status, const char *msg)
{
    snprintf(tls_msg, sizeof tls_msg, "%s", msg ? msg : "");
    return status;
}

void nst_error_clear(void) { tls_msg[0] = '\0'; }

int nostall_error_set(int status, const char *message) { return nst_error_set(status, message); }
