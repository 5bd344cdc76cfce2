"""nostall.analyze: where the data stall of a real training step comes from.

    import nostall
    result = nostall.analyze(train_step, "/data/train", batch_size=256, threads=8)
    print(result.text)                       # the readable report
    result["bound"]                          # "compute" | "prep" | "fetch"
    result["recommendations"]                # cores, cache, echo, transcode, with predicted gains

`train_step(images, labels)` is your step: it is called as
train_step(*batch) when the loader yields a tuple (an ImageFolder's
(images, labels)), else as train_step(batch) (the dict of a mix, of
task="detect", "tokens", "audio" or "bytes", of a transform's fields), as
nostall.profile calls it. It is run three ways, as the CLI's
`nostall analyze` runs a simulated one:

* synthetic: on one batch already in memory, as many times as an epoch has
  batches (the accelerator's own rate, and the step's own CPU use);
* cached:    with the loader, every dataset file in the OS page cache and no
  storage delay (adds preprocessing);
* cold:      with the loader as configured, after dropping the dataset's
  files from the page cache with posix_fadvise(DONTNEED) (adds fetching; no
  root needed).

Everything else is the library's (nostall_analyze.h, through ctypes, as the
`nostall analyze` command uses it): nostall_analyze_measure() measures the
dataset, storage, memory, the CPU share, the prep rate (the loader without a
step) and the restart-marker what-if; the what-if model, its
recommendations and the reports (JSON, text, HTML) are made from the
measurements in C -- the model lives in one place. The result is the JSON
report as a dict (see docs/analyzer.md), plus `.text`.

During normal training the same counters come from Loader.stats();
stall_summary(loader) condenses them.
"""

import ctypes
import json
import os
import tempfile
import time

from . import _lib
from .loader import _PY_OPTIONS, Loader, _check, _encode, _option_text
from .profile import _call

__all__ = ["analyze", "stall_summary", "Analysis"]


class Analysis(dict):
    """The analyzer's JSON as a dict; .text is the terminal report."""
    text = ""


class _Files:
    """The dataset's distinct local files (nostall_analyze_files: a token
    corpus or a tar shard is one file; http(s) and s3 items are left out):
    warm() reads each into the page cache, drop() drops each from it."""

    def __init__(self, source_path, options):
        self._h = ctypes.c_void_p()
        cfg = _config(options)
        try:
            _check(_lib.analyze_files_create(ctypes.byref(self._h), _encode(source_path), cfg,
                                             None, 0))
        finally:
            _lib.config_free(cfg)

    def __len__(self):
        return _lib.analyze_files_count(self._h)

    def warm(self):
        return _lib.analyze_files_warm(self._h)

    def drop(self):
        return _lib.analyze_files_drop(self._h)

    def close(self):
        _lib.analyze_files_free(self._h)
        self._h = ctypes.c_void_p()


def _run(source, options, train_step, max_batches, label, progress):
    """One epoch (or max_batches) of the loader with the step; wall, CPU, stats."""
    with Loader(source, **options) as ld:
        total = len(ld) if not max_batches else min(len(ld), max_batches)
        s0 = ld.stats()
        t0, c0 = time.perf_counter(), time.process_time()
        items = batches = 0
        for batch in ld:
            _call(train_step, batch)
            items += len(ld.last_indices)
            batches += 1
            if progress:
                progress(label, batches, total)
            if batches >= total:
                break
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        s1 = ld.stats()
    st = {k: s1[k] - s0[k] for k in s1}
    return {"seconds": seconds, "cpu_s": cpu, "items": items, "batches": batches, "stats": st,
            "end": s1}


def _tty_progress(label, done, total):
    import sys
    sys.stderr.write("\r%-10s %d/%d batches   " % (label, done, total))
    if done >= total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def _config(options):
    """A C configuration of the Loader keywords that are C options (free it)."""
    cfg = ctypes.c_void_p()
    _check(_lib.config_create(ctypes.byref(cfg)))
    try:
        for name, value in options.items():
            if name not in _PY_OPTIONS:  # Loader keywords that are not C options
                _check(_lib.config_set(cfg, name.encode(), _encode(_option_text(name, value))))
    except BaseException:
        _lib.config_free(cfg)
        raise
    return cfg


def _measure(source_path, options, max_batches):
    """nostall_analyze_measure(): what needs no step, with the job's options."""
    cfg = _config(options)
    try:
        m = _lib.AnalyzeMeas()
        o = _lib.AnalyzeMeasureOptions(max_batches=max_batches or 0, keep_cached=0)
        _check(_lib.analyze_measure(ctypes.byref(m), ctypes.sizeof(m), _encode(source_path), cfg,
                                    ctypes.byref(o), ctypes.sizeof(o)))
    finally:
        _lib.config_free(cfg)
    return m


class _Model:
    """A nostall_analysis (the model of measurements `m`) and its reports;
    nostall.profile feeds it a foreign loader's runs, analyze() nostall's."""

    def __init__(self, m):
        self._a = ctypes.c_void_p()
        _check(_lib.analyze_create(ctypes.byref(self._a), ctypes.byref(m), ctypes.sizeof(m)))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _lib.analyze_free(self._a)
        self._a = ctypes.c_void_p()

    def predict(self, spec):
        _check(_lib.analyze_predict(self._a, _encode(spec), None, 0))

    def note(self, text, warning=False):
        """A line of the caller's in every report (a warning, or a note)."""
        _check(_lib.analyze_note(self._a, 1 if warning else 0, _encode(text)))

    def report(self, fmt, data):
        name, n = _encode(data), ctypes.c_size_t()
        _check(_lib.analyze_report(self._a, fmt, name, None, 0, ctypes.byref(n)))
        buf = ctypes.create_string_buffer(n.value + 1)
        _check(_lib.analyze_report(self._a, fmt, name, buf, len(buf), ctypes.byref(n)))
        return buf.raw[:n.value].decode("utf-8", "replace")

    def result(self, data, report=None, cls=None):
        """The JSON report as a dict (cls, default Analysis) with .text; the
        HTML report written to `report` when given."""
        result = (cls or Analysis)(json.loads(self.report(_lib.ANALYZE_JSON, data)))
        result.text = self.report(_lib.ANALYZE_TEXT, data)
        if report:
            with open(report, "w", encoding="utf-8") as f:
                f.write(self.report(_lib.ANALYZE_HTML, data))
        return result


def _model(m, data, predict, report):
    """The model, the predictions asked for and the reports: an Analysis."""
    with _Model(m) as a:
        for spec in predict:
            a.predict(spec)
        return a.result(data, report)


def analyze(train_step, source, *, max_batches=None, report=None, predict=(), cli=None,
            progress=None, **loader_options):
    """Measure and model the data stall of `train_step` fed by a nostall
    Loader over `source` with `loader_options` (any Loader keyword).

    max_batches: cap each measured run (default: one epoch).
    report:      also write a self-contained HTML report to this path.
    predict:     extra configurations to predict, e.g. ["threads=8,cache_fraction=0.5"].
    progress:    None (a line on stderr when it is a terminal), False, or a
                 callable(label, done, total).
    cli:         ignored (the analysis is the library's; kept so that existing
                 calls work).
    Returns an Analysis (dict of the JSON report, with .text, the terminal
    report). A bad `predict` raises nostall.InvalidError (a ValueError).
    """
    import sys
    if progress is None:
        progress = _tty_progress if sys.stderr.isatty() else None
    user_opts = {k: v for k, v in loader_options.items() if v is not None}
    # prep servers from the launcher's environment, as Loader takes them, so
    # that nostall_analyze_measure() runs with them too (remote prep figures)
    for key in ("prep_servers", "prep_secret_file"):
        env = os.environ.get("NOSTALL_" + key.upper())
        if key not in user_opts and env not in (None, ""):
            user_opts[key] = env
    # the runs measure without echoing (the model predicts it) and one epoch each
    opts = {k: v for k, v in user_opts.items() if k not in ("epochs", "echo_factor", "echo")}

    # The dataset's files, and one batch for the synthetic run.
    probe_opts = dict(opts, threads=1, batches_ahead=1, cache_bytes=0, storage_mbps=0,
                      storage_latency_ms=0, cache_transcode=0)
    with Loader(source, copy=True, **probe_opts) as probe:
        info = probe.info()
        batch0 = next(iter(probe))
        source_path = probe.source if isinstance(source, (str, bytes, os.PathLike)) else None
    if source_path is None:
        # a Python list of (path, label): the library takes a list file
        fd, list_file = tempfile.mkstemp(prefix="nostall-analyze-", suffix=".tsv")
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
            for p, label in source:
                f.write("%s\t%d\n" % (os.path.abspath(os.fsdecode(p)), int(label)))
        source_path = list_file
    else:
        list_file = None
    nb = info["batches_per_epoch"] if not max_batches else min(info["batches_per_epoch"], max_batches)

    files = None
    try:
        files = _Files(source_path, opts)
        # 1. synthetic: the step alone, on a batch already in memory
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(nb):
            _call(train_step, batch0)
            if progress:
                progress("synthetic", i + 1, nb)
        syn_s, syn_cpu = time.perf_counter() - t0, time.process_time() - c0
        del batch0

        # 2. cached: page cache warm, no emulated storage, no echo
        files.warm()
        warm = _run(source_path, dict(opts, cache="none", cache_bytes=0, cache_transcode=0,
                                      storage_mbps=0, storage_latency_ms=0, echo="fixed",
                                      echo_factor=1, epochs=1),
                    train_step, max_batches, "cached", progress)
        # 3. cold: as configured, after dropping the files from the page cache
        files.drop()
        cold = _run(source_path, dict(opts, epochs=1, echo="fixed", echo_factor=1), train_step, max_batches,
                    "cold", progress)
        files.drop()

        runs = {
            "step_s": syn_s / nb, "step_cpu_s": syn_cpu / nb,
            "syn_seconds": syn_s, "syn_batches": nb,
            "warm_seconds": warm["seconds"], "warm_items": warm["items"],
            "warm_batches": warm["batches"], "warm_cpu_s": warm["cpu_s"],
            "warm_stall_s": warm["stats"]["consumer_wait_ns"] * 1e-9,
            "warm_fetch_ns": warm["stats"]["fetch_busy_ns"],
            "warm_decode_ns": warm["stats"]["decode_busy_ns"],
            "warm_augment_ns": warm["stats"]["augment_busy_ns"],
            "cold_seconds": cold["seconds"], "cold_items": cold["items"],
            "cold_batches": cold["batches"],
            "cold_stall_s": cold["stats"]["consumer_wait_ns"] * 1e-9,
            "cold_storage_reads": cold["stats"]["storage_reads"],
            "cold_storage_bytes": cold["stats"]["storage_bytes_read"],
            "cold_storage_wait_ns": cold["stats"]["storage_wait_ns"],
            "cold_fetch_ns": cold["stats"]["fetch_busy_ns"],
        }
        end = cold["end"]
        if end.get("autotune"):  # what autotune had chosen at the cold run's end (the report's)
            runs.update(cold_autotune=1, cold_tuned_workers=end["active_workers"],
                        cold_tuned_ahead=end["tuned_batches_ahead"],
                        cold_tuned_depth=end["tuned_io_depth"], cold_tune_reason=end["tune_reason"],
                        cold_tuned_cache=end.get("tuned_cache_bytes", 0))
        # the dataset, the machine, the prep rate, the restart-marker sample
        m = _measure(source_path, user_opts, max_batches)
        for k, v in runs.items():
            setattr(m, k, float(v))
        result = _model(m, os.fsdecode(source_path), predict, report)
    finally:
        if files is not None:
            files.close()
        if list_file:
            os.unlink(list_file)
    return result


def stall_summary(loader):
    """The data stall so far from a Loader's counters, during normal training:
    {stall_s, step_s, stall_fraction, prep_busy_s, storage_wait_s,
    fetch_stall_s, prep_stall_s, items}. step_s is the consumer's time
    between batches (consumer_busy_ns, when the library provides it;
    otherwise None and stall_fraction is None). The stall is split into
    fetch and prep stall in proportion to the workers' time waiting for
    storage and preparing items: an estimate while training runs; the
    differential measurement of analyze() is the precise one."""
    st = loader.stats()
    stall = st.get("consumer_wait_ns", 0) * 1e-9
    busy = st.get("consumer_busy_ns")
    step = busy * 1e-9 if busy else None
    prep = (st.get("fetch_busy_ns", 0) - st.get("storage_wait_ns", 0) + st.get("decode_busy_ns", 0)
            + st.get("augment_busy_ns", 0)) * 1e-9
    wait = st.get("storage_wait_ns", 0) * 1e-9
    fetch_share = wait / (wait + prep) if wait + prep > 0 else 0.0
    return {"stall_s": stall, "step_s": step,
            "stall_fraction": stall / (stall + step) if step else None,
            "prep_busy_s": prep, "storage_wait_s": wait,
            "fetch_stall_s": stall * fetch_share, "prep_stall_s": stall * (1 - fetch_share),
            "items": st.get("items_delivered", 0)}
