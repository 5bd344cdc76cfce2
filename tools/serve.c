/*
 * serve.c — `nostall serve SOURCE [loader options] --listen HOST:PORT
 * --secret-file F`: a prep server (include/nostall.h, nostall_server_*;
 * docs/serve.md). Prints one line "listening on HOST:PORT" on stdout once
 * clients may connect (tests wait for it), then serves until SIGTERM or
 * SIGINT. --progress prints "served N" on stdout as items go out (every
 * change, checked every 50 ms). Never prints the secret. Public headers
 * only.
 */
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "args.h"
#include "commands.h"
#include "nostall.h"
#include "util.h"

typedef struct serve_opts {
    const char *listen, *secret_file;
    int progress;
} serve_opts;

static const tool_arg serve_args[] = {
    {"listen", TOOL_ARG_STRING, offsetof(serve_opts, listen), 0, 0, NULL, "HOST:PORT",
     "where to listen (port 0: a free one, printed); loopback unless you say otherwise", NULL, 0,
     NULL},
    {"secret-file", TOOL_ARG_STRING, offsetof(serve_opts, secret_file), 0, 0, NULL, "FILE",
     "the shared secret clients must prove (mode 0600; never sent nor printed)", NULL, 0, ""},
    {"progress", TOOL_ARG_FLAG, offsetof(serve_opts, progress), 0, 0, NULL, NULL,
     "print 'served N' lines on stdout as items are sent", NULL, 0, NULL},
};

static const tool_cmd serve_cmd = {
    .name = "serve",
    .prefix = "nostall serve",
    .usage = "usage: nostall serve SOURCE [loader options] --secret-file FILE [--listen "
             "HOST:PORT]\n"
             "\n"
             "Prepare items for loaders on other hosts (their prep_servers option): the\n"
             "loader options that change an item's bytes (task, crop, seed, ...) must be\n"
             "the clients' (a client whose differ is refused, naming the option); --threads\n"
             "sets this server's workers. SIGTERM or SIGINT stops it. docs/serve.md.\n",
    .positionals = "one SOURCE",
    .max_positionals = 1,
    .args = serve_args,
    .nargs = sizeof serve_args / sizeof serve_args[0],
    .loader = 1,
};

static nostall_server *g_srv;

static void on_signal(int sig)
{
    (void)sig;
    if (g_srv) nostall_server_stop(g_srv);
}

static void *progress_main(void *arg)
{
    nostall_server *srv = arg;
    uint64_t last = 0;
    struct timespec ts = {0, 50000000};
    for (;;) {
        uint64_t n = nostall_server_served(srv);
        if (n != last) {
            printf("served %" PRIu64 "\n", n);
            fflush(stdout);
            last = n;
        }
        nanosleep(&ts, NULL);
    }
    return NULL;
}

int cmd_serve(int argc, char **argv)
{
    serve_opts o = {.listen = "127.0.0.1:0"};
    nostall_config *cfg = NULL;
    if (nostall_config_create(&cfg) < 0) return 1;
    int n = tool_args_parse(&serve_cmd, argc, argv, &o, cfg);
    if (n < 0) {
        nostall_config_free(cfg);
        return tool_args_status(n);
    }
    if (n != 1 || !o.secret_file) {
        fprintf(stderr, "nostall serve: %s\n",
                n != 1 ? "missing SOURCE" : "--secret-file is required");
        nostall_config_free(cfg);
        return 2;
    }
    nostall_server *srv = NULL;
    int rc = nostall_server_create(&srv, argv[1], cfg, o.listen, o.secret_file);
    nostall_config_free(cfg);
    if (rc < 0) {
        tool_line(stderr, "nostall serve: %s", nostall_last_error());
        return 1;
    }
    g_srv = srv;
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    char host[256];
    snprintf(host, sizeof host, "%s", o.listen);
    char *colon = strrchr(host, ':');
    if (colon) *colon = '\0';
    printf("listening on %s:%d\n", host, nostall_server_port(srv));
    fflush(stdout);
    pthread_t th;
    if (o.progress) pthread_create(&th, NULL, progress_main, srv);
    nostall_server_run(srv);
    g_srv = NULL;
    nostall_server_free(srv);
    return 0;
}
