"""autotune from Python: autotune=True with cpu_budget and memory_budget
changes nothing in the bytes delivered (python_checksum over two epochs,
with the test hook that changes the setting after every batch too), its
setting is in stats() and autotune(), and never above ceil(cpu_budget)
active workers. No assertion on speed."""
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
                assert a["why"]
                if flip:
                    assert a["reason"] == "test-flip"
                    assert a["decisions"] == s["batches_delivered"]
        monkeypatch.delenv("NOSTALL_TEST_TUNE_FLIP", raising=False)


def test_memory_budget_refused(data):
    with pytest.raises(nostall.Error, match="memory_budget"):
        nostall.Loader(data, autotune=True, memory_budget="1K", **BASE)
