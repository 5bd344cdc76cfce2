/*
 * test_gpu_dring.c — the device ring (gpu_output=device; src/gpu/dring.c)
 * with the fake backend's ops (host memory, flag events, a fake consumer
 * stream whose releases wait until the test syncs it):
 *   - the ring alone: a batch goes back to the host ring only once the
 *     consumer's stream reached its release; a second release is refused;
 *     free with a batch still lent;
 *   - through the loader (NOSTALL_TEST_GPU_FAKE=1, decode_device=gpu,
 *     gpu_output=device): the device batches' checksums equal the host
 *     GPU route's (gpu_output=host; itself the CPU path's,
 *     tests/cli_gpu_decode.sh); a new batch never lies in a slot whose
 *     release is still waiting on its stream; with every slot waiting the
 *     next is E_STATE (the ring's "all lent"), after the sync it comes; the
 *     host API is refused in device mode and the device API in host mode;
 *     the refused combinations name why; free with batches held, and
 *     with every slot waiting on a stream (workers waiting for a slot);
 *   - the MinIO cache (cache_bytes) keeps encoded bytes, so it serves the
 *     device ring as the host route: hits in epoch 2, every item decoded,
 *     the same bytes;
 *   - on_bad_item=skip: the engine's compaction and top-ups copy the image
 *     field in the device ring (the ring alone: copies at the device
 *     addresses, outside the arena refused): with bad items planted the
 *     device batches equal the host route's (bytes, batches, skipped) for
 *     1 and 3 threads, drop_last 1 and 0; a failing copy fails the run
 *     with its message, sticky;
 *   - fixed echoing at fetch, decode (re-augmented on the route), augment
 *     (a device store, copies counted) and batch: the host route's bytes
 *     for 1 and 3 threads; echo=adaptive refused, naming why.
 * No assertion depends on timing: waits are the loader's own (blocking next).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "gpu/gpu.h"
#include "test_data.h"

#if defined(NOSTALL_TEST_HOOKS) && NOSTALL_TEST_HOOKS

static int given_back;
static uint64_t last_seq;
static void give_back(void *ctx, const nostall_batch *b)
{
    (void)ctx;
    given_back++;
    last_seq = b->sequence;
}

static void test_ring_alone(void)
{
    nst_gpu_dring_ops ops;
    nst_gpu_fake_dring_ops(&ops, 0);
    static uint8_t host[4096];
    nst_gpu_dring *d = NULL;
    CHECK_OK(nst_gpu_dring_create(&d, &ops, host, sizeof host, 2, give_back, NULL));
    nostall_batch a = {.images = host + 100, .sequence = 7},
                  b = {.images = host + 2100, .sequence = 8};
    nostall_device_batch da, db, dc;
    CHECK_OK(nst_gpu_dring_lend(d, &a, &da));
    CHECK_OK(nst_gpu_dring_lend(d, &b, &db));
    CHECK(da.device == -1 && da.slot != db.slot);
    CHECK(da.images == nst_gpu_dring_dev(d, host + 100) && da.images != (void *)(host + 100));
    CHECK(*(int *)da.ready_event == 1);
    CHECK(nst_gpu_dring_dev(d, host + sizeof host) == NULL);
    nostall_batch c = {.images = host + 300, .sequence = 9};
    CHECK_EQ(nst_gpu_dring_lend(d, &c, &dc), NOSTALL_E_STATE); /* both entries in use */

    nst_gpu_fake_stream s = {0};
    CHECK_OK(nst_gpu_dring_release(d, &a, &s));
    CHECK_EQ(given_back, 0); /* the stream has not reached the release */
    CHECK_EQ(nst_gpu_dring_busy(d), 2u);
    CHECK_EQ(nst_gpu_dring_release(d, &a, &s), NOSTALL_E_INVALID); /* twice */
    nst_gpu_fake_stream_sync(&s);
    CHECK_EQ(given_back, 1);
    CHECK_EQ(last_seq, 7u);
    CHECK_EQ(nst_gpu_dring_busy(d), 1u);
    CHECK_OK(nst_gpu_dring_lend(d, &c, &dc)); /* the freed entry */
    CHECK_EQ(dc.slot, da.slot);
    CHECK_OK(nst_gpu_dring_release(d, &c, NULL)); /* NULL: finished now */
    CHECK_EQ(given_back, 2);

    /* the engine's moves (compaction, top-ups): copies at the device
     * addresses, the host bytes untouched; outside the arena refused */
    uint8_t *dv = nst_gpu_dring_dev(d, host);
    for (int i = 0; i < 64; i++) dv[1000 + i] = (uint8_t)(i + 1);
    CHECK_OK(nst_gpu_dring_move(d, host + 3000, host + 1000, 64));
    CHECK_OK(nst_gpu_dring_moved(d));
    CHECK(memcmp(dv + 3000, dv + 1000, 64) == 0 && dv[3000] == 1);
    CHECK(host[3000] == 0);
    CHECK_EQ(nst_gpu_dring_move(d, host + 4090, host, 64), NOSTALL_E_INVALID);
    CHECK_EQ(nst_gpu_dring_move(d, host, host + sizeof host, 1), NOSTALL_E_INVALID);
    nst_gpu_dring_free(d); /* b still lent: dropped with the ring */

    nst_gpu_fake_dring_ops(&ops, 1); /* a copy fails: its error comes back */
    CHECK_OK(nst_gpu_dring_create(&d, &ops, host, sizeof host, 2, give_back, NULL));
    CHECK_EQ(nst_gpu_dring_move(d, host + 3000, host + 1000, 64), NOSTALL_E_IO);
    CHECK(strstr(nostall_last_error(), "copy of 64 bytes failed"));
    nst_gpu_dring_free(d);
}

static char data_dir[4096];

static nostall_loader *open_loader2(const char *output, const char *extra[][2], int nextra)
{
    const char *kv[16][2] = {{"decode_device", "gpu"}, {"gpu_output", output},
                             {"on_bad_item", "fail"},  {"batch_size", "4"},
                             {"crop", "32"},           {"output", "uint8"},
                             {"threads", "2"},         {"batches_ahead", "2"},
                             {"epochs", "1"},          {"seed", "5"}};
    int n = 10;
    for (int i = 0; i < nextra && n < 16; i++, n++) kv[n][0] = extra[i][0], kv[n][1] = extra[i][1];
    nostall_config *cfg = make_cfg(kv, n);
    nostall_loader *ld = NULL;
    int rc = nostall_loader_create(&ld, data_dir, cfg);
    nostall_config_free(cfg);
    if (rc < 0) fprintf(stderr, "create: %s\n", nostall_last_error());
    return ld;
}

static nostall_loader *open_loader(const char *output, const char *extra_k, const char *extra_v)
{
    const char *extra[1][2] = {{extra_k, extra_v}};
    return open_loader2(output, extra, extra_k ? 1 : 0);
}

/* The checksum of a device batch: its fields with the image's device
 * address (the fake's device memory is host memory). */
static void checksum_device(uint64_t *st, const nostall_batch *b, const nostall_device_batch *d)
{
    nostall_field f[8];
    nostall_batch c = *b;
    CHECK(b->nfields <= 8);
    memcpy(f, b->fields, b->nfields * sizeof *f);
    for (uint32_t i = 0; i < b->nfields; i++)
        if (f[i].data == b->images) f[i].data = d->images;
    c.images = d->images;
    c.fields = f;
    nostall_checksum_batch(st, &c);
}

static void test_loader(void)
{
    /* the host GPU route: the reference */
    nostall_loader *h = open_loader("host", NULL, NULL);
    CHECK(h);
    uint64_t want = 0, got = 0;
    nostall_batch b;
    nostall_device_batch d;
    int n_host = 0, n_dev = 0;
    CHECK_EQ(nostall_loader_next_device(h, &b, &d, 0), NOSTALL_E_STATE);
    CHECK(strstr(nostall_last_error(), "not in GPU output mode"));
    while (nostall_loader_next(h, &b) == 0) {
        nostall_checksum_batch(&want, &b);
        n_host++;
        CHECK_OK(nostall_loader_release(h, &b));
    }
    nostall_loader_free(h);

    nostall_loader *ld = open_loader("device", NULL, NULL);
    CHECK(ld);
    CHECK_EQ(nostall_loader_next(ld, &b), NOSTALL_E_STATE);
    CHECK(strstr(nostall_last_error(), "nostall_loader_next_device"));
    nostall_dataset_info info;
    CHECK_OK(nostall_loader_info(ld, &info, sizeof info));
    const uint32_t slots = info.ring_slots;
    CHECK(slots >= 2 && slots <= 16);
    /* Hold every slot's batch waiting on the fake stream: a slot waiting
     * is never lent again; with all waiting, next is E_STATE. */
    nst_gpu_fake_stream s = {0};
    void *held_at[16];
    uint32_t nh = 0;
    int rc;
    for (;;) {
        rc = nostall_loader_next_device(ld, &b, &d, UINT32_MAX);
        if (rc != 0) break;
        CHECK_EQ(d.device, -1);
        CHECK_EQ(d.struct_size, sizeof d);
        CHECK(*(int *)d.ready_event == 1);
        for (uint32_t i = 0; i < nh; i++) CHECK(held_at[i] != d.images);
        checksum_device(&got, &b, &d);
        n_dev++;
        held_at[nh++] = d.images;
        CHECK_OK(nostall_loader_release_device(ld, &b, &s));
        if (nh == slots) {
            CHECK_EQ(nostall_loader_next_device(ld, &b, &d, UINT32_MAX), NOSTALL_E_STATE);
            CHECK(strstr(nostall_last_error(), "lent"));
            nst_gpu_fake_stream_sync(&s); /* the stream reached every release */
            nh = 0;
        }
    }
    CHECK(rc == NOSTALL_EPOCH_END || rc == NOSTALL_DONE);
    nst_gpu_fake_stream_sync(&s);
    CHECK_EQ(n_dev, n_host);
    CHECK_EQ(got, want);
    CHECK(n_dev > (int)slots); /* slots were reused */
    printf("device ring: %d batches over %u slots, checksum %016llx\n", n_dev, slots,
           (unsigned long long)got);
    nostall_loader_free(ld);

    /* Shutdown while batches are held: one lent, one released with
     * nostall_loader_release (the host word: "finished"), then free. */
    ld = open_loader("device", NULL, NULL);
    CHECK(ld);
    nostall_batch b2;
    nostall_device_batch d2;
    CHECK_OK(nostall_loader_next_device(ld, &b, &d, UINT32_MAX));
    CHECK_OK(nostall_loader_next_device(ld, &b2, &d2, UINT32_MAX));
    CHECK_OK(nostall_loader_release(ld, &b2));
    CHECK_EQ(nostall_loader_release_device(ld, &b2, NULL), NOSTALL_E_INVALID);
    CHECK_OK(nostall_loader_stop(ld));
    CHECK_EQ(nostall_loader_next_device(ld, &b2, &d2, UINT32_MAX), NOSTALL_E_STOPPED);
    nostall_loader_free(ld); /* b still lent */

    /* Shutdown with every slot waiting on a stream that never gets there:
     * the workers wait for a free slot, and free still returns (their
     * waits have the ring's stop as exit). The fake stream's releases are
     * dropped with the ring (never synced after this). */
    ld = open_loader("device", NULL, NULL);
    CHECK(ld);
    nst_gpu_fake_stream never = {0};
    uint32_t waiting = 0;
    while (waiting < slots && nostall_loader_next_device(ld, &b, &d, UINT32_MAX) == 0) {
        CHECK_OK(nostall_loader_release_device(ld, &b, &never));
        waiting++;
    }
    CHECK_EQ(waiting, slots);
    CHECK_EQ(nostall_loader_next_device(ld, &b, &d, UINT32_MAX), NOSTALL_E_STATE);
    nostall_loader_free(ld);

    /* what the device ring refuses, each naming why */
    static const char *refused[][3] = {{"echo", "adaptive", "host memory"},
                                       {"image_mode", "full", "image_mode=full"},
                                       {"decode_device", "cpu", "decode_device=gpu"}};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        ld = open_loader("device", refused[i][0], refused[i][1]);
        CHECK(!ld);
        CHECK(strstr(nostall_last_error(), "gpu_output=device"));
        CHECK(strstr(nostall_last_error(), refused[i][2]));
        nostall_loader_free(ld);
    }
}

/* The MinIO cache holds encoded bytes, so it serves the GPU route as the
 * CPU's: epoch 2 hits the cache, every item is still decoded (the route
 * decodes what the cache gives), and the device ring's bytes equal the
 * host route's over both epochs. */
static void test_cache(void)
{
    const char *extra[][2] = {{"cache_bytes", "8M"}, {"epochs", "2"}};
    uint64_t sums[2] = {0, 0};
    nostall_stats st[2];
    for (int k = 0; k < 2; k++) {
        nostall_loader *ld = open_loader2(k ? "device" : "host", extra, 2);
        CHECK(ld);
        if (!ld) return;
        nostall_batch b;
        nostall_device_batch d;
        int rc;
        for (;;) {
            rc = k ? nostall_loader_next_device(ld, &b, &d, UINT32_MAX)
                   : nostall_loader_next(ld, &b);
            if (rc == NOSTALL_EPOCH_END) continue;
            if (rc != 0) break;
            if (k) {
                checksum_device(&sums[k], &b, &d);
                CHECK_OK(nostall_loader_release_device(ld, &b, NULL));
            } else {
                nostall_checksum_batch(&sums[k], &b);
                CHECK_OK(nostall_loader_release(ld, &b));
            }
        }
        CHECK_EQ(rc, NOSTALL_DONE);
        CHECK_OK(nostall_loader_stats(ld, &st[k], sizeof st[k]));
        nostall_loader_free(ld);
    }
    CHECK_EQ(sums[0], sums[1]);
    for (int k = 0; k < 2; k++) {
        CHECK(st[k].cache_hits > 0);
        CHECK_EQ(st[k].items_delivered, 60u);
        CHECK(st[k].decode_items >= st[k].items_delivered); /* hits are decoded too */
    }
    printf("cache: %llu hits of %llu items, all decoded\n", (unsigned long long)st[1].cache_hits,
           (unsigned long long)st[1].items_delivered);
}

/* Every batch of a run to its end (epoch ends passed over): host or
 * device checksum, batches, skipped items. The last status is returned. */
static int drain(nostall_loader *ld, int device, uint64_t *sum, int *batches)
{
    nostall_batch b;
    nostall_device_batch d;
    int rc;
    for (;;) {
        rc = device ? nostall_loader_next_device(ld, &b, &d, UINT32_MAX)
                    : nostall_loader_next(ld, &b);
        if (rc == NOSTALL_EPOCH_END) continue;
        if (rc != 0) return rc;
        if (device)
            checksum_device(sum, &b, &d);
        else
            nostall_checksum_batch(sum, &b);
        ++*batches;
        CHECK_OK(nostall_loader_release(ld, &b));
    }
}

/* on_bad_item=skip (the default) with bad items planted: the engine
 * compacts each batch that lost items and tops it up from the next; with
 * gpu_output=device the image field's moves are copies in the device ring
 * (batch/engine.h's plan move): the bytes, batches and skipped items equal
 * the host route's for 1 and 3 threads, drop_last 1 and 0. A failing copy
 * fails the run with its message, sticky, and free returns. */
static void test_skip(const char *dir)
{
    for (int dl = 1; dl >= 0; dl--)
        for (int t = 1; t <= 3; t += 2) {
            char th[8];
            snprintf(th, sizeof th, "%d", t);
            const char *extra[][2] = {{"on_bad_item", "skip"},
                                      {"drop_last", dl ? "1" : "0"},
                                      {"threads", th},
                                      {"epochs", "2"},
                                      {"batch_size", "5"}};
            uint64_t sums[2] = {0, 0}, skipped[2];
            int n[2] = {0, 0};
            for (int k = 0; k < 2; k++) {
                snprintf(data_dir, sizeof data_dir, "%s", dir);
                nostall_loader *ld = open_loader2(k ? "device" : "host", extra, 5);
                CHECK(ld);
                if (!ld) return;
                CHECK_EQ(drain(ld, k, &sums[k], &n[k]), NOSTALL_DONE);
                skipped[k] = nostall_loader_skipped_count(ld);
                nostall_loader_free(ld);
            }
            CHECK_EQ(sums[1], sums[0]);
            CHECK_EQ(n[1], n[0]);
            CHECK_EQ(skipped[0], 3u);
            CHECK_EQ(skipped[1], skipped[0]);
            printf("skip, drop_last=%d, %d threads: %d batches, 3 bad items, %016llx\n", dl, t,
                   n[1], (unsigned long long)sums[1]);
        }
    setenv("NOSTALL_TEST_GPU_FAKE_COPY_FAIL", "1", 1);
    const char *extra[][2] = {{"on_bad_item", "skip"}, {"epochs", "2"}};
    nostall_loader *ld = open_loader2("device", extra, 2);
    CHECK(ld);
    uint64_t sum = 0;
    int n = 0;
    CHECK_EQ(drain(ld, 1, &sum, &n), NOSTALL_E_IO);
    CHECK(strstr(nostall_last_error(), "nostall_loader_next_device: batch at position"));
    CHECK(strstr(nostall_last_error(), "copy of"));
    nostall_batch b;
    nostall_device_batch d;
    CHECK_EQ(nostall_loader_next_device(ld, &b, &d, UINT32_MAX), NOSTALL_E_IO); /* sticky */
    printf("a failing copy: %s\n", nostall_last_error());
    nostall_loader_free(ld);
    unsetenv("NOSTALL_TEST_GPU_FAKE_COPY_FAIL");
}

/* Fixed echoing with the device ring: echo_point=fetch (the encoded
 * bytes; each copy decoded and augmented on the route) and batch (whole
 * slots re-lent) need nothing of the device; decode keeps the CPU-decoded
 * image on the host and re-augments each copy on the route; augment keeps
 * each finished image in a device store and copies it device to device
 * (one copy per delivery: the producer's into the store, each later use's
 * out of it; the fake counts them). Each equals the host route's bytes
 * with the same settings, for 1 and 3 threads. (echo=adaptive, a host
 * pool, is refused: test_loader.) */
static void test_echo(void)
{
    static const char *points[][2] = {{"fetch", "2"},
                                      {"decode", "2"},
                                      {"augment", "2"},
                                      {"augment", "1.5"},
                                      {"batch", "2"}};
    for (size_t i = 0; i < sizeof points / sizeof *points; i++)
        for (int t = 1; t <= 3; t += 2) {
            char th[8];
            snprintf(th, sizeof th, "%d", t);
            const char *extra[][2] = {{"echo_point", points[i][0]},
                                      {"echo_factor", points[i][1]},
                                      {"threads", th},
                                      {"epochs", "2"}};
            uint64_t sums[2] = {0, 0}, copies = 0;
            int n[2] = {0, 0};
            nostall_stats st;
            for (int k = 0; k < 2; k++) {
                copies = nst_gpu_fake_copies(); /* before: the workers start at create */
                nostall_loader *ld = open_loader2(k ? "device" : "host", extra, 4);
                CHECK(ld);
                if (!ld) return;
                CHECK_EQ(drain(ld, k, &sums[k], &n[k]), NOSTALL_DONE);
                copies = nst_gpu_fake_copies() - copies;
                CHECK_OK(nostall_loader_stats(ld, &st, sizeof st));
                nostall_loader_free(ld);
            }
            CHECK_EQ(sums[1], sums[0]);
            CHECK_EQ(n[1], n[0]);
            CHECK(st.echoed_items > 0);
            if (strcmp(points[i][0], "augment") == 0)
                CHECK_EQ(copies, st.items_delivered);
            else
                CHECK_EQ(copies, 0u);
            printf("echo_point=%s x%s, %d threads: %d batches, %llu echoed, %llu device copies, "
                   "%016llx\n",
                   points[i][0], points[i][1], t, n[1], (unsigned long long)st.echoed_items,
                   (unsigned long long)copies, (unsigned long long)sums[1]);
        }
}

int main(void)
{
    test_ring_alone();
    if (!getenv("NOSTALL_CLI")) {
        printf("NOSTALL_CLI not set: the loader's tests skipped (run through ctest)\n");
        TEST_EXIT();
    }
    setenv("NOSTALL_TEST_GPU_FAKE", "1", 1);
    const char *tmp = test_tmpdir("gpu_dring");
    snprintf(data_dir, sizeof data_dir, "%s/data", tmp);
    gen_dataset(data_dir, 30, 3);
    test_loader();
    test_cache();
    test_echo();
    /* a second dataset with bad items: two in one class, one in another */
    char bad[4096], cmd[8192];
    snprintf(bad, sizeof bad, "%s/bad", tmp);
    gen_dataset(bad, 30, 3);
    snprintf(cmd, sizeof cmd,
             "cd '%s' && set -- */ && echo junk > \"$1\"/zz_junk.jpg && "
             "head -c 700 \"$1\"/$(ls \"$1\" | head -1) > \"$1\"/zz_trunc.jpg && "
             "echo junk > \"$2\"/aa_junk.jpg",
             bad);
    CHECK_EQ(system(cmd), 0);
    test_skip(bad);
    TEST_EXIT();
}

#else
int main(void)
{
    printf("built without NOSTALL_TEST_HOOKS: the fake backend is not in the library\n");
    return 77;
}
#endif
