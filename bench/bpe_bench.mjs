// Byte-level BPE encoding speed in Node: qkv's BpeTokenizer (the C++ core in WebAssembly, through the npm
// package) against the JavaScript peers in the same process, on GPT-2's vocabulary (rebuilt from
// gpt-tokenizer's r50k_base ranks by tests/fixtures/gpt2_from_ranks.mjs; no download).
//
//   node bench/bpe_bench.mjs [--mb 3] [--rounds 3]
//
// The text: tinyshakespeare (../shared/data) repeated, each copy followed by a block of the tests' hard cases
// (code, CJK, emoji, runs of whitespace), to --mb megabytes. Each side encodes the whole text in one call,
// --rounds times after one warm-up on a 200 KB slice; the best round is kept. Every side's ids are checked
// equal to @huggingface/tokenizers'. Prints MB/s (10^6 bytes of UTF-8 a second) and each side's ratio to the
// fastest JavaScript peer of this run. Needs `npm run build:web` (web/dist) and the devDependencies.
import { readFileSync } from "node:fs";
import { Tokenizer as HfTokenizer } from "@huggingface/tokenizers";
import { encode as gptEncode } from "gpt-tokenizer/encoding/r50k_base";
import { BpeTokenizer, init } from "../web/dist/node.js";
import { gpt2TokenizerJson, readR50kRanks } from "../tests/fixtures/gpt2_from_ranks.mjs";
import { loadAverage, option } from "./node_util.mjs";

const MB = option("mb", 3);
const ROUNDS = option("rounds", 3);

const shakespeare = readFileSync(new URL("../../shared/data/tinyshakespeare.txt", import.meta.url), "utf8");
const hard = [
  "def f(x):\n    return x ** 2  # square\n\tif (a&&b||c) { y[i] = z->w; }\r\n",
  "日本語のテキスト、中文文本，한국어 텍스트。 emoji 🙂👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️ ✨\n",
  "It's, I'm, you're, we've -- 3.14159 1e-9 10,000,000 \t\t   \n\n\n",
  "Ünïcödé: naïve café Москва Ελλάδα עברית العربية हिन्दी e\u0301 a\u0308\n",
].join("");
let text = "";
while (Buffer.byteLength(text) < MB * 1e6) text += shakespeare + hard;
const bytes = Buffer.byteLength(text);

const json = gpt2TokenizerJson(readR50kRanks());
await init();
const qkv = await BpeTokenizer.fromJSON(JSON.stringify(json));
const hf = new HfTokenizer(json, {});

const sides = [
  { name: "qkv BpeTokenizer (wasm)", js: false, encode: async (t) => qkv.encode(t) },
  { name: "@huggingface/tokenizers 0.2.0", js: true, encode: async (t) => hf.encode(t).ids },
  { name: "gpt-tokenizer 4.0.0 (r50k_base)", js: true, encode: async (t) => gptEncode(t) },
];

const reference = hf.encode(text).ids;
for (const side of sides) {
  await side.encode(text.slice(0, 200_000));
  const ids = Array.from(await side.encode(text));
  const same = ids.length === reference.length && ids.every((v, i) => v === reference[i]);
  if (!same) throw new Error(`${side.name}: ids differ from @huggingface/tokenizers'`);
  side.seconds = Infinity;
}
// Rounds alternate the sides, so that the machine's load falls on all of them alike.
for (let r = 0; r < ROUNDS; ++r) {
  for (const side of sides) {
    const t0 = performance.now();
    await side.encode(text);
    side.seconds = Math.min(side.seconds, (performance.now() - t0) / 1000);
  }
}
const fastestJs = Math.max(...sides.filter((s) => s.js).map((s) => bytes / s.seconds));
console.log(`BPE encode, GPT-2 vocabulary: ${(bytes / 1e6).toFixed(2)} MB, ${reference.length} tokens, best of ${ROUNDS}; ` +
  `Node ${process.version}; load average ${loadAverage()}`);
console.log("| side | MB/s | vs fastest JS peer |\n| --- | --- | --- |");
for (const s of sides) {
  const mbs = bytes / s.seconds / 1e6;
  console.log(`| ${s.name} | ${mbs.toFixed(2)} | ${((bytes / s.seconds) / fastestJs).toFixed(2)}x |`);
}
process.exit(0);
