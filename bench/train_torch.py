#!/usr/bin/python3
"""PyTorch side of the CPU training-speed benchmarks (bench/README.md); qkv's side is `qkv_bench char-gpt|seq2seq`.

usage: train_torch.py char-gpt|seq2seq|generate [--threads N] [--steps N] [--warmup N] [--batch N]
       (Debian's /usr/bin/python3)

  char-gpt  nanoGPT's CPU char config exactly as bench/char_gpt_torch.py builds and trains it (imported from there):
            V 65, 4 pre-LN layers, 4 heads, 128 wide, context 64, batch 12; AdamW, clip 1.0, the lr schedule.
  seq2seq   the PyTorch translation tutorial's model (TokenEmbedding x sqrt(d), PositionalEncoding,
            nn.Transformer, generator) at vocab 5000, d_model 512, 8 heads, 6+6 layers, d_ff 2048, dropout 0;
            source and target length 100, batch 64, Adam(lr 1e-4, betas (0.9, 0.98), eps 1e-9), cross-entropy
            ignoring pad 0. Tokens are uniform in [1, 5000): no padding, so tokens/s counts batch x 100 target tokens.
  generate  the char GPT above at context 256 (random weights): 256 tokens at batch 1 after a 1-token prompt with
            nanoGPT's `generate` loop (no KV cache: each token re-runs the last 256 tokens, then softmax and
            torch.multinomial), under torch.no_grad(). --steps: timed runs (default 5). qkv's side: `qkv_bench generate`.

Batches are random token ids (speed does not depend on them). Prints a table and one line for bench/cpu_report.py:
  RESULT bench=<name> side=PyTorch threads=<n> ... ms_per_step=<mean> tokens_per_s=<n> peak_rss_mib=<MiB>
"""
import argparse
import os
import sys

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("bench", choices=["char-gpt", "seq2seq", "generate"])
parser.add_argument("--threads", type=int, default=2)
parser.add_argument("--steps", type=int, default=0, help="timed steps (default: char-gpt 200, seq2seq 5)")
parser.add_argument("--warmup", type=int, default=-1, help="untimed steps first (default: char-gpt 10, seq2seq 2)")
parser.add_argument("--batch", type=int, default=0, help="batch size (default: char-gpt 12, seq2seq 64)")
args = parser.parse_args()

# The same thread count everywhere, before torch is imported. OMP_WAIT_POLICY=PASSIVE: Debian's torch runs its
# matrix products in OpenBLAS's threads while its OpenMP threads would busy-wait beside them (bench/README.md).
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "CHAR_GPT_THREADS"):
    os.environ[var] = str(args.threads)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import math  # noqa: E402
import resource  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import char_gpt_torch  # noqa: E402  (the char GPT model, its optimizer and its training step)


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # ru_maxrss is in KiB on Linux


def load_average():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def time_steps(warmup, steps, step):
    """Runs `warmup` untimed steps, then times `steps` steps one by one; returns (mean ms, median ms)."""
    for i in range(warmup):
        step(i)
    ms = []
    for i in range(steps):
        t0 = time.perf_counter()
        step(warmup + i)
        ms.append(1e3 * (time.perf_counter() - t0))
    return sum(ms) / len(ms), sorted(ms)[len(ms) // 2]


def report(bench, extra, steps, mean_ms, median_ms, tokens_per_step):
    tokens_per_s, rss, threads = tokens_per_step / (mean_ms / 1e3), peak_rss_mib(), torch.get_num_threads()
    print(f"{'side':10} {'threads':8} {'ms/step':>8} {'median ms':>10} {'tokens/s':>12} {'peak RSS MiB':>14}")
    print(f"{'PyTorch':10} {threads:<8} {mean_ms:>8.2f} {median_ms:>10.2f} {tokens_per_s:>12.0f} {rss:>14.1f}")
    print(f"RESULT bench={bench} side=PyTorch threads={threads} torch={torch.__version__} {extra} steps={steps} "
          f"ms_per_step={mean_ms:.3f} median_ms={median_ms:.3f} tokens_per_s={tokens_per_s:.1f} peak_rss_mib={rss:.1f} "
          f"load=\"{load_average()}\"")


# ---- char GPT: bench/char_gpt_torch.py's model and step ----
def run_char_gpt():
    vocab, pool = 65, 16  # random batches, cycled
    B, T = args.batch or char_gpt_torch.BATCH, char_gpt_torch.CONTEXT
    steps, warmup = args.steps or 200, args.warmup if args.warmup >= 0 else 10
    torch.manual_seed(char_gpt_torch.INIT_SEED)
    model = char_gpt_torch.GPT(vocab)
    opt = char_gpt_torch.make_optimizer(model)
    g = torch.Generator().manual_seed(1)
    xs = torch.randint(0, vocab, (pool, B, T), generator=g)
    ys = torch.randint(0, vocab, (pool, B, T), generator=g)
    print(f"\n== PyTorch char GPT training step (bench/char_gpt_torch.py), B {B} x T {T}, "
          f"{torch.get_num_threads()} threads; {warmup} warm-up + {steps} timed steps; load average {load_average()}")
    mean_ms, median_ms = time_steps(warmup, steps,
                                    lambda i: char_gpt_torch.train_step(model, opt, xs[i % pool], ys[i % pool], i + 1))
    report("char-gpt", f"config=recipe batch={B} seq={T}", steps, mean_ms, median_ms, B * T)


# ---- Seq2Seq: the PyTorch translation tutorial's model ----
# (https://pytorch.org/tutorials/beginner/translation_transformer.html: seq-first tensors, as there)
PAD_IDX = 0


class PositionalEncoding(nn.Module):
    def __init__(self, emb_size, dropout, maxlen=5000):
        super().__init__()
        den = torch.exp(-torch.arange(0, emb_size, 2) * math.log(10000) / emb_size)
        pos = torch.arange(0, maxlen).reshape(maxlen, 1)
        pos_embedding = torch.zeros((maxlen, emb_size))
        pos_embedding[:, 0::2] = torch.sin(pos * den)
        pos_embedding[:, 1::2] = torch.cos(pos * den)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pos_embedding", pos_embedding.unsqueeze(-2))

    def forward(self, token_embedding):
        return self.dropout(token_embedding + self.pos_embedding[:token_embedding.size(0), :])


class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size, emb_size):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, emb_size)
        self.emb_size = emb_size

    def forward(self, tokens):
        return self.embedding(tokens.long()) * math.sqrt(self.emb_size)


class Seq2SeqTransformer(nn.Module):
    def __init__(self, num_encoder_layers, num_decoder_layers, emb_size, nhead, src_vocab_size, tgt_vocab_size,
                 dim_feedforward, dropout):
        super().__init__()
        self.transformer = nn.Transformer(d_model=emb_size, nhead=nhead, num_encoder_layers=num_encoder_layers,
                                          num_decoder_layers=num_decoder_layers, dim_feedforward=dim_feedforward,
                                          dropout=dropout)
        self.generator = nn.Linear(emb_size, tgt_vocab_size)
        self.src_tok_emb = TokenEmbedding(src_vocab_size, emb_size)
        self.tgt_tok_emb = TokenEmbedding(tgt_vocab_size, emb_size)
        self.positional_encoding = PositionalEncoding(emb_size, dropout=dropout)

    def forward(self, src, trg, src_mask, tgt_mask, src_padding_mask, tgt_padding_mask, memory_key_padding_mask):
        src_emb = self.positional_encoding(self.src_tok_emb(src))
        tgt_emb = self.positional_encoding(self.tgt_tok_emb(trg))
        outs = self.transformer(src_emb, tgt_emb, src_mask, tgt_mask, None, src_padding_mask, tgt_padding_mask,
                                memory_key_padding_mask)
        return self.generator(outs)


def generate_square_subsequent_mask(sz):
    mask = (torch.triu(torch.ones((sz, sz))) == 1).transpose(0, 1)
    return mask.float().masked_fill(mask == 0, float("-inf")).masked_fill(mask == 1, float(0.0))


def create_mask(src, tgt):
    src_seq_len, tgt_seq_len = src.shape[0], tgt.shape[0]
    tgt_mask = generate_square_subsequent_mask(tgt_seq_len)
    src_mask = torch.zeros((src_seq_len, src_seq_len)).type(torch.bool)
    src_padding_mask = (src == PAD_IDX).transpose(0, 1)
    tgt_padding_mask = (tgt == PAD_IDX).transpose(0, 1)
    return src_mask, tgt_mask, src_padding_mask, tgt_padding_mask


def run_seq2seq():
    vocab, length = 5000, 100
    B = args.batch or 64
    steps, warmup = args.steps or 5, args.warmup if args.warmup >= 0 else 2
    torch.manual_seed(0)
    model = Seq2SeqTransformer(6, 6, 512, 8, vocab, vocab, 2048, dropout=0.0)
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    loss_fn = torch.nn.CrossEntropyLoss(ignore_index=PAD_IDX)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    model.train()
    g = torch.Generator().manual_seed(1)
    src = torch.randint(1, vocab, (length, B), generator=g)  # (S, B): the tutorial's layout
    tgt_input = torch.randint(1, vocab, (length, B), generator=g)
    tgt_out = torch.randint(1, vocab, (length, B), generator=g)
    n_params = sum(p.numel() for p in model.parameters())

    def step(_):
        src_mask, tgt_mask, src_padding_mask, tgt_padding_mask = create_mask(src, tgt_input)
        logits = model(src, tgt_input, src_mask, tgt_mask, src_padding_mask, tgt_padding_mask, src_padding_mask)
        optimizer.zero_grad()
        loss = loss_fn(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1))
        loss.backward()
        optimizer.step()

    print(f"\n== PyTorch Seq2Seq training step (tutorial), B {B}, source and target length {length}, "
          f"{torch.get_num_threads()} threads; {warmup} warm-up + {steps} timed steps; {n_params} parameters; "
          f"load average {load_average()}")
    mean_ms, median_ms = time_steps(warmup, steps, step)
    report("seq2seq", f"batch={B} seq={length}", steps, mean_ms, median_ms, B * length)


# ---- Generation: nanoGPT's loop on the char GPT at context 256 ----
def run_generate():
    vocab, tokens = 65, 256
    char_gpt_torch.CONTEXT = 256  # the model reads it when built: the position table and the causal mask
    runs, warmup = args.steps or 5, args.warmup if args.warmup >= 0 else 1
    torch.manual_seed(char_gpt_torch.INIT_SEED)
    model = char_gpt_torch.GPT(vocab).eval()
    block = char_gpt_torch.CONTEXT

    @torch.no_grad()
    def generate(seed):
        torch.manual_seed(seed)
        idx = torch.zeros((1, 1), dtype=torch.long)
        for _ in range(tokens):  # nanoGPT model.py GPT.generate, temperature 1, no top-k
            idx_cond = idx if idx.size(1) <= block else idx[:, -block:]
            logits = model(idx_cond)[:, -1, :]
            probs = F.softmax(logits, dim=-1)
            idx = torch.cat((idx, torch.multinomial(probs, num_samples=1)), dim=1)
        return idx

    print(f"\n== PyTorch generation (nanoGPT's loop, no KV cache): {tokens} tokens at batch 1 after a 1-token prompt, "
          f"char GPT at context {block}, {torch.get_num_threads()} threads; {warmup} warm-up + {runs} timed runs; "
          f"load average {load_average()}")
    mean_ms, median_ms = time_steps(warmup, runs, generate)
    tokens_per_s = tokens / (median_ms / 1e3)
    print(f"{'side':10} {'cache':8} {'runs':>6} {'median ms':>10} {'tokens/s':>12}")
    print(f"{'PyTorch':10} {'off':8} {runs:>6} {median_ms:>10.2f} {tokens_per_s:>12.0f}")
    print(f"RESULT bench=generate side=PyTorch cache=off threads={torch.get_num_threads()} torch={torch.__version__} "
          f"tokens={tokens} context={block} runs={runs} ms_per_run={median_ms:.3f} tokens_per_s={tokens_per_s:.1f} "
          f"load=\"{load_average()}\"")


if __name__ == "__main__":
    torch.set_num_threads(args.threads)
    char_gpt_torch.print_config()
    {"char-gpt": run_char_gpt, "seq2seq": run_seq2seq, "generate": run_generate}[args.bench]()
