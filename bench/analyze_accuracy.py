"""bench/analyze_accuracy.py — is the stall analyzer's what-if model right?

Runs `nostall analyze` once on a base configuration, then for configurations
that differ in threads, cache fraction, emulated storage speed, step time and
echo factor (all but the base never run by the analyzer) compares the
predicted steady-state epoch time (`--measurements` + `--predict`, nothing
re-run) with the epoch measured by `nostall bench --json` (the epoch after the
first). Echo configurations count only if the loader delivered e x the items
(fresh vs echoed counters); otherwise they are reported n/a. The measured
figure is the median of the epochs after the first of REPEAT 4-epoch runs; the
load average is printed because on a shared machine other processes take
cores the model counts as this job's.

Usage: /usr/bin/python3 bench/analyze_accuracy.py CLI DATA OUT_DIR [REPEAT]
(REPEAT: bench runs per configuration, default 1; the median epoch is kept)
Writes OUT_DIR/analyze_accuracy.json and OUT_DIR/analyze_accuracy.md.
"""
import json
import os
import subprocess
import sys

cli, data, out_dir = sys.argv[1:4]
REPEAT = int(sys.argv[4]) if len(sys.argv) > 4 else 1
os.makedirs(out_dir, exist_ok=True)
total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(data) for f in fs)
BASE = {"threads": "2", "batch_size": "32", "crop": "112", "storage_mbps": "100", "seed": "1"}
STEP_MS = 20
EPOCHS = 4  # measured: the median of epochs 1..3


def flags(opts):
    out = []
    for k, v in opts.items():
        out += ["--" + k.replace("_", "-"), str(v)]
    return out


def run_json(args):
    p = subprocess.run([cli] + args, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("bench/analyze_accuracy.py: %s failed: %s" % (" ".join([cli] + args), p.stderr.strip()))
    return json.loads(p.stdout)


LOAD0 = open("/proc/loadavg").read().split()[:3]
# 1. the analyzer, once, on the base configuration
base = run_json(["analyze", data, "--quiet", "--json", "--step-ms", str(STEP_MS)] + flags(BASE))
mfile = os.path.join(out_dir, "analyze_base.json")
with open(mfile, "w") as f:
    json.dump(base, f)

# 2. configurations: (name, loader options changed, step_ms, --predict spec)
half, full = int(total * 0.5), int(total * 1.05)
CONFIGS = [
    ("base (the analyzed configuration)", {}, STEP_MS, ""),
    ("threads 1", {"threads": 1}, STEP_MS, "threads=1"),
    ("cache 50%", {"cache_bytes": half}, STEP_MS, "cache_bytes=%d" % half),
    ("storage 50 MB/s", {"storage_mbps": 50}, STEP_MS, "storage_mbps=50"),
    ("storage 400 MB/s", {"storage_mbps": 400}, STEP_MS, "storage_mbps=400"),
    ("step 60 ms", {}, 60, "step_ms=60"),
    ("threads 1, step 5 ms, 400 MB/s", {"threads": 1, "storage_mbps": 400}, 5,
     "threads=1,step_ms=5,storage_mbps=400"),
    ("cache 100%, step 10 ms", {"cache_bytes": full}, 10, "cache_bytes=%d,step_ms=10" % full),
    ("echo 2 (decode)", {"echo_factor": 2}, STEP_MS, "echo_factor=2"),
    ("echo 2 (fetch), 50 MB/s", {"echo_factor": 2, "echo_point": "fetch", "storage_mbps": 50}, STEP_MS,
     "echo_factor=2,echo_point=fetch,storage_mbps=50"),
    ("echo 3 (augment), threads 1, step 5 ms, 400 MB/s",
     {"echo_factor": 3, "echo_point": "augment", "threads": 1, "storage_mbps": 400}, 5,
     "echo_factor=3,echo_point=augment,threads=1,step_ms=5,storage_mbps=400"),
    ("latency 3 ms, io_depth 1, 400 MB/s", {"storage_latency_ms": 3, "io_depth": 1, "storage_mbps": 400},
     STEP_MS, "storage_latency_ms=3,io_depth=1,storage_mbps=400"),
    ("latency 3 ms, io_depth 4, 400 MB/s", {"storage_latency_ms": 3, "io_depth": 4, "storage_mbps": 400},
     STEP_MS, "storage_latency_ms=3,io_depth=4,storage_mbps=400"),
]
args = ["analyze", "--measurements", mfile, "--json"]
for _, _, step, spec in CONFIGS:
    s = ",".join(x for x in (spec, "step_ms=%g" % step if "step_ms" not in spec else "") if x)
    args += ["--predict", s or "threads=%s" % BASE["threads"]]
pred = run_json(args)["predictions"]

rows = []
for (name, opts, step, spec), p in zip(CONFIGS, pred):
    o = dict(BASE, **opts)
    eps = []
    for _ in range(REPEAT):
        j = run_json(["bench", data, "--quiet", "--json", "--no-checksum", "--epochs", str(EPOCHS),
                      "--step-ms", str(step)] + flags(o))
        eps += j["per_epoch"][1:]
    # the median epoch after the first (the first fills the cache and the pipeline)
    ep = sorted(eps, key=lambda e: e["seconds"])[len(eps) // 2]
    st = j["stats"]
    e = float(o.get("echo_factor", 1))
    note = ""
    if e > 1 and not (st.get("echoed_items", 0) >= 0.9 * (e - 1) * st.get("fresh_items", 0) > 0):
        measured, err, note = None, None, "echoing not delivered by this build"
    else:
        measured = ep["seconds"]
        err = 100.0 * (p["prediction"]["epoch_s"] - measured) / measured
    rows.append({"config": name, "predict": p["label"], "predicted_s": p["prediction"]["epoch_s"],
                 "predicted_bound": p["prediction"]["bound"],
                 "predicted_stall": p["prediction"]["stall_fraction"], "measured_s": measured,
                 "measured_stall": ep["stall_seconds"] / ep["seconds"] if measured else None,
                 "error_pct": err, "note": note})

ok = [r for r in rows if r["error_pct"] is not None]
within = sum(1 for r in ok if abs(r["error_pct"]) <= 10)
m = base["measurements"]
load = open("/proc/loadavg").read().split()[:3]
lines = [
    "Load average before/after: %s / %s." % (" ".join(LOAD0), " ".join(load)),
    "",
    "Dataset %s: %d items, %.1f MB; %d cores (%.1f left to the analyzer by other processes); base: %s, "
    "--step-ms %d; analyzer classified the base %s-bound." % (
        data, m["dataset_items"], total / 1e6, m["cores"], m["cpu_available"], " ".join(flags(BASE)), STEP_MS,
        base["bound"]),
    "",
    "| configuration | predicted epoch s | measured epoch s | error | predicted bound | predicted stall | measured stall |",
    "|---|---|---|---|---|---|---|",
]
for r in rows:
    lines.append("| %s | %.3f | %s | %s | %s | %.0f%% | %s |" % (
        r["config"], r["predicted_s"], "%.3f" % r["measured_s"] if r["measured_s"] else "n/a",
        "%+.1f%%" % r["error_pct"] if r["error_pct"] is not None else "n/a (%s)" % r["note"],
        r["predicted_bound"], 100 * r["predicted_stall"],
        "%.0f%%" % (100 * r["measured_stall"]) if r["measured_stall"] is not None else "n/a"))
lines += ["", "%d of %d measurable configurations within 10%% (mean |error| %.1f%%, max %.1f%%)." % (
    within, len(ok), sum(abs(r["error_pct"]) for r in ok) / max(1, len(ok)),
    max([abs(r["error_pct"]) for r in ok] or [0]))]
text = "\n".join(lines) + "\n"
print(text)
with open(os.path.join(out_dir, "analyze_accuracy.md"), "w") as f:
    f.write(text)
with open(os.path.join(out_dir, "analyze_accuracy.json"), "w") as f:
    json.dump({"base": base["measurements"], "rows": rows}, f, indent=1)
