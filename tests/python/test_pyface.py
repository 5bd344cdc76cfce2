"""The Python face as a PyTorch user meets it (issue 20): every case here
crashed or silently misbehaved before. Cases that used to kill the
interpreter run in a subprocess and assert its exit code.
"""

import copy
import gc
import json
import os
import pickle
import subprocess
import sys
import textwrap
import threading
import warnings

import numpy as np
import pytest

try:
    import nostall
except ImportError as e:  # conftest skips everything with the reason
    pytest.skip(str(e), allow_module_level=True)

torch = pytest.importorskip("torch")

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SMALL = dict(batch_size=16, crop=24, threads=2, seed=1)


def run_python(code, data):
    """Run `code` in a fresh /usr/bin/python3 with DATA set; return the result."""
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), DATA=data)
    prelude = "import os, gc, nostall, torch\nDATA = os.environ['DATA']\n"
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=120)


def reference(data, **opts):
    """(indices, images, labels) of every batch of epoch 0 with copies."""
    out = []
    with nostall.Loader(data, copy=True, **opts) as ld:
        ld.set_epoch(0)
        for x, y in ld:
            out.append((ld.last_indices.tolist(), x.clone(), y.clone()))
    return out


# 1. tensors outlive the loader -------------------------------------------------

@pytest.mark.parametrize("case", ["temporary", "close", "gc"])
def test_tensor_outlives_loader(data, case):
    code = {
        "temporary": """
            x, y = next(iter(nostall.Loader(DATA, batch_size=32, crop=24, seed=3)))
            gc.collect()
            print(float(x.double().sum()), int(y.sum()))
        """,
        "close": """
            ld = nostall.Loader(DATA, batch_size=32, crop=24, seed=3)
            x, y = next(iter(ld))
            ld.close()
            junk = [torch.rand(32, 3, 24, 24) for _ in range(50)]  # reuse freed memory
            print(float(x.double().sum()), int(y.sum()))
        """,
        "gc": """
            ld = nostall.Loader(DATA, batch_size=32, crop=24, seed=3)
            x, y = next(iter(ld))
            view = x[3:5]
            del ld, x
            gc.collect()
            junk = [torch.rand(32, 3, 24, 24) for _ in range(50)]
            print(float(view.double().sum()), int(y.sum()))
        """}[case]
    r = run_python(code, data)
    assert r.returncode == 0, r.stderr
    with nostall.Loader(data, batch_size=32, crop=24, seed=3, copy=True) as ld:
        x, y = next(iter(ld))
    got = [float(v) for v in r.stdout.split()]
    want = float(x[3:5].double().sum()) if case == "gc" else float(x.double().sum())
    assert got[0] == pytest.approx(want, rel=1e-12) and got[1] == int(y.sum())


# 2. kept tensors keep their bytes --------------------------------------------

def test_kept_tensors_unchanged(data):
    ref = reference(data, **SMALL)
    with nostall.Loader(data, **SMALL) as ld:
        labels = [y for _, y in ld]
    assert len({y.data_ptr() for y in labels}) == len(labels)
    assert [y.tolist() for y in labels] == [r[2].tolist() for r in ref]
    opts = dict(SMALL, batch_size=4)
    ref = reference(data, **opts)
    with nostall.Loader(data, **opts) as ld:
        kept = [(x, y) for x, y in ld]  # every image batch kept: later ones are copies
        info = ld.info()
    assert len(kept) == len(ref) == 10 and len(kept) > info["ring_slots"]
    for (x, y), (_, rx, ry) in zip(kept, ref):
        assert torch.equal(x, rx) and torch.equal(y, ry)


def test_zero_copy_in_an_ordinary_loop(data):
    with nostall.Loader(data, **SMALL) as ld:
        addresses = set()
        for x, y in ld:
            assert x.data_ptr() == ld.last_batch_address  # a view, not a copy
            addresses.add(x.data_ptr())
        assert len(addresses) <= ld.info()["ring_slots"]


# 3. copy, deepcopy, pickle ----------------------------------------------------

def test_copy_and_pickle_refused(data):
    with nostall.Loader(data, **SMALL) as ld:
        for fn in (copy.copy, copy.deepcopy, pickle.dumps):
            with pytest.raises(TypeError, match="nostall.Loader cannot be"):
                fn(ld)
    r = run_python("""
        ld = nostall.Loader(DATA, batch_size=8, crop=16)
        import copy
        try:
            copy.copy(ld)
        except TypeError:
            pass
        next(iter(ld))
    """, data)
    assert r.returncode == 0, r.stderr  # used to abort at exit: double free


# 4. a fresh epoch per iter() ---------------------------------------------------

def epoch_items(ld):
    out = []
    for _ in ld:
        out.extend(ld.last_indices.tolist())
    return out


def test_peek_then_full_epoch(data):
    with nostall.Loader(data, **SMALL) as ld:
        next(iter(ld))  # a peek
        assert sorted(epoch_items(ld)) == list(range(40))
        assert ld.state_dict()["epoch"] == 2


def test_lightning_style_loop(data):
    """Sanity check (2 validation batches), then per epoch: limit_train_batches
    on the train loader and a full validation pass."""
    with nostall.Loader(data, **SMALL) as train, \
            nostall.Loader(data, mode="eval", shuffle=False, **SMALL) as val:
        it = iter(val)
        for _ in range(2):
            next(it)
        for epoch in range(3):
            train.set_epoch(epoch)
            for i, _ in enumerate(train):
                if i == 1:
                    break  # limit_train_batches=2
            seen = epoch_items(val)
            assert sorted(seen) == list(range(40)), "epoch %d" % epoch


def test_resume_then_set_epoch_loop(data):
    opts = dict(SMALL, batch_size=6)
    ref = {}
    with nostall.Loader(data, **opts) as ld:
        for epoch in range(3):
            ld.set_epoch(epoch)
            ref[epoch] = epoch_items(ld)
    with nostall.Loader(data, **opts) as ld:
        ld.set_epoch(1)
        it = iter(ld)
        head = []
        for _ in range(3):
            next(it)
            head.extend(ld.last_indices.tolist())
        state = ld.state_dict()
    with nostall.Loader(data, **opts) as ld:
        ld.load_state_dict(state)
        got = {}
        for epoch in range(state["epoch"], 3):  # the README's loop
            ld.set_epoch(epoch)
            got[epoch] = epoch_items(ld)
    assert head + got[1] == ref[1]
    assert got[2] == ref[2]


def test_break_starts_a_new_epoch(data):
    with nostall.Loader(data, **SMALL) as ld:
        for _ in ld:
            break
        assert sorted(epoch_items(ld)) == list(range(40))


# 5. two iterators, two threads ---------------------------------------------

def test_two_iterators(data):
    with nostall.Loader(data, **SMALL) as ld:
        with pytest.raises(RuntimeError, match="newer iter"):
            list(zip(ld, ld))
        a, b = iter(ld), iter(ld)
        next(b)
        with pytest.raises(RuntimeError, match="newer iter"):
            next(a)
        assert sorted(epoch_items(ld)) == list(range(40))  # not wedged
        assert sorted(epoch_items(ld)) == list(range(40))


def test_second_thread_raises(data):
    with nostall.Loader(data, **SMALL) as ld:
        it = iter(ld)
        next(it)
        errors = []

        def other():
            try:
                for _ in ld:
                    pass
            except RuntimeError as e:
                errors.append(str(e))
            try:
                next(it)
            except RuntimeError as e:
                errors.append(str(e))
        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert len(errors) == 2 and "two threads" in errors[0] and "one thread" in errors[1]
        rest = [i for _ in it for i in ld.last_indices.tolist()]
        assert len(rest) == 40 - 16  # the first thread's epoch went on


# 6. the torch stack ----------------------------------------------------------

def test_exceptions_pickle(data, bad_data):
    with pytest.raises(nostall.OptionError) as e:
        nostall.Loader(data, crop=0)
    again = pickle.loads(pickle.dumps(e.value))
    assert type(again) is type(e.value) and str(again) == str(e.value)
    with nostall.Loader(bad_data, on_bad_item="fail", **SMALL) as ld:
        with pytest.raises(nostall.BadItemError) as e:
            list(ld)
    again = pickle.loads(pickle.dumps(e.value))
    assert type(again) is type(e.value) and again.message == e.value.message
    assert isinstance(again, nostall.NotImageError)


def test_inside_torch_dataloader(data, bad_data):
    from torch.utils.data import DataLoader
    with nostall.Loader(data, **SMALL) as ld:
        got = [y for _, y in DataLoader(ld, batch_size=None)]
        assert sum(len(y) for y in got) == 40
        with pytest.raises(TypeError, match="batch_size=None"):
            list(DataLoader(ld))
        with pytest.raises(TypeError, match="batch_size=None"):
            ld[0]
    # worker processes: refused with what to do
    with nostall.Loader(bad_data, on_bad_item="fail", **SMALL) as ld:
        with pytest.raises(RuntimeError, match="num_workers=0"):
            list(DataLoader(ld, batch_size=None, num_workers=1))
    # a nostall error raised in a worker process comes back as itself
    from torch._utils import ExceptionWrapper
    try:
        raise nostall.CorruptError(-7, "decode: a.jpg: bad Huffman code")
    except nostall.Error:
        wrapped = ExceptionWrapper(where="in DataLoader worker process 0")
    with pytest.raises(nostall.CorruptError, match="a.jpg: bad Huffman code"):
        wrapped.reraise()


def test_torch_names_did_you_mean(data):
    with pytest.raises(nostall.OptionError, match="threads"):
        nostall.Loader(data, num_workers=4)
    with pytest.raises(nostall.OptionError, match="batches_ahead"):
        nostall.Loader(data, prefetch_factor=2)
    with pytest.raises(nostall.OptionError, match="did you mean batch_size"):
        nostall.Loader(data, batchsize=4)


# 7. states that know what they resume ------------------------------------

def test_state_checks(data, bad_data):
    with nostall.Loader(data, **SMALL) as ld:
        next(iter(ld))
        state = ld.state_dict()
        assert state["epoch"] == 0 and state["position"] == 16 and state["items"] == 40
    with nostall.Loader(data, **dict(SMALL, seed=2)) as ld:
        with pytest.raises(nostall.StateError, match="seed"):
            ld.load_state_dict(state)
    with nostall.Loader(bad_data, **SMALL) as ld:
        with pytest.raises(nostall.StateError, match="40 items"):
            ld.load_state_dict(state)
    with nostall.Loader(data, **dict(SMALL, crop=20)) as ld:
        with pytest.raises(nostall.StateError, match="crop"):
            ld.load_state_dict(state)
    with nostall.Loader(data, epochs=3, **SMALL) as ld:
        for bad in (-1, 3, 2 ** 64):
            with pytest.raises(ValueError):
                ld.set_epoch(bad)
        with pytest.raises(TypeError):
            ld.set_epoch(1.5)
        with pytest.raises(ValueError):
            ld.load_state_dict(dict(state, epoch=-1))
        ld.set_epoch(2)
        assert len(epoch_items(ld)) == 40
        with pytest.warns(RuntimeWarning, match="all delivered"):  # epoch 0 again
            assert len(epoch_items(ld)) == 40


RANK_SCRIPT = """
import json, sys
ld = nostall.Loader(DATA, batch_size=4, crop=24, threads=2, seed=1)  # RANK, WORLD_SIZE: env
out = {"items": [], "images": {}}
state = json.loads(sys.argv[1]) if len(sys.argv) > 1 else None
if state:
    ld.load_state_dict(state)
else:
    ld.set_epoch(1)
it = iter(ld)
for k, (x, _) in enumerate(it):
    for i, img in zip(ld.last_indices.tolist(), x):
        out["items"].append(i)
        out["images"][i] = float(img.double().sum())
    if not state and k == 2:
        break  # 3 batches, then "killed"
out["state"] = ld.state_dict()
print(json.dumps(out))
"""


def run_rank(data, rank, world, state=None):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), DATA=data, RANK=str(rank),
               WORLD_SIZE=str(world))
    prelude = "import os, nostall\nDATA = os.environ['DATA']\n"
    args = [sys.executable, "-c", prelude + RANK_SCRIPT] + ([json.dumps(state)] if state else [])
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("old,new", [(2, 1), (1, 2), (2, 3)])
def test_resume_with_another_world_size(data, old, new):
    """Processes with RANK/WORLD_SIZE (as torchrun sets them): `old` ranks
    take 3 batches each, then `new` ranks resume from rank 0's state. The
    union is one epoch, no repeats, the same bytes per item."""
    ref = {}
    with nostall.Loader(data, batch_size=4, crop=24, threads=2, seed=1, copy=True) as ld:
        ld.set_epoch(1)
        for x, _ in ld:
            for i, img in zip(ld.last_indices.tolist(), x):
                ref[i] = float(img.double().sum())
    seen, states = [], []
    for rank in range(old):
        got = run_rank(data, rank, old)
        seen += got["items"]
        states.append(got["state"])
        assert all(got["images"][str(i)] == ref[i] for i in got["items"])
    assert len({(s["epoch"], s["position"]) for s in states}) == 1  # ranks in step
    for rank in range(new):
        got = run_rank(data, rank, new, states[0])
        seen += got["items"]
        assert all(got["images"][str(i)] == ref[i] for i in got["items"])
    # Every item once; only the wrap-around padding of the rest of the epoch
    # repeats (as DistributedSampler pads when the rest does not divide).
    rest = 40 - 12 * old
    pad = -rest % new
    assert set(seen) == set(range(40)) and len(seen) == 40 + pad


# 8. memory you can predict --------------------------------------------------

def test_ring_fits_epoch_and_memory(data, monkeypatch):
    with nostall.Loader(data, batch_size=8192, crop=224, threads=1) as ld:
        info = ld.info()
        assert info["slot_items"] == 40 and info["ring_bytes"] < 3 * 40 * 224 * 224 * 12
    monkeypatch.setenv("NOSTALL_MEMLIMIT_BYTES", str(64 << 20))
    with pytest.raises(nostall.NomemError, match="batch ring needs .* available"):
        nostall.Loader(data, batch_size=16, crop=512)
    with pytest.raises(nostall.NomemError, match="cache_bytes"):
        nostall.Loader(data, batch_size=4, crop=16, cache_bytes="64M")


# 9. full batches, and skips named ------------------------------------------

def test_drop_last_full_batches_and_warning(bad_data):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with nostall.Loader(bad_data, batch_size=3, crop=16, drop_last=True, threads=2) as ld:
            counts = [len(y) for _, y in ld]
    # 9 items, one bad: still len(ld) = 3 full batches (the last one filled
    # from the shard's start, as DistributedSampler pads)
    assert counts == [3, 3, 3] and len(ld) == 3
    msgs = [str(x.message) for x in w if "bad item" in str(x.message)]
    assert len(msgs) == 1 and "x.jpg" in msgs[0] and "not a JPEG or PNG" in msgs[0]


# 10. a package: signature and ImageFolder attributes -----------------------

def test_signature_matches_option_table():
    import inspect
    params = inspect.signature(nostall.Loader.__init__).parameters
    names = [n for n, p in params.items() if p.kind == p.KEYWORD_ONLY]
    assert names[:len(nostall.OPTIONS)] == list(nostall.OPTIONS)
    assert all(params[n].default is None for n in nostall.OPTIONS)
    doc = nostall.Loader.__init__.__doc__
    assert all(name in doc for name in nostall.OPTIONS)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "python", "gen_options.py"), "--check"],
                       env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python")),
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_public_names_documented():
    import inspect
    for name in nostall.__all__:
        obj = getattr(nostall, name)
        if callable(obj) or inspect.isclass(obj):
            assert (obj.__doc__ or "").strip(), name
    for name, member in inspect.getmembers(nostall.Loader):
        if not name.startswith("_") and (callable(member) or isinstance(member, property)):
            assert (member.__doc__ or "").strip(), "Loader." + name
    assert "batch_size" in nostall.Loader.__init__.__doc__


def test_imagefolder_attributes(data):
    import torchvision
    tv = torchvision.datasets.ImageFolder(data)
    with nostall.Loader(data, **SMALL) as ld:
        assert ld.classes == tv.classes
        assert ld.class_to_idx == tv.class_to_idx
        assert ld.samples == tv.samples and ld.targets == tv.targets


# 11. pinned memory and the device hand-off ---------------------------------

def test_pin_memory_without_cuda_warns(data):
    if torch.cuda.is_available():
        pytest.skip("CUDA is available: the GPU tests cover pinning")
    with pytest.warns(RuntimeWarning, match="pin_memory"):
        with nostall.Loader(data, pin_memory=True, **SMALL) as ld:
            assert sum(len(y) for _, y in ld) == 40
    with pytest.raises(nostall.OptionError, match="CUDA"):
        nostall.Loader(data, device="cuda", **SMALL)
    with pytest.raises(nostall.OptionError, match="normalize_on_device"):
        nostall.Loader(data, normalize_on_device=True, **SMALL)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_device_hand_off(data):
    ref = reference(data, **SMALL)
    with nostall.Loader(data, device="cuda", pin_memory=True, **SMALL) as ld:
        ld.set_epoch(0)
        for (x, y), (_, rx, ry) in zip(ld, ref):
            assert x.is_cuda and torch.equal(x.cpu(), rx) and torch.equal(y.cpu(), ry)
    ref8 = reference(data, output="uint8", **SMALL)
    with nostall.Loader(data, device="cuda", output="uint8", normalize_on_device=True,
                        **SMALL) as ld:
        ld.set_epoch(0)
        for (x, _), (_, rx, _) in zip(ld, ref):
            assert x.shape == rx.shape and torch.allclose(x.cpu(), rx, atol=1e-5)
    del ref8


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_device_slots_released_after_copy(data):
    """device="cuda" with every device batch of an epoch kept (more batches
    than ring slots): a slot returns to the ring once its copy is done, not
    when the device tensor dies, and never before (no kept batch changed);
    no lease is left after the copies complete."""
    opts = dict(SMALL, batch_size=4)
    ref = reference(data, **opts)
    with nostall.Loader(data, device="cuda", pin_memory=True, **opts) as ld:
        slots = ld.info()["ring_slots"]
        ld.set_epoch(0)
        kept = [(x, y) for x, y in ld]
        torch.cuda.synchronize()
        ld._reap(wait=True)
        gc.collect()
        assert ld._core.leases == 0
    assert len(kept) == len(ref) == 10 and len(kept) > slots
    for (x, y), (_, rx, ry) in zip(kept, ref):
        assert x.is_cuda and torch.equal(x.cpu(), rx) and torch.equal(y.cpu(), ry)
