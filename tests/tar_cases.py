"""tar_cases.py — tar archives and readers shared by the tar tests (imported,
not a test itself; it writes only under the folder it is given).

  write_odd(d)        the odd archives of tests/cli_tar_diff.sh into folder d:
                      ustar names split into prefix and name, GNU long names,
                      pax paths (long, non-ASCII), directories, symbolic and
                      hard links, names with no dot or a leading dot, dots in
                      folder names, a duplicate member, a sample of 66
                      members, names over 4096 bytes, archives cut inside a
                      member and inside a header. Every .cls member holds a
                      decimal label (label_of(key)), so the archives are also
                      a labeled data set (tests/python/test_webdataset_interop.py).
  CLEAN               the ones webdataset reads without an error
  nstidx(path)        the samples and damage records of PATH.nstidx (version
                      2, src/dataset/tar.h), as nostall's header pass wrote it
  wds_split(name)     webdataset's rule (its base_plus_ext): (key, extension)
                      split at the first dot of the last path component, or
                      None (no dot there, or a leading one)
"""

import io
import os
import struct
import tarfile

CLEAN = ("ustar.tar", "gnu.tar", "pax.tar", "links.tar", "names.tar")


def label_of(key):
    return sum(key.encode()) % 7


def _reg(name, data):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    ti.mode = 0o644
    return ti, io.BytesIO(data)


def _sample(key, n=2, exts=("jpg", "cls")):
    return [_reg("%s.%s" % (key, e), b"%d" % label_of(key) if e == "cls"
                 else b"\xff\xd8" + (key + e).encode() * n) for e in exts]


def _link(name, target, kind):
    ti = tarfile.TarInfo(name)
    ti.type = kind
    ti.linkname = target
    return ti, None


def _folder(name):
    ti = tarfile.TarInfo(name)
    ti.type = tarfile.DIRTYPE
    return ti, None


def write_odd(d):
    def write(fname, entries, fmt=tarfile.PAX_FORMAT):
        with tarfile.open(os.path.join(d, fname), "w", format=fmt) as t:
            for ti, f in entries:
                t.addfile(ti, f)
    sample, reg = _sample, _reg
    deep = "/".join(["dir%02d" % i for i in range(20)])  # 119 bytes: a ustar prefix
    write("ustar.tar", sample(deep + "/a") + sample("b") + sample("x" * 40 + "/" + "y" * 90),
          tarfile.USTAR_FORMAT)
    write("gnu.tar", sample("g" * 150) + sample("h") + sample("i/" + "j" * 300), tarfile.GNU_FORMAT)
    write("pax.tar", sample("p" * 700) + sample("caf\u00e9/\u00fcber") + sample("q"))
    write("links.tar", [_folder("d/")] + sample("d/a") +
          [_link("d/b.jpg", "d/a.jpg", tarfile.SYMTYPE), _link("d/c.jpg", "d/a.jpg", tarfile.LNKTYPE)]
          + sample("d/e"))
    write("names.tar", [reg("nodot", b"n"), reg(".hidden.jpg", b"h"), reg("dir.v2/.x", b"x")]
          + sample("dir.v2/k") + sample("a.b/c.d", exts=("tar.gz", "jpg")) + sample("m"))
    write("dup.tar", sample("a") + sample("dup") + sample("dup") + sample("z"))
    write("many.tar", sample("s") + [reg("big.%02d.txt" % i, b"t%d" % i) for i in range(66)]
          + sample("t"))
    write("long.tar", sample("ok1") + sample("L" * 5000) + sample("ok2"))
    # cut inside a member's data, and inside a header
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w", format=tarfile.USTAR_FORMAT) as t:
        for ti, f in sample("c0") + sample("c1", n=400) + sample("c2"):
            t.addfile(ti, f)
    raw = b.getvalue()
    m = tarfile.open(fileobj=io.BytesIO(raw)).getmembers()
    with open(os.path.join(d, "cut_data.tar"), "wb") as f:
        f.write(raw[:m[2].offset_data + 100])
    with open(os.path.join(d, "cut_header.tar"), "wb") as f:
        f.write(raw[:m[4].offset + 200])


def _varint(b, i):
    v = s = 0
    while True:
        x = b[i]
        i += 1
        v |= (x & 0x7F) << s
        s += 7
        if x < 0x80:
            return v, i


def nstidx(path):
    """(samples, damage) of path's index file: samples [(key, [(ext, offset,
    size)])], damage [(offset, size, code, name)], offsets into the shard."""
    with open(path + ".nstidx", "rb") as f:
        b = f.read()
    assert b[:8] == b"\x89NSTIDX\n", path
    ver, flags, tar_bytes, ns, nm, body, fp, mtime, val = struct.unpack("<IIQQQQQQQ", b[8:72])
    assert ver == 2 and tar_bytes == os.path.getsize(path) and fp, path
    i, end, cur = 72, 72 + body, 0
    samples, damage = [], []
    while i < end:
        k, i = _varint(b, i)
        if k == 0:
            gap, i = _varint(b, i)
            size, i = _varint(b, i)
            code, i = _varint(b, i)
            n, i = _varint(b, i)
            name = b[i:i + n].decode("utf-8", "replace")
            i += n
            damage.append((cur + gap, size, code, name))
            cur += gap + size
            continue
        key = b[i:i + k].decode()
        i += k
        m, i = _varint(b, i)
        members = []
        for _ in range(m):
            e, i = _varint(b, i)
            ext = b[i:i + e].decode()
            i += e
            gap, i = _varint(b, i)
            size, i = _varint(b, i)
            if ext.lower() == "cls":
                _, i = _varint(b, i)
            members.append((ext, cur + gap, size))
            cur += gap + size
        samples.append((key, members))
    return samples, damage


def wds_split(name):
    base = name.rsplit("/", 1)[-1]
    if "." not in base or base.startswith("."):
        return None
    cut = len(name) - len(base) + base.index(".")
    return name[:cut], name[cut + 1:]
