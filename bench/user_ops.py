#!/usr/bin/python3
"""user_ops.py — transform= (a Python callable on nostall's worker threads)
against torch.utils.data.DataLoader worker processes running the same
callable, side by side in one run.

Systems, each over the same files, the same callable, the same batch size:

  nostall      nostall.Loader(DATA, transform=fn, threads=T): nostall reads
               and decodes every image (its own JPEG path, whole image), and
               its T worker threads call fn per item through ctypes, which
               takes the GIL for each call; torch kernels release it.
  DataLoader   torch.utils.data.DataLoader(dataset, num_workers=W,
               persistent_workers=True, shuffle=True): each worker process
               reads the file, decodes it with torchvision.io.decode_jpeg
               (libjpeg-turbo), makes the same HWC uint8 tensor and calls the
               same fn, then the batch is collated and handed over through
               shared memory, as torchvision training scripts do.

The callables (fn(x, random): x is the whole image, HWC uint8; random a
numpy Generator, per item):

  torch   RandomResizedCrop 224 (the window drawn from `random`, antialiased
          bilinear resize) + RandAugment (torchvision defaults) + ColorJitter
          (0.4, 0.4, 0.4) on the uint8 CHW tensor: torchvision's tensor ops,
          which spend most of their time in torch kernels (GIL released).
  python  a pure-Python callable: a 64 x 64 subsample of the image whose
          per-channel histogram equalization is a Python loop over the
          pixels (about 4 ms of bytecode per item, comparable to the decode):
          the GIL serializes that part of nostall's threads; processes do
          not share one.
  python-heavy  the same on a 128 x 128 subsample (about 15 ms of bytecode
          per item, far more than the decode): nearly all of the work holds
          the GIL.

torch.set_num_threads(1) in this process (DataLoader's workers set it too),
so each of nostall's threads runs its kernels on one core.

One untimed warm-up epoch per system (imports, page cache, worker start),
then --rounds rounds, each running every (system, callable) once,
interleaved; each run is one epoch over the dataset. Reported: the median
over rounds of images/s (wall clock) and images per CPU-second (user +
system time of this process and, for DataLoader, its worker processes, read
from /proc), and the ratios of the medians. --out writes every sample as
JSON, --markdown the table.

  /usr/bin/python3 bench/user_ops.py [--data DIR] [--images 512] [--rounds 5]
"""
import argparse
import datetime
import io  # noqa: F401  (for users adapting the callables)
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torchvision.transforms as T
import torchvision.transforms.functional as F
from torchvision.io import decode_jpeg

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
import nostall  # noqa: E402

CROP = 224
RAND_AUGMENT = T.RandAugment()
COLOR_JITTER = T.ColorJitter(0.4, 0.4, 0.4)


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def rrc_window(h, w, random, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """RandomResizedCrop's window, drawn from `random` (torchvision's rule)."""
    area = h * w
    for _ in range(10):
        target = area * random.uniform(*scale)
        r = np.exp(random.uniform(np.log(ratio[0]), np.log(ratio[1])))
        cw, ch = int(round(np.sqrt(target * r))), int(round(np.sqrt(target / r)))
        if 0 < cw <= w and 0 < ch <= h:
            return int(random.integers(0, h - ch + 1)), int(random.integers(0, w - cw + 1)), ch, cw
    side = min(h, w)
    return (h - side) // 2, (w - side) // 2, side, side


def torch_aug(x, random):
    """RRC 224 + RandAugment + ColorJitter, uint8 CHW out."""
    img = x.permute(2, 0, 1)
    top, left, ch, cw = rrc_window(img.shape[1], img.shape[2], random)
    img = F.resized_crop(img, top, left, ch, cw, [CROP, CROP], antialias=True)
    return COLOR_JITTER(RAND_AUGMENT(img)).contiguous()


def equalize(x, random, side):
    """Per-channel histogram equalization of a side x side subsample, in
    Python (a loop over the pixels: bytecode, the GIL held throughout)."""
    h, w = x.shape[0], x.shape[1]
    small = np.asarray(x[:: max(1, h // side), :: max(1, w // side)][:side, :side]).tolist()
    out = np.zeros((side, side, 3), np.uint8)
    n = len(small) * len(small[0])
    for c in range(3):
        hist = [0] * 256
        for row in small:
            for px in row:
                hist[px[c]] += 1
        cdf, acc = [0] * 256, 0
        for v in range(256):
            acc += hist[v]
            cdf[v] = (acc * 255) // n
        gain = 0.9 + 0.2 * float(random.random())
        for y, row in enumerate(small):
            for xx, px in enumerate(row):
                out[y, xx, c] = min(255, int(cdf[px[c]] * gain))
    return torch.from_numpy(out)


def python_aug(x, random):
    return equalize(x, random, 64)


def python_heavy(x, random):
    return equalize(x, random, 128)


CALLABLES = {"torch": torch_aug, "python": python_aug, "python-heavy": python_heavy}


class Files(torch.utils.data.Dataset):
    """The DataLoader side: read, decode (libjpeg-turbo), the same callable."""

    def __init__(self, paths, labels, fn, seed):
        self.paths, self.labels, self.fn, self.seed, self.epoch = paths, labels, fn, seed, 0

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        with open(self.paths[i], "rb") as f:
            data = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
        x = decode_jpeg(data).permute(1, 2, 0)  # HWC view, as nostall hands it
        random = np.random.Generator(np.random.Philox(key=[self.seed, i]))
        return self.fn(x, random), self.labels[i]


def proc_cpu(pids):
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            with open("/proc/%d/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except OSError:
            pass
    return total


def self_cpu():
    t = os.times()
    return t.user + t.system


class NostallRun:
    """A fresh Loader per epoch, its creation timed: a Loader kept between
    runs would prepare the next epoch's batches while the other system is
    timed (DataLoader's persistent workers wait for the next iter())."""

    def __init__(self, data, fn, args):
        self.data, self.fn, self.args, self.pids = data, fn, args, []

    def epoch(self):
        n = 0
        with nostall.Loader(self.data, transform=self.fn, threads=self.args.threads,
                            batch_size=self.args.batch_size, epochs=1, seed=1) as ld:
            for x, y in ld:
                n += len(y)
        return n

    def close(self):
        pass


class TorchRun:
    def __init__(self, data, fn, args):
        probe = nostall.Loader(data, batch_size=1, threads=1)
        items = probe.samples
        probe.close()
        ds = Files([p for p, _ in items], [lab for _, lab in items], fn, 1)
        self.dl = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, shuffle=True,
                                              num_workers=args.workers, persistent_workers=True,
                                              prefetch_factor=2)
        self.pids = []

    def epoch(self):
        n = 0
        for x, y in self.dl:
            n += len(y)
        self.pids = [w.pid for w in getattr(self.dl._iterator, "_workers", [])]
        return n

    def close(self):
        it = getattr(self.dl, "_iterator", None)
        if it is not None:
            it._shutdown_workers()


SYSTEMS = {"nostall": NostallRun, "DataLoader": TorchRun}


def machine():
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "torch": torch.__version__, "numpy": np.__version__,
            "nostall": nostall.__version__, "kernel": platform.release()}


def measure(run):
    """(images, wall seconds, CPU seconds of this process and the run's
    worker processes) of one epoch."""
    t0, c0, w0 = time.perf_counter(), self_cpu(), proc_cpu(run.pids)
    n = run.epoch()
    return n, time.perf_counter() - t0, self_cpu() - c0 + proc_cpu(run.pids) - w0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", help="an ImageFolder of JPEGs (default: nostall gen, 500x375)")
    ap.add_argument("--images", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2, help="nostall worker threads")
    ap.add_argument("--workers", type=int, default=2, help="DataLoader worker processes")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--callables", default="torch,python,python-heavy")
    ap.add_argument("--out")
    ap.add_argument("--markdown")
    args = ap.parse_args()
    torch.set_num_threads(1)
    tmp = None
    data = args.data
    if not data:
        tmp = tempfile.TemporaryDirectory(prefix="nostall-user-ops-")
        data = os.path.join(tmp.name, "data")
        cli = os.environ.get("NOSTALL_CLI") or os.path.join(ROOT, "build", "nostall")
        subprocess.run([cli, "gen", data, "--images", str(args.images), "--classes", "8",
                        "--quiet"], check=True)
    names = args.callables.split(",")
    runs = {}
    for cname in names:
        for sname, cls in SYSTEMS.items():
            run = cls(data, CALLABLES[cname], args)
            n = run.epoch()  # warm-up (untimed): imports, page cache, worker start
            log("warm-up %s / %s: %d images" % (sname, cname, n))
            runs[(sname, cname)] = run
    samples = {key: [] for key in runs}
    for r in range(args.rounds):
        for key, run in runs.items():
            n, wall, cpu = measure(run)
            samples[key].append({"images": n, "seconds": wall, "cpu_seconds": cpu})
            log("round %d %s / %s: %.1f images/s, %.1f per CPU-s" % (
                r, key[0], key[1], n / wall, n / cpu if cpu else 0))
    for run in runs.values():
        run.close()
    result = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
              "machine": machine(), "data": data if args.data else "nostall gen %d x 500x375"
              % args.images, "threads": args.threads, "workers": args.workers,
              "batch_size": args.batch_size, "rounds": args.rounds, "rows": []}
    for cname in names:
        row = {"callable": cname}
        for sname in SYSTEMS:
            s = samples[(sname, cname)]
            row[sname] = {"images_per_s": statistics.median(x["images"] / x["seconds"] for x in s),
                          "images_per_cpu_s": statistics.median(
                              x["images"] / x["cpu_seconds"] for x in s if x["cpu_seconds"] > 0),
                          "samples": s}
        row["ratio_wall"] = row["nostall"]["images_per_s"] / row["DataLoader"]["images_per_s"]
        row["ratio_cpu"] = row["nostall"]["images_per_cpu_s"] / row["DataLoader"]["images_per_cpu_s"]
        result["rows"].append(row)
    m = result["machine"]
    lines = ["Machine: %s, %d cores; torch %s, Python %s; nostall threads=%d, DataLoader "
             "num_workers=%d, batch %d, %s, median of %d interleaved rounds."
             % (m["cpu"], m["cores"], m["torch"], m["python"], args.threads, args.workers,
                args.batch_size, result["data"], args.rounds), "",
             "| callable | nostall images/s | DataLoader images/s | ratio | nostall images/CPU-s "
             "| DataLoader images/CPU-s | ratio |", "|---|---:|---:|---:|---:|---:|---:|"]
    for row in result["rows"]:
        lines.append("| %s | %.1f | %.1f | %.2fx | %.1f | %.1f | %.2fx |" % (
            row["callable"], row["nostall"]["images_per_s"], row["DataLoader"]["images_per_s"],
            row["ratio_wall"], row["nostall"]["images_per_cpu_s"],
            row["DataLoader"]["images_per_cpu_s"], row["ratio_cpu"]))
    print("\n".join(lines))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("\n".join(lines) + "\n")
    if tmp:
        tmp.cleanup()


if __name__ == "__main__":
    main()
