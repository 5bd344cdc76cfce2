/*
 * mel.c — STFT, mel filter bank and decibels (see mel.h). The only module
 * that includes fftw3.h.
 *
 * DESIGN  The bank (window, each mel triangle as its run of non-zero
 * weights) is computed once from the options. Per frame, a worker fills its
 * FFTW input with the windowed, reflect-padded samples, runs its r2c plan,
 * folds the bins into |X|^power, and each triangle sums its run of bins, in
 * a fixed order (the same bytes whatever the thread).
 *
 * THREADS  See mel.h: plan creation and destruction hold `planner_mu`.
 */
#include <fftw3.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "augment/mel.h"
#include "common/error.h"

struct nst_mel_bank {
    nst_mel_spec spec;
    uint32_t n_freqs;
    float *window;      /* n_fft: the Hann window centred, zeros around */
    uint32_t w0, w1;    /* its non-zero span                            */
    uint32_t *lo, *len; /* per mel band: first bin, bins                */
    uint32_t *off;      /* per mel band: offset of its weights          */
    float *weights;
    float multiplier;
};

struct nst_mel_worker {
    const nst_mel_bank *b;
    float *in;          /* n_fft (fftwf_malloc: aligned)   */
    fftwf_complex *out; /* n_freqs                          */
    float *pow;         /* n_freqs                          */
    fftwf_plan plan;
};

static pthread_mutex_t planner_mu = PTHREAD_MUTEX_INITIALIZER;

static double hz_to_mel(double f, int slaney)
{
    if (!slaney) return 2595.0 * log10(1.0 + f / 700.0);
    const double f_sp = 200.0 / 3, min_log_hz = 1000.0, min_log_mel = min_log_hz / f_sp,
                 logstep = log(6.4) / 27.0;
    return f >= min_log_hz ? min_log_mel + log(f / min_log_hz) / logstep : f / f_sp;
}

static double mel_to_hz(double m, int slaney)
{
    if (!slaney) return 700.0 * (pow(10.0, m / 2595.0) - 1.0);
    const double f_sp = 200.0 / 3, min_log_hz = 1000.0, min_log_mel = min_log_hz / f_sp,
                 logstep = log(6.4) / 27.0;
    return m >= min_log_mel ? min_log_hz * exp(logstep * (m - min_log_mel)) : f_sp * m;
}

void nst_mel_bank_free(nst_mel_bank *b)
{
    if (!b) return;
    free(b->window);
    free(b->lo);
    free(b->len);
    free(b->off);
    free(b->weights);
    free(b);
}

int nst_mel_bank_create(nst_mel_bank **out, const nst_mel_spec *spec)
{
    *out = NULL;
    nst_mel_spec s = *spec;
    if (!s.win) s.win = s.n_fft;
    if (!(s.f_max > 0)) s.f_max = (double)(s.sample_rate / 2);
    if (s.win > s.n_fft)
        return nst_error(NOSTALL_E_OPTION, "win: %u is longer than n_fft (%u)", s.win, s.n_fft);
    if (!(s.f_min < s.f_max))
        return nst_error(NOSTALL_E_OPTION, "f_min (%g Hz) must be below f_max (%g Hz%s)", s.f_min,
                         s.f_max, spec->f_max > 0 ? "" : ": sample_rate / 2");
    if (!s.n_fft || !s.hop || !s.n_mels || !(s.power > 0))
        return nst_error(NOSTALL_E_OPTION,
                         "audio: n_fft, hop, n_mels and mel_power must be positive");
    nst_mel_bank *b = calloc(1, sizeof *b);
    if (!b) return nst_error(NOSTALL_E_NOMEM, "audio: out of memory");
    b->spec = s;
    b->n_freqs = s.n_fft / 2 + 1;
    b->multiplier = (float)(20.0 / s.power);
    const uint32_t nf = b->n_freqs, nm = s.n_mels;
    b->window = calloc(s.n_fft, sizeof *b->window);
    b->lo = calloc(nm, sizeof *b->lo);
    b->len = calloc(nm, sizeof *b->len);
    b->off = calloc(nm, sizeof *b->off);
    double *fpts = malloc((nm + 2) * sizeof *fpts), *freqs = malloc(nf * sizeof *freqs);
    b->weights = malloc((size_t)nm * nf * sizeof *b->weights);
    if (!b->window || !b->lo || !b->len || !b->off || !fpts || !freqs || !b->weights) {
        free(fpts);
        free(freqs);
        nst_mel_bank_free(b);
        return nst_error(NOSTALL_E_NOMEM, "audio: out of memory");
    }
    /* torch.hann_window(win, periodic=True), padded to n_fft in the middle */
    b->w0 = (s.n_fft - s.win) / 2;
    b->w1 = b->w0 + s.win;
    for (uint32_t i = 0; i < s.win; i++)
        b->window[b->w0 + i] = (float)(0.5 - 0.5 * cos(2.0 * M_PI * i / s.win));
    /* melscale_fbanks: bins at linspace(0, sr // 2, n_freqs), triangles at
     * the mel points linspace(mel(f_min), mel(f_max), n_mels + 2) */
    const double top = (double)(s.sample_rate / 2);
    for (uint32_t f = 0; f < nf; f++) freqs[f] = nf > 1 ? top * f / (nf - 1) : 0;
    const double m0 = hz_to_mel(s.f_min, s.slaney), m1 = hz_to_mel(s.f_max, s.slaney);
    for (uint32_t i = 0; i < nm + 2; i++)
        fpts[i] = mel_to_hz(m0 + (m1 - m0) * i / (nm + 1), s.slaney);
    size_t used = 0;
    for (uint32_t m = 0; m < nm; m++) {
        const double dl = fpts[m + 1] - fpts[m], du = fpts[m + 2] - fpts[m + 1];
        const double norm = s.slaney ? 2.0 / (fpts[m + 2] - fpts[m]) : 1.0;
        uint32_t first = nf, last = 0;
        for (uint32_t f = 0; f < nf; f++) {
            double down = (freqs[f] - fpts[m]) / dl, up = (fpts[m + 2] - freqs[f]) / du;
            double w = down < up ? down : up;
            if (w > 0) {
                if (first == nf) first = f;
                last = f;
            }
        }
        b->off[m] = (uint32_t)used;
        if (first == nf) continue; /* an empty band (torchaudio warns): zeros */
        b->lo[m] = first;
        b->len[m] = last - first + 1;
        for (uint32_t f = first; f <= last; f++) {
            double down = (freqs[f] - fpts[m]) / dl, up = (fpts[m + 2] - freqs[f]) / du;
            double w = down < up ? down : up;
            b->weights[used++] = w > 0 ? (float)(w * norm) : 0.0f;
        }
    }
    free(fpts);
    free(freqs);
    *out = b;
    return 0;
}

uint64_t nst_mel_frames(const nst_mel_bank *b, uint64_t samples)
{
    const uint32_t n = b->spec.n_fft;
    return 1 + (samples + 2 * (uint64_t)(n / 2) - n) / b->spec.hop;
}

uint32_t nst_mel_min_samples(const nst_mel_bank *b) { return b->spec.n_fft / 2; }

void nst_mel_worker_free(nst_mel_worker *w)
{
    if (!w) return;
    pthread_mutex_lock(&planner_mu);
    if (w->plan) fftwf_destroy_plan(w->plan);
    fftwf_free(w->in);
    fftwf_free(w->out);
    pthread_mutex_unlock(&planner_mu);
    free(w->pow);
    free(w);
}

int nst_mel_worker_create(nst_mel_worker **out, const nst_mel_bank *b)
{
    nst_mel_worker *w = calloc(1, sizeof *w);
    *out = NULL;
    if (!w) return nst_error(NOSTALL_E_NOMEM, "audio: out of memory");
    w->b = b;
    const int n = (int)b->spec.n_fft;
    w->pow = malloc(b->n_freqs * sizeof *w->pow);
    pthread_mutex_lock(&planner_mu);
    w->in = fftwf_malloc((size_t)n * sizeof *w->in);
    w->out = fftwf_malloc(b->n_freqs * sizeof *w->out);
    if (w->in && w->out) w->plan = fftwf_plan_dft_r2c_1d(n, w->in, w->out, FFTW_ESTIMATE);
    pthread_mutex_unlock(&planner_mu);
    if (!w->pow || !w->plan) {
        nst_mel_worker_free(w);
        return nst_error(NOSTALL_E_NOMEM, "audio: cannot plan an FFT of %d points", n);
    }
    *out = w;
    return 0;
}

void nst_mel_power(nst_mel_worker *w, const float *x, uint64_t samples, float *out)
{
    const nst_mel_bank *b = w->b;
    const nst_mel_spec *s = &b->spec;
    const uint64_t frames = nst_mel_frames(b, samples), pad = s->n_fft / 2;
    const int64_t T = (int64_t)samples;
    const uint32_t nf = b->n_freqs, nm = s->n_mels;
    const int p2 = s->power == 2.0, p1 = s->power == 1.0;
    const float pw = (float)s->power;
    for (uint64_t t = 0; t < frames; t++) {
        const int64_t base = (int64_t)(t * s->hop) - (int64_t)pad;
        for (uint32_t i = b->w0; i < b->w1; i++) {
            int64_t j = base + i;
            if (j < 0)
                j = -j; /* reflect, without the edge */
            else if (j >= T)
                j = 2 * (T - 1) - j;
            w->in[i] = b->window[i] * x[j];
        }
        /* zeros outside the window (FFTW may overwrite nothing of `in` in
         * r2c out-of-place; set them every frame anyway) */
        for (uint32_t i = 0; i < b->w0; i++) w->in[i] = 0;
        for (uint32_t i = b->w1; i < s->n_fft; i++) w->in[i] = 0;
        fftwf_execute(w->plan);
        for (uint32_t f = 0; f < nf; f++) {
            const float re = w->out[f][0], im = w->out[f][1], p = re * re + im * im;
            w->pow[f] = p2 ? p : p1 ? sqrtf(p) : powf(sqrtf(p), pw);
        }
        for (uint32_t m = 0; m < nm; m++) {
            const float *wt = b->weights + b->off[m], *pp = w->pow + b->lo[m];
            float sum = 0;
            for (uint32_t k = 0; k < b->len[m]; k++) sum += wt[k] * pp[k];
            out[m * frames + t] = sum;
        }
    }
}

void nst_mel_db(const nst_mel_bank *b, float *x, uint64_t n)
{
    const float k = b->multiplier;
    float peak = -INFINITY;
    for (uint64_t i = 0; i < n; i++) {
        float v = x[i] > 1e-10f ? x[i] : 1e-10f;
        x[i] = k * log10f(v);
        if (x[i] > peak) peak = x[i];
    }
    if (b->spec.top_db > 0) {
        const float floor_db = peak - (float)b->spec.top_db;
        for (uint64_t i = 0; i < n; i++)
            if (x[i] < floor_db) x[i] = floor_db;
    }
}
