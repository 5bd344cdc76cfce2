/*
 * resample.h — sample-rate conversion with libsoxr, defined piecewise so that
 * any part of a clip can be computed alone, with the same bytes as the whole.
 *
 * Quality: soxr's HQ recipe (SOXR_HQ: 20-bit precision, linear phase,
 * passband to 0.913 of the lower Nyquist frequency, stopband from 1), single
 * precision, one thread; soxr compensates its filter delay, so output frame j
 * is the signal at input time j * in_rate / out_rate.
 *
 * Segments. With g = gcd(in_rate, out_rate), li = in_rate / g and lo =
 * out_rate / g, the output is cut into segments of seg_out frames (the
 * smallest multiple of lo that is at least 8192), segment k holding output
 * frames [k * seg_out, (k + 1) * seg_out), which start exactly at input frame
 * k * seg_in (seg_in = seg_out / lo * li). Segment k is what a freshly
 * cleared soxr resampler gives for input frames [k * seg_in - margin,
 * (k + 1) * seg_in + margin) (clipped to the clip), with margin = 384 frames
 * of the lower rate rounded up to a multiple of li, the outputs that belong
 * to the margins dropped. Its bytes are a pure function of those input
 * frames, so the window a crop needs is computed from the input frames
 * around it alone (what a seek reads) and equals the same window of the
 * whole clip's resampling, byte for byte. The margin spans soxr's filter,
 * so the pieces agree with resampling the clip in one pass to float
 * rounding (tests/test_audio.c: within 1e-6 on white noise). Ratios whose
 * li exceeds 4096 (rates with a tiny common divisor) are one segment: the
 * whole clip.
 *
 * Length: a clip of n frames gives ceil(n * out_rate / in_rate) frames (as
 * torchaudio's Resample); frames soxr does not deliver at the very end are 0.
 * Equal rates copy the samples.
 *
 * THREADS  A resampler (soxr handles by rates and planes, scratch) belongs to
 * one worker; plans are plain values.
 */
#ifndef NST_AUGMENT_RESAMPLE_H
#define NST_AUGMENT_RESAMPLE_H

#include <stdint.h>

typedef struct nst_resample_plan {
    uint32_t in_rate, out_rate;
    int identity;             /* equal rates                              */
    uint64_t li, lo;          /* rates over their gcd                     */
    uint64_t seg_in, seg_out; /* frames of a segment; 0: one segment      */
    uint64_t margin;          /* input frames on each side of a segment   */
} nst_resample_plan;

void nst_resample_plan_init(nst_resample_plan *p, uint32_t in_rate, uint32_t out_rate);
/* Output frames of a clip of in_frames: ceil(in_frames * out / in). */
uint64_t nst_resample_out_frames(const nst_resample_plan *p, uint64_t in_frames);
/* The input frames [*ia, *ib) that output frames [a, b) (a < b <= the
 * output length) are computed from. */
void nst_resample_needs(const nst_resample_plan *p, uint64_t in_frames, uint64_t a, uint64_t b,
                        uint64_t *ia, uint64_t *ib);

typedef struct nst_resampler nst_resampler;

int nst_resampler_create(nst_resampler **out);
void nst_resampler_free(nst_resampler *rs);

/* Output frames [a, b) of a clip of in_frames into out[p][0, b - a), for
 * each of `planes` planes, from input frames [ia, ib) held in
 * in[p][0, ib - ia), which must cover nst_resample_needs(a, b). `path` names the
 * clip in messages. */
int nst_resample(nst_resampler *rs, const nst_resample_plan *p, uint64_t in_frames, uint32_t planes,
                 const float *const *in, uint64_t ia, uint64_t ib, uint64_t a, uint64_t b,
                 float *const *out, const char *path);

#endif
