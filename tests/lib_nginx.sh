#!/usr/bin/env bash
# lib_nginx.sh — a throwaway nginx on loopback serving a directory, for the
# HTTP source's tests and benchmarks. Run it or source it.
#
#   bash tests/lib_nginx.sh start DIR ROOT [LIMIT_RATE]   prints the port
#   bash tests/lib_nginx.sh stop DIR
#   (sourced: nginx_start DIR ROOT [LIMIT_RATE]; nginx_stop DIR)
#
# DIR holds everything of this nginx: nginx.conf, nginx.pid, error.log,
# access.log, temp folders; ROOT is the served document root (absolute).
# LIMIT_RATE (nginx syntax, e.g. 200k) caps each connection's bandwidth.
# Extra server-block directives may be put in DIR/conf.d/*.conf before start
# (e.g. 'location = /e500 { return 500; }').
# Listens on 127.0.0.1 at a free port (random, retried when taken). Workers
# run as root when started by root (so any file under ROOT is readable),
# else as the calling user. keepalive_requests is high so connections are
# reused across many items. access.log has one line per request:
# "connection-serial requests-on-connection status uri body-bytes". With NGINX_OWNER_PID set, a watchdog stops this
# nginx once that process has exited (a test that crashes leaks nothing).
# Exit status: 0 ok, 77 nginx not installed, 1 other failure.

nginx_bin() {
    local b
    b=$(command -v nginx 2>/dev/null) && { echo "$b"; return 0; }
    for b in /usr/sbin/nginx /usr/local/sbin/nginx /usr/local/nginx/sbin/nginx; do
        [ -x "$b" ] && { echo "$b"; return 0; }
    done
    return 1
}

nginx_stop() {
    local dir=$1 pid i
    [ -n "$dir" ] || { echo "usage: nginx_stop DIR" >&2; return 1; }
    if [ -f "$dir/watchdog.pid" ]; then
        pid=$(cat "$dir/watchdog.pid" 2>/dev/null)
        rm -f "$dir/watchdog.pid"
        [ -n "$pid" ] && [ "$pid" != "$$" ] && kill "$pid" 2>/dev/null
    fi
    [ -f "$dir/nginx.pid" ] || return 0
    pid=$(cat "$dir/nginx.pid" 2>/dev/null)
    [ -n "$pid" ] || { rm -f "$dir/nginx.pid"; return 0; }
    kill -TERM "$pid" 2>/dev/null   # fast shutdown: open connections are closed
    for i in $(seq 1 100); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    if kill -0 "$pid" 2>/dev/null; then
        local kids
        kids=$(ps -o pid= --ppid "$pid" 2>/dev/null)
        kill -KILL "$pid" $kids 2>/dev/null
    fi
    rm -f "$dir/nginx.pid"
    return 0
}

nginx_start() {
    local dir=$1 root=$2 rate=${3:-} bin port try user_line="" rate_line=""
    if [ -z "$dir" ] || [ -z "$root" ]; then
        echo "usage: nginx_start DIR ROOT [LIMIT_RATE]" >&2; return 1
    fi
    bin=$(nginx_bin) || { echo "nginx is not installed" >&2; return 77; }
    mkdir -p "$dir/tmp" "$dir/conf.d" || return 1
    dir=$(cd "$dir" && pwd) || return 1
    root=$(cd "$root" && pwd) || { echo "no such directory: $2" >&2; return 1; }
    nginx_stop "$dir"
    [ "$(id -u)" = 0 ] && user_line="user root;"
    [ -n "$rate" ] && rate_line="limit_rate $rate;"
    for try in $(seq 1 30); do
        port=$(( 20000 + (RANDOM * 32768 + RANDOM) % 40000 ))
        cat > "$dir/nginx.conf" <<EOF
$user_line
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 1024; }
http {
    log_format nst '\$connection \$connection_requests \$status \$uri \$body_bytes_sent';
    access_log $dir/access.log nst;
    client_body_temp_path $dir/tmp/body;
    proxy_temp_path $dir/tmp/proxy;
    fastcgi_temp_path $dir/tmp/fastcgi;
    uwsgi_temp_path $dir/tmp/uwsgi;
    scgi_temp_path $dir/tmp/scgi;
    types { image/jpeg jpg jpeg; image/png png; }
    default_type application/octet-stream;
    sendfile on;
    tcp_nodelay on;
    keepalive_requests 100000;
    keepalive_timeout 60s;
    server {
        listen 127.0.0.1:$port;
        root $root;
        $rate_line
        include $dir/conf.d/*.conf;
    }
}
EOF
        if "$bin" -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" 2> "$dir/start.err"; then
            local i
            # (up to 30 s: a loaded machine may be slow to schedule nginx)
            for i in $(seq 1 600); do
                if [ -s "$dir/nginx.pid" ] && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
                    if [ -n "${NGINX_OWNER_PID:-}" ]; then
                        (
                            trap '' HUP
                            while kill -0 "$NGINX_OWNER_PID" 2>/dev/null; do sleep 0.5; done
                            rm -f "$dir/watchdog.pid"
                            nginx_stop "$dir"
                        ) < /dev/null > /dev/null 2>&1 &
                        echo $! > "$dir/watchdog.pid"
                    fi
                    echo "$port"
                    return 0
                fi
                sleep 0.05
            done
            echo "nginx started but does not answer on port $port:" >&2
            cat "$dir/error.log" >&2
            nginx_stop "$dir"
            return 1
        fi
        grep -q "in use" "$dir/start.err" "$dir/error.log" 2>/dev/null && continue
        echo "nginx failed to start:" >&2
        cat "$dir/start.err" >&2
        return 1
    done
    echo "nginx: no free port found" >&2
    return 1
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    case "${1:-}" in
    start) shift; nginx_start "$@"; exit $? ;;
    stop) shift; nginx_stop "$@"; exit $? ;;
    *) echo "usage: $0 start DIR ROOT [LIMIT_RATE] | stop DIR" >&2; exit 1 ;;
    esac
fi
