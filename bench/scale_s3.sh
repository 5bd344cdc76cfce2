#!/usr/bin/env bash
# bench/scale_s3.sh — the s3:// rows of issue 24's index-at-scale benchmark
# and a small side-by-side of reads from an S3 server (moto's server on
# loopback, tests/lib_s3.sh; it checks every request's signature).
#
#   index    an s3:// prefix of SHARDS shards, each with its index file
#            (NAME.tar.nstidx, as `nostall pack` writes it), listed with
#            ListObjectsV2 (1000 keys a page) and indexed from the index
#            files (one signed GET each, on 4 x CPUs threads): the seconds
#            of nst_index_build on "s3://bkt/scale/", and of the listing
#            alone. The shards are copies of one packed shard of SAMPLES
#            samples (the point is listing + indexing, not the data).
#            Median of RUNS builds in one process.
#   reads    ITEMS small JPEGs read by `nostall bench` (1 epoch, 2 threads)
#            from moto through tests/s3_proxy.py with --delay-ms 0 and
#            DELAY (default 100) added per request: per-file GETs (a list
#            of s3:// objects) vs indexed shard reads (one ranged GET per
#            item); items/s, median of REPEATS runs. STREAM_ARGS (e.g.
#            "--shard-mode stream", once the streaming mode is an option)
#            adds a row for streamed shards.
#
# Usage: bash bench/scale_s3.sh [--shards K] [--samples N] [--runs R]
#                               [--items N] [--size WxH] [--shard-bytes B]
#                               [--delay-ms MS] [--repeats R]
#                               [--skip-index] [--skip-reads]
# Environment: BUILD (default build: `make build`), STREAM_ARGS.
# Exit 77 when the S3 server (moto) cannot be installed. Prints a Markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
SHARDS=10000
SAMPLES=16
RUNS=3
ITEMS=512
WIDTH=64
HEIGHT=48
SHARD_BYTES=1M
DELAY=100
REPEATS=3
DO_INDEX=1
DO_READS=1
while [ $# -gt 0 ]; do
    case "$1" in
        --shards) SHARDS=$2; shift 2 ;;
        --samples) SAMPLES=$2; shift 2 ;;
        --runs) RUNS=$2; shift 2 ;;
        --items) ITEMS=$2; shift 2 ;;
        --size) WIDTH=${2%x*}; HEIGHT=${2#*x}; shift 2 ;;
        --shard-bytes) SHARD_BYTES=$2; shift 2 ;;
        --delay-ms) DELAY=$2; shift 2 ;;
        --repeats) REPEATS=$2; shift 2 ;;
        --skip-index) DO_INDEX=0; shift ;;
        --skip-reads) DO_READS=0; shift ;;
        *) sed -n '/^# Usage/,/^# Exit/p' "$0" >&2; exit 2 ;;
    esac
done
BUILD=${BUILD:-build}
[ "$BUILD" = build ] && make -s build > /dev/null
[ -f "$BUILD/libnostall.a" ] && [ -x "$BUILD/nostall" ] || { echo "no $BUILD/libnostall.a or $BUILD/nostall" >&2; exit 1; }
CLI=$BUILD/nostall
source tests/lib_s3.sh
s3_server_ensure > /dev/null || exit $?
WORK=$(mktemp -d)
export S3_OWNER_PID=$$
trap 's3_proxy_stop "$WORK/srv" > /dev/null 2>&1 || true; s3_server_stop "$WORK/srv" > /dev/null 2>&1 || true; rm -rf "$WORK"' EXIT
export AWS_ACCESS_KEY_ID=$S3_TEST_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$S3_TEST_SECRET AWS_REGION=us-east-1
export XDG_CACHE_HOME="$WORK/xdg"
port=
# (moto keeps objects in memory and loads its store, $WORK/srv/data, when
# it starts: the index's 2 x SHARDS objects go there first)
start_server() { [ -n "$port" ] || port=$(s3_server_start "$WORK/srv" 0 bkt); }
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
echo "# bench/scale_s3.sh on $(hostname) ($(nproc) CPUs), $(date -u +%Y-%m-%dT%H:%MZ)"

if [ $DO_INDEX = 1 ]; then
    "$CLI" gen "$WORK/one" --images "$SAMPLES" --classes 2 --width 32 --height 32 --quiet
    "$CLI" pack "$WORK/one" "$WORK/packed" --shard-bytes 1G --quiet > /dev/null
    one=$WORK/packed/shard-000000.tar
    [ -f "$one.nstidx" ] || { echo "pack wrote no index file" >&2; exit 1; }
    dst=$WORK/srv/data/bkt/scale
    mkdir -p "$dst"
    # hard links into the server's store (tests/s3_server.py: KEY.s3obj),
    # loaded when it starts: no 20 000 PUTs
    /usr/bin/python3 - "$one" "$dst" "$SHARDS" <<'EOF'
import os, sys
one, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
for src, suffix in ((one, ".tar"), (one + ".nstidx", ".tar.nstidx")):
    for k in range(n):
        os.link(src, os.path.join(dst, "shard-%06d%s.s3obj" % (k, suffix)))
EOF
    start_server
    cat > "$WORK/idx.c" <<'EOF'
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "nostall.h"
#include "dataset/index.h"
#include "dataset/s3_list.h"
#include "source/s3.h"
#include "dataset/shards.h"
static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
static int count(void *ctx, const char *url, const char *key, uint64_t size)
{
    (void)url, (void)key, (void)size;
    ++*(uint64_t *)ctx;
    return 0;
}
int main(int argc, char **argv)
{
    const char *src = argv[1];
    int runs = atoi(argv[2]);
    for (int r = 0; r < runs; r++) {
        uint64_t n = 0;
        nst_s3_list_stats ls;
        nst_s3_list_opts lo = {.retries = 3, .verify_tls = 1};
        double t0 = now();
        if (nst_s3_list(src, count, &n, &lo, &ls) < 0) {
            fprintf(stderr, "%s\n", nostall_last_error());
            return 1;
        }
        double t1 = now();
        nst_index *ix;
        if (nst_index_build(&ix, src) < 0) {
            fprintf(stderr, "%s\n", nostall_last_error());
            return 1;
        }
        double t2 = now();
        nst_shard_stats st;
        nst_index_shard_stats(ix, &st);
        printf("%.3f %.3f %llu %llu %llu %llu %llu\n", t1 - t0, t2 - t1,
               (unsigned long long)nst_index_count(ix), (unsigned long long)nst_index_shards(ix),
               (unsigned long long)st.sidecar, (unsigned long long)st.http_requests,
               (unsigned long long)ls.pages);
        nst_index_free(ix);
    }
    return 0;
}
EOF
    LIBS=$(pkg-config --libs libjpeg libpng liburing libcurl jansson sndfile soxr fftw3f 2> /dev/null ||
        echo "-ljpeg -lpng -luring -lcurl -ljansson -lsndfile -lsoxr -lfftw3f")
    cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc "$WORK/idx.c" "$BUILD/libnostall.a" $LIBS -lm \
        -lpthread -o "$WORK/idx"
    # one row per endpoint: moto alone, and nginx serving the objects with
    # moto answering the listings (moto, one Python process checking each
    # signature, is slow at small GETs: the index files' GETs measure it)
    index_row() { # index_row NAME ENDPOINT
        AWS_ENDPOINT_URL=$2 "$WORK/idx" "s3://bkt/scale/" $((RUNS + 1)) > "$WORK/idx.txt"
        tail -n +2 "$WORK/idx.txt" > "$WORK/idx.runs" # the first build warms the servers
        read -r _ _ items shards sidecars reqs pages < "$WORK/idx.runs"
        echo "| $1 | $shards | $items | $(cut -d' ' -f1 "$WORK/idx.runs" | median) |" \
            "$(cut -d' ' -f2 "$WORK/idx.runs" | median) | $sidecars | $((reqs + pages)) | $pages |"
    }
    rows=("moto|http://127.0.0.1:$port")
    source tests/lib_nginx.sh
    if nginx_bin > /dev/null 2>&1; then
        mkdir -p "$WORK/www/bkt/scale" "$WORK/ngx/conf.d"
        /usr/bin/python3 -c 'import os, sys
for n in os.listdir(sys.argv[1]):
    if n.endswith(".s3obj"):
        os.link(os.path.join(sys.argv[1], n), os.path.join(sys.argv[2], n[:-6]))' "$dst" "$WORK/www/bkt/scale"
        cat > "$WORK/ngx/conf.d/s3.conf" <<EOF
location /bkt/ {
    # the Host the client signed: moto checks the signature
    proxy_set_header Host \$http_host;
    if (\$args ~ "list-type=") { proxy_pass http://127.0.0.1:$port; }
}
EOF
        export NGINX_OWNER_PID=$$
        hport=$(nginx_start "$WORK/ngx" "$WORK/www") && rows+=("nginx (objects) + moto (listings)|http://127.0.0.1:$hport")
    fi
    echo
    echo "## s3:// index at scale (loopback, median of $RUNS; list + index = nst_index_build: the listing, then one signed GET per index file on 4 x CPUs threads; target <= 30 s)"
    echo
    echo "| endpoint | shards | items | listing (s) | list + index (s) | index files | requests | pages |"
    echo "|---|---|---|---|---|---|---|---|"
    for row in "${rows[@]}"; do index_row "${row%%|*}" "${row#*|}"; done
    [ -n "${hport:-}" ] && nginx_stop "$WORK/ngx"
    # (the reads start a server without the index's objects)
    s3_server_stop "$WORK/srv"
    port=
    rm -rf "$dst"
fi

if [ $DO_READS = 1 ]; then
    "$CLI" gen "$WORK/img" --images "$ITEMS" --classes 4 --width "$WIDTH" --height "$HEIGHT" --quiet
    "$CLI" pack "$WORK/img" "$WORK/shards" --shard-bytes "$SHARD_BYTES" --quiet > /dev/null
    start_server
    s3_put_tree "$WORK/srv" bkt img "$WORK/img"
    s3_put_tree "$WORK/srv" bkt shards "$WORK/shards"
    i=0
    : > "$WORK/list.txt"
    for c in $(ls "$WORK/img"); do
        for f in $(ls "$WORK/img/$c"); do printf 's3://bkt/img/%s/%s\t%d\n' "$c" "$f" $i >> "$WORK/list.txt"; done
        i=$((i + 1))
    done
    rows=("per-file GETs|$WORK/list.txt|" "indexed shard reads|s3://bkt/shards/|")
    [ -n "${STREAM_ARGS:-}" ] && rows+=("streamed shards|s3://bkt/shards/|$STREAM_ARGS")
    echo
    echo "## reads from moto through s3_proxy.py ($ITEMS JPEGs ${WIDTH}x$HEIGHT in shards of $SHARD_BYTES, 2 threads, items/s, median of $REPEATS)"
    echo
    echo "| reads | +0 ms per request | +$DELAY ms per request | ratio |"
    echo "|---|---|---|---|"
    for row in "${rows[@]}"; do
        IFS='|' read -r what src extra <<< "$row"
        line="| $what"
        declare -A med=()
        for d in 0 "$DELAY"; do
            s3_proxy_stop "$WORK/srv"
            pport=$(s3_proxy_start "$WORK/srv" "$port" --delay-ms "$d")
            vals=()
            for ((r = 0; r < REPEATS; r++)); do
                # shellcheck disable=SC2086
                AWS_ENDPOINT_URL="http://127.0.0.1:$pport" "$CLI" bench "$src" --batch-size 32 \
                    --crop 32 --epochs 1 --threads 2 --json --quiet --seed $r $extra > "$WORK/b.json"
                ok=$(/usr/bin/python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(j['skipped_count'] == 0)" "$WORK/b.json")
                if [ "$ok" != True ]; then vals=(); break; fi
                vals+=("$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['items_per_second'])" "$WORK/b.json")")
            done
            if [ ${#vals[@]} = 0 ]; then
                med[$d]="n/a"
            else
                med[$d]=$(printf '%s\n' "${vals[@]}" | median)
            fi
            line="$line | ${med[$d]}"
        done
        if [ "${med[0]}" != n/a ] && [ "${med[$DELAY]}" != n/a ]; then
            line="$line | $(awk -v a="${med[$DELAY]}" -v b="${med[0]}" 'BEGIN {printf "%.2f", a / b}') |"
        else
            line="$line | (items skipped: $(/usr/bin/python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(j['skipped'][0]['reason'][:80] if j['skipped'] else '')" "$WORK/b.json")) |"
        fi
        echo "$line"
        unset med
    done
fi
