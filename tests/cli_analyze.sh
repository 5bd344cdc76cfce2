#!/usr/bin/env bash
# `nostall analyze` end to end. Real jobs, each far from any boundary so that
# the verdict cannot flip on a loaded machine or under a sanitizer (which
# prepares items 5-25x slower): one bound by a long step shows < 5% stall and
# is called compute-bound; one with a single thread and a 1 ms step is
# prep-bound and told how many cores it needs; one on very slow (emulated)
# storage is fetch-bound, told which cache removes the stall, and the model's
# cold epoch is close to the measured one. The cold run leaves the dataset
# out of the page cache. The model's decisions (verdict, recommendations,
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
    || fail "analyze (compute-bound) failed"
f="$TMP/compute.json"
echo "compute-bound: measured stall $(json "$f" 'round(j["measured"]["stall_fraction"], 3)'), predicted $(json "$f" 'round(j["model"]["steady_state"]["stall_fraction"], 3)'), bound $(json "$f" 'j["bound"]')"
[ "$(json "$f" 'j["bound"]')" = compute ] || fail "step-bound job not classified compute-bound"
[ "$(json "$f" 'j["measured"]["bound"]')" = compute ] || fail "step-bound job: measured runs show a stall: $(json "$f" 'j["measured"]')"
json "$f" 'j["measured"]["stall_fraction"] < 0.05' | grep -q True || fail "step-bound job: measured stall >= 5%"
json "$f" 'j["model"]["steady_state"]["stall_fraction"] < 0.05' | grep -q True || fail "step-bound job: predicted stall >= 5%"
# the synthetic run is the step alone: 32 sleeps of STEP ms (never shorter;
# longer only by the wake-up delays of a busy machine)
json "$f" "32 * $STEP / 1000 <= j['measured']['synthetic_s'] < 2 * 32 * $STEP / 1000" \
    | grep -q True || fail "synthetic run is not 32 x $STEP ms: $(json "$f" 'j["measured"]["synthetic_s"]') s"
json "$f" '[r["needed"] for r in j["recommendations"]] == [False, False, False, False]' | grep -q True \
    || fail "step-bound job: no recommendation should be needed: $(json "$f" '[r["text"] for r in j["recommendations"]]')"
json "$f" 'len(j["recommendations"]) == 4 and all(r["text"].startswith(w) for r, w in zip(j["recommendations"], ("Preprocessing:", "Storage:", "Echoing:", "Decoding:")))' \
    | grep -q True || fail "recommendations must say what they are about: $(json "$f" 'j["recommendations"]')"
json "$f" 'j["measurements"]["dataset_bytes"]' > "$TMP/bytes"
want=$(find "$TMP/data" -type f -name '*.jpg' -printf '%s\n' | awk '{s+=$1} END {print s}')
[ "$(cat "$TMP/bytes")" = "$want" ] || fail "dataset_bytes $(cat "$TMP/bytes") != $want (stat of every file)"
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
[ -n "${NOSTALL_LIBRARY:-}" ] && nm -D "$NOSTALL_LIBRARY" 2>/dev/null | grep -qE ' __(asan|tsan)_' \
    && big=(--images 24 --width 400 --height 300)
"$CLI" gen "$TMP/big" "${big[@]}" --quality 60 --classes 2 --quiet
mkdir -p "$TMP/tmpd"
# (a relative TMPDIR: the sample's file list must not depend on it)
(cd "$TMP" && TMPDIR=tmpd "$CLI" analyze "$TMP/big" "${common[@]}" --crop 224 --batch-size 16 --threads 1 --step-ms 1) \
    > "$TMP/prep.json" || fail "analyze (prep) failed"
f="$TMP/prep.json"
echo "prep-bound: bound $(json "$f" 'j["bound"]'), measured prep stall $(json "$f" 'round(j["measured"]["prep_stall_s"], 3)') s, fetch stall $(json "$f" 'round(j["measured"]["fetch_stall_s"], 3)') s; $(json "$f" 'j["recommendations"][0]["text"]')"
[ "$(json "$f" 'j["bound"]')" = prep ] || fail "thread-starved job not classified prep-bound"
[ "$(json "$f" 'j["measured"]["bound"]')" = prep ] || fail "measured runs do not show a prep stall: $(json "$f" 'j["measured"]')"
# more cores are needed: at least 2 (with the gain predicted), or, when
# items cost more than a step on any machine up to 64x this one (TSan),
# none is enough -- never "1 is enough"
json "$f" 'j["recommendations"][0]["needed"] and (j["recommendations"][0]["value"] in (-1, None) or j["recommendations"][0]["value"] >= 2 and j["recommendations"][0]["epoch_after_s"] < j["recommendations"][0]["epoch_before_s"])' \
    | grep -q True || fail "prep-bound: should recommend at least 2 cores: $(json "$f" 'j["recommendations"][0]')"
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
    --predict cache_fraction=1 --predict storage_mbps=400,threads=1 > "$TMP/fetch.json" || fail "analyze (fetch) failed"
f="$TMP/fetch.json"
echo "fetch-bound: cold measured $(json "$f" 'round(j["measured"]["cold_s"], 3)') s, model $(json "$f" 'round(j["model"]["cold_run"]["epoch_s"], 3)') s; $(json "$f" 'j["recommendations"][1]["text"]')"
[ "$(json "$f" 'j["bound"]')" = fetch ] || fail "slow-storage job not classified fetch-bound"
[ "$(json "$f" 'j["measured"]["bound"]')" = fetch ] || fail "measured runs do not show a fetch stall: $(json "$f" 'j["measured"]')"
json "$f" 'j["recommendations"][1]["needed"] and 0 < j["recommendations"][1]["value"] <= 1' | grep -q True \
    || fail "fetch-bound: should recommend a cache fraction"
json "$f" 'abs(j["model"]["cold_run"]["epoch_s"] / j["measured"]["cold_s"] - 1) < 0.25' | grep -q True \
    || fail "fetch-bound: model of the cold run off by more than 25%"
json "$f" 'len(j["predictions"]) == 2 and j["predictions"][0]["prediction"]["fetch_stall_fraction"] < 0.05' | grep -q True \
    || fail "--predict cache_fraction=1 should remove the fetch stall"

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
"$CLI" analyze --measurements "$f" --json --predict cache_fraction=1 --predict storage_mbps=400,threads=1 > "$TMP/again.json" \
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
