#!/usr/bin/python3
"""bench/mixing.py — weighted mixing end to end through the CLI (docs/mixing.md).

1. Shares: 100 000 items delivered by `nostall bench --mix` for weights
   0.7/0.3 and 0.5/0.3/0.2 (the JSON's per-source counts), whole mixed epochs
   and the first 100 000 items of a longer one; want within 1% of the weights.
2. Cost: CPU per item (and items/s) of one dataset D read plainly and as
   `--mix D:0.5,D:0.5` (the same files, the same items per epoch, so only the
   mixing differs); ROUNDS interleaved rounds, medians.

    /usr/bin/python3 bench/mixing.py [--rounds N] [--threads N]

Uses $NOSTALL_CLI or build/nostall. Prints Markdown tables; writes
bench/mixing.json in the CLI's build folder.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
CLI = os.environ.get("NOSTALL_CLI") or os.path.join(ROOT, "build", "nostall")


def bench(*args):
    """The run's JSON, plus the CPU seconds (user + system) the process used."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([CLI, "bench", *args, "--json", "--quiet"], check=True,
                         stdout=subprocess.PIPE).stdout
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    j = json.loads(out)
    j["cpu_seconds"] = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return j


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    if not os.path.exists(CLI):
        sys.exit("bench/mixing.py: %s not found (build first, or set NOSTALL_CLI)" % CLI)
    tmp = tempfile.mkdtemp(prefix="nostall-mixing-")
    dirs = []
    for name, n in (("a", 300), ("b", 120), ("c", 40)):
        d = os.path.join(tmp, name)
        subprocess.run([CLI, "gen", d, "--images", str(n), "--classes", "4", "--width", "48",
                        "--height", "36", "--quiet"], check=True)
        dirs.append(d)
    small = ["--crop", "8", "--output", "uint8", "--batch-size", "500", "--no-checksum",
             "--threads", str(a.threads)]
    res = {"shares": [], "cost": {}}
    rows = []
    for weights, epoch_items, epochs in (((0.7, 0.3), 0, 239), ((0.7, 0.3), 100000, 1),
                                         ((0.5, 0.3, 0.2), 100000, 1),
                                         ((0.5, 0.3, 0.2), 1000000, None)):
        spec = ",".join("%s:%g" % (d, w) for d, w in zip(dirs, weights))
        extra = ["--mix-epoch-items", str(epoch_items)] if epoch_items else []
        if epochs is None:
            # 100 000 items of a mixed epoch of 1 000 000: rank 0 of 10 (bench
            # runs whole epochs), a strided tenth of the epoch's order
            extra += ["--epochs", "1", "--world-size", "10", "--rank", "0"]
        else:
            extra += ["--epochs", str(epochs)]
        j = bench("--mix", spec, *small, *extra)
        counts = j["mix_items"]
        total = sum(counts)
        shares = [c / total for c in counts]
        worst = max(abs(s - w / sum(weights)) for s, w in zip(shares, weights))
        desc = ("%d mixed epoch%s of %d" % (epochs, "s" if epochs > 1 else "",
                                            epoch_items or 420) if epochs
                else "rank 0 of 10 in a mixed epoch of 1000000")
        res["shares"].append({"weights": weights, "items": total, "counts": counts,
                              "shares": shares, "what": desc, "worst_abs_error": worst})
        rows.append("| %s | %s | %d | %s | %.4f |" % (
            "/".join("%g" % w for w in weights), desc, total,
            " / ".join("%.4f" % s for s in shares), worst))
    print("| weights | run | items | measured shares | worst error |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))

    # Cost: CPU per item (user + system, setup included), which a busy
    # machine disturbs far less than items/s; items/s reported beside it.
    d = dirs[0]
    args = ["--crop", "32", "--output", "uint8", "--batch-size", "50", "--epochs", "20",
            "--no-checksum", "--threads", str(a.threads)]
    runs = {"plain": [], "mix": []}
    for _ in range(a.rounds):
        runs["plain"].append(bench(d, *args))
        runs["mix"].append(bench("--mix", "%s:0.5,%s:0.5" % (d, d), "--mix-epoch-items", "300",
                                 *args))
    med = {k: {"cpu_us_per_item": statistics.median(1e6 * r["cpu_seconds"] / r["items"]
                                                    for r in v),
               "items_per_second": statistics.median(r["items_per_second"] for r in v)}
           for k, v in runs.items()}
    ratio = med["mix"]["cpu_us_per_item"] / med["plain"]["cpu_us_per_item"]
    res["cost"] = {"rounds": a.rounds, "threads": a.threads, "median": med,
                   "cpu_ratio": ratio,
                   "runs": {k: [{"cpu_seconds": r["cpu_seconds"], "items": r["items"],
                                 "items_per_second": r["items_per_second"]} for r in v]
                            for k, v in runs.items()}}
    print()
    print("| %d threads, %d rounds, medians | CPU per item | items/s |" % (a.threads, a.rounds))
    print("|---|---|---|")
    print("| one source (300 images, 20 epochs) | %.1f us | %.0f |"
          % (med["plain"]["cpu_us_per_item"], med["plain"]["items_per_second"]))
    print("| the same images as a mix of two (0.5/0.5) | %.1f us (%.3fx) | %.0f |"
          % (med["mix"]["cpu_us_per_item"], ratio, med["mix"]["items_per_second"]))
    out = os.path.join(os.path.dirname(os.path.abspath(CLI)), "bench")  # the CLI's build
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "mixing.json"), "w") as f:
        json.dump(res, f, indent=1)
    subprocess.run(["rm", "-rf", tmp], check=False)


if __name__ == "__main__":
    main()
