/*
 * test_gpu_device.c — the GPU route on a real GPU (skips, exit 77, naming
 * the missing piece, on a build without CUDA or a machine without a CUDA
 * device or libnvjpeg; the GPU kit runs it: bench/gpu/run.sh, step
 * gpudecode). A batch of generated JPEGs (RGB 4:2:0, grayscale, CMYK)
 * goes through the nvJPEG backend and through the fake one (nostall's CPU
 * decoder, the kernels' functions on the host):
 *   - CMYK items are CPU-decoded by both, so their bytes test the CUDA
 *     kernels alone: they must be identical;
 *   - the others differ by nvJPEG's IDCT and upsampling: PSNR of the uint8
 *     items against the CPU's must be >= 40 dB (issue 37's bar);
 *   - the same batch twice gives the same bytes;
 *   - the device ring (gpu_output=device; src/gpu/cuda_dring.c): the same
 *     batch routed in place into a device ring slot (out_device) has the
 *     same bytes as through the host; its release waits for the consumer's
 *     stream (held by a host function until the test opens a gate: the
 *     slot is not given back before) and gives the slot back after; its
 *     copy ops (on_bad_item=skip's compaction, echo_point=augment's device
 *     store) copy device to device.
 * Prints one line "gpudecode {json}" with the figures (batch latency
 * percentiles, images/s of the whole route on this thread) for the kit.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "augment/augment.h"
#include "check.h"
#include "common/rng.h"
#include "decode/decode.h"
#include "gpu/gpu.h"
#include "test_jpeg.h"

#if defined(NOSTALL_HAVE_CUDA) && defined(NOSTALL_HAVE_NVJPEG) && defined(NOSTALL_TEST_HOOKS) &&   \
    NOSTALL_TEST_HOOKS

#include <cuda_runtime_api.h>
#include <sched.h>

#define N 64
#define ROUNDS 12

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static uint8_t *pixels(int w, int h, int comps, uint64_t seed)
{
    uint8_t *p = malloc((size_t)w * h * comps);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w * comps; x++)
            p[(size_t)y * w * comps + x] =
                (uint8_t)(127 + 90 * sin(0.05 * x + 0.07 * y + (double)seed) +
                          (int)(test_xorshift(&seed) % 24));
    return p;
}

/* The device ring's CUDA ops: give_back counts (a CUDA host function's
 * thread), and a gate that holds the consumer's stream. */
static int gave, gate;
static void give_back(void *ctx, const nostall_batch *b)
{
    (void)ctx, (void)b;
    __atomic_add_fetch(&gave, 1, __ATOMIC_SEQ_CST);
}

static void CUDART_CB hold(void *arg)
{
    (void)arg;
    while (!__atomic_load_n(&gate, __ATOMIC_SEQ_CST)) sched_yield();
}

/* The batch routed in place into a device ring slot equals `want` (the
 * host route's nvJPEG bytes); the release waits for the consumer stream. */
static int check_device_ring(nst_gpu_route *route, nst_gpu_backend *nv, const nst_gpu_job *jobs,
                             size_t n, size_t bytes, const uint8_t *want)
{
    int st[N], cpu[N], same;
    char why[N][NST_GPU_REASON];
    uint8_t *host = calloc(1, bytes), *back = malloc(bytes);
    nst_gpu_dring_ops ops;
    nst_gpu_dring *d = NULL;
    CHECK_OK(nst_gpu_cuda_dring_ops(&ops, 0));
    CHECK_OK(nst_gpu_dring_create(&d, &ops, host, bytes, 2, give_back, NULL));
    nostall_batch b = {.images = host, .sequence = 1};
    nostall_device_batch db;
    CHECK_OK(nst_gpu_dring_lend(d, &b, &db));
    CHECK(db.device == 0 && db.images && db.ready_event && db.stream);
    nv->out_device = 1;
    CHECK_OK(nst_gpu_route_batch(route, nv, jobs, n, db.images, bytes, st, why, cpu));
    nv->out_device = 0;
    cudaStream_t cs;
    CHECK_EQ(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking), cudaSuccess);
    CHECK_EQ(cudaStreamWaitEvent(cs, (cudaEvent_t)db.ready_event, 0), cudaSuccess);
    CHECK_EQ(cudaMemcpyAsync(back, db.images, bytes, cudaMemcpyDeviceToHost, cs), cudaSuccess);
    CHECK_EQ(cudaLaunchHostFunc(cs, hold, NULL), cudaSuccess); /* the consumer is "busy" */
    CHECK_OK(nst_gpu_dring_release(d, &b, cs));
    CHECK_EQ(__atomic_load_n(&gave, __ATOMIC_SEQ_CST), 0); /* cs cannot pass hold yet */
    CHECK_EQ(nst_gpu_dring_busy(d), 1u);
    __atomic_store_n(&gate, 1, __ATOMIC_SEQ_CST);
    CHECK_EQ(cudaStreamSynchronize(cs), cudaSuccess);
    CHECK_EQ(cudaStreamSynchronize((cudaStream_t)db.stream), cudaSuccess);
    CHECK_EQ(__atomic_load_n(&gave, __ATOMIC_SEQ_CST), 1);
    CHECK_EQ(nst_gpu_dring_busy(d), 0u);
    same = memcmp(back, want, bytes) == 0;
    CHECK(same);
    /* the copy ops: the engine's compaction and top-ups (move: the first
     * half of the batch over its second half, on the ring's copier
     * stream) and echo_point=augment's store (an extra allocation, the
     * workers' copier stream): device to device, then read back */
    const size_t half = bytes / 2;
    uint8_t *extra = NULL;
    CHECK_OK(nst_gpu_dring_move(d, host + half, host, half));
    CHECK_OK(nst_gpu_dring_moved(d));
    CHECK_EQ(cudaMemcpy(back, (uint8_t *)db.images + half, half, cudaMemcpyDeviceToHost),
             cudaSuccess);
    CHECK(memcmp(back, want, half) == 0);
    CHECK_OK(nst_gpu_dring_alloc_extra(d, half, &extra));
    CHECK_OK(nst_gpu_dring_copy(d, extra, db.images, half));
    CHECK_OK(nst_gpu_dring_copied(d));
    CHECK_EQ(cudaMemcpy(back, extra, half, cudaMemcpyDeviceToHost), cudaSuccess);
    same = same && memcmp(back, want, half) == 0;
    CHECK(same);
    cudaStreamDestroy(cs);
    nst_gpu_dring_free(d);
    free(host);
    free(back);
    return same;
}

int main(void)
{
    if (nst_gpu_check(0, "test_gpu_device") < 0 &&
        !strstr(nostall_last_error(), "not yet been validated")) {
        printf("SKIP: %s\n", nostall_last_error());
        return 77;
    }
    uint8_t *data[N];
    size_t len[N];
    int cmyk[N] = {0};
    char path[N][32];
    uint64_t seed = 5;
    nst_norm norm;
    const double mean[3] = {0.485, 0.456, 0.406}, stdv[3] = {0.229, 0.224, 0.225};
    nst_norm_init(&norm, mean, stdv);
    nst_gpu_job jobs[N];
    size_t off = 0;
    for (int i = 0; i < N; i++) {
        const int w = 400 + (int)(test_xorshift(&seed) % 200),
                  h = 300 + (int)(test_xorshift(&seed) % 150);
        test_jpeg_opts o = {w, h, 3, JCS_RGB, JCS_UNKNOWN, 90, 0, 0, 0};
        if (i % 8 == 3) o.comps = 4, o.in_cs = JCS_CMYK, cmyk[i] = 1;
        if (i % 8 == 5) o.comps = 1, o.in_cs = JCS_GRAYSCALE;
        if (i % 8 == 6) o.progressive = 1;
        uint8_t *px = pixels(w, h, o.comps, (uint64_t)i);
        data[i] = test_jpeg_encode(px, &o, &len[i]);
        free(px);
        snprintf(path[i], sizeof path[i], "gen%02d.jpg", i);
        nst_rng rng;
        nst_rng_seed(&rng, 99 + (uint64_t)i);
        jobs[i] = (nst_gpu_job){.data = data[i], .len = len[i], .path = path[i]};
        nst_crop_random_resized((uint32_t)w, (uint32_t)h, 0.08, 1.0, 3.0 / 4, 4.0 / 3, &rng,
                                &jobs[i].win);
        jobs[i].flip = nst_rng_double(&rng) < 0.5;
        jobs[i].out = (nst_output){.dtype = i % 2 ? NST_OUT_F32 : NST_OUT_U8,
                                   .norm = &norm,
                                   .width = 224,
                                   .height = 224};
        jobs[i].dst_off = off;
        off += nst_output_bytes(&jobs[i].out);
    }
    const size_t bytes = off;
    uint8_t *want = calloc(1, bytes), *got = calloc(1, bytes), *again = calloc(1, bytes);
    int st[N], cpu[N];
    char why[N][NST_GPU_REASON];
    nst_gpu_route *route;
    nst_gpu_backend fake, nv;
    CHECK_OK(nst_gpu_route_create(&route, 100000000));
    CHECK_OK(nst_gpu_fake_backend(&fake, 100000000, 0));
    CHECK_OK(nst_gpu_nvjpeg_backend(&nv, 0));
    CHECK_OK(nst_gpu_route_batch(route, &fake, jobs, N, want, bytes, st, why, cpu));
    CHECK_OK(nst_gpu_route_batch(route, &nv, jobs, N, got, bytes, st, why, cpu));
    int exact = 1, cpu_items = 0, hw_items = 0, default_items = 0;
    double psnr_min = 1e9, psnr_sum = 0;
    int psnr_n = 0;
    for (int i = 0; i < N; i++) {
        CHECK_EQ(st[i], NST_GPU_DECODED);
        cpu_items += cpu[i] == NST_GPU_ENGINE_CPU;
        hw_items += cpu[i] == NST_GPU_ENGINE_HW; /* the engine nvJPEG used */
        default_items += cpu[i] == NST_GPU_ENGINE_DEFAULT;
        const size_t nb = nst_output_bytes(&jobs[i].out);
        const uint8_t *a = want + jobs[i].dst_off, *b = got + jobs[i].dst_off;
        if (cmyk[i] && memcmp(a, b, nb) != 0) {
            fprintf(stderr, "%s (CMYK, CPU-decoded): the kernels' bytes differ from the host's\n",
                    path[i]);
            exact = 0;
        }
        if (jobs[i].out.dtype != NST_OUT_U8 || cpu[i] == NST_GPU_ENGINE_CPU) continue;
        double se = 0;
        for (size_t k = 0; k < nb; k++) se += ((double)a[k] - b[k]) * ((double)a[k] - b[k]);
        const double psnr = se == 0 ? 99.0 : 10 * log10(255.0 * 255.0 / (se / nb));
        if (psnr < psnr_min) psnr_min = psnr;
        psnr_sum += psnr;
        psnr_n++;
    }
    CHECK(exact);
    CHECK_EQ(hw_items + default_items + cpu_items, N);
    CHECK(psnr_n > 0 && psnr_min >= 40.0);
    double ms[ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        const double t0 = now_ms();
        CHECK_OK(nst_gpu_route_batch(route, &nv, jobs, N, again, bytes, st, why, cpu));
        ms[r] = now_ms() - t0;
    }
    CHECK(memcmp(got, again, bytes) == 0); /* the same batch, the same bytes */
    const int ring_ok = check_device_ring(route, &nv, jobs, N, bytes, got);
    qsort(ms, ROUNDS, sizeof *ms, cmp_double);
    const double p50 = ms[ROUNDS / 2], p99 = ms[ROUNDS - 1];
    printf("gpudecode {\"items\": %d, \"cpu_decoded\": %d, \"hw_decoded\": %d, "
           "\"default_decoded\": %d, \"kernels_exact\": %s, "
           "\"psnr_db_min\": %.2f, \"psnr_db_mean\": %.2f, \"batch_ms_p50\": %.2f, "
           "\"batch_ms_max\": %.2f, \"images_per_s\": %.0f, \"output\": \"224x224\", "
           "\"device_ring\": %s}\n",
           N, cpu_items, hw_items, default_items, exact ? "true" : "false", psnr_min,
           psnr_n ? psnr_sum / psnr_n : 0.0, p50, p99, N / (p50 / 1e3), ring_ok ? "true" : "false");
    nv.destroy(nv.ctx);
    fake.destroy(fake.ctx);
    nst_gpu_route_free(route);
    free(want);
    free(got);
    free(again);
    for (int i = 0; i < N; i++) free(data[i]);
    TEST_EXIT();
}

#else

int main(void)
{
    (void)check_failures_;
    if (nst_gpu_check(0, "test_gpu_device") < 0)
        printf("SKIP: %s\n", nostall_last_error());
    else
        printf("SKIP: built without the test hooks (the fake backend)\n");
    return 77;
}

#endif
