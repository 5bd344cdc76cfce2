"""Build hook of the Python package (see pyproject.toml).

build_py runs CMake on this tree (or takes an existing build from
$NOSTALL_PREBUILT, as `make install` does) and copies into the package:
libnostall.so, the nostall CLI (nostall/_bin/nostall, used by analyze() and
transcode()) and, where MPI was found, libnostall_mpi.so. The wheel is
therefore platform-specific.
"""
import os
import re
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

ROOT = os.path.dirname(os.path.abspath(__file__))


def version():
    with open(os.path.join(ROOT, "include", "nostall.h")) as f:
        text = f.read()
    parts = [re.search(r"#define NOSTALL_VERSION_%s (\d+)" % k, text).group(1)
             for k in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(parts)


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True  # libnostall.so inside: not a pure-Python wheel


class BuildWithCMake(build_py):
    def run(self):
        super().run()
        bdir = os.environ.get("NOSTALL_PREBUILT")
        if not bdir:
            bdir = os.path.join(ROOT, "build", "python-package")
            subprocess.check_call(["cmake", "-S", ROOT, "-B", bdir,
                                   "-DCMAKE_BUILD_TYPE=RelWithDebInfo"])
            targets = ["nostall", "nostall_cli"]
            if os.path.exists(os.path.join(bdir, "CMakeFiles", "nostall_mpi.dir")):
                targets.append("nostall_mpi")
            subprocess.check_call(["cmake", "--build", bdir, "-j", str(os.cpu_count() or 2),
                                   "--target"] + targets)
        dest = os.path.join(self.build_lib, "nostall")
        os.makedirs(os.path.join(dest, "_bin"), exist_ok=True)
        for name in ("libnostall.so", "libnostall_mpi.so"):
            src = os.path.join(bdir, name)
            if os.path.exists(src):  # the real file behind the .so -> .so.0 links
                shutil.copyfile(os.path.realpath(src), os.path.join(dest, name))
        if not os.path.exists(os.path.join(dest, "libnostall.so")):
            raise RuntimeError("nostall: %s/libnostall.so was not built" % bdir)
        cli = os.path.join(dest, "_bin", "nostall")
        shutil.copyfile(os.path.join(bdir, "nostall"), cli)
        os.chmod(cli, 0o755)


setup(
    version=version(),
    package_dir={"": "python"},
    packages=["nostall"],
    package_data={"nostall": ["py.typed"]},
    cmdclass={"build_py": BuildWithCMake},
    distclass=BinaryDistribution,
)
