#!/usr/bin/env python3
"""check_layering.py SOURCE_ROOT: the include graph follows the layering of docs/design.md.

Folders in the chain kernels -> codelets -> tile -> optim -> nn -> parallel ->
train -> plan -> cli include only folders before them, plus runtime, io and data,
which sit below whoever needs them (runtime may use kernels: it makes BLIS
single-threaded; io may use runtime: it writes what runtime collects). Public
headers (tessera/...) and the shared one-file helpers in src/ (rng.h, try.h)
are fine anywhere. Besides:
- codelets/ reaches runtime/ only through the task options type;
- only codelets/, tile/, parallel/ and runtime/ include StarPU;
- no two folders include each other.
Prints every violation with the file and line, and exits 1 if there is one.
"""
import os
import re
import sys

CHAIN = ["kernels", "codelets", "tile", "optim", "nn", "parallel", "train", "plan", "cli"]
BELOW = {"runtime": {"kernels", "runtime"}, "io": {"runtime", "io"}, "data": {"data"}}
STARPU_OK = {"codelets", "tile", "parallel", "runtime"}


def folder_of(path):
    """The layer a source file belongs to, or None (tests, public headers)."""
    parts = path.split(os.sep)
    if parts[0] == "codelets":
        return "codelets"
    if parts[0] == "src" and len(parts) > 2:
        return parts[1]
    return None


def included_folder(name):
    """The layer an include names, or None when it names no layer."""
    if name == "codelets.h":
        return "codelets"
    first = name.split("/")[0]
    return first if first in CHAIN or first in BELOW else None


def allowed(src, dst):
    if src == dst:
        return True
    if src in BELOW:
        return dst in BELOW[src]
    if dst in BELOW:
        return True
    return CHAIN.index(dst) < CHAIN.index(src)


def main():
    root = sys.argv[1]
    bad, edges = [], {}
    for top in ("src", "codelets"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if not f.endswith((".c", ".h")):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, f), root)
                src = folder_of(rel)
                if src is None:
                    continue
                for n, line in enumerate(open(os.path.join(root, rel)), 1):
                    m = re.match(r'\s*#\s*include\s*[<"]([^>"]+)[>"]', line)
                    if not m:
                        continue
                    name = m.group(1)
                    where = "%s:%d: #include %s" % (rel, n, name)
                    if name.startswith("starpu") and src not in STARPU_OK:
                        bad.append("%s: only %s include StarPU" % (where, ", ".join(sorted(STARPU_OK))))
                    dst = included_folder(name)
                    if dst is None or dst == src:
                        continue
                    edges.setdefault((src, dst), where)
                    if src == "codelets" and dst == "runtime" and name != "runtime/task_opts.h":
                        bad.append("%s: codelets/ reaches runtime/ only through the task options" % where)
                    elif not allowed(src, dst):
                        bad.append("%s: %s/ may not include %s/" % (where, src, dst))
    for (a, b), where in sorted(edges.items()):
        if (b, a) in edges and a < b:
            bad.append("%s/ and %s/ include each other: %s; %s" % (a, b, where, edges[(b, a)]))
    for line in bad:
        print("FAIL:", line)
    print("%d include edges between folders checked, %d violations" % (len(edges), len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
