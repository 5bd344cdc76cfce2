#!/usr/bin/env bash
# The CLI end to end: same seed → identical checksum with 1, 2 and 8 threads
# (train mode, float output and uint8), a different seed → a different one;
# the JSON has the documented fields; SIGTERM ends a run with a report of
# what was delivered; bad usage exits non-zero with a message.
source "$(dirname "$0")/lib_cli.sh"

"$CLI" gen "$TMP/data" --images 48 --classes 3 --width 96 --height 72 --size-jitter 0.25 --quiet
common=(--batch-size 5 --crop 32 --epochs 2 --json --quiet)
for out in float uint8; do
    for t in 1 2 8; do
        "$CLI" bench "$TMP/data" "${common[@]}" --output $out --threads $t --seed 7 > "$TMP/$out-$t.json"
    done
    a=$(json "$TMP/$out-1.json" 'j["checksum"]')
    b=$(json "$TMP/$out-2.json" 'j["checksum"]')
    c=$(json "$TMP/$out-8.json" 'j["checksum"]')
    echo "$out: threads 1 $a, 2 $b, 8 $c"
    [ "$a" = "$b" ] && [ "$a" = "$c" ] || fail "$out checksums differ across thread counts"
done
# the reader and the reads in flight never change a byte
ref=$(json "$TMP/float-1.json" 'j["checksum"]')
for r in "pread 1" "pread 5" "io_uring 2" "io_uring 16" "auto 3"; do
    set -- $r
    "$CLI" bench "$TMP/data" "${common[@]}" --threads 2 --seed 7 --reader $1 --io-depth $2 > "$TMP/rd.json"
    [ "$(json "$TMP/rd.json" 'j["checksum"]')" = "$ref" ] || fail "reader $1 io_depth $2 changed the checksum"
done
"$CLI" bench "$TMP/data" "${common[@]}" --threads 2 --seed 8 > "$TMP/seed8.json"
d=$(json "$TMP/seed8.json" 'j["checksum"]')
[ "$d" != "$(json "$TMP/float-1.json" 'j["checksum"]')" ] || fail "different seed gave the same checksum"
# eval mode is deterministic too and does not depend on the seed's augmentation
"$CLI" bench "$TMP/data" "${common[@]}" --mode eval --shuffle 0 --threads 1 --seed 1 > "$TMP/e1.json"
"$CLI" bench "$TMP/data" "${common[@]}" --mode eval --shuffle 0 --threads 8 --seed 2 > "$TMP/e2.json"
[ "$(json "$TMP/e1.json" 'j["checksum"]')" = "$(json "$TMP/e2.json" 'j["checksum"]')" ] || fail "eval without shuffle depends on seed/threads"

# documented JSON fields
f="$TMP/float-2.json"
[ "$(json "$f" 'j["items"]')" = 96 ] || fail "items != 96"
[ "$(json "$f" 'j["epochs"]')" = 2 ] || fail "epochs != 2"
[ "$(json "$f" 'j["batches"]')" = 20 ] || fail "batches != 20"
[ "$(json "$f" 'len(j["per_epoch"])')" = 2 ] || fail "per_epoch"
[ "$(json "$f" 'j["per_epoch"][1]["items"]')" = 48 ] || fail "per_epoch items"
[ "$(json "$f" 'j["skipped"]')" = "[]" ] || fail "skipped not empty"
json "$f" 'j["seconds"] > 0 and j["items_per_second"] > 0 and j["stall_seconds"] >= 0' | grep -q True || fail "timings"
json "$f" 'len(j["checksum"]) == 16 and int(j["checksum"], 16) != 0' | grep -q True || fail "checksum format"

# simulated step: the consumer is slow (100 ms per batch; two threads
# prepare 8 small items in < 20 ms even under TSan on a loaded machine), so
# the run takes at least the steps and the stall is small
"$CLI" bench "$TMP/data" --batch-size 8 --crop 16 --threads 2 --step-ms 100 --json --quiet > "$TMP/step.json"
json "$TMP/step.json" 'j["batches"] == 6 and j["seconds"] >= 6 * 0.1' | grep -q True \
    || fail "a run of 6 steps of 100 ms took $(json "$TMP/step.json" 'j["seconds"]') s"
json "$TMP/step.json" 'j["stall_seconds"] < 0.5 * j["seconds"]' | grep -q True \
    || fail "stall with a slow step: $(json "$TMP/step.json" 'j["stall_seconds"]') of $(json "$TMP/step.json" 'j["seconds"]') s"

# an interrupt ends the run at the next batch with a report of what was
# delivered: SIGTERM during a step of ten minutes (the first SIGINT of a
# terminal's Ctrl-C likewise), status 128 + 15
for mode in json text; do
    flags=(--batch-size 5 --crop 32 --epochs 2 --quiet --threads 2 --step-ms 600000)
    [ $mode = json ] && flags+=(--json)
    "$CLI" bench "$TMP/data" "${flags[@]}" > "$TMP/int.$mode" &
    p=$!
    wait_until 60 catches_term $p || fail "bench does not catch SIGTERM"
    kill -TERM $p
    rc=0
    wait $p || rc=$?
    [ $rc = 143 ] || fail "$mode: status $rc after SIGTERM, not 143"
done
json "$TMP/int.json" 'j["interrupted"] == "SIGTERM" and j["batches"] <= 1 and j["items"] == 5 * j["batches"] and j["per_epoch"] == []' \
    | grep -q True || fail "interrupted report: $(head -c 400 "$TMP/int.json")"
grep -q "interrupted by SIGTERM" "$TMP/int.text" || fail "the summary does not say it was interrupted: $(cat "$TMP/int.text")"
[ "$(json "$f" 'j["interrupted"]')" = None ] || fail "a run that ended says it was interrupted"

# usage errors: non-zero exit, one line naming the problem
if "$CLI" bench "$TMP/data" --batch-size 0 2> "$TMP/err"; then fail "batch-size 0 accepted"; fi
grep -q "batch_size" "$TMP/err" || fail "message does not name batch_size: $(cat "$TMP/err")"
if "$CLI" bench "$TMP/data" --no-such-flag 2> "$TMP/err"; then fail "unknown flag accepted"; fi
grep -q "no-such-flag" "$TMP/err" || fail "unknown flag not named"
if "$CLI" bench "$TMP/missing" 2> "$TMP/err"; then fail "missing dataset accepted"; fi
grep -q "$TMP/missing" "$TMP/err" || fail "missing path not named"
"$CLI" bench --help > "$TMP/help"
grep -q -- "--batch-size" "$TMP/help" || fail "--help lacks --batch-size"
"$CLI" --help > /dev/null || fail "--help"
echo "PASS"
