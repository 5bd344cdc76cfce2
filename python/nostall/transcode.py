"""nostall.transcode(): the lossless restart-marker copy of a dataset.

    import nostall
    summary = nostall.transcode("/data/train", "/data/train-rst")
    loader = nostall.Loader("/data/train-rst", ...)   # same pixels, less CPU

It rewrites every JPEG under SRC losslessly (the same DCT coefficients, so
the same pixels) with a restart marker every MCU, so that nostall's region
decode entropy-decodes only the blocks a crop covers; other files are copied
as they are. `nostall.analyze()` measures what it would save on a sample of
your files ("Decoding" recommendation).

The rewrite is the library's (nostall_transcode_jpeg(), the same as `nostall
transcode` and the MinIO cache's cache_transcode: standard Huffman tables,
or optimized ones where those would grow a file by more than an eighth;
EXIF/ICC segments kept). This module walks the tree and calls it per file
from a pool of threads (ctypes releases the GIL during each call), on every
CPU unless threads= says otherwise.
"""
import ctypes
import os
import queue
import stat
import threading
import time

from . import _lib
from .loader import error_class

_MAX_DEPTH = 64
_MAX_THREADS = 256


def _io_error(message):
    code = _lib.CODE["E_IO"]
    return error_class(code)(code, message)


def _check_int(name, flag, v, hi):
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError("nostall.transcode: %s must be an int, got %r" % (name, v))
    if not 1 <= v <= hi:
        raise ValueError("nostall.transcode: %s (%s) must be an integer in 1..%d (got %r)"
                         % (name, flag, hi, v))
    return v


def _check_dirs(src, dst, force):
    """The CLI's checks: SRC a directory, DST empty (or force) and not inside SRC."""
    if len(src) > 3000 or len(dst) > 3000:
        raise ValueError("nostall.transcode: SRC or DST path is too long")
    if not os.path.isdir(src):
        raise ValueError("transcode: SRC '%s' is not a directory" % src)
    if os.path.exists(dst):
        if not os.path.isdir(dst):
            raise ValueError("transcode: '%s' exists and is not a directory" % dst)
        if os.listdir(dst) and not force:
            raise ValueError("transcode: '%s' exists and is not empty (use force=True to write "
                             "into it)" % dst)
    try:
        os.makedirs(dst, exist_ok=True)
    except OSError as e:
        raise _io_error("transcode: cannot create '%s': %s" % (dst, e.strerror)) from None
    rs, rd = os.path.realpath(src), os.path.realpath(dst)
    if rd == rs or rd.startswith(rs.rstrip("/") + "/"):
        raise ValueError("transcode: DST '%s' is inside SRC '%s'" % (dst, src))


class _State:
    """Counters and messages, guarded by one lock (the workers share them)."""

    def __init__(self, options):
        self.lock = threading.Lock()
        self.options = options
        self.files = self.jpegs = self.copied = self.damaged = self.kept = self.errors = 0
        self.in_bytes = self.out_bytes = 0
        self.messages = []

    def message(self, text, error=False):
        with self.lock:
            self.messages.append(text)
            self.errors += error


class _Worker:
    """One thread's buffers: the rewrite goes into a ctypes buffer grown as needed."""

    def __init__(self, state):
        self.state = state
        self.buf = ctypes.create_string_buffer(0)
        self.res = _lib.TranscodeResult()
        self.out_len = ctypes.c_size_t()

    def rewrite(self, data):
        """(rewritten bytes or None, outcome, message): outcome is 'rewritten',
        'kept', 'damaged' or 'failed'."""
        bound = _lib.transcode_bound(len(data))
        if bound > len(self.buf):
            self.buf = ctypes.create_string_buffer(bound)
        opts = self.state.options
        rc = _lib.transcode_jpeg(self.buf, len(self.buf), ctypes.byref(self.out_len), data,
                                 len(data), ctypes.byref(opts), ctypes.sizeof(opts),
                                 ctypes.byref(self.res), ctypes.sizeof(self.res))
        why = _lib._s(self.res.message)
        if rc == 0 and self.out_len.value > 0:
            return self.buf.raw[:self.out_len.value], "rewritten", why
        if rc == 0:
            return None, "kept", why
        if rc in (_lib.CODE["E_CORRUPT"], _lib.CODE["E_TRUNCATED"]):
            return None, "damaged", why
        return None, "failed", why

    def do_file(self, src, dst):
        s = self.state
        try:
            with open(src, "rb") as f:
                data = f.read()
        except OSError as e:
            s.message("transcode: cannot read '%s': %s" % (src, e.strerror), error=True)
            return
        out, outcome = data, None
        if data[:3] == b"\xff\xd8\xff":
            rewritten, outcome, why = self.rewrite(data)
            if rewritten is not None:
                out = rewritten
            elif outcome == "damaged":
                s.message("transcode: %s: damaged JPEG (%s), copied unchanged" % (src, why))
            elif outcome == "kept":
                s.message("transcode: %s: kept as it is (%s)" % (src, why))
            else:
                s.message("transcode: cannot rewrite '%s': %s (copied unchanged)" % (src, why),
                          error=True)
        tmp = dst + ".tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(out)
            os.replace(tmp, dst)
        except OSError as e:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            s.message("transcode: cannot write '%s': %s" % (dst, e.strerror), error=True)
            return
        with s.lock:
            s.files += 1
            s.in_bytes += len(data)
            s.out_bytes += len(out)
            if outcome == "rewritten":
                s.jpegs += 1
            else:  # other files, and JPEGs kept or damaged (counted apart)
                s.copied += 1
                s.damaged += outcome == "damaged"
                s.kept += outcome == "kept"

    def run(self, jobs):
        while True:
            job = jobs.get()
            if job is None:
                return
            self.do_file(*job)


def _walk(state, src, dst, depth, submit):
    """Mirror the directory src into dst (sorted, symlinks followed), handing
    files to submit(src_file, dst_file)."""
    if depth > _MAX_DEPTH:
        state.message("transcode: '%s': more than 64 directory levels, skipped" % src, True)
        return
    try:
        names = sorted(os.listdir(src))
    except OSError as e:
        state.message("transcode: cannot read directory '%s': %s" % (src, e.strerror), True)
        return
    for name in names:
        a, b = os.path.join(src, name), os.path.join(dst, name)
        try:
            st = os.stat(a)
        except OSError as e:
            state.message("transcode: cannot stat '%s': %s" % (a, e.strerror), True)
            continue
        if stat.S_ISDIR(st.st_mode):
            try:
                os.mkdir(b)
            except FileExistsError:
                pass
            except OSError as e:
                state.message("transcode: cannot create '%s': %s" % (b, e.strerror), True)
                continue
            _walk(state, a, b, depth + 1, submit)
        elif stat.S_ISREG(st.st_mode):
            submit(a, b)
        else:
            state.message("transcode: '%s': not a regular file or directory, skipped" % a)


def transcode(src, dst, *, restart_mcus=None, restart_rows=None, threads=None, force=False,
              cli=None):
    """Copy the tree `src` to `dst`, every JPEG rewritten with restart markers.

    restart_mcus / restart_rows: one marker every N MCUs (default 1) or every
    N MCU rows (1..64). threads: files at once (default: the online CPUs).
    force: write into a non-empty `dst`. cli: ignored (the rewrite is the
    library's; kept so that existing calls work). Returns a dict: files,
    seconds, jpegs, copied, damaged, kept, mb_in, mb_out (seconds and MB to
    one decimal), messages (per-file reports: damaged JPEGs, and JPEGs the
    rewrite keeps as they are -- progressive ones with incomplete scans,
    CMYK, ... --, both copied unchanged). Raises ValueError for a bad argument
    or a missing `src`, and nostall.IoError (an OSError and a nostall.Error,
    with the messages) when files could not be read or written.
    """
    if restart_mcus is not None and restart_rows is not None:
        raise ValueError("nostall.transcode: restart_mcus and restart_rows exclude each other")
    _check_int("restart_mcus", "--restart-mcus", restart_mcus, 64)
    _check_int("restart_rows", "--restart-rows", restart_rows, 64)
    _check_int("threads", "--threads", threads, _MAX_THREADS)
    src, dst = os.fsdecode(os.fspath(src)), os.fsdecode(os.fspath(dst))
    _check_dirs(src, dst, force)
    options = _lib.TranscodeOptions(restart_mcus=restart_mcus or 0, restart_rows=restart_rows or 0)
    if not restart_rows and not restart_mcus:
        options.restart_mcus = 1
    if threads is None:
        threads = max(1, min(os.cpu_count() or 1, _MAX_THREADS))
    state = _State(options)
    t0 = time.monotonic()
    jobs = queue.Queue(maxsize=64)
    workers = [_Worker(state) for _ in range(threads)]
    pool = [threading.Thread(target=w.run, args=(jobs,), daemon=True) for w in workers]
    for t in pool:
        t.start()
    try:
        _walk(state, src, dst, 0, lambda a, b: jobs.put((a, b)))
    finally:
        for _ in pool:
            jobs.put(None)
        for t in pool:
            t.join()
    if state.errors:
        raise _io_error("; ".join(state.messages))
    return {"files": state.files, "seconds": round(time.monotonic() - t0, 1),
            "jpegs": state.jpegs, "copied": state.copied - state.damaged - state.kept,
            "damaged": state.damaged, "kept": state.kept,
            "mb_in": round(state.in_bytes / 1e6, 1), "mb_out": round(state.out_bytes / 1e6, 1),
            "messages": state.messages}
