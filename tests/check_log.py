#!/usr/bin/env python3
"""check_log.py LOG EPOCHS [KEY=V|KEY<V|KEY>V ...]: checks a tessera JSON Lines log.

LOG has one object per epoch, numbered 1..EPOCHS, with finite losses and
accuracies in [0, 1] (test_loss and test_accuracy may be null only when a condition
says test_loss=null, a run without a test set; val_loss and val_accuracy, --val-split's,
are null or finite, and never null when a condition names val_loss); with more than
one epoch the training loss of the last is
below the first's; each condition holds in the last epoch's object (= compares
JSON values, so priorities=false, ranks=2 and sched=lws all work). A --stats
line is skipped. Exits non-zero with what was expected and what was seen.
Used by the shell suites through tests/lib.sh.
"""
import json, math, re, sys
path, epochs, conds = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
try:
    objs = [json.loads(l) for l in open(path)]
except (OSError, ValueError) as e:
    sys.exit("cannot read the log: %s" % e)
objs = [o for o in objs if "event" not in o]  # the --stats line
bad = []
seen = [o.get("epoch") for o in objs]
if seen != list(range(1, epochs + 1)):
    bad.append("epochs %s, want 1..%d" % (seen, epochs))
no_test = "test_loss=null" in conds
val = any(re.match(r"val_loss\W", c) for c in conds)
for o in objs:
    for k in ("loss", "test_loss", "train_accuracy", "test_accuracy", "seconds", "samples_per_s",
              "val_loss", "val_accuracy"):
        v = o.get(k)
        if v is None and ((k.startswith("test_") and no_test) or (k.startswith("val_") and not val)):
            if k in o:
                continue
            bad.append("epoch %s: no %s" % (o.get("epoch"), k))
        elif not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            bad.append("epoch %s: %s = %r, want a finite number >= 0" % (o.get("epoch"), k, v))
    for k in ("train_accuracy", "test_accuracy", "val_accuracy"):
        if isinstance(o.get(k), (int, float)) and o[k] > 1:
            bad.append("epoch %s: %s = %r > 1" % (o.get("epoch"), k, o[k]))
    if not (o.get("sched") and o.get("model") and isinstance(o.get("batch"), int) and o["batch"] > 0):
        bad.append("epoch %s: sched %r, model %r, batch %r" % (o.get("epoch"), o.get("sched"),
                                                            o.get("model"), o.get("batch")))
if bad:
    sys.exit("; ".join(bad[:4]))
first, last = objs[0], objs[-1]
if len(objs) > 1 and not last["loss"] < first["loss"]:
    bad.append("training loss did not fall: epoch 1 %.4g, epoch %d %.4g" %
               (first["loss"], last["epoch"], last["loss"]))
for c in conds:
    k, op, want = re.fullmatch(r"(\w+)([=<>])(.*)", c).groups()
    v = last.get(k)
    if op == "=":
        try:
            want = json.loads(want)
        except ValueError:
            pass  # a bare string: sched=lws
        ok = v == want and type(v) == type(want)
    else:
        ok = isinstance(v, (int, float)) and (v < float(want) if op == "<" else v > float(want))
    if not ok:
        bad.append("epoch %d: %s = %r, want %s %s" % (last["epoch"], k, v, op,
                                                      repr(want) if op == "=" else want))
if bad:
    sys.exit("; ".join(bad))
