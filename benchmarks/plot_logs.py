#!/usr/bin/python3
"""Plots tessera JSON Lines logs (--log) of several runs together: test and
training accuracy and loss against epoch and against cumulative training
time (seconds, evaluation excluded).

    /usr/bin/python3 benchmarks/plot_logs.py lws.jsonl dmda.jsonl --out runs.png

Each run is labelled with its file name, or with --label NAME once per log.
The logs are read with the tessera package (python/tessera/log.py): lines that
are not epochs (--stats, the ranks' summary) are left out.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import tessera  # noqa: E402
from outdir import add_out_arguments, resolve_out  # noqa: E402
from plotting import add_title_arguments, finish  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--label", action="append", help="one per log, in order")
    add_out_arguments(ap, "FILE.png")
    add_title_arguments(ap)
    args = ap.parse_args()
    resolve_out(ap, args, "plot-logs", file="runs.png")
    if args.label and len(args.label) != len(args.logs):
        ap.error("give --label once per log")
    try:
        import matplotlib
    except ImportError:
        sys.exit("plot_logs.py needs matplotlib: apt-get install python3-matplotlib "
                 "(scripts/setup.sh installs it)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    models = set()
    for k, path in enumerate(args.logs):
        log = tessera.read_log(path)
        if not log.epochs:
            print(f"{path}: no epoch lines, skipped")
            continue
        models.update(m for m in log.column("model") if m)
        label = args.label[k] if args.label else os.path.splitext(os.path.basename(path))[0]
        test_acc, test_loss = log.column("test_accuracy"), log.column("test_loss")
        for col, xs in ((0, log.column("epoch")), (1, log.elapsed())):
            line, = axes[0][col].plot(xs, [100 * v for v in log.column("train_accuracy")], "--",
                                      alpha=0.6)
            if all(v is not None for v in test_acc):
                axes[0][col].plot(xs, [100 * v for v in test_acc], "-o", ms=3,
                                  color=line.get_color(), label=label)
            else:
                line.set_label(label + " (train)")
            axes[1][col].plot(xs, log.column("loss"), "--", color=line.get_color(), alpha=0.6)
            if all(v is not None for v in test_loss):
                axes[1][col].plot(xs, test_loss, "-o", ms=3, color=line.get_color(), label=label)
    for col, xlabel in ((0, "epoch (passes over the training set)"),
                        (1, "training time (s), evaluation excluded")):
        axes[1][col].set_xlabel(xlabel)
    axes[0][0].set_ylabel("accuracy (%)")
    axes[1][0].set_ylabel("loss (cross-entropy, nats)")
    axes[0][1].set_ylabel("accuracy (%)")
    axes[1][1].set_ylabel("loss (cross-entropy, nats)")
    for row in axes:
        for ax in row:
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=8)
    finish(fig, args.out, "tessera runs: %s (test solid, training dashed)" % (", ".join(sorted(models)) or "no epochs"),
           args.machine, args.command)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
