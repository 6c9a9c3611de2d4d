"""Record tf32_matmul.json.gz: fp32 matmuls on TF32 tensor cores (allow_tf32), 4 profiled steps, CUDA-event times.

python3 sample_traces/tf32_matmul/tf32_matmul.py OUT_DIR
"""

import gzip
import json
import os
import shutil
import sys

import torch
from torch.profiler import ProfilerActivity, profile, schedule

N, MATMULS = 8192, 4
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
out = sys.argv[1]
a = torch.randn(N, N, device="cuda")
b = torch.randn(N, N, device="cuda")


def step() -> None:
    c = a
    for _ in range(MATMULS):
        c = torch.mm(c, b) * (1.0 / N)


for _ in range(3):
    step()
torch.cuda.synchronize()
times = []
with profile(
    activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
    schedule=schedule(wait=1, warmup=1, active=4),
    record_shapes=True,
    with_flops=True,
) as prof:
    for _ in range(6):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
        prof.step()
raw = os.path.join(out, "tf32_matmul.json")
prof.export_chrome_trace(raw)
with open(raw, "rb") as fi, gzip.open(raw + ".gz", "wb") as fo:
    shutil.copyfileobj(fi, fo)
os.remove(raw)
mm = [e for e in prof.key_averages() if e.key == "aten::mm"][0]
flops = 2.0 * N**3
meta = {
    "pattern": f"{MATMULS} x torch.mm fp32 {N}x{N} per step, torch.backends.cuda.matmul.allow_tf32 = True",
    "device": torch.cuda.get_device_name(),
    "torch": torch.__version__,
    "step_ms_cuda_events": times,
    "traced_steps": "the last 4",
    "mm_flops_each": flops,
    "key_averages_mm": {"count": mm.count, "device_time_total_us": mm.device_time_total},
    "mm_tflops_key_averages": flops * mm.count / (mm.device_time_total * 1e-6) / 1e12,
    "kernels": sorted({e.key for e in prof.key_averages() if "gemm" in e.key.lower() or "nvjet" in e.key.lower()}),
}
with open(os.path.join(out, "tf32_matmul.meta.json"), "w") as f:
    json.dump(meta, f, indent=1)
print(json.dumps(meta, indent=1))
