#pragma once
// parallel_for for kernels that stream memory in index order (the products' row paths reading W): each thread gets
// one contiguous run of [0, n) while the pool still hands work out on demand.
#include <cstdint>
#include <functional>

namespace qkv {

// fn(begin, end) over [0, n), in T x 4 ranges (T threads; 4 is the pool's claims a thread). The pool gives out one
// range a claim, and claim c takes range (c % T) * 4 + c / T: claims taken in turn (the caller 0, 2, .., the worker
// 1, 3, .. with 2 threads) give each thread one contiguous run, which the prefetchers follow as one stream, where
// ranges in claim order gave it four short ones, each starting cold; a late or descheduled thread's ranges are
// still taken by the others. With fewer than T x 4 items it is parallel_for.
void parallel_for_runs(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace qkv
