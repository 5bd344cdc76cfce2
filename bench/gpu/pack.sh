#!/usr/bin/env bash
# bench/gpu/pack.sh — runs HERE (Debian 12), before a GPU machine is borrowed:
# builds a release nostall and gathers what must travel with the working
# tree to the GPU machine (another Linux distribution, no package
# registries) into one git-ignored folder, bench/gpu/kit/:
#
#   kit/bin/nostall         the CLI
#   kit/bin/test_gpu_device decode_device=gpu's device check (run.sh step
#                           gpudecode; with CUDA in the build: nvJPEG and
#                           the kernels against the CPU path; CUDA 13's
#                           runtime is linked in, so the GPU's driver must
#                           be R580 or newer, else it says so and skips)
#   kit/lib/libnostall.so   the library the Python binding loads
#   kit/lib/*.so.*          every shared library ldd lists for either that
#                           is not the C runtime (glibc, ld-linux, libm,
#                           libpthread, libdl, librt, libgcc_s), by soname
#   kit/MANIFEST            what was packed: commit, build, each library,
#                           (size, the newest glibc it needs), the newest
#                           GLIBC_ symbol version the kit needs
#
# python/ is not copied: the working tree travels, and run.sh puts its
# python/ on PYTHONPATH. The kit must stay under 64 MiB (the device tool's
# limit for what travels); its size is printed and the script fails above
# it. Then carry it: the run tool's carry list is ["bench/gpu/kit"].
#
# Usage: bash bench/gpu/pack.sh [--build-dir DIR] [--no-build] [--kit DIR]
#   --build-dir DIR  the build folder (default build-gpu: a release build
#                    without MPI)
#   --no-build       pack DIR as it is (it must hold nostall and libnostall.so)
#   --kit DIR        write the kit there instead (tests/cli_gpu_kit.sh)
# NOSTALL_KIT_LIMIT_BYTES lowers the size limit (for the test of the check).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$ROOT/build-gpu
KIT=$ROOT/bench/gpu/kit
DO_BUILD=1
while [ $# -gt 0 ]; do
    case "$1" in
        --build-dir) BUILD=$(realpath -m "$2"); shift 2 ;;
        --no-build) DO_BUILD=0; shift ;;
        --kit) KIT=$(realpath -m "$2"); shift 2 ;;
        -h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "pack.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
LIMIT=${NOSTALL_KIT_LIMIT_BYTES:-$((64 << 20))}
die() { echo "pack.sh: $*" >&2; exit 1; }

if [ $DO_BUILD = 1 ]; then
    # Without MPI (one GPU needs no partitioned cache): the CLI would
    # otherwise load Open MPI's libraries, and Debian's libevent needs glibc
    # 2.36, newer than some distributions a GPU machine runs.
    cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DNOSTALL_WERROR=ON \
        -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON > /dev/null ||
        die "cmake configure of $BUILD failed"
    # test_gpu_device: decode_device=gpu's device check (run.sh step
    # gpudecode); built with or without CUDA (without, it only says so)
    cmake --build "$BUILD" -j"${JOBS:-2}" --target nostall nostall_cli test_gpu_device > /dev/null ||
        die "build in $BUILD failed"
fi
for f in "$BUILD/nostall" "$BUILD/libnostall.so"; do
    [ -f "$f" ] || die "$f: missing (build first, or drop --no-build)"
done
if nm -D "$BUILD/libnostall.so" | grep -qE ' __(asan|tsan)_'; then
    die "$BUILD/libnostall.so: a sanitizer build; pack a release build"
fi

rm -rf "$KIT"
mkdir -p "$KIT/bin" "$KIT/lib"
cp "$BUILD/nostall" "$KIT/bin/nostall"
cp "$BUILD/libnostall.so" "$KIT/lib/libnostall.so"
strip --strip-debug "$KIT/bin/nostall" "$KIT/lib/libnostall.so"
if [ -f "$BUILD/test_gpu_device" ]; then
    cp "$BUILD/test_gpu_device" "$KIT/bin/test_gpu_device"
    strip --strip-debug "$KIT/bin/test_gpu_device"
fi

# The C runtime the machine there has its own of (and must: it is the ABI).
is_runtime() {
    case "$1" in
        libc.so.* | ld-linux* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | \
            libgcc_s.so.* | linux-vdso.so.* | libmvec.so.* | libresolv.so.* | libutil.so.*) return 0 ;;
    esac
    return 1
}
{
    ldd "$BUILD/nostall" || die "ldd $BUILD/nostall failed"
    ldd "$BUILD/libnostall.so" || die "ldd $BUILD/libnostall.so failed"
    if [ -f "$KIT/bin/test_gpu_device" ]; then
        ldd "$KIT/bin/test_gpu_device" || die "ldd test_gpu_device failed"
    fi
} > "$KIT/.ldd"
grep -q 'not found' "$KIT/.ldd" && die "unresolved libraries here: $(grep 'not found' "$KIT/.ldd")"
libs=()
while read -r name arrow path _; do
    [ "$arrow" = "=>" ] && [ -n "$path" ] || continue
    is_runtime "$name" && continue
    [ -e "$KIT/lib/$name" ] && continue
    cp -L "$path" "$KIT/lib/$name" || die "cannot copy $path"
    libs+=("$name")
done < <(sort -u "$KIT/.ldd")
rm -f "$KIT/.ldd"

# The newest glibc symbol version any packed file needs: run.sh compares it
# with the machine's glibc before anything runs.
glibc=$(objdump -T "$KIT"/bin/* "$KIT"/lib/* 2> /dev/null | grep -o 'GLIBC_[0-9.]*' |
    sed 's/GLIBC_//' | sort -uV | tail -1)
{
    echo "commit $(git -C "$ROOT" rev-parse HEAD 2> /dev/null || echo unknown)$(git -C "$ROOT" diff --quiet HEAD 2> /dev/null || echo ' (modified tree)')"
    echo "packed $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME")"
    echo "build $BUILD"
    echo "glibc_min ${glibc:-unknown}"
    for l in libnostall.so "${libs[@]}"; do
        echo "lib $l $(stat -c %s "$KIT/lib/$l") glibc $(objdump -T "$KIT/lib/$l" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)"
    done
    echo "bin nostall $(stat -c %s "$KIT/bin/nostall")"
    [ -f "$KIT/bin/test_gpu_device" ] &&
        echo "bin test_gpu_device $(stat -c %s "$KIT/bin/test_gpu_device")"
} > "$KIT/MANIFEST"

# Check: the packed CLI resolves every library from the kit alone.
if ! LD_LIBRARY_PATH=$KIT/lib ldd "$KIT/bin/nostall" > /dev/null; then
    die "ldd $KIT/bin/nostall failed"
fi
bytes=$(du -sb "$KIT" | cut -f1)
echo "kit: $KIT"
echo "  nostall, libnostall.so and ${#libs[@]} libraries: ${libs[*]}"
echo "  needs glibc >= ${glibc:-unknown}"
awk -v b="$bytes" 'BEGIN {printf "  size %d bytes (%.1f MiB; limit 64 MiB)\n", b, b / 1048576}'
[ "$bytes" -lt "$LIMIT" ] || die "$KIT is $bytes bytes: over the $LIMIT bytes (64 MiB) that may travel"
echo "carry it: run(command='bash bench/gpu/run.sh --quick', carry=[\"bench/gpu/kit\"])"
