// The classifier tab: an encoder with a head on the first token ([cls]) learns the topic of short
// sentences; a confusion matrix on held-out sentences and the [cls] token's attention over the words.
import { Classifier, Trainer } from "qkv";
import { liveChart } from "./chart.js";
import { colour, drawHeatmap } from "./heatmap.js";
import { tabLoop } from "./loop.js";
import { resetTraining, state } from "./state.js";
import { CLASSES, encodeWords, makeClassifierData, type ClassifierData } from "./tasks.js";
import { $, errorText, facts, indexOptions } from "./ui.js";

/** The tutorial classifier's shape (DESIGN.md), narrower: the task is small. */
const MODEL = { dModel: 32, heads: 4, layers: 2, dFF: 64, lr: 2e-3, seed: 1 } as const;
const CONTEXT = 16;
const BATCH = 16;
const EVAL_EVERY = 25;
const MAX_STEPS = 1000;

const s = state.classifier;

export function setupClassifier(): void {
  const trainButton = $<HTMLButtonElement>("#cls-train");
  const toggle = $<HTMLButtonElement>("#cls-toggle");
  const errorEl = $("#cls-error");
  const input = $<HTMLInputElement>("#cls-input");
  const output = $<HTMLOutputElement>("#cls-output");
  const layer = $<HTMLSelectElement>("#cls-layer");
  const runButton = $<HTMLButtonElement>("#cls-run");
  const chart = liveChart($("#cls-chart"), "loss, accuracy", [
    { label: "train loss (mean of 10)", stroke: "#1f4fb3" },
    { label: "held-out accuracy", stroke: "#1a7f37", points: true },
  ]);
  let session: { data: ClassifierData; model: Classifier; trainer: Trainer; recent: number[] } | undefined;
  let queue: Promise<unknown> = Promise.resolve();
  const serial = <T>(f: () => Promise<T>): Promise<T> => {
    const next = queue.then(f, f);
    queue = next.catch(() => undefined);
    return next;
  };

  const showStats = () =>
    facts($("#cls-stats"), {
      step: s.step.toLocaleString("en-US"),
      "train loss": s.lastLoss === null ? "–" : s.lastLoss.toFixed(3),
      "held-out accuracy": s.accuracy === null ? "–" : `${(100 * s.accuracy).toFixed(1)}%`,
      "tokens/s": s.tokensPerSecond ? Math.round(s.tokensPerSecond).toLocaleString("en-US") : "–",
      "training time": `${s.seconds.toFixed(1)} s`,
    });

  function showConfusion(m: number[][]): void {
    const table = $<HTMLTableElement>("#cls-confusion");
    const head = table.createTHead();
    head.replaceChildren();
    const hr = head.insertRow();
    hr.append(Object.assign(document.createElement("th"), { textContent: "true \\ predicted" }));
    for (const c of CLASSES) hr.append(Object.assign(document.createElement("th"), { textContent: c, scope: "col" }));
    const body = table.tBodies[0] ?? table.createTBody();
    body.replaceChildren();
    m.forEach((row, i) => {
      const tr = body.insertRow();
      tr.append(Object.assign(document.createElement("th"), { textContent: CLASSES[i]!, scope: "row" }));
      const total = row.reduce((a, b) => a + b, 0) || 1;
      for (const n of row) {
        const td = tr.insertCell();
        td.textContent = String(n);
        td.style.background = colour(n / total);
        td.style.color = n / total > 0.5 ? "#fff" : "#1d2330";
      }
    });
  }

  /** Held-out accuracy and confusion matrix, from one batched predict. */
  async function evaluate(data: ClassifierData, model: Classifier): Promise<void> {
    const rows = data.test.length;
    const seq = Math.max(...data.test.map((e) => e.tokens.length));
    const tokens = new Int32Array(rows * seq);
    data.test.forEach((e, i) => tokens.set(e.tokens, i * seq));
    const logits = await model.predict(tokens, { batch: rows, seq });
    const m = CLASSES.map(() => CLASSES.map(() => 0));
    let right = 0;
    data.test.forEach((e, i) => {
      const l = logits.subarray(i * CLASSES.length, (i + 1) * CLASSES.length);
      const p = l.indexOf(Math.max(...l));
      m[e.label]![p]!++;
      if (p === e.label) right++;
    });
    s.accuracy = right / rows;
    s.confusion = m;
    showConfusion(m);
  }

  const loop = tabLoop(() => serial(step), s, toggle, errorEl);

  async function step(): Promise<boolean> {
    const ss = session;
    if (!ss) return false;
    const t0 = performance.now();
    let tps = 0;
    const r = await ss.trainer.fit({ steps: 1, onStep: (p) => void (tps = p.tokensPerSecond) });
    const ms = performance.now() - t0;
    ss.recent.push(r.loss);
    if (ss.recent.length > 10) ss.recent.shift();
    s.step = r.step;
    s.firstLoss ??= r.loss;
    s.lastLoss = ss.recent.reduce((a, b) => a + b, 0) / ss.recent.length;
    s.tokensPerSecond = tps;
    s.seconds += ms / 1000;
    let acc: number | null = null;
    if (s.step % EVAL_EVERY === 0) {
      await evaluate(ss.data, ss.model);
      acc = s.accuracy;
      await run(false);
    }
    chart.push(s.step, [s.lastLoss, acc]);
    showStats();
    return s.step < MAX_STEPS;
  }

  async function run(queued = true): Promise<void> {
    const ss = session;
    if (!ss) return;
    const go = async () => {
      const tokens = encodeWords(ss.data.words, input.value);
      if (tokens.length > CONTEXT) throw new Error(`sentence has ${tokens.length - 1} words: expected at most ${CONTEXT - 1}`);
      if (tokens.length < 2) throw new Error("sentence has no words: type a few");
      const logits = await ss.model.predict(tokens);
      const max = Math.max(...logits);
      const e = Array.from(logits, (v) => Math.exp(v - max));
      const sum = e.reduce((a, b) => a + b, 0);
      output.value = CLASSES.map((c, i) => `${c} ${((100 * e[i]!) / sum).toFixed(0)}%`).join(" · ");
      // Row 0 of each head's map: what [cls], the token the head reads, attends to.
      const T = tokens.length;
      const rows = new Float32Array(MODEL.heads * T);
      for (let h = 0; h < MODEL.heads; h++) {
        const w = await ss.model.attention({ layer: Number(layer.value), head: h });
        rows.set(w.subarray(0, T), h * T);
      }
      const labels = Array.from(tokens, (id) => ss.data.words[id] ?? "?");
      drawHeatmap($<HTMLCanvasElement>("#cls-heatmap"), rows, {
        rows: Array.from({ length: MODEL.heads }, (_, h) => `head ${h + 1}`),
        cols: labels,
        rowTitle: "[cls] query",
        colTitle: "word",
      });
      errorEl.textContent = "";
    };
    try {
      await (queued ? serial(go) : go());
    } catch (e) {
      errorEl.textContent = errorText(e);
    }
  }
  $<HTMLFormElement>("#cls-form").onsubmit = (e) => {
    e.preventDefault();
    void run();
  };
  layer.onchange = () => void run();

  trainButton.onclick = async () => {
    trainButton.disabled = true;
    errorEl.textContent = "";
    try {
      await loop.stop();
      session?.model.dispose();
      session = undefined;
      resetTraining(s);
      Object.assign(s, { accuracy: null, confusion: null });
      chart.clear();
      const data = makeClassifierData(3000, 300, 11);
      const model = await Classifier.create({ vocabSize: data.words.length, context: CONTEXT, classes: CLASSES.length, ...MODEL });
      session = { data, model, trainer: new Trainer(model, { data: data.train, batchSize: BATCH, seed: 1 }), recent: [] };
      indexOptions(layer, MODEL.layers, (i) => String(i + 1));
      toggle.disabled = false;
      runButton.disabled = false;
      showStats();
      loop.start();
    } catch (e) {
      s.state = "error";
      s.error = errorText(e);
      errorEl.textContent = s.error;
    } finally {
      trainButton.disabled = false;
    }
  };
  trainButton.disabled = false;
  showStats();
}
