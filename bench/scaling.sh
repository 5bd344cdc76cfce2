#!/usr/bin/env bash
# bench/scaling.sh — nostall with 2 worker threads against 1, on its own:
# the issue-3 criterion "2 threads >= 1.9x one thread", measured without
# the Python peers in between, next to the machine's own ceiling (two
# libjpeg-turbo full-decode processes at once against one).
#
#   bash bench/scaling.sh [--data DIR] [--rst DIR] [--rounds R] [--epochs E]
#
# --data defaults to the generated set bench/run.sh keeps in the dataset
# cache (its 1000-image set, else the 300-image one of --quick), and --rst
# (the restart-marker copy, for the transcoded rows) to DATA.rstm1 when
# present; run `make bench` (or bench/run.sh --quick) first, or pass any
# ImageFolder of JPEGs. Each round runs, back to back: nostall 1 thread,
# nostall 2 threads (float and uint8, train, crop 224, batch 64, --epochs
# epochs each), then jpeg_decode once and twice at once. Reported: medians of
# items/s over rounds and their ratios. Results: build/bench/scaling.md/.json.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DATA_ROOT="${NOSTALL_BENCH_DATA:-/tmp/nostall-bench-data}"
DATA="$DATA_ROOT/imagefolder-n1000-470x425-q95-s7"
[ -d "$DATA" ] || [ ! -d "$DATA_ROOT/imagefolder-n300-470x425-q95-s7" ] ||
    DATA="$DATA_ROOT/imagefolder-n300-470x425-q95-s7"
RST=""
ROUNDS=5
EPOCHS=4
OUT="${NOSTALL_BENCH_OUT:-$ROOT/build/bench}"
BUILD="${NOSTALL_BUILD:-$ROOT/build}"
while [ $# -gt 0 ]; do
    case "$1" in
        --data) DATA="$2"; shift 2 ;;
        --rst) RST="$2"; shift 2 ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        --epochs) EPOCHS="$2"; shift 2 ;;
        -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "bench/scaling.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
[ -d "$DATA" ] || { echo "bench/scaling.sh: no dataset at $DATA (run make bench first, or pass --data DIR)" >&2; exit 2; }

bash tools/install-deps.sh gcc cmake libjpeg62-turbo-dev libpng-dev python3
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "$BUILD" -j"$(nproc 2>/dev/null || echo 2)" --target nostall_cli >/dev/null
mkdir -p "$OUT"
cc -O2 -std=c11 -Wall -Wextra -o "$OUT/jpeg_decode" bench/jpeg_decode.c -ljpeg

SETS=("$DATA")
KINDS=(original)
[ -z "$RST" ] && [ -d "$DATA.rstm1" ] && RST="$DATA.rstm1"
if [ -n "$RST" ]; then SETS+=("$RST"); KINDS+=(transcoded); fi
RAW="$OUT/scaling.raw"
: > "$RAW"
echo "bench/scaling: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); $ROUNDS rounds" >&2
for r in $(seq "$ROUNDS"); do
    for s in "${!SETS[@]}"; do
        d="${SETS[$s]}"
        for o in float uint8; do
            for t in 1 2; do
                ips=$("$BUILD/nostall" bench "$d" --threads "$t" --batch-size 64 --crop 224 --mode train \
                    --output "$o" --epochs "$EPOCHS" --json --quiet --no-checksum |
                    /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["items_per_second"])')
                printf 'nostall\t%s\t%s\t%s\t%s\n' "${KINDS[$s]}" "$o" "$t" "$ips" >> "$RAW"
            done
        done
    done
    one=$("$OUT/jpeg_decode" "$DATA" --epochs "$EPOCHS" --warmup 0 |
        /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["images_per_second"])')
    "$OUT/jpeg_decode" "$DATA" --epochs "$EPOCHS" --warmup 0 > "$OUT/scaling.p1" &
    "$OUT/jpeg_decode" "$DATA" --epochs "$EPOCHS" --warmup 0 > "$OUT/scaling.p2"
    wait
    two=$(cat "$OUT/scaling.p1" "$OUT/scaling.p2" | /usr/bin/python3 -c '
import json, sys
js = [json.loads(l) for l in sys.stdin if l.strip()]
print(sum(j["images"] for j in js) / max(j["seconds"] for j in js))')
    printf 'libjpeg\t-\tfull\t1\t%s\n' "$one" >> "$RAW"
    printf 'libjpeg\t-\tfull\t2\t%s\n' "$two" >> "$RAW"
    echo "bench/scaling: round $r/$ROUNDS done" >&2
done
rm -f "$OUT/scaling.p1" "$OUT/scaling.p2"

/usr/bin/python3 - "$RAW" "$OUT" "$ROUNDS" "$EPOCHS" "$DATA${RST:+ (transcoded: $RST)}" <<'EOF'
import json, statistics, sys, datetime, platform
raw, out, rounds, epochs, data = sys.argv[1:]
samples = {}
for line in open(raw):
    sysname, dset, o, t, v = line.rstrip("\n").split("\t")
    samples.setdefault((sysname, dset, o), {}).setdefault(int(t), []).append(float(v))
rows, res = [], []
for (sysname, dset, o), by in samples.items():
    m1, m2 = statistics.median(by[1]), statistics.median(by[2])
    per_round = [b / a for a, b in zip(by[1], by[2])]
    res.append({"system": sysname, "data": dset, "output": o, "one": m1, "two": m2,
                "ratio": m2 / m1, "ratio_per_round": per_round, "samples": by})
    label = "libjpeg-turbo full decode, 2 processes ÷ 1 (machine ceiling)" if sysname == "libjpeg" \
        else "nostall 2 threads ÷ 1, %s files, %s" % (dset, o)
    rows.append("| %s | %.0f | %.0f | **%.2f×** | %.2f× | %s |" % (
        label, m1, m2, m2 / m1, statistics.median(per_round), " ".join("%.2f" % x for x in per_round)))
cpu = "?"
try:
    for l in open("/proc/cpuinfo"):
        if l.startswith("model name"):
            cpu = l.split(":", 1)[1].strip()
            break
except OSError:
    pass
head = ("_%s rounds, %s epochs per run, medians; %s, Linux %s, %s UTC; data %s._" %
        (rounds, epochs, cpu, platform.release(),
         datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M"), data))
md = "\n".join([head, "", "| what | 1 (items/s) | 2 (items/s) | ratio of medians | median of per-round ratios | ratio per round |",
                "|---|---|---|---|---|---|"] + rows) + "\n"
open(out + "/scaling.md", "w").write(md)
json.dump({"rounds": int(rounds), "epochs": int(epochs), "data": data, "results": res},
          open(out + "/scaling.json", "w"), indent=1)
print(md)
EOF
rm -f "$RAW"
echo "bench/scaling: results in $OUT/scaling.md and $OUT/scaling.json" >&2
