"""DLPack capsules over library memory, built with ctypes (no compiled code):
how gpu_output=device batches (the device ring, docs/gpu.md) reach torch
without a copy. torch.utils.dlpack.from_dlpack(capsule(...)) gives a tensor
viewing the memory; torch calls the deleter when the tensor (and every view)
is freed, and the deleter drops `owner` (a _Lease: the slot goes back to the
ring). kDLCUDA for a CUDA device ring, kDLCPU for the test backend's host
memory (device -1), so the path is tested without a GPU.

Each capsule's structures live in _LIVE until the deleter runs; the deleter
may run on any thread (ctypes takes the GIL)."""

import ctypes
import threading

from . import _lib

KDL_CPU, KDL_CUDA = 1, 2
KDL_UINT, KDL_FLOAT, KDL_BFLOAT = 1, 2, 4
# nostall_dtype -> (DLPack type code, bits)
DTYPES = {_lib.DTYPE_FLOAT32: (KDL_FLOAT, 32), _lib.DTYPE_UINT8: (KDL_UINT, 8),
          _lib.DTYPE_FLOAT16: (KDL_FLOAT, 16), _lib.DTYPE_BFLOAT16: (KDL_BFLOAT, 16)}
_ITEMSIZE = {_lib.DTYPE_FLOAT32: 4, _lib.DTYPE_UINT8: 1, _lib.DTYPE_FLOAT16: 2,
             _lib.DTYPE_BFLOAT16: 2}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                            ("deleter", _DELETER)]

_LIVE = {}  # address of a DLManagedTensor -> (it, shape, strides, owner)
_LOCK = threading.Lock()
_NAME = b"dltensor"  # lives as long as the module: capsules point at it

_new = ctypes.pythonapi.PyCapsule_New
_new.restype = ctypes.py_object
_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


def _delete(ptr):
    with _LOCK:
        entry = _LIVE.pop(ctypes.addressof(ptr.contents), None)
    del entry  # drops the owner (its lease) outside the lock


_deleter = _DELETER(_delete)


def capsule(addr, shape, dtype, device, owner):
    """A "dltensor" capsule of the dense array at `addr` (nostall dtype,
    C order), on CUDA device `device` (-1: host memory); `owner` is kept
    until torch frees the tensor."""
    code, bits = DTYPES[dtype]
    n = len(shape)
    shp = (ctypes.c_int64 * n)(*shape)
    strides, acc = (ctypes.c_int64 * n)(), 1
    for i in range(n - 1, -1, -1):
        strides[i] = acc
        acc *= shape[i]
    m = DLManagedTensor()
    m.dl_tensor = DLTensor(addr, DLDevice(KDL_CPU if device < 0 else KDL_CUDA, max(device, 0)),
                           n, DLDataType(code, bits, 1), shp, strides, 0)
    m.manager_ctx = None
    m.deleter = _deleter
    with _LOCK:
        _LIVE[ctypes.addressof(m)] = (m, shp, strides, owner)
    return _new(ctypes.addressof(m), _NAME, None)


def live():
    """Capsules whose tensors torch has not freed yet (tests)."""
    with _LOCK:
        return len(_LIVE)
