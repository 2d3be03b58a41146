#!/usr/bin/env python3
"""The GPU training comparison, qkv vs PyTorch eager and torch.compile, from the RESULT lines in bench/run_cuda.sh's
logs.

usage: cuda_report.py LOG_DIR      (standard library only)

Reads `RESULT bench=char-gpt|seq2seq side=qkv|PyTorch precision=fp32|tf32|bf16 [mode=eager|compile] ...` lines,
printed by build/cuda/bench/qkv_cuda_train and bench/cuda_torch.py (no mode: eager), from every *.log under LOG_DIR,
and prints one row per (model, precision): the median ms/step, tokens/s and MFU of qkv, PyTorch eager and PyTorch
compiled, and qkv / each PyTorch in tokens/s (above 1: qkv is faster); bf16 is PyTorch's autocast (qkv has no
bf16 yet: "-"). Both sides count the same model FLOPs per step (nanoGPT's estimate_mfu, cuda_torch.py's docstring) and
divide by the same peak, so the MFU ratio equals the speed ratio; the report says so when the counts differ.
A side that printed no RESULT line (not run, or failed) shows "-", and the row names the log to read.
"""
import glob
import math
import os
import shlex
import sys

BENCHES = [("char-gpt", "char GPT L6 H6 C384 T256"), ("seq2seq", "Seq2Seq 6+6 d512 S100 T100")]
PRECISIONS = ["fp32", "tf32", "bf16"]
SIDES = [("qkv", "eager"), ("PyTorch", "eager"), ("PyTorch", "compile")]
LOGS = {"qkv": "qkv_train.log", "PyTorch": "torch.log"}


def read_results(log_dir):
    """{(bench, side, precision, mode): fields} of the last such RESULT line in LOG_DIR's logs (a later run wins)."""
    out = {}
    for path in sorted(glob.glob(os.path.join(log_dir, "*.log"))):
        with open(path, errors="replace") as f:
            for line in f:
                if not line.startswith("RESULT "):
                    continue
                fields = dict(kv.split("=", 1) for kv in shlex.split(line)[1:] if "=" in kv)
                if fields.get("bench") in dict(BENCHES) and "side" in fields and "precision" in fields:
                    out[(fields["bench"], fields["side"], fields["precision"], fields.get("mode", "eager"))] = fields
    return out


def cells(r):
    """ms/step, tokens/s, MFU of one side, or dashes."""
    if r is None:
        return f"{'-':>9} {'-':>10} {'-':>6}"
    mfu = float(r.get("mfu", "nan"))
    mfu_cell = "-" if math.isnan(mfu) else f"{100 * mfu:.1f}%"
    return f"{float(r['ms_per_step']):>9.2f} {float(r['tokens_per_s']):>10.0f} {mfu_cell:>6}"


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    log_dir = sys.argv[1]
    results = read_results(log_dir)
    if not results:
        sys.exit(f"no char-gpt or seq2seq RESULT lines in {log_dir}/*.log: run bench/run_cuda.sh first")
    any_row = next(iter(results.values()))
    print(f"\nGPU training step, qkv vs PyTorch eager and torch.compile, on {any_row.get('device', '?')}: median "
          "ms/step of the timed steps; tokens/s = tokens per step / median\n(the Seq2Seq counts the 99 target "
          "positions a row); MFU = model FLOPs per step / median step time / the peak below")
    head = "  ".join(f"{label + ' ms':>9} {'tokens/s':>10} {'MFU':>6}" for label in ("qkv", "eager", "comp"))
    print(f"{'model':<27} {'prec':<5}  {head}  {'qkv/eager':>10} {'qkv/comp':>9} {'peak TFLOP/s':>13}")
    notes = []
    for bench, title in BENCHES:
        for precision in PRECISIONS:
            rows = [results.get((bench, side, precision, mode)) for side, mode in SIDES]
            if not any(rows):
                continue
            q = rows[0]
            ratios = [f"{float(q['tokens_per_s']) / float(t['tokens_per_s']):.2f}x" if q and t else "-"
                      for t in rows[1:]]
            peaks = {r.get("peak_tflops") for r in rows if r}
            peak = "/".join(sorted(p if p != "nan" else "-" for p in peaks))
            print(f"{title:<27} {precision:<5}  {'  '.join(cells(r) for r in rows)}  {ratios[0]:>10} {ratios[1]:>9} "
                  f"{peak:>13}")
            for (side, mode), r in zip(SIDES, rows):
                if r is None and not (side == "qkv" and precision == "bf16"):
                    notes.append(f"{bench} {precision}: no {side} {mode} result "
                                 f"(see {os.path.join(log_dir, LOGS[side])})")
            for t in rows[1:]:
                if q and t:
                    fq, ft = float(q["model_tflop_per_step"]), float(t["model_tflop_per_step"])
                    if abs(fq - ft) > 1e-3 * ft:
                        notes.append(f"{bench} {precision}: the sides count different model FLOPs per step "
                                     f"(qkv {fq:.4f}, PyTorch {ft:.4f} TFLOP): MFU ratio != speed ratio")
            if len(peaks) > 1:
                notes.append(f"{bench} {precision}: the sides divide by different peaks ({peak} TFLOP/s)")
    sources = sorted({r.get("peak_source", "?") for (_, side, _, _), r in results.items() if side == "qkv"})
    print(f"  peak: the GPU's dense datasheet figure (no sparsity; cuda_torch.py's table, H100 SXM: fp32 66.9, tf32 "
          f"494.7, bf16 989.4 TFLOP/s) unless --peak-tflops gave one; the qkv side's: {', '.join(sources) or '-'}")
    losses = [f"{bench} {prec} {float(r['loss_first']):.3f} -> {float(r['loss_last']):.3f}"
              for (bench, side, prec, _), r in sorted(results.items()) if side == "qkv" and "loss_first" in r]
    if losses:
        print("  qkv's loss, first warm-up step -> last timed step: " + "; ".join(losses))
    for note in notes:
        print("  " + note)


if __name__ == "__main__":
    main()
