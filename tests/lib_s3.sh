#!/usr/bin/env bash
# lib_s3.sh — a throwaway S3 server on loopback for the s3:// source's tests
# (moto's server, from PyPI, tests/s3_server.py), and its signature-checking,
# fault-injecting proxy (tests/s3_proxy.py). Run it or source it.
#
#   bash tests/lib_s3.sh ensure                 prints the venv's python
#   bash tests/lib_s3.sh start DIR PORT BUCKET...   prints the port
#   bash tests/lib_s3.sh stop DIR               (SIGTERM, then SIGKILL)
#   bash tests/lib_s3.sh kill DIR               (SIGKILL at once: a crash)
#   bash tests/lib_s3.sh proxy DIR UPSTREAM_PORT [s3_proxy.py options]
#                                               prints the proxy's port
#   bash tests/lib_s3.sh proxy-stop DIR
#   bash tests/lib_s3.sh put DIR BUCKET KEY FILE | put-tree DIR BUCKET PREFIX SRC
#   (sourced: s3_server_ensure; s3_server_start DIR PORT BUCKET...;
#    s3_server_stop DIR; s3_server_kill DIR; s3_put DIR BUCKET KEY FILE;
#    s3_put_tree DIR BUCKET PREFIX SRC; s3_object DIR BUCKET KEY;
#    s3_proxy_start DIR UPSTREAM [opts]; s3_proxy_stop DIR)
#
# moto[server] $S3_MOTO_VERSION is installed once with pip (versions pinned
# by tests/s3_server-constraints.txt; tests/lib_pyvenv.sh's pyvenv_ensure)
# into a venv made by Debian's `/usr/bin/python3 -m venv` in
# $NOSTALL_S3_SERVER_DIR/venv (default
# ~/.cache/nostall/moto: outside the build trees, so every build and every
# test shares one copy; a flock keeps concurrent tests from installing it
# twice; `make test-deps` makes it). No python3-venv, or PyPI cannot be
# reached: exit status 77, the reason on stderr (the tests print "SKIP:").
#
# The key pair: S3_TEST_ACCESS_KEY and S3_TEST_SECRET (defaults below,
# exported when this file is sourced or run; set them before start to choose
# them). The server accepts only that pair: moto's IAM authentication is
# on, so moto checks every request's SigV4 signature itself (403
# SignatureDoesNotMatch), independently of the proxy, which checks them too
# when given --secret.
#
# DIR holds the server's object store (DIR/data, see put), its log
# (DIR/server.log: one "METHOD PATH?QUERY STATUS" line per request), port
# (DIR/server.port) and pid (DIR/server.pid). PORT 0 picks a free port, a
# number restarts on that port. moto keeps objects in memory: put copies
# each object into DIR/data and PUTs it (signed) to the running server, and
# a server started on DIR loads DIR/data before it listens, so one killed
# and restarted keeps its data. BUCKETs are created at start. moto answers
# ranged GETs, ListObjectsV2 with continuation tokens, HEAD, PUT and S3's
# XML errors. The proxy: DIR/proxy.port, DIR/proxy.pid, DIR/proxy.stats.
# With S3_OWNER_PID set, the server and the proxy stop once that process
# has exited (a test that crashes leaks nothing).
# Exit status: 0 ok, 77 the server cannot be installed, 1 other failure.

S3_MOTO_VERSION=5.2.5
export S3_TEST_ACCESS_KEY=${S3_TEST_ACCESS_KEY:-AKIANOSTALLTEST00001}
export S3_TEST_SECRET=${S3_TEST_SECRET:-nostall-test/secret+0}
_S3_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$_S3_HERE/lib_pyvenv.sh"

# (the venv: tests/lib_pyvenv.sh, shared with the other PyPI venvs of the tests)
s3_server_ensure() {
    pyvenv_ensure "${NOSTALL_S3_SERVER_DIR:-${HOME:-/tmp}/.cache/nostall/moto}" \
        "moto[server]==$S3_MOTO_VERSION" "$_S3_HERE/s3_server-constraints.txt" \
        'import boto3, moto.server, werkzeug'
}

_s3_kill_pidfile() {
    local f=$1 sig=$2 pid i
    [ -f "$f" ] || return 0
    pid=$(cat "$f" 2>/dev/null)
    rm -f "$f"
    [ -n "$pid" ] || return 0
    kill "-$sig" "$pid" 2>/dev/null
    for i in $(seq 1 100); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.05
    done
    kill -KILL "$pid" 2>/dev/null
    return 0
}

s3_server_stop() {
    local dir=$1
    [ -n "$dir" ] || { echo "usage: s3_server_stop DIR" >&2; return 1; }
    _s3_kill_pidfile "$dir/watchdog.pid" TERM
    _s3_kill_pidfile "$dir/server.pid" TERM
}

s3_server_kill() {
    local dir=$1
    _s3_kill_pidfile "$dir/server.pid" KILL
}

# A watchdog that stops what DIR holds once $S3_OWNER_PID has exited.
_s3_watchdog() {
    local dir=$1
    [ -n "${S3_OWNER_PID:-}" ] || return 0
    [ -f "$dir/watchdog.pid" ] && kill -0 "$(cat "$dir/watchdog.pid")" 2>/dev/null && return 0
    (
        trap '' HUP
        while kill -0 "$S3_OWNER_PID" 2>/dev/null; do sleep 0.5; done
        rm -f "$dir/watchdog.pid"
        _s3_kill_pidfile "$dir/proxy.pid" TERM
        _s3_kill_pidfile "$dir/server.pid" TERM
    ) < /dev/null > /dev/null 2>&1 &
    echo $! > "$dir/watchdog.pid"
}

s3_server_start() {
    local dir=$1 port=${2:-0} py i
    if [ -z "$dir" ]; then echo "usage: s3_server_start DIR PORT BUCKET..." >&2; return 1; fi
    shift 2 || shift $#
    py=$(s3_server_ensure) || return $?
    mkdir -p "$dir/data" || return 1
    dir=$(cd "$dir" && pwd) || return 1
    _s3_kill_pidfile "$dir/server.pid" KILL
    rm -f "$dir/server.port"
    : > "$dir/server.log"
    # (tests/s3_server.py loads DIR/data, then listens; it retries a port
    # just released by a killed server for 10 s)
    "$py" "$_S3_HERE/s3_server.py" serve "$dir" "$port" "$@" < /dev/null >> "$dir/server.log" 2>&1 &
    echo $! > "$dir/server.pid"
    # up to 120 s: importing moto takes seconds, more on a loaded machine
    for i in $(seq 1 2400); do
        if [ -s "$dir/server.port" ]; then
            _s3_watchdog "$dir"
            cat "$dir/server.port"
            return 0
        fi
        kill -0 "$(cat "$dir/server.pid")" 2>/dev/null || break
        sleep 0.05
    done
    _s3_kill_pidfile "$dir/server.pid" KILL
    echo "the S3 server (tests/s3_server.py) failed to start:" >&2
    tail -20 "$dir/server.log" >&2
    return 1
}

# Objects into DIR's store (DIR/data/BUCKET/KEY.s3obj, what a started
# server loads) and, when the server of DIR runs, PUT to it, signed with
# the key pair: one Python process for a whole tree.
#   s3_put DIR BUCKET KEY FILE          one object
#   s3_put_tree DIR BUCKET PREFIX SRC   every file under SRC as PREFIX/REL
#   s3_object DIR BUCKET KEY            prints the stored copy's path
s3_object() {
    echo "$1/data/$2/$3.s3obj"
}

s3_put() {
    local py
    py=$(s3_server_ensure) || return $?
    "$py" "$_S3_HERE/s3_server.py" put "$@"
}

s3_put_tree() {
    local py
    py=$(s3_server_ensure) || return $?
    "$py" "$_S3_HERE/s3_server.py" put-tree "$@"
}

s3_proxy_start() {
    local dir=$1 upstream=$2 i
    shift 2
    mkdir -p "$dir" && dir=$(cd "$dir" && pwd) || return 1
    _s3_kill_pidfile "$dir/proxy.pid" KILL
    rm -f "$dir/proxy.port"
    /usr/bin/python3 "$_S3_HERE/s3_proxy.py" --upstream "$upstream" --stats "$dir/proxy.stats" \
        --owner "${S3_OWNER_PID:-$$}" "$@" "$dir/proxy.port" < /dev/null > "$dir/proxy.log" 2>&1 &
    echo $! > "$dir/proxy.pid"
    for i in $(seq 1 1200); do
        if [ -s "$dir/proxy.port" ]; then
            _s3_watchdog "$dir"
            cat "$dir/proxy.port"
            return 0
        fi
        kill -0 "$(cat "$dir/proxy.pid")" 2>/dev/null || break
        sleep 0.05
    done
    echo "s3_proxy.py failed to start:" >&2
    cat "$dir/proxy.log" >&2
    return 1
}

s3_proxy_stop() {
    _s3_kill_pidfile "$1/proxy.pid" TERM
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    # run as a program: what it starts lives as long as its caller
    export S3_OWNER_PID=${S3_OWNER_PID:-$PPID}
    case "${1:-}" in
    ensure) s3_server_ensure; exit $? ;;
    start) shift; s3_server_start "$@"; exit $? ;;
    stop) shift; s3_server_stop "$@"; exit $? ;;
    kill) shift; s3_server_kill "$@"; exit $? ;;
    proxy) shift; s3_proxy_start "$@"; exit $? ;;
    proxy-stop) shift; s3_proxy_stop "$@"; exit $? ;;
    put) shift; s3_put "$@"; exit $? ;;
    put-tree) shift; s3_put_tree "$@"; exit $? ;;
    *) echo "usage: $0 ensure | start DIR PORT BUCKET... | stop DIR | kill DIR |" \
            "proxy DIR UPSTREAM [opts] | proxy-stop DIR | put DIR BUCKET KEY FILE |" \
            "put-tree DIR BUCKET PREFIX SRC" >&2; exit 1 ;;
    esac
fi
