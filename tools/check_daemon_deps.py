#!/usr/bin/python3
"""Which of the daemon's files call which, and the cycles among them.

    tools/check_daemon_deps.py [--dir daemon] [--allow-cycles]

A file depends on another when it calls a function defined there (a
non-static function of daemon/*.c; the header declares them all; a call
through a function pointer, such as a libuv callback or the `later`
pass's, is not a dependency). Prints each file's dependencies and every
cycle; exits 1 when there is a cycle, unless --allow-cycles. The daemon
depends one way (STYLE.md: connections -> stream registry <- compute;
fan-out and the write queue are what write to connections); the test
suite runs this check.
"""
import argparse
import os
import re
import sys

DEF = re.compile(r"^(?!static\b)[A-Za-z_][\w \*]*?\b([a-z_][a-z0-9_]*)\s*\([^;]*$",
                 re.M)
CALL = re.compile(r"\b([a-z_][a-z0-9_]*)\s*\(")


def strip(text):
    """The C text without comments and string literals."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return re.sub(r'"(\\.|[^"\\])*"', '""', text)


def graph(folder):
    files = sorted(f for f in os.listdir(folder) if f.endswith(".c"))
    src = {f: strip(open(os.path.join(folder, f)).read()) for f in files}
    owner = {}
    for f, text in src.items():
        for m in DEF.finditer(text):
            line = text[m.start():text.find("\n", m.start())]
            if line.startswith((" ", "\t", "}", "#")) or "=" in line:
                continue
            owner.setdefault(m.group(1), f)
    deps = {f: set() for f in files}
    for f, text in src.items():
        for m in CALL.finditer(text):
            g = owner.get(m.group(1))
            if g is not None and g != f:
                deps[f].add(g)
    return deps


def cycles(deps):
    """Every elementary cycle, each once (smallest file first)."""
    out = set()

    def walk(start, node, path):
        for nxt in sorted(deps[node]):
            if nxt == start:
                out.add(tuple(path))
            elif nxt not in path and nxt > start:
                walk(start, nxt, path + [nxt])

    for f in sorted(deps):
        walk(f, f, [f])
    return sorted(out, key=lambda c: (len(c), c))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "daemon"))
    ap.add_argument("--allow-cycles", action="store_true")
    a = ap.parse_args()
    deps = graph(a.dir)
    for f in sorted(deps):
        print("%-10s -> %s" % (f, " ".join(sorted(deps[f])) or "-"))
    found = cycles(deps)
    for c in found:
        print("cycle: " + " -> ".join(c + (c[0],)))
    print("%d cycles" % len(found))
    return 1 if found and not a.allow_cycles else 0


if __name__ == "__main__":
    sys.exit(main())
