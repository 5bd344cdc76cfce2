# lib_cli.sh — shared helpers for the CLI tests (sourced, not a test itself).
set -euo pipefail
CLI=${NOSTALL_CLI:?run through ctest (NOSTALL_CLI unset)}
PY=/usr/bin/python3
TMP=${NOSTALL_TEST_TMP:-/tmp/nostall-test}/$(basename "$0" .sh).$$
rm -rf "$TMP"; mkdir -p "$TMP"
SHM_DIRS=""
trap 'rm -rf "$TMP" $SHM_DIRS' EXIT
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
# catches_term PID: the process runs the CLI and has a handler for SIGTERM
# (bench installs its own once the loader runs: before, SIGTERM ends it
# without a report; the shell that forked it, before its exec, has one too).
catches_term() {
    local m
    [ "$(readlink "/proc/$1/exe" 2>/dev/null)" = "$(readlink -f "$CLI")" ] || return 1
    m=$(awk '/^SigCgt:/ {print $2}' "/proc/$1/status" 2>/dev/null) || return 1
    [ -n "$m" ] && (((16#$m >> 14) & 1))
}
