// The WGSL kernels of the op contract (cpp/src/ops/ops.h), one per op (a few passes where an op reduces across
// rows), as the GPU worker encodes them for the core's commands (protocol.ts). Their formulas are the
// reference executor's (cpp/src/exec/reference/reference_backend.cpp), which every executor is checked against; the
// browser test runs ops/backend_check.cpp's sweep on them against the wasm core (checkBackend()).
//
// Conventions. Every kernel binds the whole arena as `mem: array<u32>` (dispatch.ts) and reads its command's
// words as its parameters: arg(i) is the i-th word after the command's header, exactly as protocol.ts lists
// them (pointers are byte offsets: a float at byte offset o is mem[o / 4]); a few kernels get extra words
// after those (computed here: a factor, a threshold). Grids past 65535 workgroups fold into y (grid()).
// Accumulation is f32 throughout (WGSL has no f64); where the reference sums in double the difference is
// well inside the checks' 1e-5 (sums are tree reductions, statistics two-pass).
/// <reference types="@webgpu/types" />
import { PARAM_WORDS, f32bits, type Dispatcher } from "./dispatch.js";
import { Op } from "./protocol.js";

const PRELUDE = /* wgsl */ `
@group(0) @binding(0) var<storage, read_write> mem: array<u32>;
@group(0) @binding(1) var<uniform> P: array<vec4<u32>, ${PARAM_WORDS / 4}>;
fn arg(i: u32) -> u32 { return P[i / 4u][i % 4u]; }
fn argf(i: u32) -> f32 { return bitcast<f32>(arg(i)); }
fn w(i: u32) -> u32 { return arg(i) / 4u; }              // a pointer argument as a word index
fn ld(i: u32) -> f32 { return bitcast<f32>(mem[i]); }
fn st(i: u32, x: f32) { mem[i] = bitcast<u32>(x); }
fn byte_at(o: u32) -> u32 { return (mem[o / 4u] >> (8u * (o % 4u))) & 0xffu; }
// The linear index of an invocation over a grid folded into (x, y) workgroups of \`size\`.
fn lin(g: vec3<u32>, n: vec3<u32>, l: u32, size: u32) -> u32 { return (g.y * n.x + g.x) * size + l; }
fn wg_index(g: vec3<u32>, n: vec3<u32>) -> u32 { return g.y * n.x + g.x; }
const INF = 0x7f800000u;
`;

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

const FILL = `${EACH} { let i = lin(g, n, l, 256u); if (i >= arg(1u)) { return; } mem[w(0u) + i] = arg(2u); }`;

// dst, src, bytes (the worker's Copy: one buffer cannot be both ends of copyBufferToBuffer): words, the last
// one merged byte by byte when bytes is not a multiple of 4 (the bytes after dst's end are kept).
const COPY = `${EACH} {
  let i = lin(g, n, l, 256u); let bytes = arg(2u);
  if (i >= (bytes + 3u) / 4u) { return; }
  let s = mem[w(1u) + i];
  let left = bytes - i * 4u;
  if (left >= 4u) { mem[w(0u) + i] = s; return; }
  let mask = (1u << (8u * left)) - 1u;
  mem[w(0u) + i] = (mem[w(0u) + i] & ~mask) | (s & mask);
}`;

// dst, ld_dst, src, ld_src, rows, cols
const COPY_ROWS = `${EACH} {
  let i = lin(g, n, l, 256u); let cols = arg(5u);
  if (i >= arg(4u) * cols) { return; }
  let r = i / cols; let c = i % cols;
  mem[w(0u) + r * arg(1u) + c] = mem[w(2u) + r * arg(3u) + c];
}`;

// out, a, b, n
const ADD = `${EACH} { let i = lin(g, n, l, 256u); if (i >= arg(3u)) { return; } st(w(0u) + i, ld(w(1u) + i) + ld(w(2u) + i)); }`;

// y, x, n, p, seed_lo, seed_hi; extra: threshold (6), factor (7). p <= 0 copies (the reference's early return).
const DROPOUT = `${HASH}${EACH} {
  let i = lin(g, n, l, 256u); if (i >= arg(2u)) { return; }
  let x = ld(w(1u) + i);
  if (argf(3u) <= 0.0) { st(w(0u) + i, x); return; }
  let keep = dropout_hash(vec2<u32>(arg(4u), arg(5u)), vec2<u32>(i, 0u)) >= arg(6u);
  st(w(0u) + i, select(0.0, x * argf(7u), keep));
}`;

// ---- matrix product: C (M,N) = alpha op(A) op(B) + beta C ----
// trans_a 0, trans_b 1, M 2, N 3, K 4, alpha 5, A 6, lda 7, B 8, ldb 9, beta 10, C 11, ldc 12.
// 64 x 64 tiles of C per workgroup, 16 x 16 invocations each owning a 4 x 4 block, K in steps of 16 through
// workgroup memory (A's tile as (k, m) and B's as (k, n), so that the inner loop reads rows of both).
const GEMM = `
var<workgroup> As: array<f32, 1024>;  // [16][64]: As[k * 64 + m]
var<workgroup> Bs: array<f32, 1024>;  // [16][64]: Bs[k * 64 + n]
fn a_at(m: u32, k: u32) -> f32 {
  if (arg(0u) != 0u) { return ld(w(6u) + k * arg(7u) + m); }
  return ld(w(6u) + m * arg(7u) + k);
}
fn b_at(k: u32, j: u32) -> f32 {
  if (arg(1u) != 0u) { return ld(w(8u) + j * arg(9u) + k); }
  return ld(w(8u) + k * arg(9u) + j);
}
@compute @workgroup_size(16, 16) fn main(@builtin(workgroup_id) g: vec3<u32>, @builtin(local_invocation_id) t: vec3<u32>) {
  let M = arg(2u); let N = arg(3u); let K = arg(4u);
  let m0 = g.y * 64u; let n0 = g.x * 64u;
  let tid = t.y * 16u + t.x;
  var acc: array<f32, 16>;
  for (var k0 = 0u; k0 < K; k0 += 16u) {
    for (var e = tid; e < 1024u; e += 256u) {       // 4 loads of each tile per invocation
      let kk = e / 64u; let mm = e % 64u;
      let k = k0 + kk;
      As[e] = select(0.0, a_at(m0 + mm, k), k < K && m0 + mm < M);
      Bs[e] = select(0.0, b_at(k, n0 + mm), k < K && n0 + mm < N);
    }
    workgroupBarrier();
    for (var kk = 0u; kk < 16u; kk++) {
      var a: array<f32, 4>; var b: array<f32, 4>;
      for (var i = 0u; i < 4u; i++) { a[i] = As[kk * 64u + t.y * 4u + i]; b[i] = Bs[kk * 64u + t.x * 4u + i]; }
      for (var i = 0u; i < 4u; i++) { for (var j = 0u; j < 4u; j++) { acc[i * 4u + j] = fma(a[i], b[j], acc[i * 4u + j]); } }
    }
    workgroupBarrier();
  }
  let alpha = argf(5u); let beta = argf(10u);
  for (var i = 0u; i < 4u; i++) {
    let m = m0 + t.y * 4u + i;
    if (m >= M) { break; }
    for (var j = 0u; j < 4u; j++) {
      let c = n0 + t.x * 4u + j;
      if (c >= N) { break; }
      let at = w(11u) + m * arg(12u) + c;
      var v = alpha * acc[i * 4u + j];
      if (beta != 0.0) { v = v + beta * ld(at); }
      st(at, v);
    }
  }
}`;

// ---- LayerNorm (eps 1e-5): a workgroup per row ----

/** Forward; residual: r = x + f first (words shift by one: r, y, mean, rstd, x, f, w, b, rows, C). */
function layernormForward(residual: boolean): string {
  const o = residual ? 1 : 0; // the index shift of the words after r
  return `${REDUCE}${EACH} {
  let row = wg_index(g, n); let rows = arg(${6 + 2 * o}u); let C = arg(${7 + 2 * o}u);
  if (row >= rows) { return; }
  let base = row * C;
  let x = w(${3 + o}u) + base;
  ${residual ? `for (var i = l; i < C; i += 256u) { st(w(0u) + base + i, ld(x + i) + ld(w(5u) + base + i)); }` : ""}
  let src = ${residual ? "w(0u) + base" : "x"};
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
    st(w(${o}u) + base + i, (ld(src + i) - mu0 - c) * rstd * ld(w(${4 + 2 * o}u) + i) + ld(w(${5 + 2 * o}u) + i));
  }
  if (l == 0u) { st(w(${1 + o}u) + row, mu0 + c); st(w(${2 + o}u) + row, rstd); }
}`;
}

// Backward words: dx 0, dw 1, db 2, dr 3, dr_n 4, dy 5, x 6, w 7, mean 8, rstd 9, rows 10, C 11, scratch 12.
// dx = dr + rstd (g - mean(g) - xhat mean(g xhat)), g = dy w: a workgroup per row (dr may alias dx: each
// element is read before it is written, by the same invocation).
const LN_BACKWARD_DX = `${REDUCE}${EACH} {
  let row = wg_index(g, n); let C = arg(11u);
  if (row >= arg(10u)) { return; }
  let base = row * C; let mean = ld(w(8u) + row); let rstd = ld(w(9u) + row);
  var sg = 0.0; var sgx = 0.0;
  for (var i = l; i < C; i += 256u) {
    let xhat = (ld(w(6u) + base + i) - mean) * rstd; let gi = ld(w(5u) + base + i) * ld(w(7u) + i);
    sg += gi; sgx += gi * xhat;
  }
  let mg = reduce_sum(l, sg) / f32(C); let mgx = reduce_sum(l, sgx) / f32(C);
  for (var i = l; i < C; i += 256u) {
    let xhat = (ld(w(6u) + base + i) - mean) * rstd; let gi = ld(w(5u) + base + i) * ld(w(7u) + i);
    let dr = select(0.0, ld(w(3u) + base + i), arg(4u) > 0u);
    st(w(0u) + base + i, dr + rstd * (gi - mg - xhat * mgx));
  }
}`;
// dw, db partial sums over blocks of 64 rows, one invocation per (column, block): scratch (blocks, 2, C).
const LN_BACKWARD_PARTIAL = `@compute @workgroup_size(256) fn main(@builtin(global_invocation_id) id: vec3<u32>) {
  let c = id.x; let blk = id.y; let C = arg(11u); let rows = arg(10u);
  if (c >= C) { return; }
  var sw = 0.0; var sb = 0.0;
  for (var r = blk * 64u; r < min(rows, blk * 64u + 64u); r++) {
    let dy = ld(w(5u) + r * C + c);
    sw += dy * (ld(w(6u) + r * C + c) - ld(w(8u) + r)) * ld(w(9u) + r);
    sb += dy;
  }
  st(w(12u) + blk * 2u * C + c, sw); st(w(12u) + blk * 2u * C + C + c, sb);
}`;
const LN_BACKWARD_SUM = `@compute @workgroup_size(256) fn main(@builtin(global_invocation_id) id: vec3<u32>) {
  let c = id.x; let C = arg(11u);
  if (c >= C) { return; }
  let blocks = (arg(10u) + 63u) / 64u;
  var sw = 0.0; var sb = 0.0;
  for (var b = 0u; b < blocks; b++) { sw += ld(w(12u) + b * 2u * C + c); sb += ld(w(12u) + b * 2u * C + C + c); }
  st(w(1u) + c, ld(w(1u) + c) + sw); st(w(2u) + c, ld(w(2u) + c) + sb);
}`;

// ---- bias + activation ----
// forward: a 0, h 1, b 2, b_n 3, act 4, rows 5, N 6: h += b, a = act(h) (a is h for Identity).
const BIAS_ACT_FORWARD = `${ACT}${EACH} {
  let i = lin(g, n, l, 256u); let N = arg(6u);
  if (i >= arg(5u) * N) { return; }
  var h = ld(w(1u) + i);
  if (arg(3u) > 0u) { h = h + ld(w(2u) + i % N); }
  st(w(1u) + i, h);
  st(w(0u) + i, act_of(arg(4u), h));
}`;
// backward: dh 0, dh_n 1, db 2, db_n 3, da 4, h 5, h_n 6, act 7, rows 8, N 9, scratch 10.
// g = da act'(h) (da itself when h is empty). The db partials run first: dh may alias da.
const BIAS_ACT_G = `fn grad_at(i: u32) -> f32 {
  let da = ld(w(4u) + i);
  if (arg(6u) == 0u) { return da; }
  return da * act_grad(arg(7u), ld(w(5u) + i));
}`;
const BIAS_BACKWARD_PARTIAL = `${ACT}${BIAS_ACT_G}@compute @workgroup_size(256) fn main(@builtin(global_invocation_id) id: vec3<u32>) {
  let c = id.x; let blk = id.y; let N = arg(9u); let rows = arg(8u);
  if (c >= N) { return; }
  // Kahan-compensated: the column sums of a gradient cancel, so their rounding is judged against a small result.
  var s = 0.0; var e = 0.0;
  for (var r = blk * 64u; r < min(rows, blk * 64u + 64u); r++) {
    let y = grad_at(r * N + c) - e; let t = s + y; e = (t - s) - y; s = t;
  }
  st(w(10u) + blk * N + c, s);
}`;
const BIAS_BACKWARD_SUM = `@compute @workgroup_size(256) fn main(@builtin(global_invocation_id) id: vec3<u32>) {
  let c = id.x; let N = arg(9u);
  if (c >= N) { return; }
  let blocks = (arg(8u) + 63u) / 64u;
  var s = 0.0; var e = 0.0;  // Kahan, as the partials
  for (var b = 0u; b < blocks; b++) { let y = ld(w(10u) + b * N + c) - e; let t = s + y; e = (t - s) - y; s = t; }
  st(w(2u) + c, ld(w(2u) + c) + s);
}`;
const ACT_BACKWARD = `${ACT}${BIAS_ACT_G}${EACH} {
  let i = lin(g, n, l, 256u);
  if (i >= arg(8u) * arg(9u)) { return; }
  st(w(0u) + i, grad_at(i));
}`;

// ---- attention ----
// Shape words at s: B, Tq, Tk, C, H, ldq, ldkv, key_pad, has_key_pad, causal, dropout, seed_lo, seed_hi, q_pos,
// k_rows; extras at e: scale (1/sqrt(hs), as the CPU rounds it), threshold, factor.
function attentionCommon(s: number, e: number): string {
  return `${HASH}
fn B_() -> u32 { return arg(${s}u); }
fn Tq() -> u32 { return arg(${s + 1}u); }
fn Tk() -> u32 { return arg(${s + 2}u); }
fn C_() -> u32 { return arg(${s + 3}u); }
fn H_() -> u32 { return arg(${s + 4}u); }
fn hs() -> u32 { return C_() / H_(); }
fn krows() -> u32 { return arg(${s + 14}u); }
fn qrow(b: u32, t: u32, h: u32, q: u32) -> u32 { return q + (b * Tq() + t) * arg(${s + 5}u) + h * hs(); }
fn krow(b: u32, j: u32, h: u32, k: u32) -> u32 { return k + (b * krows() + j) * arg(${s + 6}u) + h * hs(); }
fn visible(b: u32, t: u32, j: u32) -> bool {
  if (arg(${s + 9}u) != 0u && j > t + arg(${s + 13}u)) { return false; }
  return !(arg(${s + 8}u) != 0u && byte_at(arg(${s + 7}u) + b * krows() + j) != 0u);
}
fn scale() -> f32 { return argf(${e}u); }
// dropped(x) at (b, h, t, j): the reference's drop_index, kept values times 1/(1-p).
fn dropped(x: f32, b: u32, h: u32, t: u32, j: u32) -> f32 {
  if (argf(${s + 10}u) <= 0.0) { return x; }
  let at = ((b * H_() + h) * Tq() + t) * Tk() + j;
  let keep = dropout_hash(vec2<u32>(arg(${s + 11}u), arg(${s + 12}u)), vec2<u32>(at, 0u)) >= arg(${e + 1}u);
  return select(0.0, x * argf(${e + 2}u), keep);
}
fn score(b: u32, h: u32, t: u32, j: u32, q: u32, k: u32) -> f32 {
  let qa = qrow(b, t, h, q); let ka = krow(b, j, h, k);
  var d = 0.0;
  for (var i = 0u; i < hs(); i++) { d = fma(ld(qa + i), ld(ka + i), d); }
  return d * scale();
}
`;
}
const HS_MAX = 256;

// Forward words: out 0, lse 1, q 2, k 3, v 4, shape 5..19, scratch 20, 21; extras 22..24. An invocation per
// query row (b, h, t), online softmax over the keys: out = sum_j dropped(P_j) v_j, lse = m + log(l) (+inf and
// out 0 when every key is masked).
const ATTENTION_FORWARD = `${attentionCommon(5, 22)}
@compute @workgroup_size(64) fn main(@builtin(workgroup_id) g: vec3<u32>, @builtin(num_workgroups) n: vec3<u32>, @builtin(local_invocation_index) l: u32) {
  let id = lin(g, n, l, 64u);
  if (id >= B_() * H_() * Tq()) { return; }
  let t = id % Tq(); let h = (id / Tq()) % H_(); let b = id / (Tq() * H_());
  var o: array<f32, ${HS_MAX}>;
  var m = -3.0e38; var sum = 0.0; var seen = false;
  for (var j = 0u; j < Tk(); j++) {
    if (!visible(b, t, j)) { continue; }
    seen = true;
    let s = score(b, h, t, j, w(2u), w(3u));
    let m2 = max(m, s);
    let c = exp(m - m2);
    let p = exp(s - m2);
    sum = sum * c + p;
    let pd = dropped(p, b, h, t, j);
    let va = krow(b, j, h, w(4u));
    for (var i = 0u; i < hs(); i++) { o[i] = o[i] * c + pd * ld(va + i); }
    m = m2;
  }
  let oa = w(0u) + (b * Tq() + t) * C_() + h * hs();
  for (var i = 0u; i < hs(); i++) { st(oa + i, select(0.0, o[i] / sum, seen)); }
  mem[w(1u) + id] = select(INF, bitcast<u32>(m + log(sum)), seen);
}`;

// Weights words: att 0, q 1, k 2, shape 3..17; extras 18..20. P (B,H,Tq,Tk) before dropout, masked 0.
const ATTENTION_WEIGHTS = `${attentionCommon(3, 18)}
@compute @workgroup_size(64) fn main(@builtin(workgroup_id) g: vec3<u32>, @builtin(num_workgroups) n: vec3<u32>, @builtin(local_invocation_index) l: u32) {
  let id = lin(g, n, l, 64u);
  if (id >= B_() * H_() * Tq()) { return; }
  let t = id % Tq(); let h = (id / Tq()) % H_(); let b = id / (Tq() * H_());
  var m = -3.0e38; var seen = false;
  for (var j = 0u; j < Tk(); j++) { if (visible(b, t, j)) { seen = true; m = max(m, score(b, h, t, j, w(1u), w(2u))); } }
  var sum = 0.0;
  for (var j = 0u; j < Tk(); j++) { if (visible(b, t, j)) { sum += exp(score(b, h, t, j, w(1u), w(2u)) - m); } }
  let row = w(0u) + id * Tk();
  for (var j = 0u; j < Tk(); j++) {
    var p = 0.0;
    if (seen && visible(b, t, j)) { p = exp(score(b, h, t, j, w(1u), w(2u)) - m) / sum; }
    st(row + j, p);
  }
}`;

// Backward words: dq 0, dk 1, dv 2, dout 3, q 4, k 5, v 6, out 7, lse 8, shape 9..23, scratch 24, 25; extras
// 26..28. With P = exp(S - lse), Pd = dropped(P), dP = dropped(dout . v): D = dout . out (= sum P dP),
// dS = P (dP - D), dq = scale dS k, dk = scale dS^T q, dv = Pd^T dout. Three passes, no atomics: D per query
// row into scratch, dq per query row, dk and dv per key row.
const ATTENTION_BACKWARD_COMMON = `${attentionCommon(9, 26)}
fn lse_at(b: u32, h: u32, t: u32) -> f32 { return ld(w(8u) + (b * H_() + h) * Tq() + t); }
fn dot_rows(a: u32, c: u32) -> f32 { var d = 0.0; for (var i = 0u; i < hs(); i++) { d = fma(ld(a + i), ld(c + i), d); } return d; }
fn orow(b: u32, t: u32, h: u32, base: u32) -> u32 { return base + (b * Tq() + t) * C_() + h * hs(); }
`;
const ATTENTION_BACKWARD_D = `${ATTENTION_BACKWARD_COMMON}
@compute @workgroup_size(64) fn main(@builtin(workgroup_id) g: vec3<u32>, @builtin(num_workgroups) n: vec3<u32>, @builtin(local_invocation_index) l: u32) {
  let id = lin(g, n, l, 64u);
  if (id >= B_() * H_() * Tq()) { return; }
  let t = id % Tq(); let h = (id / Tq()) % H_(); let b = id / (Tq() * H_());
  st(w(24u) + id, dot_rows(orow(b, t, h, w(3u)), orow(b, t, h, w(7u))));
}`;
const ATTENTION_BACKWARD_DQ = `${ATTENTION_BACKWARD_COMMON}
@compute @workgroup_size(64) fn main(@builtin(workgroup_id) g: vec3<u32>, @builtin(num_workgroups) n: vec3<u32>, @builtin(local_invocation_index) l: u32) {
  let id = lin(g, n, l, 64u);
  if (id >= B_() * H_() * Tq()) { return; }
  let t = id % Tq(); let h = (id / Tq()) % H_(); let b = id / (Tq() * H_());
  var dq: array<f32, ${HS_MAX}>;
  let lse = lse_at(b, h, t);
  let D = ld(w(24u) + id);
  let go = orow(b, t, h, w(3u));
  if (lse < 3.0e38) {
    for (var j = 0u; j < Tk(); j++) {
      if (!visible(b, t, j)) { continue; }
      let p = exp(score(b, h, t, j, w(4u), w(5u)) - lse);
      let dp = dropped(dot_rows(go, krow(b, j, h, w(6u))), b, h, t, j);
      let ds = p * (dp - D);
      let ka = krow(b, j, h, w(5u));
      for (var i = 0u; i < hs(); i++) { dq[i] = fma(ds, ld(ka + i), dq[i]); }
    }
  }
  let qa = qrow(b, t, h, w(0u));
  for (var i = 0u; i < hs(); i++) { st(qa + i, dq[i] * scale()); }
}`;
const ATTENTION_BACKWARD_DKV = `${ATTENTION_BACKWARD_COMMON}
@compute @workgroup_size(64) fn main(@builtin(workgroup_id) g: vec3<u32>, @builtin(num_workgroups) n: vec3<u32>, @builtin(local_invocation_index) l: u32) {
  let id = lin(g, n, l, 64u);
  if (id >= B_() * H_() * Tk()) { return; }
  let j = id % Tk(); let h = (id / Tk()) % H_(); let b = id / (Tk() * H_());
  var dk: array<f32, ${HS_MAX}>;
  var dv: array<f32, ${HS_MAX}>;
  let va = krow(b, j, h, w(6u));
  for (var t = 0u; t < Tq(); t++) {
    let lse = lse_at(b, h, t);
    if (!visible(b, t, j) || lse >= 3.0e38) { continue; }
    let p = exp(score(b, h, t, j, w(4u), w(5u)) - lse);
    let go = orow(b, t, h, w(3u));
    let pd = dropped(p, b, h, t, j);
    let dp = dropped(dot_rows(go, va), b, h, t, j);
    let ds = p * (dp - ld(w(24u) + (b * H_() + h) * Tq() + t));
    let qa = qrow(b, t, h, w(4u));
    for (var i = 0u; i < hs(); i++) { dv[i] = fma(pd, ld(go + i), dv[i]); dk[i] = fma(ds, ld(qa + i), dk[i]); }
  }
  let ka = krow(b, j, h, w(1u)); let vb = krow(b, j, h, w(2u));
  for (var i = 0u; i < hs(); i++) { st(ka + i, dk[i] * scale()); st(vb + i, dv[i]); }
}`;

// ---- embedding, pooling ----
// forward: x 0, ids 1, wte 2, pos 3, pos_n 4, scale 5, B 6, T 7, C 8: x[r] = scale wte[id] + pos[r % T].
const EMBEDDING_FORWARD = `${EACH} {
  let i = lin(g, n, l, 256u); let C = arg(8u);
  if (i >= arg(6u) * arg(7u) * C) { return; }
  let r = i / C; let c = i % C;
  let id = mem[w(1u) + r];
  var x = argf(5u) * ld(w(2u) + id * C + c);
  if (arg(4u) > 0u) { x = x + ld(w(3u) + (r % arg(7u)) * C + c); }
  st(w(0u) + i, x);
}`;
// backward: dwte 0, V 1, dpos 2, dpos_n 3, dx 4, ids 5, scale 6, B 7, T 8, C 9. dwte[v] += scale dx[r] over the
// rows r of token v in order (a workgroup per v, the same additions in the same order as the CPU: no atomics);
// dpos[t] += dx[b, t] over b, an invocation per (t, c). The workgroup of v reads the ids once, in blocks of
// 1024 rows: each invocation counts the matches in its 16 rows, a prefix sum over the 64 counts gives each its
// place, and the matching rows land in \`rows_of\` in order; then the invocations add those rows' columns.
const EMBEDDING_BACKWARD_WTE = `var<workgroup> rows_of: array<u32, 1024>;
var<workgroup> counts: array<u32, 64>;
@compute @workgroup_size(64) fn main(@builtin(workgroup_id) g: vec3<u32>, @builtin(num_workgroups) n: vec3<u32>, @builtin(local_invocation_index) l: u32) {
  let v = wg_index(g, n); let C = arg(9u); let rows = arg(7u) * arg(8u);
  if (v >= arg(1u)) { return; }
  for (var r0 = 0u; r0 < rows; r0 += 1024u) {
    let lo = r0 + l * 16u; let hi = min(rows, lo + 16u);
    var mine = 0u;
    for (var r = lo; r < hi; r++) { if (mem[w(5u) + r] == v) { mine++; } }
    counts[l] = mine;
    workgroupBarrier();
    var at = 0u;
    for (var i = 0u; i < l; i++) { at += counts[i]; }
    for (var r = lo; r < hi; r++) { if (mem[w(5u) + r] == v) { rows_of[at] = r; at++; } }
    workgroupBarrier();
    var total = 0u;
    for (var i = 0u; i < 64u; i++) { total += counts[i]; }
    for (var c = l; c < C; c += 64u) {
      var acc = ld(w(0u) + v * C + c);
      for (var k = 0u; k < total; k++) { acc = acc + argf(6u) * ld(w(4u) + rows_of[k] * C + c); }
      st(w(0u) + v * C + c, acc);
    }
    workgroupBarrier();  // counts and rows_of are read up before the next block rewrites them
  }
}`;
const EMBEDDING_BACKWARD_POS = `${EACH} {
  let i = lin(g, n, l, 256u); let C = arg(9u); let T = arg(8u);
  if (i >= T * C) { return; }
  var acc = ld(w(2u) + i);
  for (var b = 0u; b < arg(7u); b++) { acc = acc + ld(w(4u) + b * T * C + i); }
  st(w(2u) + i, acc);
}`;
// mean pool forward: out 0, x 1, key_pad 2, B 3, T 4, C 5 (an invocation per (b, c)); backward: dx 0, dout 1.
const MEAN_POOL_FORWARD = `${EACH} {
  let i = lin(g, n, l, 256u); let T = arg(4u); let C = arg(5u);
  if (i >= arg(3u) * C) { return; }
  let b = i / C; let c = i % C;
  var cnt = 0u; var s = 0.0;
  for (var t = 0u; t < T; t++) {
    if (byte_at(arg(2u) + b * T + t) == 0u) { cnt++; s += ld(w(1u) + (b * T + t) * C + c); }
  }
  st(w(0u) + i, select(0.0, s * (1.0 / f32(cnt)), cnt > 0u));
}`;
const MEAN_POOL_BACKWARD = `${EACH} {
  let i = lin(g, n, l, 256u); let T = arg(4u); let C = arg(5u);
  if (i >= arg(3u) * T * C) { return; }
  let b = i / (T * C); let t = (i / C) % T; let c = i % C;
  var cnt = 0u;
  for (var u = 0u; u < T; u++) { if (byte_at(arg(2u) + b * T + u) == 0u) { cnt++; } }
  let keep = cnt > 0u && byte_at(arg(2u) + b * T + t) == 0u;
  st(w(0u) + i, select(0.0, ld(w(1u) + b * C + c) * (1.0 / f32(cnt)), keep));
}`;

// ---- loss ----
/**
 * Softmax cross-entropy per row (a workgroup per row): loss = (1-e)(lse - z_t) + e/V sum_i (lse - z_i), an
 * ignored row 0; with the gradient, d = scale (softmax - (1-e) onehot - e/V) (d may alias z: everything is
 * read before the barrier that precedes the writes).
 */
function crossEntropy(backward: boolean): string {
  // forward: losses 0, logits 1, targets 2, rows 3, V 4, ignore 5, smoothing 6
  // forward_backward: losses 0, dlogits 1, logits 2, targets 3, scale 4, rows 5, V 6, ignore 7, smoothing 8
  const [Z, TG, ROWS, V, IG, E] = backward ? [2, 3, 5, 6, 7, 8] : [1, 2, 3, 4, 5, 6];
  return `${REDUCE}var<workgroup> tgt_shared: i32;
${EACH} {
  let row = wg_index(g, n); let V = arg(${V}u);
  if (row >= arg(${ROWS}u)) { return; }
  let z = w(${Z}u) + row * V;
  if (l == 0u) { tgt_shared = bitcast<i32>(mem[w(${TG}u) + row]); }
  let tgt = workgroupUniformLoad(&tgt_shared);   // uniform: the ignored row's early return may skip barriers
  if (tgt == bitcast<i32>(arg(${IG}u))) {
    ${backward ? "for (var i = l; i < V; i += 256u) { st(w(1u) + row * V + i, 0.0); }" : ""}
    if (l == 0u) { st(w(0u) + row, 0.0); }
    return;
  }
  var mx = -3.0e38;
  for (var i = l; i < V; i += 256u) { mx = max(mx, ld(z + i)); }
  mx = reduce_max(l, mx);
  var s = 0.0; var sz = 0.0;
  for (var i = l; i < V; i += 256u) { let zi = ld(z + i); s += exp(zi - mx); sz += zi; }
  let lse = mx + log(reduce_sum(l, s));
  let total = f32(V) * lse - reduce_sum(l, sz);
  let e = argf(${E}u);
  let zt = ld(z + u32(tgt));
  workgroupBarrier();
  if (l == 0u) { st(w(0u) + row, (1.0 - e) * (lse - zt) + e / f32(V) * total); }
  ${
    backward
      ? `for (var i = l; i < V; i += 256u) {
    let p = exp(ld(z + i) - lse);
    st(w(1u) + row * V + i, argf(4u) * (p - select(0.0, 1.0 - e, i == u32(tgt)) - e / f32(V)));
  }`
      : ""
  }
}`;
}

// argmax: best 0, logits 1, rows 2, V 3: the first index of the largest (a workgroup per row).
const ARGMAX = `var<workgroup> bv: array<f32, 256>; var<workgroup> bi: array<u32, 256>;
${EACH} {
  let row = wg_index(g, n); let V = arg(3u);
  if (row >= arg(2u)) { return; }
  let z = w(1u) + row * V;
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
  if (l == 0u) { mem[w(0u) + row] = bi[0]; }
}`;

// ---- optimizer ----
// adam: p 0, m 1, v 2, g 3, n 4, ranges 5, nranges 6, b1 7, b2 8, eps 9, grad_scale 10, step 11, sqrt_bc2 12.
// The ranges are sorted quads (begin, end, l2, shrink); an element outside all of them is left alone.
const ADAM = `${EACH} {
  let i = lin(g, n, l, 256u);
  if (i >= arg(4u)) { return; }
  var lo = 0u; var hi = arg(6u);                 // the last range with begin <= i
  while (lo + 1u < hi) { let mid = (lo + hi) / 2u; if (mem[w(5u) + mid * 4u] <= i) { lo = mid; } else { hi = mid; } }
  let q = w(5u) + lo * 4u;
  if (i < mem[q] || i >= mem[q + 1u]) { return; }
  let l2 = ld(q + 2u); let shrink = ld(q + 3u);
  let b1 = argf(7u); let b2 = argf(8u);
  var p = ld(w(0u) + i);
  let gi = ld(w(3u) + i) * argf(10u) + l2 * p;
  p = p * shrink;
  let m = b1 * ld(w(1u) + i) + (1.0 - b1) * gi;
  let v = b2 * ld(w(2u) + i) + (1.0 - b2) * gi * gi;
  st(w(1u) + i, m); st(w(2u) + i, v);
  st(w(0u) + i, p - argf(11u) * (m / (sqrt(v) / argf(12u) + argf(9u))));
}`;
// sum of squares: x 0, n 1, partials 2: one partial per 4096 floats (a workgroup each).
const SUM_SQUARES = `${REDUCE}${EACH} {
  let blk = wg_index(g, n); let N = arg(1u);
  var s = 0.0;
  for (var k = 0u; k < 16u; k++) {
    let i = blk * 4096u + k * 256u + l;
    if (i < N) { let x = ld(w(0u) + i); s = fma(x, x, s); }
  }
  let total = reduce_sum(l, s);
  if (l == 0u) { st(w(2u) + blk, total); }
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

/** Words after a command's own: its arguments, then what a kernel computes here. */
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

function bitsToF32(u: number): number {
  return new Float32Array(new Uint32Array([u]).buffer)[0]!;
}

export class GpuKernels {
  private readonly pipelines = new Map<string, GPUComputePipeline>();

  constructor(
    private readonly device: GPUDevice,
    private readonly layout: GPUPipelineLayout,
  ) {}

  /** Encodes kernel op `op` (an Op value >= 16) whose argument words are `a`. */
  encode(op: number, a: Uint32Array, d: Dispatcher): void {
    const each = (name: string, wgsl: string, count: number, p: Uint32Array = a) => {
      if (count > 0) d.dispatch(this.pipeline(name, wgsl), p, ...grid(Math.ceil(count / 256)));
    };
    const perRow = (name: string, wgsl: string, rows: number, p: Uint32Array = a) => {
      if (rows > 0) d.dispatch(this.pipeline(name, wgsl), p, ...grid(rows));
    };
    const per64 = (name: string, wgsl: string, count: number, p: Uint32Array) => {
      if (count > 0) d.dispatch(this.pipeline(name, wgsl), p, ...grid(Math.ceil(count / 64)));
    };
    switch (op) {
      case Op.Fill:
        return each("fill", FILL, a[1]!);
      case Op.Copy:
        if (a[0]! % 4 || a[1]! % 4) throw new Error(`qkv webgpu: copy between byte offsets ${a[1]} and ${a[0]}: expected multiples of 4`);
        return each("copy", COPY, Math.ceil(a[2]! / 4));
      case Op.CopyRows:
        return each("copy_rows", COPY_ROWS, a[4]! * a[5]!);
      case Op.Add:
        return each("add", ADD, a[3]!);
      case Op.DropoutForward:
      case Op.DropoutBackward:
        return each("dropout", DROPOUT, a[2]!, params(a, ...dropoutWords(bitsToF32(a[3]!))));
      case Op.Gemm: {
        const [M, N] = [a[2]!, a[3]!];
        if (M > 0 && N > 0) d.dispatch(this.pipeline("gemm", GEMM), a, Math.ceil(N / 64), Math.ceil(M / 64));
        return;
      }
      case Op.LayerNormForward:
        return perRow("layernorm", layernormForward(false), a[6]!);
      case Op.ResidualLayerNormForward:
        return perRow("residual_layernorm", layernormForward(true), a[8]!);
      case Op.LayerNormBackward: {
        const [rows, C] = [a[10]!, a[11]!];
        if (rows === 0) return;
        const blocks = Math.ceil(rows / 64);
        d.dispatch(this.pipeline("ln_partial", LN_BACKWARD_PARTIAL), a, Math.ceil(C / 256), blocks);
        d.dispatch(this.pipeline("ln_sum", LN_BACKWARD_SUM), a, Math.ceil(C / 256));
        return perRow("ln_dx", LN_BACKWARD_DX, rows);
      }
      case Op.BiasActForward:
        return each("bias_act", BIAS_ACT_FORWARD, a[5]! * a[6]!);
      case Op.BiasActBackward: {
        const [rows, N] = [a[8]!, a[9]!];
        if (a[3]! > 0 && rows > 0) {
          d.dispatch(this.pipeline("bias_partial", BIAS_BACKWARD_PARTIAL), a, Math.ceil(N / 256), Math.ceil(rows / 64));
          d.dispatch(this.pipeline("bias_sum", BIAS_BACKWARD_SUM), a, Math.ceil(N / 256));
        }
        if (a[1]! > 0) each("act_backward", ACT_BACKWARD, rows * N);
        return;
      }
      case Op.AttentionForward:
        return per64("attention_forward", ATTENTION_FORWARD, a[5]! * a[9]! * a[6]!, this.attentionParams(a, 5));
      case Op.AttentionWeights:
        return per64("attention_weights", ATTENTION_WEIGHTS, a[3]! * a[7]! * a[4]!, this.attentionParams(a, 3));
      case Op.AttentionBackward: {
        const p = this.attentionParams(a, 9);
        const [B, Tq, Tk, H] = [a[9]!, a[10]!, a[11]!, a[13]!];
        per64("attention_d", ATTENTION_BACKWARD_D, B * H * Tq, p);
        per64("attention_dq", ATTENTION_BACKWARD_DQ, B * H * Tq, p);
        per64("attention_dkv", ATTENTION_BACKWARD_DKV, B * H * Tk, p);
        return;
      }
      case Op.EmbeddingForward:
        return each("embedding_forward", EMBEDDING_FORWARD, a[6]! * a[7]! * a[8]!);
      case Op.EmbeddingBackward:
        if (a[7]! * a[8]! === 0) return;
        perRow("embedding_wte", EMBEDDING_BACKWARD_WTE, a[1]!);
        if (a[3]! > 0) each("embedding_pos", EMBEDDING_BACKWARD_POS, a[8]! * a[9]!);
        return;
      case Op.MeanPoolForward:
        return each("mean_pool_forward", MEAN_POOL_FORWARD, a[3]! * a[5]!);
      case Op.MeanPoolBackward:
        return each("mean_pool_backward", MEAN_POOL_BACKWARD, a[3]! * a[4]! * a[5]!);
      case Op.CrossEntropyForward:
        return perRow("crossentropy", crossEntropy(false), a[3]!);
      case Op.CrossEntropyForwardBackward:
        return perRow("crossentropy_backward", crossEntropy(true), a[5]!);
      case Op.ArgmaxRows:
        return perRow("argmax", ARGMAX, a[2]!);
      case Op.AdamStep:
        return each("adam", ADAM, a[4]!);
      case Op.SumSquares:
        return perRow("sum_squares", SUM_SQUARES, Math.ceil(a[1]! / 4096));
      default:
        throw new Error(`qkv webgpu: unknown op ${op}`);
    }
  }

  /** The attention kernels' extra words after the command's: scale, dropout threshold and factor. */
  private attentionParams(a: Uint32Array, s: number): Uint32Array {
    const [C, H] = [a[s + 3]!, a[s + 4]!];
    const hs = C / H;
    if (hs > HS_MAX) throw new Error(`qkv webgpu: attention head size ${hs} is above the kernels' ${HS_MAX}`);
    const scale = Math.fround(1 / Math.fround(Math.sqrt(hs)));
    return params(a, f32bits(scale), ...dropoutWords(bitsToF32(a[s + 10]!)));
  }

  private pipeline(name: string, wgsl: string): GPUComputePipeline {
    let p = this.pipelines.get(name);
    if (!p) {
      const module = this.device.createShaderModule({ label: name, code: PRELUDE + wgsl });
      p = this.device.createComputePipeline({ label: name, layout: this.layout, compute: { module, entryPoint: "main" } });
      this.pipelines.set(name, p);
    }
    return p;
  }
}
