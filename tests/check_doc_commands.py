#!/usr/bin/env python3
"""check_doc_commands.py SOURCE_ROOT BUILD_DIR [--list]: every shell command of the docs is run
or says why not.

The commands are the lines of the fenced code blocks tagged sh, bash or console in README.md and
docs/*.md (in a console block, the lines after a `$ ` prompt), with backslash-continued lines
joined and a trailing `# comment` dropped. A block that starts with `#!` is a listing of a script,
not commands: each of its lines must be a line of the file the table names (the listing may
leave lines out, never change one). Each command must be in COMMANDS below, as written:

- RUN: the test runs it, with `append` (options added at the end; tessera's and the Python
  scripts' options take the last value given, so `--epochs 1` after `--epochs 4` shortens the
  run) or `replace` (the command run instead, for a template filled in), after `before` (shell
  commands making a fixture) with `files` written first (a file's text taken from a block of the
  docs, so the fixture is the docs' own). `why` says what the shortening changes.
- NOT_RUN: with the reason.

The commands run in the order of the pages (README.md, then docs/ by name; each page top to
bottom) in one temporary folder, which holds links to the build (build/) and the checkout's
benchmarks/ and python/, so that a page's later commands find what its earlier ones wrote
(run.st, run2.json) as a reader's would. StarPU's folder is a copy of $STARPU_HOME in that
folder, so that removing the planner's rates or calibrating touches no other test's. The test
fails naming the file and line of a command that is in neither list, an entry that matches no
command any more (stale), and a RUN command that exits non-zero (with its output's tail).
--list prints every command with its verdict and runs nothing.
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

SHORT = "--epochs 1 --train-limit 512 --test-limit 128"
SHORT_WHY = "shortened: 1 epoch of 512 training and 128 test images"
LIMIT_WHY = "shortened: 512 training, 128 test images"
GPT_SHORT = "--epochs 1 --train-limit 16 --test-limit 16 --batch 16"
GPT_WHY = "shortened: 1 epoch of 16 windows (one step), 16 test windows"
PY_PREAMBLE = 'import sys; sys.path.insert(0, "python")\nimport tessera\n'


def RUN(cmd, append="", replace=None, before=None, files=None, env=None, why=""):
    return cmd, dict(kind="run", append=append, replace=replace, before=before,
                     files=files or {}, env=env or {}, why=why)


def NOT_RUN(cmd, reason):
    return cmd, dict(kind="not run", reason=reason)


def BLOCK(page, first_line):
    """A fenced block of a page, by its first line: (page, first line), read when run."""
    return ("block", page, first_line)


# Reasons used more than once.
SUITE = "runs the whole test suite (minutes; this test among them)"
SLURM = "needs a Slurm cluster (the slurm suite's test runs scripts/tessera.sbatch on a local one)"
RANKS4 = ("needs more cores than this 2-core machine: mpirun -np 4 or more without "
          "--oversubscribe (the mpi suite tests the policy and the grid on 2 to 4 ranks)")
OPENCL = ("needs an OpenCL device (the tests run CPU workers only, STARPU_NOPENCL=0; the "
          "opencl-cli test runs the device path where there is one)")
LAUNCH = ("another 2-rank launch like README.md's `--sync batch` line, which runs; the policy "
          "itself is tested under mpirun by the mpi suite (tests/mpi/)")

COMMANDS = dict([
    # README.md
    NOT_RUN("scripts/run-main.sh", "installs packages with apt, builds, trains 10 epochs"),
    NOT_RUN("scripts/run-tests.sh", SUITE),
    RUN("build/tessera train", append=SHORT, why=SHORT_WHY),
    RUN("build/tessera train --model cnn --epochs 2 --log cnn.jsonl", append=SHORT, why=SHORT_WHY),
    RUN("build/tessera train --model mlp:1024,256 --optimizer adam --epochs 5 --batch 128",
        append=SHORT, why=SHORT_WHY),
    RUN("mpirun -np 2 --oversubscribe build/tessera train --workers 1 --sync batch",
        append=SHORT, why=SHORT_WHY),
    NOT_RUN("mpirun -np 2 --oversubscribe build/tessera train --workers 1 --sync epoch", LAUNCH),
    NOT_RUN("mpirun -np 2 --oversubscribe build/tessera train --workers 1 --sync every=8 "
            "--outer slowmo", LAUNCH),
    NOT_RUN("/usr/bin/python3 benchmarks/compare_sync.py --configs batch,every=8,every=8+slowmo,"
            "epoch,epoch+nesterov --seeds 1 --epochs 3 --out /tmp/sync",
            "takes long: 5 configurations x 3 epochs of 60,000 images on 2 ranks, and it has no "
            "option to train on fewer images"),
    RUN("build/tessera train --epochs 1 --train-limit 5000 --trace run.json --stats",
        append="--train-limit 512 --test-limit 128", why=LIMIT_WHY),
    RUN("mpirun -np 2 --oversubscribe build/tessera train --workers 1 --epochs 1 "
        "--train-limit 2000 --trace run2.json", append="--train-limit 512 --test-limit 128",
        why=LIMIT_WHY),
    RUN("build/tessera trace-summary run2.json"),
    RUN("build/tessera train --epochs 4 --checkpoint run.st", append=SHORT, why=SHORT_WHY),
    RUN("build/tessera train --checkpoint run.st --resume run.st",
        append="--train-limit 512 --test-limit 128",
        why="the images of the run it resumes; its checkpoint holds all its epochs (it was not "
            "stopped), so this says there is nothing left to train and exits 0"),
    RUN("build/tessera train --epochs 4 --checkpoint run.st --resume auto",
        append="--epochs 2 --train-limit 512 --test-limit 128",
        why="shortened to 2 epochs: resumes the 1-epoch checkpoint and trains epoch 2"),
    RUN("build/tessera inspect run.st"),
    RUN("build/tessera eval --checkpoint run.st"),
    RUN("/usr/bin/python3 benchmarks/load_checkpoint.py run.st"),
    RUN("build/tessera train --model gpt:4,256,4,128 --optimizer adamw --clip-grad 1 "
        "--eval-every 200 --checkpoint gpt.st --log gpt.jsonl", append=GPT_SHORT, why=GPT_WHY),
    RUN("build/tessera eval --checkpoint gpt.st", append="--test-limit 16 --batch 16",
        why="shortened: 16 test windows, in batches of 16 (at its default batch of 256 a GPT's "
            "evaluation takes 15 s whatever the windows)"),
    RUN("build/tessera generate --checkpoint gpt.st --prompt 'The ' --tokens 200",
        append="--tokens 20", why="shortened: 20 bytes"),
    RUN("build/tessera plan --ranks 8"),
    RUN("build/tessera plan --model cnn --batch 128 --ranks 512 "
        "--cluster benchmarks/clusters/ib100.ini"),
    # docs/checkpoints.md
    RUN("build/tessera train --epochs 10 --checkpoint run.st", append=SHORT, why=SHORT_WHY),
    RUN("build/tessera train --epochs 10 --checkpoint run.st --resume auto",
        append="--epochs 2 --train-limit 512 --test-limit 128",
        why="shortened to 2 epochs: resumes the 1-epoch checkpoint and trains epoch 2"),
    RUN("build/tessera eval --checkpoint run.st [--data DIR] [--json]",
        replace="build/tessera eval --checkpoint run.st --json",
        why="the template filled: --data left at its default, --json given"),
    # docs/distributed.md
    NOT_RUN("mpirun -np 2 --oversubscribe --allow-run-as-root build/tessera train --workers 1 "
            "--sync batch", "README.md's same line without --allow-run-as-root runs (this test "
            "allows root to mpirun through OMPI_ALLOW_RUN_AS_ROOT)"),
    RUN("mpirun -np 2 --oversubscribe --allow-run-as-root build/tessera train --model resnet20 "
        "--workers 1 --sync epoch --bn-recompute 16 --epochs 2 --seed 1 --train-limit 3000",
        append=SHORT, why=SHORT_WHY),
    NOT_RUN("mpirun -np 4 build/tessera train --sync epoch=2 --sync-state --log run.jsonl", RANKS4),
    NOT_RUN("mpirun -np 8 build/tessera train --sync every=8 --outer slowmo", RANKS4),
    NOT_RUN("mpirun -np 16 build/tessera train --sync hier:4,32 --outer nesterov", RANKS4),
    NOT_RUN("/usr/bin/python3 benchmarks/compare_sync.py",
            "takes long: every configuration x 3 seeds, each a 10-epoch training of 60,000 "
            "images on 2 ranks"),
    NOT_RUN("sbatch --nodes=4 --ntasks-per-node=2 --cpus-per-task=16 scripts/tessera.sbatch "
            "--epochs 20 --sync batch", SLURM),
    NOT_RUN("TESSERA=$PWD/build/tessera sbatch scripts/tessera.sbatch", SLURM),
    NOT_RUN("sbatch --requeue scripts/tessera.sbatch --epochs 20 --checkpoint run.st --resume auto",
            SLURM),
    # docs/grid.md
    NOT_RUN("mpirun -np 4 build/tessera train --grid 2x2 --model mlp:1024,1024 --log run.jsonl",
            RANKS4),
    NOT_RUN("mpirun -np 4 build/tessera train --grid 4x1 --model cnn", RANKS4),
    NOT_RUN("mpirun -np 2 build/tessera train --grid 2x1 --domain rows --model cnn",
            "a third 2-rank training (3 s shortened): this test keeps to two; the mpi suite's "
            "domain tests (tests/mpi/domain.c) train --grid 2x1 --domain rows"),
    NOT_RUN("mpirun -np 4 build/tessera train --grid 4x1 --domain rows --model resnet20", RANKS4),
    NOT_RUN("STARPU_COMM_STATS=1 mpirun -np 4 -x STARPU_COMM_STATS build/tessera train --grid 2x2 "
            "--epochs 2 --train-limit 4000 --test-limit 1000 --model mlp:256,128 --log g.jsonl",
            RANKS4),
    # docs/language-models.md
    NOT_RUN("build/tessera train --model gpt:4,256,4,128 --optimizer adamw --clip-grad 1 "
            "--eval-every 200 --checkpoint gpt.st",
            "README.md's line, the same but for --log, runs (5-10 s here even shortened); the "
            "eval and generate below read its gpt.st"),
    RUN("build/tessera eval --checkpoint gpt.st [--text FILE[,FILE...]] [--json]",
        replace="build/tessera eval --checkpoint gpt.st --json --test-limit 16 --batch 16",
        why="the template filled: --text left at its default, --json given; shortened as "
            "README.md's eval of gpt.st"),
    RUN("build/tessera generate --checkpoint gpt.st --prompt 'The meaning of life is' --tokens 300",
        append="--tokens 20", why="shortened: 20 bytes"),
    # docs/opencl.md
    NOT_RUN("STARPU_OPENCL_ON_CPUS=1 build/tessera info", OPENCL),
    NOT_RUN("STARPU_OPENCL_ON_CPUS=1 build/tessera train --devices opencl:1 --workers 1 --stats",
            OPENCL),
    RUN("build/tessera train --devices none", append=SHORT, why=SHORT_WHY),
    # docs/planning.md
    RUN("build/tessera plan --model mlp:4096,4096 --ranks 64 --grid 4x16 --sync batch --json"),
    RUN("mpirun -np 2 --oversubscribe --allow-run-as-root build/tessera plan --calibrate"),
    NOT_RUN("/usr/bin/python3 benchmarks/validate_plan.py",
            "takes long: 17 tessera train runs of 2 epochs on 1 and 2 ranks against the "
            "planner (minutes)"),
    NOT_RUN("/usr/bin/python3 benchmarks/validate_plan.py --node-size 2 --only two-level",
            "takes long: 4-rank tessera train runs against the planner (minutes)"),
    NOT_RUN("/usr/bin/python3 benchmarks/validate_plan.py --crossover --only alexnet --samples 96 "
            "--epochs 3", "takes long: four 2-rank AlexNet runs at 224x224x3 (2 minutes)"),
    RUN("/usr/bin/python3 benchmarks/plan_table.py",
        append="--clusters eth10 --nodes 16 --out plan-table",
        why="shortened: one cluster, one node count; --out here instead of benchmarks/out/ in the "
            "checkout"),
    RUN("build/tessera plan --model resnet50 --input 224x224x3 --classes 1000 --batch 64 "
        "--ranks 8192 --cluster ib100"),
    RUN("build/tessera plan --model googlenet --input 224x224x3 --batch 8 --sync batch --layers",
        append="--cluster ib100",
        why="on a described machine: this one's would time every convolution's rates first"),
    NOT_RUN("/usr/bin/python3 benchmarks/plan_layers.py --model resnet20 --input 32x32x3 "
            "--batch 64", "trains and traces 12 steps of ResNet-20 after timing its "
            "convolutions' rates for the plan (about a minute)"),
    RUN("/usr/bin/python3 benchmarks/plan_table.py --models alexnet,vgg16,resnet50,googlenet "
        "--batches 64 --samples 1281167", append="--clusters eth10 --nodes 16 --out plan-zoo",
        why="shortened: one cluster, one node count; --out here instead of benchmarks/out/"),
    RUN("rm -f ${STARPU_HOME:-$HOME/.starpu}/tessera-plan-rates.txt",
        why="in this test's own copy of $STARPU_HOME"),
    RUN("mpirun -np 2 --oversubscribe build/tessera plan --calibrate"),
    # docs/python.md
    RUN("build/tessera eval --checkpoint torch.st",
        files={"torch_model.py": BLOCK("docs/python.md", "from torch import nn")},
        before="/usr/bin/python3 torch_model.py",
        why="torch.st and torch.ini written first by the page's Python block above it"),
    RUN("build/tessera train --model torch.ini --train-limit 2000 --epochs 3 --resume torch.st"),
    # docs/schedulers.md
    RUN("build/tessera train --sched dmdas --stats --log run.jsonl", append=SHORT, why=SHORT_WHY),
    RUN("build/tessera train --epochs 1 --train-limit 5000 --trace run.json",
        append="--train-limit 512 --test-limit 128", why=LIMIT_WHY),
    RUN("build/benchmarks/custom_sched train --sched critical-first", append=SHORT, why=SHORT_WHY),
    NOT_RUN("/usr/bin/python3 benchmarks/sweep_sched.py",
            "takes long: schedulers x tile sizes x worker counts on the MLP and the CNN, a "
            "training each (tens of minutes)"),
    RUN("/usr/bin/python3 benchmarks/plot_logs.py a.jsonl b.jsonl --out runs.png",
        before="cp run.jsonl a.jsonl && cp cnn.jsonl b.jsonl",
        why="a.jsonl and b.jsonl: the logs of the --sched dmdas run above and of README.md's CNN"),
    NOT_RUN("mpirun -np 2 --oversubscribe build/tessera train --workers 1 --sync batch --epochs 1 "
            "--train-limit 2000 --stats --trace t.json --log l.jsonl", LAUNCH),
    RUN("build/tessera trace-summary --top 5 t.json", before="cp run2.json t.json",
        why="t.json: the 2-rank trace of README.md's mpirun --trace line"),
    # docs/shares.md
    NOT_RUN("mpirun -np 4 build/tessera train --workers 1 --sync epoch --weighting samples "
            "--shares auto", RANKS4),
    NOT_RUN("mpirun -np 4 build/tessera train --workers 1 --sync batch --shares 3,1,1,1", RANKS4),
    NOT_RUN("/usr/bin/python3 benchmarks/bench_hetero.py",
            "takes long: 4 ranks on 2 cores, trainings under each policy with uniform and "
            "measured shares (minutes)"),
    # docs/testing.md
    NOT_RUN("scripts/run-tests.sh train grad conv", "runs other tests of the suite (minutes)"),
    NOT_RUN("scripts/run-tests.sh --suite mpi", "runs the mpi suite (minutes)"),
    NOT_RUN("scripts/run-tests.sh --no-suite fuzz", SUITE),
    NOT_RUN("scripts/run-sanitized.sh", "builds build-san/ and runs the whole suite under the "
            "sanitizers (tens of minutes)"),
    NOT_RUN("scripts/run-sanitized.sh checkpoint", "builds build-san/ under the sanitizers "
            "(minutes)"),
    NOT_RUN("tests/fuzz/run.sh 60", "builds the harnesses with clang and runs each for 60 s (the "
            "fuzz test runs each for 5 s)"),
    NOT_RUN("tests/fuzz/run.sh 600 safetensors", "runs a harness for 10 minutes"),
    # docs/training.md
    RUN("build/tessera train --model mlp:1024,256 --optimizer adam --epochs 5 --log run.jsonl",
        append=SHORT, why=SHORT_WHY),
    RUN("build/tessera train --model my-model.ini --data DIR --tile 64x256 --sched dmda",
        replace="build/tessera train --model my-model.ini --data /usr/share/datasets/fashion-mnist "
                "--tile 64x256 --sched dmda " + SHORT,
        files={"my-model.ini": BLOCK("docs/training.md", "[hidden1]")},
        why="the template filled: my-model.ini is the page's first model file, DIR Fashion-MNIST; "
            + SHORT_WHY),
])

# Listings of scripts (blocks that start with #!): page -> the file they show.
LISTINGS = {"docs/distributed.md": "scripts/tessera.sbatch"}

SHELL_TAGS = {"sh", "bash", "console", "shell"}


def strip_comment(line):
    """line without a trailing `# comment` (a # after a blank, outside quotes)."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip()
    return line.rstrip()


def blocks(path):
    """(tag, first line number, [(line number, text)]) of each fenced block of path."""
    fence, out = None, []
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        m = re.match(r"\s*(```+|~~~+)\s*(\S*)", line)
        if m and fence is None:
            fence, tag, start, body = m.group(1), m.group(2).lower(), n, []
        elif m and line.strip().startswith(fence) and not m.group(2):
            out.append((tag, start, body))
            fence = None
        elif fence is not None:
            body.append((n, line.rstrip("\n")))
    return out


def commands(path):
    """(line number, command) of the shell blocks of path; listings come back as ('#!', ...)."""
    out = []
    for tag, start, body in blocks(path):
        if tag not in SHELL_TAGS:
            continue
        if body and body[0][1].startswith("#!"):
            out.append((start, ("#!", [text for _, text in body])))
            continue
        pending, first = "", None
        for n, text in body:
            if tag == "console":
                if not (text.startswith("$ ") or pending):
                    continue
                text = text[2:] if not pending else text
            text = strip_comment(text)
            if not text.strip() and not pending:
                continue
            first = first or n
            if text.endswith("\\"):
                pending += text[:-1].rstrip() + " "
                continue
            cmd = " ".join((pending + text).split())
            out.append((first, cmd))
            pending, first = "", None
    return out


def block_text(root, ref):
    _, page, first_line = ref
    for tag, start, body in blocks(os.path.join(root, page)):
        if body and body[0][1].strip() == first_line:
            text = "\n".join(t for _, t in body) + "\n"
            return (PY_PREAMBLE + text) if tag == "python" else text
    raise SystemExit(f"check_doc_commands.py: no block of {page} starts with {first_line!r}")


def check_listing(root, page, line, lines):
    target = LISTINGS.get(page)
    if target is None:
        return [f"{page}:{line}: a listing (#!) that LISTINGS in tests/check_doc_commands.py "
                "does not name a file for"]
    have = set(l.rstrip("\n") for l in open(os.path.join(root, target), encoding="utf-8"))
    return [f"{page}:{line}: the listing's line {l!r} is not in {target}"
            for l in lines if l.strip() and not l.lstrip().startswith("#") and l not in have]


def tail(text, n=25):
    return "\n".join(text.rstrip().split("\n")[-n:])


def main():
    args = [a for a in sys.argv[1:] if a != "--list"]
    listing = "--list" in sys.argv[1:]
    if len(args) != 2:
        raise SystemExit(__doc__.split("\n\n")[0])
    root, build = (os.path.abspath(a) for a in args)
    pages = ["README.md"] + sorted(os.path.relpath(p, root)
                                   for p in glob.glob(os.path.join(root, "docs", "*.md")))
    found = [(page, n, c) for page in pages for n, c in commands(os.path.join(root, page))]

    errors, used = [], set()
    for page, n, c in found:
        if isinstance(c, tuple):
            errors += check_listing(root, page, n, c[1])
        elif c not in COMMANDS:
            errors.append(f"{page}:{n}: `{c}` is in no list: add it to COMMANDS in "
                          "tests/check_doc_commands.py, as RUN (how) or NOT_RUN (why)")
        else:
            used.add(c)
    errors += [f"tests/check_doc_commands.py: stale entry, in no page any more: `{c}`"
               for c in COMMANDS if c not in used]
    if listing:
        for page, n, c in found:
            if not isinstance(c, tuple):
                e = COMMANDS.get(c, {"kind": "missing"})
                print(f"{page}:{n}: [{e['kind']}] {c}\n    {e.get('reason') or e.get('why') or ''}")
    if errors or listing:
        print("\n".join(errors))
        return 1 if errors else 0

    tmp = tempfile.mkdtemp(prefix="tsr-doc-commands-")
    try:
        return run_all(root, build, tmp, found)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_all(root, build, tmp, found):
    os.symlink(build, os.path.join(tmp, "build"))
    for d in ("benchmarks", "python"):
        os.symlink(os.path.join(root, d), os.path.join(tmp, d))
    home = os.path.join(tmp, "starpu-home")
    if os.path.isdir(os.environ.get("STARPU_HOME", "")):
        shutil.copytree(os.environ["STARPU_HOME"], home, symlinks=True)
    else:
        os.makedirs(home)
    env = dict(os.environ, STARPU_HOME=home, STARPU_SILENT="1", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.setdefault("TSR_DATA_DIR", "/usr/share/datasets/fashion-mnist")

    failed, ran, start = 0, 0, time.time()
    for page, n, c in found:
        e = COMMANDS.get(c) if not isinstance(c, tuple) else None
        if not e or e["kind"] != "run":
            continue
        for name, text in e["files"].items():
            if isinstance(text, tuple):
                text = block_text(root, text)
            with open(os.path.join(tmp, name), "w", encoding="utf-8") as f:
                f.write(text)
        cmd = e["replace"] or (c + (" " + e["append"] if e["append"] else ""))
        script = (e["before"] + " && " if e["before"] else "") + cmd
        t0 = time.time()
        try:
            p = subprocess.run(["bash", "-c", script], cwd=tmp, env=dict(env, **e["env"]),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               errors="replace", timeout=120)
            rc, out = p.returncode, p.stdout
        except subprocess.TimeoutExpired as x:
            rc, out = "timeout (120 s)", (x.stdout or b"").decode(errors="replace")
        ran += 1
        status = "ok" if rc == 0 else f"FAILED, exit {rc}"
        print(f"{page}:{n}: {status} ({time.time() - t0:.1f} s): {script}", flush=True)
        if rc != 0:
            failed += 1
            print("    " + tail(out).replace("\n", "\n    "))
    print(f"{ran} commands run in {time.time() - start:.0f} s, {failed} failed; "
          f"{sum(1 for e in COMMANDS.values() if e['kind'] == 'not run')} not run (with reasons)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
