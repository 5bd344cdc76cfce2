#!/usr/bin/env bash
# make demo: generate a small dataset in a temporary folder, run the loader on
# it, and show what a user needs to see: throughput, the data stall, the
# checksum that proves determinism, and how bad files are reported.
set -euo pipefail
CLI=${1:-build/nostall}
DIR=$(mktemp -d /tmp/nostall-demo.XXXXXX)
trap 'rm -rf "$DIR"' EXIT

echo "== 1. a synthetic ImageFolder dataset (500 JPEGs, 10 classes, 500x375)"
"$CLI" gen "$DIR/train" --images 500 --classes 10 --seed 1
echo
echo "== 2. the training pipeline: RandomResizedCrop 224 + flip, float32 NCHW, 2 epochs"
"$CLI" bench "$DIR/train" --batch-size 32 --epochs 2 --seed 42
echo
echo "== 3. the same with a simulated 40 ms training step: little or no data stall"
"$CLI" bench "$DIR/train" --batch-size 32 --epochs 1 --seed 42 --step-ms 40
echo
echo "== 4. determinism: the same seed gives the same bytes with 1 thread"
"$CLI" bench "$DIR/train" --batch-size 32 --epochs 2 --seed 42 --threads 1 --quiet | grep checksum
echo
echo "== 5. bad files are skipped, counted and reported (or fail the run with --on-bad-item fail)"
echo "not a jpeg" > "$DIR/train/class_003/broken.jpg"
head -c 3000 "$(find "$DIR/train/class_000" -name "*.jpg" -print -quit)" > "$DIR/train/class_005/truncated.jpg"
"$CLI" bench "$DIR/train" --batch-size 32 --mode eval --output uint8 --quiet
echo
echo "demo done: see README.md for the C API and 'nostall bench --help' for every option."
