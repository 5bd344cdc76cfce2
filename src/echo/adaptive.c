/*
 * adaptive.c — adaptive echoing's pool and its assembler thread (see
 * adaptive.h for the design, the lock order and the assembler's
 * scheduling policy).
 */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/rng.h"
#include "echo/adaptive.h"

enum { AP_FREE = 0, AP_WRITING, AP_READY };
enum { EB_FREE = 0, EB_ASSEMBLING, EB_READY, EB_LENT };

typedef struct entry {
    int state;
    uint32_t readers, uses;
    uint64_t index;
} entry;

typedef struct eslot {
    int state;
    uint8_t *field[NST_FIELDS_MAX]; /* batch_size items each */
    uint64_t *indices;
    nostall_field fields[NST_FIELDS_MAX];
} eslot;

struct nst_adaptive {
    nst_adaptive_params p;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* assembler: a slot or entries became available, or stop */
    pthread_t thread;
    int started, stopped;
    entry *e;
    uint8_t *pool_data[NST_FIELDS_MAX]; /* pool * item bytes, per field */
    uint32_t next, *pick;
    uint64_t draws;
    uint32_t urgency; /* nst_adaptive_urgency's state                      */
    int policy_batch; /* the assembler's: 1 SCHED_BATCH, 0 normal (its own) */
    eslot slot[NST_ADAPTIVE_SLOTS];
};

/* Pick batch_size entries at random among the eligible and mark them read
 * (mu held). 0 if too few are eligible. */
static int pick(nst_adaptive *a)
{
    uint32_t n = 0, want = a->p.batch_size;
    for (uint32_t i = 0; i < a->p.pool; i++)
        if (a->e[i].state == AP_READY && a->e[i].uses < a->p.echo_max) a->pick[n++] = i;
    if (n < want) return 0;
    nst_rng rng;
    nst_rng_seed(&rng, nst_hash4(a->p.seed, a->draws++, 0, NST_RNG_ECHO_DRAW));
    for (uint32_t k = 0; k < want; k++) { /* partial Fisher-Yates */
        uint32_t r = k + (uint32_t)nst_rng_below(&rng, n - k), tmp = a->pick[k];
        a->pick[k] = a->pick[r];
        a->pick[r] = tmp;
        a->e[a->pick[k]].readers++;
        a->e[a->pick[k]].uses++;
    }
    return 1;
}

/* The assembler's scheduling (adaptive.h, SCHEDULING): SCHED_BATCH while
 * it works ahead, the normal policy while the consumer is short of echo
 * batches. Best effort: a system that refuses leaves the thread as it was.
 * Only the assembler thread calls it, on itself. */
static void set_policy(nst_adaptive *a, int batch)
{
    if (batch == a->policy_batch) return;
    a->policy_batch = batch;
#ifdef SCHED_BATCH
    struct sched_param sp = {0};
    (void)pthread_setschedparam(pthread_self(), batch ? SCHED_BATCH : SCHED_OTHER, &sp);
#endif
}

uint32_t nst_adaptive_urgency(uint32_t urgency, int event)
{
    if (event == NST_ADAPTIVE_MISSED) return NST_ADAPTIVE_URGENT;
    return urgency > 0 ? urgency - 1 : 0; /* NST_ADAPTIVE_ASSEMBLED */
}

static void *assembler(void *arg)
{
    nst_adaptive *a = arg;
    const nst_recipe *r = a->p.recipe;
#ifdef __linux__
    pthread_setname_np(pthread_self(), NST_ADAPTIVE_THREAD);
#endif
    a->policy_batch = -1;
    set_policy(a, 1);
    pthread_mutex_lock(&a->mu);
    for (;;) {
        eslot *s = NULL;
        while (!a->stopped) {
            for (int i = 0; i < NST_ADAPTIVE_SLOTS && !s; i++)
                if (a->slot[i].state == EB_FREE) s = &a->slot[i];
            if (s && pick(a)) break;
            s = NULL;
            pthread_cond_wait(&a->cv, &a->mu);
        }
        if (a->stopped) break;
        s->state = EB_ASSEMBLING;
        pthread_mutex_unlock(&a->mu);
        for (uint32_t k = 0; k < a->p.batch_size; k++) {
            uint32_t src = a->pick[k];
            for (uint32_t f = 0; f < r->nfields; f++) {
                size_t ib = r->fields[f].item_bytes;
                memcpy(s->field[f] + (size_t)k * ib, a->pool_data[f] + (size_t)src * ib, ib);
            }
            s->indices[k] = a->e[src].index;
        }
        pthread_mutex_lock(&a->mu);
        for (uint32_t k = 0; k < a->p.batch_size; k++) a->e[a->pick[k]].readers--;
        s->state = EB_READY;
        a->urgency = nst_adaptive_urgency(a->urgency, NST_ADAPTIVE_ASSEMBLED);
        const int ahead = a->urgency == 0;
        pthread_mutex_unlock(&a->mu);
        set_policy(a, ahead);
        a->p.wake(a->p.wake_ctx);
        pthread_mutex_lock(&a->mu);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

int nst_adaptive_create(nst_adaptive **out, const nst_adaptive_params *p)
{
    const nst_recipe *r = p->recipe;
    nst_adaptive *a = calloc(1, sizeof *a);
    *out = NULL;
    if (!a) return nst_error(NOSTALL_E_NOMEM, "adaptive echo: out of memory");
    a->p = *p;
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    a->e = calloc(p->pool, sizeof *a->e);
    a->pick = calloc(p->pool, sizeof *a->pick);
    int ok = a->e && a->pick;
    for (uint32_t f = 0; f < r->nfields && ok; f++) {
        ok = (a->pool_data[f] = malloc((size_t)p->pool * r->fields[f].item_bytes)) != NULL;
        for (int i = 0; i < NST_ADAPTIVE_SLOTS && ok; i++)
            ok = (a->slot[i].field[f] = malloc((size_t)p->batch_size * r->fields[f].item_bytes)) !=
                 NULL;
    }
    for (int i = 0; i < NST_ADAPTIVE_SLOTS && ok; i++)
        ok = (a->slot[i].indices = calloc(p->batch_size, sizeof(uint64_t))) != NULL;
    if (!ok) {
        nst_adaptive_free(a);
        return nst_error(NOSTALL_E_NOMEM, "adaptive echo: out of memory for a pool of %u items",
                         p->pool);
    }
    if (pthread_create(&a->thread, NULL, assembler, a) != 0) {
        nst_adaptive_free(a);
        return nst_error(NOSTALL_E_THREAD, "adaptive echo: cannot start the assembler thread");
    }
    a->started = 1;
    *out = a;
    return 0;
}

void nst_adaptive_stop(nst_adaptive *a)
{
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    a->stopped = 1;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

void nst_adaptive_free(nst_adaptive *a)
{
    if (!a) return;
    nst_adaptive_stop(a);
    if (a->started) pthread_join(a->thread, NULL);
    for (uint32_t f = 0; f < NST_FIELDS_MAX; f++) {
        free(a->pool_data[f]);
        for (int i = 0; i < NST_ADAPTIVE_SLOTS; i++) free(a->slot[i].field[f]);
    }
    for (int i = 0; i < NST_ADAPTIVE_SLOTS; i++) free(a->slot[i].indices);
    free(a->e);
    free(a->pick);
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

uint32_t nst_adaptive_reserve(nst_adaptive *a)
{
    uint32_t got = UINT32_MAX;
    pthread_mutex_lock(&a->mu);
    entry *e = &a->e[a->next];
    if (e->readers == 0 && e->state != AP_WRITING) {
        e->state = AP_WRITING;
        got = a->next;
    }
    a->next = (a->next + 1) % a->p.pool;
    pthread_mutex_unlock(&a->mu);
    return got;
}

void nst_adaptive_put(nst_adaptive *a, uint32_t id, uint8_t *const *src, uint64_t index, int ok)
{
    const nst_recipe *r = a->p.recipe;
    if (ok)
        for (uint32_t f = 0; f < r->nfields; f++) {
            size_t ib = r->fields[f].item_bytes;
            memcpy(a->pool_data[f] + (size_t)id * ib, src[f], ib);
        }
    pthread_mutex_lock(&a->mu);
    a->e[id].state = ok ? AP_READY : AP_FREE;
    a->e[id].uses = 1;
    a->e[id].index = index;
    if (ok) pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

void nst_adaptive_set_max(nst_adaptive *a, uint32_t echo_max)
{
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    a->p.echo_max = echo_max < 1 ? 1 : echo_max;
    pthread_cond_signal(&a->cv); /* more entries may be eligible */
    pthread_mutex_unlock(&a->mu);
}

int nst_adaptive_lend(nst_adaptive *a, nostall_batch *out, uint64_t epoch, uint64_t position)
{
    const nst_recipe *r = a->p.recipe;
    int got = 0;
    pthread_mutex_lock(&a->mu);
    for (int i = 0; i < NST_ADAPTIVE_SLOTS && !got; i++) {
        eslot *s = &a->slot[i];
        if (s->state != EB_READY) continue;
        s->state = EB_LENT;
        nst_recipe_describe(out, r, s->fields, s->field, s->indices, a->p.batch_size, epoch,
                            position, NST_ADAPTIVE_SEQ | (uint64_t)i);
        got = 1;
    }
    if (!got) a->urgency = nst_adaptive_urgency(a->urgency, NST_ADAPTIVE_MISSED);
    pthread_cond_signal(&a->cv); /* a slot is taken (or none ready): assemble */
    pthread_mutex_unlock(&a->mu);
    return got;
}

int nst_adaptive_release(nst_adaptive *a, const nostall_batch *b)
{
    if (!a || !(b->sequence & NST_ADAPTIVE_SEQ)) return 0;
    uint64_t i = b->sequence & ~NST_ADAPTIVE_SEQ;
    int rc = 1;
    pthread_mutex_lock(&a->mu);
    if (i >= NST_ADAPTIVE_SLOTS || a->slot[i].state != EB_LENT ||
        b->images != a->slot[i].field[a->p.recipe->image_field]) {
        rc = nst_error(NOSTALL_E_INVALID, "nostall_loader_release: not a lent echo batch");
    } else {
        a->slot[i].state = EB_FREE;
        pthread_cond_signal(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
    return rc;
}
