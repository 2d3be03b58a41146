// A tokenizer crosses to the browser Worker once: encode/decode name it by the key the core holds it under, and
// its JSON (over a megabyte for GPT-2's) is sent again only where that core does not hold it: dropped from its
// cache of 8, or a new core after a crash. Run in Node with the real core behind a WorkerClient and an in-process stand-in
// Worker that copies each message as postMessage does and counts those carrying a tokenizer's JSON.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { beforeAll, describe, expect, it } from "vitest";
import { Engine, type CoreFactory, type QkvCore } from "../../web/dist/core.js";
import { setPlatform } from "../../web/dist/platform.js";
import type { Request, Response } from "../../web/dist/protocol.js";
import { init } from "../../web/dist/runtime.js";
import { BpeTokenizer, CharTokenizer } from "../../web/dist/tokenizer.js";
import { WorkerClient, type WorkerLike } from "../../web/dist/worker-client.js";

const root = fileURLToPath(new URL("../..", import.meta.url));
const FIXTURES = path.join(root, "tests/fixtures/import");

/** The Worker's side (worker.ts) in this process: each message structured-cloned, served by an Engine. */
class EngineWorker implements WorkerLike {
  onmessage: ((e: MessageEvent<Response>) => void) | null = null;
  onerror: ((e: ErrorEvent) => void) | null = null;
  onmessageerror: ((e: MessageEvent) => void) | null = null;
  readonly posts: Request[] = [];

  constructor(private readonly engine: Engine) {}

  postMessage(message: unknown): void {
    const req = structuredClone(message) as Request; // what crosses: a copy
    this.posts.push(req);
    setTimeout(() => {
      let r: Response;
      try {
        r = { id: req.id, out: this.engine.handle(req as Parameters<Engine["handle"]>[0]) };
      } catch (e) {
        const err = e as Error;
        r = { id: req.id, err: { name: err.name, message: err.message } };
      }
      this.onmessage?.({ data: structuredClone(r) } as MessageEvent<Response>);
    });
  }
  terminate(): void {}
}

/** The tokenizer JSON a message carries: a `tokenizer` call's `json` input, or an encode/decode ref's `json`. */
function jsonOf(m: Request): string | undefined {
  const i = m.in as { json?: unknown; tokenizer?: unknown } | null;
  if (m.type === "tokenizer" && typeof i?.json === "string") return i.json;
  if ((m.type === "encode" || m.type === "decode") && typeof i?.tokenizer === "object" && i.tokenizer !== null) {
    const json = (i.tokenizer as { json?: unknown }).json;
    return typeof json === "string" ? json : undefined;
  }
  if ((m.type === "encode" || m.type === "decode") && typeof i?.tokenizer === "string") return i.tokenizer;
  return undefined;
}

let core: QkvCore;
/** Each core "started" (init after a crash starts a new one): its worker and client. */
const started: { worker: EngineWorker; client: WorkerClient }[] = [];
const current = () => started.at(-1)!;
const withJson = (from = 0) => current().worker.posts.slice(from).filter((m) => jsonOf(m) !== undefined).length;

beforeAll(async () => {
  const require = createRequire(import.meta.url);
  const factory = require(path.join(root, "web/dist/wasm/qkv-st.js")) as CoreFactory;
  core = await factory({ wasmBinary: readFileSync(path.join(root, "web/dist/wasm/qkv-st.wasm")) });
  setPlatform({
    defaultThreads: () => 1,
    async load() {
      // A new Engine is what a new Worker would hold: none of the tokenizers the last one held.
      const engine = new Engine(core);
      const info = { threaded: false, threads: 1, simd: core.simd(), relaxedSimd: false, version: core.version(), backend: "wasm" as const };
      engine.runtime = info;
      const worker = new EngineWorker(engine);
      const client = new WorkerClient(worker);
      started.push({ worker, client });
      return { backend: client, info };
    },
  });
  await init();
});

describe("tokenizers through a Worker", () => {
  it("a GPT-2 BPE tokenizer's JSON crosses once, however many encodes and decodes follow", async () => {
    const prompt = readFileSync(path.join(FIXTURES, "gpt2_tok.prompt.txt"), "utf8");
    // The fixture script's ids of the prompt (Hugging Face's GPT-2 tokenizer on the same tokenizer.json).
    const ids = readFileSync(path.join(FIXTURES, "gpt2_tok.greedy.txt"), "utf8").split("\n")[0]!.trim().split(/\s+/).map(Number);
    const fileJson = readFileSync(path.join(FIXTURES, "gpt2_tok/tokenizer.json"), "utf8");
    const start = current().worker.posts.length;
    const tok = await BpeTokenizer.fromJSON(fileJson);
    expect(withJson(start)).toBe(1); // the tokenizer call: the file's JSON goes in
    for (let i = 0; i < 25; i++) {
      expect(Array.from(await tok.encode(prompt))).toEqual(ids);
      expect(await tok.decode(ids)).toBe(prompt);
    }
    // Concurrent calls too: none of them needs the JSON.
    const many = await Promise.all(Array.from({ length: 10 }, () => tok.encode(prompt)));
    for (const m of many) expect(Array.from(m)).toEqual(ids);
    const posts = current().worker.posts.slice(start);
    expect(posts.filter((m) => m.type === "encode" || m.type === "decode")).toHaveLength(60);
    expect(withJson(start)).toBe(1);
    // What the encode and decode messages carry instead: the key alone, a few bytes.
    const sizes = posts.filter((m) => m.type === "decode").map((m) => JSON.stringify((m.in as { tokenizer: unknown }).tokenizer).length);
    expect(Math.max(...sizes)).toBeLessThan(64);
    expect(tok.toJSON().model.type).toBe("BPE"); // the value keeps its JSON

    // A failure of the call itself is not taken for an unknown tokenizer: no retry, no JSON.
    const before = current().worker.posts.length;
    await expect(tok.decode([657])).rejects.toThrow(/657/);
    expect(current().worker.posts.length - before).toBe(1);
    expect(withJson(start)).toBe(1);
  });

  it("a tokenizer the core dropped from its cache of 8 is sent again once, with the same results", async () => {
    const texts = Array.from({ length: 10 }, (_, i) => `abcdefghij`.slice(0, i + 1) + "xyz");
    const toks = [];
    for (const t of texts) toks.push(await CharTokenizer.fromText(t));
    // Ten at once: the core holds the last 8 built, so the first two are refused and go again with their JSON.
    let start = current().worker.posts.length;
    const expected = await Promise.all(toks.map((t, i) => t.encode(texts[i]!)));
    expect(withJson(start)).toBe(2);
    expect(expected.map((ids) => ids.length)).toEqual(texts.map((t) => t.length));
    // The last 8 used, in turn: they are what the core holds afterwards (whichever it had dropped go again).
    for (let i = 2; i < 10; i++) expect(await toks[i]!.encode(texts[i]!)).toEqual(expected[i]);
    start = current().worker.posts.length;
    for (let round = 0; round < 3; round++) {
      for (let i = 2; i < 10; i++) expect(await toks[i]!.encode(texts[i]!)).toEqual(expected[i]);
    }
    expect(withJson(start)).toBe(0);
    start = current().worker.posts.length;
    expect(await toks[0]!.encode(texts[0]!)).toEqual(expected[0]); // dropped: key alone, refused, then with JSON
    const posts = current().worker.posts.slice(start);
    expect(posts.map((m) => jsonOf(m) !== undefined)).toEqual([false, true]);
    expect(await toks[0]!.decode(expected[0]!)).toBe(texts[0]);
    expect(current().worker.posts.length - start).toBe(3);
    expect(withJson(start)).toBe(1);
  });

  it("after a crash, init's new core gets each tokenizer's JSON with its first call", async () => {
    const tok = await CharTokenizer.fromText("hello world");
    const ids = await tok.encode("hello");
    const old = current();
    old.client.fail(new Error("qkv: the core's worker crashed (a test)"));
    await init();
    expect(current()).not.toBe(old);
    expect(await tok.encode("hello")).toEqual(ids);
    expect(await tok.decode(ids)).toBe("hello");
    expect(await tok.encode("world")).toEqual(await tok.encode("world"));
    expect(current().worker.posts.map((m) => [m.type, jsonOf(m) !== undefined])).toEqual([
      ["encode", true],
      ["decode", false],
      ["encode", false],
      ["encode", false],
    ]);
  });
});
