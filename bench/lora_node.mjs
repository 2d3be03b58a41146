// LoRA against full fine-tuning on GPT-2 124M's shape in the WebAssembly build under Node (issue 37, "Speed and
// memory"), through the npm package's Node entry (web/dist/node.js: the threaded .wasm, pthreads on worker_threads):
// the counterpart of `qkv_bench lora` (bench/lora_bench.cpp, whose header has the modes and the FLOP count used
// here) and bench/lora.py. bench/run_lora.sh runs all three and bench/lora_report.py prints the table; the wasm
// peak (bench/wasm_peak.mjs) is measured in the same run and passed here as --peak-gflops.
//
// usage: node bench/lora_node.mjs --mode lora|full|lora-q4 [--threads 2] [--steps 3] [--warmup 1] [--batch 8]
//        [--layers 12] [--peak-gflops X] [--recompute auto|on|off]
//        (after `bash scripts/build-wasm.sh && npm run build:web`; --recompute: Model.setRecompute, default auto, on
//        with the adapters, where "% peak" counts the model FLOP only, not the recomputed forward)
// prints a table and: RESULT bench=lora side=wasm mode=<m> threads=<n> ... tokens_per_s=<n> gflops=<x> peak_rss_mib=<MiB>
import { performance } from "node:perf_hooks";
import { loadAverage, option, rng } from "./node_util.mjs";
import { init, LanguageModel } from "../web/dist/node.js";

const modeAt = process.argv.indexOf("--mode");
const mode = modeAt > 0 ? process.argv[modeAt + 1] : "lora";
if (!["lora", "full", "lora-q4"].includes(mode)) throw new Error(`--mode must be lora, full or lora-q4, got ${mode}`);
const threads = option("threads", 2);
const steps = option("steps", 3);
const warmup = option("warmup", 1);
const B = option("batch", 8);
const L = option("layers", 12);
const peakGflops = option("peak-gflops", 0);
const T = 128, V = 50257, C = 768, RANK = 8;
const lora = mode !== "full";
const recomputeAt = process.argv.indexOf("--recompute");
const recompute = recomputeAt > 0 ? process.argv[recomputeAt + 1] : "auto";
if (!["auto", "on", "off"].includes(recompute)) throw new Error(`--recompute must be auto, on or off, got ${recompute}`);

// lora_bench.cpp's count: N = 12 L C^2 + V C; full 6N + 12 L T C per token, LoRA 4N + 12 L T C + 6 N_adapters.
const adapters = L * RANK * (C + 3 * C + (C + C) + 2 * (C + 4 * C));
const n = 12 * L * C * C + V * C;
const stepFlop = ((lora ? 4 * n + 6 * adapters : 6 * n) + 12 * L * T * C) * B * T;

const info = await init({ threads });
const model = await LanguageModel.create({
  vocabSize: V, context: 1024, dModel: C, heads: 12, layers: L, activation: "gelu_tanh", tieHead: true,
});
const baseMiB = (await model.memory()).parameters / 2 ** 20;
if (mode === "lora-q4") await model.quantize({ weights: "q4" });
if (lora) await model.addLora({ rank: RANK, alpha: 16, targets: ["qkv", "out", "up", "down"] });
await model.setRecompute(recompute);

const random = rng(1);
const batches = Array.from({ length: 4 }, () => {
  const inputs = new Int32Array(B * T), targets = new Int32Array(B * T);
  for (let i = 0; i < inputs.length; i++) {
    inputs[i] = Math.floor(random() * V);
    targets[i] = Math.floor(random() * V);
  }
  return { inputs, targets };
});
console.log(
  `\n== wasm GPT-2 124M shape (${L} layers) training step, ${mode}, B ${B} x T ${T}, Node ${process.version}, ` +
    `${info.threads} threads, simd ${info.simd}; recompute ${recompute}; ${warmup} warm-up + ${steps} timed steps; ` +
    `load average ${loadAverage()}`,
);
const shape = { batch: B, seq: T };
for (let i = 0; i < warmup; i++) await model.trainStep(batches[i % 4].inputs, batches[i % 4].targets, shape);
const t0 = performance.now();
for (let i = 0; i < steps; i++) await model.trainStep(batches[(warmup + i) % 4].inputs, batches[(warmup + i) % 4].targets, shape);
const ms = (performance.now() - t0) / steps;
model.dispose();

const tokensPerS = (B * T) / (ms / 1e3);
const gflops = stepFlop / (ms / 1e3) / 1e9;
const pct = peakGflops > 0 ? (100 * gflops) / peakGflops : 0;
const rssMiB = process.resourceUsage().maxRSS / 1024; // KiB on Linux
console.log(
  `${"side".padEnd(6)} ${"mode".padEnd(8)} ${"threads".padEnd(8)} ${"ms/step".padStart(10)} ${"tokens/s".padStart(10)} ` +
    `${"GFLOP/s".padStart(9)} ${"peak".padStart(9)} ${"% peak".padStart(7)} ${"peak RSS MiB".padStart(13)}`,
);
console.log(
  `${"wasm".padEnd(6)} ${mode.padEnd(8)} ${String(info.threads).padEnd(8)} ${ms.toFixed(1).padStart(10)} ` +
    `${tokensPerS.toFixed(1).padStart(10)} ${gflops.toFixed(1).padStart(9)} ${peakGflops.toFixed(1).padStart(9)} ` +
    `${pct.toFixed(1).padStart(7)} ${rssMiB.toFixed(1).padStart(13)}`,
);
console.log(
  `RESULT bench=lora side=wasm mode=${mode} threads=${info.threads} isa=wasm-${info.simd} layers=${L} batch=${B} seq=${T} ` +
    `rank=${RANK} base_mib=${baseMiB.toFixed(1)} steps=${steps} ms_per_step=${ms.toFixed(3)} ` +
    `tokens_per_s=${tokensPerS.toFixed(2)} gflops=${gflops.toFixed(2)} peak_gflops=${peakGflops.toFixed(2)} ` +
    `peak_rss_mib=${rssMiB.toFixed(1)} recompute=${recompute} load="${loadAverage()}"`,
);
