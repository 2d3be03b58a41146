// Helpers shared by the web benchmarks (bench/web/*.mjs): command-line options, the safetensors files that
// export_model.py writes, timing statistics, the machine's load, and the RESULT lines report.mjs reads.
import { readFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const HERE = path.dirname(fileURLToPath(import.meta.url));
export const ROOT = path.resolve(HERE, "..", "..");

/** `--name value` from the command line (a number when the fallback is one), else the fallback. */
export function option(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  if (i < 0 || i + 1 >= process.argv.length) return fallback;
  const v = process.argv[i + 1];
  return typeof fallback === "number" ? Number(v) : v;
}

/**
 * Reads a safetensors file: 8-byte little-endian header size, JSON header, raw little-endian tensors.
 * Returns { metadata, tensors: { name: { dtype, shape, data } } } with data a Float32Array or Int32Array
 * (copies, so they are aligned whatever the offsets).
 */
export function readSafetensors(file) {
  const bytes = readFileSync(file);
  const n = Number(bytes.readBigUInt64LE(0));
  const header = JSON.parse(bytes.subarray(8, 8 + n).toString("utf8"));
  const base = 8 + n;
  const metadata = header.__metadata__ ?? {};
  const tensors = {};
  for (const [name, t] of Object.entries(header)) {
    if (name === "__metadata__") continue;
    const [begin, end] = t.data_offsets;
    const raw = bytes.subarray(base + begin, base + end);
    const copy = new Uint8Array(raw).buffer;
    const Kind = { F32: Float32Array, I32: Int32Array }[t.dtype];
    if (!Kind) throw new Error(`${file}: tensor ${name} has dtype ${t.dtype}; expected F32 or I32`);
    tensors[name] = { dtype: t.dtype, shape: t.shape, data: new Kind(copy) };
  }
  return { metadata, tensors, bytes: new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength) };
}

/** The files export_model.py wrote into `dir` (build/bench-web by default). */
export function benchInputs(dir) {
  const missing = (f) =>
    new Error(`${f} is missing: run bench/run_web.sh (or /usr/bin/python3 bench/web/export_model.py ${dir}) first`);
  const file = (name) => path.join(dir, name);
  let ckpt, ref;
  try {
    ckpt = readSafetensors(file("char_gpt.safetensors"));
    ref = readSafetensors(file("reference.safetensors"));
  } catch (e) {
    if (e.code === "ENOENT") throw missing(e.path);
    throw e;
  }
  const config = JSON.parse(ckpt.metadata["qkv.config"]);
  const optimizer = JSON.parse(ckpt.metadata["qkv.optimizer"]);
  return { ckpt, ref, config, optimizer, file };
}

/** The batch-th training batch of the reference file: inputs and targets, (12, 64) int32 each. */
export function trainingBatch(ref, i) {
  const x = ref.tensors.batch_inputs, y = ref.tensors.batch_targets;
  const [n, b, t] = x.shape;
  const k = i % n, size = b * t;
  return { inputs: x.data.subarray(k * size, (k + 1) * size), targets: y.data.subarray(k * size, (k + 1) * size), batch: b, seq: t };
}

// learningRateAt lives in schedule.mjs (no Node imports: bench/webgpu.mjs bundles tfjs_gpt.mjs for the browser).
export { learningRateAt } from "./schedule.mjs";

export function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

export function mean(xs) {
  return xs.reduce((a, b) => a + b, 0) / xs.length;
}

/** The p-th quantile (0..1) by nearest rank. */
export function quantile(xs, p) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(p * s.length) - 1))];
}

export function loadAverage() {
  try {
    return readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");
  } catch {
    return os.loadavg().map((x) => x.toFixed(2)).join(" ");
  }
}

/** max |a - b| over two equally long arrays. */
export function maxAbsDiff(a, b) {
  if (a.length !== b.length) throw new Error(`length ${a.length} vs ${b.length}`);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

/** The number of OS threads of this process now (Linux), to see what a library's "threads" setting started. */
export function osThreads() {
  try {
    return Number(/^Threads:\s+(\d+)/m.exec(readFileSync("/proc/self/status", "utf8"))[1]);
  } catch {
    return undefined;
  }
}

export function peakRssMiB() {
  return process.resourceUsage().maxRSS / 1024; // KiB on Linux
}

/** Prints one machine-readable result line: `RESULT {json}`; report.mjs builds the tables from them. */
export function result(fields) {
  console.log(`RESULT ${JSON.stringify({ ...fields, node: process.version, load: loadAverage(), time: new Date().toISOString() })}`);
}

/** The version field of an installed package's package.json (bench/web/node_modules), or "?". */
export function packageVersion(name) {
  try {
    return JSON.parse(readFileSync(path.join(HERE, "node_modules", name, "package.json"), "utf8")).version;
  } catch {
    return "?";
  }
}
