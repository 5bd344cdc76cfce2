/*
 * mix.c — weighted mixing: the specification's parser, the exact counts of
 * a mixed epoch and the O(1) lookups from a slot to a source's item (see
 * mix.h for the design).
 * Room: order/ (which item comes when).
 *
 * Threads: nst_mix_parse and nst_mix_init set the calling thread's error
 * message; the lookups are pure.
 */
#include "order/mix.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/rng.h"
#include "order/permutation.h"

/* Purpose of the per-source seeds ("mix" in ASCII). */
#define NST_MIX_PURPOSE 0x6d6978ULL
/* Slots of a mixed epoch at most (products with epochs stay far from 2^64
 * and doubles count them exactly). */
#define NST_MIX_LEN_MAX (1ULL << 48)

uint64_t nst_mix_seed(uint64_t seed, uint32_t s) { return nst_hash4(seed, NST_MIX_PURPOSE, s, 0); }

/* One "SOURCE:WEIGHT" entry, [a, b) of buf: cut in place at its last ':'. */
static int parse_entry(char *a, char *b, const char **path, double *weight)
{
    char *colon = NULL;
    for (char *p = a; p < b; p++)
        if (*p == ':') colon = p;
    *b = '\0';
    while (*a == ' ' || *a == '\t') a++;
    if (!colon || colon < a)
        return nst_error(NOSTALL_E_OPTION, "mix: entry '%s' has no weight (SOURCE:WEIGHT)", a);
    char *end;
    double w = strtod(colon + 1, &end);
    while (*end == ' ' || *end == '\t' || *end == '\r') end++;
    if (end == colon + 1 || *end || !isfinite(w) || !(w > 0))
        return nst_error(NOSTALL_E_OPTION,
                         "mix: entry '%s': the weight after the last ':' must be a number > 0", a);
    *colon = '\0';
    if (!*a) return nst_error(NOSTALL_E_OPTION, "mix: an entry has a weight but no source");
    *path = a;
    *weight = w;
    return 0;
}

int nst_mix_parse(const char *spec, char *buf, size_t bufn, const char **paths, double *weights,
                  uint32_t *n)
{
    size_t len = strlen(spec);
    *n = 0;
    if (len >= bufn) return nst_error(NOSTALL_E_OPTION, "mix: the specification is too long");
    memcpy(buf, spec, len + 1);
    char sep = strchr(buf, '\n') ? '\n' : ',';
    char *a = buf, *end = buf + len;
    while (a <= end) {
        char *b = memchr(a, sep, (size_t)(end - a));
        if (!b) b = end;
        char *t = a;
        while (t < b && (*t == ' ' || *t == '\t' || *t == '\r')) t++;
        if (t < b) { /* not an empty entry */
            if (*n == NST_MIX_MAX)
                return nst_error(NOSTALL_E_OPTION, "mix: more than %d sources", NST_MIX_MAX);
            int rc = parse_entry(a, b, &paths[*n], &weights[*n]);
            if (rc < 0) return rc;
            (*n)++;
        }
        a = b + 1;
    }
    if (*n == 0) return nst_error(NOSTALL_E_OPTION, "mix: no SOURCE:WEIGHT entry");
    return 0;
}

int nst_mix_init(nst_mix *m, uint32_t n, const uint64_t *items, const double *weights,
                 const char *const *names, uint64_t len, uint64_t seed, int shuffle)
{
    double sum = 0;
    memset(m, 0, sizeof *m);
    if (n == 0 || n > NST_MIX_MAX)
        return nst_error(NOSTALL_E_OPTION, "mix: %u sources (1 to %d)", n, NST_MIX_MAX);
    for (uint32_t s = 0; s < n; s++) {
        if (!(weights[s] > 0) || !isfinite(weights[s]))
            return nst_error(NOSTALL_E_OPTION, "mix: %s: weight %g must be > 0", names[s],
                             weights[s]);
        if (items[s] == 0 || items[s] > NST_MIX_LEN_MAX)
            return nst_error(NOSTALL_E_OPTION, "mix: %s: %llu items", names[s],
                             (unsigned long long)items[s]);
        sum += weights[s];
        m->first[s + 1] = m->first[s] + items[s];
        m->items[s] = items[s];
        m->seeds[s] = nst_mix_seed(seed, s);
    }
    if (len == 0) len = m->first[n];
    if (len > NST_MIX_LEN_MAX)
        return nst_error(NOSTALL_E_OPTION, "mix: %llu slots per mixed epoch exceed 2^48",
                         (unsigned long long)len);
    m->n = n;
    m->len = len;
    m->shuffle = shuffle != 0;
    /* Largest remainder: floors first, then one more slot to the largest
     * remainders (ties: the earlier source), so the counts sum to len. */
    double rem[NST_MIX_MAX];
    uint64_t given = 0;
    for (uint32_t s = 0; s < n; s++) {
        m->weight[s] = weights[s] / sum;
        double exact = m->weight[s] * (double)len;
        m->draws[s] = (uint64_t)floor(exact);
        if (m->draws[s] > len) m->draws[s] = len;
        rem[s] = exact - (double)m->draws[s];
        given += m->draws[s];
    }
    while (given < len) {
        uint32_t best = 0;
        for (uint32_t s = 1; s < n; s++)
            if (rem[s] > rem[best]) best = s;
        m->draws[best]++;
        rem[best] = -1.0;
        given++;
    }
    for (uint32_t s = 0; s < n; s++) {
        if (m->draws[s] == 0)
            return nst_error(NOSTALL_E_OPTION,
                             "mix: %s gets no item of a mixed epoch of %llu (weight %g of %g): "
                             "raise its weight or mix_epoch_items",
                             names[s], (unsigned long long)len, weights[s], sum);
        m->slot[s + 1] = m->slot[s] + m->draws[s];
    }
    return 0;
}

uint64_t nst_mix_item(const nst_mix *m, uint64_t epoch, uint64_t q, uint32_t *source,
                      uint64_t *src_epoch)
{
    uint32_t lo = 0, hi = m->n - 1; /* the s with slot[s] <= q < slot[s + 1] */
    q %= m->len;
    while (lo < hi) {
        uint32_t mid = (lo + hi + 1) / 2;
        if (m->slot[mid] <= q)
            lo = mid;
        else
            hi = mid - 1;
    }
    uint32_t s = lo;
    unsigned __int128 k = (unsigned __int128)epoch * m->draws[s] + (q - m->slot[s]);
    uint64_t n = m->items[s], e = (uint64_t)(k / n), pos = (uint64_t)(k % n);
    if (source) *source = s;
    if (src_epoch) *src_epoch = e;
    return m->first[s] + (m->shuffle ? nst_permute(n, m->seeds[s], e, pos) : pos);
}

uint32_t nst_mix_source_of(const nst_mix *m, uint64_t item, uint64_t *local)
{
    uint32_t lo = 0, hi = m->n - 1;
    while (lo < hi) {
        uint32_t mid = (lo + hi + 1) / 2;
        if (m->first[mid] <= item)
            lo = mid;
        else
            hi = mid - 1;
    }
    if (local) *local = item - m->first[lo];
    return lo;
}

uint64_t nst_mix_draws_before(const nst_mix *m, uint32_t s, uint64_t epoch)
{
    unsigned __int128 k = (unsigned __int128)epoch * m->draws[s];
    return k > UINT64_MAX ? UINT64_MAX : (uint64_t)k;
}
