#!/usr/bin/env bash
# Run one test suite for `make test` and keep a record of what it skipped, so
# that a skipped feature test is loud in the summary instead of a line lost in
# ctest's or pytest's output (a build configured before MPI was installed
# once skipped the MPI tests with nobody noticing).
#
#   tools/run-tests.sh SUITE DIR ctest ARGS...      ctest in DIR
#   tools/run-tests.sh SUITE DIR pytest ARGS...     /usr/bin/python3 -m pytest -rs in DIR
#                                                   ($NOSTALL_TEST_PYTHON instead: make test-torch2)
#   tools/run-tests.sh --summary                    every suite's skips, loud
#   tools/run-tests.sh --reset                      forget earlier records
#
# Records live in $NOSTALL_SKIP_DIR (default .test-skips/ at the repository
# root), one file per suite: "SUITE: test: reason" lines. The summary names
# the run $NOSTALL_RUN_NAME (default "make test"). With
# NOSTALL_STRICT_SKIPS=1 the summary fails when anything was skipped.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
skip_dir="${NOSTALL_SKIP_DIR:-$root/.test-skips}"

if [ "${1:-}" = "--reset" ]; then
    rm -rf "$skip_dir"
    exit 0
fi

if [ "${1:-}" = "--summary" ]; then
    shopt -s nullglob
    files=("$skip_dir"/*.txt)
    lines=0
    for f in "${files[@]}"; do lines=$((lines + $(wc -l < "$f"))); done
    if [ "$lines" -eq 0 ]; then
        echo "${NOSTALL_RUN_NAME:-make test}: no test was skipped"
        exit 0
    fi
    echo "################################################################"
    echo "## ${NOSTALL_RUN_NAME:-make test}: $lines test(s) SKIPPED -- these features were NOT tested:"
    cat "${files[@]}" | sed 's/^/##   /'
    echo "################################################################"
    [ "${NOSTALL_STRICT_SKIPS:-0}" = 1 ] && { echo "NOSTALL_STRICT_SKIPS=1: skips fail the run"; exit 1; }
    exit 0
fi

[ $# -ge 3 ] || { echo "usage: $0 SUITE DIR ctest|pytest ARGS... | --summary | --reset" >&2; exit 2; }
suite="$1" dir="$2" kind="$3"
shift 3
mkdir -p "$skip_dir"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
case "$kind" in
ctest)
    (cd "$dir" && ctest "$@") 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    # ctest lists each skipped test as "  NN - name (Skipped)"; a test's own
    # "SKIP: reason" line (tests print one before exit 77) gives the reason
    grep -E '^[[:space:]]*[0-9]+ - .* \(Skipped\)' "$log" | sed -E 's/^[[:space:]]*[0-9]+ - ([^ ]+).*/\1/' |
        while read -r t; do
            reason="$(awk -v t="$t" '
                $0 ~ "^[0-9]+/[0-9]+ Test: " t "$" { on = 1; next }
                on && /^Output:/ { out = 1; next }
                out && /<end of output>/ { exit }
                out && /SKIP/ { print; exit }' "$dir/Testing/Temporary/LastTest.log" 2>/dev/null)"
            echo "$suite: $t${reason:+: $reason}"
        done > "$skip_dir/$suite.txt"
    ;;
pytest)
    (cd "$dir" && "${NOSTALL_TEST_PYTHON:-/usr/bin/python3}" -m pytest -rs "$@") 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    # pytest -rs: "SKIPPED [1] file:line: reason"
    grep -E '^SKIPPED ' "$log" | sed -E "s/^SKIPPED /$suite: /" > "$skip_dir/$suite.txt"
    ;;
*)
    echo "$0: unknown kind $kind" >&2
    exit 2
    ;;
esac
exit "$rc"
