# lib_cli.sh — shared helpers for the CLI tests (sourced, not a test itself).
set -euo pipefail
CLI=${NOSTALL_CLI:?run through ctest (NOSTALL_CLI unset)}
PY=/usr/bin/python3
TMP=${NOSTALL_TEST_TMP:-/tmp/nostall-test}/$(basename "$0" .sh).$$
rm -rf "$TMP"; mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# json FILE EXPR: evaluate a Python expression on the parsed JSON `j`.
json() { "$PY" -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"; }
