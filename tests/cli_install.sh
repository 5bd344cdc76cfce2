#!/usr/bin/env bash
# `cmake --install` into a temporary prefix, then build the README's example
# (examples/loader_example.c) against it with pkg-config and run it.
source "$(dirname "$0")/lib_cli.sh"
BUILD=${NOSTALL_BUILD_DIR:?}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
command -v pkg-config > /dev/null || { echo "SKIP: pkg-config missing"; exit 77; }
cmake --install "$BUILD" --prefix "$TMP/prefix" > /dev/null
export PKG_CONFIG_PATH="$TMP/prefix/lib/pkgconfig"
pkg-config --exists nostall || fail "nostall.pc not found"
# Installing is checked on the release build (make test runs it too); a
# sanitizer build's shared library cannot be loaded by a plain program.
san=""
if nm -D "$TMP/prefix/lib/libnostall.so" | grep -E ' __(asan|tsan)_' > /dev/null; then
    echo "SKIP: sanitizer build; the install test runs on the release build"
    exit 77
fi
cc -std=c11 -Wall -Wextra -Werror $san "$ROOT/examples/loader_example.c" \
   $(pkg-config --cflags --libs nostall) -Wl,-rpath,"$TMP/prefix/lib" -o "$TMP/example"
"$CLI" gen "$TMP/data" --images 12 --classes 2 --width 64 --height 48 --quiet
out=$("$TMP/example" "$TMP/data")
[ "$out" = "24 items in 2 epochs" ] || fail "example printed: $out"
[ -x "$TMP/prefix/bin/nostall" ] || fail "CLI not installed"
# only nostall_* symbols leave the shared library
# (sanitizer builds add their runtime's symbols: check release builds only)
if [ -z "$san" ] && nm -D --defined-only "$TMP/prefix/lib/libnostall.so" | awk '{print $3}' | grep -v '^nostall_' | grep -q .; then
    fail "non-nostall symbols exported: $(nm -D --defined-only "$TMP/prefix/lib/libnostall.so" | awk '{print $3}' | grep -v '^nostall_' | head)"
fi
echo PASS
