#pragma once
// The command stream of the WebGPU backend (exec/webgpu/webgpu_backend.cpp) to the GPU worker of the npm package: the
// opcodes and the control block. web/src/webgpu/protocol.ts is the other half and documents every command's
// words; the numbers here must match it (tests/web/webgpu-protocol.test.ts checks that they do).
#include <cstdint>

namespace qkv::ops::webgpu {

enum class Op : uint32_t {
  Wrap = 0,
  Capacity = 1,
  Upload = 2,
  Download = 3,
  Sync = 4,
  Copy = 5,
  Fill = 16,
  CopyRows = 17,
  Gemm = 18,
  Add = 19,
  LayerNormForward = 20,
  ResidualLayerNormForward = 21,
  LayerNormBackward = 22,
  BiasActForward = 23,
  BiasActBackward = 24,
  DropoutForward = 25,
  DropoutBackward = 26,
  AttentionForward = 27,
  AttentionBackward = 28,
  AttentionWeights = 29,
  EmbeddingForward = 30,
  EmbeddingBackward = 31,
  MeanPoolForward = 32,
  MeanPoolBackward = 33,
  CrossEntropyForward = 34,
  CrossEntropyForwardBackward = 35,
  ArgmaxRows = 36,
  AdamStep = 37,
  SumSquares = 38,
};

// The control block's int32 words, then the ring (protocol.ts: Control).
namespace control {
constexpr int kHead = 0, kTail = 1, kReply = 2, kStatus = 3, kRingWords = 4, kMessageBytes = 5, kMessage = 16,
              kWords = 272;
constexpr int kMessageCapacity = (kWords - kMessage) * 4;
}  // namespace control

enum Status : int32_t { kOk = 0, kFailed = 1, kLost = 2 };

constexpr uint32_t kSumSquaresBlock = 4096;  // floats per partial sum of SumSquares

}  // namespace qkv::ops::webgpu
