#!/usr/bin/env python3
"""Lists (or, with --apply, narrows to pub(crate)) the `pub` items and fields of each library
crate that no other crate names.

    python3 scripts/pub_audit.py .            # the candidates, one per line, and a count
    python3 scripts/pub_audit.py . --apply    # then `cargo build --workspace --all-targets`

An item counts as used elsewhere when its identifier appears as a word in any .rs file outside
its crate (other crates, src/, tests/, benches/, fuzz/): a same-named thing elsewhere keeps it
pub. The compiler has the last word: a type another crate reaches through a value without naming
it (a return type, a field in a struct literal) is listed here but must stay pub.
"""
import os, re, sys

ROOT = sys.argv[1]
APPLY = "--apply" in sys.argv
CRATES = ["kernel", "core", "http", "preflight"]
ITEM = re.compile(
    r"^(\s*)pub (?:(?:async|unsafe|const) )*(fn|struct|enum|const|static|trait|type)\s+([A-Za-z_][A-Za-z0-9_]*)"
)
FIELD = re.compile(r"^(\s+)pub ([a-z_][a-z0-9_]*)\s*:")

def rs_files(base):
    for d, _, fs in os.walk(base):
        if "/target" in d or "/.git" in d:
            continue
        for f in fs:
            if f.endswith(".rs"):
                yield os.path.join(d, f)

all_files = list(rs_files(ROOT))
texts = {f: open(f, encoding="utf-8").read() for f in all_files}
words_by_file = {f: set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", t)) for f, t in texts.items()}

total = narrowed = 0
for crate in CRATES:
    cdir = os.path.join(ROOT, "crates", crate) + "/"
    def inside(f):
        # A crate's own fuzz crate (crates/<x>/fuzz) is another crate.
        return f.startswith(cdir) and not f.startswith(cdir + "fuzz/")
    outside = set()
    for f, w in words_by_file.items():
        if not inside(f):
            outside |= w
    for f in sorted(x for x in all_files if inside(x) and not x.endswith("/policy.rs")):
        lines = texts[f].split("\n")
        changed = False
        for i, line in enumerate(lines):
            m = ITEM.match(line) or FIELD.match(line)
            if not m:
                continue
            name = m.group(m.lastindex)
            total += 1
            if name in outside:
                continue
            narrowed += 1
            if APPLY:
                lines[i] = line.replace("pub ", "pub(crate) ", 1)
                changed = True
            else:
                print(f"{os.path.relpath(f, ROOT)}:{i+1}: {name}")
        if changed:
            open(f, "w", encoding="utf-8").write("\n".join(lines))
print(f"{narrowed} of {total} pub items and fields are named by no other crate")
