#!/usr/bin/env python3
"""cli_docs.py TESSERA man|bash OUT: the man page or the bash completion of the tessera command,
made from its own help text (`tessera --help` and `tessera CMD --help`), so neither can say
other options than the command takes. meson runs it at build time (src/cli/meson.build); the
cli test checks that both list every option of every command's --help.

A help text reads: a usage line, paragraphs, and option lines "  --name ARG   text" (the option
part ends at two spaces), their text continued on lines indented further.
"""
import re
import subprocess
import sys

OPTION = re.compile(r"^  (-\S.*?)(?:\s{2,}(.*))?$")
COMMAND = re.compile(r"^  ([a-z][a-z-]*)\s{2,}(.*)$")


def run(exe, *args):
    return subprocess.run([exe, *args], check=True, capture_output=True, text=True).stdout


def commands(exe):
    """[(name, summary)] from the top-level help's command list."""
    out, seen = [], False
    for line in run(exe, "--help").splitlines():
        if line.strip() == "commands:":
            seen = True
            continue
        m = COMMAND.match(line) if seen else None
        if m:
            out.append((m.group(1), m.group(2)))
        elif seen and not line.strip():
            break
    return out


def parse(text):
    """A help text as (usage lines, [paragraph | (option, description)])."""
    usage, blocks, para = [], [], []
    for line in text.splitlines():
        m = OPTION.match(line)
        if line.startswith(("usage:", "       ")) and not blocks and not para:
            usage.append(line.replace("usage:", "", 1).strip())
        elif m:
            if para:
                blocks.append(" ".join(para))
                para = []
            blocks.append((m.group(1), m.group(2) or ""))
        elif line.startswith("      ") and blocks and isinstance(blocks[-1], tuple):
            opt, desc = blocks[-1]
            blocks[-1] = (opt, (desc + " " + line.strip()).strip())
        elif line.strip():
            para.append(line.strip())
        elif para:
            blocks.append(" ".join(para))
            para = []
    if para:
        blocks.append(" ".join(para))
    return usage, blocks


def options(text):
    """Every option name (--name, -h) of a help text."""
    names = []
    for block in parse(text)[1]:
        if isinstance(block, tuple):
            names += re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", block[0])
    return names


def roff(s):
    s = s.replace("\\", "\\e").replace("-", "\\-")
    return "\\&" + s if s.startswith((".", "'")) else s


def man(exe):
    version = run(exe, "--version").splitlines()[0].split()[1]
    top_usage, top = parse(run(exe, "--help"))
    out = ['.TH TESSERA 1 "" "tessera %s" "User Commands"' % version,
           ".SH NAME", "tessera \\- train neural networks as StarPU task graphs",
           ".SH SYNOPSIS"]
    for u in top_usage:
        out += [".B " + roff(u), ".br"]
    out += [".SH DESCRIPTION"]
    for block in top:
        if isinstance(block, str) and not block.startswith("commands:"):
            out += [".PP", roff(block)]
    out += [".SH COMMANDS"]
    for name, summary in commands(exe):
        usage, blocks = parse(run(exe, name, "--help"))
        out += [".SS " + roff(name), roff(summary) + ".", ".PP"]
        for u in usage:
            out += [".B " + roff(u), ".br"]
        for block in blocks:
            if isinstance(block, tuple):
                out += [".TP", ".B " + roff(block[0]), roff(block[1])]
            else:
                out += [".PP", roff(block)]
    out += [".SH ENVIRONMENT", ".TP", ".B STARPU_SILENT",
            "tessera silences StarPU's own messages unless \\-\\-verbose is given; set to 0 or 1 "
            "to decide yourself.",
            ".SH SEE ALSO", "The documentation in the source tree: README.md and docs/*.md "
            "(training.md for every option)."]
    return "\n".join(out) + "\n"


def bash(exe):
    cmds = commands(exe)
    cases = []
    for name, _ in cmds:
        text = run(exe, name, "--help")
        files = []
        for block in parse(text)[1]:
            if isinstance(block, tuple) and re.search(r"FILE|DIR", block[0]):
                files += re.findall(r"--[\w-]+", block[0])
        cases.append("    %s)\n      opts='%s'\n      files='%s'\n      ;;" %
                     (name, " ".join(options(text)), " ".join(files)))
    return """# bash completion for tessera, made from its help text by src/cli/cli_docs.py
_tessera() {
  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]} opts files
  if ((COMP_CWORD == 1)); then
    mapfile -t COMPREPLY < <(compgen -W '%s --help --version' -- "$cur")
    return
  fi
  case ${COMP_WORDS[1]} in
%s
    *) return ;;
  esac
  if [[ " $files " == *" $prev "* ]]; then
    mapfile -t COMPREPLY < <(compgen -f -- "$cur")
  elif [[ $cur == -* ]]; then
    mapfile -t COMPREPLY < <(compgen -W "$opts" -- "$cur")
  else
    mapfile -t COMPREPLY < <(compgen -f -- "$cur")
  fi
}
complete -F _tessera tessera
""" % (" ".join(n for n, _ in cmds), "\n".join(cases))


def main():
    exe, kind, path = sys.argv[1:4]
    text = {"man": man, "bash": bash}[kind](exe)
    with open(path, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
