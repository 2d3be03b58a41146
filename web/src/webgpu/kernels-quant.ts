// The WGSL kernels of the quantized-weight ops (cpp/src/ops/op_list.def, check group `quant`): gemm_quant,
// dequantize_rows and embedding_forward_quant, over the packed layouts of cpp/src/ops/weight_format.h. kernels.ts
// encodes them (encodeQuant below); they bind the arena and P as every kernel does (kernels.ts' prelude).
//
// A packed row of K elements is row_words(K) u32 words, and word j holds elements k = j * VPW + i, i < VPW
// (values per word):
//   F16  (1): VPW 2, unpack2x16float(w)[i] (subnormals by hand)         no scale
//   BF16 (2): VPW 2, bitcast<f32>(the half i of w moved to the top)     no scale
//   Int8 (3): VPW 4, the signed byte i of w, times scale[n]             1 scale per row
//   Q4   (4): VPW 8, the nibble i of w (low first: byte b's low nibble is element 2b), minus 8, times
//             group j / 4's scale (a group of 32 is 16 bytes, 4 words): G = ceil(K / 32) bfloat16 per row, two
//             to a scale word (the low half first), ceil(G / 2) words per row
// Words past the last element (a row's padding) are never used: every element is masked by k < K, and A's
// elements past K are never read (they are another row's, or past the arena).
//
// Each kernel is specialised per format (the format is the pipeline's, not a branch in the inner loop):
//   gemm_quant, M <= GEMV_MAX_M (decoding): a workgroup of 256 per 8 rows of W, 32 invocations per row, each
//     reading its words of the packed row (consecutive invocations, consecutive words), unpacking them in
//     registers against the 4 rows of A of the pass (A re-read from the cache per pass of 4); the 32 partial
//     sums of each (row, m) added by a tree in workgroup memory (no subgroups: WebGPU's are an optional feature).
//   gemm_quant, larger M (prefill): 64 x 64 tiles of C as gemm's (kernels-gemm.ts' tiledGemm), K in steps of 16
//     through workgroup memory, W's tile dequantized on its way in (the products then are the fp32 products of the reference).
//   dequantize_rows, embedding_forward_quant: an invocation per packed word, writing its VPW elements.
// Accumulation is f32 (the reference dequantizes to f32 and sums in f32 too: the same math up to the order).
import { KernelOp, read } from "./ops.generated.js";
import { tiledGemm } from "./kernels-gemm.js";

/** Weight formats of ops/weight_format.h that these kernels read (F32 = 0 is gemm's). */
export const WeightFormat = { F16: 1, BF16: 2, Int8: 3, Q4: 4 } as const;
const NAMES: Record<number, string> = { 1: "f16", 2: "bf16", 3: "int8", 4: "q4" };
const VPW: Record<number, number> = { 1: 2, 2: 2, 3: 4, 4: 8 };

/** Decoding shapes: gemm_quant with at most this many rows of A runs the matrix-vector kernel. */
export const GEMV_MAX_M = 8;

/** u32 words of a packed row of K elements (weight_format.h's row_stride / 4). */
export function rowWords(format: number, K: number): number {
  return format === WeightFormat.Q4 ? 4 * Math.ceil(K / 32) : Math.ceil(K / VPW[format]!);
}
/** 32-bit scale words per row (weight_format.h's scales_per_row): Int8's f32, Q4's bfloat16 two to a word. */
export function scalesPerRow(format: number, K: number): number {
  return format === WeightFormat.Int8 ? 1 : format === WeightFormat.Q4 ? Math.ceil(Math.ceil(K / 32) / 2) : 0;
}

/**
 * The format's pieces: VPW; row_words(K); q_of(w, i), element i of word w before its scale; scale_of(row, j,
 * K), the scale of word j of a row (read at `scales`, an argument of P: a byte offset).
 */
function formatWgsl(format: number, scales: string): string {
  const q = {
    1: "return half_of((w >> (16u * i)) & 0xffffu);",
    2: "return bitcast<f32>(select(w << 16u, w & 0xffff0000u, i == 1u));",
    3: "return f32(extractBits(bitcast<i32>(w), 8u * i, 8u));",
    4: "return f32(extractBits(w, 4u * i, 4u)) - 8.0;",
  }[format];
  const s = {
    1: "return 1.0;",
    2: "return 1.0;",
    3: `return ld(wd(P.${scales}) + row);`,
    4: `let g = j / 4u;
  let word = mem[wd(P.${scales}) + row * (((K + 31u) / 32u + 1u) / 2u) + g / 2u];
  return bitcast<f32>(select(word << 16u, word & 0xffff0000u, (g & 1u) == 1u));`,
  }[format];
  if (!q || !s) throw new Error(`qkv webgpu: weight format ${format}: expected 1 (f16), 2 (bf16), 3 (int8) or 4 (q4)`);
  return /* wgsl */ `
const VPW = ${VPW[format]}u;
fn row_words(K: u32) -> u32 { return ${format === WeightFormat.Q4 ? "4u * ((K + 31u) / 32u)" : "(K + VPW - 1u) / VPW"}; }
// The half in the low 16 bits of h: a subnormal (or a zero) by hand, m 2^-24 exactly (an implementation may flush
// unpack2x16float's).
fn half_of(h: u32) -> f32 {
  if ((h & 0x7c00u) == 0u) { let v = f32(h & 0x3ffu) * 5.9604644775390625e-8; return select(v, -v, (h & 0x8000u) != 0u); }
  return unpack2x16float(h).x;
}
fn q_of(w: u32, i: u32) -> f32 { ${q} }
fn scale_of(row: u32, j: u32, K: u32) -> f32 { ${s} }
`;
}

const GEMV = /* wgsl */ `
const MB = 4u;                            // rows of A per pass
var<workgroup> part: array<f32, 1024>;    // [MB][256]: each invocation's partial sum per row of A
// sum over i < valid of q_i(w) * A[a + i]: the whole word but for a row's last one
fn word_dot(w: u32, a: u32, valid: u32) -> f32 {
  var d = 0.0;
  if (valid == VPW) {
    for (var i = 0u; i < VPW; i++) { d = fma(q_of(w, i), ld(a + i), d); }
  } else {
    for (var i = 0u; i < valid; i++) { d = fma(q_of(w, i), ld(a + i), d); }
  }
  return d;
}
@compute @workgroup_size(256) fn main(@builtin(workgroup_id) g: vec3<u32>, @builtin(num_workgroups) n: vec3<u32>, @builtin(local_invocation_index) l: u32) {
  let r = l / 32u; let lane = l % 32u;
  let row = wg_index(g, n) * 8u + r;
  let M = P.M; let N = P.N; let K = P.K;
  let live = row < N;
  let words = (K + VPW - 1u) / VPW;       // the words that hold elements below K
  let w0 = wd(P.W) + row * row_words(K);
  for (var m0 = 0u; m0 < M; m0 += MB) {
    let mb = min(MB, M - m0);
    var acc = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    if (live) {
      for (var j = lane; j < words; j += 32u) {
        let w = mem[w0 + j];
        let s = scale_of(row, j, K);
        let valid = min(VPW, K - j * VPW);
        for (var mm = 0u; mm < mb; mm++) {
          acc[mm] = fma(s, word_dot(w, wd(P.A) + (m0 + mm) * P.lda + j * VPW, valid), acc[mm]);
        }
      }
    }
    for (var mm = 0u; mm < MB; mm++) { part[mm * 256u + l] = acc[mm]; }
    workgroupBarrier();
    for (var h = 16u; h > 0u; h >>= 1u) {
      if (lane < h) { for (var mm = 0u; mm < MB; mm++) { part[mm * 256u + l] += part[mm * 256u + l + h]; } }
      workgroupBarrier();
    }
    if (live && lane < mb) { st(wd(P.C) + (m0 + lane) * P.ldc + row, part[lane * 256u + r * 32u]); }
    workgroupBarrier();                   // part is read before the next pass rewrites it
  }
}`;

// W's tile as Bs (kernels-gemm.ts), dequantized: a word of a row of W per invocation and step, its VPW elements
// times their scale, so that the products are the fp32 products of the reference.
const TILED = tiledGemm(
  "const WPT = 16u / VPW;                // words of a row per step of 16 along K",
  /* wgsl */ `for (var e = tid; e < 1024u; e += 256u) {  // consecutive invocations along a row of A
      let mm = e / 16u; let kk = e % 16u; let k = k0 + kk;
      var v = 0.0;
      if (m0 + mm < M && k < K) { v = ld(wd(P.A) + (m0 + mm) * P.lda + k); }
      As[kk * 64u + mm] = v;
    }
    for (var e = tid; e < 64u * WPT; e += 256u) {  // a word each: VPW elements of one row of W
      let nn = e / WPT; let j = k0 / VPW + e % WPT; let row = n0 + nn;
      let inside = row < N && j * VPW < K;
      var w = 0u; var s = 0.0;
      if (inside) { w = mem[wd(P.W) + row * row_words(K) + j]; s = scale_of(row, j, K); }
      for (var i = 0u; i < VPW; i++) {
        let k = j * VPW + i;
        Bs[(k - k0) * 64u + nn] = select(0.0, q_of(w, i) * s, inside && k < K);
      }
    }`,
  "st(at, v);",
);

const EACH = `@compute @workgroup_size(256) fn main(@builtin(workgroup_id) g: vec3<u32>, @builtin(num_workgroups) n: vec3<u32>, @builtin(local_invocation_index) l: u32)`;

// out[r * ld_out + k] = element k of row r: an invocation per packed word.
const DEQUANTIZE_ROWS = /* wgsl */ `${EACH} {
  let i = lin(g, n, l, 256u); let K = P.K;
  let words = (K + VPW - 1u) / VPW;
  if (i >= P.rows * words) { return; }
  let r = i / words; let j = i % words;
  let w = mem[wd(P.W) + r * row_words(K) + j];
  let s = scale_of(r, j, K);
  for (var e = 0u; e < VPW; e++) {
    let k = j * VPW + e;
    if (k < K) { st(wd(P.out) + r * P.ld_out + k, q_of(w, e) * s); }
  }
}`;

// x[r, c] = scale * (element c of wte's row tokens[r]) + pos[r % T, c]: an invocation per (r, packed word).
const EMBEDDING_FORWARD_QUANT = /* wgsl */ `${EACH} {
  let i = lin(g, n, l, 256u); let C = P.C;
  let words = (C + VPW - 1u) / VPW;
  if (i >= P.B * P.T * words) { return; }
  let r = i / words; let j = i % words;
  let id = mem[wd(P.tokens) + r];
  let w = mem[wd(P.wte) + id * row_words(C) + j];
  let s = scale_of(id, j, C);
  for (var e = 0u; e < VPW; e++) {
    let c = j * VPW + e;
    if (c >= C) { break; }
    var x = P.scale * (q_of(w, e) * s);
    if (P.pos_n > 0u) { x = x + ld(wd(P.pos) + (r % P.T) * C + c); }
    st(wd(P.x) + r * C + c, x);
  }
}`;

type QuantCode = "GemmQuant" | "DequantizeRows" | "EmbeddingForwardQuant";
/**
 * Queues one kernel: its op (for the struct P), a pipeline name, its WGSL (after the prelude), P, and its
 * workgroups: a count (folded into (x, y) by the caller: wg_index, lin) or an explicit (x, y) grid.
 */
export type Run = (code: QuantCode, name: string, wgsl: string, p: Uint32Array, groups: number | [number, number]) => void;

function checkWords(op: string, what: Record<string, number>): void {
  for (const [name, at] of Object.entries(what))
    if (at % 4) throw new Error(`qkv webgpu: ${op}: ${name} at byte ${at}: expected a multiple of 4 (packed rows are u32-aligned)`);
}

/** Encodes a quantized op (GemmQuant, DequantizeRows or EmbeddingForwardQuant) whose argument words are `a`. */
export function encodeQuant(op: number, a: Uint32Array, run: Run): void {
  switch (op) {
    case KernelOp.GemmQuant: {
      const x = read.GemmQuant(a);
      if (x.M === 0 || x.N === 0) return;
      checkWords("gemm_quant", { W: x.W, scales: x.scales });
      const f = formatWgsl(x.format, "scales");
      if (x.M <= GEMV_MAX_M) run("GemmQuant", `gemv_quant_${NAMES[x.format]}`, f + GEMV, a, Math.ceil(x.N / 8));
      else run("GemmQuant", `gemm_quant_${NAMES[x.format]}`, f + TILED, a, [Math.ceil(x.N / 64), Math.ceil(x.M / 64)]);
      return;
    }
    case KernelOp.DequantizeRows: {
      const x = read.DequantizeRows(a);
      checkWords("dequantize_rows", { W: x.W, scales: x.scales });
      const f = formatWgsl(x.format, "scales");
      run("DequantizeRows", `dequantize_rows_${NAMES[x.format]}`, f + DEQUANTIZE_ROWS, a, Math.ceil((x.rows * Math.ceil(x.K / VPW[x.format]!)) / 256));
      return;
    }
    case KernelOp.EmbeddingForwardQuant: {
      const x = read.EmbeddingForwardQuant(a);
      checkWords("embedding_forward_quant", { wte: x.wte, wte_scales: x.wte_scales });
      const f = formatWgsl(x.format, "wte_scales");
      const words = x.B * x.T * Math.ceil(x.C / VPW[x.format]!);
      run("EmbeddingForwardQuant", `embedding_forward_quant_${NAMES[x.format]}`, f + EMBEDDING_FORWARD_QUANT, a, Math.ceil(words / 256));
      return;
    }
    default:
      throw new Error(`qkv webgpu: ${op} is not a quantized op`);
  }
}
