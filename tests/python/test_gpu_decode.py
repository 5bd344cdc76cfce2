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
