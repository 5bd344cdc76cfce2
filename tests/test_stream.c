/*
 * test_stream.c — streaming reads of tar shards (src/dataset/stream.c): the
 * delivery order is a pure function of (seed, epoch), a permutation of the
 * items, the stream itself without shuffle, and within the shuffle
 * buffer's bound (an item at stream position s is delivered at or after
 * s - buffer + 1); the sampler arithmetic's inverse; the reader delivers
 * every item's member bytes in order with a store smaller than the epoch,
 * for one rank and for two; a restart mid-epoch gives exactly the rest of
 * the uninterrupted epoch; a truncated shard and a missing shard fail only
 * their affected items, with messages naming the shard; a shard re-shuffled
 * in place after indexing (members of the expected sizes at the expected
 * offsets) fails each item whose member has another name, naming both;
 * stop wakes a waiting consumer.
 */
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "dataset/index.h"
#include "order/sampler.h"
#include "dataset/stream.h"
#include "dataset/tar.h"

static char g_tmp[2048];

static void member(FILE *f, const char *name, const void *data, size_t len)
{
    uint8_t blk[512];
    static const uint8_t zero[512];
    if (nst_tar_write_header(blk, name, len, 1700000000) < 0) abort();
    fwrite(blk, 1, 512, f);
    fwrite(data, 1, len, f);
    fwrite(zero, 1, (512 - len % 512) % 512, f);
}

static size_t image_bytes(int s, uint8_t *out)
{
    size_t n = 300 + (size_t)(s * 97) % 1500;
    for (size_t i = 0; i < n; i++) out[i] = (uint8_t)(i * 31 + (size_t)s * 7);
    out[0] = 0xFF, out[1] = 0xD8;
    return n;
}

/* NSHARDS shards of PER samples: KEY.jpg + KEY.cls */
#define NSHARDS 5
#define PER 13
#define NITEMS (NSHARDS * PER)

static void write_shards(void)
{
    uint8_t img[2000];
    static const uint8_t zero[1024];
    for (int k = 0; k < NSHARDS; k++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/shards/s-%d.tar", g_tmp, k);
        FILE *f = fopen(p, "wb");
        if (!f) abort();
        for (int i = 0; i < PER; i++) {
            int s = k * PER + i;
            char name[64], cls[16];
            snprintf(name, sizeof name, "k%05d.jpg", s);
            member(f, name, img, image_bytes(s, img));
            snprintf(name, sizeof name, "k%05d.cls", s);
            member(f, name, cls, (size_t)snprintf(cls, sizeof cls, "%d", s % 3));
        }
        fwrite(zero, 1, sizeof zero, f);
        fclose(f);
    }
}

static void test_order(const nst_index *ix)
{
    uint32_t a[NITEMS], b[NITEMS], seen[NITEMS];
    for (uint32_t buffer = 1; buffer <= 100; buffer = buffer * 3 + 1) {
        for (uint64_t epoch = 0; epoch < 3; epoch++) {
            CHECK_OK(nst_stream_order(ix, 7, epoch, buffer, 1, a));
            CHECK_OK(nst_stream_order(ix, 7, epoch, buffer, 1, b));
            CHECK(memcmp(a, b, sizeof a) == 0); /* pure */
            memset(seen, 0, sizeof seen);
            for (int d = 0; d < NITEMS; d++) seen[a[d]]++;
            for (int i = 0; i < NITEMS; i++) CHECK_EQ(seen[i], 1); /* a permutation */
            /* the stream: shards in the keyed order, archive order inside */
            uint64_t spos[NITEMS], s = 0;
            for (uint64_t k = 0; k < NSHARDS; k++) {
                uint64_t sh = nst_permute(NSHARDS, 7, epoch, k);
                for (uint64_t i = nst_index_shard_first(ix, sh);
                     i < nst_index_shard_first(ix, sh + 1); i++)
                    spos[i] = s++;
            }
            for (int d = 0; d < NITEMS; d++) CHECK(spos[a[d]] < (uint64_t)d + buffer);
            if (buffer == 1) /* a buffer of one is the stream itself */
                for (int d = 0; d < NITEMS; d++) CHECK_EQ(spos[a[d]], (uint64_t)d);
        }
        CHECK_OK(nst_stream_order(ix, 8, 0, buffer, 1, b));
        CHECK_OK(nst_stream_order(ix, 7, 0, buffer, 1, a));
        if (buffer > 1) CHECK(memcmp(a, b, sizeof a) != 0); /* the seed matters */
    }
    CHECK_OK(nst_stream_order(ix, 7, 3, 50, 0, a)); /* no shuffle: dataset order */
    for (int d = 0; d < NITEMS; d++) CHECK_EQ(a[d], (uint32_t)d);
}

static void test_local(void)
{
    for (uint32_t world = 1; world <= 4; world++)
        for (int drop = 0; drop <= 1; drop++)
            for (uint64_t off = 0; off < 20; off += 7)
                for (uint32_t rank = 0; rank < world; rank++) {
                    nst_sampler sm;
                    CHECK_OK(nst_sampler_init(&sm, 23, 1, rank, world, 1, drop));
                    if (off) nst_sampler_resume(&sm, 2, off);
                    uint64_t len = nst_sampler_len(&sm, 2), hits = 0;
                    for (uint64_t p = 0; p < len; p++) {
                        uint64_t g = nst_stream_global(&sm, 2, p), loc[2];
                        uint32_t k = nst_stream_local(&sm, 2, g, loc);
                        int found = 0;
                        for (uint32_t j = 0; j < k; j++) found |= loc[j] == p;
                        CHECK(found);
                    }
                    for (uint64_t g = 0; g < 23; g++) {
                        uint64_t loc[2];
                        uint32_t k = nst_stream_local(&sm, 2, g, loc);
                        for (uint32_t j = 0; j < k; j++) {
                            CHECK(loc[j] < len);
                            CHECK_EQ(nst_stream_global(&sm, 2, loc[j]), g);
                        }
                        hits += k;
                    }
                    CHECK_EQ(hits, len);
                }
}

/* Read positions [from, len) of `epoch` (rank's), checking each item's
 * bytes; items' ids into got[] (UINT64_MAX for a failure). */
static int read_range(nst_stream *s, const nst_index *ix, const nst_sampler *sm, uint64_t epoch,
                      uint64_t from, uint64_t *got)
{
    int failed = 0;
    uint8_t img[2000];
    uint64_t len = nst_sampler_len(sm, epoch);
    for (uint64_t p = from; p < len; p++) {
        uint64_t item = nst_stream_item(s, epoch, nst_stream_global(sm, epoch, p));
        const uint8_t *d;
        size_t n;
        char msg[512];
        int rc = nst_stream_get(s, epoch, p, &d, &n, msg, sizeof msg);
        if (rc == 0) {
            size_t want = image_bytes((int)item, img);
            CHECK_EQ(n, want);
            CHECK(n == want && memcmp(d, img, n) == 0);
            got[p] = item;
        } else {
            CHECK(strstr(msg, ".tar") != NULL); /* names the shard */
            got[p] = UINT64_MAX;
            failed++;
        }
        nst_stream_release(s, epoch, p);
    }
    return failed;
}

static void test_read(const nst_index *ix)
{
    uint32_t ord[NITEMS];
    for (uint32_t world = 1; world <= 2; world++) {
        nst_sampler sm;
        CHECK_OK(nst_sampler_init(&sm, NITEMS, 3, world - 1, world, 1, 0));
        nst_stream_opts o = {.seed = 3,
                             .shuffle = 1,
                             .buffer = 10,
                             .capacity = 12,
                             .epochs = 3,
                             .max_item_bytes = 1 << 20,
                             .sampler = sm};
        nst_stream *s;
        CHECK_OK(nst_stream_create(&s, ix, &o));
        uint64_t got[NITEMS];
        for (uint64_t e = 0; e < 3; e++) {
            CHECK_EQ(read_range(s, ix, &sm, e, 0, got), 0);
            CHECK_OK(nst_stream_order(ix, 3, e, 10, 1, ord));
            for (uint64_t p = 0; p < sm.per_rank; p++)
                CHECK_EQ(got[p], (uint64_t)ord[nst_stream_global(&sm, e, p)]);
        }
        /* past the epochs: an error, not a wait */
        const uint8_t *d;
        size_t n;
        char msg[512];
        CHECK(nst_stream_get(s, 3, 0, &d, &n, msg, sizeof msg) < 0);
        /* a restart mid-epoch: exactly the rest of the epoch */
        uint64_t again[NITEMS];
        nst_stream_start(s, 1, 9, &sm);
        CHECK_EQ(read_range(s, ix, &sm, 1, 9, again), 0);
        CHECK_OK(nst_stream_order(ix, 3, 1, 10, 1, ord));
        for (uint64_t p = 9; p < sm.per_rank; p++)
            CHECK_EQ(again[p], (uint64_t)ord[nst_stream_global(&sm, 1, p)]);
        nst_stream_stats st;
        nst_stream_stats_get(s, &st);
        CHECK(st.items_stored >= 3 * sm.per_rank);
        CHECK_EQ(st.items_failed, 0);
        nst_stream_free(s);
    }
}

/* A resumed epoch of another world size (the sampler's offset). */
static void test_resumed(const nst_index *ix)
{
    nst_sampler sm;
    CHECK_OK(nst_sampler_init(&sm, NITEMS, 5, 0, 1, 1, 0));
    nst_stream_opts o = {.seed = 5,
                         .shuffle = 1,
                         .buffer = 4,
                         .capacity = 8,
                         .max_item_bytes = 1 << 20};
    o.sampler = sm;
    nst_stream *s;
    CHECK_OK(nst_stream_create(&s, ix, &o));
    nst_sampler_resume(&sm, 2, 30);
    nst_stream_start(s, 2, 0, &sm);
    uint64_t got[NITEMS];
    uint32_t ord[NITEMS];
    CHECK_EQ(read_range(s, ix, &sm, 2, 0, got), 0);
    CHECK_OK(nst_stream_order(ix, 5, 2, 4, 1, ord));
    CHECK_EQ(nst_sampler_len(&sm, 2), (uint64_t)NITEMS - 30);
    for (uint64_t p = 0; p < NITEMS - 30; p++) CHECK_EQ(got[p], (uint64_t)ord[30 + p]);
    /* the next epoch is whole again */
    CHECK_EQ(read_range(s, ix, &sm, 3, 0, got), 0);
    nst_stream_free(s);
}

/* Shard 1 cut inside its 5th image, shard 3 gone: only their items fail. */
static void test_damage(void)
{
    nst_index *ix;
    char p[4096];
    snprintf(p, sizeof p, "%s/shards", g_tmp);
    CHECK_OK(nst_index_build(&ix, p));
    uint64_t off, len;
    uint64_t first1 = nst_index_shard_first(ix, 1);
    CHECK(nst_index_range(ix, first1 + 4, &off, &len));
    snprintf(p, sizeof p, "%s/shards/s-1.tar", g_tmp);
    CHECK(truncate(p, (off_t)(off + 10)) == 0);
    snprintf(p, sizeof p, "%s/shards/s-3.tar", g_tmp);
    char q[4096];
    snprintf(q, sizeof q, "%s/s-3.tar.away", g_tmp);
    CHECK(rename(p, q) == 0);
    nst_sampler sm;
    CHECK_OK(nst_sampler_init(&sm, NITEMS, 1, 0, 1, 1, 0));
    nst_stream_opts o = {.seed = 1,
                         .shuffle = 1,
                         .buffer = 6,
                         .capacity = 8,
                         .epochs = 1,
                         .max_item_bytes = 1 << 20,
                         .sampler = sm};
    nst_stream *s;
    CHECK_OK(nst_stream_create(&s, ix, &o));
    uint64_t got[NITEMS];
    int failed = read_range(s, ix, &sm, 0, 0, got);
    CHECK_EQ(failed, (PER - 4) + PER);
    for (uint64_t d = 0; d < NITEMS; d++) {
        if (got[d] != UINT64_MAX) continue;
        uint64_t sh = nst_index_shard_of(ix, nst_stream_item(s, 0, d));
        CHECK(sh == 3 || (sh == 1 && nst_stream_item(s, 0, d) >= first1 + 4));
    }
    nst_stream_stats st;
    nst_stream_stats_get(s, &st);
    CHECK_EQ(st.items_failed, (uint64_t)failed);
    nst_stream_free(s);
    CHECK(rename(q, p) == 0);
    nst_index_free(ix);
}

/* Six samples r0..r5 of one image size (sample s's image filled with
 * 'A' + s), in order, or with r2..r5 reversed. */
static void write_r(const char *p, int reshuffled)
{
    uint8_t img[600];
    static const uint8_t zero[1024];
    FILE *f = fopen(p, "wb");
    if (!f) abort();
    for (int i = 0; i < 6; i++) {
        const int s = reshuffled && i >= 2 ? 7 - i : i; /* 0 1 5 4 3 2 */
        char name[32], cls[8];
        memset(img, 'A' + s, sizeof img);
        snprintf(name, sizeof name, "r%d.jpg", s);
        member(f, name, img, sizeof img);
        snprintf(name, sizeof name, "r%d.cls", s);
        member(f, name, cls, (size_t)snprintf(cls, sizeof cls, "%d", s));
    }
    fwrite(zero, 1, sizeof zero, f);
    fclose(f);
}

/* A shard re-shuffled in place after it was indexed (its samples of one
 * size: every member where the index expects one, of the expected size):
 * each item whose member there has another name is a bad item naming
 * both, never another sample's bytes under this item's label. */
static void test_reshuffled(void)
{
    char dir[4096], p[4200];
    snprintf(dir, sizeof dir, "%s/same", g_tmp);
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/r.tar", dir);
    write_r(p, 0);
    nst_index *ix;
    CHECK_OK(nst_index_build(&ix, p));
    if (!ix) return;
    write_r(p, 1); /* the index in memory describes the old order */
    nst_sampler sm;
    CHECK_OK(nst_sampler_init(&sm, 6, 1, 0, 1, 1, 0));
    nst_stream_opts o = {.seed = 1,
                         .shuffle = 0,
                         .buffer = 1,
                         .capacity = 4,
                         .epochs = 1,
                         .max_item_bytes = 1 << 20,
                         .sampler = sm};
    nst_stream *s;
    CHECK_OK(nst_stream_create(&s, ix, &o));
    int failed = 0;
    for (uint64_t pos = 0; pos < 6; pos++) {
        const uint8_t *d;
        size_t n;
        char msg[512];
        const uint64_t item = nst_stream_item(s, 0, nst_stream_global(&sm, 0, pos));
        int rc = nst_stream_get(s, 0, pos, &d, &n, msg, sizeof msg);
        if (rc == 0) {
            CHECK(item < 2); /* r0, r1 kept their places */
            CHECK(n == 600 && d[0] == 'A' + item);
        } else {
            failed++;
            CHECK(item >= 2);
            char want[64];
            snprintf(want, sizeof want, "the index says 'r%d.jpg'", (int)item);
            CHECK(strstr(msg, "r.tar") && strstr(msg, want) && strstr(msg, "the member here is"));
        }
        nst_stream_release(s, 0, pos);
    }
    CHECK_EQ(failed, 4);
    nst_stream_free(s);
    nst_index_free(ix);
}

static void *stopper(void *arg)
{
    usleep(20000); /* not a timing assertion: the get below waits either way */
    nst_stream_stop(arg);
    return NULL;
}

static void test_stop(const nst_index *ix)
{
    nst_sampler sm;
    CHECK_OK(nst_sampler_init(&sm, NITEMS, 1, 0, 1, 1, 0));
    nst_stream_opts o = {.seed = 1,
                         .shuffle = 1,
                         .buffer = 6,
                         .capacity = 8,
                         .max_item_bytes = 1 << 20,
                         .sampler = sm};
    nst_stream *s;
    CHECK_OK(nst_stream_create(&s, ix, &o));
    /* far ahead: the store fills and the reader waits; so does this get */
    pthread_t t;
    CHECK(pthread_create(&t, NULL, stopper, s) == 0);
    const uint8_t *d;
    size_t n;
    char msg[256];
    CHECK_RC(nst_stream_get(s, 5, NITEMS - 1, &d, &n, msg, sizeof msg), NOSTALL_E_STOPPED);
    pthread_join(t, NULL);
    nst_stream_free(s);
    nst_stream_free(NULL);
}

int main(void)
{
    snprintf(g_tmp, sizeof g_tmp, "%s", test_tmpdir("test_stream"));
    char p[4096];
    snprintf(p, sizeof p, "%s/shards", g_tmp);
    mkdir(p, 0755);
    write_shards();
    nst_index *ix;
    CHECK_OK(nst_index_build(&ix, p));
    CHECK_EQ(nst_index_count(ix), (uint64_t)NITEMS);
    CHECK_EQ(nst_index_shards(ix), (uint64_t)NSHARDS);
    test_order(ix);
    test_local();
    test_read(ix);
    test_resumed(ix);
    test_stop(ix);
    nst_index_free(ix);
    test_damage();
    test_reshuffled();
    TEST_EXIT();
}
