// loadWeights takes PyTorch state dicts as their authors' code saved them (tests/fixtures/import, made by
// make_import_fixtures.py): unchanged, mapped onto the model as it loads, the logits then PyTorch's within 1e-5
// relative. A pickle and a file that does not fit reject naming what to do and every tensor at fault.
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { checkpointMetadata, Classifier, init, LanguageModel, Seq2Seq, Tokenizer } from "../../web/dist/node.js";

const DIR = new URL("../fixtures/import/", import.meta.url);
const file = (name: string) => new Uint8Array(readFileSync(new URL(name, DIR)));

// The .io files: inputs (I64) and output.logits (F32), and their metadata.
function readIo(name: string) {
  const b = file(`${name}.io.safetensors`);
  const n = Number(new DataView(b.buffer, b.byteOffset).getBigUint64(0, true));
  const header = JSON.parse(new TextDecoder().decode(b.subarray(8, 8 + n))) as Record<string, any>;
  const data = b.slice(8 + n).buffer;
  const tensor = (key: string) => {
    const { dtype, shape, data_offsets: [lo, hi] } = header[key];
    const values = dtype === "I64" ? Int32Array.from(new BigInt64Array(data.slice(lo, hi)), Number) : new Float32Array(data.slice(lo, hi));
    return { shape: shape as number[], values };
  };
  return { tensor, meta: header.__metadata__ as Record<string, string> };
}

function maxRelative(got: Float32Array, want: Float32Array, keep: (row: number) => boolean = () => true, width = 1) {
  let scale = 0;
  let worst = 0;
  for (let i = 0; i < want.length; i++) {
    if (!keep(Math.floor(i / width))) continue;
    scale = Math.max(scale, Math.abs(want[i]!));
    worst = Math.max(worst, Math.abs(got[i]! - want[i]!));
  }
  return worst / scale;
}

describe("loadWeights of PyTorch state dicts", () => {

  it("nanoGPT's GPT, tied head and causal-mask buffers as saved", async () => {
    await init({ threads: 2 });
    using m = await LanguageModel.create({ vocabSize: 13, context: 10, dModel: 16, heads: 4, layers: 2 });
    await m.loadWeights(file("nanogpt_bias.safetensors"));
    const io = readIo("nanogpt_bias");
    const ids = io.tensor("input.ids");
    const got = await m.predict(ids.values as Int32Array, { batch: 3, seq: 10 });
    expect(maxRelative(got, io.tensor("output.logits").values as Float32Array)).toBeLessThan(1e-5);
  });

  it("seed 004's Transformer: shared per-head projections expanded, rows of non-pad target inputs", async () => {
    using m = await Seq2Seq.create({
      srcVocab: 11, tgtVocab: 12, context: 12, dModel: 16, heads: 4, encoderLayers: 2, decoderLayers: 2, dFF: 32,
      positions: "learned", scaleEmbedding: false, finalNorm: false,
    });
    await m.loadWeights(file("seed004_transformer.safetensors"));
    const io = readIo("seed004_transformer");
    const src = io.tensor("input.src").values as Int32Array;
    const tgtIn = io.tensor("input.tgt_in").values as Int32Array;
    const got = await m.predict(src, tgtIn, { batch: 3 });
    const rel = maxRelative(got, io.tensor("output.logits").values as Float32Array, (r) => tgtIn[r] !== 0, 12);
    expect(rel).toBeLessThan(1e-5);
  });

  it("seed 003's TransformerClassifier", async () => {
    using m = await Classifier.create({
      vocabSize: 20, context: 512, dModel: 16, heads: 4, layers: 2, dFF: 32, classes: 2, head: "mlp",
    });
    await m.loadWeights(file("seed003_classifier.safetensors"));
    const io = readIo("seed003_classifier");
    const got = await m.predict(io.tensor("input.ids").values as Int32Array, { batch: 4, seq: 10 });
    expect(maxRelative(got, io.tensor("output.logits").values as Float32Array)).toBeLessThan(1e-5);
  });

  it("Classifier.load of seed 003's state dict names the missing field and says how such a file loads", async () => {
    const err = await Classifier.load(file("seed003_classifier.safetensors")).then(
      () => "resolved",
      (e: Error) => e.message,
    );
    expect(err).toMatch(/a seed003 state dict does not fix the whole config of a classifier/);
    expect(err).toMatch(/config\.context is missing: it is required/);
    expect(err).toMatch(/load_weights \(JS: loadWeights\)/);
    expect(err).toMatch(/qkv import --from seed003/);
  });

  it("rejects a pickle with the line that converts it, and names every tensor that does not fit", async () => {
    using m = await LanguageModel.create({ vocabSize: 13, context: 10, dModel: 16, heads: 4, layers: 1 });
    await expect(m.loadWeights(Uint8Array.of(0x50, 0x4b, 3, 4, 20, 0, 0, 0, 0, 0))).rejects.toThrow(
      'safetensors.torch.save_file(model.state_dict(), "model.safetensors")',
    );
    const err = await m.loadWeights(file("nanogpt_bias.safetensors")).catch((e: Error) => e.message);
    expect(err).toMatch(/format nanogpt/);
    expect(err).toMatch(/tensor "transformer\.h\.1\.ln_1\.weight" is not a parameter of this model/);
    expect(err).toMatch(/tensor "transformer\.h\.1\.mlp\.c_proj\.bias" is not a parameter of this model/);
  });

  it("a checkpoint `qkv import` wrote loads with LanguageModel.load and Tokenizer.fromCheckpoint", async () => {
    const qkv = fileURLToPath(new URL("../../build/native/cpp/tools/qkv", import.meta.url));
    if (!existsSync(qkv)) throw new Error(`${qkv} is missing: build the native targets (cmake --preset native)`);
    const dir = mkdtempSync(path.join(os.tmpdir(), "qkv-import-"));
    try {
      const tok = await Tokenizer.fromJSON(
        '{"version":1,"kind":"char","special":{"pad":true,"bos":true,"eos":true,"unk":true},"vocab":[" ","a","b","c","d","e","f","g","h"]}',
      );
      const tokPath = path.join(dir, "tok.json");
      writeFileSync(tokPath, JSON.stringify(tok));
      const out = path.join(dir, "gpt.safetensors");
      const src = fileURLToPath(new URL("nanogpt_bias.safetensors", DIR));
      execFileSync(qkv, ["import", "--from", "nanogpt", src, out, "--heads", "4", "--tokenizer", tokPath], { encoding: "utf8" });
      const bytes = new Uint8Array(readFileSync(out));
      expect((await checkpointMetadata(bytes))["qkv.imported_from"]).toBe("nanogpt");
      using m = await LanguageModel.load(bytes);
      expect(m.config.heads).toBe(4);
      const io = readIo("nanogpt_bias");
      const got = await m.predict(io.tensor("input.ids").values as Int32Array, { batch: 3, seq: 10 });
      expect(maxRelative(got, io.tensor("output.logits").values as Float32Array)).toBeLessThan(1e-5);
      const again = await Tokenizer.fromCheckpoint(bytes);
      expect(again.size).toBe(13);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

// Hugging Face GPT-2 folders (tests/fixtures/import/gpt2_*, make_gpt2_fixtures.py): config.json + model.safetensors
// into LanguageModel.importPretrained, PyTorch's logits within 1e-5 and its greedy tokens.
describe("LanguageModel.importPretrained of Hugging Face GPT-2 files", () => {
  const folder = (c: string, f: string) => file(`gpt2_${c}/${f}`);
  const config = (c: string) => new TextDecoder().decode(folder(c, "config.json"));

  // gelu: the erf GELU, n_inner 24; hub: gelu_new with both buffers; bf16: GPT2LMHeadModel names in BF16.
  for (const c of ["gelu", "hub", "bf16"]) {
    it(`${c}: logits and greedy tokens as PyTorch's`, async () => {
      await init({ threads: 2 });
      using m = await LanguageModel.importPretrained(c === "hub" ? JSON.parse(config(c)) : config(c), folder(c, "model.safetensors"));
      expect(m.config.heads).toBe(2);
      expect(m.config.tieHead).toBe(true);
      const io = readIo(`gpt2_${c}`);
      const got = await m.predict(io.tensor("input.ids").values as Int32Array, { batch: 3, seq: 12 });
      expect(maxRelative(got, io.tensor("output.logits").values as Float32Array)).toBeLessThan(1e-5);
      const prompt = io.tensor("input.prompt").values as Int32Array;
      const greedy = io.tensor("output.greedy").values as Int32Array;
      expect(Array.from(await m.generate(prompt, { maxTokens: greedy.length, temperature: 0, seed: 1 }))).toEqual(Array.from(greedy));
    });
  }

  it("loadWeights takes the Hub file into a model of its config", async () => {
    using m = await LanguageModel.create({
      vocabSize: 61, context: 16, dModel: 16, heads: 2, layers: 2, dFF: 24, activation: "gelu",
    });
    await m.loadWeights(folder("gelu", "model.safetensors"));
    const io = readIo("gpt2_gelu");
    const got = await m.predict(io.tensor("input.ids").values as Int32Array, { batch: 3, seq: 12 });
    expect(maxRelative(got, io.tensor("output.logits").values as Float32Array)).toBeLessThan(1e-5);
  });

  it("rejects another architecture by its model_type, and names every tensor that does not fit", async () => {
    const weights = folder("gelu", "model.safetensors");
    const llama = { ...JSON.parse(config("gelu")), model_type: "llama" };
    await expect(LanguageModel.importPretrained(llama, weights)).rejects.toThrow('model_type "llama" is an architecture qkv does not run');
    const wide = { ...JSON.parse(config("gelu")), n_inner: 32 };
    const err = await LanguageModel.importPretrained(wide, weights).catch((e: Error) => e.message);
    expect(err).toMatch(/tensor "h\.0\.mlp\.c_fc\.weight" has shape \(16, 24\), expected \(16, 32\)/);
    expect(err).toMatch(/tensor "h\.1\.mlp\.c_proj\.weight" has shape \(24, 16\), expected \(32, 16\)/);
    await expect(LanguageModel.importPretrained(config("gelu"), weights.subarray(0, weights.length - 100))).rejects.toThrow(
      "truncated file?",
    );
    await expect(LanguageModel.importPretrained(42 as unknown as string, weights)).rejects.toThrow(TypeError);
  });
});
