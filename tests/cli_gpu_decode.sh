#!/usr/bin/env bash
# decode_device=gpu at create, on any machine: each missing piece is named
# (a build without CUDA says so; with CUDA: libnvjpeg not loadable, then the
# driver or device), images only, and decode_device=cpu is the default's
# bytes. Then the loader's GPU route end to end with the fake backend
# (NOSTALL_TEST_GPU_FAKE=1, test builds): the CPU path's checksums (the
# images are small enough that the CPU decodes at full scale too) for 1 and
# 3 threads, train and eval, float, uint8 and bfloat16 NHWC, a letterbox;
# bad items skipped with the CPU path's statuses and reasons and bytes, by
# the host route and by the device ring (gpu_output=device: compaction and
# top-ups copied on the device); a worker's ready items through the route
# at once (one decode call for their JPEGs); data echoing at every point;
# task=detect (boxes on the host); the stats' per-backend split, exact with
# the fake. The kernels on a GPU: the kit (docs/gpu.md).
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
elif grep -q "built without nvjpeg.h" "$TMP/out"; then
    # CUDA found, nvjpeg.h not (no toolkit header, no nvidia-nvjpeg wheel in
    # the peers' venv, no NOSTALL_NVJPEG_INCLUDE): the message names it
    echo "note: this build has CUDA but no nvjpeg.h: the message names it"
    NOSTALL_TEST_NVJPEG=/nonexistent/libnvjpeg.so.99 run --decode-device gpu --gpu-id 3 &&
        fail "gpu without nvjpeg.h"
    grep -q "built without nvjpeg.h" "$TMP/out" || fail "without nvjpeg.h: $(cat "$TMP/out")"
else
    NOSTALL_TEST_NVJPEG=/nonexistent/libnvjpeg.so.99 run --decode-device gpu --gpu-id 3 &&
        fail "gpu without libnvjpeg"
    grep -q "libnvjpeg not found.*/nonexistent/libnvjpeg.so.99" "$TMP/out" ||
        fail "libnvjpeg missing: $(cat "$TMP/out")"
    # a real libnvjpeg (PyPI's wheel, when the peers' venv has it): the next
    # piece is named, the driver or device (or, on a GPU, the route not yet validated)
    lib=$(ls "$HOME"/.cache/nostall/peers/venv/lib/python3*/site-packages/nvidia/nvjpeg/lib/libnvjpeg.so.* 2> /dev/null | head -1)
    if [ -n "$lib" ]; then
        NOSTALL_TEST_NVJPEG=$lib run --decode-device gpu && fail "gpu created with $lib"
        grep -q "libnvjpeg not found" "$TMP/out" && fail "$lib not loaded: $(cat "$TMP/out")"
        grep -Eq "no CUDA driver|no usable CUDA driver|CUDA device\(s\)|not yet been validated" \
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

# the route end to end with the fake backend
"$CLI" gen "$TMP/e" --images 30 --classes 3 --width 96 --height 72 --seed 4 --quiet
cs() { NOSTALL_TEST_GPU_FAKE=1 "$CLI" bench "$TMP/e" --json --quiet --epochs 2 --batch-size 5 \
    --crop 64 --seed 3 --max-bad-fraction 1 "$@" > "$TMP/j" && json "$TMP/j" 'j["checksum"]'; }
for m in "--mode train" "--mode eval" "--output uint8" "--output bfloat16 --layout nhwc" \
    "--image-mode resize --fit pad --out-height 40 --out-width 64"; do
    # shellcheck disable=SC2086
    want=$(cs $m) || fail "cpu $m"
    for t in 1 3; do
        # shellcheck disable=SC2086
        got=$(cs $m --decode-device gpu --threads $t) || fail "fake gpu $m threads $t"
        [ "$got" = "$want" ] || fail "fake gpu route, $m, $t threads: $got, the CPU path $want"
        # the device ring (gpu_output=device): the same bytes, the images
        # read at their device address (the fake's is host memory)
        # shellcheck disable=SC2086
        got=$(cs $m --decode-device gpu --gpu-output device --threads $t) ||
            fail "fake gpu device ring $m threads $t: $(cat "$TMP/j")"
        [ "$got" = "$want" ] || fail "device ring, $m, $t threads: $got, the CPU path $want"
    done
done
d=$(ls -d "$TMP"/e/*/ | head -1)
echo junk > "$d/zz_junk.jpg"
head -c 900 "$(ls "$d"*.jpg | head -1)" > "$d/zz_trunc.jpg"
# on_bad_item=skip (the default): the engine compacts the batches and tops
# them up from the next; with gpu_output=device those moves of the image
# field are copies in the device ring (the fake's: memmove). A batch of
# 5 with a bad item is compacted and topped up, so the bytes differ if the
# device ring's copies were missing. drop_last=0 also lends a short batch.
same() { # cpu.json and $1: the same bytes and the same skipped items
    "$PY" - "$TMP/cpu.json" "$1" "$2" << 'PYEOF' || fail "bad items differ: $2 (see above)"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["checksum"] == b["checksum"], (sys.argv[3], a["checksum"], b["checksum"])
assert a["skipped"] == b["skipped"] and len(b["skipped"]) == 2, (a["skipped"], b["skipped"])
print("bad items:", sys.argv[3], [(s["path"].split("/")[-1], s["status"]) for s in b["skipped"]])
PYEOF
}
for dl in 1 0; do
    cs --drop-last $dl > /dev/null && cp "$TMP/j" "$TMP/cpu.json" || fail "cpu with bad items"
    cs --drop-last $dl --decode-device gpu > /dev/null || fail "fake gpu with bad items"
    same "$TMP/j" "host route, drop_last=$dl"
    for t in 1 3; do
        cs --drop-last $dl --decode-device gpu --gpu-output device --threads $t > /dev/null ||
            fail "device ring with bad items, drop_last=$dl, $t threads: $(cat "$TMP/j")"
        same "$TMP/j" "device ring, drop_last=$dl, $t threads"
    done
done
# batched decode across items (worker.c's make_many, the route's
# nst_gpu_route_many): with reader=pread every fetch is complete when it is
# submitted, so a worker holding several tickets gives the route all of
# them in one call, their JPEGs in one decode call (the fake counts them:
# NOSTALL_TEST_GPU_FAKE_STATS). With the bad items and a PNG (decoded by
# the CPU): the CPU path's bytes and skipped items, and the one-item path's
# (io_depth=1), at 1 and 3 threads, host and device output. At one thread
# a batch of more than one JPEG reached the backend (the worker holds its
# 8 tickets, all read); at 3, how the tickets spread is not fixed.
"$CLI" gen "$TMP/png" --images 2 --classes 1 --width 80 --height 60 --seed 6 --format png --quiet
cp "$(find "$TMP/png" -name '*.png' | head -1)" "$d/zz_png.png"
for t in 1 3; do
    cs --threads $t --reader pread --io-depth 8 > /dev/null && cp "$TMP/j" "$TMP/cpu.json" ||
        fail "cpu, io_depth=8, $t threads"
    cs --threads $t --reader pread --io-depth 1 --decode-device gpu > /dev/null ||
        fail "fake gpu, io_depth=1, $t threads: $(cat "$TMP/j")"
    same "$TMP/j" "one item at a time, $t threads"
    for o in host device; do
        NOSTALL_TEST_GPU_FAKE_STATS=1 cs --threads $t --reader pread --io-depth 8 \
            --decode-device gpu --gpu-output $o > /dev/null 2> "$TMP/err" ||
            fail "batched, $o output, $t threads: $(cat "$TMP/j" "$TMP/err")"
        same "$TMP/j" "batched, $o output, $t threads"
        most=$(sed -n 's/.*at most \([0-9]*\) in one$/\1/p' "$TMP/err" | tail -1)
        [ -n "$most" ] || fail "no fake backend counts: $(cat "$TMP/err")"
        echo "batched, $o output, $t threads: at most $most JPEGs in one decode call"
        [ "$t" = 3 ] || [ "$most" -gt 1 ] ||
            fail "no batch of more than one JPEG reached the backend ($o output): $(cat "$TMP/err")"
    done
done
rm "$d/zz_png.png"
# data echoing with the GPU route, on this dataset with its bad items:
# every echo point gives the CPU path's bytes for 1 and 3 threads, with
# gpu_output=host and =device (fetch and augment make their items on the
# route, augment's copies from a device store with device output; decode
# decodes on the CPU and re-augments each copy on the route); echo=adaptive
# refused with device output, naming why, and runs with host output (its
# repeats depend on timing: no checksum). Large images in eval mode, where
# the CPU decodes a DCT-scaled region: echo_point=decode re-augments that
# image on the route with the CPU path's bytes.
for e in "fetch 2" "decode 2" "augment 2" "augment 1.5" "batch 2"; do
    # shellcheck disable=SC2086
    set -- $e
    want=$(cs --echo-point "$1" --echo-factor "$2") || fail "cpu echo $e"
    for t in 1 3; do
        got=$(cs --echo-point "$1" --echo-factor "$2" --decode-device gpu --threads $t) ||
            fail "fake gpu, echo $e, $t threads: $(cat "$TMP/j")"
        [ "$got" = "$want" ] || fail "echo $e, host output, $t threads: $got, the CPU path $want"
        got=$(cs --echo-point "$1" --echo-factor "$2" --decode-device gpu --gpu-output device \
            --threads $t) || fail "device ring, echo $e, $t threads: $(cat "$TMP/j")"
        [ "$got" = "$want" ] || fail "echo $e, device ring, $t threads: $got, the CPU path $want"
    done
    echo "echo_point=$1 x$2: $want"
done
"$CLI" gen "$TMP/big" --images 12 --classes 2 --width 400 --height 300 --seed 4 --quiet
bcs() { NOSTALL_TEST_GPU_FAKE=1 "$CLI" bench "$TMP/big" --json --quiet --epochs 1 --batch-size 4 \
    --crop 64 --seed 3 --mode eval --echo-point decode --echo-factor 2 "$@" > "$TMP/j" &&
    json "$TMP/j" 'j["checksum"]'; }
want=$(bcs) || fail "cpu, large, echo decode"
for o in host device; do
    got=$(bcs --decode-device gpu --gpu-output $o --threads 3) ||
        fail "large, echo decode, $o output: $(cat "$TMP/j")"
    [ "$got" = "$want" ] || fail "large, echo decode, $o output: $got, the CPU path $want"
done
cs --echo adaptive --decode-device gpu > /dev/null 2> "$TMP/err" ||
    fail "adaptive, host output: $(cat "$TMP/err")"
cs --echo adaptive --decode-device gpu --gpu-output device > /dev/null 2> "$TMP/err" &&
    fail "adaptive, device"
grep -q "gpu_output=device: echo=adaptive" "$TMP/err" || fail "adaptive not refused: $(cat "$TMP/err")"
# task=detect on the GPU route: the image through the route, the boxes on
# the host from the same plan; with gpu_output=device the image in the
# device ring, the boxes in the host slot. Small images (the CPU decodes
# at full scale too): the CPU path's checksums (image and boxes) for every
# box_crop, eval and a letterbox, 1 and 3 threads. Large ones (the CPU
# path shrinks them with the DCT, the route decodes at full scale): the
# bytes differ from the CPU path's -- the route was taken -- and host and
# device output agree.
"$CLI" gen --task detect "$TMP/det" --images 24 --classes 3 --objects 4 --width 96 --height 72 \
    --seed 4 --quiet
dcs() { NOSTALL_TEST_GPU_FAKE=1 "$CLI" bench "$1/instances.json" --task detect --json --quiet \
    --batch-size 5 --out-height 64 --out-width 64 --max-boxes 6 --epochs 2 --seed 7 "${@:2}" \
    > "$TMP/j" && json "$TMP/j" 'j["checksum"]'; }
for m in "--box-crop iou --output float" "--box-crop rrc --output uint8" "--mode eval --output uint8" \
    "--fit pad --output bfloat16 --layout nhwc"; do
    # shellcheck disable=SC2086
    want=$(dcs "$TMP/det" $m) || fail "cpu detect $m"
    for t in 1 3; do
        for o in host device; do
            # shellcheck disable=SC2086
            got=$(dcs "$TMP/det" $m --decode-device gpu --gpu-output $o --threads $t) ||
                fail "detect $m, $o output, $t threads: $(cat "$TMP/j")"
            [ "$got" = "$want" ] || fail "detect $m, $o output, $t threads: $got, the CPU path $want"
        done
    done
    echo "detect $m: $want"
done
# detect's items batched across a worker (make_many): every fetch complete
# at submit (reader=pread), 8 tickets held; the CPU path's bytes, and at
# one thread a decode call with more than one JPEG
for t in 1 3; do
    NOSTALL_TEST_GPU_FAKE_STATS=1 dcs "$TMP/det" --reader pread --io-depth 8 --decode-device gpu \
        --threads $t > "$TMP/got" 2> "$TMP/err" || fail "detect batched, $t threads: $(cat "$TMP/err")"
    want=$(dcs "$TMP/det") || fail "cpu detect"
    [ "$(cat "$TMP/got")" = "$want" ] || fail "detect batched, $t threads: $(cat "$TMP/got"), the CPU path $want"
    most=$(sed -n 's/.*at most \([0-9]*\) in one$/\1/p' "$TMP/err" | tail -1)
    [ "$t" = 3 ] || [ "${most:-0}" -gt 1 ] || fail "detect: no batch reached the backend: $(cat "$TMP/err")"
done
"$CLI" gen --task detect "$TMP/detl" --images 8 --classes 3 --objects 4 --width 400 --height 300 \
    --seed 4 --quiet
cpu=$(dcs "$TMP/detl" --mode eval --epochs 1) || fail "cpu detect, large"
gh=$(dcs "$TMP/detl" --mode eval --epochs 1 --decode-device gpu) || fail "gpu detect, large"
gd=$(dcs "$TMP/detl" --mode eval --epochs 1 --decode-device gpu --gpu-output device) ||
    fail "gpu detect, large, device: $(cat "$TMP/j")"
[ "$gh" != "$cpu" ] || fail "detect on large images: the GPU route's bytes are the CPU path's"
[ "$gh" = "$gd" ] || fail "detect on large images: host output $gh, device output $gd"
# the per-backend split (stats gpu_hw_items, gpu_default_items,
# gpu_cpu_items): each item the route decoded counted once, by its
# decoder. The fake decides by the file alone (src/gpu/fake.c: a size
# divisible by 3 back to the CPU, else even size hardware, odd default),
# so the counts are exact and the same for 1 and 3 threads; a PNG is the
# CPU's, a bad file no one's; the CPU path counts none.
"$CLI" gen "$TMP/sp" --images 14 --classes 2 --width 80 --height 60 --seed 9 --quiet
"$CLI" gen "$TMP/spng" --images 2 --classes 1 --width 50 --height 40 --seed 2 --format png --quiet
spd=$(ls -d "$TMP"/sp/*/ | head -1)
cp "$(ls "$TMP"/spng/*/*.png | head -1)" "$spd/zz_image.png"
echo junk > "$spd/zz_junk.jpg"
for t in 1 3; do
    NOSTALL_TEST_GPU_FAKE=1 "$CLI" bench "$TMP/sp" --json --quiet --epochs 1 --batch-size 4 \
        --crop 32 --seed 3 --drop-last 0 --max-bad-fraction 1 --decode-device gpu --threads $t \
        > "$TMP/split$t.json" || fail "split, $t threads: $(cat "$TMP/split$t.json")"
done
# and through the batched route (a worker's ready items in one call)
NOSTALL_TEST_GPU_FAKE=1 "$CLI" bench "$TMP/sp" --json --quiet --epochs 1 --batch-size 4 \
    --crop 32 --seed 3 --drop-last 0 --max-bad-fraction 1 --decode-device gpu --threads 1 \
    --reader pread --io-depth 8 > "$TMP/splitmany.json" ||
    fail "split, batched: $(cat "$TMP/splitmany.json")"
"$CLI" bench "$TMP/sp" --json --quiet --epochs 1 --batch-size 4 --crop 32 --seed 3 --drop-last 0 \
    --max-bad-fraction 1 > "$TMP/splitcpu.json" || fail "split, cpu: $(cat "$TMP/splitcpu.json")"
"$PY" - "$TMP/sp" "$TMP/split1.json" "$TMP/split3.json" "$TMP/splitmany.json" "$TMP/splitcpu.json" << 'PYEOF' ||
import glob, json, os, sys
want = {"gpu_hw_items": 0, "gpu_default_items": 0, "gpu_cpu_items": 0}
jpegs = [p for p in glob.glob(os.path.join(sys.argv[1], "*", "*.jpg")) if "zz_junk" not in p]
for p in jpegs:
    n = os.path.getsize(p)
    k = "gpu_cpu_items" if n % 3 == 0 else "gpu_hw_items" if n % 2 == 0 else "gpu_default_items"
    want[k] += 1
want["gpu_cpu_items"] += 1  # the PNG
assert len(jpegs) == 14 and all(want.values()), want  # every decoder has items
for f in sys.argv[2:5]:
    s = json.load(open(f))["stats"]
    got = {k: s[k] for k in want}
    assert got == want, (f, got, want)
    assert sum(got.values()) == s["decode_items"] == 15, (f, got, s["decode_items"])
    assert s["skipped"] == 1, (f, s["skipped"])
s = json.load(open(sys.argv[5]))["stats"]
assert all(s[k] == 0 for k in want), ("the CPU path", {k: s[k] for k in want})
print("per-backend split (fake):", want)
PYEOF
    fail "per-backend split (see above)"
# the analyzer says GPU decode is prep time (its report)
"$CLI" gen "$TMP/an" --images 30 --classes 3 --width 96 --height 72 --seed 4 --quiet
NOSTALL_TEST_GPU_FAKE=1 "$CLI" analyze "$TMP/an" --decode-device gpu --batch-size 4 --threads 1 \
    --step-ms 1 --quiet > "$TMP/an.txt" 2>&1 || fail "analyze with GPU decode: $(cat "$TMP/an.txt")"
grep -q "GPU decode   decode and augment run on the GPU" "$TMP/an.txt" ||
    fail "analyze: no GPU decode line: $(cat "$TMP/an.txt")"
NOSTALL_TEST_GPU_FAKE=1 "$CLI" analyze "$TMP/an" --batch-size 4 --threads 1 --step-ms 1 --quiet \
    > "$TMP/an.txt" 2>&1 || fail "analyze on the CPU: $(cat "$TMP/an.txt")"
! grep -q "GPU decode" "$TMP/an.txt" || fail "analyze on the CPU names GPU decode"
echo PASS
