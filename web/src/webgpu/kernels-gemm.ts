// The WGSL of the fp32 matrix product (gemm: C (M,N) = alpha op(A) op(B) + beta C) and the tile scheme it shares
// with gemm_quant's tiled kernel (kernels-quant.ts), which differs only in how the tile of B is filled (W's
// packed words dequantized on the way in) and in its write-back (no alpha, no beta). Both run after kernels.ts'
// prelude (the arena `mem`, the command's words `P`, ld/st/wd).
//
// The scheme: 64 x 64 tiles of C per workgroup, 16 x 16 invocations each owning a 4 x 4 block of registers
// (acc), K in steps of 16 through workgroup memory. Both tiles are stored k-major, As[k * 64 + m] and
// Bs[k * 64 + n], so that the inner loop reads 4 consecutive floats of a row of each: per k, the outer product
// of a (4 rows of A's tile) and b (4 columns of B's) is added to acc, 16 fma for 8 workgroup-memory reads.

/**
 * A tiled product kernel: `decls` (WGSL before main: helpers), `load` (the statements that fill As and Bs for the
 * step at k0, zero outside M, N and K; `tid` is the invocation's index in 0..255), and `store` (run for each
 * element of the block inside C, with `at` its word in the arena and `v` its accumulated sum of products).
 */
export function tiledGemm(decls: string, load: string, store: string): string {
  return /* wgsl */ `
var<workgroup> As: array<f32, 1024>;  // [16][64]: As[k * 64 + m]
var<workgroup> Bs: array<f32, 1024>;  // [16][64]: Bs[k * 64 + n]
${decls}
@compute @workgroup_size(16, 16) fn main(@builtin(workgroup_id) g: vec3<u32>, @builtin(local_invocation_id) t: vec3<u32>) {
  let M = P.M; let N = P.N; let K = P.K;
  let m0 = g.y * 64u; let n0 = g.x * 64u;
  let tid = t.y * 16u + t.x;
  var acc: array<f32, 16>;
  for (var k0 = 0u; k0 < K; k0 += 16u) {
    ${load}
    workgroupBarrier();
    for (var kk = 0u; kk < 16u; kk++) {
      var a: array<f32, 4>; var b: array<f32, 4>;
      for (var i = 0u; i < 4u; i++) { a[i] = As[kk * 64u + t.y * 4u + i]; b[i] = Bs[kk * 64u + t.x * 4u + i]; }
      for (var i = 0u; i < 4u; i++) { for (var j = 0u; j < 4u; j++) { acc[i * 4u + j] = fma(a[i], b[j], acc[i * 4u + j]); } }
    }
    workgroupBarrier();
  }
  for (var i = 0u; i < 4u; i++) {
    let m = m0 + t.y * 4u + i;
    if (m >= M) { break; }
    for (var j = 0u; j < 4u; j++) {
      let c = n0 + t.x * 4u + j;
      if (c >= N) { break; }
      let at = wd(P.C) + m * P.ldc + c;
      let v = acc[i * 4u + j];
      ${store}
    }
  }
}`;
}

/** gemm: op(A) and op(B) read through a_at / b_at (trans_a, trans_b), 4 loads of each tile per invocation. */
export const GEMM = tiledGemm(
  /* wgsl */ `
fn a_at(m: u32, k: u32) -> f32 {
  if (P.trans_a != 0u) { return ld(wd(P.A) + k * P.lda + m); }
  return ld(wd(P.A) + m * P.lda + k);
}
fn b_at(k: u32, j: u32) -> f32 {
  if (P.trans_b != 0u) { return ld(wd(P.B) + j * P.ldb + k); }
  return ld(wd(P.B) + k * P.ldb + j);
}`,
  /* wgsl */ `for (var e = tid; e < 1024u; e += 256u) {
      let kk = e / 64u; let mm = e % 64u;
      let k = k0 + kk;
      As[e] = select(0.0, a_at(m0 + mm, k), k < K && m0 + mm < M);
      Bs[e] = select(0.0, b_at(k, n0 + mm), k < K && n0 + mm < N);
    }`,
  /* wgsl */ `var r = P.alpha * v;
      if (P.beta != 0.0) { r = r + P.beta * ld(at); }
      st(at, r);`,
);
