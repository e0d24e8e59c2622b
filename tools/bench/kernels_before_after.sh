#!/bin/bash
# tools/bench/kernels.py on an older commit's kernels (bench-out/before: `git archive REV kernels tools/bench`)
# and on this tree's, in turns on one card; the upstream 0.24.0 copy in bench-out/upstream.
# REP (ms per timing), LIMIT (s per run). Compare with tools/bench/kernels_compare.py $OUT.
export PYTHONUNBUFFERED=1
OUT=$(realpath -m "${OUT:-bench-out/kernels-ab}"); mkdir -p "$OUT"   # where the logs and JSON files go
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
UP=$PWD/bench-out/upstream
T0=$SECONDS
run() {  # tag dir extra...
  local tag=$1 dir=$2; shift 2
  ( cd $dir && timeout ${LIMIT:-240} python3 tools/bench/kernels.py --upstream-dir $UP --rep-ms ${REP:-100} --json $OUT/$tag.json "$@" ) > $OUT/$tag.log 2>&1
  echo "== $tag rc=$? at $((SECONDS-T0)) s"; tail -12 $OUT/$tag.log
}
run after1 . 
run before1 bench-out/before
[ $((SECONDS-T0)) -lt 330 ] && run after2 . --skip-checks
[ $((SECONDS-T0)) -lt 430 ] && run before2 bench-out/before --skip-checks
echo "total $((SECONDS-T0)) s"
