/*
 * index.h — the dataset index: item paths and labels, built once at loader
 * create and immutable afterwards (so any thread may read it without locks).
 * Room: dataset/ (what the items are).
 *
 * Sources:
 *   - a directory: ImageFolder. Each sub-directory is a class; classes sorted
 *     by name (bytewise, as Python's sorted()) get labels 0..K-1. Inside a
 *     class directory entries are found recursively. Every entry whose name
 *     ends in .jpg, .jpeg or .png (any case) is an item, whatever it turns
 *     out to be: a dangling symlink, a directory, a FIFO, a socket, a device
 *     or a file without read permission is indexed and becomes a bad item
 *     with its reason when fetched (source/reader.h), so nothing named like
 *     an image is dropped silently (and such a directory is not walked).
 *     Other directories are walked; other entries are counted as ignored
 *     (`files_ignored`: not named like an image). Names starting with '.'
 *     are skipped (and counted as ignored when they are not directories),
 *     and so are entries at the root that are not directories (counted as
 *     ignored: files outside class folders, whatever their name). Items are
 *     ordered by class, then by their path relative to the class folder
 *     (bytewise). Paths are stored joined to the root as given
 *     ("root/class/file.jpg"), and may be longer than PATH_MAX (the walk
 *     opens each directory relative to its parent; such an item is a bad
 *     item when fetched, with its reason).
 *     Symlinks are followed. Within one class folder each directory (device
 *     and inode) is walked once: a directory reached again through another
 *     path (symlinked subtrees shared by several paths: a DAG) is skipped,
 *     so its items appear once, under the path that sorts first bytewise;
 *     the same directory under two class folders is walked in each (the
 *     items are indexed once per class). A directory that is one of its own
 *     ancestors is a symlink loop and fails the build (E_DATASET); nesting
 *     is limited to 64 levels below the class folder; a directory that
 *     cannot be read fails the build (its contents are unknown).
 *   - a regular file: a list, one `path`, `path<TAB>label` or
 *     `path<TAB>label,label,...` per line. The label column is an integer
 *     in (-2^31, 2^31), a finite float, or several integers in [0, 2^31)
 *     separated by commas (multi-label; "3," is the one label 3 and ","
 *     none, in a multi-label list); the list's kind
 *     (nst_index_label_kind) follows from its lines: none, int, float (ints
 *     and floats), multi (ints and lists); a list mixing lines with and
 *     without a label, or floats with lists, fails the build, and so does a
 *     malformed or out-of-range label (2^64 included), naming the line. Relative paths are relative to the list file's
 *     directory. Empty lines and lines starting with '#' are skipped; a
 *     trailing '\r' is removed. Any other malformed line fails the build with
 *     E_DATASET naming the list file and line number. Paths are stored
 *     verbatim when absolute or when they are URLs; otherwise joined with
 *     the list's directory. A URL is a line starting "scheme://" (scheme: a
 *     letter, then letters, digits, '+', '-', '.'); only http:// and
 *     https:// (any case) are accepted, any other scheme fails the build
 *     with E_DATASET naming the list file and line. ("a/b://c.jpg" is a
 *     relative path.)
 *
 *   - tar shards (WebDataset), see below: a path or an http(s):// URL
 *     ending in ".tar", a brace pattern of them ("train-{000..146}.tar",
 *     when no file has that very name), a folder holding .tar files and no
 *     sub-folder, or a list file whose every line is a path or URL ending
 *     in ".tar" with no label column.
 *
 * Tar shards (dataset/shards.h finds each shard's members, dataset/tar.h
 * has the layout). Members are grouped into samples by key (the name up
 * to the first dot of its last component); a sample is an item whose bytes
 * are one member's: its first image member (extension jpg, jpeg or png,
 * any case), or, with NST_INDEX_ANY_NAME (task=bytes), when it has none,
 * its first member of another extension, else its .txt, else its .json.
 * The item's label is its .cls member's text (an integer in (-2^31,
 * 2^31): another is a sample left out, as below); an index whose samples have no .cls has no labels (NONE),
 * otherwise every item has one (INT) and a sample without a readable one
 * is left out. Its first .json and .txt members are kept as ranges
 * (nst_index_part) for recipes that read them. Samples with no member to
 * be the item, without a label in a labeled index, or whose member is
 * 4 GiB or more, and every damaged region a header pass found (tar.h) are
 * not items: they are counted in nst_index_ignored() and the first
 * NST_INDEX_IGNORED_KEEP are named (nst_index_ignored_path: "SHARD: KEY:
 * no image member", "SHARD: bytes A-B: bad header (members in it lost)");
 * nst_index_damaged() counts the damaged regions. Items are in shard
 * order, then archive order; nst_index_path() is the item's shard,
 * nst_index_range() its member's bytes, nst_index_member() its member's
 * name. Memory per item: 16 bytes of range, the member's name, its offset
 * and label (about 55 bytes with ImageNet's names).
 *
 * An empty dataset (no items) is an error (E_DATASET). Every error message
 * names the path involved (shortened in the middle when long, so that the
 * reason after it is never cut off). Storage: one char arena for all paths plus an
 * offsets array and a labels array (no allocation per item).
 */
#ifndef NST_DATASET_INDEX_H
#define NST_DATASET_INDEX_H

#include <stddef.h>
#include <stdint.h>

/* Integer labels are in (-2^31, 2^31): what a training job's int32 or int64
 * class index can use (a larger one in a list fails the build naming the
 * line; a shard's .cls is a sample left out), so a class count fits too. */
#define NST_INDEX_LABEL_LIMIT (1ULL << 31)

/* dataset/shards.h (this header stays self-contained: tools/pack.c uses it) */
typedef struct nst_shard_opts nst_shard_opts;
typedef struct nst_shard_stats nst_shard_stats;

typedef struct nst_index nst_index;

int nst_index_build(nst_index **out, const char *source);
/* NST_INDEX_ANY_NAME: in a folder, every entry that is not a directory is
 * an item, whatever its name (task=bytes: a DatasetFolder of any files);
 * directories are walked. Lists are unchanged. */
enum { NST_INDEX_ANY_NAME = 1 };
int nst_index_build_flags(nst_index **out, const char *source, unsigned flags);
/* The same with the shard options (HTTP timeouts, TLS, threads, cache);
 * NULL: nst_shard_opts_default. */
int nst_index_build_opts(nst_index **out, const char *source, unsigned flags,
                         const nst_shard_opts *shard_opts);
/* An index of `n` given paths (copied), with INT labels or none (labels
 * NULL): what a recipe with its own source (COCO annotations, a token
 * file) hands the loader. */
int nst_index_from_paths(nst_index **out, const char *const *paths, const int64_t *labels,
                         uint64_t n);
void nst_index_free(nst_index *ix);

uint64_t nst_index_count(const nst_index *ix);
const char *nst_index_path(const nst_index *ix, uint64_t i);

/* Labels: one kind for the whole index (ImageFolder: INT). */
enum { NST_LABEL_NONE = 0, NST_LABEL_INT = 1, NST_LABEL_FLOAT = 2, NST_LABEL_MULTI = 3 };
int nst_index_label_kind(const nst_index *ix);
/* INT: the label (NONE: 0). */
int64_t nst_index_label(const nst_index *ix, uint64_t i);
/* FLOAT: the label (INT: as a double). */
double nst_index_label_float(const nst_index *ix, uint64_t i);
/* MULTI: the item's labels (*labels valid as long as the index). */
uint32_t nst_index_labels(const nst_index *ix, uint64_t i, const uint32_t **labels);
/* ImageFolder: number of class folders; list: max label + 1 (INT, MULTI),
 * 0 (NONE, FLOAT). */
uint64_t nst_index_classes(const nst_index *ix);
/* ImageFolder: class folder name of `label`; list: NULL. */
const char *nst_index_class_name(const nst_index *ix, uint64_t label);

/* The fingerprint of an index: every path and raw label (never 0;
 * fingerprint.c). */
uint64_t nst_index_fingerprint(const nst_index *ix);
/* Files seen but not indexed (ImageFolder only; 0 for lists): not named
 * like an image, hidden, or outside class folders. */
uint64_t nst_index_ignored(const nst_index *ix);
/* Path (as "root/..." like items) of ignored file i, for i below
 * min(nst_index_ignored(), NST_INDEX_IGNORED_KEEP): the first ones in a
 * fixed order (files at the root sorted bytewise, then those in class
 * folders in the walk's order), so a warning can name them. NULL beyond. */
#define NST_INDEX_IGNORED_KEEP 64
const char *nst_index_ignored_path(const nst_index *ix, uint64_t i);
/* Shards that could not be used (not counted in nst_index_ignored): a
 * shard that cannot be indexed (missing, unreadable, HTTP still failing
 * after its retries, compressed data named .tar: shards.h) and, in a shard
 * folder, compressed shards (.tar.gz, .tgz, .tar.bz2, .tar.xz, .tar.zst).
 * The others are indexed; with none usable the build fails with the first
 * one's status and reason. nst_index_bad_shard: the i-th of the first
 * NST_INDEX_IGNORED_KEEP, its path and reason (valid while the index
 * lives); -1 past them. */
uint64_t nst_index_bad_shards(const nst_index *ix);
int nst_index_bad_shard(const nst_index *ix, uint64_t i, const char **path, const char **why);
/* ImageFolder: directories walked (class folders included), and those met
 * again through another path of the same class folder and not walked
 * again. 0 for lists. */
uint64_t nst_index_dirs_walked(const nst_index *ix);
uint64_t nst_index_dirs_shared(const nst_index *ix);

/* ---- shards ---------------------------------------------------------- */
/* 1 if item i is a byte range of its file (a member of a shard): *offset
 * and *length set (length > 0); 0 if it is a whole file. */
int nst_index_range(const nst_index *ix, uint64_t i, uint64_t *offset, uint64_t *length);
/* The name of item i's member ("KEY.jpg"), or NULL for whole files. */
const char *nst_index_member(const nst_index *ix, uint64_t i);
/* What messages call item i: its path, or for a member "SHARD: KEY.jpg
 * (bytes A-B)" (B inclusive), into buf (n bytes, shortened in the middle
 * of the shard's name when long). Returns buf. */
const char *nst_index_name(const nst_index *ix, uint64_t i, char *buf, size_t n);
/* The sample's other members recipes may read: 1 with the range, 0 if
 * the sample has none (or item i is a whole file). */
enum { NST_PART_JSON = 0, NST_PART_TXT = 1 };
int nst_index_part(const nst_index *ix, uint64_t i, int part, uint64_t *offset, uint64_t *length);
/* Shards (0 for other sources), shard s's path or URL, its first item
 * (s <= nst_index_shards(): items of shard s are [first(s), first(s+1)))
 * and item i's shard. */
uint64_t nst_index_shards(const nst_index *ix);
const char *nst_index_shard(const nst_index *ix, uint64_t s);
uint64_t nst_index_shard_first(const nst_index *ix, uint64_t s);
uint64_t nst_index_shard_of(const nst_index *ix, uint64_t i);
/* The longest item range (0 for whole files). */
uint64_t nst_index_range_max(const nst_index *ix);
/* Damaged regions found in the shards (also counted as ignored). */
uint64_t nst_index_damaged(const nst_index *ix);
/* Where the shards' members came from (sidecars, cache, header passes). */
void nst_index_shard_stats(const nst_index *ix, nst_shard_stats *out);
/* Bytes of memory the index holds (its arrays and strings). */
size_t nst_index_bytes(const nst_index *ix);

#endif
