#!/usr/bin/env bash
# decode_device=gpu at create, on any machine: each missing piece is named
# (a build without CUDA says so; with CUDA: libnvjpeg not loadable, then the
# driver or device), images only, and decode_device=cpu is the default's
# bytes. The GPU pipeline itself is checked on the host by test_pixel_math
# and on a GPU by the kit (docs/gpu.md).
source "$(dirname "$0")/lib_cli.sh"
"$CLI" gen "$TMP/d" --images 12 --classes 2 --width 64 --height 48 --seed 3 --quiet
run() { "$CLI" bench "$TMP/d" --quiet --epochs 1 --batch-size 4 --crop 32 "$@" > "$TMP/out" 2>&1; }

run --decode-device gpu && fail "decode_device=gpu created a loader on a machine without a GPU"
grep -q "decode_device=gpu: " "$TMP/out" || fail "no decode_device message: $(cat "$TMP/out")"
if grep -q "built without CUDA" "$TMP/out"; then
    echo "note: this build has no CUDA: the message names it"
    NOSTALL_TEST_NVJPEG=/nonexistent/libnvjpeg.so.99 run --decode-device gpu &&
        fail "gpu without CUDA"
    grep -q "built without CUDA" "$TMP/out" || fail "without CUDA: $(cat "$TMP/out")"
else
    NOSTALL_TEST_NVJPEG=/nonexistent/libnvjpeg.so.99 run --decode-device gpu --gpu-id 3 &&
        fail "gpu without libnvjpeg"
    grep -q "libnvjpeg not found.*/nonexistent/libnvjpeg.so.99" "$TMP/out" ||
        fail "libnvjpeg missing: $(cat "$TMP/out")"
    # a real libnvjpeg (PyPI's wheel, when the peers' venv has it): the next
    # piece is named, the driver or device (or, on a GPU, the unfinished route)
    lib=$(ls "$HOME"/.cache/nostall/peers/venv/lib/python3*/site-packages/nvidia/nvjpeg/lib/libnvjpeg.so.* 2> /dev/null | head -1)
    if [ -n "$lib" ]; then
        NOSTALL_TEST_NVJPEG=$lib run --decode-device gpu && fail "gpu created with $lib"
        grep -q "libnvjpeg not found" "$TMP/out" && fail "$lib not loaded: $(cat "$TMP/out")"
        grep -Eq "no CUDA driver|no usable CUDA driver|CUDA device\(s\)|does not yet route" \
            "$TMP/out" || fail "driver/device not named: $(cat "$TMP/out")"
    else
        echo "note: no nvidia-nvjpeg wheel in the peers' venv: the driver check not reached"
    fi
fi
run --decode-device gpu --task tokens && fail "decode_device=gpu with task=tokens"
grep -q "decode_device=gpu decodes images: task=tokens" "$TMP/out" || fail "tokens: $(cat "$TMP/out")"

sum() { "$CLI" bench "$TMP/d" --json --quiet --epochs 1 --batch-size 4 --crop 32 --seed 5 "$@" > "$TMP/j" &&
    json "$TMP/j" 'j["checksum"]'; }
[ "$(sum)" = "$(sum --decode-device cpu --gpu-id 7)" ] || fail "decode_device=cpu changed the bytes"
echo PASS
