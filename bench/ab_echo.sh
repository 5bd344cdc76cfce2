#!/usr/bin/env bash
# ab_echo.sh — two nostall CLIs side by side (e.g. the commit before a
# refactor and after), echo off / item echo / batch echo / adaptive, in
# interleaved rounds: medians of items per CPU-second (the figure to trust
# on a shared machine) and per wall-second, and the ratio new/base.
#   bash bench/ab_echo.sh BASE_CLI NEW_CLI DATASET [ROUNDS]
# (DATASET: e.g. `nostall gen DIR --images 600 --width 160 --height 120`.)
set -euo pipefail
A=$1; B=$2; DATA=$3; ROUNDS=${4:-3}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
PY=/usr/bin/python3
run() { # BIN ARGS -> "items cpu wall"
  local bin=$1; shift
  $PY - "$bin" "$DATA" "$@" <<'PYEOF'
import json, os, resource, subprocess, sys, time
bin, data, *args = sys.argv[1:]
r0 = resource.getrusage(resource.RUSAGE_CHILDREN); t0 = time.time()
out = subprocess.run([bin, "bench", data, "--json", "--quiet", "--epochs", "10", "--batch-size", "32", "--crop", "64", "--threads", "2"] + args, capture_output=True, text=True, check=True).stdout
t1 = time.time(); r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
j = json.loads(out)
cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
print(j["items"], cpu, t1 - t0, j["checksum"])
PYEOF
}
declare -A cfg=([off]="" [items]="--echo-factor 2 --echo-point decode" [batch]="--echo-factor 2 --echo-point batch" [adaptive]="--echo adaptive --echo-buffer 256")
for name in off items batch adaptive; do
  : > $TMP/sp_$name.txt
  for r in $(seq $ROUNDS); do
    for side in A B; do
      bin=$A; [ $side = B ] && bin=$B
      echo "$side $(run $bin ${cfg[$name]})" >> $TMP/sp_$name.txt
    done
  done
  $PY - $TMP/sp_$name.txt $name <<'PYEOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
def med(side, f): return statistics.median(f(r) for r in rows if r[0] == side)
ipc = lambda r: float(r[1]) / float(r[2]); ipw = lambda r: float(r[1]) / float(r[3])
a, b = med("A", ipc), med("B", ipc); aw, bw = med("A", ipw), med("B", ipw)
same = len({r[4] for r in rows}) == 1
print(f"{sys.argv[2]:9s} items/CPU-s base {a:8.0f} new {b:8.0f} ratio {b/a:.3f} | items/wall-s base {aw:8.0f} new {bw:8.0f} ratio {bw/aw:.3f} | checksums equal: {same}")
PYEOF
done
