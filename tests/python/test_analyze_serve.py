"""nostall.analyze() of a loader fed by one prep server (threads=0), the
server taken from $NOSTALL_PREP_SERVERS as a launcher would set it: the
report's remote_prep section holds the items received in the run with the
server (its second epoch) and exactly their bytes, the what-if rows for 1, 2, 4 and 8 servers never
predict a longer epoch with more of them, and the text report says what
the model of prep servers leaves out. Structure only, no timing. The
server is a `nostall serve` process on loopback, started and stopped here
(its "listening" line is awaited, never a time)."""

import os
import subprocess

import pytest

import nostall

torch = pytest.importorskip("torch")

# 40 items of 3 x 24 x 24 float32 pixels and an int64 label
ITEM = 3 * 24 * 24 * 4 + 8


class Step:
    def __call__(self, images, labels):
        float(images.mean())


def test_analyze_with_a_prep_server(data, cli, tmp_path, monkeypatch):
    secret = str(tmp_path / "secret")
    with open(secret, "w") as f:
        f.write("analyze secret\n")
    os.chmod(secret, 0o600)
    p = subprocess.Popen([cli, "serve", data, "--crop", "24", "--seed", "5", "--threads", "1",
                          "--secret-file", secret], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        assert line.startswith("listening on "), (line, p.stderr.read())
        monkeypatch.setenv("NOSTALL_PREP_SERVERS", line.strip().rsplit(" ", 1)[1])
        monkeypatch.setenv("NOSTALL_PREP_SECRET_FILE", secret)
        r = nostall.analyze(Step(), data, cli=cli, progress=False, batch_size=8, crop=24,
                            seed=5, threads=0)
    finally:
        p.terminate()
        p.wait()
        p.stdout.close()
        p.stderr.close()
    m = r["measurements"]
    assert m["prep_servers"] == 1 and m["threads"] == 0
    # the second epoch (or both, had the ring held all of the second before)
    assert m["srv_items"] in (40, 80) and 0 < m["srv_remote_items"] <= m["srv_items"]
    rp = r["remote_prep"]
    n = m["srv_remote_items"]
    assert rp["servers"] == 1 and rp["items"] == n and rp["bytes"] == n * ITEM
    assert rp["item_bytes"] == ITEM and 0 < rp["remote_share"] <= 1
    assert rp["per_server_items_per_s"] > 0 and rp["recv_cpu_ms_per_item"] >= 0
    rows = [w for w in r["whatif"] if w["group"] == "servers"]
    assert [w["x"] for w in rows] == [1, 2, 4, 8]
    epochs = [w["prediction"]["epoch_s"] for w in rows]
    assert all(b <= a * (1 + 1e-9) for a, b in zip(epochs, epochs[1:]))
    assert all(w["prediction"]["remote_items"] == 40 for w in rows)
    assert "remote prep  1 prep server(s)" in r.text and "not modelled: " in r.text
