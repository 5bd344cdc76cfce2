#!/usr/bin/env bash
# bench/partitioned_cache.sh [BUILD_DIR] — libnostall_mpi at 4 ranks on one
# machine over TCP loopback, storage emulated at MBPS MB/s per rank:
#   A. per-rank MinIO caches alone, 25% of the dataset each (cache=minio)
#   B. the partitioned cache, 25% of the dataset each (cache=none)
# Same loader options, synchronous steps (an allreduce per batch, as in
# data-parallel training). Prints per-epoch times (slowest rank), storage
# reads, remote-hit latency and network bandwidth, and the speedup of the
# epochs after the first (B over A).
#
# Items are padded with JPEG COM segments (PAD_KB per file) so that bytes,
# not decoding, dominate — the regime of the issue (storage-bound training).
# env: IMAGES (400) PAD_KB (384) MBPS (50) EPOCHS (3) NP (4) THREADS (2)
set -eu
BUILD=${1:-/tmp/build-mpi}
IMAGES=${IMAGES:-400} PAD_KB=${PAD_KB:-384} MBPS=${MBPS:-50} EPOCHS=${EPOCHS:-3}
NP=${NP:-4} THREADS=${THREADS:-2}
CHECK=$BUILD/mpi_loader_check
[ -x "$CHECK" ] || { echo "no $CHECK (configure with MPI found)"; exit 1; }
work=${WORK:-/tmp/nostall-pcache-bench}
rm -rf "$work"
mkdir -p "$work"
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo

"$BUILD/nostall" gen "$work/data" --images "$IMAGES" --classes 4 --width 160 --height 120 --quiet
/usr/bin/python3 - "$work/data" "$PAD_KB" <<'EOF'
import os, sys
root, pad = sys.argv[1], int(sys.argv[2]) * 1024
for d, _, fs in os.walk(root):
    for f in fs:
        p = os.path.join(d, f)
        b = open(p, "rb").read()
        assert b[:2] == b"\xff\xd8"
        segs, left, i = [], pad, 0
        while left > 0:
            n = min(left, 65533)
            body = bytes((i * 131 + j) & 0xFF for j in range(256)) * (n // 256 + 1)
            segs.append(b"\xff\xfe" + (n + 2).to_bytes(2, "big") + body[:n])
            left -= n
            i += 1
        open(p, "wb").write(b[:2] + b"".join(segs) + b[2:])
EOF
total=$(find "$work/data" -type f -printf '%s\n' | awk '{s += $1} END {print s}')
quarter=$(( (total + NP - 1) / NP ))
echo "dataset: $IMAGES items, $((total / 1000000)) MB; cache per rank $((quarter / 1000000)) MB; storage $MBPS MB/s per rank; $NP ranks, $THREADS threads each"

common=(epochs=$EPOCHS threads=$THREADS storage_mbps=$MBPS batch_size=16 --sync --no-indices)
mkdir -p "$work/A" "$work/B"
t0=$SECONDS
timeout 600 mpirun --oversubscribe -np "$NP" --mca btl tcp,self "$CHECK" "$work/data" "$work/A" \
    "${common[@]}" cache=minio cache_bytes=$quarter >"$work/A.log" 2>&1 || { cat "$work/A.log"; exit 1; }
echo "A (per-rank MinIO caches): $((SECONDS - t0)) s"
t0=$SECONDS
timeout 600 mpirun --oversubscribe -np "$NP" --mca btl tcp,self "$CHECK" "$work/data" "$work/B" \
    "${common[@]}" cache=none --cache-bytes "$quarter" >"$work/B.log" 2>&1 || { cat "$work/B.log"; exit 1; }
echo "B (partitioned cache):     $((SECONDS - t0)) s"

/usr/bin/python3 - "$work" "$NP" "$EPOCHS" "$IMAGES" <<'EOF'
import json, sys
work, np_, epochs, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def load(d):
    ep = {}
    for r in range(np_):
        for line in open(f"{work}/{d}/rank_{r}.jsonl"):
            o = json.loads(line)
            if "epoch" in o: ep[(r, o["epoch"])] = o
    return ep
A, B = load("A"), load("B")
res = {"per_epoch": []}
ta, tb = [], []
for e in range(epochs):
    a = max(A[(r, e)]["seconds"] for r in range(np_))
    b = max(B[(r, e)]["seconds"] for r in range(np_))
    ra = sum(A[(r, e)]["storage_reads"] for r in range(np_))
    rb = sum(B[(r, e)]["storage_reads"] for r in range(np_))
    hits = sum(B[(r, e)]["remote_hits"] for r in range(np_))
    lat = sum(B[(r, e)]["remote_ns"] for r in range(np_)) / max(hits, 1) / 1e6
    nb = sum(B[(r, e)]["net_bytes_in"] for r in range(np_))
    same = all(A[(r, e)]["checksum"] == B[(r, e)]["checksum"] for r in range(np_))
    print(f"epoch {e}: A {a:.3f} s, {ra} storage reads | B {b:.3f} s, {rb} storage reads, "
          f"{hits} remote hits ({lat:.2f} ms mean), {nb / 1e6:.1f} MB over the network "
          f"({nb / 1e6 / b:.0f} MB/s aggregate) | checksums {'equal' if same else 'DIFFER'}")
    res["per_epoch"].append({"epoch": e, "A_s": a, "B_s": b, "A_reads": ra, "B_reads": rb,
                             "remote_hits": hits, "remote_ms_mean": lat, "net_bytes": nb,
                             "checksums_equal": same})
    if e >= 1: ta.append(a); tb.append(b)
if ta:
    sp = sum(ta) / sum(tb)
    print(f"speedup after the first epoch (A/B): {sp:.2f}x")
    res["speedup"] = sp
json.dump(res, open(f"{work}/result.json", "w"), indent=1)
EOF
