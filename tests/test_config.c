/*
 * test_config.c — the option table and the config object: defaults inside
 * their own bounds, parsing of every type, bounds errors that name the option
 * and its bounds, unknown names, typed access, and the status table.
 */
#include "check.h"

static void expect_option_error(nostall_config *c, const char *name, const char *value,
                                const char *must_contain)
{
    char before[256], after[256];
    int has = nostall_config_get(c, name, before, sizeof before) == 0;
    CHECK_RC(nostall_config_set(c, name, value), NOSTALL_E_OPTION);
    if (!strstr(nostall_last_error(), must_contain)) {
        fprintf(stderr, "message for %s=%s lacks '%s': %s\n", name, value, must_contain,
                nostall_last_error());
        CHECK(0);
    }
    if (has) { /* unchanged on error */
        CHECK_OK(nostall_config_get(c, name, after, sizeof after));
        CHECK(strcmp(before, after) == 0);
    }
}

/* An ENUM option's named constant is the index of its choice: setting the
 * choice by name reads back as the constant. */
static void expect_enum(nostall_config *c, int id, const char *choice, uint64_t constant)
{
    nostall_option_info info;
    uint64_t u = 99;
    CHECK_OK(nostall_option_info_get(id, &info));
    CHECK_OK(nostall_config_set(c, info.name, choice));
    CHECK_OK(nostall_config_get_uint(c, id, &u));
    if (u != constant) {
        fprintf(stderr, "%s=%s reads %llu, its constant is %llu\n", info.name, choice,
                (unsigned long long)u, (unsigned long long)constant);
        CHECK(0);
    }
}

int main(void)
{
    nostall_config *c = NULL;
    char buf[256];
    uint64_t u;
    double d;

    CHECK_OK(nostall_config_create(&c));
    if (!c) TEST_EXIT();

    /* every option: info is complete and the default round-trips */
    CHECK_EQ(nostall_option_count(), NOSTALL_OPT_COUNT_);
    for (int i = 0; i < nostall_option_count(); i++) {
        nostall_option_info info;
        CHECK_OK(nostall_option_info_get(i, &info));
        CHECK(info.name && info.help && info.default_value && *info.help);
        CHECK_EQ(nostall_option_find(info.name), i);
        CHECK_OK(nostall_config_get(c, info.name, buf, sizeof buf));
        CHECK_OK(nostall_config_set(c, info.name, buf));
    }
    nostall_option_info info;
    CHECK_RC(nostall_option_info_get(-1, &info), NOSTALL_E_INVALID);
    CHECK_RC(nostall_option_info_get(NOSTALL_OPT_COUNT_, &info), NOSTALL_E_INVALID);

    /* the named constants of the ENUM options follow their choices */
    expect_enum(c, NOSTALL_OPT_CACHE, "minio", NOSTALL_CACHE_MINIO);
    expect_enum(c, NOSTALL_OPT_CACHE, "none", NOSTALL_CACHE_NONE);
    expect_enum(c, NOSTALL_OPT_READER, "auto", NOSTALL_READER_AUTO);
    expect_enum(c, NOSTALL_OPT_READER, "pread", NOSTALL_READER_PREAD);
    expect_enum(c, NOSTALL_OPT_READER, "io_uring", NOSTALL_READER_IO_URING);
    expect_enum(c, NOSTALL_OPT_ECHO, "fixed", NOSTALL_ECHO_FIXED);
    expect_enum(c, NOSTALL_OPT_ECHO, "adaptive", NOSTALL_ECHO_ADAPTIVE);
    expect_enum(c, NOSTALL_OPT_ECHO_POINT, "fetch", NOSTALL_ECHO_POINT_FETCH);
    expect_enum(c, NOSTALL_OPT_ECHO_POINT, "decode", NOSTALL_ECHO_POINT_DECODE);
    expect_enum(c, NOSTALL_OPT_ECHO_POINT, "augment", NOSTALL_ECHO_POINT_AUGMENT);
    expect_enum(c, NOSTALL_OPT_ECHO_POINT, "batch", NOSTALL_ECHO_POINT_BATCH);
    expect_enum(c, NOSTALL_OPT_SHARD_MODE, "indexed", NOSTALL_SHARD_MODE_INDEXED);
    expect_enum(c, NOSTALL_OPT_SHARD_MODE, "stream", NOSTALL_SHARD_MODE_STREAM);
    const int enums[] = {NOSTALL_OPT_CACHE, NOSTALL_OPT_READER, NOSTALL_OPT_ECHO,
                         NOSTALL_OPT_ECHO_POINT, NOSTALL_OPT_SHARD_MODE};
    for (int i = 0; i < 5; i++) { /* back to the defaults for what follows */
        CHECK_OK(nostall_option_info_get(enums[i], &info));
        CHECK_OK(nostall_config_set(c, info.name, info.default_value));
    }

    /* names with dashes are the same option */
    CHECK_EQ(nostall_option_find("batch-size"), NOSTALL_OPT_BATCH_SIZE);
    CHECK_RC(nostall_option_find("batchsize"), NOSTALL_E_OPTION);
    CHECK(strstr(nostall_last_error(), "batchsize") != NULL);

    /* strings: a group name round-trips; bad characters and length refused,
     * typed access refused */
    CHECK_OK(nostall_config_set(c, "coordinate", "hp-search_1.a"));
    CHECK_OK(nostall_config_get(c, "coordinate", buf, sizeof buf));
    CHECK(strcmp(buf, "hp-search_1.a") == 0);
    CHECK_RC(nostall_config_set(c, "coordinate", "a/b"), NOSTALL_E_OPTION);
    CHECK(strstr(nostall_last_error(), "coordinate") != NULL);
    CHECK_RC(nostall_config_set(c, "coordinate",
                                "0123456789012345678901234567890123456789012345678901234567890123"),
             NOSTALL_E_OPTION);
    CHECK_OK(nostall_config_get(c, "coordinate", buf, sizeof buf));
    CHECK(strcmp(buf, "hp-search_1.a") == 0); /* unchanged by the failures */
    CHECK_RC(nostall_config_get_uint(c, NOSTALL_OPT_COORDINATE, &u), NOSTALL_E_OPTION);
    CHECK_OK(nostall_config_set(c, "coordinate", ""));

    /* defaults */
    CHECK_OK(nostall_config_get_uint(c, NOSTALL_OPT_BATCH_SIZE, &u));
    CHECK_EQ(u, 64);
    CHECK_OK(nostall_config_get_double(c, NOSTALL_OPT_SCALE_MIN, &d));
    CHECK(d == 0.08);
    CHECK_OK(nostall_config_get(c, "mode", buf, sizeof buf));
    CHECK(strcmp(buf, "train") == 0);
    CHECK_OK(nostall_config_get(c, "max_file_bytes", buf, sizeof buf));
    CHECK(strcmp(buf, "268435456") == 0);

    /* uint */
    CHECK_OK(nostall_config_set(c, "batch_size", "256"));
    CHECK_OK(nostall_config_get_uint(c, NOSTALL_OPT_BATCH_SIZE, &u));
    CHECK_EQ(u, 256);
    expect_option_error(c, "batch_size", "0", "[1, 65536]");
    expect_option_error(c, "batch_size", "65537", "batch_size");
    expect_option_error(c, "batch_size", "-3", "batch_size");
    expect_option_error(c, "batch_size", "12abc", "not a non-negative integer");
    expect_option_error(c, "batch_size", "", "batch_size");
    expect_option_error(c, "seed", "18446744073709551616", "seed"); /* 2^64 */
    CHECK_OK(nostall_config_set(c, "seed", "18446744073709551615"));
    expect_option_error(c, "threads", "1025", "[0, 1024]");

    /* double */
    CHECK_OK(nostall_config_set(c, "flip_prob", "0"));
    expect_option_error(c, "flip_prob", "1.5", "[0, 1]");
    expect_option_error(c, "flip_prob", "nan", "flip_prob");
    expect_option_error(c, "scale_min", "0", "scale_min");

    /* bool */
    CHECK_OK(nostall_config_set(c, "shuffle", "false"));
    CHECK_OK(nostall_config_get_uint(c, NOSTALL_OPT_SHUFFLE, &u));
    CHECK_EQ(u, 0);
    CHECK_OK(nostall_config_set(c, "drop_last", "YES"));
    CHECK_OK(nostall_config_get_uint(c, NOSTALL_OPT_DROP_LAST, &u));
    CHECK_EQ(u, 1);
    expect_option_error(c, "shuffle", "maybe", "shuffle");

    /* enum */
    CHECK_OK(nostall_config_set(c, "output", "uint8"));
    CHECK_OK(nostall_config_get_uint(c, NOSTALL_OPT_OUTPUT, &u));
    CHECK_EQ(u, NOSTALL_OUTPUT_UINT8);
    CHECK_OK(nostall_config_set_uint(c, NOSTALL_OPT_MODE, NOSTALL_MODE_EVAL));
    CHECK_OK(nostall_config_get(c, "mode", buf, sizeof buf));
    CHECK(strcmp(buf, "eval") == 0);
    expect_option_error(c, "mode", "test", "train|eval");
    CHECK_RC(nostall_config_set_uint(c, NOSTALL_OPT_MODE, 7), NOSTALL_E_OPTION);

    /* double3 */
    CHECK_OK(nostall_config_set(c, "mean", "0.5,0.25,0.125"));
    CHECK_OK(nostall_config_get(c, "mean", buf, sizeof buf));
    CHECK(strcmp(buf, "0.5,0.25,0.125") == 0);
    CHECK_OK(nostall_config_set(c, "std", "0.5"));
    CHECK_OK(nostall_config_get(c, "std", buf, sizeof buf));
    CHECK(strcmp(buf, "0.5,0.5,0.5") == 0);
    expect_option_error(c, "std", "0.5,0", "std");
    expect_option_error(c, "std", "1,2", "std");
    expect_option_error(c, "mean", "1,2,3,4", "mean");

    /* size */
    CHECK_OK(nostall_config_set(c, "max_file_bytes", "64K"));
    CHECK_OK(nostall_config_get_uint(c, NOSTALL_OPT_MAX_FILE_BYTES, &u));
    CHECK_EQ(u, 65536);
    CHECK_OK(nostall_config_set(c, "max_file_bytes", "1.5MiB"));
    CHECK_OK(nostall_config_get_uint(c, NOSTALL_OPT_MAX_FILE_BYTES, &u));
    CHECK_EQ(u, 1572864);
    CHECK_OK(nostall_config_set(c, "max_file_bytes", "2gb"));
    CHECK_OK(nostall_config_get_uint(c, NOSTALL_OPT_MAX_FILE_BYTES, &u));
    CHECK_EQ(u, 2147483648ULL);
    expect_option_error(c, "max_file_bytes", "17G", "16G");
    expect_option_error(c, "max_file_bytes", "0", "max_file_bytes");
    expect_option_error(c, "max_file_bytes", "10Q", "size");

    /* typed access checks the type */
    CHECK_RC(nostall_config_set_double(c, NOSTALL_OPT_BATCH_SIZE, 1.0), NOSTALL_E_OPTION);
    CHECK_RC(nostall_config_get_uint(c, NOSTALL_OPT_FLIP_PROB, &u), NOSTALL_E_OPTION);
    CHECK_OK(nostall_config_set_double(c, NOSTALL_OPT_FLIP_PROB, 0.25));
    CHECK_OK(nostall_config_get_double(c, NOSTALL_OPT_FLIP_PROB, &d));
    CHECK(d == 0.25);
    CHECK_RC(nostall_config_set_uint(c, NOSTALL_OPT_BATCH_SIZE, 0), NOSTALL_E_OPTION);
    CHECK_RC(nostall_config_set(c, "nope", "1"), NOSTALL_E_OPTION);
    CHECK_RC(nostall_config_get(c, "batch_size", buf, 2), NOSTALL_E_INVALID);

    /* status table */
    CHECK(strcmp(nostall_status_name(NOSTALL_E_CORRUPT), "E_CORRUPT") == 0);
    CHECK(strcmp(nostall_strerror(NOSTALL_OK), "success") == 0);
    CHECK(strcmp(nostall_strerror(-9999), "unknown status") == 0);
    CHECK_EQ(NOSTALL_E_INVALID, -1); /* pinned */
    CHECK_EQ(NOSTALL_E_PERMISSION, -17);

    /* stats names */
    CHECK_EQ(nostall_stats_count() * (int)sizeof(uint64_t), (int)sizeof(nostall_stats));
    CHECK(strcmp(nostall_stats_name(0), "epoch") == 0);
    CHECK(nostall_stats_name(nostall_stats_count()) == NULL);
    /* gauges (values now) against totals: every name in the gauge list is a counter */
    {
        int gauges = 0;
        for (int i = 0; i < nostall_stats_count(); i++) {
            const char *nm = nostall_stats_name(i);
            int g = nostall_stats_gauge(i);
            CHECK(g == 0 || g == 1);
            gauges += g;
            if (!strcmp(nm, "threads") || !strcmp(nm, "prep_servers_up") ||
                !strcmp(nm, "tuned_cache_bytes") || !strcmp(nm, "epoch"))
                CHECK_EQ(g, 1);
            if (!strcmp(nm, "items_delivered") || !strcmp(nm, "prep_remote_bytes") ||
                !strcmp(nm, "cache_capped"))
                CHECK_EQ(g, 0);
        }
        CHECK_EQ(gauges, 23); /* the list in loader_stats.c, all of them real names */
        CHECK_EQ(nostall_stats_gauge(-1), -1);
        CHECK_EQ(nostall_stats_gauge(nostall_stats_count()), -1);
    }

    /* a copy: every option, path options of any length, independent of the original */
    {
        static char longtext[NOSTALL_PATH_MAX];
        memset(longtext, 'p', sizeof longtext - 1);
        longtext[0] = '/';
        CHECK_OK(nostall_config_set(c, "op_args", longtext));
        CHECK_OK(nostall_config_set(c, "threads", "7"));
        nostall_config *k = NULL;
        CHECK_OK(nostall_config_copy(&k, c));
        if (!k) TEST_EXIT();
        static char a[NOSTALL_PATH_MAX], b[NOSTALL_PATH_MAX];
        for (int i = 0; i < nostall_option_count(); i++) {
            nostall_option_info oi;
            nostall_option_info_get(i, &oi);
            CHECK_OK(nostall_config_get(c, oi.name, a, sizeof a));
            CHECK_OK(nostall_config_get(k, oi.name, b, sizeof b));
            CHECK(strcmp(a, b) == 0);
        }
        CHECK_OK(nostall_config_get(k, "op_args", b, sizeof b));
        CHECK_EQ(strlen(b), sizeof longtext - 1);
        CHECK_OK(nostall_config_set(k, "threads", "3"));
        CHECK_OK(nostall_config_get_uint(c, NOSTALL_OPT_THREADS, &u));
        CHECK_EQ(u, 7);
        nostall_config_free(k);
        nostall_config *none = c;
        CHECK_RC(nostall_config_copy(&none, NULL), NOSTALL_E_INVALID);
        CHECK(none == NULL);
        CHECK_RC(nostall_config_copy(NULL, c), NOSTALL_E_INVALID);
    }

    nostall_config_free(c);
    nostall_config_free(NULL);
    TEST_EXIT();
}
