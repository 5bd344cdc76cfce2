#!/usr/bin/python3
"""The safe Python face against the binding it replaced, side by side.

    /usr/bin/python3 bench/python_face.py [--baseline 46426b7] [--rounds 5]

Issue 20 made yielded tensors safe (a ring slot is released when the last
tensor viewing it dies, instead of when the next batch is requested) and gave
iteration DataLoader semantics. This measures what that costs, against the
binding and library of `--baseline` (built once in a git worktree under
/tmp), in one run, rounds alternating between the two, each round a fresh
process:

  pipeline   images/s of `for x, y in loader: pass` over 3 epochs after one
             warm-up epoch: crop 224, batch 64, float output, 2 threads,
             the generated dataset in the page cache (the checksum is never
             computed). What a training loop sees when nostall is the limit.
  binding    images/s with batch_size 1, crop 8, 1 thread: the per-batch cost
             of the binding itself dominates (two foreign calls, the views,
             and now the lease).
  rss        the new binding's RSS growth over 30 epochs after 3 warm-up
             epochs (MB; should stay flat).

Printed: per-round figures, the medians and the ratio new / baseline
(required: >= 0.95 for `pipeline`).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PYTHON = "/usr/bin/python3"

CONSUMER = r"""
import json, os, sys, time
import nostall
data, kind = sys.argv[1], sys.argv[2]
if kind == "pipeline":
    opts, epochs = dict(batch_size=64, crop=224, threads=2, output="float", seed=1), 3
else:
    opts, epochs = dict(batch_size=1, crop=8, threads=1, output="uint8", seed=1), 3
ld = nostall.Loader(data, **opts)
for x, y in ld:        # warm-up epoch (page cache, scratch buffers)
    pass
n = 0
t0 = time.perf_counter()
for e in range(epochs):
    for x, y in ld:
        n += len(y)
dt = time.perf_counter() - t0
out = {"items_per_s": n / dt}
if kind == "rss" or os.environ.get("NOSTALL_BENCH_RSS"):
    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    for e in range(2):
        for x, y in ld:
            pass
    before = rss()
    for e in range(30):
        for x, y in ld:
            pass
    out["rss_growth_mb"] = (rss() - before) / 1e6
ld.close()
print(json.dumps(out))
"""


def build_baseline(commit):
    tree = "/tmp/nostall-base-%s" % commit
    lib = os.path.join(tree, "build", "libnostall.so")
    if not os.path.exists(lib):
        if not os.path.exists(tree):
            subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", tree, commit],
                           check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["cmake", "-S", tree, "-B", os.path.join(tree, "build"),
                        "-DCMAKE_BUILD_TYPE=RelWithDebInfo"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["cmake", "--build", os.path.join(tree, "build"), "-j2", "--target",
                        "nostall"], check=True, stdout=subprocess.DEVNULL)
    return tree


def run(side_root, lib, data, kind, rss=False):
    env = dict(os.environ, PYTHONPATH=os.path.join(side_root, "python"), NOSTALL_LIBRARY=lib)
    if rss:
        env["NOSTALL_BENCH_RSS"] = "1"
    p = subprocess.run([PYTHON, "-c", CONSUMER, data, kind], env=env, capture_output=True,
                       text=True, timeout=1200)
    if p.returncode != 0:
        raise RuntimeError("%s %s failed:\n%s" % (side_root, kind, p.stderr[-3000:]))
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--baseline", default="46426b7")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--images", type=int, default=512)
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "nostall"))
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    base = build_baseline(args.baseline)
    sides = [("baseline " + args.baseline, base, os.path.join(base, "build", "libnostall.so")),
             ("new", ROOT, os.path.join(ROOT, "build", "libnostall.so"))]
    results = {"pipeline": {s[0]: [] for s in sides}, "binding": {s[0]: [] for s in sides}}
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([args.cli, "gen", tmp, "--images", str(args.images), "--classes", "8",
                        "--quiet", "--force"], check=True, stdout=subprocess.DEVNULL)
        for r in range(args.rounds):
            for kind in ("pipeline", "binding"):
                order = sides if r % 2 == 0 else sides[::-1]
                for name, root, lib in order:
                    v = run(root, lib, tmp, kind)["items_per_s"]
                    results[kind][name].append(v)
                    print("round %d  %-8s  %-18s %10.1f images/s" % (r, kind, name, v),
                          flush=True)
        rss = run(ROOT, sides[1][2], tmp, "binding", rss=True)["rss_growth_mb"]
    print()
    summary = {}
    for kind, per in results.items():
        med = {name: statistics.median(v) for name, v in per.items()}
        ratio = med["new"] / med[sides[0][0]]
        summary[kind] = {"median": med, "ratio": ratio}
        print("%-8s  baseline %10.1f   new %10.1f images/s   new/baseline %.3f" %
              (kind, med[sides[0][0]], med["new"], ratio))
    print("rss growth over 30 epochs (new): %.2f MB" % rss)
    summary["rss_growth_mb"] = rss
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    ok = summary["pipeline"]["ratio"] >= 0.95
    print("pipeline ratio >= 0.95: %s" % ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
