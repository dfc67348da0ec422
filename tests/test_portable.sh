#!/usr/bin/env bash
# A portable build (-Dmarch=portable, the default) runs on any x86-64: outside the kernels marked
# TSR_HOT (src/kernels/hot.h), whose AVX2 and AVX-512 versions are chosen when the library loads,
# libtessera has no instruction beyond the baseline: no VEX or EVEX encoding (a mnemonic
# starting with v), no ymm, zmm or mask register. And the versions are there: at least one AVX2
# (x86-64-v3) and one AVX-512 (x86-64-v4) version of every hot kernel. Another -Dmarch skips.
# A Clang build has no dispatched versions (src/kernels/hot.h): it skips too.
# usage: test_portable.sh LIBTESSERA.so MARCH COMPILER
set -euo pipefail
lib=$1 march=$2 compiler=${3:-gcc}
if [[ $march != portable ]]; then
  echo "SKIP: built with -Dmarch=$march, for that CPU alone"
  exit 77
fi
if [[ $compiler != gcc ]]; then
  echo "SKIP: built with $compiler, which gets the baseline kernels alone (src/kernels/hot.h)"
  exit 77
fi
command -v objdump >/dev/null || { echo "FAIL: objdump (binutils) is needed to read $lib"; exit 1; }
dis=$(objdump -d --no-show-raw-insn "$lib")
bad=$(awk '/^[0-9a-f]+ <.*>:$/ {fn = $2; next}
  /^ +[0-9a-f]+:\t/ {
    split($0, a, "\t"); split(a[2], w, " ");
    if (((w[1] ~ /^v/ && w[1] !~ /^verr|^verw/) || $0 ~ /%[yz]mm|%k[0-7]/) &&
        fn !~ /arch_x86_64_v[34]|arch_x86-64-v[34]/) n[fn]++
  }
  END {for (f in n) print n[f], f}' <<<"$dis" | sort -rn)
v3=$(grep -cE '^[0-9a-f]+ <[^>]*(arch_x86_64_v3|arch_x86-64-v3)[^>]*>:$' <<<"$dis" || true)
v4=$(grep -cE '^[0-9a-f]+ <[^>]*(arch_x86_64_v4|arch_x86-64-v4)[^>]*>:$' <<<"$dis" || true)
hot=$(cat "$(dirname "$0")"/../src/kernels/*.c | grep -cE '^TSR_HOT(_NOINLINE)? ' || true)
status=0
if [[ -n $bad ]]; then
  echo "FAIL: instructions beyond the x86-64 baseline outside the TSR_HOT kernels (count, function):"
  head -20 <<<"$bad"
  status=1
fi
if ((v3 < hot || v4 < hot)); then
  echo "FAIL: $hot kernels are marked TSR_HOT, but $lib has $v3 AVX2 and $v4 AVX-512 versions"
  status=1
fi
((status)) || echo "ok: $hot hot kernels with $v3 AVX2 and $v4 AVX-512 versions; nothing else beyond the baseline"
exit $status
