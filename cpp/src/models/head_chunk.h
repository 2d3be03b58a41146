#pragma once
// Rows per chunk of a language model's training head (LanguageModel's head_loss): the head product, the
// cross-entropy with its gradient and the head's backward run over this many rows at a time, so a training step's
// workspace holds (chunk, V) logits rather than (rows, V): for GPT-2's V = 50257 and 1024 rows, 12.3 MiB at 64
// rather than 196 MiB. Larger chunks give the head's products longer rows to work on; 64 keeps them near the
// whole product's speed (GPT-2 124M's LoRA step, 8 x 128, 2 threads, alternated: 64 rows 2117-2475 ms, 128 rows
// 2010-2736; 32 rows 15% slower). Process-wide, read when a model is made; tests set it to compare chunkings.
namespace qkv::models {

inline constexpr int kHeadChunkRows = 64;

// The current setting (kHeadChunkRows unless set); set_head_chunk_rows(rows >= 1, else qkv::Error) changes it for
// the models made after it.
int head_chunk_rows();
void set_head_chunk_rows(int rows);

}  // namespace qkv::models
