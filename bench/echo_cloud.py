#!/usr/bin/env python3
"""bench/echo_cloud.py — the data-echoing paper's headline scenario (Choi et
al. 2019) over emulated cloud storage: issue 24. Results: docs/echo_cloud.md.

Images are read one object per item from a server in a network namespace of
this script's own, through the kernel's token-bucket shaper (`tc qdisc tbf`
on the namespace's end of a veth pair: server -> loader traffic only), so the
input pipeline is bandwidth-bound the way streaming from S3 is:

    loader (host) <-- veth, tbf RATE -- moto 5.2.5 or nginx (namespace)

Then:
  1. calibration: the training step of the examples/ classifier
     (examples/echo_experiment.py's CNN, crop 32, batch 64, one torch thread)
     is timed, and the shaper's rate is set so that R = upstream time per
     batch / step time is about --R (default 5);
  2. delivered items/s with a simulated step of upstream / R (`nostall bench
     --step-ms`), for echo factor 1, 2, 4 (echo_point decode) and adaptive
     (echo_max 8), --rounds interleaved rounds, medians, no checksum;
  3. time to a target validation accuracy with the real training step for
     e = 1, e = 4 (decode) and adaptive (max 8), --seeds seeds (learning
     rate per condition from a small grid on a separate tuning seed).

    # as root (ip netns, tc); builds nothing: give the CLI and the library.
    # docs/echo_cloud.md's headline run (~15 min on 2 shared cores) fixed
    # the rate, the training step drifting 2x with the machine's load:
    PYTHONPATH=python NOSTALL_LIBRARY=build-e2/libnostall.so nice -n 10 \\
        /usr/bin/python3 bench/echo_cloud.py --server s3 --cli build-e2/nostall \\
        --calib-steps 40 --rate-mbit 13 --out /tmp/echo_cloud.json --plot docs/echo_cloud.png
    /usr/bin/python3 bench/echo_cloud.py --from /tmp/echo_cloud.json --plot docs/echo_cloud.png

--server s3 (default when the CLI reads s3://): objects in moto's S3 server
(tests/s3_server.py in the venv tests/lib_s3.sh makes; it checks every
signature), items are `s3://BUCKET/KEY` (SigV4 through AWS_ENDPOINT_URL,
path-style). --server
http: the same files from nginx, items are http:// URLs. The namespace, the
veth pair and the server are removed on exit (normal, error, SIGINT/TERM).
"""

import argparse
import atexit
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, os.path.join(ROOT, "python"))

BUCKET = "echo"
PORT = 8642


# adaptive as in the bench rows (echo_max 8: R may exceed 4 here)
EXTRA_CONDITIONS = {"adaptive8": {"echo": "adaptive", "echo_max": 8}}


def log(*a):
    print(*a, flush=True)


def sh(*cmd, check=True, quiet=False):
    p = subprocess.run(list(cmd), capture_output=True, text=True)
    if check and p.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(cmd), (p.stderr or p.stdout).strip()))
    return p.stdout


# --- the namespace, the shaper and the server -------------------------------------

class Net:
    """A namespace with one end of a veth pair; the server runs inside."""

    def __init__(self, burst):
        pid = os.getpid()
        self.ns = "e2echo%d" % pid
        self.host_if, self.ns_if = "e2h%d" % pid, "e2n%d" % pid
        sub = 16 + pid % 200
        self.host_ip, self.ns_ip = "10.231.%d.1" % sub, "10.231.%d.2" % sub
        self.burst = burst
        self.server = None
        self.rate = None
        self.tmp = tempfile.mkdtemp(prefix="nostall-echo-cloud-")
        atexit.register(self.close)
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, lambda *_: sys.exit(130))
        sh("ip", "netns", "add", self.ns)
        sh("ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
        sh("ip", "link", "set", self.ns_if, "netns", self.ns)
        sh("ip", "addr", "add", self.host_ip + "/30", "dev", self.host_if)
        sh("ip", "link", "set", self.host_if, "up")
        sh("ip", "-n", self.ns, "addr", "add", self.ns_ip + "/30", "dev", self.ns_if)
        sh("ip", "-n", self.ns, "link", "set", self.ns_if, "up")
        sh("ip", "-n", self.ns, "link", "set", "lo", "up")

    def shape(self, mbit):
        """tbf on the namespace's veth: what the server sends is limited to
        `mbit` Mbit/s (None: no shaper). The queue holds 50 ms at the rate."""
        if self.rate is not None:
            sh("ip", "netns", "exec", self.ns, "tc", "qdisc", "del", "dev", self.ns_if, "root")
        self.rate = mbit
        if mbit is not None:
            sh("ip", "netns", "exec", self.ns, "tc", "qdisc", "add", "dev", self.ns_if, "root",
               "tbf", "rate", "%.3fmbit" % mbit, "burst", self.burst, "latency", "50ms")

    def qdisc_stats(self):
        return sh("ip", "netns", "exec", self.ns, "tc", "-s", "qdisc", "show", "dev",
                  self.ns_if, check=False).strip()

    def start(self, argv, ready):
        """Start argv inside the namespace; wait until ready() is true."""
        self.server_log = open(os.path.join(self.tmp, "server.log"), "w")
        # the server at the default priority, whatever this script's nice: it
        # stands for storage elsewhere, it should not be starved by the load
        self.server = subprocess.Popen(["ip", "netns", "exec", self.ns, "nice", "-n",
                                        str(-os.nice(0))] + argv,
                                       stdin=subprocess.DEVNULL, stdout=self.server_log,
                                       stderr=subprocess.STDOUT)
        for _ in range(1200):
            if self.server.poll() is not None:
                raise RuntimeError("the server exited: " + open(self.server_log.name).read())
            if ready():
                return
            time.sleep(0.05)
        raise RuntimeError("the server does not answer: " + open(self.server_log.name).read())

    def port_open(self):
        try:
            socket.create_connection((self.ns_ip, PORT), timeout=0.2).close()
            return True
        except OSError:
            return False

    def close(self):
        if self.server is not None and self.server.poll() is None:
            self.server.terminate()  # `ip netns exec` and nice exec: this is the server
            try:
                self.server.wait(5)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait()
        self.server = None
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)
        subprocess.run(["ip", "link", "del", self.host_if], capture_output=True)
        shutil.rmtree(self.tmp, ignore_errors=True)


def start_nginx(net, root):
    conf = os.path.join(net.tmp, "nginx.conf")
    for d in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        os.makedirs(os.path.join(net.tmp, "ngx", d), exist_ok=True)
    with open(conf, "w") as f:
        f.write("""user root;
daemon off;
worker_processes 1;
pid %(t)s/nginx.pid;
error_log %(t)s/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path %(t)s/ngx/body; proxy_temp_path %(t)s/ngx/proxy;
    fastcgi_temp_path %(t)s/ngx/fastcgi; uwsgi_temp_path %(t)s/ngx/uwsgi;
    scgi_temp_path %(t)s/ngx/scgi;
    types { image/jpeg jpg jpeg; }
    default_type application/octet-stream;
    sendfile on; tcp_nodelay on;
    keepalive_requests 100000; keepalive_timeout 60s;
    server { listen %(ip)s:%(port)d; root %(root)s; }
}
""" % {"t": net.tmp, "ip": net.ns_ip, "port": PORT, "root": root})
    net.start(["nginx", "-p", net.tmp, "-c", conf, "-e", os.path.join(net.tmp, "error.log")],
              net.port_open)
    v = subprocess.run(["nginx", "-v"], capture_output=True, text=True)
    return (v.stderr or v.stdout).strip().replace("nginx version: ", "")


def s3_server_python():
    """The python of the venv with moto (tests/lib_s3.sh ensure)."""
    p = subprocess.run(["bash", os.path.join(ROOT, "tests", "lib_s3.sh"), "ensure"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("the S3 server (moto) is unavailable: " + p.stderr.strip())
    return p.stdout.strip()


def start_s3_server(net, root, keys):
    """moto's S3 server (tests/s3_server.py) in the namespace, the objects of
    `keys` (paths under root) linked into its store first, which it loads
    into BUCKET before it listens; it checks every request's signature."""
    srv = os.path.join(net.tmp, "s3")
    for k in keys:
        dst = os.path.join(srv, "data", BUCKET, k + ".s3obj")
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(os.path.join(root, k), dst)
    os.environ.setdefault("S3_TEST_ACCESS_KEY", "AKIANOSTALLTEST00001")
    os.environ.setdefault("S3_TEST_SECRET", "nostall-test/secret+0")
    py = s3_server_python()
    net.start([py, os.path.join(ROOT, "tests", "s3_server.py"), "serve", srv, str(PORT), BUCKET,
               "--host", net.ns_ip], net.port_open)
    os.environ.update(AWS_ENDPOINT_URL="http://%s:%d" % (net.ns_ip, PORT),
                      AWS_ACCESS_KEY_ID=os.environ["S3_TEST_ACCESS_KEY"],
                      AWS_SECRET_ACCESS_KEY=os.environ["S3_TEST_SECRET"],
                      AWS_REGION="us-east-1")
    for v in ("AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        os.environ.pop(v, None)
    v = subprocess.run([py, "-c", "import moto, platform; print(moto.__version__, "
                        "platform.python_version())"], capture_output=True, text=True).stdout.split()
    return "moto %s (Python %s)" % tuple(v[:2]) if len(v) >= 2 else "moto"


def image_list(root, sub):
    """(key, label) of an ImageFolder under root/sub, labels by sorted class."""
    out = []
    classes = sorted(d for d in os.listdir(os.path.join(root, sub))
                     if os.path.isdir(os.path.join(root, sub, d)))
    for label, c in enumerate(classes):
        for f in sorted(os.listdir(os.path.join(root, sub, c))):
            out.append(("%s/%s/%s" % (sub, c, f), label))
    return out


def write_list(path, items, prefix):
    with open(path, "w") as f:
        for k, label in items:
            f.write("%s%s\t%d\n" % (prefix, k, label))


# --- measurements --------------------------------------------------------------------

BENCH = [("e=1", []),
         ("decode e=2", ["--echo-point", "decode", "--echo-factor", "2"]),
         ("decode e=4", ["--echo-point", "decode", "--echo-factor", "4"]),
         ("adaptive (max 8)", ["--echo", "adaptive", "--echo-max", "8"])]


def bench_round(args, data, step_ms, name, extra):
    cmd = [args.cli, "bench", data, "--json", "--quiet", "--no-checksum", "--step-ms",
           "%.3f" % step_ms, "--batch-size", str(args.batch_size), "--crop", str(args.crop),
           "--threads", "1", "--io-depth", str(args.io_depth), "--epochs", "1",
           "--echo-buffer", str(args.echo_buffer), "--seed", "7"] + extra
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(cmd), p.stderr.strip()))
    j = json.loads(p.stdout)
    st = j["stats"]
    return {"items_per_second": j["items_per_second"], "seconds": j["seconds"],
            "stall_fraction": j["stall_fraction"], "fresh_items": st["fresh_items"],
            "items": st["items_delivered"],
            "fresh_per_second": st["fresh_items"] / j["seconds"],
            "achieved_factor": st["items_delivered"] / max(st["fresh_items"], 1),
            "estimated_R": (j.get("echo") or {}).get("estimated_R"),
            "bad_items": st.get("bad_items", 0)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", choices=["auto", "s3", "http"], default="auto")
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "nostall"))
    ap.add_argument("--data-dir", default="/tmp/nostall-echo-cloud-data")
    ap.add_argument("--train-images", type=int, default=3000)
    ap.add_argument("--val-images", type=int, default=1000)
    ap.add_argument("--classes", type=int, default=40)
    ap.add_argument("--image-size", type=int, default=128)
    ap.add_argument("--crop", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--io-depth", type=int, default=4)
    ap.add_argument("--echo-buffer", type=int, default=512)
    ap.add_argument("--R", type=float, default=5.0, help="target R of the calibration")
    ap.add_argument("--rate-mbit", type=float, help="skip the calibration: shaper rate")
    ap.add_argument("--burst", default="16kb", help="tbf burst")
    ap.add_argument("--calib-steps", type=int, default=30)
    ap.add_argument("--calib-batches", type=int, default=16)
    ap.add_argument("--calib-iters", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--bench-step-ms", type=float,
                    help="the bench's simulated step (default: upstream / R)")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--conditions", default="baseline,decode-e4,adaptive8",
                    help="of examples/echo_experiment.py's, and adaptive8 (echo_max 8)")
    ap.add_argument("--lrs", default="0.02,0.05", help="learning-rate grid (tuning seed 100)")
    ap.add_argument("--tune-seed", type=int, default=100)
    ap.add_argument("--target", type=float, default=0.80)
    ap.add_argument("--eval-fresh", type=int, default=512)
    ap.add_argument("--eval-batch", type=int, default=4)
    ap.add_argument("--max-fresh", type=int, default=40000)
    ap.add_argument("--max-seconds", type=float, default=240)
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--no-train", action="store_true")
    ap.add_argument("--out", default="/tmp/echo_cloud.json")
    ap.add_argument("--plot", help="write the plot here (PNG)")
    ap.add_argument("--from", dest="from_json", help="only print the table / plot of this JSON")
    args = ap.parse_args()

    if args.from_json:
        with open(args.from_json) as f:
            results = json.load(f)
        report(results)
        if args.plot:
            plot(results, args.plot)
        return
    if os.geteuid() != 0:
        sys.exit("echo_cloud: needs root (ip netns, tc)")
    import torch
    torch.set_num_threads(1)
    import nostall
    import echo_experiment as ee
    ee.CONDITIONS.update(EXTRA_CONDITIONS)

    t_start = time.time()
    args.cli = os.path.abspath(args.cli)
    # examples/echo_experiment.py's names for the shared options
    args.storage_mbps = 0
    args.image_size = args.image_size
    paths = ee.make_data(args)
    root = args.data_dir
    train_sub = os.path.basename(paths["train"])
    items = image_list(root, train_sub)
    nbytes = sum(os.path.getsize(os.path.join(root, k)) for k, _ in items)
    val = ee.load_val(nostall, paths["val"], args.crop)
    classes = len(set(lbl for _, lbl in items))

    server = args.server
    if server == "auto":
        lib = os.environ.get("NOSTALL_LIBRARY", "")
        blobs = [open(f, "rb").read() for f in (args.cli, lib) if f and os.path.isfile(f)]
        server = "s3" if any(b"AWS_ENDPOINT_URL" in b for b in blobs) else "http"
    net = Net(args.burst)
    if server == "s3":
        software = start_s3_server(net, root, [k for k, _ in items])
        prefix = "s3://%s/" % BUCKET
    else:
        software = start_nginx(net, root)
        prefix = "http://%s:%d/" % (net.ns_ip, PORT)
    url_list = os.path.join(net.tmp, "train.txt")
    write_list(url_list, items, prefix)
    urls = {"train": url_list}
    log("data: %d train JPEGs (%.1f MB, mean %.1f KB) in %d classes, %d val (local); "
        "server %s in netns %s at %s; %s" % (len(items), nbytes / 1e6, nbytes / len(items) / 1e3,
                                             classes, len(val[1]), software, net.ns, prefix,
                                             os.uname().nodename))

    # --- calibration --------------------------------------------------------------
    batch_bytes = args.batch_size * nbytes / len(items)
    net.shape(None)
    up_free = ee.time_upstream(nostall, args, urls, 0, batches=args.calib_batches)
    step_mem = ee.time_step(nostall, args, paths, classes)
    log("calibration: upstream without the shaper %.1f ms/batch; step on in-memory batches "
        "%.1f ms" % (up_free, step_mem))
    # The step is timed in the training loop fed at the current rate (it is
    # slower there than alone: the loader's thread and the server share the
    # cores); on a shared machine it drifts, so the median of every timing
    # so far is used, and the rate is corrected until R is within 0.5 of
    # --R (at most --calib-iters times).
    steps_ms = []
    if args.rate_mbit is None:
        # bits on the wire ~ 1.07 x the bytes (headers, TCP/IP): a first guess
        rate = 8 * 1.07 * batch_bytes / (args.R * step_mem / 1000) / 1e6
        for it in range(args.calib_iters):
            net.shape(rate)
            steps_ms.append(ee.time_in_training(nostall, args, urls, classes, 0,
                                                steps=args.calib_steps)[2])
            up = ee.time_upstream(nostall, args, urls, 0, batches=args.calib_batches)
            step = statistics.median(steps_ms)
            log("  rate %.2f Mbit/s: upstream %.1f ms/batch, step %.1f ms (median of %s): "
                "R = %.2f" % (rate, up, step, ", ".join("%.0f" % x for x in steps_ms),
                              up / step))
            if abs(up / step - args.R) <= 0.5:
                break
            # upstream time ~ 1/rate where the shaper is the bottleneck; at most
            # a factor 2 per iteration (a timing taken in a burst of load)
            rate *= min(max(up / (args.R * step), 0.5), 2.0)
        args.rate_mbit = round(rate, 2)
    net.shape(args.rate_mbit)
    wall, step_mean, step_last = ee.time_in_training(nostall, args, urls, classes, 0,
                                                     steps=args.calib_steps)
    steps_ms.append(step_last)
    step = statistics.median(steps_ms)
    up = ee.time_upstream(nostall, args, urls, 0, batches=args.calib_batches)
    cal = {"rate_mbit": args.rate_mbit, "burst": args.burst, "upstream_ms": up,
           "steps_ms": steps_ms,
           "upstream_unshaped_ms": up_free, "step_ms": step, "step_mean_ms": step_mean,
           "step_memory_ms": step_mem, "wall_ms": wall, "R": up / step,
           "batch_bytes": batch_bytes, "goodput_mbit": 8 * batch_bytes / up / 1e3}
    log("calibration: tbf rate %.2f Mbit/s: upstream %.1f ms/batch (%.1f without the shaper; "
        "goodput %.2f Mbit/s of image bytes); step %.1f ms (median of the timings in training; "
        "the last one's mean %.1f; "
        "%.1f in memory): R = %.2f; baseline training %.1f ms per step"
        % (args.rate_mbit, up, up_free, cal["goodput_mbit"], step, step_mean, step_mem,
           cal["R"], wall))

    results = {"args": {k: v for k, v in vars(args).items()}, "server": server,
               "software": software, "items": len(items), "bytes": nbytes,
               "classes": classes, "calibration": cal, "bench": {}, "runs": [], "tuning": [],
               "machine": {"node": os.uname().nodename, "cpus": os.cpu_count(),
                           "arch": platform.machine(), "kernel": os.uname().release,
                           "torch": torch.__version__},
               "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t_start))}
    loads = []

    def save():
        results["elapsed_seconds"] = time.time() - t_start
        results["loadavg"] = loads
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)

    # --- delivered items/s, simulated step -----------------------------------------
    # The simulated step is upstream / R: the upstream time (bandwidth-bound)
    # is steady, the training step on this shared machine is not (it moved
    # 2x between timings), so the bench rows are at R = --R exactly.
    bench_step = args.bench_step_ms or up / args.R
    cal["bench_step_ms"] = bench_step
    if not args.no_bench:
        samples = {name: [] for name, _ in BENCH}
        for r in range(args.rounds):
            for name, extra in BENCH:
                loads.append(os.getloadavg()[0])
                s = bench_round(args, url_list, bench_step, name, extra)
                samples[name].append(s)
                log("bench round %d %-17s %7.1f items/s (fresh %6.1f/s, factor %.2f, stall %.0f%%)"
                    % (r + 1, name, s["items_per_second"], s["fresh_per_second"],
                       s["achieved_factor"], 100 * s["stall_fraction"]))
        for name, ss in samples.items():
            med = {k: statistics.median(s[k] for s in ss)
                   for k in ("items_per_second", "fresh_per_second", "achieved_factor",
                             "stall_fraction")}
            med["samples"] = [s["items_per_second"] for s in ss]
            med["runs"] = ss
            results["bench"][name] = med
        base = results["bench"]["e=1"]["items_per_second"]
        for v in results["bench"].values():
            v["speedup"] = v["items_per_second"] / base
        results["qdisc_after_bench"] = net.qdisc_stats()
        save()

    # --- time to target, real training step ----------------------------------------
    if not args.no_train:
        lrs = [float(x) for x in args.lrs.split(",")]
        conds = [c for c in args.conditions.split(",") if c]
        chosen = {}
        for cond in conds:
            if len(lrs) > 1:
                log("%s: tuning lr on seed %d" % (cond, args.tune_seed))
                tuned = []
                for lr in lrs:
                    loads.append(os.getloadavg()[0])
                    tuned.append(ee.train_run(nostall, args, urls, classes, val, cond, lr,
                                              args.tune_seed))
                results["tuning"] += tuned
                chosen[cond] = min(tuned, key=ee.tune_key)["lr"]
            else:
                chosen[cond] = lrs[0]
        log("learning rates: %s; seeds 0-%d, the conditions interleaved"
            % (", ".join("%s %g" % kv for kv in chosen.items()), args.seeds - 1))
        for seed in range(args.seeds):
            for cond in conds:
                loads.append(os.getloadavg()[0])
                results["runs"].append(ee.train_run(nostall, args, urls, classes, val, cond,
                                                    chosen[cond], seed))
                save()
    results["qdisc_final"] = net.qdisc_stats()
    save()
    log("\n%.0f s in all; results in %s" % (time.time() - t_start, args.out))
    report(results)
    if args.plot:
        plot(results, args.plot)


# --- report ---------------------------------------------------------------------------

def summary(results):
    import echo_experiment as ee
    ee.CONDITIONS.update(EXTRA_CONDITIONS)
    res = dict(results)
    res["calibration"] = dict(results["calibration"])
    return ee.summarize(res) if results["runs"] else []


def report(results):
    cal = results["calibration"]
    log("server %s (%s); tbf %.2f Mbit/s; R = %.2f (upstream %.1f ms/batch, %.1f without the "
        "shaper; step %.1f ms)" % (results["server"], results["software"], cal["rate_mbit"],
                                    cal["R"], cal["upstream_ms"], cal["upstream_unshaped_ms"],
                                    cal["step_ms"]))
    if results["bench"]:
        log("bench: simulated step %.1f ms (upstream / %g)"
            % (cal.get("bench_step_ms", cal["step_ms"]), results["args"]["R"]))
        log("\n| configuration | delivered items/s | x e=1 | fresh items/s | achieved factor "
            "| stall | rounds |")
        log("|---|---|---|---|---|---|---|")
        for name, v in results["bench"].items():
            log("| %s | %.0f | %.2fx | %.0f | %.2f | %.0f %% | %s |"
                % (name, v["items_per_second"], v["speedup"], v["fresh_per_second"],
                   v["achieved_factor"], 100 * v["stall_fraction"],
                   ", ".join("%.0f" % s for s in v["samples"])))
    rows = summary(results)
    if rows:
        log("\n| condition | lr | reached | fresh to %.2f | x e=1 | seconds to %.2f | x e=1 | "
            "factor | stall | step ms | per seed (s) |" % ((results["args"]["target"],) * 2))
        log("|---|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            cell = lambda k: ("%.0f ± %.0f" % (r[k], r[k + "_sd"]) if k == "fresh" else
                              "%.1f ± %.1f" % (r[k], r[k + "_sd"])) if r[k] is not None else "-"
            rel = lambda k: "%.2f" % r[k + "_rel"] if r[k + "_rel"] is not None else "-"
            log("| %s | %g | %d/%d | %s | %s | %s | %s | %.2f | %.0f %% | %.1f | %s |"
                % (r["condition"], r["lr"], r["reached"], r["runs"], cell("fresh"),
                   rel("fresh"), cell("seconds"), rel("seconds"), r["factor"],
                   100 * r["stall"], r["step_ms"],
                   ", ".join("%.1f" % s for s in r["seconds_all"])))
        base = next((r for r in rows if r["condition"] == "baseline"), None)
        if base:
            log("In the runs: e=1 took %.1f ms per step of wall clock for %.1f ms of training "
                "step: R in training = %.2f" % (base["wall_ms_per_step"], base["step_ms"],
                                               base["R_run"]))
    if results.get("bench"):
        est = [s.get("estimated_R") for s in results["bench"].get("e=1", {}).get("runs", [])]
        est = [e for e in est if e]
        if est:
            log("nostall's own estimate of R in the e=1 bench rounds: %s"
                % ", ".join("%.2f" % e for e in est))
    return rows


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    cal = results["calibration"]
    fig, axes = plt.subplots(1, 4, figsize=(20, 4.8))
    ax = axes[0]
    names = list(results["bench"])
    if names:
        ips = [results["bench"][n]["items_per_second"] for n in names]
        fps = [results["bench"][n]["fresh_per_second"] for n in names]
        x = range(len(names))
        ax.bar([i - 0.2 for i in x], ips, 0.4, label="delivered items/s", color="tab:blue")
        ax.bar([i + 0.2 for i in x], fps, 0.4, label="fresh items/s (from the server)",
               color="tab:gray")
        for i, n in enumerate(names):
            ax.scatter([i - 0.2] * len(results["bench"][n]["samples"]),
                       results["bench"][n]["samples"], color="k", s=10, zorder=3)
        ax.set_xticks(list(x))
        ax.set_xticklabels(names, rotation=20)
        ax.set_ylabel("items/s")
        ax.set_title("simulated step %.0f ms (median of %d rounds; dots: rounds)"
                     % (cal.get("bench_step_ms", cal["step_ms"]), len(results["bench"][names[0]]["samples"])), fontsize=9)
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    rows = summary(results)
    colors = {"baseline": "k", "decode-e2": "tab:orange", "decode-e4": "tab:red",
              "adaptive": "tab:purple", "adaptive8": "tab:purple"}
    label = {"baseline": "e = 1", "decode-e2": "e = 2", "decode-e4": "e = 4 (decode)",
             "adaptive": "adaptive (max 4)", "adaptive8": "adaptive (max 8)"}
    target = results["args"]["target"]
    ax = axes[1]
    for r in results["runs"]:
        c = colors.get(r["condition"], "tab:blue")
        ax.plot([p[1] for p in r["curve"]], [p[3] for p in r["curve"]], "-", color=c, lw=1,
                alpha=0.8, label=label.get(r["condition"]) if r["seed"] == 0 else None)
    ax.axhline(target, color="gray", lw=0.8, ls=":")
    ax.set_xlabel("training seconds (wall clock, evaluation pauses left out)")
    ax.set_ylabel("validation accuracy")
    ax.set_ylim(0, 1)
    ax.set_title("accuracy vs wall clock (%d seeds each)" % results["args"]["seeds"], fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    for ax, key, title in ((axes[2], "seconds", "wall-clock seconds to %.2f" % target),
                           (axes[3], "fresh", "items to %.2f: fresh (solid), delivered "
                                              "(light)" % target)):
        for j, r in enumerate(rows):
            c = colors.get(r["condition"], "tab:blue")
            ok = [x for x in results["runs"] if x["condition"] == r["condition"] and x["reached"]]
            vals = r[key + "_all"]
            if vals:
                ax.bar(j, statistics.mean(vals), 0.6, color=c, alpha=0.55)
                ax.scatter([j] * len(vals), vals, color=c, s=14, zorder=3)
            if key == "fresh" and ok:
                # items delivered up to the target: steps x batch
                dl = [x["steps"] * results["args"]["batch_size"] for x in ok]
                ax.bar(j, statistics.mean(dl), 0.6, color=c, alpha=0.15, zorder=0)
            miss = r["runs"] - r["reached"]
            if miss:
                ax.annotate("%d/%d not reached" % (miss, r["runs"]), (j, 0), ha="center",
                            va="bottom", fontsize=7, color="r")
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels([label.get(r["condition"], r["condition"]) for r in rows],
                           fontsize=8)
        ax.set_title(title + " (bars: mean; dots: seeds)", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    # R as it held: nostall's estimate in the e=1 bench rounds, and the e=1
    # training runs' wall time per step over their training step (the
    # calibration's single step timing drifts with the machine's load)
    rs = []
    est = [x.get("estimated_R") for x in results["bench"].get("e=1", {}).get("runs", [])]
    est = [e for e in est if e]
    if est:
        rs.append("%.1f in the bench" % statistics.median(est))
    base = next((r for r in rows if r["condition"] == "baseline"), None)
    if base:
        rs.append("%.1f in training" % base["R_run"])
    fig.suptitle("Data echoing over a bandwidth-limited %s (tbf %.1f Mbit/s; R = %s): "
                 "small CNN on CPU" % ({"s3": "S3 server (moto)", "http": "HTTP server (nginx)"}
                                       [results["server"]], cal["rate_mbit"],
                                       ", ".join(rs) or "%.1f" % cal["R"]))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    log("plot written to %s" % path)


if __name__ == "__main__":
    main()
