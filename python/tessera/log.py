"""tessera's JSON Lines logs (`tessera train --log FILE.jsonl`, src/io/log.c) read in Python.

Each line is one JSON object, written whole:

- an epoch line per epoch: {"epoch": E, "loss", "train_accuracy", "test_loss",
  "test_accuracy" (null without a test set), "seconds", "eval_seconds", "samples_per_s",
  "ranks", "sync", traffic counters, "work" (per rank), "model", "sched", "optimizer", "lr",
  "lr_end", "batch", ...};
- event lines, {"event": NAME, ...}: "run" (the first line: version, command line, hosts,
  start time, libraries, "config" with every option), "step" (--log-every N: loss, accuracy,
  lr, samples/s every N steps), "eval" (--eval-every N: the validation or test loss, accuracy,
  samples and tokens so far every N steps), "stats" (--stats: per-worker times and task counts, buses),
  "ranks" (under mpirun, at the end: each rank's time, traffic and work), and whatever later
  versions add: every line with an "event" is kept under its name.

JSON has no NaN or infinity: tessera writes a number that is not finite as the string "nan",
"inf" or "-inf"; read_log turns those back into floats.
"""
import json
import math

_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
# Keys whose values are words, never numbers written as strings.
_WORDS = {"event", "model", "sched", "optimizer", "sync", "mpi_progress", "grid", "name",
          "src_name", "dst_name", "lr_schedule", "command", "host", "version"}


def _numbers(o, key=None):
    if isinstance(o, dict):
        return {k: _numbers(v, k) for k, v in o.items()}
    if isinstance(o, list):
        return [_numbers(v, key) for v in o]
    if isinstance(o, str) and key not in _WORDS and o in _NONFINITE:
        return _NONFINITE[o]
    return o


class Log:
    """A log's lines. lines: every object in file order; epochs: the epoch lines;
    events: dict event name -> its lines in order. stats and ranks: the last "stats" and
    "ranks" lines (None without). run: the "run" line, where the log has one."""

    def __init__(self, lines, path="<log>"):
        self.path = path
        self.lines = lines
        self.epochs = [o for o in lines if "event" not in o and "epoch" in o]
        self.events = {}
        for o in lines:
            if "event" in o:
                self.events.setdefault(o["event"], []).append(o)

    def event(self, name):
        """The lines of event NAME, in order ([] when none)."""
        return self.events.get(name, [])

    def _last(self, name):
        e = self.event(name)
        return e[-1] if e else None

    @property
    def stats(self):
        return self._last("stats")

    @property
    def ranks(self):
        return self._last("ranks")

    @property
    def run(self):
        return self._last("run")

    def column(self, key, default=None):
        """The values of key in every epoch line, in order (default where a line lacks it)."""
        return [o.get(key, default) for o in self.epochs]

    def elapsed(self):
        """The cumulative training time at the end of each epoch (the sum of "seconds", which
        leaves evaluation out)."""
        t, out = 0.0, []
        for o in self.epochs:
            t += o.get("seconds") or 0.0
            out.append(t)
        return out

    def __len__(self):
        return len(self.epochs)

    def __repr__(self):
        return "Log(%r: %d epochs, events %s)" % (self.path, len(self.epochs),
                                                  sorted(self.events) or "none")


def read_log(path):
    """Reads a tessera JSON Lines log into a Log. Blank lines are skipped; a line that is not
    a JSON object raises ValueError naming the file and line."""
    lines = []
    with open(path) as f:
        for number, text in enumerate(f, 1):
            text = text.strip()
            if not text:
                continue
            try:
                o = json.loads(text)
            except ValueError as e:
                raise ValueError("%s:%d: not a JSON object: %s" % (path, number, e)) from None
            if not isinstance(o, dict):
                raise ValueError("%s:%d: not a JSON object" % (path, number))
            lines.append(_numbers(o))
    return Log(lines, path)
