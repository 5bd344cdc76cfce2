/*
 * coco.h — COCO-format instance annotations (task=detect): the images, their
 * boxes, labels and crowd flags, read once at loader create into compact
 * arrays and immutable afterwards (any thread may read them without locks).
 * Room: dataset/ (what the items are).
 *
 * Input: a JSON object with
 *   "images":      [{"id": int, "file_name": str, "width": int, "height": int}, ...]
 *   "annotations": [{"image_id": int, "bbox": [x, y, w, h], "category_id": int,
 *                    "iscrowd": 0|1 (optional, default 0)}, ...]
 *   "categories":  [{"id": int, "name": str (optional)}, ...]
 * Other members (segmentation, area, licenses, info, ...) are ignored.
 * Parsed with jansson (libjansson-dev): its json_error_t says where a syntax
 * error is (line, column), so a broken file is reported as
 * "FILE:LINE:COLUMN: JSON syntax error: ..."; duplicate keys in an object are
 * syntax errors too (which of two "bbox" members would be meant?).
 *
 * Errors (E_DATASET, naming the file and the JSON path of the member, e.g.
 * "ann.json: annotations[17].bbox: expected an array of 4 numbers"): a
 * syntax error; a missing or ill-typed member; a width or height that is not
 * an integer in 1..2^26; two images or two categories with one id; an
 * annotation naming a category that `categories` does not define; no image
 * left (none listed, or every file missing).
 *
 * Repairs, counted (nostall_dataset_info) and never silent:
 *   items_missing    an image whose file does not exist (stat: ENOENT or
 *                    ENOTDIR) when check_files is set; left out with its
 *                    annotations. URLs (http://, https://) are not checked.
 *   parts_unmatched  an annotation whose image_id is not in `images`.
 *   parts_clipped    a box reaching outside its image (as `images` gives its
 *                    size), cut to it.
 *   parts_dropped    a degenerate box: w or h <= 0 (after clipping) or a
 *                    coordinate that is not finite.
 *   items_truncated  an image with more than max_boxes boxes left (the
 *                    recipe keeps the first max_boxes surviving its crop).
 * Counts are of the images kept (a missing image's boxes are not counted).
 *
 * Order. Items are the images sorted by id (torchvision's CocoDetection
 * sorts its ids the same way); each image's boxes are in the order of the
 * annotations in the file. Categories are sorted by id and numbered 0..K-1:
 * a box's `label` is that number, category_ids[label] its COCO id (which
 * the recipe delivers under box_labels=category_id, as torchvision's
 * detection references train on).
 *
 * Paths: image_root joined with file_name as os.path.join does (an absolute
 * file_name stands alone, and so does an http:// or https:// URL);
 * image_root empty means the annotation file's folder. image_root may be a
 * URL ("https://host/train2017": the items are fetched over HTTP).
 *
 * Containment: a file_name that leaves the image root (absolute, climbing
 * out with "..", or a symlink resolving outside it: realpath when the file
 * is checked, else the text alone) is an error at create naming the entry
 * and the option, unless allow_outside_root is set (an annotation file
 * downloaded with a dataset must not make the loader read ~/.aws/...).
 * URLs are not paths and are not refused.
 *
 * Memory: a pre-scan (coco_scan in coco.c) checks the syntax, replaces the
 * values of members nostall does not use (segmentation, area, info,
 * licenses, ...) by a 0 keeping every line and column where it was, and
 * estimates what jansson's tree of the rest will take; the file's bytes
 * plus that estimate must fit max_bytes (max_annotation_bytes), or create
 * fails naming the file and the limit, before the tree is built. Members
 * that are skipped are checked as jansson would (grammar, numbers, UTF-8,
 * escapes) except for duplicate keys inside them. What is kept is 24 bytes
 * per box and 24 bytes plus the path per image.
 *
 * The annotation file may be a folder holding exactly one instances*.json
 * (what nostall gen --task detect writes); a tar archive or a folder of
 * shards is refused with a message saying task=detect does not read them.
 */
#ifndef NST_DATASET_COCO_H
#define NST_DATASET_COCO_H

#include <stddef.h>
#include <stdint.h>

/* Largest width or height an image may say it has (the decoder's limit,
 * NST_DECODE_MAX_SIDE). */
#define NST_COCO_MAX_SIDE (1u << 26)

typedef struct nst_coco_box {
    float x0, y0, x1, y1; /* xyxy in the image's pixels, inside it, x0 < x1, y0 < y1 */
    uint32_t label;       /* 0..ncategories-1                                     */
    uint32_t iscrowd;     /* 0 or 1                                               */
} nst_coco_box;

typedef struct nst_coco_image {
    uint64_t first; /* its boxes are boxes[first, first + count) */
    uint32_t count;
    uint32_t width, height; /* as `images` says                          */
    int64_t id;
} nst_coco_image;

typedef struct nst_coco {
    uint64_t nimages;
    nst_coco_image *images;
    const char **paths; /* nimages paths (into an arena of ours)   */
    nst_coco_box *boxes;
    uint64_t nboxes;
    uint32_t ncategories;
    int64_t *category_ids;       /* by label, ascending                      */
    const char **category_names; /* by label ("" when the file has none) */
    uint32_t max_count;          /* most boxes of one image                  */
    uint64_t items_truncated, parts_dropped, parts_clipped, parts_unmatched, items_missing;
    char *arena_; /* paths and names                          */
} nst_coco;

typedef struct nst_coco_opts {
    const char *image_root; /* NULL or "": the annotation file's folder */
    uint32_t max_boxes;     /* for items_truncated; 0: no limit          */
    int check_files;        /* leave out images whose file is missing    */
    int allow_outside_root; /* read file_names that leave the image root */
    uint64_t max_bytes;     /* file + estimated tree; 0: no limit        */
} nst_coco_opts;

/* Read the annotation file `path`. */
int nst_coco_load(nst_coco **out, const char *path, const nst_coco_opts *o);
/* The same from `len` bytes in memory; `name` stands for the file in
 * messages and, when o->image_root is empty, its folder is the root. */
int nst_coco_load_buffer(nst_coco **out, const char *data, size_t len, const char *name,
                         const nst_coco_opts *o);
void nst_coco_free(nst_coco *c);
/* Does COCO file_name `file` leave `root` ("": the current folder)? By its
 * text, and by realpath where the file resolves (a symlink out of root);
 * a URL does not. The check create makes, for `nostall pack`. */
int nst_coco_leaves_root(const char *root, const char *file);

#endif
