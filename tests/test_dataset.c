/*
 * test_dataset.c — nostall_dataset and nostall_shard_writer
 * (nostall_dataset.h), through the public API only: every query on a
 * folder, a list file, tar shards and COCO annotations (checked against
 * the files themselves and the loader's own item list); bad sources give
 * errors naming the path; one dataset shared by two loaders (freed by the
 * caller first; one with autotune and its budgets, which are the
 * loader's) delivers what a loader opened on the source delivers
 * (checksums); shards written by the writer read back with the same keys
 * and bytes, and decode to what the folder they came from decodes to.
 */
#include <sys/stat.h>

#include "check.h"
#include "nostall_dataset.h"
#include "test_data.h"

static char dir[4096], folder[4200];

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *d = malloc(n > 0 ? (size_t)n : 1);
    *len = d ? fread(d, 1, (size_t)n, f) : 0;
    fclose(f);
    return d;
}

/* Every query on a folder of 12 images in 3 classes, beside the loader's. */
static void test_folder(void)
{
    nostall_dataset *ds = NULL;
    CHECK_OK(nostall_dataset_open(&ds, folder, NULL));
    if (!ds) return;
    CHECK(!strcmp(nostall_dataset_source(ds), folder));
    CHECK_EQ(nostall_dataset_count(ds), 12);
    CHECK_EQ(nostall_dataset_label_kind(ds), NOSTALL_LABELS_INT);
    CHECK_EQ(nostall_dataset_files(ds), 12);
    nostall_loader *ld = NULL;
    const char *kv[][2] = {{"threads", "1"}};
    nostall_config *cfg = make_cfg(kv, 1);
    CHECK_OK(nostall_loader_create(&ld, folder, cfg));
    nostall_config_free(cfg);
    for (uint64_t i = 0; ld && i < 12; i++) {
        const char *p, *lp;
        int64_t label, ll;
        uint64_t off = 7, len = 7;
        CHECK_OK(nostall_dataset_item(ds, i, &p, &label, &off, &len));
        CHECK_OK(nostall_loader_item(ld, i, &lp, &ll));
        CHECK(!strcmp(p, lp));
        CHECK_EQ(label, ll);
        CHECK(label >= 0 && label < 3);
        CHECK(off == 0 && len == 0); /* whole files */
        CHECK(!strncmp(p, folder, strlen(folder)));
        CHECK(!strcmp(nostall_dataset_file(ds, i), p));
        struct stat sb;
        CHECK(stat(p, &sb) == 0);
    }
    nostall_loader_free(ld);
    CHECK(nostall_dataset_file(ds, 12) == NULL);
    CHECK_RC(nostall_dataset_item(ds, 12, NULL, NULL, NULL, NULL), NOSTALL_E_INVALID);
    CHECK(strstr(nostall_last_error(), folder) != NULL);
    /* another reference outlives the first */
    nostall_dataset *two = nostall_dataset_ref(ds);
    nostall_dataset_free(ds);
    CHECK_EQ(nostall_dataset_count(two), 12);
    nostall_dataset_free(two);
}

/* A list file: labels as written, a path listed twice is one file. */
static void test_list(void)
{
    nostall_dataset *src = NULL, *ds = NULL;
    CHECK_OK(nostall_dataset_open(&src, folder, NULL));
    if (!src) return;
    char list[4400];
    snprintf(list, sizeof list, "%s/list.txt", dir);
    FILE *f = fopen(list, "w");
    const char *p[3];
    for (int i = 0; i < 3; i++) {
        nostall_dataset_item(src, (uint64_t)i * 4, &p[i], NULL, NULL, NULL);
        fprintf(f, "%s\t%d\n", p[i], 10 + i);
    }
    fprintf(f, "%s\t%d\n", p[0], 20);
    fclose(f);
    CHECK_OK(nostall_dataset_open(&ds, list, NULL));
    if (ds) {
        CHECK_EQ(nostall_dataset_count(ds), 4);
        CHECK_EQ(nostall_dataset_label_kind(ds), NOSTALL_LABELS_INT);
        CHECK_EQ(nostall_dataset_files(ds), 3);
        for (uint64_t i = 0; i < 4; i++) {
            const char *q;
            int64_t label;
            CHECK_OK(nostall_dataset_item(ds, i, &q, &label, NULL, NULL));
            CHECK(!strcmp(q, p[i % 3]));
            CHECK_EQ(label, i < 3 ? 10 + (int64_t)i : 20);
        }
        CHECK(!strcmp(nostall_dataset_file(ds, 2), p[2]));
    }
    nostall_dataset_free(ds);
    nostall_dataset_free(src);
}

/* Shards: written by the writer from the folder (small shards, so
 * several), read back as a dataset with the same keys and bytes, and
 * decoded by a loader to the folder's very batches. */
static void test_shards(void)
{
    nostall_dataset *src = NULL, *ds = NULL;
    CHECK_OK(nostall_dataset_open(&src, folder, NULL));
    if (!src) return;
    char shards[4400];
    snprintf(shards, sizeof shards, "%s/shards", dir);
    mkdir(shards, 0755);
    nostall_shard_writer *w = NULL;
    CHECK_OK(nostall_shard_writer_open(&w, shards, "part", 16384));
    const uint64_t n = nostall_dataset_count(src);
    for (uint64_t i = 0; w && i < n; i++) {
        const char *p;
        int64_t label;
        size_t len;
        char key[32], cls[32];
        nostall_dataset_item(src, i, &p, &label, NULL, NULL);
        uint8_t *d = slurp(p, &len);
        snprintf(key, sizeof key, "k%03llu", (unsigned long long)i);
        snprintf(cls, sizeof cls, "%lld", (long long)label);
        const nostall_shard_member m[2] = {{"jpg", d, len}, {"cls", cls, strlen(cls)}};
        CHECK_OK(nostall_shard_writer_add(w, key, m, 2));
        free(d);
    }
    /* a key with a dot in its last component is refused, naming it */
    const nostall_shard_member m1 = {"bin", "x", 1};
    CHECK_RC(nostall_shard_writer_add(w, "a/b.c", &m1, 1), NOSTALL_E_INVALID);
    CHECK(strstr(nostall_last_error(), "a/b.c") != NULL);
    CHECK_EQ(nostall_shard_writer_samples(w), n);
    CHECK_OK(nostall_shard_writer_close(w));
    CHECK_OK(nostall_dataset_open(&ds, shards, NULL));
    if (!ds) goto out;
    CHECK_EQ(nostall_dataset_count(ds), n);
    CHECK_EQ(nostall_dataset_label_kind(ds), NOSTALL_LABELS_INT);
    CHECK(nostall_dataset_files(ds) > 1 && nostall_dataset_files(ds) < n);
    for (uint64_t i = 0; i < n; i++) {
        const char *p, *q;
        int64_t label, want;
        uint64_t off, len;
        size_t alen, blen;
        CHECK_OK(nostall_dataset_item(ds, i, &p, &label, &off, &len));
        nostall_dataset_item(src, i, &q, &want, NULL, NULL);
        CHECK_EQ(label, want);
        CHECK(strstr(p, "/shards/part-") != NULL);
        uint8_t *a = slurp(p, &alen), *b = slurp(q, &blen);
        CHECK(a && b && len == blen && off + len <= alen && !memcmp(a + off, b, blen));
        char key[32];
        snprintf(key, sizeof key, "k%03llu.jpg", (unsigned long long)i);
        CHECK(a && off >= 512 && !strcmp((const char *)a + off - 512, key)); /* ustar name */
        free(a);
        free(b);
    }
    /* the index of an existing shard, by a header pass: its samples */
    char idx[4500];
    uint64_t samples = 0, damaged = 9, in0 = 0;
    snprintf(idx, sizeof idx, "%s/part-000000.tar", shards);
    for (uint64_t i = 0; i < n; i++) {
        const char *p;
        nostall_dataset_item(ds, i, &p, NULL, NULL, NULL);
        in0 += !strcmp(p, idx);
    }
    CHECK_OK(nostall_shard_index_write(idx, &samples, &damaged));
    CHECK(in0 > 0 && samples == in0 && damaged == 0);
out:
    nostall_dataset_free(ds);
    nostall_dataset_free(src);
}

/* COCO annotations (task=detect): every image once, its own file. */
static void test_coco(void)
{
    char coco[4400], cmd[9000];
    snprintf(coco, sizeof coco, "%s/coco", dir);
    snprintf(cmd, sizeof cmd,
             "'%s' gen --task detect '%s' --images 6 --classes 3 --objects 2 --width 48 "
             "--height 40 --seed 2 --quiet --force",
             getenv("NOSTALL_CLI"), coco);
    CHECK(system(cmd) == 0);
    strcat(coco, "/instances.json");
    const char *kv[][2] = {{"task", "detect"}};
    nostall_config *cfg = make_cfg(kv, 1);
    nostall_dataset *ds = NULL;
    CHECK_OK(nostall_dataset_open(&ds, coco, cfg));
    nostall_config_free(cfg);
    if (!ds) return;
    CHECK_EQ(nostall_dataset_count(ds), 6);
    CHECK_EQ(nostall_dataset_files(ds), 6);
    for (uint64_t i = 0; i < 6; i++) {
        const char *p;
        uint64_t off, len;
        struct stat sb;
        CHECK_OK(nostall_dataset_item(ds, i, &p, NULL, &off, &len));
        CHECK(stat(p, &sb) == 0 && off == 0 && len == 0);
    }
    nostall_dataset_free(ds);
}

static void test_bad(void)
{
    nostall_dataset *ds = (nostall_dataset *)1;
    char p[4400];
    snprintf(p, sizeof p, "%s/no-such-folder", dir);
    CHECK(nostall_dataset_open(&ds, p, NULL) < 0 && ds == NULL);
    CHECK(strstr(nostall_last_error(), p) != NULL);
    snprintf(p, sizeof p, "%s/bad.txt", dir);
    FILE *f = fopen(p, "w");
    fprintf(f, "a.jpg\t1\nb.jpg\tnot-a-label\n");
    fclose(f);
    CHECK(nostall_dataset_open(&ds, p, NULL) < 0);
    CHECK(strstr(nostall_last_error(), "bad.txt") != NULL);
    CHECK_RC(nostall_dataset_open(&ds, NULL, NULL), NOSTALL_E_INVALID);
    CHECK_EQ(nostall_dataset_count(NULL), 0);
    CHECK_RC(nostall_loader_create_from_dataset(NULL, NULL, NULL), NOSTALL_E_INVALID);
    nostall_dataset_free(NULL);
}

static uint64_t epoch_sum(nostall_loader *ld, uint64_t *items)
{
    uint64_t sum = 0;
    *items = 0;
    for (;;) {
        nostall_batch b;
        int rc = nostall_loader_next(ld, &b);
        if (rc == NOSTALL_DONE) break;
        if (rc == NOSTALL_EPOCH_END) continue;
        CHECK_OK(rc);
        if (rc < 0) break;
        *items += b.count;
        nostall_checksum_batch(&sum, &b);
        nostall_loader_release(ld, &b);
    }
    return sum;
}

/* One dataset, two loaders (another thread count, another batch size),
 * the caller's reference let go first: each delivers the bytes of a
 * loader opened on the source. Shards written from the folder decode to
 * the same batches. */
static void test_shared(void)
{
    const char *kv[][2] = {{"threads", "2"}, {"batch_size", "5"}, {"crop", "32"},
                           {"resize", "40"}, {"seed", "7"},       {"epochs", "2"},
                           {"cache", "none"}};
    nostall_config *cfg = make_cfg(kv, 7);
    nostall_dataset *ds = NULL;
    nostall_loader *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    CHECK_OK(nostall_dataset_open(&ds, folder, cfg));
    CHECK_OK(nostall_loader_create(&c, folder, cfg));
    if (!ds || !c) goto out;
    CHECK_OK(nostall_loader_create_from_dataset(&a, ds, NULL));
    nostall_config_set(cfg, "threads", "1");
    /* how fast, not what: autotune and its budgets are the loader's */
    nostall_config_set(cfg, "autotune", "1");
    nostall_config_set(cfg, "cpu_budget", "1.5");
    nostall_config_set(cfg, "memory_budget", "256M");
    CHECK_OK(nostall_loader_create_from_dataset(&b, ds, cfg));
    nostall_config_set(cfg, "autotune", "0");
    nostall_config_set(cfg, "cpu_budget", "0");
    nostall_config_set(cfg, "memory_budget", "0");
    /* an option that defines the items, set otherwise: refused, named */
    nostall_config_set(cfg, "crop", "48");
    CHECK_RC(nostall_loader_create_from_dataset(&d, ds, cfg), NOSTALL_E_OPTION);
    CHECK(d == NULL && strstr(nostall_last_error(), "crop") != NULL);
    nostall_dataset_free(ds); /* the loaders hold it */
    ds = NULL;
    if (!a || !b) goto out;
    uint64_t na, nb, nc;
    const uint64_t sa = epoch_sum(a, &na), sb = epoch_sum(b, &nb), sc = epoch_sum(c, &nc);
    CHECK_EQ(na, 24);
    CHECK(sa == sc && sb == sc && na == nc && nb == nc);
    /* the same images from shards: the same batches (mode eval: no draws
       depend on the file) */
    char shards[4400];
    snprintf(shards, sizeof shards, "%s/shards", dir);
    nostall_config_set(cfg, "crop", "32");
    nostall_config_set(cfg, "mode", "eval");
    nostall_config_set(cfg, "shuffle", "0");
    nostall_loader_free(c);
    c = NULL;
    nostall_loader *e = NULL;
    CHECK_OK(nostall_loader_create(&c, folder, cfg));
    CHECK_OK(nostall_loader_create(&e, shards, cfg));
    if (c && e) {
        uint64_t ne, nf;
        CHECK(epoch_sum(c, &nf) == epoch_sum(e, &ne));
        CHECK_EQ(ne, nf);
    }
    nostall_loader_free(e);
out:
    nostall_loader_free(a);
    nostall_loader_free(b);
    nostall_loader_free(c);
    nostall_dataset_free(ds);
    nostall_config_free(cfg);
}

int main(void)
{
    snprintf(dir, sizeof dir, "%s", test_tmpdir("test_dataset"));
    snprintf(folder, sizeof folder, "%s/folder", dir);
    gen_dataset(folder, 12, 3);
    test_folder();
    test_list();
    test_shards();
    test_coco();
    test_bad();
    test_shared();
    TEST_EXIT();
}
