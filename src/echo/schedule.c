/*
 * schedule.c — the fixed-echo delivery order (see schedule.h).
 *
 * The pool is an array of entries; a draw picks entry (hash of seed, epoch,
 * draw number) mod occupancy, and a spent entry is replaced by the last one
 * (so the sequence depends only on the draws, never on timing).
 */
#include <math.h>
#include <stdlib.h>

#include "common/error.h"
#include "common/rng.h"
#include "echo/schedule.h"

int nst_echo_sched_init(nst_echo_sched *s, const nst_sampler *sampler, double factor, uint64_t seed,
                        uint32_t cap, uint32_t store_cap)
{
    s->factor = factor;
    s->seed = seed;
    s->sampler = sampler;
    s->cap = cap ? cap : 1;
    s->n = 0;
    s->store_cap = store_cap;
    s->pool = calloc(s->cap, sizeof *s->pool);
    s->free_ids = calloc(store_cap, sizeof *s->free_ids);
    if (!s->pool || !s->free_ids) {
        nst_echo_sched_destroy(s);
        return nst_error(NOSTALL_E_NOMEM, "echo: out of memory for a pool of %u items", cap);
    }
    nst_echo_sched_reset_ids(s);
    nst_echo_sched_start(s, 0, 0);
    return 0;
}

void nst_echo_sched_destroy(nst_echo_sched *s)
{
    free(s->pool);
    free(s->free_ids);
    s->pool = NULL;
    s->free_ids = NULL;
}

uint32_t nst_echo_sched_uses(const nst_echo_sched *s, uint64_t epoch, uint64_t item)
{
    double whole = floor(s->factor), frac = s->factor - whole;
    uint32_t uses = (uint32_t)whole;
    if (frac > 0) {
        uint64_t h = nst_hash4(s->seed, epoch, item, NST_RNG_ECHO_USES);
        if ((double)(h >> 11) * 0x1.0p-53 < frac) uses++;
    }
    return uses ? uses : 1;
}

uint64_t nst_echo_sched_epoch_len(const nst_echo_sched *s, uint64_t epoch)
{
    uint64_t per = nst_sampler_len(s->sampler, epoch);
    if (s->factor == floor(s->factor)) return per * (uint64_t)s->factor;
    uint64_t total = 0;
    for (uint64_t p = 0; p < per; p++)
        total += nst_echo_sched_uses(s, epoch, nst_sampler_item(s->sampler, epoch, p));
    return total;
}

static int draw(nst_echo_sched *s, uint64_t batch_seq, int produce_ok, nst_echo_use *out)
{
    while (s->n < s->cap && s->fresh_next < nst_sampler_len(s->sampler, s->epoch)) {
        nst_echo_entry *e = &s->pool[s->n++];
        e->pos = s->fresh_next++;
        e->index = nst_sampler_item(s->sampler, s->epoch, e->pos);
        e->uses = nst_echo_sched_uses(s, s->epoch, e->index);
        e->next_copy = 0;
        e->store = NST_ECHO_NO_STORE;
        e->last_dpos = 0;
        e->last_batch = UINT64_MAX;
    }
    if (s->n == 0) return 0;
    uint64_t h = nst_hash4(s->seed, s->epoch, s->dpos, NST_RNG_ECHO_DRAW);
    uint32_t k = (uint32_t)(h % s->n);
    nst_echo_entry *e = &s->pool[k];
    if (produce_ok && e->store == NST_ECHO_NO_STORE) {
        if (s->nfree == 0) return -1; /* nothing changed: retry later */
        e->store = s->free_ids[--s->nfree];
        out->produce = 1;
    } else {
        out->produce = 0;
    }
    out->pos = e->pos;
    out->index = e->index;
    out->copy = e->next_copy;
    out->uses = e->uses;
    out->store = e->store;
    out->dup = e->last_batch == batch_seq;
    out->distance = e->next_copy ? s->dpos - e->last_dpos : 0;
    e->next_copy++;
    e->last_dpos = s->dpos;
    e->last_batch = batch_seq;
    s->dpos++;
    out->last = e->next_copy == e->uses;
    if (out->last) *e = s->pool[--s->n];
    return 1;
}

void nst_echo_sched_start(nst_echo_sched *s, uint64_t epoch, uint64_t dpos)
{
    s->epoch = epoch;
    s->n = 0;
    s->fresh_next = 0;
    s->dpos = 0;
    nst_echo_use u;
    while (s->dpos < dpos && draw(s, UINT64_MAX, 0, &u) == 1) {
    }
}

int nst_echo_sched_next(nst_echo_sched *s, uint64_t batch_seq, nst_echo_use *out)
{
    return draw(s, batch_seq, 1, out);
}

void nst_echo_sched_free_id(nst_echo_sched *s, uint32_t id)
{
    if (id != NST_ECHO_NO_STORE && s->nfree < s->store_cap) s->free_ids[s->nfree++] = id;
}

void nst_echo_sched_reset_ids(nst_echo_sched *s)
{
    s->nfree = s->store_cap;
    for (uint32_t i = 0; i < s->store_cap; i++) s->free_ids[i] = s->store_cap - 1 - i;
    for (uint32_t i = 0; i < s->n; i++) s->pool[i].store = NST_ECHO_NO_STORE;
}
