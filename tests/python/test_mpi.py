"""nostall.mpi: the partitioned cache from Python, 2 ranks under mpirun on
loopback (`--mca btl tcp,self`). Each rank runs _RANK_SCRIPT: a
PartitionedCache holding its half of the dataset, a Loader built on it, 3
epochs. Checked here: every rank delivers exactly the bytes of the same
sharded Loader without the cache (computed in this process), epochs after
the first read (almost) nothing from storage, items do come from the peer,
and the binding's own errors (source or rank that do not match the cache, a
closed cache) are clear. Skipped without mpi4py, mpirun or libnostall_mpi.
"""

import ctypes.util
import json
import os
import shutil
import subprocess
import sys

import pytest

try:
    import nostall
except ImportError as e:  # conftest skips everything with the reason
    nostall = None

EPOCHS, OPTS = 3, dict(crop=32, batch_size=8, threads=2, seed=5, output="uint8")

_RANK_SCRIPT = r"""
import json, os, sys
from mpi4py import MPI
import nostall, nostall.mpi

data, out, cache_bytes, epochs, opts = sys.argv[1], sys.argv[2], int(sys.argv[3]), \
    int(sys.argv[4]), json.loads(sys.argv[5])
pc = nostall.mpi.PartitionedCache(data, cache_bytes, timeout_ms=5000)
res = {"rank": pc.rank, "size": pc.size, "epochs": [], "errors": {}}
if pc.rank == 0:  # the binding's checks, before anything is built
    for name, kw in (("source", dict(source=data + "/class_000")),
                     ("rank", dict(source=data, rank=1))):
        try:
            nostall.Loader(kw.pop("source"), peer_cache=pc, **kw, **opts)
            res["errors"][name] = None
        except nostall.OptionError as e:
            res["errors"][name] = str(e)
ld = nostall.Loader(data, peer_cache=pc, epochs=epochs, **opts)
for e in range(epochs):
    before = ld.stats()["storage_reads"]
    state, n = 0, 0
    for images, labels in ld:
        state = nostall.checksum(images, labels, state)
        n += len(labels)
    res["epochs"].append({"checksum": state, "items": n,
                          "storage_reads": ld.stats()["storage_reads"] - before})
    MPI.COMM_WORLD.Barrier()  # every rank's pushes are in before the next epoch
res["peer_hits"] = ld.stats()["peer_hits"]
res["pc"] = pc.stats()
res["closed_ok"] = pc.close()
try:
    nostall.Loader(data, peer_cache=pc, **opts)
    res["errors"]["closed"] = None
except nostall.Error as e:
    res["errors"]["closed"] = str(e)
res["loader_closed_by_pc"] = ld._core is None or ld._core.closed
with open(os.path.join(out, "rank_%d.json" % pc.rank), "w") as f:
    json.dump(res, f)
"""


def _mpi_ready():
    if nostall is None:
        return "nostall not importable"
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return "mpi4py not installed (apt-get install python3-mpi4py)"
    if not shutil.which("mpirun"):
        return "mpirun not found (apt-get install openmpi-bin)"
    lib = os.environ.get("NOSTALL_MPI_LIBRARY") or os.path.join(
        os.path.dirname(nostall.LIBRARY_PATH), "libnostall_mpi.so")
    if not os.path.exists(lib) and not ctypes.util.find_library("nostall_mpi"):
        return "libnostall_mpi.so not built (MPI not found at configure time)"
    return None


def _sharded_checksums(data, rank, world):
    with nostall.Loader(data, rank=rank, world_size=world, epochs=EPOCHS, **OPTS) as ld:
        sums = []
        for _ in range(EPOCHS):
            state = 0
            for images, labels in ld:
                state = nostall.checksum(images, labels, state)
            sums.append(state)
        return sums


def test_partitioned_cache_two_ranks(tmp_path):
    why = _mpi_ready()
    if why:
        pytest.skip(why)
    from conftest import gen
    data = gen(tmp_path / "data", 96, 3, 80, 60)
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(data) for f in fs)
    script = tmp_path / "rank.py"
    script.write_text(_RANK_SCRIPT)
    out = tmp_path / "out"
    out.mkdir()
    env = dict(os.environ, OMPI_MCA_btl_tcp_if_include="lo", OMPI_MCA_oob_tcp_if_include="lo",
               PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(nostall.__file__))] +
                                          sys.path))
    if os.getuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd = ["mpirun", "--oversubscribe", "-np", "2", "--mca", "btl", "tcp,self", sys.executable,
           str(script), data, str(out), str(total // 2 + 65536), str(EPOCHS), json.dumps(OPTS)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    ranks = [json.load(open(out / ("rank_%d.json" % r))) for r in range(2)]
    n = total_reads = 0
    for r, res in enumerate(ranks):
        assert (res["rank"], res["size"]) == (r, 2)
        sums = _sharded_checksums(data, r, 2)
        assert [e["checksum"] for e in res["epochs"]] == sums, "rank %d: bytes differ" % r
        n += res["epochs"][0]["items"]
        # Counted between epoch ends, so the first batches of an epoch,
        # prefetched during the previous one, count there.
        reads = [e["storage_reads"] for e in res["epochs"]]
        assert reads[-1] <= 1, reads
        total_reads += sum(reads)
        assert res["pc"]["remote_hits"] > 0 and res["peer_hits"] > 0, res["pc"]
        assert res["pc"]["owned_items"] > 0 and res["pc"]["unowned_items"] == 0
        assert res["pc"]["verify_failures"] == 0 and res["pc"]["timeouts"] == 0
        assert res["closed_ok"] is True and res["loader_closed_by_pc"]
        assert "closed" in (res["errors"]["closed"] or "")
    assert n == 96  # the two shards cover the dataset
    # Every item is read from storage about once in 3 epochs (without the
    # cache: 288 reads); a few twice, when the owner asked before the push.
    assert 96 <= total_reads <= 110, total_reads
    errs = ranks[0]["errors"]
    assert errs["source"] and "peer_cache was made for" in errs["source"]
    assert errs["rank"] and "rank=1" in errs["rank"] and "communicator says 0" in errs["rank"]
