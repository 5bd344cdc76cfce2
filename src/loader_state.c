/*
 * loader_state.c — where delivery stands, and restarting it there:
 * nostall_loader_get_state / nostall_loader_set_state.
 *
 * A state is (epoch, position, taken) plus what it belongs to: the seed,
 * the dataset size, a fingerprint of the item list and of every option
 * that changes the bytes, rank and world size. set_state refuses a state
 * of another seed, dataset or options, and remaps one of another world
 * size: the epoch's order is global, so the items every old rank consumed
 * are skipped and the rest is sharded over the new ranks (the sampler's
 * resumed epoch, nst_sampler_resume, changed while no worker is between
 * taking a ticket and mapping it: the backend's reset calls back).
 *
 * A weighted mix (option mix) needs nothing more: its order is a pure
 * function of (seed, epoch, position) too, every source's own epoch counter
 * a product of the mixed epoch (source/mix.h); the fingerprint covers its
 * sources (each one's items), weights (each one's draws per mixed epoch)
 * and the mix options.
 *
 * THREADS  The consumer thread. The fingerprint is computed once, on
 *   first use, under skip_mu.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "batch/ring.h"
#include "common/error.h"
#include "echo/batch_echo.h"
#include "loader_impl.h"
#include "source/stream.h"

/* Options that change the bytes delivered for a given (seed, epoch,
 * position), besides the seed itself (checked on its own). world_size and
 * rank are not here: a state is remapped to another world size. */
static const char *const state_options[] =
    {"shuffle",        "drop_last", "mode",       "crop",        "resize",
     "scale_min",      "scale_max", "ratio_min",  "ratio_max",   "flip_prob",
     "output",         "mean",      "std",        "on_bad_item", "max_pixels",
     "max_file_bytes", "echo",      "echo_point", "echo_factor", "echo_buffer"};

/* The fingerprint of the item list (each path and label) and of the options
 * above, computed once, on first use (skip_mu held). Never 0. */
static uint64_t fingerprint(struct nostall_loader *ld)
{
    if (ld->fingerprint) return ld->fingerprint;
    uint64_t h = ld->recipe->fingerprint;
    char val[NOSTALL_PATH_MAX];
    for (size_t i = 0; i < sizeof state_options / sizeof *state_options; i++) {
        nostall_config_get(&ld->cfg, state_options[i], val, sizeof val);
        nostall_checksum_update(&h, state_options[i], strlen(state_options[i]) + 1);
        nostall_checksum_update(&h, val, strlen(val) + 1);
    }
    /* Options added with the item recipes (task and later) count where
     * they differ from their defaults, so a state saved before them still
     * loads into the same loader. */
    nostall_config *def = NULL;
    if (nostall_config_create(&def) == 0) {
        char dval[NOSTALL_PATH_MAX];
        for (int id = NOSTALL_OPT_TASK; id < NOSTALL_OPT_COUNT_; id++) {
            nostall_option_info info;
            nostall_option_info_get(id, &info);
            nostall_config_get(&ld->cfg, info.name, val, sizeof val);
            nostall_config_get(def, info.name, dval, sizeof dval);
            if (strcmp(val, dval) == 0) continue;
            nostall_checksum_update(&h, info.name, strlen(info.name) + 1);
            nostall_checksum_update(&h, val, strlen(val) + 1);
        }
        nostall_config_free(def);
    }
    if (ld->echo == NST_ECHO_BATCHES) /* each batch's repeats are drawn by position */
        nostall_checksum_update(&h, &ld->batch_size, sizeof ld->batch_size);
    ld->fingerprint = h ? h : 1;
    return ld->fingerprint;
}

static int forked(const struct nostall_loader *ld, const char *fn)
{
    if (getpid() != ld->pid)
        return nst_error(NOSTALL_E_FORK, "%s: loader used in a child process after fork()", fn);
    return 0;
}

int nostall_loader_get_state(const nostall_loader *cld, nostall_state *out)
{
    nostall_loader *ld = (nostall_loader *)cld;
    nst_error_clear();
    if (!ld || !out) return nst_error(NOSTALL_E_INVALID, "nostall_loader_get_state: NULL argument");
    int rc = forked(ld, "nostall_loader_get_state");
    if (rc < 0) return rc;
    memset(out, 0, sizeof *out);
    ld->bq->ops->cursor(ld->bq, &out->epoch, &out->position, &out->taken);
    out->version = NOSTALL_STATE_VERSION;
    out->seed = ld->cfg.v[NOSTALL_OPT_SEED].u;
    out->items = ld->recipe->items;
    out->rank = ld->sampler.rank;
    out->world_size = ld->sampler.world;
    pthread_mutex_lock(&ld->skip_mu);
    out->fingerprint = fingerprint(ld);
    pthread_mutex_unlock(&ld->skip_mu);
    if (ld->sampler.res_on && ld->sampler.res_epoch == out->epoch)
        out->epoch_offset = ld->sampler.res_offset;
    return 0;
}

/* What a state with version != 0 belongs to must be this loader's. */
static int state_check(struct nostall_loader *ld, const nostall_state *st, const char *fn)
{
    uint64_t seed = ld->cfg.v[NOSTALL_OPT_SEED].u, n = ld->recipe->items, fp;
    if (st->version > NOSTALL_STATE_VERSION)
        return nst_error(NOSTALL_E_STATE, "%s: state version %u is newer than this library's (%u)",
                         fn, st->version, NOSTALL_STATE_VERSION);
    if (st->seed != seed)
        return nst_error(NOSTALL_E_STATE,
                         "%s: the state was saved with seed %llu, this loader has seed %llu", fn,
                         (unsigned long long)st->seed, (unsigned long long)seed);
    if (st->items != n)
        return nst_error(NOSTALL_E_STATE,
                         "%s: the state was saved for a dataset of %llu items, %s has %llu", fn,
                         (unsigned long long)st->items, ld->source, (unsigned long long)n);
    pthread_mutex_lock(&ld->skip_mu);
    fp = fingerprint(ld);
    pthread_mutex_unlock(&ld->skip_mu);
    if (st->fingerprint != fp)
        return nst_error(NOSTALL_E_STATE,
                         "%s: the state was saved for another dataset or other options: the item "
                         "list of %s (paths, labels), a mix's sources or weights, or an option "
                         "that changes the bytes (%s, ...) differs",
                         fn, ld->source, "mode, crop, output, mean, std, echo, mix_labels");
    if (st->world_size == 0 || st->rank >= st->world_size)
        return nst_error(NOSTALL_E_STATE, "%s: the state says rank %u of world size %u", fn,
                         st->rank, st->world_size);
    return 0;
}

/* Where a state puts the cursor: (offset, position, taken) of its epoch.
 * Another world size (or an already remapped epoch): skip what every old
 * rank consumed, shard the rest. */
static int state_place(struct nostall_loader *ld, const nostall_state *st, uint64_t *offset,
                       uint64_t *position, uint64_t *taken, const char *fn)
{
    *offset = 0;
    *position = st->position;
    *taken = st->taken;
    if (st->version && (st->world_size != ld->sampler.world || st->epoch_offset)) {
        uint64_t total = nst_sampler_total(&ld->sampler, st->world_size);
        if (st->position > (UINT64_MAX - st->epoch_offset) / st->world_size ||
            st->epoch_offset + st->position * st->world_size > total)
            return nst_error(NOSTALL_E_INVALID,
                             "%s: position %llu (+%llu) of world size %u is past the epoch's "
                             "%llu items",
                             fn, (unsigned long long)st->position,
                             (unsigned long long)st->epoch_offset, st->world_size,
                             (unsigned long long)total);
        *offset = st->epoch_offset + st->position * st->world_size;
        *position = *taken = 0;
        return 0;
    }
    /* the epoch's length as it will be (no earlier remap) */
    nst_sampler plain = ld->sampler;
    plain.res_on = 0;
    uint64_t len = plain.per_rank;
    if (ld->echo == NST_ECHO_ITEMS) {
        nst_echo_sched tmp = {.factor = ld->esched.factor,
                              .seed = ld->esched.seed,
                              .sampler = &plain};
        len = nst_echo_sched_epoch_len(&tmp, st->epoch);
    } else if (ld->echo == NST_ECHO_BATCHES) { /* deliveries: each batch's uses */
        nst_batch_echo eb = {.factor = ld->cfg.v[NOSTALL_OPT_ECHO_FACTOR].d,
                             .seed = ld->cfg.v[NOSTALL_OPT_SEED].u};
        uint64_t n = len;
        len = 0;
        for (uint64_t pos = 0; pos < n; pos += ld->batch_size) {
            uint64_t b = n - pos < ld->batch_size ? n - pos : ld->batch_size;
            if (b < ld->batch_size && ld->drop_last) break;
            len += b * nst_batch_echo_uses(&eb, st->epoch, pos);
        }
    }
    /* taken: items of the next batch delivered, and batches owed << 32 (a
     * top-up's; batch/engine.h): those are lent from the epoch's reserve,
     * at positions past the plan */
    uint64_t items = *taken & 0xffffffffu, owed = *taken >> 32;
    if (*position > len && !owed)
        return nst_error(NOSTALL_E_INVALID, "%s: position %llu is past the epoch's %llu items", fn,
                         (unsigned long long)*position, (unsigned long long)len);
    int fill = ld->on_bad == NOSTALL_BAD_SKIP;
    if (*taken && (!fill || items >= ld->batch_size || owed > len / ld->batch_size + 1))
        return nst_error(NOSTALL_E_INVALID,
                         "%s: taken=%llu needs on_bad_item=skip, and its items (low 32 bits) "
                         "must be < batch_size and its batches owed (high 32 bits) within "
                         "the epoch",
                         fn, (unsigned long long)*taken);
    return 0;
}

typedef struct resume_args {
    struct nostall_loader *ld;
    uint64_t epoch, offset, position;
} resume_args;

/* Called by the backend's reset with nothing in flight. */
static void resume_sampler(void *ctx)
{
    resume_args *a = ctx;
    nst_sampler_resume(&a->ld->sampler, a->epoch, a->offset);
    if (a->ld->stream) /* the shards' reader restarts at the new place */
        nst_stream_start(a->ld->stream, a->epoch, a->position, &a->ld->sampler);
    pthread_mutex_lock(&a->ld->plan_mu);
    memset(a->ld->elen_val, 0, sizeof a->ld->elen_val);
    pthread_mutex_unlock(&a->ld->plan_mu);
}

int nostall_loader_set_state(nostall_loader *ld, const nostall_state *st)
{
    static const char fn[] = "nostall_loader_set_state";
    int rc = 0;
    nst_error_clear();
    if (!ld || !st) return nst_error(NOSTALL_E_INVALID, "%s: NULL argument", fn);
    if ((rc = forked(ld, fn)) < 0) return rc;
    if (st->version && (rc = state_check(ld, st, fn)) < 0) return rc;
    if (ld->epochs_limit && st->epoch >= ld->epochs_limit)
        return nst_error(NOSTALL_E_INVALID, "%s: epoch %llu is past epochs=%llu (epochs 0..%llu)",
                         fn, (unsigned long long)st->epoch, (unsigned long long)ld->epochs_limit,
                         (unsigned long long)ld->epochs_limit - 1);
    uint64_t offset, position, taken;
    if ((rc = state_place(ld, st, &offset, &position, &taken, fn)) < 0) return rc;
    resume_args args = {ld, st->epoch, offset, position};
    return ld->bq->ops->reset(ld->bq, st->epoch, position, taken, resume_sampler, &args, fn);
}
