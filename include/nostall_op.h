/*
 * nostall_op.h — user ops: the user's own per-item code, run by nostall's
 * worker threads in place of the built-in crop, with every engine feature
 * (MinIO cache, data echoing, coordinated prep, resume, the analyzer).
 * An extension header of libnostall (include nostall.h's rules apply).
 *
 * WHAT AN OP IS
 *   An op declares at create the fields each item produces (name, dtype,
 *   shape: "declare in setup, fill in run"), and then runs on one item at a
 *   time: its input -- the item's fetched bytes (NOSTALL_OP_INPUT_BYTES) or
 *   its whole image decoded by nostall's decoder as RGB8, row-major HWC
 *   (NOSTALL_OP_INPUT_IMAGE) -- and the item's own random stream, writing
 *   every declared field of the item into its place in the batch.
 *
 *   Tasks: with task=classify an op replaces the image field (items: the
 *   image files of an ImageFolder or a list, with their labels); with
 *   task=bytes the items are every file (any name). Either input works
 *   with either task. When the items have labels, nostall appends the
 *   "label" field after the op's fields (as classification does); the op
 *   may not declare a field named "label" then. detect and tokens take no
 *   op.
 *
 * HOW TO GIVE ONE
 *   1. A shared library named by the option op_library, exporting
 *      `const nostall_op nostall_op_v1` (NOSTALL_OP_SYMBOL); op_args is
 *      the text handed to its create. It is dlopen()ed at loader create
 *      (RTLD_NOW | RTLD_LOCAL) and closed at loader free. It needs no
 *      symbol of libnostall (the helpers below are inline), so it loads in
 *      the CLI as well as next to libnostall.so.
 *   2. In process: nostall_config_set_op(cfg, &op, ctx) (the Python
 *      binding's transform= is built on it).
 *
 * LIFECYCLE (every call but run from the thread that creates or frees the
 * loader, one at a time)
 *   1. create(ctx, setup, &state) at loader create: read setup's inputs,
 *      declare fields, return 0 -- or a negative NOSTALL_E_* with
 *      setup->message saying why (the loader's create fails with it).
 *   2. create_worker(state, &worker) once per worker thread (optional).
 *   3. run(state, worker, item) for every use of every item, concurrently
 *      from the worker threads; each call gets the state of the worker
 *      thread making it (NULL without create_worker: run must then be
 *      reentrant, reading `state` only). Return 0, or a negative
 *      NOSTALL_E_* for a bad item (NOSTALL_E_CORRUPT if nothing fits
 *      better; a positive or unknown value counts as NOSTALL_E_CORRUPT)
 *      with item->message saying why (nostall_op_fail): the item is then a
 *      counted, reported skip, or under on_bad_item=fail the error the
 *      training loop receives, named "op 'NAME': PATH: MESSAGE".
 *   4. free_worker(state, worker), then destroy(state) at loader free,
 *      after every worker thread has exited (a create that failed is not
 *      followed by destroy).
 *
 * DETERMINISM
 *   Draw every random number from the item (nostall_op_random and friends,
 *   or a generator seeded from item->seed): item->seed is a pure function
 *   of (seed, epoch, item index, use), so the bytes delivered are identical
 *   for any thread count, and each echoed use of an item differs. Write
 *   every byte of a dense field (places are zeroed before run, so bytes
 *   left alone are zeros, never another item's).
 *
 * STAGES AND ECHOING
 *   With echo_point=fetch the op runs again on the kept bytes for each
 *   use; with echo_point=decode (image input) nostall keeps the decoded
 *   image and runs the op on it for each use; with echo_point=augment the
 *   op's output is repeated as it is.
 */
#ifndef NOSTALL_OP_H
#define NOSTALL_OP_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "nostall.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The op interface's version: nostall_op.version. An op of another version
 * is refused (E_UNSUPPORTED, naming both). */
#define NOSTALL_OP_VERSION 1
/* The symbol an op library exports: const nostall_op nostall_op_v1. */
#define NOSTALL_OP_SYMBOL "nostall_op_v1"
/* For op libraries built with -fvisibility=hidden. */
#if defined(__GNUC__)
#define NOSTALL_OP_EXPORT __attribute__((visibility("default")))
#else
#define NOSTALL_OP_EXPORT
#endif

/* Fields an op may declare (nostall adds "label" after them). */
#define NOSTALL_OP_FIELDS_MAX 7
#define NOSTALL_OP_NAME_MAX 24
#define NOSTALL_OP_MESSAGE_MAX 768

/* nostall_op.input */
enum { NOSTALL_OP_INPUT_BYTES = 0, NOSTALL_OP_INPUT_IMAGE = 1 };

/* One field the op declares: `ndim` dimensions of one item (0: a scalar)
 * of `dtype`. A ragged field (e.g. a variable number of boxes) declares
 * its room as `shape` and names in `shape_field` the op's INT64 field of
 * shape [ndim] holding each item's actual shape; its elements are packed
 * from the start of the item's room (see nostall_field in nostall.h). */
typedef struct nostall_op_field {
    char name[NOSTALL_OP_NAME_MAX]; /* unique; letters, digits, '_'   */
    nostall_dtype dtype;
    uint32_t ndim;
    uint64_t shape[NOSTALL_FIELD_DIMS]; /* each >= 1                      */
    int32_t shape_field;                /* -1: dense                      */
    uint32_t reserved_;
} nostall_op_field;

/* One use of one item, handed to run (and, as setup->sample, to create). */
typedef struct nostall_op_item {
    size_t size; /* sizeof(nostall_op_item) of nostall's build:
                               members are only ever appended            */
    /* The input. BYTES: data[0..len), the fetched bytes. IMAGE: the RGB8
     * pixels, row y at data + y * stride, 3 bytes per pixel (HWC). Valid
     * during the call only; never written to (echoed uses share it). */
    const uint8_t *data;
    size_t len;
    uint32_t width, height; /* IMAGE                                     */
    size_t stride;          /* IMAGE: bytes per row (>= 3 * width)       */
    /* Which item. */
    uint64_t index; /* dataset item index                        */
    uint64_t epoch;
    uint32_t copy;    /* which use of the item in its epoch (echo)  */
    uint32_t nfields; /* places in dst (0 for setup->sample)       */
    const char *path; /* the item's file, for messages             */
    /* Randomness: seed is the item's stream (a pure function of the
     * loader's seed, epoch, index and copy); random_state starts equal to
     * it and is advanced by nostall_op_random(). */
    uint64_t seed;
    uint64_t random_state;
    /* dst[f]: this item's place for the op's field f (its size: the
     * field's bytes per item), zeroed before run. NULL for the sample. */
    void *const *dst;
    /* run's reason for a bad item (nostall_op_fail writes it). */
    char message[NOSTALL_OP_MESSAGE_MAX];
} nostall_op_item;

/* create's inputs (from the loader's options) and its declarations. */
typedef struct nostall_op_setup {
    size_t size; /* sizeof(nostall_op_setup) of nostall's build */
    /* In. */
    const char *args;                     /* op_args ("" when unset)                   */
    uint32_t task;                        /* NOSTALL_TASK_CLASSIFY or NOSTALL_TASK_BYTES */
    uint32_t train;                       /* 1: mode=train, 0: mode=eval               */
    uint64_t seed;                        /* the loader's seed                         */
    uint32_t crop, out_height, out_width; /* the options, for ops that
                               take their output size from them (0: unset) */
    uint32_t reserved_;
    /* The first of the dataset's first 16 items that could be read (local
     * files) -- and, for image input, decoded --, as run would receive it
     * (input, path, a probe random stream that is no item's; no dst), so
     * an op can derive its fields from a real item; NULL if none. */
    const nostall_op_item *sample;
    /* Out. */
    uint32_t nfields;     /* 1 .. NOSTALL_OP_FIELDS_MAX                */
    uint32_t image_field; /* the field nostall_batch.images points at
                               (default 0)                              */
    nostall_op_field fields[NOSTALL_OP_FIELDS_MAX];
    char message[NOSTALL_OP_MESSAGE_MAX]; /* create's reason for failing */
} nostall_op_setup;

typedef struct nostall_op {
    uint32_t version; /* NOSTALL_OP_VERSION                        */
    uint32_t size;    /* sizeof(nostall_op)                        */
    const char *name; /* in messages and the resume fingerprint    */
    uint32_t input;   /* NOSTALL_OP_INPUT_*                        */
    uint32_t flags;   /* 0 (reserved)                              */
    /* ctx: nostall_config_set_op's (NULL for a library op). Required. */
    int (*create)(void *ctx, nostall_op_setup *setup, void **state);
    void (*destroy)(void *state);                     /* may be NULL */
    int (*create_worker)(void *state, void **worker); /* may be NULL */
    void (*free_worker)(void *state, void *worker);   /* may be NULL */
    /* Required. Concurrent calls, each with its thread's worker. */
    int (*run)(void *state, void *worker, nostall_op_item *item);
} nostall_op;

/* Run `op` on every item of loaders created from this config (in place of
 * the task's own image field); NULL removes it. `op` (its functions and
 * name) and `ctx` must stay valid until every such loader is freed; the
 * version and required functions are checked here (E_INVALID,
 * E_UNSUPPORTED). With op_library also set, loader create fails (E_OPTION):
 * one op per loader. With coordinate=, every member must run the same op
 * (the group compares the declared fields, not the code). */
NOSTALL_API int nostall_config_set_op(nostall_config *cfg, const nostall_op *op, void *ctx);

/* ---- helpers for ops (inline: an op library needs no libnostall symbol) */

/* The next 64 random bits of the item's stream (splitmix64). */
static inline uint64_t nostall_op_random(nostall_op_item *item)
{
    uint64_t z = (item->random_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1), 53 bits. */
static inline double nostall_op_random_double(nostall_op_item *item)
{
    return (double)(nostall_op_random(item) >> 11) * (1.0 / 9007199254740992.0);
}

/* Uniform in [lo, hi). */
static inline double nostall_op_random_uniform(nostall_op_item *item, double lo, double hi)
{
    return lo + (hi - lo) * nostall_op_random_double(item);
}

/* Uniform integer in [0, n), n >= 1, without modulo bias. */
static inline uint64_t nostall_op_random_below(nostall_op_item *item, uint64_t n)
{
    uint64_t limit = n ? UINT64_MAX - UINT64_MAX % n : 0, v;
    if (n <= 1) return 0;
    do v = nostall_op_random(item);
    while (v >= limit);
    return v % n;
}

/* Say why an item is bad (printf-style, into item->message); returns
 * `status` (e.g. return nostall_op_fail(item, NOSTALL_E_CORRUPT, "...")). */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static inline int
nostall_op_fail(nostall_op_item *item, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(item->message, sizeof item->message, fmt, ap);
    va_end(ap);
    return status;
}

#ifdef __cplusplus
}
#endif
#endif /* NOSTALL_OP_H */
