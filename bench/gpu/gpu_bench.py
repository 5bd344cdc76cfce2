"""The GPU validation kit's steps (bench/gpu/run.sh calls each in turn).

    python gpu_bench.py STEP --out DIR --data DIR --profile quick|full|rehearse

Steps (each merges its figures into DIR/gpu.json and rewrites DIR/gpu.md as
soon as it has them, so a run cut short keeps what it measured):

  info         the machine: GPU, driver, CPUs, torch and torchvision versions
  gen          the dataset, made there by `nostall gen` in one process per
               core (--images, --classes, --size), merged into one folder
  correctness  the GPU paths of the binding: pin_memory (the ring is page-
               locked: zero-copy batches are pinned tensors), device="cuda"
               (every device batch equals the host batch byte for byte, float
               and uint8), normalize_on_device (against the library's own
               normalization), ring slots released once their copies are done
               (an epoch of many more batches than slots, every device batch
               kept, none overwritten before its copy, no lease left); then
               pytest on the binding's GPU tests when pytest is there
  gpuloader    the loader with decode_device="cuda" (nvJPEG + CUDA kernels,
               the device ring; run.sh sets NOSTALL_GPU_UNVALIDATED=1 for this
               step only) on the gen step's JPEGs, RandomResizedCrop 224 float,
               in processes pinned to 2 cores: threads 1 and 2 (images/s,
               process CPU time / wall, p50/p99 of the gaps between batches
               ready after torch.cuda.synchronize(), the stats' decode
               counters; checksums of the first batches: equal for 1 and 2
               threads), PSNR of uint8 items vs decode_device=cpu (same seed),
               torchvision's batched decode_jpeg(list, device="cuda") + v2
               RandomResizedCrop/flip/normalize (file bytes read in the main
               thread), and ResNet-50 fed by nostall's GPU decode; skipped
               without a CUDA device
  accel        the accelerator's own rate: the model's training step on one
               repeated batch (images/s)
  cores        cores per GPU: nostall vs torchvision ImageFolder + DataLoader
               (num_workers=n-1, pin_memory, persistent_workers) in a process
               pinned to n cores (taskset): images/s, GPU busy fraction (CUDA
               events around each step), data stall fraction (time in next()),
               host CPU used (busy time of the n cores, /proc/stat)
  analyze      nostall.analyze() on the real step at 4 threads, predicting 2,
               8 and 16; then the loader and step measured at those counts
  echo         (full profile) data echoing with emulated slow storage making
               the pipeline about 4x slower than a ResNet-18 step: e = 1, 2,
               4 and adaptive (echo_max 8)

run.sh also calls `note --key K --json VALUE` to record what a step could
not (a time-out; the run's date, commit and libraries): a dict merges into
what is there. `cores-worker` is one configuration of step `cores`, in the
process taskset pinned to its cores; it prints its figures as a JSON line.

Profiles: quick and full are the GPU runs (ResNet-50, 224 px, batch 256,
bf16 autocast, channels_last, SGD); rehearse runs the same code on the CPU
with tiny sizes (ResNet-18 at 64 px, batch 16, float32), so that the kit is
exercised where there is no GPU; the GPU-only checks then say they were
skipped. Works with torch 1.13 and 2.x (APIs that differ are guarded).
"""

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))

PROFILES = {
    # model, crop, batch; accel warm-up/steps; cores: counts, warm-up batches,
    # measured batches, seconds cap per configuration; analyze: batches per run
    "quick": dict(model="resnet50", crop=224, batch=256, device="cuda", accel_warm=8,
                  accel_steps=25, cores=[2, 4, 8, 16], warm=2, batches=20, cap_s=10,
                  analyze_batches=10, threads=[2, 8, 16], echo=False),
    "full": dict(model="resnet50", crop=224, batch=256, device="cuda", accel_warm=10,
                 accel_steps=50, cores=[2, 4, 8, 16], warm=3, batches=40, cap_s=30,
                 analyze_batches=20, threads=[2, 8, 16], echo=True),
    "rehearse": dict(model="resnet18", crop=64, batch=4, device="cpu", accel_warm=1,
                     accel_steps=2, cores=[2], warm=1, batches=2, cap_s=60,
                     analyze_batches=2, threads=[2, 8, 16], echo=True),
}


# --- the results files ----------------------------------------------------------

def record(out, step, value):
    """Merge {step: value} into out/gpu.json (atomically) and rewrite gpu.md."""
    path = os.path.join(out, "gpu.json")
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        doc = {}
    doc[step] = value
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
    os.replace(tmp, path)
    tmp = os.path.join(out, "gpu.md.tmp")
    with open(tmp, "w") as f:
        f.write(markdown(doc))
    os.replace(tmp, os.path.join(out, "gpu.md"))
    return doc


def fmt(v, spec="%.0f"):
    return "—" if v is None else spec % v


def markdown(doc):
    """The tables for docs/gpu.md, from what gpu.json holds so far."""
    lines = []
    info = doc.get("info") or {}
    run = doc.get("run") or {}
    lines.append("## GPU run: %s, profile %s" % (run.get("date", "?"), run.get("profile", "?")))
    lines.append("")
    lines.append("Machine: %s (driver %s), %s CPUs, %s; torch %s, torchvision %s; nostall %s."
                 % (info.get("gpu"), info.get("driver"), info.get("cpus"), info.get("os"),
                    info.get("torch"), info.get("torchvision"), run.get("commit")))
    if run.get("data"):
        lines.append("Data: %s." % run["data"])
    lines.append("")
    for step in ("correctness", "gpudecode", "gpuloader", "accel", "cores", "analyze", "echo"):
        v = doc.get(step)
        if v is None:
            continue
        if v.get("status") != "ok":
            lines.append("**%s**: %s%s" % (step, v.get("status"),
                                            ": " + v["reason"] if v.get("reason") else ""))
            lines.append("")
        if step == "correctness" and (v.get("checks") or v.get("pytest")):
            lines.append("| check | result | detail |")
            lines.append("|---|---|---|")
            for c in v.get("checks", []):
                lines.append("| %s | %s | %s |" % (c["name"], c["result"], c.get("detail", "")))
            if v.get("pytest"):
                lines.append("| pytest (GPU cases) | %s | %s |" % (v["pytest"]["result"],
                                                                  v["pytest"].get("summary", "")))
            lines.append("")
        elif step == "gpudecode" and "psnr_db_min" in v:
            lines.append("decode_device=gpu (nvJPEG + CUDA kernels, one thread, %d JPEGs to %s): "
                         "kernels %s; PSNR of the uint8 items vs the CPU path min %.1f dB, mean %.1f dB; batch "
                         "%.1f ms (p50), %.1f ms (max): **%.0f images/s**; %d CPU-decoded."
                         % (v["items"], v["output"], "exact" if v["kernels_exact"] else "DIFFER",
                            v["psnr_db_min"], v["psnr_db_mean"], v["batch_ms_p50"],
                            v["batch_ms_max"], v["images_per_s"], v["cpu_decoded"]))
            if "hw_decoded" in v:  # the engine nvJPEG reported per JPEG
                lines.append("Decoded by nvJPEG's hardware engines: %d; by its default backend: %d."
                             % (v["hw_decoded"], v["default_decoded"]))
            if "device_ring" in v:  # gpu_output=device's ring: bytes in place, release waits
                lines.append("Device ring (gpu_output=device): %s."
                             % ("pass" if v["device_ring"] else "FAIL"))
            lines.append("")
        elif step == "gpuloader" and v.get("rows"):
            lines.append("Loader with decode_device=\"cuda\" (nvJPEG, gpu_output=device, "
                         "RandomResizedCrop 224 float, train), process pinned to 2 cores; "
                         "bytes equal for 1 and 2 threads: %s." % v.get("bytes_equal_1_vs_2_threads"))
            lines.append("")
            lines.append("| configuration | images/s | CPU cores | batch p50 ms | p99 ms | p99/p50 | detail |")
            lines.append("|---|---|---|---|---|---|---|")
            for r in v["rows"]:
                if r.get("status") not in ("ok", "FAIL"):
                    lines.append("| %s | %s%s | | | | | |" % (
                        r["config"], r.get("status"), ": " + r["reason"] if r.get("reason") else ""))
                    continue
                detail = ""
                if r["config"] == "psnr":
                    detail = "%s: PSNR vs CPU path min %s dB, mean %s dB over %d items" % (
                        r["status"], fmt(r.get("psnr_db_min"), "%.1f"),
                        fmt(r.get("psnr_db_mean"), "%.1f"), r.get("items", 0))
                elif r.get("backend_split"):
                    b = r["backend_split"]
                    detail = "decoded by: " + ", ".join(
                        "%s %d (%s)" % (name, b[name], "—" if b[name + "_fraction"] is None
                                        else "%.0f%%" % (100 * b[name + "_fraction"]))
                        for name, _ in GL_SPLIT)
                elif r["config"] == "resnet50":
                    detail = "GPU busy %.0f%%, stall %.0f%%" % (100 * r["busy_fraction"],
                                                                100 * r["stall_fraction"])
                lines.append("| %s | %s | %s | %s | %s | %s | %s |" % (
                    r["config"], fmt(r.get("images_per_s")), fmt(r.get("cpu_cores_used"), "%.2f"),
                    fmt(r.get("batch_ms_p50"), "%.1f"), fmt(r.get("batch_ms_p99"), "%.1f"),
                    fmt(r.get("p99_over_p50"), "%.2f"), detail))
            lines.append("")
        elif step == "accel" and "images_per_s" in v:
            lines.append("Accelerator alone (%s, batch %d, %d px, %s): **%.0f images/s** "
                         "(%.1f ms per step)." % (v["model"], v["batch"], v["crop"], v["precision"],
                                                  v["images_per_s"], v["step_ms"]))
            lines.append("")
        elif step == "cores" and v.get("rows"):
            lines.append("| cores | loader | images/s | GPU busy | data stall | host CPU (cores) |")
            lines.append("|---|---|---|---|---|---|")
            for r in v["rows"]:
                if r.get("status") != "ok":
                    lines.append("| %s | %s | %s | | | |" % (r["cores"], r["loader"], r.get("status")))
                    continue
                lines.append("| %d | %s | %.0f | %.0f%% | %.0f%% | %.1f |" % (
                    r["cores"], r["loader"], r["images_per_s"], 100 * r["busy_fraction"],
                    100 * r["stall_fraction"], r["cpu_cores_used"]))
            lines.append("")
        elif step == "analyze" and v.get("rows"):
            lines.append("Analyzer measured at %d threads: bound **%s**, stall %s." % (
                v["threads"], v.get("bound"), fmt(v.get("stall_fraction"), "%.2f")))
            lines.append("")
            lines.append("| threads | predicted images/s | measured images/s | predicted stall "
                         "| measured stall | predicted bound |")
            lines.append("|---|---|---|---|---|---|")
            for r in v["rows"]:
                lines.append("| %d | %s | %s | %s | %s | %s |" % (
                    r["threads"], fmt(r.get("predicted_images_per_s")),
                    fmt(r.get("measured_images_per_s")),
                    fmt(r.get("predicted_stall_fraction"), "%.2f"),
                    fmt(r.get("measured_stall_fraction"), "%.2f"), r.get("predicted_bound")))
            lines.append("")
        elif step == "echo" and v.get("rows"):
            lines.append("Echoing (%s, step %.1f ms, storage %.2f MB/s: R ≈ %.1f):" % (
                v["model"], v["step_ms"], v["storage_mbps"], v["r_target"]))
            lines.append("")
            lines.append("| echo | delivered images/s | fresh images/s | achieved factor | GPU busy |")
            lines.append("|---|---|---|---|---|")
            for r in v["rows"]:
                if r.get("status") != "ok":
                    lines.append("| %s | %s | | | |" % (r["echo"], r.get("status")))
                    continue
                lines.append("| %s | %.0f | %.0f | %.2f | %.0f%% |" % (
                    r["echo"], r["images_per_s"], r["fresh_per_s"], r["factor"],
                    100 * r["busy_fraction"]))
            lines.append("")
    return "\n".join(lines) + "\n"


# --- the model and its step -----------------------------------------------------

class Trainer:
    """model + SGD + one training step; on CUDA: bf16 autocast (where the GPU
    has bf16), channels_last; step times from CUDA events (else the clock)."""

    def __init__(self, torch, name, device, threads=None):
        import torchvision
        self.torch = torch
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        if threads:
            torch.set_num_threads(threads)
        self.model = getattr(torchvision.models, name)(num_classes=1000).to(self.device)
        self.channels_last = self.cuda and hasattr(torch, "channels_last")
        if self.channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)
        self.model.train()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.bf16 = (self.cuda and hasattr(torch, "autocast")
                     and torch.cuda.is_bf16_supported())
        self.precision = ("bf16 autocast" if self.bf16 else "float32") + \
            (", channels_last" if self.channels_last else "")
        self.events = []   # (start, end) CUDA events of the timed steps
        self.busy_s = 0.0  # CPU device: time in the step

    def _autocast(self):
        if self.bf16:
            return self.torch.autocast("cuda", dtype=self.torch.bfloat16)
        return contextlib.nullcontext()

    def step(self, x, y, timed=False):
        torch = self.torch
        if self.cuda:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
        else:
            t0 = time.perf_counter()
        x = x.to(self.device, non_blocking=True)
        y = y.to(self.device, non_blocking=True).long()
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        with self._autocast():
            loss = torch.nn.functional.cross_entropy(self.model(x), y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        if self.cuda:
            end.record()
            if timed:
                self.events.append((start, end))
        elif timed:
            self.busy_s += time.perf_counter() - t0

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def busy_seconds(self):
        """Seconds the device spent in the timed steps (after sync())."""
        if self.cuda:
            return sum(s.elapsed_time(e) for s, e in self.events) * 1e-3
        return self.busy_s

    def reset(self):
        self.events, self.busy_s = [], 0.0


def synthetic_batch(torch, p, classes=10):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(p["batch"], 3, p["crop"], p["crop"], generator=g)
    y = torch.randint(0, classes, (p["batch"],), generator=g)
    return x, y


# --- steps -----------------------------------------------------------------------

def step_info(a, p):
    import torch
    import torchvision
    info = {"cpus": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)),
            "torch": torch.__version__, "torchvision": torchvision.__version__,
            "python": platform.python_version(), "cuda_available": torch.cuda.is_available(),
            "os": platform.platform()}
    try:
        with open("/etc/os-release") as f:
            rel = dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)
        info["os"] = rel.get("PRETTY_NAME", info["os"]).strip('"')
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as f:
            info["memory_gib"] = round(int(f.readline().split()[1]) / 2 ** 20, 1)
    except (OSError, ValueError, IndexError):
        pass
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["gpu_count"] = torch.cuda.device_count()
        info["cuda"] = torch.version.cuda
        info["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2 ** 30, 1)
        info["bf16"] = torch.cuda.is_bf16_supported()
    else:
        info["gpu"] = "none (CPU rehearsal)" if a.profile == "rehearse" else "none"
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                            "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
        if r.returncode == 0 and r.stdout.strip():
            info["nvidia_smi"] = r.stdout.strip()
            info["driver"] = r.stdout.strip().splitlines()[0].split(",")[1].strip()
    except (OSError, subprocess.TimeoutExpired):
        info["nvidia_smi"] = None
    info.setdefault("driver", None)
    try:  # DataLoader workers pass batches through /dev/shm (containers often give 64 MB)
        st = os.statvfs("/dev/shm")
        info["dev_shm_gib"] = round(st.f_blocks * st.f_frsize / 2 ** 30, 2)
    except OSError:
        info["dev_shm_gib"] = None
    info["status"] = "ok"
    print("machine: %s (driver %s), %d CPUs, %s, torch %s, torchvision %s" % (
        info["gpu"], info["driver"], info["cpus"], info["os"], info["torch"], info["torchvision"]))
    return info


def step_correctness(a, p):
    import gc
    import torch
    import nostall
    if not torch.cuda.is_available():
        print("correctness: skipped (no CUDA device: the GPU paths cannot run here)")
        return run_pytest(a, {"status": "skipped", "reason": "no CUDA device"})
    checks = []

    def check(name, ok, detail=""):
        checks.append({"name": name, "result": "pass" if ok else "FAIL", "detail": detail})
        print("  %s %s %s" % ("pass" if ok else "FAIL", name, detail))

    # small: many more batches than ring slots
    opts = dict(batch_size=8, crop=32, threads=4, seed=5)

    def host(**kw):
        out = []
        with nostall.Loader(a.small, copy=True, **dict(opts, **kw)) as ld:
            ld.set_epoch(0)
            for x, y in ld:
                out.append((ld.last_indices.tolist(), x.clone(), y.clone()))
        return out

    ref = host()
    # 1. pin_memory: zero-copy batches view the page-locked ring
    with nostall.Loader(a.small, pin_memory=True, **opts) as ld:
        ld.set_epoch(0)
        pinned = same = n = 0
        for (x, y), (_, rx, ry) in zip(ld, ref):
            n += 1
            pinned += bool(x.is_pinned())
            same += bool(torch.equal(x, rx) and torch.equal(y, ry))
    check("pin_memory: batches are pinned", pinned == n > 0, "%d/%d pinned" % (pinned, n))
    check("pin_memory: bytes as without it", same == n == len(ref), "%d/%d equal" % (same, n))
    # 2. device="cuda": device batches equal the host batches byte for byte
    for output in ("float", "uint8"):
        r = ref if output == "float" else host(output="uint8")
        with nostall.Loader(a.small, device="cuda", pin_memory=True, output=output, **opts) as ld:
            ld.set_epoch(0)
            equal = cuda = n = 0
            for (x, y), (_, rx, ry) in zip(ld, r):
                n += 1
                cuda += bool(x.is_cuda and y.is_cuda)
                equal += bool(torch.equal(x.cpu(), rx) and torch.equal(y.cpu(), ry))
        check("device=cuda output=%s: on the device" % output, cuda == n == len(r),
              "%d/%d" % (cuda, len(r)))
        check("device=cuda output=%s: byte-equal to host" % output, equal == n == len(r),
              "%d/%d batches" % (equal, len(r)))
    # 3. normalize_on_device: against the library's float normalization
    with nostall.Loader(a.small, device="cuda", output="uint8", normalize_on_device=True,
                        **opts) as ld:
        ld.set_epoch(0)
        worst, n, exact = 0.0, 0, 0
        for (x, _), (_, rx, _) in zip(ld, ref):
            n += 1
            d = (x.cpu() - rx).abs().max().item() if x.shape == rx.shape else float("inf")
            worst = max(worst, d)
            exact += bool(x.shape == rx.shape and torch.equal(x.cpu(), rx))
    check("normalize_on_device: matches host float (atol 1e-5)", n == len(ref) and worst <= 1e-5,
          "max |diff| %.2g, %d/%d bit-identical" % (worst, exact, n))
    # 4. slots released after the copy: keep every device batch of an epoch
    # of many more batches than the ring has slots; no batch is overwritten
    # before its copy is done, and no lease is left once copies complete.
    with nostall.Loader(a.small, device="cuda", pin_memory=True, **opts) as ld:
        slots = ld.info()["ring_slots"]
        ld.set_epoch(0)
        kept = [(x, y) for x, y in ld]
        torch.cuda.synchronize()
        ld._reap(wait=True)
        gc.collect()
        leases = ld._core.leases
    equal = sum(bool(torch.equal(x.cpu(), rx) and torch.equal(y.cpu(), ry))
                for (x, y), (_, rx, ry) in zip(kept, ref))
    check("slot release: every kept device batch intact", len(kept) == len(ref) > slots and
          equal == len(ref), "%d batches, %d ring slots, %d equal" % (len(kept), slots, equal))
    check("slot release: no lease left after the copies", leases == 0, "%d leases" % leases)
    del kept
    result = {"status": "ok" if all(c["result"] == "pass" for c in checks) else "failed",
              "checks": checks}
    return run_pytest(a, result)


def run_pytest(a, result):
    """pytest on the binding's GPU cases (without CUDA: they skip, and the
    CPU case of pin_memory runs), when pytest is there."""
    import importlib.util
    if importlib.util.find_spec("pytest") is None:
        result["pytest"] = {"result": "not run", "summary": "pytest not installed: the checks "
                            "above are the standalone equivalent"}
        return result
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        os.path.join(ROOT, "tests", "python", "test_pyface.py"), "-k",
                        "device or pin_memory or slot"], capture_output=True, text=True,
                       timeout=max(30, a.budget - 30), cwd=ROOT)
    summary = (r.stdout.strip().splitlines() or [""])[-1]
    result["pytest"] = {"result": "pass" if r.returncode == 0 else "FAIL", "summary": summary}
    print("  pytest: %s" % summary)
    if r.returncode != 0:
        result["status"] = "failed"
        print(r.stdout[-4000:] + r.stderr[-2000:])
    return result


def step_accel(a, p):
    import torch
    tr = Trainer(torch, p["model"], p["device"], threads=1 if p["device"] == "cpu" else None)
    x, y = synthetic_batch(torch, p)
    if tr.cuda:
        x, y = x.to(tr.device), y.to(tr.device)
    for _ in range(p["accel_warm"]):
        tr.step(x, y)
    tr.sync()
    t0 = time.perf_counter()
    for _ in range(p["accel_steps"]):
        tr.step(x, y, timed=True)
    tr.sync()
    wall = time.perf_counter() - t0
    busy = tr.busy_seconds()
    v = {"status": "ok", "model": p["model"], "batch": p["batch"], "crop": p["crop"],
         "precision": tr.precision, "device": str(tr.device), "steps": p["accel_steps"],
         "wall_s": wall, "images_per_s": p["batch"] * p["accel_steps"] / wall,
         "step_ms": 1e3 * wall / p["accel_steps"], "busy_fraction": busy / wall}
    print("accelerator: %s %.0f images/s (%.1f ms/step)" % (p["model"], v["images_per_s"],
                                                            v["step_ms"]))
    return v


def cpu_busy(cpus):
    """Busy seconds so far of the given CPUs (all but idle and iowait)."""
    tick = os.sysconf("SC_CLK_TCK")
    busy = 0
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("cpu") and line[3:4].isdigit():
                parts = line.split()
                if int(parts[0][3:]) in cpus:
                    vals = [int(v) for v in parts[1:]]
                    busy += sum(vals[:8]) - vals[3] - vals[4]
    return busy / tick


def measure(tr, batches, warm, n, cap_s):
    """Warm-up, then up to n batches or cap_s seconds of loader + step."""
    it = iter(batches)

    def take():
        nonlocal it
        try:
            return next(it)
        except StopIteration:
            it = iter(batches)
            return next(it)
    for _ in range(warm):
        x, y = take()[:2]
        tr.step(x, y)
    tr.sync()
    tr.reset()
    cpus = os.sched_getaffinity(0)
    c0, t0 = cpu_busy(cpus), time.perf_counter()
    wait, done = 0.0, 0
    while done < n and time.perf_counter() - t0 < cap_s:
        w = time.perf_counter()
        x, y = take()[:2]
        wait += time.perf_counter() - w
        tr.step(x, y, timed=True)
        done += 1
    tr.sync()
    wall = time.perf_counter() - t0
    return {"batches": done, "wall_s": wall, "images_per_s": done * len(y) / wall,
            "busy_fraction": tr.busy_seconds() / wall, "stall_fraction": wait / wall,
            "cpu_cores_used": (cpu_busy(cpus) - c0) / wall}


def torchvision_loader(torch, p, data, workers):
    import torchvision
    import torchvision.transforms as T
    tf = T.Compose([T.RandomResizedCrop(p["crop"]), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    ds = torchvision.datasets.ImageFolder(data, transform=tf)
    return torch.utils.data.DataLoader(ds, batch_size=p["batch"], shuffle=True,
                                       num_workers=workers, drop_last=True,
                                       pin_memory=torch.cuda.is_available(),
                                       persistent_workers=True)


def cores_worker(a, p):
    """One configuration in a process pinned to a.cores CPUs: a JSON line."""
    import torch
    import nostall
    workers = max(1, a.cores - 1)
    tr = Trainer(torch, p["model"], p["device"], threads=1 if p["device"] == "cpu" else None)
    if a.loader == "nostall":
        kw = dict(batch_size=p["batch"], crop=p["crop"], threads=workers, seed=1, drop_last=True)
        if tr.cuda:
            kw.update(device="cuda", pin_memory=True, output="uint8", normalize_on_device=True)
        loader = nostall.Loader(a.data, **kw)
    else:
        loader = torchvision_loader(torch, p, a.data, workers)
    # the measured part's cap: what the parent's time limit leaves after
    # start-up (imports, CUDA, the model, workers) and the warm-up
    r = measure(tr, loader, p["warm"], p["batches"], min(p["cap_s"], a.cap or p["cap_s"]))
    if a.loader == "nostall":
        loader.close()
    r.update(status="ok", cores=a.cores, loader=a.loader, workers=workers)
    print(json.dumps(r))


def step_cores(a, p, doc_rows):
    n_cpu = len(os.sched_getaffinity(0))
    counts = [c for c in p["cores"] if c <= n_cpu]
    if not counts:
        return {"status": "skipped", "reason": "fewer CPUs than %s" % p["cores"]}
    per = max(18, (a.budget - 5) / (2 * len(counts)))
    cpus = sorted(os.sched_getaffinity(0))
    for c in counts:
        for loader in ("nostall", "torchvision"):
            cmd = [sys.executable, os.path.abspath(__file__), "cores-worker", "--out", a.out,
                   "--data", a.data, "--profile", a.profile, "--cores", str(c), "--loader", loader,
                   "--cap", str(max(3.0, per - 15))]
            mask = ",".join(str(i) for i in cpus[:c])
            try:
                subprocess.run(["taskset", "--version"], capture_output=True)
                cmd = ["taskset", "-c", mask] + cmd
            except OSError:  # no taskset: the worker pins itself
                cmd += ["--pin", mask]
            row = {"cores": c, "loader": loader}
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=per)
                lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
                if r.returncode == 0 and lines:
                    row = json.loads(lines[-1])
                else:
                    row.update(status="failed (exit %d)" % r.returncode,
                               error=(r.stderr or r.stdout)[-1500:])
                    sys.stderr.write(r.stderr[-3000:])
            except subprocess.TimeoutExpired:
                row.update(status="timeout after %.0f s" % per)
            doc_rows.append(row)
            print("  cores %d %-11s %s" % (c, loader, row.get("status") if row.get("status") != "ok"
                  else "%.0f images/s, busy %.0f%%, stall %.0f%%, %.1f cores" % (
                      row["images_per_s"], 100 * row["busy_fraction"],
                      100 * row["stall_fraction"], row["cpu_cores_used"])))
            record(a.out, "cores", {"status": "running", "rows": doc_rows})
    ok = all(r.get("status") == "ok" for r in doc_rows)
    return {"status": "ok" if ok else "partial", "rows": doc_rows, "counts": counts}


def step_analyze(a, p):
    import torch
    import nostall
    tr = Trainer(torch, p["model"], p["device"], threads=1 if p["device"] == "cpu" else None)

    def train_step(x, y):
        tr.step(x, y)
        tr.sync()  # the analyzer times the step by the clock: wait for the device

    base = dict(batch_size=p["batch"], crop=p["crop"], seed=1, drop_last=True)
    if tr.cuda:
        base["pin_memory"] = True
    r = nostall.analyze(train_step, a.data, threads=4, max_batches=p["analyze_batches"],
                        predict=["threads=%d" % t for t in p["threads"]], progress=False, **base)
    with open(os.path.join(a.out, "analyze.txt"), "w") as f:
        f.write(r.text)
    meas = r.get("measured", {})
    v = {"status": "running", "threads": 4, "bound": r.get("bound"),
         "stall_fraction": meas.get("stall_fraction"), "measured": meas,
         "predictions": r.get("predictions"), "rows": []}
    nb = r.get("measurements", {}).get("batches_per_epoch")
    for t, pred in zip(p["threads"], r.get("predictions") or []):
        pr = pred.get("prediction", {})
        row = {"threads": t, "predicted_bound": pr.get("bound"),
               "predicted_stall_fraction": pr.get("stall_fraction"),
               "predicted_epoch_s": pr.get("epoch_s")}
        items = pr.get("delivered_items") or (nb * p["batch"] if nb else None)
        if pr.get("epoch_s") and items:
            row["predicted_images_per_s"] = items / pr["epoch_s"]
        v["rows"].append(row)
    record(a.out, "analyze", v)
    for row in v["rows"]:
        with nostall.Loader(a.data, threads=row["threads"], **base) as ld:
            m = measure(tr, ld, p["warm"], p["analyze_batches"], p["cap_s"])
        row.update(measured_images_per_s=m["images_per_s"],
                   measured_stall_fraction=m["stall_fraction"],
                   measured_busy_fraction=m["busy_fraction"])
        print("  threads %d: predicted %s images/s stall %s; measured %.0f images/s stall %.2f" % (
            row["threads"], fmt(row.get("predicted_images_per_s")),
            fmt(row.get("predicted_stall_fraction"), "%.2f"), m["images_per_s"],
            m["stall_fraction"]))
        record(a.out, "analyze", v)
    v["status"] = "ok"
    return v


def step_echo(a, p):
    import torch
    import nostall
    if not p["echo"]:
        return {"status": "skipped", "reason": "full profile only"}
    model = "resnet18"
    tr = Trainer(torch, model, p["device"], threads=1 if p["device"] == "cpu" else None)
    x, y = synthetic_batch(torch, p)
    for _ in range(p["warm"]):
        tr.step(x, y)
    tr.sync()
    t0 = time.perf_counter()
    for _ in range(p["accel_steps"]):
        tr.step(x, y)
    tr.sync()
    step_s = (time.perf_counter() - t0) / p["accel_steps"]
    sizes = []
    for d, _, files in os.walk(a.data):
        sizes += [os.path.getsize(os.path.join(d, f)) for f in files[:50]]
        if len(sizes) > 500:
            break
    mean_bytes = sum(sizes) / max(1, len(sizes))
    r_target = 4.0
    # storage alone makes a batch take R steps
    mbps = p["batch"] * mean_bytes / (r_target * step_s) / 1e6
    v = {"status": "running", "model": model, "step_ms": 1e3 * step_s, "storage_mbps": mbps,
         "r_target": r_target, "mean_file_bytes": mean_bytes, "rows": []}
    threads = max(1, len(os.sched_getaffinity(0)) - 1)
    configs = [("1", dict(echo="fixed", echo_factor=1)), ("2", dict(echo="fixed", echo_factor=2)),
               ("4", dict(echo="fixed", echo_factor=4)),
               ("adaptive", dict(echo="adaptive", echo_max=8))]
    if a.profile == "rehearse":  # each way once (fixed, adaptive), in less time
        configs = configs[1:2] + configs[3:]
    for name, ecfg in configs:
        kw = dict(batch_size=p["batch"], crop=p["crop"], threads=threads, seed=1,
                  storage_mbps=mbps, drop_last=True, **ecfg)
        if tr.cuda:
            kw.update(device="cuda", pin_memory=True, output="uint8", normalize_on_device=True)
        with nostall.Loader(a.data, **kw) as ld:
            s0 = ld.stats()
            m = measure(tr, ld, p["warm"], p["batches"], p["cap_s"])
            s1 = ld.stats()
        fresh = s1["fresh_items"] - s0["fresh_items"]
        got = s1["items_delivered"] - s0["items_delivered"]
        row = {"echo": name, "status": "ok", "images_per_s": m["images_per_s"],
               "busy_fraction": m["busy_fraction"], "stall_fraction": m["stall_fraction"],
               "factor": got / fresh if fresh else None,
               "fresh_per_s": m["images_per_s"] * (fresh / got if got else 0)}
        v["rows"].append(row)
        print("  echo %-8s %.0f images/s (%.0f fresh), busy %.0f%%" % (
            name, row["images_per_s"], row["fresh_per_s"], 100 * row["busy_fraction"]))
        record(a.out, "echo", v)
    v["status"] = "ok"
    return v


# --- gpuloader: the loader with decode_device=gpu (issue 37) --------------------

GL_STATS = ("decode_items", "decode_busy_ns", "augment_items", "augment_busy_ns",
            "worker_idle_ns", "consumer_wait_ns", "skipped", "gpu_hw_items",
            "gpu_default_items", "gpu_cpu_items")
GL_SPLIT = (("hardware", "gpu_hw_items"), ("default", "gpu_default_items"),
            ("cpu", "gpu_cpu_items"))


def gl_split(stats):
    """The per-backend split of the items the route decoded in the measured
    window (stats gpu_hw_items, gpu_default_items, gpu_cpu_items: nvJPEG's
    hardware engines, its default backend, nostall's CPU decoder), counts
    and fractions; None from a libnostall without those counters."""
    if not all(k in stats for _, k in GL_SPLIT):
        return None
    split = {name: stats[k] for name, k in GL_SPLIT}
    total = sum(split.values())
    split["items"] = total
    for name, _ in GL_SPLIT:
        split[name + "_fraction"] = split[name] / total if total else None
    return split


def tv_version_ok(torchvision):
    """torchvision >= 0.19: decode_jpeg takes a list with device="cuda" (batched)."""
    try:
        major, minor = (int(x) for x in torchvision.__version__.split("+")[0].split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (0, 19)


def gl_files(data, seed):
    """The ImageFolder's JPEGs and labels, shuffled by seed (torchvision's run)."""
    import random
    classes = sorted(d for d in os.listdir(data) if os.path.isdir(os.path.join(data, d)))
    files = [(os.path.join(data, c, f), k) for k, c in enumerate(classes)
             for f in sorted(os.listdir(os.path.join(data, c)))]
    random.Random(seed).shuffle(files)
    return files


def gl_time(torch, batches, warm, n, deadline, keep=0):
    """Warm-up batches (the first `keep` copied to the host: their sha256),
    then up to n batches, stopping at `deadline` (time.perf_counter()) once
    2 are measured; each batch's ready time taken after
    torch.cuda.synchronize(). Returns the figures."""
    import hashlib
    import resource
    it = iter(batches)
    sums = []
    for i in range(warm):
        x = next(it)[0]
        if i < keep:
            sums.append(hashlib.sha256(x.cpu().contiguous().numpy().tobytes()).hexdigest()[:16])
        del x
    torch.cuda.synchronize()

    def cpu_s():
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime
    c0, t0 = cpu_s(), time.perf_counter()
    ready, items = [t0], 0
    while len(ready) <= n and (len(ready) < 3 or time.perf_counter() < deadline):
        try:
            b = next(it)
        except StopIteration:  # the epoch ended: what was measured stands
            break
        items += len(b[0])
        del b
        torch.cuda.synchronize()
        ready.append(time.perf_counter())
    wall = ready[-1] - t0
    gaps = sorted(1e3 * (b - a) for a, b in zip(ready, ready[1:]))

    def pct(q):
        return gaps[min(len(gaps) - 1, int(q * len(gaps)))] if gaps else None
    r = {"batches": len(gaps), "wall_s": wall, "images_per_s": items / wall if wall else 0,
         "cpu_cores_used": (cpu_s() - c0) / wall if wall else 0,
         "batch_ms_p50": pct(0.5), "batch_ms_p99": pct(0.99)}
    if r["batch_ms_p50"]:
        r["p99_over_p50"] = r["batch_ms_p99"] / r["batch_ms_p50"]
    if keep:
        r["checksums"] = sums
    return r


def gl_psnr(torch, a, kw, k):
    """PSNR (dB, peak 255) of decode_device=gpu's uint8 items against the
    CPU path's (decode_device=cpu, same seed): the first k batches."""
    import nostall
    kw = dict(kw, output="uint8")
    got = []
    with nostall.Loader(a.data, decode_device="cuda", **kw) as ld:
        ld.set_epoch(0)
        for i, (x, _) in enumerate(ld):
            got.append((ld.last_indices.tolist(), x.cpu().clone()))
            del x
            if i + 1 >= k:
                break
    vals, same_idx = [], True
    with nostall.Loader(a.data, copy=True, **kw) as ld:
        ld.set_epoch(0)
        for (idx, g), (x, _) in zip(got, ld):
            same_idx &= idx == ld.last_indices.tolist()
            for gi, ci in zip(g.double(), x.double()):
                mse = float(((gi - ci) ** 2).mean())
                vals.append(99.0 if mse == 0 else 10 * __import__("math").log10(255 ** 2 / mse))
            if len(vals) >= k * len(g):
                break
    return {"status": "ok" if same_idx and vals and min(vals) >= 40 else "FAIL",
            "items": len(vals), "same_order": same_idx, "psnr_db_min": min(vals) if vals else None,
            "psnr_db_mean": sum(vals) / len(vals) if vals else None}


def gl_torchvision(torch, a, p, warm, n, deadline):
    """torchvision's batched GPU decode on the same files: the main thread
    reads each batch's file bytes, decode_jpeg(list, device="cuda"), then
    per image v2 RandomResizedCrop(224, antialias) + flip, stacked, to
    float and normalized on the GPU."""
    import torchvision
    if not tv_version_ok(torchvision):
        return {"status": "skipped", "reason": "torchvision too old (%s < 0.19: no batched "
                "decode_jpeg on cuda)" % torchvision.__version__}
    from torchvision.io import decode_jpeg
    from torchvision.transforms import v2
    tf = v2.Compose([v2.RandomResizedCrop(p["crop"], antialias=True), v2.RandomHorizontalFlip()])
    mean = torch.tensor([0.485, 0.456, 0.406], device="cuda").view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device="cuda").view(1, 3, 1, 1) * 255
    files = gl_files(a.data, 1)
    bs = p["batch"]

    def batches():
        for s in range(0, len(files) - bs + 1, bs):
            raw = []
            for path, _ in files[s:s + bs]:
                with open(path, "rb") as f:
                    raw.append(torch.frombuffer(bytearray(f.read()), dtype=torch.uint8))
            imgs = decode_jpeg(raw, device="cuda")
            x = torch.stack([tf(im) for im in imgs]).float()
            yield ((x - mean) / std,)
    return gl_time(torch, batches(), warm, n, deadline)


def gpuloader_worker(a, p):
    """One configuration of step gpuloader, in the process pinned to 2 cores:
    a JSON line. a.cap: its seconds from start-up to the last figure."""
    t_start = time.perf_counter()
    import torch
    import nostall
    deadline = t_start + (a.cap or 10)
    warm, n = (5, 50) if a.profile != "full" else (5, 70)
    kw = dict(batch_size=p["batch"], crop=p["crop"], seed=1, drop_last=True, mode="train",
              threads=2)
    cfg = a.loader
    torch.cuda.init()
    if cfg in ("nostall-1", "nostall-2"):
        kw["threads"] = int(cfg[-1])
        with nostall.Loader(a.data, decode_device="cuda", **kw) as ld:
            ld.set_epoch(0)
            s0 = ld.stats()
            r = gl_time(torch, ld, warm, n, deadline, keep=3)
            s1 = ld.stats()
        r["stats"] = {k: s1[k] - s0[k] for k in GL_STATS if k in s1}
        r["backend_split"] = gl_split(r["stats"])
    elif cfg == "psnr":
        r = gl_psnr(torch, a, kw, 2)
    elif cfg == "torchvision":
        r = gl_torchvision(torch, a, p, warm, n, deadline)
    else:  # resnet50 fed by nostall's GPU decode
        tr = Trainer(torch, p["model"], "cuda")
        with nostall.Loader(a.data, decode_device="cuda", **kw) as ld:
            ld.set_epoch(0)
            r = measure(tr, ld, 2, 20, max(1.0, deadline - time.perf_counter() - 2))
    r.setdefault("status", "ok")
    r.update(config=cfg, cores=len(os.sched_getaffinity(0)))
    print(json.dumps(r))


def pinned(cmd, ncores):
    """cmd under taskset to the first ncores CPUs (else --pin: it pins itself)."""
    mask = ",".join(str(i) for i in sorted(os.sched_getaffinity(0))[:ncores])
    try:
        subprocess.run(["taskset", "--version"], capture_output=True)
        return ["taskset", "-c", mask] + cmd
    except OSError:
        return cmd + ["--pin", mask]


def step_gpuloader(a, p, v):
    """decode_device=gpu through the loader (NOSTALL_GPU_UNVALIDATED=1, set
    by run.sh for this step only), each configuration a process pinned to
    2 cores with an equal share of the budget."""
    import torch
    if not torch.cuda.is_available():
        print("gpuloader: skipped (no CUDA device: decode_device=gpu's loader cannot run here)")
        return dict(v, status="skipped", reason="no CUDA device: decode_device=gpu's loader "
                    "cannot run here")
    if len(os.sched_getaffinity(0)) < 2:
        return dict(v, status="skipped", reason="fewer than 2 CPUs")
    configs = ["nostall-1", "nostall-2", "psnr", "torchvision", "resnet50"]
    per = max(12, (a.budget - 3) / len(configs))
    for cfg in configs:
        cmd = pinned([sys.executable, os.path.abspath(__file__), "gpuloader-worker", "--out",
                      a.out, "--data", a.data, "--profile", a.profile, "--loader", cfg,
                      "--cap", str(max(5.0, per - 3))], 2)
        row = {"config": cfg}
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=per)
            lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
            if r.returncode == 0 and lines:
                row = json.loads(lines[-1])
            else:
                row.update(status="failed (exit %d)" % r.returncode,
                           error=(r.stderr or r.stdout)[-1500:])
                sys.stderr.write(r.stderr[-3000:])
        except subprocess.TimeoutExpired:
            row.update(status="timeout after %.0f s" % per)
        v["rows"].append(row)
        print("  gpuloader %-11s %s" % (cfg, json.dumps({k: row[k] for k in row
                                                          if k not in ("error", "stats")})))
        rows = {r["config"]: r for r in v["rows"]}
        a1, a2 = rows.get("nostall-1", {}), rows.get("nostall-2", {})
        if a1.get("checksums") and a2.get("checksums"):
            v["bytes_equal_1_vs_2_threads"] = a1["checksums"] == a2["checksums"]
        record(a.out, "gpuloader", dict(v, status="running"))
    ok = all(r.get("status") in ("ok", "skipped") for r in v["rows"])
    ok = ok and v.get("bytes_equal_1_vs_2_threads", False)
    return dict(v, status="ok" if ok else "partial")


def step_gen(a, p):
    """`nostall gen` on every core: one process per CPU, each its own seed
    into its own folder, then the files moved into one ImageFolder (names
    prefixed by the part, so none collide)."""
    cli = os.environ["NOSTALL_CLI"]
    parts = max(1, min(len(os.sched_getaffinity(0)), a.images // 50))
    t0 = time.perf_counter()
    procs = []
    for k in range(parts):
        n = a.images // parts + (1 if k < a.images % parts else 0)
        cmd = [cli, "gen", "%s.part%d" % (a.data, k), "--images", str(n), "--classes",
               str(a.classes), "--seed", str(1000 + k), "--quiet", "--force"]
        if a.size:
            w, h = a.size.split("x")
            cmd += ["--width", w, "--height", h]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL))
    bad = [p.args for p in procs if p.wait() != 0]
    if bad:
        raise RuntimeError("nostall gen failed: %s" % " ".join(bad[0]))
    total = size = 0
    for k in range(parts):
        part = "%s.part%d" % (a.data, k)
        for cls in sorted(os.listdir(part)):
            os.makedirs(os.path.join(a.data, cls), exist_ok=True)
            for f in os.listdir(os.path.join(part, cls)):
                dst = os.path.join(a.data, cls, "p%02d_%s" % (k, f))
                os.rename(os.path.join(part, cls, f), dst)
                total += 1
                size += os.path.getsize(dst)
            os.rmdir(os.path.join(part, cls))
        os.rmdir(part)
    s = time.perf_counter() - t0
    print("gen: %d images in %d classes (%.1f GB, %.0f KB mean) in %.1f s with %d processes" % (
        total, a.classes, size / 1e9, size / 1e3 / max(1, total), s, parts))
    return {"status": "ok", "images": total, "classes": a.classes, "bytes": size,
            "processes": parts, "path": a.data, "size": a.size or "500x375"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("step", choices=["info", "correctness", "accel", "gpuloader",
                                     "gpuloader-worker", "cores", "cores-worker", "analyze",
                                     "echo", "gen", "note"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--data", default="")
    ap.add_argument("--small", default="", help="small dataset for the correctness checks")
    ap.add_argument("--profile", choices=sorted(PROFILES), default="quick")
    ap.add_argument("--budget", type=float, default=120, help="this step's seconds")
    ap.add_argument("--cores", type=int, default=0)
    ap.add_argument("--loader", default="nostall", help="cores-worker: nostall or torchvision; "
                    "gpuloader-worker: nostall-1, nostall-2, psnr, torchvision or resnet50")
    ap.add_argument("--pin", default="")
    ap.add_argument("--cap", type=float, default=0, help="cores-worker: measured seconds at most")
    ap.add_argument("--images", type=int, default=0)
    ap.add_argument("--classes", type=int, default=100)
    ap.add_argument("--size", default="", help="gen: WxH (default nostall gen's 500x375)")
    ap.add_argument("--key", default="")
    ap.add_argument("--json", default="", help="note: a JSON value to record under --key")
    a = ap.parse_args()
    p = PROFILES[a.profile]
    if a.pin:
        os.sched_setaffinity(0, [int(c) for c in a.pin.split(",")])
    if a.step == "note":  # a dict merges into what the step recorded
        value = json.loads(a.json)
        try:
            with open(os.path.join(a.out, "gpu.json")) as f:
                prev = json.load(f).get(a.key)
        except (OSError, ValueError):
            prev = None
        if isinstance(prev, dict) and isinstance(value, dict):
            value = dict(prev, **value)
        record(a.out, a.key, value)
        return 0
    if a.step == "cores-worker":
        cores_worker(a, p)
        return 0
    if a.step == "gpuloader-worker":
        gpuloader_worker(a, p)
        return 0
    t0 = time.perf_counter()
    try:
        if a.step == "cores":
            rows = []
            try:
                v = step_cores(a, p, rows)
            except BaseException:
                record(a.out, "cores", {"status": "failed", "rows": rows})
                raise
        elif a.step == "gpuloader":
            gl = {"rows": []}
            try:
                v = step_gpuloader(a, p, gl)
            except BaseException:
                record(a.out, "gpuloader", dict(gl, status="failed"))
                raise
        else:
            v = {"info": step_info, "correctness": step_correctness, "accel": step_accel,
                 "analyze": step_analyze, "echo": step_echo, "gen": step_gen}[a.step](a, p)
    except Exception as e:
        import traceback
        traceback.print_exc()
        prev = {}
        try:
            with open(os.path.join(a.out, "gpu.json")) as f:
                prev = json.load(f).get(a.step) or {}
        except (OSError, ValueError):
            pass
        prev.update(status="failed", reason="%s: %s" % (type(e).__name__, e))
        record(a.out, a.step, prev)
        return 1
    v["seconds"] = round(time.perf_counter() - t0, 1)
    record(a.out, a.step, v)
    return 0 if v.get("status") in ("ok", "skipped") else 1


if __name__ == "__main__":
    sys.exit(main())
