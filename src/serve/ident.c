/*
 * ident.c — the identity a prep server and its client compare at the
 * handshake (proto.h): every fact an item's bytes depend on, as named
 * text, so that a refusal can name what differs. An item's bytes are a
 * function of (seed, the item's epoch, its dataset index) and of the
 * recipe's options, so the identity holds the dataset (item count, the
 * recipe's fingerprint of paths, labels and annotations), the fields'
 * layout, the seed, the augmentation options and every recipe option
 * (task and after) except those that only say where or how the loader
 * runs (prep servers, the bad-item budget, streaming, the GPU's
 * ordinal, autotune and its budgets). The sampler's
 * options (shuffle, rank, world_size, batch_size, drop_last) stay the
 * client's: it maps positions to items itself.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/proto.h"

/* Options before `task` that change an item's bytes. */
static const char *const early[] = {"seed",       "mode",          "crop",      "resize",
                                    "scale_min",  "scale_max",     "ratio_min", "ratio_max",
                                    "flip_prob",  "output",        "mean",      "std",
                                    "max_pixels", "max_file_bytes"};

/* Options from `task` on that do not: where and how the loader runs. */
static int runtime_only(int id)
{
    return id == NOSTALL_OPT_MAX_BAD_FRACTION || id == NOSTALL_OPT_SHARD_MODE ||
           id == NOSTALL_OPT_SHUFFLE_BUFFER || id == NOSTALL_OPT_PREP_SERVERS ||
           id == NOSTALL_OPT_PREP_SECRET_FILE || id == NOSTALL_OPT_PREP_TIMEOUT_MS ||
           id == NOSTALL_OPT_PREP_INFLIGHT || id == NOSTALL_OPT_GPU_ID ||
           id == NOSTALL_OPT_AUTOTUNE || id == NOSTALL_OPT_CPU_BUDGET ||
           id == NOSTALL_OPT_MEMORY_BUDGET;
}

typedef struct builder {
    nst_ident *id;
    size_t *off; /* each value's offset in store */
    size_t used, cap;
} builder;

static int add(builder *b, const char *name, const char *value)
{
    nst_ident *id = b->id;
    size_t vl = strlen(value);
    if (id->n >= NST_PROTO_IDENT_MAX || strlen(name) > NST_PROTO_NAME_MAX ||
        vl > NST_PROTO_VALUE_MAX)
        return -1;
    if (b->used + vl + 1 > b->cap) {
        size_t cap = (b->cap ? 2 * b->cap : 4096) + vl + 1;
        char *s = realloc(id->store, cap);
        if (!s) return -1;
        id->store = s;
        b->cap = cap;
    }
    snprintf(id->e[id->n].name, sizeof id->e[id->n].name, "%s", name);
    memcpy(id->store + b->used, value, vl + 1);
    b->off[id->n++] = b->used;
    b->used += vl + 1;
    return 0;
}

int nst_proto_identity(const nostall_config *cfg, const nst_recipe *r, nst_ident *out)
{
    size_t *offs = calloc(NST_PROTO_IDENT_MAX, sizeof *offs);
    char val[NOSTALL_PATH_MAX], layout[NST_FIELDS_MAX * 64];
    memset(out, 0, sizeof *out);
    if (!offs) return -1;
    builder b = {.id = out, .off = offs};
    int rc = 0;
    snprintf(val, sizeof val, "%llu", (unsigned long long)r->items);
    rc |= add(&b, "dataset items", val);
    snprintf(val, sizeof val, "%016llx", (unsigned long long)r->fingerprint);
    rc |= add(&b, "dataset fingerprint (paths, labels, annotations)", val);
    size_t lo = 0;
    layout[0] = '\0';
    for (uint32_t f = 0; f < r->nfields && lo < sizeof layout; f++)
        lo += (size_t)snprintf(layout + lo, sizeof layout - lo, "%s%s:%d:%zu", f ? "," : "",
                               r->fields[f].name, (int)r->fields[f].dtype, r->fields[f].item_bytes);
    for (size_t i = 0; i < sizeof early / sizeof *early; i++) {
        if (nostall_config_get(cfg, early[i], val, sizeof val) < 0) val[0] = '\0';
        rc |= add(&b, early[i], val);
    }
    for (int id = NOSTALL_OPT_TASK; id < NOSTALL_OPT_COUNT_; id++) {
        if (runtime_only(id)) continue;
        nostall_option_info info;
        nostall_option_info_get(id, &info);
        if (nostall_config_get(cfg, info.name, val, sizeof val) < 0) val[0] = '\0';
        rc |= add(&b, info.name, val);
    }
    rc |= add(&b, "item fields (name:dtype:bytes)", layout); /* last: options name the cause */
    for (uint32_t i = 0; i < out->n; i++) out->e[i].value = out->store + offs[i];
    free(offs);
    if (rc) nst_ident_free(out);
    return rc ? -1 : 0;
}

void nst_ident_free(nst_ident *id)
{
    free(id->store);
    id->store = NULL;
    id->n = 0;
}

/* A value as a refusal shows it: at most 80 bytes. */
static const char *shown(const char *v, char *buf, size_t n)
{
    if (strlen(v) < 80) return v;
    snprintf(buf, n, "%.60s...(%zu bytes)", v, strlen(v));
    return buf;
}

int nst_ident_compare(const nst_ident *s, const nst_ident *c, char *why, size_t whyn)
{
    char a[96], b[96];
    for (uint32_t i = 0; i < s->n; i++) {
        const nst_ident_entry *ce = NULL;
        for (uint32_t j = 0; j < c->n && !ce; j++)
            if (strcmp(c->e[j].name, s->e[i].name) == 0) ce = &c->e[j];
        if (!ce) {
            snprintf(why, whyn, "'%s' is unknown to the client (another nostall version?)",
                     s->e[i].name);
            return 1;
        }
        if (strcmp(ce->value, s->e[i].value) != 0) {
            snprintf(why, whyn, "%s differs: server '%s', client '%s'", s->e[i].name,
                     shown(s->e[i].value, a, sizeof a), shown(ce->value, b, sizeof b));
            return 1;
        }
    }
    for (uint32_t j = 0; j < c->n; j++) {
        int found = 0;
        for (uint32_t i = 0; i < s->n && !found; i++)
            found = strcmp(c->e[j].name, s->e[i].name) == 0;
        if (!found) {
            snprintf(why, whyn, "'%s' is unknown to the server (another nostall version?)",
                     c->e[j].name);
            return 1;
        }
    }
    return 0;
}
