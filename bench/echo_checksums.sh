#!/usr/bin/env bash
# echo_checksums.sh — prints the checksum (and the echo counters) of what the
# loader delivers for every echo mode and point, for 1, 2 and 3 threads, plus
# the cli_golden plain runs: run it on two commits and diff the outputs to
# show a refactor left the bytes alone (adaptive echoing depends on timing
# by design: its lines print only that it ran and delivered).
#   bash bench/echo_checksums.sh build/nostall > before.txt
set -euo pipefail
CLI=${1:-build/nostall}
PY=/usr/bin/python3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
"$CLI" gen "$TMP/gen" --images 30 --classes 3 --width 96 --height 72 --seed 11 --quiet
one() { # NAME ARGS...
    local name=$1
    shift
    "$CLI" bench "$TMP/gen" --json --quiet --epochs 2 --batch-size 5 --crop 24 --seed 3 "$@" \
        > "$TMP/out.json"
    $PY - "$TMP/out.json" "$name" << 'PYEOF'
import json, sys
j = json.load(open(sys.argv[1]))
s = j.get("stats", j)
keys = sorted(k for k in s if k.startswith("echo") or k in ("items_delivered", "batches_delivered"))
print(sys.argv[2], j["checksum"], " ".join("%s=%s" % (k, s[k]) for k in keys))
PYEOF
}
for t in 1 2 3; do
    for mode in train eval; do
        for out in float uint8; do one "plain-$mode-$out-t$t" --mode $mode --output $out --threads $t; done
    done
    for point in fetch decode augment batch; do
        for f in 2 1.5 3; do one "echo-$point-$f-t$t" --echo-factor $f --echo-point $point --threads $t; done
    done
    one "echo-items-buffer4-t$t" --echo-factor 2 --echo-point decode --echo-buffer 4 --threads $t
    one "echo-batch-buffer10-t$t" --echo-factor 2.5 --echo-point batch --echo-buffer 10 --threads $t
    one "echo-items-skip-t$t" --echo-factor 2 --echo-point fetch --drop-last 0 --threads $t
    "$CLI" bench "$TMP/gen" --json --quiet --epochs 2 --batch-size 5 --crop 24 --seed 3 \
        --echo adaptive --echo-buffer 10 --threads $t > "$TMP/out.json"
    $PY -c 'import json,sys; j=json.load(open(sys.argv[1])); print(sys.argv[2], "ran", "checksum" in j)' \
        "$TMP/out.json" "echo-adaptive-t$t"
done
