/// <reference types="@webgpu/types" />
// The page of webgpu-kernels.test.ts, bundled by esbuild: every WGSL kernel of web/src/webgpu/kernels.ts on
// random inputs over ragged shapes, against plain JS ports of cpp/src/exec/reference/reference_backend.cpp's loops (in
// double; dropout masks and argmax exactly). A minimal Dispatcher and arena stand in for the GPU worker
// (webgpu-kernels.harness.ts); the quantized-weight suites are in webgpu-kernels.quant.ts.
//
// Error measure per output: max over elements of |gpu - ref| / max(|ref|, 0.01 * max|ref|): relative, with a
// floor at 1% of the output's scale so that entries which cancel to ~0 (a dot product of random signs) are
// judged against the size of the numbers that produced them rather than against their own rounding residue.
import { scratchSizes } from "../../web/src/webgpu/kernels.js";
import { Op, SUM_SQUARES_BLOCK } from "../../web/src/webgpu/protocol.js";
import { write } from "../../web/src/webgpu/ops.generated.js";
import {
  rand,
  randn,
  randint,
  relErr,
  sumErr,
  dropoutHash,
  threshold,
  dropped,
  actOf,
  actMag,
  actGradMag,
  actGrad,
  withFarValues,
} from "./webgpu-kernels.ref.js";
import { B, Layout, f32At, fbits, i32At, record, refused, results, run, setup, type CaseResult } from "./webgpu-kernels.harness.js";
import { QUANT_SUITES } from "./webgpu-kernels.quant.js";

async function fill(): Promise<void> {
  // the last: more than 65535 workgroups of 256, so the grid folds into y (every kernel's lin())
  for (const n of [1, 17, 257, 67 * 257, 65535 * 256 + 300]) {
    const L = new Layout();
    const x = L.f32(n > 1e6 ? new Float32Array(n) : randn(n));
    const mem = await run(Op.Fill, write.Fill({ x: B(x), x_n: n, value: 0.375 }), L.host());
    record("Fill", `n=${n}`, [relErr(f32At(mem, x), new Float32Array(n).fill(0.375))], 0);
  }
}

async function copyRows(): Promise<void> {
  for (const [rows, cols] of [[1, 1], [3, 17], [67, 64], [257, 3]] as const) {
    const ldS = cols + 3, ldD = cols + 1;
    const src = randn(rows * ldS), dst0 = randn(rows * ldD);
    const L = new Layout();
    const s = L.f32(src), d = L.f32(dst0);
    const mem = await run(Op.CopyRows, write.CopyRows({ dst: B(d), ld_dst: ldD, src: B(s), ld_src: ldS, rows, cols }), L.host());
    const ref = dst0.slice();
    for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) ref[r * ldD + c] = src[r * ldS + c]!;
    record("CopyRows", `${rows}x${cols}`, [relErr(f32At(mem, d), ref)], 0);
  }
}

async function add(): Promise<void> {
  for (const n of [1, 3, 257, 67 * 64]) {
    for (const alias of [false, true]) {
      const a = randn(n), b = randn(n);
      const L = new Layout();
      const ra = L.f32(a), rb = L.f32(b), ro = alias ? ra : L.f32(new Float32Array(n));
      const mem = await run(Op.Add, write.Add({ out: B(ro), out_n: n, a: B(ra), a_n: n, b: B(rb), b_n: n }), L.host());
      const ref = a.map((v, i) => Math.fround(v + b[i]!));
      record("Add", `n=${n}${alias ? " out=a" : ""}`, [relErr(f32At(mem, ro), ref)], 0);
    }
  }
}

async function gemm(): Promise<void> {
  const shapes: [number, number, number][] = [[1, 1, 1], [3, 17, 64], [67, 3, 257], [64, 64, 64], [17, 67, 3], [67, 257, 17], [130, 131, 300]];
  for (const [M, N, K] of shapes)
    for (const ta of [0, 1])
      for (const tb of [0, 1])
        for (const beta of [0, 0.5]) {
          const lda = (ta ? M : K) + 2, ldb = (tb ? K : N) + 1, ldc = N + 3;
          const A = randn((ta ? K : M) * lda), Bm = randn((tb ? N : K) * ldb), C0 = randn(M * ldc);
          if (beta === 0) C0.fill(NaN); // beta == 0 must not read C
          const alpha = 0.75;
          const L = new Layout();
          const ra = L.f32(A), rb = L.f32(Bm), rc = L.f32(C0);
          const mem = await run(Op.Gemm, write.Gemm({ trans_a: ta, trans_b: tb, M, N, K, alpha, A: B(ra), lda, B: B(rb), ldb, beta, C: B(rc), ldc }), L.host());
          const ref = Float64Array.from(C0);
          for (let i = 0; i < M; i++)
            for (let j = 0; j < N; j++) {
              // gemm_reference accumulates in float: so does its port (the GPU's order is the same, k ascending)
              let acc = 0;
              for (let k = 0; k < K; k++) acc = Math.fround(acc + Math.fround((ta ? A[k * lda + i]! : A[i * lda + k]!) * (tb ? Bm[j * ldb + k]! : Bm[k * ldb + j]!)));
              ref[i * ldc + j] = Math.fround(Math.fround(alpha * acc) + (beta === 0 ? 0 : Math.fround(beta * C0[i * ldc + j]!)));
            }
          record("Gemm", `${ta ? "T" : "N"}${tb ? "T" : "N"} ${M}x${N}x${K} beta=${beta}`, [relErr(f32At(mem, rc), ref)]);
        }
}

function lnRef(x: Float32Array, w: Float32Array, b: Float32Array, rows: number, C: number) {
  const y = new Float64Array(rows * C), mean = new Float64Array(rows), rstd = new Float64Array(rows);
  for (let r = 0; r < rows; r++) {
    let mu = 0, v = 0;
    for (let i = 0; i < C; i++) mu += x[r * C + i]!;
    mu /= C;
    for (let i = 0; i < C; i++) v += (x[r * C + i]! - mu) ** 2;
    v /= C;
    const rs = 1 / Math.sqrt(v + Math.fround(1e-5));
    mean[r] = mu;
    rstd[r] = rs;
    for (let i = 0; i < C; i++) y[r * C + i] = (x[r * C + i]! - mu) * rs * w[i]! + b[i]!;
  }
  return { y, mean, rstd };
}

async function layernorm(): Promise<void> {
  for (const [rows, C] of [[1, 1], [3, 17], [17, 64], [64, 67], [5, 257], [67, 3]] as const) {
    const x = randn(rows * C, 2), f = randn(rows * C), w = randn(C), b = randn(C);
    for (let i = 0; i < x.length; i++) x[i] = x[i]! + 3; // an offset: the variance must not lose it
    {
      const L = new Layout();
      const rx = L.f32(x), rw = L.f32(w), rb = L.f32(b), ry = L.f32(new Float32Array(rows * C)), rm = L.f32(new Float32Array(rows)), rr = L.f32(new Float32Array(rows));
      const mem = await run(
        Op.LayerNormForward,
        write.LayerNormForward({ y: B(ry), y_n: rows * C, mean: B(rm), mean_n: rows, rstd: B(rr), rstd_n: rows, x: B(rx), x_n: rows * C, w: B(rw), w_n: C, b: B(rb), b_n: C, rows, C }),
        L.host(),
      );
      const ref = lnRef(x, w, b, rows, C);
      record("LayerNormForward", `${rows}x${C}`, [relErr(f32At(mem, ry), ref.y), relErr(f32At(mem, rm), ref.mean), relErr(f32At(mem, rr), ref.rstd)]);
    }
    for (const alias of ["none", "x", "f"]) {
      const L = new Layout();
      const rx = L.f32(x), rf = L.f32(f), rw = L.f32(w), rb = L.f32(b), ry = L.f32(new Float32Array(rows * C));
      const rm = L.f32(new Float32Array(rows)), rs = L.f32(new Float32Array(rows));
      const rr = alias === "x" ? rx : alias === "f" ? rf : L.f32(new Float32Array(rows * C));
      const mem = await run(
        Op.ResidualLayerNormForward,
        write.ResidualLayerNormForward({ r: B(rr), r_n: rows * C, y: B(ry), y_n: rows * C, mean: B(rm), mean_n: rows, rstd: B(rs), rstd_n: rows, x: B(rx), x_n: rows * C, f: B(rf), f_n: rows * C, w: B(rw), w_n: C, b: B(rb), b_n: C, rows, C }),
        L.host(),
      );
      const r = x.map((v, i) => Math.fround(v + f[i]!));
      const ref = lnRef(r, w, b, rows, C);
      record("ResidualLayerNormForward", `${rows}x${C} r=${alias}`, [
        relErr(f32At(mem, rr), r), relErr(f32At(mem, ry), ref.y), relErr(f32At(mem, rm), ref.mean), relErr(f32At(mem, rs), ref.rstd),
      ]);
    }
  }
}

async function layernormBackward(): Promise<void> {
  for (const [rows, C] of [[1, 1], [3, 17], [17, 64], [67, 67], [257, 3], [130, 257]] as const) {
    for (const dr of ["none", "separate", "dx"]) {
      const x = randn(rows * C, 2), w = randn(C), dy = randn(rows * C), dw0 = randn(C), db0 = randn(C), drv = randn(rows * C);
      const st = lnRef(x, w, new Float32Array(C), rows, C);
      const mean = Float32Array.from(st.mean), rstd = Float32Array.from(st.rstd);
      const L = new Layout();
      const rx = L.f32(x), rw = L.f32(w), rdy = L.f32(dy), rdw = L.f32(dw0), rdb = L.f32(db0), rm = L.f32(mean), rs = L.f32(rstd);
      const rdx = L.f32(dr === "dx" ? drv : new Float32Array(rows * C));
      const rdr = dr === "separate" ? L.f32(drv) : rdx;
      const n = scratchSizes.layernormBackward(rows, C);
      const scr = L.f32(new Float32Array(n));
      const mem = await run(
        Op.LayerNormBackward,
        write.LayerNormBackward({
          dx: B(rdx), dx_n: rows * C, dw: B(rdw), dw_n: C, db: B(rdb), db_n: C, dr: B(rdr), dr_n: dr === "none" ? 0 : rows * C, dy: B(rdy), dy_n: rows * C,
          x: B(rx), x_n: rows * C, w: B(rw), w_n: C, mean: B(rm), mean_n: rows, rstd: B(rs), rstd_n: rows, rows, C, scratch: B(scr), scratch_n: n,
        }),
        L.host(),
      );
      // dx cancels (g - mean(g) - xhat mean(g xhat)), strongly for small C: measured against its terms (sumErr),
      // |dr| + rstd (|g| + mean|g| + |xhat| mean|g xhat|)
      const dx = new Float64Array(rows * C), mdx = new Float64Array(rows * C), dw = Float64Array.from(dw0), db = Float64Array.from(db0);
      for (let r = 0; r < rows; r++) {
        let mg = 0, mgx = 0, ag = 0, agx = 0;
        for (let i = 0; i < C; i++) {
          const xh = (x[r * C + i]! - mean[r]!) * rstd[r]!, g = dy[r * C + i]! * w[i]!;
          mg += g;
          mgx += g * xh;
          ag += Math.abs(g);
          agx += Math.abs(g * xh);
        }
        mg /= C;
        mgx /= C;
        ag /= C;
        agx /= C;
        for (let i = 0; i < C; i++) {
          const xh = (x[r * C + i]! - mean[r]!) * rstd[r]!, g = dy[r * C + i]! * w[i]!;
          dx[r * C + i] = (dr === "none" ? 0 : drv[r * C + i]!) + rstd[r]! * (g - mg - xh * mgx);
          mdx[r * C + i] = (dr === "none" ? 0 : Math.abs(drv[r * C + i]!)) + rstd[r]! * (Math.abs(g) + ag + Math.abs(xh) * agx);
          dw[i] = dw[i]! + dy[r * C + i]! * xh;
          db[i] = db[i]! + dy[r * C + i]!;
        }
      }
      record("LayerNormBackward", `${rows}x${C} dr=${dr}`, [sumErr(f32At(mem, rdx), dx, mdx), relErr(f32At(mem, rdw), dw), relErr(f32At(mem, rdb), db)]);
    }
  }
}

async function biasAct(): Promise<void> {
  for (const [rows, N] of [[1, 1], [3, 17], [67, 64], [257, 67], [17, 257]] as const)
    for (const act of [0, 1, 2, 3])
      for (const hasB of [true, false]) {
        const h0 = withFarValues(randn(rows * N, 4.5), act), b = randn(N); // |h| up to 5.5: every branch of erf
        const L = new Layout();
        const rh = L.f32(h0), rb = L.f32(b), ra = act === 0 && hasB ? rh : L.f32(new Float32Array(rows * N));
        const mem = await run(Op.BiasActForward, write.BiasActForward({ a: B(ra), a_n: rows * N, h: B(rh), h_n: rows * N, b: B(rb), b_n: hasB ? N : 0, act, rows, N }), L.host());
        const h = h0.map((v, i) => (hasB ? Math.fround(v + b[i % N]!) : v));
        const a = Float64Array.from(h, (v) => actOf(act, v)), am = Float64Array.from(h, (v) => actMag(act, v));
        record("BiasActForward", `${rows}x${N} act=${act} bias=${hasB}${ra === rh ? " a=h" : ""}`, [relErr(f32At(mem, rh), h), sumErr(f32At(mem, ra), a, am)]);
      }
  for (const [rows, N] of [[1, 1], [3, 17], [67, 64], [257, 67], [130, 257]] as const)
    for (const act of [0, 1, 2, 3])
      for (const mode of ["dh+db", "dh=da+db", "db only", "dh only", "no h"]) {
        const h = withFarValues(randn(rows * N, 4.5), act), da = randn(rows * N), db0 = randn(N);
        const hasDh = mode !== "db only" && mode !== "no h", hasDb = mode !== "dh only", hasH = mode !== "no h";
        const L = new Layout();
        const rh = L.f32(h), rda = L.f32(da), rdb = L.f32(db0);
        const rdh = mode === "dh=da+db" ? rda : L.f32(new Float32Array(rows * N));
        const n = scratchSizes.biasActBackward(rows, N);
        const scr = L.f32(new Float32Array(n));
        const mem = await run(
          Op.BiasActBackward,
          write.BiasActBackward({
            dh: B(rdh), dh_n: hasDh ? rows * N : 0, db: B(rdb), db_n: hasDb ? N : 0, da: B(rda), da_n: rows * N, h: B(rh), h_n: hasH ? rows * N : 0,
            act, rows, N, scratch: B(scr), scratch_n: n,
          }),
          L.host(),
        );
        const g = Float64Array.from(da, (v, i) => (hasH ? v * actGrad(act, h[i]!) : v));
        const gm = Float64Array.from(da, (v, i) => Math.abs(hasH ? v * actGradMag(act, h[i]!) : v));
        const db = Float64Array.from(db0);
        for (let i = 0; i < rows * N; i++) db[i % N] = db[i % N]! + g[i]!;
        const errs = [];
        if (hasDh) errs.push(sumErr(f32At(mem, rdh), g, gm));
        errs.push(relErr(f32At(mem, rdb), hasDb ? db : db0));
        record("BiasActBackward", `${rows}x${N} act=${act} ${mode}`, errs);
      }
}

async function dropout(): Promise<void> {
  const seed = 0x9abcdef012345678n;
  for (const n of [1, 17, 67 * 257])
    for (const p of [0, 0.1, 0.5])
      for (const op of [Op.DropoutForward, Op.DropoutBackward])
        for (const alias of [false, true]) {
          const x = randn(n);
          const L = new Layout();
          const rx = L.f32(x), ry = alias ? rx : L.f32(new Float32Array(n));
          const seedWords = { seed_lo: Number(seed & 0xffffffffn), seed_hi: Number(seed >> 32n) };
          const words =
            op === Op.DropoutForward
              ? write.DropoutForward({ y: B(ry), y_n: n, x: B(rx), x_n: n, p, ...seedWords })
              : write.DropoutBackward({ dx: B(ry), dx_n: n, dy: B(rx), dy_n: n, p, ...seedWords });
          const mem = await run(op, words, L.host());
          const ref = x.map((v, i) => dropped(v, p, seed, i));
          // exact: the same mask and the same float multiply
          record(op === Op.DropoutForward ? "DropoutForward" : "DropoutBackward", `n=${n} p=${p}${alias ? " y=x" : ""}`, [relErr(f32At(mem, ry), ref)], 0);
        }
}

interface AttShape {
  B: number; Tq: number; Tk: number; C: number; H: number; ldq: number; ldkv: number;
  causal: boolean; pad: Uint8Array | null; p: number; seed: bigint; qPos: number; kRows: number;
}
// P row (b, h, t): the masked softmax, scores in double as the reference; returns lse (Infinity when all masked).
function softmaxRow(q: Float32Array, k: Float32Array, s: AttShape, b: number, h: number, t: number): { P: Float64Array; lse: number } {
  const hs = s.C / s.H, scale = Math.fround(1 / Math.sqrt(hs)), kr = s.kRows || s.Tk;
  const P = new Float64Array(s.Tk), vis = new Array<boolean>(s.Tk);
  let mx = -Infinity;
  for (let j = 0; j < s.Tk; j++) {
    vis[j] = !(s.causal && j > t + s.qPos) && !(s.pad && s.pad[b * kr + j]);
    if (!vis[j]) continue;
    let d = 0;
    for (let i = 0; i < hs; i++) d += q[(b * s.Tq + t) * s.ldq + h * hs + i]! * k[(b * kr + j) * s.ldkv + h * hs + i]!;
    P[j] = d * scale;
    mx = Math.max(mx, P[j]!);
  }
  if (mx === -Infinity) return { P: new Float64Array(s.Tk), lse: Infinity };
  let sum = 0;
  for (let j = 0; j < s.Tk; j++) if (vis[j]) sum += Math.exp(P[j]! - mx);
  for (let j = 0; j < s.Tk; j++) P[j] = vis[j] ? Math.exp(P[j]! - mx) / sum : 0;
  return { P, lse: mx + Math.log(sum) };
}
function dropD(x: number, s: AttShape, b: number, h: number, t: number, j: number): number {
  if (s.p <= 0) return x;
  const idx = ((b * s.H + h) * s.Tq + t) * s.Tk + j;
  return dropoutHash(s.seed, BigInt(idx)) >= threshold(s.p) ? x * Math.fround(1 / Math.fround(1 - s.p)) : 0;
}

async function attention(): Promise<void> {
  const shapes: Partial<AttShape>[] = [
    { B: 1, Tq: 1, Tk: 1, C: 4, H: 1 },
    { B: 2, Tq: 3, Tk: 17, C: 16, H: 2 },
    { B: 2, Tq: 17, Tk: 17, C: 12, H: 3, causal: true },
    { B: 1, Tq: 67, Tk: 67, C: 64, H: 4, causal: true, pad: new Uint8Array(0), p: 0.1 },
    { B: 2, Tq: 64, Tk: 64, C: 32, H: 2, pad: new Uint8Array(0) },
    { B: 1, Tq: 3, Tk: 67, C: 32, H: 2, causal: true, qPos: 64, kRows: 70 }, // a KV cache: queries are the newest
    { B: 1, Tq: 5, Tk: 257, C: 8, H: 1, p: 0.5 },
    { B: 1, Tq: 17, Tk: 67, C: 256, H: 1, causal: true, qPos: 50 }, // hs = 256: the largest head the kernels take
  ];
  for (const part of shapes) {
    const s: AttShape = {
      B: part.B!, Tq: part.Tq!, Tk: part.Tk!, C: part.C!, H: part.H!,
      ldq: 3 * part.C!, ldkv: 3 * part.C!, // q, k, v read out of one packed (rows, 3C) buffer, as the layers do
      causal: part.causal ?? false, pad: null, p: part.p ?? 0, seed: 0x1234567890abcdefn, qPos: part.qPos ?? 0, kRows: part.kRows ?? 0,
    };
    const kr = s.kRows || s.Tk;
    if (part.pad) {
      s.pad = new Uint8Array(s.B * kr);
      for (let b = 0; b < s.B; b++) for (let j = 0; j < kr; j++) s.pad[b * kr + j] = j >= kr - 1 - 3 * b || (b === 0 && j === 2) ? 1 : 0;
      if (!s.causal) for (let j = 0; j < kr; j++) s.pad[(s.B - 1) * kr + j] = 1; // one batch row fully masked
    }
    const q = randn(s.B * s.Tq * s.ldq, 2), k = randn(s.B * kr * s.ldkv, 2), v = randn(s.B * kr * s.ldkv);
    const dout = randn(s.B * s.Tq * s.C);
    const hs = s.C / s.H, rowsQ = s.B * s.H * s.Tq;
    const name = `B${s.B} Tq${s.Tq} Tk${s.Tk} C${s.C} H${s.H}${s.causal ? " causal" : ""}${s.pad ? " pad" : ""}${s.p ? ` p=${s.p}` : ""}${s.qPos ? ` q_pos=${s.qPos} k_rows=${s.kRows}` : ""}`;
    // reference forward
    const out = new Float64Array(s.B * s.Tq * s.C), outMag = new Float64Array(s.B * s.Tq * s.C), lse = new Float64Array(rowsQ), att = new Float64Array(rowsQ * s.Tk);
    const Ps: Float64Array[] = [];
    for (let b = 0; b < s.B; b++)
      for (let h = 0; h < s.H; h++)
        for (let t = 0; t < s.Tq; t++) {
          const { P, lse: l } = softmaxRow(q, k, s, b, h, t);
          const row = (b * s.H + h) * s.Tq + t;
          Ps[row] = P;
          lse[row] = l;
          att.set(P, row * s.Tk);
          for (let j = 0; j < s.Tk; j++) {
            const pd = dropD(P[j]!, s, b, h, t, j);
            for (let i = 0; i < hs; i++) {
              out[(b * s.Tq + t) * s.C + h * hs + i] = out[(b * s.Tq + t) * s.C + h * hs + i]! + pd * v[(b * kr + j) * s.ldkv + h * hs + i]!;
              outMag[(b * s.Tq + t) * s.C + h * hs + i] = outMag[(b * s.Tq + t) * s.C + h * hs + i]! + Math.abs(pd * v[(b * kr + j) * s.ldkv + h * hs + i]!);
            }
          }
        }
    const shapeWords = (L: Layout) => ({
      B: s.B, Tq: s.Tq, Tk: s.Tk, C: s.C, H: s.H, ldq: s.ldq, ldkv: s.ldkv, key_pad: s.pad ? L.u8(s.pad) : 0, has_key_pad: s.pad ? 1 : 0,
      causal: s.causal ? 1 : 0, dropout: s.p, seed_lo: Number(s.seed & 0xffffffffn), seed_hi: Number(s.seed >> 32n), q_pos: s.qPos,
      k_rows: kr, // resolved, as the protocol sends it
    });
    {
      const L = new Layout();
      const rq = L.f32(q), rk = L.f32(k), rv = L.f32(v), ro = L.f32(new Float32Array(s.B * s.Tq * s.C)), rl = L.f32(new Float32Array(rowsQ));
      const sw = shapeWords(L);
      const n = scratchSizes.attention(s);
      const scr = L.f32(new Float32Array(n));
      const mem = await run(
        Op.AttentionForward,
        write.AttentionForward({ out: B(ro), out_n: s.B * s.Tq * s.C, lse: B(rl), lse_n: rowsQ, q: B(rq), k: B(rk), v: B(rv), ...sw, scratch: B(scr), scratch_n: n }),
        L.host(),
      );
      // out = sum_j dropout(P_j) v_j cancels for random v: its error is measured against sum_j |dropout(P_j) v_j|
      record("AttentionForward", name, [sumErr(f32At(mem, ro), out, outMag), relErr(f32At(mem, rl), lse)]);
    }
    {
      const L = new Layout();
      const rq = L.f32(q), rk = L.f32(k), ra = L.f32(new Float32Array(rowsQ * s.Tk));
      const sw = shapeWords(L);
      const mem = await run(Op.AttentionWeights, write.AttentionWeights({ att: B(ra), att_n: rowsQ * s.Tk, q: B(rq), k: B(rk), ...sw }), L.host());
      record("AttentionWeights", name, [relErr(f32At(mem, ra), att)]);
    }
    {
      // reference backward (reference_backend.cpp's loops, in double)
      const scale = Math.fround(1 / Math.sqrt(hs));
      const dq = Float64Array.from(q), dk = Float64Array.from(k), dv = Float64Array.from(v); // untouched columns keep their values
      // the magnitudes of the sums' terms (sumErr): with dPabs_j = |dropout'(sum_i |dout_i v_ji|)| and
      // dSabs_j = P_j (dPabs_j + sum_j' P_j' dPabs_j'), the bound on |dS_j| that its rounding scales with
      const mq = new Float64Array(dq.length), mk = new Float64Array(dk.length), mv = new Float64Array(dv.length);
      for (let b = 0; b < s.B; b++)
        for (let h = 0; h < s.H; h++) {
          for (let t = 0; t < s.Tq; t++) for (let i = 0; i < hs; i++) dq[(b * s.Tq + t) * s.ldq + h * hs + i] = 0;
          for (let j = 0; j < s.Tk; j++)
            for (let i = 0; i < hs; i++) {
              dk[(b * kr + j) * s.ldkv + h * hs + i] = 0;
              dv[(b * kr + j) * s.ldkv + h * hs + i] = 0;
            }
          for (let t = 0; t < s.Tq; t++) {
            const P = Ps[(b * s.H + h) * s.Tq + t]!;
            const dP = new Float64Array(s.Tk), dPabs = new Float64Array(s.Tk);
            let D = 0, Dabs = 0;
            for (let j = 0; j < s.Tk; j++) {
              let dpd = 0, dpa = 0;
              for (let i = 0; i < hs; i++) {
                dpd += dout[(b * s.Tq + t) * s.C + h * hs + i]! * v[(b * kr + j) * s.ldkv + h * hs + i]!;
                dpa += Math.abs(dout[(b * s.Tq + t) * s.C + h * hs + i]! * v[(b * kr + j) * s.ldkv + h * hs + i]!);
              }
              const pd = dropD(P[j]!, s, b, h, t, j);
              for (let i = 0; i < hs; i++) {
                const o = (b * kr + j) * s.ldkv + h * hs + i;
                dv[o] = dv[o]! + pd * dout[(b * s.Tq + t) * s.C + h * hs + i]!;
                mv[o] = mv[o]! + Math.abs(pd * dout[(b * s.Tq + t) * s.C + h * hs + i]!);
              }
              dP[j] = dropD(dpd, s, b, h, t, j);
              dPabs[j] = Math.abs(dropD(dpa, s, b, h, t, j));
              D += P[j]! * dP[j]!;
              Dabs += P[j]! * dPabs[j]!;
            }
            for (let j = 0; j < s.Tk; j++) {
              const dS = P[j]! * (dP[j]! - D), dSabs = P[j]! * (dPabs[j]! + Dabs);
              for (let i = 0; i < hs; i++) {
                const oq = (b * s.Tq + t) * s.ldq + h * hs + i, ok = (b * kr + j) * s.ldkv + h * hs + i;
                mq[oq] = mq[oq]! + dSabs * Math.abs(k[ok]!) * scale;
                mk[ok] = mk[ok]! + dSabs * Math.abs(q[oq]!) * scale;
                dq[(b * s.Tq + t) * s.ldq + h * hs + i] = dq[(b * s.Tq + t) * s.ldq + h * hs + i]! + dS * k[(b * kr + j) * s.ldkv + h * hs + i]! * scale;
                dk[(b * kr + j) * s.ldkv + h * hs + i] = dk[(b * kr + j) * s.ldkv + h * hs + i]! + dS * q[(b * s.Tq + t) * s.ldq + h * hs + i]! * scale;
              }
            }
          }
        }
      const L = new Layout();
      const rq = L.f32(q), rk = L.f32(k), rv = L.f32(v), rdo = L.f32(dout), ro = L.f32(Float32Array.from(out)), rl = L.f32(Float32Array.from(lse));
      const rdq = L.f32(q), rdk = L.f32(k), rdv = L.f32(v); // prefilled: the other columns must be left alone
      const sw = shapeWords(L);
      const n = scratchSizes.attention(s);
      const scr = L.f32(new Float32Array(n));
      const mem = await run(
        Op.AttentionBackward,
        write.AttentionBackward({
          dq: B(rdq), dk: B(rdk), dv: B(rdv), dout: B(rdo), dout_n: s.B * s.Tq * s.C, q: B(rq), k: B(rk), v: B(rv), out: B(ro), out_n: s.B * s.Tq * s.C,
          lse: B(rl), lse_n: rowsQ, ...sw, scratch: B(scr), scratch_n: n,
        }),
        L.host(),
      );
      // dq, dk, dv are sums over keys / queries that cancel: measured against their terms' magnitudes (sumErr)
      record("AttentionBackward", name, [sumErr(f32At(mem, rdq), dq, mq), sumErr(f32At(mem, rdk), dk, mk), sumErr(f32At(mem, rdv), dv, mv)]);
    }
  }
}

async function embedding(): Promise<void> {
  for (const [V, Bn, T, C, withPos] of [[17, 2, 3, 17, true], [67, 3, 17, 64, true], [3, 1, 67, 3, false], [257, 2, 64, 67, true]] as const) {
    const rows = Bn * T;
    const ids = randint(rows, V), wte = randn(V * C), pos = randn((T + 2) * C), scale = 1.5;
    {
      const L = new Layout();
      const rx = L.f32(new Float32Array(rows * C)), ri = L.i32(ids), rw = L.f32(wte), rp = L.f32(pos);
      const mem = await run(
        Op.EmbeddingForward,
        write.EmbeddingForward({ x: B(rx), x_n: rows * C, tokens: B(ri), tokens_n: rows, wte: B(rw), wte_n: V * C, pos: B(rp), pos_n: withPos ? pos.length : 0, scale, B: Bn, T, C }),
        L.host(),
      );
      const ref = new Float64Array(rows * C);
      for (let r = 0; r < rows; r++) for (let i = 0; i < C; i++) ref[r * C + i] = scale * wte[ids[r]! * C + i]! + (withPos ? pos[(r % T) * C + i]! : 0);
      record("EmbeddingForward", `V${V} B${Bn} T${T} C${C}${withPos ? "" : " no pos"}`, [relErr(f32At(mem, rx), ref)]);
    }
    {
      const dx = randn(rows * C), dwte0 = randn(V * C), dpos0 = randn((T + 2) * C);
      const L = new Layout();
      const rdw = L.f32(dwte0), rdp = L.f32(dpos0), rdx = L.f32(dx), ri = L.i32(ids);
      const n = scratchSizes.embeddingBackward(V, rows);
      const scr = L.f32(new Float32Array(n + 1));
      const mem = await run(
        Op.EmbeddingBackward,
        write.EmbeddingBackward({
          dwte: B(rdw), dwte_n: V * C, dpos: B(rdp), dpos_n: withPos ? dpos0.length : 0, dx: B(rdx), dx_n: rows * C, tokens: B(ri), tokens_n: rows,
          scale, B: Bn, T, C, scratch: B(scr), scratch_n: n,
        }),
        L.host(),
      );
      const dw = Float64Array.from(dwte0), dp = Float64Array.from(dpos0);
      for (let r = 0; r < rows; r++)
        for (let i = 0; i < C; i++) {
          dw[ids[r]! * C + i] = dw[ids[r]! * C + i]! + scale * dx[r * C + i]!;
          if (withPos) dp[(r % T) * C + i] = dp[(r % T) * C + i]! + dx[r * C + i]!;
        }
      record("EmbeddingBackward", `V${V} B${Bn} T${T} C${C}${withPos ? "" : " no pos"}`, [relErr(f32At(mem, rdw), dw), relErr(f32At(mem, rdp), dp)]);
    }
  }
}

async function meanPool(): Promise<void> {
  for (const [Bn, T, C] of [[1, 1, 1], [3, 17, 64], [2, 67, 3], [4, 3, 257]] as const) {
    const pad = new Uint8Array(Bn * T);
    for (let i = 0; i < pad.length; i++) pad[i] = rand() < 0.3 ? 1 : 0;
    if (Bn > 1) for (let t = 0; t < T; t++) pad[(Bn - 1) * T + t] = 1; // a row of only padding
    const count = (b: number): number => Array.from(pad.subarray(b * T, (b + 1) * T)).filter((v) => v === 0).length;
    const x = randn(Bn * T * C), dout = randn(Bn * C);
    {
      const L = new Layout();
      const ro = L.f32(new Float32Array(Bn * C)), rx = L.f32(x), kp = L.u8(pad);
      const mem = await run(Op.MeanPoolForward, write.MeanPoolForward({ out: B(ro), out_n: Bn * C, x: B(rx), x_n: Bn * T * C, key_pad: kp, B: Bn, T, C }), L.host());
      const ref = new Float64Array(Bn * C);
      for (let b = 0; b < Bn; b++)
        for (let i = 0; i < C; i++) {
          let s = 0;
          for (let t = 0; t < T; t++) if (!pad[b * T + t]) s += x[(b * T + t) * C + i]!;
          ref[b * C + i] = count(b) ? s / count(b) : 0;
        }
      record("MeanPoolForward", `B${Bn} T${T} C${C}`, [relErr(f32At(mem, ro), ref)]);
    }
    {
      const L = new Layout();
      const rdx = L.f32(randn(Bn * T * C)), rdo = L.f32(dout), kp = L.u8(pad);
      const mem = await run(Op.MeanPoolBackward, write.MeanPoolBackward({ dx: B(rdx), dx_n: Bn * T * C, dout: B(rdo), dout_n: Bn * C, key_pad: kp, B: Bn, T, C }), L.host());
      const ref = new Float64Array(Bn * T * C);
      for (let b = 0; b < Bn; b++)
        for (let t = 0; t < T; t++)
          for (let i = 0; i < C; i++) ref[(b * T + t) * C + i] = pad[b * T + t] || !count(b) ? 0 : dout[b * C + i]! * Math.fround(1 / count(b));
      record("MeanPoolBackward", `B${Bn} T${T} C${C}`, [relErr(f32At(mem, rdx), ref)]);
    }
  }
}

async function crossEntropy(): Promise<void> {
  for (const [rows, V] of [[1, 1], [3, 17], [17, 257], [67, 64], [5, 1031]] as const)
    for (const smoothing of [0, 0.1])
      for (const alias of [false, true]) {
        const z = randn(rows * V, 4), targets = randint(rows, V);
        const ignore = -100;
        if (rows > 1) targets[1] = ignore;
        const scale = 1 / rows;
        const losses = new Float64Array(rows), d = new Float64Array(rows * V);
        for (let r = 0; r < rows; r++) {
          if (targets[r] === ignore) continue;
          let mx = -Infinity;
          for (let i = 0; i < V; i++) mx = Math.max(mx, z[r * V + i]!);
          let sum = 0, all = 0;
          for (let i = 0; i < V; i++) sum += Math.exp(z[r * V + i]! - mx);
          const lse = mx + Math.log(sum);
          for (let i = 0; i < V; i++) all += lse - z[r * V + i]!;
          losses[r] = (1 - smoothing) * (lse - z[r * V + targets[r]!]!) + (smoothing / V) * all;
          for (let i = 0; i < V; i++)
            d[r * V + i] = scale * (Math.exp(z[r * V + i]! - lse) - (i === targets[r] ? 1 - smoothing : 0) - smoothing / V);
        }
        const sm = Math.fround(smoothing);
        if (!alias) {
          const L = new Layout();
          const rl = L.f32(new Float32Array(rows)), rz = L.f32(z), rt = L.i32(targets);
          const mem = await run(
            Op.CrossEntropyForward,
            write.CrossEntropyForward({ losses: B(rl), losses_n: rows, logits: B(rz), logits_n: rows * V, targets: B(rt), targets_n: rows, rows, V, ignore_index: ignore, smoothing: sm }),
            L.host(),
          );
          record("CrossEntropyForward", `${rows}x${V} e=${smoothing}`, [relErr(f32At(mem, rl), losses)]);
        }
        const L = new Layout();
        const rl = L.f32(new Float32Array(rows)), rz = L.f32(z), rt = L.i32(targets), rd = alias ? rz : L.f32(new Float32Array(rows * V));
        const mem = await run(
          Op.CrossEntropyForwardBackward,
          write.CrossEntropyForwardBackward({
            losses: B(rl), losses_n: rows, dlogits: B(rd), dlogits_n: rows * V, logits: B(rz), logits_n: rows * V, targets: B(rt), targets_n: rows,
            scale, rows, V, ignore_index: ignore, smoothing: sm,
          }),
          L.host(),
        );
        record("CrossEntropyForwardBackward", `${rows}x${V} e=${smoothing}${alias ? " d=z" : ""}`, [relErr(f32At(mem, rl), losses), relErr(f32At(mem, rd), d, 0.01 * scale)]);
      }
}

async function argmax(): Promise<void> {
  for (const [rows, V] of [[1, 1], [3, 17], [67, 257], [17, 1031]] as const) {
    const z = Float32Array.from(randint(rows * V, 7)); // small integers: ties, where the first index must win
    const L = new Layout();
    const rb = L.i32(new Int32Array(rows)), rz = L.f32(z);
    const mem = await run(Op.ArgmaxRows, write.ArgmaxRows({ best: B(rb), best_n: rows, logits: B(rz), logits_n: rows * V, rows, V }), L.host());
    const ref = new Int32Array(rows);
    for (let r = 0; r < rows; r++) {
      let m = 0;
      for (let v = 1; v < V; v++) if (z[r * V + v]! > z[r * V + m]!) m = v;
      ref[r] = m;
    }
    record("ArgmaxRows", `${rows}x${V}`, [relErr(i32At(mem, rb), ref)], 0);
  }
}

async function adam(): Promise<void> {
  const n = 5000;
  const p0 = randn(n), m0 = randn(n, 0.1), v0 = Float32Array.from(randn(n, 0.1), Math.abs), g = randn(n);
  // [begin, end, l2, shrink]: AdamW ranges (shrink), an Adam-L2 range, and gaps left alone
  const ranges: [number, number, number, number][] = [[0, 17, 0, 0.999], [20, 3000, 0, 1], [3000, 4097, 0.01, 1], [4100, 4999, 0, 0.9995]];
  const [b1, b2, eps, gs] = [0.9, 0.99, 1e-8, 0.7].map(Math.fround) as [number, number, number, number];
  const t = 3, lr = 1e-3;
  const step = Math.fround(lr / (1 - b1 ** t)), sqrtBc2 = Math.fround(Math.sqrt(1 - b2 ** t));
  const L = new Layout();
  const rp = L.f32(p0), rm = L.f32(m0), rv = L.f32(v0), rg = L.f32(g);
  const rr = new Uint32Array(ranges.length * 4);
  ranges.forEach(([a, b, l2, sh], i) => rr.set([a, b, fbits(l2), fbits(sh)], 4 * i));
  const rrr = L.i32(new Int32Array(rr.buffer));
  const mem = await run(
    Op.AdamStep,
    write.AdamStep({
      p: B(rp), p_n: n, m: B(rm), m_n: n, v: B(rv), v_n: n, g: B(rg), g_n: n, ranges_n: ranges.length, ranges_end: ranges[ranges.length - 1]![1]!,
      beta1: b1, beta2: b2, eps, grad_scale: gs, step, sqrt_bc2: sqrtBc2, scratch: B(rrr), scratch_n: rr.length,
    }),
    L.host(),
  );
  const p = Float64Array.from(p0), m = Float64Array.from(m0), v = Float64Array.from(v0);
  for (const [a, b, l2, sh] of ranges)
    for (let i = a; i < b; i++) {
      const gi = g[i]! * gs + Math.fround(l2) * p[i]!;
      p[i] = p[i]! * Math.fround(sh);
      m[i] = b1 * m[i]! + (1 - b1) * gi;
      v[i] = b2 * v[i]! + (1 - b2) * gi * gi;
      p[i] = p[i]! - step * (m[i]! / (Math.sqrt(v[i]!) / sqrtBc2 + eps));
    }
  record("AdamStep", `n=${n}, 4 ranges`, [relErr(f32At(mem, rp), p), relErr(f32At(mem, rm), m), relErr(f32At(mem, rv), v)]);
}

async function sumSquares(): Promise<void> {
  for (const n of [1, 257, 4096, 4097, 3 * 4096 + 67]) {
    const x = randn(n);
    const nb = Math.ceil(n / SUM_SQUARES_BLOCK);
    const L = new Layout();
    const rx = L.f32(x), rp = L.f32(new Float32Array(nb));
    const mem = await run(Op.SumSquares, write.SumSquares({ x: B(rx), x_n: n, scratch: B(rp), scratch_n: nb }), L.host());
    const ref = new Float64Array(nb);
    for (let i = 0; i < n; i++) ref[Math.floor(i / SUM_SQUARES_BLOCK)] = ref[Math.floor(i / SUM_SQUARES_BLOCK)]! + x[i]! * x[i]!;
    record("SumSquares", `n=${n}`, [relErr(f32At(mem, rp), ref)]);
  }
}

export const SUITES: Record<string, () => Promise<void>> = {
  fill, copyRows, add, gemm, layernorm, layernormBackward, biasAct, dropout, attention, embedding, meanPool, crossEntropy, argmax, adam, sumSquares,
  ...QUANT_SUITES,
};

declare global {
  interface Window {
    runKernels(names: string[]): Promise<{ adapter: string; results: CaseResult[]; error?: string }>;
  }
}
window.runKernels = async (names: string[]) => {
  let adapter = "";
  try {
    adapter = await setup();
    const unknown = refused(99, new Uint32Array(0));
    results.push({ op: "unknown op", shape: unknown ? "99 throws" : "99", err: unknown ? 0 : Infinity, tol: 0 });
    for (const n of names) {
      const f = SUITES[n];
      if (!f) throw new Error(`no suite ${n}`);
      await f();
    }
    return { adapter, results };
  } catch (e) {
    return { adapter, results, error: e instanceof Error ? `${e.message}\n${e.stack ?? ""}` : String(e) };
  }
};
