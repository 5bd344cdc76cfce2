"""Every rank of a distributed job delivers the same number of batches, equal
to len(loader), whatever items are bad (README, "Bad files and ranks").

A DDP job pairs its collectives up by count: a rank with one batch fewer
hangs the job. These tests run each rank's loader in this process
(rank=r, world_size=W), so no torch.distributed is needed; the torchrun
test is tests/python/test_ddp.py.

Run: /usr/bin/python3 -m pytest tests/python/test_ranks.py -q
"""

import math
import os
import random
import warnings

import pytest

try:
    import nostall
except ImportError as e:  # conftest skips everything with the reason
    pytest.skip(str(e), allow_module_level=True)

from conftest import gen


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    """120 tiny JPEGs and one file that is not an image."""
    d = gen(tmp_path_factory.mktemp("ranks"), 120, 3, 12, 12)
    files = sorted(os.path.join(r, f) for r, _, fs in os.walk(d) for f in fs)
    junk = os.path.join(str(tmp_path_factory.getbasetemp()), "junk.jpg")
    with open(junk, "w") as f:
        f.write("not a JPEG\n")
    return files, junk


def make_list(tmp_path, files, junk, n, bad, name="list.txt"):
    """A list source of n items; the positions in `bad` name the junk file."""
    path = os.path.join(str(tmp_path), name)
    with open(path, "w") as f:
        for i in range(n):
            f.write("%s\t%d\n" % (junk if i in bad else files[i], i % 3))
    return path


def rank_counts(source, world, epochs=2, **opts):
    """Per rank: len(loader) and the batches of each epoch, with sizes."""
    out = []
    for r in range(world):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with nostall.Loader(source, rank=r, world_size=world, crop=8, threads=2,
                                epochs=epochs, **opts) as ld:
                n = len(ld)
                per_epoch = []
                for _ in range(epochs):
                    per_epoch.append([len(labels) for _, labels in ld])
                out.append((n, per_epoch))
    return out


def test_property_equal_counts(pool, tmp_path):
    """Random datasets (items, bad positions), world sizes 1-8, batch sizes,
    drop_last and whole echo factors: every rank delivers len(loader)
    batches in every epoch, no batch is empty, and with drop_last every
    batch is full."""
    files, junk = pool
    rnd = random.Random(20261128)
    for case in range(40):
        world = rnd.randint(1, 8)
        n = rnd.randint(world * 2, len(files))
        nbad = rnd.randint(0, max(1, n // 8))
        bad = set(rnd.sample(range(n), nbad))
        drop_last = rnd.random() < 0.5
        per_rank = n // world if drop_last else -(-n // world)
        batch = rnd.randint(1, max(1, min(per_rank, 12)))
        echo = rnd.choice([1, 1, 2])
        point = rnd.choice(["decode", "batch"])
        src = make_list(tmp_path, files, junk, n, bad, "c%d.txt" % case)
        what = "case %d: n=%d bad=%s world=%d batch=%d drop_last=%s echo=%s/%s" % (
            case, n, sorted(bad), world, batch, drop_last, echo, point)
        # every rank needs one good item: a rank of only bad ones raises (below)
        shards = [[(r + p * world) % n for p in range(per_rank)] for r in range(world)]
        if any(all(i in bad for i in s) for s in shards):
            continue
        try:
            got = rank_counts(src, world, batch_size=batch, drop_last=drop_last,
                              echo_factor=echo, echo_point=point, max_bad_fraction=1,
                              seed=case)
        except nostall.Error as e:
            raise AssertionError("%s: %s" % (what, e)) from e
        want = got[0][0]
        if point == "batch":  # each batch used echo times
            planned = (per_rank // batch if drop_last else -(-per_rank // batch)) * echo
        else:  # each item used echo times
            planned = per_rank * echo // batch if drop_last else -(-per_rank * echo // batch)
        assert want == planned, what
        for r, (length, epochs) in enumerate(got):
            assert length == want, what
            for sizes in epochs:
                if world == 1 and not drop_last:  # alone, an empty batch is passed
                    assert len(sizes) <= want, what
                    continue
                assert len(sizes) == want, "%s: rank %d delivered %s" % (what, r, sizes)
                assert min(sizes) > 0, what
                if drop_last:
                    assert set(sizes) == {batch}, what


def test_issue_case(pool, tmp_path):
    """The reported case, scaled: 195 -> 97 items, one bad, batch 16, two
    ranks. Before: 5 and 6 batches (drop_last) or 6 and 7 (drop_last=False,
    the bad item alone in a last batch), len() 6 on both."""
    files, junk = pool
    n = 97
    src = make_list(tmp_path, files, junk, n, {3})
    got = rank_counts(src, 2, batch_size=16, drop_last=True)
    assert [g[0] for g in got] == [3, 3]
    assert all(e == [16, 16, 16] for g in got for e in g[1])
    # drop_last=False: rank 0 holds 49 items, 3 full batches and 1; the 1 is bad
    src = make_list(tmp_path, files, junk, n, {96}, "last.txt")
    got = rank_counts(src, 2, batch_size=16, drop_last=False)
    assert [g[0] for g in got] == [4, 4]
    assert all(len(e) == 4 and min(e) > 0 for g in got for e in g[1])


def test_all_bad_rank_raises(pool, tmp_path):
    """A rank whose items are all bad raises on that rank (E_DATASET)
    instead of delivering nothing."""
    files, junk = pool
    n = 20
    src = make_list(tmp_path, files, junk, n, set(range(0, n, 2)))  # rank 0 of 2: all bad
    with nostall.Loader(src, rank=0, world_size=2, batch_size=4, crop=8, threads=2,
                        shuffle=False, max_bad_fraction=1) as ld:
        with pytest.raises(nostall.DatasetError, match="not one item"):
            for _ in ld:
                pass
    with nostall.Loader(src, rank=1, world_size=2, batch_size=4, crop=8, threads=2,
                        shuffle=False) as ld:
        assert sum(1 for _ in ld) == len(ld) == 3


def test_max_bad_fraction(pool, tmp_path):
    """Past max_bad_fraction of the rank's items the loader fails naming bad
    items, at the same batch for any thread count; within it, it trains."""
    files, junk = pool
    n = 100
    bad = {5, 40, 41, 42, 77}
    src = make_list(tmp_path, files, junk, n, bad)

    def run(threads, frac):
        got = 0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with nostall.Loader(src, batch_size=10, crop=8, threads=threads, shuffle=False,
                                max_bad_fraction=frac) as ld:
                try:
                    for _ in ld:
                        got += 1
                except nostall.DatasetError as e:
                    return got, str(e)
        return got, None

    assert run(2, 0.05) == (10, None)  # 5 of 100: within ceil(5)
    got, err = run(1, 0.03)            # 3 allowed: batch 4 holds the 4th to 6th
    assert err and "max_bad_fraction" in err and "junk.jpg" in err, err
    assert run(3, 0.03) == (got, err)
    assert got == 4  # batches 0-3 lent: batch 4 holds the 4th bad item
    # the default (0.01 of 100: one bad item) refuses five
    with pytest.raises(nostall.DatasetError, match="max_bad_fraction"):
        with nostall.Loader(src, batch_size=10, crop=8, threads=2) as ld:
            for _ in ld:
                pass


@pytest.mark.parametrize("opts", [dict(echo="adaptive", echo_buffer=16),
                                  dict(echo_factor=1.5), dict(echo_factor=1.5, echo_point="batch")])
def test_rank_unsafe_echo_refused(pool, tmp_path, opts):
    """Echoing whose batch count depends on timing or on the rank's items is
    refused with world_size > 1, saying why; len() raises TypeError (as for
    an unsized IterableDataset) where the count is not fixed."""
    files, junk = pool
    src = make_list(tmp_path, files, junk, 40, set())
    with pytest.raises(nostall.OptionError, match="world_size 2.*pair up"):
        nostall.Loader(src, rank=0, world_size=2, batch_size=4, crop=8, **opts)
    with nostall.Loader(src, batch_size=4, crop=8, threads=2, **opts) as ld:
        with pytest.raises(TypeError, match="len"):
            len(ld)
