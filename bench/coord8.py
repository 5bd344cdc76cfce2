#!/usr/bin/env python3
"""bench/coord8.py -- coordinated prep at the paper's scale (issue 26): a
hyperparameter search of 8 jobs on one machine, coordinated (`--coordinate`)
vs 8 independent jobs, all started together and started one after another.

The jobs of a hyperparameter search differ in their learning rate, which
does not change the data they read: each job is a `nostall bench` process
(the training step simulated with --step-ms, as an accelerator's would not
use the host's cores; 8 real trainings on 2 CPU cores would measure the
CPU's training speed, not the loader). Prep-bound on purpose: full-size
crops (224) of 470x425 JPEGs, threads = cores per job.

Scenarios, in rounds (medians over --rounds):
  solo        one job alone, --epochs E;
  indep       8 independent jobs at once, --epochs E each;
  coord       8 jobs of one group at once (--coordinate), --epochs E;
  coord-late  8 jobs of one group started --stagger s apart; the group's
              plan is --late-epochs L epochs and a late joiner gets the epochs
              left when it joins (docs/coordinated.md): every batch of those
              epochs, checked (items and batches per epoch);
  indep-late  8 independent jobs started --stagger s apart, job i running as
              many epochs as job i of coord-late received (the same work).
  marginal   one job alone and 8 coordinated jobs, each for 1 and for
              1 + --marginal K epochs: the CPU of the K extra epochs / K is
              the CPU per epoch without the per-job start-up (process,
              library, index, joining the group), which a group of 8 pays 8
              times and a run of --epochs E spreads over only E epochs.
Figures: per-job items/s over its epochs after its first (steady state),
the aggregate (sum over jobs), CPU seconds (user + system of the jobs,
getrusage of the children) per epoch the group prepared, wall time until
all jobs finished. Once, after the rounds: the late joiners' bytes epoch by
epoch against a job alone (checksums, a smaller crop so hashing stays cheap).

    PYTHONPATH=python /usr/bin/python3 bench/coord8.py --cli build-profile/nostall [--rounds 3]
    /usr/bin/python3 bench/coord8.py --only-marginal   # add the marginal runs to --out's JSON

Writes build-profile/coord8.{json,md} (--out). Acceptance (issue 26): the
aggregate of 8 coordinated jobs >= 7x that of 8 independent ones; the
group's CPU per epoch <= 1.15x one job's.
"""

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def steady(j):
    """items/s over the job's epochs after its first (all of them if only one)."""
    eps = j["per_epoch"][1:] or j["per_epoch"]
    s = sum(e["seconds"] for e in eps)
    return sum(e["items"] for e in eps) / s if s > 0 else 0.0


def cpu_children():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def launch(cmds, starts):
    """Start cmds[i] at starts[i] seconds; wait for all. (JSONs, CPU s, wall s,
    per-job (start, end) offsets)."""
    c0, t0 = cpu_children(), time.perf_counter()
    procs, spans = [None] * len(cmds), [None] * len(cmds)
    order = sorted(range(len(cmds)), key=lambda i: starts[i])
    for i in order:
        delay = starts[i] - (time.perf_counter() - t0)
        if delay > 0:
            time.sleep(delay)
        procs[i] = subprocess.Popen(cmds[i], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True)
        spans[i] = [time.perf_counter() - t0, None]
    outs = [None] * len(cmds)
    pending = set(range(len(cmds)))
    while pending:  # note each job's end as it happens
        for i in list(pending):
            if procs[i].poll() is not None:
                out, err = procs[i].communicate()
                spans[i][1] = time.perf_counter() - t0
                if procs[i].returncode != 0:
                    raise SystemExit("job failed (%d): %s\n%s" % (procs[i].returncode,
                                                                  " ".join(cmds[i]), err))
                outs[i] = json.loads(out)
                pending.discard(i)
        time.sleep(0.005)
    return outs, cpu_children() - c0, time.perf_counter() - t0, spans


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cli", default=os.path.join(ROOT, "build-profile", "nostall"))
    ap.add_argument("--images", type=int, default=400)
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--late-epochs", type=int, default=12)
    ap.add_argument("--stagger", type=float, default=0.0,
                    help="seconds between starts (0: half the solo job's epoch in that round)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--step-ms", type=float, default=0.0)
    ap.add_argument("--nice", type=int, default=10, help="nice level of every job (0: none)")
    ap.add_argument("--out", default=os.path.join(ROOT, "build-profile", "coord8"))
    ap.add_argument("--marginal", type=int, default=6,
                    help="extra epochs of the marginal CPU runs (0: none)")
    ap.add_argument("--only-marginal", action="store_true",
                    help="only the marginal CPU runs, added to the JSON of --out (and its .md)")
    ap.add_argument("--table", action="store_true",
                    help="run nothing: the tables of --out's JSON, again (into its .md)")
    a = ap.parse_args()
    if a.table:
        with open(a.out + ".json") as f:
            results = json.load(f)
        md = table(results, argparse.Namespace(**results["args"]))
        print(md)
        with open(a.out + ".md", "w") as f:
            f.write(md + "\n")
        return 0
    data = os.path.join(os.environ.get("NOSTALL_BENCH_DATA", "/tmp/nostall-bench-data"),
                        "coord-n%d-470x425-q95" % a.images)
    if not os.path.isdir(data):
        subprocess.run([a.cli, "gen", data, "--images", str(a.images), "--classes", "8",
                        "--width", "470", "--height", "425", "--quality", "95", "--seed", "9",
                        "--quiet"], check=True)
    nice = ["nice", "-n", str(a.nice)] if a.nice else []
    base = nice + [a.cli, "bench", data, "--batch-size", "32", "--crop", "224", "--threads",
                   str(a.threads), "--json", "--quiet", "--no-checksum", "--seed", "1",
                   "--step-ms", str(a.step_ms)]
    J = a.jobs
    if a.only_marginal:
        with open(a.out + ".json") as f:
            results = json.load(f)
        results["marginal"] = marginal(a, base, J)
        b = argparse.Namespace(**dict(results["args"], marginal=a.marginal))
        md = table(results, b)
        print(md)
        with open(a.out + ".json", "w") as f:
            json.dump(results, f)
        with open(a.out + ".md", "w") as f:
            f.write(md + "\n")
        return 0
    # learning rates of the search: they name the jobs; the data is the same
    lrs = [0.4 / 2 ** i for i in range(J)]
    results = {"args": vars(a), "lrs": lrs, "rounds": []}
    t_all = time.time()
    for rnd in range(a.rounds):
        R = {"load_before": os.getloadavg()}
        g = "coord8-%d-%d" % (os.getpid(), rnd)
        outs, cpu, wall, spans = launch([base + ["--epochs", str(a.epochs)]], [0.0])
        R["solo"] = {"jobs": outs, "cpu_s": cpu, "wall_s": wall, "spans": spans,
                     "load": os.getloadavg()[0]}
        print("round %d %-10s wall %6.2f s  cpu %6.2f s  per-job items/s %.0f" % (
            rnd, "solo", wall, cpu, steady(outs[0])), flush=True)
        # late joiners join the group every half epoch (of the job alone)
        stagger = a.stagger or 0.5 * sum(e["seconds"] for e in outs[0]["per_epoch"]) / a.epochs
        R["stagger_s"] = stagger
        runs = [("indep", [base + ["--epochs", str(a.epochs)]] * J, [0.0] * J),
                ("coord", [base + ["--epochs", str(a.epochs), "--coordinate", g + "a"]] * J,
                 [0.0] * J),
                ("coord-late", [base + ["--epochs", str(a.late_epochs), "--coordinate", g + "b"]]
                 * J, [i * stagger for i in range(J)])]
        if rnd % 2:  # alternate the order of the simultaneous scenarios
            runs[0], runs[1] = runs[1], runs[0]
        for name, cmds, starts in runs:
            outs, cpu, wall, spans = launch(cmds, starts)
            R[name] = {"jobs": outs, "cpu_s": cpu, "wall_s": wall, "spans": spans,
                       "load": os.getloadavg()[0]}
            print("round %d %-10s wall %6.2f s  cpu %6.2f s  per-job items/s %s" % (
                rnd, name, wall, cpu, " ".join("%.0f" % steady(j) for j in outs)), flush=True)
        # the same work for independent late starters: the epochs each joiner got
        got = [len(j["per_epoch"]) for j in R["coord-late"]["jobs"]]
        cmds = [base + ["--epochs", str(max(1, n))] for n in got]
        outs, cpu, wall, spans = launch(cmds, [i * stagger for i in range(J)])
        R["indep-late"] = {"jobs": outs, "cpu_s": cpu, "wall_s": wall, "spans": spans,
                           "load": os.getloadavg()[0]}
        print("round %d %-10s wall %6.2f s  cpu %6.2f s  epochs %s" % (
            rnd, "indep-late", wall, cpu, got), flush=True)
        R["load_after"] = os.getloadavg()
        results["rounds"].append(R)

    # late joiners' bytes: every epoch they got equals the same epoch of a job alone
    small = nice + [a.cli, "bench", data, "--batch-size", "32", "--crop", "64", "--threads",
                    str(a.threads), "--json", "--quiet", "--seed", "1", "--epochs",
                    str(a.late_epochs), "--step-ms", "5"]
    solo_sum, _, _, _ = launch([small], [0.0])
    stagger = a.stagger or 0.5 * sum(e["seconds"] for e in solo_sum[0]["per_epoch"]) / \
        a.late_epochs
    late_sum, _, _, _ = launch([small + ["--coordinate", "coord8-%d-c" % os.getpid()]] * J,
                               [i * stagger for i in range(J)])
    ref = {e["epoch"]: e["checksum"] for e in solo_sum[0]["per_epoch"]}
    bytes_ok = all(e["checksum"] == ref[e["epoch"]] for j in late_sum for e in j["per_epoch"])
    results["late_checksums"] = {"ok": bytes_ok, "epochs": [[e["epoch"] for e in j["per_epoch"]]
                                                            for j in late_sum]}
    if a.marginal:
        results["marginal"] = marginal(a, base, J)
    results["elapsed_s"] = time.time() - t_all
    md = table(results, a)
    print(md)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out + ".json", "w") as f:
        json.dump(results, f)
    with open(a.out + ".md", "w") as f:
        f.write(md + "\n")
    return 0


def marginal(a, base, J):
    """CPU s of one job alone and of a group of J, each for 1 and 1 + K epochs,
    in --rounds rounds (the order within a round alternating)."""
    K, out = a.marginal, []
    for rnd in range(a.rounds):
        R = {"load_before": os.getloadavg()[0]}
        runs = [(n, e) for n in ("solo", "coord") for e in (1, 1 + K)]
        if rnd % 2:
            runs.reverse()
        for n, e in runs:
            cmd = base + ["--epochs", str(e)]
            if n == "coord":
                cmd = cmd + ["--coordinate", "coord8m-%d-%d-%d" % (os.getpid(), rnd, e)]
            outs, cpu, wall, _ = launch([cmd] * (J if n == "coord" else 1), [0.0] * (J if n == "coord" else 1))
            R["%s%d" % (n, e)] = {"cpu_s": cpu, "wall_s": wall,
                                  "items": sum(o["items"] for o in outs)}
            print("marginal round %d %-5s %2d epochs: wall %6.2f s  cpu %6.2f s"
                  % (rnd, n, e, wall, cpu), flush=True)
        out.append(R)
    return {"extra_epochs": K, "rounds": out}


def table(results, a):
    rs = results["rounds"]
    med = statistics.median
    J = a.jobs
    per = lambda r, n: [steady(j) for j in r[n]["jobs"]]
    one = med([per(r, "solo")[0] for r in rs])
    cpu1 = med([r["solo"]["cpu_s"] / a.epochs for r in rs])
    lines = ["Machine: %s, %d cores (%s); %d JPEGs 470x425 q95; batch 32, crop 224 float, %d "
             "threads per job, step %g ms, every job at nice %d; %d rounds, medians; load "
             "average (1 min) before the rounds: %s."
             % (platform.node(), os.cpu_count(), platform.machine(),
                rs[0]["solo"]["jobs"][0]["dataset"]["items"], a.threads, a.step_ms, a.nice,
                len(rs), ", ".join("%.1f" % r["load_before"][0] for r in rs)),
             "", "| run | per-job items/s (median job) | aggregate items/s | ÷ %d independent "
             "| CPU s per epoch prepared | ÷ one job's | wall until all finished |",
             "|---|---|---|---|---|---|---|"]
    lines[2] = lines[2] % J
    agg = {n: med([sum(per(r, n)) for r in rs]) for n in ("solo", "indep", "coord")}
    # CPU per epoch prepared: a job alone prepares E epochs; 8 independent 8E;
    # a group E (each item once for the group)
    cpu = {"solo": cpu1, "indep": med([r["indep"]["cpu_s"] / (J * a.epochs) for r in rs]),
           "coord": med([r["coord"]["cpu_s"] / a.epochs for r in rs])}
    wall = {n: med([r[n]["wall_s"] for r in rs]) for n in ("solo", "indep", "coord", "coord-late",
                                                          "indep-late")}
    lines.append("| 1 job alone | %.0f | %.0f | - | %.2f | 1.00 | %.2f s |"
                 % (one, agg["solo"], cpu1, wall["solo"]))
    lines.append("| %d independent | %.0f | %.0f | 1.00 | %.2f per job's epoch (%.2f for all %d) "
                 "| %.2f | %.2f s |"
                 % (J, med([med(per(r, "indep")) for r in rs]), agg["indep"], cpu["indep"],
                    J * cpu["indep"], J, J * cpu["indep"] / cpu1, wall["indep"]))
    # the ratios side by side: within each round, then the median of the rounds
    agg_x = [sum(per(r, "coord")) / sum(per(r, "indep")) for r in rs]
    cpu_x = [r["coord"]["cpu_s"] / r["solo"]["cpu_s"] for r in rs]  # the same epochs
    lines.append("| %d coordinated | %.0f | %.0f | **%.2f** | %.2f | **%.2f** | %.2f s |"
                 % (J, med([med(per(r, "coord")) for r in rs]), agg["coord"],
                    med(agg_x), cpu["coord"], med(cpu_x), wall["coord"]))
    # late joiners
    late_cpu = med([r["coord-late"]["cpu_s"] for r in rs])
    il_cpu = med([r["indep-late"]["cpu_s"] for r in rs])
    got = [len(j["per_epoch"]) for j in rs[-1]["coord-late"]["jobs"]]
    complete = all(all(e["items"] == j["dataset"]["items"] for e in j["per_epoch"])
                   for r in rs for j in r["coord-late"]["jobs"])
    firsts = [[j["per_epoch"][0]["epoch"] for j in r["coord-late"]["jobs"]] for r in rs]
    lines += ["", "Started %.2f s apart (median; half an epoch of the job alone; a plan of %d "
              "epochs; a joiner gets the epochs left "
              "when it joins): epochs received per job (last round) %s, first epochs per round "
              "%s; every epoch complete (items = dataset): **%s**; bytes of every epoch equal "
              "to a job alone (checksums, crop 64): **%s**."
              % (med([r["stagger_s"] for r in rs]), a.late_epochs, got, firsts, "yes" if complete else "NO",
                 "yes" if results["late_checksums"]["ok"] else "NO"),
              "", "| started one after another | wall until all finished | CPU s (all jobs) | "
              "aggregate items/s |", "|---|---|---|---|",
              "| %d coordinated (late joiners) | %.2f s | %.2f | %.0f |"
              % (J, wall["coord-late"], late_cpu, med([sum(per(r, "coord-late")) for r in rs])),
              "| %d independent, the same epochs each | %.2f s | %.2f | %.0f |"
              % (J, wall["indep-late"], il_cpu, med([sum(per(r, "indep-late")) for r in rs])),
              "", "Aggregate: %d coordinated **%.2fx** %d independent (rounds: %s; want >= 7x for "
              "8); group CPU per epoch **%.2fx** one job's (rounds: %s; want <= 1.15x); the "
              "ratios within each round, their median in bold; %.0f s in all."
              % (J, med(agg_x), J, ", ".join("%.2f" % x for x in agg_x), med(cpu_x),
                 ", ".join("%.2f" % x for x in cpu_x), results["elapsed_s"])]
    if results.get("marginal"):
        M = results["marginal"]
        K, mr = M["extra_epochs"], M["rounds"]
        ms = med([(r["solo%d" % (1 + K)]["cpu_s"] - r["solo1"]["cpu_s"]) / K for r in mr])
        mc = med([(r["coord%d" % (1 + K)]["cpu_s"] - r["coord1"]["cpu_s"]) / K for r in mr])
        fs = med([r["solo1"]["cpu_s"] - (r["solo%d" % (1 + K)]["cpu_s"] - r["solo1"]["cpu_s"]) / K
                  for r in mr])
        fc = med([r["coord1"]["cpu_s"] - (r["coord%d" % (1 + K)]["cpu_s"] - r["coord1"]["cpu_s"]) / K
                  for r in mr])
        mx = [(r["coord%d" % (1 + K)]["cpu_s"] - r["coord1"]["cpu_s"]) /
              (r["solo%d" % (1 + K)]["cpu_s"] - r["solo1"]["cpu_s"]) for r in mr]
        lines += ["", "Marginal CPU per epoch (runs of 1 and %d epochs, %d rounds, medians; load "
                  "average before: %s): one job alone %.3f s, the group of %d %.3f s: **%.2fx** "
                  "one job's (rounds: %s). Start-up (CPU of the 1-epoch run less one marginal "
                  "epoch): one job %.3f s, the group %.3f s (%.3f s per joining job)."
                  % (1 + K, len(mr), ", ".join("%.1f" % r["load_before"] for r in mr), ms, J, mc,
                     med(mx), ", ".join("%.2f" % x for x in mx), fs, fc,
                     (fc - fs) / max(1, J - 1))]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
