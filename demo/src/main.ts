// The qkv demo: three tabs (a char-level GPT, an encoder-decoder on string tasks, a text classifier), each
// training in the page. The core runs in qkv's Worker, so this thread only lays out batches and draws.
import { init, memory, type RuntimeInfo } from "qkv";
import { setupClassifier } from "./classifier.js";
import { setupLanguageModel } from "./lm.js";
import { setupLora } from "./lora.js";
import { setupPretrained } from "./pretrained.js";
import { setupSeq2Seq } from "./seq2seq.js";
import { state } from "./state.js";
import { setupTabs } from "./tabs.js";
import { $, errorText } from "./ui.js";

export type { DemoState } from "./state.js";

const statusEl = $("#status");
/** The status's words, a live region: what runs, or the core's error. The memory figure beside it changes every
 * 2 s and is not announced. */
const statusText = $("#status-text");
const statusMemory = $("#status-memory");

function mib(bytes: number): string {
  return `${(bytes / 2 ** 20).toFixed(1)} MiB`;
}

/** The status line: what runs (threads, SIMD) and the wasm heap, refreshed every 2 s. */
function showRuntime(info: RuntimeInfo, heap?: { heapBytes: number; heapUsedBytes: number }): void {
  const where = info.backend === "webgpu" ? `WebGPU on ${info.adapter ?? "a GPU"} · ` : "";
  const what = info.threaded
    ? `threaded: ${info.threads} threads`
    : `single-threaded${state.crossOriginIsolated ? "" : " (the page is not cross-origin isolated)"}`;
  // The bytes in use come from the allocator's statistics; where a build reports none (0), the heap's size.
  const mem = !heap ? statusMemory.textContent ?? ""
    : heap.heapUsedBytes > 0 ? ` · wasm memory ${mib(heap.heapUsedBytes)} in use of ${mib(heap.heapBytes)}`
    : ` · wasm heap ${mib(heap.heapBytes)}`;
  const simd = `SIMD ${info.simd}${info.relaxedSimd ? " + relaxed" : ""}`;
  statusText.textContent = `${where}${what} · ${simd} · qkv ${info.version}`;
  statusMemory.textContent = mem;
  const d = statusEl.dataset;
  d.state = "ready";
  d.backend = info.backend;
  d.threaded = String(info.threaded);
  d.threads = String(info.threads);
  d.simd = info.simd;
  d.relaxedSimd = String(info.relaxedSimd);
  if (heap) d.heapUsed = String(heap.heapUsedBytes);
}

type BackendChoice = "webgpu" | "wasm" | "auto";

/** The backend asked for in the address (?backend=webgpu|wasm|auto): init() runs once per page, so the
 * switch reloads the page with the new choice. */
function backendChoice(): BackendChoice {
  const b = new URLSearchParams(location.search).get("backend");
  return b === "webgpu" || b === "wasm" ? b : "auto";
}

/** Whether the page holds what a reload would lose: a model trained, loaded or fine-tuned here. */
function holdsWork(): boolean {
  return state.lm.step > 0 || state.seq2seq.step > 0 || state.classifier.step > 0 ||
    state.pretrained.state === "ready" || state.lora.step > 0 || state.lora.loads > 0;
}
/** Set when the page leaves on purpose (the user confirmed): no second question on the way out. */
let leaving = false;

function setupBackendSwitch(info: RuntimeInfo | undefined, chosen: BackendChoice): void {
  const select = $("#backend") as HTMLSelectElement;
  select.value = chosen;
  select.onchange = () => {
    // A keyboard's arrow on the closed select changes it too: the reload is asked for, not done at once.
    const label = select.selectedOptions[0]?.textContent ?? select.value;
    if (holdsWork() && !confirm(`Running on ${label} reloads the page: the models trained or loaded here are lost. Reload?`)) {
      select.value = chosen;
      return;
    }
    leaving = true;
    const url = new URL(location.href);
    url.searchParams.set("backend", select.value);
    location.assign(url);
  };
  $("#backend-note").textContent = info?.fallbackReason ? `(wasm runs: ${info.fallbackReason})` : "";
}

/** What would lose the page's models by accident: leaving (asked first), and a file dropped outside a drop box
 * (which the browser would open in the tab). */
function guardTheWork(): void {
  addEventListener("beforeunload", (e) => {
    if (leaving || !holdsWork()) return;
    e.preventDefault();
    e.returnValue = ""; // Chromium before 119 asks only with returnValue set
  });
  // The boxes that take files (the text areas, the pretrained panel) handle their drops and stop them there.
  document.addEventListener("dragover", (e) => e.preventDefault());
  document.addEventListener("drop", (e) => e.preventDefault());
}

async function main(): Promise<void> {
  $("#isolation-note").hidden = state.crossOriginIsolated;
  guardTheWork();
  setupTabs($("#tabs"));
  const chosen = backendChoice();
  setupBackendSwitch(undefined, chosen);
  const info = await init({ backend: chosen });
  setupBackendSwitch(info, chosen);
  Object.assign(state, { threaded: info.threaded, threads: info.threads, simd: info.simd, relaxedSimd: info.relaxedSimd });
  showRuntime(info);
  const refresh = async () => {
    try {
      showRuntime(info, await memory());
    } catch (e) {
      // memory() fails only when the core cannot answer (a fatal trap ended its Worker): the page must be reloaded.
      clearInterval(timer);
      state.error = errorText(e);
      statusEl.dataset.state = "error";
      statusText.textContent = `The core stopped: ${state.error}. Reload the page to start again.`;
      statusMemory.textContent = "";
    }
  };
  const timer = setInterval(() => void refresh(), 2000);
  const lm = setupLanguageModel();
  setupPretrained(lm);
  setupLora(lm);
  setupSeq2Seq();
  setupClassifier();
  void refresh();
}

main().catch((e: unknown) => {
  state.error = errorText(e);
  statusEl.dataset.state = "error";
  statusText.textContent = `Error: ${state.error}`;
  console.error(e);
});
