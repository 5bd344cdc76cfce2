"""nostall.ray.PrepPool on a local Ray (ray.init() on this machine, servers
on loopback): two actors' servers feed a loader with the checksum of a
local run; an actor killed through Ray (ray.kill) mid-epoch leaves the
checksum unchanged (its items go to the other server or the local thread),
Ray restarts it with a new server, and replace_dead() returns the new
addresses, which serve; an actor killed for good is replaced by a new one;
a server killed under its live actor is started again by the next check.

Skipped when Ray is not importable under the running interpreter (make
test runs Debian's python, without Ray): `bash bench/ray_pool.sh` makes a
venv with Ray from PyPI and runs this file there. Waits on events (a
server's answer, an actor's new incarnation), never on a time."""

import os
import signal
import time

import pytest

import nostall

try:
    import ray
except ImportError:
    pytest.skip("Ray is not installed for this interpreter (make test's Debian python has "
                "none); run: bash bench/ray_pool.sh (a venv with Ray from PyPI)",
                allow_module_level=True)

import nostall.ray  # noqa: E402

OPTS = dict(batch_size=8, crop=24, seed=5, epochs=2)
DEADLINE = 300  # seconds: a bound on waiting for Ray's restart, not a measure


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    yield ray
    ray.shutdown()


def _secret(tmp_path):
    path = str(tmp_path / "secret")
    with open(path, "w") as f:
        f.write("ray secret\n")
    os.chmod(path, 0o600)
    return path


def _run(ld, after_first=None):
    """The checksum and item count of every epoch; after_first() runs once,
    after the first batch (mid-epoch)."""
    s, n = 0, 0
    for _ in range(OPTS["epochs"]):
        for x, y in ld:
            s, n = nostall.checksum(x, y, s), n + len(y)
            if after_first is not None:
                after_first()
                after_first = None
    return s, n


def _dead(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            return any(line.split()[:2] == ["State:", "Z"] for line in f)
    except FileNotFoundError:
        return True


def _until(what, cond):
    end = time.monotonic() + DEADLINE
    while not cond():
        assert time.monotonic() < end, "never happened: " + what


def test_pool_feeds_loader_through_a_killed_actor(local_ray, data, cli, tmp_path):
    secret = _secret(tmp_path)
    with nostall.Loader(data, threads=2, **OPTS) as ld:
        want = _run(ld)
    assert want[1] == 80
    pool = nostall.ray.PrepPool(2, data, secret_file=secret, host="127.0.0.1", cli=cli,
                                crop=24, seed=5)
    try:
        first = pool.addresses
        assert len(set(first)) == 2 and all(a.startswith("127.0.0.1:") for a in first)
        with nostall.Loader(data, threads=0, prep_servers=first, prep_secret_file=secret,
                            **OPTS) as ld:
            assert _run(ld) == want  # all remote
            assert ld.stats()["prep_remote_items"] == 80
        born = pool.incarnations()
        victim, victim_server = pool.actors[0], pool.server_pids()[0]
        with nostall.Loader(data, threads=1, prep_servers=first, prep_secret_file=secret,
                            **OPTS) as ld:
            assert _run(ld, lambda: ray.kill(victim, no_restart=False)) == want
        # Ray restarts the actor, and the actor its server (a new process)
        _until("actor 0 restarted", lambda: pool.incarnations()[0] != born[0])
        # its server died with it (the actor's node is this machine)
        _until("actor 0's server died", lambda: _dead(victim_server))
        again = pool.replace_dead()
        assert again[1] == first[1]
        with nostall.Loader(data, threads=0, prep_servers=again, prep_secret_file=secret,
                            **OPTS) as ld:
            assert _run(ld) == want
            assert ld.stats()["prep_remote_items"] == 80
        # killed for good: replace_dead() puts a new actor in its place
        gone = pool.actors[1]
        ray.kill(gone, no_restart=True)
        _until("actor 1 replaced", lambda: pool.replace_dead() and pool.actors[1] is not gone)
        with nostall.Loader(data, threads=0, prep_servers=pool.addresses,
                            prep_secret_file=secret, **OPTS) as ld:
            assert _run(ld) == want
        # a server killed under its live actor: the next check starts another
        old = pool.server_pids()[0]
        os.kill(old, signal.SIGKILL)
        _until("server 0 restarted", lambda: pool.replace_dead() and pool.server_pids()[0] != old)
        with nostall.Loader(data, threads=0, prep_servers=pool.addresses,
                            prep_secret_file=secret, **OPTS) as ld:
            assert _run(ld) == want
    finally:
        pool.close()


def test_pool_refuses_clearly(local_ray, data, cli, tmp_path):
    secret = _secret(tmp_path)
    with pytest.raises(ValueError, match="listen"):
        nostall.ray.PrepPool(1, data, secret_file=secret, listen="0.0.0.0:1")
    # a server that cannot start: its own error, through Ray
    with pytest.raises(Exception, match="crop"):
        nostall.ray.PrepPool(1, data, secret_file=secret, host="127.0.0.1", cli=cli, crop=0)
