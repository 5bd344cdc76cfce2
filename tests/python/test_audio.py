"""task=audio through the Python face, against torchaudio (Debian's 0.13).

The references are torchaudio's own: MelSpectrogram + AmplitudeToDB applied
to the very waveform nostall delivers for the same item (eval mode: the
centred window, so a waveform loader and a log-mel loader give the same
window), and torchaudio.functional.resample of the clip torchaudio loads.

Tolerances (docs/audio.md):
  - log-mel: every mel bin within 60 dB of the item's peak within 1e-3
    relative in power (4.3e-3 dB); with top_db=80, every value within
    0.02 dB. Below 60 dB under the peak both float32 FFTs' rounding
    dominates (torchaudio's float32 result differs from its own float64
    one by up to 1e-2 relative there).
  - resampling, on clips band-limited to 0.4 of the lower rate: within 2e-4
    (peak ~0.6) of torchaudio's resample with librosa's "kaiser_best"
    filter, 200 samples in from both ends; within 2e-2 of its default
    (a Hann-windowed sinc of 6 zero crossings, which droops near Nyquist).
Also: the dict a batch is, 1 and 3 threads give the same tensors, exact
resume mid-epoch, bad clips are reported skips with their reasons.
"""

import ctypes
import os

import numpy as np
import pytest
import torch

try:
    import torchaudio
except ImportError:  # make test-torch2's venv has torch 2 and no torchaudio
    torchaudio = None

needs_torchaudio = pytest.mark.skipif(
    torchaudio is None, reason="torchaudio is not installed here (its MelSpectrogram and resample "
    "are the references; Debian's python3-torchaudio, make test's, has them)")

import nostall

FORMATS = {"wav": 0x010002, "flac": 0x170002, "mp3": 0x230082, "ogg": 0x200060, "f32.wav": 0x010006}


def write(path, x, sr, fmt):
    """x: float32 [frames] or [frames, channels], through libsndfile."""
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
    x = np.ascontiguousarray(x, dtype=np.float32)
    ch = 1 if x.ndim == 1 else x.shape[1]
    info = Info(0, sr, ch, FORMATS[fmt], 0, 0)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    h = lib.sf_open(path.encode(), 0x20, ctypes.byref(info))
    assert h, path
    assert lib.sf_writef_float(h, x.ctypes.data, x.shape[0]) == x.shape[0]
    lib.sf_close(h)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """3 classes x 6 clips of 0.4 .. 1.6 s: WAV, FLAC, MP3, Ogg at 8 .. 44.1 kHz."""
    root = str(tmp_path_factory.mktemp("audio") / "data")
    rng = np.random.default_rng(11)
    fmts, rates = ["wav", "flac", "mp3", "ogg"], [8000, 16000, 22050, 44100]
    for i in range(18):
        c, sr = i % 3, rates[(i // 3) % 4]
        n = int(rng.uniform(0.4, 1.6) * sr)
        t = np.arange(n) / sr
        x = 0.3 * np.sin(2 * np.pi * [250, 800, 2200][c] * t) + 0.02 * rng.standard_normal(n)
        write(f"{root}/class_{c}/clip_{i:02d}.{fmts[i % 4]}", x, sr, fmts[i % 4])
    return root


@pytest.fixture(scope="module")
def bandlimited(tmp_path_factory):
    """Sums of sines below 0.4 of the lower rate, as float WAVs at 8 .. 48 kHz."""
    root = str(tmp_path_factory.mktemp("audio") / "bl")
    rng = np.random.default_rng(5)
    for sr in (8000, 22050, 32000, 44100, 48000):
        t = np.arange(int(1.5 * sr)) / sr
        fmax = 0.4 * min(sr, 16000)
        x = sum(rng.uniform(0.02, 0.1) * np.sin(2 * np.pi * f * t + rng.uniform(0, 6.3))
                for f in rng.uniform(50, fmax, 12))
        write(f"{root}/a/s{sr}.wav", x, sr, "f32.wav")
    return root


def batches(loader):
    out = []
    for b in loader:
        out.append(({k: (v.clone() if torch.is_tensor(v) else v) for k, v in b.items()},
                    loader.last_indices.copy()))
    return out


def test_batch_fields(folder):
    ld = nostall.Loader(folder, task="audio", clip_seconds=0.5, batch_size=4, threads=2, epochs=1,
                        n_mels=40)
    got = batches(ld)
    assert sum(b["mel"].shape[0] for b, _ in got) == 18
    b = got[0][0]
    assert set(b) == {"mel", "length", "label"}
    assert b["mel"].dtype == torch.float32 and tuple(b["mel"].shape[1:]) == (40, 1 + 8000 // 160)
    assert b["length"].dtype == torch.int32 and b["label"].dtype == torch.int64
    assert ld.skipped() == []


@pytest.mark.parametrize("opts", [
    dict(),
    dict(mel_scale="slaney", n_mels=80, top_db=80),
    dict(n_fft=512, win=300, hop=128, f_min=50, f_max=7000, n_mels=32),
    dict(mel_power=1, top_db=80),
])
@needs_torchaudio
def test_logmel_matches_torchaudio(folder, opts):
    common = dict(task="audio", mode="eval", clip_seconds=1.2, batch_size=6, threads=2, epochs=1,
                  shuffle=False)
    mel = batches(nostall.Loader(folder, **common, **opts))
    wav = batches(nostall.Loader(folder, audio_features="waveform", **common))
    n_fft = opts.get("n_fft", 400)
    spec = torchaudio.transforms.MelSpectrogram(
        sample_rate=16000, n_fft=n_fft, win_length=opts.get("win", n_fft),
        hop_length=opts.get("hop", 160), f_min=opts.get("f_min", 0.0), f_max=opts.get("f_max"),
        n_mels=opts.get("n_mels", 64), power=float(opts.get("mel_power", 2)),
        mel_scale=opts.get("mel_scale", "htk"),
        norm="slaney" if opts.get("mel_scale") == "slaney" else None)
    power = float(opts.get("mel_power", 2))
    to_db = torchaudio.transforms.AmplitudeToDB(stype="power" if power == 2 else "magnitude",
                                                top_db=opts.get("top_db"))
    worst_rel, worst_db = 0.0, 0.0
    for (m, im), (w, iw) in zip(mel, wav):
        assert (im == iw).all()
        for k in range(m["mel"].shape[0]):
            p = spec(w["waveform"][k])[0]                  # [n_mels, frames], |X|^power
            ref = to_db(p)
            got = m["mel"][k]
            assert got.shape == ref.shape
            mult = 20.0 / power
            keep = 10 * torch.log10(p.clamp(min=1e-10)) * (mult / 10) > ref.max() - 60
            p_got = 10 ** (got.double() / mult)
            rel = ((p_got - p.double()).abs() / p.double())[keep]
            worst_rel = max(worst_rel, rel.max().item())
            if "top_db" in opts:
                worst_db = max(worst_db, (got - ref).abs().max().item())
    print("log-mel %s: max relative error within 60 dB of the peak %.2g, max |dB| %.2g"
          % (opts, worst_rel, worst_db))
    assert worst_rel <= 1e-3
    assert worst_db <= 0.02


@needs_torchaudio
def test_resample_matches_torchaudio(bandlimited):
    ld = nostall.Loader(bandlimited, task="audio", audio_features="waveform", mode="eval",
                        clip_seconds=2, batch_size=8, threads=1, epochs=1, shuffle=False)
    kaiser = dict(lowpass_filter_width=64, rolloff=0.9475937167399596,
                  resampling_method="kaiser_window", beta=14.769656459379492)
    seen = 0
    for b in ld:
        for k in range(b["waveform"].shape[0]):
            path, _ = ld.item(int(ld.last_indices[k]))
            x, sr = torchaudio.load(path)
            n = int(b["length"][k])
            ours = b["waveform"][k, 0, :n]
            assert n == -(-x.shape[1] * 16000 // sr)  # ceil
            best = torchaudio.functional.resample(x, sr, 16000, **kaiser)[0, :n]
            default = torchaudio.functional.resample(x, sr, 16000)[0, :n]
            d_best = (ours - best).abs()[200:-200].max().item()
            d_default = (ours - default).abs()[200:-200].max().item()
            print("%d Hz: max |ours - kaiser_best| %.2g, |ours - default| %.2g" % (sr, d_best, d_default))
            if sr == 16000:
                assert d_best == 0
            assert d_best <= 2e-4
            assert d_default <= 2e-2
            seen += 1
    assert seen == 5


def test_threads_and_resume(folder):
    opts = dict(task="audio", clip_seconds=0.5, batch_size=4, epochs=2, seed=3, freq_masks=1,
                time_masks=2)
    l1, l3 = nostall.Loader(folder, threads=1, **opts), nostall.Loader(folder, threads=3, **opts)
    one = batches(l1) + batches(l1)  # each iter() is an epoch
    three = batches(l3) + batches(l3)
    assert len(one) == len(three) == 10
    for (a, ia), (b, ib) in zip(one, three):
        assert (ia == ib).all() and all(torch.equal(a[k], b[k]) for k in a)
    # resume after 3 batches
    ld = nostall.Loader(folder, threads=2, **opts)
    it = iter(ld)
    for _ in range(3):
        next(it)
    state = ld.state_dict()
    ld2 = nostall.Loader(folder, threads=2, **opts)
    ld2.load_state_dict(state)
    rest = batches(ld2)
    assert len(rest) == 2  # the rest of epoch 0 (18 items: 5 batches)
    for (a, _), (b, _) in zip(rest, one[3:5]):
        assert all(torch.equal(a[k], b[k]) for k in a)


def test_bad_clips(folder, tmp_path):
    d = tmp_path / "bad" / "a"
    d.mkdir(parents=True)
    good = sorted(os.path.join(r, f) for r, _, fs in os.walk(folder) for f in fs)[0]
    data = open(good, "rb").read()
    (d / "ok" ).with_suffix(os.path.splitext(good)[1]).write_bytes(data)
    flac = [p for p in sorted(os.path.join(r, f) for r, _, fs in os.walk(folder) for f in fs)
            if p.endswith(".flac")][0]
    b = open(flac, "rb").read()
    (d / "trunc.flac").write_bytes(b[: len(b) // 2])
    (d / "text.wav").write_text("not audio at all\n")
    (d / "empty.wav").write_bytes(b"")
    ld = nostall.Loader(str(tmp_path / "bad"), task="audio", clip_seconds=0.5, batch_size=4,
                        max_bad_fraction=1,
                        epochs=1, threads=2)
    with pytest.warns(RuntimeWarning, match="3 bad item"):
        n = sum(x["mel"].shape[0] for x in ld)
    assert n == 1
    reasons = {os.path.basename(s["path"]): (s["status"], s["reason"]) for s in ld.skipped()}
    assert reasons["trunc.flac"][0] == "E_TRUNCATED"
    assert reasons["text.wav"][0] == "E_UNSUPPORTED" and "not an audio file" in reasons["text.wav"][1]
    assert reasons["empty.wav"][0] == "E_EMPTY"
    assert len(reasons) == 3
