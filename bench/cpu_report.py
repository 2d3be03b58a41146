#!/usr/bin/python3
"""The comparison tables of the CPU-speed benchmarks, from the RESULT lines in bench/run_cpu.sh's logs.

usage: cpu_report.py LOG_DIR      (standard library only)

A RESULT line is `RESULT key=value ...` (values with spaces quoted), printed by `qkv_bench char-gpt|seq2seq`,
bench/train_torch.py and bench/wasm_char_gpt.mjs. Ratios are qkv / peer in tokens/s (higher is better for qkv),
except the WebAssembly one, which is how many times slower wasm is than native.
"""
import glob
import os
import shlex
import sys


def read_results(log_dir):
    """(file stem, {key: value}) for every RESULT line of every *.log under log_dir."""
    out = []
    for path in sorted(glob.glob(os.path.join(log_dir, "*.log"))):
        with open(path) as f:
            for line in f:
                if line.startswith("RESULT "):
                    fields = dict(kv.split("=", 1) for kv in shlex.split(line)[1:])
                    out.append((os.path.basename(path)[:-4], fields))
    return out


def verdict(ok):
    return "ok" if ok else "NO"


def training_table(title, rows, target, note):
    """rows: [(threads, qkv fields, PyTorch fields)]; target: the qkv / PyTorch tokens/s ratio to reach."""
    print(f"\n{title}")
    print(f"{'thr':>3} {'qkv ms/step':>12} {'qkv tok/s':>10} {'torch ms/step':>14} {'torch tok/s':>12} "
          f"{'qkv/torch':>10} {'target':>10} {'qkv RSS MiB':>12} {'torch RSS MiB':>14} {'RSS <= torch':>13}")
    for threads, q, t in rows:
        ratio = float(q["tokens_per_s"]) / float(t["tokens_per_s"])
        q_rss, t_rss = float(q["peak_rss_mib"]), float(t["peak_rss_mib"])
        print(f"{threads:>3} {float(q['ms_per_step']):>12.2f} {float(q['tokens_per_s']):>10.0f} "
              f"{float(t['ms_per_step']):>14.2f} {float(t['tokens_per_s']):>12.0f} {ratio:>9.2f}x "
              f"{'>=' + str(target) + 'x ' + verdict(ratio >= target):>10} {q_rss:>12.1f} {t_rss:>14.1f} "
              f"{verdict(q_rss <= t_rss):>13}")
    print(note)


def char_gpt_step_gflop(batch, seq):
    """Model FLOP of one training step of the package's char GPT (vocab 65, C 128, 4 layers, 4 heads, context
    64), counted as nanoGPT's estimate_mfu does: per token 6 x the matrix products' weights (forward 2, backward
    4; the four per-layer products, 12 C^2, and the tied LM head, V C) plus attention's 12 L C T (q k^T and
    P v over all T keys, forward and backward). Biases, LayerNorm, softmax and AdamW are not counted, and
    neither is the causal mask's saving (qkv skips the key blocks right of the diagonal): a convention that
    makes the figure comparable across implementations rather than a count of the work done."""
    vocab, C, layers, T = 65, 128, 4, 64
    matmul_weights = layers * 12 * C * C + vocab * C
    per_token = 6 * matmul_weights + 12 * layers * C * T
    return per_token * batch * seq / 1e9


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    results = read_results(sys.argv[1])
    if not results:
        sys.exit(f"no RESULT lines in {sys.argv[1]}/*.log: run bench/run_cpu.sh first")

    def find(bench, side, **match):
        """The matching run with the most tokens/s: run_cpu.sh alternates the sides over a few rounds and
        compares each side's best run."""
        runs = [r for _, r in results
                if r["bench"] == bench and r["side"] == side and all(r.get(k) == str(v) for k, v in match.items())]
        return max(runs, key=lambda r: float(r["tokens_per_s"]), default=None)

    # 2a. char GPT vs PyTorch, per thread count
    def peak(isa, threads):
        """The best peak-loop figure (GFLOP/s) of a native isa or a wasm variant at `threads`, or None."""
        if isa.startswith("wasm"):
            runs = [r for _, r in results if r["bench"] == "wasm-peak" and int(r["threads"]) == threads
                    and r["variant"] == ("relaxed" if isa.endswith("+relaxed") else "plain")]
        else:
            runs = [r for _, r in results if r["bench"] == "peak" and r["isa"] == isa and int(r["threads"]) == threads]
        return max((float(r["gflops"]) for r in runs), default=None)

    char_rows = []
    for threads in sorted({int(r["threads"]) for _, r in results if r["bench"] == "char-gpt" and r["side"] != "wasm"}):
        q = find("char-gpt", "qkv", threads=threads, config="recipe")
        t = find("char-gpt", "PyTorch", threads=threads)
        if q and t:
            char_rows.append((threads, q, t))
    if char_rows:
        r = char_rows[0][1]
        training_table(f"char GPT training (nanoGPT CPU config, B {r['batch']} x T {r['seq']}, {r['steps']} timed steps): "
                       f"qkv ({r['isa']}) vs PyTorch", char_rows, 2.0,
                       "  tokens/s = batch x 64 tokens per step / mean step time, each side's best of its runs "
                       "(alternated with the other side's);\n  RSS = each process's peak resident memory (ru_maxrss)")
        # What the 2x target asks of the hardware: the step's model FLOP rate on each side as a share of the
        # machine's peak at those threads (the gemm run's peak loop, qkv's instruction set).
        if any(peak(q["isa"], threads) for threads, q, _ in char_rows):
            gflop = char_gpt_step_gflop(int(r["batch"]), int(r["seq"]))
            print(f"  against the peak ({gflop:.3f} GFLOP a step, nanoGPT's estimate_mfu count; peak: qkv_bench peak, "
                  f"{r['isa']}, 1-thread figure x threads):")
            print(f"  {'thr':>3} {'peak':>7} {'qkv GFLOP/s':>12} {'% peak':>7} {'torch GFLOP/s':>14} {'% peak':>7} "
                  f"{'2x torch = % peak':>18}")
            for threads, q, t in char_rows:
                pk = peak(q["isa"], threads)
                if not pk:
                    continue
                qg = gflop / (float(q["ms_per_step"]) / 1e3)
                tg = gflop / (float(t["ms_per_step"]) / 1e3)
                print(f"  {threads:>3} {pk:>7.1f} {qg:>12.1f} {100 * qg / pk:>6.0f}% {tg:>14.1f} {100 * tg / pk:>6.0f}% "
                      f"{200 * tg / pk:>17.0f}%")

    # 2b. Seq2Seq vs PyTorch
    q, t = find("seq2seq", "qkv"), find("seq2seq", "PyTorch")
    if q and t:
        training_table(f"tutorial Seq2Seq training (vocab 5000, d 512, 8 heads, 6+6 post-LN, d_ff 2048, dropout 0; "
                       f"B {q['batch']}, length {q['seq']}; {q['steps']} timed steps): qkv ({q['isa']}) vs PyTorch "
                       "(nn.Transformer, tutorial style)", [(int(q["threads"]), q, t)], 1.2,
                       "  tokens/s counts target tokens: batch x 100 per step (no padding)")

    # 3. WebAssembly vs native: a block per wasm build (plain SIMD128, and relaxed SIMD where it ran)
    wasm_isas = sorted({r["isa"] for _, r in results if r["bench"] == "char-gpt" and r["side"] == "wasm"})
    isas = sorted({r["isa"] for _, r in results
                   if r["bench"] == "char-gpt" and r["side"] == "qkv" and r.get("config") == "package"},
                  key=lambda isa: isa != "avx512")  # the target's row first
    natives = [find("char-gpt", "qkv", config="package", isa=isa) for isa in isas]

    for wasm_isa in wasm_isas:
        wasm = find("char-gpt", "wasm", isa=wasm_isa)
        if not natives:
            break
        threads = int(wasm["threads"])
        gflop = char_gpt_step_gflop(int(wasm["batch"]), int(wasm["seq"]))
        print(f"\nchar GPT step, the npm package's configuration (biases on, AdamW), B {wasm['batch']} x T {wasm['seq']}, "
              f"{threads} threads, {wasm['steps']} timed steps: WebAssembly ({wasm_isa}) under Node vs native, "
              "same run, each build's best of its alternated runs")
        print(f"{'build':<34} {'ms/step':>9} {'tokens/s':>9} {'wasm / this':>12} {'target':>10} {'GFLOP/s':>8} "
              f"{'peak':>7} {'% peak':>7} {'peak / wasm peak':>17}")
        wasm_peak = peak(wasm_isa, threads)

        def peak_columns(ms, pk):
            achieved = gflop / (ms / 1e3)
            if pk is None:
                return f"{achieved:>8.1f} {'-':>7} {'-':>7}"
            return f"{achieved:>8.1f} {pk:>7.1f} {100 * achieved / pk:>6.0f}%"

        for r in natives:
            ms = float(r["ms_per_step"])
            slower = float(wasm["ms_per_step"]) / ms
            target = f"<=3x {verdict(slower <= 3.0)}" if r["isa"] == "avx512" else "-"
            pk = peak(r["isa"], threads)
            ceiling = f"{pk / wasm_peak:>16.2f}x" if pk and wasm_peak else f"{'-':>17}"
            print(f"{'native ' + r['isa']:<34} {ms:>9.2f} {float(r['tokens_per_s']):>9.0f} "
                  f"{slower:>11.2f}x {target:>10} {peak_columns(ms, pk)} {ceiling}")
        print(f"{'wasm (' + wasm_isa + ', Node)':<34} {float(wasm['ms_per_step']):>9.2f} "
              f"{float(wasm['tokens_per_s']):>9.0f} {'':>12} {'':>10} {peak_columns(float(wasm['ms_per_step']), wasm_peak)}")
    if wasm_isas and natives:
        print("  'wasm / this' = wasm ms/step / native ms/step: how many times slower the WebAssembly build is; "
              "native sse4.1\n  is the same 4-lane kernels natively, so wasm / native sse4.1 is the cost of WebAssembly "
              "itself.\n  +relaxed: the relaxed-SIMD build (fused multiply-adds in the products), which the loader picks "
              "where the\n  engine has relaxed SIMD (Chromium 114+, Node 22+; Node 20 with --experimental-wasm-relaxed-simd)")
        print(f"  GFLOP/s: the step's model FLOP ({char_gpt_step_gflop(12, 64):.3f} GFLOP at B 12 x T 64, nanoGPT's "
              "estimate_mfu count: bench/cpu_report.py)\n  per second; peak: the build's own register-only "
              "multiply-add loop at the same threads (qkv_bench peak natively,\n  bench/wasm_peak.mjs for "
              "WebAssembly); 'peak / wasm peak' is the ratio the vector widths allow: wasm / native\n  can only "
              "come under it by running nearer its own peak than native does")

    # 4. thread scaling of the char GPT step
    if len(char_rows) >= 2:
        one, n = char_rows[0], char_rows[-1]
        print(f"\nchar GPT training step, thread scaling 1 -> {n[0]} (speed-up = tokens/s at {n[0]} / at 1; "
              f"efficiency = speed-up / {n[0]})")
        print(f"{'side':<8} {'1 thr tok/s':>12} {f'{n[0]} thr tok/s':>12} {'speed-up':>9} {'eff.':>6}")
        for side, i in (("qkv", 1), ("PyTorch", 2)):
            a, b = float(one[i]["tokens_per_s"]), float(n[i]["tokens_per_s"])
            print(f"{side:<8} {a:>12.0f} {b:>12.0f} {b / a:>8.2f}x {100 * b / a / n[0]:>5.0f}%")

    loads = [float(r["load"].split()[0]) for _, r in results if r.get("load", "?") != "?"]
    if loads:
        print(f"\n1-minute load average at the end of each run: {min(loads):.2f} to {max(loads):.2f} "
              f"(on {os.cpu_count()} cores; the benchmark itself accounts for up to its thread count, the rest is other processes)")


if __name__ == "__main__":
    main()
