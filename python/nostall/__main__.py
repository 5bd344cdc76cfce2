"""`python -m nostall ...` and the `nostall` command of a pip install: run
the nostall CLI (gen, bench, transcode, analyze, pack) that the package
carries, with the same arguments and exit status.

The program is found as the library is (_lib.py): $NOSTALL_CLI, else the
package's own _bin/nostall (setup.py copies it there), else the repository's
build/nostall next to python/ (running from a checkout with PYTHONPATH).
The process is replaced by the program (os.execv): signals, stdin/stdout
and the exit status are the CLI's own.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def cli_path():
    """Path of the nostall program this package runs; FileNotFoundError
    naming the places tried when there is none."""
    env = os.environ.get("NOSTALL_CLI")
    tried = [env] if env else []
    tried += [os.path.join(_HERE, "_bin", "nostall"),
              os.path.normpath(os.path.join(_HERE, "..", "..", "build", "nostall"))]
    for path in tried:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise FileNotFoundError("nostall: the nostall program was not found (tried %s); install the "
                            "package with pip (it carries the program), build it (cmake -S . -B "
                            "build && cmake --build build) or set NOSTALL_CLI"
                            % ", ".join(tried))


def main(argv=None):
    """Entry point: exec the CLI with argv (default: sys.argv[1:])."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        path = cli_path()
    except FileNotFoundError as e:
        print(e, file=sys.stderr)
        return 127
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(path, ["nostall"] + args)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main())
