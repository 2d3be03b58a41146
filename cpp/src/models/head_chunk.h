#pragma once
// Rows per chunk of a language model's training head (LanguageModel's head_loss): the head product, the
// cross-entropy with its gradient and the head's backward run over this many rows at a time, so a training step's
// workspace holds (chunk, V) logits rather than (rows, V): for GPT-2's V = 50257 and 1024 rows, 12.3 MiB at 64
// rather than 196 MiB.
//
// The chunk is sized by the vocabulary: as many whole multiples of kHeadChunkRows rows as keep its logits within
// kHeadChunkLogits floats (12 MiB), and never fewer than kHeadChunkRows. GPT-2's vocabulary takes 64 rows (its
// products stay near the whole product's speed: GPT-2 124M's LoRA step, 8 x 128, 2 threads, alternated: 64 rows
// 2117-2475 ms, 128 rows 2010-2736; 32 rows 15% slower); a character model's (V = 65) takes 48384, every row of its
// steps: one head product and one cross-entropy a step rather than one per 64 rows, which cost the char GPT's CUDA
// step (64 x 256 rows: 256 chunks) 5.5 ms of its 15.9 ms of kernels on an H200, in launches of a few microseconds.
//
// Where the stack keeps its activations for the backward (no recomputation, nn/stack.h), the step already holds far
// more than that, and the chunk's logits may take up to 1/kHeadChunkShare of what the stack holds (held_floats, the
// floats it took from the workspace): fewer passes of the head's products over its weight, each with more rows. GPT-2
// 124M's LoRA step at 8 x 128 rows without recomputation (an arena of 604 MiB at 64 rows) takes chunks of 256 rows,
// 49 MiB more; its head's products alone, 2 threads: 453 ms a step at 64 rows, 404 at 128, 381 at 256, 369 at 512.
// Recomputing, it keeps 64 rows (about 50 MiB held).
#include <cstddef>

namespace qkv::models {

inline constexpr int kHeadChunkRows = 64;
inline constexpr size_t kHeadChunkLogits = size_t{3} << 20;
inline constexpr size_t kHeadChunkShare = 8;

// The rule above for a vocabulary of V >= 1, with B = max(kHeadChunkLogits, held_floats / kHeadChunkShare) floats of
// logits: kHeadChunkRows * max(1, floor(B / (V kHeadChunkRows))).
int head_chunk_rows_for(int V, size_t held_floats = 0);

// A process-wide override for tests that compare chunkings: 0 (the default) sizes chunks by the vocabulary (above);
// rows >= 1 gives the models made after it chunks of exactly that many rows. set_head_chunk_rows(rows < 0) throws
// qkv::Error and changes nothing.
int head_chunk_rows();
void set_head_chunk_rows(int rows);

}  // namespace qkv::models
