/*
 * dring.c — the device ring of gpu_output=device (gpu.h): a mirror of the
 * host ring's arena in device memory, and per lent batch an entry with its
 * own stream and events, through a memory-ops table (the fake's in test
 * builds, CUDA's in cuda_dring.c). The host ring (batch/ring.c) still
 * decides which slot a batch lies in and when a slot may be refilled; this
 * only holds a slot back from it until the consumer's stream has finished
 * with the batch: release records the stream's progress and the entry's
 * `after` gives the batch back to the host ring when it is reached.
 *
 * Bounded: nslots entries, all made at create (memory, streams, events),
 * and a copier (its stream carries the batch engine's compaction and
 * top-ups of the image field: nst_gpu_dring_move, synchronized by
 * nst_gpu_dring_moved under the host ring's lock) and a workers' copier
 * (nst_gpu_dring_copy: echo_point=augment's store, in extra allocations
 * made at create); lend, release, move and copy allocate nothing. The mutex guards the entries' states
 * and is never held while calling the ops or give_back (which takes the
 * host ring's lock). May touch: its own memory and the ops' objects.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "gpu/gpu.h"

enum { E_FREE = 0, E_LENT = 1, E_WAITING = 2 };

typedef struct entry {
    struct nst_gpu_dring *d;
    int state, made;
    nostall_batch b; /* the host ring's batch, for give_back */
    void *stream, *ready, *done;
} entry;

struct nst_gpu_dring {
    nst_gpu_dring_ops ops;
    uint8_t *host, *dev;
    size_t bytes;
    uint32_t n;
    nst_gpu_give_back_fn give_back;
    void *ctx;
    pthread_mutex_t mu;
    entry *e;
    entry copier;  /* its stream carries nst_gpu_dring_move's copies      */
    entry wcopier; /* ... nst_gpu_dring_copy's (the workers')             */
    void *extra[4];
    uint32_t nextra;
};

int nst_gpu_dring_create(nst_gpu_dring **out, const nst_gpu_dring_ops *ops, void *host,
                         size_t bytes, uint32_t nslots, nst_gpu_give_back_fn give_back, void *ctx)
{
    nst_gpu_dring *d = calloc(1, sizeof *d);
    if (!d || !(d->e = calloc(nslots ? nslots : 1, sizeof *d->e))) {
        free(d);
        return nst_error(NOSTALL_E_NOMEM, "gpu_output=device: cannot allocate the device ring");
    }
    d->ops = *ops;
    d->host = host;
    d->bytes = bytes;
    d->n = nslots;
    d->give_back = give_back;
    d->ctx = ctx;
    pthread_mutex_init(&d->mu, NULL);
    int rc = ops->alloc(ops->ctx, bytes, (void **)&d->dev);
    entry *own[2] = {&d->copier, &d->wcopier};
    for (int i = 0; i < 2 && rc == 0; i++) {
        rc = ops->entry_create(ops->ctx, &own[i]->stream, &own[i]->ready, &own[i]->done);
        own[i]->made = rc == 0;
    }
    for (uint32_t i = 0; rc == 0 && i < nslots; i++) {
        d->e[i].d = d;
        rc = ops->entry_create(ops->ctx, &d->e[i].stream, &d->e[i].ready, &d->e[i].done);
        d->e[i].made = rc == 0;
    }
    if (rc < 0) {
        nst_gpu_dring_free(d);
        return rc;
    }
    *out = d;
    return 0;
}

uint8_t *nst_gpu_dring_dev(const nst_gpu_dring *d, const uint8_t *p)
{
    if (p < d->host || p >= d->host + d->bytes) return NULL;
    return d->dev + (p - d->host);
}

int nst_gpu_dring_lend(nst_gpu_dring *d, const nostall_batch *b, nostall_device_batch *dev)
{
    uint8_t *img = nst_gpu_dring_dev(d, (const uint8_t *)b->images);
    if (!img)
        return nst_error(NOSTALL_E_INVALID, "gpu_output=device: a batch outside the host ring");
    pthread_mutex_lock(&d->mu);
    entry *e = NULL;
    for (uint32_t i = 0; i < d->n && !e; i++)
        if (d->e[i].state == E_FREE) e = &d->e[i];
    if (e) {
        e->state = E_LENT;
        e->b = *b;
    }
    pthread_mutex_unlock(&d->mu);
    if (!e) /* the host ring lends at most nslots: cannot happen */
        return nst_error(NOSTALL_E_STATE, "gpu_output=device: every device ring entry is in use");
    int rc = d->ops.lent(d->ops.ctx, e->stream, e->ready);
    if (rc < 0) {
        pthread_mutex_lock(&d->mu);
        e->state = E_FREE;
        pthread_mutex_unlock(&d->mu);
        return rc;
    }
    *dev = (nostall_device_batch){.struct_size = sizeof *dev,
                                  .device = d->ops.device,
                                  .slot = (uint32_t)(e - d->e),
                                  .images = img,
                                  .ready_event = e->ready,
                                  .stream = e->stream};
    return 0;
}

/* The consumer's stream reached the release: the entry is free and the
 * batch goes back to the host ring (any thread; no lock held). */
static void reached(void *arg)
{
    entry *e = arg;
    nst_gpu_dring *d = e->d;
    pthread_mutex_lock(&d->mu);
    nostall_batch b = e->b;
    e->state = E_FREE;
    pthread_mutex_unlock(&d->mu);
    d->give_back(d->ctx, &b);
}

int nst_gpu_dring_release(nst_gpu_dring *d, const nostall_batch *b, void *stream)
{
    pthread_mutex_lock(&d->mu);
    entry *e = NULL;
    for (uint32_t i = 0; i < d->n && !e; i++)
        if (d->e[i].state == E_LENT && d->e[i].b.sequence == b->sequence &&
            d->e[i].b.images == b->images)
            e = &d->e[i];
    if (e) e->state = E_WAITING;
    pthread_mutex_unlock(&d->mu);
    if (!e)
        return nst_error(NOSTALL_E_INVALID,
                         "nostall_loader_release_device: the batch is not lent (released twice?)");
    int rc = d->ops.after(d->ops.ctx, e->stream, e->done, stream, reached, e);
    if (rc < 0) { /* the stream's progress could not be recorded: still lent */
        pthread_mutex_lock(&d->mu);
        e->state = E_LENT;
        pthread_mutex_unlock(&d->mu);
    }
    return rc;
}

int nst_gpu_dring_move(nst_gpu_dring *d, uint8_t *dst, const uint8_t *src, size_t n)
{
    uint8_t *to = nst_gpu_dring_dev(d, dst);
    const uint8_t *from = nst_gpu_dring_dev(d, src);
    if (!to || !from || n > d->bytes - (size_t)(dst - d->host) ||
        n > d->bytes - (size_t)(src - d->host))
        return nst_error(NOSTALL_E_INVALID, "gpu_output=device: a move outside the device ring");
    return d->ops.copy(d->ops.ctx, d->copier.stream, to, from, n);
}

int nst_gpu_dring_moved(nst_gpu_dring *d) { return d->ops.sync(d->ops.ctx, d->copier.stream); }

int nst_gpu_dring_alloc_extra(nst_gpu_dring *d, size_t bytes, uint8_t **mem)
{
    pthread_mutex_lock(&d->mu);
    int full = d->nextra >= sizeof d->extra / sizeof *d->extra;
    pthread_mutex_unlock(&d->mu);
    if (full) return nst_error(NOSTALL_E_STATE, "gpu_output=device: too many extra allocations");
    void *m = NULL;
    int rc = d->ops.alloc(d->ops.ctx, bytes, &m);
    if (rc < 0) return rc;
    pthread_mutex_lock(&d->mu);
    d->extra[d->nextra++] = m;
    pthread_mutex_unlock(&d->mu);
    *mem = m;
    return 0;
}

int nst_gpu_dring_copy(nst_gpu_dring *d, uint8_t *dst, const uint8_t *src, size_t n)
{
    return d->ops.copy(d->ops.ctx, d->wcopier.stream, dst, src, n);
}

int nst_gpu_dring_copied(nst_gpu_dring *d) { return d->ops.sync(d->ops.ctx, d->wcopier.stream); }

uint32_t nst_gpu_dring_busy(nst_gpu_dring *d)
{
    uint32_t n = 0;
    pthread_mutex_lock(&d->mu);
    for (uint32_t i = 0; i < d->n; i++) n += d->e[i].state != E_FREE;
    pthread_mutex_unlock(&d->mu);
    return n;
}

void nst_gpu_dring_free(nst_gpu_dring *d)
{
    if (!d) return;
    for (uint32_t i = 0; i < d->n; i++)
        if (d->e[i].made) {
            d->ops.drain(d->ops.ctx, d->e[i].stream);
            d->ops.entry_destroy(d->ops.ctx, d->e[i].stream, d->e[i].ready, d->e[i].done);
        }
    entry *own[2] = {&d->copier, &d->wcopier};
    for (int i = 0; i < 2; i++)
        if (own[i]->made) {
            d->ops.drain(d->ops.ctx, own[i]->stream);
            d->ops.entry_destroy(d->ops.ctx, own[i]->stream, own[i]->ready, own[i]->done);
        }
    for (uint32_t i = 0; i < d->nextra; i++) d->ops.free_mem(d->ops.ctx, d->extra[i]);
    if (d->dev) d->ops.free_mem(d->ops.ctx, d->dev);
    pthread_mutex_destroy(&d->mu);
    free(d->e);
    free(d);
}
