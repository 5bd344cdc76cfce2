#!/usr/bin/env bash
# tests/mpi/run.sh SCENARIO — libnostall_mpi acceptance on loopback, 4 ranks
# over TCP (`--mca btl tcp,self`), driven by tests/mpi/mpi_loader_check.c.
#   mpi_api                API edges (thread level, NULLs): mpi_api_check.c.
#   mpi_partitioned_cache  4 ranks x 25% of the dataset: after epoch 0 storage
#                          reads <= 1% of the dataset per epoch, every item
#                          delivered exactly once per epoch across ranks,
#                          per-rank checksums equal to the run without it.
#   mpi_peer_killed        rank 2 SIGKILLs itself in epoch 1: with
#                          --enable-recovery the others finish (timeouts,
#                          storage fallback, same checksums; a survivor
#                          Open MPI 4.1 itself ends for sending to the dead
#                          rank is reported and tolerated); without it
#                          mpirun aborts the job with a clear message. Never
#                          a hang (bounded by `timeout`).
#   mpi_faults             a peer corrupting what it serves / never answering:
#                          rejected or timed out, same checksums, no hang.
#   mpi_speedup            storage at 50 MB/s: epochs after the first >= 3x
#                          faster than per-rank caches (bench/partitioned_cache.sh).
# Exit 0 pass, 1 fail, 77 skip (no MPI).
set -u
scenario=${1:?scenario}
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

MPIEXEC=${NOSTALL_MPIEXEC:-$(command -v mpirun || true)}
[ -n "$MPIEXEC" ] && [ -x "$MPIEXEC" ] || skip "mpirun not found (install openmpi-bin)"
CHECK=${NOSTALL_MPI_CHECK:?NOSTALL_MPI_CHECK}
CLI=${NOSTALL_CLI:?NOSTALL_CLI}
[ -x "$CHECK" ] || skip "mpi_loader_check not built (MPI not found at configure time)"
[ -x /usr/bin/python3 ] || skip "/usr/bin/python3 needed to check the results"
# Sanitizer builds: OpenMPI leaks by design (plugins unloaded at finalize,
# unresolvable stacks), so leak checking is off here while ASan still checks
# every access; TSan ignores what happens inside OpenMPI (tsan.supp).
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
export TSAN_OPTIONS="${TSAN_OPTIONS:-} suppressions=$(cd "$(dirname "$0")" && pwd)/tsan.supp"

if [ "$scenario" = mpi_api ]; then
    [ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    timeout -k 5 60 "$MPIEXEC" -np 1 --mca btl tcp,self "$(dirname "$CHECK")/mpi_api_check" \
        "$(dirname "$CHECK")" || fail "mpi_api_check"
    exit 0
fi

tmp=${NOSTALL_TEST_TMP:-/tmp}/$scenario
rm -rf "$tmp"
mkdir -p "$tmp"
if [ "$(id -u)" = 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
MPIRUN=("$MPIEXEC" --oversubscribe -np 4 --mca btl tcp,self)

"$CLI" gen "$tmp/data" --images 400 --classes 4 --width 160 --height 120 --quiet >/dev/null ||
    fail "nostall gen"
total=$(find "$tmp/data" -type f -printf '%s\n' | awk '{s += $1} END {print s}')
quarter=$(( (total + 3) / 4 ))
echo "dataset: 400 items, $total bytes; partitioned cache per rank: $quarter bytes (25%)"

# Each mpirun is bounded (a hang fails the test rather than stalling it):
# by 120 s, several times what 4 ranks take under TSan on a loaded 2-core
# machine (~40 s), so that a busy machine is not mistaken for a hang. (The
# scenario's ctest TIMEOUT must cover its 2-3 runs: cmake/mpi.cmake.)
LIM=${NOSTALL_MPI_RUN_LIMIT:-120}

run() { # DIR TIMEOUT MPIRUN-EXTRA... -- CHECK-ARGS...
    local dir=$1 lim=$2
    shift 2
    local extra=()
    while [ "$1" != "--" ]; do extra+=("$1"); shift; done
    shift
    mkdir -p "$dir"
    local t0=$SECONDS
    timeout -k 5 "$lim" "${MPIRUN[@]}" "${extra[@]}" "$CHECK" "$tmp/data" "$dir" "$@" \
        >"$dir/mpirun.log" 2>&1
    local rc=$?
    elapsed=$((SECONDS - t0))
    hung=0
    [ $elapsed -ge "$lim" ] && hung=1
    echo "  run $(basename "$dir"): rc $rc in ~$elapsed s"
    return $rc
}

run "$tmp/ref" "$LIM" -- epochs=3 || { cat "$tmp/ref/mpirun.log"; fail "reference run"; }

case $scenario in
mpi_partitioned_cache)
    # (a healthy run: no request may time out, so the timeout is far beyond
    # what 4 ranks on a loaded 2-core machine under a sanitizer need)
    run "$tmp/pc" "$LIM" -- epochs=3 --cache-bytes "$quarter" --sync --timeout-ms 30000 ||
        { cat "$tmp/pc/mpirun.log"; fail "partitioned run"; }
    /usr/bin/python3 - "$tmp" <<'EOF' || exit 1
import json, sys, collections
tmp = sys.argv[1]
def load(d):
    ep, done = {}, {}
    for r in range(4):
        for line in open(f"{tmp}/{d}/rank_{r}.jsonl"):
            o = json.loads(line)
            if "done" in o: done[r] = o
            else: ep[(r, o["epoch"])] = o
    return ep, done
ref, _ = load("ref")
pc, done = load("pc")
# The loader prefetches across epoch boundaries, so a few items nobody had
# read yet are first read while a rank already fetches epoch 1 and count as
# epoch-1 reads of that rank. What must vanish is reading an item again:
# re-reads = all storage reads - n, at most 1% of the dataset per epoch after
# the first; the last epoch (nothing left to read for the first time) is
# also checked on its own.
n, bad = 400, []
total = sum(pc[(r, e)]["storage_reads"] for r in range(4) for e in range(3))
print(f"  storage reads over 3 epochs: {total} = {n} first reads + {total - n} re-reads")
if total - n > 2 * (n // 100):
    bad.append(f"{total - n} re-reads in epochs 1-2 > 1% of {n} per epoch")
for e in range(3):
    reads = sum(pc[(r, e)]["storage_reads"] for r in range(4))
    remote = sum(pc[(r, e)]["remote_hits"] for r in range(4))
    local = sum(pc[(r, e)]["local_hits"] for r in range(4))
    cnt = collections.Counter(i for r in range(4) for i in pc[(r, e)]["indices"])
    print(f"  epoch {e}: storage reads {reads} ({100.0 * reads / n:.1f}% of the dataset), "
          f"local hits {local}, remote hits {remote}")
    if e == 2 and reads > n // 100:
        bad.append(f"epoch {e}: {reads} storage reads > 1% of {n}")
    if e >= 1 and remote == 0:
        bad.append(f"epoch {e}: no remote hits")
    if sorted(cnt) != list(range(n)) or set(cnt.values()) != {1}:
        bad.append(f"epoch {e}: items not delivered exactly once across ranks")
    for r in range(4):
        if pc[(r, e)]["checksum"] != ref[(r, e)]["checksum"]:
            bad.append(f"rank {r} epoch {e}: checksum {pc[(r, e)]['checksum']} != "
                       f"{ref[(r, e)]['checksum']} without the partitioned cache")
        for k in ("timeouts", "verify_failures"):
            if pc[(r, e)][k]:
                bad.append(f"rank {r} epoch {e}: {k} = {pc[(r, e)][k]}")
for r in range(4):
    if not done.get(r, {}).get("done") or done[r]["detach"] != 0:
        bad.append(f"rank {r}: did not finish cleanly: {done.get(r)}")
print("  owned items per rank:", [done[r]["owned_items"] for r in range(4)],
      "unowned:", done[0]["unowned_items"])
if bad:
    print("FAIL:\n  " + "\n  ".join(bad))
    sys.exit(1)
print("PASS")
EOF
    ;;
mpi_peer_killed)
    # 1. With recovery: the survivors finish, falling back to storage.
    run "$tmp/killed" "$LIM" --enable-recovery --mca orte_abort_on_non_zero_status 0 -- \
        epochs=3 --cache-bytes "$quarter" --timeout-ms 1000 --detach-timeout-ms 3000 \
        --step-ms 20 --kill-rank 2 --kill-epoch 1 --kill-after-batches 2
    rc=$?
    [ $hung = 1 ] && { cat "$tmp/killed/mpirun.log"; fail "hang: killed run hit the timeout"; }
    grep -h "nostall_mpi" "$tmp/killed/mpirun.log" | head -3 | sed 's/^/  stderr: /'
    /usr/bin/python3 - "$tmp" <<'EOF' || { cat "$tmp/killed/mpirun.log"; exit 1; }
import json, sys
tmp = sys.argv[1]
def load(d, ranks):
    ep, done = {}, {}
    for r in ranks:
        for line in open(f"{tmp}/{d}/rank_{r}.jsonl"):
            try:
                o = json.loads(line)
            except ValueError:  # a line cut short by a killed process
                continue
            if "done" in o: done[r] = o
            else: ep[(r, o["epoch"])] = o
    return ep, done
survivors = (0, 1, 3)
ref, _ = load("ref", range(4))
k, done = load("killed", survivors)
log = open(f"{tmp}/killed/mpirun.log", errors="replace").read()
# Open MPI 4.1 silently ends a survivor that sends to the dead rank after
# its TCP transport saw that connection close (docs/mpi.md): tolerated for
# one rank that vanished after epoch 0 (rank 2 dies in epoch 1) without any
# error of ours (no line of the check program, no sanitizer or crash
# report); the other two must finish.
ours = ("Sanitizer", "runtime error", "Segmentation", "Assertion", "Aborted", "Bus error",
        "Floating point")
bad, fallbacks, finished, vanished = [], 0, 0, 0
for r in survivors:
    if r not in done:
        mine = [l for l in log.splitlines() if l.startswith(f"rank {r}:")]
        epochs_done = sum(1 for (q, _) in k if q == r)
        vanished += 1
        if mine or any(m in log for m in ours) or epochs_done < 1 or vanished > 1:
            bad.append(f"rank {r} did not finish its 3 epochs ({epochs_done} done): " +
                       "; ".join(mine))
        else:
            print(f"  rank {r}: ended without a word after {epochs_done} epoch(s): Open MPI "
                  "4.1 ending a sender to the dead rank (tolerated once)")
        continue
    if not done[r].get("done") or done[r]["epochs"] != 3:
        bad.append(f"rank {r} did not finish its 3 epochs: {done.get(r)}")
        continue
    finished += 1
    for e in range(3):
        if k[(r, e)]["checksum"] != ref[(r, e)]["checksum"]:
            bad.append(f"rank {r} epoch {e}: checksum differs from the run without the cache")
        fallbacks += k[(r, e)]["timeouts"] + k[(r, e)]["skipped_down"]
    # or it learnt of the death first (the transport's error, not a
    # timeout): the peer marked down, its items read from storage unasked
    fallbacks += done[r].get("peers_down", 0)
    print(f"  rank {r}: epochs " + ", ".join(
        f"{k[(r, e)]['seconds']:.2f} s/{k[(r, e)]['storage_reads']} reads/"
        f"{k[(r, e)]['timeouts']} timeouts/{k[(r, e)]['skipped_down']} skipped" for e in range(3))
        + f"; detach {done[r]['detach']}")
if finished == 0:
    bad.append("no survivor finished")
elif fallbacks == 0:
    bad.append("no survivor noticed the dead rank (no timeouts, nothing skipped, no peer down)")
if bad:
    print("FAIL:\n  " + "\n  ".join(bad))
    sys.exit(1)
print("  survivors finished with the same checksums")
EOF
    # 2. Without recovery: mpirun aborts the whole job, promptly.
    run "$tmp/abort" "$LIM" -- epochs=3 --cache-bytes "$quarter" --timeout-ms 1000 \
        --step-ms 20 --kill-rank 2 --kill-epoch 1 --kill-after-batches 2
    rc=$?
    [ $hung = 1 ] && { cat "$tmp/abort/mpirun.log"; fail "hang: aborted run hit the timeout"; }
    [ $rc -ne 0 ] || fail "job without --enable-recovery exited 0 after a rank was killed"
    grep -m1 -i "signal 9\|killed" "$tmp/abort/mpirun.log" | sed 's/^/  mpirun: /'
    echo "PASS"
    ;;
mpi_faults)
    # A peer that corrupts what it serves, then one that never answers: the
    # replies are rejected / time out, items come from storage, and every
    # rank still delivers exactly the bytes of the run without the cache.
    NOSTALL_MPI_FAULT=corrupt NOSTALL_MPI_FAULT_RANK=1 run "$tmp/corrupt" "$LIM" \
        -x NOSTALL_MPI_FAULT -x NOSTALL_MPI_FAULT_RANK -- epochs=3 --cache-bytes "$quarter" --sync ||
        { cat "$tmp/corrupt/mpirun.log"; fail "corrupt run"; }
    NOSTALL_MPI_FAULT=silent NOSTALL_MPI_FAULT_RANK=1 run "$tmp/silent" "$LIM" \
        -x NOSTALL_MPI_FAULT -x NOSTALL_MPI_FAULT_RANK -- epochs=3 --cache-bytes "$quarter" --sync \
        --timeout-ms 500 || { cat "$tmp/silent/mpirun.log"; fail "silent run"; }
    [ $hung = 1 ] && fail "silent run hit the timeout"
    grep -h "nostall_mpi" "$tmp/corrupt/mpirun.log" "$tmp/silent/mpirun.log" | grep -v "fault injection" |
        head -4 | sed 's/^/  stderr: /'
    /usr/bin/python3 - "$tmp" <<'EOF2' || exit 1
import json, sys
tmp = sys.argv[1]
def load(d):
    ep = {}
    for r in range(4):
        for line in open(f"{tmp}/{d}/rank_{r}.jsonl"):
            o = json.loads(line)
            if "epoch" in o: ep[(r, o["epoch"])] = o
    return ep
ref, bad = load("ref"), []
for d, key in (("corrupt", "verify_failures"), ("silent", "timeouts")):
    k = load(d)
    seen = sum(k[(r, e)][key] for r in range(4) for e in range(3))
    reads = [sum(k[(r, e)]["storage_reads"] for r in range(4)) for e in range(3)]
    print(f"  {d}: {key} {seen}, storage reads per epoch {reads}, "
          f"epoch seconds {[round(max(k[(r, e)]['seconds'] for r in range(4)), 2) for e in range(3)]}")
    if seen == 0: bad.append(f"{d}: no {key} counted")
    for r in range(4):
        for e in range(3):
            if k[(r, e)]["checksum"] != ref[(r, e)]["checksum"]:
                bad.append(f"{d}: rank {r} epoch {e}: checksum differs (a wrong item was delivered)")
if bad:
    print("FAIL:\n  " + "\n  ".join(bad)); sys.exit(1)
print("PASS")
EOF2
    ;;
mpi_speedup)
    # Storage at 50 MB/s per rank: epochs after the first >= 3x faster than
    # per-rank MinIO caches of the same size (bench/partitioned_cache.sh).
    # A timing test on shared cores: one retry if the first run falls short.
    for attempt in 1 2; do
        out=$(WORK="$tmp/bench" IMAGES=400 PAD_KB=384 EPOCHS=3 \
              bash "$(dirname "$0")/../../bench/partitioned_cache.sh" "$(dirname "$CHECK")" 2>&1) ||
            { echo "$out"; fail "bench"; }
        echo "$out" | sed 's/^/  /'
        sp=$(/usr/bin/python3 -c "import json;print(json.load(open('$tmp/bench/result.json'))['speedup'])")
        /usr/bin/python3 -c "import sys; sys.exit(0 if $sp >= 3 else 1)" && break
        [ $attempt = 2 ] && fail "speedup $sp < 3 (twice)"
        echo "  speedup $sp < 3: once more (machine busy?)"
    done
    echo "PASS"
    ;;
*) fail "unknown scenario $scenario" ;;
esac
