#!/usr/bin/env bash
# Image modes end to end (nostall bench): crop, resize (stretch and pad) and
# full, each in several layouts and every output dtype, give the same
# checksum for 1, 2 and 3 threads, and different bytes from one another;
# the MinIO cache and every echo point keep them deterministic; a
# coordinated group of 2 gets a solo run's batches; an image over
# full_max_pixels is a reported skip naming its size and the limit; the
# JSON says what was delivered. (Resume is tested through the library:
# tests/test_image_modes.c, tests/python/test_image_modes.py.)
source "$(dirname "$0")/lib_cli.sh"

"$CLI" gen "$TMP/data" --images 20 --classes 2 --width 72 --height 54 --size-jitter 0.25 \
    --seed 4 --quiet
common=(--batch-size 6 --epochs 2 --seed 5 --json --quiet)
declare -A seen
# sums NAME ARGS...: the checksum with 1, 2 and 3 threads must agree
sums() {
    local name=$1 ref="" c t
    shift
    for t in 1 2 3; do
        "$CLI" bench --max-bad-fraction 1 "$TMP/data" "${common[@]}" --threads $t "$@" > "$TMP/o.json" \
            || fail "$name: bench $*"
        c=$(json "$TMP/o.json" 'j["checksum"]')
        [ -n "$ref" ] || ref=$c
        [ "$c" = "$ref" ] || fail "$name: $t threads gave $c, 1 thread $ref"
    done
    [ "$(json "$TMP/o.json" 'j["items"]')" = 40 ] || fail "$name: not 40 items"
    [ "$(json "$TMP/o.json" 'j["skipped"]')" = "[]" ] || fail "$name: skipped items"
    [ -z "${seen[$ref]:-}" ] || fail "$name gave the bytes of ${seen[$ref]}"
    seen[$ref]=$name
    echo "$name: $ref"
}
# every dtype in each mode, the layouts alternating (uint8 NCHW and float
# NHWC included); train and eval
sums crop-float-nhwc --output float --layout nhwc --crop 20
sums crop-uint8-nchw --output uint8 --layout nchw --crop 20
sums crop-float16-auto --output float16 --crop 20
sums crop-bfloat16-nhwc --output bfloat16 --layout nhwc --out-height 16 --out-width 24
sums crop-eval-float16-nhwc --output float16 --layout nhwc --crop 20 --mode eval
sums resize-float-nchw --image-mode resize --out-height 18 --out-width 26 --output float
sums resize-uint8-nhwc --image-mode resize --out-height 18 --out-width 26 --output uint8
sums resize-pad-float16-nhwc --image-mode resize --fit pad --out-height 24 --out-width 24 \
    --output float16 --layout nhwc
sums resize-pad-bfloat16-nchw --image-mode resize --fit pad --out-height 24 --out-width 24 \
    --output bfloat16 --mode eval
sums full-uint8-auto --image-mode full --output uint8 --full-max-pixels 6000
sums full-float-nhwc --image-mode full --output float --layout nhwc --full-max-pixels 6000
sums full-bfloat16-nchw --image-mode full --output bfloat16 --full-max-pixels 6000
sums full-float16-nhwc-eval --image-mode full --output float16 --layout nhwc --mode eval \
    --full-max-pixels 6000

for m in "resize --fit pad --out-height 24 --out-width 32 --output bfloat16" \
         "full --output float16 --layout nhwc --full-max-pixels 6000"; do
    set -- --image-mode $m
    # the MinIO cache: every epoch the same bytes as without it
    "$CLI" bench --max-bad-fraction 1 "$TMP/data" "${common[@]}" --epochs 3 --threads 2 "$@" > "$TMP/nc.json"
    "$CLI" bench --max-bad-fraction 1 "$TMP/data" "${common[@]}" --epochs 3 --threads 2 --cache-bytes 32M "$@" \
        > "$TMP/c.json"
    $PY - "$TMP/nc.json" "$TMP/c.json" <<'PYEOF' || fail "$m: the cache changed the bytes"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert [e["checksum"] for e in a["per_epoch"]] == [e["checksum"] for e in b["per_epoch"]]
assert b["per_epoch"][2]["cache_hits"] == 20, b["per_epoch"][2]
PYEOF
    # echo at every point: 1 and 3 threads agree, and the points differ
    declare -A pts=()
    for point in fetch decode augment batch; do
        "$CLI" bench --max-bad-fraction 1 "$TMP/data" "${common[@]}" --echo-factor 2 --echo-point $point \
            --threads 1 "$@" > "$TMP/e1.json"
        "$CLI" bench --max-bad-fraction 1 "$TMP/data" "${common[@]}" --echo-factor 2 --echo-point $point \
            --threads 3 "$@" > "$TMP/e3.json"
        a=$(json "$TMP/e1.json" 'j["checksum"]')
        [ "$a" = "$(json "$TMP/e3.json" 'j["checksum"]')" ] || fail "$m: echo $point, 1 and 3 threads differ"
        [ "$(json "$TMP/e1.json" 'j["items"]')" = 80 ] || fail "$m: echo $point: not 80 items"
        pts[$point]=$a
    done
    # resize and full draw only the flip: copies echoed at fetch and decode
    # are made as afresh (same draws per copy as the first use would get
    # with another copy number), augment repeats the first use's bytes
    [ "${pts[fetch]}" = "${pts[decode]}" ] || fail "$m: echo at fetch and decode differ (make != transform(decode))"
    [ "${pts[fetch]}" != "${pts[augment]}" ] || fail "$m: augment-point copies equal re-made ones"
    echo "echo $m: fetch=decode ${pts[fetch]}, augment ${pts[augment]}, batch ${pts[batch]}"
done

# a coordinated group of 2: each member gets every batch of a solo run
set -- --image-mode resize --out-height 20 --out-width 28 --output float16 --layout nhwc --threads 1
"$CLI" bench --max-bad-fraction 1 "$TMP/data" "${common[@]}" "$@" > "$TMP/solo.json"
coord_group "imgmodes$$" "$TMP/solo.json" "0 0" "$TMP/data" "${common[@]}" "$@"

# full mode: images over full_max_pixels are reported skips naming both
"$CLI" bench --max-bad-fraction 1 "$TMP/data" "${common[@]}" --threads 2 --image-mode full --full-max-pixels 3900 \
    > "$TMP/big.json"
$PY - "$TMP/big.json" <<'PYEOF' || fail "full_max_pixels skips: $(cat "$TMP/big.json")"
import json, re, sys
j = json.load(open(sys.argv[1]))
sk = j["skipped"]
assert sk and all(s["status"] == "E_TOO_MANY_PIXELS" for s in sk), sk
for s in sk:
    m = re.search(r"image (\d+)x(\d+) has (\d+) pixels, over full_max_pixels = 3900", s["reason"])
    assert m and int(m[1]) * int(m[2]) == int(m[3]) > 3900 and s["path"] in s["reason"], s
assert j["items"] == 2 * (20 - len(sk)), (j["items"], len(sk))
PYEOF
echo "full_max_pixels: $(json "$TMP/big.json" 'len(j["skipped"])') of 20 images skipped"

# options that do not go together: refused, naming them
if "$CLI" bench --max-bad-fraction 1 "$TMP/data" --fit pad 2> "$TMP/err"; then fail "fit=pad with crops accepted"; fi
grep -q "fit=pad" "$TMP/err" || fail "fit=pad not named: $(cat "$TMP/err")"
if "$CLI" bench --max-bad-fraction 1 "$TMP/data" --image-mode full --out-width 32 2> "$TMP/err"; then
    fail "out_width with image_mode=full accepted"
fi
grep -q "image_mode=full" "$TMP/err" || fail "image_mode=full not named: $(cat "$TMP/err")"
echo "PASS"
