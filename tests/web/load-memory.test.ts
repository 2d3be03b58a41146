// The memory a streamed load takes (load-stream.ts), in a process of its own (vitest runs each file in one): a
// checkpoint of about 40 MB is written here, no model of that size having been built in this process, so that the
// wasm heap's growth measures the load alone. Target (issue 35): wasm + JS memory at most 1.3x the weights.
import { describe, expect, it } from "vitest";
import { checkpointMetadata, LanguageModel, memory } from "../../web/dist/node.js";
import { randomSafetensors } from "./helpers.js";

describe("LanguageModel.load memory", () => {
  it("takes about the weights: wasm heap and JS buffers grow by at most 1.3x the file while it streams in", async () => {
    // The small model's checkpoint gives the metadata and the tensor names; the big one scales every dim.
    using small = await LanguageModel.create({ vocabSize: 24, context: 8, dModel: 16, heads: 2, layers: 2, seed: 7 });
    const smallBytes = await small.save({ optimizer: false });
    const meta = await checkpointMetadata(smallBytes);
    const dims = new Map([[24, 8192], [8, 256], [16, 512], [48, 1536], [64, 2048]]);
    const config = JSON.parse(meta["qkv.config"]!) as Record<string, unknown>;
    Object.assign(config, { vocab_size: 8192, context: 256, d_model: 512, heads: 8 });
    const headerLength = Number(new DataView(smallBytes.buffer, smallBytes.byteOffset).getBigUint64(0, true));
    const smallHeader = JSON.parse(new TextDecoder().decode(smallBytes.subarray(8, 8 + headerLength))) as Record<
      string,
      { shape: number[] }
    >;
    const tensors: [string, number[]][] = Object.entries(smallHeader)
      .filter(([k]) => k !== "__metadata__")
      .map(([k, v]) => [k, v.shape.map((d) => dims.get(d)!)]);
    expect(tensors.every(([, s]) => s.every((d) => d !== undefined))).toBe(true);
    const metadata = { ...meta, "qkv.config": JSON.stringify(config) };
    delete (metadata as Record<string, string>)["qkv.crc32"];
    const file = randomSafetensors(tensors, metadata);
    const weights = file.length;
    expect(weights).toBeGreaterThan(30e6);
    // The file arrives as a download does, in chunks (views of the file here, so that the source allocates
    // nothing: what is measured is the load's own memory).
    const source = () => {
      let at = 0;
      return new ReadableStream<Uint8Array>({
        pull(c) {
          if (at >= file.length) return c.close();
          c.enqueue(file.subarray(at, at + (256 << 10)));
          at += 256 << 10;
        },
      });
    };

    const before = await memory();
    const base = process.memoryUsage().arrayBuffers;
    let peak = base;
    const sample = () => {
      peak = Math.max(peak, process.memoryUsage().arrayBuffers);
    };
    using big = await LanguageModel.load(source(), { onProgress: sample });
    sample();
    const after = await memory();
    // In the wasm heap: what malloc handed out (the heap itself may have had room already), and its growth.
    const used = after.heapUsedBytes - before.heapUsedBytes;
    const grown = after.heapBytes - before.heapBytes;
    // JS buffers besides the wasm memory (which is one of them): the piece in flight and the stream's chunks.
    const js = peak - base - grown;
    console.log(
      `load-memory: file ${weights} bytes; wasm heap: ${used} bytes allocated (${(used / weights).toFixed(2)}x), ` +
        `grown by ${grown}; other JS buffers at the peak: ${js} (${(js / weights).toFixed(2)}x)`,
    );
    expect(used).toBeGreaterThanOrEqual(weights * 0.95);  // the weights are there
    expect(used + js).toBeLessThanOrEqual(1.3 * weights);
    expect(grown).toBeLessThanOrEqual(1.3 * weights);
    const bytes = await big.memory();
    expect(bytes.gradients).toBe(0);
    expect(bytes.parameters).toBe(4 * big.numParameters());
    // It runs.
    const out = await big.predict(Int32Array.of(1, 2, 3), { batch: 1 });
    expect(out.length).toBe(3 * 8192);
    expect(out.every((x) => Number.isFinite(x))).toBe(true);
  });
});
