#!/usr/bin/env bash
# The Python package as a user installs it: a copy of the tree as a fresh
# clone has it, `pip install --no-build-isolation .` into a virtual
# environment (pip builds libnostall with CMake: setup.py), then
# `import nostall` from / and one epoch, the `nostall` command and `python -m
# nostall`; and `pip install --target` from an
# existing build (what `make install` does).
source "$(dirname "$0")/lib_cli.sh"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${NOSTALL_BUILD_DIR:?}
PY=/usr/bin/python3
# Once, on the release build: a sanitizer build's library cannot be loaded
# by a plain interpreter, and the package build is the same for all.
if nm -D "$BUILD/libnostall.so" | grep -E ' __(asan|tsan)_' > /dev/null; then
    echo "SKIP: sanitizer build; the package test runs on the release build"
    exit 77
fi
{ $PY -c 'import setuptools, wheel, venv' && $PY -m pip --version; } > /dev/null 2>&1 ||
    { echo "SKIP: python3-venv, python3-pip, python3-setuptools, python3-wheel needed"; exit 77; }

mkdir -p "$TMP/src"
git -C "$ROOT" ls-files -co --exclude-standard -z | (cd "$ROOT" && tar --null -T - -cf -) |
    tar -xf - -C "$TMP/src" || fail "cannot copy the tree"
rm -rf "$TMP/src/build"
"$CLI" gen "$TMP/data" --images 20 --classes 2 --width 64 --height 48 --quiet

$PY -m venv --system-site-packages "$TMP/venv" || fail "venv"
(cd "$TMP/src" && "$TMP/venv/bin/python" -m pip install --no-build-isolation --no-deps \
    --no-index --quiet .) > "$TMP/pip.log" 2>&1 || { cat "$TMP/pip.log"; fail "pip install ."; }
out=$(cd / && env -u NOSTALL_LIBRARY -u NOSTALL_CLI -u PYTHONPATH "$TMP/venv/bin/python" -c '
import os, sys, nostall
pkg = os.path.dirname(nostall.__file__)
assert pkg.startswith(sys.argv[1]), pkg
assert nostall.LIBRARY_PATH == os.path.join(pkg, "libnostall.so"), nostall.LIBRARY_PATH
assert os.path.exists(os.path.join(pkg, "py.typed"))
assert os.access(os.path.join(pkg, "_bin", "nostall"), os.X_OK)
with nostall.Loader(sys.argv[2], batch_size=4, crop=16, threads=2) as ld:
    print(sum(len(y) for _, y in ld), ld.classes)
' "$TMP/venv" "$TMP/data") || fail "import from / failed"
[ "$out" = "20 ['class_000', 'class_001']" ] || fail "venv package printed: $out"
# the console script and `python -m nostall` run the CLI the package carries
want=$("$CLI" --version)
[ -x "$TMP/venv/bin/nostall" ] || fail "pip install . made no nostall command"
out=$(cd / && env -u NOSTALL_CLI -u PYTHONPATH "$TMP/venv/bin/nostall" --version) || fail "venv/bin/nostall failed"
[ "$out" = "$want" ] || fail "venv/bin/nostall --version printed: $out"
out=$(cd / && env -u NOSTALL_CLI -u PYTHONPATH "$TMP/venv/bin/python" -m nostall --version) || fail "python -m nostall failed"
[ "$out" = "$want" ] || fail "python -m nostall --version printed: $out"

# make install's way: the existing build, into a prefix's site-packages
site="$TMP/prefix/lib/python3/dist-packages"
NOSTALL_PREBUILT="$BUILD" $PY -m pip install --no-build-isolation --no-deps --no-index --quiet \
    --target "$site" "$TMP/src" > "$TMP/pip2.log" 2>&1 || { cat "$TMP/pip2.log"; fail "pip install --target"; }
[ -f "$site/nostall/libnostall.so" ] || fail "no libnostall.so in $site/nostall"
out=$(cd / && env -u NOSTALL_LIBRARY PYTHONPATH="$site" $PY -c '
import nostall, sys
print(nostall.LIBRARY_PATH.startswith(sys.argv[1]))' "$site") || fail "prefix import failed"
[ "$out" = "True" ] || fail "prefix package used another library"
echo PASS
