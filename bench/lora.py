#!/usr/bin/python3
"""PyTorch side of the LoRA training benchmark (issue 37, bench/README.md "LoRA"); qkv's side is `qkv_bench lora`
(natively) and bench/lora_node.mjs (WebAssembly under Node). bench/run_lora.sh runs all of them.

usage: lora.py --mode lora|full [--threads 2] [--steps 3] [--warmup 1] [--batch 8] [--seq 128] [--rank 8]
       (Debian's /usr/bin/python3, torch 1.13)

The model is GPT-2 124M's shape (vocab 50257, 12 pre-LN layers, 12 heads, width 768, feed-forward 3072, GELU with
tanh, biases, learned positions, the head tied to the token embedding), random weights, random tokens (the speed
does not depend on them), at batch 8 x sequence 128.
  --mode full  every weight trains: AdamW on all 124M parameters.
  --mode lora  the base is frozen and LoRA adapters train, as PEFT's LoraLayer (peft/tuners/lora/layer.py, Linear)
               computes them: y = x W^T + b + (alpha / r) * B (A dropout(x)), A (r, in) Kaiming-uniform(a = sqrt(5)),
               B (out, r) zeros, on GPT-2's c_attn (qkv), attn.c_proj (out), mlp.c_fc (up) and mlp.c_proj (down)
               in every layer (qkv's targets qkv+out+up+down), rank 8, alpha 16, dropout 0; AdamW on the adapters.
Both use qkv's default AdamW (lr 1e-3, betas (0.9, 0.99), eps 1e-8, weight decay 0.1 on matrices) and clip the
gradient norm to 1.0, so that the two libraries run the same optimizer work.

Prints a table and one line for run_lora.sh's report:
  RESULT bench=lora side=PyTorch mode=<m> threads=<n> ... ms_per_step=<mean> tokens_per_s=<n> peak_rss_mib=<MiB>
"""
import argparse
import os
import sys

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--mode", choices=["lora", "full"], required=True)
parser.add_argument("--threads", type=int, default=2)
parser.add_argument("--steps", type=int, default=3, help="timed steps")
parser.add_argument("--warmup", type=int, default=1, help="untimed steps first")
parser.add_argument("--batch", type=int, default=8)
parser.add_argument("--seq", type=int, default=128)
parser.add_argument("--rank", type=int, default=8)
parser.add_argument("--layers", type=int, default=12, help="fewer layers for a smoke run (default: GPT-2's 12)")
args = parser.parse_args()

# The same thread count everywhere, before torch is imported (bench/train_torch.py says why OMP_WAIT_POLICY).
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[var] = str(args.threads)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import math  # noqa: E402
import resource  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.dont_write_bytecode = True

VOCAB, CONTEXT, WIDTH, HEADS = 50257, 1024, 768, 12
ALPHA = 16.0


class LoraLinear(nn.Module):
    """PEFT's LoRA on an nn.Linear: the base frozen, y = base(x) + (alpha / r) * B(A(dropout(x)))."""

    def __init__(self, base: nn.Linear, r: int, alpha: float):
        super().__init__()
        self.base = base
        for p in base.parameters():
            p.requires_grad_(False)
        self.lora_A = nn.Linear(base.in_features, r, bias=False)
        self.lora_B = nn.Linear(r, base.out_features, bias=False)
        nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))  # PEFT's init_lora_weights=True
        nn.init.zeros_(self.lora_B.weight)
        self.scaling = alpha / r

    def forward(self, x):
        return self.base(x) + self.lora_B(self.lora_A(x)) * self.scaling


class Block(nn.Module):
    """GPT-2's block: x + attn(ln_1(x)), then x + mlp(ln_2(x)); causal attention, GELU (tanh)."""

    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(WIDTH)
        self.c_attn = nn.Linear(WIDTH, 3 * WIDTH)
        self.attn_c_proj = nn.Linear(WIDTH, WIDTH)
        self.ln_2 = nn.LayerNorm(WIDTH)
        self.c_fc = nn.Linear(WIDTH, 4 * WIDTH)
        self.mlp_c_proj = nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x, mask):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, HEADS, C // HEADS).transpose(1, 2) for t in (q, k, v))  # (B, H, T, hs)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // HEADS))
        att = F.softmax(att.masked_fill(mask[:T, :T], float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.attn_c_proj(y)
        return x + self.mlp_c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, layers: int):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, WIDTH)
        self.wpe = nn.Embedding(CONTEXT, WIDTH)
        self.h = nn.ModuleList(Block() for _ in range(layers))
        self.ln_f = nn.LayerNorm(WIDTH)
        self.register_buffer("mask", torch.triu(torch.ones(CONTEXT, CONTEXT, dtype=torch.bool), diagonal=1))

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for block in self.h:
            x = block(x, self.mask)
        logits = self.ln_f(x) @ self.wte.weight.t()  # the tied head
        return F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))


def add_lora(model: GPT2, r: int):
    """Freezes the whole model, then wraps qkv's targets qkv, out, up and down (GPT-2's modules) in LoraLinear."""
    for p in model.parameters():
        p.requires_grad_(False)
    for block in model.h:
        for name in ("c_attn", "attn_c_proj", "c_fc", "mlp_c_proj"):
            setattr(block, name, LoraLinear(getattr(block, name), r, ALPHA))


def adamw(params):
    """qkv's default optimizer: AdamW, weight decay on matrices only (nanoGPT's groups)."""
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.99), eps=1e-8)


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def load_average():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def system_blas():
    """The BLAS library this process loaded (Debian's torch takes the system's libblas.so.3: OpenBLAS when installed)."""
    with open("/proc/self/maps") as f:
        libs = {line.split()[-1].rsplit("/", 1)[-1] for line in f if "blas" in line.lower() and "/" in line}
    return "+".join(sorted(libs)) or "?"


def main():
    torch.manual_seed(1)
    torch.set_num_threads(args.threads)
    model = GPT2(args.layers)
    base_mib = sum(p.numel() for p in model.parameters()) * 4 / 2**20
    if args.mode == "lora":
        add_lora(model, args.rank)
    params = [p for p in model.parameters() if p.requires_grad]
    trainable = sum(p.numel() for p in params)
    opt = adamw(params)
    g = torch.Generator().manual_seed(2)
    B, T = args.batch, args.seq
    batches = [(torch.randint(0, VOCAB, (B, T), generator=g), torch.randint(0, VOCAB, (B, T), generator=g))
               for _ in range(4)]

    def step(i):
        idx, tgt = batches[i % len(batches)]
        opt.zero_grad(set_to_none=True)
        loss = model(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return loss.item()

    for i in range(args.warmup):
        step(i)
    ms = []
    for i in range(args.steps):
        t0 = time.perf_counter()
        step(args.warmup + i)
        ms.append(1e3 * (time.perf_counter() - t0))
    mean, median = sum(ms) / len(ms), sorted(ms)[len(ms) // 2]
    tokens_per_s, rss = B * T / (mean / 1e3), peak_rss_mib()
    blas = system_blas()
    print(f"== PyTorch {torch.__version__} GPT-2 124M shape ({args.layers} layers), {args.mode}, B {B} x T {T}, "
          f"{torch.get_num_threads()} threads, trainable {trainable:,} of {sum(p.numel() for p in model.parameters()):,}; "
          f"{args.warmup} warm-up + {args.steps} timed steps; load average {load_average()}")
    print(f"{'side':10} {'mode':6} {'threads':8} {'ms/step':>10} {'median ms':>10} {'tokens/s':>10} {'peak RSS MiB':>13}")
    print(f"{'PyTorch':10} {args.mode:6} {torch.get_num_threads():<8} {mean:>10.1f} {median:>10.1f} {tokens_per_s:>10.1f} "
          f"{rss:>13.1f}")
    print(f"RESULT bench=lora side=PyTorch mode={args.mode} threads={torch.get_num_threads()} torch={torch.__version__} "
          f"blas={blas} layers={args.layers} batch={B} seq={T} rank={args.rank} trainable={trainable} "
          f"base_mib={base_mib:.1f} steps={args.steps} ms_per_step={mean:.3f} median_ms={median:.3f} "
          f"tokens_per_s={tokens_per_s:.2f} peak_rss_mib={rss:.1f} load=\"{load_average()}\"")


if __name__ == "__main__":
    main()
