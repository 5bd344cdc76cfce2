/*
 * fuzz_audio.c — the audio decode path (src/decode/audio.c over libsndfile:
 * WAV/RIFX/RF64, FLAC, Ogg, MP3, AIFF, ...; our WAV and Xing checks) and the
 * resampler behind it (src/augment/resample.c), as task=audio runs them.
 *
 * Per input: open (mixed down, and keeping channels when there are few), the
 * FLAC end check, a window read, a whole read, and the window of the
 * resampled clip computed from its own input frames.
 *
 * Oracles: every status is one a bad item may have, naming the item; a
 * clip that opens has a rate within bounds, at least one frame and, when
 * its length is known, no more than the limit; a window read (SEEK or
 * FORWARD) gives the same frames as the whole read, which gives exactly the
 * frames the header declared; the resampled window from its own input
 * frames equals the same window of the whole resampled clip, byte for byte;
 * a second open of the same bytes gives the same answer (a reader keeps no
 * state from one clip to the next). Memory: the limit is 20 s, so a header
 * claiming hours of audio is refused before anything is sized; libFuzzer's
 * -rss_limit_mb / -malloc_limit_mb (make fuzz: 512 MB) catch the rest.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "augment/resample.h"
#include "common/buf.h"
#include "decode/audio.h"
#include "nostall.h"

#define PATH "fuzz-clip"
#define MAX_SECONDS 20.0

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(int line, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));
static void fail(int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "fuzz_audio.c:%d: fuzz check failed: ", line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n  last error: %s\n", nostall_last_error());
    abort();
}

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) fail(__LINE__, __VA_ARGS__);                                                  \
    } while (0)

static void check_status(int rc, const char *what)
{
    if (rc == 0) return;
    CHECK(rc == NOSTALL_E_CORRUPT || rc == NOSTALL_E_TRUNCATED || rc == NOSTALL_E_UNSUPPORTED ||
              rc == NOSTALL_E_EMPTY || rc == NOSTALL_E_FILE_TOO_LARGE,
          "%s: status %d (%s)", what, rc, nostall_status_name(rc));
    CHECK(strstr(nostall_last_error(), PATH) != NULL, "%s: message does not name the clip", what);
}

static nst_audio_reader *rd;
static nst_resampler *rs;
static nst_buf all, win, whole_out, part_out;

/* Open, check the end, read a window and everything; returns the open's
 * status (the others are checked here). */
static int one(const uint8_t *data, size_t size, uint32_t channels, uint64_t *hash)
{
    nst_audio_limits lim = {.max_seconds = MAX_SECONDS, .channels = channels};
    nst_audio_info info;
    int rc = nst_audio_open(rd, data, size, PATH, &lim, &info);
    check_status(rc, "open");
    *hash = (uint64_t)rc;
    if (rc < 0) return rc;
    CHECK(info.rate >= NST_AUDIO_MIN_RATE && info.rate <= NST_AUDIO_MAX_RATE, "rate %u", info.rate);
    CHECK(info.planes == (channels ? info.channels : 1), "planes %u", info.planes);
    const int known = info.access != NST_AUDIO_WHOLE;
    if (known)
        CHECK(info.frames >= 1 && info.frames <= info.max_frames, "frames %llu",
              (unsigned long long)info.frames);
    /* a window of the clip, read alone */
    uint64_t first = 0, count = 0;
    int wrc = -1;
    if (known) {
        first = info.frames / 3, count = info.frames - first < 5000 ? info.frames - first : 5000;
        rc = nst_audio_check_end(rd);
        check_status(rc, "check_end");
        if (rc == 0 && nst_buf_reserve(&win, count * info.planes * sizeof(float) + 4) == 0) {
            float *pl[1024];
            for (uint32_t p = 0; p < info.planes; p++) pl[p] = (float *)win.data + p * count;
            wrc = nst_audio_read(rd, first, count, pl);
            check_status(wrc, "read");
        }
    }
    nst_audio_close(rd);
    /* everything, from a fresh open */
    CHECK(nst_audio_open(rd, data, size, PATH, &lim, &info) == 0, "a second open fails");
    uint64_t n = 0;
    rc = nst_audio_read_all(rd, &all, &n);
    check_status(rc, "read_all");
    nst_audio_close(rd);
    if (rc < 0) return 0;
    if (known)
        CHECK(n == info.frames, "read %llu of %llu frames", (unsigned long long)n,
              (unsigned long long)info.frames);
    CHECK(n >= 1 && n <= info.max_frames, "read %llu frames", (unsigned long long)n);
    const float *a = (const float *)all.data;
    if (wrc == 0)
        for (uint32_t p = 0; p < info.planes; p++)
            CHECK(!memcmp((const float *)win.data + p * count, a + p * n + first,
                          count * sizeof(float)),
                  "window of plane %u differs from the whole read", p);
    for (uint64_t i = 0; i < n * info.planes; i++) *hash = *hash * 31 + (uint64_t)(a[i] != a[i]);
    /* resample to 16 kHz (mixed down): a window from its own frames */
    if (info.planes != 1) return 0;
    nst_resample_plan p;
    nst_resample_plan_init(&p, info.rate, 16000);
    const uint64_t m = nst_resample_out_frames(&p, n);
    if (m > 16000 * (uint64_t)MAX_SECONDS + 16) return 0;
    if (nst_buf_reserve(&whole_out, m * sizeof(float)) < 0) return 0;
    const float *in[1] = {a};
    float *o[1] = {(float *)whole_out.data};
    rc = nst_resample(rs, &p, n, 1, in, 0, n, 0, m, o, PATH);
    CHECK(rc == 0, "resampling %u -> 16000 Hz failed", info.rate);
    const uint64_t wa = m / 2, wb = wa + (m - wa < 3000 ? m - wa : 3000);
    uint64_t ia, ib;
    nst_resample_needs(&p, n, wa, wb, &ia, &ib);
    if (nst_buf_reserve(&part_out, (wb - wa) * sizeof(float) + 4) < 0) return 0;
    const float *pin[1] = {a + ia};
    float *po[1] = {(float *)part_out.data};
    CHECK(nst_resample(rs, &p, n, 1, pin, ia, ib, wa, wb, po, PATH) == 0,
          "window resampling failed");
    CHECK(!memcmp(part_out.data, (const float *)whole_out.data + wa, (wb - wa) * sizeof(float)),
          "a resampled window differs from the whole clip's");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!rd && (nst_audio_reader_create(&rd) < 0 || nst_resampler_create(&rs) < 0)) abort();
    uint64_t h1, h2;
    int rc = one(data, size, 0, &h1);
    /* the same bytes again: the same answer */
    int rc2 = one(data, size, 0, &h2);
    CHECK(rc == rc2 && h1 == h2, "a second pass differs (%d %d)", rc, rc2);
    /* keeping channels, when there are few */
    if (rc == 0) {
        nst_audio_limits lim = {.max_seconds = MAX_SECONDS};
        nst_audio_info info;
        if (nst_audio_open(rd, data, size, PATH, &lim, &info) == 0 && info.channels <= 8) {
            nst_audio_close(rd);
            one(data, size, info.channels, &h2);
        }
        nst_audio_close(rd);
    }
    return 0;
}
