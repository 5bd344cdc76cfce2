#!/usr/bin/env python3
"""Reproduction of data echoing (Choi et al. 2019, "Faster Neural Network
Training with Data Echoing") with nostall: issue 6. Results: docs/echoing.md.

    # the full experiment (~15 min on 2 shared cores) and the plot
    PYTHONPATH=python NOSTALL_LIBRARY=/path/to/libnostall.so \\
        /usr/bin/python3 examples/echo_experiment.py --out /tmp/echo_results.json
    /usr/bin/python3 examples/echo_experiment.py --from /tmp/echo_results.json \\
        --plot docs/echoing.png             # re-print the table, draw the plot
    /usr/bin/python3 examples/echo_experiment.py --quick   # smoke run, ~1 min

Setup. A learnable ImageFolder set from `nostall gen` (3000 train JPEGs of
64x64 in 40 classes; the validation set, 1000 images, has another seed). A
small CNN (3 conv blocks, 16/32/64 channels) is trained on 24x24
RandomResizedCrop crops with SGD + Nesterov momentum, batch 64, on the CPU
with one torch thread; the loader has one worker thread. Storage is
emulated (storage_mbps) so that, for the baseline, producing a batch
upstream takes about R = 4 training steps: the step is timed in the
training loop (median), the upstream by a loader pass without training.
--storage-mbps skips the calibration.

Conditions: baseline (no echoing); echo_point fetch / decode / augment /
batch at echo_factor 2 and 4; adaptive (echo_max 4). For each, the learning
rate is chosen from a small grid on a tuning seed (fewest fresh examples to
the target; never one of the measured seeds), then the condition is run on
--seeds seeds with that rate.

Measurement. A snapshot of the model is taken every --eval-fresh fresh
examples (the same spacing, in fresh examples, for every condition); the
snapshots are evaluated on the in-memory validation set --eval-batch at a
time (the pauses are left out of the wall-clock; batching them keeps the
loader from working ahead during many pauses). A run stops once a snapshot
reaches --target, or at the caps (--max-fresh fresh examples, --max-seconds
of training time): then it is "not reached". Fresh examples are the
loader's `fresh_items` counter (items delivered as the first use of their
item in the epoch: the ones read from storage).

Also measured once (unless --no-bench): delivered items/s with a simulated
training step (`nostall bench --step-ms`) for e = 1, 2, 4 (decode) and
adaptive, and adaptive's achieved echo factor.
"""

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)

# name -> loader options (echo_buffer is the shuffle pool of item echoing and
# adaptive's pool of finished items; batch echoing does not use it)
CONDITIONS = {"baseline": {}}
for _p in ("fetch", "decode", "augment", "batch"):
    for _e in (2, 4):
        CONDITIONS["%s-e%d" % (_p, _e)] = {"echo": "fixed", "echo_point": _p, "echo_factor": _e}
CONDITIONS["adaptive"] = {"echo": "adaptive", "echo_max": 4}


def nostall_cli(args):
    lib = os.environ.get("NOSTALL_LIBRARY")
    cands = [args.cli] if args.cli else []
    if lib:
        cands.append(os.path.join(os.path.dirname(lib), "nostall"))
    cands.append(os.path.join(ROOT, "build", "nostall"))
    for c in cands:
        if c and os.access(c, os.X_OK):
            return c
    sys.exit("echo_experiment: the nostall CLI was not found (give --cli)")


def make_data(args):
    """Generate the train and val sets with `nostall gen` unless present."""
    root = args.data_dir
    sets = {"train": (args.train_images, 1), "val": (args.val_images, 2)}
    paths = {}
    for name, (n, seed) in sets.items():
        d = os.path.join(root, "%s-%d-%dc-%dpx" % (name, n, args.classes, args.image_size))
        paths[name] = d
        if os.path.isdir(d) and os.listdir(d):
            continue
        subprocess.run([nostall_cli(args), "gen", d, "--images", str(n), "--classes",
                        str(args.classes), "--width", str(args.image_size), "--height",
                        str(args.image_size), "--seed", str(seed), "--quiet"], check=True)
    return paths


def make_model(classes):
    def block(cin, cout):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, 1, padding=1, bias=False),
                             nn.BatchNorm2d(cout), nn.ReLU(inplace=True))
    return nn.Sequential(block(3, 16), nn.MaxPool2d(2), block(16, 32), nn.MaxPool2d(2),
                         block(32, 64), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(64, classes))


def load_val(nostall, path, crop):
    ld = nostall.Loader(path, batch_size=250, crop=crop, mode="eval", shuffle=False, threads=1,
                        epochs=1, mean=MEAN, std=STD, copy=True)
    xs, ys = zip(*list(ld))
    ld.close()
    return torch.cat(xs), torch.cat(ys)


def evaluate(model, val):
    x, y = val
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(x[i:i + 500]).argmax(1) == y[i:i + 500]).sum())
                      for i in range(0, len(y), 500))
    model.train()
    return correct / len(y)


def loader_options(args, seed, extra):
    o = dict(batch_size=args.batch_size, crop=args.crop, mode="train", threads=1, seed=seed,
             epochs=0, mean=MEAN, std=STD, storage_mbps=args.storage_mbps,
             io_depth=args.io_depth)
    if extra.get("echo"):
        o["echo_buffer"] = args.echo_buffer
    o.update(extra)
    return o


def make_opt(model, lr):
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, nesterov=True,
                           weight_decay=5e-4)


# --- calibration of R ------------------------------------------------------------

def time_step(nostall, args, paths, classes):
    """Median training step (ms) on batches held in memory."""
    ld = nostall.Loader(paths["train"], **dict(loader_options(args, 0, {}), storage_mbps=0,
                                               epochs=1), copy=True)
    batches = []
    for b in ld:
        batches.append(b)
        if len(batches) == 8:
            break
    ld.close()
    torch.manual_seed(0)
    model = make_model(classes)
    opt = make_opt(model, 0.01)
    times = []
    for i in range(args.calib_steps + 5):
        x, y = batches[i % len(batches)]
        t = time.perf_counter()
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if i >= 5:
            times.append(time.perf_counter() - t)
    return 1000 * statistics.mean(times)


def time_upstream(nostall, args, paths, mbps, batches=30):
    """Upstream ms per batch: a loader pass without training (after 3 warm-up batches)."""
    ld = nostall.Loader(paths["train"], **dict(loader_options(args, 0, {}), storage_mbps=mbps))
    n, t0 = 0, None
    while n < batches + 3:  # one `for` is one epoch: go on into the next ones
        for _ in ld:
            n += 1
            if n == 3:
                t0 = time.perf_counter()
            if n == batches + 3:
                break
    ms = 1000 * (time.perf_counter() - t0) / batches
    ld.close()
    return ms


def time_in_training(nostall, args, paths, classes, mbps, steps=60):
    """Baseline training fed at storage_mbps=mbps, after 10 warm-up steps:
    (wall ms per step, mean training ms per step, median training ms per step).
    A training step is timed from the batch's arrival to the next request."""
    ld = nostall.Loader(paths["train"], **dict(loader_options(args, 0, {}), storage_mbps=mbps))
    torch.manual_seed(0)
    model = make_model(classes)
    opt = make_opt(model, 0.02)
    n, t0, times = 0, None, []
    while n < steps + 10:
        for x, y in ld:
            t = time.perf_counter()
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            ld.stats()
            n += 1
            if n > 10:
                times.append(time.perf_counter() - t)
            if n == 10:
                t0 = time.perf_counter()
            if n == steps + 10:
                break
    wall = 1000 * (time.perf_counter() - t0) / steps
    ld.close()
    return wall, 1000 * statistics.mean(times), 1000 * statistics.median(times)


def calibrate(nostall, args, paths, classes):
    """R = upstream time / training-step time per batch, for the baseline.
    The step is timed in the training loop itself, fed by the throttled
    loader (on 2 shared cores it is slower there than on in-memory batches
    alone: the loader's worker and the machine's other load share the cores);
    its median (robust to the other load's bursts) sets storage_mbps so that
    the upstream time per batch, timed alone, is args.R steps."""
    step_memory_ms = time_step(nostall, args, paths, classes)
    files = [os.path.join(dp, f) for dp, _, fs in os.walk(paths["train"]) for f in fs]
    batch_bytes = args.batch_size * sum(os.path.getsize(f) for f in files) / len(files)
    info = {"step_memory_ms": step_memory_ms, "batch_bytes": batch_bytes}
    if args.storage_mbps is None:
        guess = batch_bytes / (args.R * step_memory_ms / 1000) / 1e6
        _, _, step = time_in_training(nostall, args, paths, classes, guess)
        mbps = batch_bytes / (args.R * step / 1000) / 1e6
        up = time_upstream(nostall, args, paths, mbps)  # the CPU work adds a little
        mbps *= up / (args.R * step)
        args.storage_mbps = round(mbps, 3)
    wall, step_mean, step = time_in_training(nostall, args, paths, classes, args.storage_mbps)
    info.update(storage_mbps=args.storage_mbps, wall_ms=wall, step_ms=step,
                step_mean_ms=step_mean)
    info["upstream_ms"] = time_upstream(nostall, args, paths, args.storage_mbps)
    info["upstream_no_storage_ms"] = time_upstream(nostall, args, paths, 0)
    info["R"] = info["upstream_ms"] / step
    print("calibration: storage_mbps=%g: upstream alone %.1f ms/batch (%.1f ms without "
          "emulated storage); training step %.1f ms (median; mean %.1f; %.1f ms on in-memory "
          "batches alone): R = %.2f; baseline training %.1f ms per step"
          % (args.storage_mbps, info["upstream_ms"], info["upstream_no_storage_ms"], step,
             step_mean, step_memory_ms, info["R"], wall), flush=True)
    return info


# --- one training run ------------------------------------------------------------

def train_run(nostall, args, paths, classes, val, cond, lr, seed):
    torch.manual_seed(seed)
    model = make_model(classes)
    opt = make_opt(model, lr)
    ld = nostall.Loader(paths["train"], **loader_options(args, seed, CONDITIONS[cond]))
    eval_model = make_model(classes)
    curve = []    # (fresh, seconds, steps, acc)
    pending = []  # snapshots not evaluated yet: (fresh, seconds, steps, state_dict)
    res = {"condition": cond, "lr": lr, "seed": seed, "reached": False}
    steps, next_snap, paused, done = 0, args.eval_fresh, 0.0, False
    t0 = time.perf_counter()
    while not done:
        for x, y in ld:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            steps += 1
            fresh = ld.stats()["fresh_items"]
            if fresh < next_snap:
                continue
            # A snapshot costs well under a millisecond; evaluating it is left
            # for later so that the loader rarely gets idle time to work ahead.
            t_pause = time.perf_counter()
            seconds = t_pause - t0 - paused
            next_snap = fresh + args.eval_fresh
            pending.append((fresh, seconds, steps,
                            {k: v.detach().clone() for k, v in model.state_dict().items()}))
            capped = (fresh >= args.max_fresh or seconds >= args.max_seconds
                      or not math.isfinite(float(loss)))
            if len(pending) >= args.eval_batch or capped:
                for f, sec, stp, sd in pending:
                    eval_model.load_state_dict(sd)
                    acc = evaluate(eval_model, val)
                    curve.append((f, round(sec, 3), stp, acc))
                    if acc >= args.target and not res["reached"]:
                        res.update(reached=True, fresh=f, seconds=sec, steps=stp)
                pending = []
                done = res["reached"] or capped
            paused += time.perf_counter() - t_pause
            if done:
                break
    total_seconds = time.perf_counter() - t0 - paused
    st = ld.stats()
    ld.close()
    res.update(curve=curve, best_acc=max(c[3] for c in curve), final_fresh=st["fresh_items"],
               final_seconds=total_seconds, final_steps=steps,
               eval_pauses_seconds=paused)
    items = st["items_delivered"]
    res["achieved_factor"] = items / max(st["fresh_items"], 1)
    res["stats"] = {k: st[k] for k in ("items_delivered", "fresh_items", "echoed_items",
                                       "batches_delivered", "storage_reads", "consumer_wait_ns",
                                       "consumer_busy_ns", "upstream_busy_ns",
                                       "echo_batch_duplicates", "echo_repeat_distance")}
    # time per delivered batch vs training step (consumer busy) per batch
    b = max(st["batches_delivered"], 1)
    res["stall_fraction"] = st["consumer_wait_ns"] / 1e9 / max(total_seconds, 1e-9)
    res["ms_per_step"] = 1000 * res["final_seconds"] / max(res["final_steps"], 1)
    res["busy_ms_per_step"] = st["consumer_busy_ns"] / b / 1e6
    tag = ("reached %.3f: %6d fresh, %6.1f s, %4d steps" % (args.target, res["fresh"],
                                                          res["seconds"], res["steps"])
           if res["reached"] else "NOT reached (best %.3f) at %d fresh, %.1f s"
           % (res["best_acc"], res["final_fresh"], res["final_seconds"]))
    print("  %-10s lr %-6g seed %-3d %s  (factor %.2f, stall %.0f%%)"
          % (cond, lr, seed, tag, res["achieved_factor"], 100 * res["stall_fraction"]),
          flush=True)
    return res


def tune_key(r):
    return (0, r["fresh"], r["seconds"]) if r["reached"] else (1, -r["best_acc"], 0)


# --- simulated step: nostall bench ------------------------------------------------

def bench(args, paths, step_ms):
    base = [nostall_cli(args), "bench", paths["train"], "--json", "--quiet", "--no-checksum",
            "--step-ms", "%.3f" % step_ms, "--storage-mbps", str(args.storage_mbps),
            "--batch-size", str(args.batch_size), "--crop", str(args.crop), "--threads", "1",
            "--io-depth", str(args.io_depth), "--epochs", str(args.bench_epochs)]
    out = {}
    for name, extra in [("e=1", []), ("decode e=2", ["--echo-factor", "2"]),
                        ("decode e=4", ["--echo-factor", "4"]),
                        ("adaptive", ["--echo", "adaptive", "--echo-max", "4",
                                      "--echo-buffer", str(args.echo_buffer)])]:
        p = subprocess.run(base + extra, check=True, capture_output=True, text=True)
        j = json.loads(p.stdout)
        st = j["stats"]
        out[name] = {"items_per_second": j["items_per_second"], "seconds": j["seconds"],
                     "stall_fraction": j["stall_fraction"],
                     "fresh_items": st["fresh_items"], "items": st["items_delivered"],
                     "achieved_factor": st["items_delivered"] / max(st["fresh_items"], 1),
                     "fresh_per_second": st["fresh_items"] / j["seconds"],
                     "estimated_R": (j.get("echo") or {}).get("estimated_R")}
    for v in out.values():
        v["speedup"] = v["items_per_second"] / out["e=1"]["items_per_second"]
    return out


# --- report -----------------------------------------------------------------------

def summarize(results):
    rows = []
    for cond in CONDITIONS:
        runs = [r for r in results["runs"] if r["condition"] == cond]
        if not runs:
            continue
        ok = [r for r in runs if r["reached"]]
        # Training time without the evaluation pauses: wall = steps + waits for data.
        wait = [r["stats"]["consumer_wait_ns"] / 1e9 for r in runs]
        row = {"condition": cond, "lr": runs[0]["lr"], "runs": len(runs), "reached": len(ok),
               "factor": statistics.mean(r["achieved_factor"] for r in runs),
               "stall": statistics.mean(w / r["final_seconds"] for w, r in zip(wait, runs)),
               "step_ms": statistics.mean(1000 * (r["final_seconds"] - w) / r["final_steps"]
                                          for w, r in zip(wait, runs)),
               "wall_ms_per_step": statistics.mean(1000 * r["final_seconds"] / r["final_steps"]
                                                   for r in runs)}
        for key in ("fresh", "seconds"):
            vals = [r[key] for r in ok]
            row[key] = statistics.mean(vals) if vals else None
            row[key + "_sd"] = statistics.stdev(vals) if len(vals) > 1 else 0.0
            row[key + "_all"] = vals
        rows.append(row)
    base = next((r for r in rows if r["condition"] == "baseline"), None)
    if base:  # the baseline is data-bound: its time per step is the upstream time per batch
        for row in rows:
            row["R_run"] = base["wall_ms_per_step"] / row["step_ms"]
    for row in rows:
        for key in ("fresh", "seconds"):
            ok = base and base[key] and row[key] and row["reached"] == row["runs"]
            row[key + "_rel"] = row[key] / base[key] if ok else None
    return rows


def print_table(results):
    rows = summarize(results)
    cal = results["calibration"]
    print("\nTarget val accuracy %.3f; R = %.2f (step %.1f ms, upstream %.1f ms/batch); "
          "mean +- sd over the seeds that reached the target"
          % (results["args"]["target"], cal["R"], cal["step_ms"], cal["upstream_ms"]))
    hdr = ("condition", "lr", "reached", "fresh to target", "x base", "seconds to target",
           "x base", "factor", "stall", "step ms")
    print("%-11s %-6s %-7s %-17s %-6s %-17s %-6s %-6s %-5s %s" % hdr)
    for r in rows:
        def cell(k, fmt):
            return (fmt % (r[k], r[k + "_sd"])) if r[k] is not None else "not reached"
        rel = lambda k: "%.2f" % r[k + "_rel"] if r[k + "_rel"] is not None else "-"
        print("%-11s %-6g %d/%-5d %-17s %-6s %-17s %-6s %-6.2f %3.0f%%  %.1f"
              % (r["condition"], r["lr"], r["reached"], r["runs"],
                 cell("fresh", "%6.0f +- %-5.0f"), rel("fresh"),
                 cell("seconds", "%5.1f +- %-5.1f"), rel("seconds"), r["factor"],
                 100 * r["stall"], r["step_ms"]))
    base = next((r for r in rows if r["condition"] == "baseline"), None)
    if base:
        print("In the runs: baseline %.1f ms per step (%.1f ms training + waiting for data): "
              "R in training = %.2f" % (base["wall_ms_per_step"], base["step_ms"],
                                        base["R_run"]))
    if results.get("bench"):
        print("\nSimulated step (nostall bench --step-ms %.1f, no training):" % cal["step_ms"])
        for name, v in results["bench"].items():
            print("  %-11s %7.0f items/s  x%.2f  fresh %6.0f/s  achieved factor %.2f  stall %.0f%%"
                  % (name, v["items_per_second"], v["speedup"], v["fresh_per_second"],
                     v["achieved_factor"], 100 * v["stall_fraction"]))
    return rows


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = summarize(results)
    target = results["args"]["target"]
    colors = {"baseline": "k", "fetch": "tab:blue", "decode": "tab:orange",
              "augment": "tab:green", "batch": "tab:red", "adaptive": "tab:purple"}
    fig, axes = plt.subplots(1, 3, figsize=(16, 5))
    ax = axes[0]
    names = [r["condition"] for r in rows]
    for i, key, label in ((1, "fresh", "fresh examples to target"),
                          (2, "seconds", "wall-clock seconds to target")):
        ax = axes[i]
        for j, r in enumerate(rows):
            c = colors[r["condition"].split("-")[0]]
            vals = r[key + "_all"]
            ax.scatter([j] * len(vals), vals, color=c, s=18, zorder=3)
            if r[key] is not None:
                ax.bar(j, r[key], color=c, alpha=0.35 if r["reached"] == r["runs"] else 0.12)
            miss = r["runs"] - r["reached"]
            if miss:
                ax.annotate("%d/%d not\nreached" % (miss, r["runs"]), (j, 0), ha="center",
                            va="bottom", fontsize=7, color="r")
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=45, ha="right")
        ax.set_ylabel(label)
        ax.set_title(label + " (bars: mean; dots: seeds)")
        ax.grid(axis="y", alpha=0.3)
    ax = axes[0]
    for r in results["runs"]:
        if r["seed"] != results["args"]["seed_list"][0]:
            continue
        cond = r["condition"]
        c = colors[cond.split("-")[0]]
        ls = "--" if cond.endswith("e4") else "-"
        xs = [p[0] for p in r["curve"]]
        ys = [p[3] for p in r["curve"]]
        ax.plot(xs, ys, ls, color=c, lw=1.2, label=cond)
    ax.axhline(target, color="gray", lw=0.8, ls=":")
    ax.set_xlabel("fresh examples")
    ax.set_ylabel("validation accuracy")
    ax.set_title("accuracy vs fresh examples (seed %d)" % results["args"]["seed_list"][0])
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    cal = results["calibration"]
    fig.suptitle("Data echoing with nostall: small CNN on CPU, emulated storage (R = %.1f), "
                 "target val acc %.2f" % (cal["R"], target))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print("plot written to %s" % path)


# --- main -------------------------------------------------------------------------

def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="smoke run: smaller set, baseline/decode-e2/adaptive, 1 seed, no tuning")
    p.add_argument("--out", default="/tmp/echo_results.json", help="JSON results")
    p.add_argument("--plot", help="write the plot here (.png or .svg)")
    p.add_argument("--from", dest="from_json", help="only print the table/plot of this JSON")
    p.add_argument("--data-dir", default="/tmp/nostall-echo-data")
    p.add_argument("--cli", help="the nostall CLI (default: next to $NOSTALL_LIBRARY)")
    p.add_argument("--train-images", type=int, default=3000)
    p.add_argument("--val-images", type=int, default=1000)
    p.add_argument("--classes", type=int, default=40)
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--crop", type=int, default=24)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--io-depth", type=int, default=4)
    p.add_argument("--echo-buffer", type=int, default=512)
    p.add_argument("--R", type=float, default=4.0, help="target R for the calibration")
    p.add_argument("--storage-mbps", type=float, help="skip the calibration: use this")
    p.add_argument("--calib-steps", type=int, default=40)
    p.add_argument("--conditions", default=",".join(CONDITIONS))
    p.add_argument("--lrs", default="0.01,0.02,0.05", help="learning-rate grid")
    p.add_argument("--tune-seed", type=int, default=100)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--target", type=float, default=0.80)
    p.add_argument("--eval-fresh", type=int, default=512,
                   help="evaluate every this many fresh examples")
    p.add_argument("--eval-batch", type=int, default=8,
                   help="evaluate the pending snapshots once this many are taken")
    p.add_argument("--max-fresh", type=int, default=60000)
    p.add_argument("--max-seconds", type=float, default=60)
    p.add_argument("--no-bench", action="store_true")
    p.add_argument("--bench-epochs", type=int, default=1)
    args = p.parse_args()

    if args.from_json:
        with open(args.from_json) as f:
            results = json.load(f)
        print_table(results)
        if args.plot:
            plot(results, args.plot)
        return

    if args.quick:
        args.train_images, args.val_images = 1500, 500
        args.conditions = "baseline,decode-e2,adaptive"
        args.lrs = "0.02"
        args.seeds = 1
        args.max_fresh, args.max_seconds = 20000, 40
        args.calib_steps = 20
    torch.set_num_threads(1)
    import nostall
    conds = [c for c in args.conditions.split(",") if c]
    for c in conds:
        if c not in CONDITIONS:
            sys.exit("unknown condition %r (known: %s)" % (c, ", ".join(CONDITIONS)))
    lrs = [float(x) for x in args.lrs.split(",")]
    args.seed_list = list(range(args.seeds))

    t_start = time.time()
    paths = make_data(args)
    val = load_val(nostall, paths["val"], args.crop)
    probe = nostall.Loader(paths["train"], batch_size=args.batch_size, crop=args.crop, threads=1,
                           epochs=1)
    classes = probe.info()["classes"]
    probe.close()
    print("data: %s (%d classes), val %s (%d images); torch %s, %d CPUs (%s)"
          % (paths["train"], classes, paths["val"], len(val[1]), torch.__version__,
             os.cpu_count(), platform.machine()), flush=True)
    cal = calibrate(nostall, args, paths, classes)
    results = {"args": vars(args), "paths": paths, "calibration": cal, "runs": [],
               "tuning": [], "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}

    def save():
        results["elapsed_seconds"] = time.time() - t_start
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)

    if not args.no_bench:
        results["bench"] = bench(args, paths, cal["step_ms"])
        save()
    for cond in conds:
        if len(lrs) > 1:
            print("%s: tuning lr on seed %d" % (cond, args.tune_seed), flush=True)
            tuned = [train_run(nostall, args, paths, classes, val, cond, lr, args.tune_seed)
                     for lr in lrs]
            results["tuning"] += tuned
            lr = min(tuned, key=tune_key)["lr"]
        else:
            lr = lrs[0]
        print("%s: lr %g, seeds %s" % (cond, lr, args.seed_list), flush=True)
        for seed in args.seed_list:
            results["runs"].append(train_run(nostall, args, paths, classes, val, cond, lr, seed))
            save()
    save()
    print("\n%.0f s in all; results in %s" % (time.time() - t_start, args.out))
    print_table(results)
    if args.plot:
        plot(results, args.plot)


if __name__ == "__main__":
    main()
