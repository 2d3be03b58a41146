// The JavaScript sides of the GPT-2 generation benchmark (bench/run_gpt2.sh; issues 35 and 36): batch 1, a prompt
// of --prompt ids, --new greedy tokens with the KV cache, --runs generations after one load, in this fresh Node
// process (one side per process, so that the peak resident memory is that side's alone).
//
//   node bench/gpt2_node.mjs wasm DIR       qkv's npm package (web/dist, wasm, init({ threads })):
//                                            LanguageModel.fromPretrained of the Hub folder DIR (config.json and
//                                            model.safetensors as Blobs from fs.openAsBlob, read as streams), then
//                                            model.quantize({ weights }) with --weights int8|q4|f16|bf16;
//                                            then stream(prompt, { maxTokens, temperature: 0 })
//   node bench/gpt2_node.mjs wasm CKPT      the same from a qkv checkpoint file (LanguageModel.load of a Blob):
//                                            the quantized checkpoints `qkv quantize` writes
//   node bench/gpt2_node.mjs ort-web FILE   onnxruntime-web (wasm, env.wasm.numThreads = threads) on FILE, the
//   node bench/gpt2_node.mjs ort-node FILE  ONNX export with a KV cache (bench/gpt2_export.py, or its 8-/4-bit
//                                            rewrite by bench/gpt2_quantize_onnx.py); onnxruntime-node
//                                            (intraOpNumThreads = threads). Both: the loop Transformers.js runs,
//                                            the prompt once with an empty past, then one token a step with the
//                                            presents as the next past, the argmax of the last row of logits.
//   node bench/gpt2_node.mjs alternate DIR --sides wasm,wasm-int8,ort-web,ort-web-q8,...
//                                            the sides in one process, one generation of each in turn (below)
//   node bench/gpt2_node.mjs refuse SOURCE   a model too big for the wasm core: the refusal's message, time, peak RSS
//   node bench/gpt2_node.mjs compare FP32.onnx QUANT.onnx [ort-node|ort-web]
//                                            a quantized export's logits against the fp32 export's
//   options: --threads N (2) --prompt N (32) --new N (64) --runs N (3) --label SIDE (RESULT's side=)
//
// prefill = the first token's time (the prompt's forward and the first argmax), decode = each later token's;
// load = from nothing to a model ready to run (reading the files included). Prints per run, then one line:
//   RESULT side=<wasm|ort-web|ort-node|label> threads=<n> version=<v> load_s=<s> prefill_ms=<best run's>
//     first_prefill_ms=<run 0's: the first generation after the load> decode_ms=<best run's median>
//     decode_ms_runs=<each run's> params_mb=<qkv: memory().parameters> rss_load_mb=<VmRSS after the load>
//     peak_rss_mb=<VmHWM> tokens=<id,id,...>
// The peers are resolved from bench/web/node_modules; the package from web/dist, or the folder QKV_BENCH_DIST names.
import { openAsBlob, readFileSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { loadAverage, option } from "./node_util.mjs";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const peers = createRequire(path.join(HERE, "web", "package.json"));
const [side, file] = process.argv.slice(2, 4);
const threads = option("threads", 2), promptLen = option("prompt", 32), fresh = option("new", 64);
const runs = option("runs", 3);
if (!["wasm", "ort-web", "ort-node", "alternate", "compare", "refuse"].includes(side) || !file) {
  console.error(
    "usage: node bench/gpt2_node.mjs wasm DIR | ort-web FILE | ort-node FILE | alternate DIR " +
      "[--threads N] [--prompt N] [--new N] [--runs N]",
  );
  process.exit(2);
}
const VOCAB = 50257, LAYERS = 12, HEADS = 12, HEAD_DIM = 64;
const prompt = Array.from({ length: promptLen }, (_, i) => (i * 7919 + 13) % VOCAB);
const hwmMb = () => (Number(/VmHWM:\s+(\d+)/.exec(readFileSync("/proc/self/status", "utf8"))[1]) * 1024) / 1e6;

/** The text after `--name` on the command line, or `fallback`. */
const optionText = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
};

/**
 * A side: load() once, then generate(onToken) per run, calling onToken(id) as each token is chosen. `source` is a
 * Hub folder (fromPretrained; then model.quantize({ weights }) when `weights` is given) or a qkv checkpoint file
 * (LanguageModel.load: the quantized checkpoints `qkv quantize` writes). `paramsMb`: memory().parameters, the
 * weights as the model holds them.
 */
async function qkvSide(source, weights) {
  // QKV_BENCH_DIST: another build of the package's dist folder (an A/B of two builds of the core).
  const dist = process.env.QKV_BENCH_DIST ? path.resolve(process.env.QKV_BENCH_DIST) : path.join(HERE, "..", "web", "dist");
  const { init, LanguageModel } = await import(pathToFileURL(path.join(dist, "node.js")).href);
  const info = await init({ threads });
  let lm;
  if (statSync(source).isDirectory()) {
    lm = await LanguageModel.fromPretrained({
      "config.json": await openAsBlob(path.join(source, "config.json")),
      "model.safetensors": await openAsBlob(path.join(source, "model.safetensors")),
    });
    if (weights && weights !== "f32") await lm.quantize({ weights });
  } else {
    if (weights) throw new Error(`--weights ${weights} quantizes a Hub folder; ${source} is a checkpoint`);
    lm = await LanguageModel.load(await openAsBlob(source));
  }
  const paramsMb = (await lm.memory()).parameters / 1e6;
  return {
    version: `qkv ${info.threaded ? "threaded" : "single-threaded"} ${info.threads} threads`,
    paramsMb,
    async generate(onToken) {
      for await (const t of lm.stream(Int32Array.from(prompt), { maxTokens: fresh, temperature: 0 })) onToken(t);
    },
  };
}

async function ortSide(web, onnx) {
  const pkg = web ? "onnxruntime-web" : "onnxruntime-node";
  const ort = await import(peers.resolve(pkg));
  const version = JSON.parse(readFileSync(path.join(HERE, "web", "node_modules", pkg, "package.json"), "utf8")).version;
  let session;
  if (web) {
    ort.env.wasm.numThreads = threads;
    session = await ort.InferenceSession.create(readFileSync(onnx), {
      executionProviders: ["wasm"],
      graphOptimizationLevel: "all",
    });
  } else {
    session = await ort.InferenceSession.create(onnx, {
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
    /** The logits (T, V) of `ids` with an empty past: the prompt's forward. */
    async logits(ids) {
      const feeds = {
        input_ids: int64(ids, [1, ids.length]),
        attention_mask: int64(new Array(ids.length).fill(1), [1, ids.length]),
        position_ids: int64(ids.map((_, i) => i), [1, ids.length]),
      };
      for (let l = 0; l < LAYERS; ++l)
        for (const kv of ["key", "value"])
          feeds[`past_key_values.${l}.${kv}`] = new ort.Tensor("float32", new Float32Array(0), [1, HEADS, 0, HEAD_DIM]);
      const out = await session.run(feeds);
      const logits = Float32Array.from(out.logits.data);
      for (const value of Object.values(out)) value.dispose?.();
      return logits;
    },
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

/** One generation of side `s`: its tokens, the first token's ms (prefill) and the median of the others'. */
async function measure(s) {
  const out = [], ms = [];
  let last = performance.now();
  await s.generate((t) => {
    const now = performance.now();
    ms.push(now - last);
    last = now;
    out.push(t);
  });
  const steps = ms.slice(1).sort((a, b) => a - b);
  return { tokens: out, prefill: ms[0], median: steps[steps.length >> 1] ?? 0, min: steps[0], max: steps.at(-1) };
}

if (side === "refuse") {
  // node bench/gpt2_node.mjs refuse SOURCE: a model too big for the wasm core (a Hub folder for fromPretrained, or a
  // checkpoint for load) must be refused before its weights are allocated: prints the message, how long the refusal
  // took and the process's peak resident memory (a refusal before allocation stays near the bare runtime's).
  const t = performance.now();
  let message = null;
  try {
    const m = await qkvSide(file, optionText("weights", ""));
    message = `NOT REFUSED: loaded, ${m.paramsMb.toFixed(1)} MB of weights`;
  } catch (e) {
    message = e instanceof Error ? e.message : String(e);
  }
  console.log(
    `RESULT side=refuse source=${path.basename(file)} refused=${!message.startsWith("NOT REFUSED")} ` +
      `ms=${(performance.now() - t).toFixed(0)} peak_rss_mb=${hwmMb().toFixed(0)} message="${message.replaceAll('"', "'")}"`,
  );
  process.exit(0);
}

if (side === "compare") {
  // node bench/gpt2_node.mjs compare FP32.onnx QUANT.onnx [ort-node|ort-web]: how far a quantized export's logits
  // are from the fp32 export's (the prompt's forward, every position), and how many of the 64 greedy tokens agree.
  const [quant, engine = "ort-node"] = process.argv.slice(4, 6);
  const a = await ortSide(engine === "ort-web", file), b = await ortSide(engine === "ort-web", quant);
  const la = await a.logits(prompt), lb = await b.logits(prompt);
  let diff = 0, scale = 0, agree = 0;
  for (let i = 0; i < la.length; ++i) {
    diff = Math.max(diff, Math.abs(la[i] - lb[i]));
    scale = Math.max(scale, Math.abs(la[i]));
  }
  const argmax = (l, t) => {
    let best = t * VOCAB;
    for (let v = t * VOCAB + 1; v < (t + 1) * VOCAB; ++v) if (l[v] > l[best]) best = v;
    return best;
  };
  for (let t = 0; t < prompt.length; ++t) agree += argmax(la, t) === argmax(lb, t) ? 1 : 0;
  const ta = (await measure(a)).tokens, tb = (await measure(b)).tokens;
  let lead = 0;
  while (lead < ta.length && ta[lead] === tb[lead]) ++lead;
  console.log(
    `RESULT side=compare engine=${engine} version="${b.version}" quant=${path.basename(quant)} ` +
      `logits_max_abs_diff=${diff.toPrecision(3)} logits_max_abs=${scale.toPrecision(3)} ` +
      `relative=${(diff / scale).toPrecision(3)} prompt_argmax_agree=${agree}/${prompt.length} ` +
      `greedy_leading_agree=${lead}/${ta.length} tokens=${tb.join(",")}`,
  );
  process.exit(0);
}

if (side === "alternate") {
  // --sides (default "wasm,ort-web,ort-node") loaded side by side in this process, then one generation of each in
  // turn, --runs rounds: the machine is shared, and its speed swings over minutes, so each round compares the sides
  // within the same few seconds. An idle pause between two sides lets the one that ran stop spinning its threads.
  // Under DIR: wasm = hub/ (fromPretrained), wasm-<format> = gpt2_<format>.safetensors (`qkv quantize`'s
  // checkpoint; wasm-f32 = imported.safetensors, `qkv import`'s), ort-web / ort-node = gpt2.onnx, ort-web-<q> / ort-node-<q> = gpt2_<q>.onnx (gpt2_quantize_onnx.py).
  const names = optionText("sides", "wasm,ort-web,ort-node").split(",");
  const sides = {};
  for (const name of names) {
    const [engine, ...rest] = name.split("-").reduce((acc, part) => {
      // "ort-web-q8" -> ["ort-web", "q8"], "wasm-int8" -> ["wasm", "int8"]
      if (acc.length === 1 && acc[0] === "ort") return [`ort-${part}`];
      return [...acc, part];
    }, []);
    const format = rest.join("-");
    if (engine === "wasm") {
      const ckpt = format === "f32" ? "imported.safetensors" : `gpt2_${format}.safetensors`;
      sides[name] = await qkvSide(format ? path.join(file, ckpt) : path.join(file, "hub"));
    } else if (engine === "ort-web" || engine === "ort-node") {
      sides[name] = await ortSide(engine === "ort-web", path.join(file, format ? `gpt2_${format}.onnx` : "gpt2.onnx"));
    } else {
      throw new Error(`alternate: unknown side ${name} (wasm[-format], ort-web[-q], ort-node[-q])`);
    }
  }
  const PAIRS = [
    ["wasm", "ort-web"], ["wasm-f32", "ort-web"], ["wasm-int8", "ort-web-q8"], ["wasm-int8", "ort-web-q8nbits"],
    ["wasm-q4", "ort-web-q4"], ["wasm-int8", "wasm-f32"], ["wasm-q4", "wasm-f32"], ["wasm-f16", "wasm-f32"],
    ["wasm-bf16", "wasm-f32"],
  ].filter(([a, b]) => a in sides && b in sides);
  const results = Object.fromEntries(Object.keys(sides).map((k) => [k, []]));
  for (let r = 0; r < runs; ++r) {
    const line = [];
    for (const [name, s] of Object.entries(sides)) {
      await new Promise((resolve) => setTimeout(resolve, 200));
      const m = await measure(s);
      if (m.tokens.length !== fresh) throw new Error(`${name} made ${m.tokens.length} tokens`);
      results[name].push(m);
      line.push(`${name} ${m.prefill.toFixed(0)} / ${m.median.toFixed(2)}`);
    }
    const ratios = PAIRS.map(([a, b]) => `${a} vs ${b} ${(results[b].at(-1).median / results[a].at(-1).median).toFixed(2)}x`);
    console.log(`round ${r} (prefill ms / decode median ms): ${line.join(", ")}; decode ${ratios.join(", ")}; load ${loadAverage()}`);
  }
  const med = (v) => [...v].sort((a, b) => a - b)[v.length >> 1];
  for (const [name, rs] of Object.entries(results)) {
    console.log(
      `RESULT side=alt-${name} threads=${threads} runs=${runs} prefill_ms=${Math.min(...rs.map((m) => m.prefill)).toFixed(1)} ` +
        `decode_ms=${Math.min(...rs.map((m) => m.median)).toFixed(2)} decode_ms_median_of_runs=${med(rs.map((m) => m.median)).toFixed(2)} ` +
        `params_mb=${sides[name].paramsMb?.toFixed(1) ?? "-"} tokens=${rs[0].tokens.join(",")}`,
    );
  }
  // Each pair's ratio round by round (b's time / a's: how many times faster a decodes), the median over rounds.
  for (const [a, b] of PAIRS) {
    const decode = results[a].map((m, i) => results[b][i].median / m.median);
    const prefill = results[a].map((m, i) => results[b][i].prefill / m.prefill);
    console.log(
      `RESULT side=alt-pair a=${a} b=${b} decode_median=${med(decode).toFixed(2)} range=${Math.min(...decode).toFixed(2)}-` +
        `${Math.max(...decode).toFixed(2)} prefill_median=${med(prefill).toFixed(2)}`,
    );
  }
  process.exit(0);
}

const t0 = performance.now();
const s = side === "wasm" ? await qkvSide(file, optionText("weights", "")) : await ortSide(side === "ort-web", file);
const loadS = (performance.now() - t0) / 1000;
const rssLoadMb = (Number(/VmRSS:\s+(\d+)/.exec(readFileSync("/proc/self/status", "utf8"))[1]) * 1024) / 1e6;
let tokens = null, bestPrefill = Infinity, bestDecode = Infinity, firstPrefill = 0;
const decodeRuns = [];
for (let r = 0; r < runs; ++r) {
  const { tokens: out, prefill, median, min, max } = await measure(s);
  if (out.length !== fresh || (tokens && out.join() !== tokens.join())) {
    console.error(`gpt2_node ${side}: run ${r} made ${out.length} tokens (expected ${fresh}, the same each run)`);
    process.exit(1);
  }
  tokens = out;
  console.log(
    `run ${r}: prefill ${prefill.toFixed(1)} ms (with the first token), decode median ${median.toFixed(2)} ms/token ` +
      `(min ${min?.toFixed(2)}, max ${max?.toFixed(2)})`,
  );
  if (r === 0) firstPrefill = prefill;
  bestPrefill = Math.min(bestPrefill, prefill);
  bestDecode = Math.min(bestDecode, median);
  decodeRuns.push(median.toFixed(2));
}
console.log(`${s.version}; load average ${loadAverage()}`);
console.log(
  `RESULT side=${optionText("label", side)} threads=${threads} version="${s.version}" load_s=${loadS.toFixed(3)} ` +
    `prefill_ms=${bestPrefill.toFixed(1)} first_prefill_ms=${firstPrefill.toFixed(1)} decode_ms=${bestDecode.toFixed(2)} decode_ms_runs=${decodeRuns.join(",")} ` +
    `params_mb=${s.paramsMb?.toFixed(1) ?? "-"} rss_load_mb=${rssLoadMb.toFixed(0)} peak_rss_mb=${hwmMb().toFixed(0)} tokens=${tokens.join(",")}`,
);
process.exit(0);
