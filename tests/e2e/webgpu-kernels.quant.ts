/// <reference types="@webgpu/types" />
// The quantized-weight suites of webgpu-kernels.page.ts: gemm_quant (both kernels), dequantize_rows and
// embedding_forward_quant in every packed format, against the dequantized weights in double
// (webgpu-kernels.ref.ts's randomPacked), and the encoder's refusals of a bad packed pointer or format.
import { Op } from "../../web/src/webgpu/protocol.js";
import { write } from "../../web/src/webgpu/ops.generated.js";
import { randn, randint, relErr, sumErr, FORMAT_NAMES, randomPacked } from "./webgpu-kernels.ref.js";
import { B, Layout, f32At, record, refused, results, run } from "./webgpu-kernels.harness.js";

const FORMATS = [1, 2, 3, 4];

async function gemmQuant(): Promise<void> {
  // M <= 8: the decoding kernel (a pass per 4 rows of A), above: the tiled one; K below, around and past a Q4
  // group and past several words per invocation (1000); N past one workgroup's 8 and 64 rows, odd.
  const shapes: [number, number, number][] = [];
  for (const M of [1, 4, 9, 67]) for (const N of [1, 17, 67]) for (const K of [1, 31, 33, 100]) shapes.push([M, N, K]);
  shapes.push([1, 67, 1000], [5, 3, 1000], [67, 130, 100]);
  for (const format of FORMATS)
    for (const [M, N, K] of shapes) {
      const lda = K + 3, ldc = N + 2;
      const { bytes, scales, w } = randomPacked(format, N, K);
      const A = randn(M * lda), C0 = new Float32Array(M * ldc).fill(NaN); // C is not read; past N, kept
      const L = new Layout();
      const ra = L.f32(A), rw = L.bytes(bytes), rs = L.f32(scales), rc = L.f32(C0);
      const mem = await run(Op.GemmQuant, write.GemmQuant({ M, N, K, A: B(ra), lda, format, W: B(rw), scales: B(rs), C: B(rc), ldc }), L.host());
      const ref = Float64Array.from(C0), mag = new Float64Array(C0.length).fill(1);
      for (let m = 0; m < M; m++)
        for (let n = 0; n < N; n++) {
          let acc = 0, abs = 0;
          for (let k = 0; k < K; k++) {
            const t = A[m * lda + k]! * w[n * K + k]!;
            acc += t;
            abs += Math.abs(t);
          }
          ref[m * ldc + n] = acc;
          mag[m * ldc + n] = Math.max(abs, 1e-30);
        }
      // the same products of the same floats as the reference, summed in another order: judged against sum |a w|,
      // gemm's check; NaN past N must stay (sumErr fails on a NaN only where ref is not NaN)
      const got = f32At(mem, rc);
      const keptNaN = Array.from(got).every((v, i) => !Number.isNaN(ref[i]!) || Number.isNaN(v));
      record("GemmQuant", `${FORMAT_NAMES[format]} ${M}x${N}x${K}`, [keptNaN ? nanSafeSumErr(got, ref, mag) : Infinity]);
    }
}
/** sumErr over the elements whose reference is a number. */
function nanSafeSumErr(got: Float32Array, ref: Float64Array, mag: Float64Array): number {
  const keep = Array.from(ref.keys()).filter((i) => !Number.isNaN(ref[i]!));
  return sumErr(keep.map((i) => got[i]!), keep.map((i) => ref[i]!), keep.map((i) => mag[i]!));
}

async function dequantizeRows(): Promise<void> {
  for (const format of FORMATS)
    for (const [rows, K] of [[1, 1], [5, 31], [3, 33], [2, 100], [67, 64]] as const) {
      const ld = K + 1;
      const { bytes, scales, w } = randomPacked(format, rows, K);
      const out0 = randn(rows * ld);
      const L = new Layout();
      const rw = L.bytes(bytes), rs = L.f32(scales), ro = L.f32(out0);
      const mem = await run(Op.DequantizeRows, write.DequantizeRows({ out: B(ro), ld_out: ld, format, W: B(rw), scales: B(rs), rows, K }), L.host());
      const ref = out0.slice();
      for (let r = 0; r < rows; r++) for (let k = 0; k < K; k++) ref[r * ld + k] = w[r * K + k]!;
      record("DequantizeRows", `${FORMAT_NAMES[format]} ${rows}x${K}`, [relErr(f32At(mem, ro), ref)], 0); // exact
    }
}

async function embeddingQuant(): Promise<void> {
  for (const format of FORMATS)
    for (const [V, Bn, T, C, withPos] of [[7, 2, 5, 1, true], [7, 2, 5, 31, true], [17, 3, 4, 33, false], [67, 2, 17, 100, true]] as const) {
      const rows = Bn * T;
      const ids = randint(rows, V), pos = randn((T + 2) * C), scale = 1.5;
      const { bytes, scales, w } = randomPacked(format, V, C);
      const L = new Layout();
      const rx = L.f32(new Float32Array(rows * C).fill(NaN)), ri = L.i32(ids), rw = L.bytes(bytes), rs = L.f32(scales), rp = L.f32(pos);
      const mem = await run(
        Op.EmbeddingForwardQuant,
        write.EmbeddingForwardQuant({
          x: B(rx), x_n: rows * C, tokens: B(ri), tokens_n: rows, format, wte: B(rw), wte_scales: B(rs), pos: B(rp), pos_n: withPos ? pos.length : 0,
          scale, B: Bn, T, C,
        }),
        L.host(),
      );
      const ref = new Float64Array(rows * C);
      for (let r = 0; r < rows; r++) for (let i = 0; i < C; i++) ref[r * C + i] = scale * w[ids[r]! * C + i]! + (withPos ? pos[(r % T) * C + i]! : 0);
      record("EmbeddingForwardQuant", `${FORMAT_NAMES[format]} V${V} B${Bn} T${T} C${C}${withPos ? "" : " no pos"}`, [relErr(f32At(mem, rx), ref)]);
    }
}

/** A packed pointer that is not u32-aligned, and a format that is not packed, are refused by the encoder. */
async function quantRefusals(): Promise<void> {
  const base = { M: 1, N: 1, K: 4, A: 64, lda: 4, format: 3, W: 128, scales: 256, C: 512, ldc: 1 };
  results.push({ op: "GemmQuant refusals", shape: "W at byte 130", err: refused(Op.GemmQuant, write.GemmQuant({ ...base, W: 130 })) ? 0 : Infinity, tol: 0 });
  results.push({ op: "GemmQuant refusals", shape: "format 0 (f32)", err: refused(Op.GemmQuant, write.GemmQuant({ ...base, format: 0 })) ? 0 : Infinity, tol: 0 });
  results.push({ op: "GemmQuant refusals", shape: "format 5", err: refused(Op.GemmQuant, write.GemmQuant({ ...base, format: 5 })) ? 0 : Infinity, tol: 0 });
}

/** Every quantized-weight case (QKV_WEBGPU_SUITES=quant; each part also runs alone by its name). */
export async function quant(): Promise<void> {
  for (const part of [gemmQuant, dequantizeRows, embeddingQuant, quantRefusals]) await part();
}

export const QUANT_SUITES: Record<string, () => Promise<void>> = { quant, gemmQuant, dequantizeRows, embeddingQuant, quantRefusals };
