"""Weighted mixing from Python (docs/mixing.md): Loader(sources=[(a, 0.7),
(b, 0.3)]) delivers each mixed epoch's exact shares with a per-item source
field, the same bytes for 1 and 2 threads, resumes mid-epoch exactly through
state_dict()/load_state_dict(), and refuses a state of another mix."""

import numpy as np
import pytest

import nostall
from conftest import gen


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    a = gen(tmp_path_factory.mktemp("mix_a"), 30, 3, 64, 48, 1)
    b = gen(tmp_path_factory.mktemp("mix_b"), 10, 2, 64, 48, 2)
    return a, b


def loader(two, weights=(0.7, 0.3), **kw):
    a, b = two
    opts = dict(batch_size=10, crop=16, output="uint8", seed=4, mix_epoch_items=100,
                threads=2)
    opts.update(kw)
    return nostall.Loader(sources=[(a, weights[0]), (b, weights[1])], **opts)


def arrays(batch):
    return {k: np.asarray(v).copy() for k, v in batch.items()}


def test_shares_fields_threads(two):
    ld = loader(two)
    assert ld.info()["items"] == 40
    got = [arrays(b) for b in ld]
    assert len(got) == 10
    src = np.concatenate([b["source"] for b in got])
    assert (src == 0).sum() == 70 and (src == 1).sum() == 30
    for b in got:
        assert set(b) == {"image", "label", "source"}
        assert b["image"].shape[1:] == (16, 16, 3)
        lab = b["label"]
        assert np.all(lab[b["source"] == 0] < 3) and np.all(lab[b["source"] == 1] < 2)
    one = [arrays(b) for b in loader(two, threads=1)]
    for x, y in zip(got, one):
        for k in x:
            assert np.array_equal(x[k], y[k])
    # offset labels: b's two classes come after a's three
    off = [arrays(b) for b in loader(two, mix_labels="offset")]
    lab = np.concatenate([b["label"] for b in off])
    src = np.concatenate([b["source"] for b in off])
    assert set(lab[src == 1].tolist()) <= {3, 4} and set(lab[src == 0].tolist()) <= {0, 1, 2}


def test_resume_mid_epoch(two):
    ld = loader(two)
    for _ in ld:  # epoch 0
        pass
    it = iter(ld)
    for _ in range(4):
        next(it)
    state = ld.state_dict()
    assert state["epoch"] == 1 and state["position"] == 40
    rest = [arrays(b) for b in it]
    assert len(rest) == 6
    other = loader(two, threads=1)
    other.load_state_dict(state)
    again = [arrays(b) for b in other]
    assert len(again) == len(rest)
    for x, y in zip(rest, again):
        for k in x:
            assert np.array_equal(x[k], y[k]), k
    # another mix of the same sources refuses the state
    with pytest.raises(nostall.Error) as e:
        loader(two, weights=(0.5, 0.5)).load_state_dict(state)
    assert e.value.status_name == "E_STATE"


def test_elastic_resume(two):
    """Every rank's state of a 2-rank mix, merged, resumes into 3 ranks: the
    positions are the mixed epoch's slots, so old + new deliver its exact
    shares (70 and 30 of 100), none twice."""
    old = []
    src = []
    for r in range(2):
        ld = loader(two, rank=r, world_size=2)
        it = iter(ld)
        for _ in range(2):
            src.append(arrays(next(it))["source"])
        old.append(ld.state_dict())
        ld.close()
    state = nostall.merge_states(old)
    for r in range(3):
        ld = loader(two, rank=r, world_size=3)
        ld.load_state_dict(state)
        src += [arrays(b)["source"] for b in ld]
        ld.close()
    src = np.concatenate(src)
    assert len(src) == 100 and (src == 0).sum() == 70 and (src == 1).sum() == 30


def test_errors(two):
    a, b = two
    with pytest.raises(nostall.Error) as e:
        nostall.Loader(sources=[(a, 1.0), (b, 0.0)])
    assert "weight" in e.value.message
    with pytest.raises(TypeError):
        nostall.Loader(sources=[(a, "heavy")])
    with pytest.raises(TypeError):
        nostall.Loader()
    # the mix option's own text form works too
    ld = nostall.Loader(mix="%s:0.7,%s:0.3" % (a, b), batch_size=10, crop=16,
                        mix_epoch_items=100)
    src = np.concatenate([np.asarray(x["source"]) for x in ld])
    assert (src == 0).sum() == 70


def test_tokens(tmp_path):
    # two token files of distinct ranges: each window is contiguous and
    # entirely its source's (locate and make agree on the window's draws)
    np.arange(0, 5000, dtype=np.uint16).tofile(tmp_path / "a.bin")
    (np.arange(0, 3000, dtype=np.uint16) + 10000).tofile(tmp_path / "b.bin")
    for windows in ("random", "chunks"):
        ld = nostall.Loader(sources=[(tmp_path / "a.bin", 3), (tmp_path / "b.bin", 1)],
                            task="tokens", context_length=32, batch_size=8, seed=1,
                            windows=windows, epochs=2, threads=2)
        n = [0, 0]
        for b in ld:
            tok = np.asarray(b["tokens"])
            tgt = np.asarray(b["targets"])
            for row, t, s in zip(tok, tgt, np.asarray(b["source"])):
                assert np.all(np.diff(row) == 1) and np.array_equal(t, row + 1)
                assert (row[0] >= 10000) == (s == 1)
                n[s] += 1
        assert n == [187, 62]  # one mixed epoch of 249 windows, 3:1 by largest remainder
