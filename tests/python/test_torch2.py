"""What a torch 2 user does with a nostall.Loader, on Debian's torch 1.13
(make test) and on torch 2.x from PyPI (make test-torch2); a feature torch
1.13 lacks is skipped there, saying so:

- pin_memory=True without CUDA (this machine): a RuntimeWarning saying it
  is ignored (as torch's DataLoader warns), and the same batches as without
  it; DataLoader(loader, batch_size=None, pin_memory=True) likewise gives
  the loader's own batches.
- DataLoader(loader, batch_size=None): the loader's batches (images and
  labels, bit for bit) and its epochs, set_epoch passing through to the
  loader, len() the loader's.
- torch.compile (torch >= 2: inductor on the CPU, g++ compiling its
  kernels) of a tiny model trained on nostall batches: the compiled model's
  losses and its parameters after the steps equal the eager model's (run
  in a subprocess with a hard timeout: compiling is slow on a busy machine;
  marked slow).
- torch.distributed.checkpoint (torch >= 2.2, its Stateful protocol): the
  Loader is a Stateful; dcp.save of {"model": ..., "loader": loader} in one
  process without a process group, then dcp.load into a new Loader (and a
  new model), delivers exactly the batches the first loader delivered
  after the save, to the end of the next epoch.
"""

import os
import subprocess
import sys
import warnings

import pytest

import nostall
from conftest import ROOT

torch = pytest.importorskip("torch")

SMALL = dict(batch_size=8, crop=16, seed=5, threads=2)


def batches(it):
    """[(checksum of the images, labels)] of an iterable of batches."""
    return [(nostall.checksum(x, y), y.tolist()) for x, y in it]


def test_pin_memory_without_cuda(data):
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here: tests/python/test_pyface.py's device tests run")
    with nostall.Loader(data, epochs=1, **SMALL) as ld:
        want = batches(ld)
    with pytest.warns(RuntimeWarning, match="pin_memory=True but CUDA is not available: ignored"):
        ld = nostall.Loader(data, pin_memory=True, epochs=1, **SMALL)
    with ld:
        got = []
        for x, y in ld:
            assert not x.is_pinned() and x.device.type == "cpu"
            got.append((nostall.checksum(x, y), y.tolist()))
        assert got == want
        # torch's own pin_memory=True over the loader: torch warns, batches unchanged
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dl = torch.utils.data.DataLoader(ld, batch_size=None, pin_memory=True)
            assert batches(dl) == want


def test_dataloader_batch_size_none(data):
    with nostall.Loader(data, epochs=2, **SMALL) as ld:
        want = [batches(ld), batches(ld)]
    with nostall.Loader(data, epochs=2, **SMALL) as ld:
        dl = torch.utils.data.DataLoader(ld, batch_size=None, num_workers=0)
        assert len(dl) == len(ld) == 5
        assert [batches(dl), batches(dl)] == want
        ld.set_epoch(1)  # a DistributedSampler-style set_epoch on the dataset
        assert batches(dl) == want[1]
        ld.set_epoch(0)
        x, y = next(iter(dl))
        assert x.dtype == torch.float32 and tuple(x.shape) == (8, 3, 16, 16)
        assert y.dtype == torch.int64


COMPILE = r"""
import copy, os, sys
sys.path.insert(0, os.path.join(sys.argv[1], "python"))
import torch, nostall
torch.manual_seed(0)
eager = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 16), torch.nn.ReLU(),
                            torch.nn.Linear(16, 4))
model = copy.deepcopy(eager)
compiled = torch.compile(model)  # inductor: C++ kernels built with g++
opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (eager, model)]
n = 0
with nostall.Loader(sys.argv[2], batch_size=8, crop=8, seed=1, threads=1, epochs=1,
                    drop_last=True) as ld:
    for x, y in ld:
        for m, opt in zip((eager, compiled), opts):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(m(x), y)
            loss.backward()
            opt.step()
            if m is eager:
                want = loss.item()
        assert abs(loss.item() - want) < 1e-5, (n, loss.item(), want)
        n += 1
for a, b in zip(eager.parameters(), model.parameters()):
    assert torch.allclose(a, b, atol=1e-5), (a - b).abs().max()
print("steps", n)
"""


@pytest.mark.slow
def test_torch_compile_fed_by_nostall(data, tmp_path):
    if not hasattr(torch, "compile"):
        pytest.skip("torch %s has no torch.compile (torch >= 2.0)" % torch.__version__)
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
               TORCHINDUCTOR_COMPILE_THREADS="1", OMP_NUM_THREADS="1")
    try:
        p = subprocess.run([sys.executable, "-c", COMPILE, ROOT, data], env=env, timeout=900,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except subprocess.TimeoutExpired:
        pytest.fail("torch.compile of a tiny model took over 900 s")
    assert p.returncode == 0, p.stdout[-3000:]
    assert "steps 5" in p.stdout, p.stdout[-3000:]


def test_distributed_checkpoint_stateful(data, tmp_path):
    try:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.stateful import Stateful
    except ImportError:
        pytest.skip("torch %s has no torch.distributed.checkpoint Stateful protocol "
                    "(torch >= 2.2)" % torch.__version__)
    if not hasattr(dcp, "save"):
        pytest.skip("torch %s has no dcp.save (torch >= 2.2)" % torch.__version__)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    ld = nostall.Loader(data, epochs=2, **SMALL)
    assert isinstance(ld, Stateful)
    with ld:
        it = iter(ld)
        head = [next(it), next(it)]
        del head
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "assuming ... a single process"
            dcp.save({"model": model.state_dict(), "loader": ld},
                     checkpoint_id=str(tmp_path / "ck"))
        want = batches(it) + batches(ld)  # the rest of epoch 0, then epoch 1
        assert len(want) == 3 + 5
    model2 = torch.nn.Linear(4, 2)
    state = {"model": model2.state_dict(), "loader": None}
    with nostall.Loader(data, epochs=2, **SMALL) as ld2:
        state["loader"] = ld2
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp.load(state, checkpoint_id=str(tmp_path / "ck"))
        model2.load_state_dict(state["model"])
        assert ld2.state_dict()["position"] == 16 and ld2.state_dict()["epoch"] == 0
        assert batches(ld2) + batches(ld2) == want
    assert torch.equal(model2.weight, model.weight)
