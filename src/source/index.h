/*
 * index.h — the dataset index: item paths and labels, built once at loader
 * create and immutable afterwards (so any thread may read it without locks).
 *
 * Sources:
 *   - a directory: ImageFolder. Each sub-directory is a class; classes sorted
 *     by name (bytewise, as Python's sorted()) get labels 0..K-1. Inside a
 *     class directory files are found recursively; a file is an item when its
 *     extension is .jpg, .jpeg or .png (any case); other regular files are
 *     counted as ignored. Names starting with '.' are skipped (and counted as
 *     ignored when they are files). Items are ordered by class, then by their
 *     path relative to the class folder (bytewise). Paths are stored joined
 *     to the root as given ("root/class/file.jpg").
 *   - a regular file: a list, one `path<TAB>label` per line; label a decimal
 *     integer in [0, 2^62). Relative paths are relative to the list file's
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
 * An empty dataset (no items) is an error (E_DATASET). Every error message
 * names the path involved. Storage: one char arena for all paths plus an
 * offsets array and a labels array (no allocation per item).
 */
#ifndef NST_SOURCE_INDEX_H
#define NST_SOURCE_INDEX_H

#include <stdint.h>

typedef struct nst_index nst_index;

int nst_index_build(nst_index **out, const char *source);
void nst_index_free(nst_index *ix);

uint64_t nst_index_count(const nst_index *ix);
const char *nst_index_path(const nst_index *ix, uint64_t i);
int64_t nst_index_label(const nst_index *ix, uint64_t i);
/* ImageFolder: number of class folders; list: max label + 1. */
uint64_t nst_index_classes(const nst_index *ix);
/* ImageFolder: class folder name of `label`; list: NULL. */
const char *nst_index_class_name(const nst_index *ix, uint64_t label);
/* Files seen but not indexed (ImageFolder only; 0 for lists). */
uint64_t nst_index_ignored(const nst_index *ix);

#endif
