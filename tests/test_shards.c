/*
 * test_shards.c — tar shards as an index source (src/dataset/shards.c and
 * index.c): every way of naming shards (one .tar, a brace pattern, a
 * folder, a list) gives the same items — members' byte ranges that read
 * back as the members' bytes, .cls labels, .json/.txt parts —; the
 * sidecar index file is written by the first header pass next to the data
 * (or in $XDG_CACHE_HOME when that fails) and read instead of the tar
 * afterwards, and a stale or corrupt one is replaced -- a shard rebuilt in
 * place with its samples re-shuffled (same size) is indexed again, even
 * with its old mtime, and an index without an identity is never used;
 * damage (a bad header, a truncated shard, a sample without image or
 * label; a duplicate member, a sample of 66 members, a GNU sparse member,
 * names over 4096 bytes) leaves the rest of the shard in the index and is
 * counted and named with its reason; brace
 * patterns; task=bytes' choice of member; messages naming the shard and
 * the member; memory per item; and, with nginx, the same index over HTTP
 * (sidecar served, or header pass by ranged GETs, then cached; neither
 * used once the served shard is re-shuffled in place). Bad shards
 * (missing, 404, gzip data named .tar, a .tar.gz in a shard folder, HTTP
 * 503 past the retries: tests/http_faulty_server.py) are counted and
 * named with why while the other shards are indexed; none usable is an
 * error with the first one's reason; Retry-After is waited for.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "common/clock.h"
#include "nginx_helper.h"
#include "dataset/index.h"
#include "source/reader.h"
#include "dataset/shards.h"
#include "dataset/tar.h"

static char g_tmp[2048];

/* ---- writing test shards -------------------------------------------------- */

typedef struct tw {
    FILE *f;
    uint64_t pos;
} tw;

static void tw_member(tw *w, const char *name, const void *data, size_t len)
{
    uint8_t blk[512];
    if (nst_tar_write_header(blk, name, len, 1700000000) < 0) abort();
    fwrite(blk, 1, 512, w->f);
    fwrite(data, 1, len, w->f);
    static const uint8_t zero[512];
    fwrite(zero, 1, (512 - len % 512) % 512, w->f);
    w->pos += 512 + (len + 511) / 512 * 512;
}

static void tw_close(tw *w)
{
    static const uint8_t zero[1024];
    fwrite(zero, 1, 1024, w->f);
    fclose(w->f);
}

/* The bytes of sample s's image (deterministic, varying length). */
static size_t image_bytes(int s, uint8_t *out)
{
    size_t n = 300 + (size_t)(s * 97) % 1500;
    for (size_t i = 0; i < n; i++) out[i] = (uint8_t)(i * 31 + (size_t)s * 7);
    out[0] = 0xFF, out[1] = 0xD8;
    return n;
}

/* Shard k of `count` samples: samples k*count .. : KEY.jpg, KEY.cls, and
 * every third a KEY.json, every fourth a KEY.txt. */
static void write_shard(const char *path, int k, int count)
{
    tw w = {fopen(path, "wb"), 0};
    if (!w.f) abort();
    uint8_t img[2000];
    for (int i = 0; i < count; i++) {
        int s = k * count + i;
        char name[64], cls[16];
        snprintf(name, sizeof name, "d%d/s%05d.jpg", k, s);
        size_t n = image_bytes(s, img);
        tw_member(&w, name, img, n);
        snprintf(name, sizeof name, "d%d/s%05d.cls", k, s);
        int c = snprintf(cls, sizeof cls, "%d", s % 5);
        tw_member(&w, name, cls, (size_t)c);
        if (s % 3 == 0) {
            snprintf(name, sizeof name, "d%d/s%05d.json", k, s);
            tw_member(&w, name, "{\"a\": 1}", 8);
        }
        if (s % 4 == 0) {
            snprintf(name, sizeof name, "d%d/s%05d.txt", k, s);
            tw_member(&w, name, "caption", 7);
        }
    }
    tw_close(&w);
}

static char *pathf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *pathf(const char *fmt, ...)
{
    static char buf[8][4096];
    static int k;
    char *b = buf[k++ % 8];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b, sizeof buf[0], fmt, ap);
    va_end(ap);
    return b;
}

/* A name that stays (pathf's buffers are reused). */
#define PATH(var, ...)                                                                             \
    char var[4096];                                                                                \
    snprintf(var, sizeof var, __VA_ARGS__)

static int exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

/* Items of 4 shards x 10 samples, checked against what was written. */
static void check_items(const nst_index *ix, int nshards, int count, const char *const *shard_paths)
{
    CHECK_EQ(nst_index_count(ix), nshards * count);
    CHECK_EQ(nst_index_shards(ix), nshards);
    CHECK_EQ(nst_index_label_kind(ix), NST_LABEL_INT);
    CHECK_EQ(nst_index_classes(ix), 5);
    nst_buf buf = {0};
    uint8_t want[2000];
    for (uint64_t i = 0; i < nst_index_count(ix); i++) {
        int s = (int)i, k = s / count;
        uint64_t off, len;
        CHECK(nst_index_range(ix, i, &off, &len));
        CHECK_EQ(nst_index_shard_of(ix, i), k);
        if (shard_paths) CHECK(!strcmp(nst_index_path(ix, i), shard_paths[k]));
        char name[64];
        snprintf(name, sizeof name, "d%d/s%05d.jpg", k, s);
        CHECK(!strcmp(nst_index_member(ix, i), name));
        CHECK_EQ(nst_index_label(ix, i), s % 5);
        size_t n = image_bytes(s, want), got;
        CHECK_EQ(len, n);
        if (!nst_shard_is_url(nst_index_path(ix, i))) {
            CHECK_OK(nst_read_range(nst_index_path(ix, i), off, len, 1 << 20, 0, &buf, &got));
            CHECK(got == n && !memcmp(buf.data, want, n));
        }
        uint64_t po, pl;
        CHECK_EQ(nst_index_part(ix, i, NST_PART_JSON, &po, &pl), s % 3 == 0);
        if (s % 3 == 0) CHECK_EQ(pl, 8);
        CHECK_EQ(nst_index_part(ix, i, NST_PART_TXT, &po, &pl), s % 4 == 0);
    }
    for (int k = 0; k <= nshards; k++) CHECK_EQ(nst_index_shard_first(ix, (uint64_t)k), k * count);
    nst_buf_free(&buf);
}

/* A shard of SAME samples q0..q5 whose images all have one size (so any
 * order has the same size), sample s's image filled with 'A' + s and
 * labeled s: in archive order, or reversed (`reversed`: the usual
 * re-shuffle of a shard rebuilt in place). */
#define SAME 6
static void write_same(const char *path, int reversed)
{
    tw w = {fopen(path, "wb"), 0};
    if (!w.f) abort();
    uint8_t img[700];
    for (int i = 0; i < SAME; i++) {
        const int s = reversed ? SAME - 1 - i : i;
        char name[32], cls[8];
        memset(img, 'A' + s, sizeof img);
        img[0] = 0xFF, img[1] = 0xD8;
        snprintf(name, sizeof name, "q%d.jpg", s);
        tw_member(&w, name, img, sizeof img);
        snprintf(name, sizeof name, "q%d.cls", s);
        tw_member(&w, name, cls, (size_t)snprintf(cls, sizeof cls, "%d", s));
    }
    tw_close(&w);
}

/* Every item of a write_same shard: its own bytes under its own label,
 * in archive order. */
static void check_same(const nst_index *ix, int reversed)
{
    CHECK_EQ(nst_index_count(ix), SAME);
    nst_buf buf = {0};
    for (uint64_t i = 0; i < nst_index_count(ix) && i < SAME; i++) {
        const int s = reversed ? SAME - 1 - (int)i : (int)i;
        char name[32];
        snprintf(name, sizeof name, "q%d.jpg", s);
        CHECK(!strcmp(nst_index_member(ix, i), name));
        CHECK_EQ(nst_index_label(ix, i), s);
        uint64_t off, len;
        size_t got;
        CHECK(nst_index_range(ix, i, &off, &len) && len == 700);
        if (nst_shard_is_url(nst_index_path(ix, i))) continue;
        CHECK_OK(nst_read_range(nst_index_path(ix, i), off, len, 1 << 20, 0, &buf, &got));
        CHECK(got == 700 && buf.data[5] == 'A' + s); /* the label's own image */
    }
    nst_buf_free(&buf);
}

/* A shard rebuilt in place with the same samples in another order has the
 * same size: its old index (sidecar or cache) is not used. */
static void test_reshuffled(void)
{
    PATH(dir, "%s/reshuffled", g_tmp);
    mkdir(dir, 0755);
    PATH(shard, "%s/r.tar", dir);
    write_same(shard, 0);
    struct stat st0, st1;
    CHECK(stat(shard, &st0) == 0);
    nst_index *ix;
    nst_shard_stats st;
    CHECK_OK(nst_index_build(&ix, shard)); /* a header pass, its sidecar written */
    if (ix) check_same(ix, 0), nst_index_free(ix);
    CHECK_OK(nst_index_build(&ix, shard));
    if (ix) {
        nst_index_shard_stats(ix, &st);
        CHECK_EQ(st.sidecar, 1);
        nst_index_free(ix);
    }
    /* re-shuffled in place: same size, another mtime */
    write_same(shard, 1);
    CHECK(stat(shard, &st1) == 0 && st1.st_size == st0.st_size);
    CHECK_OK(nst_index_build(&ix, shard));
    if (ix) {
        nst_index_shard_stats(ix, &st);
        CHECK_EQ(st.passes, 1);
        CHECK_EQ(st.sidecar, 0);
        check_same(ix, 1);
        nst_index_free(ix);
    }
    /* back to the first order, with the mtime the sidecar now records
     * (copied with its times kept): the fingerprint tells them apart */
    write_same(shard, 0);
    struct timespec ts[2] = {st1.st_atim, st1.st_mtim};
    CHECK(utimensat(AT_FDCWD, shard, ts, 0) == 0);
    CHECK_OK(nst_index_build(&ix, shard));
    if (ix) {
        nst_index_shard_stats(ix, &st);
        CHECK_EQ(st.passes, 1);
        check_same(ix, 0);
        nst_index_free(ix);
    }
    /* the cache in $XDG_CACHE_HOME (no sidecar can be written: a folder
     * has its name) too: kept under the same path, size, mtime and inode */
    PATH(xdg, "%s/xdg-reshuffled", g_tmp);
    setenv("XDG_CACHE_HOME", xdg, 1);
    PATH(side, "%s.nstidx", shard);
    unlink(side);
    mkdir(side, 0755);
    CHECK_OK(nst_index_build(&ix, shard));
    if (ix) {
        nst_index_shard_stats(ix, &st);
        CHECK_EQ(st.cache_written, 1);
        nst_index_free(ix);
    }
    write_same(shard, 1);
    CHECK(utimensat(AT_FDCWD, shard, ts, 0) == 0);
    CHECK_OK(nst_index_build(&ix, shard));
    if (ix) {
        nst_index_shard_stats(ix, &st);
        CHECK_EQ(st.cached, 0);
        CHECK_EQ(st.passes, 1);
        check_same(ix, 1);
        nst_index_free(ix);
    }
    rmdir(side);
    unsetenv("XDG_CACHE_HOME");
    /* an index file without an identity (version 1, or written without
     * one) is never used */
    nst_tar_index_writer w;
    nst_tar_index_writer_init(&w, 0);
    nst_tar_index_rec r = {.key = "q0", .key_len = 2, .nmembers = 1};
    r.m[0] = (nst_tar_index_member){.ext = "jpg", .ext_len = 3, .offset = 512, .size = 700};
    size_t len;
    CHECK_EQ(nst_tar_index_add(&w, &r), 0);
    CHECK_EQ(nst_tar_index_finish(&w, (uint64_t)st0.st_size, &len), 0);
    FILE *f = fopen(pathf("%s.nstidx", shard), "wb");
    fwrite(w.buf, 1, len, f);
    fclose(f);
    nst_tar_index_writer_free(&w);
    CHECK_OK(nst_index_build(&ix, shard));
    if (ix) {
        nst_index_shard_stats(ix, &st);
        CHECK_EQ(st.passes, 1);
        check_same(ix, 1);
        nst_index_free(ix);
    }
}

static void test_sources(void)
{
    PATH(dir, "%s/src", g_tmp);
    mkdir(dir, 0755);
    const char *paths[4];
    static char pbuf[4][4096];
    for (int k = 0; k < 4; k++) {
        snprintf(pbuf[k], sizeof pbuf[k], "%s/train-%06d.tar", dir, k);
        paths[k] = pbuf[k];
        write_shard(paths[k], k, 10);
    }
    nst_index *ix;
    nst_shard_stats st;
    /* a brace pattern: the first build makes header passes and writes the
     * sidecars beside the shards */
    CHECK_OK(nst_index_build(&ix, pathf("%s/train-{000000..000003}.tar", dir)));
    if (ix) {
        check_items(ix, 4, 10, paths);
        nst_index_shard_stats(ix, &st);
        CHECK_EQ(st.passes, 4);
        CHECK_EQ(st.cache_written, 4);
        CHECK_EQ(nst_index_ignored(ix), 0);
        char name[512];
        nst_index_name(ix, 11, name, sizeof name);
        uint64_t off, len;
        nst_index_range(ix, 11, &off, &len);
        char want[1024];
        snprintf(want, sizeof want, "%s: d1/s00011.jpg (bytes %llu-%llu)", paths[1],
                 (unsigned long long)off, (unsigned long long)(off + len - 1));
        CHECK(!strcmp(name, want));
        CHECK(nst_index_range_max(ix) >= len);
        nst_index_free(ix);
    }
    for (int k = 0; k < 4; k++) CHECK(exists(pathf("%s.nstidx", paths[k])));
    /* again: from the sidecars */
    CHECK_OK(nst_index_build(&ix, pathf("%s/train-{000000..000003}.tar", dir)));
    if (ix) {
        check_items(ix, 4, 10, paths);
        nst_index_shard_stats(ix, &st);
        CHECK_EQ(st.sidecar, 4);
        CHECK_EQ(st.passes, 0);
        nst_index_free(ix);
    }
    /* a folder (sidecars are not ignored files; a stray file is) */
    FILE *f = fopen(pathf("%s/README", dir), "w");
    fputs("x", f);
    fclose(f);
    CHECK_OK(nst_index_build(&ix, dir));
    if (ix) {
        check_items(ix, 4, 10, paths);
        CHECK_EQ(nst_index_ignored(ix), 1);
        CHECK(strstr(nst_index_ignored_path(ix, 0), "README") != NULL);
        nst_index_free(ix);
    }
    /* one shard */
    CHECK_OK(nst_index_build(&ix, paths[2]));
    if (ix) {
        CHECK_EQ(nst_index_count(ix), 10);
        CHECK(!strcmp(nst_index_member(ix, 0), "d2/s00020.jpg"));
        nst_index_free(ix);
    }
    /* a list of shards (relative to the list), comments and blank lines */
    f = fopen(pathf("%s/shards.txt", g_tmp), "w");
    fprintf(f, "# shards\nsrc/train-000000.tar\n\n%s\nsrc/train-000002.tar\n%s\n", paths[1],
            paths[3]);
    fclose(f);
    CHECK_OK(nst_index_build(&ix, pathf("%s/shards.txt", g_tmp)));
    if (ix) {
        check_items(ix, 4, 10, NULL);
        CHECK(!strcmp(nst_index_path(ix, 0), pathf("%s/src/train-000000.tar", g_tmp)));
        nst_index_free(ix);
    }
    /* a list mixing .tar files and others is a list of files */
    f = fopen(pathf("%s/mixed.txt", g_tmp), "w");
    fprintf(f, "%s\n%s/README\n", paths[0], dir);
    fclose(f);
    CHECK_OK(nst_index_build(&ix, pathf("%s/mixed.txt", g_tmp)));
    if (ix) {
        uint64_t o, l;
        CHECK_EQ(nst_index_count(ix), 2);
        CHECK_EQ(nst_index_shards(ix), 0);
        CHECK(!nst_index_range(ix, 0, &o, &l));
        nst_index_free(ix);
    }
    /* a labeled list of .tar files is a list of files (task=bytes) */
    f = fopen(pathf("%s/labeled.txt", g_tmp), "w");
    fprintf(f, "%s\t1\n", paths[0]);
    fclose(f);
    CHECK_OK(nst_index_build(&ix, pathf("%s/labeled.txt", g_tmp)));
    if (ix) {
        CHECK_EQ(nst_index_shards(ix), 0);
        nst_index_free(ix);
    }
    /* a missing shard is a bad shard, named with why; the others are read */
    CHECK_OK(nst_index_build(&ix, pathf("%s/train-{000003..000004}.tar", dir)));
    if (ix) {
        const char *bp = NULL, *why = NULL;
        CHECK_EQ(nst_index_count(ix), 10);
        CHECK_EQ(nst_index_ignored(ix), 0);
        CHECK_EQ(nst_index_bad_shards(ix), 1);
        CHECK_OK(nst_index_bad_shard(ix, 0, &bp, &why));
        CHECK(bp && strstr(bp, "train-000004.tar") && why && strstr(why, "No such file"));
        CHECK(nst_index_bad_shard(ix, 1, &bp, &why) < 0);
        nst_index_free(ix);
    }
    /* none usable: the build fails with the first one's status and reason */
    CHECK_RC(nst_index_build(&ix, pathf("%s/train-{000004..000005}.tar", dir)), NOSTALL_E_NOT_FOUND);
    CHECK(strstr(nostall_last_error(), "no usable shard (2 of 2") != NULL);
    CHECK(strstr(nostall_last_error(), "train-000004.tar: No such file") != NULL);
}

/* Compressed shards (a .tar.gz, gzip data named .tar) beside good ones are
 * bad shards named with "gzip", not stray files nor damaged regions. */
static void test_compressed(void)
{
    PATH(dir, "%s/gz", g_tmp);
    mkdir(dir, 0755);
    write_shard(pathf("%s/a.tar", dir), 0, 4);
    write_shard(pathf("%s/b.tar", dir), 1, 4);
    char cmd[8400];
    snprintf(cmd, sizeof cmd,
             "gzip -c '%s/b.tar' > '%s/lost.tar.gz' && cp '%s/lost.tar.gz' '%s/z.tar'", dir, dir,
             dir, dir);
    CHECK(system(cmd) == 0);
    FILE *f = fopen(pathf("%s/notes.txt", dir), "w");
    fputs("x", f);
    fclose(f);
    nst_index *ix = NULL;
    CHECK_OK(nst_index_build(&ix, dir));
    if (ix) {
        const char *bp = NULL, *why = NULL;
        CHECK_EQ(nst_index_count(ix), 8);
        CHECK_EQ(nst_index_ignored(ix), 1); /* notes.txt alone */
        CHECK(strstr(nst_index_ignored_path(ix, 0), "notes.txt") != NULL);
        CHECK_EQ(nst_index_damaged(ix), 0);
        CHECK_EQ(nst_index_bad_shards(ix), 2);
        CHECK_OK(nst_index_bad_shard(ix, 0, &bp, &why));
        CHECK(bp && strstr(bp, "lost.tar.gz") && why && strstr(why, "gzip-compressed"));
        CHECK_OK(nst_index_bad_shard(ix, 1, &bp, &why));
        CHECK(bp && strstr(bp, "z.tar") && why && strstr(why, "gzip-compressed data, not a tar"));
        nst_index_free(ix);
    }
    /* alone: an error naming it and why */
    CHECK_RC(nst_index_build(&ix, pathf("%s/z.tar", dir)), NOSTALL_E_UNSUPPORTED);
    CHECK(strstr(nostall_last_error(), "z.tar: gzip-compressed data") != NULL);
    PATH(only, "%s/gz-only", g_tmp);
    mkdir(only, 0755);
    snprintf(cmd, sizeof cmd, "cp '%s/lost.tar.gz' '%s/'", dir, only);
    CHECK(system(cmd) == 0);
    CHECK_RC(nst_index_build(&ix, only), NOSTALL_E_UNSUPPORTED);
    CHECK(strstr(nostall_last_error(), "no usable shard") &&
          strstr(nostall_last_error(), "lost.tar.gz: gzip-compressed"));
}

/* The sidecar beside the data, the cache elsewhere, stale and corrupt ones. */
static void test_cache(void)
{
    PATH(dir, "%s/cache", g_tmp);
    PATH(xdg, "%s/xdg", g_tmp);
    mkdir(dir, 0755);
    setenv("XDG_CACHE_HOME", xdg, 1);
    PATH(shard, "%s/a.tar", dir);
    PATH(side, "%s/a.tar.nstidx", dir);
    write_shard(shard, 0, 6);
    /* the sidecar cannot be written (a directory has its name): the cache
     * folder holds the pass's result */
    mkdir(side, 0755);
    nst_index *ix;
    nst_shard_stats st;
    CHECK_OK(nst_index_build(&ix, shard));
    nst_index_shard_stats(ix, &st);
    CHECK_EQ(st.passes, 1);
    CHECK_EQ(st.cache_written, 1);
    nst_index_free(ix);
    CHECK(exists(pathf("%s/nostall/shards", xdg)));
    CHECK_OK(nst_index_build(&ix, shard));
    nst_index_shard_stats(ix, &st);
    CHECK_EQ(st.cached, 1);
    CHECK_EQ(nst_index_count(ix), 6);
    nst_index_free(ix);
    rmdir(side);
    /* no_cache: nothing written */
    nst_shard_opts o;
    nst_shard_opts_default(&o);
    o.no_cache = 1;
    PATH(shard2, "%s/b.tar", dir);
    write_shard(shard2, 1, 3);
    CHECK_OK(nst_index_build_opts(&ix, shard2, 0, &o));
    nst_index_shard_stats(ix, &st);
    CHECK_EQ(st.cache_written, 0);
    CHECK(!exists(pathf("%s.nstidx", shard2)));
    nst_index_free(ix);
    /* the shard grows: its sidecar (of the old size) is replaced */
    CHECK_OK(nst_index_build(&ix, shard2));
    nst_index_free(ix);
    CHECK(exists(pathf("%s.nstidx", shard2)));
    write_shard(shard2, 1, 5);
    CHECK_OK(nst_index_build(&ix, shard2));
    nst_index_shard_stats(ix, &st);
    CHECK_EQ(st.passes, 1);
    CHECK_EQ(nst_index_count(ix), 5);
    nst_index_free(ix);
    CHECK_OK(nst_index_build(&ix, shard2));
    nst_index_shard_stats(ix, &st);
    CHECK_EQ(st.sidecar, 1);
    nst_index_free(ix);
    /* a corrupt sidecar: indexed again */
    FILE *f = fopen(pathf("%s.nstidx", shard2), "r+b");
    fseek(f, 60, SEEK_SET);
    fputc('!', f);
    fclose(f);
    CHECK_OK(nst_index_build(&ix, shard2));
    nst_index_shard_stats(ix, &st);
    CHECK_EQ(st.passes, 1);
    CHECK_EQ(nst_index_count(ix), 5);
    nst_index_free(ix);
    /* a sidecar that passes its checksum but is malformed: an error naming the shard */
    uint8_t *file;
    size_t len;
    CHECK_OK(nst_shard_scan_file(shard2, &file, &len));
    file[NST_TAR_INDEX_HEADER] = 0x7f; /* the first key's length */
    uint64_t h = 0;
    nostall_checksum_update(&h, file, len - 8);
    for (int i = 0; i < 8; i++) file[len - 8 + i] = (uint8_t)(h >> (8 * i));
    f = fopen(pathf("%s.nstidx", shard2), "wb");
    fwrite(file, 1, len, f);
    fclose(f);
    free(file);
    CHECK_RC(nst_index_build(&ix, shard2), NOSTALL_E_DATASET);
    CHECK(strstr(nostall_last_error(), "b.tar") && strstr(nostall_last_error(), "malformed"));
    unsetenv("XDG_CACHE_HOME");
}

static void test_damage(void)
{
    PATH(dir, "%s/damage", g_tmp);
    mkdir(dir, 0755);
    PATH(shard, "%s/d.tar", dir);
    write_shard(shard, 0, 8);
    /* a bad checksum in sample 3's image header */
    uint8_t *file;
    size_t len;
    CHECK_OK(nst_shard_scan_file(shard, &file, &len));
    nst_tar_index_reader r;
    nst_tar_index_rec rec;
    CHECK_OK(nst_tar_index_open(&r, file, len, NULL, 0));
    uint64_t hdr3 = 0;
    for (int i = 0; i <= 3; i++) CHECK_EQ(nst_tar_index_next(&r, &rec, NULL, 0), 1);
    hdr3 = rec.m[0].offset - 512;
    free(file);
    FILE *f = fopen(shard, "r+b");
    fseek(f, (long)hdr3 + 5, SEEK_SET);
    fputc('#', f);
    fclose(f);
    nst_index *ix;
    CHECK_OK(nst_index_build(&ix, shard));
    if (ix) {
        /* sample 3's .cls (and .json, .txt) survive the resync but it has
         * no image: left out and named; the region counted */
        CHECK_EQ(nst_index_count(ix), 7);
        CHECK_EQ(nst_index_damaged(ix), 1);
        CHECK_EQ(nst_index_ignored(ix), 2);
        CHECK(strstr(nst_index_ignored_path(ix, 0), "d.tar: bytes ") != NULL);
        CHECK(strstr(nst_index_ignored_path(ix, 0), "bad header") != NULL);
        CHECK(strstr(nst_index_ignored_path(ix, 1), "s00003: no image") != NULL);
        CHECK(!strcmp(nst_index_member(ix, 3), "d0/s00004.jpg"));
        nst_index_free(ix);
    }
    /* again from the sidecar: the damage is reported again */
    CHECK_OK(nst_index_build(&ix, shard));
    if (ix) {
        nst_shard_stats st;
        nst_index_shard_stats(ix, &st);
        CHECK_EQ(st.sidecar, 1);
        CHECK_EQ(nst_index_damaged(ix), 1);
        CHECK_EQ(nst_index_count(ix), 7);
        nst_index_free(ix);
    }
    /* truncated inside sample 6's image: samples 0..5 stay */
    write_shard(shard, 0, 8);
    CHECK_OK(nst_shard_scan_file(shard, &file, &len));
    CHECK_OK(nst_tar_index_open(&r, file, len, NULL, 0));
    for (int i = 0; i <= 6; i++) CHECK_EQ(nst_tar_index_next(&r, &rec, NULL, 0), 1);
    free(file);
    CHECK(truncate(shard, (off_t)(rec.m[0].offset + 10)) == 0);
    CHECK_OK(nst_index_build(&ix, shard));
    if (ix) {
        CHECK_EQ(nst_index_count(ix), 6);
        CHECK_EQ(nst_index_damaged(ix), 1);
        CHECK(strstr(nst_index_ignored_path(ix, 0), "truncated") != NULL);
        nst_index_free(ix);
    }
    /* cut inside the last .cls: that sample has no label and is left out */
    write_shard(shard, 0, 8);
    CHECK_OK(nst_shard_scan_file(shard, &file, &len));
    CHECK_OK(nst_tar_index_open(&r, file, len, NULL, 0));
    for (int i = 0; i < 8; i++) CHECK_EQ(nst_tar_index_next(&r, &rec, NULL, 0), 1);
    free(file);
    CHECK(truncate(shard, (off_t)rec.m[1].offset) == 0); /* the .cls header stays */
    CHECK_OK(nst_index_build(&ix, shard));
    if (ix) {
        CHECK_EQ(nst_index_count(ix), 7);
        CHECK_EQ(nst_index_ignored(ix), 2);
        nst_index_free(ix);
    }
    /* samples without image, with a bad label, without a label */
    PATH(odd, "%s/odd.tar", dir);
    tw w = {fopen(odd, "wb"), 0};
    tw_member(&w, "a.jpg",
              "\xff\xd8"
              "abc",
              5);
    tw_member(&w, "a.cls", "1", 1);
    tw_member(&w, "b.bin", "xyz", 3);
    tw_member(&w, "b.cls", "2", 1);
    tw_member(&w, "c.png", "\x89PNG", 4);
    tw_member(&w, "c.cls", "two", 3);
    tw_member(&w, "d.jpeg", "dd", 2);
    tw_member(&w, "noext", "n", 1);
    tw_member(&w, "e.JPG", "ee", 2);
    tw_member(&w, "e.cls", " 4\n", 3);
    tw_member(&w, "f.jpg", "ff", 2);
    tw_member(&w, "f.cls", "4611686018427387903", 19); /* 2^62 - 1: beyond a job's labels */
    tw_close(&w);
    CHECK_OK(nst_index_build(&ix, odd));
    if (ix) {
        CHECK_EQ(nst_index_count(ix), 2);   /* a, e */
        CHECK_EQ(nst_index_ignored(ix), 4); /* b: no image; c: label; d: no label; f: range */
        CHECK(!strcmp(nst_index_member(ix, 1), "e.JPG"));
        CHECK_EQ(nst_index_label(ix, 1), 4);
        CHECK_EQ(nst_index_classes(ix), 5);
        CHECK(strstr(nst_index_ignored_path(ix, 0), "odd.tar: b: no image") != NULL);
        CHECK(strstr(nst_index_ignored_path(ix, 1), "c.cls: not an integer") != NULL);
        CHECK(strstr(nst_index_ignored_path(ix, 2),
                     "f.cls: label 4611686018427387903 is outside (-2^31, 2^31)") != NULL);
        CHECK(strstr(nst_index_ignored_path(ix, 3), "d.jpeg: no .cls label") != NULL);
        nst_index_free(ix);
    }
    /* task=bytes: b's .bin is its item; no label anywhere: NONE */
    PATH(raw, "%s/raw.tar", dir);
    w = (tw){fopen(raw, "wb"), 0};
    tw_member(&w, "a.bin", "1234", 4);
    tw_member(&w, "b.txt", "t", 1);
    tw_member(&w, "b.json", "{}", 2);
    tw_member(&w, "c.json", "[]", 2);
    tw_member(&w, "c.jpg", "jj", 2);
    tw_close(&w);
    CHECK_OK(nst_index_build_flags(&ix, raw, NST_INDEX_ANY_NAME));
    if (ix) {
        CHECK_EQ(nst_index_count(ix), 3);
        CHECK_EQ(nst_index_label_kind(ix), NST_LABEL_NONE);
        CHECK(!strcmp(nst_index_member(ix, 0), "a.bin"));
        CHECK(!strcmp(nst_index_member(ix, 1), "b.txt"));
        CHECK(!strcmp(nst_index_member(ix, 2), "c.jpg"));
        uint64_t o, l;
        CHECK(nst_index_part(ix, 2, NST_PART_JSON, &o, &l) && l == 2);
        nst_index_free(ix);
    }
    CHECK_OK(nst_index_build(&ix, raw)); /* c.jpg alone */
    if (ix) {
        CHECK_EQ(nst_index_count(ix), 1);
        nst_index_free(ix);
    }
    /* nothing usable: an error naming the source and the counts */
    PATH(none, "%s/none.tar", dir);
    w = (tw){fopen(none, "wb"), 0};
    tw_member(&w, "x.bin", "1", 1);
    tw_close(&w);
    CHECK_RC(nst_index_build(&ix, none), NOSTALL_E_DATASET);
    CHECK(strstr(nostall_last_error(), "no samples found in 1 shard") != NULL);
    /* an empty file: no members */
    f = fopen(pathf("%s/empty.tar", dir), "wb");
    fclose(f);
    CHECK_RC(nst_index_build(&ix, pathf("%s/empty.tar", dir)), NOSTALL_E_DATASET);
    /* garbage named .tar: a damaged region, no samples */
    f = fopen(pathf("%s/junk.tar", dir), "wb");
    for (int i = 0; i < 3000; i++) fputc(i * 7 + 3, f);
    fclose(f);
    CHECK_RC(nst_index_build(&ix, pathf("%s/junk.tar", dir)), NOSTALL_E_DATASET);
    CHECK(strstr(nostall_last_error(), "1 damaged") != NULL);
}

/* Raw archive bytes (padded to 512). */
static void tw_raw(tw *w, const void *d, size_t n)
{
    static const uint8_t zero[512];
    fwrite(d, 1, n, w->f);
    fwrite(zero, 1, (512 - n % 512) % 512, w->f);
    w->pos += (n + 511) / 512 * 512;
}

static int ignored_has(const nst_index *ix, const char *a, const char *b)
{
    for (uint64_t i = 0; i < nst_index_ignored(ix); i++) {
        const char *p = nst_index_ignored_path(ix, i);
        if (p && strstr(p, a) && strstr(p, b)) return 1;
    }
    return 0;
}

/* Members webdataset would not group as nostall used to (silently): a
 * duplicate member, a sample of more than 64 members, a GNU sparse member
 * (pax 0.0), names over 4096 bytes: each a counted skip, named, with its
 * reason; the samples around them stay. */
static void test_odd_members(void)
{
    PATH(dir, "%s/odd4", g_tmp);
    mkdir(dir, 0755);
    PATH(shard, "%s/odd4.tar", dir);
    tw w = {fopen(shard, "wb"), 0};
    if (!w.f) abort();
    tw_member(&w, "g0.jpg", "\xff\xd8g0", 4);
    tw_member(&w, "g0.cls", "0", 1);
    tw_member(&w, "d.jpg",
              "\xff\xd8"
              "d1",
              4); /* d.jpg twice: webdataset raises */
    tw_member(&w, "d.cls", "1", 1);
    tw_member(&w, "d.jpg",
              "\xff\xd8"
              "d2",
              4);
    tw_member(&w, "d.cls", "2", 1);
    tw_member(&w, "g1.jpg", "\xff\xd8g1", 4);
    tw_member(&w, "g1.cls", "1", 1);
    tw_member(&w, "m.jpg", "\xff\xd8mm", 4); /* m: 66 members */
    tw_member(&w, "m.cls", "3", 1);
    for (int i = 0; i < 64; i++) {
        char name[32];
        snprintf(name, sizeof name, "m.t%02d.txt", i);
        tw_member(&w, name, "t", 1);
    }
    /* p.jpg: GNU sparse, pax format 0.0 (1049210 bytes, 4730 stored) */
    static const char recs[] = "27 GNU.sparse.size=1049210\n"
                               "26 GNU.sparse.numblocks=1\n"
                               "29 GNU.sparse.offset=1044480\n"
                               "28 GNU.sparse.numbytes=4730\n";
    uint8_t blk[512];
    nst_tar_write_header(blk, "PaxHeader", sizeof recs - 1, 0);
    blk[156] = 'x';
    memset(blk + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++) sum += blk[i];
    snprintf((char *)blk + 148, 8, "%06o", sum);
    blk[155] = ' ';
    tw_raw(&w, blk, 512);
    tw_raw(&w, recs, sizeof recs - 1);
    static uint8_t stored[4730];
    memset(stored, 's', sizeof stored);
    tw_member(&w, "p.jpg", stored, sizeof stored);
    tw_member(&w, "p.cls", "4", 1);
    /* a key of 5000 bytes (a pax path) */
    static char longname[5100];
    static uint8_t paxbuf[6144];
    memset(longname, 'L', 5000);
    for (int k = 0; k < 2; k++) {
        strcpy(longname + 5000, k ? ".cls" : ".jpg");
        size_t n = nst_tar_pax_path(paxbuf, sizeof paxbuf, longname, 0);
        CHECK(n > 0);
        tw_raw(&w, paxbuf, n);
        tw_member(&w, "placeholder", k ? "2" : "\xff\xd8LL", k ? 1 : 4);
    }
    tw_member(&w, "g2.jpg", "\xff\xd8g2", 4);
    tw_member(&w, "g2.cls", "2", 1);
    tw_close(&w);
    for (int pass = 0; pass < 2; pass++) { /* a header pass, then its sidecar */
        nst_index *ix;
        CHECK_OK(nst_index_build(&ix, shard));
        if (!ix) continue;
        nst_shard_stats st;
        nst_index_shard_stats(ix, &st);
        CHECK_EQ(pass ? st.sidecar : st.passes, 1);
        CHECK_EQ(nst_index_count(ix), 3);
        for (uint64_t i = 0; i < 3 && i < nst_index_count(ix); i++) {
            char name[16];
            snprintf(name, sizeof name, "g%d.jpg", (int)i);
            CHECK(!strcmp(nst_index_member(ix, i), name));
            CHECK_EQ(nst_index_label(ix, i), (int64_t)i);
        }
        CHECK_EQ(nst_index_damaged(ix), 5);
        CHECK_EQ(nst_index_ignored(ix), 6); /* the 5, and p.cls without its image */
        CHECK(ignored_has(ix, "odd4.tar: d.jpg: duplicate member", "bytes "));
        CHECK(ignored_has(ix, "odd4.tar: m.t", "more than 64 members"));
        CHECK(ignored_has(ix, "odd4.tar: p.jpg: GNU sparse member", "bytes "));
        CHECK(ignored_has(ix, "odd4.tar: LLLLLLLLLL", "...: name too long"));
        CHECK(ignored_has(ix, "odd4.tar: p: no image", ""));
        nst_index_free(ix);
    }
}

static int collect(void *ctx, const char *name)
{
    char *out = ctx;
    size_t n = strlen(out);
    snprintf(out + n, 4096 - n, "%s|", name);
    return 0;
}

static int count_only(void *ctx, const char *name)
{
    (void)name;
    (*(uint64_t *)ctx)++;
    return 0;
}

static void test_expand(void)
{
    char out[4096];
    struct {
        const char *pattern, *want;
    } cases[] = {
        {"a-{000..003}.tar", "a-000.tar|a-001.tar|a-002.tar|a-003.tar|"},
        {"a-{8..11}.tar", "a-8.tar|a-9.tar|a-10.tar|a-11.tar|"},
        {"a-{3..1}", "a-3|a-2|a-1|"},
        {"{x,y}/{0..1}.tar", "x/0.tar|x/1.tar|y/0.tar|y/1.tar|"},
        {"{a,,b}", "a||b|"},
        {"no-braces.tar", "no-braces.tar|"},
        {"lit{eral}.tar", "lit{eral}.tar|"},
        {"{1..a}{p,q}", "{1..a}p|{1..a}q|"},
        {"s-{09..10}", "s-09|s-10|"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        out[0] = '\0';
        CHECK_OK(nst_shards_expand(cases[i].pattern, collect, out));
        if (strcmp(out, cases[i].want)) {
            fprintf(stderr, "expand '%s': '%s', want '%s'\n", cases[i].pattern, out, cases[i].want);
            check_failures_++;
        }
    }
    CHECK(nst_shard_has_braces("x{0..3}"));
    CHECK(!nst_shard_has_braces("x{y}"));
    CHECK(nst_shard_is_tar("http://h/a.TAR?sig=1"));
    CHECK(!nst_shard_is_tar("http://h/a.tar.gz"));
    CHECK(!nst_shard_is_tar("tar"));
    char side[256];
    CHECK_OK(nst_shard_sidecar_name("https://h/x.tar?a=b", side, sizeof side));
    CHECK(!strcmp(side, "https://h/x.tar.nstidx?a=b"));
    /* too many: refused before anything is indexed */
    uint64_t n = 0;
    CHECK_RC(nst_shards_expand("{0..9}{0..9}{0..9}{0..9}{0..9}{0..9}{0..9}", count_only, &n),
             NOSTALL_E_DATASET);
    CHECK_EQ(n, NST_SHARDS_MAX);
    CHECK(strstr(nostall_last_error(), "more than") != NULL);
}

/* Shards described by sidecars alone (sparse tar files of the described
 * size): many items, ImageNet-like names; memory per item. */
static void write_sidecar_shard(const char *tar, int k, int count)
{
    nst_tar_index_writer w;
    nst_tar_index_writer_init(&w, 0);
    uint64_t pos = 0;
    char key[64];
    for (int i = 0; i < count; i++) {
        snprintf(key, sizeof key, "n%08d/n%08d_%d", 1440764 + k, 1440764 + k, 10026 + i);
        nst_tar_index_rec r = {.key = key, .key_len = (uint32_t)strlen(key), .nmembers = 2};
        uint64_t size = 100000 + (uint64_t)(i % 1000) * 37;
        r.m[0] =
            (nst_tar_index_member){.ext = "jpg", .ext_len = 3, .offset = pos + 512, .size = size};
        pos += 512 + (size + 511) / 512 * 512;
        r.m[1] = (nst_tar_index_member){.ext = "cls",
                                        .ext_len = 3,
                                        .offset = pos + 512,
                                        .size = 3,
                                        .has_label = 1,
                                        .label = k % 1000};
        pos += 1024;
        if (nst_tar_index_add(&w, &r) < 0) abort();
    }
    pos += 1024;
    FILE *f = fopen(tar, "wb");
    fclose(f);
    if (truncate(tar, (off_t)pos) != 0) abort();
    if (nst_shard_ident_file(tar, &w.ident) < 0) abort(); /* as pack does */
    size_t len;
    if (nst_tar_index_finish(&w, pos, &len) < 0) abort();
    f = fopen(pathf("%s.nstidx", tar), "wb");
    if (!f) abort();
    fwrite(w.buf, 1, len, f);
    fclose(f);
    nst_tar_index_writer_free(&w);
}

static void test_memory(void)
{
    PATH(dir, "%s/many", g_tmp);
    mkdir(dir, 0755);
    const int shards = 20, per = 2500;
    for (int k = 0; k < shards; k++) write_sidecar_shard(pathf("%s/m-%03d.tar", dir, k), k, per);
    nst_index *ix;
    CHECK_OK(nst_index_build(&ix, pathf("%s/m-{000..019}.tar", dir)));
    if (!ix) return;
    nst_shard_stats st;
    nst_index_shard_stats(ix, &st);
    CHECK_EQ(st.sidecar, shards);
    CHECK_EQ(nst_index_count(ix), shards * per);
    double per_item = (double)nst_index_bytes(ix) / (double)nst_index_count(ix);
    printf("shard index: %.1f bytes per item (%d items)\n", per_item, shards * per);
    CHECK(per_item <= 100.0);
    CHECK(!strcmp(nst_index_member(ix, per + 1), "n01440765/n01440765_10027.jpg"));
    CHECK_EQ(nst_index_label(ix, per + 1), 1);
    nst_index_free(ix);
}

/* The same shards over HTTP: the sidecars nginx serves, then, without
 * them, header passes by ranged GETs, cached in $XDG_CACHE_HOME. */
static void test_http(void)
{
    PATH(root, "%s/www", g_tmp);
    PATH(ndir, "%s/nginx", g_tmp);
    mkdir(root, 0755);
    const char *local[3];
    static char lbuf[3][4096];
    for (int k = 0; k < 3; k++) {
        snprintf(lbuf[k], sizeof lbuf[k], "%s/w-%d.tar", root, k);
        local[k] = lbuf[k];
        write_shard(local[k], k, 7);
    }
    int port;
    int rc = nginx_start(ndir, root, NULL, &port);
    if (rc == 77) {
        printf("nginx not installed: the HTTP part skipped\n");
        return;
    }
    CHECK_EQ(rc, 0);
    if (rc) return;
    setenv("XDG_CACHE_HOME", pathf("%s/xdg-http", g_tmp), 1);
    const char *urls[3];
    static char ubuf[3][256];
    for (int k = 0; k < 3; k++) {
        snprintf(ubuf[k], sizeof ubuf[k], "http://127.0.0.1:%d/w-%d.tar", port, k);
        urls[k] = ubuf[k];
    }
    PATH(pattern, "http://127.0.0.1:%d/w-{0..2}.tar", port);
    nst_index *ix = NULL, *lx = NULL;
    nst_shard_stats st;
    /* no sidecars yet: header passes over HTTP, cached */
    CHECK_OK(nst_index_build(&ix, pattern));
    if (ix) {
        check_items(ix, 3, 7, urls);
        nst_index_shard_stats(ix, &st);
        CHECK_EQ(st.passes, 3);
        CHECK_EQ(st.cache_written, 3);
        CHECK(st.http_requests >= 3 * 2); /* sidecars asked, then windows of 16 KiB */
        nst_index_free(ix);
    }
    CHECK_OK(nst_index_build(&ix, pattern));
    if (ix) {
        nst_index_shard_stats(ix, &st);
        CHECK_EQ(st.cached, 3);
        CHECK_EQ(st.http_requests, 3 * 2); /* a sidecar asked, the first window */
        nst_index_free(ix);
    }
    /* the local build writes sidecars, which nginx then serves */
    CHECK_OK(nst_index_build(&lx, pathf("%s/w-{0..2}.tar", root)));
    CHECK_OK(nst_index_build(&ix, pattern));
    if (ix && lx) {
        nst_index_shard_stats(ix, &st);
        CHECK_EQ(st.sidecar, 3);
        CHECK_EQ(st.http_requests, 3 * 2); /* the first window (the identity), the sidecar */
        for (uint64_t i = 0; i < nst_index_count(lx); i++) {
            uint64_t a, b, c, d;
            nst_index_range(ix, i, &a, &b);
            nst_index_range(lx, i, &c, &d);
            CHECK(a == c && b == d && nst_index_label(ix, i) == nst_index_label(lx, i));
        }
    }
    nst_index_free(ix);
    nst_index_free(lx);
    /* w-1.tar rebuilt in place, its samples re-shuffled (same size): the
     * sidecar nginx serves and the cached header pass describe the old
     * shard; neither is used */
    write_same(local[1], 1);
    CHECK_OK(nst_index_build(&ix, urls[1]));
    if (ix) {
        nst_index_shard_stats(ix, &st);
        CHECK_EQ(st.passes, 1);
        check_same(ix, 1);
        nst_index_free(ix);
    }
    CHECK_OK(nst_index_build(&ix, urls[1])); /* its new cache */
    if (ix) {
        nst_index_shard_stats(ix, &st);
        CHECK_EQ(st.cached, 1);
        check_same(ix, 1);
        nst_index_free(ix);
    }
    /* a missing shard: a bad shard naming the URL and the 404 */
    CHECK_OK(nst_index_build(&ix, pathf("http://127.0.0.1:%d/w-{2..3}.tar", port)));
    if (ix) {
        const char *bp = NULL, *why = NULL;
        CHECK_EQ(nst_index_count(ix), 7);
        CHECK_EQ(nst_index_bad_shards(ix), 1);
        CHECK_OK(nst_index_bad_shard(ix, 0, &bp, &why));
        CHECK(bp && strstr(bp, "w-3.tar") && why && strstr(why, "404"));
        nst_index_free(ix);
    }
    CHECK_RC(nst_index_build(&ix, pathf("http://127.0.0.1:%d/w-{3..4}.tar", port)),
             NOSTALL_E_NOT_FOUND);
    CHECK(strstr(nostall_last_error(), "w-3.tar") && strstr(nostall_last_error(), "404"));
    /* a URL that is not a shard */
    CHECK_RC(nst_index_build(&ix, pathf("http://127.0.0.1:%d/list.txt", port)), NOSTALL_E_DATASET);
    nginx_stop(ndir);
    unsetenv("XDG_CACHE_HOME");
}

/* tests/http_faulty_server.py serving `root` on loopback: its port, or 0
 * (*pid: the server, to stop). */
static int faulty_start(const char *root, pid_t *pid)
{
    const char *hs = nginx_script();
    PATH(script, "%.*s/http_faulty_server.py", (int)(strrchr(hs, '/') - hs), hs);
    PATH(portfile, "%s/faulty.port", g_tmp);
    unlink(portfile);
    *pid = fork();
    if (*pid < 0) return 0;
    if (*pid == 0) {
        execl("/usr/bin/python3", "python3", script, "--root", root, portfile, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 1200; i++) { /* python may take a while to start */
        int port = 0;
        FILE *f = fopen(portfile, "r");
        if (f) {
            int ok = fscanf(f, "%d", &port) == 1;
            fclose(f);
            if (ok && port > 0) return port;
        }
        if (waitpid(*pid, NULL, WNOHANG) == *pid) break;
        usleep(25000);
    }
    return 0;
}

/* A throttled store (503 SlowDown) while indexing: a shard is retried with
 * a backoff the options bound (1-4 ms here) and the server's Retry-After;
 * one still failing after its retries is a bad shard, named with the HTTP
 * status and attempts, and the others are indexed; none usable fails the
 * build. */
static void test_http_faults(void)
{
    PATH(root, "%s/faulty", g_tmp);
    mkdir(root, 0755);
    for (int k = 0; k < 3; k++) write_shard(pathf("%s/s%d.tar", root, k), k, 3); /* < 16 KiB */
    pid_t pid;
    const int port = faulty_start(root, &pid);
    if (!port) {
        fprintf(stderr, "cannot start tests/http_faulty_server.py\n");
        check_failures_++;
        return;
    }
    nst_shard_opts o;
    nst_shard_opts_default(&o);
    o.retries = 3;
    o.backoff_ms = 1;
    o.max_backoff_ms = 4;
    o.no_cache = 1;
    o.threads = 2;
    PATH(list, "%s/throttled.txt", g_tmp);
    FILE *f = fopen(list, "w");
    fprintf(f,
            "http://127.0.0.1:%d/flakyfile/503/3/0/s0.tar\n"  /* 3 retries: enough */
            "http://127.0.0.1:%d/flakyfile/503/99/0/s1.tar\n" /* never */
            "http://127.0.0.1:%d/s2.tar\n",
            port, port, port);
    fclose(f);
    nst_index *ix = NULL;
    CHECK_OK(nst_index_build_opts(&ix, list, 0, &o));
    if (ix) {
        const char *bp = NULL, *why = NULL;
        CHECK_EQ(nst_index_count(ix), 6); /* s0 and s2 */
        CHECK_EQ(nst_index_shards(ix), 3);
        CHECK_EQ(nst_index_bad_shards(ix), 1);
        CHECK_OK(nst_index_bad_shard(ix, 0, &bp, &why));
        CHECK(bp && strstr(bp, "/s1.tar") && why && strstr(why, "HTTP 503 after 4 attempts"));
        nst_index_free(ix);
    }
    /* none usable: a clear error naming the first */
    f = fopen(list, "w");
    fprintf(f, "http://127.0.0.1:%d/flakyfile/503/99/0/s1.tar\n", port);
    fclose(f);
    CHECK_RC(nst_index_build_opts(&ix, list, 0, &o), NOSTALL_E_IO);
    CHECK(strstr(nostall_last_error(), "no usable shard") &&
          strstr(nostall_last_error(), "s1.tar: HTTP 503 after 4 attempts"));
    /* Retry-After: 1 (s) is waited for, though the backoff is 1 ms: once
     * for the sidecar asked first (then 404), once for the shard */
    f = fopen(list, "w");
    fprintf(f, "http://127.0.0.1:%d/flakyfile/503/1/1/s2.tar\n", port);
    fclose(f);
    o.max_backoff_ms = 60000;
    const uint64_t t0 = nst_now_ns();
    CHECK_OK(nst_index_build_opts(&ix, list, 0, &o));
    const uint64_t ms = (nst_now_ns() - t0) / 1000000;
    if (ms < 1900) {
        fprintf(stderr, "Retry-After: 1 twice, but indexing took %llu ms\n", (unsigned long long)ms);
        check_failures_++;
    }
    if (ix) CHECK_EQ(nst_index_count(ix), 3);
    nst_index_free(ix);
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
}

int main(void)
{
    snprintf(g_tmp, sizeof g_tmp, "%s", test_tmpdir("test_shards"));
    test_expand();
    test_sources();
    test_compressed();
    test_cache();
    test_reshuffled();
    test_damage();
    test_odd_members();
    test_memory();
    test_http();
    test_http_faults();
    TEST_EXIT();
}
