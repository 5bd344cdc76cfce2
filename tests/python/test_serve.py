"""Prep servers from Python: Loader(prep_servers=[...], prep_secret_file=...)
with threads=0 gives the same tensors as a local loader; a wrong secret is
refused at create with the server named. The servers are `nostall serve`
processes on loopback, started and stopped here (their "listening" line
is awaited, never a time)."""

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
