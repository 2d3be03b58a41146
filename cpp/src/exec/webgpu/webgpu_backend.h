#pragma once
// The WebGPU executor's connection to whoever runs its commands. In the npm package that is the GPU worker
// (web/src/gpu-worker.ts): it owns the GPUDevice, reads the command ring out of the shared wasm memory and
// answers on its control block. The native tests connect a thread that runs the commands on the CPU backend
// (tests/cpp/ops/webgpu_loopback.h), which checks this side of the protocol without a browser.
#include <cstddef>
#include <cstdint>
#include <string>

namespace qkv::ops {

struct WebGpuLimits {
  uint64_t max_buffer_size = 0;                  // GPUAdapter.limits.maxBufferSize (as requested)
  uint64_t max_storage_buffer_binding_size = 0;  // ... maxStorageBufferBindingSize: the arena is one binding
  std::string adapter;                           // "google swiftshader", for info() and errors
};

// Opens the WebGPU backend with a ring of `ring_words` words and returns the address of its control block
// (webgpu_protocol.h: control; the ring follows). Closes a previous connection first (its models must have
// been freed). Throws qkv::Error where this build cannot wait on shared memory (the single-threaded wasm).
int32_t* webgpu_open(const WebGpuLimits& limits, size_t ring_words);
// Marks the connection unusable: every later op of the WebGPU backend throws "webgpu: <why>". (The GPU
// worker sets the same state itself on device loss; this is for the side that sees a worker die.)
void webgpu_fail(const std::string& why);
// "" when Device::WebGPU can be used, else why not ("init({ backend: \"webgpu\" }) has not connected a GPU").
std::string webgpu_unavailable_reason();
// The adapter's description once connected ("" otherwise).
std::string webgpu_adapter();

}  // namespace qkv::ops
