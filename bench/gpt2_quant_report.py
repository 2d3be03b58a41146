#!/usr/bin/python3
"""The tables of the quantized GPT-2 decoding benchmark (GPT2_BENCH_QUANT=1 bench/run_gpt2.sh; issue 36, "Speed and
memory") from its logs: the RESULT lines of every side's processes and of the alternated process.

  1. every side: its best process (the worst after "to"), resident weights (qkv: memory().parameters), the resident
     set after loading and the peak, how many of the 64 greedy tokens agree with PyTorch's fp32 ones before the
     first difference (quantized weights may change a close pick; fp32 sides must agree on all 64);
  2. per format: native and wasm decode, each as a ratio to fp32 in the same engine, and natively the bandwidth
     floor: bytes read per token / the streaming read bandwidth the same process measured right after its
     generations (qkv_gpt2_bench --bandwidth-mb; in logs without it, the run's best `bandwidth` round).
     Bytes per token = the resident weights less the position table (a step reads one of its 1024 rows) plus the
     KV cache read at the median step (keys and values of 12 layers, 768 wide, fp32, at position 32 + 32);
  3. the targets: int8 >= 2.5x and q4 >= 4x fp32's tokens/s, every native format >= 70% of its floor, the package's
     int8 >= 1.2x onnxruntime-web's 8-bit (best processes, and the median of the alternated rounds), resident
     weights 4x (int8) and about 7x (q4) smaller than fp32.

usage: gpt2_quant_report.py LOGS EXPECTED.json
"""
import json
import pathlib
import re
import statistics
import sys

LAYERS, WIDTH, POSITIONS = 12, 768, 1024
WPE_BYTES = POSITIONS * WIDTH * 4
KV_BYTES_MEDIAN_STEP = LAYERS * 2 * (32 + 32) * WIDTH * 4
# int8a8, q4a8: the int8 and q4 weights with int8 activations (qkv quantize --activations int8).
FORMATS = ["f32", "f16", "bf16", "int8", "q4", "int8a8", "q4a8"]
PEER_FORMATS = {"": "fp32", "q8": "8-bit, MatMulInteger (Transformers.js q8)", "q8nbits": "8-bit, MatMulNBits",
                "q4": "4-bit, MatMulNBits", "q4a4": "4-bit, MatMulNBits accuracy_level 4",
                "q8nbitsa4": "8-bit, MatMulNBits accuracy_level 4"}


def parse(line):
    return {k: v.strip('"') for k, v in re.findall(r'(\w+)=("[^"]*"|\S+)', line)}


def main():
    logs, expected = pathlib.Path(sys.argv[1]), json.load(open(sys.argv[2]))["greedy"]
    rows, alt, pairs = {}, {}, []
    for log in sorted(logs.glob("*.log")):
        for line in log.read_text().splitlines():
            if not line.startswith("RESULT side="):
                continue
            kv = parse(line)
            if kv["side"] == "alt-pair":
                pairs.append(kv)
            elif kv["side"].startswith("alt-"):
                alt[kv["side"][4:]] = kv
            else:
                rows.setdefault(kv["side"], []).append(kv)
    if not rows:
        sys.exit("no RESULT lines")

    def leading(tokens):
        ids = [int(t) for t in tokens.split(",")]
        n = 0
        while n < len(ids) and n < len(expected) and ids[n] == expected[n]:
            n += 1
        return n

    bw = sorted(float(r["gbs"]) for r in rows.pop("bandwidth", []))
    if bw:
        print(f"streaming read bandwidth, {len(bw)} rounds: best {bw[-1]:.2f} GB/s, median {statistics.median(bw):.2f},"
              f" worst {bw[0]:.2f} (qkv_gpt2_bench bandwidth: 1 GiB, the run's threads)")

    def engine_of(side):
        return "ort-web" if side.startswith("ort-web") else "ort-node" if side.startswith("ort-node") else side.split("-")[0]

    def what(side):
        if side.startswith(("native-", "wasm-")):
            return side.split("-", 1)[1]
        suffix = side[len(engine_of(side)) + 1:]
        return PEER_FORMATS.get(suffix, suffix)

    best = {}
    print("\n== GPT-2 124M, batch 1, prompt 32, 64 new tokens greedy, KV cache: each side's best process (its worst)")
    print("| side | weights | decode ms/token | decode tokens/s | prefill ms | load s | resident weights MB |"
          " RSS after load MB | peak RSS MB | leading tokens = PyTorch fp32's |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    engines, peer_order = ["native", "wasm", "ort-web", "ort-node"], list(PEER_FORMATS)

    def rank(side):
        e = engine_of(side)
        suffix = side[len(e) + 1:]
        sub = FORMATS.index(suffix) if suffix in FORMATS else peer_order.index(suffix) if suffix in peer_order else 99
        return (engines.index(e) if e in engines else 9, sub, side)
    order = sorted(rows, key=rank)
    for side in order:
        rs = rows[side]
        col = lambda k: sorted(float(r[k]) for r in rs if r.get(k, "-") != "-")
        d, p, l, m = col("decode_ms"), col("prefill_ms"), col("load_s"), col("peak_rss_mb")
        params, rss = col("params_mb"), col("rss_load_mb")
        lead = min(leading(r["tokens"]) for r in rs)
        # The floor of each native process at the bandwidth it measured right after its generations (gbs=).
        fractions = sorted((float(r["params_mb"]) * 1e6 - WPE_BYTES + KV_BYTES_MEDIAN_STEP) / (float(r["gbs"]) * 1e9)
                           * 1e3 / float(r["decode_ms"]) for r in rs if float(r.get("gbs", 0) or 0) > 0)
        fastest = min(rs, key=lambda r: float(r["decode_ms"]))
        best[side] = {"decode": d[0], "params": params[0] if params else None, "peak": m[-1], "fractions": fractions,
                      "gbs": float(fastest.get("gbs", 0) or 0)}
        rng = lambda v, f: (f.format(v[0]) if len(v) == 1 else f"{f.format(v[0])} (to {f.format(v[-1])})") if v else "-"
        print(f"| {side} | {what(side)} | {rng(d, '{:.2f}')} | {1e3 / d[0]:.1f} | {rng(p, '{:.0f}')} | {rng(l, '{:.2f}')} |"
              f" {f'{params[0]:.1f}' if params else '-'} | {rng(rss, '{:.0f}')} | {m[-1]:.0f} | {lead}/{len(expected)} |")

    print("\n== per format (best processes): decode against fp32 in the same engine; natively against the bandwidth floor")
    print("| format | native ms/token | native x fp32 | bytes/token MB | GB/s after it | floor ms | % of floor"
          " (its processes) | wasm ms/token | wasm x fp32 | resident weights MB | fp32's / this |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    checks = []
    n32, w32 = best.get("native-f32"), best.get("wasm-f32")
    for f in FORMATS:
        n, w = best.get(f"native-{f}"), best.get(f"wasm-{f}")
        if not n and not w:
            continue
        cells = [f]
        if n:
            bytes_token = n["params"] * 1e6 - WPE_BYTES + KV_BYTES_MEDIAN_STEP if n["params"] else None
            # The fastest process's own bandwidth; without one (an older log), the run's best bandwidth round.
            gbs = n["gbs"] or (bw[-1] if bw else 0)
            floor = bytes_token / (gbs * 1e9) * 1e3 if bytes_token and gbs else None
            fr = n["fractions"]
            span = f" ({100 * fr[0]:.0f}-{100 * fr[-1]:.0f}%)" if len(fr) > 1 else ""
            cells += [f"{n['decode']:.2f}", f"{n32['decode'] / n['decode']:.2f}x" if n32 else "-",
                      f"{bytes_token / 1e6:.1f}" if bytes_token else "-", f"{gbs:.1f}" if gbs else "-",
                      f"{floor:.2f}" if floor else "-", f"{100 * floor / n['decode']:.0f}%{span}" if floor else "-"]
            if floor:
                checks.append((f"native {f} >= 70% of its bandwidth floor (the fastest process)", floor / n["decode"],
                               0.70, "{:.0%}"))
        else:
            cells += ["-"] * 6
        cells += [f"{w['decode']:.2f}", f"{w32['decode'] / w['decode']:.2f}x" if w32 else "-"] if w else ["-", "-"]
        params = (n or w)["params"]
        p32 = (n32 or w32 or {}).get("params")
        cells += [f"{params:.1f}" if params else "-", f"{p32 / params:.2f}x" if params and p32 else "-"]
        print("| " + " | ".join(cells) + " |")
        for engine, base, this in [("native", n32, n), ("wasm", w32, w)]:
            if base and this and f in ("int8", "q4", "int8a8", "q4a8"):
                target = 2.5 if f.startswith("int8") else 4.0
                checks.append((f"{engine} {f} tokens/s >= {target}x fp32's", base["decode"] / this["decode"], target,
                               "{:.2f}x"))
        if params and p32 and f in ("int8", "q4"):
            checks.append((f"resident weights {f}: fp32's / this >= {4.0 if f == 'int8' else 6.5}x", p32 / params,
                           4.0 if f == "int8" else 6.5, "{:.2f}x"))
    for q in ["q8", "q8nbits"]:
        for mine in ["wasm-int8", "wasm-int8a8"]:
            if mine in best and f"ort-web-{q}" in best:
                checks.append((f"{mine[5:]} vs onnxruntime-web {q}, best processes >= 1.2x",
                               best[f"ort-web-{q}"]["decode"] / best[mine]["decode"], 1.2, "{:.2f}x"))
    for kv in pairs:
        if kv["a"] in ("wasm-int8", "wasm-int8a8") and kv["b"].startswith("ort-web-q8"):
            checks.append((f"{kv['a'][5:]} vs onnxruntime-web {kv['b'][8:]}, median of alternated rounds (range "
                           f"{kv['range']}) >= 1.2x", float(kv["decode_median"]), 1.2, "{:.2f}x"))
    if "wasm-q4" in best and "ort-web-q4" in best:
        print(f"\nwasm q4 vs onnxruntime-web q4 (MatMulNBits), best processes: "
              f"{best['ort-web-q4']['decode'] / best['wasm-q4']['decode']:.2f}x")
    if "native-int8" in best and "ort-node-q8" in best:
        print(f"native int8 vs onnxruntime-node q8, best processes: "
              f"{best['ort-node-q8']['decode'] / best['native-int8']['decode']:.2f}x")

    if alt:
        print("\n== alternated in one process (one generation of each side in turn): decode ms/token")
        for name, kv in alt.items():
            print(f"  {name:16} best round {kv['decode_ms']}, median of rounds {kv['decode_ms_median_of_runs']}; "
                  f"prefill {kv['prefill_ms']} ms; resident weights {kv.get('params_mb', '-')} MB; "
                  f"leading tokens = PyTorch fp32's {leading(kv['tokens'])}/{len(expected)}")
        for kv in pairs:
            print(f"  {kv['a']} vs {kv['b']}: decode {kv['decode_median']}x median of rounds ({kv['range']}), "
                  f"prefill {kv['prefill_median']}x")

    print("\n== targets")
    for name, value, target, fmt in checks:
        print(f"  {name}: {fmt.format(value)} {'PASS' if value >= target else 'FAIL'}")
    for side, rs in rows.items():
        if side.endswith("f32") or side in ("ort-web", "ort-node"):
            if any(leading(r["tokens"]) != len(expected) for r in rs):
                print(f"  {side}: fp32 tokens differ from PyTorch's: FAIL")


if __name__ == "__main__":
    main()
