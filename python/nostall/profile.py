"""nostall.profile: where the data stall of *any* PyTorch input pipeline comes from.

    import nostall
    r = nostall.profile(dataloader, train_step, max_batches=50,
                        restore=(model, optimizer), report="stalls.html")
    print(r.text)
    r["bound"]            # "compute" | "prep" | "fetch" | "start"
    r["epoch"]            # seconds per epoch: prep_stall_s, fetch_stall_s, start_stall_s, ...
    r["recommendations"]  # the analyzer's: cores, cache, echo, transcode (and start)
    r["nostall"]          # nostall's own predicted epoch on this machine, and the command

DS-Analyzer's differential method (Mohan et al., VLDB 2021) applied to an
iterable of batches -- a torch.utils.data.DataLoader above all. Each run
covers the same batches (at most `max_batches`) from the same random state:

1. prep:      the loader alone, no step, its files in the OS page cache;
2. synthetic: the step alone, repeated on one batch taken from the loader;
3. cached:    loader and step, every file in the page cache;
4. cold:      loader and step after the loader's files were dropped from the
              page cache (posix_fadvise(DONTNEED); no root needed).

This module runs them and looks into the DataLoader (its files, workers,
transform); the stalls are its waits in `next()`, the start-up of its worker
processes apart. The runs go into the analyzer's measurement table
(nostall_analyze_meas, include/nostall_analyze.h) and the library's model
classifies and reports them, as for nostall's own loader (analyze.py): one
model, in C. Which files the loader reads is known for a torchvision
ImageFolder or DatasetFolder, a Subset or ConcatDataset of those, or when
passed as `files=`; without them there is no cold run.

train_step is called as train_step(*batch) for a tuple or list, else
train_step(batch); it runs 3 times per measured batch plus once: pass
restore=(model, optimizer, ...) (state_dicts saved to CPU memory and loaded
back, train/eval modes too) or give a step that does not update. Random
states are restored either way. With CUDA initialized each step is followed
by torch.cuda.synchronize() (sync=None).

Command line:

    python3 -m nostall.profile my_module:make [--max-batches 50] [--report r.html] [--json]

where my_module.make() returns (dataloader, train_step), or
(dataloader, train_step, restore), or a dict with those keys; `my_module`
may also be a path to a .py file. docs/analyzer.md ("Profiling any
DataLoader") has the details.
"""

import copy
import ctypes
import json
import math
import os
import random
import resource
import shutil
import sys
import tempfile
import time

__all__ = ["profile", "Profile"]
# The package imports this module (nostall.profile is the function), so
# `python3 -m nostall.profile` finds it in sys.modules before running it as
# __main__, and runpy warns about that unless the module looks like a
# package: an empty __path__ says there is nothing more to import below it.
__path__ = []

_IMAGE_EXT = (".jpg", ".jpeg", ".png")


class Profile(dict):
    """The profile as a dict (JSON-serialisable); .text is the terminal report."""
    text = ""


# ---- files and the page cache ------------------------------------------------

def _dataset_files(ds, depth=0):
    """[(path, label)] that `ds` reads, or None when unknown."""
    if depth > 8 or ds is None:
        return None
    samples = getattr(ds, "samples", None)
    if samples is None:
        samples = getattr(ds, "imgs", None)
    if isinstance(samples, (list, tuple)) and samples and isinstance(samples[0], (list, tuple)) \
            and len(samples[0]) == 2 and isinstance(samples[0][0], (str, bytes, os.PathLike)):
        return [(os.fsdecode(p), int(t) if isinstance(t, int) else t) for p, t in samples]
    inner, indices = getattr(ds, "dataset", None), getattr(ds, "indices", None)
    if inner is not None and indices is not None:  # torch.utils.data.Subset
        f = _dataset_files(inner, depth + 1)
        return None if f is None else [f[int(i)] for i in indices]
    parts = getattr(ds, "datasets", None)
    if isinstance(parts, (list, tuple)) and parts:  # ConcatDataset
        out = []
        for d in parts:
            f = _dataset_files(d, depth + 1)
            if f is None:
                return None
            out += f
        return out
    return None


def _normalise_files(files):
    out = []
    for f in files:
        if isinstance(f, (list, tuple)):
            out.append((os.fsdecode(f[0]), f[1] if len(f) > 1 else None))
        else:
            out.append((os.fsdecode(f), None))
    return out


def _read_all(paths):
    """Read every file through (into the page cache); bytes read."""
    buf, total = bytearray(1 << 20), 0
    for p in paths:
        try:
            with open(p, "rb", buffering=0) as f:
                while True:
                    n = f.readinto(buf)
                    if not n:
                        break
                    total += n
        except OSError:
            pass
    return total


def _drop(paths):
    """Drop each file's pages from the page cache (no root): dirty pages are
    written back first (fdatasync), as DONTNEED leaves them in place.
    Returns the number of files that could not be opened or dropped."""
    failed = 0
    for p in paths:
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError:
            failed += 1
            continue
        try:
            try:
                os.fdatasync(fd)
            except OSError:
                pass
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except OSError:
            failed += 1
        finally:
            os.close(fd)
    return failed


_libc = None


def _resident_fraction(paths, sample=64):
    """Fraction of the pages of (a sample of) `paths` in the page cache
    (mincore); None when it cannot be told."""
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None, use_errno=True)
            _libc.mmap.restype = ctypes.c_void_p
            _libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                   ctypes.c_int, ctypes.c_long]
            _libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
            _libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    except OSError:
        return None
    if not paths:
        return None
    step = max(1, len(paths) // sample)
    page = os.sysconf("SC_PAGE_SIZE")
    res = total = 0
    for p in paths[::step][:sample]:
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError:
            continue
        try:
            n = os.fstat(fd).st_size
            if n <= 0:
                continue
            addr = _libc.mmap(None, n, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
            if addr in (None, ctypes.c_void_p(-1).value):
                continue
            pages = (n + page - 1) // page
            vec = (ctypes.c_ubyte * pages)()
            if _libc.mincore(ctypes.c_void_p(addr), n, vec) == 0:
                res += sum(v & 1 for v in vec)
                total += pages
            _libc.munmap(ctypes.c_void_p(addr), n)
        finally:
            os.close(fd)
    return res / total if total else None


def _mem_available():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


# ---- random state and the user's objects ---------------------------------------

def _to_cpu(obj):
    import torch
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return type(obj)((k, _to_cpu(v)) for k, v in obj.items()) if type(obj) is not dict \
            else {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_to_cpu(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_to_cpu(v) for v in obj)
    return copy.deepcopy(obj)


class _Saved:
    """Random states (torch CPU/CUDA, Python, NumPy, the loader's
    generators) and the state_dicts of `restore`, to go back to."""

    def __init__(self, dataloader, restore):
        import torch
        self.torch = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and \
            torch.cuda.is_initialized() else None
        self.py = random.getstate()
        try:
            import numpy as np
            self.np = np.random.get_state()
        except ImportError:
            self.np = None
        self.gens = []
        for obj in (dataloader, getattr(dataloader, "sampler", None),
                    getattr(getattr(dataloader, "batch_sampler", None), "sampler", None)):
            g = getattr(obj, "generator", None)
            if isinstance(g, torch.Generator) and all(g is not h for h, _ in self.gens):
                self.gens.append((g, g.get_state()))
        self.objs = []
        for o in restore or ():
            if not (hasattr(o, "state_dict") and hasattr(o, "load_state_dict")):
                raise TypeError("profile: restore=: %r has no state_dict()/load_state_dict()" % (o,))
            modes = [(m, m.training) for m in o.modules()] if hasattr(o, "modules") else []
            self.objs.append((o, _to_cpu(o.state_dict()), modes))

    def rewind(self):
        """Back to the random states (before each run: same order, same draws)."""
        import torch
        torch.set_rng_state(self.torch)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)
        random.setstate(self.py)
        if self.np is not None:
            import numpy as np
            np.random.set_state(self.np)
        for g, s in self.gens:
            g.set_state(s)

    def restore(self):
        self.rewind()
        for o, sd, modes in self.objs:
            o.load_state_dict(sd)
            for m, training in modes:
                m.training = training


# ---- the runs ------------------------------------------------------------------

def _call(step, batch):
    if isinstance(batch, (tuple, list)):
        return step(*batch)
    return step(batch)


def _batch_len(batch):
    import torch
    b = batch
    while isinstance(b, (tuple, list)) and b:
        b = b[0]
    if isinstance(b, dict) and b:
        b = next(iter(b.values()))
    if isinstance(b, torch.Tensor) and b.dim() > 0:
        return int(b.shape[0])
    try:
        return len(b)
    except TypeError:
        return 1


def _proc_cpu(pid):
    """utime + stime of a live process, seconds (0 when gone)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _self_cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime, c.ru_utime + c.ru_stime


class _WorkerClock:
    """Times inside a DataLoader's worker processes, written to files in a
    folder the parent reads after the run (CLOCK_MONOTONIC is the same clock
    in every process): `init` wraps worker_init_fn (the worker is ready: file
    i<id>), `collate` wraps collate_fn (a batch's items are fetched and
    prepared: a line in c<id>). Picklable, so any start method works; the
    user's functions are called as before."""

    def __init__(self, folder, user_fn, kind):
        self.folder, self.user_fn, self.kind = folder, user_fn, kind

    def _mark(self, name, mode):
        try:
            with open(os.path.join(self.folder, name), mode) as f:
                f.write("%r\n" % time.clock_gettime(time.CLOCK_MONOTONIC))
        except OSError:
            pass

    def __call__(self, arg):
        if self.kind == "init":
            self._mark("i%d" % arg, "w")
            return self.user_fn(arg) if self.user_fn is not None else None
        out = self.user_fn(arg)
        import torch.utils.data
        info = torch.utils.data.get_worker_info()
        if info is not None:
            self._mark("c%d" % info.id, "a")
        return out


def _read_clock(folder):
    """{worker id: (ready time or None, [batch done times])}; removes the
    folder. Workers that outlive the pass (persistent_workers keep
    prefetching) may still add lines or files while it is read: what is
    there now is the snapshot, and their later writes fail quietly once the
    folder is gone."""
    out = {}
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        try:
            with open(path) as f:
                ts = [float(x) for x in f.read().split()]
        except (OSError, ValueError):
            ts = []
        try:
            wid = int(name[1:])
        except ValueError:
            continue
        init, done = out.get(wid, (None, []))
        if name[0] == "i" and ts:
            init = ts[0]
        elif name[0] == "c":
            done = ts
        out[wid] = (init, done)
    for _ in range(5):  # a worker may create a file between two sweeps
        shutil.rmtree(folder, ignore_errors=True)
        if not os.path.exists(folder):
            break
    return out


def _median(v):
    v = sorted(v)
    return 0.5 * (v[(len(v) - 1) // 2] + v[len(v) // 2]) if v else None


class _Runner:
    def __init__(self, dataloader, step, nb, sync, progress, saved):
        self.dl, self.step, self.nb, self.sync = dataloader, step, nb, sync
        self.progress, self.saved = progress, saved

    def _sync(self):
        if self.sync:
            import torch
            torch.cuda.synchronize()

    def loader(self, label, with_step, keep_first=False):
        """One pass over at most nb batches: wait in next(), step time, CPU."""
        self.saved.rewind()
        clock_dir = None
        if int(getattr(self.dl, "num_workers", 0) or 0) > 0 and \
                hasattr(self.dl, "worker_init_fn") and callable(getattr(self.dl, "collate_fn", None)):
            clock_dir = tempfile.mkdtemp(prefix="nostall-profile-")
            user_init, user_collate = self.dl.worker_init_fn, self.dl.collate_fn
            self.dl.worker_init_fn = _WorkerClock(clock_dir, user_init, "init")
            self.dl.collate_fn = _WorkerClock(clock_dir, user_collate, "collate")
        self_c0, child_c0 = _self_cpu()
        t0 = time.perf_counter()
        m0 = time.clock_gettime(time.CLOCK_MONOTONIC)
        try:
            it = iter(self.dl)  # the iterator keeps the functions it was made with
        finally:
            if clock_dir:
                self.dl.worker_init_fn, self.dl.collate_fn = user_init, user_collate
        start_s = time.perf_counter() - t0
        workers = [w for w in getattr(it, "_workers", []) or [] if getattr(w, "pid", None)]
        wcpu0 = {w.pid: _proc_cpu(w.pid) for w in workers}
        wait = stepping = first = 0.0
        batches = items = 0
        kept = None
        waits = []
        try:
            while batches < self.nb:
                a = time.perf_counter()
                try:
                    batch = next(it)
                except StopIteration:
                    break
                b = time.perf_counter()
                waits.append(b - a)
                wait += b - a
                if batches == 0:
                    first = b - a
                    if keep_first:
                        kept = batch
                if with_step:
                    _call(self.step, batch)
                    self._sync()
                    stepping += time.perf_counter() - b
                items += _batch_len(batch)
                batches += 1
                del batch
                if self.progress:
                    self.progress(label, batches, self.nb)
            seconds = time.perf_counter() - t0
            wcpu = sum(max(0.0, _proc_cpu(p) - c) for p, c in wcpu0.items())
        finally:
            t1 = time.perf_counter()
            del it  # shuts the workers down (not persistent ones)
            teardown = time.perf_counter() - t1
        self_c1, child_c1 = _self_cpu()
        # Starting the worker processes: from the end of iter() to the moment
        # the workers were ready (mean over them), and each worker's first
        # batch against its later ones (imports, lazy initialisation and
        # copy-on-write faults of a fresh process: `first_extra_s`, judged
        # by the caller against the loader-alone run's batch time).
        boot, first_batch_worker, batch_worker = 0.0, None, None
        if clock_dir:
            clock = _read_clock(clock_dir)
            ready = [i for i, _ in clock.values() if i is not None]
            if ready:
                boot = max(0.0, sum(ready) / len(ready) - m0 - start_s)
                boot = min(boot, first)  # it held back the first batch at most
            firsts = [d[0] - i for i, d in clock.values() if i is not None and d]
            later = [b - a for _, d in clock.values() for a, b in zip(d, d[1:])]
            first_batch_worker = sum(firsts) / len(firsts) if firsts else None
            batch_worker = _median(later)
        # workers joined at shutdown show up in RUSAGE_CHILDREN; live ones
        # (persistent_workers) were read from /proc before
        cpu = (self_c1 - self_c0) + max(wcpu, child_c1 - child_c0)
        return {"seconds": seconds, "start_s": start_s, "boot_s": boot, "wait_s": wait,
                "first_batch_s": first,
                "step_s": stepping, "batches": batches, "items": items, "cpu_s": cpu,
                "workers_cpu_s": max(wcpu, child_c1 - child_c0), "teardown_s": teardown,
                "wait_max_s": max(waits) if waits else 0.0,
                "worker_first_batch_s": first_batch_worker, "worker_batch_s": batch_worker,
                "first_extra_s": 0.0,
                "waits_ms": [round(1e3 * w, 3) for w in waits]}, kept

    def synthetic(self, batch, n):
        c0, _ = _self_cpu()
        t0 = time.perf_counter()
        for i in range(n):
            _call(self.step, batch)
            self._sync()
            if self.progress:
                self.progress("synthetic", i + 1, n)
        seconds = time.perf_counter() - t0
        c1, _ = _self_cpu()
        return {"seconds": seconds, "batches": n, "items": n * _batch_len(batch),
                "cpu_s": c1 - c0, "step_s": seconds / max(n, 1)}


def _tty_progress(label, done, total):
    sys.stderr.write("\r%-10s %d/%d batches   " % (label, done, total))
    if done >= total:
        sys.stderr.write("\n")
    sys.stderr.flush()


# ---- nostall's own prediction ----------------------------------------------------

def _transform_options(transform, batch):
    """nostall loader options equivalent to a torchvision transform, and the
    transforms nostall's recipe does not model."""
    opts, unmodelled = {}, []
    ts = list(getattr(transform, "transforms", None) or ([transform] if transform else []))
    size = lambda s: (s, s) if isinstance(s, int) else (tuple(s) * 2)[:2] if len(s) == 1 \
        else tuple(s)
    flip = 0.0
    for t in ts:
        name = type(t).__name__
        if name == "RandomResizedCrop":
            h, w = size(t.size)
            opts.update(mode="train", crop=h, scale_min=t.scale[0], scale_max=t.scale[1],
                        ratio_min=t.ratio[0], ratio_max=t.ratio[1])
            if h != w:
                unmodelled.append("%s (non-square %dx%d: nostall crops squares)" % (name, h, w))
        elif name == "RandomHorizontalFlip":
            flip = float(t.p)
        elif name == "Resize":
            s = t.size if isinstance(t.size, int) else (t.size[0] if len(t.size) == 1 else None)
            if s is None:
                unmodelled.append("Resize to a fixed %s (nostall resizes the shorter side)"
                                  % (tuple(t.size),))
            else:
                opts["resize"] = int(s)
                opts.setdefault("mode", "eval")
        elif name == "CenterCrop":
            h, w = size(t.size)
            opts["crop"] = h
            opts.setdefault("mode", "eval")
            if h != w:
                unmodelled.append("%s (non-square)" % name)
        elif name == "ToTensor":
            opts.setdefault("output", "float")
        elif name in ("PILToTensor",):
            opts["output"] = "uint8"
        elif name == "ConvertImageDtype":
            opts["output"] = "float"
        elif name == "Normalize":
            opts["mean"] = ",".join("%g" % v for v in (t.mean if hasattr(t.mean, "__len__")
                                                        else [t.mean] * 3))
            opts["std"] = ",".join("%g" % v for v in (t.std if hasattr(t.std, "__len__")
                                                       else [t.std] * 3))
        else:
            unmodelled.append(name)
    if "Normalize" not in [type(t).__name__ for t in ts] and opts.get("output") == "float":
        opts["mean"], opts["std"] = "0,0,0", "1,1,1"  # ToTensor alone: [0, 1]
    if opts.get("mode", "train") == "train":
        opts["flip_prob"] = flip
    if "crop" not in opts:  # no crop in the transform: the batch's size
        import torch
        b = batch
        while isinstance(b, (tuple, list)) and b:
            b = b[0]
        if isinstance(b, torch.Tensor) and b.dim() == 4:
            opts["crop"] = int(b.shape[-1] if b.shape[1] in (1, 3) else b.shape[1])
            opts.setdefault("mode", "eval")
    return opts, unmodelled


def _find_transform(ds, depth=0):
    """The dataset's `transform`, looking through Subset and ConcatDataset."""
    if ds is None or depth > 8:
        return None
    t = getattr(ds, "transform", None)
    if t is not None:
        return t
    parts = getattr(ds, "datasets", None)
    inner = getattr(ds, "dataset", None) or (parts[0] if isinstance(parts, (list, tuple)) and parts
                                             else None)
    return _find_transform(inner, depth + 1)


def _flag(k, v):
    return "--%s %s" % (k.replace("_", "-"), v)


def _nostall_part(dataloader, files, batch0, step_s, step_cpu_s, nb_epoch, max_batches,
                  measured, options, progress_cb):
    """nostall's predicted epoch for this dataset, or {"skipped": why}."""
    ds = getattr(dataloader, "dataset", None)
    if files is None:
        return {"skipped": "the loader's files are not known (pass files=[(path, label), ...])"}
    bad = [p for p, _ in files if not p.lower().endswith(_IMAGE_EXT)]
    if bad:
        return {"skipped": "nostall reads JPEG and PNG files; %d of %d are not named so (e.g. %s)"
                % (len(bad), len(files), bad[0])}
    try:
        from . import _lib
        from .loader import _check, _encode
    except Exception as e:  # the library cannot be loaded
        return {"skipped": "libnostall could not be loaded: %s" % e}
    root = getattr(ds, "root", None)
    ds_files = _dataset_files(ds)
    labels_ok = all(isinstance(l, int) for _, l in files)
    list_file = None
    if root and ds_files is not None and len(ds_files) == len(files) and os.path.isdir(root):
        source, shown = os.fsdecode(root), os.fsdecode(root)
    elif labels_ok:
        fd, list_file = tempfile.mkstemp(prefix="nostall-profile-", suffix=".tsv")
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
            for p, l in files:
                f.write("%s\t%d\n" % (os.path.abspath(p), l))
        source, shown = list_file, "LIST.tsv"
    else:
        return {"skipped": "the files' labels are not integers"}
    transform = _find_transform(ds)
    opts, unmodelled = _transform_options(transform, batch0)
    bs = getattr(dataloader, "batch_size", None) or _batch_len(batch0)
    opts["batch_size"] = bs
    opts["drop_last"] = 1 if getattr(dataloader, "drop_last", False) else 0
    if options:
        opts.update(options)
    workers = max(1, int(getattr(dataloader, "num_workers", 0) or 0))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    out = {"source": shown, "options": dict(opts), "transforms_not_modelled": unmodelled}
    try:
        cfg = ctypes.c_void_p()
        _check(_lib.config_create(ctypes.byref(cfg)))
        try:
            for k, v in opts.items():
                _check(_lib.config_set(cfg, k.encode(), _encode(str(v))))
            m = _lib.AnalyzeMeas()
            o = _lib.AnalyzeMeasureOptions(max_batches=max_batches or 0, keep_cached=0)
            _check(_lib.analyze_measure(ctypes.byref(m), ctypes.sizeof(m), _encode(source), cfg,
                                        ctypes.byref(o), ctypes.sizeof(o)))
        finally:
            _lib.config_free(cfg)
        m.step_s, m.step_cpu_s = float(step_s), float(step_cpu_s)
        # The three runs with the step are the user's loader's, not nostall's:
        # the model predicts from the prep run (CPU per item), storage and the
        # step; the measured-run fields stay 0.
        from .analyze import _Model
        with _Model(m) as a:
            preds = {label: _lib_prediction(_lib, a._a, spec) for label, spec in (
                ("steady", None), ("cold", "cold=1"), ("same_workers", "threads=%d" % workers),
                ("same_workers_cold", "threads=%d,cold=1" % workers))}
            full = json.loads(a.report(_lib.ANALYZE_JSON, shown))
    except Exception as e:  # nostall could not read the data: say why
        return dict(out, skipped="nostall could not measure %s: %s" % (shown, e))
    finally:
        if list_file:
            os.unlink(list_file)
    nbn = math.ceil(m.items_per_epoch / max(1, m.batch_size))
    out.update(threads=int(m.threads), cores=cores, workers=workers,
               items_per_epoch=m.items_per_epoch, batches_per_epoch=nbn,
               prep_items_per_s=(m.prep_items / m.prep_seconds) if m.prep_seconds > 0 else 0,
               cpu_per_item_s=(m.prep_cpu_s / m.prep_items) if m.prep_items > 0 else 0,
               storage_mbps=m.disk_bw / 1e6, cpu_available=m.cpu_available,
               predicted=preds,
               recommendations=[r["text"] for r in full.get("recommendations", [])],
               machine={k: getattr(m, k) for k in _MACHINE})
    step_ms = 1000 * step_s
    opts = {k: v for k, v in opts.items() if not _is_default(_lib, k, v)}
    flags = " ".join(_flag(k, v) for k, v in opts.items())
    out["command"] = "nostall analyze %s %s --step-ms %.3g" % (_shq(shown), flags, step_ms)
    out["bench_command"] = "nostall bench %s %s --step-ms %.3g --epochs 2" % (_shq(shown), flags,
                                                                              step_ms)
    kw = ", ".join("%s=%r" % (k, v) for k, v in opts.items())
    out["python"] = "nostall.Loader(%r, %s)" % (shown, kw)
    base_cold, base_steady = measured.get("cold_s"), measured.get("steady_s")
    if base_cold and preds["cold"]["epoch_s"] > 0:
        out["speedup_cold"] = base_cold / preds["cold"]["epoch_s"]
    if base_steady and preds["steady"]["epoch_s"] > 0:
        out["speedup_steady"] = base_steady / preds["steady"]["epoch_s"]
    return out


def _is_default(_lib, name, value):
    d = (_lib.OPTIONS.get(name) or {}).get("default")
    if d is None:
        return False
    try:
        a = [float(x) for x in str(value).split(",")]
        b = [float(x) for x in str(d).split(",")]
        return len(a) == len(b) and all(abs(x - y) <= 1e-9 * max(1, abs(y)) for x, y in zip(a, b))
    except ValueError:
        return str(value) == str(d)


def _shq(s):
    import shlex
    return shlex.quote(s)


class _Pred(ctypes.Structure):
    """nostall_analyze_prediction (include/nostall_analyze.h)."""
    _fields_ = [(n, ctypes.c_double) for n in (
        "epoch_s", "compute_s", "prep_stall_s", "fetch_stall_s", "nofetch_s", "prep_s", "fetch_s",
        "effective_cores", "delivered_items")] + [("bound", ctypes.c_char_p)]


def _lib_prediction(_lib, a, spec):
    """The steady state as configured (spec None) or nostall_analyze_predict(spec)."""
    from .loader import _check, _encode
    p = _Pred()
    if spec is None:
        get = _lib._fn("nostall_analyze_prediction_get", ctypes.c_int, ctypes.c_void_p,
                       ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t)
        _check(get(a, 0, ctypes.byref(p), ctypes.sizeof(p)))  # NOSTALL_ANALYZE_STEADY_STATE
    else:
        _check(_lib.analyze_predict(a, _encode(spec), ctypes.byref(p), ctypes.sizeof(p)))
    d = {n: getattr(p, n) for n, _ in _Pred._fields_ if n != "bound"}
    d["bound"] = p.bound.decode() if p.bound else None
    d["spec"] = spec or ""
    return d


def _first_extra(runs):
    """A fresh worker's first batch takes longer than its later ones
    (imports, lazy initialisation, copy-on-write faults): that extra, counted
    as start-up, is the worker's first batch time less its batch time in the
    loader-alone run (workers busy throughout). The cold run's first batch
    also reads its files cold: it is given the cached run's extra."""
    ref = runs["prep"].get("worker_batch_s")
    if ref is None:
        return
    for name in ("prep", "cached"):
        x = runs.get(name)
        if x and x.get("worker_first_batch_s") is not None:
            x["first_extra_s"] = min(max(0.0, x["worker_first_batch_s"] - ref),
                                     max(0.0, x["first_batch_s"] - x["boot_s"]))
    if "cold" in runs and runs["cold"].get("worker_first_batch_s") is not None:
        runs["cold"]["first_extra_s"] = min(runs["cached"]["first_extra_s"],
                                            max(0.0, runs["cold"]["first_batch_s"]
                                                - runs["cold"]["boot_s"]))


def _epoch_figures(runs, per_epoch, sync):
    """The runs scaled to an epoch: the measurements the analyzer is given.
    Per loader run: start = creating the iterator + the workers' start-up
    (once per epoch), the rest of the first wait = filling the pipeline
    (once per epoch), the later waits scaled by (batches per epoch - 1) /
    (batches run - 1), the steps and the loop's own time by batches per
    epoch / batches run. The stall of a run is its waits in next(), or with
    sync=False (steps may return before their work is done) DS-Analyzer's
    differences of wall times: T_cached - T_synthetic, T_cold - T_cached."""
    def parts(x):
        b = max(1, x["batches"])
        P = per_epoch or b
        late = x["boot_s"] + x["first_extra_s"]  # start-up inside the first wait
        start = x["start_s"] + late
        fill = max(0.0, x["first_batch_s"] - late)
        later = (x["wait_s"] - x["first_batch_s"]) * ((P - 1) / (b - 1) if b > 1 else 0.0)
        other = max(0.0, x["seconds"] - x["start_s"] - x["wait_s"]) * P / b  # steps, loop
        wait = fill + later
        return other + wait, wait, start
    syn = runs["synthetic"]
    e = {"synthetic_s": syn["seconds"] * (per_epoch or syn["batches"]) / max(1, syn["batches"])}
    body, wait, start = parts(runs["cached"])
    e.update(cached_s=body + start, cached_stall_s=wait, cached_start_s=start,
             prep_stall_diff_s=max(0.0, body - e["synthetic_s"]), fetch_stall_diff_s=0.0)
    if "cold" in runs:
        cbody, cwait, cstart = parts(runs["cold"])
        e.update(cold_s=cbody + cstart, cold_stall_s=cwait, cold_start_s=cstart,
                 fetch_stall_diff_s=max(0.0, cbody - body))
    if not sync:
        e["cached_stall_s"] = e["prep_stall_diff_s"]
        if "cold" in runs:
            e["cold_stall_s"] = e["prep_stall_diff_s"] + e["fetch_stall_diff_s"]
    return e


# Measured by nostall_analyze_measure() when nostall reads the files: the
# machine's, whichever loader reads them.
_MACHINE = ("disk_bw", "disk_bw1", "disk_latency_s", "mem_bw", "cpu_available")


def _measurements(r, runs, e, batch0, machine):
    """The analyzer's measurement table (nostall_analyze_meas) of this
    loader's runs, each scaled to an epoch (batches = the epoch's)."""
    from . import _lib
    ld = r["loader"]
    P, bs = ld["batches_per_epoch"], ld["batch_size"]
    n = ld["items"] if ld["items"] and math.ceil(ld["items"] / bs) == P else P * bs
    workers = max(1, ld["num_workers"])
    m = _lib.AnalyzeMeas()
    prep, syn = runs["prep"], runs["synthetic"]
    prep_busy = max(1e-12, prep["seconds"] - prep["start_s"] - prep["boot_s"]
                    - prep["first_extra_s"])
    f = dict(items_per_epoch=n, batch_size=bs, dataset_items=ld["files"] or n,
             dataset_bytes=ld["dataset_bytes"], dataset_files=ld["files"],
             item_out_bytes=_batch_bytes(batch0) / max(1, _batch_len(batch0)),
             cores=ld["cores"], mem_available_bytes=ld["mem_available_bytes"], threads=workers,
             io_depth=1, echo_factor=1, step_s=syn["step_s"],
             step_cpu_s=syn["cpu_s"] / max(1, syn["batches"]), syn_seconds=syn["seconds"],
             syn_batches=syn["batches"], prep_items=prep["items"], prep_seconds=prep_busy,
             # the workers' time per item, whatever they spent it on (computing,
             # sleeping, waiting on storage or a lock): the model's CPU per item
             prep_cpu_s=prep_busy * min(workers, ld["cores"]))
    for run, key in (("cached", "warm"), ("cold", "cold")):
        x = runs.get(run)
        if x is None:
            continue
        scale = P / max(1, x["batches"])
        f.update({key + "_seconds": e[run + "_s"], key + "_batches": P,
                  key + "_items": x["items"] * scale, key + "_stall_s": e[run + "_stall_s"],
                  key + "_start_s": e[run + "_start_s"]})
        if key == "warm":
            f["warm_cpu_s"] = x["cpu_s"] * scale
    f.update(machine or {})
    for k, v in f.items():
        setattr(m, k, float(v))
    return m


def _batch_bytes(batch):
    import torch
    if isinstance(batch, torch.Tensor):
        return batch.element_size() * batch.nelement()
    if isinstance(batch, dict):
        return sum(_batch_bytes(v) for v in batch.values())
    if isinstance(batch, (tuple, list)):
        return sum(_batch_bytes(v) for v in batch)
    return 0


def _nostall_notes(ns):
    """nostall's prediction for these files, as lines of the report."""
    if not ns.get("predicted"):
        return ["nostall: %s" % ns["skipped"]] if ns.get("skipped") else []
    p, q = ns["predicted"], ns["predicted"]["same_workers"]
    out = ["nostall on this machine (its model, from its own measurements of these files and "
           "this step): %d threads: epoch %.2f s steady, %.2f s cold (%s-bound); %d thread(s), "
           "as many as num_workers: %.2f s steady, %.2f s cold"
           % (ns["threads"], p["steady"]["epoch_s"], p["cold"]["epoch_s"], p["steady"]["bound"],
              ns["workers"], q["epoch_s"], p["same_workers_cold"]["epoch_s"])]
    if ns.get("speedup_cold"):
        out.append("nostall vs this loader: cold epoch %.2fx, steady %.2fx faster"
                   % (ns["speedup_cold"], ns.get("speedup_steady") or 0))
    if ns["transforms_not_modelled"]:
        out.append("not modelled by nostall's recipe: %s"
                   % ", ".join(ns["transforms_not_modelled"]))
    return out + ["measure it: %s" % ns["command"], "in Python: %s" % ns["python"]]


def _analysis(m, data, warnings, notes, report):
    """The analyzer's model of the runs (the same as analyze()'s): the JSON
    report as a dict, .text, and the HTML report written to `report`."""
    from . import _lib
    from .analyze import _Model
    with _Model(m) as a:
        for w in warnings:
            a.note(w, warning=True)
        bound = json.loads(a.report(_lib.ANALYZE_JSON, data))["measured"]["bound"]
        for line in notes(bound):
            a.note(line)
        return a.result(data, report, Profile)


def profile(dataloader, train_step, *, max_batches=None, files=None, restore=(), report=None,
            cold=True, warm="auto", sync=None, warmup_steps=1, nostall=True,
            nostall_options=None, progress=None):
    """Profile the data stall of `train_step` fed by `dataloader` (any
    re-iterable of batches; a torch DataLoader above all).

    max_batches:  cap each run at this many batches (default: one epoch).
    files:        the paths the loader reads (or (path, label) pairs), when
                  its dataset does not tell (ImageFolder, DatasetFolder,
                  Subset and ConcatDataset of them do).
    restore:      objects with state_dict()/load_state_dict() (model,
                  optimizer, scheduler, scaler) put back as they were after
                  profiling; without them train_step must not update.
    report:       also write the analyzer's HTML report (one self-contained
                  page) to this path.
    cold:         False: no cold run (the files are not dropped).
    warm:         "auto": read every file into the page cache before the
                  cached run when the files take under half the available
                  memory; True/False: always/never (never: the cached run
                  relies on the prep run, which reads the same batches).
    sync:         None (auto: torch.cuda.synchronize() after each step when
                  CUDA is initialized), True or False.
    warmup_steps: untimed steps on the first batch before the synthetic run.
    nostall:      False: leave out nostall's predicted epoch.
    nostall_options: nostall loader options to use in its prediction over
                  the ones inferred from the transform (e.g. {"threads": 8}).
    progress:     None (a line on stderr when it is a terminal), False, or a
                  callable(label, done, total).
    Returns a Profile (a dict, with .text: the analyzer's terminal report).
    """
    import torch
    if progress is None:
        progress = _tty_progress if sys.stderr.isatty() else None
    if sync is None:
        sync = torch.cuda.is_available() and torch.cuda.is_initialized()
    try:
        per_epoch = len(dataloader)
    except TypeError:
        per_epoch = None
    if max_batches is not None and max_batches < 1:
        raise ValueError("profile: max_batches must be >= 1 (or None for an epoch)")
    nb = per_epoch if max_batches is None else (min(per_epoch, max_batches) if per_epoch
                                                else max_batches)
    if nb is None:
        raise ValueError("profile: the loader has no len(); give max_batches")
    ds = getattr(dataloader, "dataset", None)
    flist = _normalise_files(files) if files is not None else _dataset_files(ds)
    paths = sorted({p for p, _ in flist}) if flist else []
    warnings = []
    dataset_bytes = 0
    for p in paths:
        try:
            dataset_bytes += os.stat(p).st_size
        except OSError:
            pass
    mem = _mem_available()
    workers = int(getattr(dataloader, "num_workers", 0) or 0)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    saved = _Saved(dataloader, restore)
    run = _Runner(dataloader, train_step, nb, sync, progress, saved)
    runs = {}
    try:
        do_warm = warm is True or (warm == "auto" and paths and dataset_bytes <= 0.5 * mem)
        if paths and not do_warm and warm == "auto":
            warnings.append("the files (%.1f GB) take more than half the memory available "
                            "(%.1f GB): they were not read in before the cached run, which "
                            "relies on the prep run having read its batches"
                            % (dataset_bytes / 1e9, mem / 1e9))
        t = time.perf_counter()
        if do_warm:
            _read_all(paths)
        warm_read_s = time.perf_counter() - t
        # 1. prep: the loader alone, warm
        runs["prep"], batch0 = run.loader("prep", with_step=False, keep_first=True)
        if batch0 is None:
            raise ValueError("profile: the loader yielded no batch")
        # 2. synthetic: the step alone on one batch
        for _ in range(max(0, warmup_steps)):
            _call(train_step, batch0)
            run._sync()
        runs["synthetic"] = run.synthetic(batch0, runs["prep"]["batches"])
        # 3. cached
        if do_warm:
            _read_all(paths)  # the step may have pushed pages out
        runs["cached"], _ = run.loader("cached", with_step=True)
        # 4. cold
        cold_run = bool(cold and paths)
        resident = None
        if cold_run:
            failed = _drop(paths)
            resident = _resident_fraction(paths)
            if failed:
                warnings.append("%d of %d files could not be dropped from the page cache"
                                % (failed, len(paths)))
            if resident is not None and resident > 0.1:
                warnings.append("%.0f%% of the files' pages stayed in the page cache after "
                                "dropping them (tmpfs, or pages mapped by another process): the "
                                "cold run was partly warm" % (100 * resident))
            runs["cold"], _ = run.loader("cold", with_step=True)
        elif not paths:
            warnings.append("the loader's files are not known, so there is no cold run and the "
                            "fetch stall is not separated from the prep stall (pass files=)")
    finally:
        saved.restore()
    step_s = runs["synthetic"]["step_s"]
    step_cpu_s = runs["synthetic"]["cpu_s"] / max(1, runs["synthetic"]["batches"])
    _first_extra(runs)
    e = _epoch_figures(runs, per_epoch, sync)
    fits = dataset_bytes > 0 and dataset_bytes <= 0.8 * mem
    steady_s = e["cached_s"] if (fits or "cold" not in runs) else e["cold_s"]
    bs = getattr(dataloader, "batch_size", None) or _batch_len(batch0)
    busy = lambda x: max(1e-12, x["seconds"] - x["start_s"] - x["boot_s"] - x["first_extra_s"])
    rates = {"step_items_per_s": runs["synthetic"]["items"] / max(1e-12,
                                                                 runs["synthetic"]["seconds"]),
             "prep_items_per_s": runs["prep"]["items"] / busy(runs["prep"]),
             "cached_items_per_s": runs["cached"]["items"] / busy(runs["cached"]),
             "cold_items_per_s": runs["cold"]["items"] / busy(runs["cold"]) if "cold" in runs
             else 0.0,
             "prep_cpu_per_item_s": runs["prep"]["cpu_s"] / max(1, runs["prep"]["items"])}
    r = Profile()
    r.update({
        "loader": {"type": type(dataloader).__name__, "dataset_type": type(ds).__name__
                   if ds is not None else "-", "items": len(ds) if hasattr(ds, "__len__") else 0,
                   "batch_size": bs, "num_workers": workers, "batches_per_epoch": per_epoch or nb,
                   "persistent_workers": bool(getattr(dataloader, "persistent_workers", False)),
                   "pin_memory": bool(getattr(dataloader, "pin_memory", False)),
                   "files": len(paths), "dataset_bytes": dataset_bytes,
                   "mem_available_bytes": mem, "cores": cores},
        "batches_measured": runs["cached"]["batches"], "sync": bool(sync),
        "warm_read_s": warm_read_s, "cold_run": "cold" in runs,
        "cold_resident_fraction": resident, "runs": runs, "rates": rates, "warnings": warnings,
    })
    if nostall:
        r["nostall"] = _nostall_part(dataloader, flist, batch0, step_s, step_cpu_s, per_epoch,
                                     max_batches, {"cold_s": e.get("cold_s", 0.0),
                                                   "steady_s": steady_s},
                                     nostall_options, progress)

    return _model_runs(r, runs, e, steady_s, batch0, report)


def _model_runs(r, runs, e, steady_s, batch0, report):
    """The analyzer's model classifies and reports the runs, as nostall's own
    (analyze()'s code path): fills r's bound, recommendations, epoch,
    analysis and text, and writes the HTML report."""
    workers = r["loader"]["num_workers"]

    def notes(bound):
        out = []
        if workers == 0 and bound in ("prep", "fetch"):
            out.append("num_workers=0: every item is fetched and prepared in the training "
                       "process between steps, so none of it overlaps the step: use num_workers "
                       ">= 1 (the model's predictions assume a worker that overlaps the step)")
        return out + _nostall_notes(r.get("nostall") or {})
    ld = r["loader"]
    data = "%s over %s (%d items, batch %s, num_workers=%d)" % (
        ld["type"], ld["dataset_type"], ld["items"], ld["batch_size"], workers)
    m = _measurements(r, runs, e, batch0, (r.get("nostall") or {}).get("machine"))
    a = _analysis(m, data, r["warnings"], notes, report)
    r["bound"], r["recommendations"] = a["measured"]["bound"], a["recommendations"]
    r["epoch"] = dict(a["measured"], prep_stall_diff_s=e["prep_stall_diff_s"],
                      fetch_stall_diff_s=e["fetch_stall_diff_s"], steady_s=steady_s)
    del r["epoch"]["bound"]
    r["analysis"] = dict(a)
    r.text = a.text
    return r


# ---- command line ------------------------------------------------------------------

def _load_factory(spec):
    import importlib
    import importlib.util
    mod, _, attr = spec.rpartition(":")
    if not mod or not attr:
        raise SystemExit("nostall.profile: give MODULE:FACTORY (e.g. train:make_loader)")
    if mod.endswith(".py") or os.sep in mod:
        s = importlib.util.spec_from_file_location("_nostall_profile_target", mod)
        if s is None:
            raise SystemExit("nostall.profile: cannot load %s" % mod)
        m = importlib.util.module_from_spec(s)
        sys.path.insert(0, os.path.dirname(os.path.abspath(mod)))
        s.loader.exec_module(m)
    else:
        sys.path.insert(0, os.getcwd())
        m = importlib.import_module(mod)
    fn = m
    for part in attr.split("."):
        fn = getattr(fn, part)
    return fn


def main(argv=None):
    import argparse
    ap = argparse.ArgumentParser(prog="python3 -m nostall.profile",
                                 description="Where the data stall of a PyTorch input pipeline "
                                 "comes from (DS-Analyzer's differential method).",
                                 epilog="FACTORY() returns (dataloader, train_step), "
                                 "(dataloader, train_step, restore) or a dict with those keys; "
                                 "MODULE may be a module name or a path to a .py file.")
    ap.add_argument("target", metavar="MODULE:FACTORY")
    ap.add_argument("--max-batches", type=int, help="cap each run (default: one epoch)")
    ap.add_argument("--report", help="write a self-contained HTML report here")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--no-cold", action="store_true", help="do not drop the files (no cold run)")
    ap.add_argument("--no-nostall", action="store_true", help="leave out nostall's prediction")
    a = ap.parse_args(argv)
    made = _load_factory(a.target)()
    if isinstance(made, dict):
        dl, step, restore = made["dataloader"], made["train_step"], made.get("restore", ())
        files = made.get("files")
    else:
        dl, step = made[0], made[1]
        restore = made[2] if len(made) > 2 else ()
        files = None
    r = profile(dl, step, max_batches=a.max_batches, files=files, restore=restore,
                report=a.report, cold=not a.no_cold, nostall=not a.no_nostall,
                progress=False if a.json else None)
    if a.json:
        json.dump(r, sys.stdout, indent=1, default=str)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(r.text)
        if a.report:
            sys.stdout.write("report written to %s\n" % a.report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
