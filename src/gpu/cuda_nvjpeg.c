/*
 * cuda_nvjpeg.c — the nvJPEG backend of the GPU route (gpu.h), built only
 * with CUDA and nvjpeg.h; libnvjpeg's functions come from cuda_probe.c's
 * dlopen. NOT YET RUN ON A GPU: compiled here, to be checked by the GPU kit
 * (docs/gpu.md, "GPU decode").
 *
 * decode: each JPEG is parsed on the host; the regions the hardware engines
 * take (nvjpegDecodeBatchedSupportedEx on a NVJPEG_BACKEND_HARDWARE handle)
 * go to one nvjpegDecodeBatchedEx call with a region of interest per image;
 * the rest one by one through the default backend's decoupled decode
 * (nvjpegDecodeJpeg; hybrid: Huffman on the CPU or GPU); whatever nvJPEG
 * refuses or fails on is handed back to nostall's CPU decoder, which then
 * names a broken file (so this backend never reports a bad item itself). A
 * GPU without engines (or a failing batched call) sends everything the
 * default way. Each decoded JPEG's engine (hardware or default) is
 * reported to the route (the stats' gpu_hw_items, gpu_default_items). Output: interleaved RGB8 (NVJPEG_OUTPUT_RGBI) in device
 * memory at each region's offset.
 * augment: the items and taps copied to the device, augment.cu's kernels,
 * the batch copied back into the host slot, or written in place in the
 * device ring's memory (gpu_output=device), all on one stream,
 * synchronized before returning.
 *
 * One thread per backend; device and host buffers grow and stay.
 */
#include "gpu/gpu.h"

#if defined(NOSTALL_HAVE_NVJPEG)

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nvjpeg.h>

#include "common/error.h"
#include "gpu/nvjpeg_api.h"

typedef struct nvj_api {
#define NVJ_PTR(f) __typeof__(&f) f;
    NVJ_FN(NVJ_PTR)
#undef NVJ_PTR
} nvj_api;

/* A device buffer that grows and stays. */
typedef struct dbuf {
    void *p;
    size_t cap;
} dbuf;

typedef struct nvj {
    nvj_api f;
    int device;
    cudaStream_t stream;
    nvjpegHandle_t hw, sw; /* hw: NULL when the GPU has no engines */
    nvjpegJpegState_t hw_state, sw_state;
    nvjpegJpegDecoder_t sw_dec;
    nvjpegJpegStream_t parsed, hw_parsed; /* a parsed JPEG, per handle */
    nvjpegDecodeParams_t *params;         /* one per JPEG of the largest batch */
    size_t nparams;
    nst_buf hw_list, ptrs, lens, dests, tmp_params; /* the hardware batch */
    dbuf images, items, starts, coefs, tmp, batch;
} nvj;

static int cuda_fail(cudaError_t e, const char *what)
{
    return nst_error(NOSTALL_E_IO, "gpu nvjpeg: %s: %s", what, cudaGetErrorString(e));
}

static int dgrow(dbuf *b, size_t n, const char *what)
{
    if (n <= b->cap) return 0;
    if (b->p) cudaFree(b->p);
    b->p = NULL;
    b->cap = 0;
    cudaError_t e = cudaMalloc(&b->p, n);
    if (e != cudaSuccess) return cuda_fail(e, what);
    b->cap = n;
    return 0;
}

static int nvj_reserve(void *ctx, uint64_t image_bytes, size_t items, size_t starts, size_t coefs,
                       uint64_t tmp_elems)
{
    nvj *g = ctx;
    int rc;
    if ((rc = dgrow(&g->images, (size_t)image_bytes + 1, "decoded images")) < 0 ||
        (rc = dgrow(&g->items, items * sizeof(nst_gpu_item) + 1, "items")) < 0 ||
        (rc = dgrow(&g->starts, starts * sizeof(int32_t) + 1, "taps")) < 0 ||
        (rc = dgrow(&g->coefs, coefs * sizeof(int16_t) + 1, "taps")) < 0 ||
        (rc = dgrow(&g->tmp, (size_t)tmp_elems * sizeof(int16_t) + 1, "intermediate")) < 0)
        return rc;
    while (g->nparams < items) { /* grow-only, created once each */
        nvjpegDecodeParams_t *p = realloc(g->params, (g->nparams + 1) * sizeof *p);
        if (!p) return nst_error(NOSTALL_E_NOMEM, "gpu nvjpeg: decode parameters");
        g->params = p;
        if (g->f.nvjpegDecodeParamsCreate(g->sw, &g->params[g->nparams]) != NVJPEG_STATUS_SUCCESS)
            return nst_error(NOSTALL_E_NOMEM, "gpu nvjpeg: nvjpegDecodeParamsCreate failed");
        g->nparams++;
    }
    return 0;
}

static nvjpegImage_t dest_of(nvj *g, const nst_gpu_jpeg *j)
{
    nvjpegImage_t d;
    memset(&d, 0, sizeof d);
    d.channel[0] = (unsigned char *)g->images.p + j->dst_off;
    d.pitch[0] = j->dst_stride;
    return d;
}

/* One JPEG the default way; 0 decoded, else hand it to the CPU. */
static int decode_one(nvj *g, const nst_gpu_jpeg *j, nvjpegDecodeParams_t p)
{
    int unsupported = 1;
    nvjpegImage_t d = dest_of(g, j);
    if (g->f.nvjpegJpegStreamParse(g->sw, j->data, j->size, 0, 0, g->parsed) !=
            NVJPEG_STATUS_SUCCESS ||
        g->f.nvjpegDecoderJpegSupported(g->sw_dec, g->parsed, p, &unsupported) !=
            NVJPEG_STATUS_SUCCESS ||
        unsupported)
        return -1;
    return g->f.nvjpegDecodeJpeg(g->sw, g->sw_dec, g->sw_state, g->parsed, &d, p, g->stream) ==
                   NVJPEG_STATUS_SUCCESS
               ? 0
               : -1;
}

/* The engines' share in one batched call; 0, or -1: send them the default way. */
static int decode_hw(nvj *g, const nst_gpu_jpeg *jpegs, const size_t *list, size_t m)
{
    int rc;
    if ((rc = nst_buf_reserve(&g->ptrs, m * sizeof(void *))) < 0 ||
        (rc = nst_buf_reserve(&g->lens, m * sizeof(size_t))) < 0 ||
        (rc = nst_buf_reserve(&g->dests, m * sizeof(nvjpegImage_t))) < 0 ||
        (rc = nst_buf_reserve(&g->tmp_params, m * sizeof(nvjpegDecodeParams_t))) < 0)
        return -1;
    const unsigned char **ptrs = (const unsigned char **)(void *)g->ptrs.data;
    size_t *lens = (size_t *)(void *)g->lens.data;
    nvjpegImage_t *dests = (nvjpegImage_t *)(void *)g->dests.data;
    nvjpegDecodeParams_t *ps = (nvjpegDecodeParams_t *)(void *)g->tmp_params.data;
    for (size_t k = 0; k < m; k++) {
        ptrs[k] = jpegs[list[k]].data;
        lens[k] = jpegs[list[k]].size;
        dests[k] = dest_of(g, &jpegs[list[k]]);
        ps[k] = g->params[list[k]];
    }
    if (g->f.nvjpegDecodeBatchedInitialize(g->hw, g->hw_state, (int)m, 1, NVJPEG_OUTPUT_RGBI) !=
            NVJPEG_STATUS_SUCCESS ||
        g->f.nvjpegDecodeBatchedEx(g->hw, g->hw_state, ptrs, lens, dests, ps, g->stream) !=
            NVJPEG_STATUS_SUCCESS)
        return -1;
    return 0;
}

static int nvj_decode(void *ctx, const nst_gpu_jpeg *jpegs, size_t n, int *status, int *engine,
                      char (*reason)[NST_GPU_REASON])
{
    nvj *g = ctx;
    (void)reason;
    if (n > g->nparams) return nst_error(NOSTALL_E_INVALID, "gpu nvjpeg: batch not reserved");
    int rc = nst_buf_reserve(&g->hw_list, n * sizeof(size_t));
    if (rc < 0) return rc;
    size_t *hw = (size_t *)(void *)g->hw_list.data, m = 0;
    for (size_t i = 0; i < n; i++) {
        const nst_gpu_jpeg *j = &jpegs[i];
        nvjpegDecodeParams_t p = g->params[i];
        status[i] = NST_GPU_CPU_FALLBACK;
        if (g->f.nvjpegDecodeParamsSetOutputFormat(p, NVJPEG_OUTPUT_RGBI) != NVJPEG_STATUS_SUCCESS ||
            g->f.nvjpegDecodeParamsSetROI(p, (int)j->roi_x, (int)j->roi_y, (int)j->roi_w,
                                          (int)j->roi_h) != NVJPEG_STATUS_SUCCESS)
            continue;
        status[i] = NST_GPU_DECODED;
        engine[i] = NST_GPU_ENGINE_HW;
        int unsupported = 1;
        if (g->hw &&
            g->f.nvjpegJpegStreamParse(g->hw, j->data, j->size, 0, 0, g->hw_parsed) ==
                NVJPEG_STATUS_SUCCESS &&
            g->f.nvjpegDecodeBatchedSupportedEx(g->hw, g->hw_parsed, p, &unsupported) ==
                NVJPEG_STATUS_SUCCESS &&
            !unsupported)
            hw[m++] = i;
        else
            status[i] = -1; /* the default way, below */
    }
    if (m && decode_hw(g, jpegs, hw, m) < 0)
        for (size_t k = 0; k < m; k++) status[hw[k]] = -1;
    for (size_t i = 0; i < n; i++)
        if (status[i] == -1) {
            engine[i] = NST_GPU_ENGINE_DEFAULT;
            status[i] = decode_one(g, &jpegs[i], g->params[i]) == 0 ? NST_GPU_DECODED
                                                                    : NST_GPU_CPU_FALLBACK;
        }
    cudaError_t e = cudaStreamSynchronize(g->stream);
    return e == cudaSuccess ? 0 : cuda_fail(e, "decode");
}

static int nvj_put(void *ctx, uint64_t dst_off, const uint8_t *rgb, uint32_t w, uint32_t h)
{
    nvj *g = ctx;
    cudaError_t e = cudaMemcpyAsync((uint8_t *)g->images.p + dst_off, rgb, (size_t)w * h * 3,
                                    cudaMemcpyHostToDevice, g->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(g->stream); /* rgb is the route's scratch */
    return e == cudaSuccess ? 0 : cuda_fail(e, "copying a CPU-decoded region");
}

static int nvj_augment(void *ctx, const nst_gpu_item *items, size_t n, const nst_gpu_tables *t,
                       uint8_t *batch, size_t batch_bytes, int batch_on_device)
{
    nvj *g = ctx;
    int rc = batch_on_device ? 0 : dgrow(&g->batch, batch_bytes, "batch");
    if (rc < 0) return rc;
    uint8_t *out = batch_on_device ? batch : (uint8_t *)g->batch.p;
    cudaError_t e =
        cudaMemcpyAsync(g->items.p, items, n * sizeof *items, cudaMemcpyHostToDevice, g->stream);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(g->starts.p, t->starts, t->starts_len * sizeof(int32_t),
                            cudaMemcpyHostToDevice, g->stream);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(g->coefs.p, t->coefs, t->coefs_len * sizeof(int16_t),
                            cudaMemcpyHostToDevice, g->stream);
    /* the bytes of bad items stay as the host had them (a device batch:
     * as the device ring has them; the item is not delivered) */
    if (e == cudaSuccess && !batch_on_device)
        e = cudaMemcpyAsync(out, batch, batch_bytes, cudaMemcpyHostToDevice, g->stream);
    if (e == cudaSuccess)
        e = (cudaError_t)nst_gpu_augment_launch(g->items.p, (uint32_t)n, g->images.p, g->starts.p,
                                                g->coefs.p, g->tmp.p, out, g->stream);
    if (e == cudaSuccess && !batch_on_device)
        e = cudaMemcpyAsync(batch, out, batch_bytes, cudaMemcpyDeviceToHost, g->stream);
    /* synchronized: the item counts as done (and its batch may be lent)
     * only when its bytes are written */
    if (e == cudaSuccess) e = cudaStreamSynchronize(g->stream);
    return e == cudaSuccess ? 0 : cuda_fail(e, "augment");
}

static void nvj_destroy(void *ctx)
{
    nvj *g = ctx;
    if (!g) return;
    for (size_t i = 0; i < g->nparams; i++) g->f.nvjpegDecodeParamsDestroy(g->params[i]);
    free(g->params);
    if (g->parsed) g->f.nvjpegJpegStreamDestroy(g->parsed);
    if (g->hw_parsed) g->f.nvjpegJpegStreamDestroy(g->hw_parsed);
    if (g->sw_state) g->f.nvjpegJpegStateDestroy(g->sw_state);
    if (g->hw_state) g->f.nvjpegJpegStateDestroy(g->hw_state);
    if (g->sw_dec) g->f.nvjpegDecoderDestroy(g->sw_dec);
    if (g->hw) g->f.nvjpegDestroy(g->hw);
    if (g->sw) g->f.nvjpegDestroy(g->sw);
    dbuf *d[] = {&g->images, &g->items, &g->starts, &g->coefs, &g->tmp, &g->batch};
    for (size_t i = 0; i < sizeof d / sizeof *d; i++)
        if (d[i]->p) cudaFree(d[i]->p);
    if (g->stream) cudaStreamDestroy(g->stream);
    nst_buf_free(&g->hw_list);
    nst_buf_free(&g->ptrs);
    nst_buf_free(&g->lens);
    nst_buf_free(&g->dests);
    nst_buf_free(&g->tmp_params);
    free(g);
}

/* The handles: the engines' (optional) and the default backend's. */
static int nvj_open(nvj *g)
{
    cudaError_t e = cudaSetDevice(g->device);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) return cuda_fail(e, "device");
    if (g->f.nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE, NULL, NULL, 0, &g->hw) !=
            NVJPEG_STATUS_SUCCESS ||
        g->f.nvjpegJpegStateCreate(g->hw, &g->hw_state) != NVJPEG_STATUS_SUCCESS ||
        g->f.nvjpegJpegStreamCreate(g->hw, &g->hw_parsed) != NVJPEG_STATUS_SUCCESS) {
        if (g->hw_state) g->f.nvjpegJpegStateDestroy(g->hw_state);
        if (g->hw) g->f.nvjpegDestroy(g->hw);
        g->hw = NULL; /* no engines: everything the default way */
        g->hw_state = NULL;
        g->hw_parsed = NULL;
    }
    if (g->f.nvjpegCreateEx(NVJPEG_BACKEND_DEFAULT, NULL, NULL, 0, &g->sw) != NVJPEG_STATUS_SUCCESS ||
        g->f.nvjpegDecoderCreate(g->sw, NVJPEG_BACKEND_DEFAULT, &g->sw_dec) !=
            NVJPEG_STATUS_SUCCESS ||
        g->f.nvjpegDecoderStateCreate(g->sw, g->sw_dec, &g->sw_state) != NVJPEG_STATUS_SUCCESS ||
        g->f.nvjpegJpegStreamCreate(g->sw, &g->parsed) != NVJPEG_STATUS_SUCCESS)
        return nst_error(NOSTALL_E_IO, "gpu nvjpeg: cannot create the nvJPEG decoder on device %d",
                         g->device);
    return 0;
}

int nst_gpu_nvjpeg_backend(nst_gpu_backend *out, unsigned gpu_id)
{
    void *lib = nst_gpu_nvjpeg_lib();
    if (!lib) return nst_error(NOSTALL_E_UNSUPPORTED, "gpu nvjpeg: libnvjpeg not loaded");
    nvj *g = calloc(1, sizeof *g);
    if (!g) return nst_error(NOSTALL_E_NOMEM, "gpu nvjpeg: cannot allocate");
    g->device = (int)gpu_id;
#define NVJ_SYM(name) *(void **)(&g->f.name) = dlsym(lib, #name);
    NVJ_FN(NVJ_SYM)
#undef NVJ_SYM
    int rc = nvj_open(g);
    if (rc < 0) {
        nvj_destroy(g);
        return rc;
    }
    *out = (nst_gpu_backend){"nvjpeg", g,           nvj_reserve, nvj_decode,
                             nvj_put,  nvj_augment, nvj_destroy, 0};
    return 0;
}

#endif
