// The sequence-to-sequence tab: an encoder-decoder learns reverse, sort, addition or date formats; held-out
// exact-match accuracy; an input box with the model's output and its attention maps (cross-attention, and
// self-attention per layer and head) drawn on a canvas.
import { Seq2Seq, Trainer } from "qkv";
import { liveChart } from "./chart.js";
import { drawHeatmap } from "./heatmap.js";
import { tabLoop } from "./loop.js";
import { resetTraining, state } from "./state.js";
import { CharVocab, makeSeq2SeqData, TASKS, type Seq2SeqData, type Seq2SeqTask } from "./tasks.js";
import { $, errorText, facts, indexOptions } from "./ui.js";

/** Small enough for reverse to reach 99% held-out accuracy in well under a minute on two cores. */
const MODEL = { dModel: 64, heads: 4, encoderLayers: 2, decoderLayers: 2, dFF: 128, lr: 2e-3, seed: 1 } as const;
const BATCH = 32;
const TRAIN_SIZE = 4000;
const TEST_SIZE = 200;
const EVAL_EVERY = 25;
const TARGET = 0.99;

interface Session {
  task: Seq2SeqTask;
  data: Seq2SeqData;
  model: Seq2Seq;
  trainer: Trainer;
  recent: { loss: number; ms: number; tokens: number }[];
}

const s = state.seq2seq;

export function setupSeq2Seq(): void {
  const taskSelect = $<HTMLSelectElement>("#s2s-task");
  const trainButton = $<HTMLButtonElement>("#s2s-train");
  const toggle = $<HTMLButtonElement>("#s2s-toggle");
  const errorEl = $("#s2s-error");
  const input = $<HTMLInputElement>("#s2s-input");
  const output = $<HTMLOutputElement>("#s2s-output");
  const expected = $("#s2s-expected");
  const kind = $<HTMLSelectElement>("#s2s-kind");
  const layer = $<HTMLSelectElement>("#s2s-layer");
  const head = $<HTMLSelectElement>("#s2s-head");
  const canvas = $<HTMLCanvasElement>("#s2s-heatmap");
  const runButton = $<HTMLButtonElement>("#s2s-run");
  const randomButton = $<HTMLButtonElement>("#s2s-random");
  const chart = liveChart($("#s2s-chart"), "loss, accuracy", [
    { label: "train loss (mean of 10)", stroke: "#1f4fb3" },
    { label: "held-out accuracy", stroke: "#1a7f37", points: true },
  ]);
  let session: Session | undefined;
  /** Model calls in order: a predict and its attention maps must not have a training step between them. */
  let queue: Promise<unknown> = Promise.resolve();
  const serial = <T>(f: () => Promise<T>): Promise<T> => {
    const next = queue.then(f, f);
    queue = next.catch(() => undefined);
    return next;
  };

  for (const t of TASKS) taskSelect.add(new Option(t.title, t.id));
  const task = () => TASKS.find((t) => t.id === taskSelect.value) ?? TASKS[0]!;
  const describeTask = () => {
    const t = task();
    $("#s2s-about").textContent = `${t.about} Example: ${t.example} → ${t.solve(t.example)}`;
  };
  describeTask();
  /** The model learned one task; the select may show another until "Train" makes a model for it. */
  const otherTask = (ss: Session): string | null =>
    ss.task.id === task().id ? null : `the model learned "${ss.task.title}": press ${trainButton.textContent} to learn "${task().title}"`;
  taskSelect.onchange = () => {
    describeTask();
    input.value = task().example;
    errorEl.textContent = session ? (otherTask(session) ?? "") : "";
  };
  input.value = task().example;

  const showStats = () => {
    facts($("#s2s-stats"), {
      task: s.task || "–",
      step: s.step.toLocaleString("en-US"),
      "train loss": s.lastLoss === null ? "–" : s.lastLoss.toFixed(3),
      "held-out accuracy": s.accuracy === null ? "–" : `${(100 * s.accuracy).toFixed(1)}% of ${TEST_SIZE}`,
      "tokens/s": s.tokensPerSecond ? Math.round(s.tokensPerSecond).toLocaleString("en-US") : "–",
      "training time": `${s.seconds.toFixed(1)} s`,
      [`accuracy ≥ ${TARGET * 100}%`]: s.secondsTo99 === null ? "not yet" : `after ${s.secondsTo99.toFixed(1)} s`,
    });
  };

  /** Greedy decoding of the held-out set in one batch: the share of rows whose whole output is right. */
  async function accuracy(ss: Session): Promise<number> {
    const { task: t, data, model } = ss;
    const rows = data.test.length;
    const src = new Int32Array(rows * t.maxIn).fill(CharVocab.PAD);
    data.test.forEach((e, i) => src.set(e.src, i * t.maxIn));
    const maxTokens = t.maxOut + 1;
    const out = await model.generate(src, { maxTokens, bos: CharVocab.BOS, eos: CharVocab.EOS, batch: rows });
    let right = 0;
    data.test.forEach((e, i) => {
      const row = out.subarray(i * maxTokens, (i + 1) * maxTokens);
      // Right means the answer, then eos: a row that runs on without stopping is wrong.
      if (row.includes(CharVocab.EOS) && ss.data.vocab.decode(row) === e.output) right++;
    });
    return right / rows;
  }

  const loop = tabLoop(() => serial(step), s, toggle, errorEl);

  async function step(): Promise<boolean> {
    const ss = session;
    if (!ss) return false;
    const t0 = performance.now();
    const r = await ss.trainer.fit({ steps: 1, onStep: (p) => void (s.tokensPerSecond = p.tokensPerSecond) });
    const ms = performance.now() - t0;
    ss.recent.push({ loss: r.loss, ms, tokens: (s.tokensPerSecond * ms) / 1000 });
    if (ss.recent.length > 10) ss.recent.shift();
    s.step = r.step;
    s.firstLoss ??= r.loss;
    s.lastLoss = ss.recent.reduce((a, x) => a + x.loss, 0) / ss.recent.length;
    s.tokensPerSecond = ss.recent.reduce((a, x) => a + x.tokens, 0) / (ss.recent.reduce((a, x) => a + x.ms, 0) / 1000);
    s.seconds += ms / 1000;
    let acc: number | null = null;
    if (s.step % EVAL_EVERY === 0) {
      const e0 = performance.now();
      acc = await accuracy(ss);
      s.seconds += (performance.now() - e0) / 1000;
      s.accuracy = acc;
      if (acc >= TARGET && s.secondsTo99 === null) s.secondsTo99 = s.seconds;
      // The example follows the training: its output and attention as the model learns.
      await run(false);
    }
    chart.push(s.step, [s.lastLoss, acc]);
    showStats();
    // All held-out inputs right: nothing more to watch.
    return acc === null || acc < 1;
  }

  /** Runs the model on the input box; `queued`: through the serial queue (outside the training loop). */
  async function run(queued = true): Promise<void> {
    const ss = session;
    if (!ss) return;
    const go = async () => {
      const other = otherTask(ss);
      if (other) throw new Error(other);
      const text = input.value.trim();
      const { task: t, vocab } = { task: ss.task, vocab: ss.data.vocab };
      const ids = vocab.encode(t.normalize?.(text) ?? text);
      if (ids.length < 1 || ids.length > t.maxIn) {
        throw new Error(`input has ${ids.length} characters: expected 1 to ${t.maxIn} for ${t.title}`);
      }
      const src = Int32Array.from(ids);
      const out = await ss.model.generate(src, { maxTokens: t.maxOut + 1, bos: CharVocab.BOS, eos: CharVocab.EOS });
      const end = out.indexOf(CharVocab.EOS);
      const produced = Array.from(out.subarray(0, end < 0 ? out.length : end + 1));
      // Teacher-force the model's own output to read the attention each output token paid.
      const tgtIn = Int32Array.from([CharVocab.BOS, ...produced.slice(0, -1)]);
      await ss.model.predict(src, tgtIn);
      const k = kind.value as "cross" | "encoder" | "decoder";
      const weights = await ss.model.attention({ layer: Number(layer.value), head: Number(head.value), kind: k });
      const text2 = vocab.decode(out);
      s.input = text;
      s.output = text2;
      output.value = text2;
      let want: string | null = null;
      try {
        want = t.solve(text);
      } catch (e) {
        expected.textContent = `(${errorText(e)})`;
      }
      if (want !== null) expected.textContent = want === text2 ? "✓ right" : `✗ expected ${want}`;
      const inLabels = ids.map((i) => vocab.label(i));
      const outLabels = produced.map((i) => vocab.label(i));
      const decIn = Array.from(tgtIn, (i) => vocab.label(i));
      const o =
        k === "cross"
          ? { rows: outLabels, cols: inLabels, rowTitle: "output", colTitle: "input" }
          : k === "encoder"
            ? { rows: inLabels, cols: inLabels, rowTitle: "input", colTitle: "input" }
            : { rows: outLabels, cols: decIn, rowTitle: "output", colTitle: "decoder input" };
      drawHeatmap(canvas, weights, o);
      s.heatmaps++;
      errorEl.textContent = "";
    };
    try {
      await (queued ? serial(go) : go());
    } catch (e) {
      errorEl.textContent = errorText(e);
    }
  }
  $<HTMLFormElement>("#s2s-form").onsubmit = (e) => {
    e.preventDefault();
    void run();
  };
  for (const sel of [kind, layer, head]) sel.onchange = () => void run();
  randomButton.onclick = () => {
    const ss = session;
    if (!ss) return;
    const other = otherTask(ss);
    if (other) {
      errorEl.textContent = other;
      return;
    }
    input.value = ss.data.test[Math.floor(Math.random() * ss.data.test.length)]!.input;
    void run();
  };

  trainButton.onclick = async () => {
    trainButton.disabled = true;
    errorEl.textContent = "";
    try {
      await loop.stop();
      session?.model.dispose();
      session = undefined;
      resetTraining(s);
      Object.assign(s, { accuracy: null, secondsTo99: null });
      chart.clear();
      const t = task();
      const data = makeSeq2SeqData(t, TRAIN_SIZE, TEST_SIZE, 7);
      // The decoder reads bos + the output and generates up to maxOut + 1 tokens (eos), below the context.
      const context = Math.max(t.maxIn, t.maxOut + 2);
      const model = await Seq2Seq.create({ srcVocab: data.vocab.size, tgtVocab: data.vocab.size, context, ...MODEL });
      session = { task: t, data, model, trainer: new Trainer(model, { data: data.train, batchSize: BATCH, seed: 1 }), recent: [] };
      s.task = t.id;
      indexOptions(layer, Math.max(MODEL.encoderLayers, MODEL.decoderLayers), (i) => String(i + 1));
      indexOptions(head, MODEL.heads, (i) => String(i + 1));
      if (!input.value.trim()) input.value = t.example;
      for (const b of [toggle, runButton, randomButton]) b.disabled = false;
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
