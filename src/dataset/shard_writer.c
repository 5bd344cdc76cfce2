/*
 * shard_writer.c — nostall_shard_writer (nostall_dataset.h): samples into
 * WebDataset tar shards DIR/PREFIX-NNNNNN.tar of at most a size limit, each
 * with its sidecar index NAME.tar.nstidx (dataset/tar.h's format) bound to
 * the shard by its fingerprint; and nostall_shard_index_write, the sidecar
 * of an existing shard. `nostall pack` (tools/pack.c) is built on these.
 *
 * Members are ustar regular files (mode 0444, owner 0, mtime 0; a pax
 * header first for a name over ustar's 255 bytes), each padded to 512
 * bytes; a shard ends with two zero blocks. A shard is written as
 * NAME.tar.tmp and renamed when complete. No mtime in the index either,
 * so the same samples give the same bytes every run.
 *
 * Touches: the files it writes; the writer is one caller's (no locks).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "nostall_dataset.h"
#include "dataset/coco.h"
#include "dataset/index.h"
#include "dataset/shards.h"
#include "dataset/tar.h"

#define DEFAULT_SHARD_BYTES (512ULL << 20)
#define MEMBERS_MAX 16

struct nostall_shard_writer {
    FILE *f;
    char dir[PATH_MAX], prefix[256];
    char path[PATH_MAX + 300], tmp[PATH_MAX + 310];
    uint64_t limit, pos, shards, samples, samples_in, total_bytes;
    nst_tar_index_writer idx;
    int failed; /* an I/O error: the shard being written is dropped at close */
};

static int put(nostall_shard_writer *w, const void *d, size_t n)
{
    if (n && fwrite(d, 1, n, w->f) != n) return -1;
    w->pos += n;
    return 0;
}

/* A member: its header (a pax header first when the name needs it), data, padding. */
static int put_member(nostall_shard_writer *w, const char *name, const void *d, size_t n,
                      uint64_t *data_off)
{
    static const uint8_t zero[NST_TAR_BLOCK];
    uint8_t hdr[NST_TAR_BLOCK], pax[8192];
    if (nst_tar_write_header(hdr, name, n, 0) < 0) {
        size_t k = nst_tar_pax_path(pax, sizeof pax, name, 0);
        if (!k || put(w, pax, k) < 0 || nst_tar_write_header(hdr, "pax-member", n, 0) < 0)
            return -1;
    }
    if (put(w, hdr, sizeof hdr) < 0) return -1;
    *data_off = w->pos;
    if (put(w, d, n) < 0 || put(w, zero, (NST_TAR_BLOCK - n % NST_TAR_BLOCK) % NST_TAR_BLOCK) < 0)
        return -1;
    return 0;
}

static uint64_t member_bytes(size_t name_len, size_t n)
{
    uint64_t b = NST_TAR_BLOCK + (n + NST_TAR_BLOCK - 1) / NST_TAR_BLOCK * NST_TAR_BLOCK;
    if (name_len > 100) b += 2 * NST_TAR_BLOCK + (name_len + 40) / NST_TAR_BLOCK * NST_TAR_BLOCK;
    return b;
}

static int write_file(const char *path, const void *d, size_t len)
{
    FILE *f = fopen(path, "wb");
    int bad = !f || fwrite(d, 1, len, f) != len;
    if (f && fclose(f) != 0) bad = 1;
    return bad ? -1 : 0;
}

static int close_shard(nostall_shard_writer *w)
{
    static const char fn[] = "nostall_shard_writer";
    if (!w->f) return 0;
    static const uint8_t zero[2 * NST_TAR_BLOCK];
    size_t len;
    errno = 0;
    int bad = put(w, zero, sizeof zero) < 0;
    bad |= fclose(w->f) != 0;
    w->f = NULL;
    if (!bad && rename(w->tmp, w->path) != 0) bad = 1;
    /* bound to this version of the shard by its fingerprint (size, ends) */
    if (!bad && nst_shard_ident_file(w->path, &w->idx.ident) < 0) bad = 1;
    w->idx.ident.mtime = 0;
    if (!bad && nst_tar_index_finish(&w->idx, w->pos, &len) < 0) bad = 1;
    char side[sizeof w->path + 16];
    snprintf(side, sizeof side, "%s%s", w->path, NST_TAR_INDEX_SUFFIX);
    if (!bad && write_file(side, w->idx.buf, len) < 0) bad = 1;
    nst_tar_index_writer_free(&w->idx);
    w->total_bytes += w->pos;
    if (bad) {
        const int e = errno ? errno : EIO;
        unlink(w->tmp);
        w->failed = 1;
        return nst_error(NOSTALL_E_IO, "%s: cannot write '%s': %s", fn, w->path, strerror(e));
    }
    w->shards++;
    return 0;
}

static int open_shard(nostall_shard_writer *w)
{
    snprintf(w->path, sizeof w->path, "%s/%s-%06llu.tar", w->dir, w->prefix,
             (unsigned long long)(w->shards));
    snprintf(w->tmp, sizeof w->tmp, "%s.tmp", w->path);
    w->f = fopen(w->tmp, "wb");
    if (!w->f)
        return nst_error(NOSTALL_E_IO, "nostall_shard_writer: cannot create '%s': %s", w->tmp,
                         strerror(errno));
    w->pos = 0;
    w->samples_in = 0;
    nst_tar_index_writer_init(&w->idx, 0);
    return 0;
}

int nostall_shard_writer_open(nostall_shard_writer **out, const char *dir, const char *prefix,
                              uint64_t shard_bytes)
{
    static const char fn[] = "nostall_shard_writer_open";
    nst_error_clear();
    if (!out || !dir || !prefix) return nst_error(NOSTALL_E_INVALID, "%s: NULL argument", fn);
    *out = NULL;
    if (strlen(dir) >= PATH_MAX || strlen(prefix) >= 256 || !prefix[0] || strchr(prefix, '/'))
        return nst_error(NOSTALL_E_INVALID, "%s: %s: bad folder or prefix '%s'", fn, dir, prefix);
    nostall_shard_writer *w = calloc(1, sizeof *w);
    if (!w) return nst_error(NOSTALL_E_NOMEM, "%s: out of memory", fn);
    snprintf(w->dir, sizeof w->dir, "%s", dir);
    snprintf(w->prefix, sizeof w->prefix, "%s", prefix);
    w->limit = shard_bytes ? shard_bytes : DEFAULT_SHARD_BYTES;
    *out = w;
    return 0;
}

/* The member's index entry; a .cls member's integer text is its label. */
static void index_member(nst_tar_index_member *m, const nostall_shard_member *s, uint64_t off)
{
    *m = (nst_tar_index_member){.ext = s->ext,
                                .ext_len = (uint32_t)strlen(s->ext),
                                .offset = off,
                                .size = s->len};
    if (strcmp(s->ext, "cls") || s->len == 0 || s->len > 24) return;
    char t[32], *end;
    memcpy(t, s->data, s->len);
    t[s->len] = 0;
    errno = 0;
    long long v = strtoll(t, &end, 10);
    if (!errno && end != t && !*end && v > -(long long)NST_INDEX_LABEL_LIMIT &&
        v < (long long)NST_INDEX_LABEL_LIMIT) {
        m->has_label = 1;
        m->label = v;
    }
}

int nostall_shard_writer_add(nostall_shard_writer *w, const char *key,
                             const nostall_shard_member *members, uint32_t n)
{
    static const char fn[] = "nostall_shard_writer_add";
    nst_error_clear();
    if (!w || !key || (n && !members)) return nst_error(NOSTALL_E_INVALID, "%s: NULL argument", fn);
    const char *base = strrchr(key, '/');
    if (!key[0] || strchr(base ? base + 1 : key, '.') || strlen(key) > PATH_MAX)
        return nst_error(NOSTALL_E_INVALID,
                         "%s: key '%s': empty, too long or with a '.' in its "
                         "last component",
                         fn, key);
    if (n == 0 || n > MEMBERS_MAX)
        return nst_error(NOSTALL_E_INVALID, "%s: %s: %u members (1 to %d)", fn, key, n, MEMBERS_MAX);
    char name[PATH_MAX + 64];
    uint64_t need = 2 * NST_TAR_BLOCK;
    for (uint32_t i = 0; i < n; i++) {
        if (!members[i].ext || !members[i].ext[0] || strlen(members[i].ext) > 31 ||
            strchr(members[i].ext, '/') || (members[i].len && !members[i].data))
            return nst_error(NOSTALL_E_INVALID, "%s: %s: member %u: bad extension or data", fn, key,
                             i);
        need += member_bytes(strlen(key) + 1 + strlen(members[i].ext), members[i].len);
    }
    int rc;
    if (w->failed)
        return nst_error(NOSTALL_E_IO, "%s: %s: an earlier write to '%s' failed", fn, key, w->tmp);
    if (w->f && w->samples_in && w->pos + need > w->limit && (rc = close_shard(w)) < 0) return rc;
    if (!w->f && (rc = open_shard(w)) < 0) return rc;
    nst_tar_index_rec r;
    memset(&r, 0, sizeof r);
    r.key = key;
    r.key_len = (uint32_t)strlen(key);
    errno = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t off;
        snprintf(name, sizeof name, "%s.%s", key, members[i].ext);
        if (put_member(w, name, members[i].data, members[i].len, &off) < 0) {
            w->failed = 1;
            return nst_error(NOSTALL_E_IO, "%s: cannot write '%s': %s", fn, w->tmp,
                             strerror(errno ? errno : EIO));
        }
        index_member(&r.m[r.nmembers++], &members[i], off);
    }
    if (nst_tar_index_add(&w->idx, &r) < 0 && (w->failed = 1))
        return nst_error(NOSTALL_E_INVALID, "%s: %s: the sample cannot be indexed (key too long?)",
                         fn, key);
    w->samples_in++;
    w->samples++;
    return 0;
}

uint64_t nostall_shard_writer_shards(const nostall_shard_writer *w) { return w ? w->shards : 0; }
uint64_t nostall_shard_writer_samples(const nostall_shard_writer *w) { return w ? w->samples : 0; }
uint64_t nostall_shard_writer_bytes(const nostall_shard_writer *w)
{
    return w ? w->total_bytes + (w->f ? w->pos + 2 * NST_TAR_BLOCK : 0) : 0;
}

int nostall_shard_writer_close(nostall_shard_writer *w)
{
    nst_error_clear();
    if (!w) return 0;
    int rc = 0;
    if (w->failed) {
        if (w->f) {
            fclose(w->f);
            unlink(w->tmp);
            nst_tar_index_writer_free(&w->idx);
        }
        rc = nst_error(NOSTALL_E_IO,
                       "nostall_shard_writer_close: '%s' not finished (a write "
                       "failed)",
                       w->path);
    } else {
        rc = close_shard(w);
    }
    free(w);
    return rc;
}

int nostall_shard_index_write(const char *path, uint64_t *samples, uint64_t *damaged)
{
    static const char fn[] = "nostall_shard_index_write";
    nst_error_clear();
    if (!path) return nst_error(NOSTALL_E_INVALID, "%s: NULL path", fn);
    uint8_t *file;
    size_t len;
    int rc = nst_shard_scan_file(path, &file, &len);
    if (rc < 0) return rc;
    nst_tar_index_reader r;
    nst_tar_index_rec rec;
    uint64_t s = 0, d = 0;
    nst_tar_index_open(&r, file, len, NULL, 0);
    while (nst_tar_index_next(&r, &rec, NULL, 0) == 1) rec.key ? s++ : d++;
    char side[PATH_MAX + 16];
    snprintf(side, sizeof side, "%s%s", path, NST_TAR_INDEX_SUFFIX);
    errno = 0;
    rc = write_file(side, file, len);
    free(file);
    if (rc < 0)
        return nst_error(NOSTALL_E_IO, "%s: cannot write '%s': %s", fn, side,
                         strerror(errno ? errno : EIO));
    if (samples) *samples = s;
    if (damaged) *damaged = d;
    return 0;
}

int nostall_path_leaves_root(const char *root, const char *rel)
{
    return root && rel ? nst_coco_leaves_root(root, rel) : 1;
}
