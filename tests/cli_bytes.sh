#!/usr/bin/env bash
# task=bytes end to end with the CLI: a folder of files of any name (every
# file an item, hidden ones and those at the root counted as ignored) and a
# list of paths with float labels; one checksum for 1, 2 and 3 threads;
# echoing at fetch, decode and augment repeats the same bytes (one
# checksum), batch echoing too; the MinIO cache (second epoch: no storage
# reads, the same bytes); a coordinated group of two jobs (each epoch's
# bytes as a job alone, each item prepared once for the group); bad items
# (an empty file, one over max_file_bytes) skipped and listed with their
# reason; `nostall analyze` calls a job on very slow storage fetch-bound and
# a thread-starved job whose rooms are large (one 32 MB file among small
# ones: 32 MB zeroed per item against a 1 ms step) prep-bound.
source "$(dirname "$0")/lib_cli.sh"

"$PY" - "$TMP" <<'EOF'
import os, random, sys
d = sys.argv[1]
r = random.Random(5)
for c in ("cats", "dogs", "misc"):
    os.makedirs(os.path.join(d, "data", c, "nested"))
    for i in range(12):
        name = ["README", "a.txt", "x.jpg", "y.tar.gz", "nested/z", "noext"][i % 6] + str(i)
        with open(os.path.join(d, "data", c, name), "wb") as f:
            f.write(bytes(r.randrange(256) for _ in range(1 + r.randrange(3000))))
open(os.path.join(d, "data", "cats", ".hidden"), "wb").write(b"h")
open(os.path.join(d, "data", "root.bin"), "wb").write(b"r")
with open(os.path.join(d, "list.txt"), "w") as f:
    for c in ("cats", "dogs"):
        for i in range(6):
            f.write("data/%s/%s%d\t%g\n" % (c, ["README", "a.txt", "x.jpg", "y.tar.gz", "nested/z", "noext"][i], i, i * 0.5 - 1))
EOF
common=(--task bytes --batch-size 5 --epochs 2 --seed 3 --json --quiet)
sum() { json "$1" 'j["checksum"]'; }

for src in data list.txt; do
    for t in 1 2 3; do
        "$CLI" bench --max-bad-fraction 1 "$TMP/$src" "${common[@]}" --threads $t > "$TMP/$src-$t.json" || fail "bench $src threads $t"
    done
    echo "$src: threads 1 $(sum "$TMP/$src-1.json"), 2 $(sum "$TMP/$src-2.json"), 3 $(sum "$TMP/$src-3.json")"
    [ "$(sum "$TMP/$src-1.json")" = "$(sum "$TMP/$src-2.json")" ] && [ "$(sum "$TMP/$src-1.json")" = "$(sum "$TMP/$src-3.json")" ] \
        || fail "$src: checksums differ across thread counts"
done
json "$TMP/data-1.json" 'j["dataset"]["items"] == 36 and j["dataset"]["files_ignored"] == 2 and j["items"] == 72' | grep -q True \
    || fail "folder: $(json "$TMP/data-1.json" 'j["dataset"]')"
json "$TMP/list.txt-1.json" 'j["dataset"]["items"] == 12' | grep -q True || fail "list: items"
# another seed: another order, so another checksum
"$CLI" bench --max-bad-fraction 1 "$TMP/data" "${common[@]}" --threads 2 --seed 4 > "$TMP/s4.json"
[ "$(sum "$TMP/s4.json")" != "$(sum "$TMP/data-1.json")" ] || fail "another seed gave the same bytes"

# echoing: the same bytes at every item point; batch repeats batches
for p in fetch decode augment batch; do
    for t in 1 3; do
        "$CLI" bench --max-bad-fraction 1 "$TMP/data" "${common[@]}" --threads $t --echo-factor 2 --echo-point $p > "$TMP/e-$p-$t.json" \
            || fail "echo $p"
    done
    [ "$(sum "$TMP/e-$p-1.json")" = "$(sum "$TMP/e-$p-3.json")" ] || fail "echo $p: threads change the bytes"
    [ "$(json "$TMP/e-$p-1.json" 'j["items"]')" = 144 ] || fail "echo $p: not every file twice per epoch"
done
[ "$(sum "$TMP/e-fetch-1.json")" = "$(sum "$TMP/e-decode-1.json")" ] && [ "$(sum "$TMP/e-fetch-1.json")" = "$(sum "$TMP/e-augment-1.json")" ] \
    || fail "echo fetch/decode/augment must repeat the same bytes"
"$CLI" bench --max-bad-fraction 1 "$TMP/data" "${common[@]}" --threads 2 --echo adaptive --step-ms 1 > /dev/null || fail "echo adaptive"

# the MinIO cache: each file read once (twice at most, at the first
# boundary), then never again; the same bytes
# (a third epoch: at an epoch's boundary the workers fetch the next epoch's
# first items while this one's last are still queued, so which of an item's
# two fetches reads storage, and rarely both, is a race; from the third
# epoch on every item was stored long before)
"$CLI" bench --max-bad-fraction 1 "$TMP/data" "${common[@]}" --threads 2 --cache-bytes 1M --epochs 3 > "$TMP/c.json"
[ "$(json "$TMP/c.json" '[e["checksum"] for e in j["per_epoch"][:2]]')" = \
  "$(json "$TMP/data-1.json" '[e["checksum"] for e in j["per_epoch"]]')" ] || fail "cache: other bytes"
want=$(find "$TMP/data" -mindepth 2 -type f ! -name '.*' -printf '%s\n' | awk '{s+=$1} END {print s}')
json "$TMP/c.json" "(lambda e: 36 <= e[0]['storage_reads'] + e[1]['storage_reads'] <= 72 \
and $want <= e[0]['storage_bytes_read'] + e[1]['storage_bytes_read'] <= 2 * $want \
and e[2]['storage_reads'] == 0 and e[2]['cache_hits'] == 36)(j['per_epoch'])" \
    | grep -q True || fail "cache: $(json "$TMP/c.json" 'j["per_epoch"]')"

# bad items: skipped, listed with the reason
mkdir -p "$TMP/bad/c"
printf 'ok' > "$TMP/bad/c/a"
: > "$TMP/bad/c/empty"
head -c 5000 /dev/zero > "$TMP/bad/c/big"
"$CLI" bench --max-bad-fraction 1 "$TMP/bad" --task bytes --batch-size 4 --max-file-bytes 4000 --json --quiet > "$TMP/bad.json" || fail "bad items"
json "$TMP/bad.json" 'j["items"] == 1 and sorted(s["path"].rsplit("/", 1)[1] for s in j["skipped"]) == ["big", "empty"]' \
    | grep -q True || fail "bad items: $(json "$TMP/bad.json" 'j["skipped"]')"
if "$CLI" bench --max-bad-fraction 1 "$TMP/bad" --task bytes --batch-size 4 --max-file-bytes 4000 --on-bad-item fail --quiet 2> "$TMP/err"; then
    fail "on_bad_item=fail passed"
fi
grep -qE "bad/c/(big|empty)" "$TMP/err" || fail "the failure does not name the file: $(cat "$TMP/err")"

# a coordinated group of two jobs (a slow and a fast one): each delivers
# every epoch with the bytes of the job alone, each item prepared once
if [ -d /dev/shm ]; then
    G=byt$$
    trap 'coord_kill; rm -f /dev/shm/nostall-*-$G* || true; rm -rf "$TMP" $SHM_DIRS' EXIT
    co=(--task bytes --batch-size 4 --epochs 3 --seed 3 --threads 1 --json --quiet)
    "$CLI" bench --max-bad-fraction 1 "$TMP/data" "${co[@]}" > "$TMP/solo.json"
    coord_group $G "$TMP/solo.json" "100 10" "$TMP/data" "${co[@]}"
fi

# analyze: fetch-bound (about 54 KB at 0.02 MB/s, over 2.5 s, against 10 ms
# steps) and prep-bound (40 files of 1 KB and a sparse one of 32 MB: every
# item's place is 32 MB, zeroed past its bytes, by one thread: 64 MB written
# per batch of 2 against a 1 ms step; 32 MB of holes read per epoch)
"$CLI" analyze "$TMP/data" --task bytes --batch-size 4 --threads 2 --step-ms 10 --storage-mbps 0.02 \
    --quiet --json > "$TMP/fetch.json" || fail "analyze (fetch) failed"
f="$TMP/fetch.json"
echo "fetch-bound: bound $(json "$f" 'j["bound"]'), cold measured $(json "$f" 'round(j["measured"]["cold_s"], 3)') s, model $(json "$f" 'round(j["model"]["cold_run"]["epoch_s"], 3)') s"
[ "$(json "$f" 'j["bound"]')" = fetch ] && [ "$(json "$f" 'j["measured"]["bound"]')" = fetch ] \
    || fail "bytes job on slow storage not fetch-bound: $(json "$f" 'j["measured"]')"
mkdir -p "$TMP/big/c"
for i in $(seq 10 49); do head -c 1000 /dev/urandom > "$TMP/big/c/f$i"; done
truncate -s 32M "$TMP/big/c/huge" # sparse: read without disk I/O, cold or not
# (from tmpfs: the cold run's 41 reads cannot wait on a busy disk)
in_memory "$TMP/big" big
"$CLI" analyze "$big" --task bytes --batch-size 2 --threads 1 --step-ms 1 --predict step_ms=1 --quiet --json \
    > "$TMP/prep.json" || fail "analyze (prep) failed"
f="$TMP/prep.json"
echo "prep-bound: bound $(json "$f" 'j["bound"]'), measured prep stall $(json "$f" 'round(j["measured"]["prep_stall_s"], 3)') s, fetch stall $(json "$f" 'round(j["measured"]["fetch_stall_s"], 3)') s"
predicted_prep "$f" bytes
echo PASS
