#!/usr/bin/python3
"""PyTorch side of the char-level GPT benchmark (bench/README.md, "Char-level GPT vs PyTorch").

nanoGPT's CPU char recipe on tinyshakespeare, written so that qkv can run the *identical* experiment:
the module's parameter names are qkv's, the initial weights are written to a safetensors file that
bench/char_gpt.cpp loads, batches come from the same splitmix64 offsets, and the learning rate of the
t-th optimizer step is qkv's learning_rate_at(t).

usage: char_gpt_torch.py DATA INIT_OUT [STEPS]     (run with Debian's /usr/bin/python3)
prints: INFO ... lines, TRAIN step loss (every step), VAL step loss, TIME train_s ms_per_step tokens_per_s
"""
import os
import sys

THREADS = int(os.environ.get("CHAR_GPT_THREADS", "2"))
os.environ["OMP_NUM_THREADS"] = str(THREADS)        # before importing torch
os.environ["OPENBLAS_NUM_THREADS"] = str(THREADS)
# torch's OpenMP threads busy-wait by default while OpenBLAS's own threads do the matrix products; on a
# 2-core machine they fight for the cores (measured here: ~2000 ms/step active, ~115 ms/step passive).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import ctypes
import json
import math
import struct
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# ---- the recipe ----
N_LAYER, N_HEAD, N_EMBD, CONTEXT, BATCH = 4, 4, 128, 64, 12
TOTAL_STEPS, WARMUP, LR, MIN_LR = 2000, 100, 1e-3, 1e-4
BETAS, EPS, WEIGHT_DECAY, GRAD_CLIP = (0.9, 0.99), 1e-8, 0.1, 1.0
EVAL_BATCHES, EVAL_EVERY = 200, 500
TRAIN_SEED, VAL_SEED, INIT_SEED = 1, 2, 1337

MASK64 = (1 << 64) - 1


class SplitMix64:
    def __init__(self, seed):
        self.state = seed & MASK64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)


def batch(data, rng):
    """(BATCH, CONTEXT) inputs and targets; offsets = splitmix64 % (len(data) - CONTEXT - 1)."""
    offs = [rng.next() % (len(data) - CONTEXT - 1) for _ in range(BATCH)]
    x = torch.stack([data[o:o + CONTEXT] for o in offs])
    y = torch.stack([data[o + 1:o + 1 + CONTEXT] for o in offs])
    return x, y


def learning_rate_at(t):
    """qkv's schedule: the lr of the t-th optimizer step (t = 1, 2, ...)."""
    if t < WARMUP:
        return LR * t / WARMUP
    if t >= TOTAL_STEPS:
        return MIN_LR
    progress = (t - WARMUP) / (TOTAL_STEPS - WARMUP)
    return MIN_LR + 0.5 * (LR - MIN_LR) * (1.0 + math.cos(math.pi * progress))


# ---- the model, with qkv's parameter names ----
class SelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.in_proj_weight = nn.Parameter(torch.empty(3 * N_EMBD, N_EMBD))  # rows: W_q, W_k, W_v
        self.out_proj = nn.Linear(N_EMBD, N_EMBD, bias=False)
        self.register_buffer("mask", torch.tril(torch.ones(CONTEXT, CONTEXT, dtype=torch.bool)))

    def forward(self, x):
        B, T, C = x.shape
        hs = C // N_HEAD
        q, k, v = F.linear(x, self.in_proj_weight).split(C, dim=2)
        q = q.view(B, T, N_HEAD, hs).transpose(1, 2)
        k = k.view(B, T, N_HEAD, hs).transpose(1, 2)
        v = v.view(B, T, N_HEAD, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(~self.mask[:T, :T], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.out_proj(y)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = SelfAttention()
        self.linear1 = nn.Linear(N_EMBD, 4 * N_EMBD, bias=False)
        self.linear2 = nn.Linear(4 * N_EMBD, N_EMBD, bias=False)
        self.norm1 = nn.LayerNorm(N_EMBD, eps=1e-5)
        self.norm2 = nn.LayerNorm(N_EMBD, eps=1e-5)

    def forward(self, x):
        x = x + self.self_attn(self.norm1(x))
        return x + self.linear2(F.gelu(self.linear1(self.norm2(x))))  # exact (erf) GELU


class GPT(nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, N_EMBD)
        self.pos_emb = nn.Embedding(CONTEXT, N_EMBD)
        self.layers = nn.ModuleList([Layer() for _ in range(N_LAYER)])
        self.norm = nn.LayerNorm(N_EMBD, eps=1e-5)
        # GPT-2 initialisation: N(0, 0.02); residual projections N(0, 0.02 / sqrt(2 L)); LayerNorm 1, 0.
        resid_std = 0.02 / math.sqrt(2 * N_LAYER)
        for name, p in self.named_parameters():
            if name.endswith("out_proj.weight") or name.endswith("linear2.weight"):
                nn.init.normal_(p, 0.0, resid_std)
            elif ".norm" in name or name.startswith("norm."):
                nn.init.ones_(p) if name.endswith("weight") else nn.init.zeros_(p)
            else:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx, targets=None):
        """The loss against targets; without targets, the logits (B, T, vocab)."""
        B, T = idx.shape
        x = self.tok_emb(idx) + self.pos_emb.weight[:T]
        for layer in self.layers:
            x = layer(x)
        logits = self.norm(x) @ self.tok_emb.weight.t()  # tied LM head
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def save_safetensors(path, tensors):
    """The safetensors format with the stdlib: u64 LE header size, JSON header padded to 8, F32 LE data."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        b = t.detach().contiguous().to(torch.float32).numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * (-len(h) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def print_config():
    """INFO lines: torch's threads, its BLAS and OpenMP configuration, and the OpenBLAS it runs on."""
    print(f"INFO torch {torch.__version__}  torch.get_num_threads() = {torch.get_num_threads()}")
    for line in torch.__config__.show().splitlines() + torch.__config__.parallel_info().splitlines():
        line = line.strip()
        if line.startswith("- Build settings:"):  # long: keep only the BLAS / LAPACK / OpenMP entries
            keep = [kv.strip() for kv in line.split(":", 1)[1].split(",")
                    if kv.strip().split("=")[0] in ("BLAS_INFO", "LAPACK_INFO", "USE_OPENMP", "USE_MKLDNN")]
            print("INFO  - Build settings: " + ", ".join(keep))
        elif any(k in line.lower() for k in ("blas", "lapack", "openmp", "threads", "mkl")):
            print("INFO  " + line)
    print(f"INFO OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']} "
          f"OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']} "
          f"OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']} "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")
    try:  # the BLAS torch's matrix products go through (Debian: libblas.so.3 -> OpenBLAS when installed)
        ob = ctypes.CDLL("libopenblas.so.0")
        ob.openblas_get_config.restype = ctypes.c_char_p
        ob.openblas_get_corename.restype = ctypes.c_char_p
        print(f"INFO OpenBLAS {ob.openblas_get_config().decode()}; core {ob.openblas_get_corename().decode()}; "
              f"threads {ob.openblas_get_num_threads()}")
    except OSError:
        print("INFO libopenblas.so.0 not found: torch uses the reference BLAS (install libopenblas0-pthread)")


def make_optimizer(model):
    """AdamW with weight decay on the tensors with >= 2 dimensions only."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                              {"params": no_decay, "weight_decay": 0.0}], lr=LR, betas=BETAS, eps=EPS)


def train_step(model, opt, x, y, t):
    """The t-th optimizer step of the recipe (t = 1, 2, ...): forward, backward, clip, AdamW. Returns the loss."""
    loss = model(x, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
    for g in opt.param_groups:
        g["lr"] = learning_rate_at(t)
    opt.step()
    return loss


def main():
    data_path, init_path = sys.argv[1], sys.argv[2]
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else TOTAL_STEPS
    torch.set_num_threads(THREADS)
    torch.manual_seed(INIT_SEED)

    print_config()

    with open(data_path, "r", encoding="utf-8") as f:
        text = f.read()
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    n = len(data) * 9 // 10
    train, val = data[:n], data[n:]
    print(f"INFO chars {len(data)} vocab {len(chars)} train {len(train)} val {len(val)}")

    model = GPT(len(chars))
    save_safetensors(init_path, dict(model.named_parameters()))
    print(f"INFO parameters {sum(p.numel() for p in model.parameters())}; initial weights -> {init_path}")

    opt = make_optimizer(model)

    val_rng = SplitMix64(VAL_SEED)
    val_batches = [batch(val, val_rng) for _ in range(EVAL_BATCHES)]

    @torch.no_grad()
    def evaluate():
        model.eval()
        loss = sum(model(x, y).item() for x, y in val_batches) / len(val_batches)
        model.train()
        return loss

    eval_steps = sorted({s for s in range(0, steps + 1, EVAL_EVERY)} | {steps})
    train_rng = SplitMix64(TRAIN_SEED)
    train_seconds = 0.0
    for step in range(steps + 1):
        if step in eval_steps:
            print(f"VAL {step} {evaluate():.6f}", flush=True)
        if step == steps:
            break
        x, y = batch(train, train_rng)
        t0 = time.perf_counter()
        loss = train_step(model, opt, x, y, step + 1)
        train_seconds += time.perf_counter() - t0
        print(f"TRAIN {step + 1} {loss.item():.6f}")
    print(f"TIME {train_seconds:.3f} {1e3 * train_seconds / steps:.2f} {BATCH * CONTEXT * steps / train_seconds:.0f}")


if __name__ == "__main__":
    main()
