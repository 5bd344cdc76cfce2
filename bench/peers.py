#!/usr/bin/python3
"""peers.py — nostall side by side with its peers, on the same files, in one run.

Systems (each on one core: one worker thread / process / numba thread):

  nostall      `nostall bench DATA --threads 1` (and `--threads 2` for the
               scaling figure), train mode, crop 224, float and uint8 outputs.
               With --transcoded DIR (a `nostall transcode` copy of DATA: the
               same pixels, a restart marker every MCU), the same 1-thread
               runs on that copy too ("restart-marker transcode" rows), so the
               MCUs above and beside each crop are never entropy-decoded.
               And on the original files with a MinIO cache holding them all
               and cache_transcode=1 (the rewrite done as items enter the
               cache, no copy on disk): one untimed fill epoch, then the
               timed epochs served from the cache ("cache_transcode" rows;
               the fill epoch's speed is reported separately).
  torchvision  torchvision.datasets.ImageFolder (PIL decode) +
               RandomResizedCrop(224, scale=(0.08, 1), ratio=(3/4, 4/3)) +
               RandomHorizontalFlip + (float: ToTensor + Normalize(ImageNet);
               uint8: the HWC uint8 array), DataLoader(shuffle=True,
               num_workers=0) in this process with torch.set_num_threads(1).
               num_workers=0 is the favourable choice on one core: no worker
               process, no pickling, no shared-memory hand-off. (--torch-workers 1
               runs one worker process instead; its CPU time is counted too.)
  FFCV         a .beton written from the same ImageFolder (RGBImageField,
               write_mode='jpg', jpeg_quality = the generator's quality, no
               max_resolution, so nothing is resized), Loader(num_workers=1,
               order=RANDOM), pipeline RandomResizedCropRGBImageDecoder((224, 224))
               + RandomHorizontalFlip + (float: NormalizeImage(ImageNet, float32)
               + ToTensor + ToTorchImage(), FFCV's own recipe: an NCHW float32
               tensor in channels_last memory, no copy; --ffcv-contiguous adds
               the copy to contiguous NCHW memory, which costs FFCV much more;
               uint8: ToTensor, a contiguous NHWC uint8 tensor).
               The first epoch (numba JIT compilation) is a warm-up, excluded.
  libjpeg      bench/jpeg_decode: plain libjpeg-turbo full decode to RGB of
               every file, one thread, pixels discarded; and its entropy-only
               mode (jpeg_read_coefficients). The floors a loader is measured
               against: no crop, no resize, no normalization, no batching.
               Also two full-decode processes at once ("2 processes"): how
               far this machine lets two independent cores scale, the
               ceiling next to which nostall's 2-thread figure is read.

Every system first runs one untimed warm-up epoch (page cache, imports, JIT).
Then `--rounds` rounds, each running every measurement once, interleaved
(A B C D ... A B C D ...), each over `--epochs` epochs of the whole dataset.
Reported: the median over rounds of images/s (wall clock) and of images per
CPU-second (user + system time of the process(es) doing the work: the
"per core" figure, less sensitive to other load on a shared machine), and
the ratios of the medians.

Output: a readable table on stdout, `--out FILE` (JSON, all raw samples) and
`--markdown FILE` (tables ready to paste into docs/performance.md).
"""
import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
import traceback

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
CROP = 224


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def children_cpu():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def self_cpu():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


# --------------------------------------------------------------------------
# Machine description
# --------------------------------------------------------------------------
def machine_info():
    info = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "kernel": platform.release(), "nproc": os.cpu_count(),
            "python": platform.python_version()}
    try:
        info["sched_affinity"] = len(os.sched_getaffinity(0))
    except AttributeError:
        pass
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as f:
            info["mem_total"] = f.readline().split(":", 1)[1].strip()
    except OSError:
        pass
    info["loadavg_start"] = os.getloadavg()
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        head = subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", here, "status", "--porcelain", "--", "../src",
                                "../include", "../tools"],
                               capture_output=True, text=True).stdout.strip()
        info["nostall_commit"] = head + ("+uncommitted changes" if dirty else "")
    except OSError:
        pass
    return info


def versions():
    v = {}
    for name in ("torch", "torchvision", "numpy", "PIL", "ffcv", "numba", "cv2"):
        try:
            mod = __import__(name)
            v[name] = getattr(mod, "__version__", "?")
        except Exception as e:  # noqa: BLE001 - report, do not fail
            v[name] = "unavailable (%s)" % type(e).__name__
    try:
        from PIL import features
        v["PIL_libjpeg_turbo"] = features.version("libjpeg_turbo")
    except Exception:  # noqa: BLE001
        pass
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "libjpeg62-turbo"],
                             capture_output=True, text=True)
        if out.returncode == 0:
            v["libjpeg62-turbo"] = out.stdout.strip()
    except OSError:
        pass
    return v


# --------------------------------------------------------------------------
# Systems. Each measurement is a callable returning
#   {"images": n, "seconds": wall, "cpu_seconds": cpu, ...}
# --------------------------------------------------------------------------
def run_json(cmd, env=None):
    """Run a command that prints one JSON object; return (object, its CPU seconds).
    env: variables added to this process's environment for the command."""
    c0 = children_cpu()
    out = subprocess.run(cmd, capture_output=True, text=True,
                         env=dict(os.environ, **env) if env else None)
    cpu = children_cpu() - c0
    if out.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(cmd), out.returncode,
                                                   out.stderr.strip()))
    return json.loads(out.stdout), cpu


class NostallRun:
    def __init__(self, binary, data, threads, output, batch_size, epochs, env=None):
        self.env = env
        self.cmd = [binary, "bench", data, "--threads", str(threads), "--batch-size",
                    str(batch_size), "--epochs", str(epochs), "--crop", str(CROP),
                    "--output", output, "--mode", "train", "--json", "--quiet",
                    "--no-checksum"]

    def __call__(self):
        j, cpu = run_json(self.cmd, self.env)
        st = j.get("stats", {})
        busy = (st.get("fetch_busy_ns", 0) + st.get("decode_busy_ns", 0)
                + st.get("augment_busy_ns", 0)) * 1e-9
        return {"images": j["items"], "seconds": j["seconds"], "cpu_seconds": cpu,
                "setup_seconds": j.get("setup_seconds"), "worker_busy_seconds": busy,
                "decode_busy_seconds": st.get("decode_busy_ns", 0) * 1e-9,
                "augment_busy_seconds": st.get("augment_busy_ns", 0) * 1e-9,
                "fetch_busy_seconds": st.get("fetch_busy_ns", 0) * 1e-9,
                "skipped": j.get("skipped_count", 0), "checksum": j.get("checksum")}


class NostallCachedRun:
    """nostall on the original files with a MinIO cache holding them all and
    cache_transcode=1: one fill epoch (read, rewrite with restart markers,
    cache), then `epochs` timed epochs served from the cache. Only the
    steady epochs count; the fill epoch's speed is kept as `fill_*`. CPU of
    the steady epochs: the process's CPU scaled by their share of the wall
    time (one thread keeps one core busy in every epoch).

    The MinIO cache drops each file it caches from the page cache (so the
    bytes are not held twice): after the run every file is read back, untimed,
    or the measurement after this one would read from storage while every
    other measurement reads from the page cache."""

    def __init__(self, binary, data, threads, output, batch_size, epochs, cache_bytes):
        self.epochs = epochs
        self.data = data
        self.cmd = NostallRun(binary, data, threads, output, batch_size, epochs + 1).cmd + [
            "--cache-bytes", str(cache_bytes), "--cache-transcode", "1"]

    def __call__(self):
        j, cpu = run_json(self.cmd)
        warm_page_cache(self.data)
        ep = j["per_epoch"]
        steady = ep[1:]
        secs = sum(e["seconds"] for e in steady)
        share = secs / j["seconds"] if j["seconds"] > 0 else 0
        st = j.get("stats", {})
        return {"images": sum(e["items"] for e in steady), "seconds": secs,
                "cpu_seconds": cpu * share, "checksum": j.get("checksum"),
                "fill_images_per_second": ep[0]["items_per_second"],
                "transcoded": st.get("cache_transcoded", 0),
                "transcode_ms_per_item": (st.get("cache_transcode_ns", 0) * 1e-6 /
                                          max(st.get("cache_transcoded", 0), 1)),
                "cache_bytes": j.get("cache_bytes", 0)}


class JpegRun:
    def __init__(self, binary, data, mode, epochs):
        self.cmd = [binary, data, "--mode", mode, "--epochs", str(epochs), "--warmup", "0"]

    def __call__(self):
        j, cpu = run_json(self.cmd)
        # the process's own CPU clock excludes startup and the directory walk
        return {"images": j["images"], "seconds": j["seconds"],
                "cpu_seconds": j.get("cpu_seconds", cpu)}


class JpegPairRun:
    """Two JpegRun processes at once: the machine's own 2-core scaling."""

    def __init__(self, binary, data, mode, epochs):
        self.cmd = JpegRun(binary, data, mode, epochs).cmd

    def __call__(self):
        c0 = children_cpu()
        procs = [subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True) for _ in range(2)]
        outs = [p.communicate() for p in procs]
        cpu = children_cpu() - c0
        js = []
        for p, (so, se) in zip(procs, outs):
            if p.returncode != 0:
                raise RuntimeError("%s failed (%d): %s" % (" ".join(self.cmd), p.returncode,
                                                           se.strip()))
            js.append(json.loads(so))
        # Both decode the same files, so they overlap for all but a few
        # milliseconds; the slower one's time is the pair's.
        return {"images": sum(j["images"] for j in js),
                "seconds": max(j["seconds"] for j in js),
                "cpu_seconds": sum(j.get("cpu_seconds", 0) for j in js) or cpu}


class _HWCUint8:
    """PIL image -> HWC uint8 tensor (the layout nostall's uint8 output has)."""

    def __call__(self, img):
        import numpy as np
        import torch
        return torch.from_numpy(np.asarray(img, dtype=np.uint8).copy())


def _describe(x):
    import torch
    d = {"shape": list(x.shape), "dtype": str(x.dtype).replace("torch.", ""),
         "contiguous": bool(x.is_contiguous())}
    if x.dim() == 4:
        d["channels_last"] = bool(x.is_contiguous(memory_format=torch.channels_last))
    return d


def _time_epochs(run, cpu):
    """Iterate run.loader for run.epochs epochs: images, wall and CPU seconds
    (cpu() gives the process's CPU time, children included where they work),
    keeping a description of the first batch in run.sample."""
    n = 0
    c0 = cpu()
    t0 = time.perf_counter()
    for _ in range(run.epochs):
        for x, _y in run.loader:
            n += x.shape[0]
            if run.sample is None:
                run.sample = _describe(x)
    return {"images": n, "seconds": time.perf_counter() - t0, "cpu_seconds": cpu() - c0}


class TorchRun:
    def __init__(self, data, output, batch_size, epochs, workers):
        import torch
        import torchvision
        from torchvision import transforms as T
        torch.set_num_threads(1)
        aug = [T.RandomResizedCrop(CROP, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0)),
               T.RandomHorizontalFlip()]
        if output == "float":
            aug += [T.ToTensor(), T.Normalize(MEAN, STD)]
        else:
            aug += [_HWCUint8()]
        ds = torchvision.datasets.ImageFolder(data, transform=T.Compose(aug))
        self.loader = torch.utils.data.DataLoader(ds, batch_size=batch_size, shuffle=True,
                                                  num_workers=workers, drop_last=False)
        self.epochs = epochs
        self.sample = None

    def __call__(self):
        return _time_epochs(self, cpu=lambda: self_cpu() + children_cpu())


class FfcvRun:
    def __init__(self, beton, output, batch_size, epochs, contiguous=False, workers=1):
        import numpy as np
        from ffcv.fields.decoders import IntDecoder, RandomResizedCropRGBImageDecoder
        from ffcv.loader import Loader, OrderOption
        from ffcv.transforms import (NormalizeImage, RandomHorizontalFlip, Squeeze,
                                     ToTensor, ToTorchImage)
        image = [RandomResizedCropRGBImageDecoder((CROP, CROP), scale=(0.08, 1.0),
                                                  ratio=(3.0 / 4.0, 4.0 / 3.0)),
                 RandomHorizontalFlip()]
        if output == "float":
            image += [NormalizeImage(np.array(MEAN) * 255, np.array(STD) * 255, np.float32),
                      ToTensor(), ToTorchImage(channels_last=not contiguous)]
        else:
            image += [ToTensor()]
        self.loader = Loader(beton, batch_size=batch_size, num_workers=workers,
                             order=OrderOption.RANDOM, drop_last=False, os_cache=True,
                             pipelines={"image": image,
                                        "label": [IntDecoder(), ToTensor(), Squeeze()]})
        self.epochs = epochs
        self.sample = None

    def __call__(self):
        return _time_epochs(self, cpu=self_cpu)


def write_beton(data, beton, quality, workers):
    """The same images, re-encoded by FFCV's writer at the same quality."""
    import torchvision
    from ffcv.fields import IntField, RGBImageField
    from ffcv.writer import DatasetWriter
    ds = torchvision.datasets.ImageFolder(data)
    tmp = beton + ".tmp"
    writer = DatasetWriter(tmp, {"image": RGBImageField(write_mode="jpg", max_resolution=None,
                                                        jpeg_quality=quality),
                                 "label": IntField()}, num_workers=workers)
    writer.from_indexed_dataset(ds)
    os.replace(tmp, beton)


def reencode_sizes(data, quality, n=20):
    """Mean size of the first n files and of FFCV's re-encoding of them (cv2)."""
    import cv2
    import numpy as np
    from PIL import Image
    files = []
    for root, _dirs, names in sorted(os.walk(data)):
        files += [os.path.join(root, x) for x in sorted(names)
                  if x.lower().endswith((".jpg", ".jpeg"))]
        if len(files) >= n:
            break
    files = files[:n]
    orig = enc = 0
    for f in files:
        im = np.asarray(Image.open(f).convert("RGB"))
        ok, buf = cv2.imencode(".jpg", cv2.cvtColor(im, cv2.COLOR_RGB2BGR),
                               [int(cv2.IMWRITE_JPEG_QUALITY), quality])
        orig += os.path.getsize(f)
        enc += buf.nbytes
    return [round(orig / len(files) / 1000.0, 1), round(enc / len(files) / 1000.0, 1)]


def median_size(data, n=200):
    """Median width x height of up to n of the JPEGs (headers only)."""
    from PIL import Image
    ws, hs = [], []
    for root, _dirs, names in os.walk(data):
        for name in sorted(names):
            if name.lower().endswith((".jpg", ".jpeg")) and len(ws) < n:
                try:
                    with Image.open(os.path.join(root, name)) as im:
                        ws.append(im.size[0])
                        hs.append(im.size[1])
                except Exception:  # noqa: BLE001 - a broken file is simply not counted
                    pass
    if not ws:
        return "?"
    return "%dx%d" % (statistics.median(ws), statistics.median(hs))


def warm_page_cache(data):
    """Read every file under `data` once (into the page cache)."""
    for root, _dirs, names in os.walk(data):
        for n in names:
            with open(os.path.join(root, n), "rb") as f:
                while f.read(1 << 20):
                    pass


def dir_bytes(data):
    total, files = 0, 0
    for root, _dirs, names in os.walk(data):
        for n in names:
            if n.lower().endswith((".jpg", ".jpeg")):
                total += os.path.getsize(os.path.join(root, n))
                files += 1
    return total, files


# --------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------
LABELS = {
    "nostall_1t": "nostall, 1 thread",
    "nostall_lj_1t": "nostall, 1 thread, libjpeg-turbo's Huffman decoder (NOSTALL_NO_OWN_HUFFMAN=1)",
    "nostall_2t": "nostall, 2 threads",
    "nostall_rst_1t": "nostall, 1 thread, restart-marker transcode",
    "nostall_rst_2t": "nostall, 2 threads, restart-marker transcode",
    "nostall_ct_1t": "nostall, 1 thread, MinIO cache + cache_transcode (epochs after the fill)",
    "torch": "PyTorch DataLoader + torchvision (num_workers=%d)",
    "ffcv": "FFCV",
    "libjpeg_full": "libjpeg-turbo full decode only",
    "libjpeg_full_2p": "libjpeg-turbo full decode only, 2 processes at once",
    "libjpeg_coeffs": "libjpeg-turbo entropy decode only",
}
OUT_LABEL = {"float": "float32 NCHW normalized", "uint8": "uint8 NHWC", "-": "RGB, discarded"}


def summarize(samples):
    ips = [s["images"] / s["seconds"] for s in samples if s["seconds"] > 0]
    ipc = [s["images"] / s["cpu_seconds"] for s in samples if s.get("cpu_seconds", 0) > 0]
    r = {"rounds": len(samples),
         "images_per_second": statistics.median(ips) if ips else None,
         "images_per_second_min": min(ips) if ips else None,
         "images_per_second_max": max(ips) if ips else None,
         "images_per_cpu_second": statistics.median(ipc) if ipc else None,
         "cpu_cores_used": (statistics.median([s["cpu_seconds"] / s["seconds"] for s in samples])
                            if samples else None)}
    return r


def ratio(a, b):
    return a / b if a and b else None


def fmt(x, nd=0):
    if x is None:
        return "—"
    return ("%." + str(nd) + "f") % x


def fmt_ratio(x):
    return "—" if x is None else "%.2f×" % x


def build_tables(res, meta):
    """Return (text, markdown)."""
    s = res["summary"]
    rows = []
    order = [("nostall_1t", "float"), ("nostall_lj_1t", "float"), ("nostall_rst_1t", "float"),
             ("nostall_ct_1t", "float"),
             ("nostall_2t", "float"), ("nostall_rst_2t", "float"),
             ("torch", "float"), ("ffcv", "float"), ("nostall_1t", "uint8"),
             ("nostall_lj_1t", "uint8"), ("nostall_rst_1t", "uint8"), ("nostall_ct_1t", "uint8"), ("nostall_2t", "uint8"),
             ("nostall_rst_2t", "uint8"),
             ("torch", "uint8"), ("ffcv", "uint8"), ("libjpeg_full", "-"),
             ("libjpeg_full_2p", "-"), ("libjpeg_coeffs", "-")]
    for sys_, out in order:
        key = sys_ + ("" if out == "-" else "_" + out)
        if key not in s:
            if key in res.get("unavailable", {}):
                rows.append((LABELS[sys_].replace(" (num_workers=%d)", ""), OUT_LABEL[out],
                             "unavailable: " + res["unavailable"][key],
                             "", "", "", ""))
            continue
        m = s[key]
        label = LABELS[sys_]
        if sys_ == "torch":
            label = label % meta["params"]["torch_workers"]
        olabel = OUT_LABEL[out]
        if key == "ffcv_float" and not meta["params"].get("ffcv_contiguous"):
            olabel += " (channels_last memory)"
        rows.append((label, olabel, fmt(m["images_per_second"]),
                     "%s–%s" % (fmt(m["images_per_second_min"]), fmt(m["images_per_second_max"])),
                     fmt(m["images_per_cpu_second"]), fmt(m["cpu_cores_used"], 2),
                     str(m["rounds"])))
    head = ("system", "output", "images/s (wall, median)", "range", "images per CPU-second",
            "CPU cores busy", "rounds")

    rr = res["ratios"]
    rat_rows = []
    names = [("vs_torch", "nostall ÷ PyTorch+torchvision"), ("vs_ffcv", "nostall ÷ FFCV"),
             ("vs_libjpeg_full", "nostall ÷ libjpeg-turbo full decode"),
             ("vs_libjpeg_coeffs", "nostall ÷ libjpeg-turbo entropy decode")]
    if any("rst" in rr.get(out, {}) for out in ("float", "uint8")):
        names = names + [("rst." + k, label.replace("nostall ÷", "nostall, restart-marker "
                                                    "transcode ÷"))
                         for k, label in names]
        names.append(("rst.vs_nostall", "nostall, restart-marker transcode ÷ original files"))
    if any("ct" in rr.get(out, {}) for out in ("float", "uint8")):
        base = [n for n in names if "." not in n[0]]
        names = names + [("ct." + k, label.replace(
            "nostall ÷", "nostall, original files, cache_transcode (epochs after the fill) ÷"))
            for k, label in base]
        names.append(("ct.vs_nostall", "nostall, cache_transcode (epochs after the fill) ÷ "
                                       "without"))
    for k, label in names:
        cells = [label]
        for out in ("float", "uint8"):
            r = rr.get(out, {})
            for part in k.split("."):
                r = r.get(part) if r else None
            if r is None:
                cells.append("—")
            else:
                cells.append("%s (per CPU-s %s)" % (fmt_ratio(r["wall"]), fmt_ratio(r["cpu"])))
        rat_rows.append(cells)
    if any(rr.get(out, {}).get("vs_ljhuff") for out in ("float", "uint8")):
        cells = ["nostall ÷ nostall with libjpeg-turbo's Huffman decoder"]
        for out in ("float", "uint8"):
            r = rr.get(out, {}).get("vs_ljhuff")
            cells.append("—" if not r else "%s (per CPU-s %s)" % (fmt_ratio(r["wall"]),
                                                                   fmt_ratio(r["cpu"])))
        rat_rows.append(cells)
    cells = ["nostall 2 threads ÷ 1 thread (images/s)"]
    for out in ("float", "uint8"):
        cells.append(fmt_ratio(rr.get(out, {}).get("scaling_2t")))
    rat_rows.append(cells)
    cells = ["nostall 2 threads ÷ 1 thread (images per CPU-s: 1.00× = no parallel overhead)"]
    for out in ("float", "uint8"):
        cells.append(fmt_ratio(rr.get(out, {}).get("scaling_2t_cpu")))
    rat_rows.append(cells)
    if any(rr.get(out, {}).get("rst_scaling_2t") for out in ("float", "uint8")):
        cells = ["nostall 2 threads ÷ 1 thread, restart-marker transcode (images/s; per CPU-s)"]
        for out in ("float", "uint8"):
            r = rr.get(out, {})
            cells.append("%s (per CPU-s %s)" % (fmt_ratio(r.get("rst_scaling_2t")),
                                                 fmt_ratio(r.get("rst_scaling_2t_cpu"))))
        rat_rows.append(cells)
    ceil = rr.get("machine_2p")
    if ceil:
        v = "%s (per CPU-s %s)" % (fmt_ratio(ceil["wall"]), fmt_ratio(ceil["cpu"]))
        rat_rows.append(["machine ceiling: 2 libjpeg-turbo full-decode processes at once ÷ 1 "
                         "(images/s; the same for both outputs)", v, v])
    rhead = ("ratio (1 thread each, train, 224×224)", "float32 NCHW", "uint8 NHWC")

    def md_table(h, body):
        lines = ["| " + " | ".join(h) + " |", "|" + "|".join("---" for _ in h) + "|"]
        lines += ["| " + " | ".join(r) + " |" for r in body]
        return "\n".join(lines)

    def txt_table(h, body):
        w = [max(len(str(r[i])) for r in [h] + list(body)) for i in range(len(h))]
        lines = ["  ".join(str(c).ljust(w[i]) for i, c in enumerate(h)),
                 "  ".join("-" * x for x in w)]
        lines += ["  ".join(str(c).ljust(w[i]) for i, c in enumerate(r)) for r in body]
        return "\n".join(lines)

    mi = meta["machine"]
    p = meta["params"]
    if p["width"] and p["height"]:
        what = "%dx%d JPEG quality %d" % (p["width"], p["height"], p["quality"])
    else:  # a user's dataset: what its files are
        what = "JPEGs from %s (median %s; FFCV re-encodes at quality %d)" % (
            p["data"], p.get("median_size", "?"), p["quality"])
    desc = ("%d images, %s (%.0f KB mean), batch %d, %d epoch(s) per "
            "measurement, %d round(s), medians" %
            (p["images"], what, p["mean_kb"], p["batch_size"], p["epochs"], p["rounds"]))
    mach = ("%s, %s CPUs, Linux %s, %s, nostall %s; load average %s at start, %s at end" %
            (mi.get("cpu", "?"), mi.get("nproc"), mi.get("kernel"), mi.get("date"),
             mi.get("nostall_commit", "?"),
             " ".join("%.2f" % x for x in mi["loadavg_start"]),
             " ".join("%.2f" % x for x in mi.get("loadavg_end", ()))))
    text = "\n".join([desc, mach, "", txt_table(head, rows), "", txt_table(rhead, rat_rows)])
    md = "\n".join(["_" + desc + "._  ", "_" + mach + "._", "", md_table(head, rows), "",
                    md_table(rhead, rat_rows)])
    return text, md


def measure(runs, order, rounds, unavailable, tag="peers"):
    """The measurement procedure every side-by-side script here shares: one
    untimed warm-up run of each measurement in `order` (page cache, imports,
    JIT; a measurement that fails in it is left out, the reason recorded in
    `unavailable`), then `rounds` rounds, each running every measurement once,
    interleaved (A B C ... A B C ...). Returns (samples: key -> list of
    results, warm: key -> the warm-up's result)."""
    warm = {}
    for k in order:
        log("%s: warm-up %s" % (tag, k))
        try:
            warm[k] = runs[k]()
        except Exception as e:  # noqa: BLE001
            unavailable[k] = "%s: %s" % (type(e).__name__, str(e)[:300])
            log("%s: %s failed in warm-up, left out: %s" % (tag, k, e))
    order = [k for k in order if k not in unavailable]
    samples = {k: [] for k in order}
    for rnd in range(rounds):
        for k in order:
            try:
                r = runs[k]()
            except Exception as e:  # noqa: BLE001
                log("%s: %s failed in round %d: %s" % (tag, k, rnd + 1, e))
                continue
            samples[k].append(r)
            log("%s: round %d/%d %-18s %7.1f images/s  %7.1f images/CPU-s" %
                (tag, rnd + 1, rounds, k, r["images"] / r["seconds"],
                 r["images"] / r["cpu_seconds"] if r["cpu_seconds"] else 0))
    return samples, warm


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="ImageFolder of JPEGs")
    ap.add_argument("--nostall", required=True, help="path of the nostall CLI")
    ap.add_argument("--jpeg-decode", required=True, help="path of bench/jpeg_decode")
    ap.add_argument("--quality", type=int, required=True,
                    help="JPEG quality the images were written at (FFCV re-encodes at it)")
    ap.add_argument("--width", type=int, default=0, help="for the report only")
    ap.add_argument("--height", type=int, default=0, help="for the report only")
    ap.add_argument("--beton", help="FFCV file (default: DATA.q<Q>.beton, written if missing)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=2,
                    help="epochs per measurement (2 amortizes every system's startup)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--torch-workers", type=int, default=0,
                    help="DataLoader num_workers (0: in this process; default)")
    ap.add_argument("--ffcv-contiguous", action="store_true",
                    help="FFCV float: copy to contiguous NCHW (default: channels_last view)")
    ap.add_argument("--transcoded",
                    help="a `nostall transcode` copy of DATA: adds restart-marker rows")
    ap.add_argument("--skip", default="",
                    help="comma list of systems to leave out: "
                         "nostall2,cached,ljhuff,torch,ffcv,libjpeg")
    ap.add_argument("--out", help="write all results as JSON here")
    ap.add_argument("--markdown", help="write the Markdown tables here")
    a = ap.parse_args()
    skip = set(x for x in a.skip.split(",") if x)

    meta = {"machine": machine_info(), "versions": versions()}
    nbytes, nfiles = dir_bytes(a.data)
    if nfiles == 0:
        sys.exit("peers.py: no JPEGs under %s" % a.data)
    meta["params"] = {"data": os.path.abspath(a.data), "images": nfiles, "bytes": nbytes,
                      "mean_kb": nbytes / nfiles / 1000.0, "width": a.width, "height": a.height,
                      "quality": a.quality, "batch_size": a.batch_size, "epochs": a.epochs,
                      "rounds": a.rounds, "torch_workers": a.torch_workers, "crop": CROP,
                      "ffcv_contiguous": a.ffcv_contiguous}
    if not (a.width and a.height):
        meta["params"]["median_size"] = median_size(a.data)
    log("peers: %d images (%.1f MB) in %s" % (nfiles, nbytes / 1e6, a.data))

    runs = {}          # key -> callable
    unavailable = {}   # key -> reason
    extra = {}

    for out in ("float", "uint8"):
        runs["nostall_1t_" + out] = NostallRun(a.nostall, a.data, 1, out, a.batch_size, a.epochs)
        if "nostall2" not in skip:
            runs["nostall_2t_" + out] = NostallRun(a.nostall, a.data, 2, out, a.batch_size,
                                                   a.epochs)
        if "ljhuff" not in skip:
            runs["nostall_lj_1t_" + out] = NostallRun(a.nostall, a.data, 1, out, a.batch_size,
                                                      a.epochs, {"NOSTALL_NO_OWN_HUFFMAN": "1"})

    if "cached" not in skip:
        for out in ("float", "uint8"):
            runs["nostall_ct_1t_" + out] = NostallCachedRun(a.nostall, a.data, 1, out,
                                                            a.batch_size, a.epochs,
                                                            nbytes + nbytes // 4 + (64 << 20))

    if a.transcoded:
        tb, tf = dir_bytes(a.transcoded)
        extra["transcoded_mean_kb"] = round(tb / max(tf, 1) / 1000.0, 1)
        for out in ("float", "uint8"):
            runs["nostall_rst_1t_" + out] = NostallRun(a.nostall, a.transcoded, 1, out,
                                                       a.batch_size, a.epochs)
            if "nostall2" not in skip:
                runs["nostall_rst_2t_" + out] = NostallRun(a.nostall, a.transcoded, 2, out,
                                                           a.batch_size, a.epochs)

    if "torch" not in skip:
        for out in ("float", "uint8"):
            try:
                runs["torch_" + out] = TorchRun(a.data, out, a.batch_size, a.epochs,
                                                a.torch_workers)
            except Exception as e:  # noqa: BLE001
                unavailable["torch_" + out] = "%s: %s" % (type(e).__name__, e)
                log("peers: torchvision unavailable: %s" % unavailable["torch_" + out])

    if "ffcv" not in skip:
        beton = a.beton or "%s.q%d.beton" % (a.data.rstrip("/"), a.quality)
        try:
            if not os.path.exists(beton):
                log("peers: writing %s (FFCV re-encodes every image at quality %d)" %
                    (beton, a.quality))
                t0 = time.perf_counter()
                write_beton(a.data, beton, a.quality, max(1, os.cpu_count() or 1))
                extra["ffcv_write_seconds"] = time.perf_counter() - t0
            extra["ffcv_beton_bytes"] = os.path.getsize(beton)
            for out in ("float", "uint8"):
                runs["ffcv_" + out] = FfcvRun(beton, out, a.batch_size, a.epochs,
                                              a.ffcv_contiguous)
            extra["ffcv_reencoded_kb_vs_original_kb"] = reencode_sizes(a.data, a.quality)
        except Exception as e:  # noqa: BLE001
            for out in ("float", "uint8"):
                unavailable["ffcv_" + out] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0]
                                                         if str(e) else "")
            log("peers: FFCV unavailable:\n" + traceback.format_exc())

    if "libjpeg" not in skip:
        runs["libjpeg_full"] = JpegRun(a.jpeg_decode, a.data, "full", a.epochs)
        runs["libjpeg_coeffs"] = JpegRun(a.jpeg_decode, a.data, "coeffs", a.epochs)
        if "nostall2" not in skip:
            runs["libjpeg_full_2p"] = JpegPairRun(a.jpeg_decode, a.data, "full", a.epochs)

    order = [k for k in ("libjpeg_full", "nostall_1t_float", "torch_float", "nostall_rst_1t_float",
                         "nostall_ct_1t_float", "ffcv_float", "nostall_lj_1t_float",
                         "nostall_2t_float",
                         "nostall_rst_2t_float", "nostall_1t_uint8", "torch_uint8",
                         "nostall_lj_1t_uint8", "nostall_rst_1t_uint8", "nostall_ct_1t_uint8", "ffcv_uint8",
                         "nostall_2t_uint8",
                         "nostall_rst_2t_uint8",
                         "libjpeg_full_2p", "libjpeg_coeffs") if k in runs]

    # Warm-up: one untimed run of each (page cache, imports, FFCV's numba JIT).
    samples, warm = measure(runs, order, a.rounds, unavailable)
    for k in ("ffcv_float", "ffcv_uint8"):
        if k in warm:
            extra[k + "_first_epoch_seconds_incl_jit"] = warm[k]["seconds"]

    for out in ("float", "uint8"):
        ct = samples.get("nostall_ct_1t_" + out)
        if ct:
            extra["cache_transcode_%s_fill_epoch_images_per_second" % out] = round(
                statistics.median(r["fill_images_per_second"] for r in ct), 1)
            extra["cache_transcode_%s_ms_per_item" % out] = round(
                statistics.median(r["transcode_ms_per_item"] for r in ct), 3)
            extra["cache_transcode_%s_cache_bytes_vs_files" % out] = round(
                ct[-1]["cache_bytes"] / max(nbytes, 1), 4)

    meta["machine"]["loadavg_end"] = os.getloadavg()
    summary = {k: summarize(v) for k, v in samples.items() if v}
    for k in ("torch_float", "torch_uint8", "ffcv_float", "ffcv_uint8"):
        if k in runs and getattr(runs[k], "sample", None):
            extra[k + "_batch"] = runs[k].sample

    def peer_ratios(ns, out):
        rr = {}
        for name, key in (("vs_torch", "torch_" + out), ("vs_ffcv", "ffcv_" + out),
                          ("vs_libjpeg_full", "libjpeg_full"),
                          ("vs_libjpeg_coeffs", "libjpeg_coeffs"),
                          ("vs_nostall", "nostall_1t_" + out)):
            if key in summary:
                rr[name] = {"wall": ratio(ns["images_per_second"],
                                          summary[key]["images_per_second"]),
                            "cpu": ratio(ns["images_per_cpu_second"],
                                         summary[key]["images_per_cpu_second"])}
        return rr

    ratios = {}
    for out in ("float", "uint8"):
        ns = summary.get("nostall_1t_" + out)
        if not ns:
            continue
        rr = peer_ratios(ns, out)
        rr.pop("vs_nostall", None)
        lj = summary.get("nostall_lj_1t_" + out)
        if lj:
            rr["vs_ljhuff"] = {"wall": ratio(ns["images_per_second"], lj["images_per_second"]),
                               "cpu": ratio(ns["images_per_cpu_second"],
                                            lj["images_per_cpu_second"])}
        if summary.get("nostall_ct_1t_" + out):
            rr["ct"] = peer_ratios(summary["nostall_ct_1t_" + out], out)
        if summary.get("nostall_rst_1t_" + out):
            rr["rst"] = peer_ratios(summary["nostall_rst_1t_" + out], out)
            r2 = summary.get("nostall_rst_2t_" + out)
            if r2:
                rs = summary["nostall_rst_1t_" + out]
                rr["rst_scaling_2t"] = ratio(r2["images_per_second"], rs["images_per_second"])
                rr["rst_scaling_2t_cpu"] = ratio(r2["images_per_cpu_second"],
                                                 rs["images_per_cpu_second"])
        n2 = summary.get("nostall_2t_" + out)
        if n2:
            rr["scaling_2t"] = ratio(n2["images_per_second"], ns["images_per_second"])
            rr["scaling_2t_cpu"] = ratio(n2["images_per_cpu_second"],
                                         ns["images_per_cpu_second"])
        ratios[out] = rr
    if summary.get("libjpeg_full_2p") and summary.get("libjpeg_full"):
        ratios["machine_2p"] = {
            "wall": ratio(summary["libjpeg_full_2p"]["images_per_second"],
                          summary["libjpeg_full"]["images_per_second"]),
            "cpu": ratio(summary["libjpeg_full_2p"]["images_per_cpu_second"],
                         summary["libjpeg_full"]["images_per_cpu_second"])}

    res = {"meta": meta, "extra": extra, "summary": summary, "ratios": ratios,
           "unavailable": unavailable, "samples": samples,
           "nostall_cmd": " ".join(runs["nostall_1t_float"].cmd)}
    text, md = build_tables(res, meta)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
        log("peers: wrote %s" % a.out)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(md + "\n")
        log("peers: wrote %s" % a.markdown)
    print()
    print(text)
    if extra:
        print()
        for k, v in sorted(extra.items()):
            print("  %s: %s" % (k, v))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
