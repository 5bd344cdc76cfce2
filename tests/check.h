/*
 * check.h — the minimal test harness: each test is a standalone program that
 * exits 0 (pass), 1 (fail) or 77 (skip), run by ctest under a timeout.
 *
 *   CHECK(cond)             fail the test (continue running) if !cond
 *   CHECK_EQ(a, b)          integers, prints both values
 *   CHECK_OK(expr)          expr must return >= 0 (prints nostall_last_error())
 *   CHECK_RC(expr, rc)      expr must return exactly rc
 *   TEST_EXIT()             return from main with the verdict
 *   test_tmpdir(name)       a fresh empty directory for this test
 */
#ifndef NOSTALL_TEST_CHECK_H
#define NOSTALL_TEST_CHECK_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nostall.h"

static int check_failures_;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
            check_failures_++;                                                                     \
        }                                                                                          \
    } while (0)

#define CHECK_EQ(a, b)                                                                             \
    do {                                                                                           \
        long long a_ = (long long)(a), b_ = (long long)(b);                                        \
        if (a_ != b_) {                                                                            \
            fprintf(stderr, "%s:%d: CHECK_EQ failed: %s == %s (%lld vs %lld)\n", __FILE__,         \
                    __LINE__, #a, #b, a_, b_);                                                     \
            check_failures_++;                                                                     \
        }                                                                                          \
    } while (0)

#define CHECK_OK(expr)                                                                             \
    do {                                                                                           \
        int rc_ = (expr);                                                                          \
        if (rc_ < 0) {                                                                             \
            fprintf(stderr, "%s:%d: %s returned %d (%s): %s\n", __FILE__, __LINE__, #expr, rc_,    \
                    nostall_status_name(rc_), nostall_last_error());                               \
            check_failures_++;                                                                     \
        }                                                                                          \
    } while (0)

#define CHECK_RC(expr, want)                                                                       \
    do {                                                                                           \
        int rc_ = (expr), want_ = (want);                                                          \
        if (rc_ != want_) {                                                                        \
            fprintf(stderr, "%s:%d: %s returned %d (%s), want %d (%s): %s\n", __FILE__, __LINE__,  \
                    #expr, rc_, nostall_status_name(rc_), want_, nostall_status_name(want_),       \
                    nostall_last_error());                                                         \
            check_failures_++;                                                                     \
        }                                                                                          \
    } while (0)

#define TEST_EXIT()                                                                                \
    do {                                                                                           \
        if (check_failures_) {                                                                     \
            fprintf(stderr, "FAIL: %d check(s) failed\n", check_failures_);                        \
            return 1;                                                                              \
        }                                                                                          \
        printf("PASS\n");                                                                          \
        return 0;                                                                                  \
    } while (0)

/* A fresh directory under $NOSTALL_TEST_TMP (or /tmp) for this test. The
 * returned string is static. */
static inline const char *test_tmpdir(const char *name)
{
    static char dir[4096];
    const char *base = getenv("NOSTALL_TEST_TMP");
    char cmd[8300];
    if (!base || !*base) base = "/tmp/nostall-test";
    snprintf(dir, sizeof dir, "%s/%s.%d", base, name, (int)getpid());
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "cannot create %s\n", dir);
        exit(1);
    }
    return dir;
}

#endif
