#!/usr/bin/env python3
"""The README's targets, measured: at most 300 lines and 3,000 words, 25 words a sentence on
average, no table cell over 40 words, a first command within the first 30 lines, and every
alert name written out in full: the rules' (alerts/*.rules.yml) and the fast path's (the
"Memlock..." names in src/). Prints the figures; exits 1 when a target is missed.

    python3 scripts/readme_stats.py [README]      (default: README.md beside scripts/)

Words are counted everywhere but in HTML comments (where the README leaves notes for what is to
come), code included. Sentences are those of the prose, paragraphs and list items: a sentence
ends at . ! or ? before a space, or at the end of its paragraph or item; table cells are held to
their own bound instead.
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
MAX_LINES = 300
MAX_WORDS = 3000
MAX_WORDS_PER_SENTENCE = 25
MAX_CELL_WORDS = 40
FIRST_COMMAND_BY = 30
WORD = re.compile(r"[\w`'.,:;()/\[\]<>=+*%#@~-]*\w[\w`'.,:;()/\[\]<>=+*%#@~-]*")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def words(text):
    return WORD.findall(text)


def visible(text):
    """The text's lines outside fenced code, HTML comments blanked, with each line's number."""
    out, fenced = [], False
    text = re.sub(r"<!--.*?-->", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    for number, line in enumerate(text.split("\n"), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, line))
    return out


def first_command_line(text):
    """The line number of the first line inside a shell code fence, or None."""
    fence = None
    for number, line in enumerate(text.split("\n"), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            fence = None if fence is not None else stripped[3:].strip()
            continue
        if fence in ("sh", "bash", "console", "shell") and stripped and not stripped.startswith("#"):
            return number
    return None


def blocks(lines):
    """Prose paragraphs and list items (joined lines) and table cells, as lists of strings."""
    prose, cells, current = [], [], []

    def flush():
        if current:
            prose.append(" ".join(current))
            current.clear()

    for _, line in lines:
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            flush()
        elif stripped.startswith("|"):
            flush()
            if not re.fullmatch(r"\|[\s|:-]*\|", stripped):
                cells.extend(c.strip() for c in stripped.strip("|").split("|") if c.strip())
        elif re.match(r"([-*]|\d+\.)\s", stripped):
            flush()
            current.append(re.sub(r"^([-*]|\d+\.)\s+", "", stripped))
        else:
            current.append(stripped)
    flush()
    return prose, cells


def sentences(text):
    return [s for s in SENTENCE_END.split(text) if words(s)]


def alert_names(root):
    names = set()
    for rules in sorted((root / "alerts").glob("*.rules.yml")):
        names.update(re.findall(r"^\s*- alert:\s*(\w+)", rules.read_text(), re.M))
    for source in sorted((root / "src").rglob("*.rs")):
        names.update(re.findall(r'"(Memlock[A-Z]\w*)"', source.read_text()))
    return names


def measure(readme, root):
    text = readme.read_text()
    lines = visible(text)
    prose, cells = blocks(lines)
    all_sentences = [s for p in prose for s in sentences(p)]
    uncommented = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    total_words = len(words(re.sub(r"^\s*\|[\s|:-]*\|\s*$", "", uncommented, flags=re.M)))
    per_sentence = sum(len(words(s)) for s in all_sentences) / max(len(all_sentences), 1)
    widest = max(cells, key=lambda c: len(words(c)), default="")
    missing = sorted(n for n in alert_names(root) if not re.search(rf"\b{n}\b", text))
    first = first_command_line(text)
    return {
        "lines": (len(text.rstrip("\n").split("\n")), MAX_LINES),
        "words": (total_words, MAX_WORDS),
        "words per sentence": (round(per_sentence, 1), MAX_WORDS_PER_SENTENCE),
        "words in the widest table cell": (len(words(widest)), MAX_CELL_WORDS),
        "line of the first command": (first if first is not None else 10**9, FIRST_COMMAND_BY),
        "alert names missing": (len(missing), 0),
    }, missing, widest


def main():
    readme = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "README.md"
    figures, missing, widest = measure(readme, ROOT)
    failed = False
    for name, (value, limit) in figures.items():
        ok = value <= limit
        failed |= not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {value} (at most {limit})")
    if missing:
        print("     not in the README: " + ", ".join(missing))
    if figures["words in the widest table cell"][0] > MAX_CELL_WORDS:
        print(f"     the widest cell: {widest}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
