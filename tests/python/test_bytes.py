"""task=bytes through the Python face: "data" is a list of uint8 tensors, one
per item, each exactly the file's bytes (read back here with open()),
"length" their sizes, "label" the class folder; the same for 1, 2 and 4
threads; lists with float labels, several labels or none; exact resume;
echoing at the fetch point repeats the bytes; bad items are skipped with a
warning naming them.
"""

import os
import random

import numpy as np
import pytest

import nostall

NAMES = ["README", "a.txt", "x.jpg", "y.tar.gz", os.path.join("nested", "z"), "noext"]


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("bytes")
    r = random.Random(9)
    files = {}
    for c in ("a_class", "b_class"):
        os.makedirs(root / c / "nested")
        for i in range(10):
            p = str(root / c / ("%s%d" % (NAMES[i % 6], i)))
            data = bytes(r.randrange(256) for _ in range(r.randrange(1, 2000)))
            with open(p, "wb") as f:
                f.write(data)
            files[p] = (data, 0 if c == "a_class" else 1)
    return str(root), files


def items(ld):
    """Every delivered item of one epoch: (path, bytes, length, label)."""
    out, samples = [], ld.samples
    for b in ld:
        assert isinstance(b["data"], list) and len(b["data"]) == len(ld.last_indices)
        for k, i in enumerate(ld.last_indices.tolist()):
            t = b["data"][k]
            a = np.asarray(t)
            assert a.dtype == np.uint8 and a.ndim == 1
            label = b["label"][k].item() if "label" in b else None
            out.append((samples[i][0], a.tobytes(), int(b["length"][k][0]), label))
    return out


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_bytes_as_on_disk(tree, threads):
    root, files = tree
    with nostall.Loader(root, task="bytes", batch_size=6, threads=threads, seed=2) as ld:
        got = items(ld)
    assert sorted(p for p, *_ in got) == sorted(files)
    for p, data, length, label in got:
        assert data == files[p][0] and length == len(data) and label == files[p][1]


def test_lists_of_labels(tree, tmp_path):
    root, files = tree
    paths = sorted(files)[:5]
    for kind, labels, check in [
        ("float", ["0.5", "-2", "1e3", "3.25", "0"], lambda lab, i: lab == pytest.approx(float(["0.5", "-2", "1e3", "3.25", "0"][i]))),
        ("none", None, lambda lab, i: lab is None),
    ]:
        lst = tmp_path / ("%s.txt" % kind)
        with open(lst, "w") as f:
            for i, p in enumerate(paths):
                f.write(p + ("\t" + labels[i] if labels else "") + "\n")
        with nostall.Loader(str(lst), task="bytes", batch_size=5, shuffle=False) as ld:
            got = items(ld)
        assert [p for p, *_ in got] == paths
        for i, (p, data, length, label) in enumerate(got):
            assert data == files[p][0] and check(label, i)
    lst = tmp_path / "multi.txt"
    with open(lst, "w") as f:
        for i, p in enumerate(paths):
            f.write("%s\t%d,%d\n" % (p, i, (i + 2) % 5))
    with nostall.Loader(str(lst), task="bytes", batch_size=5, shuffle=False) as ld:
        b = next(iter(ld))
    hot = b["label"].numpy()
    assert hot.shape == (5, 5)
    for i in range(5):
        assert sorted(np.flatnonzero(hot[i]).tolist()) == sorted({i, (i + 2) % 5})


def test_resume(tree):
    root, _ = tree
    opts = dict(task="bytes", batch_size=3, threads=2, seed=5, epochs=1)
    with nostall.Loader(root, **opts) as ld:
        full = items(ld)
    with nostall.Loader(root, **opts) as ld:
        it = iter(ld)
        for _ in range(2):
            next(it)
        state = ld.state_dict()
    with nostall.Loader(root, **opts) as ld:
        ld.load_state_dict(state)
        rest = items(ld)
    assert rest == full[6:]


@pytest.mark.filterwarnings("ignore:.*echo_factor 2 exceeds")
def test_echo_fetch(tree):
    root, files = tree
    with nostall.Loader(root, task="bytes", batch_size=4, echo_factor=2, echo_point="fetch") as ld:
        got = items(ld)
    assert len(got) == 2 * len(files)
    for p, data, _, _ in got:
        assert data == files[p][0]


def test_bad_items_warn(tmp_path):
    d = tmp_path / "bad" / "c"
    os.makedirs(d)
    (d / "ok").write_bytes(b"fine")
    (d / "empty").write_bytes(b"")
    with nostall.Loader(str(tmp_path / "bad"), task="bytes", batch_size=2) as ld:
        with pytest.warns(RuntimeWarning, match="empty"):
            got = items(ld)
        assert [g[1] for g in got] == [b"fine"]
        assert [os.path.basename(s["path"]) for s in ld.skipped()] == ["empty"]
