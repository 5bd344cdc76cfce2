/*
 * gen_audio.c — `nostall gen --task audio`: write a synthetic, learnable
 * AudioFolder (one sub-folder per class) for task=audio.
 *
 * Layout: OUT_DIR/class_000/clip_000000.flac ...; clip i belongs to class
 * i % classes, is written in format formats[(i / classes) % nformats] at rate
 * rates[(i / (classes * nformats)) % nrates], so every class has every
 * format and rate.
 *
 * Sound design. Class k has its own kind and its own frequency: kinds cycle
 * tone (a fundamental with two harmonics and a slow tremolo), chirp (a
 * sweep from f to 2f, or down from 2f to f every other chirp class) and
 * band noise (white noise through a resonator at f, bandwidth f / 4), and
 * the frequencies f spread evenly on a log scale from 150 Hz to 0.35 of the
 * lowest rate (at most 3.6 kHz). Each clip varies its length (--seconds,
 * +- --jitter), frequency (+- 3%), gain, onset (up to 0.2 s of silence) and
 * a faint white-noise floor, so class is learnable and no two clips are the
 * same. With --channels 2 the second channel is the first delayed by 1 ms
 * and scaled (a stereo image), so mixdown and keeping channels both work.
 *
 * Encoding with libsndfile: wav and flac as 16-bit PCM, mp3 (LAME through
 * libsndfile, VBR quality 0.4), ogg (Vorbis, quality 0.5). Each file is
 * written to NAME.tmp and renamed.
 *
 * Determinism: files are a pure function of (seed, clip index, options):
 * splitmix64 streams (rng.h), one draw per statement.
 *
 * Wiring: tools/gen.c calls gen_audio_main(argc, argv) for `--task audio`
 * (argv as after `nostall gen`; its table accepts the --task given).
 */
#include <errno.h>
#include <math.h>
#include <sndfile.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "args.h"
#include "gen.h"
#include "rng.h"
#include "util.h"

enum { F_WAV, F_FLAC, F_MP3, F_OGG, F_COUNT };
static const char *const fmt_names[F_COUNT] = {"wav", "flac", "mp3", "ogg"};

#define MAX_LIST 16

typedef struct {
    const char *out_dir;
    long clips, classes, channels;
    double seconds, jitter;
    long rates[MAX_LIST];
    int nrates;
    int formats[MAX_LIST];
    int nformats;
    uint64_t seed;
    int quiet, force, task;
} audio_opts;

/* --rates, --formats: a comma-separated list (the last given wins). */
static int parse_list(const tool_arg *a, const char *prefix, const char *val, audio_opts *o,
                      int formats)
{
    char buf[256];
    int n = 0;
    if (strlen(val) >= sizeof buf) {
        tool_line(stderr, "%s: --%s: list too long (got '%s')", prefix, a->name, val);
        return -1;
    }
    strcpy(buf, val);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (n >= MAX_LIST) {
            tool_line(stderr, "%s: --%s: at most %d entries (got '%s')", prefix, a->name, MAX_LIST,
                      val);
            return -1;
        }
        if (formats) {
            int f = -1;
            for (int k = 0; k < F_COUNT; k++)
                if (!strcmp(tok, fmt_names[k])) f = k;
            if (f < 0) {
                tool_line(stderr, "%s: --%s: '%s' is not wav, flac, mp3 or ogg", prefix, a->name,
                          tok);
                return -1;
            }
            o->formats[n++] = f;
        } else {
            long r;
            if (tool_parse_int(prefix, a->name, tok, 8000, 192000, &r) < 0) return -1;
            o->rates[n++] = r;
        }
    }
    if (!n) {
        tool_line(stderr, "%s: --%s: an empty list", prefix, a->name);
        return -1;
    }
    if (formats)
        o->nformats = n;
    else
        o->nrates = n;
    return 0;
}

static int take_rates(const tool_arg *a, const char *prefix, const char *v, void *o)
{
    return parse_list(a, prefix, v, o, 0);
}

static int take_formats(const tool_arg *a, const char *prefix, const char *v, void *o)
{
    return parse_list(a, prefix, v, o, 1);
}

static const tool_arg au_args[] = {
    {"clips", TOOL_ARG_INT, offsetof(audio_opts, clips), 1, 1e7, NULL, "N", "number of clips", NULL,
     0, NULL},
    {"classes", TOOL_ARG_INT, offsetof(audio_opts, classes), 1, 1000, NULL, "K", "classes", NULL, 0,
     NULL},
    {"seconds", TOOL_ARG_DOUBLE, offsetof(audio_opts, seconds), 0.01, 3600, NULL, "S",
     "mean clip length", NULL, 0, NULL},
    {"jitter", TOOL_ARG_DOUBLE, offsetof(audio_opts, jitter), 0, 0.9, NULL, "F",
     "clip length varies by +- F of it", NULL, 0, NULL},
    {"rates", TOOL_ARG_CALL, 0, 0, 0, NULL, "LIST",
     "sample rates (Hz), comma-separated, each 8000..192000", take_rates, 0, "16000,22050,44100"},
    {"formats", TOOL_ARG_CALL, 0, 0, 0, NULL, "LIST", "wav, flac, mp3, ogg, comma-separated",
     take_formats, 0, "flac,wav"},
    {"channels", TOOL_ARG_INT, offsetof(audio_opts, channels), 1, 2, NULL, "C", "channels", NULL, 0,
     NULL},
    {"seed", TOOL_ARG_U64, offsetof(audio_opts, seed), 0, 0, NULL, "S", "seed", NULL, 0, NULL},
    {"task", TOOL_ARG_ENUM, offsetof(audio_opts, task), 0, 0, GEN_TASKS, "TASK",
     "audio here (nostall gen --help: the others)", NULL, 0, NULL},
    {"force", TOOL_ARG_FLAG, offsetof(audio_opts, force), 0, 0, NULL, NULL,
     "write into OUT_DIR even if it is not empty", NULL, 0, NULL},
    {"quiet", TOOL_ARG_FLAG, offsetof(audio_opts, quiet), 0, 0, NULL, NULL, "no summary line", NULL,
     0, NULL},
};

static const tool_cmd au_cmd = {
    .name = "gen --task audio",
    .prefix = "gen",
    .usage = "usage: nostall gen --task audio OUT_DIR [options]\n"
             "Write a synthetic AudioFolder: OUT_DIR/class_000/clip_000000.flac ... (each class\n"
             "its own tone, chirp or band of noise; every class in every format and rate).\n",
    .positionals = "one OUT_DIR",
    .max_positionals = 1,
    .args = au_args,
    .nargs = sizeof au_args / sizeof au_args[0],
};

static int parse_args(int argc, char **argv, audio_opts *o)
{
    memset(o, 0, sizeof *o);
    o->clips = 120, o->classes = 6, o->channels = 1, o->seconds = 2, o->jitter = 0.25;
    o->rates[0] = 16000, o->rates[1] = 22050, o->rates[2] = 44100, o->nrates = 3;
    o->formats[0] = F_FLAC, o->formats[1] = F_WAV, o->nformats = 2;
    o->task = GEN_TASK_AUDIO;
    int n = tool_args_parse(&au_cmd, argc, argv, o, NULL);
    if (n < 0) return n;
    if (n == 0) {
        fprintf(stderr,
                "gen: missing OUT_DIR (usage: nostall gen --task audio OUT_DIR [options])\n");
        return TOOL_ARGS_ERROR;
    }
    o->out_dir = argv[1];
    return 0;
}

/* ---- one clip ------------------------------------------------------------ */

/* Class k's frequency: log-spaced from 150 Hz to `top`. */
static double class_freq(long k, long classes, double top)
{
    if (classes <= 1) return sqrt(150.0 * top);
    return 150.0 * pow(top / 150.0, (double)k / (double)(classes - 1));
}

/* Render clip i (class k) at `rate`: n frames into x (channels interleaved). */
static void render(const audio_opts *o, long i, long k, double rate, double top, float *x, long n)
{
    tool_rng r = {tool_mix64(o->seed * 0x9e3779b97f4a7c15ULL + (uint64_t)i)};
    const int kind = (int)(k % 3);
    const double f = class_freq(k, o->classes, top) * tool_rng_range(&r, 0.97, 1.03);
    const double gain = tool_rng_range(&r, 0.25, 0.6);
    const long onset = (long)(tool_rng_range(&r, 0, 0.2) * rate);
    const double trem = tool_rng_range(&r, 2, 6), phase0 = tool_rng_range(&r, 0, 2 * M_PI);
    const double floor_amp = tool_rng_range(&r, 0.002, 0.01);
    const int down = (k / 3) % 2;
    /* band noise: a two-pole resonator at f, bandwidth f / 4 */
    const double rr = exp(-M_PI * (f / 4) / rate), c1 = 2 * rr * cos(2 * M_PI * f / rate),
                 c2 = -rr * rr;
    double y1 = 0, y2 = 0, phase = phase0;
    const double dur = (double)(n - onset > 1 ? n - onset : 1) / rate;
    const long delay = (long)(0.001 * rate);
    for (long t = 0; t < n; t++) {
        double s = 0;
        if (t >= onset) {
            const double u = (double)(t - onset) / rate;
            const double env = (1 - exp(-u * 40)) * (0.75 + 0.25 * sin(2 * M_PI * trem * u));
            if (kind == 0) {
                phase += 2 * M_PI * f / rate;
                s = sin(phase) + (2 * f < 0.45 * rate ? 0.5 * sin(2 * phase) : 0) +
                    (3 * f < 0.45 * rate ? 0.25 * sin(3 * phase) : 0);
                s *= env / 1.75;
            } else if (kind == 1) {
                double frac = u / dur, fi = down ? f * (2 - frac) : f * (1 + frac);
                phase += 2 * M_PI * fi / rate;
                s = env * sin(phase);
            } else {
                double e = tool_rng_range(&r, -1, 1);
                double y = e + c1 * y1 + c2 * y2;
                y2 = y1, y1 = y;
                s = env * y * (1 - rr) * 2.5;
            }
        }
        s = gain * s + floor_amp * tool_rng_range(&r, -1, 1);
        if (s > 0.99) s = 0.99;
        if (s < -0.99) s = -0.99;
        x[t * o->channels] = (float)s;
    }
    if (o->channels == 2)
        for (long t = 0; t < n; t++) x[t * 2 + 1] = t >= delay ? 0.8f * x[(t - delay) * 2] : 0.0f;
}

static long long write_clip(const char *path, const float *x, long n, int channels, int rate,
                            int fmt)
{
    static const int sf_fmt[F_COUNT] = {SF_FORMAT_WAV | SF_FORMAT_PCM_16,
                                        SF_FORMAT_FLAC | SF_FORMAT_PCM_16,
                                        SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III,
                                        SF_FORMAT_OGG | SF_FORMAT_VORBIS};
    char tmp[4200];
    int len = snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (len < 0 || (size_t)len >= sizeof tmp) {
        tool_line(stderr, "gen: path too long: '%s'", path);
        return -1;
    }
    SF_INFO si = {.samplerate = rate, .channels = channels, .format = sf_fmt[fmt]};
    SNDFILE *sf = sf_open(tmp, SFM_WRITE, &si);
    if (!sf) {
        tool_line(stderr, "gen: cannot write '%s': %s", tmp, sf_strerror(NULL));
        return -1;
    }
    if (fmt == F_MP3 || fmt == F_OGG) {
        double q = fmt == F_MP3 ? 0.4 : 0.5;
        sf_command(sf, SFC_SET_COMPRESSION_LEVEL, &q, sizeof q);
    }
    sf_count_t w = sf_writef_float(sf, x, n);
    int err = sf_error(sf);
    sf_close(sf);
    struct stat st;
    if (w != n || err || stat(tmp, &st) != 0 || rename(tmp, path) != 0) {
        tool_line(stderr, "gen: cannot write '%s': %s", path,
                  err ? sf_error_number(err) : strerror(errno));
        unlink(tmp);
        return -1;
    }
    return (long long)st.st_size;
}

static int digits(long v)
{
    int d = 1;
    while (v >= 10) v /= 10, d++;
    return d;
}

int gen_audio_main(int argc, char **argv)
{
    audio_opts o;
    int prc = parse_args(argc, argv, &o);
    if (prc < 0) return tool_args_status(prc);
    if (strlen(o.out_dir) > 3000) {
        fprintf(stderr, "gen: OUT_DIR is too long\n");
        return 2;
    }
    struct stat st;
    if (stat(o.out_dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) {
            tool_line(stderr, "gen: '%s' exists and is not a directory", o.out_dir);
            return 2;
        }
        int ne = tool_dir_nonempty(o.out_dir);
        if (ne < 0) {
            tool_line(stderr, "gen: cannot read '%s': %s", o.out_dir, strerror(errno));
            return 1;
        }
        if (ne && !o.force) {
            tool_line(stderr, "gen: '%s' exists and is not empty (use --force to write into it)",
                      o.out_dir);
            return 2;
        }
    }
    if (tool_mkdir_p(o.out_dir) != 0) {
        tool_line(stderr, "gen: cannot create '%s': %s", o.out_dir, strerror(errno));
        return 1;
    }
    const int cdig = digits(o.classes - 1) < 3 ? 3 : digits(o.classes - 1);
    const int idig = digits(o.clips - 1) < 6 ? 6 : digits(o.clips - 1);
    char path[4096];
    for (long c = 0; c < o.classes; c++) {
        int len = snprintf(path, sizeof path, "%s/class_%0*ld", o.out_dir, cdig, c);
        if (len < 0 || (size_t)len >= sizeof path) {
            tool_line(stderr, "gen: path too long under '%s'", o.out_dir);
            return 1;
        }
        if (mkdir(path, 0777) != 0 &&
            (errno != EEXIST || stat(path, &st) != 0 || !S_ISDIR(st.st_mode))) {
            if (errno == EEXIST) errno = ENOTDIR;
            tool_line(stderr, "gen: cannot create '%s': %s", path, strerror(errno));
            return 1;
        }
    }
    long min_rate = o.rates[0];
    for (int k = 1; k < o.nrates; k++)
        if (o.rates[k] < min_rate) min_rate = o.rates[k];
    const double top = 0.35 * min_rate < 3600 ? 0.35 * min_rate : 3600;
    double t0 = tool_now_s(), secs = 0;
    long long total = 0;
    float *x = NULL;
    long cap = 0;
    int status = 0;
    for (long i = 0; i < o.clips; i++) {
        const long k = i % o.classes;
        const int fmt = o.formats[(i / o.classes) % o.nformats];
        const long rate = o.rates[(i / (o.classes * o.nformats)) % o.nrates];
        tool_rng r = {tool_mix64(o.seed ^ ((uint64_t)i << 20) ^ 0x6c656e677468ULL)};
        const double len_s = o.seconds * tool_rng_range(&r, 1 - o.jitter, 1 + o.jitter);
        long n = (long)(len_s * rate);
        if (n < 1) n = 1;
        if (n > cap) {
            free(x);
            x = malloc((size_t)n * (size_t)o.channels * sizeof *x);
            if (!x) {
                fprintf(stderr, "gen: out of memory for a clip of %ld frames\n", n);
                status = 1;
                break;
            }
            cap = n;
        }
        render(&o, i, k, (double)rate, top, x, n);
        int len = snprintf(path, sizeof path, "%s/class_%0*ld/clip_%0*ld.%s", o.out_dir, cdig, k,
                           idig, i, fmt_names[fmt]);
        if (len < 0 || (size_t)len >= sizeof path) {
            tool_line(stderr, "gen: path too long under '%s'", o.out_dir);
            status = 1;
            break;
        }
        long long sz = write_clip(path, x, n, (int)o.channels, (int)rate, fmt);
        if (sz < 0) {
            status = 1;
            break;
        }
        total += sz;
        secs += (double)n / rate;
    }
    free(x);
    if (status) return status;
    if (!o.quiet)
        tool_line(stderr,
                  "gen: wrote %ld clips (%.0f s of audio) in %ld classes to %s (%.1f MB) in %.1f s",
                  o.clips, secs, o.classes, o.out_dir, (double)total / 1e6, tool_now_s() - t0);
    return 0;
}
