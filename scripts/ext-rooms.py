#!/usr/bin/python3
"""ext-rooms.py - the include rules of ext/'s two rooms (DESIGN.md "ext/"):

 - no file of ext/runtime/ (the per-node runtime) includes a header of
   ext/surface/ (the per-process SQL surface): the surface calls the
   runtime, never the reverse (the runtime publishes events, events.h);
 - counting modules (a .c with the .h of the same name in the same folder;
   ext/raftsql.h, the public header every room may use, is one of its
   own), no strongly connected component of the #include graph over ext/
   holds more than MAX_MODULES modules.

Prints each violation (and every component of more than one module, as
"ext: include circle of N modules: ...") and exits 1 on any, else 0.
Run from the top of the tree (scripts/check-layering.sh does)."""

import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "tools"))

import scc  # noqa: E402

MAX_MODULES = 3
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def module(path):
    """The module of a file: its path without .c/.h, but the public
    header, a module of its own."""
    return path if path == "ext/raftsql.h" else path[:-2]


def sources():
    out = []
    for d, _, names in os.walk("ext"):
        for n in names:
            if n.endswith((".c", ".h")):
                out.append(os.path.normpath(os.path.join(d, n)))
    return sorted(out)


def graph(files):
    """Module -> set of modules whose headers its files include."""
    known = set(files)
    edges = {module(f): set() for f in files}
    rooms_bad = []
    for f in files:
        with open(f, encoding="utf-8") as fh:
            text = fh.read()
        for inc in INCLUDE.findall(text):
            for cand in (os.path.normpath(os.path.join(os.path.dirname(f),
                                                       inc)),
                         os.path.normpath(inc)):
                if cand in known:
                    break
            else:
                continue
            if f.startswith("ext/runtime/") and \
                    cand.startswith("ext/surface/"):
                rooms_bad.append((f, inc))
            if module(cand) != module(f):
                edges[module(f)].add(module(cand))
    return edges, rooms_bad


def components(edges):
    """Tarjan's strongly connected components (tools/scc.py), each
    sorted."""
    return [sorted(comp) for comp in scc.components(edges)]


def main():
    edges, rooms_bad = graph(sources())
    bad = False
    for f, inc in rooms_bad:
        print(f'layering: {f} includes "{inc}": the runtime never includes '
              "a header of the surface (publish an event, events.h)")
        bad = True
    for comp in sorted(components(edges), key=lambda c: (-len(c), c)):
        if len(comp) < 2:
            continue
        print(f"ext: include circle of {len(comp)} modules: {' '.join(comp)}")
        if len(comp) > MAX_MODULES:
            print(f"layering: an include circle of more than {MAX_MODULES} "
                  "modules in ext/")
            bad = True
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
