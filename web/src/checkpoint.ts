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
  return (await (await backend()).call("checkpointMetadata", { bytes: b })).metadata;
}
