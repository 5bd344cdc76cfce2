/*
 * nostall_dataset.h — a dataset opened once and queried, shared by loaders;
 * and a writer of WebDataset tar shards.
 *
 * A dataset is what a loader's source names, indexed the way the loader
 * indexes it (the same code, src/dataset/dataset.c): a folder, a list
 * file, tar shards, COCO annotations (task=detect), a token file
 * (task=tokens), s3:// and http(s):// items, a mix (the `mix` option).
 * Opening it reads the index, never the items' bytes; no thread is
 * started. Queries: how many items, each item's path, label and byte range
 * in its file, and the distinct files the items live in.
 *
 * A loader made from a dataset (nostall_loader_create_from_dataset) does
 * not index the source again: the dataset is immutable and shared, as
 * zstd's ZSTD_CDict is beside the ZSTD_CCtx that uses it.
 *
 * THREADS AND LIFETIME  A dataset is immutable after open: any thread may
 *   query it, and several loaders may share it, without locks. It is
 *   reference-counted: every loader made from it holds a reference, so
 *   nostall_dataset_free() may be called as soon as the loaders are made;
 *   the dataset goes when its last holder lets go. Strings it returns live
 *   as long as the dataset.
 *
 * A shard writer (nostall_shard_writer) writes samples -- a key and its
 * members, each an extension and bytes -- into DIR/PREFIX-000000.tar,
 * -000001.tar, ..., each at most a size limit (a sample larger than the
 * limit gets a shard of its own), with the sidecar index NAME.tar.nstidx
 * beside each, so a loader indexes the shards without reading them
 * (docs/shards.md). `nostall pack` is built on it. One thread at a time.
 */
#ifndef NOSTALL_DATASET_H
#define NOSTALL_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "nostall.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nostall_dataset nostall_dataset;

/* Index `source` as nostall_loader_create(source, cfg) would (cfg NULL:
 * the defaults; the config is copied). Errors name the source. */
NOSTALL_API int nostall_dataset_open(nostall_dataset **out, const char *source,
                                     const nostall_config *cfg);
/* Another reference to `ds` (returned); each is let go by
 * nostall_dataset_free. */
NOSTALL_API nostall_dataset *nostall_dataset_ref(nostall_dataset *ds);
/* Let go of one reference; the last frees the dataset. NULL is a no-op. */
NOSTALL_API void nostall_dataset_free(nostall_dataset *ds);

/* The source it was opened on. */
NOSTALL_API const char *nostall_dataset_source(const nostall_dataset *ds);
/* Items (what a loader's epoch permutes: images, token windows, a mix's
 * slots). */
NOSTALL_API uint64_t nostall_dataset_count(const nostall_dataset *ds);

/* The kind of labels, one for the whole dataset. */
enum {
    NOSTALL_LABELS_NONE = 0,
    NOSTALL_LABELS_INT = 1,
    NOSTALL_LABELS_FLOAT = 2,
    NOSTALL_LABELS_MULTI = 3
};
NOSTALL_API int nostall_dataset_label_kind(const nostall_dataset *ds);

/* Item i: its file (or URL), its integer label (0 unless the kind is
 * NOSTALL_LABELS_INT), and where its bytes are in the file: [*offset,
 * *offset + *length), *length 0 for the whole file (token windows: where
 * the window is in epoch 0). Any output may be NULL. E_INVALID past the
 * items. */
NOSTALL_API int nostall_dataset_item(const nostall_dataset *ds, uint64_t i, const char **path,
                                     int64_t *label, uint64_t *offset, uint64_t *length);

/* The distinct files the items live in (a shard, a token file, every
 * image of a folder), each once, in the order of its first item. */
NOSTALL_API uint64_t nostall_dataset_files(const nostall_dataset *ds);
/* File i, or NULL past them. */
NOSTALL_API const char *nostall_dataset_file(const nostall_dataset *ds, uint64_t i);

/* A loader over a dataset, without indexing it again. The dataset fixes
 * the items and what each becomes: its config's task and every option
 * except the loader's own, which `cfg` (NULL: the dataset's config) sets:
 * batch_size, threads, batches_ahead, epochs, drop_last, rank, world_size,
 * on_bad_item, max_bad_fraction, storage_mbps, storage_latency_ms,
 * io_depth, reader, http_timeout_ms, http_retries, http_verify_tls, echo,
 * echo_point, echo_factor, echo_buffer, echo_max, coordinate,
 * coordinate_lead, cache_transcode, shuffle_buffer, shard_mode. Any other
 * option (seed, shuffle, cache, mode, crop, mix, ...: the recipe reads
 * them) that differs from the dataset's is refused with E_OPTION naming
 * it, never silently ignored; so is another user op. The loader holds a
 * reference to the dataset. */
NOSTALL_API int nostall_loader_create_from_dataset(nostall_loader **out, nostall_dataset *ds,
                                                   const nostall_config *cfg);

/* ---- shard writer ------------------------------------------------------- */

typedef struct nostall_shard_writer nostall_shard_writer;

/* One member of a sample: KEY.EXT holding `len` bytes. */
typedef struct nostall_shard_member {
    const char *ext; /* without the dot: "jpg", "cls", "json" */
    const void *data;
    size_t len;
} nostall_shard_member;

/* Shards DIR/PREFIX-NNNNNN.tar of at most `shard_bytes` each (0: 512 MiB).
 * DIR must exist. */
NOSTALL_API int nostall_shard_writer_open(nostall_shard_writer **out, const char *dir,
                                          const char *prefix, uint64_t shard_bytes);
/* Append a sample: its members, in order (at most 16). The key must not
 * contain '.' in its last component. */
NOSTALL_API int nostall_shard_writer_add(nostall_shard_writer *w, const char *key,
                                         const nostall_shard_member *members, uint32_t n);
/* Shards finished so far (the one being written not included), the
 * samples written, and the bytes of every shard as it will be once
 * finished (the one being written included). */
NOSTALL_API uint64_t nostall_shard_writer_shards(const nostall_shard_writer *w);
NOSTALL_API uint64_t nostall_shard_writer_samples(const nostall_shard_writer *w);
NOSTALL_API uint64_t nostall_shard_writer_bytes(const nostall_shard_writer *w);
/* Finish the last shard and its index, and free the writer (also on
 * error). */
NOSTALL_API int nostall_shard_writer_close(nostall_shard_writer *w);

/* Write the sidecar index of an existing shard (PATH.nstidx); *samples and
 * *damaged (either may be NULL): what it holds. */
NOSTALL_API int nostall_shard_index_write(const char *path, uint64_t *samples, uint64_t *damaged);

/* 1 if `rel` (a relative name such as a COCO file_name) leaves folder
 * `root` (absolute, "..", a symlink out), 0 if not. */
NOSTALL_API int nostall_path_leaves_root(const char *root, const char *rel);

#ifdef __cplusplus
}
#endif

#endif
