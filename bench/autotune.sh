#!/usr/bin/env bash
# bench/autotune.sh — autotune against a grid of hand settings, each run
# inside a cgroup v1 CPU quota of 0.5, 1 and 2 CPUs, in eight situations:
#   prep   JPEGs 400x300 to 224 float, a 2 ms step: the workers' CPU bounds it
#   fetch  small JPEGs from emulated storage (--storage-mbps 2,
#          --storage-latency-ms 5), a 2 ms step: reads bound it
#   step   JPEGs 400x300, a 60 ms step: the step bounds it (CPU to give back)
#   halve  JPEGs 400x300, a 40 ms step that becomes 20 ms after half the
#          batches (bench --step-ms-after --step-change-batch)
#   cache-fits  the fetch situation over 10 epochs with a MinIO cache of
#          the dataset's size and a tenth (epochs 2.. from the cache)
#   cache-half  the same with a cache of half the dataset (half the items
#          come from storage every epoch)
#   cache-auto-fits  the cache-fits job where autotune sizes the cache
#          itself: autotune gets --memory-budget (twice the ring of the
#          configured batches_ahead plus twice the dataset: the cache gets
#          what the ring leaves, more than the dataset) and no cache_bytes;
#          the grid gets --cache-bytes the dataset's size and a tenth
#   cache-auto-half  the same with a memory_budget that leaves the cache
#          half the dataset after that ring; the grid gets --cache-bytes
#          half the dataset
# Grid: threads 1|2 x batches_ahead 2|6 x io_depth 1|8; autotune with its
# defaults. Rounds are interleaved (every setting once per round); per
# (situation, budget) the median over rounds of items/s and of CPU seconds
# per 1000 items, the CPU taken from the cgroup's own cpuacct.usage, and the
# peak CPUs used (usage / wall) to show the quota held. Time to settle:
# when autotune last changed a setting (bench --json's autotune
# "last_change_s", from the run's start; for halve, after the step changed).
#
# Usage (root; cgroup v1 with the cpu and cpuacct controllers mounted under
# /sys/fs/cgroup/cpu and /sys/fs/cgroup/cpuacct):
#   bench/autotune.sh [--rounds N] [--budgets "0.5 1 2"]
#                     [--situations "prep fetch step halve cache-fits cache-half
#                                    cache-auto-fits cache-auto-half"]
# Prints a Markdown table (docs/autotune.md) and keeps the raw rows in
# $OUT (default /tmp/nostall-autotune.tsv). Figures from a busy machine are
# noisy: say so beside them.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
CLI=${NOSTALL_CLI:-$here/build/nostall}
PY=/usr/bin/python3
rounds=3
budgets="0.5 1 2"
situations="prep fetch step halve cache-fits cache-half cache-auto-fits cache-auto-half"
OUT=${OUT:-/tmp/nostall-autotune.tsv}
while [ $# -gt 0 ]; do
    case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --budgets) budgets=$2; shift 2 ;;
    --situations) situations=$2; shift 2 ;;
    *) echo "bench/autotune.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
CPU=/sys/fs/cgroup/cpu
ACCT=/sys/fs/cgroup/cpuacct
[ -w "$CPU" ] && [ -w "$ACCT" ] || { echo "bench/autotune.sh: needs root and cgroup v1 cpu + cpuacct" >&2; exit 77; }
WORK=$(mktemp -d /tmp/nostall-autotune.XXXXXX)
CG=nostall_autotune_$$
cleanup() {
    rmdir "$CPU/$CG" "$ACCT/$CG" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
mkdir "$CPU/$CG" "$ACCT/$CG"

"$CLI" gen "$WORK/big" --images 400 --classes 4 --width 400 --height 300 --quiet --seed 1
"$CLI" gen "$WORK/small" --images 400 --classes 4 --width 64 --height 48 --quiet --seed 2
small_bytes=$(du -sb "$WORK/small" | cut -f1)
fetch="$WORK/small --batch-size 16 --step-ms 2 --storage-mbps 2 --storage-latency-ms 5"
# the ring of the configured batches_ahead (what autotune's ring takes when
# the cache is sized from memory_budget and the budget leaves no more)
# shellcheck disable=SC2086
ring0=$("$CLI" bench $fetch --epochs 1 --json --quiet --no-checksum \
    | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["stats"]["ring_bytes_max"])')

# situation_args SITUATION SETTING
situation_args() {
    case "$1" in
    prep) echo "$WORK/big --batch-size 16 --epochs 6 --step-ms 2" ;;
    fetch) echo "$fetch --epochs 6" ;;
    step) echo "$WORK/big --batch-size 16 --epochs 3 --step-ms 60" ;;
    halve) echo "$WORK/big --batch-size 16 --epochs 4 --step-ms 40 --step-ms-after 20 --step-change-batch 50" ;;
    cache-fits) echo "$fetch --epochs 10 --cache-bytes $((small_bytes * 11 / 10))" ;;
    cache-half) echo "$fetch --epochs 10 --cache-bytes $((small_bytes / 2))" ;;
    cache-auto-fits)
        if [ "$2" = autotune ]; then echo "$fetch --epochs 10 --memory-budget $((2 * ring0 + 2 * small_bytes))"
        else echo "$fetch --epochs 10 --cache-bytes $((small_bytes * 11 / 10))"; fi ;;
    cache-auto-half)
        if [ "$2" = autotune ]; then echo "$fetch --epochs 10 --memory-budget $((ring0 + small_bytes / 2))"
        else echo "$fetch --epochs 10 --cache-bytes $((small_bytes / 2))"; fi ;;
    esac
}
settings=("autotune")
for t in 1 2; do for a in 2 6; do for d in 1 8; do settings+=("t$t-a$a-d$d"); done; done; done
setting_args() {
    case "$1" in
    autotune) echo "--autotune" ;;
    t*) IFS=- read -r t a d <<< "$1"; echo "--threads ${t#t} --batches-ahead ${a#a} --io-depth ${d#d}" ;;
    esac
}

# one run inside the cgroup: prints items/s, seconds, CPU seconds, and
# autotune's setting at the end
run_one() {
    local budget=$1 sit=$2 set=$3
    echo "$("$PY" -c "print(int($budget * 100000))")" > "$CPU/$CG/cpu.cfs_quota_us"
    echo 100000 > "$CPU/$CG/cpu.cfs_period_us"
    local before after
    before=$(cat "$ACCT/$CG/cpuacct.usage")
    # shellcheck disable=SC2046
    sh -c 'echo $$ > "$1/cgroup.procs"; echo $$ > "$2/cgroup.procs"; shift 2; exec "$@"' sh \
        "$CPU/$CG" "$ACCT/$CG" "$CLI" bench $(situation_args "$sit" "$set") $(setting_args "$set") \
        --seed 3 --json --quiet --no-checksum > "$WORK/run.json"
    after=$(cat "$ACCT/$CG/cpuacct.usage")
    "$PY" - "$WORK/run.json" "$before" "$after" "$budget" "$sit" "$set" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
cpu = (int(sys.argv[3]) - int(sys.argv[2])) * 1e-9
a = j["autotune"]
ch = (j["step_change"] or {}).get("seconds")
opt = lambda v: "-" if v is None else "%.3f" % v
print("\t".join(str(x) for x in [sys.argv[4], sys.argv[5], sys.argv[6], "%.1f" % j["items_per_second"],
      "%.3f" % j["seconds"], "%.3f" % cpu, j["items"], a["active_workers"], a["batches_ahead"],
      a["io_depth"], a["reason"], opt(a["last_change_s"]), opt(ch), j["cache_hits"],
      a["cache_bytes"], a["cache_budget"], j["stats"]["cache_bytes"]]))
EOF
}

printf "budget\tsituation\tsetting\titems_per_s\tseconds\tcpu_s\titems\tactive\tahead\tdepth\treason\tlast_change_s\tstep_change_s\tcache_hits\tcache_cap\tcache_budget\tcache_held\n" > "$OUT"
for r in $(seq "$rounds"); do
    for sit in $situations; do
        for budget in $budgets; do
            for set in "${settings[@]}"; do
                run_one "$budget" "$sit" "$set" >> "$OUT"
            done
        done
    done
    echo "round $r of $rounds done" >&2
done

"$PY" - "$OUT" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
by = {}
for r in rows:
    by.setdefault((r["situation"], r["budget"], r["setting"]), []).append(r)
def med(rs, k):
    return statistics.median(float(r[k]) for r in rs)
# time to settle: autotune's last change, from the run's start (after the
# step's change where it changed; "none" when it changed nothing after it)
def settle(rs):
    v = []
    for r in rs:
        last = None if r["last_change_s"] == "-" else float(r["last_change_s"])
        ch = None if r["step_change_s"] == "-" else float(r["step_change_s"])
        if ch is not None:
            v.append(max(0.0, last - ch) if last is not None and last > ch else 0.0)
        elif last is not None:
            v.append(last)
    if not v:
        return "none"
    s = "%.1f / %.1f" % (statistics.median(v), max(v))
    return s + (" after the change" if rs[0]["step_change_s"] != "-" else "")
print("| situation | CPU budget | best grid setting | its items/s | autotune items/s | ratio "
      "| CPU s / 1000 items: best grid / autotune | peak CPUs used (autotune) | autotune chose "
      "| settled, s (median / max) |")
print("|---|---|---|---|---|---|---|---|---|---|")
for sit in dict.fromkeys(r["situation"] for r in rows):
    for b in dict.fromkeys(r["budget"] for r in rows):
        grid = {s: rs for (si, bu, s), rs in by.items() if si == sit and bu == b and s != "autotune"}
        at = by.get((sit, b, "autotune"))
        if not grid or not at:
            continue
        best = max(grid, key=lambda s: med(grid[s], "items_per_s"))
        cpk = lambda rs: 1000 * statistics.median(float(r["cpu_s"]) / float(r["items"]) for r in rs)
        peak = max(float(r["cpu_s"]) / float(r["seconds"]) for r in at)
        last = at[-1]
        cache = ""
        if int(last.get("cache_budget") or 0) > 0:  # the cache's cap of its budget, what it held
            cache = ", cache cap %.2f of %.2f MB (held %.2f, hits %s)" % (
                int(last["cache_cap"]) / 1e6, int(last["cache_budget"]) / 1e6,
                int(last["cache_held"]) / 1e6, last["cache_hits"])
        print("| %s | %s | %s | %.0f | %.0f | %.2f | %.2f / %.2f | %.2f | %s workers, %s ahead, "
              "depth %s (%s)%s | %s |" % (sit, b, best, med(grid[best], "items_per_s"),
                                          med(at, "items_per_s"),
                                          med(at, "items_per_s") / med(grid[best], "items_per_s"),
                                          cpk(grid[best]), cpk(at), peak, last["active"],
                                          last["ahead"], last["depth"], last["reason"], cache,
                                          settle(at)))
EOF
