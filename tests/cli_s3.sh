#!/usr/bin/env bash
# s3:// end to end against an S3 server on loopback (moto's server from
# PyPI, tests/lib_s3.sh and tests/s3_server.py; skipped with 77 when it
# cannot be installed) with its IAM authentication on, so moto checks every
# request's SigV4 signature, and through tests/s3_proxy.py, which checks
# them a second time, independently, or injects faults:
#   - per-file objects (a list of s3:// lines, one key with + = , ; @ and a
#     space) give the ImageFolder's checksum for 1 and 2 threads, with
#     every request's SigV4 verified by the proxy and by moto; the list
#     and a prefix of several listing pages straight from moto too, and a
#     wrong secret there is moto's own 403 SignatureDoesNotMatch;
#   - shards (indexed mode): an s3:// prefix (also one of several listing
#     pages), a brace pattern, shards without index files (header passes
#     by ranged GETs, cached), and the
#     same shards local and over HTTP from nginx: one checksum, 1 and 2
#     threads;
#   - errors at create: a wrong secret is one 403 naming the bucket and the
#     key or prefix, a missing bucket and an empty prefix name themselves;
#     the secret appears in no output of any run;
#   - faults: 503 SlowDown and connection resets are retried (same
#     checksum); responses slower than the timeout are counted skips; the
#     server killed mid-epoch and restarted (it reloads its objects): the
#     run ends, every item delivered or a counted skip; a shard cut on the server after indexing:
#     its cut items are skips naming the shard;
#   - Python: nostall.Loader over the s3:// list gives the folder's batches.
source "$(dirname "$0")/lib_cli.sh"
source "$(dirname "$0")/lib_s3.sh"
source "$(dirname "$0")/lib_nginx.sh"
SRC_DIR=$(cd "$(dirname "$0")/.." && pwd)
export S3_OWNER_PID=$$ NGINX_OWNER_PID=$$
export XDG_CACHE_HOME="$TMP/xdg"
trap 's3_proxy_stop "$TMP/srv" > /dev/null 2>&1 || true; s3_server_stop "$TMP/srv" > /dev/null 2>&1 || true
      nginx_stop "$TMP/ngx" > /dev/null 2>&1 || true; rm -rf "$TMP"' EXIT
rc=0
s3_server_ensure > /dev/null 2> "$TMP/ensure.err" || rc=$?
if [ $rc != 0 ]; then
    echo "SKIP: the S3 server (moto) is unavailable: $(cat "$TMP/ensure.err")"
    [ $rc = 77 ] && exit 77
    exit 1
fi

SECRET='t3st/SECRET+key=value;x'
export S3_TEST_SECRET=$SECRET # the only key pair moto accepts (lib_s3.sh)
LOG="$TMP/all.log" # every output of every run: the secret must not be in it
: > "$LOG"
"$CLI" gen "$TMP/data" --images 36 --classes 4 --width 80 --height 60 --quiet
"$CLI" pack "$TMP/data" "$TMP/www/s" --shard-bytes 40K --quiet > /dev/null
n=$(ls "$TMP/www/s"/shard-*.tar | wc -l)
[ "$n" -ge 3 ] || fail "want several shards, got $n"
last=$(printf '%06d' $((n - 1)))

port=$(s3_server_start "$TMP/srv" 0 bkt) || fail "the S3 server did not start"
s3_put_tree "$TMP/srv" bkt shards "$TMP/www/s" || fail "put shards/"
mkdir "$TMP/bare" && cp "$TMP/www/s"/*.tar "$TMP/bare/"
s3_put_tree "$TMP/srv" bkt bare "$TMP/bare" || fail "put bare/"
s3_put_tree "$TMP/srv" bkt img "$TMP/data" || fail "put img/"
# the list, in the folder's order (class folders sorted, files sorted)
odd='img/odd a+b=c,d;e@f.jpg' # a key SigV4 must encode
i=0
: > "$TMP/s3.txt"
for c in $(ls "$TMP/data"); do
    for f in $(ls "$TMP/data/$c"); do
        printf 's3://bkt/img/%s/%s\t%d\n' "$c" "$f" $i >> "$TMP/s3.txt"
    done
    i=$((i + 1))
done
# the first image again under the odd key, in its place
first=$(head -1 "$TMP/s3.txt" | cut -f1 | sed 's|^s3://bkt/||')
s3_put "$TMP/srv" bkt "$odd" "$TMP/data/${first#img/}" || fail "put $odd"
"$PY" - "$TMP/s3.txt" "$odd" <<'EOF'
import sys
lines = open(sys.argv[1]).read().splitlines()
url, label = lines[0].split("\t")
lines[0] = "s3://bkt/%s\t%s" % (sys.argv[2], label)
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
EOF

export AWS_ACCESS_KEY_ID=$S3_TEST_ACCESS_KEY AWS_SECRET_ACCESS_KEY="$SECRET" AWS_REGION=us-east-1
unset AWS_SESSION_TOKEN AWS_PROFILE AWS_ENDPOINT_URL_S3 || true
pport=$(s3_proxy_start "$TMP/srv" "$port" --access-key "$S3_TEST_ACCESS_KEY" --secret "$SECRET") \
    || fail "s3_proxy.py did not start"
direct="http://127.0.0.1:$port"
proxied="http://127.0.0.1:$pport"
pstat() { json "$TMP/srv/proxy.stats" "j['$1']"; }
# moto's answers: a 403 is a signature moto rejected (IAM auth is on)
moto_403() { grep -c " 403$" "$TMP/srv/server.log" || true; }

common=(--batch-size 5 --crop 32 --epochs 2 --json --quiet --seed 3)
sum() { json "$1" 'j["checksum"]'; }
run() { # run OUT ARGS...: bench, output to OUT and the log; the status
    local out=$1
    shift
    local st=0
    timeout 300 "$CLI" bench "$@" > "$out" 2> "$out.err" || st=$?
    cat "$out" "$out.err" >> "$LOG"
    [ $st != 124 ] || fail "bench $*: still running after 300 s (a hang)"
    return $st
}
run "$TMP/ref.json" "$TMP/data" "${common[@]}" --threads 1
ref=$(sum "$TMP/ref.json")

# per-file objects, every request's signature checked by the proxy
export AWS_ENDPOINT_URL=$proxied
for t in 1 2; do
    run "$TMP/o.json" "$TMP/s3.txt" "${common[@]}" --threads $t || fail "s3 list: $(cat "$TMP/o.json.err")"
    [ "$(sum "$TMP/o.json")" = "$ref" ] || fail "s3 list, $t threads: checksum $(sum "$TMP/o.json"), want $ref ($(json "$TMP/o.json" 'j["skipped"][:2]'))"
done
[ "$(pstat rejected)" = 0 ] || fail "the proxy rejected a signature: $(pstat last_rejection)"
[ "$(pstat verified)" -ge 72 ] || fail "the proxy verified $(pstat verified) requests"

# shards: a prefix, a pattern, bare shards (header passes), local, HTTP
sources=("$TMP/www/s" "s3://bkt/shards/" "s3://bkt/shards/shard-{000000..$last}.tar" "s3://bkt/bare/")
nginx_ok=1
hport=$(nginx_start "$TMP/ngx" "$TMP/www" 2> "$TMP/ngx.err") || nginx_ok=0
[ $nginx_ok = 1 ] && sources+=("http://127.0.0.1:$hport/s/shard-{000000..$last}.tar") \
    || echo "nginx not available: the HTTP shards left out"
for s in "${sources[@]}"; do
    for t in 1 2; do
        run "$TMP/o.json" "$s" "${common[@]}" --threads $t || fail "$s: $(cat "$TMP/o.json.err")"
        [ "$(json "$TMP/o.json" 'j["dataset"]["items"]')" = 36 ] || fail "$s: $(json "$TMP/o.json" 'j["dataset"]["items"]') items"
        [ "$(sum "$TMP/o.json")" = "$ref" ] || fail "$s, $t threads: checksum $(sum "$TMP/o.json"), want $ref"
    done
done
[ "$(ls "$XDG_CACHE_HOME"/nostall/shards/*.nstidx | wc -l)" -ge "$n" ] || fail "the header passes over s3:// were not cached"
[ "$(pstat rejected)" = 0 ] || fail "the proxy rejected a signature: $(pstat last_rejection)"

# a prefix of more than one page (ListObjectsV2 continuation tokens): 1100
# other objects around the shards, left out
"$PY" - "$TMP/many" "$TMP/www/s" <<'EOF'
import os, shutil, sys
dst, src = sys.argv[1], sys.argv[2]
os.makedirs(dst)
for k in range(1100):
    with open(os.path.join(dst, "a-%04d.txt" % k), "w") as f:
        f.write("x")
for name in os.listdir(src):
    shutil.copy(os.path.join(src, name), os.path.join(dst, name))
EOF
s3_put_tree "$TMP/srv" bkt many "$TMP/many" || fail "put many/"
run "$TMP/o.json" "s3://bkt/many/" "${common[@]}" --threads 2 || fail "s3://bkt/many/: $(cat "$TMP/o.json.err")"
[ "$(json "$TMP/o.json" 'j["dataset"]["items"]')" = 36 ] || fail "s3://bkt/many/: $(json "$TMP/o.json" 'j["dataset"]["items"]') items"
[ "$(sum "$TMP/o.json")" = "$ref" ] || fail "s3://bkt/many/: checksum differs"
grep -aq "ntinuation-token=" "$TMP/srv/server.log" || fail "s3://bkt/many/ was listed in one page?"
[ "$(pstat rejected)" = 0 ] || fail "the proxy rejected a signature: $(pstat last_rejection)"
[ "$(moto_403)" = 0 ] || fail "moto rejected $(moto_403) requests the proxy verified: $(grep " 403$" "$TMP/srv/server.log" | head -3)"

# straight to moto, no proxy: moto alone checks the signatures (the list's
# per-object GETs, listings with continuation tokens)
export AWS_ENDPOINT_URL=$direct
run "$TMP/o.json" "$TMP/s3.txt" "${common[@]}" --threads 2 || fail "s3 list (moto): $(cat "$TMP/o.json.err")"
[ "$(sum "$TMP/o.json")" = "$ref" ] || fail "s3 list (moto): checksum $(sum "$TMP/o.json"), want $ref"
run "$TMP/o.json" "s3://bkt/many/" "${common[@]}" --threads 2 || fail "s3://bkt/many/ (moto): $(cat "$TMP/o.json.err")"
[ "$(sum "$TMP/o.json")" = "$ref" ] || fail "s3://bkt/many/ (moto): checksum differs"
[ "$(moto_403)" = 0 ] || fail "moto rejected $(moto_403) requests: $(grep " 403$" "$TMP/srv/server.log" | head -3)"
export AWS_ENDPOINT_URL=$proxied

# errors at create: one clear message each, no secret
expect_error() { # expect_error WHAT PATTERN SOURCE [ARGS]
    local what=$1 pat=$2
    shift 2
    if run "$TMP/e.json" "$@" --batch-size 5 --crop 32 --epochs 1 --json --quiet; then
        fail "$what: the run succeeded"
    fi
    grep -q -- "$pat" "$TMP/e.json.err" || fail "$what: '$(cat "$TMP/e.json.err")' does not say '$pat'"
    [ "$(wc -l < "$TMP/e.json.err")" -le 2 ] || fail "$what: more than one error: $(cat "$TMP/e.json.err")"
}
AWS_SECRET_ACCESS_KEY="wrong/$SECRET" expect_error "a wrong secret (list)" \
    "HTTP 403 SignatureDoesNotMatch.*key 'img/.*' in bucket 'bkt'" "$TMP/s3.txt"
AWS_SECRET_ACCESS_KEY="wrong/$SECRET" expect_error "a wrong secret (prefix)" \
    "HTTP 403 SignatureDoesNotMatch.*prefix 'shards/' in bucket 'bkt'" "s3://bkt/shards/"
AWS_SECRET_ACCESS_KEY="wrong/$SECRET" expect_error "a wrong secret (pattern)" \
    "HTTP 403.*bucket 'bkt'" "s3://bkt/shards/shard-{000000..$last}.tar"
# the same wrong secret straight to moto: moto's own check answers
export AWS_ENDPOINT_URL=$direct
AWS_SECRET_ACCESS_KEY="wrong/$SECRET" expect_error "a wrong secret (list, moto)" \
    "HTTP 403 SignatureDoesNotMatch.*key 'img/.*' in bucket 'bkt'" "$TMP/s3.txt"
AWS_SECRET_ACCESS_KEY="wrong/$SECRET" expect_error "a wrong secret (prefix, moto)" \
    "HTTP 403 SignatureDoesNotMatch.*prefix 'shards/' in bucket 'bkt'" "s3://bkt/shards/"
[ "$(moto_403)" -ge 2 ] || fail "moto did not reject the wrong secret's requests"
echo "signatures: the proxy verified $(pstat verified) requests and rejected $(pstat rejected)" \
    "(the wrong secret's); moto answered $(grep -c " [0-9]*$" "$TMP/srv/server.log")," \
    "$(moto_403) of them 403 (the wrong secret's, sent to it directly)"
export AWS_ENDPOINT_URL=$proxied
expect_error "no bucket" "NoSuchBucket" "s3://nobkt/shards/"
expect_error "an empty prefix" "no objects under prefix 'none/' in bucket 'bkt'" "s3://bkt/none/"
expect_error "no .tar under a prefix" "no .tar objects" "s3://bkt/img/"
AWS_ACCESS_KEY_ID= expect_error "half a key pair" "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not" "s3://bkt/shards/"

# faults through the proxy: 503 SlowDown twice per object, then resets
s3_proxy_stop "$TMP/srv"
pport=$(s3_proxy_start "$TMP/srv" "$port" --slowdown 2) || fail "proxy"
export AWS_ENDPOINT_URL="http://127.0.0.1:$pport"
run "$TMP/o.json" "$TMP/s3.txt" "${common[@]}" --threads 2 --http-retries 3 || fail "slowdown: $(cat "$TMP/o.json.err")"
[ "$(sum "$TMP/o.json")" = "$ref" ] || fail "slowdown: checksum differs ($(json "$TMP/o.json" 'j["skipped"][:2]'))"
[ "$(pstat slowdowns)" -ge 72 ] || fail "slowdown: only $(pstat slowdowns) 503s sent"
run "$TMP/o.json" "s3://bkt/shards/" "${common[@]}" --threads 2 --http-retries 3 || fail "slowdown (shards): $(cat "$TMP/o.json.err")"
[ "$(json "$TMP/o.json" 'j["dataset"]["items"]')" = 36 ] || fail "slowdown (shards): items"
s3_proxy_stop "$TMP/srv"
pport=$(s3_proxy_start "$TMP/srv" "$port" --reset 1) || fail "proxy"
export AWS_ENDPOINT_URL="http://127.0.0.1:$pport"
run "$TMP/o.json" "$TMP/s3.txt" "${common[@]}" --threads 2 --http-retries 3 || fail "resets: $(cat "$TMP/o.json.err")"
[ "$(sum "$TMP/o.json")" = "$ref" ] || fail "resets: checksum differs"
[ "$(pstat resets)" -ge 36 ] || fail "resets: only $(pstat resets) connections reset"

# slow responses: slower than the timeout, every item a bad item, no hang:
# past the bad-item budget (max_bad_fraction, default 1%) the run fails
# naming the budget and the first items' timeouts; with the budget off, an
# epoch of nothing but bad items is still an error (never training on nothing)
s3_proxy_stop "$TMP/srv"
pport=$(s3_proxy_start "$TMP/srv" "$port" --delay-ms 4000) || fail "proxy"
export AWS_ENDPOINT_URL="http://127.0.0.1:$pport"
st=0
run "$TMP/o.json" "$TMP/s3.txt" --batch-size 6 --crop 32 --epochs 1 --json --quiet --threads 2 \
    --http-timeout-ms 500 --http-retries 0 || st=$?
[ $st != 0 ] || fail "slow: every item timed out and the run succeeded within the bad-item budget"
grep -q "max_bad_fraction" "$TMP/o.json.err" && grep -qi "time" "$TMP/o.json.err" ||
    fail "slow: the budget or the timeouts not named: $(cat "$TMP/o.json.err")"
st=0
run "$TMP/o.json" "$TMP/s3.txt" --batch-size 6 --crop 32 --epochs 1 --json --quiet --threads 2 \
    --http-timeout-ms 500 --http-retries 0 --max-bad-fraction 1 || st=$?
[ $st != 0 ] || fail "slow, budget off: an epoch of nothing but timeouts succeeded"
grep -q "all 36 items of this rank's share were bad" "$TMP/o.json.err" && grep -qi "time" "$TMP/o.json.err" ||
    fail "slow, budget off: not an empty-epoch error naming the timeouts: $(cat "$TMP/o.json.err")"
s3_proxy_stop "$TMP/srv"

# the server killed mid-epoch and restarted on its port: the run ends,
# every item delivered or a counted skip
export AWS_ENDPOINT_URL=$direct
gets() { grep -ac "img_[0-9]*\.jpg 200" "$TMP/srv/server.log" 2> /dev/null || true; }
started() { [ "$(gets)" -ge 8 ]; }
: > "$TMP/srv/server.log"
timeout 300 "$CLI" bench "$TMP/s3.txt" --batch-size 4 --crop 32 --epochs 2 --json --quiet --threads 2 \
    --step-ms 150 --http-retries 8 --io-depth 2 --max-bad-fraction 1 > "$TMP/k.json" 2> "$TMP/k.err" &
bp=$!
wait_until 120 started || fail "the run made no requests"
s3_server_kill "$TMP/srv"
# (moto keeps objects in memory: the restarted server loads its store,
# $TMP/srv/data, before it listens)
s3_server_start "$TMP/srv" "$port" bkt > /dev/null || fail "the S3 server did not restart on port $port"
st=0
wait $bp || st=$?
cat "$TMP/k.json" "$TMP/k.err" >> "$LOG"
[ $st = 0 ] || fail "killed server: the run ended with $st: $(cat "$TMP/k.err")"
delivered=$(json "$TMP/k.json" 'j["items"]')
skipped=$(json "$TMP/k.json" 'j["skipped_count"]')
[ $((delivered + skipped)) = 72 ] || fail "killed server: $delivered delivered + $skipped skipped, want 72"
echo "killed server: $delivered items delivered, $skipped counted skips"

# a shard cut on the server after it was indexed: its cached index is bound
# to the old object (ETag, size, ends) and not used; the shard is indexed
# again as it is, its cut samples counted and left out (never read through
# the old index, never a hang)
obj=$TMP/www/s/shard-000001.tar
head -c $(($(stat -c %s "$obj") / 2)) "$obj" > "$TMP/cut.tar"
s3_put "$TMP/srv" bkt shards/shard-000001.tar "$TMP/cut.tar" || fail "put the cut shard"
run "$TMP/o.json" "s3://bkt/shards/" --batch-size 2 --crop 32 --epochs 1 --json --quiet \
    --http-retries 1 || fail "a cut shard failed the run: $(cat "$TMP/o.json.err")"
[ "$(json "$TMP/o.json" 'j["skipped_count"]')" = 0 ] ||
    fail "a cut shard: its old index was used: $(json "$TMP/o.json" 'j["skipped"]')"
[ "$(json "$TMP/o.json" 'j["dataset"]["files_ignored"]')" -ge 1 ] ||
    fail "a cut shard: the cut samples were not counted: $(json "$TMP/o.json" 'j["dataset"]')"

# Python: the same batches from the s3:// list as from the folder
# (not with a sanitized library: python3 would need its runtime preloaded)
sanitized=0 # (grep -c reads all of nm's output: no SIGPIPE under pipefail)
[ -n "${NOSTALL_LIBRARY:-}" ] && sanitized=$(nm -D "$NOSTALL_LIBRARY" 2> /dev/null | grep -cE ' __(asan|tsan)_' || true)
if [ -n "${NOSTALL_LIBRARY:-}" ] && [ "$sanitized" = 0 ]; then
    PYTHONPATH="$SRC_DIR/python" "$PY" - "$TMP/data" "$TMP/s3.txt" <<'EOF' 2>&1 | tee -a "$LOG" || fail "python over s3://"
import hashlib, sys
import nostall
def digests(src):
    out = []
    for images, labels in nostall.Loader(src, batch_size=6, crop=32, threads=2, seed=5,
                                         output="uint8"):
        out.append(hashlib.sha1(images.numpy().tobytes() + labels.numpy().tobytes()).hexdigest())
    return out
a, b = digests(sys.argv[1]), digests(sys.argv[2])
assert a == b and len(a) == 6, (len(a), len(b))
print("python: %d batches, as from the folder" % len(b))
EOF
fi

grep -qF -- "$SECRET" "$LOG" && fail "the secret appears in the output"
echo PASS
