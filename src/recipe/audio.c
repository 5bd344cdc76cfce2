/*
 * audio.c — the task=audio item recipe (being built: see docs/design.md,
 * "Item recipes"). Until it lands, creating a loader with task=audio says so.
 */
#include "common/error.h"
#include "recipe/recipe.h"

int nst_audio_create(nst_recipe **out, const nostall_config *cfg, const char *source)
{
    (void)cfg;
    *out = NULL;
    return nst_error(NOSTALL_E_UNSUPPORTED, "task=audio: %s: not built into this nostall yet", source);
}
