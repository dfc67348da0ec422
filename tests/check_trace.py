#!/usr/bin/env python3
"""check_trace.py CHECK ARGS...: one property of a tessera trace (tessera train --trace), exit 1
with the reason when it does not hold. Used by tests/test_trace.sh.

    events TRACE LOG          task events are named by codelet (a codelet of the log's
                              statistics), args carry layer, step, tile, priority, mpi, id and
                              deps; ids number each rank's tasks 1..n; a dependency is an earlier
                              task of the same rank that had ended when the task started
    window FULL WINDOW A B    WINDOW (--trace-steps A-B) holds exactly the tasks of steps A..B,
                              as many per step as FULL (the same run traced whole) and that the
                              same each step (tasks per step x steps), and only spans that
                              overlap them
    summary SUMMARY TRACE LOG tessera trace-summary --json: busy time per codelet adds up to the
                              workers' executing time of the log's statistics within 1%, per
                              worker and in all, tasks per codelet match the statistics, waits
                              are the longest spans, the critical path is a chain of
                              dependencies or transfers inside its step
    flows TRACE LOG           transfers between ranks are flows: each start (ph s) matched by
                              one finish (ph f) on another rank, both inside a task of their
                              track, the producer ended before the consumer started; at least one
                              per message the synchronization counted (the log's ranks line)
"""
import json
import sys
from collections import Counter, defaultdict

SKEW_US = 50.0  # clocks of two ranks agree to within this (src/io/trace_graph.c)


def fail(msg):
    sys.exit("check_trace: " + msg)


def load(path):
    return json.load(open(path))


def tasks_of(doc):
    return [e for e in doc["traceEvents"] if e["ph"] == "X" and e.get("cat") in ("task", "mpi")]


def stats_of(log):
    lines = [json.loads(l) for l in open(log)]
    st = [o for o in lines if o.get("event") == "stats"]
    if len(st) != 1:
        fail("%s: expected one stats line" % log)
    return st[0], lines


def by_id(tasks):
    out = {}
    for e in tasks:
        key = (e["pid"], e["args"]["id"])
        if key in out:
            fail("two tasks with id %s on rank %d" % (key[1], key[0]))
        out[key] = e
    return out


# The codelets that write a parameter's step (codelets/sgd.c, adam.c, gemm_ep.c).
UPDATE_CODELETS = ("sgd", "sgd_nesterov", "adam", "adamw", "gemm_sgd")


def check_events(trace, log):
    doc, (st, _) = load(trace), stats_of(log)
    tasks = tasks_of(doc)
    if not tasks:
        fail("no task events")
    codelets = set()
    for w in st["workers"]:
        codelets |= set(w["codelets"])
    ids = by_id(tasks)
    want = {"layer", "step", "tile", "priority", "mpi", "id", "deps"}
    for e in tasks:
        a = e["args"]
        # A codelet with several CPU implementations (--kernels) counts each apart in the
        # statistics, "gemm:onednn", and its events say which ran in args.impl.
        name = e["name"] + (":" + a["impl"] if "impl" in a else "")
        if name not in codelets:
            fail("event named %r, not a codelet of the run (%s)" % (name, sorted(codelets)))
        if set(a) - {"impl"} != want:
            fail("args %s, want %s (and impl where the codelet has several)" %
                 (sorted(a), sorted(want)))
        for d in a["deps"]:
            p = ids.get((e["pid"], d))
            if p is None or d >= a["id"]:
                fail("rank %d task %d depends on %d: not an earlier task of its rank" %
                     (e["pid"], a["id"], d))
            if p["ts"] + p["dur"] > e["ts"] + 0.002:
                fail("rank %d task %d (%s) starts at %.3f before its dependency %d (%s) ends at "
                     "%.3f" % (e["pid"], a["id"], e["name"], e["ts"], d, p["name"],
                               p["ts"] + p["dur"]))
    per_rank = Counter(e["pid"] for e in tasks)
    for r, n in per_rank.items():
        if {i for (p, i) in ids if p == r} != set(range(1, n + 1)):
            fail("rank %d: ids are not 1..%d" % (r, n))
    if sum(len(e["args"]["deps"]) for e in tasks) < len(tasks) // 2:
        fail("hardly any dependencies recorded")
    # A writer waits for the readers since the last write (write after read), not only for that
    # write: on one rank, each step's update of a layer (an optimizer's task, or gemm_sgd where
    # the weight gradient's last task takes it) overwrites a weight or bias that the step's
    # forward pass (priority 0: gemm, bias_add) of that layer read, and depends on it directly.
    if doc["otherData"]["ranks"] == 1:
        updates = [e for e in tasks if e["name"] in UPDATE_CODELETS and e["args"]["step"] >= 1]
        if not updates:
            fail("no update task (%s) after the first step" % ", ".join(UPDATE_CODELETS))
        for e in updates:
            deps = [ids[(e["pid"], d)] for d in e["args"]["deps"]]
            if not any(d["args"]["priority"] == 0 and d["args"]["layer"] == e["args"]["layer"]
                       for d in deps):
                fail("%s of layer %d step %d does not wait for the forward task that read its "
                     "parameter: deps %s" % (e["name"], e["args"]["layer"], e["args"]["step"],
                                             [(d["name"], d["args"]["priority"]) for d in deps]))


def per_step(tasks):
    return Counter(e["args"]["step"] for e in tasks)


def check_window(full, window, a, b):
    a, b = int(a), int(b)
    fd, wd = load(full), load(window)
    ft, wt = tasks_of(fd), tasks_of(wd)
    fs, ws = per_step(ft), per_step(wt)
    if set(ws) != set(range(a, b + 1)):
        fail("--trace-steps %d-%d: the trace holds steps %s" % (a, b, sorted(ws)))
    each = fs[a]
    if any(fs[s] != each for s in range(a, b + 1)):
        fail("the whole trace's steps %d-%d have %s tasks" % (a, b, [fs[s] for s in range(a, b + 1)]))
    if len(wt) != each * (b - a + 1) or any(ws[s] != each for s in ws):
        fail("%d tasks for %d steps of %d tasks each (per step: %s)" %
             (len(wt), b - a + 1, each, dict(ws)))
    if wd["otherData"]["steps"] != [a, b]:
        fail("otherData.steps is %s" % wd["otherData"]["steps"])
    extent = {}
    for e in wt:
        t0, t1 = extent.get(e["pid"], (float("inf"), float("-inf")))
        extent[e["pid"]] = (min(t0, e["ts"]), max(t1, e["ts"] + e["dur"]))
    spans = [e for e in wd["traceEvents"] if e["ph"] == "X" and e["cat"] == "sync"]
    full_spans = [e for e in fd["traceEvents"] if e["ph"] == "X" and e["cat"] == "sync"]
    for e in spans:
        t0, t1 = extent.get(e["pid"], (0, 0))
        if not (e["ts"] + e["dur"] > t0 and e["ts"] < t1):
            fail("span %s at %.3f-%.3f outside the steps' tasks %.3f-%.3f" %
                 (e["name"], e["ts"], e["ts"] + e["dur"], t0, t1))
    if not spans or len(spans) >= len(full_spans):
        fail("%d spans in the window, %d in the whole run" % (len(spans), len(full_spans)))


def close(a, b, rel=0.01):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-9)


def check_summary(summary, trace, log):
    s, doc, (st, _) = load(summary), load(trace), stats_of(log)
    executing = sum(w["executing"] for w in st["workers"])
    busy = sum(b["seconds"] for b in s["busy"])
    if not close(busy, executing) or not close(s["busy_seconds"], executing):
        fail("busy per codelet adds up to %.6f s (busy_seconds %.6f), the workers executed %.6f s"
             % (busy, s["busy_seconds"], executing))
    kinds = defaultdict(float)
    for w in st["workers"]:
        kinds[w["name"].split()[0]] += w["executing"]
    for k, v in kinds.items():
        got = sum(b["seconds"] for b in s["busy"] if b["kind"] == k)
        if not close(got, v):
            fail("%s workers: busy %.6f s, executing %.6f s" % (k, got, v))
    workers = {(w["rank"], w["worker"]): w for w in s["workers"]}
    for w in st["workers"]:
        got = workers[(w["rank"], w["worker"])]
        if not close(got["busy_seconds"], w["executing"]) or got["tasks"] != w["tasks"]:
            fail("rank %d worker %d: summary %s, statistics %s" % (w["rank"], w["worker"], got, w))
        if got["idle_seconds"] < 0 or not close(got["busy_seconds"] + got["idle_seconds"],
                                                 got["seconds"], 1e-6):
            fail("rank %d worker %d: busy + idle != its rank's time: %s" % (w["rank"], w["worker"], got))
    counts = Counter()
    for w in st["workers"]:
        counts.update(w["codelets"])
    got = Counter()
    for b in s["busy"]:
        got[b["codelet"] + (":" + b["impl"] if "impl" in b else "")] += b["tasks"]
    if got != counts:
        fail("tasks per codelet %s, statistics %s" % (dict(got), dict(counts)))
    spans = sorted((e["dur"] for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "sync"),
                   reverse=True)
    waits = [w["seconds"] for w in s["longest_waits"]]
    if not waits or any(abs(x - y / 1e6) > 1e-9 for x, y in zip(waits, spans)) or \
            len(waits) != min(10, len(spans)):
        fail("longest waits %s, the trace's longest spans %s" % (waits, spans[:10]))
    cp = s["critical_path"]
    if not cp or not cp["chain"]:
        fail("no critical path: %s" % cp)
    ids = by_id(tasks_of(doc))
    flows = defaultdict(dict)
    for e in doc["traceEvents"]:
        if e["ph"] in ("s", "f"):
            flows[e["id"]][e["ph"]] = (e["pid"], e["args"]["task"])
    links = {(f["s"], f["f"]) for f in flows.values()}
    chain = [(c["rank"], c["id"]) for c in cp["chain"]]
    for c in chain:
        if ids[c]["args"]["step"] != cp["step"]:
            fail("critical path of step %d holds a task of step %d" % (cp["step"], ids[c]["args"]["step"]))
    for p, q in zip(chain, chain[1:]):
        if not ((p[0] == q[0] and p[1] in ids[q]["args"]["deps"]) or (p, q) in links):
            fail("critical path: %s then %s, neither a dependency nor a transfer" % (p, q))
    work = sum(c["seconds"] for c in cp["chain"])
    if not close(work, cp["chain_seconds"], 1e-6) or work > cp["seconds"] * (1 + 1e-6):
        fail("chain of %.6f s (%.6f said) in a step of %.6f s" % (work, cp["chain_seconds"], cp["seconds"]))
    in_step = [e for e in ids.values() if e["args"]["step"] == cp["step"]]
    if cp["tasks"] != len(in_step):
        fail("critical path's step has %d tasks, the trace %d" % (cp["tasks"], len(in_step)))
    # The heaviest chain: no task of the step has a dependency chain heavier than it.
    best = {}
    for e in sorted(in_step, key=lambda e: (e["ts"], e["args"]["id"])):
        preds = [(e["pid"], d) for d in e["args"]["deps"]] + [p for p, q in links if q == (e["pid"], e["args"]["id"])]
        best[(e["pid"], e["args"]["id"])] = e["dur"] + max(
            [best.get(p, 0) for p in preds if p in ids and ids[p]["args"]["step"] == cp["step"]] or [0])
    if max(best.values()) > cp["chain_seconds"] * 1e6 * (1 + 1e-6):
        fail("a chain of %.3f us exists, the critical path says %.3f us" %
             (max(best.values()), cp["chain_seconds"] * 1e6))


def check_flows(trace, log):
    doc, (_, lines) = load(trace), stats_of(log)
    ids = by_id(tasks_of(doc))
    ends = defaultdict(list)
    for e in doc["traceEvents"]:
        if e["ph"] in ("s", "f"):
            ends[e["id"]].append(e)
    if not ends:
        fail("no flow events in a %d-rank trace" % doc["otherData"]["ranks"])
    for i, es in ends.items():
        phs = sorted(e["ph"] for e in es)
        if phs != ["f", "s"]:
            fail("flow %s: events %s, want one s and one f" % (i, phs))
        s, f = sorted(es, key=lambda e: e["ph"], reverse=True)
        if s["pid"] == f["pid"]:
            fail("flow %s stays on rank %d" % (i, s["pid"]))
        a, b = ids.get((s["pid"], s["args"]["task"])), ids.get((f["pid"], f["args"]["task"]))
        if a is None or b is None:
            fail("flow %s: its ends name no task" % i)
        for e, t in ((s, a), (f, b)):
            if e["tid"] != t["tid"] or not (t["ts"] <= e["ts"] <= t["ts"] + t["dur"]):
                fail("flow %s: a %s event outside its task" % (i, e["ph"]))
        if a["ts"] + a["dur"] > b["ts"] + SKEW_US:
            fail("flow %s: the producer (%s) ends after the consumer (%s) starts" % (i, a["name"], b["name"]))
        # Under --sync batch a tile read from another rank was written in the same step.
        if b["args"]["step"] > 0 and a["args"]["step"] != b["args"]["step"]:
            fail("flow %s: %s of step %d read what %s wrote at step %d" %
                 (i, b["name"], b["args"]["step"], a["name"], a["args"]["step"]))
    ranks = [o for o in lines if o.get("event") == "ranks"]
    if ranks:
        messages = sum(r["messages_received"] for r in ranks[0]["ranks"])
        # Besides the synchronization's messages, rank 0 gathers the epoch's statistics.
        if not messages <= len(ends) <= messages + 2 * doc["otherData"]["ranks"]:
            fail("%d flows for %d messages of the synchronization" % (len(ends), messages))


CHECKS = {"events": check_events, "window": check_window, "summary": check_summary,
          "flows": check_flows}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in CHECKS:
        sys.exit(__doc__)
    CHECKS[sys.argv[1]](*sys.argv[2:])
