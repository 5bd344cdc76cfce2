#!/usr/bin/env bash
# task=tokens end to end with the CLI: one checksum for 1, 2 and 3 threads
# (random windows and chunks, a uint16 .bin, a uint32 .bin, .npy files of
# every accepted dtype giving the same bytes as the .bin of the same
# tokens); bad token files (odd size, too short, a .npy whose header lies
# or names another dtype) are refused at create with a message naming the
# file and its size; echoing at every point (fetch, decode and augment
# repeat the same window: one checksum; batch); the MinIO cache (the second
# epoch reads nothing from storage, the same bytes; the first reads the
# corpus once plus the units' overlaps); a coordinated group of two jobs
# (each epoch's bytes as a job alone, each item prepared once for the
# group); `nostall analyze` calls a thread-starved job with long windows
# prep-bound and one on very slow storage fetch-bound.
source "$(dirname "$0")/lib_cli.sh"

# 6000 tokens (< 2^16, also as uint32 and int32/int64 .npy); 12-token
# windows: (6000 - 1) / 12 = 499 items per epoch
"$PY" - "$TMP" <<'EOF'
import numpy as np, sys
d = sys.argv[1]
t = np.random.default_rng(3).integers(0, 65536, size=6000, dtype=np.uint16)
t.tofile(d + "/u16.bin")
t.astype(np.uint32).tofile(d + "/u32.bin")
np.save(d + "/u2.npy", t)
np.save(d + "/u4.npy", t.astype(np.uint32))
np.save(d + "/i4.npy", t.astype(np.int32))
np.save(d + "/i8.npy", t.astype(np.int64))
with open(d + "/v2.npy", "wb") as f:
    np.lib.format.write_array(f, t, version=(2, 0))
open(d + "/odd.bin", "wb").write(t.tobytes() + b"x")          # 12001 bytes
t[:12].tofile(d + "/short.bin")                                 # 12 tokens < 13
t[:4001].tofile(d + "/u16x.bin")                                # 8002 bytes: not uint32s
np.save(d + "/f4.npy", t.astype(np.float32))
np.save(d + "/2d.npy", t.reshape(100, 60))
b = open(d + "/u2.npy", "rb").read()
open(d + "/cut.npy", "wb").write(b[:-3])                        # data cut short
EOF
common=(--task tokens --context-length 12 --batch-size 8 --epochs 2 --seed 5 --json --quiet)
sum() { json "$1" 'j["checksum"]'; }

for w in random chunks; do
    for t in 1 2 3; do
        "$CLI" bench "$TMP/u16.bin" "${common[@]}" --windows $w --threads $t > "$TMP/$w-$t.json" \
            || fail "bench $w threads $t"
    done
    echo "windows=$w: threads 1 $(sum "$TMP/$w-1.json"), 2 $(sum "$TMP/$w-2.json"), 3 $(sum "$TMP/$w-3.json")"
    [ "$(sum "$TMP/$w-1.json")" = "$(sum "$TMP/$w-2.json")" ] && [ "$(sum "$TMP/$w-1.json")" = "$(sum "$TMP/$w-3.json")" ] \
        || fail "windows=$w: checksums differ across thread counts"
    [ "$(json "$TMP/$w-2.json" 'j["per_epoch"][0]["items"]')" = 499 ] || fail "windows=$w: an epoch is not 499 windows"
done
[ "$(sum "$TMP/random-1.json")" != "$(sum "$TMP/chunks-1.json")" ] || fail "random and chunks gave the same bytes"
"$CLI" bench "$TMP/u16.bin" "${common[@]}" --threads 2 --seed 6 > "$TMP/seed6.json"
[ "$(sum "$TMP/seed6.json")" != "$(sum "$TMP/random-1.json")" ] || fail "another seed gave the same windows"
# the same tokens in every accepted layout are the same bytes
for f in u32.bin u2.npy u4.npy i4.npy i8.npy v2.npy; do
    dt=()
    [ $f = u32.bin ] && dt=(--token-dtype uint32)
    "$CLI" bench "$TMP/$f" "${common[@]}" --threads 2 "${dt[@]}" > "$TMP/l.json" || fail "bench $f"
    [ "$(sum "$TMP/l.json")" = "$(sum "$TMP/random-1.json")" ] || fail "$f: other bytes than u16.bin"
done
# without targets: windows of 13 tokens, other bytes
"$CLI" bench "$TMP/u16.bin" "${common[@]}" --threads 2 --targets 0 > "$TMP/nt.json"
[ "$(sum "$TMP/nt.json")" != "$(sum "$TMP/random-1.json")" ] || fail "targets=0 gave the bytes of targets=1"

# bad files: a clear error at create, naming the file and what is wrong
bad() { # FILE PATTERN [flags]: bench fails and stderr matches PATTERN
    local f=$1 pat=$2
    shift 2
    if "$CLI" bench "$TMP/$f" "${common[@]}" "$@" > /dev/null 2> "$TMP/err"; then fail "$f accepted"; fi
    grep -q -- "$TMP/$f" "$TMP/err" || fail "$f: message does not name the file: $(cat "$TMP/err")"
    grep -qE -- "$pat" "$TMP/err" || fail "$f: message lacks '$pat': $(cat "$TMP/err")"
    echo "$f: $(head -c 300 "$TMP/err")"
}
bad odd.bin "12001 bytes is not a whole number of uint16 tokens"
bad u16x.bin "8002 bytes is not a whole number of uint32 tokens \(4 bytes each\): 2 bytes past token 2000" --token-dtype uint32
bad short.bin "12 uint16 tokens \(24 bytes\), fewer than one window of context_length \+ 1 = 13"
bad f4.npy "dtype '<f4'"
bad 2d.npy "2 dimensions"
bad cut.npy "truncated"
bad u4.npy "holds uint32 tokens, token_dtype=uint16" --token-dtype uint16
bad missing.bin "."
if "$CLI" bench "$TMP" "${common[@]}" > /dev/null 2> "$TMP/err"; then fail "a directory accepted"; fi
grep -q "directory" "$TMP/err" || fail "a directory: $(cat "$TMP/err")"
if "$CLI" bench http://127.0.0.1:9/t.bin "${common[@]}" > /dev/null 2> "$TMP/err"; then fail "a URL accepted"; fi
grep -q "http(s)" "$TMP/err" || fail "a URL: $(cat "$TMP/err")"

# echoing: fetch, decode and augment repeat the same window (no draw in
# the recipe depends on the copy); batch repeats whole batches
for p in fetch decode augment batch; do
    for t in 1 3; do
        "$CLI" bench "$TMP/u16.bin" "${common[@]}" --threads $t --echo-factor 2 --echo-point $p > "$TMP/e-$p-$t.json" \
            || fail "echo $p"
    done
    [ "$(sum "$TMP/e-$p-1.json")" = "$(sum "$TMP/e-$p-3.json")" ] || fail "echo $p: threads change the bytes"
    json "$TMP/e-$p-1.json" 'j["items"] == 4 * 499 and j["echo"]["achieved_factor"] == 2' | grep -q True \
        || fail "echo $p: items $(json "$TMP/e-$p-1.json" 'j["items"]')"
done
[ "$(sum "$TMP/e-fetch-1.json")" = "$(sum "$TMP/e-decode-1.json")" ] && [ "$(sum "$TMP/e-fetch-1.json")" = "$(sum "$TMP/e-augment-1.json")" ] \
    || fail "echo fetch/decode/augment must repeat the same windows"
"$CLI" bench "$TMP/u16.bin" "${common[@]}" --threads 2 --echo adaptive --step-ms 1 > "$TMP/ea.json" || fail "echo adaptive"

# the MinIO cache: random windows are read by unit (64 x 13 = 832 starts:
# 8 units covering 12000 bytes, overlapping by 12 tokens), once; chunks by
# chunk (each window read once); once every unit is in, nothing is read.
# Epoch 1's first items are fetched while epoch 0's last are still in
# flight (the ring runs ahead), so a unit read by both at once is read
# twice, attributed to either epoch: the third epoch is the one that must
# read nothing.
for w in random chunks; do
    "$CLI" bench "$TMP/u16.bin" "${common[@]}" --windows $w --threads 2 --cache-bytes 1M > "$TMP/c-$w.json"
    [ "$(sum "$TMP/c-$w.json")" = "$(sum "$TMP/$w-1.json")" ] || fail "cache $w: other bytes"
    "$CLI" bench "$TMP/u16.bin" "${common[@]}" --epochs 3 --windows $w --threads 2 --cache-bytes 1M > "$TMP/c3-$w.json"
    echo "cache $w: epoch 0 read $(json "$TMP/c3-$w.json" 'j["per_epoch"][0]["storage_bytes_read"]') bytes in $(json "$TMP/c3-$w.json" 'j["per_epoch"][0]["storage_reads"]') reads; epoch 1 $(json "$TMP/c3-$w.json" 'j["per_epoch"][1]["storage_reads"]') reads; epoch 2 $(json "$TMP/c3-$w.json" 'j["per_epoch"][2]["storage_reads"]') reads, $(json "$TMP/c3-$w.json" 'j["per_epoch"][2]["cache_hits"]') hits"
    json "$TMP/c3-$w.json" 'j["per_epoch"][2]["storage_reads"] == 0 and j["per_epoch"][2]["storage_bytes_read"] == 0 and j["per_epoch"][2]["cache_hits"] == 499' \
        | grep -q True || fail "cache $w: the third epoch read storage"
done
# every unit read (a unit of 1524 bytes, the last 1500), read again only by
# the race above: at most once more each
json "$TMP/c3-random.json" '8 <= sum(e["storage_reads"] for e in j["per_epoch"]) <= 16 and 12000 + 7 * 24 <= sum(e["storage_bytes_read"] for e in j["per_epoch"]) <= 2 * (12000 + 7 * 24)' \
    | grep -q True || fail "cache random: the 8 units should be read once (twice at most)"
json "$TMP/c3-chunks.json" '499 <= sum(e["storage_reads"] for e in j["per_epoch"]) <= 2 * 499 and sum(e["storage_bytes_read"] for e in j["per_epoch"]) == 26 * sum(e["storage_reads"] for e in j["per_epoch"])' \
    | grep -q True || fail "cache chunks: each chunk should be read once (twice at most)"
# random windows with a cache too small for every unit: refused, saying why
if "$CLI" bench "$TMP/u16.bin" "${common[@]}" --cache-bytes 12000 > /dev/null 2> "$TMP/err"; then
    fail "a cache smaller than the units accepted"
fi
grep -q "Give cache_bytes >= 12168" "$TMP/err" || fail "small cache: $(cat "$TMP/err")"
# without a cache each window reads exactly its own bytes
json "$TMP/random-2.json" 'j["per_epoch"][0]["storage_bytes_read"] == 499 * 26' | grep -q True \
    || fail "no cache: windows should read 26 bytes each: $(json "$TMP/random-2.json" 'j["per_epoch"][0]')"

# a coordinated group of two jobs (a slow and a fast one): each delivers
# every epoch with the bytes of the job alone, each item prepared once
if [ -d /dev/shm ]; then
    G=tok$$
    trap 'coord_kill; rm -f /dev/shm/nostall-*-$G* || true; rm -rf "$TMP" $SHM_DIRS' EXIT
    co=(--task tokens --context-length 12 --batch-size 72 --epochs 3 --seed 5 --threads 1 --json --quiet)
    "$CLI" bench "$TMP/u16.bin" "${co[@]}" > "$TMP/solo.json"
    coord_group $G "$TMP/solo.json" "100 10" "$TMP/u16.bin" "${co[@]}"
fi

# analyze: prep-bound (one thread widening 3 windows of 2^20 tokens -- 48 MB
# of int64 -- per batch against a 1 ms step: 21 batches of 25 ms or more, a
# prep stall of about 0.15 s; with 8 batches it was 0.07 s, a few times the
# noise a loaded machine adds to a cold run) and fetch-bound (windows of
# 2 KB at 0.4 MB/s against a 10 ms step)
# (from tmpfs: the cold run's 128 MB cannot wait on a busy disk)
mkdir "$TMP/bigd"
"$PY" -c "import numpy as np; np.random.default_rng(1).integers(0, 50000, size=64 << 20, dtype=np.uint16).tofile('$TMP/bigd/big.bin')"
in_memory "$TMP/bigd" bigd
rm -f "$TMP/bigd/big.bin"
"$CLI" analyze "$bigd/big.bin" --task tokens --context-length 1048576 --batch-size 3 --threads 1 --step-ms 1 \
    --predict step_ms=1 --quiet --json > "$TMP/prep.json" || fail "analyze (prep) failed"
rm -f "$TMP/big.bin"
f="$TMP/prep.json"
echo "prep-bound: bound $(json "$f" 'j["bound"]'), measured prep stall $(json "$f" 'round(j["measured"]["prep_stall_s"], 3)') s, fetch stall $(json "$f" 'round(j["measured"]["fetch_stall_s"], 3)') s"
predicted_prep "$f" tokens
"$PY" -c "import numpy as np; np.random.default_rng(1).integers(0, 50000, size=300000, dtype=np.uint16).tofile('$TMP/small.bin')"
"$CLI" analyze "$TMP/small.bin" --task tokens --context-length 1024 --batch-size 16 --threads 2 --step-ms 10 \
    --storage-mbps 0.4 --quiet --json > "$TMP/fetch.json" || fail "analyze (fetch) failed"
f="$TMP/fetch.json"
echo "fetch-bound: bound $(json "$f" 'j["bound"]'), cold measured $(json "$f" 'round(j["measured"]["cold_s"], 3)') s, model $(json "$f" 'round(j["model"]["cold_run"]["epoch_s"], 3)') s"
[ "$(json "$f" 'j["bound"]')" = fetch ] && [ "$(json "$f" 'j["measured"]["bound"]')" = fetch ] \
    || fail "tokens job on slow storage not fetch-bound: $(json "$f" 'j["measured"]')"
# analyze warms and drops each file once, not once per window: a 16 MB corpus
# of about 129,000 windows made it read 2 TB from the page cache (hours; it takes
# about a second). The limit is there so that the old behaviour fails
# instead of hanging the suite, far from what the run needs.
"$PY" -c "import numpy as np; np.random.default_rng(2).integers(0, 50000, size=8 << 20, dtype=np.uint16).tofile('$TMP/many.bin')"
timeout 600 "$CLI" analyze "$TMP/many.bin" --task tokens --context-length 64 --batch-size 256 --threads 2 \
    --step-ms 1 --max-batches 4 --quiet --json > "$TMP/many.json" \
    || fail "analyze of a corpus of 129,000 windows failed or ran over 600 s (exit $?)"
[ "$(json "$TMP/many.json" 'int(j["measurements"]["dataset_files"])')" = 1 ] \
    || fail "analyze counted $(json "$TMP/many.json" 'j["measurements"]["dataset_files"]') files for one corpus"
rm -f "$TMP/many.bin"
echo PASS
