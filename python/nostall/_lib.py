"""ctypes declarations of libnostall (include/nostall.h) -- nothing else.

Finding the library, in order:
  1. the environment variable NOSTALL_LIBRARY (a path to libnostall.so);
  2. the package's own copy (nostall/libnostall.so, put there by
     `pip install .` or `make install`);
  3. the repository's build folder next to this package
     (python/nostall/../../build/libnostall.so);
  4. ctypes.util.find_library("nostall") (an installed library).

Only the struct layouts and function signatures are written down here, since
ctypes cannot read a header. Everything that the header defines as a table --
status codes and names, options with their types/defaults/bounds, statistics
counter names -- is read from the library at import time (STATUS, OPTIONS,
STAT_NAMES), so the binding cannot drift from the C side.

ctypes.CDLL releases the GIL around every foreign call, so a thread blocked in
nostall_loader_next_timed() does not block other Python threads.
"""

import ctypes
import ctypes.util
import os

_HERE = os.path.dirname(os.path.abspath(__file__))


def _candidates():
    env = os.environ.get("NOSTALL_LIBRARY")
    if env:
        # An explicit choice is final: do not silently fall back to another.
        return [env]
    out = [os.path.join(_HERE, "libnostall.so")]  # an installed package carries its own
    if not os.path.exists(out[0]):
        out = []
    out.append(os.path.normpath(os.path.join(_HERE, "..", "..", "build", "libnostall.so")))
    found = ctypes.util.find_library("nostall")
    if found:
        out.append(found)
    return out


def _load():
    tried = []
    for path in _candidates():
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    raise ImportError(
        "nostall: cannot load libnostall.so; tried: " + "; ".join(tried) +
        ". Build it (cmake -S . -B build && cmake --build build) or set "
        "NOSTALL_LIBRARY=/path/to/libnostall.so")


lib, path = _load()

c_char_p, c_int, c_void_p = ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p
c_size_t, c_uint32, c_uint64 = ctypes.c_size_t, ctypes.c_uint32, ctypes.c_uint64
c_int64, c_double, POINTER = ctypes.c_int64, ctypes.c_double, ctypes.POINTER


class OptionInfo(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("type", c_int), ("type_name", c_char_p),
                ("default_value", c_char_p), ("min", c_char_p), ("max", c_char_p),
                ("help", c_char_p)]


FIELD_DIMS = 4


class Field(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("dtype", c_int), ("ndim", c_uint32),
                ("shape", c_uint64 * FIELD_DIMS), ("item_bytes", c_size_t), ("data", c_void_p),
                ("shape_field", ctypes.c_int32)]


class Batch(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("images", c_void_p), ("labels", c_void_p), ("indices", c_void_p),
                ("count", c_uint32), ("channels", c_uint32), ("height", c_uint32),
                ("width", c_uint32), ("dtype", c_int), ("layout", c_int),
                ("item_bytes", c_size_t), ("epoch", c_uint64), ("position", c_uint64),
                ("sequence", c_uint64), ("nfields", c_uint32), ("fields", POINTER(Field))]


class DeviceBatch(ctypes.Structure):  # nostall_device_batch (gpu_output=device)
    _fields_ = [("struct_size", c_size_t), ("device", ctypes.c_int32), ("slot", c_uint32),
                ("images", c_void_p), ("ready_event", c_void_p), ("stream", c_void_p)]


def check_batch(b):
    """A lent batch's struct_size (the bytes of nostall_batch the library
    filled) must be this mirror's size, else its members would be misread."""
    if b.struct_size != ctypes.sizeof(Batch):
        raise RuntimeError(
            "nostall: %s lends a nostall_batch of %d bytes, but this binding's mirror "
            "(python/nostall/_lib.py) is %d bytes: the library and the binding come "
            "from different builds" % (path, b.struct_size, ctypes.sizeof(Batch)))


# nostall_dtype / nostall_layout values (header enums)
DTYPE_FLOAT32, DTYPE_UINT8, DTYPE_INT64, DTYPE_INT32 = 0, 1, 2, 3
DTYPE_UINT16, DTYPE_FLOAT16, DTYPE_BFLOAT16, DTYPE_UINT32 = 4, 5, 6, 7
# numpy typestr of each dtype (bfloat16 has none: read as uint16)
TYPESTR = {0: "<f4", 1: "|u1", 2: "<i8", 3: "<i4", 4: "<u2", 5: "<f2", 6: "<u2", 7: "<u4"}
LAYOUT_NCHW, LAYOUT_NHWC = 0, 1


class State(ctypes.Structure):
    _fields_ = [("epoch", c_uint64), ("position", c_uint64), ("epoch_offset", c_uint64),
                ("taken", c_uint64), ("seed", c_uint64), ("items", c_uint64),
                ("fingerprint", c_uint64), ("version", c_uint32), ("rank", c_uint32),
                ("world_size", c_uint32), ("level", c_uint32), ("taken_first", c_uint32),
                ("taken_end", c_uint32), ("bad", c_uint64), ("reserved_", c_uint64 * 2)]


STATES_MAX = 65536  # NOSTALL_STATES_MAX


class DatasetInfo(ctypes.Structure):
    _fields_ = [("items", c_uint64), ("classes", c_uint64), ("files_ignored", c_uint64),
                ("items_per_epoch", c_uint64), ("batches_per_epoch", c_uint64),
                ("threads", c_uint32), ("ring_slots", c_uint32), ("batch_bytes", c_size_t),
                ("ring_memory", c_void_p), ("ring_bytes", c_size_t), ("slot_items", c_uint32),
                ("task", c_uint32), ("items_truncated", c_uint64), ("parts_dropped", c_uint64),
                ("parts_clipped", c_uint64), ("parts_unmatched", c_uint64),
                ("items_missing", c_uint64), ("shards_bad", c_uint64)]


class SkipInfo(ctypes.Structure):
    _fields_ = [("index", c_uint64), ("path", c_char_p), ("status", c_int),
                ("reason", c_char_p)]


def _fn(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype, f.argtypes = restype, list(argtypes)
    return f


version_string = _fn("nostall_version_string", c_char_p)
strerror = _fn("nostall_strerror", c_char_p, c_int)
status_name = _fn("nostall_status_name", c_char_p, c_int)
last_error = _fn("nostall_last_error", c_char_p)
option_count = _fn("nostall_option_count", c_int)
option_info_get = _fn("nostall_option_info_get", c_int, c_int, POINTER(OptionInfo))
config_create = _fn("nostall_config_create", c_int, POINTER(c_void_p))
config_free = _fn("nostall_config_free", None, c_void_p)
config_set = _fn("nostall_config_set", c_int, c_void_p, c_char_p, c_char_p)
config_get = _fn("nostall_config_get", c_int, c_void_p, c_char_p, c_char_p, c_size_t)
option_find = _fn("nostall_option_find", c_int, c_char_p)
config_get_uint = _fn("nostall_config_get_uint", c_int, c_void_p, c_int, POINTER(c_uint64))
config_set_peer_cache = _fn("nostall_config_set_peer_cache", c_int, c_void_p, c_void_p)
loader_create = _fn("nostall_loader_create", c_int, POINTER(c_void_p), c_char_p, c_void_p)
loader_free = _fn("nostall_loader_free", None, c_void_p)
loader_next = _fn("nostall_loader_next", c_int, c_void_p, POINTER(Batch))
loader_next_timed = _fn("nostall_loader_next_timed", c_int, c_void_p, POINTER(Batch), c_uint32)
loader_release = _fn("nostall_loader_release", c_int, c_void_p, POINTER(Batch))
loader_next_device = _fn("nostall_loader_next_device", c_int, c_void_p, POINTER(Batch),
                         POINTER(DeviceBatch), c_uint32)
loader_release_device = _fn("nostall_loader_release_device", c_int, c_void_p, POINTER(Batch),
                            c_void_p)
loader_stop = _fn("nostall_loader_stop", c_int, c_void_p)
loader_join = _fn("nostall_loader_join", c_int, c_void_p)
loader_get_state = _fn("nostall_loader_get_state", c_int, c_void_p, POINTER(State))
loader_set_state = _fn("nostall_loader_set_state", c_int, c_void_p, POINTER(State))
loader_get_states = _fn("nostall_loader_get_states", c_int, c_void_p, POINTER(State), c_size_t,
                        POINTER(c_size_t))
loader_set_states = _fn("nostall_loader_set_states", c_int, c_void_p, POINTER(State), c_size_t)
loader_info = _fn("nostall_loader_info", c_int, c_void_p, POINTER(DatasetInfo), c_size_t)
loader_item = _fn("nostall_loader_item", c_int, c_void_p, c_uint64, POINTER(c_char_p),
                  POINTER(c_int64))
loader_class_name = _fn("nostall_loader_class_name", c_char_p, c_void_p, c_uint64)
dataset_open = _fn("nostall_dataset_open", c_int, POINTER(c_void_p), c_char_p, c_void_p)
dataset_free = _fn("nostall_dataset_free", None, c_void_p)
dataset_count = _fn("nostall_dataset_count", c_uint64, c_void_p)
dataset_label_kind = _fn("nostall_dataset_label_kind", c_int, c_void_p)
dataset_item = _fn("nostall_dataset_item", c_int, c_void_p, c_uint64, POINTER(c_char_p),
                   POINTER(c_int64), POINTER(c_uint64), POINTER(c_uint64))
dataset_files = _fn("nostall_dataset_files", c_uint64, c_void_p)
dataset_file = _fn("nostall_dataset_file", c_char_p, c_void_p, c_uint64)
loader_ignored = _fn("nostall_loader_ignored", c_char_p, c_void_p, c_uint64)
loader_bad_shard = _fn("nostall_loader_bad_shard", c_int, c_void_p, c_uint64, POINTER(c_char_p),
                       POINTER(c_char_p))
loader_stats = _fn("nostall_loader_stats", c_int, c_void_p, c_void_p, c_size_t)
stats_count = _fn("nostall_stats_count", c_int)
stats_name = _fn("nostall_stats_name", c_char_p, c_int)
stats_help = _fn("nostall_stats_help", c_char_p, c_int)
loader_tune_reason = _fn("nostall_loader_tune_reason", c_size_t, c_void_p, c_char_p, c_size_t)
tune_reason_name = _fn("nostall_tune_reason_name", c_char_p, c_int)
loader_skipped_count = _fn("nostall_loader_skipped_count", c_uint64, c_void_p)
loader_skipped = _fn("nostall_loader_skipped", c_int, c_void_p, c_uint64, POINTER(SkipInfo))
checksum_update = _fn("nostall_checksum_update", None, POINTER(c_uint64), c_void_p, c_size_t)
checksum_batch = _fn("nostall_checksum_batch", None, POINTER(c_uint64), POINTER(Batch))

# --- user ops (nostall_op.h): the structs and callbacks transform= uses ---

OP_VERSION = 1
OP_FIELDS_MAX, OP_NAME_MAX, OP_MESSAGE_MAX = 7, 24, 768
OP_INPUT_BYTES, OP_INPUT_IMAGE = 0, 1


class OpField(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * OP_NAME_MAX), ("dtype", c_int), ("ndim", c_uint32),
                ("shape", c_uint64 * FIELD_DIMS), ("shape_field", ctypes.c_int32),
                ("reserved_", c_uint32)]


class OpItem(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("data", c_void_p), ("len", c_size_t), ("width", c_uint32),
                ("height", c_uint32), ("stride", c_size_t), ("index", c_uint64),
                ("epoch", c_uint64), ("copy", c_uint32), ("nfields", c_uint32),
                ("path", c_char_p), ("seed", c_uint64), ("random_state", c_uint64),
                ("dst", POINTER(c_void_p)), ("message", ctypes.c_char * OP_MESSAGE_MAX)]


class OpSetup(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("args", c_char_p), ("task", c_uint32), ("train", c_uint32),
                ("seed", c_uint64), ("crop", c_uint32), ("out_height", c_uint32),
                ("out_width", c_uint32), ("reserved_", c_uint32), ("sample", POINTER(OpItem)),
                ("nfields", c_uint32), ("image_field", c_uint32),
                ("fields", OpField * OP_FIELDS_MAX), ("message", ctypes.c_char * OP_MESSAGE_MAX)]


OP_CREATE = ctypes.CFUNCTYPE(c_int, c_void_p, POINTER(OpSetup), POINTER(c_void_p))
OP_DESTROY = ctypes.CFUNCTYPE(None, c_void_p)
OP_CREATE_WORKER = ctypes.CFUNCTYPE(c_int, c_void_p, POINTER(c_void_p))
OP_FREE_WORKER = ctypes.CFUNCTYPE(None, c_void_p, c_void_p)
OP_RUN = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, POINTER(OpItem))


class Op(ctypes.Structure):
    _fields_ = [("version", c_uint32), ("size", c_uint32), ("name", c_char_p), ("input", c_uint32),
                ("flags", c_uint32), ("create", OP_CREATE), ("destroy", OP_DESTROY),
                ("create_worker", OP_CREATE_WORKER), ("free_worker", OP_FREE_WORKER),
                ("run", OP_RUN)]


# (None with a library older than user ops: transform= then says so)
config_set_op = _fn("nostall_config_set_op", c_int, c_void_p, POINTER(Op), c_void_p) \
    if hasattr(lib, "nostall_config_set_op") else None

# --- the restart-marker rewrite (nostall.h) and the stall analyzer
# (nostall_analyze.h), for transcode.py and analyze.py ---------------------


class TranscodeOptions(ctypes.Structure):
    _fields_ = [("restart_mcus", c_uint32), ("restart_rows", c_uint32), ("max_pixels", c_uint64),
                ("flags", c_uint32), ("reserved_", c_uint32)]


class TranscodeResult(ctypes.Structure):
    _fields_ = [("kept", c_int), ("status", c_int), ("width", c_uint32), ("height", c_uint32),
                ("restart_interval", c_uint32), ("optimized", c_uint32),
                ("message", ctypes.c_char * 200)]


TRANSCODE_DROP_METADATA = 1
transcode_bound = _fn("nostall_transcode_bound", c_size_t, c_size_t)
transcode_kept_text = _fn("nostall_transcode_kept_text", c_char_p, c_int)
transcode_jpeg = _fn("nostall_transcode_jpeg", c_int, c_void_p, c_size_t, POINTER(c_size_t),
                     c_char_p, c_size_t, POINTER(TranscodeOptions), c_size_t,
                     POINTER(TranscodeResult), c_size_t)

analyze_meas_count = _fn("nostall_analyze_meas_count", c_int)
analyze_meas_name = _fn("nostall_analyze_meas_name", c_char_p, c_int)
# nostall_analyze_meas: every measurement a double, in table order (read
# from the library, as the stats counters are).
AnalyzeMeas = type("AnalyzeMeas", (ctypes.Structure,), {"_fields_": [
    (analyze_meas_name(_i).decode(), c_double) for _i in range(analyze_meas_count())]})


class AnalyzeMeasureOptions(ctypes.Structure):
    _fields_ = [("max_batches", c_uint64), ("keep_cached", c_int), ("ctx", c_void_p),
                ("message", c_void_p), ("progress", c_void_p)]


ANALYZE_TEXT, ANALYZE_JSON, ANALYZE_HTML = 0, 1, 2
analyze_measure = _fn("nostall_analyze_measure", c_int, POINTER(AnalyzeMeas), c_size_t, c_char_p,
                      c_void_p, POINTER(AnalyzeMeasureOptions), c_size_t)
analyze_files_create = _fn("nostall_analyze_files_create", c_int, POINTER(c_void_p), c_char_p,
                           c_void_p, POINTER(DatasetInfo), c_size_t)
analyze_files_free = _fn("nostall_analyze_files_free", None, c_void_p)
analyze_files_count = _fn("nostall_analyze_files_count", c_uint64, c_void_p)
analyze_files_warm = _fn("nostall_analyze_files_warm", c_uint64, c_void_p)
analyze_files_drop = _fn("nostall_analyze_files_drop", c_uint64, c_void_p)
analyze_create = _fn("nostall_analyze_create", c_int, POINTER(c_void_p), POINTER(AnalyzeMeas),
                     c_size_t)
analyze_free = _fn("nostall_analyze_free", None, c_void_p)
analyze_predict = _fn("nostall_analyze_predict", c_int, c_void_p, c_char_p, c_void_p, c_size_t)
analyze_report = _fn("nostall_analyze_report", c_int, c_void_p, c_int, c_char_p, c_void_p,
                     c_size_t, POINTER(c_size_t))
analyze_note = _fn("nostall_analyze_note", c_int, c_void_p, c_int, c_char_p)


def _s(b):
    return b.decode("utf-8", "surrogateescape") if b is not None else None


# --- tables read from the library -------------------------------------------

# {code: "NAME"} for every status the library knows ("UNKNOWN" marks the rest;
# codes are small and pinned, so a generous scan finds them all).
STATUS = {}
for _code in range(-256, 257):
    _name = _s(status_name(_code))
    if _name != "UNKNOWN":
        STATUS[_code] = _name
CODE = {name: code for code, name in STATUS.items()}
OK, EPOCH_END, DONE, TIMEOUT = CODE["OK"], CODE["EPOCH_END"], CODE["DONE"], CODE["TIMEOUT"]

# {name: dict(type, type_name, default, min, max, help)} in table order.
OPTIONS = {}
for _i in range(option_count()):
    _oi = OptionInfo()
    if option_info_get(_i, ctypes.byref(_oi)) == 0:
        OPTIONS[_s(_oi.name)] = dict(
            type=_oi.type, type_name=_s(_oi.type_name), default=_s(_oi.default_value),
            min=_s(_oi.min), max=_s(_oi.max), help=_s(_oi.help))

STAT_NAMES = [_s(stats_name(_i)) for _i in range(stats_count())]
STAT_HELP = {n: _s(stats_help(_i)) for _i, n in enumerate(STAT_NAMES)}
# nostall_stats: every counter is a uint64_t, in table order.
Stats = type("Stats", (ctypes.Structure,), {"_fields_": [(n, c_uint64) for n in STAT_NAMES]})

del _code, _name, _i, _oi
