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

// ---- packed weights (cpp/src/ops/weight_format.h): random packed rows and their dequantization ----
// Formats: 1 F16, 2 BF16, 3 Int8 (a scale per row), 4 Q4 (groups of 32 along K, a scale each, code - 8).
export const FORMAT_NAMES: Record<number, string> = { 1: "f16", 2: "bf16", 3: "int8", 4: "q4" };
export function rowBytes(format: number, K: number): number {
  if (format === 4) return 16 * Math.ceil(K / 32);
  return Math.ceil(((format === 3 ? 1 : 2) * K) / 4) * 4;
}
/** 32-bit scale words per row: Int8's f32, Q4's group scales as bfloat16, two to a word (the low half first). */
export function scalesPerRow(format: number, K: number): number {
  return format === 3 ? 1 : format === 4 ? Math.ceil(Math.ceil(K / 32) / 2) : 0;
}
/** IEEE binary16 bits as a number (exact). */
export function f16Value(h: number): number {
  const s = h & 0x8000 ? -1 : 1, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e === 0x1f) return m ? NaN : s * Infinity;
  return e === 0 ? s * m * 2 ** -24 : s * (1 + m / 1024) * 2 ** (e - 15);
}
const BF = new Float32Array(1);
const BU = new Uint32Array(BF.buffer);
export function bf16Value(h: number): number {
  BU[0] = (h << 16) >>> 0;
  return BF[0]!;
}
/**
 * A half-precision element's bits: a number of magnitude 2^-6 to 2^6, or for F16 one time in eight a subnormal or
 * zero (which the kernels must convert exactly); no infinities or NaN. No bf16 subnormals: they are f32 subnormals,
 * which WGSL lets an implementation flush in arithmetic.
 */
function randHalfBits(format: number): number {
  const sign = rand() < 0.5 ? 0x8000 : 0;
  if (format === 1 && rand() < 0.125) return sign | Math.floor(rand() * 1024);
  if (format === 1) return sign | ((9 + Math.floor(rand() * 13)) << 10) | Math.floor(rand() * 1024);
  return sign | ((121 + Math.floor(rand() * 13)) << 7) | Math.floor(rand() * 128);
}
/**
 * N random packed rows of K elements: the bytes (every padding byte garbage, so that a kernel which reads past K
 * shows it: 0xff is a NaN half and bf16, Q4's padding codes are 10), the scale words (Int8: an f32 a row; Q4: a
 * bfloat16 a group, two to a word, a padding half 2^15 where a row's groups are odd in number, so that a read of it
 * shows), and the dequantized matrix (N, K), each element (float)q * scale rounded once, as dequantize_element.
 */
export function randomPacked(format: number, N: number, K: number): { bytes: Uint8Array; scales: Float32Array; w: Float32Array } {
  const stride = rowBytes(format, K), spr = scalesPerRow(format, K);
  const bytes = new Uint8Array(N * stride).fill(0xff);
  const scales = new Float32Array(Math.max(1, N * spr));
  const halves = new Uint16Array(scales.buffer);
  const w = new Float32Array(N * K);
  const G = Math.ceil(K / 32);
  const groupScale = (n: number, g: number): number => (format === 4 ? bf16Value(halves[2 * spr * n + g]!) : scales[n]!);
  if (format === 3) for (let i = 0; i < N * spr; i++) scales[i] = Math.fround(0.001 + rand() * 0.05);
  if (format === 4)
    for (let n = 0; n < N; n++)
      for (let g = 0; g < 2 * spr; g++) {
        // 2^-10 to 2^-6 with a random mantissa (no bfloat16 subnormals: f32 subnormals, which WGSL may flush).
        const sign = rand() < 0.5 ? 0x8000 : 0;
        const bits = ((117 + Math.floor(rand() * 5)) << 7) | Math.floor(rand() * 128);
        halves[2 * spr * n + g] = g < G ? sign | bits : 0x4700;
      }
  for (let n = 0; n < N; n++) {
    const row = n * stride;
    if (format === 4) bytes.fill(0xaa, row, row + stride);
    for (let k = 0; k < K; k++) {
      if (format === 1 || format === 2) {
        const h = randHalfBits(format);
        bytes[row + 2 * k] = h & 0xff;
        bytes[row + 2 * k + 1] = h >> 8;
        w[n * K + k] = format === 1 ? f16Value(h) : bf16Value(h);
      } else if (format === 3) {
        const q = Math.floor(rand() * 255) - 127;
        bytes[row + k] = q & 0xff;
        w[n * K + k] = Math.fround(q * groupScale(n, 0));
      } else {
        const q = Math.floor(rand() * 16), at = row + Math.floor(k / 32) * 16 + Math.floor((k % 32) / 2);
        bytes[at] = k % 2 ? (bytes[at]! & 0x0f) | (q << 4) : (bytes[at]! & 0xf0) | q;
        w[n * K + k] = Math.fround((q - 8) * groupScale(n, Math.floor(k / 32)));
      }
    }
  }
  return { bytes, scales, w };
}
