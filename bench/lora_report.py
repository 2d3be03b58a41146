#!/usr/bin/python3
"""The LoRA benchmark's table (issue 37) from the RESULT lines of bench/run_lora.sh's logs.

usage: lora_report.py LOG_DIR

One row per side and mode (`lora/off`: LoRA without activation recomputation, `--recompute off`): tokens/s; LoRA / full (the mode's tokens/s over full fine-tuning's on the same side;
target >= 1.3x); GFLOP/s of the step's model FLOP (bench/lora_bench.cpp's count) and its % of the peak loop measured
in the same run (targets: 75% natively, 80% of the wasm peak in wasm; PyTorch's against the native peak); x PyTorch (native over PyTorch, same mode;
target >= 1.5x); peak RSS over the float32 base weights (targets: <= 1.3x for LoRA on an fp32 base, <= 0.5x for LoRA
on a q4 base; full fine-tuning's beside them): natively the training phase's own peak (`step peak`: the resident
high-water mark started over once the model is ready, qkv_bench lora), elsewhere the process's peak RSS.
"""
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu_report import read_results  # noqa: E402  (the RESULT-line reader of every CPU benchmark)


def step_gflop(mode, layers, batch, seq, rank, V=50257, C=768):
    """bench/lora_bench.cpp's model FLOP of a step, for the PyTorch rows (which print none), in GFLOP."""
    n = 12 * layers * C * C + V * C
    adapters = layers * rank * ((C + 3 * C) + (C + C) + 2 * (C + 4 * C))
    per_token = (6 * n if mode == "full" else 4 * n + 6 * adapters) + 12 * layers * seq * C
    return per_token * batch * seq / 1e9


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    rows = [r for _, r in read_results(sys.argv[1]) if r.get("bench") == "lora"]
    if not rows:
        sys.exit(f"lora_report: no RESULT bench=lora lines in {sys.argv[1]}/*.log")
    for r in rows:  # the mode as the table names it
        r["mode"] = r["mode"] + ("/off" if r.get("recompute") == "off" else "")
    by = {(r["side"], r["mode"]): r for r in rows}
    tps = {k: float(r["tokens_per_s"]) for k, r in by.items()}
    first = rows[0]
    print(f"GPT-2 124M shape ({first['layers']} layers), batch {first['batch']} x {first['seq']}, rank {first['rank']}, "
          f"{first['threads']} threads")
    print(f"{'side':8} {'mode':8} {'tokens/s':>9} {'/ full':>7} {'GFLOP/s':>8} {'peak':>7} {'% peak':>7} "
          f"{'x PyTorch':>9} {'peak MiB':>8} {'x weights':>9}")
    order = {"qkv": 0, "wasm": 1, "PyTorch": 2}
    for (side, mode), r in sorted(by.items(), key=lambda kv: (order.get(kv[0][0], 9), kv[0][1])):
        full = tps.get((side, "full"))
        ratio = f"{tps[(side, mode)] / full:.2f}x" if full and mode != "full" else "-"
        if "gflops" in r:
            gflops, peak = float(r["gflops"]), float(r["peak_gflops"])
        else:  # PyTorch: the same count, against the native peak loop of the same run
            gflops = step_gflop(mode, int(r["layers"]), int(r["batch"]), int(r["seq"]), int(r["rank"])) / (
                float(r["ms_per_step"]) / 1e3)
            peak = float(by.get(("qkv", "full"), by.get(("qkv", mode), {})).get("peak_gflops", 0))
        pct = f"{100 * gflops / peak:.1f}" if peak > 0 and gflops > 0 else "-"
        torch = tps.get(("PyTorch", mode.split("/")[0]))  # PyTorch's LoRA keeps its activations
        vs_torch = f"{tps[(side, mode)] / torch:.2f}x" if torch and side == "qkv" else "-"
        rss, base = float(r.get("step_peak_rss_mib", r["peak_rss_mib"])), float(r["base_mib"])
        g, pk = (f"{gflops:.1f}" if gflops else "-"), (f"{peak:.1f}" if peak else "-")
        print(f"{side:8} {mode:8} {tps[(side, mode)]:>9.1f} {ratio:>7} {g:>8} {pk:>7} {pct:>7} {vs_torch:>9} "
              f"{rss:>8.0f} {rss / base:>8.2f}x")
    print("load averages:", "; ".join(f"{r['side']} {r['mode']}: {r['load']}" for r in rows))


if __name__ == "__main__":
    main()
