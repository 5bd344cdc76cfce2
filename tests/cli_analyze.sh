#!/usr/bin/env bash
# `nostall analyze` end to end: a job bound by its step shows < 5% stall and
# is called compute-bound; one with too few threads for its step is
# prep-bound and told how many cores it needs; one on slow (emulated)
# storage is fetch-bound and told which cache removes the stall, and the
# model's cold epoch is close to the measured one. The cold run leaves the
# dataset out of the page cache. --json reads back with --measurements (same
# predictions), --predict adds rows, errors name what is wrong, and the HTML
# report is self-contained and shows its charts in a real browser (chromium).
source "$(dirname "$0")/lib_cli.sh"

"$CLI" gen "$TMP/data" --images 192 --classes 4 --width 200 --height 150 --quiet
common=(--batch-size 16 --crop 64 --seed 5 --quiet --json)

# Which resource bounds a job is a matter of speed: sanitizer builds prepare
# items 5-20x slower, so there the classification checks only report (the
# release build asserts them); everything else is asserted in every build.
STEP=15
tfail() { fail "$@"; }
[ -n "${NOSTALL_LIBRARY:-}" ] && nm -D "$NOSTALL_LIBRARY" > "$TMP/syms" 2>/dev/null || true
if grep -qE ' __(asan|tsan)_' "$TMP/syms" 2>/dev/null; then
    tfail() { echo "note (sanitizer build, timing not asserted): $*"; }
fi

# 1. step-bound: 24 batches x STEP ms, two threads prepare a batch of 8 in a ms or two
"$CLI" analyze "$TMP/data" "${common[@]}" --batch-size 8 --threads 2 --step-ms $STEP --report "$TMP/r.html" > "$TMP/compute.json" \
    || fail "analyze (compute-bound) failed"
f="$TMP/compute.json"
echo "compute-bound: measured stall $(json "$f" 'round(j["measured"]["stall_fraction"], 3)'), predicted $(json "$f" 'round(j["model"]["steady_state"]["stall_fraction"], 3)'), bound $(json "$f" 'j["bound"]')"
[ "$(json "$f" 'j["bound"]')" = compute ] || tfail "step-bound job not classified compute-bound"
json "$f" 'j["measured"]["stall_fraction"] < 0.05' | grep -q True || tfail "step-bound job: measured stall >= 5%"
json "$f" 'j["model"]["steady_state"]["stall_fraction"] < 0.05' | grep -q True || tfail "step-bound job: predicted stall >= 5%"
# the synthetic run is the step alone: 24 steps of STEP ms
json "$f" "abs(j['measured']['synthetic_s'] - 24 * $STEP / 1000) < 0.05 + 0.05 * 24 * $STEP / 1000" \
    | grep -q True || fail "synthetic run is not 24 x $STEP ms"
json "$f" '[r["needed"] for r in j["recommendations"]] == [False, False, False, False]' | grep -q True \
    || tfail "step-bound job: no recommendation should be needed"
json "$f" 'len(j["recommendations"]) == 4 and all(r["text"].startswith(w) for r, w in zip(j["recommendations"], ("Preprocessing:", "Storage:", "Echoing:", "Decoding:")))' \
    | grep -q True || fail "recommendations must say what they are about: $(json "$f" 'j["recommendations"]')"
json "$f" 'j["measurements"]["dataset_bytes"]' > "$TMP/bytes"
want=$(find "$TMP/data" -type f -name '*.jpg' -printf '%s\n' | awk '{s+=$1} END {print s}')
[ "$(cat "$TMP/bytes")" = "$want" ] || fail "dataset_bytes $(cat "$TMP/bytes") != $want (stat of every file)"
json "$f" 'j["measurements"]["disk_bw"] > 0 and j["measurements"]["mem_bw"] > 1e8' | grep -q True \
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

# 2. prep-bound: one thread cannot prepare 8 items of 500x375 (~1 ms each) in 1 ms
"$CLI" gen "$TMP/big" --images 96 --classes 2 --quiet
mkdir -p "$TMP/tmpd"
# (a relative TMPDIR: the sample's file list must not depend on it)
(cd "$TMP" && TMPDIR=tmpd "$CLI" analyze "$TMP/big" "${common[@]}" --batch-size 8 --threads 1 --step-ms 1) \
    > "$TMP/prep.json" || fail "analyze (prep) failed"
f="$TMP/prep.json"
echo "prep-bound: bound $(json "$f" 'j["bound"]'); $(json "$f" 'j["recommendations"][0]["text"]')"
[ "$(json "$f" 'j["bound"]')" = prep ] || tfail "thread-starved job not classified prep-bound"
[ "$(json "$f" 'j["measured"]["bound"]')" = prep ] || tfail "measured runs do not show a prep stall"
json "$f" 'j["recommendations"][0]["needed"] and j["recommendations"][0]["value"] >= 2' | grep -q True \
    || tfail "prep-bound: should recommend at least 2 cores"
json "$f" 'j["recommendations"][0]["epoch_after_s"] < j["recommendations"][0]["epoch_before_s"]' | grep -q True \
    || tfail "prep-bound: the cores recommendation must predict a gain"
# the restart-marker what-if: a sample is transcoded into a private temporary
# directory (removed again) and measured both ways; the prep-bound job is told
# what `nostall transcode` saves, and --predict transcode=1 models it
[ -z "$(ls -A "$TMP/tmpd")" ] || fail "analyze left files in TMPDIR: $(ls -A "$TMP/tmpd")"
echo "prep-bound: $(json "$f" 'j["recommendations"][3]["text"]')"
json "$f" 'j["recommendations"][3]["what"] == "transcode" and j["measurements"]["rst_sample_items"] >= 16' \
    | grep -q True || fail "prep-bound: no measured transcode what-if"
json "$f" '0 < j["recommendations"][3]["value"] < 0.9 and j["recommendations"][3]["needed"]' | grep -q True \
    || tfail "prep-bound: the restart-marker copy should need less CPU per item"
json "$f" 'j["recommendations"][3]["epoch_after_s"] < j["recommendations"][3]["epoch_before_s"]' | grep -q True \
    || tfail "prep-bound: the transcode recommendation must predict a gain"
"$CLI" analyze --measurements "$f" --json --predict transcode=1 > "$TMP/tc.json" || fail "--predict transcode=1 failed"
json "$TMP/tc.json" 'j["predictions"][0]["prediction"]["epoch_s"] < j["model"]["steady_state"]["epoch_s"]' | grep -q True \
    || tfail "--predict transcode=1 should predict a shorter epoch for a prep-bound job"
# cache_transcode: the same saving for the cached share only
"$CLI" analyze --measurements "$f" --json --predict cache_fraction=1,cache_transcode=1 \
    --predict cache_fraction=0.5,cache_transcode=1 --predict cache_fraction=0.5 > "$TMP/ct.json" \
    || fail "--predict cache_transcode=1 failed"
"$PY" -c 'import json, sys; a, b = (json.load(open(p))["predictions"][0]["prediction"]["prep_stall_s"] for p in sys.argv[1:]); print(abs(a - b) <= 1e-9 * b)' \
    "$TMP/ct.json" "$TMP/tc.json" | grep -q True || fail "cache_transcode=1 with the whole dataset cached must predict what transcode=1 does"
json "$TMP/ct.json" '[p["prediction"]["prep_stall_s"] for p in j["predictions"]] == sorted(p["prediction"]["prep_stall_s"] for p in j["predictions"]) and j["predictions"][2]["prediction"]["prep_stall_s"] > j["predictions"][0]["prediction"]["prep_stall_s"]' \
    | grep -q True || tfail "cache_transcode=1 should save in proportion to the cached share"
# an already transcoded copy: nothing to gain, and said so
"$CLI" transcode "$TMP/big" "$TMP/big-rst" --quiet > /dev/null || fail "transcode failed"
"$CLI" analyze "$TMP/big-rst" "${common[@]}" --batch-size 8 --threads 1 --step-ms 1 > "$TMP/prep-rst.json" \
    || fail "analyze (prep, transcoded) failed"
json "$TMP/prep-rst.json" 'j["recommendations"][3]["value"] >= 0.9' | grep -q True \
    || tfail "a transcoded copy should gain nothing from transcoding: $(json "$TMP/prep-rst.json" 'j["recommendations"][3]["text"]')"

# 3. fetch-bound: 192 files of ~10 KB at 4 MB/s is ~0.5 s; the step needs 0.12 s
"$CLI" analyze "$TMP/data" "${common[@]}" --threads 2 --step-ms 10 --storage-mbps 4 \
    --predict cache_fraction=1 --predict storage_mbps=400,threads=1 > "$TMP/fetch.json" || fail "analyze (fetch) failed"
f="$TMP/fetch.json"
echo "fetch-bound: cold measured $(json "$f" 'round(j["measured"]["cold_s"], 3)') s, model $(json "$f" 'round(j["model"]["cold_run"]["epoch_s"], 3)') s; $(json "$f" 'j["recommendations"][1]["text"]')"
[ "$(json "$f" 'j["bound"]')" = fetch ] || tfail "slow-storage job not classified fetch-bound"
[ "$(json "$f" 'j["measured"]["bound"]')" = fetch ] || tfail "measured runs do not show a fetch stall"
json "$f" 'j["recommendations"][1]["needed"] and 0 < j["recommendations"][1]["value"] <= 1' | grep -q True \
    || tfail "fetch-bound: should recommend a cache fraction"
json "$f" 'abs(j["model"]["cold_run"]["epoch_s"] / j["measured"]["cold_s"] - 1) < 0.25' | grep -q True \
    || tfail "fetch-bound: model of the cold run off by more than 25%"
json "$f" 'len(j["predictions"]) == 2 and j["predictions"][0]["prediction"]["fetch_stall_fraction"] < 0.05' | grep -q True \
    || tfail "--predict cache_fraction=1 should remove the fetch stall"

# reads that wait (latency) with a fixed io_depth of 1: the storage advice
# is more reads in flight (--io-depth 0), not a cache, and it removes the
# fetch stall; the bandwidth-bound job above keeps its cache advice
/usr/bin/python3 -c "import json,sys; j=json.load(open(sys.argv[1])); m=j['measurements']; m.update(io_depth=1, emu_mbps=0, emu_latency_ms=10); json.dump(m,open(sys.argv[2],'w'))" "$f" "$TMP/lat.json"
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
    | grep -q True || tfail "partitioned what-if: 8 ranks should remove the fetch stall"
"$CLI" analyze --measurements "$f" --json --predict nodes=4,cache_fraction=0.25,net_mbps=10000 \
    --predict nodes=4,cache_fraction=0.25,net_mbps=1 > "$TMP/pc.json" || fail "--predict nodes= failed"
json "$TMP/pc.json" "j['predictions'][0]['prediction']['epoch_s'] < j['predictions'][1]['prediction']['epoch_s']" \
    | grep -q True || fail "partitioned cache: a faster network must predict a shorter epoch"
json "$TMP/pc.json" "j['predictions'][0]['config']['nodes'] == 4" | grep -q True || fail "nodes not in the config"

# 4. --measurements: the same model without running anything
"$CLI" analyze --measurements "$f" --json --predict cache_fraction=1 --predict storage_mbps=400,threads=1 > "$TMP/again.json" \
    || fail "--measurements failed"
json "$TMP/again.json" "j['model'] == $(json "$f" 'j["model"]') and j['predictions'] == $(json "$f" 'j["predictions"]')" \
    | grep -q True || fail "--measurements does not reproduce the predictions"
"$CLI" analyze --measurements "$f" > "$TMP/text.txt" || fail "text report from --measurements failed"
grep -q "fetch-bound" "$TMP/text.txt" || fail "text report does not say fetch-bound"
grep -q "recommendations" "$TMP/text.txt" || fail "text report without recommendations"

# 5. errors name what is wrong
set +e
"$CLI" analyze "$TMP/data" --quiet 2> "$TMP/err"; rc=$?
[ $rc = 2 ] && grep -q -- "--step-ms" "$TMP/err" || fail "missing step: want exit 2 naming --step-ms, got $rc: $(cat "$TMP/err")"
"$CLI" analyze "$TMP/nope" --step-ms 1 --quiet 2> "$TMP/err"; rc=$?
[ $rc = 1 ] && grep -q "$TMP/nope" "$TMP/err" || fail "missing DATA: want exit 1 naming the path, got $rc: $(cat "$TMP/err")"
"$CLI" analyze --measurements "$TMP/none.json" 2> "$TMP/err"; rc=$?
[ $rc = 1 ] && grep -q "$TMP/none.json" "$TMP/err" || fail "missing measurements: want the path in the message: $(cat "$TMP/err")"
"$CLI" analyze --measurements "$f" --predict bogus=1 2> "$TMP/err" > /dev/null; rc=$?
[ $rc = 2 ] && grep -q "bogus" "$TMP/err" || fail "bad --predict key: want exit 2 naming it: $(cat "$TMP/err")"
/usr/bin/python3 -c "import json,sys; j=json.load(open(sys.argv[1])); m=j['measurements']; m['rst_cpu_ratio']=0; json.dump(m,open(sys.argv[2],'w'))" "$f" "$TMP/norst.json"
"$CLI" analyze --measurements "$TMP/norst.json" --predict transcode=1 2> "$TMP/err" > /dev/null; rc=$?
[ $rc = 2 ] && grep -q "transcode" "$TMP/err" || fail "transcode=1 without a measured sample: want exit 2 naming it: $(cat "$TMP/err")"
"$CLI" analyze --measurements "$f" --predict bogus=1 2> "$TMP/err" > /dev/null; rc=$?
[ $rc = 2 ] && grep -q "bogus" "$TMP/err" || fail "bad --predict key: want exit 2 naming it: $(cat "$TMP/err")"
"$CLI" analyze "$TMP/data" --step-ms 1 --threads -3 --quiet 2> "$TMP/err"; rc=$?
[ $rc = 2 ] && grep -q "threads" "$TMP/err" || fail "bad loader option: want exit 2 naming it: $(cat "$TMP/err")"
set -e

# 6. the HTML report: self-contained, and its charts render in a browser
grep -q "<svg" "$TMP/r.html" || fail "report has no SVG"
if grep -Eq '(src|href)=|@import|url\(' "$TMP/r.html"; then fail "report refers to external resources"; fi
if ! command -v chromium > /dev/null 2>&1; then
    echo "chromium not installed: browser check of the report skipped"
    exit 77
fi
timeout 60 chromium --headless --no-sandbox --disable-gpu --user-data-dir="$TMP/chromium" \
    --dump-dom "file://$TMP/r.html" > "$TMP/dom.html" 2> "$TMP/chromium.log" \
    || fail "chromium could not load the report: $(tail -3 "$TMP/chromium.log")"
charts=$(grep -o 'data-charts="[0-9]*"' "$TMP/dom.html" | grep -o '[0-9]*' || true)
echo "chromium: $charts charts in the rendered report"
[ "$charts" = 5 ] || fail "rendered report: want 5 charts (breakdown + 4 what-if), got '${charts}'"
grep -q 'data-chart="breakdown"' "$TMP/dom.html" || fail "no time-breakdown chart in the DOM"
echo "ok"
