/*
 * test_loader.c — the loader end to end through the public API: delivery
 * exactly once per epoch, epoch ends, determinism across thread counts,
 * resume mid-epoch, sharding, float vs uint8 outputs, the ring's lending
 * rules, stop from another thread, free mid-epoch, fork, and bad items under
 * both policies. Datasets are made with `nostall gen` ($NOSTALL_CLI), and
 * one of mixed JPEG layouts with test_jpeg.h (determinism across thread
 * counts there catches output that depends on what a decoder decoded
 * before, e.g. stale memory read by libjpeg).
 */
#include <pthread.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "check.h"
#include "test_data.h"
#include "test_jpeg.h"

static char data_dir[4096];

/* Run a loader with options kv to its end; return the checksum of every
 * batch and count the items delivered (items may be NULL). */
static uint64_t run_options(const char *src, const char *kv[][2], int n, uint64_t *items)
{
    nostall_config *cfg = make_cfg(kv, n);
    nostall_loader *ld = NULL;
    uint64_t sum = 0, count = 0;
    CHECK_OK(nostall_loader_create(&ld, src, cfg));
    nostall_config_free(cfg);
    if (!ld) return 0;
    for (;;) {
        nostall_batch b;
        int rc = nostall_loader_next(ld, &b);
        if (rc == NOSTALL_DONE) break;
        if (rc == NOSTALL_EPOCH_END) continue;
        CHECK_OK(rc);
        if (rc < 0) break;
        CHECK_EQ(b.struct_size, sizeof b); /* set by the library on every batch */
        count += b.count;
        nostall_checksum_batch(&sum, &b);
        CHECK_OK(nostall_loader_release(ld, &b));
    }
    nostall_loader_free(ld);
    if (items) *items = count;
    return sum;
}

/* Run `epochs` epochs; return the checksum. */
static uint64_t run_checksum(const char *src, const char *threads, const char *seed,
                             const char *output, int epochs)
{
    char ep[16];
    snprintf(ep, sizeof ep, "%d", epochs);
    const char *kv[][2] = {{"threads", threads}, {"seed", seed}, {"batch_size", "7"},
                           {"crop", "24"},       {"epochs", ep}, {"output", output}};
    return run_options(src, kv, 6, NULL);
}

static void test_epochs_exactly_once(void)
{
    const char *kv[][2] = {{"threads", "3"},
                           {"batch_size", "8"},
                           {"crop", "32"},
                           {"epochs", "2"},
                           {"output", "uint8"}};
    nostall_config *cfg = make_cfg(kv, 5);
    nostall_loader *ld = NULL;
    nostall_dataset_info info;
    CHECK_OK(nostall_loader_create(&ld, data_dir, cfg));
    nostall_config_free(cfg);
    if (!ld) return;
    CHECK_OK(nostall_loader_info(ld, &info, sizeof info));
    CHECK_EQ(info.items, 60);
    CHECK_EQ(info.classes, 4);
    CHECK_EQ(info.items_per_epoch, 60);
    CHECK_EQ(info.batches_per_epoch, 8); /* 7 full + one of 4 */
    int seen[60];
    int epoch = 0, ends = 0, batches = 0;
    uint64_t first_order[60], order[60];
    int n = 0;
    memset(seen, 0, sizeof seen);
    for (;;) {
        nostall_batch b;
        int rc = nostall_loader_next(ld, &b);
        if (rc == NOSTALL_DONE) break;
        if (rc == NOSTALL_EPOCH_END) {
            for (int i = 0; i < 60; i++) CHECK_EQ(seen[i], 1);
            CHECK_EQ(n, 60);
            if (epoch == 0)
                memcpy(first_order, order, sizeof order);
            else
                CHECK(memcmp(first_order, order, sizeof order) != 0); /* reshuffled */
            memset(seen, 0, sizeof seen);
            n = 0;
            epoch++;
            ends++;
            nostall_state st;
            CHECK_OK(nostall_loader_get_state(ld, &st));
            CHECK_EQ(st.epoch, (uint64_t)epoch);
            CHECK_EQ(st.position, 0);
            continue;
        }
        CHECK_OK(rc);
        if (rc < 0) break;
        batches++;
        CHECK_EQ(b.epoch, (uint64_t)epoch);
        CHECK_EQ(b.position, (uint64_t)n);
        CHECK(b.count == 8 || (b.count == 4 && n == 56));
        CHECK_EQ(b.dtype, NOSTALL_DTYPE_UINT8);
        CHECK_EQ(b.layout, NOSTALL_LAYOUT_NHWC);
        CHECK_EQ(b.item_bytes, 32 * 32 * 3);
        for (uint32_t i = 0; i < b.count; i++) {
            const char *path;
            int64_t label;
            CHECK(b.indices[i] < 60);
            if (b.indices[i] >= 60) continue;
            seen[b.indices[i]]++;
            order[n++] = b.indices[i];
            CHECK_OK(nostall_loader_item(ld, b.indices[i], &path, &label));
            CHECK_EQ(b.labels[i], label);
            /* gen writes class_00K folders: label K */
            char want[32];
            snprintf(want, sizeof want, "class_%03d", (int)label);
            CHECK(strstr(path, want) != NULL);
        }
        nostall_state st;
        CHECK_OK(nostall_loader_get_state(ld, &st));
        CHECK_EQ(st.position, (uint64_t)n);
        CHECK_OK(nostall_loader_release(ld, &b));
    }
    CHECK_EQ(ends, 2);
    CHECK_EQ(batches, 16);
    /* DONE is sticky */
    nostall_batch b;
    CHECK_RC(nostall_loader_next(ld, &b), NOSTALL_DONE);
    nostall_stats st;
    CHECK_OK(nostall_loader_stats(ld, &st, sizeof st));
    CHECK_EQ(st.items_delivered, 120);
    CHECK_EQ(st.batches_delivered, 16);
    CHECK(st.decode_items >= 120);
    CHECK(st.fetch_bytes > 0);
    CHECK_EQ(st.skipped, 0);
    CHECK_EQ(st.threads, 3);
    nostall_loader_free(ld);
}

static void test_determinism(void)
{
    uint64_t a = run_checksum(data_dir, "1", "5", "float", 2);
    uint64_t b = run_checksum(data_dir, "2", "5", "float", 2);
    uint64_t c = run_checksum(data_dir, "8", "5", "float", 2);
    uint64_t d = run_checksum(data_dir, "2", "6", "float", 2);
    uint64_t e = run_checksum(data_dir, "3", "5", "uint8", 2);
    CHECK(a != 0);
    CHECK(a == b);
    CHECK(a == c);
    CHECK(a != d);
    CHECK(a != e);
}

/* float output == LUT(uint8 output) for the same seed: one pixel path. */
static void test_float_matches_uint8(void)
{
    const char *ku[][2] = {{"threads", "2"},
                           {"batch_size", "5"},
                           {"crop", "16"},
                           {"output", "uint8"},
                           {"seed", "9"}};
    const char *kf[][2] = {{"threads", "2"},
                           {"batch_size", "5"},
                           {"crop", "16"},
                           {"output", "float"},
                           {"seed", "9"}};
    nostall_config *cu = make_cfg(ku, 5), *cf = make_cfg(kf, 5);
    nostall_loader *lu = NULL, *lf = NULL;
    CHECK_OK(nostall_loader_create(&lu, data_dir, cu));
    CHECK_OK(nostall_loader_create(&lf, data_dir, cf));
    nostall_config_free(cu);
    nostall_config_free(cf);
    if (!lu || !lf) goto out;
    const double mean[3] = {0.485, 0.456, 0.406}, sd[3] = {0.229, 0.224, 0.225};
    for (int k = 0; k < 3; k++) {
        nostall_batch bu, bf;
        CHECK_OK(nostall_loader_next(lu, &bu));
        CHECK_OK(nostall_loader_next(lf, &bf));
        CHECK_EQ(bf.dtype, NOSTALL_DTYPE_FLOAT32);
        CHECK_EQ(bf.layout, NOSTALL_LAYOUT_NCHW);
        CHECK_EQ(bu.count, bf.count);
        const uint8_t *u = bu.images;
        const float *f = bf.images;
        double maxerr = 0;
        for (uint32_t i = 0; i < bu.count; i++)
            for (int c = 0; c < 3; c++)
                for (int p = 0; p < 16 * 16; p++) {
                    double want = (u[(size_t)i * 768 + (size_t)p * 3 + c] / 255.0 - mean[c]) / sd[c];
                    double got = f[(size_t)i * 768 + (size_t)c * 256 + p];
                    double err = want > got ? want - got : got - want;
                    if (err > maxerr) maxerr = err;
                }
        CHECK(maxerr < 1e-5);
        CHECK_OK(nostall_loader_release(lu, &bu));
        CHECK_OK(nostall_loader_release(lf, &bf));
    }
out:
    nostall_loader_free(lu);
    nostall_loader_free(lf);
}

/* Resume mid-epoch: a fresh loader set to (epoch 1, 21) delivers exactly what
 * the first loader delivered from there. */
static void test_resume(void)
{
    const char *kv[][2] = {{"threads", "2"}, {"batch_size", "7"}, {"crop", "20"}, {"seed", "3"}};
    nostall_config *cfg = make_cfg(kv, 4);
    nostall_loader *a = NULL, *b = NULL;
    uint64_t sums_a[32], sums_b[32];
    int na = 0, nb = 0, started = 0;
    CHECK_OK(nostall_loader_create(&a, data_dir, cfg));
    CHECK_OK(nostall_loader_create(&b, data_dir, cfg));
    nostall_config_free(cfg);
    if (!a || !b) goto out;
    /* a: epochs 0 and 1 in full; keep the batches after (1, 21). */
    for (int ends = 0; ends < 2;) {
        nostall_batch x;
        int rc = nostall_loader_next(a, &x);
        if (rc == NOSTALL_EPOCH_END) {
            ends++;
            continue;
        }
        CHECK_OK(rc);
        if (rc < 0) goto out;
        if (x.epoch == 1 && x.position >= 21 && na < 32) {
            uint64_t s = 0;
            nostall_checksum_batch(&s, &x);
            sums_a[na++] = s;
        }
        nostall_loader_release(a, &x);
    }
    /* b: consume a little of epoch 0, then jump. */
    nostall_batch y, kept;
    CHECK_OK(nostall_loader_next(b, &kept));
    uint64_t kept_sum = 0, kept_after = 0;
    nostall_checksum_batch(&kept_sum, &kept);
    /* A batch still lent stays valid, unchanged, across set_state. */
    CHECK_OK(nostall_loader_set_state(b, &(nostall_state){.epoch = 1, .position = 21}));
    CHECK_RC(nostall_loader_set_state(b, &(nostall_state){.epoch = 1, .position = 61}),
             NOSTALL_E_INVALID);
    for (;;) {
        int rc = nostall_loader_next(b, &y);
        if (rc == NOSTALL_EPOCH_END) break;
        CHECK_OK(rc);
        if (rc < 0) goto out;
        if (!started) {
            CHECK_EQ(y.epoch, 1);
            CHECK_EQ(y.position, 21);
            started = 1;
        }
        uint64_t s = 0;
        nostall_checksum_batch(&s, &y);
        if (nb < 32) sums_b[nb++] = s;
        nostall_loader_release(b, &y);
    }
    nostall_checksum_batch(&kept_after, &kept);
    CHECK_EQ(kept_after, kept_sum);
    CHECK_OK(nostall_loader_release(b, &kept));
    CHECK_RC(nostall_loader_release(b, &kept), NOSTALL_E_INVALID); /* not lent any more */
    CHECK_EQ(na, 6); /* 21..27 28..34 35..41 42..48 49..55 56..59 */
    CHECK_EQ(na, nb);
    CHECK(memcmp(sums_a, sums_b, sizeof(uint64_t) * (size_t)(na < nb ? na : nb)) == 0);
out:
    nostall_loader_free(a);
    nostall_loader_free(b);
}

static void test_sharding(void)
{
    int owner[60];
    for (int i = 0; i < 60; i++) owner[i] = -1;
    for (int r = 0; r < 3; r++) {
        char rank[8];
        snprintf(rank, sizeof rank, "%d", r);
        const char *kv[][2] = {{"threads", "2"},    {"batch_size", "6"}, {"crop", "8"},
                               {"world_size", "3"}, {"rank", rank},      {"drop_last", "1"},
                               {"seed", "11"},      {"epochs", "1"}};
        nostall_config *cfg = make_cfg(kv, 8);
        nostall_loader *ld = NULL;
        CHECK_OK(nostall_loader_create(&ld, data_dir, cfg));
        nostall_config_free(cfg);
        if (!ld) continue;
        int n = 0;
        nostall_batch b;
        int rc;
        while ((rc = nostall_loader_next(ld, &b)) == 0) {
            CHECK_EQ(b.count, 6);
            for (uint32_t i = 0; i < b.count; i++) {
                CHECK(owner[b.indices[i]] == -1); /* disjoint across ranks */
                owner[b.indices[i]] = r;
                n++;
            }
            nostall_loader_release(ld, &b);
        }
        CHECK_RC(rc, NOSTALL_EPOCH_END);
        CHECK_EQ(n, 18); /* 20 per rank, drop_last batches of 6 */
        nostall_loader_free(ld);
    }
}

static void test_lending_rules(void)
{
    /* on_bad_item=fail: no slot for a top-up's reserve (the ring is 3) */
    const char *kv[][2] = {{"threads", "2"},       {"batch_size", "4"}, {"crop", "8"},
                           {"batches_ahead", "2"}, {"epochs", "3"},     {"on_bad_item", "fail"}};
    nostall_config *cfg = make_cfg(kv, 6);
    nostall_loader *ld = NULL;
    CHECK_OK(nostall_loader_create(&ld, data_dir, cfg));
    nostall_config_free(cfg);
    if (!ld) return;
    nostall_batch b[4];
    uint64_t sum0 = 0, sum2 = 0, again = 0;
    CHECK_OK(nostall_loader_next(ld, &b[0]));
    CHECK_OK(nostall_loader_next(ld, &b[1]));
    CHECK_OK(nostall_loader_next(ld, &b[2]));
    nostall_checksum_batch(&sum0, &b[0]);
    nostall_checksum_batch(&sum2, &b[2]);
    /* ring of 3 slots all lent */
    CHECK_RC(nostall_loader_next(ld, &b[3]), NOSTALL_E_STATE);
    CHECK_OK(nostall_loader_release(ld, &b[1]));                    /* any order */
    CHECK_RC(nostall_loader_release(ld, &b[1]), NOSTALL_E_INVALID); /* twice */
    CHECK_OK(nostall_loader_next(ld, &b[3]));
    CHECK_EQ(b[3].position, 12);
    CHECK(b[3].images == b[1].images); /* the only free slot */
    CHECK_OK(nostall_loader_release(ld, &b[2]));
    CHECK_OK(nostall_loader_release(ld, &b[3]));
    /* b[0] kept lent for the rest of the run: the other two slots carry on,
     * and its bytes never change. */
    uint64_t items = 0;
    for (int done = 0; !done;) {
        nostall_batch x;
        int rc = nostall_loader_next(ld, &x);
        if (rc == NOSTALL_EPOCH_END) continue;
        if (rc == NOSTALL_DONE) break;
        CHECK_OK(rc);
        if (rc < 0) break;
        CHECK(x.images != b[0].images);
        items += x.count;
        CHECK_OK(nostall_loader_release(ld, &x));
    }
    CHECK_EQ(items, 3 * 60 - 16);
    nostall_checksum_batch(&again, &b[0]);
    CHECK_EQ(again, sum0);
    (void)sum2;
    /* free with a batch still lent */
    nostall_loader_free(ld);
}

static void *stopper(void *arg)
{
    usleep(100 * 1000);
    nostall_loader_stop(arg);
    return NULL;
}

static void test_stop_and_free(void)
{
    /* One thread and a tiny ring: the consumer will be waiting. */
    const char *kv[][2] = {{"threads", "1"},
                           {"batch_size", "60"},
                           {"crop", "64"},
                           {"batches_ahead", "1"}};
    nostall_config *cfg = make_cfg(kv, 4);
    nostall_loader *ld = NULL;
    CHECK_OK(nostall_loader_create(&ld, data_dir, cfg));
    if (ld) {
        /* timed next: times out with nothing changed, then delivers */
        nostall_batch tb;
        int rc0 = nostall_loader_next_timed(ld, &tb, 0);
        CHECK(rc0 == NOSTALL_TIMEOUT || rc0 == 0);
        if (rc0 == NOSTALL_TIMEOUT) {
            nostall_state st;
            nostall_loader_get_state(ld, &st);
            CHECK_EQ(st.position, 0);
            for (int i = 0; i < 600 && rc0 == NOSTALL_TIMEOUT; i++)
                rc0 = nostall_loader_next_timed(ld, &tb, 50);
        }
        CHECK_RC(rc0, 0);
        if (rc0 == 0) {
            CHECK_EQ(tb.position, 0);
            CHECK_EQ(tb.count, 60);
            nostall_loader_release(ld, &tb);
        }
        pthread_t t;
        pthread_create(&t, NULL, stopper, ld);
        nostall_batch b;
        int rc = 0;
        for (int i = 0; i < 1000 && rc >= 0; i++) { /* ends by E_STOPPED */
            rc = nostall_loader_next(ld, &b);
            if (rc == 0) nostall_loader_release(ld, &b);
        }
        CHECK_RC(rc, NOSTALL_E_STOPPED);
        CHECK_RC(nostall_loader_next(ld, &b), NOSTALL_E_STOPPED);
        pthread_join(t, NULL);
        nostall_loader_free(ld);
    }
    /* Free immediately, mid-first-epoch, with workers busy. */
    for (int i = 0; i < 5; i++) {
        ld = NULL;
        CHECK_OK(nostall_loader_create(&ld, data_dir, cfg));
        if (i & 1) {
            nostall_batch b;
            CHECK_OK(nostall_loader_next(ld, &b));
        }
        nostall_loader_free(ld);
    }
    nostall_config_free(cfg);
    nostall_loader_free(NULL);

    /* free during an emulated read that would take minutes returns at once */
    /* 1e-7 MB/s: every file's read would take hours; a free that waited
     * for one would blow any bound, and 30 s holds beside a loaded machine */
    const char *slow[][2] = {{"threads", "2"}, {"crop", "8"}, {"storage_mbps", "0.0000001"}};
    cfg = make_cfg(slow, 3);
    ld = NULL;
    CHECK_OK(nostall_loader_create(&ld, data_dir, cfg));
    nostall_config_free(cfg);
    usleep(100 * 1000);
    struct timespec a, z;
    clock_gettime(CLOCK_MONOTONIC, &a);
    nostall_loader_free(ld);
    clock_gettime(CLOCK_MONOTONIC, &z);
    double took = (double)(z.tv_sec - a.tv_sec) + (double)(z.tv_nsec - a.tv_nsec) * 1e-9;
    if (took >= 30.0) fprintf(stderr, "free took %.2f s during an emulated read\n", took);
    CHECK(took < 30.0);
}

static void test_fork(void)
{
    nostall_loader *ld = NULL;
    const char *kv[][2] = {{"threads", "1"}, {"crop", "8"}};
    nostall_config *cfg = make_cfg(kv, 2);
    CHECK_OK(nostall_loader_create(&ld, data_dir, cfg));
    nostall_config_free(cfg);
    if (!ld) return;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        nostall_batch b;
        nostall_state st;
        int ok = nostall_loader_next(ld, &b) == NOSTALL_E_FORK &&
                 nostall_loader_get_state(ld, &st) == NOSTALL_E_FORK &&
                 nostall_loader_set_state(ld, &st) == NOSTALL_E_FORK;
        nostall_loader_free(ld); /* must return at once in the child */
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    nostall_loader_free(ld);
}

static void test_bad_options(void)
{
    nostall_loader *ld = NULL;
    const char *kv[][2] = {{"rank", "3"}, {"world_size", "3"}};
    nostall_config *cfg = make_cfg(kv, 2);
    CHECK_RC(nostall_loader_create(&ld, data_dir, cfg), NOSTALL_E_OPTION);
    CHECK(strstr(nostall_last_error(), "rank") != NULL);
    CHECK(ld == NULL);
    nostall_config_free(cfg);
    const char *kv2[][2] = {{"scale_min", "0.9"}, {"scale_max", "0.5"}};
    cfg = make_cfg(kv2, 2);
    CHECK_RC(nostall_loader_create(&ld, data_dir, cfg), NOSTALL_E_OPTION);
    CHECK(strstr(nostall_last_error(), "scale_min") != NULL);
    nostall_config_free(cfg);
    const char *kv3[][2] = {{"drop_last", "1"}, {"batch_size", "61"}};
    cfg = make_cfg(kv3, 2);
    CHECK_RC(nostall_loader_create(&ld, data_dir, cfg), NOSTALL_E_OPTION);
    nostall_config_free(cfg);
    CHECK_RC(nostall_loader_create(&ld, "/nonexistent/nostall-data", NULL), NOSTALL_E_NOT_FOUND);
    CHECK(strstr(nostall_last_error(), "/nonexistent/nostall-data") != NULL);
}

/* ------------------------------------------------------------------------
 * Bad items.
 * ------------------------------------------------------------------------ */

static size_t slurp(const char *path, unsigned char **out)
{
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *out = malloc((size_t)n);
    size_t got = fread(*out, 1, (size_t)n, f);
    fclose(f);
    return got;
}

static void spit(const char *dir, const char *name, const void *p, size_t n)
{
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) exit(1);
    if (n) fwrite(p, 1, n, f);
    fclose(f);
}

/* Every sampling layout, colour space and scan kind we know of, in sizes
 * that make RandomResizedCrop pick every DCT scale: the same checksum with
 * 1, 2 and 3 threads (a worker's decoder sees a different sequence of
 * files with each). */
static void test_determinism_layouts(void)
{
    const char *dir = test_tmpdir("loader-layouts");
    char cls[8192];
    snprintf(cls, sizeof cls, "%s/c0", dir);
    if (mkdir(cls, 0755) != 0) {
        CHECK(0);
        return;
    }
    static const int samp[][2] = {{2, 2}, {2, 1}, {1, 1}, {4, 2}, {2, 4}, {4, 1}, {1, 2}, {1, 4}};
    static const int sizes[][2] = {{400, 300}, {257, 391}, {61, 45}, {640, 480}};
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    int n = 0;
    for (int kind = 0; kind < 12; kind++)
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            const int w = sizes[si][0], h = sizes[si][1];
            const int comps = kind == 9 ? 1 : kind == 10 ? 4 : 3;
            uint8_t *px = malloc((size_t)w * h * comps);
            for (int y = 0; y < h; y++)
                for (int x = 0; x < w; x++)
                    for (int c = 0; c < comps; c++)
                        px[((size_t)y * w + x) * comps + c] =
                            (uint8_t)((x * (c + 1) + y * (3 - c) + (test_xorshift(&rng) & 31)) &
                                      255);
            test_jpeg_opts o = {w,
                                h,
                                comps,
                                comps == 1   ? JCS_GRAYSCALE
                                : comps == 4 ? JCS_CMYK
                                             : JCS_RGB,
                                comps == 4 ? JCS_YCCK : JCS_UNKNOWN,
                                70 + kind * 2,
                                0,
                                0,
                                0};
            test_jpeg_layout l = {0};
            if (kind < 8) {
                l.luma_h = samp[kind][0];
                l.luma_v = samp[kind][1];
                l.restart_mcus = si == 1 ? 1 : si == 3 ? 5 : 0;
                l.optimize = (int)(si & 1);
            }
            if (kind == 8) o.progressive = 1;
            if (kind == 11) o.restart_rows = 2;
            size_t len;
            uint8_t *j = test_jpeg_encode_ex(px, &o, &l, &len);
            char name[64];
            snprintf(name, sizeof name, "c0/k%02d-%zu.jpg", kind, si);
            spit(dir, name, j, len);
            free(j);
            free(px);
            n++;
        }
    uint64_t sums[3];
    for (int t = 0; t < 3; t++) {
        char th[8];
        snprintf(th, sizeof th, "%d", t + 1);
        const char *kv[][2] = {{"threads", th},      {"seed", "11"},  {"batch_size", "5"},
                               {"crop", "56"},       {"epochs", "3"}, {"output", "uint8"},
                               {"scale_min", "0.02"}};
        uint64_t items = 0;
        sums[t] = run_options(dir, kv, 7, &items);
        CHECK_EQ(items, (uint64_t)n * 3);
    }
    CHECK(sums[0] != 0);
    CHECK(sums[0] == sums[1]);
    CHECK(sums[0] == sums[2]);
}

struct bad_case {
    const char *name;
    int status;
};

static char bad_dir[4096];

static void test_bad_items(void)
{
    const char *dir = strcpy(bad_dir, test_tmpdir("loader-bad"));
    char cls[8192], good[8192];
    gen_dataset(dir, 20, 2);
    snprintf(cls, sizeof cls, "%s/class_000", dir);
    snprintf(good, sizeof good, "%s/img_000000.jpg", cls);
    unsigned char *jpg = NULL;
    size_t n = slurp(good, &jpg);
    CHECK(n > 200);
    if (n <= 200) return;

    spit(cls, "zz_empty.jpg", "", 0);
    spit(cls, "zz_text.jpg", "this is not an image\n", 21);
    spit(cls, "zz_truncated.jpg", jpg, n / 2);
    unsigned char *bad = malloc(n);
    memcpy(bad, jpg, n);
    for (size_t i = n / 3; i < n / 3 + 64 && i < n - 2; i++) bad[i] = (unsigned char)(i * 7 + 0xf1);
    for (size_t i = n / 3 + 64; i < n - 2; i += 97) bad[i] = 0xff, bad[i + 1] = 0xd0 + (i & 7);
    spit(cls, "zz_corrupt.jpg", bad, n);
    /* forge the frame header to 60000 x 60000 */
    memcpy(bad, jpg, n);
    for (size_t i = 2; i + 9 < n; i++)
        if (bad[i] == 0xff && (bad[i + 1] == 0xc0 || bad[i + 1] == 0xc2)) {
            bad[i + 5] = 0xea, bad[i + 6] = 0x60, bad[i + 7] = 0xea, bad[i + 8] = 0x60;
            break;
        }
    spit(cls, "zz_huge.jpg", bad, n);
    /* a file over max_file_bytes (set below to 64 KiB) */
    unsigned char *big = calloc(1, 70000);
    memcpy(big, jpg, n < 70000 ? n : 70000);
    spit(cls, "zz_bigfile.jpg", big, 70000);
    free(big);
    free(bad);
    free(jpg);
    static const struct bad_case cases[] = {
        {"zz_bigfile.jpg", NOSTALL_E_FILE_TOO_LARGE},
        {"zz_corrupt.jpg", NOSTALL_E_CORRUPT},
        {"zz_empty.jpg", NOSTALL_E_EMPTY},
        {"zz_huge.jpg", NOSTALL_E_TOO_MANY_PIXELS},
        {"zz_text.jpg", NOSTALL_E_NOT_IMAGE},
        {"zz_truncated.jpg", NOSTALL_E_TRUNCATED},
    };

    /* skip: every good item delivered each epoch, every bad one listed. */
    for (int threads = 1; threads <= 4; threads += 3) {
        char th[8];
        snprintf(th, sizeof th, "%d", threads);
        const char *kv[][2] = {{"threads", th},
                               {"batch_size", "4"},
                               {"crop", "16"},
                               {"epochs", "2"},
                               {"max_file_bytes", "64K"}};
        nostall_config *cfg = make_cfg(kv, 5);
        nostall_loader *ld = NULL;
        CHECK_OK(nostall_loader_create(&ld, dir, cfg));
        nostall_config_free(cfg);
        if (!ld) return;
        int delivered = 0;
        for (;;) {
            nostall_batch b;
            int rc = nostall_loader_next(ld, &b);
            if (rc == NOSTALL_DONE) break;
            if (rc == NOSTALL_EPOCH_END) continue;
            CHECK_OK(rc);
            if (rc < 0) break;
            for (uint32_t i = 0; i < b.count; i++) {
                const char *p;
                nostall_loader_item(ld, b.indices[i], &p, NULL);
                CHECK(strstr(p, "zz_") == NULL);
            }
            delivered += (int)b.count;
            nostall_loader_release(ld, &b);
        }
        CHECK_EQ(delivered, 40);
        CHECK_EQ(nostall_loader_skipped_count(ld), 6);
        nostall_stats st;
        nostall_loader_stats(ld, &st, sizeof st);
        CHECK_EQ(st.skipped, 12);
        CHECK_EQ(st.skipped_unique, 6);
        for (uint64_t i = 0; i < 6; i++) {
            nostall_skip_info si;
            CHECK_OK(nostall_loader_skipped(ld, i, &si));
            int found = 0;
            for (size_t k = 0; k < sizeof cases / sizeof *cases; k++)
                if (strstr(si.path, cases[k].name)) {
                    found = 1;
                    if (si.status != cases[k].status)
                        fprintf(stderr, "%s: got %s (%s), want %s\n", cases[k].name,
                                nostall_status_name(si.status), si.reason,
                                nostall_status_name(cases[k].status));
                    CHECK_EQ(si.status, cases[k].status);
                    CHECK(strstr(si.reason, cases[k].name) != NULL);
                }
            CHECK(found);
        }
        nostall_skip_info si;
        CHECK_RC(nostall_loader_skipped(ld, 6, &si), NOSTALL_E_INVALID);
        nostall_loader_free(ld);
    }

    /* fail: the error names the first bad file in delivery order, after the
     * batches before it were delivered; sticky. Same result for 1 and 4
     * threads. */
    char first_msg[2][1024];
    for (int k = 0; k < 2; k++) {
        const char *kv[][2] = {{"threads", k ? "4" : "1"},
                               {"batch_size", "4"},
                               {"crop", "16"},
                               {"on_bad_item", "fail"},
                               {"max_file_bytes", "64K"},
                               {"seed", "1"}};
        nostall_config *cfg = make_cfg(kv, 6);
        nostall_loader *ld = NULL;
        CHECK_OK(nostall_loader_create(&ld, dir, cfg));
        nostall_config_free(cfg);
        if (!ld) return;
        int rc;
        nostall_batch b;
        while ((rc = nostall_loader_next(ld, &b)) == 0) nostall_loader_release(ld, &b);
        CHECK(rc < 0);
        CHECK(strstr(nostall_last_error(), "zz_") != NULL);
        snprintf(first_msg[k], sizeof first_msg[k], "%s", nostall_last_error());
        CHECK_RC(nostall_loader_next(ld, &b), rc);
        nostall_loader_free(ld);
    }
    CHECK(strcmp(first_msg[0], first_msg[1]) == 0);
}


/* Collect the checksum of each batch and the items of each epoch of a
 * loader; returns the number of batches (at most nb). */
static int run_batches(nostall_loader *ld, uint64_t *sums, int nb, uint32_t *counts)
{
    int k = 0;
    for (;;) {
        nostall_batch b;
        int rc = nostall_loader_next(ld, &b);
        if (rc == NOSTALL_DONE) break;
        if (rc == NOSTALL_EPOCH_END) continue;
        CHECK_OK(rc);
        if (rc < 0) break;
        if (k < nb) {
            sums[k] = 0;
            nostall_checksum_batch(&sums[k], &b);
            if (counts) counts[k] = b.count;
            k++;
        }
        CHECK_OK(nostall_loader_release(ld, &b));
    }
    return k;
}

/* drop_last with skipped items: every batch is full (filled from the items
 * after it, then the remainder drop_last leaves out, then the shard again
 * from its start), every epoch has the plan's 8 batches and every good item
 * (none more than twice), the bytes are the same for 1-3 threads, and a
 * state saved mid-epoch resumes exactly (the fill carries over in the
 * state). */
static void test_drop_last_full_batches(const char *dir)
{
    uint64_t ref[64];
    int nref = 0;
    for (int threads = 1; threads <= 3; threads++) {
        char th[8];
        snprintf(th, sizeof th, "%d", threads);
        const char *kv[][2] = {{"threads", th}, {"batch_size", "3"},       {"crop", "16"},
                               {"epochs", "3"}, {"max_file_bytes", "64K"}, {"drop_last", "1"},
                               {"seed", "5"}};
        nostall_config *cfg = make_cfg(kv, 7);
        nostall_loader *ld = NULL;
        CHECK_OK(nostall_loader_create(&ld, dir, cfg));
        nostall_config_free(cfg);
        if (!ld) return;
        uint64_t sums[64];
        int n = 0, seen[64] = {0};
        uint64_t epoch = 0, items = 0;
        for (;;) {
            nostall_batch b;
            int rc = nostall_loader_next(ld, &b);
            if (rc == NOSTALL_DONE) break;
            if (rc == NOSTALL_EPOCH_END) {
                int distinct = 0;
                for (int i = 0; i < 64; i++) distinct += seen[i] > 0;
                CHECK_EQ(distinct, 20); /* every good item */
                memset(seen, 0, sizeof seen);
                epoch++;
                continue;
            }
            CHECK_OK(rc);
            if (rc < 0) break;
            CHECK_EQ(b.count, 3);
            CHECK_EQ(b.epoch, epoch);
            for (uint32_t i = 0; i < b.count; i++) {
                const char *p;
                nostall_loader_item(ld, b.indices[i], &p, NULL);
                CHECK(strstr(p, "zz_") == NULL);
                CHECK(b.indices[i] < 64 && seen[b.indices[i]] < 2);
                seen[b.indices[i] < 64 ? b.indices[i] : 0]++;
            }
            items += b.count;
            if (n < 64) {
                sums[n] = 0;
                nostall_checksum_batch(&sums[n], &b);
                n++;
            }
            CHECK_OK(nostall_loader_release(ld, &b));
        }
        /* 26 files, 6 bad; drop_last plans 8 batches = 24 positions. */
        CHECK_EQ(items, 3 * 24);
        CHECK(nostall_loader_skipped_count(ld) >= 1);
        if (threads == 1) {
            memcpy(ref, sums, sizeof sums);
            nref = n;
        } else {
            CHECK_EQ(n, nref);
            CHECK(memcmp(ref, sums, sizeof(uint64_t) * (size_t)(n < nref ? n : nref)) == 0);
        }
        nostall_loader_free(ld);
    }
    /* Resume after each batch of epoch 1: the rest matches the full run. */
    for (int at = 0; at < 6; at++) {
        const char *kv[][2] = {{"threads", "2"}, {"batch_size", "3"},       {"crop", "16"},
                               {"epochs", "3"},  {"max_file_bytes", "64K"}, {"drop_last", "1"},
                               {"seed", "5"}};
        nostall_config *cfg = make_cfg(kv, 7);
        nostall_loader *a = NULL, *b = NULL;
        CHECK_OK(nostall_loader_create(&a, dir, cfg));
        CHECK_OK(nostall_loader_create(&b, dir, cfg));
        nostall_config_free(cfg);
        if (!a || !b) return;
        nostall_state st;
        int k = 0, done = 0;
        nostall_batch x;
        int rc;
        while (!done && (rc = nostall_loader_next(a, &x)) != NOSTALL_DONE) {
            if (rc == NOSTALL_EPOCH_END) continue;
            CHECK_OK(rc);
            if (rc < 0) break;
            nostall_loader_release(a, &x);
            if (x.epoch == 1 && ++k > at)
                done = 1;
            else if (x.epoch == 0)
                k = 0;
        }
        CHECK_OK(nostall_loader_get_state(a, &st));
        CHECK_EQ(st.epoch, 1);
        CHECK_OK(nostall_loader_set_state(b, &st));
        uint64_t rest_a[64], rest_b[64];
        int na = run_batches(a, rest_a, 64, NULL), nb = run_batches(b, rest_b, 64, NULL);
        CHECK_EQ(na, nb);
        CHECK(na > 0 && memcmp(rest_a, rest_b, sizeof(uint64_t) * (size_t)(na < nb ? na : nb)) == 0);
        nostall_loader_free(a);
        nostall_loader_free(b);
    }
}

/* A state knows what it resumes: another seed, dataset or option is
 * refused naming the difference; another world size is remapped so the
 * union of what the old and new ranks deliver is one epoch. */
static void test_state_identity(const char *dir)
{
    const char *kv[][2] = {{"threads", "2"},
                           {"batch_size", "4"},
                           {"crop", "16"},
                           {"seed", "9"},
                           {"epochs", "4"}};
    nostall_config *cfg = make_cfg(kv, 5);
    nostall_loader *a = NULL, *other = NULL;
    nostall_state st;
    CHECK_OK(nostall_loader_create(&a, data_dir, cfg));
    if (!a) {
        nostall_config_free(cfg);
        return;
    }
    CHECK_OK(nostall_loader_get_state(a, &st));
    CHECK_EQ(st.version, NOSTALL_STATE_VERSION);
    CHECK_EQ(st.items, 60);
    CHECK_EQ(st.seed, 9);
    CHECK_EQ(st.world_size, 1);
    CHECK(st.fingerprint != 0);
    CHECK_OK(nostall_loader_set_state(a, &st));
    CHECK_RC(nostall_loader_set_state(a, &(nostall_state){.epoch = 4}), NOSTALL_E_INVALID);
    CHECK(strstr(nostall_last_error(), "epochs=4") != NULL);
    nostall_state s2 = st;
    s2.seed = 10;
    CHECK_RC(nostall_loader_set_state(a, &s2), NOSTALL_E_STATE);
    CHECK(strstr(nostall_last_error(), "seed 10") != NULL);
    s2 = st;
    s2.fingerprint ^= 1;
    CHECK_RC(nostall_loader_set_state(a, &s2), NOSTALL_E_STATE);
    /* another dataset */
    CHECK_OK(nostall_loader_create(&other, dir, cfg));
    if (other) {
        CHECK_RC(nostall_loader_set_state(other, &st), NOSTALL_E_STATE);
        CHECK(strstr(nostall_last_error(), "60 items") != NULL);
        nostall_loader_free(other);
        other = NULL;
    }
    /* another byte-affecting option, same dataset */
    nostall_config_set(cfg, "crop", "20");
    CHECK_OK(nostall_loader_create(&other, data_dir, cfg));
    if (other) {
        CHECK_RC(nostall_loader_set_state(other, &st), NOSTALL_E_STATE);
        nostall_loader_free(other);
    }
    nostall_config_free(cfg);
    nostall_loader_free(a);

    /* 2 ranks -> 1 rank, and 2 -> 3, mid-epoch 1. */
    for (int newworld = 1; newworld <= 3; newworld += 2) {
        int count[60] = {0};
        nostall_state saved;
        for (int r = 0; r < 2; r++) {
            char rank[4];
            snprintf(rank, sizeof rank, "%d", r);
            const char *kr[][2] = {{"threads", "2"}, {"batch_size", "4"}, {"crop", "8"},
                                   {"seed", "9"},    {"rank", rank},      {"world_size", "2"}};
            nostall_config *c = make_cfg(kr, 6);
            nostall_loader *ld = NULL;
            CHECK_OK(nostall_loader_create(&ld, data_dir, c));
            nostall_config_free(c);
            if (!ld) return;
            CHECK_OK(nostall_loader_set_state(ld, &(nostall_state){.epoch = 1}));
            for (int k = 0; k < 3; k++) { /* 12 items of this rank */
                nostall_batch b;
                CHECK_OK(nostall_loader_next(ld, &b));
                for (uint32_t i = 0; i < b.count; i++) count[b.indices[i] % 60]++;
                nostall_loader_release(ld, &b);
            }
            CHECK_OK(nostall_loader_get_state(ld, &saved));
            CHECK_EQ(saved.position, 12);
            nostall_loader_free(ld);
        }
        for (int r = 0; r < newworld; r++) {
            char rank[4], world[4];
            snprintf(rank, sizeof rank, "%d", r);
            snprintf(world, sizeof world, "%d", newworld);
            const char *kr[][2] = {{"threads", "2"}, {"batch_size", "4"}, {"crop", "8"},
                                   {"seed", "9"},    {"rank", rank},      {"world_size", world}};
            nostall_config *c = make_cfg(kr, 6);
            nostall_loader *ld = NULL;
            CHECK_OK(nostall_loader_create(&ld, data_dir, c));
            nostall_config_free(c);
            if (!ld) return;
            CHECK_OK(nostall_loader_set_state(ld, &saved));
            nostall_state now;
            CHECK_OK(nostall_loader_get_state(ld, &now));
            CHECK_EQ(now.epoch_offset, 24);
            for (;;) {
                nostall_batch b;
                int rc = nostall_loader_next(ld, &b);
                if (rc == NOSTALL_EPOCH_END) break;
                CHECK_OK(rc);
                if (rc < 0) break;
                CHECK_EQ(b.epoch, 1);
                for (uint32_t i = 0; i < b.count; i++) count[b.indices[i] % 60]++;
                nostall_loader_release(ld, &b);
            }
            nostall_loader_free(ld);
        }
        for (int i = 0; i < 60; i++) CHECK_EQ(count[i], 1); /* 60 = 24 + 36: no padding */
    }
}

/* The ring is never larger than an epoch can fill, and a ring that does not
 * fit the memory the process may use is refused with the figures. */
static void test_ring_plan(void)
{
    const char *kv[][2] = {{"threads", "1"}, {"batch_size", "8192"}, {"crop", "32"}};
    nostall_config *cfg = make_cfg(kv, 3);
    nostall_loader *ld = NULL;
    nostall_dataset_info info;
    CHECK_OK(nostall_loader_create(&ld, data_dir, cfg));
    if (ld) {
        CHECK_OK(nostall_loader_info(ld, &info, sizeof info));
        CHECK_EQ(info.slot_items, 60);
        CHECK_EQ(info.ring_slots, 2);
        CHECK(info.ring_memory != NULL);
        CHECK(info.ring_bytes < 2 * 61 * (size_t)32 * 32 * 3 * 4 + 65536);
        nostall_loader_free(ld);
    }
    setenv("NOSTALL_MEMLIMIT_BYTES", "1000000", 1);
    nostall_config_set(cfg, "batch_size", "64");
    nostall_config_set(cfg, "crop", "224");
    ld = NULL;
    CHECK_RC(nostall_loader_create(&ld, data_dir, cfg), NOSTALL_E_NOMEM);
    CHECK(strstr(nostall_last_error(), "batch ring needs") != NULL);
    CHECK(strstr(nostall_last_error(), "NOSTALL_MEMLIMIT_BYTES") != NULL);
    /* cache_bytes as a percentage of that limit */
    char buf[64];
    CHECK_OK(nostall_config_set(cfg, "cache_bytes", "50%"));
    CHECK_OK(nostall_config_get(cfg, "cache_bytes", buf, sizeof buf));
    CHECK(strcmp(buf, "500000") == 0 || strstr(buf, "488") != NULL);
    unsetenv("NOSTALL_MEMLIMIT_BYTES");
    nostall_config_free(cfg);
}

/* Bad items are not "fresh": with 6 bad files among 26 and echo_factor 2,
 * every good item is used exactly twice, and the counters say so. */
static void test_echo_counters_with_bad_items(const char *dir)
{
    static const char *const points[] = {"fetch", "decode", "augment", "batch"};
    for (int p = 0; p < 4; p++) {
        const char *kv[][2] = {{"threads", "2"},
                               {"batch_size", "4"},
                               {"crop", "16"},
                               {"epochs", "1"},
                               {"max_file_bytes", "64K"},
                               {"echo_factor", "2"},
                               {"echo_point", points[p]}};
        nostall_config *cfg = make_cfg(kv, 7);
        nostall_loader *ld = NULL;
        CHECK_OK(nostall_loader_create(&ld, dir, cfg));
        nostall_config_free(cfg);
        if (!ld) return;
        uint64_t sums[64];
        run_batches(ld, sums, 64, NULL);
        nostall_stats st;
        CHECK_OK(nostall_loader_stats(ld, &st, sizeof st));
        if (st.fresh_items != 20 || st.echo_uses_2 != 20)
            fprintf(stderr,
                    "echo_point=%s: fresh %llu echoed %llu delivered %llu uses_1 %llu "
                    "uses_2 %llu\n",
                    points[p], (unsigned long long)st.fresh_items,
                    (unsigned long long)st.echoed_items, (unsigned long long)st.items_delivered,
                    (unsigned long long)st.echo_uses_1, (unsigned long long)st.echo_uses_2);
        CHECK_EQ(st.items_delivered, 40);
        CHECK_EQ(st.fresh_items, 20);
        CHECK_EQ(st.echoed_items, 20);
        CHECK_EQ(st.echo_uses_2, 20);
        CHECK_EQ(st.echo_uses_1, 0);
        nostall_loader_free(ld);
    }
}

/* A JPEG whose DQT segment is preceded by junk bytes (libjpeg skips them with
 * a warning and never sees the tables), mixed into a list with two ordinary
 * JPEGs: a decoder that kept the previous file's tables made its result
 * depend on which worker decoded what before -- 58 or 60 items and four
 * checksums for 1-4 threads. One checksum and one count for 1-8 threads. */
static void test_state_between_files(void)
{
    const char *dir = test_tmpdir("loader-notables");
    char path[8192], list[8192];
    unsigned char *a = NULL, *b = NULL;
    snprintf(path, sizeof path, "%s/img_000000.jpg", data_dir);
    size_t na = slurp(path, &a);
    snprintf(path, sizeof path, "%s/class_001/img_000001.jpg", data_dir);
    size_t nb = slurp(path, &b);
    if (!na || !nb) { /* the generator's layout: class_000/img_000000.jpg */
        free(a);
        free(b);
        snprintf(path, sizeof path, "%s/class_000/img_000000.jpg", data_dir);
        na = slurp(path, &a);
        snprintf(path, sizeof path, "%s/class_001/img_000001.jpg", data_dir);
        nb = slurp(path, &b);
    }
    CHECK(na > 100 && nb > 100);
    if (na <= 100 || nb <= 100) goto out;
    spit(dir, "a.jpg", a, na);
    spit(dir, "b.jpg", b, nb);
    /* c.jpg: b whose DQT segments are wrapped in an APP15 segment after 3
     * junk bytes: libjpeg passes over the junk with a warning and skips the
     * APP15, so c.jpg has no tables of its own. */
    size_t p = 2, e;
    while (p + 4 <= nb && b[p] == 0xff && b[p + 1] != 0xdb && b[p + 1] != 0xda)
        p += 2 + ((size_t)b[p + 2] << 8 | b[p + 3]);
    for (e = p; e + 4 <= nb && b[e] == 0xff && b[e + 1] == 0xdb;)
        e += 2 + ((size_t)b[e + 2] << 8 | b[e + 3]);
    CHECK(e > p);
    unsigned char *c = malloc(nb + 7);
    memcpy(c, b, p);
    memcpy(c + p, "\x00\x12\x00\xff\xef", 5);
    c[p + 5] = (unsigned char)((e - p + 2) >> 8);
    c[p + 6] = (unsigned char)(e - p + 2);
    memcpy(c + p + 7, b + p, nb - p);
    spit(dir, "c.jpg", c, nb + 7);
    free(c);
    snprintf(list, sizeof list, "%s/list.tsv", dir);
    FILE *f = fopen(list, "w");
    for (int i = 0; i < 60; i++)
        fprintf(f, "%s/%c.jpg\t%d\n", dir, i % 3 == 2 ? 'c' : "ab"[i % 3], i % 3);
    fclose(f);
    uint64_t ref = 0, ref_items = 0;
    for (int threads = 1; threads <= 8; threads++) {
        char th[8];
        snprintf(th, sizeof th, "%d", threads);
        const char *kv[][2] = {{"threads", th},
                               {"batch_size", "5"},
                               {"crop", "16"},
                               {"epochs", "2"},
                               {"seed", "4"}};
        uint64_t items = 0, sum = run_options(list, kv, 5, &items);
        if (threads == 1) {
            ref = sum;
            ref_items = items;
        }
        CHECK_EQ(sum, ref);
        CHECK_EQ(items, ref_items);
    }
out:
    free(a);
    free(b);
}

/* Batch echoing's shuffled repeats resume exactly: a state saved after any
 * delivery of an epoch (positions count deliveries, repeats included)
 * gives the same remaining batches. */
static void test_batch_echo_resume(void)
{
    static const char *const factors[] = {"2", "1.5"};
    for (int f = 0; f < 2; f++) {
        const char *kv[][2] = {{"threads", "2"},        {"batch_size", "7"},
                               {"crop", "16"},          {"epochs", "3"},
                               {"echo_point", "batch"}, {"echo_factor", factors[f]},
                               {"echo_buffer", "14"},   {"seed", "6"}};
        for (int at = 1; at < 12; at += 3) {
            nostall_config *cfg = make_cfg(kv, 8);
            nostall_loader *a = NULL, *b = NULL;
            CHECK_OK(nostall_loader_create(&a, data_dir, cfg));
            CHECK_OK(nostall_loader_create(&b, data_dir, cfg));
            nostall_config_free(cfg);
            if (!a || !b) return;
            int k = 0, done = 0, rc;
            nostall_batch x;
            while (!done && (rc = nostall_loader_next(a, &x)) != NOSTALL_DONE) {
                if (rc == NOSTALL_EPOCH_END) continue;
                CHECK_OK(rc);
                if (rc < 0) break;
                nostall_loader_release(a, &x);
                if (x.epoch == 1 && ++k >= at) done = 1;
            }
            nostall_state st;
            CHECK_OK(nostall_loader_get_state(a, &st));
            CHECK_EQ(st.epoch, 1);
            CHECK_OK(nostall_loader_set_state(b, &st));
            uint64_t ra[64], rb[64];
            int na = run_batches(a, ra, 64, NULL), nb = run_batches(b, rb, 64, NULL);
            CHECK_EQ(na, nb);
            CHECK(na > 0 && memcmp(ra, rb, sizeof(uint64_t) * (size_t)(na < nb ? na : nb)) == 0);
            nostall_loader_free(a);
            nostall_loader_free(b);
        }
    }
}

/* Elastic resume with bad items (issue 32): two ranks of a drop_last job
 * with bad files stop mid-epoch; one rank's state is refused by another
 * world size (its rank met bad items, so the ranks are not in step), and
 * every rank's states together resume into three ranks: no item delivered
 * twice, no bad one delivered, every new rank the same number of batches.
 * Then the states of the three (a chain: the first job's states and each
 * one's own) resume into one rank the same way, and the set is checked as
 * untrusted input. */
static void test_elastic_bad_items(const char *dir)
{
    enum { N = 26 };
    int count[3][N] = {{0}}; /* per job */
    nostall_state old[2], mid[16];
    size_t nmid = 0;
    uint64_t bad_met = 0;
    nostall_loader *lds[3] = {NULL};
    for (int w = 0; w < 3; w++) { /* w: 0, the old job (2 ranks); 1, three; 2, one */
        const int world = w == 0 ? 2 : w == 1 ? 3 : 1;
        int batches[3] = {0};
        for (int r = 0; r < world; r++) {
            char rank[4], ws[4];
            snprintf(rank, sizeof rank, "%d", r);
            snprintf(ws, sizeof ws, "%d", world);
            const char *kv[][2] = {{"threads", "2"},
                                   {"batch_size", "3"},
                                   {"crop", "8"},
                                   {"seed", "5"},
                                   {"drop_last", "1"},
                                   {"max_bad_fraction", "1"},
                                   {"max_file_bytes", "64K"},
                                   {"rank", rank},
                                   {"world_size", ws}};
            nostall_config *c = make_cfg(kv, 9);
            nostall_loader *ld = NULL;
            CHECK_OK(nostall_loader_create(&ld, dir, c));
            nostall_config_free(c);
            if (!ld) return;
            if (w == 1) CHECK_OK(nostall_loader_set_states(ld, old, 2));
            if (w == 2) CHECK_OK(nostall_loader_set_states(ld, mid, nmid));
            for (int k = 0; w > 0 || k < 2; k++) { /* the old job: 2 batches; later, 1 or all */
                nostall_batch b;
                int rc = nostall_loader_next(ld, &b);
                if (rc == NOSTALL_EPOCH_END) break;
                CHECK_OK(rc);
                if (rc < 0) break;
                CHECK_EQ(b.epoch, 0);
                CHECK_EQ(b.count, 3);
                batches[r]++;
                for (uint32_t i = 0; i < b.count; i++) count[w][b.indices[i] % N]++;
                nostall_loader_release(ld, &b);
                if (w == 1 && k == 0) break;
            }
            if (w == 0) {
                CHECK_OK(nostall_loader_get_state(ld, &old[r]));
                CHECK_EQ(old[r].level, 0);
                bad_met += old[r].bad;
            } else if (w == 1) {
                size_t got = 0;
                CHECK_RC(nostall_loader_get_states(ld, mid + nmid, 2, &got), NOSTALL_E_INVALID);
                CHECK_EQ(got, 3); /* the two old states, then its own */
                CHECK_OK(nostall_loader_get_states(ld, mid + nmid, 16 - nmid, &got));
                CHECK_EQ(mid[nmid + 2].level, 1);
                CHECK_EQ(mid[nmid + 2].epoch_offset, 0);
                /* its own state alone names a level: refused */
                CHECK_RC(nostall_loader_set_state(ld, &mid[nmid + 2]), NOSTALL_E_STATE);
                nmid += got; /* the shared old states twice: allowed */
            }
            lds[r] = ld;
        }
        for (int r = 0; r < world; r++) nostall_loader_free(lds[r]);
        if (w > 0) CHECK_EQ(batches[0], batches[world - 1]);
        if (w == 0) CHECK(bad_met > 0); /* seed 5: the ranks met bad items */
        if (w == 0 && bad_met) {        /* one rank's state cannot stand for both */
            const char *kv[][2] = {{"threads", "1"},
                                   {"batch_size", "3"},
                                   {"crop", "8"},
                                   {"seed", "5"},
                                   {"drop_last", "1"},
                                   {"max_bad_fraction", "1"},
                                   {"max_file_bytes", "64K"}};
            nostall_config *c = make_cfg(kv, 7);
            nostall_loader *one = NULL;
            CHECK_OK(nostall_loader_create(&one, dir, c));
            nostall_config_free(c);
            if (!one) return;
            const nostall_state *st = old[0].bad || old[0].taken ? &old[0] : &old[1];
            CHECK_RC(nostall_loader_set_state(one, st), NOSTALL_E_STATE);
            CHECK(strstr(nostall_last_error(), "every old rank") != NULL);
            /* the set as untrusted input */
            CHECK_RC(nostall_loader_set_states(one, old, 1), NOSTALL_E_INVALID); /* rank missing */
            CHECK(strstr(nostall_last_error(), "every rank") != NULL);
            CHECK_RC(nostall_loader_set_states(one, old, 0), NOSTALL_E_INVALID);
            nostall_state twice[3] = {old[0], old[1], old[1]};
            twice[2].position += 3;
            CHECK_RC(nostall_loader_set_states(one, twice, 3), NOSTALL_E_INVALID);
            twice[2] = old[1];
            twice[2].seed++;
            CHECK_RC(nostall_loader_set_states(one, twice, 3), NOSTALL_E_STATE);
            twice[2] = old[1];
            twice[2].taken_first = twice[2].taken_end + 1;
            CHECK_RC(nostall_loader_set_states(one, twice, 3), NOSTALL_E_INVALID);
            twice[2] = old[1];
            twice[2].position = 1000;
            CHECK_RC(nostall_loader_set_states(one, twice, 3), NOSTALL_E_INVALID);
            twice[2] = old[1];
            twice[2].level = 1;
            CHECK_RC(nostall_loader_set_states(one, twice, 3), NOSTALL_E_INVALID);
            nostall_state v1 = old[0].taken & 0xffffffffu ? old[0] : old[1];
            v1.version = 1;
            if (v1.taken & 0xffffffffu) { /* a version 1 state's top-up span is unknown */
                nostall_state pair[2] = {v1, v1.rank ? old[0] : old[1]};
                CHECK_RC(nostall_loader_set_states(one, pair, 2), NOSTALL_E_STATE);
            }
            /* random damage to a valid set: an error or a resume, never worse */
            uint64_t x = 88172645463325252ULL;
            for (int k = 0; k < 300; k++) {
                nostall_state bad2[3] = {old[0], old[1], old[k % 2]};
                for (int f = 0; f < 3; f++) {
                    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                    nostall_state *t = &bad2[x % 3];
                    uint64_t v = (x >> 8) % 4 == 0 ? x >> 3 : (x >> 8) % 40;
                    switch ((x >> 16) % 9) {
                    case 0: t->position = v; break;
                    case 1: t->taken = v; break;
                    case 2: t->taken_first = (uint32_t)v; break;
                    case 3: t->taken_end = (uint32_t)v; break;
                    case 4: t->level = (uint32_t)v; break;
                    case 5: t->rank = (uint32_t)v; break;
                    case 6: t->world_size = (uint32_t)v; break;
                    case 7: t->epoch_offset = v; break;
                    default: t->bad = v; break;
                    }
                }
                int rc = nostall_loader_set_states(one, bad2, 3);
                CHECK(rc == 0 || (rc < 0 && nostall_last_error()[0]));
                if (rc == 0) {
                    nostall_batch b;
                    rc = nostall_loader_next(one, &b);
                    if (rc == 0) nostall_loader_release(one, &b);
                }
            }
            nostall_loader_free(one);
        }
    }
    /* drop_last: no padding; a later job repeats nothing of an earlier one,
     * and within a job only the top-up's wrap repeats, one per bad item at
     * most (6 bad files; a new rank's share of the rest is 3 items here, so
     * a wrap may even repeat an item within one batch) */
    int delivered = 0, repeats = 0;
    for (int i = 0; i < N; i++) {
        CHECK(!(count[0][i] && count[1][i]));
        CHECK(!((count[0][i] || count[1][i]) && count[2][i]));
        for (int w = 0; w < 3; w++) repeats += count[w][i] > 1 ? count[w][i] - 1 : 0;
        delivered += count[0][i] || count[1][i] || count[2][i];
    }
    CHECK(repeats <= 6);
    /* 20 good items; the last job (1 rank, batch 3) leaves at most 2 out */
    CHECK(delivered >= 18);
}

int main(void)
{
    snprintf(data_dir, sizeof data_dir, "%s", test_tmpdir("loader-data"));
    gen_dataset(data_dir, 60, 4);
    test_epochs_exactly_once();
    test_determinism();
    test_float_matches_uint8();
    test_resume();
    test_sharding();
    test_lending_rules();
    test_stop_and_free();
    test_fork();
    test_bad_options();
    test_bad_items();
    test_drop_last_full_batches(bad_dir);
    test_state_identity(bad_dir);
    test_elastic_bad_items(bad_dir);
    test_echo_counters_with_bad_items(bad_dir);
    test_state_between_files();
    test_batch_echo_resume();
    test_ring_plan();
    test_determinism_layouts();
    TEST_EXIT();
}
