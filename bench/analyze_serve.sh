#!/usr/bin/env bash
# bench/analyze_serve.sh — the analyzer's what-if "with k prep servers"
# (docs/analyzer.md, "Prep servers") against measurement: `nostall analyze`
# of a trainer with no local workers and ONE prep server predicts the epoch
# with k = 1, 2, 4, 8 servers; `nostall bench` then runs with k servers
# (items/s of the last epoch; the first fills the servers' page cache).
# Every server gets a CPU budget by a cgroup v1 CPU quota (cpu.cfs_quota_us,
# root only; without it they run unbudgeted and the report says so), so
# that a 2-core machine has room for several. Rounds are interleaved
# (analyze, then k = 1, 2, 4, 8), figures are medians of the rounds.
# Usage: bash bench/analyze_serve.sh [--images N] [--rounds N] [--quota CPUS] [--ks "1 2 4 8"]
# Writes build/bench/analyze_serve.json and build/bench/analyze_serve.md.
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGES=96
ROUNDS=3
QUOTA=0.2
KS="1 2 4 8"
while [ $# -gt 0 ]; do
    case "$1" in
        --images) IMAGES=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --quota) QUOTA=$2; shift 2 ;;
        --ks) KS=$2; shift 2 ;;
        *) echo "usage: bash bench/analyze_serve.sh [--images N] [--rounds N] [--quota CPUS] [--ks LIST]" >&2; exit 2 ;;
    esac
done
[ -x build/nostall ] || make -s build > /dev/null
DATA=${NOSTALL_BENCH_DATA:-/tmp/nostall-bench-data}/serve-n$IMAGES-470x425-q95
[ -d "$DATA" ] || build/nostall gen "$DATA" --images "$IMAGES" --classes 8 --width 470 --height 425 \
    --quality 95 --seed 9 --quiet
mkdir -p build/bench
/usr/bin/python3 - "$DATA" "$ROUNDS" "$QUOTA" "$KS" <<'PYEOF'
import json, os, statistics, subprocess, sys, tempfile
data, rounds, quota, ks = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), [int(k) for k in sys.argv[4].split()]
exe = "build/nostall"
CG = "/sys/fs/cgroup/cpu"
budgeted = os.access(CG, os.W_OK)
tmp = tempfile.mkdtemp(prefix="nostall-analyze-serve.")
secret = os.path.join(tmp, "secret")
with open(secret, "w") as f:
    f.write(os.urandom(16).hex())
os.chmod(secret, 0o600)
opts = ["--crop", "224", "--seed", "3", "--batch-size", "16"]

def cgroup(name):
    d = os.path.join(CG, "nostall-analyze-serve-" + name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "cpu.cfs_period_us"), "w") as f:
        f.write("100000")
    with open(os.path.join(d, "cpu.cfs_quota_us"), "w") as f:
        f.write(str(int(quota * 100000)))
    return d

def start(i):
    p = subprocess.Popen([exe, "serve", data, "--threads", "1", "--secret-file", secret] + opts,
                         stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line.startswith("listening on "), line
    if budgeted:
        with open(os.path.join(cgroup(str(i)), "cgroup.procs"), "w") as f:
            f.write(str(p.pid))
    return p, line.split()[-1]

def remote(k):
    return ["--threads", "0", "--prep-servers", ",".join(a for _, a in servers[:k]),
            "--prep-secret-file", secret]

servers = [start(i) for i in range(max(ks))]
pred = {k: [] for k in ks}
meas = {k: [] for k in ks}
rate, recv = [], []
try:
    for r in range(rounds):
        a = json.loads(subprocess.run([exe, "analyze", data] + opts + remote(1) +
                                      ["--step-ms", "1", "--json", "--quiet",
                                       "--predict", "prep_servers=%d" % max(ks)],
                                      check=True, stdout=subprocess.PIPE, text=True).stdout)
        n = a["measurements"]["items_per_epoch"]
        rows = {row["x"]: row for row in a["whatif"] if row["group"] == "servers"}
        for k in ks:
            row = rows.get(k)
            if row is None:
                row = next(p for p in a["predictions"] if p["config"]["prep_servers"] == k)
            pred[k].append(n / row["prediction"]["epoch_s"])
        rate.append(a["remote_prep"]["per_server_items_per_s"])
        recv.append(a["remote_prep"]["recv_cpu_ms_per_item"])
        for k in ks:
            out = json.loads(subprocess.run([exe, "bench", data] + opts + remote(k) +
                                            ["--epochs", "3", "--json", "--quiet", "--no-checksum"],
                                            check=True, stdout=subprocess.PIPE, text=True).stdout)
            last = out["per_epoch"][-1]
            meas[k].append(last["items"] / last["seconds"])
finally:
    for p, _ in servers:
        p.terminate()
        p.wait()
    if budgeted:
        for i in range(max(ks)):
            try:
                os.rmdir(os.path.join(CG, "nostall-analyze-serve-%d" % i))
            except OSError:
                pass
load = os.getloadavg()
med = {k: {"predicted_items_per_s": statistics.median(pred[k]),
           "measured_items_per_s": statistics.median(meas[k])} for k in ks}
report = {"images": len(os.listdir(data)), "rounds": rounds,
          "quota_cpus": quota if budgeted else None, "loadavg": load,
          "per_server_items_per_s": statistics.median(rate),
          "recv_cpu_ms_per_item": statistics.median(recv), "medians": med,
          "rounds_raw": {"predicted": pred, "measured": meas}}
json.dump(report, open("build/bench/analyze_serve.json", "w"), indent=1)
lines = ["# the analyzer's prep-server what-if vs measured (%s; load average %.1f %.1f %.1f at the end)"
         % ((("%.2f CPU per server, cgroup v1 quota" % quota if budgeted else
               "UNBUDGETED: not root, no CPU quota"),) + tuple(load)),
         "", "analyzed with 1 server: %.1f items/s per server while busy, %.3f ms of the trainer's "
         "CPU per received item (medians of %d rounds)" % (report["per_server_items_per_s"],
                                                          report["recv_cpu_ms_per_item"], rounds),
         "", "| servers | predicted items/s | measured items/s | error |", "|---|---|---|---|"]
for k in ks:
    m = med[k]
    lines.append("| %d | %.1f | %.1f | %+.0f%% |" % (
        k, m["predicted_items_per_s"], m["measured_items_per_s"],
        100 * (m["predicted_items_per_s"] / m["measured_items_per_s"] - 1)))
open("build/bench/analyze_serve.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PYEOF
