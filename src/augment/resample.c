/*
 * resample.c — piecewise resampling with libsoxr (see resample.h). The only
 * module that includes soxr.h.
 *
 * DESIGN  Each worker keeps a few soxr handles, one per (input rate, output
 * rate, planes) seen lately (least recently used replaced: a dataset of
 * mixed rates creates a handle when a new rate comes, ~0.1 ms), and a
 * grow-only scratch for one segment's output. A segment is computed by
 * soxr_clear (which leaves the handle as soxr_create does: tested), one
 * soxr_process over its input frames and a flush.
 *
 * THREADS  A resampler belongs to one worker.
 */
#include <soxr.h>
#include <stdlib.h>
#include <string.h>

#include "augment/resample.h"
#include "common/buf.h"
#include "common/error.h"

#define SEG_MIN 8192u   /* output frames of a segment, at least      */
#define MARGIN_LOW 384u /* margin, in frames of the lower rate        */
#define LI_MAX 4096u    /* larger: the clip is one segment           */
#define HANDLES 4
#define PLANES_MAX 1024u

static uint64_t gcd(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

void nst_resample_plan_init(nst_resample_plan *p, uint32_t in_rate, uint32_t out_rate)
{
    memset(p, 0, sizeof *p);
    p->in_rate = in_rate;
    p->out_rate = out_rate;
    p->identity = in_rate == out_rate;
    uint64_t g = gcd(in_rate, out_rate);
    p->li = in_rate / g;
    p->lo = out_rate / g;
    if (p->identity || p->li > LI_MAX) return; /* seg_out 0: one segment */
    p->seg_out = (SEG_MIN + p->lo - 1) / p->lo * p->lo;
    p->seg_in = p->seg_out / p->lo * p->li;
    uint64_t low = in_rate < out_rate ? in_rate : out_rate;
    uint64_t m = ((uint64_t)MARGIN_LOW * in_rate + low - 1) / low;
    p->margin = (m + p->li - 1) / p->li * p->li;
}

uint64_t nst_resample_out_frames(const nst_resample_plan *p, uint64_t in_frames)
{
    if (p->identity) return in_frames;
    unsigned __int128 x = (unsigned __int128)in_frames * p->out_rate + p->in_rate - 1;
    return (uint64_t)(x / p->in_rate);
}

/* Input frames of segment k: [*sa, *sb). */
static void segment(const nst_resample_plan *p, uint64_t in_frames, uint64_t k, uint64_t *sa,
                    uint64_t *sb)
{
    uint64_t s = k * p->seg_in, e = s + p->seg_in + p->margin;
    *sa = s > p->margin ? s - p->margin : 0;
    *sb = e < in_frames ? e : in_frames;
}

void nst_resample_needs(const nst_resample_plan *p, uint64_t in_frames, uint64_t a, uint64_t b,
                        uint64_t *ia, uint64_t *ib)
{
    if (p->identity) {
        *ia = a < in_frames ? a : in_frames;
        *ib = b < in_frames ? b : in_frames;
        return;
    }
    if (!p->seg_out) {
        *ia = 0, *ib = in_frames;
        return;
    }
    uint64_t x, y;
    segment(p, in_frames, a / p->seg_out, ia, &x);
    segment(p, in_frames, (b - 1) / p->seg_out, &y, ib);
}

typedef struct handle {
    soxr_t s;
    uint32_t in_rate, out_rate, planes;
    uint64_t used;
} handle;

struct nst_resampler {
    handle h[HANDLES];
    uint64_t clock;
    nst_buf scratch; /* one segment's output, planar */
};

int nst_resampler_create(nst_resampler **out)
{
    *out = calloc(1, sizeof **out);
    return *out ? 0 : nst_error(NOSTALL_E_NOMEM, "audio: out of memory");
}

void nst_resampler_free(nst_resampler *rs)
{
    if (!rs) return;
    for (int i = 0; i < HANDLES; i++)
        if (rs->h[i].s) soxr_delete(rs->h[i].s);
    nst_buf_free(&rs->scratch);
    free(rs);
}

static int get_handle(nst_resampler *rs, const nst_resample_plan *p, uint32_t planes, soxr_t *out,
                      const char *path)
{
    handle *h = NULL, *old = &rs->h[0];
    for (int i = 0; i < HANDLES; i++) {
        handle *c = &rs->h[i];
        if (c->s && c->in_rate == p->in_rate && c->out_rate == p->out_rate && c->planes == planes)
            h = c;
        if (!c->s || (old->s && c->used < old->used)) old = c;
    }
    if (!h) {
        soxr_error_t err = NULL;
        soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_S, SOXR_FLOAT32_S);
        soxr_quality_spec_t q = soxr_quality_spec(SOXR_HQ, 0);
        soxr_runtime_spec_t rt = soxr_runtime_spec(1);
        soxr_t s = soxr_create(p->in_rate, p->out_rate, planes, &err, &io, &q, &rt);
        if (!s || err) {
            if (s) soxr_delete(s);
            return nst_error(NOSTALL_E_UNSUPPORTED, "audio: %s: cannot resample %u to %u Hz: %s",
                             path, p->in_rate, p->out_rate, err ? err : "soxr_create failed");
        }
        if (old->s) soxr_delete(old->s);
        h = old;
        h->s = s;
        h->in_rate = p->in_rate, h->out_rate = p->out_rate, h->planes = planes;
    }
    h->used = ++rs->clock;
    *out = h->s;
    return 0;
}

/* Resample n input frames (in[q] + off) into rs->scratch, `cap` frames per
 * plane; returns the frames produced (at most cap) or a negative status. */
static int64_t run(soxr_t s, uint32_t planes, const float *const *in, uint64_t off, uint64_t n,
                   float *scratch, uint64_t cap, const char *path)
{
    const float *ip[PLANES_MAX];
    float *op[PLANES_MAX];
    uint64_t used = 0, made = 0;
    soxr_error_t err = soxr_clear(s);
    for (uint64_t calls = 0; !err && made < cap; calls++) {
        if (calls > n + cap + 16) { /* every call consumes or produces */
            err = "no progress";
            break;
        }
        size_t idone = 0, odone = 0;
        for (uint32_t q = 0; q < planes; q++) {
            ip[q] = in[q] + off + used;
            op[q] = scratch + (size_t)q * cap + made;
        }
        const int flush = used >= n;
        err = soxr_process(s, flush ? NULL : (soxr_in_t)ip, flush ? 0 : n - used,
                           flush ? NULL : &idone, (soxr_out_t)op, cap - made, &odone);
        used += idone;
        made += odone;
        if (flush && odone == 0) break;
    }
    if (err) return nst_error(NOSTALL_E_UNSUPPORTED, "audio: %s: resampling failed: %s", path, err);
    return (int64_t)made;
}

int nst_resample(nst_resampler *rs, const nst_resample_plan *p, uint64_t in_frames, uint32_t planes,
                 const float *const *in, uint64_t ia, uint64_t ib, uint64_t a, uint64_t b,
                 float *const *out, const char *path)
{
    if (planes == 0 || planes > PLANES_MAX || a > b || ib > in_frames || ia > ib)
        return nst_error(NOSTALL_E_INVALID, "audio: %s: bad resampling request", path);
    if (a == b) return 0;
    if (p->identity) {
        for (uint32_t q = 0; q < planes; q++)
            memcpy(out[q], in[q] + (a - ia), (b - a) * sizeof(float));
        return 0;
    }
    const uint64_t n_out = nst_resample_out_frames(p, in_frames);
    const uint64_t seg_out = p->seg_out ? p->seg_out : n_out;
    const uint64_t seg_in = p->seg_out ? p->seg_in : in_frames;
    soxr_t s = NULL;
    int rc = get_handle(rs, p, planes, &s, path);
    if (rc < 0) return rc;
    /* a segment's output: its margins' frames, its own, and a little more */
    const uint64_t cap = seg_out + 2 * (p->margin / p->li * p->lo) + 64;
    size_t bytes;
    if (nst_mul_overflow((size_t)cap, (size_t)planes * sizeof(float), &bytes))
        return nst_error(NOSTALL_E_FILE_TOO_LARGE, "audio: %s: too many samples", path);
    if ((rc = nst_buf_reserve(&rs->scratch, bytes)) < 0) return rc;
    float *scratch = (float *)rs->scratch.data;
    for (uint64_t k = a / seg_out; k * seg_out < b; k++) {
        uint64_t sa, sb;
        if (p->seg_out) {
            segment(p, in_frames, k, &sa, &sb);
        } else {
            sa = 0, sb = in_frames;
        }
        if (sa < ia || sb > ib)
            return nst_error(NOSTALL_E_INVALID, "audio: %s: resampling input missing", path);
        int64_t made = run(s, planes, in, sa - ia, sb - sa, scratch, cap, path);
        if (made < 0) return (int)made;
        const uint64_t skip = (k * seg_in - sa) / p->li * p->lo;
        const uint64_t s0 = k * seg_out;
        const uint64_t j0 = a > s0 ? a : s0, j1 = b < s0 + seg_out ? b : s0 + seg_out;
        for (uint32_t q = 0; q < planes; q++) {
            const float *src = scratch + (size_t)q * cap;
            for (uint64_t j = j0; j < j1; j++) {
                const uint64_t at = skip + (j - s0);
                out[q][j - a] = at < (uint64_t)made ? src[at] : 0.0f;
            }
        }
    }
    return 0;
}
