// The browser Worker's failure handling, in Node with a stand-in Worker (the client depends on no browser
// global): a failed call rejects alone; a crashed Worker (an error event, or a trap reported as fatal)
// rejects every pending and later call with a clear Error and is terminated; init() then starts a new one.
import { describe, expect, it } from "vitest";
import { setPlatform, type Backend } from "../../web/dist/platform.js";
import type { Request, Response } from "../../web/dist/protocol.js";
import { init } from "../../web/dist/runtime.js";
import { WorkerClient, type WorkerLike } from "../../web/dist/worker-client.js";

/** A Worker that records what it is sent and answers only when the test says so. */
class FakeWorker implements WorkerLike {
  onmessage: ((e: MessageEvent<Response>) => void) | null = null;
  onerror: ((e: ErrorEvent) => void) | null = null;
  onmessageerror: ((e: MessageEvent) => void) | null = null;
  readonly sent: Request[] = [];
  terminated = false;

  postMessage(message: unknown): void {
    if (typeof message === "object" && message !== null && "in" in message && typeof message.in === "function") {
      throw new DOMException("function could not be cloned", "DataCloneError");
    }
    this.sent.push(message as Request);
  }
  terminate(): void {
    this.terminated = true;
  }
  reply(r: Response): void {
    this.onmessage?.({ data: r } as MessageEvent<Response>);
  }
  crash(message: string): void {
    let prevented = false;
    this.onerror?.({ message, preventDefault: () => (prevented = true) } as ErrorEvent);
    expect(prevented).toBe(true); // the client handles it: no uncaught error in the page's console
  }
}

const memoryIn = null;

describe("WorkerClient", () => {
  it("a call that fails in the worker rejects alone; the others resolve and the worker lives", async () => {
    const w = new FakeWorker();
    const c = new WorkerClient(w);
    const bad = c.call("memory", memoryIn);
    const good = c.call("dispose", { model: 1 });
    w.reply({ id: w.sent[0]!.id, err: { name: "Error", message: "inputs[3] = 99 is out of range" } });
    w.reply({ id: w.sent[1]!.id, out: null });
    await expect(bad).rejects.toThrow(/inputs\[3\] = 99 is out of range/);
    await expect(good).resolves.toBeNull();
    const typed = c.call("dispose", { model: 2 });
    w.reply({ id: w.sent[2]!.id, err: { name: "TypeError", message: "model must be a number" } });
    await expect(typed).rejects.toBeInstanceOf(TypeError);
    expect(w.terminated).toBe(false);
    expect(c.failed()).toBeUndefined();
  });

  it("an input that cannot be cloned rejects that call alone", async () => {
    const w = new FakeWorker();
    const c = new WorkerClient(w);
    await expect(c.call("setLearningRate", (() => 0) as never)).rejects.toThrow(/could not be cloned/);
    const ok = c.call("setLearningRate", { model: 1, lr: 0.1 });
    w.reply({ id: w.sent[0]!.id, out: null });
    await expect(ok).resolves.toBeNull();
    expect(c.failed()).toBeUndefined();
  });

  it("a crashed worker rejects every pending and later call with a clear Error and is terminated", async () => {
    const w = new FakeWorker();
    const c = new WorkerClient(w);
    const pending = [c.call("memory", memoryIn), c.call("dispose", { model: 1 }), c.call("dispose", { model: 2 })];
    w.crash("Uncaught RangeError: Maximum call stack size exceeded");
    for (const p of pending) {
      await expect(p).rejects.toThrow(
        /qkv: the core's worker crashed \(Uncaught RangeError: Maximum call stack size exceeded\); the models it held are lost\. Call init\(\) again/,
      );
    }
    await expect(c.call("memory", memoryIn)).rejects.toThrow(/worker crashed/);
    expect(w.sent.length).toBe(3); // nothing more is sent to a dead worker
    expect(w.terminated).toBe(true);
    expect(c.failed()?.message).toMatch(/worker crashed/);
    // A reply that arrives after the crash is ignored, not delivered to a settled promise.
    w.reply({ id: w.sent[0]!.id, out: null });
  });

  it("a stream hands over each token message before its reply, and stop() sends a cancel once", async () => {
    const w = new FakeWorker();
    const c = new WorkerClient(w);
    const input = { model: 1, prompt: Int32Array.of(1), options: {} as never };
    const tokens: number[] = [];
    const s = c.stream(input, (t) => tokens.push(t));
    const other = c.call("dispose", { model: 2 });
    const id = w.sent[0]!.id;
    expect(w.sent[0]).toMatchObject({ type: "stream", id, in: input });
    w.reply({ id, token: 4 });
    w.reply({ id: w.sent[1]!.id, out: null }); // another call's reply between two tokens
    w.reply({ id, token: 2 });
    expect(tokens).toEqual([4, 2]);
    s.stop();
    expect(w.sent[2]).toEqual({ type: "cancel", id });
    w.reply({ id, token: 7 }); // made before the worker saw the cancel
    w.reply({ id, out: { tokens: Int32Array.of(4, 2, 7) } });
    await expect(s.result).resolves.toEqual(Int32Array.of(4, 2, 7));
    await expect(other).resolves.toBeNull();
    expect(tokens).toEqual([4, 2, 7]); // the client delivers them all; LanguageModel drops those after a stop
    s.stop(); // after the reply: nothing to cancel
    w.reply({ id, token: 9 }); // and a stray token of an ended stream is ignored
    expect(w.sent).toHaveLength(3);
    expect(tokens).toEqual([4, 2, 7]);
  });

  it("a failed stream rejects with the worker's error; a crash rejects it like any call", async () => {
    const w = new FakeWorker();
    const c = new WorkerClient(w);
    const input = { model: 1, prompt: Int32Array.of(1), options: {} as never };
    const bad = c.stream(input, () => undefined);
    w.reply({ id: w.sent[0]!.id, err: { name: "Error", message: "top_p = 0 is invalid" } });
    await expect(bad.result).rejects.toThrow(/top_p = 0 is invalid/);
    const running = c.stream(input, () => undefined);
    w.crash("out of memory");
    await expect(running.result).rejects.toThrow(/worker crashed \(out of memory\)/);
    running.stop(); // a dead worker gets no cancel
    expect(w.sent.map((m) => m.type)).toEqual(["stream", "stream"]);
  });

  it("a trap in the core (a fatal error reply) fails that call and every other one, and ends the worker", async () => {
    const w = new FakeWorker();
    const c = new WorkerClient(w);
    const trapped = c.call("memory", memoryIn);
    const other = c.call("dispose", { model: 1 });
    const message = "qkv: the core crashed (RuntimeError: memory access out of bounds); the models it held are lost";
    w.reply({ id: w.sent[0]!.id, err: { name: "Error", message, fatal: true } });
    await expect(trapped).rejects.toThrow(/memory access out of bounds/);
    await expect(other).rejects.toThrow(/the core crashed .*memory access out of bounds/);
    await expect(c.call("memory", memoryIn)).rejects.toThrow(/the core crashed/);
    expect(w.terminated).toBe(true);
  });
});

describe("init after a crash", () => {
  it("starts a new worker; before a crash it returns the first one", async () => {
    const workers: FakeWorker[] = [];
    const backends: Backend[] = [];
    setPlatform({
      defaultThreads: () => 2,
      async load(options) {
        const w = new FakeWorker();
        workers.push(w);
        const backend = new WorkerClient(w);
        backends.push(backend);
        return { backend, info: { threaded: true, threads: options.threads, simd: "fake", version: "0" } as never };
      },
    });
    await init();
    await init();
    expect(workers.length).toBe(1); // one core per page while it is alive
    workers[0]!.crash("out of memory");
    await expect(backends[0]!.call("memory", memoryIn)).rejects.toThrow(/worker crashed \(out of memory\)/);
    const info = await init({ threads: 3 });
    expect(workers.length).toBe(2);
    expect(info.threads).toBe(3);
    const call = backends[1]!.call("memory", memoryIn);
    workers[1]!.reply({ id: workers[1]!.sent[0]!.id, out: { models: [], heapBytes: 1, heapUsedBytes: 1, heapMaxBytes: 1 } });
    await expect(call).resolves.toMatchObject({ models: [] });
    expect(workers[1]!.terminated).toBe(false);
  });
});
