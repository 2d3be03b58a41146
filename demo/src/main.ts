// The qkv demo: a small character-level GPT trains on a built-in text, the loss is plotted live and the model
// writes a sample every few hundred steps. Training runs in qkv's Worker; this thread only draws.
import { CharTokenizer, init, LanguageModel, Tokenizer, type RuntimeInfo } from "qkv";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import corpus from "./corpus.txt?raw";

/** Machine-readable state, also mirrored as data-* attributes on #status (read by the e2e test). */
export interface DemoState {
  state: "loading" | "training" | "paused" | "done" | "error";
  crossOriginIsolated: boolean;
  threaded: boolean | null;
  threads: number | null;
  simd: string | null;
  step: number;
  /** Mean training loss of the last 10 steps. */
  lastLoss: number | null;
  firstLoss: number | null;
  /** Step at which the current sample was generated (0: none yet). */
  sampleStep: number;
  sample: string;
  error: string | null;
}

declare global {
  interface Window {
    __qkv: DemoState;
  }
}

// Model and training sizes: small enough to learn visibly in seconds on two cores.
const MODEL = { context: 32, dModel: 64, heads: 4, layers: 2, lr: 3e-3, seed: 1 } as const;
const BATCH = 8;
const STEPS = 2000;
const SAMPLE_EVERY = 200;
const SAMPLE_TOKENS = 160;

const $ = <T extends HTMLElement>(sel: string) => document.querySelector<T>(sel)!;
const statusEl = $("#status");
const toggle = $<HTMLButtonElement>("#toggle");
const progress = $("#progress");
const sampleEl = $("#sample");

const state: DemoState = {
  state: "loading",
  crossOriginIsolated: globalThis.crossOriginIsolated === true,
  threaded: null,
  threads: null,
  simd: null,
  step: 0,
  lastLoss: null,
  firstLoss: null,
  sampleStep: 0,
  sample: "",
  error: null,
};
window.__qkv = state;

function publish(): void {
  const d = statusEl.dataset;
  d.state = state.state;
  d.isolated = String(state.crossOriginIsolated);
  d.threaded = String(state.threaded);
  d.threads = String(state.threads ?? "");
  d.simd = state.simd ?? "";
  d.step = String(state.step);
  d.loss = state.lastLoss === null ? "" : state.lastLoss.toFixed(4);
  sampleEl.dataset.step = String(state.sampleStep);
}

function describeRuntime(info: RuntimeInfo): string {
  return info.threaded
    ? `threaded: ${info.threads} threads · SIMD ${info.simd} · qkv ${info.version}`
    : `single-threaded (the page is not cross-origin isolated) · SIMD ${info.simd} · qkv ${info.version}`;
}

function showModel(entries: Record<string, string | number>, dl = $("#model")): void {
  dl.replaceChildren();
  for (const [k, v] of Object.entries(entries)) {
    const dt = document.createElement("dt");
    dt.textContent = k;
    const dd = document.createElement("dd");
    dd.textContent = String(v);
    dl.append(dt, dd);
  }
}

/** Deterministic PRNG (mulberry32) for batch sampling. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function makeChart(): { push(step: number, loss: number, smooth: number): void } {
  const xs: number[] = [];
  const raw: number[] = [];
  const smooth: number[] = [];
  const el = $("#chart");
  const plot = new uPlot(
    {
      width: el.clientWidth || 800,
      height: 260,
      scales: { x: { time: false } },
      axes: [{ label: "step" }, { label: "cross-entropy" }],
      series: [
        { label: "step" },
        { label: "loss", stroke: "#9db4e0", width: 1 },
        { label: "mean of 10", stroke: "#1f4fb3", width: 2 },
      ],
    },
    [xs, raw, smooth],
    el,
  );
  let queued = false;
  return {
    push(step, loss, s) {
      xs.push(step);
      raw.push(loss);
      smooth.push(s);
      if (queued) return;
      queued = true;
      requestAnimationFrame(() => {
        queued = false;
        plot.setData([xs, raw, smooth]);
      });
    },
  };
}

/**
 * "Your own model": a checkpoint from `qkv train` (or LanguageModel.save) loads here with its tokenizer
 * (the `qkv.tokenizer` metadata) and writes 200 characters after the prompt, streamed into the panel when
 * done. Errors (another model kind, a file without a tokenizer, a truncated file) show in the panel.
 */
function setupOwnModel(): void {
  const fileInput = $<HTMLInputElement>("#checkpoint");
  const button = $<HTMLButtonElement>("#generate");
  const out = $("#own-sample");
  let loaded: { model: LanguageModel; tok: Tokenizer } | undefined;
  const fail = (e: unknown) => {
    out.textContent = `Error: ${e instanceof Error ? e.message : String(e)}`;
    out.dataset.done = "error";
  };
  const generate = async () => {
    if (!loaded) return;
    button.disabled = true;
    out.dataset.done = "";
    try {
      const temperature = Math.max(0, Number($<HTMLInputElement>("#temperature").value) || 0);
      const promptText = $<HTMLInputElement>("#prompt").value || "\n";
      const prompt = await loaded.tok.encode(promptText);
      const ids = await loaded.model.generate(prompt, { maxTokens: 200, temperature, seed: 1 });
      out.textContent = promptText + (await loaded.tok.decode(ids));
      out.dataset.done = "yes";
    } catch (e) {
      fail(e);
    } finally {
      button.disabled = false;
    }
  };
  fileInput.onchange = async () => {
    const file = fileInput.files?.[0];
    if (!file) return;
    button.disabled = true;
    out.dataset.done = "";
    out.textContent = `Loading ${file.name}…`;
    try {
      const bytes = new Uint8Array(await file.arrayBuffer());
      const tok = await Tokenizer.fromCheckpoint(bytes);
      const model = await LanguageModel.load(bytes);
      loaded?.model.dispose();
      loaded = { model, tok };
      const c = model.config;
      showModel(
        {
          file: `${file.name}, ${(bytes.length / 1024).toFixed(0)} KiB`,
          model: `decoder-only, ${c.layers} layers, ${c.heads} heads, d_model ${c.dModel}, context ${c.context}`,
          parameters: model.numParameters().toLocaleString("en-US"),
          tokenizer: `${tok.kind}, ${tok.size} tokens`,
        },
        $("#own-model"),
      );
      await generate();
    } catch (e) {
      fail(e);
    }
  };
  button.onclick = () => void generate();
}

async function main(): Promise<void> {
  publish();
  const info = await init();
  Object.assign(state, { threaded: info.threaded, threads: info.threads, simd: info.simd });
  statusEl.textContent = describeRuntime(info);
  setupOwnModel();

  // Only the characters of the text: nothing is padded, and every sample starts from a real character.
  const tok = await CharTokenizer.fromText(corpus, { specials: { pad: false, bos: false, eos: false, unk: false } });
  const data = await tok.encode(corpus);
  const model = await LanguageModel.create({ vocabSize: tok.size, ...MODEL });
  showModel({
    model: `decoder-only, ${MODEL.layers} layers, ${MODEL.heads} heads, d_model ${MODEL.dModel}, context ${MODEL.context}`,
    parameters: model.numParameters().toLocaleString("en-US"),
    data: `${data.length.toLocaleString("en-US")} characters, vocabulary ${tok.size}`,
    training: `batch ${BATCH} × ${MODEL.context} tokens, AdamW lr ${MODEL.lr}`,
  });

  const chart = makeChart();
  const random = rng(1234);
  const seq = MODEL.context;
  const inputs = new Int32Array(BATCH * seq);
  const targets = new Int32Array(BATCH * seq);
  const recent: number[] = [];
  let paused = false;
  let resume: (() => void) | undefined;
  toggle.disabled = false;
  toggle.onclick = () => {
    paused = !paused;
    toggle.textContent = paused ? "Resume" : "Pause";
    if (!paused) resume?.();
  };

  state.state = "training";
  const started = performance.now();
  for (let step = 1; step <= STEPS; step++) {
    if (paused) {
      state.state = "paused";
      publish();
      await new Promise<void>((r) => (resume = r));
      state.state = "training";
    }
    for (let b = 0; b < BATCH; b++) {
      const start = Math.floor(random() * (data.length - seq - 1));
      inputs.set(data.subarray(start, start + seq), b * seq);
      targets.set(data.subarray(start + 1, start + seq + 1), b * seq);
    }
    const { loss } = await model.trainStep(inputs, targets, { batch: BATCH, seq });
    recent.push(loss);
    if (recent.length > 10) recent.shift();
    const mean = recent.reduce((a, b) => a + b, 0) / recent.length;
    state.step = step;
    state.lastLoss = mean;
    state.firstLoss ??= loss;
    chart.push(step, loss, mean);
    const secs = (performance.now() - started) / 1000;
    progress.textContent = `step ${step} / ${STEPS} · loss ${mean.toFixed(3)} · ${(step / secs).toFixed(1)} steps/s`;

    if (step % SAMPLE_EVERY === 0 || step === STEPS) {
      const prompt = await tok.encode("\n");
      const out = await model.generate(prompt, { maxTokens: SAMPLE_TOKENS, temperature: 0.8, seed: step });
      state.sample = await tok.decode(out);
      state.sampleStep = step;
      sampleEl.textContent = state.sample;
      $("#sample-step").textContent = `after ${step} steps (temperature 0.8)`;
    }
    publish();
  }
  state.state = "done";
  toggle.disabled = true;
  publish();
}

main().catch((e: unknown) => {
  const err = e instanceof Error ? e : new Error(String(e));
  state.state = "error";
  state.error = err.message;
  statusEl.textContent = `Error: ${err.message}`;
  publish();
  console.error(err);
});
