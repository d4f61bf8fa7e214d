#!/usr/bin/env python3
"""The module graph's gate: fails on a cycle among sibling modules at any level, and on an import
of the preflight half (src/preflight/) from anywhere but the command line (src/cli.rs), and on
an import of the command line from the library (so no daemon module reaches preflight through it).

    python3 scripts/modcycles.py [SRC_DIR]      (default: src/ beside this script)

An edge A -> B is drawn between siblings: a file of module a::x naming crate::b::y (through
`crate::`, `super::` or a `use crate::{...}` group) gives a -> b; one of a::x naming crate::a::z
gives a::x -> a::z. Test code (an item under #[cfg(test)], a module declared under it), comments
and string literals are not read. Prints each cycle and each forbidden import, exits 1 if any.
"""

import os
import re
import sys

# The preflight half, and the modules allowed to import it: the command line names its flags.
PREFLIGHT = ("preflight",)
MAY_IMPORT_PREFLIGHT = {("cli",)}
# And nothing in the library imports the command line (main.rs does), so that no daemon module
# reaches the preflight half through it: the serve flags live in serve/args.rs.
CLI = ("cli",)


RAW = re.compile(r'b?r(#*)"')
CHAR = re.compile(r"'(\\.[^']*|[^\\'])'")


def strip(text):
    """The text without comments, string and char literals (each replaced by a space)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            i = text.find("\n", i)
            i = n if i < 0 else i
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
            out.append(" ")
        elif (m := RAW.match(text, i)) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = text.find('"' + m.group(1), m.end())
            i = n if end < 0 else end + 1 + len(m.group(1))
            out.append(' "" ')
        elif c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            out.append(' "" ')
        elif c == "'" and (m := CHAR.match(text, i)):
            i = m.end()
            out.append(" ' ' ")
        else:
            out.append(c)
            i += 1
    return "".join(out)


def end_of_item(text, i):
    """Index just past the item starting at i: its `;` or its balanced `{...}` block."""
    depth = 0
    while i < len(text):
        c = text[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0 and c == "}":
                return i + 1
        elif c == ";" and depth == 0:
            return i + 1
        i += 1
    return i


CFG_TEST = re.compile(r"#\[cfg\(test\)\]")
MOD_DECL = re.compile(r"(?:pub(?:\([^)]*\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*;")


def without_tests(text):
    """The text without its #[cfg(test)] items, and the modules those declare (`mod tests;`)."""
    kept, test_mods, pos = [], set(), 0
    for m in CFG_TEST.finditer(text):
        if m.start() < pos:
            continue
        kept.append(text[pos : m.start()])
        end = end_of_item(text, m.end())
        decl = MOD_DECL.search(text, m.end(), end)
        if decl and not text[m.end() : decl.start()].strip().strip("#[]() a-z_,=\"").strip():
            test_mods.add(decl.group(1))
        pos = end
    kept.append(text[pos:])
    return "".join(kept), test_mods


IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def path_trees(text, start):
    """Expands the use tree at text[start:] (`a::b`, `a::{b, c::{d}}`) into lists of segments."""
    paths, i = [], start

    def tree(i, prefix):
        m = re.compile(r"\s*(" + IDENT + r"|\{)").match(text, i)
        if not m:
            paths.append(prefix)
            return i
        if m.group(1) == "{":
            i = m.end()
            while True:
                i = tree(i, prefix)
                m = re.compile(r"\s*([,}])").match(text, i)
                if not m:
                    return i
                i = m.end()
                if m.group(1) == "}":
                    return i
                if re.compile(r"\s*\}").match(text, i):
                    return re.compile(r"\s*\}").match(text, i).end()
        seg, i = m.group(1), m.end()
        m = re.compile(r"\s*::\s*").match(text, i)
        if m and seg not in ("self",):
            return tree(m.end(), prefix + [seg])
        paths.append(prefix + ([seg] if seg != "self" else []))
        return i

    tree(i, [])
    return paths


REFERENCE = re.compile(r"(?<![A-Za-z0-9_$])(crate|(?:super\s*::\s*)*super)\s*::")


def module_of(root, path):
    rel = os.path.relpath(path, root)[:-3].split(os.sep)
    if rel[-1] == "mod":
        rel = rel[:-1]
    if rel in (["lib"], ["main"]):
        return []
    return rel


def graph(root):
    """Edges between siblings, and every (importer, imported path) pair for the import rule."""
    files, test_only = {}, set()
    for d, _, names in os.walk(root):
        for name in names:
            if name.endswith(".rs"):
                path = os.path.join(d, name)
                text, test_mods = without_tests(strip(open(path, encoding="utf-8", errors="replace").read()))
                module = tuple(module_of(root, path))
                files[module] = text
                test_only |= {module + (t,) for t in test_mods}
    edges, imports = {}, []
    for module, text in files.items():
        if any(module[: len(t)] == t for t in test_only):
            continue
        for m in REFERENCE.finditer(text):
            if m.group(1) == "crate":
                base = []
            else:
                ups = m.group(1).count("super")
                # Relative to the file's module: in a/b.rs (a::b) and in a/b/mod.rs alike, super is a.
                base = list(module[: len(module) - ups])
            for tail in path_trees(text, m.end()):
                target = tuple(base + [s for s in tail if s != "self"])
                if not target:
                    continue
                imports.append((module, target))
                k = 0
                while k < min(len(module), len(target)) and module[k] == target[k]:
                    k += 1
                if k >= len(module) or k >= len(target):
                    continue
                edges.setdefault(module[: k + 1], set()).add(target[: k + 1])
    return edges, imports


def cycles(edges):
    """Strongly connected components of more than one module (Tarjan)."""
    nodes = sorted(set(edges) | {n for targets in edges.values() for n in targets})
    index, low, stack, on, found = {}, {}, [], set(), []
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in nodes:
        if v not in index:
            visit(v)
    return found


def forbidden(imports):
    """Imports of the preflight half from outside it by a module not allowed to."""
    bad = set()
    for module, target in imports:
        inside = module[: len(PREFLIGHT)] == PREFLIGHT
        if target[: len(PREFLIGHT)] == PREFLIGHT and not inside and module and module not in MAY_IMPORT_PREFLIGHT:
            bad.add((module, target))
        if target[: len(CLI)] == CLI and module and module[: len(CLI)] != CLI:
            bad.add((module, target))
    return sorted(bad)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "src")
    edges, imports = graph(root)
    failed = False
    for component in cycles(edges):
        print("module cycle: " + " <-> ".join("::".join(m) for m in component))
        failed = True
    for module, target in forbidden(imports):
        rule = "only cli may import the preflight half"
        if target[: len(CLI)] == CLI:
            rule = "nothing in the library may import cli"
        print(f"{'::'.join(module)} imports crate::{'::'.join(target)}: {rule}")
        failed = True
    if not failed:
        count = len(set(edges) | {n for targets in edges.values() for n in targets})
        print(
            f"module graph: no cycle among {count} modules, the preflight half imported only by cli, cli by nothing"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
