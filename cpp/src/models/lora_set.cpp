// Adding, merging and removing a model's LoRA adapters (models/lora_set.h, qkv/lora.h).
#include "models/lora_set.h"

#include <cmath>
#include <memory>

#include "models/model_core.h"
#include "ops/weight_quantize.h"
#include "qkv/error.h"
#include "runtime/random.h"

namespace qkv::models {

namespace {

// The adapters' dropout streams: "LoRA" in the high word, apart from the base modules' (1, 2, ...).
constexpr uint64_t kLoraStream = 0x4C6F524100000000ull;

bool targeted(const LoraOptions& o, const std::string& target) {
  for (const std::string& t : o.targets)
    if (t == target) return true;
  return false;
}

const char* target_meaning(const std::string& t) {
  if (t == "up" || t == "down") return "a feed-forward layer";
  if (t == "head") return "an output projection";
  if (t == "out") return "an attention out-projection";
  return "an attention in-projection";
}

// The data-parallel group leaves `from` and joins `to` (training moves between the base and the adapters).
void move_sync(ModelCore& core, nn::Parameters& from, nn::Parameters& to) {
  if (!core.sync) return;
  core.sync->detach(from);
  to.ensure_training();
  core.sync->attach(to);
}

}  // namespace

void add_lora(ModelCore& core, const LoraOptions& options) { attach_lora(core, build_lora(core, options)); }

std::unique_ptr<LoraSet> build_lora(ModelCore& core, const LoraOptions& options, bool replacing) {
  check_lora_options(options);
  if (core.lora && !replacing)
    throw Error(detail::cat("add_lora: this model already has LoRA adapters (", to_string(core.lora->options),
                            "): remove_lora() or merge_lora() first (one adapter set at a time)"));
  std::deque<nn::LoraSite>& all = core.params.lora_sites();
  for (const std::string& t : options.targets) {
    bool found = false;
    for (const nn::LoraSite& s : all) found = found || s.target == t;
    check(found, "add_lora: targets has \"", t, "\", but this model has no ", target_meaning(t), " to adapt");
  }
  // Everything is built before anything of the model changes: an error (out of memory) leaves it as it was.
  auto set = std::make_unique<LoraSet>(options, core.optimizer.config(), core.ops());
  const int r = options.rank;
  for (nn::LoraSite& s : all) {
    if (!targeted(options, s.target)) continue;
    nn::LoraAdapter& a = set->adapters.emplace_back();
    a.a = &set->params.add(s.stem + ".lora_A.weight", {r, s.in}, nn::Init::Zeros);
    a.b = &set->params.add(s.stem + ".lora_B.weight", {s.out, r}, nn::Init::Zeros);
    a.in = s.in;
    a.out = s.out;
    a.rank = r;
    a.scale = options.alpha / static_cast<float>(r);
    a.p = options.dropout;
    a.stream = kLoraStream + (set->adapters.size() - 1);
    set->sites.push_back(&s);
  }
  set->params.finalize(options.seed);  // B = 0 (and A, drawn next)
  // A: kaiming_uniform_(a = sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in)), from Rng(seed) in the adapters' order (qkv/lora.h).
  Rng rng(options.seed);
  std::vector<float> host;
  for (const nn::LoraAdapter& a : set->adapters) {
    host.resize(a.a->numel);
    const double bound = 1.0 / std::sqrt(static_cast<double>(a.in));
    for (float& x : host) x = static_cast<float>((2.0 * rng.uniform() - 1.0) * bound);
    core.ops().upload(a.a->value.data(), host.data(), host.size() * sizeof(float));
  }
  return set;
}

void attach_lora(ModelCore& core, std::unique_ptr<LoraSet> set) {
  check(!core.lora, "add_lora: this model already has LoRA adapters");
  // Nothing throws but the group's attach (then undone).
  LoraSet& s = *set;
  core.lora = std::move(set);
  try {
    move_sync(core, core.params, s.params);
  } catch (...) {
    core.lora.reset();
    throw;
  }
  for (size_t i = 0; i < s.sites.size(); ++i) s.sites[i]->adapter = &s.adapters[i];
  core.params.set_frozen(true);  // its gradients and moments released
  ++core.lora_changes;
}

void remove_lora(ModelCore& core) {
  check(core.lora != nullptr, "remove_lora: this model has no LoRA adapters (add_lora first)");
  for (nn::LoraSite* s : core.lora->sites) s->adapter = nullptr;
  core.params.set_frozen(false);
  if (core.sync) core.sync->detach(core.lora->params);
  core.lora.reset();
  ++core.lora_changes;
  // The base trains whole again, from a fresh optimizer (its moments were released with the gradients).
  core.optimizer.restart();
  // The group follows back to the base, unless it is quantized (it does not train: its training calls refuse).
  if (core.sync && core.params.packed_count() == 0) {
    core.params.ensure_training();
    core.sync->attach(core.params);
  }
}

void merge_lora(ModelCore& core) {
  check(core.lora != nullptr, "merge_lora: this model has no LoRA adapters (add_lora first)");
  const LoraSet& set = *core.lora;
  for (const nn::LoraSite* s : set.sites)
    if (s->weight->is_packed())
      throw Error(detail::cat("merge_lora: the base weight ", s->weight->name, " is quantized (",
                              ops::format_name(s->weight->format),
                              "): folding the adapters into it would quantize them again and lose most of what "
                              "they learned; keep the adapters beside the quantized base (save the adapter), or "
                              "merge them into the float32 model (load it, add the adapter, merge, then quantize)"));
  for (const nn::LoraSite* s : set.sites)
    if (s->weight->embedding)
      throw Error(detail::cat("merge_lora: the \"head\" adapter sits on a tied head (", s->weight->name,
                              " is the token embedding too): folding it in would change the embedding lookup as well "
                              "as the head; keep the adapter (save it), or add the adapters without \"head\""));
  // W[row0 : row0 + out] (out, in) += s B (out, r) A (r, in), on the model's device.
  for (size_t i = 0; i < set.sites.size(); ++i) {
    const nn::LoraSite& s = *set.sites[i];
    const nn::LoraAdapter& a = set.adapters[i];
    float* w = s.weight->value.data() + static_cast<size_t>(s.row0) * s.in;
    core.ops().gemm(false, false, s.out, s.in, a.rank, a.scale, a.b->value.data(), a.rank, a.a->value.data(), s.in, 1.f,
                    w, s.in);
  }
  remove_lora(core);
}

}  // namespace qkv::models
