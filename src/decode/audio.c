/*
 * audio.c — audio clips in memory to float samples with libsndfile (see
 * audio.h for the contract).
 *
 * DESIGN  libsndfile reads the bytes through SF_VIRTUAL_IO over the
 * reader's `mem` window, so a clip is decoded from wherever the fetch stage
 * got it. Frames are read a chunk at a time into the reader's interleaved
 * scratch and scattered into planes (mixdown: summed in channel order, then
 * scaled by 1/channels). What libsndfile repairs silently is checked here:
 * a WAV whose data chunk declares more than the file holds (libsndfile
 * shortens it to what is there), a FLAC whose STREAMINFO promises frames a
 * truncated file lacks (nst_audio_check_end decodes its last frame), and
 * the limit is applied to what a WAV header declares before libsndfile's
 * repair hides it. What libsndfile passes through is checked too: every
 * chunk read is scanned for samples not finite or beyond
 * NST_AUDIO_MAX_SAMPLE (a float WAV can hold NaN, inf or 1e30), and
 * nst_audio_check_end reads a float or double clip whole so that a window
 * read later is only of a clip known good.
 *
 * THREADS  A reader belongs to one worker. Shared: `open_lock`, because
 * libsndfile keeps the reason an open failed in process-wide variables
 * (sf_error(NULL), sf_strerror(NULL): libsndfile issue #279) that every open
 * resets and every failed one writes, so a reason read after a failed open
 * may be another thread's. Opens hold the lock shared; a failed one is
 * repeated holding it exclusively (the same bytes fail the same way), and
 * the reason is read then. One lock held for every open would serialise
 * them (an Ogg Vorbis open takes about 0.4 ms). Two failed opens still
 * write libsndfile's buffers at once (ThreadSanitizer is told so below);
 * nothing reads them outside the exclusive lock.
 */
#include <math.h>
#include <pthread.h>
#include <sndfile.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/sanitizer.h"
#include "decode/audio.h"

/* Interleaved floats read per sf_readf_float call (frames = this / channels). */
#define CHUNK_FLOATS 16384

struct nst_audio_reader {
    SNDFILE *sf;
    struct {
        const uint8_t *data;
        sf_count_t len, pos;
    } mem;
    nst_audio_info info;
    const char *path;
    uint64_t pos;   /* the next frame libsndfile will deliver */
    float *chunk;   /* CHUNK_FLOATS interleaved floats        */
    float *acc;     /* WHOLE: interleaved planes, grow-only   */
    size_t acc_cap; /* floats                                 */
};

/* --- opening, with libsndfile's shared error state ---------------------- */

static pthread_rwlock_t open_lock;
static pthread_once_t open_once = PTHREAD_ONCE_INIT;

static void open_lock_init(void)
{
    pthread_rwlockattr_t a;
    pthread_rwlockattr_init(&a);
    /* a failed open is not starved by workers opening one clip after another */
    pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&open_lock, &a);
    pthread_rwlockattr_destroy(&a);
}

/* open(ctx, si) is sf_open or sf_open_virtual over ctx; on failure it is
 * repeated under the exclusive lock and libsndfile's reason copied into
 * reason[cap] (its first attempt's *si is not kept). */
static SNDFILE *open_locked(SNDFILE *(*open)(void *, SF_INFO *), void *ctx, SF_INFO *si,
                            char *reason, size_t cap)
{
    pthread_once(&open_once, open_lock_init);
    pthread_rwlock_rdlock(&open_lock);
    SNDFILE *sf = open(ctx, si);
    pthread_rwlock_unlock(&open_lock);
    if (sf) return sf;
    pthread_rwlock_wrlock(&open_lock);
    memset(si, 0, sizeof *si);
    sf = open(ctx, si);
    if (!sf) {
        int e = sf_error(NULL);
        snprintf(reason, cap, "%s", e ? sf_strerror(NULL) : "format not recognised");
    }
    pthread_rwlock_unlock(&open_lock);
    return sf;
}

#ifdef NST_TSAN
/* ThreadSanitizer builds, however they are run: two opens failing at once
 * both write libsndfile's process-wide reason (above), a race inside
 * libsndfile that nostall only reads under the exclusive lock. */
__attribute__((visibility("default"))) const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void) { return "race:libsndfile.so\n"; }
#endif

/* --- virtual I/O over the clip's bytes ---------------------------------- */

static sf_count_t vio_len(void *u) { return ((nst_audio_reader *)u)->mem.len; }

static sf_count_t vio_seek(sf_count_t off, int whence, void *u)
{
    nst_audio_reader *rd = u;
    sf_count_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? rd->mem.pos : rd->mem.len;
    if ((off > 0 && base > INT64_MAX - off) || base + off < 0) return -1;
    rd->mem.pos = base + off; /* past the end is allowed; reads there give 0 */
    return rd->mem.pos;
}

static sf_count_t vio_read(void *dst, sf_count_t n, void *u)
{
    nst_audio_reader *rd = u;
    if (n <= 0 || rd->mem.pos >= rd->mem.len) return 0;
    if (n > rd->mem.len - rd->mem.pos) n = rd->mem.len - rd->mem.pos;
    memcpy(dst, rd->mem.data + rd->mem.pos, (size_t)n);
    rd->mem.pos += n;
    return n;
}

static sf_count_t vio_tell(void *u) { return ((nst_audio_reader *)u)->mem.pos; }

static SF_VIRTUAL_IO vio = {vio_len, vio_seek, vio_read, NULL, vio_tell};

static SNDFILE *open_virtual(void *u, SF_INFO *si)
{
    ((nst_audio_reader *)u)->mem.pos = 0;
    return sf_open_virtual(&vio, SFM_READ, si, u);
}

static SNDFILE *open_path(void *path, SF_INFO *si) { return sf_open(path, SFM_READ, si); }

/* --- formats -------------------------------------------------------------- */

const char *nst_audio_format_name(int format)
{
    switch (format & SF_FORMAT_TYPEMASK) {
    case SF_FORMAT_WAV: return "WAV";
    case SF_FORMAT_WAVEX: return "WAVEX";
    case SF_FORMAT_RF64: return "RF64";
    case SF_FORMAT_W64: return "W64";
    case SF_FORMAT_AIFF: return "AIFF";
    case SF_FORMAT_AU: return "AU";
    case SF_FORMAT_CAF: return "CAF";
    case SF_FORMAT_FLAC: return "FLAC";
    case SF_FORMAT_OGG:
        return (format & SF_FORMAT_SUBMASK) == SF_FORMAT_OPUS ? "Ogg Opus" : "Ogg Vorbis";
    case SF_FORMAT_MPEG: return "MP3";
    default: return "audio";
    }
}

/* Bytes per sample of the subtypes whose frames sf_seek reaches exactly
 * (PCM, float, u-law, a-law); 0 for the others. */
static unsigned plain_width(int format)
{
    switch (format & SF_FORMAT_SUBMASK) {
    case SF_FORMAT_PCM_S8:
    case SF_FORMAT_PCM_U8:
    case SF_FORMAT_ULAW:
    case SF_FORMAT_ALAW: return 1;
    case SF_FORMAT_PCM_16: return 2;
    case SF_FORMAT_PCM_24: return 3;
    case SF_FORMAT_PCM_32:
    case SF_FORMAT_FLOAT: return 4;
    case SF_FORMAT_DOUBLE: return 8;
    default: return 0;
    }
}

static int is_wave(int format)
{
    int major = format & SF_FORMAT_TYPEMASK;
    return major == SF_FORMAT_WAV || major == SF_FORMAT_WAVEX || major == SF_FORMAT_RF64;
}

static uint32_t rd32(const uint8_t *p, int be)
{
    return be ? (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]
              : (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

/* The size a RIFF/RIFX/RF64 WAVE's data chunk declares: 1 with *bytes and
 * *avail (what the file holds of it) when it declares a definite size, 0
 * when it does not (a streamed 0 or 0xFFFFFFFF, no data chunk in sight). */
static int wav_declared(const uint8_t *d, size_t len, uint64_t *bytes, uint64_t *avail)
{
    if (len < 12 || memcmp(d + 8, "WAVE", 4) != 0) return 0;
    const int be = memcmp(d, "RIFX", 4) == 0;
    const int rf64 = memcmp(d, "RF64", 4) == 0 || memcmp(d, "BW64", 4) == 0;
    if (!be && !rf64 && memcmp(d, "RIFF", 4) != 0) return 0;
    uint64_t pos = 12, ds64 = 0;
    while (pos + 8 <= len) {
        const uint8_t *c = d + pos;
        uint64_t size = rd32(c + 4, be), body = pos + 8;
        if (memcmp(c, "ds64", 4) == 0 && size >= 16 && body + 16 <= len)
            ds64 = (uint64_t)rd32(c + 16, 0) | (uint64_t)rd32(c + 20, 0) << 32;
        if (memcmp(c, "data", 4) == 0) {
            if (rf64 && size == 0xFFFFFFFFu)
                size = ds64;
            else if (size == 0 || size == 0xFFFFFFFFu)
                return 0;
            if (!size) return 0;
            *bytes = size;
            *avail = len - body;
            return 1;
        }
        pos = body + size + (size & 1);
    }
    return 0;
}

/* AU (Sun .snd): the data offset of its header (bytes 4-7, in the byte
 * order of its magic) into *off; 1 when it lies inside the 24-byte header.
 * libsndfile 1.2 then reads frames from byte 24 on but seeks from the
 * offset, so a window read alone gave other samples than the whole clip's
 * (found by fuzz_audio). */
static int au_offset_in_header(const uint8_t *d, size_t len, uint32_t *off)
{
    if (len < 8) return 0;
    if (!memcmp(d, ".snd", 4))
        *off = (uint32_t)d[4] << 24 | (uint32_t)d[5] << 16 | (uint32_t)d[6] << 8 | d[7];
    else if (!memcmp(d, "dns.", 4))
        *off = (uint32_t)d[7] << 24 | (uint32_t)d[6] << 16 | (uint32_t)d[5] << 8 | d[4];
    else
        return 0;
    return *off < 24;
}

/* --- the reader ----------------------------------------------------------- */

/* MP3: libmpg123's length is exact when the first frame is a Xing/Info
 * header with a frame count (LAME and most encoders write one; with the
 * LAME extension libmpg123 also trims the encoder delay and padding, and
 * the length says so), else an estimate from the file size. 1 when there
 * is such a header, with *bytes the stream size it declares (0: none) and
 * *avail what the file holds from the first frame on; 0 otherwise (the
 * stream is then decoded whole). A seek would tell too, but libmpg123
 * prints to stderr when it decodes past a seek without the bit reservoir. */
static int mp3_xing(const uint8_t *d, size_t len, uint64_t *bytes, uint64_t *avail)
{
    size_t off = 0;
    if (len >= 10 && memcmp(d, "ID3", 3) == 0) {
        off = 10 + ((size_t)(d[6] & 0x7f) << 21 | (size_t)(d[7] & 0x7f) << 14 |
                    (size_t)(d[8] & 0x7f) << 7 | (d[9] & 0x7f));
        if (d[5] & 0x10) off += 10; /* footer */
    }
    if (off + 4 > len) return 0;
    const uint8_t *h = d + off;
    const unsigned version = (h[1] >> 3) & 3, layer = (h[1] >> 1) & 3, mono = (h[3] >> 6) == 3;
    if (h[0] != 0xff || (h[1] & 0xe0) != 0xe0 || version == 1 || layer != 1) return 0;
    size_t x = off + 4 + (h[1] & 1 ? 0 : 2) +
               (version == 3 ? (mono ? 17 : 32) : (mono ? 9 : 17)); /* CRC, side info */
    if (x + 16 > len || (memcmp(d + x, "Xing", 4) != 0 && memcmp(d + x, "Info", 4) != 0)) return 0;
    const uint32_t flags = rd32(d + x + 4, 1);
    if (!(flags & 1)) return 0;
    *bytes = flags & 2 ? rd32(d + x + 12, 1) : 0;
    *avail = len - off;
    return 1;
}

int nst_audio_reader_create(nst_audio_reader **out)
{
    nst_audio_reader *rd = calloc(1, sizeof *rd);
    *out = NULL;
    if (!rd || !(rd->chunk = malloc(CHUNK_FLOATS * sizeof *rd->chunk))) {
        free(rd);
        return nst_error(NOSTALL_E_NOMEM, "audio: out of memory");
    }
    *out = rd;
    return 0;
}

void nst_audio_close(nst_audio_reader *rd)
{
    if (rd && rd->sf) sf_close(rd->sf);
    if (rd) rd->sf = NULL;
}

void nst_audio_reader_free(nst_audio_reader *rd)
{
    if (!rd) return;
    nst_audio_close(rd);
    free(rd->chunk);
    free(rd->acc);
    free(rd);
}

/* `what`: "" (the length), "its header declares ", "decodes to at least ". */
static int too_long(const nst_audio_reader *rd, uint64_t frames, const char *what)
{
    const nst_audio_info *in = &rd->info;
    return nst_error(NOSTALL_E_FILE_TOO_LARGE,
                     "audio: %s: %s%llu frames at %u Hz (%.1f s), over max_audio_seconds "
                     "(%llu frames)",
                     rd->path, what, (unsigned long long)frames, in->rate,
                     (double)frames / in->rate, (unsigned long long)in->max_frames);
}

int nst_audio_open(nst_audio_reader *rd, const uint8_t *data, size_t len, const char *path,
                   const nst_audio_limits *lim, nst_audio_info *info)
{
    SF_INFO si;
    nst_audio_close(rd);
    rd->path = path;
    rd->pos = 0;
    memset(&rd->info, 0, sizeof rd->info);
    if (len == 0) return nst_error(NOSTALL_E_EMPTY, "audio: %s: empty file", path);
    if (len > (uint64_t)INT64_MAX)
        return nst_error(NOSTALL_E_FILE_TOO_LARGE, "audio: %s: too large", path);
    rd->mem.data = data;
    rd->mem.len = (sf_count_t)len;
    memset(&si, 0, sizeof si);
    char why[256];
    rd->sf = open_locked(open_virtual, rd, &si, why, sizeof why);
    if (!rd->sf)
        return nst_error(NOSTALL_E_UNSUPPORTED,
                         "audio: %s: not an audio file libsndfile reads (WAV, FLAC, Ogg, MP3, "
                         "...): %s",
                         path, why);
    nst_audio_info *in = &rd->info;
    in->format = si.format;
    in->channels = si.channels > 0 ? (uint32_t)si.channels : 0;
    in->rate = si.samplerate > 0 ? (uint32_t)si.samplerate : 0;
    const char *fmt = nst_audio_format_name(si.format);
    if (in->channels == 0 || in->rate < NST_AUDIO_MIN_RATE || in->rate > NST_AUDIO_MAX_RATE) {
        int rc = nst_error(NOSTALL_E_UNSUPPORTED,
                           "audio: %s: %s with %d channels at %d Hz (the rate must be %u to %u Hz)",
                           path, fmt, si.channels, si.samplerate, NST_AUDIO_MIN_RATE,
                           NST_AUDIO_MAX_RATE);
        nst_audio_close(rd);
        return rc;
    }
    if (lim->channels && in->channels != lim->channels) {
        int rc = nst_error(NOSTALL_E_UNSUPPORTED,
                           "audio: %s: %u channels, the dataset's clips have %u (mixdown=0 keeps "
                           "channels: every clip must have as many)",
                           path, in->channels, lim->channels);
        nst_audio_close(rd);
        return rc;
    }
    in->planes = lim->channels ? in->channels : 1;
    double mf = lim->max_seconds * in->rate;
    in->max_frames = mf >= 9e18 ? (uint64_t)9e18 : (uint64_t)mf;
    const int major = si.format & SF_FORMAT_TYPEMASK;
    int known = si.frames > 0 && si.frames != SF_COUNT_MAX;
    uint64_t bytes, avail;
    uint32_t au_off;
    if (major == SF_FORMAT_AU && au_offset_in_header(data, len, &au_off)) {
        nst_audio_close(rd);
        return nst_error(NOSTALL_E_CORRUPT,
                         "audio: %s: corrupt: the AU header's data offset %u lies inside the "
                         "header (24 bytes)",
                         path, au_off);
    }
    if (known && major == SF_FORMAT_MPEG) {
        known = mp3_xing(data, len, &bytes, &avail);
        if (known && bytes && avail < bytes - bytes / 100) { /* libmpg123's "off by 1%" */
            nst_audio_close(rd);
            return nst_error(NOSTALL_E_TRUNCATED,
                             "audio: %s: truncated: the MP3's Xing header declares %llu bytes, "
                             "the file holds %llu",
                             path, (unsigned long long)bytes, (unsigned long long)avail);
        }
    }
    if (!known) {
        in->access = NST_AUDIO_WHOLE;
    } else {
        in->frames = (uint64_t)si.frames;
        in->access = plain_width(si.format) && si.seekable && major != SF_FORMAT_OGG
                         ? NST_AUDIO_SEEK
                         : NST_AUDIO_FORWARD;
        if (is_wave(si.format) && plain_width(si.format) && wav_declared(data, len, &bytes, &avail)) {
            uint64_t declared = bytes / ((uint64_t)plain_width(si.format) * in->channels);
            int rc = 0;
            if (declared > in->max_frames)
                rc = too_long(rd, declared, "its header declares ");
            else if (bytes > avail)
                rc = nst_error(NOSTALL_E_TRUNCATED,
                               "audio: %s: truncated: the WAV data chunk declares %llu frames "
                               "(%llu bytes), the file holds %llu bytes of it",
                               path, (unsigned long long)declared, (unsigned long long)bytes,
                               (unsigned long long)avail);
            if (rc < 0) {
                nst_audio_close(rd);
                return rc;
            }
        }
        if (in->frames > in->max_frames) {
            int rc = too_long(rd, in->frames, "");
            nst_audio_close(rd);
            return rc;
        }
        if (in->frames == 0) {
            nst_audio_close(rd);
            return nst_error(NOSTALL_E_EMPTY, "audio: %s: %s with no frames", path, fmt);
        }
    }
    *info = *in;
    return 0;
}

/* Up to `want` frames into the chunk; the frames read (0: the end), or a
 * negative status for a decoder error. */
static sf_count_t read_chunk(nst_audio_reader *rd, uint64_t want)
{
    const uint64_t cap = CHUNK_FLOATS / rd->info.channels ? CHUNK_FLOATS / rd->info.channels : 1;
    if (want > cap) want = cap;
    sf_count_t got = sf_readf_float(rd->sf, rd->chunk, (sf_count_t)want);
    int e = sf_error(rd->sf);
    if (e)
        return nst_error(NOSTALL_E_CORRUPT, "audio: %s: %s decoding failed near frame %llu: %s",
                         rd->path, nst_audio_format_name(rd->info.format),
                         (unsigned long long)rd->pos, sf_error_number(e));
    if (got < 0) got = 0;
    /* NaN fails the comparison too; one pass, no branch per sample */
    const uint64_t ns = (uint64_t)got * rd->info.channels;
    uint64_t bad = 0;
    for (uint64_t i = 0; i < ns; i++) bad += !(fabsf(rd->chunk[i]) <= NST_AUDIO_MAX_SAMPLE);
    if (bad) {
        uint64_t i = 0;
        while (fabsf(rd->chunk[i]) <= NST_AUDIO_MAX_SAMPLE) i++;
        return nst_error(NOSTALL_E_CORRUPT,
                         "audio: %s: corrupt: %s sample of frame %llu (channel %u) is %g; samples "
                         "must be finite with |x| <= %g",
                         rd->path, nst_audio_format_name(rd->info.format),
                         (unsigned long long)(rd->pos + i / rd->info.channels),
                         (unsigned)(i % rd->info.channels), (double)rd->chunk[i],
                         (double)NST_AUDIO_MAX_SAMPLE);
    }
    rd->pos += (uint64_t)got;
    return got;
}

/* Scatter n chunk frames into planes at offset `at` (mixdown: the mean). */
static void scatter(const nst_audio_reader *rd, uint64_t n, float *const *planes, uint64_t at)
{
    const uint32_t ch = rd->info.channels;
    const float *s = rd->chunk;
    if (ch == 1) {
        memcpy(planes[0] + at, s, n * sizeof *s);
    } else if (rd->info.planes == 1) {
        const float k = 1.0f / (float)ch;
        float *d = planes[0] + at;
        for (uint64_t i = 0; i < n; i++) {
            float sum = 0;
            for (uint32_t c = 0; c < ch; c++) sum += s[i * ch + c];
            d[i] = sum * k;
        }
    } else {
        for (uint64_t i = 0; i < n; i++)
            for (uint32_t c = 0; c < ch; c++) planes[c][at + i] = s[i * ch + c];
    }
}

static int short_read(const nst_audio_reader *rd, uint64_t want)
{
    return nst_error(NOSTALL_E_TRUNCATED,
                     "audio: %s: truncated: %s ends at frame %llu, %llu frames wanted (its header "
                     "declares %llu)",
                     rd->path, nst_audio_format_name(rd->info.format), (unsigned long long)rd->pos,
                     (unsigned long long)want, (unsigned long long)rd->info.frames);
}

int nst_audio_read(nst_audio_reader *rd, uint64_t first, uint64_t count, float *const *planes)
{
    const nst_audio_info *in = &rd->info;
    if (!rd->sf || in->access == NST_AUDIO_WHOLE || first > in->frames || count > in->frames - first)
        return nst_error(NOSTALL_E_INVALID, "audio: %s: frames %llu+%llu outside the clip",
                         rd->path, (unsigned long long)first, (unsigned long long)count);
    if (first != rd->pos) {
        if (in->access == NST_AUDIO_SEEK) {
            if (sf_seek(rd->sf, (sf_count_t)first, SEEK_SET) != (sf_count_t)first)
                return short_read(rd, first + count);
            rd->pos = first;
        } else if (first < rd->pos) {
            return nst_error(NOSTALL_E_INVALID, "audio: %s: cannot read backwards", rd->path);
        }
        while (rd->pos < first) { /* FORWARD: decode and drop */
            sf_count_t got = read_chunk(rd, first - rd->pos);
            if (got < 0) return (int)got;
            if (got == 0) return short_read(rd, first + count);
        }
    }
    uint64_t done = 0;
    while (done < count) {
        sf_count_t got = read_chunk(rd, count - done);
        if (got < 0) return (int)got;
        if (got == 0) return short_read(rd, first + count);
        scatter(rd, (uint64_t)got, planes, done);
        done += (uint64_t)got;
    }
    return 0;
}

int nst_audio_check_end(nst_audio_reader *rd)
{
    const nst_audio_info *in = &rd->info;
    if (!rd->sf || in->access != NST_AUDIO_SEEK) return 0;
    const int sub = in->format & SF_FORMAT_SUBMASK;
    if (sub == SF_FORMAT_FLOAT || sub == SF_FORMAT_DOUBLE) {
        /* samples that can be anything: every one is checked (read_chunk),
         * whichever window is read afterwards */
        if (rd->pos != 0 && sf_seek(rd->sf, 0, SEEK_SET) != 0) return short_read(rd, in->frames);
        rd->pos = 0;
        while (rd->pos < in->frames) {
            sf_count_t got = read_chunk(rd, in->frames - rd->pos);
            if (got < 0) return (int)got;
            if (got == 0) return short_read(rd, in->frames);
        }
        return 0;
    }
    if ((in->format & SF_FORMAT_TYPEMASK) != SF_FORMAT_FLAC) return 0;
    const uint64_t last = in->frames - 1;
    if (sf_seek(rd->sf, (sf_count_t)last, SEEK_SET) != (sf_count_t)last) {
        rd->pos = 0; /* unknown: the next read seeks */
        return nst_error(NOSTALL_E_TRUNCATED,
                         "audio: %s: truncated: FLAC declares %llu frames, its last frame cannot "
                         "be found",
                         rd->path, (unsigned long long)in->frames);
    }
    rd->pos = last;
    sf_count_t got = read_chunk(rd, 1);
    if (got < 0) return (int)got;
    if (got != 1) return short_read(rd, in->frames);
    return 0;
}

/* Grow rd->acc to `need` floats, keeping `used`. */
static int acc_grow(nst_audio_reader *rd, size_t need)
{
    if (need <= rd->acc_cap) return 0;
    size_t cap = rd->acc_cap ? rd->acc_cap : 65536;
    while (cap < need) cap = cap > SIZE_MAX / 4 ? need : cap * 2;
    float *p = realloc(rd->acc, cap * sizeof *p);
    if (!p)
        return nst_error(NOSTALL_E_NOMEM, "audio: %s: cannot allocate %zu samples", rd->path, cap);
    rd->acc = p;
    rd->acc_cap = cap;
    return 0;
}

int nst_audio_read_all(nst_audio_reader *rd, nst_buf *out, uint64_t *frames)
{
    const nst_audio_info *in = &rd->info;
    const uint32_t np = in->planes;
    size_t bytes;
    int rc;
    *frames = 0;
    if (!rd->sf) return nst_error(NOSTALL_E_INVALID, "audio: %s: not open", rd->path);
    if (in->access != NST_AUDIO_WHOLE) {
        float *planes[1024];
        if (np > sizeof planes / sizeof *planes ||
            nst_mul_overflow((size_t)in->frames, (size_t)np * sizeof(float), &bytes))
            return nst_error(NOSTALL_E_FILE_TOO_LARGE, "audio: %s: too many samples", rd->path);
        if ((rc = nst_buf_reserve(out, bytes ? bytes : 1)) < 0) return rc;
        for (uint32_t p = 0; p < np; p++) planes[p] = (float *)out->data + (size_t)p * in->frames;
        if ((rc = nst_audio_read(rd, 0, in->frames, planes)) < 0) return rc;
        *frames = in->frames;
        return 0;
    }
    /* WHOLE: accumulate interleaved planes (one float per frame when mixed
     * down), then lay them out planar. */
    uint64_t n = 0;
    for (;;) {
        size_t need;
        const uint64_t room = CHUNK_FLOATS / in->channels ? CHUNK_FLOATS / in->channels : 1;
        if (nst_mul_overflow((size_t)(n + room), np, &need) || (rc = acc_grow(rd, need)) < 0)
            return rc < 0 ? rc : nst_error(NOSTALL_E_NOMEM, "audio: %s: too many samples", rd->path);
        sf_count_t got = read_chunk(rd, room);
        if (got < 0) return (int)got;
        if (got == 0) break;
        if (n + (uint64_t)got > in->max_frames)
            return too_long(rd, n + (uint64_t)got, "decodes to at least ");
        if (np == 1) {
            float *d = rd->acc + n;
            scatter(rd, (uint64_t)got, &d, 0);
        } else {
            memcpy(rd->acc + n * np, rd->chunk, (size_t)got * np * sizeof(float));
        }
        n += (uint64_t)got;
    }
    if (n == 0)
        return nst_error(NOSTALL_E_EMPTY, "audio: %s: %s with no frames", rd->path,
                         nst_audio_format_name(in->format));
    if (nst_mul_overflow((size_t)n, (size_t)np * sizeof(float), &bytes))
        return nst_error(NOSTALL_E_FILE_TOO_LARGE, "audio: %s: too many samples", rd->path);
    if ((rc = nst_buf_reserve(out, bytes)) < 0) return rc;
    float *o = (float *)out->data;
    if (np == 1) {
        memcpy(o, rd->acc, (size_t)n * sizeof *o);
    } else {
        for (uint64_t i = 0; i < n; i++)
            for (uint32_t p = 0; p < np; p++) o[(size_t)p * n + i] = rd->acc[i * np + p];
    }
    *frames = n;
    return 0;
}

int nst_audio_probe_channels(const char *path, uint32_t *channels)
{
    SF_INFO si;
    memset(&si, 0, sizeof si);
    char why[256];
    SNDFILE *sf = open_locked(open_path, (void *)path, &si, why, sizeof why);
    if (!sf)
        return nst_error(NOSTALL_E_UNSUPPORTED, "audio: %s: cannot read its header: %s", path, why);
    sf_close(sf);
    if (si.channels <= 0)
        return nst_error(NOSTALL_E_UNSUPPORTED, "audio: %s: %d channels", path, si.channels);
    *channels = (uint32_t)si.channels;
    return 0;
}
