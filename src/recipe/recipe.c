/*
 * recipe.c — choosing a recipe from the configuration, and what every
 * recipe shares: element sizes and field sizes (see recipe.h).
 */
#include <string.h>

#include "common/error.h"
#include "recipe/recipe.h"

int nst_classify_create(nst_recipe **out, const nostall_config *cfg);

int nst_recipe_create(nst_recipe **out, const nostall_config *cfg)
{
    return nst_classify_create(out, cfg);
}

void nst_recipe_free(nst_recipe *r)
{
    if (r) r->ops->free(r);
}

size_t nst_dtype_size(nostall_dtype dtype)
{
    switch (dtype) {
    case NOSTALL_DTYPE_UINT8: return 1;
    case NOSTALL_DTYPE_UINT16:
    case NOSTALL_DTYPE_FLOAT16:
    case NOSTALL_DTYPE_BFLOAT16: return 2;
    case NOSTALL_DTYPE_FLOAT32:
    case NOSTALL_DTYPE_INT32:
    case NOSTALL_DTYPE_UINT32: return 4;
    case NOSTALL_DTYPE_INT64: return 8;
    }
    return 0;
}

int nst_field_finish(nst_field_decl *d)
{
    size_t n = nst_dtype_size(d->dtype);
    if (!n || d->ndim > NOSTALL_FIELD_DIMS)
        return nst_error(NOSTALL_E_INVALID, "recipe: field '%s': bad dtype or rank", d->name);
    for (uint32_t i = 0; i < d->ndim; i++)
        if (nst_mul_overflow(n, (size_t)d->shape[i], &n) || n > ((size_t)1 << 40))
            return nst_error(NOSTALL_E_INVALID, "recipe: field '%s' is too large", d->name);
    d->item_bytes = n;
    return 0;
}
