/*
 * test_fetch_range.c — byte ranges in the fetch stage (src/source/fetch.c,
 * reader.c, http.c): nst_fetch_submit_range(f, key, path, offset, length).
 *
 * Local files, with reader=pread and reader=io_uring (its parts skipped with
 * a message where io_uring cannot be set up), at depth 1 and 8: ranges at
 * the start, middle and end of a file, whole files beside them, many ranges
 * in flight (bytes checked against the file's pattern, FIFO order kept); a
 * range past the end is E_TRUNCATED naming the path, the range and the
 * file's size; a sysfs file whose fstat size (4096) is more than it holds
 * gives a real short read, resubmitted at offset + what was read (the size
 * in the message proves the offset); length > max_file_bytes is
 * E_FILE_TOO_LARGE while small ranges of the same file — an 8 GiB sparse one
 * too, at offsets past 4 GiB — are read; bad ranges and keys are E_INVALID;
 * special files keep their errors. With a cache: each key is cached apart
 * (two ranges of one file under two keys), a second fetch of a key is a
 * hit, the peer hooks see the key and the range's bytes, and only the
 * range's pages leave the page cache (mincore; skipped where the filesystem
 * ignores DONTNEED). Emulated storage schedules `length` bytes, not the
 * file's.
 *
 * HTTP, against a small server in this process (one thread per connection,
 * "Connection: close"; the URL's first segment picks its behaviour): 206
 * success at depth 1 and 8, a whole-file fetch after ranges on the same
 * easy handle (Range cleared), 200 ignoring Range (E_IO, stopped at the
 * headers: the server never sends the body, so only an abort there avoids
 * the 60 s timeout's message), a 200 that is exactly the range from 0
 * (accepted), 416 and a range clamped at the end of the file (E_TRUNCATED
 * with the size), a 206 cut short once (retried, then right) or always
 * (E_IO after the retries; with a Content-Length, and without one, where
 * only the count of bytes shows it), a Content-Range not at the offset, a body or
 * Content-Length longer than asked, a 206 without Content-Range (E_IO), and
 * length > max_bytes. With nginx installed (tests/nginx_helper.h), real
 * Range answers too: bytes, 416, a clamped range.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "cache/minio.h"
#include "check.h"
#include "common/clock.h"
#include "nginx_helper.h"
#include "source/fetch.h"
#include "source/http.h"
#include "source/reader.h"

#define N_CORPUS ((size_t)(1u << 20) + 123) /* not a multiple of a page */
#define KEYS 64

static char g_dir[4096], g_corpus[4300], g_big[4300];
static uint8_t *g_data; /* the corpus's bytes */
static int g_have_uring;

static uint8_t pat(uint64_t i) { return (uint8_t)((((i >> 3) * 0x9E3779B97F4A7C15ULL) >> 56) ^ i); }

static int bytes_ok(const uint8_t *d, size_t n, uint64_t off)
{
    for (size_t i = 0; i < n; i++)
        if (d[i] != pat(off + i)) {
            fprintf(stderr, "byte %zu of the range at %llu: %u, want %u\n", i,
                    (unsigned long long)off, d[i], pat(off + i));
            return 0;
        }
    return 1;
}

static int has(const char *msg, const char *what)
{
    if (strstr(msg, what)) return 1;
    fprintf(stderr, "message '%s' lacks '%s'\n", msg, what);
    return 0;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void write_file(const char *path, const uint8_t *d, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || (n && write(fd, d, n) != (ssize_t)n) || fsync(fd) != 0 || close(fd) != 0) {
        fprintf(stderr, "write %s: %s\n", path, strerror(errno));
        exit(1);
    }
}

/* ---- fetcher plumbing ---------------------------------------------------- */

typedef struct env {
    nst_fetch_env e;
    nst_throttle t;
    atomic_int stop;
    nst_cache *cache;
    _Atomic uint8_t *reading;
} env;

static void env_init(env *v, int reader, int with_cache, uint64_t max_bytes)
{
    memset(v, 0, sizeof *v);
    nst_throttle_init(&v->t, 0, 0);
    atomic_init(&v->stop, 0);
    if (with_cache) {
        if (nst_cache_create(&v->cache, 64u << 20, KEYS) < 0) exit(1);
        v->reading = calloc(KEYS, sizeof *v->reading);
        if (!v->reading) exit(1);
    }
    v->e.cache = v->cache;
    v->e.reading = v->reading;
    v->e.throttle = &v->t;
    v->e.stop = &v->stop;
    v->e.max_file_bytes = max_bytes;
    v->e.keys = KEYS;
    v->e.reader = reader;
    v->e.http_timeout_ms = 60000;
    v->e.http_retries = 2;
    v->e.http_verify_tls = 1;
}

static void env_free(env *v)
{
    nst_cache_free(v->cache);
    free((void *)v->reading);
    nst_throttle_destroy(&v->t);
}

static nst_fetcher *make(env *v, uint32_t depth)
{
    nst_fetcher *f = NULL;
    CHECK_OK(nst_fetcher_create(&f, &v->e, depth, depth));
    if (f && v->e.reader == NOSTALL_READER_IO_URING)
        CHECK(strcmp(nst_fetcher_reader(f), "io_uring") == 0);
    if (f && v->e.reader == NOSTALL_READER_PREAD)
        CHECK(strcmp(nst_fetcher_reader(f), "pread") == 0);
    return f;
}

/* One fetch to completion; the result stays valid until the next call. */
typedef struct got {
    int status;
    size_t len;
    uint8_t *data;
    char msg[NST_ERROR_MAX];
    nst_fetch_io io;
} got;

static got g_got;

static const got *fetch1(nst_fetcher *f, uint64_t key, const char *path, uint64_t off, uint64_t len)
{
    free(g_got.data);
    memset(&g_got, 0, sizeof g_got);
    g_got.status = 999;
    nst_fetch_submit_range(f, key, path, off, len);
    nst_fetch_req *r = nst_fetch_next(f);
    CHECK(r != NULL);
    if (!r) return &g_got;
    CHECK_EQ(r->index, key);
    CHECK_EQ(r->offset, off);
    CHECK_EQ(r->length, len);
    g_got.status = r->status;
    g_got.len = r->status == 0 ? r->len : 0;
    g_got.io = r->io;
    snprintf(g_got.msg, sizeof g_got.msg, "%s", r->msg);
    if (g_got.len) {
        g_got.data = malloc(g_got.len);
        if (!g_got.data) exit(1);
        memcpy(g_got.data, r->data, g_got.len);
    }
    nst_fetch_release(f);
    CHECK_EQ(nst_fetch_pending(f), 0);
    return &g_got;
}

/* A range that must succeed with the corpus's bytes. */
static void want_range(nst_fetcher *f, uint64_t key, const char *path, uint64_t off, uint64_t len)
{
    const got *g = fetch1(f, key, path, off, len);
    if (g->status != 0)
        fprintf(stderr, "range %llu+%llu: %s\n", (unsigned long long)off, (unsigned long long)len,
                g->msg);
    CHECK_EQ(g->status, 0);
    CHECK_EQ(g->len, len ? len : N_CORPUS);
    if (g->len) CHECK(bytes_ok(g->data, g->len, off));
}

/* A failure with `status` whose message holds each of the NULL-ended list. */
static void want_fail(nst_fetcher *f, uint64_t key, const char *path, uint64_t off, uint64_t len,
                      int status, ...)
{
    const got *g = fetch1(f, key, path, off, len);
    CHECK_EQ(g->status, status);
    if (g->status != status) fprintf(stderr, "  message: %s\n", g->msg);
    va_list ap;
    va_start(ap, status);
    for (const char *w; (w = va_arg(ap, const char *)) != NULL;) CHECK(has(g->msg, w));
    va_end(ap);
}

/* ---- local files ----------------------------------------------------------- */

/* Start, middle, end, single bytes and whole files, one at a time. */
static void local_basic(int reader, uint32_t depth)
{
    env v;
    env_init(&v, reader, 0, 1u << 30);
    nst_fetcher *f = make(&v, depth);
    if (!f) return;
    want_range(f, 0, g_corpus, 0, 100);
    want_range(f, 1, g_corpus, 12345, 4096);
    want_range(f, 2, g_corpus, N_CORPUS - 777, 777);
    want_range(f, 3, g_corpus, N_CORPUS - 1, 1);
    want_range(f, 4, g_corpus, 0, N_CORPUS); /* the whole file as a range */
    want_range(f, 5, g_corpus, 0, 0);        /* the whole file */
    want_range(f, 6, g_corpus, 4095, 2);     /* across a page boundary */
    nst_fetch_submit(f, 7, g_corpus);        /* the old entry point */
    nst_fetch_req *r = nst_fetch_next(f);
    CHECK(r && r->status == 0 && r->len == N_CORPUS && r->offset == 0 && r->length == 0);
    if (r && r->status == 0) CHECK(bytes_ok(r->data, r->len, 0));
    nst_fetch_release(f);
    nst_fetcher_free(f);
    env_free(&v);
}

/* Many ranges in flight, completed in submission order. */
static void local_many(int reader, uint32_t depth)
{
    enum { NR = 300 };
    env v;
    env_init(&v, reader, 0, 1u << 30);
    v.e.keys = 0; /* no cache: keys unchecked */
    nst_fetcher *f = make(&v, depth);
    if (!f) return;
    uint64_t off[NR], len[NR], seed = 7 + depth + (uint64_t)reader;
    for (int i = 0; i < NR; i++) {
        len[i] = 1 + splitmix(&seed) % (i % 3 == 0 ? 200000 : 5000);
        off[i] = splitmix(&seed) % (N_CORPUS - len[i] + 1);
    }
    int sub = 0, done = 0, maxpend = 0;
    while (done < NR) {
        while (sub < NR && nst_fetch_room(f) > 0) {
            nst_fetch_submit_range(f, (uint64_t)sub, g_corpus, off[sub], len[sub]);
            sub++;
        }
        if ((int)nst_fetch_pending(f) > maxpend) maxpend = (int)nst_fetch_pending(f);
        nst_fetch_req *r = nst_fetch_next(f);
        CHECK(r != NULL);
        if (!r) break;
        CHECK_EQ(r->index, done);
        CHECK_EQ(r->status, 0);
        CHECK_EQ(r->len, len[done]);
        if (r->status == 0 && r->len == len[done] && !bytes_ok(r->data, r->len, off[done]))
            check_failures_++;
        CHECK_EQ(r->io.storage_bytes, len[done]);
        nst_fetch_release(f);
        done++;
    }
    CHECK_EQ(maxpend, depth);
    nst_fetcher_free(f);
    env_free(&v);
}

/* What cannot be read: past the end, too large, bad ranges and keys,
 * special files. */
static void local_errors(int reader, uint32_t depth)
{
    env v;
    env_init(&v, reader, 0, 1u << 30);
    nst_fetcher *f = make(&v, depth);
    if (!f) return;
    char want[256], path[4300];
    snprintf(want, sizeof want, "bytes %zu-%zu asked, the file has %zu", N_CORPUS - 50,
             N_CORPUS + 49, N_CORPUS);
    want_fail(f, 0, g_corpus, N_CORPUS - 50, 100, NOSTALL_E_TRUNCATED, g_corpus, want, (char *)NULL);
    snprintf(want, sizeof want, "bytes %zu-%zu asked, the file has %zu", N_CORPUS + 10,
             N_CORPUS + 19, N_CORPUS);
    want_fail(f, 1, g_corpus, N_CORPUS + 10, 10, NOSTALL_E_TRUNCATED, want, (char *)NULL);
    snprintf(want, sizeof want, "bytes 0-%zu asked, the file has %zu", N_CORPUS, N_CORPUS);
    want_fail(f, 1, g_corpus, 0, N_CORPUS + 1, NOSTALL_E_TRUNCATED, want, (char *)NULL);
    /* The requests after a failure are unharmed. */
    want_range(f, 2, g_corpus, N_CORPUS - 50, 50);
    want_fail(f, 3, g_corpus, 100, 0, NOSTALL_E_INVALID, "offset 100 with length 0", (char *)NULL);
    want_fail(f, 3, g_corpus, UINT64_MAX - 5, 10, NOSTALL_E_INVALID, "past 2^63", (char *)NULL);
    want_fail(f, KEYS, g_corpus, 0, 10, NOSTALL_E_INVALID, "key 64", (char *)NULL);
    snprintf(path, sizeof path, "%s/missing.bin", g_dir);
    want_fail(f, 4, path, 0, 10, NOSTALL_E_NOT_FOUND, "no such file", (char *)NULL);
    want_fail(f, 4, g_dir, 0, 10, NOSTALL_E_IO, "is a directory", (char *)NULL);
    snprintf(path, sizeof path, "%s/dangling", g_dir);
    want_fail(f, 4, path, 0, 10, NOSTALL_E_NOT_FOUND, "symlink target missing", (char *)NULL);
    snprintf(path, sizeof path, "%s/empty.bin", g_dir);
    want_fail(f, 4, path, 0, 1, NOSTALL_E_TRUNCATED, "bytes 0-0 asked, the file has 0",
              (char *)NULL);
    want_fail(f, 4, path, 0, 0, NOSTALL_E_EMPTY, "empty file", (char *)NULL);
    nst_fetcher_free(f);
    env_free(&v);

    /* The limit applies to the range. */
    env_init(&v, reader, 0, 4096);
    f = make(&v, depth);
    if (!f) return;
    want_fail(f, 0, g_corpus, 100, 4097, NOSTALL_E_FILE_TOO_LARGE, g_corpus,
              "bytes 100-4196 asked: 4097 bytes is over max_file_bytes=4096", (char *)NULL);
    want_range(f, 1, g_corpus, 100, 4096);
    want_fail(f, 2, g_corpus, 0, 0, NOSTALL_E_FILE_TOO_LARGE, "over max_file_bytes=4096",
              (char *)NULL); /* the whole file, as before */
    nst_fetcher_free(f);
    env_free(&v);

    /* An 8 GiB (sparse) file under a 1 GiB limit, read in small windows. */
    if (g_big[0]) {
        env_init(&v, reader, 0, 1u << 30);
        f = make(&v, depth);
        if (!f) return;
        const uint64_t at = 6ull << 30;
        const got *g = fetch1(f, 0, g_big, at - 2, 8);
        CHECK_EQ(g->status, 0);
        CHECK(g->len == 8 && memcmp(g->data, "\0\0MARK\0\0", 8) == 0);
        want_fail(f, 1, g_big, at, (1ull << 30) + 1, NOSTALL_E_FILE_TOO_LARGE,
                  "over max_file_bytes=1073741824", (char *)NULL);
        want_fail(f, 2, g_big, 0, 0, NOSTALL_E_FILE_TOO_LARGE, "8589934592 bytes is over",
                  (char *)NULL);
        snprintf(want, sizeof want, "bytes %llu-%llu asked, the file has %llu",
                 (unsigned long long)(8ull << 30) - 4, (unsigned long long)(8ull << 30) + 3,
                 (unsigned long long)(8ull << 30));
        want_fail(f, 3, g_big, (8ull << 30) - 4, 8, NOSTALL_E_TRUNCATED, want, (char *)NULL);
        nst_fetcher_free(f);
        env_free(&v);
    }
}

/* A real short read: sysfs attributes say 4096 bytes and hold a few. The
 * first read returns what there is, the resubmission at offset + that
 * returns 0: E_TRUNCATED with the size the file really has (a resubmission
 * at the wrong offset would read some bytes again and count them). */
static void local_short_read(int reader, uint32_t depth)
{
    static const char *const sys = "/sys/devices/system/cpu/possible";
    struct stat st;
    char content[4096];
    int fd = open(sys, O_RDONLY);
    ssize_t n = fd >= 0 ? read(fd, content, sizeof content) : -1;
    if (fd >= 0) close(fd);
    if (n < 3 || stat(sys, &st) != 0 || st.st_size < 4096) {
        printf("short reads: %s is not a sysfs attribute here: skipped\n", sys);
        return;
    }
    env v;
    env_init(&v, reader, 0, 1u << 30);
    nst_fetcher *f = make(&v, depth);
    if (!f) return;
    char want[128];
    snprintf(want, sizeof want, "bytes 1-4095 asked, the file has %zd", n);
    want_fail(f, 0, sys, 1, 4095, NOSTALL_E_TRUNCATED, sys, want, (char *)NULL);
    nst_fetcher_free(f);
    env_free(&v);
}

/* Keys, the cache and the peer hooks. */
typedef struct peer_log {
    int puts, gets;
    uint64_t last_key;
    size_t last_len;
    uint8_t first;
} peer_log;

static int peer_get(void *ctx, uint64_t key, nostall_fetch_buf *buf, size_t *len)
{
    (void)key, (void)buf, (void)len;
    ((peer_log *)ctx)->gets++;
    return 0;
}

static void peer_put(void *ctx, uint64_t key, const void *data, size_t len)
{
    peer_log *p = ctx;
    p->puts++;
    p->last_key = key;
    p->last_len = len;
    p->first = *(const uint8_t *)data;
}

static void local_cache(int reader, uint32_t depth)
{
    env v;
    peer_log log = {0};
    nostall_peer_cache pc = {.ctx = &log, .get = peer_get, .put = peer_put};
    env_init(&v, reader, 1, 1u << 30);
    v.e.peer = &pc;
    nst_fetcher *f = make(&v, depth);
    if (!f) return;
    /* Two ranges of one file under two keys, and the whole file. */
    want_range(f, 3, g_corpus, 1000, 500);
    CHECK(g_got.io.cache_miss && g_got.io.storage_read && !g_got.io.cache_hit);
    CHECK(log.puts == 1 && log.last_key == 3 && log.last_len == 500 && log.first == pat(1000));
    want_range(f, 4, g_corpus, 5000, 700);
    CHECK(g_got.io.cache_miss && g_got.io.storage_read);
    CHECK(log.puts == 2 && log.last_key == 4 && log.last_len == 700 && log.first == pat(5000));
    want_range(f, 5, g_corpus, 0, 0);
    CHECK(g_got.io.cache_miss && g_got.io.storage_read);
    /* Hits, each with its own bytes. */
    want_range(f, 3, g_corpus, 1000, 500);
    CHECK(g_got.io.cache_hit && !g_got.io.storage_read && !g_got.io.cache_miss);
    want_range(f, 4, g_corpus, 5000, 700);
    CHECK(g_got.io.cache_hit && !g_got.io.storage_read);
    want_range(f, 5, g_corpus, 0, 0);
    CHECK(g_got.io.cache_hit);
    CHECK_EQ(log.puts, 3);
    CHECK_EQ(log.gets, 3);
    /* A hit is the key's bytes, whatever range is asked (the caller keeps
     * one range per key). */
    const got *g = fetch1(f, 3, g_corpus, 0, 10);
    CHECK(g->status == 0 && g->io.cache_hit && g->len == 500 && bytes_ok(g->data, 500, 1000));
    nst_cache_stats cs;
    nst_cache_stats_get(v.cache, &cs);
    CHECK_EQ(cs.items, 3);
    CHECK_EQ(cs.bytes, 500 + 700 + N_CORPUS);
    for (int k = 0; k < KEYS; k++) CHECK_EQ(atomic_load(&v.reading[k]), 0);
    nst_fetcher_free(f);
    env_free(&v);
}

/* Residency of each page of `path` (size n): 1 resident, 0 not. */
static int resident(const char *path, size_t n, unsigned char *vec)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    void *p = mmap(NULL, n, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return -1;
    int rc = mincore(p, n, vec);
    munmap(p, n);
    for (size_t i = 0; i < (n + 4095) / 4096; i++) vec[i] &= 1;
    return rc;
}

static void load_pages(const char *path)
{
    nst_buf b = {0};
    size_t len;
    CHECK_OK(nst_read_file(path, 1u << 30, 0, &b, &len));
    nst_buf_free(&b);
}

/* With a cache, only the range's pages leave the page cache. */
static void local_drop_pages(int reader)
{
    enum { PAGES = 64, PG = 4096 };
    const size_t n = PAGES * PG;
    char path[4300];
    unsigned char vec[PAGES];
    snprintf(path, sizeof path, "%s/pages.bin", g_dir);
    write_file(path, g_data, n);
    /* Does this filesystem drop pages at all? */
    load_pages(path);
    int fd = open(path, O_RDONLY);
    if (fd < 0) exit(1);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    if (resident(path, n, vec) != 0 || vec[0] || vec[PAGES - 1]) {
        printf("page cache: DONTNEED does not drop pages here (tmpfs?): range drop skipped\n");
        return;
    }
    load_pages(path);
    if (resident(path, n, vec) != 0) return;
    for (int i = 0; i < PAGES; i++)
        if (!vec[i]) {
            printf("page cache: pages not resident after reading: range drop skipped\n");
            return;
        }
    env v;
    env_init(&v, reader, 1, 1u << 30);
    nst_fetcher *f = make(&v, 1);
    if (!f) return;
    const got *g = fetch1(f, 0, path, 16 * PG, 16 * PG);
    CHECK(g->status == 0 && g->len == 16 * PG && bytes_ok(g->data, g->len, 16 * PG));
    CHECK(g->io.storage_read);
    CHECK_EQ(resident(path, n, vec), 0);
    int in = 0, out = 0;
    for (int i = 0; i < PAGES; i++) {
        if (i >= 16 && i < 32)
            in += vec[i];
        else
            out += vec[i];
    }
    CHECK_EQ(in, 0);           /* the range's pages went */
    CHECK_EQ(out, PAGES - 16); /* the others stayed */
    /* A whole file drops all of it, as before. */
    load_pages(path);
    g = fetch1(f, 1, path, 0, 0);
    CHECK(g->status == 0 && g->len == n);
    CHECK_EQ(resident(path, n, vec), 0);
    out = 0;
    for (int i = 0; i < PAGES; i++) out += vec[i];
    CHECK_EQ(out, 0);
    nst_fetcher_free(f);
    env_free(&v);
}

/* Emulated storage schedules the range's bytes: at 10 MB/s a read of L
 * bytes occupies the device L * 100 ns from when it was issued. */
static void local_throttle(int reader)
{
    env v;
    env_init(&v, reader, 0, 1u << 30);
    nst_throttle_destroy(&v.t);
    nst_throttle_init(&v.t, 10, 0);
    nst_fetcher *f = make(&v, 1);
    if (!f) return;
    const uint64_t L = 65536, per = 100;
    uint64_t t0 = nst_now_ns();
    nst_fetch_submit_range(f, 0, g_corpus, 4096, L);
    uint64_t t1 = nst_now_ns(), dev = v.t.device_free_ns;
    CHECK(dev >= t0 + L * per);
    CHECK(dev <= t1 + L * per); /* the whole file would be 16x this */
    nst_fetch_req *r = nst_fetch_next(f);
    CHECK(r && r->status == 0 && r->len == L);
    CHECK(nst_now_ns() >= dev); /* held back until the device is done */
    nst_fetch_release(f);
    /* The whole file: all its bytes (the device is free again by now). */
    t0 = nst_now_ns();
    nst_fetch_submit(f, 1, g_corpus);
    t1 = nst_now_ns();
    dev = v.t.device_free_ns;
    CHECK(dev >= t0 + N_CORPUS * per && dev <= t1 + N_CORPUS * per);
    r = nst_fetch_next(f);
    CHECK(r && r->status == 0 && r->len == N_CORPUS);
    nst_fetch_release(f);
    nst_fetcher_free(f);
    env_free(&v);
}

/* The reader's own entry point (no fetcher): what nst_fetch_submit_range's
 * pread path is built from. */
static void reader_direct(void)
{
    nst_buf b = {0};
    size_t len = 99;
    char want[160];
    CHECK_OK(nst_read_range(g_corpus, 300000, 5000, 5000, NST_READ_DROP_CACHE, &b, &len));
    CHECK(len == 5000 && bytes_ok(b.data, len, 300000));
    CHECK_OK(nst_read_range(g_corpus, 0, 0, 1u << 30, 0, &b, &len));
    CHECK(len == N_CORPUS && bytes_ok(b.data, len, 0));
    CHECK_RC(nst_read_range(g_corpus, 0, 5001, 5000, 0, &b, &len), NOSTALL_E_FILE_TOO_LARGE);
    CHECK_EQ(len, 0);
    CHECK_RC(nst_read_range(g_corpus, N_CORPUS - 1, 2, 5000, 0, &b, &len), NOSTALL_E_TRUNCATED);
    snprintf(want, sizeof want, "read: %s: bytes %zu-%zu asked, the file has %zu", g_corpus,
             N_CORPUS - 1, N_CORPUS, N_CORPUS);
    CHECK(has(nostall_last_error(), want));
    CHECK_RC(nst_read_range(g_corpus, 1, 0, 5000, 0, &b, &len), NOSTALL_E_INVALID);
    nst_buf_free(&b);
}

static void local_all(int reader, const char *name)
{
    static const uint32_t depths[] = {1, 8};
    for (int d = 0; d < 2; d++) {
        printf("%s, depth %u\n", name, depths[d]);
        local_basic(reader, depths[d]);
        local_many(reader, depths[d]);
        local_errors(reader, depths[d]);
        local_short_read(reader, depths[d]);
        local_cache(reader, depths[d]);
    }
    local_drop_pages(reader);
    local_throttle(reader);
}

/* ---- HTTP: a loopback server ---------------------------------------------- */

enum {
    M_RANGE,
    M_NORANGE,
    M_STALL200,
    M_SHORT1,
    M_SHORTALL,
    M_SHORTNOCL,
    M_BADSTART,
    M_LONGCLEN,
    M_LONGBODY,
    M_NOCR,
    M_COUNT
};
static const char *const g_mode[M_COUNT] = {"range",    "norange",   "stall200", "short1",
                                            "shortall", "shortnocl", "badstart", "longclen",
                                            "longbody", "nocr"};
static atomic_int g_hits[M_COUNT], g_active, g_srv_stop;
static int g_lfd = -1, g_port;
static pthread_t g_acceptor;

static void send_all(int c, const void *p, size_t n)
{
    const char *b = p;
    while (n) {
        ssize_t k = send(c, b, n, MSG_NOSIGNAL);
        if (k <= 0) {
            if (k < 0 && errno == EINTR) continue;
            return; /* the client went away (it may abort on purpose) */
        }
        b += k;
        n -= (size_t)k;
    }
}

static void send_head(int c, const char *fmt, ...) NST_PRINTF(2, 3);
static void send_head(int c, const char *fmt, ...)
{
    char h[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(h, sizeof h, fmt, ap);
    va_end(ap);
    if (n > 0) send_all(c, h, (size_t)n < sizeof h ? (size_t)n : sizeof h - 1);
}

/* Read the request's head; the mode and the Range (a, b; has = 0 if none). */
static int read_request(int c, int *mode, int *has, uint64_t *a, uint64_t *b)
{
    char req[8192], name[32];
    size_t n = 0;
    struct timeval tv = {30, 0};
    setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    for (;;) {
        ssize_t k = recv(c, req + n, sizeof req - 1 - n, 0);
        if (k <= 0) return -1;
        n += (size_t)k;
        req[n] = '\0';
        if (strstr(req, "\r\n\r\n")) break;
        if (n == sizeof req - 1) return -1;
    }
    if (sscanf(req, "GET /%31[^/]/", name) != 1) return -1;
    *mode = -1;
    for (int m = 0; m < M_COUNT; m++)
        if (strcmp(name, g_mode[m]) == 0) *mode = m;
    if (*mode < 0) return -1;
    const char *r = strcasestr(req, "\r\nRange: bytes=");
    *has = 0;
    if (r) {
        char *e;
        *a = strtoull(r + 15, &e, 10);
        if (*e != '-') return -1;
        *b = strtoull(e + 1, &e, 10);
        *has = 1;
    }
    return 0;
}

static void serve(int c)
{
    int m, has;
    uint64_t a = 0, b = 0;
    if (read_request(c, &m, &has, &a, &b) < 0) return;
    int hit = atomic_fetch_add(&g_hits[m], 1);
    const uint64_t N = N_CORPUS;
    if (!has || m == M_NORANGE) {
        send_head(c, "HTTP/1.1 200 OK\r\nContent-Length: %llu\r\nConnection: close\r\n\r\n",
                  (unsigned long long)N);
        send_all(c, g_data, N);
        return;
    }
    if (m == M_STALL200) {
        send_head(c, "HTTP/1.1 200 OK\r\nContent-Length: %llu\r\nConnection: close\r\n\r\n",
                  (unsigned long long)N);
        char x;
        while (recv(c, &x, 1, 0) > 0) continue; /* until the client gives up */
        return;
    }
    if (a >= N) {
        send_head(c,
                  "HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */%llu\r\n"
                  "Content-Length: 0\r\nConnection: close\r\n\r\n",
                  (unsigned long long)N);
        return;
    }
    uint64_t e = b < N ? b : N - 1, len = e - a + 1, s = a, extra = 0;
    int cut = (m == M_SHORT1 && hit == 0) || m == M_SHORTALL || m == M_SHORTNOCL;
    if (m == M_BADSTART) s = a + 1, e = e + 1 < N ? e + 1 : e, len = e - s + 1;
    if (m == M_LONGCLEN || m == M_LONGBODY) extra = s + len + 100 <= N ? 100 : 0;
    char cr[128] = "", cl[64] = "";
    if (m != M_NOCR)
        snprintf(cr, sizeof cr, "Content-Range: bytes %llu-%llu/%llu\r\n", (unsigned long long)s,
                 (unsigned long long)e, (unsigned long long)N);
    if (m != M_LONGBODY && m != M_SHORTNOCL) /* else the body ends with the connection */
        snprintf(cl, sizeof cl, "Content-Length: %llu\r\n", (unsigned long long)(len + extra));
    send_head(c, "HTTP/1.1 206 Partial Content\r\n%s%sConnection: close\r\n\r\n", cr, cl);
    send_all(c, g_data + s, cut ? len / 2 : len + extra);
}

static void *conn_main(void *arg)
{
    int c = (int)(intptr_t)arg;
    serve(c);
    shutdown(c, SHUT_WR);
    close(c);
    atomic_fetch_sub(&g_active, 1);
    return NULL;
}

static void *acceptor(void *arg)
{
    (void)arg;
    while (!atomic_load(&g_srv_stop)) {
        struct pollfd p = {.fd = g_lfd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0) continue;
        int c = accept(g_lfd, NULL, NULL);
        if (c < 0) continue;
        pthread_t t;
        atomic_fetch_add(&g_active, 1);
        if (pthread_create(&t, NULL, conn_main, (void *)(intptr_t)c) != 0) {
            close(c);
            atomic_fetch_sub(&g_active, 1);
            continue;
        }
        pthread_detach(t);
    }
    return NULL;
}

static int server_start(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    int one = 1;
    g_lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (g_lfd < 0 || setsockopt(g_lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(g_lfd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(g_lfd, 128) != 0 ||
        getsockname(g_lfd, (struct sockaddr *)&sa, &sl) != 0) {
        fprintf(stderr, "loopback server: %s\n", strerror(errno));
        return -1;
    }
    g_port = ntohs(sa.sin_port);
    if (pthread_create(&g_acceptor, NULL, acceptor, NULL) != 0) return -1;
    return 0;
}

static void server_stop(void)
{
    atomic_store(&g_srv_stop, 1);
    pthread_join(g_acceptor, NULL);
    close(g_lfd);
    for (int i = 0; i < 3000 && atomic_load(&g_active) > 0; i++) usleep(10000);
    CHECK_EQ(atomic_load(&g_active), 0);
}

static const char *url(int mode)
{
    static char u[128];
    snprintf(u, sizeof u, "http://127.0.0.1:%d/%s/corpus.bin", g_port, g_mode[mode]);
    return u;
}

static void http_success(uint32_t depth)
{
    env v;
    env_init(&v, NOSTALL_READER_PREAD, 0, 1u << 30);
    v.e.keys = 0; /* no cache: keys unchecked */
    nst_fetcher *f = make(&v, depth);
    if (!f) return;
    char u[128];
    snprintf(u, sizeof u, "%s", url(M_RANGE));
    want_range(f, 0, u, 0, 100);
    CHECK_EQ(g_got.io.http_transfers, 1);
    want_range(f, 1, u, 500000, 70000);
    want_range(f, 2, u, N_CORPUS - 1, 1);
    /* The next transfer after ranges reuses a slot: its Range is gone. */
    int before = atomic_load(&g_hits[M_RANGE]);
    want_range(f, 3, u, 0, 0);
    CHECK_EQ(atomic_load(&g_hits[M_RANGE]), before + 1);
    want_range(f, 4, u, 4096, 4096);
    /* Many in flight. */
    enum { NR = 64 };
    uint64_t off[NR], len[NR], seed = 99 + depth;
    for (int i = 0; i < NR; i++) {
        len[i] = 1 + splitmix(&seed) % 100000;
        off[i] = splitmix(&seed) % (N_CORPUS - len[i] + 1);
    }
    int sub = 0, done = 0;
    while (done < NR) {
        while (sub < NR && nst_fetch_room(f) > 0) {
            nst_fetch_submit_range(f, (uint64_t)sub, u, off[sub], len[sub]);
            sub++;
        }
        nst_fetch_req *r = nst_fetch_next(f);
        CHECK(r != NULL);
        if (!r) break;
        CHECK_EQ(r->index, done);
        if (r->status) fprintf(stderr, "%s\n", r->msg);
        CHECK_EQ(r->status, 0);
        CHECK_EQ(r->len, len[done]);
        if (r->status == 0 && r->len == len[done] && !bytes_ok(r->data, r->len, off[done]))
            check_failures_++;
        nst_fetch_release(f);
        done++;
    }
    nst_fetcher_free(f);
    env_free(&v);
}

static void http_errors(void)
{
    env v;
    env_init(&v, NOSTALL_READER_PREAD, 0, 1u << 30);
    nst_fetcher *f = make(&v, 4);
    if (!f) return;
    char w[256];
    /* 200 to a Range request. */
    want_fail(f, 0, url(M_NORANGE), 100, 100, NOSTALL_E_IO, url(M_NORANGE),
              "bytes 100-199 asked: the server does not support range requests", (char *)NULL);
    want_fail(f, 0, url(M_STALL200), 0, 100, NOSTALL_E_IO, "does not support range requests",
              (char *)NULL); /* aborted at the headers: no body, no timeout */
    CHECK_EQ(atomic_load(&g_hits[M_STALL200]), 1);
    want_range(f, 1, url(M_NORANGE), 0, N_CORPUS); /* all of it, from 0: fine */
    /* Past the end. */
    snprintf(w, sizeof w, "bytes %zu-%zu asked, the file has %zu (HTTP 416)", N_CORPUS + 5,
             N_CORPUS + 14, N_CORPUS);
    want_fail(f, 2, url(M_RANGE), N_CORPUS + 5, 10, NOSTALL_E_TRUNCATED, url(M_RANGE), w,
              (char *)NULL);
    snprintf(w, sizeof w, "bytes %zu-%zu asked, the file has %zu", N_CORPUS - 5, N_CORPUS + 4,
             N_CORPUS);
    want_fail(f, 2, url(M_RANGE), N_CORPUS - 5, 10, NOSTALL_E_TRUNCATED, w, (char *)NULL);
    /* Cut short: once (retried), always (given up). */
    want_range(f, 3, url(M_SHORT1), 1000, 50000);
    CHECK_EQ(g_got.io.http_transfers, 2);
    CHECK_EQ(g_got.io.http_retries, 1);
    CHECK_EQ(atomic_load(&g_hits[M_SHORT1]), 2);
    want_fail(f, 3, url(M_SHORTALL), 1000, 50000, NOSTALL_E_IO, "cut short", "after 3 attempts",
              (char *)NULL);
    CHECK_EQ(atomic_load(&g_hits[M_SHORTALL]), 3);
    /* ... also when no Content-Length tells curl (the connection's end does). */
    want_fail(f, 3, url(M_SHORTNOCL), 1000, 50000, NOSTALL_E_IO,
              "body cut short: got 25000 of the 50000 bytes asked", "after 3 attempts",
              (char *)NULL);
    CHECK_EQ(atomic_load(&g_hits[M_SHORTNOCL]), 3);
    /* Not the range asked: never retried. */
    want_fail(f, 4, url(M_BADSTART), 1000, 100, NOSTALL_E_IO,
              "bytes 1000-1099 asked: the server sends bytes 1001-1100", "not start at the offset",
              (char *)NULL);
    want_fail(f, 4, url(M_LONGCLEN), 1000, 100, NOSTALL_E_IO, "Content-Length 200, more than",
              (char *)NULL);
    want_fail(f, 4, url(M_LONGBODY), 1000, 100, NOSTALL_E_IO, "more than the 100 bytes asked",
              (char *)NULL);
    want_fail(f, 4, url(M_NOCR), 1000, 100, NOSTALL_E_IO, "without a usable Content-Range",
              (char *)NULL);
    CHECK_EQ(atomic_load(&g_hits[M_BADSTART]) + atomic_load(&g_hits[M_LONGCLEN]) +
                 atomic_load(&g_hits[M_LONGBODY]) + atomic_load(&g_hits[M_NOCR]),
             4);
    nst_fetcher_free(f);
    env_free(&v);

    /* The limit applies to the range; nothing is sent for one over it. */
    env_init(&v, NOSTALL_READER_PREAD, 0, 4096);
    f = make(&v, 1);
    if (!f) return;
    int before = atomic_load(&g_hits[M_RANGE]);
    want_fail(f, 0, url(M_RANGE), 0, 4097, NOSTALL_E_FILE_TOO_LARGE, url(M_RANGE),
              "over max_file_bytes=4096", (char *)NULL);
    CHECK_EQ(atomic_load(&g_hits[M_RANGE]), before);
    want_range(f, 1, url(M_RANGE), 10000, 4096);
    nst_fetcher_free(f);
    env_free(&v);

    /* The HTTP layer checks on its own too. */
    nst_http_opts o = {.max_inflight = 1,
                       .timeout_ms = 60000,
                       .retries = 0,
                       .verify_tls = 1,
                       .max_bytes = 4096};
    nst_http *h = NULL;
    nst_buf b = {0};
    CHECK_OK(nst_http_create(&h, &o));
    if (h) {
        CHECK_RC(nst_http_submit_range(h, url(M_RANGE), 0, 4097, &b, 1), NOSTALL_E_FILE_TOO_LARGE);
        CHECK_RC(nst_http_submit_range(h, url(M_RANGE), 7, 0, &b, 1), NOSTALL_E_INVALID);
        CHECK_EQ(nst_http_inflight(h), 0);
        CHECK_OK(nst_http_submit_range(h, url(M_RANGE), 77, 4096, &b, 1));
        nst_http_done d = {0};
        int w2 = 0;
        for (int i = 0; i < 600 && w2 == 0; i++) w2 = nst_http_wait(h, 100, &d);
        CHECK_EQ(w2, 1);
        CHECK(d.status == 0 && d.len == 4096 && bytes_ok(b.data, 4096, 77));
    }
    nst_http_free(h);
    nst_buf_free(&b);
}

/* Emulated storage schedules a transfer's range bytes when it lands. */
static void http_throttle(void)
{
    env v;
    env_init(&v, NOSTALL_READER_PREAD, 0, 1u << 30);
    nst_throttle_destroy(&v.t);
    nst_throttle_init(&v.t, 10, 0);
    nst_fetcher *f = make(&v, 1);
    if (!f) return;
    uint64_t t0 = nst_now_ns();
    nst_fetch_submit_range(f, 0, url(M_RANGE), 4096, 65536);
    nst_fetch_req *r = nst_fetch_next(f);
    uint64_t t1 = nst_now_ns(), dev = v.t.device_free_ns;
    CHECK(r && r->status == 0 && r->len == 65536);
    CHECK(dev >= t0 + 65536 * 100 && dev <= t1 + 65536 * 100);
    nst_fetch_release(f);
    nst_fetcher_free(f);
    env_free(&v);
}

/* nginx, where installed: real Range answers. */
static void http_nginx(void)
{
    char ndir[4300];
    int port;
    snprintf(ndir, sizeof ndir, "%s/nginx", g_dir);
    int rc = nginx_start(ndir, g_dir, NULL, &port);
    if (rc == 77) {
        printf("nginx not installed: its part skipped\n");
        return;
    }
    CHECK_EQ(rc, 0);
    if (rc) return;
    char u[256], w[256];
    printf("http, nginx on port %d\n", port);
    snprintf(u, sizeof u, "http://127.0.0.1:%d/corpus.bin", port);
    env v;
    env_init(&v, NOSTALL_READER_PREAD, 1, 1u << 30);
    nst_fetcher *f = make(&v, 8);
    if (f) {
        want_range(f, 0, u, 0, 100);
        want_range(f, 1, u, 777777, 65536);
        want_range(f, 2, u, N_CORPUS - 10, 10);
        want_range(f, 1, u, 777777, 65536);
        CHECK(g_got.io.cache_hit);
        snprintf(w, sizeof w, "bytes %zu-%zu asked", N_CORPUS, N_CORPUS + 9);
        want_fail(f, 3, u, N_CORPUS, 10, NOSTALL_E_TRUNCATED, u, w, (char *)NULL);
        snprintf(w, sizeof w, "bytes %zu-%zu asked, the file has %zu", N_CORPUS - 5, N_CORPUS + 4,
                 N_CORPUS);
        want_fail(f, 4, u, N_CORPUS - 5, 10, NOSTALL_E_TRUNCATED, w, (char *)NULL);
        nst_fetcher_free(f);
    }
    env_free(&v);
    nginx_stop(ndir);
}

/* ---- main ------------------------------------------------------------------ */

static void setup(void)
{
    snprintf(g_dir, sizeof g_dir, "%s", test_tmpdir("fetch_range"));
    g_data = malloc(N_CORPUS);
    if (!g_data) exit(1);
    for (size_t i = 0; i < N_CORPUS; i++) g_data[i] = pat(i);
    snprintf(g_corpus, sizeof g_corpus, "%s/corpus.bin", g_dir);
    write_file(g_corpus, g_data, N_CORPUS);
    char p[4300];
    snprintf(p, sizeof p, "%s/empty.bin", g_dir);
    write_file(p, NULL, 0);
    snprintf(p, sizeof p, "%s/dangling", g_dir);
    if (symlink("nowhere.bin", p) != 0) exit(1);
    /* 8 GiB, sparse, with a marker at 6 GiB. */
    snprintf(g_big, sizeof g_big, "%s/big.bin", g_dir);
    int fd = open(g_big, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ftruncate(fd, (off_t)(8ull << 30)) != 0 ||
        pwrite(fd, "MARK", 4, (off_t)(6ull << 30)) != 4) {
        printf("no 8 GiB sparse file here (%s): its part skipped\n", strerror(errno));
        g_big[0] = '\0';
    }
    if (fd >= 0) close(fd);
}

int main(void)
{
    setup();
    /* io_uring may be refused (seccomp, old kernels): skip its parts. */
    env v;
    env_init(&v, NOSTALL_READER_IO_URING, 0, 1u << 30);
    nst_fetcher *f = NULL;
    g_have_uring = nst_fetcher_create(&f, &v.e, 1, 1) == 0;
    if (!g_have_uring)
        printf("io_uring not available (%s): its parts skipped\n", nostall_last_error());
    nst_fetcher_free(f);
    env_free(&v);

    reader_direct();
    local_all(NOSTALL_READER_PREAD, "pread");
    if (g_have_uring) local_all(NOSTALL_READER_IO_URING, "io_uring");

    if (server_start() == 0) {
        printf("http, loopback server on port %d\n", g_port);
        http_success(1);
        http_success(8);
        http_errors();
        http_throttle();
        server_stop();
    } else {
        CHECK(!"loopback server");
    }
    http_nginx();
    free(g_got.data);
    free(g_data);
    if (g_big[0]) unlink(g_big);
    if (!check_failures_) { /* kept for a look when something failed */
        char cmd[4400];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    }
    TEST_EXIT();
}
