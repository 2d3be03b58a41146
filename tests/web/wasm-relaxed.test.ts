// scripts/wasm-relaxed.mjs, the post-link rewrite of clang 14's prototype relaxed multiply-add, on modules
// built here byte by byte: it rewrites the instruction and nothing that merely looks like it, and refuses
// what it cannot decode.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { EXPECT_RELAXED_SIMD } from "./helpers.js";

const SCRIPT = new URL("../../scripts/wasm-relaxed.mjs", import.meta.url).pathname;
const dir = mkdtempSync(path.join(os.tmpdir(), "qkv-relaxed-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const OLD = [0xfd, 0xaf, 0x01]; // f32x4.fma, the prototype (LLVM 14)
const NEW = [0xfd, 0x85, 0x02]; // f32x4.relaxed_madd

/**
 * A module of one function (v128, v128, v128) -> v128 whose body (after its locals) is `code`; `sizeError`
 * is added to the body's declared size.
 */
function module(code: number[], sizeError = 0): Uint8Array {
  const body = [0x00, ...code]; // no locals
  const size = body.length + sizeError;
  return Uint8Array.from([
    0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
    0x01, 0x08, 0x01, 0x60, 0x03, 0x7b, 0x7b, 0x7b, 0x01, 0x7b, // type section
    0x03, 0x02, 0x01, 0x00, // function section
    0x05, 0x03, 0x01, 0x00, 0x01, // memory section: one page
    0x0a, body.length + 2, 0x01, size, ...body, // code section
  ]);
}

// v128.const whose bytes hold the prototype opcode, dropped; then a 32-bit constant and an i32.load whose
// offset hold it too; then the multiply-add itself: a * b + c of the three parameters.
const DECOY = [0x00, 0x00, ...OLD, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00];
const CODE = [
  0xfd, 0x0c, ...DECOY, 0x1a,
  0x41, 0xfd, 0xaf, 0x01, 0x28, 0x02, 0xfd, 0xaf, 0x01, 0x1a, // i32.const, i32.load offset=..., drop
  0x20, 0x00, 0x20, 0x01, 0x20, 0x02, ...OLD, 0x0b,
];

function rewrite(bytes: Uint8Array, ...args: string[]): { out: Uint8Array; stdout: string } {
  const file = path.join(dir, `m${Math.random().toString(36).slice(2)}.wasm`);
  writeFileSync(file, bytes);
  const stdout = execFileSync(process.execPath, [SCRIPT, file, ...args], { encoding: "utf8", stdio: "pipe" });
  return { out: new Uint8Array(readFileSync(file)), stdout };
}

function rewriteError(bytes: Uint8Array, ...args: string[]): string {
  try {
    rewrite(bytes, ...args);
  } catch (e) {
    return String((e as { stderr?: string }).stderr);
  }
  return "exited 0";
}

describe("scripts/wasm-relaxed.mjs", () => {
  it("rewrites the multiply-add and leaves the same bytes inside immediates alone", () => {
    const before = module(CODE);
    const { out, stdout } = rewrite(before, "1");
    expect(stdout).toMatch(/: 1 f32x4\.relaxed_madd/);
    const want = module([...CODE.slice(0, -4), ...NEW, 0x0b]);
    expect(Array.from(out)).toEqual(Array.from(want));
    // The result is a valid module wherever the engine has relaxed SIMD (the QKV_TEST_RELAXED_SIMD run);
    // the prototype opcode is valid nowhere.
    expect(WebAssembly.validate(before)).toBe(false);
    expect(WebAssembly.validate(out)).toBe(EXPECT_RELAXED_SIMD);
  });

  it("refuses a module it cannot decode, a second run, a count other than the expected, and no multiply-add", () => {
    expect(rewriteError(module(CODE, 1))).toMatch(/unexpected end|does not end where its size says/);
    expect(rewriteError(module(CODE, -1))).toMatch(/does not end where its size says/);
    // 0x06 (try, from the exception-handling proposal) is not something Emscripten 3.1.6 emits here.
    expect(rewriteError(module([0x06, 0x40, 0x0b, ...CODE]))).toMatch(/opcode 0x6 that this rewriter does not know/);
    expect(rewriteError(module([0xfd, 0xb0, 0x01, ...CODE]))).toMatch(/SIMD opcode 0xb0 that this rewriter does not know/);
    const { out } = rewrite(module(CODE));
    expect(rewriteError(out)).toMatch(/f32x4\.relaxed_madd is already there/);
    expect(rewriteError(module(CODE), "2")).toMatch(/rewrote 1 multiply-adds, expected 2/);
    expect(rewriteError(module([0x20, 0x00, 0x0b]))).toMatch(/found no relaxed multiply-add/);
    expect(rewriteError(Uint8Array.of(1, 2, 3, 4, 5, 6, 7, 8))).toMatch(/not a WebAssembly module/);
  });
});
