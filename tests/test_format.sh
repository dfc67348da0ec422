#!/usr/bin/env bash
# Every C source and header of the tree is formatted as .clang-format says.
# Skipped (exit 77) where clang-format is not installed (scripts/setup.sh
# installs it). Usage: test_format.sh SOURCE_ROOT
set -u
root=$1
command -v clang-format >/dev/null || { echo "SKIP: clang-format not installed"; exit 77; }
cd "$root" || exit 1
mapfile -t files < <(find include src codelets tests benchmarks -name '*.[ch]' -o -name '*.cc' | sort)
bad=()
for f in "${files[@]}"; do
  clang-format --style=file "$f" | cmp -s - "$f" || bad+=("$f")
done
if ((${#bad[@]})); then
  echo "FAIL: ${#bad[@]} of ${#files[@]} files differ from .clang-format; fix with:"
  echo "  clang-format -i ${bad[*]}"
  exit 1
fi
echo "${#files[@]} files formatted ($(clang-format --version | head -1))"
