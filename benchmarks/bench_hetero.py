#!/usr/bin/python3
"""Ranks of different speed: --shares auto against uniform shares.

Four ranks on two cores, pinned with taskset: rank 0 alone on core 0, ranks 1-3
sharing core 1, so rank 0 computes about three times as fast as each other rank
(mpirun --bind-to none; tessera binds each rank's worker inside the CPU set it
was started with). For each policy (--policies, default epoch and batch) it runs

  mpirun --oversubscribe --bind-to none \\
    -np 1 taskset -c 0 tessera train --workers 1 --sync P --shares S ... : \\
    -np 3 taskset -c 1 tessera train --workers 1 --sync P --shares S ...

with S uniform and auto, alternating over --rounds, --epochs epochs each
(--weighting samples with weight averaging, so that ranks count by the samples
they trained on), and prints per configuration the mean epoch time, the median
of the epochs after the first, the final test accuracy, and auto against
uniform: the cut in epoch time (target: at least 25%) and the accuracy
difference (target: within 0.5 points). The reference measured in the same
run is the uniform run itself, and from its per-rank compute times the cut that
perfect balance would give: uniform, the slowest rank's time for N/P samples;
balanced, N / (sum of the ranks' rates).

  /usr/bin/python3 benchmarks/bench_hetero.py                  # 5 epochs, all 60,000 samples
  /usr/bin/python3 benchmarks/bench_hetero.py --train-limit 12000 --epochs 3 --policies epoch
  /usr/bin/python3 benchmarks/bench_hetero.py --dry-run         # print the commands
  /usr/bin/python3 benchmarks/bench_hetero.py --no-run          # re-read the logs in --out

Writes --out (default a new benchmarks/out/hetero-TIMESTAMP/; benchmarks/results/hetero/ only
with --force): runs.csv (one row per run
and epoch, with every rank's share, steps, compute and wait seconds),
summary.csv, summary.md and, when matplotlib is installed, hetero.png (epoch
time against epochs, uniform and auto, per policy). Needs at least 2 cores.
"""
import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import tessera  # noqa: E402
from outdir import add_out_arguments, resolve_out  # noqa: E402
from plotting import add_title_arguments, finish  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tessera", default=os.path.join(REPO, "build", "tessera"))
    p.add_argument("--policies", default="epoch,batch")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--rounds", type=int, default=1, help="uniform, auto pairs per policy")
    p.add_argument("--train-limit", type=int, default=0, help="0: every training sample")
    add_out_arguments(p)
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--no-run", action="store_true", help="re-read the logs already in --out")
    p.add_argument("extra", nargs="*", help="more tessera train options, after --")
    p.add_argument("--plot-only", metavar="CSV", help="only plot CSV (a runs.csv) as hetero.png "
                   "in --out")
    add_title_arguments(p)
    args = p.parse_args()
    resolve_out(p, args, "hetero")
    return args


def command(args, policy, shares, log):
    opts = ["train", "--workers", "1", "--sync", policy, "--shares", shares,
            "--epochs", str(args.epochs), "--log", log, "--quiet"]
    if policy != "batch" and not policy.startswith("post-local"):
        opts += ["--weighting", "samples"]
    if args.train_limit:
        opts += ["--train-limit", str(args.train_limit)]
    opts += args.extra
    return (["mpirun", "--oversubscribe", "--bind-to", "none", "--allow-run-as-root",
             "-x", "STARPU_SILENT=1", "-x", "STARPU_HOME",
             "-np", "1", "taskset", "-c", "0", args.tessera] + opts +
            [":", "-np", "3", "taskset", "-c", "1", args.tessera] + opts)


def read_log(path):
    return tessera.read_log(path).epochs


def balanced_cut(epoch):
    """From one uniform epoch's per-rank samples and compute seconds: the epoch-time cut
    perfect balance would give (1 - balanced / uniform), or None."""
    work = epoch.get("work") or []
    rates = [w["samples"] / w["compute_seconds"] for w in work if w.get("compute_seconds")]
    if len(rates) != len(work) or not rates:
        return None
    n = sum(w["samples"] for w in work)
    uniform = max(w["compute_seconds"] for w in work)
    return 1 - (n / sum(rates)) / uniform


def main():
    args = parse_args()
    if args.plot_only:
        runs, policies = read_runs_csv(args.plot_only)
        plot(runs, policies, os.path.join(args.out, "hetero.png"), args.machine, args.command)
        return
    if (os.cpu_count() or 1) < 2:
        sys.exit("bench_hetero needs at least 2 cores (rank 0 on core 0, ranks 1-3 on core 1)")
    os.makedirs(args.out, exist_ok=True)
    env = dict(os.environ, STARPU_SILENT="1")
    env.setdefault("STARPU_HOME", tempfile.mkdtemp(prefix="tessera-starpu-"))
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    policies = args.policies.split(",")
    runs = {}  # (policy, shares) -> [epochs of each round]
    for policy in policies:
        for rnd in range(args.rounds):
            for shares in ("uniform", "auto"):
                log = os.path.join(args.out, "%s.%s.r%d.jsonl" % (policy, shares, rnd + 1))
                cmd = command(args, policy, shares, log)
                print("$ " + " ".join(cmd), flush=True)
                if args.dry_run:
                    continue
                if args.no_run:
                    runs.setdefault((policy, shares), []).append(read_log(log))
                    continue
                r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True)
                if r.returncode != 0:
                    sys.exit("run failed (exit %d):\n%s" % (r.returncode, r.stdout[-2000:]))
                runs.setdefault((policy, shares), []).append(read_log(log))
    if args.dry_run:
        return

    with open(os.path.join(args.out, "runs.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["policy", "shares", "round", "epoch", "seconds", "test_accuracy", "rank",
                     "share", "samples", "steps", "compute_seconds", "wait_seconds"])
        for (policy, shares), rounds in runs.items():
            for rnd, epochs in enumerate(rounds, 1):
                for e in epochs:
                    for x in e.get("work", []):
                        w.writerow([policy, shares, rnd, e["epoch"], "%.4f" % e["seconds"],
                                    e["test_accuracy"], x["rank"], "%.4f" % x["share"],
                                    x["samples"], x["steps"], "%.4f" % x["compute_seconds"],
                                    "%.4f" % x["wait_seconds"]])

    def figures(policy, shares):
        rounds = runs[(policy, shares)]
        every = [e["seconds"] for epochs in rounds for e in epochs]
        later = [e["seconds"] for epochs in rounds for e in epochs if e["epoch"] > 1] or every
        acc = statistics.mean(epochs[-1]["test_accuracy"] for epochs in rounds)
        return statistics.mean(every), statistics.median(later), acc

    rows = []
    for policy in policies:
        u_mean, u_med, u_acc = figures(policy, "uniform")
        a_mean, a_med, a_acc = figures(policy, "auto")
        cuts = [c for epochs in runs[(policy, "uniform")] for e in epochs
                if (c := balanced_cut(e)) is not None]
        # Under batch a rank's compute time holds its waits for the others' gradients every
        # step, so it does not tell its speed: no ideal to show there.
        ideal = statistics.median(cuts) if cuts and policy not in ("batch", "post-local") else None
        last_auto = runs[(policy, "auto")][-1][-1].get("work", [])
        rows.append({
            "policy": policy,
            "uniform_epoch_s": u_mean, "auto_epoch_s": a_mean,
            "uniform_later_median_s": u_med, "auto_later_median_s": a_med,
            "cut_mean": 1 - a_mean / u_mean, "cut_later_median": 1 - a_med / u_med,
            "balanced_cut": ideal,
            "uniform_accuracy": u_acc, "auto_accuracy": a_acc,
            "accuracy_points": 100 * (a_acc - u_acc),
            "auto_shares": " ".join("%.3f" % x["share"] for x in last_auto),
        })
    cores = os.cpu_count()
    print("\n%d cores here; 4 ranks x 1 worker: rank 0 on core 0, ranks 1-3 on core 1; "
          "%d epochs, %d round(s)" % (cores, args.epochs, args.rounds))
    header = ("| policy | uniform s/epoch | auto s/epoch | cut (mean) | cut (epochs 2+, median) "
              "| balance would cut | uniform acc | auto acc | points | auto shares (last) |")
    lines = [header, "|" + " --- |" * 10]
    for r in rows:
        ideal = "n/a" if r["balanced_cut"] is None else "%.1f%%" % (100 * r["balanced_cut"])
        lines.append("| %s | %.3f | %.3f | %.1f%% | %.1f%% | %s | %.2f%% | %.2f%% | %+.2f | %s |"
                     % (r["policy"], r["uniform_epoch_s"], r["auto_epoch_s"],
                        100 * r["cut_mean"], 100 * r["cut_later_median"],
                        ideal, 100 * r["uniform_accuracy"],
                        100 * r["auto_accuracy"], r["accuracy_points"], r["auto_shares"]))
    print("\n".join(lines))
    # What the ranks' speeds really were: other jobs on a core change them.
    notes = []
    for policy in policies:
        rates = {}
        for epochs in runs[(policy, "uniform")]:
            for e in epochs:
                for x in e.get("work", []):
                    if x["compute_seconds"] > 0:
                        rates.setdefault(x["rank"], []).append(x["samples"] / x["compute_seconds"])
        notes.append("%s, uniform: samples per compute second by rank (median over epochs): %s" %
                     (policy, ", ".join("%d: %.0f" % (q, statistics.median(v))
                                        for q, v in sorted(rates.items()))))
    print("\n".join(notes))
    for r in rows:
        ok_time = r["cut_mean"] >= 0.25
        ok_acc = abs(r["accuracy_points"]) <= 0.5
        print("%s: epoch time cut %.1f%% (target >= 25%%: %s), accuracy %+.2f points "
              "(target within 0.5: %s)" % (r["policy"], 100 * r["cut_mean"],
                                           "met" if ok_time else "missed", r["accuracy_points"],
                                           "met" if ok_acc else "missed"))
    with open(os.path.join(args.out, "summary.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        argv = [a for a in sys.argv[1:] if a != "--no-run"]
        f.write("`%s`\n\n%s\n\n%s\n" % (" ".join(["benchmarks/bench_hetero.py"] + argv),
                                        "\n".join(lines), "\n\n".join(notes)))
    plot(runs, policies, os.path.join(args.out, "hetero.png"), args.machine, args.command)


def plot(runs, policies, png, machine=None, command=None):
    """Epoch time against epochs, a panel per policy; runs: (policy, shares) -> rounds."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return
    fig, axes = plt.subplots(1, len(policies), figsize=(5.5 * len(policies), 4.6), squeeze=False)
    for ax, policy in zip(axes[0], policies):
        top = 0
        for shares in ("uniform", "auto"):
            rounds = runs.get((policy, shares), [])
            for rnd, epochs in enumerate(rounds):
                ys = [e["seconds"] for e in epochs]
                top = max([top] + ys)
                ax.plot([e["epoch"] for e in epochs], ys, marker="o",
                        color="C0" if shares == "uniform" else "C1",
                        label=("--shares %s (%d round%s)" % (shares, len(rounds),
                                                            "s" if len(rounds) > 1 else ""))
                        if rnd == 0 else None)
        ax.set_title("--sync %s" % policy, fontsize=10)
        ax.set_xlabel("epoch (passes over the training set)")
        ax.set_ylabel("epoch time (s, wall clock)")
        ax.set_ylim(0, top * 1.15 if top else None)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    finish(fig, png, "4 ranks x 1 worker of different speed: rank 0 alone on core 0, ranks 1-3 "
           "on core 1", machine, command, dpi=100)
    print("wrote %s" % png)


def read_runs_csv(path):
    """(runs, policies) from a runs.csv this script wrote: an epoch's seconds by round."""
    runs, policies = {}, []
    for r in csv.DictReader(open(path)):
        if r["policy"] not in policies:
            policies.append(r["policy"])
        rounds = runs.setdefault((r["policy"], r["shares"]), [])
        rnd, epoch = int(r["round"]), int(r["epoch"])
        while len(rounds) < rnd:
            rounds.append([])
        if not rounds[rnd - 1] or rounds[rnd - 1][-1]["epoch"] != epoch:
            rounds[rnd - 1].append({"epoch": epoch, "seconds": float(r["seconds"])})
    return runs, policies


if __name__ == "__main__":
    main()
