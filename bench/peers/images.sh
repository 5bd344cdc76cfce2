#!/usr/bin/env bash
# bench/peers/images.sh — `make bench-peers`: nostall's image pipeline side
# by side with DALI (CPU), SPDL, torch 2.x + torchvision (decode_jpeg + v2,
# and the classic PIL path), Grain and FFCV, on the same photo-derived JPEGs,
# in one run (bench/peers/images.py; docs/performance.md, "The 2026 field").
# Never part of `make test`.
#
#   bash bench/peers/images.sh [--images N] [--width W] [--height H]
#        [--rounds R] [--epochs E] [--data DIR] [--out DIR] [-- IMAGES_PY_OPTIONS...]
#
# Steps: build the nostall CLI (release flags, as `make build`); make the
# peers' venv (bench/peers/venv.sh: PyPI, pinned, once); add FFCV to it
# (requirements-ffcv.txt, built against Debian's OpenCV and TurboJPEG; if it
# cannot be built the run goes on without it and says so); make the data
# once (bench/photo_data.py: N crops of a real photograph at about WxH,
# quality 93-98, in ${NOSTALL_BENCH_DATA:-/tmp/nostall-bench-data}) or take
# --data DIR (an ImageFolder of JPEGs, only read); run images.py. Results:
# OUT/images.json (every sample, versions, machine) and OUT/images.md (the
# table for docs/performance.md); OUT defaults to build/bench-peers.
# Defaults: 1500 images about 500x375 (ImageNet's typical size), 3 rounds of
# 1 epoch per measurement (about 15-20 minutes on a busy 2-core machine).
# Exit status 77: the peers' venv cannot be made here (no PyPI).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
IMAGES=1500
WIDTH=500
HEIGHT=375
ROUNDS=3
EPOCHS=1
SEED=7
DATA=""
OUT="$ROOT/build/bench-peers"
BUILD="${NOSTALL_BUILD:-$ROOT/build}"
DATA_ROOT="${NOSTALL_BENCH_DATA:-/tmp/nostall-bench-data}"
ARGS=()
while [ $# -gt 0 ]; do
    case "$1" in
        --images) IMAGES="$2"; shift 2 ;;
        --width) WIDTH="$2"; shift 2 ;;
        --height) HEIGHT="$2"; shift 2 ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        --epochs) EPOCHS="$2"; shift 2 ;;
        --data) DATA="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        -h|--help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        --) shift; ARGS=("$@"); break ;;
        *) echo "bench/peers/images.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done

bash tools/install-deps.sh gcc cmake libjpeg62-turbo-dev libpng-dev python3-pil \
    python3-matplotlib python3-venv
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
fi
cmake --build "$BUILD" -j"$(nproc 2> /dev/null || echo 2)" --target nostall_cli > /dev/null

rc=0
PY=$(bash bench/peers/venv.sh) || rc=$?
if [ "$rc" -ne 0 ]; then
    echo "bench/peers/images.sh: the peers' venv could not be made (venv.sh exit $rc)" >&2
    exit "$rc"
fi
if ! "$PY" -c "import ffcv" 2> /dev/null; then
    echo "bench-peers: adding FFCV to the venv (builds against OpenCV and TurboJPEG)" >&2
    bash tools/install-deps.sh pkg-config libopencv-dev libturbojpeg0-dev ||
        echo "bench-peers: FFCV's build packages could not be installed" >&2
    LOG="$(dirname "$(dirname "$PY")")/ffcv-install.log"
    "$PY" -m pip install --progress-bar off -r bench/peers/requirements-ffcv.txt -c bench/peers/constraints.txt > "$LOG" 2>&1 ||
        echo "bench-peers: FFCV could not be installed (log: $LOG); measured without it" >&2
fi

if [ -z "$DATA" ]; then
    DATA="$DATA_ROOT/photo-n$IMAGES-${WIDTH}x$HEIGHT-s$SEED"
    if [ ! -f "$DATA/.complete" ]; then
        rm -rf "$DATA" "$DATA.q95.beton"
        /usr/bin/python3 bench/photo_data.py "$DATA" --images "$IMAGES" --width "$WIDTH" \
            --height "$HEIGHT" --seed "$SEED" >&2
        touch "$DATA/.complete"
    fi
fi
mkdir -p "$OUT"
echo "bench-peers: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
# FFCV's .beton (the same images re-encoded by FFCV's writer) is kept in the
# dataset cache, never beside a user's --data.
"$PY" bench/peers/images.py --data "$DATA" --nostall "$BUILD/nostall" --rounds "$ROUNDS" \
    --beton "$DATA_ROOT/$(basename "$DATA").q95.beton" \
    --epochs "$EPOCHS" --out "$OUT/images.json" --markdown "$OUT/images.md" \
    ${ARGS[@]+"${ARGS[@]}"}
echo "bench-peers: results in $OUT/images.json and $OUT/images.md" >&2
