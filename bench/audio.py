#!/usr/bin/python3
"""audio.py — task=audio side by side with torchaudio, on the same files, in one run.

The job: each item is a clip (FLAC or MP3, 44.1 kHz mono, --seconds long),
loaded, resampled to 16 kHz, a random window of --clip-seconds cut out, and
turned into a log-mel spectrogram (n_fft 400, hop 160, 64 mels, HTK,
power 2, then decibels), batched by 16 with its label.

Systems, each on one core:

  nostall      nostall.Loader(task="audio", threads=1): the clip decoded
               with libsndfile (FLAC: only the frames the window's
               resampling segments need, by seeking; MP3: up to the end of
               the window), resampled with libsoxr (HQ), the log-mel with
               FFTW3 in float32. In this process; the consumer thread only
               takes batches.
  torchaudio   the usual PyTorch pipeline: a Dataset whose __getitem__ does
               torchaudio.load (libsox), mean over channels,
               transforms.Resample(sr, 16000) (one per source rate, made
               once), a random crop, transforms.MelSpectrogram +
               AmplitudeToDB; DataLoader(batch_size=16, shuffle=True,
               num_workers=0) with torch.set_num_threads(1): on one core the
               favourable choice (no worker process, no pickling).
  torchaudio (window load)
               the same, but loading only the window: torchaudio.info for the
               length, then torchaudio.load(frame_offset, num_frames) of the
               window plus a margin at the source rate (a smarter pipeline
               than most; libsox seeks FLAC, and decodes MP3 up to the
               window).

Each system first runs one untimed warm-up epoch (page cache, imports,
filter design). Then --rounds rounds, each timing one epoch of every system,
interleaved (A B C A B C ...). Reported: the medians over rounds of items/s
(wall clock) and of items per CPU-second (user + system time of this
process: the per-core figure, steadier on a shared machine), and the ratios
of the medians; the machine (CPU model, cores, versions).

Data: `nostall gen --task audio` (tools/gen_audio.c) when the CLI has it
($NOSTALL_CLI or build/nostall), else the same kind of clips written here
through libsndfile. --data DIR uses an existing AudioFolder instead.

  /usr/bin/python3 bench/audio.py                 # FLAC and MP3, 96 clips of 10 s
  /usr/bin/python3 bench/audio.py --markdown out.md --json out.json
"""
import argparse
import ctypes
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("NOSTALL_LIBRARY", os.path.join(ROOT, "build", "libnostall.so"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torchaudio  # noqa: E402

import nostall  # noqa: E402

RATE, N_FFT, HOP, N_MELS, BATCH = 16000, 400, 160, 64, 16


# ---- data ------------------------------------------------------------------

def write_clips(root, fmt, clips, seconds, rate, classes=4, seed=0):
    """The generator's kind of clips (tones, chirps, band noise per class)
    through libsndfile, for a CLI without `gen --task audio`."""
    lib = ctypes.CDLL("libsndfile.so.1")

    class Info(ctypes.Structure):
        _fields_ = [("frames", ctypes.c_int64), ("samplerate", ctypes.c_int),
                    ("channels", ctypes.c_int), ("format", ctypes.c_int),
                    ("sections", ctypes.c_int), ("seekable", ctypes.c_int)]

    lib.sf_open.restype = ctypes.c_void_p
    lib.sf_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(Info)]
    lib.sf_writef_float.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    lib.sf_writef_float.restype = ctypes.c_int64
    lib.sf_close.argtypes = [ctypes.c_void_p]
    lib.sf_command.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
    code = {"flac": 0x170002, "mp3": 0x230082, "wav": 0x010002}[fmt]
    rng = np.random.default_rng(seed)
    for i in range(clips):
        k = i % classes
        n = int(seconds * rng.uniform(0.9, 1.1) * rate)
        t = np.arange(n) / rate
        f = 150 * (3600 / 150) ** (k / max(classes - 1, 1)) * rng.uniform(0.97, 1.03)
        kind = k % 3
        if kind == 0:
            x = np.sin(2 * np.pi * f * t) + 0.5 * np.sin(4 * np.pi * f * t)
        elif kind == 1:
            x = np.sin(2 * np.pi * (f * t + f * t * t / (2 * t[-1])))
        else:
            x = np.convolve(rng.standard_normal(n), np.hanning(64), "same") * np.sin(2 * np.pi * f * t)
        x = (0.3 * x / (np.abs(x).max() + 1e-9) + 0.005 * rng.standard_normal(n)).astype(np.float32)
        d = os.path.join(root, "class_%03d" % k)
        os.makedirs(d, exist_ok=True)
        info = Info(0, rate, 1, code, 0, 0)
        h = lib.sf_open(os.path.join(d, "clip_%06d.%s" % (i, fmt)).encode(), 0x20, ctypes.byref(info))
        assert h, "libsndfile cannot write %s" % fmt
        if fmt == "mp3":
            q = ctypes.c_double(0.4)
            lib.sf_command(h, 0x1300, ctypes.byref(q), 8)  # SFC_SET_COMPRESSION_LEVEL
        assert lib.sf_writef_float(h, x.ctypes.data, n) == n
        lib.sf_close(h)


def make_data(root, fmt, clips, seconds, rate):
    cli = os.environ.get("NOSTALL_CLI", os.path.join(ROOT, "build", "nostall"))
    out = os.path.join(root, fmt)
    try:
        subprocess.run([cli, "gen", "--task", "audio", out, "--clips", str(clips), "--classes", "4",
                        "--seconds", str(seconds), "--jitter", "0.1", "--rates", str(rate),
                        "--formats", fmt, "--quiet"], check=True, stderr=subprocess.DEVNULL)
        return out, "nostall gen --task audio"
    except (OSError, subprocess.CalledProcessError):
        write_clips(out, fmt, clips, seconds, rate)
        return out, "libsndfile (bench/audio.py)"


# ---- the systems -------------------------------------------------------------

class Clips(torch.utils.data.Dataset):
    def __init__(self, root, clip_seconds, window_load):
        self.files = sorted((os.path.join(r, f), int(os.path.basename(r).split("_")[-1]))
                            for r, _, fs in os.walk(root) for f in fs)
        self.win = int(round(clip_seconds * RATE))
        self.clip_seconds = clip_seconds
        self.window_load = window_load
        self.resample = {}
        self.mel = torchaudio.transforms.MelSpectrogram(sample_rate=RATE, n_fft=N_FFT,
                                                        hop_length=HOP, n_mels=N_MELS)
        self.db = torchaudio.transforms.AmplitudeToDB(stype="power")

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        path, label = self.files[i]
        if self.window_load:
            info = torchaudio.info(path)
            sr, n = info.sample_rate, info.num_frames
            need = int(self.clip_seconds * sr) + 64
            start = random.randint(0, max(0, n - need))
            x, sr = torchaudio.load(path, frame_offset=start, num_frames=need)
        else:
            x, sr = torchaudio.load(path)
        x = x.mean(0, keepdim=True)
        if sr != RATE:
            if sr not in self.resample:
                self.resample[sr] = torchaudio.transforms.Resample(sr, RATE)
            x = self.resample[sr](x)
        if self.window_load:
            x = x[:, :self.win]
        else:
            s = random.randint(0, max(0, x.shape[1] - self.win))
            x = x[:, s:s + self.win]
        if x.shape[1] < self.win:
            x = torch.nn.functional.pad(x, (0, self.win - x.shape[1]))
        return self.db(self.mel(x))[0], label


class TorchSystem:
    def __init__(self, root, clip_seconds, window_load):
        self.ds = Clips(root, clip_seconds, window_load)
        self.dl = torch.utils.data.DataLoader(self.ds, batch_size=BATCH, shuffle=True, num_workers=0)

    def epoch(self):
        n = 0
        for x, y in self.dl:
            n += x.shape[0]
        return n


class NostallSystem:
    """A loader per epoch (epochs=1): its threads end with the epoch, so they
    prepare nothing ahead while another system is timed."""

    def __init__(self, root, clip_seconds, threads):
        self.root, self.threads, self.clip_seconds, self.seed = root, threads, clip_seconds, 0

    def epoch(self):
        self.seed += 1
        ld = nostall.Loader(self.root, task="audio", clip_seconds=self.clip_seconds,
                            batch_size=BATCH, threads=self.threads, n_fft=N_FFT, hop=HOP,
                            n_mels=N_MELS, sample_rate=RATE, seed=self.seed, epochs=1)
        n = 0
        for b in ld:
            n += b["mel"].shape[0]
        ld.close()
        return n


def cpu_s():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def machine():
    model = platform.processor()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(), "python": platform.python_version(),
            "torch": torch.__version__, "torchaudio": torchaudio.__version__,
            "kernel": platform.release()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--formats", default="flac,mp3")
    ap.add_argument("--clips", type=int, default=96)
    ap.add_argument("--seconds", type=float, default=10.0, help="clip length (s)")
    ap.add_argument("--rate", type=int, default=44100, help="the clips' sample rate")
    ap.add_argument("--clip-seconds", type=float, default=1.0, help="the window (s)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="nostall threads (torch: 1 core)")
    ap.add_argument("--data", help="an existing AudioFolder (one format) instead of generated clips")
    ap.add_argument("--json", help="write every sample here")
    ap.add_argument("--markdown", help="write the table here")
    a = ap.parse_args()
    torch.set_num_threads(1)
    random.seed(0)
    tmp = tempfile.mkdtemp(prefix="nostall-audio-bench-")
    sets = []
    if a.data:
        sets.append((os.path.basename(a.data.rstrip("/")), a.data, "given"))
    else:
        for fmt in a.formats.split(","):
            d, how = make_data(tmp, fmt, a.clips, a.seconds, a.rate)
            sets.append((fmt, d, how))
    results = {"machine": machine(), "config": vars(a), "sets": {}}
    print("machine: %(cpu)s, %(cores)d cores; torch %(torch)s, torchaudio %(torchaudio)s" % results["machine"])
    for name, d, how in sets:
        systems = [("nostall", NostallSystem(d, a.clip_seconds, a.threads)),
                   ("torchaudio", TorchSystem(d, a.clip_seconds, False)),
                   ("torchaudio (window load)", TorchSystem(d, a.clip_seconds, True))]
        samples = {s: {"items_s": [], "items_cpu_s": []} for s, _ in systems}
        for _, s in systems:  # warm-up
            s.epoch()
        for r in range(a.rounds):
            for sname, s in systems:
                t0, c0 = time.perf_counter(), cpu_s()
                n = s.epoch()
                wall, cpu = time.perf_counter() - t0, cpu_s() - c0
                samples[sname]["items_s"].append(n / wall)
                samples[sname]["items_cpu_s"].append(n / cpu)
        med = {s: {k: statistics.median(v) for k, v in m.items()} for s, m in samples.items()}
        results["sets"][name] = {"data": d, "written_by": how, "samples": samples, "medians": med}
        base = med["nostall"]
        print("\n%s: %d clips of %.0f s at %d Hz (%s), %.1f s windows, %d rounds"
              % (name, a.clips, a.seconds, a.rate, how, a.clip_seconds, a.rounds))
        print("  %-26s %12s %14s %10s %12s" % ("system", "items/s", "items/CPU-s", "ratio", "ratio (CPU)"))
        for s, m in med.items():
            print("  %-26s %12.1f %14.1f %9.2fx %11.2fx" % (s, m["items_s"], m["items_cpu_s"],
                  base["items_s"] / m["items_s"], base["items_cpu_s"] / m["items_cpu_s"]))
    if a.json:
        json.dump(results, open(a.json, "w"), indent=1)
    if a.markdown:
        m = results["machine"]
        with open(a.markdown, "w") as f:
            f.write("Machine: %s, %d cores; Python %s, torch %s, torchaudio %s. "
                    "%d rounds, medians; nostall with %d thread(s), torchaudio in-process "
                    "(num_workers=0, 1 torch thread).\n\n" % (m["cpu"], m["cores"], m["python"],
                    m["torch"], m["torchaudio"], a.rounds, a.threads))
            f.write("| clips | system | items/s | items/CPU-s | nostall is (wall) | nostall is (CPU) |\n")
            f.write("|---|---|---:|---:|---:|---:|\n")
            for name, r in results["sets"].items():
                base = r["medians"]["nostall"]
                for s, v in r["medians"].items():
                    f.write("| %s | %s | %.1f | %.1f | %s | %s |\n" % (
                        name, s, v["items_s"], v["items_cpu_s"],
                        "" if s == "nostall" else "%.2fx" % (base["items_s"] / v["items_s"]),
                        "" if s == "nostall" else "%.2fx" % (base["items_cpu_s"] / v["items_cpu_s"])))


if __name__ == "__main__":
    main()
