#!/usr/bin/python3
"""The peers' quantized weights for the quantized GPT-2 benchmark (bench/run_gpt2.sh; issue 36, "Speed and
memory"): rewrites bench/gpt2_export.py's fp32 ONNX export so that every matrix product with a constant weight
reads 8-bit or 4-bit weights, as the quantized models Transformers.js runs on onnxruntime-web do. Debian's
python3-onnx and numpy only: onnxruntime's Python quantization tools are not on the machine.

  gpt2_quantize_onnx.py IN.onnx OUT.onnx --weights q8       each product: DynamicQuantizeLinear on the activation
                                                           + MatMulInteger (uint8 x int8) + Cast + the scales' Mul,
                                                           the graph onnxruntime's quantize_dynamic writes (its CPU
                                                           and wasm builds fuse it into MatMulIntegerToFloat):
                                                           Transformers.js's "q8" / "int8" models
  gpt2_quantize_onnx.py IN.onnx OUT.onnx --weights q8nbits  com.microsoft MatMulNBits, bits 8, block 32 (fp32
                                                           activations, weights dequantized in the kernel)
  gpt2_quantize_onnx.py IN.onnx OUT.onnx --weights q4       com.microsoft MatMulNBits, bits 4, block 32:
                                                           Transformers.js's "q4" models

The weights are quantized by the rules of qkv's formats (cpp/src/ops/weight_format.h, /work/notes' spec), so the
peers read the same numbers qkv's int8 and q4 do:
  int8: per output row n (a column of the (K, N) ONNX weight): scale = max_k |w| / 127, q = rint(w / scale)
        clamped to [-127, 127], symmetric (zero point 0). MatMulNBits bits 8 has one scale per block of 32: the
        row's scale repeated, the stored byte q + 128 (its implicit zero point is 128).
  q4:   per row n and group g of 32 along K: m = the element of largest |w| (the first on ties), d = m / -8
        rounded to bfloat16 (qkv stores it so; MatMulNBits takes it as that value in fp32),
        q = clamp(rint(w / d) + 8, 0, 15) (d == 0: q = 8); two per byte, the even k in the low nibble, K padded
        with q = 8 (MatMulNBits' layout and its implicit zero point 8).
What is rewritten: the 48 Gemms (A (M, K) x W (K, N) + bias: Conv1D's addmm) become the product + Add(bias); the
head's MatMul (ln_f's output (B, T, 768) x (768, 50257)) the product alone; the token embedding's Gather reads an
int8 table (per-row scales, gathered beside the rows and multiplied in) in all three. Positions, LayerNorms and
biases stay fp32. The unused fp32 initializers are dropped.

Prints what it replaced and the bytes of the initializers by type; the logits are compared with the fp32 model's
by bench/gpt2_node.mjs compare (onnxruntime-node and -web).
usage: gpt2_quantize_onnx.py IN.onnx OUT.onnx --weights q8|q8nbits|q4 [--accuracy-level 0|4]
"""
import argparse
import collections
import os
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

GROUP = 32


def quantize_int8_rows(w):
    """w (N, K) fp32 -> q (N, K) int8, scale (N,) fp32: one symmetric scale per row."""
    scale = (np.abs(w).max(axis=1) / np.float32(127)).astype(np.float32)
    safe = np.where(scale == 0, np.float32(1), scale).astype(np.float32)
    q = np.clip(np.rint(w / safe[:, None]), -127, 127).astype(np.int8)
    q[scale == 0] = 0
    return q, scale


def bf16_round(x):
    """fp32 -> the nearest bfloat16 (ties to even), as fp32 (finite x)."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


def quantize_q4_rows(w):
    """w (N, K) fp32 -> packed (N, G, 16) uint8, scales (N, G) fp32, G = ceil(K / 32): Q4_0's rule, MatMulNBits'
    nibble order."""
    N, K = w.shape
    G = (K + GROUP - 1) // GROUP
    padded = np.zeros((N, G * GROUP), np.float32)
    padded[:, :K] = w
    blocks = padded.reshape(N, G, GROUP)
    first_max = np.abs(blocks).argmax(axis=2)  # argmax returns the first of equal values
    m = np.take_along_axis(blocks, first_max[:, :, None], axis=2)[:, :, 0]
    d = bf16_round((m / np.float32(-8) + np.float32(0)).astype(np.float32))  # qkv's bfloat16 scale, as a float
    safe = np.where(d == 0, np.float32(1), d).astype(np.float32)
    q = np.clip(np.rint(blocks / safe[:, :, None]) + 8, 0, 15).astype(np.uint8)
    q[d == 0] = 8
    q = q.reshape(N, G * GROUP)
    q[:, K:] = 8
    q = q.reshape(N, G, GROUP)
    packed = (q[:, :, 0::2] | (q[:, :, 1::2] << 4)).astype(np.uint8)
    return packed, d


class Rewriter:
    def __init__(self, model, weights, accuracy_level=0):
        self.model, self.weights, self.accuracy_level = model, weights, accuracy_level
        self.graph = model.graph
        self.inits = {i.name: i for i in self.graph.initializer}
        self.new_inits, self.drop = [], set()
        self.count = collections.Counter()

    def const(self, name, array):
        self.new_inits.append(numpy_helper.from_array(array, name))
        return name

    def product(self, a, w_kn, out, prefix):
        """Nodes computing out = a (..., K) x W, W given as (K, N) fp32, in the chosen format."""
        w = np.ascontiguousarray(w_kn.T)  # (N, K): torch.nn.Linear's layout, rows along the output
        N, K = w.shape
        if self.weights == "q8":
            q, scale = quantize_int8_rows(w)
            wq = self.const(prefix + ".wq", np.ascontiguousarray(q.T))  # (K, N) int8
            wzp = self.const(prefix + ".wzp", np.zeros(N, np.int8))  # per column, all 0: symmetric
            ws = self.const(prefix + ".ws", scale)
            nodes = [
                helper.make_node("DynamicQuantizeLinear", [a], [prefix + ".aq", prefix + ".as", prefix + ".azp"],
                                 name=prefix + "/DynamicQuantizeLinear"),
                helper.make_node("MatMulInteger", [prefix + ".aq", wq, prefix + ".azp", wzp], [prefix + ".i32"],
                                 name=prefix + "/MatMulInteger"),
                helper.make_node("Cast", [prefix + ".i32"], [prefix + ".f32"], to=TensorProto.FLOAT,
                                 name=prefix + "/Cast"),
                helper.make_node("Mul", [prefix + ".as", ws], [prefix + ".scale"], name=prefix + "/MulScales"),
                helper.make_node("Mul", [prefix + ".f32", prefix + ".scale"], [out], name=prefix + "/Mul"),
            ]
            self.count["MatMulInteger"] += 1
            return nodes
        if self.weights == "q8nbits":
            q, scale = quantize_int8_rows(w)
            G = (K + GROUP - 1) // GROUP
            stored = np.full((N, G * GROUP), 128, np.uint8)
            stored[:, :K] = (q.astype(np.int16) + 128).astype(np.uint8)
            blob = self.const(prefix + ".wq", stored.reshape(N, G, GROUP))
            scales = self.const(prefix + ".ws", np.repeat(scale, G).astype(np.float32))
            bits = 8
        else:
            packed, d = quantize_q4_rows(w)
            blob = self.const(prefix + ".wq", packed)
            scales = self.const(prefix + ".ws", d.reshape(-1))
            bits = 4
        self.count[f"MatMulNBits bits={bits}"] += 1
        return [helper.make_node("MatMulNBits", [a, blob, scales], [out], domain="com.microsoft", K=K, N=N, bits=bits,
                                 block_size=GROUP, accuracy_level=self.accuracy_level, name=prefix + "/MatMulNBits")]

    def embedding(self, node):
        """Gather(table (V, C), ids) -> int8 rows times their gathered scales (ids' shape + (C,))."""
        table = numpy_helper.to_array(self.inits[node.input[0]])
        q, scale = quantize_int8_rows(table)
        p = node.name
        qt = self.const(p + ".q", q)
        st = self.const(p + ".scale", scale.reshape(-1, 1))  # (V, 1): gathered to ids' shape + (1,)
        self.count["Gather int8"] += 1
        return [
            helper.make_node("Gather", [qt, node.input[1]], [p + ".rows"], axis=0, name=p + "/GatherQ"),
            helper.make_node("Gather", [st, node.input[1]], [p + ".rows_scale"], axis=0, name=p + "/GatherScale"),
            helper.make_node("Cast", [p + ".rows"], [p + ".rows_f32"], to=TensorProto.FLOAT, name=p + "/Cast"),
            helper.make_node("Mul", [p + ".rows_f32", p + ".rows_scale"], list(node.output), name=p + "/Mul"),
        ]

    def run(self):
        out_nodes = []
        for node in self.graph.node:
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            if (node.op_type == "Gemm" and node.input[1] in self.inits and attrs.get("transA", 0) == 0
                    and attrs.get("transB", 0) == 0 and attrs.get("alpha", 1.0) == 1.0
                    and attrs.get("beta", 1.0) == 1.0):
                w = numpy_helper.to_array(self.inits[node.input[1]])
                self.drop.add(node.input[1])
                if len(node.input) > 2 and node.input[2]:
                    y = node.name + ".y"
                    out_nodes += self.product(node.input[0], w, y, node.name)
                    out_nodes.append(helper.make_node("Add", [y, node.input[2]], list(node.output),
                                                      name=node.name + "/AddBias"))
                else:
                    out_nodes += self.product(node.input[0], w, node.output[0], node.name)
            elif node.op_type == "MatMul" and node.input[1] in self.inits and len(self.inits[node.input[1]].dims) == 2:
                w = numpy_helper.to_array(self.inits[node.input[1]])
                self.drop.add(node.input[1])
                out_nodes += self.product(node.input[0], w, node.output[0], node.name)
            elif (node.op_type == "Gather" and node.input[0] in self.inits and node.input[0].endswith("wte.weight")
                  and attrs.get("axis", 0) == 0):
                self.drop.add(node.input[0])
                out_nodes += self.embedding(node)
            else:
                out_nodes.append(node)
        used = {i for n in out_nodes for i in n.input}
        kept = [i for i in self.graph.initializer if i.name not in self.drop or i.name in used]
        del self.graph.node[:]
        self.graph.node.extend(out_nodes)
        del self.graph.initializer[:]
        self.graph.initializer.extend(kept + self.new_inits)
        if self.weights != "q8" and not any(o.domain == "com.microsoft" for o in self.model.opset_import):
            self.model.opset_import.append(helper.make_opsetid("com.microsoft", 1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--weights", choices=["q8", "q8nbits", "q4"], required=True)
    ap.add_argument("--accuracy-level", type=int, default=0, choices=[0, 1, 2, 3, 4],
                    help="MatMulNBits' accuracy_level: 0 (unset: fp32 activations, what Transformers.js's q4 models "
                         "carry) or 4 (int8 activations: onnxruntime's integer-dot kernels)")
    args = ap.parse_args()
    t0 = time.time()
    model = onnx.load(args.input)
    r = Rewriter(model, args.weights, args.accuracy_level)
    r.run()
    onnx.checker.check_model(model)
    onnx.save(model, args.output)
    by_type = collections.Counter()
    for i in model.graph.initializer:
        by_type[TensorProto.DataType.Name(i.data_type)] += len(i.raw_data) or np.prod(i.dims) * 4
    print(f"{args.output}: {args.weights}; replaced {dict(r.count)}; initializers "
          + ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in sorted(by_type.items()))
          + f"; file {os.path.getsize(args.output) / 1e6:.1f} MB ({time.time() - t0:.1f} s)")


if __name__ == "__main__":
    main()
