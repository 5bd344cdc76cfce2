/*
 * mixture.h — the recipe of a weighted mix (option `mix`): one recipe per
 * source, behind one recipe whose items are theirs concatenated.
 */
#ifndef NST_RECIPE_MIXTURE_H
#define NST_RECIPE_MIXTURE_H

#include "recipe/recipe.h"
#include "order/mix.h"

/* The recipes of the mix `cfg` names (its `mix` option), each built as
 * nst_recipe_create would with the source's own seed, and the mix's counts
 * (*mix: owned by the recipe, valid until nst_recipe_free). E_OPTION /
 * E_DATASET naming the source whose items differ from the first's (fields,
 * shapes, dtypes, labels) or cannot be read. */
int nst_mixture_create(nst_recipe **out, const nst_mix **mix, const nostall_config *cfg);

/* The sources' bad shards (index.h: nst_index_bad_shards), in source order:
 * their count, and the i-th named one's path and reason (-1 past them). */
uint64_t nst_mixture_bad_shards(const nst_recipe *r);
int nst_mixture_bad_shard(const nst_recipe *r, uint64_t i, const char **path, const char **why);

#endif
