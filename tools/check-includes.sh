#!/usr/bin/env bash
# tools/check-includes.sh — the include graph between src/'s rooms (its
# directories; the files directly in src/ are the room "loader") and its
# circles. A room A depends on room B when a file of A includes a header of
# B ("B/x.h", or "x.h" found beside the including file); public headers
# (include/) are no room. Prints every circle of rooms (a strongly connected
# set, with the includes that make each of its edges), then every circle of
# modules inside a room (a module: x.c, x.h and x_impl.h, the room's private
# header). Exit status 1 when a circle remains, 0 otherwise.
#
# A recipe registry's circle is allowed: a registry (recipe/recipe.c) names
# the recipes it chooses between, each of which includes the registry's
# header. Such a circle stays inside recipe/ and holds the module "recipe";
# it is printed and does not fail the check.
#
# Usage: tools/check-includes.sh [SRC_DIR]   (default: src/ beside tools/)
# Reads the files only; needs Debian's /usr/bin/python3.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=${1:-$here/../src}
exec /usr/bin/python3 - "$src" <<'EOF'
import os, re, sys

src = os.path.realpath(sys.argv[1])
inc = re.compile(r'^\s*#\s*include\s+"([^"]+)"')

def room_of(rel):
    d = os.path.dirname(rel)
    return d if d else "loader"

def module_of(rel):
    m = os.path.splitext(os.path.basename(rel))[0]
    return m[: -len("_impl")] if m.endswith("_impl") else m

files = []
for dp, _, fs in os.walk(src):
    for f in fs:
        if f.endswith((".c", ".h")):
            files.append(os.path.relpath(os.path.join(dp, f), src))
files.sort()

room_edges = {}  # (A, B) -> [file -> header]
mod_edges = {}   # room -> {(a, b)}
for rel in files:
    with open(os.path.join(src, rel), errors="replace") as fh:
        for line in fh:
            m = inc.match(line)
            if not m:
                continue
            name = m.group(1)
            beside = os.path.normpath(os.path.join(os.path.dirname(rel), name))
            if os.path.isfile(os.path.join(src, beside)):
                target = beside
            elif os.path.isfile(os.path.join(src, name)):
                target = os.path.normpath(name)
            else:
                continue  # a public or system header
            a, b = room_of(rel), room_of(target)
            if a != b:
                room_edges.setdefault((a, b), []).append(rel + " -> " + target)
            else:
                ma, mb = module_of(rel), module_of(target)
                if ma != mb:
                    mod_edges.setdefault(a, set()).add((ma, mb))

def sccs(nodes, edges):
    """Tarjan's strongly connected components, those of 2 nodes or more."""
    adj = {n: sorted({b for (a, b) in edges if a == n}) for n in nodes}
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in adj[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))
    for n in sorted(nodes):
        if n not in index:
            visit(n)
    return out

sys.setrecursionlimit(10000)
rooms = {room_of(f) for f in files}
bad = sccs(rooms, room_edges.keys())
print("rooms: %d, edges between rooms: %d" % (len(rooms), len(room_edges)))
for comp in bad:
    print("CIRCLE of rooms: " + " <-> ".join(comp))
    for (a, b), why in sorted(room_edges.items()):
        if a in comp and b in comp:
            print("  %s -> %s: %s" % (a, b, "; ".join(why)))
fails = len(bad)
for r in sorted(mod_edges):
    mods = {m for e in mod_edges[r] for m in e}
    for comp in sccs(mods, mod_edges[r]):
        if r == "recipe" and "recipe" in comp:
            print("recipe registry's circle (allowed): " + " <-> ".join(comp))
        else:
            print("CIRCLE of modules inside %s/: %s" % (r, " <-> ".join(comp)))
            fails += 1
if fails:
    print("FAIL: %d circle(s)" % fails)
    sys.exit(1)
print("ok: no circle of rooms, none of modules inside a room")
EOF
