// checkpointMetadata reads a file's header alone: a checkpoint of about 64 MB crosses into the core as its few
// kilobytes of header, not whole (it was copied into the wasm heap twice, and the heap never shrinks). In a process
// of its own (vitest runs each file in one), so that the heap's growth measures this call alone.
import { describe, expect, it } from "vitest";
import { checkpointMetadata, init, memory } from "../../web/dist/node.js";
import { randomSafetensors } from "./helpers.js";

describe("checkpointMetadata", () => {
  it("reads the header alone: the wasm heap does not grow by the file, and the file is still checked whole", async () => {
    await init({ threads: 1 });
    const metadata = { "qkv.model": "language_model", "app.note": "x".repeat(1000) };
    const file = randomSafetensors(
      [
        ["a.weight", [4096, 2048]],
        ["b.weight", [4096, 2048]],
      ],
      metadata,
    );
    expect(file.length).toBeGreaterThan(64e6);
    const before = (await memory()).heapBytes;
    expect(await checkpointMetadata(file)).toEqual(metadata);
    expect((await memory()).heapBytes - before).toBeLessThan(4e6);
    // The header is checked against the file's size, as before: a file cut short, or one with bytes past its last
    // tensor, is refused.
    await expect(checkpointMetadata(file.subarray(0, file.length - 1))).rejects.toThrow(/safetensors:/);
    const longer = new Uint8Array(file.length + 4);
    longer.set(file);
    await expect(checkpointMetadata(longer)).rejects.toThrow(/safetensors:/);
    // A PyTorch pickle is named as one; a header length past the file is refused.
    await expect(checkpointMetadata(Uint8Array.of(0x50, 0x4b, 3, 4, 0, 0, 0, 0, 0, 0))).rejects.toThrow(/PyTorch pickle/);
    const past = new Uint8Array(64);
    new DataView(past.buffer).setBigUint64(0, 1000n, true);
    await expect(checkpointMetadata(past)).rejects.toThrow(/safetensors:/);
  });
});
