#!/usr/bin/env bash
# File names are untrusted text: a dataset whose folder and bad files are
# named with ESC sequences, newline, tab, CR, backslash, a C1 control (CSI),
# a bidirectional override, a byte 0xff and invalid UTF-8. `bench --json`
# and `analyze --json` must be valid JSON for a strict parser (UTF-8, no raw
# control characters) that gives every name back exactly (path_hex when a
# byte was replaced); the text summaries and error lines must carry no
# control character, no invalid UTF-8 and one line per skipped file; the
# HTML report must carry the names escaped.
source "$(dirname "$0")/lib_cli.sh"

"$CLI" gen "$TMP/gen" --images 4 --classes 1 --width 64 --height 48 --quiet
"$PY" - "$TMP" <<'PYEOF'
import os, shutil, sys
tmp = os.fsencode(sys.argv[1])
# the dataset folder itself: ESC ] (an OSC title sequence), BEL, 0xff
root = tmp + b"/data \x1b]0;pwned\x07\xff"
os.makedirs(root + b"/c")
good = sorted(os.listdir(tmp + b"/gen/class_000"))
for g in good:
    shutil.copy(tmp + b"/gen/class_000/" + g, root + b"/c/" + g)
names = [b"esc\x1b[31mred.jpg", b"nl\nsecond line.jpg", b"tab\tx.jpg", b"cr\rx.jpg",
         b"back\\slash.jpg", b"c1\xc2\x9b31m.jpg", b"bidi\xe2\x80\xaegnp.jpg", b"ff\xffx.jpg",
         b"bad\xc3\x28utf.jpg", b"del\x7f.jpg", b"caf\xc3\xa9 ok.jpg"]
for n in names:
    open(root + b"/c/" + n, "wb").write(b"not an image\n")
open(tmp + b"/root.hex", "w").write(root.hex())
open(tmp + b"/bad.hex", "w").write("\n".join(sorted((root + b"/c/" + n).hex() for n in names)))
PYEOF
DATA=$("$PY" -c 'import os,sys; sys.stdout.buffer.write(bytes.fromhex(open(sys.argv[1]).read()))' "$TMP/root.hex")
nbad=$(wc -l < "$TMP/bad.hex"); nbad=$((nbad + 1))

# strict: bytes -> UTF-8 (errors raise) -> json.loads (control characters raise)
strict() { "$PY" -c 'import json,sys; json.loads(open(sys.argv[1], "rb").read().decode("utf-8", "strict"))' "$1"; }
# clean TEXT FILE: valid UTF-8, no C0 but newline, no DEL, no C1, no bidi/line-separator
clean() {
    "$PY" - "$1" <<'PYEOF' || fail "$(basename "$1"): $(cat -v "$1" | head -c 2000)"
import sys
t = open(sys.argv[1], "rb").read().decode("utf-8", "strict")
bad = [c for c in t if (ord(c) < 0x20 and c != "\n") or 0x7f <= ord(c) <= 0x9f
       or 0x2028 <= ord(c) <= 0x202e or 0x2066 <= ord(c) <= 0x2069]
if bad:
    print("control characters in the output:", [hex(ord(c)) for c in bad]); sys.exit(1)
PYEOF
}

# 1. bench --json: strict JSON; every name comes back byte for byte
"$CLI" bench --max-bad-fraction 1 "$DATA" --batch-size 2 --crop 16 --json --quiet > "$TMP/b.json" || fail "bench --json failed"
strict "$TMP/b.json" || fail "bench --json is not strict JSON: $(cat -v "$TMP/b.json" | head -c 600)"
"$PY" - "$TMP/b.json" "$TMP/root.hex" "$TMP/bad.hex" <<'PYEOF' || fail "bench --json: names not given back"
import json, sys
j = json.loads(open(sys.argv[1], "rb").read().decode("utf-8"))
def raw(obj, key):
    return bytes.fromhex(obj[key + "_hex"]) if key + "_hex" in obj else obj[key].encode("utf-8")
root = bytes.fromhex(open(sys.argv[2]).read())
want = sorted(bytes.fromhex(h) for h in open(sys.argv[3]).read().split())
assert raw(j, "data") == root, (raw(j, "data"), root)
assert "data_hex" in j and "\ufffd" in j["data"]
got = sorted(raw(s, "path") for s in j["skipped"])
assert got == want, (got, want)
# _hex only where a byte had to be replaced
for s in j["skipped"]:
    p = raw(s, "path")
    try:
        p.decode("utf-8"); valid = True
    except UnicodeDecodeError:
        valid = False
    assert ("path_hex" in s) == (not valid), s
    assert s["status"] == "E_NOT_IMAGE" and s["reason"].startswith("decode: "), s
assert j["items"] == 4, j["items"]
PYEOF

# 2. bench text summary: one escaped line per bad file, nothing raw
"$CLI" bench --max-bad-fraction 1 "$DATA" --batch-size 2 --crop 16 --quiet > "$TMP/b.txt" || fail "bench failed"
clean "$TMP/b.txt"
[ "$(grep -c '^    E_NOT_IMAGE' "$TMP/b.txt")" = "$nbad" ] || fail "expected $nbad skipped lines: $(cat -v "$TMP/b.txt")"
grep -qF 'esc\x1b[31mred.jpg' "$TMP/b.txt" || fail "ESC not shown as \\x1b: $(cat -v "$TMP/b.txt")"
grep -qF 'nl\nsecond line.jpg' "$TMP/b.txt" || fail "newline not shown as \\n"
grep -qF 'ff\xffx.jpg' "$TMP/b.txt" || fail "byte 0xff not shown as \\xff"
grep -qF 'bad\xc3(utf.jpg' "$TMP/b.txt" || fail "invalid UTF-8 not shown as \\xc3"
grep -qF 'c1\u009b31m.jpg' "$TMP/b.txt" || fail "C1 CSI not shown as \\u009b"
grep -qF 'bidi\u202egnp.jpg' "$TMP/b.txt" || fail "bidi override not shown as \\u202e"
grep -qF 'back\\slash.jpg' "$TMP/b.txt" || fail "backslash not doubled"
grep -qF 'café ok.jpg' "$TMP/b.txt" || fail "valid UTF-8 must stay as it is"
grep -qF 'data \x1b]0;pwned\x07\xff' "$TMP/b.txt" || fail "dataset name not escaped: $(head -1 "$TMP/b.txt" | cat -v)"

# 3. error lines on stderr: one line, escaped
if "$CLI" bench --max-bad-fraction 1 "$DATA" --batch-size 2 --crop 16 --quiet --on-bad-item fail > /dev/null 2> "$TMP/err"; then
    fail "--on-bad-item fail exited 0"
fi
clean "$TMP/err"
[ "$(wc -l < "$TMP/err")" -eq 1 ] || fail "error is not one line: $(cat -v "$TMP/err")"
if "$CLI" bench --max-bad-fraction 1 "$DATA/missing"$'\x1b[2J' --quiet 2> "$TMP/err2"; then fail "missing dataset accepted"; fi
clean "$TMP/err2"
grep -qF 'missing\x1b[2J' "$TMP/err2" || fail "missing dataset: $(cat -v "$TMP/err2")"

# 4. analyze: JSON, text and HTML report
"$CLI" analyze --max-bad-fraction 1 "$DATA" --batch-size 2 --crop 16 --max-batches 2 --threads 1 --step-ms 1 --quiet --json \
    --predict $'threads=2' --report "$TMP/r.html" > "$TMP/a.json" || fail "analyze --json failed"
strict "$TMP/a.json" || fail "analyze --json is not strict JSON: $(cat -v "$TMP/a.json" | head -c 600)"
json "$TMP/a.json" 'bytes.fromhex(j["data_hex"]) == bytes.fromhex(open("'"$TMP/root.hex"'").read())' \
    | grep -q True || fail "analyze --json: data not given back"
clean "$TMP/r.html"
grep -qF 'data \x1b]0;pwned\x07\xff' "$TMP/r.html" || fail "HTML report: dataset name not escaped"
"$CLI" analyze --max-bad-fraction 1 "$DATA" --batch-size 2 --crop 16 --max-batches 2 --threads 1 --step-ms 1 --quiet > "$TMP/a.txt" \
    || fail "analyze failed"
clean "$TMP/a.txt"
# markup in names is escaped in HTML
mkdir -p "$TMP/<b>&'x\"" && cp -r "$DATA/c" "$TMP/<b>&'x\"/"
"$CLI" analyze --max-bad-fraction 1 "$TMP/<b>&'x\"" --batch-size 2 --crop 16 --max-batches 2 --threads 1 --step-ms 1 --quiet \
    --report "$TMP/r2.html" > /dev/null || fail "analyze (markup) failed"
grep -qF '&lt;b&gt;&amp;&#39;x&quot;' "$TMP/r2.html" || fail "HTML report: markup not escaped"
grep -qF '<b>&' "$TMP/r2.html" && fail "HTML report: raw markup from a file name"
echo "PASS"
