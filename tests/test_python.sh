#!/usr/bin/env bash
# The Python package (python/tessera) against this build's tessera: tests/test_python.py
# (PyTorch round trips of MLP, CNN and graph checkpoints, from_torch exports that tessera eval
# and train --resume take, CRC refusals, the log reader and plot_logs.py). Needs /usr/bin/python3
# with NumPy and PyTorch (scripts/setup.sh installs python3-numpy and python3-torch); skipped
# (77) only where one of them is missing. Usage: test_python.sh PATH/TO/tessera
set -u
tessera=$1
data=${TSR_DATA_DIR:-/usr/share/datasets/fashion-mnist}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=/usr/bin/python3
[[ -d $data ]] || { echo "SKIP: no dataset at $data"; exit 77; }
for module in numpy torch; do
  if ! "$python" -c "import $module" 2>/dev/null; then
    echo "SKIP: $python cannot import $module (apt-get install python3-$module;" \
      "scripts/setup.sh installs it)"
    exit 77
  fi
done
TESSERA=$tessera TSR_DATA_DIR=$data exec "$python" "$here/test_python.py"
