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
- no two folders include each other;
- a kind is tested only in its own file: for each prefix in KINDS, the file of the folder whose
  descriptor (a top-level `const TYPE name = {...}` of the table's type) names a value
  (`.field = TSR_X`) owns it, and any other file of src/ or codelets/ that tests it
  (`== TSR_X`, `!= TSR_X`, `case TSR_X:`) fails; constructing a value (`.kind = TSR_X`,
  `f(TSR_X)`) is not testing it. A prefix whose folder has no descriptor yet is skipped, and
  said so. Kinds known by name (NAMED: optimizers) likewise: a descriptor's `.name = "x"` owns
  "x", and `strcmp(.., "x")` in another file fails. tests/ and benchmarks/ are not checked.
- the averaging engine's files (src/parallel/*.c) call each other one way: a file that names a
  function another file defines depends on it, and no circle of such dependencies exists (the
  layers of docs/design.md, "Synchronization"); its lowest layers (LOW_LAYERS: who meets, where
  chunks live) include neither StarPU nor tiles, the net or the runtime; no file of
  src/parallel/ is over PARALLEL_MAX_LINES lines; a policy's file (sync_<name>.c) includes none
  of the headers that show the replicas' record (RECORD): it reaches the replicas through the
  engine's calls and keeps what only it needs in its own state (STYLE.md, 15); the trainer
  (src/train/) reaches the replicas through at most TRAINER_CALLS functions of
  parallel/replicas.h;
- no file of src/ or codelets/ is over SRC_MAX_LINES lines (several concerns, several files).
Prints every violation with the file and line, and exits 1 if there is one. Before the real
tree, the kind and circle checks run on a small tree of their own with planted violations and
fail if they do not catch them.
"""
import os
import re
import sys
import tempfile

CHAIN = ["kernels", "codelets", "tile", "optim", "nn", "parallel", "train", "plan", "cli"]
BELOW = {"runtime": {"kernels", "runtime"}, "io": {"runtime", "io"}, "data": {"data"}}
STARPU_OK = {"codelets", "tile", "parallel", "runtime"}
# Kinds extended by registry (STYLE.md, 12): the prefix of their enum values, the folder of their
# descriptors and a pattern of the descriptors' type. A new registry is one line here.
KINDS = [
    ("TSR_LAYER_", "src/nn", r"tsr_layer_type_t"),
    ("TSR_SYNC_", "src/parallel", r"tsr_\w+_t"),
]
# Kinds known by name, not by an enum value: the folder of their descriptors and the descriptors'
# type; a descriptor's `.name = "x"` owns the name, and comparing a string with it (strcmp(..,
# "x")) outside the owner's file is testing that kind. Optimizers are found by name
# (tessera/optim.h), so `strcmp(opt.name, "adam") == 0` anywhere else fails.
NAMED = [
    ("src/optim", r"tsr_optim_kind_t"),
]
# The averaging engine (src/parallel): its lowest layers know only numbers and shapes, so the
# planner can share them (STYLE.md, 16); a file of it stays readable in one sitting (STYLE.md, 15).
ENGINE = "src/parallel"
LOW_LAYERS = ["members", "chunks", "placement"]
LOW_FORBIDDEN = re.compile(r"^(?:starpu|tile/|nn/|runtime/|codelets|parallel/replicas_impl\.h)")
PARALLEL_MAX_LINES = 600
SRC_MAX_LINES = 1000
RECORD = re.compile(r"^parallel/(?:replicas_impl|collective|home|buckets)\.h$")
# The trainer's interface to the engine (docs/design.md, "Synchronization"): the distinct
# functions of parallel/replicas.h that src/train/ names.
TRAINER = "src/train"
TRAINER_CALLS = 11


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


def source_files(root):
    """Every .c and .h of src/ and codelets/, as paths relative to root."""
    for top in ("src", "codelets"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if f.endswith((".c", ".h")):
                    yield os.path.relpath(os.path.join(dirpath, f), root)


def code_of(path):
    """A C file's text without comments and string literals (newlines kept, for line numbers)."""
    text = open(path).read()
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text[i] in "\"'":
            q, j = text[i], i + 1
            while j < n and text[j] != q:
                j += 2 if text[j] == "\\" else 1
            out.append(q + q)
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def check_kinds(root):
    """(violations, notes) of the kind rule over the tree at root."""
    bad, notes = [], []
    files = list(source_files(root))
    codes = {f: code_of(os.path.join(root, f)) for f in files}
    for prefix, folder, type_pattern in KINDS:
        owner = {}
        descriptor = re.compile(r"^(?:static\s+)?const\s+(?:struct\s+)?" + type_pattern +
                                r"\s+\w+\s*=\s*\{(.*?)^\};", re.M | re.S)
        for f in files:
            if not f.startswith(folder + os.sep):
                continue
            for block in descriptor.finditer(codes[f]):
                for value in re.findall(r"\.\w+\s*=\s*(" + prefix + r"\w+)\b", block.group(1)):
                    if owner.setdefault(value, f) != f:
                        bad.append("%s: %s is named by descriptors in %s and %s" %
                                   (f, value, owner[value], f))
        if not owner:
            notes.append("%s: no descriptor in %s/ names one yet; skipped" % (prefix, folder))
            continue
        names = "|".join(sorted(map(re.escape, owner)))
        test = re.compile(r"(?:[!=]=\s*(%s)\b|\b(%s)\s*[!=]=|\bcase\s+(%s)\s*:)" %
                          (names, names, names))
        for f in files:
            for n, line in enumerate(codes[f].split("\n"), 1):
                for m in test.finditer(line):
                    value = m.group(1) or m.group(2) or m.group(3)
                    if owner[value] != f:
                        bad.append("%s:%d: tests %s, which only %s may (ask its descriptor: a "
                                   "flag or a hook)" % (f, n, value, owner[value]))
        notes.append("%s: %d kinds, each tested only in its descriptor's file" %
                     (prefix, len(owner)))
    return bad, notes


def check_names(root):
    """(violations, notes) of the kind rule for kinds known by name (NAMED)."""
    bad, notes = [], []
    files = list(source_files(root))
    raws = {f: open(os.path.join(root, f)).read() for f in files}
    for folder, type_pattern in NAMED:
        owner = {}
        descriptor = re.compile(r"^(?:static\s+)?const\s+(?:struct\s+)?" + type_pattern +
                                r"\s+\w+\s*=\s*\{(.*?)^\};", re.M | re.S)
        for f in files:
            if f.startswith(folder + os.sep):
                for block in descriptor.finditer(raws[f]):
                    for name in re.findall(r'\.name\s*=\s*"([^"]+)"', block.group(1)):
                        owner.setdefault(name, f)
        if not owner:
            notes.append("%s: no descriptor names a kind yet; skipped" % folder)
            continue
        names = "|".join(sorted(map(re.escape, owner)))
        test = re.compile(r'\bstrn?cmp\s*\([^;]*?"(%s)"' % names)
        for f in files:
            code = code_of(os.path.join(root, f)).split("\n")
            for n, line in enumerate(raws[f].split("\n"), 1):
                if n <= len(code) and "strcmp" not in code[n - 1] and "strncmp" not in code[n - 1]:
                    continue  # in a comment
                for m in test.finditer(line):
                    if owner[m.group(1)] != f:
                        bad.append('%s:%d: compares a name with "%s", which only %s may (ask the '
                                   'registry: a flag of the descriptor)' % (f, n, m.group(1),
                                                                             owner[m.group(1)]))
        notes.append("%s: %d kinds by name, each compared only in its descriptor's file" %
                     (folder, len(owner)))
    return bad, notes


def engine_graph(root):
    """{file: {file it depends on: a function that makes it}} over ENGINE's .c files: a file
    depends on another when it names (calls, or takes the address of) a function defined
    there."""
    folder = os.path.join(root, ENGINE)
    files = sorted(f for f in os.listdir(folder) if f.endswith(".c")) if os.path.isdir(folder) else []
    codes = {f: code_of(os.path.join(folder, f)) for f in files}
    definition = re.compile(r"^(?!static\b)[A-Za-z_][\w \t*]*?\b(tsr_\w+)\s*\([^;{]*\)\s*\{",
                            re.M | re.S)
    owner = {}
    for f in files:
        for m in definition.finditer(codes[f]):
            owner.setdefault(m.group(1), f)
    graph = {f: {} for f in files}
    for f in files:
        for name in set(re.findall(r"\b(tsr_\w+)\b", codes[f])):
            g = owner.get(name)
            if g and g != f:
                graph[f].setdefault(g, name)
    return graph


def circles(graph):
    """The circles of graph (lists of nodes), one per strongly connected component of several."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v), on.add(v)
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


def check_engine(root):
    """(violations, notes) of the engine's rules: no circle of files, low layers without StarPU
    or tiles, files of at most PARALLEL_MAX_LINES lines."""
    bad = []
    graph = engine_graph(root)
    for comp in circles(graph):
        links = ["%s -> %s (%s)" % (a, b, graph[a][b]) for a in comp for b in sorted(graph[a])
                 if b in comp]
        bad.append("%s/: its files call each other in a circle: %s" % (ENGINE, "; ".join(links)))
    folder = os.path.join(root, ENGINE)
    for layer in LOW_LAYERS:
        for ext in (".c", ".h"):
            path = os.path.join(folder, layer + ext)
            if not os.path.exists(path):
                continue
            for n, line in enumerate(open(path), 1):
                m = re.match(r'\s*#\s*include\s*[<"]([^>"]+)[>"]', line)
                if m and LOW_FORBIDDEN.match(m.group(1)):
                    bad.append("%s/%s%s:%d: #include %s: a low layer of the engine (who meets, where "
                               "chunks live) knows numbers and shapes only" %
                               (ENGINE, layer, ext, n, m.group(1)))
    for f in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if re.match(r"sync_\w+\.c$", f) and f != "sync_bn.c":
            for n, line in enumerate(open(os.path.join(folder, f)), 1):
                m = re.match(r'\s*#\s*include\s*[<"]([^>"]+)[>"]', line)
                if m and RECORD.match(m.group(1)):
                    bad.append("%s/%s:%d: #include %s: a policy reaches the replicas through the "
                               "engine's calls (average.h, gradients.h) and keeps its own state"
                               % (ENGINE, f, n, m.group(1)))
        if f.endswith((".c", ".h")):
            n = sum(1 for _ in open(os.path.join(folder, f)))
            if n > PARALLEL_MAX_LINES:
                bad.append("%s/%s: %d lines, over %d: several concerns, several files" %
                           (ENGINE, f, n, PARALLEL_MAX_LINES))
    calls = trainer_calls(root)
    if len(calls) > TRAINER_CALLS:
        bad.append("%s/ calls %d functions of %s/replicas.h, over %d: %s" %
                   (TRAINER, len(calls), ENGINE, TRAINER_CALLS, ", ".join(sorted(calls))))
    notes = ["%s/: %d files, %d dependencies between them, no circle; %s/ calls %d of its "
             "functions" % (ENGINE, len(graph), sum(len(d) for d in graph.values()), TRAINER,
                            len(calls))] if not bad else []
    return bad, notes


def trainer_calls(root):
    """The functions declared in parallel/replicas.h that a file of src/train/ names."""
    header = os.path.join(root, ENGINE, "replicas.h")
    declared = set(re.findall(r"\b(tsr__\w+)\s*\(", code_of(header))) if os.path.exists(header) \
        else set()
    folder, named = os.path.join(root, TRAINER), set()
    for f in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if f.endswith((".c", ".h")):
            named |= set(re.findall(r"\b(tsr__\w+)\s*\(", code_of(os.path.join(folder, f))))
    return named & declared


def self_test():
    """The kind check on a planted violation: TSR_LAYER_A tested outside a.c; optim has no
    descriptor (skipped)."""
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "src", "nn"))
        os.makedirs(os.path.join(root, "src", "optim"))
        with open(os.path.join(root, "src", "nn", "a.c"), "w") as f:
            f.write("const tsr_layer_type_t tsr__a_type = {\n    .kind = TSR_LAYER_A,\n};\n"
                    "static int mine(int k) { return k == TSR_LAYER_A; }\n")
        with open(os.path.join(root, "src", "nn", "b.c"), "w") as f:
            f.write("/* k == TSR_LAYER_A in a comment is fine */\n"
                    "static tsr_layer_spec_t s = {.kind = TSR_LAYER_A};\n"
                    "static int planted(int k) { return k == TSR_LAYER_A; }\n")
        with open(os.path.join(root, "src", "optim", "x.c"), "w") as f:
            f.write('const tsr_optim_kind_t tsr__optim_x = {\n    .name = "x",\n};\n'
                    'static int mine(const char *s) { return strcmp(s, "x") == 0; }\n')
        with open(os.path.join(root, "src", "nn", "c.c"), "w") as f:
            f.write('/* strcmp(s, "x") in a comment is fine */\n'
                    'static int planted(const char *s) { return !strcmp(s, "x"); }\n')
        os.makedirs(os.path.join(root, "src", "parallel"))
        with open(os.path.join(root, "src", "parallel", "a.c"), "w") as f:
            f.write("int tsr__a(void) { return tsr__b(); }\n")
        with open(os.path.join(root, "src", "parallel", "b.c"), "w") as f:
            f.write("int tsr__b(void) { return 0; }\nint tsr__c(void) { return tsr__a(); }\n")
        with open(os.path.join(root, "src", "parallel", "members.h"), "w") as f:
            f.write("#include <starpu.h>\n")
        with open(os.path.join(root, "src", "parallel", "sync_x.c"), "w") as f:
            f.write("#include \"parallel/replicas_impl.h\"\n")
        # One function more than the trainer may call (and one it may not see, not counted).
        calls = ["tsr__replicas_f%d" % i for i in range(TRAINER_CALLS + 1)]
        with open(os.path.join(root, "src", "parallel", "replicas.h"), "w") as f:
            f.write("".join("int %s(void);\n" % c for c in calls))
        os.makedirs(os.path.join(root, "src", "train"))
        with open(os.path.join(root, "src", "train", "t.c"), "w") as f:
            f.write("int t(void) { return %s + tsr__other(); }\n" %
                    " + ".join("%s()" % c for c in calls))
        engine_bad, _ = check_engine(root)
        bad, notes = check_kinds(root)
        named_bad, named_notes = check_names(root)
        caught = len(bad) == 1 and bad[0].startswith(os.path.join("src", "nn", "b.c") + ":3:")
        caught_name = len(named_bad) == 1 and named_bad[0].startswith(
            os.path.join("src", "nn", "c.c") + ":2:")
        skipped = any(n.startswith("TSR_SYNC_") and "skipped" in n for n in notes)
        caught_circle = (len(engine_bad) == 4 and "a.c -> b.c (tsr__b)" in engine_bad[0] and
                         "members.h:1:" in engine_bad[1] and "sync_x.c:1:" in engine_bad[2] and
                         "calls %d functions" % (TRAINER_CALLS + 1) in engine_bad[3])
        return caught and caught_name and skipped and caught_circle, bad + named_bad + engine_bad


def main():
    root = sys.argv[1]
    ok, planted = self_test()
    if not ok:
        print("FAIL: the kind check's self-test: a planted violation gave %s" % planted)
        return 1
    print("self-test: the planted `k == TSR_LAYER_A` and `strcmp(s, \"x\")` outside their files, "
          "a circle of two files, a low layer including StarPU, a policy including the "
          "replicas' record and a trainer calling %d functions of the engine were caught" %
          (TRAINER_CALLS + 1))
    kinds_bad, notes = check_kinds(root)
    engine_bad, engine_notes = check_engine(root)
    kinds_bad += engine_bad
    notes += engine_notes
    names_bad, names_notes = check_names(root)
    kinds_bad += names_bad
    notes += names_notes
    for note in notes:
        print(note)
    bad, edges = list(kinds_bad), {}
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
    for rel in source_files(root):
        n = sum(1 for _ in open(os.path.join(root, rel)))
        if n > SRC_MAX_LINES:
            bad.append("%s: %d lines, over %d: several concerns, several files" %
                       (rel, n, SRC_MAX_LINES))
    for (a, b), where in sorted(edges.items()):
        if (b, a) in edges and a < b:
            bad.append("%s/ and %s/ include each other: %s; %s" % (a, b, where, edges[(b, a)]))
    for line in bad:
        print("FAIL:", line)
    print("%d include edges between folders checked, %d violations" % (len(edges), len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
