/*
 * test_audio.c — task=audio from its parts to the loader:
 *   - resampling (augment/resample.h): the output length is ceil(n * out /
 *     in); any window computed from only the input frames nst_resample_needs
 *     names equals the same window of the whole clip byte for byte; the
 *     whole clip agrees with one soxr pass over it within 1e-6 (white noise,
 *     downsampling, upsampling, a ratio with a large li: one segment);
 *   - the mel spectrogram (augment/mel.h) against an independent double
 *     precision reference written here (a naive DFT, the HTK and Slaney
 *     banks from their formulas): within 1e-4 relative on every bin within
 *     60 dB of the peak, frames = 1 + T / hop, top_db clamps;
 *   - decoding (decode/audio.h): WAV (16-bit, float), FLAC, MP3, Ogg,
 *     stereo (mixdown is the mean); reading a window equals the same frames
 *     of a whole read; the access kind of each format; bad clips (truncated
 *     FLAC, a WAV header claiming 2^31 frames, a WAV data chunk longer than
 *     the file, a zero-length file, text named .wav, garbage named .mp3, an
 *     MP3 cut short, too long for max_audio_seconds, another channel count,
 *     a float WAV/AIFF or double WAV holding NaN, -inf, 1e30 or 1001 far
 *     from the window read) are errors of the documented kind naming the
 *     file (and the bad sample's frame); opens failing in
 *     four threads at once each give their own file's reason (libsndfile
 *     keeps it in process-wide variables);
 *   - the recipe: make == transform(decode) byte for byte for every clip,
 *     train and eval, waveform and log-mel, mixdown and kept channels, copies
 *     0..2; the window starts where the documented rule says (a float WAV
 *     holding its own sample index); shorter clips are zero-padded with
 *     their length; SpecAugment masks zero exactly the bands and frames the
 *     stream draws, nothing else changes;
 *   - the loader: the same checksum for 1, 2 and 3 threads; exact resume
 *     mid-epoch; the MinIO cache's second epoch gives the same bytes
 *     without storage reads; bad files are counted skips with their
 *     reasons; option errors at create.
 */
#include <math.h>
#include <pthread.h>
#include <sndfile.h>
#include <soxr.h>
#include <sys/stat.h>

#include "augment/mel.h"
#include "augment/resample.h"
#include "check.h"
#include "common/config.h"
#include "common/error.h"
#include "common/rng.h"
#include "decode/audio.h"
#include "recipe/recipe.h"

static const char *dir;

/* --- helpers ---------------------------------------------------------------- */

static uint64_t lcg = 12345;
static double urand(void) /* [0, 1) */
{
    lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(lcg >> 11) * (1.0 / 9007199254740992.0);
}

/* Write n frames of `ch` interleaved channels at `rate` to dir/name. */
static const char *write_clip(const char *name, int format, int rate, int ch, const float *x, long n)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *slash = strrchr(path, '/');
    *slash = 0;
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", path);
    if (system(cmd) != 0) exit(1);
    *slash = '/';
    SF_INFO si = {.samplerate = rate, .channels = ch, .format = format};
    SNDFILE *sf = sf_open(path, SFM_WRITE, &si);
    if (!sf) {
        fprintf(stderr, "cannot write %s: %s\n", path, sf_strerror(NULL));
        exit(1);
    }
    if (sf_writef_float(sf, x, n) != n) exit(1);
    sf_close(sf);
    return path;
}

/* A tone with a little noise, n frames, ch channels (the second half as
 * loud as the first). */
static float *tone(long n, int ch, double f, int rate)
{
    float *x = malloc((size_t)n * ch * sizeof *x);
    for (long i = 0; i < n; i++)
        for (int c = 0; c < ch; c++)
            x[i * ch + c] =
                (float)((0.4 * sin(2 * M_PI * f * i / rate) + 0.05 * (urand() - 0.5)) / (c + 1));
    return x;
}

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *d = malloc(n > 0 ? (size_t)n : 1);
    *len = fread(d, 1, (size_t)n, f);
    fclose(f);
    return d;
}

static void put_file(const char *path, const void *d, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(d, 1, n, f) != n) exit(1);
    fclose(f);
}

static nostall_config *cfg_of(const char *kv[][2], int n)
{
    nostall_config *cfg = NULL;
    if (nostall_config_create(&cfg) < 0) exit(1);
    nostall_config_set(cfg, "max_bad_fraction", "1"); /* bad items planted: no budget */
    for (int i = 0; i < n; i++)
        if (nostall_config_set(cfg, kv[i][0], kv[i][1]) < 0) {
            fprintf(stderr, "%s=%s: %s\n", kv[i][0], kv[i][1], nostall_last_error());
            exit(1);
        }
    return cfg;
}

/* --- resampling ------------------------------------------------------------- */

static void test_resample_one(uint32_t in_rate, uint32_t out_rate, uint64_t n)
{
    nst_resample_plan p;
    nst_resample_plan_init(&p, in_rate, out_rate);
    const uint64_t m = nst_resample_out_frames(&p, n);
    CHECK_EQ(m, (n * out_rate + in_rate - 1) / in_rate);
    float *x = malloc(n * sizeof *x), *whole = malloc(m * sizeof *whole),
          *win = malloc(m * sizeof *win), *ref = calloc(m + 64, sizeof *ref);
    for (uint64_t i = 0; i < n; i++) x[i] = (float)(urand() - 0.5);
    nst_resampler *rs = NULL;
    CHECK_OK(nst_resampler_create(&rs));
    const float *in[1] = {x};
    float *out[1] = {whole};
    CHECK_OK(nst_resample(rs, &p, n, 1, in, 0, n, 0, m, out, "noise"));
    /* one soxr pass over the whole clip, as soxr's own reference */
    soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
    soxr_quality_spec_t q = soxr_quality_spec(SOXR_HQ, 0);
    size_t idone, odone;
    CHECK(soxr_oneshot(in_rate, out_rate, 1, x, n, &idone, ref, m + 64, &odone, &io, &q, NULL) ==
          NULL);
    double maxd = 0;
    for (uint64_t i = 0; i < m; i++) maxd = fmax(maxd, fabs((double)whole[i] - ref[i]));
    fprintf(stderr,
            "resample %u -> %u Hz, %llu frames: li %llu, segment %llu, margin %llu; "
            "max |pieces - one pass| %.2g\n",
            in_rate, out_rate, (unsigned long long)n, (unsigned long long)p.li,
            (unsigned long long)p.seg_out, (unsigned long long)p.margin, maxd);
    CHECK(maxd <= 1e-6);
    /* windows from their own input frames only: the same bytes */
    int same = 1;
    for (int t = 0; t < 40; t++) {
        uint64_t a = (uint64_t)(urand() * m), len = 1 + (uint64_t)(urand() * (m / 3));
        if (t == 0) a = 0;
        if (t == 1) a = m - len;
        uint64_t b = a + len < m ? a + len : m, ia, ib;
        nst_resample_needs(&p, n, a, b, &ia, &ib);
        CHECK(ia <= ib && ib <= n);
        const float *part[1] = {x + ia};
        float *o[1] = {win};
        CHECK_OK(nst_resample(rs, &p, n, 1, part, ia, ib, a, b, o, "noise"));
        same &= memcmp(win, whole + a, (b - a) * sizeof *win) == 0;
        /* the input it needs is a bounded neighbourhood, not the clip */
        if (p.seg_out && !p.identity)
            CHECK(ib - ia <= (b - a) * p.li / p.lo + 2 * p.seg_in + 2 * p.margin);
    }
    CHECK(same);
    /* input that does not cover the window is refused */
    if (p.seg_out && m > 2 * p.seg_out) {
        uint64_t ia, ib;
        nst_resample_needs(&p, n, p.seg_out, p.seg_out + 10, &ia, &ib);
        const float *part[1] = {x + ia + 1};
        float *o[1] = {win};
        CHECK_RC(nst_resample(rs, &p, n, 1, part, ia + 1, ib, p.seg_out, p.seg_out + 10, o, "x"),
                 NOSTALL_E_INVALID);
    }
    nst_resampler_free(rs);
    free(x), free(whole), free(win), free(ref);
}

static void test_resample(void)
{
    test_resample_one(44100, 16000, 3 * 44100 + 17);
    test_resample_one(48000, 16000, 100000);
    test_resample_one(8000, 16000, 30001);
    test_resample_one(22050, 16000, 50000);
    test_resample_one(16000, 44100, 40000);
    test_resample_one(44101, 16000, 30000); /* li 44101: one segment */
    /* equal rates copy */
    nst_resample_plan p;
    nst_resample_plan_init(&p, 16000, 16000);
    CHECK(p.identity);
    CHECK_EQ(nst_resample_out_frames(&p, 12345), 12345);
    float x[100], y[10];
    for (int i = 0; i < 100; i++) x[i] = (float)i;
    nst_resampler *rs = NULL;
    CHECK_OK(nst_resampler_create(&rs));
    uint64_t ia, ib;
    nst_resample_needs(&p, 100, 40, 50, &ia, &ib);
    CHECK(ia == 40 && ib == 50);
    const float *in[1] = {x + 40};
    float *out[1] = {y};
    CHECK_OK(nst_resample(rs, &p, 100, 1, in, 40, 50, 40, 50, out, "ramp"));
    CHECK(y[0] == 40 && y[9] == 49);
    nst_resampler_free(rs);
}

/* --- mel -------------------------------------------------------------------- */

static double ref_hz_to_mel(double f, int slaney)
{
    if (!slaney) return 2595 * log10(1 + f / 700);
    return f < 1000 ? f * 3 / 200 : 15 + log(f / 1000) * 27 / log(6.4);
}

static double ref_mel_to_hz(double m, int slaney)
{
    if (!slaney) return 700 * (pow(10, m / 2595) - 1);
    return m < 15 ? m * 200 / 3 : 1000 * exp((m - 15) * log(6.4) / 27);
}

/* The log-mel of x[0, T) in double: reflect padding, periodic Hann of win
 * centred in n_fft, naive DFT, |X|^2, triangles, 10 log10(max(., 1e-10)). */
static void ref_logmel(const float *x, long T, int sr, int n_fft, int hop, int win, int n_mels,
                       int slaney, double *out /* [n_mels][frames] */, long frames)
{
    const int nf = n_fft / 2 + 1, pad = n_fft / 2, w0 = (n_fft - win) / 2;
    double *fp = malloc((n_mels + 2) * sizeof *fp), *pw = malloc(nf * sizeof *pw);
    const double m0 = ref_hz_to_mel(0, slaney), m1 = ref_hz_to_mel(sr / 2, slaney);
    for (int i = 0; i < n_mels + 2; i++)
        fp[i] = ref_mel_to_hz(m0 + (m1 - m0) * i / (n_mels + 1), slaney);
    for (long t = 0; t < frames; t++) {
        for (int k = 0; k < nf; k++) {
            double re = 0, im = 0;
            for (int i = 0; i < win; i++) {
                long j = t * hop + w0 + i - pad;
                if (j < 0) j = -j;
                if (j >= T) j = 2 * (T - 1) - j;
                double v = x[j] * (0.5 - 0.5 * cos(2 * M_PI * i / win));
                re += v * cos(2 * M_PI * (double)k * (w0 + i) / n_fft);
                im -= v * sin(2 * M_PI * (double)k * (w0 + i) / n_fft);
            }
            pw[k] = re * re + im * im;
        }
        for (int m = 0; m < n_mels; m++) {
            double s = 0;
            for (int k = 0; k < nf; k++) {
                double f = (double)(sr / 2) * k / (nf - 1);
                double w = fmin((f - fp[m]) / (fp[m + 1] - fp[m]),
                                (fp[m + 2] - f) / (fp[m + 2] - fp[m + 1]));
                if (w > 0) s += w * (slaney ? 2 / (fp[m + 2] - fp[m]) : 1) * pw[k];
            }
            out[m * frames + t] = 10 * log10(fmax(s, 1e-10));
        }
    }
    free(fp), free(pw);
}

static void test_mel(void)
{
    const int sr = 16000, n_fft = 400, hop = 160, n_mels = 40;
    const long T = 4000;
    float *x = tone(T, 1, 440, sr);
    for (long i = 0; i < T; i++) x[i] += (float)(0.2 * sin(2 * M_PI * 3100.0 * i / sr));
    for (int slaney = 0; slaney < 2; slaney++)
        for (int win = 300; win <= 400; win += 100) {
            nst_mel_spec s = {.sample_rate = sr,
                              .n_fft = n_fft,
                              .hop = hop,
                              .win = (uint32_t)win,
                              .n_mels = n_mels,
                              .power = 2,
                              .slaney = slaney};
            nst_mel_bank *b = NULL;
            nst_mel_worker *w = NULL;
            CHECK_OK(nst_mel_bank_create(&b, &s));
            CHECK_OK(nst_mel_worker_create(&w, b));
            if (!b || !w) return;
            const long frames = (long)nst_mel_frames(b, T);
            CHECK_EQ(frames, 1 + T / hop);
            float *got = malloc(n_mels * frames * sizeof *got);
            double *ref = malloc(n_mels * frames * sizeof *ref);
            nst_mel_power(w, x, T, got);
            nst_mel_db(b, got, n_mels * frames);
            ref_logmel(x, T, sr, n_fft, hop, win, n_mels, slaney, ref, frames);
            double peak = -1e9, worst = 0;
            for (long i = 0; i < n_mels * frames; i++) peak = fmax(peak, ref[i]);
            for (long i = 0; i < n_mels * frames; i++) {
                if (ref[i] < peak - 60) continue;
                double pr = pow(10, ref[i] / 10), pg = pow(10, got[i] / 10.0);
                worst = fmax(worst, fabs(pg - pr) / pr);
            }
            fprintf(stderr,
                    "mel %s win %d: max relative error %.2g (bins within 60 dB of the "
                    "peak %.1f dB)\n",
                    slaney ? "slaney" : "htk", win, worst, peak);
            CHECK(worst < 1e-4);
            free(got), free(ref);
            nst_mel_worker_free(w);
            nst_mel_bank_free(b);
        }
    /* top_db: every value at least the peak minus top_db; 20 / power */
    nst_mel_spec s =
        {.sample_rate = sr, .n_fft = n_fft, .hop = hop, .n_mels = n_mels, .power = 1, .top_db = 30};
    nst_mel_bank *b = NULL;
    CHECK_OK(nst_mel_bank_create(&b, &s));
    float v[4] = {1e-12f, 1.0f, 10.0f, 0.01f};
    nst_mel_db(b, v, 4);
    CHECK(fabsf(v[2] - 20) < 1e-5 && fabsf(v[1]) < 1e-5 && fabsf(v[0] + 10) < 1e-5 &&
          fabsf(v[3] + 10) < 1e-5); /* 20 log10: -240 and -40 clamped to 20 - 30 */
    nst_mel_bank_free(b);
    /* refused like torchaudio */
    nst_mel_spec bad = s;
    bad.win = 500;
    CHECK_RC(nst_mel_bank_create(&b, &bad), NOSTALL_E_OPTION);
    bad = s;
    bad.f_min = 9000;
    CHECK_RC(nst_mel_bank_create(&b, &bad), NOSTALL_E_OPTION);
    free(x);
}

/* --- decoding --------------------------------------------------------------- */

static int open_file(nst_audio_reader *rd, const char *path, uint8_t **data, double max_s,
                     uint32_t ch, nst_audio_info *info)
{
    size_t len = 0;
    *data = slurp(path, &len);
    nst_audio_limits lim = {.max_seconds = max_s, .channels = ch};
    return nst_audio_open(rd, *data, len, path, &lim, info);
}

static void expect_bad(nst_audio_reader *rd, const char *path, int status, const char *what)
{
    uint8_t *d;
    nst_audio_info info;
    nst_buf b = {0};
    uint64_t n;
    int rc = open_file(rd, path, &d, 600, 0, &info);
    if (rc == 0) rc = nst_audio_check_end(rd);
    if (rc == 0) rc = nst_audio_read_all(rd, &b, &n);
    nst_audio_close(rd);
    if (rc != status || !strstr(nostall_last_error(), path) || !strstr(nostall_last_error(), what)) {
        fprintf(stderr, "%s: status %d (%s) '%s', want %d with '%s'\n", path, rc,
                nostall_status_name(rc), nostall_last_error(), status, what);
        check_failures_++;
    }
    free(d);
    nst_buf_free(&b);
}

static void test_decode(void)
{
    nst_audio_reader *rd = NULL;
    CHECK_OK(nst_audio_reader_create(&rd));
    const long n = 30000;
    float *st = tone(n, 2, 300, 22050);
    static const struct {
        const char *name;
        int format, access;
        double tol;
    } fmts[] = {
        {"d/s16.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_16, NST_AUDIO_SEEK, 1.0 / 32768},
        {"d/f32.wav", SF_FORMAT_WAV | SF_FORMAT_FLOAT, NST_AUDIO_SEEK, 0},
        {"d/s24.flac", SF_FORMAT_FLAC | SF_FORMAT_PCM_24, NST_AUDIO_SEEK, 1.0 / 8388608},
        {"d/v.ogg", SF_FORMAT_OGG | SF_FORMAT_VORBIS, NST_AUDIO_FORWARD, 0.1},
        {"d/l3.mp3", SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III, NST_AUDIO_FORWARD, 0.1},
    };
    for (size_t k = 0; k < sizeof fmts / sizeof *fmts; k++) {
        const char *path = write_clip(fmts[k].name, fmts[k].format, 22050, 2, st, n);
        uint8_t *d;
        nst_audio_info info;
        CHECK_OK(open_file(rd, path, &d, 600, 0, &info));
        CHECK_EQ(info.access, fmts[k].access);
        CHECK_EQ(info.rate, 22050);
        CHECK_EQ(info.channels, 2);
        CHECK_EQ(info.planes, 1);
        nst_buf all = {0};
        uint64_t got;
        CHECK_OK(nst_audio_read_all(rd, &all, &got));
        CHECK_EQ(got, n);
        nst_audio_close(rd);
        free(d);
        const float *a = (const float *)all.data;
        /* mixdown: the mean of the channels (lossless formats: exactly) */
        double err = 0;
        for (long i = 1000; i < n - 1000; i++)
            err = fmax(err, fabs(a[i] - (st[2 * i] + st[2 * i + 1]) / 2));
        if (fmts[k].tol < 1e-3) CHECK(err <= fmts[k].tol);
        /* a window read alone: the same frames as the whole read */
        CHECK_OK(open_file(rd, path, &d, 600, 0, &info));
        float w[5000];
        float *pl[1] = {w};
        CHECK_OK(nst_audio_check_end(rd));
        CHECK_OK(nst_audio_read(rd, 20000, 5000, pl));
        CHECK(memcmp(w, a + 20000, sizeof w) == 0);
        if (info.access == NST_AUDIO_SEEK) { /* and back again */
            CHECK_OK(nst_audio_read(rd, 100, 5000, pl));
            CHECK(memcmp(w, a + 100, sizeof w) == 0);
        } else {
            CHECK_RC(nst_audio_read(rd, 100, 5000, pl), NOSTALL_E_INVALID);
        }
        CHECK_RC(nst_audio_read(rd, n - 10, 11, pl), NOSTALL_E_INVALID);
        nst_audio_close(rd);
        free(d);
        /* keeping channels: planar */
        CHECK_OK(open_file(rd, path, &d, 600, 2, &info));
        CHECK_EQ(info.planes, 2);
        CHECK_OK(nst_audio_read_all(rd, &all, &got));
        nst_audio_close(rd);
        free(d);
        a = (const float *)all.data;
        err = 0;
        for (long i = 1000; i < n - 1000; i++)
            err = fmax(err, fmax(fabs(a[i] - st[2 * i]), fabs(a[n + i] - st[2 * i + 1])));
        if (fmts[k].tol < 1e-3) CHECK(err <= fmts[k].tol);
        /* another channel count is refused */
        CHECK_RC(open_file(rd, path, &d, 600, 1, &info), NOSTALL_E_UNSUPPORTED);
        CHECK(strstr(nostall_last_error(), "2 channels") != NULL);
        free(d);
        /* max_audio_seconds: 30000 frames at 22050 Hz is 1.36 s */
        CHECK_RC(open_file(rd, path, &d, 1.0, 0, &info), NOSTALL_E_FILE_TOO_LARGE);
        CHECK(strstr(nostall_last_error(), "max_audio_seconds") != NULL);
        free(d);
        nst_buf_free(&all);
    }
    /* bad clips */
    char path[4096];
    size_t len;
    uint8_t *flac =
        slurp(write_clip("d/whole.flac", SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 22050, 2, st, n), &len);
    snprintf(path, sizeof path, "%s/d/trunc.flac", dir);
    put_file(path, flac, len / 2);
    expect_bad(rd, path, NOSTALL_E_TRUNCATED, "truncated");
    free(flac);
    uint8_t *mp3 =
        slurp(write_clip("d/whole.mp3", SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III, 22050, 1, st, n),
              &len);
    snprintf(path, sizeof path, "%s/d/cut.mp3", dir);
    put_file(path, mp3, len * 2 / 3);
    expect_bad(rd, path, NOSTALL_E_TRUNCATED, "Xing header declares");
    free(mp3);
    /* a WAV header claiming 2^31 frames (8-bit mono), 1000 bytes of data */
    uint8_t wav[44 + 1000];
    memcpy(wav,
           "RIFF\xff\xff\xff\x7fWAVEfmt \x10\0\0\0\x01\0\x01\0\x40\x1f\0\0\x40\x1f\0\0\x01\0\x08\0data\0\0\0\x80",
           44);
    for (int i = 0; i < 1000; i++) wav[44 + i] = (uint8_t)(128 + 100 * sin(i * 0.1));
    snprintf(path, sizeof path, "%s/d/huge.wav", dir);
    put_file(path, wav, sizeof wav);
    expect_bad(rd, path, NOSTALL_E_FILE_TOO_LARGE, "its header declares 2147483648 frames");
    /* one declaring 2000 frames where 1000 are: truncated, not shortened */
    memcpy(wav + 40, "\xd0\x07\0\0", 4);
    snprintf(path, sizeof path, "%s/d/short.wav", dir);
    put_file(path, wav, sizeof wav);
    expect_bad(rd, path, NOSTALL_E_TRUNCATED, "declares 2000 frames");
    /* a streamed header (data size 0xFFFFFFFF) is read as far as it goes */
    memcpy(wav + 40, "\xff\xff\xff\xff", 4);
    snprintf(path, sizeof path, "%s/d/stream.wav", dir);
    put_file(path, wav, sizeof wav);
    {
        uint8_t *d;
        nst_audio_info info;
        nst_buf b = {0};
        uint64_t got = 0;
        CHECK_OK(open_file(rd, path, &d, 600, 0, &info));
        CHECK_OK(nst_audio_read_all(rd, &b, &got));
        CHECK_EQ(got, 1000);
        nst_audio_close(rd);
        free(d);
        nst_buf_free(&b);
    }
    snprintf(path, sizeof path, "%s/d/text.wav", dir);
    put_file(path, "hello, this is not audio\n", 25);
    expect_bad(rd, path, NOSTALL_E_UNSUPPORTED, "not an audio file");
    snprintf(path, sizeof path, "%s/d/garbage.mp3", dir);
    uint8_t junk[20000];
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (uint8_t)(urand() * 256);
    junk[0] = 'x';
    put_file(path, junk, sizeof junk);
    expect_bad(rd, path, NOSTALL_E_UNSUPPORTED, "not an audio file");
    snprintf(path, sizeof path, "%s/d/empty.wav", dir);
    put_file(path, "", 0);
    expect_bad(rd, path, NOSTALL_E_EMPTY, "empty");
    /* a header with no frames */
    snprintf(path, sizeof path, "%s/d/none.wav", dir);
    memcpy(wav + 40, "\0\0\0\0", 4);
    put_file(path, wav, 44);
    expect_bad(rd, path, NOSTALL_E_EMPTY, "no frames");
    /* samples not finite or absurd: corrupt, wherever they lie (the NaN at
     * frame 29000 is far from the window read at 100) */
    static const struct {
        const char *name;
        int format;
        float x;
        const char *why;
    } odd[] = {
        {"d/nan.wav", SF_FORMAT_WAV | SF_FORMAT_FLOAT, NAN, "frame 29000 (channel 1) is nan"},
        {"d/inf.wav", SF_FORMAT_WAV | SF_FORMAT_FLOAT, -INFINITY, "frame 29000 (channel 1) is -inf"},
        {"d/huge.aiff", SF_FORMAT_AIFF | SF_FORMAT_FLOAT, 1e30f, "frame 29000 (channel 1) is 1e+30"},
        {"d/big.wav", SF_FORMAT_WAV | SF_FORMAT_DOUBLE, 1001.0f, "is 1001; samples must be finite"},
    };
    for (size_t k = 0; k < sizeof odd / sizeof *odd; k++) {
        float *x = malloc(2 * n * sizeof *x);
        memcpy(x, st, 2 * n * sizeof *x);
        x[2 * 29000 + 1] = odd[k].x;
        const char *p = write_clip(odd[k].name, odd[k].format, 22050, 2, x, n);
        snprintf(path, sizeof path, "%s", p);
        free(x);
        expect_bad(rd, path, NOSTALL_E_CORRUPT, odd[k].why);
        uint8_t *d;
        nst_audio_info info;
        CHECK_OK(open_file(rd, path, &d, 600, 0, &info));
        CHECK_EQ(info.access, NST_AUDIO_SEEK);
        CHECK_RC(nst_audio_check_end(rd), NOSTALL_E_CORRUPT);
        nst_audio_close(rd);
        free(d);
    }
    nst_audio_reader_free(rd);
    free(st);
}

/* Opens failing in several threads at once: each error names its own file's
 * reason, as an open alone gives it. libsndfile writes the reason of a
 * failed open to process-wide variables that every open resets (its issue
 * #279), so reading them after another thread's open gives that one's (or
 * none: "format not recognised"). Five headers libsndfile refuses for five
 * different reasons, and a good clip whose open resets them. */
#define NREASON 6
static struct {
    const char *name;
    const void *bytes;
    size_t len;
    char want[NST_ERROR_MAX]; /* nostall_last_error() of an open alone ("" if it opens) */
} reason_in[NREASON];

typedef struct {
    int first, wrong;
    char seen[NST_ERROR_MAX], want[NST_ERROR_MAX];
} reason_thread;

static void *reasons_worker(void *arg)
{
    reason_thread *t = arg;
    nst_audio_reader *rd;
    nst_audio_limits lim = {.max_seconds = 600};
    nst_audio_info info;
    if (nst_audio_reader_create(&rd) < 0) {
        t->wrong++;
        return NULL;
    }
    for (int i = 0; i < 300 * NREASON; i++) {
        int k = (t->first + i) % NREASON;
        int rc = nst_audio_open(rd, reason_in[k].bytes, reason_in[k].len, reason_in[k].name, &lim,
                                &info);
        const char *got = rc < 0 ? nostall_last_error() : "";
        if (strcmp(got, reason_in[k].want)) {
            if (!t->wrong++) {
                snprintf(t->seen, sizeof t->seen, "%s", got);
                snprintf(t->want, sizeof t->want, "%s", reason_in[k].want);
            }
        }
        nst_audio_close(rd);
    }
    nst_audio_reader_free(rd);
    return NULL;
}

static void test_open_reasons_concurrently(void)
{
    static const uint8_t wav0ch[44] =
        "RIFF\x24\0\0\0WAVEfmt \x10\0\0\0\x01\0\0\0\x40\x1f\0\0\x40\x1f\0\0\x01\0\x08\0data\0\0\0\0";
    static const uint8_t wavfmt[44] =
        "RIFF\x24\0\0\0WAVEfmt \x10\0\0\0\x07\x07\x01\0\x40\x1f\0\0\x40\x1f\0\0\x01\0\x08\0data\0\0\0\0";
    static const uint8_t flac[48] = "fLaC\0\0\0\x22junkjunkjunkjunkjunkjunkjunkjunkjunkjunk";
    static uint8_t good[44 + 800];
    memcpy(good, wav0ch, 44);
    good[22] = 1;                         /* one channel */
    memcpy(good + 40, "\x20\x03\0\0", 4); /* 800 frames of 8-bit PCM */
    for (int i = 0; i < 800; i++) good[44 + i] = (uint8_t)(128 + 100 * sin(i * 0.05));
    reason_in[0].name = "text.wav", reason_in[0].bytes = "hello, this is not audio\n";
    reason_in[0].len = 25;
    reason_in[1].name = "riff12.wav", reason_in[1].bytes = "RIFF\x24\0\0\0WAVE",
    reason_in[1].len = 12;
    reason_in[2].name = "nochannels.wav", reason_in[2].bytes = wav0ch, reason_in[2].len = 44;
    reason_in[3].name = "badfmt.wav", reason_in[3].bytes = wavfmt, reason_in[3].len = 44;
    reason_in[4].name = "junk.flac", reason_in[4].bytes = flac, reason_in[4].len = sizeof flac;
    reason_in[5].name = "good.wav", reason_in[5].bytes = good, reason_in[5].len = sizeof good;
    nst_audio_reader *rd;
    CHECK_OK(nst_audio_reader_create(&rd));
    nst_audio_limits lim = {.max_seconds = 600};
    nst_audio_info info;
    for (int k = 0; k < NREASON; k++) {
        int rc = nst_audio_open(rd, reason_in[k].bytes, reason_in[k].len, reason_in[k].name, &lim,
                                &info);
        CHECK_EQ(rc, k == NREASON - 1 ? 0 : NOSTALL_E_UNSUPPORTED);
        snprintf(reason_in[k].want, sizeof reason_in[k].want, "%s",
                 rc < 0 ? nostall_last_error() : "");
        nst_audio_close(rd);
        for (int j = 0; j < k; j++) /* five different reasons */
            if (rc < 0) CHECK(strcmp(reason_in[j].want, reason_in[k].want) != 0);
    }
    nst_audio_reader_free(rd);
    pthread_t th[4];
    reason_thread t[4];
    memset(t, 0, sizeof t);
    for (int i = 0; i < 4; i++) {
        t[i].first = i;
        CHECK_EQ(pthread_create(&th[i], NULL, reasons_worker, &t[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        if (t[i].wrong)
            fprintf(stderr, "thread %d: %d wrong reasons, e.g. '%s' for '%s'\n", i, t[i].wrong,
                    t[i].seen, t[i].want);
        CHECK_EQ(t[i].wrong, 0);
    }
}

/* --- the recipe ------------------------------------------------------------- */

/* An AudioFolder: 2 classes x 8 clips of 0.2 .. 1.4 s in every format, at
 * 8, 16, 22.05 and 44.1 kHz; stereo when `stereo`. */
static const char *make_folder(const char *name, int stereo)
{
    static char root[4096];
    snprintf(root, sizeof root, "%s/%s", dir, name);
    static const int formats[4] = {SF_FORMAT_WAV | SF_FORMAT_PCM_16,
                                   SF_FORMAT_FLAC | SF_FORMAT_PCM_16,
                                   SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III,
                                   SF_FORMAT_OGG | SF_FORMAT_VORBIS};
    static const char *ext[4] = {"wav", "flac", "mp3", "ogg"};
    static const int rates[4] = {8000, 16000, 22050, 44100};
    for (int i = 0; i < 16; i++) {
        char rel[256];
        int rate = rates[(i / 4) % 4], ch = stereo ? 2 : 1;
        long n = (long)((0.2 + 1.2 * urand()) * rate);
        snprintf(rel, sizeof rel, "%s/c%d/clip%02d.%s", name, i % 2, i, ext[i % 4]);
        float *x = tone(n, ch, i % 2 ? 300 : 1200, rate);
        write_clip(rel, formats[i % 4], rate, ch, x, n);
        free(x);
    }
    return root;
}

typedef struct fields {
    uint8_t *f[3];
} fields;

static void fields_alloc(fields *x, const nst_recipe *r)
{
    for (uint32_t k = 0; k < r->nfields; k++) x->f[k] = calloc(1, r->fields[k].item_bytes);
}

static void fields_free(fields *x)
{
    for (int k = 0; k < 3; k++) free(x->f[k]);
}

static int fields_same(const fields *a, const fields *b, const nst_recipe *r)
{
    int same = 1;
    for (uint32_t k = 0; k < r->nfields; k++)
        same &= !memcmp(a->f[k], b->f[k], r->fields[k].item_bytes);
    return same;
}

static void test_stages(const char *root, const char *features, const char *mode,
                        const char *mixdown)
{
    const char *kv[][2] = {{"task", "audio"},    {"audio_features", features}, {"mode", mode},
                           {"mixdown", mixdown}, {"clip_seconds", "0.5"},      {"seed", "7"},
                           {"freq_masks", "2"},  {"time_masks", "2"},          {"n_mels", "32"}};
    nostall_config *cfg = cfg_of(kv, 9);
    nst_recipe *r = NULL;
    CHECK_OK(nst_recipe_create(&r, cfg, root));
    nostall_config_free(cfg);
    if (!r) return;
    const int logmel = !strcmp(features, "logmel"), planes = !strcmp(mixdown, "1") ? 1 : 2;
    CHECK_EQ(r->items, 16);
    CHECK_EQ(r->nfields, 3);
    CHECK(!strcmp(r->fields[0].name, logmel ? "mel" : "waveform"));
    CHECK(!strcmp(r->fields[1].name, "length") && r->fields[1].dtype == NOSTALL_DTYPE_INT32);
    CHECK(!strcmp(r->fields[2].name, "label"));
    if (logmel) {
        CHECK_EQ(r->fields[0].ndim, planes == 1 ? 2 : 3);
        CHECK_EQ(r->fields[0].shape[planes == 1 ? 0 : 1], 32);
        CHECK_EQ(r->fields[0].shape[planes == 1 ? 1 : 2], 1 + 8000 / 160);
    } else {
        CHECK(r->fields[0].ndim == 2 && r->fields[0].shape[0] == (uint64_t)planes &&
              r->fields[0].shape[1] == 8000);
    }
    nst_recipe_worker *w = NULL, *w2 = NULL;
    CHECK_OK(r->ops->worker_create(r, &w));
    CHECK_OK(r->ops->worker_create(r, &w2));
    fields a, b;
    fields_alloc(&a, r);
    fields_alloc(&b, r);
    nst_decoded d;
    memset(&d, 0, sizeof d);
    int same = 1, short_ok = 1, copies_differ = 0;
    for (uint64_t i = 0; i < r->items; i++) {
        const char *path = nst_recipe_path(r, i);
        size_t len = 0;
        uint8_t *data = slurp(path, &len);
        for (uint32_t copy = 0; copy < 3; copy++) {
            nst_recipe_times t = {0};
            nst_item_ctx c = {.epoch = 1, .index = i, .copy = copy, .path = path, .dst = a.f};
            CHECK_OK(r->ops->make(w, &c, data, len, &t));
            c.dst = b.f;
            CHECK_OK(r->ops->decode(w2, &c, data, len, &d, &t));
            CHECK_OK(r->ops->transform(w2, &c, &d, &t));
            if (!fields_same(&a, &b, r)) {
                fprintf(stderr, "%s (%s, %s, mixdown %s, copy %u): make != transform(decode)\n",
                        path, features, mode, mixdown, copy);
                same = 0;
            }
            int32_t l;
            memcpy(&l, a.f[1], 4);
            uint64_t nres;
            memcpy(&nres, d.meta, sizeof nres); /* clip_meta.frames */
            short_ok &= (uint64_t)l == (nres < 8000 ? nres : 8000);
            if (!logmel && (uint64_t)l < 8000) /* zeros after the clip */
                for (int p = 0; p < planes; p++)
                    for (int k = l; k < 8000; k++) short_ok &= ((float *)a.f[0])[p * 8000 + k] == 0;
            if (copy == 1 && !strcmp(mode, "train") && nres > 8000) {
                /* another copy: another window */
                c.copy = 0;
                c.dst = b.f;
                CHECK_OK(r->ops->make(w, &c, data, len, &t));
                copies_differ |= !fields_same(&a, &b, r);
            }
        }
        free(data);
    }
    CHECK(same);
    CHECK(short_ok);
    if (!strcmp(mode, "train")) CHECK(copies_differ);
    nst_buf_free(&d.buf);
    fields_free(&a);
    fields_free(&b);
    r->ops->worker_free(w);
    r->ops->worker_free(w2);
    nst_recipe_free(r);
}

/* The window starts where the documented rule says: a float WAV whose
 * sample i is i / 2^20, at the target rate (copied, not resampled). */
static void test_window_rule(void)
{
    const long n = 40000;
    float *x = malloc(n * sizeof *x);
    for (long i = 0; i < n; i++) x[i] = (float)i / 1048576.0f;
    write_clip("ramp/a/ramp.wav", SF_FORMAT_WAV | SF_FORMAT_FLOAT, 16000, 1, x, n);
    write_clip("ramp/a/short.wav", SF_FORMAT_WAV | SF_FORMAT_FLOAT, 16000, 1, x, 5000);
    free(x);
    char root[4096];
    snprintf(root, sizeof root, "%s/ramp", dir);
    for (int train = 0; train < 2; train++) {
        const char *kv[][2] = {{"task", "audio"},
                               {"audio_features", "waveform"},
                               {"mode", train ? "train" : "eval"},
                               {"clip_seconds", "0.5"},
                               {"seed", "99"}};
        nostall_config *cfg = cfg_of(kv, 5);
        nst_recipe *r = NULL;
        CHECK_OK(nst_recipe_create(&r, cfg, root));
        nostall_config_free(cfg);
        if (!r) return;
        nst_recipe_worker *w = NULL;
        CHECK_OK(r->ops->worker_create(r, &w));
        float *wave = malloc(8000 * sizeof *wave);
        int32_t len;
        int64_t label;
        uint8_t *dst[3] = {(uint8_t *)wave, (uint8_t *)&len, (uint8_t *)&label};
        int ok = 1;
        for (uint64_t epoch = 0; epoch < 4; epoch++)
            for (uint32_t copy = 0; copy < 3; copy++)
                for (uint64_t i = 0; i < 2; i++) {
                    size_t blen = 0;
                    uint8_t *data = slurp(nst_recipe_path(r, i), &blen);
                    nst_item_ctx c = {.epoch = epoch,
                                      .index = i,
                                      .copy = copy,
                                      .path = "ramp",
                                      .dst = dst};
                    nst_recipe_times t = {0};
                    CHECK_OK(r->ops->make(w, &c, data, blen, &t));
                    free(data);
                    const uint64_t clip = strstr(nst_recipe_path(r, i), "short") ? 5000 : 40000;
                    uint64_t want = 0;
                    if (clip > 8000) {
                        nst_rng rng;
                        nst_rng_seed(&rng, nst_hash4(99, epoch, i, NST_RNG_AUGMENT_COPY(copy)));
                        want = train ? nst_rng_below(&rng, clip - 8000 + 1) : (clip - 8000) / 2;
                    }
                    const uint64_t valid = clip - want < 8000 ? clip - want : 8000;
                    ok &= (uint64_t)len == valid && label == 0;
                    for (uint64_t k = 0; k < 8000; k++)
                        ok &= wave[k] == (k < valid ? (float)(want + k) / 1048576.0f : 0.0f);
                }
        CHECK(ok);
        free(wave);
        r->ops->worker_free(w);
        nst_recipe_free(r);
    }
}

/* SpecAugment: masked == unmasked except the bands and frames drawn, 0. */
static void test_masks(const char *root)
{
    nst_recipe *r[2] = {NULL, NULL};
    for (int m = 0; m < 2; m++) {
        const char *kv[][2] =
            {{"task", "audio"},      {"clip_seconds", "0.5"},       {"seed", "3"},
             {"n_mels", "40"},       {"freq_masks", m ? "2" : "0"}, {"time_masks", m ? "3" : "0"},
             {"freq_mask_max", "6"}, {"time_mask_max", "9"}};
        nostall_config *cfg = cfg_of(kv, 8);
        CHECK_OK(nst_recipe_create(&r[m], cfg, root));
        nostall_config_free(cfg);
        if (!r[m]) return;
    }
    nst_recipe_worker *w[2];
    CHECK_OK(r[0]->ops->worker_create(r[0], &w[0]));
    CHECK_OK(r[1]->ops->worker_create(r[1], &w[1]));
    const uint64_t F = r[0]->fields[0].shape[1], M = 40;
    fields a, b;
    fields_alloc(&a, r[0]);
    fields_alloc(&b, r[1]);
    int ok = 1, masked_some = 0;
    for (uint64_t i = 0; i < r[0]->items; i++) {
        size_t len = 0;
        const char *path = nst_recipe_path(r[0], i);
        uint8_t *data = slurp(path, &len);
        nst_item_ctx c = {.epoch = 2, .index = i, .copy = 1, .path = path, .dst = a.f};
        nst_recipe_times t = {0};
        CHECK_OK(r[0]->ops->make(w[0], &c, data, len, &t));
        c.dst = b.f;
        CHECK_OK(r[1]->ops->make(w[1], &c, data, len, &t));
        free(data);
        /* the stream: the window's draw (only when the clip is longer),
         * then the frequency masks, then the time masks */
        uint8_t *mask = calloc(M * F, 1);
        nst_rng rng;
        nst_rng_seed(&rng, nst_hash4(3, 2, i, NST_RNG_AUGMENT_COPY(1)));
        nst_decoded d;
        memset(&d, 0, sizeof d);
        uint8_t *dd = slurp(path, &len);
        CHECK_OK(r[0]->ops->decode(w[0], &c, dd, len, &d, &t));
        free(dd);
        uint64_t nres;
        memcpy(&nres, d.meta, sizeof nres);
        nst_buf_free(&d.buf);
        if (nres > 8000) (void)nst_rng_below(&rng, nres - 8000 + 1);
        for (int k = 0; k < 2; k++) {
            uint64_t wdt = nst_rng_below(&rng, 7), s = nst_rng_below(&rng, M - wdt + 1);
            for (uint64_t m = s; m < s + wdt; m++) memset(mask + m * F, 1, F);
        }
        for (int k = 0; k < 3; k++) {
            uint64_t wdt = nst_rng_below(&rng, 10), s = nst_rng_below(&rng, F - wdt + 1);
            for (uint64_t m = 0; m < M; m++) memset(mask + m * F + s, 1, wdt);
        }
        const float *x = (const float *)a.f[0], *y = (const float *)b.f[0];
        for (uint64_t k = 0; k < M * F; k++) {
            ok &= mask[k] ? y[k] == 0 : y[k] == x[k];
            masked_some += mask[k];
        }
        free(mask);
    }
    CHECK(ok);
    CHECK(masked_some > 0);
    fields_free(&a);
    fields_free(&b);
    for (int m = 0; m < 2; m++) {
        r[m]->ops->worker_free(w[m]);
        nst_recipe_free(r[m]);
    }
}

/* --- the loader ------------------------------------------------------------- */

typedef struct run_out {
    uint64_t sum, items, skipped, storage_reads_last;
    uint64_t epoch_sum[4];
} run_out;

static void run(const char *root, const char *threads, const char *cache, const char *epochs,
                run_out *o)
{
    const char *kv[][2] = {{"task", "audio"},      {"clip_seconds", "0.5"}, {"seed", "5"},
                           {"batch_size", "5"},    {"threads", threads},    {"epochs", epochs},
                           {"cache_bytes", cache}, {"freq_masks", "1"},     {"time_masks", "1"}};
    nostall_config *cfg = cfg_of(kv, 9);
    nostall_loader *ld = NULL;
    memset(o, 0, sizeof *o);
    CHECK_OK(nostall_loader_create(&ld, root, cfg));
    nostall_config_free(cfg);
    if (!ld) return;
    nostall_stats st0, st1;
    memset(&st0, 0, sizeof st0);
    uint64_t epoch = 0;
    for (;;) {
        nostall_batch b;
        int rc = nostall_loader_next(ld, &b);
        if (rc == NOSTALL_DONE) break;
        if (rc == NOSTALL_EPOCH_END) {
            CHECK_OK(nostall_loader_stats(ld, &st1, sizeof st1));
            o->storage_reads_last = st1.storage_reads - st0.storage_reads;
            st0 = st1;
            epoch++;
            continue;
        }
        CHECK_OK(rc);
        if (rc < 0) break;
        CHECK(nostall_batch_field(&b, "mel") && nostall_batch_field(&b, "length") &&
              nostall_batch_field(&b, "label") && b.labels);
        nostall_checksum_batch(&o->sum, &b);
        if (epoch < 4) nostall_checksum_batch(&o->epoch_sum[epoch], &b);
        o->items += b.count;
        CHECK_OK(nostall_loader_release(ld, &b));
    }
    o->skipped = nostall_loader_skipped_count(ld);
    nostall_loader_free(ld);
}

static void test_loader(const char *root)
{
    run_out r1, r2, r3, c;
    run(root, "1", "0", "2", &r1);
    run(root, "2", "0", "2", &r2);
    run(root, "3", "0", "2", &r3);
    fprintf(stderr, "loader: %llu items, checksum %016llx\n", (unsigned long long)r1.items,
            (unsigned long long)r1.sum);
    CHECK_EQ(r1.items, 32);
    CHECK_EQ(r1.sum, r2.sum);
    CHECK_EQ(r1.sum, r3.sum);
    CHECK(r1.epoch_sum[0] != r1.epoch_sum[1]); /* another epoch, other windows */
    /* the MinIO cache: the same bytes, the second epoch from memory */
    run(root, "2", "8M", "2", &c);
    CHECK_EQ(c.sum, r1.sum);
    CHECK_EQ(c.storage_reads_last, 0);

    /* exact resume mid-epoch: 3 batches, state, a new loader from it */
    const char *kv[][2] = {{"task", "audio"},   {"clip_seconds", "0.5"}, {"seed", "5"},
                           {"batch_size", "5"}, {"threads", "2"},        {"epochs", "2"}};
    nostall_config *cfg = cfg_of(kv, 6);
    nostall_loader *ld = NULL, *ld2 = NULL;
    CHECK_OK(nostall_loader_create(&ld, root, cfg));
    CHECK_OK(nostall_loader_create(&ld2, root, cfg));
    nostall_config_free(cfg);
    if (!ld || !ld2) return;
    nostall_batch b;
    for (int k = 0; k < 3; k++) {
        CHECK_OK(nostall_loader_next(ld, &b));
        CHECK_OK(nostall_loader_release(ld, &b));
    }
    nostall_state s;
    CHECK_OK(nostall_loader_get_state(ld, &s));
    CHECK_OK(nostall_loader_set_state(ld2, &s));
    int same = 1, n = 0;
    for (;;) {
        nostall_batch x, y;
        int ra = nostall_loader_next(ld, &x), rb = nostall_loader_next(ld2, &y);
        CHECK_EQ(ra, rb);
        if (ra == NOSTALL_DONE || ra < 0 || rb < 0) break;
        if (ra == NOSTALL_EPOCH_END) continue;
        uint64_t hx = 0, hy = 0;
        nostall_checksum_batch(&hx, &x);
        nostall_checksum_batch(&hy, &y);
        same &= hx == hy && x.count == y.count;
        n++;
        nostall_loader_release(ld, &x);
        nostall_loader_release(ld2, &y);
    }
    CHECK(same);
    CHECK_EQ(n, 4 - 3 + 4); /* 16 items in batches of 5: 4 per epoch */
    nostall_loader_free(ld);
    nostall_loader_free(ld2);
}

/* Bad files in a folder: counted skips with their reasons; the rest
 * delivered. */
static void test_bad_items(void)
{
    char root[4096], path[4200];
    snprintf(root, sizeof root, "%s/bad", dir);
    float *x = tone(12000, 1, 500, 16000);
    const char *ok =
        write_clip("bad/a/ok.flac", SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 16000, 1, x, 8000);
    size_t len;
    uint8_t *flac = slurp(ok, &len);
    snprintf(path, sizeof path, "%s/a/trunc.flac", root);
    put_file(path, flac, len / 2);
    free(flac);
    snprintf(path, sizeof path, "%s/a/notes.wav", root);
    put_file(path, "not audio", 9);
    snprintf(path, sizeof path, "%s/a/empty.wav", root);
    put_file(path, "", 0);
    write_clip("bad/a/long.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_16, 16000, 1, x, 12000);
    x[7000] = NAN; /* bad whichever 0.25 s window is drawn */
    write_clip("bad/a/nan.wav", SF_FORMAT_WAV | SF_FORMAT_FLOAT, 16000, 1, x, 8000);
    free(x);
    const char *kv[][2] = {{"task", "audio"},   {"clip_seconds", "0.25"},
                           {"batch_size", "8"}, {"epochs", "1"},
                           {"threads", "2"},    {"max_audio_seconds", "0.7"}};
    nostall_config *cfg = cfg_of(kv, 6);
    nostall_loader *ld = NULL;
    CHECK_OK(nostall_loader_create(&ld, root, cfg));
    nostall_config_free(cfg);
    if (!ld) return;
    uint64_t items = 0;
    for (;;) {
        nostall_batch b;
        int rc = nostall_loader_next(ld, &b);
        if (rc == NOSTALL_DONE) break;
        if (rc == NOSTALL_EPOCH_END) continue;
        CHECK_OK(rc);
        if (rc < 0) break;
        items += b.count;
        nostall_loader_release(ld, &b);
    }
    CHECK_EQ(items, 1); /* ok.flac */
    CHECK_EQ(nostall_loader_skipped_count(ld), 5);
    static const struct {
        const char *name;
        int status;
        const char *why;
    } want[] = {{"empty.wav", NOSTALL_E_EMPTY, "empty"},
                {"long.wav", NOSTALL_E_FILE_TOO_LARGE, "max_audio_seconds"},
                {"nan.wav", NOSTALL_E_CORRUPT, "frame 7000 (channel 0) is nan"},
                {"notes.wav", NOSTALL_E_UNSUPPORTED, "not an audio file"},
                {"trunc.flac", NOSTALL_E_TRUNCATED, "truncated"}};
    for (uint64_t i = 0; i < 5; i++) {
        nostall_skip_info s;
        CHECK_OK(nostall_loader_skipped(ld, i, &s));
        if (!strstr(s.path, want[i].name) || s.status != want[i].status ||
            !strstr(s.reason, want[i].why)) {
            fprintf(stderr, "skip %llu: %s %d '%s', want %s %d '%s'\n", (unsigned long long)i,
                    s.path, s.status, s.reason, want[i].name, want[i].status, want[i].why);
            check_failures_++;
        }
    }
    nostall_loader_free(ld);
}

static void expect_create_error(const char *root, const char *kv[][2], int n, int status,
                                const char *want)
{
    nostall_config *cfg = cfg_of(kv, n);
    nostall_loader *ld = NULL;
    int rc = nostall_loader_create(&ld, root, cfg);
    nostall_config_free(cfg);
    CHECK_EQ(rc, status);
    if (!strstr(nostall_last_error(), want)) {
        fprintf(stderr, "create: '%s' lacks '%s'\n", nostall_last_error(), want);
        check_failures_++;
    }
    nostall_loader_free(ld);
}

static void test_create_errors(const char *root)
{
    const char *a[][2] = {{"task", "audio"}, {"clip_seconds", "0.01"}, {"n_fft", "400"}};
    expect_create_error(root, a, 3, NOSTALL_E_OPTION, "must be longer than n_fft / 2 = 200");
    const char *b[][2] = {{"task", "audio"}, {"win", "512"}};
    expect_create_error(root, b, 2, NOSTALL_E_OPTION, "longer than n_fft");
    const char *c[][2] = {{"task", "audio"}, {"f_min", "8000"}};
    expect_create_error(root, c, 2, NOSTALL_E_OPTION, "f_min");
    char list[4096];
    snprintf(list, sizeof list, "%s/urls.txt", dir);
    put_file(list, "http://127.0.0.1:9/a.wav\t0\n", 27);
    const char *d[][2] = {{"task", "audio"}, {"mixdown", "0"}};
    expect_create_error(list, d, 2, NOSTALL_E_UNSUPPORTED, "every item is a URL");
    /* the waveform needs no STFT: a tiny window is fine */
    const char *e[][2] = {{"task", "audio"},
                          {"clip_seconds", "0.01"},
                          {"audio_features", "waveform"}};
    nostall_config *cfg = cfg_of(e, 3);
    nostall_loader *ld = NULL;
    CHECK_OK(nostall_loader_create(&ld, root, cfg));
    nostall_config_free(cfg);
    nostall_loader_free(ld);
}

int main(void)
{
    dir = test_tmpdir("test_audio");
    test_resample();
    test_mel();
    test_decode();
    test_open_reasons_concurrently();
    const char *mono = make_folder("mono", 0);
    static char stereo[4096];
    snprintf(stereo, sizeof stereo, "%s", make_folder("stereo", 1));
    static const char *feats[2] = {"logmel", "waveform"}, *modes[2] = {"train", "eval"};
    for (int f = 0; f < 2; f++)
        for (int m = 0; m < 2; m++) {
            test_stages(mono, feats[f], modes[m], "1");
            test_stages(stereo, feats[f], modes[m], "0");
        }
    test_stages(stereo, "logmel", "train", "1");
    test_window_rule();
    test_masks(mono);
    test_loader(mono);
    test_bad_items();
    test_create_errors(mono);
    TEST_EXIT();
}
