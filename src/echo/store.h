/*
 * store.h — the echo store of fixed item echoing: the data that the first
 * use of an item produces at the echo point, from which its later uses make
 * their item (echo_point fetch: the fetched bytes, re-decoded and
 * re-augmented; decode: the decoded intermediate, re-transformed with each
 * use's own random draws; augment: the finished item, copied).
 *
 * Entries are numbered by the echo schedule (schedule.c: store ids, one per
 * item from its first draw to the finish of its last use). The producing
 * use publishes READY or FAILED; the other uses of the item wait for that
 * (the producer is always an earlier ticket, so the wait ends; a reset or
 * stop ends it too). An entry is freed (its id back to the schedule) when
 * no ticket of it is pending and its item's last use was issued.
 *
 * LOCKS  The store's own mutex guards entry states and counts, and its
 *   condition variable wakes waiters. use/finish/close_all/reset are called
 *   with the ring's mutex held, which also guards the schedule whose store
 *   ids they free (order: ring mutex, then store mutex; never the reverse).
 *   publish and wait take only the store's mutex. A producer writes an
 *   entry's data without any lock before publishing it; readers read it
 *   only after READY, until freed.
 */
#ifndef NST_ECHO_STORE_H
#define NST_ECHO_STORE_H

#include <stdint.h>

#include "echo/schedule.h"
#include "recipe/recipe.h"

typedef struct nst_echo_store nst_echo_store;

int nst_echo_store_create(nst_echo_store **out, uint32_t cap, nst_echo_sched *sched);
void nst_echo_store_free(nst_echo_store *s);

/* A ticket of entry `id` was issued (produce: it makes the data; last: no
 * later use of the item in this epoch). */
void nst_echo_store_use(nst_echo_store *s, uint32_t id, int produce, int last);
/* The ticket of entry `id` finished (frees the entry if nothing needs it). */
void nst_echo_store_finish(nst_echo_store *s, uint32_t id);
/* An epoch starts: every entry still held is closed (its remaining uses
 * will never be issued). */
void nst_echo_store_close_all(nst_echo_store *s);
/* Forget everything (set_state, with no ticket in flight); wakes waiters. */
void nst_echo_store_reset(nst_echo_store *s);
/* Wake every waiter for good. */
void nst_echo_store_stop(nst_echo_store *s);

/* The entry's data, written by its producer. */
nst_decoded *nst_echo_store_data(nst_echo_store *s, uint32_t id);
/* The producer's outcome: rc 0 (data ready) or < 0 with msg. */
void nst_echo_store_publish(nst_echo_store *s, uint32_t id, int rc, const char *msg);
/* A later use: wait for the producer. 0: READY; the producer's status
 * (msg filled) when it failed; E_STOPPED when stopped or reset meanwhile
 * (the ticket is then discarded). */
int nst_echo_store_wait(nst_echo_store *s, uint32_t id, char *msg, size_t msgn);

#endif
