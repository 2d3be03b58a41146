#pragma once
// The buffers PyTorch models keep beside their weights (a sinusoidal position table, nanoGPT's and GPT-2's
// causal masks, GPT-2's masked_bias), which qkv computes itself: the import checks each against what qkv
// computes, then ignores it (io/import.cpp).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "qkv/safetensors.h"

namespace qkv::io {

// "(2, 3)"
std::string shape_text(const std::vector<int64_t>& s);
bool ends_with(const std::string& s, const std::string& suffix);

// v holds (T, T) ones on and below the diagonal, zeros above.
bool is_causal_tril(const std::vector<float>& v, int64_t T);

// A sinusoidal position buffer ("pe" of the seeds, the tutorial's "pos_embedding"), as (rows, C).
bool is_position_buffer(const std::string& n);
// nanoGPT's causal mask, (1, 1, T, T), where PyTorch lacks scaled_dot_product_attention.
bool is_causal_mask_buffer(const std::string& n, const TensorEntry& t);
// "" when tensor t (called `name` in messages) is qkv's sinusoidal table of width C, else what is wrong.
std::string check_position_buffer(const SafetensorsFile& file, const TensorEntry& t, const std::string& name,
                                  int64_t C);
// GPT-2's buffer names: "h.N.attn.bias" and "h.N.attn.masked_bias" (after the "transformer." prefix is dropped).
bool is_gpt2_buffer(const std::string& n);
// GPT-2's "h.N.attn.bias" (causal mask) and "h.N.attn.masked_bias": true when `n` is one, checked (a wrong one is
// added to `wrong`) and counted in `seen`.
bool gpt2_buffer(const SafetensorsFile& file, const std::string& n, const TensorEntry& t, const std::string& name,
                 std::vector<std::string>& wrong, std::map<std::string, int>& seen);

// The notes of the GPT-2 buffers gpt2_buffer counted in `seen`: one line per kind.
void gpt2_buffer_notes(const std::map<std::string, int>& seen, std::vector<std::string>& notes);
// GPT-2's lm_head.weight (called `head` in messages) against the token embedding (`wte`): the refusal when it
// differs, the note when it is the same (a tied head kept once).
std::string gpt2_untied_head(const std::string& head, const std::string& wte);
std::string gpt2_tied_head_note(const std::string& head, const std::string& wte);
// nanoGPT's lm_head.weight when it differs from transformer.wte.weight in a model built tied.
std::string nanogpt_untied_head();

}  // namespace qkv::io
