/*
 * gpu_many.c — classify's and detect's shared make_many steps (gpu_many.h):
 * scratch for a worker's batch of ready items, the GPU route's many-item
 * call, and each item's status, message and counters. Touches only the
 * caller's scratch, route, backend and output arrays.
 */
#include "recipe/gpu_many.h"

#include <stdio.h>

#include "augment/augment.h"
#include "common/clock.h"
#include "common/error.h"

int nst_gpu_many_reserve(nst_gpu_many *g, size_t n)
{
    int rc;
    if ((rc = nst_buf_reserve(&g->jobs, n * sizeof(nst_gpu_job))) < 0 ||
        (rc = nst_buf_reserve(&g->dst, n * sizeof(uint8_t *))) < 0 ||
        (rc = nst_buf_reserve(&g->ints, n * 3 * sizeof(int))) < 0 ||
        (rc = nst_buf_reserve(&g->why, n * NST_GPU_REASON)) < 0 ||
        (rc = nst_buf_reserve(&g->px, n * sizeof(uint64_t))) < 0)
        return rc;
    return 0;
}

void nst_gpu_many_free(nst_gpu_many *g)
{
    nst_buf_free(&g->jobs);
    nst_buf_free(&g->dst);
    nst_buf_free(&g->ints);
    nst_buf_free(&g->why);
    nst_buf_free(&g->px);
}

void nst_gpu_many_error(char *msg, size_t n, int rc)
{
    const char *detail = nostall_last_error();
    snprintf(msg, n, "%s", detail && *detail ? detail : nostall_strerror(rc));
}

void nst_gpu_many_route(nst_gpu_many *g, nst_gpu_route *route, nst_gpu_backend *be, int out_device,
                        size_t n, size_t m, int *rc, char *msg, size_t msgn, nst_recipe_times *t,
                        uint64_t t1, void (*done)(void *ctx, size_t k, size_t i), void *ctx)
{
    nst_gpu_job *jobs = nst_gpu_many_jobs(g);
    int *st = (int *)(void *)g->ints.data, *eng = st + n, *idx = nst_gpu_many_idx(g, n);
    char(*why)[NST_GPU_REASON] = (char(*)[NST_GPU_REASON])(void *)g->why.data;
    const uint64_t *px = nst_gpu_many_px(g);
    be->out_device = out_device; /* one worker's items: all alike */
    int e = m ? nst_gpu_route_many(route, be, jobs, m, nst_gpu_many_dst(g), st, why, eng) : 0;
    t->decode_ns += nst_now_ns() - t1;
    for (size_t k = 0; k < m; k++) {
        const size_t i = (size_t)idx[k];
        if (e == 0 && st[k] != NST_GPU_DECODED)
            rc[i] = nst_error(nst_gpu_route_code(route, k), "%s", why[k]);
        else
            rc[i] = e;
        if (rc[i] < 0) {
            nst_gpu_many_error(msg + i * msgn, msgn, rc[i]);
            continue;
        }
        t->decode_items++;
        t->gpu_hw_items += eng[k] == NST_GPU_ENGINE_HW; /* the stats' per-backend split */
        t->gpu_default_items += eng[k] == NST_GPU_ENGINE_DEFAULT;
        t->gpu_cpu_items += eng[k] == NST_GPU_ENGINE_CPU;
        t->decode_pixels += px[k];
        done(ctx, k, i);
        t->augment_items++;
        t->augment_bytes += nst_output_bytes(&jobs[k].out);
    }
}
