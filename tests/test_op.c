/*
 * test_op.c — user ops (include/nostall_op.h, src/recipe/op.c): an op set
 * in process (nostall_config_set_op) and the example op loaded through
 * op_library, with every engine feature: the same bytes for 1, 2 and 4
 * threads, the op's output checked against its input decoded here, its
 * random stream against the documented seed, ragged fields, echo at every
 * point (echoed uses differ), resume mid-epoch, the MinIO cache, bad items
 * (skip and fail, with the op's message), the lifecycle calls, and every
 * refusal (version, fields, libraries, tasks).
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "common/rng.h"
#include "decode/decode.h"
#include "nostall.h"
#include "nostall_op.h"
#include "test_data.h"

#define SIDE 8 /* the probe op's image: SIDE x SIDE x 3 */
#define BAG 16 /* its ragged field's room */

/* ---- the probe op -------------------------------------------------------- */

typedef struct probe_ctx {
    int fail_mod, fail_rem, fail_status; /* items index % mod == rem fail    */
    int create_fail, dup_name, bad_shape_field, label_name, bytes_input;
    int saw_sample; /* create got a sample with pixels  */
    atomic_int creates, destroys, workers, workers_freed, runs;
} probe_ctx;

typedef struct probe_worker {
    probe_ctx *ctx;
    uint64_t items;
} probe_worker;

static void field(nostall_op_field *f, const char *name, nostall_dtype t, uint32_t ndim,
                  uint64_t d0, uint64_t d1, uint64_t d2, int32_t shape_field)
{
    memset(f, 0, sizeof *f);
    snprintf(f->name, sizeof f->name, "%s", name);
    f->dtype = t;
    f->ndim = ndim;
    f->shape[0] = d0, f->shape[1] = d1, f->shape[2] = d2;
    f->shape_field = shape_field;
}

static int probe_create(void *vctx, nostall_op_setup *s, void **state)
{
    probe_ctx *ctx = vctx;
    atomic_fetch_add(&ctx->creates, 1);
    if (ctx->create_fail) {
        snprintf(s->message, sizeof s->message, "nope: %s", s->args);
        return NOSTALL_E_OPTION;
    }
    if (s->sample && s->sample->data && s->sample->path && !s->sample->dst &&
        (ctx->bytes_input ? s->sample->len > 0 : s->sample->width > 0 && s->sample->height > 0))
        ctx->saw_sample = 1;
    if (ctx->bytes_input) {
        field(&s->fields[0], "head", NOSTALL_DTYPE_UINT8, 1, 8, 0, 0, -1);
        field(&s->fields[1], "len", NOSTALL_DTYPE_INT64, 0, 0, 0, 0, -1);
        s->nfields = 2;
        *state = ctx;
        return 0;
    }
    field(&s->fields[0], "image", NOSTALL_DTYPE_UINT8, 3, SIDE, SIDE, 3, -1);
    field(&s->fields[1],
          ctx->dup_name     ? "image"
          : ctx->label_name ? "label"
                            : "info",
          NOSTALL_DTYPE_INT64, 1, 5, 0, 0, -1);
    field(&s->fields[2], "bag", NOSTALL_DTYPE_UINT8, 1, BAG, 0, 0, ctx->bad_shape_field ? 1 : 3);
    field(&s->fields[3], "bag_shape", NOSTALL_DTYPE_INT64, 1, 1, 0, 0, -1);
    s->nfields = 4;
    *state = ctx;
    return 0;
}

static void probe_destroy(void *state) { atomic_fetch_add(&((probe_ctx *)state)->destroys, 1); }

static int probe_worker_create(void *state, void **worker)
{
    probe_worker *w = calloc(1, sizeof *w);
    if (!w) return NOSTALL_E_NOMEM;
    w->ctx = state;
    atomic_fetch_add(&w->ctx->workers, 1);
    *worker = w;
    return 0;
}

static void probe_worker_free(void *state, void *worker)
{
    atomic_fetch_add(&((probe_ctx *)state)->workers_freed, 1);
    free(worker);
}

/* The probe's output for an input: nearest samples, facts, a ragged bag. */
static int probe_run(void *state, void *worker, nostall_op_item *it)
{
    probe_ctx *ctx = state;
    probe_worker *w = worker;
    atomic_fetch_add(&ctx->runs, 1);
    w->items++;
    if (ctx->fail_mod && (int)(it->index % (uint64_t)ctx->fail_mod) == ctx->fail_rem)
        return ctx->fail_status ? nostall_op_fail(it, ctx->fail_status, "boom at %llu",
                                                  (unsigned long long)it->index)
                                : 42; /* not a status: counted as E_CORRUPT */
    if (ctx->bytes_input) {
        int64_t n = (int64_t)it->len;
        memcpy(it->dst[0], it->data, it->len < 8 ? it->len : 8);
        memcpy(it->dst[1], &n, sizeof n);
        return 0;
    }
    uint8_t *img = it->dst[0];
    for (uint32_t y = 0; y < SIDE; y++)
        for (uint32_t x = 0; x < SIDE; x++)
            memcpy(img + (y * SIDE + x) * 3,
                   it->data + (size_t)(y * it->height / SIDE) * it->stride +
                       (x * it->width / SIDE) * 3,
                   3);
    int64_t info[5] = {it->width, it->height, (int64_t)it->index, (int64_t)it->copy,
                       (int64_t)nostall_op_random(it)};
    memcpy(it->dst[1], info, sizeof info);
    int64_t k = 1 + (int64_t)nostall_op_random_below(it, BAG);
    memset(it->dst[2], (int)(it->index & 0x7f) + 1, (size_t)k);
    memcpy(it->dst[3], &k, sizeof k);
    return 0;
}

static nostall_op probe_op(void)
{
    nostall_op op = {.version = NOSTALL_OP_VERSION,
                     .size = sizeof(nostall_op),
                     .name = "probe",
                     .input = NOSTALL_OP_INPUT_IMAGE,
                     .create = probe_create,
                     .destroy = probe_destroy,
                     .create_worker = probe_worker_create,
                     .free_worker = probe_worker_free,
                     .run = probe_run};
    return op;
}

/* ---- helpers ----------------------------------------------------------- */

static char data_dir[4096], bytes_dir[4096];

static nostall_loader *loader_with(const nostall_op *op, probe_ctx *ctx, const char *src,
                                   const char *kv[][2], int n, int *rc_out)
{
    nostall_config *cfg = make_cfg(kv, n);
    nostall_loader *ld = NULL;
    if (op) CHECK_OK(nostall_config_set_op(cfg, op, ctx));
    int rc = nostall_loader_create(&ld, src, cfg);
    nostall_config_free(cfg);
    if (rc_out)
        *rc_out = rc;
    else
        CHECK_OK(rc);
    return ld;
}

/* Checksum of every batch (and items) until DONE; NULL loader: 0. */
static uint64_t drain(nostall_loader *ld, uint64_t *items)
{
    uint64_t h = 0, n = 0;
    nostall_batch b;
    int rc;
    if (!ld) return 0;
    while ((rc = nostall_loader_next(ld, &b)) != NOSTALL_DONE) {
        if (rc == NOSTALL_EPOCH_END) continue;
        if (rc < 0) {
            fprintf(stderr, "next: %s\n", nostall_last_error());
            CHECK_OK(rc);
            break;
        }
        nostall_checksum_batch(&h, &b);
        n += b.count;
        nostall_loader_release(ld, &b);
    }
    if (items) *items = n;
    return h;
}

static uint64_t probe_checksum(const char *threads, const char *kv_extra[][2], int nextra,
                               uint64_t *items)
{
    const char *kv[16][2] = {{"threads", threads},
                             {"batch_size", "8"},
                             {"epochs", "2"},
                             {"seed", "5"}};
    int n = 4;
    for (int i = 0; i < nextra; i++, n++) kv[n][0] = kv_extra[i][0], kv[n][1] = kv_extra[i][1];
    probe_ctx ctx = {0};
    nostall_op op = probe_op();
    nostall_loader *ld = loader_with(&op, &ctx, data_dir, kv, n, NULL);
    uint64_t h = drain(ld, items);
    nostall_loader_free(ld);
    return h;
}

/* ---- the tests -------------------------------------------------------- */

/* Same bytes for 1, 2 and 4 threads, and the lifecycle calls balanced. */
static void test_threads(void)
{
    uint64_t n1, n2, n4;
    uint64_t h1 = probe_checksum("1", NULL, 0, &n1), h2 = probe_checksum("2", NULL, 0, &n2),
             h4 = probe_checksum("4", NULL, 0, &n4);
    CHECK(h1 != 0);
    CHECK(h1 == h2);
    CHECK(h1 == h4);
    CHECK_EQ(n1, 60);
    CHECK_EQ(n2, 60);
    CHECK_EQ(n4, 60);

    probe_ctx ctx = {0};
    nostall_op op = probe_op();
    const char *kv[][2] = {{"threads", "3"}, {"batch_size", "8"}, {"epochs", "1"}};
    nostall_loader *ld = loader_with(&op, &ctx, data_dir, kv, 3, NULL);
    CHECK(ctx.saw_sample);
    drain(ld, NULL);
    nostall_stats st;
    CHECK_OK(nostall_loader_stats(ld, &st, sizeof st));
    CHECK_EQ(st.augment_items, 30);
    CHECK_EQ(st.decode_items, 30);
    nostall_loader_free(ld);
    CHECK_EQ(atomic_load(&ctx.creates), 1);
    CHECK_EQ(atomic_load(&ctx.workers), 3);
    CHECK_EQ(atomic_load(&ctx.workers_freed), 3);
    CHECK_EQ(atomic_load(&ctx.destroys), 1);
    CHECK_EQ(atomic_load(&ctx.runs), 30);
}

/* The fields of one item against the item decoded here and its stream. */
static void check_item(nst_decoder *dec, const nostall_batch *b, uint32_t i, uint64_t seed,
                       const char *path)
{
    const nostall_field *img = nostall_batch_field(b, "image"),
                        *info = nostall_batch_field(b, "info"),
                        *bag = nostall_batch_field(b, "bag"),
                        *bs = nostall_batch_field(b, "bag_shape"),
                        *label = nostall_batch_field(b, "label");
    CHECK(img && info && bag && bs && label);
    if (!img || !info || !bag || !bs || !label) return;
    CHECK_EQ(b->nfields, 5);
    CHECK_EQ(bag->shape_field, 3);
    CHECK(b->images == img->data);
    const int64_t *f = (const int64_t *)info->data + i * 5;
    FILE *fp = fopen(path, "rb");
    static uint8_t file[1 << 20];
    size_t len = fp ? fread(file, 1, sizeof file, fp) : 0;
    if (fp) fclose(fp);
    nst_image_info ii;
    nst_image im;
    CHECK(len > 0);
    CHECK_OK(nst_decode_probe(dec, file, len, path, &ii));
    CHECK_OK(nst_decode(dec, file, len, path, NULL, 0, 0, &im));
    CHECK_EQ(f[0], im.width);
    CHECK_EQ(f[1], im.height);
    CHECK_EQ(f[2], b->indices[i]);
    const uint8_t *px = (const uint8_t *)img->data + i * img->item_bytes;
    int same = 1;
    for (uint32_t y = 0; y < SIDE; y++)
        for (uint32_t x = 0; x < SIDE; x++)
            same &= memcmp(px + (y * SIDE + x) * 3,
                           im.data + (size_t)(y * im.height / SIDE) * im.stride +
                               (x * im.width / SIDE) * 3,
                           3) == 0;
    CHECK(same);
    /* The stream: hash(seed, epoch, index, copy 0), as documented. */
    nostall_op_item it = {.random_state =
                              nst_hash4(seed, b->epoch, b->indices[i], NST_RNG_AUGMENT_COPY(f[3]))};
    CHECK(f[4] == (int64_t)nostall_op_random(&it));
    int64_t k = 1 + (int64_t)nostall_op_random_below(&it, BAG);
    CHECK_EQ(((const int64_t *)bs->data)[i], k);
    const uint8_t *bg = (const uint8_t *)bag->data + i * bag->item_bytes;
    for (int64_t j = 0; j < BAG; j++) CHECK_EQ(bg[j], j < k ? (int)(b->indices[i] & 0x7f) + 1 : 0);
}

static void test_content(void)
{
    probe_ctx ctx = {0};
    nostall_op op = probe_op();
    const char *kv[][2] = {{"threads", "2"}, {"batch_size", "8"}, {"epochs", "1"}, {"seed", "9"}};
    nostall_loader *ld = loader_with(&op, &ctx, data_dir, kv, 4, NULL);
    nst_decoder *dec = NULL;
    CHECK_OK(nst_decoder_create(&dec, 100000000));
    nostall_batch b;
    int rc, items = 0;
    while (ld && dec && (rc = nostall_loader_next(ld, &b)) == 0) {
        for (uint32_t i = 0; i < b.count; i++, items++) {
            const char *path;
            int64_t label;
            CHECK_OK(nostall_loader_item(ld, b.indices[i], &path, &label));
            check_item(dec, &b, i, 9, path);
            CHECK_EQ(((const int64_t *)nostall_batch_field(&b, "label")->data)[i], label);
        }
        nostall_loader_release(ld, &b);
    }
    CHECK_EQ(items, 30);
    nst_decoder_free(dec);
    nostall_loader_free(ld);
}

/* Echo at every point: thread-count invariant; fetch and decode run the op
 * again with the use's own stream (so the copies differ), augment repeats
 * the output. */
static void test_echo(void)
{
    static const char *points[] = {"fetch", "decode", "augment", "batch"};
    for (int p = 0; p < 4; p++) {
        const char *kv[][2] = {{"echo_factor", "2"}, {"echo_point", points[p]}};
        uint64_t n1, n3;
        uint64_t h1 = probe_checksum("1", kv, 2, &n1), h3 = probe_checksum("3", kv, 2, &n3);
        CHECK(h1 == h3);
        CHECK_EQ(n1, 120);
        CHECK_EQ(n3, 120);
        if (h1 != h3) fprintf(stderr, "echo_point=%s differs between 1 and 3 threads\n", points[p]);
    }
    for (int p = 0; p < 3; p++) { /* the uses of one item within an epoch */
        probe_ctx ctx = {0};
        nostall_op op = probe_op();
        const char *kv[][2] = {{"threads", "2"},
                               {"batch_size", "8"},
                               {"epochs", "1"},
                               {"echo_factor", "2"},
                               {"echo_point", points[p]}};
        nostall_loader *ld = loader_with(&op, &ctx, data_dir, kv, 5, NULL);
        int64_t first[30][2];
        int seen[30] = {0}, differ = 0, same = 0;
        nostall_batch b;
        while (ld && nostall_loader_next(ld, &b) == 0) {
            const int64_t *info = nostall_batch_field(&b, "info")->data;
            for (uint32_t i = 0; i < b.count; i++) {
                uint64_t ix = b.indices[i];
                if (ix >= 30) continue;
                if (seen[ix]++) {
                    differ += info[i * 5 + 4] != first[ix][0];
                    same += info[i * 5 + 4] == first[ix][0];
                } else {
                    first[ix][0] = info[i * 5 + 4];
                }
            }
            nostall_loader_release(ld, &b);
        }
        nostall_loader_free(ld);
        if (p < 2)
            CHECK(differ > 0 && same == 0);
        else
            CHECK(same > 0 && differ == 0);
    }
    const char *kv[][2] = {{"threads", "2"},
                           {"batch_size", "8"},
                           {"epochs", "2"},
                           {"echo", "adaptive"}};
    probe_ctx ctx = {0};
    nostall_op op = probe_op();
    nostall_loader *ld = loader_with(&op, &ctx, data_dir, kv, 4, NULL);
    uint64_t items = 0;
    drain(ld, &items);
    CHECK(items >= 60);
    nostall_loader_free(ld);
}

/* Resume mid-epoch: a new loader from a saved state delivers the same rest. */
static void test_resume(void)
{
    const char *kv[][2] = {{"threads", "2"}, {"batch_size", "4"}, {"epochs", "2"}, {"seed", "3"}};
    probe_ctx c1 = {0}, c2 = {0};
    nostall_op op = probe_op();
    nostall_loader *a = loader_with(&op, &c1, data_dir, kv, 4, NULL);
    nostall_batch b;
    nostall_state st;
    for (int i = 0; i < 3 && a; i++) {
        CHECK_RC(nostall_loader_next(a, &b), 0);
        nostall_loader_release(a, &b);
    }
    CHECK_OK(nostall_loader_get_state(a, &st));
    CHECK_EQ(st.position, 12);
    uint64_t rest_a = drain(a, NULL);
    nostall_loader *bl = loader_with(&op, &c2, data_dir, kv, 4, NULL);
    CHECK_OK(nostall_loader_set_state(bl, &st));
    uint64_t rest_b = drain(bl, NULL);
    CHECK(rest_a != 0 && rest_a == rest_b);
    nostall_loader_free(a);
    nostall_loader_free(bl);

    /* A state of other op arguments (the fingerprint) is refused. */
    const char *kv2[][2] = {{"threads", "2"},
                            {"batch_size", "4"},
                            {"epochs", "2"},
                            {"seed", "3"},
                            {"op_args", "other"}};
    probe_ctx c3 = {0};
    nostall_loader *c = loader_with(&op, &c3, data_dir, kv2, 5, NULL);
    CHECK_RC(nostall_loader_set_state(c, &st), NOSTALL_E_STATE);
    nostall_loader_free(c);
}

/* The MinIO cache: the second epoch from the cache, the same bytes. */
static void test_cache(void)
{
    const char *kv[][2] = {{"cache_bytes", "64M"}};
    uint64_t n;
    uint64_t plain = probe_checksum("2", NULL, 0, &n);
    probe_ctx ctx = {0};
    nostall_op op = probe_op();
    const char *kv2[][2] = {{"threads", "2"},
                            {"batch_size", "8"},
                            {"epochs", "2"},
                            {"seed", "5"},
                            {"cache_bytes", "64M"}};
    nostall_loader *ld = loader_with(&op, &ctx, data_dir, kv2, 5, NULL);
    uint64_t cached = drain(ld, NULL);
    nostall_stats st;
    CHECK_OK(nostall_loader_stats(ld, &st, sizeof st));
    CHECK_EQ(st.cache_hits, 30);
    CHECK_EQ(st.storage_reads, 30);
    CHECK(plain == cached);
    nostall_loader_free(ld);
    (void)kv;
}

/* A failing run: a counted skip naming the op, the path and its message;
 * under on_bad_item=fail the error the consumer receives. */
static void test_bad_items(void)
{
    probe_ctx ctx = {.fail_mod = 7, .fail_rem = 3, .fail_status = NOSTALL_E_UNSUPPORTED};
    nostall_op op = probe_op();
    const char *kv[][2] = {{"threads", "2"}, {"batch_size", "8"}, {"epochs", "1"}};
    nostall_loader *ld = loader_with(&op, &ctx, data_dir, kv, 3, NULL);
    uint64_t items = 0;
    drain(ld, &items);
    CHECK_EQ(items, 26); /* 3, 10, 17, 24 */
    CHECK_EQ(nostall_loader_skipped_count(ld), 4);
    nostall_skip_info si;
    CHECK_OK(nostall_loader_skipped(ld, 0, &si));
    CHECK_EQ(si.index, 3);
    CHECK_EQ(si.status, NOSTALL_E_UNSUPPORTED);
    CHECK(strstr(si.reason, "op 'probe': ") && strstr(si.reason, si.path) &&
          strstr(si.reason, ": boom at 3"));
    nostall_loader_free(ld);

    probe_ctx c2 = {.fail_mod = 7, .fail_rem = 3}; /* returns 42 */
    const char *kv2[][2] = {{"threads", "2"},
                            {"batch_size", "8"},
                            {"epochs", "1"},
                            {"on_bad_item", "fail"},
                            {"shuffle", "0"}};
    ld = loader_with(&op, &c2, data_dir, kv2, 5, NULL);
    nostall_batch b;
    int rc;
    while (ld && (rc = nostall_loader_next(ld, &b)) == 0) nostall_loader_release(ld, &b);
    CHECK_RC(rc, NOSTALL_E_CORRUPT);
    CHECK(strstr(nostall_last_error(), "op 'probe'") &&
          strstr(nostall_last_error(), "the op gave no reason"));
    nostall_loader_free(ld);
}

/* Every refusal, with a message that says what is wrong. */
static void test_refusals(void)
{
    nostall_config *cfg = NULL;
    nostall_op op = probe_op();
    CHECK_OK(nostall_config_create(&cfg));
    op.version = 2;
    CHECK_RC(nostall_config_set_op(cfg, &op, NULL), NOSTALL_E_UNSUPPORTED);
    CHECK(strstr(nostall_last_error(), "version 2"));
    op = probe_op();
    op.run = NULL;
    CHECK_RC(nostall_config_set_op(cfg, &op, NULL), NOSTALL_E_INVALID);
    op = probe_op();
    op.size = 8;
    CHECK_RC(nostall_config_set_op(cfg, &op, NULL), NOSTALL_E_INVALID);
    op = probe_op();
    op.input = 7;
    CHECK_RC(nostall_config_set_op(cfg, &op, NULL), NOSTALL_E_INVALID);
    CHECK_RC(nostall_config_set_op(NULL, &op, NULL), NOSTALL_E_INVALID);
    nostall_config_free(cfg);

    int rc;
    const char *kv[][2] = {{"threads", "1"}};
    probe_ctx fail = {.create_fail = 1};
    op = probe_op();
    const char *kva[][2] = {{"threads", "1"}, {"op_args", "a b"}};
    nostall_loader *ld = loader_with(&op, &fail, data_dir, kva, 2, &rc);
    CHECK_RC(rc, NOSTALL_E_OPTION);
    CHECK(!ld && strstr(nostall_last_error(), "op 'probe': create failed: nope: a b"));
    CHECK_EQ(atomic_load(&fail.destroys), 0);
    probe_ctx dup = {.dup_name = 1}, lab = {.label_name = 1}, bsf = {.bad_shape_field = 1};
    ld = loader_with(&op, &dup, data_dir, kv, 1, &rc);
    CHECK_RC(rc, NOSTALL_E_INVALID);
    CHECK(!ld && strstr(nostall_last_error(), "field 'image' declared twice"));
    CHECK_EQ(atomic_load(&dup.destroys), 1); /* created, then refused: destroyed */
    ld = loader_with(&op, &lab, data_dir, kv, 1, &rc);
    CHECK_RC(rc, NOSTALL_E_INVALID);
    CHECK(!ld && strstr(nostall_last_error(), "'label'"));
    ld = loader_with(&op, &bsf, data_dir, kv, 1, &rc);
    CHECK_RC(rc, NOSTALL_E_INVALID);
    CHECK(!ld && strstr(nostall_last_error(), "shape_field 1"));

    /* Libraries and options. */
    const char *nolib[][2] = {{"op_library", "/nonexistent/libop.so"}};
    ld = loader_with(NULL, NULL, data_dir, nolib, 1, &rc);
    CHECK_RC(rc, NOSTALL_E_NOT_FOUND);
    CHECK(!ld && strstr(nostall_last_error(), "/nonexistent/libop.so"));
    const char *nosym[][2] = {{"op_library", "libm.so.6"}};
    ld = loader_with(NULL, NULL, data_dir, nosym, 1, &rc);
    CHECK_RC(rc, NOSTALL_E_INVALID);
    CHECK(!ld && strstr(nostall_last_error(), "no symbol nostall_op_v1"));
    probe_ctx c = {0};
    ld = loader_with(&op, &c, data_dir, nosym, 1, &rc);
    CHECK_RC(rc, NOSTALL_E_OPTION);
    CHECK(!ld && strstr(nostall_last_error(), "one op per loader"));
    const char *args[][2] = {{"op_args", "size=3"}};
    ld = loader_with(NULL, NULL, data_dir, args, 1, &rc);
    CHECK_RC(rc, NOSTALL_E_OPTION);
    CHECK(!ld && strstr(nostall_last_error(), "without an op"));
    const char *det[][2] = {{"task", "tokens"}};
    ld = loader_with(&op, &c, data_dir, det, 1, &rc);
    CHECK_RC(rc, NOSTALL_E_UNSUPPORTED);
    CHECK(!ld && strstr(nostall_last_error(), "task=tokens"));
    char notlib[4200];
    snprintf(notlib, sizeof notlib, "%s/class_000/not_a_library.so", data_dir);
    FILE *fp = fopen(notlib, "w");
    if (fp) {
        fputs("not an ELF file\n", fp);
        fclose(fp);
    }
    const char *bad[][2] = {{"op_library", notlib}};
    ld = loader_with(NULL, NULL, data_dir, bad, 1, &rc);
    CHECK_RC(rc, NOSTALL_E_INVALID);
    CHECK(!ld && strstr(nostall_last_error(), "cannot load it"));
    unlink(notlib);
}

/* task=bytes: every file is an item; a bytes-input op sees them as fetched. */
static void test_bytes(void)
{
    probe_ctx ctx = {.bytes_input = 1};
    nostall_op op = probe_op();
    op.input = NOSTALL_OP_INPUT_BYTES;
    const char *kv[][2] = {{"threads", "2"}, {"batch_size", "4"}, {"epochs", "1"}, {"task", "bytes"}};
    nostall_loader *ld = loader_with(&op, &ctx, bytes_dir, kv, 4, NULL);
    CHECK(ctx.saw_sample);
    nostall_batch b;
    int items = 0, texts = 0;
    while (ld && nostall_loader_next(ld, &b) == 0) {
        const uint8_t *head = nostall_batch_field(&b, "head")->data;
        const int64_t *len = nostall_batch_field(&b, "len")->data;
        for (uint32_t i = 0; i < b.count; i++, items++) {
            const char *path;
            int64_t label;
            struct stat st;
            uint8_t want[8] = {0};
            CHECK_OK(nostall_loader_item(ld, b.indices[i], &path, &label));
            CHECK(stat(path, &st) == 0 && st.st_size == len[i]);
            FILE *fp = fopen(path, "rb");
            if (fp) {
                CHECK(fread(want, 1, 8, fp) > 0);
                fclose(fp);
            }
            CHECK(memcmp(want, head + i * 8, 8) == 0);
            texts += strstr(path, ".txt") != NULL;
        }
        nostall_loader_release(ld, &b);
    }
    CHECK_EQ(items, 13);
    CHECK_EQ(texts, 1);
    nostall_loader_free(ld);
}

/* The example op through op_library: its build (CMake's, beside the CLI),
 * else compiled here with cc; skipped when neither is possible. */
static int example_library(char *out, size_t n)
{
    const char *env = getenv("NOSTALL_OP_EXAMPLE"), *cli = getenv("NOSTALL_CLI");
    if (env && access(env, R_OK) == 0) return snprintf(out, n, "%s", env), 1;
    if (cli) {
        snprintf(out, n, "%.*s/examples/libop_color_jitter.so",
                 (int)(strrchr(cli, '/') ? strrchr(cli, '/') - cli : 1),
                 strrchr(cli, '/') ? cli : ".");
        if (access(out, R_OK) == 0) return 1;
    }
    /* the source tree: this file is ROOT/tests/test_op.c */
    char root[4096];
    snprintf(root, sizeof root, "%s", __FILE__);
    char *cut = strstr(root, "/tests/test_op.c");
    if (!cut) return 0;
    *cut = '\0';
    const char *dir = test_tmpdir("op_example");
    char cmd[16384];
    snprintf(out, n, "%s/libop_color_jitter.so", dir);
    snprintf(cmd, sizeof cmd,
             "cc -std=c11 -O2 -shared -fPIC -I '%s/include' "
             "'%s/examples/op_color_jitter.c' -o '%s' -lm",
             root, root, out);
    return system(cmd) == 0;
}

static void test_library(void)
{
    char lib[4096];
    if (!example_library(lib, sizeof lib)) {
        fprintf(stderr, "SKIP part: the example op could not be built\n");
        return;
    }
    uint64_t h[2];
    for (int t = 0; t < 2; t++) {
        const char *kv[][2] = {{"threads", t ? "3" : "1"},
                               {"batch_size", "8"},
                               {"epochs", "2"},
                               {"op_library", lib},
                               {"op_args", "size=20 contrast=0.8"}};
        nostall_loader *ld = loader_with(NULL, NULL, data_dir, kv, 5, NULL);
        nostall_batch b;
        if (ld && nostall_loader_next(ld, &b) == 0) {
            CHECK_EQ(b.nfields, 2);
            CHECK_EQ(b.height, 20);
            CHECK_EQ(b.width, 20);
            CHECK_EQ(b.channels, 3);
            CHECK_EQ(b.dtype, NOSTALL_DTYPE_UINT8);
            CHECK(b.labels != NULL);
            nostall_loader_release(ld, &b);
        }
        CHECK_OK(nostall_loader_set_state(ld, &(nostall_state){.epoch = 0}));
        h[t] = drain(ld, NULL);
        nostall_loader_free(ld);
    }
    CHECK(h[0] != 0 && h[0] == h[1]);
    const char *kv[][2] = {{"op_library", lib}, {"op_args", "size=20 hue=0.1"}};
    int rc;
    nostall_loader *ld = loader_with(NULL, NULL, data_dir, kv, 2, &rc);
    CHECK_RC(rc, NOSTALL_E_OPTION);
    CHECK(!ld && strstr(nostall_last_error(),
                        "op 'color_jitter': create failed: op_args: unknown key 'hue'"));
}

int main(void)
{
    const char *tmp = test_tmpdir("op");
    snprintf(data_dir, sizeof data_dir, "%s/data", tmp);
    snprintf(bytes_dir, sizeof bytes_dir, "%s/bytes", tmp);
    gen_dataset(data_dir, 30, 3);
    gen_dataset(bytes_dir, 12, 2);
    char note[4200];
    snprintf(note, sizeof note, "%s/class_001/note.txt", bytes_dir);
    FILE *fp = fopen(note, "w");
    if (!fp) return 1;
    fputs("a text file: an item of task=bytes\n", fp);
    fclose(fp);

    test_threads();
    test_content();
    test_echo();
    test_resume();
    test_cache();
    test_bad_items();
    test_refusals();
    test_bytes();
    test_library();
    TEST_EXIT();
}
