/*
 * loader.c — the loader: wires the index, the sampler, the item recipe,
 * the fetch stage, a batch backend and the worker threads together, and
 * is the public API's front: create (on a private dataset, or on a shared
 * one: nostall_loader_create_from_dataset, which refuses an option that
 * would change the items), free, stop, join, next, release, info and the
 * item lookups (path, label, class name, ignored files, bad
 * shards); and the plan's lengths the backends ask for (each epoch's and
 * each batch's, the bad-item budget); nst_loader_plan_info, that plan
 * without a running loader (analyze/files.c). The only file that knows every
 * stage. The items (recipe or mix, sampler, repeats, plan) and the fetch
 * environment are made in loader_source.c, state (set/get) in
 * loader_state.c, statistics and the skip table in loader_stats.c, the
 * worker loop in worker.c. gpu_output=device: the device ring over the
 * local ring (gpu/dring.c), made at create, lent through by
 * nostall_loader_next_device and given back by release(_device) -- its
 * give_back into the ring may run on a CUDA host function's thread.
 *
 * DESIGN
 *   The producer cursor walks the plan (nst_engine_plan: each batch's length in
 *   each epoch) and hands out one item ticket at a time, in delivery order;
 *   each item's dataset index and every random choice are pure functions of
 *   (seed, epoch, position), so the bytes of every batch are the same
 *   whatever the number of threads and whichever thread did which item.
 *   Which backend holds the batches -- the local ring or a coordinated
 *   group's shared segment -- is decided once, here, at create; nothing
 *   else branches on it.
 *
 * THREADS  next/release/set_state: the consumer (release: any thread).
 *   stop/stats: any thread. Workers: worker.c. Locks: the backend's, then
 *   the loader's skip_mu (loader_impl.h); the plan's epoch lengths take their own.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "batch/ring.h"
#include "serve/serve.h"
#include "echo/echo.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/cpubudget.h"
#include "common/memlimit.h"
#include "coord/backend.h"
#include "loader_impl.h"
#include "recipe/mixture.h"
#include "dataset/stream.h"
#include "gpu/gpu.h"

/* ------------------------------------------------------------------------
 * The plan.
 * ------------------------------------------------------------------------ */

uint64_t nst_loader_epoch_len(struct nostall_loader *ld, uint64_t epoch)
{
    return ld->echo_mode == NST_ECHO_ITEMS && ld->echo ? nst_echo_epoch_len(ld->echo, epoch)
                                                       : nst_sampler_len(&ld->sampler, epoch);
}

uint32_t nst_loader_batch_len(void *ctx, uint64_t epoch, uint64_t pos)
{
    struct nostall_loader *ld = ctx;
    uint64_t per = nst_loader_epoch_len(ld, epoch);
    if (pos >= per) return 0;
    uint64_t rem = per - pos;
    if (rem >= ld->batch_size) return ld->batch_size;
    return ld->drop_last ? 0 : (uint32_t)rem;
}

uint64_t nst_loader_max_bad(void *ctx, uint64_t epoch, uint64_t *items)
{
    struct nostall_loader *ld = ctx;
    uint64_t n = nst_loader_epoch_len(ld, epoch);
    if (ld->drop_last) n -= n % ld->batch_size;
    *items = n;
    double x = ld->cfg.v[NOSTALL_OPT_MAX_BAD_FRACTION].d * (double)n, r = nearbyint(x);
    return (uint64_t)(fabs(x - r) < 1e-9 * (x > 1 ? x : 1) ? r : ceil(x)); /* 0.03 x 100: 3 */
}

int nst_loader_move(void *ctx, uint32_t field, uint8_t *dst, const uint8_t *src, size_t bytes)
{
    struct nostall_loader *ld = ctx;
    if (!ld->dring || field != ld->recipe->image_field) return 0;
    int rc = nst_gpu_dring_move(ld->dring, dst, src, bytes);
    return rc < 0 ? rc : 1;
}

int nst_loader_moved(void *ctx)
{
    struct nostall_loader *ld = ctx;
    return ld->dring ? nst_gpu_dring_moved(ld->dring) : 0;
}

uint64_t nst_loader_item_pos(struct nostall_loader *ld, const nst_ticket *t)
{
    if (!t->bt.reserve) return t->position;
    uint64_t shard = nst_sampler_len(&ld->sampler, t->epoch),
             end = nst_loader_epoch_len(ld, t->epoch);
    if (ld->drop_last) end -= end % ld->batch_size;
    uint64_t r = t->position - end;
    if (ld->echo_mode == NST_ECHO_ITEMS)
        return r % shard; /* deliveries: the shard from its start */
    uint64_t j = end + r; /* the remainder, then wrapped */
    return j < shard ? j : (j - shard) % shard;
}

static int forked(const struct nostall_loader *ld, const char *fn)
{
    if (getpid() != ld->pid)
        return nst_error(NOSTALL_E_FORK, "%s: loader used in a child process after fork()", fn);
    return 0;
}

/* ------------------------------------------------------------------------
 * Create / free.
 * ------------------------------------------------------------------------ */

/* gpu_output=device: what the device ring carries today (classify and
 * detect: their make writes the image through the GPU route, detect's
 * boxes stay in the host slot). Each refusal says why: adaptive echoing's
 * pool keeps host data, a coordinated group's slots and a prep server's
 * items are host memory, full-size images are decoded on the CPU.
 * (on_bad_item=skip works: the engine's compaction and top-ups move the
 * image field through the plan's move, nst_loader_move, on the device;
 * fixed echoing too: fetch and batch need nothing, decode re-augments the
 * kept image on the route, augment keeps a device store: make_dring.) */
static int validate_gpu_output(const nostall_config *c, const char *fn)
{
    const nst_optval *v = c->v;
    if (v[NOSTALL_OPT_GPU_OUTPUT].u != NOSTALL_GPU_OUTPUT_DEVICE) return 0;
    const char *why = NULL;
    if (v[NOSTALL_OPT_DECODE_DEVICE].u != NOSTALL_DECODE_GPU)
        why = "it needs decode_device=gpu";
    else if (v[NOSTALL_OPT_TASK].u != NOSTALL_TASK_CLASSIFY &&
             v[NOSTALL_OPT_TASK].u != NOSTALL_TASK_DETECT)
        why = "only task=classify and task=detect write their images on the device";
    else if (v[NOSTALL_OPT_IMAGE_MODE].u == NOSTALL_IMAGE_FULL)
        why = "image_mode=full is decoded on the CPU";
    else if (v[NOSTALL_OPT_ECHO].u == NOSTALL_ECHO_ADAPTIVE)
        why = "echo=adaptive assembles its echo batches in a pool in host memory; use "
              "echo=fixed (echo_point fetch, augment or batch work with device output)";
    else if (v[NOSTALL_OPT_COORDINATE].s[0])
        why = "a coordinated group's slots are shared host memory, not device memory";
    else if (nst_config_path(c, NOSTALL_OPT_PREP_SERVERS)[0])
        why = "prep servers send items to host memory";
    else if (c->op)
        why = "an in-process op (transform=) runs on the item's host memory";
    else if (v[NOSTALL_OPT_SHARD_MODE].u != NOSTALL_SHARD_MODE_INDEXED)
        why = "shard_mode=stream is not routed to the device ring";
    if (!why) return 0;
    return nst_error(NOSTALL_E_OPTION, "%s: gpu_output=device: %s", fn, why);
}

static int validate(const nostall_config *c, const char *fn)
{
    const nst_optval *v = c->v;
    if (v[NOSTALL_OPT_SCALE_MIN].d > v[NOSTALL_OPT_SCALE_MAX].d)
        return nst_error(NOSTALL_E_OPTION, "%s: scale_min (%g) must be <= scale_max (%g)", fn,
                         v[NOSTALL_OPT_SCALE_MIN].d, v[NOSTALL_OPT_SCALE_MAX].d);
    if (v[NOSTALL_OPT_RATIO_MIN].d > v[NOSTALL_OPT_RATIO_MAX].d)
        return nst_error(NOSTALL_E_OPTION, "%s: ratio_min (%g) must be <= ratio_max (%g)", fn,
                         v[NOSTALL_OPT_RATIO_MIN].d, v[NOSTALL_OPT_RATIO_MAX].d);
    if (v[NOSTALL_OPT_RANK].u >= v[NOSTALL_OPT_WORLD_SIZE].u)
        return nst_error(NOSTALL_E_OPTION, "%s: rank (%llu) must be < world_size (%llu)", fn,
                         (unsigned long long)v[NOSTALL_OPT_RANK].u,
                         (unsigned long long)v[NOSTALL_OPT_WORLD_SIZE].u);
    if (v[NOSTALL_OPT_CACHE].u == NOSTALL_CACHE_NONE && v[NOSTALL_OPT_CACHE_BYTES].u)
        return nst_error(NOSTALL_E_OPTION,
                         "%s: cache_bytes (%llu) is set but cache=none; use cache=minio", fn,
                         (unsigned long long)v[NOSTALL_OPT_CACHE_BYTES].u);
    if (v[NOSTALL_OPT_CACHE_TRANSCODE].u &&
        (v[NOSTALL_OPT_CACHE].u != NOSTALL_CACHE_MINIO || !v[NOSTALL_OPT_CACHE_BYTES].u))
        return nst_error(NOSTALL_E_OPTION,
                         "%s: cache_transcode=1 rewrites what the MinIO cache keeps, but there "
                         "is no cache: set cache=minio and cache_bytes > 0",
                         fn);
    int rc = nst_echo_validate(c, fn);
    if (rc < 0) return rc;
    /* decode_device=gpu: images only; each missing piece named (gpu/gpu.c) */
    if (v[NOSTALL_OPT_DECODE_DEVICE].u == NOSTALL_DECODE_GPU) {
        const uint64_t task = v[NOSTALL_OPT_TASK].u;
        if (task != NOSTALL_TASK_CLASSIFY && task != NOSTALL_TASK_DETECT)
            return nst_error(NOSTALL_E_OPTION,
                             "%s: decode_device=gpu decodes images: task=%s has none; use "
                             "task=classify or detect, or decode_device=cpu",
                             fn,
                             task == NOSTALL_TASK_TOKENS  ? "tokens"
                             : task == NOSTALL_TASK_BYTES ? "bytes"
                                                          : "audio");
        if ((rc = nst_gpu_check((unsigned)v[NOSTALL_OPT_GPU_ID].u, fn)) < 0) return rc;
    }
    if ((rc = validate_gpu_output(c, fn)) < 0) return rc;
    if (nst_config_path(c, NOSTALL_OPT_PREP_SERVERS)[0] &&
        (v[NOSTALL_OPT_COORDINATE].s[0] || v[NOSTALL_OPT_ECHO_FACTOR].d > 1 ||
         v[NOSTALL_OPT_ECHO].u == NOSTALL_ECHO_ADAPTIVE ||
         v[NOSTALL_OPT_SHARD_MODE].u != NOSTALL_SHARD_MODE_INDEXED || c->op))
        return nst_error(NOSTALL_E_OPTION,
                         "%s: prep_servers cannot be combined with coordinate, echoing, "
                         "shard_mode=stream or an in-process op (a server cannot run it)",
                         fn);
    if (v[NOSTALL_OPT_MODE].u == NOSTALL_MODE_EVAL && v[NOSTALL_OPT_RESIZE].u &&
        v[NOSTALL_OPT_RESIZE].u < v[NOSTALL_OPT_CROP].u)
        return nst_error(NOSTALL_E_OPTION, "%s: resize (%llu) must be >= crop (%llu) or 0", fn,
                         (unsigned long long)v[NOSTALL_OPT_RESIZE].u,
                         (unsigned long long)v[NOSTALL_OPT_CROP].u);
    return 0;
}

/* "1.5 GB" */
static const char *human_bytes(uint64_t n, char *buf, size_t len)
{
    if (n >= 1000000000ULL)
        snprintf(buf, len, "%.1f GB", (double)n / 1e9);
    else if (n >= 1000000ULL)
        snprintf(buf, len, "%.1f MB", (double)n / 1e6);
    else
        snprintf(buf, len, "%llu bytes", (unsigned long long)n);
    return buf;
}

/* Every rank delivers the plan's batches, bad items or not (the engine's
 * RESERVE, batch/engine.h): on_bad_item=skip in the local ring, but not in
 * a group (its own plan) or a shard stream (no going back); with
 * drop_last=0 only where there are ranks to keep in step (world_size > 1:
 * alone, a batch of only bad items is passed, as before). */
int nst_loader_uses_reserve(const struct nostall_loader *ld)
{
    const nst_optval *v = ld->cfg.v;
    return ld->on_bad == NOSTALL_BAD_SKIP && !v[NOSTALL_OPT_COORDINATE].s[0] &&
           v[NOSTALL_OPT_SHARD_MODE].u == NOSTALL_SHARD_MODE_INDEXED &&
           (ld->drop_last || ld->sampler.world > 1);
}

/* Ring slots for batches_ahead `ahead`: ahead + 1, or one more than an
 * epoch has batches when that is fewer (at least 2), plus the reserve's
 * and repeating's (plan_memory sets plan_batches and plan_extra). */
uint32_t nst_loader_slots(const struct nostall_loader *ld, uint64_t ahead)
{
    uint64_t n = ahead + 1;
    if (n > ld->plan_batches + 1) n = ld->plan_batches + 1;
    if (n < 2) n = 2;
    n += ld->plan_extra;
    return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

/* The memory a plan of `nslots` slots takes against the budget:
 * memory_budget when set (ring, repeats and cache_bytes together), else
 * what the process may use now (memlimit.c). 0 if it fits, else the
 * error, with the figures. */
static int plan_fits(struct nostall_loader *ld, uint64_t nslots, uint32_t items,
                     const nst_echo_plan *xp, const char *fn)
{
    const nst_optval *v = ld->cfg.v;
    size_t ring = nst_engine_size((uint32_t)nslots, items, ld->recipe->fields, ld->recipe->nfields);
    uint64_t extra = xp->bytes, cache = v[NOSTALL_OPT_CACHE].u == NOSTALL_CACHE_MINIO
                                            ? v[NOSTALL_OPT_CACHE_BYTES].u
                                            : 0;
    const char *hint = ld->recipe->size_hint ? ld->recipe->size_hint : "the item's size";
    char a[32], b[32], c[32];
    if (!ring)
        return nst_error(NOSTALL_E_INVALID, "%s: %llu batches of %u items of %zu bytes overflow",
                         fn, (unsigned long long)nslots, items, ld->recipe->item_bytes);
    uint64_t mb = v[NOSTALL_OPT_MEMORY_BUDGET].u;
    if (mb) {
        if (ring > mb || extra > mb - ring || cache > mb - ring - extra)
            return nst_error(NOSTALL_E_NOMEM,
                             "%s: the batch ring needs %s (%llu slots x %u items x %zu bytes)%s%s"
                             "%s%s, over memory_budget %s; lower batch_size, batches_ahead, "
                             "cache_bytes or %s",
                             fn, human_bytes(ring, a, sizeof a), (unsigned long long)nslots, items,
                             ld->recipe->item_bytes, extra ? xp->bytes_what : "",
                             extra ? human_bytes(extra, b, sizeof b) : "",
                             cache ? " plus cache_bytes " : "",
                             cache ? human_bytes(cache, c, sizeof c) : "",
                             human_bytes(mb, c, sizeof c), hint);
        return 0;
    }
    nst_memlimit m;
    if (nst_memlimit_get(&m) == 0) {
        if (ring > m.available || extra > m.available - (ring < m.available ? ring : 0))
            return nst_error(NOSTALL_E_NOMEM,
                             "%s: the batch ring needs %s (%llu slots x %u items x %zu bytes)%s%s, "
                             "but only %s of memory is available (%s limit %s); lower "
                             "batch_size, batches_ahead or %s",
                             fn, human_bytes(ring, a, sizeof a), (unsigned long long)nslots, items,
                             ld->recipe->item_bytes, extra ? xp->bytes_what : "",
                             extra ? human_bytes(extra, b, sizeof b) : "",
                             human_bytes(m.available, c, sizeof c), m.source,
                             human_bytes(m.limit, b, sizeof b), hint);
        if (cache && cache + ring + extra > m.limit)
            return nst_error(NOSTALL_E_NOMEM,
                             "%s: cache_bytes %s plus the batch ring's %s exceed the memory this "
                             "process may use, %s (%s); lower cache_bytes (e.g. '25%%')",
                             fn, human_bytes(cache, a, sizeof a),
                             human_bytes(ring + extra, b, sizeof b),
                             human_bytes(m.limit, c, sizeof c), m.source);
    }
    return 0;
}

/* autotune chooses the MinIO cache's size from memory_budget: with
 * cache=minio, no cache_bytes and a budget, the cache gets what the ring
 * (at most half the budget, beyond its configured batches_ahead) and the
 * echo pool leave (loader_tune.c caps what it admits). */
static int tune_auto_cache(const struct nostall_loader *ld)
{
    const nst_optval *v = ld->cfg.v;
    return ld->autotune && v[NOSTALL_OPT_CACHE].u == NOSTALL_CACHE_MINIO &&
           !v[NOSTALL_OPT_CACHE_BYTES].u && v[NOSTALL_OPT_MEMORY_BUDGET].u &&
           !nst_config_path(&ld->cfg, NOSTALL_OPT_PREP_SERVERS)[0];
}

/* autotune: the most batches_ahead (up to NST_TUNE_AHEAD_MAX, at least
 * the configured one) whose ring fits memory_budget (half of it when the
 * cache is sized from it too: tune_auto_cache), or a quarter of the
 * memory available now when no budget is set (the ring is a part of what
 * a training process needs); the configured one when none larger does. */
static uint64_t tune_ahead_max(struct nostall_loader *ld, uint32_t items, const nst_echo_plan *xp)
{
    const nst_optval *v = ld->cfg.v;
    uint64_t conf = v[NOSTALL_OPT_BATCHES_AHEAD].u, mb = v[NOSTALL_OPT_MEMORY_BUDGET].u;
    nst_memlimit m;
    uint64_t room = mb ? mb : nst_memlimit_get(&m) == 0 ? m.available / 4 : UINT64_MAX;
    uint64_t cache =
        v[NOSTALL_OPT_CACHE].u == NOSTALL_CACHE_MINIO ? v[NOSTALL_OPT_CACHE_BYTES].u : 0;
    int half = tune_auto_cache(ld);
    uint64_t best = 0;
    for (uint64_t a = 1; a <= NST_TUNE_AHEAD_MAX; a++) {
        uint32_t n = nst_loader_slots(ld, a);
        if (n > NST_ENGINE_MAX_SLOTS) break;
        size_t ring = nst_engine_size(n, items, ld->recipe->fields, ld->recipe->nfields);
        if (ring && ring <= room && xp->bytes <= room - ring &&
            (mb ? cache : 0) <= room - ring - xp->bytes &&
            (!half || a <= conf || ring + xp->bytes <= room / 2))
            best = a;
    }
    if (mb) return best ? best : 1; /* 1 that does not fit: plan_fits refuses it */
    return best > conf ? best : conf;
}

/* The batches' plan, no larger than an epoch can fill: a slot holds at
 * most the items one batch can have (batch_size, or an epoch's deliveries
 * if fewer) and there are nst_loader_slots(batches_ahead) slots (with
 * autotune, for the most batches_ahead memory allows: tune_ahead_max;
 * the tuner uses fewer). What the slots, the repeats' own memory and the
 * MinIO cache would take is checked against memory_budget or the memory
 * this process may use (the cgroup's limit, not only RAM) before anything
 * is allocated: a plan that cannot fit is refused with the figures, not
 * found out by the OOM killer. */
static int plan_memory(struct nostall_loader *ld, uint32_t *nslots_out, uint32_t *items_out,
                       const char *fn)
{
    const nst_optval *v = ld->cfg.v;
    nst_echo_plan xp = nst_echo_plan_for(&ld->cfg, ld->sampler.per_rank, ld->recipe->item_bytes);
    uint64_t most = xp.most;
    uint32_t items = most < ld->batch_size ? (uint32_t)most : ld->batch_size;
    ld->plan_batches = (most + ld->batch_size - 1) / ld->batch_size;
    ld->plan_extra = (nst_loader_uses_reserve(ld) ? 1 : 0) + xp.slots;
    uint64_t ahead = v[NOSTALL_OPT_BATCHES_AHEAD].u;
    if (ld->autotune) ahead = tune_ahead_max(ld, items, &xp);
    uint64_t nslots = nst_loader_slots(ld, ahead);
    if (nslots > NST_ENGINE_MAX_SLOTS)
        return nst_error(NOSTALL_E_OPTION, "%s: %llu ring slots (batches_ahead%s) exceed %d", fn,
                         (unsigned long long)nslots, xp.slots_what, NST_ENGINE_MAX_SLOTS);
    int rc = plan_fits(ld, nslots, items, &xp, fn);
    if (rc < 0) return rc;
    ld->ahead_max = (uint32_t)ahead;
    if (tune_auto_cache(ld)) { /* what the ring and the pool leave of the budget */
        uint64_t mb = v[NOSTALL_OPT_MEMORY_BUDGET].u,
                 used = nst_engine_size((uint32_t)nslots, items, ld->recipe->fields,
                                        ld->recipe->nfields) +
                        xp.bytes;
        ld->cache_auto = used < mb ? mb - used : 0;
    }
    *nslots_out = (uint32_t)nslots;
    *items_out = items;
    return 0;
}

/* Epochs and batches as reported by info (with repeats: epoch 0's). */
static void plan_counts(struct nostall_loader *ld)
{
    uint64_t nb = 0, ni = 0;
    for (uint64_t pos = 0;; pos += ld->batch_size) {
        uint32_t n = nst_loader_batch_len(ld, 0, pos);
        if (!n) break;
        uint32_t u = nst_echo_batch_uses(&ld->cfg, 0, pos); /* as the shuffle buffer draws */
        nb += u;
        ni += (uint64_t)u * n;
    }
    ld->batches_per_epoch = nb;
    ld->items_per_epoch = ni;
}

/* The backend's sink: a delivered (or passed) batch's accounting and bad
 * items (backend lock held; the consumer thread). */
void nst_loader_skip(void *ctx, uint64_t index, int status, const char *msg);
static void sink_count(void *ctx, const uint64_t *io)
{
    struct nostall_loader *ld = ctx;
    for (int i = 0; i < NST_IO_COUNT_; i++) STAT_ADD(ld->dlv[i], io[i]);
}

static int make_backend(struct nostall_loader *ld, const char *fn)
{
    const nst_optval *v = ld->cfg.v;
    const int skip = ld->on_bad == NOSTALL_BAD_SKIP, reserve = nst_loader_uses_reserve(ld);
    uint32_t flags = (ld->on_bad == NOSTALL_BAD_FAIL ? NST_ENGINE_FAIL : 0) |
                     (skip && (ld->drop_last || reserve) ? NST_ENGINE_FILL : 0) |
                     (reserve ? NST_ENGINE_RESERVE : 0) |
                     (reserve && !ld->drop_last ? NST_ENGINE_KEEP : 0);
    nst_batches_sink sink = {.ctx = ld, .skip = nst_loader_skip, .count = sink_count};
    if (v[NOSTALL_OPT_COORDINATE].s[0]) {
        nst_coord_params cp = {.cfg = &ld->cfg,
                               .source = ld->source,
                               .dataset_items = ld->recipe->items,
                               .items_per_epoch = ld->sampler.per_rank,
                               .flags = flags,
                               .recipe = ld->recipe,
                               .sink = sink};
        return nst_coord_backend_create(&ld->bq, &cp, fn);
    }
    uint32_t nslots = 0, items = 0;
    int rc = plan_memory(ld, &nslots, &items, fn);
    if (rc < 0) return rc;
    /* autotune: the slots of its start touched now, the rest when used */
    uint64_t start = v[NOSTALL_OPT_BATCHES_AHEAD].u;
    if (start > ld->ahead_max) start = ld->ahead_max;
    nst_ring_params p = {.nslots = nslots,
                         .touch_slots = ld->autotune ? nst_loader_slots(ld, start) : 0,
                         .slot_items = items,
                         .batch_size = ld->batch_size,
                         .flags = flags,
                         .recipe = ld->recipe,
                         .plan = ld->plan,
                         .sink = sink};
    return nst_echo_ring_create(&ld->bq, &ld->echo, &p, &ld->cfg, &ld->sampler, fn);
}

/* shard_mode=stream: the shards' reader (dataset/stream.h). Its store holds
 * the shuffle buffer plus every item the ring's open batches and the
 * workers' tickets can wait for, so the reader never waits for room that
 * only a later item would free. */
static int make_stream(struct nostall_loader *ld, const char *fn)
{
    const nst_optval *v = ld->cfg.v;
    if (v[NOSTALL_OPT_SHARD_MODE].u == NOSTALL_SHARD_MODE_INDEXED) return 0;
    const nst_index *ix = ld->recipe->index;
    if (!ix || ld->sampler.mix || !nst_index_shards(ix) || ld->recipe->ops->locate ||
        ld->recipe->items != nst_index_count(ix))
        return nst_error(NOSTALL_E_OPTION,
                         "%s: shard_mode=stream needs tar shards read one item per member (%s "
                         "with task=%s is not)",
                         fn, ld->source, ld->recipe->ops->name);
    if (v[NOSTALL_OPT_COORDINATE].s[0] || ld->sampler.mix)
        return nst_error(NOSTALL_E_OPTION,
                         "%s: shard_mode=stream cannot be combined with %s (use shard_mode=indexed)",
                         fn, ld->sampler.mix ? "mix" : "coordinate");
    uint32_t nslots = 0, items = 0;
    int rc = plan_memory(ld, &nslots, &items, fn);
    if (rc < 0) return rc;
    uint64_t tickets =
        (uint64_t)ld->nthreads *
        (v[NOSTALL_OPT_IO_DEPTH].u ? v[NOSTALL_OPT_IO_DEPTH].u : NOSTALL_IO_DEPTH_AUTO_MAX);
    uint64_t cap = v[NOSTALL_OPT_SHUFFLE_BUFFER].u + (uint64_t)(nslots + 1) * items + tickets + 2;
    if (cap > UINT32_MAX / 4)
        return nst_error(NOSTALL_E_OPTION, "%s: shuffle_buffer %llu is too large", fn,
                         (unsigned long long)v[NOSTALL_OPT_SHUFFLE_BUFFER].u);
    nst_stream_opts o = {.seed = v[NOSTALL_OPT_SEED].u,
                         .shuffle = (int)v[NOSTALL_OPT_SHUFFLE].u,
                         .buffer = (uint32_t)v[NOSTALL_OPT_SHUFFLE_BUFFER].u,
                         .capacity = (uint32_t)cap,
                         .epochs = ld->epochs_limit,
                         .max_item_bytes = v[NOSTALL_OPT_MAX_FILE_BYTES].u,
                         .timeout_ms = (uint32_t)v[NOSTALL_OPT_HTTP_TIMEOUT_MS].u,
                         .retries = (uint32_t)v[NOSTALL_OPT_HTTP_RETRIES].u,
                         .verify_tls = (int)v[NOSTALL_OPT_HTTP_VERIFY_TLS].u,
                         .sampler = ld->sampler};
    return nst_stream_create(&ld->stream, ix, &o);
}

/* gpu_output=device: a batch the consumer's stream has finished with goes
 * back to the host ring (dring.c's give_back; any thread). */
static void dring_give_back(void *ctx, const nostall_batch *b)
{
    struct nostall_loader *ld = ctx;
    ld->bq->ops->release(ld->bq, b);
}

/* gpu_output=device: item echoing's device store and its copies, through
 * the device ring (ctx). */
static int echo_dev_alloc(void *ctx, size_t bytes, uint8_t **mem)
{
    return nst_gpu_dring_alloc_extra(ctx, bytes, mem);
}

static int echo_dev_copy(void *ctx, uint8_t *dst, const uint8_t *src, size_t n)
{
    return nst_gpu_dring_copy(ctx, dst, src, n);
}

static int echo_dev_copied(void *ctx) { return nst_gpu_dring_copied(ctx); }

/* gpu_output=device: the device ring over the host ring's whole arena
 * (the workers write the image field at the same offsets there), and
 * echo_point=augment's device store. */
static int make_dring(struct nostall_loader *ld, const char *fn)
{
    nst_gpu_dring_ops ops;
    void *mem = NULL;
    size_t bytes = 0;
    uint32_t nslots = 0, items = 0;
    int rc = nst_gpu_dring_ops_open(&ops, (unsigned)ld->cfg.v[NOSTALL_OPT_GPU_ID].u);
    if (rc < 0) return rc;
    if (!ld->bq->ops->memory)
        return nst_error(NOSTALL_E_OPTION, "%s: gpu_output=device needs the local ring", fn);
    ld->bq->ops->memory(ld->bq, &mem, &bytes, &nslots, &items);
    rc = nst_gpu_dring_create(&ld->dring, &ops, mem, bytes, nslots, dring_give_back, ld);
    if (rc < 0) return rc;
    /* echo_point=augment: the finished images kept in device memory */
    nst_echo_device dev = {.field = ld->recipe->image_field,
                           .alloc = echo_dev_alloc,
                           .copy = echo_dev_copy,
                           .copied = echo_dev_copied,
                           .ctx = ld->dring};
    return nst_echo_set_device(ld->echo, &dev);
}

/* A loader over `ds` (its reference taken over: released on failure) with
 * `cfg`, validated. */
static int create(nostall_loader **out, nostall_dataset *ds, const nostall_config *cfg,
                  nst_loader_backend_fn mk, void *mk_ctx, const char *fn)
{
    struct nostall_loader *ld = calloc(1, sizeof *ld);
    const char *source = ds->source;
    int rc;
    if (!ld) {
        nostall_dataset_free(ds);
        return nst_error(NOSTALL_E_NOMEM, "%s: out of memory", fn);
    }
    ld->ds = ds;
    ld->mk_backend = mk;
    ld->mk_ctx = mk_ctx;
    ld->cfg = *cfg;
    ld->pid = getpid();
    pthread_mutex_init(&ld->skip_mu, NULL);
    pthread_mutex_init(&ld->tune_mu, NULL);
    pthread_cond_init(&ld->tune_cv, NULL);
    const nst_optval *v = ld->cfg.v;
    ld->autotune = (int)v[NOSTALL_OPT_AUTOTUNE].u;
    nst_throttle_init(&ld->throttle, v[NOSTALL_OPT_STORAGE_MBPS].d,
                      v[NOSTALL_OPT_STORAGE_LATENCY_MS].d);
    ld->batch_size = (uint32_t)v[NOSTALL_OPT_BATCH_SIZE].u;
    ld->on_bad = (int)v[NOSTALL_OPT_ON_BAD_ITEM].u;
    ld->drop_last = (int)v[NOSTALL_OPT_DROP_LAST].u;
    ld->epochs_limit = v[NOSTALL_OPT_EPOCHS].u;
    /* threads=0: the CPUs this process may use (affinity mask, cgroup CPU
     * quota), shared by torchrun's LOCAL_WORLD_SIZE ranks. */
    nst_cpu_budget budget;
    nst_cpu_budget_get(&budget);
    ld->cpu_budget_f = v[NOSTALL_OPT_CPU_BUDGET].d;
    if (ld->cpu_budget_f > 0) { /* given: its ceiling is the default worker count */
        double c = ceil(ld->cpu_budget_f - 1e-9);
        budget.threads = c < 1 ? 1 : (uint32_t)c;
    } else {
        double cpus =
            budget.quota > 0 && budget.quota < budget.affinity ? budget.quota : budget.affinity;
        ld->cpu_budget_f = cpus / (budget.local_world_size ? budget.local_world_size : 1);
        if (ld->cpu_budget_f < 0.01) ld->cpu_budget_f = 0.01;
    }
    ld->cpu_budget = budget.threads;
    ld->nthreads = (uint32_t)v[NOSTALL_OPT_THREADS].u;
    /* with prep servers, threads=0 means none: every item prepared remotely */
    if (ld->nthreads == 0 && !nst_config_path(&ld->cfg, NOSTALL_OPT_PREP_SERVERS)[0])
        ld->nthreads = budget.threads < 1024 ? budget.threads : 1024;
    if (!(ld->source = strdup(source))) {
        rc = nst_error(NOSTALL_E_NOMEM, "%s: out of memory", fn);
        goto fail;
    }
    if ((rc = nst_loader_make_source(ld, source, fn)) < 0) goto fail;
    rc = ld->mk_backend ? ld->mk_backend(ld->mk_ctx, ld->recipe, &ld->bq, fn) : make_backend(ld, fn);
    if (rc < 0 || (rc = nst_loader_make_fetch_env(ld, fn)) < 0) goto fail;
    plan_counts(ld);
    if ((rc = make_stream(ld, fn)) < 0) goto fail;
    if (nst_config_path(&ld->cfg, NOSTALL_OPT_PREP_SERVERS)[0]) {
        nst_prep_params pp = {.cfg = &ld->cfg,
                              .recipe = ld->recipe,
                              .bq = ld->bq,
                              .map = nst_worker_map,
                              .ctx = ld,
                              .stop = &ld->stop_flag};
        if ((rc = nst_prep_create(&ld->prep, &pp, fn)) < 0) goto fail;
    }
    if (v[NOSTALL_OPT_GPU_OUTPUT].u == NOSTALL_GPU_OUTPUT_DEVICE && (rc = make_dring(ld, fn)) < 0)
        goto fail;
    /* after the prep client: workers read ld->prep (its orphan pool) */
    if ((rc = nst_tune_setup(ld, fn)) < 0) goto fail;
    if ((rc = nst_workers_create(ld, fn)) < 0) goto fail;
    *out = ld;
    return 0;

fail : {
    /* Keep the message: freeing must not overwrite it. */
    char keep[NST_ERROR_MAX];
    snprintf(keep, sizeof keep, "%s", nostall_last_error());
    nostall_loader_free(ld);
    nst_error_set(rc, keep);
}
    return rc;
}

int nostall_loader_create(nostall_loader **out, const char *source, const nostall_config *cfg)
{
    static const char fn[] = "nostall_loader_create";
    nostall_config *defaults = NULL;
    nostall_dataset *ds = NULL;
    int rc;

    nst_error_clear();
    if (!out || !source)
        return nst_error(NOSTALL_E_INVALID, "%s: out and source must not be NULL", fn);
    *out = NULL;
    if (!cfg) {
        if ((rc = nostall_config_create(&defaults)) < 0) return rc;
        cfg = defaults;
    }
    if ((rc = validate(cfg, fn)) == 0 && (rc = nst_dataset_open(&ds, source, cfg, fn)) == 0)
        rc = create(out, ds, cfg, NULL, NULL, fn); /* a private dataset: its only holder */
    nostall_config_free(defaults);
    return rc;
}

int nst_loader_create_backend(nostall_loader **out, const char *source, const nostall_config *cfg,
                              nst_loader_backend_fn mk, void *ctx)
{
    static const char fn[] = "nostall_server_create";
    nostall_dataset *ds = NULL;
    int rc;
    *out = NULL;
    if ((rc = validate(cfg, fn)) == 0 && (rc = nst_dataset_open(&ds, source, cfg, fn)) == 0)
        rc = create(out, ds, cfg, mk, ctx, fn);
    return rc;
}

int nst_loader_plan_info(nostall_dataset *ds, const nostall_config *cfg, nostall_dataset_info *out,
                         const char *fn)
{
    int rc = validate(cfg, fn);
    if (rc < 0) return rc;
    struct nostall_loader *ld = calloc(1, sizeof *ld);
    if (!ld) return nst_error(NOSTALL_E_NOMEM, "%s: out of memory", fn);
    ld->ds = ds; /* borrowed: this loader never runs and is freed here */
    ld->cfg = *cfg;
    ld->batch_size = (uint32_t)cfg->v[NOSTALL_OPT_BATCH_SIZE].u;
    ld->drop_last = (int)cfg->v[NOSTALL_OPT_DROP_LAST].u;
    if ((rc = nst_loader_make_source(ld, ds->source, fn)) == 0 && ld->echo_mode == NST_ECHO_ITEMS)
        rc = nst_error(NOSTALL_E_OPTION, "%s: %s: item echoing has no plan without a loader", fn,
                       ds->source);
    if (rc == 0) {
        plan_counts(ld);
        const nst_recipe *r = ld->recipe;
        *out =
            (nostall_dataset_info){.items = r->items,
                                   .classes = nst_index_classes(r->index),
                                   .files_ignored = nst_index_ignored(r->index),
                                   .items_per_epoch = ld->items_per_epoch,
                                   .batches_per_epoch = ld->batches_per_epoch,
                                   .batch_bytes =
                                       r->fields[r->image_field].item_bytes * ld->batch_size,
                                   .slot_items = ld->batch_size,
                                   .task = (uint32_t)cfg->v[NOSTALL_OPT_TASK].u,
                                   .items_truncated = r->items_truncated,
                                   .parts_dropped = r->parts_dropped,
                                   .parts_clipped = r->parts_clipped,
                                   .parts_unmatched = r->parts_unmatched,
                                   .items_missing = r->items_missing,
                                   .shards_bad = ld->sampler.mix ? nst_mixture_bad_shards(r)
                                                                 : nst_index_bad_shards(r->index)};
    }
    free(ld);
    return rc;
}

int nostall_loader_create_from_dataset(nostall_loader **out, nostall_dataset *ds,
                                       const nostall_config *cfg)
{
    static const char fn[] = "nostall_loader_create_from_dataset";
    int rc;
    nst_error_clear();
    if (!out || !ds) return nst_error(NOSTALL_E_INVALID, "%s: out and ds must not be NULL", fn);
    *out = NULL;
    if (!cfg) cfg = &ds->cfg;
    if ((rc = nst_dataset_same_items(ds, cfg, fn)) < 0 || (rc = validate(cfg, fn)) < 0) return rc;
    return create(out, nostall_dataset_ref(ds), cfg, NULL, NULL, fn);
}

int nostall_loader_stop(nostall_loader *ld)
{
    if (!ld) return nst_error(NOSTALL_E_INVALID, "nostall_loader_stop: loader is NULL");
    atomic_store(&ld->stop_flag, 1);
    nst_tune_wake(ld); /* parked workers */
    if (ld->bq) ld->bq->ops->stop(ld->bq);
    nst_stream_stop(ld->stream); /* workers waiting for a streamed item */
    return 0;
}

int nostall_loader_join(nostall_loader *ld)
{
    if (!ld) return nst_error(NOSTALL_E_INVALID, "nostall_loader_join: loader is NULL");
    if (getpid() != ld->pid) return nst_error(NOSTALL_E_FORK, "nostall_loader_join: after fork()");
    nostall_loader_stop(ld);
    for (uint32_t i = 0; ld->workers && i < ld->nthreads; i++)
        if (ld->workers[i].started) {
            pthread_join(ld->workers[i].thread, NULL);
            ld->workers[i].started = 0;
        }
    nst_prep_stop(ld->prep); /* its threads, like workers, call the backend */
    return 0;
}

void nostall_loader_free(nostall_loader *ld)
{
    if (!ld) return;
    /* In a forked child the workers do not exist and a mutex may have been
     * held at fork time: touch nothing (the child's copy is leaked). */
    if (getpid() != ld->pid) return;
    nostall_loader_join(ld);
    if (ld->workers) {
        for (uint32_t i = 0; i < ld->nthreads; i++) {
            if (ld->workers[i].rw) ld->recipe->ops->worker_free(ld->workers[i].rw);
            nst_fetcher_free(ld->workers[i].fetch);
            free(ld->workers[i].tk);
            nst_worker_many_free(ld->workers[i].many);
        }
        free(ld->workers);
    }
    nst_prep_free(ld->prep);
    nst_gpu_dring_free(ld->dring);         /* pending releases run (into the ring) */
    if (ld->bq) ld->bq->ops->free(ld->bq); /* after the workers: none still calls it */
    nst_stream_free(ld->stream);
    for (uint64_t i = 0; i < ld->nskips; i++) free(ld->skips[i].msg);
    free(ld->skips);
    free(ld->skip_reason);
    free(ld->res_band);
    free(ld->chain);
    nostall_dataset_free(ld->ds); /* after the workers: they used its recipe */
    nst_cache_free(ld->cache);
    free((void *)ld->fenv.reading);
    nst_throttle_destroy(&ld->throttle);
    free(ld->source);
    pthread_mutex_destroy(&ld->skip_mu);
    pthread_cond_destroy(&ld->tune_cv);
    pthread_mutex_destroy(&ld->tune_mu);
    free(ld);
}

/* ------------------------------------------------------------------------
 * Consumer.
 * ------------------------------------------------------------------------ */

/* timeout_ns == 0: wait forever. */
static int next_batch(struct nostall_loader *ld, nostall_batch *out, uint64_t timeout_ns,
                      const char *fn)
{
    int rc;
    nst_error_clear();
    if (!ld || !out) return nst_error(NOSTALL_E_INVALID, "%s: NULL argument", fn);
    if ((rc = forked(ld, fn)) < 0) return rc;
    uint64_t t_in = nst_now_ns(), deadline = timeout_ns ? t_in + timeout_ns - 1 : 0;
    if (ld->cons_last_ns) STAT_ADD(ld->consumer_busy_ns, t_in - ld->cons_last_ns);
    rc = ld->bq->ops->next(ld->bq, out, deadline, fn);
    uint64_t t_out = nst_now_ns();
    STAT_ADD(ld->wait_ns, t_out - t_in); /* the data stall: time inside next */
    if (rc == 0) {
        out->struct_size = sizeof *out; /* the backends describe the rest */
        STAT_ADD(ld->batches_delivered, 1);
        STAT_ADD(ld->items_delivered, out->count);
        if (ld->autotune) nst_tune_on_batch(ld); /* the controller: every few batches */
    }
    ld->cons_last_ns = rc == 0 ? t_out : 0;      /* the step runs between batches */
    if (rc == NOSTALL_E_DATASET && ld->nskips) { /* name the first bad items */
        char m[NST_ERROR_MAX];
        size_t n = (size_t)snprintf(m, sizeof m, "%s; bad items:", nostall_last_error());
        pthread_mutex_lock(&ld->skip_mu);
        for (uint64_t i = 0; i < ld->nskips && i < 3 && n < sizeof m; i++)
            n += (size_t)snprintf(m + n, sizeof m - n, "%s %s", i ? ";" : "",
                                  ld->skips[i].msg ? ld->skips[i].msg : "?");
        if (ld->nskips > 3 && n < sizeof m)
            snprintf(m + n, sizeof m - n, "; ... (%llu in all)", (unsigned long long)ld->nskips);
        pthread_mutex_unlock(&ld->skip_mu);
        rc = nst_error_set(rc, m);
    }
    return rc;
}

/* gpu_output=device: the host API cannot lend a batch whose images are
 * on the device. */
static int host_only(const struct nostall_loader *ld, const char *fn)
{
    if (!ld || !ld->dring) return 0;
    nst_error_clear();
    return nst_error(NOSTALL_E_STATE,
                     "%s: gpu_output=device: the images are on the device; use "
                     "nostall_loader_next_device",
                     fn);
}

int nostall_loader_next(nostall_loader *ld, nostall_batch *out)
{
    int rc = host_only(ld, "nostall_loader_next");
    return rc < 0 ? rc : next_batch(ld, out, 0, "nostall_loader_next");
}

int nostall_loader_next_timed(nostall_loader *ld, nostall_batch *out, uint32_t timeout_ms)
{
    int rc = host_only(ld, "nostall_loader_next_timed");
    return rc < 0 ? rc
                  : next_batch(ld, out, (uint64_t)timeout_ms * 1000000 + 1,
                               "nostall_loader_next_timed");
}

int nostall_loader_next_device(nostall_loader *ld, nostall_batch *out, nostall_device_batch *dev,
                               uint32_t timeout_ms)
{
    static const char fn[] = "nostall_loader_next_device";
    nst_error_clear();
    if (!ld || !out || !dev) return nst_error(NOSTALL_E_INVALID, "%s: NULL argument", fn);
    if (!ld->dring)
        return nst_error(NOSTALL_E_STATE,
                         "%s: the loader is not in GPU output mode (set decode_device=gpu and "
                         "gpu_output=device)",
                         fn);
    uint64_t t = timeout_ms == UINT32_MAX ? 0 : (uint64_t)timeout_ms * 1000000 + 1;
    int rc = next_batch(ld, out, t, fn);
    if (rc != 0) return rc;
    if ((rc = nst_gpu_dring_lend(ld->dring, out, dev)) < 0) {
        char keep[NST_ERROR_MAX];
        snprintf(keep, sizeof keep, "%s: %s", fn, nostall_last_error());
        ld->bq->ops->release(ld->bq, out);
        return nst_error_set(rc, keep);
    }
    return 0;
}

int nostall_loader_release_device(nostall_loader *ld, const nostall_batch *b, void *stream)
{
    static const char fn[] = "nostall_loader_release_device";
    int rc;
    nst_error_clear();
    if (!ld || !b) return nst_error(NOSTALL_E_INVALID, "%s: NULL argument", fn);
    if ((rc = forked(ld, fn)) < 0) return rc;
    if (!ld->dring)
        return nst_error(NOSTALL_E_STATE, "%s: the loader is not in GPU output mode", fn);
    return nst_gpu_dring_release(ld->dring, b, stream);
}

int nostall_loader_release(nostall_loader *ld, const nostall_batch *b)
{
    static const char fn[] = "nostall_loader_release";
    int rc;
    nst_error_clear();
    if (!ld || !b) return nst_error(NOSTALL_E_INVALID, "%s: NULL argument", fn);
    if ((rc = forked(ld, fn)) < 0) return rc;
    if (ld->dring) return nst_gpu_dring_release(ld->dring, b, NULL); /* "finished with it" */
    return ld->bq->ops->release(ld->bq, b);
}

/* ------------------------------------------------------------------------
 * Introspection.
 * ------------------------------------------------------------------------ */

int nostall_loader_info(const nostall_loader *cld, nostall_dataset_info *res, size_t size)
{
    nostall_loader *ld = (nostall_loader *)cld;
    nostall_dataset_info info, *out = &info;
    nst_error_clear();
    if (!ld || !res) return nst_error(NOSTALL_E_INVALID, "nostall_loader_info: NULL argument");
    memset(out, 0, sizeof *out);
    out->items = ld->recipe->items;
    out->task = (uint32_t)ld->cfg.v[NOSTALL_OPT_TASK].u;
    out->items_truncated = ld->recipe->items_truncated;
    out->parts_dropped = ld->recipe->parts_dropped;
    out->parts_clipped = ld->recipe->parts_clipped;
    out->parts_unmatched = ld->recipe->parts_unmatched;
    out->items_missing = ld->recipe->items_missing;
    out->classes = nst_index_classes(ld->recipe->index);
    out->files_ignored = nst_index_ignored(ld->recipe->index);
    out->shards_bad = ld->sampler.mix ? nst_mixture_bad_shards(ld->recipe)
                                      : nst_index_bad_shards(ld->recipe->index);
    out->items_per_epoch = ld->items_per_epoch;
    out->batches_per_epoch = ld->batches_per_epoch;
    out->threads = ld->nthreads;
    out->batch_bytes = ld->recipe->fields[ld->recipe->image_field].item_bytes * ld->batch_size;
    out->slot_items = ld->batch_size;
    if (ld->bq->ops->memory)
        ld->bq->ops->memory(ld->bq, &out->ring_memory, &out->ring_bytes, &out->ring_slots,
                            &out->slot_items);
    memcpy(res, out, size < sizeof *out ? size : sizeof *out);
    return 0;
}

int nostall_loader_item(const nostall_loader *ld, uint64_t index, const char **path, int64_t *label)
{
    nst_error_clear();
    if (!ld) return nst_error(NOSTALL_E_INVALID, "nostall_loader_item: loader is NULL");
    const nst_index *ix = ld->recipe->index;
    if (index >= ld->recipe->items)
        return nst_error(NOSTALL_E_INVALID, "nostall_loader_item: index %llu >= %llu items",
                         (unsigned long long)index, (unsigned long long)ld->recipe->items);
    if (path) *path = nst_recipe_path(ld->recipe, index);
    if (label)
        *label = nst_index_label_kind(ix) == NST_LABEL_INT && index < nst_index_count(ix)
                     ? nst_index_label(ix, index)
                     : 0;
    return 0;
}

const char *nostall_loader_ignored(const nostall_loader *ld, uint64_t i)
{
    return ld ? nst_index_ignored_path(ld->recipe->index, i) : NULL;
}

int nostall_loader_bad_shard(const nostall_loader *ld, uint64_t i, const char **path,
                             const char **reason)
{
    nst_error_clear();
    if (!ld || !path || !reason)
        return nst_error(NOSTALL_E_INVALID, "nostall_loader_bad_shard: NULL argument");
    if ((ld->sampler.mix ? nst_mixture_bad_shard(ld->recipe, i, path, reason)
                         : nst_index_bad_shard(ld->recipe->index, i, path, reason)) < 0)
        return nst_error(NOSTALL_E_INVALID,
                         "nostall_loader_bad_shard: %llu is past the named bad shards (the first "
                         "%d of each source are named)",
                         (unsigned long long)i, NST_INDEX_IGNORED_KEEP);
    return 0;
}

const char *nostall_loader_class_name(const nostall_loader *ld, uint64_t label)
{
    if (!ld) return NULL;
    return nst_index_class_name(ld->recipe->index, label);
}
