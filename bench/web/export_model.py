#!/usr/bin/python3
"""The shared inputs of the web benchmarks (bench/README.md, "JavaScript peers"), made by PyTorch.

The char GPT of nanoGPT's CPU recipe (bench/char_gpt_torch.py: 4 pre-LN layers, 4 heads, n_embd 128,
context 64, GELU, no biases, tied head), initialised GPT-2 style with seed 1337, then written three ways so
that every side of every benchmark starts from the *same* weights:

  OUT/char_gpt.safetensors   a qkv checkpoint: the weights under qkv's names (README.md), the model config and
                             the recipe's optimizer (char_gpt_recipe.h) as qkv.config / qkv.optimizer metadata,
                             step 0, no optimizer state. qkv loads it with LanguageModel.load(bytes); the TF.js
                             side reads the same tensors by name.
  OUT/char_gpt_t64.onnx      the logits forward, input ids (1, 64) int64, for ONNX Runtime Web (opset 17,
  OUT/char_gpt_t1.onnx       LayerNormalization as one op); the same for (1, 1). Static shapes: ORT's best case.
  OUT/reference.safetensors  PyTorch's logits for the two latency inputs (input_t64, logits_t64, input_t1,
                             logits_t1); BATCHES training batches (batch_inputs, batch_targets: (N, 12, 64)
                             int32) drawn from tinyshakespeare's first 90% as the quality benchmark draws them
                             (splitmix64 seed 1); and torch_losses, PyTorch's loss at each of the first STEPS
                             recipe steps on those batches, the trajectory the JS sides must reproduce.

usage: export_model.py OUT [--data tinyshakespeare.txt] [--steps 50] [--batches 64]   (Debian's /usr/bin/python3)
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # bench/: the model, its init and the recipe's step live there
os.environ.setdefault("CHAR_GPT_THREADS", "2")

import char_gpt_torch as cg  # noqa: E402  (sets the thread variables before importing torch)
import torch  # noqa: E402


def write_safetensors(path, tensors, metadata):
    """tensors: {name: float32 or int32 tensor}; metadata: {str: str}. u64 LE header size, JSON, raw LE data."""
    kinds = {torch.float32: "F32", torch.int32: "I32"}
    header = {"__metadata__": metadata}
    blobs, offset = [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous()
        b = t.numpy().tobytes()  # little-endian on every machine this runs on (x86-64)
        header[name] = {"dtype": kinds[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * (-len(h) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


class Logits(torch.nn.Module):
    """The GPT's forward up to the logits (B, T, V): what predict() returns and the ONNX model computes."""

    def __init__(self, gpt):
        super().__init__()
        self.gpt = gpt

    def forward(self, idx):
        g = self.gpt
        x = g.tok_emb(idx) + g.pos_emb.weight[: idx.shape[1]]
        for layer in g.layers:
            x = layer(x)
        return g.norm(x) @ g.tok_emb.weight.t()


def load_text(path):
    if path and os.path.exists(path):
        with open(path, "r", encoding="utf-8") as f:
            return f.read(), path
    # The project runs without the data set; the benchmark then trains on a stand-in text (65 distinct
    # characters, so the model keeps its shape). Its losses are not comparable with tinyshakespeare's.
    alphabet = "".join(sorted(set("\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")))
    rng = cg.SplitMix64(7)
    words = ["".join(alphabet[rng.next() % len(alphabet)] for _ in range(1 + rng.next() % 7)) for _ in range(500)]
    text = alphabet + " ".join(words[rng.next() % len(words)] for _ in range(200000))
    return text, "(stand-in text: " + str(path) + " not found)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--data", default=os.path.join(HERE, "..", "..", "..", "shared", "data", "tinyshakespeare.txt"))
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--batches", type=int, default=64)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(cg.THREADS)

    text, source = load_text(args.data)
    chars = sorted(set(text))
    assert len(chars) == 65, f"expected 65 distinct characters, got {len(chars)}"
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    train = data[: len(data) * 9 // 10]

    torch.manual_seed(cg.INIT_SEED)
    model = cg.GPT(len(chars))
    n_params = sum(p.numel() for p in model.parameters())
    print(f"INFO torch {torch.__version__}; data {source}; vocab {len(chars)}; parameters {n_params}")

    # The qkv checkpoint: the config of char_gpt_recipe.h and its optimizer, as qkv's config.h writes them.
    config = {"vocab_size": len(chars), "layers": cg.N_LAYER, "tie_head": True, "context": cg.CONTEXT,
              "d_model": cg.N_EMBD, "heads": cg.N_HEAD, "d_ff": 4 * cg.N_EMBD, "seed": cg.INIT_SEED,
              "activation": "gelu", "norm": "pre", "bias": False, "dropout": 0.0, "positions": "learned",
              "scale_embedding": False, "final_norm": True}
    optimizer = {"kind": "adamw", "lr": cg.LR, "beta1": cg.BETAS[0], "beta2": cg.BETAS[1], "eps": cg.EPS,
                 "weight_decay": cg.WEIGHT_DECAY, "decay_matrices_only": True, "grad_clip": cg.GRAD_CLIP,
                 "schedule": "cosine", "warmup_steps": cg.WARMUP, "total_steps": cg.TOTAL_STEPS,
                 "min_lr": cg.MIN_LR}
    meta = {"qkv.model": "language_model", "qkv.config": json.dumps(config), "qkv.optimizer": json.dumps(optimizer),
            "qkv.step": "0", "qkv.optimizer_state": "false", "qkv.vocab": json.dumps("".join(chars)),
            "bench.parameters": str(n_params), "bench.torch": torch.__version__}
    ckpt = os.path.join(args.out, "char_gpt.safetensors")
    write_safetensors(ckpt, {k: v.float() for k, v in model.named_parameters()}, meta)
    print(f"INFO weights -> {ckpt}")

    # ONNX: the logits forward at each latency shape, from the same weights.
    logits_model = Logits(model).eval()
    ref = {}
    gen = torch.Generator().manual_seed(3)
    for t in (64, 1):
        idx = torch.randint(0, len(chars), (1, t), generator=gen)
        with torch.no_grad():
            ref[f"input_t{t}"] = idx.to(torch.int32)
            ref[f"logits_t{t}"] = logits_model(idx).float()
        path = os.path.join(args.out, f"char_gpt_t{t}.onnx")
        torch.onnx.export(logits_model, (idx,), path, input_names=["ids"], output_names=["logits"],
                          opset_version=17, do_constant_folding=True)
        print(f"INFO ONNX (1, {t}) -> {path}")

    # Training batches and PyTorch's trajectory of the recipe on them (the JS sides must reproduce it).
    rng = cg.SplitMix64(cg.TRAIN_SEED)
    batches = [cg.batch(train, rng) for _ in range(args.batches)]
    ref["batch_inputs"] = torch.stack([x for x, _ in batches]).to(torch.int32)
    ref["batch_targets"] = torch.stack([y for _, y in batches]).to(torch.int32)
    opt = cg.make_optimizer(model)
    losses = []
    for t in range(1, args.steps + 1):
        x, y = batches[(t - 1) % len(batches)]
        losses.append(cg.train_step(model, opt, x, y, t).item())
    ref["torch_losses"] = torch.tensor(losses, dtype=torch.float32)
    print(f"INFO PyTorch recipe steps 1..{args.steps}: loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    path = os.path.join(args.out, "reference.safetensors")
    write_safetensors(path, ref, {"bench.data": source, "bench.torch": torch.__version__,
                                  "bench.parameters": str(n_params)})
    print(f"INFO reference logits, batches and losses -> {path}")


if __name__ == "__main__":
    main()
