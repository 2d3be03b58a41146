#!/usr/bin/env python3
"""The GPU training comparison, qkv vs PyTorch eager and torch.compile, from the RESULT lines in bench/run_cuda.sh's logs.

usage: cuda_report.py LOG_DIR      (standard library only)

Reads `RESULT bench=char-gpt|seq2seq side=qkv|PyTorch|PyTorch-compile precision=fp32|tf32|bf16 ...` lines,
printed by build/cuda/bench/qkv_cuda_train and bench/cuda_torch.py, from the logs under LOG_DIR, and prints one
row per (model, precision): each side's ms/step (qkv's queued loop, PyTorch's median), tokens/s and MFU, and qkv / eager and qkv / compiled in
tokens/s (above 1: qkv is faster). bf16 is PyTorch's autocast against qkv's --precision bf16 (bf16 products, fp32 storage). Both sides count the same model FLOPs per step (nanoGPT's estimate_mfu, cuda_torch.py's docstring) and
divide by the same peak, so the MFU ratio equals the speed ratio; the report says so when the counts differ.
A side that printed no RESULT line (not run, or failed) shows "-", and the row names the log to read.
The table reads qkv_train.log and torch.log only; the ops stage's whole-step A/B logs (train_rowwise.log,
train_no_lt.log, train_no_graph.log: the char GPT fp32 step with one default part off; train_s2s_no_lt.log: the
Seq2Seq's) print below it, each against the table's fp32 row of its model.
"""
import math
import os
import shlex
import sys

BENCHES = [("char-gpt", "char GPT L6 H6 C384 T256"), ("seq2seq", "Seq2Seq 6+6 d512 S100 T100")]
PRECISIONS = ["fp32", "tf32", "bf16"]
LOGS = {"qkv": "qkv_train.log", "PyTorch": "torch.log", "PyTorch-compile": "torch.log"}
# The whole-step A/B runs of run_cuda.sh's ops stage: an fp32 step with one part of the default turned off, each in
# its own log (model, log, what is off). Their RESULT lines look like qkv's own, so they are read apart from the
# table's.
AB_LOGS = [("char-gpt", "train_rowwise.log", "the row-wise FP32 attention (QKV_CUDA_ATTENTION=rowwise)"),
           ("char-gpt", "train_no_lt.log", "the bias as its own pass (QKV_CUDA_LT=0)"),
           ("char-gpt", "train_no_graph.log", "op by op, no CUDA graph (QKV_CUDA_GRAPH=0)"),
           ("seq2seq", "train_s2s_no_lt.log", "bias and ReLU as their own pass (QKV_CUDA_LT=0)")]


def read_log(path):
    """[fields] of the RESULT lines of one log, in order (none if it is missing)."""
    rows = []
    if not os.path.exists(path):
        return rows
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("RESULT "):
                rows.append(dict(kv.split("=", 1) for kv in shlex.split(line)[1:] if "=" in kv))
    return rows


def read_results(log_dir):
    """{(bench, side, precision): fields} of the last such RESULT line in the table's logs (a later run wins)."""
    out = {}
    for name in sorted(set(LOGS.values())):
        for fields in read_log(os.path.join(log_dir, name)):
            if fields.get("bench") in dict(BENCHES) and "side" in fields and "precision" in fields:
                out[(fields["bench"], fields["side"], fields["precision"])] = fields
    return out


def print_ab(results, log_dir):
    """An fp32 step with each default part turned off, against the default (the table's qkv row of its model)."""
    lines = []
    for bench, name, what in AB_LOGS:
        base = results.get((bench, "qkv", "fp32"))
        rows = [r for r in read_log(os.path.join(log_dir, name)) if r.get("bench") == bench]
        if not rows:
            continue
        ms = float(rows[-1]["ms_per_step"])
        gain = f"the default is {ms / float(base['ms_per_step']):.2f}x faster" if base else "no default row to compare"
        lines.append(f"  {bench}, {what}: {ms:.2f} ms/step; {gain}")
    if lines:
        print("\nfp32 training step, one part of the default off (A/B, same run):")
        for line in lines:
            print(line)


def print_measures(results):
    """Each side's figure beside the other measure: qkv's queued loop and its one-by-one train_step median; the
    peer's event median and its loop's wall time (the measure of qkv's queued figure)."""
    lines = []
    for (bench, side, prec), r in sorted(results.items()):
        if side == "qkv" and "ms_per_step_one_by_one" in r:
            lines.append(f"  {bench} {prec} qkv: queued loop {float(r['ms_per_step']):.2f} ms/step (the table's), "
                         f"one by one (train_step, median) {float(r['ms_per_step_one_by_one']):.2f}")
        elif side != "qkv" and "wall_ms_per_step" in r:
            lines.append(f"  {bench} {prec} {side}: median of the events {float(r['ms_per_step']):.2f} ms/step "
                         f"(the table's), the loop's wall time {float(r['wall_ms_per_step']):.2f}")
    if lines:
        print("\nboth measures of each side (the table's, and the other):")
        for line in lines:
            print(line)


def cells(r, width=9):
    """ms/step, tokens/s, MFU of one side, or dashes."""
    if r is None:
        return f"{'-':>{width}} {'-':>10} {'-':>6}"
    mfu = float(r.get("mfu", "nan"))
    mfu_cell = "-" if math.isnan(mfu) else f"{100 * mfu:.1f}%"
    return f"{float(r['ms_per_step']):>{width}.2f} {float(r['tokens_per_s']):>10.0f} {mfu_cell:>6}"


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    log_dir = sys.argv[1]
    results = read_results(log_dir)
    if not results:
        sys.exit(f"no char-gpt or seq2seq RESULT lines in {log_dir}/*.log: run bench/run_cuda.sh first")
    any_row = next(iter(results.values()))
    print(f"\nGPU training step, qkv vs PyTorch eager and torch.compile, on {any_row.get('device', '?')}: ms/step of the timed "
          "steps (qkv: its queued loop's wall time over its steps; PyTorch: the median of CUDA events around each step, "
          "its host running ahead);\ntokens/s = tokens per step / that (the Seq2Seq counts the 99 target positions a "
          "row); MFU = model FLOPs per step / step time / the peak below")
    print(f"{'model':<27} {'prec':<5}  {'qkv ms':>9} {'tokens/s':>10} {'MFU':>6}  {'eager ms':>9} {'tokens/s':>10} "
          f"{'MFU':>6}  {'compiled ms':>11} {'tokens/s':>10} {'MFU':>6}  {'qkv/eager':>10} {'qkv/compiled':>12} "
          f"{'peak TFLOP/s':>13}")
    notes = []
    for bench, title in BENCHES:
        for precision in PRECISIONS:
            q = results.get((bench, "qkv", precision))
            t = results.get((bench, "PyTorch", precision))
            c = results.get((bench, "PyTorch-compile", precision))
            if q is None and t is None and c is None:
                continue

            def ratio(peer, width):
                if not (q and peer):
                    return f"{'-':>{width}}"
                return f"{float(q['tokens_per_s']) / float(peer['tokens_per_s']):>{width - 1}.2f}x"

            peaks = {r.get("peak_tflops") for r in (q, t, c) if r}
            peak = "/".join(sorted(p if p != "nan" else "-" for p in peaks))
            print(f"{title:<27} {precision:<5}  {cells(q)}  {cells(t)}  {cells(c, 11)}  {ratio(t, 10)} {ratio(c, 12)} "
                  f"{peak:>13}")
            for side, r in (("qkv", q), ("PyTorch", t), ("PyTorch-compile", c)):
                if r is None:
                    notes.append(f"{bench} {precision}: no {side} result (see {os.path.join(log_dir, LOGS[side])})")
            if q and t:  # the same count for the compiled side: the same model and script
                fq, ft = float(q["model_tflop_per_step"]), float(t["model_tflop_per_step"])
                if abs(fq - ft) > 1e-3 * ft:
                    notes.append(f"{bench} {precision}: the sides count different model FLOPs per step "
                                 f"(qkv {fq:.4f}, PyTorch {ft:.4f} TFLOP): MFU ratio != speed ratio")
                if len(peaks) > 1:
                    notes.append(f"{bench} {precision}: the sides divide by different peaks ({peak} TFLOP/s)")
    sources = sorted({r.get("peak_source", "?") for (_, side, _), r in results.items() if side == "qkv"})
    print(f"  peak: the GPU's dense datasheet figure (no sparsity; cuda_torch.py's table, H100 SXM: fp32 66.9, tf32 "
          f"494.7, bf16 989.4 TFLOP/s) unless --peak-tflops gave one; the qkv side's: {', '.join(sources) or '-'}")
    losses = [f"{bench} {prec} {float(r['loss_first']):.3f} -> {float(r['loss_last']):.3f}"
              for (bench, side, prec), r in sorted(results.items()) if side == "qkv" and "loss_first" in r]
    if losses:
        print("  qkv's loss, first warm-up step -> last timed step: " + "; ".join(losses))
    for note in notes:
        print("  " + note)
    print_measures(results)
    print_ab(results, log_dir)
    print_targets(results, log_dir)


def attention_rows(log_dir):
    """{op: (ms, floor_ms)} of the attention rows of qkv_cuda_bench's RESULT lines (ops.log), if any."""
    rows = {}
    path = os.path.join(log_dir, "ops.log")
    if not os.path.exists(path):
        return rows
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("RESULT bench=cuda-op op=attention_"):
                fields = dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)
                rows[fields["op"]] = (float(fields["ms"]), float(fields["floor_ms"]))
    return rows


def print_targets(results, log_dir):
    """Issue 25's targets, each with the figure behind it: met, not met, or not measured."""
    print("\nIssue 25's targets in this run:")
    for bench, title in BENCHES:
        for precision in PRECISIONS:
            q = results.get((bench, "qkv", precision))
            for side, label in (("PyTorch", "eager"), ("PyTorch-compile", "torch.compile")):
                peer = results.get((bench, side, precision))
                goal = "target" if side == "PyTorch" else "goal beyond it"
                if not (q and peer):
                    print(f"  {title} {precision}: qkv >= 1.0x {label} ({goal}): not measured (a side is missing)")
                    continue
                r = float(q["tokens_per_s"]) / float(peer["tokens_per_s"])
                print(f"  {title} {precision}: qkv >= 1.0x {label} ({goal}): {r:.2f}x, "
                      f"{'met' if r >= 1.0 else 'NOT met'}")
    rows = attention_rows(log_dir)
    if not rows:
        print("  attention forward/backward >= 50% of the tensor-core floor: not measured (no ops.log)")
    for op, (ms, floor_ms) in sorted(rows.items()):
        if "rowwise" in op:
            continue  # the old kernels: the A/B's baseline, not a target
        share = floor_ms / ms if ms > 0 else 0.0
        print(f"  {op} >= 50% of its tensor-core floor: {100 * share:.0f}%, {'met' if share >= 0.5 else 'NOT met'}"
              + (" (3xTF32 issues three mma per product: at most a third)" if "3xtf32" in op else ""))


if __name__ == "__main__":
    main()
