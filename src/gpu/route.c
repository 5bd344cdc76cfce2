/*
 * route.c — a batch of image items through a GPU backend (gpu.h): the host
 * probes each header, finds the region each window's filter taps touch,
 * gives the backend the JPEGs it may decode (never CMYK/YCCK, which nvJPEG
 * does not take; PNGs neither), decodes the rest and what the backend hands
 * back with nostall's CPU decoder at full scale, plans every item on its
 * region (plan.c) and has the backend run the augment. Per decoded job
 * its decoder: the backend's engine (hardware or default) or the CPU (the
 * loader's stats gpu_hw_items, gpu_default_items, gpu_cpu_items). A file
 * that cannot be decoded is a bad item with its path and reason, counted
 * by no decoder; the others' bytes are what a full-scale CPU decode and
 * nst_augment() give (tests/test_gpu_route.c with the fake backend).
 *
 * The region: the item planned on the whole image's geometry touches input
 * columns xlo .. xhi - 1 and rows ylo .. yhi - 1 (every tap, zero-weight
 * padding included); planned again on that region (x0 = xlo, y0 = ylo) it
 * gets the same taps shifted, the same k and the same pass order, so the
 * bytes do not depend on the region.
 *
 * nst_gpu_route_many: the same for items each at its own address (a
 * worker's ready items, in whatever slots they go to): one decode call
 * for all their JPEGs, the augment over them at once with device output,
 * item by item with host output.
 *
 * nst_gpu_route_image: an image the CPU already decoded (echo_point=decode's
 * store) put whole to the backend and re-augmented there.
 *
 * Threads: a route belongs to one thread; its arrays grow to the largest
 * batch and stay (no allocation in the steady state).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "decode/decode.h"
#include "gpu/gpu.h"

struct nst_gpu_route {
    nst_decoder *dec; /* headers, and the CPU decodes */
    nst_gpu_tables t;
    nst_buf items, jpegs, map, roi, offs; /* per job                        */
    nst_buf bstatus, breason, bengine;    /* the backend's, per JPEG given   */
    nst_buf codes;                        /* a bad job's NOSTALL_E_* status   */
    nst_buf tmp;                          /* one region's rows (CPU decodes) */
    nst_buf jengine;                      /* per job, when the caller passes none */
    nst_buf tstarts, tcoefs;              /* the tables' arrays              */
    nst_buf many;                         /* route_many: map, output bytes   */
};

int nst_gpu_route_create(nst_gpu_route **out, uint64_t max_pixels)
{
    nst_gpu_route *r = calloc(1, sizeof *r);
    if (!r) return nst_error(NOSTALL_E_NOMEM, "gpu route: cannot allocate");
    int rc = nst_decoder_create(&r->dec, max_pixels);
    if (rc < 0) {
        free(r);
        return rc;
    }
    *out = r;
    return 0;
}

void nst_gpu_route_free(nst_gpu_route *r)
{
    if (!r) return;
    nst_decoder_free(r->dec);
    nst_gpu_tables_free(&r->t);
    nst_buf_free(&r->items);
    nst_buf_free(&r->jpegs);
    nst_buf_free(&r->map);
    nst_buf_free(&r->roi);
    nst_buf_free(&r->offs);
    nst_buf_free(&r->bstatus);
    nst_buf_free(&r->bengine);
    nst_buf_free(&r->codes);
    nst_buf_free(&r->breason);
    nst_buf_free(&r->tmp);
    nst_buf_free(&r->jengine);
    nst_buf_free(&r->tstarts);
    nst_buf_free(&r->tcoefs);
    nst_buf_free(&r->many);
    free(r);
}

/* Room for n jobs: items, JPEG descriptions, maps, regions, offsets, the
 * backend's statuses and reasons (contents not kept). */
static int reserve_jobs(nst_gpu_route *r, size_t n)
{
    int rc;
    if ((rc = nst_buf_reserve(&r->items, n * sizeof(nst_gpu_item))) < 0 ||
        (rc = nst_buf_reserve(&r->jpegs, n * sizeof(nst_gpu_jpeg))) < 0 ||
        (rc = nst_buf_reserve(&r->map, n * sizeof(size_t))) < 0 ||
        (rc = nst_buf_reserve(&r->roi, n * 4 * sizeof(uint32_t))) < 0 ||
        (rc = nst_buf_reserve(&r->offs, n * sizeof(uint64_t))) < 0 ||
        (rc = nst_buf_reserve(&r->bstatus, n * sizeof(int))) < 0 ||
        (rc = nst_buf_reserve(&r->bengine, n * sizeof(int))) < 0 ||
        (rc = nst_buf_reserve(&r->codes, n * sizeof(int))) < 0 ||
        (rc = nst_buf_reserve(&r->breason, n * NST_GPU_REASON)) < 0)
        return rc;
    return 0;
}

/* Room for a batch's taps (table_sizes), the tables emptied. */
static int reserve_tables(nst_gpu_route *r, size_t starts, size_t coefs)
{
    int rc;
    if ((rc = nst_buf_reserve(&r->tstarts, starts * sizeof(int32_t))) < 0 ||
        (rc = nst_buf_reserve(&r->tcoefs, coefs * sizeof(int16_t))) < 0)
        return rc;
    r->t.starts = (int32_t *)(void *)r->tstarts.data;
    r->t.starts_cap = starts;
    r->t.coefs = (int16_t *)(void *)r->tcoefs.data;
    r->t.coefs_cap = coefs;
    r->t.starts_len = r->t.coefs_len = 0;
    return 0;
}

/* Job i is bad: its reason (path first unless `why` names it) and status. */
static void bad(nst_gpu_route *r, char (*reason)[NST_GPU_REASON], size_t i, const char *path,
                const char *why, int code)
{
    if (path)
        snprintf(reason[i], NST_GPU_REASON, "%s: %s", path, why);
    else
        snprintf(reason[i], NST_GPU_REASON, "%s", why); /* why names the path */
    ((int *)(void *)r->codes.data)[i] = code < 0 ? code : NOSTALL_E_CORRUPT;
}

int nst_gpu_route_code(const nst_gpu_route *r, size_t i)
{
    return ((const int *)(const void *)r->codes.data)[i];
}

/* The taps' capacity for a batch: every output side times the most taps
 * any of its windows' axes can need (kc <= 2 * ceil(scale) + 1, capped by
 * the image side). */
static void table_sizes(const nst_gpu_job *jobs, size_t n, const uint32_t *roi, size_t *starts,
                        size_t *coefs)
{
    *starts = *coefs = 0;
    for (size_t i = 0; i < n; i++) {
        const nst_output *o = &jobs[i].out;
        uint32_t w = o->inner_width ? o->inner_width : o->width ? o->width : o->size;
        uint32_t h = o->inner_height ? o->inner_height : o->height ? o->height : o->size;
        const nst_pm_axis ax = nst_pm_axis_init(0, jobs[i].win.w, roi[4 * i + 2], w, 0);
        const nst_pm_axis ay = nst_pm_axis_init(0, jobs[i].win.h, roi[4 * i + 3], h, 0);
        *starts += (size_t)w + h;
        *coefs += (size_t)w * nst_pm_axis_cap(&ax) + (size_t)h * nst_pm_axis_cap(&ay);
    }
}

/* Step 1: headers and regions. roi[4i..] = the file's width, height, then
 * (after planning) the region; status BAD, CPU_FALLBACK or DECODED (to be
 * given to the backend). */
static void probe_all(nst_gpu_route *r, const nst_gpu_job *jobs, size_t n, uint32_t *roi,
                      int *status, char (*reason)[NST_GPU_REASON])
{
    for (size_t i = 0; i < n; i++) {
        nst_image_info info;
        status[i] = NST_GPU_DECODED;
        int rc = nst_decode_probe(r->dec, jobs[i].data, jobs[i].len, jobs[i].path, &info);
        if (rc < 0) {
            status[i] = NST_GPU_BAD;
            bad(r, reason, i, NULL, nostall_last_error(), rc);
            continue;
        }
        if (info.format != NST_FORMAT_JPEG || info.components == 4)
            status[i] = NST_GPU_CPU_FALLBACK;
        roi[4 * i] = 0, roi[4 * i + 1] = 0;
        roi[4 * i + 2] = info.width, roi[4 * i + 3] = info.height;
    }
}

/* Step 2: each window's region on the whole image (the tables are reset
 * after: the items are planned again on their regions). */
static void regions(nst_gpu_route *r, const nst_gpu_job *jobs, size_t n, uint32_t *roi, int *status,
                    char (*reason)[NST_GPU_REASON])
{
    for (size_t i = 0; i < n; i++) {
        if (status[i] == NST_GPU_BAD) continue;
        const nst_image img = {.width = roi[4 * i + 2],
                               .height = roi[4 * i + 3],
                               .stride = (size_t)roi[4 * i + 2] * 3,
                               .scale_num = 1,
                               .scale_den = 1};
        nst_gpu_item it;
        r->t.starts_len = r->t.coefs_len = 0;
        int rc = nst_gpu_plan(&r->t, &img, &jobs[i].win, jobs[i].flip, &jobs[i].out, &it);
        if (rc < 0) {
            status[i] = NST_GPU_BAD;
            bad(r, reason, i, jobs[i].path, nostall_last_error(), rc);
            continue;
        }
        roi[4 * i] = (uint32_t)it.xlo;
        roi[4 * i + 1] = (uint32_t)it.ylo;
        roi[4 * i + 2] = (uint32_t)(it.xhi - it.xlo);
        roi[4 * i + 3] = (uint32_t)(it.yhi - it.ylo);
    }
    r->t.starts_len = r->t.coefs_len = 0;
}

/* Step 4: a region decoded by the CPU (the whole image at full scale, the
 * region's rows copied) and put in the backend's memory. */
static int cpu_decode(nst_gpu_route *r, const nst_gpu_backend *be, const nst_gpu_job *job,
                      const uint32_t *roi, uint64_t dst_off, char *why)
{
    nst_image img;
    int rc = nst_decode(r->dec, job->data, job->len, job->path, NULL, 0, 0, &img);
    if (rc < 0) {
        snprintf(why, NST_GPU_REASON, "%s", nostall_last_error());
        return rc;
    }
    const size_t row = (size_t)roi[2] * 3;
    if (img.scale_num != img.scale_den || img.x0 || img.y0 || roi[0] + roi[2] > img.width ||
        roi[1] + roi[3] > img.height) {
        snprintf(why, NST_GPU_REASON, "%s: the CPU decoder gave a %ux%u image at %u/%u", job->path,
                 img.width, img.height, img.scale_num, img.scale_den);
        return NOSTALL_E_CORRUPT;
    }
    if ((rc = nst_buf_reserve(&r->tmp, row * roi[3])) < 0) return rc;
    for (uint32_t y = 0; y < roi[3]; y++)
        memcpy(r->tmp.data + (size_t)y * row,
               img.data + (size_t)(roi[1] + y) * img.stride + (size_t)roi[0] * 3, row);
    if ((rc = be->put(be->ctx, dst_off, r->tmp.data, roi[2], roi[3])) < 0) {
        snprintf(why, NST_GPU_REASON, "%s: %s", job->path, nostall_last_error());
        return rc;
    }
    return 0;
}

/* Steps 3-4: the JPEGs to the backend, then the CPU's share. Offsets of
 * the decoded regions in the backend's memory: off[i]; each job's decoder
 * in engine[i] (NONE until decoded). */
static int decode_all(nst_gpu_route *r, const nst_gpu_backend *be, const nst_gpu_job *jobs,
                      size_t n, const uint32_t *roi, const uint64_t *off, int *status,
                      char (*reason)[NST_GPU_REASON], int *engine)
{
    nst_gpu_jpeg *jp = (nst_gpu_jpeg *)(void *)r->jpegs.data;
    size_t *map = (size_t *)(void *)r->map.data, m = 0;
    for (size_t i = 0; i < n; i++) {
        engine[i] = NST_GPU_ENGINE_NONE;
        if (status[i] != NST_GPU_DECODED) continue;
        jp[m] = (nst_gpu_jpeg){jobs[i].data,   jobs[i].len,    roi[4 * i], roi[4 * i + 1],
                               roi[4 * i + 2], roi[4 * i + 3], off[i],     roi[4 * i + 2] * 3};
        map[m++] = i;
    }
    if (m) {
        int *st = (int *)(void *)r->bstatus.data, *eng = (int *)(void *)r->bengine.data;
        char(*why)[NST_GPU_REASON] = (char(*)[NST_GPU_REASON])(void *)r->breason.data;
        for (size_t j = 0; j < m; j++) eng[j] = NST_GPU_ENGINE_NONE;
        int rc = be->decode(be->ctx, jp, m, st, eng, why);
        if (rc < 0) return rc;
        for (size_t j = 0; j < m; j++) {
            const size_t i = map[j];
            status[i] = st[j];
            if (st[j] == NST_GPU_BAD) bad(r, reason, i, jobs[i].path, why[j], NOSTALL_E_CORRUPT);
            /* a backend that names no engine: its default way */
            if (st[j] == NST_GPU_DECODED)
                engine[i] = eng[j] == NST_GPU_ENGINE_HW ? NST_GPU_ENGINE_HW : NST_GPU_ENGINE_DEFAULT;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (status[i] != NST_GPU_CPU_FALLBACK) continue;
        int rc = cpu_decode(r, be, &jobs[i], roi + 4 * i, off[i], reason[i]);
        if (rc == NOSTALL_E_NOMEM) return rc;
        status[i] = rc < 0 ? NST_GPU_BAD : NST_GPU_DECODED;
        if (rc < 0)
            ((int *)(void *)r->codes.data)[i] = rc; /* reason[i] is cpu_decode's */
        else
            engine[i] = NST_GPU_ENGINE_CPU;
    }
    return 0;
}

/* Steps 1-4 for both entries: the jobs' room, headers, tables, regions,
 * their offsets in the backend's memory (image_bytes in all), the decode.
 * *engine: the caller's array, or the route's scratch when it passes none. */
typedef struct front {
    int *engine;
    uint32_t *roi;
    uint64_t *offs, image_bytes;
    size_t ns, nc;
} front;

static int decode_front(nst_gpu_route *r, const nst_gpu_backend *be, const nst_gpu_job *jobs,
                        size_t n, int *status, char (*reason)[NST_GPU_REASON], int *engine, front *f)
{
    int rc = reserve_jobs(r, n);
    if (rc < 0) return rc;
    if (!engine) { /* the caller does not ask: the route's own scratch */
        if ((rc = nst_buf_reserve(&r->jengine, n * sizeof(int))) < 0) return rc;
        engine = (int *)(void *)r->jengine.data;
    }
    f->engine = engine;
    f->roi = (uint32_t *)(void *)r->roi.data;
    probe_all(r, jobs, n, f->roi, status, reason);
    table_sizes(jobs, n, f->roi, &f->ns, &f->nc);
    if ((rc = reserve_tables(r, f->ns, f->nc)) < 0) return rc;
    regions(r, jobs, n, f->roi, status, reason);
    f->offs = (uint64_t *)(void *)r->offs.data;
    f->image_bytes = 0;
    for (size_t i = 0; i < n; i++) {
        f->offs[i] = f->image_bytes;
        if (status[i] != NST_GPU_BAD)
            f->image_bytes += (uint64_t)f->roi[4 * i + 2] * f->roi[4 * i + 3] * 3;
    }
    if ((rc = be->reserve(be->ctx, f->image_bytes, n, f->ns, f->nc, 0)) < 0) return rc;
    return decode_all(r, be, jobs, n, f->roi, f->offs, status, reason, engine);
}

/* Step 5 for one decoded job: planned on its region into *it (src_off
 * set); a plan that fails makes the job bad (returns 1: skip it). */
static int plan_job(nst_gpu_route *r, const nst_gpu_job *jobs, size_t i, const front *f,
                    int *status, char (*reason)[NST_GPU_REASON], nst_gpu_item *it)
{
    const uint32_t *roi = f->roi + 4 * i;
    const nst_image img = {.width = roi[2],
                           .height = roi[3],
                           .stride = (size_t)roi[2] * 3,
                           .x0 = roi[0],
                           .y0 = roi[1],
                           .scale_num = 1,
                           .scale_den = 1};
    int rc = nst_gpu_plan(&r->t, &img, &jobs[i].win, jobs[i].flip, &jobs[i].out, it);
    if (rc < 0) {
        status[i] = NST_GPU_BAD;
        f->engine[i] = NST_GPU_ENGINE_NONE;
        bad(r, reason, i, jobs[i].path, nostall_last_error(), rc);
        return 1;
    }
    it->src_off = f->offs[i];
    return 0;
}

int nst_gpu_route_batch(nst_gpu_route *r, const nst_gpu_backend *be, const nst_gpu_job *jobs,
                        size_t n, uint8_t *batch, size_t batch_bytes, int *status,
                        char (*reason)[NST_GPU_REASON], int *engine)
{
    front f;
    int rc = decode_front(r, be, jobs, n, status, reason, engine, &f);
    if (rc < 0) return rc;

    /* Step 5: plan each decoded item on its region; the intermediate's room */
    nst_gpu_item *items = (nst_gpu_item *)(void *)r->items.data;
    size_t m = 0;
    uint64_t tmp_elems = 0;
    for (size_t i = 0; i < n; i++) {
        if (status[i] != NST_GPU_DECODED || plan_job(r, jobs, i, &f, status, reason, &items[m]))
            continue;
        const uint64_t bytes = nst_output_bytes(&jobs[i].out);
        if (!bytes || jobs[i].dst_off > batch_bytes || bytes > batch_bytes - jobs[i].dst_off)
            return nst_error(NOSTALL_E_INVALID, "gpu route: %s: item outside the batch",
                             jobs[i].path);
        items[m].dst_off = jobs[i].dst_off;
        items[m].tmp_off = tmp_elems;
        tmp_elems += nst_gpu_tmp_elems(&items[m]);
        m++;
    }
    if (!m) return 0;
    if ((rc = be->reserve(be->ctx, f.image_bytes, n, f.ns, f.nc, tmp_elems)) < 0) return rc;
    return be->augment(be->ctx, items, m, &r->t, batch, batch_bytes, be->out_device);
}

/* nst_gpu_route_many's augment: one call over the items' span when the
 * output is device memory (the kernels write only the items' bytes), else
 * one call per item at its own address (a host output is copied back
 * whole: a span would carry other items' bytes, maybe another worker's). */
static int augment_many(nst_gpu_route *r, const nst_gpu_backend *be, nst_gpu_item *items, size_t m,
                        const size_t *map, uint8_t *const *dst, const size_t *bytes)
{
    if (be->out_device) {
        uintptr_t lo = UINTPTR_MAX, hi = 0;
        for (size_t k = 0; k < m; k++) {
            const uintptr_t a = (uintptr_t)dst[map[k]];
            if (a < lo) lo = a;
            if (a + bytes[k] > hi) hi = a + bytes[k];
        }
        for (size_t k = 0; k < m; k++) items[k].dst_off = (uintptr_t)dst[map[k]] - lo;
        return be->augment(be->ctx, items, m, &r->t, (uint8_t *)lo, hi - lo, 1);
    }
    for (size_t k = 0; k < m; k++) {
        items[k].dst_off = 0;
        int rc = be->augment(be->ctx, &items[k], 1, &r->t, dst[map[k]], bytes[k], 0);
        if (rc < 0) return rc;
    }
    return 0;
}

int nst_gpu_route_many(nst_gpu_route *r, const nst_gpu_backend *be, const nst_gpu_job *jobs,
                       size_t n, uint8_t *const *dst, int *status, char (*reason)[NST_GPU_REASON],
                       int *engine)
{
    int rc = nst_buf_reserve(&r->many, n * 2 * sizeof(size_t));
    front f;
    if (rc == 0) rc = decode_front(r, be, jobs, n, status, reason, engine, &f);
    if (rc < 0) return rc;

    /* plan each decoded item on its region (as nst_gpu_route_batch) */
    nst_gpu_item *items = (nst_gpu_item *)(void *)r->items.data;
    size_t *map = (size_t *)(void *)r->many.data, *bytes = map + n, m = 0;
    uint64_t tmp_elems = 0;
    for (size_t i = 0; i < n; i++) {
        if (status[i] != NST_GPU_DECODED || plan_job(r, jobs, i, &f, status, reason, &items[m]))
            continue;
        if (!(bytes[m] = nst_output_bytes(&jobs[i].out)))
            return nst_error(NOSTALL_E_INVALID, "gpu route: %s: empty output", jobs[i].path);
        items[m].tmp_off = tmp_elems;
        tmp_elems += nst_gpu_tmp_elems(&items[m]);
        map[m++] = i;
    }
    if (!m) return 0;
    if ((rc = be->reserve(be->ctx, f.image_bytes, n, f.ns, f.nc, tmp_elems)) < 0) return rc;
    return augment_many(r, be, items, m, map, dst, bytes);
}

int nst_gpu_route_image(nst_gpu_route *r, const nst_gpu_backend *be, const nst_image *img,
                        const nst_gpu_job *job, uint8_t *batch, size_t batch_bytes)
{
    int rc = reserve_jobs(r, 1);
    if (rc < 0) return rc;
    /* the tables' room: the window's length unscaled is at least its
     * length in the (DCT-scaled) image, so the taps fit */
    const uint32_t roi[4] = {0, 0, img->width, img->height};
    size_t ns, nc;
    table_sizes(job, 1, roi, &ns, &nc);
    if ((rc = reserve_tables(r, ns, nc)) < 0) return rc;
    const size_t row = (size_t)img->width * 3;
    const uint64_t image_bytes = (uint64_t)row * img->height;
    if ((rc = be->reserve(be->ctx, image_bytes, 1, ns, nc, 0)) < 0) return rc;
    const uint8_t *rgb = img->data;
    if (img->stride != row) { /* put takes packed rows */
        if ((rc = nst_buf_reserve(&r->tmp, (size_t)image_bytes)) < 0) return rc;
        for (uint32_t y = 0; y < img->height; y++)
            memcpy(r->tmp.data + (size_t)y * row, img->data + (size_t)y * img->stride, row);
        rgb = r->tmp.data;
    }
    if ((rc = be->put(be->ctx, 0, rgb, img->width, img->height)) < 0) return rc;
    nst_image packed = *img; /* the backend's copy: packed rows */
    packed.stride = row;
    nst_gpu_item *it = (nst_gpu_item *)(void *)r->items.data;
    if ((rc = nst_gpu_plan(&r->t, &packed, &job->win, job->flip, &job->out, it)) < 0) return rc;
    const uint64_t bytes = nst_output_bytes(&job->out);
    if (!bytes || job->dst_off > batch_bytes || bytes > batch_bytes - job->dst_off)
        return nst_error(NOSTALL_E_INVALID, "gpu route: %s: item outside the batch", job->path);
    it->src_off = 0;
    it->dst_off = job->dst_off;
    it->tmp_off = 0;
    if ((rc = be->reserve(be->ctx, image_bytes, 1, ns, nc, nst_gpu_tmp_elems(it))) < 0) return rc;
    return be->augment(be->ctx, it, 1, &r->t, batch, batch_bytes, be->out_device);
}
