#!/usr/bin/python3
"""photo_data.py — an ImageFolder of JPEGs made from real photographs.

`nostall gen` draws synthetic textures with per-pixel grain; real photographs
have different statistics (smoother regions, fewer bits per block), which
shifts the balance between entropy decoding and everything after it. With no
photograph collection on a fresh machine and no network, this script makes a
photo-derived set from whatever photographs it is given (default: the one
Debian ships with matplotlib, sample_data/grace_hopper.jpg, 512x600):

  for each image i (deterministic in --seed): a random crop of a source
  covering 35-100% of its area, resized (Lanczos) to about WxH (+-8%),
  mirrored with probability 1/2, colour saturation and brightness jittered,
  saved as a baseline 4:2:0 JPEG at a quality drawn from 93..98.

Usage:
  /usr/bin/python3 bench/photo_data.py OUT [--images N] [--classes K]
      [--width W] [--height H] [--seed S] [PHOTO ...]
  bash bench/run.sh --data OUT

Many crops of a few photographs are not a photo collection: the files have
realistic entropy (about 80-90 KB at 470x425, which is what the issue's
"about 100 KB ... made from real photographs" describes) but little variety.
Pass your own photographs (or point bench/run.sh --data at real ones) for
a figure on your data.
"""
import argparse
import os
import random
import sys

DEFAULT_PHOTO = "/usr/share/matplotlib/mpl-data/sample_data/grace_hopper.jpg"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("photos", nargs="*", help="source photographs (default: %s)" % DEFAULT_PHOTO)
    ap.add_argument("--images", type=int, default=1000)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--width", type=int, default=470)
    ap.add_argument("--height", type=int, default=425)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    try:
        from PIL import Image, ImageEnhance
    except ImportError:
        sys.exit("photo_data.py: needs python3-pil (apt-get install python3-pil)")
    photos = a.photos or [DEFAULT_PHOTO]
    srcs = []
    for p in photos:
        try:
            srcs.append(Image.open(p).convert("RGB"))
        except (OSError, ValueError) as e:
            sys.exit("photo_data.py: %s: %s (install python3-matplotlib for the default "
                     "photograph, or name your own)" % (p, e))
    if a.images < 1 or a.classes < 1 or a.width < 16 or a.height < 16:
        sys.exit("photo_data.py: --images, --classes >= 1 and --width, --height >= 16")
    rng = random.Random(a.seed)
    os.makedirs(a.out, exist_ok=True)
    total = 0
    for i in range(a.images):
        src = srcs[i % len(srcs)]
        sw, sh = src.size
        w = max(16, round(a.width * rng.uniform(0.92, 1.08)))
        h = max(16, round(a.height * rng.uniform(0.92, 1.08)))
        area = rng.uniform(0.35, 1.0) * sw * sh
        cw = min(sw, round((area * w / h) ** 0.5))
        ch = min(sh, round(cw * h / w))
        x = rng.randint(0, sw - cw)
        y = rng.randint(0, sh - ch)
        im = src.crop((x, y, x + cw, y + ch)).resize((w, h), Image.LANCZOS)
        if rng.random() < 0.5:
            im = im.transpose(Image.FLIP_LEFT_RIGHT)
        im = ImageEnhance.Color(im).enhance(rng.uniform(0.6, 1.4))
        im = ImageEnhance.Brightness(im).enhance(rng.uniform(0.85, 1.15))
        d = os.path.join(a.out, "class_%03d" % (i % a.classes))
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, "img_%06d.jpg" % i)
        im.save(path + ".tmp", format="JPEG", quality=rng.randint(93, 98), subsampling=2)
        os.replace(path + ".tmp", path)
        total += os.path.getsize(path)
    print("photo_data: %d JPEGs from %d photograph(s) in %s, %.1f KB mean" %
          (a.images, len(srcs), a.out, total / a.images / 1000.0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
