#!/usr/bin/env bash
# Prep servers (`nostall serve`, loader option prep_servers) on loopback,
# started and stopped here on free ports: every epoch's checksum with 1 and 2
# servers and no local workers, and mixed with a local thread, as a local
# run (classify and detect); a server killed with SIGKILL mid-run and one
# frozen with SIGSTOP (dropped after prep_timeout_ms): the same checksums,
# nothing lost or repeated; a wrong secret, another dataset and another
# byte-affecting option are refused naming why; a garbage byte stream is
# refused and the server keeps serving. (A link cut: cli_serve_netns.sh;
# tokens and audio, 4 servers: cli_serve_kinds.sh.) Waits on events (the server's
# "listening" and "served N" lines), never on time.
source "$(dirname "$0")/lib_cli.sh"

SERVERS=()
serve_kill() { for p in "${SERVERS[@]}"; do kill -CONT "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done; }
trap 'serve_kill; coord_kill; rm -rf "$TMP" $SHM_DIRS' EXIT

"$CLI" gen "$TMP/data" --images 48 --classes 3 --width 96 --height 72 --size-jitter 0.25 --quiet
"$CLI" gen "$TMP/other" --images 40 --classes 3 --width 96 --height 72 --quiet
printf 'a shared secret\n' > "$TMP/secret"
chmod 600 "$TMP/secret"
opts=(--crop 32 --seed 7)
common=(--batch-size 5 --epochs 2 --json --quiet "${opts[@]}")

listening() { grep -q '^listening on ' "$1"; }
port_of() { sed -n 's/^listening on .*:\([0-9]*\)$/\1/p' "$1"; }
# start NAME DATA [options]: a server in the background; sets PORT and PID
start() {
    local name=$1 data=$2
    shift 2
    "$CLI" serve "$data" --threads 1 --secret-file "$TMP/secret" --progress "$@" \
        > "$TMP/$name.out" 2> "$TMP/$name.err" &
    PID=$!
    SERVERS+=("$PID")
    wait_until 120 listening "$TMP/$name.out" || fail "$name never listened: $(cat "$TMP/$name.err")"
    PORT=$(port_of "$TMP/$name.out")
}
served_at_least() { [ "$(tail -n 1 "$1" | sed -n 's/^served //p')" -ge "$2" ] 2> /dev/null; }
checksum() { json "$1" 'j["checksum"]'; }
epochs() { json "$1" '" ".join(e["checksum"] for e in j["per_epoch"])'; }
same() { # FILE WHAT: every epoch's local checksum and all 96 items
    [ "$(checksum "$1")" = "$REF" ] || fail "$2: checksum $(checksum "$1") != local $REF"
    [ "$(epochs "$1")" = "$REF_EPOCHS" ] || fail "$2: epochs' checksums $(epochs "$1") != local $REF_EPOCHS"
    [ "$(json "$1" 'j["items"]')" = 96 ] || fail "$2: $(json "$1" 'j["items"]') items, not 96"
}

# threads=0: every item came from a server, once (items received = items)
all_remote() {
    [ "$(json "$1" 'j["stats"]["prep_remote_items"]')" = 96 ] \
        || fail "$2: $(json "$1" 'j["stats"]["prep_remote_items"]') items received, not 96"
}

"$CLI" bench "$TMP/data" "${common[@]}" --threads 2 > "$TMP/local.json"
REF=$(checksum "$TMP/local.json")
REF_EPOCHS=$(epochs "$TMP/local.json")
start a "$TMP/data" "${opts[@]}"
A=$PORT
start b "$TMP/data" "${opts[@]}"
B=$PORT
remote=(--prep-secret-file "$TMP/secret")

"$CLI" bench "$TMP/data" "${common[@]}" --threads 0 --prep-servers "127.0.0.1:$A" "${remote[@]}" > "$TMP/r1.json"
same "$TMP/r1.json" "one server, threads=0"
all_remote "$TMP/r1.json" "one server, threads=0"
"$CLI" bench "$TMP/data" "${common[@]}" --threads 0 --prep-servers "127.0.0.1:$A,127.0.0.1:$B" "${remote[@]}" > "$TMP/r2.json"
same "$TMP/r2.json" "two servers, threads=0"
all_remote "$TMP/r2.json" "two servers, threads=0"
"$CLI" bench "$TMP/data" "${common[@]}" --threads 1 --prep-servers "127.0.0.1:$A,127.0.0.1:$B" "${remote[@]}" > "$TMP/r3.json"
same "$TMP/r3.json" "two servers and a local thread"
# options that say how the client runs, not what it delivers, are not the
# server's business: autotune and its budgets are accepted
"$CLI" bench "$TMP/data" "${common[@]}" --threads 1 --autotune --cpu-budget 1 --prep-servers "127.0.0.1:$A" \
    "${remote[@]}" > "$TMP/r4.json" || fail "a client with autotune refused"
same "$TMP/r4.json" "one server, a local thread, autotune"

# refusals, each naming why
refused() { # WHAT PATTERN bench-args...
    local what=$1 pat=$2
    shift 2
    if "$CLI" bench "$@" > /dev/null 2> "$TMP/err"; then fail "$what: accepted"; fi
    grep -q "$pat" "$TMP/err" || fail "$what: not explained: $(cat "$TMP/err")"
}
printf 'another secret' > "$TMP/wrong"
chmod 600 "$TMP/wrong"
refused "wrong secret" "authentication failed" "$TMP/data" "${common[@]}" --threads 0 \
    --prep-servers "127.0.0.1:$A" --prep-secret-file "$TMP/wrong"
refused "other crop" "crop differs: server '32', client '40'" "$TMP/data" "${common[@]}" \
    --crop 40 --threads 0 --prep-servers "127.0.0.1:$A" "${remote[@]}"
refused "other dataset" "dataset items differs: server '48', client '40'" "$TMP/other" \
    "${common[@]}" --threads 0 --prep-servers "127.0.0.1:$A" "${remote[@]}"
refused "no secret" "needs prep_secret_file" "$TMP/data" "${common[@]}" --prep-servers "127.0.0.1:$A"
chmod 644 "$TMP/wrong"
if "$CLI" serve "$TMP/data" --secret-file "$TMP/wrong" > /dev/null 2> "$TMP/err"; then
    fail "a secret readable by others was accepted"
fi
grep -q "readable by others" "$TMP/err" || fail "secret mode not explained: $(cat "$TMP/err")"
grep -q "another secret\|a shared secret" "$TMP"/*.out "$TMP"/*.err && fail "a secret was printed"

# garbage after the HELLO, and a frame of 4 GiB: refused or closed, no crash
"$PY" - "$A" <<'PYEOF' || fail "garbage stream"
import socket, struct, sys
port = int(sys.argv[1])
for junk in [b"\x00" * 64, b"\xff\xff\xff\xff\x02" + b"x" * 100, bytes(range(256)) * 4,
             struct.pack("<IB", 69, 2) + b"\x01\x00\x10\x00" + b"\x00" * 64]:
    s = socket.create_connection(("127.0.0.1", port))
    hello = s.recv(45)
    assert hello[5:9] == b"NSTS", hello
    s.sendall(junk)
    got = b""
    while True:
        k = s.recv(4096)
        if not k:
            break
        got += k
    assert got == b"" or got[4] == 4, got  # nothing, or a REFUSE
    s.close()
PYEOF
kill -0 "${SERVERS[0]}" || fail "server a died of garbage"
"$CLI" bench "$TMP/data" "${common[@]}" --threads 0 --prep-servers "127.0.0.1:$A" "${remote[@]}" > "$TMP/r4.json"
same "$TMP/r4.json" "after garbage"
all_remote "$TMP/r4.json" "after garbage"

# SIGKILL a server mid-run: its items go to the other one
slow=(--step-ms 20 --prep-timeout-ms 2000)
"$CLI" bench "$TMP/data" "${common[@]}" "${slow[@]}" --threads 0 --prep-servers "127.0.0.1:$A,127.0.0.1:$B" "${remote[@]}" > "$TMP/k.json" &
BENCH=$!
n0=$(tail -n 1 "$TMP/a.out" | sed -n 's/^served //p')
wait_until 120 served_at_least "$TMP/a.out" $((${n0:-0} + 10)) || fail "server a served nothing"
kill -9 "${SERVERS[0]}"
wait "$BENCH" || fail "the run with a killed server failed"
same "$TMP/k.json" "server killed mid-run"
all_remote "$TMP/k.json" "server killed mid-run"

# SIGSTOP the other: dropped after prep_timeout_ms, a restarted server
# and a local thread carry on
start c "$TMP/data" "${opts[@]}"
C=$PORT
"$CLI" bench "$TMP/data" "${common[@]}" "${slow[@]}" --threads 1 --prep-servers "127.0.0.1:$B,127.0.0.1:$C" "${remote[@]}" > "$TMP/s.json" &
BENCH=$!
n0=$(tail -n 1 "$TMP/b.out" | sed -n 's/^served //p')
wait_until 120 served_at_least "$TMP/b.out" $((${n0:-0} + 10)) || fail "server b served nothing"
kill -STOP "${SERVERS[1]}"
wait "$BENCH" || fail "the run with a frozen server failed"
kill -CONT "${SERVERS[1]}"
same "$TMP/s.json" "server frozen mid-run"
echo "requeued: killed $(json "$TMP/k.json" 'j["stats"]["prep_requeued"]'), frozen $(json "$TMP/s.json" 'j["stats"]["prep_requeued"]')"

# a server that is not up yet (then comes back) is connected with backoff:
# the port of a killed server, no local thread, so the run needs it
start e "$TMP/data" "${opts[@]}"
E=$PORT
kill -9 "$PID"
wait "$PID" 2> /dev/null || true
"$CLI" bench "$TMP/data" "${common[@]}" --threads 0 --prep-servers "127.0.0.1:$E" "${remote[@]}" > "$TMP/e.json" &
BENCH=$!
start e2 "$TMP/data" "${opts[@]}" --listen "127.0.0.1:$E"
wait "$BENCH" || fail "the run waiting for its server failed"
same "$TMP/e.json" "server up after the run started"
all_remote "$TMP/e.json" "server up after the run started"

# detect: boxes and ragged fields travel too
"$CLI" gen --task detect "$TMP/d" --images 24 --classes 5 --objects 5 --width 96 --height 72 --seed 4 --quiet
dopts=(--task detect --crop 64 --seed 3)
dcommon=(--batch-size 4 --epochs 1 --json --quiet "${dopts[@]}")
"$CLI" bench "$TMP/d" "${dcommon[@]}" --threads 2 > "$TMP/dl.json"
start d "$TMP/d" "${dopts[@]}"
"$CLI" bench "$TMP/d" "${dcommon[@]}" --threads 0 --prep-servers "127.0.0.1:$PORT" "${remote[@]}" > "$TMP/dr.json"
[ "$(checksum "$TMP/dr.json")" = "$(checksum "$TMP/dl.json")" ] || fail "detect: remote checksum differs"
for f in "$TMP"/[a-d].err "$TMP"/e2.err; do # sanitizer builds: a report is a failure
    [ ! -s "$f" ] || fail "$(basename "$f" .err) wrote to stderr: $(head -c 2000 "$f")"
done
echo "cli_serve: OK (checksum $REF)"
