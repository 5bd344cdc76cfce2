/*
 * fingerprint.c — the fingerprint of a dataset index (index.h): a checksum
 * of its item count, every path and raw label (and a multi-label item's
 * labels), never 0. Room: dataset/ (what the items are). Recipes start
 * their own fingerprint from it (recipe/recipe.c, detect.c, tokens.c,
 * op.c); resumable state and coordinated groups compare it. Pure: reads
 * the index only; any thread may call it.
 */
#include <string.h>

#include "dataset/index.h"
#include "nostall.h"

uint64_t nst_index_fingerprint(const nst_index *ix)
{
    uint64_t h = 0x6e6f7374616c6cULL, n = nst_index_count(ix);
    nostall_checksum_update(&h, &n, sizeof n);
    for (uint64_t i = 0; i < n; i++) {
        const char *path = nst_index_path(ix, i);
        int64_t label = nst_index_label(ix, i);
        nostall_checksum_update(&h, path, strlen(path) + 1);
        nostall_checksum_update(&h, &label, sizeof label);
        if (nst_index_label_kind(ix) == NST_LABEL_MULTI) {
            const uint32_t *m;
            uint32_t k = nst_index_labels(ix, i, &m);
            nostall_checksum_update(&h, m, k * sizeof *m);
        }
    }
    return h ? h : 1;
}
