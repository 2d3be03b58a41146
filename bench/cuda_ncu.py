#!/usr/bin/env python3
"""Nsight Compute's view of qkv's CUDA kernels: where each stands against its floor (issue 25).

usage: cuda_ncu.py CSV [STEPS]   (standard library only)
       cuda_ncu.py --metrics      (the comma-separated metric list to give ncu)

CSV is `ncu --csv --page raw --metrics <METRICS> ...`'s output (bench/run_cuda.sh's "ncu" stage writes it from
one run of qkv_cuda_bench, each kernel profiled on its first launches). For every kernel it prints, averaged over
its profiled launches: the duration, DRAM throughput as a share of the GPU's peak bandwidth, the busiest compute
pipe as a share of its peak (tensor pipe for the mma kernels, FMA/ALU for the others), achieved occupancy, and
which of the two bounds the kernel (the larger share: "memory" or "compute"). A kernel near 80-90% of one of them
is at its floor; one low on both is latency- or launch-bound, the case to look into. With STEPS (the profile of a
training run of that many steps, as bench/cuda_session.sh's profile stage takes it), a column gives each kernel's
time per step (all its launches over STEPS) and the header the sum of them: where a step's GPU time goes.
"""
import csv
import re
import sys
from collections import defaultdict

# The metrics the stage asks for (bench/run_cuda.sh passes the same list to ncu).
METRICS = {
    "gpu__time_duration.sum": "duration",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": "tensor",
    "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active": "fma",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "occupancy",
}


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def short_name(name):
    """'void ns::(anonymous namespace)::flash_forward_kernel<64, (ns::AttentionPrecision)1>(float *, ...)' ->
    'flash_forward_kernel<64, 1>': the function and its template arguments, without namespaces or parameters."""
    s = name.replace("(anonymous namespace)::", "").replace("<unnamed>::", "")
    m = re.match(r"\s*(?:void\s+)?(?:[\w]+::)*(\w+)(<[^>]*>)?", s)
    if not m:
        return name
    args = m.group(2) or ""
    args = re.sub(r"\([\w:]+\)", "", args)  # enum casts: (qkv::kernels::cuda::AttentionPrecision)1 -> 1
    args = re.sub(r"[\w]+::", "", args)
    return m.group(1) + args


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    steps = int(sys.argv[2]) if len(sys.argv) == 3 else 0
    if sys.argv[1] == "--metrics":
        print(",".join(METRICS))
        return
    rows = []
    with open(sys.argv[1], newline="") as f:
        lines = [line for line in f if line.startswith('"')]  # ncu prints its own lines before the table
    reader = csv.DictReader(lines)
    for r in reader:
        rows.append(r)
    if not rows:
        sys.exit(f"{sys.argv[1]}: no profiled kernel (ncu's message, if any, is in the log beside it)")
    per_kernel = defaultdict(lambda: defaultdict(list))
    for r in rows:
        short = short_name(r.get("Kernel Name", "?"))
        for metric, key in METRICS.items():
            value = number(r.get(metric, ""))
            if value is not None:
                per_kernel[short][key].append(value)
    print("Nsight Compute, per kernel (mean over its profiled launches): share of peak DRAM bandwidth and of the busiest")
    print("compute pipe; the larger one bounds the kernel")
    if steps:
        total_ms = sum(sum(m["duration"]) for m in per_kernel.values()) / 1e6 / steps
        print(f"{steps} steps profiled: {total_ms:.3f} ms of kernels a step (us/step: a kernel's launches / steps)")
    print(f"{'kernel':<36} {'launches':>8} {'us':>9} {'us/step':>8} {'DRAM %':>7} {'SM %':>6} {'tensor %':>9} "
          f"{'FMA %':>6} {'occup %':>8}  bound")
    for name, m in sorted(per_kernel.items(), key=lambda kv: -sum(kv[1]["duration"])):
        mean = {k: (sum(v) / len(v) if v else float("nan")) for k, v in m.items()}
        duration_us = mean.get("duration", float("nan")) / 1e3  # ncu reports ns
        compute = max(mean.get("tensor", 0.0), mean.get("fma", 0.0), mean.get("sm", 0.0))
        dram = mean.get("dram", 0.0)
        bound = "memory" if dram >= compute else ("tensor" if mean.get("tensor", 0.0) >= compute else "compute")
        per_step = sum(m["duration"]) / 1e3 / steps if steps else float("nan")
        print(f"{name[:36]:<36} {len(m['duration']):>8} {duration_us:>9.1f} {per_step:>8.1f} {dram:>7.1f} "
              f"{mean.get('sm', 0.0):>6.1f} "
              f"{mean.get('tensor', 0.0):>9.1f} {mean.get('fma', 0.0):>6.1f} {mean.get('occupancy', 0.0):>8.1f}  "
              f"{bound} ({max(dram, compute):.0f}% of its peak)")


if __name__ == "__main__":
    main()
