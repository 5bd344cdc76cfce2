/*
 * loader_source.c — the loader's items and how they are fetched, made at
 * create (loader.c calls these once, before any thread starts): the item
 * recipe or a weighted mix of recipes (recipe/mixture.c), borrowed from
 * the loader's dataset (dataset.c), the sampler over
 * its items, the echo mode (echo/echo.h decides it; refused with a shard
 * stream or, where it would differ per rank, with world_size > 1), the
 * epoch plan; and the fetch environment the workers share (the MinIO
 * cache: cache_bytes, or with autotune what memory_budget leaves; the peer
 * cache hook, storage options).
 * Touches only the loader being created.
 */
#include <math.h>
#include <stdlib.h>

#include "echo/echo.h"
#include "common/error.h"
#include "loader_impl.h"

int nst_loader_make_fetch_env(struct nostall_loader *ld, const char *fn)
{
    const nst_optval *v = ld->cfg.v;
    int rc;
    /* cache_bytes, or with autotune what memory_budget leaves (loader.c) */
    uint64_t cache_bytes =
        v[NOSTALL_OPT_CACHE_BYTES].u ? v[NOSTALL_OPT_CACHE_BYTES].u : ld->cache_auto;
    if (v[NOSTALL_OPT_CACHE].u == NOSTALL_CACHE_MINIO && cache_bytes &&
        (v[NOSTALL_OPT_CACHE_BYTES].u || ld->recipe->keys)) {
        rc = nst_cache_create(&ld->cache, cache_bytes, ld->recipe->keys);
        if (rc < 0) return rc;
        ld->fenv.reading = calloc(ld->recipe->keys ? ld->recipe->keys : 1, sizeof *ld->fenv.reading);
        if (!ld->fenv.reading) return nst_error(NOSTALL_E_NOMEM, "%s: out of memory", fn);
    }
    ld->fenv.keys = ld->recipe->keys; /* a key past them is E_INVALID, not a stray read */
    ld->fenv.cache = ld->cache;
    ld->fenv.peer = ld->cfg.has_peer ? &ld->cfg.peer : NULL;
    ld->fenv.throttle = &ld->throttle;
    ld->fenv.stop = &ld->stop_flag;
    ld->fenv.max_file_bytes = v[NOSTALL_OPT_MAX_FILE_BYTES].u;
    ld->fenv.reader = (int)v[NOSTALL_OPT_READER].u;
    ld->fenv.http_timeout_ms = (uint32_t)v[NOSTALL_OPT_HTTP_TIMEOUT_MS].u;
    ld->fenv.http_retries = (uint32_t)v[NOSTALL_OPT_HTTP_RETRIES].u;
    ld->fenv.http_verify_tls = (int)v[NOSTALL_OPT_HTTP_VERIFY_TLS].u;
    return 0;
}

/* Index, sampler, recipe and the epoch plan. */
int nst_loader_make_source(struct nostall_loader *ld, const char *source, const char *fn)
{
    const nst_optval *v = ld->cfg.v;
    const nst_mix *mix = NULL; /* weighted mixing: the sampler's slots (recipe/mixture.c) */
    int rc;
    if (nst_config_path(&ld->cfg, NOSTALL_OPT_MIX)[0] && v[NOSTALL_OPT_COORDINATE].s[0])
        return nst_error(NOSTALL_E_OPTION,
                         "%s: mix cannot be combined with coordinate='%s' (a group shares one "
                         "source)",
                         fn, v[NOSTALL_OPT_COORDINATE].s);
    ld->recipe = ld->ds->recipe; /* the dataset's (dataset.c) */
    mix = ld->ds->mix;
    rc = nst_sampler_init(&ld->sampler, mix ? mix->len : ld->recipe->items, v[NOSTALL_OPT_SEED].u,
                          (uint32_t)v[NOSTALL_OPT_RANK].u, (uint32_t)v[NOSTALL_OPT_WORLD_SIZE].u,
                          (int)v[NOSTALL_OPT_SHUFFLE].u, ld->drop_last);
    if (rc < 0) return rc;
    ld->sampler.mix = mix;
    if (ld->drop_last && ld->sampler.per_rank < ld->batch_size)
        return nst_error(NOSTALL_E_OPTION,
                         "%s: %s: drop_last with batch_size %u leaves no batch (this rank has "
                         "%llu items per epoch)",
                         fn, source, ld->batch_size, (unsigned long long)ld->sampler.per_rank);
    ld->echo_mode = nst_echo_mode(&ld->cfg, &ld->echo_point);
    if (ld->echo_mode && v[NOSTALL_OPT_SHARD_MODE].u != NOSTALL_SHARD_MODE_INDEXED)
        return nst_error(NOSTALL_E_OPTION,
                         "%s: shard_mode=stream cannot be combined with data echoing (use "
                         "shard_mode=indexed)",
                         fn);
    /* Every rank must deliver the same number of batches (a DDP job's
     * collectives pair up by count): refused where it depends on timing or
     * on which items each rank holds. */
    double ef = v[NOSTALL_OPT_ECHO_FACTOR].d;
    if (ld->sampler.world > 1 &&
        (ld->echo_mode == NST_ECHO_ADAPTIVE || (ld->echo_mode && ef != floor(ef))))
        return nst_error(NOSTALL_E_OPTION,
                         "%s: %s with world_size %u: %s, so the ranks would deliver different "
                         "numbers of batches and a distributed job's collectives would pair up "
                         "wrongly (a hang); use a whole echo_factor",
                         fn,
                         ld->echo_mode == NST_ECHO_ADAPTIVE ? "echo=adaptive"
                                                            : "a fractional echo_factor",
                         ld->sampler.world,
                         ld->echo_mode == NST_ECHO_ADAPTIVE
                             ? "adaptive echoing repeats data when this rank's pipeline is slow"
                             : "the extra uses are drawn per item (or batch position)");
    ld->plan = (nst_engine_plan){.batch_len = nst_loader_batch_len,
                                 .ctx = ld,
                                 .epochs = ld->epochs_limit,
                                 .max_bad = ld->on_bad == NOSTALL_BAD_SKIP &&
                                                    !v[NOSTALL_OPT_COORDINATE].s[0]
                                                ? nst_loader_max_bad
                                                : NULL,
                                 .move = nst_loader_move,
                                 .moved = nst_loader_moved};
    return 0;
}
