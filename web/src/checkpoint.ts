// A checkpoint's metadata: public (checkpointMetadata) and what Tokenizer.fromCheckpoint reads. A module of
// its own, below both model.ts and tokenizer.ts, so that the package's modules form a tree (types.ts at the
// bottom; tests/web/modules.test.ts checks it).
import { backend } from "./runtime.js";
import { bytes } from "./validate.js";

/**
 * The safetensors `__metadata__` of a checkpoint: `qkv.model`, `qkv.config`, ..., and `qkv.tokenizer` (the
 * tokenizer's JSON) when the `qkv train` tool wrote it. Rejects, saying why, for bytes that are not a
 * well-formed safetensors file.
 */
export async function checkpointMetadata(data: Uint8Array | ArrayBuffer): Promise<Record<string, string>> {
  const b = bytes("bytes", data);
  // Only the 8-byte length and the header go to the core (a copy of them alone: a view would send its whole buffer
  // to the Worker); the core checks them against the file's size.
  const n = b.length >= 8 ? new DataView(b.buffer, b.byteOffset, 8).getBigUint64(0, true) : 0n;
  // A length past the file or past the readers' 100 MB limit: the first bytes are enough for the core to say so.
  const whole = n <= BigInt(b.length - 8) && n <= 100_000_000n;
  const head = whole ? b.slice(0, 8 + Number(n)) : b.slice(0, Math.min(b.length, 16));
  return (await (await backend()).call("checkpointMetadata", { head, fileSize: b.length })).metadata;
}
