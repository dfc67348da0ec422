"""Issue 42's crossover search: tessera plan here (this machine's kernel rates, loopback), 2 ranks,
--sync batch; for each model and global batch 2B, 1x2 (batch B per replica) against 2x1 (batch 2B,
--domain auto: the planner keeps the fastest domain cut the engine builds). Prints epoch seconds
and grid/dp. Run from anywhere: /usr/bin/python3 benchmarks/results/plan/crossover-zen3-2026-12-07/scan.py
"""
import json, os, subprocess, sys
ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", ".."))
def plan(model, batch, grid, extra):
    cmd = ["build/tessera", "plan", "--model", model, "--batch", str(batch), "--ranks", "2",
           "--grid", grid, "--sync", "batch", "--json"] + extra
    if grid == "2x1": cmd += ["--domain", "auto"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if out.returncode: return None, out.stderr.strip().splitlines()[-1:]
    p = json.loads(out.stdout)["plans"][0]
    return p, None
cases = [("mlp:4096,4096", [], [8, 16, 32, 64, 128]),
         ("cnn", [], [8, 16, 32, 64]),
         ("vgg11", ["--input", "32x32x3"], [4, 8, 16, 32]),
         ("alexnet", ["--input", "224x224x3", "--classes", "1000"], [2, 4, 8]),
         ("vgg16", ["--input", "224x224x3", "--classes", "1000"], [2, 4])]
for model, extra, batches in cases:
    for b in batches:
        dp, e1 = plan(model, b, "1x2", extra)
        gr, e2 = plan(model, 2 * b, "2x1", extra)
        if not dp or not gr:
            print(model, b, "error", e1, e2); continue
        print("%-14s global %4d  1x2 batch: %8.2f s/epoch (step %.1f ms)  2x1 %s: %8.2f s/epoch (step %.1f ms)  grid/dp %.3f" % (
            model, 2 * b, dp["epoch_s"], dp["step_s"] * 1e3, gr["domain"] + (":%s" % gr["domain_layers"] if gr["domain_layers"] else ""),
            gr["epoch_s"], gr["step_s"] * 1e3, gr["epoch_s"] / dp["epoch_s"]), flush=True)
