#!/usr/bin/env bash
# Tar shards end to end (indexed mode): a dataset read as an ImageFolder, as
# the shards `nostall pack` wrote (a folder, a brace pattern, a list), and
# as those shards over HTTP from nginx (their index files served, or none:
# header passes by ranged GETs, cached in $XDG_CACHE_HOME) gives the same
# checksum for 1 and 2 threads; so do the MinIO cache (each item read from
# storage once), echoing at the decode point and a coordinated group of 2;
# resuming mid-epoch (Python's state_dict) delivers exactly the rest;
# damage: a shard truncated before indexing loses only its cut samples
# (counted, named), gzip'd shards beside good ones are bad shards named with
# "gzip" (not stray files); a shard cut on the server after its index file
# was written is indexed again (that file no longer matches it): its cut
# samples counted and left out, never a hang.
source "$(dirname "$0")/lib_cli.sh"
source "$(dirname "$0")/lib_nginx.sh"
SRC_DIR=$(cd "$(dirname "$0")/.." && pwd)
# The loader reads an item's byte range once recipe.c's default locate
# asks for it (nst_index_range): until then the shards cannot be read.
grep -q nst_index_range "$SRC_DIR/src/recipe/recipe.c" \
    || { echo "SKIP: src/recipe/recipe.c's locate does not read byte ranges yet"; exit 77; }
export XDG_CACHE_HOME="$TMP/xdg"
export NGINX_OWNER_PID=$$
trap 'coord_kill; nginx_stop "$TMP/ngx" > /dev/null 2>&1 || true; rm -f /dev/shm/nostall-*-shards$$ || true; rm -rf "$TMP"' EXIT

"$CLI" gen "$TMP/data" --images 36 --classes 4 --width 80 --height 60 --quiet
"$CLI" pack "$TMP/data" "$TMP/www/s" --shard-bytes 40K --quiet > /dev/null
n=$(ls "$TMP/www/s"/shard-*.tar | wc -l)
[ "$n" -ge 3 ] || fail "want several shards, got $n"
last=$(printf '%06d' $((n - 1)))
mkdir "$TMP/www/bare" "$TMP/www/hbare"
cp "$TMP/www/s"/*.tar "$TMP/www/bare/" # no index files: header passes
cp "$TMP/www/s"/*.tar "$TMP/www/hbare/" # (read over HTTP only: none written beside them)
ls "$TMP/www/s"/shard-*.tar > "$TMP/list.txt"

common=(--batch-size 5 --crop 32 --epochs 2 --json --quiet --seed 3)
sum() { json "$1" 'j["checksum"]'; }
"$CLI" bench --max-bad-fraction 1 "$TMP/data" "${common[@]}" --threads 1 > "$TMP/ref.json"
ref=$(sum "$TMP/ref.json")
[ "$(json "$TMP/ref.json" 'j["skipped_count"]')" = 0 ] || fail "the reference skipped items"

nginx_ok=1
port=$(nginx_start "$TMP/ngx" "$TMP/www" 2> "$TMP/ngx.err") || nginx_ok=0
[ $nginx_ok = 1 ] || echo "nginx not available: HTTP sources skipped ($(cat "$TMP/ngx.err"))"
sources=("$TMP/www/s" "$TMP/www/s/shard-{000000..$last}.tar" "$TMP/list.txt" "$TMP/www/bare")
if [ $nginx_ok = 1 ]; then
    sources+=("http://127.0.0.1:$port/s/shard-{000000..$last}.tar" "http://127.0.0.1:$port/hbare/shard-{000000..$last}.tar")
fi
for s in "${sources[@]}"; do
    for t in 1 2; do
        "$CLI" bench --max-bad-fraction 1 "$s" "${common[@]}" --threads $t > "$TMP/o.json" || fail "$s: bench failed"
        [ "$(sum "$TMP/o.json")" = "$ref" ] || fail "$s, $t threads: checksum $(sum "$TMP/o.json"), want $ref"
        [ "$(json "$TMP/o.json" 'j["dataset"]["items"]')" = 36 ] || fail "$s: $(json "$TMP/o.json" 'j["dataset"]["items"]') items"
    done
done
if [ $nginx_ok = 1 ]; then
    [ "$(ls "$XDG_CACHE_HOME"/nostall/shards/*.nstidx | wc -l)" = "$n" ] || fail "the HTTP header passes were not cached"
    ls "$TMP/www/hbare"/*.nstidx > /dev/null 2>&1 && fail "index files written beside HTTP shards?"
fi

# task=bytes: each member's bytes, the room sized by the index's member
# lengths (not by the shard's size), the same as the folder's files
bcommon=(--task bytes --batch-size 5 --epochs 1 --json --quiet --seed 3)
"$CLI" bench --max-bad-fraction 1 "$TMP/data" "${bcommon[@]}" > "$TMP/bref.json" || fail "bytes: the folder"
"$CLI" bench --max-bad-fraction 1 "$TMP/www/s" "${bcommon[@]}" --threads 2 > "$TMP/b.json" || fail "bytes: the shards"
[ "$(json "$TMP/b.json" 'j["skipped_count"]')" = 0 ] || fail "bytes on shards skipped: $(json "$TMP/b.json" 'j["skipped"][:2]')"
[ "$(sum "$TMP/b.json")" = "$(sum "$TMP/bref.json")" ] || fail "bytes: shards differ from the folder"

# the MinIO cache: the same bytes, each item read from storage once
"$CLI" bench --max-bad-fraction 1 "$TMP/www/s" "${common[@]}" --threads 2 --cache-bytes 64M > "$TMP/c.json"
[ "$(sum "$TMP/c.json")" = "$ref" ] || fail "cache: checksum differs"
[ "$(json "$TMP/c.json" 'j["stats"]["storage_reads"]')" = 36 ] || fail "cache: $(json "$TMP/c.json" 'j["stats"]["storage_reads"]') reads, want 36"

# echoing at the decode point: the folder's bytes, for 1 and 2 threads
"$CLI" bench --max-bad-fraction 1 "$TMP/data" "${common[@]}" --threads 1 --echo-factor 2 --echo-point decode > "$TMP/e0.json"
for t in 1 2; do
    "$CLI" bench --max-bad-fraction 1 "$TMP/www/s" "${common[@]}" --threads $t --echo-factor 2 --echo-point decode > "$TMP/e.json"
    [ "$(sum "$TMP/e.json")" = "$(sum "$TMP/e0.json")" ] || fail "echo, $t threads: checksum differs"
done

# a coordinated group of 2: each member delivers every epoch with the solo
# job's bytes, each item prepared once
G=shards$$
coord_group $G "$TMP/ref.json" "20 20" "$TMP/www/s" "${common[@]}" --threads 1

# resume mid-epoch: the rest of the epoch exactly
if [ -n "${NOSTALL_LIBRARY:-}" ] && ! nm -D "$NOSTALL_LIBRARY" 2>/dev/null | grep -E ' __(asan|tsan)_' > /dev/null; then
    PYTHONPATH="$SRC_DIR/python" "$PY" - "$TMP/www/s" <<'EOF' || fail "resume on shards"
import hashlib, sys
import nostall
src = sys.argv[1]
def loader():
    return nostall.Loader(src, batch_size=5, crop=32, threads=2, seed=3, output="uint8")
def digest(b):
    images, labels = b
    return hashlib.sha1(images.numpy().tobytes() + labels.numpy().tobytes()).hexdigest()
full = [digest(b) for b in loader()]
a = loader(); it = iter(a)
head = [digest(next(it)) for _ in range(3)]
state = a.state_dict(); del it, a
b = loader(); b.load_state_dict(state)
rest = [digest(x) for x in b]
assert head + rest == full, (len(head), len(rest), len(full))
print("resume: %d + %d batches, as one run" % (len(head), len(rest)))
EOF
else
    echo "NOSTALL_LIBRARY unset or a sanitizer build: the resume check skipped"
fi

# a shard rebuilt in place with its samples in another order (the same
# size): its old index file, pack's or a header pass's, is not used; the
# run gives what a fresh copy of the rebuilt shard gives (an old index
# would deliver other samples' bytes under each key's label)
rotate() { # the samples of shard $1 rotated by one, bytes reused: same size
    "$PY" - "$1" <<'EOF'
import sys, tarfile
p = sys.argv[1]
old = open(p, "rb").read()
ms = tarfile.open(p).getmembers()
keys = []
for m in ms:
    k = m.name.split(".")[0]
    keys += [k] if k not in keys else []
end = ms[-1].offset_data + (ms[-1].size + 511) // 512 * 512
span = lambda m: old[m.offset:m.offset_data + (m.size + 511) // 512 * 512]
new = b"".join(span(m) for k in keys[1:] + keys[:1] for m in ms if m.name.split(".")[0] == k)
assert len(new) == end and new != old[:end]
open(p, "r+b").write(new)
EOF
}
mkdir "$TMP/re" "$TMP/re-fresh"
cp "$TMP/www/s"/shard-000000.tar* "$TMP/re/"
for writer in pack "a header pass"; do
    [ "$writer" = pack ] || "$CLI" bench "$TMP/re" --batch-size 5 --epochs 1 --json --quiet > /dev/null # its index written
    rotate "$TMP/re/shard-000000.tar"
    cp "$TMP/re/shard-000000.tar" "$TMP/re-fresh/" # no index file
    "$CLI" bench "$TMP/re" "${common[@]}" --threads 1 > "$TMP/re.json"
    "$CLI" bench "$TMP/re-fresh" "${common[@]}" --threads 1 > "$TMP/re-fresh.json"
    rm -f "$TMP/re-fresh"/*
    [ "$(sum "$TMP/re.json")" = "$(sum "$TMP/re-fresh.json")" ] \
        || fail "a re-shuffled shard read through the index $writer wrote for its old order"
    [ "$(json "$TMP/re.json" 'j["skipped_count"]')" = 0 ] || fail "re-shuffled shard: items skipped"
done

# damage before indexing: a shard cut inside its third sample keeps two
mkdir "$TMP/cut"
cp "$TMP/www/s"/shard-000000.tar "$TMP/cut/"
off=$("$PY" -c "
import tarfile,sys; t=tarfile.open(sys.argv[1]); m=[x for x in t.getmembers() if x.name.endswith('.jpg')][2]; print(m.offset_data + 10)" "$TMP/cut/shard-000000.tar")
truncate -s "$off" "$TMP/cut/shard-000000.tar"
"$CLI" bench --max-bad-fraction 1 "$TMP/cut" --batch-size 2 --crop 32 --epochs 1 --json --quiet > "$TMP/cut.json"
[ "$(json "$TMP/cut.json" 'j["dataset"]["items"]')" = 2 ] || fail "truncated shard: $(json "$TMP/cut.json" 'j["dataset"]["items"]') items, want 2"
[ "$(json "$TMP/cut.json" 'j["dataset"]["files_ignored"]')" -ge 1 ] || fail "truncated shard: the cut sample is not counted"
"$CLI" bench --max-bad-fraction 1 "$TMP/cut" --batch-size 2 --crop 32 --epochs 1 --quiet 2>&1 | grep -q "ignored" \
    || echo "note: the CLI's text output does not name what a shard lost"

# a lost shard is not a stray file: a .tar.gz and gzip data named .tar
# beside good shards are bad shards, named with "gzip" (text and --json),
# counted apart from files_ignored; the good shards are read
mkdir "$TMP/gz"
cp "$TMP/www/s"/shard-00000[01].tar "$TMP/gz/"
gzip -c "$TMP/www/s/shard-000002.tar" > "$TMP/gz/lost.tar.gz"
gzip -c "$TMP/www/s/shard-000002.tar" > "$TMP/gz/shard-000002.tar"
echo notes > "$TMP/gz/README"
"$CLI" bench "$TMP/gz" --batch-size 2 --crop 32 --epochs 1 --json --quiet > "$TMP/gz.json" \
    || fail "gzip shards beside good ones failed the run"
[ "$(json "$TMP/gz.json" 'j["dataset"]["shards_bad"]')" = 2 ] || fail "gzip shards: $(json "$TMP/gz.json" 'j["dataset"]')"
[ "$(json "$TMP/gz.json" 'j["dataset"]["files_ignored"]')" = 1 ] || fail "gzip shards counted as stray files: $(json "$TMP/gz.json" 'j["dataset"]')"
json "$TMP/gz.json" '"|".join(b["path"] + ": " + b["reason"] for b in j["bad_shards"])' > "$TMP/gz.bad"
grep -q "lost.tar.gz: gzip-compressed" "$TMP/gz.bad" && grep -q "shard-000002.tar: gzip-compressed" "$TMP/gz.bad" \
    || fail "gzip shards not named with why in --json: $(cat "$TMP/gz.bad")"
[ "$(json "$TMP/gz.json" 'j["dataset"]["items"]')" -ge 2 ] || fail "the good shards were not read"
"$CLI" bench "$TMP/gz" --batch-size 2 --crop 32 --epochs 1 > "$TMP/gz.txt" 2>&1 || fail "gzip shards: text run failed"
grep -q "2 shards not read" "$TMP/gz.txt" && grep -q "lost.tar.gz: gzip-compressed" "$TMP/gz.txt" \
    || fail "the text output does not name the gzip shards: $(cat "$TMP/gz.txt")"

# damage after indexing, over HTTP: the served shard is cut after its index
# file was written; that file (and the cached one) describe the old shard
# and are not used: the cut samples are counted and left out, the run ends
if [ $nginx_ok = 1 ]; then
    mkdir "$TMP/www/late"
    cp "$TMP/www/s"/shard-00000[01].tar* "$TMP/www/late/"
    full=$(stat -c %s "$TMP/www/late/shard-000001.tar")
    truncate -s $((full / 2)) "$TMP/www/late/shard-000001.tar" # its index file still says the old size
    "$CLI" bench --max-bad-fraction 1 "http://127.0.0.1:$port/late/shard-{000000..000001}.tar" --batch-size 2 --crop 32 \
        --epochs 1 --json --quiet --http-retries 1 > "$TMP/late.json" || fail "a cut shard failed the run"
    [ "$(json "$TMP/late.json" 'j["skipped_count"]')" = 0 ] \
        || fail "a shard cut on the server: its old index used: $(json "$TMP/late.json" 'j["skipped"]')"
    [ "$(json "$TMP/late.json" 'j["dataset"]["files_ignored"]')" -ge 1 ] \
        || fail "a shard cut on the server: the cut samples not counted"
fi
echo PASS
