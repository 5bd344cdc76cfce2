"""Tests of the Python binding (python/nostall) against the built library.

Run: /usr/bin/python3 -m pytest tests/python -q
Small generated datasets (see conftest.py) keep the whole file to a few seconds.
"""

import collections
import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

try:
    import nostall
    from nostall import _lib
except ImportError as e:  # conftest skips everything with the reason
    pytest.skip(str(e), allow_module_level=True)

torch = pytest.importorskip("torch")

SMALL = dict(batch_size=16, crop=24, threads=2, seed=1)


def epoch_indices(loader):
    out = []
    for images, labels in loader:
        out.extend(loader.last_indices.tolist())
    return out


def test_shapes_dtypes_labels(data):
    with nostall.Loader(data, **SMALL) as ld:
        assert len(ld) == 3 and ld.info()["items"] == 40 and ld.info()["classes"] == 4
        sizes = []
        for images, labels in ld:
            n = labels.shape[0]
            sizes.append(n)
            assert images.shape == (n, 3, 24, 24) and images.dtype == torch.float32
            assert labels.dtype == torch.int64 and images.is_contiguous()
            assert 0 <= int(labels.min()) and int(labels.max()) < 4
            assert torch.isfinite(images).all() and float(images.std()) > 0.1  # normalized
            # labels agree with the dataset index
            assert labels.tolist() == [ld.item(i)[1] for i in ld.last_indices]
        assert sizes == [16, 16, 8]
        assert ld.classes == ["class_000", "class_001", "class_002", "class_003"]
    with nostall.Loader(data, output="uint8", **SMALL) as ld:
        images, labels = next(iter(ld))
        assert images.shape == (16, 24, 24, 3) and images.dtype == torch.uint8
        assert int(images.max()) > 100


def test_batch_struct_size_checked(data):
    """nostall_batch's struct_size is the mirror's on a real batch, and a
    batch of another size (a library from another header) is refused."""
    with nostall.Loader(data, **SMALL) as ld:
        b, got = _lib.Batch(), []
        while not got:
            rc = _lib.loader_next(ld._core.ld, ctypes.byref(b))
            assert rc >= 0
            if rc == _lib.OK:
                got.append(b.struct_size)
                _lib.check_batch(b)
                assert _lib.loader_release(ld._core.ld, ctypes.byref(b)) == _lib.OK
        assert got == [ctypes.sizeof(_lib.Batch)]
    b.struct_size += 8
    with pytest.raises(RuntimeError, match="different builds"):
        _lib.check_batch(b)


def test_exactly_once_per_epoch(data):
    with nostall.Loader(data, **SMALL) as ld:
        truth = collections.Counter(ld.item(i)[1] for i in range(40))
        orders = []
        for epoch in range(3):
            got, labels = [], []
            for x, y in ld:
                got.extend(ld.last_indices.tolist())
                labels.extend(y.tolist())
            assert sorted(got) == list(range(40)), "epoch %d" % epoch
            assert collections.Counter(labels) == truth
            orders.append(got)
        assert orders[0] != orders[1] != orders[2]  # reshuffled every epoch
        assert ld.stats()["items_delivered"] == 120


def test_epochs_option_and_set_epoch(data):
    with nostall.Loader(data, epochs=2, **SMALL) as ld:
        e0, e1 = epoch_indices(ld), epoch_indices(ld)
        with pytest.warns(RuntimeWarning, match="all delivered"):
            assert epoch_indices(ld) == e0  # all delivered: starts over at epoch 0
        ld.set_epoch(1)
        assert epoch_indices(ld) == e1
        ld.set_epoch(0)
        assert epoch_indices(ld) == e0
    with nostall.Loader(data, **SMALL) as ld:
        ld.set_epoch(1)
        assert epoch_indices(ld) == e1


def python_checksum(loader):
    """What nostall_checksum_batch folds, computed from the Python side."""
    state = ctypes.c_uint64(0)
    for images, labels in loader:
        for t in (images, labels):
            _lib.checksum_update(ctypes.byref(state), t.data_ptr(), t.numel() * t.element_size())
    return state.value


@pytest.mark.parametrize("output", ["float", "uint8"])
def test_same_bytes_as_cli(data, cli, output):
    opts = dict(batch_size=7, crop=20, seed=9, output=output, mode="train")
    args = [cli, "bench", data, "--json", "--quiet", "--epochs", "1"]
    for k, v in opts.items():
        args += ["--" + k.replace("_", "-"), str(v)]
    want = json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)
    with nostall.Loader(data, threads=2, **opts) as ld:
        assert "%016x" % python_checksum(ld) == want["checksum"]
    with nostall.Loader(data, threads=1, copy=True, **opts) as ld:  # the helper, on copies
        s = 0
        for images, labels in ld:
            s = nostall.checksum(images, labels, s)
        assert "%016x" % s == want["checksum"]


def batches(loader, n=None):
    out = []
    for images, labels in loader:
        out.append((loader.last_indices.tolist(), images.clone()))
        if n is not None and len(out) == n:
            break
    return out


def test_resume_mid_epoch(data):
    opts = dict(SMALL, batch_size=6)
    with nostall.Loader(data, **opts) as ld:
        batches(ld)  # epoch 0
        full = batches(ld)  # epoch 1
    with nostall.Loader(data, **opts) as ld:
        ld.set_epoch(1)
        head = batches(ld, 3)
        state = ld.state_dict()
        assert (state["epoch"], state["position"]) == (1, 18)
    with nostall.Loader(data, **opts) as ld:
        ld.load_state_dict(state)
        tail = batches(ld)
    got = head + tail
    assert [i for i, _ in got] == [i for i, _ in full]
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(got, full))
    # the same loader, interrupted by `break`: its own state continues the epoch
    # (a plain new `for` starts the next epoch, as a DataLoader does)
    with nostall.Loader(data, **opts) as ld:
        ld.set_epoch(1)
        again = batches(ld, 2)
        ld.load_state_dict(ld.state_dict())
        again += batches(ld)
        assert [i for i, _ in again] == [i for i, _ in full]


def test_errors(data, bad_data, tmp_path):
    with pytest.raises(nostall.OptionError) as e:
        nostall.Loader(data, crop=0)
    assert "crop" in str(e.value) and e.value.status == -11 and e.value.status_name == "E_OPTION"
    assert isinstance(e.value, ValueError) and isinstance(e.value, nostall.Error)
    with pytest.raises(nostall.OptionError, match="mode"):
        nostall.Loader(data, mode="sideways")
    with pytest.raises(nostall.OptionError, match="cropp"):
        nostall.Loader(data, cropp=3)
    with pytest.raises(nostall.OptionError, match="world_size|rank"):
        nostall.Loader(data, rank=2, world_size=2)
    missing = str(tmp_path / "nowhere")
    with pytest.raises(nostall.NotFoundError) as e:
        nostall.Loader(missing)
    assert missing in str(e.value) and isinstance(e.value, FileNotFoundError)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(nostall.Error, match="empty"):
        nostall.Loader(str(empty))
    # on_bad_item="fail": the text file named x.jpg stops the epoch, by name
    with nostall.Loader(bad_data, on_bad_item="fail", batch_size=4, crop=16, threads=1,
                        shuffle=False) as ld:
        with pytest.raises(nostall.BadItemError) as e:
            for _ in ld:
                pass
        assert "x.jpg" in str(e.value) and e.value.status < 0
        assert not isinstance(e.value, (nostall.StoppedError, nostall.StateError))
        # a new epoch (a new iter) meets the file again
        with pytest.raises(nostall.BadItemError, match="x.jpg"):
            for _ in ld:
                pass
    # on_bad_item="skip" (default): reported, the other 8 delivered
    with nostall.Loader(bad_data, batch_size=4, crop=16, threads=1) as ld:
        assert sum(len(y) for _, y in ld) == 8
        (skip,) = ld.skipped()
        assert skip["path"].endswith("x.jpg") and skip["status"].startswith("E_")
        assert "x.jpg" in skip["reason"] and ld.stats()["skipped_unique"] == 1


def test_other_extensions_warned(tmp_path):
    # An ImageFolder with a .webp and a README: counted and warned about,
    # never silently dropped.
    from conftest import gen
    d = gen(tmp_path / "mixed", 4, 1, 32, 24)
    for name in ("a.webp", "README.txt"):
        (tmp_path / "mixed" / "class_000" / name).write_bytes(b"x")
    with pytest.warns(RuntimeWarning, match=r"2 file\(s\) in .*mixed ignored"):
        ld = nostall.Loader(d, batch_size=2, crop=16, threads=1)
    with ld:
        assert ld.info()["files_ignored"] == 2 and ld.info()["items"] == 4
        assert sorted(os.path.basename(p) for p in ld.ignored()) == ["README.txt", "a.webp"]
    # the warning names them, and a dangling link named .jpg is a bad item, not ignored
    os.symlink(str(tmp_path / "nowhere"), str(tmp_path / "mixed" / "class_000" / "gone.jpg"))
    with pytest.warns(RuntimeWarning, match=r"README.txt|a.webp"):
        ld = nostall.Loader(d, batch_size=2, crop=16, threads=1)
    with ld:
        assert ld.info()["files_ignored"] == 2 and ld.info()["items"] == 5
        list(ld)
        (bad,) = ld.skipped()
        assert bad["path"].endswith("gone.jpg") and "missing" in bad["reason"]


def test_bad_shards_warned(tmp_path, cli):
    # A gzip'd shard beside good ones is not a stray file: it is a bad
    # shard, named with "gzip" in the warning and in bad_shards().
    import gzip
    from conftest import gen
    d = gen(tmp_path / "img", 12, 2, 32, 24)
    subprocess.run([cli, "pack", d, str(tmp_path / "s"), "--shard-bytes", "10K", "--quiet"],
                   check=True, stdout=subprocess.DEVNULL)
    tars = sorted((tmp_path / "s").glob("*.tar"))
    assert len(tars) >= 2
    (tmp_path / "s" / "lost.tar.gz").write_bytes(gzip.compress(tars[0].read_bytes()))
    with pytest.warns(RuntimeWarning, match=r"1 shard\(s\) of .* not read .*lost.tar.gz: gzip"):
        ld = nostall.Loader(str(tmp_path / "s"), batch_size=4, crop=16, threads=1)
    with ld:
        info = ld.info()
        assert info["shards_bad"] == 1 and info["files_ignored"] == 0 and info["items"] == 12
        (bad,) = ld.bad_shards()
        assert bad["path"].endswith("lost.tar.gz") and bad["reason"].startswith("gzip-compressed")


def test_zero_copy_and_copy(data):
    with nostall.Loader(data, **SMALL) as ld:
        for images, labels in ld:
            assert images.data_ptr() == ld.last_batch_address  # a view of the ring
        views = batches(ld)
    with nostall.Loader(data, copy=True, **SMALL) as ld:
        ld.set_epoch(1)
        kept = []
        for images, labels in ld:
            assert ld.last_batch_address is None  # already released
            kept.append(images)
        assert all(torch.equal(a, v) for a, (_, v) in zip(kept, views))


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_no_leak_over_epochs(data):
    with nostall.Loader(data, batch_size=8, crop=32, threads=2) as ld:
        for _ in range(3):
            for images, labels in ld:
                float(images.sum())
        before = rss_bytes()
        for _ in range(30):
            for images, labels in ld:
                float(images.sum())
        grown = rss_bytes() - before
        assert ld.state_dict()["epoch"] == 33
    assert grown < 4 << 20, "RSS grew by %d bytes over 30 epochs" % grown
    before = rss_bytes()
    for _ in range(20):  # create/close: every loader freed exactly once
        ld = nostall.Loader(data, batch_size=8, crop=32, threads=2)
        next(iter(ld))
        ld.close()
        ld.close()
        del ld
    grown = rss_bytes() - before
    assert grown < 8 << 20, "RSS grew by %d bytes over 20 loaders" % grown


def test_rank_world_size_from_env(data, monkeypatch):
    shards = []
    for rank in (0, 1):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        with nostall.Loader(data, **SMALL) as ld:
            assert ld.config["rank"] == str(rank) and ld.config["world_size"] == "2"
            assert ld.info()["items_per_epoch"] == 20
            shards.append(set(epoch_indices(ld)))
    assert shards[0].isdisjoint(shards[1]) and shards[0] | shards[1] == set(range(40))
    with nostall.Loader(data, rank=0, world_size=1, **SMALL) as ld:  # keywords win
        assert ld.info()["items_per_epoch"] == 40


def test_numpy_without_torch(data, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now fails
    with nostall.Loader(data, output="uint8", **SMALL) as ld:
        for images, labels in ld:
            assert isinstance(images, np.ndarray) and isinstance(labels, np.ndarray)
            assert images.dtype == np.uint8 and images.shape[1:] == (24, 24, 3)
            assert labels.dtype == np.int64
            assert images.ctypes.data == ld.last_batch_address


def test_eval_matches_torchvision(data):
    """mode="eval" is torchvision's Resize + CenterCrop (up to resampling
    differences), and float output is uint8 output normalized by mean/std."""
    tv = pytest.importorskip("torchvision")
    T = tv.transforms
    crop, mean, std = 24, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    ds = tv.datasets.ImageFolder(data, T.Compose([T.Resize(crop * 8 // 7), T.CenterCrop(crop),
                                                  T.PILToTensor()]))
    opts = dict(mode="eval", shuffle=False, crop=crop, batch_size=40, copy=True)
    with nostall.Loader(data, output="uint8", **opts) as ld:
        u8, labels = next(iter(ld))
    assert labels.tolist() == [y for _, y in ds.samples]
    for i in range(40):
        ref = ds[i][0].permute(1, 2, 0).float()
        assert float((u8[i].float() - ref).abs().mean()) < 6  # of 255
    for mode in ("eval", "train"):  # train: same seed, same crops and flips
        opts = dict(mode=mode, seed=5, crop=crop, batch_size=40, copy=True, mean=mean, std=std)
        with nostall.Loader(data, output="uint8", **opts) as ld:
            u8, _ = next(iter(ld))
        with nostall.Loader(data, output="float", **opts) as ld:
            f32, _ = next(iter(ld))
        want = (u8.permute(0, 3, 1, 2).float() / 255 - torch.tensor(mean).view(3, 1, 1)) \
            / torch.tensor(std).view(3, 1, 1)
        assert float((f32 - want).abs().max()) < 1e-5, mode


def test_fork_child_does_not_free(data):
    ld = nostall.Loader(data, **SMALL)
    next(iter(ld))
    pid = os.fork()
    if pid == 0:  # child: unusable, and closing it must neither hang nor free
        code = 1
        try:
            try:
                next(iter(ld))
            except nostall.ForkError:
                code = 0
            ld.close()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert sum(len(y) for _, y in ld) == 40  # the parent's loader carries on
    ld.close()


def test_list_source(data):
    with nostall.Loader(data, **SMALL) as ld:
        pairs = [ld.item(i) for i in range(40)]
    with nostall.Loader(pairs[:10], shuffle=False, batch_size=4, crop=16) as ld:
        assert ld.info()["items"] == 10 and ld.class_name(0) is None
        assert epoch_indices(ld) == list(range(10))


def test_list_labels_bounded(data, tmp_path):
    """A list's labels are below 2^31; its classes (largest label + 1, no
    names) come back at once as a sequence made on demand (a list of 2^62
    strings used to be built: Loader.classes never returned)."""
    with nostall.Loader(data, **SMALL) as ld:
        paths = [ld.item(i)[0] for i in range(3)]
    small = tmp_path / "small.txt"
    small.write_text("%s\t0\n%s\t2\n%s\t1\n" % tuple(paths))
    with nostall.Loader(str(small), **SMALL) as ld:
        assert ld.classes == ["0", "1", "2"] and list(ld.classes) == ["0", "1", "2"]
        assert ld.class_to_idx == {"0": 0, "1": 1, "2": 2}
    big = tmp_path / "big.txt"
    big.write_text("%s\t3\n%s\t2147483647\n" % tuple(paths[:2]))
    with nostall.Loader(str(big), **SMALL) as ld:
        c = ld.classes
        assert len(c) == 2 ** 31 and c[3] == "3" and c[-1] == "2147483647"
        assert "2147483647" in c and "2147483648" not in c and "03" not in c
        assert c.index("12345") == 12345
        m = ld.class_to_idx
        assert len(m) == 2 ** 31 and m["2147483647"] == 2147483647 and "x" not in m
        labels = sorted(int(x) for b in ld for x in b[1])
        assert labels == [3, 2147483647]
    over = tmp_path / "over.txt"
    over.write_text("%s\t3\n%s\t2147483648\n" % tuple(paths[:2]))
    with pytest.raises(nostall.Error, match=r"over.txt:2: label '2147483648' is out of range"):
        nostall.Loader(str(over), **SMALL)


def test_stop_and_close_mid_epoch(data):
    ld = nostall.Loader(data, batch_size=2, crop=16, threads=1, batches_ahead=1)
    seen = 0
    with pytest.raises(nostall.StoppedError):
        for images, labels in ld:
            seen += 1
            if seen == 3:
                threading.Thread(target=ld.stop).start()
                time.sleep(0.2)
    ld.close()
    with pytest.raises(nostall.StateError, match="closed"):
        ld.state_dict()
    # close() inside the loop: the iteration just ends, nothing dangles
    ld = nostall.Loader(data, batch_size=2, crop=16, threads=2)
    n = 0
    for images, labels in ld:
        n += 1
        if n == 2:
            ld.close()
    assert n == 2
    ld.close()
    # abandoning iterators mid-epoch leaks no ring slot (2 slots here)
    with nostall.Loader(data, batch_size=2, crop=16, threads=2, batches_ahead=1) as ld:
        for _ in range(5):
            it = iter(ld)
            next(it)
            next(it)
        st = ld.state_dict()
        assert (st["epoch"], st["position"]) == (4, 4)
        del it
        assert sum(len(y) for _, y in ld) == 40


def test_keyboard_interrupt_while_waiting(tmp_path):
    """SIGINT while the consumer waits for a batch that takes minutes to make
    (64 noisy 3 MB PNGs read at an emulated 1 MB/s by one worker):
    KeyboardInterrupt must come at once, not when the batch is ready, and the
    loader must close without hanging (the worker is asleep in the storage
    emulation's wait, which close() must cut short).

    Python turns SIGINT into KeyboardInterrupt only if SIGINT was not ignored
    when the interpreter started; a shell starts background commands (`make
    test &`, nohup, a CI script's `cmd &`) with SIGINT ignored. The test
    installs Python's own handler, as a terminal session has it, so that it
    tests the loader and not how the suite was launched."""
    np = pytest.importorskip("numpy")
    from PIL import Image
    rng = np.random.default_rng(0)
    png = tmp_path / "slow.png"
    Image.fromarray(rng.integers(0, 256, (1000, 1000, 3), dtype=np.uint8)).save(
        png, compress_level=1)
    listing = tmp_path / "list.tsv"
    listing.write_text("%s\t0\n" % png * 64)
    ld = nostall.Loader(str(listing), batch_size=64, shuffle=False, threads=1, crop=16,
                        batches_ahead=1, output="uint8", storage_mbps=1)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        sent = []
        timer = threading.Timer(0.3, lambda: (sent.append(time.monotonic()),
                                              os.kill(os.getpid(), signal.SIGINT)))
        got = []
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            for images, labels in ld:
                got.append(labels)
        caught = time.monotonic()
        timer.join()
        assert sent, "the timer did not fire"
        # the batch needs 64 x 3 s of emulated reads: a loop that got it was not
        # interrupted while waiting
        assert not got, "the batch came before KeyboardInterrupt"
        assert caught - sent[0] < 30.0, "KeyboardInterrupt took %.2fs" % (caught - sent[0])
        st = ld.state_dict()
        assert (st["epoch"], st["position"]) == (0, 0)
    finally:
        signal.signal(signal.SIGINT, previous)
        t0 = time.monotonic()
        ld.close()  # stops and joins the worker mid-batch, asleep in a read
        assert time.monotonic() - t0 < 30.0


def test_cache_and_storage_options(data):
    """The storage-tier options are keywords like any other, and their
    counters appear in stats(): from the second epoch on, every cached item
    is a hit and only the rest is read from storage."""
    # (the third epoch is the exact one: at the first boundary the workers
    # may fetch an item for epoch 1 before epoch 0's fetch of it, so which
    # of the two reads storage, and rarely both, is a race)
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(data) for f in fs)
    with nostall.Loader(data, batch_size=4, crop=16, threads=2, cache_bytes="64M",
                        storage_mbps=1000, seed=1) as ld:
        n = sum(len(y) for _, y in ld)
        assert sum(len(y) for _, y in ld) == n
        two = ld.stats()
        assert two["cache_hits"] + two["cache_misses"] == 2 * n
        assert n <= two["cache_misses"] <= 2 * n
        assert size <= two["storage_bytes_read"] <= 2 * size
        assert two["cache_bytes"] == size
        assert sum(len(y) for _, y in ld) == n
        three = ld.stats()
        assert three["cache_hits"] - two["cache_hits"] == n
        assert three["storage_bytes_read"] == two["storage_bytes_read"]
    with pytest.raises(nostall.OptionError, match="cache_bytes"):
        nostall.Loader(data, cache="none", cache_bytes="1M")


@pytest.mark.parametrize("point", ["fetch", "decode", "augment", "batch"])
def test_echo_fixed(data, point):
    """Fixed echoing from Python: an epoch delivers every item e times and the
    counters say which deliveries were fresh."""
    with nostall.Loader(data, echo_factor=2, echo_point=point, **SMALL) as ld:
        got = epoch_indices(ld)
        assert collections.Counter(got) == {i: 2 for i in range(40)}
        st = ld.stats()
        assert st["fresh_items"] == 40 and st["echoed_items"] == 40
        assert st["echo_uses_2"] == 40
        # 80 deliveries in batches of 16; batch echoing repeats 16, 16, 8
        assert len(ld) == (6 if point == "batch" else 5)


def test_echo_adaptive(data):
    """Adaptive echoing repeats pooled items while no fresh batch is ready
    (slow emulated storage, a consumer doing nothing) and still delivers
    every item fresh once per epoch; echo batches are released like others."""
    with nostall.Loader(data, echo="adaptive", echo_max=3, echo_buffer=32, io_depth=1,
                        storage_latency_ms=10, batch_size=8, crop=16, threads=1) as ld:
        for epoch in range(2):
            seen = collections.Counter(epoch_indices(ld))
            assert set(seen) <= set(range(40)) and len(seen) == 40
        st = ld.stats()
        assert st["fresh_items"] == 80 and st["echoed_items"] > 0
        assert st["items_delivered"] == st["fresh_items"] + st["echoed_items"]


def test_echo_warns_above_R(data):
    """A fixed factor far above R (a slow training loop, a fast pipeline) is
    reported once, with the estimate."""
    with nostall.Loader(data, echo_factor=8, echo_point="augment", **SMALL) as ld:
        with pytest.warns(RuntimeWarning, match="exceeds the estimated R"):
            for _ in ld:
                time.sleep(0.02)
        summary = ld.echo_summary()
        assert summary["achieved_factor"] == 8 and summary["estimated_R"] < 8


def test_coordinate_keyword(data):
    """coordinate= joins a group (here alone): the batches are those of a
    loader without it, and the shared segment is gone after close()."""
    name = "py%d" % os.getpid()
    with nostall.Loader(data, **SMALL) as ld:
        ref = python_checksum(ld)
    ld = nostall.Loader(data, coordinate=name, **SMALL)
    try:
        assert python_checksum(ld) == ref
        st = ld.stats()
        # alone, this job prepared everything (the next epoch is begun ahead)
        assert st["coord_members"] == 1 and st["coord_items_produced"] >= 40
        assert st["coord_group_items_produced"] == st["coord_items_produced"]
        assert any(f.endswith("-" + name) for f in os.listdir("/dev/shm"))
        with pytest.raises(nostall.StateError, match="set_state"):
            ld.load_state_dict({"epoch": 0, "position": 0})
    finally:
        ld.close()
    assert not any(f.endswith("-" + name) for f in os.listdir("/dev/shm"))
    with pytest.raises(nostall.OptionError, match="echo"):
        nostall.Loader(data, coordinate=name, echo_factor=2)


def test_break_and_continue_with_fractional_echo(data):
    """Epoch lengths vary with a fractional echo factor: breaking out of an
    epoch (also past the length of epoch 0) and resuming from the loader's
    state continues that epoch, and every epoch holds each item once or
    twice, nothing lost or taken from the next epoch."""
    opts = dict(echo_factor=1.5, echo_point="fetch", **SMALL)
    with nostall.Loader(data, **opts) as ref:
        batches = [sum(1 for _ in ref) for _ in range(8)]  # batches of each epoch
    with nostall.Loader(data, **opts) as ld:
        n0 = ld.info()["batches_per_epoch"]  # len() raises: the count varies
        assert n0 == batches[0]
        for epoch in range(8):
            # break mid-epoch: past epoch 0's length when this epoch is longer
            stop_at = n0 - 1 if batches[epoch] > n0 else 1
            seen = collections.Counter()
            for i, (x, y) in enumerate(ld):
                seen.update(ld.last_indices.tolist())
                if i == stop_at:
                    break
            ld.load_state_dict(ld.state_dict())
            for x, y in ld:  # the rest of the same epoch
                seen.update(ld.last_indices.tolist())
            assert set(seen) == set(range(40)), "epoch %d" % epoch
            assert set(seen.values()) <= {1, 2}, "epoch %d" % epoch
        assert ld.state_dict()["epoch"] == 8
    assert any(b > batches[0] for b in batches[1:])  # the case above occurred
