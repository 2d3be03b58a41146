// The peak float32 FLOP/s of WebAssembly SIMD128 under Node: the counterpart of `qkv_bench peak` (peak_simd.h),
// so that the wasm step's ratio to native can be read against the ratio of what the two can do at best. The
// loop is 12 independent 4-lane chains acc = acc * m + a, all in registers (V8 gives wasm 16 xmm registers),
// as f32x4.relaxed_madd (one fused multiply-add where the CPU has FMA) or as f32x4.mul then f32x4.add (plain
// SIMD128): 2 FLOP per lane per chain step either way. The module is assembled here, byte by byte, so the
// benchmark needs no toolchain; the threads are worker_threads, each with its own instance.
//
// usage: node [--experimental-wasm-relaxed-simd] bench/wasm_peak.mjs [--threads 2] [--seconds 0.5]
// prints a table and, per variant and thread count: RESULT bench=wasm-peak variant=<relaxed|plain> threads=<n> gflops=<x>
import { isMainThread, parentPort, Worker, workerData } from "node:worker_threads";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";

const CHAINS = 12;

// LEB128 encodings and a length-prefixed vector, as the binary format writes them.
const uleb = (n) => {
  const out = [];
  do {
    let b = n & 0x7f;
    n >>>= 7;
    if (n) b |= 0x80;
    out.push(b);
  } while (n);
  return out;
};
const vec = (bytes) => [...uleb(bytes.length), ...bytes]; // size- (or, for a name, length-) prefixed
const section = (id, bytes) => [id, ...vec(bytes)];
const f32 = (x) => [...new Uint8Array(new Float32Array([x]).buffer)];
const simd = (op) => [0xfd, ...uleb(op)];

const V128 = 0x7b, I32 = 0x7f, F32 = 0x7d;
const OP = { splat: 0x13, extract: 0x1f, add: 0xe4, mul: 0xe6, madd: 0x105 };

// (func (export "loop") (param $n i32) (result f32)): locals 1 = m, 2 = a, 3.. = the chains.
function peakModule(relaxed) {
  const body = [];
  const get = (i) => [0x20, ...uleb(i)], set = (i) => [0x21, ...uleb(i)];
  body.push(0x43, ...f32(0.999999), ...simd(OP.splat), ...set(1)); // m just below 1: acc converges, no overflow
  body.push(0x43, ...f32(1e-6), ...simd(OP.splat), ...set(2));
  for (let c = 0; c < CHAINS; c++) body.push(0x43, ...f32(0.5 + c), ...simd(OP.splat), ...set(3 + c));
  body.push(0x03, 0x40); // loop
  for (let c = 0; c < CHAINS; c++) {
    if (relaxed) body.push(...get(3 + c), ...get(1), ...get(2), ...simd(OP.madd), ...set(3 + c));
    else body.push(...get(3 + c), ...get(1), ...simd(OP.mul), ...get(2), ...simd(OP.add), ...set(3 + c));
  }
  // n -= 1; continue while n != 0
  body.push(...get(0), 0x41, 1, 0x6b, 0x22, 0, 0x0d, 0, 0x0b);
  body.push(...get(3));
  for (let c = 1; c < CHAINS; c++) body.push(...get(3 + c), ...simd(OP.add));
  body.push(...simd(OP.extract), 0, 0x0b);
  // The body: one local declaration, (2 + CHAINS) x v128, then the code; its size goes before it.
  const func = vec([1, ...uleb(2 + CHAINS), V128, ...body]);
  const name = [..."loop"].map((ch) => ch.charCodeAt(0));
  return new Uint8Array([
    0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version 1
    ...section(1, [1, 0x60, 1, I32, 1, F32]), // one type: (i32) -> f32
    ...section(3, [1, 0]), // one function, of type 0
    ...section(7, [1, ...vec(name), 0x00, 0]), // export "loop" = function 0
    ...section(10, [1, ...func]), // its code
  ]);
}


const flopOf = (iterations) => iterations * CHAINS * 4 * 2;

// Runs the loop `iterations` times `trials` times; the best GFLOP/s by wall time.
function run(relaxed, iterations, trials) {
  const { loop } = new WebAssembly.Instance(new WebAssembly.Module(peakModule(relaxed))).exports;
  let best = 0, sink = 0;
  for (let t = 0; t < trials; t++) {
    const t0 = performance.now();
    sink += loop(iterations);
    best = Math.max(best, flopOf(iterations) / ((performance.now() - t0) / 1e3) / 1e9);
  }
  if (!Number.isFinite(sink)) throw new Error("wasm_peak: the loop diverged");
  return best;
}

if (!isMainThread) {
  const { relaxed, iterations, trials } = workerData;
  run(relaxed, Math.max(1, iterations >> 4), 1); // compile and warm up
  parentPort.postMessage(run(relaxed, iterations, trials));
} else {
  const { option } = await import("./node_util.mjs");
  const threads = option("threads", 2);
  const seconds = option("seconds", 0.5);
  const relaxedOk = WebAssembly.validate(peakModule(true));
  const variants = relaxedOk ? [true, false] : [false];
  console.log(
    `\n== WebAssembly SIMD128 peak float32 FLOP/s, Node ${process.version}: ${CHAINS} independent 4-lane multiply-add ` +
      `chains in registers (bench/wasm_peak.mjs); 2 FLOP per lane per step, fused or not; best of 3, wall time` +
      (relaxedOk ? "" : "\n(relaxed SIMD not enabled in this Node: run it with --experimental-wasm-relaxed-simd for that row)"),
  );
  console.log(`${"variant".padEnd(22)} ${"threads".padStart(7)} ${"GFLOP/s".padStart(10)} ${"per thread".padStart(11)}`);
  for (const relaxed of variants) {
    // Calibrate on this thread: iterations for about `seconds` of the loop.
    let iterations = 1 << 16;
    for (;;) {
      const t0 = performance.now();
      run(relaxed, iterations, 1);
      const s = (performance.now() - t0) / 1e3;
      if (s > 0.05) {
        // The loop counts down an i32.
        iterations = Math.min(Math.ceil((iterations * seconds) / s), 2 ** 31 - 1);
        break;
      }
      iterations *= 4;
    }
    for (let n = 1; n <= threads; n++) {
      const self = fileURLToPath(import.meta.url);
      const each = await Promise.all(
        Array.from({ length: n }, () => new Promise((resolve, reject) => {
          const w = new Worker(self, { workerData: { relaxed, iterations, trials: 3 } });
          w.once("message", resolve);
          w.once("error", reject);
        })),
      );
      const total = each.reduce((a, b) => a + b, 0);
      const name = relaxed ? "f32x4.relaxed_madd" : "f32x4.mul + f32x4.add";
      console.log(`${name.padEnd(22)} ${String(n).padStart(7)} ${total.toFixed(1).padStart(10)} ${(total / n).toFixed(1).padStart(11)}`);
      console.log(`RESULT bench=wasm-peak variant=${relaxed ? "relaxed" : "plain"} threads=${n} gflops=${total.toFixed(2)}`);
    }
  }
  console.log("(the sum over threads of each thread's best; each thread runs its own instance of the loop at once)");
}
