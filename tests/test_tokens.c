/*
 * test_tokens.c — the task=tokens recipe below and through the loader:
 *   - the .npy header parser on hand-made headers (versions 1-3, every
 *     accepted dtype, key order, padding; malformed and refused ones with
 *     their reason; a short buffer asks for more);
 *   - locate: every range lies in the file and holds its window, a cache
 *     key always names the same bytes (random units, chunks), keys < keys;
 *     without a cache a window reads exactly its bytes;
 *   - the stages: make on the range, on the unit and on the whole file gives
 *     the same fields, and equals transform(decode()); a fetch of another
 *     size is an error naming the file;
 *   - the loader over a file whose token i is i: every window is L + 1
 *     consecutive tokens starting where the documented rule says (chunks:
 *     i * L), targets are the window shifted by one, one epoch covers
 *     (N - 1) / L items, the same bytes for 1, 2 and 4 threads, another
 *     epoch other windows;
 *   - create errors: odd sizes, too short, a .npy with bytes after its data,
 *     a window over max_file_bytes, each naming the file; random windows
 *     with a cache too small for every unit (exactly enough is accepted).
 */
#include <fcntl.h>
#include <sys/stat.h>

#include "check.h"
#include "common/config.h"
#include "common/rng.h"
#include "recipe/recipe.h"

#include "dataset/npy.h"

#define WINDOW_PURPOSE NST_RNG_WINDOW

static const char *dir;

/* A .npy of `n` elements of `descr` with header text `dict` (padded as
 * numpy pads, to a multiple of 64), version `major`; the data is
 * elements 0, 1, 2, ... of the type. Returns the path. */
static const char *write_npy(const char *name, int major, const char *dict, uint32_t esize,
                             uint64_t n, int64_t extra)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    size_t prefix = major == 1 ? 10 : 12, dl = strlen(dict);
    size_t total = (prefix + dl + 1 + 63) / 64 * 64, hlen = total - prefix;
    uint8_t head[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', (uint8_t)major, 0};
    head[8] = (uint8_t)hlen, head[9] = (uint8_t)(hlen >> 8);
    if (major != 1) head[10] = (uint8_t)(hlen >> 16), head[11] = (uint8_t)(hlen >> 24);
    fwrite(head, 1, prefix, f);
    fputs(dict, f);
    for (size_t i = dl; i + 1 < hlen; i++) fputc(' ', f);
    fputc('\n', f);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t v = i;
        fwrite(&v, 1, esize, f); /* little-endian machine */
    }
    for (int64_t i = 0; i < extra; i++) fputc(0, f);
    fclose(f);
    return path;
}

static int parse(const char *text, int major, nst_npy *out, char *why)
{
    uint8_t buf[512];
    size_t prefix = major == 1 ? 10 : 12, hl = strlen(text);
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (uint8_t)major, buf[7] = 0;
    buf[8] = (uint8_t)hl, buf[9] = 0, buf[10] = 0, buf[11] = 0;
    memcpy(buf + prefix, text, hl);
    uint64_t need;
    return nst_npy_parse(buf, prefix + hl, out, &need, why, 256);
}

static void test_npy_parser(void)
{
    nst_npy h;
    char why[256];
    static const struct {
        const char *descr;
        int kind;
    } ok[] = {{"<u2", 0}, {"<u4", 1}, {"<i4", 2}, {"<i8", 3}};
    for (int k = 0; k < 4; k++)
        for (int major = 1; major <= 3; major++) {
            char text[200];
            snprintf(text, sizeof text,
                     "{'descr': '%s', 'fortran_order': False, 'shape': (1234,), }    \n",
                     ok[k].descr);
            CHECK_EQ(parse(text, major, &h, why), 0);
            CHECK_EQ(h.kind, ok[k].kind);
            CHECK_EQ(h.count, 1234);
            CHECK_EQ(h.major, major);
            CHECK_EQ(h.data_offset, (major == 1 ? 10 : 12) + strlen(text));
        }
    /* other key order, double quotes, Fortran order of a 1-D array, "(n)" and 'L' */
    CHECK_EQ(parse("{\"shape\": (7L,), \"fortran_order\": True, \"descr\": \"<u2\"}\n", 1, &h, why),
             0);
    CHECK_EQ(h.count, 7);
    CHECK_EQ(parse("{'descr':'<u4','fortran_order':False,'shape':(9)}", 1, &h, why), 0);
    CHECK_EQ(h.count, 9);
    /* refused, with the reason */
    static const struct {
        const char *text, *why;
    } bad[] = {
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", "dtype '<f4'"},
        {"{'descr': '>u2', 'fortran_order': False, 'shape': (3,), }", "dtype '>u2'"},
        {"{'descr': '<u2', 'fortran_order': False, 'shape': (3, 4), }", "2 dimensions"},
        {"{'descr': '<u2', 'fortran_order': False, 'shape': (), }", "0 dimensions"},
        {"{'descr': '<u2', 'shape': (3,), }", "lacks 'fortran_order'"},
        {"{'descr': '<u2', 'fortran_order': False, 'shape': (3,), 'x': 1}", "unexpected"},
        {"{'descr': '<u2', 'descr': '<u2', 'fortran_order': False, 'shape': (3,)}", "repeated"},
        {"{'descr': '<u2', 'fortran_order': 0, 'shape': (3,)}", "True or False"},
        {"{'descr': '<u2', 'fortran_order': False, 'shape': (-3,)}", "tuple of sizes"},
        {"{'descr': '<u2', 'fortran_order': False, 'shape': (99999999999999999999,)}",
         "tuple of sizes"},
        {"{'descr': '<u2', 'fortran_order': False, 'shape': (3,)} junk", "after the dict"},
        {"['descr']", "not a dict"},
        {"{'descr': '<u2' 'fortran_order': False}", "expected ','"},
        {"{'descr: '<u2'}", "malformed key"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        why[0] = 0;
        int rc = parse(bad[i].text, 1, &h, why);
        CHECK_EQ(rc, -1);
        if (!strstr(why, bad[i].why)) {
            fprintf(stderr, "header %s: reason '%s' lacks '%s'\n", bad[i].text, why, bad[i].why);
            check_failures_++;
        }
    }
    /* versions, magic, sizes */
    uint8_t b[16] = {0x93, 'N', 'U', 'M', 'P', 'Y', 4, 0, 10, 0};
    uint64_t need;
    CHECK_EQ(nst_npy_parse(b, 16, &h, &need, why, sizeof why), -1);
    CHECK(strstr(why, "version 4.0") != NULL);
    b[6] = 1;
    CHECK_EQ(nst_npy_parse(b, 16, &h, &need, why, sizeof why), 1); /* 10 + 10 bytes needed */
    CHECK_EQ(need, 20);
    CHECK_EQ(nst_npy_parse(b, 3, &h, &need, why, sizeof why), 1);
    CHECK_EQ(need, 12);
    b[6] = 2, b[8] = 0, b[9] = 0, b[10] = 0, b[11] = 0x10; /* 256 MiB header */
    CHECK_EQ(nst_npy_parse(b, 16, &h, &need, why, sizeof why), -1);
    CHECK(strstr(why, "header of") != NULL);
    CHECK_EQ(nst_npy_parse((const uint8_t *)"\x93NUMPZ\x01\x00", 8, &h, &need, why, sizeof why), -1);
    CHECK(strstr(why, "not a .npy") != NULL);
}

/* A raw file whose token i is i (uint32), n tokens. */
static const char *write_counting(const char *name, uint64_t n)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    for (uint64_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)i;
        fwrite(&v, 4, 1, f);
    }
    fclose(f);
    return path;
}

static nostall_config *cfg_of(const char *kv[][2], int n)
{
    nostall_config *cfg = NULL;
    if (nostall_config_create(&cfg) < 0) exit(1);
    for (int i = 0; i < n; i++)
        if (nostall_config_set(cfg, kv[i][0], kv[i][1]) < 0) {
            fprintf(stderr, "%s=%s: %s\n", kv[i][0], kv[i][1], nostall_last_error());
            exit(1);
        }
    return cfg;
}

static uint64_t rule_start(uint64_t seed, uint64_t epoch, uint64_t item, uint64_t n, uint64_t l)
{
    nst_rng r;
    nst_rng_seed(&r, nst_hash4(seed, epoch, item, WINDOW_PURPOSE));
    return nst_rng_below(&r, n - l);
}

/* locate and the stages, called directly. */
static void test_recipe(const char *windows, const char *cache)
{
    const uint64_t n = 5000, l = 10;
    const char *path = write_counting("count.bin", n);
    const char *kv[][2] = {{"task", "tokens"},        {"context_length", "10"},
                           {"token_dtype", "uint32"}, {"windows", windows},
                           {"cache_bytes", cache},    {"seed", "11"}};
    nostall_config *cfg = cfg_of(kv, 6);
    nst_recipe *r = NULL;
    CHECK_OK(nst_recipe_create(&r, cfg, path));
    nostall_config_free(cfg);
    if (!r) return;
    int chunks = !strcmp(windows, "chunks"), cached = strcmp(cache, "0") != 0;
    CHECK_EQ(r->items, (n - 1) / l);
    CHECK_EQ(r->nfields, 2);
    CHECK_EQ(r->fields[0].shape[0], l);
    CHECK_EQ(r->label_field, UINT32_MAX);
    /* random + cache: units of 64 x 11 = 704 starts; 4990 starts -> 8 keys */
    CHECK_EQ(r->keys, chunks ? r->items : (n - l + 703) / 704);
    uint64_t *key_off = calloc(r->keys, sizeof *key_off),
             *key_len = calloc(r->keys, sizeof *key_len);
    uint8_t *file = malloc(n * 4);
    FILE *f = fopen(path, "rb");
    CHECK_EQ(fread(file, 4, n, f), n);
    fclose(f);
    nst_recipe_worker *w = NULL;
    CHECK_OK(r->ops->worker_create(r, &w));
    int64_t a[2][16], b[2][16], c[2][16];
    uint8_t *dst_a[2] = {(uint8_t *)a[0], (uint8_t *)a[1]},
            *dst_b[2] = {(uint8_t *)b[0], (uint8_t *)b[1]},
            *dst_c[2] = {(uint8_t *)c[0], (uint8_t *)c[1]};
    nst_decoded d;
    memset(&d, 0, sizeof d);
    memset(a, 0, sizeof a), memset(b, 0, sizeof b), memset(c, 0, sizeof c);
    int keys_ok = 1, inside = 1, same = 1, exact = 1;
    for (uint64_t epoch = 0; epoch < 3; epoch++)
        for (uint64_t i = 0; i < r->items; i++) {
            nst_item_loc loc;
            nst_recipe_locate(r, epoch, i, &loc);
            uint64_t s = chunks ? i * l : rule_start(11, epoch, i, n, l);
            keys_ok &= loc.key < r->keys && !strcmp(loc.path, path);
            /* the range holds the window, inside the file */
            inside &= loc.offset % 4 == 0 && loc.offset <= s * 4 &&
                      (s + l + 1) * 4 <= loc.offset + loc.length &&
                      loc.offset + loc.length <= n * 4;
            if (!cached) exact &= loc.offset == s * 4 && loc.length == (l + 1) * 4;
            if (cached && key_len[loc.key] &&
                (key_off[loc.key] != loc.offset || key_len[loc.key] != loc.length))
                same = 0; /* a key must always mean the same bytes */
            key_off[loc.key] = loc.offset, key_len[loc.key] = loc.length;
            nst_recipe_times t = {0};
            nst_item_ctx ctx = {.epoch = epoch,
                                .index = i,
                                .copy = (uint32_t)i % 3,
                                .path = path,
                                .dst = dst_a};
            CHECK_OK(r->ops->make(w, &ctx, file + loc.offset, loc.length, &t));
            for (uint64_t k = 0; k < l; k++)
                same &= a[0][k] == (int64_t)(s + k) && a[1][k] == (int64_t)(s + k + 1);
            ctx.dst = dst_b; /* the whole file, as a fetch stage without ranges gives it */
            CHECK_OK(r->ops->make(w, &ctx, file, n * 4, &t));
            ctx.dst = dst_c;
            CHECK_OK(r->ops->decode(w, &ctx, file + loc.offset, loc.length, &d, &t));
            CHECK_OK(r->ops->transform(w, &ctx, &d, &t));
            same &= !memcmp(a, b, sizeof a) && !memcmp(a, c, sizeof a);
        }
    CHECK(keys_ok);
    CHECK(inside);
    CHECK(same);
    CHECK(exact);
    /* a fetch of another size is an error naming the file */
    nst_recipe_times t = {0};
    nst_item_ctx ctx = {.epoch = 0, .index = 1, .path = path, .dst = dst_a};
    CHECK_RC(r->ops->make(w, &ctx, file, 7, &t), NOSTALL_E_TRUNCATED);
    CHECK(strstr(nostall_last_error(), "count.bin") != NULL);
    nst_buf_free(&d.buf);
    r->ops->worker_free(w);
    nst_recipe_free(r);
    free(file);
    free(key_off);
    free(key_len);
}

typedef struct run_out {
    uint64_t sum, items, batches;
    int windows_ok;
    uint64_t min_start, max_start;
} run_out;

static void run(const char *path, const char *windows, const char *threads, const char *epochs,
                run_out *o)
{
    const uint64_t n = 5000, l = 10;
    const char *kv[][2] = {{"task", "tokens"},        {"context_length", "10"},
                           {"token_dtype", "uint32"}, {"windows", windows},
                           {"threads", threads},      {"seed", "11"},
                           {"batch_size", "16"},      {"epochs", epochs}};
    nostall_config *cfg = cfg_of(kv, 8);
    nostall_loader *ld = NULL;
    memset(o, 0, sizeof *o);
    o->windows_ok = 1;
    o->min_start = UINT64_MAX;
    CHECK_OK(nostall_loader_create(&ld, path, cfg));
    nostall_config_free(cfg);
    if (!ld) return;
    for (;;) {
        nostall_batch b;
        int rc = nostall_loader_next(ld, &b);
        if (rc == NOSTALL_DONE) break;
        if (rc == NOSTALL_EPOCH_END) continue;
        CHECK_OK(rc);
        if (rc < 0) break;
        const nostall_field *tok = nostall_batch_field(&b, "tokens"),
                            *tgt = nostall_batch_field(&b, "targets");
        CHECK(tok && tgt && tok->dtype == NOSTALL_DTYPE_INT64 && tok->shape[0] == l);
        CHECK(b.images == tok->data && b.labels == NULL);
        for (uint32_t k = 0; tok && tgt && k < b.count; k++) {
            const int64_t *x = (const int64_t *)tok->data + k * l,
                          *y = (const int64_t *)tgt->data + k * l;
            uint64_t s = (uint64_t)x[0];
            uint64_t want = !strcmp(windows, "chunks")
                                ? b.indices[k] * l
                                : rule_start(11, b.epoch, b.indices[k], n, l);
            o->windows_ok &= s == want && s + l + 1 <= n;
            for (uint64_t j = 0; j < l; j++)
                o->windows_ok &= x[j] == (int64_t)(s + j) && y[j] == (int64_t)(s + j + 1);
            if (s < o->min_start) o->min_start = s;
            if (s > o->max_start) o->max_start = s;
        }
        nostall_checksum_batch(&o->sum, &b);
        o->items += b.count;
        o->batches++;
        CHECK_OK(nostall_loader_release(ld, &b));
    }
    nostall_loader_free(ld);
}

static void test_loader(void)
{
    const char *path = write_counting("count.bin", 5000);
    for (int m = 0; m < 2; m++) {
        const char *windows = m ? "chunks" : "random";
        run_out r1, r2, r4;
        run(path, windows, "1", "2", &r1);
        run(path, windows, "2", "2", &r2);
        run(path, windows, "4", "2", &r4);
        fprintf(stderr, "windows=%s: %llu items, starts %llu..%llu, checksum %016llx\n", windows,
                (unsigned long long)r1.items, (unsigned long long)r1.min_start,
                (unsigned long long)r1.max_start, (unsigned long long)r1.sum);
        CHECK(r1.windows_ok && r2.windows_ok && r4.windows_ok);
        CHECK_EQ(r1.items, 2 * 499);
        CHECK_EQ(r1.sum, r2.sum);
        CHECK_EQ(r1.sum, r4.sum);
        if (m == 0)
            CHECK(r1.min_start < 100 && r1.max_start > 4890);
        else
            CHECK(r1.min_start == 0 && r1.max_start == 498 * 10);
    }
}

static void expect_create_error(const char *path, const char *kv[][2], int n, int status,
                                const char *want)
{
    nostall_config *cfg = cfg_of(kv, n);
    nostall_loader *ld = NULL;
    int rc = nostall_loader_create(&ld, path, cfg);
    nostall_config_free(cfg);
    CHECK_EQ(rc, status);
    const char *msg = nostall_last_error();
    if (!strstr(msg, path) || !strstr(msg, want)) {
        fprintf(stderr, "create %s: message '%s' lacks the path or '%s'\n", path, msg, want);
        check_failures_++;
    }
    nostall_loader_free(ld);
}

static void test_create_errors(void)
{
    const char *kv[][2] = {{"task", "tokens"}, {"context_length", "10"}};
    char path[4096];
    snprintf(path, sizeof path, "%s/odd.bin", dir);
    FILE *f = fopen(path, "wb");
    fwrite("abcde", 1, 5, f);
    fclose(f);
    expect_create_error(path, kv, 2, NOSTALL_E_DATASET,
                        "5 bytes is not a whole number of uint16 tokens");
    expect_create_error(
        write_counting("c5.bin", 5), kv, 2, NOSTALL_E_DATASET,
        "10 uint16 tokens (20 bytes), fewer than one window of context_length + 1 = 11");
    snprintf(path, sizeof path, "%s/empty.bin", dir);
    fclose(fopen(path, "wb"));
    expect_create_error(path, kv, 2, NOSTALL_E_DATASET, "0 uint16 tokens (0 bytes)");
    expect_create_error(write_npy("extra.npy", 1,
                                  "{'descr': '<u2', 'fortran_order': False, 'shape': (100,), }", 2,
                                  100, 3),
                        kv, 2, NOSTALL_E_DATASET, "(bytes after the data)");
    expect_create_error(write_npy("cut.npy", 3,
                                  "{'descr': '<i8', 'fortran_order': False, 'shape': (100,), }", 8,
                                  99, 0),
                        kv, 2, NOSTALL_E_DATASET, "(truncated)");
    expect_create_error(write_npy("v9.npy", 9, "{}", 2, 0, 0), kv, 2, NOSTALL_E_DATASET,
                        "version 9.0");
    const char *big[][2] = {{"task", "tokens"},
                            {"context_length", "1000"},
                            {"max_file_bytes", "1000"}};
    expect_create_error(write_counting("c5000.bin", 5000), big, 3, NOSTALL_E_OPTION,
                        "over max_file_bytes");
    /* random windows and a cache too small for every unit (10000 uint16
     * tokens, units of 704 starts: 15 units, 10000 + 14 x 10 tokens) are
     * refused; exactly enough is accepted, and so are chunks */
    const char *c5000 = write_counting("c5000u16.bin", 5000);
    const char *small[][2] = {{"task", "tokens"}, {"context_length", "10"}, {"cache_bytes", "20279"}};
    expect_create_error(c5000, small, 3, NOSTALL_E_OPTION, "Give cache_bytes >= 20280");
    const char *chunks[][2] = {{"task", "tokens"},
                               {"context_length", "10"},
                               {"cache_bytes", "20279"},
                               {"windows", "chunks"}};
    const char *enough[][2] = {{"task", "tokens"},
                               {"context_length", "10"},
                               {"cache_bytes", "20280"}};
    for (int k = 0; k < 2; k++) {
        nostall_config *cc = k ? cfg_of(enough, 3) : cfg_of(chunks, 4);
        nostall_loader *lc = NULL;
        CHECK_OK(nostall_loader_create(&lc, c5000, cc));
        nostall_loader_free(lc);
        nostall_config_free(cc);
    }
    /* a valid version-3 .npy of int64 with a long header loads */
    char dict[600];
    snprintf(dict, sizeof dict, "{'descr': '<i8', 'fortran_order': False, 'shape': (64,), %*s}",
             300, "");
    const char *ok = write_npy("long.npy", 3, dict, 8, 64, 0);
    nostall_config *cfg = cfg_of(kv, 2);
    nostall_loader *ld = NULL;
    CHECK_OK(nostall_loader_create(&ld, ok, cfg));
    nostall_dataset_info info;
    if (ld) {
        CHECK_OK(nostall_loader_info(ld, &info, sizeof info));
        CHECK_EQ(info.items, 6);
        CHECK_EQ(info.task, NOSTALL_TASK_TOKENS);
    }
    nostall_loader_free(ld);
    nostall_config_free(cfg);
}

int main(void)
{
    dir = test_tmpdir("test_tokens");
    test_npy_parser();
    test_recipe("random", "0");
    test_recipe("random", "1M");
    test_recipe("chunks", "0");
    test_recipe("chunks", "1M");
    test_loader();
    test_create_errors();
    TEST_EXIT();
}
