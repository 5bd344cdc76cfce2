# lib_cli.sh — shared helpers for the CLI tests (sourced, not a test itself).
set -euo pipefail
CLI=${NOSTALL_CLI:?run through ctest (NOSTALL_CLI unset)}
PY=/usr/bin/python3
TMP=${NOSTALL_TEST_TMP:-/tmp/nostall-test}/$(basename "$0" .sh).$$
rm -rf "$TMP"; mkdir -p "$TMP"
SHM_DIRS=""
COORD_PIDS=()
trap 'coord_kill; rm -rf "$TMP" $SHM_DIRS' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# in_memory DIR VAR: sets VAR to a copy of DIR on tmpfs (/dev/shm; sparse
# files stay sparse), removed at exit, or to DIR where there is no tmpfs.
# Storage that cannot be dropped from memory: an analyzer's cold run reads
# it as fast as its cached run, so a prep-bound verdict does not hang on
# how busy the machine's disk is.
in_memory() {
    local d
    printf -v "$2" '%s' "$1"
    d=$(mktemp -d /dev/shm/nostall-test.XXXXXX 2> /dev/null) || return 0
    SHM_DIRS="$SHM_DIRS $d"
    cp -a --sparse=always "$1/." "$d/" && printf -v "$2" '%s' "$d"
}
# json FILE EXPR: evaluate a Python expression on the parsed JSON `j`.
json() { "$PY" -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"; }
# measured_ok FILE: the measured figures of an analyze --json output are
# consistent whatever the machine's load: each stall a fraction of the
# epoch (0..1), the two adding up to the whole, the verdict the one they give.
# The measured verdict itself comes from wall times: the fetch stall is the
# cold run's wait minus the cached run's, so a cold run that a busy machine
# (or a sanitizer) slowed by more than the prep stall reads as fetch-bound
# even from tmpfs (cli_bytes under TSan: cached 2.6 s, cold 5.6 s). Tests
# assert verdicts on the model instead (predicted_prep).
measured_ok() {
    json "$1" '(lambda d: 0 <= d["prep_stall_fraction"] <= 1 and 0 <= d["fetch_stall_fraction"] <= 1 and abs(d["prep_stall_fraction"] + d["fetch_stall_fraction"] - d["stall_fraction"]) < 1e-6 and d["bound"] == ("compute" if d["stall_fraction"] < 0.05 else "fetch" if d["fetch_stall_s"] > d["prep_stall_s"] else "prep"))(j["measured"])' \
        | grep -q True || fail "$1: measured figures inconsistent: $(json "$1" 'j["measured"]')"
}
# predicted_prep FILE WHAT: an analyze --json output run with
# `--predict step_ms=1` first predicts a prep-bound job (its prep stall more
# than half the epoch): the model works from CPU time per item, which load
# changes little, at the step asked for (a measured 1 ms sleep can be far
# longer on a busy machine); the measured figures are consistent.
predicted_prep() {
    json "$1" 'j["predictions"][0]["config"]["step_ms"] == 1 and j["predictions"][0]["prediction"]["bound"] == "prep" and j["predictions"][0]["prediction"]["prep_stall_fraction"] > 0.5' \
        | grep -q True || fail "thread-starved $2 job not predicted prep-bound at a 1 ms step: $(json "$1" 'j["predictions"][0]'); measured $(json "$1" 'j["measured"]')"
    measured_ok "$1"
}
# wait_until SECONDS CMD...: run CMD every 20 ms until it succeeds (return 0)
# or SECONDS have passed (return 1). Tests synchronise on events this way,
# with a deadline far beyond any machine's delay, never on a sleep that
# merely hopes the event has happened by then.
wait_until() {
    local end=$((SECONDS + $1))
    shift
    until "$@"; do
        [ "$SECONDS" -lt "$end" ] || return 1
        sleep 0.02
    done
}

# Coordinated groups whose members overlap on any machine, however late it
# starts them (nothing here waits for a time to pass).
#
# in_group PID GROUP: the job PID has joined GROUP and runs its workers: it
# maps the group's segment (found by inode: a segment is created under a
# temporary name) and, as the loader joins before it starts any worker
# thread, runs main + 2 workers (jobs checked this way run --threads 2; a
# sanitizer may add a thread of its own, never two).
in_group() {
    local ino n
    ino=$(stat -c %i "/dev/shm/nostall-$(id -u)-$2" 2>/dev/null) || return 1
    awk -v i="$ino" '$5 == i && $6 ~ /^\/dev\/shm\// {f = 1} END {exit !f}' "/proc/$1/maps" 2>/dev/null || return 1
    n=$(awk '/^Threads:/ {print $2}' "/proc/$1/status" 2>/dev/null) || return 1
    [ "${n:-0}" -ge 3 ]
}
# catches_term PID: the process runs the CLI and has a handler for SIGTERM
# (bench installs its own once the loader runs: before, SIGTERM ends it
# without a report; the shell that forked it, before its exec, has one too).
catches_term() {
    local m
    [ "$(readlink "/proc/$1/exe" 2>/dev/null)" = "$(readlink -f "$CLI")" ] || return 1
    m=$(awk '/^SigCgt:/ {print $2}' "/proc/$1/status" 2>/dev/null) || return 1
    [ -n "$m" ] && (((16#$m >> 14) & 1))
}
# coord_hold GROUP BENCH_ARGS...: start the group with a holder, a job that
# takes batch 0 and trains on it for ten minutes (its pid in HOLD). No batch
# is freed while it is a member, so every job that joins meanwhile joins at
# batch 0 and needs every batch, and none gets more than coordinate_lead
# batches ahead of it. coord_release GROUP stops it with SIGTERM: it leaves
# the group as a job does (status 143), its report in $TMP/hold-GROUP.json;
# what it prepared counts in the group's coord_group_items_produced.
coord_hold() {
    local g=$1
    shift
    "$CLI" bench "$@" --json --quiet --threads 2 --step-ms 600000 --coordinate "$g" > "$TMP/hold-$g.json" &
    HOLD=$!
    COORD_PIDS+=($HOLD)
    wait_until 60 in_group $HOLD "$g" || fail "the holder did not join group $g"
    wait_until 60 catches_term $HOLD || fail "the holder of group $g does not catch SIGTERM"
}
coord_release() {
    local rc=0
    kill -TERM $HOLD 2>/dev/null || true
    wait $HOLD || rc=$?
    [ $rc = 143 ] || fail "the holder of group $1 ended with status $rc, not 143 (stopped by SIGTERM)"
    json "$TMP/hold-$1.json" 'j["interrupted"]' | grep -qx SIGTERM || fail "the holder of group $1 does not report SIGTERM"
}
# coord_kill: for EXIT traps (kill -9 of what coord_hold and coord_group started).
coord_kill() {
    local p
    for p in "${COORD_PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
}
# coord_group GROUP SOLO "STEP_MS..." BENCH_ARGS...: a coordinated group of one
# job per step (its --step-ms: a slow and a fast member exercise
# coordinate_lead) with BENCH_ARGS, held until all have joined: every member
# delivers every epoch of SOLO (the --json report of the same job alone) with
# its bytes, the group prepares each item once (as many as SOLO delivered),
# and no segment is left.
coord_group() {
    local g=$1 solo=$2 steps=$3 s p k=0 pids=()
    shift 3
    coord_hold "$g" "$@"
    for s in $steps; do
        k=$((k + 1))
        "$CLI" bench "$@" --json --quiet --threads 2 --step-ms "$s" --coordinate "$g" > "$TMP/$g.m$k.json" &
        pids+=($!)
        COORD_PIDS+=($!)
    done
    for p in "${pids[@]}"; do wait_until 60 in_group $p "$g" || fail "a member did not join group $g"; done
    coord_release "$g"
    k=0
    for p in "${pids[@]}"; do
        k=$((k + 1))
        wait $p || fail "member $k of group $g failed"
    done
    "$PY" - "$g" "$solo" "$TMP/$g".m*.json <<'PYEOF' || fail "group $g: see above"
import json, sys
g, solo, *members = sys.argv[1], *(json.load(open(p)) for p in sys.argv[2:])
ref = [(e["epoch"], e["checksum"]) for e in solo["per_epoch"]]
for k, m in enumerate(members, 1):
    got = [(e["epoch"], e["checksum"]) for e in m["per_epoch"]]
    assert got == ref, f"member {k} delivered epochs {got}; the job alone {ref}"
# the last member's view holds everyone's, the holder's included
group = max(m["stats"]["coord_group_items_produced"] for m in members)
own = [m["stats"]["coord_items_produced"] for m in members]
assert group == solo["items"], f"the group prepared {group} items (members {own}, the rest by the holder); the job alone delivered {solo['items']}: each once"
print(f"group {g}: {len(members)} members, every epoch's bytes; {group} items prepared once (members {own}, the rest by the holder)")
PYEOF
    [ "$(ls /dev/shm 2>/dev/null | grep -c -- "-$g\$" || true)" = 0 ] || fail "group $g: segment left after every member exited"
}
