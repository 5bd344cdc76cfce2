#!/usr/bin/env bash
# Weighted mixing from the CLI (docs/mixing.md): `--mix A:0.7,B:0.3` and the
# repeated form give the same bytes; 1 and 2 threads give the same bytes;
# each mixed epoch holds exactly the weights' shares (JSON "mix_items");
# two ranks' shares add up to one rank's; other weights change the bytes;
# bad specifications and mix with a coordinated group are refused.
source "$(dirname "$0")/lib_cli.sh"

"$CLI" gen "$TMP/a" --images 60 --classes 3 --width 64 --height 48 --quiet
"$CLI" gen "$TMP/b" --images 20 --classes 2 --width 64 --height 48 --quiet
common=(--crop 16 --output uint8 --batch-size 50 --epochs 2 --seed 3 --mix-epoch-items 1000 --json --quiet)

"$CLI" bench --mix "$TMP/a:0.7,$TMP/b:0.3" "${common[@]}" --threads 1 > "$TMP/m1.json"
"$CLI" bench --mix "$TMP/a:0.7" --mix "$TMP/b:0.3" "${common[@]}" --threads 2 > "$TMP/m2.json"
a=$(json "$TMP/m1.json" 'j["checksum"]')
b=$(json "$TMP/m2.json" 'j["checksum"]')
echo "mix 0.7/0.3: threads 1 $a, threads 2 (repeated --mix) $b"
[ "$a" = "$b" ] || fail "the mix's bytes differ across thread counts or forms"
[ "$(json "$TMP/m1.json" 'j["mix_items"]')" = "[1400, 600]" ] || fail "shares $(json "$TMP/m1.json" 'j["mix_items"]') != [1400, 600]"
[ "$(json "$TMP/m1.json" 'j["dataset"]["items"]')" = 80 ] || fail "dataset items != 60 + 20"
[ "$(json "$TMP/m1.json" 'j["dataset"]["items_per_epoch"]')" = 1000 ] || fail "items_per_epoch != mix_epoch_items"

# two ranks: each its slice of every mixed epoch, together the whole
"$CLI" bench --mix "$TMP/a:0.7,$TMP/b:0.3" "${common[@]}" --world-size 2 --rank 0 > "$TMP/r0.json"
"$CLI" bench --mix "$TMP/a:0.7,$TMP/b:0.3" "${common[@]}" --world-size 2 --rank 1 > "$TMP/r1.json"
sum=$("$PY" -c "import json,sys; a=json.load(open(sys.argv[1]))['mix_items']; b=json.load(open(sys.argv[2]))['mix_items']; print([x+y for x,y in zip(a,b)])" "$TMP/r0.json" "$TMP/r1.json")
[ "$sum" = "[1400, 600]" ] || fail "ranks' shares add up to $sum"

# other weights: other shares, other bytes; three sources
"$CLI" bench --mix "$TMP/a:1,$TMP/b:1" "${common[@]}" > "$TMP/m3.json"
[ "$(json "$TMP/m3.json" 'j["mix_items"]')" = "[1000, 1000]" ] || fail "1:1 shares"
[ "$(json "$TMP/m3.json" 'j["checksum"]')" != "$a" ] || fail "other weights, same bytes"
"$CLI" bench --mix "$TMP/a:0.5" --mix "$TMP/b:0.3" --mix "$TMP/a:0.2" "${common[@]}" > "$TMP/m4.json"
[ "$(json "$TMP/m4.json" 'j["mix_items"]')" = "[1000, 600, 400]" ] || fail "0.5/0.3/0.2 shares"

# the text summary names the shares
"$CLI" bench --mix "$TMP/a:0.7,$TMP/b:0.3" --crop 16 --batch-size 50 --quiet > "$TMP/text.txt"
grep -q "source 0: 70.0% source 1: 30.0%" "$TMP/text.txt" || fail "summary: $(cat "$TMP/text.txt")"

# the MinIO cache (keys shifted per source) and fixed echoing keep the bytes
"$CLI" bench --mix "$TMP/a:0.7,$TMP/b:0.3" "${common[@]}" --threads 2 --cache-bytes 64M > "$TMP/c.json"
[ "$(json "$TMP/c.json" 'j["checksum"]')" = "$a" ] || fail "the cache changed a mix's bytes"
for t in 1 2; do
    "$CLI" bench --mix "$TMP/a:0.7,$TMP/b:0.3" "${common[@]}" --threads $t --echo-factor 2 > "$TMP/e$t.json"
done
[ "$(json "$TMP/e1.json" 'j["checksum"]')" = "$(json "$TMP/e2.json" 'j["checksum"]')" ] || fail "echoing a mix depends on threads"
[ "$(json "$TMP/e1.json" 'j["mix_items"]')" = "[2800, 1200]" ] || fail "echoed shares"

# a mix longer than 255 bytes (sources in deep folders): `bench --json`
# writes all of it, and `analyze` measures the mix (its variants of the
# configuration once kept only 255 bytes of each option and lost the mix)
deep="$TMP/$(printf 'd%.0s' $(seq 120))/$(printf 'e%.0s' $(seq 120))"
mkdir -p "$deep"
ln -s "$TMP/a" "$deep/a"
ln -s "$TMP/b" "$deep/b"
long="$deep/a:0.7,$deep/b:0.3"
"$CLI" bench --mix "$long" "${common[@]}" > "$TMP/long.json"
[ "$(json "$TMP/long.json" 'j["config"]["mix"]')" = "$long" ] || fail "bench --json cut the mix (${#long} bytes)"
[ "$(json "$TMP/long.json" 'j["checksum"]')" = "$a" ] || fail "the same mix through longer paths gave other bytes"
"$CLI" analyze mixed --mix "$long" --crop 16 --batch-size 50 --mix-epoch-items 200 --step-ms 1 \
    --json --quiet > "$TMP/analyze.json" 2> "$TMP/analyze.err" || fail "analyze of a ${#long}-byte mix: $(cat "$TMP/analyze.err")"
[ "$(json "$TMP/analyze.json" 'j["measurements"]["dataset_items"]')" = 80 ] || fail "analyze measured $(json "$TMP/analyze.json" 'j["measurements"]["dataset_items"]') items, not the mix's 80"
[ "$(json "$TMP/analyze.json" 'j["measurements"]["cold_items"]')" = 200 ] || fail "analyze's cold run: not one mixed epoch"

# refused, with a reason
if "$CLI" bench --mix "$TMP/a:0.7,$TMP/b" --quiet 2> "$TMP/err1.txt"; then fail "a source without weight was accepted"; fi
grep -q "weight" "$TMP/err1.txt" || fail "no reason: $(cat "$TMP/err1.txt")"
if "$CLI" bench --mix "$TMP/a:1,$TMP/nope:1" --quiet 2> "$TMP/err2.txt"; then fail "a missing source was accepted"; fi
grep -q "nope" "$TMP/err2.txt" || fail "the missing source is not named: $(cat "$TMP/err2.txt")"
if "$CLI" bench --mix "$TMP/a:1,$TMP/b:1" --coordinate mixg --quiet 2> "$TMP/err3.txt"; then fail "mix with coordinate was accepted"; fi
grep -q "coordinate" "$TMP/err3.txt" || fail "no reason: $(cat "$TMP/err3.txt")"
echo "cli_mix: ok"
