#!/usr/bin/python3
"""Which implementation ran each layer's tasks: reads a trace written by `tessera train --trace
FILE.json` and prints, per layer and codelet with more than one implementation, how many tasks
of each implementation ran in the training steps (step >= 1; step 0 is evaluation) and their mean
duration. Under `--sched dmda` this is the runtime choosing per shape.

    /usr/bin/python3 benchmarks/trace_impls.py FILE.json
"""
import collections
import json
import sys


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: trace_impls.py FILE.json")
    with open(sys.argv[1]) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    runs = collections.defaultdict(lambda: collections.defaultdict(list))
    for e in events:
        a = e.get("args") or {}
        if e.get("cat") == "task" and "impl" in a and a.get("step", 0) >= 1:
            runs[(a["layer"], e["name"])][a["impl"]].append(e["dur"])
    impls = sorted({i for v in runs.values() for i in v})
    print("layer  codelet          " + "".join("%24s" % (i + " tasks (mean us)") for i in impls))
    for (layer, name), by in sorted(runs.items()):
        cells = ["%12d (%9.0f)" % (len(by[i]), sum(by[i]) / len(by[i])) if by.get(i) else
                 "%24s" % "-" for i in impls]
        print("%5d  %-16s " % (layer, name) + "".join("%24s" % c for c in cells))


if __name__ == "__main__":
    main()
