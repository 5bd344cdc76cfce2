/*
 * engine.h — the batch engine: the one slot lifecycle of nostall, used by
 * the local ring (batch/ring.c) and by the coordinated group (coord/), which
 * only place it (process memory or a shared-memory segment) and manage
 * membership.
 *
 * LIFECYCLE of a slot
 *   FREE -> FILLING (open: the producer cursor's next batch, in any free
 *   slot) -> its items are taken by workers, one ticket each, and done ->
 *   READY (finalize: under the skip policy bad items are compacted away) ->
 *   lent to each member that consumes it, in sequence order -> released by
 *   each, in any order -> FREE once no member needs it (`users`).
 *   Members are the consumers: the local ring has one, a coordinated group
 *   up to NST_ENGINE_MEMBERS processes; every member gets every batch from its
 *   first_seq on, so a slot bounds how far the fastest is ahead.
 *
 * PLACEMENT  One block: this header, the slot controls, then per slot its
 *   data (each field's items, dataset indices, item status, item control,
 *   item messages), 64-byte aligned. Offsets only, no pointers: a process
 *   maps it anywhere. nst_engine_size() plans it, nst_engine_init() lays it out.
 *
 * LOCKING  The engine takes no lock and never waits: the caller holds its
 *   lock (a mutex, or the group's robust process-shared mutex) around every
 *   call, and waits where a call says "not now" (NST_ENGINE_WAIT). Item bytes
 *   are written without the lock by the ticket's holder and read by members
 *   only after the slot is READY. Multi-step updates write a journal first,
 *   so that if a holder dies mid-update the next one repairs it
 *   (nst_engine_repair; the group's EOWNERDEAD path).
 *
 * DETERMINISM  The producer cursor walks (epoch, position) through the plan
 *   (nst_engine_plan: each batch's planned length), item by item in delivery
 *   order; what an item holds is a function of (epoch, position) only.
 *   Compaction keeps order; the drop_last top-up (below) is a function of
 *   which items are bad. So every member sees the same bytes for any number
 *   of threads and processes.
 *
 * TOP-UP (NST_ENGINE_FILL)  A batch short of skipped items is filled, by the
 *   first member to reach it, with the last items of the batches after it
 *   in its epoch (only as many as were lost so far in the epoch), and the
 *   result is recorded in its control (`topped`, the commit point: a holder
 *   that dies before it leaves nothing to undo, the copy is redone by the
 *   next). Donors left empty are passed. How many items of the next batch
 *   were taken is the member's cursor (`taken`), kept in its state, with
 *   the span of positions they lie in (`taken_first`, `taken_end`: an
 *   elastic resume marks them delivered).
 *
 * RESERVE (NST_ENGINE_RESERVE, with FILL; the local ring)  Every rank delivers
 *   exactly the plan's number of batches per epoch, whatever is bad. Each
 *   donor passed (left empty) is a batch the member owes (`owed`); once the
 *   producer has opened the epoch's last planned batch it waits until every
 *   batch of the epoch is finished, then, if the epoch lost items
 *   (`res_lost`), opens *reserve* batches of slot_items items at the
 *   positions after the plan's end (the caller maps them to the rank's
 *   dropped remainder, then its own items from the start, wrapped), one
 *   at a time, until their good items (`res_good`) cover the loss (with
 *   NST_ENGINE_KEEP, drop_last=0: 2 x its empty batches + 1, below). Reserve
 *   batches are donors
 *   like any other, and a member lends them, topped up the same way, while
 *   it owes batches; the rest are passed at its epoch's end, where a
 *   member that owes nothing closes the epoch's reserve (`res_closed`:
 *   the producer opens no more, however many a KEEP estimate wanted). The producer's
 *   wait at each epoch's end is the price: workers idle for the slowest
 *   item in flight. What was lost, and so which items the
 *   reserve holds, is a function of which items are bad: never of timing.
 *   With KEEP (drop_last=0) only a batch left empty is topped up, with one
 *   item (a short batch is lent short, as drop_last=0 lends a partial last
 *   batch). A shard of
 *   which not one item is good is an error (E_DATASET); so is one whose bad
 *   items pass the plan's budget (max_bad: each member counts the planned
 *   items it reached, in order, so the error comes at the same batch for
 *   any thread count).
 */
#ifndef NST_BATCH_ENGINE_H
#define NST_BATCH_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "recipe/recipe.h"

#define NST_ENGINE_MEMBERS 64
#define NST_ENGINE_IO 24      /* per-batch accounting counters (nst_slot_io)   */
#define NST_ENGINE_MSG 512    /* each bad item's message (truncated)           */
#define NST_ENGINE_ERRMSG 512 /* fail policy: the failing item's message       */
#define NST_ENGINE_MAX_SLOTS 1024

/* item status while not finished */
#define NST_ITEM_PENDING 1

/* Per-batch accounting: where its items came from, and echoing. */
/* clang-format off: one field per line (clang-format 14 wraps an X-list
   differently on each pass) */
#define NST_SLOT_IO_FIELDS(X)                                                                      \
    X(storage_bytes)                                                                               \
    X(storage_reads)                                                                               \
    X(cache_hits)                                                                                  \
    X(cache_misses)                                                                                \
    X(peer_hits)                                                                                   \
    X(peer_bytes)                                                                                  \
    X(http_transfers)                                                                              \
    X(http_retries)                                                                                \
    X(fresh)                                                                                       \
    X(echoed)                                                                                      \
    X(uses_1)                                                                                      \
    X(uses_2)                                                                                      \
    X(uses_3)                                                                                      \
    X(uses_4)                                                                                      \
    X(uses_5_8)                                                                                    \
    X(uses_9_up)                                                                                   \
    X(dups)                                                                                        \
    X(distance)
/* clang-format on */
enum {
#define NST_SLOT_IO_ID_(f) NST_IO_##f,
    NST_SLOT_IO_FIELDS(NST_SLOT_IO_ID_)
#undef NST_SLOT_IO_ID_
        NST_IO_COUNT_
};
_Static_assert(NST_IO_COUNT_ <= NST_ENGINE_IO, "batch accounting must fit a slot's io[]");

enum {
    NST_ENGINE_FREE = 0,
    NST_ENGINE_OPENING,
    NST_ENGINE_FILLING,
    NST_ENGINE_FINALIZING,
    NST_ENGINE_READY
};

/* Flags of the plan. */
enum {
    NST_ENGINE_FAIL = 1,    /* on_bad_item=fail: no batch opened after a failing one */
    NST_ENGINE_FILL = 2,    /* skip: top short batches up                         */
    NST_ENGINE_RESERVE = 4, /* with FILL: reserve batches at each epoch's end     */
    NST_ENGINE_KEEP = 8     /* drop_last=0: a short final batch is lent short     */
};

typedef struct nst_engine_slot {
    uint32_t state, count; /* count: items planned                       */
    uint64_t seq, epoch, position;
    uint32_t hint; /* every item below is taken or done          */
    uint32_t done, failed, delivered;
    uint64_t users;                             /* members still to consume and release it    */
    uint64_t lent;                              /* members holding it lent now                */
    uint32_t topped;                            /* NST_ENGINE_FILL: 0, TOP_FULL or TOP_DROPPED    */
    uint32_t top_count, skip_after, next_taken; /* what the top-up recorded  */
    int32_t error;                              /* fail policy: first failing item's status   */
    uint32_t error_item;
    uint32_t reserve, counted; /* a reserve batch; its finish counted (RESERVE) */
    uint64_t io[NST_ENGINE_IO];
    char errmsg[NST_ENGINE_ERRMSG];
} nst_engine_slot;

typedef struct nst_engine_member {
    uint32_t active;
    uint32_t taken; /* items of the batch at (epoch, position)
                                   already delivered (top-up)               */
    uint64_t first_seq, next_seq;
    uint64_t epoch, position;        /* the member's cursor: next batch to lend   */
    uint64_t consumed;               /* batches lent                              */
    uint32_t owed;                   /* RESERVE: donors passed, to lend from the reserve */
    uint32_t lent_now;               /* batches lent this epoch (1 when the member came
                                 in mid-epoch: an empty epoch is judged only whole) */
    uint64_t lost;                   /* bad items of planned batches reached this epoch */
    uint32_t taken_first, taken_end; /* the positions `taken` spans: from the
                                 first good item taken to the last, as
                                 offsets into the batch at `position`
                                 (0, 0: none; an elastic resume marks them
                                 delivered) */
} nst_engine_member;

typedef struct nst_engine {
    /* the plan, fixed at init */
    uint64_t total_bytes, data_off, slot_bytes;
    uint32_t nslots, slot_items, nfields, flags;
    uint64_t field_off[NST_FIELDS_MAX], field_bytes[NST_FIELDS_MAX]; /* per item */
    uint64_t off_indices, off_status, off_items, off_msgs;
    uint32_t max_lead; /* a group's bound on how far the cursor may be
                                   ahead of the oldest unfreed batch (0: none) */
    /* mutable (the caller's lock) */
    uint32_t slot_limit; /* slots that may be in use at once (0: nslots):
                            autotune's batches_ahead within the ring       */
    uint64_t prod_seq, prod_epoch, prod_pos;
    uint32_t prod_slot; /* the open batch's slot, or NST_ENGINE_NONE     */
    uint32_t halted;    /* fail policy: open no more batches         */
    uint64_t free_hi;   /* 1 + the highest sequence number freed     */
    uint32_t journal, journal_arg;
    uint64_t requeued; /* tickets of dropped members taken again    */
    /* RESERVE: the producer's epoch so far (items lost and good of its
     * planned batches, reserve items opened and good; an error) */
    uint64_t res_lost, res_pgood, res_planned, res_tried, res_good;
    int32_t res_error;
    uint32_t res_closed; /* the member's epoch ended: no more reserve */
    uint64_t res_empty;  /* KEEP: planned batches with no good item */
    nst_engine_member members[NST_ENGINE_MEMBERS];
    nst_engine_slot slots[];
} nst_engine;

#define NST_ENGINE_NONE UINT32_MAX

/* The epoch plan, the caller's: planned items of the batch starting at
 * `pos` of `epoch` (0: the epoch has no more batches), and the epochs to
 * deliver (0: unlimited). Identical for every member. */
typedef struct nst_engine_plan {
    uint32_t (*batch_len)(void *ctx, uint64_t epoch, uint64_t pos);
    void *ctx;
    uint64_t epochs;
    /* Optional (NULL: none): the bad items a member may meet among the
     * planned items of `epoch` before lend fails (E_DATASET). */
    uint64_t (*max_bad)(void *ctx, uint64_t epoch, uint64_t *items);
    /* Optional (NULL: the engine memmoves on the host): field f's bytes of
     * items moved by compaction and the top-up, from src to dst (both in
     * the block; never overlapping), e.g. mirrored in device memory by the
     * device ring (gpu_output=device): 1 moved by the caller, 0 leave it to
     * the engine, < 0 failed. `moved`, after a batch's moves of which the
     * caller took at least one: 0 once they are all done, or < 0. A failed
     * move fails the batch (its `error`, lend returns it). The local ring
     * only: a coordinated group's plan in shared memory has none. */
    int (*move)(void *ctx, uint32_t field, uint8_t *dst, const uint8_t *src, size_t bytes);
    int (*moved)(void *ctx);
} nst_engine_plan;

/* An item to prepare, as taken by a worker. */
typedef struct nst_engine_ticket {
    uint64_t seq, epoch, position; /* position: of the item in its epoch   */
    uint32_t slot, j, tag;
    uint32_t reserve; /* a reserve item (RESERVE): position is past the plan */
} nst_engine_ticket;

/* Statuses of the calls below besides 0 and E_* (also NOSTALL_EPOCH_END,
 * NOSTALL_DONE). */
#define NST_ENGINE_WAIT 100 /* not now: wait for a change, then call again */

/* Bytes of an engine block for this plan (0 on overflow). */
size_t nst_engine_size(uint32_t nslots, uint32_t slot_items, const nst_field_decl *fields,
                       uint32_t nfields);
/* Lay out and initialize `mem` (nst_engine_size bytes, 64-byte aligned, zeroed). */
nst_engine *nst_engine_init(void *mem, uint32_t nslots, uint32_t slot_items,
                            const nst_field_decl *fields, uint32_t nfields, uint32_t flags);

/* Data of slot s: field f, dataset indices, item status, item messages
 * (a bad item j's record: its dataset index, 8 bytes, then why, text). */
uint8_t *nst_engine_field(nst_engine *q, uint32_t s, uint32_t f);
uint64_t *nst_engine_indices(nst_engine *q, uint32_t s);
int32_t *nst_engine_status(nst_engine *q, uint32_t s);
char *nst_engine_msg(nst_engine *q, uint32_t s, uint32_t j);

/* Producers. Take the next item to prepare, opening the cursor's next batch
 * in a free slot when needed: 0 with *t; NST_ENGINE_WAIT (no free slot, nothing
 * left to take for now); NOSTALL_DONE (every batch of `epochs` opened and
 * none filling, or halted). With `commit` 0, *t says what would be taken
 * and nothing is marked (the caller may still decline). */
int nst_engine_take(nst_engine *q, const nst_engine_plan *p, uint32_t member, nst_engine_ticket *t,
                    int commit);
/* The item of t is written (status 0) or bad (status < 0, msg says why),
 * with io[] added to its batch. Returns 1 if that made the batch READY, 0
 * otherwise (also when the ticket was reassigned meanwhile: ignored). `p`
 * (may be NULL): its move functions serve the compaction. */
int nst_engine_done(nst_engine *q, const nst_engine_plan *p, const nst_engine_ticket *t,
                    uint32_t member, int status, const char *msg, const uint64_t *io);

/* A lent batch. */
typedef struct nst_engine_lend {
    uint32_t slot, count; /* count: items to deliver                   */
    uint64_t seq, epoch, position;
} nst_engine_lent;

/* Members. Lend `member` its next batch: 0 with *l; NOSTALL_EPOCH_END (once
 * after each epoch's last batch); NOSTALL_DONE; NST_ENGINE_WAIT; E_STATE (the
 * top-up needs a slot and every other slot is lent by this member alone);
 * or a failing item's status under the fail policy (message in the slot's
 * errmsg; the caller makes it sticky). Batches with nothing to deliver
 * (every item skipped, or all given to the batch before) are passed.
 * `seen` (may be NULL) is called once for every batch this member reaches,
 * lent or passed, before anything of it may be freed: for its accounting
 * (io) and its bad items (status, messages). */
typedef void (*nst_engine_seen_fn)(void *ctx, nst_engine *q, uint32_t slot);
int nst_engine_lend(nst_engine *q, const nst_engine_plan *p, uint32_t member, nst_engine_lent *l,
                    nst_engine_seen_fn seen, void *ctx);
/* `member` is done with batch seq (any order). 1 if a slot became free; 0;
 * E_INVALID if it does not hold seq lent. */
int nst_engine_release(nst_engine *q, uint32_t member, uint64_t seq);

/* Membership. */
void nst_engine_member_join(nst_engine *q, uint32_t member, uint64_t first_seq, uint64_t epoch);
/* Remove a member (dead or leaving): its taken items go back to the pool,
 * what it holds or still needs counts as released. Journaled. */
void nst_engine_member_drop(nst_engine *q, uint32_t member);
/* Where a member joining now starts: the first batch of the first epoch of
 * which nothing was freed yet. */
uint64_t nst_engine_join_seq(const nst_engine *q, const nst_engine_plan *p, uint64_t *epoch);

/* A member's cursor, as a state saves it: the next batch at (epoch,
 * position); `taken` good items at its end already delivered (spanning
 * positions [taken_first, taken_end) of it); batches `owed` from the
 * reserve; bad items `lost` so far in the epoch. */
typedef struct nst_engine_cursor {
    uint64_t epoch, position, lost;
    uint32_t taken, owed, taken_first, taken_end;
} nst_engine_cursor;

/* Member `member`'s cursor. */
void nst_engine_cursor_get(const nst_engine *q, uint32_t member, nst_engine_cursor *c);

/* The local ring's set_state: every slot not lent is freed, the cursor and
 * member 0 restart at c (sequence numbers keep growing). Call with no item
 * in flight. */
void nst_engine_reset(nst_engine *q, const nst_engine_cursor *c);

/* After a holder died mid-update (EOWNERDEAD): finish or undo it. */
void nst_engine_repair(nst_engine *q);

/* Slots lent by `member`. */
uint32_t nst_engine_lent_count(const nst_engine *q, uint32_t member);
/* Every batch below this sequence number is freed. */
uint64_t nst_engine_freed_below(const nst_engine *q);
/* A slot is filling (there is work for workers or soon will be). */
int nst_engine_any_filling(const nst_engine *q);

/* The journal's kinds (q->journal): an update in progress. */
enum { NST_ENGINE_J_NONE = 0, NST_ENGINE_J_OPEN, NST_ENGINE_J_FINAL, NST_ENGINE_J_DROP };

#endif
