// Adds entries to a safetensors file's `__metadata__`. The package's `save()` writes the model and its
// optimizer state but no tokenizer; the demo stores its tokenizer under `qkv.tokenizer`, the key the `qkv`
// tool uses, so that a saved file loads back here (and in `qkv generate`) with its vocabulary.
//
// Layout: 8-byte little-endian header length N, N bytes of JSON, then the tensor data. Tensor offsets are
// relative to the data, so a longer header moves nothing else.

export function withMetadata(file: Uint8Array, extra: Record<string, string>): Uint8Array<ArrayBuffer> {
  if (file.length < 8) throw new Error(`file has ${file.length} bytes: expected a safetensors file (at least 8)`);
  const view = new DataView(file.buffer, file.byteOffset, file.byteLength);
  const n = Number(view.getBigUint64(0, true));
  if (8 + n > file.length) throw new Error(`file: header length ${n} runs past the end (${file.length} bytes)`);
  const header = JSON.parse(new TextDecoder().decode(file.subarray(8, 8 + n))) as Record<string, unknown>;
  const meta = (header.__metadata__ ?? {}) as Record<string, string>;
  header.__metadata__ = { ...meta, ...extra };
  let json = new TextEncoder().encode(JSON.stringify(header));
  // The data stays 8-byte aligned, as the format recommends: pad the header with spaces.
  const padded = Math.ceil(json.length / 8) * 8;
  if (padded !== json.length) {
    const p = new Uint8Array(padded).fill(0x20);
    p.set(json);
    json = p;
  }
  const out = new Uint8Array(8 + json.length + (file.length - 8 - n));
  new DataView(out.buffer).setBigUint64(0, BigInt(json.length), true);
  out.set(json, 8);
  out.set(file.subarray(8 + n), 8 + json.length);
  return out;
}
