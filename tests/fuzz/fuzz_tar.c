/*
 * fuzz_tar.c — tar shards on hostile input: the header parser and push
 * scanner (src/dataset/tar.c), the shard index file's reader, and the
 * header pass that writes index files (src/dataset/shards.c).
 *
 * The first byte picks the mode, the second the size of the pieces fed.
 *
 * 0: the rest is an archive. It is scanned twice: fed whole in pieces
 *    (every member's data delivered) and with random access (every
 *    member's data skipped). Both must give the same members and damaged
 *    regions in the same order; every event lies within the input; a
 *    member's DATA pieces are contiguous, in order, and add up to its size
 *    unless a DAMAGE event ends it; the scanner never stops consuming.
 *    The header pass (nst_shard_scan_file over a memfd) must then write an
 *    index file that the reader accepts whole, each member inside the
 *    archive, with as many members as the stream had (webdataset's names).
 * 1: the rest is an index file: read (with its checksum repaired, so the
 *    body's checks are reached). A file accepted must give only records
 *    inside its shard, and the writer must encode them again into a file
 *    the reader accepts with the same records (a damaged region's member
 *    name included) and the same identity (fingerprint, mtime, validator).
 * Seeds (corpus/tar): besides ustar, GNU and pax archives and their
 * damage, the members that are counted skips: GNU sparse members as GNU
 * tar 1.34 writes them (old 'S' with an extension block, pax 0.0, 0.1,
 * 1.0), a duplicate member, a sample of 66 members, names over 4096 bytes
 * (pax and GNU 'L'), and index files (version 2) naming such members.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "nostall.h"
#include "dataset/shards.h"
#include "dataset/tar.h"

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "fuzz_tar: " __VA_ARGS__);                                                 \
        fprintf(stderr, "\n");                                                                     \
        abort();                                                                                   \
    } while (0)

#define MAXEV 4096

typedef struct ev_rec {
    int kind, code;
    uint64_t offset, size;
    char name[64];
} ev_rec;

typedef struct run {
    ev_rec ev[MAXEV];
    int n;
    uint64_t members; /* MEMBER events with a key (webdataset's rule)  */
} run;

static nst_tar_scan g_scan;

static void record(run *r, const nst_tar_ev *e)
{
    if (r->n >= MAXEV) return;
    ev_rec *x = &r->ev[r->n++];
    x->kind = e->kind;
    x->code = e->code;
    x->offset = e->offset;
    x->size = e->size;
    snprintf(x->name, sizeof x->name, "%s", e->name ? e->name : "");
}

/* Fed whole: also checks the DATA pieces. */
static void scan_stream(const uint8_t *d, size_t n, size_t piece, run *r)
{
    nst_tar_scan *s = &g_scan;
    nst_tar_scan_init(s);
    memset(r, 0, sizeof *r);
    uint64_t m_off = 0, m_size = 0, m_got = 0;
    int in_member = 0;
    for (size_t pos = 0; pos < n;) {
        size_t k = piece < n - pos ? piece : n - pos;
        const uint8_t *p = d + pos;
        size_t left = k;
        while (left) {
            size_t used;
            nst_tar_ev e;
            const uint64_t before = s->pos;
            int got = nst_tar_feed(s, p, left, &used, &e);
            if (used > left || s->pos != before + used)
                FAIL("feed consumed %zu of %zu", used, left);
            if (!got && used != left)
                FAIL("no event, but %zu of %zu bytes left", left - used, left);
            p += used;
            left -= used;
            if (!got) continue;
            if (e.kind == NST_TAR_EV_DATA) {
                if (!in_member) FAIL("DATA outside a member");
                if (e.offset != m_off + m_got || e.data < d || e.data + e.len > d + n ||
                    (uint64_t)(e.data - d) != e.offset)
                    FAIL("DATA piece out of place");
                m_got += e.len;
                if (m_got > m_size) FAIL("more DATA than the member's size");
                if (m_got == m_size) in_member = 0;
                continue;
            }
            if (in_member)
                FAIL("member ended with %llu of %llu bytes", (unsigned long long)m_got,
                     (unsigned long long)m_size);
            if (e.kind == NST_TAR_EV_MEMBER) {
                m_off = e.offset, m_size = e.size, m_got = 0;
                in_member = e.size > 0;
                if (e.offset > n) FAIL("member past the input");
            }
            if (e.kind == NST_TAR_EV_DAMAGE && e.offset > n) FAIL("damage past the input");
            record(r, &e);
        }
        pos += k;
    }
    nst_tar_ev e;
    if (nst_tar_finish(s, n, &e)) {
        if (e.kind != NST_TAR_EV_DAMAGE) FAIL("finish gave a non-damage event");
        if (in_member && (e.offset != m_off || e.code != NST_TAR_DMG_TRUNCATED))
            FAIL("a cut member misreported");
        in_member = 0;
        record(r, &e);
    }
    if (in_member) FAIL("input ended inside a member without damage");
}

/* Random access: every member skipped. */
static void scan_skip(const uint8_t *d, size_t n, size_t piece, run *r)
{
    nst_tar_scan *s = &g_scan;
    nst_tar_scan_init(s);
    memset(r, 0, sizeof *r);
    int ended = 0;
    for (size_t guard = 0; s->pos < n && !ended; guard++) {
        if (guard > 4 * n + 16) FAIL("the skipping scan does not advance");
        size_t k = piece < n - s->pos ? piece : n - (size_t)s->pos;
        size_t used;
        nst_tar_ev e;
        if (!nst_tar_feed(s, d + s->pos, k, &used, &e)) continue;
        if (e.kind == NST_TAR_EV_DATA) FAIL("DATA while skipping");
        record(r, &e);
        if (e.kind == NST_TAR_EV_MEMBER) nst_tar_skip(s);
        if (e.kind == NST_TAR_EV_END) ended = 1;
    }
    nst_tar_ev e;
    if (!ended && nst_tar_finish(s, n, &e)) record(r, &e);
}

static void archive(const uint8_t *d, size_t n, size_t piece)
{
    static run a, b;
    scan_stream(d, n, piece, &a);
    scan_skip(d, n, piece, &b);
    if (a.n != b.n) FAIL("%d events fed whole, %d skipping", a.n, b.n);
    for (int i = 0; i < a.n; i++) {
        const ev_rec *x = &a.ev[i], *y = &b.ev[i];
        if (x->kind != y->kind || x->code != y->code || x->offset != y->offset ||
            x->size != y->size || strcmp(x->name, y->name))
            FAIL("event %d differs: %d@%llu+%llu '%s' vs %d@%llu+%llu '%s'", i, x->kind,
                 (unsigned long long)x->offset, (unsigned long long)x->size, x->name, y->kind,
                 (unsigned long long)y->offset, (unsigned long long)y->size, y->name);
    }
    /* the header pass over the same bytes writes a valid index file */
    int fd = memfd_create("fuzz-tar", MFD_CLOEXEC);
    if (fd < 0) abort();
    for (size_t off = 0; off < n;) {
        ssize_t w = write(fd, d + off, n - off);
        if (w <= 0) abort();
        off += (size_t)w;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    uint8_t *file;
    size_t len;
    if (nst_shard_scan_file(path, &file, &len) < 0) {
        /* compressed data under a .tar name (gzip, bzip2, xz, zstd magic)
         * is refused as such, not indexed: the one refusal allowed */
        if (nst_shard_compression(d, n) && strstr(nostall_last_error(), "-compressed data")) {
            close(fd);
            return;
        }
        FAIL("header pass failed: %s", nostall_last_error());
    }
    close(fd);
    nst_tar_index_reader r;
    static nst_tar_index_rec rec;
    char why[128];
    if (nst_tar_index_open(&r, file, len, why, sizeof why) < 0)
        FAIL("the header pass wrote a bad file: %s", why);
    if (r.tar_bytes != n) FAIL("index of %llu bytes for %zu", (unsigned long long)r.tar_bytes, n);
    int k;
    while ((k = nst_tar_index_next(&r, &rec, why, sizeof why)) == 1) {
        for (uint32_t m = 0; m < rec.nmembers; m++)
            if (rec.m[m].offset + rec.m[m].size > n || rec.m[m].offset < NST_TAR_BLOCK)
                FAIL("member outside");
    }
    if (k < 0) FAIL("the header pass wrote a malformed file: %s", why);
    free(file);
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void index_file(const uint8_t *d, size_t n)
{
    uint8_t *b = malloc(n + 1);
    if (!b) abort();
    memcpy(b, d, n);
    if (n >= NST_TAR_INDEX_HEADER + 8) { /* repair the checksum: reach the body's checks */
        uint64_t h = 0;
        nostall_checksum_update(&h, b, n - 8);
        put64(b + n - 8, h);
    }
    nst_tar_index_reader r;
    char why[128];
    if (nst_tar_index_open(&r, b, n, why, sizeof why) < 0) {
        if (!why[0]) FAIL("refused without a reason");
        free(b);
        return;
    }
    static nst_tar_index_rec recs[64];
    nst_tar_index_writer w;
    nst_tar_index_writer_init(&w, r.flags);
    w.ident = r.ident;
    int k, count = 0, ok = 1;
    while ((k = nst_tar_index_next(&r, &recs[count % 64], why, sizeof why)) == 1) {
        const nst_tar_index_rec *x = &recs[count % 64];
        if (x->key) {
            for (uint32_t m = 0; m < x->nmembers; m++)
                if (x->m[m].offset + x->m[m].size > r.tar_bytes) FAIL("member outside the shard");
        } else if (x->offset + x->size > r.tar_bytes) {
            FAIL("damage outside the shard");
        }
        if (nst_tar_index_add(&w, x) < 0) FAIL("a record read cannot be written again");
        count++;
    }
    if (k < 0) ok = 0, (void)ok;
    if (k == 0 && count <= 64) { /* written again: the same records */
        size_t len;
        if (nst_tar_index_finish(&w, r.tar_bytes, &len) < 0) FAIL("finish");
        nst_tar_index_reader r2;
        static nst_tar_index_rec y;
        if (nst_tar_index_open(&r2, w.buf, len, why, sizeof why) < 0)
            FAIL("rewritten file refused: %s", why);
        if (memcmp(&r2.ident, &r.ident, sizeof r.ident) != 0) FAIL("rewritten identity differs");
        for (int i = 0; i < count; i++) {
            if (nst_tar_index_next(&r2, &y, why, sizeof why) != 1)
                FAIL("rewritten file: record %d", i);
            const nst_tar_index_rec *x = &recs[i];
            if ((x->key == NULL) != (y.key == NULL) || x->offset != y.offset ||
                x->nmembers != y.nmembers)
                FAIL("rewritten record %d differs", i);
            if (x->key && (x->key_len != y.key_len || memcmp(x->key, y.key, x->key_len)))
                FAIL("key %d", i);
            if (!x->key && (x->code != y.code || x->dname_len != y.dname_len ||
                            (x->dname_len && memcmp(x->dname, y.dname, x->dname_len))))
                FAIL("damaged region %d: code or member name differs", i);
            for (uint32_t m = 0; m < x->nmembers; m++)
                if (x->m[m].offset != y.m[m].offset || x->m[m].size != y.m[m].size ||
                    x->m[m].has_label != y.m[m].has_label ||
                    (x->m[m].has_label && x->m[m].label != y.m[m].label))
                    FAIL("member %u of record %d differs", m, i);
        }
        if (nst_tar_index_next(&r2, &y, why, sizeof why) != 0)
            FAIL("rewritten file has more records");
    }
    nst_tar_index_writer_free(&w);
    free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2 || size > (1 << 20)) return 0;
    const size_t piece = (size_t)data[1] * 37 + 1;
    if (data[0] & 1)
        index_file(data + 2, size - 2);
    else
        archive(data + 2, size - 2, piece);
    return 0;
}
