// The WGSL kernels of the op contract (cpp/src/ops/ops.h), one per op (a few passes where an op reduces across
// rows), as the GPU worker encodes them for the core's commands (protocol.ts). Their formulas are the
// reference executor's (cpp/src/exec/reference/reference_backend.cpp), which every executor is checked against; the
// browser test runs ops/backend_check.cpp's sweep on them against the wasm core (checkBackend()).
//
// Conventions. Every kernel binds the whole arena as `mem: array<u32>` (dispatch.ts) and its command's words as
// the uniform `P`, a struct whose fields are the op's arguments by name (ops.generated.ts: wgslArgs, written
// from cpp/src/ops/op_list.def): P.rows, P.alpha (f32), P.x (a pointer: a byte offset, so a float at P.x is
// mem[wd(P.x)]). Some ops' structs end with words computed here (a factor, a threshold: the declaration's
// worker words), appended after the command's. Grids past 65535 workgroups fold into y (grid()).
// Accumulation is f32 throughout (WGSL has no f64); where the reference sums in double the difference is
// well inside the checks' 1e-5 (sums are tree reductions, statistics two-pass). The quantized-weight ops' kernels
// (gemm_quant, dequantize_rows, embedding_forward_quant: a pipeline per packed format) are kernels-quant.ts'; the
// matrix product's (gemm, and the tile scheme gemm_quant's tiled kernel shares) kernels-gemm.ts'.
/// <reference types="@webgpu/types" />
import { f32bits, type Dispatcher } from "./dispatch.js";
import { KernelOp, SUM_SQUARES_BLOCK, read, wgslArgs } from "./ops.generated.js";
import { Op } from "./protocol.js";
import { encodeQuant } from "./kernels-quant.js";
import { GEMM } from "./kernels-gemm.js";

/** What every kernel starts with: the bindings, with `args` (a WGSL struct named Args) as the uniform. */
function prelude(args: string): string {
  return /* wgsl */ `
@group(0) @binding(0) var<storage, read_write> mem: array<u32>;
${args}
@group(0) @binding(1) var<uniform> P: Args;
fn wd(o: u32) -> u32 { return o / 4u; }               // a pointer word (a byte offset) as a word index
fn ld(i: u32) -> f32 { return bitcast<f32>(mem[i]); }
fn st(i: u32, x: f32) { mem[i] = bitcast<u32>(x); }
fn byte_at(o: u32) -> u32 { return (mem[o / 4u] >> (8u * (o % 4u))) & 0xffu; }
// The linear index of an invocation over a grid folded into (x, y) workgroups of \`size\`.
fn lin(g: vec3<u32>, n: vec3<u32>, l: u32, size: u32) -> u32 { return (g.y * n.x + g.x) * size + l; }
fn wg_index(g: vec3<u32>, n: vec3<u32>) -> u32 { return g.y * n.x + g.x; }
const INF = 0x7f800000u;
`;
}

/** The largest index of a row's workgroup sweep, and the reduction every row-wise kernel uses. */
const REDUCE = /* wgsl */ `
var<workgroup> red: array<f32, 256>;
fn reduce_sum(l: u32, v: f32) -> f32 {
  red[l] = v;
  workgroupBarrier();
  for (var s = 128u; s > 0u; s >>= 1u) {
    if (l < s) { red[l] += red[l + s]; }
    workgroupBarrier();
  }
  let r = red[0];
  workgroupBarrier();
  return r;
}
fn reduce_max(l: u32, v: f32) -> f32 {
  red[l] = v;
  workgroupBarrier();
  for (var s = 128u; s > 0u; s >>= 1u) {
    if (l < s) { red[l] = max(red[l], red[l + s]); }
    workgroupBarrier();
  }
  let r = red[0];
  workgroupBarrier();
  return r;
}
`;

/** splitmix64 of (seed, i) on u32 pairs: ops/dropout_hash.h, bit for bit. */
const HASH = /* wgsl */ `
fn mul32(a: u32, b: u32) -> vec2<u32> {            // the 64-bit product of two u32, as (lo, hi)
  let a0 = a & 0xffffu; let a1 = a >> 16u; let b0 = b & 0xffffu; let b1 = b >> 16u;
  let p00 = a0 * b0; let p01 = a0 * b1; let p10 = a1 * b0; let p11 = a1 * b1;
  let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
  let lo = (p00 & 0xffffu) | (mid << 16u);
  let hi = p11 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);
  return vec2<u32>(lo, hi);
}
fn mul64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {  // a * b mod 2^64
  let p = mul32(a.x, b.x);
  return vec2<u32>(p.x, p.y + a.x * b.y + a.y * b.x);
}
fn add64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  let lo = a.x + b.x;
  return vec2<u32>(lo, a.y + b.y + select(0u, 1u, lo < a.x));
}
fn xorshr(z: vec2<u32>, s: u32) -> vec2<u32> {      // z ^ (z >> s), 0 < s < 32
  return vec2<u32>(z.x ^ ((z.x >> s) | (z.y << (32u - s))), z.y ^ (z.y >> s));
}
fn dropout_hash(seed: vec2<u32>, i: vec2<u32>) -> u32 {
  var z = add64(seed, mul64(vec2<u32>(0x7F4A7C15u, 0x9E3779B9u), add64(i, vec2<u32>(1u, 0u))));
  z = mul64(xorshr(z, 30u), vec2<u32>(0x1CE4E5B9u, 0xBF58476Du));
  z = mul64(xorshr(z, 27u), vec2<u32>(0x133111EBu, 0x94D049BBu));
  return z.y ^ (z.y >> 31u);                          // ((z ^ (z >> 31)) >> 32)
}
`;

/**
 * act (ops::Act): 1 ReLU; 2 exact (erf) GELU, erf from Numerical Recipes' erfc (fractional error < 1.2e-7);
 * 3 GELU's tanh form (GPT-2's gelu_new), as h sigma(z), z = 2 sqrt(2/pi) (h + 0.044715 h^3) (= 0.5 h (1 + tanh(z/2))
 * without 1 + tanh's cancellation; the CPU's formulas, kernels/cpu/rowwise_simd.h), with e = exp(-|z|) from h clamped
 * to [-10, 10] (WGSL promises nothing of exp at +-inf or of denormals): past h = 10 the value is h and the
 * derivative 1 exactly (e < 2e-38), and at or below -10 both are 0 (a select: e is not 0 yet), as in PyTorch's float32.
 */
const ACT = /* wgsl */ `
fn erf_(x: f32) -> f32 {
  let z = abs(x);
  let t = 1.0 / (1.0 + 0.5 * z);
  let r = t * exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806 +
          t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))));
  return select(r - 1.0, 1.0 - r, x >= 0.0);
}
fn tanh_gelu_e(x: f32) -> f32 { return exp(-abs(x * (1.5957691216057308 + 0.071354816 * x * x))); } // exp(-|z|)
fn tanh_gelu_sigma(x: f32, e: f32) -> f32 {
  let r = 1.0 / (1.0 + e);
  return select(r, e * r, x < 0.0);
}
fn act_of(a: u32, h: f32) -> f32 {
  if (a == 1u) { return max(h, 0.0); }
  if (a == 2u) { return 0.5 * h * (1.0 + erf_(h * 0.70710678118654752)); }
  if (a == 3u) {
    if (h <= -10.0) { return 0.0; }
    let x = min(h, 10.0);
    return h * tanh_gelu_sigma(x, tanh_gelu_e(x));
  }
  return h;
}
fn act_grad(a: u32, h: f32) -> f32 {
  if (a == 1u) { return select(0.0, 1.0, h > 0.0); }
  if (a == 2u) { return 0.5 * (1.0 + erf_(h * 0.70710678118654752)) + h * 0.3989422804014327 * exp(-0.5 * h * h); }
  if (a == 3u) { // sigma + x z' e r^2, z' = 2 sqrt(2/pi) (1 + 3k x^2), e r^2 = sigma (1 - sigma)
    if (h <= -10.0) { return 0.0; }
    let x = min(h, 10.0);
    let e = tanh_gelu_e(x);
    let r = 1.0 / (1.0 + e);
    return tanh_gelu_sigma(x, e) + x * (1.5957691216057308 + 0.21406445 * x * x) * e * r * r;
  }
  return 1.0;
}
`;

const EACH = `@compute @workgroup_size(256) fn main(@builtin(workgroup_id) g: vec3<u32>, @builtin(num_workgroups) n: vec3<u32>, @builtin(local_invocation_index) l: u32)`;

// ---- data movement and elementwise ----

const FILL = `${EACH} { let i = lin(g, n, l, 256u); if (i >= P.x_n) { return; } st(wd(P.x) + i, P.value); }`;

// The worker's Copy (one buffer cannot be both ends of copyBufferToBuffer): words, the last one merged byte by
// byte when bytes is not a multiple of 4 (the bytes after dst's end are kept). Its words are protocol.ts's.
const COPY_ARGS = "struct Args { dst: u32, src: u32, bytes: u32 }";
const COPY = `${EACH} {
  let i = lin(g, n, l, 256u); let bytes = P.bytes;
  if (i >= (bytes + 3u) / 4u) { return; }
  let s = mem[wd(P.src) + i];
  let left = bytes - i * 4u;
  if (left >= 4u) { mem[wd(P.dst) + i] = s; return; }
  let mask = (1u << (8u * left)) - 1u;
  mem[wd(P.dst) + i] = (mem[wd(P.dst) + i] & ~mask) | (s & mask);
}`;

const COPY_ROWS = `${EACH} {
  let i = lin(g, n, l, 256u); let cols = P.cols;
  if (i >= P.rows * cols) { return; }
  let r = i / cols; let c = i % cols;
  mem[wd(P.dst) + r * P.ld_dst + c] = mem[wd(P.src) + r * P.ld_src + c];
}`;

const ADD = `${EACH} { let i = lin(g, n, l, 256u); if (i >= P.out_n) { return; } st(wd(P.out) + i, ld(wd(P.a) + i) + ld(wd(P.b) + i)); }`;

/** Dropout from `x` into `y` (forward: y, x; backward: dx, dy). p <= 0 copies (the reference's early return). */
function dropout(y: string, x: string): string {
  return `${HASH}${EACH} {
  let i = lin(g, n, l, 256u); if (i >= P.${y}_n) { return; }
  let x = ld(wd(P.${x}) + i);
  if (P.p <= 0.0) { st(wd(P.${y}) + i, x); return; }
  let keep = dropout_hash(vec2<u32>(P.seed_lo, P.seed_hi), vec2<u32>(i, 0u)) >= P.threshold;
  st(wd(P.${y}) + i, select(0.0, x * P.factor, keep));
}`;
}

// ---- LayerNorm (eps 1e-5): a workgroup per row ----

/** Forward; residual: r = x + f first, normalised from r. */
function layernormForward(residual: boolean): string {
  return `${REDUCE}${EACH} {
  let row = wg_index(g, n); let rows = P.rows; let C = P.C;
  if (row >= rows) { return; }
  let base = row * C;
  let x = wd(P.x) + base;
  ${residual ? `for (var i = l; i < C; i += 256u) { st(wd(P.r) + base + i, ld(x + i) + ld(wd(P.f) + base + i)); }` : ""}
  let src = ${residual ? "wd(P.r) + base" : "x"};
  // The statistics of d = x - mu0 with mu0 the f32 mean, corrected by c = mean(d): a mean far from 0 next to
  // a small spread (x = 3 + noise over few columns) would otherwise lose digits of (x - mean) to mu0's rounding.
  var s = 0.0;
  for (var i = l; i < C; i += 256u) { s += ld(src + i); }
  let mu0 = reduce_sum(l, s) / f32(C);
  var sd = 0.0; var q = 0.0;
  for (var i = l; i < C; i += 256u) { let d = ld(src + i) - mu0; sd += d; q += d * d; }
  let c = reduce_sum(l, sd) / f32(C);
  let rstd = inverseSqrt(max(reduce_sum(l, q) / f32(C) - c * c, 0.0) + 1e-5);
  for (var i = l; i < C; i += 256u) {
    st(wd(P.y) + base + i, (ld(src + i) - mu0 - c) * rstd * ld(wd(P.w) + i) + ld(wd(P.b) + i));
  }
  if (l == 0u) { st(wd(P.mean) + row, mu0 + c); st(wd(P.rstd) + row, rstd); }
}`;
}

// Backward: dx = dr + rstd (g - mean(g) - xhat mean(g xhat)), g = dy w: a workgroup per row (dr may alias dx:
// each element is read before it is written, by the same invocation).
const LN_BACKWARD_DX = `${REDUCE}${EACH} {
  let row = wg_index(g, n); let C = P.C;
  if (row >= P.rows) { return; }
  let base = row * C; let mean = ld(wd(P.mean) + row); let rstd = ld(wd(P.rstd) + row);
  var sg = 0.0; var sgx = 0.0;
  for (var i = l; i < C; i += 256u) {
    let xhat = (ld(wd(P.x) + base + i) - mean) * rstd; let gi = ld(wd(P.dy) + base + i) * ld(wd(P.w) + i);
    sg += gi; sgx += gi * xhat;
  }
  let mg = reduce_sum(l, sg) / f32(C); let mgx = reduce_sum(l, sgx) / f32(C);
  for (var i = l; i < C; i += 256u) {
    let xhat = (ld(wd(P.x) + base + i) - mean) * rstd; let gi = ld(wd(P.dy) + base + i) * ld(wd(P.w) + i);
    let dr = select(0.0, ld(wd(P.dr) + base + i), P.dr_n > 0u);
    st(wd(P.dx) + base + i, dr + rstd * (gi - mg - xhat * mgx));
  }
}`;
// dw, db partial sums over blocks of 64 rows, one invocation per (column, block): scratch (blocks, 2, C).
const LN_BACKWARD_PARTIAL = `@compute @workgroup_size(256) fn main(@builtin(global_invocation_id) id: vec3<u32>) {
  let c = id.x; let blk = id.y; let C = P.C; let rows = P.rows;
  if (c >= C) { return; }
  var sw = 0.0; var sb = 0.0;
  for (var r = blk * 64u; r < min(rows, blk * 64u + 64u); r++) {
    let dy = ld(wd(P.dy) + r * C + c);
    sw += dy * (ld(wd(P.x) + r * C + c) - ld(wd(P.mean) + r)) * ld(wd(P.rstd) + r);
    sb += dy;
  }
  st(wd(P.scratch) + blk * 2u * C + c, sw); st(wd(P.scratch) + blk * 2u * C + C + c, sb);
}`;
const LN_BACKWARD_SUM = `@compute @workgroup_size(256) fn main(@builtin(global_invocation_id) id: vec3<u32>) {
  let c = id.x; let C = P.C;
  if (c >= C) { return; }
  let blocks = (P.rows + 63u) / 64u;
  var sw = 0.0; var sb = 0.0;
  for (var b = 0u; b < blocks; b++) { sw += ld(wd(P.scratch) + b * 2u * C + c); sb += ld(wd(P.scratch) + b * 2u * C + C + c); }
  st(wd(P.dw) + c, ld(wd(P.dw) + c) + sw); st(wd(P.db) + c, ld(wd(P.db) + c) + sb);
}`;

// ---- bias + activation ----
// forward: h += b, a = act(h) (a is h for Identity).
const BIAS_ACT_FORWARD = `${ACT}${EACH} {
  let i = lin(g, n, l, 256u); let N = P.N;
  if (i >= P.rows * N) { return; }
  var h = ld(wd(P.h) + i);
  if (P.b_n > 0u) { h = h + ld(wd(P.b) + i % N); }
  st(wd(P.h) + i, h);
  st(wd(P.a) + i, act_of(P.act, h));
}`;
// backward: g = da act'(h) (da itself when h is empty). The db partials run first: dh may alias da.
const BIAS_ACT_G = `fn grad_at(i: u32) -> f32 {
  let da = ld(wd(P.da) + i);
  if (P.h_n == 0u) { return da; }
  return da * act_grad(P.act, ld(wd(P.h) + i));
}`;
const BIAS_BACKWARD_PARTIAL = `${ACT}${BIAS_ACT_G}@compute @workgroup_size(256) fn main(@builtin(global_invocation_id) id: vec3<u32>) {
  let c = id.x; let blk = id.y; let N = P.N; let rows = P.rows;
  if (c >= N) { return; }
  // Kahan-compensated: the column sums of a gradient cancel, so their rounding is judged against a small result.
  var s = 0.0; var e = 0.0;
  for (var r = blk * 64u; r < min(rows, blk * 64u + 64u); r++) {
    let y = grad_at(r * N + c) - e; let t = s + y; e = (t - s) - y; s = t;
  }
  st(wd(P.scratch) + blk * N + c, s);
}`;
const BIAS_BACKWARD_SUM = `@compute @workgroup_size(256) fn main(@builtin(global_invocation_id) id: vec3<u32>) {
  let c = id.x; let N = P.N;
  if (c >= N) { return; }
  let blocks = (P.rows + 63u) / 64u;
  var s = 0.0; var e = 0.0;  // Kahan, as the partials
  for (var b = 0u; b < blocks; b++) { let y = ld(wd(P.scratch) + b * N + c) - e; let t = s + y; e = (t - s) - y; s = t; }
  st(wd(P.db) + c, ld(wd(P.db) + c) + s);
}`;
const ACT_BACKWARD = `${ACT}${BIAS_ACT_G}${EACH} {
  let i = lin(g, n, l, 256u);
  if (i >= P.rows * P.N) { return; }
  st(wd(P.dh) + i, grad_at(i));
}`;

// ---- attention ----
// The shape's words (B, Tq, Tk, C, H, ldq, ldkv, key_pad, has_key_pad, causal, dropout, seed_lo, seed_hi, q_pos,
// k_rows) and the worker's scale (1/sqrt(hs), as the CPU rounds it), threshold and factor, by name in every op.
const ATTENTION_COMMON = `${HASH}
fn hs() -> u32 { return P.C / P.H; }
fn qrow(b: u32, t: u32, h: u32, q: u32) -> u32 { return q + (b * P.Tq + t) * P.ldq + h * hs(); }
fn krow(b: u32, j: u32, h: u32, k: u32) -> u32 { return k + (b * P.k_rows + j) * P.ldkv + h * hs(); }
fn visible(b: u32, t: u32, j: u32) -> bool {
  if (P.causal != 0u && j > t + P.q_pos) { return false; }
  return !(P.has_key_pad != 0u && byte_at(P.key_pad + b * P.k_rows + j) != 0u);
}
// dropped(x) at (b, h, t, j): the reference's drop_index, kept values times 1/(1-p).
fn dropped(x: f32, b: u32, h: u32, t: u32, j: u32) -> f32 {
  if (P.dropout <= 0.0) { return x; }
  let at = ((b * P.H + h) * P.Tq + t) * P.Tk + j;
  let keep = dropout_hash(vec2<u32>(P.seed_lo, P.seed_hi), vec2<u32>(at, 0u)) >= P.threshold;
  return select(0.0, x * P.factor, keep);
}
fn score(b: u32, h: u32, t: u32, j: u32, q: u32, k: u32) -> f32 {
  let qa = qrow(b, t, h, q); let ka = krow(b, j, h, k);
  var d = 0.0;
  for (var i = 0u; i < hs(); i++) { d = fma(ld(qa + i), ld(ka + i), d); }
  return d * P.scale;
}
`;
const HS_MAX = 256;

// Forward: an invocation per query row (b, h, t), online softmax over the keys: out = sum_j dropped(P_j) v_j,
// lse = m + log(l) (+inf and out 0 when every key is masked).
const ATTENTION_FORWARD = `${ATTENTION_COMMON}
@compute @workgroup_size(64) fn main(@builtin(workgroup_id) g: vec3<u32>, @builtin(num_workgroups) n: vec3<u32>, @builtin(local_invocation_index) l: u32) {
  let id = lin(g, n, l, 64u);
  if (id >= P.B * P.H * P.Tq) { return; }
  let t = id % P.Tq; let h = (id / P.Tq) % P.H; let b = id / (P.Tq * P.H);
  var o: array<f32, ${HS_MAX}>;
  var m = -3.0e38; var sum = 0.0; var seen = false;
  for (var j = 0u; j < P.Tk; j++) {
    if (!visible(b, t, j)) { continue; }
    seen = true;
    let s = score(b, h, t, j, wd(P.q), wd(P.k));
    let m2 = max(m, s);
    let c = exp(m - m2);
    let p = exp(s - m2);
    sum = sum * c + p;
    let pd = dropped(p, b, h, t, j);
    let va = krow(b, j, h, wd(P.v));
    for (var i = 0u; i < hs(); i++) { o[i] = o[i] * c + pd * ld(va + i); }
    m = m2;
  }
  let oa = wd(P.out) + (b * P.Tq + t) * P.C + h * hs();
  for (var i = 0u; i < hs(); i++) { st(oa + i, select(0.0, o[i] / sum, seen)); }
  mem[wd(P.lse) + id] = select(INF, bitcast<u32>(m + log(sum)), seen);
}`;

// Weights: P (B,H,Tq,Tk) before dropout, masked 0.
const ATTENTION_WEIGHTS = `${ATTENTION_COMMON}
@compute @workgroup_size(64) fn main(@builtin(workgroup_id) g: vec3<u32>, @builtin(num_workgroups) n: vec3<u32>, @builtin(local_invocation_index) l: u32) {
  let id = lin(g, n, l, 64u);
  if (id >= P.B * P.H * P.Tq) { return; }
  let t = id % P.Tq; let h = (id / P.Tq) % P.H; let b = id / (P.Tq * P.H);
  var m = -3.0e38; var seen = false;
  for (var j = 0u; j < P.Tk; j++) { if (visible(b, t, j)) { seen = true; m = max(m, score(b, h, t, j, wd(P.q), wd(P.k))); } }
  var sum = 0.0;
  for (var j = 0u; j < P.Tk; j++) { if (visible(b, t, j)) { sum += exp(score(b, h, t, j, wd(P.q), wd(P.k)) - m); } }
  let row = wd(P.att) + id * P.Tk;
  for (var j = 0u; j < P.Tk; j++) {
    var p = 0.0;
    if (seen && visible(b, t, j)) { p = exp(score(b, h, t, j, wd(P.q), wd(P.k)) - m) / sum; }
    st(row + j, p);
  }
}`;

// Backward: with P = exp(S - lse), Pd = dropped(P), dP = dropped(dout . v): D = dout . out (= sum P dP),
// dS = P (dP - D), dq = scale dS k, dk = scale dS^T q, dv = Pd^T dout. Three passes, no atomics: D per query
// row into scratch, dq per query row, dk and dv per key row.
const ATTENTION_BACKWARD_COMMON = `${ATTENTION_COMMON}
fn lse_at(b: u32, h: u32, t: u32) -> f32 { return ld(wd(P.lse) + (b * P.H + h) * P.Tq + t); }
fn dot_rows(a: u32, c: u32) -> f32 { var d = 0.0; for (var i = 0u; i < hs(); i++) { d = fma(ld(a + i), ld(c + i), d); } return d; }
fn orow(b: u32, t: u32, h: u32, base: u32) -> u32 { return base + (b * P.Tq + t) * P.C + h * hs(); }
`;
const ATTENTION_BACKWARD_D = `${ATTENTION_BACKWARD_COMMON}
@compute @workgroup_size(64) fn main(@builtin(workgroup_id) g: vec3<u32>, @builtin(num_workgroups) n: vec3<u32>, @builtin(local_invocation_index) l: u32) {
  let id = lin(g, n, l, 64u);
  if (id >= P.B * P.H * P.Tq) { return; }
  let t = id % P.Tq; let h = (id / P.Tq) % P.H; let b = id / (P.Tq * P.H);
  st(wd(P.scratch) + id, dot_rows(orow(b, t, h, wd(P.dout)), orow(b, t, h, wd(P.out))));
}`;
const ATTENTION_BACKWARD_DQ = `${ATTENTION_BACKWARD_COMMON}
@compute @workgroup_size(64) fn main(@builtin(workgroup_id) g: vec3<u32>, @builtin(num_workgroups) n: vec3<u32>, @builtin(local_invocation_index) l: u32) {
  let id = lin(g, n, l, 64u);
  if (id >= P.B * P.H * P.Tq) { return; }
  let t = id % P.Tq; let h = (id / P.Tq) % P.H; let b = id / (P.Tq * P.H);
  var dq: array<f32, ${HS_MAX}>;
  let lse = lse_at(b, h, t);
  let D = ld(wd(P.scratch) + id);
  let go = orow(b, t, h, wd(P.dout));
  if (lse < 3.0e38) {
    for (var j = 0u; j < P.Tk; j++) {
      if (!visible(b, t, j)) { continue; }
      let p = exp(score(b, h, t, j, wd(P.q), wd(P.k)) - lse);
      let dp = dropped(dot_rows(go, krow(b, j, h, wd(P.v))), b, h, t, j);
      let ds = p * (dp - D);
      let ka = krow(b, j, h, wd(P.k));
      for (var i = 0u; i < hs(); i++) { dq[i] = fma(ds, ld(ka + i), dq[i]); }
    }
  }
  let qa = qrow(b, t, h, wd(P.dq));
  for (var i = 0u; i < hs(); i++) { st(qa + i, dq[i] * P.scale); }
}`;
const ATTENTION_BACKWARD_DKV = `${ATTENTION_BACKWARD_COMMON}
@compute @workgroup_size(64) fn main(@builtin(workgroup_id) g: vec3<u32>, @builtin(num_workgroups) n: vec3<u32>, @builtin(local_invocation_index) l: u32) {
  let id = lin(g, n, l, 64u);
  if (id >= P.B * P.H * P.Tk) { return; }
  let j = id % P.Tk; let h = (id / P.Tk) % P.H; let b = id / (P.Tk * P.H);
  var dk: array<f32, ${HS_MAX}>;
  var dv: array<f32, ${HS_MAX}>;
  let va = krow(b, j, h, wd(P.v));
  for (var t = 0u; t < P.Tq; t++) {
    let lse = lse_at(b, h, t);
    if (!visible(b, t, j) || lse >= 3.0e38) { continue; }
    let p = exp(score(b, h, t, j, wd(P.q), wd(P.k)) - lse);
    let go = orow(b, t, h, wd(P.dout));
    let pd = dropped(p, b, h, t, j);
    let dp = dropped(dot_rows(go, va), b, h, t, j);
    let ds = p * (dp - ld(wd(P.scratch) + (b * P.H + h) * P.Tq + t));
    let qa = qrow(b, t, h, wd(P.q));
    for (var i = 0u; i < hs(); i++) { dv[i] = fma(pd, ld(go + i), dv[i]); dk[i] = fma(ds, ld(qa + i), dk[i]); }
  }
  let ka = krow(b, j, h, wd(P.dk)); let vb = krow(b, j, h, wd(P.dv));
  for (var i = 0u; i < hs(); i++) { st(ka + i, dk[i] * P.scale); st(vb + i, dv[i]); }
}`;

// ---- embedding, pooling ----
// forward: x[r] = scale wte[id] + pos[r % T].
const EMBEDDING_FORWARD = `${EACH} {
  let i = lin(g, n, l, 256u); let C = P.C;
  if (i >= P.B * P.T * C) { return; }
  let r = i / C; let c = i % C;
  let id = mem[wd(P.tokens) + r];
  var x = P.scale * ld(wd(P.wte) + id * C + c);
  if (P.pos_n > 0u) { x = x + ld(wd(P.pos) + (r % P.T) * C + c); }
  st(wd(P.x) + i, x);
}`;
// backward: dwte[v] += scale dx[r] over the rows r of token v in order (a workgroup per v < V = dwte_n / C, the
// same additions in the same order as the CPU: no atomics); dpos[t] += dx[b, t] over b, an invocation per
// (t, c). The workgroup of v reads the ids once, in blocks of 1024 rows: each invocation counts the matches in
// its 16 rows, a prefix sum over the 64 counts gives each its place, and the matching rows land in \`rows_of\`
// in order; then the invocations add those rows' columns.
const EMBEDDING_BACKWARD_WTE = `var<workgroup> rows_of: array<u32, 1024>;
var<workgroup> counts: array<u32, 64>;
@compute @workgroup_size(64) fn main(@builtin(workgroup_id) g: vec3<u32>, @builtin(num_workgroups) n: vec3<u32>, @builtin(local_invocation_index) l: u32) {
  let v = wg_index(g, n); let C = P.C; let rows = P.B * P.T;
  if (v >= P.dwte_n / C) { return; }
  for (var r0 = 0u; r0 < rows; r0 += 1024u) {
    let lo = r0 + l * 16u; let hi = min(rows, lo + 16u);
    var mine = 0u;
    for (var r = lo; r < hi; r++) { if (mem[wd(P.tokens) + r] == v) { mine++; } }
    counts[l] = mine;
    workgroupBarrier();
    var at = 0u;
    for (var i = 0u; i < l; i++) { at += counts[i]; }
    for (var r = lo; r < hi; r++) { if (mem[wd(P.tokens) + r] == v) { rows_of[at] = r; at++; } }
    workgroupBarrier();
    var total = 0u;
    for (var i = 0u; i < 64u; i++) { total += counts[i]; }
    for (var c = l; c < C; c += 64u) {
      var acc = ld(wd(P.dwte) + v * C + c);
      for (var k = 0u; k < total; k++) { acc = acc + P.scale * ld(wd(P.dx) + rows_of[k] * C + c); }
      st(wd(P.dwte) + v * C + c, acc);
    }
    workgroupBarrier();  // counts and rows_of are read up before the next block rewrites them
  }
}`;
const EMBEDDING_BACKWARD_POS = `${EACH} {
  let i = lin(g, n, l, 256u); let C = P.C; let T = P.T;
  if (i >= T * C) { return; }
  var acc = ld(wd(P.dpos) + i);
  for (var b = 0u; b < P.B; b++) { acc = acc + ld(wd(P.dx) + b * T * C + i); }
  st(wd(P.dpos) + i, acc);
}`;
// mean pool forward: an invocation per (b, c); backward: per (b, t, c).
const MEAN_POOL_FORWARD = `${EACH} {
  let i = lin(g, n, l, 256u); let T = P.T; let C = P.C;
  if (i >= P.B * C) { return; }
  let b = i / C; let c = i % C;
  var cnt = 0u; var s = 0.0;
  for (var t = 0u; t < T; t++) {
    if (byte_at(P.key_pad + b * T + t) == 0u) { cnt++; s += ld(wd(P.x) + (b * T + t) * C + c); }
  }
  st(wd(P.out) + i, select(0.0, s * (1.0 / f32(cnt)), cnt > 0u));
}`;
const MEAN_POOL_BACKWARD = `${EACH} {
  let i = lin(g, n, l, 256u); let T = P.T; let C = P.C;
  if (i >= P.B * T * C) { return; }
  let b = i / (T * C); let t = (i / C) % T; let c = i % C;
  var cnt = 0u;
  for (var u = 0u; u < T; u++) { if (byte_at(P.key_pad + b * T + u) == 0u) { cnt++; } }
  let keep = cnt > 0u && byte_at(P.key_pad + b * T + t) == 0u;
  st(wd(P.dx) + i, select(0.0, ld(wd(P.dout) + b * C + c) * (1.0 / f32(cnt)), keep));
}`;

// ---- loss ----
/**
 * Softmax cross-entropy per row (a workgroup per row): loss = (1-e)(lse - z_t) + e/V sum_i (lse - z_i), an
 * ignored row 0; with the gradient, d = scale (softmax - (1-e) onehot - e/V) (d may alias z: everything is
 * read before the barrier that precedes the writes).
 */
function crossEntropy(backward: boolean): string {
  return `${REDUCE}var<workgroup> tgt_shared: i32;
${EACH} {
  let row = wg_index(g, n); let V = P.V;
  if (row >= P.rows) { return; }
  let z = wd(P.logits) + row * V;
  if (l == 0u) { tgt_shared = bitcast<i32>(mem[wd(P.targets) + row]); }
  let tgt = workgroupUniformLoad(&tgt_shared);   // uniform: the ignored row's early return may skip barriers
  if (tgt == P.ignore_index) {
    ${backward ? "for (var i = l; i < V; i += 256u) { st(wd(P.dlogits) + row * V + i, 0.0); }" : ""}
    if (l == 0u) { st(wd(P.losses) + row, 0.0); }
    return;
  }
  var mx = -3.0e38;
  for (var i = l; i < V; i += 256u) { mx = max(mx, ld(z + i)); }
  mx = reduce_max(l, mx);
  var s = 0.0; var sz = 0.0;
  for (var i = l; i < V; i += 256u) { let zi = ld(z + i); s += exp(zi - mx); sz += zi; }
  let lse = mx + log(reduce_sum(l, s));
  let total = f32(V) * lse - reduce_sum(l, sz);
  let e = P.smoothing;
  let zt = ld(z + u32(tgt));
  workgroupBarrier();
  if (l == 0u) { st(wd(P.losses) + row, (1.0 - e) * (lse - zt) + e / f32(V) * total); }
  ${
    backward
      ? `for (var i = l; i < V; i += 256u) {
    let p = exp(ld(z + i) - lse);
    st(wd(P.dlogits) + row * V + i, P.scale * (p - select(0.0, 1.0 - e, i == u32(tgt)) - e / f32(V)));
  }`
      : ""
  }
}`;
}

// argmax: the first index of the largest (a workgroup per row).
const ARGMAX = `var<workgroup> bv: array<f32, 256>; var<workgroup> bi: array<u32, 256>;
${EACH} {
  let row = wg_index(g, n); let V = P.V;
  if (row >= P.rows) { return; }
  let z = wd(P.logits) + row * V;
  var best = -3.4e38; var at = 0xffffffffu;
  for (var i = l; i < V; i += 256u) { let v = ld(z + i); if (at == 0xffffffffu || v > best) { best = v; at = i; } }
  bv[l] = best; bi[l] = at;
  workgroupBarrier();
  for (var s = 128u; s > 0u; s >>= 1u) {
    if (l < s) {
      let v = bv[l + s]; let j = bi[l + s];
      if (j != 0xffffffffu && (bi[l] == 0xffffffffu || v > bv[l] || (v == bv[l] && j < bi[l]))) { bv[l] = v; bi[l] = j; }
    }
    workgroupBarrier();
  }
  if (l == 0u) { mem[wd(P.best) + row] = bi[0]; }
}`;

// ---- optimizer ----
// adam: for i in a range: gi = g*grad_scale + l2*p; p *= shrink; m = b1*m + (1-b1)*gi; v = b2*v + (1-b2)*gi*gi;
// p -= step * (m / (sqrt(v) / sqrt_bc2 + eps)). The ranges are sorted quads (begin, end, l2, shrink) in
// scratch, element indices into p/m/v/g; an element outside all of them is left alone.
const ADAM = `${EACH} {
  let i = lin(g, n, l, 256u);
  if (i >= P.ranges_end) { return; }
  let quads = wd(P.scratch);
  var lo = 0u; var hi = P.ranges_n;                 // the last range with begin <= i
  while (lo + 1u < hi) { let mid = (lo + hi) / 2u; if (mem[quads + mid * 4u] <= i) { lo = mid; } else { hi = mid; } }
  let q = quads + lo * 4u;
  if (i < mem[q] || i >= mem[q + 1u]) { return; }
  let l2 = ld(q + 2u); let shrink = ld(q + 3u);
  let b1 = P.beta1; let b2 = P.beta2;
  var p = ld(wd(P.p) + i);
  let gi = ld(wd(P.g) + i) * P.grad_scale + l2 * p;
  p = p * shrink;
  let m = b1 * ld(wd(P.m) + i) + (1.0 - b1) * gi;
  let v = b2 * ld(wd(P.v) + i) + (1.0 - b2) * gi * gi;
  st(wd(P.m) + i, m); st(wd(P.v) + i, v);
  st(wd(P.p) + i, p - P.step * (m / (sqrt(v) / P.sqrt_bc2 + P.eps)));
}`;
// sum of squares: one partial per SUM_SQUARES_BLOCK floats (a workgroup each) into the scratch; the core adds
// the partials in double.
const SUM_SQUARES = `${REDUCE}${EACH} {
  let blk = wg_index(g, n); let N = P.x_n;
  var s = 0.0;
  for (var k = 0u; k < ${SUM_SQUARES_BLOCK / 256}u; k++) {
    let i = blk * ${SUM_SQUARES_BLOCK}u + k * 256u + l;
    if (i < N) { let x = ld(wd(P.x) + i); s = fma(x, x, s); }
  }
  let total = reduce_sum(l, s);
  if (l == 0u) { st(wd(P.scratch) + blk, total); }
}`;

/**
 * Floats of scratch the kernels need, as the core's webgpu_backend.cpp sizes it (its *_scratch_size): the dw/db
 * and db partial sums per block of 64 rows, attention's D per query row, none for the embedding.
 */
export const scratchSizes = {
  layernormBackward: (rows: number, C: number) => 2 * C * Math.ceil(rows / 64),
  biasActBackward: (rows: number, N: number) => N * Math.ceil(rows / 64),
  attention: (s: { B: number; Tq: number; H: number }) => s.B * s.H * s.Tq,
  embeddingBackward: (_V: number, _rows: number) => 0,
};

/** The workgroups of `groups` folded into (x, y) under the 65535 limit. */
function grid(groups: number): [number, number] {
  if (groups <= 65535) return [groups, 1];
  const x = 65535;
  return [x, Math.ceil(groups / x)];
}

/** Words after a command's own: its arguments, then what a kernel computes here (the op's worker words). */
function params(a: Uint32Array, ...extra: number[]): Uint32Array {
  const p = new Uint32Array(a.length + extra.length);
  p.set(a);
  p.set(extra, a.length);
  return p;
}

/** p * 2^32 rounded down, as ops/dropout_hash.h's dropout_threshold; and 1/(1-p) rounded once to float. */
function dropoutWords(p: number): [number, number] {
  const t = p * 4294967296;
  const threshold = t >= 4294967295 ? 0xffffffff : Math.floor(t) >>> 0;
  const factor = Math.fround(1 / Math.fround(1 - p));
  return [threshold, f32bits(factor)];
}

type Code = keyof typeof wgslArgs;

export class GpuKernels {
  private readonly pipelines = new Map<string, GPUComputePipeline>();

  constructor(
    private readonly device: GPUDevice,
    private readonly layout: GPUPipelineLayout,
  ) {}

  /** Encodes kernel op `op` (Copy, or an op of ops.generated.ts) whose argument words are `a`. */
  encode(op: number, a: Uint32Array, d: Dispatcher): void {
    // A kernel of op `code` (its WGSL struct of words bound as P) over `groups` workgroups (x, or x and y).
    const run = (code: Code | "Copy", name: string, wgsl: string, p: Uint32Array, x: number, y?: number) => {
      if (x > 0 && (y ?? 1) > 0) d.dispatch(this.pipeline(name, code === "Copy" ? COPY_ARGS : wgslArgs[code], wgsl), p, x, y);
    };
    const each = (code: Code | "Copy", name: string, wgsl: string, count: number, p: Uint32Array = a) => run(code, name, wgsl, p, ...grid(Math.ceil(count / 256)));
    const perRow = (code: Code, name: string, wgsl: string, rows: number, p: Uint32Array = a) => run(code, name, wgsl, p, ...grid(rows));
    const per64 = (code: Code, name: string, wgsl: string, count: number, p: Uint32Array) => run(code, name, wgsl, p, ...grid(Math.ceil(count / 64)));
    switch (op) {
      case Op.Copy: {
        const [dst, src, bytes] = [a[0]!, a[1]!, a[2]!]; // protocol.ts: Copy's words
        if (dst % 4 || src % 4) throw new Error(`qkv webgpu: copy between byte offsets ${src} and ${dst}: expected multiples of 4`);
        return each("Copy", "copy", COPY, Math.ceil(bytes / 4));
      }
      case KernelOp.Fill:
        return each("Fill", "fill", FILL, read.Fill(a).x_n);
      case KernelOp.CopyRows: {
        const x = read.CopyRows(a);
        return each("CopyRows", "copy_rows", COPY_ROWS, x.rows * x.cols);
      }
      case KernelOp.Add:
        return each("Add", "add", ADD, read.Add(a).out_n);
      case KernelOp.DropoutForward: {
        const x = read.DropoutForward(a);
        return each("DropoutForward", "dropout_forward", dropout("y", "x"), x.y_n, params(a, ...dropoutWords(x.p)));
      }
      case KernelOp.DropoutBackward: {
        const x = read.DropoutBackward(a);
        return each("DropoutBackward", "dropout_backward", dropout("dx", "dy"), x.dx_n, params(a, ...dropoutWords(x.p)));
      }
      case KernelOp.Gemm: {
        const x = read.Gemm(a);
        return run("Gemm", "gemm", GEMM, a, x.M > 0 ? Math.ceil(x.N / 64) : 0, Math.ceil(x.M / 64));
      }
      case KernelOp.LayerNormForward:
        return perRow("LayerNormForward", "layernorm", layernormForward(false), read.LayerNormForward(a).rows);
      case KernelOp.ResidualLayerNormForward:
        return perRow("ResidualLayerNormForward", "residual_layernorm", layernormForward(true), read.ResidualLayerNormForward(a).rows);
      case KernelOp.LayerNormBackward: {
        const { rows, C } = read.LayerNormBackward(a);
        if (rows === 0) return;
        run("LayerNormBackward", "ln_partial", LN_BACKWARD_PARTIAL, a, Math.ceil(C / 256), Math.ceil(rows / 64));
        run("LayerNormBackward", "ln_sum", LN_BACKWARD_SUM, a, Math.ceil(C / 256));
        return perRow("LayerNormBackward", "ln_dx", LN_BACKWARD_DX, rows);
      }
      case KernelOp.BiasActForward: {
        const x = read.BiasActForward(a);
        return each("BiasActForward", "bias_act", BIAS_ACT_FORWARD, x.rows * x.N);
      }
      case KernelOp.BiasActBackward: {
        const x = read.BiasActBackward(a);
        if (x.db_n > 0 && x.rows > 0) {
          run("BiasActBackward", "bias_partial", BIAS_BACKWARD_PARTIAL, a, Math.ceil(x.N / 256), Math.ceil(x.rows / 64));
          run("BiasActBackward", "bias_sum", BIAS_BACKWARD_SUM, a, Math.ceil(x.N / 256));
        }
        if (x.dh_n > 0) each("BiasActBackward", "act_backward", ACT_BACKWARD, x.rows * x.N);
        return;
      }
      case KernelOp.AttentionForward: {
        const s = read.AttentionForward(a);
        return per64("AttentionForward", "attention_forward", ATTENTION_FORWARD, s.B * s.H * s.Tq, this.attentionParams(a, s));
      }
      case KernelOp.AttentionWeights: {
        const s = read.AttentionWeights(a);
        return per64("AttentionWeights", "attention_weights", ATTENTION_WEIGHTS, s.B * s.H * s.Tq, this.attentionParams(a, s));
      }
      case KernelOp.AttentionBackward: {
        const s = read.AttentionBackward(a);
        const p = this.attentionParams(a, s);
        per64("AttentionBackward", "attention_d", ATTENTION_BACKWARD_D, s.B * s.H * s.Tq, p);
        per64("AttentionBackward", "attention_dq", ATTENTION_BACKWARD_DQ, s.B * s.H * s.Tq, p);
        per64("AttentionBackward", "attention_dkv", ATTENTION_BACKWARD_DKV, s.B * s.H * s.Tk, p);
        return;
      }
      case KernelOp.EmbeddingForward: {
        const x = read.EmbeddingForward(a);
        return each("EmbeddingForward", "embedding_forward", EMBEDDING_FORWARD, x.B * x.T * x.C);
      }
      case KernelOp.EmbeddingBackward: {
        const x = read.EmbeddingBackward(a);
        if (x.B * x.T === 0) return;
        perRow("EmbeddingBackward", "embedding_wte", EMBEDDING_BACKWARD_WTE, x.dwte_n / x.C);
        if (x.dpos_n > 0) each("EmbeddingBackward", "embedding_pos", EMBEDDING_BACKWARD_POS, x.T * x.C);
        return;
      }
      case KernelOp.MeanPoolForward: {
        const x = read.MeanPoolForward(a);
        return each("MeanPoolForward", "mean_pool_forward", MEAN_POOL_FORWARD, x.B * x.C);
      }
      case KernelOp.MeanPoolBackward: {
        const x = read.MeanPoolBackward(a);
        return each("MeanPoolBackward", "mean_pool_backward", MEAN_POOL_BACKWARD, x.B * x.T * x.C);
      }
      case KernelOp.CrossEntropyForward:
        return perRow("CrossEntropyForward", "crossentropy", crossEntropy(false), read.CrossEntropyForward(a).rows);
      case KernelOp.CrossEntropyForwardBackward:
        return perRow("CrossEntropyForwardBackward", "crossentropy_backward", crossEntropy(true), read.CrossEntropyForwardBackward(a).rows);
      case KernelOp.ArgmaxRows:
        return perRow("ArgmaxRows", "argmax", ARGMAX, read.ArgmaxRows(a).rows);
      case KernelOp.AdamStep:
        return each("AdamStep", "adam", ADAM, read.AdamStep(a).ranges_end);
      case KernelOp.SumSquares:
        return perRow("SumSquares", "sum_squares", SUM_SQUARES, Math.ceil(read.SumSquares(a).x_n / SUM_SQUARES_BLOCK));
      case KernelOp.GemmQuant:
      case KernelOp.DequantizeRows:
      case KernelOp.EmbeddingForwardQuant: // kernels-quant.ts: a pipeline per packed format
        return encodeQuant(op, a, (code, name, wgsl, p, groups) => run(code, name, wgsl, p, ...(typeof groups === "number" ? grid(groups) : groups)));
      default:
        throw new Error(`qkv webgpu: unknown op ${op}`);
    }
  }

  /** The attention kernels' worker words after the command's: scale, dropout threshold and factor. */
  private attentionParams(a: Uint32Array, s: { C: number; H: number; dropout: number }): Uint32Array {
    const hs = s.C / s.H;
    if (hs > HS_MAX) throw new Error(`qkv webgpu: attention head size ${hs} is above the kernels' ${HS_MAX}`);
    const scale = Math.fround(1 / Math.fround(Math.sqrt(hs)));
    return params(a, f32bits(scale), ...dropoutWords(s.dropout));
  }

  private pipeline(name: string, args: string, wgsl: string): GPUComputePipeline {
    let p = this.pipelines.get(name);
    if (!p) {
      const module = this.device.createShaderModule({ label: name, code: prelude(args) + wgsl });
      p = this.device.createComputePipeline({ label: name, layout: this.layout, compute: { module, entryPoint: "main" } });
      this.pipelines.set(name, p);
    }
    return p;
  }
}
