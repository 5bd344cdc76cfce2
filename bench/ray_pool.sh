#!/usr/bin/env bash
# bench/ray_pool.sh — nostall.ray.PrepPool on a local Ray (docs/serve.md,
# "Ray"): makes a venv with Ray from PyPI (tests/lib_pyvenv.sh ray, in
# ~/.cache/nostall/ray-venv, seeing Debian's numpy, torch and pytest) and
# runs tests/python/test_ray_pool.py there against build/ (ray.init() on
# this machine, servers on loopback). Not part of make test, whose Debian
# python has no Ray (the test skips there). Exit status: pytest's; 77 when
# the venv cannot be made here (no PyPI, no python3-venv).
# Usage: bash bench/ray_pool.sh [pytest options]
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/nostall ] && [ -f build/libnostall.so ] || make -s build > /dev/null
source tests/lib_pyvenv.sh
rc=0
PY=$(ray_venv_ensure) || rc=$?
if [ "$rc" -ne 0 ]; then
    echo "SKIP: no venv with Ray here (see above)" >&2
    exit "$rc"
fi
NOSTALL_LIBRARY=$PWD/build/libnostall.so NOSTALL_CLI=$PWD/build/nostall \
    exec "$PY" -m pytest -q -p no:cacheprovider tests/python/test_ray_pool.py "$@"
