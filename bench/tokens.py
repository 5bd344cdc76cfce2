#!/usr/bin/python3
"""task=tokens against nanoGPT's get_batch, per core, side by side.

    /usr/bin/python3 bench/tokens.py [--tokens 100000000] [--rounds 7]
                                     [--batches 300] [--data FILE] [--no-cold]

The peer is nanoGPT's train.py `get_batch` as it is today (a fresh np.memmap
of the uint16 train.bin per batch, torch.randint offsets, one
`torch.from_numpy(data[i:i+block].astype(np.int64))` per row for x and for
y, torch.stack), without the GPU copy. nostall: `nostall.Loader(train.bin,
task="tokens", context_length=block, batch_size=B, threads=1)`, iterated
for the same number of batches; its batches are dicts of int64 tensors of
the same shapes ("tokens" = x, "targets" = y).

Two configurations of nanoGPT: GPT-2 124M (batch 12, block 1024) and
shakespeare_char (batch 64, block 256). Per round and configuration each
side runs in a fresh process (so neither inherits the other's page cache
state, allocator or threads) for `--batches` batches; the rounds alternate
the order of the two sides. Measured per run: wall time and the process's
CPU time (all threads: nostall's worker and the consumer, torch's with
torch.set_num_threads(1)), from before the loader is created (nostall) or the
first get_batch (nanoGPT) to the last batch. "Per core" is batches per CPU
second. A nostall run also pays for its loader's creation and its first
batch.

Warm: the file in the page cache (read once before the rounds). Cold: before
each run the file's pages are dropped with posix_fadvise(DONTNEED) (no root
needed; a page the kernel keeps for another mapping stays), so every window
is read from storage; nostall's default io_depth (auto: reads in flight) is
kept.

Printed: per-run figures, then per configuration and state the medians and
the ratio nostall / nanoGPT (goal: >= 1 per core); --json FILE writes
everything with the machine.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PYTHON = "/usr/bin/python3"

RUN = r"""
import json, os, sys, time
side, path, B, T, n, seed, cold = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), sys.argv[7] == "1"
import numpy as np
import torch
torch.set_num_threads(1)
torch.manual_seed(seed)
if cold:
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
if side == "nanogpt":
    def get_batch():  # nanoGPT train.py, CPU part
        data = np.memmap(path, dtype=np.uint16, mode="r")
        ix = torch.randint(len(data) - T, (B,))
        x = torch.stack([torch.from_numpy((data[i:i+T]).astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy((data[i+1:i+1+T]).astype(np.int64)) for i in ix])
        return x, y
    w0, c0 = time.perf_counter(), time.process_time()
    for _ in range(n):
        x, y = get_batch()
    w1, c1 = time.perf_counter(), time.process_time()
    assert x.shape == (B, T) and x.dtype == torch.int64 and bool((x[:, 1:] == y[:, :-1]).all())
else:
    sys.path.insert(0, os.path.join(sys.argv[8], "python"))
    import nostall
    w0, c0 = time.perf_counter(), time.process_time()
    ld = nostall.Loader(path, task="tokens", context_length=T, batch_size=B, threads=1, seed=seed,
                        drop_last=True)
    it, got = iter(ld), 0
    while got < n:
        try:
            b = next(it)
        except StopIteration:
            it = iter(ld)
            continue
        got += 1
    w1, c1 = time.perf_counter(), time.process_time()
    x, y = b["tokens"], b["targets"]
    assert x.shape == (B, T) and x.dtype == torch.int64 and bool((x[:, 1:] == y[:, :-1]).all())
    ld.close()
print(json.dumps({"wall_s": w1 - w0, "cpu_s": c1 - c0, "batches": n}))
"""


def machine_info():
    info = {"kernel": platform.release(), "nproc": os.cpu_count(),
            "python": platform.python_version(), "loadavg_start": os.getloadavg()}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as f:
            info["mem_total"] = f.readline().split(":", 1)[1].strip()
    except OSError:
        pass
    try:
        import numpy
        import torch
        info["numpy"], info["torch"] = numpy.__version__, torch.__version__
    except ImportError:
        pass
    info["nostall_commit"] = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                            capture_output=True, text=True).stdout.strip()
    return info


def run(side, path, B, T, n, seed, cold):
    env = dict(os.environ)
    env.setdefault("NOSTALL_LIBRARY", os.path.join(ROOT, "build", "libnostall.so"))
    out = subprocess.run([PYTHON, "-c", RUN, side, path, str(B), str(T), str(n), str(seed),
                          "1" if cold else "0", ROOT], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit("bench/tokens.py: %s run failed:\n%s" % (side, out.stderr))
    r = json.loads(out.stdout.strip().splitlines()[-1])
    r["batches_per_s"] = n / r["wall_s"]
    r["batches_per_cpu_s"] = n / r["cpu_s"]
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=100_000_000, help="corpus size (uint16 tokens)")
    ap.add_argument("--data", help="an existing uint16 train.bin (else one is generated in /tmp)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--batches", type=int, default=300)
    ap.add_argument("--no-cold", action="store_true", help="page-cached runs only")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    tmp = None
    path = a.data
    if not path:
        import numpy as np
        tmp = tempfile.mkdtemp(prefix="nostall-tokens-")
        path = os.path.join(tmp, "train.bin")
        rng = np.random.default_rng(0)
        with open(path, "wb") as f:
            for k in range(0, a.tokens, 1 << 24):
                rng.integers(0, 50257, size=min(1 << 24, a.tokens - k), dtype=np.uint16).tofile(f)
    configs = [("gpt2", 12, 1024), ("char", 64, 256)]
    states = ["warm"] + ([] if a.no_cold else ["cold"])
    res = {}
    try:
        for rnd in range(a.rounds):
            for state in states:
                if state == "warm":  # the page cache holds the file
                    with open(path, "rb") as f:
                        while f.read(1 << 24):
                            pass
                for name, B, T in configs:
                    order = ["nanogpt", "nostall"] if rnd % 2 == 0 else ["nostall", "nanogpt"]
                    for side in order:
                        r = run(side, path, B, T, a.batches, rnd, state == "cold")
                        res.setdefault((name, state, side), []).append(r)
                        print("round %d %-5s %-4s %-8s %7.1f batches/s  %7.1f batches/CPU-s" %
                              (rnd, name, state, side, r["batches_per_s"], r["batches_per_cpu_s"]),
                              flush=True)
    finally:
        if tmp:
            os.unlink(path)
            os.rmdir(tmp)
    mi = machine_info()
    print("\nmachine: %s, %s CPUs, %s; numpy %s, torch %s; nostall %s" %
          (mi.get("cpu"), mi["nproc"], mi.get("mem_total"), mi.get("numpy"), mi.get("torch"),
           mi["nostall_commit"]))
    print("medians of %d rounds of %d batches:" % (a.rounds, a.batches))
    print("%-28s %16s %16s %7s %18s %18s %7s" % ("config", "nanoGPT b/s", "nostall b/s", "ratio",
                                                "nanoGPT b/CPU-s", "nostall b/CPU-s", "ratio"))
    summary = []
    for name, B, T in configs:
        for state in states:
            m = {side: {k: statistics.median(r[k] for r in res[(name, state, side)])
                        for k in ("batches_per_s", "batches_per_cpu_s")}
                 for side in ("nanogpt", "nostall")}
            row = {"config": name, "batch": B, "block": T, "state": state,
                   "nanogpt": m["nanogpt"], "nostall": m["nostall"],
                   "ratio_wall": m["nostall"]["batches_per_s"] / m["nanogpt"]["batches_per_s"],
                   "ratio_per_core": m["nostall"]["batches_per_cpu_s"] / m["nanogpt"]["batches_per_cpu_s"]}
            summary.append(row)
            print("%-28s %16.1f %16.1f %6.2fx %18.1f %18.1f %6.2fx" % (
                "%s B=%d T=%d %s" % (name, B, T, state), m["nanogpt"]["batches_per_s"],
                m["nostall"]["batches_per_s"], row["ratio_wall"], m["nanogpt"]["batches_per_cpu_s"],
                m["nostall"]["batches_per_cpu_s"], row["ratio_per_core"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"machine": mi, "args": vars(a), "summary": summary,
                       "runs": {"/".join(k): v for k, v in res.items()}}, f, indent=1)


if __name__ == "__main__":
    main()
