#!/usr/bin/python3
"""Compares tessera's data-parallel synchronization policies and outer optimizers.

Trains the same model on the same data once per configuration and seed, each as
`mpirun -np RANKS ... tessera train --workers W --sync POLICY [--outer NAME]
--seed S --log DIR/CONFIG.sS.jsonl`. A configuration is POLICY or POLICY+OUTER
(`every=8+nesterov`); OUTER may carry its rate and momentum
(`epoch+slowmo:2,0.5`: --outer slowmo --outer-lr 2 --outer-momentum 0.5); each /FLAG after
it passes --FLAG to that configuration's runs only, /FLAG=VALUE --FLAG VALUE (`batch/sync-bn`:
batch averaging with --sync-bn, compared with `batch` in the same study; `epoch/bn-recompute=16`).
`single` is one process without mpirun on RANKS x W workers, the batch of one
rank. From the rank-0 logs it writes

  DIR/runs.csv     one row per configuration, seed and epoch: measured time
                   (cumulative training seconds, evaluation excluded as in the
                   modelled times), compute seconds (the
                   epoch's seconds less its synchronization seconds), test
                   accuracy, loss, bytes and messages of the busiest rank, the
                   averages done, and the modelled time at each network
  DIR/summary.csv  one row per configuration: final accuracy or loss (--metric; mean and spread
                   over seeds), points against the first configuration (the
                   reference, batch by default), time to --target measured and
                   modelled, MB and messages per epoch of the busiest rank
  DIR/summary.md   the same as a Markdown table, with the command line
                   (--summary NAME: NAME.csv and NAME.md, e.g. the same logs at another
                   --target with --no-run)
  DIR/sync.png     test accuracy (mean over seeds) against epochs, measured
                   time and modelled time at the slowest network

The modelled time shows what the trade-off would be on a cluster rather than
on loopback: per epoch, compute + messages x latency + bytes / bandwidth, with
bytes and messages those of the busiest rank (the larger of sent and
received, both directions of a full-duplex link at once) and no overlap of
communication with computation (pessimistic for batch, which overlaps its
reductions with the backward pass). --networks names each network as
GBITS:LATENCY_US (default 1 Gb/s, 50 us; 10 Gb/s, 5 us; 100 Gb/s, 2 us). The compute time
is measured on this machine with this machine's ranks.

  /usr/bin/python3 benchmarks/compare_sync.py                     # the default study, MLP
  /usr/bin/python3 benchmarks/compare_sync.py --seeds 1 --epochs 15 --out DIR -- --model cnn
  /usr/bin/python3 benchmarks/compare_sync.py --configs batch,epoch+nesterov --seeds 1,2
  /usr/bin/python3 benchmarks/compare_sync.py --dry-run           # print the commands
  /usr/bin/python3 benchmarks/compare_sync.py --no-run --out DIR  # re-read the logs in DIR
"""
import argparse
import csv
import math
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))
import tessera  # noqa: E402
from outdir import add_out_arguments, resolve_out  # noqa: E402
from plotting import add_title_arguments, finish  # noqa: E402
DEFAULT_CONFIGS = ("batch,every=8,every=8+slowmo,every=8+nesterov,epoch,epoch+slowmo,"
                   "epoch+nesterov,async-epoch,async-epoch+slowmo,post-local:2,8,hier:2,8")
NAN = float("nan")
# What the study compares (--metric): test accuracy (higher is better), or the test loss in nats
# per token (lower is better; language models, whose validation set is the test set).
METRICS = {
    "accuracy": {"key": "test_accuracy", "scale": 100.0, "higher": True, "unit": "%",
                 "label": "test accuracy (%)", "diff": "points", "final": "final_accuracy"},
    "loss": {"key": "test_loss", "scale": 1.0, "higher": False, "unit": " nats",
             "label": "test loss (nats per token)", "diff": "nats", "final": "final_loss"},
}
METRIC = METRICS["accuracy"]


def split_configs(text):
    """Configurations from a comma-separated list; a comma followed by a digit continues the
    previous one (post-local:2,8, slowmo:2,0.5)."""
    out = []
    for part in text.split(","):
        if out and re.match(r"^\d", part):
            out[-1] += "," + part
        elif part:
            out.append(part)
    return out


def parse_config(config):
    """(policy, outer or None, [extra tessera arguments]) of
    POLICY[+OUTER[:LR[,M]]][/FLAG[=VALUE]]..."""
    config, *flags = config.split("/")
    extra = []
    for flag in flags:
        if not re.match(r"^[a-z][a-z0-9-]*(=[A-Za-z0-9.:]+)?$", flag):
            raise SystemExit("compare_sync.py: configuration %r: /%s is not a tessera train flag "
                             "name; write POLICY[+OUTER]/FLAG or /FLAG=VALUE, e.g. batch/sync-bn "
                             "or epoch/bn-recompute=16" % (config, flag))
        name, _, value = flag.partition("=")
        extra += ["--" + name] + ([value] if value else [])
    policy, _, outer = config.partition("+")
    if not outer:
        return policy, None, extra
    name, _, values = outer.partition(":")
    args = ["--outer", name]
    if values:
        lr, _, momentum = values.partition(",")
        args += ["--outer-lr", lr] + (["--outer-momentum", momentum] if momentum else [])
    return policy, name, args + extra


def log_path(out, config, seed):
    return os.path.join(out, "%s.s%d.jsonl" % (re.sub(r"[^A-Za-z0-9_.-]", "-", config), seed))


def command(args, config, seed):
    common = ["--epochs", str(args.epochs), "--seed", str(seed),
              "--log", log_path(args.out, config, seed)]
    if config == "single":
        return [args.tessera, "train", "--workers", str(args.ranks * args.workers)] + common + \
            args.extra
    policy, _, outer = parse_config(config)
    return (["mpirun", "-np", str(args.ranks), "--oversubscribe", "--allow-run-as-root",
             "-x", "STARPU_SILENT=1", args.tessera, "train", "--workers", str(args.workers),
             "--sync", policy] + outer + common + args.extra)


def number(record, key):
    value = record.get(key)
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else NAN


def parse_networks(text):
    nets = []
    for item in text.split(","):
        gbits, _, lat = item.partition(":")
        nets.append((float(gbits), float(lat or 0)))
    return nets


def net_name(gbits, _lat):
    return "%g Gb/s" % gbits


# --points eval: a row per --eval-every line as well as per epoch, its times and bytes the
# epoch's prorated by its steps (each step of an epoch taken as long as the others).
EVAL_POINTS = False


def eval_rows(log, epoch_row, before, e):
    """Rows for the eval lines of epoch e, from the epoch's row and the totals before it."""
    out = []
    for ev in log.event("eval"):
        if ev.get("epoch") != e:
            continue
        f = ev["step_in_epoch"] / ev["steps"]
        row = {k: (before[k] + f * (epoch_row[k] - before[k]) if k in before else v)
               for k, v in epoch_row.items()}
        row["epoch"] = e - 1 + f
        row["test_loss"], row["test_accuracy"] = number(ev, "loss"), number(ev, "accuracy")
        row["tokens"], row["loss"] = number(ev, "tokens"), NAN
        out.append(row)
    return out


def read_log(path, networks):
    """The epochs of one run's log, with the busiest rank's traffic and the modelled times
    (with --points eval, the eval lines too)."""
    log = tessera.read_log(path)
    epochs, ranks = log.epochs, log.ranks["ranks"] if log.ranks else None
    # The epoch lines carry rank 0's traffic; the final line every rank's totals: scale rank 0's
    # figures by the busiest rank's share (chunk homes keep them within a few percent).
    scale_bytes = scale_msgs = 1.0
    if ranks:
        def busiest(key):
            return max(max(q[key + "_sent"], q[key + "_received"]) for q in ranks)
        r0 = ranks[0]
        b0 = max(r0["bytes_sent"], r0["bytes_received"])
        m0 = max(r0["messages_sent"], r0["messages_received"])
        scale_bytes = busiest("bytes") / b0 if b0 else 1.0
        scale_msgs = busiest("messages") / m0 if m0 else 1.0
    rows, wall, modelled, tokens = [], 0.0, [0.0] * len(networks), 0.0
    for r in epochs:
        before = {"wall_time_s": wall, "tokens": tokens, **{
            "model_%s" % net_name(*n): modelled[k] for k, n in enumerate(networks)}}
        seconds = number(r, "seconds")
        sync_s = number(r, "sync_seconds")
        compute = seconds - (0.0 if math.isnan(sync_s) else sync_s)
        byts = max(number(r, "bytes_sent"), number(r, "bytes_received")) * scale_bytes
        msgs = max(number(r, "messages_sent"), number(r, "messages_received")) * scale_msgs
        if math.isnan(byts):
            byts, msgs = 0.0, 0.0
        wall += seconds
        # a language model's epoch line counts its tokens; another's, its samples
        epoch_tokens = number(r, "tokens")
        tokens += number(r, "samples_per_s") * seconds if math.isnan(epoch_tokens) else epoch_tokens
        row = {"epoch": int(r["epoch"]), "wall_time_s": wall, "tokens": tokens, "seconds": seconds,
               "compute_s": compute, "test_accuracy": number(r, "test_accuracy"),
               "test_loss": number(r, "test_loss"), "loss": number(r, "loss"), "busiest_bytes": byts, "busiest_messages": msgs,
               "averages": number(r, "averages"), "sync": r.get("sync", "none")}
        for k, (gbits, lat) in enumerate(networks):
            modelled[k] += compute + msgs * lat * 1e-6 + byts * 8 / (gbits * 1e9)
            row["model_%s" % net_name(gbits, lat)] = modelled[k]
        if EVAL_POINTS:
            rows += eval_rows(log, row, before, row["epoch"])
        rows.append(row)
    return rows


def time_to(rows, target, key):
    for r in rows:
        v = r[METRIC["key"]]
        if (v >= target) if METRIC["higher"] else (v <= target):
            return r[key]
    return NAN


def stats(values):
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return NAN, NAN
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def fmt(value, spec, none="-"):
    return none if value is None or math.isnan(value) else format(value, spec)


def summarize(config, runs, target, networks, reference):
    """One summary row: runs maps seed to that run's rows."""
    finals = [rows[-1][METRIC["key"]] for rows in runs.values()]
    acc, spread = stats(finals)
    epochs = max(sum(1 for x in r if float(x["epoch"]).is_integer()) for r in runs.values())
    row = {"config": config, "seeds": len(runs), "epochs": epochs,
           METRIC["final"]: acc, "spread": spread,
           "min": min(finals), "max": max(finals),
           "points_vs_reference": ((acc - reference) * METRIC["scale"]
                                   if reference is not None else NAN)}
    keys = [("measured", "wall_time_s")] + [
        (net_name(*n), "model_" + net_name(*n)) for n in networks]
    for label, key in keys:
        times = [time_to(rows, target, key) for rows in runs.values()]
        reached = [t for t in times if not math.isnan(t)]
        row["to_target_" + label] = statistics.mean(reached) if len(reached) == len(times) else NAN
        row["reached_" + label] = "%d/%d" % (len(reached), len(times))
        row["total_" + label] = statistics.mean(rows[-1][key] for rows in runs.values())
    every = [r for rows in runs.values() for r in rows]
    row["epoch_s"] = statistics.mean(r["seconds"] for r in every)
    row["compute_s"] = statistics.mean(r["compute_s"] for r in every)
    row["MB_per_epoch"] = statistics.mean(r["busiest_bytes"] for r in every) / 1e6
    row["messages_per_epoch"] = statistics.mean(r["busiest_messages"] for r in every)
    return row


def mean_curve(runs, key):
    """(x, the metric) averaged over seeds, epoch by epoch, as far as every seed got."""
    n = min(len(rows) for rows in runs.values())
    xs = [statistics.mean(rows[e][key] for rows in runs.values()) for e in range(n)]
    ys = [statistics.mean(rows[e][METRIC["key"]] for rows in runs.values()) for e in range(n)]
    return xs, ys


def plot(all_runs, png, networks, title, machine=None, command=None):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("compare_sync: no matplotlib: no %s" % png, file=sys.stderr)
        return
    slow = "model_" + net_name(*min(networks))
    first = (("tokens", "training tokens (all ranks)", "by tokens") if EVAL_POINTS else
             ("epoch", "epoch (passes over the training set)", "by epoch"))
    panels = [first,
              ("wall_time_s", "measured time (s), training only, this run's machine",
               "by measured time"),
              (slow, "modelled time (s) at %s" % net_name(*min(networks)),
               "by modelled time on a %s network" % net_name(*min(networks)))]
    fig, axes = plt.subplots(1, len(panels), figsize=(17, 6.2))
    colors = plt.get_cmap("tab20").colors  # 20 distinct colours: no two configurations alike
    for n, (config, runs) in enumerate(all_runs.items()):
        style = "--" if "+" in config else "-"
        for ax, (key, _, _) in zip(axes, panels):
            xs, ys = mean_curve(runs, key)
            ax.plot(xs, [METRIC["scale"] * y for y in ys], style, marker=".", label=config,
                    color=colors[(2 * n) % 20 + (2 * n) // 20 % 2])
    for ax, (_, xlabel, name) in zip(axes, panels):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(METRIC["label"] + ", mean over seeds")
        ax.set_title(name, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, ncol=2, loc="lower right" if METRIC["higher"] else "upper right")
    finish(fig, png, title, machine, command, dpi=100)


def read_runs_csv(path):
    """all_runs ({config: {seed: [epoch rows]}}) from a runs.csv this script wrote."""
    all_runs = {}
    for r in csv.DictReader(open(path)):
        row = {k: (v if k in ("config", "sync") else float(v)) for k, v in r.items()}
        all_runs.setdefault(r["config"], {}).setdefault(int(r["seed"]), []).append(row)
    return all_runs


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                usage="%(prog)s [options] [-- extra tessera train args]")
    p.add_argument("--configs", default=DEFAULT_CONFIGS,
                   help="POLICY or POLICY+OUTER[:LR[,MOMENTUM]], each with /FLAG to pass --FLAG "
                   "(batch/sync-bn) or /FLAG=VALUE (epoch/bn-recompute=16), comma-separated; "
                   "the first "
                        "is the reference; single: one process [%(default)s]")
    p.add_argument("--seeds", default="1,2,3", help="seeds [1,2,3]")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--ranks", type=int, default=2, help="MPI ranks [2]")
    p.add_argument("--workers", type=int, default=1, help="StarPU CPU workers per rank [1]")
    p.add_argument("--metric", choices=sorted(METRICS), default="accuracy",
                   help="what to compare: test accuracy, or test loss (language models) "
                        "[accuracy]")
    p.add_argument("--target", type=float, default=None,
                   help="accuracy (or loss) to time [0.88; with --metric loss 2.0]")
    p.add_argument("--points", choices=("epoch", "eval"), default="epoch",
                   help="the curves' points: epoch ends, or every --eval-every line too (pass "
                        "--eval-every N after --; times and bytes prorated by steps) [epoch]")
    p.add_argument("--networks", default="1:50,10:5,100:2",
                   help="modelled networks, GBITS:LATENCY_US, comma-separated [%(default)s]")
    p.add_argument("--tessera", default=os.path.join(REPO, "build", "tessera"), metavar="PATH")
    add_out_arguments(p)
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    p.add_argument("--no-run", action="store_true", help="only read the logs already in DIR")
    p.add_argument("--keep", action="store_true", help="do not rerun a run whose log is complete")
    p.add_argument("--summary", default="summary", metavar="NAME",
                   help="the summary's files: NAME.csv and NAME.md in --out [%(default)s]")
    p.add_argument("--plot-only", metavar="CSV", help="only plot CSV (a runs.csv) as sync.png "
                   "in --out; --title TEXT names the run")
    p.add_argument("--title", default=None, help="with --plot-only: what the runs were")
    add_title_arguments(p)
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    args = p.parse_args(argv[:split])
    args.extra = argv[split + 1:]
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", args.summary):
        p.error("--summary: a file name without a folder (letters, digits, '.', '_', '-')")
    global METRIC, EVAL_POINTS
    METRIC = METRICS[args.metric]
    EVAL_POINTS = args.points == "eval"
    if args.target is None:
        args.target = 0.88 if METRIC["higher"] else 2.0
    resolve_out(p, args, "sync", create=not args.dry_run)
    if args.plot_only:
        png = os.path.join(args.out, "sync.png")
        plot(read_runs_csv(args.plot_only), png, parse_networks(args.networks),
             args.title or "tessera: synchronization policies", args.machine, args.command)
        print("plot:", png)
        return 0
    configs = split_configs(args.configs)
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s]
        networks = parse_networks(args.networks)
    except ValueError as e:
        p.error("--seeds and --networks take numbers: %s" % e)
    if not configs or not seeds or args.epochs < 1 or args.ranks < 1 or args.workers < 1:
        p.error("--configs and --seeds must name something; --epochs, --ranks, --workers must "
                "be positive")

    if args.dry_run:
        for config in configs:
            for seed in seeds:
                print(shlex.join(command(args, config, seed)))
        return 0
    os.makedirs(args.out, exist_ok=True)
    failed = []
    if not args.no_run:
        total, done = len(configs) * len(seeds), 0
        for config in configs:
            for seed in seeds:
                done += 1
                path = log_path(args.out, config, seed)
                if args.keep and os.path.exists(path) and \
                        len(tessera.read_log(path).epochs) == args.epochs:
                    continue
                cmd = command(args, config, seed)
                print("== [%d/%d] %s seed %d: %s" % (done, total, config, seed, shlex.join(cmd)),
                      flush=True)
                if os.path.exists(path):
                    os.remove(path)
                rc = subprocess.run(cmd, stdout=subprocess.DEVNULL).returncode
                if rc != 0:
                    print("compare_sync: %s seed %d: exit status %d" % (config, seed, rc),
                          file=sys.stderr)
                    failed.append((config, seed))

    all_runs = {}
    for config in configs:
        runs = {}
        for seed in seeds:
            path = log_path(args.out, config, seed)
            rows = read_log(path, networks) if os.path.exists(path) else []
            if rows:
                runs[seed] = rows
            else:
                print("compare_sync: %s seed %d: no epochs in %s" % (config, seed, path),
                      file=sys.stderr)
        if runs:
            all_runs[config] = runs
    if not all_runs:
        return 1

    model_keys = ["model_" + net_name(*n) for n in networks]
    with open(os.path.join(args.out, "runs.csv"), "w", newline="") as f:
        cols = ["config", "seed", "epoch", "sync", "tokens", "wall_time_s", "seconds", "compute_s",
                "test_accuracy", "test_loss", "loss", "busiest_bytes", "busiest_messages", "averages"]
        w = csv.DictWriter(f, cols + model_keys)
        w.writeheader()
        for config, runs in all_runs.items():
            for seed, rows in runs.items():
                for r in rows:
                    w.writerow({"config": config, "seed": seed, **r})

    ref_config = configs[0] if configs[0] in all_runs else None
    reference = stats([rows[-1][METRIC["key"]]
                       for rows in all_runs[ref_config].values()])[0] if ref_config else None
    summary = [summarize(c, runs, args.target, networks, reference)
               for c, runs in all_runs.items()]
    with open(os.path.join(args.out, args.summary + ".csv"), "w", newline="") as f:
        w = csv.DictWriter(f, list(summary[0].keys()))
        w.writeheader()
        w.writerows(summary)

    labels = ["measured"] + [net_name(*n) for n in networks]
    target = "%g%s" % (METRIC["scale"] * args.target, METRIC["unit"])
    versus = "%s vs %s" % (METRIC["diff"], ref_config or "-")
    head = (["config", "final " + METRIC["label"], versus] +
            ["to %s, %s (s)" % (target, label) for label in labels] +
            ["%d epochs, %s (s)" % (args.epochs, label) for label in labels] +
            ["compute s/epoch", "MB/epoch", "messages/epoch"])
    table = []
    for s in summary:
        acc = "%.*f" % (2 if METRIC["higher"] else 4, METRIC["scale"] * s[METRIC["final"]])
        if s["seeds"] > 1:
            acc += " ± %.*f" % (2 if METRIC["higher"] else 4, METRIC["scale"] * s["spread"])
        if s["seeds"] < len(seeds):  # some seeds' logs missing (--no-run, a failed run)
            acc += " (%d of %d seeds)" % (s["seeds"], len(seeds))
        cells = [s["config"], acc,
                 fmt(s["points_vs_reference"], "+.2f" if METRIC["higher"] else "+.4f")]
        for label in labels:
            t = s["to_target_" + label]
            cells.append(fmt(t, ".1f", "never (%s)" % s["reached_" + label])
                         if math.isnan(t) else fmt(t, ".1f"))
        cells += [fmt(s["total_" + label], ".1f") for label in labels]
        cells += [fmt(s["compute_s"], ".2f"), fmt(s["MB_per_epoch"], ".1f"),
                  fmt(s["messages_per_epoch"], ",.0f")]
        table.append(cells)
    widths = [max(len(r[i]) for r in [head] + table) for i in range(len(head))]
    for r in [head] + table:
        print("  ".join(c.ljust(wd) if i == 0 else c.rjust(wd)
                        for i, (c, wd) in enumerate(zip(r, widths))))
    extra = " ".join(shlex.quote(a) for a in args.extra)
    with open(os.path.join(args.out, args.summary + ".md"), "w") as f:
        f.write("Measured with `benchmarks/compare_sync.py --configs %s --seeds %s --epochs %d "
                "--ranks %d --workers %d --metric %s --target %g --points %s --networks %s%s%s`; "
                "%s: mean ± "
                "standard deviation over seeds; modelled: compute + messages x latency + bytes / "
                "bandwidth, busiest rank, no overlap.\n\n"
                % (",".join(configs), ",".join(map(str, seeds)), args.epochs, args.ranks,
                   args.workers, args.metric, args.target, args.points, args.networks,
                   "" if args.summary == "summary" else " --summary " + args.summary,
                   (" -- " + extra) if extra else "", METRIC["label"]))
        f.write("| " + " | ".join(head) + " |\n")
        f.write("|" + "|".join(["---"] + ["--:"] * (len(head) - 1)) + "|\n")
        for r in table:
            f.write("| " + " | ".join(r) + " |\n")
    title = "tessera: synchronization policies and outer optimizers, %d ranks%s" % (
        args.ranks, (", " + " ".join(args.extra)) if args.extra else ", default MLP")
    plot(all_runs, os.path.join(args.out, "sync.png"), networks, title, args.machine, args.command)
    print("wrote runs.csv, %s.csv, %s.md and sync.png in %s" % (args.summary, args.summary,
                                                                   args.out))
    if failed:
        print("compare_sync: failed runs: %s" % ", ".join("%s seed %d" % f for f in failed),
              file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
