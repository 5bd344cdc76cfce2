"""transform=: a Python callable as a nostall user op (nostall_op.h).

Design
------
* The callable becomes an op set in process (nostall_config_set_op) whose
  create and run are ctypes callbacks: the library's worker threads call
  run for every use of every item, and ctypes takes the GIL for each call,
  so Python code runs one thread at a time while torch/numpy kernels that
  release the GIL run in parallel.
* Input: task=classify (image files): the whole image, decoded by nostall,
  as a uint8 HWC array (a torch tensor when torch is importable, else a
  numpy array) viewing the worker's memory -- no copy, valid only during
  the call, not to be modified in place (echoed uses share it).
  task=bytes: the fetched bytes as a 1-D uint8 numpy array (same rules;
  io.BytesIO(x), bytes(x) and torch.from_numpy(x) take it).
* Randomness: `random`, a numpy Generator (Philox) keyed by the item's
  stream seed, a pure function of (seed, epoch, item, use): the same bytes
  for any thread count, a fresh draw for every echoed use. One generator
  per worker thread is reseeded for each call (4 us instead of 20 us for a
  new one); it is valid during the call only. The callable gets it when it
  takes two positional arguments, fn(x, random); fn(x) otherwise.
* Fields: transform_fields={name: (dtype, shape)} or (dtype, shape,
  "ragged") declares them; without it they are inferred at create by
  calling the callable once on the dataset's first readable item with a
  probe stream that is no item's (so no item's draws are used up). A single
  array is the field "image"; a tuple, fields "out0", "out1", ...; a dict,
  its keys. float64 outputs are declared float32 (cast per item), bool as
  uint8. A ragged field's room is its declared shape; nostall adds an int64
  field NAME_shape with each item's shape.
* Errors: an exception in the callable makes the item bad: the message is
  the exception's type and text, then its traceback's last lines. The
  exception object itself is kept (a few, by path) so that on_bad_item=
  "fail" raises TransformError from it.
"""

import ctypes
import inspect
import threading
import traceback

import numpy as np

from . import _lib

# numpy dtype name -> nostall dtype (inferred float64 is declared float32)
_DTYPES = {"float32": _lib.DTYPE_FLOAT32, "uint8": _lib.DTYPE_UINT8, "int64": _lib.DTYPE_INT64,
           "int32": _lib.DTYPE_INT32, "uint16": _lib.DTYPE_UINT16, "float16": _lib.DTYPE_FLOAT16,
           "bfloat16": _lib.DTYPE_BFLOAT16, "uint32": _lib.DTYPE_UINT32}
_INFERRED = {"float64": "float32", "bool": "uint8"}
_NP = {v: np.dtype(_lib.TYPESTR[v]) for v in _DTYPES.values()}
_E_CORRUPT = _lib.CODE["E_CORRUPT"]
_E_INVALID = _lib.CODE["E_INVALID"]
_KEEP_ERRORS = 64
# Set during a transform call (loader.py: nothing there may wait for the
# workers while on one of them).
IN_CALL = threading.local()


def _dtype_name(d):
    """'uint8' for np.uint8, 'uint8', np.dtype('uint8'), torch.uint8, ..."""
    if d is None:
        raise TypeError("a dtype is needed")
    text = str(d)
    if text.startswith("torch."):  # torch dtypes: torch.uint8, torch.bfloat16
        return text[len("torch."):]
    try:
        return np.dtype(d).name
    except TypeError:
        return text


class _Spec:
    __slots__ = ("name", "dtype", "shape", "ragged", "index", "shape_index", "room", "np_dtype")

    def __init__(self, name, dtype, shape, ragged):
        if not isinstance(name, str) or not name or len(name) >= _lib.OP_NAME_MAX or \
                not all(c.isalnum() or c == "_" for c in name) or not name.isascii():
            raise ValueError("nostall.Loader: transform field name %r: 1 to %d letters, digits or "
                             "'_'" % (name, _lib.OP_NAME_MAX - 1))
        dname = _dtype_name(dtype)
        if dname not in _DTYPES:
            raise TypeError("nostall.Loader: transform field %r: dtype %s is not one nostall "
                            "delivers (%s)" % (name, dname, ", ".join(_DTYPES)))
        shape = tuple(int(d) for d in shape)
        if len(shape) > _lib.FIELD_DIMS or any(d < 1 for d in shape):
            raise ValueError("nostall.Loader: transform field %r: shape %r (at most %d dimensions, "
                             "each >= 1)" % (name, shape, _lib.FIELD_DIMS))
        self.name, self.dtype, self.shape, self.ragged = name, _DTYPES[dname], shape, bool(ragged)
        self.np_dtype = _NP[self.dtype]
        self.room = int(np.prod(shape)) if shape else 1
        self.index = self.shape_index = -1


def _declared(fields):
    """transform_fields= as specs, in order."""
    if not isinstance(fields, dict) or not fields:
        raise TypeError("nostall.Loader: transform_fields must be a dict {name: (dtype, shape)} "
                        "or {name: (dtype, shape, 'ragged')}, got %r" % (fields,))
    specs = []
    for name, spec in fields.items():
        if isinstance(spec, dict):
            dtype, shape, ragged = spec.get("dtype"), spec.get("shape", ()), spec.get("ragged")
        elif isinstance(spec, (tuple, list)) and len(spec) in (2, 3):
            dtype, shape = spec[0], spec[1]
            ragged = len(spec) == 3 and spec[2] in ("ragged", True)
            if len(spec) == 3 and spec[2] not in ("ragged", True, False, None):
                raise ValueError("nostall.Loader: transform field %r: the third item is "
                                 "'ragged', not %r" % (name, spec[2]))
        else:
            raise TypeError("nostall.Loader: transform field %r: (dtype, shape) or (dtype, "
                            "shape, 'ragged'), not %r" % (name, spec))
        specs.append(_Spec(name, dtype, shape, ragged))
    return specs


def _to_numpy(value, name):
    """An output (numpy array, torch tensor, scalar) as a numpy array."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor
        t = value.detach()
        if t.device.type != "cpu":
            raise TypeError("field %r: a tensor on %s; return CPU tensors (the batch is in host "
                            "memory)" % (name, t.device))
        if str(t.dtype) == "torch.bfloat16":
            import torch
            return t.view(torch.int16).numpy().view(np.uint16), "bfloat16"
        return t.numpy(), None
    return np.asarray(value), None


def _accepts_two(fn):
    """fn(x, random) when fn takes two positional arguments, else fn(x)."""
    target = fn
    forward = getattr(fn, "forward", None)
    if forward is not None and callable(forward) and type(fn).__name__ != "function":
        target = forward  # a torch Module: its forward's arguments
    try:
        params = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        return True
    pos = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return True
    return len(pos) >= 2


class Transform:
    """The op behind transform=; kept alive by the loader's core while the C
    loader may call it."""

    def __init__(self, fn, fields, task, as_torch):
        if not callable(fn):
            raise TypeError("nostall.Loader: transform must be callable, got %r" % (fn,))
        if task not in ("classify", "bytes"):
            raise ValueError("nostall.Loader: transform= runs with task='classify' (the decoded "
                             "image) or task='bytes' (the fetched bytes), not task=%r" % task)
        if _lib.config_set_op is None:
            raise RuntimeError("nostall.Loader: transform= needs a libnostall with user ops "
                               "(nostall_config_set_op); %s has none" % _lib.path)
        self.fn = fn
        self.two = _accepts_two(fn)
        self.image = task == "classify"
        self.torch = as_torch if self.image else None
        self.specs = _declared(fields) if fields is not None else None
        self.kind = None            # "single", "tuple" or "dict": how fn returns
        self.names = []             # output fields in order
        self.inferred = False       # fields inferred from a sample call
        self.specs_out = []         # the output fields' specs, in order
        self.create_error = None    # an exception raised by the inference call
        self.errors = {}            # path -> the exception of a bad item (a few)
        self.local = {}             # thread id -> (bit generator, Generator)
        name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
        self.name = ("transform:%s.%s" % (getattr(fn, "__module__", "") or "", name)).encode()[:60]
        self._create_cb = _lib.OP_CREATE(self._create)
        self._run_cb = _lib.OP_RUN(self._run)
        self.op = _lib.Op(version=_lib.OP_VERSION, size=ctypes.sizeof(_lib.Op), name=self.name,
                          input=_lib.OP_INPUT_IMAGE if self.image else _lib.OP_INPUT_BYTES,
                          create=self._create_cb, run=self._run_cb)

    @property
    def prefix(self):
        """How a bad item's message starts (before its path)."""
        return "op '%s': " % self.name.decode()

    # -- per call --

    def _input(self, it):
        if self.image:
            a = np.asarray(_Interface(it.data, (it.height, it.width, 3), "|u1",
                                      (int(it.stride), 3, 1)))
            return self.torch.from_numpy(a) if self.torch is not None else a
        return np.asarray(_Interface(it.data or 0, (int(it.len),), "|u1", None))

    def _random(self, seed):
        tid = threading.get_ident()
        got = self.local.get(tid)
        if got is None:
            bg = np.random.Philox(key=seed)
            got = self.local[tid] = (bg, np.random.Generator(bg))
        else:
            got[0].state = {"bit_generator": "Philox",
                            "state": {"counter": np.zeros(4, np.uint64),
                                      "key": np.array([seed, 0], np.uint64)},
                            "buffer": np.zeros(4, np.uint64), "buffer_pos": 4,
                            "has_uint32": 0, "uinteger": 0}
        return got[1]

    def _call(self, it):
        x = self._input(it)
        return self.fn(x, self._random(it.seed)) if self.two else self.fn(x)

    def _outputs(self, out):
        """fn's result as a list in self.names order."""
        if self.kind == "dict":
            if isinstance(out, dict) and set(out) == set(self.names):
                return [out[n] for n in self.names]
            if not self.inferred and isinstance(out, (tuple, list)) and len(out) == len(self.names):
                return list(out)  # declared fields, in their order
            raise TypeError("the transform returned %s; declared fields: a dict with keys %s%s"
                            % (_describe(out), self.names,
                               "" if self.inferred else " (or a tuple in that order)"))
        if self.kind == "tuple":
            if not isinstance(out, (tuple, list)) or len(out) != len(self.names):
                raise TypeError("the transform returned %s; declared fields: a tuple of %d"
                                % (_describe(out), len(self.names)))
            return list(out)
        if isinstance(out, (tuple, list, dict)):
            raise TypeError("the transform returned %s; declared fields: one array" % _describe(out))
        return [out]

    def _write(self, out, it):
        for spec, value in zip(self.specs_out, self._outputs(out)):
            a, special = _to_numpy(value, spec.name)
            dst_addr = it.dst[spec.index]
            if spec.ragged:
                if a.ndim != len(spec.shape) or a.size > spec.room:
                    raise ValueError("field %r: shape %s does not fit its room %s (%d dimensions, "
                                     "at most %d elements)" % (spec.name, tuple(a.shape),
                                                               spec.shape, len(spec.shape),
                                                               spec.room))
                dst = _array(dst_addr, (spec.room,), spec.np_dtype)[:a.size]
                np.copyto(dst, a.reshape(-1), casting="same_kind")
                _array(it.dst[spec.shape_index], (a.ndim,), np.dtype("<i8"))[:] = a.shape
            else:
                if tuple(a.shape) != spec.shape:
                    raise ValueError("field %r: shape %s, declared %s%s" % (
                        spec.name, tuple(a.shape), spec.shape,
                        " (inferred from the first item: make every item that shape, or declare "
                        "transform_fields with 'ragged')" if self.inferred else ""))
                np.copyto(_array(dst_addr, spec.shape, spec.np_dtype), a, casting="same_kind")

    def _run(self, state, worker, item_p):
        it = item_p.contents
        IN_CALL.on = True
        try:
            self._write(self._call(it), it)
            return 0
        except BaseException as e:  # never out of a callback
            it.message = _message(e, it.path, self.name)
            # the frames' locals may view worker memory (the input): drop
            # them before the exception outlives this call
            traceback.clear_frames(e.__traceback__)
            self._keep_error(it.path, e)
            return _E_CORRUPT
        finally:
            IN_CALL.on = False

    def _keep_error(self, path, e):
        if len(self.errors) >= _KEEP_ERRORS:
            self.errors.pop(next(iter(self.errors)), None)
        self.errors[_lib._s(path)] = e

    # -- create: declare (or infer) the fields --

    def _infer(self, setup):
        sample = setup.sample
        if not sample:
            raise ValueError("no item of the dataset's first 16 could be read and decoded to "
                             "infer the transform's fields: declare them with transform_fields="
                             "{name: (dtype, shape)}")
        out = self._call(sample.contents)
        if isinstance(out, dict):
            self.kind, items = "dict", list(out.items())
        elif isinstance(out, (tuple, list)):
            self.kind, items = "tuple", [("out%d" % i, v) for i, v in enumerate(out)]
        else:
            self.kind, items = "single", [("image", out)]
        specs = []
        for name, value in items:
            a, special = _to_numpy(value, name)
            dname = special or a.dtype.name
            dname = _INFERRED.get(dname, dname)
            specs.append(_Spec(str(name), dname, a.shape, False))
        return specs

    def _create(self, ctx, setup_p, state_p):
        setup = setup_p.contents
        try:
            if self.specs is None:
                self.inferred = True
                specs = self._infer(setup)
            else:
                self.inferred = False
                specs = self.specs
                self.kind = "single" if len(specs) == 1 else "dict"
            self._declare(setup, specs)
            return 0
        except BaseException as e:
            setup.message = _message(e)
            traceback.clear_frames(e.__traceback__)  # (the sample's memory is freed next)
            self.create_error = e
            return _E_INVALID

    def _declare(self, setup, specs):
        self.names = [s.name for s in specs]
        fields = list(specs)
        for s in specs:
            if s.ragged:
                fields.append(_Spec(s.name + "_shape", "int64", (len(s.shape),), False))
        names = [f.name for f in fields]
        if len(set(names)) != len(names) or "label" in names:
            raise ValueError("field names %s: each once, and not 'label' (nostall adds the items' "
                             "labels as 'label'; a ragged field X adds X_shape)" % names)
        if len(fields) > _lib.OP_FIELDS_MAX:
            raise ValueError("%d fields (ragged ones count twice): at most %d"
                             % (len(fields), _lib.OP_FIELDS_MAX))
        for i, s in enumerate(fields):
            s.index = i
            f = setup.fields[i]
            f.name = s.name.encode()
            f.dtype, f.ndim, f.shape_field = s.dtype, len(s.shape), -1
            for k, d in enumerate(s.shape):
                f.shape[k] = d
        for s in specs:
            if s.ragged:
                s.shape_index = next(f.index for f in fields if f.name == s.name + "_shape")
                setup.fields[s.index].shape_field = s.shape_index
        setup.nfields = len(fields)
        setup.image_field = self.names.index("image") if "image" in self.names else 0
        self.specs_out = specs
        self.fields = [f.name for f in fields]


class _Interface:
    __slots__ = ("__array_interface__",)

    def __init__(self, addr, shape, typestr, strides):
        self.__array_interface__ = {"data": (addr, False), "shape": shape, "typestr": typestr,
                                    "strides": strides, "version": 3}


def _array(addr, shape, dtype):
    return np.asarray(_Interface(addr, shape, dtype.str, None))


def _describe(out):
    if isinstance(out, dict):
        return "a dict with keys %s" % list(out)
    if isinstance(out, (tuple, list)):
        return "a %s of %d" % (type(out).__name__, len(out))
    return "one %s" % type(out).__name__


# Room for a bad item's message: the batch engine keeps 503 bytes of each
# (src/batch/engine.h, NST_ENGINE_MSG), which begin "op 'NAME': PATH: ".
_ITEM_MESSAGE_ROOM = 503


def _message(e, path=b"", name=b""):
    """The exception's type and text, then the last lines of its traceback
    (the callable's frames, not this module's), within what the engine keeps
    of a bad item's message (the whole exception is the __cause__ of a
    TransformError under on_bad_item="fail")."""
    head = ("%s: %s" % (type(e).__name__, e)).encode("utf-8", "replace")
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename != __file__]
    tb = "".join(traceback.format_list(frames)).encode("utf-8", "replace")
    room = min(_lib.OP_MESSAGE_MAX - 1,
               _ITEM_MESSAGE_ROOM - len(b"op '': : ") - len(name) - len(path or b""))
    room = max(room, 160)
    intro = b"\nTraceback (most recent call last):\n"
    left = room - len(head) - len(intro)
    if left < 40 or not tb:
        return head[:room]
    if len(tb) > left:
        tb = b"..." + tb[len(tb) - left + 3:]
    return head + intro + tb
