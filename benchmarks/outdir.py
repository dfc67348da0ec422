"""Where a benchmark writes: --out DIR, by default a new folder benchmarks/out/NAME-TIMESTAMP
(UTC, to the second; benchmarks/out/ is not committed), never over the committed results in
benchmarks/results/ unless --force says so (regenerating a committed table or plot on purpose).

    from outdir import add_out_arguments, resolve_out
    add_out_arguments(parser)          # --out DIR, --force
    args = parser.parse_args()
    resolve_out(parser, args, "scaling")   # args.out: the folder, created
"""
import os
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
OUT = os.path.join(HERE, "out")


def add_out_arguments(parser, what="DIR"):
    parser.add_argument("--out", metavar=what, default=None,
                        help="where to write [a new folder benchmarks/out/NAME-TIMESTAMP]; a "
                             "folder of benchmarks/results/ (committed) only with --force")
    parser.add_argument("--force", action="store_true",
                        help="allow --out inside benchmarks/results/, over committed results")


def default_out(name, now=None):
    """benchmarks/out/NAME-YYYYmmdd-HHMMSS (UTC), -2, -3, ... when that exists already."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now))
    path = os.path.join(OUT, "%s-%s" % (name, stamp))
    k = 2
    while os.path.exists(path):
        path = os.path.join(OUT, "%s-%s-%d" % (name, stamp, k))
        k += 1
    return path


def is_committed(path):
    """Whether path is benchmarks/results/ or inside it."""
    real, results = os.path.realpath(path), os.path.realpath(RESULTS)
    return real == results or real.startswith(results + os.sep)


def resolve_out(parser, args, name, file=None, create=True):
    """Sets args.out: the default folder when not given; refuses (parser.error, exit 2) a path
    inside benchmarks/results/ without args.force. file: args.out names a file (its folder is
    checked and created); else a folder, created when create."""
    if args.out is None:
        folder = default_out(name)
        args.out = os.path.join(folder, file) if file else folder
    if is_committed(args.out) and not getattr(args, "force", False):
        parser.error("--out %s is inside benchmarks/results/, the committed results; give "
                     "another folder, or --force to write over them on purpose" % args.out)
    folder = os.path.dirname(args.out) if file else args.out
    if create and folder:
        os.makedirs(folder, exist_ok=True)
    return args.out


class _Tee:
    """A stream that writes to two: the terminal and the report file."""

    def __init__(self, *streams):
        self.streams = streams

    def write(self, text):
        for s in self.streams:
            s.write(text)
        return len(text)

    def flush(self):
        for s in self.streams:
            s.flush()


def tee_stdout(folder, name="report.txt"):
    """For a benchmark that prints its results: from now on stdout is also written to
    folder/name (the command line first), so that --out holds what it printed."""
    import sys
    path = os.path.join(folder, name)
    report = open(path, "w")
    report.write("$ %s\n" % " ".join(sys.argv))
    sys.stdout = _Tee(sys.stdout, report)
    return path
