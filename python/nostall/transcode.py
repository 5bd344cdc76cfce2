"""nostall.transcode(): the `nostall transcode` command from Python.

    import nostall
    summary = nostall.transcode("/data/train", "/data/train-rst")
    loader = nostall.Loader("/data/train-rst", ...)   # same pixels, less CPU

It rewrites every JPEG under SRC losslessly (the same DCT coefficients, so
the same pixels) with a restart marker every MCU and optimized Huffman
tables, so that nostall's region decode entropy-decodes only the blocks a
crop covers; other files are copied as they are. `nostall.analyze()`
measures what it would save on a sample of your files ("Decoding"
recommendation). The work is done by the CLI (found as for analyze():
cli=, $NOSTALL_CLI, the repository's build/, or $PATH), on every CPU unless
threads= says otherwise.
"""
import re
import subprocess

from . import _lib
from .analyze import _find_cli
from .loader import error_class


def _io_error(message):
    code = _lib.CODE["E_IO"]
    return error_class(code)(code, message)

_SUMMARY = re.compile(r"transcode: (\d+) files in ([\d.]+) s: (\d+) JPEGs transcoded .*?"
                      r"(\d+) other files copied, (\d+) damaged JPEGs copied unchanged, "
                      r"(\d+) JPEGs kept as they are[^;]*; ([\d.]+) MB -> ([\d.]+) MB")


def transcode(src, dst, *, restart_mcus=None, restart_rows=None, threads=None, force=False,
              cli=None):
    """Copy the tree `src` to `dst`, every JPEG rewritten with restart markers.

    restart_mcus / restart_rows: one marker every N MCUs (default 1) or every
    N MCU rows (1..64). threads: files at once (default: the online CPUs).
    force: write into a non-empty `dst`. Returns a dict: files, seconds,
    jpegs, copied, damaged, kept, mb_in, mb_out, messages (per-file reports:
    damaged JPEGs, and JPEGs a baseline copy would decode differently --
    progressive ones with incomplete scans --, both copied unchanged). Raises ValueError for a
    bad argument or a missing `src`, and nostall.IoError (an OSError and a
    nostall.Error, with the command's messages) when files could not be read
    or written.
    """
    args = [_find_cli(cli), "transcode", str(src), str(dst), "--quiet"]
    if restart_mcus is not None and restart_rows is not None:
        raise ValueError("nostall.transcode: restart_mcus and restart_rows exclude each other")
    for flag, v in (("--restart-mcus", restart_mcus), ("--restart-rows", restart_rows),
                    ("--threads", threads)):
        if v is not None:
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError("nostall.transcode: %s must be an int, got %r" % (flag[2:], v))
            args += [flag, str(v)]
    if force:
        args.append("--force")
    out = subprocess.run(args, capture_output=True, text=True)
    messages = [line for line in out.stderr.splitlines() if line.strip()]
    if out.returncode == 2:
        raise ValueError("; ".join(messages) or "nostall transcode: usage error")
    if out.returncode != 0:
        raise _io_error("; ".join(messages) or "nostall transcode failed (%d)" % out.returncode)
    m = _SUMMARY.search(out.stdout)
    if not m:
        raise _io_error("nostall transcode: unexpected output %r" % out.stdout.strip())
    return {"files": int(m.group(1)), "seconds": float(m.group(2)), "jpegs": int(m.group(3)),
            "copied": int(m.group(4)), "damaged": int(m.group(5)), "kept": int(m.group(6)),
            "mb_in": float(m.group(7)), "mb_out": float(m.group(8)), "messages": messages}
