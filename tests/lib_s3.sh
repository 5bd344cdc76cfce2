#!/usr/bin/env bash
# lib_s3.sh — a throwaway S3 server (s3rver, from the npm registry) on
# loopback for the s3:// source's tests, and its signature-checking proxy.
# Run it or source it.
#
#   bash tests/lib_s3.sh ensure                 prints the s3rver program
#   bash tests/lib_s3.sh start DIR PORT BUCKET...   prints the port
#   bash tests/lib_s3.sh stop DIR               (SIGTERM, then SIGKILL)
#   bash tests/lib_s3.sh kill DIR               (SIGKILL at once: a crash)
#   bash tests/lib_s3.sh proxy DIR UPSTREAM_PORT [s3_proxy.py options]
#                                               prints the proxy's port
#   bash tests/lib_s3.sh proxy-stop DIR
#   bash tests/lib_s3.sh put DIR BUCKET KEY FILE | put-tree DIR BUCKET PREFIX SRC
#   (sourced: s3rver_ensure; s3rver_start DIR PORT BUCKET...; s3rver_stop DIR;
#    s3rver_kill DIR; s3_proxy_start DIR UPSTREAM [opts]; s3_proxy_stop DIR)
#
# s3rver 3 is installed once, with npm, into $NOSTALL_S3RVER_DIR (default
# ~/.cache/nostall/s3rver: outside the build trees, so every build and
# every test shares one copy; a lock keeps concurrent tests from
# installing it twice). No node, no npm, or a registry that cannot be
# reached: exit status 77 (the tests skip with the reason).
#
# DIR holds the server's data (DIR/data), its log (DIR/s3rver.log) and pid
# (DIR/s3rver.pid); PORT 0 picks a free port, a number restarts on that
# port (the data kept: a server killed and restarted). BUCKETs are created
# at start. s3rver answers ranged GETs, ListObjectsV2 with continuation
# tokens, HEAD, PUT, and S3's XML errors; it does not check SigV4
# signatures (only that the access key id is S3RVER): the proxy
# (tests/s3_proxy.py, DIR/proxy.port, DIR/proxy.pid, DIR/proxy.stats)
# checks them. With S3_OWNER_PID set, the server and the proxy stop once
# that process has exited (a test that crashes leaks nothing).
# Exit status: 0 ok, 77 s3rver unavailable, 1 other failure.

S3RVER_VERSION=3.7.1

s3rver_ensure() {
    local dir=${NOSTALL_S3RVER_DIR:-${HOME:-/tmp}/.cache/nostall/s3rver}
    local bin=$dir/node_modules/.bin/s3rver
    if [ -x "$bin" ]; then echo "$bin"; return 0; fi
    command -v node > /dev/null 2>&1 || { echo "node is not installed (apt-get install nodejs npm)" >&2; return 77; }
    command -v npm > /dev/null 2>&1 || { echo "npm is not installed (apt-get install npm)" >&2; return 77; }
    mkdir -p "$dir" || return 1
    (
        flock -w 600 9 || exit 1
        [ -x "$bin" ] && exit 0
        timeout 300 npm install --prefix "$dir" --no-audit --no-fund --loglevel=error \
            "s3rver@$S3RVER_VERSION" > "$dir/install.log" 2>&1
    ) 9> "$dir/.lock"
    if [ ! -x "$bin" ]; then
        echo "cannot install s3rver@$S3RVER_VERSION with npm (registry unreachable?):" >&2
        tail -5 "$dir/install.log" >&2 2>/dev/null
        return 77
    fi
    echo "$bin"
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

s3rver_stop() {
    local dir=$1
    [ -n "$dir" ] || { echo "usage: s3rver_stop DIR" >&2; return 1; }
    _s3_kill_pidfile "$dir/watchdog.pid" TERM
    _s3_kill_pidfile "$dir/s3rver.pid" TERM
}

s3rver_kill() {
    local dir=$1
    _s3_kill_pidfile "$dir/s3rver.pid" KILL
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
        _s3_kill_pidfile "$dir/s3rver.pid" TERM
    ) < /dev/null > /dev/null 2>&1 &
    echo $! > "$dir/watchdog.pid"
}

s3rver_start() {
    local dir=$1 port=${2:-0} bin b args=() i
    if [ -z "$dir" ]; then echo "usage: s3rver_start DIR PORT BUCKET..." >&2; return 1; fi
    shift 2 || shift $#
    bin=$(s3rver_ensure) || return $?
    mkdir -p "$dir/data" || return 1
    dir=$(cd "$dir" && pwd) || return 1
    _s3_kill_pidfile "$dir/s3rver.pid" KILL
    for b in "$@"; do args+=(--configure-bucket "$b"); done
    : > "$dir/s3rver.log"
    # (--openssl-legacy-provider: s3rver 3 makes continuation tokens with a
    # cipher OpenSSL 3 keeps in its legacy provider; without it a listing of
    # more than one page is a 500 InternalError)
    # (a port just released by a killed server may linger a moment: retry)
    for try in $(seq 1 50); do
        node --openssl-legacy-provider "$bin" -d "$dir/data" -a 127.0.0.1 -p "$port" "${args[@]}" \
            < /dev/null >> "$dir/s3rver.log" 2>&1 &
        echo $! > "$dir/s3rver.pid"
        # up to 60 s: node starts slowly on a loaded machine
        for i in $(seq 1 1200); do
            local got
            got=$(sed -n 's/.*S3rver listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$dir/s3rver.log" | tail -1)
            if [ -n "$got" ]; then
                _s3_watchdog "$dir"
                echo "$got"
                return 0
            fi
            kill -0 "$(cat "$dir/s3rver.pid")" 2>/dev/null || break
            sleep 0.05
        done
        rm -f "$dir/s3rver.pid"
        grep -q "EADDRINUSE" "$dir/s3rver.log" && [ "$port" != 0 ] && { sleep 0.2; continue; }
        echo "s3rver failed to start:" >&2
        tail -20 "$dir/s3rver.log" >&2
        return 1
    done
    echo "s3rver: port $port stays in use" >&2
    return 1
}

# Objects straight into s3rver's filesystem store (DIR/data/BUCKET/KEY
# becomes .../NAME._S3rver_object; s3rver computes the ETag when first
# asked), running or not: thousands of objects in a moment, no PUTs.
#   s3rver_put DIR BUCKET KEY FILE      one object
#   s3rver_put_tree DIR BUCKET PREFIX SRC   every file under SRC as PREFIX/REL
#   s3rver_object DIR BUCKET KEY        prints the stored file's path
s3rver_object() {
    local dir=$1 bucket=$2 key=$3
    case "$key" in */*) echo "$dir/data/$bucket/${key%/*}/${key##*/}._S3rver_object" ;;
    *) echo "$dir/data/$bucket/$key._S3rver_object" ;; esac
}

s3rver_put() {
    local f
    f=$(s3rver_object "$1" "$2" "$3")
    mkdir -p "$(dirname "$f")" && cp "$4" "$f" && rm -f "$f.md5"
}

s3rver_put_tree() {
    local dir=$1 bucket=$2 prefix=$3 src=$4
    (cd "$src" && find . -type f -printf '%P\n') | while IFS= read -r rel; do
        s3rver_put "$dir" "$bucket" "${prefix:+$prefix/}$rel" "$src/$rel" || return 1
    done
}

s3_proxy_start() {
    local dir=$1 upstream=$2 i here
    shift 2
    here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
    mkdir -p "$dir" && dir=$(cd "$dir" && pwd) || return 1
    _s3_kill_pidfile "$dir/proxy.pid" KILL
    rm -f "$dir/proxy.port"
    /usr/bin/python3 "$here/s3_proxy.py" --upstream "$upstream" --stats "$dir/proxy.stats" \
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
    ensure) s3rver_ensure; exit $? ;;
    start) shift; s3rver_start "$@"; exit $? ;;
    stop) shift; s3rver_stop "$@"; exit $? ;;
    kill) shift; s3rver_kill "$@"; exit $? ;;
    proxy) shift; s3_proxy_start "$@"; exit $? ;;
    proxy-stop) shift; s3_proxy_stop "$@"; exit $? ;;
    put) shift; s3rver_put "$@"; exit $? ;;
    put-tree) shift; s3rver_put_tree "$@"; exit $? ;;
    *) echo "usage: $0 ensure | start DIR PORT BUCKET... | stop DIR | kill DIR |" \
            "proxy DIR UPSTREAM [opts] | proxy-stop DIR" >&2; exit 1 ;;
    esac
fi
