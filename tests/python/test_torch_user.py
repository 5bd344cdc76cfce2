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
