#!/usr/bin/env bash
# A dataset with corrupt, truncated, empty, non-image and oversized files
# mixed in: `skip` delivers every good item and lists every bad one with a
# reason; `fail` exits non-zero naming the file. Entries named like images
# that are no readable file (a dangling symlink, a directory, a FIFO, a
# socket, a device, a file without read permission) are bad items with
# their reason too, not "ignored".
source "$(dirname "$0")/lib_cli.sh"

"$CLI" gen "$TMP/data" --images 30 --classes 3 --width 120 --height 90 --quiet
good=$(find "$TMP/data/class_000" -name "*.jpg" -print -quit)
c1="$TMP/data/class_001"
: > "$c1/bad_empty.jpg"
echo "hello, I am a text file" > "$c1/bad_text.jpg"
head -c $(( $(stat -c %s "$good") / 2 )) "$good" > "$c1/bad_truncated.jpg"
"$PY" - "$good" "$c1" <<'PYEOF'
import sys
data = bytearray(open(sys.argv[1], "rb").read())
# corrupt the entropy-coded data
for i in range(len(data) // 3, len(data) - 2, 53):
    data[i] = 0xFF; data[i + 1] = 0xD3
open(sys.argv[2] + "/bad_corrupt.jpg", "wb").write(data)
# forge the frame size to 50000 x 50000
data = bytearray(open(sys.argv[1], "rb").read())
i = next(k for k in range(2, len(data) - 9) if data[k] == 0xFF and data[k + 1] in (0xC0, 0xC2))
data[i + 5:i + 9] = bytes([0xC3, 0x50, 0xC3, 0x50])
open(sys.argv[2] + "/bad_huge.jpg", "wb").write(data)
PYEOF
# a PNG signature followed by garbage
printf '\x89PNG\r\n\x1a\nGARBAGEGARBAGE' > "$c1/bad_png.png"
# a big file (over --max-file-bytes 1M)
head -c 2000000 /dev/zero > "$c1/bad_big.jpg"
# not an image extension: ignored, not an item
echo notes > "$c1/README.txt"

for t in 1 4; do
    "$CLI" bench --max-bad-fraction 1 "$TMP/data" --batch-size 4 --crop 24 --epochs 2 --threads $t \
        --max-file-bytes 1M --json --quiet > "$TMP/skip$t.json"
done
j="$TMP/skip1.json"
[ "$(json "$j" 'j["items"]')" = 60 ] || fail "expected 60 good items over 2 epochs, got $(json "$j" 'j["items"]')"
[ "$(json "$j" 'len(j["skipped"])')" = 7 ] || fail "expected 7 bad files listed: $(json "$j" 'j["skipped"]')"
[ "$(json "$j" 'j["skipped_count"]')" = 14 ] || fail "expected 14 skips over 2 epochs"
[ "$(json "$j" 'j["dataset"]["files_ignored"]')" = 1 ] || fail "README.txt not counted as ignored"
for name in empty:E_EMPTY text:E_NOT_IMAGE truncated:E_TRUNCATED corrupt:E_CORRUPT \
            huge:E_TOO_MANY_PIXELS big:E_FILE_TOO_LARGE; do
    f=${name%%:*}; want=${name#*:}
    got=$(json "$j" "[s['status'] for s in j['skipped'] if s['path'].endswith('bad_$f.jpg')]")
    [ "$got" = "['$want']" ] || fail "bad_$f.jpg: got $got, want $want"
    json "$j" "all(s['reason'] for s in j['skipped'])" | grep -q True || fail "empty reason"
done
json "$j" "[s['status'] for s in j['skipped'] if s['path'].endswith('bad_png.png')][0] in ('E_CORRUPT','E_TRUNCATED')" \
    | grep -q True || fail "bad_png.png"
[ "$(json "$TMP/skip1.json" 'j["checksum"]')" = "$(json "$TMP/skip4.json" 'j["checksum"]')" ] \
    || fail "checksum with bad items differs across thread counts"

# the bad-item budget (max_bad_fraction, 0.01 of an epoch by default: one
# item of 37): past it, a non-zero exit naming the budget and a bad file
if "$CLI" bench "$TMP/data" --batch-size 4 --crop 24 --max-file-bytes 1M --quiet \
    > /dev/null 2> "$TMP/budget"; then
    fail "7 bad items of 37 passed the default max_bad_fraction"
fi
grep -q "max_bad_fraction" "$TMP/budget" && grep -q "bad_" "$TMP/budget" \
    || fail "budget message: $(cat "$TMP/budget")"

# human-readable summary lists them too
"$CLI" bench --max-bad-fraction 1 "$TMP/data" --batch-size 4 --crop 24 --max-file-bytes 1M --quiet > "$TMP/summary.txt"
grep -q "skipped     7 bad item" "$TMP/summary.txt" || fail "summary: $(cat "$TMP/summary.txt")"

# fail: non-zero exit naming a bad file
if "$CLI" bench "$TMP/data" --batch-size 4 --crop 24 --on-bad-item fail --max-file-bytes 1M \
        --quiet > /dev/null 2> "$TMP/err"; then
    fail "--on-bad-item fail exited 0"
fi
grep -q "bad_" "$TMP/err" || fail "fail message does not name the file: $(cat "$TMP/err")"
[ "$(wc -l < "$TMP/err")" -eq 1 ] || fail "fail message is not one line: $(cat "$TMP/err")"
# a file list: relative paths, a missing file, a directory; labels from the list
ls "$TMP"/data/class_000/*.jpg | head -5 | sed "s#^$TMP/##; s#\$#\t4#" > "$TMP/list.txt"
mkfifo "$TMP/fifo.jpg"
printf 'data/class_000/does_not_exist.jpg\t1\ndata/class_001\t2\n# a comment\n\nfifo.jpg\t0\n/dev/zero\t0\n' >> "$TMP/list.txt"
"$CLI" bench --max-bad-fraction 1 "$TMP/list.txt" --batch-size 3 --crop 16 --json --quiet > "$TMP/list.json"
[ "$(json "$TMP/list.json" 'j["items"]')" = 5 ] || fail "list: expected 5 good items"
# a FIFO or a device is an item error, never a blocked worker
[ "$(json "$TMP/list.json" 'sorted(s["status"] for s in j["skipped"])')" = "['E_IO', 'E_IO', 'E_IO', 'E_NOT_FOUND']" ] \
    || fail "list: $(json "$TMP/list.json" 'j["skipped"]')"
[ "$(json "$TMP/list.json" 'j["dataset"]["classes"]')" = 5 ] || fail "list: classes = max label + 1"
# An ImageFolder with entries named like images that cannot be read: each is
# a bad item with its reason (JSON and summary); only notes.txt is ignored.
# Root reads any file, so the run drops to uid 65534 where it can.
o="$TMP/odd/c"
mkdir -p "$o" "$o/dir.jpg"
cp "$TMP"/data/class_000/*.jpg "$o/"
ngood=$(find "$o" -maxdepth 1 -type f -name '*.jpg' | wc -l)
echo x > "$o/dir.jpg/inner.jpg"
ln -s no-such-target.jpg "$o/dangling.jpg"
mkfifo "$o/fifo.jpg"
"$PY" -c 'import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$o/sock.jpg"
cp "$good" "$o/noperm.jpg" && chmod 0 "$o/noperm.jpg"
echo notes > "$o/notes.txt"
want=("dangling.jpg:E_NOT_FOUND:symlink target missing" "dir.jpg:E_IO:is a directory"
      "fifo.jpg:E_IO:is a FIFO" "sock.jpg:E_IO:is a socket")
run_as=()
if [ "$(id -u)" = 0 ]; then
    mknod "$o/null.jpg" c 1 3 && want+=("null.jpg:E_IO:is a character device")
    if setpriv --reuid=65534 --regid=65534 --clear-groups test -r "$CLI" -a -x "$o" 2>/dev/null; then
        run_as=(setpriv --reuid=65534 --regid=65534 --clear-groups)
        want+=("noperm.jpg:E_PERMISSION:permission denied")
    else
        echo "note: cannot run as uid 65534 here: the unreadable-file case is not checked"
        rm -f "$o/noperm.jpg"
    fi
else
    want+=("noperm.jpg:E_PERMISSION:permission denied")
fi
nbad=${#want[@]}
"${run_as[@]}" "$CLI" bench --max-bad-fraction 1 "$TMP/odd" --batch-size 2 --crop 16 --json --quiet > "$TMP/odd.json" \
    || fail "odd entries: bench failed"
j="$TMP/odd.json"
[ "$(json "$j" 'j["dataset"]["files_ignored"]')" = 1 ] || fail "odd entries: files_ignored $(json "$j" 'j["dataset"]')"
[ "$(json "$j" 'j["dataset"]["items"]')" = $((ngood + nbad)) ] || fail "odd entries: items $(json "$j" 'j["dataset"]')"
[ "$(json "$j" 'j["items"]')" = "$ngood" ] || fail "odd entries: delivered $(json "$j" 'j["items"]')"
[ "$(json "$j" 'len(j["skipped"])')" = "$nbad" ] || fail "odd entries: $(json "$j" 'j["skipped"]')"
json "$j" '"inner.jpg" in str(j["skipped"])' | grep -q False || fail "a directory named like an image was walked"
"${run_as[@]}" "$CLI" bench --max-bad-fraction 1 "$TMP/odd" --batch-size 2 --crop 16 --quiet > "$TMP/odd.txt" || fail "odd entries: bench failed"
for w in "${want[@]}"; do
    f=${w%%:*}; rest=${w#*:}; st=${rest%%:*}; why=${rest#*:}
    got=$(json "$j" "[(s['status'], s['reason']) for s in j['skipped'] if s['path'].endswith('/$f')]")
    case "$got" in
        *"'$st', "*"$why"*) ;;
        *) fail "$f: got $got, want $st with '$why'" ;;
    esac
    grep -q "$st .*$f: $why" "$TMP/odd.txt" || fail "summary: $f: $(cat "$TMP/odd.txt")"
done
grep -q "1 file ignored: not named .jpg, .jpeg or .png" "$TMP/odd.txt" || fail "summary: ignored: $(cat "$TMP/odd.txt")"

# an epoch of nothing but bad items is an error even with the budget off
# (it used to "succeed" with 0 items and every file a skip)
mkdir -p "$TMP/allbad"
for i in 1 2 3 4 5; do printf 'broken %d' $i > "$TMP/allbad/b$i.jpg"; printf '%s\t0\n' "$TMP/allbad/b$i.jpg"; done \
    > "$TMP/allbad.txt"
st=0
"$CLI" bench --max-bad-fraction 1 "$TMP/allbad.txt" --batch-size 2 --crop 16 --quiet 2> "$TMP/allbad.err" || st=$?
[ $st != 0 ] || fail "an epoch of only bad items succeeded"
grep -q "all 5 items of this rank's share were bad: an empty epoch is an error" "$TMP/allbad.err" &&
    grep -q "b[1-5].jpg" "$TMP/allbad.err" || fail "empty epoch: $(cat "$TMP/allbad.err")"

printf 'a.jpg\t1\nno-label-here\n' > "$TMP/badlist.txt"
if "$CLI" bench --max-bad-fraction 1 "$TMP/badlist.txt" 2> "$TMP/err"; then fail "malformed list accepted"; fi
grep -q "badlist.txt:2" "$TMP/err" || fail "malformed list message: $(cat "$TMP/err")"
echo "PASS"
