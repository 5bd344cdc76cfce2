/*
 * fake.c — a GPU backend without a GPU, in test builds only
 * (NOSTALL_TEST_HOOKS): "decodes" each JPEG's region with nostall's CPU
 * decoder at full scale into host memory, hands every fallback_every-th
 * JPEG back to the CPU decoder (as nvJPEG does with what it cannot decode;
 * a JPEG it fails on goes back too, and the CPU decoder names the damage),
 * and runs the augment kernels' per-element functions (gpu_item.h) one
 * element at a time on the host. So the route (route.c) — regions,
 * routing, fallbacks, bad items, planning — is tested with make test
 * (tests/test_gpu_route.c). One thread; its buffers grow and stay.
 */
#include "gpu/gpu.h"

#if defined(NOSTALL_TEST_HOOKS) && NOSTALL_TEST_HOOKS

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "decode/decode.h"

typedef struct fake {
    nst_decoder *dec;
    nst_buf images, tmp;
    unsigned fallback_every, given; /* JPEGs given so far */
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

static int fake_decode(void *ctx, const nst_gpu_jpeg *jpegs, size_t n, int *status,
                       char (*reason)[NST_GPU_REASON])
{
    fake *f = ctx;
    for (size_t i = 0; i < n; i++) {
        const nst_gpu_jpeg *j = &jpegs[i];
        if (f->fallback_every && ++f->given % f->fallback_every == 0) {
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
                        uint8_t *batch, size_t batch_bytes)
{
    fake *f = ctx;
    int16_t *tmp = (int16_t *)(void *)f->tmp.data;
    (void)batch_bytes;
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
    nst_decoder_free(f->dec);
    nst_buf_free(&f->images);
    nst_buf_free(&f->tmp);
    free(f);
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
    *out = (nst_gpu_backend){"fake",       f,           fake_reserve, fake_decode, fake_put,
                             fake_augment, fake_destroy};
    return 0;
}

#endif
