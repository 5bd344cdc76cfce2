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
