#pragma once
// The machine's streaming read bandwidth, the floor of batch-1 decoding (bench/run_gpt2.sh): a decode step reads
// every weight once, so ms/token >= bytes read per token / this bandwidth.

namespace qkv::bench {

// GB/s (1e9 bytes) of `threads` threads each summing its contiguous share of a `bytes` buffer (allocated and
// first-touched by those threads, far larger than the caches), with 32-byte vector loads where the CPU has AVX2:
// the best of `trials` passes. Run it in a process of its own: the buffer stays in the resident set.
double read_bandwidth_gbs(double bytes, int threads, int trials);

}  // namespace qkv::bench
