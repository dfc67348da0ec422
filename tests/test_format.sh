#!/usr/bin/env bash
# Every C source and header of the tree is formatted as .clang-format says.
# Skipped (exit 77) where clang-format is not installed (scripts/setup.sh
# installs it). Usage: test_format.sh SOURCE_ROOT
set -u
root=$1
command -v clang-format >/dev/null || { echo "SKIP: clang-format not installed"; exit 77; }
cd "$root" || exit 1
mapfile -t files < <(find include src codelets tests benchmarks -name '*.[ch]' -o -name '*.cc' | sort)
# One clang-format for every file (a process a file took over 30 s with the suite's other tests
# on the cores); its warnings name each file that differs.
out=$(clang-format --style=file --dry-run "${files[@]}" 2>&1) || {
  echo "FAIL: clang-format could not read the files:"
  echo "$out" | head -20
  exit 1
}
mapfile -t bad < <(echo "$out" |
  sed -n 's/^\([^:]*\.[ch]c\{0,1\}\):[0-9]*:[0-9]*: warning: code should be clang-formatted.*/\1/p' |
  sort -u)
if ((${#bad[@]})); then
  echo "FAIL: ${#bad[@]} of ${#files[@]} files differ from .clang-format; fix with:"
  echo "  clang-format -i ${bad[*]}"
  exit 1
fi
echo "${#files[@]} files formatted ($(clang-format --version | head -1))"
