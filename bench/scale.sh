#!/usr/bin/env bash
# bench/scale.sh — the dataset index at scale (issue 24): how long the
# index of a big source takes to build, and the memory it keeps per item.
#   list     a file list of LINES lines "n0NNNNNNN/n0NNNNNNN_K.JPEG<TAB>label"
#            (ImageNet's names; relative, joined with the list's folder)
#   shards   ITEMS samples in SHARDS local tar shards, each described by its
#            index file (NAME.tar.nstidx, as `nostall pack` writes it):
#            ImageNet's keys, a .jpg and a .cls member per sample; the tars
#            are sparse files of the described size (the index is read, the
#            shards are not: items may repeat the same few files, the point
#            is the index, not the disk)
#   loader   the same shards through nostall_loader_create (index, recipe,
#            ring; threads 1) and the state's fingerprint (every item)
# Each figure is the median of RUNS builds in one process (page cache warm;
# the first build is not counted). Memory: the bytes the index holds
# (nst_index_bytes: its arrays and strings), per item; and the growth of
# the process's peak RSS over the first build, per item.
# (s3:// prefixes are not measured here.)
#
# Usage: bash bench/scale.sh [--lines N] [--items N] [--shards K] [--runs R]
# Environment: BUILD (default build: `make build`), NOSTALL_BENCH_DATA
# (default /tmp/nostall-bench-data). Writes $BUILD/bench/scale.md.
set -euo pipefail
cd "$(dirname "$0")/.."
LINES=10000000
ITEMS=1281167
SHARDS=147
RUNS=5
while [ $# -gt 0 ]; do
    case "$1" in
        --lines) LINES=$2; shift 2 ;;
        --items) ITEMS=$2; shift 2 ;;
        --shards) SHARDS=$2; shift 2 ;;
        --runs) RUNS=$2; shift 2 ;;
        *) echo "usage: bash bench/scale.sh [--lines N] [--items N] [--shards K] [--runs R]" >&2; exit 2 ;;
    esac
done
BUILD=${BUILD:-build}
[ "$BUILD" = build ] && make -s build > /dev/null
[ -f "$BUILD/libnostall.a" ] || { echo "no $BUILD/libnostall.a" >&2; exit 1; }
DATA=${NOSTALL_BENCH_DATA:-/tmp/nostall-bench-data}/scale
mkdir -p "$DATA" "$BUILD/bench"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

cat > "$WORK/scale.c" <<'EOF'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "nostall.h"
#include "dataset/index.h"
#include "dataset/shards.h"
#include "dataset/tar.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double cpu(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static long peak_kb(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void gen_list(const char *path, long lines)
{
    FILE *f = fopen(path, "w");
    for (long i = 0; i < lines; i++) {
        int cls = (int)(i % 1000), k = (int)(i / 1000);
        fprintf(f, "n%08d/n%08d_%d.JPEG\t%d\n", 1440764 + cls * 7, 1440764 + cls * 7, 10000 + k, cls);
    }
    fclose(f);
}

static void gen_shards(const char *dir, long items, int shards)
{
    for (int s = 0; s < shards; s++) {
        long first = items * s / shards, last = items * (s + 1) / shards;
        nst_tar_index_writer w;
        nst_tar_index_writer_init(&w, 0);
        uint64_t pos = 0;
        char key[64];
        for (long i = first; i < last; i++) {
            int cls = (int)(i % 1000);
            snprintf(key, sizeof key, "n%08d/n%08d_%ld", 1440764 + cls * 7, 1440764 + cls * 7, 10000 + i / 1000);
            nst_tar_index_rec r = {.key = key, .key_len = (uint32_t)strlen(key), .nmembers = 2};
            uint64_t size = 60000 + (uint64_t)(i * 7919 % 100000);
            r.m[0] = (nst_tar_index_member){.ext = "jpg", .ext_len = 3, .offset = pos + 512, .size = size};
            pos += 512 + (size + 511) / 512 * 512;
            r.m[1] = (nst_tar_index_member){.ext = "cls", .ext_len = 3, .offset = pos + 512, .size = 3,
                                       .has_label = 1, .label = cls};
            pos += 1024;
            if (nst_tar_index_add(&w, &r) < 0) exit(1);
        }
        pos += 1024;
        char p[4096];
        snprintf(p, sizeof p, "%s/train-%06d.tar", dir, s);
        FILE *f = fopen(p, "wb");
        fclose(f);
        if (truncate(p, (off_t)pos) != 0) exit(1);
        if (nst_shard_ident_file(p, &w.ident) < 0) exit(1); /* the index names this shard */
        size_t len;
        if (nst_tar_index_finish(&w, pos, &len) < 0) exit(1);
        snprintf(p, sizeof p, "%s/train-%06d.tar.nstidx", dir, s);
        f = fopen(p, "wb");
        fwrite(w.buf, 1, len, f);
        fclose(f);
        nst_tar_index_writer_free(&w);
    }
}

/* median seconds of `runs` index builds (after one not counted) */
static void measure_index(const char *what, const char *source, int runs)
{
    double t[64], c[64];
    long rss0 = peak_kb();
    nst_index *ix;
    double t0 = now();
    if (nst_index_build(&ix, source) < 0) {
        fprintf(stderr, "%s\n", nostall_last_error());
        exit(1);
    }
    double first = now() - t0;
    uint64_t n = nst_index_count(ix);
    double per = (double)nst_index_bytes(ix) / (double)n;
    double rss = (double)(peak_kb() - rss0) * 1024.0 / (double)n;
    nst_index_free(ix);
    for (int r = 0; r < runs; r++) {
        double c0 = cpu();
        t0 = now();
        if (nst_index_build(&ix, source) < 0) exit(1);
        t[r] = now() - t0;
        c[r] = cpu() - c0;
        nst_index_free(ix);
    }
    qsort(t, (size_t)runs, sizeof t[0], cmp);
    qsort(c, (size_t)runs, sizeof c[0], cmp);
    printf("| %s | %llu | %.2f s | %.2f s (%.2f-%.2f) | %.2f s | %.1f | %.1f |\n", what,
           (unsigned long long)n, first, t[runs / 2], t[0], t[runs - 1], c[runs / 2], per, rss);
}

static void measure_loader(const char *source, int runs)
{
    double t[64], f[64];
    for (int r = 0; r < runs; r++) {
        nostall_config *cfg;
        nostall_loader *ld;
        nostall_config_create(&cfg);
        nostall_config_set(cfg, "threads", "1");
        nostall_config_set(cfg, "batch_size", "256");
        double t0 = now();
        if (nostall_loader_create(&ld, source, cfg) < 0) {
            fprintf(stderr, "%s\n", nostall_last_error());
            exit(1);
        }
        t[r] = now() - t0;
        nostall_state st;
        t0 = now();
        nostall_loader_get_state(ld, &st);
        f[r] = now() - t0;
        nostall_loader_free(ld);
        nostall_config_free(cfg);
    }
    qsort(t, (size_t)runs, sizeof t[0], cmp);
    qsort(f, (size_t)runs, sizeof f[0], cmp);
    printf("| loader create (shards, threads 1) | | | %.2f s (%.2f-%.2f) | | fingerprint %.2f s | |\n",
           t[runs / 2], t[0], t[runs - 1], f[runs / 2]);
}

int main(int argc, char **argv)
{
    if (argc < 2) return 2;
    if (!strcmp(argv[1], "gen-list")) gen_list(argv[2], atol(argv[3]));
    else if (!strcmp(argv[1], "gen-shards")) gen_shards(argv[2], atol(argv[3]), atoi(argv[4]));
    else if (!strcmp(argv[1], "index")) measure_index(argv[2], argv[3], atoi(argv[4]));
    else if (!strcmp(argv[1], "loader")) measure_loader(argv[2], atoi(argv[3]));
    return 0;
}
EOF
LIBS=$(pkg-config --libs libjpeg libpng liburing libcurl jansson sndfile soxr fftw3f 2>/dev/null || echo "-ljpeg -lpng -luring -lcurl -ljansson -lsndfile -lsoxr -lfftw3f")
cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc "$WORK/scale.c" "$BUILD/libnostall.a" $LIBS -lm -lpthread -o "$WORK/scale"

LIST=$DATA/list-$LINES.txt
[ -f "$LIST" ] || "$WORK/scale" gen-list "$LIST" "$LINES"
SH=$DATA/shards-$ITEMS-$SHARDS
if [ ! -f "$SH/train-$(printf '%06d' $((SHARDS - 1))).tar.nstidx" ]; then
    rm -rf "$SH"; mkdir -p "$SH"
    "$WORK/scale" gen-shards "$SH" "$ITEMS" "$SHARDS"
fi
last=$(printf '%06d' $((SHARDS - 1)))
{
    echo "Machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs; $(date -u +%Y-%m-%d)."
    echo
    echo "Load average when it started: $(cut -d' ' -f1-3 /proc/loadavg) (wall times grow with it; CPU time is the process's, all threads)."
    echo
    echo "| source | items | first build | build, median of $RUNS (min-max) | CPU, median | bytes per item held | peak RSS growth per item |"
    echo "|---|---|---|---|---|---|---|"
    "$WORK/scale" index "file list, $LINES lines" "$LIST" "$RUNS"
    "$WORK/scale" index "local shards from index files, $SHARDS shards" "$SH/train-{000000..$last}.tar" "$RUNS"
    "$WORK/scale" loader "$SH/train-{000000..$last}.tar" "$RUNS"
} | tee "$BUILD/bench/scale.md"
