#!/usr/bin/env bash
# bench/analyze_accuracy.sh — acceptance figures of the stall analyzer (issue 7):
# the analyzer runs once on a base configuration; for >= 6 configurations
# differing in threads, cache fraction, emulated storage speed, step time and
# echo factor it predicts the epoch time, which is compared with the epoch
# `nostall bench` measures (the one after the first). Prints a Markdown table
# and writes it to build/bench/analyze_accuracy.md (and .json).
# Usage: bash bench/analyze_accuracy.sh [--images N] [--repeat R]
#   (default 1000 images of 500x375; R bench runs per configuration, default 1,
#   the median epoch kept: use 3 on a machine shared with other work)
# Env: NOSTALL_CLI (default build/nostall), NOSTALL_BENCH_DATA (dataset folder
# root, default /tmp/nostall-bench-data), NOSTALL_BENCH_OUT (default build/bench).
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGES=1000
REPEAT=1
while [ $# -gt 0 ]; do
    case "$1" in
        --images) IMAGES=$2; shift 2 ;;
        --repeat) REPEAT=$2; shift 2 ;;
        *) echo "usage: bash bench/analyze_accuracy.sh [--images N] [--repeat R]" >&2; exit 2 ;;
    esac
done
CLI=${NOSTALL_CLI:-build/nostall}
[ -x "$CLI" ] || { echo "bench/analyze_accuracy.sh: $CLI not built (run make, or set NOSTALL_CLI)" >&2; exit 1; }
DATA=${NOSTALL_BENCH_DATA:-/tmp/nostall-bench-data}/analyze-n$IMAGES-500x375
[ -d "$DATA" ] || "$CLI" gen "$DATA" --images "$IMAGES" --classes 10 --seed 4 --quiet
/usr/bin/python3 bench/analyze_accuracy.py "$CLI" "$DATA" "${NOSTALL_BENCH_OUT:-build/bench}" "$REPEAT"
