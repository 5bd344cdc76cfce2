/*
 * gpu.c — whether decode_device=gpu can run: the part of the check that
 * needs no CUDA (a build without it says so); the rest is cuda_probe.c's.
 * Called by the loader at create; any thread.
 */
#include "common/error.h"
#include "gpu/gpu.h"

int nst_gpu_check(unsigned gpu_id, const char *fn)
{
#if !defined(NOSTALL_HAVE_CUDA)
    (void)gpu_id;
    return nst_error(NOSTALL_E_UNSUPPORTED,
                     "%s: decode_device=gpu: this libnostall was built without CUDA (CMake "
                     "found no CUDA toolkit, or -DNOSTALL_CUDA=OFF); rebuild with the toolkit "
                     "(nvcc) installed",
                     fn);
#elif !defined(NOSTALL_HAVE_NVJPEG)
    (void)gpu_id;
    return nst_error(NOSTALL_E_UNSUPPORTED,
                     "%s: decode_device=gpu: this libnostall was built without nvjpeg.h "
                     "(set NOSTALL_NVJPEG_INCLUDE to the folder holding it: the CUDA toolkit's "
                     "include/ or PyPI's nvidia-nvjpeg wheel's nvidia/nvjpeg/include)",
                     fn);
#else
    return nst_gpu_cuda_check(gpu_id, fn);
#endif
}
