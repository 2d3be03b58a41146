// A second init(): with no options, or options the running core has, it resolves to the running core's info; with
// options it does not have (another backend, thread count, build or wasm folder), it rejects naming each one and
// how to get them, and starts nothing. In Node with a stand-in platform, so that a WebGPU core and the
// single-threaded build can run here too; tests/web/language-model.test.ts checks the same against the real core.
import { describe, expect, it } from "vitest";
import { setPlatform, type Backend } from "../../web/dist/platform.js";
import type { RuntimeInfo } from "../../web/dist/types.js";
import { init } from "../../web/dist/runtime.js";

/** A platform whose cores answer `answer` (given the resolved options) and can be crashed, counting its loads. */
function fakePlatform(answer: (o: { threads: number; backend?: string }) => Partial<RuntimeInfo>) {
  const started: { crash(): void }[] = [];
  setPlatform({
    defaultThreads: () => 2,
    async load(options) {
      let failed: Error | undefined;
      const backend = { failed: () => failed } as unknown as Backend;
      started.push({ crash: () => (failed = new Error("crashed")) });
      const info = { threaded: true, threads: options.threads, simd: "fake", relaxedSimd: false, version: "0", backend: "wasm", ...answer(options) };
      return { backend, info: info as RuntimeInfo };
    },
  });
  return started;
}

describe("init called again", () => {
  it("resolves to the running core with the same options, and refuses other ones naming each", async () => {
    const cores = fakePlatform((o) => ({ backend: o.backend === "webgpu" ? "webgpu" : "wasm", adapter: "fake gpu" }));
    const info = await init({ backend: "webgpu", threads: 2 });
    expect(info).toMatchObject({ backend: "webgpu", threads: 2, threaded: true, relaxedSimd: false });
    // Nothing asked, or only what runs: "auto" is what a core on WebGPU has.
    for (const same of [undefined, {}, { backend: "webgpu" as const }, { backend: "auto" as const }, { threads: 2, threaded: true }, { relaxedSimd: false }]) {
      expect(await init(same)).toBe(info);
    }
    await expect(init({ backend: "wasm" })).rejects.toThrow(
      /^qkv: init\(\) asked for backend "wasm" \(running: "webgpu"\), but the core already runs \(started by init\(\{ backend: "webgpu", threads: 2 \}\)\), and a running core keeps its options\. To get these, call init\(\) with them before creating or loading any model .*or dispose\(\) every model and start over \(reload the page, or restart the process in Node\)$/,
    );
    const both = init({ threads: 1, relaxedSimd: true });
    await expect(both).rejects.toThrow(/asked for threads 1 \(running: 2\), relaxedSimd true \(running: false\), but/);
    // A bad option is the bad option's error, not a conflict.
    await expect(init({ threads: 0 })).rejects.toThrow(/threads must be a positive integer, got 0/);
    await expect(init(null as never)).rejects.toThrow(/options must be an object/);
    await expect(init({ backend: "gpu" as "webgpu" })).rejects.toThrow(/backend must be "webgpu", "wasm" or "auto", got "gpu"/);
    expect(cores.length).toBe(1); // a refused init starts nothing
    // After a crash, init starts a new core with its own options.
    cores[0]!.crash();
    expect(await init({ backend: "wasm", threads: 3 })).toMatchObject({ backend: "wasm", threads: 3 });
    expect(cores.length).toBe(2);
    cores[1]!.crash();
  });

  it("compares backend, build and wasm folder with what the first call started", async () => {
    const cores = fakePlatform(() => ({ backend: "wasm", fallbackReason: "no adapter" }));
    // Started by a model's create() with the defaults: "auto" picked the wasm core.
    const info = await init();
    for (const same of [{ backend: "wasm" as const }, { backend: "auto" as const }, { threads: 2 }, { threaded: true }]) {
      expect(await init(same)).toBe(info);
    }
    // The issue's case: init({ backend: "webgpu", threads: 1 }) after a core started with 2 threads.
    await expect(init({ backend: "webgpu", threads: 1 })).rejects.toThrow(
      /asked for threads 1 \(running: 2\), backend "webgpu" \(running: "wasm"\), but the core already runs \(started by init\(\) or a model's create\/load with the defaults\)/,
    );
    await expect(init({ wasmPath: "https://cdn.example/qkv/" })).rejects.toThrow(
      /asked for wasmPath "https:\/\/cdn\.example\/qkv\/" \(running: the default wasm\/ folder\)/,
    );
    await expect(init({ threaded: false })).rejects.toThrow(/asked for threaded false \(running: true\)/);
    cores[0]!.crash();

    // Started on the wasm core by name: "auto" would have tried the GPU, so it differs.
    await init({ backend: "wasm", wasmPath: "https://cdn.example/qkv/" });
    expect((await init({ wasmPath: "https://cdn.example/qkv/", backend: "wasm" })).backend).toBe("wasm");
    await expect(init({ backend: "auto" })).rejects.toThrow(/asked for backend "auto" \(running: "wasm"\)/);
    await expect(init({ wasmPath: new URL("https://cdn.example/other/") })).rejects.toThrow(
      /asked for wasmPath "https:\/\/cdn\.example\/other\/" \(running: "https:\/\/cdn\.example\/qkv\/"\)/,
    );
    cores[1]!.crash();
    expect(cores.length).toBe(2);
  });

  it("the single-threaded build ignores threads, as when it starts", async () => {
    const cores = fakePlatform(() => ({ threaded: false, threads: 1 }));
    await init({ threads: 4 });
    expect(await init({ threads: 4 })).toMatchObject({ threaded: false, threads: 1 });
    expect(await init({ threads: 1, threaded: false })).toMatchObject({ threaded: false });
    await expect(init({ threaded: true, threads: 4 })).rejects.toThrow(/asked for threaded true \(running: false\), but/);
    // A second call made while the first is still loading is compared once it has loaded.
    cores[0]!.crash();
    const first = init({ threads: 2, threaded: false });
    const second = init({ threaded: true });
    await expect(first).resolves.toMatchObject({ threaded: false });
    await expect(second).rejects.toThrow(/asked for threaded true \(running: false\)/);
    expect(cores.length).toBe(2);
  });
});
