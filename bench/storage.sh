#!/usr/bin/env bash
# bench/storage.sh — acceptance figures of the storage tier (issue 5):
#   1. bytes read from storage per epoch with a MinIO cache of c = 0.25, 0.5,
#      0.75 of the dataset (want 1 - c, within 2%), every epoch after the first;
#   2. with storage emulated at 50 MB/s: epoch time with c = 0.5 vs uncached
#      (want within 10% of half);
#   3. peak RSS vs cache budget + ring bytes + 64 MiB;
#   4. emulated per-read latency: io_depth 0 (auto, the default) vs a fixed 4.
# Usage: bash bench/storage.sh [--images N] (default 1000, 470x425 q95).
# Writes build/bench/storage.json and prints a Markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGES=1000
[ "${1:-}" = "--images" ] && IMAGES=$2
PY=/usr/bin/python3
make -s build > /dev/null
DATA=${NOSTALL_BENCH_DATA:-/tmp/nostall-bench-data}/storage-n$IMAGES-470x425-q95
[ -d "$DATA" ] || build/nostall gen "$DATA" --images "$IMAGES" --classes 10 --width 470 --height 425 \
    --quality 95 --seed 11 --quiet
mkdir -p build/bench
OUT=build/bench/storage.json
"$PY" - "$DATA" "$OUT" <<'PYEOF'
import json, os, subprocess, sys
data, out = sys.argv[1], sys.argv[2]
total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(data) for f in fs)
cli = "build/nostall"
def run(*args):
    p = subprocess.run([cli, "bench", data, "--json", "--quiet", "--no-checksum", "--batch-size", "64",
                        "--threads", "2"] + list(args), capture_output=True, text=True, check=True)
    return json.loads(p.stdout)
res = {"dataset_bytes": total, "fractions": [], "emulated": {}}
print("dataset: %s, %d bytes" % (data, total))
print()
print("| cache fraction c | epoch | bytes read from storage | ÷ dataset | want 1 - c | cache hits | peak RSS MiB | RSS bound MiB |")
print("|---|---|---|---|---|---|---|---|")
for c in (0.25, 0.5, 0.75):
    budget = int(total * c)
    j = run("--epochs", "3", "--cache-bytes", str(budget))
    bound = budget + 4 * 64 * 224 * 224 * 3 * 4 + 64 * 2**20  # budget + ring (4 slots) + 64 MiB
    for e in j["per_epoch"]:
        frac = e["storage_bytes_read"] / total
        print("| %.2f | %d | %d | %.4f | %.2f | %d | %.0f | %.0f |" % (
            c, e["epoch"], e["storage_bytes_read"], frac, 1 - c, e["cache_hits"],
            j["peak_rss_bytes"] / 2**20, bound / 2**20))
    res["fractions"].append({"c": c, "budget": budget, "per_epoch": j["per_epoch"],
                             "peak_rss_bytes": j["peak_rss_bytes"], "rss_bound_bytes": bound})
print()
print("| storage emulated at 50 MB/s | loader | epoch seconds | ÷ uncached (want 0.50 ± 10%) |")
print("|---|---|---|---|")
res["emulated"] = []
# With one read at a time per worker (io_depth 1), 2 workers on 2 cores
# leave the emulated device idle whenever both decode cached items; with
# reads in flight (io_depth > 1) the device stays busy.
for threads, depth in (("2", "1"), ("2", "8")):
    unc = run("--epochs", "2", "--storage-mbps", "50", "--cache", "none", "--threads", threads,
              "--io-depth", depth)
    half = run("--epochs", "3", "--storage-mbps", "50", "--cache-bytes", str(int(total * 0.5)),
               "--threads", threads, "--io-depth", depth)
    t_unc = unc["per_epoch"][1]["seconds"]
    t_half = [e["seconds"] for e in half["per_epoch"][1:]]
    label = "%s threads, io_depth %s" % (threads, depth)
    print("| no cache, epoch 2 | %s | %.2f | 1 |" % (label, t_unc))
    for i, t in enumerate(t_half):
        print("| MinIO c = 0.5, epoch %d | %s | %.2f | %.3f |" % (i + 2, label, t, t / t_unc))
    res["emulated"].append({"threads": int(threads), "io_depth": int(depth),
                            "uncached_epoch_seconds": t_unc, "c05_epoch_seconds": t_half})
print()
print("| per-read latency | io_depth | items/s (1 epoch, 2 threads) | reads in flight per worker at the end | ÷ io_depth 4 |")
print("|---|---|---|---|---|")
# io_depth 0 (auto, the default) against the old fixed default of 4, on
# storage that answers each read after a fixed latency (no bandwidth cap).
res["latency"] = []
for lat in ("5", "20", "50"):
    rows = {}
    for depth in ("4", "0"):
        j = run("--epochs", "1", "--cache", "none", "--storage-latency-ms", lat, "--io-depth", depth)
        rows[depth] = (j["items"] / j["seconds"], j["stats"]["io_depth_max"])
    for depth in ("4", "0"):
        rate, reached = rows[depth]
        print("| %s ms | %s | %.0f | %d | %.2f |" % (lat, "0 (auto)" if depth == "0" else depth, rate,
                                                     reached, rate / rows["4"][0]))
        res["latency"].append({"latency_ms": float(lat), "io_depth": int(depth),
                               "items_per_second": rate, "io_depth_reached": reached})
json.dump(res, open(out, "w"), indent=1)
print()
print("written:", out)
PYEOF
