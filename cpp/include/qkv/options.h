#pragma once
// The choices shared by every model of the family (DESIGN.md, "The model family").
#include <string>

namespace qkv {

// GELU is the exact (erf) form (PyTorch's nn.GELU()); GELUTanh its tanh approximation (nn.GELU(approximate='tanh'),
// GPT-2's gelu_new): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
enum class Activation { ReLU, GELU, GELUTanh };
// Post: x = LN(x + sublayer(x)) (the paper, the tutorials). Pre: x = x + sublayer(LN(x)) (GPT-2, stabler).
enum class NormPosition { Post, Pre };
enum class Positions { Sinusoidal, Learned };
enum class Pooling { First, Mean };         // classifier: the first ([CLS]) token, or the mean over non-pad tokens
enum class ClassifierHead { Linear, MLP };  // Linear(d, classes) or Linear(d, d/2) -> ReLU -> dropout -> Linear
// Activation recomputation in training steps (Model::set_recompute): Auto is On with LoRA adapters (the base is
// frozen, so the saved activations are most of a step's memory), Off without.
enum class Recompute { Auto, On, Off };

// Names as they appear in JSON configs; parse_* throw qkv::Error naming the field and the accepted values.
std::string to_string(Activation a);
std::string to_string(NormPosition n);
std::string to_string(Positions p);
std::string to_string(Pooling p);
std::string to_string(ClassifierHead h);
Activation parse_activation(const std::string& s, const char* field = "activation");
NormPosition parse_norm(const std::string& s, const char* field = "norm");
Positions parse_positions(const std::string& s, const char* field = "positions");
Pooling parse_pooling(const std::string& s, const char* field = "pooling");
ClassifierHead parse_head(const std::string& s, const char* field = "head");

}  // namespace qkv
