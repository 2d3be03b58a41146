// Generation in the WebAssembly build under Node, through the npm package (web/dist/node.js, threaded):
// 256 tokens at batch 1 after a 1-token prompt on the char GPT at context 256, with and without the KV
// cache: the same work as `qkv_bench generate` natively. bench/run_generate.sh runs both beside PyTorch.
//
// usage: node bench/wasm_generate.mjs [--threads 2] [--runs 10] [--warmup 1]   (after `npm run build:web`)
// prints a table and, per side: RESULT bench=generate side=wasm cache=<on|off> ... tokens_per_s=<n>
import { readFileSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { init, LanguageModel } from "../web/dist/node.js";

function option(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 && i + 1 < process.argv.length ? Number(process.argv[i + 1]) : fallback;
}
const threads = option("threads", 2);
const runsOption = option("runs", 0);
const warmup = option("warmup", 1);
const TOKENS = 256;

// bench/char_gpt_recipe.h's model (as `qkv_bench generate` builds it) at context 256.
const CONFIG = {
  vocabSize: 65,
  context: 256,
  dModel: 128,
  heads: 4,
  layers: 4,
  activation: "gelu",
  norm: "pre",
  bias: false,
  positions: "learned",
  tieHead: true,
  finalNorm: true,
};

function loadAverage() {
  try {
    return readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");
  } catch {
    return "?";
  }
}

const info = await init({ threads });
const model = await LanguageModel.create(CONFIG);
const prompt = new Int32Array([0]);
console.log(
  `\n== wasm generation: ${TOKENS} tokens at batch 1 after a 1-token prompt, char GPT at context ${CONFIG.context}, ` +
    `temperature 1; Node ${process.version}, threaded ${info.threaded}, ${info.threads} threads, simd ${info.simd}; ` +
    `load average ${loadAverage()}`,
);
console.log(`${"side".padEnd(8)} ${"cache".padEnd(8)} ${"runs".padStart(6)} ${"median ms".padStart(10)} ${"tokens/s".padStart(12)}`);
const perS = {};
for (const useCache of [true, false]) {
  const runs = runsOption || (useCache ? 20 : 5);
  const ms = [];
  for (let r = 0; r < warmup + runs; r++) {
    const t0 = performance.now();
    const out = await model.generate(prompt, { maxTokens: TOKENS, temperature: 1, seed: r, useCache });
    const elapsed = performance.now() - t0;
    if (out.length !== TOKENS) throw new Error(`generate made ${out.length} tokens, expected ${TOKENS}`);
    if (r >= warmup) ms.push(elapsed);
  }
  const median = [...ms].sort((a, b) => a - b)[Math.floor(ms.length / 2)];
  const tokensPerS = TOKENS / (median / 1e3);
  const side = useCache ? "on" : "off";
  perS[side] = tokensPerS;
  console.log(`${"wasm".padEnd(8)} ${side.padEnd(8)} ${String(runs).padStart(6)} ${median.toFixed(2).padStart(10)} ${tokensPerS.toFixed(0).padStart(12)}`);
  console.log(
    `RESULT bench=generate side=wasm cache=${side} threads=${info.threads} isa=wasm-${info.simd} tokens=${TOKENS} ` +
      `context=${CONFIG.context} runs=${runs} ms_per_run=${median.toFixed(3)} tokens_per_s=${tokensPerS.toFixed(1)} ` +
      `load="${loadAverage()}"`,
  );
}
console.log(`wasm cache speed-up: ${(perS.on / perS.off).toFixed(1)}x (target >= 10x)`);
model.dispose();
