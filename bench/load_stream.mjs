// The npm package's side of bench/run_load.sh (issue 35): LanguageModel.load of a checkpoint file streamed from
// disk (fs.createReadStream as a web ReadableStream, as a download arrives) or given as bytes (the whole file read
// first, the pre-streaming way), in this fresh Node process. Prints
//   RESULT bench=load-node mode=<stream|bytes> file_mb=<MB> seconds=<s> wasm_heap_used_mb=<MB> peak_rss_mb=<MB>
//          peak_over_file=<x>
// peak_rss is the process's VmHWM (the wasm memory, JS buffers and Node itself; Node alone is about 50 MB).
// A Hugging Face GPT-2 folder (qkv_load_bench write-hub DIR) the same two ways: LanguageModel.fromPretrained with
// model.safetensors as a Blob of the file on disk (streamed into the core), or importPretrained of its bytes.
//   node bench/load_stream.mjs FILE [stream|bytes]      (after `npm run build:web`)
//   node bench/load_stream.mjs DIR pretrained|pretrained-bytes
import { createReadStream, openAsBlob, readFileSync, statSync } from "node:fs";
import { Readable } from "node:stream";
import { LanguageModel, memory } from "../web/dist/node.js";
import { loadAverage } from "./node_util.mjs";

const file = process.argv[2];
const mode = process.argv[3] ?? "stream";
if (!file || !["stream", "bytes", "pretrained", "pretrained-bytes"].includes(mode)) {
  console.error("usage: node bench/load_stream.mjs FILE [stream|bytes] | DIR pretrained|pretrained-bytes");
  process.exit(2);
}
const hwm = () => Number(/VmHWM:\s+(\d+)/.exec(readFileSync("/proc/self/status", "utf8"))[1]) * 1024;
const pretrained = mode.startsWith("pretrained");
const weights = pretrained ? `${file}/model.safetensors` : file;
const size = statSync(weights).size;
const before = await memory();
const t0 = performance.now();
let lm;
if (mode === "pretrained") {
  const config = readFileSync(`${file}/config.json`, "utf8");
  lm = await LanguageModel.fromPretrained({ "config.json": config, "model.safetensors": await openAsBlob(weights) });
} else if (mode === "pretrained-bytes") {
  lm = await LanguageModel.importPretrained(readFileSync(`${file}/config.json`, "utf8"), readFileSync(weights));
} else {
  const source = mode === "stream" ? Readable.toWeb(createReadStream(file, { highWaterMark: 1 << 20 })) : readFileSync(file);
  lm = await LanguageModel.load(source);
}
const seconds = (performance.now() - t0) / 1000;
const after = await memory();
const peak = hwm();
console.log(`load average ${loadAverage()}; ${lm.numParameters()} parameters`);
console.log(
  `RESULT bench=${pretrained ? "pretrained-node" : "load-node"} mode=${mode} file_mb=${(size / 1e6).toFixed(1)} seconds=${seconds.toFixed(2)} ` +
    `wasm_heap_used_mb=${((after.heapUsedBytes - before.heapUsedBytes) / 1e6).toFixed(1)} ` +
    `peak_rss_mb=${(peak / 1e6).toFixed(1)} peak_over_file=${(peak / size).toFixed(2)}`,
);
lm.dispose();
process.exit(0);
