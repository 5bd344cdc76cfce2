/*
 * store.c — the echo store of fixed item echoing (see store.h for the
 * lifecycle and the lock order).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/error.h"
#include "echo/store.h"

enum { ES_EMPTY = 0, ES_PRODUCING, ES_READY, ES_FAILED };

typedef struct entry {
    int state, status;
    uint32_t pending; /* tickets issued for this entry, not yet finished */
    int closed;       /* the item's last use of the epoch was issued     */
    nst_decoded data;
    char msg[NST_ERROR_MAX - 128];
} entry;

struct nst_echo_store {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint32_t cap;
    uint64_t gen; /* bumped by reset: waiters of before give up */
    int stopped;
    nst_echo_sched *sched;
    entry *e;
};

int nst_echo_store_create(nst_echo_store **out, uint32_t cap, nst_echo_sched *sched)
{
    nst_echo_store *s = calloc(1, sizeof *s);
    *out = NULL;
    if (!s || !(s->e = calloc(cap ? cap : 1, sizeof *s->e))) {
        free(s);
        return nst_error(NOSTALL_E_NOMEM, "echo: out of memory for a store of %u entries", cap);
    }
    s->cap = cap;
    s->sched = sched;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    *out = s;
    return 0;
}

void nst_echo_store_free(nst_echo_store *s)
{
    if (!s) return;
    for (uint32_t i = 0; i < s->cap; i++) nst_buf_free(&s->e[i].data.buf);
    free(s->e);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* Free an entry once nothing uses it any more (s->mu held). */
static void maybe_free(nst_echo_store *s, uint32_t id)
{
    entry *e = &s->e[id];
    if (e->pending || !e->closed) return;
    e->state = ES_EMPTY;
    e->closed = 0;
    nst_echo_sched_free_id(s->sched, id);
}

void nst_echo_store_use(nst_echo_store *s, uint32_t id, int produce, int last)
{
    pthread_mutex_lock(&s->mu);
    entry *e = &s->e[id];
    e->pending++;
    if (produce) {
        e->state = ES_PRODUCING;
        e->closed = 0;
    }
    if (last) e->closed = 1;
    pthread_mutex_unlock(&s->mu);
}

void nst_echo_store_finish(nst_echo_store *s, uint32_t id)
{
    pthread_mutex_lock(&s->mu);
    s->e[id].pending--;
    maybe_free(s, id);
    pthread_mutex_unlock(&s->mu);
}

void nst_echo_store_close_all(nst_echo_store *s)
{
    nst_echo_sched *sc = s->sched;
    pthread_mutex_lock(&s->mu);
    for (uint32_t i = 0; i < sc->n; i++) {
        uint32_t id = sc->pool[i].store;
        if (id == NST_ECHO_NO_STORE) continue;
        s->e[id].closed = 1;
        maybe_free(s, id);
    }
    pthread_mutex_unlock(&s->mu);
}

void nst_echo_store_reset(nst_echo_store *s)
{
    pthread_mutex_lock(&s->mu);
    for (uint32_t i = 0; i < s->cap; i++) {
        s->e[i].state = ES_EMPTY;
        s->e[i].pending = 0;
        s->e[i].closed = 0;
    }
    s->gen++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void nst_echo_store_stop(nst_echo_store *s)
{
    pthread_mutex_lock(&s->mu);
    s->stopped = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

nst_decoded *nst_echo_store_data(nst_echo_store *s, uint32_t id) { return &s->e[id].data; }

void nst_echo_store_publish(nst_echo_store *s, uint32_t id, int rc, const char *msg)
{
    pthread_mutex_lock(&s->mu);
    entry *e = &s->e[id];
    e->state = rc < 0 ? ES_FAILED : ES_READY;
    e->status = rc;
    if (rc < 0) snprintf(e->msg, sizeof e->msg, "%s", msg ? msg : "");
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

int nst_echo_store_wait(nst_echo_store *s, uint32_t id, char *msg, size_t msgn)
{
    pthread_mutex_lock(&s->mu);
    entry *e = &s->e[id];
    const uint64_t gen = s->gen;
    while (e->state == ES_PRODUCING && !s->stopped && gen == s->gen)
        pthread_cond_wait(&s->cv, &s->mu);
    int state = e->state, status = e->status, rc = 0;
    if (state == ES_FAILED) {
        snprintf(msg, msgn, "%s", e->msg);
        rc = status;
    } else if (state != ES_READY || gen != s->gen) { /* stopped or reset */
        snprintf(msg, msgn, "loader stopped");
        rc = NOSTALL_E_STOPPED;
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}
