"""What makes a benchmark's plot readable alone: a title that says what was measured, on which
machine and by which command; axis labels with units; a legend on every panel; axes whose
limits hold every series. Shared by the benchmark scripts' plots.

    from plotting import machine_text, command_text, finish
    finish(fig, path, "what", machine_text(), command_text())
"""
import os
import platform
import shlex
import sys


def machine_text():
    """"N cores, CPU MODEL, HOST": this machine, for a title."""
    model = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return "%d cores, %s, %s" % (os.cpu_count() or 1, " ".join(model.split()), platform.node())


def command_text(argv=None):
    """The command that ran, as typed from the repository root."""
    argv = list(sys.argv if argv is None else argv)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = os.path.relpath(os.path.abspath(argv[0]), repo) if argv else "?"
    return " ".join(["/usr/bin/python3", script] + [shlex.quote(a) for a in argv[1:]])


def add_title_arguments(parser):
    """--machine and --command: the title's texts when replotting results measured elsewhere
    (defaults: this machine, this command)."""
    parser.add_argument("--machine", default=None, help="the machine named in the plot's title "
                        "[this one]")
    parser.add_argument("--command", default=None, help="the command named in the plot's title "
                        "[this one]")


def finish(fig, path, what, machine=None, command=None, dpi=110):
    """Titles fig (what, the machine, the command), lays it out without clipping and saves it."""
    machine = machine or machine_text()
    command = command or command_text()
    fig.suptitle("%s\n%s\n%s" % (what, machine, command), fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.88))
    fig.savefig(path, dpi=dpi)
