#pragma once
// Model and optimizer configurations as JSON: validated, with defaults for every optional field.
// Keys are the C++ field names (snake_case); enums are strings ("gelu", "pre", "learned", "adamw", ...).
// Reading throws qkv::Error naming the field: an unknown key, a wrong type, a missing required field
// (vocabulary sizes and the model's shape) or an unknown enum name. Values are range-checked where they are
// used: OptimizerConfig on reading, a model config when the model is built.
#include <string>
#include <string_view>

#include "qkv/classifier.h"
#include "qkv/language_model.h"
#include "qkv/optimizer.h"
#include "qkv/seq2seq.h"

namespace qkv {

std::string to_json(const LanguageModelConfig& c);
std::string to_json(const Seq2SeqConfig& c);
std::string to_json(const ClassifierConfig& c);
std::string to_json(const OptimizerConfig& c);

LanguageModelConfig language_model_config_from_json(std::string_view json);
Seq2SeqConfig seq2seq_config_from_json(std::string_view json);
ClassifierConfig classifier_config_from_json(std::string_view json);
OptimizerConfig optimizer_config_from_json(std::string_view json);

}  // namespace qkv
