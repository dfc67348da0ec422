#!/bin/bash
# Issue 38's figures on the 2-core Intel Xeon (AVX-512), idle, rerun on 2026-12-08 with the tree
# of 67151b9: the campaign of ../xeon-2026-12-07/ unchanged, its outputs written here.
OUT=$(cd "$(dirname "$0")" && pwd) exec "$(dirname "$0")/../xeon-2026-12-07/campaign.sh"
# Run by hand after the campaign (00:33-00:40 UTC), on a build of 67151b9 whose filter_by_gemm
# (src/kernels/conv_dnnl.c) began with `if (getenv("TSR_NOGEMM")) return false;` (not committed):
#   TSR_NOGEMM=1 bench_conv --rounds 2 --seconds 0.1 > conv-filter-primitive.txt
#   bench_conv --rounds 2 --seconds 0.1 > conv-filter-gemm.txt
