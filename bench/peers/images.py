"""images.py — nostall's image pipeline side by side with the 2026 field.

Run by the peers' venv python (bench/peers/venv.sh; `make bench-peers` runs
bench/peers/images.sh, which builds, makes the data and calls this). The job,
the same for every system: the same ImageFolder of JPEGs, shuffled, train
mode: RandomResizedCrop 224 (scale 0.08-1, ratio 3/4-4/3) + horizontal flip
(p = 0.5), batches of 64, as float32 NCHW normalized by the ImageNet mean/std
and as uint8 NHWC; on one core, and on two. Systems (each in the
configuration docs/performance.md explains as its best):

  nostall   `nostall bench DATA --threads 1|2` (bench/peers.py's NostallRun)
  nostallpy nostall's Python binding in this venv (torch tensors), threads=1|2
  dali      NVIDIA DALI CPU pipeline (device_id=None): readers.file +
            decoders.image_random_crop (ROI decode) + resize + crop_mirror_
            normalize; num_threads=1|2
  spdl      SPDL pipeline: per image FFmpeg demux + decode with a filter graph
            (crop, bilinear scale to 224, RGB, hflip), aggregate(64), batch
            conversion; num_threads=1|2, decode concurrency 1|2
  tv2       torch 2.x + torchvision: decode_jpeg (libjpeg-turbo) on the file's
            bytes + transforms v2 RandomResizedCrop/RandomHorizontalFlip on
            uint8 tensors; batch collate (+ normalize on the batch);
            DataLoader num_workers=0 (1 core), 1 (1 core of work), 2
  pil       the classic path: ImageFolder (PIL) + transforms v1 + ToTensor +
            Normalize (bench/peers.py's TorchRun), num_workers=0, 1, 2
  grain     Grain MapDataset: the tv2 per-image ops in random_map, batch;
            read threads 1|2 in process (or worker processes, --grain-mp)
  ffcv      FFCV (PyPI 1.0.2, if installed): bench/peers.py's FfcvRun,
            num_workers=1|2

Every Python peer runs in its own long-lived server process (one per peer
library, `images.py --serve PEER`), so that one library's threads never run
inside another's measurement; a measurement is one request to it. CPU time
is that of the server's process tree: user + system time of the process, its
live descendants (DataLoader/Grain workers) and the ones they reaped, read
from /proc before and after. nostall's is that of the CLI process, start-up
and indexing included.

The procedure is bench/peers.py's (measure(): one untimed warm-up of every
measurement, then --rounds interleaved rounds, medians of images/s and images
per CPU-second), and so is the reporting machinery.

What it touches: reads DATA; writes only --out, --markdown and, when FFCV
runs and the file is missing, FFCV's .beton (--beton; default DATA.q95.beton
beside DATA — images.sh puts it in the dataset cache). The peers' venv and
the nostall build are only used.
"""
import argparse
import importlib.util
import json
import math
import os
import random
import resource
import subprocess
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("nostall_bench_peers",
                                               os.path.join(HERE, "..", "peers.py"))
P = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(P)
MEAN, STD, CROP = P.MEAN, P.STD, P.CROP
SCALE = (0.08, 1.0)
RATIO = (3.0 / 4.0, 4.0 / 3.0)
log = P.log


# --------------------------------------------------------------------------
# Shared pieces
# --------------------------------------------------------------------------
def list_images(data):
    """(path, label) of every JPEG, ImageFolder's order and labels."""
    classes = sorted(d for d in os.listdir(data) if os.path.isdir(os.path.join(data, d)))
    items = []
    for label, c in enumerate(classes):
        for name in sorted(os.listdir(os.path.join(data, c))):
            if name.lower().endswith((".jpg", ".jpeg")):
                items.append((os.path.join(data, c, name), label))
    return items


def tree_cpu():
    """CPU seconds (user + system) of this process, of every live descendant,
    and of the children each of them has reaped. A descendant that exits and
    is reaped between two readings moves from the live sum into its parent's
    reaped sum, whole, so the difference of two readings is the tree's."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    rc = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = ru.ru_utime + ru.ru_stime + rc.ru_utime + rc.ru_stime
    tck = float(os.sysconf("SC_CLK_TCK"))
    kids = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % pid) as f:
                s = f.read()
        except OSError:
            continue
        rest = s[s.rindex(")") + 2:].split()
        # rest[1] ppid, rest[11..14] utime stime cutime cstime (clock ticks)
        kids.setdefault(int(rest[1]), []).append(
            (int(pid), sum(int(x) for x in rest[11:15]) / tck))
    todo = [os.getpid()]
    while todo:
        for pid, cpu in kids.get(todo.pop(), ()):
            total += cpu
            todo.append(pid)
    return total


def rrc_params(w, h, rng):
    """RandomResizedCrop's window (torchvision's get_params): (top, left, ch, cw)."""
    area = w * h
    log_ratio = (math.log(RATIO[0]), math.log(RATIO[1]))
    for _ in range(10):
        target = area * rng.uniform(*SCALE)
        ar = math.exp(rng.uniform(*log_ratio))
        cw = int(round(math.sqrt(target * ar)))
        ch = int(round(math.sqrt(target / ar)))
        if 0 < cw <= w and 0 < ch <= h:
            return rng.randint(0, h - ch), rng.randint(0, w - cw), ch, cw
    in_ratio = w / h
    if in_ratio < RATIO[0]:
        cw, ch = w, int(round(w / RATIO[0]))
    elif in_ratio > RATIO[1]:
        ch, cw = h, int(round(h * RATIO[1]))
    else:
        cw, ch = w, h
    return (h - ch) // 2, (w - cw) // 2, ch, cw


def epoch_batches(n, bs):
    return (n + bs - 1) // bs


class Torch:
    """torch, imported once per server, with the batch normalization shared
    by the peers that build their batches in torch."""

    def __init__(self, threads):
        import torch
        torch.set_num_threads(threads)
        self.torch = torch
        self.mean = torch.tensor([m * 255 for m in MEAN]).view(1, 3, 1, 1)
        self.inv_std = torch.tensor([1.0 / (s * 255) for s in STD]).view(1, 3, 1, 1)

    def normalize_nchw(self, x):
        """uint8 NCHW -> float32 NCHW, (x - mean) / std, in place after the cast."""
        x = x.to(self.torch.float32)
        return x.sub_(self.mean).mul_(self.inv_std)

    def normalize_nhwc(self, x):
        """uint8 NHWC -> float32 NCHW (contiguous), (x - mean) / std; the
        transpose on the uint8 batch (a quarter of the bytes: twice as fast
        as casting first, measured)."""
        return self.normalize_nchw(x.permute(0, 3, 1, 2).contiguous())


# --------------------------------------------------------------------------
# Peers (constructed in their server process)
# --------------------------------------------------------------------------
class DaliRun:
    def __init__(self, data, output, threads, batch_size, epochs, n):
        import numpy as np
        from nvidia.dali import fn, pipeline_def, types
        self.np = np

        @pipeline_def(batch_size=batch_size, num_threads=threads, device_id=None, seed=1234,
                      prefetch_queue_depth=2)
        def pipe():
            jpegs, labels = fn.readers.file(file_root=data, shuffle_after_epoch=True,
                                            name="Reader")
            images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                                   random_area=list(SCALE),
                                                   random_aspect_ratio=list(RATIO),
                                                   num_attempts=10)
            images = fn.resize(images, resize_x=CROP, resize_y=CROP,
                               interp_type=types.INTERP_LINEAR, antialias=True)
            mirror = fn.random.coin_flip(probability=0.5)
            if output == "float":
                images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW",
                                                  mean=[m * 255 for m in MEAN],
                                                  std=[s * 255 for s in STD], mirror=mirror)
            else:  # fn.flip: 3% cheaper than crop_mirror_normalize to uint8 HWC
                images = fn.flip(images, horizontal=mirror)
            return images, labels

        self.pipe = pipe()
        self.pipe.build()
        self.batches = epoch_batches(n, batch_size)
        self.loader = self
        self.epochs = epochs
        self.sample = None

    def __iter__(self):
        import torch
        for _ in range(self.batches):
            images, labels = self.pipe.run()
            # zero-copy views of DALI's dense output batch
            yield (torch.from_numpy(self.np.asarray(images.as_tensor())),
                   torch.from_numpy(self.np.asarray(labels.as_tensor())))


class SpdlRun:
    def __init__(self, data, output, threads, batch_size, epochs, n):
        import spdl.io
        self.spdl = spdl.io
        self.items = list_images(data)
        self.output = output
        self.threads = threads
        self.batch_size = batch_size
        self.t = Torch(1)
        self.rng = random.Random(1234)
        self.loader = self
        self.epochs = epochs
        self.sample = None

    def _load(self, item):
        path, label = item
        with open(path, "rb") as f:
            data = f.read()
        packets = self.spdl.demux_image(data)
        codec = packets.codec
        top, left, ch, cw = rrc_params(codec.width, codec.height, self.rng)
        # crop and scale in YUV (fewer pixels than RGB), one swscale pass to
        # RGB at 224x224, then the flip on the small image
        desc = "crop=%d:%d:%d:%d,scale=%d:%d:flags=bilinear,format=rgb24%s" % (
            cw, ch, left, top, CROP, CROP, ",hflip" if self.rng.random() < 0.5 else "")
        return self.spdl.decode_packets(packets, filter_desc=desc), label

    def _batch(self, items):
        frames = [f for f, _ in items]
        x = self.spdl.to_torch(self.spdl.convert_frames(frames))  # uint8 NHWC
        y = self.t.torch.tensor([lab for _, lab in items])
        if self.output == "float":
            x = self.t.normalize_nhwc(x)
        return x, y

    def __iter__(self):
        from spdl.pipeline import PipelineBuilder
        order = list(self.items)
        self.rng.shuffle(order)
        pipe = (PipelineBuilder().add_source(order)
                .pipe(self._load, concurrency=self.threads)
                .aggregate(self.batch_size)
                .pipe(self._batch)
                .add_sink(3)
                .build(num_threads=self.threads))
        with pipe.auto_stop():
            for b in pipe.get_iterator():
                yield b


class Tv2Dataset:
    """decode_jpeg (libjpeg-turbo) on the file's bytes, then transforms v2's
    RandomResizedCrop + RandomHorizontalFlip as their functional ops: the
    window drawn as v2 draws it (rrc_params), cut as a view, copied to
    channels-last memory (only the window's pixels), resized with
    antialias=True (torch's uint8 AVX2 kernel takes that layout: 1.8x faster
    than v2.Compose on the decoded CHW tensor, measured), flipped."""

    def __init__(self, items):
        import torch
        import torchvision.transforms.v2.functional as F
        from torchvision.io import ImageReadMode, decode_jpeg, read_file
        self.items = items
        self.read_file, self.decode_jpeg, self.mode = read_file, decode_jpeg, ImageReadMode.RGB
        self.F, self.cl = F, torch.channels_last

    def load(self, i, rng):
        path, label = self.items[i]
        img = self.decode_jpeg(self.read_file(path), mode=self.mode)
        top, left, ch, cw = rrc_params(img.shape[2], img.shape[1], rng)
        win = img[:, top:top + ch, left:left + cw].unsqueeze(0).contiguous(memory_format=self.cl)
        img = self.F.resize(win, [CROP, CROP], antialias=True)[0]
        if rng.random() < 0.5:
            img = self.F.horizontal_flip(img)
        return img, label

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.load(i, random)  # DataLoader seeds `random` in every worker


class Collate:
    """List of (uint8 CHW, label) -> (float32 NCHW normalized | uint8 NHWC, labels)."""

    def __init__(self, output):
        self.output = output
        self.t = None

    def __call__(self, batch):
        if self.t is None:
            self.t = Torch(1)
        torch = self.t.torch
        y = torch.tensor([lab for _, lab in batch])
        if self.output == "float":
            return self.t.normalize_nchw(torch.stack([x for x, _ in batch])), y
        return torch.stack([x.permute(1, 2, 0) for x, _ in batch]), y


class Tv2Run:
    def __init__(self, data, output, workers, batch_size, epochs, n):
        import torch
        self.loader = torch.utils.data.DataLoader(
            Tv2Dataset(list_images(data)), batch_size=batch_size, shuffle=True,
            num_workers=workers, collate_fn=Collate(output), persistent_workers=workers > 0,
            prefetch_factor=2 if workers else None)
        self.epochs = epochs
        self.sample = None


class GrainRun:
    def __init__(self, data, output, threads, batch_size, epochs, n, mp=False):
        import grain
        self.grain = grain
        self.items = list_images(data)
        self.ds = Tv2Dataset(self.items)
        self.collate = Collate(output)
        self.threads = threads
        self.mp = mp
        self.batch_size = batch_size
        self.epoch = 0
        self.loader = self
        self.epochs = epochs
        self.sample = None

    def _element(self, i, rng):
        return self.ds.load(i, random.Random(int(rng.integers(1 << 62))))

    def __iter__(self):
        grain = self.grain
        self.epoch += 1
        ds = (grain.MapDataset.range(len(self.items)).shuffle(seed=self.epoch)
              .random_map(self._element, seed=self.epoch)
              .batch(self.batch_size, batch_fn=self.collate))
        if self.mp:
            it = ds.to_iter_dataset().mp_prefetch(
                grain.MultiprocessingOptions(num_workers=self.threads))
        else:
            it = ds.to_iter_dataset(grain.ReadOptions(num_threads=self.threads,
                                                      prefetch_buffer_size=2 * self.threads))
        return iter(it)


class NostallPyRun:
    """nostall through its Python binding (python/nostall, ctypes over
    build/libnostall.so, $NOSTALL_LIBRARY to override) in this venv's
    torch: batches as zero-copy torch tensors. One Loader per epoch
    (epochs=1, a new seed each), built inside the timed epoch and closed
    after it, so that its threads prepare nothing while another system is
    measured; the index build is inside the figure, as in the CLI's."""

    def __init__(self, data, output, threads, batch_size, epochs, n):
        sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
        import nostall
        self.nostall = nostall
        self.kw = dict(batch_size=batch_size, crop=CROP, threads=threads, mode="train",
                       output=output, epochs=1)
        self.data = data
        self.seed = 0
        self.loader = self
        self.epochs = epochs
        self.sample = None

    def __iter__(self):
        self.seed += 1
        with self.nostall.Loader(self.data, seed=self.seed, **self.kw) as ld:
            for images, labels in ld:
                yield images, labels


def make_run(peer, key, a, n):
    """Build the measurement `key` (peer_variant_output) in this server."""
    _, variant, output = key.split("_")
    bs, ep = a.batch_size, a.epochs
    cores = int(variant[0]) if variant[0].isdigit() else None
    if peer == "nostallpy":
        Torch(1)
        return NostallPyRun(a.data, output, cores, bs, ep, n)
    if peer == "dali":
        return DaliRun(a.data, output, cores, bs, ep, n)
    if peer == "spdl":
        return SpdlRun(a.data, output, cores, bs, ep, n)
    if peer == "grain":
        return GrainRun(a.data, output, cores, bs, ep, n, mp=a.grain_mp)
    if peer in ("tv2", "pil"):
        workers = int(variant[2:])  # nw0, nw1, nw2
        Torch(1)  # the main process computes on one thread (workers: 1 by torch)
        if peer == "tv2":
            return Tv2Run(a.data, output, workers, bs, ep, n)
        return P.TorchRun(a.data, output, bs, ep, workers)
    if peer == "ffcv":
        Torch(1)
        return P.FfcvRun(a.beton, output, bs, ep, workers=cores)
    raise ValueError("unknown peer %s" % peer)


def serve(a):
    """Answer measurement requests (one key a line on stdin) with one JSON
    line each, on a private copy of stdout (libraries may print on fd 1)."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    n = len(list_images(a.data))
    runs = {}
    for line in sys.stdin:
        key = line.strip()
        if not key:
            continue
        try:
            if key not in runs:
                runs[key] = make_run(a.serve, key, a, n)
            run = runs[key]
            r = P._time_epochs(run, tree_cpu)
            r["sample"] = run.sample
            out.write(json.dumps(r) + "\n")
        except Exception as e:  # noqa: BLE001 - reported to the parent, which leaves it out
            traceback.print_exc()
            out.write(json.dumps({"error": "%s: %s" % (type(e).__name__, str(e)[:300])}) + "\n")
    return 0


# --------------------------------------------------------------------------
# Parent side
# --------------------------------------------------------------------------
class Server:
    def __init__(self, peer, a):
        cmd = [sys.executable, os.path.abspath(__file__), "--serve", peer, "--data", a.data,
               "--batch-size", str(a.batch_size), "--epochs", str(a.epochs)]
        if a.beton:
            cmd += ["--beton", a.beton]
        if a.grain_mp:
            cmd += ["--grain-mp"]
        self.peer = peer
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, bufsize=1)

    def request(self, key):
        self.proc.stdin.write(key + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("%s server exited (%s)" % (self.peer, self.proc.poll()))
        r = json.loads(line)
        if "error" in r:
            raise RuntimeError(r["error"])
        return r

    def close(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


class ServedRun:
    def __init__(self, server, key):
        self.server, self.key, self.sample = server, key, None

    def __call__(self):
        r = self.server.request(self.key)
        self.sample = r.pop("sample", None)
        return r


LABELS = {
    "nostall_1c": "nostall, 1 thread",
    "nostall_2c": "nostall, 2 threads",
    "nostallpy_1c": "nostall, Python binding (torch tensors), threads=1",
    "nostallpy_2c": "nostall, Python binding (torch tensors), threads=2",
    "dali_1c": "DALI CPU pipeline, num_threads=1",
    "dali_2c": "DALI CPU pipeline, num_threads=2",
    "spdl_1c": "SPDL, 1 thread (FFmpeg decode)",
    "spdl_2c": "SPDL, 2 threads (FFmpeg decode)",
    "tv2_nw0": "torch DataLoader + decode_jpeg + v2, num_workers=0",
    "tv2_nw1": "torch DataLoader + decode_jpeg + v2, num_workers=1",
    "tv2_nw2": "torch DataLoader + decode_jpeg + v2, num_workers=2",
    "pil_nw0": "torch DataLoader + ImageFolder (PIL) + v1, num_workers=0",
    "pil_nw1": "torch DataLoader + ImageFolder (PIL) + v1, num_workers=1",
    "pil_nw2": "torch DataLoader + ImageFolder (PIL) + v1, num_workers=2",
    "grain_1c": "Grain (decode_jpeg + v2 ops), 1 read thread",
    "grain_2c": "Grain (decode_jpeg + v2 ops), 2 read threads",
    "ffcv_1c": "FFCV, num_workers=1",
    "ffcv_2c": "FFCV, num_workers=2",
}
ONE_CORE = ("nostall_1c", "nostallpy_1c", "dali_1c", "spdl_1c", "tv2_nw0", "tv2_nw1", "pil_nw0", "pil_nw1",
            "grain_1c", "ffcv_1c")
TWO_CORES = ("nostall_2c", "nostallpy_2c", "dali_2c", "spdl_2c", "tv2_nw2", "pil_nw2", "grain_2c", "ffcv_2c")


def build_tables(res):
    s, meta = res["summary"], res["meta"]
    rows = []
    for cores, group in (("1", ONE_CORE), ("2", TWO_CORES)):
        for sysk in group:
            for out in ("float", "uint8"):
                key = sysk + "_" + out
                if key in res["unavailable"] and key not in s:
                    rows.append((LABELS[sysk], cores, P.OUT_LABEL[out],
                                 "unavailable: " + res["unavailable"][key][:120], "", "", "", "",
                                 ""))
                    continue
                if key not in s:
                    continue
                m = s[key]
                ns = s.get("nostall_%sc_%s" % (cores, out))
                r = P.ratio(ns and ns["images_per_cpu_second"], m["images_per_cpu_second"])
                rows.append((LABELS[sysk], cores, P.OUT_LABEL[out], P.fmt(m["images_per_second"]),
                             "%s–%s" % (P.fmt(m["images_per_second_min"]),
                                        P.fmt(m["images_per_second_max"])),
                             P.fmt(m["images_per_cpu_second"]),
                             "%s–%s" % (P.fmt(m["images_per_cpu_second_min"]),
                                        P.fmt(m["images_per_cpu_second_max"])),
                             P.fmt(m["cpu_cores_used"], 2),
                             "—" if sysk.startswith("nostall_") else P.fmt_ratio(r)))
    # the compact one: per CPU-second, float and uint8 side by side, nostall ÷ it
    short = []
    for cores, group in (("1", ONE_CORE), ("2", TWO_CORES)):
        for sysk in group:
            cells = [LABELS[sysk], cores]
            for out in ("float", "uint8"):
                m = s.get(sysk + "_" + out)
                ns = s.get("nostall_%sc_%s" % (cores, out))
                if not m:
                    cells.append("—")
                elif sysk.startswith("nostall_"):
                    cells.append(P.fmt(m["images_per_cpu_second"]))
                else:
                    cells.append("%s (%s)" % (P.fmt(m["images_per_cpu_second"]), P.fmt_ratio(
                        P.ratio(ns and ns["images_per_cpu_second"], m["images_per_cpu_second"]))))
            if cells[2:] != ["—", "—"]:
                short.append(cells)
    shead = ("system", "cores", "float32 NCHW, images per CPU-s (nostall ÷ it)",
             "uint8 NHWC, images per CPU-s (nostall ÷ it)")
    head = ("system", "cores", "output", "images/s (median)", "range", "images per CPU-s (median)",
            "range", "CPU cores busy", "nostall ÷ it, per CPU-s")
    p, mi = meta["params"], meta["machine"]
    desc = ("%d images, %s (%.0f KB mean, median %s), batch %d, %d epoch(s) per measurement, "
            "%d round(s), medians" % (p["images"], p["data"], p["mean_kb"], p["median_size"],
                                      p["batch_size"], p["epochs"], p["rounds"]))
    mach = ("%s, %s CPUs, Linux %s, %s, nostall %s; load average %s at start, %s at end" %
            (mi.get("cpu", "?"), mi.get("nproc"), mi.get("kernel"), mi.get("date"),
             mi.get("nostall_commit", "?"), " ".join("%.2f" % x for x in mi["loadavg_start"]),
             " ".join("%.2f" % x for x in mi.get("loadavg_end", ()))))
    vers = ", ".join("%s %s" % kv for kv in sorted(meta["versions"].items()))
    md = ["| " + " | ".join(shead) + " |", "|" + "|".join("---" for _ in shead) + "|"]
    md += ["| " + " | ".join(r) + " |" for r in short] + [""]
    md += ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    md += ["| " + " | ".join(r) + " |" for r in rows]
    w = [max(len(str(r[i])) for r in [head] + rows) for i in range(len(head))]
    txt = ["  ".join(str(c).ljust(w[i]) for i, c in enumerate(head))]
    txt += ["  ".join(str(c).ljust(w[i]) for i, c in enumerate(r)) for r in rows]
    return ("\n".join([desc, mach, vers, ""] + txt),
            "\n".join(["_" + desc + "._  ", "_" + mach + "._  ", "_" + vers + "._", ""] + md))


def versions():
    """Installed distributions' versions (ffcv 1.0.2's module says 0.0.3rc1)."""
    from importlib import metadata
    v = {}
    for name in ("torch", "torchvision", "nvidia-dali-cuda120", "nvidia-nvimgcodec-cu12", "spdl",
                 "grain", "ffcv", "numba", "opencv-python", "numpy", "pillow"):
        try:
            v[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            v[name] = "unavailable"
    return v


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="ImageFolder of JPEGs")
    ap.add_argument("--nostall", help="path of the nostall CLI")
    ap.add_argument("--beton", help="FFCV file of DATA (written here if missing)")
    ap.add_argument("--quality", type=int, default=95, help="FFCV's re-encoding quality")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--only", default="", help="comma list of systems (nostall,nostallpy,dali,"
                    "spdl,tv2,pil,grain,ffcv) or measurement keys (e.g. dali_1c_float)")
    ap.add_argument("--skip", default="", help="comma list of systems or keys to leave out")
    ap.add_argument("--grain-mp", action="store_true",
                    help="Grain: worker processes (mp_prefetch) instead of read threads")
    ap.add_argument("--out", help="write all results as JSON here")
    ap.add_argument("--markdown", help="write the Markdown table here")
    ap.add_argument("--serve", help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.data = os.path.abspath(a.data)
    if a.serve:
        return serve(a)
    if not a.nostall:
        ap.error("--nostall is required")
    only = set(x for x in a.only.split(",") if x)
    skip = set(x for x in a.skip.split(",") if x)

    def wanted(key):
        sysk = key.split("_")[0]
        return (not only or sysk in only or key in only) and sysk not in skip and key not in skip

    nbytes, nfiles = P.dir_bytes(a.data)
    if nfiles == 0:
        sys.exit("images.py: no JPEGs under %s" % a.data)
    meta = {"machine": P.machine_info(), "versions": versions()}
    meta["params"] = {"data": a.data, "images": nfiles, "mean_kb": nbytes / nfiles / 1000.0,
                      "median_size": P.median_size(a.data), "batch_size": a.batch_size,
                      "epochs": a.epochs, "rounds": a.rounds, "crop": CROP,
                      "grain_mp": a.grain_mp}
    unavailable = {}
    runs = {}
    servers = {}
    if (any(wanted("%s_%s" % (k, o)) for k in ("ffcv_1c", "ffcv_2c") for o in ("float", "uint8"))
            and meta["versions"]["ffcv"] != "unavailable"):
        a.beton = a.beton or "%s.q%d.beton" % (a.data.rstrip("/"), a.quality)
        if not os.path.exists(a.beton):
            log("images: writing %s (FFCV re-encodes every image at quality %d)" %
                (a.beton, a.quality))
            out = subprocess.run([sys.executable, "-c",
                                  "import sys; sys.path.insert(0, %r); import peers; "
                                  "peers.write_beton(%r, %r, %d, 2)" %
                                  (os.path.join(HERE, ".."), a.data, a.beton, a.quality)])
            if out.returncode != 0:
                unavailable["ffcv"] = "writing the .beton failed"
    for out in ("float", "uint8"):
        for group in (ONE_CORE, TWO_CORES):
            for sysk in group:
                key = sysk + "_" + out
                if not wanted(key):
                    continue
                peer = sysk.split("_")[0]
                if peer == "nostall":
                    runs[key] = P.NostallRun(a.nostall, a.data, int(sysk[-2]), out,
                                             a.batch_size, a.epochs)
                elif peer == "ffcv" and (meta["versions"]["ffcv"] == "unavailable" or
                                         "ffcv" in unavailable):
                    unavailable[key] = unavailable.get("ffcv", "ffcv is not installed")
                else:
                    if peer not in servers:
                        servers[peer] = Server(peer, a)
                    runs[key] = ServedRun(servers[peer], key)
    # interleaved: within each output, every one-core measurement, then every two-core one
    order = list(runs)
    try:
        samples, _warm = P.measure(runs, order, a.rounds, unavailable, tag="images")
    finally:
        for s in servers.values():
            s.close()
    meta["machine"]["loadavg_end"] = os.getloadavg()
    summary = {}
    for k, v in samples.items():
        if v:
            summary[k] = P.summarize(v)
            ipc = [s["images"] / s["cpu_seconds"] for s in v if s.get("cpu_seconds", 0) > 0]
            summary[k]["images_per_cpu_second_min"] = min(ipc) if ipc else None
            summary[k]["images_per_cpu_second_max"] = max(ipc) if ipc else None
    res = {"meta": meta, "summary": summary, "unavailable": unavailable, "samples": samples,
           "batches": {k: r.sample for k, r in runs.items() if getattr(r, "sample", None)},
           "nostall_cmd": " ".join(runs["nostall_1c_float"].cmd)
           if "nostall_1c_float" in runs else None}
    text, md = build_tables(res)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
        log("images: wrote %s" % a.out)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(md + "\n")
        log("images: wrote %s" % a.markdown)
    print()
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
