#!/usr/bin/env python3
"""Per-batch cost of the Python binding, isolated from the loader's own work.

    /usr/bin/python3 bench/binding_overhead.py [--rounds 30]

Method: tiny batches (batch_size 1, crop 8) from a generated dataset of 48
images, a ring of 64 batches (batches_ahead=64) and epochs=1. Each round
restarts epoch 0 (set_state; set_epoch + iter for the binding), waits until the workers have prepared the whole
epoch and gone idle, then times the consumption of its 48 batches: no round
waits for a worker and no worker competes for the CPU or the loader's lock.
Two consumers alternate rounds on the same loader:

  raw      nostall_loader_next_timed + nostall_loader_release through ctypes
           (the floor: two foreign calls, as in the C bench loop)
  binding  next() on the Loader's iterator: the same two calls plus the
           bookkeeping and the numpy/torch views of images and labels

Printed: the median microseconds per batch of each and their difference, the
binding's overhead (required: < 50 us), for torch tensors and numpy arrays.
"""

import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
import nostall  # noqa: E402
from nostall import _lib  # noqa: E402

AHEAD, PER_ROUND = 64, 48


def wait_full(ld, timeout=10.0):
    """Until the whole epoch (PER_ROUND batches) waits in the ring."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        s = ld.stats()
        if s["augment_items"] - s["items_delivered"] >= PER_ROUND:
            time.sleep(0.002)  # let the workers reach their idle wait
            return
        time.sleep(0.002)
    raise RuntimeError("the ring did not fill in %.0fs" % timeout)


def raw_round(ld):
    handle, b, ok = ld._core.ld, _lib.Batch(), _lib.OK
    nxt, rel, byref = _lib.loader_next_timed, _lib.loader_release, ctypes.byref
    t0 = time.perf_counter()
    for _ in range(PER_ROUND):
        if nxt(handle, byref(b), 100) != ok:
            raise RuntimeError("raw: no batch")
        rel(handle, byref(b))
    return (time.perf_counter() - t0) / PER_ROUND


def binding_round(ld, it):
    t0 = time.perf_counter()
    for _ in range(PER_ROUND):
        next(it)
    return (time.perf_counter() - t0) / PER_ROUND


def measure(data, rounds, use_torch):
    if not use_torch:
        sys.modules["torch"] = None  # the binding falls back to numpy
    try:
        ld = nostall.Loader(data, batch_size=1, crop=8, threads=1, batches_ahead=AHEAD,
                            shuffle=False, epochs=1)
    finally:
        if not use_torch:
            del sys.modules["torch"]
    per_epoch = len(ld)
    raw, binding = [], []
    with ld:
        assert per_epoch == PER_ROUND
        for r in range(rounds):
            _lib.loader_set_state(ld._core.ld, ctypes.byref(_lib.State(epoch=0, position=0)))
            wait_full(ld)
            raw.append(raw_round(ld))
            ld.set_epoch(0)
            it = iter(ld)  # restarts epoch 0
            wait_full(ld)
            binding.append(binding_round(ld, it))
            it.close()
    return statistics.median(raw) * 1e6, statistics.median(binding) * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--cli", default=os.environ.get("NOSTALL_CLI",
                                                    os.path.join(ROOT, "build", "nostall")))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([args.cli, "gen", tmp, "--images", str(PER_ROUND), "--classes", "4", "--width",
                        "16", "--height", "16", "--quiet", "--force"], check=True,
                       stdout=subprocess.DEVNULL)
        try:
            import torch  # noqa: F401
            kinds = [("torch", True), ("numpy", False)]
        except ImportError:
            kinds = [("numpy", False)]
        worst = 0.0
        for name, use_torch in kinds:
            raw, binding = measure(tmp, args.rounds, use_torch)
            worst = max(worst, binding - raw)
            print("%-5s  raw C next+release %6.2f us/batch   binding %6.2f us/batch   "
                  "overhead %6.2f us/batch" % (name, raw, binding, binding - raw))
    print("binding overhead (median, worst of the above): %.2f us per batch -> %s (< 50 us)"
          % (worst, "PASS" if worst < 50 else "FAIL"))
    return 0 if worst < 50 else 1


if __name__ == "__main__":
    sys.exit(main())
