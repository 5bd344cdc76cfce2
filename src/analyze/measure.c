/*
 * measure.c — nostall_analyze_measure(): what the stall analyzer measures
 * without a training step, for the CLI and for Python alike (the runs with
 * the step are the caller's):
 *   dataset   the index (a loader of one thread) and a stat of every local
 *             file: items, bytes, items per epoch, bytes per output item;
 *   machine   the CPUs this process may run on, MemAvailable, the CPU share
 *             it gets now (one busy thread per CPU for 200 ms), memory
 *             bandwidth (memcpy of 64 MiB, best of 4);
 *   storage   cold reads of up to 128 files spread over the dataset,
 *             dropped from the page cache before and after: 24 one at a
 *             time (latency, single-stream bandwidth), the rest 8 in flight;
 *             a dataset of one file (a token corpus): its first 256 MiB;
 *   prep      every file read into the page cache, then the loader alone
 *             (no step, no cache, no emulated storage, no echo): process CPU
 *             time per item and the workers' busy split; with prep servers,
 *             that run is the trainer's own threads alone, and one with
 *             the servers (two epochs, the second counted) gives their
 *             rate, bytes, request-to-reply time and the trainer's CPU to
 *             receive (srv_*);
 *   restart   a sample of up to 96 JPEG items as nostall_transcode_jpeg()
 *             leaves them (rewritten, or kept as they are: files that
 *             already have restart markers, CMYK, ...) in memory files
 *             (memfd_create: no file on disk, nothing left behind whatever
 *             ends the process), and the loader's CPU per item on them and
 *             on the originals.
 * Files are dropped from the page cache with posix_fadvise(DONTNEED): no
 * root needed.
 *
 * Threads: runs on the calling thread; starts and joins its own helpers
 * (spinners, readers) and loaders before it returns. The caller's callbacks
 * are called on the calling thread only.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "analyze/analyze_impl.h"
#include "common/cpubudget.h"
#include "common/error.h"

typedef nostall_analyze_files paths; /* files.c */

typedef struct ctx {
    const nostall_analyze_measure_options *o;
    const char *source;
} ctx;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double cpu_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A note (warning = 0) or a warning for the caller, one line. */
static void say(const ctx *c, int warning, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void say(const ctx *c, int warning, const char *fmt, ...)
{
    if (!c->o->message) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    c->o->message(c->o->ctx, warning, line);
}

/* ---- files -------------------------------------------------------------- */

/* Read a whole file through buf; bytes read or -1. */
static long long read_through(const char *path, char *buf, size_t buflen)
{
    return nst_an_read_upto(path, buf, buflen, LLONG_MAX);
}

/* ---- microbenchmarks ----------------------------------------------------- */

static double mem_bandwidth(void)
{
    size_t len = 64u << 20;
    char *a = malloc(len), *b = malloc(len);
    if (!a || !b) {
        free(a);
        free(b);
        return 0;
    }
    memset(a, 1, len);
    memset(b, 2, len);
    double best = 0;
    for (int i = 0; i < 4; i++) {
        double t0 = now_s();
        memcpy(i & 1 ? a : b, i & 1 ? b : a, len);
        double t = now_s() - t0;
        if (t > 0 && len / t > best) best = len / t;
    }
    volatile char sink = a[len / 2] + b[len / 3];
    (void)sink;
    free(a);
    free(b);
    return best;
}

/* How many of the CPUs this process gets now: one spinning thread per CPU
 * for 200 ms; the CPU time they obtain / the wall time. Lower than `cores`
 * on a machine shared with other busy processes. */
static void *spin_thread(void *arg)
{
    double *cpu = arg, t0 = now_s();
    struct timespec c0, c1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    volatile uint64_t x = 0;
    while (now_s() - t0 < 0.2)
        for (int i = 0; i < 10000; i++) x += (uint64_t)i;
    (void)x;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    *cpu = (double)(c1.tv_sec - c0.tv_sec) + (double)(c1.tv_nsec - c0.tv_nsec) * 1e-9;
    return NULL;
}

static double cpu_available(int cores)
{
    pthread_t th[256];
    double cpu[256] = {0}, t0 = now_s(), total = 0;
    int n = cores < 256 ? cores : 256, started = 0;
    for (int i = 0; i < n; i++) {
        if (pthread_create(&th[i], NULL, spin_thread, &cpu[i]) != 0) break;
        started++;
    }
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    double wall = now_s() - t0;
    for (int i = 0; i < started; i++) total += cpu[i];
    return wall > 0 && started ? total / wall : cores;
}

typedef struct reader_job {
    const paths *p;
    size_t next, end;
    pthread_mutex_t mu; /* next, bytes */
    long long bytes;
} reader_job;

static void *reader_thread(void *arg)
{
    reader_job *j = arg;
    char *buf = malloc(1 << 20);
    if (!buf) return NULL;
    for (;;) {
        pthread_mutex_lock(&j->mu);
        size_t i = j->next < j->end ? j->next++ : j->end;
        pthread_mutex_unlock(&j->mu);
        if (i >= j->end) break;
        long long n = read_through(j->p->v[i], buf, 1 << 20);
        pthread_mutex_lock(&j->mu);
        if (n > 0) j->bytes += n;
        pthread_mutex_unlock(&j->mu);
    }
    free(buf);
    return NULL;
}

/* Bandwidth of reading `many` with 8 threads, in bytes/s (0: nothing read). */
static double read_parallel(const paths *many)
{
    reader_job j = {.p = many, .next = 0, .end = many->n};
    pthread_mutex_init(&j.mu, NULL);
    pthread_t th[8];
    int started = 0;
    double t0 = now_s();
    for (int i = 0; i < 8; i++) {
        if (pthread_create(&th[i], NULL, reader_thread, &j) != 0) break;
        started++;
    }
    if (started == 0) reader_thread(&j);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    double t = now_s() - t0;
    pthread_mutex_destroy(&j.mu);
    return t > 0 && j.bytes > 0 ? (double)j.bytes / t : 0;
}

/* Cold reads of a sample of the dataset's files, spread over it: every
 * other file one at a time (latency, single-stream bandwidth), the others
 * eight in flight (bandwidth). The sample is dropped from the page cache
 * before and after. */
/* One file (a token corpus): its first 256 MiB read cold, one stream: the
 * bandwidth (both figures); the latency of a read is not measured (0). */
static void storage_bench_one(const char *path, nostall_analyze_meas *m)
{
    char *buf = malloc(1 << 20);
    if (!buf) return;
    nst_an_file_drop(path);
    double t0 = now_s();
    long long n = nst_an_read_upto(path, buf, 1 << 20, 256ll << 20);
    double t = now_s() - t0;
    if (n > 0 && t > 0) m->disk_bw = m->disk_bw1 = (double)n / t;
    nst_an_file_drop(path);
    free(buf);
}

static void storage_bench(const paths *all, nostall_analyze_meas *m)
{
    size_t ns = all->n < 128 ? all->n : 128, n1 = 0;
    if (ns == 1) storage_bench_one(all->v[0], m);
    if (ns < 2) return;
    paths one = {.v = calloc(ns, sizeof(char *))}, many = {.v = calloc(ns, sizeof(char *))};
    char *buf = malloc(1 << 20);
    if (!one.v || !many.v || !buf) goto out;
    for (size_t i = 0; i < ns; i++) {
        char *path = all->v[(i * all->n) / ns];
        if (i % 2 == 0 && one.n < 24)
            one.v[one.n++] = path;
        else
            many.v[many.n++] = path;
    }
    nst_an_files_drop(&one);
    nst_an_files_drop(&many);
    long long b1 = 0;
    double t0 = now_s();
    for (size_t i = 0; i < one.n; i++) {
        long long n = read_through(one.v[i], buf, 1 << 20);
        if (n > 0) {
            b1 += n;
            n1++;
        }
    }
    double t1 = n1 ? (now_s() - t0) / (double)n1 : 0;
    m->disk_bw = read_parallel(&many);
    double mean_b = n1 ? (double)b1 / (double)n1 : 0;
    if (t1 > 0) m->disk_bw1 = mean_b / t1;
    if (m->disk_bw <= 0) m->disk_bw = m->disk_bw1;
    if (m->disk_bw > 0) m->disk_latency_s = fmax(0, t1 - mean_b / m->disk_bw);
    nst_an_files_drop(&one);
    nst_an_files_drop(&many);
out:
    free(buf);
    free(one.v);
    free(many.v);
}

static double mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    double kb = 0;
    if (!f) return 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lf kB", &kb) == 1) break;
    fclose(f);
    return kb * 1024;
}

/* ---- loader runs ---------------------------------------------------------- */

typedef struct run_out {
    double seconds, cpu_s;
    uint64_t items, batches;
    nostall_stats st;
    /* with settle: the whole run's, the settling batches' too */
    double all_seconds, all_cpu_s;
    uint64_t all_items;
    nostall_stats all;
} run_out;

/* One epoch (or max_batches) of the loader alone, as fast as it goes; the
 * counters of this run only. settle: as many batches before, not counted
 * (cfg then has a second epoch). 0 or the loader's status (error set). */
static int run_loader(const ctx *c, const char *source, const nostall_config *cfg,
                      uint64_t max_batches, const char *label, int show, int settle, run_out *o)
{
    nostall_loader *ld;
    memset(o, 0, sizeof *o);
    int rc = nostall_loader_create(&ld, source, cfg);
    if (rc < 0) return rc;
    nostall_dataset_info info;
    nostall_loader_info(ld, &info, sizeof info);
    uint64_t total = info.batches_per_epoch;
    if (max_batches && max_batches < total) total = max_batches;
    const int progress = show && c->o->progress;
    const double ta = now_s(), ca = cpu_now_s();
    for (uint64_t i = 0; settle && i < total; i++) {
        nostall_batch b;
        rc = nostall_loader_next(ld, &b);
        if (rc == NOSTALL_DONE || rc == NOSTALL_EPOCH_END || rc < 0) break;
        o->all_items += b.count;
        if ((rc = nostall_loader_release(ld, &b)) < 0) break;
        if (progress) c->o->progress(c->o->ctx, label, 0, total, 0, 0);
    }
    rc = rc > 0 ? 0 : rc;
    nostall_stats st0;
    nostall_loader_stats(ld, &st0, sizeof st0);
    double t0 = now_s(), c0 = cpu_now_s(), last = 0;
    while (rc == 0 && o->batches < total) {
        nostall_batch b;
        rc = nostall_loader_next(ld, &b);
        if (rc == NOSTALL_EPOCH_END && settle && o->batches == 0) { /* the settling epoch's end */
            rc = 0;
            continue;
        }
        if (rc == NOSTALL_DONE || rc == NOSTALL_EPOCH_END) {
            rc = 0;
            break;
        }
        if (rc < 0 || (rc = nostall_loader_release(ld, &b)) < 0) break;
        o->items += b.count;
        o->batches++;
        if (progress && now_s() - last > 0.1) {
            last = now_s();
            c->o->progress(c->o->ctx, label, o->batches, total, last - t0, 0);
        }
    }
    o->seconds = now_s() - t0;
    o->cpu_s = cpu_now_s() - c0;
    /* the reason now: the stats calls below start with the error cleared */
    char msg[NST_ERROR_MAX - 128] = "";
    if (rc < 0) snprintf(msg, sizeof msg, "%s", nostall_last_error());
    nostall_loader_stats(ld, &o->st, sizeof o->st);
    o->all = o->st;
    o->all_seconds = now_s() - ta;
    o->all_cpu_s = cpu_now_s() - ca;
    o->all_items += o->items;
    /* make the counters this run's own (all but the gauges) */
    uint64_t *a = (uint64_t *)(void *)&o->st;
    const uint64_t *z = (const uint64_t *)(const void *)&st0;
    for (int i = 0; i < nostall_stats_count() && i < (int)(sizeof o->st / sizeof(uint64_t)); i++)
        if (nostall_stats_gauge(i) == 0) a[i] -= z[i];
    if (progress) c->o->progress(c->o->ctx, label, o->batches, total, o->seconds, 1);
    if (rc < 0) {
        nostall_loader_free(ld);
        return nst_error(rc, "%s run on %s: %s", label, source, msg);
    }
    nostall_loader_free(ld);
    return 0;
}

/* ---- the restart-marker what-if ------------------------------------------ */

#define NST_AN_RST_SAMPLE 96
#define NST_AN_RST_MIN 16
#define NST_AN_RST_REPEAT 3             /* each listed this often: runs long enough to time */
#define NST_AN_RST_BYTES (256ull << 20) /* the sample's rewritten bytes, at most */

/* How the sample is listed for the loader: in the source format of the
 * loader's own task, so that the runs decode and prepare each item as the
 * job does. */
enum {
    SAMPLE_LIST = 0, /* classify, bytes: "path<TAB>label" lines */
    SAMPLE_COCO = 1  /* detect: a COCO file naming the images (no boxes) */
};

typedef struct sample {
    int format;                 /* SAMPLE_*                            */
    int fds[NST_AN_RST_SAMPLE]; /* the rewritten items (memfd)        */
    size_t made;
    uint64_t bytes;
    char *orig, *rst; /* the two lists (open_memstream)      */
    size_t orig_len, rst_len;
    uint8_t *in, *out; /* file and rewrite buffers (grow-only) */
    size_t in_cap, out_cap;
} sample;

/* The whole regular file at `path` (at most 64 MiB) into s->in; its
 * length, or -1. */
static long long sample_read(sample *s, const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    struct stat st;
    long long got = -1;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= 4 && st.st_size <= (64 << 20)) {
        const size_t want = (size_t)st.st_size;
        uint8_t *buf = want > s->in_cap ? realloc(s->in, want) : s->in;
        if (buf) {
            s->in = buf;
            if (want > s->in_cap) s->in_cap = want;
            size_t n = 0;
            while (n < want) {
                ssize_t r = read(fd, buf + n, want - n);
                if (r < 0 && errno == EINTR) continue;
                if (r <= 0) break;
                n += (size_t)r;
            }
            if (n == want) got = (long long)want;
        }
    }
    close(fd);
    return got;
}

/* A memory file holding data[0..len); its descriptor or -1. */
static int memory_file(const char *name, const void *data, size_t len)
{
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0) return -1;
    for (size_t n = 0; n < len;) {
        ssize_t w = write(fd, (const char *)data + n, len - n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            close(fd);
            return -1;
        }
        n += (size_t)w;
    }
    return fd;
}

/* Width and height from a JPEG's frame header (SOFn); 0 or -1. */
static int jpeg_size(const uint8_t *b, size_t n, unsigned *w, unsigned *h)
{
    size_t i = 2;
    while (i + 4 <= n) {
        if (b[i] != 0xFF) return -1;
        const unsigned mk = b[i + 1];
        if (mk == 0xFF) { /* fill byte */
            i++;
            continue;
        }
        if (mk == 0x01 || (mk >= 0xD0 && mk <= 0xD7)) { /* no length */
            i += 2;
            continue;
        }
        if (mk == 0xD9 || mk == 0xDA) return -1; /* end, or scan before any frame */
        const size_t len = (size_t)b[i + 2] << 8 | b[i + 3];
        if (len < 2) return -1;
        if (mk >= 0xC0 && mk <= 0xCF && mk != 0xC4 && mk != 0xC8 && mk != 0xCC) {
            if (len < 7 || i + 9 > n) return -1;
            *h = (unsigned)b[i + 5] << 8 | b[i + 6];
            *w = (unsigned)b[i + 7] << 8 | b[i + 8];
            return *w && *h ? 0 : -1;
        }
        i += 2 + len;
    }
    return -1;
}

/* `name` as a JSON string literal, into buf: 0, or -1 when it does not fit
 * or is not UTF-8 (the literal would name another file). */
static int json_name(char *buf, size_t cap, const char *name)
{
    FILE *f = fmemopen(buf, cap, "w");
    if (!f) return -1;
    const int replaced = nst_an_json_string(f, name);
    const int bad = ferror(f) || ftell(f) >= (long)cap - 1;
    return fclose(f) == 0 && !replaced && !bad ? 0 : -1;
}

/* One entry of a list: the item named `name`, the k-th of its list. */
static void sample_entry(const sample *s, FILE *l, const char *name, const char *json, unsigned w,
                         unsigned h, size_t k)
{
    if (s->format == SAMPLE_COCO)
        fprintf(l, "%s{\"id\": %zu, \"file_name\": %s, \"width\": %u, \"height\": %u}",
                k ? ", " : "", k + 1, json, w, h);
    else
        fprintf(l, "%s\t0\n", name);
}

/* Add the JPEG at `path` to the sample (both lists): as the rewrite gives
 * it, rewritten or kept as it is. 1 if it was added, 0 if it is no JPEG,
 * is damaged or cannot be listed, -1 when memory files cannot be made. */
static int sample_add(sample *s, const char *path, FILE *lo, FILE *lr)
{
    long long len = sample_read(s, path);
    if (len < 4 || s->in[0] != 0xFF || s->in[1] != 0xD8) return 0; /* not a JPEG */
    unsigned w = 0, h = 0; /* (COCO lists them; the rewrite keeps them) */
    if (s->format == SAMPLE_COCO && jpeg_size(s->in, (size_t)len, &w, &h) < 0) return 0;
    const size_t bound = nostall_transcode_bound((size_t)len);
    if (bound > s->out_cap) {
        uint8_t *p = realloc(s->out, bound);
        if (!p) return 0;
        s->out = p;
        s->out_cap = bound;
    }
    size_t n = 0;
    if (nostall_transcode_jpeg(s->out, s->out_cap, &n, s->in, (size_t)len, NULL, 0, NULL, 0) < 0)
        return 0; /* damaged: a bad item either way */
    /* kept as it is (already restart-marked, CMYK, ...): so it stays after
     * `nostall transcode`, and counts as it is */
    const uint8_t *copy = n ? s->out : s->in;
    if (!n) n = (size_t)len;
    char *full = realpath(path, NULL);
    char jfull[PATH_MAX * 6 + 8] = "", rst[64], jrst[80];
    if (!full || strpbrk(full, "\t\n\r") || /* cannot be listed one per line */
        (s->format == SAMPLE_COCO && json_name(jfull, sizeof jfull, full) < 0)) {
        free(full);
        return 0;
    }
    int fd = memory_file("nostall-analyze-rst", copy, n);
    if (fd < 0) {
        free(full);
        return -1;
    }
    snprintf(rst, sizeof rst, "/proc/self/fd/%d", fd);
    snprintf(jrst, sizeof jrst, "\"%s\"", rst);
    for (int r = 0; r < NST_AN_RST_REPEAT; r++) {
        const size_t k = s->made * NST_AN_RST_REPEAT + (size_t)r;
        sample_entry(s, lo, full, jfull, w, h, k);
        sample_entry(s, lr, rst, jrst, w, h, k);
    }
    free(full);
    s->fds[s->made++] = fd;
    s->bytes += n;
    return 1;
}

/* Rewrite up to NST_AN_RST_SAMPLE JPEG items, evenly spread over the index
 * (ImageFolder: over the classes); items that are not JPEGs are passed over
 * and later passes fill in. 0, or -1 when the lists cannot be written. */
static int sample_build(const ctx *c, sample *s, const paths *p)
{
    FILE *lo = open_memstream(&s->orig, &s->orig_len);
    FILE *lr = open_memstream(&s->rst, &s->rst_len);
    int rc = lo && lr ? 0 : -1;
    if (rc == 0 && s->format == SAMPLE_COCO) {
        fputs("{\"images\": [", lo);
        fputs("{\"images\": [", lr);
    }
    const size_t step = (p->n + NST_AN_RST_SAMPLE - 1) / NST_AN_RST_SAMPLE;
    for (size_t off = 0; rc == 0 && off < step; off++)
        for (size_t i = off; i < p->n && s->made < NST_AN_RST_SAMPLE && s->bytes < NST_AN_RST_BYTES;
             i += step)
            if (sample_add(s, p->v[i], lo, lr) < 0) {
                say(c, 1, "restart-marker sample: cannot make a memory file: %s", strerror(errno));
                rc = -1;
                break;
            }
    if (rc == 0 && s->format == SAMPLE_COCO) { /* images without boxes: a detection */
        static const char tail[] =             /* item all the same                 */
            "], \"annotations\": [], \"categories\": [{\"id\": 1, \"name\": \"sample\"}]}\n";
        fputs(tail, lo);
        fputs(tail, lr);
    }
    if (lo && fclose(lo) != 0) rc = -1;
    if (lr && fclose(lr) != 0) rc = -1;
    return rc;
}

/* The sample's CPU per item, as it is (k = 0) and rewritten (k = 1), one
 * thread, the lowest of three alternating runs each (process CPU time:
 * being descheduled on a busy machine does not count). */
static void sample_runs(const ctx *c, sample *s, const nostall_config *warm, nostall_analyze_meas *m)
{
    /* (the sample's COCO lists are the analyzer's own, naming the dataset's
     * images by absolute path and memory files: outside any image root) */
    static const char *const set[] =
        {"threads",      "1", "batch_size", "16", "drop_last", "0", "allow_outside_root", "1",
         "prep_servers", "",  NULL};
    nostall_config *cf = nst_an_config_variant(warm, set);
    int lists[2] = {memory_file("nostall-analyze-orig", s->orig, s->orig_len),
                    memory_file("nostall-analyze-rst", s->rst, s->rst_len)};
    double best[2] = {0, 0};
    for (int round = 0; cf && lists[0] >= 0 && lists[1] >= 0 && round < 6; round++) {
        const int k = round & 1;
        char list[64];
        snprintf(list, sizeof list, "/proc/self/fd/%d", lists[k]);
        run_out o;
        if (run_loader(c, list, cf, 0, k ? "restart" : "original", 0, 0, &o) < 0) {
            say(c, 1, "restart-marker sample: %s", nostall_last_error());
            best[0] = 0;
            break;
        }
        if (o.items == 0) {
            say(c, 1, "restart-marker sample: the %s run delivered nothing",
                k ? "transcoded" : "original");
            best[0] = 0;
            break;
        }
        double v = o.cpu_s / (double)o.items;
        if (v > 0 && (best[k] == 0 || v < best[k])) best[k] = v;
    }
    if (best[0] > 0 && best[1] > 0) {
        m->rst_sample_items = (double)s->made;
        m->rst_cpu_ratio = best[1] / best[0];
    }
    for (int k = 0; k < 2; k++)
        if (lists[k] >= 0) close(lists[k]);
    nostall_config_free(cf);
}

/* Restart-marker what-if: fills m->rst_sample_items and m->rst_cpu_ratio
 * (0: not measured). `warm` is the prep run's configuration (no cache, no
 * emulated storage, no echo), narrowed to one thread here. */
static void transcode_sample(const ctx *c, const paths *p, const nostall_config *warm,
                             nostall_analyze_meas *m)
{
    /* The sample is run with the loader's own task: classify and bytes take
     * a list of paths, detect a COCO file; the other tasks decode no images
     * (token files, audio), so there is nothing to rewrite. */
    char task[32] = "";
    nostall_config_get(warm, "task", task, sizeof task);
    const int format = !strcmp(task, "detect")                               ? SAMPLE_COCO
                       : !strcmp(task, "classify") || !strcmp(task, "bytes") ? SAMPLE_LIST
                                                                             : -1;
    if (p->n == 0 || format < 0) return;
    say(c, 0, "measuring a restart-marker copy of a sample ...");
    sample s;
    memset(&s, 0, sizeof s);
    s.format = format;
    if (sample_build(c, &s, p) == 0 && s.made >= NST_AN_RST_MIN) sample_runs(c, &s, warm, m);
    for (size_t i = 0; i < s.made; i++) close(s.fds[i]);
    free(s.orig);
    free(s.rst);
    free(s.in);
    free(s.out);
}

/* ---- the whole measurement ------------------------------------------------ */

/* The dataset: index and the sizes of its distinct local files (files.c:
 * a file that many items share, as the token windows of one corpus do, is
 * listed, stat'ed and counted once), fresh items per epoch without echoing
 * (the model applies it). */
static int dataset(const ctx *c, const nostall_config *cfg, paths *p, nostall_analyze_meas *m)
{
    nostall_dataset_info info;
    int rc = nst_an_files_index(p, c->source, cfg, &info, "nostall_analyze_measure");
    if (rc < 0) return rc;
    m->dataset_bytes = p->bytes;
    m->dataset_items = (double)info.items;
    m->dataset_files = (double)p->n;
    m->items_per_epoch = (double)info.items_per_epoch;
    m->item_out_bytes = info.batches_per_epoch ? (double)info.batch_bytes : 0;
    return 0;
}

/* What the configuration says, and the machine. */
static void settings(const nostall_config *cfg, nostall_analyze_meas *m)
{
    uint64_t u = 0;
    double d = 0;
    char val[64] = "";
    nostall_config_get_uint(cfg, NOSTALL_OPT_BATCH_SIZE, &u);
    m->batch_size = (double)u;
    if (m->batch_size > 0) m->item_out_bytes /= m->batch_size;
    /* the CPUs this process may run on (taskset, cgroup cpusets), else online ones */
    cpu_set_t set;
    m->cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                           : (double)sysconf(_SC_NPROCESSORS_ONLN);
    m->mem_available_bytes = mem_available();
    nostall_config_get_uint(cfg, NOSTALL_OPT_THREADS, &u);
    if (!u) { /* the loader's default: the CPU budget (common/cpubudget.h) */
        nst_cpu_budget b;
        nst_cpu_budget_get(&b);
        u = b.threads;
    }
    m->threads = (double)u;
    char servers[4096] = "";
    nostall_config_get(cfg, "prep_servers", servers, sizeof servers);
    if (servers[0]) { /* threads counts the local ones, and 0 means none */
        m->prep_servers = 1;
        for (const char *c = servers; *c; c++) m->prep_servers += *c == ',';
        nostall_config_get_uint(cfg, NOSTALL_OPT_THREADS, &u);
        m->threads = (double)u;
    }
    char dev[16] = "";
    nostall_config_get(cfg, "decode_device", dev, sizeof dev);
    m->decode_gpu = !strcmp(dev, "gpu");
    nostall_config_get_uint(cfg, NOSTALL_OPT_IO_DEPTH, &u);
    /* 0 = auto: a worker that waits for storage doubles its reads in
     * flight within a few dozen items, up to NOSTALL_IO_DEPTH_AUTO_MAX, so the
     * model takes the cap; where storage keeps up, the depth does not
     * matter to the prediction. */
    m->io_depth = u ? (double)u : NOSTALL_IO_DEPTH_AUTO_MAX;
    nostall_config_get_uint(cfg, NOSTALL_OPT_CACHE_BYTES, &u);
    m->cache_bytes = (double)u;
    nostall_config_get(cfg, "cache", val, sizeof val);
    m->cache_minio = !strcmp(val, "minio") && u > 0;
    nostall_config_get_double(cfg, NOSTALL_OPT_STORAGE_MBPS, &d);
    m->emu_mbps = d;
    nostall_config_get_double(cfg, NOSTALL_OPT_STORAGE_LATENCY_MS, &d);
    m->emu_latency_ms = d;
    nostall_config_get_double(cfg, NOSTALL_OPT_ECHO_FACTOR, &d);
    m->echo_factor = d;
    nostall_config_get_uint(cfg, NOSTALL_OPT_ECHO_POINT, &u);
    m->echo_point = (double)u;
}

/* Per-core prep cost: the loader alone, as fast as it goes, every file in
 * the page cache (workers busy all the time, as when prep is the
 * bottleneck; with a step they idle and each item costs more CPU). */
static int prep_run(const ctx *c, const paths *p, const nostall_config *warm,
                    nostall_analyze_meas *m)
{
    char *buf = malloc(1 << 20);
    if (!buf) return nst_error(NOSTALL_E_NOMEM, "nostall_analyze_measure: out of memory");
    for (size_t i = 0; i < p->n; i++)
        if (read_through(p->v[i], buf, 1 << 20) < 0)
            say(c, 1, "cannot read %s: %s", p->v[i], strerror(errno));
    free(buf);
    run_out prep;
    int rc = 0;
    if (m->prep_servers > 0) { /* with them as configured; then without */
        say(c, 0, "measuring with the prep servers ...");
        /* the second of two epochs: the model's are the epochs after the
         * first, which fills the servers' caches and connections */
        static const char *const two[] = {"epochs", "2", NULL};
        nostall_config *sc = nst_an_config_variant(warm, two);
        if (!sc) return nst_error(NOSTALL_E_NOMEM, "nostall_analyze_measure: out of memory");
        rc = run_loader(c, c->source, sc, c->o->max_batches, "servers", 1, 1, &prep);
        nostall_config_free(sc);
        if (rc < 0) return rc;
        if (prep.st.prep_remote_items == 0 && prep.all.prep_remote_items > 0) {
            /* the ring held the whole second epoch before it was counted
             * (a short run, many batches ahead): both epochs, then */
            prep.st = prep.all;
            prep.items = prep.all_items;
            prep.seconds = prep.all_seconds;
            prep.cpu_s = prep.all_cpu_s;
        }
        m->srv_items = (double)prep.items;
        m->srv_seconds = prep.seconds;
        m->srv_cpu_s = prep.cpu_s;
        m->srv_remote_items = (double)prep.st.prep_remote_items;
        m->srv_remote_bytes = (double)prep.st.prep_remote_bytes;
        m->srv_remote_wait_ns = (double)prep.st.prep_remote_wait_ns;
        m->srv_remote_busy_ns = (double)prep.st.prep_remote_busy_ns;
        m->srv_recv_cpu_s = (double)prep.st.prep_recv_cpu_ns * 1e-9;
        /* the trainer's own CPU per item: its threads alone (the CPU budget's
         * with threads=0, which means none beside servers) */
        static const char *const local[] = {"prep_servers", "", NULL};
        nostall_config *lc = nst_an_config_variant(warm, local);
        if (!lc) return nst_error(NOSTALL_E_NOMEM, "nostall_analyze_measure: out of memory");
        rc = run_loader(c, c->source, lc, c->o->max_batches, "prep", 1, 0, &prep);
        nostall_config_free(lc);
    } else
        rc = run_loader(c, c->source, warm, c->o->max_batches, "prep", 1, 0, &prep);
    if (rc < 0) return rc;
    m->prep_items = (double)prep.items;
    m->prep_seconds = prep.seconds;
    m->prep_cpu_s = prep.cpu_s;
    m->prep_fetch_ns = (double)prep.st.fetch_busy_ns;
    m->prep_decode_ns = (double)prep.st.decode_busy_ns;
    m->prep_augment_ns = (double)prep.st.augment_busy_ns;
    return 0;
}

int nostall_analyze_measure(nostall_analyze_meas *out, size_t size, const char *source,
                            const nostall_config *cfg, const nostall_analyze_measure_options *opts,
                            size_t opts_size)
{
    nst_error_clear();
    if (!out || !source)
        return nst_error(NOSTALL_E_INVALID, "nostall_analyze_measure: NULL argument");
    nostall_analyze_measure_options o;
    memset(&o, 0, sizeof o);
    if (opts) memcpy(&o, opts, opts_size < sizeof o ? opts_size : sizeof o);
    nostall_config *defaults = NULL;
    if (!cfg) {
        if (nostall_config_create(&defaults) < 0) return NOSTALL_E_NOMEM;
        cfg = defaults;
    }
    const ctx c = {.o = &o, .source = source};
    nostall_analyze_meas m;
    memset(&m, 0, sizeof m);
    paths p = {.v = NULL};
    nostall_config *warm = NULL;
    int rc = dataset(&c, cfg, &p, &m);
    if (rc < 0) goto out;
    settings(cfg, &m);
    say(&c, 0, "measuring memory and storage ...");
    m.mem_bw = mem_bandwidth();
    m.cpu_available = cpu_available((int)m.cores);
    storage_bench(&p, &m);
    warm = nostall_analyze_cached_config(cfg);
    if (!warm) {
        rc = nst_error(NOSTALL_E_NOMEM, "nostall_analyze_measure: out of memory");
        goto out;
    }
    if ((rc = prep_run(&c, &p, warm, &m)) < 0) goto out;
    transcode_sample(&c, &p, warm, &m);
    memcpy(out, &m, size < sizeof m ? size : sizeof m);
out:
    if (rc < 0 || !o.keep_cached) nst_an_files_drop(&p);
    nostall_config_free(warm);
    nostall_config_free(defaults);
    nst_an_files_clear(&p);
    return rc;
}
