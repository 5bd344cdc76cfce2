/*
 * nginx_helper.h — start and stop a throwaway nginx on loopback from a C
 * test, through tests/lib_nginx.sh (the same script benchmarks run).
 *
 *   int port;
 *   int rc = nginx_start(dir, root, "200k", &port);   // limit_rate or NULL
 *   if (rc == 77) skip;  else if (rc) fail;
 *   ...
 *   nginx_stop(dir);
 *
 * dir holds nginx's config, pid file and logs (access.log: one line per
 * request, "$connection $connection_requests $status $uri $body_bytes_sent").
 * Extra server-block directives go in dir/conf.d/NAME.conf before start.
 * Every nginx started is also stopped at exit (atexit), and a watchdog of
 * the script stops it if this process dies without running atexit handlers.
 * The script is found next to this header (its absolute path from
 * __FILE__), or in $NOSTALL_SOURCE_DIR/tests.
 */
#ifndef NOSTALL_TEST_NGINX_HELPER_H
#define NOSTALL_TEST_NGINX_HELPER_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NGINX_HELPER_MAX 8

static char nginx_dirs_[NGINX_HELPER_MAX][1024];
static int nginx_atexit_set_;

static const char *nginx_script(void)
{
    static char path[4096];
    const char *src = getenv("NOSTALL_SOURCE_DIR");
    if (src && *src) {
        snprintf(path, sizeof path, "%s/tests/lib_nginx.sh", src);
    } else {
        const char *f = __FILE__;
        const char *slash = strrchr(f, '/');
        if (slash)
            snprintf(path, sizeof path, "%.*s/lib_nginx.sh", (int)(slash - f), f);
        else
            snprintf(path, sizeof path, "tests/lib_nginx.sh");
    }
    return path;
}

static void nginx_stop(const char *dir)
{
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "bash '%s' stop '%s'", nginx_script(), dir);
    if (system(cmd) != 0) fprintf(stderr, "nginx_helper: '%s' failed\n", cmd);
    for (int i = 0; i < NGINX_HELPER_MAX; i++)
        if (strcmp(nginx_dirs_[i], dir) == 0) nginx_dirs_[i][0] = '\0';
}

static void nginx_stop_all_(void)
{
    for (int i = 0; i < NGINX_HELPER_MAX; i++)
        if (nginx_dirs_[i][0]) {
            char d[1024];
            snprintf(d, sizeof d, "%s", nginx_dirs_[i]);
            nginx_stop(d);
        }
}

/* 0: started, *port set; 77: nginx is not installed; 1: failure (printed). */
static int nginx_start(const char *dir, const char *root, const char *limit_rate, int *port)
{
    char cmd[8400], line[64];
    if (access(nginx_script(), R_OK) != 0) {
        fprintf(stderr, "nginx_helper: %s not found (set NOSTALL_SOURCE_DIR)\n", nginx_script());
        return 1;
    }
    snprintf(cmd, sizeof cmd, "NGINX_OWNER_PID=%d bash '%s' start '%s' '%s' %s", (int)getpid(),
             nginx_script(), dir, root, limit_rate ? limit_rate : "");
    FILE *p = popen(cmd, "r");
    if (!p) return 1;
    int got = fgets(line, sizeof line, p) != NULL;
    int st = pclose(p);
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 1;
    if (rc == 77) return 77;
    if (rc != 0 || !got || (*port = atoi(line)) <= 0) {
        fprintf(stderr, "nginx_helper: '%s' failed (exit %d)\n", cmd, rc);
        return 1;
    }
    if (!nginx_atexit_set_) {
        atexit(nginx_stop_all_);
        nginx_atexit_set_ = 1;
    }
    for (int i = 0; i < NGINX_HELPER_MAX; i++)
        if (!nginx_dirs_[i][0]) {
            snprintf(nginx_dirs_[i], sizeof nginx_dirs_[i], "%s", dir);
            break;
        }
    return 0;
}

#endif
