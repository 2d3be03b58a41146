#include "qkv/options.h"

#include "qkv/error.h"

namespace qkv {

std::string to_string(Activation a) {
  switch (a) {
    case Activation::ReLU: return "relu";
    case Activation::GELU: return "gelu";
    case Activation::GELUTanh: return "gelu_tanh";
  }
  return "gelu";
}
std::string to_string(NormPosition n) { return n == NormPosition::Post ? "post" : "pre"; }
std::string to_string(Positions p) { return p == Positions::Sinusoidal ? "sinusoidal" : "learned"; }
std::string to_string(Pooling p) { return p == Pooling::First ? "first" : "mean"; }
std::string to_string(ClassifierHead h) { return h == ClassifierHead::Linear ? "linear" : "mlp"; }

Activation parse_activation(const std::string& s, const char* field) {
  if (s == "relu") return Activation::ReLU;
  if (s == "gelu") return Activation::GELU;
  if (s == "gelu_tanh") return Activation::GELUTanh;
  throw Error(detail::cat(field, " = \"", s, "\" is unknown: expected \"relu\", \"gelu\" or \"gelu_tanh\""));
}
NormPosition parse_norm(const std::string& s, const char* field) {
  if (s == "post") return NormPosition::Post;
  if (s == "pre") return NormPosition::Pre;
  throw Error(detail::cat(field, " = \"", s, "\" is unknown: expected \"post\" or \"pre\""));
}
Positions parse_positions(const std::string& s, const char* field) {
  if (s == "sinusoidal") return Positions::Sinusoidal;
  if (s == "learned") return Positions::Learned;
  throw Error(detail::cat(field, " = \"", s, "\" is unknown: expected \"sinusoidal\" or \"learned\""));
}
Pooling parse_pooling(const std::string& s, const char* field) {
  if (s == "first") return Pooling::First;
  if (s == "mean") return Pooling::Mean;
  throw Error(detail::cat(field, " = \"", s, "\" is unknown: expected \"first\" or \"mean\""));
}
ClassifierHead parse_head(const std::string& s, const char* field) {
  if (s == "linear") return ClassifierHead::Linear;
  if (s == "mlp") return ClassifierHead::MLP;
  throw Error(detail::cat(field, " = \"", s, "\" is unknown: expected \"linear\" or \"mlp\""));
}

}  // namespace qkv
