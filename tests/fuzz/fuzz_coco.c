/*
 * fuzz_coco.c — the COCO instances parser (src/dataset/coco.c) on hostile
 * JSON: the input is the annotation file (nst_coco_load_buffer, files not
 * checked; max_boxes 1 + (size & 3), so truncation is reached;
 * allow_outside_root (size >> 2) & 1, so file_names leaving the root are
 * refused and read; max_annotation_bytes 64 MB).
 *
 * Properties checked (abort() on violation, so libFuzzer keeps the input):
 *   - the parse either succeeds or fails with E_DATASET (E_NOMEM allowed)
 *     and a message that starts "coco: fuzz/ann.json" (a syntax error with
 *     ":LINE:COLUMN:" right after the name), nothing returned;
 *   - on success: at least one image; ids strictly ascending; every path is
 *     "fuzz/" + file_name, or the file_name alone when absolute or a URL;
 *     boxes of each image contiguous in order, their counts summing to
 *     nboxes, max_count their maximum, items_truncated the images over
 *     max_boxes; every box finite with 0 <= x0 < x1 <= width and 0 <= y0
 *     < y1 <= height, its label below ncategories and iscrowd 0 or 1;
 *     category ids strictly ascending;
 *   - parsing the same bytes again gives the same result, bit for bit;
 *   - no crash, leak, hang or undefined behaviour (ASan, UBSan).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "nostall.h"
#include "dataset/coco.h"

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "fuzz_coco: " __VA_ARGS__);                                                \
        fprintf(stderr, " (last error: %s)\n", nostall_last_error());                              \
        abort();                                                                                   \
    } while (0)

static void check(const nst_coco *c, uint32_t max_boxes)
{
    if (c->nimages == 0) FAIL("no images but success");
    uint64_t sum = 0, trunc = 0;
    uint32_t maxc = 0;
    for (uint64_t i = 0; i < c->nimages; i++) {
        const nst_coco_image *im = &c->images[i];
        if (i && c->images[i - 1].id >= im->id)
            FAIL("images not sorted by id at %llu", (unsigned long long)i);
        if (im->first != sum) FAIL("image %llu: boxes not contiguous", (unsigned long long)i);
        const char *p = c->paths[i];
        int alone =
            p[0] == '/' || strncasecmp(p, "http://", 7) == 0 || strncasecmp(p, "https://", 8) == 0;
        if (!alone && strncmp(p, "fuzz/", 5) != 0)
            FAIL("path '%s' not joined with the file's folder", p);
        if (im->width < 1 || im->height < 1 || im->width > NST_COCO_MAX_SIDE ||
            im->height > NST_COCO_MAX_SIDE)
            FAIL("image %llu: size %ux%u", (unsigned long long)i, im->width, im->height);
        for (uint32_t k = 0; k < im->count; k++) {
            const nst_coco_box *b = &c->boxes[im->first + k];
            if (!isfinite(b->x0) || !isfinite(b->y0) || !isfinite(b->x1) || !isfinite(b->y1) ||
                !(b->x0 >= 0) || !(b->y0 >= 0) || !(b->x0 < b->x1) || !(b->y0 < b->y1) ||
                !(b->x1 <= (float)im->width) || !(b->y1 <= (float)im->height))
                FAIL("image %llu box %u (%g %g %g %g) outside %ux%u or degenerate",
                     (unsigned long long)i, k, b->x0, b->y0, b->x1, b->y1, im->width, im->height);
            if (b->label >= c->ncategories || b->iscrowd > 1)
                FAIL("box label %u of %u, iscrowd %u", b->label, c->ncategories, b->iscrowd);
        }
        sum += im->count;
        if (im->count > maxc) maxc = im->count;
        trunc += im->count > max_boxes;
    }
    if (sum != c->nboxes)
        FAIL("counts sum to %llu, nboxes %llu", (unsigned long long)sum,
             (unsigned long long)c->nboxes);
    if (maxc != c->max_count) FAIL("max_count %u, want %u", c->max_count, maxc);
    if (trunc != c->items_truncated)
        FAIL("items_truncated %llu, want %llu", (unsigned long long)c->items_truncated,
             (unsigned long long)trunc);
    for (uint32_t k = 1; k < c->ncategories; k++)
        if (c->category_ids[k - 1] >= c->category_ids[k])
            FAIL("category ids not ascending at %u", k);
    if (c->items_missing) FAIL("files were not to be checked");
}

static int same(const nst_coco *a, const nst_coco *b)
{
    if (a->nimages != b->nimages || a->nboxes != b->nboxes || a->ncategories != b->ncategories ||
        a->parts_clipped != b->parts_clipped || a->parts_dropped != b->parts_dropped ||
        a->parts_unmatched != b->parts_unmatched)
        return 0;
    if (memcmp(a->images, b->images, a->nimages * sizeof *a->images) ||
        memcmp(a->boxes, b->boxes, a->nboxes * sizeof *a->boxes) ||
        memcmp(a->category_ids, b->category_ids, a->ncategories * sizeof *a->category_ids))
        return 0;
    for (uint64_t i = 0; i < a->nimages; i++)
        if (strcmp(a->paths[i], b->paths[i])) return 0;
    for (uint32_t k = 0; k < a->ncategories; k++)
        if (strcmp(a->category_names[k], b->category_names[k])) return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char name[] = "fuzz/ann.json";
    nst_coco_opts o = {.max_boxes = 1 + (uint32_t)(size & 3),
                       .allow_outside_root = (int)((size >> 2) & 1),
                       .max_bytes = 64u << 20};
    nst_coco *c = NULL, *c2 = NULL;
    int rc = nst_coco_load_buffer(&c, (const char *)data, size, name, &o);
    if (rc < 0) {
        const char *m = nostall_last_error();
        if (c) FAIL("error %d with a result", rc);
        if (rc == NOSTALL_E_NOMEM) return 0;
        if (rc != NOSTALL_E_DATASET) FAIL("status %d", rc);
        if (strncmp(m, "coco: fuzz/ann.json", 19) != 0)
            FAIL("message does not name the file: %s", m);
        /* what follows the name: ":LINE:COLUMN: JSON syntax error: ..." or
         * ": ..." (which may quote the input, so "syntax error" further on
         * proves nothing) */
        const char *after = m + 19;
        if (after[0] == ':' && after[1] >= '0' && after[1] <= '9') {
            int line, col, end = 0;
            if (sscanf(after, ":%d:%d:%n", &line, &col, &end) != 2 || !end || line < 1 || col < 0 ||
                strncmp(after + end, " JSON syntax error", 18) != 0)
                FAIL("a line and column without a syntax error: %s", m);
        } else if (strncmp(after, ": JSON syntax error", 19) == 0) {
            FAIL("syntax error without line and column: %s", m);
        }
        return 0;
    }
    check(c, o.max_boxes);
    rc = nst_coco_load_buffer(&c2, (const char *)data, size, name, &o);
    if (rc < 0 || !same(c, c2)) FAIL("a second parse differs (status %d)", rc);
    nst_coco_free(c);
    nst_coco_free(c2);
    return 0;
}
