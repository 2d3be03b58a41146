// Shared helpers of the Node tests: a repeating-pattern dataset and batch sampling.

/** A sentence repeated: a char LM should learn it quickly (the next char is determined by the last few). */
export const PATTERN = "the quick brown fox jumps over the lazy dog. ";
export const PATTERN_TEXT = PATTERN.repeat(40);

/** Deterministic PRNG (mulberry32). */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** `batch` random windows of `seq` tokens and the same windows shifted by one (the next-token targets). */
export function sampleBatch(
  data: Int32Array,
  batch: number,
  seq: number,
  random: () => number,
): { inputs: Int32Array; targets: Int32Array } {
  const inputs = new Int32Array(batch * seq);
  const targets = new Int32Array(batch * seq);
  for (let b = 0; b < batch; b++) {
    const start = Math.floor(random() * (data.length - seq - 1));
    inputs.set(data.subarray(start, start + seq), b * seq);
    targets.set(data.subarray(start + 1, start + seq + 1), b * seq);
  }
  return { inputs, targets };
}

/**
 * Whether this run's Node has relaxed SIMD, so that init() must pick the relaxed-SIMD build: Node 22+, or the
 * V8 flag that tests/web/vitest.config.ts passes when QKV_TEST_RELAXED_SIMD=1.
 */
export const EXPECT_RELAXED_SIMD =
  Number(process.versions.node.split(".")[0]) >= 22 || process.execArgv.includes("--experimental-wasm-relaxed-simd");

/**
 * A safetensors file of `tensors` (name, shape) with `metadata`, every value F32 from a fixed-seed LCG in
 * [-0.02, 0.02): the big synthetic models of the memory tests, written in the test so that nothing that size is
 * committed.
 */
export function randomSafetensors(
  tensors: [string, number[]][],
  metadata: Record<string, string>,
  dtype: "F32" | "BF16" = "F32",
): Uint8Array {
  const header: Record<string, unknown> = { __metadata__: metadata };
  const width = dtype === "F32" ? 4 : 2;
  let offset = 0;
  for (const [name, shape] of tensors) {
    const n = shape.reduce((p, d) => p * d, 1) * width;
    header[name] = { dtype, shape, data_offsets: [offset, offset + n] };
    offset += n;
  }
  let text = JSON.stringify(header);
  text += " ".repeat((8 - (text.length % 8)) % 8);
  const out = new Uint8Array(8 + text.length + offset);
  new DataView(out.buffer).setBigUint64(0, BigInt(text.length), true);
  out.set(new TextEncoder().encode(text), 8);
  let s = 12345;
  const value = () => {
    s = (s * 1103515245 + 12345) >>> 0;
    return ((s >>> 8) / (1 << 24) - 0.5) * 0.04;
  };
  if (dtype === "F32") {
    const floats = new Float32Array(out.buffer, 8 + text.length, offset / 4);
    for (let i = 0; i < floats.length; i++) floats[i] = value();
  } else {
    // bfloat16: the high half of the float32 (truncated: still a bfloat16 value).
    const halves = new Uint16Array(out.buffer, 8 + text.length, offset / 2);
    const one = new Float32Array(1);
    const bits = new Uint32Array(one.buffer);
    for (let i = 0; i < halves.length; i++) {
      one[0] = value();
      halves[i] = bits[0]! >>> 16;
    }
  }
  return out;
}
