#!/usr/bin/env bash
# `nostall analyze` of a loader with one prep server (`nostall serve` on
# loopback, started and stopped here on a free port; threads=0: every item
# prepared by the server): the measurements hold the run with the server
# (the second of two epochs: the items received in it, some of the epoch's
# having come while the first ended, and exactly their bytes; both epochs
# when the ring held the whole second one before it began), the JSON
# report's remote_prep section and its what-if rows for
# 1, 2, 4 and 8 servers (the epoch never longer with more of them), the
# HTML report's section; `bench --json` has the new stats. Structure only:
# no assertion on a time or a rate. Waits on the server's "listening" line.
source "$(dirname "$0")/lib_cli.sh"

SERVER=""
trap '[ -z "$SERVER" ] || kill "$SERVER" 2>/dev/null || true; rm -rf "$TMP"' EXIT

"$CLI" gen "$TMP/data" --images 24 --classes 3 --width 64 --height 48 --quiet
printf 'a shared secret\n' > "$TMP/secret"
chmod 600 "$TMP/secret"
opts=(--crop 32 --seed 7)
# one item: 3 x 32 x 32 float32 pixels and an int64 label
ITEM=$((3 * 32 * 32 * 4 + 8))

listening() { grep -q '^listening on ' "$1"; }
"$CLI" serve "$TMP/data" "${opts[@]}" --threads 1 --secret-file "$TMP/secret" \
    > "$TMP/srv.out" 2> "$TMP/srv.err" &
SERVER=$!
wait_until 120 listening "$TMP/srv.out" || fail "the server never listened: $(cat "$TMP/srv.err")"
PORT=$(sed -n 's/^listening on .*:\([0-9]*\)$/\1/p' "$TMP/srv.out")
remote=(--threads 0 --prep-servers "127.0.0.1:$PORT" --prep-secret-file "$TMP/secret")

# the stats: bytes received are the items' bytes, the other counters there
"$CLI" bench "$TMP/data" "${opts[@]}" --batch-size 4 --epochs 1 --json --quiet "${remote[@]}" \
    > "$TMP/bench.json"
json "$TMP/bench.json" '(lambda s: s["prep_remote_items"] == 24 and s["prep_remote_bytes"] == 24 * '"$ITEM"' and s["prep_remote_wait_ns"] > 0 and s["prep_remote_busy_ns"] > 0 and "prep_recv_cpu_ns" in s and "prep_servers_up" in s)(j["stats"])' \
    | grep -q True || fail "bench stats: $(json "$TMP/bench.json" '{k: v for k, v in j["stats"].items() if k.startswith("prep_")}')"

"$CLI" analyze "$TMP/data" "${opts[@]}" --batch-size 4 --step-ms 1 --quiet --json \
    --report "$TMP/r.html" "${remote[@]}" > "$TMP/a.json" || fail "analyze with a prep server failed"
# the run with the server: every item from it, its bytes exactly
json "$TMP/a.json" '(lambda m: m["prep_servers"] == 1 and m["threads"] == 0 and m["srv_items"] in (24, 48) and 0 < m["srv_remote_items"] <= m["srv_items"] and m["srv_remote_bytes"] == m["srv_remote_items"] * '"$ITEM"' and m["srv_remote_busy_ns"] > 0 and m["srv_remote_wait_ns"] > 0 and m["prep_items"] == 24)(j["measurements"])' \
    | grep -q True || fail "measurements: $(json "$TMP/a.json" '{k: v for k, v in j["measurements"].items() if k.startswith(("srv_", "prep_"))}')"
# the report's remote-prep section
json "$TMP/a.json" '(lambda r: r["servers"] == 1 and r["items"] == j["measurements"]["srv_remote_items"] and r["bytes"] == r["items"] * '"$ITEM"' and r["item_bytes"] == '"$ITEM"' and 0 < r["remote_share"] <= 1 and r["per_server_items_per_s"] > 0 and r["net_bytes_per_s"] > 0 and "not probed" in r["not_modelled"] and len(r["models"]) > 0)(j["remote_prep"])' \
    | grep -q True || fail "remote_prep: $(json "$TMP/a.json" 'j["remote_prep"]')"
# what if 1, 2, 4, 8 servers: every item from them (threads=0), the epoch
# never longer with more servers
json "$TMP/a.json" '(lambda rows: [r["x"] for r in rows] == [1, 2, 4, 8] and all(r["config"]["prep_servers"] == r["x"] and r["prediction"]["remote_items"] == 24 for r in rows) and all(b["prediction"]["epoch_s"] <= a["prediction"]["epoch_s"] * (1 + 1e-9) for a, b in zip(rows, rows[1:])))([r for r in j["whatif"] if r["group"] == "servers"])' \
    | grep -q True || fail "what-if servers rows: $(json "$TMP/a.json" '[(r["x"], r["prediction"]) for r in j["whatif"] if r["group"] == "servers"]')"
# no echo rows: a loader refuses echoing with prep servers
json "$TMP/a.json" 'not any(r["group"] == "echo" for r in j["whatif"])' | grep -q True \
    || fail "echo what-if rows with prep servers"
measured_ok "$TMP/a.json"
grep -q 'id="remote-prep"' "$TMP/r.html" || fail "the HTML report has no remote-prep section"
grep -q 'data-chart="whatif-servers"' "$TMP/r.html" || fail "the HTML report has no servers curve"
# a prediction for more servers, from the same measurements
"$CLI" analyze --measurements "$TMP/a.json" --predict prep_servers=3 --json > "$TMP/p.json" \
    || fail "--predict prep_servers=3 refused"
json "$TMP/p.json" 'j["predictions"][0]["config"]["prep_servers"] == 3' | grep -q True \
    || fail "prediction: $(json "$TMP/p.json" 'j["predictions"]')"
echo "PASS"
