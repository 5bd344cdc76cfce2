/*
 * tar.c — tar headers, the push scanner, member names, the shard index
 * file and the ustar writer (see tar.h for the formats and the rules).
 * Room: dataset/ (what the items are).
 *
 * Design. The scanner is a state machine over the archive's bytes with no
 * I/O: HEADER collects a 512-byte block (which may arrive in pieces) and
 * parses it; DATA hands out the member's bytes (EMIT), keeps those of a
 * long name or pax header (COLLECT, at most NST_TAR_EXT_MAX bytes) or
 * drops them (DISCARD); PAD drops the padding; RESYNC, entered at a bad
 * header, tests each following block until one is a valid ustar header,
 * which ends the damaged region; END swallows the rest. Everything it
 * keeps lives in the struct (no allocation), so a hostile archive costs
 * at most the struct's size.
 *
 * The index file's varints are decoded with bounds checks on every byte,
 * and every offset is checked against the shard's size before a record is
 * returned, so a reader never hands out a range outside the shard.
 *
 * Threads: none of its own; each object is used by one thread at a time.
 */
#include "dataset/tar.h"

#include <stdlib.h>
#include <string.h>

#include "nostall.h"

#define LABEL_LIMIT (1ULL << 62)

const char *nst_tar_damage_name(int code)
{
    switch (code) {
    case NST_TAR_DMG_HEADER: return "bad header";
    case NST_TAR_DMG_TRUNCATED: return "truncated";
    case NST_TAR_DMG_EXTENDED: return "bad extended header";
    case NST_TAR_DMG_DUPLICATE:
        return "duplicate member (a second member of this key and extension)";
    case NST_TAR_DMG_MEMBERS: return "more than 64 members in one sample";
    case NST_TAR_DMG_SPARSE: return "GNU sparse member (not supported)";
    case NST_TAR_DMG_LONGNAME: return "name too long (key over 4096 or extension over 255 bytes)";
    }
    return "damaged";
}

/* ---- one header ------------------------------------------------------ */

static int is_space(uint8_t c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* A numeric field: base-256 (first byte 0x80) or octal text up to the
 * first NUL, surrounded by optional whitespace (empty: 0), as Python's
 * tarfile reads it. -1 when malformed or >= 2^62. */
static int parse_num(const uint8_t *f, size_t n, uint64_t *out)
{
    if (f[0] == 0x80) {
        uint64_t v = 0;
        for (size_t i = 1; i < n; i++) {
            if (v >> 54) return -1;
            v = v << 8 | f[i];
        }
        if (v >= LABEL_LIMIT) return -1;
        *out = v;
        return 0;
    }
    if (f[0] & 0x80) return -1; /* negative base-256, or garbage */
    size_t len = 0;
    while (len < n && f[len]) len++;
    size_t a = 0, b = len;
    while (a < b && is_space(f[a])) a++;
    while (b > a && is_space(f[b - 1])) b--;
    uint64_t v = 0;
    for (size_t i = a; i < b; i++) {
        if (f[i] < '0' || f[i] > '7') return -1;
        v = v << 3 | (uint64_t)(f[i] - '0');
    }
    if (b - a > 21 || v >= LABEL_LIMIT) return -1;
    *out = v;
    return 0;
}

int nst_tar_header(const uint8_t blk[NST_TAR_BLOCK], int strict, nst_tar_hdr *h)
{
    uint64_t usum = 0;
    int64_t ssum = 0;
    int zero = 1;
    for (int i = 0; i < NST_TAR_BLOCK; i++) {
        uint8_t c = (i >= 148 && i < 156) ? ' ' : blk[i];
        usum += c;
        ssum += (int8_t)c;
        if (blk[i]) zero = 0;
    }
    if (zero) return 1;
    uint64_t want, size;
    if (parse_num(blk + 148, 8, &want) < 0 || (want != usum && (int64_t)want != ssum)) return -1;
    if (parse_num(blk + 124, 12, &size) < 0) return -1;
    const int posix = memcmp(blk + 257, "ustar", 6) == 0; /* "ustar\0" */
    if (strict && !posix && memcmp(blk + 257, "ustar ", 6) != 0) return -1;
    size_t nlen = strnlen((const char *)blk, 100),
           plen = posix ? strnlen((const char *)blk + 345, 155) : 0;
    char *d = h->name;
    if (plen) {
        memcpy(d, blk + 345, plen);
        d[plen] = '/';
        d += plen + 1;
    }
    memcpy(d, blk, nlen);
    d[nlen] = '\0';
    h->typeflag = (char)blk[156];
    h->size = size;
    h->sparse_ext = 0;
    switch (h->typeflag) {
    case '0':
    case '7': h->type = NST_TAR_T_FILE; break;
    case '\0': h->type = (nlen && blk[nlen - 1] == '/') ? NST_TAR_T_NODATA : NST_TAR_T_FILE; break;
    case 'L': h->type = NST_TAR_T_LONGNAME; break;
    case 'x':
    case 'X': h->type = NST_TAR_T_PAX; break;
    case '1':
    case '2':
    case '3':
    case '4':
    case '5':
    case '6': h->type = NST_TAR_T_NODATA; break;
    case 'S':
        h->type = NST_TAR_T_SPARSE;
        h->sparse_ext = blk[482] != 0;
        break;
    default: h->type = NST_TAR_T_SKIP;
    }
    if (h->type == NST_TAR_T_NODATA) h->size = 0;
    return 0;
}

/* ---- the push scanner -------------------------------------------------- */

enum { ST_HEADER, ST_DATA, ST_PAD, ST_RESYNC, ST_END, ST_SPX };
enum { MODE_EMIT, MODE_COLLECT, MODE_DISCARD };
/* What the current entry is (for nst_tar_finish). */
enum { EK_OTHER, EK_FILE, EK_POISONED };

static uint64_t pad512(uint64_t size)
{
    return (NST_TAR_BLOCK - size % NST_TAR_BLOCK) % NST_TAR_BLOCK;
}

void nst_tar_scan_init(nst_tar_scan *s)
{
    s->pos = 0;
    s->state = ST_HEADER;
    s->mode = MODE_DISCARD;
    s->ekind = 0;
    s->have = 0;
    s->left = s->pad = 0;
    s->entry = s->data_off = s->data_size = 0;
    s->bad_at = s->poison_at = 0;
    s->poison = s->ext_type = s->has_xsize = s->has_xname = 0;
    s->sparse = s->sparse_named = 0;
    s->xsize = 0;
    s->ext_len = s->name_len = 0;
    s->name[0] = '\0';
}

static void set_poison(nst_tar_scan *s)
{
    if (!s->poison) s->poison_at = s->entry;
    s->poison = 1;
}

/* The data of a long name or pax header is complete. */
static void end_ext(nst_tar_scan *s)
{
    const char *e = (const char *)s->ext;
    size_t n = s->ext_len;
    if (s->ext_type == NST_TAR_T_LONGNAME) {
        size_t len = strnlen(e, n);
        if (len == 0) {
            set_poison(s);
            return;
        }
        memcpy(s->name, e, len);
        s->name[len] = '\0';
        s->name_len = len;
        s->has_xname = 1;
        return;
    }
    /* pax records: "LEN key=value\n", LEN counting the whole record */
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        uint64_t len = 0;
        while (j < n && e[j] >= '0' && e[j] <= '9' && j - i < 8)
            len = len * 10 + (uint64_t)(e[j++] - '0');
        if (j == i || j >= n || e[j] != ' ' || len <= j - i + 1 || len > n - i ||
            e[i + len - 1] != '\n') {
            if (j == i && e[i] == '\0') break; /* NUL padding after the records */
            set_poison(s);
            return;
        }
        const char *kv = e + j + 1, *rec_end = e + i + len - 1;
        const char *eq = memchr(kv, '=', (size_t)(rec_end - kv));
        if (!eq) {
            set_poison(s);
            return;
        }
        size_t klen = (size_t)(eq - kv), vlen = (size_t)(rec_end - eq - 1);
        const char *v = eq + 1;
        const int sparse_name = klen == 15 && memcmp(kv, "GNU.sparse.name", 15) == 0;
        if (klen > 11 && memcmp(kv, "GNU.sparse.", 11) == 0) s->sparse = 1;
        if ((klen == 4 && memcmp(kv, "path", 4) == 0 && !s->sparse_named) || sparse_name) {
            if (vlen == 0 || memchr(v, '\0', vlen)) {
                set_poison(s);
                return;
            }
            memcpy(s->name, v, vlen); /* vlen < n <= NST_TAR_EXT_MAX */
            s->name[vlen] = '\0';
            s->name_len = vlen;
            s->has_xname = 1;
            s->sparse_named |= sparse_name; /* the real name, not GNUSparseFile.N/... */
        } else if (klen == 4 && memcmp(kv, "size", 4) == 0) {
            uint64_t sz = 0;
            size_t k = 0;
            for (; k < vlen && k < 19 && v[k] >= '0' && v[k] <= '9'; k++)
                sz = sz * 10 + (uint64_t)(v[k] - '0');
            if (k == 0 || k != vlen || sz >= LABEL_LIMIT) {
                set_poison(s);
                return;
            }
            s->xsize = sz;
            s->has_xsize = 1;
        }
        i += len;
    }
}

/* Enter DATA (or PAD, or HEADER) for an entry of `size` data bytes. */
static void start_data(nst_tar_scan *s, uint64_t size, int mode)
{
    s->mode = mode;
    s->left = size;
    s->pad = pad512(size);
    s->state = size ? ST_DATA : ST_HEADER;
}

/* A sparse member whose data starts at s->pos: skip it, report it. */
static int sparse_event(nst_tar_scan *s, nst_tar_ev *ev)
{
    s->data_off = s->pos;
    start_data(s, s->data_size, MODE_DISCARD);
    *ev = (nst_tar_ev){.kind = NST_TAR_EV_DAMAGE,
                       .name = s->name,
                       .offset = s->entry,
                       .size = s->data_off + s->data_size - s->entry,
                       .code = NST_TAR_DMG_SPARSE};
    return 1;
}

/* The header in s->blk, at s->pos - 512. 1 with an event, 0 without. */
static int header(nst_tar_scan *s, nst_tar_ev *ev)
{
    nst_tar_hdr h;
    const uint64_t at = s->pos - NST_TAR_BLOCK;
    int r = nst_tar_header(s->blk, 0, &h);
    if (r == 1) {
        s->state = ST_END;
        *ev = (nst_tar_ev){.kind = NST_TAR_EV_END, .offset = at, .name = ""};
        return 1;
    }
    if (r < 0) {
        s->state = ST_RESYNC;
        s->bad_at = s->poison ? s->poison_at : at;
        s->poison = s->has_xname = s->has_xsize = s->sparse = s->sparse_named = 0;
        return 0;
    }
    s->entry = at;
    s->data_off = s->pos;
    s->ekind = EK_OTHER;
    if (h.type == NST_TAR_T_LONGNAME || h.type == NST_TAR_T_PAX) {
        s->ext_type = h.type;
        s->ext_len = 0;
        if (h.size >= NST_TAR_EXT_MAX || h.size == 0) {
            set_poison(s);
            start_data(s, h.size, MODE_DISCARD);
        } else {
            start_data(s, h.size, MODE_COLLECT);
        }
        return 0;
    }
    const uint64_t size = s->has_xsize ? s->xsize : h.size;
    if (h.type != NST_TAR_T_FILE && h.type != NST_TAR_T_SPARSE) {
        /* extended headers apply to the next entry only */
        s->poison = s->has_xname = s->has_xsize = s->sparse = s->sparse_named = 0;
        start_data(s, h.type == NST_TAR_T_SKIP ? size : 0, MODE_DISCARD);
        return 0;
    }
    if (!s->has_xname) {
        s->name_len = strlen(h.name);
        memcpy(s->name, h.name, s->name_len + 1);
    }
    const int sparse = s->sparse || h.type == NST_TAR_T_SPARSE;
    s->has_xname = s->has_xsize = s->sparse = s->sparse_named = 0;
    s->data_size = size;
    if (sparse && !s->poison) {
        s->ekind = EK_POISONED;
        if (h.type == NST_TAR_T_SPARSE && h.sparse_ext) { /* extension blocks first */
            s->state = ST_SPX;
            s->have = 0;
            return 0;
        }
        return sparse_event(s, ev);
    }
    if (s->poison) {
        s->poison = 0;
        s->ekind = EK_POISONED;
        start_data(s, size, MODE_DISCARD);
        *ev = (nst_tar_ev){.kind = NST_TAR_EV_DAMAGE,
                           .name = s->name,
                           .offset = s->poison_at,
                           .size = s->data_off + size - s->poison_at,
                           .code = NST_TAR_DMG_EXTENDED};
        return 1;
    }
    s->ekind = EK_FILE;
    start_data(s, size, MODE_EMIT);
    *ev =
        (nst_tar_ev){.kind = NST_TAR_EV_MEMBER, .name = s->name, .offset = s->data_off, .size = size};
    return 1;
}

/* Gather the next header-sized block from p[*k..n) into s->blk: 1 once a
 * whole block is there (s->have reset for the next), 0 while it is short. */
static int fill_block(nst_tar_scan *s, const uint8_t *p, size_t n, size_t *k)
{
    size_t take = NST_TAR_BLOCK - s->have;
    if (take > n - *k) take = n - *k;
    memcpy(s->blk + s->have, p + *k, take);
    s->have += (uint32_t)take;
    *k += take;
    s->pos += take;
    if (s->have < NST_TAR_BLOCK) return 0;
    s->have = 0;
    return 1;
}

int nst_tar_feed(nst_tar_scan *s, const uint8_t *p, size_t n, size_t *used, nst_tar_ev *ev)
{
    size_t k = 0;
    while (k < n || (s->state == ST_HEADER && s->have == NST_TAR_BLOCK)) {
        switch (s->state) {
        case ST_END:
            s->pos += n - k;
            k = n;
            break;
        case ST_SPX: { /* an old GNU sparse header's extension blocks */
            if (!fill_block(s, p, n, &k)) break;
            if (s->blk[504]) break; /* another extension block follows */
            sparse_event(s, ev);
            *used = k;
            return 1;
        }
        case ST_HEADER:
        case ST_RESYNC: {
            if (!fill_block(s, p, n, &k)) break;
            if (s->state == ST_RESYNC) {
                nst_tar_hdr h;
                if (nst_tar_header(s->blk, 1, &h) != 0) break;
                /* a valid header ends the damaged region; parse it next */
                const uint64_t at = s->pos - NST_TAR_BLOCK;
                s->state = ST_HEADER;
                s->have = NST_TAR_BLOCK;
                *used = k;
                *ev = (nst_tar_ev){.kind = NST_TAR_EV_DAMAGE,
                                   .name = "",
                                   .offset = s->bad_at,
                                   .size = at - s->bad_at,
                                   .code = NST_TAR_DMG_HEADER};
                return 1;
            }
            if (header(s, ev)) {
                *used = k;
                return 1;
            }
            break;
        }
        case ST_DATA: {
            uint64_t take = s->left < n - k ? s->left : n - k;
            if (s->mode == MODE_EMIT)
                *ev = (nst_tar_ev){.kind = NST_TAR_EV_DATA,
                                   .name = s->name,
                                   .data = p + k,
                                   .len = (size_t)take,
                                   .offset = s->pos};
            else if (s->mode == MODE_COLLECT)
                memcpy(s->ext + s->ext_len, p + k, (size_t)take), s->ext_len += (size_t)take;
            k += (size_t)take;
            s->pos += take;
            s->left -= take;
            if (s->left == 0) {
                s->state = s->pad ? ST_PAD : ST_HEADER;
                if (s->mode == MODE_COLLECT) end_ext(s);
            }
            if (s->mode == MODE_EMIT && take) {
                *used = k;
                return 1;
            }
            break;
        }
        case ST_PAD: {
            uint64_t take = s->pad < n - k ? s->pad : n - k;
            k += (size_t)take;
            s->pos += take;
            s->pad -= take;
            if (s->pad == 0) s->state = ST_HEADER;
            break;
        }
        }
    }
    *used = n;
    return 0;
}

void nst_tar_skip(nst_tar_scan *s)
{
    if (s->mode != MODE_EMIT || (s->state != ST_DATA && s->state != ST_PAD && s->state != ST_HEADER))
        return;
    s->pos = s->data_off + s->data_size + pad512(s->data_size);
    s->state = ST_HEADER;
    s->have = 0;
    s->left = s->pad = 0;
    s->mode = MODE_DISCARD;
}

int nst_tar_finish(nst_tar_scan *s, uint64_t end, nst_tar_ev *ev)
{
    const int state = s->state;
    s->state = ST_END;
    switch (state) {
    case ST_END:
    case ST_PAD: return 0;
    case ST_SPX: /* cut inside a sparse member's extension blocks */
        *ev = (nst_tar_ev){.kind = NST_TAR_EV_DAMAGE,
                           .name = s->name,
                           .offset = s->entry,
                           .size = end > s->entry ? end - s->entry : 0,
                           .code = NST_TAR_DMG_SPARSE};
        return 1;
    case ST_RESYNC:
        *ev = (nst_tar_ev){.kind = NST_TAR_EV_DAMAGE,
                           .name = "",
                           .offset = s->bad_at,
                           .size = end > s->bad_at ? end - s->bad_at : 0,
                           .code = NST_TAR_DMG_HEADER};
        return 1;
    case ST_HEADER:
        if (s->have == 0 && (s->pos <= end || s->data_off + s->data_size <= end))
            return 0;       /* (a skipped member whose padding alone is cut is whole) */
        if (s->have == 0) { /* a skipped member reaches past the end */
            *ev = (nst_tar_ev){.kind = NST_TAR_EV_DAMAGE,
                               .name = s->name,
                               .offset = s->data_off,
                               .size = s->data_size,
                               .code = NST_TAR_DMG_TRUNCATED};
            return 1;
        }
        *ev = (nst_tar_ev){.kind = NST_TAR_EV_DAMAGE,
                           .name = "",
                           .offset = s->pos - s->have,
                           .size = s->have,
                           .code = NST_TAR_DMG_TRUNCATED};
        return 1;
    default:                                   /* ST_DATA */
        if (s->ekind == EK_POISONED) return 0; /* reported when its header was read */
        if (s->ekind != EK_FILE)
            *ev = (nst_tar_ev){.kind = NST_TAR_EV_DAMAGE,
                               .name = "",
                               .offset = s->entry,
                               .size = end > s->entry ? end - s->entry : 0,
                               .code = NST_TAR_DMG_TRUNCATED};
        else
            *ev = (nst_tar_ev){.kind = NST_TAR_EV_DAMAGE,
                               .name = s->name,
                               .offset = s->data_off,
                               .size = s->data_size,
                               .code = NST_TAR_DMG_TRUNCATED};
        return 1;
    }
}

/* ---- names ------------------------------------------------------------- */

int nst_tar_split_name(const char *name, size_t len, size_t *key_len, const char **ext,
                       size_t *ext_len)
{
    const char *base = name;
    for (size_t i = len; i > 0; i--)
        if (name[i - 1] == '/') {
            base = name + i;
            break;
        }
    const size_t blen = (size_t)(name + len - base);
    if (blen == 0 || base[0] == '.') return 0;
    const char *dot = memchr(base, '.', blen);
    if (!dot) return 0;
    *key_len = (size_t)(dot - name);
    *ext = dot + 1;
    *ext_len = (size_t)(name + len - dot - 1);
    return 1;
}

static int eq_ci(const char *a, size_t n, const char *lit)
{
    size_t i = 0;
    for (; i < n && lit[i]; i++) {
        char c = a[i];
        if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
        if (c != lit[i]) return 0;
    }
    return i == n && !lit[i];
}

int nst_tar_ext_class(const char *ext, size_t len)
{
    if (eq_ci(ext, len, "jpg") || eq_ci(ext, len, "jpeg") || eq_ci(ext, len, "png"))
        return NST_EXT_IMAGE;
    if (eq_ci(ext, len, "cls")) return NST_EXT_CLS;
    if (eq_ci(ext, len, "json")) return NST_EXT_JSON;
    if (eq_ci(ext, len, "txt")) return NST_EXT_TXT;
    return NST_EXT_OTHER;
}

int nst_tar_parse_label(const uint8_t *t, size_t len, int64_t *label)
{
    size_t a = 0, b = len;
    while (a < b && is_space(t[a])) a++;
    while (b > a && is_space(t[b - 1])) b--;
    int neg = a < b && t[a] == '-';
    a += (size_t)neg;
    if (a == b) return 0;
    uint64_t v = 0;
    for (size_t i = a; i < b; i++) {
        if (t[i] < '0' || t[i] > '9') return 0;
        const uint64_t d = (uint64_t)(t[i] - '0');
        if (v > (LABEL_LIMIT - 1 - d) / 10) return 0;
        v = v * 10 + d;
    }
    *label = neg ? -(int64_t)v : (int64_t)v;
    return 1;
}

/* ---- the shard index file ---------------------------------------------- */

static const uint8_t g_magic[8] = {0x89, 'N', 'S', 'T', 'I', 'D', 'X', '\n'};

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void say(char *why, size_t n, const char *what)
{
    if (why && n) {
        size_t l = strlen(what);
        if (l >= n) l = n - 1;
        memcpy(why, what, l);
        why[l] = '\0';
    }
}

static int tidx_open(nst_tar_index_reader *r, const uint8_t *data, size_t len, char *why, size_t n,
                     int verify)
{
    memset(r, 0, sizeof *r);
    if (len < NST_TAR_INDEX_HEADER + 8) return say(why, n, "shorter than its header"), -1;
    if (memcmp(data, g_magic, 8) != 0)
        return say(why, n, "not a nostall shard index (bad magic)"), -1;
    r->version = get32(data + 8);
    r->flags = get32(data + 12);
    if (r->version != NST_TAR_INDEX_VERSION) return say(why, n, "unsupported version"), -1;
    r->tar_bytes = get64(data + 16);
    r->samples = get64(data + 24);
    r->members = get64(data + 32);
    const uint64_t body = get64(data + 40);
    if (body != len - NST_TAR_INDEX_HEADER - 8)
        return say(why, n, "size does not match its header"), -1;
    if (r->samples > body / 4 || r->members > body / 3 || r->members < r->samples ||
        r->tar_bytes >= (1ULL << 62))
        return say(why, n, "counts do not fit its size"), -1;
    r->ident.fingerprint = get64(data + 48);
    r->ident.mtime = get64(data + 56);
    r->ident.validator = get64(data + 64);
    uint64_t h = 0;
    if (verify) nostall_checksum_update(&h, data, len - 8);
    if (verify && h != get64(data + len - 8)) return say(why, n, "checksum mismatch"), -1;
    r->p = data + NST_TAR_INDEX_HEADER;
    r->end = data + len - 8;
    r->left = r->samples;
    r->members_left = r->members;
    return 0;
}

int nst_tar_index_open(nst_tar_index_reader *r, const uint8_t *data, size_t len, char *why, size_t n)
{
    return tidx_open(r, data, len, why, n, 1);
}

int nst_tar_index_open_checked(nst_tar_index_reader *r, const uint8_t *data, size_t len, char *why,
                               size_t n)
{
    return tidx_open(r, data, len, why, n, 0);
}

static int varint(const uint8_t **pp, const uint8_t *end, uint64_t *v)
{
    const uint8_t *p = *pp;
    if (p < end && *p < 0x80) { /* the common case: one byte */
        *v = *p;
        *pp = p + 1;
        return 0;
    }
    uint64_t x = 0;
    for (int i = 0; i < 10; i++) {
        if (p >= end) return -1;
        const uint8_t b = *p++;
        if (i == 9 && b > 1) return -1;
        x |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *pp = p;
            *v = x;
            return 0;
        }
    }
    return -1;
}

/* A range [cursor + gap, + size) within the shard; moves the cursor. */
static int take_range(nst_tar_index_reader *r, uint64_t gap, uint64_t size, uint64_t *off)
{
    if (gap > r->tar_bytes || r->cursor > r->tar_bytes - gap) return -1;
    const uint64_t o = r->cursor + gap;
    if (size > r->tar_bytes - o) return -1;
    *off = o;
    r->cursor = o + size;
    return 0;
}

int nst_tar_index_next(nst_tar_index_reader *r, nst_tar_index_rec *rec, char *why, size_t n)
{
    const uint8_t *p = r->p, *end = r->end;
    uint64_t klen, v, gap, size;
    if (p == end) {
        if (r->left || r->members_left)
            return say(why, n, "fewer records than its header counts"), -1;
        return 0;
    }
    if (varint(&p, end, &klen) < 0 || klen > NST_TAR_INDEX_MAX_KEY || klen > (uint64_t)(end - p))
        return say(why, n, "bad record"), -1;
    if (klen == 0) { /* a damaged region */
        uint64_t code, dlen;
        if (varint(&p, end, &gap) < 0 || varint(&p, end, &size) < 0 || varint(&p, end, &code) < 0 ||
            code < 1 || code > NST_TAR_DMG_MAX || varint(&p, end, &dlen) < 0 ||
            dlen > NST_TAR_INDEX_MAX_DNAME || dlen > (uint64_t)(end - p) ||
            memchr(p, '\0', (size_t)dlen) || take_range(r, gap, size, &rec->offset) < 0)
            return say(why, n, "bad damage record"), -1;
        rec->dname = (const char *)p;
        rec->dname_len = (uint32_t)dlen;
        p += dlen;
        rec->key = NULL;
        rec->key_len = rec->nmembers = 0;
        rec->size = size;
        rec->code = (int)code;
        r->p = p;
        return 1;
    }
    if (r->left == 0) return say(why, n, "more samples than its header counts"), -1;
    rec->key = (const char *)p;
    rec->key_len = (uint32_t)klen;
    if (memchr(p, '\0', (size_t)klen)) return say(why, n, "a key holds a NUL byte"), -1;
    p += klen;
    if (varint(&p, end, &v) < 0 || v < 1 || v > NST_TAR_INDEX_MAX_MEMBERS || v > r->members_left)
        return say(why, n, "bad member count"), -1;
    rec->nmembers = (uint32_t)v;
    for (uint32_t i = 0; i < rec->nmembers; i++) {
        nst_tar_index_member *m = &rec->m[i];
        uint64_t elen;
        if (varint(&p, end, &elen) < 0 || elen > NST_TAR_INDEX_MAX_EXT || elen > (uint64_t)(end - p))
            return say(why, n, "bad extension"), -1;
        m->ext = (const char *)p;
        m->ext_len = (uint32_t)elen;
        if (memchr(p, '\0', (size_t)elen) || memchr(p, '/', (size_t)elen))
            return say(why, n, "bad extension"), -1;
        p += elen;
        if (varint(&p, end, &gap) < 0 || varint(&p, end, &size) < 0 || gap < NST_TAR_BLOCK ||
            take_range(r, gap, size, &m->offset) < 0)
            return say(why, n, "a member outside the shard"), -1;
        m->size = size;
        m->has_label = 0;
        if (nst_tar_ext_class(m->ext, m->ext_len) == NST_EXT_CLS) {
            if (varint(&p, end, &v) < 0) return say(why, n, "bad label"), -1;
            if (v) {
                v -= 1;
                const int64_t l = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
                if (v >= 2 * LABEL_LIMIT) return say(why, n, "bad label"), -1;
                m->has_label = 1;
                m->label = l;
            }
        }
    }
    r->left--;
    r->members_left -= rec->nmembers;
    r->p = p;
    rec->offset = rec->m[0].offset;
    rec->size = 0;
    rec->code = 0;
    rec->dname = NULL;
    rec->dname_len = 0;
    return 1;
}

uint64_t nst_tar_index_fingerprint(uint64_t size, const uint8_t *head, size_t head_len,
                                   const uint8_t *tail, size_t tail_len)
{
    uint8_t sz[8];
    put64(sz, size);
    uint64_t h = 0;
    nostall_checksum_update(&h, sz, sizeof sz);
    nostall_checksum_update(&h, head, head_len);
    nostall_checksum_update(&h, tail, tail_len);
    return h ? h : 1;
}

void nst_tar_index_writer_init(nst_tar_index_writer *w, uint32_t flags)
{
    memset(w, 0, sizeof *w);
    w->flags = flags;
}

void nst_tar_index_writer_free(nst_tar_index_writer *w)
{
    free(w->buf);
    memset(w, 0, sizeof *w);
}

static int wgrow(nst_tar_index_writer *w, size_t more)
{
    if (w->failed) return -1;
    if (w->len == 0) more += NST_TAR_INDEX_HEADER;
    if (w->cap - w->len >= more) goto ok;
    size_t cap = w->cap ? w->cap : 4096;
    while (cap - w->len < more) {
        if (cap > ((size_t)1 << 60)) return w->failed = 1, -1;
        cap *= 2;
    }
    uint8_t *b = realloc(w->buf, cap);
    if (!b) return w->failed = 1, -1;
    w->buf = b;
    w->cap = cap;
ok:
    if (w->len == 0) {
        memset(w->buf, 0, NST_TAR_INDEX_HEADER);
        w->len = NST_TAR_INDEX_HEADER;
    }
    return 0;
}

static void put_varint(nst_tar_index_writer *w, uint64_t v)
{
    while (v >= 0x80) {
        w->buf[w->len++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    w->buf[w->len++] = (uint8_t)v;
}

int nst_tar_index_add(nst_tar_index_writer *w, const nst_tar_index_rec *rec)
{
    if (w->failed) return -1;
    if (!rec->key) {
        size_t dlen = rec->dname ? rec->dname_len : 0;
        if (dlen > NST_TAR_INDEX_MAX_DNAME) dlen = NST_TAR_INDEX_MAX_DNAME;
        if (dlen && memchr(rec->dname, '\0', dlen)) dlen = strnlen(rec->dname, dlen);
        if (rec->offset < w->cursor || rec->code < 1 || rec->code > NST_TAR_DMG_MAX ||
            wgrow(w, 50 + dlen) < 0)
            return w->failed = 1, -1;
        put_varint(w, 0);
        put_varint(w, rec->offset - w->cursor);
        put_varint(w, rec->size);
        put_varint(w, (uint64_t)rec->code);
        put_varint(w, dlen);
        if (dlen) memcpy(w->buf + w->len, rec->dname, dlen);
        w->len += dlen;
        w->cursor = rec->offset + rec->size;
        return 0;
    }
    if (rec->key_len == 0 || rec->key_len > NST_TAR_INDEX_MAX_KEY || rec->nmembers == 0 ||
        rec->nmembers > NST_TAR_INDEX_MAX_MEMBERS || memchr(rec->key, '\0', rec->key_len))
        return w->failed = 1, -1;
    size_t need = 20 + rec->key_len;
    for (uint32_t i = 0; i < rec->nmembers; i++) need += 40 + rec->m[i].ext_len;
    if (wgrow(w, need) < 0) return -1;
    const size_t start = w->len;
    const uint64_t cursor = w->cursor;
    put_varint(w, rec->key_len);
    memcpy(w->buf + w->len, rec->key, rec->key_len);
    w->len += rec->key_len;
    put_varint(w, rec->nmembers);
    for (uint32_t i = 0; i < rec->nmembers; i++) {
        const nst_tar_index_member *m = &rec->m[i];
        if (m->ext_len > NST_TAR_INDEX_MAX_EXT || m->offset < w->cursor + NST_TAR_BLOCK ||
            memchr(m->ext, '\0', m->ext_len) || memchr(m->ext, '/', m->ext_len) ||
            m->offset >= (1ULL << 62) || m->size >= (1ULL << 62)) {
            w->len = start, w->cursor = cursor;
            return w->failed = 1, -1;
        }
        put_varint(w, m->ext_len);
        memcpy(w->buf + w->len, m->ext, m->ext_len);
        w->len += m->ext_len;
        put_varint(w, m->offset - w->cursor);
        put_varint(w, m->size);
        w->cursor = m->offset + m->size;
        if (nst_tar_ext_class(m->ext, m->ext_len) == NST_EXT_CLS) {
            uint64_t z = 0;
            if (m->has_label && m->label > -(int64_t)LABEL_LIMIT && m->label < (int64_t)LABEL_LIMIT)
                z = (((uint64_t)m->label << 1) ^ (uint64_t)(m->label >> 63)) + 1;
            put_varint(w, z);
        }
    }
    w->samples++;
    w->members += rec->nmembers;
    return 0;
}

int nst_tar_index_finish(nst_tar_index_writer *w, uint64_t tar_bytes, size_t *len)
{
    if (w->failed || w->cursor > tar_bytes || wgrow(w, 8) < 0) return -1;
    uint8_t *h = w->buf;
    memcpy(h, g_magic, 8);
    put32(h + 8, NST_TAR_INDEX_VERSION);
    put32(h + 12, w->flags);
    put64(h + 16, tar_bytes);
    put64(h + 24, w->samples);
    put64(h + 32, w->members);
    put64(h + 40, w->len - NST_TAR_INDEX_HEADER);
    put64(h + 48, w->ident.fingerprint);
    put64(h + 56, w->ident.mtime);
    put64(h + 64, w->ident.validator);
    uint64_t sum = 0;
    nostall_checksum_update(&sum, w->buf, w->len);
    put64(w->buf + w->len, sum);
    w->len += 8;
    *len = w->len;
    return 0;
}

/* ---- writing shards ------------------------------------------------------ */

static void octal(uint8_t *f, size_t n, uint64_t v)
{
    /* n - 1 digits and a NUL */
    f[n - 1] = '\0';
    for (size_t i = n - 1; i > 0; i--) {
        f[i - 1] = (uint8_t)('0' + (v & 7));
        v >>= 3;
    }
}

static void finish_header(uint8_t *blk)
{
    memset(blk + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < NST_TAR_BLOCK; i++) sum += blk[i];
    octal(blk + 148, 7, sum); /* six digits and a NUL, then the space */
    blk[155] = ' ';
}

static void common_fields(uint8_t *blk, uint64_t size, uint64_t mtime, char type)
{
    octal(blk + 100, 8, 0444);
    octal(blk + 108, 8, 0);
    octal(blk + 116, 8, 0);
    if (size < (1ULL << 33)) {
        octal(blk + 124, 12, size);
    } else { /* base-256 */
        blk[124] = 0x80;
        for (int i = 11; i >= 1; i--, size >>= 8) blk[124 + i] = (uint8_t)size;
    }
    octal(blk + 136, 12, mtime < (1ULL << 33) ? mtime : 0);
    blk[156] = (uint8_t)type;
    memcpy(blk + 257, "ustar", 6);
    memcpy(blk + 263, "00", 2);
}

int nst_tar_write_header(uint8_t blk[NST_TAR_BLOCK], const char *name, uint64_t size, uint64_t mtime)
{
    const size_t len = strlen(name);
    memset(blk, 0, NST_TAR_BLOCK);
    if (len == 0 || len > 256) return -1;
    if (len <= 100) {
        memcpy(blk, name, len);
    } else {
        /* the first '/' that leaves at most 100 bytes of name after it,
           with at most 155 before it */
        size_t cut = 0;
        for (size_t i = len - 101; i < len - 1 && i <= 155; i++)
            if (name[i] == '/') {
                cut = i;
                break;
            }
        if (!cut) return -1;
        memcpy(blk + 345, name, cut);
        memcpy(blk, name + cut + 1, len - cut - 1);
    }
    common_fields(blk, size, mtime, '0');
    finish_header(blk);
    return 0;
}

size_t nst_tar_pax_path(uint8_t *out, size_t out_cap, const char *name, uint64_t mtime)
{
    const size_t nlen = strlen(name);
    /* "LEN path=NAME\n": LEN counts itself */
    size_t body = 6 + nlen + 1, total = 0;
    for (size_t digits = 1; digits < 20; digits++) {
        size_t t = digits + body, d = 0;
        for (size_t x = t; x; x /= 10) d++;
        if (d == digits) {
            total = t;
            break;
        }
    }
    const size_t bytes = NST_TAR_BLOCK + total + (size_t)pad512(total);
    if (!total || bytes > out_cap) return 0;
    memset(out, 0, bytes);
    memcpy(out, "PaxHeader", 9);
    common_fields(out, total, mtime, 'x');
    finish_header(out);
    char *rec = (char *)out + NST_TAR_BLOCK;
    /* LEN, a space, "path=", the name, a newline */
    char num[24];
    int nd = 0;
    for (size_t x = total; x; x /= 10) num[nd++] = (char)('0' + x % 10);
    for (int i = 0; i < nd; i++) rec[i] = num[nd - 1 - i];
    rec[nd] = ' ';
    memcpy(rec + nd + 1, "path=", 5);
    memcpy(rec + nd + 6, name, nlen);
    rec[nd + 6 + nlen] = '\n';
    return bytes;
}
