/*
 * fake.c — a GPU backend without a GPU, in test builds only
 * (NOSTALL_TEST_HOOKS): "decodes" each JPEG's region with nostall's CPU
 * decoder at full scale into host memory, hands a JPEG whose size is a
 * multiple of fallback_every back to the CPU decoder (as nvJPEG does with
 * what it cannot decode; a JPEG it fails on goes back too, and the CPU
 * decoder names the damage), reports the others as decoded by the
 * hardware engines (even size) or the default backend (odd size) — by
 * the file alone, so the stats' split is the same for any threads —
 * and runs the augment kernels' per-element functions (gpu_item.h) one
 * element at a time on the host. So the route (route.c) — regions,
 * routing, fallbacks, bad items, planning — is tested with make test
 * (tests/test_gpu_route.c). One thread; its buffers grow and stay.
 * Every decode call is counted (nst_gpu_fake_decodes: calls, JPEGs, the
 * most in one; printed at destroy with NOSTALL_TEST_GPU_FAKE_STATS=1).
 * Also the device ring's ops (gpu.h, dring.c) on host memory, with a fake
 * consumer stream whose releases wait until the test syncs it
 * (tests/test_gpu_dring.c).
 */
#include "gpu/gpu.h"

#if defined(NOSTALL_TEST_HOOKS) && NOSTALL_TEST_HOOKS

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "decode/decode.h"

typedef struct fake {
    nst_decoder *dec;
    nst_buf images, tmp;
    unsigned fallback_every;
} fake;

static int fake_reserve(void *ctx, uint64_t image_bytes, size_t items, size_t starts, size_t coefs,
                        uint64_t tmp_elems)
{
    fake *f = ctx;
    (void)items, (void)starts, (void)coefs;
    int rc = nst_buf_reserve(&f->images, (size_t)image_bytes + 1);
    if (rc == 0) rc = nst_buf_reserve(&f->tmp, (size_t)tmp_elems * sizeof(int16_t) + 1);
    return rc;
}

/* Decode calls and JPEGs given, over every fake backend (tests: batches
 * of more than one JPEG reached the backend). */
static atomic_uint_fast64_t decode_calls, decode_jpegs, decode_most;

void nst_gpu_fake_decodes(uint64_t *calls, uint64_t *jpegs, uint64_t *most)
{
    *calls = (uint64_t)atomic_load(&decode_calls);
    *jpegs = (uint64_t)atomic_load(&decode_jpegs);
    *most = (uint64_t)atomic_load(&decode_most);
}

static void count_decode(size_t n)
{
    atomic_fetch_add(&decode_calls, 1);
    atomic_fetch_add(&decode_jpegs, n);
    uint_fast64_t m = atomic_load(&decode_most);
    while (m < n && !atomic_compare_exchange_weak(&decode_most, &m, n)) {
    }
}

static int fake_decode(void *ctx, const nst_gpu_jpeg *jpegs, size_t n, int *status, int *engine,
                       char (*reason)[NST_GPU_REASON])
{
    fake *f = ctx;
    count_decode(n);
    for (size_t i = 0; i < n; i++) {
        const nst_gpu_jpeg *j = &jpegs[i];
        if (f->fallback_every && j->size % f->fallback_every == 0) {
            status[i] = NST_GPU_CPU_FALLBACK;
            continue;
        }
        nst_image img;
        if (nst_decode(f->dec, j->data, j->size, "the JPEG", NULL, 0, 0, &img) < 0) {
            status[i] = NST_GPU_CPU_FALLBACK; /* as nvJPEG's backend: the CPU names it */
            continue;
        }
        if (j->roi_x + j->roi_w > img.width || j->roi_y + j->roi_h > img.height) {
            status[i] = NST_GPU_BAD;
            snprintf(reason[i], NST_GPU_REASON, "region outside the %ux%u image", img.width,
                     img.height);
            continue;
        }
        for (uint32_t y = 0; y < j->roi_h; y++)
            memcpy(f->images.data + j->dst_off + (size_t)y * j->dst_stride,
                   img.data + (size_t)(j->roi_y + y) * img.stride + (size_t)j->roi_x * 3,
                   (size_t)j->roi_w * 3);
        status[i] = NST_GPU_DECODED;
        engine[i] = j->size % 2 == 0 ? NST_GPU_ENGINE_HW : NST_GPU_ENGINE_DEFAULT;
    }
    return 0;
}

static int fake_put(void *ctx, uint64_t dst_off, const uint8_t *rgb, uint32_t w, uint32_t h)
{
    fake *f = ctx;
    memcpy(f->images.data + dst_off, rgb, (size_t)w * h * 3);
    return 0;
}

static int fake_augment(void *ctx, const nst_gpu_item *items, size_t n, const nst_gpu_tables *t,
                        uint8_t *batch, size_t batch_bytes, int batch_on_device)
{
    fake *f = ctx;
    int16_t *tmp = (int16_t *)(void *)f->tmp.data;
    (void)batch_bytes, (void)batch_on_device; /* its device memory is host memory */
    for (size_t i = 0; i < n; i++) {
        const uint64_t nt = nst_gpu_tmp_elems(&items[i]);
        for (uint64_t e = 0; e < nt; e++)
            nst_gpu_pass1(&items[i], f->images.data, t->starts, t->coefs, tmp, e);
        const uint64_t no = (uint64_t)items[i].width * items[i].height * 3u;
        for (uint64_t e = 0; e < no; e++)
            nst_gpu_pass2(&items[i], t->starts, t->coefs, tmp, batch, e);
    }
    return 0;
}

static void fake_destroy(void *ctx)
{
    fake *f = ctx;
    if (!f) return;
    const char *e = getenv("NOSTALL_TEST_GPU_FAKE_STATS");
    if (e && *e == '1') {
        uint64_t calls, jpegs, most;
        nst_gpu_fake_decodes(&calls, &jpegs, &most);
        fprintf(stderr, "gpu fake backend: %llu decode calls, %llu JPEGs, at most %llu in one\n",
                (unsigned long long)calls, (unsigned long long)jpegs, (unsigned long long)most);
    }
    nst_decoder_free(f->dec);
    nst_buf_free(&f->images);
    nst_buf_free(&f->tmp);
    free(f);
}

/* The device ring's ops on host memory: the "device" memory is calloc'd,
 * an entry's events are ints (ready: set at lend; done: counts releases),
 * its stream a tag, and a consumer stream an nst_gpu_fake_stream. */
static int fd_alloc(void *c, size_t bytes, void **mem)
{
    (void)c;
    *mem = calloc(1, bytes ? bytes : 1);
    return *mem ? 0 : nst_error(NOSTALL_E_NOMEM, "gpu fake device ring: cannot allocate");
}

static void fd_free_mem(void *c, void *mem)
{
    (void)c;
    free(mem);
}

static int fd_entry_create(void *c, void **stream, void **ready, void **done)
{
    (void)c;
    *stream = NULL;
    *ready = calloc(1, sizeof(int));
    *done = calloc(1, sizeof(int));
    if (*ready && *done) return 0;
    free(*ready);
    free(*done);
    return nst_error(NOSTALL_E_NOMEM, "gpu fake device ring: cannot allocate");
}

static void fd_entry_destroy(void *c, void *stream, void *ready, void *done)
{
    (void)c, (void)stream;
    free(ready);
    free(done);
}

static int fd_lent(void *c, void *stream, void *ready)
{
    (void)c, (void)stream;
    *(int *)ready = 1; /* the workers' writes are done when the host ring lends */
    return 0;
}

static int fd_after(void *c, void *stream, void *done, void *consumer, void (*fn)(void *), void *arg)
{
    (void)c, (void)stream;
    ++*(int *)done;
    if (!consumer) {
        fn(arg);
        return 0;
    }
    nst_gpu_fake_stream *s = consumer;
    if (s->n >= sizeof s->fn / sizeof *s->fn)
        return nst_error(NOSTALL_E_STATE, "gpu fake stream: 64 releases already wait on it");
    s->fn[s->n] = fn;
    s->arg[s->n++] = arg;
    return 0;
}

static void fd_drain(void *c, void *stream) { (void)c, (void)stream; }

/* Copies are done at once (host memory): sync has nothing to wait for.
 * With fail_copies (ctx) every copy fails, as a CUDA error would. Every
 * copy is counted (tests: the device path was taken, not a host memcpy
 * that the fake's host memory would let pass). */
static atomic_uint_fast64_t copies;

uint64_t nst_gpu_fake_copies(void) { return (uint64_t)atomic_load(&copies); }

static int fd_copy(void *c, void *stream, void *dst, const void *src, size_t bytes)
{
    (void)stream;
    atomic_fetch_add(&copies, 1);
    if (*(const int *)c)
        return nst_error(NOSTALL_E_IO,
                         "gpu fake device ring: copy of %zu bytes failed "
                         "(NOSTALL_TEST_GPU_FAKE_COPY_FAIL)",
                         bytes);
    memmove(dst, src, bytes);
    return 0;
}

static int fd_sync(void *c, void *stream)
{
    (void)c, (void)stream;
    return 0;
}

void nst_gpu_fake_dring_ops(nst_gpu_dring_ops *out, int fail_copies)
{
    static const int fails[2] = {0, 1};
    *out = (nst_gpu_dring_ops){.name = "fake",
                               .device = -1,
                               .alloc = fd_alloc,
                               .free_mem = fd_free_mem,
                               .entry_create = fd_entry_create,
                               .entry_destroy = fd_entry_destroy,
                               .lent = fd_lent,
                               .after = fd_after,
                               .drain = fd_drain,
                               .copy = fd_copy,
                               .sync = fd_sync,
                               .ctx = (void *)&fails[fail_copies != 0]};
}

void nst_gpu_fake_stream_sync(nst_gpu_fake_stream *s)
{
    for (unsigned i = 0; i < s->n; i++) s->fn[i](s->arg[i]);
    s->n = 0;
}

int nst_gpu_fake_backend(nst_gpu_backend *out, uint64_t max_pixels, unsigned fallback_every)
{
    fake *f = calloc(1, sizeof *f);
    if (!f) return nst_error(NOSTALL_E_NOMEM, "gpu fake backend: cannot allocate");
    int rc = nst_decoder_create(&f->dec, max_pixels);
    if (rc < 0) {
        free(f);
        return rc;
    }
    f->fallback_every = fallback_every;
    *out = (nst_gpu_backend){"fake",       f, fake_reserve, fake_decode, fake_put, fake_augment,
                             fake_destroy, 0};
    return 0;
}

#endif
