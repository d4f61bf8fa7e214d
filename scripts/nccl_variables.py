#!/usr/bin/env python3
"""Generates crates/preflight/src/nccl/variables.rs, the NCCL environment variables `check` knows, from NCCL's source.

    /usr/bin/python3 scripts/nccl_variables.py --git-dir /path/to/nccl.git --commit 5067397c

reads the tree of that commit (a bare mirror is enough: nothing is checked out or built) and
writes the list to stdout, or to --out FILE. Every way NCCL reads a variable at that commit is
recognised, with the parser NCCL applies to it:

- NCCL_PARAM(Name, "KEY", default) (src/include/param.h): NCCL_KEY, read by ncclLoadParam
  (src/misc/param.cc) with strtoll(value, NULL, 0); an empty value or one out of range gives the
  default, anything else the number its leading characters spell.
- DEFINE_NCCL_PARAM(name, type, KEY, default, flags, parser, desc) (src/include/param/param.h):
  the typed parameters; the default parser of an integer type is strtoll/strtoull base 10 over
  the whole value, of bool 1/T/TRUE/0/F/FALSE, of const char* the string; ncclParamOneOf lists
  the names it accepts (case-insensitive, trimmed). A value the parser refuses gives the default.
- ncclGetEnv("NCCL_X"), getenv("NCCL_X"), std::getenv("NCCL_X"): strings read as they are.
- ncclGetLevel(&level, "NCCL_A", "NCCL_B") (src/graph/paths.cc): A is a disable switch
  (strtol base 0, 1 disables), B a path level name or an old-style number.

Release tags (v2.X.Y-1) that are ancestors of the commit are scanned the same way: a name read
in an earlier release and not at this commit is listed as removed, with the last release that
read it. Standard library only; run with /usr/bin/python3.
"""

import argparse
import re
from pathlib import Path
import subprocess
import sys

SOURCE_SUFFIXES = (".cc", ".h", ".cu", ".cuh", ".c", ".cpp", ".hpp")
# NCCL's own plugins and its device code generators live under src/; examples under plugins/ are
# separate libraries and are not NCCL.
SOURCE_ROOT = "src/"
ENV_GUIDE = "docs/userguide/source/env.rst"


def git(git_dir, *args):
    return subprocess.run(["git", "-C", git_dir, *args], check=True, capture_output=True).stdout


def source_files(git_dir, rev):
    names = git(git_dir, "ls-tree", "-r", "--name-only", rev, "--", SOURCE_ROOT).decode().splitlines()
    return [n for n in names if n.endswith(SOURCE_SUFFIXES)]


def read_blobs(git_dir, rev, paths):
    """Reads many blobs with one `git cat-file --batch`."""
    request = "".join(f"{rev}:{p}\n" for p in paths).encode()
    out = subprocess.run(
        ["git", "-C", git_dir, "cat-file", "--batch"], input=request, check=True, capture_output=True
    ).stdout
    blobs, pos = {}, 0
    for path in paths:
        header_end = out.index(b"\n", pos)
        header = out[pos:header_end].split()
        if header[-1] == b"missing":
            pos = header_end + 1
            continue
        size = int(header[2])
        blobs[path] = out[header_end + 1 : header_end + 1 + size].decode("utf-8", "replace")
        pos = header_end + 1 + size + 1
    return blobs


def strip_comments(text):
    """C and C++ comments become spaces (newlines kept, so line numbers stay); strings stay."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == '"' or c == "'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join("\n" if ch == "\n" else " " for ch in text[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def call_arguments(text, open_paren):
    """The top-level comma-separated arguments of the call whose '(' is at open_paren, and the
    index after its ')'."""
    args, depth, start, i, n = [], 0, open_paren + 1, open_paren, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            i = j
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                args.append(text[start:i].strip())
                return args, i + 1
        elif c == "," and depth == 1:
            args.append(text[start:i].strip())
            start = i + 1
        i += 1
    return None, n


def line_of(text, index):
    return text.count("\n", 0, index) + 1


INTEGER_TYPES = {"int8_t", "int16_t", "int32_t", "int64_t", "int", "long", "uint8_t", "uint16_t", "uint32_t",
                 "uint64_t", "unsigned", "size_t"}


def typed_parser(ctype, parser):
    """How a DEFINE_NCCL_PARAM value is parsed: (kind, options)."""
    ctype = " ".join(ctype.split())
    if parser == "NCCL_PARAM_DEFAULT":
        if ctype in INTEGER_TYPES:
            return ("decimal_unsigned" if ctype.startswith(("uint", "unsigned", "size_t")) else "decimal"), []
        if ctype == "bool":
            return "bool", []
        if ctype in ("const char*", "const char *"):
            return "string", []
        return "custom", []
    if parser.startswith("ncclParamOneOf"):
        return "one_of", re.findall(r'makeOption\(\s*"([^"]*)"', parser)
    if parser.startswith("ncclParamBounded"):
        return "custom", []
    return "custom", []


def extract(files):
    """{name: (kind, default, options, "path:line")} for one tree; the first definition wins."""
    found = {}

    def add(name, kind, default, options, where):
        found.setdefault(name, (kind, default, options, where))

    for path, raw in sorted(files.items()):
        text = strip_comments(raw)
        for m in re.finditer(r"(?<![\w#])NCCL_PARAM\s*\(", text):
            args, _ = call_arguments(text, m.end() - 1)
            if not args or len(args) != 3 or not re.fullmatch(r'"\w+"', args[1]):
                continue
            add("NCCL_" + args[1].strip('"'), "strtoll", " ".join(args[2].split()), [],
                f"{path}:{line_of(text, m.start())}")
        for m in re.finditer(r"(?<![\w#])DEFINE_NCCL_PARAM\s*\(", text):
            args, _ = call_arguments(text, m.end() - 1)
            if not args or len(args) != 7 or not re.fullmatch(r"NCCL_\w+", args[2]):
                continue
            kind, options = typed_parser(args[1], " ".join(args[5].split()))
            add(args[2], kind, " ".join(args[3].split()), options, f"{path}:{line_of(text, m.start())}")
        for m in re.finditer(r'(?<![\w.])(?:ncclGetEnv|std::getenv|getenv)\s*\(\s*"(NCCL_\w+)"\s*\)', text):
            add(m.group(1), "string", "", [], f"{path}:{line_of(text, m.start())}")
        for m in re.finditer(r"(?<![\w.])ncclGetLevel\s*\(", text):
            args, _ = call_arguments(text, m.end() - 1)
            if not args or len(args) != 3:
                continue
            where = f"{path}:{line_of(text, m.start())}"
            if re.fullmatch(r'"NCCL_\w+"', args[1]):
                add(args[1].strip('"'), "disable_switch", "", [], where)
            if re.fullmatch(r'"NCCL_\w+"', args[2]):
                add(args[2].strip('"'), "path_level", "", [], where)
    return found


def names_in(git_dir, rev):
    """The names a release reads, by the same rules (older trees: cheap regexes over git grep)."""
    patterns = [
        r'NCCL_PARAM\(\s*\w+\s*,\s*"(\w+)"',
        r"DEFINE_NCCL_PARAM\([^,]+,[^,]+,\s*(NCCL_\w+)",
        r'(?:ncclGetEnv|getenv)\(\s*"(NCCL_\w+)"\s*\)',
        r'ncclGetLevel\([^)]*"(NCCL_\w+)"',
    ]
    out = subprocess.run(
        ["git", "-C", git_dir, "grep", "-h", "-E", "-e", "NCCL_PARAM\\(|ncclGetEnv\\(|getenv\\(|ncclGetLevel\\(",
         rev, "--", SOURCE_ROOT],
        capture_output=True,
    ).stdout.decode("utf-8", "replace")
    names = set()
    for line in out.splitlines():
        if line.lstrip().startswith(("//", "#define")):
            continue
        for i, pattern in enumerate(patterns):
            for name in re.findall(pattern, line):
                names.add("NCCL_" + name if i == 0 else name)
    names.discard("NCCL_")
    return names


def documented(git_dir, commit):
    """Section titles of NCCL's environment variable guide (docs/userguide/source/env.rst)."""
    try:
        text = git(git_dir, "show", f"{commit}:{ENV_GUIDE}").decode("utf-8", "replace")
    except subprocess.CalledProcessError:
        return set()
    lines = text.splitlines()
    return {
        lines[i].strip()
        for i in range(len(lines) - 1)
        if re.fullmatch(r"NCCL_\w+", lines[i].strip()) and re.fullmatch(r"-{3,}", lines[i + 1].strip())
    }


def release_tags(git_dir, commit):
    tags = [t for t in git(git_dir, "tag").decode().split() if re.fullmatch(r"v2\.\d+\.\d+-\d+", t)]
    ancestors = []
    for tag in tags:
        ok = subprocess.run(["git", "-C", git_dir, "merge-base", "--is-ancestor", tag, commit]).returncode == 0
        if ok:
            ancestors.append(tag)
    return sorted(ancestors, key=lambda t: [int(x) for x in re.findall(r"\d+", t)])


def rust_str(text):
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


KIND_VARIANTS = {
    "strtoll": "Parse::Strtoll",
    "decimal": "Parse::Decimal",
    "decimal_unsigned": "Parse::DecimalUnsigned",
    "bool": "Parse::Bool",
    "string": "Parse::String",
    "disable_switch": "Parse::DisableSwitch",
    "path_level": "Parse::PathLevel",
    "custom": "Parse::Custom",
}


def render(commit, version, found, removed):
    lines = [
        "// @generated by scripts/nccl_variables.py: do not edit by hand.",
        f"// From NVIDIA/nccl {commit} ({version}).",
        "//! Every environment variable NCCL reads at the commit below, with the parser it applies,",
        "//! and the ones earlier releases read that this one no longer does.",
        "",
        "use super::param::{Parse, Removed, Variable};",
        "",
        f"/// The NVIDIA/nccl commit the list was generated from.",
        f"pub const NCCL_COMMIT: &str = {rust_str(commit)};",
        f"/// NCCL's version at that commit (makefiles/version.mk).",
        f"pub const NCCL_VERSION: &str = {rust_str(version)};",
        "",
        "/// Sorted by name.",
        "pub static VARIABLES: &[Variable] = &[",
    ]
    for name in sorted(found):
        kind, default, options, where = found[name]
        if kind == "one_of":
            parse = "Parse::OneOf(&[" + ", ".join(rust_str(o) for o in options) + "])"
        else:
            parse = KIND_VARIANTS[kind]
        lines.append(
            f"    Variable {{ name: {rust_str(name)}, parse: {parse}, default: {rust_str(default)}, "
            f"defined_at: {rust_str(where)} }},"
        )
    lines += ["];", "",
              "/// Read by an earlier release (the last one named) or only documented "
              "(docs/userguide/source/env.rst, no",
              "/// release named), and not read at this commit: setting them does nothing. Sorted by name.",
              "pub static REMOVED: &[Removed] = &["]
    for name in sorted(removed):
        last = removed[name]
        lines.append(f"    Removed {{ name: {rust_str(name)}, last_release: {rust_str(last)} }},")
    lines += ["];", ""]
    return "\n".join(lines)


def rustfmt(text):
    """The file as `cargo fmt` leaves it (the repository's rustfmt.toml), so it stays unchanged."""
    config = Path(__file__).resolve().parent.parent / "rustfmt.toml"
    return subprocess.run(
        ["rustfmt", "--edition", "2021", "--config-path", str(config), "--emit", "stdout"],
        input=text.encode(), check=True, capture_output=True,
    ).stdout.decode()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--git-dir", required=True, help="an NVIDIA/nccl clone or bare mirror")
    ap.add_argument("--commit", required=True)
    ap.add_argument("--out", help="write here instead of stdout")
    args = ap.parse_args()
    commit = git(args.git_dir, "rev-parse", "--verify", args.commit + "^{commit}").decode().strip()
    version_mk = git(args.git_dir, "show", f"{commit}:makefiles/version.mk").decode()
    parts = dict(re.findall(r"^NCCL_(MAJOR|MINOR|PATCH)\s*:=\s*(\d+)", version_mk, re.M))
    version = f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}"
    files = read_blobs(args.git_dir, commit, source_files(args.git_dir, commit))
    found = extract(files)
    if "NCCL_CONF_FILE" not in found:
        sys.exit("NCCL_CONF_FILE not found: the extraction rules no longer match NCCL's source")
    removed = {}
    for tag in release_tags(args.git_dir, commit):
        for name in names_in(args.git_dir, tag):
            if name not in found:
                removed[name] = tag
    # Documented (often "deprecated in 2.x") but read by no release in the history: the guide
    # still lists them, NCCL ignores them. An empty last release says so.
    for name in documented(args.git_dir, commit):
        if name not in found:
            removed.setdefault(name, "")
    text = rustfmt(render(commit, version, found, removed))
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    print(f"{len(found)} variables, {len(removed)} removed since an earlier release", file=sys.stderr)


if __name__ == "__main__":
    main()
