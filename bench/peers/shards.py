#!/usr/bin/python3
"""shards.py — streaming shards: nostall beside webdataset, LitData and Mosaic Streaming.

The same images, in each library's own shard format, read from local disk
and from an S3 server (moto on loopback, tests/lib_s3.sh, started and
stopped here), side by side in one run (issue 34):

  nostall indexed   the tar shards of `nostall pack` (KEY.jpg + KEY.cls, an
                    index file beside each), shard_mode=indexed: one pread /
                    one signed ranged GET per item, the global permutation.
  nostall stream    the same shards, shard_mode=stream: each shard read whole
                    (one GET), items through a shuffle buffer of 1000.
  webdataset        the same tar shards: WebDataset(urls, shardshuffle)
                    .shuffle(1000).decode("pil").to_tuple("jpg", "cls")
                    .map_tuple(augment, int).batched(B), WebLoader(batch_size=None)
                    (webdataset's own recipe: batching in the workers). S3:
                    `pipe:curl --aws-sigv4` per shard (signed GETs; the recipe
                    webdataset documents for object stores is a pipe: URL).
  LitData           litdata.optimize() of the same files (image bytes + int
                    label, chunks of --shard-bytes), StreamingDataset(shuffle=True)
                    + StreamingDataLoader. S3: s3://bkt/litdata, boto3 pointed at
                    moto by AWS_ENDPOINT_URL, a fresh empty cache per measurement.
  Mosaic Streaming  MDSWriter of the same files (columns image: bytes, label:
                    int, shards of --shard-bytes), StreamingDataset(shuffle=True,
                    batch_size=B) + torch DataLoader. S3: remote=s3://bkt/mds,
                    S3_ENDPOINT_URL, a fresh empty local cache per measurement.

Tasks:
  full   each sample's JPEG + label, decode, RandomResizedCrop 224 + flip +
         normalize to float32 NCHW, batches of B (the Python peers: PIL decode
         and torchvision's transforms, as bench/peers.py's torchvision row;
         nostall: its own decoder, output=float).
  read   the shard path alone: each sample's bytes + label, no decode (peers:
         the bytes object's length; nostall: task="bytes").
  tokens (--tokens) nostall's task="tokens" windows=chunks on a uint16 .bin
         (x and y as two int64 tensors, the default; and targets=0: one
         [B, T+1] int64 tensor, x and y sliced from it) against LitData's
         optimize() of the same uint16 tokens + TokensLoader(block_size=T+1)
         + StreamingDataLoader, the batch converted to int64 and sliced into
         x and y; batch 12 x 1024 (GPT-2's), 5000 batches (one epoch of
         either), local only (nostall's tokens task reads local files).

One core: nostall threads=1 (stream mode adds its reader thread), the peers'
DataLoader num_workers=0 (in the process; torch.set_num_threads(1)). Two
cores: threads=2 / num_workers=2.

Every measurement runs in a fresh process of the peers' venv (bench/peers/
venv.sh: torch 2.x; nostall through its Python binding, so every system is
timed by the same loop, bench/peers.py's _time_epochs): setup (imports, the
dataset object, nostall's Loader) untimed, then --epochs epochs timed: wall
seconds and the process's CPU seconds (its threads and its DataLoader
workers, curl included). Over S3 a measurement is one epoch from an empty
cache (LitData and Mosaic keep fetched chunks on local disk: a second epoch
would not be read from the server). Every measurement first runs once untimed (warm-up:
page cache, the server), then --rounds rounds run each once, interleaved,
the order rotated each round; medians (bench/peers.py's summarize). Over S3
the server's own CPU seconds (moto: one Python process checking every
signature, on the same machine) are read from /proc and reported beside.

    /usr/bin/python3 bench/peers/shards.py [--images 2000] [--rounds 3]
        [--where local,s3] [--cores 1,2] [--tasks full,read] [--tokens]
        [--systems nostall_indexed,nostall_stream,wds,litdata,mosaic]
        [--out FILE.json] [--markdown FILE.md]

Environment: BUILD (default build), NOSTALL_BENCH_DATA (default
/tmp/nostall-bench-data: the images and every format, kept between runs).
Exit 77 when the peers' venv or the S3 server cannot be made here.
"""
import argparse
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

SELF = os.path.abspath(__file__)
HERE = os.path.dirname(SELF)
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))  # bench/: peers.py's measurement machinery
import peers  # noqa: E402

BUCKET = "bkt"
SYSTEMS = ("nostall_indexed", "nostall_stream", "wds", "litdata", "mosaic")
LABELS = {"nostall_indexed": "nostall, shard_mode=indexed",
          "nostall_stream": "nostall, shard_mode=stream",
          "wds": "webdataset", "litdata": "LitData", "mosaic": "Mosaic Streaming",
          "nostall_tokens": "nostall, task=tokens windows=chunks (tokens + targets)",
          "nostall_tokens1": "nostall, task=tokens windows=chunks targets=0 (one [B, T+1] tensor)",
          "litdata_tokens": "LitData, TokensLoader"}
SHUFFLE_BUFFER = 1000


# --------------------------------------------------------------------------
# Worker side: runs in the peers' venv, one measurement per process.
# --------------------------------------------------------------------------
class _Run:
    """What peers._time_epochs iterates: .loader yields (x, y), x.shape[0]
    the batch's samples."""

    def __init__(self, loader, epochs):
        self.loader = loader
        self.epochs = epochs
        self.sample = None


class _Pairs:
    """Adapts a loader of dicts (or of (bytes-lengths, labels)) to (x, y)."""

    def __init__(self, loader, fn):
        self.inner, self.fn = loader, fn

    def __iter__(self):
        for b in self.inner:
            yield self.fn(b)


def _augment():
    from torchvision import transforms as T
    return T.Compose([T.RandomResizedCrop(peers.CROP, scale=(0.08, 1.0),
                                          ratio=(3.0 / 4.0, 4.0 / 3.0)),
                      T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(peers.MEAN, peers.STD)])


def _pil(data):
    from PIL import Image
    return Image.open(io.BytesIO(data)).convert("RGB")


def _sample_fn(task):
    """(image bytes, label) -> what a peer's dataset yields per sample."""
    if task == "read":
        return lambda data, label: (len(data), int(label))
    aug = _augment()
    return lambda data, label: (aug(_pil(data)), int(label))


def _s3_env():
    return {"key": os.environ["AWS_ACCESS_KEY_ID"], "secret": os.environ["AWS_SECRET_ACCESS_KEY"],
            "endpoint": os.environ["AWS_ENDPOINT_URL"]}


def _loader_nostall(c, mode):
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import nostall
    src = c["tar"] if c["where"] == "local" else "s3://%s/tar/" % BUCKET
    kw = dict(batch_size=c["batch"], threads=c["cores"], seed=c["seed"], shard_mode=mode,
              epochs=c["epochs"], shuffle_buffer=SHUFFLE_BUFFER)
    if c["task"] == "read":
        ld = nostall.Loader(src, task="bytes", **kw)
        return _Pairs(ld, lambda b: (b["length"], b["label"]))
    return nostall.Loader(src, crop=peers.CROP, mode="train", output="float", **kw)


def _loader_wds(c):
    import webdataset as wds
    shards = sorted(f for f in os.listdir(c["tar"]) if f.endswith(".tar"))
    if c["where"] == "local":
        urls = [os.path.join(c["tar"], f) for f in shards]
    else:
        s3 = _s3_env()
        # webdataset reads object stores through a pipe: URL; curl signs SigV4
        urls = ["pipe:curl -s -f -H x-amz-content-sha256:UNSIGNED-PAYLOAD "
                "--aws-sigv4 aws:amz:us-east-1:s3 --user %s:%s %s/%s/tar/%s" %
                (s3["key"], s3["secret"], s3["endpoint"], BUCKET, f) for f in shards]
    ds = wds.WebDataset(urls, shardshuffle=len(urls), seed=c["seed"], empty_check=False,
                        workersplitter=wds.split_by_worker, nodesplitter=None)
    ds = ds.shuffle(SHUFFLE_BUFFER)
    if c["task"] == "read":
        ds = ds.to_tuple("jpg", "cls").map_tuple(len, int)
    else:
        ds = ds.decode("pil").to_tuple("jpg", "cls").map_tuple(_augment(), int)
    ds = ds.batched(c["batch"], partial=True)
    return wds.WebLoader(ds, batch_size=None, num_workers=c["workers"])


def _loader_litdata(c):
    import litdata
    fn = _sample_fn(c["task"])

    class DS(litdata.StreamingDataset):
        def __getitem__(self, index):
            s = super().__getitem__(index)
            return fn(s["image"], s["label"])

    if c["where"] == "local":
        ds = DS(c["litdata"], shuffle=True, seed=c["seed"])
    else:
        # LitData fetches chunks with obstore (its fast path, on by default
        # for remote data), whose client refuses plain http:// endpoints such
        # as moto's; AWS_ALLOW_HTTP is not read there, its client options are
        from litdata.streaming import downloader
        downloader._OBSTORE_CLIENT_OPTIONS["allow_http"] = True
        ds = DS("s3://%s/litdata" % BUCKET, cache_dir=c["cache"], shuffle=True, seed=c["seed"])
    return litdata.StreamingDataLoader(ds, batch_size=c["batch"], num_workers=c["workers"])


def _loader_mosaic(c):
    import streaming
    import torch
    from streaming.base.util import clean_stale_shared_memory
    clean_stale_shared_memory()
    fn = _sample_fn(c["task"])

    class DS(streaming.StreamingDataset):
        def __getitem__(self, index):
            s = super().__getitem__(index)
            return fn(s["image"], s["label"])

    if c["where"] == "local":
        ds = DS(local=c["mds"], shuffle=True, shuffle_seed=c["seed"], batch_size=c["batch"])
    else:
        ds = DS(local=c["cache"], remote="s3://%s/mds" % BUCKET, shuffle=True,
                shuffle_seed=c["seed"], batch_size=c["batch"])
    return torch.utils.data.DataLoader(ds, batch_size=c["batch"], num_workers=c["workers"])


def worker(c):
    import torch
    torch.set_num_threads(1)
    c["workers"] = 0 if c["cores"] == 1 else c["cores"]
    if c["task"] == "tokens":
        return worker_tokens(c)
    sysname = c["system"]
    if sysname.startswith("nostall"):
        loader = _loader_nostall(c, sysname.split("_")[1])
    else:
        loader = {"wds": _loader_wds, "litdata": _loader_litdata,
                  "mosaic": _loader_mosaic}[sysname](c)
        if c["task"] == "read":
            import torch as t
            loader = _Pairs(loader, lambda b: (t.as_tensor(b[0]), b[1]))
    run = _Run(loader, c["epochs"])
    r = peers._time_epochs(run, cpu=lambda: peers.self_cpu() + peers.children_cpu())
    r["batch"] = run.sample
    return r


def worker_tokens(c):
    """Batches of (x, y) int64 [B, T] for c["batches"] batches."""
    import torch
    B, T, n = c["batch"], c["context"], c["batches"]
    if c["system"].startswith("nostall_tokens"):
        sys.path.insert(0, os.path.join(ROOT, "python"))
        import nostall
        # nostall_tokens: x and y as two int64 tensors (targets=1, the
        # default); nostall_tokens1: one [B, T + 1] tensor, sliced here as
        # LitData's blocks are (targets=0)
        one = c["system"] == "nostall_tokens1"
        ld = nostall.Loader(c["bin"], task="tokens", windows="chunks", context_length=T,
                            batch_size=B, threads=c["cores"], seed=c["seed"], drop_last=True,
                            targets=not one)
        if one:
            fn = lambda b: (b["tokens"][:, :-1], b["tokens"][:, 1:])  # noqa: E731
        else:
            fn = lambda b: (b["tokens"], b["targets"])  # noqa: E731
    else:
        import litdata
        from litdata.streaming.item_loader import TokensLoader
        ds = litdata.StreamingDataset(c["litdata_tokens"],
                                      item_loader=TokensLoader(block_size=T + 1),
                                      shuffle=True, seed=c["seed"])
        ld = litdata.StreamingDataLoader(ds, batch_size=B, num_workers=c["workers"], drop_last=True)

        def fn(b):  # the same int64 inputs and targets nostall delivers
            b = b.to(torch.int64)
            return b[:, :-1], b[:, 1:]

    class Capped:
        def __iter__(self):
            got = 0
            while got < n:
                for b in ld:
                    yield fn(b)
                    got += 1
                    if got == n:
                        return

    run = _Run(Capped(), 1)
    r = peers._time_epochs(run, cpu=lambda: peers.self_cpu() + peers.children_cpu())
    x = run.sample
    r["batch"] = x
    return r


# --------------------------------------------------------------------------
# Preparation (the venv's python: litdata / streaming write their formats)
# --------------------------------------------------------------------------
def _image_list(img):
    """(path, label) of every JPEG of an ImageFolder, labels by sorted class
    folder (the labels `nostall pack` writes)."""
    out = []
    for label, c in enumerate(sorted(os.listdir(img))):
        d = os.path.join(img, c)
        out += [(os.path.join(d, f), label) for f in sorted(os.listdir(d))]
    return out


def prepare(kind, src, dst, shard_bytes):
    if kind == "mds":
        from streaming import MDSWriter
        with MDSWriter(out=dst, columns={"image": "bytes", "label": "int"},
                       size_limit=shard_bytes) as w:
            for path, label in _image_list(src):
                with open(path, "rb") as f:
                    w.write({"image": f.read(), "label": label})
    elif kind == "litdata":
        import litdata
        # LitData's documented use: optimize() over a list of files; the
        # item is the file's bytes and its label, chunks of shard_bytes
        litdata.optimize(fn=_litdata_from_list, inputs=_image_list(src),
                         output_dir=dst, chunk_bytes=shard_bytes, num_workers=1,
                         mode="overwrite")
    elif kind == "litdata_tokens":
        import litdata
        from litdata.streaming.item_loader import TokensLoader
        litdata.optimize(fn=_tokens_from_bin, inputs=[(src, k) for k in range(16)],
                         output_dir=dst, chunk_size=shard_bytes, item_loader=TokensLoader(),
                         num_workers=1, mode="overwrite")
    else:
        raise ValueError(kind)


def _litdata_from_list(item):
    path, label = item
    with open(path, "rb") as f:
        return {"image": f.read(), "label": label}


def _tokens_from_bin(item):
    """One sixteenth of the uint16 .bin as a 1-D tensor of tokens."""
    import numpy as np
    import torch
    path, k = item
    a = np.memmap(path, dtype=np.uint16, mode="r")
    n = len(a) // 16
    yield torch.from_numpy(np.array(a[k * n:(k + 1) * n]))  # uint16, as the .bin


# --------------------------------------------------------------------------
# Driver (Debian's python): data, the S3 server, rounds, tables.
# --------------------------------------------------------------------------
def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True, **kw).stdout


def proc_cpu(pid):
    """CPU seconds (user + system) of a process and its waited children."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            v = f.read().rsplit(")", 1)[1].split()
        return sum(int(x) for x in v[11:15]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def parse_bytes(s):
    m = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * m[s[-1].upper()] if s[-1].upper() in m else int(s)


def ensure_data(a, cli, py, base):
    img, tar = os.path.join(base, "img"), os.path.join(base, "tar")
    if not os.path.exists(img + ".done"):
        shutil.rmtree(img, ignore_errors=True)
        peers.log("shards: writing %d photo-derived JPEGs (%dx%d) into %s" %
                  (a.images, a.width, a.height, img))
        sh(["/usr/bin/python3", os.path.join(ROOT, "bench", "photo_data.py"), img, "--images",
            str(a.images), "--width", str(a.width), "--height", str(a.height)])
        open(img + ".done", "w").close()
    if not os.path.exists(tar + ".done"):
        shutil.rmtree(tar, ignore_errors=True)
        sh([cli, "pack", img, tar, "--shard-bytes", a.shard_bytes, "--shuffle", "7", "--quiet"])
        open(tar + ".done", "w").close()
    for kind in ("litdata", "mds"):
        d = os.path.join(base, kind)
        if not os.path.exists(d + ".done"):
            shutil.rmtree(d, ignore_errors=True)
            peers.log("shards: converting the tar shards to %s" % kind)
            sh([py, SELF, "--prepare", kind, img, d, str(parse_bytes(a.shard_bytes))])
            open(d + ".done", "w").close()
    if a.tokens:
        binf = os.path.join(base, "tokens-%d.bin" % a.token_count)
        if not os.path.exists(binf + ".done"):
            sh([py, "-c", "import numpy as np, sys; np.random.default_rng(0).integers("
                "0, 50257, size=int(sys.argv[2]), dtype=np.uint16).tofile(sys.argv[1])",
                binf, str(a.token_count)])
            open(binf + ".done", "w").close()
        d = os.path.join(base, "litdata_tokens-%d" % a.token_count)
        if not os.path.exists(d + ".done"):
            shutil.rmtree(d, ignore_errors=True)
            # chunks of 4096 blocks of 1025 tokens (8.4 MB)
            sh([py, SELF, "--prepare", "litdata_tokens", binf, d, str((1024 + 1) * 4096)])
            open(d + ".done", "w").close()
    return {"img": img, "tar": tar, "litdata": os.path.join(base, "litdata"),
            "mds": os.path.join(base, "mds"),
            "bin": os.path.join(base, "tokens-%d.bin" % a.token_count),
            "litdata_tokens": os.path.join(base, "litdata_tokens-%d" % a.token_count)}


def du(path):
    total = 0
    for root, _d, names in os.walk(path):
        total += sum(os.path.getsize(os.path.join(root, n)) for n in names)
    return total


class Measure:
    """One measurement: a fresh venv process running worker(config)."""

    def __init__(self, key, py, cfg, env, server_pid, work):
        self.key, self.py, self.cfg, self.env = key, py, cfg, env
        self.server_pid, self.work = server_pid, work

    def __call__(self):
        cfg = dict(self.cfg)
        cache = None
        if cfg.get("where") == "s3":  # an empty cache each time: every byte from the server
            cache = tempfile.mkdtemp(prefix="cache-", dir=self.work)
            cfg["cache"] = cache
        s0 = proc_cpu(self.server_pid) if self.server_pid else 0.0
        try:
            j, _cpu = peers.run_json([self.py, SELF, "--worker", json.dumps(cfg)], self.env)
        finally:
            if cache:
                shutil.rmtree(cache, ignore_errors=True)
        if self.server_pid:
            j["server_cpu_seconds"] = proc_cpu(self.server_pid) - s0
        return j


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        print(json.dumps(worker(json.loads(sys.argv[2]))))
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "--prepare":
        prepare(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--width", type=int, default=500)
    ap.add_argument("--height", type=int, default=375)
    ap.add_argument("--shard-bytes", default="10M")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--where", default="local,s3")
    ap.add_argument("--cores", default="1,2")
    ap.add_argument("--tasks", default="full,read")
    ap.add_argument("--read-cores", default="1", help="cores for the read task")
    ap.add_argument("--read-epochs", type=int, default=10,
                    help="epochs per measurement of the read task, local (an epoch is short)")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--tokens", action="store_true", help="add the tokens task (LitData)")
    # 64 M tokens: the 5000 batches of 12 x 1025 tokens are one epoch of
    # either (a LitData loader with workers starts them again each epoch)
    ap.add_argument("--token-count", type=int, default=64_000_000)
    ap.add_argument("--token-batches", type=int, default=5000)
    ap.add_argument("--out", help="all results as JSON")
    ap.add_argument("--markdown", help="the tables as Markdown")
    a = ap.parse_args()
    build = os.path.abspath(os.environ.get("BUILD", os.path.join(ROOT, "build")))
    cli, lib = os.path.join(build, "nostall"), os.path.join(build, "libnostall.so")
    if not (os.path.exists(cli) and os.path.exists(lib)):
        sys.exit("shards.py: no %s or %s: build first (make build, or BUILD=...)" % (cli, lib))
    v = subprocess.run(["bash", os.path.join(HERE, "venv.sh")], stdout=subprocess.PIPE, text=True)
    if v.returncode != 0:
        print("SKIP: shards.py: the peers' venv cannot be made here", file=sys.stderr)
        return 77 if v.returncode == 77 else 1
    py = v.stdout.strip().splitlines()[-1]
    base = os.path.join(os.environ.get("NOSTALL_BENCH_DATA", "/tmp/nostall-bench-data"),
                        "shards-peers-%d-%dx%d-%s" % (a.images, a.width, a.height, a.shard_bytes))
    os.makedirs(base, exist_ok=True)
    paths = ensure_data(a, cli, py, base)
    where = [w for w in a.where.split(",") if w]
    systems = [s for s in a.systems.split(",") if s]
    work = tempfile.mkdtemp(prefix="nostall-shards-peers-")
    env = {"NOSTALL_LIBRARY": lib, "XDG_CACHE_HOME": os.path.join(work, "xdg"),
           "PYTHONWARNINGS": "ignore", "TOKENIZERS_PARALLELISM": "false"}
    srv = os.path.join(work, "srv")
    lib_s3 = os.path.join(ROOT, "tests", "lib_s3.sh")
    server_pid = None
    meta = {"machine": peers.machine_info()}
    try:
        if "s3" in where:
            ens = subprocess.run(["bash", lib_s3, "ensure"], stdout=subprocess.PIPE, text=True)
            if ens.returncode != 0:
                print("SKIP: shards.py: the S3 server (moto) cannot be installed", file=sys.stderr)
                return 77
            port = int(sh(["bash", lib_s3, "start", srv, "0", BUCKET]).strip())
            with open(os.path.join(srv, "server.pid")) as f:
                server_pid = int(f.read())
            t0 = time.perf_counter()
            for kind in ("tar", "litdata", "mds"):
                sh(["bash", lib_s3, "put-tree", srv, BUCKET, kind, paths[kind]])
            peers.log("shards: objects put to moto on port %d in %.1f s" %
                      (port, time.perf_counter() - t0))
            env.update({"AWS_ACCESS_KEY_ID": os.environ.get("S3_TEST_ACCESS_KEY",
                                                            "AKIANOSTALLTEST00001"),
                        "AWS_SECRET_ACCESS_KEY": os.environ.get("S3_TEST_SECRET",
                                                                "nostall-test/secret+0"),
                        "AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1",
                        "AWS_ENDPOINT_URL": "http://127.0.0.1:%d" % port,
                        "S3_ENDPOINT_URL": "http://127.0.0.1:%d" % port})
        meta["versions"] = json.loads(sh([py, "-c", VERSIONS]))
        meta["params"] = {"images": a.images, "size": "%dx%d" % (a.width, a.height),
                          "shard_bytes": a.shard_bytes, "batch_size": a.batch_size,
                          "epochs": a.epochs, "rounds": a.rounds,
                          "bytes": {k: du(paths[k]) for k in ("img", "tar", "litdata", "mds")},
                          "files": {k: len([f for f in os.listdir(paths[k])
                                            if not f.endswith((".nstidx", ".json"))])
                                    for k in ("tar", "litdata", "mds")}}
        runs = {}
        for task in [t for t in a.tasks.split(",") if t]:
            cores = a.cores if task == "full" else a.read_cores
            for w in where:
                for c in [int(x) for x in cores.split(",") if x]:
                    for s in systems:
                        key = "%s/%s/%dc/%s" % (task, w, c, s)
                        cfg = dict(paths, system=s, where=w, cores=c, task=task,
                                   # over S3 one epoch: LitData and Mosaic keep
                                   # what they fetched in their local cache, a
                                   # second epoch would read local files
                                   epochs=a.read_epochs if task == "read" and w == "local"
                                   else a.epochs, batch=a.batch_size, seed=1)
                        runs[key] = Measure(key, py, cfg, env,
                                            server_pid if w == "s3" else None, work)
        if a.tokens:
            for c in (1, 2):
                for s in ("nostall_tokens", "nostall_tokens1", "litdata_tokens"):
                    key = "tokens/local/%dc/%s" % (c, s)
                    cfg = dict(paths, system=s, where="local", cores=c, task="tokens", epochs=1,
                               batch=12, context=1024, batches=a.token_batches, seed=1)
                    runs[key] = Measure(key, py, cfg, env, None, work)
        order = list(runs)
        unavailable = {}
        for k in order:
            peers.log("shards: warm-up %s" % k)
            try:
                r = runs[k]()
                peers.log("  %d images, %.2f s, %.2f CPU-s %s" % (r["images"], r["seconds"],
                                                                 r["cpu_seconds"], r.get("batch")))
            except Exception as e:  # noqa: BLE001 - left out, reported
                unavailable[k] = str(e)[-600:]
                peers.log("shards: %s failed, left out: %s" % (k, unavailable[k]))
        order = [k for k in order if k not in unavailable]
        samples = {k: [] for k in order}
        for rnd in range(a.rounds):
            shift = (rnd * max(1, len(order) // max(1, a.rounds))) % max(1, len(order))
            for k in order[shift:] + order[:shift]:
                try:
                    r = runs[k]()
                except Exception as e:  # noqa: BLE001
                    peers.log("shards: %s failed in round %d: %s" % (k, rnd + 1, e))
                    continue
                samples[k].append(r)
                peers.log("shards: round %d/%d %-34s %7.1f images/s %7.1f images/CPU-s%s" %
                          (rnd + 1, a.rounds, k, r["images"] / r["seconds"],
                           r["images"] / r["cpu_seconds"],
                           "  server %.1f CPU-s" % r["server_cpu_seconds"]
                           if "server_cpu_seconds" in r else ""))
        meta["machine"]["loadavg_end"] = os.getloadavg()
    finally:
        if server_pid:
            subprocess.run(["bash", lib_s3, "stop", srv])
        shutil.rmtree(work, ignore_errors=True)
    summary = {}
    for k, v in samples.items():
        if not v:
            continue
        summary[k] = peers.summarize(v)
        sc = [s["server_cpu_seconds"] for s in v if "server_cpu_seconds" in s]
        if sc:
            summary[k]["server_cpu_seconds"] = statistics.median(sc)
            summary[k]["images_per_cpu_second_with_server"] = statistics.median(
                s["images"] / (s["cpu_seconds"] + s["server_cpu_seconds"]) for s in v)
        summary[k]["images"] = v[0]["images"]
    res = {"meta": meta, "summary": summary, "unavailable": unavailable, "samples": samples}
    text = tables(res)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0


VERSIONS = r"""
import json, importlib.metadata as m
v = {}
for p in ("torch", "torchvision", "pillow", "webdataset", "litdata", "mosaicml-streaming",
          "boto3", "numpy"):
    try:
        v[p] = m.version(p)
    except Exception as e:
        v[p] = "unavailable"
try:
    from PIL import features
    v["PIL libjpeg-turbo"] = features.version("libjpeg_turbo")
except Exception:
    pass
print(json.dumps(v))
"""


def tables(res):
    """Markdown: one table per task (rows: system; columns: where x cores)."""
    s, meta = res["summary"], res["meta"]
    p, mi = meta["params"], meta["machine"]
    out = ["_%d photo-derived JPEGs %s (%.1f MB), shards of about %s (%s tar, %s LitData "
           "chunks, %s MDS shards), batch %d, %d epoch(s) per measurement, %d rounds, "
           "medians (range of images/s)._  " %
           (p["images"], p["size"], p["bytes"]["img"] / 1e6, p["shard_bytes"],
            p["files"]["tar"], p["files"]["litdata"], p["files"]["mds"], p["batch_size"],
            p["epochs"], p["rounds"]),
           "_%s, %s CPUs, Linux %s, %s, nostall %s; load average %s at start, %s at end; "
           "%s._" % (mi.get("cpu", "?"), mi.get("nproc"), mi.get("kernel"), mi.get("date"),
                     mi.get("nostall_commit", "?"),
                     " ".join("%.2f" % x for x in mi["loadavg_start"]),
                     " ".join("%.2f" % x for x in mi.get("loadavg_end", ())),
                     ", ".join("%s %s" % kv for kv in meta.get("versions", {}).items()))]
    tasks = []
    for k in list(s) + list(res["unavailable"]):
        t = k.split("/")[0]
        if t not in tasks:
            tasks.append(t)
    title = {"full": "decode + RandomResizedCrop 224 + flip + normalize, float32 NCHW",
             "read": "read only: each sample's bytes + label, no decode",
             "tokens": "tokens: batches of 12 x 1024 int64 inputs + targets (rows: batches/s)"}
    for t in tasks:
        cols = []
        for k in list(s) + list(res["unavailable"]):
            tt, w, c, _sys = k.split("/")
            if tt == t and (w, c) not in cols:
                cols.append((w, c))
        systems = []
        for k in list(s) + list(res["unavailable"]):
            if k.startswith(t + "/") and k.split("/")[3] not in systems:
                systems.append(k.split("/")[3])
        out += ["", "**%s**" % title.get(t, t), ""]
        head = ["system"] + ["%s, %s: images/s (range) · per CPU-s%s" %
                             (w, c.replace("c", " core").replace(" core", " cores")
                              if c != "1c" else "1 core",
                              " (+ server's CPU)" if w == "s3" else "") for w, c in cols]
        if t == "tokens":
            head = [h.replace("images", "batches") for h in head]
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "---|" * len(head))
        for sy in systems:
            cells = [LABELS.get(sy, sy.replace("_tokens", "").replace("litdata", "LitData"))]
            for w, c in cols:
                k = "%s/%s/%s/%s" % (t, w, c, sy)
                if k in res["unavailable"]:
                    cells.append("failed: " + res["unavailable"][k].splitlines()[-1][:80])
                    continue
                m = s.get(k)
                if not m:
                    cells.append("—")
                    continue
                div = 12.0 if t == "tokens" else 1.0
                cell = "%s (%s–%s) · %s" % (
                    peers.fmt(m["images_per_second"] / div),
                    peers.fmt(m["images_per_second_min"] / div),
                    peers.fmt(m["images_per_second_max"] / div),
                    peers.fmt(m["images_per_cpu_second"] / div))
                if "images_per_cpu_second_with_server" in m:
                    cell += " (%s)" % peers.fmt(m["images_per_cpu_second_with_server"] / div)
                cells.append(cell)
            out.append("| " + " | ".join(cells) + " |")
        # ratios: nostall's best mode against each peer, per column
        best = {}
        for w, c in cols:
            ns = [s.get("%s/%s/%s/%s" % (t, w, c, n)) for n in
                  ("nostall_indexed", "nostall_stream", "nostall_tokens", "nostall_tokens1")]
            ns = [m for m in ns if m]
            if ns:
                best[(w, c)] = max(ns, key=lambda m: m["images_per_cpu_second"])
        peers_ = [sy for sy in systems if not sy.startswith("nostall")]
        if best and peers_:
            out += ["", "| nostall (its faster mode per CPU-s) ÷ | " +
                    " | ".join("%s, %s: %s/s · per CPU-s" %
                               (w, c, "batches" if t == "tokens" else "images")
                               for w, c in cols) + " |",
                    "|" + "---|" * (len(cols) + 1)]
            for sy in peers_:
                cells = [LABELS.get(sy, sy)]
                for w, c in cols:
                    m = s.get("%s/%s/%s/%s" % (t, w, c, sy))
                    b = best.get((w, c))
                    if not (m and b):
                        cells.append("—")
                        continue
                    cells.append("%s · %s" % (
                        peers.fmt_ratio(peers.ratio(b["images_per_second"],
                                                    m["images_per_second"])),
                        peers.fmt_ratio(peers.ratio(b["images_per_cpu_second"],
                                                    m["images_per_cpu_second"]))))
                out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
