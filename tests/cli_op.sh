#!/usr/bin/env bash
# A user op from a shared library (--op-library, include/nostall_op.h) end
# to end with the CLI: the example op (examples/op_color_jitter.c) gives the
# same checksum for 1, 2 and 3 threads, with echo at every point, and with
# the MinIO cache (second epoch from the cache, same bytes); two jobs of a
# coordinated group deliver the bytes of a job alone with each item prepared
# once; `nostall analyze` calls a thread-starved op job prep-bound and a job
# on slow storage fetch-bound; a missing library, a library without the
# symbol and bad op_args are clear errors.
source "$(dirname "$0")/lib_cli.sh"

# The example op: CMake's build (NOSTALL_BUILD_DIR/examples), else built here.
OP=${NOSTALL_BUILD_DIR:-/nonexistent}/examples/libop_color_jitter.so
if [ ! -r "$OP" ]; then
    ROOT=$(cd "$(dirname "$0")/.." && pwd)
    command -v cc > /dev/null || { echo "SKIP: no example op and no cc to build it"; exit 77; }
    OP="$TMP/libop_color_jitter.so"
    cc -std=c11 -O2 -shared -fPIC -I "$ROOT/include" "$ROOT/examples/op_color_jitter.c" -o "$OP" -lm \
        || fail "the example op does not build"
fi
echo "op: $OP"

"$CLI" gen "$TMP/data" --images 48 --classes 4 --width 96 --height 72 --size-jitter 0.2 --quiet
op=(--op-library "$OP" --op-args "size=24 brightness=0.5 contrast=0.5 saturation=0.5")
common=(--batch-size 4 --epochs 2 --seed 2 --json --quiet "${op[@]}")

# 1. the same bytes for any thread count, also with echoing at every point
for echo in "" "--echo-factor 2 --echo-point fetch" "--echo-factor 2 --echo-point decode" \
            "--echo-factor 2 --echo-point augment" "--echo-factor 2 --echo-point batch"; do
    sums=()
    for t in 1 2 3; do
        # shellcheck disable=SC2086
        "$CLI" bench "$TMP/data" "${common[@]}" --threads $t $echo > "$TMP/t.json" || fail "bench $echo --threads $t failed"
        [ "$(json "$TMP/t.json" 'j["skipped_count"]')" = 0 ] || fail "bad items: $(json "$TMP/t.json" 'j["skipped"]')"
        sums+=("$(json "$TMP/t.json" 'j["checksum"]')")
    done
    echo "op ${echo:-(no echo)}: checksums ${sums[*]}"
    [ "${sums[0]}" = "${sums[1]}" ] && [ "${sums[0]}" = "${sums[2]}" ] || fail "op $echo: checksum depends on threads"
done
# eval mode (no colour changes) differs from train: the op sees the mode
"$CLI" bench "$TMP/data" "${common[@]}" --threads 2 > "$TMP/train.json"
"$CLI" bench "$TMP/data" "${common[@]}" --threads 2 --mode eval > "$TMP/eval.json"
[ "$(json "$TMP/train.json" 'j["checksum"]')" != "$(json "$TMP/eval.json" 'j["checksum"]')" ] \
    || fail "mode=eval gives the bytes of mode=train"

# 2. the MinIO cache: epoch 1 from the cache, the bytes of a run without one
# (a third epoch: at an epoch's boundary the workers fetch the next epoch's
# first items while this one's last are still queued, so which of an item's
# two fetches reads storage, and rarely both, is a race; from the third
# epoch on every item was stored long before)
"$CLI" bench "$TMP/data" "${common[@]}" --threads 2 --cache-bytes 64M --epochs 3 > "$TMP/cache.json"
json "$TMP/cache.json" 'j["per_epoch"][2]["cache_hits"] == 48 and j["per_epoch"][2]["storage_reads"] == 0' \
    | grep -q True || fail "third epoch not served by the cache: $(json "$TMP/cache.json" 'j["per_epoch"]')"
[ "$(json "$TMP/cache.json" '[e["checksum"] for e in j["per_epoch"][:2]]')" = \
  "$(json "$TMP/train.json" '[e["checksum"] for e in j["per_epoch"]]')" ] || fail "the cache changed the bytes"

# 3. a coordinated group of 2 running the op (a slow and a fast job): each
# delivers every epoch with the bytes of the job alone; each item prepared once
[ -d /dev/shm ] || { echo "SKIP: no /dev/shm"; exit 77; }
G=op$$
trap 'coord_kill; rm -f /dev/shm/nostall-*-$G* || true; rm -rf "$TMP" $SHM_DIRS' EXIT
coord=(--batch-size 4 --epochs 3 --seed 2 --threads 1 --json --quiet "${op[@]}")
"$CLI" bench "$TMP/data" "${coord[@]}" > "$TMP/solo.json"
coord_group $G "$TMP/solo.json" "100 15" "$TMP/data" "${coord[@]}"

# 4. nostall analyze: a thread-starved op job is prep-bound, one on slow
# storage fetch-bound (margins as in cli_analyze.sh: sanitizer builds get
# fewer, smaller images)
big=(--images 96 --width 500 --height 375)
[ -n "${NOSTALL_LIBRARY:-}" ] && nm -D "$NOSTALL_LIBRARY" 2>/dev/null | grep -E ' __(asan|tsan)_' > /dev/null \
    && big=(--images 24 --width 400 --height 300)
"$CLI" gen "$TMP/big" "${big[@]}" --quality 60 --classes 2 --quiet
in_memory "$TMP/big" bigm # (tmpfs: the cold run cannot wait on a busy disk)
"$CLI" analyze "$bigm" --quiet --json --op-library "$OP" --op-args "size=224" --batch-size 16 \
    --threads 1 --step-ms 1 --predict step_ms=1 > "$TMP/prep.json" || fail "analyze (prep) failed"
echo "analyze, op job on 1 thread: bound $(json "$TMP/prep.json" 'j["bound"]'); $(json "$TMP/prep.json" 'j["recommendations"][0]["text"]')"
predicted_prep "$TMP/prep.json" op
"$CLI" gen "$TMP/small" --images 64 --classes 4 --width 200 --height 150 --quiet
"$CLI" analyze "$TMP/small" --quiet --json --op-library "$OP" --op-args "size=64" --batch-size 16 \
    --threads 2 --step-ms 10 --storage-mbps 0.4 > "$TMP/fetch.json" || fail "analyze (fetch) failed"
echo "analyze, op job on 0.4 MB/s storage: bound $(json "$TMP/fetch.json" 'j["bound"]')"
[ "$(json "$TMP/fetch.json" 'j["bound"]')" = fetch ] || fail "slow-storage op job not fetch-bound"

# 5. errors name what is wrong, and nothing crashes
out=$("$CLI" bench "$TMP/data" --op-library "$TMP/none.so" 2>&1) && fail "a missing op library was accepted"
echo "$out" | grep -q "op_library '$TMP/none.so': no such file" || fail "missing library: $out"
out=$("$CLI" bench "$TMP/data" --op-library libm.so.6 2>&1) && fail "a library without the op was accepted"
echo "$out" | grep -q "no symbol nostall_op_v1" || fail "library without the symbol: $out"
out=$("$CLI" bench "$TMP/data" --op-library "$OP" --op-args "size=24 hue=0.2" 2>&1) && fail "bad op_args accepted"
echo "$out" | grep -q "op 'color_jitter': create failed: op_args: unknown key 'hue'" || fail "bad op_args: $out"
out=$("$CLI" bench "$TMP/data" --op-args "size=24" 2>&1) && fail "op_args without an op accepted"
echo "$out" | grep -q "without an op" || fail "op_args alone: $out"
echo PASS
