#!/usr/bin/env python3
"""Data echoing sweeps (issue 26): the figures of Choi et al. (2019), "Faster
Neural Network Training with Data Echoing", on the CPU-sized problem of
examples/echo_experiment.py (issue 6). Results: docs/echoing.md.

    PYTHONPATH=python NOSTALL_LIBRARY=build-profile/libnostall.so \\
        nice -n 19 /usr/bin/python3 examples/echo_sweeps.py --out build-profile/echo_sweeps.json
    /usr/bin/python3 examples/echo_sweeps.py --from build-profile/echo_sweeps.json \\
        --plots docs/echoing-sweeps     # tables (markdown) and plots of a finished run
    /usr/bin/python3 examples/echo_sweeps.py --quick --out /tmp/q.json   # smoke run

Sweeps (each condition: learning rate tuned on a tuning seed, then --seeds
measured seeds; conditions that stop at a target accuracy report the fresh
examples and the training seconds to reach it):

  factor   example echoing before augmentation (echo_point=decode, each
           copy cropped and flipped afresh), e in {1, 2, 3, 4, 6, 8, 16};
  batch    batch size 16 / 64 / 256, e = 1 and e = 4 (decode); the learning
           rate grid scales with the batch size (linear scaling);
  buffer   e = 4 (decode) with echo_buffer (the pool echoed items are drawn
           from) of 1, 16, 64, 512 and 3000 items;
  batchecho  batch echoing at e = 2 and 4: back-to-back (each batch used e
           times in a row, by this script on a loader without echoing) vs
           shuffled (nostall's echo_point=batch, repeats drawn from a
           buffer of 16 batches);
  noharm   a fixed budget of fresh examples (--budget): final validation
           accuracy with e = 1, 2 and 4 (decode), learning rate tuned for
           final accuracy.

--reuse-lr (for a machine too busy to tune every condition): buffer
conditions take factor e=4's tuned rate (the same e and batch size), batch
echoing at e takes factor e's, noharm e=2 and e=4 take noharm e=1's; the
buffer condition with the default echo_buffer (loader options identical to
factor e=4) takes factor e=4's measured runs. The JSON says which
("lr_from", and "copied_from" on a copied run), and so do the tables.

Every finished run is written to the --out JSON at once; a rerun with the
same --out skips what is there (a crash loses at most the run in progress).
Fresh examples to target are a property of the data stream and the model,
not of the machine: with one torch thread and nostall's deterministic
echoing they are the same on a quiet or a loaded machine. Wall-clock
seconds are not: on a shared machine they carry the load of the moment.

Storage is emulated (storage_mbps) as in echo_experiment.py; the default
2.539 MB/s is what its calibration found for R = 4 on this machine
(docs/echoing.md); --calibrate runs the calibration again.
"""

import argparse
import importlib.util
import json
import math
import os
import random
import statistics
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))

_spec = importlib.util.spec_from_file_location("echo_experiment",
                                               os.path.join(HERE, "echo_experiment.py"))
ee = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ee)

BASE_LRS = (0.01, 0.02, 0.05)
R_MODEL = 4.0  # the R of the modelled time to target (the storage emulation aims at R = 4)
FACTORS = (1, 2, 3, 4, 6, 8, 16)


def decode(e, **kw):
    return dict({"echo": "fixed", "echo_point": "decode", "echo_factor": e}, **kw) if e > 1 else {}


def plan(args):
    """[(sweep, condition name, spec)]; spec: loader options, batch size,
    mode, python batch echoing, seeds."""
    out = []
    S = args.seeds
    for e in FACTORS:
        out.append(("factor", "e=%d" % e, {"opts": decode(e), "seeds": args.factor_seeds}))
    for b in (16, 64, 256):
        for e in (1, 4):
            out.append(("batch", "B=%d e=%d" % (b, e), {"opts": decode(e), "batch_size": b,
                                                        "seeds": S}))
    for buf in (1, 16, 64, 512, 3000):
        out.append(("buffer", "buffer=%d" % buf, {"opts": decode(4, echo_buffer=buf), "seeds": S}))
    for e in (2, 4):
        out.append(("batchecho", "back-to-back e=%d" % e, {"opts": {}, "py_batch_echo": e,
                                                           "seeds": S}))
        out.append(("batchecho", "shuffled e=%d" % e,
                    {"opts": {"echo": "fixed", "echo_point": "batch", "echo_factor": e,
                              "echo_buffer": 16 * args.batch_size}, "seeds": S}))
    for e in (1, 2, 4):
        out.append(("noharm", "e=%d" % e, {"opts": decode(e), "mode": "budget",
                                           "seeds": args.noharm_seeds}))
    sweeps = set(args.sweeps.split(","))
    return [p for p in out if p[0] in sweeps]


def run_key(sweep, cond, lr, seed):
    return "%s|%s|%g|%d" % (sweep, cond, lr, seed)


# --- one run ----------------------------------------------------------------------

def train(nostall, args, paths, classes, val, spec, lr, seed):
    """Train until the target (mode target) or the fresh budget (mode budget)."""
    bs = spec.get("batch_size", args.batch_size)
    budget = spec.get("mode") == "budget"
    torch.manual_seed(seed)
    model = ee.make_model(classes)
    opt = ee.make_opt(model, lr)
    o = dict(batch_size=bs, crop=args.crop, mode="train", threads=1, seed=seed, epochs=0,
             mean=ee.MEAN, std=ee.STD, storage_mbps=args.storage_mbps, io_depth=args.io_depth)
    o.update(spec["opts"])
    if o.get("echo") and "echo_buffer" not in o:
        o["echo_buffer"] = args.echo_buffer
    ld = nostall.Loader(paths["train"], **o)
    e_py = spec.get("py_batch_echo", 1)
    eval_model = ee.make_model(classes)
    eval_fresh = args.eval_fresh if not budget else args.budget_eval_fresh
    curve, pending = [], []
    res = {"lr": lr, "seed": seed, "reached": False, "batch_size": bs}
    steps, next_snap, paused, done = 0, eval_fresh, 0.0, False
    t0 = time.perf_counter()
    while not done:
        for x, y in ld:
            for _ in range(e_py):  # back-to-back batch echoing: the same batch e times
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                steps += 1
            fresh = ld.stats()["fresh_items"]
            if fresh < next_snap:
                continue
            t_pause = time.perf_counter()
            seconds = t_pause - t0 - paused
            next_snap = fresh + eval_fresh
            pending.append((fresh, seconds, steps,
                            {k: v.detach().clone() for k, v in model.state_dict().items()}))
            capped = (fresh >= (args.budget if budget else args.max_fresh)
                      or seconds >= args.max_seconds or not math.isfinite(float(loss)))
            if len(pending) >= args.eval_batch or capped:
                for f, sec, stp, sd in pending:
                    eval_model.load_state_dict(sd)
                    acc = ee.evaluate(eval_model, val)
                    curve.append((f, round(sec, 3), stp, acc))
                    if not budget and acc >= args.target and not res["reached"]:
                        res.update(reached=True, fresh=f, seconds=sec, steps=stp)
                pending = []
                done = res["reached"] or capped
            paused += time.perf_counter() - t_pause
            if done:
                break
    total = time.perf_counter() - t0 - paused
    st = ld.stats()
    ld.close()
    res.update(curve=curve, best_acc=max(c[3] for c in curve), final_acc=curve[-1][3],
               final_fresh=st["fresh_items"], final_seconds=total, final_steps=steps,
               items=st["items_delivered"] * e_py,
               achieved_factor=st["items_delivered"] * e_py / max(1, st["fresh_items"]),
               stall=st["consumer_wait_ns"] / 1e9 / max(total, 1e-9),
               diverged=not math.isfinite(float(loss)))
    if budget:
        # the budget's accuracy: the mean of the last 3 snapshots (less noisy than one)
        res["budget_acc"] = statistics.mean(c[3] for c in curve[-3:])
    return res


def lr_source(sweep, cond):
    """--reuse-lr: the tuned condition whose rate `cond` takes, or None."""
    if sweep == "buffer":
        return "factor|e=4"
    if sweep == "batchecho":
        return "factor|e=%s" % cond.split("=")[-1]
    if sweep == "noharm" and cond != "e=1":
        return "noharm|e=1"
    return None


def tune_key(r, budget):
    if budget:
        return (-r["budget_acc"],)
    return (0, r["fresh"], r["steps"]) if r["reached"] else (1, -r["best_acc"], 0)


# --- the driver ---------------------------------------------------------------------

def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.path.join(ROOT, "build-profile", "echo_sweeps.json"))
    p.add_argument("--from", dest="from_json",
                   help="only the tables and plots of this JSON (or of several: A,B,...)")
    p.add_argument("--plots", help="write the plots as PREFIX-<sweep>.png")
    p.add_argument("--md", help="write the tables (markdown) here")
    p.add_argument("--quick", action="store_true", help="smoke run: 1 seed, 2 conditions a sweep")
    p.add_argument("--sweeps", default="factor,batchecho,buffer,batch,noharm")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--factor-seeds", type=int, default=5)
    p.add_argument("--noharm-seeds", type=int, default=5)
    p.add_argument("--tune-seed", type=int, default=100)
    p.add_argument("--tune-only", action="store_true",
                   help="tune the learning rates, measure nothing (e.g. to check --reuse-lr's)")
    p.add_argument("--reuse-lr", action="store_true",
                   help="take the learning rate of a tuned equivalent condition (see above)")
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
    p.add_argument("--storage-mbps", type=float, default=2.539)
    p.add_argument("--calibrate", action="store_true", help="calibrate storage_mbps for R = 4")
    p.add_argument("--R", type=float, default=4.0)
    p.add_argument("--calib-steps", type=int, default=40)
    p.add_argument("--target", type=float, default=0.80)
    p.add_argument("--eval-fresh", type=int, default=256)
    p.add_argument("--budget", type=int, default=12000, help="noharm: fresh examples")
    p.add_argument("--budget-eval-fresh", type=int, default=1000)
    p.add_argument("--eval-batch", type=int, default=8)
    p.add_argument("--max-fresh", type=int, default=60000)
    p.add_argument("--max-seconds", type=float, default=3600,
                   help="cap per run (training seconds; kept far away: a cap in seconds would "
                   "make fresh examples to target depend on the machine's load)")
    args = p.parse_args()

    if args.from_json:
        # several JSONs (sweeps run in parallel processes, each its own --out):
        # their runs, tuned and reused rates together; args and machine of the first
        results = None
        for path in args.from_json.split(","):
            with open(path) as f:
                part = json.load(f)
            if results is None:
                results = part
                continue
            for k in ("runs", "tuned", "lr_from"):
                results.setdefault(k, {}).update(part.get(k, {}))
            results["elapsed_s"] = results.get("elapsed_s", 0) + part.get("elapsed_s", 0)
        report(results, args)
        return
    if args.quick:
        args.seeds = args.factor_seeds = args.noharm_seeds = 1
        args.train_images, args.val_images = 1500, 500
        args.budget = 3000
    torch.set_num_threads(1)
    import warnings
    import nostall
    # e > R is the point of some conditions here: the loader's warning about it is expected
    warnings.filterwarnings("ignore", message="nostall: echo_factor")
    paths = ee.make_data(args)
    val = ee.load_val(nostall, paths["val"], args.crop)
    probe = nostall.Loader(paths["train"], batch_size=args.batch_size, crop=args.crop, threads=1,
                           epochs=1)
    classes = probe.info()["classes"]
    probe.close()
    results = {"runs": {}, "tuned": {}}
    if os.path.exists(args.out):
        with open(args.out) as f:
            results = json.load(f)
        print("resuming %s: %d runs done" % (args.out, len(results["runs"])), flush=True)
    if args.calibrate and "calibration" not in results:
        args.storage_mbps = None
        results["calibration"] = ee.calibrate(nostall, args, paths, classes)
    args.storage_mbps = results.get("calibration", {}).get("storage_mbps", args.storage_mbps)
    results["args"] = {k: v for k, v in vars(args).items()}
    results.setdefault("machine", {"cpus": os.cpu_count(), "torch": torch.__version__,
                                   "started": time.strftime("%Y-%m-%d %H:%M:%S UTC",
                                                            time.gmtime())})
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)

    def save():
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(results, f)
        os.replace(tmp, args.out)

    def run(sweep, cond, spec, lr, seed, role):
        key = run_key(sweep, cond, lr, seed)
        if key in results["runs"]:
            return results["runs"][key]
        same = run_key("factor", "e=4", lr, seed)
        if (args.reuse_lr and sweep == "buffer" and cond == "buffer=%d" % args.echo_buffer
                and same in results["runs"]):  # identical loader options: the same run
            r = dict(results["runs"][same], sweep=sweep, condition=cond, role=role,
                     copied_from=same)
            results["runs"][key] = r
            save()
            return r
        t = time.time()
        r = train(nostall, args, paths, classes, val, spec, lr, seed)
        r.update(sweep=sweep, condition=cond, role=role, wall=time.time() - t,
                 load=os.getloadavg()[0], when=time.strftime("%H:%M:%S"))
        results["runs"][key] = r
        save()
        budget = spec.get("mode") == "budget"
        tag = ("final %.3f" % r["budget_acc"] if budget else
               "reached: %6d fresh, %6.1f s, %5d steps" % (r["fresh"], r["seconds"], r["steps"])
               if r["reached"] else "NOT reached (best %.3f)" % r["best_acc"])
        print("  %-9s %-20s lr %-7g seed %-3d %s (factor %.2f, stall %.0f%%, load %.1f, %.0f s)"
              % (sweep, cond, lr, seed, tag, r["achieved_factor"], 100 * r["stall"], r["load"],
                 r["wall"]), flush=True)
        return r

    todo = plan(args)
    if args.quick:
        seen, q = {}, []
        for x in todo:
            if seen.get(x[0], 0) < 2:
                q.append(x)
                seen[x[0]] = seen.get(x[0], 0) + 1
        todo = q
    t_start = time.time()
    for sweep, cond, spec in todo:
        budget = spec.get("mode") == "budget"
        scale = spec.get("batch_size", args.batch_size) / args.batch_size
        grid = [round(l * scale, 6) for l in BASE_LRS] if not args.quick else [0.02 * scale]
        tkey = "%s|%s" % (sweep, cond)
        src = lr_source(sweep, cond) if args.reuse_lr else None
        if tkey not in results["tuned"] and src in results["tuned"]:
            results["tuned"][tkey] = results["tuned"][src]
            results.setdefault("lr_from", {})[tkey] = src
            save()
        if tkey not in results["tuned"]:
            print("%s %s: tuning lr on seed %d" % (sweep, cond, args.tune_seed), flush=True)
            tried = {lr: run(sweep, cond, spec, lr, args.tune_seed, "tune") for lr in grid}
            # a best rate at the edge of the grid: try one step further (twice at most)
            for _ in range(2):
                best = min(tried, key=lambda l: tune_key(tried[l], budget))
                lo, hi = min(tried), max(tried)
                if len(tried) < 2 or (best != lo and best != hi):
                    break
                nxt = round(best / 2, 6) if best == lo else round(best * 2, 6)
                tried[nxt] = run(sweep, cond, spec, nxt, args.tune_seed, "tune")
            best = min(tried, key=lambda l: tune_key(tried[l], budget))
            results["tuned"][tkey] = best
            save()
        lr = results["tuned"][tkey]
        print("%s %s: lr %g" % (sweep, cond, lr), flush=True)
        if args.tune_only:
            continue
        for seed in range(spec["seeds"]):
            run(sweep, cond, spec, lr, seed, "measure")
    results["elapsed_s"] = results.get("elapsed_s", 0) + time.time() - t_start
    save()
    report(results, args)


# --- tables and plots ---------------------------------------------------------------

def summarize(results):
    """{(sweep, cond): row} over the measured runs."""
    rows = {}
    for r in results["runs"].values():
        if r["role"] != "measure":
            continue
        rows.setdefault((r["sweep"], r["condition"]), []).append(r)
    out = {}
    for k, runs in rows.items():
        ok = [r for r in runs if r["reached"]]
        row = {"sweep": k[0], "condition": k[1], "lr": runs[0]["lr"], "runs": len(runs),
               "reached": len(ok), "factor": statistics.mean(r["achieved_factor"] for r in runs),
               "stall": statistics.mean(r["stall"] for r in runs),
               "load": statistics.mean(r["load"] for r in runs)}
        # Time to target in a pipeline with R = upstream time / step time per
        # batch (R_MODEL): the loader delivers a fresh batch every R steps, so
        # a run takes max(steps, R * fresh batches) step times -- the wall-clock
        # figure of a machine whose load does not change R during the run.
        for r in ok:
            r["model"] = max(r["steps"], R_MODEL * r["fresh"] / r.get("batch_size", 64))
        for key in ("fresh", "seconds", "steps", "model"):
            vals = [r[key] for r in ok]
            row[key] = statistics.mean(vals) if vals else None
            row[key + "_sd"] = statistics.stdev(vals) if len(vals) > 1 else 0.0
            row[key + "_all"] = vals
        if "budget_acc" in runs[0]:
            vals = [r["budget_acc"] for r in runs]
            row["acc"], row["acc_sd"] = statistics.mean(vals), (statistics.stdev(vals)
                                                                if len(vals) > 1 else 0.0)
            row["acc_all"] = vals
            row["steps_all"] = [r["final_steps"] for r in runs]
            row["seconds"] = statistics.mean(r["final_seconds"] for r in runs)
        out[k] = row
    return out


def _order(results):
    order = []
    for r in results["runs"].values():
        k = (r["sweep"], r["condition"])
        if k not in order:
            order.append(k)
    return order


def report(results, args):
    rows = summarize(results)
    order = _order(results)
    md = []
    base = rows.get(("factor", "e=1"))

    def rel(row, key, ref):
        if not ref or not ref.get(key) or row.get(key) is None or row["reached"] < row["runs"]:
            return "-"
        return "%.2f" % (row[key] / ref[key])

    def cell(row, key, fmt):
        if row.get(key) is None:
            return "not reached"
        s = fmt % (row[key], row[key + "_sd"])
        return s + (" (%d/%d)" % (row["reached"], row["runs"]) if row["reached"] < row["runs"]
                    else "")

    for sweep, title in (("factor", "Echo factor (example echoing before augmentation)"),
                         ("batch", "Batch size"), ("buffer", "Shuffle buffer (e = 4)"),
                         ("batchecho", "Batch echoing: back-to-back vs shuffled"),
                         ("noharm", "No harm: a fixed budget of fresh examples")):
        ks = [k for k in order if k[0] == sweep and k in rows]
        if not ks:
            continue
        md += ["", "### " + title, ""]
        if sweep == "noharm":
            md += ["| condition | lr | final val. accuracy | seeds | SGD steps | seconds |",
                   "|---|---|---|---|---|---|"]
            for k in ks:
                r = rows[k]
                md.append("| %s | %g | %.3f ± %.3f | %s | %.0f | %.1f |" % (
                    k[1], r["lr"], r["acc"], r["acc_sd"], ", ".join("%.3f" % a for a in r["acc_all"]),
                    statistics.mean(r["steps_all"]), r["seconds"]))
            continue
        if sweep in ("buffer", "batchecho"):
            md += ["x e=1: against the factor sweep's e=1 (batch 64, the same data and model); "
                   "its seconds are not compared (measured at another time, another load).", ""]
        md += ["| condition | lr | fresh examples to target | x e=1 | seconds to target | x e=1 "
               "| time at R=4 (model) x e=1 | SGD steps | factor | stall |",
               "|---|---|---|---|---|---|---|---|---|---|"]
        for k in ks:
            r = rows[k]
            ref = base
            if sweep == "batch":
                ref = rows.get(("batch", k[1].split()[0] + " e=1"))
            md.append("| %s | %g | %s | %s | %s | %s | %s | %s | %.2f | %.0f%% |" % (
                k[1], r["lr"], cell(r, "fresh", "%.0f ± %.0f"), rel(r, "fresh", ref),
                cell(r, "seconds", "%.1f ± %.1f"),
                # seconds against a reference run in the same sweep only (the
                # factor sweep's e=1 ran at another time, under another load)
                rel(r, "seconds", ref) if sweep in ("factor", "batch") else "-",
                rel(r, "model", ref),
                "%.0f" % r["steps"] if r["steps"] else "-", r["factor"], 100 * r["stall"]))
    tuned = results.get("tuned", {})
    md += ["", "Learning rates tried on the tuning seed (fresh examples to target, or final "
           "accuracy):", ""]
    for tkey, best in tuned.items():
        if tkey in results.get("lr_from", {}):
            continue
        sweep, cond = tkey.split("|")
        tries = sorted((r for r in results["runs"].values() if r["sweep"] == sweep and
                        r["condition"] == cond and r["role"] == "tune"), key=lambda r: r["lr"])
        md.append("* %s %s: %s → %g" % (sweep, cond, ", ".join(
            "%g: %s" % (r["lr"], ("%.3f" % r["budget_acc"]) if "budget_acc" in r else
                        (str(r["fresh"]) if r["reached"] else "not reached")) for r in tries),
            best))
    for tkey, src in results.get("lr_from", {}).items():
        md.append("* %s %s: not tuned (--reuse-lr): the rate of %s, %g" % (
            tkey.split("|")[0], tkey.split("|")[1], src.replace("|", " "), tuned.get(tkey, 0)))
    copied = sorted({(r["condition"], r["copied_from"].split("|")[0] + " " +
                      r["copied_from"].split("|")[1])
                     for r in results["runs"].values() if r.get("copied_from")})
    for cond, src in copied:
        md.append("* %s: the runs of %s (identical loader options), not run again" % (cond, src))
    loads = [r["load"] for r in results["runs"].values()]
    if loads:
        md += ["", "%d runs; load average during them: median %.1f, range %.1f-%.1f (2 cores)."
               % (len(loads), statistics.median(loads), min(loads), max(loads))]
    text = "\n".join(md) + "\n"
    print(text)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text)
    if args.plots:
        plot(results, rows, order, args.plots)


def plot(results, rows, order, prefix):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    written = []

    def bars(ax, ks, key, label, ref=None):
        for j, k in enumerate(ks):
            r = rows[k]
            vals = r.get(key + "_all") or []
            ax.scatter([j] * len(vals), vals, color="k", s=12, zorder=3)
            if r.get(key) is not None:
                ax.bar(j, r[key], color="tab:orange", alpha=0.5 if r["reached"] == r["runs"]
                       else 0.2)
        ax.set_xticks(range(len(ks)))
        ax.set_xticklabels([k[1] for k in ks], rotation=30, ha="right")
        ax.set_ylabel(label)
        ax.grid(axis="y", alpha=0.3)

    # echo factor: fresh examples and seconds vs e, with the ideal 1/e
    ks = [k for k in order if k[0] == "factor" and k in rows]
    if ks:
        es = [int(k[1].split("=")[1]) for k in ks]
        fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
        b = rows[ks[0]]
        for ax, key, label in ((axes[0], "fresh", "fresh examples to target"),
                               (axes[1], "seconds", "training seconds to target")):
            for e, k in zip(es, ks):
                vals = rows[k].get(key + "_all") or []
                ax.scatter([e] * len(vals), vals, color="k", s=12, zorder=3)
            means = [rows[k][key] for k in ks]
            ax.plot([e for e, m in zip(es, means) if m], [m for m in means if m], "o-",
                    color="tab:orange", label="mean of seeds")
            if b.get(key):
                ax.plot(es, [b[key] / e for e in es], ":", color="gray", label="ideal: baseline / e")
            ax.set_xscale("log", base=2)
            ax.set_xticks(es)
            ax.set_xticklabels([str(e) for e in es])
            ax.set_xlabel("echo factor e (decode)")
            ax.set_ylabel(label)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        ax = axes[2]
        seed0 = 0
        cmap = plt.get_cmap("viridis")
        for i, (e, k) in enumerate(zip(es, ks)):
            run = results["runs"].get(run_key("factor", k[1], rows[k]["lr"], seed0))
            if run:
                ax.plot([c[0] for c in run["curve"]], [c[3] for c in run["curve"]],
                        color=cmap(i / max(1, len(ks) - 1)), label="e=%d" % e, lw=1.2)
        ax.axhline(results["args"]["target"], color="gray", ls=":", lw=0.8)
        ax.set_xlabel("fresh examples")
        ax.set_ylabel("validation accuracy (seed 0)")
        ax.set_ylim(0, 1)
        ax.legend(fontsize=7, ncol=2)
        ax.grid(alpha=0.3)
        fig.suptitle("Echo factor sweep: example echoing before augmentation")
        fig.tight_layout()
        fig.savefig(prefix + "-factor.png", dpi=100)
        written.append(prefix + "-factor.png")
        plt.close(fig)
    others = [("batch", "batch size"), ("buffer", "shuffle buffer, e = 4"),
              ("batchecho", "batch echoing")]
    present = [(s, t) for s, t in others if any(k[0] == s for k in rows)]
    if present:
        fig, axes = plt.subplots(1, len(present), figsize=(5.5 * len(present), 4.8), squeeze=False)
        for ax, (s, t) in zip(axes[0], present):
            ks = [k for k in order if k[0] == s and k in rows]
            if s == "batch":
                # fresh examples with echoing relative to without, per batch size
                bsz = sorted({int(k[1].split()[0][2:]) for k in ks})
                ratio, pts = [], []
                for b in bsz:
                    r1, r4 = rows.get((s, "B=%d e=1" % b)), rows.get((s, "B=%d e=4" % b))
                    if r1 and r4 and r1.get("fresh") and r4.get("fresh"):
                        ratio.append(r4["fresh"] / r1["fresh"])
                        pts.append(b)
                        ax.scatter([b] * len(r4["fresh_all"]),
                                   [v / r1["fresh"] for v in r4["fresh_all"]], color="k", s=12)
                ax.plot(pts, ratio, "o-", color="tab:orange")
                ax.axhline(1, color="gray", lw=0.8)
                ax.axhline(0.25, color="gray", ls=":", lw=0.8)
                ax.set_xscale("log", base=2)
                ax.set_xticks(pts)
                ax.set_xticklabels([str(b) for b in pts])
                ax.set_xlabel("batch size")
                ax.set_ylabel("fresh examples to target, e=4 / e=1")
                ax.set_title("echoing vs batch size (ideal 0.25)")
                ax.grid(alpha=0.3)
            else:
                bars(ax, ks, "fresh", "fresh examples to target")
                ax.set_title(t)
        fig.tight_layout()
        fig.savefig(prefix + "-sweeps.png", dpi=100)
        written.append(prefix + "-sweeps.png")
        plt.close(fig)
    ks = [k for k in order if k[0] == "noharm" and k in rows]
    if ks:
        fig, ax = plt.subplots(figsize=(6, 4.5))
        for i, k in enumerate(ks):
            r = rows[k]
            run = results["runs"].get(run_key("noharm", k[1], r["lr"], 0))
            if run:
                ax.plot([c[0] for c in run["curve"]], [c[3] for c in run["curve"]],
                        label="%s (seed 0)" % k[1])
        ax.set_xlabel("fresh examples")
        ax.set_ylabel("validation accuracy")
        ax.set_title("fixed budget of fresh examples")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(prefix + "-noharm.png", dpi=100)
        written.append(prefix + "-noharm.png")
        plt.close(fig)
    for w in written:
        print("plot written to %s" % w)


if __name__ == "__main__":
    main()
