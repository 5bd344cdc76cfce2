"""Prep servers from Python: Loader(prep_servers=[...], prep_secret_file=...)
with threads=0 gives the same tensors as a local loader; a wrong secret is
refused at create with the server named; a state_dict() taken mid-epoch
with one set of servers resumes on another set, and on none (local
threads), with exactly the epoch's remaining items, the bytes of an
uninterrupted local run. The servers are `nostall serve` processes on
loopback, started and stopped here (their "listening" line is awaited,
never a time)."""

import os
import subprocess

import pytest

import nostall

torch = pytest.importorskip("torch")

OPTS = dict(batch_size=8, crop=24, seed=5, epochs=1)


def _serve(cli, data, secret):
    p = subprocess.Popen([cli, "serve", data, "--crop", "24", "--seed", "5", "--threads", "1",
                          "--secret-file", secret], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line.startswith("listening on "), (line, p.stderr.read())
    return p, line.strip().rsplit(" ", 1)[1]


def _batches(ld):
    return [(x.clone(), y.clone()) for x, y in ld]


def _secret(tmp_path, name="secret", text="py secret\n"):
    path = str(tmp_path / name)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)
    return path


def _stop(servers):
    for p, _ in servers:
        p.terminate()
    for p, _ in servers:
        p.wait()
        p.stdout.close()
        p.stderr.close()


def _indexed(ld, n=None):
    """(dataset indices, images, labels) of each batch; the first n only if n."""
    out = []
    for x, y in ld:
        out.append((ld.last_indices.tolist(), x.clone(), y.clone()))
        if n is not None and len(out) == n:
            break
    return out


def _same(got, want):
    assert [i for i, _, _ in got] == [i for i, _, _ in want]
    for (_, a, b), (_, c, d) in zip(got, want):
        assert torch.equal(a, c) and torch.equal(b, d)


def test_remote_same_tensors(data, cli, tmp_path):
    secret = str(tmp_path / "secret")
    with open(secret, "w") as f:
        f.write("py secret\n")
    os.chmod(secret, 0o600)
    servers = [_serve(cli, data, secret) for _ in range(2)]
    try:
        with nostall.Loader(data, threads=2, **OPTS) as ld:
            local = _batches(ld)
        with nostall.Loader(data, threads=0, prep_servers=[a for _, a in servers],
                            prep_secret_file=secret, **OPTS) as ld:
            remote = _batches(ld)
        assert len(local) == len(remote) == 5
        for (a, b), (c, d) in zip(local, remote):
            assert torch.equal(a, c) and torch.equal(b, d)
        wrong = str(tmp_path / "wrong")
        with open(wrong, "w") as f:
            f.write("not it")
        os.chmod(wrong, 0o600)
        with pytest.raises(nostall.Error) as e:
            nostall.Loader(data, threads=0, prep_servers=[servers[0][1]],
                           prep_secret_file=wrong, **OPTS)
        assert "authentication failed" in str(e.value) and servers[0][1] in str(e.value)
    finally:
        for p, _ in servers:
            p.terminate()
            p.wait()


def test_state_resumes_on_other_servers(data, cli, tmp_path):
    """Mid-epoch state from a loader fed by servers {A, B} (no local
    threads): resumed on server C alone (A and B stopped) and on local
    threads alone, each delivers exactly the epoch's remaining 24 items,
    in the order and with the bytes of an uninterrupted local run."""
    secret = _secret(tmp_path)
    opts = dict(OPTS, epochs=2)
    with nostall.Loader(data, threads=2, **opts) as ld:
        _indexed(ld)  # epoch 0
        full = _indexed(ld)  # epoch 1, uninterrupted, local
    assert len(full) == 5 and sum(len(i) for i, _, _ in full) == 40
    first = [_serve(cli, data, secret) for _ in range(2)]
    try:
        with nostall.Loader(data, threads=0, prep_servers=[a for _, a in first],
                            prep_secret_file=secret, **opts) as ld:
            _indexed(ld)  # epoch 0
            head = _indexed(ld, 2)  # epoch 1: two batches, then the checkpoint
            state = ld.state_dict()
            assert ld.stats()["prep_remote_items"] > 0
    finally:
        _stop(first)
    assert (state["epoch"], state["position"]) == (1, 16)
    _same(head, full[:2])
    second = [_serve(cli, data, secret)]
    try:
        with nostall.Loader(data, threads=0, prep_servers=[second[0][1]],
                            prep_secret_file=secret, **opts) as ld:
            ld.load_state_dict(state)
            tail = _indexed(ld)
            # threads=0: every remaining item came from C, once
            assert ld.stats()["prep_remote_items"] == 24
    finally:
        _stop(second)
    _same(tail, full[2:])
    with nostall.Loader(data, threads=2, **opts) as ld:  # no servers at all
        ld.load_state_dict(state)
        _same(_indexed(ld), full[2:])


def test_servers_from_environment(data, cli, tmp_path, monkeypatch):
    """$NOSTALL_PREP_SERVERS and $NOSTALL_PREP_SECRET_FILE (what a launcher
    sets for every rank) stand for prep_servers and prep_secret_file not
    given; an explicit prep_servers="" means none; a refusal names the
    variable the servers came from."""
    secret = _secret(tmp_path)
    with nostall.Loader(data, threads=2, **OPTS) as ld:
        local = _indexed(ld)
    server = [_serve(cli, data, secret)]
    try:
        monkeypatch.setenv("NOSTALL_PREP_SERVERS", server[0][1])
        monkeypatch.setenv("NOSTALL_PREP_SECRET_FILE", secret)
        with nostall.Loader(data, threads=0, **OPTS) as ld:
            assert ld.config["prep_servers"] == server[0][1]
            _same(_indexed(ld), local)
            assert ld.stats()["prep_remote_items"] == 40
        with nostall.Loader(data, threads=2, prep_servers="", **OPTS) as ld:
            _same(_indexed(ld), local)
            assert ld.stats()["prep_remote_items"] == 0
        monkeypatch.setenv("NOSTALL_PREP_SECRET_FILE", _secret(tmp_path, "wrong", "not it"))
        with pytest.raises(nostall.Error) as e:
            nostall.Loader(data, threads=0, **OPTS)
        assert "authentication failed" in str(e.value)
        assert "$NOSTALL_PREP_SERVERS" in str(e.value)
        assert "$NOSTALL_PREP_SECRET_FILE" in str(e.value)
    finally:
        _stop(server)
