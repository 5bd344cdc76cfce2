#!/usr/bin/env bash
# autotune's MinIO cache size and echo factor (docs/autotune.md): the
# checksum with --autotune and a cache in play equals the one without
# (caching never changes the bytes), with the cache sized from
# memory_budget or given by cache_bytes, and with the test hook that flips
# the cache's admission cap between 0 and its most after every batch; the
# cache never takes more than memory_budget leaves after the ring (read
# from stats); no cache of autotune's own without a memory_budget or with
# cache=none; a fixed echo_factor is never tuned (same bytes, tuned_echo_max
# 0) and with echo=adaptive the cap stays within 1..echo_max; the analyzer's
# report names the cache's cap of its cold run. Counts only, no timing.
source "$(dirname "$0")/lib_cli.sh"

"$CLI" gen "$TMP/data" --images 40 --classes 2 --width 64 --height 48 --quiet
common=(--batch-size 4 --crop 32 --epochs 3 --seed 7 --json --quiet --threads 2
    --storage-latency-ms 1)
"$CLI" bench "$TMP/data" "${common[@]}" --cache none > "$TMP/ref.json"
ref=$(json "$TMP/ref.json" 'j["checksum"]')
[ "$(json "$TMP/ref.json" 'j["stats"]["cache_budget_bytes"]')" = 0 ] || fail "cache=none has a cache budget"

# a cache without autotune: the same bytes, its budget and cap are cache_bytes
"$CLI" bench "$TMP/data" "${common[@]}" --cache-bytes 4M > "$TMP/c.json"
[ "$(json "$TMP/c.json" 'j["checksum"]')" = "$ref" ] || fail "cache_bytes=4M: checksum differs"
[ "$(json "$TMP/c.json" '(j["stats"]["cache_budget_bytes"], j["stats"]["tuned_cache_bytes"])')" = "(4194304, 4194304)" ] \
    || fail "cache_bytes=4M: budget/cap $(json "$TMP/c.json" '(j["stats"]["cache_budget_bytes"], j["stats"]["tuned_cache_bytes"])')"
[ "$(json "$TMP/c.json" 'j["stats"]["cache_hits"] > 0')" = True ] || fail "cache_bytes=4M: no hits in 3 epochs"

# autotune with memory_budget: the cache gets what the ring leaves; the
# ring, the cache's budget, its cap and what it holds all within the budget
mb=$((64 * 1024 * 1024))
for flip in 0 1; do
    if [ "$flip" = 1 ]; then export NOSTALL_TEST_TUNE_FLIP=1; else unset NOSTALL_TEST_TUNE_FLIP; fi
    out="$TMP/auto$flip.json"
    "$CLI" bench "$TMP/data" "${common[@]}" --autotune --memory-budget 64M --step-ms 1 > "$out" \
        || fail "bench --autotune --memory-budget 64M failed (flip $flip)"
    [ "$(json "$out" 'j["checksum"]')" = "$ref" ] || fail "autotune cache (flip $flip): checksum differs"
    check=$(json "$out" "(lambda s: (s['cache_budget_bytes'] > 0, s['ring_bytes_max'] + s['cache_budget_bytes'] <= $mb, s['tuned_cache_bytes'] <= s['cache_budget_bytes'], s['cache_bytes'] <= s['cache_budget_bytes']))(j['stats'])")
    [ "$check" = "(True, True, True, True)" ] \
        || fail "autotune cache (flip $flip): budget/ring/cap/held $check: $(json "$out" 'j["autotune"]')"
    [ "$(json "$out" 'j["autotune"]["cache_budget"] == j["stats"]["cache_budget_bytes"]')" = True ] \
        || fail "bench --json autotune.cache_budget"
done
unset NOSTALL_TEST_TUNE_FLIP
[ "$(json "$TMP/auto1.json" 'j["autotune"]["reason"]')" = test-flip ] || fail "flip: reason"
grep -q 'cache [0-9.]* of [0-9.]* MB' <<< "$(json "$TMP/auto0.json" 'j["autotune"]["why"]')" \
    || fail "why does not name the cache: $(json "$TMP/auto0.json" 'j["autotune"]["why"]')"

# cache_bytes with autotune: its budget is cache_bytes, the cap within it
"$CLI" bench "$TMP/data" "${common[@]}" --autotune --cache-bytes 4M --step-ms 1 > "$TMP/ac.json"
[ "$(json "$TMP/ac.json" 'j["checksum"]')" = "$ref" ] || fail "autotune cache_bytes=4M: checksum differs"
[ "$(json "$TMP/ac.json" '(j["stats"]["cache_budget_bytes"], j["stats"]["tuned_cache_bytes"] <= 4194304)')" = "(4194304, True)" ] \
    || fail "autotune cache_bytes=4M: budget/cap"
# a budget the ring nearly fills: the cache gets the rest, never more
ring=$(json "$TMP/auto0.json" 'j["stats"]["ring_bytes_max"]')
small=$((ring + ring / 2))
"$CLI" bench "$TMP/data" "${common[@]}" --autotune --memory-budget "$small" --step-ms 1 > "$TMP/sm.json"
[ "$(json "$TMP/sm.json" 'j["checksum"]')" = "$ref" ] || fail "small memory_budget: checksum differs"
[ "$(json "$TMP/sm.json" "j['stats']['ring_bytes_max'] + j['stats']['cache_budget_bytes'] <= $small")" = True ] \
    || fail "small memory_budget: ring + cache over it"
# no memory_budget, or cache=none: autotune makes no cache of its own
"$CLI" bench "$TMP/data" "${common[@]}" --autotune --step-ms 1 > "$TMP/nomb.json"
[ "$(json "$TMP/nomb.json" 'j["stats"]["cache_budget_bytes"]')" = 0 ] || fail "a cache without memory_budget"
"$CLI" bench "$TMP/data" "${common[@]}" --autotune --memory-budget 64M --cache none > "$TMP/none.json"
[ "$(json "$TMP/none.json" 'j["stats"]["cache_budget_bytes"]')" = 0 ] || fail "a cache with cache=none"
# the analyzer's report names the cache autotune capped in its cold run
"$CLI" analyze "$TMP/data" --batch-size 4 --crop 32 --threads 2 --step-ms 1 --max-batches 6 \
    --autotune --memory-budget 64M > "$TMP/an.out" 2> /dev/null || fail "analyze --autotune failed"
grep -q "^  autotune in the cold run: .*, MinIO cache capped at [0-9.]* MB" "$TMP/an.out" \
    || fail "analyze report: $(grep autotune "$TMP/an.out")"
"$CLI" analyze "$TMP/data" --batch-size 4 --crop 32 --threads 2 --step-ms 1 --max-batches 6 \
    --autotune --memory-budget 64M --json > "$TMP/an.json" 2> /dev/null || fail "analyze --json failed"
[ "$(json "$TMP/an.json" '0 < j["measurements"]["cold_tuned_cache"] <= 64 * 1024 * 1024')" = True ] \
    || fail "analyze measurements: cold_tuned_cache"
echo "cache: checksums equal, within memory_budget"

# a fixed echo factor is part of the bytes: never tuned
echo_common=(--batch-size 4 --crop 32 --epochs 2 --seed 7 --json --quiet --threads 2 --echo-factor 2)
"$CLI" bench "$TMP/data" "${echo_common[@]}" > "$TMP/e.json"
NOSTALL_TEST_TUNE_FLIP=1 "$CLI" bench "$TMP/data" "${echo_common[@]}" --autotune > "$TMP/ea.json"
[ "$(json "$TMP/ea.json" 'j["checksum"]')" = "$(json "$TMP/e.json" 'j["checksum"]')" ] \
    || fail "echo_factor=2 with autotune: checksum differs"
[ "$(json "$TMP/ea.json" 'j["stats"]["tuned_echo_max"]')" = 0 ] || fail "a fixed echo factor was tuned"
# adaptive: the cap within 1..echo_max, with the flip hook and without
for flip in 0 1; do
    if [ "$flip" = 1 ]; then export NOSTALL_TEST_TUNE_FLIP=1; else unset NOSTALL_TEST_TUNE_FLIP; fi
    "$CLI" bench "$TMP/data" --batch-size 4 --crop 32 --epochs 2 --seed 7 --json --quiet \
        --threads 2 --echo adaptive --echo-max 3 --autotune --step-ms 1 > "$TMP/ad$flip.json" \
        || fail "echo=adaptive --autotune failed (flip $flip)"
    [ "$(json "$TMP/ad$flip.json" '1 <= j["stats"]["tuned_echo_max"] <= 3 and j["autotune"]["echo_max"] == j["stats"]["tuned_echo_max"]')" = True ] \
        || fail "adaptive (flip $flip): tuned_echo_max $(json "$TMP/ad$flip.json" 'j["stats"]["tuned_echo_max"]')"
done
unset NOSTALL_TEST_TUNE_FLIP
"$CLI" bench "$TMP/data" --batch-size 4 --crop 32 --epochs 1 --seed 7 --json --quiet \
    --threads 2 --echo adaptive --echo-max 3 > "$TMP/ad.json"
[ "$(json "$TMP/ad.json" 'j["stats"]["tuned_echo_max"]')" = 3 ] || fail "adaptive without autotune: tuned_echo_max != echo_max"
echo "cli_autotune_cache: ok"
