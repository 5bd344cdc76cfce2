"""nostall.Loader: DataLoader semantics over libnostall, tensors that cannot dangle.

Design
------
* Thin: every option is a keyword forwarded as text to nostall_config_set(),
  which validates it (the C message names the option and its bounds). The
  option list, status list and counter names come from the library (_lib);
  Loader.__init__'s explicit keywords are generated from the same table
  (python/gen_options.py; a test checks they match).
* Tensors that cannot dangle: a yielded image tensor views a ring slot of the
  library (no copy), and the slot goes back to the ring only when the last
  tensor or view of it dies: the array's base object holds a _Lease, whose
  finalizer releases the slot (nostall_loader_release may be called from any
  thread, in any order). Labels are copied (they are tiny). The C loader
  itself (_Core) is freed only when the Loader is closed or collected *and*
  no lease is left, so a tensor outlives its loader safely. Fallback, so
  the ring cannot run dry: when the caller keeps so many batches alive that
  the ring would have fewer than the slots it needs to make the next batches
  (ring slots - 2, or - 3 with drop_last, or - 4 with the epoch's reserve),
  the next batch is copied out
  (one memcpy) and its slot released at once. copy=True always copies.
* decode_device="cuda" (gpu_output="device", the device ring; docs/gpu.md):
  the image tensor is made with torch.utils.dlpack.from_dlpack on a DLPack
  capsule over the device ring's slot (_dlpack.py), under the same lease:
  the slot goes back when the tensor dies, after the work queued on the
  stream that was current when the batch was yielded; the same copy
  fallback. Labels are host tensors (task="detect": the host path's dict,
  its "image" on the device, the boxes host tensors).
* DataLoader semantics: every iter() starts an epoch -- the one set_epoch()
  chose, else the one after the previous iterator's -- and ends the previous
  iterator (using it afterwards raises). A state loaded with
  load_state_dict() applies to the next iter() (unless set_epoch() then
  chose another epoch: dropped, with a warning). After the last of
  `epochs`, the next iter() starts over at epoch 0 (a validation loader
  with epochs=1 runs its pass at every iter()). A coordinated member's
  set_epoch accepts the group's epoch only (a no-op). One thread iterates
  at a time: iter() or next() from a second thread while an iterator is
  alive raises.
* Ctrl-C: batches are awaited with nostall_loader_next_timed(100 ms) in a
  loop; ctypes drops the GIL during the wait and Python runs signal
  handlers between the calls, so KeyboardInterrupt arrives within ~100 ms.
* stop() may be called from any thread (the iterating thread then gets
  StoppedError).
* fork(): a child's copy of a Loader is unusable (ForkError); its close() or
  garbage collection frees nothing, since the memory and threads are the
  parent's.
"""

import atexit
import collections.abc as _abc
import copy as _copymod
import ctypes
import difflib
import math
import numbers
import os
import sys
import threading
import time
import warnings
import weakref

import numpy as np

from . import _lib

_WAIT_MS = 100
_END = object()  # the end of an epoch (internal)


# --- exceptions ----------------------------------------------------------------

def _rebuild_error(status, message, bad_item):
    cls = error_class(status, bad_item)
    return cls(status, message)


class Error(Exception):
    """A libnostall error: .status (negative code), .status_name, .message.
    Error(status, message), or Error(message) with the class's own status (as
    torch's DataLoader rebuilds an exception raised in a worker process)."""
    __module__ = "nostall"
    _status = 0

    def __init__(self, status=None, message=None):
        if not isinstance(status, int):
            status, message = self._status, (message if status is None else str(status))
        self.status = status
        self.status_name = _lib.STATUS.get(status, "UNKNOWN")
        self.message = message or _lib._s(_lib.strerror(status))
        super().__init__(self.message)

    def __str__(self):
        return "%s (%s)" % (self.message, self.status_name)

    def __reduce__(self):
        # Rebuilt through error_class, so a pickled exception (e.g. raised in
        # a DataLoader worker) unpickles to the same class and message.
        return (_rebuild_error, (self.status, self.message, isinstance(self, BadItemError)))


class BadItemError(Error):
    """A bad dataset item under on_bad_item="fail" (the message names the file).
    Raised as a class deriving from both this and the status's class,
    e.g. BadItemError + NotImageError."""
    __module__ = "nostall"


class TransformError(BadItemError):
    """An item on which transform= raised, under on_bad_item="fail": the
    message names the file and has the exception's type, text and traceback;
    the exception itself is the __cause__ (when still known)."""
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
                             {"__doc__": _lib._s(_lib.strerror(_code)), "__module__": "nostall",
                              "_status": _code})
_BAD_ITEM = {}


def error_class(status: int, bad_item: bool = False) -> type:
    """The exception class raised for `status` (bad_item: as returned by next)."""
    base = ERRORS.get(status, Error)
    if not bad_item or _lib.STATUS.get(status) in _NOT_ITEM:
        return base
    if status not in _BAD_ITEM:
        _BAD_ITEM[status] = type(base.__name__, (BadItemError, base),
                                 {"__module__": "nostall", "__qualname__": "BadItem" + base.__name__})
    return _BAD_ITEM[status]


def _raise(status, bad_item=False):
    msg = _lib._s(_lib.last_error()) or None
    raise error_class(status, bad_item)(status, msg)


def _check(status):
    if status < 0:
        _raise(status)
    return status


def _error(name, message):
    code = _lib.CODE[name]
    return ERRORS[code](code, message)


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


def _decode_device_alias(options):
    """decode_device="cuda" (torch's word) is the library's "gpu" with
    gpu_output="device" (batches stay on the GPU: DLPack tensors) unless
    gpu_output is given; "cuda:N" also sets gpu_id=N. decode_device="gpu"
    keeps the library's default, gpu_output="host"."""
    dd = options.get("decode_device")
    if not isinstance(dd, str) or not (dd == "cuda" or dd.startswith("cuda:")):
        return
    options["decode_device"] = "gpu"
    options.setdefault("gpu_output", "device")
    if dd.startswith("cuda:"):
        index = dd[len("cuda:"):]
        if "gpu_id" in options and str(options["gpu_id"]) != index:
            raise _error("E_OPTION", "nostall.Loader: decode_device=%r but gpu_id=%s"
                         % (dd, options["gpu_id"]))
        options["gpu_id"] = index


def _mix_source(source, sources, options):
    """sources=[(path, weight), ...]: the `mix` option (one SOURCE:WEIGHT per
    line, so paths may hold commas); the loader's source is then a name."""
    if sources is None:
        if source is None and not options.get("mix"):
            raise TypeError("nostall.Loader: a source is required (a folder, a list file, a "
                            "list of (path, label)), or sources=[(path, weight), ...]")
        return "mix" if source is None else source
    if "mix" in options:
        raise _error("E_OPTION", "nostall.Loader: sources= and mix= both name the mix")
    lines = []
    for entry in sources:
        try:
            path, weight = entry
        except (TypeError, ValueError):
            raise TypeError("nostall.Loader: sources= takes (path, weight) pairs, got %r"
                            % (entry,)) from None
        path = os.fsdecode(path)
        if "\n" in path:
            raise _error("E_OPTION", "nostall.Loader: sources=: a path holds a newline: %r"
                         % path)
        if isinstance(weight, bool) or not isinstance(weight, (int, float, np.integer,
                                                               np.floating)):
            raise TypeError("nostall.Loader: sources=: the weight of %s must be a number, "
                            "got %r" % (path, weight))
        lines.append("%s:%r" % (path, float(weight)))
    options["mix"] = "\n".join(lines) + "\n"
    return "mix" if source is None else source


def _encode(text):
    return os.fsencode(text) if not isinstance(text, bytes) else text


# torch.utils.data.DataLoader keywords and what nostall calls them.
_TORCH_NAMES = {
    "num_workers": "threads (worker threads in this process; default: every CPU)",
    "prefetch_factor": "batches_ahead (batches prepared ahead of the training loop)",
    "persistent_workers": "nothing: nostall's threads live as long as the Loader",
    "sampler": "shuffle, seed, rank and world_size (the order is built in)",
    "batch_sampler": "batch_size and drop_last",
    "generator": "seed",
    "collate_fn": "nothing: batches are collated in C (uint8 or float32 tensors)",
    "worker_init_fn": "nothing: there are no worker processes",
    "timeout": "nothing: stop() ends a wait from another thread",
    "multiprocessing_context": "nothing: there are no worker processes",
}


def _unknown_option(name):
    if name in _TORCH_NAMES:
        hint = "nostall's equivalent: " + _TORCH_NAMES[name]
    else:
        close = difflib.get_close_matches(name, list(_lib.OPTIONS) + list(_PY_OPTIONS), n=3)
        hint = "did you mean %s?" % " or ".join(close) if close else \
            "see nostall.OPTIONS for every option"
    return _error("E_OPTION", "nostall.Loader: unknown option '%s'; %s" % (name, hint))


_PY_OPTIONS = ("copy", "pin_memory", "device", "normalize_on_device", "peer_cache", "transform",
               "transform_fields")


def _torch():
    try:
        import torch
        return torch
    except ImportError:
        return None


_TORCH = _torch()
if _TORCH is not None:
    _Base = _TORCH.utils.data.IterableDataset
else:
    _Base = object


# --- batch memory ----------------------------------------------------------------

# Cores whose workers run Python (transform=): closed at exit, before the
# interpreter finalizes, so no worker thread calls into a dying interpreter.
_PY_CORES = weakref.WeakSet()


def _close_py_cores():
    for core in list(_PY_CORES):
        core.close()


atexit.register(_close_py_cores)


def _in_worker():
    """True inside a transform= call on a worker thread: a release or close
    triggered there (garbage collection) must not wait for the workers."""
    mod = sys.modules.get("nostall._transform")
    return mod is not None and getattr(mod.IN_CALL, "on", False)


class _LabelNames(_abc.Sequence):
    """Loader.classes of a dataset without class names (a list file): the
    labels 0..n-1 as strings, made on demand -- n is the largest label + 1
    (below 2^31), far more than a list should hold."""

    def __init__(self, n):
        self._n = n

    def __len__(self):
        return self._n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [str(k) for k in range(self._n)[i]]
        k = range(self._n)[i]  # IndexError as a list's
        return str(k)

    def __contains__(self, name):
        return isinstance(name, str) and _label_of(name, self._n) is not None

    def index(self, name, *args):
        k = _label_of(name, self._n) if isinstance(name, str) else None
        if k is None or args:
            return super().index(name, *args)
        return k

    def __eq__(self, other):
        if isinstance(other, (_LabelNames, list, tuple)):
            return len(other) == self._n and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __repr__(self):
        return "<%d class names '0'..'%d'>" % (self._n, self._n - 1)


class _LabelIndex(_abc.Mapping):
    """Loader.class_to_idx of a dataset without class names: {str(i): i},
    on demand."""

    def __init__(self, n):
        self._n = n

    def __getitem__(self, name):
        k = _label_of(name, self._n) if isinstance(name, str) else None
        if k is None:
            raise KeyError(name)
        return k

    def __iter__(self):
        return (str(k) for k in range(self._n))

    def __len__(self):
        return self._n

    def __eq__(self, other):
        if isinstance(other, _abc.Mapping):
            return len(other) == self._n and all(self.get(k) == v for k, v in other.items())
        return NotImplemented


def _label_of(name, n):
    """i when name is str(i) for i in [0, n), else None."""
    if not name.isascii() or not name.isdigit() or (len(name) > 1 and name[0] == "0"):
        return None
    k = int(name)
    return k if k < n else None


class _Core:
    """Owns the C loader handle. Freed once the Loader is closed (or collected)
    and no lease is left, so tensors never outlive the memory they view."""

    def __init__(self, handle, transform=None):
        self.ld = handle
        self.lib = _lib  # kept for __del__ during interpreter shutdown
        self.pid = os.getpid()
        self.lock = threading.RLock()
        self.leases = 0
        self.closed = False
        self.pinned = None  # (address, bytes) registered with CUDA
        self.transform = transform  # called by the workers until the loader is freed
        if transform is not None:
            _PY_CORES.add(self)

    def release(self, batch, stream=None):
        """stream: None for a host batch; for a device batch (gpu_output=
        device) the cudaStream_t handle (0: NULL) whose work so far must
        finish before its slot is reused."""
        if _in_worker():  # (garbage collected in a worker: let another thread do it)
            threading.Thread(target=self.release, args=(batch, stream), daemon=True).start()
            return
        with self.lock:
            if self.ld and os.getpid() == self.pid:
                if stream is None:
                    self.lib.loader_release(self.ld, ctypes.byref(batch))
                else:
                    self.lib.loader_release_device(self.ld, ctypes.byref(batch), stream or None)
            self.leases -= 1
            if self.closed and self.leases == 0:
                self._free()

    def close(self):
        if _in_worker():
            threading.Thread(target=self.close, daemon=True).start()
            return
        with self.lock:
            if self.closed:
                return
            self.closed = True
            if self.ld and os.getpid() == self.pid:
                # Workers exit now (no hook runs after close); lent memory stays.
                self.lib.loader_join(self.ld)
            if self.leases == 0:
                self._free()

    def _free(self):
        ld, self.ld = self.ld, None
        if not ld or os.getpid() != self.pid:
            return  # a fork()ed child: the workers are the parent's; leave it all be
        if self.pinned is not None:
            _cuda_unregister(self.pinned[0])
            self.pinned = None
        self.lib.loader_free(ld)

    def __del__(self):
        if getattr(self, "ld", None):
            if _in_worker():
                # collected on a worker thread: free it from another (this
                # object is gone; the handle and library travel alone)
                ld, lib, self.ld = self.ld, self.lib, None
                threading.Thread(target=lib.loader_free, args=(ld,), daemon=True).start()
                return
            self.closed = True
            self._free()


class _Lease:
    """One lent batch: returns its slot to the ring when collected (a
    device batch: after the work on `stream` so far, see _Core.release)."""
    __slots__ = ("core", "batch", "stream", "__weakref__")

    def __init__(self, core, batch, stream=None):
        self.core = core
        self.batch = batch
        self.stream = stream
        with core.lock:
            core.leases += 1

    def __del__(self):
        core, self.core = self.core, None
        if core is not None:
            core.release(self.batch, self.stream)


class _Interface:
    """Lets numpy wrap library memory (cheap per batch); holds the lease, so
    the memory lives as long as any array, tensor or view of it."""
    __slots__ = ("__array_interface__", "owner")

    def __init__(self, addr, shape, typestr, owner):
        self.__array_interface__ = {"data": (addr, False), "shape": shape,
                                    "typestr": typestr, "version": 3}
        self.owner = owner


def _view(addr, shape, typestr, owner=None):
    return np.asarray(_Interface(addr, shape, typestr, owner))


def _map_tensors(obj, fn):
    """fn applied to every tensor of a batch (a tensor, tuple, list or dict)."""
    if isinstance(obj, tuple):
        return tuple(_map_tensors(o, fn) for o in obj)
    if isinstance(obj, list):
        return [_map_tensors(o, fn) for o in obj]
    if isinstance(obj, dict):
        return {k: _map_tensors(o, fn) for k, o in obj.items()}
    return fn(obj)


def _each_tensor(obj, fn):
    _map_tensors(obj, lambda t: fn(t) or t)


# nostall_dataset_info's repair counts, as the warning at create words them.
_REPAIRS = (("items_missing", "item(s) left out: their file does not exist"),
            ("parts_unmatched", "annotation(s) naming no image of the dataset"),
            ("parts_clipped", "box(es) reaching outside their image, clipped to it"),
            ("parts_dropped", "degenerate box(es) dropped"),
            ("items_truncated", "item(s) with more boxes than max_boxes, truncated"))


def _list_line(entry):
    """One line of a list file for a Python list entry: a path, (path,),
    (path, int), (path, float) or (path, [int, ...]) (multi-label)."""
    if isinstance(entry, (str, bytes, os.PathLike)):
        entry = (entry,)
    path, label = entry[0], entry[1] if len(entry) > 1 else None
    if len(entry) > 2:
        raise ValueError("nostall.Loader: a list entry is path or (path, label), not %r"
                         % (entry,))
    p = os.path.abspath(os.fsdecode(path))
    if "\t" in p or "\n" in p:
        raise ValueError("nostall.Loader: path with a tab or newline: %r" % p)
    if label is None:
        return p + "\n"
    if hasattr(label, "tolist"):  # numpy / torch scalars and vectors
        label = label.tolist()
    if isinstance(label, bool) or isinstance(label, numbers.Integral):
        text = "%d" % int(label)
    elif isinstance(label, numbers.Real):
        if not math.isfinite(label):
            raise ValueError("nostall.Loader: label of %s is not finite: %r" % (p, label))
        text = repr(float(label))
    elif isinstance(label, (list, tuple, set, frozenset)):
        ints = sorted(int(x) for x in label) if isinstance(label, (set, frozenset)) else \
            [int(x) for x in label]
        text = ",".join("%d" % x for x in ints) + ("," if len(ints) < 2 else "")
    else:
        raise TypeError("nostall.Loader: label of %s must be an int, a float or a list of "
                        "ints, not %s" % (p, type(label).__name__))
    return "%s\t%s\n" % (p, text)


def _cuda_register(addr, nbytes):
    torch = _TORCH
    rc = torch.cuda.cudart().cudaHostRegister(addr, nbytes, 0)
    code = getattr(rc, "value", rc)
    if code not in (0, None):
        raise RuntimeError("nostall: cudaHostRegister of the batch ring (%d bytes) failed: "
                           "CUDA error %s" % (nbytes, rc))


def _cuda_unregister(addr):
    try:
        _TORCH.cuda.cudart().cudaHostUnregister(addr)
    except Exception:  # interpreter shutdown, CUDA gone: nothing to do
        pass


def _check_scale(options, config):
    """mean/std given on the 0-255 scale (torchvision's are 0-1, as
    ToTensor's values): any value above 1 cannot be meant for 0-1 pixels."""
    for name in ("mean", "std"):
        if name not in options:
            continue
        try:
            values = [float(v) for v in config[name].split(",")]
        except ValueError:
            continue
        if any(v > 1 for v in values):
            warnings.warn("nostall: %s=%s looks like the 0-255 scale: nostall normalizes pixels "
                          "on the 0-1 scale, as torchvision's ToTensor + Normalize (e.g. "
                          "mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)); divide by 255"
                          % (name, "(%s)" % ", ".join("%g" % v for v in values)),
                          RuntimeWarning, stacklevel=4)


# --- the default seed ----------------------------------------------------------

_seed_warned = False


def _default_seed(torch, options):
    """seed= not given: torch's initial seed (torch.manual_seed's, or the
    process's random one), as a DataLoader's shuffle follows it; rank 0's
    when a torch.distributed process group is initialized, so every rank
    walks one order. None (the library's default, 0) without torch, for a
    coordinated group (its jobs must agree on one stream whatever their
    torch seeds), and with several ranks but no process group to agree
    through (then also a warning's text, given once a loader was made:
    their seeds could differ and the shards overlap). Returns (seed, note)."""
    if torch is None or options.get("coordinate"):
        return None, None
    seed = int(torch.initial_seed()) & 0xFFFFFFFFFFFFFFFF
    dist = getattr(torch, "distributed", None)
    if dist is not None and dist.is_available() and dist.is_initialized():
        if dist.get_world_size() > 1:
            box = [seed]
            dist.broadcast_object_list(box, src=0)
            seed = int(box[0])
        return seed, None
    try:
        world = int(options.get("world_size", 1))
    except (TypeError, ValueError):
        world = 1  # the library reports the bad value
    if world > 1:
        return None, ("nostall: world_size=%d without an initialized torch.distributed process "
                      "group: the ranks cannot agree on torch's seed, so the default seed stays "
                      "the library's 0; pass seed= (the same on every rank) or call "
                      "init_process_group() before creating the loader" % world)
    return seed, None


# --- states of several ranks ---------------------------------------------------

_CURSOR_KEYS = ("epoch", "position", "epoch_offset", "taken", "version", "rank", "world_size",
                "level", "taken_first", "taken_end", "bad")
_STATE_KEYS = _CURSOR_KEYS + ("seed", "items", "fingerprint")


def _check_merged(state, fn):
    """A merged state's shape (the library checks the rest: untrusted input)."""
    cursors = state.get("states")
    if not isinstance(cursors, list) or not 0 < len(cursors) <= _lib.STATES_MAX:
        raise ValueError("%s: a merged state holds a list of 1..%d states, got %r"
                         % (fn, _lib.STATES_MAX, type(cursors).__name__))
    for key in ("epoch", "seed", "items", "fingerprint"):
        v = state.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ValueError("%s: a merged state's %s must be an int >= 0, got %r" % (fn, key, v))
    for c in cursors:
        if not isinstance(c, dict):
            raise ValueError("%s: a merged state's states are dicts, got %r" % (fn, c))
        for key in _CURSOR_KEYS:
            v = c.get(key, 0)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not \
                    0 <= v < 1 << 64 or (key not in ("epoch", "position", "epoch_offset",
                                                     "taken", "bad") and v >= 1 << 32):
                raise ValueError("%s: a state's %s must be an int in range, got %r"
                                 % (fn, key, v))


def merge_states(states) -> dict:
    """One state of a whole job from the state_dict() of each of its ranks
    (any order; merged states may be among them): what load_state_dict()
    of any world size resumes exactly, bad items or not -- the new ranks
    skip every position of the epoch's order an old rank consumed and
    share the rest (README: "States across world sizes"). Every rank's
    state is needed: a missing one raises when loaded."""
    states = list(states)
    if not states or not all(isinstance(st, dict) for st in states):
        raise TypeError("nostall.merge_states: expected a list of state_dict() dicts, got %r"
                        % (states,))
    first = states[0]
    cursors, seen = [], set()
    for st in states:
        if not st.get("version"):
            raise ValueError("nostall.merge_states: a state without version (rank and world "
                             "size) cannot be merged: %r" % (st,))
        for key in ("epoch", "seed", "items", "fingerprint"):
            if st.get(key) != first.get(key):
                raise _error("E_STATE", "nostall.merge_states: the states differ in %s (%s and "
                             "%s): not one job's" % (key, first.get(key), st.get(key)))
        own = st["states"] if st.get("merged") else \
            list(st.get("chain") or []) + [{k: st.get(k, 0) for k in _CURSOR_KEYS}]
        for c in own:
            key = tuple(int(c.get(k, 0)) for k in _CURSOR_KEYS)
            if key not in seen:
                seen.add(key)
                cursors.append({k: int(c.get(k, 0)) for k in _CURSOR_KEYS})
    out = {key: first[key] for key in ("epoch", "seed", "items", "fingerprint")}
    out.update(version=2, merged=True, options=dict(first.get("options") or {}), states=cursors)
    return out


# --- the epoch iterator --------------------------------------------------------

class _EpochIterator:
    """One epoch of a Loader (what iter(loader) returns): yields
    (images, labels) until the epoch's end."""

    def __init__(self, loader, token):
        self._loader = loader
        self._token = token
        self._thread = threading.get_ident()
        self._done = False
        self._superseded = False

    def __iter__(self):
        return self

    def _check_current(self):
        ld = self._loader
        if self._superseded or (not self._done and self._token != ld._iter_token and
                                ld._core is not None and not ld._core.closed):
            self._done = self._superseded = True
            raise RuntimeError(
                "nostall.Loader: this iterator was ended by a newer iter() of the same loader "
                "(each iter() starts an epoch; iterate one epoch at a time, e.g. not "
                "zip(loader, loader))")
        if self._done:
            raise StopIteration
        if ld._core is None or ld._core.closed:
            self._done = True
            raise StopIteration  # closed inside the loop: the iteration just ends
        if threading.get_ident() != self._thread:
            raise RuntimeError("nostall.Loader: an iterator is used from one thread only "
                               "(it was created in another thread)")

    def __next__(self):
        self._check_current()
        ld = self._loader
        out = ld._next_batch()
        if out is None:
            self._done = True
            ld._active = None
            raise StopIteration
        return out

    def close(self) -> None:
        """End this iterator (later next() calls raise StopIteration)."""
        self._done = True


# --- loader --------------------------------------------------------------------

class Loader(_Base):
    """Batches of decoded, augmented images from an ImageFolder directory, a
    `path<TAB>label` list file, or a Python list of (path, label) pairs
    (source is a folder or a list file, never a single image).

    Iterating yields `(images, labels)` for one epoch -- torch tensors (numpy
    arrays without torch): float: float32 N,C,H,W normalized by mean/std;
    uint8: uint8 N,H,W,C; labels int64 [N]. Every iter() starts an epoch
    (the next one, or the one set_epoch() chose), like a DataLoader with a
    DistributedSampler; once all `epochs` were delivered, the next iter()
    starts over at epoch 0 (a validation loader with epochs=1 runs its pass
    again). Image tensors view library memory without a copy; that memory
    stays valid, unchanged, as long as any tensor or view of it lives,
    whatever happens to the loader: keeping batches is safe (see the module
    docstring).

    Other tasks and a mix yield a dict per batch, one tensor
    (or list of per-item tensors for ragged fields) per field:
    task="detect" (image, boxes, box_labels, iscrowd, box_count),
    task="tokens" (tokens, targets), task="bytes" (data, length, label),
    task="audio" (mel or waveform, length, label); sources= adds "source".

    Every libnostall option is a keyword (nostall.OPTIONS lists types,
    defaults and bounds; help(nostall.Loader) shows them): batch_size, crop,
    mode="train"|"eval", threads, seed, output="float"|"uint8",
    mean=(r, g, b), shuffle=True, drop_last, ... Values are validated by the
    library: a bad one raises OptionError naming it. None means "the
    library's default", except: threads defaults to the CPUs the process
    may use (affinity mask, cgroup CPU quota, divided by $LOCAL_WORLD_SIZE;
    loader.threads says how many run); seed defaults to torch's initial
    seed (torch.manual_seed's), rank 0's under an initialized
    torch.distributed process group (without torch, with coordinate=, or
    with several ranks and no process group: the library's 0); rank and
    world_size default to $RANK and $WORLD_SIZE (set by torchrun);
    prep_servers and prep_secret_file default to $NOSTALL_PREP_SERVERS and
    $NOSTALL_PREP_SECRET_FILE (how a launcher tells every rank where its prep
    servers are, docs/serve.md). mean and std are on the 0-1 scale
    (ToTensor's): a value above 1 is warned about.

    Python-side keywords: copy=True yields private copies (never views);
    pin_memory=True page-locks the ring for fast, asynchronous GPU copies;
    device="cuda" yields tensors already on that device (copied on a side
    stream one batch ahead); normalize_on_device=True (with output="uint8"
    and device) copies uint8 and normalizes on the device (4x fewer bytes);
    peer_cache=nostall.mpi.PartitionedCache serves items from an MPI job's
    partitioned cache.

    transform=fn runs a Python callable on nostall's worker threads for
    each item: fn(x) or fn(x, random), x the whole decoded image (uint8
    HWC; task="bytes": the file's bytes), random a numpy Generator on the
    item's own stream (the same bytes for any thread count). It returns an
    array (yielded as (images, labels)), a tuple (fields out0, out1, ...,
    yielded as a tuple, the label last) or a dict (yielded as a dict with
    "label"). transform_fields={name: (dtype, shape)} or (dtype, shape,
    "ragged") declares the fields; without it they are inferred by calling
    fn once at create (docs/user_ops.md).

    sources=[(path, weight), ...] reads several sources of one task as one
    weighted mix: each batch is a dict with the task's fields plus "source"
    (the index in sources), each source keeping its own epochs
    (docs/mixing.md).
    """

    # BEGIN OPTIONS (generated by python/gen_options.py from the library's option table)
    def __init__(self, source=None, *,
                 batch_size: "int | None" = None,
                 threads: "int | None" = None,
                 batches_ahead: "int | None" = None,
                 seed: "int | None" = None,
                 epochs: "int | None" = None,
                 shuffle: "bool | None" = None,
                 drop_last: "bool | None" = None,
                 rank: "int | None" = None,
                 world_size: "int | None" = None,
                 mode: "str | None" = None,
                 crop: "int | None" = None,
                 resize: "int | None" = None,
                 scale_min: "float | None" = None,
                 scale_max: "float | None" = None,
                 ratio_min: "float | None" = None,
                 ratio_max: "float | None" = None,
                 flip_prob: "float | None" = None,
                 output: "str | None" = None,
                 mean: "Sequence[float] | float | None" = None,
                 std: "Sequence[float] | float | None" = None,
                 on_bad_item: "str | None" = None,
                 max_pixels: "int | None" = None,
                 max_file_bytes: "int | str | None" = None,
                 cache: "str | None" = None,
                 cache_bytes: "int | str | None" = None,
                 storage_mbps: "float | None" = None,
                 storage_latency_ms: "float | None" = None,
                 io_depth: "int | None" = None,
                 reader: "str | None" = None,
                 http_timeout_ms: "int | None" = None,
                 http_retries: "int | None" = None,
                 http_verify_tls: "bool | None" = None,
                 echo: "str | None" = None,
                 echo_point: "str | None" = None,
                 echo_factor: "float | None" = None,
                 echo_buffer: "int | None" = None,
                 echo_max: "int | None" = None,
                 coordinate: "str | None" = None,
                 coordinate_lead: "int | None" = None,
                 cache_transcode: "bool | None" = None,
                 task: "str | None" = None,
                 image_mode: "str | None" = None,
                 out_height: "int | None" = None,
                 out_width: "int | None" = None,
                 fit: "str | None" = None,
                 layout: "str | None" = None,
                 max_boxes: "int | None" = None,
                 box_crop: "str | None" = None,
                 image_root: "str | None" = None,
                 context_length: "int | None" = None,
                 token_dtype: "str | None" = None,
                 windows: "str | None" = None,
                 targets: "bool | None" = None,
                 op_library: "str | None" = None,
                 op_args: "str | None" = None,
                 full_max_pixels: "int | None" = None,
                 sample_rate: "int | None" = None,
                 mixdown: "bool | None" = None,
                 clip_seconds: "float | None" = None,
                 audio_features: "str | None" = None,
                 n_fft: "int | None" = None,
                 hop: "int | None" = None,
                 win: "int | None" = None,
                 n_mels: "int | None" = None,
                 f_min: "float | None" = None,
                 f_max: "float | None" = None,
                 mel_scale: "str | None" = None,
                 mel_power: "float | None" = None,
                 top_db: "float | None" = None,
                 time_masks: "int | None" = None,
                 time_mask_max: "int | None" = None,
                 freq_masks: "int | None" = None,
                 freq_mask_max: "int | None" = None,
                 max_audio_seconds: "float | None" = None,
                 mix: "str | None" = None,
                 mix_epoch_items: "int | None" = None,
                 mix_labels: "str | None" = None,
                 shard_mode: "str | None" = None,
                 shuffle_buffer: "int | None" = None,
                 allow_outside_root: "bool | None" = None,
                 max_annotation_bytes: "int | str | None" = None,
                 box_labels: "str | None" = None,
                 max_bad_fraction: "float | None" = None,
                 decode_device: "str | None" = None,
                 gpu_id: "int | None" = None,
                 prep_servers: "str | None" = None,
                 prep_secret_file: "str | None" = None,
                 prep_timeout_ms: "int | None" = None,
                 prep_inflight: "int | None" = None,
                 autotune: "bool | None" = None,
                 cpu_budget: "float | None" = None,
                 memory_budget: "int | str | None" = None,
                 gpu_output: "str | None" = None,
                 copy: bool = False,
                 pin_memory: bool = False,
                 device: "str | None" = None,
                 normalize_on_device: bool = False,
                 peer_cache = None,
                 transform = None,
                 transform_fields: "dict | None" = None,
                 sources = None,
                 **unknown) -> None:
        options = {k: v for k, v in locals().items() if k in _lib.OPTIONS and v is not None}
    # END OPTIONS
        self._core = None
        self._lib = _lib
        if unknown:
            raise _unknown_option(sorted(unknown)[0])
        source = _mix_source(source, sources, options)
        self._init(source, options, copy, pin_memory, device, normalize_on_device, peer_cache,
                   transform, transform_fields)

    def _init(self, source, options, copy, pin_memory, device, normalize_on_device, peer_cache,
              transform=None, transform_fields=None):
        self._peer_cache = peer_cache  # kept alive while this loader uses it
        self._transform = None
        self._gpu_out = False       # gpu_output="device": the device ring (DLPack)
        self._copy = bool(copy)
        self._iter_token = 0
        self._active = None         # weakref to the live iterator
        self._started_epoch = None  # epoch the last iter() started
        self._epoch_set = None      # set_epoch()'s choice for the next iter()
        self._pending_state = None  # load_state_dict()'s state for the next iter()
        self._as_torch = _torch()  # None: numpy arrays (also if torch was hidden after import)
        self._pid = os.getpid()
        self._skip_seen = set()
        self._skip_pending = []
        self._skip_warned_at = None
        self._device = None
        self._ahead = None          # device: the next batch, its copy in flight
        self._host_pending = []     # device: (event, host tensors) until copied
        self._normalize_on_device = bool(normalize_on_device)
        if peer_cache is not None:
            if not isinstance(source, (str, bytes, os.PathLike)) or \
                    os.path.realpath(os.fsdecode(source)) != os.path.realpath(peer_cache.source):
                raise _error("E_OPTION", "nostall.Loader: peer_cache was made for %s, not %r "
                             "(item numbers must match)" % (peer_cache.source, source))
            peer_cache._attach_loader(self)
            for key, value in (("rank", peer_cache.rank), ("world_size", peer_cache.size)):
                if key in options and str(options[key]) != str(value):
                    raise _error("E_OPTION", "nostall.Loader: %s=%s but the peer_cache's "
                                 "communicator says %s" % (key, options[key], value))
                options[key] = value
        for key in ("rank", "world_size"):
            env = os.environ.get(key.upper())
            if key not in options and env not in (None, ""):
                options[key] = env
        from_env = []  # prep server options from the launcher's environment
        for key in ("prep_servers", "prep_secret_file"):
            env = os.environ.get("NOSTALL_" + key.upper())
            if key not in options and env not in (None, ""):
                options[key] = env
                from_env.append("%s from $NOSTALL_%s" % (key, key.upper()))
        seed_note = None
        if "seed" not in options:
            seed, seed_note = _default_seed(self._as_torch, options)
            if seed is not None:
                options["seed"] = seed
        if self._normalize_on_device and (device is None or options.get("output") != "uint8"):
            raise _error("E_OPTION", "nostall.Loader: normalize_on_device=True needs "
                         "output='uint8' and a device (e.g. device='cuda')")
        _decode_device_alias(options)
        cfg = ctypes.c_void_p()
        _check(_lib.config_create(ctypes.byref(cfg)))
        tmp_list = None
        try:
            for name, value in options.items():  # the C side validates names and values
                _check(_lib.config_set(cfg, name.encode(), _encode(_option_text(name, value))))
            self.config = {}  # every option's effective value, as text
            buf = ctypes.create_string_buffer(4096)
            for name in _lib.OPTIONS:
                _check(_lib.config_get(cfg, name.encode(), buf, len(buf)))
                self.config[name] = _lib._s(buf.value)
            self._task = self.config["task"]
            _check_scale(options, self.config)
            if peer_cache is not None:
                _check(_lib.config_set_peer_cache(cfg, ctypes.byref(peer_cache.hooks)))
            if transform is not None:
                self._transform = self._make_transform(transform, transform_fields)
                _check(_lib.config_set_op(cfg, ctypes.byref(self._transform.op), None))
            elif transform_fields is not None:
                raise _error("E_OPTION", "nostall.Loader: transform_fields without transform")
            self.source, tmp_list = self._source_path(source)
            ld = ctypes.c_void_p()
            rc = _lib.loader_create(ctypes.byref(ld), _encode(self.source), cfg)
            if rc < 0 and self._transform is not None and self._transform.create_error is not None:
                # the transform's own exception (inferring its fields) as the cause
                raise error_class(rc)(rc, _lib._s(_lib.last_error())) \
                    from self._transform.create_error
            _check(rc)
            self._core = _Core(ld.value, self._transform)
        except Error as e:
            if not from_env or isinstance(e, BadItemError):
                raise
            # where the prep server options came from, when the launcher set them
            raise type(e)(e.status, "%s (%s)" % (e.message, ", ".join(from_env))) from e
        finally:
            _lib.config_free(cfg)
            if tmp_list:
                os.unlink(tmp_list)
        self._info = self.info()
        self._options = self._byte_options()
        global _seed_warned
        if seed_note and not _seed_warned:
            _seed_warned = True
            warnings.warn(seed_note, RuntimeWarning, stacklevel=3)
        self._gpu_out = self.config.get("gpu_output") == "device"
        if self._gpu_out and (pin_memory or device is not None or self._normalize_on_device
                              or self._as_torch is None):
            raise _error("E_OPTION", "nostall.Loader: gpu_output='device' (decode_device="
                         "'cuda') yields tensors already on the GPU: it needs torch and takes "
                         "no pin_memory, device or normalize_on_device")
        if pin_memory or device is not None:
            self._setup_device(pin_memory, device)
        if self._info["files_ignored"]:
            # Nothing silently lost: torchvision's ImageFolder would also
            # have loaded .bmp, .gif, .webp, .tif and friends.
            names = self.ignored()
            shown = ", ".join(names[:3]) + (", ..." if self._info["files_ignored"] > 3 else "")
            warnings.warn("nostall: %d file(s) in %s ignored: not named .jpg, .jpeg or .png "
                          "(the formats nostall decodes), hidden, or outside class folders: %s"
                          % (self._info["files_ignored"], self.source, shown),
                          RuntimeWarning, stacklevel=3)
        if self._info.get("shards_bad"):
            # a shard that could not be read is data lost: named with why
            bad = self.bad_shards()
            shown = "; ".join("%s: %s" % (b["path"], b["reason"]) for b in bad[:3])
            warnings.warn("nostall: %d shard(s) of %s not read (their items are missing): %s%s"
                          % (self._info["shards_bad"], self.source, shown,
                             "; ..." if self._info["shards_bad"] > 3 else ""),
                          RuntimeWarning, stacklevel=3)
        repairs = [(self._info[k], what) for k, what in _REPAIRS if self._info.get(k)]
        if repairs:  # what the recipe repaired at create (e.g. COCO boxes)
            warnings.warn("nostall: %s: %s (see Loader.info())"
                          % (self.source, "; ".join("%d %s" % r for r in repairs)),
                          RuntimeWarning, stacklevel=3)

    def _make_transform(self, fn, fields):
        """transform=: the callable as an op run by the worker threads (see
        nostall/_transform.py)."""
        from ._transform import Transform
        if self.config["coordinate"]:
            raise _error("E_OPTION", "nostall.Loader: transform= with coordinate=%r: the jobs of "
                         "a coordinated group prepare items for each other, and a Python callable "
                         "cannot run in another process; use a C op (op_library=, nostall_op.h) "
                         "or leave coordinate unset" % self.config["coordinate"])
        if self.config["op_library"]:
            raise _error("E_OPTION", "nostall.Loader: transform= and op_library=%r: one op per "
                         "loader" % self.config["op_library"])
        return Transform(fn, fields, self._task, self._as_torch)

    def _source_path(self, source):
        if isinstance(source, (str, bytes, os.PathLike)):
            return os.fspath(source), None
        # A Python list of (path, label): write a temporary list file; the
        # index is built (copied) at create, so it is deleted right after.
        import tempfile
        fd, tmp = tempfile.mkstemp(prefix="nostall-", suffix=".tsv")
        try:
            with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
                for entry in source:
                    f.write(_list_line(entry))
        except BaseException:
            os.unlink(tmp)
            raise
        return tmp, tmp

    def _setup_device(self, pin_memory, device):
        torch = self._as_torch
        if torch is None:
            raise _error("E_OPTION", "nostall.Loader: pin_memory and device need torch")
        if device is not None:
            device = torch.device(device)
            if device.type != "cuda":
                raise _error("E_OPTION", "nostall.Loader: device=%r: only CUDA devices are "
                             "supported (leave device=None for CPU tensors)" % str(device))
        if not torch.cuda.is_available():
            if device is not None:
                raise _error("E_OPTION", "nostall.Loader: device=%r but CUDA is not available"
                             % str(device))
            warnings.warn("nostall: pin_memory=True but CUDA is not available: ignored (as "
                          "torch's DataLoader does)", RuntimeWarning, stacklevel=4)
            return
        info = self._info
        if info["ring_memory"] and (pin_memory or device is not None):
            _cuda_register(info["ring_memory"], info["ring_bytes"])
            self._core.pinned = (info["ring_memory"], info["ring_bytes"])
        if device is not None:
            self._device = device
            self._stream = torch.cuda.Stream(device=device)
            if self._normalize_on_device:
                mean = [float(v) for v in self.config["mean"].split(",")]
                std = [float(v) for v in self.config["std"].split(",")]
                # the same arithmetic as the library's table: v * scale + bias
                self._scale = torch.tensor([1.0 / (255.0 * s) for s in std],
                                           device=device).view(1, 3, 1, 1)
                self._bias = torch.tensor([-m / s for m, s in zip(mean, std)],
                                          device=device).view(1, 3, 1, 1)

    # -- lifetime --

    def _handle(self):
        core = self._core
        if core is None or core.closed:
            raise _error("E_STATE", "nostall.Loader: the loader is closed")
        if os.getpid() != core.pid:
            raise _error("E_FORK", "nostall.Loader: used in a child process after fork() "
                         "(create the loader in the process that iterates it; with "
                         "torch.utils.data.DataLoader use num_workers=0)")
        return core.ld

    def close(self) -> None:
        """Stop the workers and free the loader once no yielded tensor views
        its memory (tensors stay valid). Idempotent."""
        core = getattr(self, "_core", None)
        self._iter_token = getattr(self, "_iter_token", 0) + 1  # iterators end
        if core is not None:
            core.close()

    def __del__(self):
        if getattr(self, "_core", None) is not None:
            self.close()

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc):
        self.close()

    def stop(self) -> None:
        """Make the iterating thread's next wait raise StoppedError. Any thread."""
        core = self._core
        if core is not None and core.ld and not core.closed:
            self._lib.loader_stop(core.ld)

    # -- copying and pickling: a loader owns threads and memory --

    def __copy__(self):
        raise TypeError("nostall.Loader cannot be copied: it owns worker threads and batch "
                        "memory; create another Loader with the same arguments")

    def __deepcopy__(self, memo):
        self.__copy__()

    def __reduce_ex__(self, protocol):
        raise TypeError("nostall.Loader cannot be pickled (it owns worker threads and batch "
                        "memory). With torch.utils.data.DataLoader use num_workers=0 and "
                        "batch_size=None (nostall has its own threads), or pass the loader's "
                        "arguments and create it where it is used")

    def __getstate__(self):
        self.__reduce_ex__(2)

    # -- iteration --

    def __len__(self) -> int:
        # Exact, or TypeError (as an unsized IterableDataset): adaptive
        # echoing follows timing, and a fractional factor draws its extra
        # uses per epoch, so those counts are not fixed.
        echo, factor = self.config["echo"], float(self.config["echo_factor"])
        if echo == "adaptive" or factor != int(factor):
            raise TypeError("len() of a nostall.Loader with %s is not fixed: the batches of an "
                            "epoch vary (%s); count the batches as they come"
                            % ("echo='adaptive'" if echo == "adaptive" else
                               "echo_factor=%g" % factor,
                               "echoing follows the pipeline's timing" if echo == "adaptive"
                               else "the extra uses are drawn per epoch"))
        return self._info["batches_per_epoch"]

    def __getitem__(self, index):
        raise TypeError("nostall.Loader yields whole batches and has no items to index: "
                        "iterate it, or wrap it as DataLoader(loader, batch_size=None, "
                        "num_workers=0)")

    def _check_dataloader_use(self):
        torch = self._as_torch
        if torch is None:
            return
        if torch.utils.data.get_worker_info() is not None:
            raise RuntimeError("nostall.Loader inside a DataLoader worker process: use "
                               "DataLoader(loader, batch_size=None, num_workers=0) -- nostall "
                               "prepares batches with its own threads")
        frame = sys._getframe(2)
        for _ in range(3):
            if frame is None:
                break
            owner = frame.f_locals.get("self")
            if type(owner).__name__ == "_IterableDatasetFetcher":
                if getattr(owner, "auto_collation", False):
                    raise TypeError("nostall.Loader already yields batches: use "
                                    "DataLoader(loader, batch_size=None) (with batch_size=%s "
                                    "the DataLoader would batch the batches)"
                                    % getattr(getattr(owner, "dataset", None), "batch_size", 1))
                break
            frame = frame.f_back

    def __iter__(self) -> "_EpochIterator":
        """Start an epoch: the one set_epoch() chose, a loaded state's, or the
        next one. Ends the previous iterator."""
        self._check_dataloader_use()
        self._handle()
        active = self._active() if self._active is not None else None
        if active is not None and not active._done and active._thread != threading.get_ident():
            raise RuntimeError("nostall.Loader: iterated from two threads at once (an iterator "
                               "of another thread is still running this loader's epoch)")
        if active is not None and not active._done:
            active._superseded = True
        self._iter_token += 1
        it = _EpochIterator(self, self._iter_token)
        self._active = weakref.ref(it)
        self._start_epoch(it)
        return it

    def _start_epoch(self, it):
        """Position the C loader at the epoch this iterator runs."""
        if self._ahead is not None:  # a batch prefetched to the device for the old epoch
            self._ahead = None
        pending, chosen = self._pending_state, self._epoch_set
        self._pending_state = self._epoch_set = None
        merged = None
        if pending is not None and (chosen is None or chosen == pending["epoch"]):
            if pending.get("merged"):  # every old rank's state: set_states below
                merged = (_lib.State * len(pending["states"]))(
                    *[self._c_state(c, pending) for c in pending["states"]])
                st = _lib.State(epoch=int(pending["epoch"]), version=2)
            else:
                st = self._c_state(pending)
        else:
            if chosen is not None:
                epoch = chosen
            elif self._started_epoch is None:
                epoch = self.state_dict()["epoch"] if pending is None else pending["epoch"]
            else:
                epoch = self._started_epoch + 1
                limit = int(self.config["epochs"])
                if limit and epoch >= limit and not self.config["coordinate"]:
                    # Every epoch delivered: a new pass from epoch 0, as a
                    # DataLoader iterates again (a validation loader with
                    # epochs=1 runs the same pass each time).
                    if limit > 1:
                        warnings.warn("nostall: the loader's epochs=%d were all delivered: this "
                                      "iter() starts over at epoch 0 (the same order and "
                                      "augmentations again; epochs=0 runs new epochs without "
                                      "end)" % limit, RuntimeWarning, stacklevel=3)
                    epoch = 0
            st = _lib.State(epoch=epoch, position=0)
        limit = int(self.config["epochs"])
        self._started_epoch = st.epoch
        if self.config["coordinate"]:
            # A member of a coordinated group follows the group's stream: each
            # iter() runs to the end of the epoch the group is in.
            if pending is not None or chosen is not None:
                raise _error("E_STATE", "nostall.Loader: a member of coordinated group '%s' "
                             "follows the group's position: set_epoch (other than the group's "
                             "epoch) and load_state_dict are not "
                             "available" % self.config["coordinate"])
            return
        if limit and st.epoch >= limit:
            it._done = True  # every epoch delivered: an empty iteration
            return
        if merged is not None:
            _check(self._lib.loader_set_states(self._handle(), merged, len(merged)))
            return
        now = _lib.State()
        _check(self._lib.loader_get_state(self._handle(), ctypes.byref(now)))
        if not st.version and (now.epoch, now.position, now.epoch_offset, now.taken) == \
                (st.epoch, 0, 0, 0):
            return  # already there: keep what the workers prepared ahead
        _check(self._lib.loader_set_state(self._handle(), ctypes.byref(st)))

    def _next_batch(self):
        """The next (images, labels) of the current epoch, or None at its end."""
        if self._gpu_out:
            got = self._next_gpu_ring()
            return None if got is _END else got
        if self._device is not None:
            return self._next_device()
        got = self._next_host(block=True)
        return None if got is _END else got

    def _next_host(self, block):
        """(images, labels) on the host; _END at the epoch's end; None when
        not blocking and no batch is ready."""
        b = _lib.Batch()
        ld = self._handle()
        while True:
            rc = self._lib.loader_next_timed(ld, ctypes.byref(b), _WAIT_MS if block else 0)
            if rc != _lib.TIMEOUT:  # between calls Python may raise KeyboardInterrupt
                break
            if not block:
                return None
        if rc < 0:
            if self._transform is not None:
                self._raise_transform(rc)
            _raise(rc, bad_item=True)
        self._skips_check(rc != _lib.OK)
        if rc != _lib.OK:  # EPOCH_END or DONE
            self._echo_check()
            return _END
        _lib.check_batch(b)
        return self._wrap(b)

    # -- gpu_output="device": the device ring's batches through DLPack --

    def _next_gpu_ring(self):
        """(images, labels) with images a tensor on the decoding GPU viewing
        its device ring slot (no copy; kDLCPU over the test backend's host
        memory), labels copied from the host (detection: a dict by field
        name as the host path yields, the boxes copied from the host, the
        image on the device); _END at the epoch's end. The
        slot goes back once the tensor and its views are freed, after the
        work queued so far on the stream that was current when the batch
        was yielded (record_stream rules: use the batch on that stream or
        keep it alive until other streams are done)."""
        b, d = _lib.Batch(), _lib.DeviceBatch()
        ld = self._handle()
        while True:
            rc = self._lib.loader_next_device(ld, ctypes.byref(b), ctypes.byref(d), _WAIT_MS)
            if rc != _lib.TIMEOUT:
                break
        if rc < 0:
            _raise(rc, bad_item=True)
        self._skips_check(rc != _lib.OK)
        if rc != _lib.OK:
            self._echo_check()
            return _END
        _lib.check_batch(b)
        torch = self._as_torch
        from . import _dlpack
        # The batch's ready event is complete when lent (the workers
        # synchronize their streams; include/nostall.h): nothing to wait on.
        stream = 0
        if d.device >= 0:
            stream = torch.cuda.current_stream(d.device).cuda_stream
        zero_copy = self._keep_zero_copy()  # before this batch's lease, as _wrap
        lease = _Lease(self._core, b, stream)
        n = b.count
        img, dense = None, {}
        for i in range(b.nfields):
            f = b.fields[i]
            shape = (n,) + tuple(int(x) for x in f.shape[:f.ndim])
            if f.data == b.images:
                cap = _dlpack.capsule(d.images, shape, f.dtype, d.device, lease)
                img = dense[i] = torch.utils.dlpack.from_dlpack(cap)
            elif f.shape_field < 0:
                dense[i] = self._field_array(f, shape, None)
        self._last_indices = _view(b.indices, (n,), "<u8").copy()
        self._last_address = d.images if zero_copy else None
        del lease  # held by the tensor now
        if not zero_copy:  # too many kept: a copy, and the slot goes back
            img = dense[[i for i in range(b.nfields) if b.fields[i].data == b.images][0]] = \
                img.clone()
        named = {}
        for i in range(b.nfields):  # field order; ragged ones (detection's boxes) per item
            f = b.fields[i]
            if i in dense:
                named[f.name.decode()] = dense[i]
                continue
            shapes = dense[f.shape_field].reshape(n, -1)
            named[f.name.decode()] = [self._field_array(f, tuple(int(x) for x in shapes[k]), None,
                                                        f.data + k * f.item_bytes)
                                      for k in range(n)]
        if self._task != "classify":
            return named
        if "label" in named:
            return img, named["label"]
        return img

    # -- device hand-off: copies on a side stream, one batch ahead --

    def _next_device(self):
        torch = self._as_torch
        self._reap(wait=False)
        cur = self._ahead if self._ahead is not None else self._next_to_device(block=True)
        self._ahead = None
        if cur is _END:
            return None
        self._ahead = self._next_to_device(block=False)  # the next copy starts now if ready
        dev, event = cur
        stream = torch.cuda.current_stream(self._device)
        stream.wait_event(event)
        _each_tensor(dev, lambda t: t.record_stream(stream))  # made on the side stream
        return dev

    def _next_to_device(self, block):
        got = self._next_host(block)
        if got is None or got is _END:
            return got
        torch = self._as_torch
        with torch.cuda.stream(self._stream):
            dev = _map_tensors(got, lambda t: t.to(self._device, non_blocking=True))
            if self._normalize_on_device:  # uint8 NHWC -> float32 NCHW, as the library would
                img = dev[0] if isinstance(dev, tuple) else dev
                img = img.permute(0, 3, 1, 2).float().mul_(self._scale).add_(self._bias)
                dev = (img,) + dev[1:] if isinstance(dev, tuple) else img
            event = torch.cuda.Event()
            event.record(self._stream)
        # The host tensors (and so their ring slot) live until the copy is done.
        self._host_pending.append((event, got))
        return dev, event

    def _reap(self, wait):
        """Drop host tensors whose copies completed (all of them if wait)."""
        keep = []
        for event, host in self._host_pending:
            if wait:
                event.synchronize()
            elif not event.query():
                keep.append((event, host))
        self._host_pending = keep

    def _keep_zero_copy(self):
        """Zero copy unless the caller holds so many batches that the ring
        would be left without the slots it needs (see the module docstring)."""
        if self._copy or self.config["coordinate"]:
            return False  # a coordinated group's slots are released in order: copy
        # the top-up (on_bad_item=skip) needs donor slots besides the next:
        # with drop_last one, with the epoch's reserve (README, "Bad files
        # and ranks"; the ring has a slot more) two more
        c = self.config
        skip = c["on_bad_item"] == "skip"
        if skip and c["shard_mode"] != "stream" and (c["drop_last"] == "1" or
                                                     int(c["world_size"]) > 1):
            reserve = 4
        else:
            reserve = 3 if skip and c["drop_last"] == "1" else 2
        slots = self._info["ring_slots"]
        if c["autotune"] == "1":  # the ring is sized for autotune's most; it uses fewer
            slots = min(slots, self.stats()["ring_slots_usable"])
        return self._core.leases + reserve <= slots

    _COPY_BELOW = 4096  # smaller fields (labels) are copied, unless the largest

    def _wrap(self, b):
        """The lent batch as arrays: large fields view the ring slot under a
        lease (or are copied, see _keep_zero_copy), small ones are copied.
        Classification: (image, label), or the image alone for a list
        without labels. Other tasks: a dict by field name, a ragged field
        (raw bytes, boxes, full-size images) as a list of per-item arrays."""
        n = b.count
        zero_copy = self._keep_zero_copy()
        lease = _Lease(self._core, b) if zero_copy else None
        large = min(self._COPY_BELOW, max(b.fields[i].item_bytes for i in range(b.nfields)))
        dense = {}
        for i in range(b.nfields):
            f = b.fields[i]
            if f.shape_field < 0:
                dense[i] = self._field_array(f, (n,) + tuple(f.shape[:f.ndim]),
                                             lease if f.item_bytes >= large else None)
        named = {}
        for i in range(b.nfields):
            f = b.fields[i]
            if f.shape_field < 0:
                named[f.name.decode()] = dense[i]
                continue
            shapes = dense[f.shape_field].reshape(n, -1)
            owner = lease if f.item_bytes >= large else None
            named[f.name.decode()] = [self._field_array(f, tuple(int(d) for d in shapes[k]),
                                                        owner, f.data + k * f.item_bytes)
                                      for k in range(n)]
        self._last_indices = _view(b.indices, (n,), "<u8").copy()
        if lease is None:
            self._last_address = None
            _check(self._lib.loader_release(self._core.ld, ctypes.byref(b)))
        else:
            self._last_address = b.images
        del lease  # held by the views now (or released, if none views the slot)
        tr = self._transform
        if tr is not None:
            label = named.get("label")
            if tr.kind == "single":
                out = named[tr.names[0]]
                return out if label is None else (out, label)
            if tr.kind == "tuple":
                out = tuple(named[n] for n in tr.names)
                return out if label is None else out + (label,)
            return named
        if self._task == "classify" and "image" in named and set(named) <= {"image", "label"}:
            if "label" in named:
                return named["image"], named["label"]
            return named["image"]
        return named

    def _raise_transform(self, rc):
        """A bad item of transform= under on_bad_item="fail": TransformError,
        caused by the exception itself when it is still known."""
        msg = _lib._s(_lib.last_error()) or ""
        tr = self._transform
        at = msg.find(tr.prefix)
        if at < 0:
            return  # not the transform's (the item could not be read or decoded)
        rest = msg[at + len(tr.prefix):]
        cause = next((e for p, e in list(tr.errors.items()) if rest.startswith(p + ": ")), None)
        raise TransformError(rc, msg) from cause

    def _field_array(self, f, shape, owner, addr=None):
        """One field (or one item of a ragged one) as a tensor (or array):
        a view of the slot when `owner` holds its lease, else a copy."""
        a = _view(f.data if addr is None else addr, shape, _lib.TYPESTR[f.dtype], owner)
        if owner is None:
            a = a.copy()
        torch = self._as_torch
        if torch is None:
            return a
        if f.dtype == _lib.DTYPE_BFLOAT16:  # numpy has no bfloat16, torch 1.13 no uint16
            return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(a)

    @property
    def last_indices(self):
        """Dataset item indices (a numpy copy) of the batch yielded last."""
        return getattr(self, "_last_indices", None)

    @property
    def last_batch_address(self):
        """Address of the last yielded batch's ring memory when it was not
        copied (for zero-copy checks), else None."""
        return getattr(self, "_last_address", None)

    # -- epochs and state --

    def set_epoch(self, epoch: int) -> None:
        """The next iter() runs epoch `epoch` (from its start, or from a state
        loaded for that epoch; a loaded state of another epoch is dropped,
        with a warning). A member of a coordinated group accepts only the
        epoch the group is in (a no-op, so the usual loop runs unchanged)."""
        if isinstance(epoch, bool) or not isinstance(epoch, (int, np.integer)):
            raise TypeError("nostall.Loader.set_epoch: epoch must be an int, got %r" % (epoch,))
        epoch = int(epoch)
        limit = int(self.config["epochs"])
        if epoch < 0:
            raise ValueError("nostall.Loader.set_epoch: epoch %d is negative" % epoch)
        if limit and epoch >= limit:
            raise ValueError("nostall.Loader.set_epoch: epoch %d is past epochs=%d (epochs 0..%d)"
                             % (epoch, limit, limit - 1))
        self._handle()
        if self.config["coordinate"]:
            now = _lib.State()
            _check(self._lib.loader_get_state(self._handle(), ctypes.byref(now)))
            if epoch == now.epoch:
                return  # the group's epoch: the next iter() runs it anyway
            raise _error("E_STATE", "nostall.Loader.set_epoch(%d): a member of coordinated "
                         "group '%s' follows the group's position, which is in epoch %d (only "
                         "set_epoch(%d) is accepted)"
                         % (epoch, self.config["coordinate"], now.epoch, now.epoch))
        pending = self._pending_state
        if pending is not None and int(pending["epoch"]) != epoch:
            where = "every rank's state" if pending.get("merged") else \
                "position %d" % pending["position"]
            warnings.warn("nostall: set_epoch(%d) drops the state loaded with load_state_dict() "
                          "for epoch %d (%s): the next iter() starts epoch %d from its "
                          "beginning" % (epoch, pending["epoch"], where, epoch),
                          RuntimeWarning, stacklevel=2)
            self._pending_state = None
        self._epoch_set = epoch

    def _no_coordinate(self, what):
        if self.config["coordinate"]:
            raise _error("E_STATE", "nostall.Loader.%s: a member of coordinated group '%s' "
                         "follows the group's position (set_state is not available)"
                         % (what, self.config["coordinate"]))

    def _byte_options(self):
        names = ("shuffle", "drop_last", "mode", "crop", "resize", "scale_min", "scale_max",
                 "ratio_min", "ratio_max", "flip_prob", "output", "mean", "std", "on_bad_item",
                 "max_pixels", "max_file_bytes", "echo", "echo_point", "echo_factor",
                 "echo_buffer")
        return {n: self.config[n] for n in names}

    def state_dict(self, gather: bool = False) -> dict:
        """Where delivery stands: {"epoch", "position"} (items of this rank's
        shard of `epoch` delivered, counting the batch yielded last) plus what
        it belongs to (seed, dataset size and fingerprint, rank and
        world_size, the options that change the bytes). Save it after the
        training step of a batch; load_state_dict() in a new Loader resumes
        exactly. One rank's state resumes another world size only while no
        rank met a bad item in the epoch (ranks that skip bad items fill
        their batches from later items, so their positions differ);
        gather=True (a collective: every rank calls it, with a
        torch.distributed process group up) returns every rank's state
        merged (nostall.merge_states), which resumes exactly into any world
        size, bad items or not. state_dict() and load_state_dict() make a Loader a
        torch.distributed.checkpoint Stateful: dcp.save({"loader": loader})
        and dcp.load into a new Loader resume the same way."""
        if self._pending_state is not None:
            return dict(self._pending_state)
        n = ctypes.c_size_t(0)
        cap = 1
        while True:
            arr = (_lib.State * cap)()
            rc = self._lib.loader_get_states(self._handle(), arr, cap, ctypes.byref(n))
            if rc >= 0 or n.value <= cap:
                _check(rc)
                break
            cap = n.value
        own = arr[n.value - 1]
        out = {key: int(getattr(own, key)) for key in _STATE_KEYS}
        out["options"] = dict(self._options)
        out["chain"] = [{key: int(getattr(arr[i], key)) for key in _CURSOR_KEYS}
                        for i in range(n.value - 1)]
        if not gather:
            return out
        dist = getattr(_TORCH, "distributed", None) if _TORCH is not None else None
        if dist is None or not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("nostall.Loader.state_dict(gather=True) gathers every rank's "
                               "state through torch.distributed: initialize a process group "
                               "first (or save each rank's state_dict() and merge them with "
                               "nostall.merge_states)")
        states = [None] * dist.get_world_size()
        dist.all_gather_object(states, out)
        return merge_states(states)

    def _c_state(self, state, common=None):
        common = state if common is None else common
        st = _lib.State(epoch=int(state["epoch"]), position=int(state["position"]))
        if state.get("version"):
            for key in _CURSOR_KEYS:
                setattr(st, key, int(state.get(key, 0)))
            for key in ("seed", "items", "fingerprint"):
                setattr(st, key, int(common[key]))
        return st

    def load_state_dict(self, state) -> None:
        """Resume exactly at `state` (from state_dict(), state_dict(gather=True),
        nostall.merge_states, or a list of every rank's state_dict()) with the
        next iter(). A state of another seed, dataset or byte-affecting option
        raises StateError naming the difference; another world_size is
        remapped so that no item of the epoch is repeated or lost (from one
        rank's state: only while no rank met a bad item, else StateError
        asks for every rank's)."""
        if isinstance(state, (list, tuple)):
            state = merge_states(state)
        merged = isinstance(state, dict) and state.get("merged")
        if merged:
            _check_merged(state, "nostall.Loader.load_state_dict")
        elif not isinstance(state, dict) or "epoch" not in state or "position" not in state:
            raise TypeError("nostall.Loader.load_state_dict: expected a dict from state_dict(), "
                            "got %r" % (state,))
        for key in ("epoch", "position") if not merged else ("epoch",):
            v = state[key]
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ValueError("nostall.Loader.load_state_dict: %s must be an int >= 0, got "
                                 "%r" % (key, v))
        limit = int(self.config["epochs"])
        if limit and state["epoch"] >= limit:
            raise ValueError("nostall.Loader.load_state_dict: epoch %d is past epochs=%d"
                             % (state["epoch"], limit))
        if state.get("version"):
            if state.get("seed") != int(self.config["seed"]):
                raise _error("E_STATE", "nostall.Loader.load_state_dict: the state was saved "
                             "with seed %s, this loader has seed %s"
                             % (state.get("seed"), self.config["seed"]))
            if state.get("items") != self._info["items"]:
                raise _error("E_STATE", "nostall.Loader.load_state_dict: the state was saved "
                             "for a dataset of %s items, %s has %d"
                             % (state.get("items"), self.source, self._info["items"]))
            for name, value in (state.get("options") or {}).items():
                if name in self._options and self._options[name] != value:
                    raise _error("E_STATE", "nostall.Loader.load_state_dict: the state was "
                                 "saved with %s=%s, this loader has %s=%s"
                                 % (name, value, name, self._options[name]))
            if not merged and ("world_size" not in state or "rank" not in state):
                raise ValueError("nostall.Loader.load_state_dict: state of version %s lacks "
                                 "rank/world_size" % state["version"])
        self._handle()
        self._no_coordinate("load_state_dict")
        # Checked by the library now (fingerprint of the item list and all),
        # applied by the next iter().
        probe = _lib.State()
        _check(self._lib.loader_get_state(self._handle(), ctypes.byref(probe)))
        if state.get("version") and int(state.get("fingerprint", -1)) != probe.fingerprint:
            raise _error("E_STATE", "nostall.Loader.load_state_dict: the state was saved for "
                         "another item list (same number of items, different paths or labels) "
                         "or other options")
        self._pending_state = dict(state)
        self._epoch_set = None

    # -- introspection --

    def info(self) -> dict:
        """Dataset and loader facts (nostall_dataset_info) as a dict."""
        di = _lib.DatasetInfo()
        _check(self._lib.loader_info(self._handle(), ctypes.byref(di), ctypes.sizeof(di)))
        return {name: getattr(di, name) for name, _ in di._fields_ if not name.endswith("_")}

    def echo_summary(self) -> dict:
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
                          "only slow training" % (factor, r), RuntimeWarning, stacklevel=4)

    _SKIP_WARN_EVERY = 10.0  # seconds between two warnings about new bad items

    def _skips_check(self, epoch_end):
        """Warn (rate-limited) naming newly skipped files and their reasons."""
        core = self._core
        if self._lib.loader_skipped_count(core.ld) > len(self._skip_seen) + len(self._skip_pending):
            known = self._skip_seen.union(s["index"] for s in self._skip_pending)
            self._skip_pending.extend(s for s in self.skipped() if s["index"] not in known)
        if not self._skip_pending:
            return
        now = time.monotonic()
        if not epoch_end and self._skip_warned_at is not None and \
                now - self._skip_warned_at < self._SKIP_WARN_EVERY:
            return
        new, self._skip_pending = self._skip_pending, []
        self._skip_seen.update(s["index"] for s in new)
        self._skip_warned_at = now
        names = "; ".join("%s (%s)" % (s["path"], s["reason"]) for s in new[:3])
        more = " and %d more" % (len(new) - 3) if len(new) > 3 else ""
        warnings.warn("nostall: %d bad item(s) skipped: %s%s -- loader.skipped() lists every "
                      "one; on_bad_item='fail' raises instead" % (len(new), names, more),
                      RuntimeWarning, stacklevel=4)

    def stats(self) -> dict:
        """Every counter of nostall_loader_stats() (times in ns)."""
        s = _lib.Stats()
        _check(self._lib.loader_stats(self._handle(), ctypes.byref(s), ctypes.sizeof(s)))
        return {name: getattr(s, name) for name in _lib.STAT_NAMES}

    def autotune(self) -> dict:
        """What autotune has in force and why: {on, active_workers, threads,
        batches_ahead, io_depth, windows, decisions, reason, why, cpu_budget,
        cpu_returned, cache_bytes, cache_budget, echo_max} (cpu_* in CPUs;
        cache_bytes: the MinIO cache's admission cap, cache_budget: its most,
        in bytes; echo_max: adaptive echoing's most uses per item, 0 without;
        the rest from stats())."""
        s = self.stats()
        buf = ctypes.create_string_buffer(512)
        self._lib.loader_tune_reason(self._handle(), buf, len(buf))
        return {"on": bool(s["autotune"]), "active_workers": s["active_workers"],
                "threads": s["threads"], "batches_ahead": s["tuned_batches_ahead"],
                "io_depth": s["tuned_io_depth"], "windows": s["tune_windows"],
                "decisions": s["tune_decisions"],
                "reason": _lib._s(self._lib.tune_reason_name(int(s["tune_reason"]))),
                "why": buf.value.decode("utf-8", "replace"),
                "cpu_budget": s["cpu_budget_milli"] / 1000.0,
                "cpu_returned": s["cpu_returned_milli"] / 1000.0,
                "cache_bytes": s["tuned_cache_bytes"], "cache_budget": s["cache_budget_bytes"],
                "echo_max": s["tuned_echo_max"]}

    def skipped(self) -> list:
        """Distinct bad items left out so far: [{index, path, status, reason}]."""
        ld, out = self._handle(), []
        for i in range(self._lib.loader_skipped_count(ld)):
            si = _lib.SkipInfo()
            _check(self._lib.loader_skipped(ld, i, ctypes.byref(si)))
            out.append({"index": si.index, "path": _lib._s(si.path),
                        "status": _lib.STATUS.get(si.status, si.status),
                        "reason": _lib._s(si.reason)})
        return out

    def ignored(self) -> list:
        """Paths of the files an ImageFolder left out (files_ignored): the
        first ones found, up to 64."""
        out = []
        for i in range(min(self._info["files_ignored"], 64)):
            p = self._lib.loader_ignored(self._handle(), i)
            if p is None:
                break
            out.append(_lib._s(p))
        return out

    def bad_shards(self) -> list:
        """The tar shards that could not be used (info()["shards_bad"]: not
        indexed, or compressed), the first ones up to 64, each
        {"path", "reason"}."""
        out = []
        for i in range(min(self._info.get("shards_bad", 0), 64)):
            p, why = ctypes.c_char_p(), ctypes.c_char_p()
            if self._lib.loader_bad_shard(self._handle(), i, ctypes.byref(p), ctypes.byref(why)):
                break
            out.append({"path": _lib._s(p.value), "reason": _lib._s(why.value)})
        return out

    def item(self, index: int) -> tuple:
        """(path, label) of dataset item `index`."""
        p, label = ctypes.c_char_p(), ctypes.c_int64()
        _check(self._lib.loader_item(self._handle(), index, ctypes.byref(p), ctypes.byref(label)))
        return _lib._s(p.value), label.value

    def class_name(self, label: int) -> "str | None":
        """ImageFolder sub-folder name of `label` (None for list files)."""
        return _lib._s(self._lib.loader_class_name(self._handle(), label))

    @property
    def classes(self) -> list:
        """Class names in label order, as torchvision's ImageFolder (for a list
        file: the labels as strings, a sequence made on demand)."""
        n = self._info["classes"]
        if n and self.class_name(0) is None:  # no names: labels below 2^31
            return _LabelNames(n)
        names = [self.class_name(i) for i in range(n)]
        return [n if n is not None else str(i) for i, n in enumerate(names)]

    @property
    def class_to_idx(self) -> dict:
        """{class name: label}, as torchvision's ImageFolder (for a list file,
        a mapping made on demand)."""
        classes = self.classes
        if isinstance(classes, _LabelNames):
            return _LabelIndex(len(classes))
        return {name: i for i, name in enumerate(classes)}

    @property
    def samples(self) -> list:
        """[(path, label)] of every item, as torchvision's ImageFolder."""
        return [self.item(i) for i in range(self._info["items"])]

    imgs = samples

    @property
    def targets(self) -> list:
        """Every item's label, as torchvision's ImageFolder."""
        return [self.item(i)[1] for i in range(self._info["items"])]

    @property
    def threads(self) -> int:
        """Worker threads this loader runs: `threads=`, or by default the CPUs
        the process may use (its affinity mask, capped by its cgroup's CPU
        quota, divided by LOCAL_WORLD_SIZE under torchrun)."""
        return self._info["threads"]

    def __repr__(self):
        core = self._core
        state = "closed" if core is None or core.closed else "%d batches/epoch" % len(self)
        return "nostall.Loader(%r, %s)" % (getattr(self, "source", None), state)


def _loader_doc():
    lines = ["Options (None: the library's default):"]
    for name, o in _lib.OPTIONS.items():
        bounds = ("one of " + o["min"]) if o["type_name"] == "enum" else \
            ("[%s, %s]" % (o["min"], o["max"]) if o["min"] or o["max"] else "")
        lines.append("  %s (%s, default %s%s): %s" % (name, o["type_name"], o["default"] or "''",
                                                      ", " + bounds if bounds else "", o["help"]))
    return "\n".join(lines)


Loader.__init__.__doc__ = _loader_doc()


def checksum(images, labels, state: int = 0) -> int:
    """The CLI's checksum folded over one batch: its image bytes, then its
    labels (int64). Chain batches by passing the previous result as `state`."""
    s = ctypes.c_uint64(state)
    for arr, dtype in ((images, None), (labels, np.int64)):
        a = arr.detach().cpu().numpy() if hasattr(arr, "detach") else np.asarray(arr)
        a = np.ascontiguousarray(a, dtype=dtype)
        _lib.checksum_update(ctypes.byref(s), a.ctypes.data, a.nbytes)
    return s.value
