#!/usr/bin/env python3
"""Keeps production Rust files and functions small enough to read and review, and
their errors typed.

A production file is any `.rs` file under `crates/*/src` that is not a test module
(`tests.rs`, `*_tests.rs`, or a file under a `tests/` directory). It must stay at or under
MAX_FILE_LINES lines, and every function in it at or under MAX_FN_LINES lines (from the
line holding `fn` to the line holding its closing brace). Exceptions are listed below,
each with the reason it is allowed to be long. Across all production files, at most
MAX_PROSE_ERRORS `Result` types may have an error that carries only prose.

Usage: size_check.py [ROOT]      exit status 1 when a file or function is over its limit,
                                 or the prose errors over their budget
       size_check.py --report    print the largest files and functions, check nothing
"""

import os
import re
import sys

# Lines in one production source file: beyond this a file mixes concerns.
MAX_FILE_LINES = 1200
# Lines in one function: beyond this a function is a sequence of steps that wants names.
MAX_FN_LINES = 150

# `Result` types in production code whose error is only prose (`String`,
# `Box<dyn Error>`, `anyhow::Error`): a caller can match no variant of it and a test
# can only compare text, so a refusal's rule and value get lost. New code uses a
# thiserror enum; this budget only goes down.
MAX_PROSE_ERRORS = 23
PROSE_ERROR_RE = re.compile(
    r"Result<[^;{]*?,\s*(String|Box<dyn [^>]*Error[^>]*>|anyhow::Error)>"
)

# path (relative to the root) -> reason it may exceed MAX_FILE_LINES
FILE_EXCEPTIONS = {}
# "path::fn_name" -> reason it may exceed MAX_FN_LINES
FN_EXCEPTIONS = {}

FN_RE = re.compile(
    r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:default\s+)?(?:const\s+)?(?:async\s+)?"
    r"(?:unsafe\s+)?(?:extern\s+\"[^\"]*\"\s+)?fn\s+([A-Za-z_][A-Za-z0-9_]*)"
)


def strip_code(text):
    """Returns the text with comments, strings and char literals blanked (newlines kept),
    so that braces can be counted."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        nxt = text[i + 1] if i + 1 < n else ""
        if c == "/" and nxt == "/":
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
            continue
        if c == "/" and nxt == "*":
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
            continue
        m = re.match(r'b?r(#*)"', text[i:i + 260]) if c in "rb" else None
        if m and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = '"' + m.group(1)
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(re.sub(r"[^\n]", " ", text[i:j + 1]))
            i = j + 1
            continue
        if c == "'":
            # A char literal ('x', '\n', '\u{1F600}', '{') — not a lifetime ('a).
            m = re.match(r"'(?:\\u\{[0-9A-Fa-f]+\}|\\.|[^\\'])'", text[i:i + 12])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
                continue
        out.append(c)
        i += 1
    return "".join(out)


def functions(code_lines):
    """Yields (name, first line, last line) for every function with a body."""
    for idx, line in enumerate(code_lines):
        m = FN_RE.match(line)
        if not m:
            continue
        depth, started = 0, False
        for j in range(idx, len(code_lines)):
            for ch in code_lines[j]:
                if ch == "{":
                    depth, started = depth + 1, True
                elif ch == "}":
                    depth -= 1
                elif ch == ";" and not started and depth == 0:
                    break  # a declaration without a body (trait item, extern)
            else:
                if started and depth == 0:
                    yield m.group(1), idx + 1, j + 1
                    break
                continue
            break


def production_files(root):
    crates = os.path.join(root, "crates")
    for dirpath, dirnames, filenames in os.walk(crates):
        rel = os.path.relpath(dirpath, root)
        parts = rel.split(os.sep)
        if "target" in parts or "tests" in parts or "benches" in parts:
            continue
        if len(parts) < 3 or parts[2] != "src":
            continue
        for name in sorted(filenames):
            if not name.endswith(".rs"):
                continue
            if name == "tests.rs" or name.endswith("_tests.rs"):
                continue
            yield os.path.join(rel, name)


def main(argv):
    report = "--report" in argv
    args = [a for a in argv if not a.startswith("--")]
    root = args[0] if args else os.path.join(os.path.dirname(__file__), "..")
    over, sizes, fn_sizes, prose = [], [], [], []
    for rel in production_files(root):
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            text = f.read()
        lines = text.count("\n") + (0 if text.endswith("\n") else 1)
        sizes.append((lines, rel))
        if lines > MAX_FILE_LINES and rel not in FILE_EXCEPTIONS:
            over.append(f"{rel}: {lines} lines (limit {MAX_FILE_LINES})")
        code = strip_code(text)
        count = len(PROSE_ERROR_RE.findall(code))
        if count:
            prose.append((count, rel))
        for name, first, last in functions(code.split("\n")):
            length = last - first + 1
            fn_sizes.append((length, f"{rel}:{first} {name}"))
            key = f"{rel}::{name}"
            if length > MAX_FN_LINES and key not in FN_EXCEPTIONS:
                over.append(f"{rel}:{first}: fn {name} is {length} lines (limit {MAX_FN_LINES})")
    if report:
        for lines, rel in sorted(sizes)[-15:]:
            print(f"{lines:6} {rel}")
        for length, where in sorted(fn_sizes)[-25:]:
            print(f"{length:6} fn {where}")
        return 0
    for line in over:
        print(f"size check: {line}")
    if over:
        print(
            f"size check: {len(over)} over the limit: split along the seams the code has "
            "(or list an exception with its reason in .ci/size_check.py)"
        )
    prose_total = sum(count for count, _ in prose)
    if prose_total > MAX_PROSE_ERRORS:
        for count, rel in sorted(prose, key=lambda p: (-p[0], p[1])):
            print(f"size check: {rel}: {count} prose error type(s)")
        print(
            f"size check: {prose_total} Result types with a prose error (String, "
            f"Box<dyn Error>, anyhow::Error), over the budget of {MAX_PROSE_ERRORS}: give "
            "the new ones a thiserror enum naming what failed"
        )
    if over or prose_total > MAX_PROSE_ERRORS:
        return 1
    print(f"size check: {len(sizes)} production files within {MAX_FILE_LINES} lines, "
          f"{len(fn_sizes)} functions within {MAX_FN_LINES}, "
          f"{prose_total} prose error types within {MAX_PROSE_ERRORS}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
