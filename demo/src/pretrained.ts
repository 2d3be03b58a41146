// The language-model tab's pretrained section: a GPT-2-family folder as the Hugging Face Hub serves it, loaded
// with LanguageModel.fromPretrained from its URL or from its files (picked, or dropped on the panel), each file's
// progress shown as its bytes arrive and the load cancellable; then the text it writes after a prompt, streamed
// piece by piece with tokens/s. The loaded model becomes the tab's model (Samples and Train use it too).
import { LanguageModel, type PretrainedProgress } from "qkv";
import type { LanguageModelTab } from "./lm.js";
import { state, type FileProgress } from "./state.js";
import { $, errorText, facts, numberInput } from "./ui.js";

const s = state.pretrained;

/** The files a folder's tokenizer comes in; fromPretrained reads them before the weights. */
const TOKENIZER_FILES = ["tokenizer.json", "vocab.json", "merges.txt"];

function size(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 2 ** 20) return `${(n / 1024).toFixed(1)} KiB`;
  if (n < 2 ** 30) return `${(n / 2 ** 20).toFixed(1)} MiB`;
  return `${(n / 2 ** 30).toFixed(2)} GiB`;
}

/**
 * The files of a drop: a dropped folder is read one level deep (its files are what fromPretrained looks for:
 * config.json, model.safetensors, ... at the folder's top).
 */
async function droppedFiles(data: DataTransfer): Promise<File[]> {
  const entries = [...data.items].map((item) => item.webkitGetAsEntry?.()).filter((e) => e != null);
  if (entries.length === 0) return [...data.files];
  const files: File[] = [];
  const file = (e: FileSystemFileEntry) => new Promise<File>((resolve, reject) => e.file(resolve, reject));
  for (const e of entries) {
    if (e.isFile) files.push(await file(e as FileSystemFileEntry));
    else if (e.isDirectory) {
      const reader = (e as FileSystemDirectoryEntry).createReader();
      // readEntries gives a batch at a time (100 in Chromium) until an empty one.
      for (;;) {
        const batch = await new Promise<FileSystemEntry[]>((resolve, reject) => reader.readEntries(resolve, reject));
        if (batch.length === 0) break;
        for (const f of batch) if (f.isFile) files.push(await file(f as FileSystemFileEntry));
      }
    }
  }
  return files;
}

export function setupPretrained(tab: LanguageModelTab): void {
  const panel = $("#pt-panel");
  const urlForm = $<HTMLFormElement>("#pt-url-form");
  const urlInput = $<HTMLInputElement>("#pt-url");
  const urlButton = $<HTMLButtonElement>("#pt-load-url");
  const filesInput = $<HTMLInputElement>("#pt-files");
  const cancelButton = $<HTMLButtonElement>("#pt-cancel");
  const progressList = $("#pt-progress");
  const errorEl = $("#pt-error");
  const modelEl = $("#pt-model");
  const form = $<HTMLFormElement>("#pt-form");
  const promptInput = $<HTMLInputElement>("#pt-prompt");
  const writeButton = $<HTMLButtonElement>("#pt-generate");
  const stopButton = $<HTMLButtonElement>("#pt-stop");
  const statsEl = $("#pt-stats");
  const outputEl = $("#pt-output");

  /** The load under way: a new one or Cancel aborts it. */
  let loading: AbortController | undefined;
  /** True while this panel hands its model to the tab (whose model-change listeners then run). */
  let adopting = false;
  let stopping = false;
  /** Each Write samples anew (at temperature 0 the seed does not matter). */
  let seed = 0;
  /** Each file's row in the progress list. */
  const rows = new Map<string, { bar: HTMLProgressElement; text: HTMLElement }>();

  const buttons = () => {
    const busy = loading !== undefined;
    cancelButton.disabled = !busy;
    writeButton.disabled = s.state === "generating" || busy;
    stopButton.disabled = s.state !== "generating";
  };

  const showStats = () => {
    facts(statsEl, {
      "new tokens": s.tokens.toLocaleString("en-US"),
      "tokens/s": s.tokensPerSecond ? s.tokensPerSecond.toFixed(1) : "–",
    });
    outputEl.dataset.generations = String(s.generations);
  };

  const showProgress = (p: PretrainedProgress) => {
    let f: FileProgress | undefined = s.files.find((x) => x.file === p.file);
    if (!f) {
      f = { file: p.file, loaded: 0, total: null };
      s.files.push(f);
      const li = document.createElement("li");
      const name = document.createElement("span");
      name.textContent = p.file;
      const bar = document.createElement("progress");
      bar.setAttribute("aria-label", `${p.file} read`);
      const text = document.createElement("span");
      li.append(name, bar, text);
      progressList.append(li);
      rows.set(p.file, { bar, text });
    }
    f.loaded = p.loaded;
    f.total = p.total ?? null;
    const row = rows.get(p.file)!;
    if (f.total === null) {
      row.bar.removeAttribute("value"); // indeterminate while the size is unknown
      row.text.textContent = size(f.loaded);
    } else {
      row.bar.max = Math.max(f.total, 1);
      row.bar.value = f.total === 0 ? 1 : f.loaded;
      row.text.textContent = `${size(f.loaded)} of ${size(f.total)}`;
    }
  };

  async function load(source: string | File[], where: string): Promise<void> {
    loading?.abort(new Error("another load started"));
    const controller = new AbortController();
    loading = controller;
    s.state = "loading";
    s.error = null;
    s.files = [];
    rows.clear();
    progressList.replaceChildren();
    errorEl.textContent = "";
    buttons();
    const t0 = performance.now();
    // The package reads the tokenizer's files before the weights, and a folder without them is refused when the
    // weights' first bytes arrive, not after hundreds of MB.
    const noTokenizer = new Error(`${where} has no tokenizer (tokenizer.json, or vocab.json and merges.txt): this demo writes text, so it needs one`);
    const onProgress = (p: PretrainedProgress) => {
      showProgress(p);
      if (p.file.startsWith("model") && !s.files.some((f) => TOKENIZER_FILES.includes(f.file))) controller.abort(noTokenizer);
    };
    try {
      const model = await LanguageModel.fromPretrained(source, { signal: controller.signal, onProgress });
      if (loading !== controller) {
        model.dispose(); // a later load replaced this one
        return;
      }
      const tok = model.tokenizer;
      if (!tok) {
        model.dispose();
        throw noTokenizer;
      }
      const seconds = (performance.now() - t0) / 1000;
      const bytes = s.files.reduce((a, f) => a + f.loaded, 0);
      const about = { pretrained: where, read: `${size(bytes)} in ${seconds.toFixed(1)} s` };
      adopting = true;
      try {
        await tab.adopt(model, tok, about, "gpt2");
      } finally {
        adopting = false;
      }
      facts(modelEl, about);
      s.source = where;
      s.state = "ready";
    } catch (e) {
      if (loading !== controller) return;
      s.state = "error";
      const reason: unknown = controller.signal.reason;
      s.error = !controller.signal.aborted ? errorText(e) : reason === noTokenizer ? noTokenizer.message : `Loading cancelled (${errorText(reason)})`;
      errorEl.textContent = s.error;
    } finally {
      if (loading === controller) {
        loading = undefined;
        s.loads++;
      }
      buttons();
    }
  }

  urlForm.onsubmit = (e) => {
    e.preventDefault();
    const url = urlInput.value.trim();
    if (!url) {
      errorEl.textContent = "Folder URL is empty: give the address of a model folder, e.g. https://huggingface.co/distilgpt2/resolve/main/";
      return;
    }
    void load(url, url);
  };
  const fromFiles = (files: File[]) => void load(files, `${files.length} files (${files.map((f) => f.name).join(", ")})`);
  filesInput.onchange = () => {
    const files = [...(filesInput.files ?? [])];
    filesInput.value = "";
    if (files.length) fromFiles(files);
  };
  panel.addEventListener("dragover", (e) => {
    e.preventDefault();
    panel.classList.add("dragging");
  });
  panel.addEventListener("dragleave", () => panel.classList.remove("dragging"));
  panel.addEventListener("drop", (e) => {
    e.preventDefault();
    panel.classList.remove("dragging");
    if (!e.dataTransfer) return;
    droppedFiles(e.dataTransfer).then(fromFiles, (err: unknown) => (errorEl.textContent = `Cannot read the dropped files: ${errorText(err)}`));
  });
  cancelButton.onclick = () => loading?.abort(new Error("cancelled by the user"));

  form.onsubmit = async (e) => {
    e.preventDefault();
    const model = tab.current();
    if (s.state === "generating") return;
    if (!model) {
      errorEl.textContent = "There is no model yet: load one above (or wait for the tab's first model)";
      return;
    }
    errorEl.textContent = "";
    s.state = "generating";
    s.error = null;
    s.output = "";
    s.tokens = 0;
    s.tokensPerSecond = 0;
    stopping = false;
    buttons();
    const prompt = promptInput.value;
    const promptEl = document.createElement("b");
    promptEl.textContent = prompt;
    const newText = document.createElement("span");
    outputEl.replaceChildren(promptEl, newText);
    // Busy while the text grows: a screen reader announces it once, whole, not again at every token.
    outputEl.setAttribute("aria-busy", "true");
    const t0 = performance.now();
    const rate = () => (s.tokensPerSecond = s.tokens / Math.max((performance.now() - t0) / 1000, 1e-3));
    try {
      const options = {
        maxTokens: Math.floor(numberInput("#pt-length", 1, 2000)),
        temperature: numberInput("#pt-temperature", 0, 3),
        topK: Math.floor(numberInput("#pt-topk", 0, 1e6)),
        seed: ++seed,
        onToken: () => void s.tokens++,
      };
      // A string prompt: the model's tokenizer encodes it, and each piece is new text in whole characters.
      for await (const piece of model.stream(prompt, options)) {
        s.output += piece;
        newText.textContent = s.output;
        rate();
        showStats();
        if (stopping) break; // ends the generation in the core
      }
      rate();
      s.state = "ready";
    } catch (err) {
      s.state = "error";
      s.error = errorText(err);
      errorEl.textContent = s.error;
    } finally {
      outputEl.setAttribute("aria-busy", "false");
      s.generations++;
      showStats();
      buttons();
    }
  };
  stopButton.onclick = () => (stopping = true);
  // Another model in the tab (Train a new model, Load): the pretrained one is gone, and Write writes with that one.
  tab.onModel(() => {
    if (adopting || loading !== undefined || !s.source) return; // ours, or a load under way will adopt its own
    if (s.state === "ready") s.state = "idle";
    s.source = "";
    modelEl.replaceChildren();
    errorEl.textContent = "The tab's model changed: Write now writes with it (load a pretrained model again to use one).";
  });

  showStats();
  urlButton.disabled = false;
  filesInput.disabled = false;
  buttons();
}
