#!/bin/bash
# tests/fuzz/run.sh BUILD_DIR SECONDS [NAME...] — run each libFuzzer binary
# BUILD_DIR/fuzz_<NAME> (all of them by default; built with -DNOSTALL_FUZZ=ON,
# see cmake/fuzz.cmake) for SECONDS on its seeds, one after the other, and
# print a table: executions, executions per second, new inputs, verdict.
#
#   seeds        tests/fuzz/corpus/<name>, corpus/<prefix> for a name with a
#                prefix (jpeg_diff -> jpeg), tests/fuzz/crashes/<name>:
#                read only, the committed corpus is never written
#   new inputs   BUILD_DIR/fuzz-scratch/<name>/ (kept between runs; copy the
#                interesting ones into corpus/<name> by hand, or minimise
#                with -merge=1)
#   crashes      BUILD_DIR/fuzz-artifacts/<name>/ (crash-*, leak-*,
#                timeout-*, oom-*): fix, then add the input to
#                tests/fuzz/crashes/<name>/ so `make test` replays it
#   dictionary   tests/fuzz/<name>.dict, else tests/fuzz/<prefix>.dict
#
# Environment: FUZZ_RUNS (stop after that many executions instead of, or as
# well as, SECONDS: SECONDS 0 means no time limit), FUZZ_TIMEOUT (seconds one
# input may take, default 10), FUZZ_NICE (default 19: the machine is
# shared), FUZZ_FLAGS (more libFuzzer flags). Memory: 2 GiB RSS, 512 MiB per
# malloc: a small input that makes a parser allocate what a header claims
# is an error. Exit 1 if any target found something.
set -uo pipefail
build=${1:?usage: run.sh BUILD_DIR SECONDS [NAME...]}
secs=${2:?usage: run.sh BUILD_DIR SECONDS [NAME...]}
shift 2
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$build" && pwd)
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
    for f in "$here"/fuzz_*.c; do
        n=$(basename "$f" .c)
        names+=("${n#fuzz_}")
    done
fi
summary=()
failed=0
# With the kernel's autogroup scheduling (sched_autogroup_enabled), `nice`
# only ranks processes within one session: a niced fuzzer still took an
# equal share of the CPUs against another session's `make test` (its TSan
# tests got a fifth of a core and one timed out). So each fuzzer runs in a
# session of its own (setsid) whose group is given the same nice value.
detach=
if [ "$(cat /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null)" = 1 ] &&
    command -v setsid >/dev/null; then
    detach="setsid -w"
fi
trap 'kill -INT $pid 2>/dev/null' INT TERM
for name in "${names[@]}"; do
    bin=$build/fuzz_$name
    if [ ! -x "$bin" ]; then
        echo "run.sh: $bin not built (cmake -DNOSTALL_FUZZ=ON, target fuzz_all)" >&2
        summary+=("$(printf '%-16s %12s %10s %8s  %s' "$name" - - - "not built")")
        failed=1
        continue
    fi
    prefix=${name%%_*}
    scratch=$build/fuzz-scratch/$name
    art=$build/fuzz-artifacts/$name
    mkdir -p "$scratch" "$art"
    seeds=()
    for d in "$here/corpus/$name" "$here/corpus/$prefix" "$here/crashes/$name"; do
        [ -d "$d" ] && [[ " ${seeds[*]-} " != *" $d "* ]] && seeds+=("$d")
    done
    dict=()
    if [ -f "$here/$name.dict" ]; then dict=(-dict="$here/$name.dict")
    elif [ -f "$here/$prefix.dict" ]; then dict=(-dict="$here/$prefix.dict"); fi
    limits=()
    [ "$secs" != 0 ] && limits+=(-max_total_time="$secs")
    [ -n "${FUZZ_RUNS:-}" ] && limits+=(-runs="$FUZZ_RUNS")
    log=$build/fuzz-artifacts/$name.log
    echo "run.sh: fuzz_$name ${limits[*]} (log: $log)" >&2
    # shellcheck disable=SC2086
    $detach nice -n "${FUZZ_NICE:-19}" "$bin" "${limits[@]}" -timeout="${FUZZ_TIMEOUT:-10}" \
        -rss_limit_mb=2048 -malloc_limit_mb=512 -print_final_stats=1 \
        -artifact_prefix="$art/" "${dict[@]}" ${FUZZ_FLAGS:-} \
        "$scratch" "${seeds[@]}" >"$log" 2>&1 &
    pid=$!
    # under autogroup, lower the fuzzer's own group, never this session's
    # (setsid forks when it leads a process group: then the fuzzer is its child)
    if [ -n "$detach" ]; then
        sleep 0.2
        for p in $pid $(pgrep -P $pid); do
            [ "$(ps -o sid= -p $p | tr -d ' ')" != "$(ps -o sid= -p $$ | tr -d ' ')" ] &&
                echo "${FUZZ_NICE:-19}" >"/proc/$p/autogroup" 2>/dev/null && break
        done
    fi
    wait $pid
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    added=$(sed -n 's/^stat::new_units_added: *//p' "$log" | tail -1)
    verdict=ok
    if [ $rc -ne 0 ]; then
        verdict="FOUND: $(grep -o 'Test unit written to .*' "$log" | tail -1 | sed 's/Test unit written to //')"
        [ "$verdict" = "FOUND: " ] && verdict="FAILED (exit $rc, see $log)"
        failed=1
    fi
    summary+=("$(printf '%-16s %12s %10s %8s  %s' "$name" "${execs:--}" "${rate:--}" "${added:--}" "$verdict")")
done
printf '%-16s %12s %10s %8s  %s\n' target executions "exec/s" new verdict
printf '%s\n' "${summary[@]}"
exit $failed
