#!/usr/bin/env bash
# The build has every feature whose dependency the machine has. `make demo`
# configured build/ before `make test` installed libopenmpi-dev, and FindMPI
# cached what it had not found: the reconfigured build stayed without MPI
# (no --partitioned-cache, MPI tests skipped) and nobody noticed.
#  1. this build's CLI has --partitioned-cache wherever MPI is installed;
#  2. a scratch tree configured while MPI "is missing" (a poisoned cache, as
#     a configure before the install leaves it) finds MPI on the next
#     configure (cmake/mpi.cmake forgets FindMPI's cache while MPI is missing).
source "$(dirname "$0")/lib_cli.sh"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if ! command -v mpicc > /dev/null 2>&1; then
    echo "SKIP: MPI (libopenmpi-dev) is not installed: nothing to configure with"
    exit 77
fi

# 1
# (into a file: grep -q leaves the pipe early, and pipefail would read the
# CLI's SIGPIPE as a failure)
"$CLI" bench --help > "$TMP/help.txt" 2>&1 || true
grep -q -- '--partitioned-cache' "$TMP/help.txt" ||
    fail "MPI is installed but this build's CLI has no --partitioned-cache (configured before MPI was installed?)"

# 2
cmake -S "$ROOT" -B "$TMP/b" -DMPI_C_COMPILER=/bin/false -DMPI_C_LIB_NAMES=nostall_no_such_lib \
    > "$TMP/first.log" 2>&1 || fail "first configure failed: $(tail -5 "$TMP/first.log")"
grep -q "MPI not found" "$TMP/first.log" || fail "the poisoned configure found MPI: the test proves nothing"
cmake -S "$ROOT" -B "$TMP/b" > "$TMP/second.log" 2>&1 || fail "second configure failed: $(tail -5 "$TMP/second.log")"
if grep -q "MPI not found" "$TMP/second.log"; then
    fail "a reconfigure after MPI appeared still has no MPI (FindMPI's cache kept the miss)"
fi
grep -q '^NOSTALL_MPI_MISSING:INTERNAL=OFF' "$TMP/b/CMakeCache.txt" || fail "cache says MPI is missing"
echo PASS
