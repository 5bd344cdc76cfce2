/*
 * gpu.h — the GPU decode path's host side (decode_device=gpu, issue 37):
 * planning items for the augment kernels (plan.c), the check that the
 * pieces exist at create (gpu.c: built with CUDA, libnvjpeg loadable, a
 * CUDA device), the kernels' launcher (augment.cu, built only with CUDA)
 * and the interface of a batch JPEG decoder (a backend: nvJPEG on a GPU, a
 * fake on the host for tests).
 *
 * Status: the planning, the kernels and the checks exist; the loader does
 * not yet route batches through a backend (docs/gpu.md, "GPU decode").
 * Threads: every function is for the thread that owns its arguments; no
 * global state but the libnvjpeg handle cuda_probe.c opens once.
 */
#ifndef NST_GPU_GPU_H
#define NST_GPU_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "augment/augment.h"
#include "common/buf.h"
#include "common/image.h"
#include "gpu/gpu_item.h"

/* A batch's filter taps: fixed arrays the caller sizes (on the host, then
 * copied to the device with the items), filled in order by nst_gpu_plan. */
typedef struct nst_gpu_tables {
    int32_t *starts;
    size_t starts_cap, starts_len;
    int16_t *coefs;
    size_t coefs_cap, coefs_len;
    nst_buf work; /* one axis' taps while planning (grow-only) */
} nst_gpu_tables;

/* Plan one item: resample window `win` of the decoded image `img` (only
 * its geometry is read: width, height, stride, x0, y0, scale), mirrored
 * when `flip`, into `out` (out->dst is not used). Appends its taps to `t`
 * and fills `it` but for src_off, tmp_off and dst_off, which the caller
 * assigns. E_INVALID (bad image, window or output) or E_NOMEM (tables
 * full), the tables unchanged. */
int nst_gpu_plan(nst_gpu_tables *t, const nst_image *img, const nst_window *win, int flip,
                 const nst_output *out, nst_gpu_item *it);
void nst_gpu_tables_free(nst_gpu_tables *t);

/* decode_device=gpu at create: 0 when this build and machine can run it,
 * else an error naming the missing piece (E_UNSUPPORTED): a library built
 * without CUDA or without nvjpeg.h, libnvjpeg not loadable, no CUDA driver
 * or device, gpu_id past the devices. `fn` heads the message. */
int nst_gpu_check(unsigned gpu_id, const char *fn);

/* A batch JPEG decoder. Each JPEG's region of interest (roi_*, in pixels
 * of the file) is decoded to interleaved RGB8 at dst + dst_off with
 * dst_stride bytes per row: device memory for a GPU backend, host memory
 * for the fake. Per item a status: decoded, to be decoded by the CPU
 * decoder (what the backend cannot decode: CMYK, 12-bit), or bad (reason
 * says why, naming nothing but the failure: the caller adds the item). */
enum { NST_GPU_DECODED = 0, NST_GPU_CPU_FALLBACK = 1, NST_GPU_BAD = 2 };
#define NST_GPU_REASON 160
typedef struct nst_gpu_jpeg {
    const uint8_t *data;
    size_t size;
    uint32_t roi_x, roi_y, roi_w, roi_h;
    uint64_t dst_off;
    uint32_t dst_stride;
} nst_gpu_jpeg;
typedef struct nst_gpu_backend {
    const char *name;
    void *ctx;
    /* 0 with a status per item, or < 0 when the whole batch failed. */
    int (*decode)(void *ctx, const nst_gpu_jpeg *jpegs, size_t n, uint8_t *dst, int *status,
                  char (*reason)[NST_GPU_REASON]);
    void (*destroy)(void *ctx);
} nst_gpu_backend;

#if defined(NOSTALL_HAVE_CUDA)
/* cuda_probe.c: the CUDA half of nst_gpu_check. */
int nst_gpu_cuda_check(unsigned gpu_id, const char *fn);
/* augment.cu: both passes over n items of a batch, on `stream` (a
 * cudaStream_t; NULL: the default stream). Every pointer is device memory:
 * the items, the decoded images, the taps, the intermediate (room for
 * nst_gpu_tmp_elems of every item at its tmp_off) and the batch. 0, or the
 * cudaError_t of the launch. */
int nst_gpu_augment_launch(const nst_gpu_item *items, uint32_t n, const uint8_t *src,
                           const int32_t *starts, const int16_t *coefs, int16_t *tmp,
                           uint8_t *batch, void *stream);
#endif

#endif
