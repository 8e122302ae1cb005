#!/usr/bin/env python3
"""Function lengths and assertion counts in Rust sources (TIGER_STYLE's 70-line rule, measured).

Usage: fn-lengths.py [--max N] [--top K] [--asserts] [--exclude PATH]... PATH...

Each PATH is a .rs file or a directory searched for them. --exclude PATH (repeatable) leaves out
that file, or every file under that directory, as it would be named by the walk (so spell it the
way PATH is spelled, e.g. crates/cli/src/sim/nvfat under crates/cli/src). A function's length is its physical
lines, from the line holding `fn` to the line holding its closing brace, as TigerBeetle counts
them (comments and blank lines inside count too). Functions inside `#[cfg(test)]` modules and
files under tests/ are reported apart: the limit is for the code that ships.

With --max N, exits 1 naming every shipped function longer than N lines. With --asserts, also
prints the number of assert!/debug_assert! family calls per shipped function.
"""
import os
import re
import sys

FN_RE = re.compile(r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)")
ASSERT_RE = re.compile(r"\b(debug_)?assert(_eq|_ne)?!")


def blank_literals(text):
    """The text with comments, strings and char literals replaced by spaces (newlines kept), so
    that braces and `fn` inside them do not count."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 260]) and not re.match(r"\w", text[i - 1:i] or " "):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            j = n if end < 0 else end + 1 + len(hashes)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(re.sub(r"[^\n]", " ", text[i:j + 1]))
            i = j + 1
        elif c == "'":
            # A char literal ('x', '\n', '\u{..}') or a lifetime ('a): only the former is blanked.
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", text[i:i + 12])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def test_ranges(code):
    """Line ranges (1-based, inclusive) of `#[cfg(test)] mod ... { }` blocks."""
    ranges = []
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{", code):
        open_at = m.end() - 1
        close_at = match_brace(code, open_at)
        ranges.append((code.count("\n", 0, m.start()) + 1, code.count("\n", 0, close_at) + 1))
    return ranges


def match_brace(code, open_at):
    depth = 0
    for j in range(open_at, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(code) - 1


def functions(path):
    """(name, first line, lines, asserts, in_test) for every fn with a body in the file."""
    text = open(path, encoding="utf-8").read()
    code = blank_literals(text)
    tests = test_ranges(code)
    in_tests_dir = f"{os.sep}tests{os.sep}" in path or "/benches/" in path
    found = []
    for m in FN_RE.finditer(code):
        # The body starts at the first `{` after the signature, unless a `;` ends it first
        # (a trait method without a default body).
        brace, semi = code.find("{", m.end()), code.find(";", m.end())
        if brace < 0 or (0 <= semi < brace):
            continue
        close = match_brace(code, brace)
        first = code.count("\n", 0, m.start()) + 1
        last = code.count("\n", 0, close) + 1
        asserts = len(ASSERT_RE.findall(code[brace:close]))
        in_test = in_tests_dir or any(a <= first <= b for a, b in tests)
        found.append((m.group(1), first, last - first + 1, asserts, in_test))
    return found


def excluded(path, excludes):
    """Whether path is one of the excluded files or lies under an excluded directory."""
    path = os.path.normpath(path)
    for e in excludes:
        e = os.path.normpath(e)
        if path == e or path.startswith(e + os.sep):
            return True
    return False


def rust_files(paths, excludes=()):
    for f in _rust_files(paths):
        if not excluded(f, excludes):
            yield f


def _rust_files(paths):
    for p in paths:
        if os.path.isdir(p):
            for root, dirs, files in os.walk(p):
                # Cargo's build directory (marked by CACHEDIR.TAG), not source folders that
                # happen to be named target (crates/crashtest/src/target).
                dirs[:] = [d for d in dirs
                           if not os.path.exists(os.path.join(root, d, "CACHEDIR.TAG"))]
                for f in sorted(files):
                    if f.endswith(".rs"):
                        yield os.path.join(root, f)
        else:
            yield p


def main(argv):
    limit, top, show_asserts, paths, excludes = None, 10, False, [], []
    it = iter(argv)
    for a in it:
        if a == "--max":
            limit = int(next(it))
        elif a == "--top":
            top = int(next(it))
        elif a == "--asserts":
            show_asserts = True
        elif a == "--exclude":
            excludes.append(next(it))
        else:
            paths.append(a)
    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    shipped = []
    for f in rust_files(paths, excludes):
        shipped += [(f, *fn) for fn in functions(f) if not fn[4]]
    shipped.sort(key=lambda r: -r[3])
    asserts = sum(r[4] for r in shipped)
    print(f"{len(shipped)} functions, longest {shipped[0][3] if shipped else 0} lines, "
          f"{asserts} asserts ({asserts / max(len(shipped), 1):.2f} per function)")
    for f, name, first, lines, n_asserts, _ in shipped[:top]:
        extra = f"  {n_asserts} asserts" if show_asserts else ""
        print(f"  {lines:4d}  {f}:{first}  {name}{extra}")
    if limit is None:
        return 0
    over = [r for r in shipped if r[3] > limit]
    for f, name, first, lines, _, _ in over:
        print(f"function length: {f}:{first} {name} is {lines} lines (limit {limit})", file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
