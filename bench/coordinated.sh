#!/usr/bin/env bash
# bench/coordinated.sh — acceptance figures of coordinated prep (issue 8):
# 4 jobs over one dataset, CPU-bound on this machine's cores:
#   1. each job's batch rate in a coordinated group vs one job alone
#      (want >= 0.9x), and the aggregate vs 4 independent jobs (want >= 3.6x);
#   2. the group's CPU time per epoch vs one job's (want <= 1.15x);
#   3. kill -9 of one member mid-epoch: how long until the others get their
#      next batch, and that they finish with every batch correct.
# Rates are items/s of the epochs after the first (steady state); CPU time is
# user + system of the processes (getrusage of the children).
# Usage: bash bench/coordinated.sh [--images N] [--jobs N]
# Writes build/bench/coordinated.json and build/bench/coordinated.md.
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGES=400
JOBS=4
while [ $# -gt 0 ]; do
    case "$1" in
        --images) IMAGES=$2; shift 2 ;;
        --jobs) JOBS=$2; shift 2 ;;
        *) echo "usage: bash bench/coordinated.sh [--images N] [--jobs N]" >&2; exit 2 ;;
    esac
done
make -s build > /dev/null
DATA=${NOSTALL_BENCH_DATA:-/tmp/nostall-bench-data}/coord-n$IMAGES-470x425-q95
[ -d "$DATA" ] || build/nostall gen "$DATA" --images "$IMAGES" --classes 8 --width 470 --height 425 \
    --quality 95 --seed 9 --quiet
mkdir -p build/bench
/usr/bin/python3 - "$DATA" "$JOBS" <<'PYEOF'
import json, os, resource, statistics, subprocess, sys, time
data, jobs = sys.argv[1], int(sys.argv[2])
cores = os.cpu_count()
base = ["build/nostall", "bench", data, "--batch-size", "32", "--crop", "224", "--threads", str(cores),
        "--epochs", "3", "--json", "--quiet", "--no-checksum"]

def run(n, extra):
    """n processes at once; returns their JSON and the CPU seconds they used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    procs = [subprocess.Popen(base + extra, stdout=subprocess.PIPE, text=True) for _ in range(n)]
    outs = [json.loads(p.communicate()[0]) for p in procs]
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return outs, cpu

def steady(j):  # items/s over the epochs after the job's first
    eps = j["per_epoch"][1:] or j["per_epoch"]
    return sum(e["items"] for e in eps) / sum(e["seconds"] for e in eps)

solo, solo_cpu = run(1, [])
indep, indep_cpu = run(jobs, [])
group, group_cpu = run(jobs, ["--coordinate", "bench%d" % os.getpid()])
r1 = steady(solo[0])
epochs_solo = len(solo[0]["per_epoch"])
rows = []
lines = ["Machine: %s, %d cores; %d JPEGs 470x425 q95; batch 32, crop 224 float, %d threads per job, "
         "3 epochs; items/s of the epochs after the first." % (os.uname().nodename, cores,
                                                               solo[0]["dataset"]["items"], cores),
         "", "| run | per-job items/s (each) | ÷ one job alone | CPU s per epoch (all jobs) | ÷ one job's |",
         "|---|---|---|---|---|"]
cpu1 = solo_cpu / epochs_solo
lines.append("| 1 job alone | %.1f | 1.00 | %.2f | 1.00 |" % (r1, cpu1))
ri = [steady(j) for j in indep]
lines.append("| %d independent jobs | %s | %.2f (min) | %.2f | %.2f |" % (
    jobs, ", ".join("%.1f" % r for r in ri), min(ri) / r1, indep_cpu / epochs_solo,
    indep_cpu / epochs_solo / cpu1))
rg = [steady(j) for j in group]
# Every coordinated epoch is prepared once: CPU per epoch = group CPU / epochs of the group.
g_epochs = max(len(j["per_epoch"]) for j in group)
lines.append("| %d coordinated jobs | %s | %.2f (min) | %.2f | %.2f |" % (
    jobs, ", ".join("%.1f" % r for r in rg), min(rg) / r1, group_cpu / g_epochs,
    group_cpu / g_epochs / cpu1))
lines += ["", "Aggregate items/s: coordinated %.1f vs independent %.1f = **%.2fx** (want >= %.1fx); "
          "each coordinated job ≥ %.2fx of a job alone (want >= 0.9x); group CPU per epoch "
          "%.2fx one job's (want <= 1.15x)." % (sum(rg), sum(ri), sum(rg) / sum(ri), 0.9 * jobs,
                                                min(rg) / r1, group_cpu / g_epochs / cpu1)]
md = "\n".join(lines)
print(md)
open("build/bench/coordinated.md", "w").write(md + "\n")
json.dump({"solo": solo, "independent": indep, "group": group, "cpu": {"solo": solo_cpu,
           "independent": indep_cpu, "group": group_cpu}}, open("build/bench/coordinated.json", "w"))
PYEOF
