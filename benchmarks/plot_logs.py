#!/usr/bin/python3
"""Plots tessera JSON Lines logs (--log) of several runs together: test and
training accuracy and loss against epoch and against cumulative training
time (seconds, evaluation excluded).

    /usr/bin/python3 benchmarks/plot_logs.py lws.jsonl dmda.jsonl --out runs.png

Each run is labelled with its file name, or with --label NAME once per log.
Lines that are not epochs (the "event": "stats" line of --stats) are skipped.
"""
import argparse
import json
import os


def load(path):
    rows = []
    for line in open(path):
        line = line.strip()
        if line:
            o = json.loads(line)
            if "epoch" in o:
                rows.append(o)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--label", action="append", help="one per log, in order")
    ap.add_argument("--out", default="runs.png")
    args = ap.parse_args()
    if args.label and len(args.label) != len(args.logs):
        ap.error("give --label once per log")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    for k, path in enumerate(args.logs):
        rows = load(path)
        if not rows:
            print(f"{path}: no epoch lines, skipped")
            continue
        label = args.label[k] if args.label else os.path.splitext(os.path.basename(path))[0]
        epochs = [o["epoch"] for o in rows]
        t = 0.0
        times = []
        for o in rows:
            t += o["seconds"]
            times.append(t)
        for col, xs, xlabel in ((0, epochs, "epoch"), (1, times, "training time (s)")):
            test = [o["test_accuracy"] for o in rows]
            line, = axes[0][col].plot(xs, [100 * o["train_accuracy"] for o in rows], "--",
                                      alpha=0.6)
            if all(v is not None for v in test):
                axes[0][col].plot(xs, [100 * v for v in test], "-o", ms=3,
                                  color=line.get_color(), label=label)
            else:
                line.set_label(label + " (train)")
            axes[1][col].plot(xs, [o["loss"] for o in rows], "--", color=line.get_color(),
                              alpha=0.6)
            if all(o["test_loss"] is not None for o in rows):
                axes[1][col].plot(xs, [o["test_loss"] for o in rows], "-o", ms=3,
                                  color=line.get_color(), label=label)
            axes[1][col].set_xlabel(xlabel)
    axes[0][0].set_ylabel("accuracy (%): test solid, training dashed")
    axes[1][0].set_ylabel("loss: test solid, training dashed")
    for row in axes:
        for ax in row:
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
