/*
 * gpu.c — whether decode_device=gpu can run: the part of the check that
 * needs no CUDA (a build without it says so); the rest is cuda_probe.c's.
 * And the backend a worker's route uses, and the device ring's memory ops
 * (gpu_output=device: the fake's in a test build, else CUDA's). In a test build,
 * NOSTALL_TEST_GPU_FAKE=1 passes the check and gives every worker the fake
 * backend (fake.c), so the loader's GPU route runs end to end on any
 * machine (NOSTALL_TEST_GPU_FAKE_COPY_FAIL=1: the fake device ring's
 * copies fail); the nvJPEG backend is given to workers only when the
 * environment opts in with NOSTALL_GPU_UNVALIDATED=1 (it awaits its first
 * validated GPU run, docs/gpu.md; cuda_probe.c reads the variable). Called by the loader at create and by each
 * worker; any thread.
 */
#include <string.h>

#include "common/error.h"
#include "common/testhooks.h"
#include "gpu/gpu.h"

static int fake_wanted(void)
{
    const char *e = nst_test_env("NOSTALL_TEST_GPU_FAKE");
    return e && strcmp(e, "1") == 0;
}

int nst_gpu_backend_open(nst_gpu_backend *out, unsigned gpu_id, uint64_t max_pixels)
{
#if defined(NOSTALL_TEST_HOOKS) && NOSTALL_TEST_HOOKS
    if (fake_wanted()) return nst_gpu_fake_backend(out, max_pixels, 3);
#endif
#if defined(NOSTALL_HAVE_CUDA) && defined(NOSTALL_HAVE_NVJPEG)
    if (nst_gpu_unvalidated()) return nst_gpu_nvjpeg_backend(out, gpu_id);
#endif
    (void)out, (void)max_pixels;
    return nst_error(NOSTALL_E_UNSUPPORTED,
                     "decode_device=gpu: no backend for CUDA device %u: the loader's GPU route "
                     "has not yet been validated on a GPU (issue 37; docs/gpu.md); set "
                     "NOSTALL_GPU_UNVALIDATED=1 in the environment to run it anyway",
                     gpu_id);
}

int nst_gpu_dring_ops_open(nst_gpu_dring_ops *out, unsigned gpu_id)
{
#if defined(NOSTALL_TEST_HOOKS) && NOSTALL_TEST_HOOKS
    if (fake_wanted()) {
        const char *f = nst_test_env("NOSTALL_TEST_GPU_FAKE_COPY_FAIL");
        nst_gpu_fake_dring_ops(out, f && strcmp(f, "1") == 0);
        return 0;
    }
#endif
#if defined(NOSTALL_HAVE_CUDA)
    return nst_gpu_cuda_dring_ops(out, gpu_id);
#else
    (void)out;
    return nst_error(NOSTALL_E_UNSUPPORTED,
                     "gpu_output=device: this libnostall was built without CUDA (device %u)",
                     gpu_id);
#endif
}

int nst_gpu_check(unsigned gpu_id, const char *fn)
{
    if (fake_wanted()) return 0; /* tests: the fake backend (NULL in a build without hooks) */
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
