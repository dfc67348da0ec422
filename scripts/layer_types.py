#!/usr/bin/env python3
"""layer_types.py TESSERA [OUT]: writes python/tessera/layer_types.py (or OUT) from what the C
library says of its layer types (`TESSERA summary --layer-types`: their model-file keys,
required keys' messages, inputs, parameter and buffer names), so that the Python package reads
the registry instead of keeping a copy. Run it after adding or changing a layer type;
tests/test_summary.sh fails while the file differs from the build's registry."""
import json
import os
import pprint
import subprocess
import sys

HEADER = '''"""The layer types of tessera's registry (src/nn/layers.c), as `tessera summary --layer-types`
lists them: written by scripts/layer_types.py, do not edit (tests/test_summary.sh checks it
against the build). tessera.model reads its keys and names from here."""

'''


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[2] if len(sys.argv) == 3 else os.path.join(here, "..", "python", "tessera",
                                                                "layer_types.py")
    text = subprocess.run([sys.argv[1], "summary", "--layer-types"], check=True,
                          capture_output=True, text=True).stdout
    types = json.loads(text)
    with open(out, "w") as f:
        f.write(HEADER + "TYPES = " + pprint.pformat(types, width=100, sort_dicts=False) + "\n")


if __name__ == "__main__":
    main()
