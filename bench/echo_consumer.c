/*
 * echo_consumer.c — where a training loop's time per batch goes with data
 * echoing: the loop of `nostall bench --step-ms` (next, a simulated step,
 * release), each call timed with clock_gettime. Per epoch: seconds, batches,
 * the time inside next (the data stall), the step's sleep beyond the step
 * (late wake-ups), the time inside release for echo batches (adaptive
 * echoing's, sequence bit 63) and fresh ones; at the end the consumer
 * thread's involuntary context switches (being preempted), and at each
 * epoch's end the scheduling policy of adaptive echoing's assembler thread
 * (`nostall-echo`: 3 SCHED_BATCH, 0 normal, -1 none). A tool for
 * bench/echo_adaptive.sh; touches nothing but the loader it creates.
 *   cc -O2 -std=c11 -Iinclude bench/echo_consumer.c -Lbuild -lnostall -o /tmp/echo_consumer
 *   LD_LIBRARY_PATH=build /tmp/echo_consumer DATA STEP_MS [option value]...
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nostall.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void sleep_s(double s)
{
    double end = now_s() + s;
    for (double left; (left = end - now_s()) > 0;) {
        struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

typedef struct acc {
    double t0, next, over, rel_echo, rel_fresh, rel_max;
    unsigned batches, echo, fresh;
} acc;

/* The policy of this process's thread named nostall-echo (field 41 of its
 * /proc stat), or -1. */
static int assembler_policy(void)
{
    int policy = -1;
    DIR *d = opendir("/proc/self/task");
    struct dirent *de;
    while (d && policy < 0 && (de = readdir(d)) != NULL) {
        char path[300], buf[1024] = "";
        if (de->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", de->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        int match = fgets(buf, sizeof buf, f) && strcmp(buf, "nostall-echo\n") == 0;
        fclose(f);
        snprintf(path, sizeof path, "/proc/self/task/%s/stat", de->d_name);
        if (!match || !(f = fopen(path, "r"))) continue;
        const char *p = fgets(buf, sizeof buf, f) ? strrchr(buf, ')') : NULL;
        fclose(f);
        for (int field = 0; p && field < 39; field++) p = strchr(p + 1, ' ');
        if (p) policy = atoi(p + 1);
    }
    if (d) closedir(d);
    return policy;
}

static void report(FILE *f, unsigned epoch, const acc *a, double t)
{
    fprintf(f,
            "{\"epoch\": %u, \"seconds\": %.6f, \"batches\": %u, \"next_s\": %.6f, "
            "\"sleep_over_s\": %.6f, \"release_echo_s\": %.6f, \"echo_batches\": %u, "
            "\"release_fresh_s\": %.6f, \"fresh_batches\": %u, \"release_max_s\": %.6f, "
            "\"assembler_policy\": %d}\n",
            epoch, t - a->t0, a->batches, a->next, a->over, a->rel_echo, a->echo, a->rel_fresh,
            a->fresh, a->rel_max, assembler_policy());
}

static long involuntary_switches(void)
{
    FILE *f = fopen("/proc/thread-self/status", "r");
    char line[256];
    long n = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "nonvoluntary_ctxt_switches:", 27) == 0) n = atol(line + 27);
    if (f) fclose(f);
    return n;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc % 2 == 0) {
        fprintf(stderr, "usage: echo_consumer DATA STEP_MS [option value]...\n");
        return 2;
    }
    const double step = atof(argv[2]) / 1000.0;
    nostall_config *cfg;
    nostall_loader *ld;
    if (nostall_config_create(&cfg) < 0) return 1;
    for (int i = 3; i + 1 < argc; i += 2)
        if (nostall_config_set(cfg, argv[i], argv[i + 1]) < 0) {
            fprintf(stderr, "echo_consumer: %s\n", nostall_last_error());
            return 1;
        }
    if (nostall_loader_create(&ld, argv[1], cfg) < 0) {
        fprintf(stderr, "echo_consumer: %s\n", nostall_last_error());
        return 1;
    }
    nostall_config_free(cfg);
    acc a = {.t0 = now_s()};
    unsigned epoch = 0;
    for (;;) {
        nostall_batch b;
        double t = now_s();
        int rc = nostall_loader_next(ld, &b);
        double t1 = now_s();
        if (rc == NOSTALL_DONE) break;
        if (rc == NOSTALL_EPOCH_END) {
            report(stdout, epoch++, &a, t1);
            memset(&a, 0, sizeof a);
            a.t0 = t1;
            continue;
        }
        if (rc < 0) {
            fprintf(stderr, "echo_consumer: %s\n", nostall_last_error());
            return 1;
        }
        a.next += t1 - t;
        sleep_s(step);
        double t2 = now_s();
        a.over += t2 - t1 - step;
        int echo = (b.sequence >> 63) & 1;
        if (nostall_loader_release(ld, &b) < 0) {
            fprintf(stderr, "echo_consumer: %s\n", nostall_last_error());
            return 1;
        }
        double r = now_s() - t2;
        *(echo ? &a.rel_echo : &a.rel_fresh) += r;
        *(echo ? &a.echo : &a.fresh) += 1;
        if (r > a.rel_max) a.rel_max = r;
        a.batches++;
    }
    printf("{\"involuntary_switches\": %ld}\n", involuntary_switches());
    nostall_loader_free(ld);
    return 0;
}
