/*
 * augment.cu — the augment kernels of decode_device=gpu (built only with
 * CUDA): pass 1 (the int16 intermediate) and pass 2 (resampled, border,
 * normalized, converted, placed in the layout) over a batch, one grid row
 * per item, a grid-stride loop over its elements. The per-element work is
 * gpu_item.h's, which the host test runs too (tests/test_pixel_math.c), so
 * the kernels hold no arithmetic of their own. Compiled with --fmad=false
 * (CMakeLists.txt): common/pixel_math.h's double arithmetic rounds as the
 * host's.
 */
#include <cuda_runtime.h>

extern "C" {
#include "gpu/gpu.h"
}

static __global__ void pass1_kernel(const nst_gpu_item *items, const uint8_t *src,
                                    const int32_t *starts, const int16_t *coefs, int16_t *tmp)
{
    const nst_gpu_item it = items[blockIdx.y];
    const uint64_t n = nst_gpu_tmp_elems(&it);
    for (uint64_t e = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (uint64_t)gridDim.x * blockDim.x)
        nst_gpu_pass1(&it, src, starts, coefs, tmp, e);
}

static __global__ void pass2_kernel(const nst_gpu_item *items, const int32_t *starts,
                                    const int16_t *coefs, const int16_t *tmp, uint8_t *batch)
{
    const nst_gpu_item it = items[blockIdx.y];
    const uint64_t n = (uint64_t)it.width * it.height * 3u;
    for (uint64_t e = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (uint64_t)gridDim.x * blockDim.x)
        nst_gpu_pass2(&it, starts, coefs, tmp, batch, e);
}

extern "C" int nst_gpu_augment_launch(const nst_gpu_item *items, uint32_t n, const uint8_t *src,
                                      const int32_t *starts, const int16_t *coefs, int16_t *tmp,
                                      uint8_t *batch, void *stream)
{
    const unsigned threads = 256, blocks = 64; /* per item: 16 k threads, grid-stride */
    cudaStream_t s = (cudaStream_t)stream;
    for (uint32_t first = 0; first < n; first += 65535) { /* gridDim.y's limit */
        const uint32_t m = n - first < 65535 ? n - first : 65535;
        const dim3 grid(blocks, m);
        pass1_kernel<<<grid, threads, 0, s>>>(items + first, src, starts, coefs, tmp);
        pass2_kernel<<<grid, threads, 0, s>>>(items + first, starts, coefs, tmp, batch);
    }
    return (int)cudaGetLastError();
}
