#!/usr/bin/python3
"""What statistics and tracing cost: the same training run with neither,
with --stats, and with --trace (which records every task), interleaved
round by round so that a shared machine's drift hits every variant alike.
Prints the median epoch time (epochs after the first) of each variant and
its ratio to the run without observation.

    /usr/bin/python3 benchmarks/observe_overhead.py --rounds 7
    /usr/bin/python3 benchmarks/observe_overhead.py --baseline /tmp/head/build/tessera

--baseline adds a variant run by another tessera binary (e.g. a build
without the observation code) to show that the code costs nothing when off.
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

from outdir import add_out_arguments, resolve_out, tee_stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tessera", default="build/tessera")
    ap.add_argument("--baseline", help="another tessera binary, run with no observation")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--args", default="--epochs 3 --train-limit 12000 --test-limit 0",
                    help="training options shared by every variant")
    add_out_arguments(ap)
    a = ap.parse_args()
    resolve_out(ap, a, "observe")
    tee_stdout(a.out)
    variants = {"off": (a.tessera, []), "stats": (a.tessera, ["--stats"]),
                "trace": (a.tessera, ["--trace", "TRACE"]),
                "stats+trace": (a.tessera, ["--stats", "--trace", "TRACE"])}
    if a.baseline:
        variants = {"baseline": (a.baseline, []), **variants}
    times = {k: [] for k in variants}
    with tempfile.TemporaryDirectory() as tmp:
        log, trace = os.path.join(tmp, "l.jsonl"), os.path.join(tmp, "t.json")
        for r in range(a.rounds):
            for name, (exe, extra) in variants.items():
                if os.path.exists(log):  # a log grows: each run reads its own lines
                    os.remove(log)
                cmd = [exe, "train", *a.args.split(), "--quiet", "--log", log,
                       *[trace if x == "TRACE" else x for x in extra]]
                subprocess.run(cmd, check=True, capture_output=True)
                secs = [o["seconds"] for o in map(json.loads, open(log)) if "epoch" in o]
                times[name].append(statistics.median(secs[1:] or secs))
    ref = statistics.median(times["off"])
    print(f"{a.args}, {a.rounds} interleaved rounds, median epoch time:")
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"  {name:12} {m:.4f} s  x{m / ref:.3f}  (min {min(ts):.4f}, max {max(ts):.4f})")


if __name__ == "__main__":
    main()
