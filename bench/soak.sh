#!/usr/bin/env bash
# bench/soak.sh — the soak test (issue 25; not part of `make test`): long runs
# of the nostall CLI that a unit test cannot afford, checked for what only
# time shows.
#
#   A. data echoing + the MinIO cache: one job, E epochs, echo_factor 2 at
#      the decode point, a cache holding half the dataset (every epoch reads
#      the other half from storage again);
#   B. coordinated prep: a group of 3 jobs (`--coordinate`, also with a MinIO
#      cache each) for E epochs, in which member 3 is killed with -9 every
#      --kill-every seconds (once it has joined the group and started its
#      workers; every other kill at a moment when one of its workers runs,
#      so that some kills catch it holding items) and restarted at once; the
#      restarted member joins at the next epoch boundary. Echoing cannot be combined with coordinated prep
#      (the loader refuses it), hence two runs; they run at the same time.
#
# Both runs are paced (--step-ms) to last about --minutes of wall time, so
# they are long in time as well as in epochs while leaving the machine's
# CPUs mostly free; --minutes 0 runs them as fast as they go.
#
# Checked, and printed as a table:
#   - RSS flat after the first epochs: /proc/PID/status VmRSS of every
#     process sampled throughout; for each job that lives the whole run, no
#     growth over the second half of its run (< max(4 MiB, 2%): a leak grows
#     linearly, and over many epochs shows there) and little from 10% of its
#     run (well after the first epoch) to its peak (< max(16 MiB, 25%):
#     grow-only buffers still meet a larger item or crop now and then, ever
#     more rarely);
#   - no /dev/shm segment of the group left at the end;
#   - every epoch's bytes equal to a solo run's: the per-epoch checksums of
#     `nostall bench --json` of each job that finished (member 3 is killed
#     before it can print its own, except its last instance) against a job
#     alone with the same data options, no cache, another thread count;
#   - the group dropped exactly one member per kill; the echo counters
#     (fresh items = E x N, achieved factor 2), the cache's hits per epoch.
#
# Usage: bash bench/soak.sh [--images N] [--epochs E] [--minutes M]
#                           [--kill-every S] [--threads T] [--cli PATH]
#                           [--work DIR] [--keep]
#   full (defaults):  --images 1000 --epochs 200 --minutes 30 --kill-every 20
#   short:            bash bench/soak.sh --images 200 --epochs 20 --minutes 3
# The CLI is $NOSTALL_CLI or build/nostall (a release build; make build).
# Writes WORK/result.json and the table; exit status 0 when every check
# passes, 1 otherwise. Run it niced on a shared machine: nice -n 10 bash ...
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
IMAGES=1000 EPOCHS=200 MINUTES=30 KILL_EVERY=20 THREADS=2 BATCH=32 KEEP=0
CLI=${NOSTALL_CLI:-$ROOT/build/nostall}
WORK=""
usage() { sed -n '/^# Usage:/,/^# passes/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
        --images) IMAGES=$2; shift 2 ;;
        --epochs) EPOCHS=$2; shift 2 ;;
        --minutes) MINUTES=$2; shift 2 ;;
        --kill-every) KILL_EVERY=$2; shift 2 ;;
        --threads) THREADS=$2; shift 2 ;;
        --cli) CLI=$2; shift 2 ;;
        --work) WORK=$2; shift 2 ;;
        --keep) KEEP=1; shift ;;
        -h|--help) usage ;;
        *) echo "soak.sh: unknown argument $1" >&2; usage ;;
    esac
done
[ -x "$CLI" ] || { echo "soak.sh: no CLI at $CLI (make build, or --cli PATH)" >&2; exit 2; }
[ -d /dev/shm ] || { echo "soak.sh: no /dev/shm (coordinated prep needs it)" >&2; exit 2; }
PY=/usr/bin/python3
[ -n "$WORK" ] || WORK=$(mktemp -d "${TMPDIR:-/tmp}/nostall-soak.XXXXXX")
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
GROUP=soak$$
SHM=/dev/shm/nostall-$(id -u)-$GROUP
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    [ -e "$SHM" ] && rm -f "$SHM"
    [ "$KEEP" = 1 ] || rm -rf "$WORK"
}
trap cleanup EXIT
log() { echo "[$(date +%H:%M:%S)] $*"; }

# ---- the dataset and the plan ----------------------------------------------
log "dataset: $IMAGES JPEGs 320x240 in $WORK/data"
"$CLI" gen "$WORK/data" --images "$IMAGES" --classes 10 --width 320 --height 240 --size-jitter 0.3 \
    --seed 5 --quiet > /dev/null
BYTES=$(find "$WORK/data" -type f -printf '%s\n' | awk '{s += $1} END {print s}')
CACHE=$((BYTES / 2))
NB=$(( (IMAGES + BATCH - 1) / BATCH ))           # batches per epoch
NB_ECHO=$(( (2 * IMAGES + BATCH - 1) / BATCH ))  # ... with echo_factor 2
if [ "$MINUTES" = 0 ]; then STEP_B=0 STEP_A=0; else
    STEP_B=$(awk -v m="$MINUTES" -v e="$EPOCHS" -v n="$NB" 'BEGIN {printf "%.1f", m * 60000 / (e * n)}')
    STEP_A=$(awk -v m="$MINUTES" -v e="$EPOCHS" -v n="$NB_ECHO" 'BEGIN {printf "%.1f", m * 60000 / (e * n)}')
fi
common=(--batch-size "$BATCH" --crop 64 --seed 11 --epochs "$EPOCHS" --json --quiet)
echo_opts=(--echo-factor 2 --echo-point decode)
log "plan: $EPOCHS epochs of $IMAGES items ($BYTES bytes), batch $BATCH, $THREADS threads; cache $CACHE bytes" \
    "(half the data); A: echo 2 at decode, step $STEP_A ms; B: group of 3, step $STEP_B ms," \
    "member 3 killed every $KILL_EVERY s; about $MINUTES min"

# ---- solo references: same data options, no cache, one thread ---------------
log "reference runs (solo, no cache, 1 thread, as fast as they go) ..."
"$CLI" bench "$WORK/data" "${common[@]}" "${echo_opts[@]}" --threads 1 --cache none > "$WORK/ref-echo.json"
"$CLI" bench "$WORK/data" "${common[@]}" --threads 1 --cache none > "$WORK/ref-plain.json"

# ---- RSS sampler ---------------------------------------------------------------
# start_time PID: when the process started (clock ticks since boot, field 22
# of /proc/PID/stat; set at fork, kept across exec), empty if it is gone
start_time() { sed 's/.*) //' "/proc/$1/stat" 2> /dev/null | awk '{print $20}'; }
: > "$WORK/procs"    # "pid role starttime" of every process started
: > "$WORK/rss"      # "seconds pid rss_kb anon_kb file_kb shmem_kb"
T0=$(date +%s.%N)
INTERVAL=$(awk -v m="$MINUTES" 'BEGIN {i = m * 60 / 600; if (i < 1) i = 1; if (i > 5) i = 5; print i}')
sampler() {
    local now p role st r
    while :; do
        now=$(awk -v a="$(date +%s.%N)" -v b="$T0" 'BEGIN {printf "%.1f", a - b}')
        while read -r p role st; do
            # the process it was, not a later one given the same pid (a
            # killed member's pid is reused within minutes on a busy machine)
            [ "$(start_time "$p")" = "$st" ] || continue
            # VmRSS and its parts: anonymous memory (the heap: a leak shows
            # here), mapped files, and shared memory (the group's segment:
            # bounded by its size, grows as this member touches more of it)
            r=$(awk '/^VmRSS:/ {v = $2} /^RssAnon:/ {a = $2} /^RssFile:/ {f = $2}
                     /^RssShmem:/ {s = $2} END {if (v != "") print v, a + 0, f + 0, s + 0}' \
                "/proc/$p/status" 2>/dev/null) || continue
            [ -n "$r" ] && echo "$now $p $r"
        done < "$WORK/procs" >> "$WORK/rss"
        sleep "$INTERVAL"
    done
}
sampler &
SAMPLER=$!
PIDS+=($SAMPLER)
start_job() { # ROLE OUT ARGS...: start a bench in the background, record it; sets JOB
    local role=$1 out=$2
    shift 2
    "$CLI" bench "$WORK/data" "$@" > "$out" 2> "$out.err" &
    JOB=$!
    PIDS+=($JOB)
    echo "$JOB $role $(start_time $JOB)" >> "$WORK/procs"
}
# joined PID: PID maps the group's segment (by inode) and runs its workers
# (the loader joins the group before it starts any worker thread)
joined() {
    local ino n
    ino=$(stat -c %i "$SHM" 2>/dev/null) || return 1
    awk -v i="$ino" '$5 == i {f = 1} END {exit !f}' "/proc/$1/maps" 2>/dev/null || return 1
    n=$(awk '/^Threads:/ {print $2}' "/proc/$1/status" 2>/dev/null) || return 1
    [ "${n:-0}" -gt "$THREADS" ]
}
# worker_busy PID: a thread of PID other than its main one (a worker
# preparing an item, holding the group's tickets) is running or runnable
worker_busy() {
    local f line st
    for f in /proc/"$1"/task/*/stat; do
        [ "$f" = "/proc/$1/task/$1/stat" ] && continue
        read -r line 2>/dev/null < "$f" || continue
        st=${line##*) }
        [ "${st%% *}" = R ] && return 0
    done
    return 1
}
# wait_busy PID SECONDS: until worker_busy (0) or SECONDS pass (1), polling
# every 2 ms without starting a process (read -t on a FIFO nobody writes)
mkfifo "$WORK/tick"
exec 9<> "$WORK/tick"
wait_busy() {
    local end=$((SECONDS + $2))
    while [ $SECONDS -lt $end ]; do
        worker_busy "$1" && return 0
        read -r -t 0.002 -u 9 _ || true
    done
    return 1
}
wait_joined() { # PID SECONDS
    local end=$((SECONDS + $2))
    until joined "$1"; do
        kill -0 "$1" 2>/dev/null || return 1
        [ $SECONDS -lt $end ] || return 1
        sleep 0.05
    done
}

# ---- A and B, at the same time -----------------------------------------------
log "A: echo + cache, B: coordinated group of 3 ..."
start_job A "$WORK/A.json" "${common[@]}" "${echo_opts[@]}" --threads "$THREADS" --cache-bytes "$CACHE" --step-ms "$STEP_A"
A=$JOB
bargs=("${common[@]}" --threads "$THREADS" --cache-bytes "$CACHE" --step-ms "$STEP_B" --coordinate "$GROUP")
start_job B1 "$WORK/B1.json" "${bargs[@]}"
B1=$JOB
start_job B2 "$WORK/B2.json" "${bargs[@]}"
B2=$JOB
start_job B3 "$WORK/B3.0.json" "${bargs[@]}"
B3=$JOB
kills=0 kill_failures=0 busy_kills=0
# The kills stop 3 kill periods before the planned end (the paced group
# cannot end sooner: its steps alone take the planned time), so the last
# member 3 joins the group while it still runs and delivers a few epochs (a
# member started after the group ended would begin a group of its own).
# Every other kill waits (up to 10 s) for a moment when one of member 3's
# workers runs: a paced group spends most of its time with a full ring and
# idle workers, so kills at any moment rarely catch a member holding items
# (which the others must then requeue).
stop_kills=$(awk -v m="$MINUTES" -v k="$KILL_EVERY" 'BEGIN {printf "%d", m * 60 - 3 * k}')
while kill -0 $B1 2>/dev/null && kill -0 $B2 2>/dev/null; do
    sleep "$KILL_EVERY"
    elapsed=$(awk -v a="$(date +%s.%N)" -v b="$T0" 'BEGIN {printf "%d", a - b}')
    [ "$elapsed" -lt "$stop_kills" ] || break
    kill -0 $B1 2>/dev/null && kill -0 $B2 2>/dev/null || break
    if ! wait_joined $B3 120; then
        log "member 3 (pid $B3) did not join within 120 s: not killed"
        kill_failures=$((kill_failures + 1))
        continue
    fi
    if [ $((kills % 2)) = 1 ] && wait_busy $B3 10; then busy_kills=$((busy_kills + 1)); fi
    kill -9 $B3 2>/dev/null || true
    wait $B3 2>/dev/null || true
    kills=$((kills + 1))
    start_job B3 "$WORK/B3.$kills.json" "${bargs[@]}"
    B3=$JOB
    [ $((kills % 10)) = 0 ] && log "  $kills kills so far"
done
log "kills done ($kills); waiting for the jobs to finish ..."
rc_a=0 rc_b1=0 rc_b2=0 rc_b3=0
wait $A || rc_a=$?
wait $B1 || rc_b1=$?
wait $B2 || rc_b2=$?
# the last member 3 finishes with the group; if it is still running a
# minute after the others, it started a group of its own (reported)
end=$((SECONDS + 60))
while kill -0 $B3 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 0.5; done
if kill -0 $B3 2>/dev/null; then
    log "the last member 3 (pid $B3) still runs a minute after the group ended: killed"
    kill -9 $B3 2>/dev/null || true
fi
wait $B3 2>/dev/null || rc_b3=$?
kill $SAMPLER 2>/dev/null || true
wait $SAMPLER 2>/dev/null || true
WALL=$(awk -v a="$(date +%s.%N)" -v b="$T0" 'BEGIN {printf "%.0f", a - b}')
# the group's segment, and any half-made segment of one of our processes
# (a member killed while creating the group leaves /nostall-UID~tmp~PID~N)
shm_left=0
[ -e "$SHM" ] && shm_left=1
while read -r p _; do
    for f in /dev/shm/nostall-"$(id -u)"~tmp~"$p"~*; do
        [ -e "$f" ] && { log "left behind: $f"; shm_left=$((shm_left + 1)); }
    done
done < "$WORK/procs"
log "done in $WALL s; analysing ..."

# ---- checks and the table ------------------------------------------------------
"$PY" - "$WORK" "$EPOCHS" "$IMAGES" "$kills" "$kill_failures" "$shm_left" "$WALL" \
    "$rc_a" "$rc_b1" "$rc_b2" "$rc_b3" "$B3" "$MINUTES" "$STEP_A" "$STEP_B" "$KILL_EVERY" "$BYTES" \
    "$busy_kills" <<'PYEOF'
import glob, json, os, sys
(work, E, N, kills, kill_failures, shm_left, wall, rc_a, rc_b1, rc_b2, rc_b3, last_b3, minutes,
 step_a, step_b, kill_every, nbytes, busy_kills) = sys.argv[1:]
E, N, kills, kill_failures, shm_left = int(E), int(N), int(kills), int(kill_failures), int(shm_left)
rcs = {"A": int(rc_a), "B1": int(rc_b1), "B2": int(rc_b2), "B3": int(rc_b3)}
checks, rows = [], []

def check(name, ok, detail=""):
    checks.append({"check": name, "ok": bool(ok), "detail": detail})

def load(path):
    try:
        return json.load(open(path))
    except (OSError, ValueError):
        return None

ref = {"A": load(f"{work}/ref-echo.json"), "B": load(f"{work}/ref-plain.json")}
for k, r in ref.items():
    check(f"reference run {k} complete", r and len(r["per_epoch"]) == E)
refsum = {k: {e["epoch"]: e["checksum"] for e in r["per_epoch"]} if r else {} for k, r in ref.items()}

# processes and their RSS samples
procs = {}
for line in open(f"{work}/procs"):
    pid, role, *_ = line.split()
    procs[pid] = role
samples = {}
parts_of = {}  # pid -> [(t, [anon, file, shmem])]
for line in open(f"{work}/rss"):
    t, pid, kb, *parts = line.split()
    samples.setdefault(pid, []).append((float(t), int(kb)))
    parts_of.setdefault(pid, []).append((float(t), [int(x) for x in parts]))

def rss_figures(pid):
    s = samples.get(pid, [])
    if len(s) < 5:
        return None
    t0, t1 = s[0][0], s[-1][0]
    early_t = t0 + 0.1 * (t1 - t0)
    early = next(kb for t, kb in s if t >= early_t)
    mid = next(kb for t, kb in s if t >= t0 + 0.5 * (t1 - t0))
    late = [kb for t, kb in s if t >= early_t]
    half = [(t, kb) for t, kb in s if t >= t0 + 0.5 * (t1 - t0)]
    # least-squares slope over the second half, KiB per minute
    n = len(half)
    mt = sum(t for t, _ in half) / n
    mk = sum(kb for _, kb in half) / n
    var = sum((t - mt) ** 2 for t, _ in half)
    slope = (sum((t - mt) * (kb - mk) for t, kb in half) / var * 60) if var > 0 else 0
    return {"samples": len(s), "first_kb": s[0][1], "at10_kb": early, "at50_kb": mid,
            "end_kb": s[-1][1], "peak_after10_kb": max(late), "growth_kb": s[-1][1] - early,
            "growth_2nd_half_kb": s[-1][1] - mid, "peak_growth_kb": max(late) - early,
            "slope_kb_per_min_2nd_half": round(slope, 1), "seconds": round(t1 - t0, 1),
            "growth_2nd_half_parts_kb": parts_growth(pid, t0 + 0.5 * (t1 - t0))}

def parts_growth(pid, since):
    """growth of RssAnon, RssFile, RssShmem from the first sample at or after `since` to the end"""
    p = [(t, v) for t, v in parts_of.get(pid, []) if len(v) == 3]
    mid = next((v for t, v in p if t >= since), None)
    if not p or mid is None:
        return None
    return dict(zip(("anon", "file", "shmem"), (e - m for e, m in zip(p[-1][1], mid))))

result = {"epochs": E, "images": N, "dataset_bytes": int(nbytes), "minutes": float(minutes),
          "step_ms": {"A": float(step_a), "B": float(step_b)}, "kill_every_s": int(kill_every),
          "kills": kills, "busy_kills": int(busy_kills), "wall_s": int(wall), "jobs": {}}
jobs = {"A": f"{work}/A.json", "B1": f"{work}/B1.json", "B2": f"{work}/B2.json"}
last = sorted(glob.glob(f"{work}/B3.*.json"), key=lambda p: int(p.split(".")[-2]))[-1]
jobs["B3 (last)"] = last
for name, path in jobs.items():
    role = name.split()[0]
    j = load(path)
    pid = [p for p, r in procs.items() if r == role][-1]
    rss = rss_figures(pid)
    ok_exit = rcs[role] == 0 and j is not None
    check(f"{name} finished (exit 0, JSON)", ok_exit,
          f"exit {rcs[role]}; {open(path + '.err').read().strip()[-300:]}")
    row = {"job": name, "pid": pid, "epochs": 0, "mismatch": 0, "first_epoch": None,
           "rss": rss, "peak_rss_bytes": j.get("peak_rss_bytes") if j else None}
    if j:
        sums = refsum["A" if role == "A" else "B"]
        eps = j["per_epoch"]
        bad = [e["epoch"] for e in eps if sums.get(e["epoch"]) != e["checksum"]]
        row.update(epochs=len(eps), mismatch=len(bad), first_epoch=eps[0]["epoch"] if eps else None,
                   items=j["items"], seconds=j["seconds"], stats=j["stats"])
        check(f"{name}: every epoch's bytes equal the solo run's", not bad and eps,
              f"{len(bad)} of {len(eps)} epochs differ (first: {bad[:5]})")
        if role in ("A", "B1", "B2"):
            check(f"{name}: all {E} epochs delivered", len(eps) == E and eps[0]["epoch"] == 0,
                  f"{len(eps)} epochs from {row['first_epoch']}")
        per = eps[1:] if len(eps) > 1 else eps
        row["cache_hits_per_epoch"] = [min(e["cache_hits"] for e in per), max(e["cache_hits"] for e in per)] if per else None
        row["storage_reads_per_epoch"] = [min(e["storage_reads"] for e in per), max(e["storage_reads"] for e in per)] if per else None
        if role == "A":
            ec = j["echo"]
            row["echo"] = ec
            check("A: echo counters (fresh = epochs x items, achieved factor 2)",
                  ec["fresh_items"] == E * N and ec["achieved_factor"] == 2.0,
                  f"fresh {ec['fresh_items']}, achieved {ec['achieved_factor']}")
        if role.startswith("B"):
            row["produced"] = j["stats"]["coord_items_produced"]
            row["requeued"] = j["stats"]["coord_items_requeued"]
        if role in ("B1", "B2"):
            dropped = j["stats"]["coord_members_dropped"]
            row["dropped"] = dropped
            check(f"{name}: the group dropped one member per kill", dropped == kills,
                  f"dropped {dropped}, kills {kills}")
    if rss and role in ("A", "B1", "B2"):
        tol2 = max(4 * 1024, 0.02 * rss["at50_kb"])
        tol10 = max(16 * 1024, 0.25 * rss["at10_kb"])
        check(f"{name}: RSS flat after the first epochs (2nd half < {tol2 / 1024:.0f} MiB, "
              f"peak from 10% < {tol10 / 1024:.0f} MiB)",
              rss["growth_2nd_half_kb"] < tol2 and rss["peak_growth_kb"] < tol10,
              f"at 10%: {rss['at10_kb']} KiB, at 50% {rss['at50_kb']}, end {rss['end_kb']}, "
              f"peak {rss['peak_after10_kb']}")
    rows.append(row)
    result["jobs"][name] = row
b3_instances = sorted(glob.glob(f"{work}/B3.*.json"))
b3_peaks = [rss_figures(p) for p, r in procs.items() if r == "B3"]
b3_peaks = [x["peak_after10_kb"] for x in b3_peaks if x]
result["b3_instances"] = len(b3_instances)
result["b3_peak_rss_kb_max"] = max(b3_peaks) if b3_peaks else None
check("every kill happened after member 3 had joined", kill_failures == 0, f"{kill_failures} not killed")
check("at least one kill", kills > 0 or float(minutes) == 0)
check("no /dev/shm segment left (the group's, or a half-made one of a killed member)",
      shm_left == 0, f"{shm_left} left")
result["checks"] = checks
json.dump(result, open(f"{work}/result.json", "w"), indent=1)

mib = lambda kb: f"{kb / 1024:.1f}" if kb is not None else "-"
parts_cell = lambda g: " / ".join(mib(g[k]) for k in ("anon", "file", "shmem")) if g else "-"
print()
print(f"soak: {E} epochs x {N} items, {int(wall) / 60:.1f} min wall; A: echo 2 (decode) + MinIO cache of half "
      f"the data, step {step_a} ms; B: group of 3 + cache, step {step_b} ms, member 3 killed -9 and "
      f"restarted {kills} times (every {kill_every} s; {busy_kills} of them while one of its workers ran)")
print()
print("| job | epochs (from) | epochs = solo | RSS MiB at 10% | at 50% | end | peak after 10% | growth 2nd half | of it anon / file / shmem | slope 2nd half KiB/min | cache hits/epoch | storage reads/epoch |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    x = r["rss"] or {}
    hits = r.get("cache_hits_per_epoch") or ["-", "-"]
    reads = r.get("storage_reads_per_epoch") or ["-", "-"]
    print(f"| {r['job']} | {r['epochs']} ({r['first_epoch']}) | {r['epochs'] - r['mismatch']}/{r['epochs']} | "
          f"{mib(x.get('at10_kb'))} | {mib(x.get('at50_kb'))} | {mib(x.get('end_kb'))} | "
          f"{mib(x.get('peak_after10_kb'))} | {mib(x.get('growth_2nd_half_kb'))} | "
          f"{parts_cell(x.get('growth_2nd_half_parts_kb'))} | "
          f"{x.get('slope_kb_per_min_2nd_half', '-')} | "
          f"{hits[0]}-{hits[1]} | {reads[0]}-{reads[1]} |")
print()
print(f"member 3: {len(b3_instances)} instances, largest RSS {mib(result['b3_peak_rss_kb_max'])} MiB; "
      f"group dropped {rows[1].get('dropped', '-')} members for {kills} kills; items the group "
      f"requeued (taken by a member that died before finishing them): {rows[1].get('requeued', '-')}; "
      f"items prepared by B1/B2/last B3: {rows[1].get('produced', '-')}/{rows[2].get('produced', '-')}/"
      f"{rows[3].get('produced', '-')}; /dev/shm segments left: {shm_left}")
print()
for c in checks:
    print(f"  {'ok  ' if c['ok'] else 'FAIL'} {c['check']}" + ("" if c["ok"] or not c["detail"] else f": {c['detail']}"))
failed = [c for c in checks if not c["ok"]]
print()
print("soak: PASS" if not failed else f"soak: FAIL ({len(failed)} checks)")
print(f"(details: {work}/result.json)")
sys.exit(1 if failed else 0)
PYEOF
