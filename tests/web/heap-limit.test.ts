// A model near the wasm core's 4 GiB: the C++ error reaches JavaScript as itself. Emscripten 3.1.6's glue indexed a
// thrown exception's reference count with a signed shift, so an exception object above 2 GiB made Atomics.add throw
// "RangeError: Invalid atomic access index" instead (web/scripts/copy-wasm.mjs patches the glue). In a file of its
// own: the heap it grows (about 3.4 GB) stays grown for the rest of the process.
import { describe, expect, it } from "vitest";
import { init, LanguageModel } from "../../web/dist/node.js";

describe("a model the heap cannot hold", () => {
  it("rejects with the core's out-of-memory message, and the package stays usable", async () => {
    await init({ threads: 2 });
    // About 3.4 GB of weights: they fit, what the model allocates after them does not, with the heap past 2 GiB.
    const e = await LanguageModel.create({ vocabSize: 65, context: 8, dModel: 8, heads: 2, layers: 1e6 }).then(
      () => new Error("resolved"),
      (err: unknown) => err as Error,
    );
    expect(e).not.toBeInstanceOf(RangeError);
    expect(e.message).toMatch(/^out of memory: could not allocate \d+ bytes \(the wasm core's heap holds \d+ bytes and can grow to at most 4 GiB/);
    const small = await LanguageModel.create({ vocabSize: 16, context: 8, dModel: 8, heads: 2, layers: 1 });
    expect((await small.predict(new Int32Array([1, 2, 3]))).length).toBe(3 * 16);
    small.dispose();
  }, 120_000);
});
