/*
 * batch_echo.h — batch echoing ("Faster Neural Network Training with Data
 * Echoing", Choi et al., 2019: echoing after batching): each fresh batch is
 * used floor(e) times, plus once more with probability e - floor(e) drawn
 * from (seed, epoch, position), and the repeats go through a shuffle buffer
 * of `cap` batches: fresh batches enter it in order; each delivery draws a
 * random entry from (seed, epoch, draw number), uses it once, and removes
 * it when its uses are spent. The buffer is refilled to capacity (while the
 * epoch has fresh batches) before every draw, so the order is a pure
 * function of the seed and the epoch's batch plan: the same for any thread
 * count, and replayable without data (nst_batch_echo_replay) to resume
 * mid-epoch.
 *
 * Pure bookkeeping of metadata: the ring (batch/ring.c) holds the slots;
 * echo.c's lend, release and reset hooks call these under its mutex.
 */
#ifndef NST_ECHO_BATCH_ECHO_H
#define NST_ECHO_BATCH_ECHO_H

#include <stdint.h>

typedef struct nst_batch_echo_entry {
    uint64_t fresh;      /* the batch's number among the epoch's fresh ones */
    uint64_t position;   /* its position in the epoch (fresh items)         */
    uint32_t count;      /* items it delivers                              */
    uint32_t uses, left; /* uses in all, and still to come                 */
    uint32_t slot;       /* the ring slot holding it (the ring's)           */
    uint64_t seq;
    uint64_t last_at; /* items delivered before its previous use         */
    uint64_t gap;     /* draw: items delivered since its previous use    */
} nst_batch_echo_entry;

typedef struct nst_batch_echo {
    double factor;
    uint64_t seed;
    uint32_t cap, n;
    nst_batch_echo_entry *pool;
    uint64_t epoch, draws, fresh_in; /* fresh batches that entered this epoch */
    uint64_t delivered;              /* items delivered this epoch, repeats too */
    int fresh_done;                  /* the epoch's fresh batches are all in   */
} nst_batch_echo;

int nst_batch_echo_init(nst_batch_echo *b, double factor, uint64_t seed, uint32_t cap);
void nst_batch_echo_destroy(nst_batch_echo *b);
/* Uses of the batch at `position` of `epoch` (>= 1). */
uint32_t nst_batch_echo_uses(const nst_batch_echo *b, uint64_t epoch, uint64_t position);
void nst_batch_echo_start(nst_batch_echo *b, uint64_t epoch);
/* A fresh batch must enter the buffer before the next draw. */
int nst_batch_echo_want(const nst_batch_echo *b);
/* The next fresh batch enters (its uses are drawn here). */
void nst_batch_echo_add(nst_batch_echo *b, uint64_t position, uint32_t count, uint32_t slot,
                        uint64_t seq);
/* The next delivery: 1 with *out (out->left == 0: its last use, the entry
 * left the buffer); 0 when the buffer is empty. */
int nst_batch_echo_draw(nst_batch_echo *b, nst_batch_echo_entry *out);
/* Replay `epoch` up to `position` delivered items without data, given each
 * fresh batch's planned length (plan(ctx, position) -> items, 0 at the
 * epoch's end). Leaves the buffer as it was then (slots unset), with
 * fresh_done clear: the caller learns the epoch's end from its source. */
void nst_batch_echo_replay(nst_batch_echo *b, uint64_t epoch, uint64_t position,
                           uint32_t (*plan)(void *ctx, uint64_t position), void *ctx);

#endif
