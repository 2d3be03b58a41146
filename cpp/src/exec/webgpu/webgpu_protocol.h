#pragma once
// The command stream of the WebGPU backend (exec/webgpu/webgpu_backend.cpp) to the GPU worker of the npm package: the
// opcodes and the control block. The ring's own commands (Wrap .. Copy) and the control block are written here
// and in web/src/webgpu/protocol.ts (tests/web/webgpu-protocol.test.ts checks that they match); the kernels'
// opcodes and words come from ops/op_list.def on both sides (ops.generated.ts is written from it).
#include <cstdint>

namespace qkv::ops::webgpu {

enum class Op : uint32_t {
  Wrap = 0,
  Capacity = 1,
  Upload = 2,
  Download = 3,
  Sync = 4,
  Copy = 5,
// The kernels: every op of ops/op_list.def under its Code and opcode.
#define QKV_OP(name, Code, opcode, group, scratch) Code = opcode,
#define QKV_OP_VALUE(type, name, Code, opcode, group, scratch) Code = opcode,
#define QKV_SCRATCH(rule)
#define QKV_CONST(name, value)
#include "ops/op_list.def"
#undef QKV_OP
#undef QKV_OP_VALUE
#undef QKV_SCRATCH
#undef QKV_CONST
};

// The control block's int32 words, then the ring (protocol.ts: Control).
namespace control {
constexpr int kHead = 0, kTail = 1, kReply = 2, kStatus = 3, kRingWords = 4, kMessageBytes = 5, kMessage = 16,
              kWords = 272;
constexpr int kMessageCapacity = (kWords - kMessage) * 4;
}  // namespace control

enum Status : int32_t { kOk = 0, kFailed = 1, kLost = 2 };

// Floats per partial sum of SumSquares: op_list.def's SUM_SQUARES_BLOCK, which the WGSL kernel shares.
#define QKV_OP(name, Code, opcode, group, scratch)
#define QKV_OP_VALUE(type, name, Code, opcode, group, scratch)
#define QKV_SCRATCH(rule)
#define QKV_CONST(name, value) constexpr uint32_t k##name = value;
#include "ops/op_list.def"
#undef QKV_OP
#undef QKV_OP_VALUE
#undef QKV_SCRATCH
#undef QKV_CONST
constexpr uint32_t kSumSquaresBlock = kSUM_SQUARES_BLOCK;

}  // namespace qkv::ops::webgpu
