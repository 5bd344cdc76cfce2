"""transform=: a Python callable run per item by nostall's worker threads
(python/nostall/_transform.py over nostall_op.h).

The same bytes for 1, 2 and 4 threads; the callable's input is the decoded
image (checked against PIL) or the fetched bytes (against the file); its
`random` is the documented per-item stream (recomputed here), untouched by
the field inference; fields declared, inferred, ragged, as a tuple or a
dict; a raising callable is a bad item with the exception's type, text and
traceback (skip) or a TransformError caused by it (fail); resume, echo at
every point, the MinIO cache; coordinate= is refused.
"""

import os

import numpy as np
import pytest

try:
    import nostall
    from nostall.loader import TransformError
except ImportError as e:  # conftest skips everything with the reason
    pytest.skip(str(e), allow_module_level=True)

torch = pytest.importorskip("torch")

M = (1 << 64) - 1


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M
    return z ^ (z >> 31)


def item_seed(seed, epoch, index, copy=0):
    """The item's stream: nst_hash4(seed, epoch, index, AUGMENT + (copy << 8))."""
    h = mix64((seed + 0x9e3779b97f4a7c15) & M)
    h = mix64(h ^ ((epoch + 0x632be59bd9b4e019) & M))
    h = mix64(h ^ ((index + 0x85157af5) & M))
    return mix64(h ^ ((2 + (copy << 8) + 0x3c6ef372fe94f82b) & M))


def first_draw(seed):
    return int(np.random.Generator(np.random.Philox(key=seed)).integers(1 << 62))


def probe_draw(seed):
    """probe()'s "draw": after small()'s uniform, from the same stream."""
    g = np.random.Generator(np.random.Philox(key=seed))
    g.uniform(0.5, 1.0)
    return int(g.integers(1 << 62))


def small(x, random):
    """8x8 nearest samples of the image, scaled by a random factor."""
    h, w, _ = x.shape
    ys = torch.arange(8) * h // 8
    xs = torch.arange(8) * w // 8
    f = float(random.uniform(0.5, 1.0))
    return (x[ys][:, xs].float() * f).to(torch.uint8)


def probe(x, random):
    h, w, c = x.shape
    return {"image": small(x, random), "size": np.array([h, w, c], np.int64),
            "draw": np.array([random.integers(1 << 62)], np.int64),
            "mean": np.float64(x.double().mean())}


def epoch_bytes(data, **kw):
    """[(indices, {field: array})] of every batch of every epoch, copied."""
    out = []
    opts = dict(batch_size=8, epochs=1, seed=4, copy=True)
    opts.update(kw)
    with nostall.Loader(data, **opts) as ld:
        for _ in range(opts["epochs"]):  # one iter() per epoch
            for b in ld:
                if isinstance(b, tuple):
                    b = {"x%d" % i: v for i, v in enumerate(b)}
                out.append((ld.last_indices.tolist(),
                            {k: (v.clone() if hasattr(v, "clone") else v) for k, v in b.items()}))
    return out


def same(a, b):
    if len(a) != len(b):
        return False
    for (ia, fa), (ib, fb) in zip(a, b):
        if ia != ib or fa.keys() != fb.keys():
            return False
        for k in fa:
            if isinstance(fa[k], list):
                if any(not torch.equal(p, q) for p, q in zip(fa[k], fb[k])):
                    return False
            elif not torch.equal(fa[k], fb[k]):
                return False
    return True


def test_same_bytes_any_threads(data):
    runs = [epoch_bytes(data, threads=t, transform=small) for t in (1, 2, 4)]
    assert len(runs[0]) == 5 and runs[0][0][1]["x0"].shape == (8, 8, 8, 3)
    assert same(runs[0], runs[1]) and same(runs[0], runs[2])
    # and the labels come along: (images, labels) as without a transform
    assert runs[0][0][1]["x1"].dtype == torch.int64


def test_input_and_stream(data):
    from PIL import Image
    seen = 0
    with nostall.Loader(data, batch_size=8, epochs=2, seed=4, threads=2, transform=probe) as ld:
        for epoch in range(2):
            for b in ld:
                assert set(b) == {"image", "size", "draw", "mean", "label"}
                assert b["size"].shape == (len(b["draw"]), 3) and b["mean"].dtype == torch.float32
                for k, index in enumerate(ld.last_indices.tolist()):
                    path, label = ld.item(index)
                    with Image.open(path) as im:
                        ref = np.asarray(im.convert("RGB"))
                    assert tuple(b["size"][k].tolist()) == ref.shape
                    assert abs(float(b["mean"][k]) - ref.mean()) < 1.0  # the same decoder family
                    assert int(b["draw"][k, 0]) == probe_draw(item_seed(4, epoch, index))
                    assert int(b["label"][k]) == label
                    seen += 1
    assert seen == 80


def test_inference_call_is_no_items(data):
    calls = []

    def fn(x, random):
        calls.append(int(random.integers(1 << 62)))
        return np.zeros((2,), np.float32)

    with nostall.Loader(data, batch_size=40, epochs=1, seed=4, threads=1, shuffle=False,
                        transform=fn) as ld:
        next(iter(ld))
    # create's call first, with a stream that is no item's (item 0 gets its own)
    assert len(calls) == 41
    items = {first_draw(item_seed(4, 0, i)) for i in range(40)}
    assert calls[0] not in items and set(calls[1:]) == items


def test_declared_ragged_and_tuple(data):
    def fn(x, random):
        n = int(random.integers(1, 6))
        return x[0, :n].reshape(n, 3), np.array([n], np.int32)

    fields = {"row": ("uint8", (5, 3), "ragged"), "n": (np.int32, (1,))}
    with nostall.Loader(data, batch_size=8, epochs=1, threads=2, transform=fn,
                        transform_fields=fields) as ld:
        b = next(iter(ld))
    assert set(b) == {"row", "row_shape", "n", "label"}
    assert isinstance(b["row"], list) and len(b["row"]) == 8
    for k in range(8):
        assert b["row"][k].shape == (int(b["n"][k, 0]), 3)
        assert b["row_shape"][k].tolist() == [int(b["n"][k, 0]), 3]

    # inferred from a tuple: yielded as a tuple, the label last
    with nostall.Loader(data, batch_size=8, epochs=1, threads=2,
                        transform=lambda x: (x[:4, :4], x[0, 0].long())) as ld:
        a, c, y = next(iter(ld))
    assert a.shape == (8, 4, 4, 3) and c.shape == (8, 3) and c.dtype == torch.int64
    assert y.shape == (8,)


def test_bad_items(data):
    def fn(x, random):
        if x.shape[1] % 3 == 0:
            raise ValueError("width %d is a multiple of 3" % x.shape[1])
        return x[:4, :4]

    widths = {}
    from PIL import Image
    with nostall.Loader(data, batch_size=8, epochs=1, threads=2, transform=fn,
                        max_bad_fraction=1) as ld:
        for i in range(40):
            with Image.open(ld.item(i)[0]) as im:
                widths[i] = im.size[0]
        want = sum(1 for w in widths.values() if w % 3 == 0)
        assert 0 < want < 40
        with pytest.warns(RuntimeWarning, match="bad item"):
            got = sum(len(y) for _, y in ld)
        skipped = ld.skipped()
    assert got == 40 - want and len(skipped) == want
    r = skipped[0]["reason"]
    assert r.startswith("op 'transform:") and skipped[0]["path"] in r
    assert "ValueError: width" in r and "Traceback" in r and "raise ValueError" in r

    with nostall.Loader(data, batch_size=8, epochs=1, threads=2, on_bad_item="fail",
                        transform=fn) as ld:
        with pytest.raises(TransformError) as e:
            for _ in ld:
                pass
    assert isinstance(e.value, nostall.BadItemError)
    assert "ValueError: width" in str(e.value) and "Traceback" in e.value.message
    assert isinstance(e.value.__cause__, ValueError)

    # a wrong shape is a bad item too, saying what was declared
    def odd(x):
        return x[:, :4]  # heights differ between items (size jitter)

    with nostall.Loader(data, batch_size=40, epochs=1, threads=2, transform=odd,
                        max_bad_fraction=1) as ld:
        with pytest.warns(RuntimeWarning):
            list(ld)
        reasons = [s["reason"] for s in ld.skipped()]
    assert reasons and all("declared" in r and "inferred from the first item" in r
                           for r in reasons)


def test_create_errors(data, tmp_path):
    def broken(x):
        raise KeyError("no such thing")

    with pytest.raises(nostall.Error) as e:
        nostall.Loader(data, transform=broken)
    assert "create failed" in str(e.value) and "KeyError" in str(e.value)
    assert isinstance(e.value.__cause__, KeyError)
    with pytest.raises(nostall.OptionError, match="Python callable cannot run in another"):
        nostall.Loader(data, transform=small, coordinate="tr%d" % os.getpid())
    with pytest.raises(nostall.OptionError, match="transform_fields without transform"):
        nostall.Loader(data, transform_fields={"a": ("uint8", (1,))})
    with pytest.raises(TypeError, match="callable"):
        nostall.Loader(data, transform=42)
    with pytest.raises(TypeError, match="dtype"):
        nostall.Loader(data, transform=small, transform_fields={"a": ("complex64", (1,))})
    with pytest.raises(nostall.Error, match="not 'label'"):
        nostall.Loader(data, transform=small, transform_fields={"label": ("uint8", (1,))})


@pytest.mark.filterwarnings("ignore:nostall. echo_factor")
def test_resume_echo_cache(data):
    base = dict(batch_size=4, epochs=1, seed=6, threads=2, transform=probe)
    with nostall.Loader(data, **base) as ld:
        it = iter(ld)
        for _ in range(3):
            next(it)
        state = ld.state_dict()
        rest = [(ld.last_indices.tolist(), b["draw"].clone()) for b in it]
    with nostall.Loader(data, **base) as ld:
        ld.load_state_dict(state)
        again = [(ld.last_indices.tolist(), b["draw"].clone()) for b in ld]
    assert len(rest) == 7 and all(a[0] == b[0] and torch.equal(a[1], b[1])
                                  for a, b in zip(rest, again))

    for point in ("fetch", "decode", "augment", "batch"):
        runs = [epoch_bytes(data, threads=t, transform=probe, echo_factor=2, echo_point=point)
                for t in (1, 3)]
        assert same(runs[0], runs[1]), point
        draws = {}
        for idx, f in runs[0]:
            for k, i in enumerate(idx):
                draws.setdefault(i, []).append(int(f["draw"][k, 0]))
        reps = [d for d in draws.values() if len(d) > 1]
        assert reps, point
        if point in ("fetch", "decode"):  # the transform runs again, with the use's own stream
            assert all(len(set(d)) == len(d) for d in reps), point
        else:
            assert all(len(set(d)) == 1 for d in reps), point

    plain = epoch_bytes(data, threads=2, transform=probe, epochs=2)
    with nostall.Loader(data, batch_size=8, epochs=3, seed=4, threads=2, copy=True,
                        transform=probe, cache_bytes="32M") as ld:
        cached = []
        for epoch in range(2):
            cached += [(ld.last_indices.tolist(), {k: v.clone() for k, v in b.items()})
                       for b in ld]
        # 40 items twice: each read once, or rarely twice when an item's two
        # fetches meet at the first epoch boundary; the third epoch is exact
        two = ld.stats()
        assert two["cache_hits"] + two["cache_misses"] == 80
        assert 40 <= two["cache_misses"] <= 80
        assert sum(len(b["draw"]) for b in ld) == 40
        three = ld.stats()
        assert three["cache_hits"] - two["cache_hits"] == 40
        assert three["cache_misses"] == two["cache_misses"]
    assert same(plain, cached)


def test_bytes_task(tmp_path):
    from conftest import gen
    data = gen(tmp_path / "bytes", 12, 2)
    with open(os.path.join(data, "class_000", "notes.txt"), "w") as f:
        f.write("not an image, still an item of task=bytes\n")

    def fn(x):
        assert isinstance(x, np.ndarray) and x.dtype == np.uint8 and x.ndim == 1
        head = np.zeros(16, np.uint8)
        head[:min(16, x.size)] = x[:16]
        return {"head": head, "len": np.array([x.size], np.int64)}

    with nostall.Loader(data, task="bytes", batch_size=64, epochs=1, threads=2,
                        transform=fn) as ld:
        b = next(iter(ld))
        paths = [ld.item(i)[0] for i in ld.last_indices.tolist()]
    assert len(paths) == 13 and any(p.endswith("notes.txt") for p in paths)
    for k, p in enumerate(paths):
        with open(p, "rb") as f:
            raw = f.read()
        assert int(b["len"][k, 0]) == len(raw)
        assert bytes(b["head"][k].numpy()[:min(16, len(raw))]) == raw[:16]


def test_c_op_library(data):
    """A C op (op_library) from Python: (images, labels) as the op declares."""
    lib = os.path.join(os.path.dirname(os.environ.get("NOSTALL_LIBRARY", "")), "examples",
                       "libop_color_jitter.so")
    if not os.path.exists(lib):
        pytest.skip("the example op is not built (%s)" % lib)
    sums = []
    for t in (1, 3):
        with nostall.Loader(data, batch_size=8, epochs=1, seed=2, threads=t, op_library=lib,
                            op_args="size=20") as ld:
            s = 0
            for x, y in ld:
                assert x.shape[1:] == (20, 20, 3) and x.dtype == torch.uint8 and y.shape == x.shape[:1]
                s = nostall.checksum(x, y, s)
            sums.append(s)
    assert sums[0] == sums[1]
    with pytest.raises(nostall.OptionError, match="one op per loader"):
        nostall.Loader(data, op_library=lib, transform=small)
