/*
 * tokens.c — the task=tokens item recipe (being built: see docs/design.md, "Item
 * recipes"). Until it lands, creating a loader with task=tokens says so.
 */
#include "common/error.h"
#include "recipe/recipe.h"

int nst_tokens_create(nst_recipe **out, const nostall_config *cfg, const char *source)
{
    (void)cfg;
    *out = NULL;
    return nst_error(NOSTALL_E_UNSUPPORTED, "task=tokens: %s: not built into this nostall yet", source);
}
