"""nostall: Python binding of libnostall, a data loader for deep-learning training.

    import nostall
    loader = nostall.Loader("/data/train", batch_size=256, crop=224, threads=8)
    for epoch in range(start_epoch, epochs):
        for images, labels in loader:      # one epoch per `for`
            train_step(images, labels)     # zero-copy views, safe to keep: a ring
                                           # slot is reused only once no tensor views it
    loader.close()                         # or `with nostall.Loader(...) as loader:`

The binding is a thin ctypes layer (no compiled extension): _lib declares the C
API and reads its tables (options, statuses, counters) from the library at
import; loader.py maps statuses to exceptions and batches to tensors. See
loader.py for the batch lifetime, Ctrl-C and threading rules.

nostall.mpi (import it explicitly; needs mpi4py) is the partitioned cache
across the ranks of an MPI job: Loader(source, peer_cache=PartitionedCache(...)).
nostall.ray (import it explicitly; needs Ray) places prep servers as Ray
actors: Loader(source, prep_servers=PrepPool(...).addresses, ...).

Library lookup: $NOSTALL_LIBRARY, else ../../build/libnostall.so relative to
this package, else ctypes.util.find_library("nostall").
"""

from . import _lib
from .loader import (ERRORS, BadItemError, Error, Loader, TransformError, checksum, error_class,
                     merge_states)
from .analyze import Analysis, analyze, stall_summary
from .dataset import Dataset
from .profile import Profile, profile
from .transcode import transcode

__version__ = _lib._s(_lib.version_string())
LIBRARY_PATH = _lib.path
OPTIONS = _lib.OPTIONS      # {name: {type, type_name, default, min, max, help}}
STATUS = _lib.STATUS        # {code: "NAME"}
STAT_NAMES = _lib.STAT_NAMES

# One exception class per E_* status, e.g. OptionError, NotFoundError,
# DatasetError, StoppedError, StateError, CorruptError (all derive from Error).
for _cls in ERRORS.values():
    globals()[_cls.__name__] = _cls
del _cls

__all__ = ["Loader", "Error", "BadItemError", "TransformError", "checksum", "error_class",
           "merge_states",
           "OPTIONS", "STATUS", "STAT_NAMES", "LIBRARY_PATH", "analyze", "stall_summary",
           "Analysis", "profile", "Profile", "transcode", "Dataset"] + [c.__name__ for c in ERRORS.values()]
