#!/usr/bin/env bash
# Bytes unchanged: the checksums of what the loader delivers, over a generated
# and a photo-derived dataset, in train and eval mode, float and uint8 output,
# 1, 2 and 3 threads, every echo point (fixed and fractional factors), a
# coordinated group of 2, cache_transcode and sharding, compared with the
# values recorded in tests/golden/checksums.txt (recorded before the engine
# was restructured: the restructuring must not change a byte). Batch echoing
# has its own lines (its order may change by design; then record them anew).
#   NOSTALL_GOLDEN_RECORD=1 ctest -R cli_golden   # (re)write the file
source "$(dirname "$0")/lib_cli.sh"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
GOLDEN="$ROOT/tests/golden/checksums.txt"
"$CLI" gen "$TMP/gen" --images 30 --classes 3 --width 96 --height 72 --seed 11 --quiet
if $PY -c 'import PIL' 2> /dev/null && [ -f /usr/share/matplotlib/mpl-data/sample_data/grace_hopper.jpg ]; then
    $PY "$ROOT/bench/photo_data.py" "$TMP/photo" --images 24 --classes 3 --width 120 --height 96 \
        --seed 5 > /dev/null || fail "photo_data.py"
    sets="gen photo"
else
    echo "note: python3-pil / python3-matplotlib missing: photo-derived set left out"
    sets="gen"
fi

declare -A got
# sum NAME DATASET ARGS...: one run's checksum (2 epochs, batch 5, crop 24)
sum() {
    local name=$1 data=$2
    shift 2
    "$CLI" bench "$TMP/$data" --json --quiet --epochs 2 --batch-size 5 --crop 24 --seed 3 "$@" \
        > "$TMP/out.json" || fail "$name: bench $*"
    json "$TMP/out.json" 'j["checksum"]'
}
record() { got[$1]=$2; }
for d in $sets; do
    for mode in train eval; do
        for out in float uint8; do
            ref=$(sum "$d-$mode-$out" "$d" --mode "$mode" --output "$out" --threads 1)
            for t in 2 3; do
                c=$(sum "$d-$mode-$out-t$t" "$d" --mode "$mode" --output "$out" --threads "$t")
                [ "$c" = "$ref" ] || fail "$d $mode $out: $t threads gave $c, 1 thread $ref"
            done
            record "$d-$mode-$out" "$ref"
        done
    done
    for point in fetch decode augment; do
        for f in 2 1.5; do
            a=$(sum x "$d" --echo-factor "$f" --echo-point "$point" --threads 1)
            b=$(sum x "$d" --echo-factor "$f" --echo-point "$point" --threads 3)
            [ "$a" = "$b" ] || fail "$d echo $point $f: 1 and 3 threads differ"
            record "$d-echo-$point-$f" "$a"
        done
    done
    for f in 2 1.5; do # batch echoing: repeats drawn through a shuffle buffer
        a=$(sum x "$d" --echo-factor "$f" --echo-point batch --threads 1)
        b=$(sum x "$d" --echo-factor "$f" --echo-point batch --threads 3)
        [ "$a" = "$b" ] || fail "$d echo batch $f: 1 and 3 threads differ"
        record "$d-echo-batch-$f" "$a"
    done
    for r in 0 1; do
        record "$d-shard-$r-of-2" "$(sum x "$d" --rank $r --world-size 2 --threads 2)"
    done
    record "$d-drop-last" "$(sum x "$d" --drop-last 1 --batch-size 7 --threads 2)"
    # the MinIO cache with the restart-marker rewrite: same pixels
    c=$(sum x "$d" --cache-bytes 64M --cache-transcode 1 --epochs 3 --threads 2)
    record "$d-cache-transcode" "$c"
    # a coordinated group of 2: each member gets every batch of a solo run
    "$CLI" bench "$TMP/$d" --json --quiet --epochs 2 --batch-size 5 --crop 24 --seed 3 \
        --threads 1 > "$TMP/solo.json" || fail "$d: solo run"
    coord_group "golden$$-$d" "$TMP/solo.json" "0 0" "$TMP/$d" --epochs 2 --batch-size 5 \
        --crop 24 --seed 3
    for e in 0 1; do
        record "$d-epoch$e" "$(json "$TMP/solo.json" "j['per_epoch'][$e]['checksum']")"
    done
done

if [ "${NOSTALL_GOLDEN_RECORD:-}" = 1 ]; then
    mkdir -p "$(dirname "$GOLDEN")"
    { echo "# tests/cli_golden.sh: checksums of the loader's output (name checksum)"
      for k in "${!got[@]}"; do echo "$k ${got[$k]}"; done | sort; } > "$GOLDEN"
    echo "recorded ${#got[@]} checksums in $GOLDEN"
    exit 0
fi
[ -f "$GOLDEN" ] || fail "no $GOLDEN: record it with NOSTALL_GOLDEN_RECORD=1"
bad=0
for k in "${!got[@]}"; do
    want=$(awk -v k="$k" '$1 == k {print $2}' "$GOLDEN")
    if [ -z "$want" ]; then
        echo "not recorded: $k ${got[$k]}"
        bad=1
    elif [ "$want" != "${got[$k]}" ]; then
        echo "CHANGED: $k: recorded $want, now ${got[$k]}"
        bad=1
    fi
done
[ $bad = 0 ] || fail "delivered bytes differ from tests/golden/checksums.txt"
echo "PASS: ${#got[@]} checksums as recorded"
