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
 * the MCUs per row, it also skips the MCUs left and right of the crop.
 * Measured numbers: docs/performance.md.
 *
 * What: SRC is walked recursively (sorted, symbolic links followed, at most
 * 64 levels) and mirrored into DST. A file is a JPEG by its magic bytes
 * (FF D8 FF), not its name. Each JPEG is read as DCT coefficients
 * (jpeg_read_coefficients) and written back from the same coefficients
 * (jpeg_write_coefficients): the same quantization tables and sampling, so
 * every decoder gives exactly the same pixels. The copy is sequential
 * (progressive input becomes baseline), Huffman tables are optimized
 * (usually a smaller file than the camera's or PIL's default tables; the
 * markers add 2 bytes per interval), and it has a DRI of N MCUs (lowered
 * to the largest divisor of the MCUs per row not above N, so that the
 * intervals tile each row) or of N MCU rows (--restart-rows).
 * APPn (EXIF, ICC, XMP, ...) and COM markers are copied; JFIF and Adobe
 * markers are rewritten by libjpeg. Other files are copied byte for byte.
 *
 * Damage: a JPEG that libjpeg cannot read, or reads with any warning
 * (corrupt or truncated data), is reported by path and copied unchanged,
 * so the loader sees it exactly as before; the run goes on. I/O errors are
 * reported by path too, the run goes on, and the exit status is 1.
 *
 * Files are written to NAME.tmp and renamed into place, so an interrupted
 * run never leaves a truncated file under a final name. Sizes in the
 * summary are decimal (1 MB = 10^6 bytes).
 *
 * Threads: the walk (directories created in order) runs on the calling
 * thread and hands files to --threads workers (default: the online CPUs)
 * through a bounded queue; each worker has its own file buffer, and the
 * counters, messages and progress line are guarded by one mutex. Every file
 * is transcoded the same way whatever the thread count.
 */
#include "commands.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <jpeglib.h>

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
} tc_buf;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: nostall transcode SRC DST [options]\n"
            "Copy the directory tree SRC (an ImageFolder dataset or any tree) to DST,\n"
            "rewriting every JPEG losslessly (same DCT coefficients, so the same pixels)\n"
            "as a baseline JPEG with a restart marker every N MCUs (or MCU rows) and\n"
            "optimized Huffman tables. nostall's region decode then skips the MCUs\n"
            "above (and with --restart-mcus beside) a crop without decoding them.\n"
            "Other files are copied as they are; a damaged JPEG is reported and copied\n"
            "unchanged, and so is one a baseline copy would decode differently (a\n"
            "progressive file whose scans leave coefficients incomplete).\n"
            "\n"
            "options (--flag VALUE or --flag=VALUE):\n"
            "  --restart-mcus N  MCUs (8 or 16 pixels square) per restart interval,\n"
            "                    1..64 (default 1); lowered per image to the largest\n"
            "                    divisor of its MCUs per row, so intervals tile the rows\n"
            "  --restart-rows N  instead: MCU rows per restart interval, 1..64 (rows\n"
            "                    only: the columns beside a crop are still decoded)\n"
            "  --threads N       files transcoded at once, 1..256 (default: the online CPUs)\n"
            "  --force           write into DST even if it is not empty\n"
            "  --quiet           no progress line (the summary is still printed)\n"
            "  --help            show this help\n");
}

static int parse_args(int argc, char **argv, tc_opts *o, int *help)
{
    memset(o, 0, sizeof *o);
    *help = 0;
    int no_more_flags = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (no_more_flags || a[0] != '-' || a[1] == '\0') {
            if (!o->src) o->src = a;
            else if (!o->dst) o->dst = a;
            else {
                fprintf(stderr, "transcode: unexpected extra argument '%s' (SRC DST expected)\n", a);
                return -1;
            }
            continue;
        }
        if (strcmp(a, "--") == 0) {
            no_more_flags = 1;
            continue;
        }
        char name[32];
        const char *eq = strchr(a, '=');
        size_t nlen = eq ? (size_t)(eq - a) : strlen(a);
        if (nlen >= sizeof name) nlen = sizeof name - 1;
        memcpy(name, a, nlen);
        name[nlen] = '\0';
        const char *val = eq ? eq + 1 : NULL;
        if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
            *help = 1;
            return 0;
        }
        if (strcmp(name, "--quiet") == 0 || strcmp(name, "--force") == 0) {
            if (val) {
                fprintf(stderr, "transcode: %s takes no value\n", name);
                return -1;
            }
            if (name[2] == 'q') o->quiet = 1;
            else o->force = 1;
            continue;
        }
        const int is_mcus = strcmp(name, "--restart-mcus") == 0;
        const int is_threads = strcmp(name, "--threads") == 0;
        if (strcmp(name, "--restart-rows") != 0 && !is_mcus && !is_threads) {
            fprintf(stderr, "transcode: unknown option '%s' (see nostall transcode --help)\n", a);
            return -1;
        }
        if (!val) {
            if (i + 1 >= argc) {
                fprintf(stderr, "transcode: %s needs a value\n", name);
                return -1;
            }
            val = argv[++i];
        }
        char *end;
        errno = 0;
        long v = strtol(val, &end, 10);
        const long hi = is_threads ? MAX_THREADS : 64;
        if (!(*val >= '0' && *val <= '9') || *end != '\0' || errno == ERANGE || v < 1 || v > hi) {
            fprintf(stderr, "transcode: %s must be an integer in 1..%ld (got '%s')\n", name, hi, val);
            return -1;
        }
        if (is_threads) o->threads = v;
        else if (is_mcus) o->mcus = v;
        else o->rows = v;
        if (o->mcus && o->rows) {
            fprintf(stderr, "transcode: --restart-mcus and --restart-rows exclude each other\n");
            return -1;
        }
    }
    if (!o->rows && !o->mcus) o->mcus = 1;
    if (!o->threads) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        o->threads = n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : n;
    }
    if (!o->src || !o->dst) {
        fprintf(stderr, "transcode: missing %s (usage: nostall transcode SRC DST [options]; "
                        "see --help)\n", o->src ? "DST" : "SRC");
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The lossless transcode                                                    */

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    int warnings;
    char msg[JMSG_LENGTH_MAX];
} tc_err;

static void tc_error_exit(j_common_ptr cinfo)
{
    tc_err *e = (tc_err *)cinfo->err;
    e->pub.format_message(cinfo, e->msg);
    longjmp(e->jb, 1);
}

/* Warnings (level -1) mean damaged or truncated data: remember the first. */
static void tc_emit(j_common_ptr cinfo, int level)
{
    tc_err *e = (tc_err *)cinfo->err;
    if (level >= 0) return;
    if (e->warnings++ == 0) e->pub.format_message(cinfo, e->msg);
}

static int is_marker(const jpeg_saved_marker_ptr m, int code, const char *id, unsigned idlen)
{
    return m->marker == code && m->data_length >= idlen && memcmp(m->data, id, idlen) == 0;
}

/* See util.h. */
int tool_transcode_jpeg(const uint8_t *in, size_t len, int rows, int per, unsigned char **out,
                        unsigned long *out_len, char *msg, size_t msglen)
{
    struct jpeg_decompress_struct src;
    struct jpeg_compress_struct dst;
    tc_err err;
    memset(&src, 0, sizeof src);
    memset(&dst, 0, sizeof dst);
    memset(&err, 0, sizeof err);
    *out = NULL;
    *out_len = 0;
    src.err = jpeg_std_error(&err.pub);
    dst.err = &err.pub;
    err.pub.error_exit = tc_error_exit;
    err.pub.emit_message = tc_emit;
    volatile int have_src = 0, have_dst = 0; /* changed after setjmp, read after longjmp */
    if (setjmp(err.jb)) {
        snprintf(msg, msglen, "%s", err.msg);
        if (have_dst) jpeg_destroy_compress(&dst);
        if (have_src) jpeg_destroy_decompress(&src);
        free(*out);
        *out = NULL;
        return -1;
    }
    if ((unsigned long long)len > ULONG_MAX) {
        snprintf(msg, msglen, "file too large");
        return -1;
    }
    jpeg_create_decompress(&src);
    have_src = 1;
    jpeg_mem_src(&src, in, (unsigned long)len);
    jpeg_save_markers(&src, JPEG_COM, 0xFFFF);
    for (int m = 0; m < 16; m++) jpeg_save_markers(&src, JPEG_APP0 + m, 0xFFFF);
    jpeg_read_header(&src, TRUE);
    jvirt_barray_ptr *coefs = jpeg_read_coefficients(&src);
    if (err.warnings) {
        snprintf(msg, msglen, "%s", err.msg);
        jpeg_destroy_decompress(&src);
        return -1;
    }
    /* A progressive file whose scans leave coefficients unsent or
     * unrefined is decoded with block smoothing; a baseline copy would
     * not be, so its pixels would differ. */
    for (int c = 0; src.progressive_mode && c < src.num_components; c++)
        for (int k = 0; k < DCTSIZE2; k++)
            if (!src.coef_bits || src.coef_bits[c][k] != 0) {
                snprintf(msg, msglen, "progressive scans leave coefficients incomplete, which "
                                      "decoders smooth; a baseline copy would not be");
                jpeg_destroy_decompress(&src);
                return 1;
            }

    jpeg_create_compress(&dst);
    have_dst = 1;
    jpeg_mem_dest(&dst, out, out_len);
    jpeg_copy_critical_parameters(&src, &dst);
    dst.optimize_coding = TRUE;
    /* The restart interval must be whole MCU rows, or divide one, for the
     * decoder's fast path; libjpeg caps it at 65535 MCUs, so keep rows *
     * MCUs-per-row below that (an 8188-MCU-wide image still gets one row). */
    long mcus = dst.num_components == 1
                    ? ((long)src.image_width + 7) / 8
                    : ((long)src.image_width + 8L * src.max_h_samp_factor - 1) /
                          (8L * src.max_h_samp_factor);
    if (mcus < 1) mcus = 1;
    if (rows > 0) {
        dst.restart_in_rows = (long)rows * mcus <= 65535 ? rows : (int)(65535 / mcus);
    } else {
        long k = per < 1 ? 1 : per;
        while (mcus % k != 0) k--;
        dst.restart_interval = (unsigned)k;
    }
    jpeg_write_coefficients(&dst, coefs);
    for (jpeg_saved_marker_ptr m = src.marker_list; m; m = m->next) {
        if (dst.write_JFIF_header && is_marker(m, JPEG_APP0, "JFIF\0", 5)) continue;
        if (dst.write_Adobe_marker && is_marker(m, JPEG_APP0 + 14, "Adobe", 5)) continue;
        jpeg_write_marker(&dst, m->marker, m->data, m->data_length);
    }
    jpeg_finish_compress(&dst);
    jpeg_destroy_compress(&dst);
    have_dst = 0;
    (void)jpeg_finish_decompress(&src);
    jpeg_destroy_decompress(&src);
    if (err.warnings) { /* damage found after the coefficients (e.g. at EOI) */
        snprintf(msg, msglen, "%s", err.msg);
        free(*out);
        *out = NULL;
        return -1;
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

static void report(tc_state *s, const char *fmt, const char *path, const char *why)
{
    if (s->progress) fprintf(stderr, "\r\033[K");
    fprintf(stderr, fmt, path, why);
}

static void do_file(tc_state *s, tc_buf *b, const char *from, const char *to)
{
    const tc_opts *o = s->o;
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
    unsigned char *enc = NULL;
    int jpeg = len >= 3 && b->buf[0] == 0xFF && b->buf[1] == 0xD8 && b->buf[2] == 0xFF;
    int damaged = 0, kept = 0;
    char msg[JMSG_LENGTH_MAX + 128];
    if (jpeg) {
        unsigned long elen = 0;
        const int trc = tool_transcode_jpeg(b->buf, (size_t)len, (int)o->rows, (int)o->mcus, &enc,
                                            &elen, msg, sizeof msg);
        if (trc == 0) {
            data = enc;
            out_len = elen;
        } else {
            damaged = trc < 0;
            kept = trc > 0;
            jpeg = 0;
        }
    }
    errno = 0;
    int wrc = write_file(to, data, out_len), we = errno;
    free(enc);
    pthread_mutex_lock(&s->mu);
    if (damaged) report(s, "transcode: %s: damaged JPEG (%s), copied unchanged\n", from, msg);
    if (kept) report(s, "transcode: %s: kept as it is (%s)\n", from, msg);
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
    tc_buf b = {NULL, 0};
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
    int help;
    if (parse_args(argc, argv, &o, &help) < 0) return 2;
    if (help) {
        usage(stdout);
        return 0;
    }
    if (strlen(o.src) > 3000 || strlen(o.dst) > 3000) {
        fprintf(stderr, "transcode: SRC or DST path is too long\n");
        return 2;
    }
    struct stat st;
    if (stat(o.src, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "transcode: SRC '%s' is not a directory%s%s\n", o.src,
                errno ? ": " : "", errno ? strerror(errno) : "");
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
            fprintf(stderr, "transcode: '%s' exists and is not empty (use --force to write "
                            "into it)\n", o.dst);
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
    tc_buf own = {NULL, 0};
    walk(&s, &own, o.src, o.dst, 0);
    pthread_mutex_lock(&s.mu);
    s.closed = 1;
    pthread_cond_broadcast(&s.not_empty);
    pthread_mutex_unlock(&s.mu);
    for (long i = 0; i < started; i++) pthread_join(tids[i], NULL);
    free(s.queue);
    free(own.buf);
    pthread_cond_destroy(&s.not_empty);
    pthread_cond_destroy(&s.not_full);
    pthread_mutex_destroy(&s.mu);
    if (s.progress) fprintf(stderr, "\r\033[K");
    double t = tool_now_s() - s.t0;
    printf("transcode: %ld files in %.1f s: %ld JPEGs transcoded (%.1f MB -> %.1f MB, "
           "restart every %ld MCU%s%s), %ld other files copied, %ld damaged JPEGs copied "
           "unchanged, %ld JPEGs kept as they are (not rewritable without changing pixels); "
           "%.1f MB -> %.1f MB in all%s\n",
           s.files, t, s.jpegs, (double)s.jpeg_in / 1e6, (double)s.jpeg_out / 1e6,
           o.rows ? o.rows : o.mcus, o.rows ? " row" : "",
           (o.rows ? o.rows : o.mcus) == 1 ? "" : "s", s.copied - s.corrupt - s.kept, s.corrupt,
           s.kept,
           (double)s.in_bytes / 1e6,
           (double)s.out_bytes / 1e6, "");
    if (s.errors) {
        fprintf(stderr, "transcode: %ld error(s), see above\n", s.errors);
        return 1;
    }
    return 0;
}
