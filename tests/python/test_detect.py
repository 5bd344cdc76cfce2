"""task=detect through the Python face: boxes follow the pixels, and match a
numpy reference of the same semantics.

The dataset is drawn here: PNG images (lossless, so colours are exact) of a
black background with solid rectangles, each category its own pure colour
and at most one object of a category per image, with gaps between objects.
Its COCO file lists images and categories out of id order (ids with gaps),
so the item order (images by id) and the labels (categories by id) are
checked too.

1. Pixels (uint8 output). In every delivered image, the pixels of an
   object's colour (coverage > 0.59 of the colour over black) must lie
   inside its delivered box (+-1 px) and fill it to within 1.5 px; an object
   whose box was not delivered must leave no such pixel (rrc, none, eval),
   or -- RandomIoUCrop drops boxes whose centre left the crop -- only a
   strip that touches the image border and is less than half the object
   (its centre is outside). These checks use the truth (the rectangles we
   drew) and the delivered bytes only.

2. Reference. The same draws are reproduced here from the documented rule
   (docs/detect.md): the item's stream is splitmix64 seeded by
   hash4(seed, epoch, item, 2), written again in Python integers (as
   test_tokens.py does); the geometry -- RandomIoUCrop's search, the
   box-aware RandomResizedCrop, clipping, the centre rule, flip, resize,
   letterbox -- is written from torchvision's semantics in numpy, not
   ported from detect.c. Sharing the random stream is what makes a
   box-by-box comparison possible at all; everything that decides where a
   box goes is computed independently. Boxes must agree within 1 px (they
   agree to float rounding), counts, labels and crowd flags exactly.
"""

import json
import math
import os

import numpy as np
import pytest

import nostall

PIL = pytest.importorskip("PIL.Image")

M64 = (1 << 64) - 1
COLOURS = [(255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 0), (255, 0, 255), (0, 255, 255)]
CAT_IDS = [34, 3, 21, 5, 13, 8]  # listed in this order; labels follow the sorted ids
LABEL = {cid: i for i, cid in enumerate(sorted(CAT_IDS))}


# -- the random stream (src/common/rng.h) -------------------------------------

def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def hash4(a, b, c, d):
    h = mix64((a + 0x9E3779B97F4A7C15) & M64)
    h = mix64(h ^ ((b + 0x632BE59BD9B4E019) & M64))
    h = mix64(h ^ ((c + 0x85157AF5) & M64))
    return mix64(h ^ ((d + 0x3C6EF372FE94F82B) & M64))


class Stream:
    def __init__(self, seed):
        self.s = seed

    def u64(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & M64
        return mix64(self.s)

    def double(self):
        return (self.u64() >> 11) * (1.0 / 9007199254740992.0)

    def below(self, n):
        m = self.u64() * n
        if (m & M64) < n:
            t = ((1 << 64) - n) % n
            while (m & M64) < t:
                m = self.u64() * n
        return m >> 64


# -- the reference (torchvision's semantics) ------------------------------------

OPTIONS = [0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0]


def iou_crop(W, H, boxes, rng):
    """RandomIoUCrop._get_params, its loop bounded to 50 options; None: no crop."""
    if len(boxes) == 0:
        return None
    b = np.asarray(boxes, dtype=np.float64)
    for _ in range(50):
        need = OPTIONS[rng.below(len(OPTIONS))]
        if need >= 1.0:
            return None
        for _ in range(40):
            r0, r1 = rng.double(), rng.double()
            new_w, new_h = int(W * (0.3 + 0.7 * r0)), int(H * (0.3 + 0.7 * r1))
            if new_h == 0 or not 0.5 <= new_w / new_h <= 2.0:
                continue
            r2, r3 = rng.double(), rng.double()
            left, top = int((W - new_w) * r2), int((H - new_h) * r3)
            right, bottom = left + new_w, top + new_h
            if left == right or top == bottom:
                continue
            cx, cy = (b[:, 0] + b[:, 2]) / 2, (b[:, 1] + b[:, 3]) / 2
            inside = (left < cx) & (cx < right) & (top < cy) & (cy < bottom)
            if not inside.any():
                continue
            k = b[inside]
            iw = np.clip(np.minimum(k[:, 2], right) - np.maximum(k[:, 0], left), 0, None)
            ih = np.clip(np.minimum(k[:, 3], bottom) - np.maximum(k[:, 1], top), 0, None)
            inter = iw * ih
            union = (k[:, 2] - k[:, 0]) * (k[:, 3] - k[:, 1]) + new_w * new_h - inter
            if (inter / union).max() < need:
                continue
            return (left, top, new_w, new_h)
    return None


def rrc(W, H, rng, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """RandomResizedCrop.get_params."""
    area = W * H
    for _ in range(10):
        target = area * (scale[0] + (scale[1] - scale[0]) * rng.double())
        lr0, lr1 = math.log(ratio[0]), math.log(ratio[1])
        aspect = math.exp(lr0 + (lr1 - lr0) * rng.double())
        w, h = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))
        if 0 < w <= W and 0 < h <= H:
            top = rng.below(H - h + 1)
            left = rng.below(W - w + 1)
            return (left, top, w, h)
    r = W / H
    w, h = W, H
    if r < min(ratio):
        h = round(W / min(ratio))
    elif r > max(ratio):
        w = round(H * max(ratio))
    return ((W - w) // 2, (H - h) // 2, w, h)


def letterbox(sw, sh, ow, oh):
    """(pad_left, pad_top, inner_w, inner_h): aspect kept, centred."""
    if ow * sh <= oh * sw:
        iw, ih = ow, max(1, min(oh, (sh * ow + sw // 2) // sw))
    else:
        iw, ih = max(1, min(ow, (sw * oh + sh // 2) // sh)), oh
    return ((ow - iw) // 2, (oh - ih) // 2, iw, ih)


def reference(item, W, H, boxes, seed, epoch, o):
    """(window, flip, placement, [(x0, y0, x1, y1, label, crowd)]) for one use."""
    win, flip, iou = (0, 0, W, H), False, False
    if o["mode"] == "train":
        rng = Stream(hash4(seed, epoch, item, 2))
        if o["box_crop"] == "iou":
            w = iou_crop(W, H, [b[:4] for b in boxes], rng)
            if w is not None:
                win, iou = w, True
        elif o["box_crop"] == "rrc":
            win = rrc(W, H, rng)
        flip = rng.double() < o["flip_prob"]
    wx, wy, ww, wh = win
    ow, oh = o["out_width"], o["out_height"]
    place = letterbox(ww, wh, ow, oh) if o["fit"] == "pad" else (0, 0, ow, oh)
    px, py, iw, ih = place
    out = []
    for x0, y0, x1, y1, label, crowd in boxes:
        if iou and not (wx < (x0 + x1) / 2 < wx + ww and wy < (y0 + y1) / 2 < wy + wh):
            continue
        cx0, cy0 = max(x0, wx), max(y0, wy)
        cx1, cy1 = min(x1, wx + ww), min(y1, wy + wh)
        if cx1 <= cx0 or cy1 <= cy0:
            continue
        a, b = (cx0 - wx) * iw / ww, (cx1 - wx) * iw / ww
        if flip:
            a, b = iw - b, iw - a
        out.append((px + a, py + (cy0 - wy) * ih / wh, px + b, py + (cy1 - wy) * ih / wh, label, crowd))
        if len(out) == o["max_boxes"]:
            break
    return win, flip, place, out


# -- the dataset ---------------------------------------------------------------

def draw_dataset(root, n=24, seed=5):
    """PNG images with rectangles; returns (annotation file, truth by path)."""
    rs = np.random.RandomState(seed)
    os.makedirs(os.path.join(root, "img"), exist_ok=True)
    images, anns, truth = [], [], {}
    ids = rs.permutation(np.arange(100, 100 + 3 * n, 3))[:n]
    for k in range(n):
        W, H = int(rs.randint(60, 140)), int(rs.randint(60, 140))
        px = np.zeros((H, W, 3), np.uint8)
        objs, tries = [], 0
        cats = rs.permutation(len(COLOURS))[: int(rs.randint(2, 6))]
        for c in cats:
            while tries < 400:
                tries += 1
                w, h = int(rs.randint(6, W // 2)), int(rs.randint(6, H // 2))
                x, y = int(rs.randint(0, W - w + 1)), int(rs.randint(0, H - h + 1))
                if all(x + w + 4 <= o[0] or o[2] + 4 <= x or y + h + 4 <= o[1] or o[3] + 4 <= y
                       for o in objs):
                    px[y:y + h, x:x + w] = COLOURS[c]
                    objs.append((x, y, x + w, y + h, int(c)))
                    break
        name = "img/i%03d.png" % k
        PIL.fromarray(px).save(os.path.join(root, name))
        images.append({"id": int(ids[k]), "file_name": name, "width": W, "height": H})
        for j, (x0, y0, x1, y1, c) in enumerate(objs):
            anns.append({"id": len(anns) + 1, "image_id": int(ids[k]), "category_id": CAT_IDS[c],
                         "bbox": [x0, y0, x1 - x0, y1 - y0], "iscrowd": int(j == 1 and k % 3 == 0)})
        truth[os.path.join(root, name)] = {
            "size": (W, H), "id": int(ids[k]),
            "boxes": [(x0, y0, x1, y1, LABEL[CAT_IDS[c]], int(j == 1 and k % 3 == 0))
                      for j, (x0, y0, x1, y1, c) in enumerate(objs)]}
    path = os.path.join(root, "instances.json")
    with open(path, "w") as f:
        json.dump({"images": images, "annotations": anns,
                   "categories": [{"id": c, "name": "c%d" % c} for c in CAT_IDS]}, f)
    return path, truth


@pytest.fixture(scope="module")
def drawn(tmp_path_factory):
    return draw_dataset(str(tmp_path_factory.mktemp("detect")))


def np_(t):
    return t.numpy() if hasattr(t, "numpy") else np.asarray(t)


def batches(ann, epochs=1, **opts):
    """Every delivered item: (index, path, epoch, image, boxes, labels, crowd, count)."""
    out = []
    with nostall.Loader(ann, task="detect", copy=True, epochs=epochs, **opts) as ld:
        for epoch in range(epochs):
            ld.set_epoch(epoch)
            for b in ld:
                idx = ld.last_indices.tolist()
                count = np_(b["box_count"])
                assert list(b.keys()) == ["image", "boxes", "box_labels", "iscrowd", "box_count",
                                          "boxes_shape"]
                for k, i in enumerate(idx):
                    boxes = np_(b["boxes"][k])
                    assert boxes.shape == (count[k], 4)
                    assert np_(b["boxes_shape"])[k].tolist() == [count[k], 4]
                    out.append((i, ld.item(i)[0], epoch, np_(b["image"][k]), boxes,
                                np_(b["box_labels"][k]), np_(b["iscrowd"][k]), int(count[k])))
        info = ld.info()
    return out, info


def colour_mask(img, c):
    on = [ch for ch in range(3) if COLOURS[c][ch]]
    off = [ch for ch in range(3) if not COLOURS[c][ch]]
    m = np.ones(img.shape[:2], bool)
    for ch in on:
        m &= img[..., ch] > 150
    for ch in off:
        m &= img[..., ch] < 90
    return m


def check_pixels(item, truth, opts, win_of=None, place=None):
    """The pixel-level acceptance for one delivered uint8 item."""
    i, path, epoch, img, boxes, labels, crowd, n = item
    t = truth[path]
    H, W = img.shape[:2]
    assert (H, W) == (opts["out_height"], opts["out_width"])
    delivered = {int(l): boxes[k] for k, l in enumerate(labels)}
    assert len(delivered) == n  # one object per category
    for x0, y0, x1, y1, label, _ in t["boxes"]:

        c = CAT_IDS.index(sorted(CAT_IDS)[label])
        m = colour_mask(img, c)
        ys, xs = np.nonzero(m)
        if label in delivered:
            bx = delivered[label]
            assert bx[0] < bx[2] and bx[1] < bx[3]
            if len(xs):
                assert xs.min() + 0.5 >= bx[0] - 1 and xs.max() + 0.5 <= bx[2] + 1, (path, label, bx)
                assert ys.min() + 0.5 >= bx[1] - 1 and ys.max() + 0.5 <= bx[3] + 1, (path, label, bx)
                # and the box is tight: the pixels reach its edges
                assert xs.min() <= bx[0] + 1.5 and xs.max() + 1 >= bx[2] - 1.5, (path, label, bx, xs)
                assert ys.min() <= bx[1] + 1.5 and ys.max() + 1 >= bx[3] - 1.5, (path, label, bx, ys)
            else:  # only a sliver may fail to reach full coverage
                assert min(bx[2] - bx[0], bx[3] - bx[1]) < 2.5, (path, label, bx)
        elif opts.get("box_crop") == "iou" and opts["mode"] == "train" and len(xs):
            # centre outside the crop: what is left is cut by the border (of
            # the letterbox's inner rectangle)
            px, py, iw, ih = place or (0, 0, W, H)
            assert (xs.min() <= px + 1 or ys.min() <= py + 1 or xs.max() >= px + iw - 2
                    or ys.max() >= py + ih - 2), (path, label)
            assert win_of is not None
            wx, wy, ww, wh = win_of(item)
            cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
            assert not (wx < cx < wx + ww and wy < cy < wy + wh), (path, label)
        else:
            assert len(xs) == 0, (path, label, "dropped object left %d pixels" % len(xs))



BASE = dict(batch_size=5, threads=2, seed=11, output="uint8", out_height=64, out_width=64,
            max_boxes=8, flip_prob=0.5)


def win_from_reference(opts, truth):
    def f(item):
        i, path, epoch = item[:3]
        t = truth[path]
        return reference(i, *t["size"], t["boxes"], opts["seed"], epoch, opts)[0]
    return f


def full(opts):
    o = dict(BASE, mode="train", box_crop="iou", fit="stretch")
    o.update(opts)
    return o


@pytest.mark.parametrize("opts", [
    dict(box_crop="iou"),
    dict(box_crop="rrc"),
    dict(box_crop="none"),
    dict(mode="eval"),
    dict(box_crop="iou", flip_prob=1.0),
    dict(box_crop="iou", out_height=48, out_width=80),
    dict(box_crop="rrc", fit="pad"),
    dict(box_crop="iou", fit="pad", out_height=72, out_width=40),
    dict(mode="eval", fit="pad", out_height=40, out_width=72),
], ids=["iou", "rrc", "none", "eval", "iou-flip", "iou-48x80", "rrc-pad", "iou-pad-72x40", "eval-pad-40x72"])
def test_pixels_and_reference(drawn, opts):
    ann, truth = drawn
    o = full(opts)
    items, info = batches(ann, epochs=3, **{k: v for k, v in o.items()})
    assert info["items"] == len(truth)
    assert info["parts_clipped"] == info["parts_dropped"] == info["parts_unmatched"] == 0
    assert info["items_missing"] == info["items_truncated"] == 0
    worst, crops, flips, dropped = 0.0, 0, 0, 0
    for item in items:
        i, path, epoch, img, boxes, labels, crowd, n = item
        t = truth[path]
        win, flip, place, ref = reference(i, *t["size"], t["boxes"], o["seed"], epoch, o)
        check_pixels(item, truth, o, win_from_reference(o, truth), place)
        if o["fit"] == "pad":  # the letterbox border is pixel value 0, the window fills the rest
            px, py, iw, ih = place
            inner = np.zeros(img.shape[:2], bool)
            inner[py:py + ih, px:px + iw] = True
            assert not img[~inner].any(), (path, place)
        assert n == len(ref), (path, epoch, boxes, ref)
        if n:
            r = np.array([b[:4] for b in ref], np.float64)
            worst = max(worst, float(np.abs(boxes - r).max()))
        assert labels.tolist() == [b[4] for b in ref]
        assert crowd.tolist() == [b[5] for b in ref]
        crops += win != (0, 0) + t["size"]
        flips += flip
        dropped += len(t["boxes"]) - n
    print("%s: %d items, %d cropped, %d flipped, %d boxes dropped, worst box difference %.2e px"
          % (opts, len(items), crops, flips, dropped, worst))
    assert worst <= 1.0
    if o["mode"] == "train" and o["box_crop"] != "none":
        assert crops > len(items) // 4 and dropped > 0  # the test saw crops that cut objects
    if o["mode"] == "train" and o["flip_prob"] == 0.5:
        assert 0 < flips < len(items)


def test_items_by_id_and_labels_by_category(drawn):
    ann, truth = drawn
    order = sorted(truth, key=lambda p: truth[p]["id"])
    with nostall.Loader(ann, task="detect", out_height=32, out_width=32) as ld:
        assert [ld.item(i)[0] for i in range(len(order))] == order
    items, _ = batches(ann, **full(dict(mode="eval", shuffle=False)))
    for i, path, _, _, boxes, labels, crowd, n in items:
        assert labels.tolist() == [b[4] for b in truth[path]["boxes"]]
        assert crowd.tolist() == [b[5] for b in truth[path]["boxes"]]


def test_box_labels_category_id(drawn):
    """box_labels="category_id": each box's COCO category_id (torchvision's
    detection references train on those, 0 being the background)."""
    ann, truth = drawn
    ids = sorted(CAT_IDS)
    items, _ = batches(ann, **full(dict(mode="eval", shuffle=False, box_labels="category_id")))
    assert items
    for i, path, _, _, boxes, labels, crowd, n in items:
        assert labels.tolist() == [ids[b[4]] for b in truth[path]["boxes"]]


def test_file_name_outside_root_refused(tmp_path):
    """An annotation file naming ../secret fails create without a byte of
    the file in the message; allow_outside_root=True reads it."""
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "credentials").write_text("aws_secret_access_key = AKIASECRET\n")
    (tmp_path / "root").mkdir()
    p = tmp_path / "root" / "ann.json"
    p.write_text(json.dumps({"images": [{"id": 1, "file_name": "../secret/credentials",
                                         "width": 4, "height": 4}],
                             "categories": [], "annotations": []}))
    with pytest.raises(nostall.Error) as e:
        nostall.Loader(str(p), task="detect")
    m = str(e.value)
    assert "leaves the image root" in m and "allow_outside_root=1" in m and "AKIA" not in m
    with nostall.Loader(str(p), task="detect", allow_outside_root=True) as ld:
        assert ld.info()["items"] == 1


def test_truncated(drawn):
    ann, truth = drawn
    o = full(dict(max_boxes=2))
    items, info = batches(ann, **o)
    assert info["items_truncated"] == sum(len(t["boxes"]) > 2 for t in truth.values()) > 0
    for i, path, epoch, _, boxes, labels, _, n in items:
        t = truth[path]
        ref = reference(i, *t["size"], t["boxes"], o["seed"], epoch, o)[3]
        assert n == len(ref) <= 2
        assert labels.tolist() == [b[4] for b in ref]


def test_threads_same_bytes(drawn):
    ann, _ = drawn
    ref = None
    for threads in (1, 2, 3):
        items, _ = batches(ann, epochs=2, **full(dict(threads=threads, output="float")))
        got = [(i, e, img.tobytes(), b.tobytes(), l.tobytes()) for i, _, e, img, b, l, _, _ in items]
        if ref is None:
            ref = got
        assert got == ref, "threads=%d" % threads


def test_repairs_reported(tmp_path):
    """A box outside the image is clipped, an annotation of a missing image
    id, a degenerate box and an image whose file is missing are counted and
    reported by info(), while the rest loads."""
    ann, truth = draw_dataset(str(tmp_path), n=6, seed=2)
    j = json.load(open(ann))
    im0 = j["images"][0]
    j["annotations"].append({"id": 900, "image_id": im0["id"], "category_id": CAT_IDS[0],
                             "bbox": [im0["width"] - 5, 2, 40, 3], "iscrowd": 0})
    j["annotations"].append({"id": 901, "image_id": 99999, "category_id": CAT_IDS[0],
                             "bbox": [1, 1, 2, 2], "iscrowd": 0})
    j["annotations"].append({"id": 902, "image_id": im0["id"], "category_id": CAT_IDS[0],
                             "bbox": [1, 1, 0, 2], "iscrowd": 0})
    j["images"].append({"id": 77777, "file_name": "img/gone.png", "width": 10, "height": 10})
    json.dump(j, open(ann, "w"))
    with nostall.Loader(ann, task="detect", out_height=32, out_width=32) as ld:
        info = ld.info()
    assert (info["items"], info["parts_clipped"], info["parts_unmatched"], info["parts_dropped"],
            info["items_missing"]) == (6, 1, 1, 1, 1)
    # the clipped box ends at the image's right edge: in eval, at the output's
    items, _ = batches(ann, **full(dict(mode="eval", max_boxes=16)))
    path0 = [p for p in truth if truth[p]["id"] == im0["id"]][0]
    for i, path, _, _, boxes, _, _, n in items:
        if path == path0:
            assert abs(boxes[-1][2] - 64) < 1e-4 and boxes[-1][0] > 50


def test_syntax_error_names_line_and_column(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text('{"images": [\n  {"id": 1, "file_name": "a.png" "width": 3}\n]}\n')
    with pytest.raises(nostall.Error) as e:
        nostall.Loader(str(p), task="detect")
    assert "bad.json:2:" in str(e.value) and "syntax error" in str(e.value)


def test_resume_mid_epoch(drawn):
    ann, _ = drawn
    o = full(dict(output="float"))
    with nostall.Loader(ann, task="detect", copy=True, epochs=2, **o) as ld:
        ld.set_epoch(1)
        it = iter(ld)
        next(it)
        next(it)
        state = ld.state_dict()
        rest = [(ld.last_indices.tolist(), np_(b["image"]).tobytes(), [np_(x).tobytes() for x in b["boxes"]])
                for b in it]
    with nostall.Loader(ann, task="detect", copy=True, epochs=2, **o) as ld:
        ld.load_state_dict(state)
        again = [(ld.last_indices.tolist(), np_(b["image"]).tobytes(),
                  [np_(x).tobytes() for x in b["boxes"]]) for b in ld]
    assert again == rest and len(rest) > 1
