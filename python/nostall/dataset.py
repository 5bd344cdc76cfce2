"""nostall.Dataset: a source indexed once, queried (nostall_dataset.h).

    ds = nostall.Dataset("/data/train", task="classify")
    len(ds); ds[i] -> (path, label, offset, length); ds.files() -> [path, ...]

The same source strings and options as nostall.Loader (a folder, a list
file, tar shards, COCO with task="detect", a token file, s3:// and
http(s):// items); opening reads the index, never the items' bytes, and
starts no thread. offset/length: where the item's bytes are in its file
(length 0: the whole file). label: the integer label, 0 when the dataset's
labels are not integers (label_kind: "none", "int", "float", "multi").
Touches only its own handle, freed by close() or when collected.
"""

import os
from ctypes import byref, c_char_p, c_int64, c_uint64, c_void_p

from . import _lib
from .loader import _check, _encode, _option_text, _unknown_option

_KINDS = ("none", "int", "float", "multi")


class Dataset:
    """A source indexed once (nostall_dataset_open), with nostall.Loader's
    source strings and options: len(ds), ds[i] -> (path, label, offset,
    length), ds.files(), ds.label_kind; close() or a with-block frees it."""

    def __init__(self, source, **options):
        self._h = None
        for name in options:
            if name not in _lib.OPTIONS:
                raise _unknown_option(name)
        cfg = c_void_p()
        _check(_lib.config_create(byref(cfg)))
        try:
            for name, value in options.items():
                if value is not None:
                    _check(_lib.config_set(cfg, name.encode(),
                                           _encode(_option_text(name, value))))
            h = c_void_p()
            _check(_lib.dataset_open(byref(h), _encode(os.fspath(source)), cfg))
            self._h = h
        finally:
            _lib.config_free(cfg)

    def close(self):
        """Free the handle (later queries raise ValueError)."""
        if self._h is not None:
            _lib.dataset_free(self._h)
            self._h = None

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __len__(self):
        return int(_lib.dataset_count(self._handle()))

    @property
    def label_kind(self):
        """"none", "int", "float" or "multi": the labels of every item."""
        return _KINDS[_lib.dataset_label_kind(self._handle())]

    def __getitem__(self, i):
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("nostall.Dataset: item %d of %d" % (i, n))
        path, label, off, length = c_char_p(), c_int64(), c_uint64(), c_uint64()
        _check(_lib.dataset_item(self._h, i, byref(path), byref(label), byref(off),
                                 byref(length)))
        return os.fsdecode(path.value), label.value, off.value, length.value

    def files(self):
        """The distinct files the items live in, each once, in item order."""
        h = self._handle()
        return [os.fsdecode(_lib.dataset_file(h, i)) for i in range(_lib.dataset_files(h))]

    def _handle(self):
        if self._h is None:
            raise ValueError("nostall.Dataset: closed")
        return self._h
