/*
 * dataset.h — the inside of a nostall_dataset (nostall_dataset.h): the item
 * recipe (or mix) a source and a config make, opened once, immutable, and
 * shared by reference count between the caller and the loaders made from
 * it (loader.c borrows ->recipe and ->mix, never frees them).
 */
#ifndef NST_DATASET_H
#define NST_DATASET_H

#include <pthread.h>
#include <stdatomic.h>

#include "common/config.h"
#include "nostall_dataset.h"
#include "recipe/recipe.h"
#include "order/mix.h"

struct nostall_dataset {
    atomic_uint refs;
    nostall_config cfg; /* what it was opened with (the recipe's options) */
    char *source;
    nst_recipe *recipe; /* owned */
    const nst_mix *mix; /* a mix's slots (inside recipe), or NULL   */
    /* Distinct files, into the index's strings: made at the first query
     * (a loader never pays for them), under files_mu. */
    pthread_mutex_t files_mu;
    int files_done, files_rc;
    const char **files;
    uint64_t nfiles;
};

/* Open with a config already validated (loader.c's nostall_loader_create
 * and nostall_dataset_open); `fn` names the caller in errors. */
int nst_dataset_open(nostall_dataset **out, const char *source, const nostall_config *cfg,
                     const char *fn);

/* loader.c: what nostall_loader_info would report of a loader made from
 * `ds` with `cfg` (validated as by create) -- its items and epoch plan --
 * without making it: no thread, no ring (threads and ring fields 0). For
 * the analyzer's file list (analyze/files.c). E_OPTION with item echoing
 * (its plan is the echo schedule's). */
/* E_OPTION naming the first option `cfg` sets apart from the dataset's
 * that defines the items (only the dataset sets those; a loader made from
 * it may change how it delivers and fetches), or another user op. */
int nst_dataset_same_items(const nostall_dataset *ds, const nostall_config *cfg, const char *fn);

int nst_loader_plan_info(nostall_dataset *ds, const nostall_config *cfg, nostall_dataset_info *out,
                         const char *fn);

#endif
