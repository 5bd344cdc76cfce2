#!/usr/bin/env bash
# The HTTP(S) source end to end: a file list of http:// URLs served by nginx
# on loopback gives exactly the bytes of the same files read locally (any
# io_depth, with the MinIO cache too); a missing URL and a 500 are bad items
# (skipped and reported, or the error under fail); a server that goes away
# mid-epoch (after a known number of responses, not after a time) makes its
# items fail within the timeout — never a hang; a tar shard throttled (503)
# past --http-retries while indexing is a bad shard named with why, the
# others are read.
source "$(dirname "$0")/lib_cli.sh"
source "$(dirname "$0")/lib_nginx.sh"
command -v nginx > /dev/null 2>&1 || [ -x /usr/sbin/nginx ] || { echo "SKIP: nginx not installed"; exit 77; }
export NGINX_OWNER_PID=$$
trap 'nginx_stop "$TMP/ngx" > /dev/null 2>&1 || true; rm -rf "$TMP"' EXIT

"$CLI" gen "$TMP/data" --images 40 --classes 4 --width 120 --height 90 --quiet
mkdir -p "$TMP/ngx/conf.d"
echo 'location = /e500.jpg { return 500; }' > "$TMP/ngx/conf.d/e500.conf"
port=$(nginx_start "$TMP/ngx" "$TMP/data")
url="http://127.0.0.1:$port"

# the same items, as local paths and as URLs
( cd "$TMP/data" && find . -name '*.jpg' | sort ) > "$TMP/rel"
i=0; : > "$TMP/local.txt"; : > "$TMP/http.txt"
while read -r rel; do
    cls=$(dirname "$rel" | tr -dc '0-9'); cls=$((10#${cls:-0}))
    printf '%s\t%d\n' "$TMP/data/${rel#./}" "$cls" >> "$TMP/local.txt"
    printf '%s\t%d\n' "$url/${rel#./}" "$cls" >> "$TMP/http.txt"
done < "$TMP/rel"

common=(--batch-size 6 --crop 32 --epochs 2 --json --quiet --seed 5 --threads 2)
"$CLI" bench --max-bad-fraction 1 "$TMP/local.txt" "${common[@]}" > "$TMP/local.json"
ref=$(json "$TMP/local.json" 'j["checksum"]')
for d in 1 8; do
    "$CLI" bench --max-bad-fraction 1 "$TMP/http.txt" "${common[@]}" --io-depth $d > "$TMP/h$d.json"
    [ "$(json "$TMP/h$d.json" 'j["checksum"]')" = "$ref" ] || fail "http io_depth $d: bytes differ from local files"
    [ "$(json "$TMP/h$d.json" 'j["stats"]["http_transfers"]')" = 80 ] || fail "http io_depth $d: transfers != 80"
done
# with the MinIO cache, each item is fetched from the server once in the whole
# run (which epoch's batch is charged with the read depends on prefetching
# across the epoch boundary)
"$CLI" bench --max-bad-fraction 1 "$TMP/http.txt" "${common[@]}" --cache-bytes 64M > "$TMP/hc.json"
[ "$(json "$TMP/hc.json" 'j["checksum"]')" = "$ref" ] || fail "http + cache: bytes differ"
[ "$(json "$TMP/hc.json" 'j["stats"]["storage_reads"]')" = 40 ] \
    || fail "http + cache: $(json "$TMP/hc.json" '[e["storage_reads"] for e in j["per_epoch"]]') reads per epoch, want 40 in all"

# emulated storage slows HTTP items too: 40 items of ~8 KB at 1 MB/s
"$CLI" bench --max-bad-fraction 1 "$TMP/http.txt" --batch-size 6 --crop 32 --epochs 1 --json --quiet --storage-mbps 1 > "$TMP/slowemu.json"
json "$TMP/slowemu.json" "j['seconds'] >= 0.95 * j['storage_bytes_read'] / 1e6" | grep -q True \
    || fail "storage_mbps does not throttle http items: $(json "$TMP/slowemu.json" 'j["seconds"]') s"

# bad URLs: 404 and 500 (retried, then bad) are skipped and reported
cp "$TMP/http.txt" "$TMP/bad.txt"
printf '%s\t0\n%s\t1\n' "$url/no/such.jpg" "$url/e500.jpg" >> "$TMP/bad.txt"
"$CLI" bench --max-bad-fraction 1 "$TMP/bad.txt" --batch-size 6 --crop 32 --epochs 1 --json --quiet --http-retries 1 > "$TMP/bad.json"
[ "$(json "$TMP/bad.json" 'j["skipped_count"]')" = 2 ] || fail "bad URLs: want 2 skipped"
json "$TMP/bad.json" '" ".join(s["status"] + ":" + s["reason"] for s in j["skipped"])' > "$TMP/reasons"
grep -q "E_NOT_FOUND:.*no/such.jpg" "$TMP/reasons" || fail "404 not reported: $(cat "$TMP/reasons")"
grep -q "E_IO:.*e500.jpg.*500" "$TMP/reasons" || fail "500 not reported: $(cat "$TMP/reasons")"
if "$CLI" bench --max-bad-fraction 1 "$TMP/bad.txt" --batch-size 6 --crop 32 --epochs 1 --quiet --on-bad-item fail \
     --http-retries 0 > /dev/null 2> "$TMP/err"; then fail "fail policy passed a 404"; fi
grep -q "such.jpg\|e500.jpg" "$TMP/err" || fail "fail policy message: $(cat "$TMP/err")"

# the server goes away mid-epoch: items fail (skipped), the run ends, no hang.
# (A paced server, as nginx's limit_rate lets small files through at once:
# transfers are in flight when it exits, right after its 8th whole response.)
nginx_stop "$TMP/ngx"
/usr/bin/python3 "$(dirname "$0")/http_faulty_server.py" --root "$TMP/data" --rate 8k --exit-after 8 "$TMP/port" &
srv=$!
wait_until 60 test -s "$TMP/port" || fail "http_faulty_server.py did not start"
sed "s#127.0.0.1:[0-9]*#127.0.0.1:$(cat "$TMP/port")#" "$TMP/http.txt" > "$TMP/slow.txt"
start=$(date +%s)
timeout 60 "$CLI" bench --max-bad-fraction 1 "$TMP/slow.txt" --batch-size 6 --crop 32 --epochs 1 --json --quiet --threads 1 \
    --io-depth 4 --http-timeout-ms 3000 --http-retries 1 > "$TMP/gone.json" \
    || fail "server gone: bench did not finish cleanly (rc $?)"
wait
took=$(( $(date +%s) - start ))
echo "server gone mid-epoch: finished in ${took}s, $(json "$TMP/gone.json" 'j["items"]') delivered, $(json "$TMP/gone.json" 'j["skipped_count"]') skipped"
# the 8 whole responses are delivered; the 4 in flight at most may be too
json "$TMP/gone.json" '8 <= j["items"] <= 12 and j["items"] + j["skipped_count"] == 40' | grep -q True \
    || fail "server gone: the 8 items served must be delivered, every other one skipped"
grep -q "127.0.0.1" <(json "$TMP/gone.json" 'j["skipped"][0]["reason"]') || fail "reason must name the URL"

# a throttled store while indexing (503 SlowDown on a shard's every request):
# that shard is a bad shard named with the status and attempts, the others
# are read, the run succeeds (--http-retries 1 bounds the retries; the
# backoff is at most 2 waits of 250 and 500 ms per request; shards under
# 16 KiB and read whole (stream), as the faulty server ignores Range)
"$CLI" pack "$TMP/data" "$TMP/sh" --shard-bytes 10K --quiet > /dev/null
mkdir "$TMP/shroot"
cp "$TMP/sh"/shard-00000[012].tar "$TMP/shroot/"
/usr/bin/python3 "$(dirname "$0")/http_faulty_server.py" --root "$TMP/shroot" "$TMP/port2" &
srv2=$!
wait_until 60 test -s "$TMP/port2" || fail "http_faulty_server.py did not start"
p2=$(cat "$TMP/port2")
printf 'http://127.0.0.1:%s/shard-000000.tar\nhttp://127.0.0.1:%s/flakyfile/503/1000/0/shard-000001.tar\nhttp://127.0.0.1:%s/shard-000002.tar\n' \
    "$p2" "$p2" "$p2" > "$TMP/throttled.txt"
XDG_CACHE_HOME="$TMP/xdg" "$CLI" bench "$TMP/throttled.txt" --batch-size 4 --crop 32 --epochs 1 --json --quiet \
    --http-retries 1 --shard-mode stream > "$TMP/thr.json" 2> "$TMP/thr.err" || fail "a throttled shard failed the run: $(cat "$TMP/thr.err")"
kill $srv2 2> /dev/null || true
wait $srv2 2> /dev/null || true
[ "$(json "$TMP/thr.json" 'j["dataset"]["shards_bad"]')" = 1 ] || fail "throttled shard: $(json "$TMP/thr.json" 'j["dataset"]')"
json "$TMP/thr.json" 'j["bad_shards"][0]["path"] + ": " + j["bad_shards"][0]["reason"]' \
    | grep -q "shard-000001.tar: HTTP 503 after 2 attempts" \
    || fail "throttled shard not named with why: $(json "$TMP/thr.json" 'j["bad_shards"]')"
[ "$(json "$TMP/thr.json" 'j["dataset"]["items"]')" = 2 ] && [ "$(json "$TMP/thr.json" 'j["items"]')" = 2 ] \
    || fail "the other shards were not read: $(json "$TMP/thr.json" 'j["items"]') items"
echo PASS
