/*
 * fuzz_options.c — option parsing (nostall_config_set / _get and the typed
 * setters) on hostile text.
 *
 * The input is a sequence of records, each a name and a value separated by
 * '\n' ("name\nvalue\n"...; the last value runs to the end). A name of one
 * byte picks option (byte % count), so most records reach a real parser;
 * other names go through nostall_option_find as they are. A record whose
 * name starts with '!' sets a DOUBLE or UINT option from the 8 raw bytes of
 * its value through the typed setter instead.
 *
 * Properties checked (abort() on violation, so libFuzzer keeps the input):
 *   - set either succeeds, or fails with E_OPTION (or E_INVALID), a message
 *     naming the option, and the configuration unchanged (every option's
 *     text equal before and after);
 *   - after a successful set, get(name) gives a text that sets again to the
 *     same value: get(set(get(x))) == get(x), in a fresh configuration too,
 *     and the typed value (uint or double bits) is the same;
 *   - get into buffers of every size from 1 to the text's length fails with
 *     E_INVALID and never writes past the buffer (ASan);
 *   - no crash, leak or undefined behaviour anywhere (ASan, UBSan).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nostall.h"

/* The longest text an option can hold: a path option takes up to
 * NOSTALL_PATH_MAX - 1 bytes (512 here made the harness, not nostall, fail
 * on a 600-byte image_root that sets and gets back correctly). */
#define TEXT_MAX (NOSTALL_PATH_MAX + 64)

static void die(const char *what, const char *name, const char *a, const char *b)
{
    fprintf(stderr, "fuzz_options: %s: option '%s': '%s' vs '%s' (%s)\n", what, name, a ? a : "",
            b ? b : "", nostall_last_error());
    abort();
}

/* Every option's current text, NUL-separated, into out. */
static void snapshot(const nostall_config *cfg, char out[][TEXT_MAX])
{
    for (int i = 0; i < nostall_option_count(); i++) {
        nostall_option_info oi;
        nostall_option_info_get(i, &oi);
        if (nostall_config_get(cfg, oi.name, out[i], TEXT_MAX) < 0)
            die("get failed", oi.name, NULL, NULL);
    }
}

/* The typed value of option id as 8 bytes (uint, or double bits). */
static int typed(const nostall_config *cfg, int id, uint64_t *out)
{
    nostall_option_info oi;
    nostall_option_info_get(id, &oi);
    if (oi.type == NOSTALL_TYPE_DOUBLE) {
        double d;
        if (nostall_config_get_double(cfg, (nostall_option)id, &d) < 0) return 0;
        memcpy(out, &d, sizeof d);
        return 1;
    }
    if (oi.type == NOSTALL_TYPE_DOUBLE3 || oi.type == NOSTALL_TYPE_STRING) return 0;
    return nostall_config_get_uint(cfg, (nostall_option)id, out) == 0;
}

static void check_set(nostall_config *cfg, const char *name, const char *value)
{
    static char before[NOSTALL_OPT_COUNT_][TEXT_MAX], after[NOSTALL_OPT_COUNT_][TEXT_MAX];
    snapshot(cfg, before);
    int id = nostall_option_find(name);
    int rc = nostall_config_set(cfg, name, value);
    if (rc < 0) {
        if (rc != NOSTALL_E_OPTION && rc != NOSTALL_E_INVALID)
            die("unexpected status", name, value, NULL);
        const char *msg = nostall_last_error();
        if (!msg[0]) die("error without a message", name, value, NULL);
        nostall_option_info oi;
        if (id >= 0 && nostall_option_info_get(id, &oi) == 0 && !strstr(msg, oi.name))
            die("message does not name the option", name, value, msg);
        snapshot(cfg, after);
        for (int i = 0; i < nostall_option_count(); i++)
            if (strcmp(before[i], after[i]) != 0)
                die("failed set changed the config", name, before[i], after[i]);
        return;
    }
    if (id < 0) die("set succeeded for an unknown option", name, value, NULL);
    /* Round trip: the text of the value sets to the same value. */
    char t1[TEXT_MAX], t2[TEXT_MAX], t3[TEXT_MAX];
    if (nostall_config_get(cfg, name, t1, sizeof t1) < 0) die("get after set", name, value, NULL);
    uint64_t v1 = 0, v2 = 0;
    int has_typed = typed(cfg, id, &v1);
    if (nostall_config_set(cfg, name, t1) < 0) die("get text does not set", name, value, t1);
    if (nostall_config_get(cfg, name, t2, sizeof t2) < 0) die("get", name, value, NULL);
    if (strcmp(t1, t2) != 0) die("get(set(get(x))) != get(x)", name, t1, t2);
    if (has_typed && (!typed(cfg, id, &v2) || v1 != v2)) die("typed value changed", name, t1, t2);
    nostall_config *fresh = NULL;
    if (nostall_config_create(&fresh) < 0) abort();
    if (nostall_config_set(fresh, name, t1) < 0)
        die("get text does not set (fresh)", name, t1, NULL);
    if (nostall_config_get(fresh, name, t3, sizeof t3) < 0 || strcmp(t1, t3) != 0)
        die("fresh config differs", name, t1, t3);
    nostall_config_free(fresh);
    /* Every buffer too small is refused, none is overrun (ASan). */
    size_t n = strlen(t1);
    for (size_t cap = 1; cap <= n; cap++) {
        char *small = malloc(cap);
        if (!small) abort();
        if (nostall_config_get(cfg, name, small, cap) != NOSTALL_E_INVALID)
            die("short buffer accepted", name, t1, NULL);
        free(small);
    }
}

static void check_typed(nostall_config *cfg, const uint8_t *raw, size_t len, uint8_t pick)
{
    /* The DOUBLE and UINT-like options, in table order. */
    int ids[NOSTALL_OPT_COUNT_], n = 0;
    for (int i = 0; i < nostall_option_count(); i++) {
        nostall_option_info oi;
        nostall_option_info_get(i, &oi);
        if (oi.type != NOSTALL_TYPE_DOUBLE3 && oi.type != NOSTALL_TYPE_STRING) ids[n++] = i;
    }
    int id = ids[pick % n];
    nostall_option_info oi;
    nostall_option_info_get(id, &oi);
    uint64_t bits = 0;
    memcpy(&bits, raw, len < 8 ? len : 8);
    char t1[TEXT_MAX], t2[TEXT_MAX];
    nostall_config_get(cfg, oi.name, t1, sizeof t1);
    int rc;
    if (oi.type == NOSTALL_TYPE_DOUBLE) {
        double d;
        memcpy(&d, &bits, sizeof d);
        rc = nostall_config_set_double(cfg, (nostall_option)id, d);
        double back;
        if (rc == 0 && (nostall_config_get_double(cfg, (nostall_option)id, &back) < 0 ||
                        memcmp(&back, &d, sizeof d) != 0))
            die("set_double did not keep the value", oi.name, NULL, NULL);
    } else {
        rc = nostall_config_set_uint(cfg, (nostall_option)id, bits);
        uint64_t back;
        if (rc == 0 && (nostall_config_get_uint(cfg, (nostall_option)id, &back) < 0 || back != bits))
            die("set_uint did not keep the value", oi.name, NULL, NULL);
    }
    nostall_config_get(cfg, oi.name, t2, sizeof t2);
    if (rc < 0 && strcmp(t1, t2) != 0) die("failed typed set changed the value", oi.name, t1, t2);
    if (rc == 0) check_set(cfg, oi.name, t2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096) return 0;
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    nostall_config *cfg = NULL;
    if (nostall_config_create(&cfg) < 0) abort();
    size_t pos = 0;
    for (int rec = 0; rec < 16 && pos < size; rec++) {
        char *name = text + pos;
        char *nl = memchr(name, '\n', size - pos);
        if (!nl) break;
        *nl = '\0';
        char *value = nl + 1;
        char *end = memchr(value, '\n', size - (size_t)(value - text));
        size_t vlen = end ? (size_t)(end - value) : size - (size_t)(value - text);
        if (end) *end = '\0';
        pos = (size_t)(value - text) + vlen + 1;
        if (name[0] == '!') {
            check_typed(cfg, (const uint8_t *)value, vlen, (uint8_t)name[1]);
            continue;
        }
        char picked[64];
        if (nl - name == 1) {
            nostall_option_info oi;
            nostall_option_info_get((unsigned char)name[0] % nostall_option_count(), &oi);
            snprintf(picked, sizeof picked, "%s", oi.name);
            name = picked;
        }
        check_set(cfg, name, value);
    }
    nostall_config_free(cfg);
    free(text);
    return 0;
}
