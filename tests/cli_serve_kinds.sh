#!/usr/bin/env bash
# Prep servers for every kind of item: classify (images, labels), detect
# (boxes and ragged fields), tokens (windows of a token file) and audio
# (log-mel with SpecAugment masks) -- for each, a trainer with no local
# thread fed by 1, 2 and 4 `nostall serve` processes on loopback gets every
# epoch's checksum of a local run, and every item from a server once (items
# received = items delivered). Waits on the servers' "listening" lines,
# never on time.
source "$(dirname "$0")/lib_cli.sh"

SERVERS=()
serve_kill() { for p in "${SERVERS[@]}"; do kill "$p" 2> /dev/null || true; done; }
trap 'serve_kill; coord_kill; rm -rf "$TMP" $SHM_DIRS' EXIT
printf 'a shared secret\n' > "$TMP/secret"
chmod 600 "$TMP/secret"

"$CLI" gen "$TMP/classify" --images 40 --classes 3 --width 96 --height 72 --size-jitter 0.25 --quiet
"$CLI" gen --task detect "$TMP/detect" --images 24 --classes 5 --objects 5 --width 96 --height 72 \
    --seed 4 --quiet
"$PY" -c 'import numpy as np, sys
np.random.default_rng(3).integers(0, 65536, size=3000, dtype=np.uint16).tofile(sys.argv[1])' \
    "$TMP/tokens.bin"
"$CLI" gen --task audio "$TMP/audio" --clips 16 --classes 4 --seconds 0.5 --formats flac,wav \
    --rates 16000,44100 --quiet

listening() { grep -q '^listening on ' "$1"; }
epochs() { json "$1" '" ".join(e["checksum"] for e in j["per_epoch"])'; }

# kind NAME DATA options...: local run, then 4 servers and runs on 1, 2, 4
kind() {
    local name=$1 data=$2 i k addrs=() pids=()
    shift 2
    local common=(--batch-size 4 --epochs 2 --json --quiet "$@")
    "$CLI" bench "$data" "${common[@]}" --threads 2 > "$TMP/$name-local.json" || fail "$name: local run"
    local ref items
    ref=$(epochs "$TMP/$name-local.json")
    items=$(json "$TMP/$name-local.json" 'j["items"]')
    for i in 1 2 3 4; do
        "$CLI" serve "$data" --threads 1 --secret-file "$TMP/secret" "$@" \
            > "$TMP/$name-s$i.out" 2> "$TMP/$name-s$i.err" &
        pids+=("$!")
        SERVERS+=("$!")
        wait_until 120 listening "$TMP/$name-s$i.out" \
            || fail "$name: server $i never listened: $(cat "$TMP/$name-s$i.err")"
        addrs+=("$(sed -n 's/^listening on //p' "$TMP/$name-s$i.out")")
    done
    for k in 1 2 4; do
        local out=$TMP/$name-r$k.json list
        list=$(IFS=,; echo "${addrs[*]:0:$k}")
        "$CLI" bench "$data" "${common[@]}" --threads 0 --prep-servers "$list" \
            --prep-secret-file "$TMP/secret" > "$out" || fail "$name: $k servers: the run failed"
        [ "$(epochs "$out")" = "$ref" ] || fail "$name, $k servers: checksums $(epochs "$out") != local $ref"
        [ "$(json "$out" 'j["items"]')" = "$items" ] || fail "$name, $k servers: $(json "$out" 'j["items"]') items, not $items"
        [ "$(json "$out" 'j["stats"]["prep_remote_items"]')" = "$items" ] \
            || fail "$name, $k servers: $(json "$out" 'j["stats"]["prep_remote_items"]') items received, not $items"
    done
    for i in "${pids[@]}"; do kill "$i"; wait "$i" 2> /dev/null || true; done
    for i in 1 2 3 4; do # sanitizer builds: a report is a failure
        [ ! -s "$TMP/$name-s$i.err" ] || fail "$name: server $i wrote to stderr: $(head -c 2000 "$TMP/$name-s$i.err")"
    done
    echo "$name: 1, 2, 4 servers: the local checksums ($ref), $items items"
}

kind classify "$TMP/classify" --crop 32 --seed 7
kind detect "$TMP/detect" --task detect --crop 64 --seed 3
kind tokens "$TMP/tokens.bin" --task tokens --context-length 12 --seed 5
kind audio "$TMP/audio" --task audio --clip-seconds 0.5 --freq-masks 2 --time-masks 2 --seed 5
echo "cli_serve_kinds: OK"
