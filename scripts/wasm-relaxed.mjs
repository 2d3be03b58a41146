// Rewrites the relaxed-SIMD multiply-add of a .wasm that Debian's Emscripten 3.1.6 (clang 14) linked into the
// opcode that engines run: node scripts/wasm-relaxed.mjs <file.wasm> [<expected count>]
//
// And the integer dot product: clang 14 has no i16x8.relaxed_dot_i8x16_i7x16_s (LLVM 16 added it), so the kernel
// that wants it (cpp/src/kernels/cpu/arch/sse41.cpp, the Q4 product with int8 activations) emits the prototype's
// i8x16.relaxed_swizzle in its place (0xfd 0xa2 0x01: two v128 operands to one v128, like the dot; used nowhere
// else), and this rewrites each into the dot (0xfd 0x92 0x02, the same length): lane i = a[2i] b[2i] + a[2i+1]
// b[2i+1] of a's signed bytes and b's 7-bit ones, a, b in stack order. (Not the i32x4 ..._add_s form: Node 20's V8
// returns twice the dot and drops the addend.)
//
// Clang 14 knows relaxed SIMD only as the pre-standard prototype: `__builtin_wasm_fma_f32x4` is emitted as
// 0xfd 0xaf 0x01, which no engine accepts today. The standard `f32x4.relaxed_madd` is 0xfd 0x85 0x02 (the
// same length, so no size changes) and computes a * b + c of its operands in stack order, which is the order
// the kernel passes them in (cpp/src/kernels/cpu/gemm_simd.h, madd).
//
// A byte search could hit a constant or an offset that happens to hold those bytes, so this walks every
// instruction of every function body. The walk checks itself: each body must end exactly at its declared size
// with `end`, and an opcode it does not know (or another prototype relaxed opcode) stops it with an error
// rather than a guess. It rewrites in place and prints how many it rewrote.
import { readFileSync, writeFileSync } from "node:fs";

const OLD_MADD = 0xaf; // f32x4.fma in the relaxed-SIMD prototype (LLVM 14)
const NEW_MADD = 0x105; // f32x4.relaxed_madd
const OLD_SWIZZLE = 0xa2; // i8x16.relaxed_swizzle in the prototype: the dot's stand-in
const NEW_DOT = 0x112; // i16x8.relaxed_dot_i8x16_i7x16_s
let dots = 0;

const [file, expected] = process.argv.slice(2);
if (!file) {
  console.error("usage: node scripts/wasm-relaxed.mjs <file.wasm> [<expected count>]");
  process.exit(2);
}
const bytes = readFileSync(file);
let pos = 0;

function fail(what) {
  throw new Error(`wasm-relaxed: ${file}: ${what} at byte ${pos}`);
}
function byte() {
  if (pos >= bytes.length) fail("unexpected end");
  return bytes[pos++];
}
function uleb() {
  let result = 0;
  let shift = 0;
  for (;;) {
    const b = byte();
    result += (b & 0x7f) * 2 ** shift;
    shift += 7;
    if ((b & 0x80) === 0) return result;
    if (shift > 63) fail("LEB128 too long");
  }
}
function sleb() {
  // Only its length matters here.
  for (let n = 0; ; n++) {
    if ((byte() & 0x80) === 0) return;
    if (n > 10) fail("LEB128 too long");
  }
}
function memarg() {
  const align = uleb();
  if (align >= 64) fail("multi-memory memarg"); // Emscripten 3.1.6 emits one memory
  uleb();
}
function blocktype() {
  const b = bytes[pos];
  if (b === 0x40 || (b >= 0x6f && b <= 0x7f)) pos++;
  else sleb(); // a type index, as a signed 33-bit LEB
}

// The gaps of the standard SIMD opcode space (0x00-0xff), where the prototype's relaxed opcodes lived.
const GAPS = [0x9a, 0xa2, 0xa5, 0xa6, 0xb0, 0xb2, 0xb3, 0xb4, 0xbb, 0xc2, 0xc5, 0xc6, 0xcf, 0xd0, 0xd2, 0xd3, 0xd4, 0xe2, 0xee];

// SIMD (0xfd prefix): the opcodes that carry immediates; every other standard one carries none.
// Returns the number rewritten (0 or 1).
function simd(at) {
  const op = uleb();
  if (op <= 11 || op === 92 || op === 93) {
    memarg(); // loads, store, load_zero
  } else if (op === 12 || op === 13) {
    pos += 16; // v128.const, i8x16.shuffle
  } else if (op >= 21 && op <= 34) {
    byte(); // extract_lane, replace_lane: the lane
  } else if (op >= 84 && op <= 91) {
    memarg(); // load_lane, store_lane
    byte();
  } else if (op === OLD_MADD) {
    // 0xfd 0xaf 0x01 -> 0xfd 0x85 0x02: the same three bytes long.
    if (pos - at !== 3) fail("unexpected encoding of the prototype f32x4.fma");
    bytes[at + 1] = 0x80 | (NEW_MADD & 0x7f);
    bytes[at + 2] = NEW_MADD >> 7;
    return 1;
  } else if (op === OLD_SWIZZLE) {
    if (pos - at !== 3) fail("unexpected encoding of the prototype i8x16.relaxed_swizzle");
    bytes[at + 1] = 0x80 | (NEW_DOT & 0x7f);
    bytes[at + 2] = NEW_DOT >> 7;
    dots++;
  } else if (op === NEW_MADD) {
    fail("f32x4.relaxed_madd is already there: rewrite the linker's output once");
  } else if (op > 0xff || GAPS.includes(op)) {
    fail(`SIMD opcode 0x${op.toString(16)} that this rewriter does not know`);
  }
  return 0;
}

// One instruction; returns the number rewritten (0 or 1).
function instruction() {
  const at = pos;
  const op = byte();
  switch (op) {
    case 0x02: case 0x03: case 0x04: blocktype(); return 0; // block, loop, if
    case 0x0c: case 0x0d: uleb(); return 0; // br, br_if
    case 0x0e: { const n = uleb(); for (let i = 0; i <= n; i++) uleb(); return 0; } // br_table
    case 0x10: uleb(); return 0; // call
    case 0x11: uleb(); uleb(); return 0; // call_indirect
    case 0x1c: { const n = uleb(); pos += n; return 0; } // select t*
    case 0x20: case 0x21: case 0x22: case 0x23: case 0x24: case 0x25: case 0x26: uleb(); return 0;
    case 0x3f: case 0x40: byte(); return 0; // memory.size, memory.grow
    case 0x41: case 0x42: sleb(); return 0; // i32.const, i64.const
    case 0x43: pos += 4; return 0;
    case 0x44: pos += 8; return 0;
    case 0xd0: byte(); return 0; // ref.null t
    case 0xd2: uleb(); return 0; // ref.func
    case 0xfc: {
      const sub = uleb();
      if (sub <= 7) return 0; // saturating truncations
      if (sub === 8) {
        uleb(); // memory.init: data index, memory
        byte();
      } else if (sub === 9 || sub === 13 || (sub >= 15 && sub <= 17)) {
        uleb(); // data.drop, elem.drop, table.grow/size/fill
      } else if (sub === 10) {
        pos += 2; // memory.copy: two memories
      } else if (sub === 11) {
        byte(); // memory.fill
      } else if (sub === 12 || sub === 14) {
        uleb(); // table.init, table.copy
        uleb();
      } else {
        fail(`0xfc ${sub}: unknown`);
      }
      return 0;
    }
    case 0xfd: return simd(at);
    case 0xfe: { const sub = uleb(); if (sub === 0x03) byte(); else memarg(); return 0; } // atomics
    default:
      if (op >= 0x28 && op <= 0x3e) {
        memarg(); // loads and stores
        return 0;
      }
      // No immediates: unreachable, nop, else, end, return, drop, select, the numeric operators, ref.is_null.
      if (op <= 0x01 || op === 0x05 || op === 0x0b || op === 0x0f || op === 0x1a || op === 0x1b) return 0;
      if ((op >= 0x45 && op <= 0xc4) || op === 0xd1) return 0;
      fail(`opcode 0x${op.toString(16)} that this rewriter does not know`);
  }
  return 0;
}

function codeSection(end) {
  let rewritten = 0;
  const count = uleb();
  for (let f = 0; f < count; f++) {
    const size = uleb();
    const bodyEnd = pos + size;
    const groups = uleb();
    for (let g = 0; g < groups; g++) {
      uleb(); // locals: count, type
      byte();
    }
    let last = -1;
    while (pos < bodyEnd) {
      last = bytes[pos];
      rewritten += instruction();
    }
    if (pos !== bodyEnd || last !== 0x0b) fail(`function body ${f} does not end where its size says`);
  }
  if (pos !== end) fail("code section does not end where its size says");
  return rewritten;
}

const magic = [0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00];
if (!magic.every((b) => byte() === b)) fail("not a WebAssembly module (version 1)");
let rewritten = 0;
let sawCode = false;
while (pos < bytes.length) {
  const id = byte();
  const size = uleb();
  const end = pos + size;
  if (id === 10) {
    rewritten += codeSection(end);
    sawCode = true;
  }
  pos = end;
}
if (!sawCode) fail("no code section");
if (expected !== undefined && rewritten !== Number(expected)) {
  fail(`rewrote ${rewritten} multiply-adds, expected ${expected}`);
}
if (rewritten === 0) fail("found no relaxed multiply-add: was the kernel unit compiled with -mrelaxed-simd?");
writeFileSync(file, bytes);
console.log(`wasm-relaxed: ${file}: ${rewritten} f32x4.relaxed_madd, ${dots} i16x8.relaxed_dot_i8x16_i7x16_s`);
