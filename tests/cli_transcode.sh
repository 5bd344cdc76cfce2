#!/usr/bin/env bash
# `nostall transcode` (the library's nostall_transcode_jpeg() over a tree):
# every JPEG rewritten losslessly with restart markers
# (by default one every MCU; --restart-mcus N, --restart-rows N) (the
# loader gives the same checksum on both trees, train and eval, float
# and uint8: the same coefficients give the same pixels, and the
# restart-marker fast path of region decode gives the normal path's pixels);
# other files copied byte for byte; a damaged JPEG reported by name and copied
# unchanged, and so is one the rewrite keeps (an incomplete progressive
# file, CMYK, a tree already transcoded), with the reason; EXIF and comments
# kept; any --threads writes the same tree; usage errors exit 2.
source "$(dirname "$0")/lib_cli.sh"

"$CLI" gen "$TMP/src" --images 30 --classes 3 --width 300 --height 240 --size-jitter 0.3 --quality 92 --quiet
echo "not an image" > "$TMP/src/class_000/README.txt"
"$CLI" transcode "$TMP/src" "$TMP/dst" --quiet > "$TMP/out" || fail "transcode failed"
cat "$TMP/out"
grep -q "30 JPEGs transcoded" "$TMP/out" || fail "summary: $(cat "$TMP/out")"
cmp -s "$TMP/src/class_000/README.txt" "$TMP/dst/class_000/README.txt" || fail "non-JPEG not copied as is"
[ "$(find "$TMP/dst" -type f | wc -l)" = 31 ] || fail "file count"
[ -z "$(find "$TMP/dst" -name '*.tmp')" ] || fail "leftover .tmp files"
# any number of worker threads writes the same tree
"$CLI" transcode "$TMP/src" "$TMP/dst1" --threads 1 --quiet > /dev/null || fail "transcode --threads 1 failed"
"$CLI" transcode "$TMP/src" "$TMP/dst5" --threads 5 --quiet > "$TMP/out5" || fail "transcode --threads 5 failed"
grep -q "30 JPEGs transcoded" "$TMP/out5" || fail "summary with 5 threads: $(cat "$TMP/out5")"
diff -r "$TMP/dst1" "$TMP/dst5" > /dev/null || fail "--threads 1 and --threads 5 wrote different trees"
diff -r "$TMP/dst" "$TMP/dst1" > /dev/null || fail "the default thread count wrote a different tree"

# every JPEG: baseline, a DRI of 1 MCU (the default), restart markers in its data
"$PY" - "$TMP/dst" <<'PYEOF' || fail "restart markers missing"
import os, struct, sys
n = 0
for root, _, files in os.walk(sys.argv[1]):
    for f in files:
        if not f.endswith(".jpg"):
            continue
        b = open(os.path.join(root, f), "rb").read()
        assert b[:2] == b"\xff\xd8", f
        assert b"\xff\xc0" in b and b"\xff\xc2" not in b[:b.index(b"\xff\xda")], f + ": not baseline"
        dri = b.index(b"\xff\xdd")
        assert struct.unpack(">H", b[dri + 4:dri + 6])[0] == 1, f
        data = b[b.index(b"\xff\xda"):]
        assert b"\xff\xd0" in data and b"\xff\xd1" in data, f + ": no RST markers"
        n += 1
assert n == 30, n
PYEOF

# same pixels: same checksums on both trees
common=(--batch-size 8 --crop 64 --epochs 2 --threads 1 --json --quiet --seed 3)
for args in "--mode train --output uint8" "--mode train --output float" \
            "--mode eval --shuffle 0 --output uint8" "--mode eval --shuffle 0 --output float" \
            "--mode train --output uint8 --crop 16"; do
    # shellcheck disable=SC2086
    "$CLI" bench "$TMP/src" "${common[@]}" $args > "$TMP/a.json"
    # shellcheck disable=SC2086
    "$CLI" bench "$TMP/dst" "${common[@]}" $args > "$TMP/b.json"
    a=$(json "$TMP/a.json" 'j["checksum"]'); b=$(json "$TMP/b.json" 'j["checksum"]')
    echo "$args: original $a, transcoded $b"
    [ "$a" = "$b" ] || fail "checksums differ ($args)"
    [ "$(json "$TMP/b.json" 'j["skipped"]')" = "[]" ] || fail "items skipped ($args)"
done

# --restart-rows 2, --restart-rows 1, --restart-mcus 2 (lowered to 1 where
# the MCUs per row are odd), and the loader still agrees
"$CLI" bench "$TMP/src" "${common[@]}" --output uint8 > "$TMP/a.json"
for opt in --restart-rows=2 "--restart-rows 1" "--restart-mcus 2"; do
    rm -rf "$TMP/dst2"
    # shellcheck disable=SC2086
    "$CLI" transcode "$TMP/src" "$TMP/dst2" $opt --quiet > /dev/null || fail "$opt"
    "$CLI" bench "$TMP/dst2" "${common[@]}" --output uint8 > "$TMP/c.json"
    [ "$(json "$TMP/a.json" 'j["checksum"]')" = "$(json "$TMP/c.json" 'j["checksum"]')" ] || fail "checksum with $opt"
done
# --restart-mcus 2: a DRI of 2 where the 4:2:0 MCUs per row are even, else 1
"$PY" - "$TMP/dst2" <<'PYEOF' || fail "--restart-mcus 2: wrong DRI"
import os, struct, sys
seen = set()
for root, _, files in os.walk(sys.argv[1]):
    for f in files:
        if not f.endswith(".jpg"):
            continue
        b = open(os.path.join(root, f), "rb").read()
        p, seg = 2, {}
        while b[p + 1] != 0xDA:  # the header segments, up to SOS
            n = struct.unpack(">H", b[p + 2:p + 4])[0]
            seg[b[p + 1]] = b[p + 4:p + 2 + n]
            p += 2 + n
        sof, ri = seg[0xC0], struct.unpack(">H", seg[0xDD])[0]
        width = struct.unpack(">H", sof[3:5])[0]
        hmax = max(sof[7 + 3 * i] >> 4 for i in range(sof[5]))
        mcus = (width + 8 * hmax - 1) // (8 * hmax)
        assert ri == (2 if mcus % 2 == 0 else 1), (f, width, ri)
        seen.add(ri)
assert seen == {1, 2}, seen
PYEOF

# a damaged JPEG: reported by path, copied unchanged, the run goes on (exit 0)
mkdir -p "$TMP/bad/c"
f=$(find "$TMP/src" -name '*.jpg' | sort | head -n 1)
head -c 3000 "$f" > "$TMP/bad/c/trunc.jpg"
cp "$f" "$TMP/bad/c/good.jpg"
# ... and an intact progressive JPEG that stops after its DC scan (scans may
# legitimately be left out; decoders then smooth the blocks, which a
# baseline copy would not): kept as it is, said so, not called damaged
/usr/bin/python3 - "$TMP/bad/c/partial.jpg" <<'PYEOF'
import io, sys
from PIL import Image
b = io.BytesIO()
Image.linear_gradient("L").resize((96, 64)).convert("RGB").save(b, "JPEG", quality=90, progressive=True)
d, p, sos = b.getvalue(), 2, []
while p < len(d):  # walk the segments; entropy data holds no bare 0xFF but RSTn
    if d[p] != 0xFF: p += 1; continue
    m = d[p + 1]
    if m in (0x00, 0xFF) or 0xD0 <= m <= 0xD7: p += 2 if m != 0xFF else 1; continue
    if m == 0xD9: break
    if m == 0xDA: sos.append(p)
    p += 2 + int.from_bytes(d[p + 2:p + 4], "big")
assert len(sos) > 2, sos
open(sys.argv[1], "wb").write(d[:sos[1]] + b"\xff\xd9")
PYEOF
"$CLI" transcode "$TMP/bad" "$TMP/bad.out" --quiet > "$TMP/out" 2> "$TMP/err" || fail "damaged file aborted the run"
grep -q "trunc.jpg" "$TMP/err" || fail "damaged file not named: $(cat "$TMP/err")"
grep -q "1 damaged" "$TMP/out" || fail "damaged file not counted: $(cat "$TMP/out")"
cmp -s "$TMP/bad/c/trunc.jpg" "$TMP/bad.out/c/trunc.jpg" || fail "damaged file not copied unchanged"
grep -q "partial.jpg: kept as it is (progressive scans leave coefficients incomplete" "$TMP/err" \
    || fail "incomplete progressive file not reported: $(cat "$TMP/err")"
grep -q "partial.jpg.*damaged" "$TMP/err" && fail "incomplete progressive file called damaged"
grep -q "1 JPEGs kept as they are" "$TMP/out" || fail "kept file not counted: $(cat "$TMP/out")"
cmp -s "$TMP/bad/c/partial.jpg" "$TMP/bad.out/c/partial.jpg" || fail "kept file not copied unchanged"
cmp -s "$TMP/bad/c/good.jpg" "$TMP/bad.out/c/good.jpg" && fail "good file not transcoded"

# EXIF and comment segments are kept; a CMYK JPEG is kept as it is, said
# why (the rewrite is the library's: only 8-bit grayscale and YCbCr); a
# transcoded tree transcodes to itself, every JPEG kept (its markers are
# already there)
mkdir -p "$TMP/meta/c"
/usr/bin/python3 - "$TMP/meta/c" "$f" <<'PYEOF'
import sys
from PIL import Image
img = Image.open(sys.argv[2]).convert("RGB")
exif = Image.Exif()
exif[0x010F] = "nostall-test-camera"  # Make
img.save(sys.argv[1] + "/exif.jpg", quality=90, exif=exif.tobytes(), comment=b"nostall-comment")
img.convert("CMYK").save(sys.argv[1] + "/cmyk.jpg", quality=90)
PYEOF
"$CLI" transcode "$TMP/meta" "$TMP/meta.out" --quiet > "$TMP/out" 2> "$TMP/err" || fail "metadata tree"
grep -q "s: 1 JPEGs transcoded" "$TMP/out" || fail "exif.jpg not transcoded: $(cat "$TMP/out")"
grep -q "cmyk.jpg: kept as it is (not an 8-bit Huffman-coded grayscale or YCbCr" "$TMP/err" \
    || fail "CMYK file not reported as kept: $(cat "$TMP/err")"
cmp -s "$TMP/meta/c/cmyk.jpg" "$TMP/meta.out/c/cmyk.jpg" || fail "CMYK file not copied unchanged"
grep -q "nostall-test-camera" "$TMP/meta.out/c/exif.jpg" || fail "EXIF segment lost"
grep -q "nostall-comment" "$TMP/meta.out/c/exif.jpg" || fail "comment segment lost"
"$CLI" bench "$TMP/meta" "${common[@]}" --output uint8 > "$TMP/a.json"
"$CLI" bench "$TMP/meta.out" "${common[@]}" --output uint8 > "$TMP/b.json"
[ "$(json "$TMP/a.json" 'j["checksum"]')" = "$(json "$TMP/b.json" 'j["checksum"]')" ] || fail "checksum with metadata"
"$CLI" transcode "$TMP/dst" "$TMP/again" --quiet > "$TMP/out" 2> "$TMP/err" || fail "transcode of a transcoded tree"
grep -q "s: 0 JPEGs transcoded" "$TMP/out" && grep -q " 30 JPEGs kept as they are" "$TMP/out" \
    || fail "a transcoded tree should be kept as it is: $(cat "$TMP/out")"
[ "$(grep -c "already has a restart marker every 1 MCU" "$TMP/err")" = 30 ] || fail "reason not given: $(head -3 "$TMP/err")"
diff -r "$TMP/dst" "$TMP/again" > /dev/null || fail "a transcoded tree was changed"

# usage errors: exit 2 with a message
set +e
"$CLI" transcode "$TMP/src" > /dev/null 2> "$TMP/err"; [ $? = 2 ] || fail "missing DST: exit not 2"
grep -q "DST" "$TMP/err" || fail "missing DST not named"
"$CLI" transcode "$TMP/src" "$TMP/dst" --quiet > /dev/null 2> "$TMP/err"; [ $? = 2 ] || fail "non-empty DST accepted"
grep -q "force" "$TMP/err" || fail "non-empty DST message"
"$CLI" transcode "$TMP/src" "$TMP/src/inner" --quiet > /dev/null 2> "$TMP/err"; [ $? = 2 ] || fail "DST inside SRC accepted"
"$CLI" transcode "$TMP/src" "$TMP/x" --restart-rows 0 2> "$TMP/err"; [ $? = 2 ] || fail "--restart-rows 0 accepted"
grep -q "restart-rows" "$TMP/err" || fail "--restart-rows not named"
"$CLI" transcode "$TMP/src" "$TMP/x" --restart-mcus 0 2> "$TMP/err"; [ $? = 2 ] || fail "--restart-mcus 0 accepted"
grep -q "restart-mcus" "$TMP/err" || fail "--restart-mcus not named"
"$CLI" transcode "$TMP/src" "$TMP/x" --restart-mcus 1 --restart-rows 1 2> "$TMP/err"; [ $? = 2 ] || fail "both --restart-mcus and --restart-rows accepted"
"$CLI" transcode "$TMP/src" "$TMP/x" --threads 0 2> "$TMP/err"; [ $? = 2 ] || fail "--threads 0 accepted"
grep -q "threads" "$TMP/err" || fail "--threads not named"
"$CLI" transcode "$TMP/missing" "$TMP/y" 2> "$TMP/err"; [ $? = 2 ] || fail "missing SRC accepted"
grep -q "$TMP/missing" "$TMP/err" || fail "missing SRC not named"
"$CLI" transcode --help | grep -q -- "--restart-rows" || fail "--help lacks --restart-rows"
"$CLI" transcode --help | grep -q -- "--restart-mcus" || fail "--help lacks --restart-mcus"
set -e
"$CLI" transcode "$TMP/src" "$TMP/dst" --force --quiet > /dev/null || fail "--force"
echo "PASS"
