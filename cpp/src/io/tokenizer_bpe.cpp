// Tokenizer's bpe kind: the Tokenizer around a bpe::Bpe (io/bpe.h), and its factories.
#include "io/bpe.h"
#include "qkv/error.h"
#include "qkv/tokenizer.h"

namespace qkv {

Tokenizer::Tokenizer(std::shared_ptr<const bpe::Bpe> model)
    : kind_(Kind::Bpe), tokens_(model->tokens()), bpe_(std::move(model)) {
  // GPT-2 both starts and separates documents with <|endoftext|>: it is bos and eos when it is special.
  const int32_t eot = bpe_->find("<|endoftext|>");
  bool eot_special = false;
  for (const bpe::AddedToken& a : bpe_->spec().added) eot_special |= a.special && a.id == eot;
  if (eot_special) bos_ = eos_ = eot;
  if (bpe_->spec().unk_token) unk_ = bpe_->find(*bpe_->spec().unk_token);
  specials_ = {false, bos_ >= 0, eos_ >= 0, unk_ >= 0};
}

Tokenizer Tokenizer::train_bpe(std::string_view text, int vocab_size, const BpeTrainOptions& options) {
  return Tokenizer(std::make_shared<const bpe::Bpe>(
      bpe::train(text, vocab_size, {options.special_tokens, options.add_prefix_space})));
}

Tokenizer Tokenizer::from_vocab_merges(std::string_view vocab_json, std::string_view merges_txt) {
  return Tokenizer(std::make_shared<const bpe::Bpe>(bpe::spec_from_vocab_merges(vocab_json, merges_txt)));
}

}  // namespace qkv
