/*
 * transcode.c — `nostall transcode SRC DST`: copy a dataset, rewriting every
 * JPEG losslessly with a restart marker every N MCUs (default 1) or every N
 * MCU rows.
 *
 * Why: to reach a crop's rows, a JPEG decoder must Huffman-decode every
 * row above them (entropy data cannot be entered in the middle), and on
 * typical training images Huffman decoding is most of the decode time. A
 * restart marker resets the decoder state, so the library's region decode
 * (src/decode/jpeg_rst.c) can start at the marker just above the crop and
 * never touch the rows above it; with a marker every N MCUs, N dividing
 * the MCUs per row, it also skips the MCUs left and right of it.
 * Measured numbers: docs/performance.md.
 *
 * What: the rewrite is the library's, nostall_transcode_jpeg() (nostall.h:
 * the same coefficients, so the same pixels; its one policy for tables,
 * markers and what it keeps as it is, shared with the MinIO cache's
 * cache_transcode and the analyzer's what-if). This file is the tree walk:
 * SRC is walked recursively (sorted, symbolic links followed, at most 64
 * levels) and mirrored into DST. A file is a JPEG by its magic bytes
 * (FF D8 FF), not its name. APPn and COM segments are kept. Other files
 * are copied byte for byte; a JPEG the rewrite keeps as it is (with the
 * reason) is copied unchanged, and so is a damaged one (reported by path
 * with libjpeg's words), so the loader sees it exactly as before; the run
 * goes on. I/O errors are reported by path too, the run goes on, and the
 * exit status is 1.
 *
 * Files are written to NAME.tmp and renamed into place, so an interrupted
 * run never leaves a truncated file under a final name. Sizes in the
 * summary are decimal (1 MB = 10^6 bytes).
 *
 * Threads: the walk (directories created in order) runs on the calling
 * thread and hands files to --threads workers (default: the online CPUs)
 * through a bounded queue; each worker has its own file and output
 * buffers, and the counters, messages and progress line are guarded by one
 * mutex. Every file is rewritten the same way whatever the thread count.
 */
#include "args.h"
#include "commands.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define MAX_DEPTH 64
#define MAX_THREADS 256
#define QUEUE_LEN 64 /* files waiting for a worker */

typedef struct {
    const char *src, *dst;
    long rows; /* > 0: --restart-rows                        */
    long mcus; /* > 0: --restart-mcus (exactly one of the two) */
    long threads;
    int force, quiet;
} tc_opts;

typedef struct {
    char from[4096], to[4096];
} tc_job;

typedef struct {
    pthread_mutex_t mu; /* everything below, and stderr */
    long files, jpegs, copied, corrupt, kept, errors;
    unsigned long long in_bytes, out_bytes, jpeg_in, jpeg_out;
    int progress;
    double t0, last;
    /* the queue from the walk to the workers */
    pthread_cond_t not_empty, not_full;
    tc_job *queue;
    unsigned head, count;
    int closed;
    const tc_opts *o;
} tc_state;

typedef struct {
    uint8_t *buf; /* file contents, grown as needed */
    size_t cap;
    uint8_t *out; /* the rewrite, grown as needed   */
    size_t out_cap;
} tc_buf;

static const tool_arg tc_args[] = {
    {"restart-mcus", TOOL_ARG_INT, offsetof(tc_opts, mcus), 1, 64, NULL, "N",
     "MCUs (8 or 16 pixels square) per restart interval; lowered per image to the largest "
     "divisor of its MCUs per row, so intervals tile the rows",
     NULL, 0, "1"},
    {"restart-rows", TOOL_ARG_INT, offsetof(tc_opts, rows), 1, 64, NULL, "N",
     "instead: MCU rows per restart interval (rows only: the columns beside a crop are still "
     "decoded)",
     NULL, 0, ""},
    {"threads", TOOL_ARG_INT, offsetof(tc_opts, threads), 1, MAX_THREADS, NULL, "N",
     "files transcoded at once", NULL, 0, "the online CPUs"},
    {"force", TOOL_ARG_FLAG, offsetof(tc_opts, force), 0, 0, NULL, NULL,
     "write into DST even if it is not empty", NULL, 0, NULL},
    {"quiet", TOOL_ARG_FLAG, offsetof(tc_opts, quiet), 0, 0, NULL, NULL,
     "no progress line (the summary is still printed)", NULL, 0, NULL},
};

static const tool_cmd tc_cmd = {
    .name = "transcode",
    .prefix = "transcode",
    .usage = "usage: nostall transcode SRC DST [options]\n"
             "Copy the directory tree SRC (an ImageFolder dataset or any tree) to DST,\n"
             "rewriting every JPEG losslessly (same DCT coefficients, so the same pixels)\n"
             "as a baseline JPEG with a restart marker every N MCUs (or MCU rows): standard\n"
             "Huffman tables, or optimized ones where those would grow the file by more\n"
             "than an eighth; EXIF, ICC and other segments kept. nostall's region decode\n"
             "then skips the MCUs above (and with --restart-mcus beside) a crop without\n"
             "decoding them. Other files are copied as they are; a damaged JPEG is\n"
             "reported and copied unchanged, and so is one the rewrite keeps as it is\n"
             "(said why: not 8-bit grayscale or YCbCr, the restart markers asked for\n"
             "already there, over 33.5 Mpixel, a progressive file whose scans leave\n"
             "coefficients incomplete, or a rewrite more than an eighth larger).\n",
    .positionals = "SRC DST",
    .max_positionals = 2,
    .args = tc_args,
    .nargs = sizeof tc_args / sizeof tc_args[0],
};

static int parse_args(int argc, char **argv, tc_opts *o)
{
    memset(o, 0, sizeof *o);
    int n = tool_args_parse(&tc_cmd, argc, argv, o, NULL);
    if (n < 0) return n;
    if (o->mcus && o->rows) {
        fprintf(stderr, "transcode: --restart-mcus and --restart-rows exclude each other\n");
        return TOOL_ARGS_ERROR;
    }
    if (!o->rows && !o->mcus) o->mcus = 1;
    if (!o->threads) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        o->threads = c < 1 ? 1 : c > MAX_THREADS ? MAX_THREADS : c;
    }
    o->src = n > 0 ? argv[1] : NULL;
    o->dst = n > 1 ? argv[2] : NULL;
    if (!o->src || !o->dst) {
        fprintf(stderr,
                "transcode: missing %s (usage: nostall transcode SRC DST [options]; "
                "see --help)\n",
                o->src ? "DST" : "SRC");
        return TOOL_ARGS_ERROR;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Files                                                                     */

/* Write data to path via path.tmp + rename. 0 or -1 (errno set). */
static int write_file(const char *path, const void *data, size_t len)
{
    char tmp[4200];
    int n = snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    FILE *f = fopen(tmp, "wb");
    if (!f) return -1;
    int bad = len && fwrite(data, 1, len, f) != len;
    if (fclose(f) != 0) bad = 1;
    if (bad || rename(tmp, path) != 0) {
        int e = errno ? errno : EIO;
        unlink(tmp);
        errno = e;
        return -1;
    }
    return 0;
}

/* progress() and report(): the caller holds s->mu. */
static void progress(tc_state *s, int final)
{
    if (!s->progress) return;
    double t = tool_now_s();
    if (!final && t - s->last < 0.1) return;
    s->last = t;
    fprintf(stderr, "\rtranscode: %ld files, %.1f MB -> %.1f MB", s->files,
            (double)s->in_bytes / 1e6, (double)s->out_bytes / 1e6);
    fflush(stderr);
}

/* One message line (fmt ends with a newline), escaped for the terminal:
 * file names may hold any byte. */
static void report(tc_state *s, const char *fmt, const char *path, const char *why)
{
    char line[8192];
    if (s->progress) fprintf(stderr, "\r\033[K");
    snprintf(line, sizeof line, fmt, path, why);
    line[strcspn(line, "\n")] = '\0'; /* the format's own newline */
    tool_line(stderr, "%s", line);
}

/* The rewrite of b->buf[0..len) into b->out: 0 with *out_len (0: kept
 * as it is) or a status; res says what happened. */
static int rewrite(const tc_opts *o, tc_buf *b, size_t len, size_t *out_len,
                   nostall_transcode_result *res)
{
    const size_t bound = nostall_transcode_bound(len);
    if (bound > b->out_cap) {
        uint8_t *p = bound == SIZE_MAX ? NULL : realloc(b->out, bound);
        if (!p) {
            snprintf(res->message, sizeof res->message, "out of memory");
            return NOSTALL_E_NOMEM;
        }
        b->out = p;
        b->out_cap = bound;
    }
    const nostall_transcode_options opts = {.restart_mcus = (uint32_t)o->mcus,
                                            .restart_rows = (uint32_t)o->rows};
    return nostall_transcode_jpeg(b->out, b->out_cap, out_len, b->buf, len, &opts, sizeof opts, res,
                                  sizeof *res);
}

static void do_file(tc_state *s, tc_buf *b, const char *from, const char *to)
{
    errno = 0;
    long long len = tool_read_file(from, &b->buf, &b->cap, SIZE_MAX - 1);
    if (len < 0) {
        int e = errno;
        pthread_mutex_lock(&s->mu);
        report(s, "transcode: cannot read '%s': %s\n", from, strerror(e));
        s->errors++;
        pthread_mutex_unlock(&s->mu);
        return;
    }
    const uint8_t *data = b->buf;
    size_t out_len = (size_t)len;
    int jpeg = len >= 3 && b->buf[0] == 0xFF && b->buf[1] == 0xD8 && b->buf[2] == 0xFF;
    int damaged = 0, kept = 0, failed = 0;
    nostall_transcode_result res;
    memset(&res, 0, sizeof res);
    if (jpeg) {
        size_t n = 0;
        const int rc = rewrite(s->o, b, (size_t)len, &n, &res);
        if (rc == 0 && n > 0) {
            data = b->out;
            out_len = n;
        } else {
            damaged = rc == NOSTALL_E_CORRUPT || rc == NOSTALL_E_TRUNCATED;
            failed = rc < 0 && !damaged;
            kept = rc == 0;
            jpeg = 0;
        }
    }
    errno = 0;
    int wrc = write_file(to, data, out_len), we = errno;
    pthread_mutex_lock(&s->mu);
    if (damaged)
        report(s, "transcode: %s: damaged JPEG (%s), copied unchanged\n", from, res.message);
    if (kept) report(s, "transcode: %s: kept as it is (%s)\n", from, res.message);
    if (failed) {
        report(s, "transcode: cannot rewrite '%s': %s (copied unchanged)\n", from, res.message);
        s->errors++;
    }
    if (wrc != 0) {
        report(s, "transcode: cannot write '%s': %s\n", to, strerror(we));
        s->errors++;
    } else {
        s->files++;
        s->in_bytes += (unsigned long long)len;
        s->out_bytes += out_len;
        if (jpeg) {
            s->jpegs++;
            s->jpeg_in += (unsigned long long)len;
            s->jpeg_out += out_len;
        } else {
            s->copied++; /* of which damaged or kept JPEGs, counted apart */
            s->corrupt += damaged;
            s->kept += kept;
        }
    }
    progress(s, 0);
    pthread_mutex_unlock(&s->mu);
}

/* A worker: files from the queue until the walk closes it and it is empty. */
static void *worker_main(void *arg)
{
    tc_state *s = arg;
    tc_buf b = {NULL, 0, NULL, 0};
    tc_job job; /* 8 KB: a thread's stack holds it */
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (s->count == 0 && !s->closed) pthread_cond_wait(&s->not_empty, &s->mu);
        if (s->count == 0) { /* closed and drained */
            pthread_mutex_unlock(&s->mu);
            break;
        }
        job = s->queue[s->head];
        s->head = (s->head + 1) % QUEUE_LEN;
        s->count--;
        pthread_cond_signal(&s->not_full);
        pthread_mutex_unlock(&s->mu);
        do_file(s, &b, job.from, job.to);
    }
    free(b.buf);
    free(b.out);
    return NULL;
}

/* Hand a file to the workers (blocks while the queue is full), or do it
 * here when there are none. */
static void submit(tc_state *s, tc_buf *own, const char *from, const char *to)
{
    if (!s->queue) {
        do_file(s, own, from, to);
        return;
    }
    pthread_mutex_lock(&s->mu);
    while (s->count == QUEUE_LEN) pthread_cond_wait(&s->not_full, &s->mu);
    tc_job *j = &s->queue[(s->head + s->count) % QUEUE_LEN];
    snprintf(j->from, sizeof j->from, "%s", from);
    snprintf(j->to, sizeof j->to, "%s", to);
    s->count++;
    pthread_cond_signal(&s->not_empty);
    pthread_mutex_unlock(&s->mu);
}

static int skip_name(const struct dirent *e)
{
    return strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
}

/* An error of the walk itself: reported and counted. */
static void walk_error(tc_state *s, const char *fmt, const char *path, const char *why)
{
    pthread_mutex_lock(&s->mu);
    report(s, fmt, path, why);
    s->errors++;
    pthread_mutex_unlock(&s->mu);
}

static void walk(tc_state *s, tc_buf *own, const char *from, const char *to, int depth)
{
    if (depth > MAX_DEPTH) {
        walk_error(s, "transcode: '%s': %s\n", from, "more than 64 directory levels, skipped");
        return;
    }
    struct dirent **names = NULL;
    int n = scandir(from, &names, skip_name, alphasort);
    if (n < 0) {
        walk_error(s, "transcode: cannot read directory '%s': %s\n", from, strerror(errno));
        return;
    }
    for (int i = 0; i < n; i++) {
        char a[4096], b[4096];
        int la = snprintf(a, sizeof a, "%s/%s", from, names[i]->d_name);
        int lb = snprintf(b, sizeof b, "%s/%s", to, names[i]->d_name);
        free(names[i]);
        if (la < 0 || lb < 0 || (size_t)la >= sizeof a || (size_t)lb >= sizeof b) {
            walk_error(s, "transcode: '%s': %s\n", from, "path too long, entry skipped");
            continue;
        }
        struct stat st;
        if (stat(a, &st) != 0) {
            walk_error(s, "transcode: cannot stat '%s': %s\n", a, strerror(errno));
            continue;
        }
        if (S_ISDIR(st.st_mode)) {
            if (mkdir(b, 0777) != 0 && errno != EEXIST) {
                walk_error(s, "transcode: cannot create '%s': %s\n", b, strerror(errno));
                continue;
            }
            walk(s, own, a, b, depth + 1);
        } else if (S_ISREG(st.st_mode)) {
            submit(s, own, a, b);
        } else {
            pthread_mutex_lock(&s->mu);
            report(s, "transcode: '%s': %s\n", a, "not a regular file or directory, skipped");
            pthread_mutex_unlock(&s->mu);
        }
    }
    free(names);
}

int cmd_transcode(int argc, char **argv)
{
    tc_opts o;
    int prc = parse_args(argc, argv, &o);
    if (prc < 0) return tool_args_status(prc);
    if (strlen(o.src) > 3000 || strlen(o.dst) > 3000) {
        fprintf(stderr, "transcode: SRC or DST path is too long\n");
        return 2;
    }
    struct stat st;
    if (stat(o.src, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "transcode: SRC '%s' is not a directory%s%s\n", o.src, errno ? ": " : "",
                errno ? strerror(errno) : "");
        return 2;
    }
    errno = 0;
    if (stat(o.dst, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) {
            fprintf(stderr, "transcode: '%s' exists and is not a directory\n", o.dst);
            return 2;
        }
        int ne = tool_dir_nonempty(o.dst);
        if (ne < 0) {
            fprintf(stderr, "transcode: cannot read '%s': %s\n", o.dst, strerror(errno));
            return 1;
        }
        if (ne && !o.force) {
            fprintf(stderr,
                    "transcode: '%s' exists and is not empty (use --force to write "
                    "into it)\n",
                    o.dst);
            return 2;
        }
    }
    if (tool_mkdir_p(o.dst) != 0) {
        fprintf(stderr, "transcode: cannot create '%s': %s\n", o.dst, strerror(errno));
        return 1;
    }
    /* DST inside SRC (or the same) would copy its own output forever. */
    char rs[PATH_MAX], rd[PATH_MAX];
    if (!realpath(o.src, rs) || !realpath(o.dst, rd)) {
        fprintf(stderr, "transcode: cannot resolve '%s' or '%s': %s\n", o.src, o.dst,
                strerror(errno));
        return 1;
    }
    size_t ls = strlen(rs);
    if (strncmp(rs, rd, ls) == 0 && (rd[ls] == '\0' || rd[ls] == '/' || ls == 1)) {
        fprintf(stderr, "transcode: DST '%s' is inside SRC '%s'\n", o.dst, o.src);
        return 2;
    }

    tc_state s;
    memset(&s, 0, sizeof s);
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.not_empty, NULL);
    pthread_cond_init(&s.not_full, NULL);
    s.o = &o;
    s.progress = !o.quiet && isatty(STDERR_FILENO);
    s.t0 = s.last = tool_now_s();
    pthread_t tids[MAX_THREADS];
    long started = 0;
    if (o.threads > 1 && (s.queue = calloc(QUEUE_LEN, sizeof *s.queue)) != NULL) {
        for (; started < o.threads; started++)
            if (pthread_create(&tids[started], NULL, worker_main, &s) != 0) break;
        if (started == 0) { /* no threads after all: do it here */
            free(s.queue);
            s.queue = NULL;
        }
    }
    tc_buf own = {NULL, 0, NULL, 0};
    walk(&s, &own, o.src, o.dst, 0);
    pthread_mutex_lock(&s.mu);
    s.closed = 1;
    pthread_cond_broadcast(&s.not_empty);
    pthread_mutex_unlock(&s.mu);
    for (long i = 0; i < started; i++) pthread_join(tids[i], NULL);
    free(s.queue);
    free(own.buf);
    free(own.out);
    pthread_cond_destroy(&s.not_empty);
    pthread_cond_destroy(&s.not_full);
    pthread_mutex_destroy(&s.mu);
    if (s.progress) fprintf(stderr, "\r\033[K");
    double t = tool_now_s() - s.t0;
    printf("transcode: %ld files in %.1f s: %ld JPEGs transcoded (%.1f MB -> %.1f MB, "
           "restart every %ld MCU%s%s), %ld other files copied, %ld damaged JPEGs copied "
           "unchanged, %ld JPEGs kept as they are (nothing to gain, or not rewritable with the same "
           "pixels); "
           "%.1f MB -> %.1f MB in all%s\n",
           s.files, t, s.jpegs, (double)s.jpeg_in / 1e6, (double)s.jpeg_out / 1e6,
           o.rows ? o.rows : o.mcus, o.rows ? " row" : "",
           (o.rows ? o.rows : o.mcus) == 1 ? "" : "s", s.copied - s.corrupt - s.kept, s.corrupt,
           s.kept, (double)s.in_bytes / 1e6, (double)s.out_bytes / 1e6, "");
    if (s.errors) {
        fprintf(stderr, "transcode: %ld error(s), see above\n", s.errors);
        return 1;
    }
    return 0;
}
