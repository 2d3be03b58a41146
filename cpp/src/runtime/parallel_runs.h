#pragma once
// parallel_for for kernels that stream memory in index order (the products' row paths reading W): each thread gets
// one contiguous run of [0, n) while the pool still hands work out on demand.
#include <cstdint>
#include <functional>

namespace qkv {

// The chunks a parallel_for region cuts per thread (T threads: up to T x this many chunks, claimed one at a time): a
// thread that is late or descheduled leaves the others at most one chunk to wait for, and each claim costs two
// atomic read-modify-writes on a line the threads share and a call, which the WebAssembly build feels: its q4a8
// decode of GPT-2 124M (2 threads, 5 alternated rounds) 3.12-3.24 ms/token with 4 a thread, 2.97-3.16 with 2.
constexpr int kPoolChunksPerThread = 2;

// fn(begin, end) over [0, n), in T x kPoolChunksPerThread ranges, one a claim, claim c taking range
// (c % T) * kPoolChunksPerThread + c / T: claims taken in turn (the caller 0, 2, .., the worker 1, 3, .. with 2
// threads) give each thread one contiguous run, which the prefetchers follow as one stream, where ranges in claim
// order gave it several short ones, each starting cold; a late or descheduled thread's ranges are still taken by
// the others. With fewer items than ranges it is parallel_for.
void parallel_for_runs(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace qkv
