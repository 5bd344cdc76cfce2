#!/usr/bin/env bash
# bench/run.sh — nostall side by side with PyTorch DataLoader + torchvision,
# FFCV and plain libjpeg-turbo decoding, on the same files, in one run.
# `make bench` runs this after building. See docs/performance.md.
#
#   bash bench/run.sh [--images N] [--rounds R] [--epochs E] [--quick] [--out DIR]
#                     [--width W] [--height H] [--quality Q] [--data DIR | --photo]
#                     [-- PEERS_OPTIONS...]
#
# --photo: the same on a photo-derived set (bench/photo_data.py: --images
# crops of a real photograph, made once into the dataset cache), results in
# build/bench-photo unless --out says otherwise. `make bench` runs both.
# --data DIR: measure on your own ImageFolder of JPEGs (real photographs, an
# ImageNet subset, or `bench/photo_data.py`'s) instead of generated images;
# nothing is written into DIR (its transcoded copy and .beton go to the
# dataset cache). --quality is then the quality FFCV re-encodes at.
#
# Environment (flags win):
#   NOSTALL_BENCH_DATA   dataset cache (default /tmp/nostall-bench-data); the
#                        ImageFolder, its `nostall transcode` copy (.rstm1) and
#                        the FFCV .beton are kept there and reused by later
#                        runs with the same parameters
#   NOSTALL_BENCH_OUT    where results go (default build/bench)
#   NOSTALL_BUILD        build directory with the nostall CLI (default build)
#   BENCH_IMAGES, BENCH_ROUNDS, BENCH_EPOCHS, BENCH_QUALITY
#
# Defaults: 1000 JPEGs 470x425 at quality 95 (about 130-140 KB each; the
# issue's reference data is "about 100 KB, about 470x425, quality 93-98"),
# batch 64, 1 epoch per measurement, 5 interleaved rounds, medians.
# --quick: 300 images, 2 rounds (a smoke run, about a minute).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

IMAGES="${BENCH_IMAGES:-1000}"
ROUNDS="${BENCH_ROUNDS:-5}"
EPOCHS="${BENCH_EPOCHS:-2}"
QUALITY="${BENCH_QUALITY:-95}"
WIDTH=470
HEIGHT=425
CLASSES=10
SEED=7
USER_DATA=""
PHOTO=0
OUT_SET=0
DATA_ROOT="${NOSTALL_BENCH_DATA:-/tmp/nostall-bench-data}"
OUT="${NOSTALL_BENCH_OUT:-$ROOT/build/bench}"
BUILD="${NOSTALL_BUILD:-$ROOT/build}"
PY=/usr/bin/python3
PEERS_ARGS=()

usage() { sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case "$1" in
        --images) IMAGES="$2"; shift 2 ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        --epochs) EPOCHS="$2"; shift 2 ;;
        --quality) QUALITY="$2"; shift 2 ;;
        --width) WIDTH="$2"; shift 2 ;;
        --height) HEIGHT="$2"; shift 2 ;;
        --out) OUT="$2"; OUT_SET=1; shift 2 ;;
        --data) USER_DATA="$2"; shift 2 ;;
        --photo) PHOTO=1; shift ;;
        --quick) IMAGES=300; ROUNDS=2; shift ;;
        -h|--help) usage; exit 0 ;;
        --) shift; PEERS_ARGS=("$@"); break ;;
        *) echo "bench/run.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done

# 1. What the peers need (Debian packages; installs only what is missing).
#    python3-ffcv's package misses two of its imports (cv2, numba): named here.
bash tools/install-deps.sh gcc cmake libjpeg62-turbo-dev libpng-dev python3-torch \
    python3-torchvision python3-pil python3-numpy python3-ffcv python3-opencv python3-numba

if [ "$PHOTO" = 1 ]; then
    [ -z "$USER_DATA" ] || { echo "bench/run.sh: --photo and --data exclude each other" >&2; exit 2; }
    bash tools/install-deps.sh python3-matplotlib # its sample photograph
    USER_DATA="$DATA_ROOT/photo-n$IMAGES-s$SEED"
    if [ ! -f "$USER_DATA/.complete" ]; then
        rm -rf "$USER_DATA"
        /usr/bin/python3 bench/photo_data.py "$USER_DATA" --images "$IMAGES" --seed "$SEED" >&2
        touch "$USER_DATA/.complete"
    fi
    [ "$OUT_SET" = 1 ] || [ -n "${NOSTALL_BENCH_OUT:-}" ] || OUT="$ROOT/build/bench-photo"
fi

# 2. Build: the nostall CLI (release flags, as `make build`) and jpeg_decode.
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "$BUILD" -j"$(nproc 2>/dev/null || echo 2)" --target nostall_cli >/dev/null
NOSTALL="$BUILD/nostall"
mkdir -p "$OUT"
cc -O2 -std=c11 -Wall -Wextra -o "$OUT/jpeg_decode" bench/jpeg_decode.c -ljpeg

# 3. The dataset, generated once per parameter set (or the user's own).
DATA="$DATA_ROOT/imagefolder-n$IMAGES-${WIDTH}x$HEIGHT-q$QUALITY-s$SEED"
BETON=()
if [ -n "$USER_DATA" ]; then
    [ -d "$USER_DATA" ] || { echo "bench/run.sh: --data $USER_DATA: not a directory" >&2; exit 2; }
    DATA="$(cd "$USER_DATA" && pwd)"
    # Derived files live in the cache, keyed by the path and its listing.
    KEY="$(basename "$DATA")-$( (echo "$DATA"; find "$DATA" -type f -printf '%P %s %T@\n' | sort) |
        cksum | cut -d' ' -f1)"
    mkdir -p "$DATA_ROOT"
    RST="$DATA_ROOT/user-$KEY.rstm1"
    BETON=(--beton "$DATA_ROOT/user-$KEY.q$QUALITY.beton")
    WIDTH=0
    HEIGHT=0
elif [ ! -f "$DATA/.complete" ]; then
    echo "bench: generating $IMAGES JPEGs ${WIDTH}x$HEIGHT quality $QUALITY into $DATA" >&2
    rm -rf "$DATA" "$DATA.q$QUALITY.beton" "$DATA.rst1" "$DATA.rst1.partial" "$DATA.rstm1" \
        "$DATA.rstm1.partial"
    mkdir -p "$DATA"
    "$NOSTALL" gen "$DATA" --images "$IMAGES" --classes "$CLASSES" --width "$WIDTH" \
        --height "$HEIGHT" --quality "$QUALITY" --seed "$SEED" --quiet --force >&2
    touch "$DATA/.complete"
fi
# ... and its lossless restart-marker copy (`nostall transcode` with its
# default, a restart marker every MCU), once. (.rst1, a marker every MCU
# row, was the copy of earlier versions: a different name, never reused.)
[ -n "$USER_DATA" ] || RST="$DATA.rstm1"
if [ ! -d "$RST" ]; then
    echo "bench: transcoding $DATA into $RST (restart marker every MCU)" >&2
    rm -rf "$RST.partial"
    "$NOSTALL" transcode "$DATA" "$RST.partial" --restart-mcus 1 --quiet >&2
    mv "$RST.partial" "$RST" # only a finished copy gets the final name
fi

# 4. Run everything, side by side.
echo "bench: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"$PY" bench/peers.py --data "$DATA" --nostall "$NOSTALL" --jpeg-decode "$OUT/jpeg_decode" \
    --transcoded "$RST" --quality "$QUALITY" --width "$WIDTH" --height "$HEIGHT" --rounds "$ROUNDS" \
    --epochs "$EPOCHS" --out "$OUT/results.json" --markdown "$OUT/results.md" \
    ${BETON[@]+"${BETON[@]}"} ${PEERS_ARGS[@]+"${PEERS_ARGS[@]}"}
echo "bench: results in $OUT/results.json and $OUT/results.md (paste into docs/performance.md)" >&2
