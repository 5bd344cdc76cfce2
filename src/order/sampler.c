/*
 * sampler.c — the epoch order: the keyed permutation (permutation.c)
 * evaluated one position at a time, the strided sharding of torch's
 * DistributedSampler, a resumed epoch's offset, and a mix's slots (mix.c).
 * Room: order/ (which item comes when).
 *
 * Design: the permutation (Feistel network with cycle-walking) is in
 * permutation.c; here it is applied to the epoch's sequence, so any
 * (epoch, position) is looked up directly in O(1), without storing anything.
 *
 * Threads: everything here is pure (no state, no allocation); any thread may
 * call it. nst_sampler_init() sets the thread's error message on failure.
 */
#include "order/sampler.h"

#include "common/error.h"
#include "order/mix.h"
#include "order/permutation.h"

int nst_sampler_init(nst_sampler *s, uint64_t n, uint64_t seed, uint32_t rank, uint32_t world,
                     int shuffle, int drop_last)
{
    if (!s) return nst_error(NOSTALL_E_INVALID, "sampler: no sampler given");
    if (n == 0) return nst_error(NOSTALL_E_INVALID, "sampler: the dataset has no items");
    if (world == 0)
        return nst_error(NOSTALL_E_INVALID, "sampler: world size is 0 (must be at least 1)");
    if (rank >= world)
        return nst_error(NOSTALL_E_INVALID,
                         "sampler: rank %u out of range for world size %u "
                         "(must be < world)",
                         (unsigned)rank, (unsigned)world);
    if (drop_last && n < world)
        return nst_error(NOSTALL_E_INVALID,
                         "sampler: drop_last with %llu items and world size "
                         "%u leaves no item for some ranks",
                         (unsigned long long)n, (unsigned)world);
    s->n = n;
    s->seed = seed;
    s->rank = rank;
    s->world = world;
    s->shuffle = shuffle != 0;
    s->drop_last = drop_last != 0;
    s->per_rank = n / world + ((!drop_last && n % world) ? 1 : 0);
    s->res_on = 0;
    s->res_epoch = s->res_offset = s->res_len = 0;
    s->res_band = NULL;
    s->res_band_n = 0;
    s->mix = NULL;
    return NOSTALL_OK;
}

uint64_t nst_sampler_len(const nst_sampler *s, uint64_t epoch)
{
    return s->res_on && epoch == s->res_epoch ? s->res_len : s->per_rank;
}

uint64_t nst_sampler_total(const nst_sampler *s, uint32_t world)
{
    uint64_t per = s->n / world + ((!s->drop_last && s->n % world) ? 1 : 0);
    return per * world;
}

void nst_sampler_resume_band(nst_sampler *s, uint64_t epoch, const uint64_t *band, uint64_t band_n,
                             uint64_t offset)
{
    if (offset > s->n) offset = s->n;
    s->res_band = band_n ? band : NULL;
    s->res_band_n = band_n;
    if (offset == 0 && band_n == 0) {
        s->res_on = 0;
        return;
    }
    uint64_t rest = band_n + (s->n - offset);
    s->res_on = 1;
    s->res_epoch = epoch;
    s->res_offset = offset;
    s->res_len = s->drop_last ? rest / s->world : (rest + s->world - 1) / s->world;
}

void nst_sampler_resume(nst_sampler *s, uint64_t epoch, uint64_t offset)
{
    nst_sampler_resume_band(s, epoch, NULL, 0, offset);
}

uint64_t nst_sampler_global(const nst_sampler *s, uint64_t epoch, uint64_t pos)
{
    uint64_t j = (uint64_t)s->rank + pos * (uint64_t)s->world;
    if (s->res_on && epoch == s->res_epoch) { /* the rest of a resumed epoch */
        uint64_t rest = s->res_band_n + (s->n - s->res_offset);
        if (j >= rest) return UINT64_MAX;
        return j < s->res_band_n ? s->res_band[j] : s->res_offset + (j - s->res_band_n);
    }
    return j < s->n ? j : UINT64_MAX;
}

uint64_t nst_sampler_item(const nst_sampler *s, uint64_t epoch, uint64_t pos)
{
    return nst_sampler_item_epoch(s, epoch, pos, NULL);
}

uint64_t nst_sampler_item_epoch(const nst_sampler *s, uint64_t epoch, uint64_t pos,
                                uint64_t *item_epoch)
{
    /* Position in the epoch's (cut or wrapped) sequence. pos < per_rank, so
     * j < T <= n + world - 1: no overflow unless n is near 2^64. Padding
     * positions j >= n read p[j mod n]. */
    uint64_t j = (uint64_t)s->rank + pos * (uint64_t)s->world;
    if (s->res_on && epoch == s->res_epoch) {                   /* the rest of a resumed epoch */
        uint64_t rest = s->res_band_n + (s->n - s->res_offset); /* > 0 whenever pos < res_len */
        j %= rest ? rest : 1;
        j = j < s->res_band_n ? s->res_band[j] : s->res_offset + (j - s->res_band_n);
    }
    j %= s->n;
    uint64_t q = s->shuffle ? nst_permute(s->n, s->seed, epoch, j) : j;
    if (item_epoch) *item_epoch = epoch;
    return s->mix ? nst_mix_item(s->mix, epoch, q, NULL, item_epoch) : q;
}
