"""decode_device: "cuda" is the library's "gpu" ("cuda:N" sets gpu_id), and
on a machine or build without a GPU, nvJPEG or CUDA the loader is refused at
create with a message naming the missing piece; "cpu" is the default."""

import pytest

import nostall
from conftest import gen


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    d = tmp_path_factory.mktemp("gpu_decode")
    gen(str(d / "d"), 12, 2)
    return str(d / "d")


@pytest.mark.parametrize("device", ["gpu", "cuda", "cuda:0"])
def test_gpu_refused_naming_the_missing_piece(images, device, monkeypatch):
    monkeypatch.setenv("NOSTALL_TEST_NVJPEG", "/nonexistent/libnvjpeg.so.99")
    with pytest.raises(nostall.Error) as e:
        nostall.Loader(images, batch_size=4, crop=32, decode_device=device)
    msg = str(e.value)
    assert "decode_device=gpu: " in msg, msg
    assert any(m in msg for m in ("built without CUDA", "built without nvjpeg.h",
                                  "libnvjpeg not found")), msg


def test_cuda_index_conflicts_with_gpu_id(images):
    with pytest.raises(nostall.Error, match="gpu_id"):
        nostall.Loader(images, batch_size=4, crop=32, decode_device="cuda:1", gpu_id=2)


def test_cpu_is_the_default(images):
    with nostall.Loader(images, batch_size=4, crop=32, epochs=1, seed=1, output="uint8",
                        decode_device="cpu") as a:
        assert a.config["decode_device"] == "cpu" and a.config["gpu_id"] == "0"
        xa = [b[0].numpy().tobytes() for b in a]
    with nostall.Loader(images, batch_size=4, crop=32, epochs=1, seed=1, output="uint8") as b:
        xb = [x[0].numpy().tobytes() for x in b]
    assert xa == xb


# -- gpu_output="device" (decode_device="cuda"): the device ring through
# DLPack, with the library's fake backend (NOSTALL_TEST_GPU_FAKE=1, a test
# build): its "device" memory is host memory, so the tensors are kDLCPU.

def _fake_loader(images, monkeypatch, **kw):
    monkeypatch.setenv("NOSTALL_TEST_GPU_FAKE", "1")
    opts = dict(batch_size=4, crop=32, epochs=1, seed=3, output="uint8", threads=2)
    opts.update(kw)
    try:
        return nostall.Loader(images, **opts)
    except nostall.Error as e:  # a library without the test hooks: no fake backend
        if "decode_device=gpu: " in str(e):
            pytest.skip("no fake GPU backend in this library: %s" % e)
        raise


def _host_reference(images, monkeypatch, **kw):
    with _fake_loader(images, monkeypatch, decode_device="gpu", **kw) as h:
        assert h.config["gpu_output"] == "host"
        return [(_bytes(x), y.tolist()) for x, y in h]


def _bytes(x):
    import torch
    return (x.view(torch.int16) if x.dtype == torch.bfloat16 else x).numpy().tobytes()


@pytest.mark.parametrize("output", ["uint8", "float", "bfloat16"])
def test_device_ring_dlpack_equals_the_host_route(images, monkeypatch, output):
    import gc
    import torch
    from nostall import _dlpack
    want = _host_reference(images, monkeypatch, output=output)
    with _fake_loader(images, monkeypatch, decode_device="cuda", output=output) as ld:
        assert ld.config["gpu_output"] == "device" and ld.config["decode_device"] == "gpu"
        got = []
        for x, y in ld:
            assert isinstance(x, torch.Tensor) and x.device.type == "cpu"
            assert x.data_ptr() == ld.last_batch_address  # a view of the slot, no copy
            assert x.dtype == {"uint8": torch.uint8, "float": torch.float32,
                               "bfloat16": torch.bfloat16}[output]
            assert x.shape[1:] == (32, 32, 3) or x.shape[1:] == (3, 32, 32)
            got.append((_bytes(x), y.tolist()))
            del x
        gc.collect()
        assert ld._core.leases == 0 and _dlpack.live() == 0  # every slot given back
    assert got == want


def test_device_ring_tensors_outlive_the_loader_and_the_ring_never_runs_dry(
        images, monkeypatch):
    import gc
    from nostall import _dlpack
    want = _host_reference(images, monkeypatch, batch_size=2)
    ld = _fake_loader(images, monkeypatch, decode_device="cuda", batch_size=2)
    kept = list(ld)  # every batch kept: past the ring's slots they are copies
    assert len(kept) == len(want) > ld.info()["ring_slots"]
    ld.close()  # the lent slots stay valid
    assert [(_bytes(x), y.tolist()) for x, y in kept] == want
    del kept
    gc.collect()
    assert _dlpack.live() == 0 and ld._core.ld is None  # freed with the last tensor


def test_device_ring_with_the_defaults_skips_bad_files_as_the_host_route(
        tmp_path, monkeypatch):
    """Loader(path, decode_device="cuda") with the library's defaults
    (on_bad_item="skip"): bad files are skipped with a warning, the batches
    compacted and topped up on the device ring; the same bytes, labels and
    skipped files as the host route."""
    import gc
    from nostall import _dlpack
    d = str(tmp_path / "bad")
    gen(d, 24, 2)
    import os
    cls = sorted(os.listdir(d))
    with open(os.path.join(d, cls[0], "zz_junk.jpg"), "wb") as f:
        f.write(b"junk")
    with open(os.path.join(d, cls[1], "aa_junk.jpg"), "wb") as f:
        f.write(b"junk")
    monkeypatch.setenv("NOSTALL_TEST_GPU_FAKE", "1")
    got = {}
    for dd in ("gpu", "cuda"):
        try:
            ld = nostall.Loader(d, batch_size=5, crop=32, seed=3, epochs=1,
                                max_bad_fraction=1, decode_device=dd)
        except nostall.Error as e:
            if "decode_device=gpu: " in str(e):
                pytest.skip("no fake GPU backend in this library: %s" % e)
            raise
        with ld:
            assert ld.config["on_bad_item"] == "skip"
            assert ld.config["gpu_output"] == ("device" if dd == "cuda" else "host")
            with pytest.warns(RuntimeWarning, match="2 bad item"):
                got[dd] = [(_bytes(x), y.tolist()) for x, y in ld]
            got[dd + " skipped"] = sorted(os.path.basename(s["path"]) for s in ld.skipped())
        gc.collect()
        assert _dlpack.live() == 0
    assert got["cuda skipped"] == got["gpu skipped"] == ["aa_junk.jpg", "zz_junk.jpg"]
    assert len(got["cuda"]) >= 4 and got["cuda"] == got["gpu"]


@pytest.mark.parametrize("point", ["fetch", "decode", "augment", "batch"])
def test_device_ring_echoes_as_the_host_route(images, monkeypatch, point):
    """Fixed echoing with decode_device="cuda": fetch (each copy decoded on
    the route), decode (the kept image re-augmented on the route), augment
    (a device store, device-to-device copies) and batch (slots re-lent)
    give the host route's tensors."""
    import gc
    from nostall import _dlpack
    kw = dict(echo_factor=2, echo_point=point)
    want = _host_reference(images, monkeypatch, **kw)
    with _fake_loader(images, monkeypatch, decode_device="cuda", **kw) as ld:
        got = [(_bytes(x), y.tolist()) for x, y in ld]
        assert ld.stats()["echoed_items"] > 0
    gc.collect()
    assert _dlpack.live() == 0
    assert got == want and len(got) == 6


def test_device_ring_detection_boxes_on_the_host(tmp_path, monkeypatch):
    """task=detect with decode_device="cuda": a dict as the host path's,
    the image a DLPack tensor of the device ring, the boxes, labels and
    counts host tensors; all equal to the host route's."""
    import gc
    import subprocess
    import torch
    from conftest import CLI
    from nostall import _dlpack
    d = str(tmp_path / "det")
    subprocess.run([CLI, "gen", "--task", "detect", d, "--images", "12", "--classes", "3",
                    "--objects", "4", "--width", "64", "--height", "48", "--seed", "2",
                    "--quiet"], check=True)
    kw = dict(task="detect", out_height=40, out_width=40, max_boxes=5, batch_size=4,
              box_crop="iou")
    got = {}
    for dd in ("gpu", "cuda"):
        with _fake_loader(d + "/instances.json", monkeypatch, decode_device=dd, **kw) as ld:
            rows = []
            for b in ld:
                assert isinstance(b, dict) and isinstance(b["image"], torch.Tensor)
                if dd == "cuda":
                    assert b["image"].data_ptr() == ld.last_batch_address
                rows.append((_bytes(b["image"]), [x.tolist() for x in b["boxes"]],
                             [x.tolist() for x in b["box_labels"]], b["box_count"].tolist()))
                del b
            got[dd] = rows
        gc.collect()
        assert _dlpack.live() == 0
    assert got["cuda"] == got["gpu"] and len(got["cuda"]) == 3
    assert any(c > 0 for r in got["cuda"] for c in r[3])


def test_device_ring_refusals_name_why(images, monkeypatch):
    with pytest.raises(nostall.Error, match="echo=adaptive"):
        _fake_loader(images, monkeypatch, decode_device="cuda", echo="adaptive")
    with pytest.raises(nostall.Error, match="already on the GPU"):
        _fake_loader(images, monkeypatch, decode_device="cuda", pin_memory=True)
    with pytest.raises(nostall.Error, match="gpu_output=device: it needs decode_device=gpu"):
        _fake_loader(images, monkeypatch, gpu_output="device")
