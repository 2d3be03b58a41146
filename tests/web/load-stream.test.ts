// Streamed loads (web/src/load-stream.ts): a checkpoint from a Response, a Blob or a ReadableStream loads the same
// model as its bytes; progress is reported; an AbortSignal cancels and leaves the core usable; truncated files and
// HTTP errors reject naming what is wrong. (Its memory: load-memory.test.ts.)
import { describe, expect, it } from "vitest";
import { LanguageModel, memory } from "../../web/dist/node.js";

const SMALL = { vocabSize: 24, context: 8, dModel: 16, heads: 2, layers: 2 };
const IDS = Int32Array.of(1, 2, 3, 4, 5, 6, 7, 8);

/** A stream giving `b` in chunks of `size` bytes (each in a buffer of its own, as a network stream does). */
function chunked(b: Uint8Array, size: number): ReadableStream<Uint8Array> {
  let at = 0;
  return new ReadableStream<Uint8Array>({
    pull(c) {
      if (at >= b.length) return c.close();
      c.enqueue(b.slice(at, at + size));
      at += size;
    },
  });
}

async function logits(m: LanguageModel): Promise<Float32Array> {
  return m.predict(IDS, { batch: 1 });
}

describe("LanguageModel.load from a stream", () => {
  it("loads the same model from a Response, a Blob and a ReadableStream as from its bytes", async () => {
    using a = await LanguageModel.create(SMALL);
    await a.trainStep(IDS, IDS.map((x) => (x + 1) % 24), { batch: 1 });
    const bytes = await a.save();
    const want = await logits(a);
    for (const source of [new Response(bytes), new Blob([bytes]), chunked(bytes, 777), chunked(bytes, 1), bytes.buffer.slice(0)]) {
      using b = await LanguageModel.load(source as Uint8Array, { onProgress: () => undefined });
      expect(await logits(b)).toEqual(want);
    }
  });

  it("reports progress up to the file's size", async () => {
    using a = await LanguageModel.create({ ...SMALL, vocabSize: 4096, dModel: 64 });  // about 1.3 MB: several pieces
    const bytes = await a.save({ optimizer: true });
    const seen: { loaded: number; total: number | undefined }[] = [];
    using b = await LanguageModel.load(new Blob([bytes]), { onProgress: (p) => seen.push(p) });
    expect(seen.length).toBeGreaterThan(0);
    for (let i = 1; i < seen.length; i++) expect(seen[i]!.loaded).toBeGreaterThan(seen[i - 1]!.loaded);
    expect(seen.at(-1)).toEqual({ loaded: bytes.length, total: bytes.length });
    const unknown: (number | undefined)[] = [];
    using c = await LanguageModel.load(chunked(bytes, 65536), { onProgress: (p) => unknown.push(p.total) });
    expect(unknown.every((t) => t === undefined)).toBe(true);
    expect(await logits(c)).toEqual(await logits(b));
  });

  it("an AbortSignal cancels the load, frees what was loaded and leaves the core usable", async () => {
    using a = await LanguageModel.create({ ...SMALL, vocabSize: 8192, dModel: 64 });  // about 2.5 MB with moments
    const bytes = await a.save({ optimizer: true });
    const before = (await memory()).models.length;
    const early = new AbortController();
    early.abort();
    await expect(LanguageModel.load(new Blob([bytes]), { signal: early.signal })).rejects.toMatchObject({ name: "AbortError" });
    // The first 5 MiB arrive, then the source stalls: the first 4 MiB piece reaches the core (progress), and the
    // abort it triggers cancels the stalled read.
    const midway = new AbortController();
    let cancelled = false;
    const stalled = new ReadableStream<Uint8Array>({
      start(c) {
        c.enqueue(bytes.slice(0, 5 << 20));
      },
      pull() {
        return new Promise<void>(() => undefined);
      },
      cancel() {
        cancelled = true;
      },
    });
    expect(bytes.length).toBeGreaterThan(5 << 20);
    const seen: number[] = [];
    const load = LanguageModel.load(stalled, {
      signal: midway.signal,
      onProgress: (p) => {
        seen.push(p.loaded);
        midway.abort();
      },
    });
    await expect(load).rejects.toMatchObject({ name: "AbortError" });
    expect(seen).toEqual([4 << 20]);
    expect(cancelled).toBe(true);
    const reason = new AbortController();
    reason.abort(new Error("user closed the tab"));
    await expect(LanguageModel.load(new Blob([bytes]), { signal: reason.signal })).rejects.toThrow("user closed the tab");
    expect((await memory()).models.length).toBe(before);
    // The core is fine: the same file loads.
    using b = await LanguageModel.load(new Blob([bytes]));
    expect(await logits(b)).toEqual(await logits(a));
  });

  it("rejects a truncated file, bytes past its end, an HTTP error and a bad source, naming each", async () => {
    using a = await LanguageModel.create(SMALL);
    const bytes = await a.save();
    await expect(LanguageModel.load(chunked(bytes.slice(0, bytes.length - 9), 100))).rejects.toThrow(
      new RegExp(`the file ended after ${bytes.length - 9} of the ${bytes.length} bytes its header gives \\(truncated\\?\\)`),
    );
    await expect(LanguageModel.load(new Blob([bytes.slice(0, 5)]))).rejects.toThrow(/shorter than the 8-byte header length|truncated/);
    const longer = new Uint8Array(bytes.length + 3);
    longer.set(bytes);
    await expect(LanguageModel.load(chunked(longer, 4096))).rejects.toThrow(/expected no bytes after the last tensor/);
    const gone = new Response("not found", { status: 404, statusText: "Not Found" });
    await expect(LanguageModel.load(gone)).rejects.toThrow(/HTTP 404 Not Found/);
    await expect(LanguageModel.load("model.safetensors" as unknown as Uint8Array, {})).rejects.toThrow(
      /source must be a Uint8Array, an ArrayBuffer, a Response, a Blob or a ReadableStream/,
    );
    await expect(LanguageModel.load(bytes, { signal: 1 as unknown as AbortSignal })).rejects.toThrow(/options.signal must be an AbortSignal/);
    // Nothing was left behind, and a good load still works.
    using b = await LanguageModel.load(chunked(bytes, 4096));
    expect(await logits(b)).toEqual(await logits(a));
  });
});
