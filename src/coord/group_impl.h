/*
 * group_impl.h — the parts of a coordinated group shared by its files:
 * segment.c (the shared-memory segment: naming, plan, create, attach,
 * retire), lock.c (the robust process-shared mutex, its repair, futex
 * events), members.c (the member table: liveness, sweeps, dropping the
 * dead) and group.c (the protocol: take, done, next, release, join,
 * leave). Nothing outside src/coord/ includes it.
 *
 * SEGMENT  /dev/shm/nostall-<uid>-<name>, mode 0600: this header (magic,
 *   ABI, generation, the plan, the fingerprint, the mutex, event words, the
 *   member table, counters), then at engine_off the batch engine's block
 *   (batch/engine.h: slot controls and slot data). Offsets only, no
 *   pointers: every process maps it anywhere.
 *
 * LOCKING  One robust, process-shared mutex guards the header and the
 *   engine; a holder that dies leaves EOWNERDEAD to the next locker, which
 *   repairs the engine (nst_engine_repair) and the member table. Waits: futex
 *   on two event words (work, ready) in slices of at most 50 ms, each slice
 *   checking the local stop flag and sweeping for dead members.
 */
#ifndef NST_COORD_GROUP_IMPL_H
#define NST_COORD_GROUP_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "batch/engine.h"
#include "coord/group.h"

#define GRP_MAGIC UINT64_C(0x32305052474e534e) /* "NSNGRP02" little-endian */
#define GRP_ABI 3u
#define NO_MEMBER 0xffu

enum { SEG_LIVE = 1, SEG_DEFUNCT = 2 };
enum { M_FREE = 0, M_ACTIVE = 1 };

typedef struct member {
    uint32_t state;
    int32_t pid;
    uint64_t start_time;        /* /proc/<pid>/stat field 22               */
    _Atomic uint64_t heartbeat; /* CLOCK_MONOTONIC ns of its last call     */
    uint64_t items_produced, batches_produced, batches_consumed, wait_ns, take_wait_ns;
} member;

typedef struct gstats {
    uint64_t items_produced, batches_produced, batches_consumed, wait_ns, take_wait_ns;
} gstats;

typedef struct header {
    uint64_t magic;
    uint32_t abi;
    _Atomic uint32_t seg_state;
    uint64_t layout; /* LAYOUT_SIG: struct sizes of the build that made it */
    uint64_t generation;
    uint64_t total_bytes, engine_off;
    /* the plan (the same for every member: checked at join) */
    uint64_t items_per_epoch, epochs, batches_per_epoch;
    uint32_t batch_size, drop_last, nslots, max_lead, fail_on_bad, fill, nfields, pad_;
    uint64_t field_bytes[NST_FIELDS_MAX];
    uint32_t nfp, fp_len;
    char fp[NST_GROUP_FP_MAX];
    /* shared state (mu) */
    _Alignas(64) pthread_mutex_t mu;
    _Alignas(64) _Atomic uint32_t ev_work;
    uint32_t nwait_work;
    _Atomic uint32_t ev_ready;
    uint32_t nwait_ready;
    uint64_t last_sweep_ns;
    gstats departed;
    uint64_t members_joined, members_dropped, mutex_repairs;
    member members[NST_GROUP_MAX_MEMBERS];
} header;

#define LAYOUT_SIG                                                                                 \
    ((uint64_t)sizeof(header) | (uint64_t)sizeof(nst_engine_slot) << 20 |                          \
     (uint64_t)sizeof(member) << 36 | (uint64_t)sizeof(pthread_mutex_t) << 48)

struct nst_group {
    header *h;
    nst_engine *q;
    uint8_t *base;
    size_t size;
    uint32_t me;
    pid_t pid;
    dev_t dev;
    ino_t ino;
    atomic_int stop;
    nst_engine_plan plan;
    nst_engine_seen_fn seen; /* the consumer's hook (nst_group_set_seen) */
    void *seen_ctx;
    /* consumer only */
    int failed;
    char failmsg[NST_ERROR_MAX - 128];
    char name[NST_GROUP_NAME_MAX + 1];
    char shm[NST_GROUP_NAME_MAX + 48]; /* shm_open name: "/nostall-<uid>-<name>" */
};

/* segment.c */
typedef struct grp_plan {
    uint64_t batches_per_epoch, engine_off, total;
    uint32_t max_lead, fp_len, nfields;
    nst_field_decl fields[NST_FIELDS_MAX];
    char fp[NST_GROUP_FP_MAX];
} grp_plan;
int grp_valid_name(const char *n);
int grp_make_plan(const nst_group_params *p, grp_plan *pl, const char *fn);
int grp_compare(nst_group *g, const nst_group_params *p, const grp_plan *pl);
int grp_create(nst_group *g, const nst_group_params *p, const grp_plan *pl, uint64_t gen,
               int *fd_out);
int grp_attach(nst_group *g, int *retry, const char *fn);
void grp_retire(nst_group *g);
void grp_unmap(nst_group *g);
void grp_clean_tmp(void);
void grp_set_plan(nst_group *g); /* g->plan from the header */

/* lock.c */
int grp_lock(nst_group *g, uint32_t bounded_ms);
void grp_unlock(nst_group *g);
int grp_wait(nst_group *g, _Atomic uint32_t *ev, uint32_t *nwait, uint64_t deadline);
void grp_wake(_Atomic uint32_t *ev, uint32_t nwait);
void grp_wake_all(header *h);
void grp_heartbeat(nst_group *g);
int grp_init_mutex(header *h, const char *name);

/* members.c */
int grp_proc_stat(pid_t pid, uint64_t *start, char *state);
void grp_sweep(nst_group *g, int force);
void grp_drop_member(nst_group *g, uint32_t i, int dead);
uint32_t grp_live_members(const header *h);
void grp_fill_member(nst_group *g, uint32_t i, uint64_t first_seq, uint64_t epoch);

#endif
