/*
 * test_bytes.c — task=bytes through the loader:
 *   - a folder of files of any name (no extension, .txt, a .jpg that is no
 *     image) in two class folders: every file is an item, hidden files and
 *     files at the root are left out and counted; each delivered item is the
 *     file's bytes, packed at the start of its place, the rest of the place
 *     zero, "length" its size and "label" its class folder; the room is the
 *     largest file;
 *   - the same bytes for 1, 2 and 3 threads; exact mid-epoch resume; echoing
 *     at fetch, decode and augment delivers each file twice, unchanged; the
 *     MinIO cache's second epoch reads nothing from storage;
 *   - bad items: an empty file, a file over max_file_bytes (left out of the
 *     room), a file that grew past the room after create: each skipped,
 *     counted and reported with its reason, or under on_bad_item=fail the
 *     error naming the file;
 *   - lists: float labels, multi-labels, no labels declare the label field
 *     by kind (or none).
 */
#include <sys/stat.h>

#include "check.h"

#define NFILES 24

static const char *dir;
static char root[4096], paths[NFILES][4096];
static size_t sizes[NFILES];

static void write_file(const char *path, size_t n, unsigned seed)
{
    FILE *f = fopen(path, "wb");
    for (size_t i = 0; i < n; i++) fputc((int)((i * 131 + seed * 7) % 251), f);
    fclose(f);
}

/* root/c0/..., root/c1/... with odd names and sizes 1..~700 bytes. */
static void make_tree(void)
{
    static const char *names[] = {"README", "a.txt", "fake.jpg", "x.tar.gz", "sub/deep.bin", "z"};
    char d[4200];
    snprintf(root, sizeof root, "%s/tree", dir);
    for (int c = 0; c < 2; c++) {
        snprintf(d, sizeof d, "mkdir -p '%s/c%d/sub' '%s/c%d/k_sub'", root, c, root, c);
        if (system(d) != 0) exit(1);
    }
    for (int i = 0; i < NFILES; i++) {
        /* names sort within a class as the index does: by path, bytewise */
        snprintf(paths[i], sizeof paths[i], "%s/c%d/%s%s%d", root, i / 12, i % 12 < 6 ? "" : "k_",
                 names[i % 6], i);
        sizes[i] = 1 + (size_t)i * 29 % 700;
        write_file(paths[i], sizes[i], (unsigned)i);
    }
    snprintf(d, sizeof d, "%s/c0/.hidden", root);
    write_file(d, 10, 1);
    snprintf(d, sizeof d, "%s/at_root.bin", root);
    write_file(d, 10, 1);
}

static int path_index(const char *p)
{
    for (int i = 0; i < NFILES; i++)
        if (!strcmp(p, paths[i])) return i;
    return -1;
}

static nostall_loader *open_loader(const char *src, const char *kv[][2], int n)
{
    nostall_config *cfg = NULL;
    nostall_loader *ld = NULL;
    if (nostall_config_create(&cfg) < 0) exit(1);
    nostall_config_set(cfg, "max_bad_fraction", "1"); /* bad items planted: no budget */
    CHECK_OK(nostall_config_set(cfg, "task", "bytes"));
    for (int i = 0; i < n; i++) CHECK_OK(nostall_config_set(cfg, kv[i][0], kv[i][1]));
    CHECK_OK(nostall_loader_create(&ld, src, cfg));
    nostall_config_free(cfg);
    return ld;
}

/* Check each item of b against its file; fold the batch into *sum. */
static int check_batch(nostall_loader *ld, const nostall_batch *b, size_t room, uint64_t *sum,
                       uint32_t *uses)
{
    const nostall_field *data = nostall_batch_field(b, "data"),
                        *len = nostall_batch_field(b, "length"),
                        *label = nostall_batch_field(b, "label");
    int ok = data && len && label && data->shape_field == 1 && data->item_bytes == room &&
             len->dtype == NOSTALL_DTYPE_INT64 && b->images == data->data;
    for (uint32_t k = 0; ok && k < b->count; k++) {
        const char *p;
        int64_t lab;
        nostall_loader_item(ld, b->indices[k], &p, &lab);
        int i = path_index(p);
        const uint8_t *bytes = (const uint8_t *)data->data + (size_t)k * room;
        int64_t n = ((const int64_t *)len->data)[k];
        if (i < 0 || n != (int64_t)sizes[i] || ((const int64_t *)label->data)[k] != i / 12) {
            ok = 0;
            break;
        }
        FILE *f = fopen(p, "rb");
        uint8_t buf[1024];
        size_t got = fread(buf, 1, sizeof buf, f);
        fclose(f);
        ok &= got == sizes[i] && !memcmp(buf, bytes, got);
        for (size_t j = got; j < room; j++) ok &= bytes[j] == 0;
        if (uses) uses[i]++;
    }
    if (sum) nostall_checksum_batch(sum, b);
    return ok;
}

static uint64_t run_all(const char *threads, const char *extra[][2], int nextra, uint32_t *uses,
                        uint64_t *items)
{
    const char *kv[8][2] = {{"threads", threads},
                            {"batch_size", "5"},
                            {"epochs", "2"},
                            {"seed", "3"}};
    int n = 4;
    for (int i = 0; i < nextra; i++) kv[n][0] = extra[i][0], kv[n][1] = extra[i][1], n++;
    nostall_loader *ld = open_loader(root, kv, n);
    uint64_t sum = 0;
    *items = 0;
    if (!ld) return 0;
    nostall_dataset_info info;
    CHECK_OK(nostall_loader_info(ld, &info, sizeof info));
    CHECK_EQ(info.items, NFILES);
    CHECK_EQ(info.files_ignored, 2);
    CHECK_EQ(info.task, NOSTALL_TASK_BYTES);
    size_t room = 0;
    for (int i = 0; i < NFILES; i++)
        if (sizes[i] > room) room = sizes[i];
    int ok = 1;
    for (;;) {
        nostall_batch b;
        int rc = nostall_loader_next(ld, &b);
        if (rc == NOSTALL_DONE) break;
        if (rc == NOSTALL_EPOCH_END) continue;
        CHECK_OK(rc);
        if (rc < 0) break;
        ok &= check_batch(ld, &b, room, &sum, uses);
        *items += b.count;
        CHECK_OK(nostall_loader_release(ld, &b));
    }
    CHECK(ok);
    nostall_loader_free(ld);
    return sum;
}

static void test_items_and_threads(void)
{
    uint64_t items, s1 = run_all("1", NULL, 0, NULL, &items);
    CHECK_EQ(items, 2 * NFILES);
    CHECK_EQ(run_all("2", NULL, 0, NULL, &items), s1);
    CHECK_EQ(run_all("3", NULL, 0, NULL, &items), s1);
    /* echoing: every file twice per epoch, unchanged, at every item point */
    static const char *points[] = {"fetch", "decode", "augment"};
    for (int p = 0; p < 3; p++) {
        const char *e[][2] = {{"echo_factor", "2"}, {"echo_point", points[p]}};
        uint32_t uses[NFILES] = {0};
        uint64_t a = run_all("1", e, 2, uses, &items), b = run_all("3", e, 2, NULL, &items);
        CHECK_EQ(a, b);
        CHECK_EQ(items, 4 * NFILES);
        int twice = 1;
        for (int i = 0; i < NFILES; i++) twice &= uses[i] == 4;
        CHECK(twice);
    }
    const char *e[][2] = {{"echo_factor", "2"}, {"echo_point", "batch"}};
    run_all("2", e, 2, NULL, &items);
    CHECK_EQ(items, 4 * NFILES);
}

static void test_resume_and_cache(void)
{
    const char *kv[][2] = {{"threads", "2"},
                           {"batch_size", "5"},
                           {"seed", "4"},
                           {"cache_bytes", "1M"},
                           {"epochs", "2"}};
    nostall_loader *a = open_loader(root, kv, 5), *b = open_loader(root, kv, 5);
    if (!a || !b) return;
    nostall_batch x, y;
    nostall_state st;
    for (int i = 0; i < 3; i++) {
        CHECK_OK(nostall_loader_next(a, &x));
        CHECK_OK(nostall_loader_release(a, &x));
    }
    CHECK_OK(nostall_loader_get_state(a, &st));
    CHECK_EQ(st.position, 15);
    CHECK_OK(nostall_loader_set_state(b, &st));
    int same = 1, n = 0, epoch_ends = 0;
    nostall_stats s0 = {0}, s1;
    for (;;) {
        int ra = nostall_loader_next(a, &x), rb = nostall_loader_next(b, &y);
        CHECK_EQ(ra, rb);
        if (ra == NOSTALL_EPOCH_END) {
            if (++epoch_ends == 1) nostall_loader_stats(a, &s0, sizeof s0);
            continue;
        }
        if (ra != 0 || rb != 0) break;
        uint64_t ca = 0, cb = 0;
        nostall_checksum_batch(&ca, &x);
        nostall_checksum_batch(&cb, &y);
        same &= ca == cb && x.count == y.count && !memcmp(x.indices, y.indices, x.count * 8);
        CHECK_OK(nostall_loader_release(a, &x));
        CHECK_OK(nostall_loader_release(b, &y));
        n++;
    }
    CHECK(same);
    CHECK_EQ(n, 2 + 5); /* the rest of epoch 0 (9 items) and epoch 1 */
    nostall_loader_stats(a, &s1, sizeof s1);
    /* the second epoch came from the cache */
    CHECK(s0.storage_reads > 0);
    CHECK_EQ(s1.storage_reads, s0.storage_reads);
    CHECK_EQ(s1.cache_hits - s0.cache_hits, NFILES);
    nostall_loader_free(a);
    nostall_loader_free(b);
}

static void test_bad_items(void)
{
    char bad[4096], p[4300];
    snprintf(bad, sizeof bad, "%s/bad", dir);
    snprintf(p, sizeof p, "mkdir -p '%s/c'", bad);
    if (system(p) != 0) exit(1);
    static const size_t sz[] = {100, 0, 5000, 300};
    static const char *nm[] = {"a", "b_empty", "c_big", "d_grows"};
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/c/%s", bad, nm[i]);
        write_file(p, sz[i], 1);
    }
    /* one item per batch, in order, two slots: d_grows (the last item) is not
     * fetched before the first batches are consumed, so it grows after
     * create and before its fetch */
    const char *kv[][2] = {{"threads", "2"},
                           {"batch_size", "1"},
                           {"batches_ahead", "1"},
                           {"max_file_bytes", "4000"},
                           {"shuffle", "0"}};
    nostall_loader *ld = open_loader(bad, kv, 5);
    if (!ld) return;
    /* the room is the largest file within max_file_bytes: d_grows, 300 */
    snprintf(p, sizeof p, "%s/c/d_grows", bad);
    write_file(p, 301, 1);
    nostall_batch b;
    int delivered = 0, rc;
    while ((rc = nostall_loader_next(ld, &b)) != NOSTALL_EPOCH_END) {
        CHECK_OK(rc);
        if (rc < 0) break;
        const nostall_field *data = nostall_batch_field(&b, "data"),
                            *len = nostall_batch_field(&b, "length");
        CHECK(data && data->item_bytes == 300 && data->shape[0] == 300);
        if (b.count) CHECK(len && ((int64_t *)len->data)[0] == 100);
        delivered += (int)b.count;
        CHECK_OK(nostall_loader_release(ld, &b));
    }
    CHECK_EQ(delivered, 1);
    uint64_t n = nostall_loader_skipped_count(ld);
    CHECK_EQ(n, 3);
    int empty = 0, big = 0, grew = 0;
    for (uint64_t i = 0; i < n; i++) {
        nostall_skip_info si;
        CHECK_OK(nostall_loader_skipped(ld, i, &si));
        if (strstr(si.path, "b_empty") && si.status == NOSTALL_E_EMPTY) empty = 1;
        if (strstr(si.path, "c_big") && si.status == NOSTALL_E_FILE_TOO_LARGE) big = 1;
        if (strstr(si.path, "d_grows") && si.status == NOSTALL_E_FILE_TOO_LARGE &&
            strstr(si.reason, "301 bytes, over the item's room of 300 bytes"))
            grew = 1;
        fprintf(stderr, "skipped: %s: %s\n", si.path, si.reason);
    }
    CHECK(empty && big && grew);
    nostall_loader_free(ld);
    /* fail: the error names the file */
    const char *kf[][2] = {{"threads", "1"},
                           {"batch_size", "4"},
                           {"on_bad_item", "fail"},
                           {"shuffle", "0"}};
    snprintf(p, sizeof p, "%s/c/d_grows", bad);
    write_file(p, 300, 1);
    ld = open_loader(bad, kf, 4);
    if (!ld) return;
    rc = nostall_loader_next(ld, &b);
    CHECK(rc < 0);
    CHECK(strstr(nostall_last_error(), "b_empty") != NULL);
    nostall_loader_free(ld);
}

static void test_lists(void)
{
    static const struct {
        const char *labels[3], *kind;
        nostall_dtype dtype;
        uint32_t ndim;
    } cases[] = {
        {{"0.5", "-1.25", "3"}, "float", NOSTALL_DTYPE_FLOAT32, 0},
        {{"1,4", "2", "0,1,2"}, "multi", NOSTALL_DTYPE_FLOAT32, 1},
        {{NULL, NULL, NULL}, "none", NOSTALL_DTYPE_UINT8, 0},
    };
    for (int c = 0; c < 3; c++) {
        char list[4096];
        snprintf(list, sizeof list, "%s/list_%s.txt", dir, cases[c].kind);
        FILE *f = fopen(list, "w");
        for (int i = 0; i < 3; i++) {
            if (cases[c].labels[i])
                fprintf(f, "%s\t%s\n", paths[i], cases[c].labels[i]);
            else
                fprintf(f, "%s\n", paths[i]);
        }
        fclose(f);
        const char *kv[][2] = {{"batch_size", "3"}, {"shuffle", "0"}};
        nostall_loader *ld = open_loader(list, kv, 2);
        if (!ld) continue;
        nostall_batch b;
        CHECK_OK(nostall_loader_next(ld, &b));
        const nostall_field *label = nostall_batch_field(&b, "label");
        CHECK_EQ(b.nfields, label ? 3 : 2);
        CHECK(b.labels == NULL);
        if (c == 2)
            CHECK(label == NULL);
        else
            CHECK(label && label->dtype == cases[c].dtype && label->ndim == cases[c].ndim);
        if (c == 0 && label) CHECK(((float *)label->data)[1] == -1.25f);
        if (c == 1 && label) { /* multi-hot over 5 classes: item 0 has 1 and 4 */
            const float *m = label->data;
            CHECK(label->shape[0] == 5 && m[0] == 0 && m[1] == 1 && m[4] == 1 && m[5 + 2] == 1);
        }
        for (uint32_t k = 0; k < b.count; k++)
            CHECK(((int64_t *)nostall_batch_field(&b, "length")->data)[k] == (int64_t)sizes[k]);
        CHECK_OK(nostall_loader_release(ld, &b));
        nostall_loader_free(ld);
    }
}

int main(void)
{
    dir = test_tmpdir("test_bytes");
    make_tree();
    test_items_and_threads();
    test_resume_and_cache();
    test_bad_items();
    test_lists();
    TEST_EXIT();
}
