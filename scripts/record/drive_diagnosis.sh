#!/bin/bash
# Driver for the lent one-GPU machine: the recordings of issues 23 (problem/fix pairs), 30 (gate repeats),
# 27 (CUPTI counters) and 28 (generate() inference), in one command each group:
#   WHAT="pairs gate counters" bash scripts/record/drive_diagnosis.sh      (repo root, $OUT set by the device tool)
#   WHAT="inference" bash scripts/record/drive_diagnosis.sh
#   WHAT="pairs2 inference2" bash scripts/record/drive_diagnosis.sh    (the second batch: side-stream copy, recompile,
#                                                                        cuDNN per KV length, markers, eager attention)
# Outputs go to /tmp/rec/<folder>/ and are re-packed after every scenario into $OUT/<group>.tar (pairs split in two
# so each file stays under the tool's 16 MiB), so a timeout still returns what finished. Locally: tar -xf F -C DEST/
set -u
BUDGET=${BUDGET:-540}
W=/tmp/rec
mkdir -p $W
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
T0=$(date +%s)
R="python3 scripts/record"

pack() {
  [ -d $W/pairs ] && (cd $W && tar -cf $OUT/pairs_a.tar $(ls -d pairs/launch_bound pairs/optimizer_loop pairs/host_sync pairs/input_pipeline 2>/dev/null) 2>/dev/null)
  [ -d $W/pairs ] && (cd $W && tar -cf $OUT/pairs_b.tar $(ls -d pairs/allocator pairs/first_call_shapes pairs/pageable_copy pairs/python_gc 2>/dev/null) 2>/dev/null)
  [ -d $W/pairs ] && (cd $W && tar -cf $OUT/pairs_c.tar $(ls -d pairs/side_stream_copy pairs/recompile 2>/dev/null) 2>/dev/null)
  for g in gate counters inference; do [ -d $W/$g ] && tar -C $W -cf $OUT/$g.tar $g; done
  ls -lR $W > $OUT/files.txt
}

run() {  # name timeout_s cmd...
  local name=$1 to=$2; shift 2
  local el=$(( $(date +%s) - T0 )); local left=$(( BUDGET - el ))
  if [ $left -lt 30 ]; then echo "=== SKIP $name (t=${el}s, ${left}s left)"; return; fi
  [ $to -gt $left ] && to=$left
  echo "=== START $name t=${el}s timeout=${to}s"
  timeout -k 10 $to "$@" > $W/$name.log 2>&1
  echo "=== END $name rc=$? t=$(( $(date +%s) - T0 ))s"
  grep -E "^=== |Error|error:" $W/$name.log | tail -5
  pack
}

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
python3 -c "import sys, torch, transformers; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), 'transformers', transformers.__version__)"
for g in ${WHAT:-pairs gate counters}; do
  case $g in
    pairs)
      for s in host_sync pageable_copy launch_bound optimizer_loop input_pipeline allocator first_call_shapes python_gc; do
        run pair_$s 100 $R/pairs.py --scenario $s --out $W
      done ;;
    pairs2)
      for s in side_stream_copy recompile; do run pair_$s 150 $R/pairs.py --scenario $s --out $W; done ;;
    gate)
      for k in 1 2 3 4 5 6; do run gate_dev$k 40 $R/repeats.py --program device_bound --repeat $k --out $W; done
      for p in 5 15; do run gate_reg$p 40 $R/repeats.py --program device_bound --extra-pct $p --out $W; done
      for k in 1 2 3 4 5 6; do run gate_host$k 40 $R/repeats.py --program host_bound --repeat $k --out $W; done
      run gate_added 40 $R/repeats.py --program host_bound --added-gemms 20 --out $W ;;
    counters)
      run counters 120 $R/counters.py --out $W ;;
    inference)
      for s in eager_dynamic batched long_prefill static_compiled; do
        run inf_$s 240 $R/inference.py --scenario $s --out $W
      done ;;
    inference2)
      for s in cudnn_kv flash_kv marked eager_attention; do run inf_$s 120 $R/inference.py --scenario $s --out $W; done ;;
  esac
done
echo "=== ALL DONE t=$(( $(date +%s) - T0 ))s"
cat $W/*.log | grep -E "^=== " > $OUT/summary.txt
cp $W/pair_host_sync.log $OUT/ 2>/dev/null
pack
