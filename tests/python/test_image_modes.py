"""Image modes, layouts and dtypes through the Python face (docs/images.md).

Shapes and torch dtypes of every output (bfloat16 as torch.bfloat16), the
16-bit outputs equal to torch's own conversion of the float32 output, NHWC
as NCHW permuted, resize against torchvision's Resize((h, w)) on the PIL
image (and the letterbox's border), full images equal to PIL's decode,
train mode drawing the flip alone, and the same bytes for any thread count
and after a resume mid-epoch.

Run: /usr/bin/python3 -m pytest tests/python/test_image_modes.py -q
"""

import os

import numpy as np
import pytest

try:
    import nostall
except ImportError as e:  # conftest skips everything with the reason
    pytest.skip(str(e), allow_module_level=True)

torch = pytest.importorskip("torch")

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
EVAL = dict(mode="eval", shuffle=False, batch_size=40, copy=True, threads=2)
FULL = dict(image_mode="full", full_max_pixels=6000)  # a room of 6000 pixels per image


def images_labels(batch):
    """(images, labels) of a batch: image_mode=full yields a dict by field
    name ("image" a list of per-item tensors, "image_shape", "label")."""
    if isinstance(batch, dict):
        shapes = batch["image_shape"]
        assert [tuple(t.shape) for t in batch["image"]] == [tuple(s) for s in shapes.tolist()]
        return batch["image"], batch["label"]
    return batch


def first_batch(data, **opts):
    with nostall.Loader(data, **opts) as ld:
        images, labels = images_labels(next(iter(ld)))
        return images, labels, ld.last_indices.tolist()


def samples(data):
    """(path, label) in the loader's ImageFolder order."""
    out = []
    for k, cls in enumerate(sorted(os.listdir(data))):
        for f in sorted(os.listdir(os.path.join(data, cls))):
            out.append((os.path.join(data, cls, f), k))
    return out


@pytest.mark.parametrize("output,dtype", [("float", torch.float32), ("uint8", torch.uint8),
                                          ("float16", torch.float16),
                                          ("bfloat16", torch.bfloat16)])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_shapes_and_dtypes(data, output, dtype, layout):
    nchw = layout == "nchw"
    for mode in (dict(crop=20), dict(out_height=16, out_width=24),
                 dict(image_mode="resize", out_height=18, out_width=26),
                 dict(image_mode="resize", fit="pad", out_height=20, out_width=20)):
        x, labels, _ = first_batch(data, output=output, layout=layout, **EVAL, **mode)
        h, w = mode.get("out_height", mode.get("crop")), mode.get("out_width", mode.get("crop"))
        assert x.dtype == dtype, (mode, x.dtype)
        assert tuple(x.shape) == ((40, 3, h, w) if nchw else (40, h, w, 3)), mode
        assert labels.dtype == torch.int64
    imgs, labels, idx = first_batch(data, output=output, layout=layout, **FULL, **EVAL)
    assert isinstance(imgs, list) and len(imgs) == 40 and labels.shape == (40,)
    from PIL import Image
    paths = samples(data)
    for t, i in zip(imgs, idx):
        W, H = Image.open(paths[i][0]).size
        assert t.dtype == dtype and tuple(t.shape) == ((3, H, W) if nchw else (H, W, 3))


@pytest.mark.parametrize("mode", [dict(crop=20, mode="train", seed=3),
                                  dict(image_mode="resize", out_height=30, out_width=20, fit="pad")])
def test_dtypes_are_the_float_output_converted(data, mode):
    """float16 and bfloat16 are torch's own (round to nearest even)
    conversion of the float32 output; NHWC is NCHW permuted; float is
    uint8 normalized."""
    opts = dict(EVAL, **mode)
    f32, _, _ = first_batch(data, output="float", **opts)
    u8, _, _ = first_batch(data, output="uint8", layout="nchw", **opts)
    u8h, _, _ = first_batch(data, output="uint8", **opts)
    assert torch.equal(u8h, u8.permute(0, 2, 3, 1))
    want = (u8.float() / 255 - torch.tensor(MEAN).view(3, 1, 1)) / torch.tensor(STD).view(3, 1, 1)
    assert float((f32 - want).abs().max()) < 1e-5
    f32h, _, _ = first_batch(data, output="float", layout="nhwc", **opts)
    assert torch.equal(f32h, f32.permute(0, 2, 3, 1))
    for out, dt in (("float16", torch.float16), ("bfloat16", torch.bfloat16)):
        x, _, _ = first_batch(data, output=out, **opts)
        assert torch.equal(x, f32.to(dt)), out
        y, _, _ = first_batch(data, output=out, layout="nhwc", **opts)
        assert torch.equal(y, x.permute(0, 2, 3, 1)), out


def test_resize_matches_torchvision(data):
    """image_mode=resize is torchvision's Resize((h, w)) (antialiased
    bilinear, PIL's) of the whole image: within a grey level at full-scale
    decoding, within the crop tests' tolerance where the JPEG is decoded at
    a reduced DCT scale (outputs under half the image)."""
    tv = pytest.importorskip("torchvision")
    from PIL import Image
    T = tv.transforms
    paths = samples(data)
    for (h, w), mean_tol in (((40, 36), 1.0), ((17, 23), 6.0)):
        x, _, idx = first_batch(data, output="uint8", image_mode="resize", out_height=h,
                                out_width=w, **EVAL)
        errs = []
        for k, i in enumerate(idx):
            img = Image.open(paths[i][0]).convert("RGB")
            ref = T.PILToTensor()(T.Resize((h, w), antialias=True)(img)).permute(1, 2, 0)
            errs.append(float((x[k].float() - ref.float()).abs().mean()))
        assert max(errs) < mean_tol, ((h, w), max(errs))


def test_letterbox(data):
    """fit=pad: the image scaled with its aspect kept, centred; the border
    is pixel 0 before normalization."""
    tv = pytest.importorskip("torchvision")
    from PIL import Image
    T = tv.transforms
    paths = samples(data)
    H = W = 40
    u8, _, idx = first_batch(data, output="uint8", image_mode="resize", fit="pad",
                             out_height=H, out_width=W, **EVAL)
    f32, _, _ = first_batch(data, output="float", image_mode="resize", fit="pad",
                            out_height=H, out_width=W, **EVAL)
    border = torch.tensor([(0 - m) / s for m, s in zip(MEAN, STD)])
    bordered = 0
    for k, i in enumerate(idx):
        img = Image.open(paths[i][0]).convert("RGB")
        sw, sh = img.size
        if W * sh <= H * sw:
            iw, ih = W, max(1, (sh * W + sw // 2) // sw)
        else:
            iw, ih = max(1, (sw * H + sh // 2) // sh), H
        left, top = (W - iw) // 2, (H - ih) // 2
        inner = u8[k, top:top + ih, left:left + iw].float()
        ref = T.PILToTensor()(T.Resize((ih, iw), antialias=True)(img)).permute(1, 2, 0).float()
        assert float((inner - ref).abs().mean()) < 1.0, i
        mask = torch.ones(H, W, dtype=torch.bool)
        mask[top:top + ih, left:left + iw] = False
        bordered += bool(mask.any())
        assert int(u8[k][mask].abs().sum()) == 0
        got = f32[k].permute(1, 2, 0)[mask]
        assert torch.allclose(got, border.expand_as(got), atol=1e-6)
    assert bordered > 20  # the dataset's aspects are not all square


def test_full_is_the_decoded_image(data):
    """image_mode=full: every image at its own size, the pixels PIL decodes
    (the same libjpeg-turbo settings); train mode mirrors some."""
    from PIL import Image
    paths = samples(data)
    imgs, _, idx = first_batch(data, output="uint8", **FULL, **EVAL)
    for t, i in zip(imgs, idx):
        ref = np.asarray(Image.open(paths[i][0]).convert("RGB"))
        assert np.array_equal(t.numpy(), ref), paths[i][0]
    opts = dict(EVAL, mode="train", seed=11, shuffle=False)
    tr, _, idx2 = first_batch(data, output="uint8", **FULL, **opts)
    assert idx2 == idx
    flipped = 0
    for a, b in zip(tr, imgs):
        assert torch.equal(a, b) or torch.equal(a, b.flip(1))
        flipped += not torch.equal(a, b)
    assert 5 < flipped < 35


def test_resize_train_is_flip_only(data):
    """Train mode of image_mode=resize draws the flip alone."""
    opts = dict(EVAL, image_mode="resize", out_height=20, out_width=28, output="float16")
    ev, _, idx = first_batch(data, **opts)
    tr, _, idx2 = first_batch(data, **dict(opts, mode="train", seed=2))
    assert idx == idx2
    flipped = [not torch.equal(a, b) for a, b in zip(tr, ev)]
    for a, b, f in zip(tr, ev, flipped):
        assert torch.equal(a, b.flip(-1) if f else b)
    assert 5 < sum(flipped) < 35


def collect(ld, n=None):
    out = []
    for batch in ld:
        images, _ = images_labels(batch)
        out.append((list(ld.last_indices), images))
        if n is not None and len(out) == n:
            break
    return out


def same(a, b):
    if isinstance(a, list):
        return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))
    return torch.equal(a, b)


@pytest.mark.parametrize("mode", [dict(image_mode="resize", fit="pad", out_height=24,
                                       out_width=16, output="bfloat16"),
                                  dict(image_mode="full", output="float16", layout="nhwc",
                                       full_max_pixels=6000)])
def test_threads_and_resume(data, mode):
    opts = dict(batch_size=6, seed=4, copy=True, **mode)
    with nostall.Loader(data, threads=1, **opts) as ld:
        collect(ld)
        full = collect(ld)  # epoch 1
    with nostall.Loader(data, threads=3, **opts) as ld:
        collect(ld)
        again = collect(ld)
    assert all(i == j and same(a, b) for (i, a), (j, b) in zip(full, again))
    with nostall.Loader(data, threads=2, **opts) as ld:
        ld.set_epoch(1)
        head = collect(ld, 3)
        state = ld.state_dict()
    with nostall.Loader(data, threads=2, **opts) as ld:
        ld.load_state_dict(state)
        tail = collect(ld)
    got = head + tail
    assert len(got) == len(full)
    assert all(i == j and same(a, b) for (i, a), (j, b) in zip(got, full))


def test_refusals(data):
    with pytest.raises(nostall.OptionError if hasattr(nostall, "OptionError") else Exception,
                       match="fit=pad"):
        nostall.Loader(data, fit="pad")
    with pytest.raises(Exception, match="image_mode=full"):
        nostall.Loader(data, out_width=32, **FULL)
