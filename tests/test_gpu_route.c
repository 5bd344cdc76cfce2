/*
 * test_gpu_route.c — the GPU route's host side with the fake backend
 * (src/gpu/fake.c): a batch of JPEGs (RGB, grayscale, progressive, CMYK,
 * odd sizes) plus a truncated file and a non-image goes through
 * nst_gpu_route_batch. Every good item's bytes equal the CPU path's at full
 * scale (nst_decode of the whole image, nst_augment of the same window and
 * flip drawn as classify draws them); CMYK is decoded by the CPU; bad items
 * are reported with their path and reason, no decoder, and leave their
 * bytes alone; each good item's decoder (the engine split) follows the
 * fake's rule (by file size); the bytes do not depend on how many JPEGs the backend hands back to the CPU.
 * nst_gpu_route_image (an image already decoded, with region offsets and
 * DCT scales, re-augmented on the backend) gives nst_augment's bytes.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "augment/augment.h"
#include "check.h"
#include "common/rng.h"
#include "decode/decode.h"
#include "gpu/gpu.h"
#include "test_jpeg.h"

#if defined(NOSTALL_TEST_HOOKS) && NOSTALL_TEST_HOOKS

#define N 14
#define OW 40
#define OH 32

static uint8_t *pixels(int w, int h, int comps, uint64_t seed)
{
    uint8_t *p = malloc((size_t)w * h * comps);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w * comps; x++)
            p[(size_t)y * w * comps + x] =
                (uint8_t)(128 + 100 * ((x * 7 + y * 13 + (int)seed) % 23) / 23 +
                          (int)(test_xorshift(&seed) % 16));
    return p;
}

int main(void)
{
    uint8_t *data[N];
    size_t len[N];
    char path[N][32];
    int want_bad[N] = {0}, cmyk[N] = {0};
    uint64_t seed = 77;
    for (int i = 0; i < N; i++) {
        snprintf(path[i], sizeof path[i], "item%02d.jpg", i);
        const int w = 17 + (int)(test_xorshift(&seed) % 300),
                  h = 9 + (int)(test_xorshift(&seed) % 240);
        test_jpeg_opts o = {w, h, 3, JCS_RGB, JCS_UNKNOWN, 90, 0, 0, 0};
        if (i % 5 == 1) o.comps = 1, o.in_cs = JCS_GRAYSCALE;
        if (i % 5 == 2) o.progressive = 1;
        if (i % 5 == 3) o.comps = 4, o.in_cs = JCS_CMYK, cmyk[i] = 1;
        uint8_t *px = pixels(w, h, o.comps, (uint64_t)i);
        data[i] = test_jpeg_encode(px, &o, &len[i]);
        free(px);
    }
    len[6] /= 3; /* truncated */
    want_bad[6] = 1;
    memset(data[11], 'x', len[11]); /* not an image */
    want_bad[11] = 1;

    nst_norm norm;
    const double mean[3] = {0.485, 0.456, 0.406}, stdv[3] = {0.229, 0.224, 0.225};
    nst_norm_init(&norm, mean, stdv);
    nst_gpu_job jobs[N];
    size_t off = 0;
    nst_decoder *dec;
    CHECK_OK(nst_decoder_create(&dec, 100000000));
    for (int i = 0; i < N; i++) {
        nst_image_info info = {0};
        if (nst_decode_probe(dec, data[i], len[i], path[i], &info) < 0)
            info.width = info.height = 64;
        nst_rng rng;
        nst_rng_seed(&rng, 1000 + (uint64_t)i);
        jobs[i] = (nst_gpu_job){.data = data[i], .len = len[i], .path = path[i]};
        nst_crop_random_resized(info.width, info.height, 0.08, 1.0, 3.0 / 4, 4.0 / 3, &rng,
                                &jobs[i].win);
        jobs[i].flip = nst_rng_double(&rng) < 0.5;
        jobs[i].out = (nst_output){.dtype = i % 4,
                                   .norm = &norm,
                                   .layout = 1 + i % 2,
                                   .width = OW,
                                   .height = OH};
        jobs[i].dst_off = off;
        off += nst_output_bytes(&jobs[i].out);
    }
    const size_t bytes = off;

    /* the CPU path at full scale */
    uint8_t *want = calloc(1, bytes);
    nst_augmenter *aug;
    CHECK_OK(nst_augmenter_create(&aug));
    for (int i = 0; i < N; i++) {
        if (want_bad[i]) continue;
        nst_image img;
        CHECK_OK(nst_decode(dec, data[i], len[i], path[i], NULL, 0, 0, &img));
        nst_output o = jobs[i].out;
        o.dst = want + jobs[i].dst_off;
        CHECK_OK(nst_augment(aug, &img, &jobs[i].win, jobs[i].flip, &o));
    }

    nst_gpu_route *route;
    CHECK_OK(nst_gpu_route_create(&route, 100000000));
    for (unsigned every = 0; every <= 3; every++) {
        nst_gpu_backend be;
        CHECK_OK(nst_gpu_fake_backend(&be, 100000000, every));
        uint8_t *got = malloc(bytes);
        memset(got, 0xee, bytes);
        int status[N], eng[N];
        char reason[N][NST_GPU_REASON];
        CHECK_OK(nst_gpu_route_batch(route, &be, jobs, N, got, bytes, status, reason, eng));
        int good = 0, fallbacks = 0, split_ok = 1;
        for (int i = 0; i < N; i++) {
            const uint8_t *g = got + jobs[i].dst_off, *w = want + jobs[i].dst_off;
            const size_t nb = nst_output_bytes(&jobs[i].out);
            if (want_bad[i]) {
                CHECK_EQ(status[i], NST_GPU_BAD);
                CHECK(strstr(reason[i], path[i]) != NULL);
                int untouched = 1;
                for (size_t k = 0; k < nb; k++) untouched &= g[k] == 0xee;
                CHECK(untouched);
                CHECK_EQ(eng[i], NST_GPU_ENGINE_NONE); /* counted by no decoder */
                if (every == 0) printf("bad item: %s\n", reason[i]);
                continue;
            }
            CHECK_EQ(status[i], NST_GPU_DECODED);
            if (status[i] != NST_GPU_DECODED) fprintf(stderr, "%s: %s\n", path[i], reason[i]);
            /* the fake's engine: CPU for CMYK and sizes divisible by
             * `every`, else hardware for even sizes, default for odd */
            const int want_eng = cmyk[i] || (every && len[i] % every == 0) ? NST_GPU_ENGINE_CPU
                                 : len[i] % 2 == 0                         ? NST_GPU_ENGINE_HW
                                                                           : NST_GPU_ENGINE_DEFAULT;
            if (eng[i] != want_eng) {
                fprintf(stderr, "every %u: %s: engine %d, want %d\n", every, path[i], eng[i],
                        want_eng);
                split_ok = 0;
            }
            fallbacks += eng[i] == NST_GPU_ENGINE_CPU;
            if (memcmp(g, w, nb) != 0)
                fprintf(stderr, "every %u: %s differs\n", every, path[i]);
            else
                good++;
        }
        CHECK_EQ(good, N - 2);
        CHECK(split_ok);
        if (every == 0) CHECK_EQ(fallbacks, 3);     /* the CMYK items: 3, 8, 13 */
        if (every == 1) CHECK_EQ(fallbacks, N - 2); /* everything decodable */
        printf("fallback_every %u: %d items equal to the CPU path, %d decoded by the CPU\n", every,
               good, fallbacks);
        free(got);
        be.destroy(be.ctx);
    }

    /* nst_gpu_route_image (echo_point=decode's re-augment): an image the
     * CPU decoded as classify's eval decode does -- the window's region,
     * DCT-scaled when the window is at least twice the output -- put to
     * the backend and augmented there: nst_augment's bytes on it */
    {
        nst_gpu_backend be;
        CHECK_OK(nst_gpu_fake_backend(&be, 100000000, 0));
        uint8_t *got = malloc(bytes), *cpu = malloc(bytes);
        int scaled = 0, offset = 0, same = 0;
        for (int i = 0; i < N; i++) {
            if (want_bad[i]) continue;
            nst_image img;
            CHECK_OK(nst_decode(dec, data[i], len[i], path[i], &jobs[i].win, OW, OH, &img));
            scaled += img.scale_num != img.scale_den;
            offset += img.x0 || img.y0;
            nst_output o = jobs[i].out;
            o.dst = cpu + jobs[i].dst_off;
            CHECK_OK(nst_augment(aug, &img, &jobs[i].win, jobs[i].flip, &o));
            CHECK_OK(nst_gpu_route_image(route, &be, &img, &jobs[i], got, bytes));
            const size_t nb = nst_output_bytes(&jobs[i].out);
            same += memcmp(got + jobs[i].dst_off, cpu + jobs[i].dst_off, nb) == 0;
        }
        CHECK_EQ(same, N - 2);
        CHECK(scaled > 0 && offset > 0);
        printf("route_image: %d items equal to nst_augment (%d DCT-scaled, %d with offsets)\n",
               same, scaled, offset);
        free(got);
        free(cpu);
        be.destroy(be.ctx);
    }
    nst_gpu_route_free(route);
    nst_augmenter_free(aug);
    nst_decoder_free(dec);
    free(want);
    for (int i = 0; i < N; i++) free(data[i]);
    TEST_EXIT();
}

#else /* fake.c is in test builds only (CMakeLists.txt defines it for this test) */

int main(void)
{
    (void)check_failures_;
    printf("SKIP: built without NOSTALL_TEST_HOOKS (no fake GPU backend)\n");
    return 77;
}

#endif
