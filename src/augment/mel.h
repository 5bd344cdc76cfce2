/*
 * mel.h — log-mel spectrograms with FFTW3 (single precision), matching
 * torchaudio 0.13's MelSpectrogram followed by AmplitudeToDB:
 *
 *   frames     torch.stft(center=True, pad_mode="reflect"): the signal of
 *              T samples is padded by n_fft / 2 reflected samples on each
 *              side (T must exceed n_fft / 2), frame t covers padded
 *              samples [t * hop, t * hop + n_fft): 1 + (T + 2 * (n_fft / 2)
 *              - n_fft) / hop frames;
 *   window     Hann, periodic (0.5 - 0.5 cos(2 pi i / win)), of win <=
 *              n_fft samples centred in the n_fft (zeros around);
 *   spectrum   one-sided: n_fft / 2 + 1 bins, |X|^power (power 2: the
 *              power spectrum; not normalized);
 *   mel bank   n_mels triangles between f_min and f_max evenly spaced on
 *              the HTK scale (2595 log10(1 + f / 700)) or Slaney's (linear
 *              below 1 kHz, logarithmic above) with Slaney's area
 *              normalization (2 / (f[m + 2] - f[m])), over bins at
 *              linspace(0, sample_rate // 2, n_fft / 2 + 1) Hz
 *              (torchaudio.functional.melscale_fbanks);
 *   decibels   multiplier * log10(max(x, 1e-10)) (reference 1); with top_db
 *              > 0 every value of an item (all its planes) is raised to at
 *              least the item's largest minus top_db. multiplier = 20 /
 *              power: 10 for the power spectrum (AmplitudeToDB
 *              stype="power"), 20 for magnitudes (stype="magnitude").
 *
 * Computed in float32 (the bank and window in double, then rounded), so
 * results match torchaudio's float32 to ~1e-6 relative; tests/test_audio.c and
 * tests/python/test_audio.py hold it to 1e-3.
 *
 * THREADS  A bank is built once (per recipe) and read-only after: any
 * thread may use it. A worker (its FFTW plan and buffers) belongs to one
 * thread. FFTW's planner is not thread-safe: plans are made and destroyed
 * under a process-wide mutex here (FFTW_ESTIMATE: the same plan, so the
 * same bytes, for every worker; executing a plan needs no lock).
 */
#ifndef NST_AUGMENT_MEL_H
#define NST_AUGMENT_MEL_H

#include <stdint.h>

typedef struct nst_mel_spec {
    uint32_t sample_rate, n_fft, hop, win, n_mels; /* win 0: n_fft */
    double f_min, f_max;                           /* f_max 0: sample_rate // 2 */
    double power, top_db;                          /* top_db 0: none */
    int slaney;                                    /* 0: HTK, no norm */
} nst_mel_spec;

typedef struct nst_mel_bank nst_mel_bank;
typedef struct nst_mel_worker nst_mel_worker;

/* E_OPTION naming the option for what torchaudio refuses too (win > n_fft,
 * f_min >= f_max). */
int nst_mel_bank_create(nst_mel_bank **out, const nst_mel_spec *spec);
void nst_mel_bank_free(nst_mel_bank *b);
/* Frames of a signal of `samples` (> n_fft / 2). */
uint64_t nst_mel_frames(const nst_mel_bank *b, uint64_t samples);
/* The largest n_fft / 2 (signals must be longer). */
uint32_t nst_mel_min_samples(const nst_mel_bank *b);

int nst_mel_worker_create(nst_mel_worker **out, const nst_mel_bank *b);
void nst_mel_worker_free(nst_mel_worker *w);
/* The mel spectrogram (|X|^power through the bank, before decibels) of
 * x[0, samples) into out[n_mels][frames]. */
void nst_mel_power(nst_mel_worker *w, const float *x, uint64_t samples, float *out);
/* Decibels in place over n values (one item: all its planes), with top_db. */
void nst_mel_db(const nst_mel_bank *b, float *x, uint64_t n);

#endif
