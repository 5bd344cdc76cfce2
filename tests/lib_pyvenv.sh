#!/usr/bin/env bash
# lib_pyvenv.sh — the small PyPI venvs the tests use, made once with pip by
# Debian's `/usr/bin/python3 -m venv` under ~/.cache/nostall (outside the
# build trees: every build and every test shares one copy). Run it or
# source it. It touches nothing but the venv's folder.
#
#   bash tests/lib_pyvenv.sh webdataset     prints the webdataset venv's python
#   bash tests/lib_pyvenv.sh ray            prints the Ray venv's python
#   (sourced: pyvenv_ensure DIR REQUIREMENT CONSTRAINTS CHECK [VENV_OPTION];
#    webdataset_venv_ensure; ray_venv_ensure)
#
# pyvenv_ensure installs REQUIREMENT (one pip requirement, pinned) with
# pip's -c CONSTRAINTS (its dependencies pinned) into DIR/venv, unless a
# stamp there (the requirement, the constraints' md5 and VENV_OPTION) says
# it is current, then runs `python -c CHECK` (the imports that must work)
# and prints the venv's python. A flock (DIR/.lock) keeps concurrent tests
# from installing it twice; pip's output goes to DIR/install.log.
# VENV_OPTION is passed to `python3 -m venv` (e.g. --system-site-packages,
# which lets the venv see Debian's numpy and torch).
# Exit status: 0 ok, 77 it cannot be made here (no python3-venv, or PyPI
# cannot be reached; the reason on stderr: tests print "SKIP:" and exit 77),
# 1 other failure.
#
# The venvs:
#   moto[server]     tests/lib_s3.sh (s3_server_ensure), ~/.cache/nostall/moto
#   webdataset       webdataset_venv_ensure: webdataset $WDS_VERSION, pinned by
#                    tests/webdataset-constraints.txt, --system-site-packages
#                    (Debian's numpy and torch), in $NOSTALL_WDS_DIR (default
#                    ~/.cache/nostall/webdataset); the interop tests
#                    (tests/python/test_webdataset_interop.py) read and write
#                    shards with it. `make test-deps` makes both.
#   ray              ray_venv_ensure: ray $RAY_VERSION, pinned by
#                    tests/ray-constraints.txt, --system-site-packages, in
#                    $NOSTALL_RAY_DIR (default ~/.cache/nostall/ray-venv);
#                    bench/ray_pool.sh runs tests/python/test_ray_pool.py
#                    with it (not part of make test).

WDS_VERSION=1.0.2
RAY_VERSION=2.60.0
_PYVENV_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

pyvenv_ensure() {
    local dir=$1 req=$2 cons=$3 check=$4 opt=${5:-} py stamp
    py=$dir/venv/bin/python
    stamp="$req $(md5sum < "$cons" | cut -c1-32)${opt:+ $opt}"
    if [ -x "$py" ] && [ "$(cat "$dir/venv/.nostall-installed" 2> /dev/null)" = "$stamp" ]; then
        echo "$py"
        return 0
    fi
    [ -x /usr/bin/python3 ] || { echo "/usr/bin/python3 is not installed (apt-get install python3)" >&2; return 77; }
    /usr/bin/python3 -c 'import ensurepip, venv' 2> /dev/null ||
        { echo "python3-venv is not installed (apt-get install python3-venv python3-pip)" >&2; return 77; }
    mkdir -p "$dir" || return 1
    (
        flock -w 1200 9 || exit 1
        [ -x "$py" ] && [ "$(cat "$dir/venv/.nostall-installed" 2> /dev/null)" = "$stamp" ] && exit 0
        rm -rf "$dir/venv"
        {
            /usr/bin/python3 -m venv $opt "$dir/venv" &&
                timeout 1200 "$py" -m pip install --disable-pip-version-check --no-input -q \
                    -c "$cons" "$req" &&
                "$py" -c "$check" &&
                echo "$stamp" > "$dir/venv/.nostall-installed"
        } > "$dir/install.log" 2>&1
    ) 9> "$dir/.lock"
    if [ ! -x "$py" ] || [ "$(cat "$dir/venv/.nostall-installed" 2> /dev/null)" != "$stamp" ]; then
        echo "cannot install $req with pip into $dir/venv (PyPI unreachable?):" >&2
        tail -5 "$dir/install.log" >&2 2> /dev/null
        return 77
    fi
    echo "$py"
}

webdataset_venv_ensure() {
    pyvenv_ensure "${NOSTALL_WDS_DIR:-${HOME:-/tmp}/.cache/nostall/webdataset}" \
        "webdataset==$WDS_VERSION" "$_PYVENV_HERE/webdataset-constraints.txt" \
        "import webdataset, braceexpand, yaml; assert webdataset.__version__ == '$WDS_VERSION', webdataset.__version__" \
        --system-site-packages
}

ray_venv_ensure() {
    pyvenv_ensure "${NOSTALL_RAY_DIR:-${HOME:-/tmp}/.cache/nostall/ray-venv}" \
        "ray==$RAY_VERSION" "$_PYVENV_HERE/ray-constraints.txt" \
        "import ray, numpy, pytest; assert ray.__version__ == '$RAY_VERSION', ray.__version__" \
        --system-site-packages
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    case "${1:-}" in
    webdataset) webdataset_venv_ensure; exit $? ;;
    ray) ray_venv_ensure; exit $? ;;
    *) echo "usage: $0 webdataset|ray" >&2; exit 1 ;;
    esac
fi
