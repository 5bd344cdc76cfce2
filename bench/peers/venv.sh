#!/usr/bin/env bash
# venv.sh — make (once) the venv of nostall's peers from PyPI and print its
# python: torch 2.x + torchvision, NVIDIA DALI (its CPU pipelines run without
# a GPU), SPDL, Grain, webdataset, LitData, Mosaic Streaming, pinned by
# requirements.txt beside this file, every dependency's version by
# constraints.txt (the venv as measured).
#
#   bash bench/peers/venv.sh          prints the venv's python
#
# The venv lives in $NOSTALL_PEERS_DIR (default ~/.cache/nostall/peers),
# made by Debian's `/usr/bin/python3 -m venv`; a stamp of requirements.txt and constraints.txt
# says whether it is current, a flock keeps two callers from installing it
# at once. The install log is $NOSTALL_PEERS_DIR/install.log.
# Exit status: 0 ok, 77 it cannot be made here (no venv module, or PyPI
# unreachable; the reason on stderr), 1 other failure.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dir=${NOSTALL_PEERS_DIR:-${HOME:-/tmp}/.cache/nostall/peers}
req=$here/requirements.txt
cons=$here/constraints.txt
py=$dir/venv/bin/python
stamp=$(cat "$req" "$cons" | md5sum | cut -c1-32)
if [ -x "$py" ] && [ "$(cat "$dir/venv/.nostall-installed" 2> /dev/null)" = "$stamp" ]; then
    echo "$py"
    exit 0
fi
mkdir -p "$dir"
exec 9> "$dir/.lock"
flock 9
if [ -x "$py" ] && [ "$(cat "$dir/venv/.nostall-installed" 2> /dev/null)" = "$stamp" ]; then
    echo "$py"
    exit 0
fi
if ! /usr/bin/python3 -m venv --help > /dev/null 2>&1; then
    echo "venv.sh: /usr/bin/python3 has no venv module (apt-get install python3-venv)" >&2
    exit 77
fi
rm -rf "$dir/venv"
/usr/bin/python3 -m venv "$dir/venv"
echo "venv.sh: installing the peers into $dir/venv (several GB from PyPI, once; log: $dir/install.log)" >&2
if ! { "$py" -m pip install --quiet --upgrade pip &&
    "$py" -m pip install --progress-bar off -r "$req" -c "$cons"; } > "$dir/install.log" 2>&1; then
    tail -5 "$dir/install.log" >&2
    if grep -qiE 'connection|resolve|network|timed out' "$dir/install.log"; then
        echo "venv.sh: PyPI cannot be reached; the peers' venv was not made" >&2
        exit 77
    fi
    echo "venv.sh: pip install -r $req failed (log: $dir/install.log)" >&2
    exit 1
fi
echo "$stamp" > "$dir/venv/.nostall-installed"
echo "$py"
