"""nostall.mpi: the partitioned cache across the ranks of an MPI job
(libnostall_mpi, include/nostall_mpi.h; CoorDL's partitioned caching) from
Python, over an mpi4py communicator.

    # mpirun -np 4 python train.py
    from mpi4py import MPI                      # initializes MPI (THREAD_MULTIPLE)
    import nostall, nostall.mpi
    pc = nostall.mpi.PartitionedCache("/data/train", "25%")     # collective
    loader = nostall.Loader("/data/train", peer_cache=pc, cache="none", crop=224)
    for epoch in range(epochs):
        for images, labels in loader:
            ...
    pc.close()          # collective, bounded; also closes loaders still using it

Each rank caches the items it owns (its share of the dataset, up to
`cache_bytes`) and reads the others' items from their owners' memory instead
of storage; the loader built with `peer_cache=pc` is sharded by the
communicator (rank, size), which fills in its rank and world_size.
Everything else -- ownership, verification, timeouts, a dead peer -- is the C
library's and is described in docs/mpi.md.

Requirements: mpi4py (Debian: python3-mpi4py) built on the MPI that
libnostall_mpi links (Debian 12: Open MPI 4.1), and MPI initialized with
MPI_THREAD_MULTIPLE (mpi4py's default). The library is found as
$NOSTALL_MPI_LIBRARY, else libnostall_mpi.so next to libnostall.so, else
ctypes.util.find_library("nostall_mpi").

This module touches only libnostall_mpi's API and nostall's config; close()
is registered with atexit so that the progress thread stops before mpi4py
finalizes MPI (atexit runs later registrations first).
"""

import atexit
import ctypes
import ctypes.util
import os
import weakref

from . import _lib
from .loader import Error, _check

c_int, c_uint32, c_uint64, c_void_p, POINTER = (ctypes.c_int, ctypes.c_uint32, ctypes.c_uint64,
                                                ctypes.c_void_p, ctypes.POINTER)


class _Options(ctypes.Structure):  # nostall_mpi_options
    _fields_ = [("timeout_ms", c_uint32), ("detach_timeout_ms", c_uint32), ("no_push", c_int),
                ("quiet", c_int)]


class PeerCache(ctypes.Structure):  # nostall_peer_cache: passed along, never called here
    _fields_ = [("ctx", c_void_p), ("get", c_void_p), ("put", c_void_p)]


STAT_NAMES = ("rank", "world", "items", "owned_items", "owned_bytes", "unowned_items",
              "local_hits", "remote_hits", "remote_misses", "storage_reads", "storage_bytes",
              "net_bytes_in", "net_bytes_out", "requests_served", "served_hits", "pushes_sent",
              "pushes_received", "timeouts", "skipped_down", "verify_failures", "peers_down",
              "cache_items", "cache_bytes", "remote_ns", "parked")


class _Stats(ctypes.Structure):  # nostall_mpi_stats: every field a uint64_t, in order
    _fields_ = [(n, c_uint64) for n in STAT_NAMES]


_mpilib = None


def _load():
    global _mpilib
    if _mpilib is not None:
        return _mpilib
    env = os.environ.get("NOSTALL_MPI_LIBRARY")
    cands = [env] if env else [os.path.join(os.path.dirname(_lib.path), "libnostall_mpi.so"),
                               ctypes.util.find_library("nostall_mpi")]
    tried = []
    for p in (c for c in cands if c):
        try:
            lib = ctypes.CDLL(p)
            break
        except OSError as e:
            tried.append("%s (%s)" % (p, e))
    else:
        raise ImportError("nostall.mpi: cannot load libnostall_mpi.so; tried: " +
                          ("; ".join(tried) or "nothing found") + ". It is built where MPI is "
                          "found (apt-get install libopenmpi-dev openmpi-bin) next to "
                          "libnostall.so; or set NOSTALL_MPI_LIBRARY")
    for name, res, args in (
            ("nostall_mpi_attach_opts", c_int,
             [POINTER(c_void_p), c_void_p, c_void_p, ctypes.c_char_p, c_uint64, POINTER(_Options),
              ctypes.c_size_t]),
            ("nostall_mpi_peer_cache", c_int, [c_void_p, POINTER(PeerCache)]),
            ("nostall_mpi_stats_get", c_int, [c_void_p, POINTER(_Stats), ctypes.c_size_t]),
            ("nostall_mpi_detach", c_int, [c_void_p])):
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    _mpilib = lib
    return lib


def _bytes(value):
    """cache_bytes as the library reads it: an int, or text with K/M/G/T or a
    percentage of physical memory ("25%")."""
    cfg = c_void_p()
    _check(_lib.config_create(ctypes.byref(cfg)))
    try:
        _check(_lib.config_set(cfg, b"cache_bytes", str(value).encode()))
        out = c_uint64()
        _check(_lib.config_get_uint(cfg, _lib.option_find(b"cache_bytes"), ctypes.byref(out)))
        return out.value
    finally:
        _lib.config_free(cfg)


class PartitionedCache:
    """A partitioned cache of `source`'s encoded items over `comm` (default
    mpi4py's COMM_WORLD). Collective: every rank constructs it with the same
    source. cache_bytes is this rank's share (int, "8G" or "25%" of physical
    memory; 0: cache nothing but use the peers). timeout_ms (default 2000):
    a request to a peer unanswered that long falls back to storage and
    marks the peer down; detach_timeout_ms (default 30000) bounds close();
    push=False stops sending items read from storage to their owners;
    quiet=True silences the library's warnings on stderr."""

    def __init__(self, source, cache_bytes, *, comm=None, timeout_ms=None,
                 detach_timeout_ms=None, push=True, quiet=False):
        self._pc = None
        self._loaders = weakref.WeakSet()
        try:
            from mpi4py import MPI
        except ImportError as e:
            raise ImportError("nostall.mpi needs mpi4py (Debian: apt-get install "
                              "python3-mpi4py): %s" % e) from None
        self._lib = _load()
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.source = os.fspath(source)
        self.cache_bytes = _bytes(cache_bytes)
        opts = _Options(int(timeout_ms or 0), int(detach_timeout_ms or 0), int(not push),
                        int(bool(quiet)))
        cfg, pc = c_void_p(), c_void_p()
        _check(_lib.config_create(ctypes.byref(cfg)))
        try:
            _check(self._lib.nostall_mpi_attach_opts(
                ctypes.byref(pc), cfg, c_void_p(MPI._handleof(self.comm)), self.source.encode(),
                self.cache_bytes, ctypes.byref(opts), ctypes.sizeof(opts)))
        finally:
            _lib.config_free(cfg)
        self._pc = pc.value
        self.hooks = PeerCache()
        _check(self._lib.nostall_mpi_peer_cache(self._pc, ctypes.byref(self.hooks)))
        atexit.register(self.close)

    def _attach_loader(self, loader):
        if not self._pc:
            raise Error(_lib.CODE["E_STATE"], "nostall.mpi: the PartitionedCache is closed")
        self._loaders.add(loader)

    def stats(self):
        """This rank's counters (nostall_mpi_stats) as a dict."""
        if not self._pc:
            raise Error(_lib.CODE["E_STATE"], "nostall.mpi: the PartitionedCache is closed")
        s = _Stats()
        _check(self._lib.nostall_mpi_stats_get(self._pc, ctypes.byref(s), ctypes.sizeof(s)))
        return {n: getattr(s, n) for n in STAT_NAMES}

    def close(self):
        """Collective and bounded: close the loaders still using the cache,
        serve the peers until every rank has called close (or
        detach_timeout_ms passed: a peer is gone), then stop. Returns True,
        or False when some rank never arrived (then prefer leaving without
        MPI_Finalize, which could wait for it). Idempotent."""
        pc, self._pc = self._pc, None
        if not pc:
            return True
        atexit.unregister(self.close)
        try:
            for ld in list(self._loaders):
                ld.close()
        finally:  # the collective detach happens whatever a loader did
            rc = self._lib.nostall_mpi_detach(pc)
        if rc == _lib.TIMEOUT:
            return False
        _check(rc)
        return True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
