"""cache_transcode: JPEGs go into the MinIO cache rewritten with restart
markers, and nothing a training job sees changes.

On a dataset mixing what real folders hold (baseline 4:2:0 and 4:4:4,
progressive, grayscale, CMYK, PNG, a truncated and a corrupt JPEG), the
delivered bytes of every epoch are the same with and without the option, for
1 and 2 threads, and the same bad items are reported; exactly the eligible
JPEGs (8-bit Huffman grayscale or YCbCr) are rewritten, once each; the cache
holds the rewritten bytes; and the option without a cache is refused.
"""

import os
import shutil

import pytest

try:
    import nostall
except ImportError as e:  # conftest skips everything with the reason
    pytest.skip(str(e), allow_module_level=True)

from conftest import gen

Image = pytest.importorskip("PIL.Image")

# two damaged files among 31: past the default bad-item budget
OPTS = dict(batch_size=8, crop=32, seed=5, output="uint8", cache_bytes="256M",
            max_bad_fraction=1)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """24 generated baseline JPEGs in 3 classes plus, in class_000, one file
    of each other kind. Returns (folder, number of eligible JPEGs)."""
    root = tmp_path_factory.mktemp("mixed")
    d = gen(root / "data", 24, 3, 200, 150, 4, "--size-jitter", "0.3", "--quality", "95")
    cls = os.path.join(d, "class_000")
    src = os.path.join(cls, sorted(os.listdir(cls))[0])
    img = Image.open(src).convert("RGB").resize((230, 170))
    img.save(os.path.join(cls, "k_progressive.jpg"), quality=93, progressive=True)
    img.save(os.path.join(cls, "k_444.jpg"), quality=97, subsampling=0)
    img.convert("L").save(os.path.join(cls, "k_gray.jpg"), quality=95)
    img.convert("CMYK").save(os.path.join(cls, "k_cmyk.jpg"), quality=95)
    img.save(os.path.join(cls, "k_png.png"))
    with open(src, "rb") as f:
        good = f.read()
    with open(os.path.join(cls, "z_truncated.jpg"), "wb") as f:
        f.write(good[: len(good) // 2])
    bad = bytearray(good)
    n = len(bad)
    for i in range(n // 3, min(n // 3 + 64, n - 2)):
        bad[i] = (i * 7 + 0xF1) & 0xFF
    for i in range(n // 3 + 64, n - 2, 97):
        bad[i], bad[i + 1] = 0xFF, 0xD0 + (i & 7)
    with open(os.path.join(cls, "z_corrupt.jpg"), "wb") as f:
        f.write(bad)
    yield d, 24 + 3
    shutil.rmtree(root, ignore_errors=True)


def run(data, epochs=3, **opts):
    """Per-epoch checksums, the bad items and the stats of one run."""
    sums = []
    with nostall.Loader(data, **dict(OPTS, **opts)) as ld:
        for _ in range(epochs):
            s = 0
            for images, labels in ld:
                s = nostall.checksum(images, labels, s)
            sums.append(s)
        bad = sorted((os.path.basename(b["path"]), b["status"]) for b in ld.skipped())
        return sums, bad, ld.stats()


def test_same_bytes_every_epoch(mixed):
    data, eligible = mixed
    ref, ref_bad, ref_st = run(data, threads=1)
    assert ref_bad == [("z_corrupt.jpg", "E_CORRUPT"), ("z_truncated.jpg", "E_TRUNCATED")]
    assert ref_st["cache_transcoded"] == 0 and ref_st["cache_transcode_ns"] == 0
    assert len(set(ref)) == 3  # epochs differ (fresh crops), so equality below means something
    for threads in (1, 2):
        sums, bad, st = run(data, threads=threads, cache_transcode=True)
        assert sums == ref, "threads=%d: cache_transcode changed the delivered bytes" % threads
        assert bad == ref_bad
        # each eligible JPEG rewritten once, on its way into the cache
        assert st["cache_transcoded"] == eligible
        assert st["cache_transcode_ns"] > 0
        assert st["cache_items"] == ref_st["cache_items"]
        # every later epoch is served from the cache
        assert st["cache_hits"] == 2 * st["cache_items"]
        # the cache holds the rewritten files: markers make them a little
        # larger, the limit keeps them under an eighth more
        assert ref_st["cache_bytes"] < st["cache_bytes"] < ref_st["cache_bytes"] * 1.13


def test_partial_cache(mixed):
    """Only what the cache keeps is rewritten; the rest is decoded from the
    files as they are, with the same bytes delivered."""
    data, eligible = mixed
    budget = run(data, epochs=1, threads=1)[2]["cache_bytes"] // 3
    ref = run(data, threads=2, cache_bytes=budget)[0]
    sums, _, st = run(data, threads=2, cache_bytes=budget, cache_transcode=True)
    assert sums == ref
    assert 0 < st["cache_transcoded"] < eligible
    assert st["cache_transcoded"] <= st["cache_items"]
    assert st["cache_bytes"] <= budget


def test_needs_a_cache(mixed):
    data, _ = mixed
    with pytest.raises(nostall.OptionError, match="cache_transcode"):
        nostall.Loader(data, cache_transcode=True)
    with pytest.raises(nostall.OptionError, match="cache_transcode"):
        nostall.Loader(data, cache="none", cache_transcode=True)


def test_analyze_with_the_option(mixed, cli):
    """nostall.analyze() takes a configuration with a MinIO cache and
    cache_transcode: its runs without a cache drop both (the cached run kept
    cache_bytes with cache=none, and failed, before)."""
    data, _ = mixed
    r = nostall.analyze(lambda images, labels: None, data, cli=cli, progress=False,
                        batch_size=8, crop=32, threads=2, cache_bytes="256M",
                        cache_transcode=True, max_bad_fraction=1)
    assert r["measurements"]["items_per_epoch"] > 0


def _library_rewrite(data, **fields):
    """The public rewriter (nostall_transcode_jpeg) on bytes: (status, bytes
    or None when kept, result)."""
    import ctypes
    from nostall import _lib
    opts = _lib.TranscodeOptions(**fields)
    res = _lib.TranscodeResult()
    cap = _lib.transcode_bound(len(data))
    buf, n = ctypes.create_string_buffer(cap), ctypes.c_size_t()
    rc = _lib.transcode_jpeg(buf, cap, ctypes.byref(n), data, len(data), ctypes.byref(opts),
                             ctypes.sizeof(opts), ctypes.byref(res), ctypes.sizeof(res))
    return rc, (buf.raw[:n.value] if rc == 0 and n.value else None), res


def test_cache_holds_the_public_rewriters_bytes(mixed):
    """One rewriter: what the cache holds is, item for item, what
    nostall_transcode_jpeg() writes with the cache's options (a marker every
    MCU, no metadata), and exactly the items it rewrites are counted."""
    from nostall import _lib
    data, eligible = mixed
    want_bytes, rewritten, statuses = 0, 0, set()
    for root, _, files in os.walk(data):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                b = f.read()
            out = None
            if b[:3] == b"\xff\xd8\xff":
                rc, out, res = _library_rewrite(b, restart_mcus=1,
                                                flags=_lib.TRANSCODE_DROP_METADATA)
                statuses.add(_lib.STATUS[rc] if rc else
                             _lib._s(_lib.transcode_kept_text(res.kept)) if out is None else "ok")
            want_bytes += len(out) if out is not None else len(b)
            rewritten += out is not None
    assert rewritten == eligible
    # rewritten, kept (CMYK) and damaged (truncated, corrupt) were all seen
    assert {"ok", "E_TRUNCATED", "E_CORRUPT"} <= statuses and len(statuses) >= 4, statuses
    _, _, st = run(data, epochs=1, threads=2, cache_transcode=True)
    assert st["cache_transcoded"] == rewritten
    assert st["cache_bytes"] == want_bytes
