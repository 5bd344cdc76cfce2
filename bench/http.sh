#!/usr/bin/env bash
# bench/http.sh — acceptance figure of the HTTP source (issue 5): with a
# per-connection rate limit on the server, 16 transfers in flight deliver
# >= 12x the throughput of one. One loader thread; items are real JPEGs
# (~100 KB) decoded as usual; the server runs on loopback.
#   --server python  tests/http_faulty_server.py --rate 200k: paces every
#                    response smoothly (default);
#   --server nginx   nginx limit_rate 64k (nginx lets the first `rate` bytes
#                    of each response through at once, so the rate must be
#                    below the file size to slow anything; ~1 minute).
# Usage: bash bench/http.sh [--server python|nginx] [--images N]
# Writes build/bench/http.json and build/bench/http.md.
set -euo pipefail
cd "$(dirname "$0")/.."
SERVER=python
IMAGES=32
while [ $# -gt 0 ]; do
    case "$1" in
        --server) SERVER=$2; shift 2 ;;
        --images) IMAGES=$2; shift 2 ;;
        *) echo "usage: bash bench/http.sh [--server python|nginx] [--images N]" >&2; exit 2 ;;
    esac
done
make -s build > /dev/null
DATA=${NOSTALL_BENCH_DATA:-/tmp/nostall-bench-data}/http-n$IMAGES-470x425-q95
[ -d "$DATA" ] || build/nostall gen "$DATA" --images "$IMAGES" --classes 4 --width 470 --height 425 \
    --quality 95 --seed 3 --quiet
WORK=$(mktemp -d)
source tests/lib_nginx.sh
export NGINX_OWNER_PID=$$
srv=""
cleanup() { [ -n "$srv" ] && kill "$srv" 2>/dev/null; nginx_stop "$WORK/ngx" > /dev/null 2>&1 || true; rm -rf "$WORK"; }
trap cleanup EXIT
if [ "$SERVER" = nginx ]; then
    RATE=64k
    port=$(nginx_start "$WORK/ngx" "$DATA" $RATE)
else
    RATE=200k
    /usr/bin/python3 tests/http_faulty_server.py --root "$DATA" --rate $RATE "$WORK/port" &
    srv=$!
    for _ in $(seq 50); do [ -s "$WORK/port" ] && break; sleep 0.1; done
    port=$(cat "$WORK/port")
fi
( cd "$DATA" && find . -name '*.jpg' | sort ) | while read -r rel; do
    printf 'http://127.0.0.1:%s/%s\t0\n' "$port" "${rel#./}"
done > "$WORK/list.txt"
mkdir -p build/bench
/usr/bin/python3 - "$WORK/list.txt" "$SERVER" "$RATE" "$DATA" <<'PYEOF'
import json, os, subprocess, sys
lst, server, rate, data = sys.argv[1:5]
total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(data) for f in fs)
def run(depth):
    p = subprocess.run(["build/nostall", "bench", lst, "--threads", "1", "--io-depth", str(depth),
                        "--batch-size", "8", "--crop", "64", "--epochs", "1", "--json", "--quiet"],
                       capture_output=True, text=True, check=True)
    j = json.loads(p.stdout)
    assert j["skipped_count"] == 0, j["skipped"]
    return j
res = {d: run(d) for d in (1, 4, 16)}
base = res[1]["seconds"]
lines = ["Machine: %s; %d JPEGs (%.1f MB) over HTTP from %s on loopback, %s per connection; "
         "1 loader thread." % (os.uname().nodename, res[1]["items"], total / 1e6,
                               "nginx (limit_rate)" if server == "nginx" else "tests/http_faulty_server.py",
                               rate),
         "", "| transfers in flight (io_depth) | seconds | MB/s | ÷ one in flight | want |", "|---|---|---|---|---|"]
for d, j in res.items():
    lines.append("| %d | %.2f | %.2f | %.1fx | %s |" % (d, j["seconds"], total / 1e6 / j["seconds"],
                                                       base / j["seconds"], ">= 12x" if d == 16 else ""))
md = "\n".join(lines)
print(md)
open("build/bench/http.md", "w").write(md + "\n")
json.dump({str(d): {"seconds": j["seconds"], "items": j["items"]} for d, j in res.items()},
          open("build/bench/http.json", "w"), indent=1)
PYEOF
