/*
 * analyze.c — `nostall analyze DATA [loader options] (--step-ms MS | --step-rate N)`:
 * where does the data stall of this job come from, and what would remove it?
 *
 * Runs the job three ways, as DS-Analyzer does, but without root:
 *   synthetic  the training step alone (the accelerator's own rate),
 *   cached     the loader with every file in the OS page cache and no storage
 *              delay (adds preprocessing: prep stall = T_cached - T_synthetic),
 *   cold       the loader as configured after dropping the dataset's files
 *              from the page cache with posix_fadvise(DONTNEED) (adds
 *              fetching: fetch stall = T_cold - T_cached),
 * plus microbenchmarks: real storage bandwidth and latency (cold reads of a
 * sample of files, one and several in flight), memory bandwidth (memcpy),
 * dataset bytes (stat), and a restart-marker what-if (a sample transcoded
 * as `nostall transcode` would, into a temporary directory removed again:
 * CPU per item on the copy / as it is). The per-core prep cost comes from
 * the process's CPU time in the cached run. analyze_model.c turns the measurements into
 * predictions; analyze_report.c prints them.
 *
 * `--measurements FILE` skips the runs and models measurements taken
 * elsewhere (Python's nostall.analyze() measures a real training step and
 * hands them over); `--predict k=v,...` predicts further configurations.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "analyze.h"
#include "commands.h"
#include "nostall.h"
#include "util.h"

static void analyze_usage(FILE *f)
{
    fprintf(f,
            "usage: nostall analyze DATA [loader options] (--step-ms MS | --step-rate N) [options]\n"
            "\n"
            "Measures where the data stall of a training job comes from (the step alone, with\n"
            "every file cached, and cold), measures storage, CPU and memory, and predicts the\n"
            "epoch time for other cache sizes, core counts, storage speeds and echo factors.\n"
            "\n"
            "analyze options:\n"
            "  --step-ms MS          simulated training step per batch, in milliseconds\n"
            "  --step-rate N         ... or the accelerator's rate in items/s (step = batch / N)\n"
            "  --max-batches N       cap each measured run at N batches (default: one epoch)\n"
            "  --json                one JSON object on stdout instead of the report\n"
            "  --report FILE.html    also write a self-contained HTML report with SVG charts\n"
            "  --measurements FILE   do not run anything: model these measurements (a JSON object\n"
            "                        of numbers, or an earlier --json output); DATA not needed\n"
            "  --runs FILE           take the synthetic, cached and cold runs from FILE (measured\n"
            "                        with a real step, e.g. by Python's nostall.analyze) and\n"
            "                        measure only the dataset, storage, memory, CPU share and\n"
            "                        prep rate (loader without a step) here\n"
            "  --predict K=V[,K=V]   also predict this configuration (repeatable); keys: threads,\n"
            "                        io_depth, cores, cache_fraction, cache_bytes, storage_mbps,\n"
            "                        storage_latency_ms, step_ms, echo_factor, echo_point, cold,\n"
            "                        transcode (1: CPU per item of a restart-marker copy, measured\n"
            "                        on a sample), cache_transcode (1: the same for the items\n"
            "                        the MinIO cache holds, after its fill epoch), nodes,\n"
            "                        net_mbps, net_latency_ms\n"
            "  --quiet               no progress line\n"
            "  --help                this text\n"
            "\n"
            "Loader options are those of `nostall bench --help` (--threads, --batch-size,\n"
            "--cache-bytes, --storage-mbps, --echo-factor, ...).\n");
}

/* ---- small helpers ----------------------------------------------------- */

static double cpu_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sleep_s(double s)
{
    if (s <= 0) return;
    struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Drop a file's pages from the OS page cache (no root needed). */
static int drop_file(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    return rc == 0 ? 0 : -1;
}

/* Read a whole file; returns bytes read or -1. */
static long long read_file(const char *path, char *buf, size_t buflen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    long long total = 0;
    for (;;) {
        ssize_t n = read(fd, buf, buflen);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        total += n;
    }
    close(fd);
    return total;
}

typedef struct paths {
    char **v;
    size_t n;
} paths;

static void paths_free(paths *p)
{
    for (size_t i = 0; i < p->n; i++) free(p->v[i]);
    free(p->v);
    p->v = NULL;
    p->n = 0;
}

static int drop_all(const paths *p)
{
    int failed = 0;
    for (size_t i = 0; i < p->n; i++)
        if (drop_file(p->v[i]) < 0) failed++;
    return failed;
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
        double t0 = tool_now_s();
        memcpy(i & 1 ? a : b, i & 1 ? b : a, len);
        double t = tool_now_s() - t0;
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
    double *cpu = arg, t0 = tool_now_s();
    struct timespec c0, c1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    volatile uint64_t x = 0;
    while (tool_now_s() - t0 < 0.2)
        for (int i = 0; i < 10000; i++) x += (uint64_t)i;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    *cpu = (c1.tv_sec - c0.tv_sec) + (c1.tv_nsec - c0.tv_nsec) * 1e-9;
    return NULL;
}

static double cpu_available(int cores)
{
    pthread_t th[256];
    double cpu[256] = {0}, t0 = tool_now_s(), total = 0;
    int n = cores < 256 ? cores : 256, started = 0;
    for (int i = 0; i < n; i++) {
        if (pthread_create(&th[i], NULL, spin_thread, &cpu[i]) != 0) break;
        started++;
    }
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    double wall = tool_now_s() - t0;
    for (int i = 0; i < started; i++) total += cpu[i];
    return wall > 0 && started ? total / wall : cores;
}

typedef struct reader_job {
    const paths *p;
    size_t next, end;
    pthread_mutex_t mu;
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
        long long n = read_file(j->p->v[i], buf, 1 << 20);
        pthread_mutex_lock(&j->mu);
        if (n > 0) j->bytes += n;
        pthread_mutex_unlock(&j->mu);
    }
    free(buf);
    return NULL;
}

/* Cold reads of a sample of the dataset's files, spread over it: every
 * other file one at a time (latency, single-stream bandwidth), the others
 * eight in flight (bandwidth). The sample is dropped from the page cache
 * before and after. */
static void storage_bench(const paths *all, an_meas *m)
{
    size_t ns = all->n < 128 ? all->n : 128, n1 = 0;
    if (ns < 2) return;
    paths one = {calloc(ns, sizeof(char *)), 0}, many = {calloc(ns, sizeof(char *)), 0};
    char *buf = malloc(1 << 20);
    if (!one.v || !many.v || !buf) goto out;
    for (size_t i = 0; i < ns; i++) {
        char *path = all->v[(i * all->n) / ns];
        if (i % 2 == 0 && one.n < 24) one.v[one.n++] = path;
        else many.v[many.n++] = path;
    }
    drop_all(&one);
    drop_all(&many);
    long long b1 = 0;
    double t0 = tool_now_s();
    for (size_t i = 0; i < one.n; i++) {
        long long n = read_file(one.v[i], buf, 1 << 20);
        if (n > 0) {
            b1 += n;
            n1++;
        }
    }
    double t1 = n1 ? (tool_now_s() - t0) / n1 : 0;
    reader_job j = {.p = &many, .next = 0, .end = many.n};
    pthread_mutex_init(&j.mu, NULL);
    pthread_t th[8];
    int started = 0;
    t0 = tool_now_s();
    for (int i = 0; i < 8; i++) {
        if (pthread_create(&th[i], NULL, reader_thread, &j) != 0) break;
        started++;
    }
    if (started == 0) reader_thread(&j);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    double t = tool_now_s() - t0;
    pthread_mutex_destroy(&j.mu);
    if (t > 0 && j.bytes > 0) m->disk_bw = j.bytes / t;
    double mean_b = n1 ? (double)b1 / n1 : 0;
    if (t1 > 0) m->disk_bw1 = mean_b / t1;
    if (m->disk_bw <= 0) m->disk_bw = m->disk_bw1;
    if (m->disk_bw > 0) m->disk_latency_s = fmax(0, t1 - mean_b / m->disk_bw);
    drop_all(&one);
    drop_all(&many);
out:
    free(buf);
    free(one.v);
    free(many.v);
}

/* ---- the measured runs ---------------------------------------------------- */

typedef struct run_out {
    double seconds, cpu_s, stall_s;
    uint64_t items, batches;
    nostall_stats st;
} run_out;

static void draw(const char *label, uint64_t done, uint64_t total, double t)
{
    int width = 30, fill = total ? (int)(width * (done > total ? total : done) / total) : 0;
    char bar[64];
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
    bar[width] = '\0';
    fprintf(stderr, "\r%-10s [%s] %" PRIu64 "/%" PRIu64 " batches  %.1f s   ", label, bar, done,
            total, t);
    fflush(stderr);
}

/* The step alone: `batches` steps, no loader. */
static void run_synthetic(double step_s, uint64_t batches, int show, run_out *o)
{
    memset(o, 0, sizeof *o);
    double t0 = tool_now_s(), c0 = cpu_now_s(), last = 0;
    for (uint64_t i = 0; i < batches; i++) {
        sleep_s(step_s);
        if (show && tool_now_s() - last > 0.1) {
            last = tool_now_s();
            draw("synthetic", i + 1, batches, last - t0);
        }
    }
    o->seconds = tool_now_s() - t0;
    o->cpu_s = cpu_now_s() - c0;
    o->batches = batches;
    if (show) fputc('\n', stderr);
}

/* One epoch (or max_batches) of the loader with the step. */
static int run_loader(const char *data, const nostall_config *cfg, double step_s,
                      uint64_t max_batches, const char *label, int show, run_out *o)
{
    nostall_loader *ld;
    memset(o, 0, sizeof *o);
    if (nostall_loader_create(&ld, data, cfg) < 0) {
        fprintf(stderr, "nostall analyze: %s run: %s\n", label, nostall_last_error());
        return -1;
    }
    nostall_dataset_info info;
    nostall_loader_info(ld, &info, sizeof info);
    uint64_t total = info.batches_per_epoch;
    if (max_batches && max_batches < total) total = max_batches;
    nostall_stats st0;
    nostall_loader_stats(ld, &st0, sizeof st0);
    double t0 = tool_now_s(), c0 = cpu_now_s(), last = 0;
    int status = 0;
    for (;;) {
        nostall_batch b;
        int rc = nostall_loader_next(ld, &b);
        if (rc == NOSTALL_DONE || rc == NOSTALL_EPOCH_END) break;
        if (rc < 0) {
            if (show) fputc('\n', stderr);
            fprintf(stderr, "nostall analyze: %s run on %s: %s\n", label, data, nostall_last_error());
            status = -1;
            break;
        }
        o->items += b.count;
        o->batches++;
        sleep_s(step_s);
        if (nostall_loader_release(ld, &b) < 0) {
            fprintf(stderr, "nostall analyze: %s run on %s: %s\n", label, data, nostall_last_error());
            status = -1;
            break;
        }
        if (show && tool_now_s() - last > 0.1) {
            last = tool_now_s();
            draw(label, o->batches, total, last - t0);
        }
        if (o->batches >= total) break;
    }
    o->seconds = tool_now_s() - t0;
    o->cpu_s = cpu_now_s() - c0;
    nostall_loader_stats(ld, &o->st, sizeof o->st);
    /* make the counters this run's own */
    uint64_t *a = (uint64_t *)&o->st;
    const uint64_t *z = (const uint64_t *)&st0;
    int nst = nostall_stats_count();
    for (int i = 0; i < nst && i < (int)(sizeof o->st / sizeof(uint64_t)); i++)
        if (strcmp(nostall_stats_name(i), "threads") && strcmp(nostall_stats_name(i), "cache_bytes") &&
            strcmp(nostall_stats_name(i), "cache_items"))
            a[i] -= z[i];
    o->stall_s = o->st.consumer_wait_ns * 1e-9;
    if (show) fputc('\n', stderr);
    nostall_loader_free(ld);
    return status;
}

/* A copy of cfg with name/value pairs (NULL-terminated list) set on top. */
static nostall_config *config_variant(const nostall_config *cfg, const char *const *set)
{
    nostall_config *c;
    if (nostall_config_create(&c) < 0) return NULL;
    for (int i = 0; i < nostall_option_count(); i++) {
        nostall_option_info oi;
        char val[256];
        nostall_option_info_get(i, &oi);
        if (nostall_config_get(cfg, oi.name, val, sizeof val) == 0) nostall_config_set(c, oi.name, val);
    }
    for (; set && set[0]; set += 2) nostall_config_set(c, set[0], set[1]);
    return c;
}

/* Restart-marker what-if: a sample of up to AN_RST_SAMPLE JPEG items,
 * transcoded as `nostall transcode` would (a restart marker every MCU) into
 * a temporary directory, and the loader's CPU per item (process CPU time,
 * one worker thread, page cache warm) on the copy and on
 * the same items as they are, three runs each, alternating, the lowest of each
 * kept; `warm` is the cached run's configuration (no cache, no emulated
 * storage, no echo), narrowed to one thread here. Fills m->rst_sample_items
 * and m->rst_cpu_ratio (0: not measured).
 * Everything written is removed again. */
#define AN_RST_SAMPLE 96
#define AN_RST_MIN 16
#define AN_RST_REPEAT 3 /* each listed this often: runs long enough to time */

/* CPU seconds per item of a run (process CPU time: being descheduled on a
 * busy machine does not count, unlike the workers' busy clocks). */
static double cpu_per_item_run(const run_out *o) { return o->items ? o->cpu_s / (double)o->items : 0; }

/* Interrupted (SIGINT, SIGTERM, SIGHUP) while the sample exists: remove it
 * (unlink and rmdir are async-signal-safe), then die of the signal. */
static char g_sample_dir[4096];
static volatile sig_atomic_t g_sample_files;

static void sample_cleanup_signal(int sig)
{
    char path[4200];
    size_t n = strlen(g_sample_dir);
    if (n && n + 12 < sizeof path) {
        memcpy(path, g_sample_dir, n);
        for (sig_atomic_t i = 0; i <= g_sample_files; i++) { /* 000000.jpg ... by hand */
            long v = (long)i;
            char *d = path + n;
            *d++ = '/';
            for (int k = 5; k >= 0; k--, v /= 10) d[k] = (char)('0' + v % 10);
            memcpy(d + 6, ".jpg", 5);
            unlink(path);
        }
        memcpy(path + n, "/orig.txt", 10);
        unlink(path);
        memcpy(path + n, "/rst.txt", 9);
        unlink(path);
        rmdir(g_sample_dir);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

static void sample_signals(int on)
{
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    static struct sigaction old[3];
    for (int i = 0; i < 3; i++) {
        if (on) {
            struct sigaction sa;
            memset(&sa, 0, sizeof sa);
            sa.sa_handler = sample_cleanup_signal;
            sigemptyset(&sa.sa_mask);
            sigaction(sigs[i], &sa, &old[i]);
        } else {
            sigaction(sigs[i], &old[i], NULL);
        }
    }
}

static void transcode_sample(const paths *p, const nostall_config *warm, int show, an_meas *m)
{
    const char *tmp = getenv("TMPDIR");
    char dir[4096], path[4200];
    uint8_t *buf = NULL;
    size_t cap = 0;
    unsigned char *enc = NULL;
    FILE *lo = NULL, *lr = NULL;
    size_t made = 0;
    nostall_config *c = NULL;
    if (p->n == 0) return;
    snprintf(dir, sizeof dir, "%s/nostall-analyze-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        fprintf(stderr, "nostall analyze: warning: restart-marker sample: cannot create %s: %s\n", dir,
                strerror(errno));
        return;
    }
    snprintf(g_sample_dir, sizeof g_sample_dir, "%s", dir);
    g_sample_files = 0;
    sample_signals(1);
    if (show) fprintf(stderr, "measuring a restart-marker copy of a sample ...\n");
    snprintf(path, sizeof path, "%s/orig.txt", dir);
    lo = fopen(path, "w");
    snprintf(path, sizeof path, "%s/rst.txt", dir);
    lr = fopen(path, "w");
    if (!lo || !lr) goto done;
    /* evenly spread over the index (ImageFolder: over the classes); items
     * that are not JPEGs are passed over and later passes fill in */
    const size_t step = (p->n + AN_RST_SAMPLE - 1) / AN_RST_SAMPLE;
    for (size_t off = 0; off < step && made < AN_RST_SAMPLE; off++) {
        for (size_t i = off; i < p->n && made < AN_RST_SAMPLE; i += step) {
            long long len = tool_read_file(p->v[i], &buf, &cap, 64u << 20);
            if (len < 4 || buf[0] != 0xFF || buf[1] != 0xD8) continue; /* not a JPEG */
            size_t elen = 0;
            const size_t bound = nostall_transcode_bound((size_t)len);
            free(enc);
            enc = malloc(bound);
            if (!enc || nostall_transcode_jpeg(enc, bound, &elen, buf, (size_t)len, NULL, 0, NULL,
                                               0) != 0)
                continue; /* damaged: a bad item either way */
            if (elen == 0) { /* kept as it is: so it stays after `nostall transcode` */
                memcpy(enc, buf, (size_t)len);
                elen = (size_t)len;
            }
            char *full = realpath(p->v[i], NULL);
            if (full && strpbrk(full, "\t\n\r")) { /* cannot be listed one per line */
                free(full);
                full = NULL;
            }
            snprintf(path, sizeof path, "%s/%06zu.jpg", dir, made);
            g_sample_files = (sig_atomic_t)made;
            FILE *f = full ? fopen(path, "wb") : NULL;
            int ok = f && fwrite(enc, 1, elen, f) == elen;
            if (f && fclose(f) != 0) ok = 0;
            if (ok) {
                /* the copy by its bare name: a list's relative paths are
                 * relative to the list's own directory (whatever TMPDIR is) */
                for (int r = 0; r < AN_RST_REPEAT; r++) {
                    fprintf(lo, "%s\t0\n", full);
                    fprintf(lr, "%06zu.jpg\t0\n", made);
                }
                made++;
            } else {
                unlink(path);
            }
            free(full);
            free(enc);
            enc = NULL;
        }
    }
    int bad = ferror(lo) || ferror(lr);
    if (fclose(lo) != 0) bad = 1;
    if (fclose(lr) != 0) bad = 1;
    lo = lr = NULL;
    if (bad) goto done;
    if (made < AN_RST_MIN) goto done;
    /* one thread, a whole small epoch per run, nothing between the worker and the files */
    static const char *const set[] = {"threads", "1", "batch_size", "16", "drop_last", "0", NULL};
    c = config_variant(warm, set);
    if (!c) goto done;
    double best[2] = {0, 0};
    for (int round = 0; round < 6; round++) {
        run_out o;
        int k = round & 1; /* 0: as they are, 1: transcoded */
        snprintf(path, sizeof path, "%s/%s", dir, k ? "rst.txt" : "orig.txt");
        if (run_loader(path, c, 0, 0, k ? "restart" : "original", 0, &o) < 0) goto done;
        if (o.items == 0) {
            fprintf(stderr, "nostall analyze: warning: restart-marker sample: the %s run delivered "
                            "nothing (%s)\n", k ? "transcoded" : "original", path);
            goto done;
        }
        double v = cpu_per_item_run(&o);
        if (v > 0 && (best[k] == 0 || v < best[k])) best[k] = v;
    }
    if (best[0] > 0 && best[1] > 0) {
        m->rst_sample_items = (double)made;
        m->rst_cpu_ratio = best[1] / best[0];
    }
done:
    if (lo) fclose(lo);
    if (lr) fclose(lr);
    free(buf);
    free(enc);
    nostall_config_free(c);
    for (size_t i = 0; i < made; i++) {
        snprintf(path, sizeof path, "%s/%06zu.jpg", dir, i);
        unlink(path);
    }
    snprintf(path, sizeof path, "%s/orig.txt", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/rst.txt", dir);
    unlink(path);
    if (rmdir(dir) != 0)
        fprintf(stderr, "nostall analyze: warning: cannot remove %s: %s\n", dir, strerror(errno));
    sample_signals(0);
    g_sample_dir[0] = '\0';
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

/* Everything measured on DATA with the configuration `cfg`. */
static int measure(const char *data, nostall_config *cfg, double step_s, uint64_t max_batches,
                   int show, const an_meas *runs, an_meas *m)
{
    nostall_loader *ld;
    nostall_config *wcfg = NULL;
    paths p = {NULL, 0};
    int status = -1;
    memset(m, 0, sizeof *m);

    /* the dataset: index and file sizes (a loader of one thread, freed at once) */
    /* fresh items per epoch: without echoing (the model applies it) */
    static const char *const probe_set[] = {"threads", "1", "batches_ahead", "1", "cache_bytes", "0",
                                            "storage_mbps", "0", "storage_latency_ms", "0",
                                            "echo", "fixed", "echo_factor", "1", "coordinate", "",
                                            "cache_transcode", "0", NULL};
    nostall_config *probe_cfg = config_variant(cfg, probe_set);
    if (!probe_cfg) return -1;
    int rc = nostall_loader_create(&ld, data, probe_cfg);
    nostall_config_free(probe_cfg);
    if (rc < 0) {
        fprintf(stderr, "nostall analyze: %s\n", nostall_last_error());
        return -1;
    }
    nostall_dataset_info info;
    nostall_loader_info(ld, &info, sizeof info);
    nostall_loader_stop(ld);
    p.v = calloc(info.items ? info.items : 1, sizeof(char *));
    if (!p.v) goto oom;
    for (uint64_t i = 0; i < info.items; i++) {
        const char *path;
        int64_t label;
        if (nostall_loader_item(ld, i, &path, &label) < 0) continue;
        /* http(s) items: no page cache to drop, no file to stat (not measured here) */
        if (!strncmp(path, "http://", 7) || !strncmp(path, "https://", 8)) continue;
        if (!(p.v[p.n] = strdup(path))) goto oom;
        p.n++;
        struct stat sb;
        if (stat(path, &sb) == 0) m->dataset_bytes += (double)sb.st_size;
    }
    m->dataset_items = (double)info.items;
    m->items_per_epoch = (double)info.items_per_epoch;
    m->item_out_bytes = info.batches_per_epoch ? (double)info.batch_bytes : 0;
    nostall_loader_free(ld);
    ld = NULL;

    uint64_t u = 0;
    double d = 0;
    char val[64];
    nostall_config_get_uint(cfg, NOSTALL_OPT_BATCH_SIZE, &u);
    m->batch_size = (double)u;
    if (m->batch_size > 0) m->item_out_bytes /= m->batch_size;
    /* the CPUs this process may run on (taskset, cgroup cpusets), else online ones */
    cpu_set_t set;
    m->cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                          : (double)sysconf(_SC_NPROCESSORS_ONLN);
    m->mem_available_bytes = mem_available();
    nostall_config_get_uint(cfg, NOSTALL_OPT_THREADS, &u);
    m->threads = u ? (double)u : m->cores;
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

    /* microbenchmarks */
    if (show) fprintf(stderr, "measuring memory and storage ...\n");
    m->mem_bw = mem_bandwidth();
    m->cpu_available = cpu_available((int)m->cores);
    storage_bench(&p, m);

    /* Per-core prep cost: the loader alone, as fast as it goes, every file in
     * the page cache (workers busy all the time, as when prep is the
     * bottleneck; with a step they idle and each item costs more CPU). */
    {
        char *buf = malloc(1 << 20);
        if (!buf) goto oom;
        for (size_t i = 0; i < p.n; i++)
            if (read_file(p.v[i], buf, 1 << 20) < 0)
                fprintf(stderr, "nostall analyze: warning: cannot read %s: %s\n", p.v[i], strerror(errno));
        free(buf);
    }
    static const char *const warm_set[] = {"cache", "none", "cache_bytes", "0", "storage_mbps", "0",
                                           "storage_latency_ms", "0", "echo", "fixed", "echo_factor", "1",
                                           "epochs", "1", "coordinate", "", "cache_transcode", "0",
                                           NULL};
    wcfg = config_variant(cfg, warm_set);
    if (!wcfg) goto oom;
    run_out prep;
    if (run_loader(data, wcfg, 0, max_batches, "prep", show, &prep) < 0) goto out;
    m->prep_items = (double)prep.items;
    m->prep_seconds = prep.seconds;
    m->prep_cpu_s = prep.cpu_s;
    m->prep_fetch_ns = (double)prep.st.fetch_busy_ns;
    m->prep_decode_ns = (double)prep.st.decode_busy_ns;
    m->prep_augment_ns = (double)prep.st.augment_busy_ns;
    transcode_sample(&p, wcfg, show, m);

    if (runs) {
        /* the three runs were measured elsewhere (Python, with a real step) */
#define AN_TAKE_(f) m->f = runs->f;
        AN_TAKE_(step_s) AN_TAKE_(step_cpu_s) AN_TAKE_(syn_seconds) AN_TAKE_(syn_batches)
        AN_TAKE_(warm_seconds) AN_TAKE_(warm_items) AN_TAKE_(warm_batches) AN_TAKE_(warm_stall_s)
        AN_TAKE_(warm_cpu_s) AN_TAKE_(warm_fetch_ns) AN_TAKE_(warm_decode_ns) AN_TAKE_(warm_augment_ns)
        AN_TAKE_(cold_seconds) AN_TAKE_(cold_items) AN_TAKE_(cold_batches) AN_TAKE_(cold_stall_s)
        AN_TAKE_(cold_storage_reads) AN_TAKE_(cold_storage_bytes) AN_TAKE_(cold_storage_wait_ns)
        AN_TAKE_(cold_fetch_ns)
#undef AN_TAKE_
        if (runs->cores > 0) m->cores = runs->cores;
        status = 0;
        goto out;
    }
    uint64_t nb = info.batches_per_epoch;
    if (max_batches && max_batches < nb) nb = max_batches;
    /* 1. synthetic: the step alone */
    run_out syn, warm, cold;
    run_synthetic(step_s, nb, show, &syn);
    m->syn_seconds = syn.seconds;
    m->syn_batches = (double)syn.batches;
    m->step_s = syn.batches ? syn.seconds / syn.batches : 0;
    m->step_cpu_s = syn.batches ? syn.cpu_s / syn.batches : 0;

    /* 2. cached: every file in the page cache (read above), no emulated storage, no echo */
    rc = run_loader(data, wcfg, m->step_s, max_batches, "cached", show, &warm);
    if (rc < 0) goto out;
    m->warm_seconds = warm.seconds;
    m->warm_items = (double)warm.items;
    m->warm_batches = (double)warm.batches;
    m->warm_stall_s = warm.stall_s;
    m->warm_cpu_s = warm.cpu_s;
    m->warm_fetch_ns = (double)warm.st.fetch_busy_ns;
    m->warm_decode_ns = (double)warm.st.decode_busy_ns;
    m->warm_augment_ns = (double)warm.st.augment_busy_ns;

    /* 3. cold: the configuration as given, the dataset dropped from the page cache */
    int failed = drop_all(&p);
    if (failed)
        fprintf(stderr, "nostall analyze: warning: could not drop %d file(s) from the page cache "
                        "(e.g. %s)\n", failed, p.v[0]);
    nostall_config_set(cfg, "epochs", "1");
    nostall_config_set(cfg, "echo", "fixed");
    nostall_config_set(cfg, "echo_factor", "1");
    rc = run_loader(data, cfg, m->step_s, max_batches, "cold", show, &cold);
    if (rc < 0) goto out;
    m->cold_seconds = cold.seconds;
    m->cold_items = (double)cold.items;
    m->cold_batches = (double)cold.batches;
    m->cold_stall_s = cold.stall_s;
    m->cold_storage_reads = (double)cold.st.storage_reads;
    m->cold_storage_bytes = (double)cold.st.storage_bytes_read;
    m->cold_storage_wait_ns = (double)cold.st.storage_wait_ns;
    m->cold_fetch_ns = (double)cold.st.fetch_busy_ns;
    status = 0;
    goto out;
oom:
    fprintf(stderr, "nostall analyze: out of memory indexing %s\n", data);
out:
    nostall_config_free(wcfg);
    drop_all(&p);
    nostall_loader_free(ld);
    paths_free(&p);
    return status;
}

/* ---- the command ---------------------------------------------------------- */

int cmd_analyze(int argc, char **argv)
{
    const char *data = NULL, *report = NULL, *meas_file = NULL, *runs_file = NULL;
    const char *predict[32];
    int npredict = 0;
    double step_ms = -1, step_rate = -1;
    uint64_t max_batches = 0;
    int json = 0, quiet = 0, status = 1, rc;
    nostall_config *cfg = NULL;
    an_result *r = NULL;

    if (nostall_config_create(&cfg) < 0) {
        fprintf(stderr, "nostall analyze: %s\n", nostall_last_error());
        return 1;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            analyze_usage(stdout);
            nostall_config_free(cfg);
            return 0;
        }
        if (!strcmp(a, "--json")) { json = 1; continue; }
        if (!strcmp(a, "--quiet")) { quiet = 1; continue; }
        if (strncmp(a, "--", 2) != 0) {
            if (data) {
                fprintf(stderr, "nostall analyze: unexpected argument '%s' (DATA is '%s')\n", a, data);
                goto usage_error;
            }
            data = a;
            continue;
        }
        char name[128];
        const char *value;
        tool_flag_name(a, name, sizeof name, &value);
        int ours = !strcmp(name, "step_ms") || !strcmp(name, "step_rate") || !strcmp(name, "report") ||
                   !strcmp(name, "measurements") || !strcmp(name, "predict") || !strcmp(name, "runs") ||
                   !strcmp(name, "max_batches");
        if (!ours) {
            int id = tool_loader_option(cfg, "analyze", name, value, argc, argv, &i);
            if (id == -1)
                fprintf(stderr, "nostall analyze: unknown option '%s' (see nostall analyze --help)\n", a);
            if (id < 0) goto usage_error;
            continue;
        }
        if (!value) {
            if (i + 1 < argc) {
                value = argv[++i];
            } else {
                fprintf(stderr, "nostall analyze: option '%s' needs a value\n", a);
                goto usage_error;
            }
        }
        {
            char *end;
            double x = strtod(value, &end);
            int num = end != value && !*end;
            if (!strcmp(name, "report")) report = value;
            else if (!strcmp(name, "measurements")) meas_file = value;
            else if (!strcmp(name, "runs")) runs_file = value;
            else if (!strcmp(name, "predict")) {
                if (npredict >= 32) {
                    fprintf(stderr, "nostall analyze: at most 32 --predict\n");
                    goto usage_error;
                }
                predict[npredict++] = value;
            } else if (!strcmp(name, "step_ms")) {
                if (!num || !(x >= 0) || x > 3.6e6) {
                    fprintf(stderr, "nostall analyze: --step-ms '%s': need milliseconds in [0, 3600000]\n", value);
                    goto usage_error;
                }
                step_ms = x;
            } else if (!strcmp(name, "step_rate")) {
                if (!num || !(x > 0)) {
                    fprintf(stderr, "nostall analyze: --step-rate '%s': need items per second > 0\n", value);
                    goto usage_error;
                }
                step_rate = x;
            } else {
                if (!num || !(x >= 1) || x != floor(x)) {
                    fprintf(stderr, "nostall analyze: --max-batches '%s': need a whole number >= 1\n", value);
                    goto usage_error;
                }
                max_batches = (uint64_t)x;
            }
            continue;
        }
        if (nostall_config_set(cfg, name, value) < 0) {
            fprintf(stderr, "nostall analyze: %s\n", nostall_last_error());
            goto usage_error;
        }
    }
    if (step_ms >= 0 && step_rate > 0) {
        fprintf(stderr, "nostall analyze: give --step-ms or --step-rate, not both\n");
        goto usage_error;
    }
    if (!meas_file && !data) {
        fprintf(stderr, "nostall analyze: missing DATA (an ImageFolder directory or a file list)\n");
        goto usage_error;
    }
    if (!meas_file && !runs_file && step_ms < 0 && step_rate < 0) {
        fprintf(stderr, "nostall analyze: need --step-ms MS or --step-rate ITEMS_PER_S (the training step)\n");
        goto usage_error;
    }
    r = calloc(1, sizeof *r);
    if (!r) {
        fprintf(stderr, "nostall analyze: out of memory\n");
        goto out;
    }
    if (meas_file) {
        char err[512];
        if (an_read_measurements(meas_file, &r->m, err, sizeof err) < 0) {
            fprintf(stderr, "nostall analyze: %s\n", err);
            goto out;
        }
    } else {
        uint64_t bs = 1;
        nostall_config_get_uint(cfg, NOSTALL_OPT_BATCH_SIZE, &bs);
        double step_s = step_rate > 0 ? bs / step_rate : step_ms / 1000;
        int show = !quiet && isatty(2);
        an_meas *runs = NULL;
        if (runs_file) {
            char err[512];
            if (!(runs = calloc(1, sizeof *runs))) goto out;
            if (an_read_measurements(runs_file, runs, err, sizeof err) < 0) {
                fprintf(stderr, "nostall analyze: %s\n", err);
                free(runs);
                goto out;
            }
        }
        rc = measure(data, cfg, step_s, max_batches, show, runs, &r->m);
        free(runs);
        if (rc < 0) goto out;
    }
    an_analyze(r);
    for (int i = 0; i < npredict; i++) {
        char err[512];
        an_row *row = &r->predict[r->npredict];
        row->s = r->cur;
        if (an_scenario_parse(&r->m, &row->s, predict[i], err, sizeof err) < 0) {
            fprintf(stderr, "nostall analyze: %s\n", err);
            status = 2;
            goto out;
        }
        snprintf(row->group, sizeof row->group, "predict");
        snprintf(row->label, sizeof row->label, "%s", predict[i]);
        an_predict(&r->m, &row->s, &row->p);
        r->npredict++;
    }
    const char *shown = data ? data : meas_file;
    if (json) an_report_json(stdout, r, shown);
    else an_report_text(stdout, r, shown);
    if (report && an_report_html(report, r, shown) < 0) goto out;
    status = 0;
out:
    free(r);
    nostall_config_free(cfg);
    return status;
usage_error:
    nostall_config_free(cfg);
    return 2;
}
