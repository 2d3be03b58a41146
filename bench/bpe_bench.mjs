// Byte-level BPE encoding speed in Node: qkv's BpeTokenizer (the C++ core in WebAssembly, through the npm
// package) against the JavaScript peers in the same process, on GPT-2's vocabulary (rebuilt from
// gpt-tokenizer's r50k_base ranks by tests/fixtures/gpt2_from_ranks.mjs; no download).
//
//   node bench/bpe_bench.mjs [--mb 3] [--rounds 3] [--hf-mb 0.3]
//
// The text: tinyshakespeare (../shared/data) repeated, each copy followed by a block of the tests' hard cases
// (code, CJK, emoji, runs of whitespace), to --mb megabytes. Each side encodes its text in one call, --rounds
// times after one warm-up on a 200 KB slice; the best round is kept. @huggingface/tokenizers encodes only the
// first --hf-mb megabytes (it runs at well under 1 MB/s: its word cache holds 10,000 pieces, fewer than the
// 15,057 distinct ones of tinyshakespeare, and each merge lookup builds a JSON string), once. qkv's ids are checked equal to
// gpt-tokenizer's on the whole text and to @huggingface/tokenizers' on its part. Prints MB/s (10^6 bytes of
// UTF-8 a second) and each side's ratio to the fastest JavaScript peer of this run. Needs `npm run build:web`
// (web/dist) and the devDependencies.
import { readFileSync } from "node:fs";
import { Tokenizer as HfTokenizer } from "@huggingface/tokenizers";
import { encode as gptEncode } from "gpt-tokenizer/encoding/r50k_base";
import { BpeTokenizer, init } from "../web/dist/node.js";
import { gpt2TokenizerJson, readR50kRanks } from "../tests/fixtures/gpt2_from_ranks.mjs";
import { loadAverage, option } from "./node_util.mjs";

const MB = option("mb", 3);
const ROUNDS = option("rounds", 3);
const HF_MB = option("hf-mb", 0.3);

const shakespeare = readFileSync(new URL("../../shared/data/tinyshakespeare.txt", import.meta.url), "utf8");
const hard = [
  "def f(x):\n    return x ** 2  # square\n\tif (a&&b||c) { y[i] = z->w; }\r\n",
  "日本語のテキスト、中文文本，한국어 텍스트。 emoji 🙂👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️ ✨\n",
  "It's, I'm, you're, we've -- 3.14159 1e-9 10,000,000 \t\t   \n\n\n",
  "Ünïcödé: naïve café Москва Ελλάδα עברית العربية हिन्दी e\u0301 a\u0308\n",
].join("");
let text = "";
while (Buffer.byteLength(text) < MB * 1e6) text += shakespeare + hard;
const hfText = text.slice(0, Math.round(HF_MB * 1e6));

const json = gpt2TokenizerJson(readR50kRanks());
await init();
const qkv = await BpeTokenizer.fromJSON(JSON.stringify(json));
const hf = new HfTokenizer(json, {});

const sides = [
  { name: "qkv BpeTokenizer (wasm)", js: false, text, rounds: ROUNDS, encode: async (t) => qkv.encode(t) },
  { name: "gpt-tokenizer 4.0.0 (r50k_base)", js: true, text, rounds: ROUNDS, encode: async (t) => gptEncode(t) },
  { name: "@huggingface/tokenizers 0.2.0", js: true, text: hfText, rounds: 1, encode: async (t) => hf.encode(t).ids },
];
const same = (a, b) => a.length === b.length && a.every((v, i) => v === b[i]);
const qkvIds = Array.from(await qkv.encode(text));
if (!same(qkvIds, gptEncode(text))) throw new Error("qkv's ids differ from gpt-tokenizer's");
if (!same(Array.from(await qkv.encode(hfText)), hf.encode(hfText).ids)) throw new Error("qkv's ids differ from @huggingface/tokenizers'");
for (const side of sides) {
  side.bytes = Buffer.byteLength(side.text);
  side.seconds = Infinity;
  if (side.rounds > 1) await side.encode(text.slice(0, 200_000));
}
// Rounds alternate the sides, so that the machine's load falls on all of them alike.
for (let r = 0; r < ROUNDS; ++r) {
  for (const side of sides) {
    if (r >= side.rounds) continue;
    const t0 = performance.now();
    await side.encode(side.text);
    side.seconds = Math.min(side.seconds, (performance.now() - t0) / 1000);
  }
}
for (const s of sides) s.rate = s.bytes / s.seconds;
const fastestJs = Math.max(...sides.filter((s) => s.js).map((s) => s.rate));
console.log(`BPE encode, GPT-2 vocabulary: ${(text.length / 1e6).toFixed(2)} M characters, ${qkvIds.length} tokens; ` +
  `Node ${process.version}; load average ${loadAverage()}`);
console.log("| side | text | MB/s | vs fastest JS peer |\n| --- | --- | --- | --- |");
for (const s of sides) {
  const what = `${(s.bytes / 1e6).toFixed(2)} MB, best of ${s.rounds}`;
  console.log(`| ${s.name} | ${what} | ${(s.rate / 1e6).toFixed(2)} | ${(s.rate / fastestJs).toFixed(2)}x |`);
}
process.exit(0);
