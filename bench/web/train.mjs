// Training step of the char GPT (nanoGPT's CPU recipe), one side per process: qkv through its npm package,
// or TensorFlow.js on its wasm or cpu backend running the same model (tfjs_gpt.mjs). Every side starts from
// the weights of build/bench-web/char_gpt.safetensors and trains on the same batches with the recipe's
// optimizer step; the losses of the first steps are checked against PyTorch's (reference.safetensors).
//
// usage: node bench/web/train.mjs --side qkv|tfjs-wasm|tfjs-cpu [--threads 2] [--warmup 5] [--steps 50]
//                                 [--dir build/bench-web] [--matmul explicit|flags]   (TF.js only)
// prints the losses, a timing line and `RESULT {json}` (report.mjs makes the tables).
import path from "node:path";
import { performance } from "node:perf_hooks";
import { pathToFileURL } from "node:url";
import {
  ROOT,
  benchInputs,
  loadAverage,
  mean,
  median,
  option,
  packageVersion,
  peakRssMiB,
  quantile,
  result,
  trainingBatch,
} from "./lib.mjs";

const side = option("side", "qkv");
const threads = option("threads", 2);
const warmup = option("warmup", 5);
const steps = option("steps", 50);
const dir = path.resolve(option("dir", path.join(ROOT, "build", "bench-web")));
const matmul = option("matmul", "explicit");
const TOLERANCE = 1e-3; // |loss - PyTorch's| per step: float32 rounding over 50 steps is ~1e-5; another model is >1e-2 off

const { ckpt, ref, config, optimizer } = benchInputs(dir);

async function qkvSide() {
  const entry = path.join(ROOT, "web", "dist", "node.js");
  const qkv = await import(pathToFileURL(entry).href).catch((e) => {
    throw new Error(`cannot import ${entry} (${e.message}): build the package first (npm run build:web)`);
  });
  const info = await qkv.init({ threads });
  let model, note;
  if (typeof qkv.LanguageModel.load === "function") {
    model = await qkv.LanguageModel.load(ckpt.bytes);
    note = "recipe checkpoint via LanguageModel.load";
  } else {
    // Until the package can load a checkpoint: the closest model it can create (biases on, constant lr).
    model = await qkv.LanguageModel.create({ vocabSize: config.vocab_size, context: config.context, dModel: config.d_model, heads: config.heads, layers: config.layers });
    note = "NOT the recipe: LanguageModel.load is missing, so the package's defaults (biases on, constant lr, own init)";
  }
  const n = typeof model.numParameters === "function" ? model.numParameters() : model.numParameters;
  return {
    name: "qkv",
    version: qkv.VERSION,
    backend: `wasm SIMD128 (${info.simd}), ${info.threaded ? "pthreads" : "single-threaded build"}`,
    threads: info.threads,
    numParameters: n,
    note,
    step: async (b) => (await model.trainStep(b.inputs, b.targets, { batch: b.batch, seq: b.seq })).loss,
    dispose: () => model.dispose(),
  };
}

async function tfjsSide(backend) {
  const tf = await import("@tensorflow/tfjs");
  let threadsUsed = 1, detail = "plain JavaScript kernels";
  if (backend === "wasm") {
    const wasm = await import("@tensorflow/tfjs-backend-wasm");
    wasm.setThreadsCount(threads); // honoured only where the backend loads its threaded build (not in Node)
    await tf.setBackend("wasm");
    await tf.ready();
    const simd = await tf.env().getAsync("WASM_HAS_SIMD_SUPPORT");
    const mt = await tf.env().getAsync("WASM_HAS_MULTITHREAD_SUPPORT");
    threadsUsed = mt ? wasm.getThreadsCount() : 1;
    detail = `${simd ? "SIMD" : "no SIMD"}, XNNPACK, ${mt ? "threaded build" : "single-threaded build (threads are off under Node)"}`;
  } else {
    await tf.setBackend("cpu");
    await tf.ready();
  }
  const { createTfGpt } = await import("./tfjs_gpt.mjs");
  const model = createTfGpt(tf, ckpt.tensors, config, optimizer, matmul);
  return {
    name: `TF.js ${backend}`,
    version: tf.version.tfjs,
    backend: `${backend} (${detail})${matmul === "explicit" ? "" : `, matmul ${matmul}`}`,
    threads: threadsUsed,
    numParameters: model.numParameters,
    note: `same model in TF.js ops (tfjs_gpt.mjs, matmul ${matmul})`,
    step: (b) => model.trainStep(b.inputs, b.targets, b.batch, b.seq),
    dispose: () => model.dispose(),
    tensors: () => tf.memory().numTensors,
  };
}

const runner = side === "qkv" ? await qkvSide() : side === "tfjs-wasm" ? await tfjsSide("wasm") : side === "tfjs-cpu" ? await tfjsSide("cpu") : null;
if (!runner) throw new Error(`--side must be qkv, tfjs-wasm or tfjs-cpu, got ${side}`);

const b0 = trainingBatch(ref, 0);
const tokens = b0.batch * b0.seq;
console.log(
  `\n== ${runner.name} ${runner.version}: char GPT training step, B ${b0.batch} x T ${b0.seq}, ${runner.backend}, ` +
    `${runner.threads} thread(s); ${warmup} warm-up + ${steps} timed steps; Node ${process.version}; load ${loadAverage()}`,
);
console.log(`   model: ${runner.note}; ${runner.numParameters} parameters (PyTorch: ${ckpt.metadata["bench.parameters"]})`);

const losses = [];
const ms = [];
let tensorsBefore; // TF.js's live tensors after the first step (which builds the causal mask): later steps add none
for (let i = 0; i < warmup + steps; i++) {
  const b = trainingBatch(ref, i);
  const t0 = performance.now();
  const loss = await runner.step(b);
  const dt = performance.now() - t0;
  losses.push(loss);
  if (i >= warmup) ms.push(dt);
  if (i === 0) tensorsBefore = runner.tensors?.();
}
const tensorsAfter = runner.tensors?.();
runner.dispose();

// The same-model check: the loss of each step against PyTorch's on the same weights and batches.
const torch = ref.tensors.torch_losses.data;
const n = Math.min(losses.length, torch.length);
let maxDiff = 0;
for (let i = 0; i < n; i++) maxDiff = Math.max(maxDiff, Math.abs(losses[i] - torch[i]));
console.log("   step      loss   PyTorch   difference");
for (const s of [1, 2, 5, 10, 20, 30, 40, 50, 100].filter((s) => s <= n)) {
  console.log(`   ${String(s).padStart(4)}  ${losses[s - 1].toFixed(6)}  ${torch[s - 1].toFixed(6)}  ${(losses[s - 1] - torch[s - 1]).toExponential(2).padStart(10)}`);
}
const sameModel = runner.numParameters === Number(ckpt.metadata["bench.parameters"]) && maxDiff <= TOLERANCE;
console.log(
  `   ln(65) = ${Math.log(config.vocab_size).toFixed(4)}; max |loss - PyTorch| over steps 1..${n}: ${maxDiff.toExponential(2)} ` +
    `(${sameModel ? "same model: ok" : "NOT the same model"})` +
    (tensorsBefore === undefined ? "" : `; TF.js live tensors after step 1: ${tensorsBefore}, after the last: ${tensorsAfter} (${tensorsBefore === tensorsAfter ? "no leak" : "LEAK"})`),
);

const med = median(ms);
console.log(
  `   ms/step: median ${med.toFixed(2)}, mean ${mean(ms).toFixed(2)}, p10 ${quantile(ms, 0.1).toFixed(2)}, p90 ${quantile(ms, 0.9).toFixed(2)}; ` +
    `tokens/s ${(tokens / (med / 1e3)).toFixed(0)} (median); peak RSS ${peakRssMiB().toFixed(0)} MiB`,
);
result({
  bench: "train",
  side,
  name: runner.name,
  version: runner.version,
  backend: runner.backend,
  threads: runner.threads,
  requested_threads: threads,
  params: runner.numParameters,
  torch_params: Number(ckpt.metadata["bench.parameters"]),
  note: runner.note,
  batch: b0.batch,
  seq: b0.seq,
  warmup,
  steps,
  ms_median: med,
  ms_mean: mean(ms),
  ms_p10: quantile(ms, 0.1),
  ms_p90: quantile(ms, 0.9),
  tokens_per_s: tokens / (med / 1e3),
  loss_first: losses[0],
  loss_at_check: losses[n - 1],
  check_steps: n,
  max_diff_torch: maxDiff,
  same_model: sameModel,
  peak_rss_mib: peakRssMiB(),
  peers: { tfjs: packageVersion("@tensorflow/tfjs"), "tfjs-backend-wasm": packageVersion("@tensorflow/tfjs-backend-wasm") },
});
