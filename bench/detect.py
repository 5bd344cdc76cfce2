#!/usr/bin/python3
"""detect.py — object detection input pipelines side by side, in one run:
nostall's task=detect against torchvision's CocoDetection with the same
transforms, on the same COCO-format dataset.

Both pipelines do, per image (train, SSD-style):
  decode the JPEG; RandomIoUCrop (torchvision v2's semantics: a minimum-IoU
  option from {0, .1, .3, .5, .7, .9, 1 = no crop}, up to 40 trials of scale
  0.3..1 and aspect 0.5..2, the crop must hold a box centre and reach the
  option's IoU with one such box; boxes whose centre left the crop dropped,
  the rest clipped to it); RandomHorizontalFlip(0.5); resize to 300x300
  (PIL bilinear, antialiased); float32 CHW normalized by the ImageNet mean
  and std; boxes xyxy in output pixels with their labels (categories
  numbered by id) and iscrowd; batches of images stacked, boxes per image.

Systems, each on one core (the "per core" comparison):
  nostall      nostall.Loader(ann, task="detect", box_crop="iou",
               out_height=300, out_width=300, output="float", threads=1) in
               this process: one worker thread (and the consumer: this
               thread). The crop decodes only its region of the JPEG.
  torchvision  torchvision.datasets.CocoDetection(root, ann, transforms=T)
               (0.14: no transforms.v2, so T implements the semantics above
               with torch's RNG, PIL for crop / flip / resize and
               torchvision.transforms.functional for to_tensor + normalize,
               torchvision.ops.box_iou for the IoU) under
               DataLoader(batch_size, shuffle=True, num_workers=0,
               collate_fn=stack images, list targets) in this process with
               torch.set_num_threads(1): no worker process, no pickling --
               the favourable choice on one core. Debian has no pycocotools:
               CocoDetection's `from pycocotools.coco import COCO` gets a
               stand-in here that does what COCO() does for it (json.load,
               the id indexes, getAnnIds / loadAnns / loadImgs).
  --two adds both on two cores: threads=2 against num_workers=2 (the
  workers' CPU time counted).

Every system first runs one untimed warm-up epoch (imports, page cache).
Nothing runs outside its own timed window: nostall's loader is created and
closed inside it (epochs=1), the DataLoader's workers (with --two) are
started and joined inside it.
Then --rounds rounds, interleaved (nostall, torchvision, nostall, ...), each
one epoch over the whole dataset. Reported: the median over rounds of
images/s (wall clock) and of images per CPU-second (user + system time of
this process and its children: the per-core figure, less sensitive to other
load on a shared machine), and the ratios of the medians.

Usage:
  bench/detect.py [--data DIR] [--images 256] [--width 640] [--height 480]
                  [--rounds 5] [--batch-size 32] [--two] [--out FILE.json]
The dataset is `nostall gen --task detect` (made in --data if it has no
instances.json). NOSTALL_LIBRARY / NOSTALL_CLI choose the build (default
build/).
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
import tempfile
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
OUT = 300


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def cpu_now():
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def machine():
    info = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "kernel": platform.release(), "nproc": os.cpu_count(), "python": platform.python_version(),
            "loadavg_start": os.getloadavg()}
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    info["nostall_commit"] = head
    return info


# -- torchvision's side ---------------------------------------------------------

def install_coco_stand_in():
    """pycocotools.coco.COCO as CocoDetection uses it, when pycocotools is absent."""
    try:
        import pycocotools.coco  # noqa: F401
        return "pycocotools"
    except ImportError:
        pass
    from collections import defaultdict

    class COCO:
        def __init__(self, annotation_file):
            with open(annotation_file) as f:
                self.dataset = json.load(f)
            self.imgs = {im["id"]: im for im in self.dataset["images"]}
            self.anns = {a["id"]: a for a in self.dataset["annotations"]}
            self.cats = {c["id"]: c for c in self.dataset["categories"]}
            self.imgToAnns = defaultdict(list)
            for a in self.dataset["annotations"]:
                self.imgToAnns[a["image_id"]].append(a)

        def getAnnIds(self, imgIds):
            ids = imgIds if isinstance(imgIds, (list, tuple)) else [imgIds]
            return [a["id"] for i in ids for a in self.imgToAnns[i]]

        def loadAnns(self, ids):
            return [self.anns[i] for i in ids]

        def loadImgs(self, ids):
            return [self.imgs[i] for i in (ids if isinstance(ids, (list, tuple)) else [ids])]

    pkg = types.ModuleType("pycocotools")
    mod = types.ModuleType("pycocotools.coco")
    mod.COCO = COCO
    pkg.coco = mod
    sys.modules["pycocotools"] = pkg
    sys.modules["pycocotools.coco"] = mod
    return "stand-in (json.load + indexes)"


class SSDTransform:
    """COCO target -> (image tensor, {"boxes", "labels", "iscrowd"}) with the
    semantics in the module docstring (torch's RNG)."""

    OPTIONS = (0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0)

    def __init__(self, label_of, size=OUT):
        import torch
        import torchvision.transforms.functional as F
        from torchvision.ops import box_iou
        self.torch, self.F, self.box_iou = torch, F, box_iou
        self.label_of, self.size = label_of, size

    def crop_params(self, w, h, boxes):
        torch = self.torch
        if len(boxes) == 0:
            return None
        for _ in range(50):  # torchvision loops until an option succeeds
            need = self.OPTIONS[int(torch.randint(0, len(self.OPTIONS), (1,)))]
            if need >= 1.0:
                return None
            for _ in range(40):
                r = 0.3 + 0.7 * torch.rand(2)
                new_w, new_h = int(w * r[0]), int(h * r[1])
                if new_h == 0 or not 0.5 <= new_w / new_h <= 2.0:
                    continue
                r = torch.rand(2)
                left, top = int((w - new_w) * r[0]), int((h - new_h) * r[1])
                right, bottom = left + new_w, top + new_h
                if left == right or top == bottom:
                    continue
                cx = (boxes[:, 0] + boxes[:, 2]) / 2
                cy = (boxes[:, 1] + boxes[:, 3]) / 2
                inside = (left < cx) & (cx < right) & (top < cy) & (cy < bottom)
                if not inside.any():
                    continue
                crop = torch.tensor([[left, top, right, bottom]], dtype=boxes.dtype)
                if self.box_iou(boxes[inside], crop).max() < need:
                    continue
                return left, top, new_w, new_h, inside
        return None

    def __call__(self, image, target):
        torch, F = self.torch, self.F
        w, h = image.size
        xywh = torch.tensor([a["bbox"] for a in target], dtype=torch.float64).reshape(-1, 4)
        boxes = torch.cat([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], 1)
        boxes[:, 0::2] = boxes[:, 0::2].clamp(0, w)
        boxes[:, 1::2] = boxes[:, 1::2].clamp(0, h)
        labels = torch.tensor([self.label_of[a["category_id"]] for a in target], dtype=torch.int64)
        crowd = torch.tensor([a.get("iscrowd", 0) for a in target], dtype=torch.uint8)
        keep = (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
        boxes, labels, crowd = boxes[keep], labels[keep], crowd[keep]
        p = self.crop_params(w, h, boxes)
        if p is not None:
            left, top, w, h, inside = p
            image = image.crop((left, top, left + w, top + h))
            boxes, labels, crowd = boxes[inside], labels[inside], crowd[inside]
            boxes -= torch.tensor([left, top, left, top], dtype=boxes.dtype)
            boxes[:, 0::2] = boxes[:, 0::2].clamp(0, w)
            boxes[:, 1::2] = boxes[:, 1::2].clamp(0, h)
        if torch.rand(1) < 0.5:
            image = F.hflip(image)
            boxes = torch.stack([w - boxes[:, 2], boxes[:, 1], w - boxes[:, 0], boxes[:, 3]], 1)
        image = F.resize(image, [self.size, self.size])
        boxes = boxes * torch.tensor([self.size / w, self.size / h] * 2, dtype=boxes.dtype)
        image = F.normalize(F.to_tensor(image), MEAN, STD)
        return image, {"boxes": boxes.float(), "labels": labels, "iscrowd": crowd}


def collate(batch):
    import torch
    return torch.stack([b[0] for b in batch]), [b[1] for b in batch]


class TorchvisionRun:
    def __init__(self, data, ann, batch_size, workers):
        import torch
        import torchvision
        from torch.utils.data import DataLoader
        torch.set_num_threads(1)
        self.coco = install_coco_stand_in()
        cats = sorted(c["id"] for c in json.load(open(ann))["categories"])
        ds = torchvision.datasets.CocoDetection(data, ann, transforms=SSDTransform(
            {c: i for i, c in enumerate(cats)}))
        self.n = len(ds)
        self.loader = DataLoader(ds, batch_size=batch_size, shuffle=True, num_workers=workers,
                                 collate_fn=collate)

    def __call__(self):
        c0, t0, n, boxes = cpu_now(), time.perf_counter(), 0, 0
        for images, targets in self.loader:
            n += images.shape[0]
            boxes += sum(len(t["boxes"]) for t in targets)
        return {"images": n, "seconds": time.perf_counter() - t0, "cpu_seconds": cpu_now() - c0,
                "boxes": boxes}


class NostallRun:
    """One loader per epoch (created and closed inside the timed window, as
    the DataLoader's workers are started and joined inside it): a loader
    kept between rounds would prepare the next epoch's first batches while
    the other system is being timed."""

    def __init__(self, ann, batch_size, threads):
        self.ann, self.batch_size, self.threads, self.seed = ann, batch_size, threads, 0

    def __call__(self):
        import nostall
        self.seed += 1
        c0, t0, n, boxes = cpu_now(), time.perf_counter(), 0, 0
        with nostall.Loader(self.ann, task="detect", box_crop="iou", out_height=OUT, out_width=OUT,
                            output="float", mode="train", batch_size=self.batch_size,
                            threads=self.threads, seed=self.seed, max_boxes=100, epochs=1) as ld:
            for b in ld:
                n += b["image"].shape[0]
                boxes += int(b["box_count"].sum())
        return {"images": n, "seconds": time.perf_counter() - t0, "cpu_seconds": cpu_now() - c0,
                "boxes": boxes}


def summarize(samples):
    ips = [s["images"] / s["seconds"] for s in samples]
    ipc = [s["images"] / s["cpu_seconds"] for s in samples if s["cpu_seconds"] > 0]
    return {"images_per_s": statistics.median(ips), "images_per_cpu_s": statistics.median(ipc),
            "images_per_s_all": ips, "images_per_cpu_s_all": ipc,
            "boxes_per_image": statistics.median(s["boxes"] / s["images"] for s in samples)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", help="dataset folder (instances.json + images/); made if missing")
    ap.add_argument("--images", type=int, default=256)
    ap.add_argument("--width", type=int, default=640)
    ap.add_argument("--height", type=int, default=480)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--two", action="store_true", help="also threads=2 against num_workers=2")
    ap.add_argument("--out", help="JSON with every sample")
    a = ap.parse_args()
    cli = os.environ.get("NOSTALL_CLI") or os.path.join(ROOT, "build", "nostall")
    os.environ.setdefault("NOSTALL_LIBRARY", os.path.join(ROOT, "build", "libnostall.so"))
    data = a.data or os.path.join(tempfile.gettempdir(), "nostall-detect-%dx%d-%d" % (a.width, a.height, a.images))
    ann = os.path.join(data, "instances.json")
    if not os.path.exists(ann):
        subprocess.run([cli, "gen", "--task", "detect", data, "--images", str(a.images), "--width",
                        str(a.width), "--height", str(a.height), "--force"], check=True)
    size = sum(os.path.getsize(os.path.join(data, "images", f)) for f in os.listdir(os.path.join(data, "images")))
    import PIL
    import torch
    import torchvision
    info = {"machine": machine(), "versions": {"torch": torch.__version__, "torchvision": torchvision.__version__,
                                               "PIL": PIL.__version__},
            "dataset": {"path": data, "images": a.images, "width": a.width, "height": a.height,
                        "mean_file_kb": size / a.images / 1e3},
            "config": {"out": OUT, "batch_size": a.batch_size, "rounds": a.rounds}}
    systems = [("nostall, 1 thread", NostallRun(ann, a.batch_size, 1)),
               ("torchvision, num_workers=0", TorchvisionRun(data, ann, a.batch_size, 0))]
    if a.two:
        systems += [("nostall, 2 threads", NostallRun(ann, a.batch_size, 2)),
                    ("torchvision, num_workers=2", TorchvisionRun(data, ann, a.batch_size, 2))]
    info["config"]["coco"] = systems[1][1].coco
    for name, run in systems:  # warm-up
        log("warm-up: %s" % name)
        run()
    samples = {name: [] for name, _ in systems}
    for r in range(a.rounds):
        for name, run in systems:
            s = run()
            samples[name].append(s)
            log("round %d: %-28s %7.1f images/s, %7.1f images/CPU-s" % (r + 1, name, s["images"] / s["seconds"],
                                                                           s["images"] / s["cpu_seconds"]))
    res = {name: summarize(s) for name, s in samples.items()}
    info["results"] = res
    info["samples"] = samples
    print("\n%s, %d cores; %d images %dx%d (%.0f KB each), out %dx%d, batch %d, %d rounds (medians)"
          % (info["machine"].get("cpu", "?"), os.cpu_count(), a.images, a.width, a.height,
             info["dataset"]["mean_file_kb"], OUT, OUT, a.batch_size, a.rounds))
    print("| system | images/s | images per CPU-second |")
    print("|---|---:|---:|")
    for name in res:
        print("| %s | %.1f | %.1f |" % (name, res[name]["images_per_s"], res[name]["images_per_cpu_s"]))
    pairs = [("nostall, 1 thread", "torchvision, num_workers=0")]
    if a.two:
        pairs.append(("nostall, 2 threads", "torchvision, num_workers=2"))
    info["ratios"] = {}
    for x, y in pairs:
        rw = res[x]["images_per_s"] / res[y]["images_per_s"]
        rc = res[x]["images_per_cpu_s"] / res[y]["images_per_cpu_s"]
        info["ratios"]["%s / %s" % (x, y)] = {"wall": rw, "cpu": rc}
        print("ratio %s / %s: %.2fx images/s, %.2fx images per CPU-second" % (x, y, rw, rc))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(info, f, indent=1)


if __name__ == "__main__":
    main()
