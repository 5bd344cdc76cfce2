"""pytest setup for the Python binding: find the library and the CLI, make the
package importable from python/, and generate small datasets once per session.

    /usr/bin/python3 -m pytest tests/python -q

$NOSTALL_LIBRARY (libnostall.so) and $NOSTALL_CLI (the nostall program)
override the repository's build/ folder. If either is missing, every test is
skipped with a message saying what to build.
"""

import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
LIBRARY = os.environ.get("NOSTALL_LIBRARY") or os.path.join(ROOT, "build", "libnostall.so")
CLI = os.environ.get("NOSTALL_CLI") or os.path.join(ROOT, "build", "nostall")
MISSING = [p for p in (LIBRARY, CLI) if not os.path.exists(p)]

sys.path.insert(0, os.path.join(ROOT, "python"))
if not MISSING:
    os.environ["NOSTALL_LIBRARY"] = LIBRARY


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a test that takes minutes on a busy machine "
                            "(bounded by its own timeout; deselect with -m 'not slow')")


def pytest_collection_modifyitems(config, items):
    if MISSING:
        skip = pytest.mark.skip(reason="nostall not built (missing %s); run: cmake -S . -B build "
                                "&& cmake --build build" % ", ".join(MISSING))
        for item in items:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _torch_seeded():
    """Every test starts from torch.manual_seed(0): a Loader without seed=
    takes its seed from torch's (as a DataLoader's shuffle does), which is
    random per process otherwise, and a test's outcome (which item an
    epoch leaves out, which batch meets a bad file) must not change from
    run to run."""
    try:
        import torch
    except ImportError:
        yield
        return
    torch.manual_seed(0)
    yield


def gen(out, images, classes, width=64, height=48, seed=0, *extra):
    subprocess.run([CLI, "gen", str(out), "--images", str(images), "--classes", str(classes),
                    "--width", str(width), "--height", str(height), "--seed", str(seed),
                    "--quiet", "--force", *extra], check=True, stdout=subprocess.DEVNULL)
    return str(out)


@pytest.fixture
def memory_path(tmp_path):
    """A fresh folder on tmpfs (/dev/shm; tmp_path where there is none),
    removed after the test. Data there cannot be dropped from memory: an
    analyzer's cold run reads it as fast as its cached run, so a prep-bound
    verdict does not hang on how busy the machine's disk is."""
    import shutil
    import tempfile
    try:
        d = tempfile.mkdtemp(prefix="nostall-test-", dir="/dev/shm")
    except OSError:
        yield tmp_path
        return
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def cli():
    return CLI


@pytest.fixture(scope="session")
def data(tmp_path_factory):
    """40 JPEGs, 4 classes, 64x48 (some jitter in size)."""
    return gen(tmp_path_factory.mktemp("data"), 40, 4, 64, 48, 0, "--size-jitter", "0.2")


@pytest.fixture(scope="session")
def bad_data(tmp_path_factory):
    """8 JPEGs in 2 classes plus class_000/x.jpg, a text file."""
    d = gen(tmp_path_factory.mktemp("bad"), 8, 2, 64, 48)
    with open(os.path.join(d, "class_000", "x.jpg"), "w") as f:
        f.write("this is not a JPEG\n")
    return d
