#!/usr/bin/env bash
# The include graph of src/ has no circle: none between rooms (directories)
# and none between modules inside a room, a recipe registry's excepted
# (tools/check-includes.sh says which). Then the checker itself is shown to
# find one: a copy of src/ with an include added from common/ back into
# order/ (order includes common) must fail, naming both rooms. Reads files
# only; no build output is used.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$here/..
bash "$root/tools/check-includes.sh" "$root/src"

tmp=$(mktemp -d "${NOSTALL_TEST_TMP:-/tmp}/check_includes.XXXXXX" 2>/dev/null || mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -r "$root/src" "$tmp/src"
printf '#include "order/sampler.h"\n' >> "$tmp/src/common/rng.h"
if out=$(bash "$root/tools/check-includes.sh" "$tmp/src"); then
    echo "FAIL: a circle common <-> order was not found"; echo "$out"; exit 1
fi
echo "$out" | grep -q 'CIRCLE of rooms: common <-> order' || {
    echo "FAIL: the circle was not named"; echo "$out"; exit 1
}
echo "ok: the planted circle common <-> order is found"
