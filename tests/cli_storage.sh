#!/usr/bin/env bash
# The storage tier end to end: with a MinIO cache of a fraction c of the
# dataset's bytes, every epoch after the first reads (1 - c) of the bytes
# from storage and serves the cached items as hits; the cache never exceeds
# its budget and does not change a single delivered byte; misses are not
# left in the OS page cache; emulated bandwidth and latency slow reads as
# configured; io_depth 0 (auto) deepens the reads in flight only while
# they wait; bad options are refused with a message; cache_transcode
# rewrites each cached JPEG once and changes no delivered byte.
source "$(dirname "$0")/lib_cli.sh"

"$CLI" gen "$TMP/data" --images 60 --classes 3 --width 160 --height 120 --size-jitter 0.3 --quiet
total=$(find "$TMP/data" -type f -name '*.jpg' -printf '%s\n' | awk '{s+=$1} END {print s}')
common=(--batch-size 8 --crop 32 --threads 2 --epochs 3 --json --quiet --seed 3)

"$CLI" bench "$TMP/data" "${common[@]}" --cache none > "$TMP/none.json"
ref=$(json "$TMP/none.json" 'j["checksum"]')
[ "$(json "$TMP/none.json" 'j["per_epoch"][2]["storage_bytes_read"]')" = "$total" ] || fail "no cache: every epoch reads everything"

for c in 0.25 0.5 0.75; do
    budget=$(awk -v t="$total" -v c="$c" 'BEGIN {printf "%d", t * c}')
    "$CLI" bench "$TMP/data" "${common[@]}" --cache-bytes "$budget" > "$TMP/c$c.json"
    f="$TMP/c$c.json"
    [ "$(json "$f" 'j["checksum"]')" = "$ref" ] || fail "c=$c: the cache changed the delivered bytes"
    [ "$(json "$f" 'j["per_epoch"][0]["storage_bytes_read"]')" = "$total" ] || fail "c=$c: first epoch must read everything"
    json "$f" "j['cache_bytes'] <= $budget" | grep True > /dev/null || fail "c=$c: cache over budget"
    for e in 1 2; do
        got=$(json "$f" "j['per_epoch'][$e]['storage_bytes_read']")
        want=$(awk -v t="$total" -v c="$c" 'BEGIN {printf "%d", t * (1 - c)}')
        echo "c=$c epoch $e: read $got of $total bytes (want about $want)"
        json "$f" "abs(j['per_epoch'][$e]['storage_bytes_read'] - $total * (1 - $c)) <= 0.02 * $total" \
            | grep True > /dev/null || fail "c=$c epoch $e: read $got, want (1-c) of $total within 2%"
        # every cached item is a hit, every other item a miss
        json "$f" "j['per_epoch'][$e]['cache_hits'] + j['per_epoch'][$e]['cache_misses'] == 60" \
            | grep True > /dev/null || fail "c=$c: hits + misses != items"
        json "$f" "j['per_epoch'][$e]['cache_hits'] == j['stats']['cache_items']" \
            | grep True > /dev/null || fail "c=$c: hits != cached items"
    done
done

# reads in flight across epoch boundaries never read an item twice: with a
# cache that holds everything, the whole run reads each item exactly once
for seed in 1 2 3; do
    "$CLI" bench "$TMP/data" --batch-size 4 --crop 16 --threads 4 --io-depth 16 --epochs 3 \
        --seed $seed --cache-bytes 100M --json --quiet > "$TMP/full.json"
    [ "$(json "$TMP/full.json" 'j["stats"]["storage_reads"]')" = 60 ] \
        || fail "full cache, seed $seed: $(json "$TMP/full.json" '[e["storage_reads"] for e in j["per_epoch"]]') reads per epoch, want 60 then 0"
done

# cache_transcode: cached JPEGs rewritten with restart markers, once each,
# with io_depth and 4 threads racing on the same items; same bytes delivered
"$CLI" bench "$TMP/data" "${common[@]}" --threads 4 --io-depth 8 --cache-bytes 100M \
    --cache-transcode 1 > "$TMP/ct.json" || fail "--cache-transcode 1 failed"
[ "$(json "$TMP/ct.json" 'j["checksum"]')" = "$ref" ] || fail "cache_transcode changed the delivered bytes"
[ "$(json "$TMP/ct.json" 'j["stats"]["cache_transcoded"]')" = 60 ] \
    || fail "cache_transcode: $(json "$TMP/ct.json" 'j["stats"]["cache_transcoded"]') of 60 items rewritten"
json "$TMP/ct.json" "$total < j['cache_bytes'] < 1.13 * $total" | grep True > /dev/null \
    || fail "cache_transcode: cache holds $(json "$TMP/ct.json" 'j["cache_bytes"]') bytes for $total of files"
"$CLI" bench "$TMP/data" --cache-transcode 1 --json --quiet 2> "$TMP/err" > /dev/null \
    && fail "cache_transcode without a cache must be refused"
grep -q "cache_transcode" "$TMP/err" || fail "refusal should name cache_transcode: $(cat "$TMP/err")"

# percentage-of-RAM form is accepted
"$CLI" bench "$TMP/data" --batch-size 8 --crop 16 --cache-bytes 1% --json --quiet > "$TMP/pct.json" \
    || fail "--cache-bytes 1% refused"

# honest I/O: with a cache, the files read are not left in the page cache
if fincore --version > /dev/null 2>&1; then
    resident() { find "$TMP/data" -type f -name '*.jpg' -print0 | xargs -0 fincore --bytes --noheadings \
                 | awk '{s+=$1} END {print s+0}'; }
    cat "$TMP"/data/*/*.jpg > /dev/null                      # warm every page
    "$CLI" bench "$TMP/data" --batch-size 8 --crop 16 --cache-bytes 100M --json --quiet > /dev/null
    after=$(resident)
    echo "page cache after a cached run: $after of $total bytes resident"
    [ "$after" -lt $((total / 10)) ] || fail "cached run left $after bytes in the page cache"
    "$CLI" bench "$TMP/data" --batch-size 8 --crop 16 --cache none --json --quiet > /dev/null
    [ "$(resident)" -gt $((total / 2)) ] || echo "note: page cache did not keep files with --cache none"
else
    echo "fincore not available: page-cache check skipped"
fi

# Emulated storage. Wall-clock lower bounds hold on any machine (a busy one
# is only slower); upper bounds and comparisons either have a wide margin
# over the CPU work (a sanitizer build on a loaded machine prepares an item
# here in < 10 ms) or use the workers' storage-wait counter, from which the
# CPU work is left out.
# bandwidth: 60 items of $total bytes at 0.5 MB/s cannot take less than
# total/0.5e6 s (~1.5 s); an epoch from a cache that holds everything
# reads nothing and is not slowed by storage (the third epoch: at the first
# boundary the workers may fetch an item for the next epoch before this
# one's fetch of it, so either may be the read). The upper bounds are far
# from an idle machine's figures (a loaded one under TSan must pass).
bw=0.5e6
"$CLI" bench "$TMP/data" --batch-size 8 --crop 16 --threads 2 --storage-mbps 0.5 --epochs 3 \
    --cache-bytes 100M --json --quiet > "$TMP/slow.json"
echo "0.5 MB/s, $total bytes: epoch 0 (reads) $(json "$TMP/slow.json" 'j["per_epoch"][0]["seconds"]') s, epoch 2 (cached) $(json "$TMP/slow.json" 'j["per_epoch"][2]["seconds"]') s"
json "$TMP/slow.json" "j['per_epoch'][0]['seconds'] >= 0.95 * $total / $bw" | grep True > /dev/null \
    || fail "0.5 MB/s emulation too fast: $(json "$TMP/slow.json" 'j["per_epoch"][0]["seconds"]') s for $total bytes"
json "$TMP/slow.json" "j['per_epoch'][0]['seconds'] <= 5 * $total / $bw + 10" | grep True > /dev/null \
    || fail "0.5 MB/s emulation too slow: $(json "$TMP/slow.json" 'j["per_epoch"][0]["seconds"]') s"
json "$TMP/slow.json" "j['per_epoch'][2]['storage_reads'] == 0 and j['per_epoch'][2]['cache_hits'] == 60" \
    | grep True > /dev/null || fail "fully cached epoch read from storage: $(json "$TMP/slow.json" 'j["per_epoch"][2]')"
json "$TMP/slow.json" "j['per_epoch'][2]['seconds'] < 0.9 * $total / $bw" \
    | grep True > /dev/null || fail "fully cached epoch slowed by storage: $(json "$TMP/slow.json" 'j["per_epoch"][2]["seconds"]') s"
# latency: one thread, 20 ms per read, 60 reads one at a time: at least 1.2 s
"$CLI" bench "$TMP/data" --batch-size 8 --crop 16 --threads 1 --io-depth 1 --storage-latency-ms 20 --json --quiet > "$TMP/lat.json"
json "$TMP/lat.json" "j['seconds'] >= 1.14" | grep True > /dev/null \
    || fail "latency emulation too fast: $(json "$TMP/lat.json" 'j["seconds"]') s"
# reads in flight: with 6 per thread the latencies overlap: 60/6 * 20 ms of
# storage at least, and the worker waits for storage for about that long
# (less when preparing items covers it), far less than one read at a time
for reader in pread io_uring; do
    "$CLI" bench "$TMP/data" --batch-size 8 --crop 16 --threads 1 --io-depth 6 --reader $reader \
        --storage-latency-ms 20 --json --quiet > "$TMP/lat6.json"
    s6=$(json "$TMP/lat6.json" 'j["seconds"]')
    w6=$(json "$TMP/lat6.json" 'round(j["stats"]["storage_wait_ns"] / 1e9, 3)')
    echo "latency 20 ms, 60 reads, 1 thread: depth 1 $(json "$TMP/lat.json" 'j["seconds"]') s, depth 6 ($reader) $s6 s, waiting $w6 s"
    json "$TMP/lat6.json" "j['seconds'] >= 0.19 and j['stats']['storage_wait_ns'] <= 0.6e9" | grep True > /dev/null \
        || fail "io_depth 6 ($reader): $s6 s, waited $w6 s, want >= 0.19 s and about 0.2 s of waiting (latencies overlapping)"
done
# io_depth 0 (the default, auto): a worker that waits for storage deepens
# its FIFO (4, 8, 16, ...) and waits far less than with a fixed 4; same
# bytes; on storage that keeps up it stays at 4. With 100 ms per read, a
# worker still waits at depth 8 unless an item took > 12 ms to prepare.
for d in 4 0; do
    "$CLI" bench "$TMP/data" --batch-size 8 --crop 16 --threads 1 --epochs 1 --io-depth $d \
        --storage-latency-ms 100 --json --quiet > "$TMP/auto$d.json"
done
wait4=$(json "$TMP/auto4.json" 'j["stats"]["storage_wait_ns"]')
echo "latency 100 ms, 60 reads, 1 thread: io_depth 4 $(json "$TMP/auto4.json" 'j["seconds"]') s (waiting $(json "$TMP/auto4.json" 'round(j["stats"]["storage_wait_ns"] / 1e9, 3)') s)," \
    "auto $(json "$TMP/auto0.json" 'j["seconds"]') s (waiting $(json "$TMP/auto0.json" 'round(j["stats"]["storage_wait_ns"] / 1e9, 3)') s, grew to $(json "$TMP/auto0.json" 'j["stats"]["io_depth_max"]'))"
[ "$(json "$TMP/auto0.json" 'j["checksum"]')" = "$(json "$TMP/auto4.json" 'j["checksum"]')" ] || fail "auto io_depth changed the bytes"
json "$TMP/auto0.json" "j['stats']['io_depth_max'] >= 16" | grep True > /dev/null || fail "auto io_depth did not grow"
json "$TMP/auto4.json" "j['stats']['io_depth_max'] == 4 and j['seconds'] >= 0.95 * 60 / 4 * 0.1" | grep True > /dev/null \
    || fail "fixed io_depth 4 moved, or 100 ms reads overlapped more than 4 at a time"
json "$TMP/auto0.json" "j['stats']['storage_wait_ns'] * 1.5 < $wait4" | grep True > /dev/null \
    || fail "auto io_depth does not wait less than a fixed 4 on 100 ms storage"
"$CLI" bench "$TMP/data" --batch-size 8 --crop 16 --threads 1 --epochs 3 --json --quiet > "$TMP/autofast.json"
# On storage that keeps up auto stays near 4, but whether a read "waited"
# is a matter of timing: on a fresh clone with both cores busy a read of a
# page-cached file waited behind the scheduler and the depth grew to its
# cap (32). So only what holds on any machine is asserted here: it starts
# at 4, never passes the cap, and the bytes are those of a fixed depth.
# (how deep it goes on fast storage is a benchmark's question: bench/storage.sh)
json "$TMP/autofast.json" "4 <= j['stats']['io_depth_max'] <= 32" | grep True > /dev/null \
    || fail "auto io_depth outside 4..32 on fast storage: $(json "$TMP/autofast.json" 'j["stats"]["io_depth_max"]')"
"$CLI" bench "$TMP/data" --batch-size 8 --crop 16 --threads 1 --epochs 3 --io-depth 4 --json --quiet > "$TMP/fixedfast.json"
[ "$(json "$TMP/autofast.json" 'j["checksum"]')" = "$(json "$TMP/fixedfast.json" 'j["checksum"]')" ] ||
    fail "auto io_depth changed the bytes on fast storage"

# bad options
if "$CLI" bench "$TMP/data" --cache none --cache-bytes 10M 2> "$TMP/err"; then fail "cache none + bytes accepted"; fi
grep cache_bytes "$TMP/err" > /dev/null || fail "message: $(cat "$TMP/err")"
if "$CLI" bench "$TMP/data" --cache-bytes 200% 2> "$TMP/err"; then fail "200% accepted"; fi
echo PASS
