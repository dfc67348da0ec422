#!/usr/bin/env python3
"""check_links.py SOURCE_ROOT: every relative link in the repository's Markdown files resolves.

A link [text](target) whose target is not a URL (http:, https:, mailto:) must name a file or
folder that exists, relative to the Markdown file; with #anchor (or a bare #anchor, in the same
file) the target must be a Markdown file with a heading whose GitHub anchor is that (lowercase,
punctuation dropped, spaces as hyphens, -1, -2, ... for repeats). Links inside fenced code blocks
and inline code are not links. Besides, README.md stays short: at most 350 lines (the manual is in
docs/). Prints every broken link with its file and line, and exits 1 if there is one.
"""
import os
import re
import sys

SKIP_DIRS = {".git", "subprojects"}
LINK = re.compile(r"\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
README_MAX_LINES = 350


def markdown_files(root):
    for dirpath, dirs, files in os.walk(root):
        # Build folders at the top (build/, build-san/, ...) hold copies and generated files.
        top = os.path.samefile(dirpath, root)
        dirs[:] = sorted(d for d in dirs
                         if d not in SKIP_DIRS and not (top and d.startswith("build")))
        for f in sorted(files):
            if f.endswith(".md"):
                yield os.path.join(dirpath, f)


def slug(heading):
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"`([^`]*)`", r"\1", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def lines_outside_code(path):
    """(line number, text) of the lines outside fenced code blocks, as written."""
    fence = None
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        m = re.match(r"\s*(```+|~~~+)", line)
        if m:
            if fence is None:
                fence = m.group(1)[0] * 3
            elif line.strip().startswith(fence):
                fence = None
            continue
        if fence is None:
            yield n, line


def anchors(path, cache={}):
    """The anchors of path's headings (outside fenced code; code spans count as their text)."""
    if path not in cache:
        seen, out = {}, set()
        for _, line in lines_outside_code(path):
            h = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
            if not h:
                continue
            s = slug(h.group(1))
            k = seen.get(s, 0)
            out.add(s if k == 0 else "%s-%d" % (s, k))
            seen[s] = k + 1
        cache[path] = out
    return cache[path]


def main():
    root = sys.argv[1]
    bad, checked = [], 0
    for path in markdown_files(root):
        rel = os.path.relpath(path, root)
        for n, line in lines_outside_code(path):
            # Inline code is not a link.
            for m in LINK.finditer(re.sub(r"`[^`]*`", "``", line)):
                target = m.group(1)
                if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):
                    continue
                checked += 1
                file_part, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) \
                    if file_part else path
                where = "%s:%d: %s" % (rel, n, target)
                if not os.path.exists(dest):
                    bad.append("%s: no such file or folder" % where)
                elif anchor:
                    if not dest.endswith(".md") or os.path.isdir(dest):
                        bad.append("%s: an anchor needs a Markdown file" % where)
                    elif anchor not in anchors(dest):
                        bad.append("%s: no heading with anchor #%s in %s"
                                   % (where, anchor, os.path.relpath(dest, root)))
    readme = os.path.join(root, "README.md")
    if os.path.exists(readme):
        count = sum(1 for _ in open(readme, encoding="utf-8"))
        if count > README_MAX_LINES:
            bad.append("README.md: %d lines, more than %d: move detail into docs/"
                       % (count, README_MAX_LINES))
    for line in bad:
        print("FAIL:", line)
    print("%d relative links checked, %d problems" % (checked, len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
