// The language-model tab's LoRA panel: fine-tunes the tab's model (trained, loaded or pretrained) on pasted text with
// adapters on attention and feed-forward (model.addLora), the base frozen: live loss, tokens/s, what trains against
// what full fine-tuning would hold, a sample before and after (same prompt, same seed), and the adapter as PEFT saves
// it (model.saveAdapter: adapter_model.safetensors + adapter_config.json).
import { Trainer, type LanguageModel } from "qkv";
import { liveChart } from "./chart.js";
import type { LanguageModelTab } from "./lm.js";
import { TrainingLoop } from "./loop.js";
import { state } from "./state.js";
import { $, errorText, facts, numberInput } from "./ui.js";

const s = state.lora;

/** The Linear roles that get adapters: attention's in- and out-projection and both feed-forward layers. */
const TARGETS = ["qkv", "out", "up", "down"] as const;
/** New tokens of each before/after sample. */
const SAMPLE_TOKENS = 120;
/** Both samples draw with this seed (and temperature 0.8, top-k 40): what differs is the adapters. */
const SAMPLE_SEED = 1;

function kib(n: number): string {
  return n < 2 ** 20 ? `${(n / 1024).toFixed(1)} KiB` : `${(n / 2 ** 20).toFixed(1)} MiB`;
}

/** Downloads `data` as a file named `name`. */
function download(data: Uint8Array | string, name: string, type: string): void {
  // saveAdapter's bytes are a fresh copy in an ordinary ArrayBuffer; its declared type (ArrayBufferLike) is one
  // Blob's types refuse.
  const part = typeof data === "string" ? data : (data as Uint8Array<ArrayBuffer>);
  const url = URL.createObjectURL(new Blob([part], { type }));
  const a = document.createElement("a");
  a.href = url;
  a.download = name;
  a.click();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

export function setupLora(tab: LanguageModelTab): void {
  const textEl = $<HTMLTextAreaElement>("#lora-text");
  const promptEl = $<HTMLInputElement>("#lora-prompt");
  const startButton = $<HTMLButtonElement>("#lora-start");
  const stopButton = $<HTMLButtonElement>("#lora-stop");
  const removeButton = $<HTMLButtonElement>("#lora-remove");
  const downloadButton = $<HTMLButtonElement>("#lora-download");
  const loadInput = $<HTMLInputElement>("#lora-load");
  const errorEl = $("#lora-error");
  const beforeEl = $("#lora-before");
  const afterEl = $("#lora-after");
  const chart = liveChart($("#lora-chart"), "cross-entropy", [{ label: "LoRA fine-tuning (mean of 10)", stroke: "#1a7f37" }], 200);

  /** The fine-tuning under way or last run. */
  let run: { model: LanguageModel; trainer: Trainer; batch: number; seq: number; lr: number; recent: { loss: number; ms: number }[] } | undefined;
  let busy = false;

  const showStats = () => {
    facts($("#lora-stats"), {
      step: s.steps ? `${s.step} / ${s.steps}` : "–",
      loss: s.lastLoss === null ? "–" : s.lastLoss.toFixed(3),
      "tokens/s": s.tokensPerSecond ? Math.round(s.tokensPerSecond).toLocaleString("en-US") : "–",
      "adapter parameters": s.adapterParameters
        ? `${s.adapterParameters.toLocaleString("en-US")} (${((100 * s.adapterParameters) / s.baseParameters).toFixed(2)}% of the base)`
        : "–",
      "base parameters (frozen)": s.baseParameters ? s.baseParameters.toLocaleString("en-US") : "–",
      "gradients + Adam": s.trainingBytes ? `${kib(s.trainingBytes)} (full fine-tuning: ${kib(s.fullTrainingBytes)})` : "–",
    });
  };

  const buttons = () => {
    const model = tab.current();
    const training = s.state === "training";
    startButton.disabled = busy || training || !model;
    stopButton.disabled = !training;
    removeButton.disabled = busy || training || !model?.lora;
    downloadButton.disabled = busy || training || !model?.lora;
    loadInput.disabled = busy || training || !model;
  };

  const fail = (e: unknown) => {
    s.state = "error";
    s.error = errorText(e);
    errorEl.textContent = s.error;
    buttons();
  };

  /** The tab's model, its prompt written with the before/after sampling settings. */
  async function sample(model: LanguageModel, prompt: string): Promise<string> {
    const tok = model.tokenizer!;
    const out = await model.generate(await tok.encode(prompt), { maxTokens: SAMPLE_TOKENS, temperature: 0.8, topK: 40, seed: SAMPLE_SEED });
    return prompt + (await tok.decode(out));
  }

  const loop = new TrainingLoop(
    async () => {
      const r = run;
      if (!r || s.step >= s.steps) return false;
      const t0 = performance.now();
      const { loss } = await r.trainer.fit({ steps: 1 });
      const ms = performance.now() - t0;
      r.recent.push({ loss, ms });
      if (r.recent.length > 10) r.recent.shift();
      s.step++;
      s.firstLoss ??= loss;
      s.lastLoss = r.recent.reduce((a, x) => a + x.loss, 0) / r.recent.length;
      s.tokensPerSecond = (r.recent.length * r.batch * r.seq) / (r.recent.reduce((a, x) => a + x.ms, 0) / 1000);
      if (s.step === 1) {
        // Gradients and Adam moments exist for the adapters alone: 4 bytes per adapter parameter, then 8 more.
        const m = await r.model.memory();
        s.adapterParameters = m.gradients / 4;
        s.trainingBytes = m.gradients + m.optimizer;
      }
      chart.push(s.step, [s.lastLoss]);
      showStats();
      return s.step < s.steps;
    },
    (running) => {
      if (running) return;
      if (s.state === "training") void finish();
    },
    // An error after the tab's model changed is the old model's (disposed mid-step): the panel has started over.
    (e) => {
      if (run) fail(e);
    },
  );

  /** After the last step (or Stop, or another training taking over): the sample after, the model's own lr back. */
  async function finish(): Promise<void> {
    const r = run;
    if (!r) return;
    s.state = "idle";
    busy = true;
    buttons();
    const gone = (): boolean => s.state === "error" || run !== r; // read after each wait: fail() may have run
    try {
      await r.model.setLearningRate(r.lr);
      // A failed step ends the loop too, and its error lands (fail) while the lr is restored: no "after" sample
      // then, as if the fine-tune had completed.
      if (gone()) return;
      const after = await sample(r.model, s.prompt);
      if (gone()) return;
      s.after = after;
      afterEl.textContent = s.after;
      s.state = "done";
    } catch (e) {
      if (run === r) fail(e);
    } finally {
      busy = false;
      buttons();
    }
  }

  startButton.onclick = async () => {
    const model = tab.current();
    if (!model || busy) return;
    busy = true;
    errorEl.textContent = "";
    s.error = null;
    buttons();
    try {
      const rank = Math.floor(numberInput("#lora-rank", 1, 64));
      const steps = Math.floor(numberInput("#lora-steps", 1, 10000));
      const lr = numberInput("#lora-lr", 1e-5, 0.1);
      const batch = Math.floor(numberInput("#lora-batch", 1, 128));
      const text = textEl.value;
      const tok = model.tokenizer;
      if (!tok) throw new Error("the tab's model has no tokenizer");
      await tab.pause();
      const ids = await tok.encode(text);
      // The window the tab trains with: the model's context, or 128 tokens of a pretrained GPT-2's 1024.
      const seq = tab.window() || model.config.context;
      if (ids.length < seq + 2) {
        throw new Error(`the text has ${ids.length} tokens: give more than the training window (${seq} tokens)`);
      }
      const prompt = promptEl.value || text.slice(0, 16);
      await tok.encode(prompt); // a prompt the tokenizer refuses fails here, before an earlier adapter is removed
      // A new fine-tuning starts from the base: the adapters of an earlier one go.
      if (model.lora) await model.removeLora();
      Object.assign(s, {
        state: "idle", step: 0, steps, firstLoss: null, lastLoss: null, tokensPerSecond: 0, adapterParameters: 0,
        baseParameters: model.numParameters(), trainingBytes: 0, fullTrainingBytes: 12 * model.numParameters(),
        prompt, before: "", after: "", names: tab.origin(),
      });
      chart.clear();
      afterEl.textContent = "";
      showStats();
      s.before = await sample(model, s.prompt);
      beforeEl.textContent = s.before;
      // alpha = 2 rank: the adapters' scale alpha / rank is 2 whatever the rank.
      await model.addLora({ rank, alpha: 2 * rank, targets: [...TARGETS] });
      const oldLr = model.config.lr;
      await model.setLearningRate(lr);
      run = { model, trainer: new Trainer(model, { data: ids, batchSize: batch, seqLen: seq, seed: 1234 }), batch, seq, lr: oldLr, recent: [] };
      s.state = "training";
      loop.start();
    } catch (e) {
      fail(e);
    } finally {
      busy = false;
      buttons();
    }
  };
  stopButton.onclick = () => loop.pause();

  removeButton.onclick = async () => {
    const model = tab.current();
    if (!model?.lora) return;
    busy = true;
    buttons();
    try {
      await model.removeLora();
      Object.assign(s, { state: "idle", adapterParameters: 0, trainingBytes: 0 });
      showStats();
    } catch (e) {
      fail(e);
    } finally {
      busy = false;
      buttons();
    }
  };

  downloadButton.onclick = async () => {
    const model = tab.current();
    if (!model?.lora) return;
    busy = true;
    buttons();
    try {
      // In the names of the model the adapter is on now (a pretrained GPT-2's: PEFT's), whichever way it came.
      s.names = tab.origin();
      const files = await model.saveAdapter({ names: s.names });
      download(files.safetensors, "adapter_model.safetensors", "application/octet-stream");
      download(files.config, "adapter_config.json", "application/json");
      s.downloads++;
    } catch (e) {
      errorEl.textContent = `Download failed: ${errorText(e)}`;
    } finally {
      busy = false;
      buttons();
    }
  };

  loadInput.onchange = async () => {
    const model = tab.current();
    const files = [...(loadInput.files ?? [])];
    loadInput.value = "";
    if (!model || files.length === 0) return;
    busy = true;
    errorEl.textContent = "";
    buttons();
    try {
      const weights = files.find((f) => f.name.endsWith(".safetensors"));
      const config = files.find((f) => f.name.endsWith(".json"));
      if (!weights || !config) {
        throw new Error(`pick both files of the adapter, adapter_model.safetensors and adapter_config.json; got ${files.map((f) => f.name).join(", ")}`);
      }
      await tab.pause();
      await model.loadAdapter({ config: await config.text(), safetensors: new Uint8Array(await weights.arrayBuffer()) });
      // The adapter's text after the same prompt and seed as the last before/after pair (or the text's start).
      s.prompt ||= promptEl.value || textEl.value.slice(0, 16) || "\n";
      s.after = await sample(model, s.prompt);
      afterEl.textContent = s.after;
      s.state = "done";
      s.loads++;
    } catch (e) {
      fail(e);
    } finally {
      busy = false;
      buttons();
    }
  };

  tab.onModel(() => {
    // Another model: the panel starts over (its adapters, if any, went with the old model). The state first, so
    // that the loop's stop does not write the "after" sample of a disposed model.
    run = undefined;
    void loop.stop();
    Object.assign(s, { state: "idle", step: 0, steps: 0, firstLoss: null, lastLoss: null, tokensPerSecond: 0, adapterParameters: 0, trainingBytes: 0 });
    chart.clear();
    beforeEl.textContent = "";
    afterEl.textContent = "";
    showStats();
    buttons();
  });
  showStats();
  buttons();
}
