"""nostall.transcode(): the lossless restart-marker copy from Python.

Run: NOSTALL_LIBRARY=build/libnostall.so NOSTALL_CLI=build/nostall \
     /usr/bin/python3 -m pytest -q tests/python/test_transcode.py
"""

import os

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
