/*
 * jpeg_decode.c — the reference floor of the benchmark: plain libjpeg-turbo
 * decoding of every JPEG under a directory, single-threaded, nothing else.
 *
 *   jpeg_decode DIR [--mode full|coeffs] [--epochs E] [--warmup W]
 *
 * For each file (paths sorted, so every run sees the same list): read the
 * whole file into memory, jpeg_mem_src, then
 *   full    decode to 8-bit RGB at full resolution, scanline by scanline,
 *           into one reusable buffer (default libjpeg-turbo settings:
 *           islow IDCT, fancy upsampling), and discard the pixels;
 *   coeffs  jpeg_read_coefficients only: entropy (Huffman) decoding into
 *           DCT coefficient blocks, no IDCT, no upsampling, no color
 *           conversion. The least work any decoder of these files must do.
 * `--warmup W` decodes W whole passes untimed first (page cache, branch
 * predictors); `--epochs E` passes are timed. Prints one JSON object:
 *   {"mode", "images", "seconds", "cpu_seconds", "images_per_second",
 *    "images_per_cpu_second", "pixels", "bytes"}
 *
 * Built by bench/run.sh with `cc -O2 bench/jpeg_decode.c -ljpeg`.
 */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <time.h>

#include <jpeglib.h>

static char **paths;
static size_t npaths, cap_paths;

static int is_jpeg_name(const char *p)
{
    const char *dot = strrchr(p, '.');
    return dot && (!strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg"));
}

static int collect(const char *p, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    if (type != FTW_F || !is_jpeg_name(p)) return 0;
    if (npaths == cap_paths) {
        cap_paths = cap_paths ? 2 * cap_paths : 1024;
        paths = realloc(paths, cap_paths * sizeof *paths);
        if (!paths) return -1;
    }
    paths[npaths] = strdup(p);
    if (!paths[npaths]) return -1;
    npaths++;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct err_mgr {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
};

static void on_error(j_common_ptr ci)
{
    struct err_mgr *e = (struct err_mgr *)ci->err;
    longjmp(e->jb, 1);
}

static void on_message(j_common_ptr ci, int level)
{
    (void)ci;
    (void)level; /* ignore warnings (e.g. premature end of data) */
}

static unsigned char *filebuf;
static size_t filecap;
static unsigned char *rowbuf;
static size_t rowcap;

static long read_file(const char *p)
{
    FILE *f = fopen(p, "rb");
    if (!f) return -1;
    size_t n = 0;
    for (;;) {
        if (n == filecap) {
            filecap = filecap ? 2 * filecap : 1 << 20;
            filebuf = realloc(filebuf, filecap);
            if (!filebuf) {
                fclose(f);
                return -1;
            }
        }
        size_t r = fread(filebuf + n, 1, filecap - n, f);
        n += r;
        if (r == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    return bad ? -1 : (long)n;
}

/* Decode one file; returns pixels decoded (full) or 1 (coeffs), -1 on error. */
static long long decode_one(const char *p, int coeffs, long *bytes)
{
    long n = read_file(p);
    if (n <= 0) {
        fprintf(stderr, "jpeg_decode: cannot read %s\n", p);
        return -1;
    }
    *bytes = n;
    struct jpeg_decompress_struct ci;
    struct err_mgr em;
    ci.err = jpeg_std_error(&em.pub);
    em.pub.error_exit = on_error;
    em.pub.emit_message = on_message;
    if (setjmp(em.jb)) {
        char msg[JMSG_LENGTH_MAX];
        em.pub.format_message((j_common_ptr)&ci, msg);
        fprintf(stderr, "jpeg_decode: %s: %s\n", p, msg);
        jpeg_destroy_decompress(&ci);
        return -1;
    }
    jpeg_create_decompress(&ci);
    jpeg_mem_src(&ci, filebuf, (unsigned long)n);
    jpeg_read_header(&ci, TRUE);
    long long px;
    if (coeffs) {
        jvirt_barray_ptr *coef = jpeg_read_coefficients(&ci);
        (void)coef;
        px = (long long)ci.image_width * ci.image_height;
    } else {
        ci.out_color_space = JCS_RGB;
        jpeg_start_decompress(&ci);
        size_t stride = (size_t)ci.output_width * ci.output_components;
        if (stride > rowcap) {
            rowcap = stride;
            rowbuf = realloc(rowbuf, rowcap);
            if (!rowbuf) longjmp(em.jb, 1);
        }
        while (ci.output_scanline < ci.output_height) {
            JSAMPROW row = rowbuf;
            jpeg_read_scanlines(&ci, &row, 1);
        }
        px = (long long)ci.output_width * ci.output_height;
    }
    jpeg_finish_decompress(&ci);
    jpeg_destroy_decompress(&ci);
    return px;
}

static int pass(int coeffs, long long *pixels, long long *bytes)
{
    for (size_t i = 0; i < npaths; i++) {
        long b = 0;
        long long px = decode_one(paths[i], coeffs, &b);
        if (px < 0) return -1;
        *pixels += px;
        *bytes += b;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *dir = NULL;
    int coeffs = 0;
    long epochs = 1, warmup = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--mode") && i + 1 < argc) {
            const char *m = argv[++i];
            if (!strcmp(m, "full"))
                coeffs = 0;
            else if (!strcmp(m, "coeffs"))
                coeffs = 1;
            else {
                fprintf(stderr, "jpeg_decode: --mode must be full or coeffs\n");
                return 2;
            }
        } else if (!strcmp(a, "--epochs") && i + 1 < argc) {
            epochs = strtol(argv[++i], NULL, 10);
        } else if (!strcmp(a, "--warmup") && i + 1 < argc) {
            warmup = strtol(argv[++i], NULL, 10);
        } else if (a[0] == '-') {
            fprintf(stderr,
                    "usage: jpeg_decode DIR [--mode full|coeffs] [--epochs E] [--warmup W]\n");
            return 2;
        } else {
            dir = a;
        }
    }
    if (!dir || epochs < 1 || warmup < 0) {
        fprintf(stderr, "usage: jpeg_decode DIR [--mode full|coeffs] [--epochs E] [--warmup W]\n");
        return 2;
    }
    if (nftw(dir, collect, 32, FTW_PHYS) != 0) {
        fprintf(stderr, "jpeg_decode: cannot walk %s: %s\n", dir, strerror(errno));
        return 1;
    }
    if (npaths == 0) {
        fprintf(stderr, "jpeg_decode: no .jpg/.jpeg files under %s\n", dir);
        return 1;
    }
    qsort(paths, npaths, sizeof *paths, cmp_str);

    long long pixels = 0, bytes = 0;
    for (long w = 0; w < warmup; w++)
        if (pass(coeffs, &pixels, &bytes) < 0) return 1;
    pixels = bytes = 0;
    double t0 = wall_s(), c0 = cpu_s();
    for (long e = 0; e < epochs; e++)
        if (pass(coeffs, &pixels, &bytes) < 0) return 1;
    double secs = wall_s() - t0, cpu = cpu_s() - c0;
    long long images = (long long)npaths * epochs;
    printf("{\"mode\": \"%s\", \"images\": %lld, \"seconds\": %.6f, \"cpu_seconds\": %.6f, "
           "\"images_per_second\": %.3f, \"images_per_cpu_second\": %.3f, "
           "\"pixels\": %lld, \"bytes\": %lld}\n",
           coeffs ? "coeffs" : "full", images, secs, cpu, secs > 0 ? images / secs : 0.0,
           cpu > 0 ? images / cpu : 0.0, pixels, bytes);
    for (size_t i = 0; i < npaths; i++) free(paths[i]);
    free(paths);
    free(filebuf);
    free(rowbuf);
    return 0;
}
