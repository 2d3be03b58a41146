// The language-model tab: a char-level GPT trains on the built-in text or the user's, with live training
// and validation loss, tokens/s, samples every N steps and on demand, and save / load of the model.
import { CharTokenizer, LanguageModel, Tokenizer, Trainer, type AnyTokenizer } from "qkv";
import { liveChart } from "./chart.js";
import corpus from "./corpus.txt?raw";
import { tabLoop } from "./loop.js";
import { resetTraining, state } from "./state.js";
import { $, errorText, facts, numberInput } from "./ui.js";

interface Shape {
  context: number;
  dModel: number;
  heads: number;
  layers: number;
  batch: number;
  lr: number;
}

/**
 * tiny learns visibly in seconds on two cores (validation loss 2.0 at step ~900, about a minute on a busy
 * 2-core machine); small has the shape of nanoGPT's CPU recipe (TOOLCHAIN.md; constant learning rate here),
 * for a longer run on a bigger text.
 */
export const PRESETS: Record<"tiny" | "small", Shape> = {
  tiny: { context: 32, dModel: 64, heads: 4, layers: 2, batch: 8, lr: 3e-3 },
  small: { context: 64, dModel: 128, heads: 4, layers: 4, batch: 12, lr: 1e-3 },
};

/** Validation every this many steps, on the first VAL_TOKENS of the held-out 10% (always the same windows). */
const EVAL_EVERY = 50;
/** Enough for a steady figure (the mean over 4 k predictions), small enough to cost ~10% of the training time. */
const VAL_TOKENS = 4096;
/** The issue's figure: training time until the validation loss is below this. */
const VAL_TARGET = 2.0;
/**
 * The training window of a pretrained model, in tokens: GPT-2's context (1024) as the window would make each step
 * 8x the tokens of the README's fine-tuning recipe (seqLen 128) and a full fine-tune's activations overflow the wasm
 * core's 4 GiB. The tab's own models train on their whole context (at most 256).
 */
const PRETRAINED_WINDOW = 128;

/** The window (tokens per row) the tab trains `config` with, for a model from `origin`. */
function trainingWindow(config: { context: number }, origin: ModelOrigin): number {
  return origin === "gpt2" ? Math.min(config.context, PRETRAINED_WINDOW) : config.context;
}

interface Session {
  model: LanguageModel;
  tok: AnyTokenizer;
  /** Null when the text cannot be encoded with a loaded model's tokenizer: sampling only. */
  trainer: Trainer | null;
  evaluator: Trainer | null;
  batch: number;
  seq: number;
  /** The last 10 step losses and step times (ms), for the mean loss and tokens/s. */
  recent: { loss: number; ms: number }[];
  sampleSeed: number;
}

const s = state.lm;

/** What the tab's other sections (the pretrained one) use of it. */
export interface LanguageModelTab {
  /**
   * Makes `model` the tab's model, with `tok` as its tokenizer (and `model.tokenizer`), not training yet: the
   * Samples panel writes with it and Train goes on training it on the chosen text. The previous model is disposed.
   */
  adopt(model: LanguageModel, tok: AnyTokenizer, about: Record<string, string>, origin?: ModelOrigin): Promise<void>;
  /** The tab's model now (its `tokenizer` set), or undefined before the first. */
  current(): LanguageModel | undefined;
  /** Where the tab's model came from: "gpt2" for a pretrained GPT-2 (its adapters save in GPT-2's names). */
  origin(): ModelOrigin;
  /** The tokens per row the tab trains the current model with (the LoRA panel fine-tunes with the same). */
  window(): number;
  /** Pauses the tab's training and resolves once the step in flight is done (before another use of the model). */
  pause(): Promise<void>;
  /** Called with the tab's new model each time it changes (Train a new model, Load, a pretrained one). */
  onModel(listener: () => void): void;
}

/** Where the tab's model came from. */
export type ModelOrigin = "qkv" | "gpt2";

export function setupLanguageModel(): LanguageModelTab {
  const source = $<HTMLSelectElement>("#lm-source");
  const preset = $<HTMLSelectElement>("#lm-preset");
  const ownBox = $("#lm-own");
  const textArea = $<HTMLTextAreaElement>("#lm-text");
  const fileInput = $<HTMLInputElement>("#lm-file");
  const newButton = $<HTMLButtonElement>("#lm-new");
  const toggle = $<HTMLButtonElement>("#lm-toggle");
  const errorEl = $("#lm-error");
  const sampleEl = $("#lm-sample");
  const sampleNow = $<HTMLButtonElement>("#lm-sample-now");
  const saveButton = $<HTMLButtonElement>("#lm-save");
  const loadInput = $<HTMLInputElement>("#lm-load");
  const fields = {
    context: $<HTMLInputElement>("#lm-context"),
    dModel: $<HTMLInputElement>("#lm-dmodel"),
    heads: $<HTMLInputElement>("#lm-heads"),
    layers: $<HTMLInputElement>("#lm-layers"),
    batch: $<HTMLInputElement>("#lm-batch"),
    lr: $<HTMLInputElement>("#lm-lr"),
  };
  const chart = liveChart($("#lm-chart"), "cross-entropy", [
    { label: "train (mean of 10)", stroke: "#1f4fb3" },
    { label: "validation", stroke: "#d1495b", points: true },
  ]);
  let session: Session | undefined;
  let origin: ModelOrigin = "qkv";
  const listeners: (() => void)[] = [];

  const fillPreset = () => {
    const p = PRESETS[preset.value as "tiny" | "small"];
    if (!p) return;
    for (const k of Object.keys(fields) as (keyof Shape)[]) fields[k].value = String(p[k]);
  };
  fillPreset();
  preset.onchange = fillPreset;
  // Editing a field makes the size "custom".
  for (const f of Object.values(fields)) f.addEventListener("input", () => (preset.value = "custom"));
  source.onchange = () => {
    ownBox.hidden = source.value !== "own";
  };
  fileInput.onchange = async () => {
    const f = fileInput.files?.[0];
    if (f) textArea.value = await f.text();
  };
  textArea.addEventListener("dragover", (e) => e.preventDefault());
  textArea.addEventListener("drop", async (e) => {
    e.preventDefault();
    const f = e.dataTransfer?.files[0];
    if (f) textArea.value = await f.text();
  });

  const showStats = () => {
    facts($("#lm-stats"), {
      step: s.step.toLocaleString("en-US"),
      "train loss": s.lastLoss === null ? "–" : s.lastLoss.toFixed(3),
      "validation loss": s.valLoss === null ? "–" : s.valLoss.toFixed(3),
      "tokens/s": s.tokensPerSecond ? Math.round(s.tokensPerSecond).toLocaleString("en-US") : "–",
      "training time": `${s.seconds.toFixed(1)} s`,
      [`validation < ${VAL_TARGET}`]: s.secondsToVal2 === null ? "not yet" : `after ${s.secondsToVal2.toFixed(1)} s`,
    });
    sampleEl.dataset.step = String(s.sampleStep);
  };

  const loop = tabLoop(() => step(), s, toggle, errorEl);

  async function step(): Promise<boolean> {
    const ss = session;
    if (!ss?.trainer || !ss.evaluator) return false;
    const t0 = performance.now();
    const { loss } = await ss.trainer.fit({ steps: 1 });
    const ms = performance.now() - t0;
    ss.recent.push({ loss, ms });
    if (ss.recent.length > 10) ss.recent.shift();
    s.step = ss.trainer.step;
    s.firstLoss ??= loss;
    s.lastLoss = ss.recent.reduce((a, r) => a + r.loss, 0) / ss.recent.length;
    s.tokensPerSecond = (ss.recent.length * ss.batch * ss.seq) / (ss.recent.reduce((a, r) => a + r.ms, 0) / 1000);
    s.seconds += ms / 1000;
    let val: number | null = null;
    if (s.step % EVAL_EVERY === 0) {
      const e0 = performance.now();
      val = (await ss.evaluator.evaluate(Math.max(1, Math.ceil(VAL_TOKENS / (ss.batch * ss.seq))))).loss;
      s.seconds += (performance.now() - e0) / 1000;
      s.valLoss = val;
      if (val < VAL_TARGET && s.secondsToVal2 === null) s.secondsToVal2 = s.seconds;
    }
    chart.push(s.step, [s.lastLoss, val]);
    const every = Math.floor(Number($<HTMLInputElement>("#lm-every").value));
    if (every > 0 && s.step % every === 0) await sample(s.step);
    showStats();
    return true;
  }

  /** Writes a sample after the prompt with the panel's settings; `seed` makes it reproducible. */
  async function sample(seed?: number): Promise<void> {
    const ss = session;
    if (!ss) return;
    sampleEl.dataset.done = "";
    // Busy while the text grows: a screen reader announces it once, whole, not again at every token.
    sampleEl.setAttribute("aria-busy", "true");
    try {
      const temperature = numberInput("#lm-temperature", 0, 3);
      const topK = Math.floor(numberInput("#lm-topk", 0, 100000));
      const maxTokens = Math.floor(numberInput("#lm-length", 1, 2000));
      const promptText = $<HTMLInputElement>("#lm-prompt").value || "\n";
      const prompt = await ss.tok.encode(promptText);
      let shown = promptText;
      const out = await ss.model.generate(prompt, {
        maxTokens,
        temperature,
        topK,
        seed: seed ?? ++ss.sampleSeed,
        // The text appears as it is made, each token as its vocabulary entry; the decoded whole replaces it
        // at the end (a byte tokenizer's multi-byte characters only decode as a whole).
        onToken: (token) => {
          shown += ss.tok.vocabulary[token] ?? "";
          sampleEl.textContent = shown;
        },
      });
      s.sample = promptText + (await ss.tok.decode(out));
      s.sampleStep = s.step;
      s.samples++;
      sampleEl.textContent = s.sample;
      sampleEl.dataset.done = "yes";
      $("#lm-sample-step").textContent =
        `after ${s.step} steps (temperature ${temperature}${temperature > 0 && topK > 0 ? `, top-k ${topK}` : ""})`;
    } catch (e) {
      sampleEl.textContent = `Error: ${errorText(e)}`;
      sampleEl.dataset.done = "error";
    }
    sampleEl.setAttribute("aria-busy", "false");
    showStats();
  }
  sampleNow.onclick = () => void sample();

  /**
   * Makes `model` (with `tok`) the tab's model, ready to train on the chosen text where it can. `train`: a model
   * made to train (Train a new model), which is refused, the tab's model kept, when it cannot train on the text; a
   * loaded one is adopted for sampling anyway. Calls run one at a time, so that each disposes the one before it.
   */
  let adopting: Promise<unknown> = Promise.resolve();
  function use(...args: Parameters<typeof useNow>): Promise<void> {
    const next = adopting.then(() => useNow(...args));
    adopting = next.catch(() => undefined);
    return next;
  }
  async function useNow(
    model: LanguageModel,
    tok: AnyTokenizer,
    text: string,
    batch: number,
    train: boolean,
    about: Record<string, string> = {},
    from: ModelOrigin = "qkv",
  ): Promise<void> {
    const c = model.config;
    const seq = trainingWindow(c, from);
    let trainer: Trainer | null = null;
    let evaluator: Trainer | null = null;
    let note = "";
    try {
      const ids = await tok.encode(text);
      const cut = Math.floor(ids.length * 0.9);
      if (ids.length - cut < seq + 1) {
        throw new Error(`text has ${text.length} characters: the held-out 10% must hold more than ${seq} tokens (the training window); give at least ${10 * (seq + 1)} characters`);
      }
      trainer = new Trainer(model, { data: ids.subarray(0, cut), batchSize: batch, seqLen: seq, seed: 1234 });
      evaluator = new Trainer(model, { data: ids.subarray(cut), evalData: ids.subarray(cut), batchSize: batch, seqLen: seq });
    } catch (e) {
      note = `cannot train on this text: ${errorText(e)}`;
    }
    if (train && !trainer) {
      model.dispose(); // the tab's model stays as it was
      throw new Error(note);
    }
    await loop.stop();
    origin = from;
    session?.model.dispose();
    session = undefined;
    resetTraining(s);
    Object.assign(s, { valLoss: null, secondsToVal2: null, sampleStep: 0, sample: "" });
    chart.clear();
    model.tokenizer = tok; // a text prompt works with every model of the tab (the pretrained section's)
    session = { model, tok, trainer, evaluator, batch, seq, recent: [], sampleSeed: 0 };
    const window = seq < c.context ? `${seq} tokens (of its context ${c.context})` : `${seq} tokens`;
    facts($("#lm-model"), {
      ...about,
      model: `decoder-only, ${c.layers} layers, ${c.heads} heads, d_model ${c.dModel}, context ${c.context}`,
      parameters: model.numParameters().toLocaleString("en-US"),
      tokenizer: `${tok.kind}, ${tok.size} tokens`,
      training: trainer ? `batch ${batch} × ${window}, AdamW lr ${c.lr}` : note,
    });
    errorEl.textContent = trainer ? "" : note;
    toggle.disabled = !trainer;
    toggle.textContent = "Train";
    showStats();
    for (const l of listeners) l();
    if (trainer && train) loop.start();
  }
  // After a LoRA fine-tune the adapters stay on the model, and training it trains them alone (the base frozen):
  // said when Train starts, as nothing else on this tab shows it.
  toggle.addEventListener("click", () => {
    if (loop.running && session?.model.lora) {
      errorEl.textContent = "Training the LoRA adapters only (the base stays frozen): Remove adapter in the LoRA panel to train the whole model.";
    }
  });

  const chosenText = (): string => {
    if (source.value === "builtin") return corpus;
    const t = textArea.value;
    if (t.length < 200) throw new Error(`your text has ${t.length} characters: give at least 200 (a few thousand learn better)`);
    return t;
  };

  newButton.onclick = async () => {
    newButton.disabled = true;
    errorEl.textContent = "";
    try {
      const text = chosenText();
      const shape: Shape = {
        context: Math.floor(numberInput("#lm-context", 4, 256)),
        dModel: Math.floor(numberInput("#lm-dmodel", 8, 512)),
        heads: Math.floor(numberInput("#lm-heads", 1, 16)),
        layers: Math.floor(numberInput("#lm-layers", 1, 12)),
        batch: Math.floor(numberInput("#lm-batch", 1, 128)),
        lr: numberInput("#lm-lr", 1e-5, 0.1),
      };
      // Only the characters of the text: nothing is padded, and every sample starts from a real character.
      const tok = await CharTokenizer.fromText(text, { specials: { pad: false, bos: false, eos: false, unk: false } });
      const { batch, ...m } = shape;
      const model = await LanguageModel.create({ vocabSize: tok.size, ...m, seed: 1 });
      await use(model, tok, text, batch, true);
    } catch (e) {
      s.error = errorText(e);
      errorEl.textContent = s.error;
    } finally {
      newButton.disabled = false;
    }
  };

  saveButton.onclick = async () => {
    const ss = session;
    if (!ss) return;
    saveButton.disabled = true;
    try {
      // With its tokenizer (metadata "qkv.tokenizer"), so the file loads back here and runs in `qkv generate`.
      const bytes = await ss.model.save({ tokenizer: ss.tok });
      // save() resolves to a fresh copy in an ordinary ArrayBuffer; its declared type (ArrayBufferLike, as it may
      // be shared memory in general) is one Blob's types refuse.
      const url = URL.createObjectURL(new Blob([bytes as Uint8Array<ArrayBuffer>], { type: "application/octet-stream" }));
      const a = document.createElement("a");
      a.href = url;
      a.download = `qkv-lm-step${s.step}.safetensors`;
      a.click();
      setTimeout(() => URL.revokeObjectURL(url), 10_000);
    } catch (e) {
      errorEl.textContent = `Save failed: ${errorText(e)}`;
    } finally {
      saveButton.disabled = false;
    }
  };

  loadInput.onchange = async () => {
    const file = loadInput.files?.[0];
    if (!file) return;
    sampleEl.dataset.done = "";
    sampleEl.textContent = `Loading ${file.name}…`;
    try {
      const batch = Math.floor(numberInput("#lm-batch", 1, 128)); // before the load: a refusal leaves nothing loaded
      const bytes = new Uint8Array(await file.arrayBuffer());
      const tok = await Tokenizer.fromCheckpoint(bytes);
      const model = await LanguageModel.load(bytes);
      // Not training yet: what it writes first is what the saved model wrote ("Train" goes on from there).
      await use(model, tok, source.value === "builtin" ? corpus : textArea.value, batch, false, {
        file: `${file.name}, ${(bytes.length / 1024).toFixed(0)} KiB`,
      });
      await sample(1);
    } catch (e) {
      sampleEl.textContent = `Error: ${errorText(e)}`;
      sampleEl.dataset.done = "error";
    } finally {
      loadInput.value = "";
    }
  };

  // The first model: the built-in text at the tiny preset, training at once (the page's first impression).
  for (const b of [newButton, sampleNow, saveButton]) b.disabled = false;
  loadInput.disabled = false;
  newButton.click();

  return {
    async adopt(model, tok, about, from = "qkv") {
      const batch = Math.floor(Number(fields.batch.value)) || PRESETS.tiny.batch;
      await use(model, tok, source.value === "builtin" ? corpus : textArea.value, batch, false, about, from);
    },
    current: () => session?.model,
    origin: () => origin,
    window: () => session?.seq ?? 0,
    pause: () => loop.stop(),
    onModel: (l) => void listeners.push(l),
  };
}
