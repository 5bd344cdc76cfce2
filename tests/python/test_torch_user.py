"""A PyTorch user's first steps: the default thread count from the CPUs the
process may use, a finished loader iterated again, the default seed from
torch, set_epoch with a loaded state or a coordinated group, `python -m
nostall`, the docstring, a 0-255 mean, and a single image given as the
source."""

import os

import pytest

import nostall

SMALL = dict(batch_size=8, crop=16)


def test_threads_from_cpu_budget(data, monkeypatch):
    """threads=0 (the default) is the affinity mask's CPUs (capped by a cgroup
    CPU quota), divided by LOCAL_WORLD_SIZE; an explicit count wins."""
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    mask = os.sched_getaffinity(0)
    with nostall.Loader(data, **SMALL) as ld:
        n = ld.threads
        assert 1 <= n <= len(mask)
        assert ld.stats()["threads"] == n and ld.stats()["cpu_budget"] == n
    # as under `taskset -c <one CPU>`: this thread's mask, which the loader reads
    os.sched_setaffinity(0, {min(mask)})
    try:
        with nostall.Loader(data, **SMALL) as ld:
            assert ld.threads == 1
        with nostall.Loader(data, threads=3, **SMALL) as ld:
            assert ld.threads == 3 and ld.stats()["cpu_budget"] == 1
    finally:
        os.sched_setaffinity(0, mask)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with nostall.Loader(data, **SMALL) as ld:
        assert ld.threads == max(1, n // 2)
        if len(mask) == 2 and n == 2:
            assert ld.threads == 1


def epoch_labels(loader):
    return [int(v) for _, labels in loader for v in labels]


def test_finished_loader_iterates_again(data):
    """epochs=1 (a validation loader): every iter() is the same full pass,
    not an empty one after the first; with epochs > 1 the next iter() after
    the last starts over at epoch 0, with a warning."""
    with nostall.Loader(data, epochs=1, mode="eval", shuffle=False, seed=2, **SMALL) as ld:
        first = epoch_labels(ld)
        assert len(first) == 40
        assert epoch_labels(ld) == first
        assert epoch_labels(ld) == first
        it = iter(ld)
        next(it)  # a peek, then a whole pass again
        assert epoch_labels(ld) == first
    with nostall.Loader(data, epochs=2, seed=2, **SMALL) as ld:
        e0 = [(im.sum().item(), lb.tolist()) for im, lb in ld]
        epoch_labels(ld)
        with pytest.warns(RuntimeWarning, match="epochs=2 were all delivered"):
            again = [(im.sum().item(), lb.tolist()) for im, lb in ld]
        assert again == e0


def torch_or_skip():
    return pytest.importorskip("torch")


def test_default_seed_follows_torch(data):
    """No seed=: torch.manual_seed decides the order (as a DataLoader's
    shuffle); an explicit seed= wins."""
    torch = torch_or_skip()
    saved = torch.get_rng_state()
    try:
        orders = {}
        for s in (11, 12, 11):
            torch.manual_seed(s)
            with nostall.Loader(data, epochs=1, **SMALL) as ld:
                assert ld.config["seed"] == str(s)
                orders.setdefault(s, []).append(epoch_labels(ld))
        assert orders[11][0] == orders[11][1]
        assert orders[11][0] != orders[12][0]
        torch.manual_seed(11)
        with nostall.Loader(data, epochs=1, seed=5, **SMALL) as ld:
            assert ld.config["seed"] == "5"
        # a coordinated group keeps the library's default: its jobs must agree
        with nostall.Loader(data, epochs=1, coordinate="py-seed-%d" % os.getpid(),
                            **SMALL) as ld:
            assert ld.config["seed"] == "0"
    finally:
        torch.set_rng_state(saved)


def test_default_seed_with_ranks(data, monkeypatch):
    """Several ranks and no process group: the ranks cannot agree on torch's
    seed, so the library's 0 stays (warned); with a process group, rank 0's
    torch seed (here a group of one)."""
    torch = torch_or_skip()
    import nostall.loader as nl
    monkeypatch.setattr(nl, "_seed_warned", False)
    torch.manual_seed(21)
    with pytest.warns(RuntimeWarning, match="cannot agree on torch's seed"):
        with nostall.Loader(data, rank=0, world_size=2, **SMALL) as ld:
            assert ld.config["seed"] == "0"
    dist = torch.distributed
    if not dist.is_available():
        pytest.skip("torch.distributed not available")
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=0,
                            world_size=1)
    try:
        with nostall.Loader(data, **SMALL) as ld:
            assert ld.config["seed"] == "21"
    finally:
        dist.destroy_process_group()


def test_set_epoch_after_load_state_warns(data):
    """A loaded state is for its own epoch: set_epoch naming another drops it
    with a warning; naming the same epoch keeps it (the README's loop)."""
    with nostall.Loader(data, seed=3, **SMALL) as ld:
        it = iter(ld)
        next(it)
        state = ld.state_dict()
        rest = epoch_labels(it)
    with nostall.Loader(data, seed=3, **SMALL) as ld:
        ld.load_state_dict(state)
        ld.set_epoch(state["epoch"])  # the same epoch: no warning, resumes
        assert epoch_labels(ld) == rest
    with nostall.Loader(data, seed=3, **SMALL) as ld:
        ld.load_state_dict(state)
        with pytest.warns(RuntimeWarning, match="drops the state loaded"):
            ld.set_epoch(1)
        assert ld.state_dict()["epoch"] != state["epoch"] or ld.state_dict()["position"] == 0
        assert len(epoch_labels(ld)) == 40  # epoch 1 from its start


def test_set_epoch_in_coordinated_group(data):
    """The README loop with coordinate=: set_epoch(epoch) names the group's
    epoch and is accepted; another epoch raises StateError naming it."""
    with nostall.Loader(data, coordinate="py-ep-%d" % os.getpid(), seed=1, **SMALL) as ld:
        for epoch in range(2):
            ld.set_epoch(epoch)
            assert len(epoch_labels(ld)) == 40
        with pytest.raises(nostall.StateError, match="in epoch 2"):
            ld.set_epoch(0)


def test_python_m_nostall(cli, tmp_path, monkeypatch, capsys):
    """`python -m nostall` runs the CLI (the pip console script is the same
    main); pyproject declares the `nostall` command."""
    import subprocess
    import sys
    import tomllib
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=os.path.join(root, "python"), NOSTALL_CLI=cli)
    out = subprocess.run([sys.executable, "-m", "nostall", "--version"], env=env,
                         capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("nostall ")
    out = subprocess.run([sys.executable, "-m", "nostall", "gen", str(tmp_path / "d"), "--images",
                          "4", "--classes", "2", "--quiet"], env=env, capture_output=True)
    assert out.returncode == 0 and len(os.listdir(tmp_path / "d" / "class_000")) == 2
    out = subprocess.run([sys.executable, "-m", "nostall", "bench"], env=env,
                         capture_output=True, text=True)
    assert out.returncode == 2 and "nostall bench: missing DATA" in out.stderr
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        assert tomllib.load(f)["project"]["scripts"]["nostall"] == "nostall.__main__:main"
    # no program anywhere: a message naming the places tried, status 127
    import nostall.__main__ as m
    monkeypatch.setattr(m, "_HERE", str(tmp_path / "pkg" / "nostall"))
    monkeypatch.setenv("NOSTALL_CLI", str(tmp_path / "missing"))
    assert m.main(["--version"]) == 127
    err = capsys.readouterr().err
    assert str(tmp_path / "missing") in err and str(tmp_path / "pkg" / "nostall" / "_bin") in err


def test_docstrings():
    doc = nostall.Loader.__doc__ + nostall.__doc__
    for word in ("transform=", "transform_fields", "sources=", "dict", "safe to keep",
                 "keeping batches is safe", "torch's initial"):
        assert word in doc, word
    assert "do not keep" not in doc


def test_mean_on_255_scale_warns(data):
    with pytest.warns(RuntimeWarning, match="0-255 scale"):
        nostall.Loader(data, seed=1, mean=(123.7, 116.3, 103.5), **SMALL).close()
    with pytest.warns(RuntimeWarning, match=r"std=\(58.4, 57.1, 57.4\)"):
        nostall.Loader(data, seed=1, std=(58.4, 57.1, 57.4), **SMALL).close()
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nostall.Loader(data, seed=1, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225),
                       **SMALL).close()
        nostall.Loader(data, seed=1, mean=1, **SMALL).close()  # 1 itself is on the 0-1 scale


def test_single_image_as_source(data, tmp_path):
    """A .jpg given as the source: a clear message naming it, not its bytes."""
    img = os.path.join(data, "class_000", sorted(os.listdir(os.path.join(data, "class_000")))[0])
    with pytest.raises(nostall.DatasetError) as e:
        nostall.Loader(img, **SMALL)
    msg = str(e.value)
    assert img in msg and "JPEG image, not a list file" in msg and "folder" in msg
    assert "\xff" not in msg and "\\xff" not in msg
    binary = tmp_path / "list.txt"
    binary.write_bytes(b"a.jpg\t0\nb\x00\x01c\t1\n")
    with pytest.raises(nostall.DatasetError, match=r"list.txt:2: binary bytes.*a list file"):
        nostall.Loader(str(binary), **SMALL)
