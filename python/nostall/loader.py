"""nostall.Loader: one epoch per `for`, zero-copy batches, exceptions from statuses.

Design
------
* Thin: every option is a keyword forwarded as text to nostall_config_set(),
  which validates it (the C message names the option and its bounds). The
  option list, status list and counter names come from the library (_lib).
* Zero copy: a yielded (images, labels) pair is a view of the ring slot lent by
  nostall_loader_next_timed(). The slot is handed back to the ring when the
  next batch is requested, when the iteration ends or is abandoned, and on
  set_epoch/load_state_dict/close. **Do not keep a yielded tensor (or a view
  of it) past that point**: its memory is refilled with a later batch, or freed
  by close(). Use copy=True (one memcpy per batch, slot released at once), or
  .clone() / .to(device) what you keep.
* One batch is lent at a time. Which one is recorded in a ctypes nostall_batch
  that the C call fills itself (images != NULL <=> lent), so an exception
  raised between Python bytecodes (KeyboardInterrupt) cannot lose track of it.
* Ctrl-C: batches are awaited with nostall_loader_next_timed(100 ms) in a loop.
  ctypes drops the GIL during the wait and Python runs signal handlers between
  the calls, so KeyboardInterrupt arrives within ~100 ms. The loader stays
  usable afterwards: the next `for` continues the interrupted epoch.
* Epochs: `for batch in loader` runs the current epoch until EPOCH_END (the
  next `for` runs the next epoch); after `epochs` epochs (if set) it yields
  nothing. state_dict()/load_state_dict() give exact mid-epoch resume.
* Threads: stop() may be called from any thread (the iterating thread then
  gets StoppedError); everything else from the thread that iterates.
* fork(): a child's copy of a Loader is unusable (ForkError); its close() or
  garbage collection frees nothing, since the memory and threads are the
  parent's.
"""

import ctypes
import os
import warnings

import numpy as np

from . import _lib

_WAIT_MS = 100


# --- exceptions ----------------------------------------------------------------

class Error(Exception):
    """A libnostall error: .status (negative code), .status_name, .message."""
    __module__ = "nostall"

    def __init__(self, status, message=None):
        self.status = status
        self.status_name = _lib.STATUS.get(status, "UNKNOWN")
        self.message = message or _lib._s(_lib.strerror(status))
        super().__init__(self.message)

    def __str__(self):
        return "%s (%s)" % (self.message, self.status_name)


class BadItemError(Error):
    """A bad dataset item under on_bad_item="fail" (the message names the file).
    Raised as a class deriving from both this and the status's class,
    e.g. BadItemError + NotImageError."""
    __module__ = "nostall"


# Built-in bases that make the common cases catchable the Python way.
_EXTRA_BASES = {"E_OPTION": (ValueError,), "E_INVALID": (ValueError,),
                "E_NOMEM": (MemoryError,), "E_NOT_FOUND": (FileNotFoundError,),
                "E_PERMISSION": (PermissionError,), "E_IO": (OSError,)}
# Statuses next() returns for reasons other than a bad item.
_NOT_ITEM = {"E_INVALID", "E_NOMEM", "E_OPTION", "E_DATASET", "E_STOPPED", "E_STATE",
             "E_THREAD", "E_FORK"}


def _class_name(status_name):  # "E_NOT_FOUND" -> "NotFoundError"
    return "".join(w.capitalize() for w in status_name[2:].split("_")) + "Error"


ERRORS = {}  # status code -> exception class, one per E_* of the status table
for _code, _name in sorted(_lib.STATUS.items(), reverse=True):
    if _code < 0:
        ERRORS[_code] = type(_class_name(_name), (Error,) + _EXTRA_BASES.get(_name, ()),
                             {"__doc__": _lib._s(_lib.strerror(_code)), "__module__": "nostall"})
_BAD_ITEM = {}


def error_class(status, bad_item=False):
    """The exception class raised for `status` (bad_item: as returned by next)."""
    base = ERRORS.get(status, Error)
    if not bad_item or _lib.STATUS.get(status) in _NOT_ITEM:
        return base
    if status not in _BAD_ITEM:
        _BAD_ITEM[status] = type(base.__name__, (BadItemError, base), {"__module__": "nostall"})
    return _BAD_ITEM[status]


def _raise(status, bad_item=False):
    msg = _lib._s(_lib.last_error()) or None
    raise error_class(status, bad_item)(status, msg)


def _check(status):
    if status < 0:
        _raise(status)
    return status


# --- options -------------------------------------------------------------------

def _option_text(name, value):
    t = _lib.OPTIONS[name]["type_name"] if name in _lib.OPTIONS else None
    if isinstance(value, bool) and t == "bool":
        return "1" if value else "0"
    if not isinstance(value, (str, bytes)) and hasattr(value, "__iter__"):
        return ",".join(repr(float(v)) if isinstance(v, float) else str(v) for v in value)
    if isinstance(value, float):
        return repr(value)
    return value.decode() if isinstance(value, bytes) else str(value)


def _encode(text):
    return os.fsencode(text) if not isinstance(text, bytes) else text


def _torch():
    try:
        import torch
        return torch
    except ImportError:
        return None


class _Interface:
    """Lets numpy wrap raw memory without ctypes array types: cheap per batch."""
    __slots__ = ("__array_interface__",)

    def __init__(self, addr, shape, typestr):
        self.__array_interface__ = {"data": (addr, False), "shape": shape,
                                    "typestr": typestr, "version": 3}


def _view(addr, shape, typestr):
    return np.asarray(_Interface(addr, shape, typestr))


# --- loader --------------------------------------------------------------------

class Loader:
    """Batches of decoded, augmented images from an ImageFolder directory, a
    `path<TAB>label` list file, or a Python list of (path, label) pairs.

    Every libnostall option is a keyword (see nostall.OPTIONS for types,
    defaults and bounds): batch_size, crop, mode="train"|"eval", threads,
    seed, output="float"|"uint8", mean=(r, g, b), shuffle=True, ...
    Values are passed to the library as text (bools as 1/0, sequences as
    "a,b,c"), which validates them: a bad one raises OptionError naming it.
    None means "not given". rank and world_size default to $RANK and
    $WORLD_SIZE (set by torchrun). peer_cache=nostall.mpi.PartitionedCache
    serves items from the MPI job's partitioned cache (rank and world_size
    then default to its communicator's).

    Iterating yields `(images, labels)` for one epoch: torch tensors (numpy
    arrays if torch is not installed) -- float: float32 N,C,H,W; uint8: uint8
    N,H,W,C; labels int64 [N]. They are views of library memory that is
    reused once the next batch is requested (see the module docstring);
    copy=True yields private copies instead.
    """

    def __init__(self, source, *, copy=False, peer_cache=None, **options):
        self._ld = None
        self._peer_cache = peer_cache  # kept alive while this loader uses it
        self._lib = _lib  # kept for __del__ during interpreter shutdown
        self._copy = bool(copy)
        self._batch = _lib.Batch()
        self._iter_token = 0
        self._as_torch = _torch()
        self._pid = os.getpid()
        options = {k: v for k, v in options.items() if v is not None}  # None: not given
        if peer_cache is not None:
            if not isinstance(source, (str, bytes, os.PathLike)) or \
                    os.path.realpath(os.fsdecode(source)) != os.path.realpath(peer_cache.source):
                raise ERRORS[_lib.CODE["E_OPTION"]](
                    _lib.CODE["E_OPTION"], "nostall.Loader: peer_cache was made for %s, not %r "
                    "(item numbers must match)" % (peer_cache.source, source))
            peer_cache._attach_loader(self)
            for key, value in (("rank", peer_cache.rank), ("world_size", peer_cache.size)):
                if key in options and str(options[key]) != str(value):
                    raise ERRORS[_lib.CODE["E_OPTION"]](
                        _lib.CODE["E_OPTION"], "nostall.Loader: %s=%s but the peer_cache's "
                        "communicator says %s" % (key, options[key], value))
                options[key] = value
        for key in ("rank", "world_size"):
            env = os.environ.get(key.upper())
            if key not in options and env not in (None, ""):
                options[key] = env
        cfg = ctypes.c_void_p()
        _check(_lib.config_create(ctypes.byref(cfg)))
        try:
            for name, value in options.items():  # the C side validates names and values
                _check(_lib.config_set(cfg, name.encode(), _encode(_option_text(name, value))))
            self.config = {}  # every option's effective value, as text
            buf = ctypes.create_string_buffer(4096)
            for name in _lib.OPTIONS:
                _check(_lib.config_get(cfg, name.encode(), buf, len(buf)))
                self.config[name] = _lib._s(buf.value)
            if peer_cache is not None:
                _check(_lib.config_set_peer_cache(cfg, ctypes.byref(peer_cache.hooks)))
            self.source = self._source_path(source)
            ld = ctypes.c_void_p()
            _check(_lib.loader_create(ctypes.byref(ld), _encode(self.source), cfg))
            self._ld = ld.value
        finally:
            _lib.config_free(cfg)
            if getattr(self, "_tmp_list", None):
                os.unlink(self._tmp_list)
        self._info = self.info()
        if self._info["files_ignored"]:
            # Nothing silently lost: torchvision's ImageFolder would also
            # have loaded .bmp, .gif, .webp, .tif and friends.
            warnings.warn("nostall: %d file(s) in %s ignored: not named .jpg, .jpeg or .png "
                          "(the formats nostall decodes)" % (self._info["files_ignored"],
                                                            self.source),
                          RuntimeWarning, stacklevel=2)

    def _source_path(self, source):
        if isinstance(source, (str, bytes, os.PathLike)):
            return os.fspath(source)
        # A Python list of (path, label): write a temporary list file; the
        # index is built (copied) at create, so it is deleted right after.
        import tempfile
        fd, self._tmp_list = tempfile.mkstemp(prefix="nostall-", suffix=".tsv")
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
            for p, label in source:
                p = os.path.abspath(os.fsdecode(p))
                if "\t" in p or "\n" in p:
                    raise ValueError("nostall.Loader: path with a tab or newline: %r" % p)
                f.write("%s\t%d\n" % (p, int(label)))
        return self._tmp_list

    # -- lifetime --

    def _handle(self):
        if not self._ld:
            raise ERRORS[_lib.CODE["E_STATE"]](_lib.CODE["E_STATE"], "Loader is closed")
        return self._ld

    def _release(self):
        """Give the lent batch (if any) back to the ring."""
        b = self._batch
        if b.images and self._ld:
            rc = self._lib.loader_release(self._ld, ctypes.byref(b))
            b.images = None
            # E_INVALID: already released (only if an exception such as
            # KeyboardInterrupt landed between the two lines above).
            if rc != _lib.CODE["E_INVALID"]:
                _check(rc)

    def close(self):
        """Release the lent batch, stop and join the workers, free the loader.
        Idempotent. Tensors yielded without copy=True are invalid afterwards."""
        ld, self._ld = self._ld, None
        if ld and os.getpid() != self._pid:
            return  # a fork()ed child: the workers are the parent's; leave it all be
        if ld:
            lib = self._lib
            if self._batch.images:
                lib.loader_release(ld, ctypes.byref(self._batch))
                self._batch.images = None
            lib.loader_free(ld)

    def __del__(self):
        if getattr(self, "_ld", None):
            self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def stop(self):
        """Make the iterating thread's next wait raise StoppedError. Any thread."""
        if self._ld:
            self._lib.loader_stop(self._ld)

    # -- iteration --

    def __len__(self):
        return self._info["batches_per_epoch"]

    def __iter__(self):
        self._release()
        self._iter_token += 1
        return self._epoch(self._iter_token)

    def _epoch(self, token):
        b = self._batch
        try:
            # Mid-epoch (a `break`, or a resumed state): continue that epoch.
            # If it was consumed to its end without its EPOCH_END, the first
            # call returns that EPOCH_END: skip it (no length is assumed, so
            # epochs of varying length, as with fractional echoing, work).
            pending_end = self.state_dict()["position"] > 0
            while True:
                rc = self._next(b)
                if rc == _lib.EPOCH_END and pending_end:
                    pending_end = False
                    continue
                pending_end = False
                if rc != _lib.OK:  # EPOCH_END or DONE
                    self._echo_check()
                    return
                out = self._wrap(b)
                if self._copy:
                    self._release()
                yield out
                if token != self._iter_token or not self._ld:
                    return  # superseded by a newer iterator, or closed
                self._release()
        finally:
            if token == self._iter_token:
                self._release()

    def _next(self, b):
        ld = self._handle()
        b.images = None
        while True:
            rc = self._lib.loader_next_timed(ld, ctypes.byref(b), _WAIT_MS)
            if rc != _lib.TIMEOUT:  # between calls Python may raise KeyboardInterrupt
                break
        if rc < 0:
            _raise(rc, bad_item=True)
        return rc

    def _wrap(self, b):
        n, c, h, w = b.count, b.channels, b.height, b.width
        if b.dtype == _lib.DTYPE_FLOAT32:
            typestr = "<f4"
        else:
            typestr = "|u1"
        shape = (n, c, h, w) if b.layout == _lib.LAYOUT_NCHW else (n, h, w, c)
        images = _view(b.images, shape, typestr)
        labels = _view(b.labels, (n,), "<i8")
        if self._copy:
            images, labels = images.copy(), labels.copy()
        torch = self._as_torch
        if torch is not None:
            return torch.from_numpy(images), torch.from_numpy(labels)
        return images, labels

    @property
    def last_indices(self):
        """Dataset item indices (a numpy copy) of the batch currently lent,
        i.e. the one yielded last (None with copy=True or when none is lent)."""
        b = self._batch
        if not b.images:
            return None
        return _view(b.indices, (b.count,), "<u8").copy()

    @property
    def last_batch_address(self):
        """Address of the lent batch's image memory (for zero-copy checks)."""
        return self._batch.images

    # -- epochs and state --

    def set_epoch(self, epoch):
        """Start epoch `epoch` from its beginning (no-op if already there)."""
        if self.state_dict() != {"epoch": epoch, "position": 0}:
            self.load_state_dict({"epoch": epoch, "position": 0})

    def state_dict(self):
        """{"epoch", "position"}: items of `epoch` delivered so far, counting
        the batch yielded last. Save it after the training step of a batch."""
        st = _lib.State()
        _check(self._lib.loader_get_state(self._handle(), ctypes.byref(st)))
        return {"epoch": st.epoch, "position": st.position}

    def load_state_dict(self, state):
        """Continue delivery exactly at `state` (from state_dict())."""
        self._release()
        self._iter_token += 1  # a suspended iterator must not continue
        st = _lib.State(int(state["epoch"]), int(state["position"]))
        _check(self._lib.loader_set_state(self._handle(), ctypes.byref(st)))

    # -- introspection --

    def info(self):
        """Dataset and loader facts (nostall_dataset_info) as a dict."""
        di = _lib.DatasetInfo()
        _check(self._lib.loader_info(self._handle(), ctypes.byref(di)))
        return {name: getattr(di, name) for name, _ in di._fields_}

    def echo_summary(self):
        """Data echoing so far: {fresh_items, echoed_items, achieved_factor,
        estimated_R} where R = upstream time per fresh item / training time
        per delivered item (None until the loop did work between batches)."""
        s = self.stats()
        fresh, dlv = s["fresh_items"], s["items_delivered"]
        r = None
        if s["consumer_busy_ns"] and fresh and dlv and s["threads"]:
            up = s["upstream_busy_ns"] / s["threads"] / fresh
            r = up / (s["consumer_busy_ns"] / dlv)
        return {"fresh_items": fresh, "echoed_items": s["echoed_items"],
                "achieved_factor": dlv / fresh if fresh else None, "estimated_R": r}

    def _echo_check(self):
        # Once: a fixed echo factor above R only repeats data without speeding
        # training up (Choi et al.: the speed-up is bounded by R).
        if getattr(self, "_echo_warned", False) or self.config.get("echo") != "fixed":
            return
        factor = float(self.config.get("echo_factor", "1"))
        r = self.echo_summary()["estimated_R"] if factor > 1 else None
        if r and factor > 1.25 * r:
            self._echo_warned = True
            warnings.warn("nostall: echo_factor %g exceeds the estimated R %.2f (pipeline time per "
                          "fresh item / time between batches per item, which includes anything "
                          "the loop does besides the step, e.g. evaluation): repeats beyond R "
                          "only slow training" % (factor, r), RuntimeWarning, stacklevel=3)

    def stats(self):
        """Every counter of nostall_loader_stats() (times in ns)."""
        s = _lib.Stats()
        _check(self._lib.loader_stats(self._handle(), ctypes.byref(s), ctypes.sizeof(s)))
        return {name: getattr(s, name) for name in _lib.STAT_NAMES}

    def skipped(self):
        """Distinct bad items left out so far: [{index, path, status, reason}]."""
        ld, out = self._handle(), []
        for i in range(self._lib.loader_skipped_count(ld)):
            si = _lib.SkipInfo()
            _check(self._lib.loader_skipped(ld, i, ctypes.byref(si)))
            out.append({"index": si.index, "path": _lib._s(si.path),
                        "status": _lib.STATUS.get(si.status, si.status),
                        "reason": _lib._s(si.reason)})
        return out

    def item(self, index):
        """(path, label) of dataset item `index`."""
        p, label = ctypes.c_char_p(), ctypes.c_int64()
        _check(self._lib.loader_item(self._handle(), index, ctypes.byref(p), ctypes.byref(label)))
        return _lib._s(p.value), label.value

    def class_name(self, label):
        """ImageFolder sub-folder name of `label` (None for list files)."""
        return _lib._s(self._lib.loader_class_name(self._handle(), label))

    @property
    def classes(self):
        return [self.class_name(i) for i in range(self._info["classes"])]

    def __repr__(self):
        state = "closed" if not self._ld else "%d batches/epoch" % len(self)
        return "nostall.Loader(%r, %s)" % (self.source, state)


def checksum(images, labels, state=0):
    """The CLI's checksum folded over one batch: its image bytes, then its
    labels (int64). Chain batches by passing the previous result as `state`."""
    s = ctypes.c_uint64(state)
    for arr, dtype in ((images, None), (labels, np.int64)):
        a = arr.numpy() if hasattr(arr, "numpy") else np.asarray(arr)
        a = np.ascontiguousarray(a, dtype=dtype)
        _lib.checksum_update(ctypes.byref(s), a.ctypes.data, a.nbytes)
    return s.value
