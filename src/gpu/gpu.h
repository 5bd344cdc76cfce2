/*
 * gpu.h — the GPU decode path's host side (decode_device=gpu, issue 37):
 * planning items for the augment kernels (plan.c), the check that the
 * pieces exist at create (gpu.c: built with CUDA, libnvjpeg loadable, a
 * CUDA device), the kernels' launcher (augment.cu, built only with CUDA)
 * and the interface of a batch JPEG decoder (a backend: nvJPEG on a GPU, a
 * fake on the host for tests); the device ring of gpu_output=device
 * (dring.c over memory ops: the fake's, or CUDA's in cuda_dring.c).
 *
 * Status: the planning, the kernels, the route over a backend, the checks,
 * the backends and the device ring exist; classify's make uses a worker's
 * route, but workers get only the fake backend (test builds) until the
 * nvJPEG one has run on a GPU (docs/gpu.md, "GPU decode").
 * Threads: every function is for the thread that owns its arguments but
 * the device ring's (any thread: its own mutex); no global state but the
 * libnvjpeg handle cuda_probe.c opens once and cuda_dring.c's per-device
 * ops contexts.
 */
#ifndef NST_GPU_GPU_H
#define NST_GPU_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "augment/augment.h"
#include "common/buf.h"
#include "common/image.h"
#include "gpu/gpu_item.h"
#include "nostall.h"

/* A batch's filter taps: fixed arrays the caller sizes (on the host, then
 * copied to the device with the items), filled in order by nst_gpu_plan. */
typedef struct nst_gpu_tables {
    int32_t *starts;
    size_t starts_cap, starts_len;
    int16_t *coefs;
    size_t coefs_cap, coefs_len;
    nst_buf work; /* one axis' taps while planning (grow-only) */
} nst_gpu_tables;

/* Plan one item: resample window `win` of the decoded image `img` (only
 * its geometry is read: width, height, stride, x0, y0, scale), mirrored
 * when `flip`, into `out` (out->dst is not used). Appends its taps to `t`
 * and fills `it` but for src_off, tmp_off and dst_off, which the caller
 * assigns. E_INVALID (bad image, window or output) or E_NOMEM (tables
 * full), the tables unchanged. */
int nst_gpu_plan(nst_gpu_tables *t, const nst_image *img, const nst_window *win, int flip,
                 const nst_output *out, nst_gpu_item *it);
void nst_gpu_tables_free(nst_gpu_tables *t);

/* decode_device=gpu at create: 0 when this build and machine can run it,
 * else an error naming the missing piece (E_UNSUPPORTED): a library built
 * without CUDA or without nvjpeg.h, libnvjpeg not loadable, no CUDA driver
 * or device, gpu_id past the devices. `fn` heads the message. */
int nst_gpu_check(unsigned gpu_id, const char *fn);

/* A backend: a batch JPEG decoder and the augment kernels' executor, over
 * its own memory (device memory for a GPU backend, host memory for the
 * fake) holding the decoded images, the batch's taps and the intermediate.
 *   reserve  room for image_bytes of decoded images, the batch's items and
 *            taps, and tmp_elems of intermediate (grow-only);
 *   decode   each JPEG's region of interest (roi_*, pixels of the file) to
 *            interleaved RGB8 at image offset dst_off, dst_stride bytes per
 *            row; per item a status: decoded, for the CPU decoder (what the
 *            backend cannot decode: CMYK, 12-bit, ...), or bad (`reason`
 *            says why; the caller adds the item's path); per decoded JPEG
 *            the engine that decoded it in `engine` (NST_GPU_ENGINE_HW:
 *            the hardware engines, NST_GPU_ENGINE_DEFAULT: the default or
 *            hybrid backend; not read for other statuses: the stats'
 *            per-backend split);
 *   put      a region the CPU decoded (rows of w * 3 bytes) to dst_off;
 *   augment  both passes over the items into `batch`: the host's slot, or
 *            with batch_on_device (out_device) the device ring's memory.
 * Each returns 0, or < 0 with a message when the whole batch failed. */
enum { NST_GPU_DECODED = 0, NST_GPU_CPU_FALLBACK = 1, NST_GPU_BAD = 2 };
/* Which decoder decoded an item (none: a bad item). */
enum {
    NST_GPU_ENGINE_NONE = 0,
    NST_GPU_ENGINE_HW = 1,      /* nvJPEG's hardware engines (batched) */
    NST_GPU_ENGINE_DEFAULT = 2, /* nvJPEG's default/hybrid backend     */
    NST_GPU_ENGINE_CPU = 3      /* nostall's CPU decoder               */
};
#define NST_GPU_REASON 160
typedef struct nst_gpu_jpeg {
    const uint8_t *data;
    size_t size;
    uint32_t roi_x, roi_y, roi_w, roi_h;
    uint64_t dst_off;
    uint32_t dst_stride;
} nst_gpu_jpeg;
typedef struct nst_gpu_backend {
    const char *name;
    void *ctx;
    int (*reserve)(void *ctx, uint64_t image_bytes, size_t items, size_t starts, size_t coefs,
                   uint64_t tmp_elems);
    int (*decode)(void *ctx, const nst_gpu_jpeg *jpegs, size_t n, int *status, int *engine,
                  char (*reason)[NST_GPU_REASON]);
    int (*put)(void *ctx, uint64_t dst_off, const uint8_t *rgb, uint32_t w, uint32_t h);
    int (*augment)(void *ctx, const nst_gpu_item *items, size_t n, const nst_gpu_tables *t,
                   uint8_t *batch, size_t batch_bytes, int batch_on_device);
    void (*destroy)(void *ctx);
    /* Set by the caller after open: the route's `batch` is device memory
     * (the device ring's, gpu_output=device), written in place and not
     * copied; 0: host memory (the host ring's slot). The fake ignores it:
     * its "device" memory is host memory. */
    int out_device;
} nst_gpu_backend;

/* One item of a batch for the route: its encoded bytes, its path (for
 * messages), the window and flip the CPU path planned with the same draws,
 * and its output (out.dst unused: the item goes to dst_off of the batch). */
typedef struct nst_gpu_job {
    const uint8_t *data;
    size_t len;
    const char *path;
    nst_window win;
    int flip;
    nst_output out;
    uint64_t dst_off;
} nst_gpu_job;

/* The route (route.c): probe each item's header on the host, give the
 * backend the JPEGs it may take with each window's region (the pixels its
 * filter taps touch, so the output equals a full-scale CPU decode's),
 * decode the rest (and what the backend hands back) with nostall's CPU
 * decoder, plan the items and run the augment. Per job a status
 * (NST_GPU_DECODED: done; NST_GPU_BAD: `reason` names the path and why;
 * the item's bytes are then not written) and which decoder decoded it
 * (engine, may be NULL: NST_GPU_ENGINE_HW, _DEFAULT or _CPU for a decoded
 * job, _NONE for a bad one). Grow-only scratch; one thread. */
typedef struct nst_gpu_route nst_gpu_route;
int nst_gpu_route_create(nst_gpu_route **out, uint64_t max_pixels);
void nst_gpu_route_free(nst_gpu_route *r);
int nst_gpu_route_batch(nst_gpu_route *r, const nst_gpu_backend *be, const nst_gpu_job *jobs,
                        size_t n, uint8_t *batch, size_t batch_bytes, int *status,
                        char (*reason)[NST_GPU_REASON], int *engine);
/* As nst_gpu_route_batch, but job i's output goes to dst[i] (its dst_off
 * unused): items in different slots, e.g. a worker's items whose fetches
 * are complete. All their JPEGs go to the backend in one decode call;
 * each item's bytes are those nst_gpu_route_batch gives it alone. With
 * be->out_device the dst are device addresses. */
int nst_gpu_route_many(nst_gpu_route *r, const nst_gpu_backend *be, const nst_gpu_job *jobs,
                       size_t n, uint8_t *const *dst, int *status, char (*reason)[NST_GPU_REASON],
                       int *engine);
/* One image the CPU already decoded (echo_point=decode's store: img with
 * its geometry -- offsets, DCT scale -- and its rows in host memory) put
 * to the backend whole and augmented there into `batch` at job->dst_off,
 * with job's window, flip and output (job->data unused): the bytes of
 * nst_augment() on img. 0 or E_*. */
int nst_gpu_route_image(nst_gpu_route *r, const nst_gpu_backend *be, const nst_image *img,
                        const nst_gpu_job *job, uint8_t *batch, size_t batch_bytes);
/* After a batch: bad job i's NOSTALL_E_* status (the CPU path's for a file
 * the CPU decoder refused; E_CORRUPT for what a backend reported). */
int nst_gpu_route_code(const nst_gpu_route *r, size_t i);

/* The backend of one worker's route (gpu.c): the fake in a test build with
 * NOSTALL_TEST_GPU_FAKE=1 (handing JPEGs of a size divisible by 3 back
 * to the CPU; engine: even size hardware, odd default); the
 * nvJPEG backend when the build has CUDA and nvjpeg.h and the environment
 * opts in (NOSTALL_GPU_UNVALIDATED=1); otherwise E_UNSUPPORTED. Freed with out->destroy(out->ctx). */
int nst_gpu_backend_open(nst_gpu_backend *out, unsigned gpu_id, uint64_t max_pixels);

/* The device ring (dring.c; gpu_output=device): a mirror in device memory
 * of the host ring's arena (`host`, `bytes`), so that the image field's
 * bytes of any slot have a device address (nst_gpu_dring_dev: the same
 * offset), and per lent batch an entry with its own stream and two events
 * (at most `nslots` entries: the host ring lends at most that many). lend
 * takes a free entry for a batch the host ring lent; release records the
 * consumer's stream's progress and, once it is reached, frees the entry and
 * gives the batch back through `give_back` (the host ring's release) —
 * from the thread that reaches it (a CUDA host function; the fake: the
 * releasing thread, or nst_gpu_fake_stream_sync). Memory, streams and
 * events are all made at create: nothing is allocated after. The memory
 * ops are the fake's (test builds, NOSTALL_TEST_GPU_FAKE=1: host memory,
 * flags) or CUDA's (cuda_dring.c: cudaMalloc, streams, events; not yet run
 * on a GPU). Besides the entries, one stream of its own for the copies
 * of nst_gpu_dring_move and one for nst_gpu_dring_copy's. Threads: any;
 * one mutex guards the entries and the extra allocations. */
typedef struct nst_gpu_dring nst_gpu_dring;
typedef struct nst_gpu_dring_ops {
    const char *name;
    int device; /* -1: host memory (the fake) */
    /* `bytes` of device memory; per entry a stream and its events */
    int (*alloc)(void *ops_ctx, size_t bytes, void **mem);
    void (*free_mem)(void *ops_ctx, void *mem);
    int (*entry_create)(void *ops_ctx, void **stream, void **ready, void **done);
    void (*entry_destroy)(void *ops_ctx, void *stream, void *ready, void *done);
    /* At lend: `ready` recorded on the entry's stream. */
    int (*lent)(void *ops_ctx, void *stream, void *ready);
    /* At release: `fn(arg)` runs once the work queued on `consumer` so far
     * is done (consumer NULL: now, on this thread). */
    int (*after)(void *ops_ctx, void *stream, void *done, void *consumer, void (*fn)(void *),
                 void *arg);
    /* At free: wait for every entry's pending `after` (their fn runs). */
    void (*drain)(void *ops_ctx, void *stream);
    /* Device-to-device copies of `bytes` (never overlapping) queued on
     * `stream` in order; sync returns once every copy queued there is done
     * (0, or < 0 naming the copy's error). */
    int (*copy)(void *ops_ctx, void *stream, void *dst, const void *src, size_t bytes);
    int (*sync)(void *ops_ctx, void *stream);
    void *ctx;
} nst_gpu_dring_ops;
typedef void (*nst_gpu_give_back_fn)(void *ctx, const nostall_batch *b);
int nst_gpu_dring_create(nst_gpu_dring **out, const nst_gpu_dring_ops *ops, void *host,
                         size_t bytes, uint32_t nslots, nst_gpu_give_back_fn give_back, void *ctx);
/* The device address of host ring address p (in [host, host + bytes)). */
uint8_t *nst_gpu_dring_dev(const nst_gpu_dring *d, const uint8_t *p);
/* Batch b, just lent by the host ring: an entry and *dev. */
int nst_gpu_dring_lend(nst_gpu_dring *d, const nostall_batch *b, nostall_device_batch *dev);
/* The consumer gives b back after the work on `stream` (NULL: now).
 * E_INVALID if b is not lent (e.g. released twice). */
int nst_gpu_dring_release(nst_gpu_dring *d, const nostall_batch *b, void *stream);
/* The batch engine's compaction and top-ups of the image field
 * (on_bad_item=skip; batch/engine.h's plan move): n bytes from host ring
 * address src to dst, both in the arena, copied at their device addresses
 * on the ring's copy stream; moved waits until the copies are done (the
 * batch may be lent, and a donor slot refilled, once it returns). One
 * caller at a time (the host ring's lock). E_INVALID outside the arena. */
int nst_gpu_dring_move(nst_gpu_dring *d, uint8_t *dst, const uint8_t *src, size_t n);
int nst_gpu_dring_moved(nst_gpu_dring *d);
/* Device memory beside the ring, freed with it (echo_point=augment's store
 * of finished images): at create, at most 4 allocations. */
int nst_gpu_dring_alloc_extra(nst_gpu_dring *d, size_t bytes, uint8_t **mem);
/* Workers' device-to-device copies (device addresses: the ring's or an
 * extra allocation's), on a stream of their own (not the engine's copier);
 * copied waits until every copy queued there so far is done. Any thread. */
int nst_gpu_dring_copy(nst_gpu_dring *d, uint8_t *dst, const uint8_t *src, size_t n);
int nst_gpu_dring_copied(nst_gpu_dring *d);
/* Entries lent or waiting for their stream (tests). */
uint32_t nst_gpu_dring_busy(nst_gpu_dring *d);
/* Waits for pending releases (they run), then frees. */
void nst_gpu_dring_free(nst_gpu_dring *d);
/* The ops for gpu_id: the fake's (test builds with NOSTALL_TEST_GPU_FAKE=1)
 * or CUDA's; E_UNSUPPORTED otherwise. */
int nst_gpu_dring_ops_open(nst_gpu_dring_ops *out, unsigned gpu_id);

#if defined(NOSTALL_TEST_HOOKS) && NOSTALL_TEST_HOOKS
/* fake.c: the device ring's ops on host memory. A non-NULL consumer
 * stream given to the fake must be an nst_gpu_fake_stream: its `after`
 * functions wait there (at most 64) until nst_gpu_fake_stream_sync runs
 * them, as a CUDA stream reaching an event would. With fail_copies every
 * copy fails (E_IO; gpu.c: NOSTALL_TEST_GPU_FAKE_COPY_FAIL=1). */
void nst_gpu_fake_dring_ops(nst_gpu_dring_ops *out, int fail_copies);
/* Copies the fake's ops were asked for so far (any ring, any thread). */
uint64_t nst_gpu_fake_copies(void);
typedef struct nst_gpu_fake_stream {
    void (*fn[64])(void *);
    void *arg[64];
    unsigned n;
} nst_gpu_fake_stream;
/* Runs the functions waiting on s, in order (one thread). */
void nst_gpu_fake_stream_sync(nst_gpu_fake_stream *s);
#endif

#if defined(NOSTALL_HAVE_CUDA)
/* cuda_dring.c: the device ring's ops on CUDA device gpu_id. */
int nst_gpu_cuda_dring_ops(nst_gpu_dring_ops *out, unsigned gpu_id);
#endif

#if defined(NOSTALL_TEST_HOOKS) && NOSTALL_TEST_HOOKS
/* fake.c, test builds only: a backend on the host that "decodes" with
 * nostall's CPU decoder (full scale) and runs gpu_item.h's functions one
 * element at a time; a JPEG whose size in bytes is a multiple of
 * `fallback_every` (0: none) it hands back to the CPU decoder, as nvJPEG
 * does with what it cannot decode; of the rest it reports those of even
 * size as decoded by the hardware engines, those of odd size by the
 * default backend. Decided by the file alone, so the split does not
 * depend on threads or order (tests assert exact counts). */
int nst_gpu_fake_backend(nst_gpu_backend *out, uint64_t max_pixels, unsigned fallback_every);
/* The fakes' decode calls so far (all, any thread), the JPEGs given in
 * them and the most given in one call. */
void nst_gpu_fake_decodes(uint64_t *calls, uint64_t *jpegs, uint64_t *most);
#endif

#if defined(NOSTALL_HAVE_CUDA)
/* cuda_probe.c: the CUDA half of nst_gpu_check (it passes a real GPU
 * only with NOSTALL_GPU_UNVALIDATED=1: nst_gpu_unvalidated, the one place
 * that reads it); libnvjpeg's dlopen handle (opened once; NULL when not
 * found). */
int nst_gpu_cuda_check(unsigned gpu_id, const char *fn);
int nst_gpu_unvalidated(void);
void *nst_gpu_nvjpeg_lib(void);
/* augment.cu: both passes over n items of a batch, on `stream` (a
 * cudaStream_t; NULL: the default stream). Every pointer is device memory:
 * the items, the decoded images, the taps, the intermediate (room for
 * nst_gpu_tmp_elems of every item at its tmp_off) and the batch. 0, or the
 * cudaError_t of the launch. */
int nst_gpu_augment_launch(const nst_gpu_item *items, uint32_t n, const uint8_t *src,
                           const int32_t *starts, const int16_t *coefs, int16_t *tmp,
                           uint8_t *batch, void *stream);
#endif

#if defined(NOSTALL_HAVE_CUDA) && defined(NOSTALL_HAVE_NVJPEG)
/* cuda_nvjpeg.c: the nvJPEG backend on CUDA device gpu_id (libnvjpeg must
 * have loaded: nst_gpu_check first). Not yet run on a GPU. */
int nst_gpu_nvjpeg_backend(nst_gpu_backend *out, unsigned gpu_id);
#endif

#endif
