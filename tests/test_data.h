/*
 * test_data.h — what the loader tests share: a generated dataset
 * (`nostall gen` through $NOSTALL_CLI; skip, exit 77, outside ctest) and a
 * config built from name/value pairs (any refused pair fails the test run).
 */
#ifndef NOSTALL_TEST_DATA_H
#define NOSTALL_TEST_DATA_H

#include <stdio.h>
#include <stdlib.h>

#include "nostall.h"

static void gen_dataset(const char *dir, int images, int classes)
{
    const char *cli = getenv("NOSTALL_CLI");
    char cmd[8192];
    if (!cli) {
        fprintf(stderr, "NOSTALL_CLI not set; run through ctest\n");
        exit(77);
    }
    snprintf(cmd, sizeof cmd,
             "'%s' gen '%s' --images %d --classes %d --width 80 --height 60 --quality 90 "
             "--size-jitter 0.3 --quiet --force",
             cli, dir, images, classes);
    if (system(cmd) != 0) {
        fprintf(stderr, "dataset generation failed: %s\n", cmd);
        exit(1);
    }
}

static nostall_config *make_cfg(const char *kv[][2], int n)
{
    nostall_config *cfg = NULL;
    if (nostall_config_create(&cfg) < 0) exit(1);
    /* These tests plant many bad items among few: the bad-item budget
     * (max_bad_fraction, 0.01 by default) is off unless a test sets it. */
    nostall_config_set(cfg, "max_bad_fraction", "1");
    for (int i = 0; i < n; i++)
        if (nostall_config_set(cfg, kv[i][0], kv[i][1]) < 0) {
            fprintf(stderr, "config %s=%s: %s\n", kv[i][0], kv[i][1], nostall_last_error());
            exit(1);
        }
    return cfg;
}

#endif
