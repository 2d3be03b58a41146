// Type-checked (not run) by package.test.ts: a CommonJS TypeScript user (`require` under module nodenext)
// gets the package's types through the exports map's node/require branch.
import { init, LanguageModel, CharTokenizer, type RuntimeInfo } from "qkv";
import qkv = require("qkv");

async function main(): Promise<number> {
  const info: RuntimeInfo = await init({ threads: 2 });
  const tok = await CharTokenizer.fromText("hello");
  const lm = await qkv.LanguageModel.create({ vocabSize: tok.size, context: 8, dModel: 16, heads: 2, layers: 1 });
  const same: LanguageModel = lm;
  const { loss } = await same.trainStep(await tok.encode("hell"), await tok.encode("ello"));
  lm.dispose();
  return info.threads + loss;
}

export = main;
