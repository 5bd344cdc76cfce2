"""autotune from Python: autotune=True with cpu_budget and memory_budget
changes nothing in the bytes delivered (python_checksum over two epochs,
with the test hook that changes the setting after every batch too; the
MinIO cache sized from memory_budget in play), its setting is in stats()
and autotune(), never above ceil(cpu_budget) active workers, the ring and
the cache within memory_budget. No assertion on speed."""
import os

import pytest

import nostall
from test_loader import python_checksum

pytest.importorskip("torch")

BASE = dict(batch_size=4, crop=24, seed=5, epochs=2)


def test_autotune_same_bytes(data, monkeypatch):
    with nostall.Loader(data, threads=2, **BASE) as ld:
        want = python_checksum(ld)
        assert ld.stats()["autotune"] == 0
        assert ld.autotune()["on"] is False
    for flip in (False, True):
        if flip:
            monkeypatch.setenv("NOSTALL_TEST_TUNE_FLIP", "1")
        for budget in (0.5, 1, 2):
            with nostall.Loader(data, threads=2, autotune=True, cpu_budget=budget,
                                memory_budget="64M", **BASE) as ld:
                assert python_checksum(ld) == want, (flip, budget)
                s, a = ld.stats(), ld.autotune()
                assert s["autotune"] == 1 and a["on"] is True
                assert 1 <= s["active_workers"] <= min(2, -(-budget // 1))
                assert s["cpu_budget_milli"] == round(budget * 1000)
                assert 0 < s["ring_bytes_max"] <= 64 << 20
                # the MinIO cache gets what the ring leaves of the budget
                assert 0 < a["cache_budget"] == s["cache_budget_bytes"]
                assert s["ring_bytes_max"] + a["cache_budget"] <= 64 << 20
                assert a["cache_bytes"] <= a["cache_budget"]
                assert s["cache_bytes"] <= a["cache_budget"]
                assert a["echo_max"] == 0
                assert a["why"]
                if flip:
                    assert a["reason"] == "test-flip"
                    assert a["decisions"] == s["batches_delivered"]
        monkeypatch.delenv("NOSTALL_TEST_TUNE_FLIP", raising=False)


def test_memory_budget_refused(data):
    with pytest.raises(nostall.Error, match="memory_budget"):
        nostall.Loader(data, autotune=True, memory_budget="1K", **BASE)


def test_keeping_batches_alive(data, monkeypatch):
    """Tensors kept alive hold their ring slots: with autotune the ring is
    sized for its most batches ahead but uses fewer, and the binding counts
    the usable ones (ring_slots_usable), copying instead of running the
    ring dry -- with the hook that moves the limit after every batch too."""
    opts = dict(batch_size=4, crop=24, seed=9, epochs=1, threads=2, batches_ahead=1)
    with nostall.Loader(data, **opts) as ld:
        want = [(x.clone(), y.clone()) for x, y in ld]
    monkeypatch.setenv("NOSTALL_TEST_TUNE_FLIP", "1")
    with nostall.Loader(data, autotune=True, **opts) as ld:
        kept = list(ld)  # every batch of the epoch alive at once
        s = ld.stats()
        assert s["ring_slots_usable"] < ld.info()["ring_slots"]
    assert len(kept) == len(want)
    for (x, y), (wx, wy) in zip(kept, want):
        assert x.equal(wx) and y.equal(wy)


def test_state_moves_between(data):
    """A state saved under autotune resumes in a loader without it (and
    back): autotune and its budgets are not in the state's fingerprint."""
    opts = dict(batch_size=4, crop=24, seed=11, epochs=1, threads=2)
    with nostall.Loader(data, **opts) as ld:
        want = [x.clone() for x, _ in ld]
    for first, second in ((dict(autotune=True, cpu_budget=1), {}),
                          ({}, dict(autotune=True, memory_budget="64M"))):
        with nostall.Loader(data, **opts, **first) as ld:
            it = iter(ld)
            got = [next(it)[0].clone() for _ in range(3)]
            state = ld.state_dict()
        with nostall.Loader(data, **opts, **second) as ld:
            ld.load_state_dict(state)
            got += [x.clone() for x, _ in ld]
        assert len(got) == len(want)
        assert all(a.equal(b) for a, b in zip(got, want))
