/*
 * cuda_dring.c — the device ring's ops on a CUDA device (gpu.h, dring.c),
 * built only with CUDA. NOT YET RUN ON A GPU: compiled here; the GPU kit's
 * gpudecode step (tests/test_gpu_device.c) is to check it.
 *
 * One cudaMalloc for the mirror of the host ring's arena; per entry a
 * non-blocking stream and two events made without timing. lent records
 * `ready` on the entry's stream (complete at once: the workers synchronize
 * their own streams before an item counts as done). after records `done`
 * on the consumer's stream, makes the entry's stream wait on it and queues
 * a host function there (cudaLaunchHostFunc) that gives the batch back: the
 * consumer's stream is never held by the host function, and the function
 * calls no CUDA API (it takes the host ring's lock only). drain is
 * cudaStreamSynchronize of the entry's stream. copy (the engine's
 * compaction and top-ups of skipped items, on the ring's copier stream) is
 * a cudaMemcpyAsync device to device, sync its cudaStreamSynchronize. Creating sets the device
 * and gives the calling thread its current device back.
 */
#include <cuda_runtime_api.h>

#include "common/error.h"
#include "gpu/gpu.h"

typedef struct cud {
    int device;
} cud;

static int fail(cudaError_t e, const char *what)
{
    return nst_error(NOSTALL_E_IO, "gpu_output=device: %s: %s", what, cudaGetErrorString(e));
}

/* The calling thread (the consumer's, at create) gets its current device
 * back: torch's, not ours. */
static cudaError_t on_device(const cud *g, int *prev)
{
    cudaError_t e = cudaGetDevice(prev);
    if (e != cudaSuccess) *prev = -1;
    return cudaSetDevice(g->device);
}

static void restore(int prev)
{
    if (prev >= 0) cudaSetDevice(prev);
}

static int cd_alloc(void *c, size_t bytes, void **mem)
{
    cud *g = c;
    int prev;
    cudaError_t e = on_device(g, &prev);
    if (e == cudaSuccess) e = cudaMalloc(mem, bytes ? bytes : 1);
    restore(prev);
    return e == cudaSuccess ? 0 : fail(e, "cudaMalloc of the device ring");
}

static void cd_free_mem(void *c, void *mem)
{
    (void)c;
    cudaFree(mem);
}

static int cd_entry_create(void *c, void **stream, void **ready, void **done)
{
    cud *g = c;
    cudaStream_t s = NULL;
    cudaEvent_t r = NULL, d = NULL;
    int prev;
    cudaError_t e = on_device(g, &prev);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&r, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&d, cudaEventDisableTiming);
    restore(prev);
    if (e != cudaSuccess) {
        if (d) cudaEventDestroy(d);
        if (r) cudaEventDestroy(r);
        if (s) cudaStreamDestroy(s);
        return fail(e, "a stream and events of the device ring");
    }
    *stream = s, *ready = r, *done = d;
    return 0;
}

static void cd_entry_destroy(void *c, void *stream, void *ready, void *done)
{
    (void)c;
    cudaEventDestroy((cudaEvent_t)done);
    cudaEventDestroy((cudaEvent_t)ready);
    cudaStreamDestroy((cudaStream_t)stream);
}

static int cd_lent(void *c, void *stream, void *ready)
{
    (void)c;
    cudaError_t e = cudaEventRecord((cudaEvent_t)ready, (cudaStream_t)stream);
    return e == cudaSuccess ? 0 : fail(e, "cudaEventRecord of a lent batch");
}

static int cd_after(void *c, void *stream, void *done, void *consumer, void (*fn)(void *), void *arg)
{
    (void)c;
    if (!consumer) {
        fn(arg);
        return 0;
    }
    cudaError_t e = cudaEventRecord((cudaEvent_t)done, (cudaStream_t)consumer);
    if (e == cudaSuccess) e = cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)done, 0);
    if (e == cudaSuccess) e = cudaLaunchHostFunc((cudaStream_t)stream, fn, arg);
    return e == cudaSuccess ? 0 : fail(e, "nostall_loader_release_device");
}

static void cd_drain(void *c, void *stream)
{
    (void)c;
    cudaStreamSynchronize((cudaStream_t)stream);
}

/* The engine's compaction and top-ups (dring.c's copier stream): queued
 * on the stream, the device set for the call (a worker's or the
 * consumer's thread); sync waits for them. */
static int cd_copy(void *c, void *stream, void *dst, const void *src, size_t bytes)
{
    cud *g = c;
    int prev;
    cudaError_t e = on_device(g, &prev);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, (cudaStream_t)stream);
    restore(prev);
    return e == cudaSuccess ? 0 : fail(e, "cudaMemcpyAsync of a batch's compaction or top-up");
}

static int cd_sync(void *c, void *stream)
{
    (void)c;
    cudaError_t e = cudaStreamSynchronize((cudaStream_t)stream);
    return e == cudaSuccess ? 0 : fail(e, "cudaStreamSynchronize of a batch's compaction");
}

int nst_gpu_cuda_dring_ops(nst_gpu_dring_ops *out, unsigned gpu_id)
{
    static cud devs[1024]; /* gpu_id <= 1023 (the option's bound); never freed */
    if (gpu_id >= sizeof devs / sizeof *devs)
        return nst_error(NOSTALL_E_INVALID, "gpu_output=device: gpu_id %u", gpu_id);
    devs[gpu_id].device = (int)gpu_id;
    *out = (nst_gpu_dring_ops){.name = "cuda",
                               .device = (int)gpu_id,
                               .alloc = cd_alloc,
                               .free_mem = cd_free_mem,
                               .entry_create = cd_entry_create,
                               .entry_destroy = cd_entry_destroy,
                               .lent = cd_lent,
                               .after = cd_after,
                               .drain = cd_drain,
                               .copy = cd_copy,
                               .sync = cd_sync,
                               .ctx = &devs[gpu_id]};
    return 0;
}
