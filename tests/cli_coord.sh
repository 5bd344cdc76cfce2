#!/usr/bin/env bash
# Coordinated prep end to end with real jobs (nostall bench processes):
# jobs of one group deliver exactly the bytes of a job alone, epoch by epoch,
# while each item is prepared once for the whole group (also with reads in
# flight deepening on slow storage); a job with different
# data options is refused naming the option; kill -9 of a member mid-epoch
# leaves the others finishing with correct batches, having dropped it; a
# group whose members all crashed is cleaned up by the next job; nothing is
# left in /dev/shm. Every step waits for what it needs (a member has joined:
# it maps the group's segment and runs its workers) rather than sleeping, and
# jobs that must overlap join a group held for them (coord_hold, lib_cli.sh).
source "$(dirname "$0")/lib_cli.sh"
[ -d /dev/shm ] || { echo "SKIP: no /dev/shm"; exit 77; }
G=t$$
PIDS=()
shm() { ls /dev/shm 2>/dev/null | grep -c -- "-$1\$" || true; }
trap 'coord_kill; for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -f /dev/shm/nostall-*-$G* || true; rm -rf "$TMP"' EXIT
"$CLI" gen "$TMP/data" --images 48 --classes 4 --width 96 --height 72 --quiet
common=(--batch-size 4 --crop 32 --epochs 3 --threads 1 --seed 2 --json --quiet)
"$CLI" bench "$TMP/data" "${common[@]}" > "$TMP/solo.json"

# every epoch a member delivers has the bytes of the same epoch alone
check_epochs() {
    json "$1" "all(e['checksum'] == s['checksum'] for e in j['per_epoch'] for s in __import__('json').load(open('$TMP/solo.json'))['per_epoch'] if s['epoch'] == e['epoch'])" \
        | grep -q True || fail "$1: an epoch's bytes differ from the job alone"
}

# 1. a group of three (one slow, two fast): every member delivers every
# epoch with the bytes of the job alone, and each item is prepared once for
# the group. The group is held until all three have joined (coord_group,
# lib_cli.sh), so they overlap however late a loaded machine starts them.
coord_group $G-a "$TMP/solo.json" "100 15 15" "$TMP/data" "${common[@]}"

# 1b. slow storage: each member's reads in flight grow (io_depth auto), the
# bytes do not change. With 100 ms per read a worker waits for storage at
# depth 4 unless an item took > 25 ms to prepare (none does, in any build)
for i in 1 2; do
    "$CLI" bench "$TMP/data" "${common[@]}" --storage-latency-ms 100 --coordinate $G-s > "$TMP/s$i.json" &
    PIDS+=($!)
done
wait
grew=0
for i in 1 2; do
    check_epochs "$TMP/s$i.json"
    d=$(json "$TMP/s$i.json" 'j["stats"]["io_depth_max"]')
    [ "$d" -gt 4 ] && grew=1
done
echo "slow storage: reads in flight per member $(json "$TMP/s1.json" 'j["stats"]["io_depth_max"]'), $(json "$TMP/s2.json" 'j["stats"]["io_depth_max"]')"
[ $grew = 1 ] || fail "no member deepened its reads in flight on 100 ms storage"

# 2. different data options are refused, naming the option (the first job
# would take 18 s; it is stopped once the second has been refused)
"$CLI" bench "$TMP/data" "${common[@]}" --threads 2 --step-ms 500 --coordinate $G-b > /dev/null &
a=$!
PIDS+=($a)
wait_until 60 in_group $a $G-b || fail "the first job of group b did not join it"
if "$CLI" bench "$TMP/data" "${common[@]}" --crop 40 --coordinate $G-b > /dev/null 2> "$TMP/err"; then
    fail "a job with another crop joined the group"
fi
grep -q "crop" "$TMP/err" || fail "refusal does not name the option: $(cat "$TMP/err")"
kill $a 2>/dev/null; wait $a 2>/dev/null || true

# 3. kill -9 of a member mid-epoch: the others finish, with correct bytes,
# having found it dead. The victim is a holder (coord_hold): it trains on
# batch 0 while the others join at batch 0, and with coordinate_lead slots
# they cannot finish an epoch without it. It is killed once both have joined
# (one joining after the kill would find no live member and start the group
# afresh), so however late a loaded machine starts them, they must drop it.
coord_hold $G-c "$TMP/data" "${common[@]}" --epochs 2
p2=$HOLD
for i in 1 3; do
    "$CLI" bench "$TMP/data" "${common[@]}" --threads 2 --epochs 2 --step-ms 150 --coordinate $G-c > "$TMP/c$i.json" &
    eval "p$i=\$!"
    PIDS+=($!)
done
wait_until 60 in_group $p1 $G-c || fail "member 1 did not join group c"
wait_until 60 in_group $p3 $G-c || fail "member 3 did not join group c"
kill -9 $p2
start=$(date +%s)
for i in 1 3; do
    eval "wait \$p$i" || fail "member $i failed after a member was killed"
    check_epochs "$TMP/c$i.json"
    [ "$(json "$TMP/c$i.json" 'j["per_epoch"][-1]["epoch"]')" = 1 ] || fail "member $i did not finish the epochs"
    json "$TMP/c$i.json" 'j["stats"]["coord_members_dropped"] >= 1' | grep -q True \
        || fail "member $i: the killed member was never dropped: $(json "$TMP/c$i.json" 'j["stats"]')"
done
wait $p2 2>/dev/null || true
echo "after kill -9: survivors finished in $(( $(date +%s) - start )) s; dropped $(json "$TMP/c1.json" 'j["stats"]["coord_members_dropped"]'), requeued $(json "$TMP/c1.json" 'j["stats"]["coord_items_requeued"]')"
[ "$(shm $G-c)" = 0 ] || fail "segment left after a member crashed and the others exited"

# 4. every member crashes (once both have joined): the next job of the
# group cleans up and runs
for i in 1 2; do
    "$CLI" bench "$TMP/data" "${common[@]}" --threads 2 --step-ms 500 --coordinate $G-d > /dev/null &
    eval "q$i=\$!"
    PIDS+=($!)
done
wait_until 60 in_group $q1 $G-d || fail "member 1 did not join group d"
wait_until 60 in_group $q2 $G-d || fail "member 2 did not join group d"
kill -9 $q1 $q2; wait $q1 $q2 2>/dev/null || true
[ "$(shm $G-d)" = 1 ] || fail "expected the crashed group's segment to remain"
"$CLI" bench "$TMP/data" "${common[@]}" --coordinate $G-d > "$TMP/d.json" || fail "restart after a crash"
check_epochs "$TMP/d.json"
[ "$(shm $G-d)" = 0 ] || fail "segment left after the restarted group exited"
echo PASS
