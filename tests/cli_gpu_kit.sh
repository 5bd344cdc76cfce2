#!/usr/bin/env bash
# The GPU validation kit (bench/gpu/, docs/gpu.md) cannot rot between the
# rare times a GPU machine is lent: pack.sh packs the build under test into
# a kit (under the size limit, every non-C-runtime library the CLI and
# libnostall.so load resolved from the kit alone, a kit over the limit
# refused), then run.sh --rehearse runs every step of the GPU run on the CPU
# with tiny sizes, with the whole kit on LD_LIBRARY_PATH as there. Asserts
# what each step recorded in gpu.json and gpu.md, never how fast it was.
source "$(dirname "$0")/lib_cli.sh"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${NOSTALL_BUILD_DIR:?}
# A sanitizer build's library cannot be loaded by a plain interpreter.
if nm -D "$BUILD/libnostall.so" | grep -E ' __(asan|tsan)_' > /dev/null; then
    echo "SKIP: sanitizer build; the kit rehearsal runs on the release build"
    exit 77
fi
$PY -c 'import torch, torchvision' > /dev/null 2>&1 ||
    { echo "SKIP: the rehearsal needs torch and torchvision for $PY"; exit 77; }

# 1. pack: the build under test into $TMP/kit
KIT=$TMP/kit
bash "$ROOT/bench/gpu/pack.sh" --no-build --build-dir "$BUILD" --kit "$KIT" > "$TMP/pack.log" 2>&1 ||
    { cat "$TMP/pack.log"; fail "pack.sh failed"; }
grep -q 'size [0-9]* bytes' "$TMP/pack.log" || fail "pack.sh did not print the kit's size"
bytes=$(du -sb "$KIT" | cut -f1)
[ "$bytes" -lt $((64 << 20)) ] || fail "the kit is $bytes bytes, over 64 MiB"
for f in bin/nostall lib/libnostall.so MANIFEST; do [ -s "$KIT/$f" ] || fail "kit: no $f"; done
ls "$KIT"/lib/libjpeg.so.* > /dev/null 2>&1 || fail "kit: no libjpeg (ls: $(ls "$KIT/lib"))"
for f in "$KIT"/lib/*; do
    case $(basename "$f") in
        libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | libgcc_s.so.* | ld-linux*)
            fail "kit carries the C runtime: $f" ;;
    esac
done
if ! ldd "$BUILD/nostall" "$BUILD/libnostall.so" | grep libstdc++ > /dev/null && ls "$KIT"/lib/libstdc++* > /dev/null 2>&1; then
    fail "kit carries libstdc++, which ldd does not list"
fi
grep -q '^glibc_min [0-9]' "$KIT/MANIFEST" || fail "MANIFEST: no glibc_min"
# Every library but the C runtime resolves from the kit alone: with the kit
# first on the path, hiding the system's copies (libjpeg...) changes nothing.
for f in "$KIT/bin/nostall" "$KIT/lib/libnostall.so"; do
    LD_LIBRARY_PATH=$KIT/lib ldd "$f" > "$TMP/ldd.txt" 2>&1 || fail "ldd $f: $(cat "$TMP/ldd.txt")"
    stray=$(awk -v k="$KIT/lib/" '$2 == "=>" && index($3, k) != 1 && $1 !~ /^(libc|libm|libpthread|libdl|librt|libgcc_s|libmvec|libresolv|libutil)\.so/ {print $1 " => " $3}' "$TMP/ldd.txt")
    [ -z "$stray" ] || fail "$f: resolved outside the kit: $stray"
done
grep -q "libjpeg.so.* => $KIT/lib/" <(LD_LIBRARY_PATH=$KIT/lib ldd "$KIT/bin/nostall") ||
    fail "the packed CLI does not load the kit's libjpeg"
# As on another distribution: every system copy of a kit library hidden (an
# empty file bound over it, in a user and mount namespace), the build's own
# CLI no longer starts; the kit's CLI and the binding, with the kit on the
# path, still make and load a dataset. Where namespaces are not allowed,
# this part is skipped, saying so.
if unshare -rm true 2> /dev/null; then
    hide=""
    while read -r name _ path _; do
        [ -e "$KIT/lib/$name" ] && [ "$name" != libnostall.so ] && hide="$hide $(realpath "$path")"
    done < <(ldd "$BUILD/nostall" "$BUILD/libnostall.so" | grep '=> /')
    [ -n "$hide" ] || fail "no system library to hide"
    # shellcheck disable=SC2016
    HIDE="$hide" BUILD="$BUILD" KIT="$KIT" TMP="$TMP" ROOT="$ROOT" PY="$PY" unshare -rm bash -c '
        for f in $HIDE; do mount --bind /dev/null "$f" || exit 3; done
        "$BUILD/nostall" gen "$TMP/hidden-build" --images 4 --classes 2 --quiet > /dev/null 2>&1 && exit 4
        export LD_LIBRARY_PATH=$KIT/lib NOSTALL_LIBRARY=$KIT/lib/libnostall.so PYTHONPATH=$ROOT/python
        "$KIT/bin/nostall" gen "$TMP/hidden" --images 12 --classes 2 --width 64 --height 48 --quiet > /dev/null || exit 5
        "$PY" -c "import sys, nostall
with nostall.Loader(sys.argv[1], batch_size=4, crop=16, threads=2) as ld:
    assert sum(len(b[1]) for b in ld) == 12" "$TMP/hidden" || exit 6' ||
        { rc=$?; fail "with the system's copies hidden: status $rc (3 hide, 4 the build still ran, 5 kit CLI, 6 binding)"; }
    echo "kit alone: ran with $(tr " " "\n" <<< "$hide" | sort -u | grep -c .) system libraries hidden"
else
    echo "NOTE: no user namespaces here: the kit was not run with the system's libraries hidden"
fi
# a kit over the limit is refused, saying so
if NOSTALL_KIT_LIMIT_BYTES=1000 bash "$ROOT/bench/gpu/pack.sh" --no-build --build-dir "$BUILD" \
    --kit "$TMP/kit2" > "$TMP/pack2.log" 2>&1; then
    fail "pack.sh accepted a kit over its size limit"
fi
grep -q "over the 1000 bytes" "$TMP/pack2.log" || fail "pack.sh over the limit said: $(cat "$TMP/pack2.log")"

# 2. the rehearsal: every step, on the CPU, with the whole kit
OUT=$TMP/out NOSTALL_KIT_LIBS=all NOSTALL_PYTHON=$PY bash "$ROOT/bench/gpu/run.sh" --rehearse \
    --kit "$KIT" > "$TMP/run.log" 2>&1 || { cat "$TMP/run.log"; fail "run.sh --rehearse failed"; }
grep -q "kit libraries: whole kit" "$TMP/run.log" || fail "run.sh did not use the kit: $(head -5 "$TMP/run.log")"
if ! $PY -c 'import torch, sys; sys.exit(torch.cuda.is_available())'; then
    grep -q "correctness: skipped (no CUDA device" "$TMP/run.log" || fail "no CUDA, yet the GPU checks were not said skipped"
fi
$PY - "$TMP/out/gpu.json" <<'PYEOF' || fail "gpu.json: see above"
import json, sys
j = json.load(open(sys.argv[1]))
for step in ("run", "info", "gen", "correctness", "gpudecode", "gpuloader", "accel", "cores", "analyze", "echo"):
    assert step in j, "no %s in %s" % (step, sorted(j))
assert j["run"]["profile"] == "rehearse" and j["run"]["budgets"]["cores"] > 0, j["run"]
assert j["info"]["status"] == "ok" and j["info"]["cpus"] >= 1 and j["info"]["torch"], j["info"]
assert j["gen"]["status"] == "ok" and j["gen"]["images"] == 200, j["gen"]
import torch
assert j["correctness"]["status"] == ("ok" if torch.cuda.is_available() else "skipped"), j["correctness"]
assert j["correctness"]["pytest"]["result"] == "pass", j["correctness"]  # the GPU cases skip, pin_memory's CPU case runs
a = j["accel"]
assert a["status"] == "ok" and a["model"] == "resnet18" and a["crop"] == 64 and a["images_per_s"] > 0, a
c = j["cores"]
assert c["status"] == "ok", c
assert sorted((r["cores"], r["loader"]) for r in c["rows"]) == [(2, "nostall"), (2, "torchvision")], c
for r in c["rows"]:
    assert r["status"] == "ok" and r["batches"] >= 1 and r["images_per_s"] > 0, r
    assert r["busy_fraction"] >= 0 and r["stall_fraction"] >= 0 and r["cpu_cores_used"] >= 0, r
an = j["analyze"]
assert an["status"] == "ok" and an["threads"] == 4 and an["bound"] in ("compute", "prep", "fetch", "start"), an
assert [r["threads"] for r in an["rows"]] == [2, 8, 16], an["rows"]
for r in an["rows"]:
    assert r["predicted_bound"] in ("compute", "prep", "fetch", "start"), r
    assert r["predicted_images_per_s"] > 0 and r["measured_images_per_s"] > 0, r
g = j["gpudecode"]  # decode_device=gpu's device check: skipped without a CUDA device, naming it
assert g["status"] == ("ok" if torch.cuda.is_available() else "skipped"), g
assert g["status"] == "ok" or "decode_device=gpu" in g["reason"] or "without the test hooks" in g["reason"], g
gl = j["gpuloader"]  # the loader with decode_device=gpu: skipped without a CUDA device, naming it
assert j["run"]["budgets"]["gpuloader"] > 0, j["run"]
if torch.cuda.is_available():
    assert gl["status"] in ("ok", "partial") and gl["rows"], gl
else:
    assert gl["status"] == "skipped" and "no CUDA device" in gl["reason"], gl
e = j["echo"]
assert e["status"] == "ok" and [r["echo"] for r in e["rows"]] == ["2", "adaptive"], e
assert all(r["status"] == "ok" and r["images_per_s"] > 0 and r["factor"] >= 1 for r in e["rows"]), e
print("gpu.json: every step recorded")
PYEOF
for h in "| pytest (GPU cases) | pass" "| cores | loader | images/s | GPU busy" "| threads | predicted images/s" "| echo | delivered images/s" "Accelerator alone (resnet18"; do
    grep -qF "$h" "$TMP/out/gpu.md" || fail "gpu.md lacks '$h'"
done
if ! $PY -c 'import torch, sys; sys.exit(torch.cuda.is_available())'; then
    grep -qF "**gpuloader**: skipped: no CUDA device" "$TMP/out/gpu.md" || fail "gpu.md does not say gpuloader was skipped"
    grep -q "gpuloader: skipped (no CUDA device" "$TMP/run.log" || fail "run.log does not say gpuloader was skipped"
fi
[ -s "$TMP/out/analyze.txt" ] || fail "no analyzer report"
echo PASS
