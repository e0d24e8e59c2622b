#!/usr/bin/env bash
# One device call: time the opt-in builds (split ring, warp max) with docs/KERNELS.md's own
# commands, their gpu tests, the timing method's ceiling (tq_ceiling.py), an ncu profile of
# the 1 x 8K and 1 x 32K decode and a split-count sweep at B = 1. Logs and JSON under $OUT.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-bench-out}
mkdir -p "$OUT"
log="$OUT/all.log"
step() { local t=$1; shift; echo "=== $* (limit ${t}s) $(date -u +%T)" | tee -a "$log"; timeout "$t" "$@" 2>&1 | tee -a "$log"; echo "=== rc ${PIPESTATUS[0]}" | tee -a "$log"; }
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,driver_version --format=csv | tee -a "$log"
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name(0))" | tee -a "$log"
SW=tools/bench/tq_sweep.py
step "${T_WM:-150}" python3 $SW --in-graph --flush read --json "$OUT/warpmax.json" \
  --row-spec decode,1,32768,24,4,256,1 --row-spec decode,1,8192,24,4,256,1 \
  --row-spec decode,1,131072,24,4,256,1 --row-spec verify,8,8192,24,4,256,2 \
  --tiles default --tiles 'T(64,4,2,"h",producer=True,warp_max=True)' \
  --tiles 'T(64,4,2,"h",warp_max=True)' --tiles default
step "${T_SR:-150}" python3 $SW --in-graph --flush read --json "$OUT/splitring.json" \
  --row-spec verify,1,32768,24,4,256,6 --row-spec verify,4,32768,24,4,256,6 \
  --row-spec verify,1,131072,24,4,256,6 --row-spec verify,1,32768,32,4,256,8 \
  --tiles default --tiles 'T(64,4,2,"v",pipe=3,v_halves=True,split_ring=True)' \
  --tiles default --tiles 'T(64,4,2,"v",pipe=3,v_halves=True,split_ring=True)'
step "${T_CEIL:-45}" python3 tools/bench/tq_ceiling.py --rows 0,1,2,3 --json "$OUT/ceiling.json"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for row in 0 1; do
  step "${T_NCU:-45}" "$NCU" --clock-control none --kernel-name regex:_tq_ --launch-skip 4 --launch-count 2 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    python3 tools/bench/tq_profile.py --row $row
done
step "${T_SPLIT:-60}" python3 $SW --in-graph --flush write --json "$OUT/splits.json" --row 0 --row 1 \
  --tiles default@16 --tiles default@32 --tiles default@128 --tiles default
step "${T_TEST:-90}" python3 -m pytest tests/kernels -m gpu -k "warpmax or warp_max or split_ring" -q -p no:cacheprovider
