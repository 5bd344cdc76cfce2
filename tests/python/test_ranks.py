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


# --- elastic resume ------------------------------------------------------------
#
# What "repeats and loses nothing" means (README, "States across world
# sizes"), for an epoch saved mid-way by a job of W ranks (k batches each)
# and finished by a job of W' ranks that loaded every old rank's state:
# - no item delivered before the save is delivered after it, except a
#   padding repeat of the old job (drop_last=False: the W*ceil(n/W) - n
#   positions past the dataset repeat the first items of the order) and,
#   under the same world size, the top-up's wrap around the rank's shard;
# - every good item is delivered, except (drop_last=True) the items the new
#   job's own drop_last leaves out of the rest: fewer than W' for the cut
#   to a multiple of W', and each new rank's partial last batch;
# - repeats within the new job are only its padding and the top-up's
#   wrapped repeats, which need a bad item each;
# - no bad item is delivered, every new rank delivers the same count, and
#   under the same world size the resumed job delivers exactly what an
#   uninterrupted one would (per rank, in order).


def _run_job(src, world, opts, state=None, stop=None):
    """Each rank of a job: (delivered indices in order, batches, its state
    after `stop` batches or at the epoch's end, skipped indices)."""
    out = []
    for r in range(world):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with nostall.Loader(src, rank=r, world_size=world, **opts) as ld:
                if state is not None:
                    ld.load_state_dict(state)
                got, nb = [], 0
                for _ in ld:
                    got += [int(i) for i in ld.last_indices]
                    nb += 1
                    if stop is not None and nb == stop:
                        break
                out.append((got, nb, ld.state_dict(), {s["index"] for s in ld.skipped()}))
    return out


def _check_resume(what, n, bad, world, new_world, batch, drop_last, old, new, same=None,
                  extra=0, shuffle=False):
    """The rules above, for a job of `world` ranks saved and finished by one
    of `new_world` ranks (shuffle=False: positions are the indices); `same`:
    the new ranks go on with the last old job's cursors (its world size
    was new_world); `extra`: padding repeats of a job between them."""
    same = world == new_world if same is None else same
    before = [i for o in old for i in o[0]]
    after = [i for o in new for i in o[0]]
    good = set(range(n)) - bad
    assert not set(after) & bad, "%s: delivered a bad item" % what
    counts = {o[1] for o in new}
    if not (new_world == 1 and not drop_last):  # alone, an empty batch is passed
        assert len(counts) == 1, "%s: new ranks delivered %s batches" % (what, counts)
    pad = 0 if drop_last else -(-n // world) * world - n  # the old job's padding targets
    overlap = set(before) & set(after)
    if shuffle:  # which items the padding repeats is the order's
        extra += pad
    else:
        overlap -= set(range(pad))
    # under the same world size a rank goes on with its own shard, whose
    # top-up wraps around to items it delivered before the save: the caller
    # compares with the uninterrupted job instead
    assert same or len(overlap) <= extra, "%s: repeated %s" % (what, sorted(overlap))
    missing = good - set(before) - set(after)
    if drop_last:
        assert len(missing) <= (new_world - 1) + new_world * (batch - 1), \
            "%s: lost %s" % (what, sorted(missing))
    else:
        assert not missing, "%s: lost %s" % (what, sorted(missing))
    if not same:
        new_pad = 0 if drop_last else new_world - 1
        assert len(after) - len(set(after)) <= new_pad + len(bad), \
            "%s: repeats %s" % (what, after)


def test_property_elastic_resume(pool, tmp_path):
    """Random datasets (items, bad positions), world sizes 1-8, batch sizes
    and drop_last: a state merged from every rank of a job stopped
    mid-epoch resumes into every world size 1-8, repeating and losing
    nothing (the rules above); a second change of world size within the
    epoch too (the merged state carries the first one's)."""
    files, junk = pool
    rnd = random.Random(20261129)
    cases = 0
    for case in range(100):
        world = rnd.randint(1, 8)
        n = rnd.randint(world * 2, 60)
        shuffle = rnd.random() < 0.25
        bad = set(rnd.sample(range(n), rnd.randint(0, max(1, n // 6))))
        drop_last = rnd.random() < 0.5
        per_rank = n // world if drop_last else -(-n // world)
        batch = rnd.randint(1, max(1, min(per_rank, 5)))
        shards = [[(r + p * world) % n for p in range(per_rank)] for r in range(world)]
        if any(all(i in bad for i in s) for s in shards):
            continue  # a rank of only bad items raises (test_all_bad_rank_raises)
        src = make_list(tmp_path, files, junk, n, bad, "e%d.txt" % case)
        opts = dict(batch_size=batch, crop=8, threads=2, epochs=1, drop_last=drop_last,
                    shuffle=shuffle, max_bad_fraction=1, seed=case)
        full = _run_job(src, world, opts)
        nb = full[0][1]
        if nb < 2:
            continue
        stop = rnd.randint(1, nb - 1)
        old = _run_job(src, world, opts, stop=stop)
        merged = nostall.merge_states([o[2] for o in old])
        for new_world in range(1, 9):
            what = "case %d: n=%d bad=%s world=%d->%d batch=%d drop_last=%s stop=%d%s" % (
                case, n, sorted(bad), world, new_world, batch, drop_last, stop,
                " shuffled" if shuffle else "")
            if drop_last and n // new_world < batch:
                continue  # refused at create: no batch per epoch
            try:
                new = _run_job(src, new_world, opts, state=merged)
            except nostall.DatasetError as e:  # a new rank's share of the rest all bad
                assert "not one item" in str(e) or "all" in str(e), "%s: %s" % (what, e)
                continue
            except nostall.Error as e:
                raise AssertionError("%s: %s" % (what, e)) from e
            _check_resume(what, n, bad, world, new_world, batch, drop_last, old, new,
                          shuffle=shuffle)
            if new_world == world:  # exact: as if never stopped
                for r in range(world):
                    assert old[r][0] + new[r][0] == full[r][0], "%s: rank %d" % (what, r)
        cases += 1
        # a second change within the epoch: world -> w2 (stopped) -> w3
        w2, w3 = rnd.randint(1, 8), rnd.randint(1, 8)
        if drop_last and n // max(w2, w3) < batch:
            continue
        what = "case %d: n=%d bad=%s world=%d->%d->%d batch=%d drop_last=%s" % (
            case, n, sorted(bad), world, w2, w3, batch, drop_last)
        try:
            mid = _run_job(src, w2, opts, state=merged, stop=1)
            merged2 = nostall.merge_states([o[2] for o in mid])
            if merged2["epoch"] != 0:
                continue  # the rest was one batch: w2 finished the epoch
            last = _run_job(src, w3, opts, state=merged2)
            if w2 == w3:  # exact: as if w2 never stopped
                mid_full = _run_job(src, w2, opts, state=merged)
                for r in range(w2):
                    assert mid[r][0] + last[r][0] == mid_full[r][0], "%s: rank %d" % (what, r)
        except nostall.DatasetError:
            continue
        both = [(o[0] + m[0], 0, None, None) for o, m in zip(old + [([], 0)] * 8, mid)] + \
            [(o[0], 0, None, None) for o in old[len(mid):]]
        _check_resume(what, n, bad, world, w3, batch, drop_last, both, last, same=w2 == w3,
                      extra=0 if drop_last else w2 - 1, shuffle=shuffle)
    assert cases >= 50


def test_elastic_issue_case(pool, tmp_path):
    """The reported case: a 2-rank state_dict (drop_last, bad files) loaded
    into one rank repeated an item. One rank's state whose rank met bad
    items is now refused (StateError naming the way out); every rank's,
    merged (or given as a list), resumes exactly; a state saved before the
    change (version 1, no top-up span) still loads as before."""
    files, junk = pool
    n, bad = 40, {3, 5, 6}
    src = make_list(tmp_path, files, junk, n, bad)
    opts = dict(batch_size=4, crop=8, threads=2, epochs=1, drop_last=True, shuffle=False,
                max_bad_fraction=1, seed=3)
    old = _run_job(src, 2, opts, stop=2)
    states = [o[2] for o in old]
    assert any(st["bad"] for st in states)
    with nostall.Loader(src, **opts) as ld:
        st = next(st for st in states if st["bad"] or st["taken"])
        ld.load_state_dict(st)  # checked against this loader, applied by iter()
        with pytest.raises(nostall.StateError, match="every old rank"):
            iter(ld)
    for state in (nostall.merge_states(states), states):
        new = _run_job(src, 1, opts, state=state)
        before = [i for o in old for i in o[0]]
        assert not set(before) & set(new[0][0])
        assert set(before) | set(new[0][0]) == set(range(n)) - bad - {39}  # 39: drop_last's
    # merge_states: not one job's states, or an incomplete set
    other = dict(states[1], seed=4)
    with pytest.raises(nostall.StateError, match="seed"):
        nostall.merge_states([states[0], other])
    with nostall.Loader(src, **opts) as ld:
        ld.load_state_dict(nostall.merge_states(states[:1]))
        with pytest.raises(nostall.InvalidError, match="every rank"):
            iter(ld)
    # version 1 (before the span), here of a job without bad items: as before,
    # also into another world size
    clean = make_list(tmp_path, files, junk, n, set(), "clean.txt")
    v1 = {k: v for k, v in _run_job(clean, 2, opts, stop=1)[0][2].items()
          if k not in ("level", "taken_first", "taken_end", "bad", "chain")}
    assert v1["taken"] == 0 and v1["position"] == 4
    v1["version"] = 1
    with nostall.Loader(clean, rank=0, world_size=2, **opts) as ld:
        ld.load_state_dict(v1)
        assert sum(1 for _ in ld) == len(ld) - 1
    with nostall.Loader(clean, **opts) as ld:
        ld.load_state_dict(v1)
        assert sum(len(labels) for _, labels in ld) == 32  # 40 - 8, whole batches


@pytest.mark.filterwarnings("ignore:nostall. 1 bad item")
def test_elastic_gather(pool, tmp_path):
    """state_dict(gather=True) merges every rank's state through
    torch.distributed (here a one-process gloo group), and says what to do
    without a process group."""
    files, junk = pool
    src = make_list(tmp_path, files, junk, 30, {2})
    opts = dict(batch_size=4, crop=8, threads=2, epochs=1, max_bad_fraction=1, seed=1)
    with nostall.Loader(src, **opts) as ld:
        it = iter(ld)
        next(it)
        with pytest.raises(RuntimeError, match="process group"):
            ld.state_dict(gather=True)
        dist = pytest.importorskip("torch.distributed")
        if not dist.is_available():
            pytest.skip("torch.distributed is not available")
        dist.init_process_group("gloo", init_method="file://%s" % (tmp_path / "pg"), rank=0,
                                world_size=1)
        try:
            merged = ld.state_dict(gather=True)
        finally:
            dist.destroy_process_group()
        assert merged["merged"] and len(merged["states"]) == 1
        assert merged["states"][0]["position"] == ld.state_dict()["position"]
    with nostall.Loader(src, **opts) as ld:
        ld.load_state_dict(merged)
        assert sum(1 for _ in ld) == len(ld) - 1


def test_resumed_epoch_own_cursor_and_echo(pool, tmp_path):
    """A rank of an epoch resumed from one in-step rank's state (an offset
    into the order) that then met bad items resumes exactly from its own
    state at the same world size; echoing refuses a change of world size
    (positions count deliveries), one state or every rank's."""
    files, junk = pool
    n = 60
    src = make_list(tmp_path, files, junk, n, set(range(30, 60, 4)))
    opts = dict(batch_size=3, crop=8, threads=2, epochs=1, drop_last=True, shuffle=False,
                max_bad_fraction=1, seed=2)
    first = _run_job(src, 2, opts, stop=1)  # positions 0-5: no bad item yet
    assert not any(o[2]["bad"] or o[2]["taken"] for o in first)
    full = _run_job(src, 3, opts, state=first[0][2])  # offset 6, then bad items
    mid = _run_job(src, 3, opts, state=first[0][2], stop=3)
    assert any(o[2]["bad"] for o in mid) and all(o[2]["epoch_offset"] == 6 for o in mid)
    for r in range(3):
        with nostall.Loader(src, rank=r, world_size=3, **opts) as ld:
            ld.load_state_dict(mid[r][2])
            rest = [int(i) for _ in ld for i in ld.last_indices]
        assert mid[r][0] + rest == full[r][0], r
    clean = make_list(tmp_path, files, junk, n, set(), "clean.txt")
    echo = dict(opts, echo_factor=2)
    old = _run_job(clean, 2, echo, stop=1)
    with nostall.Loader(clean, **echo) as ld:
        ld.load_state_dict(old[0][2])
        with pytest.raises(nostall.InvalidError, match="echoing"):
            iter(ld)
        ld.load_state_dict([o[2] for o in old])
        with pytest.raises(nostall.InvalidError, match="echoing"):
            iter(ld)
