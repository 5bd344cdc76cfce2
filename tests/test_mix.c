/*
 * test_mix.c — weighted mixing (docs/mixing.md): the specification's
 * parser; per-source fractions over 100 000 draws within 1% of the weights
 * (0.7/0.3 and 0.5/0.3/0.2, whole and partial mixed epochs); each source
 * walking its own epochs at its own rate (every item once per own epoch);
 * order purity (any order of lookups, a fresh mix); ranks' slices; and
 * through the loader: the source field and labels (own, offset), the same
 * bytes for 1 and 3 threads, a repeated item's fresh draws, resume mid-epoch
 * byte for byte against an uninterrupted run, states of another mix
 * refused, and option errors.
 */
#include <math.h>

#include "check.h"
#include "order/mix.h"
#include "order/sampler.h"
#include "test_data.h"

static void test_parse(void)
{
    char buf[512];
    const char *paths[NST_MIX_MAX];
    double w[NST_MIX_MAX];
    uint32_t n = 0;
    CHECK_OK(nst_mix_parse("a:0.7, b/c:0.3", buf, sizeof buf, paths, w, &n));
    CHECK_EQ(n, 2);
    CHECK(n == 2 && !strcmp(paths[0], "a") && !strcmp(paths[1], "b/c"));
    CHECK(n == 2 && w[0] == 0.7 && w[1] == 0.3);
    /* the weight is after the last ':' (URLs keep theirs) */
    CHECK_OK(nst_mix_parse("http://h:8080/x.tar:2,s3://b/k:1", buf, sizeof buf, paths, w, &n));
    CHECK(n == 2 && !strcmp(paths[0], "http://h:8080/x.tar") && w[0] == 2);
    CHECK(n == 2 && !strcmp(paths[1], "s3://b/k") && w[1] == 1);
    /* with a newline, only newlines separate: paths may hold commas */
    CHECK_OK(nst_mix_parse("a,b:1\nc:3\n", buf, sizeof buf, paths, w, &n));
    CHECK(n == 2 && !strcmp(paths[0], "a,b") && !strcmp(paths[1], "c") && w[1] == 3);
    static const char *const bad[] = {"",   "a",     "a:0",   "a:-1",    "a:x",
                                      ":1", "a:1,b", "a:nan", "a:1e999", "a:1 2"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = nst_mix_parse(bad[i], buf, sizeof buf, paths, w, &n);
        if (rc != NOSTALL_E_OPTION) fprintf(stderr, "parse '%s': %d\n", bad[i], rc);
        CHECK_EQ(rc, NOSTALL_E_OPTION);
    }
    char many[2048] = "";
    for (int i = 0; i <= NST_MIX_MAX; i++) strcat(many, "d:1,");
    CHECK_RC(nst_mix_parse(many, buf, sizeof buf, paths, w, &n), NOSTALL_E_OPTION);
}

/* Fractions of `draws` consecutive draws from the start of epoch 0 (rank
 * 0 of 1), into frac[]. */
static void fractions(const nst_mix *m, uint64_t seed, uint64_t draws, double *frac)
{
    nst_sampler s;
    uint64_t count[NST_MIX_MAX] = {0};
    CHECK_OK(nst_sampler_init(&s, m->len, seed, 0, 1, 1, 0));
    s.mix = m;
    for (uint64_t d = 0; d < draws; d++) {
        uint64_t item = nst_sampler_item(&s, d / m->len, d % m->len);
        CHECK(item < m->first[m->n]);
        count[nst_mix_source_of(m, item, NULL)]++;
    }
    for (uint32_t k = 0; k < m->n; k++) frac[k] = (double)count[k] / (double)draws;
}

static void test_fractions(void)
{
    static const char *const names[] = {"a", "b", "c"};
    nst_mix m;
    double f[NST_MIX_MAX];
    /* 0.7 / 0.3 over 100 000 draws: 12.5 mixed epochs of 8000 */
    CHECK_OK(nst_mix_init(&m, 2, (uint64_t[]){5000, 3000}, (double[]){0.7, 0.3}, names, 0, 11, 1));
    CHECK_EQ(m.len, 8000);
    CHECK_EQ(m.draws[0], 5600);
    CHECK_EQ(m.draws[1], 2400);
    fractions(&m, 11, 100000, f);
    printf("mix 0.7/0.3 (5000 + 3000 items), 100000 draws: %.4f %.4f\n", f[0], f[1]);
    CHECK(fabs(f[0] - 0.7) < 0.01 && fabs(f[1] - 0.3) < 0.01);
    /* weights need not sum to 1 */
    CHECK_OK(nst_mix_init(&m, 2, (uint64_t[]){5000, 3000}, (double[]){7, 3}, names, 0, 11, 1));
    CHECK_EQ(m.draws[0], 5600);
    /* 0.5 / 0.3 / 0.2: one whole mixed epoch of 100 000 ... */
    CHECK_OK(nst_mix_init(&m, 3, (uint64_t[]){1000, 700, 50}, (double[]){0.5, 0.3, 0.2}, names,
                          100000, 5, 1));
    CHECK(m.draws[0] == 50000 && m.draws[1] == 30000 && m.draws[2] == 20000);
    fractions(&m, 5, 100000, f);
    printf("mix 0.5/0.3/0.2 (1000 + 700 + 50 items), 100000 draws: %.4f %.4f %.4f\n", f[0], f[1],
           f[2]);
    CHECK(fabs(f[0] - 0.5) < 1e-9 && fabs(f[1] - 0.3) < 1e-9 && fabs(f[2] - 0.2) < 1e-9);
    /* ... and the first 100 000 draws of an epoch of 1 000 000 */
    CHECK_OK(nst_mix_init(&m, 3, (uint64_t[]){1000, 700, 50}, (double[]){0.5, 0.3, 0.2}, names,
                          1000000, 5, 1));
    fractions(&m, 5, 100000, f);
    printf("mix 0.5/0.3/0.2, first 100000 draws of a mixed epoch of 1000000: %.4f %.4f %.4f\n",
           f[0], f[1], f[2]);
    CHECK(fabs(f[0] - 0.5) < 0.01 && fabs(f[1] - 0.3) < 0.01 && fabs(f[2] - 0.2) < 0.01);
    /* largest remainder: counts sum to len, each within 1 of w * len */
    CHECK_OK(nst_mix_init(&m, 3, (uint64_t[]){10, 10, 10}, (double[]){1, 1, 1}, names, 100, 5, 1));
    CHECK(m.draws[0] == 34 && m.draws[1] == 33 && m.draws[2] == 33);
    /* a source that would get no slot is refused, naming it */
    CHECK_RC(nst_mix_init(&m, 2, (uint64_t[]){10, 10}, (double[]){1000, 1}, names, 100, 5, 1),
             NOSTALL_E_OPTION);
    CHECK(strstr(nostall_last_error(), "b gets no item") != NULL);
}

/* Each source walks its own epochs: every item once per own epoch, at its
 * own rate; the counters are products. */
static void test_own_epochs(void)
{
    static const char *const names[] = {"small", "large"};
    nst_mix m;
    nst_sampler s;
    enum { E = 10, NS = 10, NL = 100 };
    CHECK_OK(nst_mix_init(&m, 2, (uint64_t[]){NS, NL}, (double[]){0.5, 0.5}, names, 0, 3, 1));
    CHECK(m.len == NS + NL && m.draws[0] == 55 && m.draws[1] == 55);
    CHECK_OK(nst_sampler_init(&s, m.len, 3, 0, 1, 1, 0));
    s.mix = &m;
    /* seen[source][own epoch][item] */
    static unsigned char seen0[56][NS], seen1[6][NL];
    memset(seen0, 0, sizeof seen0);
    memset(seen1, 0, sizeof seen1);
    for (uint64_t e = 0; e < E; e++)
        for (uint64_t p = 0; p < m.len; p++) {
            uint64_t own, item = nst_sampler_item_epoch(&s, e, p, &own), local;
            uint32_t src = nst_mix_source_of(&m, item, &local);
            if (src == 0 && own < 56 && local < NS) seen0[own][local]++;
            if (src == 1 && own < 6 && local < NL) seen1[own][local]++;
            CHECK(src == 0 ? own < 55 : own < 6);
        }
    /* small: 55 own epochs in 10 mixed ones, each item once in each */
    for (int j = 0; j < 55; j++)
        for (int i = 0; i < NS; i++) CHECK_EQ(seen0[j][i], 1);
    /* large: 5.5 own epochs; the sixth half used, no item twice */
    int sixth = 0;
    for (int j = 0; j < 6; j++)
        for (int i = 0; i < NL; i++) {
            if (j < 5) CHECK_EQ(seen1[j][i], 1);
            if (j == 5) {
                CHECK(seen1[j][i] <= 1);
                sixth += seen1[j][i];
            }
        }
    CHECK_EQ(sixth, 50);
    CHECK_EQ(nst_mix_draws_before(&m, 0, E) / NS, 55);
    CHECK_EQ(nst_mix_draws_before(&m, 1, E) / NL, 5);
    /* no shuffle: the slots in order, each source in its own order */
    CHECK_OK(nst_mix_init(&m, 2, (uint64_t[]){NS, NL}, (double[]){0.5, 0.5}, names, 0, 3, 0));
    CHECK_OK(nst_sampler_init(&s, m.len, 3, 0, 1, 0, 0));
    s.mix = &m;
    for (uint64_t p = 0; p < 55; p++) CHECK_EQ(nst_sampler_item(&s, 1, p), (55 + p) % NS);
    for (uint64_t p = 55; p < 110; p++)
        CHECK_EQ(nst_sampler_item(&s, 1, p), NS + (55 + (p - 55)) % NL);
}

/* (seed, epoch, position) alone: lookups in any order, a fresh mix, the
 * ranks' slices of an epoch together are the whole epoch. */
static void test_purity(void)
{
    static const char *const names[] = {"a", "b", "c"};
    const uint64_t items[] = {37, 5, 120};
    const double w[] = {0.2, 0.3, 0.5};
    nst_mix m1, m2;
    nst_sampler s1, s2, r0, r1;
    CHECK_OK(nst_mix_init(&m1, 3, items, w, names, 0, 99, 1));
    CHECK_OK(nst_mix_init(&m2, 3, items, w, names, 0, 99, 1));
    CHECK_OK(nst_sampler_init(&s1, m1.len, 99, 0, 1, 1, 0));
    CHECK_OK(nst_sampler_init(&s2, m2.len, 99, 0, 1, 1, 0));
    s1.mix = &m1;
    s2.mix = &m2;
    uint64_t fwd[3][162];
    for (uint64_t e = 0; e < 3; e++)
        for (uint64_t p = 0; p < m1.len; p++) fwd[e][p] = nst_sampler_item(&s1, e, p);
    int differs = 0;
    for (uint64_t e = 3; e-- > 0;)
        for (uint64_t p = m2.len; p-- > 0;) {
            CHECK_EQ(nst_sampler_item(&s2, e, p), fwd[e][p]);
            if (e && fwd[e][p] != fwd[0][p]) differs = 1;
        }
    CHECK(differs); /* epochs differ */
    nst_mix m3;
    CHECK_OK(nst_mix_init(&m3, 3, items, w, names, 0, 100, 1));
    s2.mix = &m3;
    s2.seed = 100;
    differs = 0;
    for (uint64_t p = 0; p < m3.len; p++) differs |= nst_sampler_item(&s2, 0, p) != fwd[0][p];
    CHECK(differs); /* seeds differ */
    /* world 2: rank 0 and rank 1 hold the epoch's slots between them */
    CHECK_OK(nst_sampler_init(&r0, m1.len, 99, 0, 2, 1, 0));
    CHECK_OK(nst_sampler_init(&r1, m1.len, 99, 1, 2, 1, 0));
    r0.mix = r1.mix = &m1;
    for (uint64_t p = 0; p < r0.per_rank; p++) {
        CHECK_EQ(nst_sampler_item(&r0, 2, p), fwd[2][2 * p]);
        CHECK_EQ(nst_sampler_item(&r1, 2, p), fwd[2][2 * p + 1]);
    }
}

/* ---- through the loader ------------------------------------------------ */

static char dir_a[4096], dir_b[4096], spec[8300];

static const nostall_field *field(const nostall_batch *b, const char *name)
{
    for (uint32_t f = 0; f < b->nfields; f++)
        if (!strcmp(b->fields[f].name, name)) return &b->fields[f];
    return NULL;
}

static nostall_loader *mix_loader(const char *mix, const char *threads, const char *labels)
{
    const char *kv[][2] = {{"mix", mix},
                           {"threads", threads},
                           {"seed", "5"},
                           {"batch_size", "8"},
                           {"crop", "24"},
                           {"output", "uint8"},
                           {"mix_epoch_items", "50"},
                           {"epochs", "3"},
                           {"mix_labels", labels}};
    nostall_config *cfg = make_cfg(kv, 9);
    nostall_loader *ld = NULL;
    CHECK_OK(nostall_loader_create(&ld, "mix", cfg));
    nostall_config_free(cfg);
    return ld;
}

enum { MAXB = 64 };

/* Run to the end: each batch's checksum, sources counted per epoch; the
 * source field and the labels checked against the items. */
static int run_mix(nostall_loader *ld, uint64_t *sums, uint64_t count[3][2], int offset)
{
    int k = 0;
    for (;;) {
        nostall_batch b;
        int rc = nostall_loader_next(ld, &b);
        if (rc == NOSTALL_DONE) break;
        if (rc == NOSTALL_EPOCH_END) continue;
        CHECK_OK(rc);
        if (rc < 0) break;
        const nostall_field *src = field(&b, "source"), *lab = field(&b, "label");
        CHECK(src && lab && src->dtype == NOSTALL_DTYPE_INT64 && src->ndim == 0);
        for (uint32_t i = 0; src && lab && i < b.count; i++) {
            int64_t s, l, want;
            memcpy(&s, src->data + 8 * i, 8);
            memcpy(&l, lab->data + 8 * i, 8);
            CHECK_EQ(s, b.indices[i] >= 40); /* a's 40 items first */
            CHECK_OK(nostall_loader_item(ld, b.indices[i], NULL, &want));
            CHECK_EQ(l, want);
            if (s == 0) CHECK(l >= 0 && l < 4);
            if (s == 1) CHECK(offset ? (l >= 4 && l < 7) : (l >= 0 && l < 3));
            if (count && b.epoch < 3 && s >= 0 && s < 2) count[b.epoch][s]++;
        }
        if (k < MAXB) {
            sums[k] = 0;
            nostall_checksum_batch(&sums[k], &b);
            k++;
        }
        CHECK_OK(nostall_loader_release(ld, &b));
    }
    return k;
}

static void test_loader_mix(void)
{
    uint64_t s1[MAXB], s3[MAXB], count[3][2] = {{0}};
    nostall_loader *a = mix_loader(spec, "1", "own"), *b = mix_loader(spec, "3", "own");
    if (!a || !b) {
        nostall_loader_free(a);
        nostall_loader_free(b);
        return;
    }
    nostall_dataset_info info;
    CHECK_OK(nostall_loader_info(a, &info, sizeof info));
    CHECK_EQ(info.items, 52);
    CHECK_EQ(info.items_per_epoch, 50);
    int n1 = run_mix(a, s1, count, 0), n3 = run_mix(b, s3, NULL, 0);
    CHECK_EQ(n1, 21); /* 3 epochs of 50: 6 full batches and one of 2 */
    CHECK_EQ(n1, n3);
    for (int i = 0; i < n1 && i < n3; i++) CHECK(s1[i] == s3[i]);
    for (int e = 0; e < 3; e++) { /* exactly 35 and 15 per mixed epoch */
        CHECK_EQ(count[e][0], 35);
        CHECK_EQ(count[e][1], 15);
    }
    nostall_loader_free(a);
    nostall_loader_free(b);

    /* offset labels: b's classes follow a's 4 */
    nostall_loader *c = mix_loader(spec, "2", "offset");
    if (c) {
        run_mix(c, s1, NULL, 1);
        CHECK_OK(nostall_loader_info(c, &info, sizeof info));
        CHECK_EQ(info.classes, 7);
    }
    nostall_loader_free(c);
}

/* b (12 items) is drawn 15 times per mixed epoch: the 3 items it draws
 * twice in epoch 0 (its own epochs 0 and 1) get their own crops. */
static void test_repeats_fresh(void)
{
    nostall_loader *ld = mix_loader(spec, "2", "own");
    if (!ld) return;
    enum { B = 12 };
    unsigned char img[B][2][24 * 24 * 3];
    int uses[B] = {0}, pairs = 0;
    for (;;) {
        nostall_batch b;
        int rc = nostall_loader_next(ld, &b);
        if (rc != 0) break;
        if (b.epoch == 0)
            for (uint32_t i = 0; i < b.count; i++) {
                uint64_t k = b.indices[i];
                CHECK(b.item_bytes == sizeof img[0][0]);
                if (k < 40 || k >= 40 + B || b.item_bytes != sizeof img[0][0]) continue;
                if (uses[k - 40] < 2)
                    memcpy(img[k - 40][uses[k - 40]], b.images + i * b.item_bytes, b.item_bytes);
                uses[k - 40]++;
            }
        CHECK_OK(nostall_loader_release(ld, &b));
        if (b.epoch > 0) break;
    }
    for (int i = 0; i < B; i++) {
        CHECK(uses[i] == 1 || uses[i] == 2);
        if (uses[i] == 2) {
            pairs++;
            CHECK(memcmp(img[i][0], img[i][1], sizeof img[i][0]) != 0);
        }
    }
    CHECK_EQ(pairs, 3);
    nostall_loader_free(ld);
}

/* A state saved mid-epoch resumes byte for byte; another mix refuses it. */
static void test_resume(void)
{
    uint64_t whole[MAXB], rest[MAXB];
    nostall_loader *a = mix_loader(spec, "2", "own");
    if (!a) return;
    int n = run_mix(a, whole, NULL, 0);
    nostall_loader_free(a);
    /* stop after 9 batches (epoch 1, position 16), save, resume in another
     * loader with another thread count */
    a = mix_loader(spec, "1", "own");
    nostall_state st;
    int got = 0;
    while (a && got < 9) {
        nostall_batch b;
        int rc = nostall_loader_next(a, &b);
        if (rc == NOSTALL_EPOCH_END) continue;
        CHECK_OK(rc);
        if (rc < 0) break;
        CHECK_OK(nostall_loader_release(a, &b));
        got++;
    }
    CHECK_OK(nostall_loader_get_state(a, &st));
    CHECK_EQ(st.epoch, 1);
    CHECK_EQ(st.position, 16);
    nostall_loader_free(a);
    nostall_loader *b = mix_loader(spec, "3", "own");
    if (b) {
        CHECK_OK(nostall_loader_set_state(b, &st));
        int m = run_mix(b, rest, NULL, 0);
        CHECK_EQ(m, n - 9);
        for (int i = 0; i < m && 9 + i < n; i++) CHECK(rest[i] == whole[9 + i]);
    }
    nostall_loader_free(b);
    /* other weights, another label scheme, one source alone: refused */
    char other[8300];
    snprintf(other, sizeof other, "%s:0.5,%s:0.5", dir_a, dir_b);
    nostall_loader *c = mix_loader(other, "1", "own");
    if (c) {
        CHECK_RC(nostall_loader_set_state(c, &st), NOSTALL_E_STATE);
        CHECK(strstr(nostall_last_error(), "mix") != NULL);
    }
    nostall_loader_free(c);
    c = mix_loader(spec, "1", "offset");
    if (c) CHECK_RC(nostall_loader_set_state(c, &st), NOSTALL_E_STATE);
    nostall_loader_free(c);
    nostall_loader *d = NULL;
    CHECK_OK(nostall_loader_create(&d, dir_a, NULL));
    if (d) CHECK_RC(nostall_loader_set_state(d, &st), NOSTALL_E_STATE);
    nostall_loader_free(d);
}

static void test_errors(void)
{
    nostall_loader *ld = NULL;
    nostall_config *cfg = NULL;
    char bad[8300];
    CHECK_OK(nostall_config_create(&cfg));
    /* a malformed weight is refused by the option itself */
    snprintf(bad, sizeof bad, "%s:0", dir_a);
    CHECK_OK(nostall_config_set(cfg, "mix", bad));
    CHECK_RC(nostall_loader_create(&ld, "mix", cfg), NOSTALL_E_OPTION);
    CHECK(strstr(nostall_last_error(), "weight") != NULL);
    /* a missing source names itself */
    snprintf(bad, sizeof bad, "%s:1,%s/nope:1", dir_a, dir_b);
    CHECK_OK(nostall_config_set(cfg, "mix", bad));
    CHECK(nostall_loader_create(&ld, "mix", cfg) < 0);
    CHECK(strstr(nostall_last_error(), "nope") != NULL);
    /* a group shares one source */
    CHECK_OK(nostall_config_set(cfg, "mix", spec));
    CHECK_OK(nostall_config_set(cfg, "coordinate", "mixgroup"));
    CHECK_RC(nostall_loader_create(&ld, "mix", cfg), NOSTALL_E_OPTION);
    CHECK(strstr(nostall_last_error(), "coordinate") != NULL);
    CHECK_OK(nostall_config_set(cfg, "coordinate", ""));
    /* fields that differ (float labels of a list vs an ImageFolder's int64
     * ones) are refused, naming the field and both sources */
    char list[4200];
    snprintf(list, sizeof list, "%s/float.txt", test_tmpdir("mix-list"));
    FILE *f = fopen(list, "w");
    CHECK(f != NULL);
    if (f) {
        fputs("x.jpg\t0.5\ny.jpg\t1.5\n", f);
        fclose(f);
    }
    snprintf(bad, sizeof bad, "%s:1,%s:1", dir_a, list);
    CHECK_OK(nostall_config_set(cfg, "mix", bad));
    CHECK_RC(nostall_loader_create(&ld, "mix", cfg), NOSTALL_E_DATASET);
    CHECK(strstr(nostall_last_error(), "field 'label'") != NULL);
    CHECK(strstr(nostall_last_error(), "float.txt") != NULL);
    /* mix_labels=offset: the shifted labels must stay below 2^31 (2^31
     * classes, then 2 more: the second source's labels would be 2^31 and
     * 2^31 + 1; 2^62-sized offsets used to wrap into negative labels) */
    char big1[4200], big2[4200];
    snprintf(big1, sizeof big1, "%s/big1.txt", test_tmpdir("mix-list"));
    snprintf(big2, sizeof big2, "%s/big2.txt", test_tmpdir("mix-list"));
    const char *bodies[2] = {"x.jpg\t2147483647\n", "y.jpg\t1\n"};
    const char *lists[2] = {big1, big2};
    for (int k = 0; k < 2; k++)
        if ((f = fopen(lists[k], "w")) != NULL) {
            fputs(bodies[k], f);
            fclose(f);
        }
    snprintf(bad, sizeof bad, "%s:1,%s:1", big1, big2);
    CHECK_OK(nostall_config_set(cfg, "mix", bad));
    CHECK_OK(nostall_config_set(cfg, "mix_labels", "offset"));
    CHECK_RC(nostall_loader_create(&ld, "mix", cfg), NOSTALL_E_OPTION);
    CHECK(strstr(nostall_last_error(), "big2.txt's 2 classes after 2147483648") != NULL);
    CHECK(strstr(nostall_last_error(), "below 2^31") != NULL);
    CHECK(ld == NULL);
    nostall_loader_free(ld);
    ld = NULL;
    /* the sources alone, or in the other order with room, are fine */
    snprintf(bad, sizeof bad, "%s:1,%s:1", big2, dir_a);
    CHECK_OK(nostall_config_set(cfg, "mix", bad));
    CHECK_OK(nostall_loader_create(&ld, "mix", cfg));
    nostall_loader_free(ld);
    ld = NULL;
    CHECK_OK(nostall_config_set(cfg, "mix_labels", "own"));
    /* a source's bad shards are the mix's too (info and names) */
    char packed[4200], cmd[12800], shards[4300];
    snprintf(shards, sizeof shards, "%s/shards.txt", test_tmpdir("mix-shards"));
    snprintf(packed, sizeof packed, "%.*s/packed", (int)(strrchr(shards, '/') - shards), shards);
    snprintf(cmd, sizeof cmd, "'%s' pack '%s' '%s' --shard-bytes 10K --quiet --force > /dev/null",
             getenv("NOSTALL_CLI"), dir_b, packed);
    CHECK(system(cmd) == 0);
    if ((f = fopen(shards, "w")) != NULL) {
        fprintf(f, "%s/shard-000000.tar\n%s/lost-000001.tar\n", packed, packed);
        fclose(f);
    }
    snprintf(bad, sizeof bad, "%s:1,%s:1", dir_a, shards);
    CHECK_OK(nostall_config_set(cfg, "mix", bad));
    CHECK_OK(nostall_loader_create(&ld, "mix", cfg));
    if (ld) {
        nostall_dataset_info info;
        const char *bp = NULL, *why = NULL;
        CHECK_OK(nostall_loader_info(ld, &info, sizeof info));
        CHECK_EQ(info.shards_bad, 1);
        CHECK_OK(nostall_loader_bad_shard(ld, 0, &bp, &why));
        CHECK(bp && strstr(bp, "lost-000001.tar") && why && strstr(why, "No such file"));
        CHECK_RC(nostall_loader_bad_shard(ld, 1, &bp, &why), NOSTALL_E_INVALID);
    }
    nostall_loader_free(ld);
    ld = NULL;
    /* the mix options without a mix are refused, not ignored */
    CHECK_OK(nostall_config_set(cfg, "mix", ""));
    CHECK_OK(nostall_config_set(cfg, "mix_epoch_items", "10"));
    CHECK_RC(nostall_loader_create(&ld, dir_a, cfg), NOSTALL_E_OPTION);
    CHECK(strstr(nostall_last_error(), "mix_epoch_items") != NULL);
    CHECK(ld == NULL);
    nostall_config_free(cfg);
}

int main(void)
{
    test_parse();
    test_fractions();
    test_own_epochs();
    test_purity();
    snprintf(dir_a, sizeof dir_a, "%s", test_tmpdir("mix-a"));
    snprintf(dir_b, sizeof dir_b, "%s", test_tmpdir("mix-b"));
    gen_dataset(dir_a, 40, 4);
    gen_dataset(dir_b, 12, 3);
    snprintf(spec, sizeof spec, "%s:0.7,%s:0.3", dir_a, dir_b);
    test_loader_mix();
    test_repeats_fresh();
    test_resume();
    test_errors();
    TEST_EXIT();
}
