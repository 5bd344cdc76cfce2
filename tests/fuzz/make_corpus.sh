#!/bin/bash
# tests/fuzz/make_corpus.sh BUILD_DIR — (re)write the committed seed corpora
# of the decoder fuzz targets, tests/fuzz/corpus/{jpeg,jpeg_diff,
# jpeg_transcode,png}, from
#   - BUILD_DIR/fuzz_corpus_gen: one file per layout and colour type, and
#     one per finding of issue 25 (see tests/fuzz/corpus_gen.c);
#   - BUILD_DIR/nostall gen: small images of the project's own generator,
#     JPEG and PNG;
#   - BUILD_DIR/nostall transcode: those JPEGs with a restart marker per MCU
#     (the form the restart-marker fast path and the cache rewrite make).
# Deterministic. Files a fuzzer run added to the corpora are kept unless
# they have the names written here; crash reproducers live in
# tests/fuzz/crashes/<name>/ and are never touched.
set -euo pipefail
build=${1:?usage: make_corpus.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
corpus=$here/corpus
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for t in jpeg jpeg_diff jpeg_transcode png; do mkdir -p "$corpus/$t" "$here/crashes/$t"; done
"$build/fuzz_corpus_gen" "$corpus"
"$build/nostall" gen "$tmp/gen" --images 3 --classes 1 --width 64 --height 48 --quality 80 \
    --seed 25 --size-jitter 0.3 --quiet >/dev/null 2>&1
"$build/nostall" gen "$tmp/genp" --images 2 --classes 1 --width 24 --height 16 --format png \
    --seed 25 --quiet >/dev/null 2>&1
"$build/nostall" transcode "$tmp/gen" "$tmp/rst" --threads 1 --quiet >/dev/null 2>&1
i=0
for f in "$tmp"/gen/*/*.jpg; do
    cp "$f" "$corpus/jpeg/gen-$i.jpg"
    cp "$f" "$corpus/jpeg_transcode/gen-$i.jpg"
    i=$((i + 1))
done
i=0
for f in "$tmp"/rst/*/*.jpg; do
    cp "$f" "$corpus/jpeg/gen-rst-$i.jpg"
    cp "$f" "$corpus/jpeg_diff/gen-rst-$i.jpg"
    i=$((i + 1))
done
i=0
for f in "$tmp"/genp/*/*.png; do
    cp "$f" "$corpus/png/gen-$i.png"
    i=$((i + 1))
done
du -sh "$corpus"/*
