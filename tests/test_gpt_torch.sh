#!/usr/bin/env bash
# The language model against PyTorch (tests/test_gpt_torch.py): tests/gpt_steps.c trains
# gpt:2,32,4,16 for 10 AdamW steps on Debian's Apache-2.0 licence text (its bytes as tokens) from
# a start that uses its attention (trained by PyTorch, tessera.from_torch), PyTorch takes the same
# steps from the same checkpoint; the losses agree within 1e-4 relative. Needs
# /usr/bin/python3 with NumPy and PyTorch (scripts/setup.sh installs python3-numpy and
# python3-torch); skipped (77) only where one of them is missing.
# Usage: test_gpt_torch.sh PATH/TO/gpt_steps
set -u
steps=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=/usr/bin/python3
for module in numpy torch; do
  if ! "$python" -c "import $module" 2>/dev/null; then
    echo "SKIP: $python cannot import $module (apt-get install python3-$module;" \
      "scripts/setup.sh installs it)"
    exit 77
  fi
done
GPT_STEPS=$steps exec "$python" "$here/test_gpt_torch.py"
