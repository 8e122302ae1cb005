#!/usr/bin/env python3
"""Module import circles inside each crate: exits 1 naming every cycle, with a file:line that
makes each of its edges.

A module is a file under src/ (foo.rs or foo/mod.rs is `foo`). A path in code (`crate::a::b`,
`super::b`, `self::b`, and `use` lists of them) is resolved to the module it names; the edge
goes between the two siblings under the deepest module that holds both ends, so that a child
using its parent's items (or a parent dispatching to its children) is a tree edge, not a
cycle, and two siblings that use each other are one. Comments (doc links included) are
ignored. Run by scripts/check-layers.sh.

usage: module-circles.py SRC_DIR...   (each a crate's src directory)
"""
import os
import re
import sys

PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
GROUP = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{([^}]*)\}")


def modules(src):
    """Every module of a crate: its path (a tuple) for each file."""
    out = {}
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(root, f), src)[:-3].split(os.sep)
            if rel[-1] in ("mod", "lib", "main"):
                rel = rel[:-1]
            out[os.path.join(root, f)] = tuple(rel)
    return out


def code_lines(path):
    """(line number, text) with comments removed (line comments only: enough for Rust here)."""
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        text = re.sub(r"//.*", "", line)
        text = re.sub(r'"(\\.|[^"\\])*"', '""', text)
        if text.strip():
            yield n, text


def resolve(base, names, known):
    """The module `base::names` names: the longest known prefix of it, or None."""
    full = list(base) + names
    for k in range(len(full), 0, -1):
        if tuple(full[:k]) in known:
            return tuple(full[:k])
    return None


def base_of(me, head, names):
    """Where a path starting with `head` is resolved from, and its names past any `super`s.
    A file's module is `me`; `self` is `me`, `super` its parent, `crate` the root."""
    if head == "crate":
        return (), names
    base = me if head == "self" else me[:-1]
    while names and names[0] == "super":
        base, names = base[:-1], names[1:]
    return base, names


def edges(src):
    mods = modules(src)
    known = set(mods.values())
    found = {}
    for path, me in mods.items():
        for n, text in code_lines(path):
            targets = []
            for m in GROUP.finditer(text):
                stem = [s for s in m.group(2).split("::") if s]
                for item in m.group(3).split(","):
                    first = item.strip().split("::")[0].split(" ")[0]
                    if first and first != "self":
                        targets.append((m.group(1), stem + [first]))
                    elif first == "self":
                        targets.append((m.group(1), stem))
            for m in PATH.finditer(text):
                targets.append((m.group(1), [s for s in m.group(2).split("::") if s]))
            for head, names in targets:
                base, names = base_of(me, head, names)
                to = resolve(base, names, known)
                if to is None or to == me:
                    continue
                k = 0
                while k < min(len(me), len(to)) and me[k] == to[k]:
                    k += 1
                if k == len(me) or k == len(to):
                    continue  # an ancestor and its descendant: a tree edge
                edge = ("/".join(me[: k + 1]), "/".join(to[: k + 1]))
                found.setdefault(edge, f"{path}:{n}")
    return found


def cycles(found):
    """The strongly connected components of more than one module (Tarjan)."""
    graph = {}
    for a, b in found:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
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

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    bad = 0
    for src in sys.argv[1:]:
        found = edges(src)
        for comp in cycles(found):
            bad += 1
            members = set(comp)
            print(f"module circle in {src}: {' <-> '.join(comp)}", file=sys.stderr)
            for (a, b), where in sorted(found.items()):
                if a in members and b in members:
                    print(f"  {a} -> {b}: {where}", file=sys.stderr)
    print(f"module circles: {bad} in {len(sys.argv) - 1} crates")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
