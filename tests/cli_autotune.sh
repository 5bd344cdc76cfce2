#!/usr/bin/env bash
# autotune changes how fast, never what: the checksum with --autotune equals
# the one without, for CPU budgets of 0.5, 1 and 2, threads 1 and 2, with
# batches_ahead and io_depth tuned, and with the test hook that changes the
# active workers, batches ahead and reads in flight after every batch
# (NOSTALL_TEST_TUNE_FLIP). Budgets: never more active workers than
# ceil(cpu_budget); memory_budget sizes the ring and a plan over it is
# refused naming it. What it chose is in stats, in bench --json's
# "autotune" object, in the text summary and in the analyzer's report of
# its cold run. No assertion on speed.
source "$(dirname "$0")/lib_cli.sh"

"$CLI" gen "$TMP/data" --images 40 --classes 2 --width 64 --height 48 --quiet
common=(--batch-size 4 --crop 32 --epochs 2 --seed 7 --json --quiet)
"$CLI" bench "$TMP/data" "${common[@]}" --threads 2 > "$TMP/ref.json"
ref=$(json "$TMP/ref.json" 'j["checksum"]')
[ "$(json "$TMP/ref.json" 'j["autotune"]["on"]')" = False ] || fail "autotune on by default"
[ "$(json "$TMP/ref.json" 'j["stats"]["active_workers"]')" = 2 ] || fail "active_workers != threads without autotune"

run=0
for budget in 0.5 1 2; do
    for threads in 1 2; do
        for flip in 0 1; do
            run=$((run + 1))
            out="$TMP/a$run.json"
            if [ "$flip" = 1 ]; then export NOSTALL_TEST_TUNE_FLIP=1; else unset NOSTALL_TEST_TUNE_FLIP; fi
            "$CLI" bench "$TMP/data" "${common[@]}" --autotune --cpu-budget "$budget" \
                --threads "$threads" --step-ms 1 > "$out" || fail "bench --autotune failed ($budget, $threads, $flip)"
            [ "$(json "$out" 'j["checksum"]')" = "$ref" ] \
                || fail "autotune cpu_budget=$budget threads=$threads flip=$flip: checksum differs"
            [ "$(json "$out" 'j["autotune"]["on"]')" = True ] || fail "autotune object says off"
            most=$("$PY" -c "import math; print(min($threads, math.ceil($budget)))")
            act=$(json "$out" 'j["stats"]["active_workers"]')
            [ "$act" -ge 1 ] && [ "$act" -le "$most" ] \
                || fail "cpu_budget=$budget threads=$threads: $act active workers (most $most)"
            [ "$(json "$out" 'j["stats"]["cpu_budget_milli"]')" = "$("$PY" -c "print(round($budget*1000))")" ] \
                || fail "cpu_budget_milli"
            if [ "$flip" = 1 ]; then
                # the hook changed the setting after every batch
                [ "$(json "$out" 'j["autotune"]["decisions"] == j["batches"]')" = True ] \
                    || fail "flip: decisions != batches"
                [ "$(json "$out" 'j["autotune"]["reason"]')" = test-flip ] || fail "flip: reason"
            fi
        done
    done
done
echo "checksums equal over $run autotune runs: $ref"

unset NOSTALL_TEST_TUNE_FLIP
# a fixed io_depth is kept (not tuned); the bytes still do not move
NOSTALL_TEST_TUNE_FLIP=1 "$CLI" bench "$TMP/data" "${common[@]}" --autotune --io-depth 3 \
    --threads 2 > "$TMP/depth.json"
[ "$(json "$TMP/depth.json" 'j["checksum"]')" = "$ref" ] || fail "io_depth=3: checksum differs"
[ "$(json "$TMP/depth.json" 'j["autotune"]["io_depth"]')" = 0 ] || fail "io_depth=3 was tuned"

# memory_budget: the ring sized to the most batches ahead that fit
"$CLI" bench "$TMP/data" "${common[@]}" --autotune --memory-budget 100M > "$TMP/mem.json"
ring=$(json "$TMP/mem.json" 'j["autotune"]["ring_bytes"]')
[ "$ring" -gt 0 ] && [ "$ring" -le $((100 * 1024 * 1024)) ] || fail "ring $ring over memory_budget"
[ "$(json "$TMP/mem.json" 'j["checksum"]')" = "$ref" ] || fail "memory_budget: checksum differs"
small=$("$PY" -c "print($ring // 3)")
"$CLI" bench "$TMP/data" "${common[@]}" --autotune --memory-budget "$small" > "$TMP/small.json"
ring2=$(json "$TMP/small.json" 'j["autotune"]["ring_bytes"]')
[ "$ring2" -le "$small" ] || fail "ring $ring2 over memory_budget $small"
[ "$(json "$TMP/small.json" 'j["checksum"]')" = "$ref" ] || fail "small memory_budget: checksum differs"
# even one batch ahead does not fit: refused, naming the budget
if "$CLI" bench "$TMP/data" "${common[@]}" --autotune --memory-budget 1K > "$TMP/no.json" 2> "$TMP/no.err"; then
    fail "memory_budget=1K accepted"
fi
grep -q "memory_budget" "$TMP/no.err" || fail "refusal does not name memory_budget: $(cat "$TMP/no.err")"
# without autotune the budget is checked too
if "$CLI" bench "$TMP/data" "${common[@]}" --memory-budget 1K > /dev/null 2> "$TMP/no2.err"; then
    fail "memory_budget=1K accepted without autotune"
fi
grep -q "memory_budget" "$TMP/no2.err" || fail "refusal without autotune does not name memory_budget"

# step-bound: the summary says what it chose and why (a sentence; which
# one depends on timing, so only its presence is checked)
"$CLI" bench "$TMP/data" --batch-size 4 --crop 32 --epochs 1 --seed 7 --quiet --autotune \
    --step-ms 1 > "$TMP/text.out"
grep -q "^  autotune    " "$TMP/text.out" || fail "no autotune line in the summary"
# the analyzer's report says what autotune chose in its cold run (the
# configuration's run), and its measurements hold it; nothing without it
"$CLI" analyze "$TMP/data" --batch-size 4 --crop 32 --threads 2 --step-ms 1 --max-batches 6 \
    --autotune --cpu-budget 1 > "$TMP/an.out" 2> /dev/null || fail "analyze --autotune failed"
grep -q "^  autotune in the cold run: 1 of 2 workers active" "$TMP/an.out" \
    || fail "analyze report: $(grep autotune "$TMP/an.out")"
"$CLI" analyze "$TMP/data" --batch-size 4 --crop 32 --threads 2 --step-ms 1 --max-batches 6 \
    --autotune --json > "$TMP/an.json" 2> /dev/null || fail "analyze --autotune --json failed"
[ "$(json "$TMP/an.json" '(j["measurements"]["cold_autotune"], 1 <= j["measurements"]["cold_tuned_workers"] <= 2)')" = "(1, True)" ] \
    || fail "analyze measurements: cold_autotune"
"$CLI" analyze "$TMP/data" --batch-size 4 --crop 32 --threads 2 --step-ms 1 --max-batches 6 \
    > "$TMP/an0.out" 2> /dev/null || fail "analyze failed"
if grep -q "autotune in the" "$TMP/an0.out"; then fail "analyze mentions autotune without it"; fi
echo "cli_autotune: ok"
