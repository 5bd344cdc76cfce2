/*
 * gpu_many.h — what classify's and detect's make_many share (the GPU
 * route's many-item call, worker.c's batches of ready items): the per-item
 * scratch, the route call, and each item's status, message and counters.
 * The recipe fills the jobs it could plan and says, per finished item,
 * what to write beside the image (labels, boxes).
 */
#ifndef NST_RECIPE_GPU_MANY_H
#define NST_RECIPE_GPU_MANY_H

#include "common/buf.h"
#include "gpu/gpu.h"
#include "recipe/recipe.h"

/* Per item of a call, grow-only (the worker's depth bounds n). */
typedef struct nst_gpu_many {
    nst_buf jobs, dst, ints, why, px;
} nst_gpu_many;

/* Room for n items; the arrays below then hold n each. */
int nst_gpu_many_reserve(nst_gpu_many *g, size_t n);
void nst_gpu_many_free(nst_gpu_many *g);

static inline nst_gpu_job *nst_gpu_many_jobs(nst_gpu_many *g)
{
    return (nst_gpu_job *)(void *)g->jobs.data;
}
static inline uint8_t **nst_gpu_many_dst(nst_gpu_many *g)
{
    return (uint8_t **)(void *)g->dst.data;
}
static inline uint64_t *nst_gpu_many_px(nst_gpu_many *g) { return (uint64_t *)(void *)g->px.data; }
/* idx[k]: the caller's item of job k (its index in c[], rc[], msg) */
static inline int *nst_gpu_many_idx(nst_gpu_many *g, size_t n)
{
    return (int *)(void *)g->ints.data + 2 * n;
}

/* An item's message as the worker reports make's error (echo.c). */
void nst_gpu_many_error(char *msg, size_t n, int rc);

/* Routes jobs 0..m-1 (planned by the caller, of its n items; the others
 * already have rc[i] < 0 and their message) in one call, then sets rc[i]
 * of each: the route's verdict, with its message; for each decoded one it
 * calls done(ctx, k, i) (write what goes beside the image) and counts the
 * item in *t (decode and augment, pixels px[k], the per-backend split).
 * t1: when the caller began (decode time). */
void nst_gpu_many_route(nst_gpu_many *g, nst_gpu_route *route, nst_gpu_backend *be, int out_device,
                        size_t n, size_t m, int *rc, char *msg, size_t msgn, nst_recipe_times *t,
                        uint64_t t1, void (*done)(void *ctx, size_t k, size_t i), void *ctx);

#endif
