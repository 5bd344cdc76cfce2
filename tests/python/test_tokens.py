"""task=tokens through the Python face, against numpy.

The reference is independent of the library: it reads the token file with
np.fromfile / np.load and recomputes each window's start from the rule
docs/tokens.md states -- item i of epoch e starts at below(N - L) of the
splitmix64 stream seeded by hash4(seed, e, i, 0x746f6b656e73) (random), or at
i * L (chunks) -- written here again in Python integers. The batch's
`last_indices` give the item numbers, so every delivered window is checked
token by token, for 1, 2 and 4 threads, both window modes, every accepted
file layout, with and without targets. Also: bad files raise with the file
named, exact mid-epoch resume, echoing repeats the same window, and the
cache's second epoch reads nothing from storage.
"""

import os

import numpy as np
import pytest

import nostall

M64 = (1 << 64) - 1
WINDOW = 0x746F6B656E73  # "tokens"


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def hash4(a, b, c, d):
    h = mix64((a + 0x9E3779B97F4A7C15) & M64)
    h = mix64(h ^ ((b + 0x632BE59BD9B4E019) & M64))
    h = mix64(h ^ ((c + 0x85157AF5) & M64))
    return mix64(h ^ ((d + 0x3C6EF372FE94F82B) & M64))


def below(state, n):
    """Uniform in [0, n) from a splitmix64 stream (Lemire's method)."""
    def draw():
        nonlocal state
        state = (state + 0x9E3779B97F4A7C15) & M64
        return mix64(state)
    m = draw() * n
    if (m & M64) < n:
        t = ((1 << 64) - n) % n
        while (m & M64) < t:
            m = draw() * n
    return m >> 64


def start(seed, epoch, item, n, length, chunks):
    return item * length if chunks else below(hash4(seed, epoch, item, WINDOW), n - length)


N, L = 3000, 16  # (3000 - 1) // 16 = 187 windows per epoch


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("tokens")
    rng = np.random.default_rng(7)
    t = rng.integers(0, 65536, size=N, dtype=np.uint16)
    signed = rng.integers(-(1 << 40), 1 << 40, size=N, dtype=np.int64)
    out = {}

    def keep(name, ref):
        out[name] = (str(d / name), ref.astype(np.int64))

    t.tofile(d / "u16.bin"), keep("u16.bin", t)
    big = rng.integers(0, 1 << 32, size=N, dtype=np.uint32)
    big.tofile(d / "u32.bin"), keep("u32.bin", big)
    np.save(d / "u2.npy", t), keep("u2.npy", t)
    np.save(d / "u4.npy", big), keep("u4.npy", big)
    np.save(d / "i4.npy", signed.astype(np.int32)), keep("i4.npy", signed.astype(np.int32))
    np.save(d / "i8.npy", signed), keep("i8.npy", signed)
    for v in (2, 3):
        with open(d / ("v%d.npy" % v), "wb") as f:
            np.lib.format.write_array(f, t, version=(v, 0))
        keep("v%d.npy" % v, t)
    return out


def opts(**kw):
    o = dict(task="tokens", context_length=L, batch_size=8, seed=3, threads=2)
    o.update(kw)
    return o


def check_epoch(ld, ref, epoch, seed=3, chunks=False, targets=True, length=L):
    """Iterate one epoch and compare each window with the reference."""
    seen = []
    for b in ld:
        idx = ld.last_indices
        tok = b["tokens"].numpy()
        assert tok.dtype == np.int64
        for k, i in enumerate(idx.tolist()):
            s = start(seed, epoch, i, len(ref), length, chunks)
            w = ref[s:s + length + 1]
            if targets:
                assert np.array_equal(tok[k], w[:-1]), "epoch %d item %d" % (epoch, i)
                assert np.array_equal(b["targets"].numpy()[k], w[1:])
            else:
                assert np.array_equal(tok[k], w), "epoch %d item %d" % (epoch, i)
        seen.extend(idx.tolist())
    return seen


@pytest.mark.parametrize("threads", [1, 2, 4])
@pytest.mark.parametrize("windows", ["random", "chunks"])
def test_windows_match_numpy(files, threads, windows):
    path, ref = files["u16.bin"]
    with nostall.Loader(path, **opts(threads=threads, windows=windows, epochs=2)) as ld:
        assert ld.info()["items"] == (N - 1) // L
        for epoch in range(2):
            seen = check_epoch(ld, ref, epoch, chunks=windows == "chunks")
            assert sorted(seen) == list(range((N - 1) // L))


@pytest.mark.parametrize("name", ["u32.bin", "u2.npy", "u4.npy", "i4.npy", "i8.npy",
                                  "v2.npy", "v3.npy"])
def test_layouts_match_numpy(files, name):
    path, ref = files[name]
    extra = {"token_dtype": "uint32"} if name == "u32.bin" else {}
    with nostall.Loader(path, **opts(epochs=1, **extra)) as ld:
        check_epoch(ld, ref, 0)
    with nostall.Loader(path, **opts(epochs=1, targets=0, windows="chunks", **extra)) as ld:
        b = next(iter(ld))
        assert "targets" not in b and b["tokens"].shape == (8, L + 1)
        for k, i in enumerate(ld.last_indices.tolist()):
            assert np.array_equal(b["tokens"].numpy()[k], ref[i * L:i * L + L + 1])


def test_random_starts_cover_the_file(files):
    """The rule itself: starts spread over [0, N - L - 1] and change with the epoch."""
    s0 = [start(3, 0, i, N, L, False) for i in range(187)]
    s1 = [start(3, 1, i, N, L, False) for i in range(187)]
    assert 0 <= min(s0) < 100 and N - L - 100 < max(s0) <= N - L - 1
    assert sum(a == b for a, b in zip(s0, s1)) < 5


def test_bad_files(tmp_path):
    odd = tmp_path / "odd.bin"
    odd.write_bytes(b"\x01" * 1001)
    with pytest.raises(nostall.Error, match=r"odd\.bin: 1001 bytes is not a whole number of uint16") as e:
        nostall.Loader(str(odd), **opts())
    assert e.value.status_name == "E_DATASET"
    short = tmp_path / "short.bin"
    np.arange(10, dtype=np.uint16).tofile(short)
    with pytest.raises(nostall.Error, match=r"short\.bin: 10 uint16 tokens \(20 bytes\), fewer than"):
        nostall.Loader(str(short), **opts())
    f4 = tmp_path / "f4.npy"
    np.save(f4, np.zeros(100, dtype=np.float32))
    with pytest.raises(nostall.Error, match=r"f4\.npy: \.npy of dtype '<f4'"):
        nostall.Loader(str(f4), **opts())
    big_endian = tmp_path / "be.npy"
    np.save(big_endian, np.zeros(100, dtype=">u2"))
    with pytest.raises(nostall.Error, match=r"dtype '>u2'"):
        nostall.Loader(str(big_endian), **opts())


def test_resume_exact_mid_epoch(files):
    path, ref = files["u16.bin"]
    with nostall.Loader(path, **opts(epochs=2)) as ld:
        full = [(ld.last_indices.tolist(), b["tokens"].numpy().copy()) for b in ld]
    with nostall.Loader(path, **opts(epochs=2)) as ld:
        it = iter(ld)
        for _ in range(7):
            next(it)
        state = ld.state_dict()
    assert state["position"] == 56
    with nostall.Loader(path, **opts(epochs=2, threads=3)) as ld:
        ld.load_state_dict(state)
        rest = [(ld.last_indices.tolist(), b["tokens"].numpy().copy()) for b in ld]
    assert len(rest) == len(full) - 7
    for (i, a), (j, b) in zip(full[7:], rest):
        assert i == j and np.array_equal(a, b)


@pytest.mark.filterwarnings("ignore:.*echo_factor 2 exceeds")
@pytest.mark.parametrize("point", ["fetch", "decode", "augment"])
def test_echo_repeats_the_window(files, point):
    path, ref = files["u16.bin"]
    with nostall.Loader(path, **opts(epochs=1, echo_factor=2, echo_point=point)) as ld:
        got = {}
        for b in ld:
            for k, i in enumerate(ld.last_indices.tolist()):
                got.setdefault(i, []).append(b["tokens"].numpy()[k].copy())
    assert len(got) == 187 and all(len(v) == 2 for v in got.values())
    for i, (a, b) in got.items():
        s = start(3, 0, i, N, L, False)
        assert np.array_equal(a, ref[s:s + L]) and np.array_equal(b, a)


def test_cache_second_epoch_reads_nothing(files):
    path, ref = files["u16.bin"]
    # the third epoch is the exact one (at the first boundary, which of an
    # item's two fetches reads storage is a race)
    with nostall.Loader(path, **opts(epochs=3, cache_bytes="1M")) as ld:
        ld.set_epoch(0)
        check_epoch(ld, ref, 0)
        check_epoch(ld, ref, 1)
        first = ld.stats()
        check_epoch(ld, ref, 2)
        second = ld.stats()
    assert first["storage_reads"] > 0
    assert second["storage_reads"] == first["storage_reads"]
    assert second["storage_bytes_read"] == first["storage_bytes_read"]
    assert second["cache_hits"] - first["cache_hits"] == 187
    # units of 64 x 17 starts: the corpus once, plus 16 tokens per unit boundary
    units = -(-(N - L) // (64 * (L + 1)))
    once = 2 * (N + (units - 1) * L)
    assert once <= first["storage_bytes_read"] <= 2 * once  # twice at most, at the first boundary
