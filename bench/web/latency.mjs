// Batch-1 forward latency of the char GPT, one side per process: qkv through its npm package
// (LanguageModel.load + predict) or ONNX Runtime Web (its wasm backend) on the ONNX export of the same
// weights. Before timing, each side's logits are checked against PyTorch's (reference.safetensors) and
// written to build/bench-web/logits_<side>_t<T>.f32, so report.mjs can compare the two sides directly.
//
// usage: node bench/web/latency.mjs --side qkv|ort [--seq 64|1] [--threads 2] [--warmup 20] [--runs 200]
//                                   [--dir build/bench-web]
// A run = the call a user makes: input array in, logits (1, T, 65) out as a Float32Array. Prints the
// statistics and `RESULT {json}`; exits with status 2 (and times nothing) when the logits are wrong.
import { writeFileSync } from "node:fs";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { pathToFileURL } from "node:url";
import {
  ROOT,
  benchInputs,
  loadAverage,
  maxAbsDiff,
  mean,
  median,
  option,
  osThreads,
  packageVersion,
  peakRssMiB,
  quantile,
  result,
} from "./lib.mjs";

const side = option("side", "qkv");
const seq = option("seq", 64);
const threads = option("threads", 2);
const warmup = option("warmup", 20);
const runs = option("runs", 200);
const dir = path.resolve(option("dir", path.join(ROOT, "build", "bench-web")));
const TOLERANCE = 1e-4; // max |logit - PyTorch's|; the logits are O(1)

const { ckpt, ref, config, file } = benchInputs(dir);
const input = ref.tensors[`input_t${seq}`];
const expected = ref.tensors[`logits_t${seq}`];
if (!input) throw new Error(`reference.safetensors has no input for --seq ${seq} (it has 64 and 1)`);

async function qkvSide() {
  const entry = path.join(ROOT, "web", "dist", "node.js");
  const qkv = await import(pathToFileURL(entry).href).catch((e) => {
    throw new Error(`cannot import ${entry} (${e.message}): build the package first (npm run build:web)`);
  });
  if (typeof qkv.LanguageModel.load !== "function" || typeof qkv.LanguageModel.prototype.predict !== "function") {
    console.log(`\n== qkv ${qkv.VERSION}: this build of the package has no LanguageModel.load / predict yet: skipped`);
    result({ bench: "latency", side: "qkv", seq, skipped: "the package has no LanguageModel.load / predict", version: qkv.VERSION });
    process.exit(0);
  }
  const info = await qkv.init({ threads });
  const model = await qkv.LanguageModel.load(ckpt.bytes);
  const ids = Int32Array.from(input.data);
  return {
    name: "qkv",
    version: qkv.VERSION,
    backend: `wasm SIMD128 (${info.simd}), ${info.threaded ? "pthreads" : "single-threaded build"}`,
    threads: info.threads,
    run: async () => {
      const out = await model.predict(ids);
      return out.logits ?? out;
    },
    dispose: () => model.dispose(),
  };
}

async function ortSide() {
  const ort = await import("onnxruntime-web");
  ort.env.wasm.numThreads = threads;
  const onnx = file(`char_gpt_t${seq}.onnx`);
  const session = await ort.InferenceSession.create(onnx, { executionProviders: ["wasm"], graphOptimizationLevel: "all" });
  const ids = BigInt64Array.from(input.data, (x) => BigInt(x));
  return {
    name: "ONNX Runtime Web",
    version: ort.env.versions?.web ?? packageVersion("onnxruntime-web"),
    backend: `wasm (SIMD, ${threads > 1 ? "threaded" : "1 thread"}), graph optimisation "all", ${path.basename(onnx)}`,
    threads: ort.env.wasm.numThreads,
    run: async () => {
      const out = await session.run({ ids: new ort.Tensor("int64", ids, [1, seq]) });
      return out.logits.data;
    },
    dispose: () => session.release(),
  };
}

const threadsBefore = osThreads();
const runner = side === "qkv" ? await qkvSide() : side === "ort" ? await ortSide() : null;
if (!runner) throw new Error(`--side must be qkv or ort, got ${side}`);
console.log(
  `\n== ${runner.name} ${runner.version}: char GPT forward (logits), batch 1 x ${seq} tokens, ${runner.backend}, ` +
    `${runner.threads} thread(s); Node ${process.version}; load ${loadAverage()}`,
);

// Correctness first: the logits of the same weights against PyTorch's.
const logits = Float32Array.from(await runner.run());
const diff = logits.length === expected.data.length ? maxAbsDiff(logits, expected.data) : Infinity;
writeFileSync(path.join(dir, `logits_${side}_t${seq}.f32`), Buffer.from(logits.buffer));
console.log(`   logits (1, ${seq}, ${config.vocab_size}): max |${side} - PyTorch| = ${diff.toExponential(2)} (tolerance ${TOLERANCE})`);
if (!(diff <= TOLERANCE)) {
  console.log(`   WRONG logits (${logits.length} values, expected ${expected.data.length}): not timed`);
  result({ bench: "latency", side, seq, name: runner.name, version: runner.version, max_diff_torch: diff, wrong: true });
  process.exit(2);
}

for (let i = 0; i < warmup; i++) await runner.run();
const threadsStarted = osThreads() - threadsBefore; // OS threads the library started (pthread pools are worker_threads)
const ms = [];
for (let i = 0; i < runs; i++) {
  const t0 = performance.now();
  await runner.run();
  ms.push(performance.now() - t0);
}
runner.dispose();
const med = median(ms);
console.log(
  `   ms/forward: median ${med.toFixed(3)}, mean ${mean(ms).toFixed(3)}, p10 ${quantile(ms, 0.1).toFixed(3)}, p90 ${quantile(ms, 0.9).toFixed(3)} ` +
    `over ${runs} runs after ${warmup} warm-up; peak RSS ${peakRssMiB().toFixed(0)} MiB; OS threads started by the library: ${threadsStarted}`,
);
result({
  bench: "latency",
  side,
  seq,
  name: runner.name,
  version: runner.version,
  backend: runner.backend,
  threads: runner.threads,
  requested_threads: threads,
  warmup,
  runs,
  ms_median: med,
  ms_mean: mean(ms),
  ms_p10: quantile(ms, 0.1),
  ms_p90: quantile(ms, 0.9),
  max_diff_torch: diff,
  os_threads_started: threadsStarted,
  peak_rss_mib: peakRssMiB(),
});
