/*
 * group.h — coordinated prep: several loader processes on one host share
 * one batch stream through a POSIX shared-memory segment. Each item is
 * prepared once per epoch by some worker thread of some member; every
 * member consumes every batch, in the same order.
 *
 * The group places the one batch engine (batch/engine.h) in the segment and
 * adds membership: join, leave, finding dead members, repairing after a
 * holder of the lock died. It knows nothing about images: the loader says
 * what an item is (coord/backend.c). Design and protocol:
 * docs/coordinated.md; the files: group_impl.h.
 *
 * THREADS
 *   take/done: any thread of the member (the workers). next/release: one
 *   consumer thread. stop/stats: any thread, any time while the handle
 *   exists. join/leave: once each; leave only after every other thread of
 *   this member stopped calling (stop, then join the workers).
 *
 * STATUS
 *   0 success; NOSTALL_TIMEOUT: nothing within timeout_ms (nothing changed);
 *   NOSTALL_EPOCH_END / NOSTALL_DONE (next, take); NOSTALL_E_STOPPED after
 *   nst_group_stop(); NOSTALL_E_OPTION on a mismatch with the group (the
 *   message names the option and both values); other E_* with a message
 *   naming the group.
 */
#ifndef NST_COORD_GROUP_H
#define NST_COORD_GROUP_H

#include <stddef.h>
#include <stdint.h>

#include "batch/engine.h"
#include "common/error.h"
#include "recipe/recipe.h"

#define NST_GROUP_NAME_MAX 64    /* [A-Za-z0-9_.-], not starting with '.'  */
#define NST_GROUP_MAX_MEMBERS 64 /* members alive at once                  */
#define NST_GROUP_FP_MAX 4096    /* fingerprint bytes (names + values)      */
#define NST_GROUP_IO_MAX 24      /* per-batch accounting counters           */
#define NST_GROUP_ITEM_MSG 512   /* stride of the bad items' messages        */
#define NST_GROUP_MAX_SLOTS 1024
/* item_status of an item not finished yet (as NST_ITEM_PENDING). */
#define NST_GROUP_PENDING_STATUS 1

/* One data-affecting option: name and value as text. */
typedef struct nst_group_opt {
    const char *name;
    const char *value;
} nst_group_opt;

typedef struct nst_group_params {
    const char *name;        /* group name (--coordinate NAME)          */
    const nst_group_opt *fp; /* fingerprint: compared in order           */
    uint32_t nfp;
    /* Epoch plan: the batch at (epoch, position) holds positions
     * [position, position + len) of the epoch's order; every batch has
     * batch_size items except, without drop_last, the epoch's last. */
    uint64_t items_per_epoch;
    uint32_t batch_size;
    int drop_last;
    uint64_t epochs; /* 0: unlimited                            */
    /* Slot geometry. */
    uint32_t nslots;              /* ring slots (1 .. NST_GROUP_MAX_SLOTS)    */
    const nst_field_decl *fields; /* the item recipe's fields, or NULL: one
                                     uint8 field of item_bytes plus an int64
                                     label                                   */
    uint32_t nfields;
    size_t item_bytes; /* bytes of one item's first field         */
    uint32_t max_lead; /* 0: nslots; at most nslots               */
    int fail_on_bad;   /* 0: skip (compact bad items away);
                                     1: fail (no batch after the failing
                                     one; next returns its error)            */
    int fill;          /* drop_last with skip: batches short of
                                     bad items are topped up (engine.h)      */
} nst_group_params;

typedef struct nst_group nst_group;

/* One item to prepare, in delivery order. The loader maps (epoch,
 * position) to its dataset item, writes item_bytes bytes to *image, the
 * label and dataset index to *label / *index, optionally adds accounting to
 * io[], then calls nst_group_done with the ticket. */
typedef struct nst_group_ticket {
    uint64_t seq; /* batch sequence number (group-wide)            */
    uint64_t epoch;
    uint64_t position;            /* position of the item in the epoch's order     */
    uint32_t j;                   /* index of the item in its batch                */
    uint32_t slot;                /* ring slot                                     */
    uint32_t tag;                 /* private: identifies this assignment           */
    uint8_t *dst[NST_FIELDS_MAX]; /* each field's place (this process's mapping) */
    uint8_t *image;               /* dst[0]                                        */
    int64_t *label;               /* dst[1]                                        */
    uint64_t *index;
    uint64_t io[NST_GROUP_IO_MAX]; /* zeroed by take; added to the batch    */
} nst_group_ticket;

/* A batch lent to this member (pointers into this process's mapping). */
typedef struct nst_group_batch {
    uint64_t seq;
    uint64_t epoch, position;
    uint32_t slot;
    uint32_t count;                /* items after compaction of bad items           */
    uint32_t len;                  /* items the batch was planned with              */
    uint8_t *data[NST_FIELDS_MAX]; /* each field (count items)             */
    uint8_t *images;               /* data[0]                                       */
    int64_t *labels;               /* data[1] (the tests' plain items)               */
    uint64_t *indices;
    const int32_t *item_status; /* len entries by original index j (before
                                   compaction): 0 or E_*                    */
    const char *item_msgs;      /* len * NST_GROUP_ITEM_MSG: the message of
                                   bad item j at j * NST_GROUP_ITEM_MSG     */
    const uint64_t *io;         /* NST_GROUP_IO_MAX counters summed over items   */
} nst_group_batch;

typedef struct nst_group_stats {
    uint32_t members;     /* live members now                           */
    uint32_t member_id;   /* this member's index in the segment         */
    uint64_t generation;  /* of the segment                             */
    uint64_t first_seq;   /* first batch this member consumes           */
    uint64_t first_epoch; /* its epoch                                  */
    /* this member */
    uint64_t items_produced;   /* items it prepared (done() accepted)        */
    uint64_t batches_produced; /* batches whose last item it finished        */
    uint64_t batches_consumed; /* batches it was lent                        */
    uint64_t wait_ns;          /* consumer time waiting in next              */
    uint64_t take_wait_ns;     /* worker time waiting in take                */
    /* the whole group since the segment was created (live + departed) */
    uint64_t group_items_produced;
    uint64_t group_batches_produced;
    uint64_t group_batches_consumed;
    uint64_t group_wait_ns;
    uint64_t members_joined;
    uint64_t members_dropped; /* found dead and removed                     */
    uint64_t items_requeued;  /* tickets of dead/leaving members redone     */
    uint64_t mutex_repairs;   /* EOWNERDEAD recoveries                      */
    uint64_t produced_seq;    /* batches opened so far                      */
    uint64_t freed_seq;       /* every batch below it is released by all    */
} nst_group_stats;

/* Create or attach /dev/shm/nostall-<uid>-<name>. Joining a live group:
 * the member consumes from the first batch of the first epoch the group has
 * not begun to free (see stats.first_seq); producing starts at once. A
 * segment whose members are all dead is removed and recreated
 * (generation + 1). */
int nst_group_join(nst_group **out, const nst_group_params *p);

/* Workers. timeout_ms 0: do not wait. 0: *t is an item to prepare;
 * NOSTALL_TIMEOUT; NOSTALL_DONE: the
 * group has produced every batch of `epochs` and nothing is left open;
 * E_STOPPED; E_STATE (group broken). Tickets come in delivery order. */
int nst_group_take(nst_group *g, nst_group_ticket *t, uint32_t timeout_ms);
/* The item of t is written (status 0) or bad (status < 0, msg says why).
 * A ticket reassigned meanwhile is ignored. Valid after nst_group_stop. */
void nst_group_done(nst_group *g, const nst_group_ticket *t, int status, const char *msg);

/* Consumer. 0 with *b; NOSTALL_EPOCH_END once after each epoch's last batch;
 * NOSTALL_DONE after `epochs` epochs; NOSTALL_TIMEOUT; E_STOPPED; E_STATE
 * when max_lead batches are lent; under fail_on_bad the failing item's
 * status (sticky). Batches whose items were all bad are skipped. */
int nst_group_next(nst_group *g, nst_group_batch *b, uint32_t timeout_ms);
/* This member is done with batch seq (any order). */
int nst_group_release(nst_group *g, uint64_t seq);
/* Called by next, under the group's lock, for every batch this member
 * reaches, lent or passed (every item skipped): its accounting and bad
 * items (the engine's nst_engine_seen_fn). */
void nst_group_set_seen(nst_group *g, nst_engine_seen_fn fn, void *ctx);

/* Wake every waiter of this member; later take/next return E_STOPPED. */
void nst_group_stop(nst_group *g);
int nst_group_stats_get(nst_group *g, nst_group_stats *s);
/* Clean leave: this member's lent batches count as released, its unfinished
 * tickets go back to the group, the segment is removed if it was the last
 * member. Frees g. NULL: no-op. */
void nst_group_leave(nst_group *g);

/* The segment path of a group name for this user ("/dev/shm/nostall-..."). */
int nst_group_path(const char *name, char *buf, size_t cap);

/* Testing only (defined in tests/coord_hooks.c, linked into the tests):
 * die by SIGKILL while holding the group mutex, in the middle of an update
 * (what = 0: after taking an item, 1: mid-finalize of a batch). */
void nst_group_test_die_locked(nst_group *g, int what);

#endif
