#!/usr/bin/env bash
# nostall pack end to end: the shards of an ImageFolder, read by Python's
# tarfile with webdataset's grouping rule, hold every image byte for byte
# with its .cls label, in the folder's order, as ustar members; every shard
# fits --shard-bytes; the bytes are the same for any --threads and for the
# same --shuffle seed (a permutation of the samples); the sidecar index
# files describe the shards as a header pass does; a list with labels; a
# COCO set refused without --coco-webdataset (no nostall loader reads it),
# with it KEY.json: the image's object, its annotations, the category ids;
# a file_name leaving the image root refused without --allow-outside-root,
# and no member name with ".." or a leading '/'; --transcode rewrites the JPEGs as `nostall transcode` does;
# `pack --index` writes index files for shards it did not write; a file
# that cannot be read is reported and left out (exit 1); refusals (a
# non-empty DST, float labels, bad options).
source "$(dirname "$0")/lib_cli.sh"

"$CLI" gen "$TMP/data" --images 30 --classes 3 --width 64 --height 48 --quiet
"$CLI" pack "$TMP/data" "$TMP/s1" --shard-bytes 40K --threads 1 --quiet > "$TMP/pack.out"
grep -q "pack: 30 samples in [0-9]* shards" "$TMP/pack.out" || fail "summary: $(cat "$TMP/pack.out")"
nshards=$(ls "$TMP/s1"/shard-*.tar | wc -l)
[ "$nshards" -ge 3 ] || fail "40K shards of 30 images: only $nshards shards"
[ "$(ls "$TMP/s1"/shard-*.tar.nstidx | wc -l)" = "$nshards" ] || fail "a shard without its index file"

# what webdataset reads: members grouped by key, the image's bytes and the label
"$PY" - "$TMP/data" "$TMP/s1" 40960 <<'EOF' || fail "the shards are not the dataset (see above)"
import glob, os, re, sys, tarfile
data, shards, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
rx = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")   # webdataset's base_plus_ext
samples = []
for path in sorted(glob.glob(os.path.join(shards, "shard-*.tar"))):
    size = os.path.getsize(path)
    with tarfile.open(path) as t:
        members = t.getmembers()
        assert size <= limit or len({rx.match(m.name).group(1) for m in members}) == 1, (path, size)
        assert t.format in (tarfile.USTAR_FORMAT, tarfile.PAX_FORMAT, tarfile.GNU_FORMAT)
        cur = None
        for m in members:
            assert m.isreg() and m.mode == 0o444 and m.uid == 0 and m.mtime == 0, m.name
            key, ext = rx.match(m.name).groups()
            if cur is None or cur["__key__"] != key:
                cur = {"__key__": key}
                samples.append(cur)
            assert ext not in cur, "duplicate " + m.name
            cur[ext] = t.extractfile(m).read()
classes = sorted(os.listdir(data))
want = [(c, f) for ci, c in enumerate(classes) for f in sorted(os.listdir(os.path.join(data, c)))]
assert len(samples) == len(want), (len(samples), len(want))
for s, (c, f) in zip(samples, want):
    assert s["__key__"] == c + "/" + f.rsplit(".", 1)[0], (s["__key__"], c, f)
    assert set(s) == {"__key__", "jpg", "cls"}, set(s)
    assert s["jpg"] == open(os.path.join(data, c, f), "rb").read(), s["__key__"]
    assert int(s["cls"]) == classes.index(c)
EOF

# the same bytes for any thread count
"$CLI" pack "$TMP/data" "$TMP/s2" --shard-bytes 40K --threads 2 --quiet > /dev/null
for f in "$TMP/s1"/*; do cmp -s "$f" "$TMP/s2/$(basename "$f")" || fail "threads 1 and 2 differ: $(basename "$f")"; done

# --shuffle: a permutation, the same for the same seed, another for another seed
"$CLI" pack "$TMP/data" "$TMP/sh1" --shuffle 7 --threads 2 --quiet > /dev/null
"$CLI" pack "$TMP/data" "$TMP/sh2" --shuffle 7 --threads 1 --quiet > /dev/null
"$CLI" pack "$TMP/data" "$TMP/sh3" --shuffle 8 --quiet > /dev/null
cmp -s "$TMP/sh1/shard-000000.tar" "$TMP/sh2/shard-000000.tar" || fail "--shuffle 7 twice: different shards"
cmp -s "$TMP/sh1/shard-000000.tar" "$TMP/sh3/shard-000000.tar" && fail "--shuffle 7 and 8: the same order"
"$PY" - "$TMP/sh1/shard-000000.tar" "$TMP/s1" <<'EOF' || fail "--shuffle lost or repeated samples"
import glob, sys, tarfile
a = sorted(m.name for m in tarfile.open(sys.argv[1]).getmembers())
b = sorted(m.name for p in glob.glob(sys.argv[2] + "/*.tar") for m in tarfile.open(p).getmembers())
order = [m.name for m in tarfile.open(sys.argv[1]).getmembers()]
assert a == b and order != sorted(order, key=lambda n: b.index(n)), "not a permutation"
EOF

# the index files say what a header pass over the shards says: the loader's
# index from them and from the tars alone are the same items
mkdir "$TMP/bare"
cp "$TMP/s1"/*.tar "$TMP/bare/"
"$CLI" pack --index "$TMP/bare"/*.tar > "$TMP/index.out"
[ "$(grep -c "30 samples\|samples" "$TMP/index.out")" = "$nshards" ] || fail "pack --index: $(cat "$TMP/index.out")"
"$PY" - "$TMP/s1" "$TMP/bare" <<'EOF' || fail "index files differ from a header pass"
import glob, os, struct, sys
def records(p):
    b = open(p, "rb").read()
    assert b[:8] == b"\x89NSTIDX\n", p
    ver, flags, tar_bytes, samples, members, body, fp, mtime, validator = struct.unpack("<IIQQQQQQQ", b[8:72])
    assert ver == 2 and fp != 0, p
    return tar_bytes, samples, members, fp, b[72:72 + body]
for p in sorted(glob.glob(sys.argv[1] + "/*.nstidx")):
    q = os.path.join(sys.argv[2], os.path.basename(p))
    assert records(p) == records(q), p      # the same body and fingerprint: only the flags (who wrote it) and the mtime differ
    assert os.path.getsize(p[:-7]) == records(p)[0]
EOF

# a list with labels (relative paths: keys relative to the list's folder)
( cd "$TMP/data" && find . -name '*.jpg' | sort | head -7 | while read -r p; do printf '%s\t%d\n' "${p#./}" 9; done ) > "$TMP/data/list.txt"
"$CLI" pack "$TMP/data/list.txt" "$TMP/sl" --quiet > /dev/null
"$PY" - "$TMP/sl/shard-000000.tar" <<'EOF' || fail "list: wrong samples"
import sys, tarfile
t = tarfile.open(sys.argv[1]); names = [m.name for m in t.getmembers()]
assert len(names) == 14 and names[0] == "class_000/img_000000.jpg" and names[1] == "class_000/img_000000.cls", names
assert all(t.extractfile(m).read() == b"9" for m in t.getmembers() if m.name.endswith(".cls"))
EOF

# COCO: refused (nostall's loader does not read COCO shards), and the
# message says what to do instead; DST is not created
"$CLI" gen "$TMP/coco" --task detect --images 6 --quiet > /dev/null
set +e
"$CLI" pack "$TMP/coco/instances.json" "$TMP/sc" --quiet > /dev/null 2> "$TMP/ec"; rc=$?
set -e
[ $rc = 2 ] && grep -q "does not read COCO shards" "$TMP/ec" && grep -q -- "--task detect" "$TMP/ec" &&
    grep -q -- "--coco-webdataset" "$TMP/ec" && [ ! -e "$TMP/sc" ] || fail "COCO without --coco-webdataset: $rc $(cat "$TMP/ec")"
# with --coco-webdataset: KEY.jpg + KEY.json (image, annotations in file
# order, category ids) for the webdataset library
"$CLI" pack "$TMP/coco/instances.json" "$TMP/sc" --coco-webdataset --quiet > /dev/null
"$PY" - "$TMP/coco/instances.json" "$TMP/sc/shard-000000.tar" <<'EOF' || fail "COCO: wrong samples"
import json, os, sys, tarfile
doc = json.load(open(sys.argv[1])); t = tarfile.open(sys.argv[2])
m = {x.name: t.extractfile(x).read() for x in t.getmembers()}
imgs = sorted(doc["images"], key=lambda i: i["id"])
assert len(m) == 2 * len(imgs)
for im in imgs:
    key = os.path.splitext(im["file_name"])[0]
    j = json.loads(m[key + ".json"])
    assert j["image"] == im
    assert j["annotations"] == [a for a in doc["annotations"] if a["image_id"] == im["id"]]
    assert j["categories"] == sorted(c["id"] for c in doc["categories"])
    root = os.path.dirname(sys.argv[1])
    assert m[key + ".jpg"] == open(os.path.join(root, im["file_name"]), "rb").read()
EOF

# a file_name leaving the image root ("../secret/credentials", absolute, a
# symlink out) is refused, nothing written; --allow-outside-root packs it,
# under a member name without ".." or a leading '/'
mkdir -p "$TMP/cs/root" "$TMP/cs/secret"
printf 'AKIASECRETBYTES\n' > "$TMP/cs/secret/credentials"
ln -s ../secret/credentials "$TMP/cs/root/link.jpg"
for fn in ../secret/credentials "$TMP/cs/secret/credentials" link.jpg; do
    printf '{"images": [{"id": 1, "file_name": "%s", "width": 4, "height": 4}], "categories": [], "annotations": []}\n' "$fn" > "$TMP/cs/root/ann.json"
    rm -rf "$TMP/cs/out"
    set +e
    "$CLI" pack "$TMP/cs/root/ann.json" "$TMP/cs/out" --coco-webdataset --quiet > /dev/null 2> "$TMP/cs/err"; rc=$?
    set -e
    [ $rc = 1 ] && grep -q "leaves the image root" "$TMP/cs/err" && grep -q -- "--allow-outside-root" "$TMP/cs/err" ||
        fail "file_name $fn: exit $rc, $(cat "$TMP/cs/err")"
    [ -z "$(ls "$TMP/cs/out" 2> /dev/null)" ] || fail "file_name $fn: something was written: $(ls "$TMP/cs/out")"
done
printf '{"images": [{"id": 1, "file_name": "../secret/credentials", "width": 4, "height": 4}], "categories": [], "annotations": []}\n' > "$TMP/cs/root/ann.json"
rm -rf "$TMP/cs/out"
"$CLI" pack "$TMP/cs/root/ann.json" "$TMP/cs/out" --coco-webdataset --allow-outside-root --quiet > /dev/null
"$PY" - "$TMP/cs/out/shard-000000.tar" <<'EOF' || fail "--allow-outside-root: member names"
import sys, tarfile
names = [m.name for m in tarfile.open(sys.argv[1]).getmembers()]
assert names == ["secret/credentials.bin", "secret/credentials.json"], names
EOF
# a list naming files outside its folder: read (lists may point anywhere),
# but no member name climbs out or starts with '/'
printf '../secret/credentials\t0\n%s\t1\n' "$TMP/cs/secret/credentials" > "$TMP/cs/root/list.txt"
"$CLI" pack "$TMP/cs/root/list.txt" "$TMP/cs/lo" --quiet > /dev/null
"$PY" - "$TMP/cs/lo/shard-000000.tar" <<'EOF' || fail "list outside its folder: member names"
import sys, tarfile
names = [m.name for m in tarfile.open(sys.argv[1]).getmembers()]
assert len(names) == 4 and all(not n.startswith("/") and ".." not in n.split("/") for n in names), names
EOF

# --transcode: the JPEGs `nostall transcode` writes
"$CLI" transcode "$TMP/data" "$TMP/rst" --quiet > /dev/null
rm -f "$TMP/rst/list.txt" "$TMP/data/list.txt"
"$CLI" pack "$TMP/data" "$TMP/st" --transcode --quiet > "$TMP/st.out"
grep -q "30 JPEGs rewritten" "$TMP/st.out" || fail "--transcode summary: $(cat "$TMP/st.out")"
"$CLI" pack "$TMP/rst" "$TMP/srst" --quiet > /dev/null
cmp -s "$TMP/st/shard-000000.tar" "$TMP/srst/shard-000000.tar" || fail "--transcode differs from nostall transcode"

# an unreadable file: reported, left out, exit 1
printf '%s\t0\n%s\t1\n' "$TMP/data/class_000/img_000000.jpg" "$TMP/nope.jpg" > "$TMP/bad.txt"
set +e
"$CLI" pack "$TMP/bad.txt" "$TMP/sb" --quiet > "$TMP/sb.out" 2> "$TMP/sb.err"
rc=$?
set -e
[ $rc = 1 ] || fail "a missing file: exit $rc, want 1"
grep -q "nope.jpg" "$TMP/sb.err" || fail "the missing file is not named: $(cat "$TMP/sb.err")"
grep -q "pack: 1 samples" "$TMP/sb.out" || fail "the rest is not packed: $(cat "$TMP/sb.out")"

# refusals
set +e
"$CLI" pack "$TMP/data" "$TMP/s1" --quiet > /dev/null 2> "$TMP/e1"; r1=$?
printf 'a.jpg\t0.5\n' > "$TMP/f.txt"
"$CLI" pack "$TMP/f.txt" "$TMP/sf" --quiet > /dev/null 2> "$TMP/e2"; r2=$?
"$CLI" pack "$TMP/data" "$TMP/x" --shard-bytes 1 > /dev/null 2> "$TMP/e3"; r3=$?
"$CLI" pack "$TMP/data" > /dev/null 2> "$TMP/e4"; r4=$?
set -e
[ $r1 = 2 ] && grep -q "not empty" "$TMP/e1" || fail "non-empty DST: $r1 $(cat "$TMP/e1")"
[ $r2 = 1 ] && grep -q "float" "$TMP/e2" || fail "float labels: $r2 $(cat "$TMP/e2")"
[ $r3 = 2 ] && grep -q "shard-bytes" "$TMP/e3" || fail "--shard-bytes 1: $r3 $(cat "$TMP/e3")"
[ $r4 = 2 ] || fail "no DST: $r4"
echo PASS
