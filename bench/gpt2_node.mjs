// The JavaScript sides of the GPT-2 124M generation benchmark (bench/run_gpt2.sh; issue 35): batch 1, a prompt
// of --prompt ids, --new greedy tokens with the KV cache, --runs generations after one load, in this fresh Node
// process (one side per process, so that the peak resident memory is that side's alone).
//
//   node bench/gpt2_node.mjs wasm DIR       qkv's npm package (web/dist, wasm, init({ threads })):
//                                            LanguageModel.fromPretrained of the Hub folder DIR (config.json and
//                                            model.safetensors as Blobs from fs.openAsBlob, read as streams),
//                                            then stream(prompt, { maxTokens, temperature: 0 })
//   node bench/gpt2_node.mjs ort-web FILE   onnxruntime-web (wasm, env.wasm.numThreads = threads) on FILE, the
//   node bench/gpt2_node.mjs ort-node FILE  ONNX export with a KV cache (bench/gpt2_export.py); onnxruntime-node
//                                            (intraOpNumThreads = threads). Both: the loop Transformers.js runs,
//                                            the prompt once with an empty past, then one token a step with the
//                                            presents as the next past, the argmax of the last row of logits.
//   options: --threads N (2) --prompt N (32) --new N (64) --runs N (3)
//
// prefill = the first token's time (the prompt's forward and the first argmax), decode = each later token's;
// load = from nothing to a model ready to run (reading the files included). Prints per run, then one line:
//   RESULT side=<wasm|ort-web|ort-node> threads=<n> version=<v> load_s=<s> prefill_ms=<best run's>
//     first_prefill_ms=<run 0's: the first generation after the load> decode_ms=<best run's median>
//     decode_ms_runs=<each run's> peak_rss_mb=<VmHWM> tokens=<id,id,...>
// Run it from bench/web's folder tree or with NODE_PATH: the peers are installed under bench/web/node_modules.
import { openAsBlob, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { loadAverage, option } from "./node_util.mjs";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const peers = createRequire(path.join(HERE, "web", "package.json"));
const [side, file] = process.argv.slice(2, 4);
const threads = option("threads", 2), promptLen = option("prompt", 32), fresh = option("new", 64);
const runs = option("runs", 3);
if (!["wasm", "ort-web", "ort-node"].includes(side) || !file) {
  console.error("usage: node bench/gpt2_node.mjs wasm DIR | ort-web FILE | ort-node FILE [--threads N] [--prompt N] [--new N] [--runs N]");
  process.exit(2);
}
const VOCAB = 50257, LAYERS = 12, HEADS = 12, HEAD_DIM = 64;
const prompt = Array.from({ length: promptLen }, (_, i) => (i * 7919 + 13) % VOCAB);
const hwmMb = () => (Number(/VmHWM:\s+(\d+)/.exec(readFileSync("/proc/self/status", "utf8"))[1]) * 1024) / 1e6;

/** A side: load() once, then generate(onToken) per run, calling onToken(id) as each token is chosen. */
async function qkvSide() {
  const { init, LanguageModel } = await import("../web/dist/node.js");
  const info = await init({ threads });
  const lm = await LanguageModel.fromPretrained({
    "config.json": await openAsBlob(path.join(file, "config.json")),
    "model.safetensors": await openAsBlob(path.join(file, "model.safetensors")),
  });
  return {
    version: `qkv ${info.threaded ? "threaded" : "single-threaded"} ${info.threads} threads`,
    async generate(onToken) {
      for await (const t of lm.stream(Int32Array.from(prompt), { maxTokens: fresh, temperature: 0 })) onToken(t);
    },
  };
}

async function ortSide(web) {
  const pkg = web ? "onnxruntime-web" : "onnxruntime-node";
  const ort = await import(peers.resolve(pkg));
  const version = JSON.parse(readFileSync(path.join(HERE, "web", "node_modules", pkg, "package.json"), "utf8")).version;
  let session;
  if (web) {
    ort.env.wasm.numThreads = threads;
    session = await ort.InferenceSession.create(readFileSync(file), {
      executionProviders: ["wasm"],
      graphOptimizationLevel: "all",
    });
  } else {
    session = await ort.InferenceSession.create(file, {
      executionProviders: ["cpu"],
      graphOptimizationLevel: "all",
      intraOpNumThreads: threads,
      interOpNumThreads: 1,
      executionMode: "sequential",
    });
  }
  const int64 = (values, dims) => new ort.Tensor("int64", BigInt64Array.from(values, BigInt), dims);
  return {
    version: `${pkg} ${version}`,
    async generate(onToken) {
      let past = {};
      for (let l = 0; l < LAYERS; ++l)
        for (const kv of ["key", "value"])
          past[`past_key_values.${l}.${kv}`] = new ort.Tensor("float32", new Float32Array(0), [1, HEADS, 0, HEAD_DIM]);
      let ids = prompt, length = 0;
      for (let n = 0; n < fresh; ++n) {
        const T = ids.length;
        const out = await session.run({
          input_ids: int64(ids, [1, T]),
          attention_mask: int64(new Array(length + T).fill(1), [1, length + T]),
          position_ids: int64(Array.from({ length: T }, (_, i) => length + i), [1, T]),
          ...past,
        });
        const logits = out.logits.data, row = (T - 1) * VOCAB;
        let best = 0;
        for (let v = 1; v < VOCAB; ++v) if (logits[row + v] > logits[row + best]) best = v;
        out.logits.dispose?.();
        for (const value of Object.values(past)) value.dispose?.();
        past = {};
        for (let l = 0; l < LAYERS; ++l)
          for (const kv of ["key", "value"]) past[`past_key_values.${l}.${kv}`] = out[`present.${l}.${kv}`];
        length += T;
        ids = [best];
        onToken(best);
      }
    },
  };
}

const t0 = performance.now();
const s = side === "wasm" ? await qkvSide() : await ortSide(side === "ort-web");
const loadS = (performance.now() - t0) / 1000;
let tokens = null, bestPrefill = Infinity, bestDecode = Infinity, firstPrefill = 0;
const decodeRuns = [];
for (let r = 0; r < runs; ++r) {
  const out = [], ms = [];
  let last = performance.now();
  await s.generate((t) => {
    const now = performance.now();
    ms.push(now - last);
    last = now;
    out.push(t);
  });
  if (out.length !== fresh || (tokens && out.join() !== tokens.join())) {
    console.error(`gpt2_node ${side}: run ${r} made ${out.length} tokens (expected ${fresh}, the same each run)`);
    process.exit(1);
  }
  tokens = out;
  const prefill = ms[0], steps = ms.slice(1).sort((a, b) => a - b);
  const median = steps[steps.length >> 1] ?? 0;
  console.log(
    `run ${r}: prefill ${prefill.toFixed(1)} ms (with the first token), decode median ${median.toFixed(2)} ms/token ` +
      `(min ${steps[0]?.toFixed(2)}, max ${steps.at(-1)?.toFixed(2)})`,
  );
  if (r === 0) firstPrefill = prefill;
  bestPrefill = Math.min(bestPrefill, prefill);
  bestDecode = Math.min(bestDecode, median);
  decodeRuns.push(median.toFixed(2));
}
console.log(`${s.version}; load average ${loadAverage()}`);
console.log(
  `RESULT side=${side} threads=${threads} version="${s.version}" load_s=${loadS.toFixed(3)} ` +
    `prefill_ms=${bestPrefill.toFixed(1)} first_prefill_ms=${firstPrefill.toFixed(1)} decode_ms=${bestDecode.toFixed(2)} decode_ms_runs=${decodeRuns.join(",")} ` +
    `peak_rss_mb=${hwmMb().toFixed(0)} tokens=${tokens.join(",")}`,
);
process.exit(0);
