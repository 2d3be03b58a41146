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
