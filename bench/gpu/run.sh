#!/usr/bin/env bash
# bench/gpu/run.sh — the GPU validation kit, run THERE (the borrowed GPU
# machine) from the repository root, in one command, with the folder
# bench/gpu/pack.sh made here carried along (docs/gpu.md):
#
#   bash bench/gpu/run.sh --quick       # <= 570 s wall on 16 cores (560 s of budgets)
#   bash bench/gpu/run.sh --full        # more batches, and step 5 (echoing)
#   ... --only correctness,echo         # those steps only (the machine, gen always run)
#   bash bench/gpu/run.sh --rehearse    # here, on the CPU, tiny sizes (ctest cli_gpu_kit)
#
# It finds libraries in the kit (bench/gpu/kit, or --kit DIR; --build DIR
# uses a build folder as it is, with the system's libraries), prints the
# machine, generates the dataset there with `nostall gen` on every core (it
# does not travel), then runs the steps of bench/gpu/gpu_bench.py, each under
# its own time limit; a step that fails or runs out of time is recorded as
# such and the next one runs. Results: $OUT/gpu.json and $OUT/gpu.md (tables
# for docs/gpu.md), rewritten as each step (and each configuration of a step)
# finishes, so a run cut short keeps what it measured; $OUT/analyze.txt, the
# analyzer's report; $OUT/log.txt, everything printed. OUT defaults to a new
# temporary folder. Exit status: 0 when every step passed or was skipped.
#
# Budgets (seconds, `timeout` per step; --quick on 16 cores, ImageNet-sized
# JPEGs, ResNet-50 bf16 batch 256; --full doubles steps 3-4 and adds 5):
#
#   step                                   quick   full   rehearse (CPU)
#   0  machine                                20     20     120
#   -  gen 20 000 JPEGs 500x375 (full 25 600) 50     60     120 (200 at 160x120)
#   1  correctness (GPU paths, pytest)        60     60     120 (pytest only: no CUDA)
#   1b gpudecode (decode_device=gpu's check)  60     60      60 (skips: no CUDA device)
#   1c gpuloader (the loader on the GPU, 2
#      cores; NOSTALL_GPU_UNVALIDATED=1)      90     90     120 (skips: no CUDA device)
#   2  accelerator rate (ResNet-50)           40     60     120 (ResNet-18, 64 px)
#   3  cores per GPU: 2,4,8,16 x 2 loaders   150    420     300 (2 cores)
#   4  analyzer at 4 threads; 2,8,16         90    180     300
#   5  echoing, R ~ 4, ResNet-18               -    150     300
#   total                                    560   1100
# --full does not fit one 10-minute command: run it as two, with --only.
#
# The kit's libraries are Debian 12's. Only those whose soname this machine
# cannot resolve are put on LD_LIBRARY_PATH (a library it has is built for
# its own Python and torch, which share the process); if the CLI does not
# then run, the whole kit is used (NOSTALL_KIT_LIBS=all: always). The kit's
# MANIFEST gives the glibc it needs.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
PROFILE=quick
KIT=$ROOT/bench/gpu/kit
BUILD=""
IMAGES=""
ONLY=""
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) PROFILE=quick; shift ;;
        --full) PROFILE=full; shift ;;
        --rehearse) PROFILE=rehearse; shift ;;
        --kit) KIT=$(realpath -m "$2"); shift 2 ;;
        --build) BUILD=$(realpath -m "$2"); shift 2 ;;
        --images) IMAGES=$2; shift 2 ;;
        --only) ONLY=",$2,"; shift 2 ;;
        -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
OUT=${OUT:-$(mktemp -d /tmp/nostall-gpu.XXXXXX)}
mkdir -p "$OUT" || { echo "run.sh: cannot create $OUT" >&2; exit 1; }
exec > >(tee -a "$OUT/log.txt") 2>&1
echo "run.sh --$PROFILE: results in $OUT (gpu.json, gpu.md, log.txt)"
die() { echo "run.sh: $*"; exit 1; }
CLEAN=()
trap 'rm -rf "${CLEAN[@]}"' EXIT

case $PROFILE in
    quick) B_INFO=20 B_GEN=50 B_CORR=60 B_GPUL=90 B_ACCEL=40 B_CORES=150 B_ANALYZE=90 B_ECHO=0
        N_IMAGES=20000 SIZE="" ;;
    full) B_INFO=20 B_GEN=60 B_CORR=60 B_GPUL=90 B_ACCEL=60 B_CORES=420 B_ANALYZE=180 B_ECHO=150
        N_IMAGES=25600 SIZE="" ;;
    rehearse) B_INFO=120 B_GEN=120 B_CORR=120 B_GPUL=120 B_ACCEL=120 B_CORES=300 B_ANALYZE=300 B_ECHO=300
        N_IMAGES=200 SIZE=160x120 ;;
esac
[ -n "$IMAGES" ] && N_IMAGES=$IMAGES

# --- libraries: the kit (or a build folder) ---------------------------------------
LIBMODE=build
if [ -n "$BUILD" ]; then
    export NOSTALL_CLI=$BUILD/nostall NOSTALL_LIBRARY=$BUILD/libnostall.so
else
    [ -f "$KIT/bin/nostall" ] && [ -f "$KIT/lib/libnostall.so" ] ||
        die "$KIT: no kit (run bash bench/gpu/pack.sh where it was built, and carry bench/gpu/kit)"
    export NOSTALL_CLI=$KIT/bin/nostall NOSTALL_LIBRARY=$KIT/lib/libnostall.so
    need=$(awk '$1 == "glibc_min" {print $2}' "$KIT/MANIFEST" 2> /dev/null)
    have=$(ldd --version 2> /dev/null | head -1 | grep -o '[0-9][0-9.]*$')
    echo "kit: $(head -1 "$KIT/MANIFEST" 2> /dev/null); needs glibc ${need:-?}, this machine has ${have:-?}"
    if [ -n "$need" ] && [ -n "$have" ] && [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1)" != "$need" ]; then
        echo "run.sh: WARNING: this machine's glibc $have is older than the kit's $need; kit libraries that need more:" \
            $(awk -v h="$have" '$1 == "lib" && $5 != "" {print $5, $2}' "$KIT/MANIFEST" | sort -V |
                awk -v h="$have" '{split($1, a, "."); split(h, b, "."); if (a[1] > b[1] || (a[1] == b[1] && a[2] > b[2])) print $2}')
    fi
    LDCONFIG=$(command -v ldconfig || echo /sbin/ldconfig)
    SYSLIBS=$("$LDCONFIG" -p 2> /dev/null | awk '{print $1}')
    LIBDIR=$(mktemp -d /tmp/nostall-kitlib.XXXXXX) || die "cannot create a folder in /tmp"
    CLEAN+=("$LIBDIR")
    for f in "$KIT"/lib/*; do
        n=$(basename "$f")
        if [ "$n" = libnostall.so ] || [ "${NOSTALL_KIT_LIBS:-}" = all ] || [ -z "$SYSLIBS" ] ||
            ! grep -qxF "$n" <<< "$SYSLIBS"; then
            ln -s "$f" "$LIBDIR/$n"
        fi
    done
    LIBMODE="those this machine lacks: $(ls "$LIBDIR" | grep -vx libnostall.so | tr '\n' ' ')"
    [ "${NOSTALL_KIT_LIBS:-}" = all ] && LIBMODE="whole kit (NOSTALL_KIT_LIBS=all)"
    export LD_LIBRARY_PATH=$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    if ldd "$NOSTALL_CLI" 2>&1 | grep -q 'not found' || ! "$NOSTALL_CLI" gen --help > /dev/null 2>&1; then
        echo "run.sh: the CLI does not run with this machine's libraries: using the whole kit"
        LIBMODE="whole kit"
        export LD_LIBRARY_PATH=$KIT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    fi
    echo "kit libraries: $LIBMODE"
    ldd "$NOSTALL_CLI" 2>&1 | grep -q 'not found' && { ldd "$NOSTALL_CLI"; die "$NOSTALL_CLI: libraries not found"; }
fi
"$NOSTALL_CLI" gen --help > /dev/null 2>&1 || die "$NOSTALL_CLI does not run"
export PYTHONPATH=$ROOT/python${PYTHONPATH:+:$PYTHONPATH}

# --- Python: /usr/bin/python3 if it has torch, else the python3 on PATH ---------
PY=${NOSTALL_PYTHON:-}
if [ -z "$PY" ]; then
    for c in /usr/bin/python3 python3 python; do
        if "$c" -c 'import torch, torchvision' > /dev/null 2>&1; then PY=$c; break; fi
    done
fi
[ -n "$PY" ] || die "no Python with torch and torchvision (set NOSTALL_PYTHON)"
"$PY" -c 'import nostall' || die "$PY cannot import nostall from $ROOT/python with $NOSTALL_LIBRARY"
echo "python: $(command -v "$PY") $("$PY" -c 'import sys; print(sys.version.split()[0])')"
BENCH=(timeout --kill-after=10)
G=$ROOT/bench/gpu/gpu_bench.py
COMMIT=$(awk '$1 == "commit" {$1 = ""; print substr($0, 2)}' "$KIT/MANIFEST" 2> /dev/null)
[ -n "$BUILD" ] || [ -z "$COMMIT" ] && COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2> /dev/null || echo unknown)
note() { "$PY" "$G" note --out "$OUT" --key "$1" --json "$2"; }
note run "$("$PY" -c 'import json, sys; print(json.dumps(dict(zip(["profile", "date", "commit", "libraries", "python", "budgets"], sys.argv[1:6] + [dict(zip(["info", "gen", "correctness", "gpuloader", "accel", "cores", "analyze", "echo"], map(int, sys.argv[6:])))]))))' \
    "$PROFILE" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$COMMIT" "$LIBMODE" "$PY" \
    $B_INFO $B_GEN $B_CORR $B_GPUL $B_ACCEL $B_CORES $B_ANALYZE $B_ECHO)" || die "cannot write $OUT/gpu.json"

FAILED=()
# step NAME BUDGET ARGS...: one step under its time limit
step() {
    local name=$1 budget=$2 rc t0=$SECONDS
    shift 2
    if [ -n "$ONLY" ] && [ "$name" != info ] && [ "$name" != gen ] && [[ $ONLY != *",$name,"* ]]; then
        echo "== $name: not run (--only ${ONLY:1:-1})"
        note "$name" '{"status": "skipped", "reason": "not in --only"}'
        return
    fi
    echo "== $name (budget ${budget} s)"
    "${BENCH[@]}" "$budget" "$PY" "$G" "$name" --out "$OUT" --profile "$PROFILE" --budget "$budget" "$@"
    rc=$?
    if [ $rc = 124 ] || [ $rc = 137 ]; then
        note "$name" "{\"status\": \"timeout after $budget s (what it measured before is kept)\"}"
        FAILED+=("$name (timeout)")
    elif [ $rc != 0 ]; then
        FAILED+=("$name (exit $rc)")
    fi
    echo "== $name: exit $rc after $((SECONDS - t0)) s"
}

# libnvjpeg beside the Python packages (PyPI's nvidia-nvjpeg, torchvision's
# own copy) or in /usr/local/cuda: its path, or nothing (then the sonames on
# the library path are tried); given to libnostall as NOSTALL_TEST_NVJPEG.
find_nvjpeg() {
    "$PY" -c 'import glob, os, site, sys
dirs = site.getsitepackages() + [site.getusersitepackages()]
pats = ["nvidia/nvjpeg/lib/libnvjpeg.so.1*", "torchvision.libs/libnvjpeg*.so*"]
c = [f for d in dirs for p in pats for f in sorted(glob.glob(os.path.join(d, p)))]
c += sorted(glob.glob("/usr/local/cuda*/lib64/libnvjpeg.so.1*"))
print(c[0] if c else "")' 2> /dev/null
}

# decode_device=gpu's device check (tests/test_gpu_device.c, packed by
# pack.sh): nvJPEG + the CUDA kernels against the CPU path. It skips
# (exit 77), naming what is missing, without CUDA in the build, a CUDA
# device or libnvjpeg.
gpudecode() {
    local bin=${BUILD:-$KIT/bin}/test_gpu_device lib="" rc
    if [ -n "$ONLY" ] && [[ $ONLY != *",gpudecode,"* ]]; then
        note gpudecode '{"status": "skipped", "reason": "not in --only"}'
        return
    fi
    echo "== gpudecode (budget 60 s)"
    if [ ! -x "$bin" ]; then
        echo "gpudecode: skipped (no $bin: the kit predates it)"
        note gpudecode "{\"status\": \"skipped\", \"reason\": \"no test_gpu_device in the kit\"}"
        return
    fi
    lib=$(find_nvjpeg)
    echo "gpudecode: libnvjpeg ${lib:-not found (the sonames on the library path are tried)}"
    NOSTALL_TEST_NVJPEG=$lib timeout --kill-after=10 60 "$bin" > "$OUT/gpudecode.txt" 2>&1
    rc=$?
    cat "$OUT/gpudecode.txt"
    local line reason
    line=$(grep -m1 '^gpudecode {' "$OUT/gpudecode.txt" | sed 's/^gpudecode //')
    reason=$(grep -m1 '^SKIP: ' "$OUT/gpudecode.txt" | sed 's/^SKIP: //' | "$PY" -c 'import json, sys; print(json.dumps(sys.stdin.read().strip()))')
    if [ $rc = 0 ] && [ -n "$line" ]; then
        note gpudecode "$("$PY" -c 'import json, sys; d = json.loads(sys.argv[1]); d.update(status="ok", libnvjpeg=sys.argv[2]); print(json.dumps(d))' "$line" "$lib")"
    elif [ $rc = 77 ]; then
        echo "gpudecode: skipped"
        note gpudecode "{\"status\": \"skipped\", \"reason\": $reason}"
    elif [ -n "$line" ]; then # a check failed: its figures are kept
        note gpudecode "$("$PY" -c 'import json, sys; d = json.loads(sys.argv[1]); d.update(status="failed (exit %s)" % sys.argv[3], reason="see gpudecode.txt", libnvjpeg=sys.argv[2]); print(json.dumps(d))' "$line" "$lib" "$rc")"
        FAILED+=("gpudecode (exit $rc)")
    else
        note gpudecode "{\"status\": \"failed (exit $rc)\", \"reason\": \"see gpudecode.txt\"}"
        FAILED+=("gpudecode (exit $rc)")
    fi
    echo "== gpudecode: exit $rc"
}

step info "$B_INFO"

# --- the dataset: generated here, never carried ------------------------------------
if [ "$PROFILE" = rehearse ]; then
    DATA_ROOT=$OUT
else
    need_kb=$((N_IMAGES * 130))
    free_kb=$(df -Pk /dev/shm 2> /dev/null | awk 'NR == 2 {print $4}')
    DATA_ROOT=${TMPDIR:-/tmp}
    [ "${free_kb:-0}" -gt $((need_kb * 2)) ] && DATA_ROOT=/dev/shm
fi
DATA=$(mktemp -d "$DATA_ROOT/nostall-gpu-data.XXXXXX") || die "cannot create a folder in $DATA_ROOT"
SMALL=$DATA/small
DATA=$DATA/train
CLEAN+=("$(dirname "$DATA")")
"$NOSTALL_CLI" gen "$SMALL" --images 96 --classes 4 --width 64 --height 48 --size-jitter 0.2 \
    --seed 3 --quiet > /dev/null || die "nostall gen $SMALL failed"
[ "$PROFILE" = quick ] && echo "--quick: $N_IMAGES images (the full profile generates 25 600)"
step gen "$B_GEN" --data "$DATA" --images "$N_IMAGES" --classes $([ "$PROFILE" = rehearse ] && echo 4 || echo 100) \
    ${SIZE:+--size "$SIZE"}
note run "{\"data\": \"$N_IMAGES JPEGs ${SIZE:-500x375} in $DATA_ROOT, made by nostall gen\"}"

step correctness "$B_CORR" --small "$SMALL"
gpudecode
# the loader itself on the GPU: the route is not yet validated, so it runs
# only opted in (cuda_probe.c), and only for this step
export NOSTALL_GPU_UNVALIDATED=1 NOSTALL_TEST_NVJPEG=$(find_nvjpeg)
step gpuloader "$B_GPUL" --data "$DATA"
unset NOSTALL_GPU_UNVALIDATED NOSTALL_TEST_NVJPEG
step accel "$B_ACCEL"
step cores "$B_CORES" --data "$DATA"
step analyze "$B_ANALYZE" --data "$DATA"
if [ "$PROFILE" = quick ] && [[ $ONLY != *",echo,"* ]]; then
    echo "== echo: skipped (full profile only)"
    note echo '{"status": "skipped", "reason": "full profile only"}'
else
    step echo "$B_ECHO" --data "$DATA"
fi

echo
cat "$OUT/gpu.md"
if [ ${#FAILED[@]} -gt 0 ]; then
    echo "run.sh: steps not passed: ${FAILED[*]} (see $OUT/log.txt)"
    exit 1
fi
echo "run.sh: every step passed or was skipped; results in $OUT"
