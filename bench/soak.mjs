// Soak through the npm package in Node (the threaded .wasm): trains the char GPT for many steps and samples
// the process's resident memory and the wasm heap every `--every` steps. Not a test: bench/soak.sh runs it
// and bench/soak_report.py plots the curve beside the native one.
//
// usage: node bench/soak.mjs [--steps 2000] [--every 100] [--threads 2] [--max-seconds 0]
//        [--data ../shared/data/tinyshakespeare.txt]          (after `npm run build:web`)
// prints CSV lines: step,rss_bytes,heap_bytes,heap_used_bytes,loss,seconds
import { readFileSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { option, rng } from "./node_util.mjs";
import { CharTokenizer, init, LanguageModel, memory } from "../web/dist/node.js";

const steps = option("steps", 2000);
const every = option("every", 100);
const threads = option("threads", 2);
const maxSeconds = option("max-seconds", 0);
const dataIndex = process.argv.indexOf("--data");
const dataPath = dataIndex > 0 ? process.argv[dataIndex + 1] : "../shared/data/tinyshakespeare.txt";

await init({ threads });
const text = readFileSync(dataPath, "utf8");
const NO_SPECIALS = { specials: { pad: false, bos: false, eos: false, unk: false } };
const tok = await CharTokenizer.fromText(text, NO_SPECIALS);
const ids = await tok.encode(text);
const trainEnd = Math.floor(ids.length * 0.9);

// The char GPT of the recipe (bench/char_gpt_recipe.h) as the package builds it.
const B = 12;
const T = 64;
const model = await LanguageModel.create({
  vocabSize: tok.size,
  context: T,
  dModel: 128,
  heads: 4,
  layers: 4,
  bias: false,
  lr: 1e-3,
  beta1: 0.9,
  beta2: 0.99,
  weightDecay: 0.1,
  gradClip: 1.0,
  schedule: "cosine",
  warmupSteps: 100,
  totalSteps: steps,
  minLr: 1e-4,
});
const random = rng(1);
// Reused every step, as a careful caller would: what grows then is the library's, not the script's.
const inputs = new Int32Array(B * T);
const targets = new Int32Array(B * T);
const shape = { batch: B, seq: T };

async function sample(step, loss, seconds) {
  const m = await memory();
  console.log([step, process.memoryUsage().rss, m.heapBytes, m.heapUsedBytes, loss, seconds.toFixed(1)].join(","));
}

console.log("step,rss_bytes,heap_bytes,heap_used_bytes,loss,seconds");
await sample(0, Number.NaN, 0);
const t0 = performance.now();
for (let step = 1; step <= steps; step++) {
  for (let b = 0; b < B; b++) {
    const start = Math.floor(random() * (trainEnd - T - 1));
    inputs.set(ids.subarray(start, start + T), b * T);
    targets.set(ids.subarray(start + 1, start + T + 1), b * T);
  }
  const { loss } = await model.trainStep(inputs, targets, shape);
  const seconds = (performance.now() - t0) / 1000;
  if (step % every === 0) await sample(step, loss.toFixed(4), seconds);
  if (maxSeconds > 0 && seconds > maxSeconds) {
    console.error(`soak.mjs: stopped at step ${step}: --max-seconds ${maxSeconds} reached`);
    break;
  }
}
model.dispose();
