/*
 * nostall.h — the one public header of libnostall, a data-loading engine for
 * deep-learning training. If it is not declared here, it is not API.
 *
 * OVERVIEW
 *   A loader reads a dataset (an ImageFolder tree or a `path<TAB>label` file
 *   list), and delivers batches of decoded, augmented images in a fixed,
 *   seed-determined order:
 *
 *       nostall_config *cfg;  nostall_loader *ld;  nostall_batch b;
 *       nostall_config_create(&cfg);
 *       nostall_config_set(cfg, "batch_size", "256");
 *       if (nostall_loader_create(&ld, "/data/train", cfg) < 0)
 *           fprintf(stderr, "%s\n", nostall_last_error());
 *       nostall_config_free(cfg);            // the loader keeps a copy
 *       for (;;) {
 *           int rc = nostall_loader_next(ld, &b);
 *           if (rc == NOSTALL_EPOCH_END) continue;  // or: break per epoch
 *           if (rc == NOSTALL_DONE) break;          // `epochs` delivered
 *           if (rc < 0) { fprintf(stderr, "%s\n", nostall_last_error()); break; }
 *           train(b.images, b.labels, b.count);
 *           nostall_loader_release(ld, &b);
 *       }
 *       nostall_loader_free(ld);
 *
 * STATUS CONVENTION
 *   Every fallible call returns an int: 0 on success, a small positive value
 *   for an informational outcome (NOSTALL_EPOCH_END, NOSTALL_DONE), a negative
 *   NOSTALL_E_* code on error. After an error, nostall_last_error() returns a
 *   thread-local message naming the function, and where relevant the file
 *   path and item index involved. Codes are pinned: they never change value.
 *
 * OWNERSHIP AND LIFETIMES
 *   1. Every *_create has exactly one matching *_free; *_free(NULL) is a no-op.
 *   2. Inputs are copied: the loader copies the source path and the whole
 *      configuration at create; later changes to the config do not affect it.
 *      A loader's configuration is immutable for its lifetime.
 *   3. A batch returned by nostall_loader_next() is lent: its memory stays
 *      valid and unchanged until it is passed to nostall_loader_release() (or
 *      the loader is freed), also across nostall_loader_set_state(). Lent
 *      batches may be released in any order and from any thread; a batch
 *      kept lent only takes its own ring slot out of use.
 *   4. After nostall_loader_free() returns, no thread of the loader runs and
 *      no memory of it remains. In a forked child, free does nothing (the
 *      child's copy of the memory is left alone; its threads do not exist).
 *   5. Strings returned by the library (error messages, paths, option info)
 *      are owned by the library; see each function for how long they live.
 *
 * THREAD SAFETY
 *   An object is used by one thread at a time, unless its function says
 *   otherwise. Exceptions: nostall_loader_stop(), nostall_loader_stats() and
 *   nostall_loader_release() may be called from any thread at any time while
 *   the loader exists; the
 *   status/option/stat-name functions are pure and thread-safe.
 *   Handles are not usable in a child after fork(): calls there return
 *   NOSTALL_E_FORK.
 *
 * DETERMINISM
 *   The order of items is a pure function of (seed, epoch, rank, world_size);
 *   every random augmentation choice of an item is a pure function of
 *   (seed, epoch, item index). The bytes delivered are identical for any
 *   thread count and across runs.
 */
#ifndef NOSTALL_H
#define NOSTALL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(NOSTALL_BUILDING_LIBRARY) && defined(__GNUC__)
#define NOSTALL_API __attribute__((visibility("default")))
#else
#define NOSTALL_API
#endif

#define NOSTALL_VERSION_MAJOR 0
#define NOSTALL_VERSION_MINOR 1
#define NOSTALL_VERSION_PATCH 0

/* "0.1.0" */
NOSTALL_API const char *nostall_version_string(void);

/* ------------------------------------------------------------------------
 * Status codes.
 * X(NAME, value, message). Values are pinned and never reused.
 * ------------------------------------------------------------------------ */
#define NOSTALL_STATUS_TABLE(X)                                                                    \
    X(OK, 0, "success")                                                                            \
    X(EPOCH_END, 1, "end of epoch")                                                                \
    X(DONE, 2, "all requested epochs delivered")                                                   \
    X(TIMEOUT, 3, "no batch ready within the timeout")                                             \
    X(E_INVALID, -1, "invalid argument")                                                           \
    X(E_NOMEM, -2, "out of memory")                                                                \
    X(E_IO, -3, "I/O error")                                                                       \
    X(E_NOT_FOUND, -4, "file not found")                                                           \
    X(E_EMPTY, -5, "empty file")                                                                   \
    X(E_TRUNCATED, -6, "truncated image data")                                                     \
    X(E_CORRUPT, -7, "corrupt image data")                                                         \
    X(E_NOT_IMAGE, -8, "not a supported image (JPEG or PNG)")                                      \
    X(E_TOO_MANY_PIXELS, -9, "image dimensions over the pixel limit")                              \
    X(E_FILE_TOO_LARGE, -10, "file over the size limit")                                           \
    X(E_OPTION, -11, "unknown option or value out of bounds")                                      \
    X(E_DATASET, -12, "dataset cannot be indexed")                                                 \
    X(E_STOPPED, -13, "loader stopped")                                                            \
    X(E_STATE, -14, "call not valid in the loader's current state")                                \
    X(E_THREAD, -15, "thread creation failed")                                                     \
    X(E_FORK, -16, "handle used in a child process after fork()")                                  \
    X(E_PERMISSION, -17, "permission denied")                                                      \
    X(E_UNSUPPORTED, -18, "valid data using a feature nostall does not decode")

typedef enum nostall_status {
#define NOSTALL_STATUS_ENUM_(name, value, msg) NOSTALL_##name = (value),
    NOSTALL_STATUS_TABLE(NOSTALL_STATUS_ENUM_)
#undef NOSTALL_STATUS_ENUM_
} nostall_status;

/* Static message for a status code ("unknown status" for others). */
NOSTALL_API const char *nostall_strerror(int status);
/* Static symbolic name, e.g. "E_CORRUPT" ("UNKNOWN" for others). */
NOSTALL_API const char *nostall_status_name(int status);
/* Thread-local detail of this thread's most recent error: which function,
 * which file, which item. Valid until this thread's next nostall_ call.
 * Empty string if none. */
NOSTALL_API const char *nostall_last_error(void);

/* ------------------------------------------------------------------------
 * Options.
 * One table defines every option: its id, name (also the CLI flag, with '-'
 * for '_', and the Python keyword), type, default, bounds and help.
 * X(ID, value, "name", TYPE, "default", "min", "max", "help")
 * Ids are pinned (explicit values, as zstd pins ZSTD_c_*): options are only
 * ever appended, with the next value, so a compiled caller's ids stay valid.
 *   INT/UINT/DOUBLE: min/max are inclusive bounds.
 *   ENUM: "min" lists the choices separated by '|'; value is the choice index.
 *   BOOL: "0"/"1" (also "false"/"true", "no"/"yes", "off"/"on").
 *   DOUBLE3: three comma-separated doubles, each within [min, max].
 *   SIZE: a byte count; accepts K/M/G/T suffixes (powers of 1024).
 *   STRING: up to NOSTALL_STRING_MAX - 1 characters of [A-Za-z0-9._-].
 *   PATH: up to NOSTALL_PATH_MAX - 1 bytes, any but NUL (a file or folder).
 * Values out of bounds are rejected with E_OPTION and a message naming the
 * option and its bounds; nothing is clamped silently.
 * ------------------------------------------------------------------------ */
/* io_depth=0 (auto): the reads in flight a worker may grow to. */
#define NOSTALL_IO_DEPTH_AUTO_MAX 32

#define NOSTALL_OPTION_TABLE(X)                                                                     \
    X(BATCH_SIZE, 0, "batch_size", UINT, "64", "1", "65536", "items per batch")                     \
    X(THREADS, 1, "threads", UINT, "0", "0", "1024",                                                \
      "worker threads; 0 = the CPUs this process may use (affinity mask, cgroup CPU quota), "       \
      "divided by LOCAL_WORLD_SIZE")                                                                \
    X(BATCHES_AHEAD, 2, "batches_ahead", UINT, "3", "1", "64",                                      \
      "batches prepared ahead of the consumer (bounds memory)")                                     \
    X(SEED, 3, "seed", UINT, "0", "0", "18446744073709551615",                                      \
      "seed of the item order and of every random augmentation")                                    \
    X(EPOCHS, 4, "epochs", UINT, "0", "0", "1000000000",                                            \
      "epochs to deliver before NOSTALL_DONE; 0 = unlimited")                                       \
    X(SHUFFLE, 5, "shuffle", BOOL, "1", "0", "1",                                                   \
      "new random item order every epoch (0: dataset order)")                                       \
    X(DROP_LAST, 6, "drop_last", BOOL, "0", "0", "1",                                               \
      "1: equal disjoint shards cut down to a multiple of world_size and "                          \
      "no partial final batch; 0: shards padded by wrapping around and the "                        \
      "final batch may be short")                                                                   \
    X(RANK, 7, "rank", UINT, "0", "0", "1048575", "this process's shard (0 .. world_size-1)")       \
    X(WORLD_SIZE, 8, "world_size", UINT, "1", "1", "1048576",                                       \
      "number of shards the dataset is split into")                                                 \
    X(MODE, 9, "mode", ENUM, "train", "train|eval", "",                                             \
      "train: random draws (image_mode=crop: RandomResizedCrop + flip; "                            \
      "resize and full: the flip only); eval: no draws (crop: resize + "                            \
      "center crop)")                                                                               \
    X(CROP, 10, "crop", UINT, "224", "1", "8192",                                                   \
      "output height and width in pixels when out_height/out_width are 0")                          \
    X(RESIZE, 11, "resize", UINT, "0", "0", "16384",                                                \
      "eval: shorter side before the center crop; 0 = crop * 8 / 7")                                \
    X(SCALE_MIN, 12, "scale_min", DOUBLE, "0.08", "0.000001", "1",                                  \
      "RandomResizedCrop: smallest fraction of the image area")                                     \
    X(SCALE_MAX, 13, "scale_max", DOUBLE, "1", "0.000001", "1",                                     \
      "RandomResizedCrop: largest fraction of the image area")                                      \
    X(RATIO_MIN, 14, "ratio_min", DOUBLE, "0.75", "0.01", "100",                                    \
      "RandomResizedCrop: smallest aspect ratio (width / height)")                                  \
    X(RATIO_MAX, 15, "ratio_max", DOUBLE, "1.3333333333333333", "0.01", "100",                      \
      "RandomResizedCrop: largest aspect ratio (width / height)")                                   \
    X(FLIP_PROB, 16, "flip_prob", DOUBLE, "0.5", "0", "1",                                          \
      "train: probability of a horizontal flip (every image mode)")                                 \
    X(OUTPUT, 17, "output", ENUM, "float", "float|uint8|float16|bfloat16", "",                      \
      "float: float32 normalized by mean/std; uint8: uint8 RGB as decoded; "                        \
      "float16, bfloat16: normalized like float, in half precision (rounded "                       \
      "to nearest even); layout says NCHW or NHWC")                                                 \
    X(MEAN, 18, "mean", DOUBLE3, "0.485,0.456,0.406", "-1000", "1000",                              \
      "float output: per-channel mean (RGB, pixel values scaled to [0, 1])")                        \
    X(STD, 19, "std", DOUBLE3, "0.229,0.224,0.225", "0.000001", "1000",                             \
      "float output: per-channel standard deviation (RGB)")                                         \
    X(ON_BAD_ITEM, 20, "on_bad_item", ENUM, "skip", "skip|fail", "",                                \
      "skip: leave bad items out, count and report them; fail: the next "                           \
      "call returns the error naming the file")                                                     \
    X(MAX_PIXELS, 21, "max_pixels", UINT, "100000000", "1", "1000000000",                           \
      "images with more pixels (width * height) are bad items")                                     \
    X(MAX_FILE_BYTES, 22, "max_file_bytes", SIZE, "256M", "1", "16G",                               \
      "files larger than this are bad items (tokens: bounds one window or "                         \
      "cache unit read; bytes: also bounds each item's room)")                                      \
    X(CACHE, 23, "cache", ENUM, "minio", "minio|none", "",                                          \
      "minio: with cache_bytes > 0, keep encoded items in a fill-once, "                            \
      "never-evict cache and read misses without filling the OS page cache; "                       \
      "none: no cache, read through the OS page cache")                                             \
    X(CACHE_BYTES, 24, "cache_bytes", SIZE, "0", "0", "16T",                                        \
      "MinIO cache budget: bytes (K/M/G/T suffixes) or a percentage of the "                        \
      "memory the process may use (RAM or its cgroup limit: '25%'); 0 = no "                        \
      "cache")                                                                                      \
    X(STORAGE_MBPS, 25, "storage_mbps", DOUBLE, "0", "0", "1000000",                                \
      "emulate storage of this bandwidth, in MB/s (10^6 bytes), shared by "                         \
      "all reads; 0 = off")                                                                         \
    X(STORAGE_LATENCY_MS, 26, "storage_latency_ms", DOUBLE, "0", "0", "60000",                      \
      "emulate this latency per storage read, in milliseconds; 0 = off")                            \
    X(IO_DEPTH, 27, "io_depth", UINT, "0", "0", "256",                                              \
      "reads or HTTP transfers in flight per worker thread (items fetched "                         \
      "ahead of decoding); 0 = auto: 4, doubled up to 32 while the worker "                         \
      "waits for storage; 1 = read each item when its turn comes")                                  \
    X(READER, 28, "reader", ENUM, "auto", "auto|pread|io_uring", "",                                \
      "how local files are read: io_uring (many reads in flight from one "                          \
      "thread), pread, or auto: io_uring when io_depth is not 1 and the "                           \
      "kernel allows it, else pread")                                                               \
    X(HTTP_TIMEOUT_MS, 29, "http_timeout_ms", UINT, "30000", "1", "3600000",                        \
      "http(s) items: one attempt at a transfer fails after this long")                             \
    X(HTTP_RETRIES, 30, "http_retries", UINT, "3", "0", "100",                                      \
      "http(s) items: retries of transient failures (connection errors, "                           \
      "timeouts, 5xx, 429, a body cut short), with exponential backoff")                            \
    X(HTTP_VERIFY_TLS, 31, "http_verify_tls", BOOL, "1", "0", "1",                                  \
      "https items: verify the server's certificate and host name")                                 \
    X(ECHO, 32, "echo", ENUM, "fixed", "fixed|adaptive", "",                                        \
      "data echoing: fixed = every item used echo_factor times; adaptive = "                        \
      "repeat pooled items only when the consumer would otherwise wait "                            \
      "(at most echo_max uses each)")                                                               \
    X(ECHO_POINT, 33, "echo_point", ENUM, "decode", "fetch|decode|augment|batch", "",               \
      "where data is repeated: fetch (encoded bytes, each copy decoded "                            \
      "and augmented afresh), decode (decoded image, each copy augmented "                          \
      "afresh), augment (identical examples), batch (whole batches)")                               \
    X(ECHO_FACTOR, 34, "echo_factor", DOUBLE, "1", "1", "1000",                                     \
      "fixed echoing: uses of each item per epoch (fractional: the extra use "                      \
      "is drawn per item); 1 = no echoing")                                                         \
    X(ECHO_BUFFER, 35, "echo_buffer", UINT, "64", "1", "1048576",                                   \
      "echo shuffle pool: items held with their remaining uses and drawn at "                       \
      "random, spreading copies apart (larger: fewer duplicates per batch; "                        \
      "adaptive: the pool of finished items; echo_point=batch repeats each "                        \
      "batch in a row and does not use it)")                                                        \
    X(ECHO_MAX, 36, "echo_max", UINT, "4", "1", "1000", "adaptive echoing: most uses of any item")  \
    X(COORDINATE, 37, "coordinate", STRING, "", "", "",                                             \
      "coordinated prep: jobs on this machine with the same group name and "                        \
      "the same data options share fetching and preprocessing (each item "                          \
      "once for the whole group, every job gets every batch); empty = off")                         \
    X(COORDINATE_LEAD, 38, "coordinate_lead", UINT, "4", "1", "64",                                 \
      "coordinated prep: batches the fastest job may be ahead of the slowest")                      \
    X(CACHE_TRANSCODE, 39, "cache_transcode", BOOL, "0", "0", "1",                                  \
      "MinIO cache: keep JPEGs rewritten losslessly with a restart marker "                         \
      "per MCU (as `nostall transcode` writes them), so that decoding a "                           \
      "cached item reads only its crop's part of the file (same pixels; "                           \
      "less CPU per item in every later epoch, extra CPU once per item when "                       \
      "it is cached)")                                                                              \
    X(TASK, 40, "task", ENUM, "classify", "classify|detect|tokens|bytes|audio", "",                 \
      "what an item becomes (the item recipe): classify = an image and its "                        \
      "label; detect = an image with its boxes (COCO annotations); tokens = "                       \
      "a window of a token file; bytes = the item's bytes as fetched; audio "                       \
      "= a clip's waveform or log-mel spectrogram and its label")                                   \
    X(IMAGE_MODE, 41, "image_mode", ENUM, "crop", "crop|resize|full", "",                           \
      "crop: train RandomResizedCrop / eval resize + center crop; resize: the "                     \
      "whole image to out_height x out_width (fit; train: the flip only); "                         \
      "full: every image at its own size, each item in a place of "                                 \
      "full_max_pixels (with its shape)")                                                           \
    X(OUT_HEIGHT, 42, "out_height", UINT, "0", "0", "16384",                                        \
      "output height in pixels (image_mode crop and resize, detect); 0 = "                          \
      "crop; not with image_mode=full")                                                             \
    X(OUT_WIDTH, 43, "out_width", UINT, "0", "0", "16384",                                          \
      "output width in pixels (image_mode crop and resize, detect); 0 = "                           \
      "crop; not with image_mode=full")                                                             \
    X(FIT, 44, "fit", ENUM, "stretch", "stretch|pad", "",                                           \
      "image_mode=resize and detect's eval resize: stretch to the size, or "                        \
      "keep the aspect and pad "                                                                    \
      "(letterbox, centred, zeros before normalization)")                                           \
    X(LAYOUT, 45, "layout", ENUM, "auto", "auto|nchw|nhwc", "",                                     \
      "image field layout; auto = NCHW for float outputs, NHWC for uint8")                          \
    X(MAX_BOXES, 46, "max_boxes", UINT, "100", "1", "65536",                                        \
      "detect: boxes per item; items with more are truncated and counted")                          \
    X(BOX_CROP, 47, "box_crop", ENUM, "iou", "iou|rrc|none", "",                                    \
      "detect, train: SSD's random IoU crop (torchvision RandomIoUCrop), a "                        \
      "box-aware RandomResizedCrop, or none (resize only)")                                         \
    X(IMAGE_ROOT, 48, "image_root", PATH, "", "", "",                                               \
      "detect: the folder COCO file_names are relative to; empty = the "                            \
      "annotation file's folder")                                                                   \
    X(CONTEXT_LENGTH, 49, "context_length", UINT, "1024", "1", "16777216",                          \
      "tokens: tokens per window (each item holds context_length + 1)")                             \
    X(TOKEN_DTYPE, 50, "token_dtype", ENUM, "auto", "auto|uint16|uint32", "",                       \
      "tokens: element type of the token file; auto = from a .npy header, "                         \
      "else uint16 (nanoGPT's .bin)")                                                               \
    X(WINDOWS, 51, "windows", ENUM, "random", "random|chunks", "",                                  \
      "tokens: a window at a random offset drawn from (seed, epoch, item), or "                     \
      "chunks of context_length + 1 tokens at stride context_length "                               \
      "(consecutive chunks share one token), in a permuted order")                                  \
    X(TARGETS, 52, "targets", BOOL, "1", "0", "1",                                                  \
      "tokens: also a targets field (the window shifted by one)")                                   \
    X(OP_LIBRARY, 53, "op_library", PATH, "", "", "",                                               \
      "a shared library with a user op (nostall_op.h) run on every item by "                        \
      "the worker threads; empty = none")                                                           \
    X(OP_ARGS, 54, "op_args", PATH, "", "", "", "text handed to the user op's create")              \
    X(FULL_MAX_PIXELS, 55, "full_max_pixels", UINT, "4194304", "1", "1000000000",                   \
      "image_mode full: the largest image (width x height) an item's place "                        \
      "holds (each place is that many pixels x 3 elements of the output "                           \
      "dtype: memory); larger images are bad items")                                                \
    X(SAMPLE_RATE, 56, "sample_rate", UINT, "16000", "1000", "384000",                              \
      "audio: every clip is resampled to this rate (Hz)")                                           \
    X(MIXDOWN, 57, "mixdown", BOOL, "1", "0", "1",                                                  \
      "audio: average the channels into one (0: keep them; the channel count "                      \
      "is the first local item's, a clip with another count is a bad item; "                        \
      "refused when every item is a URL)")                                                          \
    X(CLIP_SECONDS, 58, "clip_seconds", DOUBLE, "1", "0.001", "3600",                               \
      "audio: the window's length; train: at a random start, eval: centred; "                       \
      "shorter clips are padded with zeros (the length field gives the "                            \
      "clip's samples in the window; eval with clip_seconds >= the longest "                        \
      "clip gives whole clips)")                                                                    \
    X(AUDIO_FEATURES, 59, "audio_features", ENUM, "logmel", "logmel|waveform", "",                  \
      "audio: a log-mel spectrogram [n_mels, frames], or the waveform "                             \
      "[channels, samples]")                                                                        \
    X(N_FFT, 60, "n_fft", UINT, "400", "16", "65536", "audio, logmel: FFT size (samples)")          \
    X(HOP, 61, "hop", UINT, "160", "1", "65536", "audio, logmel: samples between frames")           \
    X(WIN, 62, "win", UINT, "0", "0", "65536",                                                      \
      "audio, logmel: Hann window length (samples; 0 = n_fft)")                                     \
    X(N_MELS, 63, "n_mels", UINT, "64", "1", "1024", "audio, logmel: mel bands")                    \
    X(F_MIN, 64, "f_min", DOUBLE, "0", "0", "192000", "audio, logmel: lowest mel frequency (Hz)")   \
    X(F_MAX, 65, "f_max", DOUBLE, "0", "0", "192000",                                               \
      "audio, logmel: highest mel frequency (Hz; 0 = sample_rate / 2)")                             \
    X(MEL_SCALE, 66, "mel_scale", ENUM, "htk", "htk|slaney", "",                                    \
      "audio, logmel: the mel scale and filter norm (torchaudio's "                                 \
      "mel_scale; slaney also normalizes each filter's area)")                                      \
    X(MEL_POWER, 67, "mel_power", DOUBLE, "2", "0.1", "4",                                          \
      "audio, logmel: exponent of the magnitude (2 = power spectrogram)")                           \
    X(TOP_DB, 68, "top_db", DOUBLE, "0", "0", "1000",                                               \
      "audio, logmel: clamp each spectrogram to its peak minus top_db "                             \
      "decibels (0 = no clamp), as torchaudio's AmplitudeToDB(top_db)")                             \
    X(TIME_MASKS, 69, "time_masks", UINT, "0", "0", "64",                                           \
      "audio, logmel, train: SpecAugment time masks per item")                                      \
    X(TIME_MASK_MAX, 70, "time_mask_max", UINT, "10", "0", "100000",                                \
      "audio: the widest time mask (frames)")                                                       \
    X(FREQ_MASKS, 71, "freq_masks", UINT, "0", "0", "64",                                           \
      "audio, logmel, train: SpecAugment frequency masks per item")                                 \
    X(FREQ_MASK_MAX, 72, "freq_mask_max", UINT, "8", "0", "1024",                                   \
      "audio: the widest frequency mask (mel bands)")                                               \
    X(MAX_AUDIO_SECONDS, 73, "max_audio_seconds", DOUBLE, "600", "0.001", "86400",                  \
      "audio: longer clips are bad items (like max_pixels for images)")                             \
    X(MIX, 74, "mix", PATH, "", "", "",                                                             \
      "weighted mixing: several sources read as one dataset, SOURCE:WEIGHT "                        \
      "entries separated by commas, or by newlines (then a path may hold "                          \
      "commas), e.g. 'a:0.7,b:0.3'; every source with the same task and "                           \
      "options; the loader's own source is then only a name; empty = off "                          \
      "(docs/mixing.md)")                                                                           \
    X(MIX_EPOCH_ITEMS, 75, "mix_epoch_items", UINT, "0", "0", "281474976710656",                    \
      "weighted mixing: items of a mixed epoch, shared out by the weights "                         \
      "exactly (each source walks its own epochs at its own rate); 0 = the "                        \
      "sum of the sources' items")                                                                  \
    X(MIX_LABELS, 76, "mix_labels", ENUM, "own", "own|offset", "",                                  \
      "weighted mixing: own = each source's labels as they are (sources of "                        \
      "one class list); offset = source s's integer labels shifted by the "                         \
      "classes of the sources before it (disjoint class lists)")                                    \
    X(SHARD_MODE, 77, "shard_mode", ENUM, "indexed", "indexed|stream", "",                          \
      "tar shards: indexed = each item one ranged read (pread, HTTP Range; "                        \
      "the global permutation, caches); stream = every shard read whole "                           \
      "and in order, in a permuted shard order, items through a seeded "                            \
      "shuffle buffer (for stores where a request costs more than its "                             \
      "bytes; docs/shards.md)")                                                                     \
    X(SHUFFLE_BUFFER, 78, "shuffle_buffer", UINT, "1000", "1", "16777216",                          \
      "shard_mode=stream: items of the shuffle buffer (memory: this many "                          \
      "items' bytes, plus the batches in flight)")                                                  \
    X(ALLOW_OUTSIDE_ROOT, 79, "allow_outside_root", BOOL, "0", "0", "1",                            \
      "detect: read COCO file_names that leave the image root (absolute, "                          \
      "'..', or a symlink out of it); 0 = refuse them at create, so an "                            \
      "annotation file cannot make the loader read other files")                                    \
    X(MAX_ANNOTATION_BYTES, 80, "max_annotation_bytes", SIZE, "4G", "1K", "1T",                     \
      "detect: the most memory reading the COCO file may take: its bytes plus "                     \
      "the JSON tree of the members nostall uses, estimated by a pre-scan "                         \
      "before the tree is built (members it does not use cost nothing)")                            \
    X(BOX_LABELS, 81, "box_labels", ENUM, "index", "index|category_id", "",                         \
      "detect: box_labels hold the category's number 0..K-1 in id order, or "                       \
      "its COCO category_id (as torchvision's detection references: 0 "                             \
      "left for the background)")                                                                   \
    X(MAX_BAD_FRACTION, 82, "max_bad_fraction", DOUBLE, "0.01", "0", "1",                           \
      "on_bad_item=skip: the most bad items an epoch may hold, as a fraction "                      \
      "of this rank's items (at most ceil(fraction x items); each rank "                            \
      "checks its own share): past it the loader fails naming the first bad "                       \
      "items instead of training on what is left; an epoch with no good "                           \
      "item is always an error")                                                                    \
    X(DECODE_DEVICE, 83, "decode_device", ENUM, "cpu", "cpu|gpu", "",                               \
      "where JPEGs are decoded and augmented: cpu, or gpu (nvJPEG and CUDA "                        \
      "kernels; needs a libnostall built with CUDA, a CUDA device and "                             \
      "libnvjpeg at run time, each named when missing; docs/gpu.md)")                               \
    X(GPU_ID, 84, "gpu_id", UINT, "0", "0", "1023", "decode_device=gpu: the CUDA device's ordinal") \
    X(PREP_SERVERS, 85, "prep_servers", PATH, "", "", "",                                           \
      "prepare items on prep servers too (`nostall serve`): HOST:PORT,... "                         \
      "(docs/serve.md); with it threads=0 means no local workers. The "                             \
      "batches are the same bytes as a local run's")                                                \
    X(PREP_SECRET_FILE, 86, "prep_secret_file", PATH, "", "", "",                                   \
      "prep_servers: the file holding the shared secret the servers were "                          \
      "started with (mode 0600; never sent: each side proves it by HMAC)")                          \
    X(PREP_TIMEOUT_MS, 87, "prep_timeout_ms", UINT, "10000", "50", "3600000",                       \
      "prep_servers: a server with items outstanding that sends nothing for "                       \
      "this long is dropped, its items prepared elsewhere; it is tried "                            \
      "again with backoff")                                                                         \
    X(PREP_INFLIGHT, 88, "prep_inflight", UINT, "16", "1", "256",                                   \
      "prep_servers: items in flight per server at most (the server may "                           \
      "grant fewer)")                                                                               \
    X(AUTOTUNE, 89, "autotune", BOOL, "0", "0", "1",                                                \
      "tune while running: the active workers, batches_ahead, (io_depth=0) the reads in "           \
      "flight, the MinIO cache's size and (echo=adaptive) the echo factor, chosen from live "       \
      "measurements with the analyzer's model to keep the data stall under 2% of the step at the "  \
      "least CPU, within cpu_budget and memory_budget; never changes the bytes "                    \
      "(docs/autotune.md)")                                                                         \
    X(CPU_BUDGET, 90, "cpu_budget", DOUBLE, "0", "0", "1024",                                       \
      "CPUs the loader's workers may use; 0 = the affinity mask, capped by the cgroup CPU "         \
      "quota, divided by LOCAL_WORLD_SIZE. Started workers: threads (or this budget rounded "       \
      "up); autotune keeps at most ceil(cpu_budget) of them active")                                \
    X(MEMORY_BUDGET, 91, "memory_budget", SIZE, "0", "0", "16T",                                    \
      "bytes the batch ring (with the echo pool and cache_bytes) may take; 0 = the cgroup's "       \
      "memory limit or RAM, as available now. A plan over it is refused; autotune sizes the "       \
      "ring to the most batches_ahead (up to 16) that fit and, with cache=minio and no "            \
      "cache_bytes, gives the MinIO cache what is left (the ring then takes at most half)")         \
    X(GPU_OUTPUT, 92, "gpu_output", ENUM, "host", "host|device", "",                                \
      "decode_device=gpu: where batches land: host (the host ring, as with decode_device=cpu) "     \
      "or device (a ring of device buffers: nostall_loader_next_device, DLPack in Python; "         \
      "refuses echo=adaptive, coordinate, prep_servers, shard_mode=stream "                         \
      "or in-process op; docs/gpu.md)")

typedef enum nostall_option {
#define NOSTALL_OPTION_ENUM_(id, value, name, type, def, lo, hi, help) NOSTALL_OPT_##id = (value),
    NOSTALL_OPTION_TABLE(NOSTALL_OPTION_ENUM_)
#undef NOSTALL_OPTION_ENUM_
        NOSTALL_OPT_COUNT_ /* one past the last value: the ids are 0 .. COUNT_-1 */
} nostall_option;

typedef enum nostall_option_type {
    NOSTALL_TYPE_UINT = 0,
    NOSTALL_TYPE_DOUBLE = 1,
    NOSTALL_TYPE_BOOL = 2,
    NOSTALL_TYPE_ENUM = 3,
    NOSTALL_TYPE_DOUBLE3 = 4,
    NOSTALL_TYPE_SIZE = 5,
    NOSTALL_TYPE_STRING = 6,
    NOSTALL_TYPE_PATH = 7
} nostall_option_type;

#define NOSTALL_STRING_MAX 64
#define NOSTALL_PATH_MAX 4096

/* Values of the ENUM options, in the order of their choices. */
enum { NOSTALL_MODE_TRAIN = 0, NOSTALL_MODE_EVAL = 1 };
enum {
    NOSTALL_OUTPUT_FLOAT = 0,
    NOSTALL_OUTPUT_UINT8 = 1,
    NOSTALL_OUTPUT_FLOAT16 = 2,
    NOSTALL_OUTPUT_BFLOAT16 = 3
};
enum {
    NOSTALL_TASK_CLASSIFY = 0,
    NOSTALL_TASK_DETECT = 1,
    NOSTALL_TASK_TOKENS = 2,
    NOSTALL_TASK_BYTES = 3,
    NOSTALL_TASK_AUDIO = 4
};
enum { NOSTALL_AUDIO_LOGMEL = 0, NOSTALL_AUDIO_WAVEFORM = 1 };
enum { NOSTALL_MEL_HTK = 0, NOSTALL_MEL_SLANEY = 1 };
enum { NOSTALL_IMAGE_CROP = 0, NOSTALL_IMAGE_RESIZE = 1, NOSTALL_IMAGE_FULL = 2 };
enum { NOSTALL_FIT_STRETCH = 0, NOSTALL_FIT_PAD = 1 };
enum { NOSTALL_LAYOUT_AUTO = 0, NOSTALL_LAYOUT_OPT_NCHW = 1, NOSTALL_LAYOUT_OPT_NHWC = 2 };
enum { NOSTALL_BOX_CROP_IOU = 0, NOSTALL_BOX_CROP_RRC = 1, NOSTALL_BOX_CROP_NONE = 2 };
enum { NOSTALL_BOX_LABELS_INDEX = 0, NOSTALL_BOX_LABELS_CATEGORY_ID = 1 };
enum { NOSTALL_TOKEN_AUTO = 0, NOSTALL_TOKEN_UINT16 = 1, NOSTALL_TOKEN_UINT32 = 2 };
enum { NOSTALL_WINDOWS_RANDOM = 0, NOSTALL_WINDOWS_CHUNKS = 1 };
enum { NOSTALL_BAD_SKIP = 0, NOSTALL_BAD_FAIL = 1 };
enum { NOSTALL_MIX_LABELS_OWN = 0, NOSTALL_MIX_LABELS_OFFSET = 1 };
enum { NOSTALL_CACHE_MINIO = 0, NOSTALL_CACHE_NONE = 1 };
enum { NOSTALL_DECODE_CPU = 0, NOSTALL_DECODE_GPU = 1 };
enum { NOSTALL_GPU_OUTPUT_HOST = 0, NOSTALL_GPU_OUTPUT_DEVICE = 1 };
enum { NOSTALL_READER_AUTO = 0, NOSTALL_READER_PREAD = 1, NOSTALL_READER_IO_URING = 2 };
enum { NOSTALL_ECHO_FIXED = 0, NOSTALL_ECHO_ADAPTIVE = 1 };
enum {
    NOSTALL_ECHO_POINT_FETCH = 0,
    NOSTALL_ECHO_POINT_DECODE = 1,
    NOSTALL_ECHO_POINT_AUGMENT = 2,
    NOSTALL_ECHO_POINT_BATCH = 3
};
enum { NOSTALL_SHARD_MODE_INDEXED = 0, NOSTALL_SHARD_MODE_STREAM = 1 };

typedef struct nostall_option_info {
    const char *name; /* "batch_size" */
    nostall_option_type type;
    const char *type_name; /* "uint", "double", "bool", "enum", ... */
    const char *default_value;
    const char *min; /* ENUM: the choices, "train|eval" */
    const char *max; /* ENUM: "" */
    const char *help;
} nostall_option_info;

/* Number of options (NOSTALL_OPT_COUNT_). */
NOSTALL_API int nostall_option_count(void);
/* Static description of option `id`; E_INVALID if out of range. */
NOSTALL_API int nostall_option_info_get(int id, nostall_option_info *out);
/* Option id for a name ("batch_size" or "batch-size"), or E_OPTION. */
NOSTALL_API int nostall_option_find(const char *name);

typedef struct nostall_config nostall_config;

/* A configuration with every option at its default. */
NOSTALL_API int nostall_config_create(nostall_config **out);
NOSTALL_API void nostall_config_free(nostall_config *cfg);
/* A new configuration equal to cfg: every option (path options of any
 * length), the peer cache and the op set on it. */
NOSTALL_API int nostall_config_copy(nostall_config **out, const nostall_config *cfg);
/* Parse and set an option by name from text, as the CLI and Python do.
 * E_OPTION with a message naming the option and its bounds if the name is
 * unknown or the value malformed or out of bounds; cfg is then unchanged. */
NOSTALL_API int nostall_config_set(nostall_config *cfg, const char *name, const char *value);
/* Current value as text (the same form nostall_config_set accepts). */
NOSTALL_API int nostall_config_get(const nostall_config *cfg, const char *name, char *buf,
                                   size_t buflen);
/* Typed access by id. UINT/SIZE/BOOL/ENUM use the uint form; DOUBLE the
 * double form; DOUBLE3 components via nostall_config_set(). */
NOSTALL_API int nostall_config_set_uint(nostall_config *cfg, nostall_option id, uint64_t value);
NOSTALL_API int nostall_config_get_uint(const nostall_config *cfg, nostall_option id,
                                        uint64_t *value);
NOSTALL_API int nostall_config_set_double(nostall_config *cfg, nostall_option id, double value);
NOSTALL_API int nostall_config_get_double(const nostall_config *cfg, nostall_option id,
                                          double *value);

/* ------------------------------------------------------------------------
 * Loader.
 * ------------------------------------------------------------------------ */
typedef struct nostall_loader nostall_loader;

/* Build the dataset index and start the worker threads.
 * `source` is a directory (ImageFolder: one sub-folder per class, classes
 * sorted by name get labels 0..K-1, files sorted, .jpg/.jpeg/.png matched
 * case-insensitively; every entry so named is an item, one that cannot be
 * read a bad item with its reason; other files, hidden files and files
 * outside class folders counted in `files_ignored`) or a regular
 * file listing one `path<TAB>label` per line (an integer label is in
 * (-2^31, 2^31), else E_DATASET naming the line; relative paths are relative to
 * the list's folder; empty lines and lines starting with '#' are skipped; a
 * path may be an http:// or https:// URL, fetched with libcurl — other
 * "scheme://" entries are refused with E_DATASET).
 * Option combinations are validated here (e.g. scale_min <= scale_max,
 * rank < world_size). `cfg` may be NULL for the defaults.
 * With the `mix` option (weighted mixing, docs/mixing.md) the items are the
 * mix's sources' and `source` only names the mix in messages; batches get
 * an int64 field "source" (each item's source, in the option's order). */
NOSTALL_API int nostall_loader_create(nostall_loader **out, const char *source,
                                      const nostall_config *cfg);
/* Stop, join every thread, free everything. NULL is a no-op. */
NOSTALL_API void nostall_loader_free(nostall_loader *ld);

/* Element types of batch fields. Values are pinned. */
typedef enum nostall_dtype {
    NOSTALL_DTYPE_FLOAT32 = 0,
    NOSTALL_DTYPE_UINT8 = 1,
    NOSTALL_DTYPE_INT64 = 2,
    NOSTALL_DTYPE_INT32 = 3,
    NOSTALL_DTYPE_UINT16 = 4,
    NOSTALL_DTYPE_FLOAT16 = 5,
    NOSTALL_DTYPE_BFLOAT16 = 6,
    NOSTALL_DTYPE_UINT32 = 7
} nostall_dtype;
typedef enum nostall_layout { NOSTALL_LAYOUT_NCHW = 0, NOSTALL_LAYOUT_NHWC = 1 } nostall_layout;

/* One named field of a batch (an item recipe declares its fields at create:
 * classification has "image" and "label"). data holds `count` items, each
 * item_bytes long, the batch dimension first: the field is a dense array
 * of shape [count, shape[0], ..., shape[ndim - 1]].
 *
 * A ragged field (shape_field >= 0: raw bytes, full-size images, a
 * detection's boxes) has per item a room of item_bytes (shape is the
 * room's) and an actual shape: the values of field `shape_field` (INT64,
 * shape [k]; a scalar counts as [1]) for that item, whose product of
 * elements are packed from the start of the item's room -- item i's bytes
 * of such a field start at data + i * item_bytes (an arena with fixed
 * offsets; the rest of the room is zeros). E.g. task=bytes: "data" uint8
 * [room] with "length" int64 [1]; task=detect: "boxes" float32
 * [max_boxes, 4] with "boxes_shape" int64 [2] = (n, 4), and "box_labels"
 * int64 [max_boxes] with the scalar "box_count" = n. */
#define NOSTALL_FIELD_DIMS 4
typedef struct nostall_field {
    const char *name;
    nostall_dtype dtype;
    uint32_t ndim;                      /* dimensions of one item; 0: scalar */
    uint64_t shape[NOSTALL_FIELD_DIMS]; /* of one item (ragged: its room)    */
    size_t item_bytes;
    void *data;
    int32_t shape_field; /* ragged: the field with each item's
                                            actual shape; -1: dense          */
} nostall_field;

/* A lent batch. struct_size: the bytes of it the library filled, set on
 * every batch it lends (sizeof(nostall_batch) of the library's build).
 * Members are only ever appended (after `fields`), never moved or removed:
 * a caller reads a member only where struct_size covers it (a member added
 * later is filled only for callers that pass their size, as
 * nostall_loader_stats takes it). A binding that mirrors this layout
 * (python/nostall) checks struct_size against its mirror. */
typedef struct nostall_batch {
    size_t struct_size;               /* set by the library: see above          */
    void *images;                     /* the recipe's main field (classify, detect:
                               "image", any dtype and layout; tokens:
                               "tokens"; bytes: "data"): count items       */
    int64_t *labels;                  /* the "label" field when it is one int64 per
                               item, else NULL (see `fields`)              */
    uint64_t *indices;                /* count dataset item indices (into the index)  */
    uint32_t count;                   /* items in this batch; < batch_size only for
                               the last batch of an epoch or when bad items
                               were skipped -- never with drop_last, which
                               fills such a batch from the next items      */
    uint32_t channels, height, width; /* of an image field of shape [3, H, W]
                               or [H, W, 3]; 0 for other fields and for
                               image_mode=full (see image_shape)          */
    nostall_dtype dtype;
    nostall_layout layout;
    size_t item_bytes;           /* bytes of one item's image                    */
    uint64_t epoch;              /* epoch this batch belongs to                  */
    uint64_t position;           /* items of this epoch's shard before it        */
    uint64_t sequence;           /* private: ring bookkeeping                    */
    uint32_t nfields;            /* every field the recipe declared, in order    */
    const nostall_field *fields; /* valid while the batch is lent           */
} nostall_batch;

/* Lend the next batch. Blocks until it is ready, the loader is stopped, or a
 * worker failed. Returns 0 with *out filled; NOSTALL_EPOCH_END once after the
 * last batch of each epoch (no batch); NOSTALL_DONE when `epochs` epochs have
 * been delivered; E_STOPPED after nostall_loader_stop(); E_STATE if the
 * batch cannot be made because ring slots are lent (every slot, or, with
 * drop_last and skipped items, all but the one being filled: filling a
 * batch needs the next batch of its epoch too); or the error of a bad item
 * under on_bad_item=fail (sticky: every later call returns it too). */
NOSTALL_API int nostall_loader_next(nostall_loader *ld, nostall_batch *out);
/* As nostall_loader_next, but waits at most `timeout_ms` milliseconds and
 * returns NOSTALL_TIMEOUT (no batch, nothing changed) when none is ready by
 * then. Lets a caller stay responsive (e.g. to Ctrl-C in Python). */
NOSTALL_API int nostall_loader_next_timed(nostall_loader *ld, nostall_batch *out,
                                          uint32_t timeout_ms);
/* Give a lent batch back to the ring: in any order, from any thread.
 * E_INVALID if `b` is not a batch lent now (e.g. released twice). */
NOSTALL_API int nostall_loader_release(nostall_loader *ld, const nostall_batch *b);
/* Wake every waiter and make workers exit at their next item boundary. Any
 * thread, any time, idempotent. Later calls to next return E_STOPPED. */
NOSTALL_API int nostall_loader_stop(nostall_loader *ld);
/* Stop, and return once every worker thread has exited: no hook (peer
 * cache) is called any more and no CPU is used, while batches still lent
 * stay valid until released. For a binding whose batches may outlive the
 * loader object: join now, free when the last batch is released. After
 * it only release, info, stats and free may be called. Idempotent. */
NOSTALL_API int nostall_loader_join(nostall_loader *ld);

/* The device ring (decode_device=gpu with gpu_output=device; docs/gpu.md,
 * "GPU decode"): the workers' kernels write each batch's image field into
 * preallocated device memory, one region per ring slot, and the batch
 * stays there. nostall_loader_next_device lends it (waiting as
 * nostall_loader_next_timed, UINT32_MAX: as nostall_loader_next): *out as
 * nostall_loader_next fills it (labels, indices and every other field in
 * host memory; `images` and fields[image].data are NOT readable on the
 * host) and *dev with the image field's device address. The consumer makes
 * its stream wait on dev->ready_event (cudaStreamWaitEvent) before reading
 * it, and gives the batch back with nostall_loader_release_device and the
 * stream that read it: the slot returns to the ring only once the work
 * queued on that stream so far has finished (an event recorded on it; a
 * host function on the slot's own stream then releases the slot, so the
 * consumer's stream is never blocked by the host). stream NULL: the caller
 * says it has finished (e.g. after synchronizing) and the slot returns at
 * once; nostall_loader_release on a device batch means the same.
 * Either call is any thread, any order; a batch still lent at free is
 * dropped with the ring (free waits for the device work queued before a
 * release). Without gpu_output=device both are E_STATE; nostall_loader_next
 * with it is E_STATE too (the images are not on the host).
 * In a test build with NOSTALL_TEST_GPU_FAKE=1 the "device" is host memory
 * (device = -1), the events are flags and a stream must be NULL. */
typedef struct nostall_device_batch {
    size_t struct_size; /* set by the library: sizeof of its build        */
    int32_t device;     /* CUDA device ordinal; -1: the test backend's host
                           memory                                          */
    uint32_t slot;      /* the device ring's slot (its stream and events)  */
    void *images;       /* device address of the image field: b->count items
                           of b->item_bytes, dtype and layout as *out says  */
    void *ready_event;  /* cudaEvent_t to wait on before reading images
                           (today complete when lent: workers synchronize) */
    void *stream;       /* cudaStream_t of the slot (the release's waits)  */
} nostall_device_batch;
NOSTALL_API int nostall_loader_next_device(nostall_loader *ld, nostall_batch *out,
                                           nostall_device_batch *dev, uint32_t timeout_ms);
NOSTALL_API int nostall_loader_release_device(nostall_loader *ld, const nostall_batch *b,
                                              void *stream);

/* Resumable position: `position` items of this rank's shard of epoch
 * `epoch` have been delivered (lent) to the consumer. With fixed item
 * echoing, positions count deliveries (repeats included) and resuming is
 * exact. With batch echoing a batch counts once its last repeat was lent:
 * resuming between two repeats of a batch delivers that batch's repeats
 * again. Adaptive echo batches are extra and not counted.
 *
 * nostall_loader_get_state() also says what the position belongs to
 * (version != 0), and nostall_loader_set_state() checks it: a state of
 * another seed, dataset or byte-affecting option is refused (E_STATE,
 * naming the difference), and a state saved with another world_size is
 * remapped exactly -- the order of an epoch is global, so the items every
 * old rank consumed (epoch_offset + position x old world_size) are skipped
 * and the rest is sharded over the new ranks, none repeated or lost (the
 * ranks of a job are assumed in step, as under DDP). One rank's state can
 * say that only while no rank met a bad item in the epoch: a rank that
 * skips bad items fills its batches from items further on, so its
 * position runs ahead of the others'. A state whose rank met bad items
 * (bad, taken) is refused by another rank or world size (E_STATE); resume
 * such a job with every rank's state (nostall_loader_set_states, below).
 * Loaded by its own rank and world size a state resumes that rank's
 * cursor exactly, also in an epoch that was itself remapped (epoch_offset).
 * Echoing refuses another world size (E_INVALID: positions count
 * deliveries, repeats included).
 * A state with version 0 gives only (epoch, position), e.g. {.epoch = 3}
 * to start epoch 3. Version 1 states (before bad, taken_first, taken_end
 * and level) still load as before. */
#define NOSTALL_STATE_VERSION 2
typedef struct nostall_state {
    uint64_t epoch;
    uint64_t position;
    /* Filled by get_state; checked by set_state when version != 0. */
    uint64_t epoch_offset; /* items of `epoch` consumed by all ranks before
                              this rank's shard of it began (non-zero only
                              after resuming with another world_size)      */
    uint64_t taken;        /* skipped items: low 32 bits, items at the end
                              of the batch at `position` already delivered
                              (in the batch before it); high 32 bits,
                              batches still owed from the epoch's reserve
                              (README: "Bad files and ranks")             */
    uint64_t seed;
    uint64_t items;       /* items in the dataset index                  */
    uint64_t fingerprint; /* of the item list (paths, labels) and of every
                              option that changes the bytes delivered     */
    uint32_t version;     /* NOSTALL_STATE_VERSION; 0: only epoch and
                              position are given                          */
    uint32_t rank, world_size;
    uint32_t level;       /* v2: world-size changes `epoch` went through
                              before this job (nostall_loader_get_states) */
    uint32_t taken_first; /* v2: the items counted in taken's low bits lie */
    uint32_t taken_end;   /* at positions [position + taken_first,
                              position + taken_end) (bad ones between them
                              included): delivered, for an elastic resume */
    uint64_t bad;         /* v2: bad items this rank met in `epoch` (its
                              planned ones; the max_bad_fraction count)   */
    uint64_t reserved_[2];
} nostall_state;

NOSTALL_API int nostall_loader_get_state(const nostall_loader *ld, nostall_state *out);
/* Restart delivery at `st`. Prepared batches are discarded; batches still
 * lent stay valid until released. E_INVALID if position is past the
 * epoch's end or epoch is past `epochs`; E_STATE for a state of another
 * seed, dataset or options (the message names which). */
NOSTALL_API int nostall_loader_set_state(nostall_loader *ld, const nostall_state *st);

/* Elastic resume, exact with bad items, for any change of world size.
 * Every rank of the old job saves nostall_loader_get_states() (its own
 * state, last, after the states its epoch was resumed from, if any: one
 * level per earlier world-size change in the epoch); the states of all
 * its ranks together (duplicates of the shared earlier levels may be
 * left in) are one job's state, and every rank of the new job, of any
 * world size, loads all of them with nostall_loader_set_states(). The new
 * job marks as delivered every position of the epoch's global order that
 * an old rank consumed -- the positions before its own position, and the
 * top-up's taken span after it (padding and wrapped repeats do not
 * count) -- and shards the positions left over the new ranks: no item
 * delivered before the save is delivered again, and none of the rest is
 * left out except as drop_last leaves items out of any epoch. Under the
 * same world size each rank resumes at its own cursor (exact, as
 * set_state). Untrusted input: every state is checked as set_state checks
 * one (E_STATE), and the set must hold every rank of every level once
 * (same epoch; E_INVALID). At most NOSTALL_STATES_MAX states and
 * NOSTALL_STATE_LEVELS_MAX levels; memory:
 * items / 8 bytes while loading, 8 bytes per unconsumed position below
 * the furthest consumed one while the epoch lasts. Not with echoing nor
 * shard_mode=stream across world sizes (E_INVALID). */
#define NOSTALL_STATES_MAX 65536
#define NOSTALL_STATE_LEVELS_MAX 64 /* world-size changes within one epoch */
/* *count: the states written (E_INVALID with *count set if cap is less). */
NOSTALL_API int nostall_loader_get_states(const nostall_loader *ld, nostall_state *out, size_t cap,
                                          size_t *count);
NOSTALL_API int nostall_loader_set_states(nostall_loader *ld, const nostall_state *states,
                                          size_t count);

typedef struct nostall_dataset_info {
    uint64_t items;           /* items in the dataset index               */
    uint64_t classes;         /* distinct classes (ImageFolder) or max label + 1 */
    uint64_t files_ignored;   /* ImageFolder files not named like an image,
                                  hidden, or outside class folders
                                  (nostall_loader_ignored names them)     */
    uint64_t items_per_epoch; /* items this rank delivers per epoch (before skips) */
    uint64_t batches_per_epoch;
    uint32_t threads;    /* worker threads actually started          */
    uint32_t ring_slots; /* batches in the ring: batches_ahead + 1, or
                                  fewer when an epoch has fewer batches   */
    size_t batch_bytes;  /* image bytes of one full batch            */
    /* The ring's memory, one block holding every slot (NULL in a
     * coordinated group), e.g. to page-lock it for GPU copies. */
    void *ring_memory;
    size_t ring_bytes;
    uint32_t slot_items; /* items a slot holds: batch_size, or the
                                  most an epoch can deliver if fewer      */
    uint32_t task;       /* NOSTALL_TASK_*                           */
    /* What the recipe found in the source and repaired, counted once at
     * create (annotations: detect). Nothing is dropped silently. */
    uint64_t items_truncated; /* items with more parts than their field
                                  holds (detect: boxes over max_boxes)    */
    uint64_t parts_dropped;   /* parts left out (detect: degenerate boxes) */
    uint64_t parts_clipped;   /* parts cut to fit (detect: boxes reaching
                                  outside their image)                    */
    uint64_t parts_unmatched; /* parts naming no item (detect: annotations
                                  of an image id not in `images`)          */
    uint64_t items_missing;   /* items named by the source whose file does
                                  not exist (detect: checked at create;
                                  left out of the index)                  */
    uint64_t shards_bad;      /* tar shards that could not be used, not
                                  counted in files_ignored: a shard that
                                  cannot be indexed (missing, unreadable,
                                  HTTP still failing after http_retries,
                                  compressed data named .tar) or, in a
                                  shard folder, a compressed shard (.tar.gz,
                                  ...); the others are read (none usable:
                                  create fails with the first one's reason).
                                  nostall_loader_bad_shard names them     */
} nostall_dataset_info;

/* Fill at most `size` bytes of *out (pass sizeof *out): fields are only ever
 * appended, so a struct from an older header stays valid. */
NOSTALL_API int nostall_loader_info(const nostall_loader *ld, nostall_dataset_info *out,
                                    size_t size);
/* Path (as indexed) and label of item `index`. The path lives as long as the
 * loader. */
NOSTALL_API int nostall_loader_item(const nostall_loader *ld, uint64_t index, const char **path,
                                    int64_t *label);
/* Path of ignored file i (files_ignored): the first ones found, up to 64;
 * NULL past those. The path lives as long as the loader. */
NOSTALL_API const char *nostall_loader_ignored(const nostall_loader *ld, uint64_t i);
/* Path and reason of bad shard i (shards_bad): the first ones found, up to
 * 64 (of each source of a mix; E_INVALID past those). Both live as long as
 * the loader. */
NOSTALL_API int nostall_loader_bad_shard(const nostall_loader *ld, uint64_t i, const char **path,
                                         const char **reason);
/* Name of class `label` (ImageFolder sub-folder), or NULL for file lists. */
NOSTALL_API const char *nostall_loader_class_name(const nostall_loader *ld, uint64_t label);

/* ------------------------------------------------------------------------
 * Statistics. One table defines every counter; all are uint64_t.
 * Times are nanoseconds. Counters are cumulative since create (set_state
 * does not reset them). storage_reads, storage_bytes_read, cache_hits and
 * cache_misses count the items of *delivered* batches, so a snapshot taken
 * at an epoch's end covers exactly that epoch (work done ahead is counted
 * when its batch is delivered); the per-stage counters count work done. nostall_loader_stats() may be called from any thread.
 * New counters are only ever appended, so a struct from an older header
 * stays valid: pass its size.
 * ------------------------------------------------------------------------ */
#define NOSTALL_STATS_TABLE(X)                                                                     \
    X(epoch, "epoch the consumer is in")                                                           \
    X(position, "items of that epoch delivered so far")                                            \
    X(batches_delivered, "batches lent to the consumer")                                           \
    X(items_delivered, "items lent to the consumer")                                               \
    X(fetch_items, "items fetched (from the cache or from storage)")                               \
    X(fetch_bytes, "encoded bytes handed to decode (from the cache or from "                       \
                   "storage; with cache_transcode, an item's rewritten size)")                     \
    X(fetch_busy_ns, "worker time spent fetching (including emulated delays)")                     \
    X(decode_items, "items decoded")                                                               \
    X(decode_pixels, "pixels decoded")                                                             \
    X(decode_busy_ns, "worker time spent decoding")                                                \
    X(augment_items, "items augmented into a batch slot")                                          \
    X(augment_bytes, "bytes written into batch slots")                                             \
    X(augment_busy_ns, "worker time spent cropping, resizing, normalizing")                        \
    X(worker_idle_ns, "worker time spent waiting for a free slot")                                 \
    X(consumer_wait_ns, "consumer time spent waiting in next: the data stall")                     \
    X(skipped, "bad items left out (each occurrence)")                                             \
    X(skipped_unique, "distinct bad items seen")                                                   \
    X(threads, "worker threads")                                                                   \
    X(storage_reads, "items read from storage (cache misses, or all without a cache)")             \
    X(storage_bytes_read, "bytes read from storage")                                               \
    X(storage_wait_ns, "worker time spent waiting for fetches in flight "                          \
                       "(reads, transfers, emulated storage delays)")                              \
    X(cache_hits, "items served from the MinIO cache")                                             \
    X(cache_misses, "items looked up in the cache and not found")                                  \
    X(cache_bytes, "bytes held by the MinIO cache")                                                \
    X(cache_items, "items held by the MinIO cache")                                                \
    X(fresh_items, "delivered items that were the first use of their item "                        \
                   "in the epoch")                                                                 \
    X(echoed_items, "delivered items that were a repeat (data echoing)")                           \
    X(echo_uses_1, "items used once in their epoch (counted when the epoch's "                     \
                   "last use is delivered; echo histogram)")                                       \
    X(echo_uses_2, "items used twice")                                                             \
    X(echo_uses_3, "items used 3 times")                                                           \
    X(echo_uses_4, "items used 4 times")                                                           \
    X(echo_uses_5_8, "items used 5 to 8 times")                                                    \
    X(echo_uses_9_up, "items used 9 or more times")                                                \
    X(echo_batch_duplicates, "items delivered in a batch that already held "                       \
                             "the same item")                                                      \
    X(echo_repeat_distance, "sum over repeats of the items delivered since "                       \
                            "the previous use of the same item (mean: / echoed_items)")            \
    X(upstream_busy_ns, "worker time producing fresh items (fetch, decode, "                       \
                        "augment) — with consumer_busy_ns, estimates R")                           \
    X(consumer_busy_ns, "consumer time between batches (outside next): the "                       \
                        "training step")                                                           \
    X(peer_hits, "items served by a peer cache (nostall_peer_cache)")                              \
    X(peer_bytes, "bytes served by a peer cache")                                                  \
    X(http_transfers, "http(s) transfers completed (each attempt)")                                \
    X(http_retries, "http(s) transfers retried after a transient failure")                         \
    X(coord_members, "coordinated prep: live members of the group")                                \
    X(coord_items_produced, "coordinated prep: items this job prepared for "                       \
                            "the group")                                                           \
    X(coord_batches_produced, "coordinated prep: batches this job finished")                       \
    X(coord_group_items_produced, "coordinated prep: items the whole group "                       \
                                  "prepared")                                                      \
    X(coord_members_dropped, "coordinated prep: members found dead and "                           \
                             "dropped")                                                            \
    X(coord_items_requeued, "coordinated prep: items of dead or leaving "                          \
                            "members prepared again by others")                                    \
    X(cache_transcoded, "items the MinIO cache holds rewritten with restart "                      \
                        "markers (cache_transcode)")                                               \
    X(cache_transcode_ns, "worker time spent rewriting items for the cache "                       \
                          "(declined attempts included); part of fetch_busy_ns")                   \
    X(io_depth_max, "fetches in flight per worker now, the largest over the "                      \
                    "workers (io_depth, or what io_depth=0 grew to)")                              \
    X(cpu_budget, "threads=0's worker count: CPUs in the affinity mask, capped by the "            \
                  "cgroup's CPU quota, divided by LOCAL_WORLD_SIZE (or cpu_budget rounded up)")    \
    X(prep_remote_items, "prep_servers: items received from prep servers")                         \
    X(prep_requeued, "prep_servers: items a failed prep server had outstanding, "                  \
                     "prepared again by another server or a local worker")                         \
    X(autotune, "1 when autotune is on")                                                           \
    X(active_workers, "workers taking items now (autotune parks the others; else threads)")        \
    X(tuned_batches_ahead, "batches the ring may hold ahead of the consumer now (autotune "        \
                           "moves it up to the most that fit memory_budget; else batches_ahead)")  \
    X(tuned_io_depth, "autotune's limit on reads in flight per worker (0: not tuned)")             \
    X(tune_windows, "autotune: measurement windows evaluated")                                     \
    X(tune_decisions, "autotune: windows after which a setting changed")                           \
    X(tune_reason, "autotune: the last decision's reason, a NOSTALL_TUNE_* code "                  \
                   "(nostall_tune_reason_name; nostall_loader_tune_reason for the sentence)")      \
    X(cpu_budget_milli, "the CPU budget in thousandths of a CPU (cpu_budget, or the affinity "     \
                        "mask and cgroup quota over LOCAL_WORLD_SIZE)")                            \
    X(cpu_returned_milli, "autotune: CPUs given back by parked workers, thousandths "              \
                          "(ceil(budget) - active workers, at most the budget)")                   \
    X(ring_bytes_max, "bytes of the batch ring's memory (every slot, preallocated)")               \
    X(ring_slots_usable, "ring slots the loader may use now: all of them, or with autotune "       \
                         "those of tuned_batches_ahead (it only grows, from batches_ahead)")       \
    X(tune_last_change_batch, "autotune: batches delivered when a setting last changed "           \
                              "(0: never; with tune_last_change_ms, when it settled)")             \
    X(tune_last_change_ms, "autotune: milliseconds from the first delivered batch to the last "    \
                           "change of a setting (0: never)")                                       \
    X(prep_remote_bytes, "prep_servers: item bytes received from prep servers (the items' "        \
                         "fields; frame headers not counted)")                                     \
    X(prep_remote_wait_ns, "prep_servers: request to reply, summed over the items received "       \
                           "(mean: / prep_remote_items)")                                          \
    X(prep_remote_busy_ns, "prep_servers: time each server had items outstanding, summed over "    \
                           "the servers (items per server-second: prep_remote_items / it)")        \
    X(prep_recv_cpu_ns, "prep_servers: CPU time of the loader's prep-server threads "              \
                        "(requesting and receiving)")                                              \
    X(prep_servers_up, "prep_servers: servers connected now")                                      \
    X(cache_budget_bytes, "bytes the MinIO cache may hold at most: cache_bytes, or with "          \
                          "autotune, no cache_bytes and a memory_budget, what the budget "         \
                          "leaves after the ring (0: no cache)")                                   \
    X(tuned_cache_bytes, "the MinIO cache's admission cap now: cache_budget_bytes, or "            \
                         "what autotune chose (beyond it nothing more is admitted; held "          \
                         "items stay)")                                                            \
    X(cache_capped, "items the MinIO cache declined for the admission cap alone "                  \
                    "(cached later if the cap rises)")                                             \
    X(tuned_echo_max, "adaptive echoing's most uses per item now: echo_max, or what "              \
                      "autotune chose (1: no repeats); 0 without adaptive echoing")                \
    X(gpu_hw_items, "decode_device=gpu: JPEGs decoded by nvJPEG's hardware engines "               \
                    "(batched; part of decode_items)")                                             \
    X(gpu_default_items, "decode_device=gpu: JPEGs decoded by nvJPEG's default (hybrid) "          \
                         "backend on the GPU (part of decode_items)")                              \
    X(gpu_cpu_items, "decode_device=gpu: items of the GPU route decoded by nostall's CPU "         \
                     "decoder (CMYK, PNG, what nvJPEG handed back; part of decode_items)")

typedef struct nostall_stats {
#define NOSTALL_STATS_FIELD_(name, help) uint64_t name;
    NOSTALL_STATS_TABLE(NOSTALL_STATS_FIELD_)
#undef NOSTALL_STATS_FIELD_
} nostall_stats;

/* Why autotune chose its setting (stats' tune_reason). X(NAME, value,
 * "name"); values pinned. */
#define NOSTALL_TUNE_REASON_TABLE(X)                                                               \
    X(NONE, 0, "none")                                                                             \
    X(MEASURING, 1, "measuring")                                                                   \
    X(PREP_BOUND, 2, "prep-bound")                                                                 \
    X(FETCH_BOUND, 3, "fetch-bound")                                                               \
    X(STEP_BOUND, 4, "step-bound")                                                                 \
    X(JITTER, 5, "jitter")                                                                         \
    X(AT_BUDGET, 6, "at-budget")                                                                   \
    X(HOLD, 7, "hold")                                                                             \
    X(TEST_FLIP, 8, "test-flip")
enum {
#define NOSTALL_TUNE_ENUM_(id, value, name) NOSTALL_TUNE_##id = (value),
    NOSTALL_TUNE_REASON_TABLE(NOSTALL_TUNE_ENUM_)
#undef NOSTALL_TUNE_ENUM_
};
/* Static name of a NOSTALL_TUNE_* code ("unknown" for others). */
NOSTALL_API const char *nostall_tune_reason_name(int code);
/* autotune's last decision in words (what it chose and why, e.g. how much
 * CPU it gave back), copied into buf (n bytes, NUL-terminated, cut to fit);
 * "" without autotune. Any thread. Returns the length it wanted. */
NOSTALL_API size_t nostall_loader_tune_reason(const nostall_loader *ld, char *buf, size_t n);

/* Snapshot into *out, filling at most `size` bytes (pass sizeof *out). */
NOSTALL_API int nostall_loader_stats(const nostall_loader *ld, nostall_stats *out, size_t size);
/* Number of counters and their names/help, in struct order. */
NOSTALL_API int nostall_stats_count(void);
NOSTALL_API const char *nostall_stats_name(int i);
NOSTALL_API const char *nostall_stats_help(int i);
/* 1 when counter i is a gauge (a value now, e.g. threads, cache_bytes,
 * autotune's choices), 0 when it only grows (a difference of two
 * snapshots is what happened between them), -1 out of range. */
NOSTALL_API int nostall_stats_gauge(int i);

/* A distinct bad item that was skipped. */
typedef struct nostall_skip_info {
    uint64_t index;     /* dataset item index                             */
    const char *path;   /* lives as long as the loader                    */
    int status;         /* NOSTALL_E_* reason                             */
    const char *reason; /* detail message; valid until the next call of
                           nostall_loader_skipped on this loader          */
} nostall_skip_info;

/* Number of distinct skipped items so far. */
NOSTALL_API uint64_t nostall_loader_skipped_count(const nostall_loader *ld);
/* The i-th distinct skipped item (in order of item index). E_INVALID if
 * i >= count. */
NOSTALL_API int nostall_loader_skipped(const nostall_loader *ld, uint64_t i, nostall_skip_info *out);

/* ------------------------------------------------------------------------
 * Peer cache: an extension point for a cache outside this loader, consulted
 * on every item the loader's own MinIO cache does not hold, before storage
 * is read. nostall_mpi.h's partitioned cache is built on it.
 * ------------------------------------------------------------------------ */
/* A worker's fetch buffer, handed to nostall_peer_cache.get. */
typedef struct nostall_fetch_buf nostall_fetch_buf;
/* Room for `len` bytes in the buffer (grown as needed, kept by the worker
 * for its next items). NULL when out of memory. */
NOSTALL_API void *nostall_fetch_buf_reserve(nostall_fetch_buf *buf, size_t len);

typedef struct nostall_peer_cache {
    void *ctx;
    /* `key` names what is fetched, as the MinIO cache does: the item's
     * index in the dataset when items are whole files (classify, detect,
     * bytes, audio), a chunk of the token file for task=tokens (see
     * docs/tokens.md); a key always means the same bytes.
     * Called by worker threads, concurrently. Return 1 after writing the
     * key's bytes into nostall_fetch_buf_reserve(buf, len) and setting
     * *len; 0 if no peer holds them (storage is then read); a negative
     * status for an error, which also falls back to storage. NULL: never. */
    int (*get)(void *ctx, uint64_t key, nostall_fetch_buf *buf, size_t *len);
    /* Called by worker threads after `key`'s bytes were read from storage
     * (data valid only during the call). NULL: never. */
    void (*put)(void *ctx, uint64_t key, const void *data, size_t len);
} nostall_peer_cache;

/* Attach a peer cache to loaders created from this config (a copy of *pc
 * is kept; NULL detaches). The hooks must stay callable until every such
 * loader is freed. With a peer cache, storage reads do not fill the OS page
 * cache, as with the MinIO cache. */
NOSTALL_API int nostall_config_set_peer_cache(nostall_config *cfg, const nostall_peer_cache *pc);

/* For extension libraries (nostall_mpi): record this thread's error so that
 * nostall_last_error() reports it; returns `status`. */
NOSTALL_API int nostall_error_set(int status, const char *message);

/* ------------------------------------------------------------------------
 * Utilities.
 * ------------------------------------------------------------------------ */
/* The checksum the CLI prints: fold `len` bytes into *state (start from 0).
 * Depends only on the bytes and their order of folding, not on alignment. */
NOSTALL_API void nostall_checksum_update(uint64_t *state, const void *data, size_t len);
/* Fold a whole batch: the bytes of each of its fields in order (for
 * classification: its images, then its labels as little-endian int64). */
NOSTALL_API void nostall_checksum_batch(uint64_t *state, const nostall_batch *b);
/* The field named `name` of a lent batch, or NULL. */
NOSTALL_API const nostall_field *nostall_batch_field(const nostall_batch *b, const char *name);

/* ------------------------------------------------------------------------
 * Lossless JPEG rewrite with restart markers: the one rewriter behind
 * `nostall transcode`, the MinIO cache's cache_transcode and the stall
 * analyzer's restart-marker what-if.
 *
 * The DCT coefficients are read (entropy decoding only, by the same Huffman
 * decoder and with the same damage policy as a decode) and written back as
 * a baseline sequential JPEG with a restart marker every N MCUs (or MCU
 * rows): the same quantization tables, sampling and coefficients, so every
 * decoder gives exactly the pixels of the original, and nostall's region
 * decode then entropy-decodes only the intervals a crop covers.
 * Policy, one for every caller:
 *   - tables: libjpeg's standard Huffman tables (one pass over the
 *     coefficients), or optimized ones (a second, statistics pass) where the
 *     standard ones would grow the file by more than an eighth, and for
 *     progressive sources;
 *   - markers: APPn and COM segments (EXIF, ICC, XMP, comments) copied
 *     unless NOSTALL_TRANSCODE_DROP_METADATA; JFIF written by libjpeg;
 *   - kept as it is (*dst_len = 0, res->kept says why), never rewritten
 *     with other pixels: anything but an 8-bit Huffman-coded grayscale or
 *     YCbCr JPEG libjpeg can decode, a file that already has the restart
 *     interval asked for, more than max_pixels, progressive scans that leave
 *     coefficients incomplete (decoders smooth those; a baseline copy would
 *     not be), coefficients baseline coding cannot hold, and a rewrite
 *     larger than nostall_transcode_bound(src_len) or dst_cap;
 *   - damaged (what a decode would report as such): an error.
 * ------------------------------------------------------------------------ */
/* Why a JPEG was kept as it is. X(NAME, value, message); values pinned. */
#define NOSTALL_TRANSCODE_KEPT_TABLE(X)                                                            \
    X(REWRITTEN, 0, "rewritten")                                                                   \
    X(UNSUPPORTED, 1,                                                                              \
      "not an 8-bit Huffman-coded grayscale or YCbCr JPEG "                                        \
      "that libjpeg decodes")                                                                      \
    X(HAS_RESTARTS, 2,                                                                             \
      "it already has restart markers at the interval asked "                                      \
      "for")                                                                                       \
    X(TOO_MANY_PIXELS, 3, "more pixels than max_pixels")                                           \
    X(INCOMPLETE_SCANS, 4,                                                                         \
      "progressive scans leave coefficients incomplete, "                                          \
      "which decoders smooth; a baseline copy would not be")                                       \
    X(COEF_RANGE, 5,                                                                               \
      "coefficients outside what baseline Huffman coding "                                         \
      "holds")                                                                                     \
    X(TOO_LARGE, 6,                                                                                \
      "the rewrite would be larger than allowed (the "                                             \
      "original's size plus an eighth and 4 KiB, or dst_cap)")

typedef enum nostall_transcode_kept {
#define NOSTALL_TRANSCODE_KEPT_ENUM_(name, value, msg) NOSTALL_TRANSCODE_##name = (value),
    NOSTALL_TRANSCODE_KEPT_TABLE(NOSTALL_TRANSCODE_KEPT_ENUM_)
#undef NOSTALL_TRANSCODE_KEPT_ENUM_
} nostall_transcode_kept;

/* Images with more pixels are kept by default: reading the coefficients
 * holds the whole image's (3 bytes per pixel for 4:2:0, 6 for 4:4:4). */
#define NOSTALL_TRANSCODE_MAX_PIXELS (1u << 25)
/* options.flags */
#define NOSTALL_TRANSCODE_DROP_METADATA 1u /* APPn and COM segments left out */

/* Options (copied in; pass their size: fields are only ever appended).
 * All zero: the defaults. */
typedef struct nostall_transcode_options {
    uint32_t restart_mcus; /* a marker every N MCUs, 1..65535 (0: 1), lowered
                              per image to the largest divisor of its MCUs per
                              row, so intervals tile the rows                */
    uint32_t restart_rows; /* > 0: a marker every N MCU rows instead, 1..65535
                              (fewer when N rows exceed 65535 MCUs); not with
                              restart_mcus                                   */
    uint64_t max_pixels;   /* 0: NOSTALL_TRANSCODE_MAX_PIXELS                */
    uint32_t flags;        /* NOSTALL_TRANSCODE_DROP_METADATA                */
    uint32_t reserved_;
} nostall_transcode_options;

/* What happened (copied out; pass its size). */
typedef struct nostall_transcode_result {
    int kept;                  /* NOSTALL_TRANSCODE_REWRITTEN or why kept   */
    int status;                /* 0, or the error returned                  */
    uint32_t width, height;    /* of the image (0 before its header is read) */
    uint32_t restart_interval; /* MCUs per restart interval written (0: kept) */
    uint32_t optimized;        /* 1: optimized Huffman tables, 0: standard  */
    char message[200];         /* why kept, or the damage found ("" if
                                  rewritten)                                */
} nostall_transcode_result;

/* The most a rewrite of src_len bytes may take: src_len + src_len / 8 +
 * 4096 (SIZE_MAX when that overflows). Give dst this many bytes. */
NOSTALL_API size_t nostall_transcode_bound(size_t src_len);
/* Static text of a nostall_transcode_kept value ("unknown" for others). */
NOSTALL_API const char *nostall_transcode_kept_text(int kept);
/* Rewrite the JPEG src[0..src_len) into dst[0..dst_cap) (the caller's
 * memory; nothing is allocated for the output). Returns 0 with *dst_len the
 * rewrite's length, or 0 with *dst_len = 0 when the file is kept as it is
 * (see above; res->kept and res->message say why); or an error: E_CORRUPT or
 * E_TRUNCATED for damaged data (nostall_last_error() and res->message have
 * libjpeg's words), E_NOT_IMAGE when src does not start as a JPEG does (FF
 * D8 FF), E_INVALID for bad arguments or options, E_NOMEM. `opts` and `res`
 * may be NULL. Any thread; calls are independent (each has its own libjpeg
 * state). */
NOSTALL_API int nostall_transcode_jpeg(void *dst, size_t dst_cap, size_t *dst_len, const void *src,
                                       size_t src_len, const nostall_transcode_options *opts,
                                       size_t opts_size, nostall_transcode_result *res,
                                       size_t res_size);

/* ------------------------------------------------------------------------
 * Prep servers (`nostall serve`, docs/serve.md): this process prepares the
 * items that loaders with prep_servers ask for, with its own workers
 * (threads), cache and recipe, bit-identical to the loaders' own.
 * ------------------------------------------------------------------------ */
typedef struct nostall_server nostall_server;
/* Index `source` with `cfg` (the byte-affecting options must be the
 * clients': a client whose differ is refused, naming the option), read the
 * shared secret from `secret_file` (mode 0600; one trailing newline
 * dropped) and listen on `listen_at` ("HOST:PORT"; NULL: 127.0.0.1 and a
 * free port). Nothing is served before nostall_server_run. */
NOSTALL_API int nostall_server_create(nostall_server **out, const char *source,
                                      const nostall_config *cfg, const char *listen_at,
                                      const char *secret_file);
/* The port listened on. */
NOSTALL_API int nostall_server_port(const nostall_server *srv);
/* Items sent to clients so far (any thread). */
NOSTALL_API uint64_t nostall_server_served(const nostall_server *srv);
/* Accept and serve clients until nostall_server_stop. */
NOSTALL_API int nostall_server_run(nostall_server *srv);
/* End run soon: any thread, and async-signal-safe (a signal handler). */
NOSTALL_API int nostall_server_stop(nostall_server *srv);
NOSTALL_API void nostall_server_free(nostall_server *srv);

#ifdef __cplusplus
}
#endif
#endif /* NOSTALL_H */
