// The runtime for JS: version, threads, the wasm heap, a checkpoint's metadata, and takeError() (convert.h).
#include <emscripten.h>
#include <emscripten/heap.h>
#include <malloc.h>

#include "convert.h"
#include "exec/webgpu/webgpu_backend.h"
#include "model.h"
#include "ops/backend_check.h"
#include "ops/ops.h"
#include "qkv/cpu.h"
#include "qkv/qkv.h"
#include "qkv/safetensors.h"
#include "qkv/thread_pool.h"

namespace qkv::js {
namespace {

// The "__metadata__" of a safetensors file (a qkv checkpoint, or one written by `qkv train`) of file_size bytes, from
// its first bytes (`head`: the 8-byte length and the header; more are ignored). The header alone crosses into the heap
// (a whole 1.5 GB checkpoint was copied in twice, to read a few kilobytes), with parse_safetensors' checks of it.
val checkpoint_metadata(val head, double file_size) {
  return guarded([&] {
    const std::vector<uint8_t> bytes = uint8_array(head, "bytes");
    const qkv::SafetensorsHeader f = qkv::parse_safetensors_header(bytes, static_cast<uint64_t>(file_size));
    // Object.fromEntries defines own properties, so any key (even "__proto__") comes back as a key.
    val entries = val::array();
    for (const auto& [key, value] : f.metadata) {
      val entry = val::array();
      entry.set(0, key);
      entry.set(1, value);
      entries.call<void>("push", entry);
    }
    return val::global("Object").call<val>("fromEntries", entries);
  });
}

std::string version() { return qkv::version(); }
std::string simd() { return qkv::active_isa(); }
bool threaded() { return qkv::threaded_build(); }
int max_threads() { return qkv::max_threads(); }
int num_threads() { return qkv::num_threads(); }
void set_threads(int n) {
  guarded([&] { qkv::set_num_threads(n); });
}
double heap_size() { return static_cast<double>(emscripten_get_heap_size()); }
double heap_max() { return static_cast<double>(emscripten_get_heap_max()); }
// Bytes malloc has handed out and not taken back (the heap itself only grows, so this is what shows a leak).
double heap_used() { return static_cast<double>(mallinfo().uordblks); }

// WebGPU (web/src/gpu-worker.ts): the qkv Worker connects the GPU worker's device, then models are made on it.
// Returns the control block's address in the wasm memory (0 on error, with the error for takeError()).
double webgpu_connect(double max_buffer_size, double max_binding_size, std::string adapter, int ring_words) {
  return guarded([&] {
    qkv::ops::WebGpuLimits limits;
    limits.max_buffer_size = static_cast<uint64_t>(max_buffer_size);
    limits.max_storage_buffer_binding_size = static_cast<uint64_t>(max_binding_size);
    limits.adapter = std::move(adapter);
    const double at = static_cast<double>(
        reinterpret_cast<uintptr_t>(qkv::ops::webgpu_open(limits, static_cast<size_t>(ring_words))));
    set_default_device(qkv::Device::WebGPU);
    return at;
  });
}
// The GPU worker died or lost its device: models on it reject every call with `why`; new ones go to the CPU.
void webgpu_fail(std::string why) {
  qkv::ops::webgpu_fail(why);
  set_default_device(qkv::Device::CPU);
}
// Every op of the executor new models run on against a trusted one, on the same inputs over ragged shapes
// (ops/backend_check.h): WebGPU against the wasm core's CPU executor, or the CPU executor against plain loops.
val check_backend(std::string group) {
  return guarded([&] {
    const bool gpu = default_device() == qkv::Device::WebGPU;
    qkv::ops::Backend& be = qkv::ops::backend(default_device());
    qkv::ops::Backend& oracle = gpu ? qkv::ops::backend(qkv::Device::CPU) : qkv::ops::reference_backend();
    val results = val::array();
    for (const qkv::ops::OpCheck& r : qkv::ops::check_backend(be, oracle, group)) {
      val o = val::object();
      o.set("name", r.name);
      o.set("error", r.error);
      o.set("tol", r.tol);
      o.set("ok", r.ok);
      if (!r.ok) o.set("detail", r.detail);
      results.call<void>("push", o);
    }
    val out = val::object();
    out.set("backend", gpu ? "webgpu" : "wasm");
    out.set("against", gpu ? "wasm" : "reference");
    out.set("results", results);
    return out;
  });
}
std::string device_name() { return default_device() == qkv::Device::WebGPU ? "webgpu" : "wasm"; }
}  // namespace
}  // namespace qkv::js

using namespace qkv::js;

EMSCRIPTEN_BINDINGS(qkv_runtime) {
  emscripten::function("version", &version);
  emscripten::function("simd", &simd);
  emscripten::function("threaded", &threaded);
  emscripten::function("maxThreads", &max_threads);
  emscripten::function("numThreads", &num_threads);
  emscripten::function("setThreads", &set_threads);
  emscripten::function("heapSize", &heap_size);
  emscripten::function("heapMax", &heap_max);
  emscripten::function("heapUsed", &heap_used);
  emscripten::function("checkpointMetadata", &checkpoint_metadata);
  emscripten::function("takeError", &take_error);
  emscripten::function("webgpuConnect", &webgpu_connect);
  emscripten::function("webgpuFail", &webgpu_fail);
  emscripten::function("device", &device_name);
  emscripten::function("checkBackend", &check_backend);
}
