// The tables of the web benchmarks, from the `RESULT {json}` lines of train.mjs, latency.mjs and sizes.mjs.
//
// usage: node bench/web/report.mjs [--dir build/bench-web]   (reads DIR/logs/*.log and DIR/logits_*.f32)
import { existsSync, readFileSync, readdirSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { ROOT, maxAbsDiff, option } from "./lib.mjs";

const dir = path.resolve(option("dir", path.join(ROOT, "build", "bench-web")));
const logDir = path.join(dir, "logs");
const logs = existsSync(logDir) ? readdirSync(logDir).filter((f) => f.endsWith(".log")).sort().map((f) => path.join(logDir, f)) : [];
if (!logs.length) throw new Error(`no logs in ${logDir}: run bench/run_web.sh first`);
const results = [];
for (const f of logs) {
  for (const line of readFileSync(f, "utf8").split("\n")) {
    if (line.startsWith("RESULT ")) results.push({ ...JSON.parse(line.slice(7)), log: path.basename(f) });
  }
}
const fixed = (x, d) => (x === undefined || Number.isNaN(x) ? "-" : x.toFixed(d));
const pad = (s, n) => String(s).padEnd(n);
const lpad = (s, n) => String(s).padStart(n);
const loads = [...new Set(results.map((r) => r.load).filter(Boolean))];

console.log("\n==================== qkv vs TensorFlow.js and ONNX Runtime Web (bench/run_web.sh) ====================");
console.log(
  `machine: ${os.cpus()[0]?.model ?? "?"}, ${os.cpus().length} cores; Node ${results[0]?.node ?? process.version}; ` +
    `1/5/15-minute load averages seen during the runs: ${loads.length ? loads.join(" | ") : "?"}`,
);
console.log("(the machine is shared: a load above ~1 on 2 cores depresses every figure, the multi-threaded ones most)");

// ---- 1. training step ----
const train = results.filter((r) => r.bench === "train");
if (train.length) {
  const t0 = train[0];
  console.log(
    `\n1. Training step: char GPT (nanoGPT CPU config: vocab 65, 4 pre-LN layers, 4 heads, n_embd 128, context 64, GELU, ` +
      `no biases, tied head), batch ${t0.batch} x ${t0.seq} tokens; AdamW (0.9, 0.99), eps 1e-8, weight decay 0.1 on matrices, ` +
      `clip 1.0, the recipe's lr schedule. Every side starts from the same weights and trains on the same batches; ` +
      `ms/step = median of the timed steps after the warm-up ones; tokens/s = ${t0.batch * t0.seq} / median step time.`,
  );
  const qkvMain = train.filter((r) => r.side === "qkv").sort((a, b) => b.threads - a.threads)[0];
  const head = `${pad("side", 34)} ${pad("version", 8)} ${lpad("threads", 7)} ${lpad("params", 8)} ${lpad("steps", 9)} ${lpad("ms/step", 9)} ${lpad("mean", 9)} ${lpad("tokens/s", 9)} ${lpad(qkvMain ? `qkv ${qkvMain.threads}thr / this` : "", 16)}  same model? (max |loss - PyTorch| over steps)`;
  console.log(head);
  const label = (r) =>
    r.side === "qkv" ? `qkv (wasm, ${r.threads === 1 ? "1 thread" : `${r.threads} threads`})` : r.name + (r.backend.includes("matmul flags") ? " (matmul flags)" : "");
  for (const r of train) {
    const ratio = qkvMain && r !== qkvMain ? `${(qkvMain.tokens_per_s / r.tokens_per_s).toFixed(2)}x` : "";
    const same = r.same_model ? `yes (${r.max_diff_torch.toExponential(1)}, 1..${r.check_steps})` : `NO (${r.max_diff_torch.toExponential(1)}): ${r.note}`;
    console.log(
      `${pad(label(r), 34)} ${pad(r.version, 8)} ${lpad(r.threads, 7)} ${lpad(r.params, 8)} ${lpad(`${r.warmup}+${r.steps}`, 9)} ${lpad(fixed(r.ms_median, 1), 9)} ` +
        `${lpad(fixed(r.ms_mean, 1), 9)} ${lpad(fixed(r.tokens_per_s, 0), 9)} ${lpad(ratio, 16)}  ${same}`,
    );
  }
  for (const r of train) console.log(`   ${pad(label(r), 22)} ${r.backend}; loss step 1 ${fixed(r.loss_first, 4)} (ln 65 = ${Math.log(65).toFixed(4)}), step ${r.check_steps} ${fixed(r.loss_at_check, 4)}; peak RSS ${fixed(r.peak_rss_mib, 0)} MiB`);
  const tfWasm = train.find((r) => r.side === "tfjs-wasm" && !r.backend.includes("matmul flags"));
  if (qkvMain && tfWasm) {
    const x = qkvMain.tokens_per_s / tfWasm.tokens_per_s;
    const fair = qkvMain.same_model && tfWasm.same_model ? "" : " (NOT the same model: not a valid comparison)";
    console.log(`   target: qkv (${qkvMain.threads} threads) >= 3x TF.js wasm tokens/s: ${x.toFixed(2)}x ${x >= 3 ? "ok" : "NO"}${fair}`);
    const qkv1 = train.find((r) => r.side === "qkv" && r.threads === 1);
    if (qkv1 && qkvMain.threads !== 1) console.log(`   at equal threads (TF.js wasm runs 1 thread under Node): qkv 1 thread / TF.js wasm = ${(qkv1.tokens_per_s / tfWasm.tokens_per_s).toFixed(2)}x`);
  }
}

// ---- 2. batch-1 forward latency ----
const lat = results.filter((r) => r.bench === "latency");
if (lat.length) {
  console.log(
    "\n2. Batch-1 forward latency (logits), the same weights: PyTorch's init written as a qkv checkpoint (LanguageModel.load) and " +
      "exported to ONNX (opset 17, static shape per length) for ONNX Runtime Web's wasm backend; the same thread count; each " +
      "side's logits checked against PyTorch's before timing. ms = median of the timed runs after the warm-up runs (the best " +
      "median of the rounds when run more than once); a run = input array in, logits Float32Array out.",
  );
  console.log(`${pad("tokens", 6)} ${pad("side", 26)} ${lpad("threads", 7)} ${lpad("rounds", 6)} ${lpad("median ms", 10)} ${lpad("p10", 8)} ${lpad("p90", 8)} ${lpad("|d| vs torch", 12)}  ratio qkv/ORT  target`);
  const keys = [...new Set(lat.map((r) => `${r.seq} ${r.requested_threads ?? ""}`))];
  const groups = keys.map((k) => k.split(" ")).sort((a, b) => b[0] - a[0] || a[1] - b[1]);
  for (const [seqText, threadsText] of groups) {
    const seq = Number(seqText);
    const mine = lat.filter((r) => r.seq === seq && String(r.requested_threads ?? "") === threadsText);
    const best = {};
    for (const side of ["qkv", "ort"]) {
      const rs = mine.filter((r) => r.side === side);
      const timed = rs.filter((r) => r.ms_median !== undefined);
      if (!rs.length) continue;
      if (!timed.length) {
        const r = rs[0];
        console.log(`${pad(seq, 6)} ${pad(side === "qkv" ? "qkv" : "ONNX Runtime Web", 26)} ${r.skipped ? `skipped: ${r.skipped}` : `WRONG logits: max |d| ${fixed(r.max_diff_torch, 6)}, not timed`}`);
        continue;
      }
      const b = timed.reduce((x, y) => (y.ms_median < x.ms_median ? y : x));
      best[side] = b;
      const ratio = side === "ort" && best.qkv ? `${(best.qkv.ms_median / b.ms_median).toFixed(2)}x` : "";
      const target = side === "ort" && best.qkv ? (best.qkv.ms_median <= b.ms_median ? "<= 1.0x ok" : "<= 1.0x NO") : "";
      console.log(
        `${pad(seq, 6)} ${pad(`${b.name} ${b.version}`, 26)} ${lpad(b.threads, 7)} ${lpad(timed.length, 6)} ${lpad(fixed(b.ms_median, 3), 10)} ${lpad(fixed(b.ms_p10, 3), 8)} ` +
          `${lpad(fixed(b.ms_p90, 3), 8)} ${lpad(b.max_diff_torch.toExponential(1), 12)}  ${pad(ratio, 13)}  ${target}`,
      );
      if (timed.length > 1) console.log(`${pad("", 6)}   rounds' medians: ${timed.map((r) => fixed(r.ms_median, 3)).join(", ")} ms`);
    }
  }
  // qkv's logits against ORT's, directly (the files of the last run at each length).
  for (const seq of [...new Set(lat.map((r) => r.seq))].sort((a, b) => b - a)) {
    const fq = path.join(dir, `logits_qkv_t${seq}.f32`), fo = path.join(dir, `logits_ort_t${seq}.f32`);
    if (existsSync(fq) && existsSync(fo)) {
      const read = (f) => new Float32Array(new Uint8Array(readFileSync(f)).buffer);
      const d = maxAbsDiff(read(fq), read(fo));
      console.log(`   qkv vs ORT logits (1 x ${seq}): max |d| = ${d.toExponential(2)} ${d <= 1e-4 ? "<= 1e-4 ok" : "> 1e-4 MISMATCH"}`);
    }
  }
  const started = [...new Set(lat.map((r) => r.requested_threads))].filter((t) => t !== undefined).sort((a, b) => a - b).map((t) => {
    const n = (side) => lat.find((r) => r.side === side && r.requested_threads === t && r.os_threads_started !== undefined)?.os_threads_started ?? "?";
    return `threads ${t}: ORT ${n("ort")}, qkv ${n("qkv")}`;
  });
  console.log(`   OS threads each library started (its pool, on worker_threads): ${started.join("; ")}`);
}

// ---- 3. package size ----
const size = results.filter((r) => r.bench === "size");
if (size.length) {
  console.log("\n3. Download size in a browser app: the JS a minimal app imports, bundled and minified alike (esbuild), plus the files the library fetches (.wasm, glue, workers); totals in KiB");
  console.log(`${pad("library", 26)} ${pad("build", 30)} ${lpad("raw", 9)} ${lpad("gzip", 9)} ${lpad("brotli", 9)}  what`);
  for (const r of size) {
    console.log(`${pad(`${r.library} ${r.version}`, 26)} ${pad(r.build, 30)} ${lpad((r.raw / 1024).toFixed(1), 9)} ${lpad((r.gzip / 1024).toFixed(1), 9)} ${lpad((r.brotli / 1024).toFixed(1), 9)}  ${r.how}`);
  }
  const q = size.find((r) => r.library === "qkv" && r.build.startsWith("threaded"));
  const t = size.find((r) => r.library === "TF.js" && r.build.startsWith("threaded"));
  const o = size.find((r) => r.library === "ONNX Runtime Web");
  if (q && t && o) {
    console.log(`   gzip, threaded builds: qkv / TF.js (core + wasm) = ${(q.gzip / t.gzip).toFixed(2)}x, qkv / ORT web = ${(q.gzip / o.gzip).toFixed(2)}x (per-file sizes: ${path.join(logDir, "30-size.log")})`);
  }
}
