#!/usr/bin/env bash
# Tar shards in streaming mode (shard_mode=stream) end to end: every epoch
# delivers the same multiset of items as indexed mode (each item's index
# and its eval-mode bytes), for 1 and 2 threads, from local shards and from
# nginx; the order is the same for any thread count (one checksum) and
# changes with the epoch; resuming mid-epoch (Python's state_dict) gives
# exactly the rest; a shard damaged after its index file was written (a
# member header overwritten in a local shard, a shard cut on the server)
# no longer matches that index file's identity: it is indexed again and
# its damage is a counted skip, the rest delivered, never a hang.
source "$(dirname "$0")/lib_cli.sh"
source "$(dirname "$0")/lib_nginx.sh"
SRC_DIR=$(cd "$(dirname "$0")/.." && pwd)
grep -q nst_index_range "$SRC_DIR/src/recipe/recipe.c" \
    || { echo "SKIP: src/recipe/recipe.c's locate does not read byte ranges yet"; exit 77; }
export XDG_CACHE_HOME="$TMP/xdg"
export NGINX_OWNER_PID=$$
trap 'nginx_stop "$TMP/ngx" > /dev/null 2>&1 || true; rm -rf "$TMP"' EXIT

"$CLI" gen "$TMP/data" --images 40 --classes 4 --width 80 --height 60 --quiet
"$CLI" pack "$TMP/data" "$TMP/www/s" --shard-bytes 40K --quiet > /dev/null
n=$(ls "$TMP/www/s"/shard-*.tar | wc -l)
[ "$n" -ge 3 ] || fail "want several shards, got $n"
last=$(printf '%06d' $((n - 1)))

common=(--batch-size 4 --crop 32 --epochs 2 --json --quiet --seed 3 --shard-mode stream --shuffle-buffer 7)
sum() { json "$1" 'j["checksum"]'; }
"$CLI" bench "$TMP/www/s" "${common[@]}" --threads 1 > "$TMP/s1.json" || fail "stream: bench failed"
"$CLI" bench "$TMP/www/s" "${common[@]}" --threads 2 > "$TMP/s2.json" || fail "stream, 2 threads: bench failed"
[ "$(sum "$TMP/s1.json")" = "$(sum "$TMP/s2.json")" ] || fail "stream: the checksum depends on the threads"
[ "$(json "$TMP/s1.json" 'j["skipped_count"]')" = 0 ] || fail "stream: items skipped"
[ "$(json "$TMP/s1.json" 'j["items"]')" = 80 ] || fail "stream: $(json "$TMP/s1.json" 'j["items"]') items, want 80"
"$CLI" bench "$TMP/www/s" "${common[@]}" --threads 2 --shuffle-buffer 1 > "$TMP/b1.json"
[ "$(sum "$TMP/b1.json")" != "$(sum "$TMP/s1.json")" ] || fail "stream: shuffle_buffer changes nothing"
"$CLI" bench "$TMP/data" "${common[@]}" > /dev/null 2> "$TMP/err" && fail "stream mode on a folder accepted"
grep -q "shard_mode=stream" "$TMP/err" || fail "the refusal does not name the option: $(cat "$TMP/err")"

nginx_ok=1
port=$(nginx_start "$TMP/ngx" "$TMP/www" 2> "$TMP/ngx.err") || nginx_ok=0
[ $nginx_ok = 1 ] || echo "nginx not available: HTTP sources skipped ($(cat "$TMP/ngx.err"))"
srcs=("$TMP/www/s")
[ $nginx_ok = 1 ] && srcs+=("http://127.0.0.1:$port/s/shard-{000000..$last}.tar")

# per epoch: the same (index, bytes) multiset as indexed mode; resume exact
# (Python: not with a sanitizer build's library, which python3 cannot load
# without its runtime preloaded; the release build runs it)
py_ok=1
[ -n "${NOSTALL_LIBRARY:-}" ] || py_ok=0
[ $py_ok = 1 ] && nm -D "$NOSTALL_LIBRARY" 2>/dev/null | grep -E ' __(asan|tsan)_' > /dev/null && py_ok=0
[ $py_ok = 1 ] || echo "note: Python checks skipped (NOSTALL_LIBRARY unset or a sanitizer build)"
for src in "${srcs[@]}"; do
    [ $py_ok = 1 ] || break
    PYTHONPATH="$SRC_DIR/python" "$PY" - "$src" <<'EOF' || fail "$src: stream vs indexed"
import collections, hashlib, sys
import nostall
src = sys.argv[1]
def epochs(mode, threads, **kw):
    ld = nostall.Loader(src, batch_size=4, mode="eval", crop=32, threads=threads, seed=5,
                        epochs=2, output="uint8", shard_mode=mode, shuffle_buffer=9, **kw)
    out = []
    for e in range(2):
        got = collections.Counter()
        order = []
        for images, labels in ld:
            idx = ld.last_indices
            for k in range(len(idx)):
                h = hashlib.sha1(images[k].numpy().tobytes()).hexdigest()
                got[(int(idx[k]), int(labels[k]), h)] += 1
                order.append(int(idx[k]))
        out.append((got, order))
    return out
ref = epochs("indexed", 1)
for t in (1, 2):
    s = epochs("stream", t)
    for e in range(2):
        assert s[e][0] == ref[e][0], "epoch %d, %d threads: multisets differ" % (e, t)
        assert sum(s[e][0].values()) == 40
    assert s[0][1] != s[1][1], "the stream order does not change with the epoch"
    if t == 1:
        first = s
    else:
        assert [o for _, o in s] == [o for _, o in first], "the order depends on the threads"
# resume mid-epoch
def loader():
    return nostall.Loader(src, batch_size=4, crop=32, threads=2, seed=3, output="uint8",
                          shard_mode="stream", shuffle_buffer=9)
def digest(b):
    images, labels = b
    return hashlib.sha1(images.numpy().tobytes() + labels.numpy().tobytes()).hexdigest()
full = [digest(b) for b in loader()]
a = loader(); it = iter(a)
head = [digest(next(it)) for _ in range(4)]
state = a.state_dict(); del it, a
b = loader(); b.load_state_dict(state)
rest = [digest(x) for x in b]
assert head + rest == full, (len(head), len(rest), len(full))
print("%s: multisets equal to indexed mode, resume %d + %d batches" % (src[:40], len(head), len(rest)))
EOF
done

# a member header overwritten in a local shard (same size): its index file
# no longer matches the shard's fingerprint and is not used; the shard is
# indexed again, the damaged sample counted and left out, the rest
# delivered, in both modes (damage after indexing, within a run, is
# tests/test_stream.c's)
mkdir "$TMP/bad" "$TMP/good"
cp "$TMP/www/s"/shard-00000[01].tar* "$TMP/bad/"
cp "$TMP/www/s"/shard-00000[01].tar* "$TMP/good/"
items=$("$CLI" bench "$TMP/good" --batch-size 2 --crop 32 --epochs 1 --json --quiet | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["dataset"]["items"])')
off=$("$PY" -c "
import tarfile,sys; t=tarfile.open(sys.argv[1]); m=[x for x in t.getmembers() if x.name.endswith('.jpg')][1]; print(m.offset)" "$TMP/bad/shard-000001.tar")
printf 'XXXXXXXX' | dd of="$TMP/bad/shard-000001.tar" bs=1 seek="$off" conv=notrunc status=none
for mode in indexed stream; do
    "$CLI" bench "$TMP/bad" --batch-size 2 --crop 32 --epochs 1 --json --quiet --shard-mode $mode > "$TMP/bad.json" \
        || fail "a damaged header failed the run"
    [ "$(json "$TMP/bad.json" 'j["skipped_count"]')" = 0 ] || fail "damaged header ($mode): $(json "$TMP/bad.json" 'j["skipped"]') skipped, want none (the old index used?)"
    [ "$(json "$TMP/bad.json" 'j["items"]')" = $((items - 1)) ] || fail "damaged header ($mode): $(json "$TMP/bad.json" 'j["items"]') items, want $((items - 1))"
    [ "$(json "$TMP/bad.json" 'j["dataset"]["files_ignored"]')" -ge 1 ] || fail "damaged header ($mode): not counted"
done

# a shard cut on the server after it was indexed: its index file (and the
# cached one) describe the old size and are not used; the cut samples are
# counted and left out, the rest delivered
if [ $nginx_ok = 1 ]; then
    mkdir "$TMP/www/late"
    cp "$TMP/www/s"/shard-00000[01].tar* "$TMP/www/late/"
    full=$(stat -c %s "$TMP/www/late/shard-000001.tar")
    truncate -s $((full / 2)) "$TMP/www/late/shard-000001.tar" # its index file still says the old size
    for t in 1 2; do
        "$CLI" bench "http://127.0.0.1:$port/late/shard-{000000..000001}.tar" --batch-size 2 --crop 32 --max-bad-fraction 1 \
            --epochs 1 --json --quiet --http-retries 1 --shard-mode stream --threads $t > "$TMP/late.json" \
            || fail "a cut shard failed the run"
        [ "$(json "$TMP/late.json" 'j["skipped_count"]')" = 0 ] || fail "a shard cut on the server: its old index used: $(json "$TMP/late.json" 'j["skipped"]')"
        [ "$(json "$TMP/late.json" 'j["dataset"]["files_ignored"]')" -ge 1 ] || fail "a shard cut on the server: the cut samples not counted"
        [ "$(json "$TMP/late.json" 'j["items"]')" -lt "$items" ] || fail "a shard cut on the server: $(json "$TMP/late.json" 'j["items"]') items"
    done
fi
echo PASS
