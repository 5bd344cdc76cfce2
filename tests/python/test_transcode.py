"""nostall.transcode(): the lossless restart-marker copy from Python.

Run: NOSTALL_LIBRARY=build/libnostall.so NOSTALL_CLI=build/nostall \
     /usr/bin/python3 -m pytest -q tests/python/test_transcode.py
"""

import filecmp
import io
import os
import subprocess

import pytest

try:
    import nostall
except ImportError as e:  # conftest skips everything with the reason
    pytest.skip(str(e), allow_module_level=True)


def epoch_checksum(path, **opts):
    state = 0
    with nostall.Loader(path, batch_size=8, crop=32, seed=5, epochs=1, output="uint8",
                        **opts) as ld:
        for images, labels in ld:
            state = nostall.checksum(images, labels, state)
    return state


def test_transcode_same_pixels_with_restart_markers(data, cli, tmp_path):
    dst = tmp_path / "rst"
    s = nostall.transcode(data, dst, threads=2, cli=cli)
    n = sum(len(f) for _, _, f in os.walk(data))
    assert s["files"] == n and s["jpegs"] == 40 and s["damaged"] == 0 and s["messages"] == []
    for root, _, files in os.walk(dst):
        for f in files:
            b = open(os.path.join(root, f), "rb").read()
            assert b[:2] == b"\xff\xd8" and b"\xff\xdd" in b[:b.index(b"\xff\xda")], f  # a DRI
    # lossless: the loader delivers the same bytes from both trees, train and eval
    assert epoch_checksum(data) == epoch_checksum(str(dst))
    assert epoch_checksum(data, mode="eval") == epoch_checksum(str(dst), mode="eval")


def test_transcode_reports_damage_and_refuses_bad_arguments(bad_data, cli, tmp_path):
    s = nostall.transcode(bad_data, tmp_path / "out", cli=cli)
    assert s["jpegs"] == 8 and s["copied"] == 1  # the text file named .jpg, copied as is
    with pytest.raises(ValueError, match="exists and is not empty"):
        nostall.transcode(bad_data, tmp_path / "out", cli=cli)
    assert nostall.transcode(bad_data, tmp_path / "out", force=True, cli=cli)["jpegs"] == 8
    with pytest.raises(ValueError, match="restart-mcus"):
        nostall.transcode(bad_data, tmp_path / "o2", restart_mcus=0, cli=cli)
    with pytest.raises(ValueError, match="exclude"):
        nostall.transcode(bad_data, tmp_path / "o3", restart_mcus=1, restart_rows=1, cli=cli)
    with pytest.raises(ValueError):
        nostall.transcode(bad_data, tmp_path / "o4", threads="2", cli=cli)
    with pytest.raises(ValueError, match="not a directory"):
        nostall.transcode(tmp_path / "missing", tmp_path / "o5", cli=cli)


def _tree(path):
    """{relative path: bytes} of every file under path."""
    out = {}
    for root, _, files in os.walk(path):
        for f in files:
            with open(os.path.join(root, f), "rb") as fh:
                out[os.path.relpath(os.path.join(root, f), path)] = fh.read()
    return out


def test_one_rewriter_any_threads_same_as_the_cli(data, cli, tmp_path):
    """Python's walk and the CLI's call the same library rewrite: the same
    bytes, for any thread count; a marker every 2 rows too."""
    a = nostall.transcode(data, tmp_path / "a", threads=1)
    b = nostall.transcode(data, tmp_path / "b", threads=3)
    subprocess.run([cli, "transcode", data, str(tmp_path / "c"), "--quiet"], check=True,
                   stdout=subprocess.DEVNULL)
    ta, tb, tc = _tree(tmp_path / "a"), _tree(tmp_path / "b"), _tree(tmp_path / "c")
    assert ta == tb == tc and len(ta) == 40
    assert ta != _tree(data)  # rewritten, not copied
    assert {k: a[k] for k in ("files", "jpegs", "copied", "damaged", "kept")} == \
        {k: b[k] for k in ("files", "jpegs", "copied", "damaged", "kept")}
    assert a["mb_in"] == round(sum(len(v) for v in _tree(data).values()) / 1e6, 1)
    assert a["mb_out"] == round(sum(len(v) for v in ta.values()) / 1e6, 1)
    nostall.transcode(data, tmp_path / "r", restart_rows=2)
    subprocess.run([cli, "transcode", data, str(tmp_path / "rc"), "--restart-rows", "2",
                    "--quiet"], check=True, stdout=subprocess.DEVNULL)
    assert _tree(tmp_path / "r") == _tree(tmp_path / "rc") != ta
    assert epoch_checksum(data) == epoch_checksum(str(tmp_path / "r"))


def test_kept_and_damaged_files_are_copied_and_reported(data, tmp_path):
    """A truncated JPEG is damaged, a CMYK one and an incomplete progressive
    one are kept (with the reason): all copied unchanged, each reported by
    name; nothing raises."""
    Image = pytest.importorskip("PIL.Image")
    src = tmp_path / "src" / "c"
    src.mkdir(parents=True)
    first = os.path.join(data, sorted(os.listdir(data))[0])
    good = open(os.path.join(first, sorted(os.listdir(first))[0]), "rb").read()
    (src / "good.jpg").write_bytes(good)
    (src / "trunc.jpg").write_bytes(good[:len(good) // 2])
    img = Image.open(io.BytesIO(good)).convert("RGB")
    img.convert("CMYK").save(src / "cmyk.jpg", quality=90)
    buf = io.BytesIO()
    img.convert("L").resize((96, 64)).save(buf, "JPEG", quality=90, progressive=True)
    d = buf.getvalue()
    sos = [i for i in range(len(d) - 1) if d[i] == 0xFF and d[i + 1] == 0xDA]
    (src / "partial.jpg").write_bytes(d[:sos[1]] + b"\xff\xd9")  # the DC scan only
    s = nostall.transcode(tmp_path / "src", tmp_path / "dst")
    assert (s["files"], s["jpegs"], s["damaged"], s["kept"], s["copied"]) == (4, 1, 1, 2, 0)
    msgs = "\n".join(s["messages"])
    assert "trunc.jpg: damaged JPEG (" in msgs
    assert "partial.jpg: kept as it is (progressive scans leave coefficients incomplete" in msgs
    assert "cmyk.jpg: kept as it is (not an 8-bit Huffman-coded grayscale or YCbCr" in msgs
    for name in ("trunc.jpg", "cmyk.jpg", "partial.jpg"):
        assert filecmp.cmp(src / name, tmp_path / "dst" / "c" / name, shallow=False), name
    assert not filecmp.cmp(src / "good.jpg", tmp_path / "dst" / "c" / "good.jpg", shallow=False)
    # rewriting the copy again: every JPEG already has its markers
    again = nostall.transcode(tmp_path / "dst", tmp_path / "dst2")
    assert again["jpegs"] == 0 and again["kept"] == 3 and again["damaged"] == 1
    assert "already has a restart marker every 1 MCU" in "\n".join(again["messages"])


def test_the_package_runs_no_program():
    """The binding calls the library: no subprocess anywhere in the package,
    but ray.py, whose Ray actors each run a `nostall serve` (docs/design.md:
    a placement adapter on other nodes, not the binding)."""
    pkg = os.path.dirname(nostall.__file__)
    for name in sorted(os.listdir(pkg)):
        if name.endswith(".py") and name != "ray.py":
            with open(os.path.join(pkg, name), encoding="utf-8") as f:
                assert "subprocess" not in f.read(), name
