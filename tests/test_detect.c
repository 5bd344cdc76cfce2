/*
 * test_detect.c — task=detect through the engine, on a dataset of
 * `nostall gen --task detect` (JPEGs, COCO annotations):
 *   - the declared fields (names, dtypes, shapes, which field gives a ragged
 *     field's shape) and, in every delivered item, boxes inside the output
 *     with x0 < x1, y0 < y1, labels below the category count, crowd flags
 *     0/1, boxes_shape = (box_count, 4), and the rooms past box_count zero;
 *   - the same bytes for 1, 2 and 3 threads (iou, rrc, none, eval);
 *   - echoing at fetch, decode, augment and batch: every item used twice,
 *     the same bytes for 1 and 3 threads, augment copies identical where
 *     decode copies are re-augmented; adaptive echoing delivers valid items;
 *   - the MinIO cache: the second epoch is served from it, with the bytes
 *     of a run without it;
 *   - resume mid-epoch: the rest of the epoch has the same bytes;
 *   - make(bytes) == transform(decode(bytes)) byte for byte (the recipe's
 *     contract, where the region decode is at full scale);
 *   - an image whose size differs from its annotations is a bad item naming
 *     both sizes; a syntax error fails create naming line and column; the
 *     repairs (clipped, dropped, unmatched, missing, truncated) reach
 *     nostall_dataset_info; the folder gen wrote stands for its one
 *     instances*.json;
 *   - a file_name leaving the image root fails create without quoting the
 *     file, unless allow_outside_root=1;
 *   - box_labels=category_id delivers the COCO ids where index gives 0..K-1.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/config.h"
#include "recipe/recipe.h"

#define NIMG 24
static char data_dir[4096], ann[4200];

static void gen_detect(const char *dir)
{
    const char *cli = getenv("NOSTALL_CLI");
    char cmd[8192];
    if (!cli) {
        fprintf(stderr, "NOSTALL_CLI not set; run through ctest\n");
        exit(77);
    }
    snprintf(cmd, sizeof cmd,
             "'%s' gen --task detect '%s' --images %d --classes 5 --objects 5 --crowd 0.3 --width 96 "
             "--height 72 --seed 3 --quiet --force",
             cli, dir, NIMG);
    if (system(cmd) != 0) {
        fprintf(stderr, "dataset generation failed: %s\n", cmd);
        exit(1);
    }
}

static nostall_loader *open_kv(const char *source, const char *kv[][2], int n)
{
    nostall_config *cfg = NULL;
    nostall_loader *ld = NULL;
    CHECK_OK(nostall_config_create(&cfg));
    for (int i = 0; i < n; i++) CHECK_OK(nostall_config_set(cfg, kv[i][0], kv[i][1]));
    CHECK_OK(nostall_config_set(cfg, "task", "detect"));
    int rc = nostall_loader_create(&ld, source, cfg);
    if (rc < 0) fprintf(stderr, "create: %s\n", nostall_last_error());
    nostall_config_free(cfg);
    return ld;
}

/* Every field of the batch as the recipe declares it, and every item valid. */
static void check_batch(const nostall_batch *b, uint32_t out_w, uint32_t out_h, uint32_t max_boxes)
{
    static const char *const names[] = {"image",   "boxes",     "box_labels",
                                        "iscrowd", "box_count", "boxes_shape"};
    CHECK_EQ(b->nfields, 6);
    if (b->nfields != 6) return;
    for (int f = 0; f < 6; f++) CHECK(strcmp(b->fields[f].name, names[f]) == 0);
    const nostall_field *bx = &b->fields[1], *lb = &b->fields[2], *cr = &b->fields[3],
                        *ct = &b->fields[4], *sh = &b->fields[5];
    CHECK(bx->dtype == NOSTALL_DTYPE_FLOAT32 && bx->ndim == 2 && bx->shape[0] == max_boxes &&
          bx->shape[1] == 4 && bx->shape_field == 5);
    CHECK(lb->dtype == NOSTALL_DTYPE_INT64 && lb->ndim == 1 && lb->shape[0] == max_boxes &&
          lb->shape_field == 4);
    CHECK(cr->dtype == NOSTALL_DTYPE_UINT8 && cr->ndim == 1 && cr->shape[0] == max_boxes &&
          cr->shape_field == 4);
    CHECK(ct->dtype == NOSTALL_DTYPE_INT64 && ct->ndim == 0 && ct->shape_field == -1);
    CHECK(sh->dtype == NOSTALL_DTYPE_INT64 && sh->ndim == 1 && sh->shape[0] == 2 &&
          sh->shape_field == -1);
    CHECK(b->fields[0].shape_field == -1 && b->images == b->fields[0].data && b->labels == NULL);
    CHECK(b->width == out_w && b->height == out_h);
    CHECK(b->fields[0].item_bytes == (size_t)out_w * out_h * 3 *
                                         (b->dtype == NOSTALL_DTYPE_UINT8     ? 1
                                          : b->dtype == NOSTALL_DTYPE_FLOAT32 ? 4
                                                                              : 2));
    for (uint32_t i = 0; i < b->count; i++) {
        const int64_t n = ((const int64_t *)ct->data)[i], *s = (const int64_t *)sh->data + 2 * i;
        const float *v = (const float *)bx->data + (size_t)i * max_boxes * 4;
        const int64_t *l = (const int64_t *)lb->data + (size_t)i * max_boxes;
        const uint8_t *c = (const uint8_t *)cr->data + (size_t)i * max_boxes;
        int ok = n >= 0 && n <= max_boxes && s[0] == n && s[1] == 4;
        for (int64_t k = 0; ok && k < n; k++) {
            const float *q = v + 4 * k;
            ok = q[0] >= 0 && q[1] >= 0 && q[0] < q[2] && q[1] < q[3] && q[2] <= out_w &&
                 q[3] <= out_h && l[k] >= 0 && l[k] < 5 && c[k] <= 1;
        }
        for (int64_t k = n; ok && k < max_boxes; k++)
            ok = v[4 * k] == 0 && v[4 * k + 1] == 0 && v[4 * k + 2] == 0 && v[4 * k + 3] == 0 &&
                 l[k] == 0 && c[k] == 0;
        if (!ok)
            fprintf(stderr, "item %u (index %llu): invalid boxes (n %lld)\n", i,
                    (unsigned long long)b->indices[i], (long long)n);
        CHECK(ok);
    }
}

typedef struct result {
    uint64_t sum, items, boxes, batches;
    uint64_t uses[NIMG];
} result;

/* Every batch of the loader, checked and folded. */
static void drain(nostall_loader *ld, uint32_t out_w, uint32_t out_h, uint32_t max_boxes, result *r)
{
    memset(r, 0, sizeof *r);
    if (!ld) return;
    for (;;) {
        nostall_batch b;
        int rc = nostall_loader_next(ld, &b);
        if (rc == NOSTALL_DONE || rc < 0) {
            if (rc < 0) CHECK_OK(rc);
            break;
        }
        if (rc == NOSTALL_EPOCH_END) continue;
        check_batch(&b, out_w, out_h, max_boxes);
        nostall_checksum_batch(&r->sum, &b);
        for (uint32_t i = 0; i < b.count; i++) {
            r->boxes += (uint64_t)((const int64_t *)nostall_batch_field(&b, "box_count")->data)[i];
            if (b.indices[i] < NIMG && b.epoch == 0) r->uses[b.indices[i]]++;
        }
        r->items += b.count;
        r->batches++;
        CHECK_OK(nostall_loader_release(ld, &b));
    }
}

static void run(const char *kv[][2], int n, result *r)
{
    nostall_loader *ld = open_kv(ann, kv, n);
    CHECK(ld != NULL);
    uint32_t w = 48, h = 48, m = 100;
    for (int i = 0; i < n; i++) {
        if (!strcmp(kv[i][0], "out_width")) w = (uint32_t)atoi(kv[i][1]);
        if (!strcmp(kv[i][0], "out_height")) h = (uint32_t)atoi(kv[i][1]);
        if (!strcmp(kv[i][0], "max_boxes")) m = (uint32_t)atoi(kv[i][1]);
    }
    drain(ld, w, h, m, r);
    nostall_loader_free(ld);
}

static void test_threads(void)
{
    static const char *modes[][2] = {{"iou", "train"},
                                     {"rrc", "train"},
                                     {"none", "train"},
                                     {"iou", "eval"}};
    uint64_t sums[4];
    for (int m = 0; m < 4; m++) {
        result r[3];
        for (int t = 0; t < 3; t++) {
            char th[4];
            snprintf(th, sizeof th, "%d", t + 1);
            const char *kv[][2] = {{"threads", th},
                                   {"batch_size", "5"},
                                   {"seed", "7"},
                                   {"epochs", "2"},
                                   {"box_crop", modes[m][0]},
                                   {"mode", modes[m][1]},
                                   {"out_height", "48"},
                                   {"out_width", "48"},
                                   {"max_boxes", "6"},
                                   {"output", m & 1 ? "uint8" : "float"}};
            run(kv, 10, &r[t]);
        }
        fprintf(stderr, "box_crop=%s mode=%s: %llu items, %llu boxes, checksum %016llx\n",
                modes[m][0], modes[m][1], (unsigned long long)r[0].items,
                (unsigned long long)r[0].boxes, (unsigned long long)r[0].sum);
        CHECK_EQ(r[0].items, 2 * NIMG);
        CHECK(r[0].boxes > 0);
        CHECK_EQ(r[0].sum, r[1].sum);
        CHECK_EQ(r[0].sum, r[2].sum);
        sums[m] = r[0].sum;
    }
    CHECK(sums[0] != sums[2]); /* the crop changes the bytes */
    /* letterboxed, not square, half floats in NHWC */
    result r[2];
    for (int t = 0; t < 2; t++) {
        const char *kv[][2] = {{"threads", t ? "3" : "1"},
                               {"batch_size", "5"},
                               {"seed", "7"},
                               {"epochs", "1"},
                               {"box_crop", "rrc"},
                               {"fit", "pad"},
                               {"out_height", "40"},
                               {"out_width", "56"},
                               {"max_boxes", "6"},
                               {"output", "float16"},
                               {"layout", "nhwc"}};
        run(kv, 11, &r[t]);
    }
    CHECK_EQ(r[0].items, NIMG);
    CHECK_EQ(r[0].sum, r[1].sum);
}

static void test_echo(void)
{
    static const char *points[] = {"fetch", "decode", "augment", "batch"};
    uint64_t sums[4];
    for (int p = 0; p < 4; p++) {
        result r[2];
        for (int t = 0; t < 2; t++) {
            const char *kv[][2] = {{"threads", t ? "3" : "1"},
                                   {"batch_size", "4"},
                                   {"seed", "5"},
                                   {"epochs", "1"},
                                   {"echo_factor", "2"},
                                   {"echo_point", points[p]},
                                   {"echo_buffer", "6"},
                                   {"out_height", "48"},
                                   {"out_width", "48"},
                                   {"max_boxes", "8"},
                                   {"output", "uint8"}};
            run(kv, 11, &r[t]);
        }
        fprintf(stderr, "echo_point=%s: %llu items, checksum %016llx\n", points[p],
                (unsigned long long)r[0].items, (unsigned long long)r[0].sum);
        CHECK_EQ(r[0].items, 2 * NIMG);
        int twice = 1;
        for (int i = 0; i < NIMG; i++) twice &= r[0].uses[i] == 2;
        CHECK(twice);
        CHECK_EQ(r[0].sum, r[1].sum);
        sums[p] = r[0].sum;
    }
    CHECK(sums[0] != sums[2] && sums[1] != sums[2]); /* augment repeats, fetch/decode re-augment */
    result a;
    const char *kv[][2] = {{"threads", "2"},     {"batch_size", "4"}, {"epochs", "2"},
                           {"echo", "adaptive"}, {"echo_max", "3"},   {"out_height", "48"},
                           {"out_width", "48"},  {"max_boxes", "8"}};
    run(kv, 8, &a); /* not deterministic by design: every item still valid */
    CHECK(a.items >= 2 * NIMG);
}

static void test_cache(void)
{
    result plain, cached;
    const char *kv[][2] = {{"threads", "2"},   {"batch_size", "6"},  {"epochs", "2"},
                           {"seed", "9"},      {"out_height", "48"}, {"out_width", "48"},
                           {"max_boxes", "8"}, {"cache_bytes", "0"}};
    run(kv, 8, &plain);
    kv[7][1] = "64M";
    nostall_loader *ld = open_kv(ann, kv, 8);
    drain(ld, 48, 48, 8, &cached);
    nostall_stats st;
    CHECK_OK(nostall_loader_stats(ld, &st, sizeof st));
    fprintf(stderr, "cache: hits %llu, misses %llu, storage reads %llu\n",
            (unsigned long long)st.cache_hits, (unsigned long long)st.cache_misses,
            (unsigned long long)st.storage_reads);
    CHECK_EQ(st.cache_hits, NIMG);    /* the second epoch */
    CHECK_EQ(st.storage_reads, NIMG); /* the first only */
    CHECK_EQ(plain.sum, cached.sum);
    nostall_loader_free(ld);
}

static void test_resume(void)
{
    const char *kv[][2] = {{"threads", "2"},  {"batch_size", "5"},  {"epochs", "2"},
                           {"seed", "3"},     {"out_height", "40"}, {"out_width", "40"},
                           {"max_boxes", "4"}};
    nostall_loader *a = open_kv(ann, kv, 7), *b = open_kv(ann, kv, 7);
    if (!a || !b) {
        CHECK(0);
        nostall_loader_free(a);
        nostall_loader_free(b);
        return;
    }
    nostall_batch x;
    nostall_state st;
    CHECK_OK(nostall_loader_set_state(a, &(nostall_state){.epoch = 1}));
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(nostall_loader_next(a, &x), 0);
        CHECK_OK(nostall_loader_release(a, &x));
    }
    CHECK_OK(nostall_loader_get_state(a, &st));
    CHECK_EQ(st.epoch, 1);
    CHECK_EQ(st.position, 10);
    CHECK_OK(nostall_loader_set_state(b, &st));
    result ra, rb;
    drain(a, 40, 40, 4, &ra);
    drain(b, 40, 40, 4, &rb);
    CHECK(ra.items == NIMG - 10 && ra.items == rb.items);
    CHECK_EQ(ra.sum, rb.sum);
    nostall_loader_free(a);
    nostall_loader_free(b);
    /* a state of other annotations is refused */
}

/* The recipe itself: make(bytes) == transform(decode(bytes)). */
static void test_make_equals_transform(void)
{
    nostall_config *cfg = NULL;
    nst_recipe *r = NULL;
    nst_recipe_worker *w = NULL;
    CHECK_OK(nostall_config_create(&cfg));
    const char *kv[][2] = {{"task", "detect"}, {"out_height", "64"}, {"out_width", "64"},
                           {"max_boxes", "8"}, {"seed", "2"},        {"output", "uint8"}};
    for (size_t i = 0; i < sizeof kv / sizeof *kv; i++)
        CHECK_OK(nostall_config_set(cfg, kv[i][0], kv[i][1]));
    CHECK_OK(nst_recipe_create(&r, cfg, ann));
    if (r) CHECK_OK(r->ops->worker_create(r, &w));
    if (!w) goto out;
    uint8_t *a[8], *b[8];
    for (uint32_t f = 0; f < r->nfields; f++) {
        a[f] = calloc(1, r->fields[f].item_bytes);
        b[f] = calloc(1, r->fields[f].item_bytes);
    }
    nst_decoded d = {0};
    int same = 1, items = 0;
    for (uint64_t i = 0; i < r->items; i++) {
        const char *path = nst_recipe_path(r, i);
        FILE *f = fopen(path, "rb");
        static uint8_t buf[1 << 20];
        size_t len = f ? fread(buf, 1, sizeof buf, f) : 0;
        if (f) fclose(f);
        for (uint32_t copy = 0; copy < 3; copy++) {
            nst_item_ctx ca = {.epoch = 1, .index = i, .copy = copy, .path = path, .dst = a};
            nst_item_ctx cb = {.epoch = 1, .index = i, .copy = copy, .path = path, .dst = b};
            nst_recipe_times t = {0};
            CHECK_OK(r->ops->make(w, &ca, buf, len, &t));
            CHECK_OK(r->ops->decode(w, &cb, buf, len, &d, &t));
            CHECK_OK(r->ops->transform(w, &cb, &d, &t));
            for (uint32_t fi = 0; fi < r->nfields; fi++)
                same &= !memcmp(a[fi], b[fi], r->fields[fi].item_bytes);
            items++;
        }
    }
    CHECK(same);
    CHECK_EQ(items, 3 * NIMG);
    nst_buf_free(&d.buf);
    for (uint32_t f = 0; f < r->nfields; f++) free(a[f]), free(b[f]);
out:
    if (r && w) r->ops->worker_free(w);
    nst_recipe_free(r);
    nostall_config_free(cfg);
}

/* Text of the annotation file with `from` replaced by `to` (first one). */
static void edit_ann(const char *dst, const char *from, const char *to)
{
    FILE *f = fopen(ann, "rb");
    static char text[1 << 20], out[1 << 20];
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[n] = 0;
    char *at = strstr(text, from);
    CHECK(at != NULL);
    if (!at) return;
    snprintf(out, sizeof out, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    f = fopen(dst, "wb");
    fputs(out, f);
    fclose(f);
}

static void test_bad_inputs(void)
{
    char p[4300];
    /* an image whose size is not the annotated one: a bad item */
    snprintf(p, sizeof p, "%s/size.json", data_dir);
    edit_ann(p, "\"width\": 96, \"height\": 72}", "\"width\": 97, \"height\": 72}");
    const char *kv[][2] = {{"threads", "2"},
                           {"batch_size", "4"},
                           {"epochs", "1"},
                           {"out_height", "32"},
                           {"out_width", "32"}};
    nostall_loader *ld = open_kv(p, kv, 5);
    result r;
    drain(ld, 32, 32, 100, &r);
    CHECK_EQ(r.items, NIMG - 1);
    CHECK_EQ(nostall_loader_skipped_count(ld), 1);
    nostall_skip_info si;
    if (ld && nostall_loader_skipped(ld, 0, &si) == 0) {
        fprintf(stderr, "skipped: %s: %s\n", si.path, si.reason);
        CHECK(si.index == 0 && strstr(si.path, "img_000000.jpg") && strstr(si.reason, "96x72") &&
              strstr(si.reason, "97x72"));
    }
    nostall_loader_free(ld);
    /* repairs reach the dataset info */
    snprintf(p, sizeof p, "%s/repairs.json", data_dir);
    edit_ann(p, "\"annotations\": [",
             "\"annotations\": [\n {\"id\": 9001, \"image_id\": 3, \"category_id\": 1, \"bbox\": [90, 1, 20, 4]},"
             "\n {\"id\": 9002, \"image_id\": 12345, \"category_id\": 1, \"bbox\": [1, 1, 2, 2]},"
             "\n {\"id\": 9003, \"image_id\": 3, \"category_id\": 1, \"bbox\": [1, 1, -2, 2]},");
    char p2[4400];
    snprintf(p2, sizeof p2, "%s/repairs2.json", data_dir);
    {
        /* one more image, whose file does not exist */
        FILE *f = fopen(p, "rb");
        static char t[1 << 20];
        size_t n = f ? fread(t, 1, sizeof t - 1, f) : 0;
        if (f) fclose(f);
        t[n] = 0;
        char *at = strstr(t, "\"images\": [");
        CHECK(at != NULL);
        f = fopen(p2, "wb");
        if (at && f)
            fprintf(f,
                    "%.*s\"images\": [\n {\"id\": 999, \"file_name\": \"images/none.jpg\", \"width\": 5, "
                    "\"height\": 5},%s",
                    (int)(at - t), t, at + strlen("\"images\": ["));
        if (f) fclose(f);
    }
    const char *kv2[][2] = {{"max_boxes", "2"}, {"out_height", "32"}, {"out_width", "32"}};
    ld = open_kv(p2, kv2, 3);
    nostall_dataset_info info;
    if (ld) {
        CHECK_OK(nostall_loader_info(ld, &info, sizeof info));
        fprintf(stderr,
                "repairs: items %llu, truncated %llu, dropped %llu, clipped %llu, unmatched %llu, "
                "missing %llu\n",
                (unsigned long long)info.items, (unsigned long long)info.items_truncated,
                (unsigned long long)info.parts_dropped, (unsigned long long)info.parts_clipped,
                (unsigned long long)info.parts_unmatched, (unsigned long long)info.items_missing);
        CHECK_EQ(info.task, NOSTALL_TASK_DETECT);
        CHECK_EQ(info.items, NIMG);
        CHECK_EQ(info.items_missing, 1);
        CHECK_EQ(info.parts_clipped, 1);
        CHECK_EQ(info.parts_dropped, 1);
        CHECK_EQ(info.parts_unmatched, 1);
        CHECK(info.items_truncated > 0); /* images with 3 or more objects */
    }
    nostall_loader_free(ld);
    /* a syntax error: line and column */
    snprintf(p, sizeof p, "%s/syntax.json", data_dir);
    edit_ann(p, "\"images\": [", "\"images\": [[");
    ld = open_kv(p, kv2, 3);
    CHECK(ld == NULL);
    fprintf(stderr, "syntax error: %s\n", nostall_last_error());
    CHECK(strstr(nostall_last_error(), "syntax.json:") &&
          strstr(nostall_last_error(), "JSON syntax error"));
    nostall_loader_free(ld);
    /* the folder `nostall gen --task detect` wrote (one instances*.json)
     * stands for its annotation file; with two, create says so */
    ld = open_kv(data_dir, kv2, 3);
    CHECK(ld != NULL);
    if (ld) {
        CHECK_OK(nostall_loader_info(ld, &info, sizeof info));
        CHECK_EQ(info.items, NIMG);
        CHECK_EQ(info.items_missing, 0);
    }
    nostall_loader_free(ld);
    snprintf(p, sizeof p, "%s/instances_copy.json", data_dir);
    edit_ann(p, "\"images\": [", "\"images\": [");
    ld = open_kv(data_dir, kv2, 3);
    CHECK(ld == NULL && strstr(nostall_last_error(), "2 instances*.json files"));
    nostall_loader_free(ld);
    remove(p);
}

/* A file_name leaving the image root (an annotation file's
 * "../secret/credentials") fails create, naming the entry and the option,
 * without a byte of the file; allow_outside_root=1 reads it. */
static void test_outside_root(void)
{
    char p[4400], q[4400];
    snprintf(p, sizeof p, "mkdir -p '%s/sub' '%s/secret'", data_dir, data_dir);
    CHECK(system(p) == 0);
    snprintf(p, sizeof p, "%s/secret/credentials", data_dir);
    FILE *f = fopen(p, "wb");
    CHECK(f != NULL);
    if (f) {
        fputs("[default]\naws_secret_access_key = AKIASECRETBYTES\n", f);
        fclose(f);
    }
    /* sub/ann.json: its folder is the image root */
    snprintf(p, sizeof p, "%s/sub/ann.json", data_dir);
    edit_ann(p, "\"file_name\": \"images/img_000000.jpg\"",
             "\"file_name\": \"../secret/credentials\"");
    const char *kv[][2] = {{"out_height", "32"}, {"out_width", "32"}, {"epochs", "1"}};
    nostall_loader *ld = open_kv(p, kv, 3);
    const char *m = nostall_last_error();
    CHECK(ld == NULL);
    snprintf(q, sizeof q, "%s/sub", data_dir);
    CHECK(strstr(m, "images[0].file_name") && strstr(m, "../secret/credentials") &&
          strstr(m, "leaves the image root") && strstr(m, q) && strstr(m, "allow_outside_root=1") &&
          !strstr(m, "AKIA") && !strstr(m, "default"));
    nostall_loader_free(ld);
    /* opted in: the file is an item (the other images are missing from
     * sub/: counted), a bad one when read */
    const char *kv2[][2] = {{"out_height", "32"},
                            {"out_width", "32"},
                            {"epochs", "1"},
                            {"allow_outside_root", "1"}};
    ld = open_kv(p, kv2, 4);
    CHECK(ld != NULL);
    nostall_dataset_info info;
    if (ld) {
        CHECK_OK(nostall_loader_info(ld, &info, sizeof info));
        CHECK_EQ(info.items, 1);
        CHECK_EQ(info.items_missing, NIMG - 1);
    }
    nostall_loader_free(ld);
}

/* box_labels=category_id: the COCO ids (gen's 1 2 3 4 6) where index
 * gives 0..4, box for box. */
static void test_box_labels(void)
{
    static const int64_t ids[5] = {1, 2, 3, 4, 6};
    int64_t got[2][NIMG * 8];
    size_t n[2] = {0, 0};
    for (int mode = 0; mode < 2; mode++) {
        const char *kv[][2] = {{"out_height", "32"},
                               {"out_width", "32"},
                               {"epochs", "1"},
                               {"mode", "eval"},
                               {"max_boxes", "8"},
                               {"shuffle", "0"},
                               {"box_labels", mode ? "category_id" : "index"}};
        nostall_loader *ld = open_kv(ann, kv, 7);
        CHECK(ld != NULL);
        for (nostall_batch b; ld;) {
            int rc = nostall_loader_next(ld, &b);
            if (rc == NOSTALL_DONE || rc < 0) {
                CHECK(rc == NOSTALL_DONE);
                break;
            }
            if (rc == NOSTALL_EPOCH_END) continue;
            const int64_t *cnt = nostall_batch_field(&b, "box_count")->data;
            const int64_t *lab = nostall_batch_field(&b, "box_labels")->data;
            for (uint32_t i = 0; i < b.count; i++)
                for (int64_t k = 0; k < cnt[i] && n[mode] < NIMG * 8; k++)
                    got[mode][n[mode]++] = lab[i * 8 + k];
            CHECK_OK(nostall_loader_release(ld, &b));
        }
        nostall_loader_free(ld);
    }
    CHECK(n[0] == n[1] && n[0] > 0);
    int saw6 = 0;
    for (size_t k = 0; k < n[0] && k < n[1]; k++) {
        CHECK(got[0][k] >= 0 && got[0][k] < 5);
        if (got[0][k] >= 0 && got[0][k] < 5) CHECK_EQ(got[1][k], ids[got[0][k]]);
        saw6 |= got[1][k] == 6;
    }
    CHECK(saw6); /* an id that is not index + 1 */
}

int main(void)
{
    snprintf(data_dir, sizeof data_dir, "%s", test_tmpdir("test_detect"));
    gen_detect(data_dir);
    snprintf(ann, sizeof ann, "%s/instances.json", data_dir);
    test_threads();
    test_echo();
    test_cache();
    test_resume();
    test_make_equals_transform();
    test_bad_inputs();
    test_outside_root();
    test_box_labels();
    TEST_EXIT();
}
