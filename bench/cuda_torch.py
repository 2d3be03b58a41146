#!/usr/bin/env python3
"""PyTorch-eager peer for the CUDA training benchmarks (issue 9), on the GPU machine (PyTorch 2.x with CUDA).

usage: cuda_torch.py char-gpt|seq2seq [--precision fp32|tf32|bf16] [--mode eager|compile] [--steps N] [--warmup N]
                     [--batch N] [--peak-tflops X] [--profile]

  char-gpt  nanoGPT's "shakespeare-char" GPU config: V 65, 6 pre-LN layers, 6 heads, 384 wide, context 256,
            batch 64, GELU, no biases, tied head, dropout 0 (timing), AdamW (lr 1e-3, betas (0.9, 0.99), wd 0.1 on
            matrices), clip 1.0. Attention through F.scaled_dot_product_attention(is_causal=True), as nanoGPT.
  seq2seq   the PyTorch translation tutorial's model: vocab 5000, d_model 512, 8 heads, 6+6 post-LN layers,
            d_ff 2048, ReLU, dropout 0 (timing), sinusoidal positions, source and target length 100, batch 64,
            Adam(lr 1e-4, betas (0.9, 0.98), eps 1e-9), cross-entropy ignoring pad 0.
  --precision fp32 (torch.backends.cuda.matmul.allow_tf32 = False, the default), tf32 (True), or bf16: autocast to
  bfloat16 around the forward and the loss (fp32 weights and optimizer state, as qkv's --precision bf16).
  --mode eager (the default) or compile: torch.compile(model) (the default inductor backend); its compilation
  happens in the warm-up steps, which are not timed.

Batches are random token ids (speed does not depend on them; no padding). Steps are timed with CUDA events
around each step after the warm-up; the median is reported, and beside it the timed loop's wall time over its
steps (wall_ms_per_step: qkv's queued loop is timed so). MFU = model FLOPs per step (below) / step time /
the GPU's dense peak for the precision (H100 SXM: fp32 66.9, tf32 494.7 TFLOP/s; H100 PCIe: 51.2, 378;
--peak-tflops overrides). Model FLOPs per step, as nanoGPT's estimate_mfu (PaLM appendix B):
  6 * (non-embedding parameters) * tokens + 12 * layers * C * T per token for attention (full T x T, even causal).
--profile: after the warm-up, the --steps steps under torch.profiler instead of the timing: the GPU time of each
kernel per step, largest first (to set beside Nsight Compute's per-kernel durations of qkv's step, issue 34).
Prints a table and one line per run:
  RESULT bench=<name> side=PyTorch|PyTorch-compile precision=<p> device="<gpu>" ms_per_step=<median> tokens_per_s=<n> mfu=<x>
"""
import argparse
import contextlib
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("bench", choices=["char-gpt", "seq2seq"])
parser.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default="fp32")
parser.add_argument("--mode", choices=["eager", "compile"], default="eager")
parser.add_argument("--steps", type=int, default=50)
parser.add_argument("--warmup", type=int, default=10)
parser.add_argument("--batch", type=int, default=64)
parser.add_argument("--peak-tflops", type=float, default=0.0)
parser.add_argument("--profile", action="store_true")
args = parser.parse_args()

if not torch.cuda.is_available():
    sys.exit("cuda_torch.py: no CUDA device visible to PyTorch (torch.cuda.is_available() is False)")
dev = torch.device("cuda")
torch.backends.cuda.matmul.allow_tf32 = args.precision == "tf32"
torch.backends.cudnn.allow_tf32 = args.precision == "tf32"
sys.dont_write_bytecode = True


def peak_tflops(name, precision):
    if args.peak_tflops > 0:
        return args.peak_tflops
    table = {  # dense, no sparsity
        "H100 PCIe": {"fp32": 51.2, "tf32": 378.0, "bf16": 756.0},
        "H100": {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4},  # SXM5 / HBM3
        "H200": {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4},
        "A100": {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0},
    }
    for key in table:
        if key in name:
            return table[key][precision]
    return float("nan")


# ---- char GPT (nanoGPT's model.py, the parts this config uses) ----
class CausalSelfAttention(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.c_attn = nn.Linear(C, 3 * C, bias=False)
        self.c_proj = nn.Linear(C, C, bias=False)
        self.H = H

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C, bias=False)
        self.attn = CausalSelfAttention(C, H)
        self.ln_2 = nn.LayerNorm(C, bias=False)
        self.fc = nn.Linear(C, 4 * C, bias=False)
        self.proj = nn.Linear(4 * C, C, bias=False)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.proj(F.gelu(self.fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, V, T, C, H, L):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.blocks = nn.ModuleList([Block(C, H) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C, bias=False)
        self.lm_head = nn.Linear(C, V, bias=False)
        self.lm_head.weight = self.wte.weight  # tied

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def autocast():
    """bf16: autocast the forward and the loss (weights, gradients and Adam state stay fp32); else nothing."""
    if args.precision == "bf16":
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def run_char_gpt():
    V, T, C, H, L, B = 65, 256, 384, 6, 6, args.batch
    torch.manual_seed(1337)
    model = GPT(V, T, C, H, L).to(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.99), fused=True)
    n_params = sum(p.numel() for p in model.parameters()) - model.wpe.weight.numel()  # nanoGPT's count
    flops = (6 * n_params + 12 * L * C * T) * B * T
    g = torch.Generator(device=dev).manual_seed(1)
    pool = [(torch.randint(0, V, (B, T), device=dev, generator=g), torch.randint(0, V, (B, T), device=dev, generator=g))
            for _ in range(8)]

    fwd = torch.compile(model) if args.mode == "compile" else model

    def step(i):
        x, y = pool[i % len(pool)]
        with autocast():
            loss = fwd(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    return f"char GPT L{L} H{H} C{C} T{T} B{B}", step, flops, B * T


# ---- Seq2Seq (the PyTorch translation tutorial's model, seq-first) ----
class Seq2Seq(nn.Module):
    def __init__(self, V, C, H, L, F_, maxlen=5000):
        super().__init__()
        self.transformer = nn.Transformer(d_model=C, nhead=H, num_encoder_layers=L, num_decoder_layers=L,
                                          dim_feedforward=F_, dropout=0.0)
        self.generator = nn.Linear(C, V)
        self.src_emb = nn.Embedding(V, C)
        self.tgt_emb = nn.Embedding(V, C)
        den = torch.exp(-torch.arange(0, C, 2) * math.log(10000) / C)
        pos = torch.arange(0, maxlen).reshape(maxlen, 1)
        pe = torch.zeros((maxlen, C))
        pe[:, 0::2] = torch.sin(pos * den)
        pe[:, 1::2] = torch.cos(pos * den)
        self.register_buffer("pe", pe.unsqueeze(-2))
        self.C = C

    def forward(self, src, tgt, tgt_mask):
        s = self.src_emb(src) * math.sqrt(self.C) + self.pe[: src.size(0)]
        t = self.tgt_emb(tgt) * math.sqrt(self.C) + self.pe[: tgt.size(0)]
        return self.generator(self.transformer(s, t, tgt_mask=tgt_mask))


def run_seq2seq():
    V, C, H, L, F_, S, T, B = 5000, 512, 8, 6, 2048, 100, 100, args.batch
    torch.manual_seed(0)
    model = Seq2Seq(V, C, H, L, F_).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=True)
    loss_fn = nn.CrossEntropyLoss(ignore_index=0)
    tgt_mask = nn.Transformer.generate_square_subsequent_mask(T - 1, device=dev)
    emb = model.src_emb.weight.numel() + model.tgt_emb.weight.numel()
    n_enc = sum(p.numel() for p in model.transformer.encoder.parameters())
    n_dec = sum(p.numel() for p in model.transformer.decoder.parameters()) + model.generator.weight.numel()
    assert n_enc + n_dec + emb + model.generator.bias.numel() == sum(p.numel() for p in model.parameters())
    Tt = T - 1  # teacher forcing: the decoder reads tgt[:-1]
    flops = 6 * (n_enc * B * S + n_dec * B * Tt) + 12 * C * L * (B * S * S + B * Tt * Tt + B * Tt * S)
    g = torch.Generator(device=dev).manual_seed(1)
    pool = [(torch.randint(1, V, (S, B), device=dev, generator=g), torch.randint(1, V, (T, B), device=dev, generator=g))
            for _ in range(4)]

    fwd = torch.compile(model) if args.mode == "compile" else model

    def step(i):
        src, tgt = pool[i % len(pool)]
        with autocast():
            logits = fwd(src, tgt[:-1], tgt_mask)
            loss = loss_fn(logits.reshape(-1, V), tgt[1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return f"Seq2Seq 6+6 d512 h8 S{S} T{T} B{B}", step, flops, B * Tt


def device_us(event):
    """An averaged profiler event's own GPU time in microseconds (renamed from cuda_ to device_ in PyTorch 2.4)."""
    for attr in ("self_device_time_total", "self_cuda_time_total"):
        if hasattr(event, attr):
            return getattr(event, attr)
    return 0.0


def profile(name, step):
    """The GPU time per step of each kernel (and copy or memset), from torch.profiler over --steps steps."""
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for i in range(args.steps):
            step(args.warmup + i)
        torch.cuda.synchronize()
    # The GPU's own events only (kernels, copies, memsets): an operator's self GPU time repeats its kernels'.
    gpu = torch.autograd.DeviceType.CUDA
    rows = sorted(((device_us(e), e.count, e.key) for e in prof.key_averages()
                   if getattr(e, "device_type", gpu) == gpu and device_us(e) > 0), reverse=True)
    total = sum(r[0] for r in rows)
    print(f"\n== PyTorch {torch.__version__} {args.mode}, {name}, {args.precision}, {torch.cuda.get_device_name()}: "
          f"GPU time per step by kernel over {args.steps} profiled steps, {total / args.steps / 1e3:.3f} ms in all")
    print(f"{'us/step':>9} {'share':>6} {'calls/step':>10}  kernel")
    for us, count, key in rows[:40]:
        print(f"{us / args.steps:>9.1f} {100 * us / total:>5.1f}% {count / args.steps:>10.1f}  {key[:140]}")


def main():
    name, step, flops, tokens = run_char_gpt() if args.bench == "char-gpt" else run_seq2seq()
    for i in range(args.warmup):
        step(i)
    torch.cuda.synchronize()
    if args.profile:
        return profile(name, step)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(args.steps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(args.steps)]
    wall_start = time.perf_counter()
    for i in range(args.steps):
        starts[i].record()
        step(args.warmup + i)
        ends[i].record()
    torch.cuda.synchronize()
    # The loop's wall time over its steps, qkv's queued figure's measure (the host runs ahead; nothing is read).
    wall_ms = 1e3 * (time.perf_counter() - wall_start) / args.steps
    ms = sorted(s.elapsed_time(e) for s, e in zip(starts, ends))
    median = ms[len(ms) // 2]
    gpu = torch.cuda.get_device_name()
    peak = peak_tflops(gpu, args.precision)
    mfu = flops / (median / 1e3) / (peak * 1e12)
    side = "PyTorch" if args.mode == "eager" else "PyTorch-compile"
    print(f"\n== PyTorch {torch.__version__} {args.mode}, {name}, {args.precision}, {gpu}; "
          f"{args.warmup} warm-up + {args.steps} timed steps")
    print(f"{'side':10} {'ms/step':>9} {'tokens/s':>12} {'TFLOP/s':>9} {'MFU':>7}")
    print(f"{side:10} {median:>9.2f} {tokens / (median / 1e3):>12.0f} {flops / (median / 1e3) / 1e12:>9.1f} "
          f"{100 * mfu:>6.1f}%   (the loop's wall time: {wall_ms:.2f} ms/step)")
    print(f"RESULT bench={args.bench} side={side} precision={args.precision} device=\"{gpu}\" torch={torch.__version__} "
          f"batch={args.batch} ms_per_step={median:.3f} wall_ms_per_step={wall_ms:.3f} "
          f"tokens_per_s={tokens / (median / 1e3):.1f} "
          f"model_tflop_per_step={flops / 1e12:.4f} peak_tflops={peak} mfu={mfu:.4f}")


main()
