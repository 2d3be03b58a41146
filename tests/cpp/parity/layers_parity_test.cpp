// Encoder and decoder layers against torch.nn.TransformerEncoderLayer / TransformerDecoderLayer (PyTorch
// 1.13, tests/fixtures): outputs to 1e-5 and every gradient to 1e-4, relative to the largest magnitude.
#include "nn/transformer_layer.h"
#include "parity/parity_util.h"
#include "qkv/workspace.h"

namespace qkv::layers_parity_test {
namespace {

constexpr double kOutputTol = 1e-5, kGradTol = 1e-4;

struct Sizes {
  int C, H, F;
  Activation act;
  NormPosition norm;
};

Sizes sizes_of(const SafetensorsFile& f) {
  const auto c = test::meta_json(f, "config");
  return {c.at("d_model").get<int>(), c.at("heads").get<int>(), c.at("d_ff").get<int>(),
          parse_activation(c.at("activation").get<std::string>()), parse_norm(c.at("norm").get<std::string>())};
}

std::vector<ParameterView> views(nn::Parameters& params) {
  std::vector<ParameterView> out;
  for (auto& p : params.all()) out.push_back({p.name.c_str(), p.shape, p.value, p.grad, p.m, p.v});
  return out;
}

std::vector<uint8_t> flags(const SafetensorsFile& f, const std::string& name) {
  const auto v = f.ints(name);
  return {v.begin(), v.end()};
}

void run_encoder_case(const std::string& name) {
  SCOPED_TRACE(name);
  const auto f = test::fixture(name);
  const Sizes s = sizes_of(f);
  const auto x = f.floats("input.x"), r = f.floats("input.r");
  const auto pad = flags(f, "input.key_pad");
  const int B = static_cast<int>(f.at("input.x").shape[0]), T = static_cast<int>(f.at("input.x").shape[1]);
  nn::Parameters params;
  nn::EncoderLayer layer(params, "", {s.C, s.H, s.F, s.act, s.norm, true, 0.02f, 0.02f});
  params.finalize(1);
  test::load_params(views(params), f);
  Workspace ws;
  ws.plan([&](Workspace& w) { layer.plan(w, B, T); });
  const nn::AttentionMask mask{pad.data(), f.contains("input.causal")};
  std::vector<float> y(x.size()), dx(x.size());
  layer.forward(y, x, mask, B, T, {});
  test::expect_close("output.y", y, f.floats("output.y"), kOutputTol);
  params.zero_grad();
  layer.backward(dx, r, x, mask, B, T, {});
  test::expect_close("grad_input.x", dx, f.floats("grad_input.x"), kGradTol);
  test::expect_grads(views(params), f, kGradTol);
}

void run_decoder_case(const std::string& name) {
  SCOPED_TRACE(name);
  const auto f = test::fixture(name);
  const Sizes s = sizes_of(f);
  const auto tgt = f.floats("input.tgt"), mem = f.floats("input.memory"), r = f.floats("input.r");
  const auto tpad = flags(f, "input.tgt_key_pad"), mpad = flags(f, "input.memory_key_pad");
  const int B = static_cast<int>(f.at("input.tgt").shape[0]), T = static_cast<int>(f.at("input.tgt").shape[1]);
  const int S = static_cast<int>(f.at("input.memory").shape[1]);
  nn::Parameters params;
  nn::DecoderLayer layer(params, "", {s.C, s.H, s.F, s.act, s.norm, true, 0.02f, 0.02f});
  params.finalize(1);
  test::load_params(views(params), f);
  Workspace ws;
  ws.plan([&](Workspace& w) { layer.plan(w, B, T, S); });
  const nn::AttentionMask self_mask{tpad.data(), true}, mem_mask{mpad.data(), false};
  std::vector<float> y(tgt.size()), dx(tgt.size()), dmem(mem.size(), 0.f);
  layer.forward(y, tgt, mem, self_mask, mem_mask, B, T, S, {});
  test::expect_close("output.y", y, f.floats("output.y"), kOutputTol);
  params.zero_grad();
  layer.backward(dx, dmem, r, tgt, mem, self_mask, mem_mask, B, T, S, {});
  test::expect_close("grad_input.tgt", dx, f.floats("grad_input.tgt"), kGradTol);
  test::expect_close("grad_input.memory", dmem, f.floats("grad_input.memory"), kGradTol);
  test::expect_grads(views(params), f, kGradTol);
}

TEST(ParityLayers, EncoderPostLnRelu) { run_encoder_case("encoder_layer_post_relu"); }
TEST(ParityLayers, EncoderPostLnGelu) { run_encoder_case("encoder_layer_post_gelu"); }
TEST(ParityLayers, EncoderPreLnGelu) { run_encoder_case("encoder_layer_pre_gelu"); }
TEST(ParityLayers, EncoderPreLnRelu) { run_encoder_case("encoder_layer_pre_relu"); }
TEST(ParityLayers, EncoderCausalAndPadding) { run_encoder_case("encoder_layer_causal"); }
TEST(ParityLayers, DecoderPostLnRelu) { run_decoder_case("decoder_layer_post_relu"); }
TEST(ParityLayers, DecoderPreLnGelu) { run_decoder_case("decoder_layer_pre_gelu"); }

}  // namespace
}  // namespace qkv::layers_parity_test
