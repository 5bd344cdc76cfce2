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
 * That remap assumes the ranks in step, which bad items break (a rank
 * that skips them fills its batches from later items): such a state is
 * refused by another rank or world size, and nostall_loader_set_states
 * takes every old rank's instead. It marks in a bitmap of the epoch's
 * global order the positions each old rank consumed (those before its
 * position, and the span its top-up took after it: engine.h), level by
 * level when the epoch already went through world-size changes (the chain
 * of states a resumed loader keeps and nostall_loader_get_states saves
 * again), and hands the sampler the positions left as a band
 * (nst_sampler_resume_band), owned here (res_band) while the epoch lasts.
 * Every state is untrusted input: checked as one state is, and the set
 * must hold every rank of every level once.
 *
 * A weighted mix (option mix) needs nothing more: its order is a pure
 * function of (seed, epoch, position) too, every source's own epoch counter
 * a product of the mixed epoch (order/mix.h); the fingerprint covers its
 * sources (each one's items), weights (each one's draws per mixed epoch)
 * and the mix options.
 *
 * THREADS  The consumer thread. The fingerprint is computed once, on
 *   first use, under skip_mu. The band and chain change only inside a
 *   reset (no worker between take and done), after which the old band is
 *   freed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "echo/echo.h"
#include "common/error.h"
#include "echo/batch_echo.h"
#include "echo/schedule.h"
#include "loader_impl.h"
#include "dataset/stream.h"

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
            if (id >= NOSTALL_OPT_PREP_SERVERS && id <= NOSTALL_OPT_PREP_INFLIGHT)
                continue; /* where items are prepared: a state resumes on any servers */
            nostall_option_info info;
            if (id == NOSTALL_OPT_AUTOTUNE || id == NOSTALL_OPT_CPU_BUDGET ||
                id == NOSTALL_OPT_MEMORY_BUDGET)
                continue; /* how fast, never what: a state moves between them */
            nostall_option_info_get(id, &info);
            nostall_config_get(&ld->cfg, info.name, val, sizeof val);
            nostall_config_get(def, info.name, dval, sizeof dval);
            if (strcmp(val, dval) == 0) continue;
            nostall_checksum_update(&h, info.name, strlen(info.name) + 1);
            nostall_checksum_update(&h, val, strlen(val) + 1);
        }
        nostall_config_free(def);
    }
    if (ld->echo_mode == NST_ECHO_BATCHES) /* each batch's repeats are drawn by position */
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
    nst_engine_cursor at;
    ld->bq->ops->cursor(ld->bq, &at);
    out->epoch = at.epoch;
    out->position = at.position;
    out->taken = at.taken | (uint64_t)at.owed << 32;
    out->taken_first = at.taken_first;
    out->taken_end = at.taken_end;
    out->bad = at.lost;
    out->version = NOSTALL_STATE_VERSION;
    out->seed = ld->cfg.v[NOSTALL_OPT_SEED].u;
    out->items = ld->recipe->items;
    out->rank = ld->sampler.rank;
    out->world_size = ld->sampler.world;
    pthread_mutex_lock(&ld->skip_mu);
    out->fingerprint = fingerprint(ld);
    pthread_mutex_unlock(&ld->skip_mu);
    if (ld->chain_n && ld->chain_epoch == out->epoch)
        out->level = ld->chain_levels; /* the band is the chain's */
    else if (ld->sampler.res_on && ld->sampler.res_epoch == out->epoch)
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
    const int own = st->world_size == ld->sampler.world && st->rank == ld->sampler.rank;
    if (st->version && own && st->epoch_offset) { /* its own cursor in the same rest */
        if (st->epoch_offset > ld->sampler.n)
            return nst_error(NOSTALL_E_INVALID, "%s: epoch_offset %llu is past the epoch's %llu",
                             fn, (unsigned long long)st->epoch_offset,
                             (unsigned long long)ld->sampler.n);
        *offset = st->epoch_offset;
    } else if (st->version && (st->world_size != ld->sampler.world || st->epoch_offset)) {
        if (ld->echo_mode != NST_ECHO_OFF)
            return nst_error(NOSTALL_E_INVALID,
                             "%s: a state of world size %u cannot be remapped to world size %u "
                             "with echoing (positions count deliveries, repeats included)",
                             fn, st->world_size, ld->sampler.world);
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
    if (ld->echo_mode == NST_ECHO_ITEMS) {
        nst_echo_sched tmp = {.factor = ld->cfg.v[NOSTALL_OPT_ECHO_FACTOR].d,
                              .seed = ld->cfg.v[NOSTALL_OPT_SEED].u,
                              .sampler = &plain};
        len = nst_echo_sched_epoch_len(&tmp, st->epoch);
    } else if (ld->echo_mode == NST_ECHO_BATCHES) { /* deliveries: each batch's uses */
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
    /* past the plan: owing batches of the reserve, or just done with them
     * (the reserve's positions run on past the shard, up to about a wrap) */
    if (*position > len && !owed &&
        !(st->version >= 2 && nst_loader_uses_reserve(ld) &&
          *position <= 2 * len + 2 * (uint64_t)ld->batch_size))
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
    const uint64_t *band; /* an elastic resume's (set_states) */
    uint64_t band_n;
} resume_args;

/* Called by the backend's reset with nothing in flight. */
static void resume_sampler(void *ctx)
{
    resume_args *a = ctx;
    nst_sampler_resume_band(&a->ld->sampler, a->epoch, a->band, a->band_n, a->offset);
    if (a->ld->stream) /* the shards' reader restarts at the new place */
        nst_stream_start(a->ld->stream, a->epoch, a->position, &a->ld->sampler);
    nst_echo_forget_lengths(a->ld->echo);
}

/* After a reset: the sampler uses `band` (owned now, or NULL) and the
 * states the epoch was resumed from are `chain` (owned, or NULL). */
static void keep_resume(struct nostall_loader *ld, uint64_t *band, nostall_state *chain,
                        uint32_t chain_n, uint32_t levels, uint64_t epoch)
{
    free(ld->res_band);
    free(ld->chain);
    ld->res_band = band;
    ld->chain = chain;
    ld->chain_n = chain_n;
    ld->chain_levels = levels;
    ld->chain_epoch = epoch;
}

/* One rank's state names its own position only: under another rank or
 * world size it stands for every rank, which is true while no rank met a
 * bad item (README: "States across world sizes"). */
static int single_ok(const struct nostall_loader *ld, const nostall_state *st, const char *fn)
{
    if (st->version < 2) return 0;
    if (st->level)
        return nst_error(NOSTALL_E_STATE,
                         "%s: this is rank %u's state of an epoch resumed from %u earlier "
                         "job(s)' states (level %u): load it with nostall_loader_set_states "
                         "together with the states saved with it (nostall_loader_get_states)",
                         fn, st->rank, st->level, st->level);
    if ((st->world_size != ld->sampler.world || st->rank != ld->sampler.rank) &&
        (st->bad || st->taken))
        return nst_error(NOSTALL_E_STATE,
                         "%s: rank %u of world size %u met %llu bad item(s) in epoch %llu, so its "
                         "position ran ahead of the other ranks' (batches are filled from later "
                         "items): its state alone cannot resume rank %u of world size %u; load "
                         "the states of every old rank (nostall_loader_set_states; Python: "
                         "nostall.merge_states or state_dict(gather=True))",
                         fn, st->rank, st->world_size, (unsigned long long)st->bad,
                         (unsigned long long)st->epoch, ld->sampler.rank, ld->sampler.world);
    return 0;
}

int nostall_loader_set_state(nostall_loader *ld, const nostall_state *st)
{
    static const char fn[] = "nostall_loader_set_state";
    int rc = 0;
    nst_error_clear();
    if (!ld || !st) return nst_error(NOSTALL_E_INVALID, "%s: NULL argument", fn);
    if ((rc = forked(ld, fn)) < 0) return rc;
    if (st->version && (rc = state_check(ld, st, fn)) < 0) return rc;
    if ((rc = single_ok(ld, st, fn)) < 0) return rc;
    if (ld->epochs_limit && st->epoch >= ld->epochs_limit)
        return nst_error(NOSTALL_E_INVALID, "%s: epoch %llu is past epochs=%llu (epochs 0..%llu)",
                         fn, (unsigned long long)st->epoch, (unsigned long long)ld->epochs_limit,
                         (unsigned long long)ld->epochs_limit - 1);
    uint64_t offset, position, taken;
    if ((rc = state_place(ld, st, &offset, &position, &taken, fn)) < 0) return rc;
    resume_args args = {ld, st->epoch, offset, position, NULL, 0};
    const int same = st->version >= 2 && position == st->position && taken == st->taken;
    nst_engine_cursor at = {.epoch = st->epoch,
                            .position = position,
                            .lost = same ? st->bad : 0,
                            .taken = (uint32_t)taken,
                            .owed = (uint32_t)(taken >> 32),
                            .taken_first = same ? st->taken_first : 0,
                            .taken_end = same ? st->taken_end : 0};
    rc = ld->bq->ops->reset(ld->bq, &at, resume_sampler, &args, fn);
    if (rc == 0) keep_resume(ld, NULL, NULL, 0, 0, 0);
    return rc;
}

/* ------------------------------------------------------------------------
 * Elastic resume from every old rank's state (set_states / get_states).
 * ------------------------------------------------------------------------ */

/* The states of one level: its world size and, per rank, the state. */
typedef struct level {
    uint32_t world;
    const nostall_state **rank;
} level;

/* A state's v2 fields (a version 1 state has none: it took nothing). */
static int v2_fields(const nostall_state *st, uint32_t *lvl, const char *fn)
{
    *lvl = st->version >= 2 ? st->level : 0;
    uint32_t items = (uint32_t)st->taken;
    if (st->version < 2 && items)
        return nst_error(NOSTALL_E_STATE,
                         "%s: rank %u's state (version 1) took %u item(s) from a later batch "
                         "without saying which positions: resume it with set_state at the same "
                         "rank and world size",
                         fn, st->rank, items);
    if (st->version >= 2 &&
        (st->taken_first > st->taken_end || items > st->taken_end - st->taken_first ||
         (items == 0) != (st->taken_end == 0)))
        return nst_error(NOSTALL_E_INVALID,
                         "%s: rank %u's state took %u item(s) at positions [%u, %u) of its next "
                         "batch: not a span that holds them",
                         fn, st->rank, items, st->taken_first, st->taken_end);
    return 0;
}

/* Check the set and sort it into levels (lv[0..*nlevels), each rank once;
 * a rank given twice must be given the same). */
static int sort_levels(struct nostall_loader *ld, const nostall_state *states, size_t count,
                       level *lv, uint32_t *nlevels, const char *fn)
{
    int rc, seen0 = 0;
    uint32_t top = 0, l;
    uint64_t off0 = 0;
    for (size_t i = 0; i < count; i++) {
        const nostall_state *st = &states[i];
        if (!st->version)
            return nst_error(NOSTALL_E_INVALID,
                             "%s: state %zu has version 0 (no rank or world size)", fn, i);
        if ((rc = state_check(ld, st, fn)) < 0 || (rc = v2_fields(st, &l, fn)) < 0) return rc;
        if (st->epoch != states[0].epoch)
            return nst_error(NOSTALL_E_INVALID, "%s: the states name epochs %llu and %llu", fn,
                             (unsigned long long)states[0].epoch, (unsigned long long)st->epoch);
        if (l >= count || l >= NOSTALL_STATE_LEVELS_MAX)
            return nst_error(NOSTALL_E_INVALID,
                             "%s: state %zu has level %u: %zu states hold at most %zu levels, "
                             "and an epoch goes through at most %d world-size changes",
                             fn, i, l, count, count, NOSTALL_STATE_LEVELS_MAX);
        if (l == 0 && !seen0) {
            seen0 = 1;
            off0 = st->epoch_offset;
        }
        if (l > 0 ? st->epoch_offset != 0 : st->epoch_offset != off0)
            return nst_error(NOSTALL_E_INVALID,
                             "%s: state %zu's epoch_offset %llu does not fit its level %u (a "
                             "level-0 state's is its job's, the same for all ranks; later "
                             "levels have none)",
                             fn, i, (unsigned long long)st->epoch_offset, l);
        if (l > top) top = l;
    }
    *nlevels = top + 1;
    for (l = 0; l <= top; l++) {
        size_t have = 0;
        lv[l].world = 0;
        for (size_t i = 0; i < count; i++) {
            uint32_t sl;
            v2_fields(&states[i], &sl, fn);
            if (sl != l) continue;
            if (!lv[l].world) {
                lv[l].world = states[i].world_size;
                if (lv[l].world > count)
                    return nst_error(NOSTALL_E_INVALID,
                                     "%s: level %u is a job of world size %u, but only %zu "
                                     "states are given: every rank's is needed",
                                     fn, l, lv[l].world, count);
                if (!(lv[l].rank = calloc(lv[l].world, sizeof *lv[l].rank)))
                    return nst_error(NOSTALL_E_NOMEM, "%s: out of memory", fn);
            }
            const nostall_state *st = &states[i];
            if (st->world_size != lv[l].world)
                return nst_error(NOSTALL_E_INVALID,
                                 "%s: level %u holds states of world sizes %u and %u", fn, l,
                                 lv[l].world, st->world_size);
            const nostall_state **slot = &lv[l].rank[st->rank]; /* rank < world_size: checked */
            if (*slot &&
                ((*slot)->position != st->position || (*slot)->taken != st->taken ||
                 (*slot)->taken_first != st->taken_first || (*slot)->taken_end != st->taken_end))
                return nst_error(NOSTALL_E_INVALID,
                                 "%s: two different states of rank %u (level %u)", fn, st->rank, l);
            have += !*slot;
            *slot = st;
        }
        if (!lv[l].world)
            return nst_error(NOSTALL_E_INVALID, "%s: no state of level %u (levels 0..%u)", fn, l,
                             top);
        if (have != lv[l].world) {
            uint32_t r = 0;
            while (lv[l].rank[r]) r++;
            return nst_error(NOSTALL_E_INVALID,
                             "%s: the state of rank %u of world size %u "
                             "(level %u) is missing: every old rank's state is needed",
                             fn, r, lv[l].world, l);
        }
    }
    return 0;
}

#define BIT_SET(b, i) ((b)[(i) >> 6] |= (uint64_t)1 << ((i)&63))
#define BIT_GET(b, i) (((b)[(i) >> 6] >> ((i)&63)) & 1)

/* The positions of the global order not consumed yet, as a sampler takes
 * them: every one below *lo consumed, band[0..*band_n) (sorted) the free
 * ones below *hi, all from *hi on free. */
static int band_of(const uint64_t *bits, uint64_t n, uint64_t **band, uint64_t *band_n,
                   uint64_t *hi, const char *fn)
{
    uint64_t lo = 0, k = 0;
    while (lo < n && BIT_GET(bits, lo)) lo++;
    *hi = n;
    while (*hi > lo && !BIT_GET(bits, *hi - 1)) (*hi)--;
    for (uint64_t i = lo; i < *hi; i++) k += !BIT_GET(bits, i);
    *band = NULL;
    *band_n = k;
    if (!k) return 0;
    if (!(*band = malloc(k * sizeof **band)))
        return nst_error(NOSTALL_E_NOMEM, "%s: out of memory (%llu positions)", fn,
                         (unsigned long long)k);
    k = 0;
    for (uint64_t i = lo; i < *hi; i++)
        if (!BIT_GET(bits, i)) (*band)[k++] = i;
    return 0;
}

/* Mark what the ranks of level lv consumed: each rank's positions before
 * its own, and the span its top-up took after it (positions of its shard;
 * padding positions are repeats and mark nothing). */
static int mark_level(struct nostall_loader *ld, uint64_t *bits, const level *lv, uint64_t epoch,
                      const char *fn)
{
    const uint64_t n = ld->sampler.n, seed = ld->cfg.v[NOSTALL_OPT_SEED].u;
    uint64_t *band, band_n, hi;
    int rc = band_of(bits, n, &band, &band_n, &hi, fn);
    for (uint32_t r = 0; rc == 0 && r < lv->world; r++) {
        const nostall_state *st = lv->rank[r];
        nst_sampler t;
        rc = nst_sampler_init(&t, n, seed, r, lv->world, ld->sampler.shuffle, ld->sampler.drop_last);
        if (rc < 0) break;
        nst_sampler_resume_band(&t, epoch, band, band_n, hi);
        uint64_t per = nst_sampler_len(&t, epoch), b = ld->batch_size, p = st->position;
        if (st->taken_end > b) b = st->taken_end;
        if (p > 2 * per + 2 * b) { /* the reserve's positions go past the shard, not this far */
            rc = nst_error(NOSTALL_E_INVALID,
                           "%s: rank %u of world size %u is at position %llu, past its "
                           "shard's %llu items and reserve",
                           fn, r, lv->world, (unsigned long long)p, (unsigned long long)per);
            break;
        }
        for (uint64_t q = 0; q < per && q < p; q++) {
            uint64_t g = nst_sampler_global(&t, epoch, q);
            if (g != UINT64_MAX) BIT_SET(bits, g);
        }
        for (uint64_t q = p + st->taken_first; q < per && q < p + st->taken_end; q++) {
            uint64_t g = nst_sampler_global(&t, epoch, q);
            if (g != UINT64_MAX) BIT_SET(bits, g);
        }
    }
    free(band);
    return rc;
}

/* Levels lv[0..consumed) marked, the band of what is left (*band, owned),
 * *hi: see band_of. */
static int consumed_band(struct nostall_loader *ld, const level *lv, uint32_t consumed,
                         uint64_t epoch, uint64_t off0, uint64_t **band, uint64_t *band_n,
                         uint64_t *hi, const char *fn)
{
    const uint64_t n = ld->sampler.n;
    uint64_t *bits = calloc((n + 63) / 64, sizeof *bits);
    if (!bits)
        return nst_error(NOSTALL_E_NOMEM, "%s: out of memory (a bitmap of %llu items)", fn,
                         (unsigned long long)n);
    for (uint64_t i = 0; i < off0 && i < n; i++) BIT_SET(bits, i);
    int rc = 0;
    for (uint32_t l = 0; rc == 0 && l < consumed; l++) rc = mark_level(ld, bits, &lv[l], epoch, fn);
    if (rc == 0) rc = band_of(bits, n, band, band_n, hi, fn);
    free(bits);
    return rc;
}

/* The states of lv[0..levels), each once, for get_states. */
static nostall_state *chain_of(const level *lv, uint32_t levels, uint32_t *chain_n)
{
    size_t k = 0;
    for (uint32_t l = 0; l < levels; l++) k += lv[l].world;
    nostall_state *c = k ? malloc(k * sizeof *c) : NULL;
    *chain_n = 0;
    if (!c) return NULL;
    for (uint32_t l = 0; l < levels; l++)
        for (uint32_t r = 0; r < lv[l].world; r++) {
            c[*chain_n] = *lv[l].rank[r];
            c[*chain_n].level = l;
            (*chain_n)++;
        }
    return c;
}

int nostall_loader_set_states(nostall_loader *ld, const nostall_state *states, size_t count)
{
    static const char fn[] = "nostall_loader_set_states";
    nst_error_clear();
    if (!ld || !states || count == 0)
        return nst_error(NOSTALL_E_INVALID, "%s: NULL argument or no state", fn);
    int rc = forked(ld, fn);
    if (rc < 0) return rc;
    if (count > NOSTALL_STATES_MAX)
        return nst_error(NOSTALL_E_INVALID, "%s: %zu states, more than NOSTALL_STATES_MAX (%d)", fn,
                         count, NOSTALL_STATES_MAX);
    const uint64_t epoch = states[0].epoch;
    if (ld->epochs_limit && epoch >= ld->epochs_limit)
        return nst_error(NOSTALL_E_INVALID, "%s: epoch %llu is past epochs=%llu", fn,
                         (unsigned long long)epoch, (unsigned long long)ld->epochs_limit);
    level *lv = calloc(count, sizeof *lv);
    if (!lv) return nst_error(NOSTALL_E_NOMEM, "%s: out of memory", fn);
    uint32_t nlevels = 0;
    uint64_t *band = NULL, band_n = 0, hi = 0;
    nostall_state *chain = NULL;
    if ((rc = sort_levels(ld, states, count, lv, &nlevels, fn)) < 0) goto out;
    const level *last = &lv[nlevels - 1];
    const int same = last->world == ld->sampler.world;
    if (same && nlevels == 1) { /* one job of this world size: its own cursor */
        rc = nostall_loader_set_state(ld, last->rank[ld->sampler.rank]);
        goto out;
    }
    if (ld->echo_mode != NST_ECHO_OFF)
        rc = nst_error(NOSTALL_E_INVALID,
                       "%s: an elastic resume with echoing is not supported (positions count "
                       "deliveries, repeats included): resume at world size %u",
                       fn, last->world);
    /* Under the same world size the last level's cursors go on; else they
     * are consumed too and the new ranks start the rest. */
    const uint32_t consumed = same ? nlevels - 1 : nlevels;
    const uint64_t off0 = lv[0].rank[0]->epoch_offset;
    if (rc == 0) rc = consumed_band(ld, lv, consumed, epoch, off0, &band, &band_n, &hi, fn);
    if (rc == 0 && band_n && ld->stream)
        rc = nst_error(NOSTALL_E_INVALID,
                       "%s: shard_mode=stream resumes at one position of the global order, "
                       "and the old ranks left %llu gaps below it: resume at world size %u",
                       fn, (unsigned long long)band_n, last->world);
    uint32_t chain_n = 0;
    if (rc == 0 && !(chain = chain_of(lv, consumed, &chain_n)) && consumed)
        rc = nst_error(NOSTALL_E_NOMEM, "%s: out of memory", fn);
    if (rc < 0) goto out;
    nostall_state at = {.epoch = epoch, .version = NOSTALL_STATE_VERSION};
    if (same) at = *last->rank[ld->sampler.rank];
    uint64_t off = 0, position = 0, taken = 0;
    nostall_state place = at;
    place.epoch_offset = 0;
    place.world_size = ld->sampler.world;
    if (same && (rc = state_place(ld, &place, &off, &position, &taken, fn)) < 0) goto out;
    resume_args args = {ld, epoch, hi, position, band, band_n};
    nst_engine_cursor cur = {.epoch = epoch,
                             .position = position,
                             .lost = same ? at.bad : 0,
                             .taken = (uint32_t)taken,
                             .owed = (uint32_t)(taken >> 32),
                             .taken_first = same ? at.taken_first : 0,
                             .taken_end = same ? at.taken_end : 0};
    rc = ld->bq->ops->reset(ld->bq, &cur, resume_sampler, &args, fn);
    if (rc == 0) {
        keep_resume(ld, band, chain, chain_n, consumed, epoch);
        band = NULL;
        chain = NULL;
    }
out:
    for (size_t l = 0; l < count; l++) free(lv[l].rank);
    free(lv);
    free(band);
    free(chain);
    return rc;
}

int nostall_loader_get_states(const nostall_loader *cld, nostall_state *out, size_t cap,
                              size_t *count)
{
    nostall_loader *ld = (nostall_loader *)cld;
    nst_error_clear();
    if (!ld || !count || (cap && !out))
        return nst_error(NOSTALL_E_INVALID, "nostall_loader_get_states: NULL argument");
    nostall_state own;
    int rc = nostall_loader_get_state(ld, &own);
    if (rc < 0) return rc;
    const size_t k = own.level ? ld->chain_n : 0;
    *count = k + 1;
    if (cap < k + 1)
        return nst_error(NOSTALL_E_INVALID,
                         "nostall_loader_get_states: %zu states to save, room for %zu", k + 1, cap);
    if (k) memcpy(out, ld->chain, k * sizeof *out);
    out[k] = own;
    return 0;
}
