#!/usr/bin/env bash
# `nostall analyze` end to end. Real jobs, each far from any boundary in what
# the model decides from: CPU time per item (not wall time: a loaded machine
# does not change it much; a sanitizer, 5-25x, is within the margins), bytes,
# the emulated storage's rate, and the step. The step the runs measure is
# the wall time of a sleep, longer on a loaded machine without bound, so the
# verdicts that a longer step could flip are asserted on --predict step_ms=
# (the model at the step asked for): one job bound by a long step is
# compute-bound (a longer step only makes it more so); one with a single
# thread and a 1 ms step is prep-bound; one on very slow (emulated) storage
# is fetch-bound, and a cache removes its stall. What the runs measured in
# wall time (stalls, the model's error on the cold epoch, the advice given
# at the measured step) is printed, and asserted only where no load can
# change it: the fractions are fractions (0..1, the stalls adding up), the
# step alone takes at least its sleeps, the measured verdict is the one its
# own fractions give. On a machine with 2 cores and a load of 20 the runs'
# wall times can say anything, and a sanitizer slows them 5-25x more. The
# advice itself is checked exactly in 4., on controlled measurements. The cold run leaves the dataset out
# of the page cache. Token windows of one file count the file once
# (dataset_bytes is its size, not windows x size); a detection dataset's
# restart-marker sample is measured with the detect task (a COCO file of the
# sampled images), with no warning. The model's decisions (verdict, recommendations,
# predictions, text report) are then checked exactly on controlled
# measurements (--measurements with fixed numbers). --json reads back with
# --measurements (same predictions), --predict adds rows, errors name what is
# wrong, and the HTML report is self-contained and shows its charts in a real
# browser (chromium). How accurate the restart-marker measurement is (CPU
# per item of a transcoded sample) is a figure, printed here, not asserted.
source "$(dirname "$0")/lib_cli.sh"

"$CLI" gen "$TMP/data" --images 64 --classes 4 --width 200 --height 150 --quiet
common=(--crop 64 --seed 5 --quiet --json)

# meas IN OUT key=value...: the measurements of IN (an analyze --json output)
# with the given ones replaced: a controlled input for the model.
meas() {
    "$PY" - "$@" <<'PYEOF'
import json, sys
j = json.load(open(sys.argv[1]))
m = dict(j.get("measurements", j))
for kv in sys.argv[3:]:
    k, v = kv.split("=")
    assert k in m, "unknown measurement " + k
    m[k] = float(v)
json.dump(m, open(sys.argv[2], "w"))
PYEOF
}

# 1. step-bound: 32 batches of 2 items, 100 ms each; two threads prepare a
# batch (one item each) in well under 25 ms even under TSan on a loaded
# machine, and the first batch (the only wait) is < 1% of the 3.2 s
STEP=100
"$CLI" analyze "$TMP/data" "${common[@]}" --batch-size 2 --threads 2 --step-ms $STEP --report "$TMP/r.html" > "$TMP/compute.json" \
    2> "$TMP/compute.err" || fail "analyze (compute-bound) failed: $(cat "$TMP/compute.err")"
f="$TMP/compute.json"
echo "compute-bound: measured stall $(json "$f" 'round(j["measured"]["stall_fraction"], 3)') ($(json "$f" 'j["measured"]["bound"]')), predicted $(json "$f" 'round(j["model"]["steady_state"]["stall_fraction"], 3)'), bound $(json "$f" 'j["bound"]')"
measured_ok "$f"
[ "$(json "$f" 'j["bound"]')" = compute ] || fail "step-bound job not classified compute-bound"
json "$f" 'j["model"]["steady_state"]["stall_fraction"] < 0.05' | grep -q True || fail "step-bound job: predicted stall >= 5%"
# the synthetic run is the step alone: 32 sleeps of STEP ms (never shorter;
# longer by the wake-up delays of a busy machine, without bound)
json "$f" "32 * $STEP / 1000 <= j['measured']['synthetic_s']" \
    | grep -q True || fail "synthetic run is shorter than 32 x $STEP ms: $(json "$f" 'j["measured"]["synthetic_s"]') s"
! grep -q "warning: restart-marker" "$TMP/compute.err" || fail "classify: restart-marker sample warned: $(cat "$TMP/compute.err")"
json "$f" '[r["needed"] for r in j["recommendations"]] == [False, False, False, False]' | grep -q True \
    || fail "step-bound job: no recommendation should be needed: $(json "$f" '[r["text"] for r in j["recommendations"]]')"
json "$f" 'len(j["recommendations"]) == 4 and all(r["text"].startswith(w) for r, w in zip(j["recommendations"], ("Preprocessing:", "Storage:", "Echoing:", "Decoding:")))' \
    | grep -q True || fail "recommendations must say what they are about: $(json "$f" 'j["recommendations"]')"
json "$f" 'j["measurements"]["dataset_bytes"]' > "$TMP/bytes"
want=$(find "$TMP/data" -type f -name '*.jpg' -printf '%s\n' | awk '{s+=$1} END {print s}')
[ "$(cat "$TMP/bytes")" = "$want" ] || fail "dataset_bytes $(cat "$TMP/bytes") != $want (stat of every file)"
[ "$(json "$f" 'int(j["measurements"]["dataset_files"])')" = 64 ] || fail "dataset_files: want 64"
# (measured, and printed: how fast memcpy and the disk are is the machine's
# business, and TSan's memcpy on a busy machine can be slower than 100 MB/s)
echo "bandwidths: disk $(json "$f" 'round(j["measurements"]["disk_bw"] / 1e6)') MB/s, memory $(json "$f" 'round(j["measurements"]["mem_bw"] / 1e6)') MB/s"
json "$f" 'j["measurements"]["disk_bw"] > 0 and j["measurements"]["mem_bw"] > 0' | grep -q True \
    || fail "storage/memory bandwidth not measured"
# what-if table: every group, cache 0..100%, cores 1..4x
for g in cache cores storage echo combined; do
    json "$f" "any(r['group'] == '$g' for r in j['whatif'])" | grep -q True || fail "what-if group $g missing"
done
json "$f" '[r["x"] for r in j["whatif"] if r["group"] == "cache"] == [0, 0.1, 0.25, 0.5, 0.75, 1]' | grep -q True \
    || fail "cache what-if rows"
json "$f" 'max(r["x"] for r in j["whatif"] if r["group"] == "cores") == 4 * j["measurements"]["cores"]' | grep -q True \
    || fail "cores what-if must reach 4x the machine"

# cold means cold: the dataset is not left in the page cache
if fincore --version > /dev/null 2>&1; then
    res=$(find "$TMP/data" -type f -name '*.jpg' -print0 | xargs -0 fincore --bytes --noheadings | awk '{s+=$1} END {print s+0}')
    echo "page cache after analyze: $res of $want bytes resident"
    [ "$res" -lt $((want / 10)) ] || fail "analyze left $res bytes of the dataset in the page cache"
fi

# 2. prep-bound: one thread cannot prepare 16 items of 500x375 cropped to 224
# (~0.6 ms each in a release build, more under a sanitizer or on a busy
# machine) in a step of 1 ms: the stall is ~90% of the epoch, and (quality
# 60: few bytes per pixel) reading the files cold costs far less than
# preparing them. Sanitizer builds, 5-25x slower per item, get the margin
# from fewer, smaller images (the restart-marker sample, 18 decodes of
# each, dominates their time).
big=(--images 192 --width 500 --height 375)
# (grep reads all of nm's output: with -q it could exit first, nm then dies
# of SIGPIPE, and under pipefail a sanitizer build would sometimes -- as the
# scheduler has it -- get the big set and take 10x longer)
[ -n "${NOSTALL_LIBRARY:-}" ] && nm -D "$NOSTALL_LIBRARY" 2>/dev/null | grep -E ' __(asan|tsan)_' > /dev/null \
    && big=(--images 24 --width 400 --height 300)
"$CLI" gen "$TMP/big" "${big[@]}" --quality 60 --classes 2 --quiet
mkdir -p "$TMP/tmpd"
# (a relative TMPDIR: the sample's file list must not depend on it)
(cd "$TMP" && TMPDIR=tmpd "$CLI" analyze "$TMP/big" "${common[@]}" --crop 224 --batch-size 16 --threads 1 --step-ms 1 \
    --predict step_ms=1 --predict step_ms=1,threads=2) > "$TMP/prep.json" || fail "analyze (prep) failed"
f="$TMP/prep.json"
echo "prep-bound: bound $(json "$f" 'j["bound"]') at the measured step of $(json "$f" 'round(1e3 * j["measurements"]["step_s"], 2)') ms, $(json "$f" 'j["predictions"][0]["prediction"]["bound"]') at 1 ms; measured $(json "$f" 'j["measured"]["bound"]'): prep stall $(json "$f" 'round(j["measured"]["prep_stall_s"], 3)') s, fetch stall $(json "$f" 'round(j["measured"]["fetch_stall_s"], 3)') s; $(json "$f" 'j["recommendations"][0]["text"]')"
measured_ok "$f"
# 16 items of >= 0.4 ms of CPU each on one thread against a 1 ms step: prep,
# and a second thread shortens the epoch
json "$f" 'j["predictions"][0]["prediction"]["bound"] == "prep" and j["predictions"][0]["prediction"]["prep_stall_fraction"] > 0.5' \
    | grep -q True || fail "thread-starved job not predicted prep-bound at a 1 ms step: $(json "$f" 'j["predictions"][0]')"
json "$f" 'j["predictions"][1]["prediction"]["epoch_s"] < 0.75 * j["predictions"][0]["prediction"]["epoch_s"]' \
    | grep -q True || fail "prep-bound: a second thread should shorten the epoch: $(json "$f" 'j["predictions"]')"
# the restart-marker what-if: a sample is transcoded into a private temporary
# directory (removed again) and measured both ways (the ratio is a CPU-time
# measurement: a figure, its use by the model is checked in 4.)
[ -z "$(ls -A "$TMP/tmpd")" ] || fail "analyze left files in TMPDIR: $(ls -A "$TMP/tmpd")"
echo "prep-bound: $(json "$f" 'j["recommendations"][3]["text"]')"
json "$f" 'j["recommendations"][3]["what"] == "transcode" and j["measurements"]["rst_sample_items"] >= 16 and j["measurements"]["rst_cpu_ratio"] > 0' \
    | grep -q True || fail "prep-bound: no measured transcode what-if"

# 3. fetch-bound: 64 files of ~19 KB (1.2 MB) at 0.4 MB/s take >= 3 s; two
# threads prepare them in < 0.7 s even under TSan on a loaded machine
"$CLI" analyze "$TMP/data" "${common[@]}" --batch-size 16 --threads 2 --step-ms 10 --storage-mbps 0.4 \
    --predict cache_fraction=1 --predict storage_mbps=400,threads=1 --predict step_ms=10 > "$TMP/fetch.json" \
    || fail "analyze (fetch) failed"
f="$TMP/fetch.json"
# (the model's cold epoch against the measured one: a figure, printed)
echo "fetch-bound: measured $(json "$f" 'j["measured"]["bound"]'), cold measured $(json "$f" 'round(j["measured"]["cold_s"], 3)') s, model $(json "$f" 'round(j["model"]["cold_run"]["epoch_s"], 3)') s; $(json "$f" 'j["recommendations"][1]["text"]')"
measured_ok "$f"
json "$f" 'j["predictions"][2]["prediction"]["bound"] == "fetch"' | grep -q True \
    || fail "slow-storage job not predicted fetch-bound at a 10 ms step: $(json "$f" 'j["predictions"][2]')"
# the emulated storage's bytes at its rate: the model's cold epoch takes at least that
json "$f" 'j["model"]["cold_run"]["epoch_s"] >= j["measurements"]["dataset_bytes"] / 0.4e6' | grep -q True \
    || fail "fetch-bound: model of the cold run shorter than the bytes at 0.4 MB/s"
json "$f" 'len(j["predictions"]) == 3 and j["predictions"][0]["prediction"]["fetch_stall_fraction"] < 0.05' | grep -q True \
    || fail "--predict cache_fraction=1 should remove the fetch stall"

# 3b. token windows of one file: the file is listed, read and counted once
# (not windows x its size); no image to decode, so no restart-marker sample
"$PY" -c 'import numpy as np, sys; np.arange(200000, dtype=np.uint16).tofile(sys.argv[1])' "$TMP/tok.bin"
"$CLI" analyze "$TMP/tok.bin" --task tokens --context-length 64 --batch-size 8 --threads 2 --step-ms 1 \
    --max-batches 20 --seed 5 --quiet --json > "$TMP/tok.json" 2> "$TMP/tok.err" \
    || fail "analyze (tokens) failed: $(cat "$TMP/tok.err")"
f="$TMP/tok.json"
echo "tokens: $(json "$f" '{k: j["measurements"][k] for k in ("dataset_items", "dataset_files", "dataset_bytes")}')"
json "$f" '(lambda m: m["dataset_bytes"] == 400000 and m["dataset_files"] == 1 and m["dataset_items"] == 3124 and m["rst_sample_items"] == 0)(j["measurements"])' \
    | grep -q True || fail "tokens: want 3124 windows of 1 file of 400000 bytes, no sample: $(json "$f" 'j["measurements"]')"
# (the storage of a one-file dataset: that file read cold)
json "$f" 'j["measurements"]["disk_bw"] > 0' | grep -q True || fail "tokens: storage not measured on the one file"
measured_ok "$f"
! grep -q "warning: restart-marker" "$TMP/tok.err" || fail "tokens: restart-marker sample warned: $(cat "$TMP/tok.err")"

# 3c. a detection dataset: the restart-marker sample runs with the detect
# task (a COCO file naming the sampled images), measured, without a warning
"$CLI" gen --task detect "$TMP/det" --images 20 --width 160 --height 120 --quiet
"$CLI" analyze "$TMP/det/instances.json" --task detect --out-height 64 --out-width 64 --batch-size 8 --threads 2 \
    --step-ms 1 --seed 5 --quiet --json > "$TMP/det.json" 2> "$TMP/det.err" \
    || fail "analyze (detect) failed: $(cat "$TMP/det.err")"
f="$TMP/det.json"
echo "detect: restart-marker sample of $(json "$f" 'j["measurements"]["rst_sample_items"]') items, CPU ratio $(json "$f" 'round(j["measurements"]["rst_cpu_ratio"], 2)')"
! grep -q "warning" "$TMP/det.err" || fail "detect: analyze warned: $(cat "$TMP/det.err")"
json "$f" 'j["measurements"]["rst_sample_items"] == 20 and j["measurements"]["rst_cpu_ratio"] > 0 and j["measurements"]["dataset_files"] == 20' \
    | grep -q True || fail "detect: sample not measured: $(json "$f" 'j["measurements"]')"
measured_ok "$f"

# 4. the model on controlled measurements: the same verdicts and advice in
# every build and on any machine. One epoch of 192 items of 20 KB in
# batches of 16 on 2 cores; page cache and memory ample.
base=(items_per_epoch=192 dataset_items=192 dataset_bytes=3840000 batch_size=16 cores=2
      mem_available_bytes=8e9 io_depth=32 cache_minio=0 cache_bytes=0 emu_mbps=0 emu_latency_ms=0
      echo_factor=1 echo_point=1 step_cpu_s=0 disk_bw=1e9 disk_bw1=5e8 disk_latency_s=1e-4
      mem_bw=5e9 cpu_available=2 prep_items=192 prep_fetch_ns=1e6 prep_decode_ns=7e7
      prep_augment_ns=2.9e7 rst_sample_items=96 rst_cpu_ratio=0.6)
# compute: 1 ms of CPU per item on 2 threads (0.1 s) against 12 steps of 100 ms
meas "$TMP/compute.json" "$TMP/m-compute.json" "${base[@]}" threads=2 step_s=0.1 prep_cpu_s=0.192 \
    syn_seconds=1.2 syn_batches=12 warm_seconds=1.21 warm_batches=12 warm_stall_s=0.01 \
    cold_seconds=1.21 cold_batches=12 cold_stall_s=0.01
# prep: 2 ms per item on 1 thread (0.38 s) against 12 steps of 1 ms
meas "$TMP/compute.json" "$TMP/m-prep.json" "${base[@]}" threads=1 step_s=0.001 prep_cpu_s=0.384 \
    syn_seconds=0.012 syn_batches=12 warm_seconds=0.39 warm_batches=12 warm_stall_s=0.37 \
    cold_seconds=0.4 cold_batches=12 cold_stall_s=0.38
# fetch: 3.84 MB at 4 MB/s (0.96 s) against 12 steps of 10 ms and 15 ms of CPU
meas "$TMP/compute.json" "$TMP/m-fetch.json" "${base[@]}" threads=2 step_s=0.01 prep_cpu_s=0.0288 emu_mbps=4 \
    syn_seconds=0.12 syn_batches=12 warm_seconds=0.13 warm_batches=12 warm_stall_s=0.01 \
    cold_seconds=0.98 cold_batches=12 cold_stall_s=0.86
for b in compute prep fetch; do
    "$CLI" analyze --measurements "$TMP/m-$b.json" --json > "$TMP/c-$b.json" || fail "--measurements ($b) failed"
    [ "$(json "$TMP/c-$b.json" 'j["bound"]')" = $b ] || fail "controlled $b-bound job called $(json "$TMP/c-$b.json" 'j["bound"]')"
    [ "$(json "$TMP/c-$b.json" 'j["measured"]["bound"]')" = $b ] || fail "controlled $b-bound runs: measured $(json "$TMP/c-$b.json" 'j["measured"]')"
    "$CLI" analyze --measurements "$TMP/m-$b.json" > "$TMP/c-$b.txt" || fail "text report ($b) failed"
    grep -q "the job is $b-bound" "$TMP/c-$b.txt" || fail "text report does not say $b-bound: $(grep 'the job is' "$TMP/c-$b.txt")"
    grep -q "recommendations" "$TMP/c-$b.txt" || fail "text report without recommendations"
done
# the measured stalls are parts of one epoch: a cached run that waited
# longer than the whole cold epoch (a shared machine) gives all of the cold
# run's stall to prep, and without a cold run the fractions are of the
# cached epoch (both were > 1 before: divided by the cold epoch, or by 1 s)
meas "$TMP/m-prep.json" "$TMP/m-noisy.json" warm_seconds=2 warm_stall_s=1.9
meas "$TMP/m-prep.json" "$TMP/m-nocold.json" warm_seconds=3 warm_stall_s=2.7 cold_seconds=0 cold_batches=0 cold_stall_s=0
for b in noisy nocold; do
    "$CLI" analyze --measurements "$TMP/m-$b.json" --json > "$TMP/c-$b.json" || fail "--measurements ($b) failed"
    measured_ok "$TMP/c-$b.json"
done
json "$TMP/c-noisy.json" '(lambda d: abs(d["prep_stall_s"] - 0.38) < 1e-9 and d["fetch_stall_s"] == 0 and abs(d["stall_fraction"] - 0.38 / 0.4) < 1e-9)(j["measured"])' \
    | grep -q True || fail "noisy cached run: want the cold stall (0.38 s) all prep: $(json "$TMP/c-noisy.json" 'j["measured"]')"
json "$TMP/c-nocold.json" '(lambda d: abs(d["prep_stall_fraction"] - 0.9) < 1e-9 and d["fetch_stall_s"] == 0)(j["measured"])' \
    | grep -q True || fail "no cold run: want 2.7 s of 3 s prep stall: $(json "$TMP/c-nocold.json" 'j["measured"]')"
f="$TMP/c-compute.json"
json "$f" '[r["needed"] for r in j["recommendations"]] == [False, False, False, False] and j["model"]["steady_state"]["stall_fraction"] < 0.05' \
    | grep -q True || fail "controlled compute-bound: nothing should be needed: $(json "$f" '[r["text"] for r in j["recommendations"]]')"
f="$TMP/c-prep.json"
json "$f" 'j["recommendations"][0]["needed"] and j["recommendations"][0]["value"] >= 2 and j["recommendations"][0]["epoch_after_s"] < j["recommendations"][0]["epoch_before_s"]' \
    | grep -q True || fail "controlled prep-bound: should recommend cores with a gain: $(json "$f" 'j["recommendations"][0]')"
json "$f" 'not j["recommendations"][1]["needed"]' | grep -q True || fail "controlled prep-bound: no cache needed"
# the restart-marker copy: 0.6x the CPU per item helps a prep-bound job ...
json "$f" 'j["recommendations"][3]["what"] == "transcode" and j["recommendations"][3]["needed"] and j["recommendations"][3]["value"] == 0.6 and j["recommendations"][3]["epoch_after_s"] < j["recommendations"][3]["epoch_before_s"]' \
    | grep -q True || fail "controlled prep-bound: transcoding should be advised: $(json "$f" 'j["recommendations"][3]')"
"$CLI" analyze --measurements "$TMP/m-prep.json" --json --predict transcode=1 > "$TMP/tc.json" || fail "--predict transcode=1 failed"
json "$TMP/tc.json" 'j["predictions"][0]["prediction"]["epoch_s"] < j["model"]["steady_state"]["epoch_s"]' | grep -q True \
    || fail "--predict transcode=1 should predict a shorter epoch for a prep-bound job"
# cache_transcode: the same saving for the cached share only
"$CLI" analyze --measurements "$TMP/m-prep.json" --json --predict cache_fraction=1,cache_transcode=1 \
    --predict cache_fraction=0.5,cache_transcode=1 --predict cache_fraction=0.5 > "$TMP/ct.json" \
    || fail "--predict cache_transcode=1 failed"
"$PY" -c 'import json, sys; a, b = (json.load(open(p))["predictions"][0]["prediction"]["prep_stall_s"] for p in sys.argv[1:]); print(abs(a - b) <= 1e-9 * b)' \
    "$TMP/ct.json" "$TMP/tc.json" | grep -q True || fail "cache_transcode=1 with the whole dataset cached must predict what transcode=1 does"
json "$TMP/ct.json" '[p["prediction"]["prep_stall_s"] for p in j["predictions"]] == sorted(p["prediction"]["prep_stall_s"] for p in j["predictions"]) and j["predictions"][2]["prediction"]["prep_stall_s"] > j["predictions"][0]["prediction"]["prep_stall_s"]' \
    | grep -q True || fail "cache_transcode=1 should save in proportion to the cached share"
# ... and files that gain nothing (a copy already transcoded: ~1x) are told so
meas "$TMP/m-prep.json" "$TMP/m-rst.json" rst_cpu_ratio=0.98
"$CLI" analyze --measurements "$TMP/m-rst.json" --json > "$TMP/c-rst.json" || fail "--measurements (transcoded) failed"
json "$TMP/c-rst.json" '"would not help" in j["recommendations"][3]["text"]' | grep -q True \
    || fail "a transcoded copy should gain nothing from transcoding: $(json "$TMP/c-rst.json" 'j["recommendations"][3]["text"]')"
f="$TMP/c-fetch.json"
json "$f" 'j["recommendations"][1]["needed"] and 0 < j["recommendations"][1]["value"] <= 1 and j["recommendations"][1]["epoch_after_s"] < j["recommendations"][1]["epoch_before_s"]' \
    | grep -q True || fail "controlled fetch-bound: should recommend a cache: $(json "$f" 'j["recommendations"][1]')"
json "$f" 'not j["recommendations"][0]["needed"] and not j["recommendations"][3]["needed"]' | grep -q True \
    || fail "controlled fetch-bound: no cores or transcoding needed: $(json "$f" '[r["text"] for r in j["recommendations"]]')"
"$CLI" analyze --measurements "$TMP/m-fetch.json" --json --predict cache_fraction=1 > "$TMP/cf.json" || fail "--predict cache_fraction=1 failed"
json "$TMP/cf.json" 'j["predictions"][0]["prediction"]["fetch_stall_fraction"] < 0.05' | grep -q True \
    || fail "controlled fetch-bound: --predict cache_fraction=1 should remove the fetch stall"

# reads that wait (latency) with a fixed io_depth of 1: the storage advice
# is more reads in flight (--io-depth 0), not a cache, and it removes the
# fetch stall; the bandwidth-bound job above keeps its cache advice
meas "$TMP/m-fetch.json" "$TMP/lat.json" io_depth=1 emu_mbps=0 emu_latency_ms=10
"$CLI" analyze --measurements "$TMP/lat.json" --json --predict io_depth=32 > "$TMP/latr.json" || fail "analyze (latency) failed"
echo "latency-bound, io_depth 1: $(json "$TMP/latr.json" 'j["recommendations"][1]["text"]')"
json "$TMP/latr.json" 'j["bound"] == "fetch" and j["recommendations"][1]["needed"] and "--io-depth 0" in j["recommendations"][1]["text"] and j["recommendations"][1]["value"] == 0' \
    | grep -q True || fail "latency-bound: should advise --io-depth 0: $(json "$TMP/latr.json" 'j["recommendations"][1]')"
json "$TMP/latr.json" 'j["recommendations"][1]["epoch_after_s"] < 0.5 * j["recommendations"][1]["epoch_before_s"] and j["predictions"][0]["prediction"]["fetch_stall_fraction"] < 0.05' \
    | grep -q True || fail "latency-bound: io_depth 32 should remove the fetch stall"
json "$f" '"--io-depth" not in j["recommendations"][1]["text"]' | grep -q True \
    || fail "bandwidth-bound: reads in flight cannot help: $(json "$f" 'j["recommendations"][1]["text"]')"

# the partitioned cache (MPI): 4 ranks with the whole dataset between them
# remove the storage stall when the network is fast, not when it is slow
json "$f" "[r['prediction']['fetch_stall_fraction'] for r in j['whatif'] if r['group'] == 'partitioned'][-1] < 0.05" \
    | grep -q True || fail "partitioned what-if: 8 ranks should remove the fetch stall"
"$CLI" analyze --measurements "$TMP/m-fetch.json" --json --predict nodes=4,cache_fraction=0.25,net_mbps=10000 \
    --predict nodes=4,cache_fraction=0.25,net_mbps=1 > "$TMP/pc.json" || fail "--predict nodes= failed"
json "$TMP/pc.json" "j['predictions'][0]['prediction']['epoch_s'] < j['predictions'][1]['prediction']['epoch_s']" \
    | grep -q True || fail "partitioned cache: a faster network must predict a shorter epoch"
json "$TMP/pc.json" "j['predictions'][0]['config']['nodes'] == 4" | grep -q True || fail "nodes not in the config"

# 5. --measurements: the same model without running anything
f="$TMP/fetch.json"
"$CLI" analyze --measurements "$f" --json --predict cache_fraction=1 --predict storage_mbps=400,threads=1 --predict step_ms=10 \
    > "$TMP/again.json" \
    || fail "--measurements failed"
json "$TMP/again.json" "j['model'] == $(json "$f" 'j["model"]') and j['predictions'] == $(json "$f" 'j["predictions"]')" \
    | grep -q True || fail "--measurements does not reproduce the predictions"
"$CLI" analyze --measurements "$f" > "$TMP/text.txt" || fail "text report from --measurements failed"
grep -q "the job is $(json "$f" 'j["bound"]')-bound" "$TMP/text.txt" || fail "text report does not give the JSON's verdict"

# 6. errors name what is wrong
set +e
"$CLI" analyze "$TMP/data" --quiet 2> "$TMP/err"; rc=$?
[ $rc = 2 ] && grep -q -- "--step-ms" "$TMP/err" || fail "missing step: want exit 2 naming --step-ms, got $rc: $(cat "$TMP/err")"
"$CLI" analyze "$TMP/nope" --step-ms 1 --quiet 2> "$TMP/err"; rc=$?
[ $rc = 1 ] && grep -q "$TMP/nope" "$TMP/err" || fail "missing DATA: want exit 1 naming the path, got $rc: $(cat "$TMP/err")"
"$CLI" analyze --measurements "$TMP/none.json" 2> "$TMP/err"; rc=$?
[ $rc = 1 ] && grep -q "$TMP/none.json" "$TMP/err" || fail "missing measurements: want the path in the message: $(cat "$TMP/err")"
"$CLI" analyze --measurements "$f" --predict bogus=1 2> "$TMP/err" > /dev/null; rc=$?
[ $rc = 2 ] && grep -q "bogus" "$TMP/err" || fail "bad --predict key: want exit 2 naming it: $(cat "$TMP/err")"
meas "$f" "$TMP/norst.json" rst_cpu_ratio=0
"$CLI" analyze --measurements "$TMP/norst.json" --predict transcode=1 2> "$TMP/err" > /dev/null; rc=$?
[ $rc = 2 ] && grep -q "transcode" "$TMP/err" || fail "transcode=1 without a measured sample: want exit 2 naming it: $(cat "$TMP/err")"
"$CLI" analyze "$TMP/data" --step-ms 1 --threads -3 --quiet 2> "$TMP/err"; rc=$?
[ $rc = 2 ] && grep -q "threads" "$TMP/err" || fail "bad loader option: want exit 2 naming it: $(cat "$TMP/err")"
# a run that stops on too many bad items says why (the loader's reason, naming the file)
"$CLI" gen "$TMP/bad" --images 30 --classes 3 --width 96 --height 72 --seed 4 --quiet
echo junk > "$TMP/bad/class_000/zz_junk.jpg"
printf 'junk' > "$TMP/bad/class_001/zz_junk2.jpg"
"$CLI" analyze "$TMP/bad" --batch-size 4 --threads 1 --step-ms 1 --quiet 2> "$TMP/err" > /dev/null; rc=$?
[ $rc = 1 ] && grep -q "max_bad_fraction" "$TMP/err" && grep -q "zz_junk" "$TMP/err" ||
    fail "too many bad items: want exit 1 with the loader's reason naming a file, got $rc: $(cat "$TMP/err")"
set -e

# 7. the HTML report: self-contained, and its charts render in a browser
grep -q "<svg" "$TMP/r.html" || fail "report has no SVG"
if grep -Eq '(src|href)=|@import|url\(' "$TMP/r.html"; then fail "report refers to external resources"; fi
if ! command -v chromium > /dev/null 2>&1; then
    echo "chromium not installed: browser check of the report skipped"
    exit 77
fi
timeout 120 chromium --headless --no-sandbox --disable-gpu --user-data-dir="$TMP/chromium" \
    --dump-dom "file://$TMP/r.html" > "$TMP/dom.html" 2> "$TMP/chromium.log" \
    || fail "chromium could not load the report: $(tail -3 "$TMP/chromium.log")"
charts=$(grep -o 'data-charts="[0-9]*"' "$TMP/dom.html" | grep -o '[0-9]*' || true)
echo "chromium: $charts charts in the rendered report"
[ "$charts" = 5 ] || fail "rendered report: want 5 charts (breakdown + 4 what-if), got '${charts}'"
grep -q 'data-chart="breakdown"' "$TMP/dom.html" || fail "no time-breakdown chart in the DOM"
echo "ok"
