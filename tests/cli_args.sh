#!/usr/bin/env bash
# The CLI parses its arguments one way for every subcommand (tools/args.c):
# each --help (generated from the tables) lists the command's flags and, for
# the commands that build a loader, the loader's options; --flag=value and
# --flag value give the same result; a bad value, a missing value, an
# unknown flag and a value given to a plain flag fail with exit 2 and one
# line naming the flag (and the value); -- ends the flags.
source "$(dirname "$0")/lib_cli.sh"

# help: every command, its own flags, loader options where a loader is built
for c in bench analyze gen transcode pack "gen --task detect" "gen --task audio"; do
    # shellcheck disable=SC2086
    "$CLI" $c --help > "$TMP/help" || fail "$c --help: exit $?"
    grep -q -- "-h, --help" "$TMP/help" || fail "$c --help: $(head -3 "$TMP/help")"
done
"$CLI" analyze --help > "$TMP/help"
grep -q -- "--batch-size" "$TMP/help" && grep -q -- "--step-rate N" "$TMP/help" ||
    fail "analyze --help lacks the loader's or its own flags"
"$CLI" bench --help > "$TMP/help"
grep -q -- "--epochs .*default 1)" <(tr -s '\n ' ' ' < "$TMP/help") || fail "bench --help: epochs default"
"$CLI" pack --help > "$TMP/help"
grep -q -- "--shard-bytes N" "$TMP/help" && ! grep -q -- "--batch-size" "$TMP/help" ||
    fail "pack --help: its flags only"

# --flag=value and --flag value: the same files
"$CLI" gen "$TMP/a" --images=4 --classes=2 --width=16 --height=16 --seed=9 --quiet 2> /dev/null
"$CLI" gen --quiet --images 4 --classes 2 --width 16 --height 16 --seed 9 -- "$TMP/b" 2> /dev/null
diff -r "$TMP/a" "$TMP/b" > /dev/null || fail "--flag=value and --flag value differ"
a=$("$CLI" bench "$TMP/a" --json --quiet --batch-size=2 --crop=8 --threads=1 | $PY -c 'import json,sys; print(json.load(sys.stdin)["checksum"])')
b=$("$CLI" bench "$TMP/a" --json --quiet --batch_size 2 --crop 8 --threads 1 | $PY -c 'import json,sys; print(json.load(sys.stdin)["checksum"])')
[ "$a" = "$b" ] || fail "bench: $a with '=', $b without"

# refusals: exit 2, one line naming the flag and the value
refuse() { # WANT... -- ARGS...
    local want=()
    while [ "$1" != "--" ]; do want+=("$1"); shift; done
    shift
    set +e
    "$CLI" "$@" > /dev/null 2> "$TMP/err"
    local rc=$?
    set -e
    [ $rc = 2 ] || fail "$*: exit $rc, want 2: $(cat "$TMP/err")"
    [ "$(wc -l < "$TMP/err")" = 1 ] || fail "$*: not one line: $(cat "$TMP/err")"
    for w in "${want[@]}"; do grep -qF -- "$w" "$TMP/err" || fail "$*: '$w' not in: $(cat "$TMP/err")"; done
}
refuse "--images" "'0'" -- gen "$TMP/x" --images 0
refuse "--format" "'gif'" "jpeg or png" -- gen "$TMP/x" --format gif
refuse "--crowd" "'2'" -- gen --task detect "$TMP/x" --crowd 2
refuse "--channels" "'3'" -- gen --task audio "$TMP/x" --channels 3
refuse "--restart-mcus" "'65'" -- transcode "$TMP/a" "$TMP/x" --restart-mcus=65
refuse "--shard-bytes" "'1Q'" -- pack "$TMP/a" "$TMP/x" --shard-bytes 1Q
refuse "--step-ms" "'-1'" -- bench "$TMP/a" --step-ms=-1
refuse "--step-rate" "'0'" -- analyze "$TMP/a" --step-rate 0
refuse "batch_size" "0" -- analyze "$TMP/a" --step-ms 1 --batch-size 0
refuse "--threads" "needs a value" -- bench "$TMP/a" --threads
refuse "--images" "needs a value" -- gen "$TMP/x" --images
refuse "'--no-such'" "nostall pack --help" -- pack "$TMP/a" "$TMP/x" --no-such
refuse "'-q'" -- transcode "$TMP/a" "$TMP/x" -q
refuse "--json" "'1'" -- bench "$TMP/a" --json=1
refuse "'$TMP/c'" -- bench "$TMP/a" "$TMP/c"
refuse "--batch-size" -- gen "$TMP/x" --batch-size 2 # no loader: not a gen flag
[ ! -e "$TMP/x" ] || fail "a refused command wrote $TMP/x"
echo PASS
