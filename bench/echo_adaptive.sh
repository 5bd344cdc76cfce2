#!/usr/bin/env bash
# bench/echo_adaptive.sh — adaptive echoing against R on the held-out case
# of bench/echo.sh (photo-derived JPEGs, crop 224 float, 2 threads, storage
# emulated at 20 MB/s, a simulated step of upstream / 4: R = 4), and where
# the consumer's time per batch goes:
#   1. in interleaved rounds: the baseline (no echo), adaptive (echo_max 8)
#      and batch echoing e = 4 (a consumer bound by the step, for
#      reference); with --base, adaptive of a second build too. Medians of
#      the second epoch's items/s, as a fraction of the step-bound rate
#      (batch / step, which is what "÷ R" of bench/echo.sh measures), and the
#      milliseconds per batch beyond the step;
#   2. bench/echo_consumer.c (built here) on each build's library: per
#      batch, the time inside next, late wake-ups from the step's sleep, the
#      time inside release of echo and fresh batches, and the consumer's
#      involuntary context switches (medians over rounds, epochs after the
#      first).
# Usage: bash bench/echo_adaptive.sh [--rounds N] [--base BUILD_DIR] [--rt R]
#   BUILD_DIR: a build of another commit (its nostall and libnostall.so).
# Writes build/bench/echo_adaptive.md and .json; prints the load average.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=7
BASE=
RT=4
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS=$2; shift 2 ;;
        --base) BASE=$(cd "$2" && pwd); shift 2 ;;
        --rt) RT=$2; shift 2 ;;
        *) echo "usage: bash bench/echo_adaptive.sh [--rounds N] [--base BUILD_DIR] [--rt R]" >&2; exit 2 ;;
    esac
done
make -s build > /dev/null
DATA=${NOSTALL_BENCH_DATA:-/tmp/nostall-bench-data}/echo-photo-n384
[ -d "$DATA" ] || /usr/bin/python3 bench/photo_data.py "$DATA" --images 384 --classes 8 --seed 5 > /dev/null
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cc -O2 -std=c11 -Wall -Wextra -Iinclude bench/echo_consumer.c -Lbuild -lnostall -o "$TMP/consumer"
mkdir -p build/bench
/usr/bin/python3 - "$DATA" "$ROUNDS" "$RT" "$PWD/build" "$BASE" "$TMP/consumer" <<'PYEOF'
import json, os, statistics, subprocess, sys, time
data, rounds, rt, new, base, consumer = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), *sys.argv[4:]
total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(data) for f in fs)
n = sum(len(fs) for _, _, fs in os.walk(data))
BATCH, MBPS = 32, 20.0
step_ms = 1000.0 * BATCH * (total / n) / (MBPS * 1e6) / rt
cap = BATCH / (step_ms / 1000)  # items/s when the consumer never waits and loses nothing
opts = {"batch_size": BATCH, "crop": 224, "output": "float", "threads": 2, "io_depth": 8,
        "storage_mbps": MBPS}
cli_opts = sum((["--" + k.replace("_", "-"), str(v)] for k, v in opts.items()), [])
AD = {"echo": "adaptive", "echo_max": 8, "echo_buffer": 256}
B4 = {"echo_point": "batch", "echo_factor": 4}
builds = [("new", new)] + ([("base", base)] if base else [])
configs = [("baseline", new, {}), ("batch e=4", new, B4)] + [("adaptive " + b, d, AD) for b, d in builds]
load0 = os.getloadavg()
runs = {name: [] for name, _, _ in configs}
for r in range(rounds):
    for name, d, extra in configs:
        args = [os.path.join(d, "nostall"), "bench", data] + cli_opts + sum(
            (["--" + k.replace("_", "-"), str(v)] for k, v in extra.items()), []) + [
            "--step-ms", "%.3f" % step_ms, "--epochs", "2", "--json", "--quiet", "--no-checksum"]
        j = json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)
        ep = j["per_epoch"][-1]
        runs[name].append({"rate": ep["items_per_second"], "ms_lost": 1000 * ep["seconds"] / ep["batches"] - step_ms,
                           "factor": j["echo"]["achieved_factor"], "load": os.getloadavg()[0]})
        print("round %d %-14s %7.1f items/s  %.3f of batch/step" % (r + 1, name, runs[name][-1]["rate"],
              runs[name][-1]["rate"] / cap), file=sys.stderr)
# Where the consumer's time goes: the driver on each build's library.
timing = {b: [] for b, _ in builds}
kv = sum(([k, str(v)] for k, v in {**opts, **AD, "epochs": 3}.items()), [])
for r in range(max(3, rounds // 2)):
    for b, d in builds:
        env = dict(os.environ, LD_LIBRARY_PATH=d)
        out = subprocess.run([consumer, data, "%.3f" % step_ms] + kv, capture_output=True, text=True,
                             check=True, env=env).stdout.splitlines()
        eps = [json.loads(l) for l in out if l.startswith("{\"epoch\"")][1:]
        sw = json.loads(out[-1])["involuntary_switches"]
        nb = sum(e["batches"] for e in eps)
        ne = sum(e["echo_batches"] for e in eps)
        nf = sum(e["fresh_batches"] for e in eps)
        timing[b].append({"next_ms": 1000 * sum(e["next_s"] for e in eps) / nb,
                          "late_wake_ms": 1000 * sum(e["sleep_over_s"] for e in eps) / nb,
                          "release_echo_ms": 1000 * sum(e["release_echo_s"] for e in eps) / max(ne, 1),
                          "release_fresh_ms": 1000 * sum(e["release_fresh_s"] for e in eps) / max(nf, 1),
                          "lost_ms": 1000 * sum(e["seconds"] for e in eps) / nb - step_ms,
                          "switches": sw})
load1 = os.getloadavg()
med = lambda xs: statistics.median(xs)
base_rate = med(x["rate"] for x in runs["baseline"])
R = cap / base_rate
lines = ["%d photo-derived JPEGs (%.1f MB), batch %d, crop 224 float, 2 threads, io_depth 8, storage %.0f MB/s, "
         "simulated step %.1f ms (batch/step = %.1f items/s); items/s of the second epoch, median of %d "
         "interleaved rounds; load average %.2f %.2f %.2f at the start, %.2f %.2f %.2f at the end (2 cores)."
         % (n, total / 1e6, BATCH, MBPS, step_ms, cap, rounds, *load0, *load1),
         "", "Measured R (batch/step ÷ baseline) = **%.2f**." % R, "",
         "| configuration | items/s | ÷ baseline | ÷ R | ms per batch beyond the step | achieved factor | samples ÷ R |",
         "|---|---|---|---|---|---|---|"]
result = {"R": R, "step_ms": step_ms, "cap": cap, "load_start": load0, "load_end": load1, "configs": {}, "timing": {}}
for name, _, _ in configs:
    xs = runs[name]
    m = med(x["rate"] for x in xs)
    lines.append("| %s | %.1f | %.2fx | %s | %s | %.3f | %s |" % (
        name, m, m / base_rate, "" if name == "baseline" else "**%.3f**" % (m / cap),
        "" if name == "baseline" else "%.2f" % med(x["ms_lost"] for x in xs), med(x["factor"] for x in xs),
        "" if name == "baseline" else " ".join("%.3f" % (x["rate"] / cap) for x in xs)))
    result["configs"][name] = {"items_per_second": m, "of_R": m / cap, "runs": xs}
lines += ["", "Adaptive, the consumer's time per batch (bench/echo_consumer.c, epochs 2-3 of 3, medians of %d runs):"
          % len(next(iter(timing.values()))), "",
          "| build | lost beyond the step, ms/batch | inside next | late wake-ups | release of an echo batch | "
          "release of a fresh one | involuntary context switches |", "|---|---|---|---|---|---|---|"]
for b, ts in timing.items():
    lines.append("| %s | %.3f | %.3f | %.3f | %.3f | %.3f | %d |" % (
        b, med(t["lost_ms"] for t in ts), med(t["next_ms"] for t in ts), med(t["late_wake_ms"] for t in ts),
        med(t["release_echo_ms"] for t in ts), med(t["release_fresh_ms"] for t in ts),
        med(t["switches"] for t in ts)))
    result["timing"][b] = ts
md = "\n".join(lines)
print(md)
open("build/bench/echo_adaptive.md", "w").write(md + "\n")
json.dump(result, open("build/bench/echo_adaptive.json", "w"), indent=1)
PYEOF
