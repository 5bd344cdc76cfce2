/*
 * test_analyze_files.c — nostall_analyze_files_*: a dataset's distinct local
 * files (what the analyzer's cached run warms and its cold run drops): an
 * ImageFolder lists each image once; a token corpus of many windows and a
 * list naming one file three times list it once; http(s) and s3 items are
 * left out; the dataset info is the loader's; warm and drop count the files
 * they could not handle; a bad source is an error naming it. The cached
 * run's configuration (nostall_analyze_cached_config) turns off what is not
 * the pipeline's own work and keeps every other option.
 */
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "nostall_analyze.h"
#include "test_data.h"

static void write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK_EQ(fwrite(data, 1, len, f), len);
    fclose(f);
}

int main(void)
{
    const char *tmp = test_tmpdir("analyze_files");
    char dir[1024], path[1200];
    nostall_analyze_files *f = NULL;
    nostall_dataset_info info;

    /* an ImageFolder: every image once, the loader's own count */
    snprintf(dir, sizeof dir, "%s/folder", tmp);
    gen_dataset(dir, 12, 3);
    CHECK_OK(nostall_analyze_files_create(&f, dir, NULL, &info, sizeof info));
    if (!f) TEST_EXIT();
    CHECK_EQ(info.items, 12);
    CHECK_EQ(nostall_analyze_files_count(f), 12);
    for (uint64_t i = 0; i < 12; i++) {
        const char *p = nostall_analyze_files_path(f, i);
        CHECK(p && access(p, R_OK) == 0);
        for (uint64_t j = 0; p && j < i; j++) CHECK(strcmp(p, nostall_analyze_files_path(f, j)));
    }
    CHECK(nostall_analyze_files_path(f, 12) == NULL);
    CHECK_EQ(nostall_analyze_files_warm(f), 0);
    CHECK_EQ(nostall_analyze_files_drop(f), 0);
    /* a file gone since: counted by both */
    snprintf(path, sizeof path, "%s", nostall_analyze_files_path(f, 5));
    CHECK_EQ(unlink(path), 0);
    CHECK_EQ(nostall_analyze_files_warm(f), 1);
    CHECK_EQ(nostall_analyze_files_drop(f), 1);
    nostall_analyze_files_free(f);

    /* a token corpus: many windows, one file */
    static uint16_t tokens[4097];
    for (size_t i = 0; i < sizeof tokens / sizeof *tokens; i++) tokens[i] = (uint16_t)i;
    snprintf(path, sizeof path, "%s/corpus.bin", tmp);
    write_file(path, tokens, sizeof tokens);
    const char *tok[][2] = {{"task", "tokens"}, {"context_length", "16"}, {"windows", "chunks"}};
    nostall_config *cfg = make_cfg(tok, 3);
    CHECK_OK(nostall_analyze_files_create(&f, path, cfg, &info, sizeof info));
    nostall_config_free(cfg);
    if (!f) TEST_EXIT();
    CHECK_EQ(info.items, 256);
    CHECK_EQ(nostall_analyze_files_count(f), 1);
    CHECK(strcmp(nostall_analyze_files_path(f, 0), path) == 0);
    nostall_analyze_files_free(f);

    /* a list naming one image three times, beside remote items */
    char img[1200], list[1200], text[4096];
    snprintf(img, sizeof img, "%s/folder/class_001/img_000001.jpg", tmp);
    CHECK_EQ(access(img, R_OK), 0);
    snprintf(list, sizeof list, "%s/list.tsv", tmp);
    int n = snprintf(text, sizeof text,
                     "%s\t0\nhttp://127.0.0.1:9/a.jpg\t1\n%s\t1\ns3://bucket/b.jpg\t0\n"
                     "https://127.0.0.1:9/c.jpg\t1\n%s\t0\n",
                     img, img, img);
    write_file(list, text, (size_t)n);
    CHECK_OK(nostall_analyze_files_create(&f, list, NULL, NULL, 0));
    if (!f) TEST_EXIT();
    CHECK_EQ(nostall_analyze_files_count(f), 1);
    CHECK(strcmp(nostall_analyze_files_path(f, 0), img) == 0);
    nostall_analyze_files_free(f);

    /* a source that is not there: the loader's error, naming it */
    snprintf(path, sizeof path, "%s/nowhere", tmp);
    f = (nostall_analyze_files *)&info; /* must be reset */
    CHECK(nostall_analyze_files_create(&f, path, NULL, NULL, 0) < 0);
    CHECK(f == NULL);
    CHECK(strstr(nostall_last_error(), "nowhere") != NULL);
    CHECK(nostall_analyze_files_create(NULL, path, NULL, NULL, 0) == NOSTALL_E_INVALID);
    nostall_analyze_files_free(NULL);
    CHECK_EQ(nostall_analyze_files_count(NULL), 0);

    /* the cached run's configuration */
    nostall_config *ucfg, *cached;
    CHECK_OK(nostall_config_create(&ucfg));
    static const char *const user[][2] = {{"cache_bytes", "64M"}, {"storage_mbps", "20"},
                                          {"echo_factor", "3"},   {"epochs", "5"},
                                          {"coordinate", "grp"},  {"batch_size", "7"},
                                          {"crop", "40"},         {"threads", "3"}};
    for (size_t i = 0; i < sizeof user / sizeof user[0]; i++)
        CHECK_OK(nostall_config_set(ucfg, user[i][0], user[i][1]));
    cached = nostall_analyze_cached_config(ucfg);
    CHECK(cached != NULL);
    static const char *const want[][2] = {{"cache", "none"},        {"cache_bytes", "0"},
                                          {"storage_mbps", "0"},    {"echo_factor", "1"},
                                          {"epochs", "1"},          {"coordinate", ""},
                                          {"cache_transcode", "0"}, {"batch_size", "7"},
                                          {"crop", "40"},           {"threads", "3"}};
    for (size_t i = 0; cached && i < sizeof want / sizeof want[0]; i++) {
        char v[64];
        CHECK_OK(nostall_config_get(cached, want[i][0], v, sizeof v));
        if (strcmp(v, want[i][1])) {
            fprintf(stderr, "cached config: %s = '%s', want '%s'\n", want[i][0], v, want[i][1]);
            CHECK(0);
        }
    }
    char v[64]; /* the caller's configuration is not changed */
    CHECK_OK(nostall_config_get(ucfg, "epochs", v, sizeof v));
    CHECK(strcmp(v, "5") == 0);
    nostall_config_free(cached);
    cached = nostall_analyze_cached_config(NULL); /* the defaults */
    CHECK(cached != NULL);
    nostall_config_free(cached);
    nostall_config_free(ucfg);
    TEST_EXIT();
}
