/*
 * testhooks.h — the environment variables that exist only for tests: a
 * fake memory limit (NOSTALL_MEMLIMIT_BYTES, common/memlimit.c), the
 * scalar resampler and Huffman paths forced on (NOSTALL_NO_AVX2,
 * NOSTALL_NO_BMI2), and the MPI cache's fault injection
 * (NOSTALL_MPI_FAULT, NOSTALL_MPI_FAULT_RANK, mpi/partitioned.c), and
 * the one libnvjpeg name tried (NOSTALL_TEST_NVJPEG, gpu/cuda_probe.c),
 * the fake GPU backend and its device ring's failing copies
 * (NOSTALL_TEST_GPU_FAKE, NOSTALL_TEST_GPU_FAKE_COPY_FAIL, gpu/gpu.c).
 *
 * They are read only in a build with the CMake option NOSTALL_TEST_HOOKS
 * (ON by default: every build the tests use); `make install` builds the
 * installed library with it OFF, where nst_test_env() is always NULL and
 * the variables have no effect. Documented knobs (NOSTALL_NO_OWN_HUFFMAN,
 * used by bench/) are plain getenv and stay in every build.
 */
#ifndef NST_COMMON_TESTHOOKS_H
#define NST_COMMON_TESTHOOKS_H

#include <stdlib.h>

/* getenv(name) in a test-hooks build, NULL otherwise. */
static inline const char *nst_test_env(const char *name)
{
#if defined(NOSTALL_TEST_HOOKS) && NOSTALL_TEST_HOOKS
    return getenv(name);
#else
    (void)name;
    return NULL;
#endif
}

#endif
