#!/usr/bin/env bash
# bench's step that changes mid-run (--step-ms A --step-ms-after B
# --step-change-batch N): the first N batches take A, the rest B, counted
# in --json's "step_change" (and the consumer's time between batches is at
# least the sleeps asked for: a lower bound, true however slow the
# machine); the flags go together; the bytes do not change. Autotune's
# time to settle: with the test hook that changes every setting after
# every batch, its last change is the last batch ("last_change_batch"),
# and null without autotune. Counts only: no assertion on speed.
source "$(dirname "$0")/lib_cli.sh"

"$CLI" gen "$TMP/data" --images 40 --classes 2 --width 64 --height 48 --quiet
common=(--batch-size 4 --crop 32 --epochs 2 --seed 7 --threads 2 --json --quiet)
"$CLI" bench "$TMP/data" "${common[@]}" > "$TMP/ref.json"
[ "$(json "$TMP/ref.json" 'j["step_change"]')" = None ] || fail "step_change without the flags"
[ "$(json "$TMP/ref.json" 'j["autotune"]["last_change_batch"]')" = None ] \
    || fail "last_change_batch without autotune"

"$CLI" bench "$TMP/data" "${common[@]}" --step-ms 0 --step-ms-after 3 --step-change-batch 7 \
    > "$TMP/ch.json" || fail "bench with a step change failed"
[ "$(json "$TMP/ch.json" 'j["batches"]')" = 20 ] || fail "batches"
[ "$(json "$TMP/ch.json" '(j["step_change"]["batch"], j["step_change"]["batches_before"], j["step_change"]["batches_after"])')" = "(7, 7, 13)" ] \
    || fail "step_change counts: $(json "$TMP/ch.json" 'j["step_change"]')"
[ "$(json "$TMP/ch.json" 'j["step_change"]["seconds"] is not None')" = True ] || fail "no change time"
# 13 sleeps of 3 ms happened between batches (the last one's after it)
[ "$(json "$TMP/ch.json" 'j["stats"]["consumer_busy_ns"] >= 12 * 3000000')" = True ] \
    || fail "the consumer did not sleep --step-ms-after: $(json "$TMP/ch.json" 'j["stats"]["consumer_busy_ns"]')"
[ "$(json "$TMP/ch.json" 'j["checksum"]')" = "$(json "$TMP/ref.json" 'j["checksum"]')" ] \
    || fail "the step change changed the bytes"
# a change past the run's end: every batch at --step-ms
"$CLI" bench "$TMP/data" "${common[@]}" --step-ms-after 1 --step-change-batch 100 > "$TMP/late.json"
[ "$(json "$TMP/late.json" '(j["step_change"]["batches_before"], j["step_change"]["batches_after"], j["step_change"]["seconds"])')" = "(20, 0, None)" ] \
    || fail "late change: $(json "$TMP/late.json" 'j["step_change"]')"
"$CLI" bench "$TMP/data" --batch-size 4 --step-ms 1 --step-ms-after 3 --step-change-batch 7 --quiet \
    > "$TMP/text.out" || fail "text summary"
grep -q "step        1 ms for 7 batches, then 3 ms for 3" "$TMP/text.out" || fail "text: $(cat "$TMP/text.out")"

for bad in "--step-ms-after 3" "--step-change-batch 7" "--step-change-batch 0 --step-ms-after 1"; do
    rc=0
    # shellcheck disable=SC2086
    "$CLI" bench "$TMP/data" --batch-size 4 $bad > /dev/null 2> "$TMP/err" || rc=$?
    [ "$rc" = 2 ] || fail "bench $bad: exit $rc, want 2"
    grep -q "step" "$TMP/err" || fail "bench $bad: $(cat "$TMP/err")"
done

NOSTALL_TEST_TUNE_FLIP=1 "$CLI" bench "$TMP/data" "${common[@]}" --autotune > "$TMP/flip.json"
[ "$(json "$TMP/flip.json" 'j["autotune"]["last_change_batch"] == j["batches"] == j["stats"]["tune_last_change_batch"]')" = True ] \
    || fail "flip: last_change_batch $(json "$TMP/flip.json" 'j["autotune"]')"
[ "$(json "$TMP/flip.json" 'j["autotune"]["last_change_s"] >= 0')" = True ] || fail "last_change_s"
echo "cli_bench_step_change: ok"
