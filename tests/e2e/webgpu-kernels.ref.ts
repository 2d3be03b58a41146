// The plain-JS side of webgpu-kernels.page.ts: seeded random inputs, the error measures, and JS ports of
// cpp/src/exec/reference/reference_backend.cpp's pieces (the dropout hash, erf and the activations, in double)
// that the page's cases compute their references with.

// ---- random data ----
let state = 12345;
export function rand(): number {
  // mulberry32
  state = (state + 0x6d2b79f5) >>> 0;
  let t = state;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
export function randn(n: number, scale = 1): Float32Array {
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = (rand() * 2 - 1) * scale;
  return a;
}
export function randint(n: number, hi: number): Int32Array {
  const a = new Int32Array(n);
  for (let i = 0; i < n; i++) a[i] = Math.floor(rand() * hi);
  return a;
}

// ---- comparison ----
export function relErr(got: ArrayLike<number>, ref: ArrayLike<number>, unit = 0): number {
  if (got.length !== ref.length) return Infinity;
  let scale = 0;
  for (let i = 0; i < ref.length; i++) if (!Number.isNaN(ref[i]!)) scale = Math.max(scale, Math.abs(ref[i]!));
  const floor = Math.max(0.01 * scale, 1e-30, unit);
  let e = 0;
  for (let i = 0; i < ref.length; i++) {
    const g = got[i]!, r = ref[i]!;
    if (Number.isNaN(g) !== Number.isNaN(r)) return Infinity;
    if (Number.isNaN(r)) continue;
    if (g === r) continue;
    e = Math.max(e, Math.abs(g - r) / Math.max(Math.abs(r), floor));
  }
  return e;
}
/** |gpu - ref| / mag elementwise, mag = the sum of the absolute values of the terms that make ref: the
 *  relative error of a sum measured by its conditioning (a sum that cancels is judged against its terms). */
export function sumErr(got: ArrayLike<number>, ref: ArrayLike<number>, mag: ArrayLike<number>): number {
  let e = 0;
  for (let i = 0; i < ref.length; i++) {
    const g = got[i]!, r = ref[i]!;
    if (Number.isNaN(g)) return Infinity;
    if (g !== r) e = Math.max(e, Math.abs(g - r) / Math.max(mag[i]!, 1e-30));
  }
  return e;
}
// ---- JS ports of the reference's pieces ----
const U64 = (1n << 64n) - 1n;
export function dropoutHash(seed: bigint, i: bigint): number {
  let z = (seed + 0x9e3779b97f4a7c15n * (i + 1n)) & U64;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & U64;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & U64;
  return Number((z ^ (z >> 31n)) >> 32n);
}
export function threshold(p: number): number {
  const t = Math.fround(p) * 4294967296.0;
  return t >= 4294967295.0 ? 0xffffffff : Math.floor(t);
}
export function dropped(x: number, p: number, seed: bigint, i: number): number {
  if (p <= 0) return x;
  return dropoutHash(seed, BigInt(i)) >= threshold(p) ? Math.fround(x * Math.fround(1 / Math.fround(1 - p))) : 0;
}
// erf in double: the Maclaurin series below 2.5, the Laplace continued fraction of erfc above (both to ~1e-15).
export function erf(x: number): number {
  const a = Math.abs(x);
  let r: number;
  if (a < 2.5) {
    let term = a, sum = a;
    for (let n = 1; n < 200; n++) {
      term *= (-a * a) / n;
      const t = term / (2 * n + 1);
      sum += t;
      if (Math.abs(t) < 1e-17 * Math.abs(sum)) break;
    }
    r = (2 / Math.sqrt(Math.PI)) * sum;
  } else {
    let f = 0;
    for (let n = 60; n >= 1; n--) f = (n / 2) / (a + f);
    r = 1 - Math.exp(-a * a) / Math.sqrt(Math.PI) / (a + f);
  }
  return x < 0 ? -r : r;
}
// GELU's tanh form (act 3), PyTorch's formula in double: 0.5 h (1 + tanh(u)), u = sqrt(2/pi) (h + 0.044715 h^3).
const SQRT_2_PI = Math.sqrt(2 / Math.PI);
export function tanhU(h: number): number {
  return Math.tanh(SQRT_2_PI * (h + 0.044715 * h * h * h));
}
export function actOf(act: number, h: number): number {
  if (act === 1) return h > 0 ? h : 0;
  if (act === 2) return 0.5 * h * (1 + erf(h * Math.SQRT1_2));
  if (act === 3) return 0.5 * h * (1 + tanhU(h));
  return h;
}
// The magnitudes of the terms of act(h) and act'(h) (sumErr): GELU's 1 + erf(h / sqrt 2) cancels for negative h
// (in float on the CPU and on the GPU alike), so its rounding scales with 1 + |erf|, not with the result.
// The tanh form the same way: 1 + tanh(u) cancels for negative h in PyTorch's float formula (the GPU's h sigma(2u)
// does not, so this judges it no more loosely than the CPU).
export function actMag(act: number, h: number): number {
  if (act === 2) return 0.5 * Math.abs(h) * (1 + Math.abs(erf(h * Math.SQRT1_2)));
  if (act === 3) return 0.5 * Math.abs(h) * (1 + Math.abs(tanhU(h)));
  return Math.abs(actOf(act, h));
}
export function actGradMag(act: number, h: number): number {
  if (act === 2) return 0.5 * (1 + Math.abs(erf(h * Math.SQRT1_2))) + Math.abs(h) * 0.3989422804014327 * Math.exp(-0.5 * h * h);
  if (act === 3) {
    const t = tanhU(h);
    return 0.5 * (1 + Math.abs(t)) + 0.5 * Math.abs(h) * (1 - t * t) * SQRT_2_PI * (1 + 3 * 0.044715 * h * h);
  }
  return Math.abs(actGrad(act, h));
}
export function actGrad(act: number, h: number): number {
  if (act === 1) return h > 0 ? 1 : 0;
  if (act === 2) return 0.5 * (1 + erf(h * Math.SQRT1_2)) + h * 0.3989422804014327 * Math.exp(-0.5 * h * h);
  if (act === 3) {
    const t = tanhU(h);
    return 0.5 * (1 + t) + 0.5 * h * (1 - t * t) * SQRT_2_PI * (1 + 3 * 0.044715 * h * h);
  }
  return 1;
}
/** Far values for the tanh form (act 3), where it must be exactly h or 0 and its derivative 1 or 0. */
export function withFarValues(h: Float32Array, act: number): Float32Array {
  if (act === 3) [-40, 12, -12, 1e20, -1e20].forEach((v, i) => { if (i * 5 < h.length) h[i * 5] = v; });
  return h;
}
