#!/usr/bin/env bash
# The default worker count is the CPU budget of the process, reported as
# "threads" at the top of bench --json and as stats.cpu_budget: under
# `taskset -c 0` it is 1; torchrun's LOCAL_WORLD_SIZE=2 halves the budget of
# the process (at least 1: on a 2-CPU machine, 1); an explicit --threads
# wins but the budget is still reported; the checksum does not move.
source "$(dirname "$0")/lib_cli.sh"

"$CLI" gen "$TMP/data" --images 12 --classes 2 --width 64 --height 48 --quiet
common=(--batch-size 4 --crop 32 --epochs 1 --seed 3 --json --quiet)
# the budget of this test's own process: its affinity mask, which a CPU
# quota or LOCAL_WORLD_SIZE may lower further, never raise
env -u LOCAL_WORLD_SIZE "$CLI" bench "$TMP/data" "${common[@]}" > "$TMP/free.json"
n=$(json "$TMP/free.json" 'j["threads"]')
mask=$(nproc)
[ "$(json "$TMP/free.json" 'j["stats"]["cpu_budget"]')" = "$n" ] || fail "stats.cpu_budget != threads"
[ "$n" -ge 1 ] && [ "$n" -le "$mask" ] || fail "default threads $n outside 1..$mask (nproc)"
echo "default threads: $n (nproc $mask)"

# one CPU of this process's mask (CPU 0 where the mask has it, as `taskset -c 0`)
cpu=$("$PY" -c 'import os; print(min(os.sched_getaffinity(0)))')
env -u LOCAL_WORLD_SIZE taskset -c "$cpu" "$CLI" bench "$TMP/data" "${common[@]}" > "$TMP/one.json"
[ "$(json "$TMP/one.json" 'j["threads"]')" = 1 ] || fail "taskset -c $cpu: threads $(json "$TMP/one.json" 'j["threads"]') != 1"
[ "$(json "$TMP/one.json" 'j["stats"]["threads"]')" = 1 ] || fail "taskset -c $cpu: stats.threads != 1"

LOCAL_WORLD_SIZE=2 "$CLI" bench "$TMP/data" "${common[@]}" > "$TMP/lws.json"
want=$((n / 2 > 1 ? n / 2 : 1))
[ "$(json "$TMP/lws.json" 'j["threads"]')" = "$want" ] \
    || fail "LOCAL_WORLD_SIZE=2: threads $(json "$TMP/lws.json" 'j["threads"]') != $want (budget alone: $n)"
if [ "$(nproc --all)" -eq 2 ] && [ "$mask" -eq 2 ]; then
    [ "$(json "$TMP/lws.json" 'j["threads"]')" = 1 ] || fail "LOCAL_WORLD_SIZE=2 on 2 CPUs: threads != 1"
fi
# not a positive integer: ignored
LOCAL_WORLD_SIZE=x "$CLI" bench "$TMP/data" "${common[@]}" > "$TMP/bad.json"
[ "$(json "$TMP/bad.json" 'j["threads"]')" = "$n" ] || fail "LOCAL_WORLD_SIZE=x changed threads"

# an explicit count wins; the budget is still reported
env -u LOCAL_WORLD_SIZE taskset -c "$cpu" "$CLI" bench "$TMP/data" "${common[@]}" --threads 3 > "$TMP/three.json"
[ "$(json "$TMP/three.json" 'j["threads"]')" = 3 ] || fail "--threads 3 not used"
[ "$(json "$TMP/three.json" 'j["stats"]["cpu_budget"]')" = 1 ] || fail "cpu_budget under taskset -c $cpu != 1"

for f in one lws bad three; do
    [ "$(json "$TMP/$f.json" 'j["checksum"]')" = "$(json "$TMP/free.json" 'j["checksum"]')" ] \
        || fail "$f: the checksum depends on the thread count"
done
echo "cli_threads: ok"
