#!/usr/bin/python3
"""bench/shards_modes.py — when each way of reading tar shards wins (issue 24).

The same dataset over HTTP from nginx (tests/lib_nginx.sh), read three ways:
  files    a list of per-file URLs (one GET per item)
  indexed  tar shards, shard_mode=indexed (one ranged GET per item)
  stream   tar shards, shard_mode=stream (one GET per shard, items through
           the shuffle buffer)
each with no added latency and with DELAY ms added to every request by a
small delaying TCP proxy in this script (every burst of bytes from the
client -- a request -- is held DELAY ms before it is forwarded; `tc netem`
is not available on these machines). Items/s is `nostall bench`'s figure
(the median of RUNS runs, one epoch each after a warm-up epoch not
counted); the ratio is items/s with the delay over items/s without, per
mode. Two tasks: bytes (the items' bytes as fetched: the I/O path alone)
and classify (JPEG decode + RandomResizedCrop 224: what training sees).

    /usr/bin/python3 bench/shards_modes.py [--images N] [--runs R] [--delay-ms MS]
        [--threads T] [--shard-bytes B] [--tasks bytes,classify]

Environment: BUILD (default build), NOSTALL_BENCH_DATA (default
/tmp/nostall-bench-data). Prints a Markdown table (also written to
$BUILD/bench/shards_modes.md).
"""
import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def delaying_proxy(upstream_port, delay_s):
    """Start a TCP proxy on 127.0.0.1 that holds each client->server burst
    delay_s before forwarding it. Returns its port (it runs in a thread)."""
    ready = threading.Event()
    box = {}

    async def pipe(reader, writer, delay):
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                if delay:
                    await asyncio.sleep(delay)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            try:
                writer.close()
            except Exception:
                pass

    async def handle(cr, cw):
        try:
            ur, uw = await asyncio.open_connection("127.0.0.1", upstream_port)
        except OSError:
            cw.close()
            return
        await asyncio.gather(pipe(cr, uw, delay_s), pipe(ur, cw, 0))

    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=512)
        box["port"] = server.sockets[0].getsockname()[1]
        ready.set()
        async with server:
            await server.serve_forever()

    t = threading.Thread(target=lambda: asyncio.run(main()), daemon=True)
    t.start()
    ready.wait()
    return box["port"]


def requests(ngx):
    """Requests nginx has answered so far (its access.log: one line each)."""
    try:
        with open(os.path.join(ngx, "access.log")) as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True, **kw).stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--delay-ms", type=float, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--shard-bytes", default="8M")
    ap.add_argument("--tasks", default="classify")
    a = ap.parse_args()
    build = os.environ.get("BUILD", os.path.join(ROOT, "build"))
    cli = os.path.join(build, "nostall")
    if not os.path.exists(cli):
        sys.exit("no %s: build first (make build, or BUILD=...)" % cli)
    data = os.path.join(os.environ.get("NOSTALL_BENCH_DATA", "/tmp/nostall-bench-data"),
                        "shards_modes-%d" % a.images)
    www = os.path.join(data, "www")
    if not os.path.exists(os.path.join(www, "done")):
        shutil.rmtree(data, ignore_errors=True)
        os.makedirs(www)
        run([cli, "gen", os.path.join(www, "img"), "--images", str(a.images), "--classes", "10",
             "--quiet"])
        run([cli, "pack", os.path.join(www, "img"), os.path.join(www, "s"), "--shard-bytes",
             a.shard_bytes, "--quiet"])
        open(os.path.join(www, "done"), "w").close()
    shards = sorted(f for f in os.listdir(os.path.join(www, "s")) if f.endswith(".tar"))
    ngx = tempfile.mkdtemp(prefix="nostall-shards-modes-")
    env = dict(os.environ, NGINX_OWNER_PID=str(os.getpid()))
    port = int(run(["bash", os.path.join(ROOT, "tests", "lib_nginx.sh"), "start", ngx, www],
                   env=env).strip())
    try:
        slow = delaying_proxy(port, a.delay_ms / 1000.0)
        rows = []
        for task in a.tasks.split(","):
            for mode in ("files", "indexed", "indexed-depth1", "stream"):
                rates = {}
                for p, label in ((port, "none"), (slow, "delay")):
                    base = "http://127.0.0.1:%d" % p
                    if mode == "files":
                        src = os.path.join(ngx, "urls-%d.txt" % p)
                        with open(src, "w") as f:
                            classes = sorted(os.listdir(os.path.join(www, "img")))
                            for k, c in enumerate(classes):
                                for n in sorted(os.listdir(os.path.join(www, "img", c))):
                                    f.write("%s/img/%s/%s\t%d\n" % (base, c, n, k))
                        extra = []
                    else:
                        src = "%s/s/%s-{%s..%s}.tar" % (base, shards[0].split("-")[0],
                                                       shards[0].split("-")[1][:-4],
                                                       shards[-1].split("-")[1][:-4])
                        extra = ["--shard-mode", mode.split("-")[0]]
                        if mode == "indexed-depth1":  # one read at a time per worker
                            extra += ["--io-depth", "1"]
                    cmd = [cli, "bench", src, "--task", task, "--threads", str(a.threads),
                           "--batch-size", "64", "--epochs", "2", "--json", "--quiet"] + extra
                    if task == "classify":
                        cmd += ["--crop", "224"]
                    else:  # each item's room: URLs' sizes are not known at create
                        cmd += ["--max-file-bytes", "1M"]
                    vals = []
                    for _ in range(a.runs):
                        before = requests(ngx)
                        j = json.loads(run(cmd, env=dict(os.environ,
                                                         XDG_CACHE_HOME=os.path.join(ngx, "xdg"))))
                        reqs = (requests(ngx) - before) / 2.0  # per epoch (2 epochs)
                        # the second epoch: the index built, connections warm
                        vals.append(j["per_epoch"][-1]["items_per_second"])
                    rates[label] = (statistics.median(vals), min(vals), max(vals), reqs)
                rows.append((task, mode, rates))
                print("%s %s: %s" % (task, mode, rates), file=sys.stderr, flush=True)
    finally:
        run(["bash", os.path.join(ROOT, "tests", "lib_nginx.sh"), "stop", ngx])
        shutil.rmtree(ngx, ignore_errors=True)
    cpu = ""
    try:
        cpu = [l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
               if l.startswith("model name")][0]
    except (OSError, IndexError):
        cpu = platform.processor()
    out = ["Machine: %s, %d CPUs; %d images (%d shards of about %s), %d threads, batch 64; "
           "median of %d runs (min-max), items/s of the second epoch." %
           (cpu, os.cpu_count(), a.images, len(shards), a.shard_bytes, a.threads, a.runs),
           "",
           "| task | mode | requests per epoch | items/s, no added latency | "
           "items/s, +%g ms per request | ratio |" % a.delay_ms,
           "|---|---|---|---|---|---|"]
    for task, mode, r in rows:
        n, d = r["none"], r["delay"]
        out.append("| %s | %s | %.0f | %.0f (%.0f-%.0f) | %.0f (%.0f-%.0f) | %.2f |" %
                   (task, mode, n[3], n[0], n[1], n[2], d[0], d[1], d[2], d[0] / n[0]))
    text = "\n".join(out)
    print(text)
    os.makedirs(os.path.join(build, "bench"), exist_ok=True)
    with open(os.path.join(build, "bench", "shards_modes.md"), "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
