#!/usr/bin/env bash
# task=detect end to end through the CLI: `nostall gen --task detect` writes a
# valid COCO dataset (and the classification generator's files do not
# change); `nostall bench` gives one checksum for 1, 2 and 3 threads (train
# with the IoU crop and with RRC, eval, echoing at fetch); a malformed
# annotation file fails naming its line and column; a file_name leaving the
# image root fails create without quoting the file; members nostall does
# not use cost no memory, an over-large tree is refused naming
# max_annotation_bytes; gen's folder stands for its instances.json; COCO
# shards are said to be unread; box_labels=category_id; a coordinated group of
# two jobs delivers the bytes of a job alone and prepares each item once;
# `nostall analyze` calls a thread-starved detection job prep-bound and one
# on very slow storage fetch-bound.
source "$(dirname "$0")/lib_cli.sh"

# 1. the generator
"$CLI" gen --task detect "$TMP/d" --images 48 --classes 5 --objects 5 --width 96 --height 72 --seed 4 --quiet
"$PY" - "$TMP/d" <<'PYEOF' || fail "generated dataset is not what it should be"
import json, os, sys
from PIL import Image
root = sys.argv[1]
j = json.load(open(os.path.join(root, "instances.json")))
assert len(j["images"]) == 48 and [c["id"] for c in j["categories"]] == [1, 2, 3, 4, 6]
ids = {c["id"] for c in j["categories"]}
sizes = {}
for im in j["images"]:
    w, h = Image.open(os.path.join(root, im["file_name"])).size
    assert (w, h) == (im["width"], im["height"]) == (96, 72)
    sizes[im["id"]] = (w, h)
assert len(j["annotations"]) >= 48 and any(a["iscrowd"] for a in j["annotations"])
for a in j["annotations"]:
    x, y, w, h = a["bbox"]
    W, H = sizes[a["image_id"]]
    assert a["category_id"] in ids and 0 <= x and 0 <= y and w > 0 and h > 0 and x + w <= W and y + h <= H
print("gen: %d images, %d boxes, %d crowds" % (len(j["images"]), len(j["annotations"]),
                                               sum(a["iscrowd"] for a in j["annotations"])))
PYEOF
"$CLI" gen --task detect --help | grep -q -- "--objects" || fail "gen --task detect --help"
if "$CLI" gen --task segment "$TMP/x" 2> "$TMP/err"; then fail "gen --task segment accepted"; fi
grep -q "classify, detect or audio" "$TMP/err" || fail "bad --task not explained: $(cat "$TMP/err")"
# the classification generator is unchanged by --task classify
"$CLI" gen "$TMP/c1" --images 6 --classes 2 --width 40 --height 30 --quiet
"$CLI" gen "$TMP/c2" --images 6 --classes 2 --width 40 --height 30 --task classify --quiet
diff -r "$TMP/c1" "$TMP/c2" > /dev/null || fail "gen --task classify wrote other files"

# 2. one checksum for any thread count
ann="$TMP/d/instances.json"
common=(--task detect --batch-size 5 --out-height 48 --out-width 48 --max-boxes 6 --epochs 2 --json --quiet)
n=0
for conf in "--box-crop iou --output float" "--box-crop rrc --output uint8" "--mode eval --output uint8" \
            "--echo-factor 2 --echo-point fetch --output uint8"; do
    n=$((n + 1))
    sums=()
    for t in 1 2 3; do
        "$CLI" bench "$ann" "${common[@]}" $conf --threads $t --seed 7 > "$TMP/c$n-t$t.json" || fail "bench $conf failed"
        sums+=("$(json "$TMP/c$n-t$t.json" 'j["checksum"]')")
    done
    echo "$conf: threads 1 ${sums[0]}, 2 ${sums[1]}, 3 ${sums[2]}"
    [ "${sums[0]}" = "${sums[1]}" ] && [ "${sums[0]}" = "${sums[2]}" ] || fail "$conf: checksums differ across threads"
done
"$CLI" bench "$ann" "${common[@]}" --box-crop iou --output float --threads 2 --seed 8 > "$TMP/s8.json"
[ "$(json "$TMP/s8.json" 'j["checksum"]')" != "$(json "$TMP/c1-t1.json" 'j["checksum"]')" ] || fail "seed ignored"
[ "$(json "$TMP/c4-t1.json" 'j["items"]')" = 192 ] || fail "echoed epochs: want 2 x 2 x 48 items"

# 3. malformed annotations: the line and column
# (jansson places the error at the last character of the token it names)
printf '{"images": [\n  {"id": 1, "file_name": "a.jpg", "width": 3 "height": 3}]}\n' > "$TMP/bad.json"
if "$CLI" bench "$TMP/bad.json" --task detect --quiet 2> "$TMP/err"; then fail "bad JSON accepted"; fi
grep -q "bad.json:2:53: JSON syntax error: .*near .\"height\"." "$TMP/err" || fail "syntax error not located: $(cat "$TMP/err")"

# 3b. annotation files from elsewhere
# a file_name leaving the image root fails create, naming the entry and the
# option, without quoting a byte of the file
mkdir -p "$TMP/x/root" "$TMP/x/secret"
printf 'aws_secret_access_key = AKIASECRETBYTES\n' > "$TMP/x/secret/credentials"
printf '{"images": [{"id": 1, "file_name": "../secret/credentials", "width": 4, "height": 4}], "categories": [], "annotations": []}\n' > "$TMP/x/root/ann.json"
if "$CLI" bench "$TMP/x/root/ann.json" --task detect --quiet > "$TMP/out" 2> "$TMP/err"; then fail "../secret/credentials read"; fi
grep -q 'file_name "../secret/credentials" leaves the image root' "$TMP/err" && grep -q "allow_outside_root=1" "$TMP/err" ||
    fail "outside the root: $(cat "$TMP/err")"
if grep -q AKIA "$TMP/err" "$TMP/out"; then fail "the outside file's bytes were quoted: $(cat "$TMP/err")"; fi
# members nostall does not use cost nothing: 4 MB of {} in "info" read
# within an 8 MB limit; 3 MB of {} among the annotations refused before the
# JSON tree is built, naming the file and the limit
"$PY" - "$TMP/x" <<'PYEOF2'
import sys
d = sys.argv[1]
img = '"images": [{"id": 1, "file_name": "../../d/images/img_000000.jpg", "width": 96, "height": 72}], "categories": [{"id": 1}]'
open(d + "/root/ignored.json", "w").write('{"info": [' + ",".join(["{}"] * 2000000) + '], ' + img + ', "annotations": []}')
open(d + "/root/heavy.json", "w").write('{' + img + ', "annotations": [' + ",".join(["{}"] * 1000000) + ']}')
PYEOF2
"$CLI" bench "$TMP/x/root/ignored.json" --task detect --allow-outside-root 1 --max-annotation-bytes 8M --batch-size 1 \
    --out-height 16 --out-width 16 --epochs 1 --json --quiet > "$TMP/ign.json" || fail "ignored members over the limit"
[ "$(json "$TMP/ign.json" 'j["items"]')" = 1 ] || fail "ignored members: $(cat "$TMP/ign.json")"
if "$CLI" bench "$TMP/x/root/heavy.json" --task detect --max-annotation-bytes 8M --quiet 2> "$TMP/err"; then fail "heavy annotations accepted"; fi
grep -q "heavy.json: reading it takes about .* over max_annotation_bytes=8388608" "$TMP/err" || fail "over the limit: $(cat "$TMP/err")"
# the folder gen wrote stands for its instances.json (the same checksum)
"$CLI" bench "$TMP/d" "${common[@]}" --threads 2 --seed 7 --box-crop iou --output float > "$TMP/dir.json" || fail "bench DIR failed"
[ "$(json "$TMP/dir.json" 'j["checksum"]')" = "$(json "$TMP/c1-t1.json" 'j["checksum"]')" ] || fail "bench DIR: another checksum"
# COCO shards (pack --coco-webdataset) are said to be unread, as a folder and as a .tar
"$CLI" pack "$ann" "$TMP/shards" --coco-webdataset --quiet > /dev/null
if "$CLI" bench "$TMP/shards" --task detect --quiet 2> "$TMP/err"; then fail "COCO shards folder read"; fi
grep -q "a directory of tar shards: task=detect does not read shards" "$TMP/err" || fail "shards folder: $(cat "$TMP/err")"
if "$CLI" bench "$TMP/shards/shard-000000.tar" --task detect --quiet 2> "$TMP/err"; then fail "COCO shard read"; fi
grep -q "a tar archive: task=detect does not read shards" "$TMP/err" || fail "a shard: $(cat "$TMP/err")"
# box_labels=category_id: COCO's ids (the delivered bytes change)
"$CLI" bench "$ann" "${common[@]}" --box-crop iou --output float --threads 2 --seed 7 --box-labels category_id > "$TMP/ids.json" ||
    fail "--box-labels category_id failed"
[ "$(json "$TMP/ids.json" 'j["checksum"]')" != "$(json "$TMP/c1-t1.json" 'j["checksum"]')" ] || fail "--box-labels category_id changed nothing"

# 4. a coordinated group of two (a slow and a fast job): each delivers every
# epoch with the bytes of a job alone, each item prepared once
[ -d /dev/shm ] || { echo "SKIP: no /dev/shm"; exit 77; }
G=det$$
trap 'coord_kill; rm -f /dev/shm/nostall-*-$G* || true; rm -rf "$TMP" $SHM_DIRS' EXIT
solo=(--task detect --batch-size 4 --out-height 40 --out-width 40 --epochs 3 --threads 1 --seed 2 --json --quiet)
"$CLI" bench "$ann" "${solo[@]}" > "$TMP/solo.json"
coord_group $G "$TMP/solo.json" "100 10" "$ann" "${solo[@]}"

# 5. the analyzer: prep-bound (one thread, no step at all, 500x375 images to
# 224x224: a 1 ms step was only ~5x shorter than a batch's prep, and a sleep
# that wakes late on a loaded machine made the measured job compute-bound
# once in four fresh-clone runs; the prediction at exactly 1 ms is
# predicted_prep's) and fetch-bound (64 files of ~16 KB at 0.4 MB/s take >= 2.5 s;
# two threads prepare them, to 48x48, far faster). Sanitizer builds get fewer,
# smaller images for the prep-bound job (as tests/cli_analyze.sh does).
big=(--images 192 --width 500 --height 375)
[ -n "${NOSTALL_LIBRARY:-}" ] && nm -D "$NOSTALL_LIBRARY" 2>/dev/null | grep -E ' __(asan|tsan)_' > /dev/null \
    && big=(--images 24 --width 400 --height 300)
"$CLI" gen --task detect "$TMP/big" "${big[@]}" --quality 60 --quiet
in_memory "$TMP/big" bigm # (tmpfs: the cold run cannot wait on a busy disk)
"$CLI" analyze "$bigm/instances.json" --task detect --out-height 224 --out-width 224 --batch-size 16 \
    --threads 1 --step-ms 0 --predict step_ms=1 --seed 5 --quiet --json > "$TMP/prep.json" || fail "analyze (prep) failed"
f="$TMP/prep.json"
echo "prep-bound: bound $(json "$f" 'j["bound"]'), measured $(json "$f" 'j["measured"]["bound"]'); $(json "$f" 'j["recommendations"][0]["text"]')"
predicted_prep "$f" detection
json "$f" 'j["recommendations"][0]["needed"]' | grep -q True || fail "prep-bound: more cores should be recommended"

"$CLI" gen --task detect "$TMP/mid" --images 64 --width 240 --height 180 --quiet
"$CLI" analyze "$TMP/mid/instances.json" --task detect --out-height 48 --out-width 48 --batch-size 16 --threads 2 --step-ms 10 \
    --storage-mbps 0.4 --seed 5 --quiet --json > "$TMP/fetch.json" || fail "analyze (fetch) failed"
f="$TMP/fetch.json"
echo "fetch-bound: bound $(json "$f" 'j["bound"]'), measured $(json "$f" 'j["measured"]["bound"]'); $(json "$f" 'j["recommendations"][1]["text"]')"
[ "$(json "$f" 'j["bound"]')" = fetch ] || fail "slow-storage detection job not classified fetch-bound"
[ "$(json "$f" 'j["measured"]["bound"]')" = fetch ] || fail "measured runs do not show a fetch stall: $(json "$f" 'j["measured"]')"
json "$f" 'j["recommendations"][1]["needed"]' | grep -q True || fail "fetch-bound: a cache should be recommended"
echo "PASS"
