#!/usr/bin/env python3
"""check_plots.py SRC OUT: each benchmark plot, drawn by its script's --plot-only from the
committed CSV into OUT (never into benchmarks/results/), is readable alone: a title naming what,
the machine and the command; on every panel a legend, an x and a y label with a unit (a
parenthesis), and every plotted point inside the axes' limits (no clipped series). The figures
are caught as plotting.finish saves them. Exits 77 (skip) without matplotlib."""
import os
import subprocess
import sys

try:
    import matplotlib  # noqa: F401
except ImportError:
    print("SKIP: no matplotlib (apt-get install python3-matplotlib)")
    sys.exit(77)

SRC, OUT = sys.argv[1], sys.argv[2]
R = os.path.join(SRC, "benchmarks", "results")
CASES = [
    ("scaling.py", os.path.join(R, "scaling", "scaling.csv"), "scaling.png", []),
    ("compare_sync.py", os.path.join(R, "sync", "runs.csv"), "sync.png", ["--title", "sync"]),
    ("bench_hetero.py", os.path.join(R, "hetero", "runs.csv"), "hetero.png", []),
    ("validate_plan.py", os.path.join(R, "plan", "runs.csv"), "plan.png", []),
]
# Run inside each script's process: wrap plotting.finish to check the figure before it is saved.
PROBE = r'''
import os, runpy, sys
sys.path.insert(0, os.path.join(sys.argv[1], "benchmarks"))
import plotting
real = plotting.finish
problems = []
def finish(fig, path, what, machine=None, command=None, dpi=110):
    real(fig, path, what, "MACHINE-X", "COMMAND-Y", dpi)
    title = fig._suptitle.get_text() if fig._suptitle else ""
    if not (what and "MACHINE-X" in title and "COMMAND-Y" in title):
        problems.append("title %r lacks what, the machine or the command" % title)
    for k, ax in enumerate(fig.axes):
        if ax.get_legend() is None:
            problems.append("panel %d: no legend" % k)
        for name, label in (("x", ax.get_xlabel()), ("y", ax.get_ylabel())):
            if "(" not in label:
                problems.append("panel %d: %s label %r has no unit" % (k, name, label))
        (x0, x1), (y0, y1) = sorted(ax.get_xlim()), sorted(ax.get_ylim())
        for line in ax.get_lines():
            for x, y in zip(line.get_xdata(), line.get_ydata()):
                if line.get_color() in ("k", "black", "grey"):
                    break  # guides (exact, +-20%, efficiency 1) run from corner to corner
                if not (x0 <= x <= x1 and y0 <= y <= y1):
                    problems.append("panel %d: %s's point (%g, %g) outside x %g..%g, y %g..%g"
                                    % (k, line.get_label(), x, y, x0, x1, y0, y1))
                    break
        for coll in ax.collections:
            for x, y in coll.get_offsets():
                if not (x0 <= x <= x1 and y0 <= y <= y1):
                    problems.append("panel %d: a marker (%g, %g) outside the axes" % (k, x, y))
                    break
plotting.finish = finish
script = sys.argv[2]
sys.argv = [script] + sys.argv[3:]
try:
    runpy.run_path(script, run_name="__main__")
except SystemExit as e:
    if e.code:
        raise
if problems:
    sys.exit("\n".join(problems))
'''
failed = 0
for script, csv_path, png, extra in CASES:
    out = os.path.join(OUT, os.path.splitext(script)[0])
    cmd = [sys.executable, "-c", PROBE, SRC, os.path.join(SRC, "benchmarks", script),
           "--plot-only", csv_path, "--out", out] + extra
    r = subprocess.run(cmd, capture_output=True, text=True)
    path = os.path.join(out, png)
    if r.returncode or not os.path.isfile(path) or os.path.getsize(path) < 10000:
        failed += 1
        print("FAIL: %s --plot-only %s: exit %d\n%s%s" % (script, csv_path, r.returncode,
                                                           r.stdout[-1500:], r.stderr[-1500:]))
    else:
        print("ok: %s (%d bytes)" % (path, os.path.getsize(path)))
sys.exit(1 if failed else 0)
