/*
 * cuda_probe.c — the CUDA half of nst_gpu_check (built only with CUDA):
 * libnvjpeg loaded at run time with dlopen (so libnostall loads on machines
 * without it) and the symbols the nvJPEG backend calls resolved; then the
 * CUDA driver and device through the statically linked runtime. Each
 * missing piece is named. libnvjpeg is opened once per process (a
 * pthread_once) and never closed; in a test build NOSTALL_TEST_NVJPEG is
 * the one name tried (common/testhooks.h). With every piece present the
 * loader's GPU route still runs only when the environment opts in with
 * NOSTALL_GPU_UNVALIDATED=1 (nst_gpu_unvalidated: the route has not yet
 * been validated on a GPU, docs/gpu.md); without it the check refuses,
 * saying so and naming the variable. Reads the environment only.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "common/error.h"
#include "common/testhooks.h"
#include "gpu/gpu.h"
#include "gpu/nvjpeg_api.h"

/* Sonames tried in order: CUDA 13's, CUDA 12's (PyPI's nvidia-nvjpeg-cu12
 * too), then the unversioned development link. */
static const char *const nvjpeg_names[] = {"libnvjpeg.so.13", "libnvjpeg.so.12", "libnvjpeg.so"};
/* What the nvJPEG backend calls (nvjpeg_api.h). */
#define NVJ_NAME(f) #f,
static const char *const nvjpeg_symbols[] = {NVJ_FN(NVJ_NAME)};
#undef NVJ_NAME

static pthread_once_t nvjpeg_once = PTHREAD_ONCE_INIT;
static void *nvjpeg_lib;
static char nvjpeg_err[512];

static void nvjpeg_open(void)
{
    size_t used = 0;
    /* tests: one name (a path) instead of the sonames */
    const char *only = nst_test_env("NOSTALL_TEST_NVJPEG");
    const size_t names = only && *only ? 1 : sizeof nvjpeg_names / sizeof *nvjpeg_names;
    for (size_t i = 0; i < names && !nvjpeg_lib; i++) {
        const char *name = only && *only ? only : nvjpeg_names[i];
        nvjpeg_lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
        if (!nvjpeg_lib && used < sizeof nvjpeg_err) {
            const char *e = dlerror();
            int n = snprintf(nvjpeg_err + used, sizeof nvjpeg_err - used, "%s%s", used ? "; " : "",
                             e ? e : name);
            if (n > 0) used += (size_t)n;
        }
    }
    if (!nvjpeg_lib) return;
    for (size_t i = 0; i < sizeof nvjpeg_symbols / sizeof *nvjpeg_symbols; i++)
        if (!dlsym(nvjpeg_lib, nvjpeg_symbols[i])) {
            snprintf(nvjpeg_err, sizeof nvjpeg_err, "libnvjpeg has no %s (too old)",
                     nvjpeg_symbols[i]);
            dlclose(nvjpeg_lib);
            nvjpeg_lib = NULL;
            return;
        }
}

void *nst_gpu_nvjpeg_lib(void)
{
    pthread_once(&nvjpeg_once, nvjpeg_open);
    return nvjpeg_lib;
}

int nst_gpu_unvalidated(void)
{
    const char *e = getenv("NOSTALL_GPU_UNVALIDATED");
    return e && strcmp(e, "1") == 0;
}

int nst_gpu_cuda_check(unsigned gpu_id, const char *fn)
{
    pthread_once(&nvjpeg_once, nvjpeg_open);
    if (!nvjpeg_lib)
        return nst_error(NOSTALL_E_UNSUPPORTED,
                         "%s: decode_device=gpu: libnvjpeg not found (tried libnvjpeg.so.13, "
                         ".so.12, .so: %s); install the CUDA toolkit's libnvjpeg or PyPI's "
                         "nvidia-nvjpeg and put its lib/ on LD_LIBRARY_PATH",
                         fn, nvjpeg_err);
    /* The driver: the runtime opens libcuda.so.1 itself and would only say
     * that "the driver version is insufficient" when there is none. */
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!drv)
        return nst_error(NOSTALL_E_UNSUPPORTED,
                         "%s: decode_device=gpu: no CUDA driver (libcuda.so.1: %s)", fn, dlerror());
    dlclose(drv);
    int count = 0;
    cudaError_t ce = cudaGetDeviceCount(&count);
    if (ce != cudaSuccess)
        return nst_error(NOSTALL_E_UNSUPPORTED,
                         "%s: decode_device=gpu: no usable CUDA driver or device "
                         "(cudaGetDeviceCount: %s)",
                         fn, cudaGetErrorString(ce));
    if (count <= 0 || gpu_id >= (unsigned)count)
        return nst_error(NOSTALL_E_UNSUPPORTED,
                         "%s: decode_device=gpu: gpu_id %u but this machine has %d CUDA device(s)",
                         fn, gpu_id, count);
    if (nst_gpu_unvalidated()) return 0;
    return nst_error(NOSTALL_E_UNSUPPORTED,
                     "%s: decode_device=gpu: CUDA device %u and libnvjpeg are here, but the "
                     "loader's GPU route has not yet been validated on a GPU (issue 37; "
                     "docs/gpu.md); set NOSTALL_GPU_UNVALIDATED=1 in the environment to run it "
                     "anyway",
                     fn, gpu_id);
}
