#pragma once
// One thread pool for the whole library. parallel_for splits [0, n) into a few contiguous chunks per thread, which
// the calling thread and the workers claim until none is left (a descheduled thread's chunks are taken by the
// others). Calls made from inside a chunk run inline, so a kernel that uses parallel_for can be called from another
// parallel region (attention calls gemm); set_num_threads is refused there.
#include <cstdint>
#include <functional>

namespace qkv {

// fn(begin, end) processes items [begin, end).
void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

// Sets the number of threads (the caller included). Throws qkv::Error unless 1 <= n <= max_threads().
void set_num_threads(int n);
int num_threads();
// The most threads this build can use: 1 in single-threaded builds; in the threaded WebAssembly build,
// the size of the Emscripten pthread pool plus the calling thread.
int max_threads();
// Whether this build was made with threads.
bool threaded_build();

}  // namespace qkv
