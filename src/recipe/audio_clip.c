/*
 * audio_clip.c — the task=audio item recipe: a window of clip_seconds of a clip,
 * resampled to sample_rate, as its waveform or its log-mel spectrogram, with
 * the clip's label.
 *
 * SOURCE  An AudioFolder (one sub-folder per class, classes sorted by name
 *   get labels 0..K-1: dataset/index.h's folder walk) or a list of paths or
 *   URLs with labels, as for classification. Every file of a class folder is
 *   an item (NST_INDEX_ANY_NAME); which are audio is decided by content
 *   (libsndfile): WAV, FLAC, Ogg Vorbis/Opus, MP3 and the rest libsndfile
 *   reads; any other file (a text file named .wav, garbage named .mp3, a
 *   README) is a bad item with its reason.
 *
 * FIELDS  "waveform" float32 [channels, W] or "mel" float32 [n_mels, F]
 *   ([channels, n_mels, F] keeping channels), W = round(clip_seconds x
 *   sample_rate) samples and F = nst_mel_frames(W); "length" int32: the
 *   window's samples that are the clip's (W, or fewer where the clip is
 *   shorter and the rest is zeros); "label" as the index gives it.
 *   channels: 1 with mixdown (the mean of the clip's channels), else the
 *   channel count of the first local item's header (every clip must have
 *   it: another count is a bad item).
 *
 * WINDOW  The clip resampled (augment/resample.h) is N samples. train: the
 *   window starts at s drawn uniformly in [0, N - W] from the stream
 *   hash(seed, epoch, item, NST_RNG_AUGMENT_COPY(copy)) (each echoed copy
 *   another window); eval: s = (N - W) / 2 (the centre, rounded down). A
 *   clip shorter than the window (N < W) starts at 0 and is followed by
 *   zeros (length = N). Features are computed on the window alone (its
 *   reflect padding reflects the window, as torchaudio on the cropped
 *   waveform).
 * MASKS  train, logmel: after the window, from the same stream, freq_masks
 *   frequency masks then time_masks time masks (SpecAugment), each a width
 *   drawn uniformly in [0, max] (max: freq_mask_max bands / time_mask_max
 *   frames, at most the size) and a start uniformly in [0, size - width];
 *   masked values are 0 (torchaudio's mask_value), in every channel.
 *
 * STAGES  make: open the clip (decode/audio.h), plan the window from the
 *   header's length, read only the input frames the window's resampling
 *   segments need (a seek for PCM and FLAC; from the first frame for other
 *   formats; the whole file for MP3 and streams of unknown length),
 *   resample those segments, compute the features. decode: the whole clip
 *   resampled (planar float32, the echo store's intermediate); transform:
 *   the window and features from it. Resampling is defined segment by
 *   segment, so make equals transform(decode) byte for byte.
 *
 * Workers call the stages concurrently, each with its own nst_recipe_worker
 * (reader, resampler, FFT plan, grow-only buffers); the recipe (and its mel
 * bank) is read-only after create.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "augment/mel.h"
#include "augment/resample.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/rng.h"
#include "decode/audio.h"
#include "recipe/recipe.h"
#include "source/http.h"
#include "source/reader.h"

typedef struct audio_recipe {
    nst_recipe base;
    uint64_t seed;
    int train, logmel;
    uint32_t rate, planes;
    uint64_t win;    /* W: samples of the window */
    uint64_t frames; /* F: mel frames            */
    uint32_t n_mels;
    uint32_t time_masks, time_mask_max, freq_masks, freq_mask_max;
    nst_audio_limits lim;
    nst_mel_bank *bank;
} audio_recipe;

struct nst_recipe_worker {
    const audio_recipe *r;
    nst_audio_reader *rd;
    nst_resampler *rs;
    nst_mel_worker *mel;
    nst_buf in;  /* input frames, planar          */
    nst_buf win; /* the window, planar (logmel)   */
};

/* What decode keeps in nst_decoded.meta. */
typedef struct clip_meta {
    uint64_t frames; /* resampled */
    uint32_t planes;
} clip_meta;

/* The window of use `copy` of an item whose resampled clip has n samples:
 * its start and the clip samples in it; rng continues for the masks. */
static void plan(const audio_recipe *r, const nst_item_ctx *c, uint64_t n, uint64_t *start,
                 uint64_t *valid, nst_rng *rng)
{
    nst_rng_seed(rng, nst_hash4(r->seed, c->epoch, c->index, NST_RNG_AUGMENT_COPY(c->copy)));
    *start = 0;
    if (n > r->win) *start = r->train ? nst_rng_below(rng, n - r->win + 1) : (n - r->win) / 2;
    *valid = n - *start < r->win ? n - *start : r->win;
}

/* Zero [from, size) of `len` runs of `size` floats spaced `stride` apart. */
static void zero_runs(float *x, uint64_t runs, uint64_t stride, uint64_t from, uint64_t to)
{
    for (uint64_t k = 0; k < runs; k++) memset(x + k * stride + from, 0, (to - from) * sizeof *x);
}

/* Features from the window (planes x W at `w`; for the waveform it is
 * already the field), the length and the label. */
static void features(nst_recipe_worker *wk, const nst_item_ctx *c, const float *w, uint64_t valid,
                     nst_rng *rng, nst_recipe_times *t)
{
    const audio_recipe *r = wk->r;
    uint64_t t0 = nst_now_ns();
    if (r->logmel) {
        float *out = (float *)c->dst[0];
        const uint64_t plane = (uint64_t)r->n_mels * r->frames;
        for (uint32_t p = 0; p < r->planes; p++)
            nst_mel_power(wk->mel, w + p * r->win, r->win, out + p * plane);
        nst_mel_db(r->bank, out, plane * r->planes);
        if (r->train) {
            for (uint32_t k = 0; k < r->freq_masks; k++) {
                uint64_t max = r->freq_mask_max < r->n_mels ? r->freq_mask_max : r->n_mels;
                uint64_t width = nst_rng_below(rng, max + 1);
                uint64_t s = nst_rng_below(rng, r->n_mels - width + 1);
                for (uint32_t p = 0; p < r->planes; p++)
                    memset(out + p * plane + s * r->frames, 0, width * r->frames * sizeof *out);
            }
            for (uint32_t k = 0; k < r->time_masks; k++) {
                uint64_t max = r->time_mask_max < r->frames ? r->time_mask_max : r->frames;
                uint64_t width = nst_rng_below(rng, max + 1);
                uint64_t s = nst_rng_below(rng, r->frames - width + 1);
                zero_runs(out, (uint64_t)r->planes * r->n_mels, r->frames, s, s + width);
            }
        }
    }
    int32_t len = (int32_t)valid;
    memcpy(c->dst[1], &len, sizeof len);
    nst_label_write(&r->base, c);
    t->augment_ns += nst_now_ns() - t0;
    t->augment_items++;
    t->augment_bytes += r->base.item_bytes;
}

/* The window's planes: the waveform field itself, or the worker's buffer. */
static float *window_of(nst_recipe_worker *w, const nst_item_ctx *c)
{
    return w->r->logmel ? (float *)w->win.data : (float *)c->dst[0];
}

static int make(nst_recipe_worker *w, const nst_item_ctx *c, const uint8_t *data, size_t len,
                nst_recipe_times *t)
{
    const audio_recipe *r = w->r;
    nst_msg_path mp;
    const char *path = nst_msg_path_of(&mp, c->path);
    nst_audio_info info;
    nst_resample_plan rp;
    nst_rng rng;
    uint64_t t0 = nst_now_ns(), n_in, n, start = 0, valid = 0, ia = 0, ib = 0;
    float *in[1024], *win[1024], *wbase = window_of(w, c);
    const float *cin[1024];
    int rc = nst_audio_open(w->rd, data, len, path, &r->lim, &info);
    if (rc < 0) goto out;
    nst_resample_plan_init(&rp, info.rate, r->rate);
    if (info.access == NST_AUDIO_WHOLE) {
        if ((rc = nst_audio_read_all(w->rd, &w->in, &n_in)) < 0) goto out;
        ib = n_in;
    } else {
        n_in = info.frames;
    }
    n = nst_resample_out_frames(&rp, n_in);
    plan(r, c, n, &start, &valid, &rng);
    for (uint32_t p = 0; p < r->planes; p++) win[p] = wbase + p * r->win;
    if (valid) {
        if (info.access != NST_AUDIO_WHOLE) {
            size_t bytes;
            nst_resample_needs(&rp, n_in, start, start + valid, &ia, &ib);
            if (nst_mul_overflow((size_t)(ib - ia), (size_t)r->planes * sizeof(float), &bytes)) {
                rc = nst_error(NOSTALL_E_FILE_TOO_LARGE, "audio: %s: too many samples", path);
                goto out;
            }
            if ((rc = nst_buf_reserve(&w->in, bytes ? bytes : 1)) < 0) goto out;
            for (uint32_t p = 0; p < r->planes; p++) in[p] = (float *)w->in.data + p * (ib - ia);
            if ((rc = nst_audio_check_end(w->rd)) < 0 ||
                (rc = nst_audio_read(w->rd, ia, ib - ia, in)) < 0)
                goto out;
        } else {
            for (uint32_t p = 0; p < r->planes; p++) in[p] = (float *)w->in.data + p * n_in;
        }
        for (uint32_t p = 0; p < r->planes; p++) cin[p] = in[p];
        rc = nst_resample(w->rs, &rp, n_in, r->planes, cin, ia, ib, start, start + valid, win, path);
        if (rc < 0) goto out;
    }
    zero_runs(wbase, r->planes, r->win, valid, r->win);
    t->decode_items++;
    t->decode_pixels += (ib - ia) * info.channels;
out:
    nst_audio_close(w->rd);
    t->decode_ns += nst_now_ns() - t0;
    if (rc < 0) return rc;
    features(w, c, wbase, valid, &rng, t);
    return 0;
}

/* The whole clip resampled into out->buf (planar); meta: clip_meta. */
static int decode(nst_recipe_worker *w, const nst_item_ctx *c, const uint8_t *data, size_t len,
                  nst_decoded *out, nst_recipe_times *t)
{
    const audio_recipe *r = w->r;
    nst_msg_path mp;
    const char *path = nst_msg_path_of(&mp, c->path);
    nst_audio_info info;
    nst_resample_plan rp;
    uint64_t t0 = nst_now_ns(), n_in = 0, n = 0;
    size_t bytes = 0;
    const float *cin[1024];
    float *o[1024];
    int rc = nst_audio_open(w->rd, data, len, path, &r->lim, &info);
    if (rc == 0) rc = nst_audio_read_all(w->rd, &w->in, &n_in);
    if (rc == 0) {
        nst_resample_plan_init(&rp, info.rate, r->rate);
        n = nst_resample_out_frames(&rp, n_in);
        if (nst_mul_overflow((size_t)n, (size_t)r->planes * sizeof(float), &bytes))
            rc = nst_error(NOSTALL_E_FILE_TOO_LARGE, "audio: %s: too many samples", path);
    }
    if (rc == 0) rc = nst_buf_reserve(&out->buf, bytes ? bytes : 1);
    if (rc == 0) {
        for (uint32_t p = 0; p < r->planes; p++) {
            cin[p] = (const float *)w->in.data + p * n_in;
            o[p] = (float *)out->buf.data + p * n;
        }
        rc = nst_resample(w->rs, &rp, n_in, r->planes, cin, 0, n_in, 0, n, o, path);
    }
    nst_audio_close(w->rd);
    if (rc == 0) {
        clip_meta m = {.frames = n, .planes = r->planes};
        _Static_assert(sizeof m <= sizeof out->meta, "clip_meta fits nst_decoded.meta");
        memcpy(out->meta, &m, sizeof m);
        out->len = bytes;
        t->decode_items++;
        t->decode_pixels += n_in * info.channels;
    }
    t->decode_ns += nst_now_ns() - t0;
    return rc;
}

static int transform(nst_recipe_worker *w, const nst_item_ctx *c, const nst_decoded *in,
                     nst_recipe_times *t)
{
    const audio_recipe *r = w->r;
    clip_meta m;
    nst_rng rng;
    uint64_t start, valid;
    memcpy(&m, in->meta, sizeof m);
    plan(r, c, m.frames, &start, &valid, &rng);
    float *wbase = window_of(w, c);
    const float *clip = (const float *)in->buf.data;
    for (uint32_t p = 0; p < r->planes; p++)
        memcpy(wbase + p * r->win, clip + p * m.frames + start, valid * sizeof(float));
    zero_runs(wbase, r->planes, r->win, valid, r->win);
    features(w, c, wbase, valid, &rng, t);
    return 0;
}

static void worker_free(nst_recipe_worker *w)
{
    if (!w) return;
    nst_audio_reader_free(w->rd);
    nst_resampler_free(w->rs);
    nst_mel_worker_free(w->mel);
    nst_buf_free(&w->in);
    nst_buf_free(&w->win);
    free(w);
}

static int worker_create(const nst_recipe *base, nst_recipe_worker **out)
{
    const audio_recipe *r = (const audio_recipe *)base;
    nst_recipe_worker *w = calloc(1, sizeof *w);
    int rc;
    *out = NULL;
    if (!w) return nst_error(NOSTALL_E_NOMEM, "recipe: out of memory");
    w->r = r;
    if ((rc = nst_audio_reader_create(&w->rd)) < 0 || (rc = nst_resampler_create(&w->rs)) < 0 ||
        (r->logmel && (rc = nst_mel_worker_create(&w->mel, r->bank)) < 0) ||
        (r->logmel && (rc = nst_buf_reserve(&w->win, r->win * r->planes * sizeof(float))) < 0)) {
        worker_free(w);
        return rc;
    }
    *out = w;
    return 0;
}

static void recipe_free(nst_recipe *base)
{
    audio_recipe *r = (audio_recipe *)base;
    nst_mel_bank_free(r->bank);
    free(r);
}

static const nst_recipe_ops audio_ops = {
    .name = "audio",
    .worker_create = worker_create,
    .worker_free = worker_free,
    .make = make,
    .decode = decode,
    .transform = transform,
    .free = recipe_free,
};

/* Keeping channels: the first local item's count. */
static int probe_channels(audio_recipe *r, const char *source)
{
    const nst_index *ix = r->base.index;
    for (uint64_t i = 0; i < nst_index_count(ix); i++) {
        const char *p = nst_index_path(ix, i);
        if (nst_http_handles(p)) continue;
        uint32_t ch;
        int rc = nst_audio_probe_channels(p, &ch);
        if (rc < 0)
            return nst_error(rc,
                             "mixdown=0: the channel count comes from the first "
                             "item's header: %s",
                             nostall_last_error());
        if (ch > 1024)
            return nst_error(NOSTALL_E_UNSUPPORTED, "mixdown=0: %s has %u channels", p, ch);
        r->planes = ch;
        return 0;
    }
    return nst_error(NOSTALL_E_UNSUPPORTED,
                     "mixdown=0: %s: the channel count comes from the first local item's header, "
                     "and every item is a URL (mixdown=1 needs none)",
                     source);
}

static int declare(audio_recipe *r, const nst_optval *v)
{
    nst_field_decl *f = &r->base.fields[0], *len = &r->base.fields[1];
    memset(f, 0, 2 * sizeof *f);
    f->dtype = NOSTALL_DTYPE_FLOAT32;
    f->shape_field = -1;
    if (r->logmel) {
        nst_mel_spec s = {
            .sample_rate = r->rate,
            .n_fft = (uint32_t)v[NOSTALL_OPT_N_FFT].u,
            .hop = (uint32_t)v[NOSTALL_OPT_HOP].u,
            .win = (uint32_t)v[NOSTALL_OPT_WIN].u,
            .n_mels = (uint32_t)v[NOSTALL_OPT_N_MELS].u,
            .f_min = v[NOSTALL_OPT_F_MIN].d,
            .f_max = v[NOSTALL_OPT_F_MAX].d,
            .power = v[NOSTALL_OPT_MEL_POWER].d,
            .top_db = v[NOSTALL_OPT_TOP_DB].d,
            .slaney = v[NOSTALL_OPT_MEL_SCALE].u == NOSTALL_MEL_SLANEY,
        };
        int rc = nst_mel_bank_create(&r->bank, &s);
        if (rc < 0) return rc;
        if (r->win <= nst_mel_min_samples(r->bank))
            return nst_error(NOSTALL_E_OPTION,
                             "clip_seconds: a window of %llu samples (clip_seconds x sample_rate) "
                             "must be longer than n_fft / 2 = %u (the STFT's reflect padding)",
                             (unsigned long long)r->win, nst_mel_min_samples(r->bank));
        r->n_mels = s.n_mels;
        r->frames = nst_mel_frames(r->bank, r->win);
        snprintf(f->name, sizeof f->name, "mel");
        f->ndim = r->planes > 1 ? 3 : 2;
        uint64_t *sh = f->shape;
        if (r->planes > 1) *sh++ = r->planes;
        sh[0] = r->n_mels, sh[1] = r->frames;
    } else {
        snprintf(f->name, sizeof f->name, "waveform");
        f->ndim = 2;
        f->shape[0] = r->planes, f->shape[1] = r->win;
    }
    snprintf(len->name, sizeof len->name, "length");
    len->dtype = NOSTALL_DTYPE_INT32;
    len->ndim = 0;
    len->shape_field = -1;
    r->base.nfields = 2;
    int rc = nst_field_finish(f);
    return rc < 0 ? rc : nst_field_finish(len);
}

int nst_audio_clip_create(nst_recipe **out, const nostall_config *cfg, const char *source)
{
    const nst_optval *v = cfg->v;
    int rc;
    *out = NULL;
    audio_recipe *r = calloc(1, sizeof *r);
    if (!r) return nst_error(NOSTALL_E_NOMEM, "recipe: out of memory");
    r->base.ops = &audio_ops;
    if ((rc = nst_index_build_cfg(&r->base.index, source, NST_INDEX_ANY_NAME, cfg)) < 0) goto fail;
    nst_recipe_items_from_index(&r->base);
    r->seed = v[NOSTALL_OPT_SEED].u;
    r->train = v[NOSTALL_OPT_MODE].u == NOSTALL_MODE_TRAIN;
    r->logmel = v[NOSTALL_OPT_AUDIO_FEATURES].u == NOSTALL_AUDIO_LOGMEL;
    r->rate = (uint32_t)v[NOSTALL_OPT_SAMPLE_RATE].u;
    double w = floor(v[NOSTALL_OPT_CLIP_SECONDS].d * r->rate + 0.5);
    r->win = w < 1 ? 1 : (uint64_t)w;
    r->time_masks = (uint32_t)v[NOSTALL_OPT_TIME_MASKS].u;
    r->time_mask_max = (uint32_t)v[NOSTALL_OPT_TIME_MASK_MAX].u;
    r->freq_masks = (uint32_t)v[NOSTALL_OPT_FREQ_MASKS].u;
    r->freq_mask_max = (uint32_t)v[NOSTALL_OPT_FREQ_MASK_MAX].u;
    r->lim.max_seconds = v[NOSTALL_OPT_MAX_AUDIO_SECONDS].d;
    r->planes = 1;
    if (!v[NOSTALL_OPT_MIXDOWN].u) {
        if ((rc = probe_channels(r, source)) < 0) goto fail;
        r->lim.channels = r->planes;
    }
    if ((rc = declare(r, v)) < 0 || (rc = nst_label_declare(&r->base, source)) < 0) goto fail;
    r->base.item_bytes = 0;
    for (uint32_t f = 0; f < r->base.nfields; f++)
        r->base.item_bytes += r->base.fields[f].item_bytes;
    r->base.image_field = 0;
    *out = &r->base;
    return 0;
fail:
    nst_recipe_free(&r->base);
    return rc;
}
