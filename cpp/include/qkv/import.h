#pragma once
// Weights as PyTorch users have them: a state dict saved with safetensors.torch.save_file, in the names of
// the code that trained it, mapped at load time onto qkv's parameters (README, "Importing PyTorch models").
//
// Formats (ImportOptions::from; "auto" tells them apart by their tensor names):
//   qkv      qkv's own names (a qkv checkpoint, or a state dict saved with them)
//   torch    nn.Transformer / nn.TransformerEncoder state dicts, with or without a "transformer." prefix,
//            and PyTorch's translation tutorial (Seq2SeqTransformer: src_tok_emb.embedding.weight,
//            generator.*, positional_encoding.pos_embedding checked against qkv's sinusoidal table)
//   nanogpt  nanoGPT's GPT (transformer.wte/wpe/h.N.ln_1/attn.c_attn/attn.c_proj/ln_2/mlp.c_fc/mlp.c_proj/
//            ln_f, lm_head), biases on or off
//   gpt2     Hugging Face's GPT2Model / GPT2LMHeadModel as the Hub serves them: the same names as nanoGPT's,
//            bare (wte, wpe, h.N..., ln_f) or under "transformer.", with lm_head.weight (equal to wte: tied) or
//            without; the Conv1D weights stored [in, out] (c_attn (C, 3C), c_proj (C, C), mlp.c_fc (C, d_ff),
//            mlp.c_proj (d_ff, C)) are transposed; the attn.bias (causal mask) and attn.masked_bias buffers are
//            checked when present, then ignored. Told from nanoGPT by c_attn's shape ((3C, C) there) and by the
//            bare names. Activation "gelu_tanh" (GPT-2's gelu_new) unless ImportOptions::activation says;
//            import_pretrained reads it and the heads from config.json.
//   seed000, seed002, seed003, seed004   the tutorials in ../shared/seeds: 000's TransformerEncoder (under a
//            head of the user's, as a Classifier), 002's Transformer (Seq2Seq), 003's
//            TransformerClassifier (Classifier), 004's Transformer (Seq2Seq; its per-head shared q/k/v
//            projections expanded exactly into block-diagonal weights)
// A file that cannot be mapped raises qkv::Error naming every missing, left-over and mis-shaped tensor
// at once; a PyTorch pickle (.pt, .pth, .bin) is refused with the line that converts it.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qkv/language_model.h"
#include "qkv/tokenizer.h"

namespace qkv {

// What the shapes cannot tell. Empty / 0 fields take the format's value (the tutorial's own choice).
struct ImportOptions {
  std::string from = "auto";  // a format above
  int heads = 0;              // attention heads: required except for seed004 (whose shapes tell them)
  int context = 0;            // the position table's length, where the file has none (a bare nn.Transformer)
  std::string activation;     // "relu" | "gelu"; torch: "relu" (nn.Transformer's default)
  std::string norm;           // "post" | "pre"; torch: "post" (norm_first=False)
  int scale_embedding = -1;   // torch only: -1 = as the file suggests (the tutorial's TokenEmbedding scales), 0, 1
  int pad_id = 0;             // Seq2Seq and Classifier
};

struct ImportedWeights {
  std::string format;              // the format read (detected when from = "auto")
  std::string kind;                // the qkv model: "language_model", "seq2seq" or "classifier"
  std::string config_json;         // that model's config, from the shapes and the options
  std::vector<uint8_t> weights;    // a safetensors file of the weights under qkv's names
  std::vector<std::string> notes;  // what was checked and ignored (buffers), and what differs from the source
  // import_pretrained: the tokenizer files found beside the weights, by file name ("tokenizer.json",
  // "vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json"),
  // with their text, for a tokenizer to be built from (pretrained_tokenizer).
  std::map<std::string, std::string> tokenizer_files;
};

// Maps a state dict onto a qkv model: config from the shapes (+ options), weights under qkv's names.
// `X(config_from_json(r.config_json)).load_weights(r.weights)` then gives PyTorch's outputs.
ImportedWeights import_weights(std::span<const uint8_t> bytes, const ImportOptions& options = {});
// The same from the file at `path`, read once (no second copy of the file in memory); errors start with the path.
ImportedWeights import_file(const std::string& path, const ImportOptions& options = {});

// import_file into a model of the file's kind (a LanguageModel, Seq2Seq or Classifier, as about->kind says), the
// file streamed tensor by tensor into the parameters as it is read (io/import_sink.h): memory is the model's
// float32 weights and a 1 MiB staging buffer, never the file nor a mapped copy of it. The same checks and messages
// as import_file; `about`, when given, gets what import_file reports, its `weights` left empty (they are in the
// model). seed 004's files (whose shared per-head projections are expanded) and nanoGPT's with a head of its own
// (not tied) are read whole and mapped, as import_file does.
std::unique_ptr<Model> import_model(const std::string& path, const ImportOptions& options = {},
                                    ImportedWeights* about = nullptr);

// A model as the Hugging Face Hub serves it: a folder holding config.json and model.safetensors (or
// model.safetensors.index.json and the shards it names), and perhaps tokenizer files. config.json decides the
// architecture: "model_type" must be "gpt2" (qkv::Error naming any other, e.g. "llama"); n_layer, n_head,
// n_embd, n_positions (or n_ctx), vocab_size, n_inner (null = 4 n_embd), activation_function ("gelu_new",
// "gelu_pytorch_tanh", "gelu_fast" -> "gelu_tanh"; "gelu"; "relu") and layer_norm_epsilon (1e-5, the only
// epsilon qkv's LayerNorm has) give the model's config, and the weights (format gpt2) must fit it: every
// missing, mis-shaped and left-over tensor is named at once. A folder with only pytorch_model.bin is refused
// with the line that converts it. Errors start with the folder's path.
ImportedWeights import_pretrained(const std::string& dir);
// The same from the files' contents (where there are bytes, not paths): config.json's text and the weights.
ImportedWeights import_pretrained(std::string_view config_json, std::span<const uint8_t> weights);
// How load_pretrained and PretrainedLoader hold a folder's weights ("f32" and "keep" in the CLI and the package).
//   F32   every tensor converted to float32, as trained: the model generates and fine-tunes (the default).
//   Keep  the weight matrices Model::quantize packs (every Linear weight, and the token embedding tied to the head)
//         that the file stores as F16 or BF16 are kept in that format (qkv/quantize.h: WeightFormat::F16 / BF16),
//         written from the file's bytes into the packed storage without a float32 copy ever being allocated, so the
//         load's memory is the half-precision weights (memory().parameters: about half of F32's). The model is the
//         one F32 + quantize(F16 or BF16) makes, bit for bit, and like it is for inference (LoRA adapters train on
//         it). Biases, LayerNorms, positions and any matrix the file stores as F32 (or a tied pair of two dtypes)
//         are float32; a file of F32 tensors gives F32's model.
enum class PretrainedWeights { F32, Keep };
// "f32" or "keep"; qkv::Error naming `argument`, the value and the accepted names otherwise.
PretrainedWeights pretrained_weights_from_string(const std::string& name, const char* argument = "weights");

// import_pretrained(dir), built into a LanguageModel on `device` with the weights loaded: ready to generate
// or to fine-tune with `optimizer`. model.safetensors is streamed straight into the parameters (PretrainedLoader,
// qkv/pretrained_loader.h): memory is the model's weights (float32, or with `weights` Keep the file's half-precision
// matrices) and a small staging buffer, never the file nor a converted copy (shards one after another, all their
// headers checked first). `about`, when given, gets what import_pretrained reports (format, kind, config_json, notes,
// tokenizer_files), its `weights` left empty: they are in the model.
std::unique_ptr<LanguageModel> load_pretrained(const std::string& dir, const OptimizerConfig& optimizer = {},
                                               Device device = Device::CPU, ImportedWeights* about = nullptr,
                                               PretrainedWeights weights = PretrainedWeights::F32);
// The same from config.json's text and the weights' bytes (the package's LanguageModel.importPretrained), each
// tensor copied once, into its parameter.
std::unique_ptr<LanguageModel> load_pretrained(std::string_view config_json, std::span<const uint8_t> weights,
                                               const OptimizerConfig& optimizer = {}, Device device = Device::CPU,
                                               PretrainedWeights held = PretrainedWeights::F32);

// The tokenizer of a Hugging Face folder's files (import_pretrained's tokenizer_files, by file name):
// tokenizer.json when present, else vocab.json + merges.txt (GPT-2's older files); nullopt when there are
// neither. qkv::Error naming the file when one cannot be read as a byte-level BPE.
std::optional<Tokenizer> pretrained_tokenizer(const std::map<std::string, std::string>& files);
// The same read from the folder `dir` (only its tokenizer files; the weights are not read).
std::optional<Tokenizer> pretrained_tokenizer(const std::string& dir);

// The format of a state dict ("qkv", "torch", "nanogpt", "seed000", ...), told by its tensor names;
// qkv::Error for a pickle or a file of no known format.
std::string detect_format(std::span<const uint8_t> bytes);

}  // namespace qkv
