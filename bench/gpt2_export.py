#!/usr/bin/python3
"""The weights of the GPT-2 124M generation benchmark (bench/run_gpt2.sh; issue 35, "Speed and memory"), written
by PyTorch 1.13 (Debian's python3-torch, CPU) in the two layouts its sides read:

  OUT/hub/config.json         GPT2Config's fields (transformers' names and defaults) at GPT-2 124M's shape: 12
                              layers, 12 heads, 768 wide, 1024 positions, vocab 50257, gelu_new
  OUT/hub/model.safetensors   GPT2LMHeadModel's state dict as save_pretrained writes it today: "transformer."
                              names, Conv1D weights stored (in, out), lm_head.weight (tied: the same values as
                              wte), no attn.bias buffers, F32 (497.8 MB of weights + the head's 154.4 MB copy)
  OUT/gpt2.onnx               the same weights as a decoder with a KV cache, as Transformers.js's decoder models
                              (Optimum's "decoder_model_merged" without the if-branch) take it: inputs input_ids
                              (B, T) int64, attention_mask (B, P + T) int64, position_ids (B, T) int64,
                              past_key_values.N.key / .value (B, 12, P, 64) float32 for N < 12 (P = 0 on the first
                              call); outputs logits (B, T, V), present.N.key / .value (B, 12, P + T, 64). Opset 17
                              (LayerNormalization as one op); every length dynamic.
  OUT/expected.json           the prompt (PROMPT ids) and PyTorch's greedy continuation of NEW tokens with the
                              cache (each side's tokens must equal them), and the smallest gap between the two
                              best logits over those steps (a gap near 0 would make equality depend on rounding)

The model is tests/fixtures/make_gpt2_fixtures.py's GPT2LMHeadModel (written as transformers' modeling_gpt2.py
computes it), imported rather than written twice; the cached forward below reuses its modules and adds only the
attention over past keys and values. Random weights, seed 1337: GPT-2's initialisation (N(0, 0.02) matrices)
except the embeddings (wte N(0, 0.1), wpe N(0, 0.3)): with every block near the identity at random weights, the
next token would otherwise be the current one forever; larger position rows make the continuation move.

With --shape large (36 layers, 20 heads, 1280 wide: gpt2-large, 774M parameters, a 3.25 GB folder) or xl (48, 25,
1600: gpt2-xl) and --hub-only, only OUT/hub is written (the quantized benchmark's "gpt2-large in the browser build"
step: bench/run_gpt2_large.sh), with the same initialisation.

usage: gpt2_export.py OUT [--prompt 32] [--new 64] [--threads 2]      (/usr/bin/python3; needs python3-onnx)
       gpt2_export.py OUT --shape large|xl --hub-only
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "fixtures"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import make_gpt2_fixtures as hf  # noqa: E402  (GPT2LMHeadModel, hub_config, write_safetensors)

LAYERS, HEADS, WIDTH, VOCAB, POSITIONS = 12, 12, 768, 50257, 1024
SHAPES = {"124m": (LAYERS, HEADS, WIDTH), "large": (36, 20, 1280), "xl": (48, 25, 1600)}  # layers, heads, width


def prompt_ids(n):
    """The benchmark's prompt: n ids spread over the vocabulary (the same formula in every runner)."""
    return [(i * 7919 + 13) % VOCAB for i in range(n)]


class CachedGPT2(torch.nn.Module):
    """GPT2LMHeadModel's forward with past keys and values, in the ONNX signature above. Block l of `model` runs
    as GPT2Block.forward does, its attention over the past P positions and the T new ones:
      q, k, v = split(ln_1(x) W_attn + b), k = [past_k ; k], v = [past_v ; v]      (B, H, P + T, D)
      a = softmax(q k^T / sqrt(D) + mask) v, mask: key j is seen by query i iff j <= P + i and attention_mask[j]
    """

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, position_ids, *past):
        t = self.model.transformer
        x = t.wte(input_ids) + t.wpe(position_ids)
        B, T = input_ids.shape
        P = past[0].shape[2]
        query_pos = torch.arange(T, dtype=torch.int64) + P
        key_pos = torch.arange(P + T, dtype=torch.int64)
        allowed = (key_pos.view(1, -1) <= query_pos.view(-1, 1)).view(1, 1, T, P + T)
        allowed = allowed & (attention_mask.view(B, 1, 1, P + T) > 0)
        presents = []
        for i, block in enumerate(t.h):
            attn = block.attn
            q, k, v = attn.c_attn(block.ln_1(x)).split(attn.C, dim=2)
            q, k, v = attn._split(q), attn._split(k), attn._split(v)
            k = torch.cat([past[2 * i], k], dim=2)
            v = torch.cat([past[2 * i + 1], v], dim=2)
            presents += [k, v]
            w = torch.matmul(q, k.transpose(-1, -2)) / (attn.head_dim ** 0.5)
            w = torch.where(allowed, w, torch.tensor(torch.finfo(w.dtype).min, dtype=w.dtype))
            a = torch.matmul(F.softmax(w, dim=-1), v)
            x = x + attn.c_proj(a.permute(0, 2, 1, 3).reshape(B, T, attn.C))
            x = x + block.mlp(block.ln_2(x))
        return (self.model.lm_head(t.ln_f(x)), *presents)


def empty_past(batch=1):
    return [torch.zeros(batch, HEADS, 0, WIDTH // HEADS) for _ in range(2 * LAYERS)]


def greedy_cached(cached, prompt, n):
    """n greedy tokens through the cache: the prompt once, then one position a step; the smallest top-2 gap."""
    ids = torch.tensor([prompt], dtype=torch.int64)
    past, out, gaps, length = empty_past(), [], [], 0
    with torch.no_grad():
        for _ in range(n):
            T = ids.shape[1]
            mask = torch.ones(1, length + T, dtype=torch.int64)
            pos = torch.arange(length, length + T, dtype=torch.int64).view(1, T)
            logits, *past = cached(ids, mask, pos, *past)
            top = logits[0, -1].topk(2)
            gaps.append((top.values[0] - top.values[1]).item())
            out.append(int(top.indices[0]))
            length += T
            ids = top.indices[:1].view(1, 1)
    return out, min(gaps)


def write_hub(out, model, cfg):
    """OUT/hub/model.safetensors (save_pretrained's names, no mask buffers) and OUT/hub/config.json."""
    state = {k: v for k, v in model.state_dict().items() if not k.endswith((".attn.bias", ".attn.masked_bias"))}
    hf.write_safetensors(os.path.join(out, "hub", "model.safetensors"), state, {"format": "pt"})
    with open(os.path.join(out, "hub", "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="124m")
    ap.add_argument("--hub-only", action="store_true", help="write OUT/hub only (no ONNX export, no expected.json)")
    args = ap.parse_args()
    if args.shape != "124m" and not args.hub_only:
        ap.error("--shape large|xl writes the Hub folder only: add --hub-only")
    torch.set_num_threads(args.threads)  # make_gpt2_fixtures sets 1 for its deterministic fixtures
    os.makedirs(os.path.join(args.out, "hub"), exist_ok=True)

    torch.manual_seed(1337)
    layers, heads, width = SHAPES[args.shape]
    cfg = hf.hub_config(n_layer=layers, n_head=heads, n_embd=width, n_positions=POSITIONS, vocab_size=VOCAB)
    model = hf.GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        model.transformer.wte.weight.normal_(0.0, 0.1)
        model.transformer.wpe.weight.normal_(0.0, 0.3)
    if args.hub_only:
        write_hub(args.out, model, cfg)
        size = os.path.getsize(os.path.join(args.out, "hub", "model.safetensors"))
        print(f"wrote {args.out}/hub: {args.shape} ({layers} layers, {heads} heads, {width} wide), "
              f"model.safetensors {size / 1e6:.1f} MB")
        return
    cached = CachedGPT2(model).eval()

    # The cached forward agrees with the plain one (positions 0..T-1 at once, and the last position alone).
    prompt = prompt_ids(args.prompt)
    ids = torch.tensor([prompt], dtype=torch.int64)
    with torch.no_grad():
        full = model(ids)
        T = ids.shape[1]
        mine, *past = cached(ids[:, :-1], torch.ones(1, T - 1, dtype=torch.int64),
                             torch.arange(T - 1).view(1, -1), *empty_past())
        last, *_ = cached(ids[:, -1:], torch.ones(1, T, dtype=torch.int64), torch.tensor([[T - 1]]), *past)
    err = max((mine - full[:, :-1]).abs().max().item(), (last - full[:, -1:]).abs().max().item())
    assert err < 1e-3 * full.abs().max().item(), f"the cached forward differs from GPT2LMHeadModel's by {err}"

    t0 = time.time()
    tokens, gap = greedy_cached(cached, prompt, args.new)
    print(f"greedy: {args.new} tokens in {time.time() - t0:.1f} s, {len(set(tokens))} distinct, smallest top-2 gap "
          f"{gap:.4f}; cached vs full logits max |diff| {err:.2e}")
    with open(os.path.join(args.out, "expected.json"), "w") as f:
        json.dump({"prompt": prompt, "greedy": tokens, "min_gap": gap}, f)
        f.write("\n")

    write_hub(args.out, model, cfg)

    names_in = ["input_ids", "attention_mask", "position_ids"]
    names_out = ["logits"]
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "total"},
            "position_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}}
    for i in range(LAYERS):
        for kv in ("key", "value"):
            names_in.append(f"past_key_values.{i}.{kv}")
            names_out.append(f"present.{i}.{kv}")
            axes[names_in[-1]] = {0: "batch", 2: "past"}
            axes[names_out[-1]] = {0: "batch", 2: "total"}
    # Traced with a past of 2 positions and 3 new ones (nothing of size 0 or 1 for the tracer to fold).
    sample = (torch.tensor([prompt[:3]]), torch.ones(1, 5, dtype=torch.int64), torch.tensor([[2, 3, 4]]),
              *[torch.zeros(1, HEADS, 2, WIDTH // HEADS) for _ in range(2 * LAYERS)])
    path = os.path.join(args.out, "gpt2.onnx")
    t0 = time.time()
    with torch.no_grad():
        torch.onnx.export(cached, sample, path, input_names=names_in, output_names=names_out, dynamic_axes=axes,
                          opset_version=17, do_constant_folding=True)
    print(f"wrote {args.out}/hub (config.json, model.safetensors) and {path} "
          f"({os.path.getsize(path) / 1e6:.1f} MB, {time.time() - t0:.1f} s)")


if __name__ == "__main__":
    main()
