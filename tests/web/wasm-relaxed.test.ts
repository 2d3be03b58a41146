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

  it("rewrites the stand-in swizzle into the integer dot, which computes the dot where the engine has relaxed SIMD", async () => {
    // f(): the dot of the 16 signed bytes at 0 and the 16 7-bit ones at 16, stored at 32 (and a multiply-add of
    // three constants, dropped: the rewriter wants one). Exports f and the memory m.
    const V128 = (n: number) => [0xfd, 0x0c, ...new Array<number>(16).fill(n)];
    const code = [
      ...V128(1), ...V128(2), ...V128(3), ...OLD, 0x1a,
      0x41, 0x20, // i32.const 32: the store's address
      0x41, 0x00, 0xfd, 0x00, 0x00, 0x00, // v128.load offset=0
      0x41, 0x00, 0xfd, 0x00, 0x00, 0x10, // v128.load offset=16
      0xfd, 0xa2, 0x01, // the prototype i8x16.relaxed_swizzle: the dot's stand-in
      0xfd, 0x0b, 0x00, 0x00, // v128.store offset=0
      0x0b,
    ];
    const body = [0x00, ...code];
    const wasm = Uint8Array.from([
      0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
      0x01, 0x04, 0x01, 0x60, 0x00, 0x00, // type () -> ()
      0x03, 0x02, 0x01, 0x00,
      0x05, 0x03, 0x01, 0x00, 0x01,
      0x07, 0x09, 0x02, 0x01, 0x66, 0x00, 0x00, 0x01, 0x6d, 0x02, 0x00, // export "f", "m"
      0x0a, body.length + 2, 0x01, body.length, ...body,
    ]);
    const { out, stdout } = rewrite(wasm);
    expect(stdout).toMatch(/: 1 f32x4\.relaxed_madd, 1 i16x8\.relaxed_dot_i8x16_i7x16_s/);
    const at = Array.from(out).findIndex((b, i) => b === 0xfd && out[i + 1] === 0x92 && out[i + 2] === 0x02);
    expect(at).toBeGreaterThan(0);
    expect(WebAssembly.validate(out)).toBe(EXPECT_RELAXED_SIMD);
    if (!EXPECT_RELAXED_SIMD) return;
    const { instance } = await WebAssembly.instantiate(out);
    const { f, m } = instance.exports as { f: () => void; m: WebAssembly.Memory };
    const a = new Int8Array(m.buffer, 0, 16), b = new Uint8Array(m.buffer, 16, 16);
    for (let i = 0; i < 16; i++) {
      a[i] = ((i * 37) % 255) - 127; // -127 .. 127
      b[i] = (i * 7) % 16; // Q4's codes
    }
    f();
    const want = Array.from({ length: 8 }, (_, l) => a[2 * l]! * b[2 * l]! + a[2 * l + 1]! * b[2 * l + 1]!);
    expect(Array.from(new Int16Array(m.buffer, 32, 8))).toEqual(want);
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
