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
  const mem = !heap ? ""
    : heap.heapUsedBytes > 0 ? ` · wasm memory ${mib(heap.heapUsedBytes)} in use of ${mib(heap.heapBytes)}`
    : ` · wasm heap ${mib(heap.heapBytes)}`;
  const simd = `SIMD ${info.simd}${info.relaxedSimd ? " + relaxed" : ""}`;
  statusEl.textContent = `${where}${what} · ${simd} · qkv ${info.version}${mem}`;
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

function setupBackendSwitch(info: RuntimeInfo | undefined, chosen: BackendChoice): void {
  const select = $("#backend") as HTMLSelectElement;
  select.value = chosen;
  select.onchange = () => {
    const url = new URL(location.href);
    url.searchParams.set("backend", select.value);
    location.assign(url);
  };
  $("#backend-note").textContent = info?.fallbackReason ? `(wasm runs: ${info.fallbackReason})` : "";
}

async function main(): Promise<void> {
  $("#isolation-note").hidden = state.crossOriginIsolated;
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
    } catch {
      // The next refresh tries again; a failed core shows its error in the tabs.
    }
  };
  setInterval(() => void refresh(), 2000);
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
  statusEl.textContent = `Error: ${state.error}`;
  console.error(e);
});
