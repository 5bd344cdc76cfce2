#!/usr/bin/env bash
# The tar reader against Python's tarfile and webdataset's grouping rule, on
# generated odd archives (tests/tar_cases.py, shared with the webdataset
# interop test): ustar names split into prefix and name, GNU long
# names ('L'), pax paths (long, non-ASCII), directories, symbolic and hard
# links, names with no dot or a leading dot, dots in folder names, a
# duplicate member, a sample of 66 members, names over 4096 bytes, GNU
# sparse members (when GNU tar is installed) and archives cut inside a
# member and inside a header. For each, `nostall pack --index` writes the
# index file a header pass makes, and the check below reads it (version 2,
# src/dataset/tar.h) and compares it with tarfile's members grouped as
# webdataset groups them (key = the path up to the first dot of its last
# component; consecutive members of one key; regular files only): every
# sample of tarfile's is nostall's, with the same extensions in the same
# order and each member's bytes at nostall's range equal to tarfile's data
# -- or one of its members is named (or covered) by a damaged region of the
# index, with a code saying why (duplicate, more than 64 members, sparse,
# name too long, truncated), and nostall keeps at most the rest of it. A
# sample with two members of one extension (webdataset raises) must be so
# reported. nostall has no sample tarfile does not.
source "$(dirname "$0")/lib_cli.sh"

mkdir "$TMP/t"
# the odd archives (tests/tar_cases.py, shared with the webdataset interop test)
"$PY" -c 'import sys; sys.path.insert(0, sys.argv[1]); import tar_cases; tar_cases.write_odd(sys.argv[2])' \
    "$(dirname "$0")" "$TMP/t" || fail "writing the archives"

# GNU sparse members, as GNU tar writes them (old GNU 'S' and pax 0.0, 0.1, 1.0)
if tar --version 2> /dev/null | grep -q "GNU tar"; then
    mkdir "$TMP/sp"
    "$PY" -c "
import sys
f = open(sys.argv[1] + '/s.jpg', 'wb')
for i in range(6):
    f.seek(i * 65536); f.write(bytes([65 + i]) * 700)
f.truncate(6 * 65536 + 4096)
open(sys.argv[1] + '/s.cls', 'w').write('3')
open(sys.argv[1] + '/r.jpg', 'wb').write(b'\xff\xd8rr')
open(sys.argv[1] + '/r.cls', 'w').write('1')" "$TMP/sp"
    tar -S --format=gnu -cf "$TMP/t/sparse_gnu.tar" -C "$TMP/sp" r.jpg r.cls s.jpg s.cls
    for v in 0.0 0.1 1.0; do
        tar -S --format=pax --sparse-version=$v -cf "$TMP/t/sparse_pax$v.tar" -C "$TMP/sp" r.jpg r.cls s.jpg s.cls
    done
else
    echo "GNU tar not installed: the sparse archives skipped"
fi

"$CLI" pack --index "$TMP/t"/*.tar > "$TMP/pack.out" || fail "pack --index: $(cat "$TMP/pack.out")"

"$PY" - "$TMP/t" "$(dirname "$0")" <<'EOF' || fail "nostall's samples differ from tarfile + webdataset's"
import glob, io, os, struct, sys, tarfile
sys.path.insert(0, sys.argv[2])
from tar_cases import nstidx as nostall, wds_split as split

def reference(path):
    """tarfile's regular members grouped as webdataset groups them; a member
    tarfile cannot read whole ends the list (marked cut)."""
    groups, cut = [], None
    try:
        t = tarfile.open(path)
        for m in t:
            if not m.isreg(): continue
            kv = split(m.name)
            if not kv: continue
            try:
                data = t.extractfile(m).read()
                if len(data) != m.size: raise tarfile.ReadError("short")
            except (tarfile.ReadError, OSError, EOFError):
                cut = m.name; groups.append((kv[0], [(kv[1], m, None)])); break
            if not groups or groups[-1][0] != kv[0]: groups.append((kv[0], []))
            groups[-1][1].append((kv[1], m, data))
    except (tarfile.ReadError, EOFError):
        pass  # a header cut short: what was read stands
    return groups

raw_cache = {}
codes = {1: "bad header", 2: "truncated", 3: "bad extended header", 4: "duplicate",
         5: "more than 64 members", 6: "sparse", 7: "name too long"}
failures, checked, explained = [], 0, {}
for path in sorted(glob.glob(sys.argv[1] + "/*.tar")):
    raw = open(path, "rb").read()
    samples, damage = nostall(path)
    ref = reference(path)
    def damaged(m):
        """the damage record that names or covers tarfile member m"""
        for off, size, code, name in damage:
            if name and (name == m.name or (len(name) >= 1024 and m.name.startswith(name))):
                return code
            if off <= m.offset_data < off + max(size, 1) or off <= m.offset < off + max(size, 1):
                return code
        return None
    j = 0
    for key, members in ref:
        checked += 1
        bad = [damaged(m) for _, m, _ in members]
        exts = [e.lower() for e, _, _ in members]
        if len(set(exts)) != len(exts) and not any(bad):  # webdataset raises on it
            failures.append("%s: %s: a duplicate member, not reported" % (os.path.basename(path), key[:60]))
            continue
        if not any(bad):
            if j >= len(samples) or samples[j][0] != key:
                failures.append("%s: %s: tarfile has it, nostall has %s and no damage naming it"
                                % (os.path.basename(path), key[:60], samples[j][0][:60] if j < len(samples) else "nothing"))
                continue
            got = samples[j][1]; j += 1
            want = [(e, data) for e, _, data in members]
            if [e for e, _, _ in got] != [e for e, _ in want]:
                failures.append("%s: %s: extensions %s, tarfile %s" % (os.path.basename(path), key[:60],
                                [e for e, _, _ in got], [e for e, _ in want]))
            for (e, off, size), (_, data) in zip(got, want):
                if raw[off:off + size] != data:
                    failures.append("%s: %s.%s: other bytes" % (os.path.basename(path), key[:60], e))
        else:
            for c in bad:
                if c: explained[codes[c]] = explained.get(codes[c], 0) + 1
            if j < len(samples) and samples[j][0] == key:  # at most the rest of it
                rest = [e for (e, m, _), c in zip(members, bad) if not c]
                if [e for e, _, _ in samples[j][1]] != rest[:len(samples[j][1])] or not samples[j][1]:
                    failures.append("%s: %s: kept %s of %s" % (os.path.basename(path), key[:60],
                                    [e for e, _, _ in samples[j][1]], rest))
                j += 1
    for key, _ in samples[j:]:
        failures.append("%s: %s: nostall has it, tarfile + webdataset do not" % (os.path.basename(path), key[:60]))
for f in failures: print("FAIL:", f)
print("tar diff: %d samples of tarfile's compared; explained by damage: %s" % (checked, explained))
need = {"duplicate", "more than 64 members", "name too long", "truncated"}
assert need <= set(explained), "no case for %s" % (need - set(explained))
sys.exit(1 if failures else 0)
EOF
echo PASS
