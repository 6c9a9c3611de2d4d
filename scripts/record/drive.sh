#!/bin/bash
# Driver for the lent one-GPU machine: records every single-GPU scenario of scripts/record/ in one command.
#   usage (repo root, $OUT set by the device tool):  bash scripts/record/drive.sh
#   ONLY="cuda_graph_replay compiled" bash scripts/record/drive.sh   records only the scenarios named
# Outputs go to /tmp/rec/<folder>/; after every scenario they are re-packed into $OUT/recordings.tar (one file, so
# the device tool's 8-file limit holds and a timeout still returns what finished); the log is $OUT/log.
# Locally:  tar -xf recordings.tar -C DEST/
set -u
BUDGET=${BUDGET:-500}   # seconds; no scenario starts with less than 40 s left
W=/tmp/rec
rm -rf $W; mkdir -p $W
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
T0=$(date +%s)
R="python3 scripts/record"

pack() {
  tar -C $W -cf $OUT/recordings.tar .
  ls -lR $W | tail -n +1 > $OUT/files.txt
}

run() {  # name timeout_s cmd...
  local name=$1 to=$2; shift 2
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then return; fi
  local el=$(( $(date +%s) - T0 )); local left=$(( BUDGET - el ))
  if [ $left -lt 40 ]; then echo "=== SKIP $name (t=${el}s, ${left}s left)"; return; fi
  [ $to -gt $left ] && to=$left
  echo "=== START $name t=${el}s timeout=${to}s"
  timeout -k 10 $to "$@" 2>&1
  echo "=== END $name rc=$? t=$(( $(date +%s) - T0 ))s"
  pack
}

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
python3 -c "import sys, torch, triton; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), 'triton', triton.__version__, 'nccl', torch.cuda.nccl.version())"
run gpu_bound 60 $R/step_model.py --scenario gpu_bound --out $W
run cuda_graph_replay 90 $R/step_model.py --scenario cuda_graph_replay --out $W
run cpu_bound 60 $R/step_model.py --scenario cpu_bound --out $W
run memory_train 60 $R/memory_snapshot.py --scenario train --out $W
run memory_oom 60 $R/memory_snapshot.py --scenario oom --out $W
run cnn 90 $R/cnn.py --scenario alexnet_ddp --out $W
run compiled 200 $R/step_model.py --scenario compiled --out $W
echo "=== ALL DONE t=$(( $(date +%s) - T0 ))s"
du -ab $W
pack
