/*
 * audio.h — encoded audio bytes to float samples, with libsndfile. The only
 * module that includes sndfile.h.
 *
 * A reader is a per-worker object. It opens a clip held in memory (the bytes
 * the fetch stage delivered: a local file, an HTTP body, a cache entry) through
 * libsndfile's virtual I/O, so every format libsndfile 1.2 reads by content --
 * WAV (RIFF, RIFX, RF64, WAVEX), FLAC, Ogg Vorbis and Opus, MP3, AIFF, AU,
 * CAF, W64, ... -- is read without a temporary file; the name is never used.
 * Samples come out as float32 in [-1, 1) for integer PCM (x / 2^(bits-1), as
 * libsndfile and torchaudio both scale them), planar: one plane per channel,
 * or one plane holding the channels' mean (mixdown: the sum in channel order
 * times 1/channels).
 *
 * Access (nst_audio_info.access), by what each format allows exactly:
 *   SEEK     integer or float PCM, u-law, a-law in any container, and FLAC:
 *            the header gives the exact length and sf_seek() lands on any
 *            frame with the same samples a read from the start gives, so
 *            only the frames a window needs are decoded;
 *   FORWARD  other formats whose header gives the exact length (Ogg Vorbis
 *            and Opus, ADPCM, MP3 with a Xing/Info header, ...): decoded
 *            from the first frame up to the last one needed (a seek in a
 *            lossy format need not give the same samples as decoding from
 *            the start; libmpg123's does not);
 *   WHOLE    MP3 without a Xing/Info frame count (libmpg123's length is then
 *            an estimate from the file size) and any stream of unknown
 *            length: decoded to its end, and the length is what decoded.
 *
 * Hostile input: the format is found by content; the rate must be within
 * [NST_AUDIO_MIN_RATE, NST_AUDIO_MAX_RATE]; the length is checked against the
 * limit (max_audio_seconds) before any sample buffer is sized -- for WAV,
 * against what the header's data chunk *declares*, so a header claiming 2^31
 * frames is refused whatever the file holds; a WAV whose data chunk declares
 * more bytes than the file has is truncated (libsndfile would silently read
 * the rest); a FLAC is checked to decode at its last frame (its STREAMINFO
 * may promise frames a truncated file lacks); any decoder error libsndfile
 * reports (a FLAC frame that lost sync, ...) is corrupt data; a WHOLE stream
 * stops being read at the limit; an MP3 holding less than 99% of the
 * bytes its Xing header declares is truncated (between 99% and 100%, a
 * read up to a window that ends before the damage succeeds, a whole read
 * fails); a decoded sample that is not finite (NaN, inf) or whose magnitude
 * exceeds NST_AUDIO_MAX_SAMPLE (1000: a float or double format can hold
 * anything; integer formats decode within [-1, 1)) makes the clip corrupt
 * -- every sample of a float or double clip is checked by
 * nst_audio_check_end, whichever window is read, and every sample any read
 * decodes is checked in every format. Size arithmetic is overflow-checked.
 *
 * Errors (the message names the path and what was wrong):
 *   E_UNSUPPORTED     not a format libsndfile reads (a text file named .wav,
 *                     garbage named .mp3), a rate out of bounds, or (keeping
 *                     channels) another channel count than the dataset's
 *   E_EMPTY           no frames
 *   E_TRUNCATED       fewer frames than the header declares
 *   E_CORRUPT         a decoder error; a sample not finite or beyond
 *                     +-NST_AUDIO_MAX_SAMPLE (the message names its frame)
 *   E_FILE_TOO_LARGE  longer than the limit
 *   E_NOMEM
 *
 * Memory: the reader's scratch (a chunk of interleaved frames) is grow-only;
 * libsndfile allocates its own handle, and the FLAC, Vorbis and MP3
 * decoders theirs, at every open (their allocators are not replaceable).
 *
 * Threads: a reader is used by one thread at a time; readers of different
 * threads are independent. (libsndfile writes a global error number on
 * every open; only the text of an open failure's reason can be another
 * thread's then, never a status.)
 */
#ifndef NST_DECODE_AUDIO_H
#define NST_DECODE_AUDIO_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"

#define NST_AUDIO_MIN_RATE 1000u
#define NST_AUDIO_MAX_RATE 768000u
/* The largest |sample| a clip may hold (float formats; see above). */
#define NST_AUDIO_MAX_SAMPLE 1000.0f

enum { NST_AUDIO_SEEK = 0, NST_AUDIO_FORWARD = 1, NST_AUDIO_WHOLE = 2 };

typedef struct nst_audio_limits {
    double max_seconds; /* longer clips are E_FILE_TOO_LARGE            */
    uint32_t channels;  /* keeping channels: the count every clip has
                            (0: mixdown to one plane)                    */
} nst_audio_limits;

typedef struct nst_audio_info {
    uint32_t rate, channels; /* of the file                               */
    uint32_t planes;         /* delivered: 1 (mixdown) or channels        */
    int access;              /* NST_AUDIO_SEEK / FORWARD / WHOLE          */
    uint64_t frames;         /* exact length (SEEK, FORWARD); WHOLE: 0    */
    uint64_t max_frames;     /* the limit in frames at this rate          */
    int format;              /* libsndfile's SF_FORMAT_* (for messages)   */
} nst_audio_info;

typedef struct nst_audio_reader nst_audio_reader;

int nst_audio_reader_create(nst_audio_reader **out);
void nst_audio_reader_free(nst_audio_reader *rd);

/* Open the clip data[0, len) (kept, not copied, until close) named `path`
 * in messages; fills *info. The reader is then at frame 0. */
int nst_audio_open(nst_audio_reader *rd, const uint8_t *data, size_t len, const char *path,
                   const nst_audio_limits *lim, nst_audio_info *info);
/* Frames [first, first + count) into planes[p][0, count), p < info.planes.
 * SEEK: any order; FORWARD: first at or after the previous read's end (the
 * frames between are decoded and dropped). Fewer frames than asked:
 * E_TRUNCATED. Not for WHOLE. */
int nst_audio_read(nst_audio_reader *rd, uint64_t first, uint64_t count, float *const *planes);
/* SEEK formats whose length is a promise (FLAC): the last frame decodes,
 * else E_TRUNCATED. SEEK float and double formats: every sample is finite
 * and within +-NST_AUDIO_MAX_SAMPLE, else E_CORRUPT (the next read seeks).
 * 0 at once for the others. */
int nst_audio_check_end(nst_audio_reader *rd);
/* Every frame, to the end of the stream (WHOLE; also SEEK/FORWARD, which
 * must then give exactly info.frames), planar into out (plane p at
 * out + p * *frames floats). E_FILE_TOO_LARGE past the limit. */
int nst_audio_read_all(nst_audio_reader *rd, nst_buf *out, uint64_t *frames);
void nst_audio_close(nst_audio_reader *rd);

/* The channel count of the local file at `path` (its header alone), for
 * a dataset that keeps channels. */
int nst_audio_probe_channels(const char *path, uint32_t *channels);

/* A short name of a libsndfile format for messages ("FLAC", "WAV", ...). */
const char *nst_audio_format_name(int format);

#endif
