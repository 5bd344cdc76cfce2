#!/usr/bin/env bash
# Prep servers across a cut link (root only: skipped, saying why, without
# network namespaces). Server A runs in a network namespace made here,
# joined to the trainer by a veth pair on a private /30; mid-run the
# trainer's end of the link is set down (`ip link set down`: a link cut, the
# server alive). The trainer's deadline (prep_timeout_ms) drops A and hands
# its outstanding items to the others: (1) the link stays down and server B
# (loopback) makes the rest; (2) the same with a local thread instead of B;
# (3) A is the only server and the trainer has no thread, the trainer's
# connection to A is seen gone (ss), the link is set up again: A is
# reconnected and makes the rest, the only way that run can end; (4) the
# same, the link cut at the server's end (the trainer's route stays: its
# connection attempts run to their deadline, not refused). Each time
# every epoch's checksum is the local run's, every item arrives once (with
# no local thread, items received from servers = items delivered) and
# items were requeued (prep_requeued > 0). Waits on events (the server's
# "listening" and "served N" lines, the socket's state), never on time;
# the trainer's slow step only keeps the run going past the cut, and a run
# that ended before its cut anyway (nothing requeued) is run again with a
# slower step.
source "$(dirname "$0")/lib_cli.sh"
source "$(dirname "$0")/lib_netns.sh"

if ! netns_able || ! command -v ss > /dev/null; then
    [ -n "$NETNS_WHY" ] || NETNS_WHY="no ss(8) (iproute2)"
    echo "SKIPPED: cli_serve_netns needs root and network namespaces ($NETNS_WHY)" >&2
    exit 77
fi
SERVERS=()
BENCH=""
serve_kill() { for p in $BENCH "${SERVERS[@]}"; do kill "$p" 2> /dev/null || true; done; }
trap 'serve_kill; netns_cleanup; coord_kill; rm -rf "$TMP" $SHM_DIRS' EXIT
trap 'exit 143' TERM INT # the EXIT trap cleans up after a signal too

"$CLI" gen "$TMP/data" --images 48 --classes 3 --width 96 --height 72 --size-jitter 0.25 --quiet
printf 'a shared secret\n' > "$TMP/secret"
chmod 600 "$TMP/secret"
opts=(--crop 32 --seed 7)
EPOCHS=6
common=(--batch-size 4 --epochs $EPOCHS --json --quiet "${opts[@]}")
remote=(--prep-secret-file "$TMP/secret" --prep-timeout-ms 1000 --prep-inflight 4)

listening() { grep -q '^listening on ' "$1"; }
addr_of() { sed -n 's/^listening on //p' "$1"; }
# start NAME [ns NS] [options]: a server in the background; sets ADDR
start() {
    local name=$1 pre=()
    shift
    if [ "${1:-}" = ns ]; then
        pre=(ip netns exec "$2")
        shift 2
    fi
    "${pre[@]}" "$CLI" serve "$TMP/data" --threads 1 --secret-file "$TMP/secret" --progress \
        "${opts[@]}" "$@" > "$TMP/$name.out" 2> "$TMP/$name.err" &
    SERVERS+=("$!")
    wait_until 120 listening "$TMP/$name.out" || fail "$name never listened: $(cat "$TMP/$name.err")"
    ADDR=$(addr_of "$TMP/$name.out")
}
served() { tail -n 1 "$1" | sed -n 's/^served //p'; }
served_at_least() { [ "$(served "$1")" -ge "$2" ] 2> /dev/null; }
epochs() { json "$1" '" ".join(e["checksum"] for e in j["per_epoch"])'; }
# the trainer has no established connection to IP (its socket closed)
dropped() { ! ss -Htn state established dst "$1" | grep -q .; }
gone() { ! kill -0 "$1" 2> /dev/null; }

"$CLI" bench "$TMP/data" "${common[@]}" --threads 2 > "$TMP/local.json"
REF=$(epochs "$TMP/local.json")
T=$((48 * EPOCHS))

netns_host 1 || fail "cannot make a namespace"
start a ns "$HOST_NS" --listen "$HOST_IP:0"
A=$ADDR
start b
B=$ADDR
echo "server a at $A (namespace $HOST_NS, link $HOST_VETH), b at $B"

# link_set END up|down: the link's trainer end (a down end has no route:
# connecting fails at once) or its server end (the route stays, packets are
# lost: a connection attempt runs to its deadline)
link_set() {
    if [ "$1" = trainer ]; then ip link set "$HOST_VETH" "$2"; else ip -n "$HOST_NS" link set "$HOST_PEER" "$2"; fi
}
# cut_run WHAT UP THREADS SERVERS [END]: a run cut off from A (at the
# link's END, default the trainer's) after A served 10 more items; UP=1
# sets the link up again once the trainer dropped A (the run then needs A
# back), UP=0 once the run is over. Checks the run; a run that ended before
# the cut (nothing requeued) is tried again, slower.
cut_run() {
    local what=$1 up=$2 threads=$3 servers=$4 end=${5:-trainer} step=40 try n0 out
    for try in 1 2 3 4; do
        out=$TMP/cut-$try.json
        "$CLI" bench "$TMP/data" "${common[@]}" --step-ms $step --threads "$threads" \
            --prep-servers "$servers" "${remote[@]}" > "$out" &
        local bench=$!
        BENCH=$bench
        n0=$(served "$TMP/a.out")
        wait_until 300 served_at_least "$TMP/a.out" $((${n0:-0} + 10)) || fail "$what: a served nothing"
        link_set "$end" down
        if [ "$up" = 1 ]; then
            wait_until 300 eval "dropped ${A%:*} || gone $bench" || fail "$what: a never dropped"
            link_set "$end" up
        fi
        wait "$bench" || fail "$what: the run failed"
        BENCH=""
        link_set "$end" up
        [ "$(json "$out" 'j["stats"]["prep_requeued"]')" -gt 0 ] && break
        echo "$what: the run ended before its cut (nothing requeued): again with a slower step"
        step=$((step * 4))
    done
    [ "$(json "$out" 'j["stats"]["prep_requeued"]')" -gt 0 ] || fail "$what: nothing requeued in 4 runs"
    [ "$(epochs "$out")" = "$REF" ] || fail "$what: epochs' checksums $(epochs "$out") != local $REF"
    [ "$(json "$out" 'j["items"]')" = $T ] || fail "$what: $(json "$out" 'j["items"]') items, not $T"
    if [ "$threads" = 0 ]; then
        [ "$(json "$out" 'j["stats"]["prep_remote_items"]')" = $T ] \
            || fail "$what: $(json "$out" 'j["stats"]["prep_remote_items"]') items received, not $T"
    fi
    echo "$what: same checksums, $T items, requeued $(json "$out" 'j["stats"]["prep_requeued"]'), a served $(served "$TMP/a.out") in all"
}

cut_run "link cut, b takes over" 0 0 "$A,$B"
cut_run "link cut, a local thread takes over" 0 1 "$A"
# a alone: after the drop only a reconnected a can make the rest
n_before=$(served "$TMP/a.out")
cut_run "link cut and restored, a used again" 1 0 "$A"
cut_run "link cut at the server's end and restored, a used again" 1 0 "$A" server
for f in "$TMP"/a.err "$TMP"/b.err; do # sanitizer builds: a report is a failure
    [ ! -s "$f" ] || fail "$(basename "$f" .err) wrote to stderr: $(head -c 2000 "$f")"
done
echo "cli_serve_netns: OK (a served $n_before before the runs that needed it back, $(served "$TMP/a.out") after)"
