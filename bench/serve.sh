#!/usr/bin/env bash
# bench/serve.sh — prep servers (docs/serve.md, issue 38): scaling of a
# trainer with no local workers over k = 1, 2, 4, 8 servers, each given a
# CPU budget by a cgroup v1 CPU quota (cpu.cfs_quota_us, root only; without
# it the servers run unbudgeted and the report says so), so that a 2-core
# machine shows scaling; and the trainer's CPU time per item with remote
# prep vs local prep. Rounds are interleaved (k = 1, 2, 4, 8, local, then
# again), figures are medians of the rounds; rates are items/s of the last
# epoch (the first fills the servers' page cache). CPU per item is given two
# ways: the whole run's CPU over its items (startup included: the trainer's
# ring alone is ~50 ms of page faults, which dominates with few items), and
# the steady state's, (CPU of a 1+E-epoch run - CPU of a 1-epoch run) /
# (E epochs' items), which is what an epoch of a real dataset costs.
# --base BIN adds the same rows for another build's nostall (its own
# servers), run interleaved with this one's: a side-by-side comparison.
# --netns (root only) puts each server on a host of its own: a network
# namespace joined to the trainer by a veth pair whose both ends are shaped
# by `tc qdisc ... root tbf rate R burst B latency L` (--rate, default
# 1gbit; --burst 512kb; --latency 20ms; --mtu, default the veth's 1500;
# tests/lib_netns.sh makes and deletes them); without it the servers are on
# loopback (MTU 64 KiB).
# The trainer's receive path: each round also runs the largest k with
# servers of no CPU budget (the most items/s this machine gives), and every
# row reports items per trainer CPU-second in the steady state (items over
# the trainer's CPU time): the rate one trainer core can receive at.
# Usage: bash bench/serve.sh [--images N] [--rounds N] [--quota CPUS] [--ks "1 2 4 8"]
#                           [--epochs E] [--base PATH/TO/nostall]
#                           [--netns] [--rate R] [--burst B] [--latency L] [--mtu N]
# Writes build/bench/serve.json and build/bench/serve.md.
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGES=200
ROUNDS=3
QUOTA=0.2
KS="1 2 4 8"
EPOCHS=4
BASE=""
NETNS=0
RATE=1gbit
BURST=512kb
LATENCY=20ms
MTU=""
while [ $# -gt 0 ]; do
    case "$1" in
        --images) IMAGES=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --quota) QUOTA=$2; shift 2 ;;
        --ks) KS=$2; shift 2 ;;
        --epochs) EPOCHS=$2; shift 2 ;;
        --base) BASE=$2; shift 2 ;;
        --netns) NETNS=1; shift ;;
        --rate) RATE=$2; shift 2 ;;
        --burst) BURST=$2; shift 2 ;;
        --latency) LATENCY=$2; shift 2 ;;
        --mtu) MTU=$2; shift 2 ;;
        *) echo "usage: bash bench/serve.sh [--images N] [--rounds N] [--quota CPUS] [--ks LIST] [--epochs E] [--base BIN] [--netns] [--rate R] [--burst B] [--latency L] [--mtu N]" >&2; exit 2 ;;
    esac
done
# --netns: one host per server (each build's max k), the link shaped both ways
HOSTS=""
if [ "$NETNS" = 1 ]; then
    source tests/lib_netns.sh
    netns_able || { echo "bench/serve.sh: --netns needs root and network namespaces ($NETNS_WHY)" >&2; exit 2; }
    trap netns_cleanup EXIT
    trap 'exit 143' TERM INT # the EXIT trap cleans up after a signal too
    max=0
    for k in $KS; do [ "$k" -gt "$max" ] && max=$k; done
    [ -n "$BASE" ] && max=$((max * 2))
    for ((i = 0; i < max; i++)); do
        netns_host "$i" || { echo "bench/serve.sh: cannot make host $i" >&2; exit 1; }
        if [ -n "$MTU" ]; then
            ip link set "$HOST_VETH" mtu "$MTU"
            ip -n "$HOST_NS" link set "$HOST_PEER" mtu "$MTU"
        fi
        shape=(root tbf rate "$RATE" burst "$BURST" latency "$LATENCY")
        tc qdisc add dev "$HOST_VETH" "${shape[@]}"
        ip netns exec "$HOST_NS" tc qdisc add dev "$HOST_PEER" "${shape[@]}"
        HOSTS="$HOSTS$HOST_NS $HOST_IP;"
    done
fi
[ -x build/nostall ] || make -s build > /dev/null
DATA=${NOSTALL_BENCH_DATA:-/tmp/nostall-bench-data}/serve-n$IMAGES-470x425-q95
[ -d "$DATA" ] || build/nostall gen "$DATA" --images "$IMAGES" --classes 8 --width 470 --height 425 \
    --quality 95 --seed 9 --quiet
mkdir -p build/bench
/usr/bin/python3 - "$DATA" "$ROUNDS" "$QUOTA" "$KS" "$EPOCHS" "$BASE" "$HOSTS" "rate $RATE burst $BURST latency $LATENCY, MTU ${MTU:-1500}" <<'PYEOF'
import json, os, resource, statistics, subprocess, sys, tempfile
data, rounds, quota, ks = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), [int(k) for k in sys.argv[4].split()]
epochs, base = int(sys.argv[5]), sys.argv[6]
hosts = [h.split() for h in sys.argv[7].split(";") if h]  # [namespace, address] per server
shaping = sys.argv[8]
builds = {"": "build/nostall"}
if base:
    builds["base "] = base
CG = "/sys/fs/cgroup/cpu"
budgeted = os.access(CG, os.W_OK)
tmp = tempfile.mkdtemp(prefix="nostall-serve-bench.")
secret = os.path.join(tmp, "secret")
with open(secret, "w") as f:
    f.write(os.urandom(16).hex())
os.chmod(secret, 0o600)
opts = ["--crop", "224", "--seed", "3"]
trainer = ["bench", data, "--batch-size", "32", "--json", "--quiet", "--no-checksum"] + opts

def cgroup(name):
    """A cgroup v1 CPU group of `quota` CPUs; its tasks file."""
    d = os.path.join(CG, "nostall-serve-bench-" + name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "cpu.cfs_period_us"), "w") as f:
        f.write("100000")
    with open(os.path.join(d, "cpu.cfs_quota_us"), "w") as f:
        f.write(str(int(quota * 100000)))
    return d

def start(i, exe, budget=True):
    """Server i (on host i with --netns), in CPU group i when budgeted."""
    pre, where = ([], []) if not hosts else (["ip", "netns", "exec", hosts[i][0]], ["--listen", hosts[i][1] + ":0"])
    p = subprocess.Popen(pre + [exe, "serve", data, "--threads", "1", "--secret-file", secret] + opts + where,
                         stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line.startswith("listening on "), line
    if budgeted and budget:
        with open(os.path.join(cgroup(str(i)), "cgroup.procs"), "w") as f:
            f.write(str(p.pid))
    return p, line.split()[-1]

def once(exe, args, ep):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = json.loads(subprocess.run([exe] + trainer + ["--epochs", str(ep)] + args, check=True,
                                    stdout=subprocess.PIPE, text=True).stdout)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return out, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)

def run(exe, args):
    one, cpu1 = once(exe, args, 1)
    out, cpu = once(exe, args, 1 + epochs)
    last = out["per_epoch"][-1]
    steady_s = sum(e["seconds"] for e in out["per_epoch"][1:])
    return {"items_per_s": last["items"] / last["seconds"], "cpu_per_item_ms": 1000 * cpu / out["items"],
            "steady_cpu_per_item_ms": 1000 * (cpu - cpu1) / (out["items"] - one["items"]),
            "startup_cpu_ms": 1000 * (cpu1 - (cpu - cpu1) / epochs),
            "trainer_cores": (cpu - cpu1) / steady_s}

n_srv = max(ks)
servers = {b: [start(i + n * n_srv, exe) for i in range(n_srv)] for n, (b, exe) in enumerate(builds.items())}
# the same hosts' servers again, without a CPU budget: the receive path's row
free = {b: [start(i + n * n_srv, exe, False) for i in range(n_srv)] for n, (b, exe) in enumerate(builds.items())}
res = {b + str(k): [] for b in builds for k in ks}
res.update({b + "local": [] for b in builds})
res.update({b + "free": [] for b in builds})
try:
    for r in range(rounds):
        for k in ks:
            for b, exe in builds.items():
                addrs = ",".join(a for _, a in servers[b][:k])
                res[b + str(k)].append(run(exe, ["--threads", "0", "--prep-servers", addrs,
                                                 "--prep-secret-file", secret]))
        for b, exe in builds.items():
            res[b + "free"].append(run(exe, ["--threads", "0", "--prep-servers", ",".join(a for _, a in free[b]),
                                             "--prep-secret-file", secret]))
        for b, exe in builds.items():
            res[b + "local"].append(run(exe, ["--threads", "1"]))
finally:
    for p, _ in (x for v in list(servers.values()) + list(free.values()) for x in v):
        p.terminate()
        p.wait()
    if budgeted:
        for i in range(len(builds) * max(ks)):
            try:
                os.rmdir(os.path.join(CG, "nostall-serve-bench-%d" % i))
            except OSError:
                pass
M = ("items_per_s", "cpu_per_item_ms", "steady_cpu_per_item_ms", "startup_cpu_ms", "trainer_cores")
med = {k: {m: statistics.median(x[m] for x in v) for m in M} for k, v in res.items()}
load = os.getloadavg()
report = {"images": len(os.listdir(data)), "rounds": rounds, "epochs": 1 + epochs,
          "quota_cpus": quota if budgeted else None, "base": base or None, "loadavg": load,
          "netns": bool(hosts), "shaping": shaping if hosts else None,
          "medians": med, "rounds_raw": res}
json.dump(report, open("build/bench/serve.json", "w"), indent=1)
where = ("each server in a network namespace, its veth shaped both ways by tbf %s" % shaping
         if hosts else "servers on loopback")
lines = ["# prep servers: scaling (%s; %s; load average %.1f %.1f %.1f at the end)"
         % ((("%.2f CPU each, cgroup v1 quota" % quota if budgeted else
               "UNBUDGETED: not root, no CPU quota"), where) + tuple(load)),
         "", "| build | servers | items/s | of linear | trainer CPU ms/item, whole run | steady state | "
         "startup CPU ms | items per trainer CPU-s | trainer cores busy |", "|---|---|---|---|---|---|---|---|---|"]

def row(name, what, m, lin):
    return "| %s | %s | %.1f | %s | %.3f | %.3f | %.0f | %.0f | %.2f |" % (
        name, what, m["items_per_s"], lin, m["cpu_per_item_ms"], m["steady_cpu_per_item_ms"],
        m["startup_cpu_ms"], 1000 / m["steady_cpu_per_item_ms"], m["trainer_cores"])

for b in builds:
    one = med[b + str(ks[0])]["items_per_s"] / ks[0]
    name = b.strip() or "this"
    for k in ks:
        m = med[b + str(k)]
        lines.append(row(name, str(k), m, "%.2f" % (m["items_per_s"] / (one * k))))
    lines.append(row(name, "%d, no CPU budget" % n_srv, med[b + "free"], ""))
    m = med[b + "local"]
    lines.append(row(name, "local, 1 thread", m, ""))
    lines.append("| %s | remote/local, steady (k=%d) | | | | %.3f | | | |" % (
        name, ks[0], med[b + str(ks[0])]["steady_cpu_per_item_ms"] / m["steady_cpu_per_item_ms"]))
open("build/bench/serve.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PYEOF
