/*
 * test_tar.c — tar shards (src/dataset/tar.c): the scanner against Python's
 * tarfile (ustar, GNU and pax archives: long names, directories, links,
 * empty members) and GNU tar, fed in pieces of every size and with random
 * access (skip); damage (a bad header checksum in the middle: the members
 * after it are still found; an archive cut inside a member, inside a
 * header, inside a long name; a malformed pax header) as one DAMAGE event
 * each, naming the member; webdataset's key/extension rule; .cls labels;
 * the shard index file (round trip, every refusal: magic, version -- 1,
 * without an identity, included --, size, checksum, counts, ranges outside
 * the shard; the identity and damaged members' names kept); GNU sparse
 * members (pax 0.0, 0.1, 1.0, old 'S' with an extension block) as one
 * SPARSE event each, naming the member, in every way of feeding; and the
 * ustar writer (what it writes, tarfile reads back).
 */
#include <errno.h>
#include <sys/stat.h>

#include "check.h"
#include "dataset/tar.h"

#define MAXM 64

typedef struct member {
    char name[1024];
    uint64_t offset, size;
    uint64_t sum; /* checksum of the data seen (EMIT mode) */
} member;

typedef struct scan_result {
    member m[MAXM];
    int n, ended, ndamage;
    nst_tar_ev damage[8];
    char damage_name[8][256];
} scan_result;

static uint8_t *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void on_event(scan_result *r, const nst_tar_ev *ev)
{
    switch (ev->kind) {
    case NST_TAR_EV_MEMBER:
        if (r->n < MAXM) {
            member *m = &r->m[r->n++];
            snprintf(m->name, sizeof m->name, "%s", ev->name);
            m->offset = ev->offset;
            m->size = ev->size;
            m->sum = 0;
        }
        break;
    case NST_TAR_EV_DATA:
        if (r->n) nostall_checksum_update(&r->m[r->n - 1].sum, ev->data, ev->len);
        break;
    case NST_TAR_EV_DAMAGE:
        if (r->ndamage < 8) {
            snprintf(r->damage_name[r->ndamage], 256, "%s", ev->name ? ev->name : "");
            r->damage[r->ndamage++] = *ev;
        }
        break;
    case NST_TAR_EV_END: r->ended = 1; break;
    }
}

/* Feed the whole archive in pieces of `piece` bytes (0: random sizes). */
static void scan_stream(const uint8_t *d, size_t n, size_t piece, scan_result *r)
{
    static nst_tar_scan s;
    memset(r, 0, sizeof *r);
    nst_tar_scan_init(&s);
    uint64_t rnd = 12345;
    size_t pos = 0;
    while (pos < n) {
        size_t k = piece;
        if (!k) {
            rnd = rnd * 6364136223846793005ULL + 1442695040888963407ULL;
            k = 1 + (size_t)(rnd >> 33) % 1500;
        }
        if (k > n - pos) k = n - pos;
        const uint8_t *p = d + pos;
        size_t left = k;
        while (left) {
            size_t used;
            nst_tar_ev ev;
            int e = nst_tar_feed(&s, p, left, &used, &ev);
            CHECK(used <= left);
            p += used;
            left -= used;
            if (e)
                on_event(r, &ev);
            else
                CHECK(left == 0);
        }
        pos += k;
    }
    CHECK(s.pos == n || r->ended);
    nst_tar_ev ev;
    if (nst_tar_finish(&s, n, &ev)) on_event(r, &ev);
}

/* Random access: feed from s.pos, skip every member's data. */
static void scan_skip(const uint8_t *d, size_t n, scan_result *r)
{
    static nst_tar_scan s;
    memset(r, 0, sizeof *r);
    nst_tar_scan_init(&s);
    for (int guard = 0; guard < 10000 && s.pos < n && !r->ended; guard++) {
        size_t used;
        nst_tar_ev ev;
        size_t k = n - (size_t)s.pos < 700 ? n - (size_t)s.pos : 700;
        int e = nst_tar_feed(&s, d + s.pos, k, &used, &ev);
        if (!e) continue;
        on_event(r, &ev);
        if (ev.kind == NST_TAR_EV_MEMBER) nst_tar_skip(&s);
    }
    nst_tar_ev ev;
    if (nst_tar_finish(&s, n, &ev)) on_event(r, &ev);
}

/* The members Python's tarfile lists, as written by the script. */
static int load_expected(const char *path, member *m, int max)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int n = 0;
    char line[2048];
    while (n < max && fgets(line, sizeof line, f)) {
        char *t1 = strchr(line, '\t'), *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
        if (!t2) break;
        *t1 = '\0';
        snprintf(m[n].name, sizeof m[n].name, "%s", line);
        m[n].offset = strtoull(t1 + 1, NULL, 10);
        m[n].size = strtoull(t2 + 1, NULL, 10);
        n++;
    }
    fclose(f);
    return n;
}

static void compare(const char *what, const scan_result *r, const member *want, int nwant)
{
    if (r->n != nwant) {
        fprintf(stderr, "%s: %d members, want %d\n", what, r->n, nwant);
        CHECK(r->n == nwant);
        return;
    }
    for (int i = 0; i < nwant; i++) {
        if (strcmp(r->m[i].name, want[i].name) || r->m[i].offset != want[i].offset ||
            r->m[i].size != want[i].size) {
            fprintf(stderr, "%s: member %d: '%s' @%llu+%llu, want '%s' @%llu+%llu\n", what, i,
                    r->m[i].name, (unsigned long long)r->m[i].offset,
                    (unsigned long long)r->m[i].size, want[i].name,
                    (unsigned long long)want[i].offset, (unsigned long long)want[i].size);
            check_failures_++;
        }
    }
    CHECK_EQ(r->ndamage, 0);
}

static const char *g_script =
    "import io, sys, tarfile\n"
    "fmt = {'ustar': tarfile.USTAR_FORMAT, 'gnu': tarfile.GNU_FORMAT, 'pax': tarfile.PAX_FORMAT}[sys.argv[2]]\n"
    "out = sys.argv[1]\n"
    "def add(t, name, data=None, kind=tarfile.REGTYPE):\n"
    "    ti = tarfile.TarInfo(name); ti.type = kind; ti.mtime = 1700000000\n"
    "    if kind == tarfile.SYMTYPE: ti.linkname = 'x/a.jpg'\n"
    "    if data is None: t.addfile(ti)\n"
    "    else: ti.size = len(data); t.addfile(ti, io.BytesIO(data))\n"
    "with tarfile.open(out, 'w', format=fmt) as t:\n"
    "    add(t, 'x/a.jpg', bytes(range(256)) * 7)\n"
    "    add(t, 'x/a.cls', b'3')\n"
    "    add(t, 'dir/', kind=tarfile.DIRTYPE)\n"
    "    add(t, 'x/link.jpg', kind=tarfile.SYMTYPE)\n"
    "    add(t, 'x/empty.txt', b'')\n"
    "    add(t, 'x/block.bin', b'b' * 512)\n"
    "    add(t, 'p' * 90 + '/' + 'q' * 90 + '.jpg', b'long with a prefix')\n"
    "    if sys.argv[2] != 'ustar':\n"
    "        add(t, 'L' * 150 + '.jpg', b'a long name')\n"
    "        add(t, 'deep/' * 40 + 'k.json', b'{}')\n"
    "    if sys.argv[2] == 'pax':\n"
    "        add(t, 'x/caf\\u00e9.jpg', b'utf-8 name')\n"
    "with tarfile.open(out) as t, open(out + '.list', 'w', encoding='utf-8', newline='\\n') as f:\n"
    "    for m in t.getmembers():\n"
    "        if m.isreg(): f.write('%s\\t%d\\t%d\\n' % (m.name, m.offset_data, m.size))\n";

static int have_python(void) { return access("/usr/bin/python3", X_OK) == 0; }

static void test_formats(const char *tmp)
{
    if (!have_python()) {
        fprintf(stderr, "no /usr/bin/python3: tarfile comparisons skipped\n");
        return;
    }
    char script[4200], cmd[9000], tarp[4200], listp[4300];
    snprintf(script, sizeof script, "%s/mk.py", tmp);
    FILE *f = fopen(script, "w");
    fputs(g_script, f);
    fclose(f);
    const char *fmts[] = {"ustar", "gnu", "pax"};
    for (int k = 0; k < 3; k++) {
        snprintf(tarp, sizeof tarp, "%s/%s.tar", tmp, fmts[k]);
        snprintf(listp, sizeof listp, "%s.list", tarp);
        snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' '%s' %s", script, tarp, fmts[k]);
        CHECK(system(cmd) == 0);
        member want[MAXM];
        int nwant = load_expected(listp, want, MAXM);
        CHECK(nwant >= 5);
        size_t n;
        uint8_t *d = read_all(tarp, &n);
        CHECK(d != NULL);
        if (!d) continue;
        static scan_result r;
        size_t pieces[] = {1, 7, 511, 512, 513, 4096, 0, 1 << 20};
        for (size_t p = 0; p < sizeof pieces / sizeof pieces[0]; p++) {
            char what[64];
            snprintf(what, sizeof what, "%s, pieces of %zu", fmts[k], pieces[p]);
            scan_stream(d, n, pieces[p], &r);
            compare(what, &r, want, nwant);
            CHECK(r.ended);
        }
        scan_skip(d, n, &r);
        compare(fmts[k], &r, want, nwant);
        /* data delivered equals the bytes at the member's offset */
        scan_stream(d, n, 100, &r);
        for (int i = 0; i < r.n; i++) {
            /* DATA events are folded piece by piece: refold the archive's
               bytes at the member's offset with the same boundaries */
            uint64_t h = 0;
            uint64_t off = r.m[i].offset, left = r.m[i].size, pos = off;
            /* pieces of 100 fed from 0: boundaries at multiples of 100 */
            while (left) {
                uint64_t next = (pos / 100 + 1) * 100, take = next - pos < left ? next - pos : left;
                nostall_checksum_update(&h, d + pos, (size_t)take);
                pos += take;
                left -= take;
            }
            if (r.m[i].sum != h) {
                fprintf(stderr, "%s: member '%s': data differs\n", fmts[k], r.m[i].name);
                check_failures_++;
            }
        }
        free(d);
    }
    /* GNU tar, when installed */
    if (system("command -v tar > /dev/null 2>&1") == 0) {
        snprintf(cmd, sizeof cmd,
                 "cd '%s' && mkdir -p g/s && printf 12345 > g/s/one.jpg && printf 7 > g/s/one.cls "
                 "&& head -c 70000 /dev/zero > g/s/two.jpg && tar --format=gnu -cf gnu2.tar g && "
                 "tar --format=posix -cf posix2.tar g",
                 tmp);
        CHECK(system(cmd) == 0);
        const char *names[] = {"gnu2.tar", "posix2.tar"};
        for (int k = 0; k < 2; k++) {
            snprintf(tarp, sizeof tarp, "%s/%s", tmp, names[k]);
            size_t n;
            uint8_t *d = read_all(tarp, &n);
            static scan_result r;
            scan_stream(d, n, 0, &r);
            CHECK_EQ(r.n, 3);
            CHECK_EQ(r.ndamage, 0);
            int seen = 0;
            for (int i = 0; i < r.n; i++) {
                if (!strcmp(r.m[i].name, "g/s/one.jpg")) {
                    seen++;
                    CHECK(r.m[i].size == 5 && !memcmp(d + r.m[i].offset, "12345", 5));
                }
                if (!strcmp(r.m[i].name, "g/s/two.jpg")) {
                    seen++;
                    CHECK(r.m[i].size == 70000);
                }
            }
            CHECK_EQ(seen, 2);
            free(d);
        }
    }
}

/* An archive written with the writer: members named m0.jpg ... */
static size_t build(uint8_t *out, size_t cap, int count, size_t size0)
{
    size_t pos = 0;
    for (int i = 0; i < count; i++) {
        char name[64];
        snprintf(name, sizeof name, "s%02d.%s", i / 2, i % 2 ? "cls" : "jpg");
        size_t size = i % 2 ? 1 : size0 + (size_t)i * 37;
        if (pos + 512 + size + 512 > cap) abort();
        nst_tar_write_header(out + pos, name, size, 1700000000);
        pos += 512;
        for (size_t k = 0; k < size; k++)
            out[pos + k] = i % 2 ? (uint8_t)('0' + i % 10) : (uint8_t)(k * 7 + (size_t)i);
        pos += size;
        while (pos % 512) out[pos++] = 0;
    }
    memset(out + pos, 0, 1024);
    return pos + 1024;
}

static void test_damage(void)
{
    static uint8_t d[1 << 16];
    static scan_result r;
    size_t n = build(d, sizeof d, 10, 700);
    scan_stream(d, n, 0, &r);
    CHECK_EQ(r.n, 10);
    CHECK_EQ(r.ndamage, 0);
    CHECK(r.ended);
    member good[10];
    memcpy(good, r.m, sizeof good);

    /* a bad checksum in member 4's header: a damaged region from it to
     * member 5's header; members 5.. still found */
    static uint8_t e[1 << 16];
    memcpy(e, d, n);
    uint64_t h4 = good[4].offset - 512;
    e[h4 + 10] ^= 0x55;
    for (int mode = 0; mode < 2; mode++) {
        if (mode == 0)
            scan_stream(e, n, 0, &r);
        else
            scan_skip(e, n, &r);
        CHECK_EQ(r.n, 9);
        CHECK_EQ(r.ndamage, 1);
        CHECK_EQ(r.damage[0].code, NST_TAR_DMG_HEADER);
        CHECK_EQ(r.damage[0].offset, h4);
        CHECK_EQ(r.damage[0].offset + r.damage[0].size, good[5].offset - 512);
        CHECK(!strcmp(r.m[4].name, "s02.cls") && r.m[4].offset == good[5].offset);
        CHECK(r.ended);
    }
    /* the same header's size field malformed */
    memcpy(e, d, n);
    memcpy(e + h4 + 124, "99999999999", 11); /* 9 is not octal */
    scan_stream(e, n, 0, &r);
    CHECK_EQ(r.ndamage, 1);
    CHECK_EQ(r.n, 9);

    /* cut inside member 6's data: the stream and the skipping reader both
     * report it, naming it; members before it stand */
    size_t cut = (size_t)good[6].offset + 100;
    for (int mode = 0; mode < 2; mode++) {
        if (mode == 0)
            scan_stream(d, cut, 0, &r);
        else
            scan_skip(d, cut, &r);
        CHECK_EQ(r.ndamage, 1);
        CHECK_EQ(r.damage[0].code, NST_TAR_DMG_TRUNCATED);
        CHECK(!strcmp(r.damage_name[0], "s03.jpg"));
        CHECK_EQ(r.damage[0].offset, good[6].offset);
        CHECK_EQ(r.damage[0].size, good[6].size);
        CHECK_EQ(r.n, 7); /* the MEMBER event came before the cut was known */
        CHECK(!r.ended);
    }
    /* cut inside a header */
    scan_stream(d, (size_t)good[6].offset - 300, 0, &r);
    CHECK_EQ(r.n, 6);
    CHECK_EQ(r.ndamage, 1);
    CHECK_EQ(r.damage[0].code, NST_TAR_DMG_TRUNCATED);
    CHECK_EQ(r.damage[0].offset, good[6].offset - 512);
    /* cut exactly at a header boundary with no end blocks: not damage */
    scan_stream(d, (size_t)good[6].offset - 512, 0, &r);
    CHECK_EQ(r.n, 6);
    CHECK_EQ(r.ndamage, 0);
    /* cut inside the padding after the data: the data is whole */
    scan_stream(d, (size_t)(good[0].offset + good[0].size + 3), 0, &r);
    CHECK_EQ(r.n, 1);
    CHECK_EQ(r.ndamage, 0);

    /* a pax header whose record is malformed damages the member it names */
    static uint8_t p[1 << 14];
    size_t k = nst_tar_pax_path(p, sizeof p, "named/by/pax.jpg", 0);
    CHECK(k == 1024);
    p[512] = 'x'; /* the record's length is no longer a number (the header's checksum holds) */
    nst_tar_write_header(p + k, "ustarname.jpg", 3, 0);
    memcpy(p + k + 512, "abc", 3);
    nst_tar_write_header(p + k + 1024, "after.jpg", 2, 0);
    memcpy(p + k + 1536, "zz", 2);
    memset(p + k + 2048, 0, 1024);
    scan_stream(p, k + 3072, 0, &r);
    CHECK_EQ(r.ndamage, 1);
    CHECK_EQ(r.damage[0].code, NST_TAR_DMG_EXTENDED);
    CHECK(!strcmp(r.damage_name[0], "ustarname.jpg"));
    CHECK_EQ(r.damage[0].offset, 0);
    CHECK_EQ(r.damage[0].size, k + 512 + 3);
    CHECK(r.n == 1 && !strcmp(r.m[0].name, "after.jpg"));

    /* a pax path is taken */
    k = nst_tar_pax_path(p, sizeof p, "a/very/long/name.jpg", 0);
    nst_tar_write_header(p + k, "short.jpg", 3, 0);
    memcpy(p + k + 512, "abc", 3);
    memset(p + k + 1024, 0, 1024);
    scan_stream(p, k + 2048, 0, &r);
    CHECK(r.n == 1 && !strcmp(r.m[0].name, "a/very/long/name.jpg") && r.m[0].size == 3);

    /* garbage: never an event outside the input, never a hang */
    uint64_t rnd = 99;
    for (int t = 0; t < 200; t++) {
        for (size_t i = 0; i < 8192; i++) {
            rnd = rnd * 6364136223846793005ULL + 1442695040888963407ULL;
            e[i] = (uint8_t)(rnd >> 56);
        }
        if (t % 2) memcpy(e, d, 4096); /* a valid start, then garbage */
        scan_stream(e, 8192, 0, &r);
        for (int i = 0; i < r.n; i++) CHECK(r.m[i].offset <= 8192 || r.ndamage);
    }
}

static void test_names(void)
{
    size_t kl, el;
    const char *ext;
    const char *name = "a/b.c.jpg";
    CHECK(nst_tar_split_name(name, strlen(name), &kl, &ext, &el));
    CHECK(kl == 3 && el == 5 && !memcmp(ext, "c.jpg", 5));
    name = "dir.x/n01440764_10026.JPEG";
    CHECK(nst_tar_split_name(name, strlen(name), &kl, &ext, &el));
    CHECK(kl == 21 && !memcmp(ext, "JPEG", 4));
    CHECK_EQ(nst_tar_ext_class(ext, el), NST_EXT_IMAGE);
    CHECK(!nst_tar_split_name("a/.hidden.jpg", 13, &kl, &ext, &el));
    CHECK(!nst_tar_split_name("noext", 5, &kl, &ext, &el));
    CHECK(!nst_tar_split_name("dir/", 4, &kl, &ext, &el));
    CHECK(nst_tar_split_name("k.", 2, &kl, &ext, &el) && kl == 1 && el == 0);
    CHECK_EQ(nst_tar_ext_class("Cls", 3), NST_EXT_CLS);
    CHECK_EQ(nst_tar_ext_class("json", 4), NST_EXT_JSON);
    CHECK_EQ(nst_tar_ext_class("txt", 3), NST_EXT_TXT);
    CHECK_EQ(nst_tar_ext_class("seg.png", 7), NST_EXT_OTHER);
    CHECK_EQ(nst_tar_ext_class("pngx", 4), NST_EXT_OTHER);
    int64_t l;
    CHECK(nst_tar_parse_label((const uint8_t *)" 42\n", 4, &l) && l == 42);
    CHECK(nst_tar_parse_label((const uint8_t *)"-7", 2, &l) && l == -7);
    CHECK(!nst_tar_parse_label((const uint8_t *)"4 2", 3, &l));
    CHECK(!nst_tar_parse_label((const uint8_t *)"", 0, &l));
    CHECK(!nst_tar_parse_label((const uint8_t *)"-", 1, &l));
    CHECK(!nst_tar_parse_label((const uint8_t *)"+3", 2, &l));
    CHECK(!nst_tar_parse_label((const uint8_t *)"4611686018427387904", 19, &l)); /* 2^62 */
    CHECK(nst_tar_parse_label((const uint8_t *)"4611686018427387903", 19, &l) &&
          l == (1LL << 62) - 1);
}

static void rec_sample(nst_tar_index_rec *r, const char *key, uint64_t off0, int label)
{
    memset(r, 0, sizeof *r);
    r->key = key;
    r->key_len = (uint32_t)strlen(key);
    r->nmembers = 2;
    r->m[0] = (nst_tar_index_member){.ext = "jpg", .ext_len = 3, .offset = off0, .size = 1000};
    r->m[1] = (nst_tar_index_member){.ext = "cls",
                                     .ext_len = 3,
                                     .offset = off0 + 1536,
                                     .size = 2,
                                     .has_label = label >= -1000,
                                     .label = label};
}

/* Rewrite the checksum of an edited index file. */
static void reseal(uint8_t *b, size_t len)
{
    uint64_t h = 0;
    nostall_checksum_update(&h, b, len - 8);
    for (int i = 0; i < 8; i++) b[len - 8 + i] = (uint8_t)(h >> (8 * i));
}

static void test_index_file(void)
{
    nst_tar_index_writer w;
    nst_tar_index_writer_init(&w, 1);
    nst_tar_index_rec r;
    rec_sample(&r, "k0", 512, 5);
    CHECK_EQ(nst_tar_index_add(&w, &r), 0);
    nst_tar_index_rec dmg = {.key = NULL, .offset = 3000, .size = 1024, .code = NST_TAR_DMG_HEADER};
    CHECK_EQ(nst_tar_index_add(&w, &dmg), 0);
    rec_sample(&r, "dir/k1", 4608, -3);
    CHECK_EQ(nst_tar_index_add(&w, &r), 0);
    rec_sample(&r, "k2", 8192, -5000); /* no label */
    CHECK_EQ(nst_tar_index_add(&w, &r), 0);
    size_t len;
    const uint64_t tar_bytes = 8192 + 1536 + 2 + 510 + 1024;
    CHECK_EQ(nst_tar_index_finish(&w, tar_bytes, &len), 0);

    nst_tar_index_reader rd;
    char why[128];
    CHECK_EQ(nst_tar_index_open(&rd, w.buf, len, why, sizeof why), 0);
    CHECK_EQ(rd.samples, 3);
    CHECK_EQ(rd.members, 6);
    CHECK_EQ(rd.tar_bytes, tar_bytes);
    CHECK_EQ(rd.flags, 1);
    nst_tar_index_rec g;
    CHECK_EQ(nst_tar_index_next(&rd, &g, why, sizeof why), 1);
    CHECK(g.key_len == 2 && !memcmp(g.key, "k0", 2) && g.nmembers == 2);
    CHECK(g.m[0].offset == 512 && g.m[0].size == 1000 && g.m[1].offset == 2048);
    CHECK(g.m[1].has_label && g.m[1].label == 5 && !g.m[0].has_label);
    CHECK_EQ(nst_tar_index_next(&rd, &g, why, sizeof why), 1);
    CHECK(g.key == NULL && g.offset == 3000 && g.size == 1024 && g.code == NST_TAR_DMG_HEADER);
    CHECK_EQ(nst_tar_index_next(&rd, &g, why, sizeof why), 1);
    CHECK(g.key_len == 6 && g.m[1].has_label && g.m[1].label == -3 && g.m[0].offset == 4608);
    CHECK_EQ(nst_tar_index_next(&rd, &g, why, sizeof why), 1);
    CHECK(!g.m[1].has_label);
    CHECK_EQ(nst_tar_index_next(&rd, &g, why, sizeof why), 0);

    /* out of order, or a member without room for its header: refused */
    nst_tar_index_writer w2;
    nst_tar_index_writer_init(&w2, 0);
    rec_sample(&r, "a", 100, 1);
    CHECK(nst_tar_index_add(&w2, &r) < 0);
    CHECK(nst_tar_index_finish(&w2, 1 << 20, &len) < 0);
    nst_tar_index_writer_free(&w2);

    /* every byte flipped: refused by the checksum (or parsed and sane) */
    static uint8_t b[4096];
    CHECK(len < sizeof b);
    for (size_t i = 0; i < len; i++) {
        memcpy(b, w.buf, len);
        b[i] ^= 0x40;
        CHECK(nst_tar_index_open(&rd, b, len, why, sizeof why) < 0);
    }
    /* resealed edits: refused with a reason, or parsed within the shard */
    for (size_t i = 0; i < len - 8; i++) {
        for (int v = 0; v < 4; v++) {
            memcpy(b, w.buf, len);
            b[i] = (uint8_t)(v == 0 ? 0 : v == 1 ? 0xff : v == 2 ? b[i] + 1 : 0x80);
            reseal(b, len);
            if (nst_tar_index_open(&rd, b, len, why, sizeof why) < 0) continue;
            int k;
            while ((k = nst_tar_index_next(&rd, &g, why, sizeof why)) == 1) {
                for (uint32_t m = 0; m < g.nmembers; m++)
                    CHECK(g.m[m].offset + g.m[m].size <= rd.tar_bytes);
                if (!g.key) CHECK(g.offset + g.size <= rd.tar_bytes);
            }
            CHECK(k == 0 || why[0]);
        }
    }
    /* truncated files */
    for (size_t cut = 0; cut < len; cut += 3)
        CHECK(nst_tar_index_open(&rd, w.buf, cut, why, sizeof why) < 0);
    /* version 1 (no identity) and 3: refused */
    for (int v = 1; v <= 3; v += 2) {
        memcpy(b, w.buf, len);
        b[8] = (uint8_t)v;
        reseal(b, len);
        CHECK(nst_tar_index_open(&rd, b, len, why, sizeof why) < 0 && strstr(why, "version"));
    }
    nst_tar_index_writer_free(&w);

    /* the identity, and a damaged region's member name, round trip */
    nst_tar_index_writer_init(&w, 0);
    w.ident = (nst_tar_index_ident){.fingerprint = 0x1122334455667788ULL,
                                    .mtime = 1700000000123456789ULL,
                                    .validator = 42};
    nst_tar_index_rec named = {.key = NULL,
                               .offset = 512,
                               .size = 100,
                               .code = NST_TAR_DMG_SPARSE,
                               .dname = "dir/s.jpg",
                               .dname_len = 9};
    CHECK_EQ(nst_tar_index_add(&w, &named), 0);
    static char longname[3000];
    memset(longname, 'n', sizeof longname);
    named = (nst_tar_index_rec){.key = NULL,
                                .offset = 1024,
                                .size = 10,
                                .code = NST_TAR_DMG_LONGNAME,
                                .dname = longname,
                                .dname_len = sizeof longname};
    CHECK_EQ(nst_tar_index_add(&w, &named), 0); /* kept: its first NST_TAR_INDEX_MAX_DNAME bytes */
    CHECK_EQ(nst_tar_index_finish(&w, 2048, &len), 0);
    CHECK_EQ(nst_tar_index_open(&rd, w.buf, len, why, sizeof why), 0);
    CHECK(rd.ident.fingerprint == 0x1122334455667788ULL &&
          rd.ident.mtime == 1700000000123456789ULL && rd.ident.validator == 42);
    CHECK_EQ(nst_tar_index_next(&rd, &g, why, sizeof why), 1);
    CHECK(!g.key && g.code == NST_TAR_DMG_SPARSE && g.dname_len == 9 &&
          !memcmp(g.dname, "dir/s.jpg", 9));
    CHECK_EQ(nst_tar_index_next(&rd, &g, why, sizeof why), 1);
    CHECK(!g.key && g.code == NST_TAR_DMG_LONGNAME && g.dname_len == NST_TAR_INDEX_MAX_DNAME);
    CHECK_EQ(nst_tar_index_next(&rd, &g, why, sizeof why), 0);
    nst_tar_index_writer_free(&w);
    /* the fingerprint sees both ends and the size */
    static uint8_t h1[100], h2[100];
    memset(h1, 1, sizeof h1);
    memset(h2, 1, sizeof h2);
    const uint64_t f0 = nst_tar_index_fingerprint(5000, h1, 100, h2, 100);
    h2[99] = 2;
    CHECK(nst_tar_index_fingerprint(5000, h1, 100, h2, 100) != f0);
    CHECK(nst_tar_index_fingerprint(5001, h1, 100, h1, 100) != f0);
    CHECK(f0 != 0);
}

/* Recompute a header's checksum after an edit (tar.c's rule). */
static void fix_checksum(uint8_t *blk)
{
    memset(blk + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++) sum += blk[i];
    snprintf((char *)blk + 148, 8, "%06o", sum);
    blk[155] = ' ';
}

/* A pax 'x' header with `records` (each "key=value"), at out. */
static size_t pax(uint8_t *out, const char *const *records, int n)
{
    char body[2048];
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        const size_t r = strlen(records[i]) + 2; /* ' ' and '\n' */
        size_t total = r + 1;
        while (total != r + (size_t)snprintf(NULL, 0, "%zu", total))
            total = r + (size_t)snprintf(NULL, 0, "%zu", total);
        len += (size_t)snprintf(body + len, sizeof body - len, "%zu %s\n", total, records[i]);
    }
    nst_tar_write_header(out, "PaxHeader", len, 0);
    out[156] = 'x';
    fix_checksum(out);
    memset(out + 512, 0, (len + 511) / 512 * 512);
    memcpy(out + 512, body, len);
    return 512 + (len + 511) / 512 * 512;
}

static size_t member_at(uint8_t *out, const char *name, size_t size, uint8_t fill)
{
    nst_tar_write_header(out, name, size, 0);
    memset(out + 512, fill, (size + 511) / 512 * 512);
    return 512 + (size + 511) / 512 * 512;
}

/* GNU sparse members (pax 0.0, 0.1, 1.0; old GNU 'S' with an extension
 * block) are one SPARSE damage event each, naming the member, never a
 * member delivered as its stored chunks; the members around them stay. */
static void test_sparse(void)
{
    static uint8_t buf[1 << 16];
    static scan_result r;
    size_t pos = 0;
    pos += member_at(buf + pos, "a.jpg", 700, 'a');
    const char *v00[] = {"GNU.sparse.size=1049210", "GNU.sparse.numblocks=1",
                         "GNU.sparse.offset=1044480", "GNU.sparse.numbytes=4730"};
    pos += pax(buf + pos, v00, 4);
    pos += member_at(buf + pos, "s00.jpg", 4730, 's');
    const char *v01[] = {"GNU.sparse.size=9000", "GNU.sparse.numblocks=1", "GNU.sparse.map=0,1000"};
    pos += pax(buf + pos, v01, 3);
    pos += member_at(buf + pos, "s01.jpg", 1000, 't');
    const char *v10[] = {"GNU.sparse.major=1", "GNU.sparse.minor=0", "GNU.sparse.name=s10.jpg",
                         "GNU.sparse.realsize=9000"};
    pos += pax(buf + pos, v10, 4);
    pos += member_at(buf + pos, "GNUSparseFile.0/s10.jpg", 1536, 'u');
    pos += member_at(buf + pos, "b.jpg", 300, 'b');
    /* old GNU sparse: type 'S', byte 482 set: one extension block follows */
    nst_tar_write_header(buf + pos, "sold.jpg", 1024, 0);
    memcpy(buf + pos + 257, "ustar  ", 8); /* the GNU magic */
    buf[pos + 156] = 'S';
    buf[pos + 482] = 1;
    fix_checksum(buf + pos);
    pos += 512;
    memset(buf + pos, 0, 512); /* the extension block: no more (byte 504 = 0) */
    snprintf((char *)buf + pos, 24, "%011o", 4096);
    pos += 512;
    memset(buf + pos, 'v', 1024);
    pos += 1024;
    pos += member_at(buf + pos, "c.jpg", 100, 'c');
    memset(buf + pos, 0, 1024);
    pos += 1024;
    static const char *const sparse[] = {"s00.jpg", "s01.jpg", "s10.jpg", "sold.jpg"};
    for (int mode = 0; mode < 4; mode++) {
        if (mode < 3)
            scan_stream(buf, pos, mode == 0 ? 0 : mode == 1 ? 1 : 4096, &r);
        else
            scan_skip(buf, pos, &r);
        CHECK_EQ(r.n, 3);
        CHECK(r.n == 3 && !strcmp(r.m[0].name, "a.jpg") && !strcmp(r.m[1].name, "b.jpg") &&
              !strcmp(r.m[2].name, "c.jpg"));
        CHECK_EQ(r.ndamage, 4);
        for (int i = 0; i < 4 && i < r.ndamage; i++) {
            CHECK_EQ(r.damage[i].code, NST_TAR_DMG_SPARSE);
            CHECK(!strcmp(r.damage_name[i], sparse[i]));
        }
        CHECK(r.ended);
    }
    /* cut inside the old sparse member's extension block: one event */
    const size_t cut = pos - 1024 - 1024 - 1024 - 512 + 100;
    scan_stream(buf, cut, 0, &r);
    CHECK(r.ndamage == 4 && r.damage[3].code == NST_TAR_DMG_SPARSE);
}

/* The writer's archives as tarfile sees them. */
static void test_writer(const char *tmp)
{
    static uint8_t buf[1 << 16];
    size_t pos = 0;
    const char *names[] =
        {"plain.jpg", "a/b/c.cls",
         ("dir-of-eighty-characters-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx/"
          "and-a-file-name-of-ninety-characters-yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy.jpg")};
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(nst_tar_write_header(buf + pos, names[i], (uint64_t)i * 100 + 1, 1700000000), 0);
        pos += 512;
        memset(buf + pos, 'a' + i, (size_t)i * 100 + 1);
        pos += ((size_t)i * 100 + 1 + 511) / 512 * 512;
    }
    char longname[300];
    memset(longname, 'z', 200);
    strcpy(longname + 200, ".jpg");
    CHECK(nst_tar_write_header(buf + pos, longname, 1, 0) < 0); /* no '/' to split at */
    size_t k = nst_tar_pax_path(buf + pos, sizeof buf - pos, longname, 0);
    CHECK(k > 0);
    pos += k;
    CHECK_EQ(nst_tar_write_header(buf + pos, "fallback.jpg", 4, 0), 0);
    pos += 512;
    memcpy(buf + pos, "pax!", 4);
    pos += 512;
    memset(buf + pos, 0, 1024);
    pos += 1024;
    static scan_result r;
    scan_stream(buf, pos, 0, &r);
    CHECK_EQ(r.n, 4);
    CHECK_EQ(r.ndamage, 0);
    for (int i = 0; i < 3 && i < r.n; i++) CHECK(!strcmp(r.m[i].name, names[i]));
    CHECK(r.n == 4 && !strcmp(r.m[3].name, longname));
    if (!have_python()) return;
    char path[4200], cmd[9000];
    snprintf(path, sizeof path, "%s/written.tar", tmp);
    FILE *f = fopen(path, "wb");
    fwrite(buf, 1, pos, f);
    fclose(f);
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c \"import tarfile,sys; t=tarfile.open(sys.argv[1]); "
             "m=t.getmembers(); assert [x.name for x in m][:3]==sys.argv[2:5], [x.name for x in m]; "
             "assert m[3].name=='z'*200+'.jpg'; assert t.extractfile(m[3]).read()==b'pax!'; "
             "assert all(x.isreg() and x.mode==0o444 for x in m)\" '%s' '%s' '%s' '%s'",
             path, names[0], names[1], names[2]);
    CHECK(system(cmd) == 0);
}

int main(void)
{
    const char *tmp = test_tmpdir("test_tar");
    test_names();
    test_index_file();
    test_sparse();
    test_damage();
    test_writer(tmp);
    test_formats(tmp);
    TEST_EXIT();
}
