// The char-level GPT training step in the WebAssembly build under Node, through the npm package's Node entry
// (web/dist/node.js: the threaded .wasm, pthreads on worker_threads). bench/run_cpu.sh compares it with
// `qkv_bench char-gpt --config package`, the same model natively, in the same run.
//
// usage: node bench/wasm_char_gpt.mjs [--threads 2] [--steps 50] [--warmup 5] [--relaxed 0|1]
//        (after `npm run build:web`; --relaxed 1 loads the relaxed-SIMD build, which Node 20 runs only with
//        `node --experimental-wasm-relaxed-simd`; default: the loader's choice)
// prints a table and: RESULT bench=char-gpt side=wasm threads=<n> isa=wasm-sse4.1[+relaxed] ... ms_per_step=<mean>
import { performance } from "node:perf_hooks";
import { loadAverage, option, rng } from "./node_util.mjs";
import { init, LanguageModel } from "../web/dist/node.js";

const threads = option("threads", 2);
const steps = option("steps", 50);
const warmup = option("warmup", 5);
const relaxed = option("relaxed", undefined);

// nanoGPT's CPU char config as the package builds it (qkv's defaults for everything not given).
const CONFIG = { vocabSize: 65, context: 64, dModel: 128, heads: 4, layers: 4 };
const BATCH = 12;
const SEQ = 64;
const POOL = 16; // random batches, cycled

const info = await init({ threads, ...(relaxed === undefined ? {} : { relaxedSimd: relaxed === 1 }) });
const isa = `wasm-${info.simd}${info.relaxedSimd ? "+relaxed" : ""}`;
const model = await LanguageModel.create(CONFIG);
const random = rng(1);
const batches = Array.from({ length: POOL }, () => {
  const inputs = new Int32Array(BATCH * SEQ);
  const targets = new Int32Array(BATCH * SEQ);
  for (let i = 0; i < inputs.length; i++) {
    inputs[i] = Math.floor(random() * CONFIG.vocabSize);
    targets[i] = Math.floor(random() * CONFIG.vocabSize);
  }
  return { inputs, targets };
});

console.log(
  `\n== wasm char GPT training step (package config), B ${BATCH} x T ${SEQ}, Node ${process.version}, ` +
    `threaded ${info.threaded}, ${info.threads} threads, simd ${isa}; ${warmup} warm-up + ${steps} timed steps; ` +
    `load average ${loadAverage()}`,
);
const shape = { batch: BATCH, seq: SEQ };
for (let i = 0; i < warmup; i++) await model.trainStep(batches[i % POOL].inputs, batches[i % POOL].targets, shape);
const ms = [];
for (let i = 0; i < steps; i++) {
  const b = batches[(warmup + i) % POOL];
  const t0 = performance.now();
  await model.trainStep(b.inputs, b.targets, shape);
  ms.push(performance.now() - t0);
}
model.dispose();

const mean = ms.reduce((a, b) => a + b, 0) / ms.length;
const median = [...ms].sort((a, b) => a - b)[Math.floor(ms.length / 2)];
const tokensPerS = (BATCH * SEQ) / (mean / 1e3);
const rssMiB = process.resourceUsage().maxRSS / 1024; // KiB on Linux
console.log(`${"side".padEnd(10)} ${"threads".padEnd(8)} ${"ms/step".padStart(8)} ${"median ms".padStart(10)} ${"tokens/s".padStart(12)} ${"peak RSS MiB".padStart(14)}`);
console.log(
  `${"wasm".padEnd(10)} ${String(info.threads).padEnd(8)} ${mean.toFixed(2).padStart(8)} ${median.toFixed(2).padStart(10)} ` +
    `${tokensPerS.toFixed(0).padStart(12)} ${rssMiB.toFixed(1).padStart(14)}`,
);
console.log(
  `RESULT bench=char-gpt side=wasm threads=${info.threads} isa=${isa} config=package batch=${BATCH} seq=${SEQ} ` +
    `steps=${steps} ms_per_step=${mean.toFixed(3)} median_ms=${median.toFixed(3)} tokens_per_s=${tokensPerS.toFixed(1)} ` +
    `peak_rss_mib=${rssMiB.toFixed(1)} load="${loadAverage()}"`,
);
